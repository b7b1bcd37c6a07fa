//! What the process boundary and the language cost a strategy: the place → accepted round
//! trip of an in-process Rust strategy, a C strategy (sdk/c, bench/c/strategy_client.c, built
//! here with the system's compiler) and a Python one (the `keel` package, imported from
//! sdk/python, bench/python/strategy_client.py), all against one engine (its own loop,
//! `EngineBuilder::start`, spinning, io_uring) and one venue (keel's, in a thread, no flow),
//! rounds alternating. One order at a time: from the strategy's command to its Accepted
//! event, timed on the strategy's side (TscClock in Rust, CLOCK_MONOTONIC in C,
//! `time.monotonic_ns` in Python); each order is canceled after, untimed.
//!
//! Then one read of a market-data slot (`keel_md_top`, a seqlock over 176 bytes) in C against
//! the same read in Rust (`MdReader::top`) on the same file, while a writer thread rewrites
//! the slot 100,000 times a second: the mean of each batch of 1,000 reads.
//!
//! usage: strategy_rtt [--smoke] [--orders=N] [--rounds=N]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::dispatch::{DispatcherConfig, StrategyHandle};
use keel::engine::{EngineBuilder, IpcConfig};
use keel::order::{ClientOrderId, Command as Cmd, EventKind, StrategyId, VenueId};
use keel::runtime::IdlePolicy;
use keel::session::VenueLinkConfig;
use keel_bench::{arg_u64, flag, histogram, print_header_in, print_row, summary};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn main() {
    let smoke = flag("smoke");
    let orders = arg_u64("orders", if smoke { 200 } else { 2_000 });
    let rounds = arg_u64("rounds", if smoke { 1 } else { 5 });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let client = dir.path().join("strategy_client");
    let built = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Werror", "-I"])
        .arg(repo("sdk/c"))
        .arg("-o")
        .arg(&client)
        .arg(repo("sdk/c/keel.c"))
        .arg(repo("bench/c/strategy_client.c"))
        .status()
        .expect("a C compiler (cc)");
    assert!(
        built.success(),
        "bench/c/strategy_client.c does not compile"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let (venue, addr) = keel_bench::venue_thread(Arc::clone(&stop));
    let ipc = dir.path().join("ipc");
    let mut engine = engine(addr, &ipc);
    let mut rust = engine.take_strategy(StrategyId(0)).expect("strategy 0");
    let clock = TscClock::new();
    while !engine.venue_synced(VenueId(0)) {
        std::thread::yield_now();
    }
    let (mut rust_h, mut c_h, mut py_h) = (histogram(), histogram(), histogram());
    let mut seq = 0;
    let warm = orders / 4;
    rust_round(&clock, &mut rust, &mut seq, &mut rust_h, false, warm);
    for _ in 0..rounds {
        rust_round(&clock, &mut rust, &mut seq, &mut rust_h, true, orders);
        let c = Command::new(&client)
            .arg("rtt")
            .arg(ipc.join("strategy-1"))
            .arg((orders + warm).to_string())
            .output()
            .expect("the C client runs");
        record(&mut c_h, "C", &c, warm);
        let py = Command::new("python3")
            .env("PYTHONPATH", repo("sdk/python"))
            .arg(repo("bench/python/strategy_client.py"))
            .arg(ipc.join("strategy-2"))
            .arg((orders + warm).to_string())
            .output()
            .expect("python3 runs");
        record(&mut py_h, "Python", &py, warm);
    }
    let _ = engine.stop();
    stop.store(true, Ordering::Relaxed);
    let _ = venue.join();

    println!(
        "place -> accepted round trip, one engine and one venue on loopback, {rounds} alternating rounds of {orders} orders (after {warm} untimed)"
    );
    print_header_in("round trip", "µs", "in-process Rust");
    let (r, c, p) = (
        summary(&rust_h).in_us(),
        summary(&c_h).in_us(),
        summary(&py_h).in_us(),
    );
    print_row("in-process Rust strategy (baseline)", &r, r.p50_ns);
    print_row("C strategy, shared memory (sdk/c)", &c, r.p50_ns);
    print_row("Python strategy, shared memory", &p, r.p50_ns);
    println!(
        "C/in-process at p50: {:.2}x (goal: at most 1.1x); Python/in-process: {:.2}x",
        c.p50_ns / r.p50_ns,
        p.p50_ns / r.p50_ns
    );

    md_reads(&client, dir.path(), if smoke { 100_000 } else { 2_000_000 });
}

/// The engine: inline topology, spinning, io_uring; strategy 0 in process, 1 and 2 over shared
/// memory in `ipc`; one link to the venue at `addr`, its limits out of the way.
fn engine(addr: std::net::SocketAddr, ipc: &Path) -> keel::engine::RunningEngine {
    let mut dispatcher = DispatcherConfig {
        strategies: 3,
        venues: 1,
        symbols: 2,
        ..DispatcherConfig::default()
    };
    for window in dispatcher.limiter.windows.iter_mut().flatten() {
        window.limit_weight = 1_000_000;
        window.burst_weight = 100_000;
    }
    let config = keel::engine::EngineConfig {
        symbols: ["AAPL", "MSFT"]
            .iter()
            .map(|s| keel::proto::soupbin::alpha::<8>(s))
            .collect(),
        dispatcher,
        journal: None,
        venues: vec![VenueLinkConfig {
            name: "venue".into(),
            address: addr,
            username: "keel".into(),
            password: "keel".into(),
            protocol: Default::default(),
            ack_timeout_ns: 2_000_000_000,
            orders_max: 4_096,
            link: Default::default(),
        }],
        loops: keel::engine::LoopConfig::default(),
        ipc: Some(IpcConfig {
            dir: ipc.to_path_buf(),
            ..IpcConfig::default()
        }),
        feeds: Vec::new(),
        operator: Default::default(),
        wire_log: None,
        strategy_quotas: Vec::new(),
        metrics: Default::default(),
    };
    EngineBuilder::new(config)
        .in_process_strategies(1)
        .idle(IdlePolicy::BusySpin)
        .start()
        .expect("the engine starts")
}

/// `n` orders one at a time from the in-process strategy, each timed from the command to its
/// Accepted (recorded in `h` when `timed`), then canceled untimed.
fn rust_round(
    clock: &TscClock,
    strategy: &mut StrategyHandle,
    seq: &mut u64,
    h: &mut Histogram<u64>,
    timed: bool,
    n: u64,
) {
    let wait = |strategy: &mut StrategyHandle, id: ClientOrderId, kind: EventKind| loop {
        if let Ok(e) = strategy.events.pop() {
            assert_eq!(e.id, id, "{e:?}");
            if e.kind == kind {
                return clock.now_ns();
            }
            panic!("unexpected {e:?}");
        }
    };
    for _ in 0..n {
        *seq += 1;
        let id = ClientOrderId::new(StrategyId(0), *seq).expect("an id");
        let order = keel_bench::resting_buy(id);
        let t0 = clock.now_ns();
        strategy.commands.push(Cmd::New(order)).expect("ring room");
        let t1 = wait(strategy, id, EventKind::Accepted);
        if timed {
            h.saturating_record((t1 - t0) * 1_000);
        }
        strategy
            .commands
            .push(Cmd::Cancel { id })
            .expect("ring room");
        wait(strategy, id, EventKind::Canceled);
    }
}

/// A client's "rtt <ns>" lines after its first `warm`, into `h` (in ps, as the others).
fn record(h: &mut Histogram<u64>, who: &str, out: &std::process::Output, warm: u64) {
    assert!(
        out.status.success(),
        "the {who} client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut n = 0;
    for ns in text
        .lines()
        .filter_map(|l| l.strip_prefix("rtt "))
        .skip(warm as usize)
    {
        h.saturating_record(ns.parse::<u64>().expect("ns") * 1_000);
        n += 1;
    }
    assert!(n > 0, "the {who} client timed nothing: {text}");
}

/// One slot read in C and in Rust on one file, a writer thread rewriting the slot.
fn md_reads(client: &Path, dir: &Path, reads: u64) {
    use keel::feed::fanout::BookTop;
    use keel::ipc::md::{MdReader, MdWriter};
    let path = dir.join("md");
    let mut writer = MdWriter::create(&path, 2, 1_024).expect("the market-data file");
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let clock = TscClock::new();
            let mut top = BookTop::default();
            let mut next = clock.now_ns();
            while !stop.load(Ordering::Relaxed) {
                if clock.now_ns() >= next {
                    top.seq += 1;
                    top.bids[0] = (1_000_000 + (top.seq % 7) as i64, top.seq);
                    writer.book(0, &top);
                    next += 10_000; // 100,000 writes a second
                }
                std::hint::spin_loop();
            }
        })
    };
    let (mut c_h, mut rust_h) = (histogram(), histogram());
    let mut reader = MdReader::open(&path).expect("a reader");
    let clock = TscClock::new();
    let mut sink = 0u64;
    for _ in 0..5 {
        for _ in 0..reads / 5_000 {
            let t0 = clock.now_ns();
            for _ in 0..1_000 {
                sink = sink.wrapping_add(reader.top(0).map_or(0, |t| t.seq));
            }
            rust_h.saturating_record(clock.now_ns() - t0); // ns per 1,000 = ps per read
        }
        let out = Command::new(client)
            .arg("md")
            .arg(&path)
            .arg((reads / 5).to_string())
            .output()
            .expect("the C client runs");
        assert!(out.status.success(), "{out:?}");
        for v in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("batch "))
        {
            c_h.saturating_record((v.parse::<f64>().expect("ns") * 1_000.0) as u64);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = thread.join();
    std::hint::black_box(sink);
    println!(
        "one market-data slot read (top of book, 5 levels a side), mean of each batch of 1,000, a writer rewriting the slot 100,000 times a second; {} batches each",
        reads / 1_000
    );
    print_header_in("slot read", "ns", "Rust MdReader");
    // Recorded in ps per read (ns per 1,000 reads): `summary` says ns.
    let (r, c) = (summary(&rust_h), summary(&c_h));
    print_row("Rust MdReader::top (baseline)", &r, r.p50_ns);
    print_row("C keel_md_top (sdk/c)", &c, r.p50_ns);
    println!("C slot read at p50: {:.1} ns (goal: under 50 ns)", c.p50_ns);
}
