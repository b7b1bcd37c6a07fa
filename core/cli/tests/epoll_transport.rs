//! The epoll transport under keel's real drivers: the OUCH venue link, the market-data feed
//! handler and the simulated venue (order entry and WebSocket market data) talk over it, alone
//! and mixed with io_uring on the other side; and `keel venue --transport`, including the
//! automatic fallback to epoll when io_uring is forbidden (a seccomp filter in the child, as a
//! container profile would have it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

use common::world::WorldBuilder;
use keel::clock::Clock;
use keel::net::{EpollReactor, Reactor, SocketTransport, TransportKind, WaitMode};
use keel::order::{Command as Cmd, EventKind, Price, Side, SymbolId, VenueId};

/// Engine on `T`, venue on `V` (the one test world: the engine's own loop with one OUCH link
/// and one feed handler, busy-polling with spin reads as on an isolated core): login, an order
/// accepted and shown in the market-data book the feed handler keeps, filled, a second order
/// canceled.
fn order_path_and_market_data<T: SocketTransport, V: SocketTransport>() {
    let mut w = WorldBuilder::new()
        .market_data(&["MSFT"])
        .reactor(|r| {
            r.wait = WaitMode::BusyPoll;
            r.spin_reads = true;
        })
        .build_on::<T, V>();
    w.until("login and market-data sync", |w| {
        w.dispatcher().is_synced(VenueId(0)) && w.engine.feeds()[0].synced()
    });
    let buy = w.order(1, 100);
    w.send(Cmd::New(buy));
    w.until("the buy accepted", |w| {
        w.kinds(buy.id) == [EventKind::Accepted]
    });
    // The resting bid reaches the feed handler's book over the market-data connection.
    let mut top = None;
    w.until("the bid in the feed's book", |w| {
        let book = w.book.as_mut().expect("the world has a feed");
        while let Some((_, t)) = book.next_book() {
            top = Some(t);
        }
        top.is_some_and(|t| t.bids[0] == (buy.price.0, 100))
    });
    let now = w.clock.now_ns();
    w.venue().exchange_mut().synthetic(
        now,
        1,
        Side::Sell,
        Price::from_units(49, 9000).0,
        100,
        true,
    );
    let filled = EventKind::Filled {
        qty: 100,
        price: buy.price,
    };
    w.until("the buy filled", |w| {
        w.kinds(buy.id).last() == Some(&filled)
    });
    let rest = keel::order::NewOrder {
        side: Side::Sell,
        qty: 50,
        price: Price::from_units(51, 0),
        ..w.order(2, 50)
    };
    w.send(Cmd::New(rest));
    w.until("the sell accepted", |w| {
        w.kinds(rest.id) == [EventKind::Accepted]
    });
    w.send(Cmd::Cancel { id: rest.id });
    w.until("the sell canceled", |w| {
        w.kinds(rest.id).last() == Some(&EventKind::Canceled)
    });
    assert_eq!(w.kinds(buy.id), [EventKind::Accepted, filled]);
    assert!(w.venue().exchange().book(1).is_empty());
    assert_eq!(w.link().stats().decode_errors, 0);
    assert_eq!(w.dispatcher().guards().risk.position(SymbolId(1)), 100);
    let feed = w.engine.feeds()[0].stats();
    assert!(feed.deltas > 0, "{feed:?}");
}

// Goal: keel's drivers behave on epoll as on io_uring: the whole order path and the market
// data, with epoll on both sides.
#[test]
fn order_path_and_market_data_on_epoll() {
    order_path_and_market_data::<EpollReactor, EpollReactor>();
}

// Goal: the two transports interoperate (they are only different ways to drive TCP): engine
// on epoll against a venue on io_uring, and the other way round.
#[test]
fn order_path_and_market_data_mixed() {
    order_path_and_market_data::<EpollReactor, Reactor>();
    order_path_and_market_data::<Reactor, EpollReactor>();
}

// ----- keel venue --transport ----------------------------------------------------------------

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

/// A `keel venue` child on free ports, its first stdout line, and its stderr.
struct VenueProc {
    child: Child,
    line: String,
}

impl VenueProc {
    fn spawn(extra: &[&str], forbid_io_uring: bool) -> Self {
        let mut command = Command::new(KEEL);
        command
            .args([
                "venue",
                "--listen",
                "127.0.0.1:0",
                "--control",
                "127.0.0.1:0",
            ])
            .args(["--md-listen", "127.0.0.1:0", "--duration-s", "60"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if forbid_io_uring {
            common::peers::without_io_uring(&mut command);
        }
        let mut child = command.spawn().expect("keel venue");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the venue's first line");
        Self { child, line }
    }

    /// The address after `label` in the first line ("... control on ADDR, ...").
    fn addr(&self, label: &str) -> String {
        let rest = &self.line[self.line.find(label).expect(label) + label.len()..];
        rest.split([',', ' ', '\n']).next().unwrap().to_string()
    }

    /// Stops the venue and returns what it wrote to stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .unwrap();
        err
    }
}

/// Asks the venue's control port for its status; the answer line.
fn status(control: &str) -> String {
    let mut s = TcpStream::connect(control).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"status\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

/// A WebSocket upgrade to the market-data server; the status line of its answer.
fn md_upgrade(md: &str) -> String {
    let host = md.trim_start_matches("ws://").trim_end_matches("/md");
    let (request, _) = keel::proto::ws::request(host, "/md", [7; 16]);
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

// Goal: `keel venue --transport epoll` serves order entry (control answers), market data (a
// WebSocket upgrade) and says which transport it runs on; no warning.
#[test]
fn keel_venue_runs_on_epoll_when_asked() {
    let v = VenueProc::spawn(&["--transport", "epoll"], false);
    assert!(v.line.contains("transport epoll,"), "{}", v.line);
    assert!(status(&v.addr("control on ")).starts_with("ok"));
    assert_eq!(
        md_upgrade(&v.addr("market data on ")),
        "HTTP/1.1 101 Switching Protocols"
    );
    let err = v.stop();
    assert!(!err.contains("warning"), "{err}");
}

// Goal: the default (io_uring) where io_uring is forbidden: the venue warns on stderr naming
// the cause and the sysctl, falls back to epoll, and serves; epoll asked for under the same
// filter runs without a warning; io_uring where it works needs no fallback.
#[test]
fn keel_venue_falls_back_to_epoll_when_io_uring_is_forbidden() {
    let v = VenueProc::spawn(&[], true);
    assert!(v.line.contains("transport epoll,"), "{}", v.line);
    assert!(status(&v.addr("control on ")).starts_with("ok"));
    assert_eq!(
        md_upgrade(&v.addr("market data on ")),
        "HTTP/1.1 101 Switching Protocols"
    );
    let err = v.stop();
    assert!(err.contains("warning: io_uring unavailable"), "{err}");
    assert!(err.contains("kernel.io_uring_disabled"), "{err}");
    assert!(err.contains("Operation not permitted"), "{err}");
    assert!(err.contains("running on epoll instead"), "{err}");

    let v = VenueProc::spawn(&["--transport", "epoll"], true);
    assert!(v.line.contains("transport epoll,"), "{}", v.line);
    assert!(status(&v.addr("control on ")).starts_with("ok"));
    assert!(!v.stop().contains("warning"));

    let v = VenueProc::spawn(&["--transport", "io_uring"], false);
    assert!(v.line.contains("transport io_uring,"), "{}", v.line);
    assert!(status(&v.addr("control on ")).starts_with("ok"));
    assert!(!v.stop().contains("warning"));
}

// Goal: a transport name that is neither is refused at start (usage error, 64) with the value
// and the choices.
#[test]
fn keel_venue_refuses_an_unknown_transport() {
    for bad in ["uring", "EPOLL", ""] {
        let out = Command::new(KEEL)
            .args(["venue", "--transport", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("unknown transport '{bad}'"))
                && err.contains("expected one of: io_uring epoll"),
            "{err}"
        );
    }
    assert_eq!(TransportKind::default().to_string(), "io_uring");
}

// Goal: the main job runs where io_uring is blocked: `keel demo` under a seccomp filter that
// refuses the io_uring calls says why, runs engine and venue on epoll, and keeps every
// invariant.
#[test]
fn keel_demo_falls_back_to_epoll_where_io_uring_is_blocked() {
    let mut command = Command::new(KEEL);
    command
        .args(["demo", "--quick", "--idle", "backoff", "--scenario", "calm"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = common::peers::without_io_uring(&mut command)
        .output()
        .expect("keel demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("io_uring unavailable"), "{stderr}");
    assert!(stdout.contains("transport epoll"), "{stdout}");
    assert!(
        stdout.contains("invariants: ") && stdout.contains(" 0 violated"),
        "{stdout}"
    );
}
