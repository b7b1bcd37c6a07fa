//! keel's TLS layer (`net::tls`, issue 14 point 2) with real peers on loopback: keel client and
//! keel server over both socket transports, keel's HTTP client against aiohttp over TLS, the
//! venue's `https://` and `wss://` listeners against httpx, websockets and curl, and the
//! refusals (unknown CA, wrong name, expired, not TLS at all). Certificates are made at test
//! time by trustme (core/cli/tests/interop/tls_certs.py) into a temporary directory.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::http::client::{FailReason, HttpClient, HttpClientConfig, Outcome};
use keel::http::{Method, Request};
use keel::net::tls::{client_config, server_config, server_name, TlsError};
use keel::net::{
    CloseReason, ConnId, EpollReactor, NetError, NetEvent, Reactor, ReactorConfig, SocketTransport,
    Tls, TlsConfig, Transport,
};
use rustls::CertificateError;

mod common;

use common::peers::{python, venue, Proc};

const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/tls_peer.py");

/// Certificates made by trustme, in a directory removed on drop.
struct Certs {
    dir: tempfile::TempDir,
    python: String,
}

impl Certs {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn path(&self, name: &str) -> String {
        self.file(name).display().to_string()
    }
}

fn certs() -> Option<Certs> {
    let python = python()?;
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/tls_certs.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(dir.path())
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("ok"),
        "tls_certs.py said {text:?} {} (is trustme installed?)",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(Certs { dir, python })
}

fn reactor_config() -> ReactorConfig {
    ReactorConfig {
        conns_max: 16,
        recv_buffer_bytes: 16 * 1024,
        send_buffer_bytes: 64 * 1024,
        ..ReactorConfig::default()
    }
}

/// The transport `T`, or `None` (said) where io_uring cannot be set up on this host.
fn open<T: SocketTransport>() -> Option<T> {
    match T::open(reactor_config()) {
        Ok(t) => Some(t),
        Err(e @ NetError::Unavailable { .. }) => {
            eprintln!("{:?} not tested: {e}", T::KIND);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A TLS server presenting `cert` (e.g. "server" for server.pem and server.key).
fn tls_server<T: SocketTransport>(certs: &Certs, cert: &str) -> Option<(Tls<T>, SocketAddr)> {
    let server = server_config(
        &certs.file(&format!("{cert}.pem")),
        &certs.file(&format!("{cert}.key")),
    )
    .unwrap();
    let mut tls = Tls::new(
        open::<T>()?,
        TlsConfig {
            server: Some(server),
            plaintext_buffer_bytes: 16 * 1024,
            ..TlsConfig::default()
        },
    );
    let (_, addr) = tls.listen_tls("127.0.0.1:0".parse().unwrap()).unwrap();
    Some((tls, addr))
}

/// A TLS client trusting the test CA only.
fn tls_client<T: SocketTransport>(certs: &Certs) -> Option<Tls<T>> {
    let client = client_config(Some(&certs.file("ca.pem"))).unwrap();
    Some(Tls::new(
        open::<T>()?,
        TlsConfig {
            client: Some(client),
            plaintext_buffer_bytes: 16 * 1024,
            ..TlsConfig::default()
        },
    ))
}

/// A server and a client driven in one loop, their events logged.
struct Pair<T: Transport> {
    server: Tls<T>,
    client: Tls<T>,
    server_events: Vec<NetEvent>,
    client_events: Vec<NetEvent>,
    clock: TscClock,
}

impl<T: Transport> Pair<T> {
    fn new(server: Tls<T>, client: Tls<T>) -> Self {
        Self {
            server,
            client,
            server_events: Vec::new(),
            client_events: Vec::new(),
            clock: TscClock::new(),
        }
    }

    fn step(&mut self) {
        let now = self.clock.now_ns();
        self.server
            .poll(now, 1_000_000, &mut self.server_events)
            .unwrap();
        self.client
            .poll(now, 1_000_000, &mut self.client_events)
            .unwrap();
    }

    /// Steps until `done` holds (15 s at most).
    fn until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !done(self) {
            assert!(Instant::now() < deadline, "never: {what}");
            self.step();
        }
    }

    fn client_has(&self, e: NetEvent) -> bool {
        self.client_events.contains(&e)
    }

    fn accepted(&self) -> Vec<ConnId> {
        self.server_events
            .iter()
            .filter_map(|e| match e {
                NetEvent::Accepted { conn, .. } => Some(*conn),
                _ => None,
            })
            .collect()
    }
}

/// Bytes `from` sends to `to` (a pattern of `len` bytes), sent as room allows and read as they
/// come; the received bytes must equal the pattern.
fn transfer<T: Transport>(
    pair: &mut Pair<T>,
    server_to_client: bool,
    from: ConnId,
    to: ConnId,
    len: usize,
) {
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let (mut sent, mut got) = (0, Vec::with_capacity(len));
    let deadline = Instant::now() + Duration::from_secs(15);
    while got.len() < len {
        assert!(
            Instant::now() < deadline,
            "transfer stalled at {} of {len}",
            got.len()
        );
        let (tx, rx) = if server_to_client {
            (&mut pair.server, &mut pair.client)
        } else {
            (&mut pair.client, &mut pair.server)
        };
        while sent < len {
            let end = (sent + 8 * 1024).min(len);
            match tx.send(from, &pattern[sent..end]) {
                Ok(()) => sent = end,
                Err(NetError::SendBufferFull { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let r = rx.received(to);
        got.extend_from_slice(r);
        let n = r.len();
        rx.consume(to, n);
        pair.step();
    }
    assert!(got == pattern, "the bytes differ");
}

/// Goal: keel's TLS client and server exchange bytes both ways (a few, then 2 MiB each way
/// through 16 KiB plaintext buffers, so back-pressure is exercised), and each side's close
/// reaches the other. Both connect styles: `connect_tls` and a registered destination.
fn keel_to_keel<T: SocketTransport>() {
    let Some(certs) = certs() else { return };
    let Some((server, addr)) = tls_server::<T>(&certs, "server") else {
        return;
    };
    let client = tls_client::<T>(&certs).unwrap();
    let mut p = Pair::new(server, client);
    let a = p
        .client
        .connect_tls(addr, server_name("localhost").unwrap())
        .unwrap();
    p.client
        .add_destination(addr, server_name("127.0.0.1").unwrap())
        .unwrap();
    let b = Transport::connect(&mut p.client, addr).unwrap();
    assert!(p.client.is_tls(a) && p.client.is_tls(b));
    p.until("both connected and accepted", |p| {
        p.client_has(NetEvent::Connected { conn: a })
            && p.client_has(NetEvent::Connected { conn: b })
            && p.accepted().len() == 2
    });
    let accepted = p.accepted();
    assert!(p.client.protocol_version(a).is_some());

    // A few bytes each way: the server finds which accepted connection is `a` by its bytes.
    p.client.send(a, b"hello from a").unwrap();
    p.until("server reads a's bytes", |p| {
        accepted
            .iter()
            .any(|&c| p.server.received(c) == b"hello from a")
    });
    let sa = *accepted
        .iter()
        .find(|&&c| p.server.received(c) == b"hello from a")
        .unwrap();
    let sb = *accepted.iter().find(|&&c| c != sa).unwrap();
    p.server.consume(sa, 12);
    p.server.send(sa, b"hello back").unwrap();
    p.until("client reads the answer", |p| {
        p.client.received(a) == b"hello back"
    });
    p.client.consume(a, 10);

    transfer(&mut p, false, a, sa, 2 << 20);
    transfer(&mut p, true, sa, a, 2 << 20);
    transfer(&mut p, true, sb, b, 100_000);

    // The client closes a: the server sees the peer's close. The server closes b: the client
    // sees it.
    p.client.close(a);
    p.until("server sees a closed", |p| {
        p.server_events
            .iter()
            .any(|e| matches!(e, NetEvent::Closed { conn, reason: CloseReason::PeerClosed } if *conn == sa))
    });
    p.server.close(sb);
    p.until("client sees b closed", |p| {
        p.client_has(NetEvent::Closed {
            conn: b,
            reason: CloseReason::PeerClosed,
        })
    });
    let (s, c) = (p.server.stats(), p.client.stats());
    assert_eq!((s.server_handshakes, s.handshake_failures), (2, 0), "{s:?}");
    assert_eq!((c.client_handshakes, c.handshake_failures), (2, 0), "{c:?}");
    assert!(s.plaintext_bytes_in >= 2 << 20 && c.plaintext_bytes_in >= 2 << 20);
    assert!(
        s.backpressure_stalls + c.backpressure_stalls > 0,
        "{s:?} {c:?}"
    );
}

#[test]
fn keel_client_and_server_over_epoll() {
    keel_to_keel::<EpollReactor>();
}

#[test]
fn keel_client_and_server_over_io_uring() {
    keel_to_keel::<Reactor>();
}

/// The client's handshake against a server presenting `cert` fails with `ConnectFailed
/// { EPROTO }`; returns the kept error and the server's counters.
fn refused<T: SocketTransport>(
    certs: &Certs,
    cert: &str,
    name: &str,
) -> (TlsError, keel::net::TlsStats) {
    let (server, addr) = tls_server::<T>(certs, cert).unwrap();
    let client = tls_client::<T>(certs).unwrap();
    let mut p = Pair::new(server, client);
    let conn = p
        .client
        .connect_tls(addr, server_name(name).unwrap())
        .unwrap();
    p.until("connect failed", |p| {
        p.client_events
            .iter()
            .any(|e| matches!(e, NetEvent::ConnectFailed { conn: c, .. } if *c == conn))
    });
    assert!(p.client_has(NetEvent::ConnectFailed {
        conn,
        errno: libc::EPROTO
    }));
    assert!(!p
        .client_events
        .iter()
        .any(|e| matches!(e, NetEvent::Connected { .. })));
    p.until("server counts the failure", |p| {
        p.server.stats().handshake_failures == 1
    });
    assert!(
        p.accepted().is_empty(),
        "a failed handshake reached the server's owner"
    );
    let c = p.client.stats();
    assert_eq!(
        (c.handshake_failures, c.certificate_errors),
        (1, 1),
        "{c:?}"
    );
    let error = p
        .client
        .last_error(conn)
        .expect("the error is kept")
        .clone();
    eprintln!("{cert}: {error}");
    (error, p.server.stats())
}

/// Goal: certificates that must not verify are refused, each with its own readable error, and
/// the server counts the client's alert: another CA, another name, expired.
#[test]
fn bad_certificates_are_refused_with_a_clear_error() {
    let Some(certs) = certs() else { return };
    let (e, s) = refused::<EpollReactor>(&certs, "other", "localhost");
    assert!(
        matches!(
            e,
            TlsError::Rustls(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer
            ))
        ),
        "{e:?}"
    );
    assert_eq!(s.alerts_received, 1, "{s:?}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    let (e, _) = refused::<EpollReactor>(&certs, "wrongname", "localhost");
    assert!(
        matches!(
            e,
            TlsError::Rustls(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            ))
        ),
        "{e:?}"
    );
    // The right certificate, asked for under another name.
    let (e, _) = refused::<EpollReactor>(&certs, "server", "venue.invalid");
    assert!(e.is_certificate(), "{e:?}");
    let (e, _) = refused::<EpollReactor>(&certs, "expired", "localhost");
    assert!(
        matches!(
            e,
            TlsError::Rustls(rustls::Error::InvalidCertificate(
                CertificateError::Expired | CertificateError::ExpiredContext { .. }
            ))
        ),
        "{e:?}"
    );
    // The public roots (the default) do not know the test CA.
    let (server, addr) = tls_server::<EpollReactor>(&certs, "server").unwrap();
    let public = Tls::new(
        open::<EpollReactor>().unwrap(),
        TlsConfig {
            client: Some(client_config(None).unwrap()),
            ..TlsConfig::default()
        },
    );
    let mut p = Pair::new(server, public);
    let conn = p
        .client
        .connect_tls(addr, server_name("localhost").unwrap())
        .unwrap();
    p.until("refused", |p| {
        p.client_has(NetEvent::ConnectFailed {
            conn,
            errno: libc::EPROTO,
        })
    });
    assert!(p.client.last_error(conn).unwrap().is_certificate());
}

/// Reads from `stream` (non-blocking) until the peer closes it, stepping `pair` meanwhile.
fn until_closed<T: Transport>(pair: &mut Pair<T>, stream: &mut TcpStream) {
    stream.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            Instant::now() < deadline,
            "the server never closed the connection"
        );
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return, // reset
        }
        pair.step();
    }
}

/// Goal: bytes that are not TLS (a plaintext HTTP request, garbage) sent to a TLS listener close
/// that connection, counted, never accepted; a good client is served afterwards.
#[test]
fn not_tls_is_closed_counted_and_the_server_carries_on() {
    let Some(certs) = certs() else { return };
    let (server, addr) = tls_server::<EpollReactor>(&certs, "server").unwrap();
    let client = tls_client::<EpollReactor>(&certs).unwrap();
    let mut p = Pair::new(server, client);
    let mut plain = TcpStream::connect(addr).unwrap();
    plain
        .write_all(b"GET /api/v3/ticker HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    until_closed(&mut p, &mut plain);
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff]).unwrap();
    garbage.write_all(&[0xa5; 3000]).unwrap();
    until_closed(&mut p, &mut garbage);
    p.until("both counted", |p| p.server.stats().handshake_failures == 2);
    let s = p.server.stats();
    assert_eq!(s.protocol_errors, 2, "{s:?}");
    assert!(p.accepted().is_empty());
    assert!(p.server.latest_error().is_some());

    let conn = p
        .client
        .connect_tls(addr, server_name("localhost").unwrap())
        .unwrap();
    p.until("a good client is accepted", |p| {
        p.client_has(NetEvent::Connected { conn }) && p.accepted().len() == 1
    });
    let sc = p.accepted()[0];
    p.client.send(conn, b"ping").unwrap();
    p.until("read", |p| p.server.received(sc) == b"ping");
}

/// Starts the Python HTTPS peer (aiohttp) with the test certificate; its port.
fn https_peer(certs: &Certs) -> (Proc, SocketAddr) {
    let mut child = Command::new(&certs.python)
        .args([PEERS, "https", &certs.dir.path().display().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words.first(),
        Some(&"https"),
        "peer said {line:?} (is aiohttp installed?)"
    );
    (
        Proc(child),
        format!("127.0.0.1:{}", words[1]).parse().unwrap(),
    )
}

fn outcome<T: Transport>(client: &mut HttpClient, t: &mut Tls<T>, clock: &TscClock) -> Outcome {
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "no outcome");
        events.clear();
        t.poll(clock.now_ns(), 1_000_000, &mut events).unwrap();
        for e in &events {
            if let Some(o) = client.on_event(t, e) {
                return o;
            }
        }
        if let Some(o) = client.poll(t, clock.now_ns()) {
            return o;
        }
    }
}

/// Goal: keel's HTTP client, unchanged, speaks HTTPS to aiohttp through a registered TLS
/// destination (verified against the test CA); with the public roots it is refused.
#[test]
fn keel_https_client_against_aiohttp() {
    let Some(certs) = certs() else { return };
    let (_peer, addr) = https_peer(&certs);
    let clock = TscClock::new();
    let mut t = tls_client::<EpollReactor>(&certs).unwrap();
    t.add_destination(addr, server_name("localhost").unwrap())
        .unwrap();
    let mut config = HttpClientConfig::new(addr);
    config.host = format!("localhost:{}", addr.port());
    config.timeout_ns = 10_000_000_000;
    let mut client = HttpClient::new(config.clone());
    let get = Request {
        method: Method::Get,
        target: "/hello",
        host: "",
        headers: &[("Accept", "application/json")],
        body: b"",
    };
    for _ in 0..2 {
        client.send(&mut t, clock.now_ns(), &get).unwrap();
        assert_eq!(
            outcome(&mut client, &mut t, &clock),
            Outcome::Response { status: 200 }
        );
        let body: serde_json::Value = serde_json::from_slice(client.body()).unwrap();
        assert_eq!(body["hello"], "keel");
        assert_eq!(body["tls"], true);
    }
    assert_eq!(client.stats().connects, 1, "kept alive over TLS");
    assert_eq!(t.stats().client_handshakes, 1);

    let body = vec![b'x'; 6000];
    let post = Request {
        method: Method::Post,
        target: "/echo",
        host: "",
        headers: &[("Content-Type", "application/octet-stream")],
        body: &body,
    };
    client.send(&mut t, clock.now_ns(), &post).unwrap();
    assert_eq!(
        outcome(&mut client, &mut t, &clock),
        Outcome::Response { status: 200 }
    );
    assert_eq!(client.body(), &body[..]);

    // The default (public) roots: the test CA is unknown, the request fails to connect.
    let mut public = Tls::new(
        open::<EpollReactor>().unwrap(),
        TlsConfig {
            client: Some(client_config(None).unwrap()),
            ..TlsConfig::default()
        },
    );
    public
        .add_destination(addr, server_name("localhost").unwrap())
        .unwrap();
    let mut client = HttpClient::new(config);
    client.send(&mut public, clock.now_ns(), &get).unwrap();
    match outcome(&mut client, &mut public, &clock) {
        Outcome::Failed {
            why: FailReason::Connect(errno),
            written: false,
            ..
        } => assert_eq!(errno, libc::EPROTO),
        o => panic!("{o:?}"),
    }
    assert!(public.latest_error().unwrap().1.is_certificate());
}

fn python_says(certs: &Certs, args: &[&str]) -> String {
    let out = Command::new(&certs.python)
        .arg(PEERS)
        .args(args)
        .output()
        .expect("python");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn control(addr: &str, command: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("{command}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

/// The number after `key=` in the part of `line` after `part`.
fn counter(line: &str, part: &str, key: &str) -> u64 {
    let rest = line
        .split(part)
        .nth(1)
        .unwrap_or_else(|| panic!("{part} in {line}"));
    let word = rest
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    word.trim_end_matches(';').parse().unwrap()
}

/// Goal: `keel venue --tls-cert --tls-key` serves REST over https and market data over wss to
/// Python's ssl (httpx, websockets) and to curl; a client that does not trust the CA fails; a
/// plaintext request to the TLS port is closed and counted, and the venue goes on serving.
#[test]
fn venue_serves_https_and_wss() {
    let Some(certs) = certs() else { return };
    let (cert, key) = (certs.path("server.pem"), certs.path("server.key"));
    let v = venue(&[
        "--rest-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--transport",
        "epoll",
    ]);
    let rest = v.rest.clone().unwrap();
    assert!(v.md.starts_with("wss://"), "{}", v.md);
    let ca = certs.path("ca.pem");
    let url = format!("https://{rest}/api/v3/ticker?symbol=AAPL");
    let said = python_says(&certs, &["get", &url, &ca]);
    assert!(said.starts_with("status 200 "), "{said}");
    assert!(said.contains("lastUpdateId"), "{said}");

    let said = python_says(&certs, &["wss", &v.md, &ca]);
    assert!(said.starts_with("message "), "{said}");

    let said = python_says(&certs, &["get", &url, "system"]);
    assert!(said.starts_with("error ConnectError"), "{said}");
    assert!(said.contains("CERTIFICATE_VERIFY_FAILED"), "{said}");

    // A plaintext HTTP request to the TLS port: closed.
    let mut plain = TcpStream::connect(&rest).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /api/v3/ticker?symbol=AAPL HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "answered in plaintext");

    match Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", &ca, &url])
        .output()
    {
        Ok(out) => {
            let body = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "curl: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(body.contains("lastUpdateId"), "{body}");
        }
        Err(e) => eprintln!("curl not run: {e}"),
    }
    let said = python_says(&certs, &["get", &url, &ca]);
    assert!(said.starts_with("status 200 "), "still serving: {said}");

    let line = control(&v.control, "tls");
    assert!(counter(&line, "rest", "handshakes") >= 2, "{line}");
    assert!(counter(&line, "rest", "handshake_failures") >= 2, "{line}");
    assert!(counter(&line, "rest", "protocol_errors") >= 1, "{line}");
    assert!(counter(&line, "md", "handshakes") >= 1, "{line}");
    // Order entry stays plaintext: the control port answered in plaintext above, and the
    // order-entry port accepts a plain TCP connection (SoupBinTCP is not TLS).
    TcpStream::connect(&v.entry).unwrap();
}

/// Goal: a client that connects to a TLS listener and never says anything is closed once
/// `handshake_timeout_ns` passes, counted, never accepted.
#[test]
fn a_silent_client_is_timed_out_of_the_handshake() {
    let Some(certs) = certs() else { return };
    let server = server_config(&certs.file("server.pem"), &certs.file("server.key")).unwrap();
    let mut t = Tls::new(
        open::<EpollReactor>().unwrap(),
        TlsConfig {
            server: Some(server),
            handshake_timeout_ns: 200_000_000,
            ..TlsConfig::default()
        },
    );
    let (_, addr) = t.listen_tls("127.0.0.1:0".parse().unwrap()).unwrap();
    let client = tls_client::<EpollReactor>(&certs).unwrap();
    let mut p = Pair::new(t, client);
    let mut silent = TcpStream::connect(addr).unwrap();
    until_closed(&mut p, &mut silent);
    let s = p.server.stats();
    assert_eq!(
        (s.handshake_timeouts, s.handshake_failures),
        (1, 1),
        "{s:?}"
    );
    assert!(p.accepted().is_empty());
    assert_eq!(
        p.server.latest_error().unwrap().1,
        TlsError::HandshakeTimeout
    );
}
