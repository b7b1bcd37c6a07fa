#!/usr/bin/env python3
"""Reads a running keel engine's counters file (docs/observability.md), standard library only.

    python3 examples/python/keel_counters.py /dev/shm/keel/counters          # one JSON object
    python3 examples/python/keel_counters.py /dev/shm/keel/counters --name keel_sent_total

Exit status: 0, or 2 for a file that is not a keel counters file. Copy `read_counters`: it is
the whole reader (about 60 lines), including the retry that makes each region's copy
consistent while the engine writes it.
"""

import argparse
import json
import mmap
import os
import struct
import sys

MAGIC = b"KEELCNT\0"
VERSION = 1
HEADER_LEN = 4096
DESCRIPTOR_LEN = 128
NAME_LEN, LABELS_LEN = 48, 64
REGION_HEADER_LEN = 64
BUCKETS = 304  # docs/observability.md, "Histograms"
KINDS = {1: "counter", 2: "gauge", 3: "histogram"}


class CountersError(Exception):
    pass


def read_counters(path):
    """A consistent copy of every metric: {"pid", "state", "metrics": [{name, labels, kind, ...}]}."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < HEADER_LEN:
            raise CountersError(f"{path}: {size} bytes, shorter than the header")
        m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    words = memoryview(m).cast("Q")  # every u64 is read with one aligned 8-byte load
    if m[0:8] != MAGIC:
        raise CountersError(f"{path}: not a keel counters file")
    version, count, regions = struct.unpack_from("<III", m, 8)
    if version != VERSION:
        raise CountersError(f"{path}: version {version}, this reader knows {VERSION}")
    pid, started, state = words[24 // 8], words[32 // 8], words[40 // 8]
    table = [struct.unpack_from("<QQ", m, 64 + 16 * r) for r in range(regions)]
    values = []
    for at, n in table:
        if at % 64 or at + REGION_HEADER_LEN + 8 * n > size:
            raise CountersError(f"{path}: region at {at} with {n} values does not fit")
        first = (at + REGION_HEADER_LEN) // 8
        for _ in range(1000):  # the sequence word is odd while the loop writes
            before = words[at // 8]
            copy = list(words[first:first + n])
            if before % 2 == 0 and words[at // 8] == before:
                break
        values.append(copy)
    metrics = []
    for i in range(count):
        at = HEADER_LEN + i * DESCRIPTOR_LEN
        kind, region, slot, width = struct.unpack_from("<IIII", m, at)
        name = m[at + 16:at + 16 + NAME_LEN].split(b"\0")[0].decode()
        labels = m[at + 16 + NAME_LEN:at + 16 + NAME_LEN + LABELS_LEN].split(b"\0")[0].decode()
        if region >= regions or slot + width > len(values[region]):
            raise CountersError(f"{path}: descriptor {i} does not fit its region")
        v = values[region][slot:slot + width]
        metric = {"name": name, "labels": labels, "kind": KINDS.get(kind, str(kind))}
        if kind == 3:
            metric.update(count=v[0], sum_ns=v[1], buckets=v[2:2 + BUCKETS])
        else:
            metric["value"] = v[0]
        metrics.append(metric)
    words.release()
    m.close()
    return {"pid": pid, "started_unix_ns": started, "state": state, "metrics": metrics}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", help="the counters file, e.g. /dev/shm/keel/counters")
    ap.add_argument("--name", help="only metrics of this name")
    args = ap.parse_args()
    try:
        snap = read_counters(args.file)
    except (OSError, CountersError) as e:
        print(f"keel_counters: {e}", file=sys.stderr)
        return 2
    if args.name:
        snap["metrics"] = [m for m in snap["metrics"] if m["name"] == args.name]
    print(json.dumps(snap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
