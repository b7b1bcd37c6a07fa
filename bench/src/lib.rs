//! Shared measurement harness for keel's benchmarks.
//!
//! Every benchmark measures keel and its baselines in the same run, interleaved, records
//! latencies in HdrHistogram, and prints p50/p99/p99.9/max plus ratios to the baseline.
//! Pinning degrades gracefully: on a machine with too few cores it warns and runs unpinned.

pub mod fix;
pub mod guard;
pub mod loadgen;
pub mod ouch;

use hdrhistogram::Histogram;

/// A latency histogram in picoseconds (so sub-nanosecond per-op costs keep precision).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000_000, 3).expect("valid histogram bounds")
}

/// Quantiles of a histogram, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Median.
    pub p50_ns: f64,
    /// 99th percentile.
    pub p99_ns: f64,
    /// 99.9th percentile.
    pub p999_ns: f64,
    /// Largest sample.
    pub max_ns: f64,
    /// Samples.
    pub count: u64,
}

impl Summary {
    /// The same quantiles in microseconds (the fields keep their names).
    pub fn in_us(self) -> Self {
        Self {
            p50_ns: self.p50_ns / 1_000.0,
            p99_ns: self.p99_ns / 1_000.0,
            p999_ns: self.p999_ns / 1_000.0,
            max_ns: self.max_ns / 1_000.0,
            count: self.count,
        }
    }
}

/// The order the round-trip benchmarks time: buy 10 of symbol 1 at 50.0000 on venue 0, a
/// day order that rests (nothing sells that low).
pub fn resting_buy(id: keel::order::ClientOrderId) -> keel::order::NewOrder {
    use keel::order::{NewOrder, Price, Side, SymbolId, TimeInForce, VenueId};
    NewOrder {
        id,
        venue: VenueId(0),
        symbol: SymbolId(1),
        side: Side::Buy,
        price: Price::from_units(50, 0),
        qty: 10,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

/// Summarises a picosecond histogram.
pub fn summary(h: &Histogram<u64>) -> Summary {
    let ns = |ps: u64| ps as f64 / 1_000.0;
    Summary {
        p50_ns: ns(h.value_at_quantile(0.50)),
        p99_ns: ns(h.value_at_quantile(0.99)),
        p999_ns: ns(h.value_at_quantile(0.999)),
        max_ns: ns(h.max()),
        count: h.len(),
    }
}

/// Prints one table row: name, quantiles, and the median's ratio to `baseline_p50_ns`.
pub fn print_row(name: &str, s: &Summary, baseline_p50_ns: f64) {
    println!(
        "{name:<34} {:>10.2} {:>10.2} {:>10.2} {:>12.2} {:>9.2}x {:>9}",
        s.p50_ns,
        s.p99_ns,
        s.p999_ns,
        s.max_ns,
        s.p50_ns / baseline_p50_ns,
        s.count
    );
}

/// CLOCK_MONOTONIC in ns, read directly (the benchmarks' wall time across processes).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    #[allow(unsafe_code)]
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Prints the table header.
pub fn print_header(unit: &str, baseline: &str) {
    print_header_in(unit, "ns", baseline);
}

/// Prints the table header for figures in `scale` (`ns`, `µs`).
pub fn print_header_in(unit: &str, scale: &str, baseline: &str) {
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>12} {:>10} {:>9}",
        format!("({unit}, {scale})"),
        "p50",
        "p99",
        "p99.9",
        "max",
        format!("/{baseline}"),
        "samples"
    );
}

/// The simulated venue (no synthetic flow, blocking waits) stepped by a thread of its own
/// until `stop`; returns the thread and the venue's order-entry address.
pub fn venue_thread(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (
    std::thread::JoinHandle<keel_venue::exchange::ExchangeStats>,
    std::net::SocketAddr,
) {
    let (thread, addr, _) = venue_thread_serving(stop, false);
    (thread, addr)
}

/// [`venue_thread`], serving FIX 4.4 order entry too when `fix` (its address third).
pub fn venue_thread_serving(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    fix: bool,
) -> (
    std::thread::JoinHandle<keel_venue::exchange::ExchangeStats>,
    std::net::SocketAddr,
    Option<std::net::SocketAddr>,
) {
    use keel_venue::server::{FixConfig, VenueConfig};
    let (thread, addr, fix_addr) = venue_thread_with(
        stop,
        VenueConfig {
            wait: keel::net::WaitMode::Blocking,
            flow: keel_venue::flow::FlowConfig {
                events_per_sec: 0,
                ..keel_venue::flow::FlowConfig::default()
            },
            fix: fix.then(FixConfig::default),
            ..VenueConfig::default()
        },
    );
    (thread, addr, fix_addr)
}

/// A venue with `config` stepped by a thread of its own until `stop`; the thread returns the
/// exchange's counts at the end. Returns it, the order-entry address and the FIX address.
pub fn venue_thread_with(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    config: keel_venue::server::VenueConfig,
) -> (
    std::thread::JoinHandle<keel_venue::exchange::ExchangeStats>,
    std::net::SocketAddr,
    Option<std::net::SocketAddr>,
) {
    use keel::clock::{Clock, TscClock};
    use keel_venue::server::VenueServer;
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut venue = VenueServer::new(config).expect("venue");
        tx.send((venue.local_addr(), venue.fix_addr()))
            .expect("main waits");
        let clock = TscClock::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            venue.step(clock.now_ns(), 1_000_000).expect("venue step");
        }
        venue.exchange().stats()
    });
    let (addr, fix_addr) = rx.recv().expect("venue address");
    (thread, addr, fix_addr)
}

/// Pins the current thread to `core` if the machine has it; otherwise warns and carries on.
pub use keel::runtime::pin_or_warn;

/// Reads an integer option `--name=value` from the command line, or `default`.
pub fn arg_u64(name: &str, default: u64) -> u64 {
    let prefix = format!("--{name}=");
    std::env::args()
        .find_map(|a| a.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
        .unwrap_or(default)
}

/// True when `--flag` is on the command line.
pub fn flag(name: &str) -> bool {
    let want = format!("--{name}");
    std::env::args().any(|a| a == want)
}

/// The round trips a round-trip benchmark runs: `--round-trips=N` (default `default`), 2,000
/// with `--smoke`; in 5 interleaved rounds. Returns (total, rounds, per round).
pub fn round_trips(default: u64) -> (u64, u64, u64) {
    let total = if flag("smoke") {
        2_000
    } else {
        arg_u64("round-trips", default)
    };
    let rounds = 5;
    (total, rounds, total / rounds)
}

/// One side of a round-trip benchmark: `round_trip` sends, waits for the answer, and says
/// whether it was the right one.
pub trait Contender {
    /// One round trip.
    fn round_trip(&mut self) -> bool;
}

/// Times `n` round trips of `c` into `h` (picoseconds), checking each.
pub fn measure(
    c: &mut dyn Contender,
    n: u64,
    clock: &keel::clock::TscClock,
    h: &mut Histogram<u64>,
) {
    for _ in 0..n {
        let t0 = clock.raw();
        assert!(c.round_trip(), "round trip did not complete correctly");
        let t1 = clock.raw();
        h.record(((clock.raw_to_ns(t1) - clock.raw_to_ns(t0)) * 1_000).max(1))
            .unwrap();
    }
}

/// A client transport opened with `config`, with one connection to `addr`, established.
pub fn connected_with<T: keel::net::SocketTransport>(
    addr: std::net::SocketAddr,
    config: keel::net::ReactorConfig,
) -> (T, keel::net::ConnId) {
    let mut reactor = T::open(config).expect("the client's transport");
    let conn = reactor.connect(addr).expect("a connect");
    let mut events = Vec::new();
    for _ in 0..10_000_000 {
        reactor.poll(0, 1_000_000, &mut events).expect("a poll");
        for e in &events {
            match *e {
                keel::net::NetEvent::Connected { conn: c } if c == conn => return (reactor, conn),
                keel::net::NetEvent::ConnectFailed { conn: c, errno } if c == conn => {
                    panic!("{:?}: connect to {addr} failed: errno {errno}", T::KIND)
                }
                _ => {}
            }
        }
        events.clear();
    }
    panic!("{:?}: no connection to {addr}", T::KIND);
}
