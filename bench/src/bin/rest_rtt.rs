//! REST round trips on loopback (issue 14): keel's HTTP/1.1 client against `reqwest` (the
//! baseline, on a current-thread tokio runtime), plaintext and TLS, on a kept-alive connection
//! and on a new connection per request; and the REST gate's acquire cost against `governor`.
//!
//! One server for every client: a thread of this benchmark (pinned to core 0, busy-polling)
//! serving keel's `Tls<EpollReactor>` with a plaintext and a TLS listener, answering
//! `GET /api/v3/ticker?symbol=AAPL` with a fixed ticker JSON (`Content-Length`, kept alive)
//! and anything else with 404. Neither client's time includes the venue's REST logic, so the
//! tables compare the clients (and TLS), not a server. Certificates (a CA and a P-256 server
//! certificate for `localhost`) are made at run time by rcgen; both clients use the same
//! rustls client configuration (ring, the CA file only, session resumption off: every new TLS
//! connection pays a full handshake).
//!
//! Contenders, each measured in every round, their order rotated round by round:
//! - kept alive, plaintext: reqwest; keel on epoll and io_uring, each busy-polling and
//!   blocking in the kernel (reqwest's tokio always blocks in `epoll_wait`);
//! - kept alive, TLS: reqwest; keel on `Tls<EpollReactor>` busy and blocking, and on
//!   `Tls<Reactor>` (io_uring) busy;
//! - a new connection per request (connect, TLS handshake where TLS, first response), plaintext
//!   and TLS: reqwest (no idle pool) and keel (epoll, busy; the connection closed after each);
//! - the gate: `RestGate::acquire` then `poll` granting it, with ample budget, per request as
//!   the mean of 1,000-request batches, against `governor`'s direct `check()`.
//!
//! Every response is checked (status 200, the body byte for byte), and the server's accept
//! count proves kept-alive connections were kept and new ones were new.
//!
//! Usage: cargo run -p keel-bench --release --bin rest_rtt -- [--smoke] [--rounds=N]
//! [--requests=N] [--connects=N] [--batches=N]

use std::hint::black_box;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use governor::{Quota, RateLimiter as Governor};
use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::http::client::{HttpClient, HttpClientConfig, Outcome};
use keel::http::gate::{Decision, RestGate, RestGateConfig};
use keel::http::{Limits, Method, Request};
use keel::net::tls::{client_config, server_config, server_name};
use keel::net::{
    EpollReactor, NetError, NetEvent, Reactor, ReactorConfig, SocketTransport, Tls, TlsConfig,
    Transport, WaitMode,
};
use keel_bench::{arg_u64, flag, histogram, pin_or_warn, print_header, print_row, summary};

const TARGET: &str = "/api/v3/ticker?symbol=AAPL";
const BODY: &[u8] = concat!(
    r#"{"symbol":"AAPL","priceChange":"0.25","priceChangePercent":"0.132""#,
    r#","lastPrice":"190.25","bidPrice":"190.24","bidQty":"300","askPrice":"190.26""#,
    r#","askQty":"200","volume":"1250000","openTime":1764547200000"#,
    r#","closeTime":1764633600000,"count":48211}"#,
)
.as_bytes();
/// Gate requests per timed batch.
const BATCH: u64 = 1_000;
/// keel's blocking wait in the kernel per poll (epoll rounds it up to 1 ms).
const BLOCKING_POLL_NS: u64 = 1_000_000;

// ---------------------------------------------------------------------------------------------
// Certificates and the server.

/// A CA, and a server certificate for `localhost` and 127.0.0.1 signed by it, as PEM files
/// `ca.pem`, `server.pem`, `server.key` in a temporary directory.
fn certificates() -> tempfile::TempDir {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "keel bench CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca.self_signed(&ca_key).expect("CA certificate");
    let key = KeyPair::generate().expect("server key");
    let mut leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("server params");
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf
        .signed_by(&key, &ca, &ca_key)
        .expect("server certificate");
    let write = |name: &str, text: String| {
        std::fs::write(dir.path().join(name), text).expect("write PEM");
    };
    write("ca.pem", ca.pem());
    write("server.pem", leaf.pem());
    write("server.key", key.serialize_pem());
    dir
}

/// What the server counted, read by the client thread to check its connections.
#[derive(Debug, Default)]
struct Served {
    accepted: AtomicU64,
    answered: AtomicU64,
    refused: AtomicU64,
}

struct Server {
    plain: SocketAddr,
    tls: SocketAddr,
    served: Arc<Served>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

fn response(status: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Starts the server thread (core 0, busy-polling keel's epoll transport with TLS on one
/// listener).
fn server(certs: &Path) -> Server {
    let tls_server = server_config(&certs.join("server.pem"), &certs.join("server.key"))
        .expect("server TLS config");
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(Served::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = {
        let (stop, served) = (Arc::clone(&stop), Arc::clone(&served));
        std::thread::spawn(move || {
            pin_or_warn(0);
            let reactor = ReactorConfig {
                conns_max: 256,
                wait: WaitMode::BusyPoll,
                ..ReactorConfig::default()
            };
            let config = TlsConfig {
                server: Some(tls_server),
                ..TlsConfig::default()
            };
            let mut t = Tls::<EpollReactor>::open(reactor, config).expect("server transport");
            let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
            let (_, plain) = t.listen(any).expect("listen");
            let (_, tls) = t.listen_tls(any).expect("listen TLS");
            tx.send((plain, tls)).expect("main waits");
            serve(&mut t, &stop, &served);
        })
    };
    let (plain, tls) = rx.recv().expect("server addresses");
    Server {
        plain,
        tls,
        served,
        stop,
        thread,
    }
}

fn serve(t: &mut Tls<EpollReactor>, stop: &AtomicBool, served: &Served) {
    let ok = response("200 OK", BODY);
    let not_found = response("404 Not Found", br#"{"code":-1,"msg":"not found"}"#);
    let known_line = format!("GET {TARGET} HTTP/1.1\r\n");
    let clock = TscClock::new();
    let mut events = Vec::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        events.clear();
        t.poll(clock.now_ns(), 0, &mut events).expect("server poll");
        for e in &events {
            match *e {
                NetEvent::Accepted { .. } => {
                    served.accepted.fetch_add(1, Ordering::SeqCst);
                }
                NetEvent::Readable { conn } => {
                    // Every whole request in the buffer is answered (edge-triggered: bytes
                    // left are announced again only when more arrive).
                    while let Some(end) = head_end(t.received(conn)) {
                        let known = t.received(conn).starts_with(known_line.as_bytes());
                        t.consume(conn, end);
                        let answer = if known { &ok } else { &not_found };
                        if t.send(conn, answer).is_err() {
                            t.close(conn);
                            break;
                        }
                        let counter = if known {
                            &served.answered
                        } else {
                            &served.refused
                        };
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                }
                _ => {}
            }
        }
    }
}

/// The length of the request head at the start of `bytes` (GETs carry no body), if whole.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

// ---------------------------------------------------------------------------------------------
// Contenders.

/// Which table a contender belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Plain,
    Tls,
    Connect,
}

/// How a contender uses connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conns {
    /// One connection for the whole run.
    KeptAlive,
    /// A new connection per request, closed after its response.
    New,
}

trait Contender {
    /// Runs `n` checked round trips, each recorded in `h` (picoseconds).
    fn round(&mut self, n: u64, clock: &TscClock, h: &mut Histogram<u64>);
    /// Checks the contender's own counters after the run (`requests` made in all).
    fn check(&self, requests: u64);
}

fn checked(outcome: &Outcome, body: &[u8], who: &str) {
    assert_eq!(
        *outcome,
        Outcome::Response { status: 200 },
        "{who}: not a 200"
    );
    assert_eq!(
        body,
        BODY,
        "{who}: wrong body {:?}",
        String::from_utf8_lossy(body)
    );
}

struct Keel<T: Transport> {
    name: &'static str,
    transport: T,
    config: HttpClientConfig,
    client: HttpClient,
    conns: Conns,
    timeout_ns: u64,
    events: Vec<NetEvent>,
}

fn reactor(wait: WaitMode) -> ReactorConfig {
    ReactorConfig {
        conns_max: 8,
        wait,
        spin_reads: wait == WaitMode::BusyPoll,
        ..ReactorConfig::default()
    }
}

fn client_config_for(addr: SocketAddr, host: &str) -> HttpClientConfig {
    let mut c = HttpClientConfig::new(addr);
    c.host = host.to_string();
    c.limits = Limits {
        body_max: 64 * 1024,
        ..Limits::default()
    };
    c
}

impl<T: Transport> Keel<T> {
    fn new(
        name: &'static str,
        transport: T,
        config: HttpClientConfig,
        wait: WaitMode,
        conns: Conns,
    ) -> Self {
        Self {
            name,
            transport,
            client: HttpClient::new(config.clone()),
            config,
            conns,
            timeout_ns: if wait == WaitMode::Blocking {
                BLOCKING_POLL_NS
            } else {
                0
            },
            events: Vec::with_capacity(64),
        }
    }

    /// One GET from `send` to its outcome.
    fn get(&mut self, clock: &TscClock) -> (Outcome, u64) {
        let request = Request {
            method: Method::Get,
            target: TARGET,
            host: "",
            headers: &[("Accept", "application/json")],
            body: b"",
        };
        let t0 = clock.now_ns();
        self.client
            .send(&mut self.transport, t0, &request)
            .expect("send");
        loop {
            self.events.clear();
            self.transport
                .poll(clock.now_ns(), self.timeout_ns, &mut self.events)
                .expect("poll");
            let mut decided = None;
            for e in &self.events {
                if let Some(o) = self.client.on_event(&mut self.transport, e) {
                    decided = Some(o);
                }
            }
            let decided = decided.or_else(|| self.client.poll(&mut self.transport, clock.now_ns()));
            if let Some(o) = decided {
                return (o, clock.now_ns() - t0);
            }
        }
    }

    /// Closes the connection and waits for its `Closed` (its slot free again).
    fn close(&mut self, clock: &TscClock) {
        let conn = self
            .client
            .conn()
            .expect("the response kept its connection");
        self.transport.close(conn);
        let deadline = clock.now_ns() + 1_000_000_000;
        loop {
            assert!(clock.now_ns() < deadline, "{}: no Closed", self.name);
            self.events.clear();
            self.transport
                .poll(clock.now_ns(), 0, &mut self.events)
                .expect("poll");
            let closed = |e: &NetEvent| matches!(e, NetEvent::Closed { conn: c, .. } if *c == conn);
            if self.events.iter().any(closed) {
                return;
            }
        }
    }
}

impl<T: Transport> Contender for Keel<T> {
    fn round(&mut self, n: u64, clock: &TscClock, h: &mut Histogram<u64>) {
        for _ in 0..n {
            if self.conns == Conns::New {
                // A fresh client (its buffers allocated before the clock starts).
                self.client = HttpClient::new(self.config.clone());
            }
            let (outcome, ns) = self.get(clock);
            checked(&outcome, self.client.body(), self.name);
            h.record(ns.max(1) * 1_000).expect("in range");
            if self.conns == Conns::New {
                self.close(clock);
            }
        }
    }

    fn check(&self, requests: u64) {
        let s = self.client.stats();
        assert_eq!(s.connects, 1, "{}: {s:?}", self.name);
        if self.conns == Conns::KeptAlive {
            assert_eq!(s.responses, requests, "{}: {s:?}", self.name);
            assert_eq!(s.reused, requests - 1, "{}: {s:?}", self.name);
        }
    }
}

struct Reqwest {
    name: &'static str,
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    url: String,
}

impl Reqwest {
    fn new(
        name: &'static str,
        tls: Option<(&rustls::ClientConfig, SocketAddr)>,
        url: String,
        conns: Conns,
    ) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let mut b = reqwest::Client::builder()
            .http1_only()
            .no_proxy()
            .tcp_nodelay(true);
        if let Some((config, addr)) = tls {
            b = b
                .use_preconfigured_tls(config.clone())
                .resolve("localhost", addr);
        }
        if conns == Conns::New {
            b = b.pool_max_idle_per_host(0);
        }
        // The runtime is entered while building: hyper's connector may want it.
        let client = {
            let _enter = runtime.enter();
            b.build().expect("reqwest client")
        };
        Self {
            name,
            runtime,
            client,
            url,
        }
    }
}

impl Contender for Reqwest {
    fn round(&mut self, n: u64, clock: &TscClock, h: &mut Histogram<u64>) {
        let (client, url, name) = (&self.client, self.url.as_str(), self.name);
        self.runtime.block_on(async {
            for _ in 0..n {
                let t0 = clock.now_ns();
                let response = client
                    .get(url)
                    .header("Accept", "application/json")
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {e:?}"));
                let status = response.status().as_u16();
                let body = response
                    .bytes()
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {e:?}"));
                let ns = clock.now_ns() - t0;
                checked(&Outcome::Response { status }, &body, name);
                h.record(ns.max(1) * 1_000).expect("in range");
            }
        });
    }

    fn check(&self, _requests: u64) {}
}

struct Entry {
    case: Case,
    conns: Conns,
    name: &'static str,
    baseline: bool,
    contender: Box<dyn Contender>,
    h: Histogram<u64>,
    requests: u64,
}

/// `T` opened for a client, or `None` (said) where this host cannot (io_uring).
fn open<T: SocketTransport>(wait: WaitMode) -> Option<T> {
    match T::open(reactor(wait)) {
        Ok(t) => Some(t),
        Err(e @ NetError::Unavailable { .. }) => {
            eprintln!("rest_rtt: {:?} skipped: {e}", T::KIND);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn tls_client<T: SocketTransport>(
    wait: WaitMode,
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
) -> Option<Tls<T>> {
    let mut t = Tls::new(
        open::<T>(wait)?,
        TlsConfig {
            client: Some(Arc::clone(config)),
            ..TlsConfig::default()
        },
    );
    t.add_destination(addr, server_name("localhost").expect("name"))
        .expect("TLS destination");
    Some(t)
}

/// Everything a contender is made from: the server's addresses, one rustls configuration.
struct Setup {
    plain: SocketAddr,
    tls: SocketAddr,
    rustls: Arc<rustls::ClientConfig>,
}

type Made = Option<Box<dyn Contender>>;

impl Setup {
    fn reqwest(&self, name: &'static str, tls: bool, conns: Conns) -> Made {
        let (t, url) = if tls {
            let url = format!("https://localhost:{}{TARGET}", self.tls.port());
            (Some((&*self.rustls, self.tls)), url)
        } else {
            (None, format!("http://{}{TARGET}", self.plain))
        };
        Some(Box::new(Reqwest::new(name, t, url, conns)))
    }

    fn keel<T: SocketTransport + 'static>(
        &self,
        name: &'static str,
        wait: WaitMode,
        conns: Conns,
    ) -> Made {
        let config = client_config_for(self.plain, &self.plain.to_string());
        let c = Keel::new(name, open::<T>(wait)?, config, wait, conns);
        Some(Box::new(c))
    }

    fn keel_tls<T: SocketTransport + 'static>(
        &self,
        name: &'static str,
        wait: WaitMode,
        conns: Conns,
    ) -> Made {
        let t = tls_client::<T>(wait, &self.rustls, self.tls)?;
        let c = Keel::new(
            name,
            t,
            client_config_for(self.tls, "localhost"),
            wait,
            conns,
        );
        Some(Box::new(c))
    }
}

fn contenders(server: &Server, ca: &Path) -> Vec<Entry> {
    use Case::{Connect, Plain};
    use Conns::{KeptAlive, New};
    use WaitMode::{Blocking, BusyPoll};
    // One rustls configuration for both clients, resumption off (a full handshake each time).
    let mut rustls = (*client_config(Some(ca)).expect("client TLS config")).clone();
    rustls.resumption = rustls::client::Resumption::disabled();
    let s = Setup {
        plain: server.plain,
        tls: server.tls,
        rustls: Arc::new(rustls),
    };
    // (table, connections, name, baseline of its table, the contender if this host has it)
    let list: [(Case, Conns, &'static str, bool, Made); 13] = [
        (
            Plain,
            KeptAlive,
            "reqwest (tokio)",
            true,
            s.reqwest("reqwest", false, KeptAlive),
        ),
        (
            Plain,
            KeptAlive,
            "keel epoll, busy",
            false,
            s.keel::<EpollReactor>("epoll busy", BusyPoll, KeptAlive),
        ),
        (
            Plain,
            KeptAlive,
            "keel epoll, blocking",
            false,
            s.keel::<EpollReactor>("epoll blocking", Blocking, KeptAlive),
        ),
        (
            Plain,
            KeptAlive,
            "keel io_uring, busy",
            false,
            s.keel::<Reactor>("io_uring busy", BusyPoll, KeptAlive),
        ),
        (
            Plain,
            KeptAlive,
            "keel io_uring, blocking",
            false,
            s.keel::<Reactor>("io_uring blocking", Blocking, KeptAlive),
        ),
        (
            Case::Tls,
            KeptAlive,
            "reqwest (tokio, rustls)",
            true,
            s.reqwest("reqwest TLS", true, KeptAlive),
        ),
        (
            Case::Tls,
            KeptAlive,
            "keel Tls<epoll>, busy",
            false,
            s.keel_tls::<EpollReactor>("TLS epoll busy", BusyPoll, KeptAlive),
        ),
        (
            Case::Tls,
            KeptAlive,
            "keel Tls<epoll>, blocking",
            false,
            s.keel_tls::<EpollReactor>("TLS epoll blocking", Blocking, KeptAlive),
        ),
        (
            Case::Tls,
            KeptAlive,
            "keel Tls<io_uring>, busy",
            false,
            s.keel_tls::<Reactor>("TLS io_uring busy", BusyPoll, KeptAlive),
        ),
        (
            Connect,
            New,
            "reqwest, new TLS connection",
            true,
            s.reqwest("reqwest new TLS", true, New),
        ),
        (
            Connect,
            New,
            "reqwest, new plaintext conn.",
            false,
            s.reqwest("reqwest new", false, New),
        ),
        (
            Connect,
            New,
            "keel epoll, new TLS connection",
            false,
            s.keel_tls::<EpollReactor>("epoll new TLS", BusyPoll, New),
        ),
        (
            Connect,
            New,
            "keel epoll, new plaintext conn.",
            false,
            s.keel::<EpollReactor>("epoll new", BusyPoll, New),
        ),
    ];
    list.into_iter()
        .filter_map(|(case, conns, name, baseline, made)| {
            Some(Entry {
                case,
                conns,
                name,
                baseline,
                contender: made?,
                h: histogram(),
                requests: 0,
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The gate.

/// Per-request cost of the REST gate and of governor, interleaved batch by batch; returns
/// (gate, governor) histograms of per-request means (picoseconds).
fn gate_costs(batches: u64, clock: &TscClock) -> (Histogram<u64>, Histogram<u64>) {
    // Ample budget: 50e6 weight a second and 1.2e6 a minute (near the most the limiter's
    // fixed-point arithmetic takes for these windows), against requests of weight 1 every
    // 100 µs of the gate's clock (10,000 a second, within the minute window's refill).
    let config = RestGateConfig::for_venue_limits(50_000_000, 1_200_000, 1);
    let mut now_ns = 1_000;
    let mut gate = RestGate::new(config, now_ns).expect("gate config");
    let governor = Governor::direct(Quota::per_second(NonZeroU32::MAX));
    let (mut h_gate, mut h_gov) = (histogram(), histogram());
    let (mut granted, mut passed, mut token) = (0u64, 0u64, 0u64);
    for _ in 0..batches {
        let t0 = clock.raw();
        for _ in 0..BATCH {
            now_ns += 100_000;
            token += 1;
            gate.acquire(now_ns, black_box(token), 1).expect("queued");
            gate.poll(now_ns, |d| {
                granted += u64::from(matches!(d, Decision::Granted { token: t, .. } if t == token));
            });
        }
        let t1 = clock.raw();
        for _ in 0..BATCH {
            passed += u64::from(black_box(&governor).check().is_ok());
        }
        let t2 = clock.raw();
        let per_op_ps = |a: u64, b: u64| (clock.raw_to_ns(b) - clock.raw_to_ns(a)) * 1_000 / BATCH;
        h_gate.record(per_op_ps(t0, t1).max(1)).expect("in range");
        h_gov.record(per_op_ps(t1, t2).max(1)).expect("in range");
    }
    assert_eq!(
        granted,
        batches * BATCH,
        "the gate must grant every request at once"
    );
    assert_eq!(passed, batches * BATCH, "governor must pass every request");
    assert_eq!(gate.waiting(), 0, "nothing left queued");
    (h_gate, h_gov)
}

// ---------------------------------------------------------------------------------------------
// Report.

fn print_header_us(title: &str, baseline: &str) {
    keel_bench::print_header_in(title, "µs", baseline);
}

fn print_row_us(name: &str, h: &Histogram<u64>, baseline_p50_ns: f64) {
    let s = summary(h);
    let us = |ns: f64| ns / 1_000.0;
    println!(
        "{name:<34} {:>10.1} {:>10.1} {:>10.1} {:>12.1} {:>9.2}x {:>9}",
        us(s.p50_ns),
        us(s.p99_ns),
        us(s.p999_ns),
        us(s.max_ns),
        s.p50_ns / baseline_p50_ns,
        s.count
    );
}

fn p50_ns(entries: &[Entry], name: &str) -> Option<f64> {
    entries
        .iter()
        .find(|e| e.name == name)
        .map(|e| summary(&e.h).p50_ns)
}

fn report(entries: &[Entry], titles: &[(Case, &str)]) {
    for (case, title) in titles {
        let rows: Vec<&Entry> = entries.iter().filter(|e| e.case == *case).collect();
        let base = rows.iter().find(|e| e.baseline).expect("a baseline");
        let base_p50 = summary(&base.h).p50_ns;
        println!();
        print_header_us(title, "reqwest");
        for e in &rows {
            print_row_us(e.name, &e.h, base_p50);
        }
    }
    println!();
    let diff = |a: &str, b: &str| match (p50_ns(entries, a), p50_ns(entries, b)) {
        (Some(a), Some(b)) => format!("{:.1} µs", (a - b) / 1_000.0),
        _ => "n/a".to_string(),
    };
    println!(
        "TLS per request (p50 TLS - p50 plaintext, kept alive): keel epoll busy {}, keel epoll \
         blocking {}, reqwest {}",
        diff("keel Tls<epoll>, busy", "keel epoll, busy"),
        diff("keel Tls<epoll>, blocking", "keel epoll, blocking"),
        diff("reqwest (tokio, rustls)", "reqwest (tokio)"),
    );
    println!(
        "TLS handshake (p50 new TLS - p50 new plaintext connection): keel {}, reqwest {}",
        diff(
            "keel epoll, new TLS connection",
            "keel epoll, new plaintext conn."
        ),
        diff(
            "reqwest, new TLS connection",
            "reqwest, new plaintext conn."
        ),
    );
}

fn main() {
    let smoke = flag("smoke");
    let rounds = arg_u64("rounds", if smoke { 1 } else { 5 });
    let requests = arg_u64("requests", if smoke { 200 } else { 20_000 });
    let connects = arg_u64("connects", if smoke { 20 } else { 600 });
    let batches = arg_u64("batches", if smoke { 50 } else { 5_000 });
    let certs = certificates();
    let server = server(certs.path());
    pin_or_warn(1);
    let clock = TscClock::new();
    let ca: PathBuf = certs.path().join("ca.pem");
    let mut entries = contenders(&server, &ca);

    // Warm-up, unrecorded: every kept-alive connection made (and checked) before the rounds.
    let mut scratch = histogram();
    for e in &mut entries {
        e.contender.round(3, &clock, &mut scratch);
        e.requests += 3;
    }
    let (mut h_gate, mut h_gov) = (histogram(), histogram());
    let len = entries.len();
    for r in 0..rounds {
        // Rotate who goes first, so nobody always runs on the warmest (or coldest) machine.
        for i in 0..len {
            let e = &mut entries[(i + r as usize) % len];
            let n = if e.conns == Conns::New {
                connects
            } else {
                requests
            };
            let before = server.served.accepted.load(Ordering::SeqCst);
            e.contender.round(n, &clock, &mut e.h);
            e.requests += n;
            let accepted = server.served.accepted.load(Ordering::SeqCst) - before;
            let want = if e.conns == Conns::New { n } else { 0 };
            assert_eq!(
                accepted, want,
                "{}: {accepted} connections for {n} requests",
                e.name
            );
        }
        let (g, v) = gate_costs(batches / rounds.max(1), &clock);
        h_gate.add(&g).expect("same bounds");
        h_gov.add(&v).expect("same bounds");
    }
    for e in &entries {
        e.contender.check(e.requests);
    }
    let total: u64 = entries.iter().map(|e| e.requests).sum();
    assert_eq!(
        server.served.answered.load(Ordering::SeqCst),
        total,
        "the server's count"
    );
    assert_eq!(server.served.refused.load(Ordering::SeqCst), 0, "no 404s");
    server.stop.store(true, Ordering::Release);
    server.thread.join().expect("server");

    println!(
        "rest_rtt: GET {TARGET} on loopback ({} bytes of JSON), {rounds} interleaved rounds of \
         {requests} requests (kept alive) or {connects} connections (new) per contender; one \
         server thread (keel Tls<epoll>, busy) for all",
        BODY.len()
    );
    report(
        &entries,
        &[
            (Case::Plain, "kept alive, plaintext"),
            (Case::Tls, "kept alive, TLS"),
            (Case::Connect, "new connection each"),
        ],
    );
    let (g, v) = (summary(&h_gate), summary(&h_gov));
    println!();
    println!("gate: per-request mean of {BATCH}-request batches, interleaved with governor");
    print_header("per request", "governor");
    print_row("governor direct check()", &v, v.p50_ns);
    print_row("keel RestGate acquire + poll", &g, v.p50_ns);
    assert!(g.count > 0 && v.count > 0, "no gate batches measured");
    println!(
        "rest_rtt: all {total} responses checked (200, the expected body; connections kept or \
         new as asked); the gate granted all {} requests at once",
        g.count * BATCH
    );
}
