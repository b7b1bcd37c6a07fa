//! Identifiers: strategies, venues and client order ids.
//!
//! A [`ClientOrderId`] is 64 bits: the issuing strategy in the top 16, a per-strategy sequence
//! in the low 48. Each strategy allocates its own ids without coordination, and an id is
//! unique across restarts because the allocator works from a *lease*: before it hands out ids
//! above the persisted high-water mark it asks its owner to persist a new mark. After a crash
//! the allocator resumes at the last persisted mark, so at most one unused lease is skipped and
//! no id is ever issued twice.
//!
//! Text form: 13 base-36 digits (`0-9A-Z`), which fits OUCH 5.0's 14-byte alpha ClOrdID field
//! and FIX's ClOrdID(11) string.

use std::fmt;

/// Index of a strategy attached to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StrategyId(pub u16);

/// Index of a venue link configured in the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct VenueId(pub u16);

impl VenueId {
    /// The index into per-venue tables.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Client order id: `strategy << 48 | sequence`. Zero is never issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClientOrderId(pub u64);

/// Length of the base-36 text form.
pub const CLIENT_ORDER_ID_TEXT_LEN: usize = 13;

const SEQUENCE_BITS: u32 = 48;
const SEQUENCE_MASK: u64 = (1 << SEQUENCE_BITS) - 1;
const BASE36: &[u8; 36] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
// 36^13 > 2^64, so every u64 fits in the text form.
const _: () = assert!(36u128.pow(CLIENT_ORDER_ID_TEXT_LEN as u32) > u64::MAX as u128);

impl ClientOrderId {
    /// The id for `sequence` of `strategy`; `sequence` must fit in 48 bits and not be zero.
    pub fn new(strategy: StrategyId, sequence: u64) -> Result<Self, IdError> {
        if sequence == 0 || sequence > SEQUENCE_MASK {
            return Err(IdError::SequenceOutOfRange { sequence });
        }
        Ok(Self(u64::from(strategy.0) << SEQUENCE_BITS | sequence))
    }

    /// The strategy that issued this id.
    pub fn strategy(self) -> StrategyId {
        StrategyId((self.0 >> SEQUENCE_BITS) as u16)
    }

    /// The per-strategy sequence number.
    pub fn sequence(self) -> u64 {
        self.0 & SEQUENCE_MASK
    }

    /// Writes the 13-character base-36 form into `out`, zero-padded, most significant first.
    pub fn encode_text(self, out: &mut [u8; CLIENT_ORDER_ID_TEXT_LEN]) {
        let mut value = self.0;
        for byte in out.iter_mut().rev() {
            *byte = BASE36[(value % 36) as usize];
            value /= 36;
        }
    }

    /// Parses the base-36 form (1 to 13 digits, upper case; trailing spaces allowed, as in
    /// space-padded alpha fields).
    pub fn parse_text(text: &[u8]) -> Result<Self, IdError> {
        let trimmed = match text.iter().rposition(|&b| b != b' ') {
            Some(last) => &text[..=last],
            None => return Err(IdError::Empty),
        };
        if trimmed.len() > CLIENT_ORDER_ID_TEXT_LEN {
            return Err(IdError::TooLong {
                len: trimmed.len() as u32,
            });
        }
        let mut value: u128 = 0;
        for (at, &byte) in trimmed.iter().enumerate() {
            let digit = match byte {
                b'0'..=b'9' => byte - b'0',
                b'A'..=b'Z' => byte - b'A' + 10,
                _ => {
                    return Err(IdError::BadDigit {
                        byte,
                        at: at as u32,
                    })
                }
            };
            value = value * 36 + u128::from(digit);
        }
        u64::try_from(value)
            .map(Self)
            .map_err(|_| IdError::Overflow)
    }
}

impl fmt::Display for ClientOrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = [0u8; CLIENT_ORDER_ID_TEXT_LEN];
        self.encode_text(&mut text);
        // The alphabet is ASCII, so this never fails.
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

/// Errors building or parsing a [`ClientOrderId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The sequence is zero or wider than 48 bits.
    #[error("client order id sequence {sequence} out of range 1..=2^48-1")]
    SequenceOutOfRange {
        /// The offending sequence.
        sequence: u64,
    },
    /// Text form empty.
    #[error("client order id text is empty")]
    Empty,
    /// Text form longer than 13 characters.
    #[error("client order id text has {len} characters, at most 13 allowed")]
    TooLong {
        /// Length found.
        len: u32,
    },
    /// A character outside `0-9A-Z`.
    #[error("client order id text has byte {byte:#04x} at position {at}, expected 0-9 or A-Z")]
    BadDigit {
        /// The byte found.
        byte: u8,
        /// Its position.
        at: u32,
    },
    /// The text encodes a value above `u64::MAX`.
    #[error("client order id text overflows 64 bits")]
    Overflow,
    /// The lease is used up: persist a new high-water mark with [`IdAllocator::extend_lease`].
    #[error("client order id lease exhausted at sequence {next}; persist a new lease first")]
    LeaseExhausted {
        /// The next sequence that would have been issued.
        next: u64,
    },
}

/// Allocates client order ids for one strategy from a persisted lease.
///
/// `extend_lease` returns the new high-water mark; the caller persists it (journal) *before*
/// it allocates ids under it. On restart, `resume` starts at the persisted mark.
#[derive(Debug, Clone)]
pub struct IdAllocator {
    strategy: StrategyId,
    next_sequence: u64,
    lease_end_sequence: u64,
}

impl IdAllocator {
    /// Resumes after a restart at `persisted_high_water_mark` (0 for a first start). No lease
    /// is held yet: call [`IdAllocator::extend_lease`] and persist its result first.
    pub fn resume(strategy: StrategyId, persisted_high_water_mark: u64) -> Self {
        let next_sequence = persisted_high_water_mark + 1;
        Self {
            strategy,
            next_sequence,
            lease_end_sequence: persisted_high_water_mark,
        }
    }

    /// Extends the lease by `block` ids and returns the new high-water mark to persist.
    pub fn extend_lease(&mut self, block: u64) -> u64 {
        assert!(block > 0, "a lease of zero ids is a bug in the caller");
        self.lease_end_sequence = self.lease_end_sequence.max(self.next_sequence - 1) + block;
        self.lease_end_sequence
    }

    /// The next id, or `LeaseExhausted` when a new lease must be persisted first.
    pub fn allocate(&mut self) -> Result<ClientOrderId, IdError> {
        if self.next_sequence > self.lease_end_sequence {
            return Err(IdError::LeaseExhausted {
                next: self.next_sequence,
            });
        }
        let id = ClientOrderId::new(self.strategy, self.next_sequence)?;
        self.next_sequence += 1;
        Ok(id)
    }

    /// Sequences still available under the current lease.
    pub fn lease_remaining(&self) -> u64 {
        (self.lease_end_sequence + 1).saturating_sub(self.next_sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Goal: every id survives its text form; method: round trip arbitrary values.
        #[test]
        fn text_round_trip(raw in any::<u64>()) {
            let id = ClientOrderId(raw);
            let mut text = [0u8; CLIENT_ORDER_ID_TEXT_LEN];
            id.encode_text(&mut text);
            prop_assert_eq!(ClientOrderId::parse_text(&text), Ok(id));
        }

        // Goal: the parser never panics and never accepts a non-digit; method: arbitrary bytes.
        #[test]
        fn parse_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            if let Ok(id) = ClientOrderId::parse_text(&bytes) {
                let mut text = [0u8; CLIENT_ORDER_ID_TEXT_LEN];
                id.encode_text(&mut text);
                prop_assert!(bytes.iter().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase() || *b == b' '));
            }
        }
    }

    // Goal: ids stay unique across a simulated crash; method: allocate under leases, "crash"
    // at random points, resume from the last persisted mark, check no sequence repeats.
    #[test]
    fn unique_across_restarts() {
        let strategy = StrategyId(3);
        let mut persisted = 0;
        let mut seen = std::collections::BTreeSet::new();
        for crash_after in [0u64, 1, 7, 64, 65, 200] {
            let mut alloc = IdAllocator::resume(strategy, persisted);
            for _ in 0..crash_after {
                let id = match alloc.allocate() {
                    Ok(id) => id,
                    Err(IdError::LeaseExhausted { .. }) => {
                        persisted = alloc.extend_lease(64);
                        alloc.allocate().expect("fresh lease")
                    }
                    Err(e) => panic!("{e}"),
                };
                assert_eq!(id.strategy(), strategy);
                assert!(seen.insert(id), "{id} issued twice");
            }
        }
        assert!(seen.len() > 300);
    }

    #[test]
    fn bad_text_is_a_typed_error() {
        assert_eq!(ClientOrderId::parse_text(b"   "), Err(IdError::Empty));
        assert_eq!(
            ClientOrderId::parse_text(b"12a"),
            Err(IdError::BadDigit { byte: b'a', at: 2 })
        );
        assert_eq!(
            ClientOrderId::parse_text(b"ZZZZZZZZZZZZZ"),
            Err(IdError::Overflow)
        );
        assert_eq!(
            ClientOrderId::new(StrategyId(1), 0),
            Err(IdError::SequenceOutOfRange { sequence: 0 })
        );
    }
}
