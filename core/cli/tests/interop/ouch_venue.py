"""An independent OUCH venue (the ouch-connect package) that keel's engine trades with.

Usage: python ouch_venue.py HOST:PORT SECONDS [--ignore-enter N,...]
Accepts a login, answers every Enter Order with Order Accepted, every Cancel Order with
Order Canceled and every Account Query with its response, built from the ouch-connect
package's own message samples. Enter Orders with the UserRefNums given to --ignore-enter get
no answer and are not kept (an order lost on its way). Any other message is counted under
"other:<name>" (heartbeats aside). Prints READY once listening and a summary line at the end.
"""
import json
import sys
import time

from links_connect.callbacks import DecoratorDriver, on_recv, on_sent
from ouch_connect import SvcManual

ORDERS = {}
IGNORE = set()


def sample(name):
    for s in SvcManual.msg_samples:
        msg = json.loads(s)
        if name in msg.get("SPayload", {}):
            return msg
    raise KeyError(name)


class Venue(DecoratorDriver):
    def __init__(self):
        super().__init__()
        self.counts = {}

    def count(self, key):
        self.counts[key] = self.counts.get(key, 0) + 1

    @on_recv({"LoginRequest": {}})
    def on_login(self, con_id, msg):
        self.count("login")
        self.sender.send({"LoginAccepted": {"session_id": "OUCHCONN01", "sequence_number": "1"}})

    @on_recv({"UPayload": {"EnterOrder": {}}})
    def on_enter(self, con_id, msg):
        self.count("enter")
        order = msg["UPayload"]["EnterOrder"]
        if int(order["user_ref_number"]) in IGNORE:
            self.count("ignored")
            return
        ORDERS[order["user_ref_number"]] = order
        reply = sample("OrderAccepted")
        acc = reply["SPayload"]["OrderAccepted"]
        for key in ("user_ref_number", "side", "quantity", "symbol", "price", "time_in_force", "display", "capacity", "clt_order_id"):
            acc[key] = order[key]
        acc["order_reference_number"] = order["user_ref_number"]
        self.sender.send(reply)

    @on_recv({"UPayload": {"CancelOrder": {}}})
    def on_cancel(self, con_id, msg):
        self.count("cancel")
        ref = msg["UPayload"]["CancelOrder"]["user_ref_number"]
        reply = sample("OrderCanceled")
        can = reply["SPayload"]["OrderCanceled"]
        can["orig_user_ref_number"] = ref
        can["user_ref_number"] = ref
        can["quantity"] = ORDERS.get(ref, {}).get("quantity", 0)
        self.sender.send(reply)

    @on_recv({"UPayload": {"AccountQueryRequest": {}}})
    def on_account_query(self, con_id, msg):
        self.count("account_query")
        reply = sample("AccountQueryResponse")
        reply["SPayload"]["AccountQueryResponse"]["next_user_ref_number"] = max(ORDERS, default=0) + 1
        self.sender.send(reply)

    @on_recv({})
    def on_other(self, con_id, msg):
        name = next(iter(msg), "?")
        if name == "UPayload":
            name = next(iter(msg["UPayload"]), "?")
        if "Beat" not in name:
            self.count(f"other:{name}")

    @on_sent({})
    def on_any_sent(self, con_id, msg):
        pass


def main():
    if len(sys.argv) > 4 and sys.argv[3] == "--ignore-enter":
        IGNORE.update(int(n) for n in sys.argv[4].split(","))
    venue = Venue()
    with SvcManual(sys.argv[1], venue, name="ouch-connect-venue"):
        print("READY", flush=True)
        time.sleep(float(sys.argv[2]))
    print(f"SUMMARY {json.dumps(venue.counts, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
