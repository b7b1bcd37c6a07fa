//! End-to-end order round trip: strategy → engine → venue → engine → strategy, through keel's
//! engine in the `inline` and `split` topologies, against the raw loopback socket floor
//! measured in the same run (interleaved rounds).
//!
//! - floor: a raw TCP ping-pong on loopback (same message sizes as Enter Order / Order
//!   Accepted), the client busy-polling a non-blocking socket, the echo thread blocking in
//!   `read` — the same wake-up path as the venue, which blocks in io_uring until a message;
//! - inline: the strategy (this thread) pushes a new order into its ring and spins on its event
//!   ring until `Accepted`; one engine loop runs dispatcher, guard chain, transport and session;
//! - split: the same with a dispatcher loop and an executor loop joined by SPSC rings;
//! - each topology with its executor loop on io_uring and on epoll (`[engine] transport`);
//! - inline on io_uring again with the counters file on (`keel run`'s default; the others run
//!   with `[metrics] enabled = false`), and with the file and the side thread serving
//!   `/metrics`, scraped every 100 ms by another thread (issue 13: within 5%, and no stall).
//!
//! The engine's loops spin then yield (`SpinThenYield`): this machine has 2 vCPUs for the
//! strategy, up to two engine loops and the venue, so a loop must give its core away when it
//! has nothing to do. On isolated cores use `BusySpin`; expect lower figures.
//!
//! `e2e_rtt [--smoke] [--round-trips=N]`

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::config::EngineConfig;
use keel::engine::{EngineBuilder, Topology};
use keel::net::TransportKind;
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
    VenueId,
};
use keel::runtime::IdlePolicy;
use keel_bench::{arg_u64, flag, histogram, print_header, print_row, summary, venue_thread};

const REQUEST_BYTES: usize = 50;
const REPLY_BYTES: usize = 67;
const IDLE: IdlePolicy = IdlePolicy::BackoffPark {
    spins: 2_000,
    yields: 0,
    park_min_ns: 1_000,
    park_max_ns: 20_000,
};

fn echo(stop: Arc<AtomicBool>) -> (std::thread::JoinHandle<()>, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let thread = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = [0u8; REQUEST_BYTES];
        let reply = [7u8; REPLY_BYTES];
        while !stop.load(Ordering::Relaxed) {
            if s.read_exact(&mut buf).is_err() {
                return;
            }
            s.write_all(&reply).expect("echo");
        }
    });
    (thread, addr)
}

fn floor_round(stream: &mut TcpStream, n: u64, clock: &TscClock, h: &mut Histogram<u64>) {
    let out = [1u8; REQUEST_BYTES];
    let mut buf = [0u8; REPLY_BYTES];
    for _ in 0..n {
        let t0 = clock.now_ns();
        stream.write_all(&out).expect("send");
        let mut got = 0;
        while got < REPLY_BYTES {
            match stream.read(&mut buf[got..]) {
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("floor read: {e}"),
            }
        }
        let _ = h.record((clock.now_ns() - t0).max(1) * 1_000);
    }
}

/// The counters file and the side thread, for the contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eyes {
    /// No counters file (`[metrics] enabled = false`).
    Off,
    /// The counters file written by the loops (the default of `keel run`).
    File,
    /// The file, and the side thread serving `/metrics` scraped every 100 ms.
    Scraped,
}

/// GETs `/metrics` every 100 ms until `stop`; returns how many scrapes answered 200.
fn scraper(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut ok = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(mut s) = TcpStream::connect(addr) {
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
                let mut text = String::new();
                let _ = s.read_to_string(&mut text);
                ok += u64::from(text.starts_with("HTTP/1.1 200"));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        ok
    })
}

fn engine_round(
    venue: std::net::SocketAddr,
    (topology, transport, eyes): (Topology, TransportKind, Eyes),
    first_seq: u64,
    n: u64,
    clock: &TscClock,
    h: &mut Histogram<u64>,
) {
    // A fresh account per engine (SoupBinTCP usernames are at most 6 characters).
    static ACCOUNTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let account = ACCOUNTS.fetch_add(1, Ordering::Relaxed);
    let dir = tempfile::tempdir().expect("tempdir");
    let counters = dir.path().join("counters");
    let metrics = match eyes {
        Eyes::Off => "[metrics]\nenabled = false\n".to_string(),
        Eyes::File | Eyes::Scraped => format!("[metrics]\nfile = \"{}\"\n", counters.display()),
    };
    // A fresh account per engine: an engine without a journal starts its wire references at
    // 1, which an account with history would refuse (they must ascend).
    let config = EngineConfig::from_toml(&format!(
        r#"
        symbols = ["AAPL", "MSFT", "AMZN", "NVDA"]
        [dispatcher]
        strategies = 1
        [dispatcher.risk]
        position_max = 1_000_000_000
        [dispatcher.bulkhead]
        in_flight_per_symbol_max = 4096
        in_flight_per_venue_max = 16384
        [[dispatcher.limiter.window]]
        window_ns = 1_000_000_000
        limit_weight = 10_000_000
        burst_weight = 1_000_000
        [[venue]]
        name = "sim"
        address = "{venue}"
        username = "b{account}"
        password = "keel"
        {metrics}
        "#
    ))
    .expect("bench config");
    let mut engine = EngineBuilder::new(config)
        .topology(topology)
        .transport(transport)
        .idle(IDLE)
        .start()
        .expect("engine");
    let mut strategy = engine.take_strategy(StrategyId(0)).expect("in process");
    let side = Arc::new(AtomicBool::new(false));
    let mut side_threads = None;
    if eyes == Eyes::Scraped {
        let side_thread = keel::monitor::SideThread {
            counters: counters.clone(),
            alerts: Default::default(),
            budget: Default::default(),
            control: None,
            avoid: Vec::new(),
        };
        let spawned = keel::monitor::spawn(
            Some("127.0.0.1:0".parse().expect("addr")),
            side_thread,
            Arc::clone(&side),
        )
        .expect("monitor");
        let (addr, monitor) = (spawned.addr.expect("bound"), spawned.thread);
        side_threads = Some((monitor, scraper(addr, Arc::clone(&side))));
    }
    while !engine.venue_synced(VenueId(0)) {
        std::thread::yield_now();
    }
    for i in 0..n {
        let id = ClientOrderId::new(StrategyId(0), first_seq + i).expect("in range");
        let order = NewOrder {
            id,
            venue: VenueId(0),
            symbol: SymbolId((i % 4) as u16),
            side: Side::Buy,
            price: Price::from_units(1, 0), // rests: nothing trades at 1.00
            qty: 1,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        let t0 = clock.now_ns();
        strategy
            .commands
            .push(Command::New(order))
            .expect("ring room");
        let mut spins = 0u32;
        loop {
            match strategy.events.pop() {
                Ok(e) if e.id == id => {
                    assert_eq!(e.kind, EventKind::Accepted, "order {id}");
                    break;
                }
                Ok(e) => panic!("unexpected event {e:?}"),
                Err(_) => {
                    spins += 1;
                    if spins > 20_000 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        let _ = h.record((clock.now_ns() - t0).max(1) * 1_000);
    }
    side.store(true, Ordering::Relaxed);
    if let Some((monitor, scraper)) = side_threads {
        let scrapes = scraper.join().expect("scraper");
        let _ = monitor.join();
        // A round lasts long enough for several scrapes except in a smoke run.
        assert!(
            scrapes > 0 || n < 1_000,
            "the side thread answered no scrape"
        );
    }
    let report = engine.stop().expect("engine stop");
    assert_eq!(report.dispatch.sent_new, n, "every order went out once");
    assert_eq!(
        report.transport,
        Some(transport),
        "the transport asked for ran"
    );
}

fn main() {
    let smoke = flag("smoke");
    let total = arg_u64("round-trips", if smoke { 300 } else { 20_000 });
    let rounds = if smoke { 1 } else { 4 };
    let per_round = total / rounds;
    let stop = Arc::new(AtomicBool::new(false));
    let (venue, venue_addr) = venue_thread(Arc::clone(&stop));
    let (echo_thread, echo_addr) = echo(Arc::clone(&stop));
    let clock = TscClock::new();
    let mut floor = TcpStream::connect(echo_addr).expect("connect echo");
    floor.set_nodelay(true).expect("nodelay");
    floor.set_nonblocking(true).expect("nonblocking");
    let names = [
        "raw TCP ping-pong on loopback (floor)",
        "keel engine, inline, io_uring",
        "keel engine, split, io_uring",
        "keel engine, inline, epoll",
        "keel engine, split, epoll",
        "keel engine, inline, io_uring, counters file",
        "keel engine, inline, io_uring, counters + /metrics every 100 ms",
    ];
    let layouts = [
        (Topology::Inline, TransportKind::IoUring, Eyes::Off),
        (Topology::Split, TransportKind::IoUring, Eyes::Off),
        (Topology::Inline, TransportKind::Epoll, Eyes::Off),
        (Topology::Split, TransportKind::Epoll, Eyes::Off),
        (Topology::Inline, TransportKind::IoUring, Eyes::File),
        (Topology::Inline, TransportKind::IoUring, Eyes::Scraped),
    ];
    let mut h: Vec<Histogram<u64>> = (0..names.len()).map(|_| histogram()).collect();
    let mut seq = 1;
    for round in 0..=rounds {
        // Round 0 warms up and is not recorded.
        let n = if round == 0 { 200 } else { per_round };
        let mut scratch = histogram();
        floor_round(
            &mut floor,
            n,
            &clock,
            if round == 0 { &mut scratch } else { &mut h[0] },
        );
        for (i, layout) in layouts.into_iter().enumerate() {
            let target = if round == 0 {
                &mut scratch
            } else {
                &mut h[i + 1]
            };
            engine_round(venue_addr, layout, seq, n, &clock, target);
            seq += n;
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(floor);
    let _ = echo_thread.join();
    let _ = venue.join();
    let s: Vec<_> = h.iter().map(summary).collect();
    println!(
        "end-to-end order round trip (strategy -> engine -> venue -> strategy, New -> Accepted), {} per contender, {rounds} interleaved rounds",
        per_round * rounds
    );
    print_header("round trip", "floor");
    for (name, summary) in names.iter().zip(&s) {
        print_row(name, summary, s[0].p50_ns);
    }
    println!("inline_vs_floor_ratio: {:.2}", s[1].p50_ns / s[0].p50_ns);
    println!("split_vs_floor_ratio: {:.2}", s[2].p50_ns / s[0].p50_ns);
    println!("split_vs_inline_ratio: {:.2}", s[2].p50_ns / s[1].p50_ns);
    println!(
        "inline_epoll_vs_floor_ratio: {:.2}",
        s[3].p50_ns / s[0].p50_ns
    );
    println!(
        "split_epoll_vs_floor_ratio: {:.2}",
        s[4].p50_ns / s[0].p50_ns
    );
    println!(
        "inline_epoll_vs_io_uring_ratio: {:.2}",
        s[3].p50_ns / s[1].p50_ns
    );
    println!(
        "counters_on_vs_off_ratio: p50 {:.2}, p99 {:.2}",
        s[5].p50_ns / s[1].p50_ns,
        s[5].p99_ns / s[1].p99_ns
    );
    println!(
        "scraped_vs_counters_ratio: p99 {:.2}, p99.9 {:.2}",
        s[6].p99_ns / s[5].p99_ns,
        s[6].p999_ns / s[5].p999_ns
    );
}
