//! The engine's metrics: which counters, gauges and histograms the counters file holds (names
//! and labels as docs/observability.md lists them), and the two loops' publications into it —
//! the dispatcher loop (region 0) and the executor loop (region 1), each at most once per
//! [`PUBLISH_INTERVAL_NS`] of loop time, with plain stores (no lock, no allocation, no system
//! call).

use super::file::{CountersError, Layout, MetricKind, RegionWriter, Slot};
use crate::dispatch::{DispatchStats, Dispatcher, REFUSAL_REASONS};
use crate::guard::breaker::BreakerState;
use crate::order::{LinkMode, StrategyId, SymbolId, VenueId};

/// A loop publishes its values at most this often.
pub const PUBLISH_INTERVAL_NS: u64 = 1_000_000;
/// Per-symbol metrics are kept for at most this many symbols (the first, in `symbols` order).
pub const SYMBOLS_LISTED_MAX: usize = 1_024;
/// Bytes of a name kept in a label (longer names are cut).
const LABEL_NAME_MAX: usize = 40;

/// The dispatcher loop's region.
pub const REGION_DISPATCHER: u32 = 0;
/// The executor loop's region.
pub const REGION_EXECUTOR: u32 = 1;

/// Names for labels.
#[derive(Debug, Clone, Default)]
pub struct MetricNames {
    /// Venues, in `VenueId` order.
    pub venues: Vec<String>,
    /// Symbols, in `SymbolId` order.
    pub symbols: Vec<String>,
    /// Strategies configured.
    pub strategies: u16,
    /// Market-data feeds configured (`[[feed]]`), and which take REST snapshots.
    pub feeds: Vec<bool>,
}

/// `key="value"`, the value cut to a label's room and escaped as Prometheus wants.
pub fn label(key: &str, value: &str) -> String {
    let mut v = String::new();
    for c in value.chars() {
        if v.len() >= LABEL_NAME_MAX {
            break;
        }
        match c {
            '\\' => v.push_str("\\\\"),
            '"' => v.push_str("\\\""),
            '\n' => v.push_str("\\n"),
            c if c.is_control() => v.push('?'),
            c => v.push(c),
        }
    }
    format!("{key}=\"{v}\"")
}

#[derive(Debug)]
struct FrontVenue {
    mode: Slot,
    breaker_state: Slot,
    breaker_failure_permille: Slot,
    breaker_opened: Slot,
    breaker_refused: Slot,
    lanes: [Slot; 4],
    in_flight: Slot,
    new_ack: Slot,
    new_e2e: Slot,
    cancel_ack: Slot,
    venue_throttled: Slot,
    cancel_refused: Slot,
    new_rate_permille: Slot,
    new_admitted: Slot,
    rate_per_second: Slot,
}

#[derive(Debug)]
struct StrategySlots {
    disabled: Slot,
    commands: Slot,
    malformed: Slot,
    attached: Slot,
    lost: Slot,
    broken: Slot,
    in_flight: Slot,
    quota_refused: [Slot; 2],
}

#[derive(Debug)]
struct SymbolSlots {
    in_flight: Slot,
    unknown: Slot,
    shed: Slot,
    control_shed: Slot,
}

/// Reads one counter out of the dispatcher's stats.
type StatOf = fn(&DispatchStats) -> u64;

/// Where the dispatcher loop writes.
#[derive(Debug)]
pub struct FrontSlots {
    passes: Slot,
    commands: Slot,
    events: Slot,
    events_lost: Slot,
    sent: [Slot; 4],
    refused: Vec<Slot>,
    counters: Vec<(Slot, StatOf)>,
    open_orders: Slot,
    unknown_orders: Slot,
    kill_switch: Slot,
    decision_new: Slot,
    decision_cancel: Slot,
    venues: Vec<FrontVenue>,
    strategies: Vec<StrategySlots>,
    symbols: Vec<SymbolSlots>,
}

#[derive(Debug)]
struct ExecVenue {
    state: Slot,
    connects: Slot,
    synced: Slot,
    connect_failures: Slot,
    heartbeat_timeouts: Slot,
    decode_errors: Slot,
    timeouts: Slot,
    reconciliations: Slot,
    unreconciled: Slot,
    contradictions: Slot,
    position_mismatches: Slot,
    positions_differ: Slot,
    requests_sent: Slot,
    marked_unknown: Slot,
    wire_dropped: Slot,
    operator_reconciles: Slot,
    reconcile_timeouts: Slot,
    reconcile_stuck: Slot,
    loop_stalls: Slot,
    unmatched_executions: Slot,
}

#[derive(Debug)]
struct FeedSlots {
    synced: Slot,
    snapshots: Slot,
    deltas: Slot,
    gaps: Slot,
    resyncs: Slot,
    wrong_symbol: Slot,
    disconnects: Slot,
    rest: Option<RestSlots>,
}

/// A REST gate's figures (docs/rest.md, "Tuning the gate").
#[derive(Debug)]
struct RestSlots {
    wait: Slot,
    granted: Slot,
    timeouts: Slot,
    throttled: Slot,
    banned: Slot,
    retries: Slot,
    failures: Slot,
    rate_permille: Slot,
}

/// Where the executor loop writes.
#[derive(Debug)]
pub struct ExecSlots {
    passes: Slot,
    poll_errors: Slot,
    venues: Vec<ExecVenue>,
    feeds: Vec<FeedSlots>,
}

/// Builds the engine's layout.
pub fn layout(names: &MetricNames) -> Result<(Layout, FrontSlots, ExecSlots), CountersError> {
    use MetricKind::{Counter, Gauge, Histogram};
    let mut l = Layout::default();
    let d = REGION_DISPATCHER;
    let mut front = FrontSlots {
        passes: l.add(d, Counter, "keel_dispatcher_passes_total", "")?,
        commands: l.add(d, Counter, "keel_commands_total", "")?,
        events: l.add(d, Counter, "keel_events_total", "")?,
        events_lost: l.add(d, Counter, "keel_events_lost_total", "")?,
        sent: [
            l.add(d, Counter, "keel_sent_total", "kind=\"new\"")?,
            l.add(d, Counter, "keel_sent_total", "kind=\"cancel\"")?,
            l.add(d, Counter, "keel_sent_total", "kind=\"replace\"")?,
            l.add(d, Counter, "keel_sent_total", "kind=\"query\"")?,
        ],
        refused: Vec::with_capacity(REFUSAL_REASONS),
        counters: Vec::new(),
        open_orders: l.add(d, Gauge, "keel_open_orders", "")?,
        unknown_orders: l.add(d, Gauge, "keel_unknown_orders", "")?,
        kill_switch: l.add(d, Gauge, "keel_kill_switch", "")?,
        decision_new: l.add(d, Histogram, "keel_decision_seconds", "class=\"new\"")?,
        decision_cancel: l.add(d, Histogram, "keel_decision_seconds", "class=\"cancel\"")?,
        venues: Vec::new(),
        strategies: Vec::new(),
        symbols: Vec::new(),
    };
    for (reason, _) in crate::ipc::codec::REFUSAL_CODES {
        let labels = label("reason", crate::log::refusal_name(reason));
        front
            .refused
            .push(l.add(d, Counter, "keel_refused_total", &labels)?);
    }
    let counters: [(&str, StatOf); 13] = [
        ("keel_shed_total", |s| s.shed),
        ("keel_throttled_total", |s| s.throttled),
        ("keel_breaker_refused_total", |s| s.breaker_refused),
        ("keel_cancel_lane_full_total", |s| s.cancel_lane_full),
        ("keel_journal_errors_total", |s| s.journal_errors),
        ("keel_contradictions_total", |s| s.contradictions),
        ("keel_report_errors_total", |s| s.report_errors),
        ("keel_duplicate_id_rejects_total", |s| {
            s.duplicate_id_rejects
        }),
        ("keel_executor_stalls_total", |s| s.executor_stalls),
        ("keel_mass_cancel_skipped_total", |s| s.mass_cancel_skipped),
        ("keel_control_commands_total", |s| s.control_commands),
        ("keel_control_refused_total", |s| s.control_refused),
        ("keel_reduce_only_sent_total", |s| s.sent_reduce_only),
    ];
    for (name, get) in counters {
        front.counters.push((l.add(d, Counter, name, "")?, get));
    }
    for v in &names.venues {
        let venue = label("venue", v);
        let lane = |kind: &str| format!("{venue},lane=\"{kind}\"");
        front.venues.push(FrontVenue {
            mode: l.add(d, Gauge, "keel_venue_mode", &venue)?,
            breaker_state: l.add(d, Gauge, "keel_breaker_state", &venue)?,
            breaker_failure_permille: l.add(d, Gauge, "keel_breaker_failure_permille", &venue)?,
            breaker_opened: l.add(d, Counter, "keel_breaker_opened_total", &venue)?,
            breaker_refused: l.add(d, Counter, "keel_breaker_calls_refused_total", &venue)?,
            lanes: [
                l.add(d, Gauge, "keel_lane_depth", &lane("cancel"))?,
                l.add(d, Gauge, "keel_lane_depth", &lane("reduce"))?,
                l.add(d, Gauge, "keel_lane_depth", &lane("replace"))?,
                l.add(d, Gauge, "keel_lane_depth", &lane("new"))?,
            ],
            in_flight: l.add(d, Gauge, "keel_venue_in_flight", &venue)?,
            new_ack: l.add(d, Histogram, "keel_new_order_ack_seconds", &venue)?,
            new_e2e: l.add(d, Histogram, "keel_order_e2e_seconds", &venue)?,
            cancel_ack: l.add(d, Histogram, "keel_cancel_ack_seconds", &venue)?,
            venue_throttled: l.add(d, Counter, "keel_venue_throttle_rejects_total", &venue)?,
            cancel_refused: l.add(d, Counter, "keel_venue_cancel_refused_total", &venue)?,
            new_rate_permille: l.add(d, Gauge, "keel_control_new_rate_permille", &venue)?,
            new_admitted: l.add(d, Counter, "keel_limiter_new_weight_total", &venue)?,
            rate_per_second: l.add(d, Gauge, "keel_limiter_weight_per_second", &venue)?,
        });
    }
    for s in 0..names.strategies {
        let strategy = format!("strategy=\"{s}\"");
        front.strategies.push(StrategySlots {
            disabled: l.add(d, Gauge, "keel_strategy_disabled", &strategy)?,
            commands: l.add(d, Counter, "keel_strategy_commands_total", &strategy)?,
            malformed: l.add(d, Counter, "keel_strategy_malformed_total", &strategy)?,
            attached: l.add(d, Counter, "keel_strategy_attached_total", &strategy)?,
            lost: l.add(d, Counter, "keel_strategy_lost_total", &strategy)?,
            broken: l.add(d, Gauge, "keel_strategy_broken", &strategy)?,
            in_flight: l.add(d, Gauge, "keel_strategy_in_flight", &strategy)?,
            quota_refused: [
                l.add(
                    d,
                    Counter,
                    "keel_strategy_quota_refused_total",
                    &format!("{strategy},quota=\"rate\""),
                )?,
                l.add(
                    d,
                    Counter,
                    "keel_strategy_quota_refused_total",
                    &format!("{strategy},quota=\"in_flight\""),
                )?,
            ],
        });
    }
    for s in names.symbols.iter().take(SYMBOLS_LISTED_MAX) {
        let symbol = label("symbol", s);
        front.symbols.push(SymbolSlots {
            in_flight: l.add(d, Gauge, "keel_symbol_in_flight", &symbol)?,
            unknown: l.add(d, Gauge, "keel_symbol_unknown_orders", &symbol)?,
            shed: l.add(d, Gauge, "keel_symbol_shed", &symbol)?,
            control_shed: l.add(d, Gauge, "keel_symbol_control_shed", &symbol)?,
        });
    }
    let e = REGION_EXECUTOR;
    let mut exec = ExecSlots {
        passes: l.add(e, Counter, "keel_executor_passes_total", "")?,
        poll_errors: l.add(e, Counter, "keel_transport_poll_errors_total", "")?,
        venues: Vec::new(),
        feeds: Vec::new(),
    };
    for (i, rest) in names.feeds.iter().enumerate() {
        let feed = format!("feed=\"{i}\"");
        let status = |code: &str| format!("{feed},status=\"{code}\"");
        exec.feeds.push(FeedSlots {
            synced: l.add(e, Gauge, "keel_feed_synced", &feed)?,
            snapshots: l.add(e, Counter, "keel_feed_snapshots_total", &feed)?,
            deltas: l.add(e, Counter, "keel_feed_deltas_total", &feed)?,
            gaps: l.add(e, Counter, "keel_feed_gaps_total", &feed)?,
            resyncs: l.add(e, Counter, "keel_feed_resyncs_total", &feed)?,
            wrong_symbol: l.add(e, Counter, "keel_feed_wrong_symbol_total", &feed)?,
            disconnects: l.add(e, Counter, "keel_feed_disconnects_total", &feed)?,
            rest: if *rest {
                Some(RestSlots {
                    wait: l.add(e, Histogram, "keel_rest_acquire_wait_seconds", &feed)?,
                    granted: l.add(e, Counter, "keel_rest_granted_total", &feed)?,
                    timeouts: l.add(e, Counter, "keel_rest_acquire_timeouts_total", &feed)?,
                    throttled: l.add(e, Counter, "keel_rest_responses_total", &status("429"))?,
                    banned: l.add(e, Counter, "keel_rest_responses_total", &status("418"))?,
                    retries: l.add(e, Counter, "keel_rest_retries_total", &feed)?,
                    failures: l.add(e, Counter, "keel_rest_failures_total", &feed)?,
                    rate_permille: l.add(e, Gauge, "keel_rest_rate_permille", &feed)?,
                })
            } else {
                None
            },
        });
    }
    for v in &names.venues {
        let venue = label("venue", v);
        exec.venues.push(ExecVenue {
            state: l.add(e, Gauge, "keel_link_state", &venue)?,
            connects: l.add(e, Counter, "keel_link_connects_total", &venue)?,
            synced: l.add(e, Counter, "keel_link_synced_total", &venue)?,
            connect_failures: l.add(e, Counter, "keel_link_connect_failures_total", &venue)?,
            heartbeat_timeouts: l.add(e, Counter, "keel_link_heartbeat_timeouts_total", &venue)?,
            decode_errors: l.add(e, Counter, "keel_link_decode_errors_total", &venue)?,
            timeouts: l.add(e, Counter, "keel_link_ack_timeouts_total", &venue)?,
            reconciliations: l.add(e, Counter, "keel_link_reconciliations_total", &venue)?,
            unreconciled: l.add(e, Gauge, "keel_link_unreconciled", &venue)?,
            contradictions: l.add(e, Counter, "keel_link_contradictions_total", &venue)?,
            position_mismatches: l.add(
                e,
                Counter,
                "keel_link_position_mismatches_total",
                &venue,
            )?,
            positions_differ: l.add(e, Gauge, "keel_link_position_mismatches", &venue)?,
            requests_sent: l.add(e, Counter, "keel_link_requests_sent_total", &venue)?,
            marked_unknown: l.add(e, Counter, "keel_link_marked_unknown_total", &venue)?,
            wire_dropped: l.add(e, Counter, "keel_wire_log_dropped_total", &venue)?,
            operator_reconciles: l.add(
                e,
                Counter,
                "keel_link_operator_reconciles_total",
                &venue,
            )?,
            reconcile_timeouts: l.add(e, Counter, "keel_link_reconcile_timeouts_total", &venue)?,
            reconcile_stuck: l.add(e, Counter, "keel_link_reconcile_stuck_total", &venue)?,
            loop_stalls: l.add(e, Counter, "keel_link_loop_stalls_total", &venue)?,
            unmatched_executions: l.add(
                e,
                Counter,
                "keel_link_unmatched_executions_total",
                &venue,
            )?,
        });
    }
    Ok((l, front, exec))
}

/// `LinkState` as the gauge's value (docs/observability.md).
pub fn link_state_code(s: crate::session::machine::LinkState) -> u64 {
    use crate::session::machine::LinkState::*;
    match s {
        Disconnected => 0,
        Connecting => 1,
        Connected => 2,
        Reconciling => 3,
        Synced => 4,
        ReadOnly => 5,
    }
}

/// The `LinkState` a `keel_link_state` value stands for (`None`: not a state).
pub fn link_state_of(code: u64) -> Option<crate::session::machine::LinkState> {
    use crate::session::machine::LinkState::*;
    [
        Disconnected,
        Connecting,
        Connected,
        Reconciling,
        Synced,
        ReadOnly,
    ]
    .into_iter()
    .find(|&s| link_state_code(s) == code)
}

/// A `keel_link_state` value as the docs spell it (`?` for a value that is not a state).
pub fn link_state_text(code: u64) -> &'static str {
    link_state_of(code).map_or("?", crate::session::machine::LinkState::name)
}

/// A `keel_breaker_state` value as the docs spell it.
pub fn breaker_text(code: u64) -> &'static str {
    match code {
        0 => "closed",
        1 => "half-open",
        _ => "OPEN",
    }
}

/// The counters file's engine state word as the docs spell it.
pub fn engine_state_text(code: u64) -> &'static str {
    match code {
        1 => "starting",
        2 => "running",
        3 => "stopped",
        _ => "unknown",
    }
}

/// The value of label `key` in a labels string (`venue="sim",lane="new"`).
pub fn label_value<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// The dispatcher loop's publisher.
#[derive(Debug)]
pub struct FrontMetrics {
    writer: RegionWriter,
    slots: FrontSlots,
    next_ns: u64,
}

/// A shared-memory strategy's counters, as the dispatcher loop's bridges know them.
#[derive(Debug, Clone, Copy, Default)]
pub struct StrategyCounters {
    /// Commands read.
    pub commands: u64,
    /// Records refused.
    pub malformed: u64,
    /// Times attached.
    pub attached: u64,
    /// Times lost.
    pub lost: u64,
    /// Channel broken (0 or 1).
    pub broken: u64,
}

impl FrontMetrics {
    /// A publisher into `writer` with `slots`.
    pub fn new(writer: RegionWriter, slots: FrontSlots) -> Self {
        Self {
            writer,
            slots,
            next_ns: 0,
        }
    }

    /// Publishes if the interval has passed (or `force`); `strategy` gives a strategy's
    /// shared-memory counters (`None`: in process).
    pub fn publish(
        &mut self,
        now_ns: u64,
        force: bool,
        passes: u64,
        d: &Dispatcher,
        strategy: impl Fn(StrategyId) -> Option<StrategyCounters>,
    ) {
        if !force && now_ns < self.next_ns {
            return;
        }
        self.next_ns = now_ns.saturating_add(PUBLISH_INTERVAL_NS);
        let (w, s) = (&mut self.writer, &self.slots);
        let stats = d.stats();
        w.begin();
        w.set(s.passes, passes);
        w.set(s.commands, stats.commands);
        w.set(s.events, stats.events);
        w.set(s.events_lost, stats.events_lost);
        let sent = [
            stats.sent_new,
            stats.sent_cancel,
            stats.sent_replace,
            stats.sent_query,
        ];
        for (slot, v) in s.sent.iter().zip(sent) {
            w.set(*slot, v);
        }
        for (slot, v) in s.refused.iter().zip(stats.refused) {
            w.set(*slot, v);
        }
        for (slot, get) in &s.counters {
            w.set(*slot, get(stats));
        }
        w.set(s.open_orders, u64::from(d.table().open_count()));
        w.set(s.kill_switch, u64::from(d.kill_switch()));
        let lat = d.latency();
        w.set_histogram(s.decision_new, &lat.decision_new);
        w.set_histogram(s.decision_cancel, &lat.decision_cancel);
        let guards = d.guards();
        for (v, slots) in s.venues.iter().enumerate() {
            let venue = VenueId(v as u16);
            let mode = match d.link_mode(venue) {
                LinkMode::Down => 0,
                LinkMode::ReadOnly => 1,
                LinkMode::Trading => 2,
            };
            w.set(slots.mode, mode);
            let breaker = &guards.venues[v].breaker;
            let state = match breaker.peek_state() {
                BreakerState::Closed => 0,
                BreakerState::HalfOpen { .. } => 1,
                BreakerState::Open { .. } => 2,
            };
            w.set(slots.breaker_state, state);
            w.set(slots.breaker_failure_permille, breaker.failure_permille());
            w.set(slots.breaker_opened, breaker.stats().opened);
            w.set(slots.breaker_refused, breaker.stats().refused);
            let l = d.lane_depths(venue).unwrap_or_default();
            for (slot, depth) in slots
                .lanes
                .iter()
                .zip([l.cancel, l.reduce, l.replace, l.new])
            {
                w.set(*slot, u64::from(depth));
            }
            w.set(
                slots.in_flight,
                u64::from(guards.bulkhead.venue_in_flight(venue)),
            );
            w.set_histogram(slots.new_ack, &lat.new_ack[v]);
            w.set_histogram(slots.new_e2e, &lat.new_e2e[v]);
            w.set_histogram(slots.cancel_ack, &lat.cancel_ack[v]);
            w.set(slots.venue_throttled, d.venue_throttle_rejects(venue));
            w.set(slots.cancel_refused, d.venue_cancel_refusals(venue));
            w.set(
                slots.new_rate_permille,
                u64::from(d.new_order_permille(venue)),
            );
            let (admitted, per_second) = d.new_order_weight(venue);
            w.set(slots.new_admitted, admitted);
            w.set(slots.rate_per_second, per_second);
        }
        for (i, slots) in s.strategies.iter().enumerate() {
            let id = StrategyId(i as u16);
            w.set(slots.disabled, u64::from(d.strategy_disabled(id)));
            let c = strategy(id).unwrap_or_default();
            w.set(slots.commands, c.commands);
            w.set(slots.malformed, c.malformed);
            w.set(slots.attached, c.attached);
            w.set(slots.lost, c.lost);
            w.set(slots.broken, c.broken);
            w.set(slots.in_flight, u64::from(d.quotas().in_flight(id)));
            let q = d.quotas().stats(id);
            w.set(slots.quota_refused[0], q.rate_refused);
            w.set(slots.quota_refused[1], q.in_flight_refused);
        }
        let mut unknown = 0;
        for i in 0..d.symbol_count() as usize {
            let symbol = SymbolId(i as u16);
            let u = guards.risk.unknown_orders(symbol);
            unknown += u64::from(u);
            if let Some(slots) = s.symbols.get(i) {
                w.set(
                    slots.in_flight,
                    u64::from(guards.bulkhead.symbol_in_flight(symbol)),
                );
                w.set(slots.unknown, u64::from(u));
                w.set(slots.shed, u64::from(d.symbol_shed(symbol)));
                w.set(
                    slots.control_shed,
                    u64::from(d.symbol_shed_by_control(symbol)),
                );
            }
        }
        w.set(s.unknown_orders, unknown);
        w.end(now_ns);
    }
}

/// The executor loop's publisher.
#[derive(Debug)]
pub struct ExecMetrics {
    writer: RegionWriter,
    slots: ExecSlots,
    next_ns: u64,
}

impl ExecMetrics {
    /// A publisher into `writer` with `slots`.
    pub fn new(writer: RegionWriter, slots: ExecSlots) -> Self {
        Self {
            writer,
            slots,
            next_ns: 0,
        }
    }

    /// Publishes if the interval has passed (or `force`).
    pub fn publish(
        &mut self,
        now_ns: u64,
        force: bool,
        passes: u64,
        poll_errors: u64,
        links: &[crate::session::EngineLink],
        feeds: &mut [crate::feed::handler::FeedHandler],
    ) {
        if !force && now_ns < self.next_ns {
            return;
        }
        self.next_ns = now_ns.saturating_add(PUBLISH_INTERVAL_NS);
        let (w, s) = (&mut self.writer, &self.slots);
        w.begin();
        w.set(s.passes, passes);
        w.set(s.poll_errors, poll_errors);
        for (link, slots) in links.iter().zip(&s.venues) {
            use crate::session::protocol::VenueProtocol;
            let stats = link.stats();
            let session = link.session_stats();
            let client = link.client().stats();
            w.set(slots.state, link_state_code(link.state()));
            w.set(slots.connects, session.connects);
            w.set(slots.synced, session.synced);
            w.set(slots.connect_failures, stats.connect_failures);
            w.set(slots.heartbeat_timeouts, stats.heartbeat_timeouts);
            w.set(slots.decode_errors, stats.decode_errors);
            w.set(slots.timeouts, client.timeouts);
            w.set(slots.reconciliations, client.reconciliations);
            w.set(
                slots.unreconciled,
                u64::from(client.last_reconciliation.unresolved()),
            );
            w.set(slots.contradictions, client.contradictions);
            w.set(slots.position_mismatches, client.position_mismatches);
            w.set(
                slots.positions_differ,
                u64::from(client.last_reconciliation.position_mismatches),
            );
            w.set(slots.requests_sent, stats.requests_sent);
            w.set(slots.marked_unknown, stats.marked_unknown);
            w.set(slots.wire_dropped, link.wire_dropped());
            w.set(slots.operator_reconciles, session.operator_reconciles);
            w.set(slots.reconcile_timeouts, session.reconcile_timeouts);
            w.set(slots.reconcile_stuck, session.reconcile_stuck);
            w.set(slots.loop_stalls, stats.loop_stalls);
            w.set(slots.unmatched_executions, client.unmatched_executions);
        }
        for (feed, slots) in feeds.iter_mut().zip(&s.feeds) {
            let f = feed.stats();
            w.set(slots.synced, u64::from(feed.synced()));
            w.set(slots.snapshots, f.snapshots);
            w.set(slots.deltas, f.deltas);
            w.set(slots.gaps, f.gaps);
            w.set(slots.resyncs, f.resyncs);
            w.set(slots.wrong_symbol, f.wrong_symbol);
            w.set(slots.disconnects, f.disconnects);
            let Some(r) = &slots.rest else { continue };
            let rate = feed.rest_rate_permille(now_ns).unwrap_or(1_000);
            if let Some((session, gate)) = feed.rest_stats() {
                w.set_histogram(r.wait, &gate.wait);
                w.set(r.granted, gate.granted);
                w.set(r.timeouts, gate.timed_out);
                w.set(r.throttled, gate.throttled_429);
                w.set(r.banned, gate.banned_418);
                w.set(r.retries, gate.retries);
                w.set(r.failures, session.failed);
                w.set(r.rate_permille, rate);
            }
        }
        w.end(now_ns);
    }
}
