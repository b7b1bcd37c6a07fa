//! keel's HTTP/1.1 client (issue 14, part 1) against a peer not written here: an aiohttp server
//! (PyPI, in the virtualenv scripts/test makes; core/cli/tests/interop/http_peer.py) on loopback,
//! through keel's io_uring transport. Fixture JSON sized and chunked, kept-alive connections,
//! 429 with Retry-After, a POST that times out (unknown, never resent), a server that closes,
//! and a malformed response.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::http::client::{FailReason, HttpClient, HttpClientConfig, Outcome};
use keel::http::{HttpError, Method, Request};
use keel::net::{NetEvent, Reactor, ReactorConfig, SocketTransport};

mod common;

use common::peers::{python, Proc};

struct Peer {
    _proc: Proc,
    http: SocketAddr,
    raw: SocketAddr,
}

fn peer() -> Option<Peer> {
    let python = python()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/http_peer.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the peer's first line");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words.first(),
        Some(&"http"),
        "peer said {line:?} (is aiohttp installed?)"
    );
    let port = |i: usize| -> SocketAddr { format!("127.0.0.1:{}", words[i]).parse().unwrap() };
    Some(Peer {
        http: port(1),
        raw: port(3),
        _proc: Proc(child),
    })
}

/// Drives the transport until `client` decides the request started before; returns the outcome.
fn outcome(client: &mut HttpClient, transport: &mut Reactor, clock: &TscClock) -> Outcome {
    let mut events = Vec::with_capacity(64);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no outcome");
        let now = clock.now_ns();
        events.clear();
        transport.poll(now, 1_000_000, &mut events).unwrap();
        for e in &events {
            if let Some(o) = client.on_event(transport, e) {
                return o;
            }
        }
        if let Some(o) = client.poll(transport, clock.now_ns()) {
            return o;
        }
    }
}

/// Sends `req` and drives the transport until its outcome.
fn ask(
    client: &mut HttpClient,
    transport: &mut Reactor,
    clock: &TscClock,
    req: &Request<'_>,
) -> Outcome {
    client.send(transport, clock.now_ns(), req).unwrap();
    outcome(client, transport, clock)
}

/// Lets the transport report what is pending (e.g. a close) without a request in flight.
fn settle(client: &mut HttpClient, transport: &mut Reactor, clock: &TscClock) {
    let mut events: Vec<NetEvent> = Vec::with_capacity(64);
    for _ in 0..20 {
        events.clear();
        transport
            .poll(clock.now_ns(), 1_000_000, &mut events)
            .unwrap();
        for e in &events {
            assert_eq!(client.on_event(transport, e), None);
        }
    }
}

fn get(target: &str) -> Request<'_> {
    Request {
        method: Method::Get,
        target,
        host: "",
        headers: &[("Accept", "application/json")],
        body: b"",
    }
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

#[test]
fn keel_http_client_against_aiohttp() {
    let Some(peer) = peer() else { return };
    let clock = TscClock::new();
    let mut transport = Reactor::open(ReactorConfig {
        conns_max: 8,
        ..ReactorConfig::default()
    })
    .expect("io_uring transport");
    let mut config = HttpClientConfig::new(peer.http);
    config.timeout_ns = 1_000_000_000;
    let mut client = HttpClient::new(config);

    // Sized JSON, then chunked JSON, then sized again: one connection for all three.
    assert_eq!(
        ask(&mut client, &mut transport, &clock, &get("/api/v3/ticker")),
        Outcome::Response { status: 200 }
    );
    assert_eq!(json(client.body())["symbol"], "BTCUSDT");
    assert_eq!(client.head().header_u64("x-mbx-used-weight-1m"), Some(1));
    assert_eq!(
        ask(&mut client, &mut transport, &clock, &get("/api/v3/depth")),
        Outcome::Response { status: 200 }
    );
    assert_eq!(client.head().framing, keel::http::Framing::Chunked);
    let depth = json(client.body());
    assert_eq!(depth["lastUpdateId"], 1027024);
    assert_eq!(depth["bids"].as_array().unwrap().len(), 40);
    assert_eq!(
        ask(&mut client, &mut transport, &clock, &get("/api/v3/ticker")),
        Outcome::Response { status: 200 }
    );
    assert_eq!(client.head().header_u64("x-mbx-used-weight-1m"), Some(3));
    let s = client.stats();
    assert_eq!((s.connects, s.reused, s.responses), (1, 2, 3), "{s:?}");

    // One at a time.
    client
        .send(&mut transport, clock.now_ns(), &get("/limited"))
        .unwrap();
    assert_eq!(
        client.send(&mut transport, clock.now_ns(), &get("/limited")),
        Err(keel::http::client::SendError::Busy)
    );
    assert_eq!(
        outcome(&mut client, &mut transport, &clock),
        Outcome::Response { status: 429 }
    );
    assert_eq!(client.head().retry_after_s(), Some(2));

    // A POST that outlives the timeout is unknown, and nothing resends it.
    let order = Request {
        method: Method::Post,
        target: "/order",
        host: "",
        headers: &[("Content-Type", "application/json")],
        body: br#"{"symbol":"BTCUSDT","side":"BUY","qty":"1"}"#,
    };
    assert_eq!(
        ask(&mut client, &mut transport, &clock, &order),
        Outcome::TimedOut {
            method: Method::Post,
            idempotent: false
        }
    );
    // A GET that times out may be retried by the layer above.
    assert_eq!(
        ask(&mut client, &mut transport, &clock, &get("/slow")),
        Outcome::TimedOut {
            method: Method::Get,
            idempotent: true
        }
    );

    // The server closes after its answer: the next request opens a new connection.
    assert_eq!(
        ask(&mut client, &mut transport, &clock, &get("/close")),
        Outcome::Response { status: 200 }
    );
    assert!(!client.head().keep_alive);
    assert_eq!(client.body(), b"bye");
    settle(&mut client, &mut transport, &clock);
    let connects = client.stats().connects;
    assert_eq!(
        ask(&mut client, &mut transport, &clock, &get("/stats")),
        Outcome::Response { status: 200 }
    );
    assert_eq!(client.stats().connects, connects + 1);
    let stats = json(client.body());
    assert_eq!(
        stats["requests"]["/order"], 1,
        "the timed-out POST was sent once: {stats}"
    );
    assert_eq!(stats["requests"]["/api/v3/ticker"], 2);

    // A malformed response is refused by name and its connection dropped.
    let mut raw = HttpClient::new(HttpClientConfig::new(peer.raw));
    assert_eq!(
        ask(&mut raw, &mut transport, &clock, &get("/")),
        Outcome::Failed {
            why: FailReason::Response(HttpError::ConflictingFraming),
            written: true,
            idempotent: true,
        }
    );
    assert_eq!(raw.conn(), None);

    // Nobody listening: a connect failure, the request never written.
    let nobody: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut gone = HttpClient::new(HttpClientConfig::new(nobody));
    gone.send(&mut transport, clock.now_ns(), &get("/"))
        .unwrap();
    assert!(matches!(
        outcome(&mut gone, &mut transport, &clock),
        Outcome::Failed {
            why: FailReason::Connect(_),
            written: false,
            ..
        }
    ));
}
