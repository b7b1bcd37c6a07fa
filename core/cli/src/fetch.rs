//! `keel fetch`: the start-up burst — a depth snapshot and kline history for many symbols at
//! once from a venue's REST API, shaped by the gate ([`keel::http::gate`]) so that the venue
//! never has to say 429. With `--no-limiter` the same requests go out as fast as the
//! connections allow and 429/418 answers change nothing: what a client without the gate does.
//!
//! Every answer is checked (a depth with its update id and both sides, as many candles as
//! asked); the summary gives the gate's three tuning figures (acquire wait mean and p99,
//! acquire timeouts, the share of 429s) and the 418s. Exit 0 when every request brought its
//! data, 1 when any did not, 2 when the fetch could not start.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;

use keel::clock::{Clock, TscClock};
use keel::http::gate::RestGateConfig;
use keel::http::session::{RestEvent, RestSession, RestSessionConfig};
use keel::http::Method;
use keel::net::{NetEvent, ReactorConfig, SocketTransport, Transport, TransportKind, WaitMode};

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The venue's REST API, `host:port` (`keel venue --rest-listen`).
    #[arg(long)]
    rest: SocketAddr,
    /// Symbols, comma-separated (default: every symbol the venue lists in its exchange
    /// information).
    #[arg(long, value_delimiter = ',')]
    symbols: Vec<String>,
    /// Levels per side of each depth snapshot (up to 100 weigh 2 at the venue, more 10).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    depth: u32,
    /// Candles of kline history per symbol (0: none).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    klines: u32,
    /// The venue's limit per client and second (weight).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    second_weight: u32,
    /// The venue's limit per client and minute (weight).
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u32).range(1..))]
    minute_weight: u32,
    /// How long a request may wait at the gate for its weight, seconds.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    acquire_timeout_s: u64,
    /// Connections kept to the venue (requests in flight at once).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    connections: u32,
    /// Send as `X-Api-Key` (the venue counts weight per key).
    #[arg(long)]
    api_key: Option<String>,
    /// No gate: requests go out as fast as the connections allow and 429/418 answers do not
    /// slow anything down (to show what the gate prevents).
    #[arg(long)]
    no_limiter: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout_s: u64,
    /// Socket transport: `io_uring` or `epoll`.
    #[arg(long, default_value_t = TransportKind::IoUring)]
    transport: TransportKind,
    /// The summary as one JSON object.
    #[arg(long)]
    json: bool,
}

/// What a fetch brought.
#[derive(Debug, Default)]
struct Tally {
    ok: u64,
    failed: u64,
    bad_data: u64,
    levels: u64,
    candles: u64,
    bytes: u64,
    statuses: std::collections::BTreeMap<u16, u64>,
    first_error: Option<String>,
}

/// Runs `keel fetch`.
pub fn run(args: FetchArgs) -> ExitCode {
    let config = ReactorConfig {
        conns_max: 72,
        wait: WaitMode::Blocking,
        ..ReactorConfig::default()
    };
    struct Fetch<'a> {
        args: &'a FetchArgs,
        config: ReactorConfig,
    }
    impl keel::net::OnTransport for Fetch<'_> {
        type Output = Result<ExitCode, String>;
        fn run<T: SocketTransport>(&mut self) -> Result<Self::Output, keel::net::NetError> {
            Ok(fetch(T::open(self.config)?, self.args))
        }
    }
    let mut body = Fetch {
        args: &args,
        config,
    };
    let result = keel::net::on_transport(args.transport, "keel fetch", &mut body)
        .unwrap_or_else(|e| Err(e.to_string()));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("keel fetch: {e}");
            ExitCode::from(2)
        }
    }
}

/// Token of the exchange-information request; the others are `symbol * 2 + kind`.
const INFO: u64 = u64::MAX;

fn fetch<T: SocketTransport>(mut t: T, args: &FetchArgs) -> Result<ExitCode, String> {
    let clock = TscClock::new();
    let start = clock.now_ns();
    let config = session_config(args);
    let mut session = RestSession::new(config, start).map_err(|e| e.to_string())?;
    let mut symbols = args.symbols.clone();
    let mut tally = Tally::default();
    let deadline = start.saturating_add(args.timeout_s * 1_000_000_000);
    let mut events: Vec<NetEvent> = Vec::with_capacity(256);
    if symbols.is_empty() {
        let mut info = None;
        let mut asked = false;
        let done = drive(
            &mut t,
            &mut session,
            &clock,
            deadline,
            &mut events,
            &mut |session, now| {
                if !asked {
                    asked = true;
                    let _ = session.submit(now, INFO, Method::Get, "/api/v3/exchangeInfo", None);
                }
            },
            &mut |e| match e {
                RestEvent::Done {
                    status: 200, body, ..
                } => info = Some(symbols_of(body)),
                RestEvent::Done { status, .. } => info = Some(Err(format!("HTTP {status}"))),
                RestEvent::Failed { error, .. } => info = Some(Err(error.to_string())),
            },
        )?;
        if !done {
            return Err("exchange information: no answer before --timeout-s".into());
        }
        symbols = info
            .unwrap_or_else(|| Err("no answer".into()))
            .map_err(|e| format!("exchange information: {e}"))?;
    }
    // Every request, in order: a symbol's depth (token 2i), then its candles (2i + 1). The
    // symbol is percent-encoded: a name from the venue can add no parameter, path or fragment.
    let mut requests: Vec<(u64, String, Option<u32>)> = Vec::with_capacity(symbols.len() * 2);
    let depth_weight = if args.depth > 100 { 10 } else { 2 };
    for (i, s) in symbols.iter().enumerate() {
        let mut symbol = String::with_capacity(3 * s.len());
        keel::http::push_query_value(&mut symbol, s);
        let depth = format!("/api/v3/depth?symbol={symbol}&limit={}", args.depth);
        requests.push((i as u64 * 2, depth, Some(depth_weight)));
        if args.klines > 0 {
            let klines = format!(
                "/api/v3/klines?symbol={symbol}&interval=1m&limit={}",
                args.klines
            );
            requests.push((i as u64 * 2 + 1, klines, None));
        }
    }
    let expected = requests.len() as u64;
    let klines = u64::from(args.klines);
    let name = |token: u64| -> String { shown(&symbols[(token / 2) as usize]) };
    let mut next = 0;
    let (mut refused, mut refusal) = (0u64, None::<String>);
    let done = drive(
        &mut t,
        &mut session,
        &clock,
        deadline,
        &mut events,
        &mut |session, now| {
            while next < requests.len() && session.room() > 0 {
                let (token, target, weight) = &requests[next];
                next += 1;
                if let Err(e) = session.submit(now, *token, Method::Get, target, *weight) {
                    refused += 1;
                    refusal.get_or_insert_with(|| format!("{}: {e}", name(*token)));
                }
            }
        },
        &mut |e| match e {
            RestEvent::Done {
                token,
                status,
                body,
                ..
            } => {
                *tally.statuses.entry(status).or_default() += 1;
                tally.bytes += body.len() as u64;
                let checked = if status != 200 {
                    Err(format!("HTTP {status}"))
                } else if token % 2 == 0 {
                    depth_levels(body)
                } else {
                    candles(body, klines)
                };
                match checked {
                    Ok(n) if token % 2 == 0 => {
                        tally.ok += 1;
                        tally.levels += n;
                    }
                    Ok(n) => {
                        tally.ok += 1;
                        tally.candles += n;
                    }
                    Err(e) => {
                        tally.bad_data += 1;
                        tally
                            .first_error
                            .get_or_insert_with(|| format!("{}: {e}", name(token)));
                    }
                }
            }
            RestEvent::Failed { token, error } => {
                tally.failed += 1;
                tally
                    .first_error
                    .get_or_insert_with(|| format!("{}: {error}", name(token)));
            }
        },
    )?;
    tally.failed += refused;
    if tally.first_error.is_none() {
        tally.first_error = refusal;
    }
    if !done {
        let outstanding = session.outstanding() + (requests.len() - next);
        tally.first_error = Some(format!(
            "gave up at --timeout-s with {outstanding} requests not done{}",
            tally
                .first_error
                .as_deref()
                .map(|e| format!(" (first error: {e})"))
                .unwrap_or_default()
        ));
    }
    let elapsed_ns = clock.now_ns().saturating_sub(start);
    let g = session.gate_stats();
    let s = session.stats();
    let wait_mean_ms = if g.granted == 0 {
        0.0
    } else {
        g.wait_sum_ns as f64 / g.granted as f64 / 1e6
    };
    let wait_p99_ms = g.wait.quantile(0.99) as f64 / 1e6;
    let answered: u64 = tally.statuses.values().sum::<u64>() + g.throttled_429 + g.banned_418;
    let share_429 = if answered == 0 {
        0.0
    } else {
        g.throttled_429 as f64 / answered as f64
    };
    if args.json {
        let summary = serde_json::json!({
            "symbols": symbols.len(),
            "requests": expected,
            "ok": tally.ok,
            "failed": tally.failed,
            "bad_data": tally.bad_data,
            "levels": tally.levels,
            "candles": tally.candles,
            "bytes": tally.bytes,
            "sent": s.sent,
            "retries": s.retried,
            "status_429": g.throttled_429,
            "status_418": g.banned_418,
            "share_429": share_429,
            "acquire_timeouts": g.timed_out,
            "wait_mean_ms": wait_mean_ms,
            "wait_p99_ms": wait_p99_ms,
            "elapsed_ms": elapsed_ns / 1_000_000,
            "limiter": !args.no_limiter,
            "gave_up": !done,
            "first_error": tally.first_error,
        });
        println!("{summary}");
    } else {
        println!(
            "keel fetch: {} symbols, {}/{} requests brought their data ({} levels, {} candles, {} bytes) in {} ms",
            symbols.len(),
            tally.ok,
            expected,
            tally.levels,
            tally.candles,
            tally.bytes,
            elapsed_ns / 1_000_000
        );
        println!(
            "  gate: {}; sent {} (retries {}), acquire wait mean {wait_mean_ms:.1} ms p99 {wait_p99_ms:.1} ms, acquire timeouts {}, 429 {} ({:.1}%), 418 {}",
            if args.no_limiter { "off" } else { "on" },
            s.sent,
            s.retried,
            g.timed_out,
            g.throttled_429,
            share_429 * 100.0,
            g.banned_418
        );
        if let Some(e) = &tally.first_error {
            println!("  first error: {e}");
        }
    }
    Ok(if tally.ok == expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The REST session `keel fetch` runs: the venue's weight limits in the gate (or, with
/// `--no-limiter`, a gate that never holds a request back and retries at once), the venue's
/// endpoint weights, and its used-weight headers as feedback.
fn session_config(args: &FetchArgs) -> RestSessionConfig {
    let mut gate = if args.no_limiter {
        // One bucket of a million weight a second: nothing a loopback burst reaches.
        let mut g = RestGateConfig::for_venue_limits(1_000_000, 1_000_000, 10);
        g.limiter.windows[1] = None;
        g.feedback = false;
        g
    } else {
        RestGateConfig::for_venue_limits(args.second_weight, args.minute_weight, 10)
    };
    gate.endpoints = vec![
        ("/api/v3/ticker".into(), 1),
        ("/api/v3/depth".into(), 2),
        ("/api/v3/klines".into(), 5),
        ("/api/v3/exchangeInfo".into(), 10),
    ];
    gate.acquire_timeout_ns = args.acquire_timeout_s * 1_000_000_000;
    if args.no_limiter {
        // Without the gate a refused request is sent again at once.
        gate.retry.base_ns = 1_000_000;
        gate.retry.cap_ns = 1_000_000;
    }
    let mut config = RestSessionConfig::new(args.rest, gate);
    config.connections = args.connections as usize;
    // Requests are submitted as slots free up: any number of symbols, bounded memory.
    config.requests_max = 1_024;
    config.api_key = args.api_key.clone();
    config.used_weight_headers = if args.no_limiter {
        Vec::new()
    } else {
        vec![
            (0, "X-Used-Weight-1s".into()),
            (1, "X-Used-Weight-1m".into()),
        ]
    };
    config
}

/// Runs the loop until nothing is left (`Ok(true)`) or the deadline passes (`Ok(false)`);
/// `feed` submits requests as the session has room.
fn drive<T: Transport>(
    t: &mut T,
    session: &mut RestSession,
    clock: &TscClock,
    deadline: u64,
    events: &mut Vec<NetEvent>,
    feed: &mut impl FnMut(&mut RestSession, u64),
    on: &mut impl FnMut(RestEvent<'_>),
) -> Result<bool, String> {
    loop {
        let now = clock.now_ns();
        feed(session, now);
        session.poll(now, t, &mut *on);
        feed(session, now);
        if session.outstanding() == 0 {
            return Ok(true);
        }
        if now >= deadline {
            return Ok(false);
        }
        events.clear();
        t.poll(now, 1_000_000, events).map_err(|e| e.to_string())?;
        let now = clock.now_ns();
        for e in events.iter() {
            session.on_event(now, t, e, &mut *on);
        }
        t.flush().map_err(|e| e.to_string())?;
    }
}

/// A name from the venue as shown in a message: at most 64 characters, escaped.
fn shown(name: &str) -> String {
    let cut: String = name.chars().take(64).collect();
    let mut out = cut.escape_debug().to_string();
    if name.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// The symbols an exchange-information answer lists.
fn symbols_of(body: &[u8]) -> Result<Vec<String>, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let list = v["symbols"].as_array().ok_or("no symbols list")?;
    list.iter()
        .map(|s| {
            s["symbol"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| "a symbol without a name".to_string())
        })
        .collect()
}

/// A depth answer's levels (both sides), checked: an update id, two lists of
/// `[price, quantity]` strings.
fn depth_levels(body: &[u8]) -> Result<u64, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    v["lastUpdateId"].as_u64().ok_or("no lastUpdateId")?;
    let mut n = 0;
    for side in ["bids", "asks"] {
        let levels = v[side].as_array().ok_or_else(|| format!("no {side}"))?;
        for l in levels {
            let ok = l.as_array().is_some_and(|pq| {
                pq.len() == 2
                    && pq[0]
                        .as_str()
                        .and_then(keel::feed::handler::parse_price)
                        .is_some()
                    && pq[1]
                        .as_str()
                        .and_then(keel::feed::handler::parse_qty)
                        .is_some()
            });
            if !ok {
                return Err(format!("a {side} level that is not [price, quantity]: {l}"));
            }
            n += 1;
        }
    }
    Ok(n)
}

/// A klines answer's candles, checked: as many as asked, each with six fields.
fn candles(body: &[u8], expected: u64) -> Result<u64, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let list = v.as_array().ok_or("not a list of candles")?;
    if list.len() as u64 != expected
        || !list
            .iter()
            .all(|c| c.as_array().is_some_and(|c| c.len() >= 6))
    {
        return Err(format!("{} candles, {expected} asked", list.len()));
    }
    Ok(expected)
}
