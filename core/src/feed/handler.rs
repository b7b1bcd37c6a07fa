//! The engine's feed handler: a WebSocket client of a venue's market-data server that keeps a
//! book per symbol and hands conflated tops of book and trades to subscribers
//! ([`super::fanout`]), driven by the caller's loop over any [`Transport`].
//!
//! Every delta's sequence is checked against the book ([`super::book::LocalBook`]): a duplicate
//! is ignored; a gap (or a delta out of order), a book that crosses or locks after a delta, or
//! too many deltas waiting for a snapshot drop the local book, ask the server for a fresh
//! snapshot (asking again every `resync_retry_ns` until it comes) and count it. Trades are
//! checked for gaps too. A lost connection, a close from the server, a protocol error or a
//! server silent for `silent_ns` closes the connection and reconnects with exponential backoff
//! and equal jitter; every book is dropped and resubscribed.

use std::net::SocketAddr;

use super::book::{Applied, Delta, LocalBook};
use super::fanout::{self, Publisher, Subscriber, TradeTick};
use super::msg::BookSide;
use crate::guard::backoff::{Backoff, BackoffConfig};
use crate::net::{ConnId, NetEvent, Transport};
use crate::proto::ws::{self, close_code, Decoder, Opcode, Role, WsMessage};
use crate::rng::{Rng64, SplitMix64};

/// Feed handler settings.
#[derive(Debug, Clone)]
pub struct FeedConfig {
    /// The market-data server.
    pub addr: SocketAddr,
    /// The WebSocket path.
    pub path: String,
    /// Symbols to keep books of, in id order.
    pub symbols: Vec<String>,
    /// Subscribe to trades too.
    pub trades: bool,
    /// Reconnect backoff.
    pub backoff: BackoffConfig,
    /// Seed of the backoff jitter and the frame masks.
    pub seed: u64,
    /// Deltas a book buffers while waiting for its snapshot.
    pub pending_max: usize,
    /// Largest message accepted from the server.
    pub max_message: usize,
    /// Ask for a snapshot again if none came within this long.
    pub resync_retry_ns: u64,
    /// Reconnect if the server sent nothing (not even a ping) for this long.
    pub silent_ns: u64,
}

impl Default for FeedConfig {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:15002".parse().expect("literal address"),
            path: "/md".into(),
            symbols: vec!["AAPL".into(), "MSFT".into(), "AMZN".into(), "NVDA".into()],
            trades: true,
            backoff: BackoffConfig {
                base_ns: 100_000_000,
                cap_ns: 5_000_000_000,
                ..BackoffConfig::default()
            },
            seed: 7,
            pending_max: 4_096,
            max_message: 4 << 20,
            resync_retry_ns: 500_000_000,
            silent_ns: 15_000_000_000,
        }
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedStats {
    /// Connection attempts.
    pub connects: u64,
    /// Connections lost or closed.
    pub disconnects: u64,
    /// Snapshots applied.
    pub snapshots: u64,
    /// Deltas applied.
    pub deltas: u64,
    /// Deltas at or below the book's sequence, ignored.
    pub duplicates: u64,
    /// Sequence gaps (including deltas out of order).
    pub gaps: u64,
    /// Books found crossed or locked after a delta.
    pub crossed: u64,
    /// Books dropped for too many deltas before a snapshot.
    pub overflows: u64,
    /// Snapshot requests sent to resynchronise.
    pub resyncs: u64,
    /// Trades received.
    pub trades: u64,
    /// Trade sequence gaps.
    pub trade_gaps: u64,
    /// Messages that did not parse (counted, skipped).
    pub malformed: u64,
    /// `error` notices from the server.
    pub server_errors: u64,
    /// WebSocket protocol errors (the connection was closed).
    pub protocol_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting to reconnect at the time given.
    Down {
        retry_at_ns: u64,
    },
    Connecting(ConnId),
    Handshaking {
        conn: ConnId,
        key: String,
    },
    Live(ConnId),
}

#[derive(serde::Deserialize)]
struct Msg<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(default, borrow)]
    symbol: &'a str,
    #[serde(default)]
    seq: u64,
    #[serde(default, borrow)]
    side: &'a str,
    #[serde(default)]
    price: i64,
    #[serde(default)]
    qty: u64,
    #[serde(default)]
    bids: Vec<(i64, u64)>,
    #[serde(default)]
    asks: Vec<(i64, u64)>,
    #[serde(default, borrow)]
    aggressor: &'a str,
}

/// The feed handler. See the module docs.
#[derive(Debug)]
pub struct FeedHandler {
    config: FeedConfig,
    state: State,
    books: Vec<LocalBook>,
    /// Per symbol: when to ask for a snapshot again while the book waits for one.
    resync_due_ns: Vec<u64>,
    last_trade: Vec<Option<u64>>,
    decoder: Decoder,
    backoff: Backoff,
    rng: SplitMix64,
    publishers: Vec<Publisher>,
    last_heard_ns: u64,
    inbox: Vec<u8>,
    out: Vec<u8>,
    /// Requests to the server are written here.
    request: Vec<u8>,
    stats: FeedStats,
}

impl FeedHandler {
    /// A handler; nothing happens until [`FeedHandler::start`].
    pub fn new(config: FeedConfig) -> Self {
        let n = config.symbols.len();
        Self {
            books: (0..n).map(|_| LocalBook::new(config.pending_max)).collect(),
            resync_due_ns: vec![0; n],
            last_trade: vec![None; n],
            decoder: Decoder::new(Role::Client, config.max_message),
            backoff: Backoff::new(config.backoff),
            rng: SplitMix64::new(config.seed),
            publishers: Vec::new(),
            state: State::Down { retry_at_ns: 0 },
            last_heard_ns: 0,
            inbox: Vec::with_capacity(64 * 1024),
            out: Vec::with_capacity(1024),
            request: Vec::with_capacity(128),
            stats: FeedStats::default(),
            config,
        }
    }

    /// A new subscriber with room for `trade_capacity` unread trades (add them before
    /// starting: the feed loop does not allocate afterwards).
    pub fn subscribe(&mut self, trade_capacity: usize) -> Subscriber {
        let (publisher, subscriber) =
            fanout::subscriber(self.config.symbols.len() as u16, trade_capacity);
        self.publishers.push(publisher);
        subscriber
    }

    /// Counters.
    pub fn stats(&self) -> FeedStats {
        self.stats
    }

    /// A symbol's book.
    pub fn book(&self, symbol: u16) -> &LocalBook {
        &self.books[usize::from(symbol)]
    }

    /// Whether every book is in sync (has a snapshot and follows the sequence).
    pub fn synced(&self) -> bool {
        matches!(self.state, State::Live(_)) && self.books.iter().all(|b| b.seq().is_some())
    }

    /// Starts connecting.
    pub fn start(&mut self, now_ns: u64, t: &mut impl Transport) {
        self.connect(now_ns, t);
    }

    fn conn(&self) -> Option<ConnId> {
        match &self.state {
            State::Connecting(c) | State::Live(c) => Some(*c),
            State::Handshaking { conn, .. } => Some(*conn),
            State::Down { .. } => None,
        }
    }

    fn connect(&mut self, now_ns: u64, t: &mut impl Transport) {
        self.stats.connects += 1;
        match t.connect(self.config.addr) {
            Ok(conn) => {
                self.state = State::Connecting(conn);
                self.last_heard_ns = now_ns;
            }
            Err(_) => self.down(now_ns, t),
        }
    }

    /// The connection is gone (or unusable): drop every book and schedule a reconnect.
    fn down(&mut self, now_ns: u64, t: &mut impl Transport) {
        if let Some(conn) = self.conn() {
            t.close(conn);
            self.stats.disconnects += 1;
        }
        for b in &mut self.books {
            b.reset();
        }
        self.last_trade.iter_mut().for_each(|s| *s = None);
        self.decoder = Decoder::new(Role::Client, self.config.max_message);
        let wait = self
            .backoff
            .next_delay_ns(&mut self.rng)
            .unwrap_or(self.config.backoff.cap_ns);
        self.state = State::Down {
            retry_at_ns: now_ns + wait,
        };
    }

    /// Handles one transport event.
    pub fn on_event(&mut self, now_ns: u64, t: &mut impl Transport, event: &NetEvent) {
        let Some(conn) = self.conn() else {
            return;
        };
        match *event {
            NetEvent::Connected { conn: c } if c == conn => {
                let mut nonce = [0u8; 16];
                nonce[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
                nonce[8..].copy_from_slice(&self.rng.next_u64().to_le_bytes());
                let host = self.config.addr.to_string();
                let (request, key) = ws::request(&host, &self.config.path, nonce);
                if t.send(conn, request.as_bytes()).is_err() {
                    return self.down(now_ns, t);
                }
                self.state = State::Handshaking { conn, key };
            }
            NetEvent::ConnectFailed { conn: c, .. } if c == conn => {
                self.state = State::Down { retry_at_ns: 0 };
                self.stats.disconnects += 1;
                self.down(now_ns, t);
            }
            NetEvent::Closed { conn: c, .. } if c == conn => {
                self.stats.disconnects += 1;
                self.state = State::Down { retry_at_ns: 0 };
                self.down(now_ns, t);
            }
            NetEvent::Readable { conn: c } if c == conn => {
                self.last_heard_ns = now_ns;
                self.read(now_ns, t, conn);
            }
            _ => {}
        }
    }

    fn read(&mut self, now_ns: u64, t: &mut impl Transport, conn: ConnId) {
        if let State::Handshaking { key, .. } = &self.state {
            match ws::parse_response(t.received(conn), key) {
                Ok(None) => return,
                Ok(Some(n)) => {
                    t.consume(conn, n);
                    self.state = State::Live(conn);
                    self.backoff.reset();
                    self.subscribe_all(now_ns, t, conn);
                }
                Err(_) => return self.down(now_ns, t),
            }
        }
        loop {
            self.inbox.clear();
            self.inbox.extend_from_slice(t.received(conn));
            if self.inbox.is_empty() {
                return;
            }
            // Decode one message and copy it out of the decoder before acting on it.
            let (used, what) = match self.decoder.decode(&self.inbox) {
                Err(e) => {
                    self.stats.protocol_errors += 1;
                    self.send_close(t, conn, e.close_code());
                    return self.down(now_ns, t);
                }
                Ok((used, msg)) => {
                    self.out.clear();
                    let what = match msg {
                        None => None,
                        Some(WsMessage::Text(text)) => {
                            self.out.extend_from_slice(text.as_bytes());
                            Some(Opcode::Text)
                        }
                        Some(WsMessage::Ping(p)) => {
                            self.out.extend_from_slice(p);
                            Some(Opcode::Ping)
                        }
                        Some(WsMessage::Close { .. }) => Some(Opcode::Close),
                        Some(WsMessage::Binary(_) | WsMessage::Pong(_)) => Some(Opcode::Pong),
                    };
                    (used, what)
                }
            };
            t.consume(conn, used);
            match what {
                None if used == 0 => return,
                None | Some(Opcode::Pong) => {}
                Some(Opcode::Ping) => {
                    let payload = std::mem::take(&mut self.out);
                    self.send_frame(t, conn, Opcode::Pong, &payload);
                    self.out = payload;
                }
                Some(Opcode::Close) => {
                    self.send_close(t, conn, close_code::NORMAL);
                    return self.down(now_ns, t);
                }
                Some(_) => {
                    let text = std::mem::take(&mut self.out);
                    self.message(now_ns, t, conn, &text);
                    self.out = text;
                }
            }
        }
    }

    fn subscribe_all(&mut self, now_ns: u64, t: &mut impl Transport, conn: ConnId) {
        for i in 0..self.config.symbols.len() {
            self.send_request(t, conn, "subscribe", Some("book"), i);
            if self.config.trades {
                self.send_request(t, conn, "subscribe", Some("trades"), i);
            }
            self.resync_due_ns[i] = now_ns + self.config.resync_retry_ns;
        }
    }

    fn message(&mut self, now_ns: u64, t: &mut impl Transport, conn: ConnId, text: &[u8]) {
        let Ok(m) = serde_json::from_slice::<Msg<'_>>(text) else {
            self.stats.malformed += 1;
            return;
        };
        if m.kind == "error" {
            self.stats.server_errors += 1;
            return;
        }
        let Some(sym) = self.config.symbols.iter().position(|s| s == m.symbol) else {
            if matches!(m.kind, "book" | "snapshot" | "trade") {
                self.stats.malformed += 1;
            }
            return;
        };
        let symbol = sym as u16;
        let outcome = match m.kind {
            "snapshot" => {
                self.stats.snapshots += 1;
                self.books[sym].snapshot(m.seq, m.bids.iter().copied(), m.asks.iter().copied())
            }
            "book" => {
                let side = match m.side {
                    "bid" => BookSide::Bid,
                    "ask" => BookSide::Ask,
                    _ => {
                        self.stats.malformed += 1;
                        return;
                    }
                };
                self.books[sym].delta(Delta {
                    seq: m.seq,
                    side,
                    price: m.price,
                    qty: m.qty,
                })
            }
            "trade" => {
                self.stats.trades += 1;
                if let Some(prev) = self.last_trade[sym] {
                    // The venue's number: u64::MAX followed by anything is a gap, not an overflow.
                    if prev.checked_add(1) != Some(m.seq) {
                        self.stats.trade_gaps += 1;
                    }
                }
                self.last_trade[sym] = Some(m.seq);
                let tick = TradeTick {
                    symbol,
                    seq: m.seq,
                    price: m.price,
                    qty: m.qty,
                    buy: m.aggressor == "buy",
                };
                for p in &mut self.publishers {
                    p.trade(tick);
                }
                return;
            }
            _ => return, // subscribed, ticker, ...
        };
        match outcome {
            Applied::Ok => {
                if m.kind == "book" {
                    self.stats.deltas += 1;
                }
                let top = fanout::top_of(&self.books[sym]);
                for p in &mut self.publishers {
                    p.book(symbol, &top);
                }
            }
            Applied::Duplicate => self.stats.duplicates += 1,
            Applied::Buffered => {}
            Applied::Gap { .. } => {
                self.stats.gaps += 1;
                self.resync(now_ns, t, conn, sym);
            }
            Applied::Crossed { .. } => {
                self.stats.crossed += 1;
                self.resync(now_ns, t, conn, sym);
            }
            Applied::Overflow => {
                self.stats.overflows += 1;
                self.resync(now_ns, t, conn, sym);
            }
        }
    }

    fn resync(&mut self, now_ns: u64, t: &mut impl Transport, conn: ConnId, sym: usize) {
        self.stats.resyncs += 1;
        self.send_request(t, conn, "snapshot", None, sym);
        self.resync_due_ns[sym] = now_ns + self.config.resync_retry_ns;
    }

    /// Timers: reconnect when due, ask again for snapshots that did not come, give up on a
    /// silent server.
    pub fn step(&mut self, now_ns: u64, t: &mut impl Transport) {
        let silent = now_ns.saturating_sub(self.last_heard_ns) > self.config.silent_ns;
        match self.state {
            State::Down { retry_at_ns } if now_ns >= retry_at_ns => self.connect(now_ns, t),
            State::Live(conn) => {
                if silent {
                    return self.down(now_ns, t);
                }
                for sym in 0..self.books.len() {
                    if self.books[sym].seq().is_none() && now_ns >= self.resync_due_ns[sym] {
                        self.resync(now_ns, t, conn, sym);
                    }
                }
            }
            State::Connecting(_) | State::Handshaking { .. } if silent => self.down(now_ns, t),
            _ => {}
        }
    }

    fn mask(&mut self) -> [u8; 4] {
        (self.rng.next_u64() as u32).to_le_bytes()
    }

    fn send_frame(&mut self, t: &mut impl Transport, conn: ConnId, op: Opcode, payload: &[u8]) {
        let mask = Some(self.mask());
        let mut frame = [0u8; 256];
        if payload.len() + 14 > frame.len() {
            return;
        }
        let n = ws::encode_frame(&mut frame, true, op, payload, mask);
        let _ = t.send(conn, &frame[..n]);
    }

    /// Sends `{"op":op[,"channel":channel],"symbol":…}`, written into a buffer kept for it.
    fn send_request(
        &mut self,
        t: &mut impl Transport,
        conn: ConnId,
        op: &str,
        channel: Option<&str>,
        sym: usize,
    ) {
        use std::io::Write;
        let mut request = std::mem::take(&mut self.request);
        request.clear();
        let _ = write!(request, r#"{{"op":"{op}","#);
        if let Some(channel) = channel {
            let _ = write!(request, r#""channel":"{channel}","#);
        }
        let _ = write!(request, r#""symbol":"{}"}}"#, self.config.symbols[sym]);
        self.send_frame(t, conn, Opcode::Text, &request);
        self.request = request;
    }

    fn send_close(&mut self, t: &mut impl Transport, conn: ConnId, code: u16) {
        let mask = Some(self.mask());
        let mut frame = [0u8; 140];
        let n = ws::encode_close(&mut frame, code, "", mask);
        let _ = t.send(conn, &frame[..n]);
    }
}
