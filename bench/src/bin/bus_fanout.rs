//! Market data over a NATS bus (issue 15): `keel venue --nats` publishes every delta once;
//! `keel gateway`s subscribe and serve the same WebSocket protocol. All of them run as real
//! processes (nats-server, the venue, 1 to 3 gateways); the clients run in this process on one
//! tokio thread. One run measures:
//!
//! 1. the latency the bus hop adds: three connections subscribed to the same books and trades —
//!    two straight to the venue, one to a gateway — and per delta (symbol, seq) the gateway's
//!    arrival minus the first direct connection's arrival. The baseline is the second direct
//!    connection against the first: the measurement's own noise (one thread reads all three).
//!    Every delta the gateway delivered must have come directly, byte for byte the same;
//! 2. messages delivered per second with 1, 2 and 3 gateways, K clients on each (book
//!    channel, both symbols), the venue at a fixed high flow rate; every client's sequence is
//!    checked (no gap except after a snapshot) and every client must end on the venue's last
//!    sequence once the flow stops;
//! 3. the venue's CPU per published event (utime + stime from /proc/<pid>/stat over a fixed
//!    window, divided by the events a direct connection saw in that window) with 0, 1, 2 and 3
//!    gateways on the bus (no WebSocket clients on them): the publisher publishes once, so this
//!    should stay flat. nats-server's CPU per event is shown beside it.
//!
//! Needs the keel binary next to this one and nats-server on the PATH (or `NATS_SERVER`):
//! `cargo build --release -p keel-cli --features simulator -p keel-bench` first.
//!
//! `bus_fanout [--smoke] [--epoll] [--clients=20] [--rate=20000] [--latency-rate=5000] [--seconds=4]`

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use keel_bench::{arg_u64, flag};
use tokio_tungstenite::tungstenite::Message;

const SYMBOLS: [&str; 2] = ["AAPL", "MSFT"];

use keel_bench::mono_ns;

/// User + system CPU of a whole process (every thread), in nanoseconds.
fn cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    // After the command: state (field 3) then numeric fields 4..; utime and stime are fields 14
    // and 15, i.e. the 12th and 13th words after the command.
    let words: Vec<&str> = after.split_whitespace().collect();
    let num = |i: usize| {
        words
            .get(i)
            .and_then(|w| w.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let ticks = num(11) + num(12);
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * (1_000_000_000 / per_s)
}

// ----- processes ----------------------------------------------------------------------------

/// A child process, killed when dropped; its first stdout line, the rest drained by a thread.
struct Proc {
    child: Child,
    first_line: String,
}

impl Proc {
    fn spawn(program: &std::path::Path, args: &[String], wait_line: bool) -> Proc {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                let _ = tx.send(line);
            }
        });
        let first_line = if wait_line {
            rx.recv_timeout(Duration::from_secs(15))
                .unwrap_or_else(|_| panic!("{}: no first line", program.display()))
        } else {
            String::new()
        };
        Proc { child, first_line }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The word after `marker` in the first line, without a trailing comma.
    fn after(&self, marker: &str) -> String {
        let at = self
            .first_line
            .find(marker)
            .unwrap_or_else(|| panic!("'{marker}' not in '{}'", self.first_line));
        self.first_line[at + marker.len()..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_end_matches(',')
            .to_string()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn control(addr: &str, command: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("venue control");
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    writeln!(s, "{command}").expect("control write");
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .expect("control answer");
    assert!(line.starts_with("ok"), "control `{command}`: {line}");
    line.trim_end().to_string()
}

// ----- clients ------------------------------------------------------------------------------

/// The value of `"key":` in a flat JSON message (the first occurrence), quotes stripped.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let at = text.find(&pat)? + pat.len();
    let rest = &text[at..];
    if let Some(quoted) = rest.strip_prefix('"') {
        return quoted.split('"').next();
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Channel (0 book, 1 trades), symbol index and sequence of a delta or trade.
type Key = (u8, u8, u64);

/// One connection's view: sequence continuity per channel and symbol.
#[derive(Default)]
struct Conn {
    book: [Option<u64>; 2],
    trades: [Option<u64>; 2],
    snapshots: u64,
    gaps: u64,
    stale: u64,
    errors: Vec<String>,
    /// Messages (of any type) while the counting flag was up.
    counted: u64,
    /// Arrival time and text of every delta and trade (latency run only).
    record: Option<HashMap<Key, (u64, String)>>,
}

impl Conn {
    fn on_text(&mut self, text: &str, at_ns: u64, counting: bool) {
        if counting {
            self.counted += 1;
        }
        let kind = field(text, "type").unwrap_or("");
        let sym = field(text, "symbol").and_then(|s| SYMBOLS.iter().position(|&x| x == s));
        let seq = field(text, "seq").and_then(|s| s.parse::<u64>().ok());
        let (Some(sym), Some(seq)) = (sym, seq) else {
            if kind == "error" {
                self.errors.push(text.to_string());
            }
            return;
        };
        let channel = match kind {
            "snapshot" => {
                self.snapshots += 1;
                self.book[sym] = Some(seq);
                return;
            }
            "book" => {
                match self.book[sym] {
                    None => self.errors.push(format!("delta before a snapshot: {text}")),
                    Some(last) if seq <= last => {
                        self.stale += 1;
                        return;
                    }
                    Some(last) if seq != last + 1 => {
                        self.gaps += 1;
                        self.errors
                            .push(format!("gap: {} after {last}: {text}", seq));
                    }
                    Some(_) => {}
                }
                self.book[sym] = Some(seq);
                0
            }
            "trade" => {
                if let Some(last) = self.trades[sym] {
                    if seq != last + 1 {
                        self.gaps += 1;
                        self.errors.push(format!("trade gap: {seq} after {last}"));
                    }
                }
                self.trades[sym] = Some(seq);
                1
            }
            _ => return,
        };
        if let Some(record) = self.record.as_mut() {
            record.insert((channel, sym as u8, seq), (at_ns, text.to_string()));
        }
    }
}

/// Connects, subscribes and spawns a reader that feeds the returned state.
async fn open(
    url: &str,
    channels: &[&str],
    counting: &Rc<Cell<bool>>,
    record: bool,
) -> Rc<RefCell<Conn>> {
    let started = mono_ns();
    let (mut ws, _) = loop {
        match tokio_tungstenite::connect_async(url).await {
            Ok(c) => break c,
            Err(e) if Duration::from_nanos(mono_ns() - started) < Duration::from_secs(10) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{url}: {e}"),
        }
    };
    for channel in channels {
        for symbol in SYMBOLS {
            let sub = format!(r#"{{"op":"subscribe","channel":"{channel}","symbol":"{symbol}"}}"#);
            ws.send(Message::Text(sub.into())).await.expect("subscribe");
        }
    }
    let conn = Rc::new(RefCell::new(Conn {
        record: record.then(HashMap::new),
        ..Conn::default()
    }));
    let (state, counting) = (conn.clone(), counting.clone());
    let url = url.to_string();
    tokio::task::spawn_local(async move {
        while let Some(msg) = ws.next().await {
            let at = mono_ns();
            match msg {
                Ok(Message::Text(text)) => state.borrow_mut().on_text(&text, at, counting.get()),
                Ok(Message::Close(frame)) => {
                    state
                        .borrow_mut()
                        .errors
                        .push(format!("{url}: closed by the server: {frame:?}"));
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    state.borrow_mut().errors.push(format!("{url}: {e}"));
                    return;
                }
            }
        }
    });
    conn
}

/// Waits until every connection has a book snapshot for each symbol.
async fn synced(conns: &[Rc<RefCell<Conn>>]) {
    let started = mono_ns();
    while !conns
        .iter()
        .all(|c| c.borrow().book.iter().all(Option::is_some))
    {
        assert!(
            Duration::from_nanos(mono_ns() - started) < Duration::from_secs(15),
            "no snapshots within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn check(conns: &[Rc<RefCell<Conn>>], what: &str) {
    for c in conns {
        let c = c.borrow();
        assert!(
            c.errors.is_empty(),
            "{what}: {:?}",
            &c.errors[..c.errors.len().min(5)]
        );
    }
}

// ----- the three measurements ---------------------------------------------------------------

struct Latency {
    added: Histogram<u64>,
    noise: Histogram<u64>,
    negative: u64,
    deltas_direct: usize,
    missing_at_gateway: usize,
}

/// Measurement 1: three connections (direct, direct, gateway), the venue at `rate`.
fn latency(
    rt: &tokio::runtime::Runtime,
    ctl: &str,
    direct: &str,
    gateway: &str,
    rate: u64,
    seconds: u64,
) -> Latency {
    let local = tokio::task::LocalSet::new();
    let (d1, d2, g) = local.block_on(rt, async {
        let off = Rc::new(Cell::new(false));
        let d1 = open(direct, &["book", "trades"], &off, true).await;
        let d2 = open(direct, &["book", "trades"], &off, true).await;
        let g = open(gateway, &["book", "trades"], &off, true).await;
        synced(&[d1.clone(), d2.clone(), g.clone()]).await;
        control(ctl, &format!("flow {rate}"));
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        control(ctl, "flow 0");
        tokio::time::sleep(Duration::from_millis(700)).await; // drain
        check(&[d1.clone(), d2.clone(), g.clone()], "latency run");
        (d1, d2, g)
    });
    drop(local);
    let take = |c: Rc<RefCell<Conn>>| c.borrow_mut().record.take().unwrap_or_default();
    let (d1, d2, g) = (take(d1), take(d2), take(g));
    let hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    let (mut added, mut noise) = (hist(), hist());
    let mut negative = 0;
    for (key, (at, text)) in &g {
        let (at1, text1) = d1
            .get(key)
            .unwrap_or_else(|| panic!("gateway delivered {text}, never seen directly"));
        assert_eq!(text, text1, "the gateway's delta differs from the venue's");
        let diff = *at as i64 - *at1 as i64;
        if diff < 0 {
            negative += 1;
        }
        added.record(diff.max(1) as u64).expect("record");
    }
    for (key, (at, text)) in &d2 {
        let (at1, text1) = d1.get(key).expect("second direct connection saw more");
        assert_eq!(text, text1);
        noise
            .record((*at as i64 - *at1 as i64).unsigned_abs().max(1))
            .expect("record");
    }
    assert!(!g.is_empty(), "no deltas through the gateway");
    Latency {
        added,
        noise,
        negative,
        deltas_direct: d1.len(),
        missing_at_gateway: d1.keys().filter(|k| !g.contains_key(k)).count(),
    }
}

struct Throughput {
    clients: usize,
    delivered_per_s: f64,
    offered_per_s: f64,
    snapshots: u64,
    stale: u64,
}

/// Measurement 2: `clients` book subscribers on each gateway, the venue at `rate`.
fn throughput(
    rt: &tokio::runtime::Runtime,
    ctl: &str,
    direct: &str,
    gateways: &[String],
    clients: u64,
    rate: u64,
    seconds: u64,
) -> Throughput {
    let local = tokio::task::LocalSet::new();
    let r = local.block_on(rt, async {
        let counting = Rc::new(Cell::new(false));
        let reference = open(direct, &["book"], &counting, false).await;
        let mut conns = Vec::new();
        for _ in 0..clients {
            for gw in gateways {
                conns.push(open(gw, &["book"], &counting, false).await);
            }
        }
        synced(&conns).await;
        synced(std::slice::from_ref(&reference)).await;
        let snapshots_before: u64 = conns.iter().map(|c| c.borrow().snapshots).sum();
        control(ctl, &format!("flow {rate}"));
        tokio::time::sleep(Duration::from_millis(300)).await; // warm-up, not counted
        counting.set(true);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        counting.set(false);
        control(ctl, "flow 0");
        // Everyone catches up to the venue's last delta (by deltas or by a fresh snapshot).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = mono_ns();
        loop {
            let last = reference.borrow().book;
            if conns.iter().all(|c| c.borrow().book == last) {
                break;
            }
            assert!(
                Duration::from_nanos(mono_ns() - started) < Duration::from_secs(10),
                "clients never reached the venue's last sequence {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check(&conns, "throughput run");
        check(std::slice::from_ref(&reference), "throughput reference");
        let sum = |f: fn(&Conn) -> u64| conns.iter().map(|c| f(&c.borrow())).sum::<u64>();
        let offered = reference.borrow().counted;
        Throughput {
            clients: conns.len(),
            delivered_per_s: sum(|c| c.counted) as f64 / seconds as f64,
            offered_per_s: offered as f64 / seconds as f64,
            snapshots: sum(|c| c.snapshots) - snapshots_before,
            stale: sum(|c| c.stale),
        }
    });
    drop(local);
    r
}

struct Cpu {
    events: u64,
    venue_ns: u64,
    nats_ns: u64,
    gateways_ns: u64,
}

/// Measurement 3: the venue's (and nats-server's) CPU over a window at `rate`.
fn cpu(
    rt: &tokio::runtime::Runtime,
    ctl: &str,
    direct: &str,
    pids: (u32, u32, &[u32]),
    rate: u64,
    seconds: u64,
) -> Cpu {
    let local = tokio::task::LocalSet::new();
    let r = local.block_on(rt, async {
        let counting = Rc::new(Cell::new(false));
        let reference = open(direct, &["book", "trades"], &counting, false).await;
        synced(std::slice::from_ref(&reference)).await;
        control(ctl, &format!("flow {rate}"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let gw = |pids: &[u32]| pids.iter().map(|&p| cpu_ns(p)).sum::<u64>();
        let (v0, n0, g0) = (cpu_ns(pids.0), cpu_ns(pids.1), gw(pids.2));
        counting.set(true);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        counting.set(false);
        let (v1, n1, g1) = (cpu_ns(pids.0), cpu_ns(pids.1), gw(pids.2));
        control(ctl, "flow 0");
        tokio::time::sleep(Duration::from_millis(300)).await;
        check(std::slice::from_ref(&reference), "cpu reference");
        let events = reference.borrow().counted;
        drop(reference);
        assert!(events > 0, "no events in the CPU window");
        Cpu {
            events,
            venue_ns: v1 - v0,
            nats_ns: n1 - n0,
            gateways_ns: g1 - g0,
        }
    });
    drop(local);
    r
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// nats-server (`$NATS_SERVER`, else from `PATH`) on loopback `port`, once it accepts.
fn start_nats(port: u16) -> Proc {
    let nats_bin = std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
    let nats = Proc::spawn(
        std::path::Path::new(&nats_bin),
        &[
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ],
        false,
    );
    let started = mono_ns();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Duration::from_nanos(mono_ns() - started) < Duration::from_secs(10),
            "nats-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nats
}

fn main() {
    let smoke = flag("smoke");
    let clients = arg_u64("clients", if smoke { 5 } else { 20 });
    let rate = arg_u64("rate", if smoke { 5_000 } else { 20_000 });
    let latency_rate = arg_u64("latency-rate", if smoke { 2_000 } else { 5_000 });
    let seconds = arg_u64("seconds", if smoke { 1 } else { 4 });
    // The processes' socket transport: io_uring (their default; a gateway's idle wait is then
    // 50 µs) or, with --epoll, epoll (whose waits are whole milliseconds).
    let transport = if flag("epoll") { "epoll" } else { "io_uring" };

    let keel = std::env::current_exe().expect("exe").with_file_name("keel");
    assert!(
        keel.exists(),
        "{} missing: cargo build -p keel-cli --features simulator (same profile) first",
        keel.display()
    );
    let port = free_port();
    let _nats = start_nats(port);
    let nats_url = format!("nats://127.0.0.1:{port}");
    let s = |v: &str| v.to_string();
    let venue = Proc::spawn(
        &keel,
        &[
            s("venue"),
            s("--nats"),
            nats_url.clone(),
            s("--listen"),
            s("127.0.0.1:0"),
            s("--control"),
            s("127.0.0.1:0"),
            s("--md-listen"),
            s("127.0.0.1:0"),
            s("--symbols"),
            SYMBOLS.join(","),
            s("--flow-rate"),
            s("0"),
            s("--transport"),
            s(transport),
        ],
        true,
    );
    let ctl = venue.after("control on ");
    let direct = venue.after("market data on ");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    println!(
        "market data over NATS: nats-server, keel venue and 0-3 keel gateways as processes ({transport}), \
         symbols {}, clients on one tokio thread in this process; {} cores",
        SYMBOLS.join(","),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut gateways: Vec<Proc> = Vec::new();
    let mut cpus = Vec::new();
    let mut throughputs = Vec::new();
    let mut lat = None;
    for n in 0..=3usize {
        if n > 0 {
            gateways.push(Proc::spawn(
                &keel,
                &[
                    s("gateway"),
                    s("--nats"),
                    nats_url.clone(),
                    s("--listen"),
                    s("127.0.0.1:0"),
                    s("--symbols"),
                    SYMBOLS.join(","),
                    s("--transport"),
                    s(transport),
                ],
                true,
            ));
            std::thread::sleep(Duration::from_millis(300));
        }
        let urls: Vec<String> = gateways
            .iter()
            .map(|g| g.after("market data on "))
            .collect();
        let gw_pids: Vec<u32> = gateways.iter().map(Proc::pid).collect();
        cpus.push(cpu(
            &rt,
            &ctl,
            &direct,
            (venue.pid(), _nats.pid(), &gw_pids),
            rate,
            seconds,
        ));
        if n == 1 {
            lat = Some(latency(&rt, &ctl, &direct, &urls[0], latency_rate, seconds));
        }
        if n > 0 {
            throughputs.push(throughput(
                &rt, &ctl, &direct, &urls, clients, rate, seconds,
            ));
        }
    }

    let lat = lat.expect("latency run");
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1_000.0;
    println!();
    println!(
        "1. latency added by the bus hop, venue at {latency_rate} events/s for {seconds} s, per delta (µs)"
    );
    println!(
        "{:<40} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "", "p50", "p99", "p99.9", "max", "p50 x", "deltas"
    );
    let base = us(&lat.noise, 0.5).max(0.001);
    for (name, h) in [
        ("|direct 2 - direct 1| (noise, baseline)", &lat.noise),
        ("gateway - direct 1 (bus hop)", &lat.added),
    ] {
        println!(
            "{name:<40} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.2}x {:>8}",
            us(h, 0.5),
            us(h, 0.99),
            us(h, 0.999),
            h.max() as f64 / 1_000.0,
            us(h, 0.5) / base,
            h.len()
        );
    }
    println!(
        "    every gateway delta seen directly, same bytes; {} of {} direct deltas not delivered by the gateway; {} arrived at the gateway first",
        lat.missing_at_gateway, lat.deltas_direct, lat.negative
    );
    println!();
    println!(
        "2. delivered messages/s, venue at {rate} events/s, {clients} book clients per gateway, {seconds} s"
    );
    println!(
        "{:<12} {:>8} {:>14} {:>14} {:>12} {:>10} {:>8} {:>8}",
        "gateways",
        "clients",
        "delivered/s",
        "venue msgs/s",
        "x 1 gateway",
        "% of all",
        "snaps",
        "stale"
    );
    let one = throughputs
        .first()
        .map_or(1.0, |t| t.delivered_per_s.max(1.0));
    for (i, t) in throughputs.iter().enumerate() {
        println!(
            "{:<12} {:>8} {:>14.0} {:>14.0} {:>11.2}x {:>9.1}% {:>8} {:>8}",
            i + 1,
            t.clients,
            t.delivered_per_s,
            t.offered_per_s,
            t.delivered_per_s / one,
            100.0 * t.delivered_per_s / (t.offered_per_s * t.clients as f64).max(1.0),
            t.snapshots,
            t.stale
        );
        assert!(t.delivered_per_s > 0.0, "nothing delivered");
    }
    println!("    every client gapless (gaps only across a snapshot) and on the venue's last sequence at the end");
    println!();
    println!(
        "3. CPU per published event, venue at {rate} events/s for {seconds} s, gateways without clients (ns/event)"
    );
    println!(
        "{:<12} {:>10} {:>12} {:>12} {:>14} {:>14}",
        "gateways", "events", "venue", "x 0 gw", "nats-server", "gateways (all)"
    );
    let per = |ns: u64, c: &Cpu| ns as f64 / c.events as f64;
    let base = per(cpus[0].venue_ns, &cpus[0]).max(0.001);
    for (n, c) in cpus.iter().enumerate() {
        println!(
            "{:<12} {:>10} {:>12.0} {:>11.2}x {:>14.0} {:>14.0}",
            n,
            c.events,
            per(c.venue_ns, c),
            per(c.venue_ns, c) / base,
            per(c.nats_ns, c),
            per(c.gateways_ns, c)
        );
    }
    println!(
        "bus hop p50 {:.1} µs over {:.1} µs noise; 3 gateways deliver {:.2}x one; venue CPU/event with 3 gateways {:.2}x none",
        us(&lat.added, 0.5),
        us(&lat.noise, 0.5),
        throughputs.last().map_or(0.0, |t| t.delivered_per_s) / one,
        per(cpus[3].venue_ns, &cpus[3]) / base
    );
    drop(gateways);
}
