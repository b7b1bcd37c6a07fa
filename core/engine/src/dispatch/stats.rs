//! Dispatcher counters: plain integers owned by the loop, read by the metrics side thread
//! through snapshots. docs/operations.md says what each one means and what to do about it.

use crate::order::{EventKind, RefusalReason, RequestKind, TableError};

/// Number of [`RefusalReason`] variants (one counter each).
pub const REFUSAL_REASONS: usize = RefusalReason::COUNT;

/// Counters kept by the dispatcher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// Loop passes.
    pub polls: u64,
    /// Commands read from strategies.
    pub commands: u64,
    /// Outcomes read from venue sessions.
    pub outcomes: u64,
    /// Events delivered to strategies.
    pub events: u64,
    /// Events a full strategy ring could not take (the order table still has the truth).
    pub events_lost: u64,
    /// New orders released to venues.
    pub sent_new: u64,
    /// Cancels released to venues.
    pub sent_cancel: u64,
    /// Replaces released to venues.
    pub sent_replace: u64,
    /// Status queries released to venues.
    pub sent_query: u64,
    /// Reconciliation requests sent to venue links after the order table refused a report.
    pub sent_reconcile: u64,
    /// Reduce-only orders and replaces of them released (also in `sent_new` / `sent_replace`).
    pub sent_reduce_only: u64,
    /// Contradictions: venue reports that could not be true given keel's order table (from
    /// the session, or a report the table refused). Each made its link read-only: alarm on any.
    pub contradictions: u64,
    /// The most recent contradiction, for the operator's first look.
    pub last_contradiction: Option<crate::order::Contradiction>,
    /// Executions a session could not apply to their order (each after a contradiction),
    /// booked into risk's position all the same.
    pub unmatched_executions: u64,
    /// Cancels keel answered itself because their order closed first (filled, rejected or
    /// refused while the cancel waited in its lane, was on the wire, or was lost with a
    /// dropped connection): answered `CancelRejected { TooLateToCancel }` at the close.
    pub moot_cancels: u64,
    /// New orders the venue rejected as duplicate ids (its reject code for it): each is a
    /// wire reference the venue had seen — a journal that does not match the venue's day.
    pub duplicate_id_rejects: u64,
    /// A venue's refusal of a cancel whose order had already closed and whose cancel keel had
    /// therefore already answered: absorbed, never a second answer.
    pub late_cancel_answers: u64,
    /// New orders shed.
    pub shed: u64,
    /// Orders that waited past the acquire deadline.
    pub throttled: u64,
    /// Orders refused by an open breaker.
    pub breaker_refused: u64,
    /// Engine refusals by reason (index: `RefusalReason as usize`).
    pub refused: [u64; REFUSAL_REASONS],
    /// Cancels refused because the cancel lane was full: critical, page someone.
    pub cancel_lane_full: u64,
    /// Times a venue's executor loop was found stalled by its watchdog.
    pub executor_stalls: u64,
    /// Status queries for Unknown orders that found the cancel lane full (retried at the
    /// next timeout).
    pub query_lane_full: u64,
    /// Requests released to a link that stopped being SYNCED before writing them: new orders
    /// and replaces refused `NotSynced` (never sent late), cancels and queries queued again.
    pub not_sent: u64,
    /// Journal appends that failed (each refused its order, or, for a venue answer, left the
    /// journal behind the order table: alarm on any).
    pub journal_errors: u64,
    /// Orders a mass cancel could not cover because they were `Unknown` (resolve, then cancel).
    pub mass_cancel_skipped: u64,
    /// Venue reports the order table refused (late, duplicate, overfill, unknown id).
    pub report_errors: u64,
    /// The most recent such report error, for the operator's first look.
    pub last_report_error: Option<TableError>,
    /// Adaptive controller commands applied.
    pub control_commands: u64,
    /// Adaptive controller commands refused (naming a venue or symbol the engine lacks).
    pub control_refused: u64,
}

impl DispatchStats {
    pub(super) fn count_refusal(&mut self, kind: EventKind) {
        match kind {
            EventKind::Shed => self.shed += 1,
            EventKind::Throttled => self.throttled += 1,
            EventKind::BreakerOpen { .. } => self.breaker_refused += 1,
            EventKind::Refused { reason } => self.refused[reason as usize] += 1,
            _ => {}
        }
    }

    pub(super) fn count_sent(&mut self, kind: &RequestKind) {
        match kind {
            RequestKind::New(_) => self.sent_new += 1,
            RequestKind::Cancel { .. } => self.sent_cancel += 1,
            RequestKind::Replace(_) => self.sent_replace += 1,
            RequestKind::Query { .. } => self.sent_query += 1,
            RequestKind::Reconcile { .. } => self.sent_reconcile += 1,
        }
    }

    /// Engine refusals for one reason.
    pub fn refused_for(&self, reason: RefusalReason) -> u64 {
        self.refused[reason as usize]
    }
}
