"""The Python side of bench/src/bin/strategy_rtt.rs, with the `keel` package (sdk/python).

    strategy_client.py CHANNEL ORDERS   one order at a time: place, poll until its Accepted
                                        ("rtt <ns>" per order, time.monotonic_ns), then cancel
                                        it, untimed
"""
import sys
import time

import keel


def wait_for(ch, order, kind):
    while True:
        e = ch.poll()
        if e is None:
            continue
        if getattr(e, "id", None) == order:
            if isinstance(e, kind):
                return
            sys.exit(f"order {order}: {e}")


def main():
    ch = keel.Channel(sys.argv[1], stale_after_s=0.5)
    ch.wait_live()
    while not ch.venue_synced(0):
        ch.beat()
    clock = time.monotonic_ns
    out = []
    for _ in range(int(sys.argv[2])):
        ch.beat()
        order = ch.next_id()
        t0 = clock()
        ch.place(order, 0, 1, keel.BUY, 10, 500000)
        wait_for(ch, order, keel.Accepted)
        out.append(clock() - t0)
        ch.cancel(order)
        wait_for(ch, order, keel.Canceled)
    print("\n".join(f"rtt {ns}" for ns in out))


if __name__ == "__main__":
    main()
