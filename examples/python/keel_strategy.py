#!/usr/bin/env python3
"""A quoting strategy for keel with the `keel` package (pip install ./sdk/python), the one
docs/strategies.md walks through; examples/c/quoter.c is the same in C.

It quotes one symbol on both sides, `--offset` away from the top of book it reads from the
engine's market data; when the top moves it cancels both quotes and, once both are closed,
quotes again around the new top. Refusals are respected: a transient one ("pause") waits an
exponential back-off, a breaker waits as long as the engine says, a final one ("never") stops
quoting. After `--quotes` pairs, or at SIGINT/SIGTERM, it cancels what is still open, waits for
every order to close, and prints what it did as one JSON line.

    python3 examples/python/keel_strategy.py /dev/shm/keel/strategy-1 \\
        --market-data /dev/shm/keel/md-0 --symbol NVDA --venue sim --quotes 20

Exit: 0 done, 1 stopped on a final refusal, 2 bad arguments, attach or table, 3 engine lost,
4 orders still open 10 s after the stop.
"""

import argparse
import json
import signal
import sys
import time
from collections import Counter

import keel


def say(text: str) -> None:
    print(f"keel_strategy: {text}", file=sys.stderr, flush=True)


def fmt(p: int) -> str:
    """A fixed-point price (4 decimals) as text."""
    return f"{'-' if p < 0 else ''}{abs(p) // 10000}.{abs(p) % 10000:04d}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("channel", help="the strategy's channel file, <[ipc] dir>/strategy-<id>")
    p.add_argument("--market-data", required=True, help="the feed's file, <[ipc] dir>/md-<feed>")
    p.add_argument("--symbol", required=True)
    p.add_argument("--venue", required=True)
    p.add_argument("--quotes", type=int, default=10, help="quote pairs to place, then stop")
    p.add_argument("--qty", type=int, default=10)
    p.add_argument("--offset", type=int, default=100, help="ticks from the top (100 = 0.01)")
    p.add_argument("--table", help="the symbols this strategy was built for, comma-separated: "
                   "refused unless they are the engine's")
    a = p.parse_args()

    try:
        ch = keel.Channel(a.channel, stale_after_s=0.5)
        if a.table:
            ch.declare_table(a.table.split(","), ch.venues)
        md = keel.MarketData(a.market_data)
        ch.wait_live()
        symbol, venue = ch.symbol(a.symbol), ch.venue(a.venue)
    except keel.ChannelError as e:
        print(f"keel_strategy: {e}", file=sys.stderr)
        return 2

    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(True))

    quotes = {}              # order id -> side, for the orders still open
    accepted = set()         # of those, the ones the venue has: a refusal now refuses a cancel
    cancel_sent = set()
    anchor = None            # (best bid, best ask) the open quotes were placed around
    backoff, resume_at, stopped_at = 0.0, 0.0, None
    n = Counter()
    refusals = Counter()
    final = None

    def back_off(now: float) -> None:
        nonlocal backoff, resume_at
        backoff = min(backoff * 2 or 0.01, 1.0)
        resume_at = now + backoff

    def close(order: int) -> None:
        quotes.pop(order, None)
        accepted.discard(order)
        cancel_sent.discard(order)

    def cancel_open() -> None:
        for order in quotes:
            if order not in cancel_sent:
                try:
                    ch.cancel(order)
                    cancel_sent.add(order)
                except keel.RingFull:
                    return              # the next pass sends the rest

    while True:
        ch.beat()
        now = time.monotonic()
        try:
            e = ch.poll()
        except keel.ChannelBroken as err:
            print(f"keel_strategy: {err}", file=sys.stderr)
            return 3
        while e is not None:
            side = quotes.get(getattr(e, "id", None))
            if isinstance(e, keel.Accepted):
                n["accepted"] += 1
                accepted.add(e.id)
                backoff = 0.0
            elif isinstance(e, (keel.PartiallyFilled, keel.Filled)):
                n["bought" if side == keel.BUY else "sold"] += e.qty
                say(f"{'bought' if side == keel.BUY else 'sold'} {e.qty} @ {fmt(e.price)}")
                if isinstance(e, keel.Filled):
                    n["filled"] += 1
                    close(e.id)
            elif isinstance(e, keel.Canceled):
                n["canceled"] += 1
                close(e.id)
            elif isinstance(e, keel.CancelRejected):
                n["cancel_rejected"] += 1          # too late: its fill is on the way
            elif isinstance(e, keel.Unknown):
                n["unknown"] += 1                  # keel asks the venue; never resend
            elif isinstance(e, keel.BreakerOpen):
                n["refused"] += 1
                close(e.id)
                resume_at = now + e.retry_after_ns / 1e9
            elif isinstance(e, keel.Refused) and (side is None or e.id in accepted):
                # Our cancel was refused: the order closed first ("unknown order": its fill or
                # cancel came meanwhile), or a transient reason: cancel it again later.
                n["cancel_refused"] += 1
                cancel_sent.discard(e.id)
            elif isinstance(e, keel.Refused):
                n["refused"] += 1
                refusals[e.reason] += 1
                close(e.id)
                say(f"refused: {e.reason} (advice: {e.advice})")
                if e.advice == "never":
                    final = e.reason
                else:
                    back_off(now)
            elif isinstance(e, (keel.Shed, keel.Throttled, keel.Rejected)):
                n["rejected" if isinstance(e, keel.Rejected) else "refused"] += 1
                refusals[getattr(e, "reason", type(e).__name__)] += 1
                close(e.id)
                say(f"{type(e).__name__}: {getattr(e, 'reason', '')} (backing off)")
                back_off(now)
            elif isinstance(e, keel.EngineRestarted):
                cancel_sent.clear()                # a cancel with no answer may be unread
                cancel_open()
            elif isinstance(e, keel.EngineLost):
                say(f"the engine is gone ({e.state})")
                return 3
            e = ch.poll()

        if stop or final or n["placed"] >= 2 * a.quotes:
            stopped_at = stopped_at or now
            cancel_open()
            if not quotes:
                break
            if now - stopped_at > 10:
                print(f"keel_strategy: still open: {sorted(quotes)}", file=sys.stderr)
                return 4
        else:
            top = md.top(symbol) if md.synced else None
            usable = top is not None and top.bids[0][1] > 0 and top.asks[0][1] > 0
            if quotes:
                if not usable or (top.bids[0][0], top.asks[0][0]) != anchor:
                    if usable and not cancel_sent & quotes.keys():
                        n["moves"] += 1
                        say(f"top moved to {fmt(top.bids[0][0])} / {fmt(top.asks[0][0])}: cancel both")
                    cancel_open()
            elif usable and now >= resume_at and ch.venue_synced(venue):
                anchor = (top.bids[0][0], top.asks[0][0])
                for side, px in ((keel.BUY, anchor[0] - a.offset), (keel.SELL, anchor[1] + a.offset)):
                    order = ch.next_id()
                    try:
                        ch.place(order, venue, symbol, side, a.qty, px)
                    except keel.RingFull:
                        break
                    quotes[order] = side
                    n["placed"] += 1
                say(f"quote {n['placed'] // 2}: buy {a.qty} @ {fmt(anchor[0] - a.offset)}, "
                    f"sell {a.qty} @ {fmt(anchor[1] + a.offset)}")
        time.sleep(0.0002)

    summary = {k: n[k] for k in ("placed", "accepted", "canceled", "filled", "bought", "sold",
                                 "rejected", "refused", "cancel_rejected", "cancel_refused",
                                 "unknown", "moves")}
    summary["refusals"] = dict(refusals)
    summary["stopped"] = f"final refusal: {final}" if final else "done"
    print(json.dumps(summary))
    return 1 if final else 0


if __name__ == "__main__":
    sys.exit(main())
