//! The market-data push server: WebSocket over keel's io_uring transport, a book per symbol,
//! and a fan-out in which a slow consumer can never hold up the producer or anyone else.
//!
//! Each event is serialized once — JSON and WebSocket frame header — into a shared log (a
//! ring of bytes sized at start); a subscriber's queue holds only the event's index. Every
//! connection's queue is bounded (`queue_max` messages, plus its transport send buffer). When a
//! queue is full:
//!
//! - `book`: the connection stops receiving deltas for that symbol and gets a fresh snapshot
//!   as soon as it has room again (freshness over completeness; the sequence numbers tell the
//!   client what happened);
//! - `ticker`: never queued — a flag per symbol, and the newest ticker is sent when there is
//!   room (conflated);
//! - `trades`: every trade matters, so an overflow closes the connection with close code 4001
//!   ("slow consumer"), and the client resubscribes.
//!
//! Subscribing to `book` registers the connection first (deltas start queuing at once) and
//! queues a snapshot ahead of them; the snapshot is taken when it is sent, carries its
//! sequence number, and deltas at or below it are not sent. Snapshots are cached per symbol
//! and sequence number, so a thousand clients reconnecting at once cost one serialization per
//! symbol. Each connection has its own ping timer: the server pings a connection only when it
//! has heard nothing from it for `ping_interval_ns` and is not echoing a message to it (never
//! in the middle of the client's traffic; a client that only reads gets its pings behind the
//! data, so the silence rule never closes a healthy reader); a connection silent for
//! `silent_intervals_max` intervals is closed (code 4002) and its subscriptions and queue
//! freed. An opening handshake must be complete
//! within `handshake_timeout_ns` (else 408) and [`ws::HANDSHAKE_MAX`] bytes (else 400).
//!
//! Closing: the close frame is queued behind what the connection already has, and the socket
//! stays open until the frame is written — for up to `close_flush_timeout_ns`, so a reader that
//! stalled for seconds still learns why it was dropped; past that the socket is closed and
//! `close_frames_unsent` counts it. Once written, the server waits for the peer's answering
//! close for at most [`CLOSE_DRAIN_NS`].
//! The path `/echo` is a plain echo endpoint (for conformance testing).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use keel::net::{
    ConnId, ListenerId, NetError, NetEvent, Reactor, ReactorConfig, SocketTransport, Tls,
    TlsConfig, TlsStats, Transport, WaitMode,
};
use keel::proto::md::{self as msg, BookSide, Channel, Request};
use keel::proto::ws::{self, close_code, Decoder, Opcode, Role, WsMessage};

/// Server settings, all bounds fixed at start.
#[derive(Debug, Clone)]
pub struct MdConfig {
    /// Listening address (port 0 picks one).
    pub listen: SocketAddr,
    /// Symbols served, in id order.
    pub symbols: Vec<String>,
    /// Most connections at once (further connects are refused by the transport).
    pub conns_max: u32,
    /// Messages queued per connection before its channels conflate or it is dropped.
    pub queue_max: usize,
    /// Transport send buffer per connection, bytes (a bound on top of `queue_max`).
    pub send_buffer_bytes: u32,
    /// Transport receive buffer per connection, bytes.
    pub recv_buffer_bytes: u32,
    /// Kernel send buffer per connection (SO_SNDBUF), bytes: with the two above, what a
    /// client that stops reading can hold.
    pub socket_send_buffer_bytes: u32,
    /// Largest message a market-data client may send.
    pub max_message: usize,
    /// Largest message on the `/echo` endpoint.
    pub echo_max_message: usize,
    /// `/echo` connections at once (each may hold two messages of `echo_max_message`: the one
    /// being read and the one being echoed); further upgrades to `/echo` get 503.
    pub echo_conns_max: u32,
    /// Subscriptions per connection.
    pub subscriptions_max: usize,
    /// Snapshot requests per connection per second (a burst of this many, refilled per second).
    pub snapshots_per_sec: u32,
    /// Server pings this often.
    pub ping_interval_ns: u64,
    /// Close a connection silent for this many ping intervals.
    pub silent_intervals_max: u32,
    /// An opening handshake must be complete within this long of the connect.
    pub handshake_timeout_ns: u64,
    /// How long a closing connection may take to have its close frame written (behind what
    /// was queued before it) before the socket is closed anyway.
    pub close_flush_timeout_ns: u64,
    /// Bytes of the shared event log.
    pub log_bytes: usize,
    /// Events the shared log indexes (a power of two).
    pub log_events: usize,
    /// How `step` waits.
    pub wait: WaitMode,
    /// Benchmark baseline only: serialize each trade once per subscriber instead of once
    /// (what a server without a shared log does). Off in production.
    pub serialize_per_connection: bool,
    /// Serve `wss://` with this certificate (`keel venue --tls-cert/--tls-key`); `None`:
    /// plaintext `ws://`.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

impl Default for MdConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            symbols: vec!["AAPL".into(), "MSFT".into(), "AMZN".into(), "NVDA".into()],
            conns_max: 1_024,
            queue_max: 1_024,
            send_buffer_bytes: 64 * 1024,
            recv_buffer_bytes: 16 * 1024,
            socket_send_buffer_bytes: 64 * 1024,
            max_message: 4 * 1024,
            echo_max_message: 16 * 1024 * 1024,
            echo_conns_max: 16,
            subscriptions_max: 64,
            snapshots_per_sec: 10,
            ping_interval_ns: 5_000_000_000,
            silent_intervals_max: 3,
            handshake_timeout_ns: 10_000_000_000,
            close_flush_timeout_ns: 30_000_000_000,
            log_bytes: 16 << 20,
            log_events: 1 << 18,
            wait: WaitMode::Blocking,
            serialize_per_connection: false,
            tls: None,
        }
    }
}

/// Faults injected into the book stream every client receives (for drills and tests of feed
/// handlers): every n-th delta (0: never) is dropped (a gap), sent twice, held back and sent
/// after the next one (reordered), or replaced by a copy that crosses the book.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MdFaults {
    /// Drop every n-th delta.
    pub drop_every: u32,
    /// Send every n-th delta twice.
    pub duplicate_every: u32,
    /// Swap every n-th delta with the one after it.
    pub swap_every: u32,
    /// Replace every n-th delta with one that crosses the book (same sequence number).
    pub cross_every: u32,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MdStats {
    /// Connections upgraded to WebSocket.
    pub upgraded: u64,
    /// Handshakes refused (bad request, wrong version, unknown path, too long, too slow).
    pub handshakes_refused: u64,
    /// Of those, handshakes not complete within `handshake_timeout_ns` (answered 408).
    pub handshakes_timed_out: u64,
    /// Pings sent (each to a connection idle for a ping interval).
    pub pings_sent: u64,
    /// Connections closed for a protocol violation.
    pub protocol_errors: u64,
    /// Requests refused with an `error` message.
    pub request_errors: u64,
    /// Events published (each serialized once).
    pub events: u64,
    /// Messages handed to connections.
    pub messages_sent: u64,
    /// Book deltas not queued because the connection was behind (it gets a snapshot).
    pub book_conflated: u64,
    /// Snapshots sent.
    pub snapshots_sent: u64,
    /// Snapshots serialized (the rest came from the cache).
    pub snapshots_built: u64,
    /// Connections closed because their trades backlog overflowed (code 4001).
    pub slow_consumers_dropped: u64,
    /// Connections closed for silence (code 4002).
    pub silent_dropped: u64,
    /// Connections closed, any reason.
    pub closed: u64,
    /// Connections closed before their close frame could be written (the peer read nothing
    /// for `close_flush_timeout_ns`).
    pub close_frames_unsent: u64,
}

/// Send-buffer bytes kept free so that a close frame always fits (a dropped slow consumer is
/// told why).
const CLOSE_RESERVE: usize = 136;

/// How long the server waits for the peer's answering close once its own close frame is
/// written, before it closes the socket.
pub const CLOSE_DRAIN_NS: u64 = 5_000_000_000;

/// The per-connection timers (pings, silence, handshake deadline) are checked at least this
/// often, and at most once per pass.
const TIMER_SCAN_NS: u64 = 10_000_000;

/// A book as levels, best first, at a sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BookView {
    /// (price, quantity), highest first.
    pub bids: Vec<(i64, u64)>,
    /// (price, quantity), lowest first.
    pub asks: Vec<(i64, u64)>,
    /// The last delta applied.
    pub seq: u64,
}

/// One event's place in the shared log.
#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u64,
    len: u32,
    symbol: u16,
    channel: Channel,
    seq: u64,
}

/// The shared log of serialized frames: a byte ring and an index ring.
#[derive(Debug)]
struct Log {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    next: u64,
    end: u64,
}

impl Log {
    fn new(bytes: usize, events: usize) -> Self {
        let empty = Entry {
            start: 0,
            len: 0,
            symbol: 0,
            channel: Channel::Book,
            seq: 0,
        };
        Self {
            bytes: vec![0; bytes],
            entries: vec![empty; events.next_power_of_two()],
            next: 0,
            end: 0,
        }
    }

    fn push(&mut self, frame: &[u8], symbol: u16, channel: Channel, seq: u64) -> u64 {
        let cap = self.bytes.len() as u64;
        let len = frame.len() as u64;
        assert!(len <= cap, "a frame larger than the whole log");
        let mut phys = self.end % cap;
        if phys + len > cap {
            self.end += cap - phys; // frames stay contiguous: skip the tail
            phys = 0;
        }
        let at = phys as usize;
        self.bytes[at..at + frame.len()].copy_from_slice(frame);
        let index = self.next;
        let mask = self.entries.len() as u64 - 1;
        self.entries[(index & mask) as usize] = Entry {
            start: self.end,
            len: frame.len() as u32,
            symbol,
            channel,
            seq,
        };
        self.end += len;
        self.next += 1;
        index
    }

    /// The entry and its bytes, or just the entry if its bytes were overwritten, or nothing
    /// if its index slot was reused.
    fn get(&self, index: u64) -> Option<(Entry, Option<&[u8]>)> {
        let n = self.entries.len() as u64;
        if index >= self.next || index + n < self.next {
            return None;
        }
        let e = self.entries[(index & (n - 1)) as usize];
        let cap = self.bytes.len() as u64;
        if self.end - e.start > cap {
            return Some((e, None));
        }
        let at = (e.start % cap) as usize;
        Some((e, Some(&self.bytes[at..at + e.len as usize])))
    }
}

#[derive(Debug)]
struct SymbolState {
    name: String,
    bids: BTreeMap<i64, u64>,
    asks: BTreeMap<i64, u64>,
    book_seq: u64,
    trade_seq: u64,
    /// Cached snapshot frame and the sequence it is at.
    snapshot: Vec<u8>,
    snapshot_seq: Option<u64>,
    /// The newest ticker frame.
    ticker: Vec<u8>,
    /// Connection slots subscribed, per channel.
    subscribers: [Vec<u32>; 3],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Event(u64),
    Snapshot(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Handshake,
    Market,
    Echo,
    /// Close frame queued: close the socket once it is written and, if the server started
    /// the closing handshake (`await_peer`), once the peer answered it. Until `written`, the
    /// deadline is the flush deadline (the frame still waits behind what the peer has not
    /// read); after, the deadline for the peer's answer. (Closing a socket with bytes still
    /// queued would lose them, the close frame included.)
    Closing {
        deadline_ns: u64,
        await_peer: bool,
        written: bool,
    },
}

#[derive(Debug)]
struct Conn {
    id: ConnId,
    phase: Phase,
    decoder: Option<Decoder>,
    queue: VecDeque<Item>,
    subscriptions: Vec<(u16, Channel)>,
    /// Symbols whose book deltas are suspended until a fresh snapshot is sent.
    stale: Vec<u16>,
    /// Symbols with a newer ticker to send.
    ticker_pending: Vec<u16>,
    /// Per symbol: deltas at or below this sequence are covered by a snapshot sent.
    book_floor: Vec<u64>,
    last_heard_ns: u64,
    /// When the connection was accepted (the handshake deadline counts from here).
    opened_ns: u64,
    /// When the server last pinged it (0: never).
    last_ping_ns: u64,
    snapshot_tokens: u32,
    tokens_at_ns: u64,
    errors: u32,
    /// Highest queue depth seen (for tests and metrics).
    queue_peak: usize,
    /// `/echo`: the message being echoed.
    echo: Option<EchoOut>,
}

#[derive(Debug)]
struct EchoOut {
    op: Opcode,
    payload: Vec<u8>,
    sent: usize,
    /// A message is (partly) still to be written.
    active: bool,
}

impl Conn {
    fn echo_busy(&self) -> bool {
        self.echo.as_ref().is_some_and(|e| e.active)
    }
}

/// The market-data server. See the module docs. Runs on either socket transport (the io_uring
/// [`Reactor`] by default, or [`keel::net::EpollReactor`]: [`MdServer::open`]).
#[derive(Debug)]
pub struct MdServer<T: Transport = Reactor> {
    config: MdConfig,
    /// The transport, under a TLS layer that is empty (every call passes through) unless
    /// `tls` is set.
    reactor: Tls<T>,
    listener: ListenerId,
    local: SocketAddr,
    conns: Vec<Option<Conn>>,
    symbols: Vec<SymbolState>,
    log: Log,
    events: Vec<NetEvent>,
    scratch: Vec<u8>,
    frame: Vec<u8>,
    inbox: Vec<u8>,
    /// Connections to drop after a fan-out pass (allocated at start).
    dropping: Vec<ConnId>,
    next_ping_ns: u64,
    stats: MdStats,
    faults: MdFaults,
    /// Deltas published (for the faults' every-n-th counting).
    delta_count: u64,
    /// Something was published since the last pump.
    published: bool,
    /// A delta held back by the swap fault.
    held: Option<(u16, u64)>,
    /// The bus every event is also published on (`keel venue --nats`), and per symbol whether
    /// an event was lost to a full ring (a snapshot follows once there is room).
    bus: Option<(rtrb::Producer<super::bus::BusEvent>, Vec<bool>)>,
    /// Rung once per pass that pushed events to the bus (wakes the bus thread).
    bus_doorbell: Option<std::sync::Arc<tokio::sync::Notify>>,
    /// Events pushed since the doorbell last rang.
    bus_pushed: bool,
    /// Events the bus ring had no room for.
    bus_lost: u64,
}

fn json_frame(json: &[u8], frame: &mut Vec<u8>) {
    frame.resize(ws::header_len(json.len(), false) + json.len(), 0);
    let n = ws::encode_frame(frame, true, Opcode::Text, json, None);
    frame.truncate(n);
}

impl MdServer {
    /// Binds and allocates every buffer, on the io_uring transport.
    pub fn new(config: MdConfig) -> Result<Self, NetError> {
        Self::open(config)
    }
}

impl<T: SocketTransport> MdServer<T> {
    /// Binds and allocates every buffer, on the socket transport `T`.
    pub fn open(config: MdConfig) -> Result<Self, NetError> {
        let inner = T::open(ReactorConfig {
            conns_max: config.conns_max,
            send_buffer_bytes: config.send_buffer_bytes,
            recv_buffer_bytes: config.recv_buffer_bytes,
            ring_entries: config
                .conns_max
                .saturating_mul(2)
                .min(32_768)
                .next_power_of_two()
                .clamp(256, 32_768),
            wait: config.wait,
            socket_send_buffer: Some(config.socket_send_buffer_bytes),
            ..ReactorConfig::default()
        })?;
        let mut reactor = Tls::new(
            inner,
            TlsConfig {
                client: None,
                server: config.tls.clone(),
                plaintext_buffer_bytes: config.recv_buffer_bytes,
                send_buffer_bytes: config.send_buffer_bytes,
                handshake_timeout_ns: config.handshake_timeout_ns,
            },
        );
        let (listener, local) = match config.tls {
            Some(_) => reactor.listen_tls(config.listen)?,
            None => reactor.listen(config.listen)?,
        };
        let symbols = config
            .symbols
            .iter()
            .map(|name| SymbolState {
                name: name.clone(),
                bids: BTreeMap::new(),
                asks: BTreeMap::new(),
                book_seq: 0,
                trade_seq: 0,
                snapshot: Vec::with_capacity(4_096),
                snapshot_seq: None,
                ticker: Vec::with_capacity(256),
                subscribers: [
                    Vec::with_capacity(config.conns_max as usize),
                    Vec::with_capacity(config.conns_max as usize),
                    Vec::with_capacity(config.conns_max as usize),
                ],
            })
            .collect();
        Ok(Self {
            log: Log::new(config.log_bytes, config.log_events),
            conns: (0..config.conns_max).map(|_| None).collect(),
            reactor,
            listener,
            local,
            symbols,
            events: Vec::with_capacity(1_024),
            scratch: Vec::with_capacity(64 * 1024),
            frame: Vec::with_capacity(64 * 1024),
            inbox: Vec::with_capacity(config.recv_buffer_bytes as usize),
            dropping: Vec::with_capacity(config.conns_max as usize),
            next_ping_ns: 0,
            stats: MdStats::default(),
            faults: MdFaults::default(),
            delta_count: 0,
            published: false,
            held: None,
            bus: None,
            bus_doorbell: None,
            bus_pushed: false,
            bus_lost: 0,
            config,
        })
    }
}

impl<T: Transport> MdServer<T> {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Publishes every book delta and trade on the bus too, through `ring` (docs/market-data.md,
    /// "Scaling out"); a snapshot of every book goes first.
    pub fn attach_bus(
        &mut self,
        ring: rtrb::Producer<super::bus::BusEvent>,
        doorbell: std::sync::Arc<tokio::sync::Notify>,
    ) {
        self.bus = Some((ring, vec![true; self.symbols.len()]));
        self.bus_doorbell = Some(doorbell);
        self.bus_snapshots();
    }

    /// Events the bus ring had no room for (each symbol then resyncs by a snapshot).
    pub fn bus_lost(&self) -> u64 {
        self.bus_lost
    }

    /// Pushes a snapshot of every symbol marked lost, while the ring has room.
    fn bus_snapshots(&mut self) {
        let Some((ring, lost)) = self.bus.as_mut() else {
            return;
        };
        for (i, s) in self.symbols.iter().enumerate() {
            if !lost[i] || ring.slots() == 0 {
                continue;
            }
            let event = super::bus::BusEvent::Snapshot {
                symbol: i as u16,
                seq: s.book_seq,
                trade_seq: s.trade_seq,
                bids: s.bids.iter().rev().map(|(p, q)| (*p, *q)).collect(),
                asks: s.asks.iter().map(|(p, q)| (*p, *q)).collect(),
            };
            if ring.push(event).is_ok() {
                lost[i] = false;
                self.bus_pushed = true;
            }
        }
    }

    /// One event onto the bus, or the symbol marked lost.
    fn to_bus(&mut self, symbol: u16, event: super::bus::BusEvent) {
        let Some((ring, lost)) = self.bus.as_mut() else {
            return;
        };
        let i = usize::from(symbol);
        if lost[i] || ring.push(event).is_err() {
            lost[i] = true;
            self.bus_lost += 1;
        } else {
            self.bus_pushed = true;
        }
    }

    /// A gateway's delta from the bus: the level of `symbol` now holds `qty`, at book sequence
    /// `seq`, which must be the next (else nothing changes and the caller resyncs). Published
    /// to this server's clients as the venue's own delta.
    pub fn apply_delta(
        &mut self,
        symbol: u16,
        seq: u64,
        side: BookSide,
        price: i64,
        qty: u64,
    ) -> Result<(), u64> {
        let s = &mut self.symbols[usize::from(symbol)];
        if s.book_seq.checked_add(1) != Some(seq) {
            return Err(s.book_seq);
        }
        let levels = match side {
            BookSide::Bid => &mut s.bids,
            BookSide::Ask => &mut s.asks,
        };
        // A delta that changes nothing still moves the sequence (the venue published it).
        if levels.get(&price).copied().unwrap_or(0) == qty {
            if qty == 0 {
                levels.insert(price, 1);
            } else {
                levels.remove(&price);
            }
        }
        s.book_seq = seq - 1;
        self.update_level(symbol, side, price, qty);
        Ok(())
    }

    /// A gateway's trade from the bus, numbered `seq` (a gap in the numbering is passed on as
    /// it is: clients see it by the sequence).
    pub fn apply_trade(
        &mut self,
        now_ns: u64,
        symbol: u16,
        seq: u64,
        price: i64,
        qty: u64,
        buy: bool,
    ) {
        self.symbols[usize::from(symbol)].trade_seq = seq.saturating_sub(1);
        self.trade(now_ns, symbol, price, qty, buy);
    }

    /// A gateway's snapshot from the bus: the book of `symbol` becomes it, at `seq`; every
    /// client subscribed to the book gets it as a fresh snapshot (a resync, never a hole).
    pub fn load_snapshot(
        &mut self,
        symbol: u16,
        seq: u64,
        trade_seq: u64,
        bids: &[(i64, u64)],
        asks: &[(i64, u64)],
    ) {
        let s = &mut self.symbols[usize::from(symbol)];
        s.bids = bids.iter().copied().filter(|l| l.1 > 0).collect();
        s.asks = asks.iter().copied().filter(|l| l.1 > 0).collect();
        s.book_seq = seq;
        s.trade_seq = s.trade_seq.max(trade_seq);
        s.snapshot_seq = None;
        for &slot in &s.subscribers[Channel::Book.index()] {
            if let Some(c) = self.conns[slot as usize].as_mut() {
                if !c.stale.contains(&symbol) {
                    c.stale.push(symbol);
                }
            }
        }
        self.published = true;
        self.publish_ticker(symbol);
    }

    /// Symbols served.
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// Whether the listener serves TLS (`wss://`).
    pub fn is_tls(&self) -> bool {
        self.reactor.is_tls_listener(self.listener)
    }

    /// The TLS layer's counters (all zero without TLS).
    pub fn tls_stats(&self) -> TlsStats {
        self.reactor.stats()
    }

    /// Changes the injected faults (all zero: a clean feed).
    pub fn set_faults(&mut self, faults: MdFaults) {
        self.faults = faults;
        if faults.swap_every == 0 {
            if let Some((symbol, index)) = self.held.take() {
                self.enqueue_delta(symbol, index);
            }
        }
    }

    /// Counters.
    pub fn stats(&self) -> MdStats {
        self.stats
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.iter().flatten().count()
    }

    /// The largest queue depth any open connection has reached, and the configured bound.
    pub fn queue_peak(&self) -> (usize, usize) {
        let peak = self.conns.iter().flatten().map(|c| c.queue_peak).max();
        (peak.unwrap_or(0), self.config.queue_max)
    }

    /// The server's view of a symbol's book.
    pub fn book(&self, symbol: u16) -> BookView {
        let s = &self.symbols[usize::from(symbol)];
        BookView {
            bids: s.bids.iter().rev().map(|(p, q)| (*p, *q)).collect(),
            asks: s.asks.iter().map(|(p, q)| (*p, *q)).collect(),
            seq: s.book_seq,
        }
    }

    /// Shares at a level of the server's book (0: none).
    pub fn level_qty(&self, symbol: u16, side: BookSide, price: i64) -> u64 {
        let s = &self.symbols[usize::from(symbol)];
        let levels = match side {
            BookSide::Bid => &s.bids,
            BookSide::Ask => &s.asks,
        };
        levels.get(&price).copied().unwrap_or(0)
    }

    /// Trades published for a symbol.
    pub fn trade_seq(&self, symbol: u16) -> u64 {
        self.symbols[usize::from(symbol)].trade_seq
    }

    // ----- publishing ----------------------------------------------------------------------

    /// A level of `symbol` now holds `qty` (0: the level is gone). Publishes a delta with the
    /// next book sequence number (and a ticker if the top of book moved).
    pub fn update_level(&mut self, symbol: u16, side: BookSide, price: i64, qty: u64) {
        let s = &mut self.symbols[usize::from(symbol)];
        let levels = match side {
            BookSide::Bid => &mut s.bids,
            BookSide::Ask => &mut s.asks,
        };
        let before = levels.get(&price).copied().unwrap_or(0);
        if before == qty {
            return;
        }
        let top_before = top(s);
        let levels = match side {
            BookSide::Bid => &mut s.bids,
            BookSide::Ask => &mut s.asks,
        };
        if qty == 0 {
            levels.remove(&price);
        } else {
            levels.insert(price, qty);
        }
        s.book_seq += 1;
        let seq = s.book_seq;
        if self.bus.is_some() {
            let event = super::bus::BusEvent::Delta {
                symbol,
                seq,
                side,
                price,
                qty,
            };
            self.to_bus(symbol, event);
        }
        let s = &self.symbols[usize::from(symbol)];
        self.scratch.clear();
        msg::write_delta(&mut self.scratch, &s.name, seq, side, price, qty);
        json_frame(&self.scratch, &mut self.frame);
        let index = self.log.push(&self.frame, symbol, Channel::Book, seq);
        self.stats.events += 1;
        self.published = true;
        let top_now = top(s);
        self.delta_count += 1;
        let n = self.delta_count;
        let every = |k: u32| k > 0 && n % u64::from(k) == 0;
        let f = self.faults;
        if every(f.drop_every) {
            // The server's book moved; nobody hears of it: a gap.
        } else if every(f.cross_every) && (top_now.0 .1 > 0 && top_now.1 .1 > 0) {
            // The same sequence number, with a level that crosses the book.
            let (side, price) = match side {
                BookSide::Bid => (BookSide::Bid, top_now.1 .0),
                BookSide::Ask => (BookSide::Ask, top_now.0 .0),
            };
            let s = &self.symbols[usize::from(symbol)];
            self.scratch.clear();
            msg::write_delta(&mut self.scratch, &s.name, seq, side, price, 1);
            json_frame(&self.scratch, &mut self.frame);
            let bad = self.log.push(&self.frame, symbol, Channel::Book, seq);
            self.enqueue_delta(symbol, bad);
        } else if every(f.swap_every) && self.held.is_none() {
            self.held = Some((symbol, index));
        } else {
            self.enqueue_delta(symbol, index);
            if every(f.duplicate_every) {
                self.enqueue_delta(symbol, index);
            }
            if let Some((held_symbol, held)) = self.held.take() {
                self.enqueue_delta(held_symbol, held);
            }
        }
        if top_now != top_before {
            self.publish_ticker(symbol);
        }
    }

    /// Queues a book delta (by log index) for every subscriber of the symbol.
    fn enqueue_delta(&mut self, symbol: u16, index: u64) {
        let s = &self.symbols[usize::from(symbol)];
        let (conns, stats) = (&mut self.conns, &mut self.stats);
        for &slot in &s.subscribers[Channel::Book.index()] {
            let Some(c) = conns[slot as usize].as_mut() else {
                continue;
            };
            if c.stale.contains(&symbol) {
                continue;
            }
            if c.queue.len() >= self.config.queue_max {
                c.stale.push(symbol);
                stats.book_conflated += 1;
                continue;
            }
            c.queue.push_back(Item::Event(index));
            c.queue_peak = c.queue_peak.max(c.queue.len());
        }
    }

    fn publish_ticker(&mut self, symbol: u16) {
        let s = &mut self.symbols[usize::from(symbol)];
        let (bid, ask) = top(s);
        self.scratch.clear();
        msg::write_ticker(&mut self.scratch, &s.name, s.book_seq, bid, ask);
        json_frame(&self.scratch, &mut s.ticker);
        for &slot in &s.subscribers[Channel::Ticker.index()] {
            if let Some(c) = self.conns[slot as usize].as_mut() {
                if !c.ticker_pending.contains(&symbol) {
                    c.ticker_pending.push(symbol);
                }
            }
        }
    }

    /// A trade in `symbol`; `buy`: the aggressor bought.
    pub fn trade(&mut self, now_ns: u64, symbol: u16, price: i64, qty: u64, buy: bool) {
        let s = &mut self.symbols[usize::from(symbol)];
        s.trade_seq += 1;
        let seq = s.trade_seq;
        if self.bus.is_some() {
            let event = super::bus::BusEvent::Trade {
                symbol,
                seq,
                price,
                qty,
                buy,
            };
            self.to_bus(symbol, event);
        }
        let s = &self.symbols[usize::from(symbol)];
        self.scratch.clear();
        msg::write_trade(&mut self.scratch, &s.name, seq, price, qty, buy);
        json_frame(&self.scratch, &mut self.frame);
        let index = self.log.push(&self.frame, symbol, Channel::Trades, seq);
        self.stats.events += 1;
        self.published = true;
        let mut overflowed = std::mem::take(&mut self.dropping);
        overflowed.clear();
        for &slot in &s.subscribers[Channel::Trades.index()] {
            let Some(c) = self.conns[slot as usize].as_mut() else {
                continue;
            };
            if !matches!(c.phase, Phase::Market) {
                continue;
            }
            if c.queue.len() >= self.config.queue_max {
                overflowed.push(c.id);
                continue;
            }
            let index = if self.config.serialize_per_connection {
                self.scratch.clear();
                msg::write_trade(&mut self.scratch, &s.name, seq, price, qty, buy);
                json_frame(&self.scratch, &mut self.frame);
                self.log.push(&self.frame, symbol, Channel::Trades, seq)
            } else {
                index
            };
            c.queue.push_back(Item::Event(index));
            c.queue_peak = c.queue_peak.max(c.queue.len());
        }
        for &id in &overflowed {
            self.stats.slow_consumers_dropped += 1;
            self.fail(
                now_ns,
                id,
                close_code::SLOW_CONSUMER,
                "slow consumer: trades backlog full",
            );
        }
        self.dropping = overflowed;
    }

    // ----- the loop ------------------------------------------------------------------------

    /// One pass: accept, read, answer, fan out, ping, expire. Waits up to `timeout_ns` for
    /// network events in `Blocking` mode.
    pub fn step(&mut self, now_ns: u64, timeout_ns: u64) -> Result<(), NetError> {
        if self
            .bus
            .as_ref()
            .is_some_and(|(_, lost)| lost.contains(&true))
        {
            self.bus_snapshots();
        }
        // What was published since the last pass leaves before this pass waits.
        if self.published {
            self.published = false;
            for slot in 0..self.conns.len() {
                self.pump(now_ns, slot);
            }
            self.reactor.flush()?;
        }
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        self.reactor.poll(now_ns, timeout_ns, &mut events)?;
        for e in &events {
            match *e {
                NetEvent::Accepted { listener, conn } if listener == self.listener => {
                    self.conns[conn.slot() as usize] = Some(Conn {
                        id: conn,
                        phase: Phase::Handshake,
                        decoder: None,
                        queue: VecDeque::with_capacity(self.config.queue_max),
                        subscriptions: Vec::with_capacity(self.config.subscriptions_max),
                        stale: Vec::with_capacity(self.symbols.len()),
                        ticker_pending: Vec::with_capacity(self.symbols.len()),
                        book_floor: vec![0; self.symbols.len()],
                        last_heard_ns: now_ns,
                        opened_ns: now_ns,
                        last_ping_ns: 0,
                        snapshot_tokens: self.config.snapshots_per_sec,
                        tokens_at_ns: now_ns,
                        errors: 0,
                        queue_peak: 0,
                        echo: None,
                    });
                }
                NetEvent::Readable { conn } => self.read(now_ns, conn),
                NetEvent::Closed { conn, .. } => self.forget(conn),
                _ => {}
            }
        }
        self.events = events;
        for slot in 0..self.conns.len() {
            self.pump(now_ns, slot);
        }
        if now_ns >= self.next_ping_ns {
            self.next_ping_ns = now_ns + (self.config.ping_interval_ns / 4).min(TIMER_SCAN_NS);
            self.ping_and_expire(now_ns);
        }
        self.reactor.flush()
    }

    /// Open `/echo` connections.
    fn echo_conns(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.phase == Phase::Echo)
            .count()
    }

    fn live(&mut self, conn: ConnId) -> Option<&mut Conn> {
        self.conns[conn.slot() as usize]
            .as_mut()
            .filter(|c| c.id == conn)
    }

    fn read(&mut self, now_ns: u64, conn: ConnId) {
        let Some(c) = self.live(conn) else {
            return;
        };
        c.last_heard_ns = now_ns;
        let phase = c.phase;
        match phase {
            Phase::Handshake => self.handshake(now_ns, conn),
            Phase::Market | Phase::Echo => self.frames(now_ns, conn),
            Phase::Closing { await_peer, .. } => {
                // Discard what the peer still sends, watching for its close frame.
                let mut answered = !await_peer;
                self.inbox.clear();
                self.inbox.extend_from_slice(self.reactor.received(conn));
                if let Some(decoder) = self.conns[conn.slot() as usize]
                    .as_mut()
                    .filter(|c| c.id == conn)
                    .and_then(|c| c.decoder.as_mut())
                {
                    let mut at = 0;
                    while !answered {
                        match decoder.decode(&self.inbox[at..]) {
                            Ok((_, Some(WsMessage::Close { .. }))) | Err(_) => answered = true,
                            Ok((0, None)) => break,
                            Ok((used, _)) => at += used,
                        }
                    }
                }
                let n = self.reactor.received(conn).len();
                self.reactor.consume(conn, n);
                if let Some(Conn {
                    phase: Phase::Closing { await_peer, .. },
                    ..
                }) = self.live(conn)
                {
                    *await_peer = !answered;
                }
            }
        }
    }

    fn handshake(&mut self, now_ns: u64, conn: ConnId) {
        let parsed = ws::parse_request(self.reactor.received(conn));
        match parsed {
            Ok(None) => {}
            Ok(Some((req, used))) => {
                self.reactor.consume(conn, used);
                let (phase, max) = match req.path.as_str() {
                    "/" | "/md" => (Phase::Market, self.config.max_message),
                    "/echo" if self.echo_conns() >= self.config.echo_conns_max as usize => {
                        // Each echo connection may hold 2 x echo_max_message: their number is
                        // what bounds the memory clients can make the server hold.
                        self.stats.handshakes_refused += 1;
                        let _ = self.reactor.send(
                            conn,
                            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
                        );
                        self.close_after_flush(conn, now_ns);
                        return;
                    }
                    "/echo" => (Phase::Echo, self.config.echo_max_message),
                    _ => {
                        self.stats.handshakes_refused += 1;
                        let _ = self
                            .reactor
                            .send(conn, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                        self.close_after_flush(conn, now_ns);
                        return;
                    }
                };
                let answer = ws::response(&req.key);
                if self.reactor.send(conn, answer.as_bytes()).is_err() {
                    self.reactor.close(conn);
                    return;
                }
                self.stats.upgraded += 1;
                if let Some(c) = self.live(conn) {
                    c.phase = phase;
                    c.decoder = Some(Decoder::new(Role::Server, max));
                }
                // Frames may have arrived with the handshake.
                if !self.reactor.received(conn).is_empty() {
                    self.frames(now_ns, conn);
                }
            }
            Err(e) => {
                self.stats.handshakes_refused += 1;
                let _ = self.reactor.send(conn, e.response().as_bytes());
                self.close_after_flush(conn, now_ns);
            }
        }
    }

    /// Decodes every whole frame received and acts on it.
    fn frames(&mut self, now_ns: u64, conn: ConnId) {
        loop {
            self.inbox.clear();
            self.inbox.extend_from_slice(self.reactor.received(conn));
            if self.inbox.is_empty() {
                return;
            }
            let Some(c) = self.conns[conn.slot() as usize]
                .as_mut()
                .filter(|c| c.id == conn)
            else {
                return;
            };
            let echo = c.phase == Phase::Echo;
            if c.echo_busy() {
                return; // the previous echo is still going out
            }
            let Some(decoder) = c.decoder.as_mut() else {
                return;
            };
            // Decode one message; copy what is needed out of the decoder before acting.
            let (used, action) = match decoder.decode(&self.inbox) {
                Err(e) => {
                    self.stats.protocol_errors += 1;
                    let reason = e.to_string();
                    self.fail(now_ns, conn, e.close_code(), &reason);
                    return;
                }
                Ok((used, msg)) => {
                    self.scratch.clear();
                    let action = match msg {
                        None => None,
                        Some(WsMessage::Text(t)) => {
                            self.scratch.extend_from_slice(t.as_bytes());
                            Some(Opcode::Text)
                        }
                        Some(WsMessage::Binary(b)) => {
                            self.scratch.extend_from_slice(b);
                            Some(Opcode::Binary)
                        }
                        Some(WsMessage::Ping(p)) => {
                            self.scratch.extend_from_slice(p);
                            Some(Opcode::Ping)
                        }
                        Some(WsMessage::Pong(_)) => None,
                        Some(WsMessage::Close { code, .. }) => {
                            if let Some(code) = code {
                                self.scratch.extend_from_slice(&code.to_be_bytes());
                            }
                            Some(Opcode::Close)
                        }
                    };
                    (used, action)
                }
            };
            self.reactor.consume(conn, used);
            match action {
                None if used == 0 => return,
                None => {}
                Some(Opcode::Ping) => {
                    let payload = std::mem::take(&mut self.scratch);
                    self.send_frame(conn, Opcode::Pong, &payload);
                    self.scratch = payload;
                }
                Some(Opcode::Close) => {
                    // Answer the close (echoing its code) and close once it is written.
                    let payload = std::mem::take(&mut self.scratch);
                    self.send_frame(conn, Opcode::Close, &payload);
                    self.scratch = payload;
                    self.close_after_flush(conn, now_ns);
                    return;
                }
                Some(op @ (Opcode::Text | Opcode::Binary)) if echo => {
                    // Echoed in frames that fit the send buffer, over as many passes as it
                    // takes; nothing more is read from this connection until it is out.
                    if let Some(c) = self.conns[conn.slot() as usize]
                        .as_mut()
                        .filter(|c| c.id == conn)
                    {
                        let out = c.echo.get_or_insert_with(|| EchoOut {
                            op,
                            payload: Vec::new(),
                            sent: 0,
                            active: false,
                        });
                        out.op = op;
                        out.sent = 0;
                        out.active = true;
                        out.payload.clear();
                        out.payload.extend_from_slice(&self.scratch);
                    }
                    self.pump_echo(conn);
                    if self.live(conn).is_some_and(|c| c.echo_busy()) {
                        return;
                    }
                }
                Some(Opcode::Binary) => {
                    self.notice(conn, "error", "binary messages are not accepted");
                }
                Some(_) => {
                    // A market-data request (text the decoder checked as UTF-8).
                    let text = std::mem::take(&mut self.scratch);
                    self.request(now_ns, conn, std::str::from_utf8(&text).unwrap_or(""));
                    self.scratch = text;
                }
            }
        }
    }

    /// Writes as much of the pending echo as the send buffer takes, as fragments.
    fn pump_echo(&mut self, conn: ConnId) {
        let cap = self.config.send_buffer_bytes as usize;
        loop {
            let free = cap.saturating_sub(self.reactor.send_pending(conn) as usize);
            let Some(out) = self.conns[conn.slot() as usize]
                .as_mut()
                .filter(|c| c.id == conn)
                .and_then(|c| c.echo.as_mut())
            else {
                return;
            };
            if !out.active {
                return;
            }
            let left = out.payload.len() - out.sent;
            let first = out.sent == 0;
            if free < 64 {
                return;
            }
            let chunk = left.min(free - 14);
            let fin = chunk == left;
            let op = if first { out.op } else { Opcode::Continuation };
            let body = &out.payload[out.sent..out.sent + chunk];
            self.frame.resize(ws::header_len(chunk, false) + chunk, 0);
            let n = ws::encode_frame(&mut self.frame, fin, op, body, None);
            if self.reactor.send(conn, &self.frame[..n]).is_err() {
                self.reactor.close(conn);
                return;
            }
            out.sent += chunk;
            if fin {
                out.active = false;
                return;
            }
        }
    }

    fn send_frame(&mut self, conn: ConnId, op: Opcode, payload: &[u8]) {
        self.frame
            .resize(ws::header_len(payload.len(), false) + payload.len(), 0);
        let n = ws::encode_frame(&mut self.frame, true, op, payload, None);
        if self.reactor.send(conn, &self.frame[..n]).is_err() {
            // The peer does not read: it cannot be answered; drop it.
            self.reactor.close(conn);
        }
    }

    fn notice(&mut self, conn: ConnId, kind: &str, detail: &str) {
        let mut json = Vec::with_capacity(64 + detail.len());
        msg::write_notice(&mut json, kind, detail);
        self.send_frame(conn, Opcode::Text, &json);
    }

    fn symbol_id(&self, name: &str) -> Option<u16> {
        self.symbols
            .iter()
            .position(|s| s.name == name)
            .map(|i| i as u16)
    }

    fn request(&mut self, now_ns: u64, conn: ConnId, text: &str) {
        let refuse = |server: &mut Self, detail: String| {
            server.stats.request_errors += 1;
            server.notice(conn, "error", &detail);
            let too_many = server.live(conn).is_some_and(|c| {
                c.errors += 1;
                c.errors > 20
            });
            if too_many {
                server.fail(now_ns, conn, close_code::POLICY, "too many bad requests");
            }
        };
        // Only too frequent (snapshots over the rate): refused, not counted towards closing.
        let throttle = |server: &mut Self, detail: String| {
            server.stats.request_errors += 1;
            server.notice(conn, "error", &detail);
        };
        let request = match msg::parse_request(text) {
            Ok(r) => r,
            Err(e) => return refuse(self, e.to_string()),
        };
        let (Request::Subscribe { symbol, .. }
        | Request::Unsubscribe { symbol, .. }
        | Request::Snapshot { symbol }) = &request;
        let Some(sym) = self.symbol_id(symbol) else {
            return refuse(self, format!("unknown symbol {symbol:?}"));
        };
        let slot = conn.slot();
        let subs_max = self.config.subscriptions_max;
        let per_sec = self.config.snapshots_per_sec;
        match request {
            Request::Subscribe { channel, .. } => {
                let Some(c) = self.live(conn) else { return };
                if c.subscriptions.contains(&(sym, channel)) {
                    return refuse(
                        self,
                        format!("already subscribed to {} {symbol}", channel.name()),
                    );
                }
                if c.subscriptions.len() >= subs_max {
                    return refuse(
                        self,
                        format!("at most {subs_max} subscriptions per connection"),
                    );
                }
                c.subscriptions.push((sym, channel));
                if channel == Channel::Book {
                    // Registered first, so deltas queue from now on; the snapshot goes ahead.
                    c.queue.push_back(Item::Snapshot(sym));
                }
                if channel == Channel::Ticker && !c.ticker_pending.contains(&sym) {
                    c.ticker_pending.push(sym);
                }
                self.symbols[usize::from(sym)].subscribers[channel.index()].push(slot);
                let detail = format!("{} {symbol}", channel.name());
                self.notice(conn, "subscribed", &detail);
            }
            Request::Unsubscribe { channel, .. } => {
                let Some(c) = self.live(conn) else { return };
                let Some(at) = c.subscriptions.iter().position(|s| *s == (sym, channel)) else {
                    return refuse(
                        self,
                        format!("not subscribed to {} {symbol}", channel.name()),
                    );
                };
                c.subscriptions.swap_remove(at);
                c.stale.retain(|s| *s != sym || channel != Channel::Book);
                self.symbols[usize::from(sym)].subscribers[channel.index()].retain(|s| *s != slot);
                let detail = format!("{} {symbol}", channel.name());
                self.notice(conn, "unsubscribed", &detail);
            }
            Request::Snapshot { .. } => {
                let Some(c) = self.live(conn) else { return };
                let refill = now_ns.saturating_sub(c.tokens_at_ns) / 1_000_000_000;
                if refill > 0 {
                    c.snapshot_tokens = per_sec;
                    c.tokens_at_ns = now_ns;
                }
                if c.snapshot_tokens == 0 {
                    return throttle(
                        self,
                        format!("at most {per_sec} snapshot requests per second"),
                    );
                }
                c.snapshot_tokens -= 1;
                if !c.stale.contains(&sym) {
                    c.stale.push(sym);
                }
            }
        }
    }

    /// The symbol's snapshot frame at its current sequence (built once per sequence).
    fn snapshot(&mut self, sym: u16) -> u64 {
        let s = &mut self.symbols[usize::from(sym)];
        if s.snapshot_seq != Some(s.book_seq) {
            self.scratch.clear();
            msg::write_snapshot(
                &mut self.scratch,
                &s.name,
                s.book_seq,
                s.bids.iter().rev(),
                s.asks.iter(),
            );
            json_frame(&self.scratch, &mut s.snapshot);
            s.snapshot_seq = Some(s.book_seq);
            self.stats.snapshots_built += 1;
        }
        s.book_seq
    }

    /// Moves a connection's queue into its transport buffer while there is room.
    fn pump(&mut self, now_ns: u64, slot: usize) {
        let Some(c) = self.conns[slot].as_ref() else {
            return;
        };
        let id = c.id;
        match c.phase {
            Phase::Market => {}
            Phase::Closing {
                deadline_ns,
                await_peer,
                written,
            } => {
                let flushed = self.reactor.send_pending(id) == 0;
                match (written, flushed, await_peer) {
                    (_, true, false) => self.reactor.close(id),
                    (false, true, true) => {
                        // The close frame is out: now wait (a bounded time) for the answer.
                        if let Some(c) = self.conns[slot].as_mut() {
                            c.phase = Phase::Closing {
                                deadline_ns: now_ns + CLOSE_DRAIN_NS,
                                await_peer,
                                written: true,
                            };
                        }
                    }
                    (false, false, _) if now_ns >= deadline_ns => {
                        // The peer read nothing for the whole flush time: it never gets the
                        // close frame; counted.
                        self.stats.close_frames_unsent += 1;
                        self.reactor.close(id);
                    }
                    (true, _, true) if now_ns >= deadline_ns => self.reactor.close(id),
                    _ => {}
                }
                return;
            }
            Phase::Echo => {
                let busy = self.conns[slot].as_ref().is_some_and(Conn::echo_busy);
                self.pump_echo(id);
                // Done with the message: read what waited behind it.
                if busy && !self.conns[slot].as_ref().is_some_and(Conn::echo_busy) {
                    self.frames(now_ns, id);
                }
                return;
            }
            Phase::Handshake => return,
        }
        loop {
            let Some(c) = self.conns[slot].as_mut() else {
                return;
            };
            let Some(&item) = c.queue.front() else {
                break;
            };
            match item {
                Item::Event(index) => {
                    let Some((entry, bytes)) = self.log.get(index) else {
                        c.queue.pop_front();
                        continue;
                    };
                    let Some(bytes) = bytes else {
                        // Overwritten before this slow connection got to it.
                        c.queue.pop_front();
                        match entry.channel {
                            Channel::Trades => {
                                self.stats.slow_consumers_dropped += 1;
                                self.fail(
                                    now_ns,
                                    id,
                                    close_code::SLOW_CONSUMER,
                                    "slow consumer: trades fell out of the log",
                                );
                                return;
                            }
                            _ => {
                                if !c.stale.contains(&entry.symbol) {
                                    c.stale.push(entry.symbol);
                                }
                                continue;
                            }
                        }
                    };
                    let covered = entry.channel == Channel::Book
                        && (entry.seq <= c.book_floor[usize::from(entry.symbol)]
                            || c.stale.contains(&entry.symbol));
                    if !covered {
                        if self.room(id) < bytes.len() + CLOSE_RESERVE {
                            return;
                        }
                        match self.reactor.send(id, bytes) {
                            Ok(()) => self.stats.messages_sent += 1,
                            Err(NetError::SendBufferFull { .. }) => return,
                            Err(_) => return,
                        }
                    }
                    if let Some(c) = self.conns[slot].as_mut() {
                        c.queue.pop_front();
                    }
                }
                Item::Snapshot(sym) => {
                    if !self.send_snapshot(slot, sym) {
                        return;
                    }
                    if let Some(c) = self.conns[slot].as_mut() {
                        c.queue.pop_front();
                    }
                }
            }
        }
        // The queue is empty: conflated state next — stale books, then tickers.
        while let Some(&sym) = self.conns[slot].as_ref().and_then(|c| c.stale.first()) {
            if !self.send_snapshot(slot, sym) {
                return;
            }
            if let Some(c) = self.conns[slot].as_mut() {
                c.stale.retain(|s| *s != sym);
            }
        }
        while let Some(&sym) = self.conns[slot]
            .as_ref()
            .and_then(|c| c.ticker_pending.first())
        {
            let s = &self.symbols[usize::from(sym)];
            if !s.ticker.is_empty() {
                if self.room(id) < s.ticker.len() + CLOSE_RESERVE {
                    return;
                }
                match self.reactor.send(id, &s.ticker) {
                    Ok(()) => self.stats.messages_sent += 1,
                    Err(_) => return,
                }
            }
            if let Some(c) = self.conns[slot].as_mut() {
                c.ticker_pending.retain(|s| *s != sym);
            }
        }
    }

    /// Bytes the connection's send buffer can still take.
    fn room(&self, id: ConnId) -> usize {
        (self.config.send_buffer_bytes as usize)
            .saturating_sub(self.reactor.send_pending(id) as usize)
    }

    /// Sends the symbol's snapshot to the connection in `slot`; false if it has no room.
    fn send_snapshot(&mut self, slot: usize, sym: u16) -> bool {
        let Some(id) = self.conns[slot].as_ref().map(|c| c.id) else {
            return false;
        };
        // Build (or reuse) the snapshot only when it can go: a connection that is behind
        // must not make the server serialize the book on every pass.
        let expected = self.symbols[usize::from(sym)].snapshot.len().max(1_024);
        if self.room(id) < expected + CLOSE_RESERVE {
            return false;
        }
        let seq = self.snapshot(sym);
        let Some(c) = self.conns[slot].as_mut() else {
            return false;
        };
        let subscribed = c.subscriptions.contains(&(sym, Channel::Book));
        if !subscribed {
            return true; // unsubscribed meanwhile: nothing to send
        }
        let frame = &self.symbols[usize::from(sym)].snapshot;
        if self.room(id) < frame.len() + CLOSE_RESERVE {
            return false;
        }
        match self.reactor.send(id, frame) {
            Ok(()) => {
                self.stats.snapshots_sent += 1;
                self.stats.messages_sent += 1;
                if let Some(c) = self.conns[slot].as_mut() {
                    c.book_floor[usize::from(sym)] = seq;
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Each connection's timers: the handshake deadline, silence, and a ping to a connection
    /// idle for a ping interval (nothing heard from it, no echo under way, no ping within the
    /// interval).
    fn ping_and_expire(&mut self, now_ns: u64) {
        let interval_ns = self.config.ping_interval_ns;
        let silent_ns = interval_ns.saturating_mul(u64::from(self.config.silent_intervals_max));
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_ref() else {
                continue;
            };
            let id = c.id;
            let idle = now_ns.saturating_sub(c.last_heard_ns.max(c.last_ping_ns)) >= interval_ns;
            match c.phase {
                Phase::Closing { .. } => {}
                Phase::Handshake
                    if now_ns.saturating_sub(c.opened_ns) > self.config.handshake_timeout_ns =>
                {
                    self.stats.handshakes_refused += 1;
                    self.stats.handshakes_timed_out += 1;
                    let _ = self.reactor.send(
                        id,
                        b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                    );
                    self.close_after_flush(id, now_ns);
                }
                _ if now_ns.saturating_sub(c.last_heard_ns) > silent_ns => {
                    self.stats.silent_dropped += 1;
                    self.fail(now_ns, id, close_code::SILENT, "no answer to pings");
                }
                Phase::Market | Phase::Echo if idle && !c.echo_busy() => {
                    let mut ping = [0u8; 2];
                    let n = ws::encode_frame(&mut ping, true, Opcode::Ping, &[], None);
                    if self.reactor.send(id, &ping[..n]).is_ok() {
                        self.stats.pings_sent += 1;
                        if let Some(c) = self.conns[slot].as_mut() {
                            c.last_ping_ns = now_ns;
                        }
                    }
                }
                Phase::Handshake | Phase::Market | Phase::Echo => {}
            }
        }
    }

    /// Starts the closing handshake with `code`: the close frame goes out (within
    /// `close_flush_timeout_ns`), and the socket is closed once the peer answers (or
    /// [`CLOSE_DRAIN_NS`] after the frame was written). After a protocol error the
    /// peer's bytes cannot be trusted to frame an answer: the socket closes once the frame is
    /// written.
    fn fail(&mut self, now_ns: u64, conn: ConnId, code: u16, reason: &str) {
        let mut frame = [0u8; 131];
        let n = ws::encode_close(&mut frame, code, reason, None);
        // The send buffer keeps room for this frame (CLOSE_RESERVE).
        let _ = self.reactor.send(conn, &frame[..n]);
        let await_peer = !matches!(
            code,
            close_code::PROTOCOL | close_code::INVALID_DATA | close_code::TOO_BIG
        );
        self.start_closing(conn, now_ns, await_peer);
    }

    /// Closes once what is queued is written (the peer started the close, or the handshake
    /// failed).
    fn close_after_flush(&mut self, conn: ConnId, now_ns: u64) {
        self.start_closing(conn, now_ns, false);
    }

    fn start_closing(&mut self, conn: ConnId, now_ns: u64, await_peer: bool) {
        let slot = conn.slot();
        let close_flush_ns = self.config.close_flush_timeout_ns;
        let was_open = self.live(conn).is_some();
        if was_open {
            self.unsubscribe_all(slot);
            if let Some(c) = self.live(conn) {
                c.phase = Phase::Closing {
                    deadline_ns: now_ns.saturating_add(close_flush_ns),
                    await_peer,
                    written: false,
                };
                c.queue.clear();
                c.stale.clear();
                c.ticker_pending.clear();
            }
        } else {
            self.reactor.close(conn);
        }
    }

    fn unsubscribe_all(&mut self, slot: u32) {
        let Some(c) = self.conns[slot as usize].as_mut() else {
            return;
        };
        for (sym, channel) in c.subscriptions.drain(..) {
            self.symbols[usize::from(sym)].subscribers[channel.index()].retain(|s| *s != slot);
        }
    }

    fn forget(&mut self, conn: ConnId) {
        if self.live(conn).is_some() {
            self.unsubscribe_all(conn.slot());
            self.conns[conn.slot() as usize] = None;
            self.stats.closed += 1;
        }
    }

    /// Closes every connection with 1001 (going away), e.g. before shutdown.
    pub fn shutdown(&mut self, now_ns: u64) {
        let ids: Vec<ConnId> = self.conns.iter().flatten().map(|c| c.id).collect();
        for id in ids {
            self.fail(now_ns, id, close_code::GOING_AWAY, "server shutting down");
        }
    }
}

fn top(s: &SymbolState) -> ((i64, u64), (i64, u64)) {
    let bid = s.bids.iter().next_back().map_or((0, 0), |(p, q)| (*p, *q));
    let ask = s.asks.iter().next().map_or((0, 0), |(p, q)| (*p, *q));
    (bid, ask)
}
