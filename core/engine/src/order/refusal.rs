//! Every reason keel refuses a command itself, declared once: the variant, its meaning (the
//! doc comment), its IPC code (written down in docs/ipc.md: a new reason takes a new number,
//! none is ever renumbered), its name as logs, metrics and docs spell it, and what a strategy
//! should do about it. Every list of reasons in the engine (the IPC code table, the metric
//! labels, the per-reason counters, the retry advice) is derived from this one table; tests
//! check the C header (sdk/c/keel.h), the Python package (sdk/python), docs/ipc.md and
//! docs/operations.md against it.

/// What a strategy should do after a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalAdvice {
    /// Transient capacity (a full lane or bulkhead, the strategy's own quota): send a new
    /// order again after a pause.
    Pause,
    /// Final, or something the operator or the venue link must settle first: never retry the
    /// same order.
    Never,
}

macro_rules! refusal_reasons {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $code:literal, $name:literal, $advice:ident;
    )*) => {
        /// Why the engine refused a command itself, before or instead of sending it. Distinct
        /// from a venue [`RejectReason`](super::RejectReason) so a strategy cannot mistake one
        /// for the other. The declaration order is the index of each reason's counter
        /// (`DispatchStats::refused`): add a reason at the end.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum RefusalReason {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl RefusalReason {
            /// Every reason, in declaration order.
            pub const ALL: [RefusalReason; [$($code),*].len()] = [$(Self::$variant),*];
            /// How many reasons there are (one counter each).
            pub const COUNT: usize = Self::ALL.len();

            /// The IPC wire code (docs/ipc.md).
            pub const fn code(self) -> u8 {
                match self { $(Self::$variant => $code,)* }
            }

            /// The reason a wire code names (`None`: no such code).
            pub const fn from_code(code: u8) -> Option<Self> {
                match code { $($code => Some(Self::$variant),)* _ => None }
            }

            /// The name logs, metric labels and docs use (`"risk qty"`).
            pub const fn name(self) -> &'static str {
                match self { $(Self::$variant => $name,)* }
            }

            /// The variant's own name (`"RiskQty"`), as docs/operations.md lists it.
            pub const fn ident(self) -> &'static str {
                match self { $(Self::$variant => stringify!($variant),)* }
            }

            /// What a strategy should do about it.
            pub const fn advice(self) -> RefusalAdvice {
                match self { $(Self::$variant => RefusalAdvice::$advice,)* }
            }

            /// Its meaning, as its doc comment says it (one line per doc line).
            pub const fn meaning(self) -> &'static str {
                match self { $(Self::$variant => concat!($($doc, "\n"),*),)* }
            }
        }
    };
}

refusal_reasons! {
    /// The venue session is not SYNCED; no new order may leave.
    NotSynced = 1, "not synced", Never;
    /// Quantity above `order_qty_max`, or zero.
    RiskQty = 2, "risk qty", Never;
    /// Notional above `order_notional_max`.
    RiskNotional = 3, "risk notional", Never;
    /// Would take the symbol's worst-case position beyond `position_max`.
    RiskPosition = 4, "risk position", Never;
    /// An order on this symbol is `Unknown`; new orders wait until it is resolved.
    UnknownOrderOnSymbol = 5, "unknown order on symbol", Never;
    /// In-flight cap for the symbol reached.
    BulkheadSymbol = 6, "bulkhead symbol", Pause;
    /// In-flight cap for the venue reached.
    BulkheadVenue = 7, "bulkhead venue", Pause;
    /// The cancel lane is full: a critical condition, counted and surfaced.
    CancelLaneFull = 8, "cancel lane full", Pause;
    /// The replace lane is full.
    ReplaceLaneFull = 9, "replace lane full", Pause;
    /// The new-order lane has no room (per symbol or in total) even below the shed watermark.
    NewLaneFull = 10, "new lane full", Pause;
    /// The client order id is already known to the order table.
    DuplicateId = 11, "duplicate id", Never;
    /// The order table is full of open orders.
    OrderTableFull = 12, "order table full", Never;
    /// The order does not exist, is not open, or belongs to another strategy.
    UnknownOrder = 13, "unknown order", Never;
    /// The order already has a cancel or replace in flight.
    AlreadyPending = 14, "already pending", Never;
    /// The venue's executor loop stopped beating (watchdog): nothing is routed to it.
    ExecutorStalled = 15, "executor stalled", Never;
    /// The order journal could not record the order's intent: it does not leave unrecorded.
    JournalUnavailable = 16, "journal unavailable", Never;
    /// The venue or symbol id is not configured.
    BadRoute = 17, "bad route", Never;
    /// The venue link is read-only: a report contradicted the order table, or reconciliation
    /// has differences it could not settle. Cancels flow; new orders wait for reconciliation.
    LinkReadOnly = 18, "link read-only", Never;
    /// The price is not a valid limit price (zero, negative, past the wire's range) or lies
    /// outside the price collar around the symbol's reference price.
    RiskPrice = 19, "risk price", Never;
    /// The venue session's order map is full of open orders: nothing more can be tracked.
    SessionFull = 20, "session full", Never;
    /// An operator turned the kill switch on (`keel ctl kill-switch on`): no new order or
    /// replace leaves the engine; cancels flow.
    KillSwitch = 21, "kill switch", Never;
    /// An operator disabled this strategy (`keel ctl disable`); its cancels flow.
    StrategyDisabled = 22, "strategy disabled", Never;
    /// An operator shed this symbol (`keel ctl shed`); its cancels flow.
    SymbolShed = 23, "symbol shed", Never;
    /// The strategy sent new orders (and replaces) faster than its quota's `new_per_sec`
    /// (after its `new_burst`); its cancels flow, other strategies are not affected. It
    /// recovers as the quota's tokens refill.
    StrategyRate = 30, "strategy rate", Pause;
    /// The strategy has `in_flight_max` orders sent or queued and not yet answered. Slots free
    /// as the venue answers.
    StrategyInFlight = 31, "strategy in flight", Pause;
    /// A reduce-only order (or a replace of one) that, filled together with every open order
    /// on its side, would increase the symbol's position or take it past zero. The same order
    /// would be refused again: the position must change first.
    ReduceOnlyIncreases = 40, "reduce-only increases", Never;
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the table is consistent: codes and names unique, every code maps back, code 0
    // (an empty record) names nothing.
    #[test]
    fn codes_and_names_are_unique_and_map_back() {
        let mut codes = std::collections::BTreeSet::new();
        let mut names = std::collections::BTreeSet::new();
        for (i, r) in RefusalReason::ALL.into_iter().enumerate() {
            assert_eq!(r as usize, i, "declaration order is the counter index");
            assert!(codes.insert(r.code()), "{r:?}: code {} twice", r.code());
            assert!(names.insert(r.name()), "{r:?}: name {} twice", r.name());
            assert_eq!(RefusalReason::from_code(r.code()), Some(r));
            assert!(!r.meaning().trim().is_empty(), "{r:?} has no meaning");
            assert_eq!(r.ident(), format!("{r:?}"));
        }
        assert_eq!(RefusalReason::from_code(0), None);
        assert_eq!(RefusalReason::from_code(u8::MAX), None);
        assert_eq!(RefusalReason::COUNT, 26);
    }

    // Goal: docs/operations.md's table of refusal reasons names every reason (in a row's first
    // column), and no reason that does not exist.
    #[test]
    fn the_operators_table_lists_every_reason() {
        let doc = include_str!("../../../../docs/operations.md");
        let table = doc
            .split("## Refusal reasons (`RefusalReason`)")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/operations.md has the refusal reasons' section");
        let mut listed = Vec::new();
        for row in table.lines().filter(|l| l.starts_with("| `")) {
            let first = row.split('|').nth(1).unwrap_or_default();
            listed.extend(first.split('`').skip(1).step_by(2).map(str::to_string));
        }
        for r in RefusalReason::ALL {
            assert!(
                listed.iter().any(|l| l == r.ident()),
                "docs/operations.md has no row for `{}`",
                r.ident()
            );
        }
        for name in &listed {
            assert!(
                RefusalReason::ALL.iter().any(|r| r.ident() == name),
                "docs/operations.md lists `{name}`, which is no refusal reason"
            );
        }
    }
}
