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

use super::exchange::{Exchange, ExchangeConfig, Lie, POSITION_LIE_MAX};
use super::flow::{Flow, FlowConfig, EVENTS_PER_SEC_MAX};
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
    pub market_data: Option<super::md_server::MdConfig>,
    /// The REST API (`--rest-listen`), if served (docs/rest.md).
    pub rest: Option<super::rest::RestConfig>,
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
    md: Option<super::md_server::MdServer<T>>,
    rest: Option<super::rest::RestEndpoint>,
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
                Some(super::md_server::MdServer::<T>::open(md)?)
            }
            None => None,
        };
        let rest = match config.rest {
            Some(r) => {
                let (listener, local) = match config.tls {
                    Some(_) => reactor.listen_tls(r.listen)?,
                    None => reactor.listen(r.listen)?,
                };
                Some(super::rest::RestEndpoint::new(listener, local, r))
            }
            None => None,
        };
        let mut server = VenueServer::with_tls(config, reactor, local);
        server.md = md;
        server.rest = rest;
        server.order_entry = order_entry;
        server.control = control;
        server.control_local = control_local;
        Ok(server)
    }
}

impl<T: Transport> VenueServer<T> {
    /// A venue on an existing transport (already listening at `local` as listener 0).
    pub fn with_transport(config: VenueConfig, transport: T, local: SocketAddr) -> Self {
        Self::with_tls(config, Tls::plain(transport), local)
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
            md_trades: Vec::with_capacity(1_024),
            md_levels: Vec::with_capacity(1_024),
            login_seq_once: None,
            config,
        }
    }

    /// The market-data server, if configured.
    pub fn market_data(&self) -> Option<&super::md_server::MdServer<T>> {
        self.md.as_ref()
    }

    /// The market-data server, to attach a bus to.
    pub fn market_data_mut(&mut self) -> Option<&mut super::md_server::MdServer<T>> {
        self.md.as_mut()
    }

    /// The market-data server's address, if configured.
    pub fn market_data_addr(&self) -> Option<SocketAddr> {
        self.md.as_ref().map(super::md_server::MdServer::local_addr)
    }

    /// Publishes what the exchange did since the last pass and runs the market-data server.
    fn feed_market_data(&mut self, now_ns: u64) -> Result<(), NetError> {
        use keel::proto::md::BookSide;
        match self.md.as_mut() {
            Some(md) => {
                let mut trades = std::mem::take(&mut self.md_trades);
                let mut levels = std::mem::take(&mut self.md_levels);
                trades.clear();
                levels.clear();
                self.exchange.drain_market_data(
                    |symbol, side, price, qty| {
                        let side = if side == keel::order::Side::Buy {
                            BookSide::Bid
                        } else {
                            BookSide::Ask
                        };
                        levels.push((symbol, side, price, qty));
                    },
                    |t| trades.push(*t),
                );
                // Levels that shrink or go first, then those that grow or appear: the final
                // book is never crossed, and in this order no state in between is either (every
                // level present is one of the final book's), so a subscriber never sees a
                // crossed book it would have to treat as corruption.
                for grow in [false, true] {
                    for &(symbol, side, price, qty) in &levels {
                        if (qty > md.level_qty(symbol, side, price)) == grow {
                            md.update_level(symbol, side, price, qty);
                        }
                    }
                }
                self.md_levels = levels;
                for t in &trades {
                    md.trade(now_ns, t.symbol, t.price, u64::from(t.qty), t.buy);
                }
                self.md_trades = trades;
                md.step(now_ns, 0)
            }
            None => {
                self.exchange.drain_market_data(|_, _, _, _| {}, |_| {});
                Ok(())
            }
        }
    }

    /// Answers the REST API's requests from the exchange's state (the market-data server's
    /// books and sequence numbers when it runs, so a depth snapshot ties to the WebSocket
    /// stream).
    fn serve_rest(&mut self, now_ns: u64) {
        let Some(mut rest) = self.rest.take() else {
            return;
        };
        let names = &self.config.exchange.symbols;
        let md = self.md.as_ref();
        let reference = self.config.flow.reference_price;
        rest.serve(now_ns, &mut self.reactor, |path, query| {
            rest_body(path, query, names, md, reference)
        });
        self.rest = Some(rest);
    }

    /// The TLS layer's counters (REST; all zero without TLS).
    pub fn tls_stats(&self) -> TlsStats {
        self.reactor.stats()
    }

    /// Whether the REST API is served over TLS.
    pub fn rest_is_tls(&self) -> bool {
        self.rest
            .as_ref()
            .is_some_and(|r| self.reactor.is_tls_listener(r.listener))
    }

    /// The REST API's address and counters, if served.
    pub fn rest(&self) -> Option<(SocketAddr, super::rest::RestStats)> {
        self.rest.as_ref().map(|r| (r.local, r.stats()))
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
            NetEvent::Accepted { conn, .. } => self.reactor.close(conn),
            NetEvent::Closed { conn, .. } => {
                if let Some(rest) = &mut self.rest {
                    rest.closed(conn);
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

    /// Frees a slot for a new order-entry connection if it needs one: when the pre-login
    /// connections hold `prelogin_max` slots, or every slot is taken, the oldest connection
    /// not logged in is evicted. False when no slot can be had (every one logged in, held or
    /// closing).
    ///
    /// Evicting the oldest, not refusing the newest: with refusal, a flood that keeps
    /// `prelogin_max` idle connections open (reopening each at its login deadline) would
    /// refuse every real client for good; with eviction a real client, which sends its login
    /// at once, loses its slot only if `prelogin_max` newer connections arrive before its
    /// Login Request is read — within one round trip on loopback.
    fn make_room(&mut self) -> bool {
        let closing = self.closing.iter().filter(|c| !c.control).count();
        let taken = self.sessions.len() + self.held.len() + closing;
        let (prelogin, oldest) = self.prelogin();
        let full = taken >= self.config.sessions_max as usize;
        if !full && prelogin < self.config.prelogin_max {
            return true;
        }
        let Some(oldest) = oldest else {
            return false;
        };
        // Closed at once, without a Debug packet: lingering to write one would keep the slot
        // this eviction is for.
        self.count_drop(DropReason::PreLoginEvicted);
        self.sessions.remove(&oldest);
        self.reactor.close(oldest);
        true
    }

    /// How many sessions have not logged in, and the oldest of them (the first accepted).
    fn prelogin(&self) -> (u32, Option<ConnId>) {
        let waiting = self.sessions.iter().filter(|(_, s)| s.account.is_none());
        let count = waiting.clone().count() as u32;
        let oldest = waiting.min_by_key(|(_, s)| s.arrival).map(|(c, _)| *c);
        (count, oldest)
    }

    /// Ends the saturating gateway's window: all held connections proceed, or all are closed.
    fn decide_held(&mut self, now_ns: u64) {
        let f = self.config.faults;
        if self.held.is_empty() || (f.saturate_attempts_max > 0 && now_ns < self.held_until_ns) {
            return;
        }
        let fail = f.saturate_attempts_max > 0 && self.held.len() as u32 > f.saturate_attempts_max;
        let mut held = std::mem::take(&mut self.held);
        for &conn in &held {
            if fail {
                self.count_drop(DropReason::AcceptLimit);
                self.reactor.close(conn);
            } else {
                self.open_session(now_ns, conn);
            }
        }
        held.clear();
        self.held = held;
    }

    fn open_session(&mut self, now_ns: u64, conn: ConnId) {
        self.arrivals += 1;
        let session = Session {
            account: None,
            opened_ns: now_ns,
            arrival: self.arrivals,
            next_seq: 1,
            last_rx_ns: now_ns,
            last_tx_ns: now_ns,
        };
        self.sessions.insert(conn, session);
    }

    /// Decodes every whole packet a session has sent.
    fn read_session(&mut self, now_ns: u64, conn: ConnId) {
        loop {
            if self.delayed.len() >= DELAYED_MAX {
                return; // the rest waits in the receive buffer until some are released
            }
            let buf = self.reactor.received(conn);
            let f = match frame(buf, self.config.max_packet_len) {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => return self.drop_session(conn, DropReason::Malformed(e)),
            };
            let len = f.len;
            let mut packet = [0u8; 1100];
            let payload_len = f.payload.len();
            packet[..payload_len].copy_from_slice(f.payload);
            let packet_type = f.packet_type;
            self.reactor.consume(conn, len);
            self.stats.packets_in += 1;
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.last_rx_ns = now_ns;
            }
            let decoded = decode_client(packet_type, &packet[..payload_len]);
            if let Err(reason) = self.on_packet(now_ns, conn, decoded) {
                return self.drop_session(conn, reason);
            }
            if !self.sessions.contains_key(&conn) {
                return;
            }
        }
    }

    fn on_packet(
        &mut self,
        now_ns: u64,
        conn: ConnId,
        packet: Result<ClientPacket<'_>, DecodeError>,
    ) -> Result<(), DropReason> {
        let packet = packet.map_err(DropReason::Malformed)?;
        let account = self.sessions.get(&conn).and_then(|s| s.account);
        match (account, packet) {
            (None, ClientPacket::LoginRequest(login)) => self.login(now_ns, conn, &login),
            (Some(account), ClientPacket::Unsequenced(msg)) => {
                let decoded = decode_inbound(msg, self.config.exchange.dialect)
                    .map_err(DropReason::Malformed)?;
                let f = self.config.faults;
                if f.latency_ns == 0 && f.jitter_ns == 0 && self.delayed.is_empty() {
                    self.stats.messages_in += 1;
                    self.exchange.handle(now_ns, account, &decoded);
                } else {
                    self.schedule(now_ns, conn, account, msg);
                }
                Ok(())
            }
            (_, ClientPacket::Heartbeat | ClientPacket::Debug(_)) => Ok(()),
            (Some(_), ClientPacket::LogoutRequest) => Err(DropReason::Logout),
            _ => Err(DropReason::ProtocolViolation),
        }
    }

    fn login(&mut self, now_ns: u64, conn: ConnId, login: &LoginRequest) -> Result<(), DropReason> {
        match self.exchange.login(
            login.username,
            &login.password,
            &login.session,
            login.sequence,
        ) {
            Ok((account, next_seq)) => {
                let session = self.exchange.session();
                // The hostile `login-seq` fault lies in the announcement only.
                let announced = self.login_seq_once.take().unwrap_or(next_seq);
                self.send_packet(
                    conn,
                    &ServerPacket::LoginAccepted {
                        session,
                        sequence: announced,
                    },
                );
                let s = self.sessions.get_mut(&conn).expect("session exists");
                s.account = Some(account);
                s.next_seq = next_seq;
                s.last_tx_ns = now_ns;
                self.stats.logins += 1;
                Ok(())
            }
            // The Login Rejected ('J', 'A' not authorized or 'S' session not available) goes
            // out before the close: `drop_session` lingers until it is written.
            Err(reason) => {
                self.send_packet(conn, &ServerPacket::LoginRejected(reason));
                Err(DropReason::LoginRejected)
            }
        }
    }

    /// Hands a validated OUCH message to the exchange now, or after the injected latency.
    fn schedule(&mut self, now_ns: u64, conn: ConnId, account: u32, msg: &[u8]) {
        let f = self.config.faults;
        let delay = f.latency_ns
            + if f.jitter_ns > 0 {
                self.rng.below_inclusive(f.jitter_ns)
            } else {
                0
            };
        if delay == 0 && self.delayed.is_empty() {
            return self.deliver(now_ns, account, msg);
        }
        let mut bytes = [0u8; 256];
        let len = msg.len().min(256);
        bytes[..len].copy_from_slice(&msg[..len]);
        // Keep arrival order: a message never overtakes an earlier one from the same venue.
        let due_ns = self
            .delayed
            .back()
            .map_or(now_ns + delay, |d| d.due_ns.max(now_ns + delay));
        self.delayed.push_back(Delayed {
            due_ns,
            conn,
            account,
            bytes,
            len,
        });
    }

    fn release_delayed(&mut self, now_ns: u64) {
        while self.delayed.front().is_some_and(|d| d.due_ns <= now_ns) {
            let d = self.delayed.pop_front().expect("checked");
            let _ = d.conn;
            self.deliver(now_ns, d.account, &d.bytes[..d.len]);
        }
    }

    fn deliver(&mut self, now_ns: u64, account: u32, msg: &[u8]) {
        let msg = decode_inbound(msg, self.config.exchange.dialect).expect("validated on arrival");
        self.stats.messages_in += 1;
        self.exchange.handle(now_ns, account, &msg);
    }

    fn write_streams(&mut self, now_ns: u64) {
        let hold = self.config.faults.report_delay_ns;
        let final_hold = self.config.faults.final_report_delay_ns.max(hold);
        let mut conns = self.session_list();
        for &conn in &conns {
            let Some(session) = self.sessions.get(&conn) else {
                continue;
            };
            let Some(account) = session.account else {
                continue;
            };
            let stream_len = self.exchange.account(account).stream_len();
            if session.next_seq > stream_len {
                continue; // up to date: the common case costs one lookup
            }
            let produced = self.produced_ns.entry(account).or_default();
            while (produced.len() as u64) < stream_len {
                produced.push(now_ns);
            }
            loop {
                let seq = self.sessions[&conn].next_seq;
                if seq > stream_len {
                    break;
                }
                let account_ref = self.exchange.account(account);
                let wait = if account_ref.is_final(seq) {
                    final_hold
                } else {
                    hold
                };
                if wait > 0 && self.produced_ns[&account][(seq - 1) as usize] + wait > now_ns {
                    break;
                }
                let msg = self.exchange.account(account).message(seq);
                let n = encode_server(&mut self.scratch, &ServerPacket::Sequenced(msg))
                    .expect("scratch fits");
                match self.reactor.send(conn, &self.scratch[..n]) {
                    Ok(()) => {
                        let s = self.sessions.get_mut(&conn).expect("exists");
                        s.next_seq += 1;
                        s.last_tx_ns = now_ns;
                        self.stats.sequenced_sent += 1;
                        self.stats.packets_out += 1;
                    }
                    // A slow client: its stream waits at its position; nothing is lost.
                    Err(_) => break,
                }
            }
        }
        conns.clear();
        self.conn_scratch = conns;
    }

    /// The connected sessions, in the reused scratch list (give it back when done).
    fn session_list(&mut self) -> Vec<ConnId> {
        let mut conns = std::mem::take(&mut self.conn_scratch);
        conns.clear();
        conns.extend(self.sessions.keys().copied());
        conns
    }

    fn expire_sessions(&mut self, now_ns: u64) {
        let mut expired = self.session_list();
        expired.clear();
        let mut idle = std::mem::take(&mut self.idle_scratch);
        idle.clear();
        for (conn, s) in &self.sessions {
            if self.expiry(now_ns, s).is_some() {
                expired.push(*conn);
            } else if s.account.is_some()
                && now_ns.saturating_sub(s.last_tx_ns) >= self.config.heartbeat_interval_ns
            {
                idle.push(*conn);
            }
        }
        for &conn in &expired {
            let reason = self
                .sessions
                .get(&conn)
                .and_then(|s| self.expiry(now_ns, s));
            if let Some(reason) = reason {
                self.drop_session(conn, reason);
            }
        }
        for &conn in &idle {
            self.send_packet(conn, &ServerPacket::Heartbeat);
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.last_tx_ns = now_ns;
            }
        }
        expired.clear();
        self.conn_scratch = expired;
        self.idle_scratch = idle;
    }

    /// Why a session is over its time, if it is: no login by the login deadline (heartbeats
    /// keep `last_rx_ns` fresh, never this), or silent past the client timeout.
    fn expiry(&self, now_ns: u64, s: &Session) -> Option<DropReason> {
        if s.account.is_none() && now_ns.saturating_sub(s.opened_ns) > self.config.login_timeout_ns
        {
            Some(DropReason::LoginTimeout)
        } else if now_ns.saturating_sub(s.last_rx_ns) > self.config.client_timeout_ns {
            Some(DropReason::Timeout)
        } else {
            None
        }
    }

    fn send_packet(&mut self, conn: ConnId, packet: &ServerPacket<'_>) {
        let n = encode_server(&mut self.scratch, packet).expect("scratch fits");
        // A full buffer means the client is not reading; the heartbeat or reply is dropped and
        // the client timeout will end the session.
        if self.reactor.send(conn, &self.scratch[..n]).is_ok() {
            self.stats.packets_out += 1;
        }
    }

    /// Closes a session for `reason`: tells the client why in a Debug packet (a Login
    /// Rejected was already queued for bad credentials), then lingers until what was queued is
    /// written. An injected drop is abrupt, as the fault it stands for.
    fn drop_session(&mut self, conn: ConnId, reason: DropReason) {
        let why = match reason {
            DropReason::Malformed(e) => Some(format!("closing: {e}")),
            DropReason::ProtocolViolation => {
                Some("closing: message before login, or a second login".to_string())
            }
            DropReason::Timeout => Some(format!(
                "closing: silent for more than {} ms",
                self.config.client_timeout_ns / 1_000_000
            )),
            DropReason::LoginTimeout => Some(format!(
                "closing: no login within {} ms",
                self.config.login_timeout_ns / 1_000_000
            )),
            DropReason::LoginRejected
            | DropReason::PreLoginEvicted
            | DropReason::Logout
            | DropReason::Injected
            | DropReason::AcceptLimit
            | DropReason::SessionsFull => None,
        };
        if let Some(text) = why {
            self.send_packet(conn, &ServerPacket::Debug(text.as_bytes()));
        }
        self.count_drop(reason);
        self.sessions.remove(&conn);
        if reason == DropReason::Injected {
            self.reactor.close(conn);
        } else {
            self.close_after_flush(conn, false);
        }
    }

    /// Closes `conn` once what is queued for it is written (or after [`CLOSE_LINGER_NS`]);
    /// it is not read meanwhile.
    fn close_after_flush(&mut self, conn: ConnId, control: bool) {
        self.closing.push(Closing {
            conn,
            deadline_ns: self.now_ns.saturating_add(CLOSE_LINGER_NS),
            control,
        });
    }

    /// Closes the lingering connections whose replies are written or whose time is up.
    fn finish_closing(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.closing.len() {
            let c = self.closing[i];
            let written = self.reactor.send_pending(c.conn) == 0;
            if written || now_ns >= c.deadline_ns {
                if !written {
                    self.stats.close_linger_expired += 1;
                }
                self.reactor.close(c.conn);
                self.closing.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn count_drop(&mut self, reason: DropReason) {
        *self.stats.drops.entry(reason).or_default() += 1;
    }

    /// Hostile fault: writes one packet announcing `announced_len` bytes (1..=65,535) to every
    /// logged-in session: a Debug packet (`+`) whose text fills the rest. Legal SoupBinTCP; a
    /// client whose packet maximum is below `announced_len` must refuse it as oversize.
    /// Returns the sessions written to.
    pub fn send_long_packet(&mut self, announced_len: u16) -> usize {
        let len = usize::from(announced_len.max(1));
        let mut packet = Vec::with_capacity(2 + len);
        packet.extend_from_slice(&(len as u16).to_be_bytes());
        packet.push(b'+');
        packet.extend(
            b"keel venue hostile debug packet "
                .iter()
                .cycle()
                .take(len - 1),
        );
        let conns: Vec<ConnId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.account.is_some())
            .map(|(c, _)| *c)
            .collect();
        for &conn in &conns {
            if self.reactor.send(conn, &packet).is_ok() {
                self.stats.packets_out += 1;
            }
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.last_tx_ns = self.now_ns;
            }
        }
        conns.len()
    }

    /// Drops every connection now (fault: disconnect). Books and streams are kept.
    pub fn drop_all(&mut self) {
        let conns: Vec<ConnId> = self.sessions.keys().copied().collect();
        for conn in conns {
            self.drop_session(conn, DropReason::Injected);
        }
    }

    /// Answers every whole control line (at most [`CONTROL_LINES_PER_PASS`] per connection per
    /// pass); a line over [`CONTROL_LINE_MAX`] is answered with an error and its connection
    /// closed, and so is a connection idle past `control_idle_timeout_ns`.
    fn read_controls(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.controls.len() {
            let Control { conn, last_line_ns } = self.controls[i];
            let over = match self.read_control(now_ns, conn) {
                ControlRead::Lines(0) => {
                    let idle_ns = now_ns.saturating_sub(last_line_ns);
                    (idle_ns > self.config.control_idle_timeout_ns).then(|| {
                        self.stats.control_idle_closed += 1;
                        format!(
                            "error idle for more than {} s: closing\n",
                            self.config.control_idle_timeout_ns / 1_000_000_000
                        )
                    })
                }
                ControlRead::Lines(_) => {
                    self.controls[i].last_line_ns = now_ns;
                    None
                }
                ControlRead::TooLong(len) => {
                    self.stats.control_lines_too_long += 1;
                    self.stats.control_errors += 1;
                    Some(format!(
                        "error line of {len} bytes or more is over the limit of {CONTROL_LINE_MAX} bytes: closing\n"
                    ))
                }
            };
            match over {
                Some(reply) => {
                    let _ = self.reactor.send(conn, reply.as_bytes());
                    self.controls.swap_remove(i);
                    self.close_after_flush(conn, true);
                }
                None => i += 1,
            }
        }
    }

    fn read_control(&mut self, now_ns: u64, conn: ConnId) -> ControlRead {
        let mut lines = 0;
        while lines < CONTROL_LINES_PER_PASS {
            let buf = self.reactor.received(conn);
            let window = &buf[..buf.len().min(CONTROL_LINE_MAX + 1)];
            let Some(end) = window.iter().position(|&b| b == b'\n') else {
                if buf.len() > CONTROL_LINE_MAX {
                    return ControlRead::TooLong(buf.len());
                }
                break;
            };
            let line = String::from_utf8_lossy(&buf[..end]).trim().to_string();
            self.reactor.consume(conn, end + 1);
            lines += 1;
            let reply = match self.apply_control(now_ns, &line) {
                Ok(_) if line == "help" => control_help(),
                Ok(extra) if extra.is_empty() => format!("ok {line}\n"),
                Ok(extra) => format!("ok {line} {extra}\n"),
                Err(e) => {
                    self.stats.control_errors += 1;
                    format!("error {e}\n")
                }
            };
            let _ = self.reactor.send(conn, reply.as_bytes());
        }
        ControlRead::Lines(lines)
    }

    /// Applies one control command. Commands (times in milliseconds, every number checked
    /// against its range, printed in the error):
    /// `latency MS [JITTER_MS]`, `delay-reports MS`, `delay-final MS`, `stall MS` (each
    /// 0..=[`FAULT_DELAY_MAX_MS`]), `accept-limit N` (0..=sessions_max), `refuse on|off`,
    /// `drop`, `restart`, `reject-burst N` (a u32), `rate-limit N [WINDOW_MS]` (each account
    /// may send N order messages per window, 0 for no limit; the window 1..=
    /// [`FAULT_DELAY_MAX_MS`], unchanged if not given; beyond it: throttle rejects), `flow N` (events per second,
    /// 0..=[`EVENTS_PER_SEC_MAX`]), `replay-all` (the next login is replayed from sequence 1:
    /// duplicates), `clock-jump SECONDS` (signed, at most [`CLOCK_JUMP_MAX_S`] either way: the
    /// wall clock behind the message timestamps jumps), `saturate N MS` | `saturate off` (more
    /// than N connects, 1..=65535, in a window of MS, 1..=[`FAULT_DELAY_MAX_MS`], all fail),
    /// `md-faults DROP DUP SWAP CROSS` (every n-th book delta to every market-data client
    /// dropped, sent twice, swapped with the next, replaced by one that crosses the book; each
    /// a u32, 0: never), `rest-limit SECOND [MINUTE]` (the REST API's weight per client and second, and per
    /// minute, each 1..=4,294,967,295), `rest-latency MS` (each REST answer waits MS,
    /// 0..=[`FAULT_DELAY_MAX_MS`], from the moment its request is read),
    /// `status`, `help` (the caller answers it with [`control_help`]).
    ///
    /// Hostile-venue commands (docs/operations.md, "A hostile venue"): `lie unknown-fill` |
    /// `lie overfill` | `lie fill-after-close` | `lie zero-fill` (every account is sent an Order
    /// Executed that contradicts what it sent and was told: for UserRefNum 4294967295, never
    /// entered; one share beyond its newest open order's whole quantity; one share of its newest
    /// closed order; zero shares of its newest open order; `lie off-limit-fill`: one share of
    /// it through its limit; answered with the `account:user_ref` pairs lied about), `gap N` (the next login
    /// answer skips N reports, 0..=[`LOGIN_GAP_MAX`]), `login-seq S` (the next Login Accepted
    /// announces sequence S, any u64), `debug-packet N` (a Debug packet with N bytes of text,
    /// 0..=[`DEBUG_TEXT_MAX`], to every logged-in session), `oversize N` (a packet announcing
    /// length N, 1..=65535, whole, to every logged-in session).
    ///
    /// Changing the latency, and `restart`, re-time the messages already held back: none
    /// waits longer than the latency now set (plus its jitter), so one message due far in the
    /// future can never hold order entry up after the fault is lifted.
    ///
    /// Three commands read state instead of changing it: `open-orders` answers the ClOrdIDs of
    /// every account order open at the venue (`N id id ...`), `stats` the exchange counters
    /// (`accepted=.. rejected=.. canceled=.. matches=.. duplicate_ids=..`), `sessions` the
    /// order-entry slots (`logged_in=.. prelogin=.. prelogin_max=.. logins=..
    /// login_timeouts=.. prelogin_evicted=.. sessions_full=..`).
    pub fn apply_control(&mut self, now_ns: u64, line: &str) -> Result<String, String> {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let mut args = ControlArgs { cmd, args: words };
        match cmd {
            "latency" | "delay-reports" | "delay-final" | "accept-limit" | "refuse" | "stall"
            | "saturate" => self.control_fault(now_ns, &mut args),
            "rate-limit" | "reject-burst" | "replay-all" | "clock-jump" | "flow" => {
                self.control_exchange(now_ns, &mut args)
            }
            "md-faults" | "rest-limit" | "rest-latency" => self.control_feeds(now_ns, &mut args),
            "lie" | "gap" | "login-seq" | "debug-packet" | "oversize" => {
                self.control_hostile(now_ns, &mut args)
            }
            "drop" | "restart" | "status" | "help" | "open-orders" | "sessions" | "tls"
            | "stats" => self.control_query(now_ns, &mut args),
            other => Err(format!(
                "unknown command '{other}' (send help for the list of commands)"
            )),
        }
    }

    /// A fault of the session layer (latency, delays, accepts, stall, saturation).
    fn control_fault(&mut self, now_ns: u64, args: &mut Args<'_>) -> Result<String, String> {
        const MS: u64 = 1_000_000;
        let delay_max = FAULT_DELAY_MAX_MS;
        let sessions_max = u64::from(self.config.sessions_max);
        let f = &mut self.config.faults;
        match args.cmd {
            "latency" => {
                let latency = args.num("milliseconds", 0, delay_max)?;
                let jitter = args.optional("jitter", 0, delay_max)?.unwrap_or(0);
                args.end()?;
                f.latency_ns = latency * MS;
                f.jitter_ns = jitter * MS;
                self.retime_delayed(now_ns);
            }
            "delay-reports" => {
                f.report_delay_ns = args.num("milliseconds", 0, delay_max)? * MS;
                args.end()?;
            }
            "delay-final" => {
                f.final_report_delay_ns = args.num("milliseconds", 0, delay_max)? * MS;
                args.end()?;
            }
            "accept-limit" => {
                f.accept_limit = args.num("sessions", 0, sessions_max)? as u32;
                args.end()?;
            }
            "refuse" => {
                match args.args.next() {
                    Some("on") => f.refuse_connects = true,
                    Some("off") => f.refuse_connects = false,
                    other => {
                        let got = other.unwrap_or("nothing");
                        return Err(format!("refuse: expected on|off, got '{got}'"));
                    }
                }
                args.end()?;
            }
            "stall" => {
                let ms = args.num("milliseconds", 0, delay_max)?;
                args.end()?;
                f.stalled_until_ns = now_ns + ms * MS;
            }
            "saturate" => {
                // `saturate N MS` or `saturate off`.
                if args.args.clone().next() == Some("off") {
                    args.args.next();
                    args.end()?;
                    f.saturate_attempts_max = 0;
                } else {
                    let attempts = args.num("attempts", 1, 65_535)? as u32;
                    let window_ms = args.num("milliseconds", 1, delay_max)?;
                    args.end()?;
                    f.saturate_attempts_max = attempts;
                    f.saturate_window_ns = window_ms * MS;
                }
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// A change to the exchange: its rate limit, rejects, replay, clock and flow.
    fn control_exchange(&mut self, _now_ns: u64, args: &mut Args<'_>) -> Result<String, String> {
        const MS: u64 = 1_000_000;
        let delay_max = FAULT_DELAY_MAX_MS;
        match args.cmd {
            "rate-limit" => {
                // Messages per window (0: no limit), and the window in ms (default: as is).
                let messages = args.num("messages", 0, u64::from(u32::MAX))? as u32;
                let (_, window_ns) = self.exchange.rate_limit();
                let window_ms = args
                    .optional("window milliseconds", 1, delay_max)?
                    .unwrap_or(window_ns / MS);
                args.end()?;
                self.exchange
                    .set_rate_limit(messages, window_ms.max(1) * MS);
            }
            "reject-burst" => {
                let n = args.num("orders", 0, u64::from(u32::MAX))? as u32;
                args.end()?;
                self.exchange.reject_burst_remaining = n;
            }
            "replay-all" => {
                args.end()?;
                self.exchange.replay_from_start_once = true;
            }
            "clock-jump" => {
                // Seconds, signed: the venue's wall clock jumps; its monotonic clock does not.
                let w = args.args.next().unwrap_or("");
                let max = CLOCK_JUMP_MAX_S as i64;
                let secs = w
                    .parse::<i64>()
                    .ok()
                    .filter(|s| (-max..=max).contains(s))
                    .ok_or_else(|| {
                        format!("clock-jump: seconds '{w}' is not a whole number in -{max}..={max}")
                    })?;
                args.end()?;
                let delta = secs * 1_000_000_000;
                let offset = &mut self.exchange.wall_offset_ns;
                *offset = offset.wrapping_add(delta as u64);
            }
            "flow" => {
                let rate = args.num("events per second", 0, u64::from(EVENTS_PER_SEC_MAX))?;
                args.end()?;
                self.flow.set_rate(rate).map_err(|e| format!("flow: {e}"))?;
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// A fault of the market-data server or the REST API.
    fn control_feeds(&mut self, _now_ns: u64, args: &mut Args<'_>) -> Result<String, String> {
        const MS: u64 = 1_000_000;
        let delay_max = FAULT_DELAY_MAX_MS;
        let cmd = args.cmd;
        match args.cmd {
            "md-faults" => {
                // Every n-th book delta to every client dropped, doubled, swapped with the
                // next, replaced by a crossing copy (0: never).
                let mut every = [0u32; 4];
                for (n, name) in every.iter_mut().zip(["drop", "duplicate", "swap", "cross"]) {
                    *n = args.num(name, 0, u64::from(u32::MAX))? as u32;
                }
                args.end()?;
                let Some(md) = self.md.as_mut() else {
                    return Err(
                        "md-faults: no market data (the venue runs with --no-market-data)".into(),
                    );
                };
                md.set_faults(super::md_server::MdFaults {
                    drop_every: every[0],
                    duplicate_every: every[1],
                    swap_every: every[2],
                    cross_every: every[3],
                });
            }
            "rest-limit" | "rest-latency" => {
                let Some(rest) = self.rest.as_mut() else {
                    return Err(format!(
                        "{cmd}: no REST API (start the venue with --rest-listen)"
                    ));
                };
                if cmd == "rest-limit" {
                    // Weight per client and second, and per minute (unchanged if not given).
                    let second = args.num("weight per second", 1, u64::from(u32::MAX))? as u32;
                    let minute = args.optional("weight per minute", 1, u64::from(u32::MAX))?;
                    args.end()?;
                    let limits = rest.limits_mut();
                    limits.second_weight = second;
                    if let Some(minute) = minute {
                        limits.minute_weight = minute as u32;
                    }
                } else {
                    let ms = args.num("milliseconds", 0, delay_max)?;
                    args.end()?;
                    rest.set_latency_ns(ms * MS);
                }
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// A hostile-venue command (docs/operations.md, "A hostile venue").
    fn control_hostile(&mut self, now_ns: u64, args: &mut Args<'_>) -> Result<String, String> {
        match args.cmd {
            "lie" => {
                let word = args.args.next().unwrap_or("");
                if word == "position" {
                    let shares = args.num("shares", 1, POSITION_LIE_MAX)?;
                    args.end()?;
                    let told = self.exchange.lie_position(shares);
                    if told.is_empty() {
                        return Err("lie position: no account to lie to".into());
                    }
                    let told: Vec<String> = told.iter().map(u32::to_string).collect();
                    return Ok(told.join(" "));
                }
                let lie = match word {
                    "unknown-fill" => Lie::UnknownFill,
                    "overfill" => Lie::Overfill,
                    "fill-after-close" => Lie::FillAfterClose,
                    "zero-fill" => Lie::ZeroFill,
                    "off-limit-fill" => Lie::OffLimitFill,
                    other => {
                        return Err(format!(
                            "lie: expected unknown-fill|overfill|fill-after-close|zero-fill|\
                             off-limit-fill|position, got '{other}'"
                        ))
                    }
                };
                args.end()?;
                let told = self.exchange.lie(now_ns, lie);
                if told.is_empty() {
                    return Err(format!("lie {word}: no account has an order to lie about"));
                }
                let told: Vec<String> = told.iter().map(|(a, u)| format!("{a}:{u}")).collect();
                return Ok(told.join(" "));
            }
            "gap" => {
                let reports = args.num("reports", 0, LOGIN_GAP_MAX)?;
                args.end()?;
                self.exchange.login_gap_once = reports;
            }
            "login-seq" => {
                let sequence = args.num("sequence", 0, u64::MAX)?;
                args.end()?;
                self.login_seq_once = Some(sequence);
            }
            "debug-packet" => {
                let text = args.num("bytes", 0, DEBUG_TEXT_MAX)?;
                args.end()?;
                let sessions = self.send_long_packet(text as u16 + 1);
                return Ok(format!("sessions={sessions}"));
            }
            "oversize" => {
                let len = args.num("length", 1, u64::from(u16::MAX))?;
                args.end()?;
                let sessions = self.send_long_packet(len as u16);
                return Ok(format!("sessions={sessions}"));
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// The connections (`drop`, `restart`) and the commands that only read state.
    fn control_query(&mut self, now_ns: u64, args: &mut Args<'_>) -> Result<String, String> {
        match args.cmd {
            "drop" => {
                args.end()?;
                self.drop_all();
            }
            "restart" => {
                args.end()?;
                self.drop_all();
                self.retime_delayed(now_ns);
            }
            "status" => args.end()?,
            // Answered by the caller (`control_help`: several lines, then `ok help`).
            "help" => args.end()?,
            "open-orders" => {
                args.end()?;
                let ids: Vec<String> = self
                    .exchange
                    .open_account_orders()
                    .map(|o| {
                        String::from_utf8_lossy(&o.fields.cl_ord_id)
                            .trim()
                            .to_string()
                    })
                    .collect();
                return Ok(format!("{} {}", ids.len(), ids.join(" "))
                    .trim_end()
                    .to_string());
            }
            "sessions" => {
                args.end()?;
                return Ok(self.sessions_line());
            }
            "tls" => {
                args.end()?;
                let md = self.md.as_ref().map(|m| m.tls_stats()).unwrap_or_default();
                return Ok(format!(
                    "rest {}; md {}",
                    tls_line(&self.tls_stats()),
                    tls_line(&md)
                ));
            }
            "stats" => {
                args.end()?;
                let s = self.exchange.stats();
                return Ok(format!(
                    "accepted={} rejected={} canceled={} matches={} duplicate_ids={} \
                     price_rejects={} lies={} stream_full_drops={}",
                    s.accepted,
                    s.rejected,
                    s.canceled,
                    s.matches,
                    s.duplicate_ids,
                    s.price_rejects,
                    s.lies,
                    s.stream_full_drops
                ));
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// The `sessions` answer: order-entry slots in use and what closed or refused them.
    fn sessions_line(&self) -> String {
        let (prelogin, _) = self.prelogin();
        let drops = |r| self.stats.drops.get(&r).copied().unwrap_or(0);
        format!(
            "logged_in={} prelogin={prelogin} prelogin_max={} logins={} login_timeouts={} \
             prelogin_evicted={} sessions_full={}",
            self.sessions.len() as u32 - prelogin,
            self.config.prelogin_max,
            self.stats.logins,
            drops(DropReason::LoginTimeout),
            drops(DropReason::PreLoginEvicted),
            drops(DropReason::SessionsFull)
        )
    }

    /// No held-back message waits past the latency now set: one due far in the future (under
    /// an earlier, longer latency) would otherwise hold every later one behind it. Due times
    /// stay in arrival order (capping a non-decreasing sequence keeps it non-decreasing).
    fn retime_delayed(&mut self, now_ns: u64) {
        let f = self.config.faults;
        let latest_ns = now_ns + f.latency_ns + f.jitter_ns;
        for d in &mut self.delayed {
            d.due_ns = d.due_ns.min(latest_ns);
        }
    }
}

/// Every control command: its syntax and what it does, as `help` answers them (one line each,
/// then `ok help`). A command added to [`VenueServer::apply_control`] gets its line here (the
/// test `control_help_lists_every_command` sends each one).
pub const CONTROL_COMMANDS: [(&str, &str); 33] = [
    (
        "md-faults DROP DUP SWAP CROSS",
        "market data: every n-th book delta dropped, doubled, swapped, crossed (0: never)",
    ),
    (
        "rate-limit N [WINDOW_MS]",
        "each account: N order messages per window (0: none), then throttle rejects",
    ),
    (
        "rest-limit SECOND [MINUTE]",
        "REST API: weight per client and second (and minute), then 429, then 418",
    ),
    (
        "rest-latency MS",
        "REST API: every answer waits MS from its request (0..=60000)",
    ),
    (
        "latency MS [JITTER_MS]",
        "added ack/fill latency, with uniform jitter (0..=60000 ms)",
    ),
    (
        "delay-reports MS",
        "hold every outbound report this long (0..=60000)",
    ),
    (
        "delay-final MS",
        "hold each order's final report, last fill or cancel (0..=60000)",
    ),
    (
        "accept-limit N",
        "most order-entry sessions at once (0: no limit)",
    ),
    ("refuse on|off", "close every new connection at once"),
    ("stall MS", "stop reading from clients for MS (0..=60000)"),
    ("drop", "drop every connection now"),
    (
        "restart",
        "drop every connection; books and sequences are kept",
    ),
    (
        "reject-burst N",
        "reject the next N orders (venue system problem, code 6)",
    ),
    (
        "replay-all",
        "replay the next login from sequence 1 (duplicate reports)",
    ),
    (
        "clock-jump SECONDS",
        "the venue's wall clock (its timestamps) jumps, signed",
    ),
    (
        "saturate N MS | saturate off",
        "more than N connects in an MS window all fail",
    ),
    ("flow N", "synthetic events per second (0 stops the flow)"),
    (
        "lie unknown-fill",
        "an execution for UserRefNum 4294967295, never entered",
    ),
    (
        "lie overfill",
        "an execution 1 share beyond the newest open order's quantity",
    ),
    (
        "lie fill-after-close",
        "an execution of 1 share for the newest closed order",
    ),
    (
        "lie zero-fill",
        "an execution of 0 shares for the newest open order",
    ),
    (
        "lie off-limit-fill",
        "an execution of the newest open order through its limit",
    ),
    (
        "lie position N",
        "N shares bought in the first symbol booked, never reported (1..=1000000000)",
    ),
    (
        "gap N",
        "the next login answer skips N reports (0..=4294967295)",
    ),
    (
        "login-seq S",
        "the next login answer announces sequence S (any u64)",
    ),
    (
        "debug-packet N",
        "a Debug packet with N bytes of text (0..=65534)",
    ),
    (
        "oversize N",
        "a whole packet announcing length N (1..=65535)",
    ),
    (
        "open-orders",
        "the ClOrdIDs of every account order open at the venue",
    ),
    (
        "stats",
        "the exchange's counters (accepted=.. rejected=.. ...)",
    ),
    (
        "sessions",
        "order-entry slots: logged_in=.. prelogin=.. login_timeouts=.. prelogin_evicted=.. ...",
    ),
    (
        "tls",
        "the TLS counters of the REST and market-data listeners (rest handshakes=.. ...; md ...)",
    ),
    ("status", "answer ok (liveness check)"),
    ("help", "this list, one line per command, then ok help"),
];

/// One listener's TLS counters, as the `tls` command says them.
fn tls_line(s: &TlsStats) -> String {
    format!(
        "handshakes={} handshake_failures={} alerts_received={} protocol_errors={} \
         handshake_timeouts={} closed_in_handshake={}",
        s.server_handshakes,
        s.handshake_failures,
        s.alerts_received,
        s.protocol_errors,
        s.handshake_timeouts,
        s.closed_in_handshake
    )
}

/// The answer to `help`: one line per command (syntax, then what it does), then `ok help`, the
/// line every command's answer ends with. No listed line starts `ok ` or `error `.
pub fn control_help() -> String {
    let mut text = String::new();
    for (syntax, meaning) in CONTROL_COMMANDS {
        text.push_str(&format!("{syntax:<30} {meaning}\n"));
    }
    text.push_str("ok help\n");
    text
}

/// What one pass over a control connection found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ControlRead {
    /// This many lines answered.
    Lines(u32),
    /// A line of at least this many bytes with no end within [`CONTROL_LINE_MAX`].
    TooLong(usize),
}

/// A control command's arguments, as [`VenueServer::apply_control`] splits its line.
type Args<'a> = ControlArgs<'a, std::str::SplitWhitespace<'a>>;

/// The arguments of one control command, read in order, each checked against its range.
struct ControlArgs<'a, I: Iterator<Item = &'a str>> {
    cmd: &'a str,
    args: I,
}

impl<'a, I: Iterator<Item = &'a str>> ControlArgs<'a, I> {
    /// The next argument: a whole number in `min..=max`.
    fn num(&mut self, name: &str, min: u64, max: u64) -> Result<u64, String> {
        let cmd = self.cmd;
        self.optional(name, min, max)?
            .ok_or_else(|| format!("{cmd}: missing {name} ({min}..={max})"))
    }

    /// The next argument if there is one: a whole number in `min..=max`.
    fn optional(&mut self, name: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
        let Some(w) = self.args.next() else {
            return Ok(None);
        };
        match w.parse::<u64>() {
            Ok(v) if (min..=max).contains(&v) => Ok(Some(v)),
            Ok(_) => Err(format!(
                "{}: {name} {w} is out of range {min}..={max}",
                self.cmd
            )),
            Err(_) => Err(format!(
                "{}: {name} '{w}' is not a whole number in {min}..={max}",
                self.cmd
            )),
        }
    }

    /// No argument is left.
    fn end(&mut self) -> Result<(), String> {
        match self.args.next() {
            None => Ok(()),
            Some(w) => Err(format!("{}: unexpected argument '{w}'", self.cmd)),
        }
    }
}

/// A REST answer's JSON body for `path?query` (the endpoint already weighed and admitted it).
fn rest_body<T: Transport>(
    path: &str,
    query: &str,
    names: &[String],
    md: Option<&super::md_server::MdServer<T>>,
    reference: i64,
) -> super::rest::Built {
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let scale = keel::order::Price::SCALE;
    let price = |p: i64| format!("{}.{:04}", p / scale, (p % scale).abs());
    if path == "/api/v3/exchangeInfo" {
        let symbols: Vec<_> = names
            .iter()
            .map(|n| serde_json::json!({"symbol": n, "status": "TRADING"}))
            .collect();
        return Ok(serde_json::json!({"symbols": symbols}).to_string());
    }
    let name = param("symbol").ok_or((400, "symbol is required".to_string()))?;
    let symbol = names
        .iter()
        .position(|n| n == name)
        .ok_or_else(|| (404, format!("no symbol {name}")))? as u16;
    let book = md.map(|m| m.book(symbol)).unwrap_or_default();
    match path {
        "/api/v3/ticker" => {
            let bid = book.bids.first().map_or(reference, |l| l.0);
            let ask = book.asks.first().map_or(reference, |l| l.0);
            Ok(serde_json::json!({
                "symbol": name, "bidPrice": price(bid), "askPrice": price(ask),
                "lastUpdateId": book.seq,
            })
            .to_string())
        }
        "/api/v3/depth" => {
            let limit = param("limit")
                .and_then(|v| v.parse().ok())
                .unwrap_or(100usize)
                .min(5_000);
            let side = |levels: &[(i64, u64)]| -> Vec<_> {
                levels
                    .iter()
                    .take(limit)
                    .map(|(p, q)| serde_json::json!([price(*p), q.to_string()]))
                    .collect()
            };
            Ok(serde_json::json!({
                "lastUpdateId": book.seq, "bids": side(&book.bids), "asks": side(&book.asks),
            })
            .to_string())
        }
        _ => {
            // Klines: the venue keeps no candle history; flat one-minute candles at the
            // reference price, as many as asked (at most 1,000), stand in for it.
            let limit = param("limit")
                .and_then(|v| v.parse().ok())
                .unwrap_or(500usize)
                .min(1_000);
            let p = price(reference);
            let candles: Vec<_> = (0..limit as u64)
                .map(|i| serde_json::json!([i * 60_000, p, p, p, p, "0"]))
                .collect();
            Ok(serde_json::Value::from(candles).to_string())
        }
    }
}
