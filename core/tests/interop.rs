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
    ClientOrderId, Command, EventKind, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
    VenueId,
};
use keel::proto::ouch::Dialect;
use keel::runtime::{IdlePolicy, Idler};
use keel::session::ProtocolConfig;
use keel::venue::exchange::ExchangeConfig;
use keel::venue::flow::FlowConfig;
use keel::venue::server::{VenueConfig, VenueServer};

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

fn client_trades_on_keel_venue<T: SocketTransport>() {
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
    let (mut child, lines) = spawn(
        &python,
        &[script("ouch_client.py"), venue.local_addr().to_string()],
    );
    let clock = TscClock::new();
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
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (mut child, lines) = spawn(
        &python,
        &[script("ouch_venue.py"), addr.to_string(), "6".into()],
    );
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
    let mut venue = common::ouch_venue(addr, "keel", 64, 2_000_000_000, Default::default());
    venue.password = "pw".into();
    venue.protocol = ProtocolConfig::Ouch {
        dialect: Dialect::OUCH_CONNECT,
        // The ouch-connect server has no keel extension: an Account Query is the barrier.
        reconcile: keel::session::ouch::ReconcileMode::AccountQueryBarrier,
        rejects: Default::default(),
    };
    // The engine's own loop (`EngineBuilder::build`), stepped here.
    let mut engine = EngineBuilder::new(common::engine_config(&["AAPL"], config, vec![venue], 64))
        .build(reactor, clock.now_ns())
        .unwrap();
    let mut strategy = engine.take_strategy(StrategyId(0)).unwrap();
    let mut idler = Idler::new(IdlePolicy::TEST);

    let id = ClientOrderId::new(StrategyId(0), 1).unwrap();
    let order = NewOrder {
        id,
        venue: VenueId(0),
        symbol: SymbolId(0),
        side: Side::Buy,
        price: Price::from_units(12, 3400),
        qty: 300,
        tif: TimeInForce::Day,
    };
    let mut sent_order = false;
    let mut sent_cancel = false;
    let mut events = Vec::new();
    let deadline = clock.now_ns() + 30_000_000_000;
    while events.len() < 2 {
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
        if engine.dispatcher().is_synced(VenueId(0)) && !sent_order {
            strategy.commands.push(Command::New(order)).unwrap();
            sent_order = true;
        }
        while let Ok(e) = strategy.events.pop() {
            if e.kind == EventKind::Accepted && !sent_cancel {
                strategy.commands.push(Command::Cancel { id }).unwrap();
                sent_cancel = true;
            }
            events.push(e);
        }
    }
    assert_eq!(
        events.iter().map(|e| (e.id, e.kind)).collect::<Vec<_>>(),
        vec![(id, EventKind::Accepted), (id, EventKind::Canceled)]
    );
    assert_eq!(engine.links()[0].stats().decode_errors, 0);
    let status = child.wait().unwrap();
    assert!(status.success());
    let summary: Vec<String> = lines.try_iter().collect();
    assert!(
        summary
            .iter()
            .any(|l| l == r#"SUMMARY {"account_query": 1, "cancel": 1, "enter": 1, "login": 1}"#),
        "{summary:?}"
    );
}
