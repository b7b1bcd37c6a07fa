//! The 64-byte records of the shared-memory rings (layout in docs/ipc.md).
//!
//! ```text
//! 0..4   CRC-32 (IEEE, as zlib.crc32) of bytes 4..64
//! 4      kind
//! 5      reason code (events) / side (new orders)
//! 6      sub-code (venue reject code, time in force)
//! 7      flags (new orders: bit 0 reduce-only; other bits must be zero)
//! 8..16  ring position (u64): the record's index in its ring since the file was created
//! 16..   payload, little-endian
//! ```

use super::{RecordError, RECORD_LEN};
use crate::order::{
    CancelRejectReason, ClientOrderId, Command, Event, EventKind, MassCancelScope, NewOrder, Price,
    RefusalReason, RejectReason, Replace, Side, SymbolId, TimeInForce, VenueId,
};

/// What the engine tells a strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcEvent {
    /// An event about one of its orders.
    Event(Event),
    /// One of its command records was refused (and skipped); nothing was done for it.
    Malformed(RecordError),
}

const CMD_NEW: u8 = 1;
const CMD_CANCEL: u8 = 2;
const CMD_REPLACE: u8 = 3;
const CMD_MASS_CANCEL: u8 = 4;
/// Byte 7 of a new order (always zero before the flag: old strategies send plain orders).
/// Any other bit set is refused, so a future flag is never silently ignored.
const FLAG_REDUCE_ONLY: u8 = 1;

const EV_ACCEPTED: u8 = 1;
const EV_PARTIALLY_FILLED: u8 = 2;
const EV_FILLED: u8 = 3;
const EV_CANCELED: u8 = 4;
const EV_REPLACED: u8 = 5;
const EV_REJECTED: u8 = 6;
const EV_CANCEL_REJECTED: u8 = 7;
const EV_UNKNOWN: u8 = 8;
const EV_SHED: u8 = 9;
const EV_THROTTLED: u8 = 10;
const EV_BREAKER_OPEN: u8 = 11;
const EV_REFUSED: u8 = 12;
const EV_MALFORMED: u8 = 13;

/// Every command kind's wire code and name.
pub const COMMAND_KINDS: [(u8, &str); 4] = [
    (CMD_NEW, "new order"),
    (CMD_CANCEL, "cancel"),
    (CMD_REPLACE, "replace"),
    (CMD_MASS_CANCEL, "mass cancel"),
];

/// Every event kind's wire code and name (docs/ipc.md): the C header (sdk/c/keel.h) spells
/// them the same, checked by a test.
pub const EVENT_KINDS: [(u8, &str); 13] = [
    (EV_ACCEPTED, "accepted"),
    (EV_PARTIALLY_FILLED, "partially filled"),
    (EV_FILLED, "filled"),
    (EV_CANCELED, "canceled"),
    (EV_REPLACED, "replaced"),
    (EV_REJECTED, "rejected"),
    (EV_CANCEL_REJECTED, "cancel rejected"),
    (EV_UNKNOWN, "unknown"),
    (EV_SHED, "shed"),
    (EV_THROTTLED, "throttled"),
    (EV_BREAKER_OPEN, "breaker open"),
    (EV_REFUSED, "refused"),
    (EV_MALFORMED, "malformed"),
];

/// Every reason code of a `rejected` event and its name.
pub const REJECT_REASONS: [(u8, &str); 7] = [
    (1, "venue system"),
    (2, "venue throttle"),
    (3, "invalid"),
    (4, "duplicate id"),
    (5, "market closed"),
    (6, "not received"),
    (7, "other"),
];

/// Every reason code of a `cancel rejected` event and its name.
pub const CANCEL_REJECT_REASONS: [(u8, &str); 4] = [
    (1, "too late"),
    (2, "unknown order"),
    (3, "venue system"),
    (4, "not applied"),
];

/// Every refusal reason with its wire code (declared with the reason: `order::RefusalReason`),
/// written down in docs/ipc.md and pinned there by a test.
pub const REFUSAL_CODES: [(RefusalReason, u8); RefusalReason::COUNT] = {
    let mut table = [(RefusalReason::NotSynced, 0); RefusalReason::COUNT];
    let mut i = 0;
    while i < RefusalReason::COUNT {
        let r = RefusalReason::ALL[i];
        table[i] = (r, r.code());
        i += 1;
    }
    table
};

/// The wire code of `reason`.
pub fn refusal_code(reason: RefusalReason) -> u8 {
    reason.code()
}

/// The reason a wire code names (`None`: no such code).
pub fn refusal_from_code(code: u8) -> Option<RefusalReason> {
    RefusalReason::from_code(code)
}

/// Stamps `position` and the checksum.
pub(super) fn seal(record: &mut [u8; RECORD_LEN], position: u64) {
    record[8..16].copy_from_slice(&position.to_le_bytes());
    let crc = crc32fast::hash(&record[4..]);
    record[0..4].copy_from_slice(&crc.to_le_bytes());
}

fn check(position: u64, record: &[u8; RECORD_LEN]) -> Result<(), RecordError> {
    let found = u32::from_le_bytes(record[0..4].try_into().expect("4"));
    let computed = crc32fast::hash(&record[4..]);
    if found != computed {
        return Err(RecordError::Checksum {
            position,
            found,
            computed,
        });
    }
    let at = u64::from_le_bytes(record[8..16].try_into().expect("8"));
    if at != position {
        return Err(RecordError::Position {
            position,
            found: at,
        });
    }
    Ok(())
}

fn put_u16(r: &mut [u8], at: usize, v: u16) {
    r[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(r: &mut [u8], at: usize, v: u32) {
    r[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(r: &mut [u8], at: usize, v: u64) {
    r[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn u16_at(r: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(r[at..at + 2].try_into().expect("2"))
}
fn u32_at(r: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(r[at..at + 4].try_into().expect("4"))
}
fn u64_at(r: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(r[at..at + 8].try_into().expect("8"))
}

/// A command as a record (unsealed: the ring stamps position and checksum).
pub fn encode_command(command: &Command) -> [u8; RECORD_LEN] {
    let mut r = [0u8; RECORD_LEN];
    match *command {
        Command::New(o) => {
            r[4] = CMD_NEW;
            r[5] = match o.side {
                Side::Buy => 1,
                Side::Sell => 2,
            };
            r[6] = match o.tif {
                TimeInForce::Day => 1,
                TimeInForce::ImmediateOrCancel => 2,
            };
            if o.reduce_only {
                r[7] = FLAG_REDUCE_ONLY;
            }
            put_u64(&mut r, 16, o.id.0);
            put_u16(&mut r, 24, o.venue.0);
            put_u16(&mut r, 26, o.symbol.0);
            put_u32(&mut r, 32, o.qty);
            put_u64(&mut r, 40, o.price.0 as u64);
        }
        Command::Cancel { id } => {
            r[4] = CMD_CANCEL;
            put_u64(&mut r, 16, id.0);
        }
        Command::Replace(x) => {
            r[4] = CMD_REPLACE;
            put_u64(&mut r, 16, x.id.0);
            put_u64(&mut r, 24, x.new_id.0);
            put_u32(&mut r, 32, x.qty);
            put_u64(&mut r, 40, x.price.0 as u64);
        }
        Command::MassCancel { scope } => {
            r[4] = CMD_MASS_CANCEL;
            match scope {
                MassCancelScope::Strategy => r[5] = 1,
                MassCancelScope::Symbol(s) => {
                    r[5] = 2;
                    put_u16(&mut r, 26, s.0);
                }
            }
        }
    }
    r
}

fn id_at(
    position: u64,
    r: &[u8],
    at: usize,
    field: &'static str,
) -> Result<ClientOrderId, RecordError> {
    let raw = u64_at(r, at);
    let id = ClientOrderId(raw);
    if raw == 0 || ClientOrderId::new(id.strategy(), id.sequence()).ok() != Some(id) {
        return Err(RecordError::Field {
            position,
            field,
            value: raw,
        });
    }
    Ok(id)
}

/// Checks and decodes a command record.
pub fn decode_command(position: u64, r: &[u8; RECORD_LEN]) -> Result<Command, RecordError> {
    check(position, r)?;
    let field = |field, value: u64| RecordError::Field {
        position,
        field,
        value,
    };
    Ok(match r[4] {
        CMD_NEW => Command::New(NewOrder {
            id: id_at(position, r, 16, "id")?,
            venue: VenueId(u16_at(r, 24)),
            symbol: SymbolId(u16_at(r, 26)),
            side: match r[5] {
                1 => Side::Buy,
                2 => Side::Sell,
                v => return Err(field("side", u64::from(v))),
            },
            tif: match r[6] {
                1 => TimeInForce::Day,
                2 => TimeInForce::ImmediateOrCancel,
                v => return Err(field("time_in_force", u64::from(v))),
            },
            qty: u32_at(r, 32),
            price: Price(u64_at(r, 40) as i64),
            reduce_only: match r[7] {
                0 => false,
                FLAG_REDUCE_ONLY => true,
                v => return Err(field("flags", u64::from(v))),
            },
        }),
        CMD_CANCEL => Command::Cancel {
            id: id_at(position, r, 16, "id")?,
        },
        CMD_REPLACE => Command::Replace(Replace {
            id: id_at(position, r, 16, "id")?,
            new_id: id_at(position, r, 24, "new_id")?,
            qty: u32_at(r, 32),
            price: Price(u64_at(r, 40) as i64),
        }),
        CMD_MASS_CANCEL => Command::MassCancel {
            scope: match r[5] {
                1 => MassCancelScope::Strategy,
                2 => MassCancelScope::Symbol(SymbolId(u16_at(r, 26))),
                v => return Err(field("scope", u64::from(v))),
            },
        },
        v => return Err(field("kind", u64::from(v))),
    })
}

fn reject_code(reason: RejectReason) -> (u8, u8) {
    match reason {
        RejectReason::VenueSystem => (1, 0),
        RejectReason::VenueThrottle => (2, 0),
        RejectReason::Invalid => (3, 0),
        RejectReason::DuplicateId => (4, 0),
        RejectReason::MarketClosed => (5, 0),
        RejectReason::NotReceived => (6, 0),
        RejectReason::Other(code) => (7, code),
    }
}

fn cancel_reject_code(reason: CancelRejectReason) -> u8 {
    match reason {
        CancelRejectReason::TooLateToCancel => 1,
        CancelRejectReason::UnknownOrder => 2,
        CancelRejectReason::VenueSystem => 3,
        CancelRejectReason::NotApplied => 4,
    }
}

/// An event as a record (unsealed).
pub fn encode_event(event: &IpcEvent) -> [u8; RECORD_LEN] {
    let mut r = [0u8; RECORD_LEN];
    let e = match event {
        IpcEvent::Event(e) => e,
        IpcEvent::Malformed(error) => {
            r[4] = EV_MALFORMED;
            let (code, position, value) = match *error {
                RecordError::Checksum { position, .. } => (1, position, 0),
                RecordError::Position { position, found } => (2, position, found),
                RecordError::Field {
                    position, value, ..
                } => (3, position, value),
            };
            r[5] = code;
            put_u64(&mut r, 24, position);
            put_u64(&mut r, 32, value);
            return r;
        }
    };
    put_u64(&mut r, 16, e.id.0);
    put_u64(&mut r, 48, e.at_ns);
    r[4] = match e.kind {
        EventKind::Accepted => EV_ACCEPTED,
        EventKind::PartiallyFilled { qty, price, leaves } => {
            put_u32(&mut r, 32, qty);
            put_u32(&mut r, 36, leaves);
            put_u64(&mut r, 40, price.0 as u64);
            EV_PARTIALLY_FILLED
        }
        EventKind::Filled { qty, price } => {
            put_u32(&mut r, 32, qty);
            put_u64(&mut r, 40, price.0 as u64);
            EV_FILLED
        }
        EventKind::Canceled => EV_CANCELED,
        EventKind::Replaced { new_id } => {
            put_u64(&mut r, 24, new_id.0);
            EV_REPLACED
        }
        EventKind::Rejected { reason } => {
            (r[5], r[6]) = reject_code(reason);
            EV_REJECTED
        }
        EventKind::CancelRejected { reason } => {
            r[5] = cancel_reject_code(reason);
            EV_CANCEL_REJECTED
        }
        EventKind::Unknown => EV_UNKNOWN,
        EventKind::Shed => EV_SHED,
        EventKind::Throttled => EV_THROTTLED,
        EventKind::BreakerOpen { retry_after_ns } => {
            put_u64(&mut r, 24, retry_after_ns);
            EV_BREAKER_OPEN
        }
        EventKind::Refused { reason } => {
            r[5] = refusal_code(reason);
            EV_REFUSED
        }
    };
    r
}

/// Checks and decodes an event record.
pub fn decode_event(position: u64, r: &[u8; RECORD_LEN]) -> Result<IpcEvent, RecordError> {
    check(position, r)?;
    let field = |field, value: u8| RecordError::Field {
        position,
        field,
        value: u64::from(value),
    };
    if r[4] == EV_MALFORMED {
        let (at, value) = (u64_at(r, 24), u64_at(r, 32));
        return Ok(IpcEvent::Malformed(match r[5] {
            1 => RecordError::Checksum {
                position: at,
                found: 0,
                computed: 0,
            },
            2 => RecordError::Position {
                position: at,
                found: value,
            },
            3 => RecordError::Field {
                position: at,
                field: "command",
                value,
            },
            v => return Err(field("malformed code", v)),
        }));
    }
    let kind = match r[4] {
        EV_ACCEPTED => EventKind::Accepted,
        EV_PARTIALLY_FILLED => EventKind::PartiallyFilled {
            qty: u32_at(r, 32),
            leaves: u32_at(r, 36),
            price: Price(u64_at(r, 40) as i64),
        },
        EV_FILLED => EventKind::Filled {
            qty: u32_at(r, 32),
            price: Price(u64_at(r, 40) as i64),
        },
        EV_CANCELED => EventKind::Canceled,
        EV_REPLACED => EventKind::Replaced {
            new_id: ClientOrderId(u64_at(r, 24)),
        },
        EV_REJECTED => EventKind::Rejected {
            reason: match r[5] {
                1 => RejectReason::VenueSystem,
                2 => RejectReason::VenueThrottle,
                3 => RejectReason::Invalid,
                4 => RejectReason::DuplicateId,
                5 => RejectReason::MarketClosed,
                6 => RejectReason::NotReceived,
                7 => RejectReason::Other(r[6]),
                v => return Err(field("reject reason", v)),
            },
        },
        EV_CANCEL_REJECTED => EventKind::CancelRejected {
            reason: match r[5] {
                1 => CancelRejectReason::TooLateToCancel,
                2 => CancelRejectReason::UnknownOrder,
                3 => CancelRejectReason::VenueSystem,
                4 => CancelRejectReason::NotApplied,
                v => return Err(field("cancel reject reason", v)),
            },
        },
        EV_UNKNOWN => EventKind::Unknown,
        EV_SHED => EventKind::Shed,
        EV_THROTTLED => EventKind::Throttled,
        EV_BREAKER_OPEN => EventKind::BreakerOpen {
            retry_after_ns: u64_at(r, 24),
        },
        EV_REFUSED => EventKind::Refused {
            reason: refusal_from_code(r[5]).ok_or(field("refusal reason", r[5]))?,
        },
        v => return Err(field("kind", v)),
    };
    Ok(IpcEvent::Event(Event {
        id: ClientOrderId(u64_at(r, 16)),
        kind,
        at_ns: u64_at(r, 48),
    }))
}
