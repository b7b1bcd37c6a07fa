"""The channel's layout and codes (docs/ipc.md), as the engine defines them.

Every number and name here is checked against the engine's Rust definitions by a test
(core/cli/tests/sdk_python.rs): a change on one side fails it. `python -m keel.layout` prints
them as JSON.
"""

MAGIC = b"KEELSHM\0"
VERSION = 1
RECORD_LEN = 64
HEADER_LEN = 4096
CAPACITY_MAX = 1 << 20
SYMBOL_NAME_LEN = 8
VENUE_NAME_LEN = 16
PRICE_SCALE = 10_000  # prices are fixed point with 4 decimals: 100.25 is 1_002_500

# Header offsets (bytes).
OFFSETS = {
    "MAGIC": 0,
    "VERSION": 8,
    "RECORD_LEN": 12,
    "COMMAND_CAPACITY": 16,
    "EVENT_CAPACITY": 20,
    "STRATEGY": 24,
    "ENGINE_HEARTBEAT": 64,
    "ENGINE_EPOCH": 72,
    "ENGINE_STATE": 80,
    "ID_FLOOR": 88,
    "VENUES_SYNCED": 96,
    "ENGINE_PID": 104,
    "CHANNEL_FAULT": 112,
    "STRATEGY_HEARTBEAT": 128,
    "STRATEGY_PID": 136,
    "DECLARED_FINGERPRINT": 144,
    "COMMAND_TAIL": 192,
    "COMMAND_HEAD": 256,
    "EVENT_TAIL": 320,
    "EVENT_HEAD": 384,
    "FAULT_FOUND": 448,
    "FAULT_LIMIT": 456,
    "CONFIG_FINGERPRINT": 512,
    "NAME_COUNTS": 1024,
    "NAMES": 1032,
}

ENGINE_STATES = {0: "absent", 1: "starting", 2: "running", 3: "stopped"}
ENGINE_RUNNING, ENGINE_STOPPED = 2, 3

# Channel faults the engine declares (header word CHANNEL_FAULT).
FAULTS = {
    1: "command tail went back",
    2: "command tail beyond the ring",
    3: "event head went back",
    4: "event head beyond the event tail",
    5: "the strategy declared another symbol/venue table",
}

COMMAND_KINDS = {1: "new order", 2: "cancel", 3: "replace", 4: "mass cancel"}
CMD_NEW, CMD_CANCEL, CMD_REPLACE, CMD_MASS_CANCEL = 1, 2, 3, 4
SIDE_BUY, SIDE_SELL = 1, 2
TIF_DAY, TIF_IOC = 1, 2
FLAG_REDUCE_ONLY = 1
SCOPE_STRATEGY, SCOPE_SYMBOL = 1, 2

EVENT_KINDS = {
    1: "accepted",
    2: "partially filled",
    3: "filled",
    4: "canceled",
    5: "replaced",
    6: "rejected",
    7: "cancel rejected",
    8: "unknown",
    9: "shed",
    10: "throttled",
    11: "breaker open",
    12: "refused",
    13: "malformed",
}

REJECT_REASONS = {
    1: "venue system",
    2: "venue throttle",
    3: "invalid",
    4: "duplicate id",
    5: "market closed",
    6: "not received",
    7: "other",
}

CANCEL_REJECT_REASONS = {1: "too late", 2: "unknown order", 3: "venue system", 4: "not applied"}

# Refused by keel: code -> (name, advice). "pause": transient capacity, send a new order again
# after a pause; "never": final, never retry the same order. Codes never change.
REFUSALS = {
    1: ("not synced", "never"),
    2: ("risk qty", "never"),
    3: ("risk notional", "never"),
    4: ("risk position", "never"),
    5: ("unknown order on symbol", "never"),
    6: ("bulkhead symbol", "pause"),
    7: ("bulkhead venue", "pause"),
    8: ("cancel lane full", "pause"),
    9: ("replace lane full", "pause"),
    10: ("new lane full", "pause"),
    11: ("duplicate id", "never"),
    12: ("order table full", "never"),
    13: ("unknown order", "never"),
    14: ("already pending", "never"),
    15: ("executor stalled", "never"),
    16: ("journal unavailable", "never"),
    17: ("bad route", "never"),
    18: ("link read-only", "never"),
    19: ("risk price", "never"),
    20: ("session full", "never"),
    21: ("kill switch", "never"),
    22: ("strategy disabled", "never"),
    23: ("symbol shed", "never"),
    30: ("strategy rate", "pause"),
    31: ("strategy in flight", "pause"),
    40: ("reduce-only increases", "never"),
}

MALFORMED = {1: "checksum", 2: "position", 3: "field"}


def as_json() -> str:
    """Everything above, as JSON (for the lockstep test)."""
    import json

    return json.dumps(
        {
            "magic": MAGIC.decode("ascii").rstrip("\0"),
            "version": VERSION,
            "record_len": RECORD_LEN,
            "header_len": HEADER_LEN,
            "capacity_max": CAPACITY_MAX,
            "symbol_name_len": SYMBOL_NAME_LEN,
            "venue_name_len": VENUE_NAME_LEN,
            "price_scale": PRICE_SCALE,
            "offsets": OFFSETS,
            "engine_states": ENGINE_STATES,
            "faults": FAULTS,
            "command_kinds": COMMAND_KINDS,
            "sides": [SIDE_BUY, SIDE_SELL],
            "tifs": [TIF_DAY, TIF_IOC],
            "flag_reduce_only": FLAG_REDUCE_ONLY,
            "scopes": [SCOPE_STRATEGY, SCOPE_SYMBOL],
            "event_kinds": EVENT_KINDS,
            "reject_reasons": REJECT_REASONS,
            "cancel_reject_reasons": CANCEL_REJECT_REASONS,
            "refusals": {c: list(v) for c, v in REFUSALS.items()},
            "malformed": MALFORMED,
        },
        sort_keys=True,
    )


if __name__ == "__main__":
    print(as_json())
