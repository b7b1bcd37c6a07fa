//! Market data: a real peer nobody here wrote (the `websockets` package) keeps the venue's
//! book; WebSocket conformance through the Autobahn cases (the `kosoku` package); slow
//! consumers that stop reading while thousands of events per second flow.
//!
//! The Python peers come from PyPI into the virtualenv scripts/test makes (`KEEL_INTEROP_PYTHON`
//! points at its interpreter; with `KEEL_REQUIRE_INTEROP=1` a missing one fails the test).

// A test driver waits on other processes and threads by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::feed::fanout::DEPTH;
use keel::feed::handler::{FeedConfig, FeedHandler};
use keel::net::{Reactor, ReactorConfig};
use keel::proto::md::BookSide;
use keel::proto::ws::{self, Decoder, Opcode, Role, WsMessage};
use keel_venue::md_server::{BookView, MdConfig, MdFaults, MdServer, MdStats};

mod common;

use common::peers::{python, venue};

/// `keel venue` with market data on a free port: (process, control address, md address).
fn md_venue(flow_rate: u32) -> (common::peers::Proc, String, String) {
    let rate = flow_rate.to_string();
    let v = venue(&["--flow-rate", &rate]);
    (v.proc, v.control, v.md)
}

// Goal: a client on the `websockets` package subscribes to book and trades, applies snapshot
// plus deltas with every sequence number checked, and ends with the venue's book.
#[test]
fn websockets_client_keeps_the_venue_book() {
    let Some(python) = python() else { return };
    let (_venue, control, md) = md_venue(3_000);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/md_client.py");
    let out = Command::new(python)
        .args([script, &md, &control, "AAPL,MSFT,NVDA", "2.5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], true, "{stdout}");
    assert!(v["counts"]["book"].as_u64().unwrap() > 1_000, "{stdout}");
    assert!(v["counts"]["trade"].as_u64().unwrap() > 100, "{stdout}");
    eprintln!("websockets client: {stdout}");
}

// Goal: WebSocket conformance — every Autobahn group through `kosoku` against keel's echo
// endpoint with the venue's default settings: groups 1 to 7, 9 and 10 (framing, ping/pong,
// reserved bits, opcodes, fragmentation, UTF-8, close, limits and performance, misc) pass;
// groups 12 and 13 (permessage-deflate, which keel does not implement) are declined cleanly:
// reported unimplemented with a clean close, never failed. Pings go only to idle connections,
// so none lands inside a case.
#[test]
fn autobahn_all_groups_pass_or_are_declined_cleanly() {
    let Some(python) = python() else { return };
    let kosoku = std::path::Path::new(&python).with_file_name("kosoku");
    let (_venue, _control, md) = md_venue(0);
    let addr = md
        .trim_start_matches("ws://")
        .trim_end_matches("/md")
        .to_string();
    let reports = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&kosoku);
    cmd.args([
        "-m",
        "fuzzingclient",
        &format!("{addr}/echo"),
        "-p",
        "4",
        "-o",
    ])
    .arg(reports.path());
    for group in [1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 13] {
        cmd.args(["-i", &format!("{group}.*")]);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reports.path().join("index.json")).unwrap())
            .unwrap();
    let cases = index.as_object().unwrap().values().next().unwrap();
    let mut by_behaviour: BTreeMap<String, u32> = BTreeMap::new();
    for (id, case) in cases.as_object().unwrap() {
        let behaviour = case["behavior"].as_str().unwrap();
        *by_behaviour.entry(behaviour.to_string()).or_default() += 1;
        let deflate = id.starts_with("12.") || id.starts_with("13.");
        match (deflate, behaviour) {
            (false, "OK" | "NON-STRICT" | "INFORMATIONAL") => {}
            (true, "UNIMPLEMENTED") => {
                assert_eq!(
                    case["behaviorClose"], "OK",
                    "{id} not declined cleanly: {text}"
                )
            }
            _ => panic!("case {id}: {behaviour}: {text}"),
        }
    }
    eprintln!("autobahn: {by_behaviour:?}");
    let total: u32 = by_behaviour.values().sum();
    assert!(total >= 500, "{total} cases ran: {text}");
    assert_eq!(by_behaviour.get("FAILED"), None, "{text}");
}

// ----- slow consumers -----------------------------------------------------------------------

/// The server's counters, its (queue peak, queue bound) and open connections.
type Snapshot = (MdStats, (usize, usize), usize);

/// The server in its own thread, publishing book updates and trades for symbol 0 at about
/// `per_ms` events per millisecond until told to stop publishing, then serving until told to
/// stop. Shares its counters.
struct ServerThread {
    publishing: Arc<AtomicBool>,
    /// Faults to apply at the next pass.
    faults: Arc<Mutex<Option<MdFaults>>>,
    /// The server's book of symbol 0, refreshed every pass.
    book: Arc<Mutex<BookView>>,
    running: Arc<AtomicBool>,
    shared: Arc<Mutex<Snapshot>>,
    thread: Option<std::thread::JoinHandle<(BookView, u64)>>,
    addr: std::net::SocketAddr,
}

impl ServerThread {
    fn start(config: MdConfig, per_ms: u32) -> Self {
        let publishing = Arc::new(AtomicBool::new(true));
        let running = Arc::new(AtomicBool::new(true));
        let shared = Arc::new(Mutex::new((MdStats::default(), (0, 0), 0)));
        let (tx, rx) = std::sync::mpsc::channel();
        let faults: Arc<Mutex<Option<MdFaults>>> = Arc::new(Mutex::new(None));
        let book = Arc::new(Mutex::new(BookView::default()));
        let (p, r, s) = (publishing.clone(), running.clone(), shared.clone());
        let (f, b) = (faults.clone(), book.clone());
        let thread = std::thread::spawn(move || {
            let mut md = MdServer::new(config).unwrap();
            tx.send(md.local_addr()).unwrap();
            let clock = TscClock::new();
            let mut rng = 0x1234_5678_9abc_def1u64;
            let mut last_ms = 0;
            while r.load(Ordering::Relaxed) {
                let now = clock.now_ns();
                if p.load(Ordering::Relaxed) && now / 1_000_000 != last_ms {
                    last_ms = now / 1_000_000;
                    for _ in 0..per_ms {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let qty = (rng >> 40) % 1_000;
                        if rng % 4 == 0 {
                            md.trade(now, 0, 10_000, 1 + qty, rng % 2 == 0);
                        } else if rng % 2 == 0 {
                            md.update_level(0, BookSide::Bid, 9_000 + (rng >> 20) as i64 % 50, qty);
                        } else {
                            md.update_level(
                                0,
                                BookSide::Ask,
                                10_001 + (rng >> 20) as i64 % 50,
                                qty,
                            );
                        }
                    }
                }
                if let Some(faults) = f.lock().unwrap().take() {
                    md.set_faults(faults);
                }
                md.step(now, 0).unwrap();
                *s.lock().unwrap() = (md.stats(), md.queue_peak(), md.connections());
                *b.lock().unwrap() = md.book(0);
                std::thread::sleep(Duration::from_micros(100));
            }
            (md.book(0), md.trade_seq(0))
        });
        Self {
            publishing,
            faults,
            book,
            running,
            shared,
            thread: Some(thread),
            addr: rx.recv().unwrap(),
        }
    }

    fn stats(&self) -> Snapshot {
        *self.shared.lock().unwrap()
    }

    /// The counters once `ready` holds (the thread publishes them after each pass, so a
    /// count read right after a network exchange may not include it yet); panics after 10 s.
    fn stats_when(&self, ready: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.stats();
            if ready(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "counters never got there: {s:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn finish(mut self) -> (BookView, u64) {
        self.running.store(false, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// A blocking WebSocket client on a socket with a small receive buffer (so that not reading
/// backs up into the server quickly).
struct Client {
    stream: TcpStream,
    decoder: Decoder,
    buf: Vec<u8>,
    len: usize,
}

impl Client {
    fn connect(addr: std::net::SocketAddr, path: &str) -> Self {
        let std::net::SocketAddr::V4(v4) = addr else {
            panic!("ipv4")
        };
        // SAFETY: plain socket calls on a descriptor this function owns; its ownership moves
        // into the TcpStream.
        #[allow(unsafe_code)]
        let stream = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0);
            let size: libc::c_int = 8 * 1024;
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                std::ptr::addr_of!(size).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            let rc = libc::connect(
                fd,
                std::ptr::addr_of!(sa).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            );
            assert_eq!(rc, 0, "connect");
            TcpStream::from_raw_fd(fd)
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let (req, key) = ws::request(&addr.to_string(), path, [3; 16]);
        let mut c = Self {
            stream,
            decoder: Decoder::new(Role::Client, 1 << 20),
            buf: vec![0; 1 << 21],
            len: 0,
        };
        c.stream.write_all(req.as_bytes()).unwrap();
        loop {
            c.fill();
            if let Some(n) = ws::parse_response(&c.buf[..c.len], &key).unwrap() {
                c.buf.copy_within(n..c.len, 0);
                c.len -= n;
                return c;
            }
        }
    }

    fn fill(&mut self) -> usize {
        let n = self.stream.read(&mut self.buf[self.len..]).unwrap_or(0);
        self.len += n;
        n
    }

    fn send(&mut self, text: &str) {
        let mut frame = vec![0u8; text.len() + 14];
        let n = ws::encode_frame(
            &mut frame,
            true,
            Opcode::Text,
            text.as_bytes(),
            Some([1, 2, 3, 4]),
        );
        self.stream.write_all(&frame[..n]).unwrap();
    }

    /// The next text message or close as (text, close code); pings are answered on the way.
    /// `None` when nothing but pings came within the read timeout, or at end of stream.
    fn next(&mut self) -> Option<(String, Option<u16>)> {
        loop {
            let (used, msg) = self.decoder.decode(&self.buf[..self.len]).unwrap();
            let mut pong = None;
            let out = match msg {
                Some(WsMessage::Text(t)) => Some((t.to_string(), None)),
                Some(WsMessage::Close { code, .. }) => Some((String::new(), code)),
                Some(WsMessage::Ping(p)) => {
                    pong = Some(p.to_vec());
                    None
                }
                _ => None,
            };
            self.buf.copy_within(used..self.len, 0);
            self.len -= used;
            if let Some(p) = pong {
                let mut frame = [0u8; 140];
                let n = ws::encode_frame(&mut frame, true, Opcode::Pong, &p, Some([9, 8, 7, 6]));
                let _ = self.stream.write_all(&frame[..n]);
                return None;
            }
            if out.is_some() {
                return out;
            }
            if used == 0 && self.fill() == 0 {
                return None;
            }
        }
    }
}

/// A client-side book with the protocol's checks.
#[derive(Default)]
struct LocalBook {
    bids: BTreeMap<i64, u64>,
    asks: BTreeMap<i64, u64>,
    seq: Option<u64>,
    snapshots: u32,
    deltas: u64,
}

impl LocalBook {
    fn apply(&mut self, m: &serde_json::Value) {
        match m["type"].as_str().unwrap() {
            "snapshot" => {
                let levels = |k: &str| -> BTreeMap<i64, u64> {
                    m[k].as_array()
                        .unwrap()
                        .iter()
                        .map(|l| (l[0].as_i64().unwrap(), l[1].as_u64().unwrap()))
                        .collect()
                };
                self.bids = levels("bids");
                self.asks = levels("asks");
                self.seq = Some(m["seq"].as_u64().unwrap());
                self.snapshots += 1;
            }
            "book" => {
                let seq = m["seq"].as_u64().unwrap();
                let Some(at) = self.seq else {
                    panic!("a delta before the first snapshot: the server sends the snapshot first")
                };
                if seq <= at {
                    return;
                }
                assert_eq!(seq, at + 1, "book gap");
                let side = if m["side"] == "bid" {
                    &mut self.bids
                } else {
                    &mut self.asks
                };
                let (p, q) = (m["price"].as_i64().unwrap(), m["qty"].as_u64().unwrap());
                if q == 0 {
                    side.remove(&p);
                } else {
                    side.insert(p, q);
                }
                self.seq = Some(seq);
                self.deltas += 1;
            }
            _ => {}
        }
    }

    fn view(&self) -> BookView {
        BookView {
            bids: self.bids.iter().rev().map(|(p, q)| (*p, *q)).collect(),
            asks: self.asks.iter().map(|(p, q)| (*p, *q)).collect(),
            seq: self.seq.unwrap_or(0),
        }
    }
}

// Goal: with thousands of events per second flowing, a client that stops reading never costs
// the server more than its configured bound; a stalled `trades` subscriber is disconnected with
// code 4001; a stalled `book` subscriber, reading again, recovers through a snapshot; and a fast
// client sees every trade and every delta in sequence, ending with the server's book.
#[test]
fn slow_consumers_cannot_hurt_the_server_or_the_fast() {
    let config = MdConfig {
        conns_max: 16,
        queue_max: 256,
        send_buffer_bytes: 16 * 1024,
        ping_interval_ns: 200_000_000,
        silent_intervals_max: 1_000, // the stalled clients are slow, not silent
        ..MdConfig::default()
    };
    let queue_max = config.queue_max;
    let server = ServerThread::start(config, 10); // ~10,000 events per second
    let addr = server.addr;

    // The fast client reads in its own thread until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let fast_stop = stop.clone();
    let fast = std::thread::spawn(move || {
        let mut c = Client::connect(addr, "/md");
        c.send(r#"{"op":"subscribe","channel":"book","symbol":"AAPL"}"#);
        c.send(r#"{"op":"subscribe","channel":"trades","symbol":"AAPL"}"#);
        let mut book = LocalBook::default();
        let mut last_trade = None;
        let mut trades = 0u64;
        let mut first_trade = 0u64;
        let mut last_text = Instant::now();
        c.stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        loop {
            // Finished once told to stop and nothing has come for 300 ms.
            if fast_stop.load(Ordering::Relaxed) && last_text.elapsed() > Duration::from_millis(300)
            {
                break;
            }
            let Some((text, close)) = c.next() else {
                continue;
            };
            last_text = Instant::now();
            assert_eq!(close, None, "the fast client must not be closed");
            let m: serde_json::Value = serde_json::from_str(&text).unwrap();
            if m["type"] == "trade" {
                let seq = m["seq"].as_u64().unwrap();
                if let Some(prev) = last_trade {
                    assert_eq!(seq, prev + 1, "trade gap for the fast client");
                } else {
                    first_trade = seq;
                }
                last_trade = Some(seq);
                trades += 1;
            }
            book.apply(&m);
        }
        (book, trades, first_trade, last_trade)
    });

    let mut stalled_trades = Client::connect(addr, "/md");
    stalled_trades.send(r#"{"op":"subscribe","channel":"trades","symbol":"AAPL"}"#);
    let mut stalled_book = Client::connect(addr, "/md");
    stalled_book.send(r#"{"op":"subscribe","channel":"book","symbol":"AAPL"}"#);

    // Neither stalled client reads until the server has dealt with both.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (stats, _, _) = server.stats();
        if stats.slow_consumers_dropped >= 1 && stats.book_conflated > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no slow consumer handled: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (stats, (peak, bound), _) = server.stats();
    assert!(
        peak <= bound && bound == queue_max,
        "queue peak {peak} over {bound}"
    );
    eprintln!("stage: slow consumers handled: {stats:?}");

    // The stalled trades subscriber reads again: everything buffered, then close 4001.
    let mut code = None;
    let close_deadline = Instant::now() + Duration::from_secs(10);
    let mut texts = 0u64;
    let mut nones = 0u64;
    while Instant::now() < close_deadline {
        match stalled_trades.next() {
            Some((_, Some(close))) => {
                code = Some(close);
                break;
            }
            Some(_) => texts += 1,
            None => nones += 1,
        }
    }
    eprintln!("stalled trades client read {texts} messages, {nones} empty reads");
    assert_eq!(code, Some(ws::close_code::SLOW_CONSUMER), "{stats:?}");
    eprintln!("stage: trades subscriber got 4001");

    // The stalled book subscriber reads again: it recovers through a fresh snapshot.
    let mut book = LocalBook::default();
    let recover_deadline = Instant::now() + Duration::from_secs(10);
    while book.snapshots < 2 {
        assert!(Instant::now() < recover_deadline, "no recovery snapshot");
        if let Some((text, close)) = stalled_book.next() {
            assert_eq!(close, None);
            book.apply(&serde_json::from_str(&text).unwrap());
        }
    }
    eprintln!("stage: book subscriber recovered");
    // Let it run a little more in sync, then stop publishing and let everyone drain.
    let run_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < run_until {
        if let Some((text, _)) = stalled_book.next() {
            book.apply(&serde_json::from_str(&text).unwrap());
        }
    }
    server.publishing.store(false, Ordering::Relaxed);
    stalled_book
        .stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut last_text = Instant::now();
    while last_text.elapsed() < Duration::from_millis(300) {
        if let Some((text, _)) = stalled_book.next() {
            book.apply(&serde_json::from_str(&text).unwrap());
            last_text = Instant::now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (fast_book, fast_trades, first_trade, last_trade) = fast.join().unwrap();
    let (stats, (peak, bound), _) = server.stats();
    let (server_book, trade_seq) = server.finish();

    assert!(peak <= bound, "queue peak {peak} over {bound}");
    assert_eq!(
        book.view(),
        server_book,
        "the recovered client ends with the server's book"
    );
    assert_eq!(
        fast_book.view(),
        server_book,
        "the fast client ends with the server's book"
    );
    assert_eq!(
        fast_book.snapshots, 1,
        "the fast client never needed a second snapshot"
    );
    assert_eq!(
        last_trade,
        Some(trade_seq),
        "the fast client saw every trade"
    );
    assert_eq!(
        fast_trades,
        trade_seq - first_trade + 1,
        "every trade since it subscribed"
    );
    assert!(trade_seq > 1_000 && server_book.seq > 3_000, "{stats:?}");
    eprintln!(
        "slow consumers: {stats:?}; fast client {} deltas, {fast_trades} trades; queue peak {peak}/{bound}",
        fast_book.deltas
    );
}

// Goal: a trades subscriber that stops reading for good is not held forever: its 4001 close
// frame waits behind what it has not read for `close_flush_timeout_ns`, then the socket is
// closed, the undelivered close frame counted and the slot freed.
#[test]
fn a_reader_stalled_for_good_is_closed_and_counted() {
    let server = ServerThread::start(
        MdConfig {
            queue_max: 64,
            send_buffer_bytes: 16 * 1024,
            close_flush_timeout_ns: 1_000_000_000,
            silent_intervals_max: 1_000,
            ..MdConfig::default()
        },
        10,
    );
    let mut stalled = Client::connect(server.addr, "/md");
    stalled.send(r#"{"op":"subscribe","channel":"trades","symbol":"AAPL"}"#);
    let stats = server
        .stats_when(|s| s.0.close_frames_unsent >= 1 && s.2 == 0)
        .0;
    let _ = server.finish();
    assert_eq!(stats.slow_consumers_dropped, 1, "{stats:?}");
    assert_eq!(stats.close_frames_unsent, 1, "{stats:?}");
    drop(stalled);
}

/// Drives a feed handler on the test's thread: one transport poll (up to 1 ms), its events, its
/// timers.
struct FeedDriver {
    clock: TscClock,
    events: Vec<keel::net::NetEvent>,
}

impl FeedDriver {
    fn new() -> Self {
        Self {
            clock: TscClock::new(),
            events: Vec::new(),
        }
    }

    fn pass(&mut self, handler: &mut FeedHandler, reactor: &mut Reactor) {
        let now = self.clock.now_ns();
        self.events.clear();
        reactor.poll(now, 1_000_000, &mut self.events).unwrap();
        for e in &self.events {
            handler.on_event(now, reactor, e);
        }
        handler.step(now, reactor);
    }
}

// Goal: the engine's feed handler against a feed that drops, duplicates, reorders and corrupts
// deltas: every fault is detected (a gap, a duplicate, a crossed book), each resync comes from a
// fresh snapshot, the subscriber always gets a consistent top of book, and once the faults stop
// the local book equals the server's.
#[test]
fn feed_handler_resyncs_through_gaps_duplicates_reordering_and_crossed_books() {
    let server = ServerThread::start(MdConfig::default(), 5);
    *server.faults.lock().unwrap() = Some(MdFaults {
        drop_every: 197,
        duplicate_every: 181,
        swap_every: 173,
        cross_every: 211,
    });
    let mut reactor = Reactor::new(ReactorConfig::default()).unwrap();
    let mut handler = FeedHandler::new(FeedConfig {
        addr: server.addr,
        symbols: vec!["AAPL".into()],
        resync_retry_ns: 100_000_000,
        ..FeedConfig::default()
    });
    let mut strategy = handler.subscribe(1_024);
    let mut driver = FeedDriver::new();
    handler.start(driver.clock.now_ns(), &mut reactor);
    let mut pass = |handler: &mut FeedHandler, reactor: &mut Reactor| driver.pass(handler, reactor);
    let mut last_top_seq = 0;
    let mut tops = 0u64;
    let faulty_until = Instant::now() + Duration::from_millis(2_500);
    while Instant::now() < faulty_until {
        pass(&mut handler, &mut reactor);
        while let Some((symbol, top)) = strategy.next_book() {
            assert_eq!(symbol, 0);
            // Never a crossed top, and never going back in sequence within a sync.
            if top.bids[0].1 > 0 && top.asks[0].1 > 0 {
                assert!(
                    top.bids[0].0 < top.asks[0].0,
                    "crossed top handed out: {top:?}"
                );
            }
            assert!(
                top.seq >= last_top_seq,
                "a top went back in sequence: {top:?}"
            );
            last_top_seq = top.seq;
            tops += 1;
        }
        while strategy.next_trade().is_some() {}
    }
    // A clean feed again, then quiet: the handler must converge on the server's book.
    *server.faults.lock().unwrap() = Some(MdFaults::default());
    std::thread::sleep(Duration::from_millis(50));
    server.publishing.store(false, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        pass(&mut handler, &mut reactor);
        while strategy.next_book().is_some() {}
        let want = server.book.lock().unwrap().clone();
        let b = handler.book(0);
        let have = BookView {
            bids: b.bids().collect(),
            asks: b.asks().collect(),
            seq: b.seq().unwrap_or(0),
        };
        if have == want && handler.synced() {
            let top = strategy.book(0);
            assert_eq!(top.seq, want.seq, "the subscriber has the newest top");
            for i in 0..DEPTH.min(want.bids.len()) {
                assert_eq!(top.bids[i], want.bids[i]);
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no convergence: {:?}",
            handler.stats()
        );
    }
    let stats = handler.stats();
    let _ = server.finish();
    eprintln!("feed handler under faults: {stats:?}; {tops} tops handed out");
    assert!(stats.gaps > 0, "{stats:?}");
    assert!(stats.duplicates > 0, "{stats:?}");
    assert!(stats.crossed > 0, "{stats:?}");
    assert!(
        stats.snapshots > stats.gaps / 2,
        "resyncs come from snapshots: {stats:?}"
    );
    assert!(stats.deltas > 500, "{stats:?}");
    assert_eq!(stats.malformed, 0);
    assert_eq!(stats.protocol_errors, 0);
    assert_eq!(
        stats.disconnects, 0,
        "resyncs never cost the connection: {stats:?}"
    );
}

// Goal: the feed handler outlives its server: when the server goes away it drops its books,
// retries with backoff while connections are refused, and resynchronises with the server that
// comes back on the same address.
#[test]
fn feed_handler_reconnects_with_backoff_and_resyncs() {
    let first = ServerThread::start(MdConfig::default(), 2);
    let addr = first.addr;
    let mut reactor = Reactor::new(ReactorConfig::default()).unwrap();
    let mut handler = FeedHandler::new(FeedConfig {
        addr,
        symbols: vec!["AAPL".into()],
        backoff: keel::guard::backoff::BackoffConfig {
            base_ns: 20_000_000,
            cap_ns: 200_000_000,
            ..Default::default()
        },
        ..FeedConfig::default()
    });
    let mut driver = FeedDriver::new();
    let mut run_until = |handler: &mut FeedHandler,
                         reactor: &mut Reactor,
                         what: &str,
                         done: &mut dyn FnMut(&FeedHandler) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(handler) {
            assert!(Instant::now() < deadline, "{what}: {:?}", handler.stats());
            driver.pass(handler, reactor);
        }
    };
    handler.start(TscClock::new().now_ns(), &mut reactor);
    run_until(&mut handler, &mut reactor, "first sync", &mut |h| {
        h.synced() && h.stats().deltas > 50
    });
    let _ = first.finish(); // the server goes away
    run_until(&mut handler, &mut reactor, "the loss seen", &mut |h| {
        h.stats().disconnects >= 1 && h.stats().connects >= 3
    });
    assert!(!handler.synced(), "no book survives a lost connection");
    let second = ServerThread::start(
        MdConfig {
            listen: addr,
            ..MdConfig::default()
        },
        2,
    );
    run_until(
        &mut handler,
        &mut reactor,
        "resync with the new server",
        &mut |h| {
            let want = second.book.lock().unwrap().seq;
            h.synced()
                && h.book(0)
                    .seq()
                    .is_some_and(|s| s >= want.min(20) && want > 0)
        },
    );
    let stats = handler.stats();
    let _ = second.finish();
    eprintln!("feed handler across a server restart: {stats:?}");
    assert!(stats.snapshots >= 2);
}

// Goal: a connection that stops answering pings is closed with 4002 and forgotten (its
// subscriptions and buffers freed), and bad handshakes get their HTTP refusal.
#[test]
fn silent_connections_are_closed_and_bad_handshakes_refused() {
    let server = ServerThread::start(
        MdConfig {
            ping_interval_ns: 100_000_000,
            silent_intervals_max: 3,
            ..MdConfig::default()
        },
        1,
    );
    let addr = server.addr;
    // Subscribes, then never reads (so never answers a ping) for a second.
    let mut silent = Client::connect(addr, "/md");
    silent.send(r#"{"op":"subscribe","channel":"book","symbol":"AAPL"}"#);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().0.silent_dropped == 0 {
        assert!(
            Instant::now() < deadline,
            "silence not detected: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut code = None;
    let read_deadline = Instant::now() + Duration::from_secs(5);
    while code.is_none() && Instant::now() < read_deadline {
        if let Some((_, Some(c))) = silent.next() {
            code = Some(c);
        }
    }
    assert_eq!(code, Some(ws::close_code::SILENT));
    // Answer the close, as a client should: the server then closes the socket at once.
    let mut frame = [0u8; 16];
    let n = ws::encode_close(&mut frame, 1000, "", Some([5, 6, 7, 8]));
    silent.stream.write_all(&frame[..n]).unwrap();
    let forget_deadline = Instant::now() + Duration::from_secs(7);
    while server.stats().2 != 0 {
        assert!(
            Instant::now() < forget_deadline,
            "not freed: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let refusal = |request: &str| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        line
    };
    let (good, _) = ws::request(&addr.to_string(), "/nowhere", [1; 16]);
    assert!(refusal(&good).starts_with("HTTP/1.1 404"));
    let (md, _) = ws::request(&addr.to_string(), "/md", [1; 16]);
    assert!(refusal(&md.replace("Version: 13", "Version: 8")).starts_with("HTTP/1.1 426"));
    assert!(refusal("GET /md HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 400"));
    // The server thread publishes its counters after the pass that answered: wait for them.
    let stats = server.stats_when(|s| s.0.handshakes_refused >= 3).0;
    let _ = server.finish();
    assert_eq!(stats.handshakes_refused, 3, "{stats:?}");
}
