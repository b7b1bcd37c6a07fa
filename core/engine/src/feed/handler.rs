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
//!
//! Nothing on that path allocates after [`FeedHandler::new`]: the upgrade request and its
//! expected answer are written into buffers kept for them, frames reach the WebSocket decoder
//! whole (so a connection lost mid-frame leaves it between frames, and it is reused), and a
//! snapshot's levels are parsed into buffers sized for the largest book. The one exception is a
//! server that broke the WebSocket protocol: the decoder may be left inside the bad frame, so
//! it is rebuilt (one allocation of `max_message`; the error is counted).

use std::net::SocketAddr;

use base64::Engine as _;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use sha1::{Digest, Sha1};

use super::book::{Applied, Delta, LocalBook, LEVELS_MAX};
use super::fanout::{self, Publisher, Subscriber, TradeTick};
use crate::guard::backoff::{Backoff, BackoffConfig};
use crate::http::gate::{RestGateConfig, RestGateStats};
use crate::http::session::{RestEvent, RestSession, RestSessionConfig, RestSessionStats};
use crate::http::Method;
use crate::ipc::md::MdWriter;
use crate::net::{ConnId, NetEvent, Transport};
use crate::proto::md::BookSide;
use crate::proto::ws::{self, close_code, Decoder, Opcode, Role, WsMessage};
use crate::rng::{Rng64, SplitMix64};

/// Feed handler settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedConfig {
    /// The market-data server.
    pub addr: SocketAddr,
    /// Further servers serving the same data (gateways: docs/market-data.md, "Scaling out"):
    /// after a lost connection the handler reconnects to the next address in turn (`addr`,
    /// then these), with its backoff's jitter, and resyncs every book.
    pub alternates: Vec<SocketAddr>,
    /// The WebSocket path.
    pub path: String,
    /// Symbols to keep books of, in id order.
    pub symbols: Vec<String>,
    /// Subscribe to trades too.
    pub trades: bool,
    /// Reconnect backoff.
    pub backoff: BackoffConfig,
    /// Seed of the backoff jitter, the frame masks and the REST retries (`[[feed]] seed`).
    /// The default is drawn from the OS (`rng::os_seed`) so two engines never reconnect in
    /// lockstep; set it to replay a run (the engine logs each feed's seed at start).
    pub seed: crate::rng::Seed,
    /// Deltas a book buffers while waiting for its snapshot.
    pub pending_max: usize,
    /// Largest message accepted from the server.
    pub max_message: usize,
    /// Ask for a snapshot again if none came within this long.
    pub resync_retry_ns: u64,
    /// Reconnect if the server sent nothing (not even a ping) for this long.
    pub silent_ns: u64,
    /// Where snapshots come from: the WebSocket (`{"op":"snapshot"}`) or the venue's REST
    /// depth endpoint, through the REST gate.
    pub snapshot: SnapshotSource,
    /// TLS for the market-data server and the REST API (`None`: plaintext). The handler
    /// itself speaks plaintext: the transport it runs on carries TLS
    /// ([`crate::net::tls::Tls`], set up by the engine from this).
    pub tls: Option<FeedTls>,
}

/// Where a feed's snapshots come from (`[[feed]] snapshot`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SnapshotSource {
    /// From the WebSocket server: a snapshot on subscribing and on request.
    #[default]
    Ws,
    /// From the venue's REST API: deltas are buffered from the stream, a depth snapshot is
    /// fetched through the gate, deltas at or below its update id are dropped, the rest must
    /// follow on without a gap; every resync the same way. Snapshots the WebSocket sends
    /// anyway are ignored (counted).
    Rest(Box<RestSnapshots>),
}

/// `[[feed]] snapshot = "rest"`: the venue's REST API and how to ask it (docs/config.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestSnapshots {
    /// The REST API's address.
    pub address: SocketAddr,
    /// The depth endpoint's path (the symbol and `limit` are added as a query).
    pub path: String,
    /// Levels asked for per side (`limit`).
    pub depth_limit: u32,
    /// What one depth request weighs at the venue (for the gate).
    pub depth_weight: u32,
    /// The venue's limit per client and second, and per minute (weight); the gate's buckets
    /// are made from them ([`RestGateConfig::for_venue_limits`]).
    pub second_weight: u32,
    /// See `second_weight`.
    pub minute_weight: u32,
    /// Kept-alive connections.
    pub connections: usize,
    /// How long a snapshot request may wait at the gate.
    pub acquire_timeout_ns: u64,
    /// From writing a request to its whole answer.
    pub timeout_ns: u64,
    /// Attempts per request (429/418/5xx, lost connections and timeouts are retried through
    /// the gate).
    pub retry_attempts: u32,
    /// Sent as `X-Api-Key`.
    pub api_key: Option<String>,
    /// The venue's used-weight headers for the second and minute windows (empty: none).
    pub used_weight_headers: [String; 2],
}

impl RestSnapshots {
    /// Defaults for a REST API at `address` (the simulated venue's paths and limits).
    pub fn new(address: SocketAddr) -> Self {
        Self {
            address,
            path: "/api/v3/depth".into(),
            depth_limit: 1_000,
            depth_weight: 10,
            second_weight: 50,
            minute_weight: 1_200,
            connections: 2,
            acquire_timeout_ns: 2_000_000_000,
            timeout_ns: 5_000_000_000,
            retry_attempts: 5,
            api_key: None,
            used_weight_headers: ["X-Used-Weight-1s".into(), "X-Used-Weight-1m".into()],
        }
    }

    /// The REST session these settings make, for `symbols` symbols.
    pub fn session_config(&self, symbols: usize) -> RestSessionConfig {
        let mut gate = RestGateConfig::for_venue_limits(
            self.second_weight,
            self.minute_weight,
            self.depth_weight,
        );
        gate.endpoints = vec![(self.path.clone(), self.depth_weight)];
        gate.acquire_timeout_ns = self.acquire_timeout_ns;
        gate.retry.attempts_max = self.retry_attempts;
        let mut c = RestSessionConfig::new(self.address, gate);
        c.connections = self.connections;
        // One request per symbol at a time, and room for retries.
        c.requests_max = (symbols + 1).max(4);
        c.target_max = self.path.len() + 64 + 32;
        c.timeout_ns = self.timeout_ns;
        c.api_key = self.api_key.clone();

        c.used_weight_headers = self
            .used_weight_headers
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.is_empty())
            .map(|(i, h)| (i, h.clone()))
            .collect();
        c
    }
}

/// `[[feed]] tls = true`: the market-data server (and the REST API) speak TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedTls {
    /// The name the venue's certificate must carry (a DNS name or an IP address).
    pub server_name: String,
    /// A PEM file of the CAs to trust (a private venue); `None`: the public roots.
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for FeedConfig {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:15002".parse().expect("literal address"),
            alternates: Vec::new(),
            path: "/md".into(),
            symbols: vec!["AAPL".into(), "MSFT".into(), "AMZN".into(), "NVDA".into()],
            trades: true,
            backoff: BackoffConfig {
                base_ns: 100_000_000,
                cap_ns: 5_000_000_000,
                ..BackoffConfig::default()
            },
            seed: crate::rng::Seed::from_os(),
            pending_max: 4_096,
            max_message: 4 << 20,
            resync_retry_ns: 500_000_000,
            silent_ns: 15_000_000_000,
            snapshot: SnapshotSource::Ws,
            tls: None,
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
    /// Books dropped because more than `pending_max` deltas in a row were at or below their
    /// sequence: a snapshot from ahead of the stream (a venue's bad update id) would otherwise
    /// freeze the book while it claims to be in sync.
    pub stale: u64,
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
    /// REST depth answers that named another symbol than the one asked for (refused, the
    /// book asks again).
    pub wrong_symbol: u64,
    /// `error` notices from the server.
    pub server_errors: u64,
    /// WebSocket protocol errors (the connection was closed).
    pub protocol_errors: u64,
    /// Upgrade answers refused (not 101, wrong accept key, head too long or not UTF-8).
    pub handshakes_refused: u64,
    /// REST snapshots asked for (`snapshot = "rest"`).
    pub rest_requests: u64,
    /// REST snapshots that failed (refused by the gate, timed out, not 200, malformed).
    pub rest_failures: u64,
    /// Snapshots the WebSocket sent while snapshots come from REST (ignored).
    pub ws_snapshots_ignored: u64,
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
        /// The `Sec-WebSocket-Accept` value the answer must carry.
        accept: [u8; ACCEPT_LEN],
    },
    Live(ConnId),
}

/// Bytes of a base64 `Sec-WebSocket-Key` (16 random bytes).
const KEY_LEN: usize = 24;
/// Bytes of a base64 `Sec-WebSocket-Accept` (a SHA-1 digest).
const ACCEPT_LEN: usize = 28;
/// The GUID of RFC 6455 section 1.3, appended to the key before hashing.
const WS_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The longest frame header: 2 bytes, a 64-bit length and a mask.
const FRAME_HEADER_MAX: usize = 14;
/// Bytes of a request without its symbol (`{"op":"subscribe","channel":"trades","symbol":""}`
/// is 51), with room to spare.
const REQUEST_FIXED_MAX: usize = 64;
/// Bytes of the upgrade request without its path and host.
const UPGRADE_FIXED_MAX: usize = 160;
/// Bytes of a socket address as text (`[` IPv6 with scope `]:` port).
const HOST_MAX: usize = 64;

/// A server message, borrowed from its text. A snapshot's levels are not here: they are parsed
/// into the handler's level buffers (see [`MsgSeed`]).
#[derive(Debug, Default)]
struct Msg<'a> {
    kind: &'a str,
    symbol: &'a str,
    seq: u64,
    side: &'a str,
    price: i64,
    qty: u64,
    aggressor: &'a str,
}

/// Parses a [`Msg`] and writes `bids` and `asks` into buffers kept for them (capacity
/// `levels_max + 1` each: one level more than a book holds is enough to refuse the snapshot
/// as an overflow, the rest are read and dropped).
struct MsgSeed<'b> {
    bids: &'b mut Vec<(i64, u64)>,
    asks: &'b mut Vec<(i64, u64)>,
}

impl<'de> DeserializeSeed<'de> for MsgSeed<'_> {
    type Value = Msg<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Msg<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MsgSeed<'_> {
    type Value = Msg<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a market-data message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Msg<'de>, A::Error> {
        let mut m = Msg::default();
        let mut typed = false;
        self.bids.clear();
        self.asks.clear();
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "type" => {
                    m.kind = map.next_value()?;
                    typed = true;
                }
                "symbol" => m.symbol = map.next_value()?,
                "seq" => m.seq = map.next_value()?,
                "side" => m.side = map.next_value()?,
                "price" => m.price = map.next_value()?,
                "qty" => m.qty = map.next_value()?,
                "aggressor" => m.aggressor = map.next_value()?,
                "bids" => map.next_value_seed(LevelsSeed(&mut *self.bids))?,
                "asks" => map.next_value_seed(LevelsSeed(&mut *self.asks))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !typed {
            return Err(de::Error::missing_field("type"));
        }
        Ok(m)
    }
}

/// `[[price, qty], ...]` into a buffer, keeping no more than its capacity.
struct LevelsSeed<'b>(&'b mut Vec<(i64, u64)>);

impl<'de> DeserializeSeed<'de> for LevelsSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for LevelsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of [price, qty] levels")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // Bounded by the message size (`max_message`); levels past the buffer's capacity are
        // read and dropped (the book refuses the snapshot as an overflow anyway).
        while let Some(level) = seq.next_element::<(i64, u64)>()? {
            if self.0.len() < self.0.capacity() {
                self.0.push(level);
            }
        }
        Ok(())
    }
}

/// Why an upgrade answer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpgradeRefused {
    /// No blank line within [`ws::HANDSHAKE_MAX`] bytes.
    TooLong,
    /// The head is not UTF-8.
    NotUtf8,
    /// The status is not `101`.
    Status,
    /// No `Sec-WebSocket-Accept` with the value expected.
    Accept,
}

/// Writes the upgrade request for `path` on `host` with a 16-byte `nonce` into `out`; returns
/// the `Sec-WebSocket-Accept` value the answer must carry. Allocates nothing when `out` has
/// room (sized at construction).
fn write_upgrade(out: &mut Vec<u8>, host: SocketAddr, path: &str, nonce: [u8; 16]) -> [u8; 28] {
    use std::io::Write;
    let mut key = [0u8; KEY_LEN];
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(nonce, &mut key)
        .expect("16 bytes are 24 in base64");
    assert_eq!(n, KEY_LEN);
    out.clear();
    let _ = write!(
        out,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: "
    );
    out.extend_from_slice(&key);
    out.extend_from_slice(b"\r\nSec-WebSocket-Version: 13\r\n\r\n");
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(WS_GUID);
    let mut accept = [0u8; ACCEPT_LEN];
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(sha.finalize(), &mut accept)
        .expect("20 bytes are 28 in base64");
    assert_eq!(n, ACCEPT_LEN);
    accept
}

/// Checks the server's answer to the upgrade: `Ok(None)` until its head has arrived, then the
/// head's length. Allocates nothing.
fn check_upgrade(bytes: &[u8], accept: &[u8; ACCEPT_LEN]) -> Result<Option<usize>, UpgradeRefused> {
    let limit = bytes.len().min(ws::HANDSHAKE_MAX);
    let Some(end) = bytes[..limit]
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
    else {
        if bytes.len() >= ws::HANDSHAKE_MAX {
            return Err(UpgradeRefused::TooLong);
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| UpgradeRefused::NotUtf8)?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    if !status.starts_with("HTTP/1.1 101") {
        return Err(UpgradeRefused::Status);
    }
    let accepted = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("sec-websocket-accept")
                && value.trim().as_bytes() == accept
        })
    });
    if !accepted {
        return Err(UpgradeRefused::Accept);
    }
    Ok(Some(end))
}

/// A frame's whole length (header and payload) from its first bytes; `None` until its header
/// has arrived. Saturates: a length no buffer holds is refused by the decoder at the header.
fn frame_len(b: &[u8]) -> Option<u64> {
    let [_, b1, ..] = *b else {
        return None;
    };
    let mask_len = if b1 & 0x80 != 0 { 4 } else { 0 };
    let (len, at) = match b1 & 0x7F {
        126 => (
            u64::from(u16::from_be_bytes(b.get(2..4)?.try_into().ok()?)),
            4,
        ),
        127 => (u64::from_be_bytes(b.get(2..10)?.try_into().ok()?), 10),
        n => (u64::from(n), 2),
    };
    Some(len.saturating_add(at + mask_len))
}

/// A REST depth answer, `{"lastUpdateId":N,"bids":[["price","qty"],...],"asks":[...]}` (prices
/// as decimals with at most [`PRICE_DECIMALS`] places, quantities whole; numbers accepted
/// too), into the level buffers; its update id, or why not. Allocates nothing. An answer that
/// names its symbol (some venues do: a `"symbol"` key) must name `symbol`, the one asked for:
/// another symbol's levels in this book would be silently wrong data.
fn parse_depth(
    body: &[u8],
    symbol: &str,
    bids: &mut Vec<(i64, u64)>,
    asks: &mut Vec<(i64, u64)>,
) -> Result<u64, DepthRefused> {
    let seed = DepthSeed { symbol, bids, asks };
    let mut json = serde_json::Deserializer::from_slice(body);
    let (id, named) = seed
        .deserialize(&mut json)
        .map_err(|_| DepthRefused::Malformed)?;
    json.end().map_err(|_| DepthRefused::Malformed)?;
    if !named {
        return Err(DepthRefused::WrongSymbol);
    }
    id.ok_or(DepthRefused::Malformed)
}

/// Why a REST depth answer was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DepthRefused {
    /// Not a depth answer keel can read.
    Malformed,
    /// It names another symbol than the one asked for.
    WrongSymbol,
}

/// Decimal places of a price on the wire (keel's fixed point: [`crate::order::Price::SCALE`]).
const PRICE_DECIMALS: usize = 4;

/// `"123.4500"` (or `123`) as keel's fixed point; `None` past its range or precision.
pub fn parse_price(text: &str) -> Option<i64> {
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > PRICE_DECIMALS || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut units: i64 = whole.parse().ok()?;
    units = units.checked_mul(crate::order::Price::SCALE)?;
    let mut f = 0i64;
    for (i, b) in frac.bytes().enumerate() {
        f += i64::from(b - b'0') * 10i64.pow((PRICE_DECIMALS - 1 - i) as u32);
    }
    let v = units.checked_add(f)?;
    Some(if neg { -v } else { v })
}

/// `"12"` (or `"12.000"`, or a number) as a whole quantity.
pub fn parse_qty(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if !frac.bytes().all(|b| b == b'0') {
        return None;
    }
    whole.parse().ok()
}

/// A price or a quantity: a JSON string or number.
enum Num<'a> {
    Text(&'a str),
    Int(i128),
}

impl<'de> de::Deserialize<'de> for Num<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a decimal string or a whole number")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Num<'de>, E> {
                Ok(Num::Text(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num<'de>, E> {
                Ok(Num::Int(i128::from(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num<'de>, E> {
                Ok(Num::Int(i128::from(v)))
            }
        }
        d.deserialize_any(V)
    }
}

impl Num<'_> {
    fn price(&self) -> Option<i64> {
        match *self {
            Num::Text(t) => parse_price(t),
            Num::Int(i) => i64::try_from(i)
                .ok()?
                .checked_mul(crate::order::Price::SCALE),
        }
    }

    fn qty(&self) -> Option<u64> {
        match *self {
            Num::Text(t) => parse_qty(t),
            Num::Int(i) => u64::try_from(i).ok(),
        }
    }
}

/// Reads a REST depth answer into the level buffers: its update id if it has one, and whether
/// it names no symbol or `symbol`.
struct DepthSeed<'b> {
    symbol: &'b str,
    bids: &'b mut Vec<(i64, u64)>,
    asks: &'b mut Vec<(i64, u64)>,
}

impl<'de> DeserializeSeed<'de> for DepthSeed<'_> {
    type Value = (Option<u64>, bool);

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DepthSeed<'_> {
    type Value = (Option<u64>, bool);

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a depth object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        self.bids.clear();
        self.asks.clear();
        let (mut id, mut named) = (None, true);
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "lastUpdateId" => id = Some(map.next_value::<u64>()?),
                "symbol" => named &= map.next_value::<&'de str>()? == self.symbol,
                "bids" => map.next_value_seed(TextLevelsSeed(&mut *self.bids))?,
                "asks" => map.next_value_seed(TextLevelsSeed(&mut *self.asks))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((id, named))
    }
}

/// `[["price", "qty"], ...]` into a buffer, keeping no more than its capacity (one level
/// more than a book holds is enough to refuse the snapshot as an overflow).
struct TextLevelsSeed<'b>(&'b mut Vec<(i64, u64)>);

impl<'de> DeserializeSeed<'de> for TextLevelsSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TextLevelsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of [price, qty] levels")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some((p, q)) = seq.next_element::<(Num<'de>, Num<'de>)>()? {
            let (Some(price), Some(qty)) = (p.price(), q.qty()) else {
                return Err(de::Error::custom("a level that is not [price, quantity]"));
            };
            if self.0.len() < self.0.capacity() {
                self.0.push((price, qty));
            }
        }
        Ok(())
    }
}

/// The feed handler. See the module docs.
#[derive(Debug)]
pub struct FeedHandler {
    config: FeedConfig,
    state: State,
    books: Vec<LocalBook>,
    /// Per symbol: when to ask for a snapshot again while the book waits for one.
    resync_due_ns: Vec<u64>,
    /// Per symbol: deltas in a row at or below the book's sequence.
    duplicates_in_row: Vec<u32>,
    /// Which address connects next (0: `addr`, then the alternates).
    target: usize,
    last_trade: Vec<Option<u64>>,
    decoder: Decoder,
    backoff: Backoff,
    rng: SplitMix64,
    publishers: Vec<Publisher>,
    /// The market-data file strategies in other processes read (`[ipc]`), with when its
    /// "synced" word is next brought up to date.
    md: Option<MdWriter>,
    md_check_ns: u64,
    last_heard_ns: u64,
    /// Bytes taken from the transport, kept until a whole frame is here (`max_message` plus
    /// the longest header): the decoder only ever sees whole frames.
    inbox: Vec<u8>,
    /// Bytes of `inbox` already decoded.
    inbox_at: usize,
    /// The decoder failed and may be inside a frame: rebuild it before the next connection.
    decoder_poisoned: bool,
    out: Vec<u8>,
    /// Requests to the server (and the upgrade request) are written here.
    request: Vec<u8>,
    /// Frames to the server are encoded here.
    wire: Vec<u8>,
    /// A snapshot's levels, parsed (`LEVELS_MAX + 1` each).
    bids: Vec<(i64, u64)>,
    asks: Vec<(i64, u64)>,
    stats: FeedStats,
    /// The REST API snapshots come from (`snapshot = "rest"`), with per symbol whether a
    /// request is out, and the buffer its targets are written into.
    rest: Option<RestSide>,
}

#[derive(Debug)]
struct RestSide {
    session: RestSession,
    asked: Vec<bool>,
    target: String,
    path: String,
    depth_limit: u32,
    depth_weight: u32,
}

impl FeedHandler {
    /// A handler; nothing happens until [`FeedHandler::start`].
    pub fn new(config: FeedConfig) -> Self {
        let n = config.symbols.len();
        let symbol_max = config.symbols.iter().map(String::len).max().unwrap_or(0);
        let request_max =
            (REQUEST_FIXED_MAX + symbol_max).max(UPGRADE_FIXED_MAX + HOST_MAX + config.path.len());
        // A request or a pong (at most 125 bytes), masked.
        let wire_max = FRAME_HEADER_MAX + (REQUEST_FIXED_MAX + symbol_max).max(125);
        Self {
            books: (0..n).map(|_| LocalBook::new(config.pending_max)).collect(),
            resync_due_ns: vec![0; n],
            duplicates_in_row: vec![0; n],
            target: 0,
            last_trade: vec![None; n],
            decoder: Decoder::new(Role::Client, config.max_message),
            backoff: Backoff::new(config.backoff),
            rng: SplitMix64::new(config.seed.value()),
            publishers: Vec::new(),
            md: None,
            md_check_ns: 0,
            state: State::Down { retry_at_ns: 0 },
            last_heard_ns: 0,
            inbox: Vec::with_capacity(config.max_message + FRAME_HEADER_MAX),
            inbox_at: 0,
            decoder_poisoned: false,
            out: Vec::with_capacity(1024),
            request: Vec::with_capacity(request_max),
            wire: Vec::with_capacity(wire_max),
            bids: Vec::with_capacity(LEVELS_MAX + 1),
            asks: Vec::with_capacity(LEVELS_MAX + 1),
            stats: FeedStats::default(),
            rest: None,
            config,
        }
    }

    /// A handler that takes its snapshots from a REST API (`snapshot = "rest"`; with
    /// [`SnapshotSource::Ws`] as [`FeedHandler::new`]). Fails on a gate configuration the
    /// limiter refuses.
    pub fn with_snapshots(
        config: FeedConfig,
        now_ns: u64,
    ) -> Result<Self, crate::http::session::RestSessionConfigError> {
        let rest = match &config.snapshot {
            SnapshotSource::Ws => None,
            SnapshotSource::Rest(r) => {
                let symbol_max = config.symbols.iter().map(String::len).max().unwrap_or(0);
                let mut session = r.session_config(config.symbols.len());
                // Fixed by the feed's seed, so `[[feed]] seed` replays the REST retries too
                // (a stream apart from the reconnect jitter's).
                session.seed = config.seed.value().rotate_left(32) ^ 0x5245_5354;
                // The symbol percent-encoded: at most three bytes a byte.
                session.target_max = r.path.len() + 3 * symbol_max + 32;
                Some(RestSide {
                    session: RestSession::new(session, now_ns)?,
                    asked: vec![false; config.symbols.len()],
                    target: String::with_capacity(r.path.len() + 3 * symbol_max + 32),
                    path: r.path.clone(),
                    depth_limit: r.depth_limit,
                    depth_weight: r.depth_weight,
                })
            }
        };
        let mut handler = Self::new(config);
        handler.rest = rest;
        Ok(handler)
    }

    /// The REST API's counters and its gate's figures (`snapshot = "rest"`).
    pub fn rest_stats(&self) -> Option<(RestSessionStats, &RestGateStats)> {
        self.rest
            .as_ref()
            .map(|r| (r.session.stats(), r.session.gate_stats()))
    }

    /// The gate's refill rate now, per mille (`snapshot = "rest"`).
    pub fn rest_rate_permille(&mut self, now_ns: u64) -> Option<u64> {
        self.rest.as_mut().map(|r| r.session.rate_permille(now_ns))
    }

    /// A new subscriber with room for `trade_capacity` unread trades (add them before
    /// starting: the feed loop does not allocate afterwards).
    pub fn subscribe(&mut self, trade_capacity: usize) -> Subscriber {
        let (publisher, subscriber) =
            fanout::subscriber(self.config.symbols.len() as u16, trade_capacity);
        self.publishers.push(publisher);
        subscriber
    }

    /// Writes every top of book and trade into `writer` too (a market-data file for strategies
    /// in other processes: `crate::ipc::md`), with the feed's heartbeat and whether it is in
    /// sync.
    pub fn attach_market_data(&mut self, writer: MdWriter) {
        self.md = Some(writer);
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
        match t.connect(self.target_addr()) {
            Ok(conn) => {
                self.state = State::Connecting(conn);
                self.last_heard_ns = now_ns;
            }
            Err(_) => self.down(now_ns, t),
        }
    }

    /// The address the next connection goes to.
    fn target_addr(&self) -> SocketAddr {
        match self.target {
            0 => self.config.addr,
            i => self.config.alternates[i - 1],
        }
    }

    /// The connection is gone (or unusable): drop every book and schedule a reconnect (to the
    /// next address, when there are several).
    fn down(&mut self, now_ns: u64, t: &mut impl Transport) {
        self.target = (self.target + 1) % (1 + self.config.alternates.len());
        if let Some(conn) = self.conn() {
            t.close(conn);
            self.stats.disconnects += 1;
        }
        for b in &mut self.books {
            b.reset();
        }
        if let Some(md) = &mut self.md {
            md.set_synced(false);
        }
        self.last_trade.iter_mut().for_each(|s| *s = None);
        self.reset_decoder();
        let wait = self
            .backoff
            .next_delay_ns(&mut self.rng)
            .unwrap_or(self.config.backoff.cap_ns);
        self.state = State::Down {
            retry_at_ns: now_ns + wait,
        };
    }

    /// Makes the decoder and the inbox ready for a new connection: whatever the last one left
    /// (a fragmented message, a frame that failed to decode), the decoder starts afresh and
    /// keeps its buffer — no allocation on any reconnect.
    fn reset_decoder(&mut self) {
        self.inbox.clear();
        self.inbox_at = 0;
        self.decoder_poisoned = false;
        self.decoder.reset();
    }

    /// Handles one transport event.
    pub fn on_event(&mut self, now_ns: u64, t: &mut impl Transport, event: &NetEvent) {
        if let Some(mut rest) = self.rest.take() {
            rest.session.on_event(now_ns, t, event, |e| {
                self.on_rest(now_ns, &mut rest.asked, e)
            });
            self.rest = Some(rest);
        }
        let Some(conn) = self.conn() else {
            return;
        };
        match *event {
            NetEvent::Connected { conn: c } if c == conn => {
                let mut nonce = [0u8; 16];
                nonce[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
                nonce[8..].copy_from_slice(&self.rng.next_u64().to_le_bytes());
                let host = self.target_addr();
                let accept = write_upgrade(&mut self.request, host, &self.config.path, nonce);
                if t.send(conn, &self.request).is_err() {
                    return self.down(now_ns, t);
                }
                self.state = State::Handshaking { conn, accept };
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
        if let State::Handshaking { accept, .. } = &self.state {
            match check_upgrade(t.received(conn), accept) {
                Ok(None) => return,
                Ok(Some(n)) => {
                    t.consume(conn, n);
                    self.state = State::Live(conn);
                    self.backoff.reset();
                    self.subscribe_all(now_ns, t, conn);
                }
                Err(_) => {
                    self.stats.handshakes_refused += 1;
                    return self.down(now_ns, t);
                }
            }
        }
        // Bounded per pass by what the transport holds (its receive buffer) and the inbox.
        loop {
            self.take_received(t, conn);
            let what = match self.decode_frame() {
                Err(e) => {
                    self.stats.protocol_errors += 1;
                    self.send_close(t, conn, e.close_code());
                    return self.down(now_ns, t);
                }
                Ok(None) => return,
                Ok(Some(what)) => what,
            };
            match what {
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

    /// Moves what the transport received into the inbox, as far as it has room; decoded
    /// bytes are dropped from its front only when the room is needed.
    fn take_received(&mut self, t: &mut impl Transport, conn: ConnId) {
        if self.inbox_at == self.inbox.len() {
            self.inbox.clear();
            self.inbox_at = 0;
        }
        let received = t.received(conn);
        if received.is_empty() {
            return;
        }
        if self.inbox_at > 0 && self.inbox.capacity() - self.inbox.len() < received.len() {
            self.inbox.copy_within(self.inbox_at.., 0);
            self.inbox.truncate(self.inbox.len() - self.inbox_at);
            self.inbox_at = 0;
        }
        let n = received.len().min(self.inbox.capacity() - self.inbox.len());
        self.inbox.extend_from_slice(&received[..n]);
        t.consume(conn, n);
    }

    /// Decodes the next whole frame in the inbox and copies what it completed into `out`:
    /// `Ok(None)` when no whole frame is here yet, `Ok(Some(None))` for a frame that completes
    /// nothing (a fragment), else the kind of message (`Pong` also stands for an ignored
    /// binary message; `Ping` is answered, hence the outer match in `read`).
    fn decode_frame(&mut self) -> Result<Option<Option<Opcode>>, ws::WsError> {
        let pending = &self.inbox[self.inbox_at..];
        let Some(len) = frame_len(pending) else {
            return Ok(None);
        };
        let input = if len > self.inbox.capacity() as u64 {
            // Longer than any legal frame: the decoder refuses its header.
            pending
        } else if (pending.len() as u64) < len {
            return Ok(None);
        } else {
            &pending[..len as usize]
        };
        let (used, msg) = match self.decoder.decode(input) {
            Ok(done) => done,
            Err(e) => {
                self.decoder_poisoned = true;
                return Err(e);
            }
        };
        if used == 0 {
            // A whole frame always moves the decoder; one that does not is not a frame.
            self.decoder_poisoned = true;
            return Err(ws::WsError::Protocol {
                what: "frame not consumed",
                value: len,
            });
        }
        self.inbox_at += used;
        self.out.clear();
        Ok(Some(match msg {
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
        }))
    }

    fn subscribe_all(&mut self, now_ns: u64, t: &mut impl Transport, conn: ConnId) {
        for i in 0..self.config.symbols.len() {
            self.send_request(t, conn, "subscribe", Some("book"), i);
            if self.config.trades {
                self.send_request(t, conn, "subscribe", Some("trades"), i);
            }
            // From the WebSocket the snapshot comes with the subscription; from REST it is
            // asked for at the next step (the stream's deltas buffer meanwhile).
            self.resync_due_ns[i] = if self.rest.is_some() {
                now_ns
            } else {
                now_ns + self.config.resync_retry_ns
            };
        }
    }

    fn message(&mut self, now_ns: u64, t: &mut impl Transport, conn: ConnId, text: &[u8]) {
        let seed = MsgSeed {
            bids: &mut self.bids,
            asks: &mut self.asks,
        };
        let mut json = serde_json::Deserializer::from_slice(text);
        let Ok(m) = seed
            .deserialize(&mut json)
            .and_then(|m| json.end().map(|()| m))
        else {
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
            "snapshot" if self.rest.is_some() => {
                self.stats.ws_snapshots_ignored += 1;
                return;
            }
            "snapshot" => {
                self.stats.snapshots += 1;
                let (bids, asks) = (self.bids.iter().copied(), self.asks.iter().copied());
                self.books[sym].snapshot(m.seq, bids, asks)
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
                if let Some(md) = &mut self.md {
                    md.trade(&tick);
                }
                return;
            }
            _ => return, // subscribed, ticker, ...
        };
        if self.applied(sym, outcome, m.kind == "book") {
            self.resync(now_ns, t, conn, sym);
        }
    }

    /// Counts what applying a snapshot or a delta did and hands a new top to the
    /// subscribers; whether the book was dropped and must resync.
    fn applied(&mut self, sym: usize, outcome: Applied, delta: bool) -> bool {
        if !delta {
            self.duplicates_in_row[sym] = 0;
        }
        match outcome {
            Applied::Ok => {
                self.duplicates_in_row[sym] = 0;
                if delta {
                    self.stats.deltas += 1;
                }
                let top = fanout::top_of(&self.books[sym]);
                for p in &mut self.publishers {
                    p.book(sym as u16, &top);
                }
                if let Some(md) = &mut self.md {
                    md.book(sym as u16, &top);
                }
                false
            }
            Applied::Duplicate => {
                self.stats.duplicates += 1;
                self.duplicates_in_row[sym] += 1;
                if self.duplicates_in_row[sym] as usize > self.config.pending_max {
                    // The stream never reaches the book's sequence: the snapshot was not of
                    // this stream. Drop it.
                    self.duplicates_in_row[sym] = 0;
                    self.stats.stale += 1;
                    self.books[sym].reset();
                    return true;
                }
                false
            }
            Applied::Buffered => false,
            Applied::Gap { .. } => {
                self.stats.gaps += 1;
                true
            }
            Applied::Crossed { .. } => {
                self.stats.crossed += 1;
                true
            }
            Applied::Overflow => {
                self.stats.overflows += 1;
                true
            }
        }
    }

    fn resync(&mut self, now_ns: u64, t: &mut impl Transport, conn: ConnId, sym: usize) {
        self.resync_due_ns[sym] = now_ns + self.config.resync_retry_ns;
        let Some(rest) = self.rest.as_mut() else {
            self.stats.resyncs += 1;
            self.send_request(t, conn, "snapshot", None, sym);
            return;
        };
        if rest.asked[sym] {
            // One snapshot request per symbol at a time: the one out serves this resync.
            return;
        }
        self.stats.resyncs += 1;
        self.stats.rest_requests += 1;
        use std::fmt::Write;
        rest.target.clear();
        rest.target.push_str(&rest.path);
        rest.target.push_str("?symbol=");
        crate::http::push_query_value(&mut rest.target, &self.config.symbols[sym]);
        let _ = write!(rest.target, "&limit={}", rest.depth_limit);
        let weight = Some(rest.depth_weight);
        match rest
            .session
            .submit(now_ns, sym as u64, Method::Get, &rest.target, weight)
        {
            Ok(()) => rest.asked[sym] = true,
            // Refused at once (table or queue full): asked again at the next retry.
            Err(_) => self.stats.rest_failures += 1,
        }
    }

    /// A REST snapshot's outcome: applied to the book that waits for it (its buffered deltas
    /// above the update id follow on, or the book resyncs), or counted and asked again after
    /// `resync_retry_ns`.
    fn on_rest(&mut self, now_ns: u64, asked: &mut [bool], e: RestEvent<'_>) {
        let (token, body) = match e {
            RestEvent::Done {
                token,
                status: 200,
                body,
                ..
            } => (token, body),
            RestEvent::Done { token, .. } | RestEvent::Failed { token, .. } => {
                if let Some(a) = asked.get_mut(token as usize) {
                    *a = false;
                }
                self.stats.rest_failures += 1;
                return;
            }
        };
        let sym = token as usize;
        let Some(a) = asked.get_mut(sym) else {
            return;
        };
        *a = false;
        if self.books[sym].seq().is_some() || !matches!(self.state, State::Live(_)) {
            // In sync already (a request that crossed a resync), or no stream to follow.
            return;
        }
        let symbol = &self.config.symbols[sym];
        let update_id = match parse_depth(body, symbol, &mut self.bids, &mut self.asks) {
            Ok(id) => id,
            Err(refused) => {
                // Either way the book keeps waiting and asks again at its retry pace.
                self.stats.rest_failures += 1;
                match refused {
                    DepthRefused::Malformed => self.stats.malformed += 1,
                    DepthRefused::WrongSymbol => self.stats.wrong_symbol += 1,
                }
                return;
            }
        };
        self.stats.snapshots += 1;
        let (bids, asks) = (self.bids.iter().copied(), self.asks.iter().copied());
        let outcome = self.books[sym].snapshot(update_id, bids, asks);
        if self.applied(sym, outcome, false) {
            // Dropped again (a gap after the snapshot, a crossed book): ask again at once.
            self.resync_due_ns[sym] = now_ns;
        }
    }

    /// Timers: reconnect when due, ask again for snapshots that did not come, give up on a
    /// silent server.
    pub fn step(&mut self, now_ns: u64, t: &mut impl Transport) {
        if let Some(mut rest) = self.rest.take() {
            rest.session
                .poll(now_ns, t, |e| self.on_rest(now_ns, &mut rest.asked, e));
            self.rest = Some(rest);
        }
        if self.md.is_some() {
            self.beat_market_data(now_ns);
        }
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

    /// The market-data file's heartbeat, every step, and its "synced" word, every millisecond
    /// (it looks at every book) and at once when the connection goes.
    fn beat_market_data(&mut self, now_ns: u64) {
        let synced = if now_ns >= self.md_check_ns {
            self.md_check_ns = now_ns + 1_000_000;
            Some(self.synced())
        } else {
            None
        };
        if let Some(md) = &mut self.md {
            md.beat();
            if let Some(synced) = synced {
                md.set_synced(synced);
            }
        }
    }

    fn mask(&mut self) -> [u8; 4] {
        (self.rng.next_u64() as u32).to_le_bytes()
    }

    fn send_frame(&mut self, t: &mut impl Transport, conn: ConnId, op: Opcode, payload: &[u8]) {
        let mask = Some(self.mask());
        let mut wire = std::mem::take(&mut self.wire);
        // Within the capacity sized at construction for the longest request and a pong.
        wire.resize(ws::header_len(payload.len(), true) + payload.len(), 0);
        let n = ws::encode_frame(&mut wire, true, op, payload, mask);
        let _ = t.send(conn, &wire[..n]);
        self.wire = wire;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(fin: bool, op: Opcode, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0; ws::header_len(payload.len(), false) + payload.len()];
        let n = ws::encode_frame(&mut out, fin, op, payload, None);
        out.truncate(n);
        out
    }

    fn handler() -> FeedHandler {
        FeedHandler::new(FeedConfig {
            max_message: 1_024,
            ..FeedConfig::default()
        })
    }

    /// Puts bytes in the inbox as if received.
    fn receive(h: &mut FeedHandler, bytes: &[u8]) {
        h.inbox.extend_from_slice(bytes);
    }

    /// A transport that takes everything and delivers nothing.
    struct Sink;

    impl Transport for Sink {
        fn listen(
            &mut self,
            _: SocketAddr,
        ) -> Result<(crate::net::ListenerId, SocketAddr), crate::net::NetError> {
            Err(crate::net::NetError::NotOpen)
        }
        fn connect(&mut self, _: SocketAddr) -> Result<ConnId, crate::net::NetError> {
            Ok(ConnId::new(0, 0))
        }
        fn send(&mut self, _: ConnId, _: &[u8]) -> Result<(), crate::net::NetError> {
            Ok(())
        }
        fn received(&self, _: ConnId) -> &[u8] {
            &[]
        }
        fn consume(&mut self, _: ConnId, _: usize) {}
        fn close(&mut self, _: ConnId) {}
        fn poll(
            &mut self,
            _: u64,
            _: u64,
            _: &mut Vec<NetEvent>,
        ) -> Result<(), crate::net::NetError> {
            Ok(())
        }
        fn flush(&mut self) -> Result<(), crate::net::NetError> {
            Ok(())
        }
    }

    // Goal: a REST depth answer is read into the level buffers with its update id, prices in
    // keel's fixed point; anything else — too many decimals, a fractional quantity, a price
    // past i64, text that is not a number, a level that is not a pair, no update id, not JSON
    // — is refused (`None`), never a panic or a half-filled book taken as whole.
    #[test]
    fn rest_depth_answers_parse_or_are_refused() {
        let (mut bids, mut asks) = (Vec::with_capacity(3), Vec::with_capacity(3));
        let good = br#"{"lastUpdateId":42,"bids":[["100.5","3"],["99","1.000"]],"asks":[[101,2]],"x":[1]}"#;
        assert_eq!(parse_depth(good, "AAPL", &mut bids, &mut asks), Ok(42));
        assert_eq!(bids, [(1_005_000, 3), (990_000, 1)]);
        assert_eq!(asks, [(1_010_000, 2)]);
        for bad in [
            &br#"{"lastUpdateId":1,"bids":[["1.00001","1"]],"asks":[]}"#[..],
            br#"{"lastUpdateId":1,"bids":[["1","1.5"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[["99999999999999999999","1"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[["1e5","1"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[["","1"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[[".5","1"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[["1","-1"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[["1"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[["1","2","3"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":{"1":"2"},"asks":[]}"#,
            br#"{"lastUpdateId":-1,"bids":[],"asks":[]}"#,
            br#"{"bids":[],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[],"asks":[]} trailing"#,
            br#"[1,2,3]"#,
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(
                parse_depth(bad, "AAPL", &mut bids, &mut asks),
                Err(DepthRefused::Malformed),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // More levels than the buffers hold: the rest is read and dropped (the book then
        // refuses the snapshot as an overflow, as it holds one level more than a side).
        let deep = br#"{"lastUpdateId":7,"bids":[["1","1"],["2","1"],["3","1"],["4","1"],["5","1"]],"asks":[]}"#;
        assert_eq!(parse_depth(deep, "AAPL", &mut bids, &mut asks), Ok(7));
        assert_eq!(bids.len(), 3);
        // Issue 23, point 12: an answer that names its symbol must name the one asked for.
        let named = br#"{"symbol":"AAPL","lastUpdateId":9,"bids":[["1","1"]],"asks":[]}"#;
        assert_eq!(parse_depth(named, "AAPL", &mut bids, &mut asks), Ok(9));
        assert_eq!(
            parse_depth(named, "MSFT", &mut bids, &mut asks),
            Err(DepthRefused::WrongSymbol)
        );
        let empty = br#"{"symbol":"","lastUpdateId":9,"bids":[],"asks":[]}"#;
        assert_eq!(
            parse_depth(empty, "AAPL", &mut bids, &mut asks),
            Err(DepthRefused::WrongSymbol)
        );
        assert_eq!(parse_price("-2.5"), Some(-25_000));
        assert_eq!(parse_price("0.0001"), Some(1));
        assert_eq!(parse_price("922337203685477.5807"), Some(i64::MAX));
        assert_eq!(parse_price("922337203685477.5808"), None);
    }

    // Goal: a snapshot from ahead of the stream (a venue's update id no delta will ever pass,
    // u64::MAX at worst) cannot freeze a book that claims to be in sync: after `pending_max`
    // deltas in a row at or below its sequence the book is dropped, counted (`stale`) and
    // resynchronised.
    #[test]
    fn a_snapshot_from_ahead_of_the_stream_is_dropped() {
        let mut h = FeedHandler::new(FeedConfig {
            pending_max: 8,
            ..FeedConfig::default()
        });
        let conn = ConnId::new(0, 0);
        h.state = State::Live(conn);
        let mut t = Sink;
        let snapshot = br#"{"type":"snapshot","symbol":"AAPL","seq":18446744073709551615,"bids":[[10,1]],"asks":[[20,1]]}"#;
        h.message(0, &mut t, conn, snapshot);
        assert_eq!(h.book(0).seq(), Some(u64::MAX));
        for seq in 1..=8u64 {
            let delta = format!(
                r#"{{"type":"book","symbol":"AAPL","seq":{seq},"side":"bid","price":11,"qty":1}}"#
            );
            h.message(0, &mut t, conn, delta.as_bytes());
            assert_eq!(h.book(0).seq(), Some(u64::MAX), "within pending_max");
        }
        h.message(
            0,
            &mut t,
            conn,
            br#"{"type":"book","symbol":"AAPL","seq":9,"side":"bid","price":11,"qty":1}"#,
        );
        let stats = h.stats();
        assert_eq!(stats.stale, 1, "{stats:?}");
        assert_eq!(h.book(0).seq(), None, "dropped");
        assert_eq!(stats.resyncs, 1, "{stats:?}");
        assert_eq!(stats.duplicates, 9, "{stats:?}");
    }

    // Goal: the upgrade request the handler writes is one the server side accepts, and the
    // accept key it expects is the server's; method: the ws module's parser and response.
    #[test]
    fn upgrade_request_and_answer_agree_with_the_server_side() {
        let mut out = Vec::with_capacity(512);
        let addr: SocketAddr = "127.0.0.1:15002".parse().unwrap();
        let accept = write_upgrade(&mut out, addr, "/md", [9; 16]);
        let (request, used) = ws::parse_request(&out).unwrap().unwrap();
        assert_eq!(used, out.len());
        assert_eq!(request.path, "/md");
        assert_eq!(accept, ws::accept_key(&request.key).as_bytes());
        assert!(std::str::from_utf8(&out)
            .unwrap()
            .contains("Host: 127.0.0.1:15002\r\n"));
        let answer = ws::response(&request.key);
        assert_eq!(
            check_upgrade(answer.as_bytes(), &accept),
            Ok(Some(answer.len()))
        );
        // Header names in any case; the head alone is consumed, not the frame behind it.
        let upper = answer.replace("Sec-WebSocket-Accept", "SEC-WEBSOCKET-ACCEPT") + "\u{81}";
        assert_eq!(
            check_upgrade(upper.as_bytes(), &accept),
            Ok(Some(answer.len()))
        );
        assert_eq!(
            check_upgrade(&answer.as_bytes()[..answer.len() - 1], &accept),
            Ok(None)
        );
    }

    // Goal: the buffers sized at construction hold the longest upgrade request (an IPv6 host
    // with a scope, the longest port) and the longest symbol's request: no growth later.
    #[test]
    fn request_buffers_are_sized_for_the_longest_request() {
        let long = "X".repeat(200);
        let mut h = FeedHandler::new(FeedConfig {
            addr: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535"
                .parse()
                .unwrap(),
            symbols: vec!["A".into(), long.clone()],
            ..FeedConfig::default()
        });
        let (request, wire) = (h.request.capacity(), h.wire.capacity());
        write_upgrade(&mut h.request, h.config.addr, "/md", [3; 16]);
        let text = std::str::from_utf8(&h.request).unwrap().to_owned();
        assert!(text.contains("ffff%4294967295]:65535\r\n"), "{text}");
        assert_eq!(h.request.capacity(), request);
        // A real reactor; whether the connection is open yet does not matter here.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut t = crate::net::Reactor::new(crate::net::ReactorConfig::default()).unwrap();
        let conn = t.connect(listener.local_addr().unwrap()).unwrap();
        h.send_request(&mut t, conn, "subscribe", Some("trades"), 1);
        assert!(std::str::from_utf8(&h.request)
            .unwrap()
            .ends_with(&format!("\"{long}\"}}")));
        assert_eq!((h.request.capacity(), h.wire.capacity()), (request, wire));
    }

    // Goal: every bad answer is refused with its reason, never accepted or waited on forever.
    #[test]
    fn bad_upgrade_answers_are_refused() {
        let mut out = Vec::with_capacity(512);
        let accept = write_upgrade(&mut out, "127.0.0.1:1".parse().unwrap(), "/", [1; 16]);
        let other = ws::response("dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(
            check_upgrade(other.as_bytes(), &accept),
            Err(UpgradeRefused::Accept)
        );
        let head = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            check_upgrade(head.as_bytes(), &accept),
            Err(UpgradeRefused::Status)
        );
        let endless = vec![b'x'; ws::HANDSHAKE_MAX];
        assert_eq!(
            check_upgrade(&endless, &accept),
            Err(UpgradeRefused::TooLong)
        );
        assert_eq!(check_upgrade(&endless[1..], &accept), Ok(None));
        let mut bad = b"HTTP/1.1 101 \xff\r\n\r\n".to_vec();
        assert_eq!(check_upgrade(&bad, &accept), Err(UpgradeRefused::NotUtf8));
        bad.clear();
        assert_eq!(check_upgrade(&bad, &accept), Ok(None));
    }

    // Goal: a frame's length is read from every header form, and not before it is complete.
    #[test]
    fn frame_lengths_from_every_header_form() {
        assert_eq!(frame_len(&[]), None);
        assert_eq!(frame_len(&[0x81]), None);
        assert_eq!(frame_len(&[0x81, 5]), Some(7));
        assert_eq!(frame_len(&[0x81, 0x85]), Some(11), "masked");
        assert_eq!(frame_len(&[0x81, 126, 1]), None);
        assert_eq!(frame_len(&[0x81, 126, 1, 0]), Some(4 + 256));
        assert_eq!(frame_len(&[0x81, 127, 0, 0, 0, 0, 0, 1, 0]), None);
        assert_eq!(
            frame_len(&[0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
            Some(10 + 65_536)
        );
        assert_eq!(
            frame_len(&[0x81, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]),
            Some(u64::MAX)
        );
        let f = frame(true, Opcode::Text, &[b'a'; 300]);
        assert_eq!(frame_len(&f), Some(f.len() as u64));
    }

    // Goal: a connection lost in the middle of a frame, or of a fragmented message, leaves
    // nothing behind for the next one, and the decoder is reused (not rebuilt); method: the
    // handler's inbox and decoder, fed by hand.
    #[test]
    fn a_lost_connection_leaves_no_partial_frame_or_message() {
        let mut h = handler();
        let whole = frame(true, Opcode::Text, br#"{"type":"ping"}"#);
        // Half a frame: nothing reaches the decoder.
        receive(&mut h, &whole[..5]);
        assert_eq!(h.decode_frame(), Ok(None));
        h.reset_decoder();
        assert!(h.inbox.is_empty());
        // The first fragment of a message, then the connection is lost.
        receive(&mut h, &frame(false, Opcode::Text, b"{\"type\":"));
        assert_eq!(h.decode_frame(), Ok(Some(None)));
        h.reset_decoder();
        let capacity = h.inbox.capacity();
        receive(&mut h, &whole);
        assert_eq!(h.decode_frame(), Ok(Some(Some(Opcode::Text))));
        assert_eq!(h.out, br#"{"type":"ping"}"#);
        assert_eq!(h.decode_frame(), Ok(None));
        assert_eq!(h.inbox.capacity(), capacity);
        assert!(!h.decoder_poisoned);
        // A fragment that ends inside a UTF-8 sequence, then the connection is lost.
        h.reset_decoder();
        receive(
            &mut h,
            &frame(false, Opcode::Text, "é".as_bytes().split_at(1).0),
        );
        assert_eq!(h.decode_frame(), Ok(Some(None)));
        h.reset_decoder();
        receive(&mut h, &whole);
        assert_eq!(h.decode_frame(), Ok(Some(Some(Opcode::Text))));
    }

    // Goal: a decoding error (here invalid UTF-8 inside a frame) is reported, and the next
    // connection starts with a working decoder.
    #[test]
    fn a_decoder_error_is_reset_for_the_next_connection() {
        let mut h = handler();
        receive(&mut h, &frame(true, Opcode::Text, b"ab\xffcd"));
        assert_eq!(h.decode_frame(), Err(ws::WsError::InvalidUtf8));
        assert!(h.decoder_poisoned);
        h.reset_decoder();
        assert!(!h.decoder_poisoned);
        receive(&mut h, &frame(true, Opcode::Text, b"{}"));
        assert_eq!(h.decode_frame(), Ok(Some(Some(Opcode::Text))));
        // A frame longer than any message: refused at its header, without waiting for it.
        h.reset_decoder();
        receive(&mut h, &[0x81, 127, 0, 0, 0, 0, 0, 0x10, 0, 0]);
        assert!(matches!(h.decode_frame(), Err(ws::WsError::TooBig { .. })));
        // A masked frame from a server.
        h.reset_decoder();
        receive(&mut h, &[0x81, 0x81, 1, 2, 3, 4, b'x']);
        assert!(matches!(
            h.decode_frame(),
            Err(ws::WsError::Protocol { .. })
        ));
    }

    fn parse<'a>(
        text: &'a str,
        bids: &mut Vec<(i64, u64)>,
        asks: &mut Vec<(i64, u64)>,
    ) -> Option<Msg<'a>> {
        let mut json = serde_json::Deserializer::from_str(text);
        let m = MsgSeed { bids, asks }.deserialize(&mut json).ok()?;
        json.end().ok()?;
        Some(m)
    }

    // Goal: messages parse into borrowed fields and kept level buffers; levels past a
    // buffer's capacity are dropped (so the book refuses the snapshot), bad input is refused.
    #[test]
    fn messages_parse_into_kept_buffers() {
        let (mut bids, mut asks) = (Vec::with_capacity(3), Vec::with_capacity(3));
        let text = r#"{"type":"snapshot","symbol":"AAPL","seq":7,"extra":[[1,[2]]],
            "bids":[[10,1],[9,2],[8,3],[7,4]],"asks":[[11,5]]}"#;
        let m = parse(text, &mut bids, &mut asks).unwrap();
        assert_eq!((m.kind, m.symbol, m.seq), ("snapshot", "AAPL", 7));
        assert_eq!(bids, [(10, 1), (9, 2), (8, 3)]);
        assert_eq!(asks, [(11, 5)]);
        assert_eq!(bids.capacity(), 3);
        let text = r#"{"type":"book","symbol":"MSFT","seq":8,"side":"bid","price":-5,"qty":2}"#;
        let m = parse(text, &mut bids, &mut asks).unwrap();
        assert_eq!((m.side, m.price, m.qty), ("bid", -5, 2));
        assert!(
            bids.is_empty() && asks.is_empty(),
            "a message clears the levels"
        );
        for bad in [
            r#"{"symbol":"AAPL"}"#,
            r#"{"type":"book","qty":-1}"#,
            r#"{"type":"book","bids":[[1]]}"#,
            r#"{"type":"book","bids":[[1,2,3]]}"#,
            r#"{"type":"b\u006fok"}"#,
            r#"{"type":"book"} x"#,
            r#"[]"#,
        ] {
            assert!(parse(bad, &mut bids, &mut asks).is_none(), "{bad}");
        }
    }
}
