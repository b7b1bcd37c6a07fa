//! Market-data fan-out: one publisher, many WebSocket subscribers on loopback, some of them
//! stalled (connected, subscribed, never reading). Delivery latency of the healthy subscribers
//! (publish → receive, from the publish time carried in each message), and the server's memory
//! and CPU, for:
//!
//! - keel's `MdServer` (serialize once into a shared log, bounded queue per connection);
//! - keel with serialization per connection (the baseline without a shared log);
//! - a tokio-tungstenite broadcast server (one `tokio::sync::broadcast` channel of capacity
//!   1,024 — the same bound as keel's queue — serialized once, a task per connection; a
//!   lagging receiver skips what it missed).
//!
//! Each server runs in its own process (this binary with `--serve=...`), on a current-thread
//! runtime or keel's single loop; the clients run in this process on one tokio thread.
//!
//! `fanout [--smoke] [--subscribers=1000] [--rate=100] [--seconds=4]`

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use keel_bench::{arg_u64, flag};
use tokio_tungstenite::tungstenite::Message;

use keel_bench::mono_ns;

fn proc_status(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of this process.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // Fields after the command: state is non-numeric (skipped), utime and stime are 14 and 15
    // overall, i.e. 11 and 12 among the numeric fields that follow.
    let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    ticks as f64 / 100.0
}

fn trade_json(seq: u64, ts: u64) -> String {
    format!(
        r#"{{"type":"trade","symbol":"AAPL","seq":{seq},"price":{ts},"qty":100,"aggressor":"buy"}}"#
    )
}

// ----- servers (child processes) ------------------------------------------------------------

fn serve_keel(subscribers: u32, rate: u64, per_connection: bool) {
    use keel_venue::md_server::{MdConfig, MdServer};
    let mut md = MdServer::new(MdConfig {
        conns_max: subscribers + 16,
        queue_max: 1_024,
        send_buffer_bytes: 16 * 1024,
        recv_buffer_bytes: 4 * 1024,
        socket_send_buffer_bytes: 16 * 1024,
        serialize_per_connection: per_connection,
        ping_interval_ns: 60_000_000_000,
        ..MdConfig::default()
    })
    .expect("md server");
    println!("ready {}", md.local_addr());
    let _ = std::io::stdout().flush();
    let control = stdin_lines();
    let clock = keel::clock::TscClock::new();
    use keel::clock::Clock;
    let interval = 1_000_000_000 / rate.max(1);
    let mut next = u64::MAX; // not publishing until "go"
    let mut started = cpu_seconds();
    loop {
        let now = clock.now_ns();
        match control.try_recv().as_deref() {
            Ok("go") => {
                next = now;
                started = cpu_seconds();
            }
            Ok(_) => break,
            Err(_) => {}
        }
        while now >= next {
            md.trade(now, 0, mono_ns() as i64, 100, true);
            next += interval;
        }
        let wait = next.saturating_sub(now).min(1_000_000);
        md.step(now, wait).expect("md step");
    }
    report(started, &format!("{:?}", md.stats()));
}

fn serve_tokio(rate: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("ready {}", listener.local_addr().expect("addr"));
        let _ = std::io::stdout().flush();
        let (tx, _) =
            tokio::sync::broadcast::channel::<tokio_tungstenite::tungstenite::Utf8Bytes>(1_024);
        let publisher = tx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut seq = 0;
            loop {
                tick.tick().await;
                seq += 1;
                let msg: tokio_tungstenite::tungstenite::Utf8Bytes =
                    trade_json(seq, mono_ns()).into();
                let _ = publisher.send(msg);
            }
        });
        let accept = async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let mut rx = tx.subscribe();
                tokio::spawn(async move {
                    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
                        return;
                    };
                    let (mut sink, mut source) = ws.split();
                    // Read (and drop) what the client sends, so pings and closes are handled.
                    tokio::spawn(async move { while let Some(Ok(_)) = source.next().await {} });
                    loop {
                        match rx.recv().await {
                            Ok(msg) => {
                                if sink.send(Message::Text(msg)).await.is_err() {
                                    return;
                                }
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => return,
                        }
                    }
                });
            }
        };
        let control = stdin_lines();
        let mut started = cpu_seconds();
        let wait_stop = async {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                match control.try_recv().as_deref() {
                    Ok("go") => started = cpu_seconds(),
                    Ok(_) => return,
                    Err(_) => {}
                }
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = wait_stop => {}
        }
        report(started, "");
    });
}

/// The lines of stdin ("go", then "stop"), as they come.
fn stdin_lines() -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if tx.send(line.trim().to_string()).is_err() {
                return;
            }
        }
    });
    rx
}

fn report(cpu_started: f64, extra: &str) {
    println!(
        "memory {} {} cpu {:.2} {extra}",
        proc_status("VmHWM:"),
        proc_status("VmRSS:"),
        cpu_seconds() - cpu_started
    );
    let _ = std::io::stdout().flush();
}

// ----- the clients (this process) -----------------------------------------------------------

struct Run {
    latency: Histogram<u64>,
    received: u64,
    server_hwm_kb: u64,
    server_cpu_s: f64,
    server_line: String,
}

fn run(kind: &str, subscribers: u32, stalled: u32, rate: u64, seconds: u64) -> Run {
    let exe = std::env::current_exe().expect("exe");
    let mut child = Command::new(exe)
        .args([
            format!("--serve={kind}"),
            format!("--subscribers={subscribers}"),
            format!("--rate={rate}"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("server process");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    let addr = line
        .trim()
        .strip_prefix("ready ")
        .expect("ready")
        .to_string();
    let mut stdin = child.stdin.take().expect("stdin");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let hist = Rc::new(RefCell::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds"),
    ));
    let received = Rc::new(RefCell::new(0u64));
    let measuring = Rc::new(RefCell::new(false));
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let url = format!("ws://{addr}/md");
        let mut raw_held = Vec::new();
        for i in 0..subscribers {
            // Most subscribers only drain their socket (a cheap consumer, so that the client
            // process is not the bottleneck); every 20th is a probe that decodes and measures.
            let probe = i % 20 == 10;
            if !probe {
                let stalled_one = i < stalled;
                let mut stream = loop {
                    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
                    if stalled_one {
                        // A small receive window: a stalled reader backs up into the server
                        // within the run instead of into this kernel's buffers.
                        let _ = socket.set_recv_buffer_size(4 * 1024);
                    }
                    match socket.connect(addr.parse().expect("address")).await {
                        Ok(s) => break s,
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                };
                let _ = stream.set_nodelay(true);
                let (req, key) = keel::proto::ws::request(&addr, "/md", (i as u128).to_le_bytes());
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                stream.write_all(req.as_bytes()).await.expect("handshake");
                let mut buf = vec![0u8; 64 * 1024];
                let mut len = 0;
                loop {
                    len += stream.read(&mut buf[len..]).await.expect("handshake reply");
                    if keel::proto::ws::parse_response(&buf[..len], &key)
                        .expect("accepted")
                        .is_some()
                    {
                        break;
                    }
                }
                let sub = r#"{"op":"subscribe","channel":"trades","symbol":"AAPL"}"#;
                let mut frame = [0u8; 128];
                let n = keel::proto::ws::encode_frame(
                    &mut frame,
                    true,
                    keel::proto::ws::Opcode::Text,
                    sub.as_bytes(),
                    Some([1, 2, 3, 4]),
                );
                stream.write_all(&frame[..n]).await.expect("subscribe");
                if stalled_one {
                    raw_held.push(stream); // never read again
                    continue;
                }
                tokio::task::spawn_local(async move {
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                    }
                });
                continue;
            }
            let (mut ws, _) = loop {
                match tokio_tungstenite::connect_async(url.as_str()).await {
                    Ok(c) => break c,
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            };
            let sub = r#"{"op":"subscribe","channel":"trades","symbol":"AAPL"}"#;
            ws.send(Message::Text(sub.into())).await.expect("subscribe");
            let (hist, received, measuring) = (hist.clone(), received.clone(), measuring.clone());
            tokio::task::spawn_local(async move {
                while let Some(Ok(msg)) = ws.next().await {
                    let Message::Text(text) = msg else { continue };
                    let Some(at) = text.find("\"price\":") else {
                        continue;
                    };
                    let digits: String = text[at + 8..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    let Ok(ts) = digits.parse::<u64>() else {
                        continue;
                    };
                    if *measuring.borrow() {
                        let _ = hist
                            .borrow_mut()
                            .record(mono_ns().saturating_sub(ts).max(1));
                        *received.borrow_mut() += 1;
                    }
                }
            });
        }
        writeln!(stdin, "go").expect("go");
        tokio::time::sleep(Duration::from_millis(500)).await; // warm-up, not measured
        *measuring.borrow_mut() = true;
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        *measuring.borrow_mut() = false;
        drop(raw_held);
    });
    writeln!(stdin, "stop").expect("stop");
    let mut report = String::new();
    out.read_line(&mut report).expect("report");
    let _ = child.kill();
    let _ = child.wait();
    let words: Vec<&str> = report.split_whitespace().collect();
    let latency = hist.borrow().clone();
    let received = *received.borrow();
    let _ = subscribers;
    Run {
        latency,
        received,
        server_hwm_kb: words.get(1).and_then(|v| v.parse().ok()).unwrap_or(0),
        server_cpu_s: words.get(4).and_then(|v| v.parse().ok()).unwrap_or(0.0),
        server_line: words.get(5..).map(|w| w.join(" ")).unwrap_or_default(),
    }
}

fn main() {
    let serve = std::env::args().find_map(|a| a.strip_prefix("--serve=").map(str::to_string));
    let subscribers = arg_u64("subscribers", if flag("smoke") { 50 } else { 1_000 }) as u32;
    let rate = arg_u64("rate", 100);
    if let Some(kind) = serve {
        match kind.as_str() {
            "keel" => serve_keel(subscribers, rate, false),
            "keel-per-connection" => serve_keel(subscribers, rate, true),
            "tokio" => serve_tokio(rate),
            other => panic!("unknown server {other}"),
        }
        return;
    }
    let seconds = arg_u64("seconds", if flag("smoke") { 1 } else { 4 });
    let stalled = (subscribers / 100).max(1);
    println!(
        "fan-out: {subscribers} subscribers ({stalled} stalled in the stalled runs; every 20th a probe that decodes and times, the rest drain their sockets), {rate} trades/s, {seconds} s measured; latency publish -> probe (µs); server peak RSS and CPU"
    );
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>10}",
        "", "p50", "p99", "p99.9", "max", "probed", "RSS MB", "CPU s"
    );
    let mut p99 = std::collections::BTreeMap::new();
    for (kind, name) in [
        ("keel", "keel (serialize once)"),
        ("keel-per-connection", "keel, serialize per connection"),
        ("tokio", "tokio-tungstenite broadcast"),
    ] {
        for stalled_now in [0, stalled] {
            let r = run(kind, subscribers, stalled_now, rate, seconds);
            let us = |q: f64| r.latency.value_at_quantile(q) as f64 / 1_000.0;
            let label = format!(
                "{name}, {}",
                if stalled_now == 0 {
                    "none stalled"
                } else {
                    "1% stalled"
                }
            );
            println!(
                "{label:<44} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11} {:>9.1} {:>10.2}",
                us(0.5),
                us(0.99),
                us(0.999),
                r.latency.max() as f64 / 1_000.0,
                r.received,
                r.server_hwm_kb as f64 / 1_024.0,
                r.server_cpu_s
            );
            if !r.server_line.is_empty() && kind == "keel" && stalled_now > 0 {
                println!("    keel server: {}", r.server_line);
            }
            assert!(r.received > 0, "{label}: nothing delivered");
            p99.insert((kind, stalled_now > 0), us(0.99));
        }
    }
    let ratio = |a: (&str, bool), b: (&str, bool)| p99[&a] / p99[&b].max(0.001);
    println!(
        "keel p99 with 1% stalled / none stalled: {:.2}x (target <= 1.5x)",
        ratio(("keel", true), ("keel", false))
    );
    println!(
        "tokio-tungstenite / keel p99, 1% stalled: {:.2}x",
        ratio(("tokio", true), ("keel", true))
    );
    println!(
        "per-connection / once p99, 1% stalled: {:.2}x",
        ratio(("keel-per-connection", true), ("keel", true))
    );
}
