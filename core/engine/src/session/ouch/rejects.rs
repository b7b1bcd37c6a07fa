//! What a venue's OUCH reject codes mean for the engine (its reject table).

use crate::order::RejectReason;
use crate::proto::ouch::RejectCode;

/// Reject codes a venue's table may list (a real venue's table is a few dozen at most).
pub const REJECT_CODES_MAX: usize = 64;

/// What a venue's OUCH reject codes mean: OUCH leaves the table to each venue, and what the
/// engine does with a reject depends on it (a throttle cools the rate limiter down, a system
/// failure counts against the breaker, a duplicate id is a bug to report). By default keel's
/// own table ([`RejectCode`], which the simulated venue writes); a `[[venue]]` names its
/// venue's codes instead (docs/config.md). A code the table does not list is
/// `RejectReason::Other(code)` (codes above 255 are carried as 255).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejectTable {
    entries: [(u16, RejectReason); REJECT_CODES_MAX],
    len: usize,
}

/// The table cannot take another code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RejectTableError {
    /// More codes than [`REJECT_CODES_MAX`].
    #[error("more than {REJECT_CODES_MAX} reject codes")]
    Full,
    /// The code already has a meaning.
    #[error("reject code {code} listed twice")]
    Duplicate {
        /// The code.
        code: u16,
    },
}

impl RejectTable {
    /// A table that lists nothing (every code is `Other`).
    pub const EMPTY: Self = Self {
        entries: [(0, RejectReason::Other(0)); REJECT_CODES_MAX],
        len: 0,
    };

    /// keel's own table ([`RejectCode`], docs/protocol.md).
    pub fn keel() -> Self {
        let mut t = Self::EMPTY;
        let codes = [
            (RejectCode::Throttled, RejectReason::VenueThrottle),
            (RejectCode::SystemUnavailable, RejectReason::VenueSystem),
            (RejectCode::DuplicateId, RejectReason::DuplicateId),
            (RejectCode::InvalidQuantity, RejectReason::Invalid),
            (RejectCode::InvalidPrice, RejectReason::Invalid),
            (RejectCode::UnknownSymbol, RejectReason::Invalid),
            (RejectCode::UnknownOrder, RejectReason::Invalid),
        ];
        for (code, reason) in codes {
            t.insert(code as u16, reason).expect("keel's table fits");
        }
        t
    }

    /// Gives `code` its meaning.
    pub fn insert(&mut self, code: u16, reason: RejectReason) -> Result<(), RejectTableError> {
        if self.entries[..self.len].iter().any(|(c, _)| *c == code) {
            return Err(RejectTableError::Duplicate { code });
        }
        let slot = self
            .entries
            .get_mut(self.len)
            .ok_or(RejectTableError::Full)?;
        *slot = (code, reason);
        self.len += 1;
        Ok(())
    }

    /// The codes listed, with their meanings.
    pub fn entries(&self) -> &[(u16, RejectReason)] {
        &self.entries[..self.len]
    }

    /// What `code` means.
    pub fn reason(&self, code: u16) -> RejectReason {
        self.entries[..self.len]
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(RejectReason::Other(code.min(255) as u8), |(_, r)| *r)
    }
}

impl Default for RejectTable {
    fn default() -> Self {
        Self::keel()
    }
}
