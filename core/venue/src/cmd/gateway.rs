//! `keel gateway`: a stateless market-data gateway (issue 15; docs/market-data.md, "Scaling
//! out"). It subscribes to the venue's events on a NATS bus and serves the same WebSocket
//! protocol as the venue's own market-data server — the same server code: snapshot + sequenced
//! deltas, conflation, close 4001 for a trades subscriber that falls behind, pings, limits.
//!
//! Its books come from the bus alone: a snapshot per symbol (request/reply to the publisher)
//! at start, after any gap in a symbol's sequence on the bus (a lost or reordered message),
//! and after the bus connection came back; until it has one, a symbol's deltas are dropped
//! and its clients get nothing newer — then a fresh snapshot, never a silent hole. Adding a
//! gateway is one more subscriber, invisible to the publisher.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;

use crate::bus::{BusEvent, Subscriber};
use crate::md_server::{MdConfig, MdServer};
use keel::clock::{Clock, TscClock};
use keel::net::{SocketTransport, TransportKind, WaitMode};

#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// The bus: NATS server URLs, comma-separated (e.g. nats://127.0.0.1:4222).
    #[arg(long)]
    nats: String,
    /// WebSocket market-data address (`ws://ADDR/md`).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Symbols, in the venue's order (its `--symbols`).
    #[arg(long, value_delimiter = ',', default_values_t = ["AAPL".to_string(), "MSFT".into(), "AMZN".into(), "NVDA".into()])]
    symbols: Vec<String>,
    /// WebSocket connections at most.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=i64::from(keel::net::CONNS_MAX)))]
    connections: u32,
    /// Messages queued per connection before its book conflates or its trades close (4001).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    queue: u32,
    /// Seconds between pings (silent for 3 intervals: closed, 4002).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    ping_s: u64,
    /// Ask the bus for a symbol's snapshot again after this long without one, milliseconds.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    snapshot_retry_ms: u64,
    /// Events the bus thread may queue for the loop (more are dropped, counted, and resynced).
    #[arg(long, default_value_t = 1 << 16, value_parser = clap::value_parser!(u32).range(16..=1 << 24))]
    ring: u32,
    /// Socket transport: `io_uring` or `epoll`.
    #[arg(long, default_value_t = TransportKind::IoUring)]
    transport: TransportKind,
    /// Stop after this many seconds (0: run until killed).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=u64::MAX / 1_000_000_000))]
    duration_s: u64,
}

/// Runs `keel gateway`.
pub fn run(args: GatewayArgs) -> ExitCode {
    for s in &args.symbols {
        if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
            keel::warn_line!("keel gateway: --symbols: '{s}' must be 1 to 8 letters or digits");
            return ExitCode::from(64);
        }
    }
    let config = MdConfig {
        listen: args.listen,
        symbols: args.symbols.clone(),
        conns_max: args.connections,
        queue_max: args.queue as usize,
        ping_interval_ns: args.ping_s * 1_000_000_000,
        wait: WaitMode::Blocking,
        ..MdConfig::default()
    };
    struct Serve<'a> {
        args: &'a GatewayArgs,
        config: MdConfig,
    }
    impl keel::net::OnTransport for Serve<'_> {
        type Output = ExitCode;
        fn run<T: SocketTransport>(&mut self) -> Result<ExitCode, keel::net::NetError> {
            Ok(serve(MdServer::<T>::open(self.config.clone())?, self.args))
        }
    }
    let mut body = Serve {
        args: &args,
        config,
    };
    keel::net::on_transport(args.transport, "keel gateway", &mut body).unwrap_or_else(|e| {
        keel::warn_line!("keel gateway: {e}");
        ExitCode::from(1)
    })
}

/// What the gateway counted.
#[derive(Debug, Default)]
struct GatewayStats {
    deltas: u64,
    trades: u64,
    snapshots: u64,
    gaps: u64,
    duplicates: u64,
    resyncs: u64,
    overflows: u64,
    stale: u64,
    wrong_symbol: u64,
}

fn serve<T: SocketTransport>(mut md: MdServer<T>, args: &GatewayArgs) -> ExitCode {
    const MS: u64 = 1_000_000;
    let (bus, mut events, mut requests) =
        match Subscriber::start(&args.nats, args.symbols.clone(), args.ring as usize) {
            Ok(parts) => parts,
            Err(e) => {
                keel::warn_line!("keel gateway: bus: {e}");
                return ExitCode::from(1);
            }
        };
    keel::say_line!(
        "keel gateway: market data on ws://{}/md, bus {}, symbols {}, transport {}",
        md.local_addr(),
        args.nats,
        args.symbols.join(","),
        T::KIND
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let clock = TscClock::new();
    let n = args.symbols.len();
    // Per symbol: whether the book follows the bus, and when a snapshot was last asked for.
    let mut synced = vec![false; n];
    // Per symbol: deltas that arrived while it waited for its snapshot (bounded; the snapshot
    // may be older than some of them: those above it are applied after it, in order).
    let pending_max = 4_096;
    let mut pending: Vec<Vec<(u64, keel::proto::md::BookSide, i64, u64)>> =
        (0..n).map(|_| Vec::with_capacity(pending_max)).collect();
    let mut asked_ns: Vec<Option<u64>> = vec![None; n];
    // Per symbol: deltas in a row at or below the book's sequence. A snapshot from ahead of
    // the stream (a forged or corrupt sequence on the bus) would otherwise freeze the book
    // while it looks in sync: past `pending_max` in a row the book resyncs.
    let mut duplicates_in_row = vec![0usize; n];
    let retry_ns = args.snapshot_retry_ms * MS;
    let mut stats = GatewayStats::default();
    let end_ns = (args.duration_s > 0).then(|| clock.now_ns() + args.duration_s * 1_000_000_000);
    let ask =
        |requests: &mut rtrb::Producer<u16>, asked: &mut Option<u64>, sym: usize, now: u64| {
            if asked.is_none_or(|t| now >= t + retry_ns) && requests.push(sym as u16).is_ok() {
                *asked = Some(now);
            }
        };
    loop {
        let now = clock.now_ns();
        if end_ns.is_some_and(|end| now >= end) {
            break;
        }
        // At most a ring's worth per pass, so the clients are served between bursts.
        let mut popped = 0;
        for _ in 0..4_096 {
            let Ok(event) = events.pop() else { break };
            popped += 1;
            match event {
                BusEvent::Delta {
                    symbol,
                    seq,
                    side,
                    price,
                    qty,
                } => {
                    let sym = usize::from(symbol);
                    if !synced[sym] {
                        // Waiting for its snapshot: kept, unless too many wait (then dropped:
                        // the snapshot asked for next will be newer than all of them).
                        if pending[sym].len() < pending_max {
                            pending[sym].push((seq, side, price, qty));
                        } else {
                            pending[sym].clear();
                            stats.overflows += 1;
                        }
                        continue;
                    }
                    match md.apply_delta(symbol, seq, side, price, qty) {
                        Ok(()) => {
                            stats.deltas += 1;
                            duplicates_in_row[sym] = 0;
                        }
                        Err(at) if seq <= at => {
                            stats.duplicates += 1;
                            duplicates_in_row[sym] += 1;
                            if duplicates_in_row[sym] > pending_max {
                                duplicates_in_row[sym] = 0;
                                stats.stale += 1;
                                stats.resyncs += 1;
                                synced[sym] = false;
                                asked_ns[sym] = None;
                                ask(&mut requests, &mut asked_ns[sym], sym, now);
                            }
                        }
                        Err(_) => {
                            // A gap on the bus: stop passing deltas on, ask for a snapshot.
                            stats.gaps += 1;
                            stats.resyncs += 1;
                            synced[sym] = false;
                            asked_ns[sym] = None;
                            ask(&mut requests, &mut asked_ns[sym], sym, now);
                        }
                    }
                }
                BusEvent::Trade {
                    symbol,
                    seq,
                    price,
                    qty,
                    buy,
                } => {
                    stats.trades += 1;
                    md.apply_trade(now, symbol, seq, price, qty, buy);
                }
                BusEvent::Snapshot {
                    symbol,
                    seq,
                    trade_seq,
                    bids,
                    asks,
                } => {
                    let sym = usize::from(symbol);
                    let at = md.book(symbol).seq;
                    // An older snapshot than the book already follows is of no use.
                    if synced[sym] && seq <= at {
                        continue;
                    }
                    stats.snapshots += 1;
                    duplicates_in_row[sym] = 0;
                    md.load_snapshot(symbol, seq, trade_seq, &bids, &asks);
                    synced[sym] = true;
                    asked_ns[sym] = None;
                    // The deltas that waited: those at or below the snapshot are in it; the
                    // rest must follow on from it.
                    let mut waiting = std::mem::take(&mut pending[sym]);
                    waiting.sort_unstable_by_key(|d| d.0);
                    for &(dseq, dside, dprice, dqty) in waiting.iter().filter(|d| d.0 > seq) {
                        if md.apply_delta(symbol, dseq, dside, dprice, dqty).is_err() {
                            stats.gaps += 1;
                            stats.resyncs += 1;
                            synced[sym] = false;
                            ask(&mut requests, &mut asked_ns[sym], sym, now);
                            break;
                        }
                        stats.deltas += 1;
                    }
                    waiting.clear();
                    pending[sym] = waiting;
                }
                BusEvent::WrongSymbol { symbol } => {
                    // Refused by the bus thread: the book may have missed what that message
                    // stood for. A following book resyncs at once; one already waiting asks
                    // again at its retry pace (a responder that keeps answering with another
                    // symbol is never hammered).
                    let sym = usize::from(symbol);
                    stats.wrong_symbol += 1;
                    if synced[sym] {
                        stats.resyncs += 1;
                        synced[sym] = false;
                        asked_ns[sym] = None;
                    }
                    ask(&mut requests, &mut asked_ns[sym], sym, now);
                }
                BusEvent::Reconnected => {
                    // Messages may have been missed while the bus was away: every book asks
                    // for a snapshot (loaded only if newer than what it has).
                    stats.resyncs += n as u64;
                    for (sym, asked) in asked_ns.iter_mut().enumerate() {
                        *asked = None;
                        ask(&mut requests, asked, sym, now);
                    }
                }
            }
        }
        for (sym, asked) in asked_ns.iter_mut().enumerate() {
            if !synced[sym] {
                ask(&mut requests, asked, sym, now);
            }
        }
        // The bus thread cannot wake the reactor: while events flow the loop does not wait; when
        // idle it waits at most 50 µs (io_uring keeps that; epoll rounds it up to 1 ms).
        let wait_ns = if popped > 0 { 0 } else { 50_000 };
        if let Err(e) = md.step(now, wait_ns) {
            keel::warn_line!("keel gateway: {e}");
            return ExitCode::from(1);
        }
    }
    let c = &bus.counters;
    use std::sync::atomic::Ordering::Relaxed;
    keel::say_line!(
        "keel gateway: done: {} deltas, {} trades, {} snapshots, {} gaps, {} duplicates, {} resyncs, {} overflows, {} stale, {} wrong-symbol; bus: {} messages, {} dropped, {} malformed, {} wrong-symbol, {} connects; {} clients served",
        stats.deltas,
        stats.trades,
        stats.snapshots,
        stats.gaps,
        stats.duplicates,
        stats.resyncs,
        stats.overflows,
        stats.stale,
        stats.wrong_symbol,
        c.messages.load(Relaxed),
        c.dropped.load(Relaxed),
        c.malformed.load(Relaxed),
        c.wrong_symbol.load(Relaxed),
        c.connects.load(Relaxed),
        md.stats().upgraded
    );
    ExitCode::SUCCESS
}
