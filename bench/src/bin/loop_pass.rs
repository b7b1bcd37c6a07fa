//! The engine loop's pass time with and without the out-of-band side thread at work (issue 13:
//! "the side thread's scrape and page load never stall a loop").
//!
//! This thread drives the engine's own loop (`EngineBuilder::build`, the `inline` topology's
//! pass, counters file on) against the simulated venue in another thread, as a strategy that
//! sends a new order every 100 µs and cancels each one accepted. Every `EngineLoop::pass` is
//! timed with the TSC clock. Two contenders, in interleaved rounds, each with a fresh engine:
//!
//! - quiet: the counters file written, nobody reading it (the baseline);
//! - watched: the side thread serving `/metrics` to a scraper every 100 ms, the live page loaded
//!   every second and its server-sent events followed by a browser-like client, `/api/state`
//!   every 100 ms.
//!
//! The loop and the side thread share the machine's 2 vCPUs with the venue and the clients, so
//! the comparison is what an operator's watching costs here, not on isolated cores.
//!
//! `loop_pass [--smoke] [--seconds=N] [--rounds=N]`

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::config::EngineConfig;
use keel::engine::EngineBuilder;
use keel::net::{ReactorConfig, SocketTransport};
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
    VenueId,
};
use keel_bench::{arg_u64, flag, histogram, print_header, print_row, summary, venue_thread};

/// GETs `path` every `every` until `stop`; returns how many answered 200.
fn poller(
    addr: std::net::SocketAddr,
    path: &'static str,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut ok = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(mut s) = TcpStream::connect(addr) {
                let _ = write!(
                    s,
                    "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                );
                let mut text = Vec::new();
                let _ = s.read_to_end(&mut text);
                ok += u64::from(text.starts_with(b"HTTP/1.1 200"));
            }
            std::thread::sleep(every);
        }
        ok
    })
}

/// Follows the live page's event stream until `stop`; returns the bytes read.
fn browser(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut read = 0u64;
        let Ok(mut s) = TcpStream::connect(addr) else {
            return 0;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let _ = s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut buf = [0u8; 16 * 1024];
        while !stop.load(Ordering::Relaxed) {
            if let Ok(n) = s.read(&mut buf) {
                read += n as u64;
            }
        }
        read
    })
}

fn round(
    venue: std::net::SocketAddr,
    watched: bool,
    account: u32,
    seconds: u64,
    clock: &TscClock,
    h: &mut Histogram<u64>,
) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let counters = dir.path().join("counters");
    let config = EngineConfig::from_toml(&format!(
        r#"
        symbols = ["AAPL", "MSFT", "AMZN", "NVDA"]
        [dispatcher]
        strategies = 1
        [dispatcher.risk]
        position_max = 1_000_000_000
        [[dispatcher.limiter.window]]
        window_ns = 1_000_000_000
        limit_weight = 10_000_000
        burst_weight = 1_000_000
        [[venue]]
        name = "sim"
        address = "{venue}"
        username = "p{account}"
        password = "keel"
        [metrics]
        file = "{}"
        "#,
        counters.display()
    ))
    .expect("bench config");
    let transport = keel::net::Reactor::open(ReactorConfig {
        conns_max: 4,
        ..ReactorConfig::default()
    })
    .expect("io_uring transport");
    let mut core = EngineBuilder::new(config)
        .build(transport, clock.now_ns())
        .expect("engine");
    let mut strategy = core.take_strategy(StrategyId(0)).expect("in process");
    while !core.dispatcher().is_synced(VenueId(0)) {
        core.pass(clock.now_ns());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut side = Vec::new();
    let mut monitor = None;
    if watched {
        let spawned = keel::monitor::spawn(
            Some("127.0.0.1:0".parse().expect("addr")),
            keel::monitor::SideThread {
                counters: counters.clone(),
                alerts: Default::default(),
                budget: Default::default(),
                control: None,
                avoid: Vec::new(),
            },
            Arc::clone(&stop),
        )
        .expect("monitor");
        let addr = spawned.addr.expect("bound");
        monitor = Some(spawned.thread);
        let every = Duration::from_millis(100);
        side.push(poller(addr, "/metrics", every, Arc::clone(&stop)));
        side.push(poller(addr, "/api/state", every, Arc::clone(&stop)));
        side.push(poller(addr, "/", Duration::from_secs(1), Arc::clone(&stop)));
        side.push(browser(addr, Arc::clone(&stop)));
    }
    let (start, mut next, mut seq, mut passes) = (clock.now_ns(), clock.now_ns(), 0u64, 0u64);
    while clock.now_ns() - start < seconds * 1_000_000_000 {
        let now = clock.now_ns();
        if now >= next {
            next += 100_000;
            seq += 1;
            let order = NewOrder {
                id: ClientOrderId::new(StrategyId(0), seq).expect("sequence"),
                venue: VenueId(0),
                symbol: SymbolId((seq % 4) as u16),
                side: if seq % 2 == 0 { Side::Buy } else { Side::Sell },
                price: Price::from_units(if seq % 2 == 0 { 90 } else { 110 }, 0),
                qty: 1,
                tif: TimeInForce::Day,
                reduce_only: false,
            };
            let _ = strategy.commands.push(Command::New(order));
        }
        let t0 = clock.now_ns();
        core.pass(t0);
        let _ = h.record((clock.now_ns() - t0).max(1) * 1_000);
        passes += 1;
        while let Ok(e) = strategy.events.pop() {
            if e.kind == EventKind::Accepted {
                let _ = strategy.commands.push(Command::Cancel { id: e.id });
            }
        }
    }
    stop.store(true, Ordering::Release);
    let answered: u64 = side.into_iter().map(|t| t.join().expect("client")).sum();
    if let Some(m) = monitor {
        m.join().expect("monitor");
    }
    assert!(
        !watched || answered > 0,
        "the side thread answered nothing while watched"
    );
    drop(core.finish());
    passes
}

fn main() {
    let smoke = flag("smoke");
    let seconds = arg_u64("seconds", if smoke { 1 } else { 3 });
    let rounds = arg_u64("rounds", if smoke { 1 } else { 4 });
    let clock = TscClock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let (venue, addr) = venue_thread(Arc::clone(&stop));
    let (mut quiet, mut watched) = (histogram(), histogram());
    let mut account = 0;
    for r in 0..rounds {
        // Alternate which goes first, so neither always runs on a warmer machine.
        for w in [r % 2 == 1, r % 2 == 0] {
            account += 1;
            let h = if w { &mut watched } else { &mut quiet };
            round(addr, w, account, seconds, &clock, h);
        }
    }
    stop.store(true, Ordering::Release);
    let _ = venue.join();
    println!(
        "loop_pass: engine loop pass time, {rounds} interleaved rounds of {seconds} s per \
         contender (a new order every 100 µs, each accepted one canceled)"
    );
    print_header("pass time", "quiet");
    let base = summary(&quiet);
    print_row("quiet (counters file, no reader)", &base, base.p50_ns);
    let w = summary(&watched);
    print_row("watched (scrapes, page, events)", &w, base.p50_ns);
    println!(
        "watched / quiet: p99 {:.2}x, p99.9 {:.2}x, max {:.2}x",
        w.p99_ns / base.p99_ns,
        w.p999_ns / base.p999_ns,
        w.max_ns / base.max_ns
    );
    assert!(
        base.count > 1_000 && w.count > 1_000,
        "too few passes measured"
    );
}
