//! Helpers for strategies reading keel's events.
//!
//! [`retry_advice`] says what a well-behaved strategy does after a refusal or a failure. Its
//! rule: retry only what is transient capacity (shedding, throttling, a full lane or bulkhead,
//! a venue's throttle or system hiccup), after a pause; never retry what keel is resolving
//! (`Unknown`: keel is asking the venue, and a retry could double the position), what the venue
//! link refuses as a whole (`BreakerOpen`, `NotSynced`: retries would only hammer a link that is
//! already failing), or what is final (risk, invalid orders, duplicates).

use crate::order::{EventKind, RefusalAdvice, RejectReason};

/// What to do after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Send a new order again (with a new id) no sooner than this many nanoseconds from now.
    After(u64),
    /// Do not retry.
    Never,
    /// Not a failure (acks, fills, closes).
    NotApplicable,
}

/// The pause before retrying a transient refusal, unless the event says otherwise.
pub const RETRY_PAUSE_NS: u64 = 10_000_000;

/// What a strategy should do after `kind`. See the module docs for the rule.
pub fn retry_advice(kind: &EventKind) -> Retry {
    match kind {
        EventKind::Shed | EventKind::Throttled => Retry::After(RETRY_PAUSE_NS),
        // Declared with each reason (`order::RefusalReason`): transient capacity pauses.
        EventKind::Refused { reason } => match reason.advice() {
            RefusalAdvice::Pause => Retry::After(RETRY_PAUSE_NS),
            RefusalAdvice::Never => Retry::Never,
        },
        EventKind::Rejected {
            reason: RejectReason::VenueThrottle | RejectReason::VenueSystem,
        } => Retry::After(RETRY_PAUSE_NS),
        EventKind::Rejected { .. } | EventKind::BreakerOpen { .. } | EventKind::Unknown => {
            Retry::Never
        }
        EventKind::CancelRejected { .. } => Retry::Never,
        EventKind::Accepted
        | EventKind::PartiallyFilled { .. }
        | EventKind::Filled { .. }
        | EventKind::Canceled
        | EventKind::Replaced { .. } => Retry::NotApplicable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::RefusalReason;

    #[test]
    fn breaker_open_and_unknown_are_never_retried() {
        assert_eq!(
            retry_advice(&EventKind::BreakerOpen { retry_after_ns: 5 }),
            Retry::Never
        );
        assert_eq!(retry_advice(&EventKind::Unknown), Retry::Never);
        assert_eq!(
            retry_advice(&EventKind::Refused {
                reason: RefusalReason::NotSynced
            }),
            Retry::Never
        );
        assert_eq!(
            retry_advice(&EventKind::Rejected {
                reason: RejectReason::NotReceived
            }),
            Retry::Never
        );
        assert_eq!(
            retry_advice(&EventKind::Throttled),
            Retry::After(RETRY_PAUSE_NS)
        );
        assert_eq!(
            retry_advice(&EventKind::Rejected {
                reason: RejectReason::VenueSystem
            }),
            Retry::After(RETRY_PAUSE_NS)
        );
        assert_eq!(retry_advice(&EventKind::Accepted), Retry::NotApplicable);
    }
}
