//! What keel's simulated OUCH venue's reject codes mean: OUCH's default [`RejectTable`].

use crate::order::RejectReason;
use crate::proto::ouch::RejectCode;
pub use crate::session::rejects::{RejectTable, RejectTableError, REJECT_CODES_MAX};

impl RejectTable {
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
}

impl Default for RejectTable {
    fn default() -> Self {
        Self::keel()
    }
}
