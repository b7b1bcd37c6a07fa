//! What the strategy SDKs (sdk/c, sdk/python) are checked against: the engine's header offsets
//! by name, in one list both lockstep tests use.

use keel::ipc::offset;

/// Every header word's offset, by the name both SDKs give it.
pub const HEADER_OFFSETS: [(&str, usize); 25] = [
    ("MAGIC", offset::MAGIC),
    ("VERSION", offset::VERSION),
    ("RECORD_LEN", offset::RECORD_LEN),
    ("COMMAND_CAPACITY", offset::COMMAND_CAPACITY),
    ("EVENT_CAPACITY", offset::EVENT_CAPACITY),
    ("STRATEGY", offset::STRATEGY),
    ("ENGINE_HEARTBEAT", offset::ENGINE_HEARTBEAT),
    ("ENGINE_EPOCH", offset::ENGINE_EPOCH),
    ("ENGINE_STATE", offset::ENGINE_STATE),
    ("ID_FLOOR", offset::ID_FLOOR),
    ("VENUES_SYNCED", offset::VENUES_SYNCED),
    ("ENGINE_PID", offset::ENGINE_PID),
    ("CHANNEL_FAULT", offset::CHANNEL_FAULT),
    ("STRATEGY_HEARTBEAT", offset::STRATEGY_HEARTBEAT),
    ("STRATEGY_PID", offset::STRATEGY_PID),
    ("DECLARED_FINGERPRINT", offset::DECLARED_FINGERPRINT),
    ("COMMAND_TAIL", offset::COMMAND_TAIL),
    ("COMMAND_HEAD", offset::COMMAND_HEAD),
    ("EVENT_TAIL", offset::EVENT_TAIL),
    ("EVENT_HEAD", offset::EVENT_HEAD),
    ("FAULT_FOUND", offset::FAULT_FOUND),
    ("FAULT_LIMIT", offset::FAULT_LIMIT),
    ("CONFIG_FINGERPRINT", offset::CONFIG_FINGERPRINT),
    ("NAME_COUNTS", offset::NAME_COUNTS),
    ("NAMES", offset::NAMES),
];
