//! The order lifecycle as one transition table.
//!
//! `transition` is pure: it maps `(state, event)` to the next state or an invalid-transition
//! error. The order table applies it and keeps the quantities. Rows that look surprising carry
//! a comment saying why they are legal.

/// Where an order stands, as keel believes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderState {
    /// Sent (or queued to send); no answer yet.
    PendingNew,
    /// Accepted and resting, nothing filled.
    Live,
    /// Accepted, partly filled, remainder resting.
    PartiallyFilled,
    /// A cancel is in flight.
    PendingCancel,
    /// A replace is in flight.
    PendingReplace,
    /// Completely filled (terminal).
    Filled,
    /// Closed with quantity unfilled (terminal).
    Canceled,
    /// Swapped for a new order id (terminal for this id).
    Replaced,
    /// Refused by the venue (terminal).
    Rejected,
    /// A request got no answer in time: the order may be live, filled or gone. Resolved only
    /// by evidence from the venue (replay, status query), never by resending.
    Unknown,
}

impl OrderState {
    /// True once nothing more can happen to the order at the venue.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Filled | Self::Canceled | Self::Replaced | Self::Rejected
        )
    }

    /// True while a request is waiting for the venue's answer.
    pub fn is_pending(self) -> bool {
        matches!(
            self,
            Self::PendingNew | Self::PendingCancel | Self::PendingReplace
        )
    }
}

/// Inputs to the lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderEvent {
    /// The venue accepted the new order.
    Accepted,
    /// An execution; `completes` when it fills the order's last open quantity.
    Fill {
        /// True when no quantity remains open after this fill.
        completes: bool,
    },
    /// The strategy asked to cancel; a cancel request is being sent.
    CancelRequested,
    /// The venue closed the order.
    Canceled,
    /// The venue refused the cancel.
    CancelRejected,
    /// The strategy asked to replace; a replace request is being sent.
    ReplaceRequested,
    /// The venue replaced the order.
    Replaced,
    /// The venue refused the replace.
    ReplaceRejected,
    /// The venue refused the new order.
    Rejected,
    /// No answer within the ack timeout.
    Timeout,
}

/// An event that the order's state does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid order transition: {event:?} in state {state:?}")]
pub struct LifecycleError {
    /// State the order was in.
    pub state: OrderState,
    /// Event that arrived.
    pub event: OrderEvent,
}

/// What the transition needs to know besides the state: whether anything is filled, the open
/// state a pending request started from, and the pending state an `Unknown` order was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// Something has been filled already.
    pub filled: bool,
    /// The state before the current cancel or replace request.
    pub pending_from: OrderState,
    /// The pending state the order was in when it timed out.
    pub unknown_from: OrderState,
}

/// The transition table. One row per legal transition; anything else is an error.
pub fn transition(
    state: OrderState,
    event: OrderEvent,
    ctx: Context,
) -> Result<OrderState, LifecycleError> {
    use OrderEvent as E;
    use OrderState::*;
    let next = match (state, event) {
        (PendingNew, E::Accepted) => Live,
        (PendingNew, E::Rejected) => Rejected,
        // The ack of a new order may arrive after the strategy already asked to cancel it.
        (PendingCancel, E::Accepted) if ctx.pending_from == PendingNew => PendingCancel,
        // ...and so may its rejection: the order never lived, the cancel is moot.
        (PendingCancel, E::Rejected) if ctx.pending_from == PendingNew => Rejected,
        // Executions prove acceptance: a reordering network may deliver one before the ack.
        (PendingNew | Live | PartiallyFilled, E::Fill { completes: false }) => PartiallyFilled,
        // A fill while a cancel or replace is in flight leaves that request in flight.
        (PendingCancel, E::Fill { completes: false }) => PendingCancel,
        (PendingReplace, E::Fill { completes: false }) => PendingReplace,
        (
            PendingNew | Live | PartiallyFilled | PendingCancel | PendingReplace,
            E::Fill { completes: true },
        ) => Filled,
        // A cancel may chase a new order that the venue has not acknowledged yet.
        (PendingNew | Live | PartiallyFilled, E::CancelRequested) => PendingCancel,
        (PendingCancel, E::Canceled) => Canceled,
        (PendingCancel, E::CancelRejected) => reopen(ctx.pending_from, ctx.filled),
        // Unsolicited close: an IOC remainder, or a venue-initiated cancel.
        (PendingNew | Live | PartiallyFilled | PendingReplace, E::Canceled) => Canceled,
        (Live | PartiallyFilled, E::ReplaceRequested) => PendingReplace,
        (PendingReplace, E::Replaced) => Replaced,
        (PendingReplace, E::ReplaceRejected) => reopen(ctx.pending_from, ctx.filled),
        // A cancel that crossed the order's close at the venue (its last fill, an IOC
        // remainder): the refusal arrives after the close and changes nothing.
        (Filled | Canceled | Replaced | Rejected, E::CancelRejected) => state,
        (PendingNew | PendingCancel | PendingReplace, E::Timeout) => Unknown,
        // An accepted order whose completion was awaited (immediate-or-cancel) and did not
        // come in time: it may have filled further. Unknown, resolved by evidence.
        (Live | PartiallyFilled, E::Timeout) => Unknown,
        // A status query for an Unknown order timed out as well: still unknown.
        (Unknown, E::Timeout) => Unknown,
        // A status answer confirms an order keel had in doubt is open as keel knew it.
        (Unknown, E::Accepted) if matches!(ctx.unknown_from, Live | PartiallyFilled) => {
            ctx.unknown_from
        }
        // Evidence resolves an Unknown order as the answer its pending request was awaiting.
        (Unknown, event) => {
            let resolved = transition(ctx.unknown_from, event, ctx)
                .map_err(|_| LifecycleError { state, event })?;
            // A partial fill on an unknown cancel/replace does not say how that request ended.
            if resolved == ctx.unknown_from {
                Unknown
            } else {
                resolved
            }
        }
        (state, event) => return Err(LifecycleError { state, event }),
    };
    Ok(next)
}

/// The open state to return to when a cancel or replace is refused.
fn reopen(pending_from: OrderState, filled: bool) -> OrderState {
    match (pending_from, filled) {
        (_, true) => OrderState::PartiallyFilled,
        (OrderState::PendingNew, false) => OrderState::PendingNew,
        (_, false) => OrderState::Live,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OrderEvent as E;
    use OrderState::*;

    const ALL_STATES: [OrderState; 10] = [
        PendingNew,
        Live,
        PartiallyFilled,
        PendingCancel,
        PendingReplace,
        Filled,
        Canceled,
        Replaced,
        Rejected,
        Unknown,
    ];
    const ALL_EVENTS: [OrderEvent; 11] = [
        E::Accepted,
        E::Fill { completes: false },
        E::Fill { completes: true },
        E::CancelRequested,
        E::Canceled,
        E::CancelRejected,
        E::ReplaceRequested,
        E::Replaced,
        E::ReplaceRejected,
        E::Rejected,
        E::Timeout,
    ];

    fn ctx() -> Context {
        Context {
            filled: false,
            pending_from: Live,
            unknown_from: PendingNew,
        }
    }

    // Goal: terminal states accept nothing but a late cancel refusal (which changes nothing);
    // method: every event against every terminal state.
    #[test]
    fn terminal_states_reject_every_event() {
        for state in ALL_STATES.iter().copied().filter(|s| s.is_terminal()) {
            assert_eq!(transition(state, E::CancelRejected, ctx()), Ok(state));
            for event in ALL_EVENTS.into_iter().filter(|e| *e != E::CancelRejected) {
                assert_eq!(
                    transition(state, event, ctx()),
                    Err(LifecycleError { state, event }),
                    "{state:?} + {event:?}"
                );
            }
        }
    }

    // Goal: only open orders time out (a closed order has nothing left to await).
    #[test]
    fn only_open_orders_time_out() {
        for state in ALL_STATES {
            let ok = transition(state, E::Timeout, ctx()).is_ok();
            assert_eq!(ok, !state.is_terminal(), "{state:?}");
        }
    }

    // Goal: an immediate-or-cancel order whose final report is late is resolved by it.
    #[test]
    fn late_final_report_resolves_unknown_partial() {
        let c = Context {
            filled: true,
            unknown_from: PartiallyFilled,
            ..ctx()
        };
        assert_eq!(transition(PartiallyFilled, E::Timeout, c), Ok(Unknown));
        assert_eq!(transition(Unknown, E::Canceled, c), Ok(Canceled));
        assert_eq!(
            transition(Unknown, E::Fill { completes: true }, c),
            Ok(Filled)
        );
        assert_eq!(
            transition(Unknown, E::Fill { completes: false }, c),
            Ok(Unknown)
        );
    }

    // Goal: the whole table is total (never panics) and every legal row leads somewhere sane.
    #[test]
    fn table_is_total_and_counts_rows() {
        let mut legal = 0;
        for state in ALL_STATES {
            for event in ALL_EVENTS {
                for unknown_from in [PendingNew, PendingCancel, PendingReplace] {
                    let c = Context {
                        unknown_from,
                        ..ctx()
                    };
                    if let Ok(next) = transition(state, event, c) {
                        legal += 1;
                        assert!(
                            !state.is_terminal() || next == state,
                            "{state:?} left a terminal state"
                        );
                        if event == E::Timeout {
                            assert_eq!(next, Unknown);
                        }
                    }
                }
            }
        }
        assert!(legal > 30, "{legal} legal rows");
    }

    // Goal: Unknown is resolved by the evidence its pending request awaited.
    #[test]
    fn unknown_resolves_by_evidence() {
        let from_new = Context {
            unknown_from: PendingNew,
            ..ctx()
        };
        assert_eq!(transition(Unknown, E::Accepted, from_new), Ok(Live));
        assert_eq!(transition(Unknown, E::Rejected, from_new), Ok(Rejected));
        assert_eq!(
            transition(Unknown, E::Fill { completes: false }, from_new),
            Ok(PartiallyFilled)
        );
        let from_cancel = Context {
            unknown_from: PendingCancel,
            ..ctx()
        };
        assert_eq!(transition(Unknown, E::Canceled, from_cancel), Ok(Canceled));
        assert_eq!(
            transition(Unknown, E::CancelRejected, from_cancel),
            Ok(Live)
        );
        // A partial fill says nothing about how the cancel ended.
        assert_eq!(
            transition(Unknown, E::Fill { completes: false }, from_cancel),
            Ok(Unknown)
        );
        assert_eq!(
            transition(Unknown, E::Fill { completes: true }, from_cancel),
            Ok(Filled)
        );
        let from_replace = Context {
            unknown_from: PendingReplace,
            ..ctx()
        };
        assert_eq!(transition(Unknown, E::Replaced, from_replace), Ok(Replaced));
        assert!(transition(Unknown, E::Accepted, from_replace).is_err());
    }

    #[test]
    fn refused_cancel_reopens_where_it_started() {
        let c = Context {
            pending_from: PendingNew,
            ..ctx()
        };
        assert_eq!(
            transition(PendingCancel, E::CancelRejected, c),
            Ok(PendingNew)
        );
        let c = Context {
            filled: true,
            ..ctx()
        };
        assert_eq!(
            transition(PendingReplace, E::ReplaceRejected, c),
            Ok(PartiallyFilled)
        );
    }
}
