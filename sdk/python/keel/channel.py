"""A strategy's side of keel's shared-memory channel (docs/ipc.md), standard library only.

    import keel
    ch = keel.Channel("/dev/shm/keel/strategy-0")
    ch.wait_live()                         # a live engine, not a header a dead one left
    msft, venue = ch.symbol("MSFT"), ch.venue("sim")
    oid = ch.next_id()
    ch.place(oid, venue, msft, keel.BUY, qty=100, price=keel.price(100.25))
    for event in ch.events(timeout=1.0):   # typed events (keel.events), reasons by name
        ...
    ch.beat()                              # at least every 100 ms

Every shared 8-byte word is read and written through a memoryview of the mapping cast to
'Q': CPython copies one item of such a view with a single aligned 8-byte load or store, never
torn (`struct.pack_into` is not: it zeroes the bytes first). x86-64 keeps stores in program
order, which makes the tail store a release: this client needs little-endian x86-64 (use the
C library, sdk/c, elsewhere).
"""

import mmap
import os
import platform
import struct
import sys
import time
import zlib
from typing import Iterator, List, Optional, Sequence, Tuple

from . import events as ev
from .layout import (
    CANCEL_REJECT_REASONS,
    CMD_CANCEL,
    CMD_MASS_CANCEL,
    CMD_NEW,
    CMD_REPLACE,
    ENGINE_RUNNING,
    ENGINE_STATES,
    ENGINE_STOPPED,
    EVENT_KINDS,
    FAULTS,
    FLAG_REDUCE_ONLY,
    HEADER_LEN,
    MAGIC,
    MALFORMED,
    OFFSETS as O,
    PRICE_SCALE,
    RECORD_LEN,
    REFUSALS,
    REJECT_REASONS,
    SCOPE_STRATEGY,
    SCOPE_SYMBOL,
    SIDE_BUY,
    SIDE_SELL,
    TIF_DAY,
    TIF_IOC,
    VERSION,
    CAPACITY_MAX,
)

BUY, SELL = SIDE_BUY, SIDE_SELL
DAY, IOC = TIF_DAY, TIF_IOC


class ChannelError(Exception):
    """The channel cannot be used as asked; the message names what was found."""


class LayoutError(ChannelError):
    """Not a channel file, or another layout version, record length, size or capacity."""


class TableError(ChannelError):
    """The engine's symbol/venue table is not the one this strategy was built for."""


class ChannelBroken(ChannelError):
    """An index cannot be trusted (the engine declared a fault, or an engine index went
    back or too far): the channel is unusable until the engine makes a new file."""


class RingFull(ChannelError):
    """The command ring is full: nothing was written; try again after the engine reads."""


class EngineStopped(ChannelError):
    """The engine stopped: nothing would read the command."""


class InUse(ChannelError):
    """Another live process writes this channel."""


class NameError_(ChannelError):
    """No such symbol or venue in the engine's table."""


def price(value: float) -> int:
    """A price in the channel's fixed point (4 decimals), rounded to the nearest unit."""
    return int(round(value * PRICE_SCALE))


def fingerprint(symbols: Sequence[str], venues: Sequence[str]) -> int:
    """The engine's table fingerprint: FNV-1a (64-bit) over each symbol name (trailing spaces
    dropped) and a 0 byte, one 1 byte, each venue name and a 0 byte; never 0."""
    h = 0xCBF29CE484222325
    data = b"".join(s.encode("ascii").rstrip(b" ") + b"\0" for s in symbols) + b"\1"
    data += b"".join(v.encode("utf-8") + b"\0" for v in venues)
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return max(h, 1)


def _map(path: str, header_len: int, writable: bool) -> mmap.mmap:
    """Maps the whole file; an OS refusal (no such file, a directory, no permission) or a file
    shorter than the header is a ChannelError naming the path."""
    try:
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    except OSError as e:
        raise ChannelError(f"{path}: {e.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if size < header_len:
            raise LayoutError(f"{path}: {size} bytes, shorter than the {header_len}-byte header")
        try:
            return mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        except OSError as e:
            raise ChannelError(f"{path}: mmap: {e.strerror}") from None
    finally:
        os.close(fd)


def _check_u(what: str, value: int, bits: int) -> None:
    if not isinstance(value, int) or not 0 <= value < 1 << bits:
        raise ChannelError(f"{what} {value!r}: not in 0..{(1 << bits) - 1}")


def _pid_alive(pid: int) -> bool:
    if pid <= 0 or pid > 0x7FFFFFFF:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Channel:
    """One strategy's channel: commands out, events in, heartbeats.

    The engine's indices are never trusted: an event tail that goes back or runs more than a
    ring ahead, or a command head that goes back or passes the tail, raises ChannelBroken and
    the channel stays unusable (`fault`).
    """

    def __init__(self, path: str, stale_after_s: float = 1.0):
        if sys.byteorder != "little" or platform.machine().lower() not in ("x86_64", "amd64"):
            raise ChannelError(f"this client needs x86-64 (its store order), not {platform.machine()}")
        self.path = path
        self.stale_after_s = stale_after_s
        self._m = _map(path, HEADER_LEN, writable=True)
        size = len(self._m)
        if size % 8:
            raise LayoutError(f"{path}: {size} bytes, not a keel channel (not whole words)")
        self._w = memoryview(self._m).cast("Q")
        if self._m[0:8] != MAGIC:
            raise LayoutError(f"{path}: not a keel channel (magic {bytes(self._m[0:8])!r})")
        version, record_len, cc, ec = struct.unpack_from("<IIII", self._m, O["VERSION"])
        if version != VERSION:
            raise LayoutError(f"{path}: layout version {version}, this package reads {VERSION}")
        if record_len != RECORD_LEN:
            raise LayoutError(f"{path}: record length {record_len}, this package reads {RECORD_LEN}")
        for cap in (cc, ec):
            if cap == 0 or cap & (cap - 1) or cap > CAPACITY_MAX:
                raise LayoutError(f"{path}: ring capacities {cc} and {ec} (powers of two up to {CAPACITY_MAX})")
        if size != HEADER_LEN + (cc + ec) * RECORD_LEN:
            raise LayoutError(f"{path}: {size} bytes, the rings need {HEADER_LEN + (cc + ec) * RECORD_LEN}")
        self.command_capacity, self.event_capacity = cc, ec
        (self.strategy,) = struct.unpack_from("<H", self._m, O["STRATEGY"])
        self._evt_base = HEADER_LEN + cc * RECORD_LEN
        self.fault: Optional[str] = None
        self._cmd_tail, self._cmd_head_seen = self._u64("COMMAND_TAIL"), self._u64("COMMAND_HEAD")
        self._evt_head, self._evt_tail_seen = self._u64("EVENT_HEAD"), self._u64("EVENT_TAIL")
        if not self._cmd_head_seen <= self._cmd_tail <= self._cmd_head_seen + cc or \
                not self._evt_head <= self._evt_tail_seen <= self._evt_head + ec:
            raise LayoutError(
                f"{path}: inconsistent indices (command {self._cmd_head_seen}/{self._cmd_tail}, "
                f"event {self._evt_head}/{self._evt_tail_seen}): restart the engine")
        writer = self._u64("STRATEGY_PID")
        if writer not in (0, os.getpid()) and _pid_alive(writer):
            raise InUse(f"{path}: process {writer} writes this channel already")
        self._set("STRATEGY_PID", os.getpid())
        self._next_seq = 1
        self._epoch = self._u64("ENGINE_EPOCH")
        self._beat_seen: Optional[int] = None
        self._beat_moved: Optional[float] = None
        # The engine's process is looked up at most every 10 ms (a system call), not per poll.
        self._pid_seen: Tuple[int, float, bool] = (0, -1.0, False)
        self._was_live = False

    # ----- words ---------------------------------------------------------------------------
    def _u64(self, name: str) -> int:
        return self._w[O[name] >> 3]

    def _set(self, name: str, value: int) -> None:
        self._w[O[name] >> 3] = value

    def close(self) -> None:
        """Gives the channel up (another process may attach)."""
        if self._u64("STRATEGY_PID") == os.getpid():
            self._set("STRATEGY_PID", 0)
        self._w.release()
        self._m.close()

    def __enter__(self) -> "Channel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----- the engine's header ---------------------------------------------------------------
    @property
    def engine_state(self) -> str:
        return ENGINE_STATES.get(self._u64("ENGINE_STATE"), "?")

    @property
    def engine_epoch(self) -> int:
        return self._u64("ENGINE_EPOCH")

    @property
    def engine_pid(self) -> int:
        return self._u64("ENGINE_PID")

    @property
    def id_floor(self) -> int:
        return self._u64("ID_FLOOR")

    def venue_synced(self, venue: int) -> bool:
        return 0 <= venue < 64 and bool(self._u64("VENUES_SYNCED") >> venue & 1)

    def engine_fault(self) -> Optional[str]:
        """The fault the engine declared on this file, with its values (None: none)."""
        code = self._u64("CHANNEL_FAULT")
        if not code:
            return None
        return (f"{FAULTS.get(code, '?')} (fault {code}: found {self._u64('FAULT_FOUND')}, "
                f"limit {self._u64('FAULT_LIMIT')})")

    def engine_live(self) -> bool:
        """Whether a live engine serves the channel: running, no fault, its process exists, and
        its heartbeat moved within `stale_after_s` on this process's clock (false until it has
        been seen to move). Only then are venue_synced() and id_floor trustworthy."""
        now = time.monotonic()
        beat = self._u64("ENGINE_HEARTBEAT")
        if beat != self._beat_seen:
            if self._beat_seen is not None:
                self._beat_moved = now
            self._beat_seen = beat
        return (self._u64("ENGINE_STATE") == ENGINE_RUNNING and not self._u64("CHANNEL_FAULT")
                and self._engine_alive(now) and self._beat_moved is not None
                and now - self._beat_moved < self.stale_after_s)

    def _engine_alive(self, now: float) -> bool:
        pid = self.engine_pid
        seen, at, alive = self._pid_seen
        if pid != seen or now - at > 0.01:
            alive = _pid_alive(pid)
            self._pid_seen = (pid, now, alive)
        return alive

    def wait_live(self, timeout: float = 20.0) -> None:
        """Beats and waits for a live engine; raises ChannelError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self.engine_live():
            if time.monotonic() > deadline:
                raise ChannelError(f"{self.path}: no live engine within {timeout} s "
                                   f"(state {self.engine_state}, pid {self.engine_pid})")
            self.beat()
            time.sleep(0.002)

    def beat(self) -> None:
        """The strategy's heartbeat: call it at least every 100 ms."""
        self._set("STRATEGY_HEARTBEAT", (self._u64("STRATEGY_HEARTBEAT") + 1) & 0xFFFFFFFFFFFFFFFF)

    # ----- symbols and venues by name -------------------------------------------------------
    def _names(self):
        counts = self._u64("NAME_COUNTS")
        n_sym, n_ven = (counts >> 16) & 0xFFFF, counts >> 48
        room = (HEADER_LEN - O["NAMES"]) // 8
        n_sym = min(n_sym, room)
        n_ven = min(n_ven, (room - n_sym) // 2)
        at = O["NAMES"] >> 3
        symbols = [self._w[at + i].to_bytes(8, "little").rstrip(b" \0").decode("ascii", "replace")
                   for i in range(n_sym)]
        at += n_sym
        venues = []
        for i in range(n_ven):
            raw = self._w[at + 2 * i].to_bytes(8, "little") + self._w[at + 2 * i + 1].to_bytes(8, "little")
            venues.append(raw.rstrip(b" \0").decode("utf-8", "replace"))
        return symbols, venues

    @property
    def symbols(self) -> List[str]:
        """The engine's symbols; a command's symbol is the index of its name here."""
        return self._names()[0]

    @property
    def venues(self) -> List[str]:
        return self._names()[1]

    def symbol(self, name: str) -> int:
        """The index of symbol `name` (NameError_ when the engine has none of that name)."""
        names = self.symbols
        if name not in names:
            raise NameError_(f"no symbol {name!r}: the engine trades {names}")
        return names.index(name)

    def venue(self, name: str) -> int:
        names = self.venues
        if name not in names:
            raise NameError_(f"no venue {name!r}: the engine's venues are {names}")
        return names.index(name)

    def declare_table(self, symbols: Sequence[str], venues: Sequence[str]) -> None:
        """Declares the table this strategy was built for; TableError (nothing declared) when
        the engine's differs, naming both."""
        ours = fingerprint(symbols, venues)
        engine = self._u64("CONFIG_FINGERPRINT")
        if engine not in (0, ours):
            raise TableError(
                f"the engine's symbol/venue table (fingerprint {engine:#018x}: {self.symbols}) is "
                f"not the one this strategy was built for ({ours:#018x}: {list(symbols)})")
        self._set("DECLARED_FINGERPRINT", ours)

    # ----- commands --------------------------------------------------------------------------
    def next_id(self) -> int:
        """A fresh order id: strategy << 48 | a sequence above the engine's id floor."""
        floor = self.id_floor & ((1 << 48) - 1)
        self._next_seq = max(self._next_seq, floor + 1)
        seq = self._next_seq
        self._next_seq += 1
        return self.strategy << 48 | seq

    def _usable(self) -> None:
        if self.fault:
            raise ChannelBroken(self.fault)
        declared = self.engine_fault()
        if declared:
            self.fault = f"the engine declared the channel broken: {declared}"
            raise ChannelBroken(self.fault)

    def _push(self, record: bytearray) -> None:
        self._usable()
        if self._u64("ENGINE_STATE") == ENGINE_STOPPED:
            raise EngineStopped(f"the engine stopped (pid {self.engine_pid}): nothing reads commands")
        head = self._u64("COMMAND_HEAD")
        if head < self._cmd_head_seen or head > self._cmd_tail:
            self.fault = f"the engine's command head {head} is not in {self._cmd_head_seen}..={self._cmd_tail}"
            raise ChannelBroken(self.fault)
        self._cmd_head_seen = head
        t = self._cmd_tail
        if t - head >= self.command_capacity:
            raise RingFull(f"the command ring is full ({self.command_capacity} records)")
        struct.pack_into("<Q", record, 8, t)  # private bytes: not yet published
        struct.pack_into("<I", record, 0, zlib.crc32(bytes(record[4:])))
        at = HEADER_LEN + (t % self.command_capacity) * RECORD_LEN
        self._m[at:at + RECORD_LEN] = bytes(record)
        self._cmd_tail = t + 1
        self._set("COMMAND_TAIL", t + 1)  # publish after the whole record: one 8-byte store

    def place(self, order_id: int, venue: int, symbol: int, side: int, qty: int, price: int,
              tif: int = DAY, reduce_only: bool = False) -> None:
        """A new limit order (`price` in fixed point: see `keel.price`)."""
        if side not in (BUY, SELL):
            raise ChannelError(f"side {side}: keel.BUY or keel.SELL")
        if tif not in (DAY, IOC):
            raise ChannelError(f"time in force {tif}: keel.DAY or keel.IOC")
        if not 0 <= qty < 1 << 32 or not -(1 << 63) <= price < 1 << 63:
            raise ChannelError(f"qty {qty} or price {price} out of the record's range")
        _check_u("order id", order_id, 64)
        _check_u("venue", venue, 16)
        _check_u("symbol", symbol, 16)
        r = bytearray(RECORD_LEN)
        r[4], r[5], r[6], r[7] = CMD_NEW, side, tif, FLAG_REDUCE_ONLY if reduce_only else 0
        struct.pack_into("<QHHxxxxIxxxxq", r, 16, order_id, venue, symbol, qty, price)
        self._push(r)

    def cancel(self, order_id: int) -> None:
        _check_u("order id", order_id, 64)
        r = bytearray(RECORD_LEN)
        r[4] = CMD_CANCEL
        struct.pack_into("<Q", r, 16, order_id)
        self._push(r)

    def replace(self, order_id: int, new_id: int, qty: int, price: int) -> None:
        _check_u("order id", order_id, 64)
        _check_u("new id", new_id, 64)
        _check_u("qty", qty, 32)
        if not -(1 << 63) <= price < 1 << 63:
            raise ChannelError(f"price {price} out of the record's range")
        r = bytearray(RECORD_LEN)
        r[4] = CMD_REPLACE
        struct.pack_into("<QQIxxxxq", r, 16, order_id, new_id, qty, price)
        self._push(r)

    def mass_cancel(self, symbol: Optional[int] = None) -> None:
        """Cancels every open order of this strategy, or only those in `symbol`."""
        if symbol is not None:
            _check_u("symbol", symbol, 16)
        r = bytearray(RECORD_LEN)
        r[4], r[5] = CMD_MASS_CANCEL, SCOPE_STRATEGY if symbol is None else SCOPE_SYMBOL
        struct.pack_into("<H", r, 26, 0 if symbol is None else symbol)
        self._push(r)

    # ----- events ----------------------------------------------------------------------------
    def poll(self):
        """The next event, or None now. Channel events first: EngineRestarted when the epoch
        changed, EngineLost when a live engine is no longer live. A record that fails its
        checks raises ChannelError (it is skipped); a broken channel raises ChannelBroken."""
        epoch = self._u64("ENGINE_EPOCH")
        if epoch != self._epoch:
            before, self._epoch = self._epoch, epoch
            return ev.EngineRestarted(before, epoch)
        live = self.engine_live()
        if self._was_live and not live:
            self._was_live = False
            return ev.EngineLost(self.engine_state, self.engine_pid)
        self._was_live = live
        self._usable()
        head, tail = self._evt_head, self._u64("EVENT_TAIL")
        if tail < self._evt_tail_seen or tail - head > self.event_capacity:
            self.fault = f"the engine's event tail {tail} went back (was {self._evt_tail_seen}) or ran past the ring"
            raise ChannelBroken(self.fault)
        self._evt_tail_seen = tail
        if head == tail:
            return None
        at = self._evt_base + (head % self.event_capacity) * RECORD_LEN
        r = bytes(self._m[at:at + RECORD_LEN])
        self._evt_head = head + 1
        self._set("EVENT_HEAD", head + 1)
        (crc,) = struct.unpack_from("<I", r, 0)
        if crc != zlib.crc32(r[4:]):
            raise ChannelError(f"event {head}: CRC {crc:08x}, computed {zlib.crc32(r[4:]):08x} (skipped)")
        (pos,) = struct.unpack_from("<Q", r, 8)
        if pos != head:
            raise ChannelError(f"event {head} claims position {pos} (skipped)")
        return _decode(head, r)

    def events(self, timeout: Optional[float] = None) -> Iterator[object]:
        """Every event as it comes, beating meanwhile; stops after `timeout` seconds without
        one (None: never). Blocking, with a short sleep between empty polls."""
        quiet_since = time.monotonic()
        last_beat = 0.0
        while True:
            e = self.poll()
            now = time.monotonic()
            if now - last_beat > 0.05:
                self.beat()
                last_beat = now
            if e is not None:
                quiet_since = now
                yield e
                continue
            if timeout is not None and now - quiet_since > timeout:
                return
            time.sleep(0.0005)


def _decode(position: int, r: bytes):
    kind = r[4]
    if kind == 13:
        code = r[5]
        cmd_pos, value = struct.unpack_from("<QQ", r, 24)
        return ev.Malformed(MALFORMED.get(code, "?"), code, cmd_pos, value, position)
    if kind not in EVENT_KINDS:
        raise ChannelError(f"event {position}: kind {kind} (skipped)")
    oid, other, qty, leaves, px, at_ns = struct.unpack_from("<QQIIqQ", r, 16)
    base = (oid, at_ns, position)
    if kind == 1:
        return ev.Accepted(*base)
    if kind == 2:
        return ev.PartiallyFilled(*base, qty, leaves, px)
    if kind == 3:
        return ev.Filled(*base, qty, px)
    if kind == 4:
        return ev.Canceled(*base)
    if kind == 5:
        return ev.Replaced(*base, other)
    if kind == 6:
        return ev.Rejected(*base, REJECT_REASONS.get(r[5], "?"), r[5], r[6])
    if kind == 7:
        return ev.CancelRejected(*base, CANCEL_REJECT_REASONS.get(r[5], "?"), r[5])
    if kind == 8:
        return ev.Unknown(*base)
    if kind == 9:
        return ev.Shed(*base)
    if kind == 10:
        return ev.Throttled(*base)
    if kind == 11:
        return ev.BreakerOpen(*base, other)
    name, advice = REFUSALS.get(r[5], ("?", "never"))
    return ev.Refused(*base, name, r[5], advice)
