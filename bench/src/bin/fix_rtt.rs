//! Order round trip over FIX 4.4 on loopback, keel's initiator against a QuickFIX/C++
//! initiator, both trading with the same QuickFIX/C++ acceptor (bench/quickfix/initiator.cpp
//! and core/cli/tests/interop/quickfix/acceptor.cpp, built by scripts/quickfix-peers), rounds
//! alternating. One order at a time: keel's is timed from the strategy's command to its
//! Accepted event (the engine's own loop, `EngineBuilder::build`, busy-polling io_uring: the
//! dispatcher, the guards, the FIX link, both rings); QuickFIX's from `sendToTarget` to the
//! ExecutionReport in its callback, the next order sent from that callback. keel cancels each
//! order after its acknowledgement, untimed (its order table stays small).
//!
//! Then keel over FIX against keel over OUCH, both against keel's own venue (its FIX acceptor
//! and its SoupBinTCP sessions on one exchange, stepped by a thread of its own): two engines,
//! rounds alternating, timed the same way. What the protocol costs end to end.
//!
//! usage: fix_rtt [--smoke] [--orders=N] [--rounds=N]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::dispatch::DispatcherConfig;
use keel::engine::{EngineBuilder, EngineLoop};
use keel::net::{Reactor, ReactorConfig, WaitMode};
use keel::order::{ClientOrderId, Command as Cmd, EventKind, StrategyId, VenueId};
use keel::session::fix::FixSettings;
use keel::session::{ProtocolConfig, VenueLinkConfig};
use keel_bench::{arg_u64, flag, histogram, print_header_in, print_row, summary};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The QuickFIX acceptor with keel's session (KEEL) and the QuickFIX initiator's (QF) on a
/// free port; returns its folder, port, the initiator's settings, the process and its stdin.
fn start_acceptor(
    peers: &std::path::Path,
) -> (
    tempfile::TempDir,
    u16,
    std::path::PathBuf,
    std::process::Child,
    std::process::ChildStdin,
) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = free_port();
    let common = format!(
        "StartTime=00:00:00\nEndTime=00:00:00\nFileStorePath={}\nUseDataDictionary=N\n",
        dir.path().join("store").display()
    );
    let acceptor_cfg = dir.path().join("acceptor.cfg");
    std::fs::write(
        &acceptor_cfg,
        format!(
            "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\nSocketAcceptPort={port}\n\
             SocketReuseAddress=Y\nSocketNodelay=Y\n{common}FileLogPath={}\n\
             [SESSION]\nBeginString=FIX.4.4\nSenderCompID=VENUE\nTargetCompID=KEEL\n\
             [SESSION]\nBeginString=FIX.4.4\nSenderCompID=VENUE\nTargetCompID=QF\nResetOnLogon=Y\n",
            dir.path().join("log").display()
        ),
    )
    .expect("the acceptor's settings");
    let initiator_cfg = dir.path().join("initiator.cfg");
    std::fs::write(
        &initiator_cfg,
        format!(
            "[DEFAULT]\nConnectionType=initiator\nSocketConnectHost=127.0.0.1\nSocketConnectPort={port}\n\
             SocketNodelay=Y\nHeartBtInt=30\nReconnectInterval=1\nResetOnLogon=Y\n{common}\
             [SESSION]\nBeginString=FIX.4.4\nSenderCompID=QF\nTargetCompID=VENUE\n"
        ),
    )
    .expect("the initiator's settings");
    let mut acceptor = Command::new(peers.join("acceptor"))
        .arg(&acceptor_cfg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the QuickFIX acceptor starts");
    let acceptor_in = acceptor.stdin.take().expect("stdin");
    let mut lines = BufReader::new(acceptor.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
    // The acceptor's events are not needed here: drained on a thread so it never blocks.
    std::thread::spawn(move || for _ in lines.by_ref() {});

    (dir, port, initiator_cfg, acceptor, acceptor_in)
}

fn main() {
    let smoke = flag("smoke");
    let orders = arg_u64("orders", if smoke { 200 } else { 2_000 });
    let rounds = arg_u64("rounds", if smoke { 1 } else { 5 });
    let peers = std::env::var_os("KEEL_QUICKFIX_DIR").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/quickfix"),
        std::path::PathBuf::from,
    );
    assert!(
        peers.join("acceptor").exists() && peers.join("quickfix-initiator").exists(),
        "QuickFIX peers missing in {}: run scripts/quickfix-peers first",
        peers.display()
    );
    let (dir, port, initiator_cfg, mut acceptor, acceptor_in) = start_acceptor(&peers);
    let clock = TscClock::new();
    let fix44 = ProtocolConfig::Fix44(FixSettings {
        sender_comp_id: "KEEL".into(),
        target_comp_id: "VENUE".into(),
        ..FixSettings::default()
    });
    let (mut engine, mut strategy) =
        engine_against(&clock, ([127, 0, 0, 1], port).into(), fix44.clone());
    let (mut keel_h, mut qf_h) = (histogram(), histogram());
    let mut seq = 0u64;
    let mut keel_round = |h: &mut Histogram<u64>, timed: bool, n: u64| {
        round(&clock, &mut engine, &mut strategy, &mut seq, h, timed, n);
    };
    keel_round(&mut keel_h, false, orders / 4);
    for _ in 0..rounds {
        keel_round(&mut keel_h, true, orders);
        let out = Command::new(peers.join("quickfix-initiator"))
            .arg(&initiator_cfg)
            .arg(orders.to_string())
            .output()
            .expect("the QuickFIX initiator runs");
        if !out.status.success() {
            let kept = dir.keep();
            panic!(
                "{} (the QuickFIX logs are kept in {})",
                String::from_utf8_lossy(&out.stderr),
                kept.display()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.ends_with("done\n"), "{text}");
        // Its first quarter warms it up, as keel's warm-up round does.
        for ns in text
            .lines()
            .filter_map(|l| l.strip_prefix("rtt "))
            .skip((orders / 4) as usize)
        {
            qf_h.saturating_record(ns.parse::<u64>().expect("ns") * 1_000);
        }
    }
    let mut acceptor_in = acceptor_in;
    let _ = writeln!(acceptor_in, "next");
    drop(acceptor_in);
    let _ = acceptor.wait();
    println!(
        "order round trip over FIX 4.4 on loopback against one QuickFIX/C++ acceptor (new order to its acknowledgement), {rounds} alternating rounds of {orders} orders"
    );
    print_header_in("round trip", "µs", "QuickFIX");
    let (q, k) = (summary(&qf_h).in_us(), summary(&keel_h).in_us());
    print_row("QuickFIX/C++ initiator (baseline)", &q, q.p50_ns);
    print_row("keel engine, FIX link", &k, q.p50_ns);
    println!(
        "keel/QuickFIX at p50: {:.2}x (goal: at most 0.5x)",
        k.p50_ns / q.p50_ns
    );

    // keel over FIX against keel over OUCH, one venue.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (venue, ouch_addr, fix_addr) =
        keel_bench::venue_thread_serving(std::sync::Arc::clone(&stop), true);
    let (mut ouch_engine, mut ouch_strategy) =
        engine_against(&clock, ouch_addr, ProtocolConfig::default());
    let (mut fix_engine, mut fix_strategy) =
        engine_against(&clock, fix_addr.expect("the venue serves FIX"), fix44);
    let (mut ouch_h, mut fix_h) = (histogram(), histogram());
    let (mut ouch_seq, mut fix_seq) = (0u64, 0u64);
    for timed in std::iter::once(false).chain((0..rounds).map(|_| true)) {
        let n = if timed { orders } else { orders / 4 };
        round(
            &clock,
            &mut ouch_engine,
            &mut ouch_strategy,
            &mut ouch_seq,
            &mut ouch_h,
            timed,
            n,
        );
        round(
            &clock,
            &mut fix_engine,
            &mut fix_strategy,
            &mut fix_seq,
            &mut fix_h,
            timed,
            n,
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = venue.join();
    println!(
        "order round trip on loopback against keel's venue, OUCH 5.0 and FIX 4.4 sessions on one exchange (new order to its acknowledgement), {rounds} alternating rounds of {orders} orders"
    );
    print_header_in("round trip", "µs", "OUCH");
    let (o, f) = (summary(&ouch_h).in_us(), summary(&fix_h).in_us());
    print_row("keel engine, OUCH link (baseline)", &o, o.p50_ns);
    print_row("keel engine, FIX link", &f, o.p50_ns);
    println!(
        "keel FIX/keel OUCH at p50: {:.2}x (goal: at most 1.2x)",
        f.p50_ns / o.p50_ns
    );
}

/// keel's engine (its own loop, busy-polling io_uring) with one link to `address`, SYNCED.
fn engine_against(
    clock: &TscClock,
    address: std::net::SocketAddr,
    protocol: ProtocolConfig,
) -> (EngineLoop<Reactor>, keel::dispatch::StrategyHandle) {
    let reactor = Reactor::new(ReactorConfig {
        conns_max: 2,
        wait: WaitMode::BusyPoll,
        spin_reads: true,
        ..ReactorConfig::default()
    })
    .expect("io_uring");
    let mut dispatcher = DispatcherConfig {
        strategies: 1,
        venues: 1,
        symbols: 2,
        ..DispatcherConfig::default()
    };
    for window in dispatcher.limiter.windows.iter_mut().flatten() {
        window.limit_weight = 1_000_000;
        window.burst_weight = 100_000;
    }
    let link = VenueLinkConfig {
        name: "venue".into(),
        address,
        username: "keel".into(),
        password: "keel".into(),
        protocol,
        ack_timeout_ns: 2_000_000_000,
        orders_max: 4_096,
        link: Default::default(),
    };
    let config = keel::engine::EngineConfig {
        symbols: ["AAPL", "MSFT"]
            .iter()
            .map(|s| keel::proto::soupbin::alpha::<8>(s))
            .collect(),
        dispatcher,
        journal: None,
        venues: vec![link],
        loops: keel::engine::LoopConfig::default(),
        ipc: None,
        feeds: Vec::new(),
        operator: Default::default(),
        wire_log: None,
        strategy_quotas: Vec::new(),
        metrics: Default::default(),
    };
    let mut engine: EngineLoop<Reactor> = EngineBuilder::new(config)
        .build(reactor, clock.now_ns())
        .expect("the engine builds");
    let strategy = engine.take_strategy(StrategyId(0)).expect("strategy 0");
    let mut passes = 0u64;
    while !engine.dispatcher().is_synced(VenueId(0)) {
        engine.pass(clock.now_ns());
        passes += 1;
        assert!(passes < 500_000_000, "keel never SYNCED with {address}");
    }
    (engine, strategy)
}

/// `n` orders one at a time, each timed from the command to its Accepted (recorded in `h`
/// when `timed`), then canceled untimed.
fn round(
    clock: &TscClock,
    engine: &mut EngineLoop<Reactor>,
    strategy: &mut keel::dispatch::StrategyHandle,
    seq: &mut u64,
    h: &mut Histogram<u64>,
    timed: bool,
    n: u64,
) {
    for _ in 0..n {
        *seq += 1;
        let id = ClientOrderId::new(StrategyId(0), *seq).expect("an id");
        let order = keel_bench::resting_buy(id);
        let t0 = clock.now_ns();
        strategy.commands.push(Cmd::New(order)).expect("ring room");
        let mut accepted = None;
        while accepted.is_none() {
            engine.pass(clock.now_ns());
            while let Ok(e) = strategy.events.pop() {
                match e.kind {
                    EventKind::Accepted if e.id == id => accepted = Some(clock.now_ns()),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        if timed {
            h.saturating_record((accepted.expect("set") - t0) * 1_000);
        }
        strategy
            .commands
            .push(Cmd::Cancel { id })
            .expect("ring room");
        let mut canceled = false;
        while !canceled {
            engine.pass(clock.now_ns());
            while let Ok(e) = strategy.events.pop() {
                canceled |= e.id == id && e.kind == EventKind::Canceled;
            }
        }
    }
}
