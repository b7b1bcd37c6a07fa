//! Market data past one machine (issue 15): `keel venue --nats` publishes every event once on
//! a real NATS server (Debian's `nats-server`, installed by scripts/test), stateless `keel
//! gateway`s subscribe and serve the WebSocket protocol, and clients not written here (Python's
//! `websockets`, core/cli/tests/interop/md_clients.py) keep books through them — while gateways die
//! and are added, and while the bus itself restarts. At the end every client's book is the
//! venue's, sequence for sequence.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::peers::{python, venue, Proc, KEEL};

/// The tests here run one at a time: each loads both cores (a venue, gateways, a bus, many
/// Python clients), and side by side they would measure the machine, not the gateways.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const CLIENTS_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/md_clients.py");
const SYMBOLS: &str = "AAPL,MSFT";

/// A port free now (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `command` started (its output dropped), once it accepts on `port` of loopback.
fn listening(command: &mut Command, port: u16) -> Proc {
    let proc = Proc(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{command:?} did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    proc
}

/// `nats-server` on `port`, accepting; `None` (skipped, said) when it is not installed and
/// `KEEL_REQUIRE_OBSERVABILITY` is not set (scripts/test sets it and installs the server).
fn nats(port: u16) -> Option<Proc> {
    let found = Command::new("nats-server")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        assert!(
            std::env::var("KEEL_REQUIRE_OBSERVABILITY").as_deref() != Ok("1"),
            "nats-server is not installed (scripts/test installs Debian's)"
        );
        eprintln!("bus test not run: nats-server is not installed");
        return None;
    }
    Some(listening(
        Command::new("nats-server").args(["-a", "127.0.0.1", "-p", &port.to_string()]),
        port,
    ))
}

/// `keel gateway` on the bus at `port`, listening on `listen`: the process and its
/// `ws://…/md` URL.
fn gateway(port: u16, listen: &str) -> (Proc, String) {
    let mut child = Command::new(KEEL)
        .args(["gateway", "--nats", &format!("nats://127.0.0.1:{port}")])
        .args([
            "--listen",
            listen,
            "--symbols",
            SYMBOLS,
            "--transport",
            "epoll",
        ])
        // A thousand Python clients in one process answer pings late under load: a long
        // silence limit keeps the test about the gateways, not the interpreter.
        .args(["--ping-s", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "keel gateway: market data on ws://ADDR/md, bus …"
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("ws://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches(',')
        .to_string();
    (Proc(child), url)
}

fn control(addr: &str, line: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A NATS server and a venue publishing on it at `flow_rate` events/s, with its REST API (the
/// venue's books: the truth at the end).
struct World {
    port: u16,
    url: String,
    venue: common::peers::Venue,
    nats: Option<Proc>,
}

/// The [`World`], or `None` (said) without nats-server outside scripts/test.
fn world(flow_rate: &str) -> Option<World> {
    let port = free_port();
    let nats = nats(port)?;
    let url = format!("nats://127.0.0.1:{port}");
    let venue = venue(&[
        "--nats",
        &url,
        "--rest-listen",
        "127.0.0.1:0",
        "--symbols",
        SYMBOLS,
        "--flow-rate",
        flow_rate,
    ]);
    Some(World {
        port,
        url,
        venue,
        nats: Some(nats),
    })
}

/// Stops the venue's flow, lets the market go quiet, ends the clients: every one of the `n`
/// must hold the venue's books. Their summary.
fn quiet(v: &common::peers::Venue, clients: Clients, n: u64, what: &str) -> serde_json::Value {
    assert_eq!(control(&v.control, "flow 0"), "ok flow 0\n");
    std::thread::sleep(Duration::from_millis(500));
    let s = clients.finish();
    eprintln!("{what}: {s}");
    assert_eq!(s["wrong"], 0, "{s}");
    assert_eq!(s["converged"], n, "{s}");
    s
}

/// The clients, started on `gateways`; `finish` ends them once the market is quiet.
struct Clients {
    proc: Proc,
    done: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Clients {
    fn start(python: &str, gateways: &[String], n: usize, rest: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let done = dir.path().join("done");
        let proc = Proc(
            Command::new(python)
                .arg(CLIENTS_PY)
                .args([&gateways.join(","), &n.to_string(), SYMBOLS, rest])
                .arg(&done)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        Self {
            proc,
            done,
            _dir: dir,
        }
    }

    fn finish(mut self) -> serde_json::Value {
        std::fs::write(&self.done, "").unwrap();
        let mut out = String::new();
        self.proc
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }
}

// Goal (issue 15): three gateways, a thousand clients spread over them, the venue publishing
// 2,500 events a second: one gateway is killed mid-run (its clients reconnect to the others
// with jitter and resync by snapshot), a fourth is added (it starts from bus snapshots; clients
// that find it get consistent data), then the market goes quiet — and every client's books
// equal the venue's.
#[test]
fn clients_keep_the_venue_book_through_gateways_killed_and_added() {
    let _serial = serial();
    let Some(python) = python() else { return };
    let Some(w) = world("2500") else { return };
    let (port, v) = (w.port, &w.venue);
    let rest = v.rest.clone().unwrap();
    let (g1, u1) = gateway(port, "127.0.0.1:0");
    let (_g2, u2) = gateway(port, "127.0.0.1:0");
    let (_g3, u3) = gateway(port, "127.0.0.1:0");
    // The fourth gateway's address is known from the start; it is not there yet.
    let fourth = format!("127.0.0.1:{}", free_port());
    let u4 = format!("ws://{fourth}/md");
    let clients = Clients::start(&python, &[u1, u2, u3, u4], 1_000, &rest);
    std::thread::sleep(Duration::from_secs(4));
    drop(g1); // killed (SIGKILL)
    std::thread::sleep(Duration::from_secs(2));
    let (_g4, _) = gateway(port, &fourth);
    std::thread::sleep(Duration::from_secs(3));
    let s = quiet(v, clients, 1_000, "clients through gateways");
    assert!(
        s["reconnects"].as_u64().unwrap() >= 250,
        "the killed gateway's clients moved: {s}"
    );
    assert!(
        s["snapshots"].as_u64().unwrap() >= 1_000,
        "every client resynced at least once: {s}"
    );
}

// Goal (issue 15): the bus itself restarts mid-run: the gateways and the publisher reconnect
// with backoff, the gateways resync every book from bus snapshots, and clients see a resync
// (a fresh snapshot, or a gap they repair), never wrong data.
#[test]
fn a_bus_restart_is_a_resync_not_wrong_data() {
    let _serial = serial();
    let Some(python) = python() else { return };
    let Some(mut w) = world("1000") else { return };
    let (port, v) = (w.port, &w.venue);
    let nats1 = w.nats.take();
    let rest = v.rest.clone().unwrap();
    let (_g1, u1) = gateway(port, "127.0.0.1:0");
    let (_g2, u2) = gateway(port, "127.0.0.1:0");
    let clients = Clients::start(&python, &[u1, u2], 50, &rest);
    std::thread::sleep(Duration::from_secs(3));
    drop(nats1);
    std::thread::sleep(Duration::from_secs(2));
    let Some(_nats2) = nats(port) else { return };
    // Reconnects (the client's backoff), snapshots, then the market moves on.
    std::thread::sleep(Duration::from_secs(6));
    quiet(v, clients, 50, "clients through a bus restart");
}

// Goal (issue 15): the engine's feed handler, given gateways (`[[feed]] address` and
// `alternates`), moves to the next one when its gateway dies, resyncs every book by snapshot,
// and ends with the venue's books.
#[test]
fn the_engines_feed_moves_to_the_next_gateway() {
    let _serial = serial();
    use keel::clock::{Clock, TscClock};
    use keel::feed::handler::{FeedConfig, FeedHandler};
    use keel::guard::backoff::BackoffConfig;
    use keel::net::{EpollReactor, ReactorConfig, SocketTransport};
    let Some(w) = world("1000") else { return };
    let (port, v) = (w.port, &w.venue);
    let rest: std::net::SocketAddr = v.rest.as_deref().unwrap().parse().unwrap();
    let (g1, u1) = gateway(port, "127.0.0.1:0");
    let (_g2, u2) = gateway(port, "127.0.0.1:0");
    let addr = |u: &str| {
        u.trim_start_matches("ws://")
            .trim_end_matches("/md")
            .parse()
            .unwrap()
    };
    let mut handler = FeedHandler::new(FeedConfig {
        addr: addr(&u1),
        alternates: vec![addr(&u2)],
        symbols: SYMBOLS.split(',').map(str::to_string).collect(),
        backoff: BackoffConfig {
            base_ns: 20_000_000,
            cap_ns: 200_000_000,
            ..BackoffConfig::default()
        },
        ..FeedConfig::default()
    });
    let mut t = EpollReactor::open(ReactorConfig::default()).unwrap();
    let clock = TscClock::new();
    handler.start(clock.now_ns(), &mut t);
    let mut events = Vec::new();
    let mut run_until =
        |handler: &mut FeedHandler, what: &str, done: &dyn Fn(&FeedHandler) -> bool| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !done(handler) {
                assert!(Instant::now() < deadline, "{what}: {:?}", handler.stats());
                let now = clock.now_ns();
                events.clear();
                t.poll(now, 1_000_000, &mut events).unwrap();
                for e in &events {
                    handler.on_event(now, &mut t, e);
                }
                handler.step(now, &mut t);
                t.flush().unwrap();
            }
        };
    run_until(&mut handler, "synced on the first gateway", &|h| {
        h.synced() && h.stats().deltas > 200
    });
    drop(g1);
    let before = handler.stats();
    run_until(&mut handler, "synced on the second gateway", &|h| {
        h.stats().disconnects > before.disconnects
            && h.synced()
            && h.stats().deltas > before.deltas + 200
    });
    assert_eq!(control(&v.control, "flow 0"), "ok flow 0\n");
    // The books settle on the venue's: wait for that fact (the bus and the gateway may lag on
    // a loaded machine), then compare level for level.
    let deadline = Instant::now() + Duration::from_secs(20);
    for (i, symbol) in SYMBOLS.split(',').enumerate() {
        loop {
            let settle = Instant::now() + Duration::from_millis(300);
            run_until(&mut handler, "quiet", &|_| Instant::now() > settle);
            let (seq, bids, asks) =
                common::peers::parse_book(&common::peers::http_get(rest, symbol));
            let b = handler.book(i as u16);
            if b.seq() == Some(seq) {
                assert_eq!(b.bids().collect::<Vec<_>>(), bids, "{symbol}");
                assert_eq!(b.asks().collect::<Vec<_>>(), asks, "{symbol}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{symbol}: book at {:?}, venue at {seq}",
                b.seq()
            );
        }
    }
    let s = handler.stats();
    assert!(s.connects >= 2, "{s:?}");
    assert_eq!(
        s.gaps + s.crossed + s.malformed + s.protocol_errors,
        0,
        "{s:?}"
    );
}

/// A WebSocket client that subscribes to trades on every symbol and then never reads: its
/// socket's buffers fill, then the gateway's queue for it.
fn stalled_client(url: &str) -> TcpStream {
    use keel::proto::ws::{encode_frame, header_len, Opcode};
    let addr = url.trim_start_matches("ws://").trim_end_matches("/md");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let upgrade = format!(
        "GET /md HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(upgrade.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    for symbol in SYMBOLS.split(',') {
        let json = format!(r#"{{"op":"subscribe","channel":"trades","symbol":"{symbol}"}}"#);
        let mut frame = vec![0u8; header_len(json.len(), true) + json.len()];
        let n = encode_frame(
            &mut frame,
            true,
            Opcode::Text,
            json.as_bytes(),
            Some([1, 2, 3, 4]),
        );
        s.write_all(&frame[..n]).unwrap();
    }
    s
}

// Goal (issue 15): a trades subscriber that stops reading on one gateway is dropped by that
// gateway (its queue bound, close 4001) and costs no other client anything: the healthy clients
// of the same gateway and of another one keep the venue's books, with no disconnect.
#[test]
fn a_slow_consumer_on_one_gateway_hurts_no_one() {
    let _serial = serial();
    let Some(python) = python() else { return };
    let Some(w) = world("3000") else { return };
    let (port, v) = (w.port, &w.venue);
    let rest = v.rest.clone().unwrap();
    let (_g1, u1) = gateway(port, "127.0.0.1:0");
    let (_g2, u2) = gateway(port, "127.0.0.1:0");
    let _stalled = stalled_client(&u1);
    let u2_again = u2.clone();
    let clients = Clients::start(&python, &[u1, u2], 40, &rest);
    std::thread::sleep(Duration::from_secs(6));
    let s = quiet(v, clients, 40, "healthy clients beside a slow consumer");
    assert_eq!(s["reconnects"], 0, "no healthy client was dropped: {s}");
    // The documented Python example, given a dead address first, moves on to a gateway and
    // keeps the book (examples/python/md_client.py).
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/python/md_client.py"
    );
    let dead = format!("ws://127.0.0.1:{}/md", free_port());
    let out = Command::new(&python)
        .args([example, &format!("{dead},{u2_again}"), "AAPL", "2"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("{dead}: ")), "{stderr}");
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        last.starts_with("final AAPL seq ") && !last.contains("seq None"),
        "{stdout}"
    );
}

/// A venue publishing 3,000 events/s on the bus, one gateway, ten clients following it (given
/// two seconds to take their snapshots); `None` without nats-server or the interop Python.
fn one_gateway_ten_clients() -> Option<(World, Proc, Clients)> {
    let python = python()?;
    let w = world("3000")?;
    let rest = w.venue.rest.clone().unwrap();
    let (gateway, url) = gateway(w.port, "127.0.0.1:0");
    let clients = Clients::start(&python, &[url], 10, &rest);
    std::thread::sleep(Duration::from_secs(2));
    Some((w, gateway, clients))
}

// Goal (adversary on the bus): a forged snapshot far ahead of the stream (sequence near
// u64::MAX, made-up levels) published on a symbol's book subject cannot freeze the gateway's
// book: the stream's deltas never pass it, the gateway sees more than `pending_max` in a row
// at or below its sequence, resyncs from the real publisher — and every client ends with the
// venue's books.
#[test]
fn a_forged_snapshot_on_the_bus_is_repaired() {
    let _serial = serial();
    use keel_venue::bus::{BusEvent, Publisher};
    let Some((w, _g1, clients)) = one_gateway_ten_clients() else {
        return;
    };
    let v = &w.venue;
    {
        let symbols = SYMBOLS.split(',').map(str::to_string).collect();
        let (forger, mut ring) = Publisher::start(&w.url, symbols, 16).unwrap();
        ring.push(BusEvent::Snapshot {
            symbol: 0,
            seq: u64::MAX - 10,
            trade_seq: 0,
            bids: vec![(1, 999_999)],
            asks: vec![(i64::MAX, 1)],
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while forger
            .counters
            .messages
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            assert!(
                Instant::now() < deadline,
                "the forged snapshot was never published"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    } // the forger is gone: only the venue answers snapshot requests from here
    std::thread::sleep(Duration::from_secs(4));
    quiet(v, clients, 10, "clients after a forged snapshot");
}

/// Publishes `payload` on `subject` as a plain NATS client would (the text protocol over TCP:
/// CONNECT, PUB, then PING until PONG, so the server has taken it before this returns).
fn nats_publish(port: u16, subject: &str, payload: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("INFO "), "{line}");
    let len = payload.len();
    write!(
        s,
        "CONNECT {{\"verbose\":false,\"pedantic\":false}}\r\nPUB {subject} {len}\r\n{payload}\r\nPING\r\n"
    )
    .unwrap();
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "nats-server closed");
        assert!(!line.starts_with("-ERR"), "{line}");
        if line.starts_with("PONG") {
            return;
        }
    }
}

// Goal (issue 23, point 12: silently wrong data): a snapshot on AAPL's subject whose payload
// names MSFT, one sequence number ahead of AAPL's stream, in a quiet market. Applied, AAPL's
// book would hold made-up levels at a plausible sequence and no later delta would ever repair
// it; refused (counted, resynced), every client ends with the venue's books.
#[test]
fn a_snapshot_about_another_symbol_is_refused() {
    let _serial = serial();
    let Some((w, _g1, clients)) = one_gateway_ten_clients() else {
        return;
    };
    let (port, v) = (w.port, &w.venue);
    let rest = v.rest.clone().unwrap();
    assert_eq!(control(&v.control, "flow 0"), "ok flow 0\n");
    std::thread::sleep(Duration::from_millis(500));
    let (seq, _, _) =
        common::peers::parse_book(&common::peers::http_get(rest.parse().unwrap(), "AAPL"));
    let forged = format!(
        r#"{{"type":"snapshot","symbol":"MSFT","seq":{},"bids":[[10000,999999]],"asks":[[20000,999999]]}}"#,
        seq + 1
    );
    nats_publish(port, "keel.md.AAPL.book", &forged);
    std::thread::sleep(Duration::from_secs(2));
    quiet(
        v,
        clients,
        10,
        "clients after a snapshot about another symbol",
    );
}

// Goal (issue 15): clients behind a real load balancer (Debian's HAProxy, TCP mode, round
// robin, health checks) know one address only; a gateway behind it dies, the balancer stops
// sending to it, the clients reconnect to the same address and land on a live gateway, resync,
// and end with the venue's books.
#[test]
fn clients_behind_haproxy_survive_a_gateway() {
    let _serial = serial();
    let Some(python) = python() else { return };
    if Command::new("haproxy").arg("-v").output().is_err() {
        assert!(
            std::env::var("KEEL_REQUIRE_OBSERVABILITY").as_deref() != Ok("1"),
            "haproxy is not installed (scripts/test installs Debian's)"
        );
        eprintln!("load-balancer test not run: haproxy is not installed");
        return;
    }
    let Some(w) = world("1000") else { return };
    let (port, v) = (w.port, &w.venue);
    let rest = v.rest.clone().unwrap();
    let (g1, u1) = gateway(port, "127.0.0.1:0");
    let (_g2, u2) = gateway(port, "127.0.0.1:0");
    let backend = |u: &str| {
        u.trim_start_matches("ws://")
            .trim_end_matches("/md")
            .to_string()
    };
    let front = free_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 60s\n  timeout server 60s\n\
             frontend md\n  bind 127.0.0.1:{front}\n  default_backend gateways\n\
             backend gateways\n  balance roundrobin\n\
               server g1 {} check inter 200ms fall 1 rise 2\n\
               server g2 {} check inter 200ms fall 1 rise 2\n",
            backend(&u1),
            backend(&u2)
        ),
    )
    .unwrap();
    let _lb = listening(
        Command::new("haproxy").args(["-f", cfg.to_str().unwrap(), "-db"]),
        front,
    );
    let clients = Clients::start(&python, &[format!("ws://127.0.0.1:{front}/md")], 100, &rest);
    std::thread::sleep(Duration::from_secs(3));
    drop(g1);
    std::thread::sleep(Duration::from_secs(3));
    let s = quiet(v, clients, 100, "clients behind haproxy");
    assert!(
        s["reconnects"].as_u64().unwrap() >= 25,
        "g1's clients came back through the balancer: {s}"
    );
}
