//! The dispatcher: the loop body that turns strategy commands into venue requests.
//!
//! Each [`Dispatcher::poll`] does three bounded steps: apply venue outcomes (acks, fills,
//! rejects, timeouts) to the order table, the guards and the strategies; admit strategy
//! commands through the guard chain into per-venue priority lanes; and release requests from
//! the lanes, cancels first, to the venue rings. It owns its state, takes `now_ns` from its
//! caller, never blocks, never locks and never allocates after [`Dispatcher::new`].
//!
//! What it never does: resend after a timeout (a timed-out order becomes `Unknown`), send a
//! new order on a venue link that is not SYNCED, or drop a refusal silently (every refusal is
//! an event to the strategy and a counter).

mod config;
pub mod lanes;
mod operator;
pub mod quota;
mod stats;

pub use crate::ring::{
    strategy_channel, venue_channel, StrategyHandle, StrategyPort, VenueHandle, VenuePort,
};
pub use config::{ConfigError, DispatcherConfig};
pub use operator::{OperatorCancel, OperatorError, OperatorScope};
pub use stats::{DispatchStats, REFUSAL_REASONS};

use crate::guard::breaker::Breaker;
use crate::guard::bulkhead::Bulkhead;
use crate::guard::chain::{GuardChain, Release, SendBlock, VenueGuards, VenueNews};
use crate::guard::limiter::RateLimiter;
use crate::guard::risk::Risk;
use crate::guard::shed::{ShedConfig, Shedder};
use crate::order::table::Applied;
use crate::order::{
    CancelRejectReason, ClientOrderId, Command, Contradiction, Event, EventKind, LinkMode,
    MassCancelScope, NewOrder, Order, OrderEvent, OrderState, OrderTable, OutcomeKind, Price, Qty,
    RefusalReason, RejectReason, Replace, RequestKind, StrategyId, TableError, UnsentRequest,
    VenueId, VenueRequest,
};
use lanes::{BoundedQueue, CancelLane, CancelWork, NewLane, NewLaneFull, QueuedNew, QueuedReplace};

/// What [`Dispatcher::restore`] brought back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RestoreReport {
    /// Orders acknowledged by the venue before the restart (live or partially filled).
    pub live: u32,
    /// Orders sent and never answered: `Unknown`, a status query queued for each.
    pub unknown: u32,
    /// Symbols whose filled position (every fill on record) is not flat: what risk and
    /// reduce-only start from.
    pub positions: u32,
}

/// Why a journal could not be restored; each names the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// Restore runs before the journal is attached (it would write every order again).
    #[error("restore must run before the journal is attached")]
    JournalAttached,
    /// The order's strategy, venue or symbol is not in this configuration.
    #[error("order {0}: its strategy, venue or symbol is not configured")]
    BadRoute(ClientOrderId),
    /// More open orders than `orders_max`.
    #[error("order {0}: the order table is full (raise orders_max)")]
    TableFull(ClientOrderId),
    /// More in-flight orders than the bulkhead allows.
    #[error("order {0}: over the in-flight caps (raise the bulkhead caps)")]
    Bulkhead(ClientOrderId),
    /// More open orders for one venue than its session's `orders_max`.
    #[error("order {0}: the venue session's order map is full (raise the venue's orders_max)")]
    SessionFull(ClientOrderId),
    /// The order is already in the table (restore ran twice).
    #[error("order {0}: already in the order table")]
    Duplicate(ClientOrderId),
    /// A journaled position names a venue or symbol this configuration lacks.
    #[error("journaled position of venue {} in symbol {}: not configured", .0.0, .1.0)]
    UnknownPosition(VenueId, crate::order::SymbolId),
    /// The journaled fills of one symbol net past what a signed 64-bit position holds.
    #[error("journaled position in symbol {}: beyond 2^63 shares", .0.0)]
    PositionTooLarge(crate::order::SymbolId),
}

/// One venue link as the dispatcher sees it.
#[derive(Debug)]
struct VenueLanes {
    port: VenuePort,
    cancels: CancelLane,
    replaces: BoundedQueue<QueuedReplace>,
    news: NewLane,
    /// Reduce-only new orders: served after cancels, before replaces and new orders; sized
    /// like the new-order lane, per-symbol fair like it, never shed.
    reduces: NewLane,
    /// What the link lets leave (from its `LinkState` reports, downgraded here on a
    /// contradiction the order table found).
    mode: LinkMode,
    /// The order table refused a report about this order: a `Reconcile` request is owed to
    /// the link (sent as soon as its ring has room).
    reconcile_wanted: Option<ClientOrderId>,
    /// A `Reconcile` request is with the link and not yet answered: a `Trading` report that
    /// crosses it is taken as `ReadOnly` (it predates the contradiction).
    reconcile_pending: bool,
    /// Watchdog on the venue's executor loop, if one is attached.
    watchdog: Option<crate::runtime::watchdog::Watchdog>,
    /// The watchdog says the executor loop is stalled: route nothing new to it.
    stalled: bool,
    /// Wire reference the next new order or replacement gets (ascending, journaled).
    next_wire_ref: u32,
}

impl VenueLanes {
    /// The lane a new order waits in: its own for a reduce-only order.
    fn new_lane(&self, reduce_only: bool) -> &NewLane {
        if reduce_only {
            &self.reduces
        } else {
            &self.news
        }
    }

    fn new_lane_mut(&mut self, reduce_only: bool) -> &mut NewLane {
        if reduce_only {
            &mut self.reduces
        } else {
            &mut self.news
        }
    }
}

/// The dispatcher loop body. See the module docs.
#[derive(Debug)]
pub struct Dispatcher {
    /// The order journal, if attached: intents before release, answers as applied.
    journal: Option<crate::journal::Journal>,
    config: DispatcherConfig,
    table: OrderTable,
    guards: GuardChain,
    strategies: Vec<StrategyPort>,
    venues: Vec<VenueLanes>,
    next_strategy: usize,
    /// Scratch for mass cancels: wire cancels needed per venue (allocated at start).
    mass_cancel_need: Vec<u32>,
    /// Per strategy: the highest ClientOrderId sequence seen (in a new order or replace,
    /// admitted or refused, or restored from the journal). Ids ascend, so anything at or
    /// below it is a duplicate — whether or not its order is still in the table (a small
    /// table evicts closed orders; their ids must never reach the venue again).
    id_floor: Vec<u64>,
    /// Venue sequence number of the outcome being applied (0 outside one): journaled with
    /// the records it causes.
    outcome_seq: u64,
    /// Operator holds on new orders (kill switch, disabled strategies, shed symbols).
    holds: operator::Holds,
    /// Latency histograms (allocated at start; recording is an add).
    latency: Latency,
    /// Which queued work leaves first (priority lanes, or arrival order as a baseline).
    lane_order: LaneOrder,
    /// Per-strategy new-order rate and in-flight quotas.
    quotas: quota::Quotas,
    stats: DispatchStats,
}

/// The order in which a venue's queued work leaves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LaneOrder {
    /// keel's: cancels, then replaces, then new orders, whatever their arrival order.
    #[default]
    Priority,
    /// The FIFO baseline, for benchmarks and the demo's comparison only: the lane whose head
    /// arrived first goes first, so a cancel waits behind every new order queued before it
    /// (a head that cannot leave holds everything behind it). Never a production setting.
    Arrival,
}

/// The dispatcher's latency histograms, by message class.
#[derive(Debug, Clone, Default)]
pub struct Latency {
    /// Per venue: a new order's release to its first answer (accepted, rejected, filled).
    pub new_ack: Vec<crate::metrics::Histogram>,
    /// Per venue: a cancel's release to the venue's `Canceled`.
    pub cancel_ack: Vec<crate::metrics::Histogram>,
    /// Per venue: a new order's (or replace's) arrival at keel to the venue's first answer:
    /// its time in keel's lanes and guards plus the venue's, what the strategy waits.
    pub new_e2e: Vec<crate::metrics::Histogram>,
    /// A new order's admission to its release (lane wait and guards): keel's own decision.
    pub decision_new: crate::metrics::Histogram,
    /// A cancel's admission to its release.
    pub decision_cancel: crate::metrics::Histogram,
}

/// Requests waiting in one venue's lanes, in the order they are served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneDepths {
    /// Cancels and status queries.
    pub cancel: u32,
    /// Reduce-only new orders.
    pub reduce: u32,
    /// Replaces.
    pub replace: u32,
    /// Other new orders.
    pub new: u32,
}

impl Dispatcher {
    /// Validates `config`, allocates every table, lane and guard, and takes the ports.
    pub fn new(
        config: DispatcherConfig,
        strategies: Vec<StrategyPort>,
        venues: Vec<VenuePort>,
        now_ns: u64,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let count = |key, got: usize, want: u16| {
            if got == usize::from(want) {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange {
                    key,
                    value: got as u64,
                    allowed: "one port per configured entry",
                })
            }
        };
        count("strategies", strategies.len(), config.strategies)?;
        count("venues", venues.len(), config.venues)?;
        let shed = ShedConfig::from_pct(
            config.lane_new_capacity,
            config.shed_high_pct,
            config.shed_low_pct,
        );
        let mut venue_guards = Vec::with_capacity(venues.len());
        for _ in 0..venues.len() {
            venue_guards.push(VenueGuards {
                shed: Shedder::new(shed),
                breaker: Breaker::new(config.breaker)?,
                limiter: RateLimiter::new(config.limiter, now_ns)?,
                link: LinkMode::Down,
            });
        }
        let venues = venues
            .into_iter()
            .map(|port| VenueLanes {
                port,
                cancels: CancelLane::cancels(config.lane_cancel_capacity, config.symbols),
                replaces: BoundedQueue::new(config.lane_replace_capacity),
                news: NewLane::new(
                    config.lane_new_capacity,
                    config.lane_new_per_symbol_max,
                    config.symbols,
                ),
                reduces: NewLane::new(
                    config.lane_new_capacity,
                    config.lane_new_per_symbol_max,
                    config.symbols,
                ),
                mode: LinkMode::Down,
                reconcile_wanted: None,
                reconcile_pending: false,
                watchdog: None,
                stalled: false,
                next_wire_ref: 1,
            })
            .collect();
        Ok(Self {
            journal: None,
            table: OrderTable::new(config.orders_max, config.strategies),
            guards: GuardChain {
                risk: Risk::new(config.risk, config.symbols),
                bulkhead: Bulkhead::new(config.bulkhead, config.symbols, config.venues),
                venues: venue_guards,
            },
            strategies,
            venues,
            next_strategy: 0,
            mass_cancel_need: vec![0; usize::from(config.venues)],
            id_floor: vec![0; usize::from(config.strategies)],
            outcome_seq: 0,
            holds: operator::Holds::new(config.strategies, config.symbols),
            latency: Latency {
                new_ack: vec![crate::metrics::Histogram::default(); usize::from(config.venues)],
                cancel_ack: vec![crate::metrics::Histogram::default(); usize::from(config.venues)],
                new_e2e: vec![crate::metrics::Histogram::default(); usize::from(config.venues)],
                ..Latency::default()
            },
            lane_order: LaneOrder::Priority,
            quotas: quota::Quotas::new(config.strategies, config.quota, now_ns),
            stats: DispatchStats::default(),
            config,
        })
    }

    /// One bounded pass at one instant `now_ns`: outcomes, then commands, then sends. Returns
    /// the units of work done (0 means idle, for the caller's idle policy). A command admitted
    /// and released in the same pass measures a decision time of 0: loops that measure it call
    /// [`Dispatcher::poll_clocked`].
    pub fn poll(&mut self, now_ns: u64) -> u32 {
        self.poll_clocked(&crate::clock::FrozenClock(now_ns))
    }

    /// One bounded pass reading `clock`: once for the outcomes, once per command as it is taken
    /// from its ring (its arrival at keel), once per release step and once at each release.
    /// So a decision (arrival to release) and an end-to-end time (arrival to the venue's
    /// answer) are measured, not rounded to the pass: one `now_ns` per pass made every
    /// decision admitted and released in the same pass weigh exactly 0 ns.
    pub fn poll_clocked<C: crate::clock::Clock>(&mut self, clock: &C) -> u32 {
        let now_ns = clock.now_ns();
        self.check_watchdogs(now_ns);
        let work =
            self.drain_outcomes(now_ns) + self.drain_commands(clock) + self.serve_lanes(clock);
        self.stats.polls += 1;
        work
    }

    /// Strategies configured (one port each).
    pub fn strategy_count(&self) -> usize {
        self.strategies.len()
    }

    /// Latency histograms by message class.
    pub fn latency(&self) -> &Latency {
        &self.latency
    }

    /// Symbols configured.
    pub fn symbol_count(&self) -> u32 {
        u32::from(self.config.symbols)
    }

    /// Counters.
    pub fn stats(&self) -> &DispatchStats {
        &self.stats
    }

    /// Gives `strategy` its own quota instead of `[dispatcher.quota]` (at start, from
    /// `[[dispatcher.quota.strategy]]`; its bucket starts full).
    pub fn set_strategy_quota(
        &mut self,
        strategy: StrategyId,
        quota: quota::StrategyQuota,
        now_ns: u64,
    ) -> Result<(), quota::QuotaError> {
        self.quotas.set(strategy, quota, now_ns)
    }

    /// The per-strategy quotas (read only), for metrics.
    pub fn quotas(&self) -> &quota::Quotas {
        &self.quotas
    }

    /// The order table (read only).
    pub fn table(&self) -> &OrderTable {
        &self.table
    }

    /// The guards (read only), for metrics.
    pub fn guards(&self) -> &GuardChain {
        &self.guards
    }

    /// Operator switch: shed every new order for `venue`. False: no such venue.
    pub fn set_manual_shed(&mut self, venue: VenueId, on: bool) -> bool {
        match self.guards.venues.get_mut(venue.index()) {
            Some(v) => {
                v.shed.set_manual(on);
                true
            }
            None => false,
        }
    }

    /// Depths of a venue's lanes (`None`: no such venue).
    pub fn lane_depths(&self, venue: VenueId) -> Option<LaneDepths> {
        let v = self.venues.get(venue.index())?;
        Some(LaneDepths {
            cancel: v.cancels.len(),
            reduce: v.reduces.len(),
            replace: v.replaces.len(),
            new: v.news.len(),
        })
    }

    /// Whether the venue link is SYNCED (the only state in which new orders leave).
    pub fn is_synced(&self, venue: VenueId) -> bool {
        self.link_mode(venue) == LinkMode::Trading
    }

    /// Sets `symbol`'s reference price for the pre-trade price collar (e.g. from market data
    /// or an operator; fills set it too).
    pub fn set_reference_price(&mut self, symbol: crate::order::SymbolId, price: Price) {
        if symbol.0 < self.config.symbols {
            self.guards.risk.set_reference(symbol, price);
        }
    }

    /// What venue `venue`'s link lets leave, as the dispatcher knows it (`Down` for a venue
    /// that is not configured).
    pub fn link_mode(&self, venue: VenueId) -> LinkMode {
        self.venues
            .get(venue.index())
            .map_or(LinkMode::Down, |v| v.mode)
    }

    /// Attaches the order journal: from now on every new order's intent is appended before
    /// it is released (an order whose intent cannot be written is refused
    /// `JournalUnavailable`), and every acknowledgement, fill and close as it is applied.
    pub fn attach_journal(&mut self, journal: crate::journal::Journal) {
        self.journal = Some(journal);
    }

    /// The attached journal (for the engine's own records, e.g. session sequence numbers,
    /// and for `sync`).
    pub fn journal_mut(&mut self) -> Option<&mut crate::journal::Journal> {
        self.journal.as_mut()
    }

    /// Rebuilds the order table from a journal's [`Recovery`], before trading and before the
    /// journal is attached (so nothing is written twice): every order the journal does not
    /// show closed is back, with its fills in the positions and its quantity reserved;
    /// acknowledged orders are live, orders sent and never answered are `Unknown` (the symbol's
    /// gate closes) and a status query is queued for each — never a resend. The venue link
    /// then reconciles before SYNCED.
    pub fn restore(
        &mut self,
        recovery: &crate::journal::Recovery,
    ) -> Result<RestoreReport, RestoreError> {
        if self.journal.is_some() {
            return Err(RestoreError::JournalAttached);
        }
        let mut report = RestoreReport::default();
        // No wire reference and no ClientOrderId of the journaled run is ever used again.
        for (venue, &next) in &recovery.next_wire_ref {
            if let Some(link) = self.venues.get_mut(usize::from(venue.0)) {
                link.next_wire_ref = link.next_wire_ref.max(next);
            }
        }
        for (strategy, &next) in &recovery.next_sequence {
            if let Some(floor) = self.id_floor.get_mut(usize::from(strategy.0)) {
                *floor = (*floor).max(next.saturating_sub(1));
            }
        }
        for r in recovery.open.values() {
            let o = r.order;
            let strategy = o.id.strategy();
            let routable = usize::from(strategy.0) < self.strategies.len()
                && usize::from(o.venue.0) < self.venues.len()
                && o.symbol.0 < self.config.symbols;
            if !routable {
                return Err(RestoreError::BadRoute(o.id));
            }
            if self.table.get(o.id).is_some() {
                return Err(RestoreError::Duplicate(o.id));
            }
            if self.table.open_count() >= self.table.capacity() {
                return Err(RestoreError::TableFull(o.id));
            }
            self.guards
                .hold_restored(&o)
                .map_err(|_| RestoreError::Bulkhead(o.id))?;
            self.quotas.hold_restored(strategy);
            self.table
                .insert(strategy, &o, None)
                .map_err(|_| RestoreError::Duplicate(o.id))?;
            self.table.mark_sent(o.id, 1);
            let v = usize::from(o.venue.0);
            if r.accepted {
                self.apply(o.id, OrderEvent::Accepted, 0)
                    .map_err(|_| RestoreError::Duplicate(o.id))?;
                if r.filled > 0 {
                    let fill = OrderEvent::Fill { completes: false };
                    self.apply(o.id, fill, r.filled)
                        .map_err(|_| RestoreError::Duplicate(o.id))?;
                }
                report.live += 1;
            } else {
                self.apply(o.id, OrderEvent::Timeout, 0)
                    .map_err(|_| RestoreError::Duplicate(o.id))?;
                let query = CancelWork::Query {
                    id: o.id,
                    symbol: o.symbol,
                    enqueued_ns: 0,
                };
                if self.venues[v].cancels.push(query).is_err() {
                    self.stats.query_lane_full += 1;
                }
                report.unknown += 1;
            }
        }
        // Risk's position is every fill on record, of closed orders too (the restored open
        // orders' fills above are part of it): summed over the venues' accounts per symbol.
        let mut net = vec![0i128; usize::from(self.config.symbols)];
        for (&(venue, symbol), position) in &recovery.positions {
            if usize::from(venue.0) >= self.venues.len() || symbol.0 >= self.config.symbols {
                return Err(RestoreError::UnknownPosition(venue, symbol));
            }
            net[usize::from(symbol.0)] += position.net();
        }
        for (symbol, net) in net.into_iter().enumerate() {
            let symbol = crate::order::SymbolId(symbol as u16);
            let net = i64::try_from(net).map_err(|_| RestoreError::PositionTooLarge(symbol))?;
            self.guards.restore_position(symbol, net);
            report.positions += u32::from(net != 0);
        }
        Ok(report)
    }

    /// Index the journal's next record will get (`None`: no journal attached).
    pub fn journal_next_index(&self) -> Option<u64> {
        self.journal
            .as_ref()
            .map(crate::journal::Journal::next_index)
    }

    /// Appends `record` to the journal if one is attached; false (and counted) on failure.
    fn journal(&mut self, record: crate::journal::JournalRecord) -> bool {
        match self.journal.as_mut().map(|j| j.append(&record)) {
            None | Some(Ok(_)) => true,
            Some(Err(_)) => {
                self.stats.journal_errors += 1;
                false
            }
        }
    }

    /// Watches `venue`'s executor loop: while its heartbeat stops, new orders for it are
    /// refused with `ExecutorStalled` (cancels still queue for it). False: no such venue.
    pub fn attach_watchdog(
        &mut self,
        venue: VenueId,
        watchdog: crate::runtime::watchdog::Watchdog,
    ) -> bool {
        match self.venues.get_mut(venue.index()) {
            Some(v) => {
                v.watchdog = Some(watchdog);
                true
            }
            None => false,
        }
    }

    fn check_watchdogs(&mut self, now_ns: u64) {
        for venue in &mut self.venues {
            if let Some(dog) = venue.watchdog.as_mut() {
                let stalled = dog.check(now_ns);
                if stalled && !venue.stalled {
                    self.stats.executor_stalls += 1;
                }
                venue.stalled = stalled;
            }
        }
    }

    // ----- strategy commands -------------------------------------------------------------

    fn drain_commands<C: crate::clock::Clock>(&mut self, clock: &C) -> u32 {
        let n = self.strategies.len();
        let mut done = 0;
        let mut idle_in_a_row = 0;
        while done < self.config.commands_per_poll_max && idle_in_a_row < n {
            let s = self.next_strategy;
            self.next_strategy = (s + 1) % n;
            let port = &mut self.strategies[s];
            // Each command yields at most one immediate event: read only if it has room.
            if port.events.slots() == 0 {
                idle_in_a_row += 1;
                continue;
            }
            let Ok(command) = port.commands.pop() else {
                idle_in_a_row += 1;
                continue;
            };
            idle_in_a_row = 0;
            done += 1;
            self.stats.commands += 1;
            // Its arrival at keel: the start of its decision and of its end-to-end time.
            self.handle_command(clock.now_ns(), StrategyId(s as u16), command);
        }
        done
    }

    fn handle_command(&mut self, now_ns: u64, strategy: StrategyId, command: Command) {
        let result = match command {
            Command::New(order) => self
                .admit_new(now_ns, strategy, &order)
                .map_err(|k| (order.id, k)),
            Command::Cancel { id } => self.admit_cancel(now_ns, strategy, id).map_err(|k| (id, k)),
            Command::Replace(r) => self
                .admit_replace(now_ns, strategy, &r)
                .map_err(|k| (r.new_id, k)),
            Command::MassCancel { scope } => self
                .admit_mass_cancel(now_ns, strategy, scope)
                .map_err(|k| (ClientOrderId(0), k)),
        };
        if let Err((id, kind)) = result {
            self.count_refusal(kind);
            self.emit(strategy, id, kind, now_ns);
        }
    }

    fn admit_new(
        &mut self,
        now_ns: u64,
        strategy: StrategyId,
        order: &NewOrder,
    ) -> Result<(), EventKind> {
        let refuse = |reason| EventKind::Refused { reason };
        self.check_route(strategy, order)?;
        if self.table.get(order.id).is_some() || self.below_id_floor(order.id) {
            return Err(refuse(RefusalReason::DuplicateId));
        }
        self.raise_id_floor(order.id);
        if let Some(reason) = self.holds.block(strategy, order.symbol, order.reduce_only) {
            return Err(refuse(reason));
        }
        let venue = &self.venues[usize::from(order.venue.0)];
        if let Some(reason) = new_order_block(venue.mode) {
            return Err(refuse(reason));
        }
        if venue.stalled {
            return Err(refuse(RefusalReason::ExecutorStalled));
        }
        venue
            .new_lane(order.reduce_only)
            .can_push(order.symbol)
            .map_err(|full| refuse(lane_full_reason(full)))?;
        if self.table.open_count() >= self.table.capacity() {
            return Err(refuse(RefusalReason::OrderTableFull));
        }
        self.quotas.check(now_ns, strategy).map_err(refuse)?;
        self.guards.admit(now_ns, order, venue.news.len(), 0)?;
        self.quotas.take(strategy);
        let inserted = self.table.insert(strategy, order, None);
        assert!(
            inserted.is_ok(),
            "table room and id were checked: {inserted:?}"
        );
        self.table.mark_admitted(order.id, now_ns);
        let pushed = self.venues[usize::from(order.venue.0)]
            .new_lane_mut(order.reduce_only)
            .push(QueuedNew {
                order: *order,
                enqueued_ns: now_ns,
            });
        assert!(pushed.is_ok(), "lane room was checked");
        Ok(())
    }

    fn admit_cancel(
        &mut self,
        now_ns: u64,
        strategy: StrategyId,
        id: ClientOrderId,
    ) -> Result<(), EventKind> {
        let order = *self.owned_open_order(strategy, id)?;
        if matches!(
            order.state,
            OrderState::PendingCancel | OrderState::PendingReplace | OrderState::Unknown
        ) {
            return Err(EventKind::Refused {
                reason: RefusalReason::AlreadyPending,
            });
        }
        let venue = &mut self.venues[usize::from(order.venue.0)];
        if order.sent_ns == 0
            && venue
                .new_lane_mut(order.reduce_only)
                .remove(order.symbol, id)
                .is_some()
        {
            // Caught before it left: close it here, no wire traffic, no budget spent.
            self.cancel_unsent(now_ns, id);
            return Ok(());
        }
        if venue
            .cancels
            .push(CancelWork::One {
                id,
                symbol: order.symbol,
                enqueued_ns: now_ns,
            })
            .is_err()
        {
            self.stats.cancel_lane_full += 1;
            return Err(EventKind::Refused {
                reason: RefusalReason::CancelLaneFull,
            });
        }
        self.apply(id, OrderEvent::CancelRequested, 0)
            .expect("open, not pending: the lifecycle allows a cancel request");
        Ok(())
    }

    fn admit_replace(
        &mut self,
        now_ns: u64,
        strategy: StrategyId,
        r: &Replace,
    ) -> Result<(), EventKind> {
        let refuse = |reason| EventKind::Refused { reason };
        let old = *self.owned_open_order(strategy, r.id)?;
        if !matches!(old.state, OrderState::Live | OrderState::PartiallyFilled) {
            return Err(refuse(RefusalReason::AlreadyPending));
        }
        let replacement = NewOrder {
            id: r.new_id,
            price: r.price,
            qty: r.qty,
            ..order_as_new(&old)
        };
        self.check_route(strategy, &replacement)?;
        if self.table.get(r.new_id).is_some() || self.below_id_floor(r.new_id) {
            return Err(refuse(RefusalReason::DuplicateId));
        }
        self.raise_id_floor(r.new_id);
        if let Some(reason) = self.holds.block(strategy, old.symbol, old.reduce_only) {
            return Err(refuse(reason));
        }
        if self.table.open_count() >= self.table.capacity() {
            return Err(refuse(RefusalReason::OrderTableFull));
        }
        let venue = &self.venues[usize::from(old.venue.0)];
        if venue.replaces.free() == 0 {
            return Err(refuse(RefusalReason::ReplaceLaneFull));
        }
        // A replace enters a new order: it spends the strategy's quota like one.
        self.quotas.check(now_ns, strategy).map_err(refuse)?;
        self.guards
            .admit(now_ns, &replacement, venue.news.len(), old.leaves_qty())?;
        self.quotas.take(strategy);
        let inserted = self.table.insert(strategy, &replacement, Some(r.id));
        assert!(
            inserted.is_ok(),
            "table room and id were checked: {inserted:?}"
        );
        self.table.mark_admitted(r.new_id, now_ns);
        self.table.set_link(r.id, r.new_id);
        self.apply(r.id, OrderEvent::ReplaceRequested, 0)
            .expect("live order: the lifecycle allows a replace request");
        let queued = QueuedReplace {
            replace: *r,
            enqueued_ns: now_ns,
        };
        let pushed = self.venues[usize::from(old.venue.0)].replaces.push(queued);
        assert!(pushed.is_ok(), "lane room was checked");
        Ok(())
    }

    /// Expands a mass cancel at once into single cancels, walking only the strategy's open
    /// orders. All or nothing: if any venue's cancel lane lacks room for its share, the whole
    /// mass cancel is refused before anything changes.
    fn admit_mass_cancel(
        &mut self,
        now_ns: u64,
        strategy: StrategyId,
        scope: MassCancelScope,
    ) -> Result<(), EventKind> {
        if let MassCancelScope::Symbol(symbol) = scope {
            if symbol.0 >= self.config.symbols {
                return Err(EventKind::Refused {
                    reason: RefusalReason::BadRoute,
                });
            }
        }
        self.mass_cancel_need.iter_mut().for_each(|n| *n = 0);
        let mut at = self.table.first_open(strategy);
        while let Some(slot) = at {
            at = self.table.next_open(slot);
            let order = *self
                .table
                .slot(slot)
                .expect("open list names occupied slots");
            if let MassCancelStep::Wire = self.mass_cancel_step(&order, scope) {
                self.mass_cancel_need[usize::from(order.venue.0)] += 1;
            }
        }
        let short = self
            .venues
            .iter()
            .zip(&self.mass_cancel_need)
            .any(|(v, &need)| v.cancels.free() < need);
        if short {
            self.stats.cancel_lane_full += 1;
            return Err(EventKind::Refused {
                reason: RefusalReason::CancelLaneFull,
            });
        }
        let mut at = self.table.first_open(strategy);
        while let Some(slot) = at {
            at = self.table.next_open(slot);
            let order = *self
                .table
                .slot(slot)
                .expect("open list names occupied slots");
            match self.mass_cancel_step(&order, scope) {
                MassCancelStep::Skip => {}
                MassCancelStep::SkipUnknown => self.stats.mass_cancel_skipped += 1,
                MassCancelStep::Local => {
                    let removed = self.venues[usize::from(order.venue.0)]
                        .new_lane_mut(order.reduce_only)
                        .remove(order.symbol, order.id);
                    assert!(removed.is_some(), "unsent new order is in its lane");
                    self.cancel_unsent(now_ns, order.id);
                }
                MassCancelStep::Wire => {
                    if let Some(original) = order.linked.filter(|_| order.sent_ns == 0) {
                        // A queued replace: withdraw it, then cancel the original instead.
                        self.withdraw_replacement(now_ns, &order, original);
                        self.queue_cancel(now_ns, original);
                    } else {
                        self.queue_cancel(now_ns, order.id);
                    }
                }
            }
        }
        Ok(())
    }

    /// What a mass cancel does with one open order of its strategy.
    fn mass_cancel_step(&self, order: &Order, scope: MassCancelScope) -> MassCancelStep {
        let in_scope = match scope {
            MassCancelScope::Symbol(symbol) => order.symbol == symbol,
            MassCancelScope::Strategy => true,
        };
        match order.state {
            _ if !in_scope => MassCancelStep::Skip,
            OrderState::Live | OrderState::PartiallyFilled => MassCancelStep::Wire,
            OrderState::PendingNew if order.sent_ns == 0 && order.linked.is_none() => {
                MassCancelStep::Local
            }
            // Sent: cancel before the ack. Queued replacement: withdrawn, original canceled.
            OrderState::PendingNew => MassCancelStep::Wire,
            // Unknown: resolve first (status query), then cancel; counted.
            OrderState::Unknown => MassCancelStep::SkipUnknown,
            // Covered through its replacement; already canceling; or closed.
            _ => MassCancelStep::Skip,
        }
    }

    /// Puts a single cancel in its venue's lane (room checked by the caller).
    fn queue_cancel(&mut self, now_ns: u64, id: ClientOrderId) {
        let order = self.table.get(id).expect("order to cancel exists");
        let (venue, symbol) = (order.venue, order.symbol);
        let pushed = self.venues[usize::from(venue.0)]
            .cancels
            .push(CancelWork::One {
                id,
                symbol,
                enqueued_ns: now_ns,
            });
        assert!(pushed.is_ok(), "cancel lane room was checked");
        self.apply(id, OrderEvent::CancelRequested, 0)
            .expect("open order accepts a cancel request");
    }

    /// Takes back a replace that has not left yet: the replacement closes as canceled, the
    /// original stands again. Its entry in the replace lane is dropped when reached.
    fn withdraw_replacement(&mut self, now_ns: u64, replacement: &Order, original: ClientOrderId) {
        self.apply(replacement.id, OrderEvent::Rejected, 0)
            .expect("queued replacement is pending new");
        self.apply(original, OrderEvent::ReplaceRejected, 0)
            .expect("original is pending replace");
        self.emit(
            replacement.strategy,
            replacement.id,
            EventKind::Canceled,
            now_ns,
        );
    }

    fn check_route(&self, strategy: StrategyId, order: &NewOrder) -> Result<(), EventKind> {
        let bad = order.venue.0 >= self.config.venues
            || order.symbol.0 >= self.config.symbols
            || order.id.strategy() != strategy
            || order.id.sequence() == 0;
        if bad {
            return Err(EventKind::Refused {
                reason: RefusalReason::BadRoute,
            });
        }
        Ok(())
    }

    fn owned_open_order(
        &self,
        strategy: StrategyId,
        id: ClientOrderId,
    ) -> Result<&Order, EventKind> {
        match self.table.get(id) {
            Some(order) if order.strategy == strategy && !order.state.is_terminal() => Ok(order),
            _ => Err(EventKind::Refused {
                reason: RefusalReason::UnknownOrder,
            }),
        }
    }

    /// Closes an order that never left the engine.
    fn cancel_unsent(&mut self, now_ns: u64, id: ClientOrderId) {
        self.apply(id, OrderEvent::CancelRequested, 0)
            .expect("pending new can be canceled");
        let applied = self
            .apply(id, OrderEvent::Canceled, 0)
            .expect("pending cancel closes");
        self.emit(applied.order.strategy, id, EventKind::Canceled, now_ns);
    }

    // ----- sending -----------------------------------------------------------------------

    fn serve_lanes<C: crate::clock::Clock>(&mut self, clock: &C) -> u32 {
        let mut sent = 0;
        for v in 0..self.venues.len() {
            sent += self.serve_venue(clock, v);
        }
        sent
    }

    /// Releases up to `sends_per_poll_max` requests to venue `v`: cancels, then reduce-only
    /// orders, then replaces, then new orders. Stops when the venue ring is full or the rate
    /// budget is short.
    fn serve_venue<C: crate::clock::Clock>(&mut self, clock: &C, v: usize) -> u32 {
        let mut sent = 0;
        while sent < self.config.sends_per_poll_max && self.venues[v].port.requests.slots() > 0 {
            let now_ns = clock.now_ns();
            let mode = self.venues[v].mode;
            let step = if let Some(id) = self.venues[v].reconcile_wanted {
                self.send_reconcile(now_ns, v, id)
            } else if mode == LinkMode::Down {
                // Nothing leaves for a link that is down; queued new orders are refused at
                // once, cancels and queries wait (and pay for budget when they leave).
                if !self.venues[v].reduces.is_empty() {
                    self.serve_new(clock, v, true)
                } else if !self.venues[v].news.is_empty() {
                    self.serve_new(clock, v, false)
                } else {
                    Step::Idle
                }
            } else if self.lane_order == LaneOrder::Arrival {
                self.serve_oldest(clock, v)
            } else if !self.venues[v].cancels.is_empty() {
                self.serve_cancel(clock, v)
            } else if !self.venues[v].reduces.is_empty() {
                self.serve_new(clock, v, true)
            } else if !self.venues[v].replaces.is_empty() {
                self.serve_replace(now_ns, v)
            } else if !self.venues[v].news.is_empty() {
                self.serve_new(clock, v, false)
            } else {
                Step::Idle
            };
            match step {
                Step::Sent => sent += 1,
                Step::Progress => {}
                Step::Idle | Step::Wait => break,
            }
        }
        sent
    }

    /// The FIFO baseline's step: serves the lane whose head arrived first (heads admitted in
    /// the same pass tie, and a tie goes to the cancel: the baseline is never made worse than
    /// a FIFO would be).
    fn serve_oldest<C: crate::clock::Clock>(&mut self, clock: &C, v: usize) -> Step {
        let lanes = &self.venues[v];
        let cancel = lanes.cancels.peek().map(CancelWork::enqueued_ns);
        let reduce = lanes.reduces.peek().map(|n| n.enqueued_ns);
        let replace = lanes.replaces.front().map(|r| r.enqueued_ns);
        let new = lanes.news.peek().map(|n| n.enqueued_ns);
        let oldest = [cancel, reduce, replace, new]
            .into_iter()
            .enumerate()
            .filter_map(|(lane, at)| at.map(|at| (at, lane)))
            .min();
        match oldest {
            Some((_, 0)) => self.serve_cancel(clock, v),
            Some((_, 1)) => self.serve_new(clock, v, true),
            Some((_, 2)) => self.serve_replace(clock.now_ns(), v),
            Some(_) => self.serve_new(clock, v, false),
            None => Step::Idle,
        }
    }

    /// Sets the order in which queued work leaves (the FIFO baseline is for comparisons).
    pub fn set_lane_order(&mut self, order: LaneOrder) {
        self.lane_order = order;
    }

    /// The order in which queued work leaves.
    pub fn lane_order(&self) -> LaneOrder {
        self.lane_order
    }

    fn serve_cancel<C: crate::clock::Clock>(&mut self, clock: &C, v: usize) -> Step {
        let now_ns = clock.now_ns();
        let (id, enqueued_ns) = match *self.venues[v].cancels.peek().expect("checked non-empty") {
            CancelWork::One {
                id, enqueued_ns, ..
            } => (id, enqueued_ns),
            CancelWork::Query { id, .. } => return self.serve_query(now_ns, v, id),
        };
        // Still pending, or in doubt with the cancel still unsent (its request came back from
        // a dropped link while the order's new-order answer was overdue): send it.
        let still_wanted = self.table.get(id).is_some_and(|o| {
            o.state == OrderState::PendingCancel
                || (o.state == OrderState::Unknown && o.unknown_from == OrderState::PendingCancel)
        });
        if !still_wanted {
            // Filled or closed while the cancel waited: nothing to send, but the command is
            // still answered (a fill or a refusal closed the order; a venue cancel already
            // answered it as `Canceled`).
            self.venues[v].cancels.pop();
            self.answer_moot_cancel(now_ns, id);
            return Step::Progress;
        }
        let step = self.send_cancel(now_ns, v, id);
        if step == Step::Sent {
            // Read at release, after the guards: the decision's whole time in keel.
            self.latency
                .decision_cancel
                .record(clock.now_ns().saturating_sub(enqueued_ns));
        }
        step
    }

    /// A cancel that waited in its lane while its order reopened (or closed unseen): every
    /// command gets one answer, so the strategy hears `CancelRejected` unless something
    /// answered the cancel already (an order's close answers it at once, see `emit`).
    fn answer_moot_cancel(&mut self, now_ns: u64, id: ClientOrderId) {
        let Some(order) = self.table.get(id) else {
            return; // evicted after closing: its close answered the cancel (see `emit`)
        };
        let (strategy, closed) = (order.strategy, order.state.is_terminal());
        if !self.table.take_cancel_owed(id) {
            return; // already answered: `Canceled`, a venue's refusal, or the order's close
        }
        let reason = if closed {
            CancelRejectReason::TooLateToCancel
        } else {
            CancelRejectReason::NotApplied
        };
        self.stats.moot_cancels += 1;
        self.emit(strategy, id, EventKind::CancelRejected { reason }, now_ns);
    }

    /// Asks the link to reconcile after the order table refused one of its reports.
    fn send_reconcile(&mut self, now_ns: u64, v: usize, id: ClientOrderId) -> Step {
        let link = &mut self.venues[v];
        link.reconcile_wanted = None;
        if link.mode == LinkMode::Down {
            return Step::Progress; // its next login reconciles before anything leaves
        }
        link.reconcile_pending = true;
        self.push_request(now_ns, v, 0, RequestKind::Reconcile { id });
        Step::Sent
    }

    /// Sends a status query for an order still `Unknown` (skips it if evidence arrived first).
    fn serve_query(&mut self, now_ns: u64, v: usize, id: ClientOrderId) -> Step {
        let still_unknown = self
            .table
            .get(id)
            .is_some_and(|o| o.state == OrderState::Unknown);
        if !still_unknown {
            self.venues[v].cancels.pop();
            return Step::Progress;
        }
        let weight = self.config.limiter.weights.query;
        match self
            .guards
            .clear_to_send(now_ns, VenueId(v as u16), weight, Release::Cancel)
        {
            Ok(()) => {
                self.venues[v].cancels.pop();
                self.push_request(now_ns, v, 0, RequestKind::Query { id });
                Step::Sent
            }
            Err(_) => Step::Wait,
        }
    }

    fn send_cancel(&mut self, now_ns: u64, v: usize, id: ClientOrderId) -> Step {
        let weight = self.config.limiter.weights.cancel;
        match self
            .guards
            .clear_to_send(now_ns, VenueId(v as u16), weight, Release::Cancel)
        {
            Ok(()) => {
                self.venues[v].cancels.pop();
                self.push_request(now_ns, v, 0, RequestKind::Cancel { id });
                Step::Sent
            }
            // Cancels never give up and never meet the breaker: they wait for budget.
            Err(_) => Step::Wait,
        }
    }

    fn serve_replace(&mut self, now_ns: u64, v: usize) -> Step {
        let queued = *self.venues[v].replaces.front().expect("checked non-empty");
        let r = queued.replace;
        let withdrawn = self
            .table
            .get(r.new_id)
            .is_none_or(|o| o.state != OrderState::PendingNew);
        if withdrawn {
            // Taken back by a mass cancel; both orders are already settled.
            self.venues[v].replaces.pop();
            return Step::Progress;
        }
        if let Some(reason) = new_order_block(self.venues[v].mode) {
            // A replace enters a new order: it waits for a trusted link like one.
            self.venues[v].replaces.pop();
            let kind = EventKind::Refused { reason };
            self.abandon_replacement(now_ns, r.id, r.new_id, kind);
            return Step::Progress;
        }
        let still_wanted = self
            .table
            .get(r.id)
            .is_some_and(|o| o.state == OrderState::PendingReplace);
        if !still_wanted {
            // The order filled or closed while the replace waited.
            self.venues[v].replaces.pop();
            self.abandon_replacement(
                now_ns,
                r.id,
                r.new_id,
                EventKind::Refused {
                    reason: RefusalReason::UnknownOrder,
                },
            );
            return Step::Progress;
        }
        if now_ns.saturating_sub(queued.enqueued_ns) > self.config.acquire_timeout_ns {
            self.venues[v].replaces.pop();
            self.abandon_replacement(now_ns, r.id, r.new_id, EventKind::Throttled);
            return Step::Progress;
        }
        let reduce_only = self.table.get(r.id).is_some_and(|o| o.reduce_only);
        match self.guards.clear_to_send(
            now_ns,
            VenueId(v as u16),
            self.config.limiter.weights.replace,
            release_of(reduce_only),
        ) {
            Ok(()) => {
                self.venues[v].replaces.pop();
                // The replacement's intent is on record before the replace can leave.
                let original = *self.table.get(r.id).expect("checked: pending replace");
                let intent = NewOrder {
                    id: r.new_id,
                    venue: original.venue,
                    symbol: original.symbol,
                    side: original.side,
                    price: r.price,
                    qty: r.qty,
                    tif: original.tif,
                    reduce_only: original.reduce_only,
                };
                let wire_ref = self.take_wire_ref(v);
                let record = crate::journal::JournalRecord::Intent {
                    order: intent,
                    wire_ref,
                };
                if !self.journal(record) {
                    let reason = RefusalReason::JournalUnavailable;
                    self.abandon_replacement(now_ns, r.id, r.new_id, EventKind::Refused { reason });
                    return Step::Progress;
                }
                self.table.mark_sent(r.new_id, now_ns);
                self.push_request(now_ns, v, wire_ref, RequestKind::Replace(r));
                self.stats.sent_reduce_only += u64::from(reduce_only);
                Step::Sent
            }
            Err(SendBlock::Breaker(refused)) => {
                self.venues[v].replaces.pop();
                let kind = EventKind::BreakerOpen {
                    retry_after_ns: refused.retry_after_ns,
                };
                self.abandon_replacement(now_ns, r.id, r.new_id, kind);
                Step::Progress
            }
            Err(SendBlock::NotReady(_)) => Step::Wait,
        }
    }

    /// Serves the head of venue `v`'s reduce-only lane (`reduce`) or new-order lane.
    fn serve_new<C: crate::clock::Clock>(&mut self, clock: &C, v: usize, reduce: bool) -> Step {
        let now_ns = clock.now_ns();
        let queued = *self.venues[v]
            .new_lane(reduce)
            .peek()
            .expect("checked non-empty");
        let id = queued.order.id;
        if let Some(reason) = new_order_block(self.venues[v].mode) {
            self.venues[v].new_lane_mut(reduce).pop();
            self.abandon_new(now_ns, id, EventKind::Refused { reason });
            return Step::Progress;
        }
        if now_ns.saturating_sub(queued.enqueued_ns) > self.config.acquire_timeout_ns {
            self.venues[v].new_lane_mut(reduce).pop();
            self.abandon_new(now_ns, id, EventKind::Throttled);
            return Step::Progress;
        }
        match self.guards.clear_to_send(
            now_ns,
            VenueId(v as u16),
            self.config.limiter.weights.new,
            release_of(reduce),
        ) {
            Ok(()) => {
                self.venues[v].new_lane_mut(reduce).pop();
                // The invariant that protects the venue: only a SYNCED link carries new orders.
                assert_eq!(
                    self.venues[v].mode,
                    LinkMode::Trading,
                    "new order released on a link that is not SYNCED"
                );
                // The intent is on record before the order can leave.
                let wire_ref = self.take_wire_ref(v);
                let record = crate::journal::JournalRecord::Intent {
                    order: queued.order,
                    wire_ref,
                };
                if !self.journal(record) {
                    let reason = RefusalReason::JournalUnavailable;
                    self.abandon_new(now_ns, id, EventKind::Refused { reason });
                    return Step::Progress;
                }
                self.table.mark_sent(id, now_ns);
                self.push_request(now_ns, v, wire_ref, RequestKind::New(queued.order));
                self.stats.sent_reduce_only += u64::from(reduce);
                // Read at release, after the guards and the journal: the decision's whole
                // time in keel.
                self.latency
                    .decision_new
                    .record(clock.now_ns().saturating_sub(queued.enqueued_ns));
                Step::Sent
            }
            Err(SendBlock::Breaker(refused)) => {
                self.venues[v].new_lane_mut(reduce).pop();
                self.abandon_new(
                    now_ns,
                    id,
                    EventKind::BreakerOpen {
                        retry_after_ns: refused.retry_after_ns,
                    },
                );
                Step::Progress
            }
            Err(SendBlock::NotReady(_)) => Step::Wait,
        }
    }

    /// The venue's next wire reference (a skipped one, e.g. of an intent that could not be
    /// journaled, is harmless: references only need to ascend).
    fn take_wire_ref(&mut self, v: usize) -> u32 {
        let link = &mut self.venues[v];
        let wire_ref = link.next_wire_ref;
        // Saturates: at 2^32 - 1 the session refuses the order (`WireRefsExhausted`).
        link.next_wire_ref = link.next_wire_ref.saturating_add(1);
        wire_ref
    }

    /// `id` has been seen: it, and every id below it, is used.
    fn raise_id_floor(&mut self, id: ClientOrderId) {
        if let Some(floor) = self.id_floor.get_mut(usize::from(id.strategy().0)) {
            *floor = (*floor).max(id.sequence());
        }
    }

    fn below_id_floor(&self, id: ClientOrderId) -> bool {
        self.id_floor
            .get(usize::from(id.strategy().0))
            .is_some_and(|&floor| id.sequence() <= floor)
    }

    fn push_request(&mut self, now_ns: u64, v: usize, wire_ref: u32, kind: RequestKind) {
        let request = VenueRequest {
            venue: crate::order::VenueId(v as u16),
            sent_ns: now_ns,
            wire_ref,
            kind,
        };
        let pushed = self.venues[v].port.requests.push(request);
        assert!(
            pushed.is_ok(),
            "venue ring room was checked before taking budget"
        );
        self.stats.count_sent(&kind);
        if let RequestKind::Cancel { id } | RequestKind::New(NewOrder { id, .. }) = kind {
            self.table.mark_sent(id, now_ns);
        }
    }

    /// A queued new order that will never leave: closed here, its strategy told why.
    fn abandon_new(&mut self, now_ns: u64, id: ClientOrderId, kind: EventKind) {
        self.count_refusal(kind);
        let applied = self
            .apply(id, OrderEvent::Rejected, 0)
            .expect("queued order is pending new: venue reports never reach unsent orders");
        self.emit(applied.order.strategy, id, kind, now_ns);
    }

    /// A queued replace that will never leave: the replacement closes, the original reopens.
    fn abandon_replacement(
        &mut self,
        now_ns: u64,
        id: ClientOrderId,
        new_id: ClientOrderId,
        kind: EventKind,
    ) {
        self.count_refusal(kind);
        let applied = self
            .apply(new_id, OrderEvent::Rejected, 0)
            .expect("replacement is pending new");
        if self
            .table
            .get(id)
            .is_some_and(|o| o.state == OrderState::PendingReplace)
        {
            self.apply(id, OrderEvent::ReplaceRejected, 0)
                .expect("pending replace reopens");
        }
        self.emit(applied.order.strategy, new_id, kind, now_ns);
    }

    // ----- venue outcomes ----------------------------------------------------------------

    fn drain_outcomes(&mut self, now_ns: u64) -> u32 {
        let mut done = 0;
        for v in 0..self.venues.len() {
            while done < self.config.outcomes_per_poll_max {
                let Ok(outcome) = self.venues[v].port.outcomes.pop() else {
                    break;
                };
                done += 1;
                self.stats.outcomes += 1;
                // Judge by when the session saw it, but never by a stamp from the future.
                self.outcome_seq = outcome.seq;
                self.on_outcome(v, outcome.received_ns.min(now_ns), outcome.kind);
                self.outcome_seq = 0;
            }
        }
        done
    }

    fn on_outcome(&mut self, v: usize, at_ns: u64, kind: OutcomeKind) {
        match kind {
            OutcomeKind::LinkState { mode } => self.on_link_state(v, mode),
            OutcomeKind::Contradiction { id, what } => self.on_contradiction(v, at_ns, id, what),
            OutcomeKind::Accepted { id } => {
                self.on_answer(v, at_ns, id, OrderEvent::Accepted, EventKind::Accepted)
            }
            OutcomeKind::Fill { id, qty, price } => self.on_fill(v, at_ns, id, qty, price),
            OutcomeKind::Canceled { id } => {
                self.on_answer(v, at_ns, id, OrderEvent::Canceled, EventKind::Canceled)
            }
            OutcomeKind::Replaced { id, new_id } => self.on_replaced(v, at_ns, id, new_id),
            OutcomeKind::Rejected { id, reason } => self.on_rejected(v, at_ns, id, reason),
            OutcomeKind::CancelRejected { id, reason } => {
                self.on_cancel_rejected(v, at_ns, id, reason)
            }
            OutcomeKind::StillOpen { id } => {
                // Only an order in doubt learns something from "open as you knew it".
                let settles = self.table.get(id).is_some_and(|o| {
                    o.state == OrderState::Unknown
                        && matches!(
                            o.unknown_from,
                            OrderState::PendingNew | OrderState::Live | OrderState::PartiallyFilled
                        )
                });
                if settles {
                    self.on_answer(v, at_ns, id, OrderEvent::Accepted, EventKind::Accepted);
                }
            }
            OutcomeKind::NotSent { id, request } => self.on_not_sent(v, at_ns, id, request),
            OutcomeKind::ProtocolState { state } => {
                let venue = VenueId(v as u16);
                self.journal(crate::journal::JournalRecord::ProtocolState { venue, state });
            }
            OutcomeKind::UnmatchedExecution { execution } => {
                // The contradiction came just before (the link is read-only); the shares moved
                // all the same, so risk and reduce-only count them.
                if execution.symbol.0 < self.config.symbols {
                    self.guards.book_unmatched(&execution);
                    self.stats.unmatched_executions += 1;
                }
            }
            OutcomeKind::PositionBaseline { symbol, position } => {
                // Counted by the session (`ClientStats::positions_adopted`).
                let venue = VenueId(v as u16);
                self.journal(crate::journal::JournalRecord::Position {
                    venue,
                    symbol,
                    position,
                });
            }
            OutcomeKind::WireRefFloor { next } => {
                // Counted by the session (`ClientStats::wire_refs_adopted`).
                let link = &mut self.venues[v];
                link.next_wire_ref = link.next_wire_ref.max(next);
            }
            OutcomeKind::Refused { id, reason } => self.on_link_refused(at_ns, id, reason),
            OutcomeKind::Timeout { id } => {
                // Unknown, never failed: the order may be live or filled. Nothing is resent.
                // The session's own clock, not venue evidence: a timeout for an order the
                // table has already closed is moot (counted), not a contradiction.
                let applied = self.apply(id, OrderEvent::Timeout, 0);
                if let Err(error) = applied {
                    self.stats.report_errors += 1;
                    self.stats.last_report_error = Some(error);
                }
                if let Ok(applied) = applied {
                    self.guards
                        .on_venue(at_ns, VenueId(v as u16), VenueNews::Failed);
                    // Tell the strategy once; ask the venue (again, if a query timed out).
                    if applied.from != OrderState::Unknown {
                        self.emit_for(id, EventKind::Unknown, at_ns);
                    }
                    let query = CancelWork::Query {
                        id,
                        symbol: applied.order.symbol,
                        enqueued_ns: at_ns,
                    };
                    if self.venues[v].cancels.push(query).is_err() {
                        self.stats.query_lane_full += 1;
                    }
                }
            }
        }
    }

    /// The link's trading mode. A `Trading` report that crosses a `Reconcile` request still
    /// with the link predates the contradiction and is taken as `ReadOnly`.
    fn on_link_state(&mut self, v: usize, mode: LinkMode) {
        let link = &mut self.venues[v];
        link.mode = match mode {
            LinkMode::Trading if link.reconcile_pending || link.reconcile_wanted.is_some() => {
                LinkMode::ReadOnly
            }
            LinkMode::Trading => LinkMode::Trading,
            LinkMode::ReadOnly | LinkMode::Down => {
                link.reconcile_pending = false;
                mode
            }
        };
        let mode = link.mode;
        self.guards.on_link_state(VenueId(v as u16), mode);
    }

    /// A report that cannot be true: the link is read-only until reconciliation settles it,
    /// the order is in doubt (`Unknown`: its strategy is told, its symbol takes no new order
    /// while the unknown gate is on), and the operator sees the counter. Never carried on.
    fn on_contradiction(
        &mut self,
        v: usize,
        at_ns: u64,
        id: Option<ClientOrderId>,
        what: Contradiction,
    ) {
        self.stats.contradictions += 1;
        self.stats.last_contradiction = Some(what);
        self.distrust(v);
        // No order (a report for one never sent): counted, the link read-only, nobody to tell.
        let Some(id) = id else {
            return;
        };
        let open = self
            .table
            .get(id)
            .is_some_and(|o| !o.state.is_terminal() && o.sent_ns != 0);
        if open {
            // Every open state may time out into Unknown; the risk gate follows in `apply`.
            if self.apply(id, OrderEvent::Timeout, 0).is_ok() {
                self.emit_for(id, EventKind::Unknown, at_ns);
            }
        }
        // A closed order gets no event after its terminal one (its lifecycle is over for the
        // strategy); the read-only link and the counters tell the operator.
    }

    /// The link refused to write a new order or replace (read-only link, full session map):
    /// it never left; it closes with `reason` (a replace's original stands again).
    fn on_link_refused(&mut self, at_ns: u64, id: ClientOrderId, reason: RefusalReason) {
        let Some(order) = self.table.get(id).copied() else {
            return;
        };
        let refused = EventKind::Refused { reason };
        match order.linked {
            Some(original) if order.state == OrderState::PendingNew => {
                self.abandon_replacement(at_ns, original, id, refused);
            }
            _ => {
                let pending = order.state == OrderState::PendingNew
                    || (order.state == OrderState::PendingCancel
                        && order.pending_from == OrderState::PendingNew);
                if pending {
                    if let Some(applied) = self.report(id, OrderEvent::Rejected, 0) {
                        self.count_refusal(refused);
                        self.emit(applied.order.strategy, id, refused, at_ns);
                    }
                }
            }
        }
    }

    /// Venue `v`'s link is not to be trusted: no new order leaves on it until it reports
    /// `Trading` again after a reconciliation.
    fn distrust(&mut self, v: usize) {
        if self.venues[v].mode == LinkMode::Trading {
            self.venues[v].mode = LinkMode::ReadOnly;
            self.guards
                .on_link_state(VenueId(v as u16), LinkMode::ReadOnly);
        }
    }

    /// A released request the link never wrote (the session dropped first). A new order or a
    /// replace is refused `NotSynced`: sent after a reconnect it would reach the market late,
    /// at a stale price. A cancel or query goes back in the cancel lane, to leave (and be
    /// charged by the limiter again) once the link is SYNCED.
    fn on_not_sent(&mut self, v: usize, at_ns: u64, id: ClientOrderId, request: UnsentRequest) {
        self.stats.not_sent += 1;
        let refused = EventKind::Refused {
            reason: RefusalReason::NotSynced,
        };
        match request {
            UnsentRequest::New => {
                // Still pending, or pending a cancel the venue will never need.
                let pending = self.table.get(id).is_some_and(|o| {
                    o.state == OrderState::PendingNew
                        || (o.state == OrderState::PendingCancel
                            && o.pending_from == OrderState::PendingNew)
                });
                if pending {
                    if let Some(applied) = self.report(id, OrderEvent::Rejected, 0) {
                        self.count_refusal(refused);
                        self.emit(applied.order.strategy, id, refused, at_ns);
                    }
                }
            }
            UnsentRequest::Replace { replaced } => {
                let pending = self
                    .table
                    .get(id)
                    .is_some_and(|o| o.state == OrderState::PendingNew);
                if pending {
                    self.abandon_replacement(at_ns, replaced, id, refused);
                }
            }
            UnsentRequest::Cancel => {
                // An order no longer in the table needs no cancel (its close answered it).
                let Some(symbol) = self.table.get(id).map(|o| o.symbol) else {
                    return;
                };
                let work = CancelWork::One {
                    id,
                    symbol,
                    enqueued_ns: at_ns,
                };
                if self.venues[v].cancels.push(work).is_err() {
                    // Never silent: the order returns to its state before the cancel.
                    self.stats.cancel_lane_full += 1;
                    let reason = CancelRejectReason::NotApplied;
                    if let Some(applied) = self.report(id, OrderEvent::CancelRejected, 0) {
                        let kind = EventKind::CancelRejected { reason };
                        self.emit(applied.order.strategy, id, kind, at_ns);
                    }
                }
            }
            // The link went down before it read the request: its next login reconciles.
            UnsentRequest::Reconcile => self.venues[v].reconcile_pending = false,
            UnsentRequest::Query => {
                let Some(symbol) = self.table.get(id).map(|o| o.symbol) else {
                    return;
                };
                let work = CancelWork::Query {
                    id,
                    symbol,
                    enqueued_ns: at_ns,
                };
                if self.venues[v].cancels.push(work).is_err() {
                    self.stats.query_lane_full += 1;
                }
            }
        }
    }

    fn on_answer(
        &mut self,
        v: usize,
        at_ns: u64,
        id: ClientOrderId,
        event: OrderEvent,
        kind: EventKind,
    ) {
        let Some(applied) = self.report(id, event, 0) else {
            return;
        };
        // A user's cancel is never a breaker call: only first answers to new orders count.
        if applied.first_answer && event != OrderEvent::Canceled {
            self.record_success(v, at_ns, &applied.order);
        } else if event == OrderEvent::Canceled && applied.order.sent_ns != 0 {
            // `sent_ns` is the cancel's release (marked when it left).
            self.latency.cancel_ack[v].record(at_ns.saturating_sub(applied.order.sent_ns));
        }
        self.emit(applied.order.strategy, id, kind, at_ns);
    }

    fn on_fill(&mut self, v: usize, at_ns: u64, id: ClientOrderId, qty: Qty, price: Price) {
        let fill = OrderEvent::Fill { completes: false };
        let Some(applied) = self.report_priced(id, fill, qty, Some(price)) else {
            return;
        };
        self.journal(crate::journal::JournalRecord::Fill {
            id,
            qty,
            price,
            venue_seq: self.outcome_seq,
        });
        if applied.first_answer {
            self.record_success(v, at_ns, &applied.order);
        }
        let leaves = applied.order.leaves_qty();
        let kind = if leaves == 0 {
            EventKind::Filled { qty, price }
        } else {
            EventKind::PartiallyFilled { qty, price, leaves }
        };
        self.emit(applied.order.strategy, id, kind, at_ns);
    }

    fn on_replaced(&mut self, v: usize, at_ns: u64, id: ClientOrderId, new_id: ClientOrderId) {
        let Some(old) = self.report(id, OrderEvent::Replaced, 0) else {
            return;
        };
        if let Some(new) = self.report(new_id, OrderEvent::Accepted, 0) {
            self.record_success(v, at_ns, &new.order);
        }
        self.emit(
            old.order.strategy,
            id,
            EventKind::Replaced { new_id },
            at_ns,
        );
    }

    fn on_rejected(&mut self, v: usize, at_ns: u64, id: ClientOrderId, reason: RejectReason) {
        let Some(applied) = self.report(id, OrderEvent::Rejected, 0) else {
            return;
        };
        if let Some(old) = applied.order.linked {
            // A refused replacement: the original order stands again.
            if self
                .table
                .get(old)
                .is_some_and(|o| o.state == OrderState::PendingReplace)
            {
                self.report(old, OrderEvent::ReplaceRejected, 0);
            }
        }
        if reason == RejectReason::DuplicateId {
            self.stats.duplicate_id_rejects += 1;
        }
        let venue = VenueId(v as u16);
        if reason == RejectReason::VenueThrottle {
            self.guards.on_venue(at_ns, venue, VenueNews::Throttled);
        }
        if reason.is_venue_fault() {
            self.guards.on_venue(at_ns, venue, VenueNews::Failed);
        }
        self.emit(
            applied.order.strategy,
            id,
            EventKind::Rejected { reason },
            at_ns,
        );
    }

    fn on_cancel_rejected(
        &mut self,
        v: usize,
        at_ns: u64,
        id: ClientOrderId,
        reason: CancelRejectReason,
    ) {
        // The order closed (filled, rejected) and its close already answered the cancel
        // "too late": the venue's own refusal arriving after it is absorbed, never a second
        // answer. Counted.
        let answered = self
            .table
            .get(id)
            .is_some_and(|o| o.state.is_terminal() && !o.cancel_owed);
        if answered {
            self.stats.late_cancel_answers += 1;
            return;
        }
        let Some(applied) = self.report(id, OrderEvent::CancelRejected, 0) else {
            return;
        };
        if !applied.order.state.is_terminal() {
            // Refused while the order stays open: the venue's rate limit, or a lost cancel.
            self.guards
                .on_venue(at_ns, VenueId(v as u16), VenueNews::CancelRefused);
        }
        // "Too late" is a business outcome of the user's own cancel, never a link failure.
        if reason == CancelRejectReason::VenueSystem {
            self.guards
                .on_venue(at_ns, VenueId(v as u16), VenueNews::Failed);
        }
        self.emit(
            applied.order.strategy,
            id,
            EventKind::CancelRejected { reason },
            at_ns,
        );
    }

    fn record_success(&mut self, v: usize, at_ns: u64, order: &Order) {
        let latency_ns = at_ns.saturating_sub(order.sent_ns);
        self.latency.new_ack[v].record(latency_ns);
        // Restored orders have no arrival time: their end-to-end time is not known.
        if let Some(admitted_ns) = order.admitted_ns {
            self.latency.new_e2e[v].record(at_ns.saturating_sub(admitted_ns));
        }
        self.guards
            .on_venue(at_ns, VenueId(v as u16), VenueNews::Answered { latency_ns });
    }

    /// Applies a venue report; a report the table refuses is counted (and the order flagged
    /// for reconciliation by the table) and goes no further.
    fn report(&mut self, id: ClientOrderId, event: OrderEvent, qty: Qty) -> Option<Applied> {
        self.report_priced(id, event, qty, None)
    }

    /// [`Self::report`] for a report that carries a price (a fill).
    fn report_priced(
        &mut self,
        id: ClientOrderId,
        event: OrderEvent,
        qty: Qty,
        price: Option<Price>,
    ) -> Option<Applied> {
        // A venue cannot report on an order that never left keel (still in its lane): that
        // report is refused like any other the table cannot take.
        let unsent = self.table.get(id).is_some_and(|o| o.sent_ns == 0);
        let applied = if unsent {
            Err(TableError::UnknownId(id))
        } else {
            self.apply_priced(id, event, qty, price)
        };
        match applied {
            Ok(applied) => Some(applied),
            Err(error) => {
                // The session's view and the order table disagree: a contradiction. The link
                // is asked to reconcile and takes no new order meanwhile.
                self.stats.report_errors += 1;
                self.stats.last_report_error = Some(error);
                self.stats.contradictions += 1;
                self.stats.last_contradiction = Some(Contradiction::TableRefused);
                if let Some(order) = self.table.get(id) {
                    let v = usize::from(order.venue.0);
                    self.venues[v].reconcile_wanted = Some(id);
                    self.distrust(v);
                }
                None
            }
        }
    }

    /// Records a venue answer the table accepted: first acceptance, fills, closes.
    fn journal_applied(&mut self, id: ClientOrderId, event: OrderEvent, a: &Applied) {
        use crate::journal::JournalRecord as R;
        // Fills are recorded by `on_fill`, with their price; orders that never left have no
        // intent on record and need nothing.
        if matches!(event, OrderEvent::Fill { .. }) || a.order.sent_ns == 0 {
            return;
        }
        if a.first_answer && !a.to.is_terminal() {
            self.journal(R::Accepted {
                id,
                venue_seq: self.outcome_seq,
            });
        }
        if a.to.is_terminal() && !a.from.is_terminal() {
            self.journal(R::Closed {
                id,
                venue_seq: self.outcome_seq,
            });
        }
    }

    /// The one place order state changes: the table transition plus every guard it affects.
    fn apply(
        &mut self,
        id: ClientOrderId,
        event: OrderEvent,
        qty: Qty,
    ) -> Result<Applied, TableError> {
        self.apply_priced(id, event, qty, None)
    }

    /// [`Self::apply`] for a change that carries a price (a fill's, which the guards see).
    fn apply_priced(
        &mut self,
        id: ClientOrderId,
        event: OrderEvent,
        qty: Qty,
        price: Option<Price>,
    ) -> Result<Applied, TableError> {
        let applied = self.table.apply(id, event, qty)?;
        if self.journal.is_some() {
            self.journal_applied(id, event, &applied);
        }
        if applied.first_answer {
            self.quotas.release(applied.order.strategy);
        }
        self.guards.on_applied(&applied, event, qty, price);
        Ok(applied)
    }

    // ----- events ------------------------------------------------------------------------

    fn emit_for(&mut self, id: ClientOrderId, kind: EventKind, at_ns: u64) {
        if let Some(order) = self.table.get(id) {
            let strategy = order.strategy;
            self.emit(strategy, id, kind, at_ns);
        }
    }

    /// Sends `kind` to the strategy. Keeps "every command answered once" for cancels: an
    /// order that closes in any other way than `Canceled` (filled, rejected, refused) while
    /// its strategy's cancel is unanswered can no longer be canceled, so the cancel is
    /// answered `CancelRejected { TooLateToCancel }` right after the close — whether the
    /// cancel still waits in its lane, is on the wire, or was lost with a dropped connection
    /// (then no venue answer would ever come).
    fn emit(&mut self, strategy: StrategyId, id: ClientOrderId, kind: EventKind, at_ns: u64) {
        self.push_event(strategy, id, kind, at_ns);
        match kind {
            EventKind::Canceled | EventKind::CancelRejected { .. } => {
                self.table.take_cancel_owed(id);
            }
            _ => {
                let closed = self.table.get(id).is_some_and(|o| o.state.is_terminal());
                if closed && self.table.take_cancel_owed(id) {
                    self.stats.moot_cancels += 1;
                    let reason = CancelRejectReason::TooLateToCancel;
                    let answer = EventKind::CancelRejected { reason };
                    self.push_event(strategy, id, answer, at_ns);
                }
            }
        }
    }

    fn push_event(&mut self, strategy: StrategyId, id: ClientOrderId, kind: EventKind, at_ns: u64) {
        let port = &mut self.strategies[usize::from(strategy.0)];
        if port.events.push(Event { id, kind, at_ns }).is_err() {
            // The order table keeps the truth; the strategy is behind and is told so by the
            // counter. Never a silent loss, never a wait on a slow consumer.
            self.stats.events_lost += 1;
        } else {
            self.stats.events += 1;
        }
    }

    fn count_refusal(&mut self, kind: EventKind) {
        self.stats.count_refusal(kind);
    }
}

/// What a mass cancel does with one order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MassCancelStep {
    /// Out of scope, or covered another way (already canceling; covered via its replacement).
    Skip,
    /// In scope but `Unknown`: counted; resolve it first (status query), then cancel.
    SkipUnknown,
    /// Still in the new-order lane: closed here.
    Local,
    /// Needs a cancel on the wire.
    Wire,
}

/// What one serve step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A request went to the venue ring.
    Sent,
    /// Lane work done without a send (expired, moot, closed locally).
    Progress,
    /// Rate budget short: the head waits.
    Wait,
    /// Nothing to do.
    Idle,
}

/// Why no new order (or replace) may leave on a link in `mode`, if it may not.
fn new_order_block(mode: LinkMode) -> Option<RefusalReason> {
    match mode {
        LinkMode::Trading => None,
        LinkMode::ReadOnly => Some(RefusalReason::LinkReadOnly),
        LinkMode::Down => Some(RefusalReason::NotSynced),
    }
}

/// How the guards release a new order or replace: a reduce-only one may use the reduce reserve.
fn release_of(reduce_only: bool) -> Release {
    if reduce_only {
        Release::Reduce
    } else {
        Release::Call
    }
}

fn lane_full_reason(full: NewLaneFull) -> RefusalReason {
    match full {
        NewLaneFull::Total | NewLaneFull::Symbol => RefusalReason::NewLaneFull,
    }
}

fn order_as_new(order: &Order) -> NewOrder {
    NewOrder {
        id: order.id,
        venue: order.venue,
        symbol: order.symbol,
        side: order.side,
        price: order.price,
        qty: order.qty,
        tif: order.tif,
        reduce_only: order.reduce_only,
    }
}
