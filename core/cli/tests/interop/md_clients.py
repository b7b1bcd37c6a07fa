"""Many market-data clients (the `websockets` package from PyPI) spread over a list of keel
gateways, each keeping one symbol's book (client i: symbol i modulo their number) by the
protocol of docs/market-data.md, and
reconnecting to the next gateway (with jitter) when its connection is lost.

Usage: md_clients.py GATEWAYS CLIENTS SYMBOLS REST DONE_FILE
  GATEWAYS   comma-separated ws://host:port/md
  CLIENTS    how many clients (client i starts on gateway i % len)
  SYMBOLS    comma-separated
  REST       the venue's REST API host:port (its books, the truth at the end)
  DONE_FILE  when this file appears the market is quiet: every client must converge on the
             venue's books, then the script prints one JSON summary line and exits

Every delta's sequence is checked: a gap (or a delta out of order) asks for a snapshot and
is counted; applying a delta whose sequence is not the next is never done. Prints
{"clients":..,"converged":..,"wrong":..,"gaps":..,"reconnects":..,"snapshots":..,
 "messages":..,"closes":{..}} with `wrong` the clients whose books differ from the venue's and
`closes` why connections ended before the end (close code, or the error's kind).
"""

import asyncio
import json
import os
import random
import sys
import urllib.request

import websockets

GATEWAYS, CLIENTS, SYMBOLS, REST, DONE = sys.argv[1:6]
GATEWAYS = GATEWAYS.split(",")
CLIENTS = int(CLIENTS)
SYMBOLS = SYMBOLS.split(",")

totals = {"gaps": 0, "reconnects": 0, "snapshots": 0, "messages": 0}
closes = {}
live = {g: 0 for g in GATEWAYS}


class Book:
    def __init__(self):
        self.seq = None
        self.bids = {}
        self.asks = {}

    def view(self):
        bids = sorted(self.bids.items(), key=lambda l: -l[0])
        asks = sorted(self.asks.items())
        return self.seq, bids, asks


def symbols_of(i):
    """Client i follows one symbol (i modulo their number): a thousand clients in one Python
    process cannot read every book of a busy venue, and the gateway serves each the same."""
    return [SYMBOLS[i % len(SYMBOLS)]]


async def client(i, books, done):
    g = i % len(GATEWAYS)
    while not done.is_set():
        url = GATEWAYS[g]
        try:
            async with websockets.connect(url, max_size=None, open_timeout=20, ping_interval=None) as ws:
                live[url] += 1
                try:
                    for s in symbols_of(i):
                        books[s] = Book()
                        await ws.send(json.dumps({"op": "subscribe", "channel": "book", "symbol": s}))
                    async for raw in ws:
                        totals["messages"] += 1
                        m = json.loads(raw)
                        kind = m.get("type")
                        b = books.get(m.get("symbol"))
                        if b is None:
                            continue
                        if kind == "snapshot":
                            totals["snapshots"] += 1
                            b.seq = m["seq"]
                            b.bids = {p: q for p, q in m["bids"]}
                            b.asks = {p: q for p, q in m["asks"]}
                        elif kind == "book":
                            if b.seq is None or m["seq"] <= b.seq:
                                continue  # before the snapshot, or a duplicate
                            if m["seq"] != b.seq + 1:
                                totals["gaps"] += 1
                                b.seq = None
                                await ws.send(json.dumps({"op": "snapshot", "symbol": m["symbol"]}))
                                continue
                            side = b.bids if m["side"] == "bid" else b.asks
                            if m["qty"] == 0:
                                side.pop(m["price"], None)
                            else:
                                side[m["price"]] = m["qty"]
                            b.seq = m["seq"]
                finally:
                    live[url] -= 1
                    if not done.is_set():
                        code = str(ws.close_code)
                        closes[code] = closes.get(code, 0) + 1
        except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as e:
            if not done.is_set():
                kind = type(e).__name__
                closes[kind] = closes.get(kind, 0) + 1
        if done.is_set():
            return
        # Lost: the next gateway, after a jittered pause.
        totals["reconnects"] += 1
        g = (g + 1) % len(GATEWAYS)
        await asyncio.sleep(random.uniform(0.05, 0.3))


def venue_books():
    out = {}
    for s in SYMBOLS:
        with urllib.request.urlopen(f"http://{REST}/api/v3/depth?symbol={s}&limit=5000", timeout=10) as r:
            d = json.loads(r.read())

        def fixed(text):
            whole, _, frac = text.partition(".")
            return int(whole) * 10000 + int((frac + "0000")[:4])

        out[s] = (
            d["lastUpdateId"],
            [(fixed(p), int(q)) for p, q in d["bids"]],
            [(fixed(p), int(q)) for p, q in d["asks"]],
        )
    return out


async def main():
    done = asyncio.Event()
    all_books = [dict() for _ in range(CLIENTS)]
    tasks = [asyncio.create_task(client(i, all_books[i], done)) for i in range(CLIENTS)]
    while not os.path.exists(DONE):
        await asyncio.sleep(0.1)
    truth = venue_books()
    # Quiet market: wait (bounded) until every client holds the venue's books.
    quiet_at = asyncio.get_running_loop().time()
    deadline = quiet_at + 120
    wrong = list(range(CLIENTS))
    while True:
        # Only the clients not yet seen right are checked again (the market is quiet: one that
        # holds the venue's books keeps them).
        wrong = [i for i in wrong
                 if any(s not in all_books[i] or all_books[i][s].view() != truth[s] for s in symbols_of(i))]
        if not wrong or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    done.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    first = None
    if wrong:
        books = all_books[wrong[0]]
        first = {s: (books[s].view()[0] if s in books else None, truth[s][0]) for s in symbols_of(wrong[0])}
    print(json.dumps({
        "clients": CLIENTS,
        "converged": CLIENTS - len(wrong),
        "wrong": len(wrong),
        "first_wrong": first,
        "venue_seq": {s: truth[s][0] for s in SYMBOLS},
        "closes": closes,
        "converge_s": round(asyncio.get_running_loop().time() - quiet_at, 2),
        **totals,
    }), flush=True)


asyncio.run(main())
