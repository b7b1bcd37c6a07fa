//! `keel venue`: the simulated exchange as a standalone process.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::exchange::{ExchangeConfig, PRICE_BAND_PCT_MAX, PRICE_MAX_DEFAULT};
use crate::flow::{FlowConfig, EVENTS_PER_SEC_MAX};
use crate::server::{Faults, VenueConfig, VenueServer, FAULT_DELAY_MAX_MS, LOGIN_TIMEOUT_MAX_MS};
use keel::clock::{Clock, TscClock};
use keel::net::{NetError, SocketTransport, TransportKind, WaitMode};
use keel::proto::ouch::Dialect;

/// Order-entry slots of `keel venue` (the default of [`VenueConfig::sessions_max`]).
const SESSIONS_MAX: u32 = 256;

/// Range of every fault delay flag, milliseconds.
fn delay_ms() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(0..=FAULT_DELAY_MAX_MS)
}

/// Wire layout.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum DialectArg {
    /// The published OUCH 5.0 layout (8-byte Symbol).
    Spec,
    /// The layout of the ouch-connect package (9-byte Symbol, OrigUserRefNum in Order Canceled).
    OuchConnect,
}

/// Settings of `keel venue`. Every fault knob can also be changed while running: connect to
/// the control port and send one command per line (`latency MS [JITTER_MS]`,
/// `delay-reports MS`, `accept-limit N`, `refuse on|off`, `stall MS`, `drop`, `restart`,
/// `reject-burst N`, `flow N`, `status`, and more: `help` lists them, one line each, as does
/// docs/operations.md); each line is answered `ok ...` or `error ...` (a number out of its range is refused with the
/// range). Every number below is range-checked too: a value out of range is refused at start
/// with the allowed range.
///
/// A hostile venue, for drills against a client (control commands): `lie unknown-fill`,
/// `lie overfill`, `lie fill-after-close`, `lie zero-fill`, `lie off-limit-fill` (a fill for an
/// order never entered, beyond an open order's quantity, after its close, of zero shares,
/// through its limit price), `gap N` (the next login answer skips N reports),
/// `login-seq S` (the next login answer announces sequence S), `debug-packet N` (a Debug
/// packet with N bytes of text, N <= 65534), `oversize N` (a packet announcing length N).
#[derive(Debug, Args)]
pub struct VenueArgs {
    /// Order-entry address (SoupBinTCP/OUCH).
    #[arg(long, default_value = "127.0.0.1:15000")]
    listen: SocketAddr,
    /// Control address for changing faults while running (line commands, see above).
    #[arg(long, default_value = "127.0.0.1:15001")]
    control: SocketAddr,
    /// Listed symbols, comma separated (1 to 8 characters each).
    #[arg(long, value_delimiter = ',', default_value = "AAPL,MSFT,AMZN,NVDA")]
    symbols: Vec<String>,
    /// Password every account must present (any username is accepted).
    #[arg(long, default_value = "keel")]
    password: String,
    /// Wire layout.
    #[arg(long, value_enum, default_value_t = DialectArg::Spec)]
    dialect: DialectArg,
    /// Accept a ClOrdID the account already used today (real venues differ).
    #[arg(long)]
    allow_duplicate_cl_ord_id: bool,
    /// The session (trading day) name announced at login: 1 to 10 letters or digits. A
    /// venue started with another name is a new day to a client that journaled this one.
    #[arg(long, default_value = "KEELSIM001")]
    session: String,
    /// Server-side rate limit: messages per window per account (0: none); excess orders are
    /// rejected with code 5 (throttled), excess cancels get a Cancel Reject.
    #[arg(long, default_value_t = 0)]
    rate_limit: u32,
    /// Window of the server-side rate limit, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    rate_window_ms: u64,
    /// Synthetic market events per second (makers and takers; 0: none).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(0..=EVENTS_PER_SEC_MAX as i64))]
    flow_rate: u32,
    /// Seed of the synthetic flow and of the latency jitter.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Fault: added delay before the venue acts on each client message (ack/fill latency).
    #[arg(long, default_value_t = 0, value_parser = delay_ms())]
    latency_ms: u64,
    /// Fault: uniform random extra delay on top of --latency-ms.
    #[arg(long, default_value_t = 0, value_parser = delay_ms())]
    jitter_ms: u64,
    /// Fault: hold every outbound report this long before sending it (delayed reports).
    #[arg(long, default_value_t = 0, value_parser = delay_ms())]
    delay_reports_ms: u64,
    /// Fault: hold each order's final report (its last fill or its cancel) this long; the
    /// stream is sequenced, so later reports wait behind it.
    #[arg(long, default_value_t = 0, value_parser = delay_ms())]
    delay_final_ms: u64,
    /// Fault: most sessions connected at once; extra connects are closed (0: no limit).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=i64::from(SESSIONS_MAX)))]
    accept_limit: u32,
    /// Order-entry slots connections that have not logged in may hold (1 to 256, of the 256
    /// slots): past it a new connection evicts the oldest one not logged in (counted,
    /// `sessions`: `prelogin_evicted`), so idle connections never keep a real client out.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=i64::from(SESSIONS_MAX)))]
    prelogin_max: u32,
    /// Close an order-entry connection that has not logged in this long after its connect,
    /// milliseconds (heartbeats do not extend it; counted, `sessions`: `login_timeouts`).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=LOGIN_TIMEOUT_MAX_MS))]
    login_timeout_ms: u64,
    /// Fault: close every new connection at once.
    #[arg(long)]
    refuse_connects: bool,
    /// Fault: reject the next N orders as a venue system problem (code 6).
    #[arg(long, default_value_t = 0)]
    reject_burst: u32,
    /// Price collar, percent: an order priced more than this far from its symbol's reference
    /// (the last trade; before the first, the flow's starting price 100.0000) is rejected with
    /// code 2 (invalid price). 0: off (only prices <= 0 or above --price-max are rejected).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=i64::from(PRICE_BAND_PCT_MAX)))]
    price_band_pct: u32,
    /// Highest limit price accepted, in price units (4 decimals: 10000 is 1.0000); above it an
    /// order is rejected with code 2 (invalid price).
    #[arg(long, default_value_t = PRICE_MAX_DEFAULT, value_parser = clap::value_parser!(i64).range(1..))]
    price_max: i64,
    /// Busy-poll the network (for a dedicated core); default is blocking waits.
    #[arg(long)]
    busy_poll: bool,
    /// Socket transport: `io_uring` or `epoll` (non-blocking sockets; the one a kernel-bypass
    /// stack such as Onload or VMA can accelerate). When io_uring cannot be set up, the venue
    /// says why on stderr and runs on epoll.
    #[arg(long, default_value_t = TransportKind::IoUring)]
    transport: TransportKind,
    /// Stop after this many seconds (0: run until killed).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=u64::MAX / 1_000_000_000))]
    duration_s: u64,
    /// WebSocket market-data address: `ws://ADDR/md` serves book, trades and ticker channels
    /// (docs/market-data.md), `ws://ADDR/echo` echoes.
    #[arg(long, default_value = "127.0.0.1:15002")]
    md_listen: SocketAddr,
    /// Do not serve market data.
    #[arg(long)]
    no_market_data: bool,
    /// Serve the REST API here (ticker, depth, klines, exchange information; docs/rest.md),
    /// e.g. 127.0.0.1:15003; its address is said on a second line.
    #[arg(long)]
    rest_listen: Option<SocketAddr>,
    /// Serve FIX 4.4 order entry here too (docs/protocol.md, "FIX 4.4"), e.g.
    /// 127.0.0.1:15004; its address is said on a line of its own.
    #[arg(long)]
    fix_listen: Option<SocketAddr>,
    /// The venue's FIX CompID (TargetCompID of what sessions send): 1 to 32 printable
    /// characters.
    #[arg(long, default_value = "VENUE", value_parser = fix_comp_id)]
    fix_comp_id: String,
    /// REST weight each client may use per second.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    rest_second_weight: u32,
    /// REST weight each client may use per minute.
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u32).range(1..))]
    rest_minute_weight: u32,
    /// Requests a client may send while told to wait (429) before it is banned (418).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    rest_ban_after: u32,
    /// How long a REST ban lasts, seconds.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    rest_ban_s: u64,
    /// Publish every book delta and trade on this NATS bus too (comma-separated URLs, e.g.
    /// nats://127.0.0.1:4222), for `keel gateway`s to serve (docs/market-data.md, "Scaling
    /// out"); said on a line of its own.
    #[arg(long)]
    nats: Option<String>,
    /// Market-data connections at most.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=i64::from(keel::net::CONNS_MAX)))]
    md_connections: u32,
    /// Messages queued per market-data connection before its book conflates (snapshot later)
    /// or, for trades, it is disconnected (close code 4001).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    md_queue: u32,
    /// Messages each account's stream keeps for replay; past it messages are dropped and
    /// counted (`stats`: `stream_full_drops`). About 50 bytes each: 4,000,000 is ~200 MB.
    #[arg(long, default_value_t = 4_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    stream_messages_max: u64,
    /// Sink mode, for throughput benchmarks: accept every valid order and leave it open until
    /// canceled, never booking or matching it (the synthetic flow, if any, still trades among
    /// itself). Answers leave in batches, one write per session per pass.
    #[arg(long)]
    sink: bool,
    /// Seconds between pings to market-data clients (silent for 3 intervals: closed, 4002).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    md_ping_s: u64,
    /// Serve market data (`wss://`) and the REST API (`https://`) over TLS with this
    /// certificate chain (PEM, the leaf first); needs --tls-key. Order entry and the control
    /// port stay plaintext (docs/tls.md).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

/// Runs the venue until the duration elapses (or forever).
pub fn run(args: VenueArgs) -> ExitCode {
    for s in &args.symbols {
        if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_graphic()) {
            keel::warn_line!("keel venue: --symbols: '{s}' must be 1 to 8 printable characters");
            return ExitCode::from(64);
        }
    }
    let session_ok = (1..=10).contains(&args.session.len())
        && args.session.bytes().all(|b| b.is_ascii_alphanumeric());
    if !session_ok {
        keel::warn_line!(
            "keel venue: --session '{}' must be 1 to 10 letters or digits",
            args.session
        );
        return ExitCode::from(64);
    }
    let mut session = [b' '; 10];
    session[..args.session.len()].copy_from_slice(args.session.as_bytes());
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match keel::net::tls::server_config(cert, key) {
            Ok(c) => Some(c),
            Err(e) => {
                keel::warn_line!("keel venue: --tls-cert/--tls-key: {e}");
                return ExitCode::from(64);
            }
        },
        _ => None,
    };
    let config = venue_config(&args, session, tls);
    struct Serve<'a> {
        args: &'a VenueArgs,
        config: VenueConfig,
    }
    impl keel::net::OnTransport for Serve<'_> {
        type Output = ExitCode;
        fn run<T: SocketTransport>(&mut self) -> Result<ExitCode, NetError> {
            Ok(serve(
                VenueServer::<T>::open(self.config.clone())?,
                self.args,
            ))
        }
    }
    let mut body = Serve {
        args: &args,
        config,
    };
    keel::net::on_transport(args.transport, "keel venue", &mut body).unwrap_or_else(|e| refused(&e))
}

/// The venue's settings from its (already range-checked) flags.
fn venue_config(
    args: &VenueArgs,
    session: [u8; 10],
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
) -> VenueConfig {
    const MS: u64 = 1_000_000;
    VenueConfig {
        listen: args.listen,
        control: Some(args.control),
        exchange: ExchangeConfig {
            symbols: args.symbols.clone(),
            password: args.password.clone(),
            reject_duplicate_cl_ord_id: !args.allow_duplicate_cl_ord_id,
            session,
            rate_limit_messages: args.rate_limit,
            rate_window_ns: args.rate_window_ms * MS,
            dialect: match args.dialect {
                DialectArg::Spec => Dialect::SPEC,
                DialectArg::OuchConnect => Dialect::OUCH_CONNECT,
            },
            price_max: args.price_max,
            price_band_pct: args.price_band_pct,
            stream_messages_max: args.stream_messages_max as usize,
            sink: args.sink,
            reference_price: (args.price_band_pct > 0)
                .then_some(FlowConfig::default().reference_price),
            ..ExchangeConfig::default()
        },
        flow: FlowConfig {
            seed: args.seed,
            events_per_sec: args.flow_rate,
            ..FlowConfig::default()
        },
        faults: Faults {
            latency_ns: args.latency_ms * MS,
            jitter_ns: args.jitter_ms * MS,
            report_delay_ns: args.delay_reports_ms * MS,
            final_report_delay_ns: args.delay_final_ms * MS,
            accept_limit: args.accept_limit,
            refuse_connects: args.refuse_connects,
            ..Faults::default()
        },
        wait: if args.busy_poll {
            WaitMode::BusyPoll
        } else {
            WaitMode::Blocking
        },
        market_data: (!args.no_market_data).then(|| crate::md_server::MdConfig {
            listen: args.md_listen,
            conns_max: args.md_connections,
            queue_max: args.md_queue as usize,
            ping_interval_ns: args.md_ping_s * 1_000_000_000,
            tls: tls.clone(),
            ..crate::md_server::MdConfig::default()
        }),
        rest: args.rest_listen.map(|listen| crate::rest::RestConfig {
            listen,
            limits: crate::rest::RestLimits {
                second_weight: args.rest_second_weight,
                minute_weight: args.rest_minute_weight,
                ban_after: args.rest_ban_after,
                ban_ns: args.rest_ban_s * 1_000_000_000,
            },
            conns_max: 256,
        }),
        fix: args.fix_listen.map(|listen| crate::server::FixConfig {
            listen,
            comp_id: args.fix_comp_id.clone(),
            ..crate::server::FixConfig::default()
        }),
        tls,
        sessions_max: SESSIONS_MAX,
        prelogin_max: args.prelogin_max,
        login_timeout_ns: args.login_timeout_ms * MS,
        ..VenueConfig::default()
    }
}

/// A FIX CompID: 1 to 32 printable ASCII characters.
fn fix_comp_id(value: &str) -> Result<String, String> {
    if value.is_empty() || value.len() > 32 || !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "\"{}\" is not 1 to 32 printable ASCII characters",
            value.escape_debug()
        ));
    }
    Ok(value.to_string())
}

fn refused(e: &NetError) -> ExitCode {
    keel::warn_line!("keel venue: {e}");
    ExitCode::from(1)
}

/// Serves on whichever transport the venue opened until the duration elapses (or forever).
fn serve<T: SocketTransport>(mut server: VenueServer<T>, args: &VenueArgs) -> ExitCode {
    const MS: u64 = 1_000_000;
    // The bus publisher lives as long as the loop (dropped, it flushes and stops).
    let mut _publisher = None;
    if let Some(urls) = &args.nats {
        let Some(md) = server.market_data_mut() else {
            keel::warn_line!("keel venue: --nats needs market data (drop --no-market-data)");
            return ExitCode::from(64);
        };
        match crate::bus::Publisher::start(urls, args.symbols.clone(), 1 << 16) {
            Ok((publisher, ring)) => {
                md.attach_bus(ring, std::sync::Arc::clone(&publisher.doorbell));
                _publisher = Some(publisher);
            }
            Err(e) => {
                keel::warn_line!("keel venue: bus: {e}");
                return ExitCode::from(1);
            }
        }
    }
    server.exchange_mut().reject_burst_remaining = args.reject_burst;
    // Scripts read the addresses by position (the market data last): the transport goes
    // between them.
    keel::say_line!(
        "keel venue: order entry on {}, control on {}, symbols {}, transport {}, market data on {}",
        server.local_addr(),
        server.control_addr().map_or("-".into(), |a| a.to_string()),
        args.symbols.join(","),
        T::KIND,
        server.market_data().map_or("-".into(), |md| {
            let scheme = if md.is_tls() { "wss" } else { "ws" };
            format!("{scheme}://{}/md", md.local_addr())
        })
    );
    if let Some((addr, _)) = server.rest() {
        let scheme = if server.rest_is_tls() {
            "https"
        } else {
            "http"
        };
        keel::say_line!("keel venue: REST API on {scheme}://{addr}");
    }
    if let Some(addr) = server.fix_addr() {
        keel::say_line!("keel venue: FIX 4.4 order entry on {addr}");
    }
    if let Some(urls) = &args.nats {
        keel::say_line!("keel venue: market data published on the bus at {urls}");
    }
    // Scripts and tests read the addresses from a pipe: say it now, not at exit.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let clock = TscClock::new();
    let end_ns = (args.duration_s > 0).then(|| args.duration_s * 1_000_000_000);
    loop {
        let now = clock.now_ns();
        if end_ns.is_some_and(|end| now >= end) {
            break;
        }
        if let Err(e) = server.step(now, MS) {
            keel::warn_line!("keel venue: {e}");
            return ExitCode::from(1);
        }
    }
    let stats = server.exchange().stats();
    keel::say_line!(
        "keel venue: done: {} logins, {} accepted, {} rejected, {} matches",
        server.stats().logins,
        stats.accepted,
        stats.rejected,
        stats.matches
    );
    ExitCode::SUCCESS
}
