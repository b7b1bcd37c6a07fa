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
        symbol, venue = ch.symbol(a.symbol), ch.venue(a.venue)
    except keel.ChannelError as e:
        say(str(e))
        return 2
    try:
        ch.wait_live()
    except keel.ChannelError as e:
        say(str(e))
        return 3

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
    why = "done"
    # Ids below the first we allocate are a previous process's on this channel: the engine's
    # answers to them (its cancels when that process was lost) may still be unread.
    first_id = ch.next_id()
    # The market data's heartbeat, and when it last moved: a file whose engine is gone (or a
    # stale copy) is never quoted on.
    md_beat, md_moved = md.heartbeat, None

    def back_off(now: float) -> None:
        nonlocal backoff, resume_at
        backoff = min(backoff * 2 or 0.01, 1.0)
        resume_at = now + backoff

    def close(order: int) -> None:
        quotes.pop(order, None)
        accepted.discard(order)
        cancel_sent.discard(order)

    def poll():
        """The next event, None, or False when the channel is broken (a bad record is skipped,
        said and counted: nothing was done for it)."""
        while True:
            try:
                return ch.poll()
            except keel.ChannelBroken as err:
                say(str(err))
                return False
            except keel.ChannelError as err:
                say(str(err))
                n["bad_records"] += 1

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
        e = poll()
        if e is False:
            return 3
        while e is not None:
            if getattr(e, "id", first_id) < first_id:
                n["foreign"] += 1
                e = poll()
                continue
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
                # Canceled before the venue had it: withdrawn inside keel (our cancel overtook
                # the queued new order), never at the venue.
                n["canceled" if e.id in accepted or side is None else "withdrawn"] += 1
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
                why = "engine lost"
                break
            e = poll()
        if why == "engine lost":
            break

        if stop or final or n["placed"] >= 2 * a.quotes:
            stopped_at = stopped_at or now
            cancel_open()
            if not quotes:
                break
            if now - stopped_at > 10:
                say(f"still open: {sorted(quotes)}")
                why = "orders still open"
                break
        else:
            if md.heartbeat != md_beat:
                md_beat, md_moved = md.heartbeat, now
            top = md.top(symbol)
            usable = (top is not None and md.synced and md_moved is not None
                      and now - md_moved < 0.5 and top.bids[0][1] > 0 and top.asks[0][1] > 0)
            if top is None:
                pass                            # the writer was in the slot: decide next pass
            elif quotes:
                if not usable or (top.bids[0][0], top.asks[0][0]) != anchor:
                    if usable and not cancel_sent & quotes.keys():
                        n["moves"] += 1
                        say(f"top moved to {fmt(top.bids[0][0])} / {fmt(top.asks[0][0])}: cancel both")
                    cancel_open()
            elif usable and now >= resume_at and ch.venue_synced(venue):
                anchor = (top.bids[0][0], top.asks[0][0])
                sent = 0
                for side, px in ((keel.BUY, anchor[0] - a.offset), (keel.SELL, anchor[1] + a.offset)):
                    order = ch.next_id()
                    try:
                        ch.place(order, venue, symbol, side, a.qty, px)
                    except keel.RingFull:
                        break
                    quotes[order] = side
                    n["placed"] += 1
                    sent += 1
                if sent == 2:
                    say(f"quote {n['placed'] // 2}: buy {a.qty} @ {fmt(anchor[0] - a.offset)}, "
                        f"sell {a.qty} @ {fmt(anchor[1] + a.offset)}")
        time.sleep(0.0002)

    summary = {k: n[k] for k in ("placed", "accepted", "canceled", "withdrawn", "filled", "bought",
                                 "sold", "rejected", "refused", "cancel_rejected",
                                 "cancel_refused", "unknown", "moves", "foreign")}
    summary["stopped"] = f"final refusal: {final}" if final else why
    summary["refusals"] = dict(refusals)
    print(json.dumps(summary))
    return {"engine lost": 3, "orders still open": 4}.get(why, 1 if final else 0)


if __name__ == "__main__":
    sys.exit(main())
