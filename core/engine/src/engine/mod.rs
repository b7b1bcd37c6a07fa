//! The engine: the dispatcher, the venue links and their transport (io_uring, or epoll where
//! io_uring is unavailable or not wanted), wired into pinned event loops, with strategies in process (rtrb rings) or in other processes (shared-memory
//! rings, [`crate::ipc`]), and the order journal restored at start.
//!
//! Two topologies run the same parts:
//!
//! - `inline`: one loop (one core) runs strategies' bridges, the dispatcher, the transport
//!   and every venue session. Fewest cores, fewest hops.
//! - `split`: a dispatcher loop (bridges, dispatcher, journal) and an executor loop
//!   (transport and venue sessions), joined by SPSC rings; the dispatcher watches the
//!   executor's heartbeat and routes nothing new to it while it is stalled.
//!
//! Each loop is single-threaded, owns its state and idles by its [`IdlePolicy`]. Pinning to a
//! core the machine lacks warns and runs unpinned.
//!
//! Restart: with a journal configured, `start` replays it before anything connects: the
//! order table, positions and ClientOrderId floors come back, orders sent and never answered
//! are `Unknown` with a status query queued (never resent), each session resumes the venue's
//! stream after the last report on record and knows every open order's wire reference again;
//! the link then reconciles before SYNCED.

pub mod admin;
mod bridge;
pub mod control;
mod event_loop;
pub mod lock;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bridge::Bridge;
pub use bridge::{BridgeStats, COMMANDS_PER_PASS_MAX, EVENTS_PER_PASS_MAX};
pub use event_loop::{EngineLoop, Executor};

use event_loop::{Front, FrontReport};

use crate::clock::{Clock, TscClock};
use crate::dispatch::{
    strategy_channel, venue_channel, DispatchStats, Dispatcher, RestoreReport, StrategyHandle,
};
use crate::feed::handler::FeedHandler;
use crate::journal::{Journal, OpenReport, Recovery};
use crate::net::{ReactorConfig, SocketTransport, Transport, TransportKind};
use crate::order::{Order, StrategyId, VenueId};
use crate::runtime::watchdog::LoopHeartbeat;
use crate::runtime::{pin_or_warn, tighten_timer_slack, IdlePolicy, Idler};
use crate::session::link::LinkStats;
use crate::session::machine::{LinkState, SessionStats};
use crate::session::protocol::{ClientStats, VenueProtocol};
use crate::session::registry::build_link;
use crate::session::EngineLink;

/// How the loops are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One loop runs everything.
    Inline,
    /// A dispatcher loop and an executor loop joined by SPSC rings.
    Split,
}

/// Loops, cores and idling (the `[engine]` table of the configuration file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopConfig {
    /// Layout.
    pub topology: Topology,
    /// The executor loop's transport. io_uring that cannot be set up (disabled by the kernel or
    /// a seccomp profile) falls back to epoll with a warning naming the cause.
    pub transport: TransportKind,
    /// Idle policy of the dispatcher loop (the only loop in `inline`).
    pub idle: IdlePolicy,
    /// Idle policy of the executor loop (`split`).
    pub executor_idle: IdlePolicy,
    /// Core of the dispatcher loop (the only loop in `inline`); `None`: unpinned.
    pub dispatcher_core: Option<usize>,
    /// Core of the executor loop (`split`); `None`: unpinned.
    pub executor_core: Option<usize>,
    /// `split`: the executor is declared stalled after this long without a pass.
    pub executor_stall_ns: u64,
    /// Capacity of each in-process strategy ring (commands and events).
    pub strategy_ring: u32,
    /// Capacity of each venue ring (requests and outcomes).
    pub venue_ring: u32,
    /// Ceiling on the memory the configuration may ask for at start (`None`: the machine's
    /// physical memory). Checked when the configuration is read, with the figure.
    pub memory_max_bytes: Option<u64>,
    /// The executor loop's transport settings (`[engine]` `wait`, `spin_reads`,
    /// `sqpoll_idle_ms`, `ring_entries`, `socket_send_buffer_bytes`); `conns_max` is replaced
    /// by what the engine needs (one slot per venue link and feed, and spares).
    pub reactor: ReactorConfig,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            topology: Topology::Inline,
            transport: TransportKind::IoUring,
            idle: IdlePolicy::BusySpin,
            executor_idle: IdlePolicy::BusySpin,
            dispatcher_core: None,
            executor_core: None,
            executor_stall_ns: 50_000_000,
            strategy_ring: 4_096,
            venue_ring: 4_096,
            memory_max_bytes: None,
            reactor: ReactorConfig::default(),
        }
    }
}

/// Strategies in other processes (the `[ipc]` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcConfig {
    /// Directory of the channel files (`strategy-<id>` each); under /dev/shm in production.
    pub dir: PathBuf,
    /// Command ring capacity per strategy (a power of two).
    pub command_capacity: u32,
    /// Event ring capacity per strategy (a power of two).
    pub event_capacity: u32,
    /// A strategy whose heartbeat stops this long is declared lost.
    pub strategy_timeout_ns: u64,
    /// Cancel every open order of a lost strategy.
    pub cancel_on_strategy_loss: bool,
    /// A strategy whose orders the journal restored live, and that does not attach within
    /// this long of the engine's start, is treated as lost (`cancel_on_strategy_loss`
    /// applies): orders nobody watches are not left working.
    pub restored_attach_timeout_ns: u64,
    /// Trades each feed's market-data file holds for strategies in other processes (a power
    /// of two): a reader further behind is told how many it lost.
    pub market_data_trades: u32,
}

impl Default for IpcConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/dev/shm/keel"),
            command_capacity: 4_096,
            event_capacity: 4_096,
            strategy_timeout_ns: 2_000_000_000,
            cancel_on_strategy_loss: true,
            restored_attach_timeout_ns: 30_000_000_000,
            market_data_trades: 65_536,
        }
    }
}

impl IpcConfig {
    /// The channel file of `strategy`.
    pub fn channel_path(&self, strategy: StrategyId) -> PathBuf {
        self.dir.join(format!("strategy-{}", strategy.0))
    }

    /// The market-data file of feed `feed` (in `[[feed]]` order).
    pub fn market_data_path(&self, feed: usize) -> PathBuf {
        self.dir.join(format!("md-{feed}"))
    }
}

pub use crate::session::VenueLinkConfig;

/// The whole configuration (read from TOML by [`crate::config`], or built in code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Symbols traded, in SymbolId order.
    pub symbols: Vec<crate::order::SymbolName>,
    /// The dispatcher and its guard chain.
    pub dispatcher: crate::dispatch::DispatcherConfig,
    /// Strategies with their own quota instead of `dispatcher.quota`
    /// (`[[dispatcher.quota.strategy]]`), each strategy at most once.
    pub strategy_quotas: Vec<(
        crate::order::StrategyId,
        crate::dispatch::quota::StrategyQuota,
    )>,
    /// The order journal (`None`: no journal; refused by `keel run`).
    pub journal: Option<crate::journal::JournalConfig>,
    /// Venue links, in VenueId order.
    pub venues: Vec<VenueLinkConfig>,
    /// Loops, cores and idling (`[engine]`).
    pub loops: LoopConfig,
    /// Strategies over shared memory (`[ipc]`; `None`: in process only).
    pub ipc: Option<IpcConfig>,
    /// Market-data feeds (`[[feed]]`), each kept by a feed handler in the executor loop.
    pub feeds: Vec<crate::feed::handler::FeedConfig>,
    /// The operator's side: admin socket, what a stop does (`[operator]`).
    pub operator: OperatorConfig,
    /// Every message to and from each venue, to a file (`[wire_log]`; `None`: not kept).
    pub wire_log: Option<crate::wirelog::WireLogConfig>,
    /// The counters file and the side thread (`[metrics]`).
    pub metrics: MetricsConfig,
}

/// Out-of-band observation (the `[metrics]`, `[alerts]` and `[budget]` tables;
/// docs/observability.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Keep the counters file.
    pub enabled: bool,
    /// Its path (`None`: `counters` in the `[ipc]` directory; no file without one).
    pub file: Option<PathBuf>,
    /// Where `keel run`'s side thread serves `/metrics`, `/health` and the live page
    /// (`None`: no side thread).
    pub http: Option<std::net::SocketAddr>,
    /// Alert thresholds (`[alerts]`).
    pub alerts: crate::monitor::alerts::AlertsConfig,
    /// Latency budgets (`[budget]`).
    pub budget: crate::monitor::alerts::BudgetConfig,
    /// The adaptive controller (`[control]`; it runs on the side thread).
    pub control: crate::monitor::control::ControlConfig,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            file: None,
            http: None,
            alerts: crate::monitor::alerts::AlertsConfig::default(),
            budget: crate::monitor::alerts::BudgetConfig::default(),
            control: crate::monitor::control::ControlConfig::default(),
        }
    }
}

impl EngineConfig {
    /// Where the counters file is (`None`: not kept).
    pub fn counters_file(&self) -> Option<PathBuf> {
        if !self.metrics.enabled {
            return None;
        }
        self.metrics
            .file
            .clone()
            .or_else(|| self.ipc.as_ref().map(|i| i.dir.join("counters")))
    }
}

/// The operator's side of `keel run` (the `[operator]` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorConfig {
    /// Where `keel ctl` finds the engine (`None`: `admin.sock` in the `[ipc]` directory).
    pub admin_socket: Option<PathBuf>,
    /// At SIGTERM/SIGINT, turn the kill switch on, cancel every open order and wait for the
    /// answers (at most `stop_timeout_ns`) before stopping. A second signal stops at once.
    pub cancel_on_stop: bool,
    /// How long a stop waits for the cancels' answers.
    pub stop_timeout_ns: u64,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        Self {
            admin_socket: None,
            cancel_on_stop: true,
            stop_timeout_ns: 5_000_000_000,
        }
    }
}

impl EngineConfig {
    /// Where the admin socket is: `[operator] admin_socket`, else `admin.sock` in the
    /// `[ipc]` directory, else in the journal's (`None`: neither is configured).
    pub fn admin_socket(&self) -> Option<PathBuf> {
        self.operator.admin_socket.clone().or_else(|| {
            self.ipc
                .as_ref()
                .map(|i| i.dir.join("admin.sock"))
                .or_else(|| self.journal.as_ref().map(|j| j.dir.join("admin.sock")))
        })
    }
}

/// Why the engine could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The journal could not be opened or replayed.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// The journal does not fit this configuration.
    #[error("journal restore: {0}")]
    Restore(#[from] crate::dispatch::RestoreError),
    /// The journal holds a protocol state the venue's protocol refuses.
    #[error("journal restore: venue {venue}: {why}")]
    ProtocolState {
        /// The venue.
        venue: u16,
        /// Why the protocol refused it.
        why: crate::session::protocol::StateError,
    },
    /// The dispatcher configuration is inconsistent.
    #[error("dispatcher: {0}")]
    Dispatcher(#[from] crate::dispatch::ConfigError),
    /// The wire log could not be opened.
    #[error(transparent)]
    WireLog(#[from] crate::wirelog::WireLogError),
    /// The counters file could not be made.
    #[error(transparent)]
    Counters(#[from] crate::metrics::CountersError),
    /// A shared-memory channel could not be created.
    #[error(transparent)]
    Ipc(#[from] crate::ipc::IpcError),
    /// The executor loop's transport could not start (io_uring or epoll; io_uring that is
    /// unavailable has already fallen back to epoll).
    #[error("transport: {0}")]
    Transport(#[from] crate::net::NetError),
    /// A feed could not be set up (its REST gate, its TLS settings).
    #[error("feed[{feed}]: {why}")]
    Feed {
        /// The feed, in `[[feed]]` order.
        feed: usize,
        /// Why.
        why: String,
    },
    /// More in-process strategies than configured.
    #[error("{asked} in-process strategies asked, {configured} configured")]
    Strategies {
        /// Asked.
        asked: u16,
        /// Configured (`dispatcher.strategies`).
        configured: u16,
    },
    /// A loop thread panicked (a bug); its message.
    #[error("engine loop panicked: {0}")]
    Panicked(String),
    /// Another engine holds the journal or IPC directory (its pid in the message).
    #[error(transparent)]
    Locked(#[from] lock::LockError),
}

/// What the journal gave back at start.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// The journal files' replay.
    pub journal: OpenReport,
    /// Orders restored live and in doubt.
    pub orders: RestoreReport,
    /// Per venue: the stream resumes after this sequence number.
    pub applied_through: Vec<u64>,
    /// Per strategy: ClientOrderId sequences at or below this were used before.
    pub id_floor: Vec<u64>,
}

/// One venue link's figures at stop.
#[derive(Debug, Clone, Copy)]
pub struct LinkReport {
    /// Session state at stop.
    pub state: LinkState,
    /// Transport-level counters.
    pub link: LinkStats,
    /// Session counters (connects, syncs, reconciliations).
    pub session: SessionStats,
    /// Protocol client counters every protocol keeps.
    pub client: ClientStats,
    /// The link's protocol's own counters.
    pub protocol: crate::session::registry::AnyStats,
}

/// Everything the engine measured, at stop.
#[derive(Debug, Clone)]
pub struct EngineReport {
    /// Dispatcher counters.
    pub dispatch: DispatchStats,
    /// Every order still open in the table at stop.
    pub open_orders: Vec<Order>,
    /// Per venue link.
    pub links: Vec<LinkReport>,
    /// Per shared-memory strategy.
    pub bridges: Vec<(StrategyId, BridgeStats)>,
    /// Journal records written by this run (next index − first index).
    pub journal_records: u64,
    /// Per market-data feed.
    pub feeds: Vec<crate::feed::handler::FeedStats>,
    /// Transport polls that failed in the executor loop (counted, never discarded silently):
    /// any is worth a look at the reactor's configuration and the kernel.
    pub transport_poll_errors: u64,
    /// The transport the executor loop ran on (after any fallback; `None` for a loop built by
    /// `EngineBuilder::build`, whose caller chose it).
    pub transport: Option<TransportKind>,
}

/// State shared between the loops, the admin thread and the handle (atomics only).
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    /// Bit per venue: SYNCED as the dispatcher sees it.
    synced: AtomicU64,
    /// Dispatcher passes (liveness for the handle).
    passes: AtomicU64,
    /// Dispatcher passes that found nothing to do (the loop's spare time, for benchmarks and
    /// operators: `idle_passes / passes`).
    idle_passes: AtomicU64,
    /// Open orders in the dispatcher's table (published when it changes).
    open_orders: AtomicU64,
    /// Cancel-on-stop asked: the dispatcher turns the kill switch on and cancels everything.
    stop_cancel: AtomicBool,
    /// Cancel-on-stop runs the dispatcher loop has made (the open count is trusted after one).
    stop_cancel_runs: AtomicU64,
    /// Bit per venue: an operator asked for a reconnect (the executor loop takes it).
    reconnect: AtomicU64,
    /// Bit per venue: an operator asked to reconcile a READ-ONLY link (the executor loop
    /// takes it).
    reconcile: AtomicU64,
    /// Per venue: the link as the executor loop last published it.
    links: Vec<LinkShared>,
    /// The adaptive controller's off switch, once a controller runs (`keel ctl control`).
    control_off: std::sync::OnceLock<Arc<AtomicBool>>,
}

impl Shared {
    fn new(venues: usize) -> Self {
        Self {
            links: (0..venues).map(|_| LinkShared::default()).collect(),
            ..Self::default()
        }
    }

    /// Venue `v`'s published link (a blank one for a venue that is not configured).
    fn link(&self, v: VenueId) -> &LinkShared {
        static NONE: LinkShared = LinkShared {
            state: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            last_os_error: AtomicU64::new(0),
            position_mismatches: AtomicU64::new(0),
        };
        self.links.get(usize::from(v.0)).unwrap_or(&NONE)
    }
}

/// One venue link as the executor loop publishes it (on change) for the admin thread.
#[derive(Debug, Default)]
struct LinkShared {
    /// `LinkState` as `metrics::engine::link_state_code` writes it.
    state: AtomicU64,
    connects: AtomicU64,
    connect_failures: AtomicU64,
    last_os_error: AtomicU64,
    /// Symbols whose position differed from the venue's at the last reconciliation.
    position_mismatches: AtomicU64,
}

impl LinkShared {
    fn publish(&self, state: LinkState, connects: u64, failures: u64, os_error: i32) {
        let code = crate::metrics::engine::link_state_code(state);
        self.state.store(code, Ordering::Relaxed);
        self.connects.store(connects, Ordering::Relaxed);
        self.connect_failures.store(failures, Ordering::Relaxed);
        self.last_os_error
            .store(os_error as u32 as u64, Ordering::Relaxed);
    }

    fn state_name(&self) -> &'static str {
        crate::metrics::engine::link_state_text(self.state.load(Ordering::Relaxed))
    }
}

/// Starts an engine. See the module docs.
#[derive(Debug)]
pub struct EngineBuilder {
    config: EngineConfig,
    in_process: u16,
    /// One feed handler per configured market-data feed (subscribers are added before start).
    feeds: Vec<crate::feed::handler::FeedHandler>,
    /// A feed that could not be built, reported by `build`/`start`.
    feed_error: Option<EngineError>,
}

impl EngineBuilder {
    /// An engine for `config`. By default every configured strategy is served over shared
    /// memory if `[ipc]` is configured, else in process.
    pub fn new(config: EngineConfig) -> Self {
        let in_process = if config.ipc.is_some() {
            0
        } else {
            config.dispatcher.strategies
        };
        let mut feed_error = None;
        let feeds = config
            .feeds
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, f)| {
                crate::feed::handler::FeedHandler::with_snapshots(f.clone(), 0).unwrap_or_else(
                    |e| {
                        feed_error.get_or_insert(EngineError::Feed {
                            feed: i,
                            why: e.to_string(),
                        });
                        crate::feed::handler::FeedHandler::new(f)
                    },
                )
            })
            .collect();
        Self {
            config,
            in_process,
            feeds,
            feed_error,
        }
    }

    /// A market-data subscriber of feed `feed` (in `[[feed]]` order) for an in-process
    /// strategy: conflated tops of book and up to `trade_capacity` unread trades. `None` if no
    /// such feed is configured.
    pub fn market_data(
        &mut self,
        feed: usize,
        trade_capacity: usize,
    ) -> Option<crate::feed::fanout::Subscriber> {
        Some(self.feeds.get_mut(feed)?.subscribe(trade_capacity))
    }

    /// Serves strategies `0..n` in process; the rest over shared memory.
    pub fn in_process_strategies(mut self, n: u16) -> Self {
        self.in_process = n;
        self
    }

    /// Overrides the topology.
    pub fn topology(mut self, topology: Topology) -> Self {
        self.config.loops.topology = topology;
        self
    }

    /// Overrides the transport.
    pub fn transport(mut self, transport: TransportKind) -> Self {
        self.config.loops.transport = transport;
        self
    }

    /// Overrides the idle policy of every loop.
    pub fn idle(mut self, idle: IdlePolicy) -> Self {
        self.config.loops.idle = idle;
        self.config.loops.executor_idle = idle;
        self
    }

    /// Restores the journal (if configured) and builds every part but the transport: the
    /// dispatcher, the venue links (through [`build_link`]), the feed handlers, the strategy
    /// channels and bridges. Shared by [`EngineBuilder::build`] and [`EngineBuilder::start`].
    fn assemble(self, now_ns: u64) -> Result<Parts, EngineError> {
        if let Some(e) = self.feed_error {
            return Err(e);
        }
        let config = self.config;
        let mut feeds = self.feeds;
        let strategies = config.dispatcher.strategies;
        if self.in_process > strategies {
            return Err(EngineError::Strategies {
                asked: self.in_process,
                configured: strategies,
            });
        }
        let loops = config.loops;
        let mut handles = Vec::new();
        let mut ports = Vec::new();
        for _ in 0..strategies {
            let (handle, port) = strategy_channel(loops.strategy_ring, loops.strategy_ring);
            handles.push(handle);
            ports.push(port);
        }
        let (mut links, venue_ports) = venue_links(&config, now_ns);
        let wire_log = match &config.wire_log {
            Some(w) => {
                let names: Vec<String> = config.venues.iter().map(|v| v.name.clone()).collect();
                let unix_origin = TscClock::new().unix_ns_at_origin();
                let (taps, writer) = crate::wirelog::wire_log(w, &names, unix_origin);
                for (link, tap) in links.iter_mut().zip(taps) {
                    link.attach_wire_tap(tap);
                }
                Some(writer)
            }
            None => None,
        };
        let mut dispatcher = Dispatcher::new(config.dispatcher, ports, venue_ports, now_ns)?;
        for &(strategy, quota) in &config.strategy_quotas {
            dispatcher
                .set_strategy_quota(strategy, quota, now_ns)
                .map_err(crate::dispatch::ConfigError::from)?;
        }
        let mut restored = Restored {
            applied_through: vec![0; links.len()],
            id_floor: vec![0; usize::from(strategies)],
            ..Restored::default()
        };
        // One engine per journal and per IPC directory, before either is touched.
        let locks = lock::lock_dirs(
            config.journal.as_ref().map(|j| j.dir.as_path()),
            config.ipc.as_ref().map(|i| i.dir.as_path()),
        )?;
        // Channels before the journal: from this moment their headers say "starting, nothing
        // SYNCED" with this engine's pid, never a dead engine's state (a start that fails from
        // here on leaves them "stopped": see `Channel`'s drop).
        let mut channels = Vec::new();
        if let Some(ipc) = &config.ipc {
            for s in self.in_process..strategies {
                let channel = crate::ipc::Channel::create_or_attach(
                    &ipc.channel_path(StrategyId(s)),
                    StrategyId(s),
                    ipc.command_capacity,
                    ipc.event_capacity,
                )?;
                // Symbols and venues by name, before the header says "running": a strategy
                // resolves names here and is refused if built against another table.
                let venue_names: Vec<&[u8]> =
                    config.venues.iter().map(|v| v.name.as_bytes()).collect();
                channel.publish_names(&config.symbols, &venue_names);
                channels.push(channel);
            }
        }
        // Each feed's books and trades for strategies in other processes.
        if let Some(ipc) = &config.ipc {
            for (i, feed) in feeds.iter_mut().enumerate() {
                feed.attach_market_data(crate::ipc::md::MdWriter::create(
                    &ipc.market_data_path(i),
                    u32::from(u16::try_from(config.symbols.len()).unwrap_or(u16::MAX)),
                    ipc.market_data_trades,
                )?);
            }
        }
        let mut channels = channels.into_iter();
        let first_journal_index = match &config.journal {
            Some(jc) => restore(jc, &mut dispatcher, &mut links, &mut restored)?,
            None => 0,
        };
        // Strategies beyond the in-process ones talk over shared memory.
        let mut bridges = Vec::new();
        let mut in_process: Vec<Option<StrategyHandle>> = Vec::new();
        for (i, handle) in handles.into_iter().enumerate() {
            match &config.ipc {
                Some(ipc) if i >= usize::from(self.in_process) => {
                    let channel = channels.next().expect("one channel per strategy served");
                    let floor = restored.id_floor[i];
                    bridges.push(bridge(channel, handle, ipc, now_ns, (floor, &dispatcher)));
                    in_process.push(None);
                }
                _ => in_process.push(Some(handle)),
            }
        }
        let shared = Arc::new(Shared::new(links.len()));
        // The restored open orders, before the first pass: a stop that comes at once must not
        // read 0 and leave them working.
        shared.open_orders.store(
            u64::from(dispatcher.table().open_count()),
            Ordering::Release,
        );
        let (counters, front_metrics, exec_metrics) = match config.counters_file() {
            Some(path) => {
                let metric_names = crate::metrics::engine::MetricNames {
                    venues: config.venues.iter().map(|v| v.name.clone()).collect(),
                    symbols: config
                        .symbols
                        .iter()
                        .map(|s| String::from_utf8_lossy(s).trim_end().to_string())
                        .collect(),
                    strategies,
                    feeds: config
                        .feeds
                        .iter()
                        .map(|f| {
                            matches!(f.snapshot, crate::feed::handler::SnapshotSource::Rest(_))
                        })
                        .collect(),
                };
                let (layout, front_slots, exec_slots) =
                    crate::metrics::engine::layout(&metric_names)?;
                let unix = TscClock::new().unix_ns_at_origin().saturating_add(now_ns);
                let (file, mut writers) = crate::metrics::CountersFile::create(
                    &path,
                    &layout,
                    u64::from(std::process::id()),
                    unix,
                )?;
                let exec_writer = writers.pop().expect("two regions");
                let front_writer = writers.pop().expect("two regions");
                (
                    Some(file),
                    Some(crate::metrics::engine::FrontMetrics::new(
                        front_writer,
                        front_slots,
                    )),
                    Some(crate::metrics::engine::ExecMetrics::new(
                        exec_writer,
                        exec_slots,
                    )),
                )
            }
            None => (None, None, None),
        };
        let (admin_port, admin) = admin::admin_channel();
        let (control_port, control) = control::control_channel();
        let (front_log, front_log_rx) = crate::log::log_ring();
        let (exec_log, exec_log_rx) = crate::log::log_ring();
        let names = admin::AdminNames {
            symbols: config
                .symbols
                .iter()
                .map(|s| String::from_utf8_lossy(s).trim_end().to_string())
                .collect(),
            venues: config.venues.iter().map(|v| v.name.clone()).collect(),
            strategies,
        };
        let front = Front::new(
            dispatcher,
            bridges,
            Arc::clone(&shared),
            first_journal_index,
            locks,
            admin_port,
            control_port,
            front_log,
            front_metrics,
            now_ns,
        );
        let reactor = ReactorConfig {
            // A connection per link and feed, a feed's REST connections, and spares.
            conns_max: (links.len() as u32
                + feeds.len() as u32
                + config
                    .feeds
                    .iter()
                    .map(|f| match &f.snapshot {
                        crate::feed::handler::SnapshotSource::Rest(r) => r.connections as u32,
                        crate::feed::handler::SnapshotSource::Ws => 0,
                    })
                    .sum::<u32>()
                + 2)
            .max(4),
            ..loops.reactor
        };
        Ok(Parts {
            front,
            links,
            feeds,
            strategies: in_process,
            restored,
            shared,
            loops,
            reactor,
            admin,
            control,
            exec_log,
            log_rings: vec![front_log_rx, exec_log_rx],
            names,
            wire_log,
            counters,
            exec_metrics,
            journal_dir: config.journal.as_ref().map(|j| j.dir.clone()),
        })
    }

    /// Builds the engine as one loop over `transport`, for a caller that drives it with its
    /// own clock: the deterministic simulation (over the simulated network), tests and
    /// benchmarks. Each [`EngineLoop::pass`] is one pass of the `inline` topology's loop —
    /// the same code `keel run` runs — with nothing spawned and no clock read.
    pub fn build<T: Transport>(
        self,
        transport: T,
        now_ns: u64,
    ) -> Result<EngineLoop<T>, EngineError> {
        let parts = self.assemble(now_ns)?;
        // No admin thread and no logger here: the loop's records wait in (then overflow and
        // are counted by) their rings, exactly as the running loop hands them over.
        let mut exec = Executor::new(
            transport,
            parts.links,
            parts.feeds,
            None,
            parts.shared,
            parts.exec_log,
            now_ns,
        );
        exec.attach_metrics(parts.exec_metrics);
        let mut engine = EngineLoop::new(parts.front, exec, parts.strategies, parts.restored);
        engine.keep_counters(parts.counters);
        engine.keep_control(parts.control);
        if let Some(writer) = parts.wire_log {
            engine.run_wire_log(writer)?;
        }
        Ok(engine)
    }

    /// Says which seed each link's and feed's jitter draws from (the OS's unless the file set
    /// one), so a run can be replayed by setting them.
    fn log_seeds(&self) {
        for v in &self.config.venues {
            tracing::info!(
                target: "keel::venue",
                venue = v.name.as_str(),
                jitter_seed = v.link.session.jitter_seed.value(),
                "reconnect jitter seed (set [[venue]] jitter_seed to this to replay the run)"
            );
        }
        for (i, f) in self.config.feeds.iter().enumerate() {
            tracing::info!(
                target: "keel::feed",
                feed = i,
                seed = f.seed.value(),
                "reconnect and retry jitter seed (set [[feed]] seed to this to replay the run)"
            );
        }
    }

    /// Restores the journal (if configured), builds every part, starts the loops.
    pub fn start(self) -> Result<RunningEngine, EngineError> {
        self.log_seeds();
        let tls = exec_tls(&self.config.feeds)?;
        let clock = TscClock::new();
        let parts = self.assemble(clock.now_ns())?;
        let Parts {
            mut front,
            links,
            feeds,
            strategies,
            restored,
            shared,
            loops,
            reactor,
            admin,
            control,
            exec_log,
            log_rings,
            names,
            wire_log,
            counters,
            exec_metrics,
            journal_dir,
        } = parts;
        let log_stop = Arc::new(AtomicBool::new(false));
        let wire_thread = match wire_log {
            Some(mut writer) => {
                writer.open()?;
                let stop = Arc::clone(&log_stop);
                Some(
                    std::thread::Builder::new()
                        .name("keel-wire".into())
                        .spawn(move || writer.run(&stop, std::time::Duration::from_millis(2)))
                        .expect("spawning the wire log thread"),
                )
            }
            None => None,
        };
        let logger = {
            let logger = crate::log::Logger::new(
                log_rings,
                crate::log::LogNames {
                    venues: names.venues.clone(),
                    journal_dir: journal_dir.clone(),
                },
            );
            let stop = Arc::clone(&log_stop);
            std::thread::Builder::new()
                .name("keel-logger".into())
                .spawn(move || logger.run(&stop, std::time::Duration::from_millis(5)))
                .expect("spawning the logger thread")
        };
        let threads = match loops.topology {
            Topology::Inline => {
                let shared = Arc::clone(&shared);
                vec![spawn("keel-engine", move || {
                    prepare_loop(loops.dispatcher_core, loops.idle);
                    let run = Inline {
                        front,
                        links,
                        feeds,
                        shared,
                        log: exec_log,
                        metrics: exec_metrics,
                        idle: loops.idle,
                    };
                    let mut body = LoopBody {
                        run: Some(run),
                        config: reactor,
                        tls,
                    };
                    crate::net::on_transport(loops.transport, "keel", &mut body)?
                })]
            }
            Topology::Split => {
                // One executor loop serves every venue: one heartbeat, a watchdog per venue.
                let (heartbeat, watchdog) = LoopHeartbeat::new(loops.executor_stall_ns);
                for v in 1..links.len() {
                    let dog = heartbeat.watchdog(loops.executor_stall_ns);
                    front.dispatcher.attach_watchdog(VenueId(v as u16), dog);
                }
                front.dispatcher.attach_watchdog(VenueId(0), watchdog);
                let exec_shared = Arc::clone(&shared);
                let executor = spawn("keel-executor", move || {
                    prepare_loop(loops.executor_core, loops.executor_idle);
                    let run = ExecutorOnly {
                        links,
                        feeds,
                        heartbeat,
                        shared: exec_shared,
                        log: exec_log,
                        metrics: exec_metrics,
                        idle: loops.executor_idle,
                    };
                    let mut body = LoopBody {
                        run: Some(run),
                        config: reactor,
                        tls,
                    };
                    crate::net::on_transport(loops.transport, "keel", &mut body)?
                });
                let front_shared = Arc::clone(&shared);
                let dispatcher = spawn("keel-dispatcher", move || {
                    prepare_loop(loops.dispatcher_core, loops.idle);
                    let clock = TscClock::new();
                    let mut idler = Idler::new(loops.idle);
                    while !front_shared.stop.load(Ordering::Relaxed) {
                        if front.pass_clocked(clock.now_ns(), &clock) {
                            idler.work();
                        } else {
                            front_shared.idle_passes.fetch_add(1, Ordering::Relaxed);
                            idler.idle();
                        }
                    }
                    Ok(Halves {
                        front: Some(front.finish(clock.now_ns())),
                        links: Vec::new(),
                        feeds: Vec::new(),
                        poll_errors: 0,
                        transport: None,
                    })
                });
                vec![dispatcher, executor]
            }
        };
        if let Some(c) = &counters {
            c.set_state(2);
        }
        Ok(RunningEngine {
            strategies,
            shared,
            threads,
            restored,
            admin: Some(admin),
            control: Some(control),
            names,
            logger: Some(logger),
            log_stop,
            admin_thread: None,
            wire_thread,
            counters,
        })
    }
}

/// Everything [`EngineBuilder::assemble`] builds: the parts of the loops but the transport
/// (an io_uring ring must be created by the thread that uses it).
struct Parts {
    front: Front,
    links: Vec<EngineLink>,
    feeds: Vec<FeedHandler>,
    strategies: Vec<Option<StrategyHandle>>,
    restored: Restored,
    shared: Arc<Shared>,
    loops: LoopConfig,
    reactor: ReactorConfig,
    /// The admin thread's end of the operator rings.
    admin: admin::AdminClient,
    /// The adaptive controller's end of the control ring.
    control: control::ControlSender,
    /// The executor loop's log ring (the dispatcher loop's is in `front`).
    exec_log: crate::log::LogTx,
    /// The logger's ends of both.
    log_rings: Vec<crate::log::LogRx>,
    names: admin::AdminNames,
    /// The wire log's writer, if one is configured (run by a side thread).
    wire_log: Option<crate::wirelog::WireLogWriter>,
    /// The counters file, if kept, and the executor loop's publisher into it.
    counters: Option<crate::metrics::CountersFile>,
    exec_metrics: Option<crate::metrics::engine::ExecMetrics>,
    /// The journal's directory (for the log's advice).
    journal_dir: Option<PathBuf>,
}

type LoopResult = Result<Halves, EngineError>;

/// What each loop hands back at stop.
struct Halves {
    front: Option<FrontReport>,
    links: Vec<LinkReport>,
    feeds: Vec<crate::feed::handler::FeedStats>,
    /// Transport polls that failed in the executor loop (counted, the loop carries on).
    poll_errors: u64,
    /// The executor loop's transport.
    transport: Option<TransportKind>,
}

impl Halves {
    fn of<T: Transport>(
        front: Option<Front>,
        exec: Executor<T>,
        kind: TransportKind,
        now_ns: u64,
    ) -> Self {
        let poll_errors = exec.poll_errors();
        let (links, feeds) = exec.finish(now_ns);
        Self {
            front: front.map(|f| f.finish(now_ns)),
            links,
            feeds,
            poll_errors,
            transport: Some(kind),
        }
    }
}

/// TLS for the executor's transport: the client settings the TLS feeds share and the
/// addresses (market data, REST) that use them.
#[derive(Debug, Clone)]
pub(crate) struct ExecTls {
    client: Arc<rustls::ClientConfig>,
    destinations: Vec<(std::net::SocketAddr, rustls::pki_types::ServerName<'static>)>,
}

/// The TLS the feeds ask for (`[[feed]] tls = true`), or `None`. Every TLS feed must name the
/// same CA file (one trust store per transport).
pub(crate) fn exec_tls(
    feeds: &[crate::feed::handler::FeedConfig],
) -> Result<Option<ExecTls>, EngineError> {
    let mut ca: Option<(usize, Option<&std::path::Path>)> = None;
    let mut destinations = Vec::new();
    for (i, f) in feeds.iter().enumerate() {
        let Some(tls) = &f.tls else { continue };
        let this = tls.ca_file.as_deref();
        match ca {
            Some((first, theirs)) if theirs != this => {
                return Err(EngineError::Feed {
                    feed: i,
                    why: format!(
                        "tls_ca_file {:?} differs from feed[{first}]'s {:?}: every TLS feed \
                         trusts the same CAs",
                        this, theirs
                    ),
                })
            }
            _ => ca = Some((ca.map_or(i, |c| c.0), this)),
        }
        let name =
            crate::net::tls::server_name(&tls.server_name).map_err(|e| EngineError::Feed {
                feed: i,
                why: e.to_string(),
            })?;
        for addr in std::iter::once(f.addr).chain(f.alternates.iter().copied()) {
            destinations.push((addr, name.clone()));
        }
        if let crate::feed::handler::SnapshotSource::Rest(r) = &f.snapshot {
            destinations.push((r.address, name));
        }
    }
    let Some((first, ca_file)) = ca else {
        return Ok(None);
    };
    let client = crate::net::tls::client_config(ca_file).map_err(|e| EngineError::Feed {
        feed: first,
        why: e.to_string(),
    })?;
    Ok(Some(ExecTls {
        client,
        destinations,
    }))
}

/// A loop thread's body for [`crate::net::on_transport`]: opens the transport with the
/// engine's settings (wrapped in TLS when a feed asks for it) and runs the loop on it, once.
struct LoopBody<R> {
    run: Option<R>,
    config: ReactorConfig,
    tls: Option<ExecTls>,
}

/// A loop that runs on any transport (the inline thread, the split topology's executor).
trait RunOn {
    fn run_on<T: Transport>(self, transport: T, kind: TransportKind) -> LoopResult;
}

impl RunOn for Inline {
    fn run_on<T: Transport>(self, transport: T, kind: TransportKind) -> LoopResult {
        self.run(transport, kind)
    }
}

impl RunOn for ExecutorOnly {
    fn run_on<T: Transport>(self, transport: T, kind: TransportKind) -> LoopResult {
        self.run(transport, kind)
    }
}

impl<R: RunOn> crate::net::OnTransport for LoopBody<R> {
    type Output = LoopResult;
    fn run<T: SocketTransport>(&mut self) -> Result<LoopResult, crate::net::NetError> {
        let transport = T::open(self.config)?;
        let run = self
            .run
            .take()
            .expect("a loop body runs once it opened its transport");
        Ok(match self.tls.take() {
            None => run.run_on(transport, T::KIND),
            Some(tls) => match wrap_tls(transport, tls) {
                Ok(t) => run.run_on(t, T::KIND),
                Err(e) => Err(e),
            },
        })
    }
}

/// The executor's transport wrapped in TLS for the feeds that ask for it (the venue links'
/// plaintext connections pass through it).
fn wrap_tls<T: Transport>(inner: T, tls: ExecTls) -> Result<crate::net::Tls<T>, EngineError> {
    let mut t = crate::net::Tls::new(
        inner,
        crate::net::TlsConfig {
            client: Some(tls.client),
            ..crate::net::TlsConfig::default()
        },
    );
    for (addr, name) in tls.destinations {
        t.add_destination(addr, name)
            .map_err(|e| EngineError::Feed {
                feed: 0,
                why: e.to_string(),
            })?;
    }
    Ok(t)
}

/// The `inline` topology's thread: one [`EngineLoop`] over the transport it opened.
struct Inline {
    front: Front,
    links: Vec<EngineLink>,
    feeds: Vec<FeedHandler>,
    shared: Arc<Shared>,
    log: crate::log::LogTx,
    metrics: Option<crate::metrics::engine::ExecMetrics>,
    idle: IdlePolicy,
}

impl Inline {
    fn run<T: Transport>(self, transport: T, kind: TransportKind) -> LoopResult {
        let clock = TscClock::new();
        let mut exec = Executor::new(
            transport,
            self.links,
            self.feeds,
            None,
            Arc::clone(&self.shared),
            self.log,
            clock.now_ns(),
        );
        exec.attach_metrics(self.metrics);
        let mut engine = EngineLoop::new(self.front, exec, Vec::new(), Restored::default());
        let mut idler = Idler::new(self.idle);
        while !self.shared.stop.load(Ordering::Relaxed) {
            if engine.pass_clocked(&clock) {
                idler.work();
            } else {
                self.shared.idle_passes.fetch_add(1, Ordering::Relaxed);
                idler.idle();
            }
        }
        let (front, mut exec) = engine.into_halves();
        log_out(&mut exec, &clock);
        Ok(Halves::of(Some(front), exec, kind, clock.now_ns()))
    }
}

/// The `split` topology's executor thread.
struct ExecutorOnly {
    links: Vec<EngineLink>,
    feeds: Vec<FeedHandler>,
    heartbeat: LoopHeartbeat,
    shared: Arc<Shared>,
    log: crate::log::LogTx,
    metrics: Option<crate::metrics::engine::ExecMetrics>,
    idle: IdlePolicy,
}

impl ExecutorOnly {
    fn run<T: Transport>(self, transport: T, kind: TransportKind) -> LoopResult {
        let clock = TscClock::new();
        let now = clock.now_ns();
        let mut exec = Executor::new(
            transport,
            self.links,
            self.feeds,
            Some(self.heartbeat),
            Arc::clone(&self.shared),
            self.log,
            now,
        );
        exec.attach_metrics(self.metrics);
        let mut idler = Idler::new(self.idle);
        while !self.shared.stop.load(Ordering::Relaxed) {
            if exec.pass(clock.now_ns()) {
                idler.work();
            } else {
                idler.idle();
            }
        }
        log_out(&mut exec, &clock);
        Ok(Halves::of(None, exec, kind, clock.now_ns()))
    }
}

/// A shared-memory strategy's bridge, its channel given the journal's id floor; a strategy
/// whose orders the journal restored live must attach within `restored_attach_timeout_ns` or
/// is treated as lost.
fn bridge(
    channel: crate::ipc::Channel,
    handle: StrategyHandle,
    ipc: &IpcConfig,
    now_ns: u64,
    (id_floor, dispatcher): (u64, &Dispatcher),
) -> Bridge {
    let strategy = channel.strategy();
    channel.set_id_floor(id_floor);
    let restored_open = dispatcher.table().first_open(strategy).is_some();
    let mut bridge = Bridge::new(channel, handle, ipc, now_ns);
    if restored_open {
        bridge.await_attach(now_ns.saturating_add(ipc.restored_attach_timeout_ns));
    }
    bridge
}

/// A graceful stop's goodbye to every venue (see `Executor::log_out`), said in the log.
fn log_out<T: Transport>(exec: &mut Executor<T>, clock: &TscClock) {
    let (asked, answered) = exec.log_out(clock);
    if asked > answered {
        tracing::warn!(
            target: "keel::stop",
            logouts_sent = asked,
            answered,
            wait_ms = event_loop::LOGOUT_WAIT_NS / 1_000_000,
            "stopping: {} venue(s) did not answer keel's Logout in time; their connections close \
             with the process",
            asked - answered
        );
    } else if asked > 0 {
        tracing::info!(
            target: "keel::stop",
            logouts_sent = asked,
            "stopping: logged out of {asked} venue session(s), each answered"
        );
    }
}

/// Pins the calling loop thread (warns if it cannot) and, for a loop that parks when idle,
/// tightens its timer slack so a park costs microseconds, not the kernel's default 50 µs.
fn prepare_loop(core: Option<usize>, idle: IdlePolicy) {
    if let Some(core) = core {
        pin_or_warn(core);
    }
    if matches!(idle, IdlePolicy::BackoffPark { .. }) {
        let _ = tighten_timer_slack(1_000);
    }
}

fn spawn(name: &str, body: impl FnOnce() -> LoopResult + Send + 'static) -> JoinHandle<LoopResult> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .expect("spawning an engine thread")
}

/// A running engine: take the in-process strategies' handles, watch it, stop it.
#[derive(Debug)]
pub struct RunningEngine {
    strategies: Vec<Option<StrategyHandle>>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<LoopResult>>,
    restored: Restored,
    /// The operator rings' far end, until an admin thread takes it.
    admin: Option<admin::AdminClient>,
    /// The control ring's far end, until the adaptive controller takes it.
    control: Option<control::ControlSender>,
    names: admin::AdminNames,
    logger: Option<JoinHandle<()>>,
    log_stop: Arc<AtomicBool>,
    admin_thread: Option<JoinHandle<()>>,
    wire_thread: Option<JoinHandle<()>>,
    /// The counters file (its state word says running, then stopped).
    counters: Option<crate::metrics::CountersFile>,
}

impl RunningEngine {
    /// The in-process strategy's handle (once; `None` if taken or served over IPC).
    pub fn take_strategy(&mut self, strategy: StrategyId) -> Option<StrategyHandle> {
        self.strategies.get_mut(usize::from(strategy.0))?.take()
    }

    /// Whether the dispatcher sees venue `v` SYNCED.
    pub fn venue_synced(&self, v: VenueId) -> bool {
        v.0 < 64 && self.shared.synced.load(Ordering::Acquire) & (1 << v.0) != 0
    }

    /// Connections venue `v`'s link has made so far, as its executor loop last published
    /// them (0 for a venue that is not configured). Monotonic: a test that provoked a drop
    /// waits for this to pass its earlier value, a fact no fast reconnect can hide.
    pub fn venue_connects(&self, v: VenueId) -> u64 {
        self.shared.link(v).connects.load(Ordering::Relaxed)
    }

    /// Dispatcher passes so far.
    pub fn passes(&self) -> u64 {
        self.shared.passes.load(Ordering::Relaxed)
    }

    /// Dispatcher passes that found nothing to do (of [`Self::passes`]): the loop's spare
    /// time. A loop that is never idle under load is at its ceiling.
    pub fn idle_passes(&self) -> u64 {
        self.shared.idle_passes.load(Ordering::Relaxed)
    }

    /// What the journal gave back.
    pub fn restored(&self) -> &Restored {
        &self.restored
    }

    /// The control ring's sender, for the adaptive controller (once).
    pub fn take_control(&mut self) -> Option<control::ControlSender> {
        self.control.take()
    }

    /// Hands the running controller's off switch to `keel ctl control on|off` (once).
    pub fn set_control_switch(&self, off: Arc<AtomicBool>) {
        let _ = self.shared.control_off.set(off);
    }

    /// Opens the admin socket at `path` and serves `keel ctl` on it from a thread of its
    /// own until the engine stops (once; later calls do nothing and return `Ok(None)`).
    pub fn serve_admin(
        &mut self,
        path: &std::path::Path,
    ) -> Result<Option<Arc<admin::AdminCounters>>, admin::AdminSocketError> {
        let Some(client) = self.admin.take() else {
            return Ok(None);
        };
        let server =
            admin::AdminServer::bind(path, client, self.names.clone(), Arc::clone(&self.shared))?;
        let counters = server.counters();
        self.admin_thread = Some(
            std::thread::Builder::new()
                .name("keel-admin".into())
                .spawn(move || server.run())
                .expect("spawning the admin thread"),
        );
        Ok(Some(counters))
    }

    /// Cancel-on-stop: the kill switch goes on and every open order is canceled (again every
    /// 100 ms, so orders in doubt are canceled once resolved). Watch [`Self::open_orders`].
    pub fn cancel_everything(&self) {
        self.shared.stop_cancel.store(true, Ordering::Release);
    }

    /// Open orders in the dispatcher's table, as last published by its loop.
    pub fn open_orders(&self) -> u64 {
        self.shared.open_orders.load(Ordering::Acquire)
    }

    /// Cancel-on-stop runs the dispatcher loop has made since [`Self::cancel_everything`]
    /// (0: not yet; [`Self::open_orders`] is what the last left open).
    pub fn cancel_runs(&self) -> u64 {
        self.shared.stop_cancel_runs.load(Ordering::Acquire)
    }

    /// Whether a loop has ended on its own (an error or a panic; `stop` says which).
    pub fn has_failed(&self) -> bool {
        self.threads.iter().any(JoinHandle::is_finished)
    }

    /// Stops every loop (the journal is synced) and returns what they measured.
    pub fn stop(self) -> Result<EngineReport, EngineError> {
        self.shared.stop.store(true, Ordering::Release);
        let mut report = EngineReport {
            dispatch: DispatchStats::default(),
            open_orders: Vec::new(),
            links: Vec::new(),
            bridges: Vec::new(),
            journal_records: 0,
            feeds: Vec::new(),
            transport_poll_errors: 0,
            transport: None,
        };
        let mut first_error = None;
        for t in self.threads {
            match t.join() {
                Ok(Ok(halves)) => {
                    if let Some(front) = halves.front {
                        report.dispatch = front.dispatch;
                        report.open_orders = front.open_orders;
                        report.bridges = front.bridges;
                        report.journal_records = front.journal_records;
                    }
                    report.links.extend(halves.links);
                    report.feeds.extend(halves.feeds);
                    report.transport_poll_errors += halves.poll_errors;
                    report.transport = report.transport.or(halves.transport);
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown".into());
                    first_error.get_or_insert(EngineError::Panicked(what));
                }
            }
        }
        // The loops are done: the logger writes what they left, the admin thread has seen
        // the stop flag.
        self.log_stop.store(true, Ordering::Release);
        if let Some(logger) = self.logger {
            let _ = logger.join();
        }
        if let Some(admin) = self.admin_thread {
            let _ = admin.join();
        }
        if let Some(wire) = self.wire_thread {
            let _ = wire.join();
        }
        if let Some(counters) = &self.counters {
            counters.set_state(3);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}

/// The journal restore, before the first pass: the journal is replayed into the dispatcher
/// (orders live and in doubt) and into each venue link's protocol (where its stream resumes,
/// its own state, positions, the open orders' wire references), and attached. Returns the
/// journal's next record index.
fn restore(
    jc: &crate::journal::JournalConfig,
    dispatcher: &mut Dispatcher,
    links: &mut [EngineLink],
    restored: &mut Restored,
) -> Result<u64, EngineError> {
    let mut recovery = Recovery::default();
    let (journal, report) = Journal::open(jc.clone(), |r| recovery.apply(r))?;
    restored.journal = report;
    restored.orders = dispatcher.restore(&recovery)?;
    for (venue, &seq) in &recovery.applied_through {
        if let Some(link) = links.get_mut(usize::from(venue.0)) {
            link.client_mut().resume_after(seq);
            restored.applied_through[usize::from(venue.0)] = seq;
        }
    }
    for (venue, state) in &recovery.protocol_state {
        if let Some(link) = links.get_mut(usize::from(venue.0)) {
            link.client_mut()
                .restore_state(state)
                .map_err(|why| EngineError::ProtocolState {
                    venue: venue.0,
                    why,
                })?;
        }
    }
    for (&(venue, symbol), &position) in &recovery.positions {
        // A position on a venue or symbol this configuration lacks: another desk's
        // journal, refused like an order routed nowhere.
        let link = links.get_mut(usize::from(venue.0)).ok_or(
            crate::dispatch::RestoreError::UnknownPosition(venue, symbol),
        )?;
        link.client_mut()
            .restore_position(symbol, position)
            .map_err(|_| crate::dispatch::RestoreError::UnknownPosition(venue, symbol))?;
    }
    for r in recovery.open.values() {
        // Routes were checked by `restore`.
        links[usize::from(r.order.venue.0)]
            .client_mut()
            .restore_order(&r.order, r.wire_ref, r.filled, r.accepted)
            .map_err(|_| crate::dispatch::RestoreError::SessionFull(r.order.id))?;
    }
    for (strategy, &next) in &recovery.next_sequence {
        if let Some(floor) = restored.id_floor.get_mut(usize::from(strategy.0)) {
            *floor = next.saturating_sub(1);
        }
    }
    let first_journal_index = journal.next_index();
    dispatcher.attach_journal(journal);
    Ok(first_journal_index)
}

/// The wall clock (Unix ns) at the loop clock's 0, when the loop clock reads `now_ns` now: for
/// what protocols stamp on the wire (FIX's SendingTime), read once at build. Never drives a
/// timeout.
fn unix_ns_at_loop_origin(now_ns: u64) -> u64 {
    use crate::clock::Clock;
    let tsc = crate::clock::TscClock::new();
    let unix_now = tsc.unix_ns_at_origin().saturating_add(tsc.now_ns());
    unix_now.saturating_sub(now_ns)
}

/// One link per configured venue, each with its channel to the dispatcher.
fn venue_links(
    config: &EngineConfig,
    now_ns: u64,
) -> (Vec<EngineLink>, Vec<crate::ring::VenuePort>) {
    let unix_ns_at_origin = unix_ns_at_loop_origin(now_ns);
    let ring = config.loops.venue_ring;
    config
        .venues
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (handle, port) = venue_channel(ring, ring);
            let venue = VenueId(i as u16);
            let link = build_link(v, venue, &config.symbols, handle, unix_ns_at_origin);
            (link, port)
        })
        .unzip()
}
