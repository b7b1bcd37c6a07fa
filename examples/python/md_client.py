"""A market-data client for keel's WebSocket protocol (docs/market-data.md) that keeps one
symbol's book from a list of servers — `keel venue`'s own, or any number of `keel gateway`s:
when its connection is lost it moves to the next address after a jittered pause and resyncs
by snapshot. Needs the `websockets` package (PyPI).

    python md_client.py ws://127.0.0.1:16001/md,ws://127.0.0.1:16002/md AAPL [SECONDS]

Prints the top of book whenever it changes (at most ten times a second), then, after SECONDS
(default: run until interrupted), one line: `final AAPL seq N bids B asks A` and exits.
"""

import asyncio
import json
import random
import sys
import time

import websockets


class Book:
    """One symbol's book: a snapshot, then deltas strictly in sequence."""

    def __init__(self):
        self.seq = None
        self.bids, self.asks = {}, {}

    def snapshot(self, m):
        self.seq = m["seq"]
        self.bids = {p: q for p, q in m["bids"]}
        self.asks = {p: q for p, q in m["asks"]}

    def delta(self, m):
        """Applies a delta; False when it is not the next one (resync needed)."""
        if self.seq is None or m["seq"] <= self.seq:
            return True  # before the snapshot, or a duplicate: nothing to do
        if m["seq"] != self.seq + 1:
            self.seq = None
            return False
        side = self.bids if m["side"] == "bid" else self.asks
        if m["qty"] == 0:
            side.pop(m["price"], None)
        else:
            side[m["price"]] = m["qty"]
        self.seq = m["seq"]
        return True

    def top(self):
        bid = max(self.bids, default=None)
        ask = min(self.asks, default=None)
        return bid, ask


async def follow(urls, symbol, book, stop):
    i = 0
    while not stop.is_set():
        url = urls[i % len(urls)]
        try:
            async with websockets.connect(url, open_timeout=5) as ws:
                await ws.send(json.dumps({"op": "subscribe", "channel": "book", "symbol": symbol}))
                shown = 0.0
                async for raw in ws:
                    m = json.loads(raw)
                    if m.get("symbol") != symbol:
                        continue
                    if m.get("type") == "snapshot":
                        book.snapshot(m)
                    elif m.get("type") == "book" and not book.delta(m):
                        # A gap: ask for a fresh snapshot; deltas wait for it.
                        await ws.send(json.dumps({"op": "snapshot", "symbol": symbol}))
                    if book.seq is not None and time.monotonic() - shown > 0.1:
                        shown = time.monotonic()
                        bid, ask = book.top()
                        print(f"{url} {symbol} seq {book.seq}: bid {bid} ask {ask}", flush=True)
        except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as e:
            print(f"{url}: {type(e).__name__}; next server", file=sys.stderr, flush=True)
        book.seq = None
        i += 1
        await asyncio.sleep(random.uniform(0.05, 0.3))


async def main():
    urls = sys.argv[1].split(",")
    symbol = sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else None
    book, stop = Book(), asyncio.Event()
    task = asyncio.create_task(follow(urls, symbol, book, stop))
    if seconds is None:
        await task
        return
    await asyncio.sleep(seconds)
    stop.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    print(f"final {symbol} seq {book.seq} bids {len(book.bids)} asks {len(book.asks)}", flush=True)


asyncio.run(main())
