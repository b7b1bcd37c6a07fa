//! Interoperability with an OUCH implementation nobody here wrote: the `ouch-connect` package
//! from PyPI (5.0.1), which speaks OUCH 5.0 over SoupBinTCP. Its client trades on keel's
//! venue, and keel's engine trades with its server. Both use its wire layout (`Dialect::
//! OUCH_CONNECT`: 9-byte Symbol, OrigUserRefNum in Order Canceled; see docs/protocol.md).
//!
//! scripts/test installs the package in a virtualenv and sets `KEEL_INTEROP_PYTHON`; with
//! `KEEL_REQUIRE_INTEROP=1` (as scripts/test sets it) a missing interpreter fails the test.

mod common;

use common::peers::python;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command as Process, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use keel::clock::{Clock, TscClock};
use keel::dispatch::DispatcherConfig;
use keel::engine::EngineBuilder;
use keel::net::{EpollReactor, Reactor, ReactorConfig, SocketTransport};
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, RejectReason, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};
use keel::proto::ouch::Dialect;
use keel::runtime::{IdlePolicy, Idler};
use keel::session::ProtocolConfig;
use keel_venue::exchange::ExchangeConfig;
use keel_venue::flow::FlowConfig;
use keel_venue::server::{VenueConfig, VenueServer};

fn script(name: &str) -> String {
    format!("{}/tests/interop/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Spawns a script and forwards its stdout lines to a channel.
fn spawn(python: &str, args: &[String]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Process::new(python)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("[python] {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

// Goal: the ouch-connect client logs into keel's venue, enters, cancels, gets filled by the
// venue's market and has a duplicate UserRefNum rejected, all decoded by its own codec.
#[test]
fn ouch_connect_client_trades_on_keel_venue() {
    client_trades_on_keel_venue::<Reactor>();
}

// Goal: the same with keel's venue on the epoll transport.
#[test]
fn ouch_connect_client_trades_on_keel_venue_on_epoll() {
    client_trades_on_keel_venue::<EpollReactor>();
}

// Goal (issue 23, point 11: heartbeat-only connections held every slot of the venue, so a
// real client was refused): the same client, after 300 connections that only heartbeat (more
// than the venue's 256 slots) were all accepted and are still open, logs in and trades as
// above; the flood holds at most the 64 pre-login slots, the rest were evicted oldest first.
#[test]
fn ouch_connect_client_trades_on_keel_venue_through_a_heartbeat_flood() {
    client_trades_on_keel_venue_with::<Reactor>(300);
}

fn client_trades_on_keel_venue<T: SocketTransport>() {
    client_trades_on_keel_venue_with::<T>(0);
}

/// Opens `n` order-entry connections to `addr` that each send one SoupBinTCP heartbeat and
/// never log in; they stay open until `stop` is raised.
fn heartbeat_flood(
    addr: std::net::SocketAddr,
    n: usize,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    use std::io::Write;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held = stop.clone();
    let flood = std::thread::spawn(move || {
        let mut beat = [0u8; 8];
        let len = keel::proto::soupbin::encode_client(
            &mut beat,
            &keel::proto::soupbin::ClientPacket::Heartbeat,
        )
        .unwrap();
        let conns: Vec<std::net::TcpStream> = (0..n)
            .filter_map(|_| std::net::TcpStream::connect(addr).ok())
            .collect();
        for mut c in &conns {
            let _ = c.write_all(&beat[..len]);
        }
        while !held.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    (stop, flood)
}

fn client_trades_on_keel_venue_with<T: SocketTransport>(flood: u64) {
    use keel_venue::server::DropReason;
    let Some(python) = python() else { return };
    let config = VenueConfig {
        exchange: ExchangeConfig {
            dialect: Dialect::OUCH_CONNECT,
            ..ExchangeConfig::default()
        },
        flow: FlowConfig {
            events_per_sec: 0,
            ..FlowConfig::default()
        },
        ..VenueConfig::default()
    };
    let mut venue = VenueServer::<T>::open(config).unwrap();
    let (stop_flood, flood_thread) = heartbeat_flood(venue.local_addr(), flood as usize);
    let clock = TscClock::new();
    let flood_deadline = clock.now_ns() + 60_000_000_000;
    // Every flood connection accounted for: open (not logged in) or evicted.
    let evicted = |v: &VenueServer<T>| {
        let drops = &v.stats().drops;
        drops
            .get(&DropReason::PreLoginEvicted)
            .copied()
            .unwrap_or(0)
    };
    while venue.sessions() as u64 + evicted(&venue) < flood {
        assert!(
            clock.now_ns() < flood_deadline,
            "the flood was not accepted"
        );
        venue.step(clock.now_ns(), 1_000_000).unwrap();
    }
    assert!(
        venue.sessions() <= 64,
        "{} pre-login sessions",
        venue.sessions()
    );
    let (mut child, lines) = spawn(
        &python,
        &[script("ouch_client.py"), venue.local_addr().to_string()],
    );
    let deadline = clock.now_ns() + 60_000_000_000;
    let mut seen = Vec::new();
    let status = loop {
        assert!(
            clock.now_ns() < deadline,
            "ouch-connect client did not finish: {seen:?}"
        );
        venue.step(clock.now_ns(), 1_000_000).unwrap();
        while let Ok(line) = lines.try_recv() {
            if line == "READY-FOR-FILL" {
                // The market takes the client's resting sell.
                venue.exchange_mut().synthetic(
                    clock.now_ns(),
                    0,
                    Side::Buy,
                    Price::from_units(10, 0).0,
                    40,
                    false,
                );
            }
            seen.push(line);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
    };
    seen.extend(lines.try_iter());
    assert!(status.success(), "client failed: {seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("OK"), "{seen:?}");
    assert_eq!(venue.stats().logins, 1);
    let stats = venue.exchange().stats();
    assert_eq!((stats.accepted, stats.rejected, stats.matches), (2, 1, 1));
    let refused = venue.stats().drops.get(&DropReason::SessionsFull);
    assert_eq!(refused, None, "no connection refused for want of a slot");
    stop_flood.store(true, std::sync::atomic::Ordering::Relaxed);
    flood_thread.join().unwrap();
}

// Goal: keel's engine (dispatcher → OUCH link over io_uring; below, over epoll) trades with the ouch-connect
// server: login, an order accepted, the order canceled, events delivered to the strategy.
#[test]
fn keel_engine_trades_with_ouch_connect_venue() {
    engine_trades_with_ouch_connect_venue::<Reactor>();
}

// Goal: the same with the engine's executor on the epoll transport.
#[test]
fn keel_engine_trades_with_ouch_connect_venue_on_epoll() {
    engine_trades_with_ouch_connect_venue::<EpollReactor>();
}

fn engine_trades_with_ouch_connect_venue<T: SocketTransport>() {
    let Some(python) = python() else { return };
    let id = ClientOrderId::new(StrategyId(0), 1).unwrap();
    let mut sent_cancel = false;
    let run = run_against_ouch_connect::<T>(&python, &[], 2_000_000_000, &[id], |e| {
        if e.kind == EventKind::Accepted && !std::mem::replace(&mut sent_cancel, true) {
            Some(Command::Cancel { id })
        } else {
            None
        }
    });
    assert_eq!(
        run.events,
        vec![(id, EventKind::Accepted), (id, EventKind::Canceled)]
    );
    assert_eq!(
        run.summary,
        r#"{"account_query": 1, "cancel": 1, "enter": 1, "login": 1}"#
    );
}

// Goal (issue 12, rail 4): against a standard OUCH venue (account-query reconciliation), an
// order whose acknowledgement never comes is settled with what the standard offers — an
// Account Query, whose response follows everything the venue sequenced — and never with keel's
// `q` status query, which the venue does not know. Method: the ouch-connect venue ignores the
// second order; keel reports it Unknown at its ack timeout, asks with an Account Query, and
// closes it "not received"; the venue's summary lists only standard messages and one login.
#[test]
fn an_order_in_doubt_is_settled_with_standard_messages_only() {
    let Some(python) = python() else { return };
    let first = ClientOrderId::new(StrategyId(0), 1).unwrap();
    let second = ClientOrderId::new(StrategyId(0), 2).unwrap();
    let run = run_against_ouch_connect::<Reactor>(
        &python,
        &["--ignore-enter".into(), "2".into()],
        300_000_000,
        &[first, second],
        |_| None,
    );
    let of = |id| {
        run.events
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, k)| *k)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(first), vec![EventKind::Accepted]);
    let not_received = EventKind::Rejected {
        reason: RejectReason::NotReceived,
    };
    assert_eq!(of(second), vec![EventKind::Unknown, not_received]);
    assert_eq!(
        run.summary, r#"{"account_query": 2, "enter": 2, "ignored": 1, "login": 1}"#,
        "only standard messages: the reconciliation's Account Query and the one settling order 2"
    );
}

/// What a run against the ouch-connect venue saw.
struct OuchConnectRun {
    /// Events to the strategy, in order.
    events: Vec<(ClientOrderId, EventKind)>,
    /// The venue's count of what it received, by kind (JSON).
    summary: String,
}

/// keel's engine (its own loop, over transport `T`) against the ouch-connect venue started
/// with `venue_args`: once SYNCED it enters a resting order for each of `ids`; `react` may
/// answer each event with a command. Runs until every order has a final answer (a close, a
/// cancel's answer, or `Accepted` for a resting order nobody cancels) or 30 s pass.
fn run_against_ouch_connect<T: SocketTransport>(
    python: &str,
    venue_args: &[String],
    ack_timeout_ns: u64,
    ids: &[ClientOrderId],
    mut react: impl FnMut(&keel::order::Event) -> Option<Command>,
) -> OuchConnectRun {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut args = vec![script("ouch_venue.py"), addr.to_string(), "6".into()];
    args.extend_from_slice(venue_args);
    let (mut child, lines) = spawn(python, &args);
    assert_eq!(
        lines.recv_timeout(Duration::from_secs(30)).as_deref(),
        Ok("READY")
    );

    let clock = TscClock::new();
    let reactor = T::open(ReactorConfig {
        conns_max: 2,
        ..ReactorConfig::default()
    })
    .unwrap();
    let config = DispatcherConfig {
        strategies: 1,
        ..DispatcherConfig::default()
    };
    let mut venue = common::ouch_venue(addr, "keel", 64, ack_timeout_ns, Default::default());
    venue.password = "pw".into();
    venue.protocol = ProtocolConfig::Ouch(keel::session::ouch::OuchSettings {
        dialect: Dialect::OUCH_CONNECT,
        // The ouch-connect server has no keel extension: an Account Query is the barrier.
        reconcile: keel::session::ouch::ReconcileMode::AccountQueryBarrier,
        rejects: Default::default(),
    });
    // The engine's own loop (`EngineBuilder::build`), stepped here.
    let mut engine = EngineBuilder::new(common::engine_config(&["AAPL"], config, vec![venue], 64))
        .build(reactor, clock.now_ns())
        .unwrap();
    let mut strategy = engine.take_strategy(StrategyId(0)).unwrap();
    let mut idler = Idler::new(IdlePolicy::TEST);
    let order = |id| NewOrder {
        id,
        venue: VenueId(0),
        symbol: SymbolId(0),
        side: Side::Buy,
        price: Price::from_units(12, 3400),
        qty: 300,
        tif: TimeInForce::Day,
        reduce_only: false,
    };
    let mut sent = false;
    let mut events = Vec::new();
    let done = |events: &[(ClientOrderId, EventKind)]| {
        ids.iter().all(|id| {
            let of: Vec<_> = events
                .iter()
                .filter(|(i, _)| i == id)
                .map(|e| e.1)
                .collect();
            of == [EventKind::Accepted]
                || of.iter().any(|k| {
                    matches!(
                        k,
                        EventKind::Canceled | EventKind::Rejected { .. } | EventKind::Filled { .. }
                    )
                })
        })
    };
    let deadline = clock.now_ns() + 30_000_000_000;
    let mut settled_at = None;
    loop {
        assert!(
            clock.now_ns() < deadline,
            "no answers from the ouch-connect venue: {events:?}, link {:?}",
            engine.links()[0].stats()
        );
        if engine.pass(clock.now_ns()) {
            idler.work();
        } else {
            idler.idle();
        }
        assert_eq!(engine.poll_errors(), 0);
        if engine.dispatcher().is_synced(VenueId(0)) && !sent {
            for &id in ids {
                strategy.commands.push(Command::New(order(id))).unwrap();
            }
            sent = true;
        }
        while let Ok(e) = strategy.events.pop() {
            if let Some(command) = react(&e) {
                strategy.commands.push(command).unwrap();
            }
            events.push((e.id, e.kind));
        }
        // Done once every order is answered, and nothing more came for a few passes' worth of
        // time (a late extra event would show).
        match settled_at {
            None if done(&events) => settled_at = Some((clock.now_ns(), events.len())),
            Some((_, n)) if events.len() != n => settled_at = None,
            Some((at, _)) if clock.now_ns() > at + 200_000_000 => break,
            _ => {}
        }
    }
    assert_eq!(engine.links()[0].stats().decode_errors, 0);
    let status = child.wait().unwrap();
    assert!(status.success());
    let summary = lines
        .try_iter()
        .find_map(|l| l.strip_prefix("SUMMARY ").map(str::to_string))
        .expect("the venue's summary");
    OuchConnectRun { events, summary }
}
