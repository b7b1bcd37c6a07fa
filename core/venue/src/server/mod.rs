//! The venue's network side: SoupBinTCP sessions carrying OUCH over keel's io_uring reactor,
//! serving an [`Exchange`], with heartbeats, replay on re-login, and fault injection that can
//! be changed while running through a line-based control port.
//!
//! One thread runs everything: [`VenueServer::step`] polls the reactor, feeds decoded messages
//! to the exchange (after any injected latency), runs the synthetic flow, and writes each
//! logged-in session's sequenced stream from where that session stands. A malformed packet or
//! message closes its connection with a counted reason (told to the client in a Debug packet,
//! or a Login Rejected for bad credentials); it never reaches the exchange.
//!
//! Bounds at the edge: order entry and control have separate pools of slots
//! (`sessions_max`, `controls_max`); inside order entry, connections that have not logged in
//! hold at most `prelogin_max` slots, and a newcomer evicts the oldest of them rather than
//! being refused (so a flood of idle connections can never keep a real client from logging
//! in); a session that has not logged in within `login_timeout_ns` is closed, whatever it
//! sends meanwhile; a control line is at most
//! [`CONTROL_LINE_MAX`] bytes and every number in a command is range-checked; a connection the
//! server closes keeps its slot until what was queued for it is written (at most
//! [`CLOSE_LINGER_NS`]), so its last answer is not lost.

use std::collections::VecDeque;

use keel::hash::FxHashMap;
use std::net::SocketAddr;

use crate::exchange::{Exchange, ExchangeConfig, Lie, POSITION_LIE_MAX};
use crate::flow::{Flow, FlowConfig, EVENTS_PER_SEC_MAX};
use keel::net::{
    ConnId, ListenerId, NetError, NetEvent, Reactor, ReactorConfig, SocketTransport, Tls,
    TlsConfig, TlsStats, Transport, WaitMode,
};
use keel::proto::ouch::decode_inbound;
use keel::proto::soupbin::{
    decode_client, encode_server, frame, ClientPacket, LoginRequest, ServerPacket,
};
use keel::proto::DecodeError;
use keel::rng::{Rng64, SplitMix64};

/// The longest injected delay (latency, jitter, delayed reports, stall), milliseconds: a minute
/// is far beyond any timeout a client would keep waiting through; a day-long value would leave
/// every later message queued behind the first.
pub const FAULT_DELAY_MAX_MS: u64 = 60_000;

/// The widest wall-clock jump the control port takes, seconds either way (ten years).
pub const CLOCK_JUMP_MAX_S: u64 = 315_360_000;

/// The longest control line, bytes (newline excluded): a longer one is answered with an error
/// and its connection closed.
pub const CONTROL_LINE_MAX: usize = 4_096;

/// Control lines handled per connection per pass (the rest wait for the next pass).
pub const CONTROL_LINES_PER_PASS: u32 = 64;

/// Client messages held back by the latency fault at most; beyond it the venue stops reading
/// from its sessions until some are released (back-pressure through TCP).
pub const DELAYED_MAX: usize = 65_536;

/// How long a connection the server closes may take to have its last replies written before
/// its socket is closed anyway.
pub const CLOSE_LINGER_NS: u64 = 2_000_000_000;

/// The longest Debug packet text the `debug-packet` command sends, bytes: with its type byte
/// it is the largest packet a SoupBinTCP length field can announce (65,535).
pub const DEBUG_TEXT_MAX: u64 = 65_534;

/// The longest login deadline `keel venue --login-timeout-ms` takes, milliseconds: a minute, as
/// for the fault delays; a client that needs longer to send one Login Request is not a client.
pub const LOGIN_TIMEOUT_MAX_MS: u64 = 60_000;

/// The widest login gap the `gap` command takes, reports (the venue never skips past the end
/// of the stream anyway).
pub const LOGIN_GAP_MAX: u64 = u32::MAX as u64;

/// The most messages `fix-lose` keeps from the wire at once (a million: far past any gap a
/// test needs, far inside a session's resend store).
pub const FIX_LOSE_MAX: u64 = 1_000_000;

/// Fault knobs, all changeable while running (see [`VenueServer::apply_control`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults {
    /// Added delay before the venue acts on a client message.
    pub latency_ns: u64,
    /// Uniform extra delay in `0..=jitter_ns` on top of `latency_ns`.
    pub jitter_ns: u64,
    /// Sequenced messages are held this long before they are sent (delayed reports).
    pub report_delay_ns: u64,
    /// An order's final report (its last fill, or its cancel) is held this long — and, the
    /// stream being sequenced, everything after it (the "remainder reported late" incident).
    pub final_report_delay_ns: u64,
    /// Most sessions connected at once; further connects are accepted and closed (0: no limit).
    pub accept_limit: u32,
    /// Close every new connection at once.
    pub refuse_connects: bool,
    /// A saturating gateway: connections are held until the end of a window of
    /// `saturate_window_ns`; if more than `saturate_attempts_max` arrived in it, every one of
    /// them is closed (the handshakes fail together), otherwise all proceed (0: off).
    pub saturate_attempts_max: u32,
    /// See `saturate_attempts_max`.
    pub saturate_window_ns: u64,
    /// Stop reading from clients until this time (ns on the server's clock).
    pub stalled_until_ns: u64,
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct VenueConfig {
    /// Order-entry listen address.
    pub listen: SocketAddr,
    /// Control listen address (`None`: no control port).
    pub control: Option<SocketAddr>,
    /// Exchange settings.
    pub exchange: ExchangeConfig,
    /// Synthetic flow settings.
    pub flow: FlowConfig,
    /// Faults at start.
    pub faults: Faults,
    /// Send a heartbeat after this long without sending anything.
    pub heartbeat_interval_ns: u64,
    /// Close a session silent for this long.
    pub client_timeout_ns: u64,
    /// Largest SoupBinTCP packet accepted from a client.
    pub max_packet_len: u16,
    /// Order-entry connection slots (logged in or not).
    pub sessions_max: u32,
    /// Of those, the most held by connections that have not logged in (1..=`sessions_max`):
    /// past it, or when every slot is taken, a new connection evicts the oldest of them
    /// (`DropReason::PreLoginEvicted`); a connect is refused only when every slot is logged in.
    pub prelogin_max: u32,
    /// Control connection slots, a pool of their own: no number of order-entry connections
    /// can lock the operator out.
    pub controls_max: u32,
    /// Close an order-entry connection that has not logged in within this long (heartbeats
    /// do not count).
    pub login_timeout_ns: u64,
    /// Close a control connection that sent no line for this long.
    pub control_idle_timeout_ns: u64,
    /// How the reactor waits.
    pub wait: WaitMode,
    /// With `BusyPoll`: read every session without blocking on every pass (see
    /// `ReactorConfig::spin_reads`): lower latency for a few sessions, costly for many.
    pub spin_reads: bool,
    /// The WebSocket market-data server (`None`: off). Its `symbols` are replaced by the
    /// exchange's.
    pub market_data: Option<crate::md_server::MdConfig>,
    /// The REST API (`--rest-listen`), if served (docs/rest.md).
    pub rest: Option<crate::rest::RestConfig>,
    /// FIX 4.4 order entry (`--fix-listen`), if served (docs/protocol.md, "FIX 4.4").
    pub fix: Option<FixConfig>,
    /// Serve the REST API over TLS (`https://`) with this certificate (`--tls-cert`,
    /// `--tls-key`; the market-data server takes it in its own config). Order entry and the
    /// control port stay plaintext.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

impl Default for VenueConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            control: None,
            exchange: ExchangeConfig::default(),
            flow: FlowConfig::default(),
            faults: Faults::default(),
            heartbeat_interval_ns: 1_000_000_000,
            client_timeout_ns: 15_000_000_000,
            max_packet_len: 1024,
            sessions_max: 256,
            prelogin_max: 64,
            controls_max: 8,
            login_timeout_ns: 5_000_000_000,
            control_idle_timeout_ns: 300_000_000_000,
            wait: WaitMode::Blocking,
            spin_reads: false,
            market_data: None,
            rest: None,
            fix: None,
            tls: None,
        }
    }
}

/// Why the server closed a connection, counted per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Malformed SoupBinTCP or OUCH.
    Malformed(DecodeError),
    /// A message before login, or a second login.
    ProtocolViolation,
    /// Bad credentials or session.
    LoginRejected,
    /// Silent past the client timeout.
    Timeout,
    /// Over the accept limit, or connects refused.
    AcceptLimit,
    /// Every order-entry slot (`sessions_max`) taken.
    SessionsFull,
    /// Not logged in within `login_timeout_ns`.
    LoginTimeout,
    /// Not logged in yet, and the oldest such connection when a newer one needed its slot
    /// (`prelogin_max` reached, or every slot taken).
    PreLoginEvicted,
    /// Fault injection: drop or restart.
    Injected,
    /// The client logged out.
    Logout,
}

/// Counters.
#[derive(Debug, Clone, Default)]
pub struct VenueStats {
    /// Sessions that logged in.
    pub logins: u64,
    /// Connections closed by the server, by reason.
    pub drops: FxHashMap<DropReason, u64>,
    /// Sequenced messages sent (replays included).
    pub sequenced_sent: u64,
    /// Client messages handed to the exchange.
    pub messages_in: u64,
    /// SoupBinTCP packets read from order-entry clients (every type: logins, heartbeats,
    /// data, logouts).
    pub packets_in: u64,
    /// SoupBinTCP packets written to order-entry clients (every type).
    pub packets_out: u64,
    /// Control connections refused because every control slot was taken.
    pub controls_refused: u64,
    /// Control commands answered with an error.
    pub control_errors: u64,
    /// Control connections closed for a line over [`CONTROL_LINE_MAX`].
    pub control_lines_too_long: u64,
    /// Control connections closed for idleness.
    pub control_idle_closed: u64,
    /// Closing connections whose last replies were still unwritten at [`CLOSE_LINGER_NS`].
    pub close_linger_expired: u64,
}

#[derive(Debug)]
struct Session {
    account: Option<u32>,
    opened_ns: u64,
    /// Accept order (sessions accepted in one pass share `opened_ns`).
    arrival: u64,
    next_seq: u64,
    last_rx_ns: u64,
    last_tx_ns: u64,
}

#[derive(Debug, Clone, Copy)]
struct Control {
    conn: ConnId,
    last_line_ns: u64,
}

/// A connection the server closes once its queued replies are written (or at `deadline_ns`).
#[derive(Debug, Clone, Copy)]
struct Closing {
    conn: ConnId,
    deadline_ns: u64,
    /// Counted against the control pool (else the order-entry pool).
    control: bool,
}

#[derive(Debug)]
struct Delayed {
    due_ns: u64,
    conn: ConnId,
    account: u32,
    bytes: [u8; 256],
    len: usize,
}

/// The venue server. See the module docs. Runs on either of keel's socket transports (the
/// io_uring [`Reactor`] by default, or [`keel::net::EpollReactor`]: [`VenueServer::open`]), or
/// on any [`Transport`] (the simulated network in deterministic tests).
#[derive(Debug)]
pub struct VenueServer<T: Transport = Reactor> {
    /// The transport, under a TLS layer that is empty (every call passes through) unless the
    /// REST API is served over TLS.
    reactor: Tls<T>,
    exchange: Exchange,
    flow: Flow,
    config: VenueConfig,
    order_entry: ListenerId,
    control: Option<ListenerId>,
    local: SocketAddr,
    control_local: Option<SocketAddr>,
    sessions: FxHashMap<ConnId, Session>,
    /// Order-entry connections accepted so far (each session's `arrival`).
    arrivals: u64,
    controls: Vec<Control>,
    closing: Vec<Closing>,
    /// Connections held by the saturating-gateway fault until `held_until_ns`.
    held: Vec<ConnId>,
    held_until_ns: u64,
    /// The time of the pass under way.
    now_ns: u64,
    /// When each stream message was produced, per account, for delayed reports.
    produced_ns: FxHashMap<u32, Vec<u64>>,
    delayed: VecDeque<Delayed>,
    rng: SplitMix64,
    events: Vec<NetEvent>,
    /// Reused lists of connections, so a pass allocates nothing once warm.
    conn_scratch: Vec<ConnId>,
    idle_scratch: Vec<ConnId>,
    scratch: Vec<u8>,
    stats: VenueStats,
    /// The market-data server (on the same kind of transport), fed from the exchange after
    /// every pass.
    md: Option<crate::md_server::MdServer<T>>,
    rest: Option<crate::rest::RestEndpoint>,
    fix: Option<fix::FixEndpoint>,
    md_trades: Vec<crate::exchange::Trade>,
    md_levels: Vec<(u16, keel::proto::md::BookSide, i64, u64)>,
    /// Hostile fault: the next Login Accepted announces this sequence number whatever the
    /// stream's position (the session is still written from its real position).
    login_seq_once: Option<u64>,
}

impl VenueServer {
    /// Binds the listeners and builds the exchange, on the io_uring transport.
    pub fn new(config: VenueConfig) -> Result<Self, NetError> {
        Self::open(config)
    }
}

impl<T: SocketTransport> VenueServer<T> {
    /// Binds the listeners and builds the exchange, on the socket transport `T` (the
    /// market-data server too).
    pub fn open(config: VenueConfig) -> Result<Self, NetError> {
        // Both pools, plus room for connections accepted only to be refused at once.
        let inner = T::open(ReactorConfig {
            conns_max: config
                .sessions_max
                .saturating_add(config.controls_max)
                .saturating_add(config.rest.map_or(0, |r| r.conns_max))
                .saturating_add(config.fix.as_ref().map_or(0, |f| f.conns_max))
                .saturating_add(16),
            wait: config.wait,
            recv_buffer_bytes: 64 * 1024,
            send_buffer_bytes: 256 * 1024,
            spin_reads: config.spin_reads,
            ..ReactorConfig::default()
        })?;
        let mut reactor = Tls::new(
            inner,
            TlsConfig {
                server: config.tls.clone(),
                ..TlsConfig::default()
            },
        );
        let (order_entry, local) = reactor.listen(config.listen)?;
        let (control, control_local) = match config.control {
            Some(addr) => reactor.listen(addr).map(|(id, a)| (Some(id), Some(a)))?,
            None => (None, None),
        };
        let md = match &config.market_data {
            Some(md) => {
                let mut md = md.clone();
                md.symbols = config.exchange.symbols.clone();
                md.wait = WaitMode::BusyPoll; // polled without waiting, after the venue's wait
                Some(crate::md_server::MdServer::<T>::open(md)?)
            }
            None => None,
        };
        let rest = match config.rest {
            Some(r) => {
                let (listener, local) = match config.tls {
                    Some(_) => reactor.listen_tls(r.listen)?,
                    None => reactor.listen(r.listen)?,
                };
                Some(crate::rest::RestEndpoint::new(listener, local, r))
            }
            None => None,
        };
        let fix = match &config.fix {
            Some(f) => {
                let (listener, local) = reactor.listen(f.listen)?;
                Some(fix::FixEndpoint::new(listener, local, f.clone()))
            }
            None => None,
        };
        let mut server = VenueServer::with_tls(config, reactor, local);
        server.md = md;
        server.rest = rest;
        server.fix = fix;
        server.order_entry = order_entry;
        server.control = control;
        server.control_local = control_local;
        Ok(server)
    }
}

impl<T: Transport> VenueServer<T> {
    /// A venue on an existing transport (already listening at `local` as listener 0).
    /// With `config.fix`, the FIX endpoint listens on `transport` too.
    pub fn with_transport(
        config: VenueConfig,
        transport: T,
        local: SocketAddr,
    ) -> Result<Self, NetError> {
        let mut server = Self::with_tls(config, Tls::plain(transport), local);
        if let Some(f) = server.config.fix.clone() {
            let (listener, local) = server.reactor.listen(f.listen)?;
            server.fix = Some(fix::FixEndpoint::new(listener, local, f));
        }
        Ok(server)
    }

    fn with_tls(config: VenueConfig, transport: Tls<T>, local: SocketAddr) -> Self {
        assert!(config.prelogin_max >= 1, "prelogin_max 0 admits no client");
        assert!(
            config.prelogin_max <= config.sessions_max,
            "prelogin_max {} over sessions_max {}",
            config.prelogin_max,
            config.sessions_max
        );
        let exchange = Exchange::new(config.exchange.clone());
        let flow = Flow::new(config.flow, exchange.symbol_count());
        Self {
            reactor: transport,
            flow,
            exchange,
            order_entry: ListenerId(0),
            control: None,
            local,
            control_local: None,
            sessions: FxHashMap::default(),
            arrivals: 0,
            controls: Vec::with_capacity(config.controls_max as usize),
            closing: Vec::with_capacity((config.sessions_max + config.controls_max) as usize),
            held: Vec::new(),
            held_until_ns: 0,
            now_ns: 0,
            produced_ns: FxHashMap::default(),
            delayed: VecDeque::new(),
            rng: SplitMix64::new(config.flow.seed ^ 0x5eed),
            events: Vec::with_capacity(1024),
            conn_scratch: Vec::with_capacity(config.sessions_max as usize),
            idle_scratch: Vec::with_capacity(config.sessions_max as usize),
            scratch: vec![0; 2048],
            stats: VenueStats::default(),
            md: None,
            rest: None,
            fix: None,
            md_trades: Vec::with_capacity(1_024),
            md_levels: Vec::with_capacity(1_024),
            login_seq_once: None,
            config,
        }
    }

    /// The order-entry address (with the port the OS chose).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The control address.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control_local
    }

    /// The exchange (read only).
    pub fn exchange(&self) -> &Exchange {
        &self.exchange
    }

    /// The exchange, for tests and drills that act as the market.
    pub fn exchange_mut(&mut self) -> &mut Exchange {
        &mut self.exchange
    }

    /// Counters.
    pub fn stats(&self) -> &VenueStats {
        &self.stats
    }

    /// Current faults.
    pub fn faults(&self) -> Faults {
        self.config.faults
    }

    /// Sessions connected now.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// One pass: network, delayed messages, synthetic flow, outbound streams, heartbeats.
    pub fn step(&mut self, now_ns: u64, timeout_ns: u64) -> Result<(), NetError> {
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        self.reactor.poll(now_ns, timeout_ns, &mut events)?;
        self.now_ns = now_ns;
        for event in &events {
            self.on_event(now_ns, *event);
        }
        self.events = events;
        self.decide_held(now_ns);
        if now_ns >= self.config.faults.stalled_until_ns {
            let mut conns = self.session_list();
            for &conn in &conns {
                self.read_session(now_ns, conn);
            }
            conns.clear();
            self.conn_scratch = conns;
        }
        self.read_controls(now_ns);
        self.serve_rest(now_ns);
        self.release_delayed(now_ns);
        self.flow.run_until(now_ns, &mut self.exchange);
        self.write_streams(now_ns);
        if let Some(mut fix) = self.fix.take() {
            fix.step(self, now_ns);
            self.fix = Some(fix);
        }
        self.expire_sessions(now_ns);
        self.finish_closing(now_ns);
        self.feed_market_data(now_ns)?;
        // Answers leave in this pass, not at the next poll.
        self.reactor.flush()
    }

    fn on_event(&mut self, now_ns: u64, event: NetEvent) {
        match event {
            NetEvent::Accepted { listener, conn } if Some(listener) == self.control => {
                let closing = self.closing.iter().filter(|c| c.control).count();
                if self.controls.len() + closing >= self.config.controls_max as usize {
                    self.stats.controls_refused += 1;
                    self.reactor.close(conn);
                    return;
                }
                self.controls.push(Control {
                    conn,
                    last_line_ns: now_ns,
                });
            }
            NetEvent::Accepted { listener, conn } if listener == self.order_entry => {
                let f = self.config.faults;
                let over = f.accept_limit > 0 && self.sessions.len() as u32 >= f.accept_limit;
                if f.refuse_connects || over {
                    self.count_drop(DropReason::AcceptLimit);
                    self.reactor.close(conn);
                    return;
                }
                if !self.make_room() {
                    self.count_drop(DropReason::SessionsFull);
                    self.reactor.close(conn);
                    return;
                }
                if f.saturate_attempts_max > 0 {
                    if self.held.is_empty() {
                        self.held_until_ns = now_ns + f.saturate_window_ns;
                    }
                    self.held.push(conn);
                    return;
                }
                self.open_session(now_ns, conn);
            }
            NetEvent::Accepted { listener, conn }
                if self.rest.as_ref().is_some_and(|r| r.listener == listener) =>
            {
                if let Some(rest) = &mut self.rest {
                    rest.accept(&mut self.reactor, conn);
                }
            }
            NetEvent::Accepted { listener, conn }
                if self.fix.as_ref().is_some_and(|f| f.listener == listener) =>
            {
                if let Some(mut fix) = self.fix.take() {
                    fix.accept(self, conn);
                    self.fix = Some(fix);
                }
            }
            NetEvent::Accepted { conn, .. } => self.reactor.close(conn),
            NetEvent::Closed { conn, .. } => {
                if let Some(rest) = &mut self.rest {
                    rest.closed(conn);
                }
                if let Some(fix) = &mut self.fix {
                    fix.closed(conn);
                }
                self.sessions.remove(&conn);
                self.controls.retain(|c| c.conn != conn);
                self.held.retain(|c| *c != conn);
                self.closing.retain(|c| c.conn != conn);
            }
            NetEvent::Readable { .. }
            | NetEvent::Connected { .. }
            | NetEvent::ConnectFailed { .. }
            | NetEvent::Timer { .. } => {}
        }
    }
}

mod control;
mod fix;
mod session;
mod side;

pub use control::{control_help, CONTROL_COMMANDS};
pub use fix::{ord_rej_reason, FixConfig, FixVenueStats, CL_ORD_ID_MAX, HEARTBEAT_MAX_S};
