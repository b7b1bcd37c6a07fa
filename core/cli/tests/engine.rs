//! The engine as a user runs it: the builder with in-process strategies in both topologies,
//! restart from the journal, `keel run` serving strategies over shared memory (the Python
//! example and a Rust strategy), and kill -9 in the middle of a storm (on io_uring, epoll, and
//! AF_XDP across a veth pair between network namespaces, lossless and lossy).

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::config::EngineConfig;
use keel::dispatch::StrategyHandle;
use keel::engine::EngineBuilder;
use keel::ipc::{Channel, EngineState, IpcEvent};
use keel::net::TransportKind;
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, RefusalReason, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};
use keel::runtime::IdlePolicy;
use keel_venue::server::{VenueConfig, VenueServer};

mod common;

use common::peers::{Proc, KEEL};

/// The simulated venue in a thread of this process (stepped until dropped).
struct VenueThread {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<VenueServer>>,
    addr: std::net::SocketAddr,
}

impl VenueThread {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (tx, rx) = std::sync::mpsc::channel();
        // The io_uring ring belongs to the thread that submits to it: build it there.
        let thread = std::thread::spawn(move || {
            let mut venue = VenueServer::new(VenueConfig::default()).unwrap();
            tx.send(venue.local_addr()).unwrap();
            let clock = TscClock::new();
            while !flag.load(Ordering::Relaxed) {
                venue.step(clock.now_ns(), 1_000_000).unwrap();
            }
            venue
        });
        Self {
            stop,
            thread: Some(thread),
            addr: rx.recv().unwrap(),
        }
    }

    fn finish(mut self) -> VenueServer {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// The engine's layout in a test: its topology and its executor loop's transport.
#[derive(Debug, Clone, Copy)]
struct Layout {
    topology: &'static str,
    transport: TransportKind,
}

const INLINE: Layout = Layout {
    topology: "inline",
    transport: TransportKind::IoUring,
};

/// Every topology on every transport.
const LAYOUTS: [Layout; 4] = [
    INLINE,
    Layout {
        topology: "split",
        transport: TransportKind::IoUring,
    },
    Layout {
        topology: "inline",
        transport: TransportKind::Epoll,
    },
    Layout {
        topology: "split",
        transport: TransportKind::Epoll,
    },
];

fn config_text(venue: &str, journal: Option<&Path>, ipc: Option<&Path>, layout: Layout) -> String {
    let Layout {
        topology,
        transport,
    } = layout;
    let mut text = format!(
        "symbols = [\"AAPL\", \"MSFT\", \"AMZN\", \"NVDA\"]\n\
         [dispatcher]\nstrategies = 2\n\
         [dispatcher.bulkhead]\nin_flight_per_symbol_max = 512\nin_flight_per_venue_max = 2048\n\
         [engine]\ntopology = \"{topology}\"\ntransport = \"{transport}\"\nidle = \"backoff\"\n\
         [operator]\ncancel_on_stop = false\n"
    );
    if let Some(j) = journal {
        text += &format!("[journal]\ndir = \"{}\"\n", j.display());
    }
    if let Some(i) = ipc {
        text += &format!(
            "[ipc]\ndir = \"{}\"\nstrategy_timeout_ns = 500_000_000\n",
            i.display()
        );
    }
    text += &format!(
        "[[venue]]\nname = \"sim\"\naddress = \"{venue}\"\nusername = \"keel\"\npassword = \"keel\"\n\
         backoff_base_ns = 20_000_000\n\
         backoff_cap_ns = 200_000_000\n"
    );
    text
}

fn id(strategy: u16, seq: u64) -> ClientOrderId {
    ClientOrderId::new(StrategyId(strategy), seq).unwrap()
}

fn resting(id: ClientOrderId, symbol: u16) -> NewOrder {
    NewOrder {
        id,
        venue: VenueId(0),
        symbol: SymbolId(symbol),
        side: Side::Buy,
        price: Price::from_units(50, 0),
        qty: 3,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Pops events until `want` of `kind` (by discriminant) have been seen.
fn collect(handle: &mut StrategyHandle, seen: &mut HashMap<ClientOrderId, Vec<EventKind>>) {
    while let Ok(e) = handle.events.pop() {
        seen.entry(e.id).or_default().push(e.kind);
    }
}

fn count(seen: &HashMap<ClientOrderId, Vec<EventKind>>, what: fn(&EventKind) -> bool) -> usize {
    seen.values().filter(|v| v.iter().any(what)).count()
}

/// Places `orders`, waits until all are accepted, cancels the first `cancels` of them and
/// waits until those are canceled.
fn place_and_cancel(
    strategy: &mut StrategyHandle,
    seen: &mut HashMap<ClientOrderId, Vec<EventKind>>,
    orders: impl Iterator<Item = NewOrder>,
    cancels: usize,
) {
    let ids: Vec<ClientOrderId> = orders
        .map(|o| {
            strategy.commands.push(Command::New(o)).unwrap();
            o.id
        })
        .collect();
    wait_until("accepts", Duration::from_secs(10), || {
        collect(strategy, seen);
        count(seen, |k| matches!(k, EventKind::Accepted)) == ids.len()
    });
    for id in &ids[..cancels] {
        strategy.commands.push(Command::Cancel { id: *id }).unwrap();
    }
    wait_until("cancels", Duration::from_secs(10), || {
        collect(strategy, seen);
        count(seen, |k| matches!(k, EventKind::Canceled)) == cancels
    });
}

// Goal: the builder's engine trades for an in-process strategy in both topologies on both
// transports: orders are accepted, canceled, and nothing is left open in the table at stop.
#[test]
fn in_process_strategy_trades_inline_and_split() {
    for layout in LAYOUTS {
        let topology = format!("{layout:?}");
        let venue = VenueThread::start();
        let config =
            EngineConfig::from_toml(&config_text(&venue.addr.to_string(), None, None, layout))
                .unwrap();
        let mut engine = EngineBuilder::new(config)
            .idle(IdlePolicy::TEST)
            .start()
            .unwrap();
        let mut strategy = engine.take_strategy(StrategyId(0)).unwrap();
        assert!(engine.take_strategy(StrategyId(0)).is_none(), "taken once");
        wait_until("SYNCED", Duration::from_secs(10), || {
            engine.venue_synced(VenueId(0))
        });
        let mut seen = HashMap::new();
        let orders = (1..=50).map(|seq| resting(id(0, seq), (seq % 4) as u16));
        place_and_cancel(&mut strategy, &mut seen, orders, 50);
        // The loop's spare time is counted: a quiet loop has idle passes, never more than its
        // passes (read in that order, both only grow).
        let idle = engine.idle_passes();
        wait_until("idle passes", Duration::from_secs(10), || {
            engine.idle_passes() > idle + 100
        });
        let idle = engine.idle_passes();
        assert!(idle <= engine.passes(), "{topology}: {idle} idle passes");
        let report = engine.stop().unwrap();
        assert!(report.open_orders.is_empty(), "{topology}");
        assert_eq!(report.dispatch.sent_new, 50, "{topology}");
        assert_eq!(report.dispatch.sent_cancel, 50, "{topology}");
        assert_eq!(report.links.len(), 1);
        assert_eq!(report.transport, Some(layout.transport), "{topology}");
        assert_eq!(report.transport_poll_errors, 0, "{topology}");
        let venue = venue.finish();
        assert_eq!(venue.exchange().stats().accepted, 50);
        assert_eq!(venue.exchange().stats().canceled, 50);
    }
}

// Goal: an engine restarted on its journal (same venue, still running) brings back its open
// orders, refuses the old ids, resumes the venue's stream without applying a report twice,
// and ends with the same open orders as the venue.
#[test]
fn restart_restores_open_orders_and_refuses_old_ids() {
    let venue = VenueThread::start();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        &venue.addr.to_string(),
        Some(&dir.path().join("journal")),
        None,
        INLINE,
    );
    let start = || {
        EngineBuilder::new(EngineConfig::from_toml(&text).unwrap())
            .idle(IdlePolicy::TEST)
            .start()
            .unwrap()
    };
    let mut engine = start();
    let mut strategy = engine.take_strategy(StrategyId(1)).unwrap();
    wait_until("SYNCED", Duration::from_secs(10), || {
        engine.venue_synced(VenueId(0))
    });
    let mut seen = HashMap::new();
    let orders = (1..=20).map(|seq| resting(id(1, seq), 2));
    place_and_cancel(&mut strategy, &mut seen, orders, 5);
    let first = engine.stop().unwrap();
    assert_eq!(first.open_orders.len(), 15);
    // Intents and acks, five closes, and the venue session at the first login.
    assert_eq!(first.journal_records, 20 * 2 + 5 + 1);

    let mut engine = start();
    let restored = engine.restored().clone();
    assert_eq!(restored.orders.live, 15);
    assert_eq!(restored.orders.unknown, 0);
    assert_eq!(restored.id_floor[1], 20);
    assert!(restored.applied_through[0] >= 25, "{restored:?}");
    let mut strategy = engine.take_strategy(StrategyId(1)).unwrap();
    wait_until("SYNCED again", Duration::from_secs(10), || {
        engine.venue_synced(VenueId(0))
    });
    let mut seen = HashMap::new();
    // An id used before the restart is refused; a new one trades; a restored order cancels.
    strategy
        .commands
        .push(Command::New(resting(id(1, 7), 2)))
        .unwrap();
    strategy
        .commands
        .push(Command::New(resting(id(1, 21), 2)))
        .unwrap();
    strategy
        .commands
        .push(Command::Cancel { id: id(1, 6) })
        .unwrap();
    wait_until("answers", Duration::from_secs(10), || {
        collect(&mut strategy, &mut seen);
        seen.len() == 3
    });
    assert_eq!(
        seen[&id(1, 7)],
        [EventKind::Refused {
            reason: RefusalReason::DuplicateId
        }]
    );
    assert_eq!(seen[&id(1, 21)], [EventKind::Accepted]);
    assert_eq!(seen[&id(1, 6)], [EventKind::Canceled]);
    let second = engine.stop().unwrap();
    assert_eq!(second.dispatch.report_errors, 0, "{:?}", second.dispatch);
    assert_eq!(second.links[0].client.timeouts, 0);
    let keel_open: BTreeSet<String> = second
        .open_orders
        .iter()
        .map(|o| o.id.to_string())
        .collect();
    let venue = venue.finish();
    let venue_open: BTreeSet<String> = venue
        .exchange()
        .open_account_orders()
        .map(|o| {
            String::from_utf8_lossy(&o.fields.cl_ord_id)
                .trim()
                .to_string()
        })
        .collect();
    assert_eq!(keel_open.len(), 15);
    assert_eq!(keel_open, venue_open);
    assert_eq!(venue.exchange().stats().duplicate_ids, 0);
}

// ----- processes: `keel venue` and `keel run` ---------------------------------------------

/// `keel venue` on free ports: (process, order entry, control).
fn venue_process() -> (Proc, String, String) {
    let v = common::peers::venue(&["--flow-rate", "400"]);
    (v.proc, v.entry, v.control)
}

/// `keel venue` on free ports: (process, order entry, control, market data `ws://…/md`).
fn venue_process_md() -> (Proc, String, String, String) {
    let v = common::peers::venue(&["--flow-rate", "400"]);
    (v.proc, v.entry, v.control, v.md)
}

fn control(addr: &str, command: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("{command}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.starts_with("ok"), "{command}: {line}");
    line.trim_end().to_string()
}

/// A directory holding a `keel run` configuration for the venue at `entry` (journal and ipc in
/// the same directory), and the configuration's path.
fn keel_run_config(entry: &str, layout: Layout) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("keel.toml");
    let text = config_text(
        entry,
        Some(&dir.path().join("journal")),
        Some(&dir.path().join("ipc")),
        layout,
    );
    std::fs::write(&config, text).unwrap();
    (dir, config)
}

fn open_channel(path: &Path, epoch_above: u64) -> Channel {
    let mut channel = None;
    wait_until("the engine's channel", Duration::from_secs(10), || {
        channel = Channel::open(path)
            .ok()
            .filter(|c| c.engine_epoch() > epoch_above);
        channel.is_some()
    });
    channel.unwrap()
}

fn wait_synced(channel: &Channel) {
    wait_until("engine running and SYNCED", Duration::from_secs(15), || {
        channel.beat_strategy();
        channel.engine_state() == EngineState::Running && channel.venue_synced(VenueId(0))
    });
}

// Goal: through a running `keel run` (split topology, executor on epoll), the example strategy
// (examples/python/keel_strategy.py, trading itself in strategies.rs) built for another symbol
// order is refused at attach naming both tables, and sends nothing; a client that declares
// that table without checking it has its channel declared broken by the engine (fault 5,
// logged): none of its orders would reach NVDA as MSFT.
#[test]
fn a_strategy_built_for_another_table_is_refused_through_keel_run() {
    let (_venue, entry, _control) = venue_process();
    // The split topology with its executor on epoll (the other layouts: the tests around).
    let (dir, config) = keel_run_config(
        &entry,
        Layout {
            topology: "split",
            transport: TransportKind::Epoll,
        },
    );
    let log = dir.path().join("run.log");
    let engine = common::peers::keel_run(&config, &log);
    let path = dir.path().join("ipc").join("strategy-1");
    let _ = open_channel(&path, 0);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Process::new("python3")
        .env("PYTHONPATH", repo.join("sdk/python"))
        .arg(repo.join("examples/python/keel_strategy.py"))
        .arg(&path)
        .args(["--market-data", "/nonexistent", "--symbol", "NVDA"])
        .args(["--venue", "sim", "--table", "MSFT,AAPL,AMZN,NVDA"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("['MSFT', 'AAPL', 'AMZN', 'NVDA']")
            && stderr.contains("['AAPL', 'MSFT', 'AMZN', 'NVDA']"),
        "{stderr}"
    );
    let status = Process::new("python3")
        .env("PYTHONPATH", repo.join("sdk/python"))
        .arg("-c")
        .arg(
            "import keel, sys\n\
             ch = keel.Channel(sys.argv[1])\n\
             ch.wait_live()\n\
             ch._set('DECLARED_FINGERPRINT', keel.fingerprint(['MSFT', 'AAPL', 'AMZN', 'NVDA'], ['sim']))\n",
        )
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let channel = Channel::open(&path).unwrap();
    wait_until("the table-mismatch fault", Duration::from_secs(10), || {
        channel.published_fault().map(|f| f.code()) == Some(5)
    });
    let report = common::peers::stop_keel_run(engine, &log);
    assert!(report.contains("open orders: 0"), "{report}");
    assert!(
        std::fs::read_to_string(log.with_extension("err"))
            .unwrap()
            .contains("symbol/venue table"),
        "the broken channel is logged"
    );
}

/// A Rust strategy over shared memory that storms: new orders (some marketable) and cancels.
struct Storm {
    channel: Channel,
    next_seq: u64,
    live: Vec<ClientOrderId>,
    sent: HashSet<ClientOrderId>,
    rng: u64,
    /// Events seen, by kind.
    kinds: HashMap<String, u64>,
    /// Share of commands that cancel a live order, in percent.
    cancel_pct: u64,
}

impl Storm {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Sends up to `n` commands (stops early if the ring is full); drains events.
    fn step(&mut self, n: u32) {
        for _ in 0..n {
            self.channel.beat_strategy();
            let cancel = !self.live.is_empty() && self.rand() % 100 < self.cancel_pct;
            let command = if cancel {
                let i = (self.rand() % self.live.len() as u64) as usize;
                Command::Cancel {
                    id: self.live.swap_remove(i),
                }
            } else {
                self.next_seq += 1;
                let id = id(0, self.next_seq);
                let marketable = self.rand() % 10 == 0;
                let order = NewOrder {
                    id,
                    venue: VenueId(0),
                    symbol: SymbolId((self.rand() % 4) as u16),
                    side: if self.rand() % 2 == 0 {
                        Side::Buy
                    } else {
                        Side::Sell
                    },
                    price: Price::from_units(100, 0),
                    qty: 1 + (self.rand() % 5) as u32,
                    tif: if marketable {
                        TimeInForce::ImmediateOrCancel
                    } else {
                        TimeInForce::Day
                    },
                    reduce_only: false,
                };
                let order = if marketable {
                    order
                } else {
                    let off = 1_000 + (self.rand() % 5_000) as i64;
                    let price = match order.side {
                        Side::Buy => order.price.0 - off,
                        Side::Sell => order.price.0 + off,
                    };
                    NewOrder {
                        price: Price(price),
                        ..order
                    }
                };
                self.sent.insert(id);
                self.live.push(id);
                Command::New(order)
            };
            if !self.channel.push_command(&command) {
                break;
            }
        }
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(e) = self.channel.pop_event() {
            let IpcEvent::Event(e) = e.expect("well-formed events") else {
                panic!("the engine refused a command record");
            };
            let name = format!("{:?}", e.kind);
            let name = name.split([' ', '{']).next().unwrap_or("").to_string();
            *self.kinds.entry(name).or_default() += 1;
            let closed = matches!(
                e.kind,
                EventKind::Filled { .. }
                    | EventKind::Canceled
                    | EventKind::Rejected { .. }
                    | EventKind::Refused { .. }
                    | EventKind::Shed
                    | EventKind::Throttled
                    | EventKind::BreakerOpen { .. }
            );
            if closed {
                self.live.retain(|id| *id != e.id);
            }
        }
    }
}

/// Where the engine runs: on this host's network, or on AF_XDP at one end of a veth pair
/// (the venue, the test's thread and its control connections at the other end).
enum Net {
    Host,
    Xdp { pair: keel::net::xdp::netns::Pair },
}

impl Net {
    /// A `keel` command that runs in the engine's namespace.
    fn keel(&self) -> Process {
        match self {
            Net::Host => Process::new(common::peers::KEEL),
            Net::Xdp { pair } => {
                let mut c = Process::new("ip");
                c.args(["netns", "exec", &pair.a, common::peers::KEEL]);
                c
            }
        }
    }

    /// `keel venue` where the engine reaches it: (process, order entry, control).
    fn venue(&self) -> (Proc, String, String) {
        match self {
            Net::Host => venue_process(),
            Net::Xdp { pair } => {
                let v = common::peers::venue_at(
                    &format!("{}:0", pair.peer_ip),
                    &["--flow-rate", "400"],
                );
                (v.proc, v.entry, v.control)
            }
        }
    }

    /// The configuration's `[engine.af_xdp]` section, if any.
    fn config_section(&self) -> String {
        match self {
            Net::Host => String::new(),
            Net::Xdp { pair } => format!(
                "[engine.af_xdp]\ninterface = \"{}\"\naddress = \"{}/24\"\nverify_checksums = false\n",
                pair.a_if, pair.keel_ip
            ),
        }
    }
}

/// The open orders `keel ctl status` counts (pending ones included).
fn keel_open_count(net: &Net, config: &Path) -> u64 {
    let out = net
        .keel()
        .args(["ctl", "--config"])
        .arg(config)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .next()
        .and_then(|l| l.rsplit("open orders ").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(u64::MAX)
}

fn open_lines(report: &str) -> BTreeSet<String> {
    report
        .lines()
        .filter(|l| !l.starts_with("open orders:"))
        .filter_map(|l| l.strip_prefix("open "))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("clordid="))
                .unwrap()
                .to_string()
        })
        .collect()
}

// Goal: kill -9 the engine in the middle of a storm and restart it on the same journal: no
// ClientOrderId is ever live twice at the venue (the venue counts a reused id as a
// duplicate), nothing is resent, and after reconciliation the engine's open orders are
// exactly the venue's.
#[test]
fn kill_dash_nine_mid_storm_loses_and_duplicates_nothing() {
    kill_dash_nine_mid_storm(INLINE);
}

// Goal: the same crash test with the executor loop on the epoll transport.
#[test]
fn kill_dash_nine_mid_storm_loses_and_duplicates_nothing_on_epoll() {
    kill_dash_nine_mid_storm(Layout {
        topology: "inline",
        transport: TransportKind::Epoll,
    });
}

// Goal: the same crash test with the engine on AF_XDP across a veth pair, its venue on the
// kernel's TCP in another network namespace: the venue drops the session once mid-storm (keel
// reconnects and reconciles), the kill -9 leaves no XDP program behind, and the restart
// attaches again.
#[test]
fn kill_dash_nine_mid_storm_on_af_xdp() {
    let Some(pair) = keel::net::xdp::netns::Pair::create("kill_dash_nine_mid_storm_on_af_xdp")
    else {
        return;
    };
    let b = pair.b.clone();
    let net = Net::Xdp { pair };
    keel::net::xdp::netns::Pair::within(&b, || {
        kill_dash_nine_mid_storm_on(AF_XDP, &net);
    });
}

// Goal: the crash test on AF_XDP over a link that loses 5% of the packets each way: TCP
// (smoltcp's at keel, the kernel's at the venue) sends again, and still no order reaches the
// venue twice and none is lost.
#[test]
fn kill_dash_nine_mid_storm_on_a_lossy_af_xdp_link() {
    let Some(pair) =
        keel::net::xdp::netns::Pair::create("kill_dash_nine_mid_storm_on_a_lossy_af_xdp_link")
    else {
        return;
    };
    pair.lose_percent(5);
    let b = pair.b.clone();
    let net = Net::Xdp { pair };
    keel::net::xdp::netns::Pair::within(&b, || {
        kill_dash_nine_mid_storm_on(AF_XDP, &net);
    });
    let Net::Xdp { pair } = &net else {
        unreachable!()
    };
    assert!(pair.frames_lost() > 0, "the loss rules dropped nothing");
}

const AF_XDP: Layout = Layout {
    topology: "inline",
    transport: TransportKind::AfXdp,
};

fn kill_dash_nine_mid_storm(layout: Layout) {
    kill_dash_nine_mid_storm_on(layout, &Net::Host);
}

fn kill_dash_nine_mid_storm_on(layout: Layout, net: &Net) {
    let (_venue, entry, control_addr) = net.venue();
    let (dir, config) = keel_run_config(&entry, layout);
    std::fs::write(
        &config,
        std::fs::read_to_string(&config).unwrap() + &net.config_section(),
    )
    .unwrap();
    let path = dir.path().join("ipc").join("strategy-0");
    let log1 = dir.path().join("run1.log");
    let engine = common::peers::keel_run_with(&mut net.keel(), &config, &log1);
    let channel = open_channel(&path, 0);
    wait_synced(&channel);
    let mut storm = Storm {
        channel,
        next_seq: 0,
        live: Vec::new(),
        sent: HashSet::new(),
        rng: 0x9E37_79B9_7F4A_7C15,
        kinds: HashMap::new(),
        cancel_pct: 30,
    };
    // Storm until the venue has accepted a good number, then kill -9 mid-flight.
    let accepted = |line: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("accepted="))
            .unwrap()
            .parse()
            .unwrap()
    };
    // A bound for a loaded machine, not a timing: the storm only has to get going.
    let deadline = Instant::now() + Duration::from_secs(90);
    while accepted(&control(&control_addr, "stats")) < 400 {
        assert!(Instant::now() < deadline, "the storm did not get going");
        for _ in 0..20 {
            storm.step(10);
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    if let Net::Xdp { .. } = net {
        // The venue drops the session: keel reconnects over AF_XDP (a new login at the venue:
        // a fact that cannot un-happen) and reconciles.
        let logins = || -> u64 {
            control(&control_addr, "sessions")
                .split_whitespace()
                .find_map(|w| w.strip_prefix("logins="))
                .unwrap()
                .parse()
                .unwrap()
        };
        let before = logins();
        control(&control_addr, "drop");
        wait_until("keel logged in again", Duration::from_secs(60), || {
            storm.step(1);
            logins() > before
        });
        wait_synced(&storm.channel);
        for _ in 0..20 {
            storm.step(10);
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // Hold the venue's answers (for longer than the rest of the run before the kill takes,
    // however loaded the machine) so that orders are surely in flight at the kill.
    control(&control_addr, "latency 5000");
    for _ in 0..25 {
        storm.step(10);
        std::thread::sleep(Duration::from_millis(4));
    }
    drop(engine); // SIGKILL
    if let Net::Xdp { pair } = net {
        pair.wait_detached(); // the kernel dropped the program with the process's link
    }
    control(&control_addr, "latency 0"); // the held answers go to the dead connection
    let before_restart = control(&control_addr, "stats");
    // The strategy keeps going while the engine is down: its commands wait in the ring.
    storm.step(30);

    let log2 = dir.path().join("run2.log");
    let engine = common::peers::keel_run_with(&mut net.keel(), &config, &log2);
    storm.channel = open_channel(&path, 1);
    wait_synced(&storm.channel);
    for _ in 0..50 {
        storm.step(10);
        std::thread::sleep(Duration::from_millis(2));
    }
    storm.cancel_pct = 0; // leave orders resting for the final comparison
    for _ in 0..10 {
        storm.step(10);
        std::thread::sleep(Duration::from_millis(2));
    }
    // The venue's synthetic flow stops too: it trades against resting orders, and a fill
    // that reached the venue after the wait below and keel after its stop would leave an
    // order live at keel only (seen once in a loaded clean-clone run).
    assert!(control(&control_addr, "flow 0").starts_with("ok flow 0"));
    // Quiet: wait for the fact that every answer arrived — as many orders open at keel
    // (pending ones included) as at the venue; keel's are a superset until then, and with
    // nothing left to change the venue's book, equal counts are final — and stop the engine
    // cleanly.
    let venue_open_count = || -> u64 {
        control(&control_addr, "open-orders")
            .split_whitespace()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap()
    };
    wait_until("every answer at keel", Duration::from_secs(60), || {
        storm.channel.beat_strategy();
        storm.drain();
        keel_open_count(net, &config) == venue_open_count()
    });
    let report = common::peers::stop_keel_run(engine, &log2);
    let ran = format!("keel run: executor transport {}", layout.transport);
    assert!(report.lines().any(|l| l == ran), "{report}");
    eprintln!(
        "strategy saw {:?}; venue {before_restart} at the kill",
        storm.kinds
    );
    let restart_line = report.lines().nth(1).unwrap_or("");
    eprintln!("{restart_line}");
    assert!(
        restart_line.contains("records replayed") && !restart_line.contains(" 0 records"),
        "{report}"
    );
    assert!(
        !restart_line.contains(" 0 orders restored live") && !restart_line.contains(" 0 in doubt"),
        "the kill should leave orders live and in flight: {report}"
    );
    let stats = control(&control_addr, "stats");
    assert!(
        stats.contains("duplicate_ids=0"),
        "an id reached the venue twice: {stats} (before restart: {before_restart})"
    );
    // Nothing resent: every order the venue saw was sent once by the strategy.
    let venue_orders = accepted(&stats)
        + stats
            .split_whitespace()
            .find_map(|w| w.strip_prefix("rejected="))
            .unwrap()
            .parse::<u64>()
            .unwrap();
    assert!(venue_orders <= storm.sent.len() as u64, "{stats}");
    assert!(report.contains("report errors 0"), "{report}");
    let venue_open: BTreeSet<String> = control(&control_addr, "open-orders")
        .split_whitespace()
        .skip(3) // "ok open-orders N"
        .map(str::to_string)
        .collect();
    let keel_open = open_lines(&report);
    assert!(
        !keel_open.is_empty(),
        "the storm should leave orders resting"
    );
    assert_eq!(keel_open, venue_open, "{report}");
}

// Goal: on a host that blocks io_uring (here a seccomp filter like a container runtime's
// default profile, installed in the child only), `keel run` asked for io_uring warns, naming
// the cause, runs its executor loop on epoll, reaches SYNCED, and says which transport ran.
#[test]
fn keel_run_falls_back_to_epoll_where_io_uring_is_blocked() {
    let (_venue, entry, _control) = venue_process();
    let (dir, config) = keel_run_config(&entry, INLINE);
    let log = dir.path().join("run.log");
    let errors = log.with_extension("err");
    let mut command = Process::new(KEEL);
    let engine =
        common::peers::keel_run_with(common::peers::without_io_uring(&mut command), &config, &log);
    let channel = open_channel(&dir.path().join("ipc").join("strategy-0"), 0);
    wait_synced(&channel);
    let report = common::peers::stop_keel_run(engine, &log);
    assert!(
        report
            .lines()
            .any(|l| l == "keel run: executor transport epoll"),
        "{report}"
    );
    let warning = std::fs::read_to_string(&errors).unwrap();
    assert!(
        warning.contains("io_uring unavailable") && warning.contains("on epoll instead"),
        "{warning}"
    );
    assert!(report.contains("report errors 0"), "{report}");
}

// Goal: the engine keeps the venue's market data — a feed handler in the executor loop, books
// for every configured symbol, conflated tops of book for an in-process strategy — next to
// order entry, in both topologies.
#[test]
fn engine_keeps_market_data_books_for_a_strategy() {
    for layout in LAYOUTS {
        let topology = format!("{layout:?}");
        let (_venue, entry, _control, md) = venue_process_md();
        let md_addr = md.trim_start_matches("ws://").trim_end_matches("/md");
        let text = format!(
            "{}[[feed]]\naddress = \"{md_addr}\"\n",
            config_text(&entry, None, None, layout)
        );
        let mut builder =
            EngineBuilder::new(EngineConfig::from_toml(&text).unwrap()).idle(IdlePolicy::TEST);
        let mut data = builder.market_data(0, 4_096).unwrap();
        assert!(builder.market_data(1, 16).is_none(), "one feed configured");
        let engine = builder.start().unwrap();
        let mut seen = [0u64; 4];
        let mut first = [0u64; 4];
        // Every symbol's book, and at least one of them moved on by a delta since its first
        // sight (the figure asserted below is counted by then, whatever the machine's load).
        wait_until("books and deltas", Duration::from_secs(15), || {
            while let Some((symbol, top)) = data.next_book() {
                let s = usize::from(symbol);
                seen[s] = top.seq;
                if first[s] == 0 {
                    first[s] = top.seq;
                }
                if top.bids[0].1 > 0 && top.asks[0].1 > 0 {
                    assert!(top.bids[0].0 < top.asks[0].0, "crossed top: {top:?}");
                }
            }
            while data.next_trade().is_some() {}
            seen.iter().all(|&s| s > 0) && seen.iter().zip(&first).any(|(s, f)| s > f)
        });
        let report = engine.stop().unwrap();
        let feed = report.feeds[0];
        assert!(feed.snapshots >= 4, "{topology}: {feed:?}");
        assert!(feed.deltas > 0, "{topology}: {feed:?}");
        assert_eq!(
            feed.gaps + feed.crossed + feed.malformed,
            0,
            "{topology}: {feed:?}"
        );
    }
}
