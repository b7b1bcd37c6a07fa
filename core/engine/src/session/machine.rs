//! The venue session state machine, sans-IO.
//!
//! `Disconnected → Connecting → Connected → Reconciling → Synced`, with every failure path back
//! to `Disconnected` and a reconnect scheduled with exponential backoff and equal jitter. Only
//! `Synced` lets new orders leave (the dispatcher is told through `Action::Report`).
//!
//! `ReadOnly` is the fail-safe state of a connected link keel cannot trust: a report
//! contradicted the order table, or reconciliation left differences it could not settle.
//! Cancels and status queries flow, new orders do not, and reconciliation is asked again,
//! paced by backoff (never in a loop), until an answer settles everything.
//!
//! The machine owns no socket and reads no clock: the driver (`link`) feeds it events with
//! `now_ns` and carries out the actions it writes into the caller's buffer.

use crate::guard::backoff::{Backoff, BackoffConfig};
use crate::order::LinkMode;
use crate::rng::SplitMix64;

/// Where a venue link stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkState {
    /// No connection; a reconnect may be scheduled.
    Disconnected,
    /// TCP connect in progress.
    Connecting,
    /// Connected, login sent, no answer yet.
    Connected,
    /// Logged in; the missed stream is replaying and the venue's open orders and positions
    /// are being compared with keel's. No new orders.
    Reconciling,
    /// Reconciled: new orders may leave.
    Synced,
    /// Connected but not trusted: a report contradicted keel's order table or reconciliation
    /// left differences. Cancels and queries flow; no new orders; reconciliation is retried.
    ReadOnly,
}

impl LinkState {
    /// The state as docs and reports spell it: `DISCONNECTED`, `CONNECTING`, `CONNECTED`,
    /// `RECONCILING`, `SYNCED`, `READ-ONLY`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Disconnected => "DISCONNECTED",
            Self::Connecting => "CONNECTING",
            Self::Connected => "CONNECTED",
            Self::Reconciling => "RECONCILING",
            Self::Synced => "SYNCED",
            Self::ReadOnly => "READ-ONLY",
        }
    }
}

impl std::fmt::Display for LinkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What happened to the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionEvent {
    /// Begin (first connection).
    Start,
    /// The reconnect delay elapsed.
    ReconnectDue,
    /// TCP connected.
    TcpConnected,
    /// TCP connect failed or was refused.
    TcpFailed,
    /// The venue accepted the login.
    LoginAccepted,
    /// The venue refused the login.
    LoginRejected,
    /// The reconciliation answer arrived and was compared.
    ReconcileComplete {
        /// Differences keel could not resolve from the venue's answer.
        unresolved: u32,
    },
    /// Reconciliation did not finish within `reconcile_timeout_ns`.
    ReconcileTimeout,
    /// The paced retry of an unsettled reconciliation is due.
    ReconcileRetryDue,
    /// An operator settled the contradictions and asks for reconciliation now
    /// (`keel ctl reconcile VENUE`).
    OperatorReconcile,
    /// A report contradicted keel's view (unknown order, overfill, fill after close,
    /// sequence gap, a verdict the order table refused).
    Contradiction,
    /// The venue was silent for too many heartbeat intervals.
    HeartbeatTimeout,
    /// The connection closed (reset, peer close, decode error, end of session).
    ConnectionLost,
}

/// What the driver must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Open a TCP connection.
    Connect,
    /// Send the login (asking for the next expected sequence number).
    SendLogin,
    /// Ask the venue for its open orders and positions.
    SendReconcileQuery,
    /// Close the connection.
    Close,
    /// Every request in flight is now of unknown outcome: report each as a timeout.
    MarkInFlightUnknown,
    /// Try again at `at_ns`.
    ScheduleReconnect {
        /// When.
        at_ns: u64,
    },
    /// Ask for reconciliation again at `at_ns` (an unsettled one, paced by backoff).
    ScheduleReconcile {
        /// When.
        at_ns: u64,
    },
    /// Tell the dispatcher what may leave: everything (`Trading`, only in `Synced`), cancels
    /// and queries (`ReadOnly`), or nothing (`Down`).
    Report {
        /// The link's trading mode.
        mode: LinkMode,
    },
}

/// An event the current state does not allow (a driver bug, reported, never a panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid session transition: {event:?} in {state:?}")]
pub struct InvalidTransition {
    /// State.
    pub state: LinkState,
    /// Event.
    pub event: SessionEvent,
}

/// Session timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// Reconnect backoff.
    pub backoff: BackoffConfig,
    /// Longest time from login to reconciled.
    pub reconcile_timeout_ns: u64,
    /// Seed of the backoff jitter. The default is drawn from the OS for every configuration
    /// made (`rng::os_seed`), so links and processes never retry in lockstep; set it to
    /// replay a run (the engine logs the seed each link uses at start).
    pub jitter_seed: crate::rng::Seed,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            backoff: BackoffConfig::default(),
            reconcile_timeout_ns: 5_000_000_000,
            jitter_seed: crate::rng::Seed::from_os(),
        }
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Connection attempts.
    pub connects: u64,
    /// Times the link reached `Synced`.
    pub synced: u64,
    /// Losses of a connection (any state).
    pub disconnects: u64,
    /// Reconciliations that timed out.
    pub reconcile_timeouts: u64,
    /// Logins the venue refused.
    pub login_rejects: u64,
    /// Reconciliations that ended with unresolved differences.
    pub unreconciled: u64,
    /// Contradictions reported (each moves a trusted link to `ReadOnly`).
    pub contradictions: u64,
    /// Times the link entered `ReadOnly`.
    pub read_only_entries: u64,
    /// Reconciliations an operator asked for on a `ReadOnly` link.
    pub operator_reconciles: u64,
    /// Reconciliation timeouts in a row (back to 0 once SYNCED).
    pub reconcile_timeout_streak: u32,
    /// Times the streak reached a multiple of [`RECONCILE_TIMEOUTS_HINT`]: each is logged with
    /// the likely cause (the venue lost its state, another venue session, a reset numbering).
    pub reconcile_stuck: u64,
    /// Invalid transitions requested by the driver.
    pub invalid: u64,
}

/// Reconciliation timeouts in a row after which the link says what probably causes them
/// (and again every this many): one timeout can be a slow venue, three are a venue that will
/// never answer the way keel's journal expects.
pub const RECONCILE_TIMEOUTS_HINT: u32 = 3;

/// Up to this many actions per event.
pub const ACTIONS_MAX: usize = 4;

/// The actions of one event, in order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Actions {
    items: [Option<Action>; ACTIONS_MAX],
    len: usize,
}

impl Actions {
    fn push(&mut self, action: Action) {
        assert!(
            self.len < ACTIONS_MAX,
            "more than {ACTIONS_MAX} actions for one event"
        );
        self.items[self.len] = Some(action);
        self.len += 1;
    }

    /// The actions, in the order to carry them out.
    pub fn iter(&self) -> impl Iterator<Item = Action> + '_ {
        self.items[..self.len].iter().flatten().copied()
    }
}

/// The session state machine.
#[derive(Debug, Clone)]
pub struct SessionMachine {
    state: LinkState,
    config: SessionConfig,
    backoff: Backoff,
    /// Paces repeated reconciliation queries in `ReadOnly`.
    reconcile_backoff: Backoff,
    rng: SplitMix64,
    reconcile_deadline_ns: u64,
    stats: SessionStats,
}

impl SessionMachine {
    /// A machine in `Disconnected`.
    pub fn new(config: SessionConfig) -> Self {
        Self {
            state: LinkState::Disconnected,
            backoff: Backoff::new(config.backoff),
            reconcile_backoff: Backoff::new(BackoffConfig {
                attempts_max: u32::MAX,
                ..config.backoff
            }),
            rng: SplitMix64::new(config.jitter_seed.value()),
            reconcile_deadline_ns: u64::MAX,
            stats: SessionStats::default(),
            config,
        }
    }

    /// Current state.
    pub fn state(&self) -> LinkState {
        self.state
    }

    /// Counters.
    pub fn stats(&self) -> SessionStats {
        self.stats
    }

    /// When the outstanding reconciliation must be answered by (`u64::MAX`: none
    /// outstanding).
    pub fn reconcile_deadline_ns(&self) -> u64 {
        self.reconcile_deadline_ns
    }

    /// Applies `event`; the actions to carry out are returned in order.
    pub fn on(&mut self, now_ns: u64, event: SessionEvent) -> Result<Actions, InvalidTransition> {
        use LinkState::*;
        use SessionEvent as E;
        let mut out = Actions::default();
        match (self.state, event) {
            (Disconnected, E::Start | E::ReconnectDue) => self.to_connecting(&mut out),
            (Connecting, E::TcpConnected) => self.to_connected(&mut out),
            (Connected, E::LoginAccepted) => self.to_reconciling(now_ns, &mut out),
            (Reconciling | ReadOnly, E::ReconcileComplete { unresolved: 0 }) => {
                self.to_synced(&mut out)
            }
            // Differences keel cannot settle alone: cancels and queries may flow, new orders
            // may not; ask again later, paced (never in a loop).
            (Reconciling, E::ReconcileComplete { .. }) => {
                self.stats.unreconciled += 1;
                self.to_read_only(&mut out);
                self.schedule_reconcile(now_ns, &mut out);
            }
            (ReadOnly, E::ReconcileComplete { .. }) => {
                self.stats.unreconciled += 1;
                self.schedule_reconcile(now_ns, &mut out);
            }
            (ReadOnly, E::ReconcileRetryDue) => self.send_reconcile_query(now_ns, &mut out),
            // The operator checked the account: ask now rather than at the paced retry; the
            // answer alone decides whether the link trades again.
            (ReadOnly, E::OperatorReconcile) => {
                self.stats.operator_reconciles += 1;
                self.reconcile_backoff.reset();
                self.send_reconcile_query(now_ns, &mut out);
            }
            (Synced, E::Contradiction) => {
                self.stats.contradictions += 1;
                self.to_read_only(&mut out);
                self.send_reconcile_query(now_ns, &mut out);
            }
            // Already untrusted: the reconciliation under way (or due) must settle it; a
            // contradiction seen while replaying is part of that reconciliation's verdict.
            (Reconciling | ReadOnly, E::Contradiction) => self.stats.contradictions += 1,
            (Reconciling | ReadOnly, E::ReconcileTimeout) => {
                self.stats.reconcile_timeouts += 1;
                self.stats.reconcile_timeout_streak += 1;
                if self.stats.reconcile_timeout_streak % RECONCILE_TIMEOUTS_HINT == 0 {
                    self.stats.reconcile_stuck += 1;
                }
                self.to_disconnected(now_ns, &mut out);
            }
            (Connecting, E::TcpFailed) => self.to_disconnected(now_ns, &mut out),
            (Connected, E::LoginRejected) => {
                self.stats.login_rejects += 1;
                self.to_disconnected(now_ns, &mut out)
            }
            (
                Connecting | Connected | Reconciling | Synced | ReadOnly,
                E::ConnectionLost | E::HeartbeatTimeout,
            ) => self.to_disconnected(now_ns, &mut out),
            (state, event) => {
                self.stats.invalid += 1;
                return Err(InvalidTransition { state, event });
            }
        }
        Ok(out)
    }

    fn to_connecting(&mut self, out: &mut Actions) {
        assert_eq!(self.state, LinkState::Disconnected);
        self.state = LinkState::Connecting;
        self.stats.connects += 1;
        out.push(Action::Connect);
    }

    fn to_connected(&mut self, out: &mut Actions) {
        assert_eq!(self.state, LinkState::Connecting);
        self.state = LinkState::Connected;
        out.push(Action::SendLogin);
    }

    fn to_reconciling(&mut self, now_ns: u64, out: &mut Actions) {
        assert_eq!(self.state, LinkState::Connected);
        self.state = LinkState::Reconciling;
        self.reconcile_deadline_ns = now_ns.saturating_add(self.config.reconcile_timeout_ns);
        out.push(Action::SendReconcileQuery);
    }

    fn to_synced(&mut self, out: &mut Actions) {
        assert!(matches!(
            self.state,
            LinkState::Reconciling | LinkState::ReadOnly
        ));
        self.state = LinkState::Synced;
        self.stats.synced += 1;
        self.stats.reconcile_timeout_streak = 0;
        self.reconcile_deadline_ns = u64::MAX;
        self.backoff.reset();
        self.reconcile_backoff.reset();
        out.push(Action::Report {
            mode: LinkMode::Trading,
        });
    }

    fn to_read_only(&mut self, out: &mut Actions) {
        assert!(matches!(
            self.state,
            LinkState::Reconciling | LinkState::Synced
        ));
        self.state = LinkState::ReadOnly;
        self.stats.read_only_entries += 1;
        self.reconcile_deadline_ns = u64::MAX;
        out.push(Action::Report {
            mode: LinkMode::ReadOnly,
        });
    }

    /// The next reconciliation query in `ReadOnly`, after an equal-jitter backoff delay.
    fn schedule_reconcile(&mut self, now_ns: u64, out: &mut Actions) {
        assert_eq!(self.state, LinkState::ReadOnly);
        self.reconcile_deadline_ns = u64::MAX;
        let delay = self
            .reconcile_backoff
            .next_delay_ns(&mut self.rng)
            .unwrap_or(self.config.backoff.cap_ns);
        out.push(Action::ScheduleReconcile {
            at_ns: now_ns.saturating_add(delay),
        });
    }

    fn send_reconcile_query(&mut self, now_ns: u64, out: &mut Actions) {
        assert_eq!(self.state, LinkState::ReadOnly);
        self.reconcile_deadline_ns = now_ns.saturating_add(self.config.reconcile_timeout_ns);
        out.push(Action::SendReconcileQuery);
    }

    fn to_disconnected(&mut self, now_ns: u64, out: &mut Actions) {
        assert_ne!(self.state, LinkState::Disconnected, "already disconnected");
        let was_reported = matches!(self.state, LinkState::Synced | LinkState::ReadOnly);
        let had_connection = self.state != LinkState::Connecting;
        self.state = LinkState::Disconnected;
        self.stats.disconnects += 1;
        self.reconcile_deadline_ns = u64::MAX;
        if had_connection {
            out.push(Action::Close);
        }
        out.push(Action::MarkInFlightUnknown);
        if was_reported {
            out.push(Action::Report {
                mode: LinkMode::Down,
            });
        }
        let delay = self
            .backoff
            .next_delay_ns(&mut self.rng)
            .unwrap_or(u64::MAX / 2);
        out.push(Action::ScheduleReconnect {
            at_ns: now_ns.saturating_add(delay),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use LinkState::*;

    fn config() -> SessionConfig {
        SessionConfig {
            backoff: BackoffConfig {
                base_ns: 1_000,
                cap_ns: 64_000,
                attempts_max: u32::MAX,
                policy: Default::default(),
            },
            reconcile_timeout_ns: 10_000,
            jitter_seed: crate::rng::Seed::Fixed(3),
        }
    }

    fn actions(m: &mut SessionMachine, now: u64, e: SessionEvent) -> Vec<Action> {
        m.on(now, e).unwrap().iter().collect()
    }

    // Goal: the happy path, action by action.
    #[test]
    fn connect_login_reconcile_synced() {
        let mut m = SessionMachine::new(config());
        assert_eq!(
            actions(&mut m, 0, SessionEvent::Start),
            vec![Action::Connect]
        );
        assert_eq!(
            actions(&mut m, 1, SessionEvent::TcpConnected),
            vec![Action::SendLogin]
        );
        assert_eq!(
            actions(&mut m, 2, SessionEvent::LoginAccepted),
            vec![Action::SendReconcileQuery]
        );
        assert_eq!(m.reconcile_deadline_ns(), 10_002);
        let got = actions(&mut m, 3, SessionEvent::ReconcileComplete { unresolved: 2 });
        assert_eq!(
            got[0],
            Action::Report {
                mode: LinkMode::ReadOnly
            },
            "unresolved differences: read-only (cancels flow, no new orders)"
        );
        let Action::ScheduleReconcile { at_ns } = got[1] else {
            panic!("no paced retry: {got:?}")
        };
        assert!((3 + 500..=3 + 1_000).contains(&at_ns), "paced: {at_ns}");
        assert_eq!(m.state(), ReadOnly);
        assert_eq!(
            actions(&mut m, at_ns, SessionEvent::ReconcileRetryDue),
            vec![Action::SendReconcileQuery],
            "asked again only when the paced retry is due"
        );
        assert_eq!(
            actions(&mut m, 4, SessionEvent::ReconcileComplete { unresolved: 0 }),
            vec![Action::Report {
                mode: LinkMode::Trading
            }]
        );
        assert_eq!(m.state(), Synced);
        assert_eq!(m.stats().unreconciled, 1);
    }

    // Goal: losing a synced link closes, marks in-flight orders unknown, reports not synced,
    // and schedules a reconnect with an equal-jitter delay.
    #[test]
    fn loss_from_synced() {
        let mut m = SessionMachine::new(config());
        for e in [
            SessionEvent::Start,
            SessionEvent::TcpConnected,
            SessionEvent::LoginAccepted,
            SessionEvent::ReconcileComplete { unresolved: 0 },
        ] {
            m.on(0, e).unwrap();
        }
        let got = actions(&mut m, 100, SessionEvent::HeartbeatTimeout);
        assert_eq!(
            &got[..3],
            &[
                Action::Close,
                Action::MarkInFlightUnknown,
                Action::Report {
                    mode: LinkMode::Down
                }
            ]
        );
        let Action::ScheduleReconnect { at_ns } = got[3] else {
            panic!("{got:?}")
        };
        assert!(
            (100 + 500..=100 + 1_000).contains(&at_ns),
            "first delay in [base/2, base]: {at_ns}"
        );
    }

    // Goal: reconciliation timeout is a failure path like any other.
    #[test]
    fn reconcile_timeout_disconnects() {
        let mut m = SessionMachine::new(config());
        for e in [
            SessionEvent::Start,
            SessionEvent::TcpConnected,
            SessionEvent::LoginAccepted,
        ] {
            m.on(0, e).unwrap();
        }
        let got = actions(&mut m, 10_000, SessionEvent::ReconcileTimeout);
        let down = Action::Report {
            mode: LinkMode::Down,
        };
        assert!(got.contains(&Action::Close) && !got.contains(&down));
        assert_eq!(m.state(), Disconnected);
        assert_eq!(m.stats().reconcile_timeouts, 1);
    }

    /// Drives `m` from `Disconnected` to `Reconciling` at `now`.
    fn to_reconciling(m: &mut SessionMachine, now: u64) {
        for e in [
            SessionEvent::ReconnectDue,
            SessionEvent::TcpConnected,
            SessionEvent::LoginAccepted,
        ] {
            m.on(now, e).unwrap();
        }
    }

    // Goal (issue 23, point 12): timeouts in a row are counted as a streak; the third (and
    // every third) counts a stuck reconciliation for the link to explain; SYNCED ends the
    // streak, so a later timeout starts again from one.
    #[test]
    fn reconcile_timeouts_in_a_row_are_flagged_every_third() {
        let mut m = SessionMachine::new(config());
        m.on(0, SessionEvent::Start).unwrap();
        m.on(0, SessionEvent::TcpConnected).unwrap();
        m.on(0, SessionEvent::LoginAccepted).unwrap();
        let mut now = 0;
        for round in 1..=7u32 {
            now += 1_000_000;
            m.on(now, SessionEvent::ReconcileTimeout).unwrap();
            assert_eq!(m.stats().reconcile_timeout_streak, round);
            assert_eq!(
                m.stats().reconcile_stuck,
                u64::from(round / RECONCILE_TIMEOUTS_HINT)
            );
            to_reconciling(&mut m, now);
        }
        m.on(now, SessionEvent::ReconcileComplete { unresolved: 0 })
            .unwrap();
        assert_eq!(m.stats().reconcile_timeout_streak, 0);
        m.on(now, SessionEvent::ConnectionLost).unwrap();
        to_reconciling(&mut m, now + 1);
        m.on(now + 20_000, SessionEvent::ReconcileTimeout).unwrap();
        assert_eq!(
            (
                m.stats().reconcile_timeout_streak,
                m.stats().reconcile_stuck
            ),
            (1, 2)
        );
    }

    // Goal (issue 23, point 8): an operator's reconcile on a READ-ONLY link sends the query at
    // once (counted); a clean answer trades again, an unclean one stays READ-ONLY; on any other
    // state it is an invalid transition, never a query.
    #[test]
    fn an_operator_reconcile_queries_a_read_only_link_now() {
        let mut m = SessionMachine::new(config());
        assert!(m.on(0, SessionEvent::OperatorReconcile).is_err());
        m.on(0, SessionEvent::Start).unwrap();
        m.on(0, SessionEvent::TcpConnected).unwrap();
        m.on(0, SessionEvent::LoginAccepted).unwrap();
        assert!(
            m.on(1, SessionEvent::OperatorReconcile).is_err(),
            "reconciling"
        );
        m.on(1, SessionEvent::ReconcileComplete { unresolved: 1 })
            .unwrap();
        assert_eq!(m.state(), ReadOnly);
        assert_eq!(
            actions(&mut m, 2, SessionEvent::OperatorReconcile),
            vec![Action::SendReconcileQuery]
        );
        assert_eq!(m.reconcile_deadline_ns(), 2 + 10_000);
        m.on(3, SessionEvent::ReconcileComplete { unresolved: 2 })
            .unwrap();
        assert_eq!(m.state(), ReadOnly, "an unclean answer keeps it read-only");
        m.on(4, SessionEvent::OperatorReconcile).unwrap();
        m.on(5, SessionEvent::ReconcileComplete { unresolved: 0 })
            .unwrap();
        assert_eq!(m.state(), Synced);
        assert_eq!(m.stats().operator_reconciles, 2);
        assert!(m.on(6, SessionEvent::OperatorReconcile).is_err(), "synced");
    }

    fn event() -> impl Strategy<Value = SessionEvent> {
        prop_oneof![
            Just(SessionEvent::Start),
            Just(SessionEvent::ReconnectDue),
            Just(SessionEvent::TcpConnected),
            Just(SessionEvent::TcpFailed),
            Just(SessionEvent::LoginAccepted),
            Just(SessionEvent::LoginRejected),
            (0u32..3).prop_map(|unresolved| SessionEvent::ReconcileComplete { unresolved }),
            Just(SessionEvent::ReconcileTimeout),
            Just(SessionEvent::ReconcileRetryDue),
            Just(SessionEvent::OperatorReconcile),
            Just(SessionEvent::Contradiction),
            Just(SessionEvent::HeartbeatTimeout),
            Just(SessionEvent::ConnectionLost),
        ]
    }

    proptest! {
        // Goal: whatever the event sequence: `Report { synced: true }` is emitted exactly when
        // entering Synced and `synced: false` exactly when leaving it; every failure lands in
        // Disconnected with a reconnect scheduled in the future; invalid events change nothing.
        #[test]
        fn invariants_hold(events in proptest::collection::vec(event(), 1..200)) {
            let mut m = SessionMachine::new(config());
            let mut now = 0;
            for e in events {
                now += 7;
                let before = m.state();
                match m.on(now, e) {
                    Err(InvalidTransition { state, .. }) => prop_assert_eq!(state, before),
                    Ok(acts) => {
                        let acts: Vec<Action> = acts.iter().collect();
                        let after = m.state();
                        let reported = |mode| acts.contains(&Action::Report { mode });
                        let trusted = |s| s == Synced;
                        let carrying = |s| matches!(s, Synced | ReadOnly);
                        prop_assert_eq!(reported(LinkMode::Trading), !trusted(before) && trusted(after));
                        prop_assert_eq!(
                            reported(LinkMode::ReadOnly),
                            before != ReadOnly && after == ReadOnly
                        );
                        prop_assert_eq!(reported(LinkMode::Down), carrying(before) && after == Disconnected);
                        // A reconciliation query is only ever sent on login, on the first
                        // contradiction of a synced link, when a paced retry is due, or when
                        // an operator asks on a read-only link.
                        if acts.contains(&Action::SendReconcileQuery) {
                            let allowed = matches!(
                                (before, e),
                                (Connected, SessionEvent::LoginAccepted)
                                    | (Synced, SessionEvent::Contradiction)
                                    | (
                                        ReadOnly,
                                        SessionEvent::ReconcileRetryDue
                                            | SessionEvent::OperatorReconcile
                                    )
                            );
                            prop_assert!(allowed, "query on {:?} in {:?}", e, before);
                        }
                        if after == Disconnected {
                            let scheduled = acts.iter().any(|a| matches!(a, Action::ScheduleReconnect { at_ns } if *at_ns > now));
                            prop_assert!(scheduled, "no future reconnect in {:?}", acts);
                            prop_assert!(acts.contains(&Action::MarkInFlightUnknown));
                        }
                    }
                }
            }
        }
    }
}
