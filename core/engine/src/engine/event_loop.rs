//! The engine's loop, written once: the dispatcher side ([`Front`]: strategy bridges, the
//! dispatcher and its journal) and the executor side ([`Executor`]: the transport, the venue
//! links and the feed handlers). `inline` runs both in one thread as an [`EngineLoop`];
//! `split` runs each in its own. The demo, the deterministic simulation and the engine's tests
//! drive an [`EngineLoop`] built by `EngineBuilder::build` with their own clock, over the
//! simulated network or a real transport: the code they exercise is the code `keel run` runs
//! (the end-to-end benchmark runs `EngineBuilder::start` itself).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::admin::AdminPort;
use super::bridge::{Bridge, BridgeStats};
use super::control::ControlPort;
use super::{LinkReport, Restored, Shared};
use crate::dispatch::{DispatchStats, Dispatcher, StrategyHandle};
use crate::feed::handler::{FeedHandler, FeedStats};
use crate::log::{BreakerChange, HeldBack, LogRecord, LogTx, LostBecause, StrategyChange};
use crate::metrics::engine::{ExecMetrics, FrontMetrics, StrategyCounters};
use crate::net::{NetEvent, Transport};
use crate::order::{Order, StrategyId, VenueId};
use crate::runtime::watchdog::LoopHeartbeat;
use crate::session::machine::LinkState;
use crate::session::protocol::VenueProtocol;
use crate::session::EngineLink;

/// Network events one executor pass takes from the transport at most is not bounded here:
/// the transport bounds them (one per connection and completion); the buffer is sized once.
const NET_EVENTS_CAPACITY: usize = 256;

/// Refusals are summarized in the log once per this interval.
const REFUSAL_LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// The dispatcher side: strategy bridges, the dispatcher (and its journal).
#[derive(Debug)]
pub(super) struct Front {
    pub(super) dispatcher: Dispatcher,
    bridges: Vec<Bridge>,
    shared: Arc<Shared>,
    first_journal_index: u64,
    synced_mask: u64,
    /// The operator's requests (`keel ctl`) and their answers.
    admin: AdminPort,
    /// The adaptive controller's adjustments.
    control: ControlPort,
    /// What this loop says (to the logger thread).
    log: LogTx,
    watch: FrontWatch,
    /// Its publications into the counters file, if one is kept.
    metrics: Option<FrontMetrics>,
    passes: u64,
    /// The journal and IPC directory locks, held as long as the dispatcher runs.
    _locks: Vec<super::lock::DirLock>,
}

/// What the dispatcher loop last logged, to notice changes (sized at start).
#[derive(Debug)]
struct FrontWatch {
    breakers: Vec<crate::guard::breaker::BreakerStats>,
    bridges: Vec<(u64, u64, u64, u64)>,
    refused: [u64; crate::dispatch::REFUSAL_REASONS],
    refused_at_ns: u64,
    open_orders: u64,
    /// Shed, throttled, breaker-refused, duplicate-id rejects as last logged.
    held: [u64; 4],
}

/// The dispatcher loop's part of the engine's report.
pub(super) struct FrontReport {
    pub(super) dispatch: DispatchStats,
    pub(super) open_orders: Vec<Order>,
    pub(super) bridges: Vec<(StrategyId, BridgeStats)>,
    pub(super) journal_records: u64,
}

impl Front {
    #[allow(clippy::too_many_arguments)] // each part is owned by the loop from here on
    pub(super) fn new(
        dispatcher: Dispatcher,
        bridges: Vec<Bridge>,
        shared: Arc<Shared>,
        first_journal_index: u64,
        locks: Vec<super::lock::DirLock>,
        admin: AdminPort,
        control: ControlPort,
        log: LogTx,
        metrics: Option<FrontMetrics>,
        now_ns: u64,
    ) -> Self {
        let watch = FrontWatch {
            breakers: dispatcher
                .guards()
                .venues
                .iter()
                .map(|v| v.breaker.stats())
                .collect(),
            bridges: vec![(0, 0, 0, 0); bridges.len()],
            refused: dispatcher.stats().refused,
            refused_at_ns: now_ns,
            open_orders: u64::MAX,
            held: [0; 4],
        };
        Self {
            dispatcher,
            bridges,
            shared,
            first_journal_index,
            synced_mask: 0,
            admin,
            control,
            log,
            watch,
            metrics,
            passes: 0,
            _locks: locks,
        }
    }

    fn publish(&mut self, now: u64, force: bool) {
        let Some(m) = &mut self.metrics else {
            return;
        };
        let bridges = &self.bridges;
        m.publish(now, force, self.passes, &self.dispatcher, |id| {
            bridges.iter().find(|b| b.strategy() == id).map(|b| {
                let s = b.stats();
                StrategyCounters {
                    commands: s.commands,
                    malformed: s.malformed,
                    attached: s.attached,
                    lost: s.lost,
                    broken: s.broken,
                }
            })
        });
    }

    /// Notices what is worth a log line and hands it to the logger (no formatting here).
    fn watch(&mut self, now: u64) {
        for (v, seen) in self.watch.breakers.iter_mut().enumerate() {
            let now_stats = self.dispatcher.guards().venues[v].breaker.stats();
            if now_stats == *seen {
                continue;
            }
            let venue = VenueId(v as u16);
            let changes = [
                (now_stats.opened > seen.opened, BreakerChange::Opened),
                (
                    now_stats.half_opened > seen.half_opened,
                    BreakerChange::HalfOpened,
                ),
                (now_stats.closed > seen.closed, BreakerChange::Closed),
            ];
            for (changed, to) in changes {
                if changed {
                    self.log.send(LogRecord::Breaker { venue, to });
                }
            }
            *seen = now_stats;
        }
        for (b, seen) in self.bridges.iter().zip(&mut self.watch.bridges) {
            let st = b.stats();
            let strategy = b.strategy();
            let changes = [
                (st.attached > seen.0, Some(StrategyChange::Attached)),
                (st.lost > seen.1, Some(StrategyChange::Lost)),
                (st.broken > seen.2, st.fault.map(StrategyChange::Broken)),
                (
                    st.never_attached > seen.3,
                    Some(StrategyChange::NeverAttached),
                ),
            ];
            for (changed, what) in changes {
                if let (true, Some(what)) = (changed, what) {
                    self.log.send(LogRecord::Strategy { strategy, what });
                }
            }
            *seen = (st.attached, st.lost, st.broken, st.never_attached);
        }
        let interval_ns = now.saturating_sub(self.watch.refused_at_ns);
        if interval_ns >= REFUSAL_LOG_INTERVAL_NS {
            self.watch.refused_at_ns = now;
            let refused = self.dispatcher.stats().refused;
            for (reason, _) in crate::ipc::codec::REFUSAL_CODES {
                let i = reason as usize;
                let count = refused[i] - self.watch.refused[i];
                if count > 0 {
                    self.log.send(LogRecord::Refusals {
                        reason,
                        count,
                        interval_ns,
                    });
                }
            }
            self.watch.refused = refused;
            let stats = self.dispatcher.stats();
            let now_held = [
                stats.shed,
                stats.throttled,
                stats.breaker_refused,
                stats.duplicate_id_rejects,
            ];
            let kinds = [
                HeldBack::Shed,
                HeldBack::Throttled,
                HeldBack::BreakerOpen,
                HeldBack::DuplicateIdRejects,
            ];
            for ((what, now_n), seen) in kinds.into_iter().zip(now_held).zip(&mut self.watch.held) {
                if now_n > *seen {
                    self.log.send(LogRecord::HeldBack {
                        what,
                        count: now_n - *seen,
                        interval_ns,
                    });
                }
                *seen = now_n;
            }
        }
        let open = u64::from(self.dispatcher.table().open_count());
        if open != self.watch.open_orders {
            self.watch.open_orders = open;
            self.shared.open_orders.store(open, Ordering::Release);
        }
    }

    /// One pass: commands from shared-memory strategies, the dispatcher, events back to them,
    /// and the SYNCED mask published when it changes. Returns whether anything moved.
    pub(super) fn pass(&mut self, now: u64) -> bool {
        self.pass_clocked(now, &crate::clock::FrozenClock(now))
    }

    /// [`Front::pass`] at `now`, the dispatcher reading `clock` for its decision and
    /// end-to-end times (each command's arrival, each release).
    pub(super) fn pass_clocked<C: crate::clock::Clock>(&mut self, now: u64, clock: &C) -> bool {
        let mut work = 0;
        for b in &mut self.bridges {
            work += b.pump_commands(now);
        }
        work += self.dispatcher.poll_clocked(clock);
        work += self
            .admin
            .serve(now, &mut self.dispatcher, &self.bridges, &self.shared);
        work += self.control.serve(now, &mut self.dispatcher);
        for b in &mut self.bridges {
            work += b.pump_events();
        }
        self.watch(now);
        self.passes += 1;
        self.publish(now, false);
        let mut mask = 0u64;
        for v in 0..self.dispatcher.guards().venues.len().min(64) {
            if self.dispatcher.is_synced(VenueId(v as u16)) {
                mask |= 1 << v;
            }
        }
        if mask != self.synced_mask {
            self.synced_mask = mask;
            self.shared.synced.store(mask, Ordering::Release);
            for b in &self.bridges {
                b.publish_synced(mask);
            }
        }
        self.shared.passes.fetch_add(1, Ordering::Relaxed);
        work > 0
    }

    pub(super) fn finish(mut self, now_ns: u64) -> FrontReport {
        self.publish(now_ns, true);
        let journal_records = match self.dispatcher.journal_mut() {
            Some(j) => {
                if let Err(e) = j.sync() {
                    crate::warn_line!("keel: journal sync at stop: {e}");
                }
                j.next_index() - self.first_journal_index
            }
            None => 0,
        };
        let table = self.dispatcher.table();
        let mut open = Vec::new();
        for s in 0..self.dispatcher.strategy_count() {
            let mut slot = table.first_open(StrategyId(s as u16));
            while let Some(at) = slot {
                if let Some(o) = table.slot(at) {
                    open.push(*o);
                }
                slot = table.next_open(at);
            }
        }
        let bridges = self
            .bridges
            .iter_mut()
            .map(|b| (b.strategy(), b.stop()))
            .collect();
        FrontReport {
            dispatch: *self.dispatcher.stats(),
            open_orders: open,
            bridges,
            journal_records,
        }
    }
}

/// The executor side: a transport, the venue links and the market-data feed handlers.
#[derive(Debug)]
pub struct Executor<T: Transport> {
    transport: T,
    /// Transport polls that failed (counted; the loop carries on).
    poll_errors: u64,
    links: Vec<EngineLink>,
    feeds: Vec<FeedHandler>,
    net: Vec<NetEvent>,
    heartbeat: Option<LoopHeartbeat>,
    shared: Arc<Shared>,
    /// What this loop says (to the logger thread).
    log: LogTx,
    /// Per link: the state and failed connects last logged, and when it began connecting.
    seen: Vec<LinkSeen>,
    /// Its publications into the counters file, if one is kept.
    metrics: Option<ExecMetrics>,
    passes: u64,
}

#[derive(Debug, Clone, Copy)]
struct LinkSeen {
    state: LinkState,
    connect_failures: u64,
    connecting_since_ns: u64,
    new_session_said: bool,
    /// The session's `reconcile_stuck` as last said.
    reconcile_stuck: u64,
    /// Heartbeat timeouts, decode errors, reconcile timeouts, login refusals (session stats'
    /// `login_rejects`), operator reconnects, as last seen: which moved says why a session
    /// ended.
    causes: [u64; 5],
    /// The session's `position_mismatches` as last seen: a rise is said with both figures.
    position_mismatches: u64,
    /// The session's reconciliations as last seen: each new one republishes its verdict.
    reconciliations: u64,
    /// The session's contradictions as last said.
    contradictions: u64,
    /// The session's executions booked outside their order, as last said.
    unmatched_executions: u64,
    /// The link's loop stalls as last said.
    loop_stalls: u64,
}

impl<T: Transport> Executor<T> {
    /// Starts every link and feed (their first connection attempts) on `transport`.
    pub(super) fn new(
        mut transport: T,
        mut links: Vec<EngineLink>,
        mut feeds: Vec<FeedHandler>,
        heartbeat: Option<LoopHeartbeat>,
        shared: Arc<Shared>,
        log: LogTx,
        now_ns: u64,
    ) -> Self {
        // The dispatcher routes outcomes and requests by position: link `i` is venue `i`
        // (the shared SYNCED bits, the reconnect bits and the counters file rely on it too).
        debug_assert!(
            links
                .iter()
                .enumerate()
                .all(|(i, l)| usize::from(l.venue().0) == i),
            "venue links out of VenueId order"
        );
        let seen = links
            .iter()
            .map(|_| LinkSeen {
                state: LinkState::Disconnected,
                connect_failures: 0,
                connecting_since_ns: now_ns,
                new_session_said: false,
                reconcile_stuck: 0,
                position_mismatches: 0,
                reconciliations: 0,
                contradictions: 0,
                unmatched_executions: 0,
                loop_stalls: 0,
                causes: [0; 5],
            })
            .collect();
        for link in &mut links {
            link.start(now_ns, &mut transport);
        }
        for feed in &mut feeds {
            feed.start(now_ns, &mut transport);
        }
        let mut exec = Self {
            transport,
            poll_errors: 0,
            links,
            feeds,
            net: Vec::with_capacity(NET_EVENTS_CAPACITY),
            heartbeat,
            shared,
            log,
            seen,
            metrics: None,
            passes: 0,
        };
        exec.watch(now_ns);
        exec
    }

    /// Publishes into the counters file from now on.
    pub(super) fn attach_metrics(&mut self, metrics: Option<ExecMetrics>) {
        self.metrics = metrics;
    }

    fn publish(&mut self, now: u64, force: bool) {
        if let Some(m) = &mut self.metrics {
            m.publish(
                now,
                force,
                self.passes,
                self.poll_errors,
                &self.links,
                &mut self.feeds,
            );
        }
    }

    /// Operator reconnects and reconciles asked for since the last pass.
    fn take_reconnects(&mut self, now: u64) {
        if self.shared.reconnect.load(Ordering::Relaxed) != 0 {
            let asked = self.shared.reconnect.swap(0, Ordering::AcqRel);
            for (v, link) in self.links.iter_mut().enumerate().take(64) {
                if asked & (1 << v) != 0 {
                    link.reconnect(now, &mut self.transport);
                }
            }
        }
        if self.shared.reconcile.load(Ordering::Relaxed) != 0 {
            let asked = self.shared.reconcile.swap(0, Ordering::AcqRel);
            for (v, link) in self.links.iter_mut().enumerate().take(64) {
                if asked & (1 << v) != 0 {
                    let cleared = link.reconcile_on_demand(now, &mut self.transport);
                    self.log.send(LogRecord::OperatorReconcile {
                        venue: VenueId(v as u16),
                        cleared,
                    });
                }
            }
        }
    }

    /// Notices link changes worth a log line, publishes them for the admin thread.
    fn watch(&mut self, now: u64) {
        for (v, (link, seen)) in self.links.iter().zip(&mut self.seen).enumerate() {
            watch_positions(&self.shared, &mut self.log, VenueId(v as u16), link, seen);
            watch_contradictions(&mut self.log, VenueId(v as u16), link, seen);
            let state = link.state();
            let failures = link.connect_failures();
            let session = link.session_stats();
            if session.reconcile_stuck > seen.reconcile_stuck {
                seen.reconcile_stuck = session.reconcile_stuck;
                self.log.send(LogRecord::ReconcileStuck {
                    venue: VenueId(v as u16),
                    timeouts: session.reconcile_timeout_streak,
                });
            }
            if state == seen.state && failures == seen.connect_failures {
                continue;
            }
            let venue = VenueId(v as u16);
            let retry_in_ns = link
                .reconnect_at_ns()
                .map_or(0, |at| at.saturating_sub(now));
            let stats = link.stats();
            if let Some(sessions) = link.client().refused_resume() {
                if !seen.new_session_said {
                    seen.new_session_said = true;
                    self.log
                        .send(LogRecord::NewVenueSession { venue, sessions });
                }
            }
            if failures > seen.connect_failures {
                self.log.send(LogRecord::ConnectFailed {
                    venue,
                    os_error: stats.last_os_error,
                    failures,
                    retry_in_ns,
                });
            }
            if state != seen.state {
                if seen.state == LinkState::Disconnected {
                    seen.connecting_since_ns = now;
                }
                let ns = match state {
                    LinkState::Synced => now.saturating_sub(seen.connecting_since_ns),
                    LinkState::Disconnected => retry_in_ns,
                    _ => 0,
                };
                // A failed connect is said by its own record.
                let failed_connect =
                    seen.state == LinkState::Connecting && state == LinkState::Disconnected;
                let session = link.session_stats();
                let causes = [
                    stats.heartbeat_timeouts,
                    stats.decode_errors,
                    session.reconcile_timeouts,
                    stats.login_errors + session.login_rejects,
                    stats.operator_reconnects,
                ];
                let because = match causes
                    .iter()
                    .zip(&seen.causes)
                    .position(|(now_n, was)| now_n > was)
                {
                    Some(0) => LostBecause::Silence,
                    Some(1) => LostBecause::Malformed,
                    Some(2) => LostBecause::ReconcileTimeout,
                    Some(3) => LostBecause::LoginRefused,
                    Some(_) => LostBecause::Operator,
                    None => LostBecause::Closed,
                };
                seen.causes = causes;
                if !failed_connect {
                    self.log.send(LogRecord::Link {
                        venue,
                        from: seen.state,
                        to: state,
                        ns,
                        reconciliation: link.client().stats().last_reconciliation,
                        because,
                    });
                }
            }
            seen.state = state;
            seen.connect_failures = failures;
            self.shared.link(venue).publish(
                state,
                link.session_stats().connects,
                failures,
                stats.last_os_error,
            );
        }
    }

    /// A graceful stop: every logged-on link says goodbye the protocol's way (FIX: a Logout)
    /// and the loop keeps passing until the venues answered (each such link DISCONNECTED) or
    /// [`LOGOUT_WAIT_NS`] passed; no link connects again. Returns how many links said goodbye
    /// and how many of them saw the session end in time. Cold path: runs once, at stop.
    pub fn log_out<C: crate::clock::Clock>(&mut self, clock: &C) -> (u32, u32) {
        let now = clock.now_ns();
        let said: Vec<bool> = self
            .links
            .iter_mut()
            .map(|link| link.log_out(now, &mut self.transport))
            .collect();
        let deadline = now.saturating_add(LOGOUT_WAIT_NS);
        let waiting = |links: &[EngineLink]| {
            said.iter()
                .zip(links)
                .filter(|(s, l)| **s && l.state() != LinkState::Disconnected)
                .count()
        };
        while waiting(&self.links) > 0 && clock.now_ns() < deadline {
            self.pass(clock.now_ns());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let asked = said.iter().filter(|s| **s).count() as u32;
        (asked, asked - waiting(&self.links) as u32)
    }

    /// One pass: the transport's events to every link and feed, then each one's step (reads,
    /// writes, timers). Returns whether anything moved (an event, or a request sent).
    pub fn pass(&mut self, now: u64) -> bool {
        self.net.clear();
        if self.transport.poll(now, 0, &mut self.net).is_err() {
            self.poll_errors += 1;
        }
        let mut sent_before = 0;
        for link in &self.links {
            sent_before += link.stats().requests_sent;
        }
        for e in &self.net {
            for link in &mut self.links {
                link.on_event(now, &mut self.transport, e);
            }
            for feed in &mut self.feeds {
                feed.on_event(now, &mut self.transport, e);
            }
        }
        for feed in &mut self.feeds {
            feed.step(now, &mut self.transport);
        }
        let mut sent = 0;
        for link in &mut self.links {
            link.step(now, &mut self.transport);
            sent += link.stats().requests_sent;
        }
        // "Moved" is read from counters that only grow: a pass cannot unsend a request.
        debug_assert!(sent >= sent_before, "a link's requests_sent went down");
        self.take_reconnects(now);
        self.watch(now);
        self.passes += 1;
        self.publish(now, false);
        if let Some(h) = &self.heartbeat {
            h.beat();
        }
        !self.net.is_empty() || sent != sent_before
    }

    /// Transport polls that failed so far.
    pub fn poll_errors(&self) -> u64 {
        self.poll_errors
    }

    pub(super) fn finish(mut self, now_ns: u64) -> (Vec<LinkReport>, Vec<FeedStats>) {
        self.publish(now_ns, true);
        let links = self.links.iter().map(link_report).collect();
        let feeds = self.feeds.iter().map(FeedHandler::stats).collect();
        (links, feeds)
    }
}

fn link_report(l: &EngineLink) -> LinkReport {
    LinkReport {
        state: l.state(),
        link: l.stats(),
        session: l.session_stats(),
        client: l.client().stats(),
        protocol: l.client().protocol_stats(),
    }
}

/// The whole engine as one loop (the `inline` topology), stepped by its owner: see the
/// module docs. What a test needs to observe, it exposes.
#[derive(Debug)]
pub struct EngineLoop<T: Transport> {
    front: Front,
    exec: Executor<T>,
    strategies: Vec<Option<StrategyHandle>>,
    restored: Restored,
    /// The wire log's side thread and its stop flag, if one is configured.
    wire: Option<(
        std::thread::JoinHandle<()>,
        Arc<std::sync::atomic::AtomicBool>,
    )>,
    /// The counters file, if kept (its state word: running, then stopped at `finish`).
    counters: Option<crate::metrics::CountersFile>,
    /// The time of the last pass.
    last_now_ns: u64,
    /// The control ring's far end, until the adaptive controller takes it.
    control: Option<super::control::ControlSender>,
}

impl<T: Transport> EngineLoop<T> {
    pub(super) fn new(
        front: Front,
        exec: Executor<T>,
        strategies: Vec<Option<StrategyHandle>>,
        restored: Restored,
    ) -> Self {
        Self {
            front,
            exec,
            strategies,
            restored,
            wire: None,
            counters: None,
            last_now_ns: 0,
            control: None,
        }
    }

    pub(super) fn keep_control(&mut self, control: super::control::ControlSender) {
        self.control = Some(control);
    }

    /// The control ring's sender, for the adaptive controller (once).
    pub fn take_control(&mut self) -> Option<super::control::ControlSender> {
        self.control.take()
    }

    /// Keeps the counters file for the loop's life and says it runs.
    pub(super) fn keep_counters(&mut self, counters: Option<crate::metrics::CountersFile>) {
        if let Some(c) = &counters {
            c.set_state(2);
        }
        self.counters = counters;
    }

    /// Opens the wire log and starts its side thread (stopped by `finish`).
    pub(super) fn run_wire_log(
        &mut self,
        mut writer: crate::wirelog::WireLogWriter,
    ) -> Result<(), crate::wirelog::WireLogError> {
        writer.open()?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("keel-wire".into())
            .spawn(move || writer.run(&flag, std::time::Duration::from_millis(2)))
            .expect("spawning the wire log thread");
        self.wire = Some((thread, stop));
        Ok(())
    }

    /// One pass at `now_ns`: the executor side, then the dispatcher side. Returns whether
    /// anything moved (an idle policy parks on `false`).
    pub fn pass(&mut self, now_ns: u64) -> bool {
        // Every deadline (acks, heartbeats, backoff, the limiter's windows) assumes the
        // loop's clock never goes back.
        debug_assert!(
            now_ns >= self.last_now_ns,
            "the loop's clock went back: {now_ns} after {}",
            self.last_now_ns
        );
        self.last_now_ns = now_ns;
        self.exec.pass(now_ns) | self.front.pass(now_ns)
    }

    /// One pass reading `clock`: once for the executor side and the pass, and again inside
    /// the dispatcher at each command's arrival and each release, so decision and end-to-end
    /// times are measured rather than rounded to the pass (`keel run` drives it with the TSC).
    pub fn pass_clocked<C: crate::clock::Clock>(&mut self, clock: &C) -> bool {
        let now_ns = clock.now_ns();
        debug_assert!(
            now_ns >= self.last_now_ns,
            "the loop's clock went back: {now_ns} after {}",
            self.last_now_ns
        );
        self.last_now_ns = now_ns;
        self.exec.pass(now_ns) | self.front.pass_clocked(clock.now_ns(), clock)
    }

    /// The in-process strategy's handle (once; `None` if taken or served over IPC).
    pub fn take_strategy(&mut self, strategy: StrategyId) -> Option<StrategyHandle> {
        self.strategies.get_mut(usize::from(strategy.0))?.take()
    }

    /// The dispatcher (order table, guards, counters).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.front.dispatcher
    }

    /// The dispatcher, to act on as an operator would (reset a breaker, set a reference price).
    pub fn dispatcher_mut(&mut self) -> &mut Dispatcher {
        &mut self.front.dispatcher
    }

    /// Every venue link, in `VenueId` order.
    pub fn links(&self) -> &[EngineLink] {
        &self.exec.links
    }

    /// One venue link, to act on as an operator would (clear contradictions).
    pub fn link_mut(&mut self, venue: VenueId) -> Option<&mut EngineLink> {
        self.exec.links.get_mut(usize::from(venue.0))
    }

    /// The market-data feed handlers, in `[[feed]]` order.
    pub fn feeds(&self) -> &[FeedHandler] {
        &self.exec.feeds
    }

    /// The transport (the simulated network's endpoint, or a reactor's counters).
    pub fn transport(&self) -> &T {
        &self.exec.transport
    }

    /// The transport, mutably.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.exec.transport
    }

    /// Transport polls that failed so far.
    pub fn poll_errors(&self) -> u64 {
        self.exec.poll_errors
    }

    /// What the journal gave back at build.
    pub fn restored(&self) -> &Restored {
        &self.restored
    }

    pub(super) fn into_halves(self) -> (Front, Executor<T>) {
        (self.front, self.exec)
    }

    /// Stops the loop (the journal is synced, the wire log written out) and returns what it
    /// measured.
    pub fn finish(mut self) -> super::EngineReport {
        if let Some((thread, stop)) = self.wire.take() {
            stop.store(true, Ordering::Release);
            let _ = thread.join();
        }
        let poll_errors = self.exec.poll_errors;
        let now_ns = self.last_now_ns;
        let front = self.front.finish(now_ns);
        let (links, feeds) = self.exec.finish(now_ns);
        if let Some(c) = &self.counters {
            c.set_state(3);
        }
        super::EngineReport {
            dispatch: front.dispatch,
            open_orders: front.open_orders,
            links,
            bridges: front.bridges,
            journal_records: front.journal_records,
            feeds,
            transport_poll_errors: poll_errors,
            transport: None,
        }
    }
}

/// Longest a graceful stop waits for the venues to answer keel's Logout: a venue that does
/// not answer by then is left (the connection closes with the process).
pub const LOGOUT_WAIT_NS: u64 = 2_000_000_000;

/// A contradiction (with the execution it booked outside its order, if any) and a stall of
/// keel's own loop are each said once.
fn watch_contradictions(log: &mut LogTx, venue: VenueId, link: &EngineLink, seen: &mut LinkSeen) {
    use crate::session::protocol::VenueProtocol;
    let client = link.client().stats();
    if client.contradictions > seen.contradictions {
        seen.contradictions = client.contradictions;
        // The execution is named only with the contradiction that booked it.
        let booked = client.unmatched_executions > seen.unmatched_executions;
        seen.unmatched_executions = client.unmatched_executions;
        if let Some(what) = client.last_contradiction {
            log.send(LogRecord::Contradiction {
                venue,
                what,
                total: client.contradictions,
                booked: client.last_unmatched_execution.filter(|_| booked),
            });
        }
    }
    let stats = link.stats();
    if stats.loop_stalls > seen.loop_stalls {
        seen.loop_stalls = stats.loop_stalls;
        log.send(LogRecord::LoopStalled {
            venue,
            ns: stats.last_loop_stall_ns,
        });
    }
}

/// A reconciliation found positions that differ from the venue's: said with both figures (the
/// first differing symbol) and published for `keel ctl status`.
fn watch_positions(
    shared: &Shared,
    log: &mut LogTx,
    venue: VenueId,
    link: &EngineLink,
    seen: &mut LinkSeen,
) {
    use crate::session::protocol::VenueProtocol;
    let client = link.client().stats();
    if client.reconciliations == seen.reconciliations {
        return;
    }
    seen.reconciliations = client.reconciliations;
    let differ = client.last_reconciliation.position_mismatches;
    shared
        .link(venue)
        .position_mismatches
        .store(u64::from(differ), Ordering::Relaxed);
    let rose = client.position_mismatches > seen.position_mismatches;
    seen.position_mismatches = client.position_mismatches;
    if let (true, Some(mismatch)) = (rose, client.last_position_mismatch) {
        log.send(LogRecord::PositionMismatch {
            venue,
            differ,
            mismatch,
        });
    }
}
