//! `keel demo`: the simulated venue on loopback, the engine (dispatcher, venue link, io_uring
//! transport) and a synthetic strategy in one pinned loop (the `inline` topology), driven
//! through calm trading, a cancel storm, a venue disconnect, reconnection and reconciliation,
//! and calm again. It measures order and cancel latency per phase, checks the invariants
//! throughout, and prints a report; it exits 1 if any invariant was violated.

use std::collections::HashMap;
use std::io::Write;

use hdrhistogram::Histogram;

use crate::flow::FlowConfig;
use crate::md_server::MdConfig;
use crate::server::{VenueConfig, VenueServer};
use keel::clock::{Clock, TscClock};
use keel::dispatch::{Dispatcher, DispatcherConfig, StrategyHandle};
use keel::engine::{EngineBuilder, EngineConfig, EngineLoop, LoopConfig};
use keel::feed::handler::{FeedConfig, FeedHandler};
use keel::guard::limiter::WindowLimit;
use keel::net::{ReactorConfig, SocketTransport, TransportKind};
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, OrderState, Price, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};
use keel::proto::soupbin::alpha;
use keel::rng::{Rng64, SplitMix64};
use keel::runtime::{pin_or_warn, IdlePolicy, Idler};
use keel::session::machine::LinkState;
use keel::session::EngineLink;
use keel::session::{ProtocolConfig, VenueLinkConfig, VenueProtocol};

const MS: u64 = 1_000_000;
const SYMBOLS: [&str; 4] = ["AAPL", "MSFT", "AMZN", "NVDA"];
/// The demo's rate limit: 10,000 messages per second, bursts of 1,000.
const RATE: WindowLimit = WindowLimit {
    window_ns: 1_000 * MS,
    limit_weight: 10_000,
    burst_weight: 1_000,
};

/// Which story the demo tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Calm → a storm over the rate limit (15,000 messages/s, 60% cancels, against 10,000/s)
    /// through keel's priority lanes → the same storm through the FIFO baseline (the same
    /// dispatcher serving its queues in arrival order) → venue disconnect → reconnect and
    /// reconciliation → calm. The report sets keel's cancel p99 next to the baseline's.
    Storm,
    /// Calm → the venue fails every new order with a system error (and answers slowly): the
    /// breaker opens, new orders are refused at once while cancels still flow, the venue
    /// recovers, probes close the breaker → calm.
    Incident,
    /// Calm → the venue drops the session and refuses every connection for a while: the link
    /// retries with exponential backoff and equal jitter, reconnects, replays, reconciles →
    /// calm.
    ReconnectStorm,
    /// Calm → the venue's capacity drops 4× (its rate limit lowered through its control port)
    /// under static limits → calm → the same drop with the adaptive controller on. The report
    /// compares throttle rejects and cancel latency.
    CapacityDrop,
    /// Calm trading only.
    Calm,
}

impl std::fmt::Display for Scenario {
    /// The name `--scenario` takes (`storm`, `incident`, `reconnect-storm`, `calm`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum;
        match self.to_possible_value() {
            Some(value) => f.write_str(value.get_name()),
            None => unreachable!("every scenario is a --scenario value"),
        }
    }
}

/// `keel demo` options.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// The scenario.
    #[arg(long, value_enum, default_value = "storm")]
    pub scenario: Scenario,
    /// Shorten every phase to a fifth (for the test suite).
    #[arg(long)]
    pub quick: bool,
    /// Core to pin the loop to (warns and runs unpinned if the machine lacks it).
    #[arg(long, default_value_t = 1)]
    pub core: usize,
    /// Idle policy of the loop: `spin` (lowest latency, burns the core) or `backoff`
    /// (spin, yield, then sleep up to 1 ms: for shared machines and test suites).
    #[arg(long, value_enum, default_value = "spin")]
    pub idle: Idle,
    /// Write the latency histograms (percentile tables) to this file.
    #[arg(long)]
    pub histograms: Option<std::path::PathBuf>,
    /// Render the latency percentile curves (cancels and new orders, calm and storm) as an
    /// SVG image to this file.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// Journal every order to this directory (created; must not hold another run's journal).
    #[arg(long)]
    pub journal: Option<std::path::PathBuf>,
    /// Record every message to and from the venue in DIR/wire.log (created; read it with
    /// `keel log dump DIR/wire.log`).
    #[arg(long)]
    pub wire_log: Option<std::path::PathBuf>,
    /// Serve the live page (and /metrics, /health) at ADDR while the demo runs, e.g.
    /// 127.0.0.1:9464 (port 0 picks a free one); the URL is printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub dashboard: Option<std::net::SocketAddr>,
    /// Socket transport of the engine and the simulated venue: `io_uring` or `epoll`. When
    /// io_uring cannot be set up, the demo says why on stderr and runs on epoll.
    #[arg(long, default_value_t = TransportKind::IoUring)]
    pub transport: TransportKind,
    /// The order-entry protocol between the engine and the simulated venue: `ouch` (OUCH
    /// 5.0 over SoupBinTCP) or `fix44` (FIX 4.4, the venue's FIX acceptor on the same
    /// exchange).
    #[arg(long, value_enum, default_value = "ouch")]
    pub protocol: DemoProtocol,
}

/// `--protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoProtocol {
    /// OUCH 5.0 over SoupBinTCP.
    Ouch,
    /// FIX 4.4 (`fix` too).
    #[value(alias = "fix")]
    Fix44,
}

/// `--idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Idle {
    /// Busy-spin.
    Spin,
    /// Back off to sleeping.
    Backoff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Calm,
    Storm,
    Disconnect,
    Incident,
    Outage,
    Recovery,
    Drain,
    /// The storm again, through the FIFO baseline.
    StormFifo,
    /// Orders rest again before the next stress (not measured).
    Rewarm,
    /// The venue's capacity ÷4, static limits.
    DropStatic,
    /// The venue's capacity ÷4, the adaptive controller on.
    DropControlled,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Warmup => "warm-up",
            Phase::Calm => "calm",
            Phase::Storm => "storm",
            Phase::Disconnect => "disconnect",
            Phase::Incident => "incident",
            Phase::Outage => "outage",
            Phase::Recovery => "calm after",
            Phase::Drain => "drain",
            Phase::StormFifo => "storm FIFO",
            Phase::Rewarm => "re-warm",
            Phase::DropStatic => "drop static",
            Phase::DropControlled => "drop ctrl",
        }
    }

    /// The latency bucket: `None` for unmeasured warm-ups, 0 calm, 1 keel under stress, 2 the
    /// baseline under the same stress.
    fn bucket(self) -> Option<usize> {
        match self {
            Phase::Warmup | Phase::Rewarm => None,
            Phase::Storm | Phase::Incident | Phase::Outage | Phase::DropControlled => Some(1),
            Phase::StormFifo | Phase::DropStatic => Some(2),
            _ => Some(0),
        }
    }
}

/// Per latency bucket (calm, keel under stress, the baseline under it): what the strategy
/// was told.
#[derive(Debug, Default, Clone, Copy)]
struct Told {
    /// New orders accepted.
    accepted: u64,
    /// New orders the venue rejected for rate (its throttle).
    venue_throttled: u64,
    /// Cancels the venue refused while their orders stayed open (each sent again 5 ms later).
    cancel_refused: u64,
    /// New orders keel held back (throttled, shed, refused).
    held: u64,
}

/// Latency histograms in microseconds: [new, cancel] × [calm, keel under stress, the
/// baseline under the same stress].
struct Latencies {
    hist: [[Histogram<u64>; 3]; 2],
}

impl Latencies {
    fn new() -> Self {
        let h = || Histogram::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
        Self {
            hist: [[h(), h(), h()], [h(), h(), h()]],
        }
    }

    fn record(&mut self, cancel: bool, bucket: Option<usize>, ns: u64) {
        // Warm-up orders (bucket None) build the resting book and are not measured.
        let Some(bucket) = bucket else {
            return;
        };
        let us = (ns / 1_000).max(1);
        let _ = self.hist[usize::from(cancel)][bucket].record(us.min(60_000_000));
    }
}

struct Invariants {
    checked: u64,
    violated: u64,
    first: Option<String>,
}

impl Invariants {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.violated += 1;
            if self.first.is_none() {
                self.first = Some(what());
            }
        }
    }
}

/// The simulated venue and the engine's own loop (built by `EngineBuilder`, the `inline`
/// topology's pass), stepped one after the other in this thread.
struct Engine<T: SocketTransport> {
    venue: VenueServer<T>,
    core: EngineLoop<T>,
}

impl<T: SocketTransport> Engine<T> {
    /// One pass: the venue, then the engine. True if anything moved.
    fn pass(&mut self, now: u64) -> bool {
        let _ = self.venue.step(now, 0);
        self.core.pass(now)
    }

    fn dispatcher(&self) -> &Dispatcher {
        self.core.dispatcher()
    }

    fn link(&self) -> &EngineLink {
        &self.core.links()[0]
    }

    fn feed(&self) -> &FeedHandler {
        &self.core.feeds()[0]
    }

    /// The invariants that must hold after every pass.
    fn check(&self, inv: &mut Invariants) {
        let vstats = self.venue.exchange().stats();
        inv.check(vstats.duplicate_ids == 0, || {
            "an order id reached the venue twice (a resend)".into()
        });
        let d = self.dispatcher().stats();
        inv.check(d.report_errors == 0, || {
            format!(
                "a venue report contradicted the order table: {:?}",
                d.last_report_error
            )
        });
        inv.check(d.cancel_lane_full == 0, || {
            "a cancel found its lane full".into()
        });
        inv.check(
            !self.dispatcher().is_synced(VenueId(0)) || self.link().state() == LinkState::Synced,
            || "dispatcher trading on an unsynced link".into(),
        );
    }

    /// Symbols whose market-data book at keel differs from the venue's.
    fn books_differing(&self) -> Vec<&'static str> {
        let Some(md) = self.venue.market_data() else {
            return Vec::new();
        };
        (0..SYMBOLS.len() as u16)
            .filter(|&s| {
                let theirs = md.book(s);
                let ours = self.feed().book(s);
                ours.seq() != Some(theirs.seq)
                    || !ours.bids().eq(theirs.bids.iter().copied())
                    || !ours.asks().eq(theirs.asks.iter().copied())
            })
            .map(|s| SYMBOLS[usize::from(s)])
            .collect()
    }

    /// Whether the venue holds `id` open (through the session's UserRefNum mapping, or its
    /// FIX ClOrdID).
    fn open_at_venue(&self, id: ClientOrderId) -> bool {
        match self.link().client() {
            keel::session::AnyProtocol::Fix44(c) => c.wire_ref(id).is_some_and(|r| {
                self.venue
                    .fix_order_open("KEEL", r.to_string().as_bytes())
                    .unwrap_or(false)
            }),
            client => client
                .as_ouch()
                .and_then(|c| c.user_ref(id))
                .and_then(|u| self.venue.exchange().order_of(0, u))
                .is_some_and(|o| o.open_qty > 0),
        }
    }
}

/// The synthetic strategy: what it sent, what is live, and the latencies it saw.
struct Trader {
    strategy: StrategyHandle,
    rng: SplitMix64,
    next_seq: u64,
    /// Sent at, and the latency bucket (None: warm-up, not measured).
    pending_new: HashMap<ClientOrderId, (u64, Option<usize>)>,
    pending_cancel: HashMap<ClientOrderId, (u64, Option<usize>)>,
    /// Per order: quantity, filled so far.
    orders: HashMap<ClientOrderId, (u32, u32)>,
    live: Vec<ClientOrderId>,
    lat: Latencies,
    /// Commands: new, cancel.
    counts: [u64; 2],
    /// What it was told, per latency bucket.
    told: [Told; 3],
    /// Refused cancels to send again: when, which order.
    retry: std::collections::VecDeque<(u64, ClientOrderId)>,
}

/// How long the strategy waits before sending a refused cancel again.
const CANCEL_RETRY_NS: u64 = 5 * MS;

impl Trader {
    /// Sends one command: a cancel of a live order (with probability `cancel_permille`), or a
    /// new order resting 20–80 ticks off the reference (the venue's takers fill some).
    fn send_one(&mut self, now: u64, phase: Phase, cancel_permille: u64) {
        let bucket = phase.bucket();
        let rng = &mut self.rng;
        if rng.below_inclusive(999) < cancel_permille && !self.live.is_empty() {
            let i = rng.below_inclusive(self.live.len() as u64 - 1) as usize;
            let id = self.live.swap_remove(i);
            if self.strategy.commands.push(Command::Cancel { id }).is_ok() {
                self.pending_cancel.insert(id, (now, bucket));
                self.counts[1] += 1;
            }
            return;
        }
        self.next_seq += 1;
        let id = ClientOrderId::new(StrategyId(0), self.next_seq).expect("sequence in range");
        let side = if self.next_seq % 2 == 0 {
            Side::Buy
        } else {
            Side::Sell
        };
        let ticks = 20 + rng.below_inclusive(60) as i64;
        let offset = if side == Side::Buy { -ticks } else { ticks } * 100;
        let order = NewOrder {
            id,
            venue: VenueId(0),
            symbol: SymbolId(rng.below_inclusive(3) as u16),
            side,
            price: Price(Price::from_units(100, 0).0 + offset),
            qty: 1 + rng.below_inclusive(9) as u32,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        if self.strategy.commands.push(Command::New(order)).is_ok() {
            self.pending_new.insert(id, (now, bucket));
            self.orders.insert(id, (order.qty, 0));
            self.counts[0] += 1;
        }
    }

    /// Sends again the refused cancels that are due (their orders still open).
    fn resend_due(&mut self, now: u64) {
        while let Some(&(due, id)) = self.retry.front() {
            if due > now {
                break;
            }
            self.retry.pop_front();
            let open = self.orders.get(&id).is_some_and(|(q, f)| f < q);
            if open && self.pending_cancel.contains_key(&id) {
                if self.strategy.commands.push(Command::Cancel { id }).is_err() {
                    self.retry.push_back((now + CANCEL_RETRY_NS, id));
                    break;
                }
            } else {
                self.pending_cancel.remove(&id);
            }
        }
    }

    /// Reads every event: latencies, live orders, and the no-double-fill check.
    fn drain(&mut self, now: u64, inv: &mut Invariants) -> u32 {
        let mut n = 0;
        while let Ok(e) = self.strategy.events.pop() {
            n += 1;
            let at = e.at_ns.min(now);
            match e.kind {
                EventKind::Accepted => {
                    if let Some((sent, bucket)) = self.pending_new.remove(&e.id) {
                        self.lat.record(false, bucket, at.saturating_sub(sent));
                        self.live.push(e.id);
                        if let Some(b) = bucket {
                            self.told[b].accepted += 1;
                        }
                    }
                }
                EventKind::CancelRejected { .. } => {
                    // A cancel the venue refused while the order stays open (its rate limit
                    // refuses cancels too): counted, and sent again after `CANCEL_RETRY_NS` (a
                    // strategy wants the order gone; an immediate resend would only feed the
                    // throttle). Its latency runs from the first attempt to `Canceled`.
                    let open = self.orders.get(&e.id).is_some_and(|(q, f)| f < q);
                    match self.pending_cancel.get(&e.id).copied() {
                        Some((_, bucket)) if open => {
                            if let Some(b) = bucket {
                                self.told[b].cancel_refused += 1;
                            }
                            self.retry.push_back((now + CANCEL_RETRY_NS, e.id));
                        }
                        _ => {
                            self.pending_cancel.remove(&e.id);
                        }
                    }
                }
                EventKind::PartiallyFilled { qty, .. } | EventKind::Filled { qty, .. } => {
                    if let Some(f) = self.orders.get_mut(&e.id) {
                        f.1 += qty;
                        let (ordered, done) = *f;
                        inv.check(done <= ordered, || {
                            format!("order {} filled {done} of {ordered}: a double fill", e.id)
                        });
                    }
                    if let Some((sent, bucket)) = self.pending_new.remove(&e.id) {
                        self.lat.record(false, bucket, at.saturating_sub(sent));
                    }
                    if matches!(e.kind, EventKind::Filled { .. }) {
                        self.live.retain(|id| *id != e.id);
                        self.pending_cancel.remove(&e.id);
                    }
                }
                EventKind::Canceled => {
                    if let Some((sent, bucket)) = self.pending_cancel.remove(&e.id) {
                        self.lat.record(true, bucket, at.saturating_sub(sent));
                    }
                    self.live.retain(|id| *id != e.id);
                }
                kind => {
                    if let Some((_, Some(b))) = self.pending_new.remove(&e.id) {
                        match kind {
                            EventKind::Rejected {
                                reason: keel::order::RejectReason::VenueThrottle,
                            } => self.told[b].venue_throttled += 1,
                            EventKind::Throttled
                            | EventKind::Shed
                            | EventKind::Refused { .. }
                            | EventKind::BreakerOpen { .. } => self.told[b].held += 1,
                            _ => {}
                        }
                    }
                }
            }
        }
        n
    }
}

/// Runs the demo; returns the process exit code (0, or 1 on a violated invariant). The engine
/// and the venue run on the transport asked for (`--transport`); io_uring that cannot be set
/// up falls back to epoll, said on stderr with the cause (docs/operations.md, "Transports").
pub fn run(args: &DemoArgs) -> Result<u8, String> {
    struct Demo<'a>(&'a DemoArgs);
    impl keel::net::OnTransport for Demo<'_> {
        type Output = Result<u8, String>;
        fn run<T: SocketTransport>(&mut self) -> Result<Self::Output, keel::net::NetError> {
            // Opening the engine's transport is what decides the fallback; the demo's own
            // threads then open theirs on the same kind.
            drop(T::open(ReactorConfig {
                conns_max: 4,
                ..ReactorConfig::default()
            })?);
            Ok(run_on::<T>(self.0))
        }
    }
    keel::net::on_transport(args.transport, "keel demo", &mut Demo(args))
        .unwrap_or_else(|e| Err(format!("engine transport: {e}")))
}

/// The demo's controller handles: its counters and its off switch.
type Controller = (
    std::sync::Arc<keel::monitor::control::ControllerCounters>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
);

/// Starts the side thread reading the engine's `counters` file: the live page (with
/// `--dashboard`) and the adaptive controller (with `control`), which starts switched off.
fn start_monitor(
    args: &DemoArgs,
    counters: &std::path::Path,
    control: Option<(
        keel::monitor::control::ControlConfig,
        keel::engine::control::ControlSender,
    )>,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<(std::thread::JoinHandle<()>, Option<Controller>), String> {
    let side = keel::monitor::SideThread {
        counters: counters.to_path_buf(),
        alerts: keel::monitor::alerts::AlertsConfig::default(),
        budget: keel::monitor::alerts::BudgetConfig::default(),
        control,
        avoid: vec![args.core],
    };
    let spawned = keel::monitor::spawn(args.dashboard, side, std::sync::Arc::clone(stop))
        .map_err(|e| e.to_string())?;
    if let Some(bound) = spawned.addr {
        keel::warn_line!("keel demo: live page at http://{bound}/ (also /metrics, /health)");
    }
    let controller = spawned.control.inspect(|(_, off)| {
        off.store(true, std::sync::atomic::Ordering::Release);
    });
    Ok((spawned.thread, controller))
}

fn run_on<T: SocketTransport>(args: &DemoArgs) -> Result<u8, String> {
    pin_or_warn(args.core);
    let scale = if args.quick { 5 } else { 1 };
    let phase_ns = |ms: u64| ms * MS / scale;
    let clock = TscClock::new();
    // The live page and the adaptive controller read the engine's counters file, which only
    // a dashboard run or the capacity-drop scenario keeps.
    let controlled = args.scenario == Scenario::CapacityDrop;
    let counters = (args.dashboard.is_some() || controlled).then(|| {
        std::env::temp_dir()
            .join(format!("keel-demo-{}", std::process::id()))
            .join("counters")
    });
    let (mut engine, strategy) = build::<T>(
        &clock,
        args.journal.as_deref(),
        args.wire_log.as_deref(),
        counters.as_deref(),
        args.protocol,
    )?;
    let monitor_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The controller runs on the side thread from the start, switched off until the static
    // drop is over (the switch `keel ctl control on|off` turns).
    let control = match (controlled, engine.core.take_control()) {
        (true, Some(ring)) => Some((demo_control(), ring)),
        _ => None,
    };
    let (monitor, controller) = match &counters {
        Some(file) => {
            let (thread, controller) = start_monitor(args, file, control, &monitor_stop)?;
            (Some(thread), controller)
        }
        None => (None, None),
    };
    let mut trader = Trader {
        strategy,
        rng: SplitMix64::new(2026),
        next_seq: 0,
        pending_new: HashMap::new(),
        pending_cancel: HashMap::new(),
        orders: HashMap::new(),
        live: Vec::new(),
        lat: Latencies::new(),
        counts: [0; 2],
        told: [Told::default(); 3],
        retry: std::collections::VecDeque::new(),
    };
    let script = script(args.scenario, &phase_ns);
    let mut idler = Idler::new(match args.idle {
        Idle::Spin => IdlePolicy::BusySpin,
        Idle::Backoff => IdlePolicy::TEST,
    });
    let mut inv = Invariants {
        checked: 0,
        violated: 0,
        first: None,
    };
    let mut peak_open = 0usize;
    let started = clock.now_ns();
    let mut progress = Progress::new(started);
    let mut reconnect_ns = None;
    let mut outage_connects: Option<u64> = None;
    let mut outage_attempts: Option<u64> = None;
    until_synced(&clock, &mut engine, &mut trader, &mut inv, 5_000 * MS)?;

    for &(phase, duration, rate, cancel_permille) in &script {
        if phase == Phase::Disconnect {
            engine.venue.drop_all();
            let down = clock.now_ns();
            // Let the drop be seen, then reconnect, replay and reconcile until SYNCED.
            while clock.now_ns() < down + 5 * MS {
                engine.pass(clock.now_ns());
            }
            until_synced(&clock, &mut engine, &mut trader, &mut inv, 20_000 * MS)?;
            reconnect_ns = Some(clock.now_ns() - down);
            continue;
        }
        // Each stress phase starts (and its successor ends) a fault at the venue.
        let now = clock.now_ns();
        let order = if phase == Phase::StormFifo {
            keel::dispatch::LaneOrder::Arrival
        } else {
            keel::dispatch::LaneOrder::Priority
        };
        engine.core.dispatcher_mut().set_lane_order(order);
        let drop = matches!(phase, Phase::DropStatic | Phase::DropControlled);
        let limit = if drop { DROPPED_LIMIT } else { "rate-limit 0" };
        if controlled {
            let _ = engine.venue.apply_control(now, limit);
        }
        if let (Phase::DropControlled, Some((_, off))) = (phase, &controller) {
            off.store(false, std::sync::atomic::Ordering::Release);
        }
        match phase {
            Phase::Incident => {
                // Every new order fails with a venue system error.
                let _ = engine.venue.apply_control(now, "reject-burst 1000000000");
            }
            Phase::Outage => {
                let _ = engine.venue.apply_control(now, "refuse on");
                engine.venue.drop_all();
                outage_connects = Some(engine.link().session_stats().connects);
            }
            Phase::Drain => {
                // Quiet market: what keel's feed handler holds must become the venue's book.
                let _ = engine.venue.apply_control(now, "flow 0");
            }
            Phase::Recovery => {
                let _ = engine.venue.apply_control(now, "reject-burst 0");
                if outage_connects.is_some() {
                    let _ = engine.venue.apply_control(now, "refuse off");
                    let back = clock.now_ns();
                    let attempts =
                        engine.link().session_stats().connects - outage_connects.unwrap_or(0);
                    until_synced(&clock, &mut engine, &mut trader, &mut inv, 20_000 * MS)?;
                    reconnect_ns = Some(clock.now_ns() - back);
                    outage_attempts = Some(attempts);
                }
            }
            _ => {}
        }
        let phase_start = clock.now_ns();
        let mut emitted = 0u64;
        loop {
            let now = clock.now_ns();
            let elapsed = now - phase_start;
            if elapsed >= duration {
                break;
            }
            let due = rate * elapsed / 1_000_000_000;
            let sent = due > emitted;
            while emitted < due {
                emitted += 1;
                trader.send_one(now, phase, cancel_permille);
            }
            trader.resend_due(now);
            let moved = engine.pass(now);
            let events = trader.drain(now, &mut inv);
            if sent || moved || events > 0 {
                idler.work();
            } else {
                idler.idle();
            }
            engine.check(&mut inv);
            peak_open = peak_open.max(engine.dispatcher().table().open_count() as usize);
            if progress.due(now) {
                progress.write(format_args!(
                    "{:>10} {:>5.1}s | new {:>7} cancel {:>7} | live {:>6} | link {} | invariants {} checked, {} violated",
                    phase.name(),
                    (now - started) as f64 / 1e9,
                    trader.counts[0],
                    trader.counts[1],
                    trader.live.len(),
                    engine.link().state(),
                    inv.checked,
                    inv.violated
                ));
            }
        }
    }
    progress.finish();
    check_end_state(&engine, &trader, &mut inv);
    check_story(
        args.scenario,
        &engine,
        &trader,
        controller.as_ref().map(|(c, _)| &**c),
        outage_attempts,
        &mut inv,
    );
    let peak = Peak {
        open_orders: peak_open,
        reconnect_ns,
        outage_attempts,
        controller: controller.as_ref().map(|(c, _)| {
            use std::sync::atomic::Ordering::Relaxed;
            (
                c.decreases.load(Relaxed),
                c.increases.load(Relaxed),
                c.sheds.load(Relaxed),
                c.unsheds.load(Relaxed),
            )
        }),
    };
    report(args, &engine, &trader, &inv, &peak)?;
    // The engine stops as `keel run`'s does: the journal synced, the wire log written out.
    drop(engine.core.finish());
    monitor_stop.store(true, std::sync::atomic::Ordering::Release);
    if let Some(m) = monitor {
        let _ = m.join();
    }
    if let Some(dir) = counters.as_deref().and_then(std::path::Path::parent) {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(u8::from(inv.violated > 0))
}

/// A scenario's script: (phase, duration, messages per second, cancels per thousand).
/// `phase_ns` scales a phase's length (`--quick`).
fn script(scenario: Scenario, phase_ns: &dyn Fn(u64) -> u64) -> Vec<(Phase, u64, u64, u64)> {
    match scenario {
        // Each storm offers 15,000 messages/s, 60% cancels, against a limit of 10,000/s: the
        // cancels alone fit, the new orders queue behind (or, FIFO, in front of) them. The storms
        // keep their length with --quick: a shorter one would stay within the burst.
        Scenario::Storm => vec![
            (Phase::Warmup, phase_ns(2_000), 4_000, 0),
            (Phase::Calm, phase_ns(3_000), 50, 500),
            (Phase::Storm, 1_500 * MS, 15_000, 600),
            (Phase::Rewarm, phase_ns(2_000), 4_000, 0),
            (Phase::StormFifo, 1_500 * MS, 15_000, 600),
            (Phase::Rewarm, phase_ns(1_000), 50, 500),
            (Phase::Disconnect, 0, 0, 0),
            (Phase::Recovery, phase_ns(3_000), 50, 500),
            (Phase::Drain, phase_ns(500), 0, 0),
        ],
        Scenario::Incident => vec![
            (Phase::Warmup, phase_ns(1_000), 2_000, 0),
            (Phase::Calm, phase_ns(2_000), 50, 500),
            (Phase::Incident, phase_ns(2_000), 400, 500),
            // Long enough, even with --quick, for the open breaker to half-open and close.
            (Phase::Recovery, phase_ns(3_000).max(1_500 * MS), 50, 500),
            (Phase::Drain, phase_ns(500), 0, 0),
        ],
        Scenario::ReconnectStorm => vec![
            (Phase::Warmup, phase_ns(1_000), 2_000, 0),
            (Phase::Calm, phase_ns(2_000), 50, 500),
            (Phase::Outage, phase_ns(2_500), 50, 500),
            (Phase::Recovery, phase_ns(3_000), 50, 500),
            (Phase::Drain, phase_ns(500), 0, 0),
        ],
        // The venue takes 2,500 messages/s during each drop (keel's limiter allows 10,000/s);
        // the strategy offers 4,000/s, half cancels. The drops keep their length with --quick:
        // the controller needs ticks to act.
        Scenario::CapacityDrop => vec![
            (Phase::Warmup, phase_ns(1_000), 2_000, 0),
            (Phase::Calm, phase_ns(2_000), 100, 500),
            (
                Phase::DropStatic,
                phase_ns(3_000).max(2_000 * MS),
                4_000,
                500,
            ),
            (Phase::Recovery, phase_ns(3_000).max(2_000 * MS), 100, 500),
            (
                Phase::DropControlled,
                phase_ns(3_000).max(2_000 * MS),
                4_000,
                500,
            ),
            (Phase::Recovery, phase_ns(2_000), 100, 500),
            (Phase::Drain, phase_ns(500), 0, 0),
        ],
        Scenario::Calm => vec![
            (Phase::Warmup, phase_ns(1_000), 1_000, 0),
            (Phase::Calm, phase_ns(5_000), 50, 500),
            (Phase::Drain, phase_ns(500), 0, 0),
        ],
    }
}

/// At the end keel's open orders must be exactly the venue's, and its books the venue's.
fn check_end_state<T: SocketTransport>(engine: &Engine<T>, trader: &Trader, inv: &mut Invariants) {
    // At the end keel's open orders must be exactly the venue's.
    let keel_open: Vec<ClientOrderId> = trader
        .orders
        .keys()
        .copied()
        .filter(|id| {
            engine
                .dispatcher()
                .table()
                .get(*id)
                .is_some_and(|o| !o.state.is_terminal() && o.state != OrderState::PendingNew)
        })
        .collect();
    let missing = keel_open
        .iter()
        .filter(|id| !engine.open_at_venue(**id))
        .count();
    inv.check(missing == 0, || {
        format!("{missing} orders open at keel but not at the venue")
    });
    let venue_open = trader
        .orders
        .keys()
        .filter(|id| engine.open_at_venue(**id))
        .count();
    inv.check(venue_open == keel_open.len(), || {
        format!(
            "the venue has {venue_open} open orders, keel {}",
            keel_open.len()
        )
    });
    // Market data: after the quiet drain, keel's books are the venue's, and no feed fault.
    let differing = engine.books_differing();
    inv.check(differing.is_empty(), || {
        format!("market-data books differ from the venue's: {differing:?}")
    });
    let f = engine.feed().stats();
    inv.check(
        f.gaps + f.crossed + f.malformed + f.protocol_errors == 0,
        || format!("the feed handler saw a faulty feed: {f:?}"),
    );
}

/// Each scenario's story must actually have happened.
fn check_story<T: SocketTransport>(
    scenario: Scenario,
    engine: &Engine<T>,
    trader: &Trader,
    controller: Option<&keel::monitor::control::ControllerCounters>,
    outage_attempts: Option<u64>,
    inv: &mut Invariants,
) {
    // Each scenario's story must actually have happened.
    let b = engine.dispatcher().guards().venues[0].breaker.stats();
    match scenario {
        Scenario::Incident => {
            inv.check(b.opened >= 1 && b.closed >= 1, || {
                format!("the incident should open and then close the breaker: {b:?}")
            });
            let sent_while_open = engine.dispatcher().stats().breaker_refused;
            inv.check(sent_while_open > 0, || {
                "no new order was refused by the open breaker".into()
            });
        }
        Scenario::ReconnectStorm => {
            inv.check(outage_attempts.is_some_and(|a| a >= 2), || {
                format!("the outage should cost several connect attempts: {outage_attempts:?}")
            });
        }
        Scenario::Storm => {
            let (keel, fifo) = (&trader.lat.hist[1][1], &trader.lat.hist[1][2]);
            inv.check(!keel.is_empty() && !fifo.is_empty(), || {
                "both storms should measure cancels".into()
            });
            inv.check(
                keel.value_at_quantile(0.99) < fifo.value_at_quantile(0.99),
                || {
                    format!(
                        "keel's storm cancel p99 ({} µs) should beat the FIFO baseline's ({} µs)",
                        keel.value_at_quantile(0.99),
                        fifo.value_at_quantile(0.99)
                    )
                },
            );
            let d = engine.dispatcher().stats();
            inv.check(d.throttled > 0, || {
                "the storm should saturate the rate limit (no new order throttled)".into()
            });
        }
        Scenario::CapacityDrop => {
            let (ctrl, stat) = (trader.told[1], trader.told[2]);
            inv.check(stat.venue_throttled > 0, || {
                "the static drop should draw venue throttle rejects".into()
            });
            inv.check(
                ctrl.venue_throttled + ctrl.cancel_refused
                    < (stat.venue_throttled + stat.cancel_refused) / 2,
                || {
                    format!(
                        "the controller should at least halve the venue's refusals: static \
                         {stat:?}, controller {ctrl:?}"
                    )
                },
            );
            let decreases = controller.map_or(0, |c| {
                c.decreases.load(std::sync::atomic::Ordering::Relaxed)
            });
            inv.check(decreases > 0, || {
                "the controller never lowered a cap".into()
            });
        }
        Scenario::Calm => {}
    }
}

/// The live progress line on stderr. On a terminal it is rewritten in place (`\r`) every
/// 250 ms; on a file or a pipe it is a plain line every 2 s, so a log holds a readable history
/// instead of carriage returns.
struct Progress {
    tty: bool,
    interval_ns: u64,
    last_ns: u64,
    /// A `\r` line is on the terminal and needs its newline.
    open: bool,
}

impl Progress {
    fn new(now_ns: u64) -> Self {
        use std::io::IsTerminal;
        let tty = std::io::stderr().is_terminal();
        Self {
            tty,
            interval_ns: if tty { 250 * MS } else { 2_000 * MS },
            last_ns: now_ns,
            open: false,
        }
    }

    fn due(&mut self, now_ns: u64) -> bool {
        if now_ns - self.last_ns < self.interval_ns {
            return false;
        }
        self.last_ns = now_ns;
        true
    }

    fn write(&mut self, line: std::fmt::Arguments<'_>) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            // Trailing spaces cover the end of a longer previous line.
            let _ = write!(err, "\r{line}   ");
            self.open = true;
        } else {
            let _ = writeln!(err, "{line}");
        }
    }

    /// Ends a line left open on the terminal.
    fn finish(&mut self) {
        if self.open {
            eprintln!();
            self.open = false;
        }
    }
}

/// Runs passes (events drained, invariants checked) until the link is SYNCED.
fn until_synced<T: SocketTransport>(
    clock: &TscClock,
    engine: &mut Engine<T>,
    trader: &mut Trader,
    inv: &mut Invariants,
    bound_ns: u64,
) -> Result<(), String> {
    let deadline = clock.now_ns() + bound_ns;
    while !engine.dispatcher().is_synced(VenueId(0)) {
        let now = clock.now_ns();
        if now > deadline {
            return Err(format!(
                "the link did not reach SYNCED within {} ms (state {})",
                bound_ns / MS,
                engine.link().state()
            ));
        }
        engine.pass(now);
        trader.drain(now, inv);
        engine.check(inv);
    }
    Ok(())
}

/// The venue on loopback and the engine connected to it, built by `EngineBuilder` like every
/// engine (journal included).
fn build<T: SocketTransport>(
    clock: &TscClock,
    journal: Option<&std::path::Path>,
    wire_log: Option<&std::path::Path>,
    counters: Option<&std::path::Path>,
    protocol: DemoProtocol,
) -> Result<(Engine<T>, StrategyHandle), String> {
    let fix = protocol == DemoProtocol::Fix44;
    let venue = VenueServer::<T>::open(VenueConfig {
        fix: fix.then(crate::server::FixConfig::default),
        flow: FlowConfig {
            seed: 11,
            events_per_sec: 400,
            ..FlowConfig::default()
        },
        heartbeat_interval_ns: 200 * MS,
        market_data: Some(MdConfig {
            conns_max: 8,
            ..MdConfig::default()
        }),
        ..VenueConfig::default()
    })
    .map_err(|e| format!("venue: {e}"))?;
    let reactor = T::open(ReactorConfig {
        conns_max: 4,
        ..ReactorConfig::default()
    })
    .map_err(|e| format!("engine transport: {e}"))?;
    let mut dispatcher = DispatcherConfig {
        strategies: 1,
        venues: 1,
        symbols: SYMBOLS.len() as u16,
        ..DispatcherConfig::default()
    };
    dispatcher.limiter.windows = [Some(RATE), None, None, None];
    // The limiter's own answer to a venue throttle, on the demo's time scale: half rate for
    // 1 s, back to full over 2 s.
    dispatcher.limiter.throttle_cooldown_ns = 1_000 * MS;
    dispatcher.limiter.throttle_recovery_ns = 2_000 * MS;
    dispatcher.acquire_timeout_ns = 200 * MS;
    dispatcher.bulkhead.in_flight_per_symbol_max = 4_096;
    dispatcher.bulkhead.in_flight_per_venue_max = 16_384;
    // A breaker on a demo's time scale: judged over 1 s, open for 500 ms, then 3 probes.
    dispatcher.breaker.window_ns = 1_000 * MS;
    dispatcher.breaker.window_buckets = 10;
    dispatcher.breaker.calls_min = 20;
    dispatcher.breaker.open_duration_ns = 500 * MS;
    dispatcher.breaker.open_duration_max_ns = 2_000 * MS;
    dispatcher.breaker.half_open_probes = 3;
    let config = EngineConfig {
        symbols: SYMBOLS.map(alpha::<8>).to_vec(),
        dispatcher,
        journal: journal.map(|dir| keel::journal::JournalConfig {
            dir: dir.to_path_buf(),
            file_bytes: 64 << 20,
        }),
        venues: vec![VenueLinkConfig {
            name: "demo".into(),
            address: match venue.fix_addr() {
                Some(addr) if fix => addr,
                _ => venue.local_addr(),
            },
            username: "demo".into(),
            password: "keel".into(),
            protocol: if fix {
                ProtocolConfig::Fix44(keel::session::fix::FixSettings::default())
            } else {
                ProtocolConfig::default()
            },
            ack_timeout_ns: 2_000 * MS,
            orders_max: 65_536,
            // Fixed seeds (the engine's defaults come from the OS): the demo replays.
            link: keel::session::link::LinkConfig {
                session: keel::session::machine::SessionConfig {
                    jitter_seed: keel::rng::Seed::Fixed(1),
                    ..Default::default()
                },
                ..Default::default()
            },
        }],
        loops: LoopConfig {
            strategy_ring: 65_536,
            venue_ring: 16_384,
            ..LoopConfig::default()
        },
        ipc: None,
        feeds: vec![FeedConfig {
            addr: venue
                .market_data_addr()
                .ok_or("the venue serves no market data")?,
            symbols: SYMBOLS.map(str::to_string).to_vec(),
            seed: keel::rng::Seed::Fixed(7),
            ..FeedConfig::default()
        }],
        operator: keel::engine::OperatorConfig::default(),
        strategy_quotas: Vec::new(),
        wire_log: wire_log.map(|dir| keel::wirelog::WireLogConfig {
            dir: dir.to_path_buf(),
            ..keel::wirelog::WireLogConfig::default()
        }),
        metrics: keel::engine::MetricsConfig {
            enabled: counters.is_some(),
            file: counters.map(std::path::Path::to_path_buf),
            ..keel::engine::MetricsConfig::default()
        },
    };
    let mut core = EngineBuilder::new(config)
        .build(reactor, clock.now_ns())
        .map_err(|e| format!("engine: {e}"))?;
    if let (Some(dir), records @ 1..) = (journal, core.restored().journal.records) {
        return Err(format!(
            "journal: {} already holds {records} records of another run; give an empty directory",
            dir.display()
        ));
    }
    let strategy = core
        .take_strategy(StrategyId(0))
        .ok_or("the engine serves no in-process strategy")?;
    Ok((Engine { venue, core }, strategy))
}

/// Peaks and times for the report.
struct Peak {
    open_orders: usize,
    reconnect_ns: Option<u64>,
    outage_attempts: Option<u64>,
    /// The controller's decreases, increases, sheds and lifted sheds.
    controller: Option<(u64, u64, u64, u64)>,
}

/// The venue's rate limit during a capacity drop: 250 messages per 100 ms (2,500/s), a
/// quarter of keel's 10,000/s.
const DROPPED_LIMIT: &str = "rate-limit 250 100";

/// The demo's controller: decides every 50 ms, halves a cap on venue refusals, holds 200 ms,
/// adds 0.5% of the rate per healthy tick, and sheds NVDA and AMZN (AAPL and MSFT are core)
/// while a cap is at or below 5%.
fn demo_control() -> keel::monitor::control::ControlConfig {
    keel::monitor::control::ControlConfig {
        enabled: true,
        interval_ns: 50 * MS,
        rate_min_permille: 10,
        decrease_permille: 500,
        increase_permille: 5,
        hold_ns: 200 * MS,
        core_symbols: vec!["AAPL".into(), "MSFT".into()],
        shed_below_permille: 50,
        ..keel::monitor::control::ControlConfig::default()
    }
}

fn report<T: SocketTransport>(
    args: &DemoArgs,
    engine: &Engine<T>,
    trader: &Trader,
    inv: &Invariants,
    peak: &Peak,
) -> Result<(), String> {
    let (dispatcher, link, venue) = (engine.dispatcher(), engine.link(), &engine.venue);
    let (lat, counts) = (&trader.lat, trader.counts);
    let (peak_open, reconnect_ns) = (peak.open_orders, peak.reconnect_ns);
    let stress = stress_label(args.scenario);
    let mut out = std::io::stdout().lock();
    let d = dispatcher.stats();
    let b = dispatcher.guards().venues[0].breaker.stats();
    let s = link.session_stats();
    let r = link.client().stats().last_reconciliation;
    let _ = writeln!(
        out,
        "\nkeel demo — scenario {}{}, transport {}, protocol {}",
        args.scenario,
        if args.quick { " (quick)" } else { "" },
        T::KIND,
        match args.protocol {
            DemoProtocol::Ouch => "OUCH 5.0",
            DemoProtocol::Fix44 => "FIX 4.4",
        }
    );
    report_latency(&mut out, args, trader, peak, stress);
    let _ = writeln!(
        out,
        "\ncommands: {} new, {} cancel; sent to the venue: {} new, {} cancel, {} queries",
        counts[0], counts[1], d.sent_new, d.sent_cancel, d.sent_query
    );
    let _ = writeln!(
        out,
        "held back: {} shed, {} throttled, {} breaker-refused; refused by keel: {}",
        d.shed,
        d.throttled,
        d.breaker_refused,
        d.refused.iter().sum::<u64>()
    );
    let _ = writeln!(
        out,
        "breaker: {} opened, {} half-opened, {} closed",
        b.opened, b.half_opened, b.closed
    );
    let _ = writeln!(
        out,
        "session: {} connects, {} disconnects, {} synced{}",
        s.connects,
        s.disconnects,
        s.synced,
        reconnect_ns.map_or(String::new(), |ns| format!(
            "; SYNCED again {:.1} ms after the venue {}",
            ns as f64 / 1e6,
            if peak.outage_attempts.is_some() {
                "accepted connections again"
            } else {
                "dropped the session"
            }
        ))
    );
    if let Some(attempts) = peak.outage_attempts {
        let _ = writeln!(
            out,
            "outage: {attempts} connect attempts refused, spaced by exponential backoff with equal jitter"
        );
    }
    let _ = writeln!(
        out,
        "reconciliation: {} not received, {} missed fills, {} unknown at keel; unreconciled {}",
        r.not_received, r.missed_fills, r.unknown_at_keel, s.unreconciled
    );
    let _ = writeln!(
        out,
        "venue: {} accepted, {} canceled, {} matches, {} duplicate ids",
        venue.exchange().stats().accepted,
        venue.exchange().stats().canceled,
        venue.exchange().stats().matches,
        venue.exchange().stats().duplicate_ids
    );
    let f = engine.feed().stats();
    let _ = writeln!(
        out,
        "market data: {} snapshots, {} deltas, {} trades over WebSocket; {} gaps, {} duplicates, {} crossed; books equal to the venue's at the end: {}",
        f.snapshots,
        f.deltas,
        f.trades,
        f.gaps,
        f.duplicates,
        f.crossed,
        if engine.books_differing().is_empty() { "yes" } else { "NO" }
    );
    let _ = writeln!(
        out,
        "open orders at peak: {peak_open}; peak memory (VmHWM): {}",
        peak_memory()
    );
    if let Some(dir) = &args.journal {
        let records = engine
            .dispatcher()
            .journal_next_index()
            .map_or(0, |next| next - 1);
        let _ = writeln!(
            out,
            "journal: {records} records in {}, {} append errors",
            dir.display(),
            engine.dispatcher().stats().journal_errors
        );
    }
    let v = venue.stats();
    match venue.fix_stats() {
        Some(f) => {
            let _ = writeln!(
                out,
                "venue order entry (FIX 4.4): {} messages in, {} out, {} resent, {} rejected, \
                 {} garbled",
                f.messages_in, f.messages_out, f.resent, f.rejects_sent, f.garbled
            );
        }
        None => {
            let _ = writeln!(
                out,
                "venue order entry: {} packets in, {} packets out",
                v.packets_in, v.packets_out
            );
        }
    }
    if let Some(dir) = &args.wire_log {
        let _ = writeln!(
            out,
            "wire log: {} ({} messages dropped; `keel log dump` reads it)",
            dir.join("wire.log").display(),
            link.wire_dropped()
        );
    }
    if let Some(first) = &inv.first {
        let _ = writeln!(out, "first violation: {first}");
    }
    let _ = writeln!(
        out,
        "invariants: {} checked, {} violated",
        inv.checked, inv.violated
    );
    if let Some(path) = &args.histograms {
        let mut text = String::new();
        for (name, k, p) in [
            ("new calm", 0, 0),
            ("new storm", 0, 1),
            ("new baseline", 0, 2),
            ("cancel calm", 1, 0),
            ("cancel storm", 1, 1),
            ("cancel baseline", 1, 2),
        ] {
            let h = &lat.hist[k][p];
            text.push_str(&format!("# {name} (µs): quantile value\n"));
            for q in [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
                text.push_str(&format!("{q} {}\n", h.value_at_quantile(q)));
            }
        }
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = writeln!(out, "histograms written to {}", path.display());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "keel demo, scenario {}: command to venue answer, µs",
            args.scenario
        );
        let baseline = baseline_label(args.scenario);
        std::fs::write(path, svg_plot(lat, &title, stress, baseline))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = writeln!(out, "latency plot written to {}", path.display());
    }
    Ok(())
}

/// The report's latency part: per phase and kind, the storm against its baseline, and the
/// capacity drop with and without the controller.
fn report_latency(
    out: &mut impl Write,
    args: &DemoArgs,
    trader: &Trader,
    peak: &Peak,
    stress: &str,
) {
    let lat = &trader.lat;
    let _ = writeln!(
        out,
        "\nlatency, command to venue answer (µs)   p50     p99   p99.9     max   samples"
    );
    let baseline = baseline_label(args.scenario);
    for (kind, k) in [("new order → accepted ", 0), ("cancel → canceled    ", 1)] {
        for (phase, p) in [("calm ", 0), (stress, 1), (baseline, 2)] {
            let h = &lat.hist[k][p];
            if h.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "  {kind} {phase:<11}  {:>7} {:>7} {:>7} {:>7} {:>9}",
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max(),
                h.len()
            );
        }
    }
    let calm = &lat.hist[1][0];
    let storm = &lat.hist[1][1];
    if !calm.is_empty() && !storm.is_empty() {
        let _ = writeln!(
            out,
            "  cancel p99, {stress} / calm: {:.2}×",
            storm.value_at_quantile(0.99) as f64 / calm.value_at_quantile(0.99).max(1) as f64
        );
    }
    let fifo = &lat.hist[1][2];
    if args.scenario == Scenario::Storm && !storm.is_empty() && !fifo.is_empty() {
        let (k, f) = (storm.value_at_quantile(0.99), fifo.value_at_quantile(0.99));
        let _ = writeln!(
            out,
            "  cancels overtake queued new orders: storm cancel p99 keel {k} µs, FIFO baseline \
             {f} µs ({:.0}× lower with keel's lanes; same dispatcher, venue, limiter and load)",
            f as f64 / k.max(1) as f64
        );
    }
    if args.scenario == Scenario::CapacityDrop {
        let (st, ct) = (trader.told[2], trader.told[1]);
        let (sc, cc) = (&lat.hist[1][2], &lat.hist[1][1]);
        let _ = writeln!(
            out,
            "\nvenue capacity ÷4 (2,500 messages/s; keel's limiter 10,000/s)   static  controller"
        );
        for (what, a, b) in [
            (
                "new orders rejected by the venue's throttle",
                st.venue_throttled,
                ct.venue_throttled,
            ),
            (
                "cancels refused by the venue (sent again)",
                st.cancel_refused,
                ct.cancel_refused,
            ),
            ("new orders accepted", st.accepted, ct.accepted),
            ("new orders held back by keel", st.held, ct.held),
            (
                "cancel → canceled p50 (µs, from 1st try)",
                sc.value_at_quantile(0.5),
                cc.value_at_quantile(0.5),
            ),
            (
                "cancel → canceled p99 (µs, from 1st try)",
                sc.value_at_quantile(0.99),
                cc.value_at_quantile(0.99),
            ),
            (
                "cancel → canceled max (µs, from 1st try)",
                sc.max(),
                cc.max(),
            ),
        ] {
            let _ = writeln!(out, "  {what:<45}  {a:>9} {b:>10}");
        }
        if let Some((down, up, shed, unshed)) = peak.controller {
            let _ = writeln!(
                out,
                "  controller: {down} cuts, {up} raises, non-core symbols shed {shed}× and \
                 restored {unshed}×; venue refusals {:.2}× of static",
                (ct.venue_throttled + ct.cancel_refused) as f64
                    / (st.venue_throttled + st.cancel_refused).max(1) as f64
            );
        }
    }
}

/// The latency percentile curves as an SVG image: x is the percentile on a "nines" scale
/// (50%, 90%, 99%, 99.9%, 99.99%), y the latency in µs on a log scale.
fn svg_plot(lat: &Latencies, title: &str, stress: &str, baseline: &str) -> String {
    const W: f64 = 760.0;
    const H: f64 = 440.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 180.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 50.0;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let nines_max = 4.0; // 99.99%
    let max_us = lat
        .hist
        .iter()
        .flatten()
        .filter(|h| !h.is_empty())
        .map(|h| h.max())
        .max()
        .unwrap_or(1)
        .max(10);
    let decades = (max_us as f64).log10().ceil().max(1.0);
    let x = |nines: f64| LEFT + plot_w * nines / nines_max;
    let y = |us: u64| TOP + plot_h * (1.0 - (us.max(1) as f64).log10() / decades);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"22\" font-size=\"15\">{title}</text>\n"
    );
    for (i, label) in ["0%", "90%", "99%", "99.9%", "99.99%"].iter().enumerate() {
        let px = x(i as f64);
        svg += &format!(
            "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>\n",
            TOP + plot_h,
            TOP + plot_h + 18.0
        );
    }
    for d in 0..=decades as u32 {
        let us = 10u64.pow(d);
        let py = y(us);
        let label = match us {
            u if u >= 1_000_000 => format!("{} s", u / 1_000_000),
            u if u >= 1_000 => format!("{} ms", u / 1_000),
            u => format!("{u} µs"),
        };
        svg += &format!(
            "<line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>\n",
            LEFT + plot_w,
            LEFT - 6.0,
            py + 4.0
        );
    }
    svg += &format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">percentile</text>\n",
        LEFT + plot_w / 2.0,
        H - 8.0
    );
    let series = [
        (1, 0, "cancel, calm", "#1f77b4", ""),
        (1, 1, "cancel, ", "#d62728", ""),
        (1, 2, "cancel, ", "#7f7f7f", ""),
        (0, 0, "new order, calm", "#1f77b4", "6,4"),
        (0, 1, "new order, ", "#d62728", "6,4"),
        (0, 2, "new order, ", "#7f7f7f", "6,4"),
    ];
    let mut legend_y = TOP + 10.0;
    for (k, p, name, colour, dash) in series {
        let h = &lat.hist[k][p];
        if h.is_empty() {
            continue;
        }
        let mut points = String::new();
        for i in 0..=80 {
            let nines = nines_max * f64::from(i) / 80.0;
            let q = 1.0 - 10f64.powf(-nines);
            let v = h.value_at_quantile(q);
            points += &format!("{:.1},{:.1} ", x(nines), y(v));
        }
        let name = match p {
            1 => format!("{name}{stress}"),
            2 => format!("{name}{baseline}"),
            _ => name.to_string(),
        };
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" \
             stroke-dasharray=\"{dash}\" points=\"{points}\"/>\n\
             <line x1=\"{:.1}\" y1=\"{legend_y:.1}\" x2=\"{:.1}\" y2=\"{legend_y:.1}\" \
             stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{name} (n={})</text>\n",
            LEFT + plot_w + 12.0,
            LEFT + plot_w + 40.0,
            LEFT + plot_w + 46.0,
            legend_y + 4.0,
            h.len()
        );
        legend_y += 20.0;
    }
    svg += "</svg>\n";
    svg
}

/// The baseline's label under the same stress (`-`: the scenario has none).
fn baseline_label(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Storm => "storm FIFO",
        Scenario::CapacityDrop => "drop static",
        _ => "-",
    }
}

fn stress_label(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Storm => "storm",
        Scenario::Incident => "incident",
        Scenario::ReconnectStorm => "outage",
        Scenario::CapacityDrop => "drop ctrl",
        Scenario::Calm => "-",
    }
}

fn peak_memory() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l["VmHWM:".len()..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}
