"""An independent OUCH client (the ouch-connect package) trading on keel's venue.

Usage: python ouch_client.py HOST:PORT
Logs in, enters a buy, checks it is accepted, cancels it, checks the cancel; then enters a
sell that the test's market fills. Prints one line per step and exits 0 only if every step
saw the expected answer from keel's venue.
"""
import json
import sys
import time

from links_connect.callbacks import Callback
from ouch_connect import CltManual


class Recorder(Callback):
    def __init__(self):
        super().__init__()
        self.received = []

    def on_recv(self, con_id, msg):
        self.received.append(msg)

    def on_sent(self, con_id, msg):
        pass


def wait_for(rec, kind, timeout=5.0):
    """The first received message of `kind` (a session or OUCH message name), or exit 1."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for msg in rec.received:
            body = msg.get("SPayload", msg)
            if kind in body:
                rec.received.remove(msg)
                return body[kind]
        time.sleep(0.01)
    print(f"FAIL: no {kind} within {timeout}s; received {rec.received}")
    sys.exit(1)


def sample(name):
    for s in CltManual.msg_samples:
        msg = json.loads(s)
        if name in msg.get("UPayload", {}):
            return msg
    raise KeyError(name)


def enter(clt, user_ref, side, qty, price, cl_ord_id):
    msg = sample("EnterOrder")
    order = msg["UPayload"]["EnterOrder"]
    order.update(user_ref_number=user_ref, side=side, quantity=qty, symbol="AAPL", price=price, clt_order_id=cl_ord_id)
    clt.send(msg)


def main():
    rec = Recorder()
    with CltManual(sys.argv[1], rec, name="ouch-connect-client") as clt:
        clt.send({"LoginRequest": {"username": "pyclt", "password": "keel", "session_id": "", "sequence_number": "1"}})
        login = wait_for(rec, "LoginAccepted")
        print(f"login accepted: session={login['session_id']!r} next={login['sequence_number']}")
        enter(clt, 1, "BUY", 100, 10.5, "PY1")
        acc = wait_for(rec, "OrderAccepted")
        assert acc["user_ref_number"] == 1 and acc["quantity"] == 100 and acc["symbol"] == "AAPL", acc
        assert abs(acc["price"] - 10.5) < 1e-9 and acc["order_state"] == "LIVE", acc
        print(f"order accepted: ref={acc['order_reference_number']} price={acc['price']}")
        clt.send({"UPayload": {"CancelOrder": {"user_ref_number": 1, "quantity": 0}}})
        can = wait_for(rec, "OrderCanceled")
        assert can["user_ref_number"] == 1 and can["quantity"] == 100, can
        print(f"order canceled: qty={can['quantity']} reason={can['cancel_reason']}")
        enter(clt, 2, "SELL", 40, 10.0, "PY2")
        wait_for(rec, "OrderAccepted")
        print("READY-FOR-FILL", flush=True)
        ex = wait_for(rec, "OrderExecuted", timeout=10.0)
        assert ex["user_ref_number"] == 2 and ex["quantity"] == 40, ex
        print(f"order executed: qty={ex['quantity']} price={ex['price']}")
        enter(clt, 2, "BUY", 1, 10.0, "PY3")
        rej = wait_for(rec, "OrderRejected")
        print(f"duplicate UserRefNum rejected: reason={rej['reject_reason']}")
    print("OK")


if __name__ == "__main__":
    main()
