#!/usr/bin/env python3
"""A keel strategy in another process, using only the Python standard library.

It maps its shared-memory channel (written by `keel run`, layout in docs/ipc.md), waits until
the engine runs and the venue is SYNCED, places N resting orders, waits for each to be
accepted, cancels them all, waits for each cancel, and prints one JSON line with what it saw.

    python3 examples/python/keel_strategy.py /dev/shm/keel/strategy-0 --orders 20

Exit status: 0 if every order was accepted and then canceled, 1 otherwise, 2 on a bad channel.
Copy it: the `Channel` class is the whole protocol (about 150 lines).
"""

import argparse
import json
import mmap
import os
import platform
import struct
import sys
import time
import zlib

MAGIC = b"KEELSHM\0"
VERSION = 1
RECORD_LEN = 64
HEADER_LEN = 4096

# Header offsets (docs/ipc.md).
OFF_VERSION, OFF_RECORD_LEN, OFF_CMD_CAP, OFF_EVT_CAP, OFF_STRATEGY = 8, 12, 16, 20, 24
OFF_ENGINE_HEARTBEAT, OFF_ENGINE_EPOCH, OFF_ENGINE_STATE = 64, 72, 80
OFF_ID_FLOOR, OFF_VENUES_SYNCED, OFF_ENGINE_PID, OFF_CHANNEL_FAULT = 88, 96, 104, 112
OFF_STRATEGY_HEARTBEAT, OFF_STRATEGY_PID, OFF_DECLARED_FINGERPRINT = 128, 136, 144
OFF_CONFIG_FINGERPRINT, OFF_NAME_COUNTS, OFF_NAMES = 512, 1024, 1032
OFF_CMD_TAIL, OFF_CMD_HEAD, OFF_EVT_TAIL, OFF_EVT_HEAD = 192, 256, 320, 384

ENGINE_RUNNING = 2

CMD_NEW, CMD_CANCEL, CMD_REPLACE, CMD_MASS_CANCEL = 1, 2, 3, 4
EVENT_NAMES = {
    1: "accepted", 2: "partially_filled", 3: "filled", 4: "canceled", 5: "replaced",
    6: "rejected", 7: "cancel_rejected", 8: "unknown", 9: "shed", 10: "throttled",
    11: "breaker_open", 12: "refused", 13: "malformed",
}
# The reason of a "refused" event (docs/ipc.md; pinned to keel's table by a Rust test). Codes
# never change; 24-29 are unused.
REFUSAL_NAMES = {
    1: "not synced", 2: "risk qty", 3: "risk notional", 4: "risk position",
    5: "unknown order on symbol", 6: "bulkhead symbol", 7: "bulkhead venue",
    8: "cancel lane full", 9: "replace lane full", 10: "new lane full", 11: "duplicate id",
    12: "order table full", 13: "unknown order", 14: "already pending",
    15: "executor stalled", 16: "journal unavailable", 17: "bad route",
    18: "link read-only", 19: "risk price", 20: "session full", 21: "kill switch",
    22: "strategy disabled", 23: "symbol shed",
    # The strategy's own quota ([dispatcher.quota]): back off and retry; others unaffected.
    30: "strategy rate", 31: "strategy in flight",
    # A reduce-only order that could increase the position or flip it past zero.
    40: "reduce-only increases",
}
PRICE_SCALE = 10_000  # 4 decimals


class ChannelError(Exception):
    pass


class Channel:
    """One strategy's channel: publish commands, read events, beat.

    Every shared 8-byte word (indices, heartbeats, header words) is read and written through
    `self.words`, a memoryview of the mapping cast to 'Q': CPython reads or writes one item of
    such a view with a single fixed-size 8-byte copy, i.e. one aligned load or store on
    x86-64 -- never torn. (`struct.pack_into` is not: it zeroes the bytes, then writes them,
    and a concurrent reader sees the word drop to 0; `struct.unpack_from('<Q')` assembles the
    value byte by byte.) x86-64 keeps stores in program order, which makes the tail store a
    release; this client therefore supports little-endian x86-64 only (use C or Rust
    elsewhere: docs/ipc.md).

    The channel never trusts the engine's indices: an event tail that goes back or runs more
    than the ring's capacity ahead, or a command head that goes back or passes the tail,
    raises ChannelError and the channel is unusable (`self.fault`).
    """

    def __init__(self, path):
        if sys.byteorder != "little" or platform.machine().lower() not in ("x86_64", "amd64"):
            raise ChannelError(f"this client needs x86-64 (its store order), not {platform.machine()}")
        self.fd = os.open(path, os.O_RDWR)
        size = os.fstat(self.fd).st_size
        if size < HEADER_LEN:
            raise ChannelError(f"{path}: length {size} is shorter than the header")
        self.m = mmap.mmap(self.fd, size)
        self.words = memoryview(self.m).cast("Q")  # mmap is page-aligned: word i at 8*i
        if self.m[0:8] != MAGIC:
            raise ChannelError(f"{path}: magic {self.m[0:8]!r}")
        version, record_len, self.cmd_cap, self.evt_cap = struct.unpack_from("<IIII", self.m, OFF_VERSION)
        if version != VERSION or record_len != RECORD_LEN:
            raise ChannelError(f"{path}: version {version}, record length {record_len}")
        if size != HEADER_LEN + (self.cmd_cap + self.evt_cap) * RECORD_LEN:
            raise ChannelError(f"{path}: length {size} does not match capacities")
        (self.strategy,) = struct.unpack_from("<H", self.m, OFF_STRATEGY)
        self.cmd_base = HEADER_LEN
        self.evt_base = HEADER_LEN + self.cmd_cap * RECORD_LEN
        self.fault = None
        # Our own indices live here (never read back from the file, where anyone could change
        # them); the engine's are checked against the last value seen.
        self.cmd_tail, self.cmd_head_seen = self._u64(OFF_CMD_TAIL), self._u64(OFF_CMD_HEAD)
        self.evt_head, self.evt_tail_seen = self._u64(OFF_EVT_HEAD), self._u64(OFF_EVT_TAIL)
        if not (self.cmd_head_seen <= self.cmd_tail <= self.cmd_head_seen + self.cmd_cap):
            raise ChannelError(f"{path}: command head {self.cmd_head_seen}, tail {self.cmd_tail}")
        if not (self.evt_head <= self.evt_tail_seen <= self.evt_head + self.evt_cap):
            raise ChannelError(f"{path}: event head {self.evt_head}, tail {self.evt_tail_seen}")
        self._set_u64(OFF_STRATEGY_PID, os.getpid())
        self._engine_beat, self._engine_beat_changed = None, None

    def _u64(self, off):
        return self.words[off >> 3]  # one aligned 8-byte load

    def _set_u64(self, off, value):
        self.words[off >> 3] = value  # one aligned 8-byte store (never torn)

    def _broken(self, what):
        self.fault = what
        raise ChannelError(what)

    # Header ---------------------------------------------------------------------------
    def engine_running(self):
        return self._u64(OFF_ENGINE_STATE) == ENGINE_RUNNING

    def engine_live(self, stale_after_s=1.0):
        """Whether the header is a live engine's, not one a dead engine left behind.

        Live means: state running, the engine process (pid in the header) exists, and its
        heartbeat has moved within `stale_after_s` of our own clock. Call it repeatedly (e.g.
        from the strategy loop): the first calls answer False until a beat is seen move. An
        engine killed by signal leaves "running" and its SYNCED bits in the header; only this
        rule tells them apart. Trust venue_synced() and id_floor() only while it holds.
        """
        now = time.monotonic()
        beat = self._u64(OFF_ENGINE_HEARTBEAT)
        if beat != self._engine_beat:
            if self._engine_beat is not None:
                self._engine_beat_changed = now
            self._engine_beat = beat
        if self._u64(OFF_ENGINE_STATE) != ENGINE_RUNNING or self.channel_fault():
            return False
        if not pid_alive(self._u64(OFF_ENGINE_PID)):
            return False
        return self._engine_beat_changed is not None and now - self._engine_beat_changed < stale_after_s

    # Symbols and venues by name (docs/ipc.md, "Symbols and venues by name") -----------
    def config_fingerprint(self):
        """The engine's symbol/venue table fingerprint (0: no engine published one yet)."""
        return self._u64(OFF_CONFIG_FINGERPRINT)

    def _names(self):
        counts = self._u64(OFF_NAME_COUNTS)
        listed_symbols, listed_venues = (counts >> 16) & 0xFFFF, counts >> 48
        room = (HEADER_LEN - OFF_NAMES) // 8
        listed_symbols = min(listed_symbols, room)
        listed_venues = min(listed_venues, (room - listed_symbols) // 2)
        at = OFF_NAMES
        symbols = []
        for _ in range(listed_symbols):
            symbols.append(self._u64(at).to_bytes(8, "little").rstrip(b" ").decode("ascii", "replace"))
            at += 8
        venues = []
        for _ in range(listed_venues):
            raw = self._u64(at).to_bytes(8, "little") + self._u64(at + 8).to_bytes(8, "little")
            venues.append(raw.rstrip(b" ").decode("utf-8", "replace"))
            at += 16
        return symbols, venues

    def table_complete(self):
        """Whether the header lists every configured symbol and venue (it has room for 383
        words: symbols first, then two per venue). Only a complete table can be declared from
        the header; a strategy of a larger engine declares the table it was built for."""
        counts = self._u64(OFF_NAME_COUNTS)
        return (counts & 0xFFFF) == ((counts >> 16) & 0xFFFF) and \
            ((counts >> 32) & 0xFFFF) == (counts >> 48)

    def symbol_names(self):
        """The engine's symbols; a command's symbol is the index of its name here."""
        return self._names()[0]

    def venue_names(self):
        """The engine's venues; a command's venue is the index of its name here."""
        return self._names()[1]

    def declare_table(self, symbols, venues):
        """Declares the table this strategy was built for. The engine refuses the channel
        (fault 5) if its own table differs; refused here at once if it already does."""
        ours = fingerprint(symbols, venues)
        self._set_u64(OFF_DECLARED_FINGERPRINT, ours)
        engine = self.config_fingerprint()
        if engine not in (0, ours):
            raise ChannelError(
                f"this strategy's table (symbols {list(symbols)}, fingerprint {ours:#018x}) is not "
                f"the engine's (symbols {self.symbol_names()}, fingerprint {engine:#018x})")

    def engine_epoch(self):
        return self._u64(OFF_ENGINE_EPOCH)

    def channel_fault(self):
        """The fault code the engine declared on this file (0: none; docs/ipc.md)."""
        return self._u64(OFF_CHANNEL_FAULT)

    def venue_synced(self, venue):
        return bool(self._u64(OFF_VENUES_SYNCED) & (1 << venue))

    def id_floor(self):
        return self._u64(OFF_ID_FLOOR)

    def beat(self):
        self._set_u64(OFF_STRATEGY_HEARTBEAT, self._u64(OFF_STRATEGY_HEARTBEAT) + 1)

    # Commands -------------------------------------------------------------------------
    def _cmd_head(self):
        head = self._u64(OFF_CMD_HEAD)
        if head < self.cmd_head_seen or head > self.cmd_tail:
            self._broken(f"command head {head}: last {self.cmd_head_seen}, tail {self.cmd_tail}")
        self.cmd_head_seen = head
        return head

    def _check_engine_verdict(self):
        code = self.channel_fault()
        if code and not self.fault:
            self._broken(f"the engine declared this channel broken (fault {code}, docs/ipc.md); "
                         "it reads no more commands from it")

    def _push(self, record):
        self._check_engine_verdict()
        if self.fault:
            raise ChannelError(self.fault)
        tail, head = self.cmd_tail, self._cmd_head()
        if tail - head >= self.cmd_cap:
            return False
        body = bytearray(record)
        struct.pack_into("<Q", body, 8, tail)  # the record's ring position (private bytes)
        struct.pack_into("<I", body, 0, zlib.crc32(bytes(body[4:])))
        at = self.cmd_base + (tail % self.cmd_cap) * RECORD_LEN
        self.m[at:at + RECORD_LEN] = bytes(body)
        self.cmd_tail = tail + 1
        self._set_u64(OFF_CMD_TAIL, tail + 1)  # publish only after the whole record
        return True

    def order_id(self, sequence):
        return (self.strategy << 48) | sequence

    def new_order(self, order_id, venue, symbol, buy, price, qty, ioc=False, reduce_only=False):
        """reduce_only: the order may only bring the position towards zero (byte 7, bit 0;
        refused "reduce-only increases" otherwise, docs/ipc.md)."""
        r = bytearray(RECORD_LEN)
        r[4], r[5], r[6] = CMD_NEW, 1 if buy else 2, 2 if ioc else 1
        r[7] = 1 if reduce_only else 0
        struct.pack_into("<QHH", r, 16, order_id, venue, symbol)
        struct.pack_into("<I", r, 32, qty)
        struct.pack_into("<q", r, 40, price)
        return self._push(r)

    def cancel(self, order_id):
        r = bytearray(RECORD_LEN)
        r[4] = CMD_CANCEL
        struct.pack_into("<Q", r, 16, order_id)
        return self._push(r)

    # Events ---------------------------------------------------------------------------
    def poll_event(self):
        """The next event as a dict, or None. A bad record or index raises ChannelError."""
        self._check_engine_verdict()
        if self.fault:
            raise ChannelError(self.fault)
        head, tail = self.evt_head, self._u64(OFF_EVT_TAIL)
        if tail < self.evt_tail_seen or tail - head > self.evt_cap:
            self._broken(f"event tail {tail}: last {self.evt_tail_seen}, head {head}")
        self.evt_tail_seen = tail
        if head == tail:
            return None
        at = self.evt_base + (head % self.evt_cap) * RECORD_LEN
        r = bytes(self.m[at:at + RECORD_LEN])
        self.evt_head = head + 1
        self._set_u64(OFF_EVT_HEAD, head + 1)
        (crc,) = struct.unpack_from("<I", r, 0)
        if crc != zlib.crc32(r[4:]):
            raise ChannelError(f"event {head}: bad checksum")
        (position,) = struct.unpack_from("<Q", r, 8)
        if position != head:
            raise ChannelError(f"event {head}: says position {position}")
        kind = EVENT_NAMES.get(r[4], f"kind-{r[4]}")
        order_id, other, qty, leaves, price, at_ns = struct.unpack_from("<QQIIqQ", r, 16)
        event = {"kind": kind, "id": order_id, "reason": r[5], "qty": qty, "leaves": leaves,
                 "price": price, "other": other, "at_ns": at_ns}
        if kind == "refused":
            event["refusal"] = REFUSAL_NAMES.get(r[5], f"refusal-{r[5]}")
        return event


def fingerprint(symbols, venues):
    """FNV-1a (64-bit) over each symbol name, a 0 byte, a 1 byte, each venue name and a 0
    byte; never 0. The same function as the engine's (docs/ipc.md)."""
    h = 0xCBF29CE484222325
    data = b"".join(s.encode("ascii").rstrip(b" ") + b"\0" for s in symbols) + b"\1"
    data += b"".join(v.encode("utf-8") + b"\0" for v in venues)
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return max(h, 1)


def pid_alive(pid):
    """Whether process `pid` exists (signal 0 checks without sending anything)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def wait_for(channel, what, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not what():
        channel.beat()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("channel", help="the strategy's channel file, e.g. /dev/shm/keel/strategy-0")
    ap.add_argument("--orders", type=int, default=20)
    ap.add_argument("--venue", default=None, help="venue name (default: the engine's first)")
    ap.add_argument("--symbol", default=None, help="symbol name (default: the engine's first)")
    ap.add_argument("--table", default=None,
                    help="the symbols this strategy was built for, comma-separated, in the "
                         "engine's order (default: trust the engine's table)")
    ap.add_argument("--timeout-s", type=float, default=20.0)
    args = ap.parse_args()
    try:
        ch = Channel(args.channel)
    except (OSError, ChannelError) as e:
        print(f"keel_strategy: {e}", file=sys.stderr)
        return 2
    # A header alone may be a dead engine's: wait for a live engine (heartbeat moving, pid
    # alive) that says the venue is SYNCED.
    if not wait_for(ch, lambda: ch.engine_live() and ch.config_fingerprint(), args.timeout_s):
        print("keel_strategy: no live engine", file=sys.stderr)
        return 1
    # Symbols and venues by name, never by a number guessed from a configuration file.
    symbols, venues = ch.symbol_names(), ch.venue_names()
    try:
        if args.table is not None:
            ch.declare_table(args.table.split(","), venues)
        elif ch.table_complete():
            ch.declare_table(symbols, venues)
        else:
            print("keel_strategy: the engine lists only the first of its symbols/venues in the "
                  "header; trading by the names listed, without declaring a table (pass --table "
                  "to declare the whole one)", file=sys.stderr)
    except ChannelError as e:
        print(f"keel_strategy: {e}", file=sys.stderr)
        return 2
    if args.symbol and args.symbol not in symbols or args.venue and args.venue not in venues:
        print(f"keel_strategy: the engine trades symbols {symbols} on venues {venues}", file=sys.stderr)
        return 2
    symbol = symbols.index(args.symbol) if args.symbol else 0
    venue = venues.index(args.venue) if args.venue else 0
    if not wait_for(ch, lambda: ch.engine_live() and ch.venue_synced(venue), args.timeout_s):
        print("keel_strategy: no live engine, or venue not SYNCED", file=sys.stderr)
        return 1
    # Ids above everything the engine has seen from this strategy (the floor survives restarts).
    next_seq = ch.id_floor() + 1
    resting = 50 * PRICE_SCALE  # a bid far below the market: it rests until canceled
    placed, seen = [], {}
    for i in range(args.orders):
        oid = ch.order_id(next_seq + i)
        while not ch.new_order(oid, venue, symbol, True, resting, 1 + i % 5):
            ch.beat()
            time.sleep(0.001)
        placed.append(oid)

    def drain():
        while True:
            e = ch.poll_event()
            if e is None:
                return
            seen.setdefault(e["id"], []).append(e["kind"])

    def all_have(kind):
        drain()
        return all(kind in seen.get(oid, []) for oid in placed)

    accepted = wait_for(ch, lambda: all_have("accepted"), args.timeout_s)
    for oid in placed:
        while not ch.cancel(oid):
            ch.beat()
            time.sleep(0.001)
    canceled = wait_for(ch, lambda: all_have("canceled"), args.timeout_s)
    drain()
    kinds = {}
    for evs in seen.values():
        for k in evs:
            kinds[k] = kinds.get(k, 0) + 1
    print(json.dumps({"strategy": ch.strategy, "placed": len(placed), "events": kinds,
                      "all_accepted": accepted, "all_canceled": canceled,
                      "first_id": placed[0] if placed else None}))
    return 0 if accepted and canceled else 1


if __name__ == "__main__":
    sys.exit(main())
