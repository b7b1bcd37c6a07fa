"""Market data from the engine's shared-memory file, one per feed: `<[ipc] dir>/md-<feed>`
(docs/ipc.md, "Market data").

    md = keel.MarketData(path)
    md.synced                     # every book in step with the venue (else tops may be stale)
    top = md.top(symbol)          # keel.Top(seq, bids, asks), never torn
    while (t := md.next_trade()) is not None:
        if isinstance(t, keel.TradeGap): ...   # t.lost trades were overwritten unread
        else: ...                               # keel.Trade(symbol, seq, price, qty, buy)

Words are read through a memoryview cast to 'Q' (one aligned 8-byte load each on x86-64, whose
loads keep their order: what a seqlock reader needs).
"""

import struct
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from .channel import LayoutError, NameError_, _map
from .layout import HEADER_LEN

MD_MAGIC = b"KEELMD\0\0"
MD_VERSION = 1
MD_DEPTH = 5
MD_SLOT_LEN = 192
MD_TRADE_LEN = 64
MD_OFFSETS = {"VERSION": 8, "SYMBOLS": 12, "TRADE_CAPACITY": 16, "DEPTH": 20, "HEARTBEAT": 64, "SYNCED": 72,
              "TRADES": 128}
# A slot found mid-write this many reads in a row: the writer is preempted inside it, or died.
SPINS_MAX = 100_000


@dataclass(frozen=True)
class Top:
    """A top of book: `seq` the book's sequence number, `bids` and `asks` best first as
    (price, qty) pairs ((0, 0) where a side is shorter)."""

    seq: int
    bids: Tuple[Tuple[int, int], ...]
    asks: Tuple[Tuple[int, int], ...]


@dataclass(frozen=True)
class Trade:
    symbol: int
    seq: int
    price: int
    qty: int
    buy: bool


@dataclass(frozen=True)
class TradeGap:
    """`lost` trades were overwritten before this reader read them (it fell more than the
    ring behind); the next read goes on from the oldest still there."""

    lost: int


class MarketData:
    """A reader of the engine's market-data file; starts at the newest trade."""

    def __init__(self, path: str):
        # Read only: a reader can never disturb the engine or another reader.
        self._m = _map(path, HEADER_LEN, writable=False)
        size = len(self._m)
        if self._m[0:8] != MD_MAGIC or size % 8:
            raise LayoutError(f"{path}: not a keel market-data file")
        version, symbols, cap, depth = struct.unpack_from("<IIII", self._m, MD_OFFSETS["VERSION"])
        if version != MD_VERSION or depth != MD_DEPTH:
            raise LayoutError(f"{path}: version {version}, depth {depth} (this package reads {MD_VERSION}, {MD_DEPTH})")
        want = HEADER_LEN + symbols * MD_SLOT_LEN + cap * MD_TRADE_LEN
        if not 0 < symbols <= 65_535 or cap == 0 or cap & (cap - 1) or cap > 1 << 20 or size != want:
            raise LayoutError(f"{path}: {symbols} symbols, capacity {cap}, {size} bytes")
        self._w = memoryview(self._m).cast("Q")
        self.symbols, self.trade_capacity = symbols, cap
        self._trades_base = (HEADER_LEN + symbols * MD_SLOT_LEN) >> 3
        self._next = self._w[MD_OFFSETS["TRADES"] >> 3]
        self.retries = 0

    def close(self) -> None:
        self._w.release()
        self._m.close()

    @property
    def heartbeat(self) -> int:
        """The engine's feed heartbeat: it moves while the engine runs."""
        return self._w[MD_OFFSETS["HEARTBEAT"] >> 3]

    @property
    def synced(self) -> bool:
        """Every book is in step with the venue; False while the feed connects or resyncs (a
        top may be stale) and after the engine stopped."""
        return self._w[MD_OFFSETS["SYNCED"] >> 3] == 1

    def top(self, symbol: int) -> Optional[Top]:
        """`symbol`'s newest top of book, never torn; None if the writer stayed in the slot
        SPINS_MAX reads in a row (try again; if `heartbeat` stopped too, the engine died
        mid-write)."""
        if not 0 <= symbol < self.symbols:
            raise NameError_(f"no symbol {symbol}: the file has {self.symbols}")
        w = self._w
        at = (HEADER_LEN + symbol * MD_SLOT_LEN) >> 3
        for _ in range(SPINS_MAX):
            v1 = w[at]
            if v1 & 1:
                self.retries += 1
                continue
            words = w[at + 1:at + 2 + 4 * MD_DEPTH].tolist()
            if w[at] != v1:
                self.retries += 1
                continue
            signed = [x - (1 << 64) if x >= 1 << 63 else x for x in words]
            bids = tuple((signed[1 + 4 * i], words[2 + 4 * i]) for i in range(MD_DEPTH))
            asks = tuple((signed[3 + 4 * i], words[4 + 4 * i]) for i in range(MD_DEPTH))
            return Top(words[0], bids, asks)
        return None

    def next_trade(self) -> Optional[Union[Trade, TradeGap]]:
        """The next trade, a TradeGap, or None (nothing new)."""
        w = self._w
        published = w[MD_OFFSETS["TRADES"] >> 3]
        cap = self.trade_capacity
        if published < self._next:
            self._next = published
            return None
        if published - self._next > cap:
            lost = published - cap - self._next
            self._next = published - cap
            return TradeGap(lost)
        if published == self._next:
            return None
        n = self._next
        at = self._trades_base + (n % cap) * (MD_TRADE_LEN >> 3)
        before = w[at]
        word, seq, price, qty = w[at + 1:at + 5].tolist()
        after = w[at]
        if before != n + 1 or after != n + 1:
            now = w[MD_OFFSETS["TRADES"] >> 3]
            resume = max(now - cap, n + 1)
            self._next = resume
            return TradeGap(resume - n)
        self._next = n + 1
        if price >= 1 << 63:
            price -= 1 << 64
        return Trade(word & 0xFFFF, seq, price, qty, (word >> 16) & 0xFF == 1)


__all__ = ["MarketData", "Top", "Trade", "TradeGap", "MD_OFFSETS"]
