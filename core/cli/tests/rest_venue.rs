//! The simulated venue's REST API (`keel venue --rest-listen`, issue 14): read by a client not
//! written here (Python's standard `http.client`, one kept connection), and by keel's own
//! HTTP client behind its REST gate — a burst of snapshot and kline requests shaped by the gate
//! gets no 429, the same burst sent straight gets 429s and then a ban (418).

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::guard::limiter::WindowLimit;
use keel::http::client::{HttpClient, HttpClientConfig, Outcome};
use keel::http::gate::{Decision, RestGate, RestGateConfig};
use keel::http::{Method, Request};
use keel::net::{Reactor, ReactorConfig, SocketTransport};

mod common;

use common::peers::{python, venue, Proc};

/// `keel venue` with its REST API: `weight` per second per client, banned after 3 requests
/// sent while told to wait, for 3 s.
fn rest_venue(weight: &str) -> (Proc, SocketAddr) {
    let extra = [
        "--rest-listen",
        "127.0.0.1:0",
        "--rest-second-weight",
        weight,
    ];
    let v = venue(&[&extra[..], &["--rest-ban-after", "3", "--rest-ban-s", "3"]].concat());
    let addr = v
        .rest
        .as_deref()
        .expect("REST address")
        .parse()
        .expect("addr");
    (v.proc, addr)
}

// Goal: a standard client reads every endpoint on one connection, and the limits answer 429
// with Retry-After and the used weight.
#[test]
fn python_reads_the_rest_api() {
    let Some(python) = python() else { return };
    let (_venue, addr) = rest_venue("10");
    let script = r#"
import http.client, json, sys
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)
out = {}
def get(path, key=None):
    c.request("GET", path, headers={"X-Api-Key": key} if key else {})
    r = c.getresponse()
    body = r.read()
    return r.status, dict(r.getheaders()), body
s, h, b = get("/api/v3/ticker?symbol=AAPL")
out["ticker"] = [s, json.loads(b)["symbol"], h.get("X-Used-Weight-1s")]
s, h, b = get("/api/v3/depth?symbol=MSFT&limit=5")
d = json.loads(b)
out["depth"] = [s, type(d["lastUpdateId"]).__name__, len(d["bids"]) <= 5]
s, h, b = get("/api/v3/exchangeInfo", key="info")
out["info"] = [s, [x["symbol"] for x in json.loads(b)["symbols"]]]
s, h, b = get("/api/v3/depth?symbol=NOPE")
out["unknown"] = [s]
s, h, b = get("/api/v3/klines?symbol=AAPL&limit=3", key="other")
out["klines"] = [s, len(json.loads(b))]
s, h, b = get("/api/v3/exchangeInfo")
out["limited"] = [s, h.get("Retry-After"), h.get("X-Used-Weight-1s")]
print(json.dumps(out))
"#;
    let out = Command::new(python)
        .args([
            "-c",
            script,
            &addr.ip().to_string(),
            &addr.port().to_string(),
        ])
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("json");
    assert_eq!(v["ticker"], serde_json::json!([200, "AAPL", "1"]));
    assert_eq!(v["depth"], serde_json::json!([200, "int", true]));
    assert_eq!(
        v["info"],
        serde_json::json!([200, ["AAPL", "MSFT", "AMZN", "NVDA"]])
    );
    assert_eq!(v["unknown"], serde_json::json!([404]));
    assert_eq!(
        v["klines"],
        serde_json::json!([200, 3]),
        "another key has its own budget"
    );
    // Anonymous: ticker 1 + depth 2 + the unknown symbol's depth 2 = 5 used; the exchange
    // information's 10 would overrun: refused, not counted, told when to come back.
    assert_eq!(v["limited"], serde_json::json!([429, "1", "5"]), "{v}");
}

/// Sends `n` requests (depth and klines alternately) and counts the answers by status;
/// `gate`: each waits for the gate's grant first.
fn burst(addr: SocketAddr, n: u64, gate: Option<&mut RestGate>) -> (u64, u64, u64) {
    let clock = TscClock::new();
    let mut transport = Reactor::open(ReactorConfig::default()).expect("io_uring");
    let mut client = HttpClient::new(HttpClientConfig::new(addr));
    let targets = [
        "/api/v3/depth?symbol=AAPL&limit=100",
        "/api/v3/klines?symbol=AAPL&limit=500",
    ];
    let (mut ok, mut limited, mut banned) = (0, 0, 0);
    let mut gate = gate;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut events = Vec::new();
    for i in 0..n {
        let target = targets[(i % 2) as usize];
        if let Some(g) = gate.as_deref_mut() {
            let weight = g.weight_of(target);
            g.acquire(clock.now_ns(), i, weight).expect("queued");
            let mut granted = false;
            while !granted {
                assert!(Instant::now() < deadline);
                g.poll(clock.now_ns(), |d| {
                    assert!(matches!(d, Decision::Granted { .. }), "{d:?}");
                    granted = true;
                });
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let req = Request {
            method: Method::Get,
            target,
            host: "",
            headers: &[],
            body: b"",
        };
        client
            .send(&mut transport, clock.now_ns(), &req)
            .expect("send");
        let outcome = loop {
            assert!(Instant::now() < deadline);
            events.clear();
            keel::net::Transport::poll(&mut transport, clock.now_ns(), 1_000_000, &mut events)
                .unwrap();
            let mut got = None;
            for e in &events {
                got = got.or(client.on_event(&mut transport, e));
            }
            if let Some(o) = got.or_else(|| client.poll(&mut transport, clock.now_ns())) {
                break o;
            }
        };
        match outcome {
            Outcome::Response { status: 200 } => ok += 1,
            Outcome::Response { status: 429 } => limited += 1,
            Outcome::Response { status: 418 } => banned += 1,
            other => panic!("{other:?}"),
        }
        if let Some(g) = gate.as_deref_mut() {
            let h = client.head();
            g.on_response(clock.now_ns(), h.status, h.retry_after_s(), &[]);
        }
    }
    (ok, limited, banned)
}

// Goal (issue 14, start-up burst): the venue allows 40 weight per second; 24 requests of depth
// (2) and klines (5), 84 in all. Through keel's gate (18 per second, burst 18: at most 36 in
// any second, 4 to spare for the network's jitter) every one is served, no 429; sent straight,
// the venue answers 429s and then bans.
#[test]
fn the_gate_shapes_a_burst_the_venue_would_refuse() {
    let (_venue, addr) = rest_venue("40");
    let mut config = RestGateConfig {
        endpoints: vec![("/api/v3/depth".into(), 2), ("/api/v3/klines".into(), 5)],
        acquire_timeout_ns: 30_000_000_000,
        ..RestGateConfig::default()
    };
    config.limiter.windows = [
        Some(WindowLimit {
            window_ns: 1_000_000_000,
            limit_weight: 18,
            burst_weight: 18,
        }),
        None,
        None,
        None,
    ];
    let mut gate = RestGate::new(config, TscClock::new().now_ns()).expect("gate");
    let (ok, limited, banned) = burst(addr, 24, Some(&mut gate));
    assert_eq!((ok, limited, banned), (24, 0, 0), "through the gate");
    assert_eq!(gate.stats().granted, 24);
    assert!(gate.stats().wait_sum_ns > 0, "the gate made requests wait");
    // The same burst, straight (a fresh venue: the gated client's second is its own).
    let (_venue, addr) = rest_venue("40");
    let (ok, limited, banned) = burst(addr, 24, None);
    assert!(
        limited >= 1 && banned >= 1,
        "straight: {ok} ok, {limited} × 429, {banned} × 418"
    );
}

// Goal: hostile requests to the venue's REST API are refused by status, never a panic or a
// hang, and the API keeps serving: bytes that are not HTTP (400, closed), a head over 8 KiB
// (431, closed), a POST (405), an unknown path (404, no weight), the worst legal depth limit.
#[test]
fn hostile_requests_are_refused_and_the_api_keeps_serving() {
    use std::io::{Read, Write};
    let (_venue, addr) = rest_venue("40");
    let answer = |bytes: &[u8]| -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(bytes);
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert!(answer(b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    let long = [b"GET / HTTP/1.1\r\nX: ".as_slice(), &[b'a'; 9000]].concat();
    assert!(answer(&long).starts_with("HTTP/1.1 431"));
    let post = b"POST /api/v3/ticker?symbol=AAPL HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    assert!(answer(post).starts_with("HTTP/1.1 405"));
    let unknown = answer(b"GET /api/v3/order HTTP/1.1\r\n\r\n");
    assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
    for bad in [
        &b"GET /api/v3/depth?symbol=AAPL&limit=4294967295 HTTP/1.1\r\n\r\n"[..],
        b"GET /api/v3/depth?symbol=AAPL&limit=0 HTTP/1.1\r\n\r\n",
        b"GET /api/v3/depth?symbol=AAPL&limit=-1 HTTP/1.1\r\n\r\n",
        b"GET /api/v3/depth?symbol=AAPL&limit=abc HTTP/1.1\r\n\r\n",
        b"GET /api/v3/depth?symbol=AAPL&limit=+5 HTTP/1.1\r\n\r\n",
        b"GET /api/v3/klines?symbol=AAPL&limit=1001 HTTP/1.1\r\n\r\n",
        b"GET /api/v3/depth?symbol=AAPL&symbol=MSFT HTTP/1.1\r\n\r\n",
    ] {
        let a = answer(bad);
        assert!(
            a.starts_with("HTTP/1.1 400"),
            "{}: {a}",
            String::from_utf8_lossy(bad)
        );
        assert!(!a.contains("X-Used-Weight"), "not weighed: {a}");
    }
    // A body is never read as a request: the answer to a GET carrying one is 405, then the
    // connection closes (one answer, never the smuggled request's).
    let smuggled = b"GET /api/v3/ticker?symbol=AAPL HTTP/1.1\r\nContent-Length: 45\r\n\r\n\
        GET /api/v3/exchangeInfo HTTP/1.1\r\nX: y\r\n\r\n";
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(smuggled).unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).expect("closed after the 405");
    let a = String::from_utf8_lossy(&all);
    assert!(a.starts_with("HTTP/1.1 405"), "{a}");
    assert_eq!(a.matches("HTTP/1.1").count(), 1, "one answer only: {a}");
    let deep = answer(b"GET /api/v3/depth?symbol=AAPL&limit=5000 HTTP/1.1\r\n\r\n");
    assert!(deep.starts_with("HTTP/1.1 200"), "{deep}");
    assert!(
        deep.contains("X-Used-Weight-1s: 10"),
        "the deepest book weighs 10: {deep}"
    );
    let ok = answer(b"GET /api/v3/ticker?symbol=AAPL HTTP/1.1\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200"), "still serving: {ok}");
}

/// `keel fetch ARGS --json` against `addr`: its exit code and its summary.
fn fetch(addr: SocketAddr, args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(common::peers::KEEL)
        .args([
            "fetch",
            "--json",
            "--transport",
            "epoll",
            "--rest",
            &addr.to_string(),
        ])
        .args(args)
        .output()
        .expect("keel fetch");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "keel fetch printed no summary ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), summary)
}

fn symbols(n: usize) -> String {
    (0..n)
        .map(|i| format!("S{i:02}"))
        .collect::<Vec<_>>()
        .join(",")
}

// Goal (issue 14, the start-up burst): 50 symbols × (a depth snapshot + 500 candles) through
// the gate finish with every answer whole, no 429 and no ban; the same burst without the gate
// (another API key, so its own windows) gets 429s and then a ban, and does not finish.
#[test]
fn a_start_up_burst_through_the_gate_gets_no_429_and_without_it_a_ban() {
    let list = symbols(50);
    let v = venue(&["--rest-listen", "127.0.0.1:0", "--symbols", &list]);
    let addr: SocketAddr = v.rest.as_deref().unwrap().parse().unwrap();
    let (code, s) = fetch(addr, &["--api-key", "gated"]);
    assert_eq!(code, 0, "{s}");
    assert_eq!(s["symbols"], 50, "{s}");
    assert_eq!(s["ok"], 100, "{s}");
    assert_eq!(s["candles"], 25_000, "{s}");
    assert_eq!(s["status_429"], 0, "{s}");
    assert_eq!(s["status_418"], 0, "{s}");
    assert_eq!(s["acquire_timeouts"], 0, "{s}");
    assert_eq!(
        s["sent"], 101,
        "the exchange information and 100, nothing twice: {s}"
    );
    // The symbols from the venue's exchange information when none are given.
    let (code, s) = fetch(
        addr,
        &["--api-key", "listed", "--klines", "0", "--depth", "5"],
    );
    assert_eq!(code, 0, "{s}");
    assert_eq!(s["symbols"], 50, "{s}");
    let (code, s) = fetch(addr, &["--api-key", "ungated", "--no-limiter"]);
    assert_eq!(code, 1, "without the gate the burst does not finish: {s}");
    assert!(s["status_429"].as_u64().unwrap() > 0, "{s}");
    assert!(s["status_418"].as_u64().unwrap() > 0, "banned: {s}");
    assert!(s["failed"].as_u64().unwrap() > 0, "{s}");
}

// Goal (issue 14, retries): a gate that believes the venue allows four times what it does
// meets a burst of 429s; every retry goes back through the gate (requests sent = requests +
// retries, one retry per 429), Retry-After is honoured (the venue never bans), and every
// request ends with its data. Then the venue's REST latency (control `rest-latency`) only
// slows the fetch down.
#[test]
fn retries_after_429_go_back_through_the_gate() {
    use std::io::{Read, Write};
    let list = symbols(20);
    let v = venue(&["--rest-listen", "127.0.0.1:0", "--symbols", &list]);
    let addr: SocketAddr = v.rest.as_deref().unwrap().parse().unwrap();
    let (code, s) = fetch(
        addr,
        &[
            "--symbols",
            &list,
            "--second-weight",
            "200",
            "--minute-weight",
            "5000",
        ],
    );
    assert_eq!(code, 0, "{s}");
    assert_eq!(s["ok"], 40, "{s}");
    let throttled = s["status_429"].as_u64().unwrap();
    assert!(throttled > 0, "the venue must have said 429: {s}");
    assert_eq!(
        s["status_418"], 0,
        "Retry-After honoured, never banned: {s}"
    );
    assert_eq!(s["retries"].as_u64().unwrap(), throttled, "{s}");
    assert_eq!(s["sent"].as_u64().unwrap(), 40 + throttled, "{s}");
    // Control knobs: a slower venue, then a tighter one.
    let mut control = std::net::TcpStream::connect(&v.control).unwrap();
    control
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut ask = |line: &str| {
        control.write_all(line.as_bytes()).unwrap();
        let mut buf = [0u8; 512];
        let n = control.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(ask("rest-latency 50\n"), "ok rest-latency 50\n");
    assert!(ask("rest-latency 60001\n").starts_with("error rest-latency"));
    assert_eq!(ask("rest-limit 20 600\n"), "ok rest-limit 20 600\n");
    assert!(ask("rest-limit 0\n").starts_with("error rest-limit"));
    let (code, s) = fetch(
        addr,
        &[
            "--symbols",
            &list,
            "--klines",
            "0",
            "--api-key",
            "second",
            "--second-weight",
            "20",
            "--minute-weight",
            "600",
        ],
    );
    assert_eq!(code, 0, "{s}");
    assert_eq!(s["ok"], 20, "{s}");
    assert_eq!(s["status_429"], 0, "{s}");
}

// Goal (found by review): a symbol's name can add nothing to a request — it is percent-encoded
// (a name with `&limit=5000` is one unknown symbol, answered 404, not a deeper book), a 404 is
// not retried, and a fetch that runs out of time still prints its figures and why (exit 1).
#[test]
fn fetch_encodes_names_and_reports_when_it_gives_up() {
    use std::io::{Read, Write};
    let v = venue(&["--rest-listen", "127.0.0.1:0"]);
    let addr: SocketAddr = v.rest.as_deref().unwrap().parse().unwrap();
    let (code, s) = fetch(addr, &["--symbols", "AAPL,A&limit=5000#x", "--klines", "2"]);
    assert_eq!(code, 1, "{s}");
    assert_eq!(s["ok"], 2, "{s}");
    assert_eq!(s["bad_data"], 2, "the unknown symbol's two answers: {s}");
    assert_eq!(s["sent"], 4, "nothing retried: {s}");
    let first = s["first_error"].as_str().unwrap();
    assert!(first.contains("A&limit=5000#x: HTTP 404"), "{first}");
    let mut control = std::net::TcpStream::connect(&v.control).unwrap();
    control.write_all(b"rest-latency 3000\n").unwrap();
    let mut buf = [0u8; 64];
    let _ = control.read(&mut buf).unwrap();
    let (code, s) = fetch(addr, &["--symbols", "AAPL", "--timeout-s", "1"]);
    assert_eq!(code, 1, "{s}");
    assert_eq!(s["gave_up"], true, "{s}");
    assert!(
        s["first_error"]
            .as_str()
            .unwrap()
            .starts_with("gave up at --timeout-s"),
        "{s}"
    );
}
