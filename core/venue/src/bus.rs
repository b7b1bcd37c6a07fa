//! Market data over a publish/subscribe bus (NATS; issue 15, docs/market-data.md "Scaling
//! out"): the venue publishes every book delta and trade once, and any number of stateless
//! gateways (`keel gateway`) subscribe and serve the WebSocket protocol to clients.
//!
//! The NATS client is `async-nats` (maintained, from crates.io) on a side thread with its own
//! single-threaded tokio runtime; it meets keel's loops only through bounded SPSC rings, so
//! neither the venue's loop nor a gateway's ever waits on the bus.
//!
//! **Subjects.** `keel.md.<SYMBOL>.book` carries the symbol's deltas and, after a resync,
//! snapshots; `keel.md.<SYMBOL>.trades` its trades; `keel.md.<SYMBOL>.snapshot` is the
//! request/reply subject a gateway asks for a snapshot on. Payloads are the JSON messages of the
//! WebSocket protocol (docs/market-data.md), sequence numbers included, so a gateway checks the
//! same sequences a client does.
//!
//! **Publisher** ([`Publisher::start`]): the venue's market-data server pushes [`BusEvent`]s into
//! a ring; the side thread publishes each once and keeps a mirror of every book, from which it
//! answers snapshot requests — so a snapshot is always consistent with the sequence published.
//! If the ring is full the venue counts the event as lost and, once there is room, pushes a
//! whole snapshot of the symbol instead (published on the book subject: gateways resync).
//!
//! **Subscriber** ([`Subscriber::start`], used by a gateway): the side thread subscribes to
//! `keel.md.>` and pushes what arrives into a ring; the gateway's loop checks every sequence
//! and asks for a snapshot (request/reply, through the side thread) after a gap, at start, and
//! after the bus connection was lost and came back. A full ring drops the message, counted —
//! which the loop then sees as a gap: repaired from a snapshot, never passed on as a hole.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel::proto::md::{self, BookSide};

/// One market-data event between a loop and its bus thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusEvent {
    /// A level of a book now holds `qty` (0: gone), at book sequence `seq`.
    Delta {
        /// Symbol index.
        symbol: u16,
        /// Book sequence.
        seq: u64,
        /// Side.
        side: BookSide,
        /// Price.
        price: i64,
        /// Quantity at the price.
        qty: u64,
    },
    /// A trade, at trade sequence `seq`.
    Trade {
        /// Symbol index.
        symbol: u16,
        /// Trade sequence.
        seq: u64,
        /// Price.
        price: i64,
        /// Quantity.
        qty: u64,
        /// The aggressor bought.
        buy: bool,
    },
    /// A whole book at sequence `seq` (bids best first, asks best first).
    Snapshot {
        /// Symbol index.
        symbol: u16,
        /// Book sequence.
        seq: u64,
        /// Trade sequence at the same moment (a gateway's trade numbering follows on).
        trade_seq: u64,
        /// Bids, best first.
        bids: Vec<(i64, u64)>,
        /// Asks, best first.
        asks: Vec<(i64, u64)>,
    },
    /// The bus connection was lost and is back: messages may have been missed.
    Reconnected,
    /// A message on symbol `symbol`'s subject (or the answer to its snapshot request) whose
    /// payload names another symbol: refused, never applied (another symbol's levels in this
    /// book would be silently wrong data); the book resyncs from a fresh snapshot.
    WrongSymbol {
        /// Symbol index of the subject.
        symbol: u16,
    },
}

/// Counters of a bus thread (shared with the loop: relaxed atomics).
#[derive(Debug, Default)]
pub struct BusCounters {
    /// Messages published (publisher) or received (subscriber).
    pub messages: AtomicU64,
    /// Messages the bus refused or the ring had no room for (dropped, counted).
    pub dropped: AtomicU64,
    /// Snapshot requests answered (publisher) or made (subscriber).
    pub snapshots: AtomicU64,
    /// Messages that did not parse (subscriber).
    pub malformed: AtomicU64,
    /// Messages (and snapshot answers) whose payload named another symbol than their subject
    /// (subscriber): refused, the symbol resynced.
    pub wrong_symbol: AtomicU64,
    /// Connections to the bus (the first included).
    pub connects: AtomicU64,
    /// Whether the bus is connected now.
    pub connected: AtomicBool,
}

/// The subject of a symbol's `kind` (`book`, `trades`, `snapshot`).
pub fn subject(symbol: &str, kind: &str) -> String {
    format!("keel.md.{symbol}.{kind}")
}

/// How a bus thread connects: every URL in turn, reconnecting forever with backoff (the
/// client's own, jittered).
fn options(name: &str, counters: Arc<BusCounters>) -> async_nats::ConnectOptions {
    async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(2))
        .event_callback(move |event| {
            let counters = Arc::clone(&counters);
            async move {
                match event {
                    async_nats::Event::Connected => {
                        counters.connects.fetch_add(1, Ordering::Relaxed);
                        counters.connected.store(true, Ordering::Relaxed);
                    }
                    async_nats::Event::Disconnected => {
                        counters.connected.store(false, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        })
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// The venue's side of the bus: a ring the market-data server pushes into, and the thread that
/// publishes.
#[derive(Debug)]
pub struct Publisher {
    /// What the thread counted.
    pub counters: Arc<BusCounters>,
    /// Wakes the thread (the market-data server rings it once per pass that pushed events:
    /// one wake-up per pass, not per event).
    pub doorbell: Arc<tokio::sync::Notify>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Publisher {
    /// Starts the publishing thread for `symbols` on `urls` (comma-separated `nats://` URLs);
    /// returns it and the ring's producer (`capacity` events) for the market-data server.
    pub fn start(
        urls: &str,
        symbols: Vec<String>,
        capacity: usize,
    ) -> std::io::Result<(Self, rtrb::Producer<BusEvent>)> {
        let (producer, consumer) = rtrb::RingBuffer::new(capacity);
        let counters = Arc::new(BusCounters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let doorbell = Arc::new(tokio::sync::Notify::new());
        let rt = runtime()?;
        let (c, s, urls) = (Arc::clone(&counters), Arc::clone(&stop), urls.to_string());
        let bell = Arc::clone(&doorbell);
        let thread = std::thread::Builder::new()
            .name("keel-bus-pub".into())
            .spawn(move || rt.block_on(publish(urls, symbols, consumer, bell, c, s)))?;
        Ok((
            Self {
                counters,
                doorbell,
                stop,
                thread: Some(thread),
            },
            producer,
        ))
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.doorbell.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A mirror of one book, kept by the publisher from what it publishes.
#[derive(Debug, Default)]
struct Mirror {
    bids: BTreeMap<i64, u64>,
    asks: BTreeMap<i64, u64>,
    seq: u64,
    trade_seq: u64,
}

impl Mirror {
    fn snapshot_json(&self, name: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + 24 * (self.bids.len() + self.asks.len()));
        md::write_snapshot(
            &mut out,
            name,
            self.seq,
            self.bids.iter().rev(),
            self.asks.iter(),
        );
        // The trade sequence rides along: a gateway's trade numbering follows on from it.
        if out.last() == Some(&b'}') {
            out.pop();
            out.extend_from_slice(format!(r#","trade_seq":{}}}"#, self.trade_seq).as_bytes());
        }
        out
    }
}

async fn publish(
    urls: String,
    symbols: Vec<String>,
    mut ring: rtrb::Consumer<BusEvent>,
    doorbell: Arc<tokio::sync::Notify>,
    counters: Arc<BusCounters>,
    stop: Arc<AtomicBool>,
) {
    use futures_util::StreamExt;
    let client = match options("keel-venue", Arc::clone(&counters))
        .connect(urls.as_str())
        .await
    {
        Ok(c) => c,
        Err(e) => {
            keel::warn_line!("keel venue: bus: cannot connect to {urls}: {e}");
            return;
        }
    };
    let mut requests = match client.subscribe("keel.md.*.snapshot").await {
        Ok(s) => s,
        Err(e) => {
            keel::warn_line!("keel venue: bus: cannot subscribe to snapshot requests: {e}");
            return;
        }
    };
    let mut mirrors: Vec<Mirror> = symbols.iter().map(|_| Mirror::default()).collect();
    let book_subjects: Vec<String> = symbols.iter().map(|s| subject(s, "book")).collect();
    let trade_subjects: Vec<String> = symbols.iter().map(|s| subject(s, "trades")).collect();
    // Woken by the doorbell; the tick (tokio's timers are millisecond-grained) only catches a
    // ring the doorbell did not announce.
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut scratch = Vec::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            () = async {
                tokio::select! {
                    () = doorbell.notified() => {}
                    _ = tick.tick() => {}
                }
            } => {
                while let Ok(event) = ring.pop() {
                    scratch.clear();
                    let (subject, payload) = match event {
                        BusEvent::Delta { symbol, seq, side, price, qty } => {
                            let Some(m) = mirrors.get_mut(usize::from(symbol)) else { continue };
                            let levels = match side {
                                BookSide::Bid => &mut m.bids,
                                BookSide::Ask => &mut m.asks,
                            };
                            if qty == 0 {
                                levels.remove(&price);
                            } else {
                                levels.insert(price, qty);
                            }
                            m.seq = seq;
                            md::write_delta(&mut scratch, &symbols[usize::from(symbol)], seq, side, price, qty);
                            (&book_subjects[usize::from(symbol)], scratch.clone())
                        }
                        BusEvent::Trade { symbol, seq, price, qty, buy } => {
                            let Some(m) = mirrors.get_mut(usize::from(symbol)) else { continue };
                            m.trade_seq = seq;
                            md::write_trade(&mut scratch, &symbols[usize::from(symbol)], seq, price, qty, buy);
                            (&trade_subjects[usize::from(symbol)], scratch.clone())
                        }
                        BusEvent::Snapshot { symbol, seq, trade_seq, bids, asks } => {
                            let Some(m) = mirrors.get_mut(usize::from(symbol)) else { continue };
                            m.bids = bids.into_iter().collect();
                            m.asks = asks.into_iter().collect();
                            m.seq = seq;
                            m.trade_seq = trade_seq;
                            let name = &symbols[usize::from(symbol)];
                            (&book_subjects[usize::from(symbol)], m.snapshot_json(name))
                        }
                        BusEvent::Reconnected | BusEvent::WrongSymbol { .. } => continue,
                    };
                    match client.publish(subject.clone(), payload.into()).await {
                        Ok(()) => counters.messages.fetch_add(1, Ordering::Relaxed),
                        Err(_) => counters.dropped.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }
            request = requests.next() => {
                let Some(request) = request else { break };
                let Some(reply) = request.reply else { continue };
                let name = request.subject.as_str().split('.').nth(2).unwrap_or("");
                let Some(i) = symbols.iter().position(|s| s == name) else { continue };
                let payload = mirrors[i].snapshot_json(name);
                if client.publish(reply, payload.into()).await.is_ok() {
                    counters.snapshots.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    let _ = client.flush().await;
}

/// A gateway's side of the bus: the ring of what arrives, the ring of snapshot requests, and
/// the thread between them and NATS.
#[derive(Debug)]
pub struct Subscriber {
    /// What the thread counted.
    pub counters: Arc<BusCounters>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Subscriber {
    /// Starts the subscribing thread for `symbols` on `urls`; returns it, the ring of events
    /// (`capacity`) and the producer of snapshot requests (symbol indexes).
    pub fn start(
        urls: &str,
        symbols: Vec<String>,
        capacity: usize,
    ) -> std::io::Result<(Self, rtrb::Consumer<BusEvent>, rtrb::Producer<u16>)> {
        let (events_tx, events_rx) = rtrb::RingBuffer::new(capacity);
        let (requests_tx, requests_rx) = rtrb::RingBuffer::new(symbols.len().max(1) * 4);
        let counters = Arc::new(BusCounters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let rt = runtime()?;
        let (c, s, urls) = (Arc::clone(&counters), Arc::clone(&stop), urls.to_string());
        let thread = std::thread::Builder::new()
            .name("keel-bus-sub".into())
            .spawn(move || rt.block_on(subscribe(urls, symbols, events_tx, requests_rx, c, s)))?;
        Ok((
            Self {
                counters,
                stop,
                thread: Some(thread),
            },
            events_rx,
            requests_tx,
        ))
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A bus message as an event: `None` (not one) or `Some(BusEvent::WrongSymbol)` (a payload
/// about another symbol than its subject) are counted by the caller.
fn parse(symbols: &[String], subject: &str, payload: &[u8]) -> Option<BusEvent> {
    let mut parts = subject.split('.');
    let (Some("keel"), Some("md"), Some(name), Some(kind), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let symbol = symbols.iter().position(|s| s == name)? as u16;
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if v["symbol"].as_str() != Some(name) {
        return Some(BusEvent::WrongSymbol { symbol });
    }
    let seq = v["seq"].as_u64()?;
    let levels = |key: &str| -> Option<Vec<(i64, u64)>> {
        v[key]
            .as_array()?
            .iter()
            .map(|l| Some((l[0].as_i64()?, l[1].as_u64()?)))
            .collect()
    };
    match (kind, v["type"].as_str()?) {
        ("book", "book") => Some(BusEvent::Delta {
            symbol,
            seq,
            side: match v["side"].as_str()? {
                "bid" => BookSide::Bid,
                "ask" => BookSide::Ask,
                _ => return None,
            },
            price: v["price"].as_i64()?,
            qty: v["qty"].as_u64()?,
        }),
        ("book" | "snapshot", "snapshot") => Some(BusEvent::Snapshot {
            symbol,
            seq,
            trade_seq: v["trade_seq"].as_u64().unwrap_or(0),
            bids: levels("bids")?,
            asks: levels("asks")?,
        }),
        ("trades", "trade") => Some(BusEvent::Trade {
            symbol,
            seq,
            price: v["price"].as_i64()?,
            qty: v["qty"].as_u64()?,
            buy: v["aggressor"].as_str()? == "buy",
        }),
        _ => None,
    }
}

async fn subscribe(
    urls: String,
    symbols: Vec<String>,
    mut events: rtrb::Producer<BusEvent>,
    mut requests: rtrb::Consumer<u16>,
    counters: Arc<BusCounters>,
    stop: Arc<AtomicBool>,
) {
    use futures_util::StreamExt;
    let client = match options("keel-gateway", Arc::clone(&counters))
        .connect(urls.as_str())
        .await
    {
        Ok(c) => c,
        Err(e) => {
            keel::warn_line!("keel gateway: bus: cannot connect to {urls}: {e}");
            return;
        }
    };
    let mut messages = match client.subscribe("keel.md.>").await {
        Ok(s) => s,
        Err(e) => {
            keel::warn_line!("keel gateway: bus: cannot subscribe: {e}");
            return;
        }
    };
    // Snapshot answers come back from their own tasks through a bounded channel.
    let (answers_tx, mut answers_rx) =
        tokio::sync::mpsc::channel::<BusEvent>(symbols.len().max(1) * 2);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut connects_seen = counters.connects.load(Ordering::Relaxed);
    let push = |events: &mut rtrb::Producer<BusEvent>, e: BusEvent| {
        if events.push(e).is_err() {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    };
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            message = messages.next() => {
                let Some(m) = message else { break };
                if m.subject.as_str().ends_with(".snapshot") {
                    continue; // another gateway's request
                }
                counters.messages.fetch_add(1, Ordering::Relaxed);
                match parse(&symbols, m.subject.as_str(), &m.payload) {
                    Some(e @ BusEvent::WrongSymbol { .. }) => {
                        counters.wrong_symbol.fetch_add(1, Ordering::Relaxed);
                        push(&mut events, e);
                    }
                    Some(e) => push(&mut events, e),
                    None => {
                        counters.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            answer = answers_rx.recv() => {
                if let Some(e) = answer {
                    push(&mut events, e);
                }
            }
            _ = tick.tick() => {
                let connects = counters.connects.load(Ordering::Relaxed);
                if connects > connects_seen {
                    if connects_seen > 0 {
                        push(&mut events, BusEvent::Reconnected);
                    }
                    connects_seen = connects;
                }
                while let Ok(symbol) = requests.pop() {
                    let Some(name) = symbols.get(usize::from(symbol)) else { continue };
                    let (client, tx, counters) = (client.clone(), answers_tx.clone(), Arc::clone(&counters));
                    let (subject, symbols) = (subject(name, "snapshot"), symbols.clone());
                    tokio::spawn(async move {
                        let asked = client.request(subject.clone(), Vec::new().into());
                        let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_secs(2), asked).await else {
                            return; // asked again by the loop after its retry time
                        };
                        counters.snapshots.fetch_add(1, Ordering::Relaxed);
                        match parse(&symbols, &subject, &reply.payload) {
                            Some(e) => {
                                if matches!(e, BusEvent::WrongSymbol { .. }) {
                                    counters.wrong_symbol.fetch_add(1, Ordering::Relaxed);
                                }
                                let _ = tx.send(e).await;
                            }
                            None => {
                                counters.malformed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal (issue 23, point 12): a snapshot, delta or trade whose payload names another symbol
    // than its subject is refused as `WrongSymbol` for the subject's symbol (never applied to
    // its book), as is one naming no symbol; the same payload on its own subject parses.
    #[test]
    fn a_payload_about_another_symbol_is_refused() {
        let symbols = vec!["AAPL".to_string(), "MSFT".to_string()];
        let snapshot =
            br#"{"type":"snapshot","symbol":"MSFT","seq":7,"bids":[[10,1]],"asks":[[20,1]]}"#;
        let delta = br#"{"type":"book","symbol":"MSFT","seq":8,"side":"bid","price":11,"qty":1}"#;
        let trade =
            br#"{"type":"trade","symbol":"MSFT","seq":1,"price":11,"qty":1,"aggressor":"buy"}"#;
        let nameless = br#"{"type":"book","seq":8,"side":"bid","price":11,"qty":1}"#;
        for (subject, payload) in [
            ("keel.md.AAPL.book", &snapshot[..]),
            ("keel.md.AAPL.snapshot", snapshot),
            ("keel.md.AAPL.book", delta),
            ("keel.md.AAPL.trades", trade),
            ("keel.md.AAPL.book", nameless),
        ] {
            assert!(
                matches!(
                    parse(&symbols, subject, payload),
                    Some(BusEvent::WrongSymbol { symbol: 0 })
                ),
                "{subject}: {}",
                String::from_utf8_lossy(payload)
            );
        }
        assert!(matches!(
            parse(&symbols, "keel.md.MSFT.snapshot", snapshot),
            Some(BusEvent::Snapshot {
                symbol: 1,
                seq: 7,
                ..
            })
        ));
        assert!(matches!(
            parse(&symbols, "keel.md.MSFT.book", delta),
            Some(BusEvent::Delta {
                symbol: 1,
                seq: 8,
                ..
            })
        ));
        assert!(matches!(
            parse(&symbols, "keel.md.MSFT.trades", trade),
            Some(BusEvent::Trade { symbol: 1, .. })
        ));
    }
}
