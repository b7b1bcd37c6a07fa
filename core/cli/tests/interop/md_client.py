"""A market-data client nobody on the keel team wrote the transport of: the `websockets`
package (PyPI). It subscribes to the venue's `book` and `trades` channels for some symbols,
applies snapshot + deltas (buffering deltas until the snapshot, dropping those at or below its
sequence), checks that every sequence follows the last, then stops the venue's synthetic flow
through its control port, waits for quiet, asks each symbol for a fresh snapshot and checks
that its own book equals it. Prints one JSON line; exits 1 on any mismatch.

    python md_client.py ws://127.0.0.1:15002/md 127.0.0.1:15001 AAPL,MSFT 3.0
"""

import asyncio
import json
import socket
import sys

import websockets


class Book:
    def __init__(self):
        self.bids, self.asks = {}, {}
        self.seq = None  # None until a snapshot arrives
        self.pending = []  # deltas that arrived before the snapshot
        self.snapshots = 0

    def snapshot(self, m):
        self.bids = {p: q for p, q in m["bids"]}
        self.asks = {p: q for p, q in m["asks"]}
        self.seq = m["seq"]
        self.snapshots += 1
        pending, self.pending = self.pending, []
        for d in pending:
            if d["seq"] > self.seq:
                self.delta(d)

    def delta(self, m):
        if self.seq is None:
            self.pending.append(m)
            return
        if m["seq"] <= self.seq:
            return  # covered by the snapshot
        if m["seq"] != self.seq + 1:
            raise AssertionError(f"book gap: {self.seq} then {m['seq']}")
        side = self.bids if m["side"] == "bid" else self.asks
        if m["qty"] == 0:
            side.pop(m["price"], None)
        else:
            side[m["price"]] = m["qty"]
        self.seq = m["seq"]
        if self.bids and self.asks and max(self.bids) >= min(self.asks):
            raise AssertionError(f"crossed book at {self.seq}: {max(self.bids)} >= {min(self.asks)}")

    def levels(self):
        return (sorted(self.bids.items(), reverse=True), sorted(self.asks.items()))


def control(addr, command):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall((command + "\n").encode())
        reply = s.makefile().readline()
        assert reply.startswith("ok"), reply


async def main(url, control_addr, symbols, seconds):
    books = {s: Book() for s in symbols}
    last_trade = {}
    counts = {"book": 0, "trade": 0, "snapshot": 0}
    async with websockets.connect(url, max_size=1 << 24) as ws:
        for s in symbols:
            await ws.send(json.dumps({"op": "subscribe", "channel": "book", "symbol": s}))
            await ws.send(json.dumps({"op": "subscribe", "channel": "trades", "symbol": s}))

        def handle(m):
            t = m["type"]
            if t == "snapshot":
                books[m["symbol"]].snapshot(m)
            elif t == "book":
                books[m["symbol"]].delta(m)
            elif t == "trade":
                prev = last_trade.get(m["symbol"])
                if prev is not None and m["seq"] != prev + 1:
                    raise AssertionError(f"trade gap: {prev} then {m['seq']}")
                last_trade[m["symbol"]] = m["seq"]
            elif t == "error":
                raise AssertionError(f"server error: {m}")
            if t in counts:
                counts[t] += 1

        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            try:
                handle(json.loads(await asyncio.wait_for(ws.recv(), 0.5)))
            except asyncio.TimeoutError:
                pass
        control(control_addr, "flow 0")
        # Quiet: nothing for 300 ms.
        while True:
            try:
                handle(json.loads(await asyncio.wait_for(ws.recv(), 0.3)))
            except asyncio.TimeoutError:
                break
        results = {}
        for s in symbols:
            mine = books[s].levels()
            await ws.send(json.dumps({"op": "snapshot", "symbol": s}))
            while True:
                m = json.loads(await ws.recv())
                if m["type"] == "snapshot" and m["symbol"] == s:
                    break
                handle(m)
            theirs = (sorted(((p, q) for p, q in m["bids"]), reverse=True),
                      sorted((p, q) for p, q in m["asks"]))
            results[s] = {
                "equal": mine == theirs,
                "seq": books[s].seq,
                "venue_seq": m["seq"],
                "levels": len(mine[0]) + len(mine[1]),
            }
    ok = all(r["equal"] and r["seq"] == r["venue_seq"] for r in results.values())
    print(json.dumps({"ok": ok, "counts": counts, "books": results, "trades": last_trade}))
    return 0 if ok else 1


if __name__ == "__main__":
    url, control_addr, symbols, seconds = sys.argv[1], sys.argv[2], sys.argv[3].split(","), float(sys.argv[4])
    sys.exit(asyncio.run(main(url, control_addr, symbols, seconds)))
