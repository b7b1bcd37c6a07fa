//! The feed handler keeping books from REST snapshots and WebSocket deltas (issue 14,
//! `[[feed]] snapshot = "rest"`), against `keel venue`: its market-data server drops,
//! duplicates, reorders and crosses deltas (control `md-faults`), the handler buffers deltas,
//! fetches depth snapshots through the REST gate, drops deltas at or below a snapshot's update
//! id, checks continuity and resyncs the same way after every gap — and ends with the venue's
//! book.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::feed::handler::{FeedConfig, FeedHandler, RestSnapshots, SnapshotSource};
use keel::net::tls::{client_config, server_name};
use keel::net::{EpollReactor, ReactorConfig, SocketTransport, Tls, TlsConfig, Transport};

mod common;

use common::peers::venue;

use common::peers::{http_get, parse_book, Book};

const SYMBOLS: [&str; 3] = ["AAPL", "MSFT", "NVDA"];

/// One control command; its answer.
fn control(addr: &str, line: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The venue's book of `symbol` from its REST API (its own key, so the feed's budget is not
/// touched): `(update id, bids, asks)` in keel's fixed point. Over TLS, read by Python's
/// httpx trusting the test CA.
fn venue_book(rest: SocketAddr, symbol: &str, tls: Option<&Certs>) -> Book {
    let body = match tls {
        Some(certs) => https_get(certs, rest, symbol),
        None => http_get(rest, symbol),
    };
    parse_book(&body)
}

fn https_get(certs: &Certs, rest: SocketAddr, symbol: &str) -> String {
    let url = format!(
        "https://localhost:{}/api/v3/depth?symbol={symbol}&limit=5000",
        rest.port()
    );
    let out = std::process::Command::new(&certs.python)
        .args(["-c", "import httpx, sys; r = httpx.get(sys.argv[1], verify=sys.argv[2], headers={'X-Api-Key': 'test'}); r.raise_for_status(); print(r.text)"])
        .args([&url, &certs.path("ca.pem")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn rest_feed(md: SocketAddr, rest: SocketAddr) -> FeedConfig {
    FeedConfig {
        addr: md,
        symbols: SYMBOLS.iter().map(|s| s.to_string()).collect(),
        resync_retry_ns: 200_000_000,
        snapshot: SnapshotSource::Rest(Box::new(RestSnapshots {
            depth_limit: 5_000,
            ..RestSnapshots::new(rest)
        })),
        ..FeedConfig::default()
    }
}

/// Drives `handler` until `done` holds (or panics after `within`).
fn run_until<T: Transport>(
    handler: &mut FeedHandler,
    t: &mut T,
    clock: &TscClock,
    within: Duration,
    mut done: impl FnMut(&FeedHandler) -> bool,
) {
    let deadline = Instant::now() + within;
    let mut events = Vec::new();
    loop {
        let now = clock.now_ns();
        events.clear();
        t.poll(now, 1_000_000, &mut events).unwrap();
        for e in &events {
            handler.on_event(now, t, e);
        }
        handler.step(now, t);
        t.flush().unwrap();
        if done(handler) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not done in {within:?}: {:?}",
            handler.stats()
        );
    }
}

/// Test certificates (trustme, from PyPI: core/cli/tests/interop/tls_certs.py).
struct Certs {
    dir: tempfile::TempDir,
    python: String,
}

impl Certs {
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn make() -> Option<Self> {
        let python = common::peers::python()?;
        let dir = tempfile::tempdir().unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/tls_certs.py");
        let out = std::process::Command::new(&python)
            .arg(script)
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.stdout.starts_with(b"ok"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Self { dir, python })
    }
}

// Goal: the local books from REST snapshots and WebSocket deltas equal the venue's after a
// feed that dropped, duplicated, reordered and crossed deltas; every fault was detected and
// every resync came from a REST snapshot through the gate (no 429). Plaintext.
#[test]
fn rest_snapshots_and_ws_deltas_keep_the_venue_book_through_faults() {
    let v = venue(&[
        "--rest-listen",
        "127.0.0.1:0",
        "--symbols",
        &SYMBOLS.join(","),
        "--flow-rate",
        "3000",
    ]);
    let mut t = EpollReactor::open(ReactorConfig::default()).unwrap();
    keeps_the_venue_book(&v, &mut t, None);
}

// Goal: the same on a venue that serves only TLS (`https://` snapshots, `wss://` deltas), the
// certificates checked against the test CA.
#[test]
fn rest_snapshots_and_ws_deltas_keep_the_venue_book_over_tls() {
    let Some(certs) = Certs::make() else { return };
    let v = tls_venue(&certs, &SYMBOLS.join(","), "3000");
    assert!(v.md.starts_with("wss://"), "{}", v.md);
    let client = client_config(Some(std::path::Path::new(&certs.path("ca.pem")))).unwrap();
    let mut t = Tls::new(
        EpollReactor::open(ReactorConfig::default()).unwrap(),
        TlsConfig {
            client: Some(client),
            ..TlsConfig::default()
        },
    );
    let (md, rest) = addresses(&v);
    t.add_destination(md, server_name("localhost").unwrap())
        .unwrap();
    t.add_destination(rest, server_name("localhost").unwrap())
        .unwrap();
    keeps_the_venue_book(&v, &mut t, Some(&certs));
    let tls = t.stats();
    assert!(tls.client_handshakes >= 2, "{tls:?}");
    assert_eq!(tls.handshake_failures + tls.open_failures, 0, "{tls:?}");
}

/// `keel venue` serving its REST API and market data over TLS only, with the test certificate.
fn tls_venue(certs: &Certs, symbols: &str, flow_rate: &str) -> common::peers::Venue {
    let (cert, key) = (certs.path("server.pem"), certs.path("server.key"));
    venue(&[
        "--rest-listen",
        "127.0.0.1:0",
        "--symbols",
        symbols,
        "--flow-rate",
        flow_rate,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
}

/// The venue's market-data and REST addresses.
fn addresses(v: &common::peers::Venue) -> (SocketAddr, SocketAddr) {
    let rest: SocketAddr = v.rest.as_deref().unwrap().parse().unwrap();
    let md =
        v.md.split("://")
            .nth(1)
            .unwrap()
            .trim_end_matches("/md")
            .parse()
            .unwrap();
    (md, rest)
}

fn keeps_the_venue_book<T: Transport>(v: &common::peers::Venue, t: &mut T, tls: Option<&Certs>) {
    let (md, rest) = addresses(v);
    let clock = TscClock::new();
    let mut handler = FeedHandler::with_snapshots(rest_feed(md, rest), clock.now_ns()).unwrap();
    handler.start(clock.now_ns(), t);
    run_until(
        &mut handler,
        t,
        &clock,
        Duration::from_secs(20),
        FeedHandler::synced,
    );
    assert_eq!(
        control(&v.control, "md-faults 97 89 83 101"),
        "ok md-faults 97 89 83 101\n"
    );
    let faulty_until = Instant::now() + Duration::from_millis(3_000);
    run_until(&mut handler, t, &clock, Duration::from_secs(10), |_| {
        Instant::now() > faulty_until
    });
    assert_eq!(
        control(&v.control, "md-faults 0 0 0 0"),
        "ok md-faults 0 0 0 0\n"
    );
    // A clean stream for a while (it resyncs), then none: the books must be the venue's.
    let clean_until = Instant::now() + Duration::from_millis(1_000);
    run_until(&mut handler, t, &clock, Duration::from_secs(10), |_| {
        Instant::now() > clean_until
    });
    assert_eq!(control(&v.control, "flow 0"), "ok flow 0\n");
    let deadline = Instant::now() + Duration::from_secs(20);
    'symbols: for (i, symbol) in SYMBOLS.iter().enumerate() {
        loop {
            let settle = Instant::now() + Duration::from_millis(200);
            run_until(&mut handler, t, &clock, Duration::from_secs(20), |_| {
                Instant::now() > settle
            });
            let (id, bids, asks) = venue_book(rest, symbol, tls);
            let b = handler.book(i as u16);
            if b.seq() == Some(id) {
                assert_eq!(b.bids().collect::<Vec<_>>(), bids, "{symbol}");
                assert_eq!(b.asks().collect::<Vec<_>>(), asks, "{symbol}");
                continue 'symbols;
            }
            assert!(
                Instant::now() < deadline,
                "{symbol}: book at {:?}, venue at {id}: {:?}",
                b.seq(),
                handler.stats()
            );
        }
    }
    let stats = handler.stats();
    let (rest_stats, gate) = handler.rest_stats().unwrap();
    eprintln!(
        "feed from REST snapshots: {stats:?}; {rest_stats:?}; 429 {} 418 {}",
        gate.throttled_429, gate.banned_418
    );
    assert!(stats.gaps > 0, "{stats:?}");
    assert!(stats.duplicates > 0, "{stats:?}");
    assert!(stats.crossed > 0, "{stats:?}");
    assert!(stats.snapshots >= SYMBOLS.len() as u64, "{stats:?}");
    assert_eq!(
        stats.snapshots, rest_stats.done,
        "every snapshot from REST: {stats:?} {rest_stats:?}"
    );
    assert!(stats.rest_requests >= stats.snapshots, "{stats:?}");
    assert_eq!(stats.malformed, 0, "{stats:?}");
    assert_eq!(stats.protocol_errors, 0, "{stats:?}");
    assert_eq!(
        stats.disconnects, 0,
        "resyncs never cost the stream: {stats:?}"
    );
    assert_eq!(gate.throttled_429, 0);
    assert_eq!(gate.banned_418, 0);
}

// Goal (issue 14, done when): `keel run` from its configuration file alone keeps a feed's books
// on a venue that serves only TLS — `[[feed]] tls = true`, `snapshot = "rest"` — next to a
// plaintext OUCH link on the same transport; the gate's figures reach the counters file
// (`keel stat --json`): requests granted, none waiting past its deadline, no 429, no 418.
#[test]
fn keel_run_keeps_a_tls_rest_feed_from_its_configuration() {
    let Some(certs) = Certs::make() else { return };
    let v = tls_venue(&certs, "AAPL,MSFT", "500");
    let (md, rest) = addresses(&v);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("keel.toml");
    let text = format!(
        "symbols = [\"AAPL\", \"MSFT\"]\n\
         [engine]\nidle = \"backoff\"\n\
         [operator]\ncancel_on_stop = false\n\
         [journal]\ndir = \"{}\"\n[ipc]\ndir = \"{}\"\n\
         [[venue]]\nname = \"sim\"\naddress = \"{}\"\nusername = \"keel\"\npassword = \"keel\"\n\
         [[feed]]\naddress = \"{md}\"\ntls = true\ntls_server_name = \"localhost\"\n\
         tls_ca_file = \"{}\"\nsnapshot = \"rest\"\nrest_address = \"{rest}\"\n",
        dir.path().join("journal").display(),
        dir.path().join("ipc").display(),
        v.entry,
        certs.path("ca.pem"),
    );
    std::fs::write(&config, text).unwrap();
    let log = dir.path().join("engine.log");
    let engine = common::peers::keel_run(&config, &log);
    let stat = || -> serde_json::Value {
        let out = std::process::Command::new(common::peers::KEEL)
            .args(["stat", "--config", config.to_str().unwrap(), "--json"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    };
    let value = |json: &serde_json::Value, name: &str, labels: &str| -> Option<u64> {
        json["metrics"]
            .as_array()?
            .iter()
            .find(|m| m["name"] == name && m["labels"] == labels)?["value"]
            .as_u64()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let json = loop {
        let json = stat();
        let synced = value(&json, "keel_feed_synced", "feed=\"0\"") == Some(1);
        let deltas = value(&json, "keel_feed_deltas_total", "feed=\"0\"").unwrap_or(0);
        let link = value(&json, "keel_link_state", "venue=\"sim\"");
        if synced && deltas > 50 && link == Some(4) {
            break json;
        }
        assert!(
            Instant::now() < deadline,
            "no synced TLS feed: {json}\n{}",
            std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let f = "feed=\"0\"";
    assert!(
        value(&json, "keel_feed_snapshots_total", f).unwrap() >= 2,
        "{json}"
    );
    assert!(
        value(&json, "keel_rest_granted_total", f).unwrap() >= 2,
        "{json}"
    );
    assert_eq!(
        value(&json, "keel_rest_acquire_timeouts_total", f),
        Some(0),
        "{json}"
    );
    assert_eq!(
        value(
            &json,
            "keel_rest_responses_total",
            "feed=\"0\",status=\"429\""
        ),
        Some(0)
    );
    assert_eq!(
        value(
            &json,
            "keel_rest_responses_total",
            "feed=\"0\",status=\"418\""
        ),
        Some(0)
    );
    assert_eq!(
        value(&json, "keel_rest_rate_permille", f),
        Some(1_000),
        "{json}"
    );
    let once = std::process::Command::new(common::peers::KEEL)
        .args(["stat", "--config", config.to_str().unwrap(), "--once"])
        .output()
        .unwrap();
    let once = String::from_utf8_lossy(&once.stdout);
    assert!(once.contains("feed 0: synced"), "{once}");
    assert!(once.contains("REST gate: wait mean"), "{once}");
    assert!(once.contains("429 0, 418 0"), "{once}");
    let report = common::peers::stop_keel_run(engine, &log);
    assert!(report.contains("feed 0: "), "{report}");
    assert!(report.contains("REST snapshots asked"), "{report}");
}
