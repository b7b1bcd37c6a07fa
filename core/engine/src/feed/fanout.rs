//! Fan-out from the feed loop to strategies, one [`Subscriber`] each, where the feed loop
//! never waits and a subscriber's memory never grows.
//!
//! - Books conflate: each subscriber has one slot per symbol holding the newest top of book
//!   (a seqlock over atomics: the writer never waits, a reader retries if it raced a write), and
//!   a ring of "this symbol changed" notices holding each symbol at most once. A subscriber that
//!   falls behind skips intermediate states and reads the newest.
//! - Trades do not conflate: a bounded SPSC ring; when it is full the trade is dropped, counted,
//!   and the subscriber is marked lagging — it must treat its trade history as incomplete
//!   (resync from the books) and clear the mark.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::book::LocalBook;

/// Levels per side in a top-of-book slot.
pub const DEPTH: usize = 5;

/// A top of book: the best `DEPTH` levels of each side (price 0, qty 0 where a side is
/// shorter) at a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BookTop {
    /// The book's sequence number.
    pub seq: u64,
    /// Bids, best first.
    pub bids: [(i64, u64); DEPTH],
    /// Asks, best first.
    pub asks: [(i64, u64); DEPTH],
}

/// A trade as strategies see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TradeTick {
    /// Symbol id.
    pub symbol: u16,
    /// The venue's trade sequence number.
    pub seq: u64,
    /// Price.
    pub price: i64,
    /// Shares.
    pub qty: u64,
    /// The aggressor bought.
    pub buy: bool,
}

const WORDS: usize = 1 + 4 * DEPTH;

#[derive(Debug)]
struct Slot {
    version: AtomicU64,
    words: [AtomicU64; WORDS],
    notified: AtomicBool,
}

impl Slot {
    fn new() -> Self {
        Self {
            version: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
            notified: AtomicBool::new(false),
        }
    }

    fn write(&self, top: &BookTop) {
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v + 1, Ordering::Relaxed); // odd: writing
        fence(Ordering::Release);
        self.words[0].store(top.seq, Ordering::Relaxed);
        for i in 0..DEPTH {
            let b = 1 + 4 * i;
            self.words[b].store(top.bids[i].0 as u64, Ordering::Relaxed);
            self.words[b + 1].store(top.bids[i].1, Ordering::Relaxed);
            self.words[b + 2].store(top.asks[i].0 as u64, Ordering::Relaxed);
            self.words[b + 3].store(top.asks[i].1, Ordering::Relaxed);
        }
        self.version.store(v + 2, Ordering::Release); // even: stable
    }

    fn read(&self) -> BookTop {
        loop {
            let v1 = self.version.load(Ordering::Acquire);
            if v1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut top = BookTop {
                seq: self.words[0].load(Ordering::Relaxed),
                ..BookTop::default()
            };
            for i in 0..DEPTH {
                let b = 1 + 4 * i;
                top.bids[i] = (
                    self.words[b].load(Ordering::Relaxed) as i64,
                    self.words[b + 1].load(Ordering::Relaxed),
                );
                top.asks[i] = (
                    self.words[b + 2].load(Ordering::Relaxed) as i64,
                    self.words[b + 3].load(Ordering::Relaxed),
                );
            }
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == v1 {
                return top;
            }
        }
    }
}

#[derive(Debug)]
struct Shared {
    slots: Vec<Slot>,
    lagging: AtomicBool,
    trades_dropped: AtomicU64,
}

/// The feed loop's end of one subscriber.
#[derive(Debug)]
pub struct Publisher {
    shared: Arc<Shared>,
    changed: rtrb::Producer<u16>,
    trades: rtrb::Producer<TradeTick>,
}

/// A strategy's end.
#[derive(Debug)]
pub struct Subscriber {
    shared: Arc<Shared>,
    changed: rtrb::Consumer<u16>,
    trades: rtrb::Consumer<TradeTick>,
}

/// A subscriber for `symbols` symbols with room for `trade_capacity` unread trades.
pub fn subscriber(symbols: u16, trade_capacity: usize) -> (Publisher, Subscriber) {
    let shared = Arc::new(Shared {
        slots: (0..symbols).map(|_| Slot::new()).collect(),
        lagging: AtomicBool::new(false),
        trades_dropped: AtomicU64::new(0),
    });
    // Each symbol is noticed at most once at a time, so this ring never fills.
    let (changed_tx, changed_rx) = rtrb::RingBuffer::new(usize::from(symbols).max(1));
    let (trades_tx, trades_rx) = rtrb::RingBuffer::new(trade_capacity);
    (
        Publisher {
            shared: Arc::clone(&shared),
            changed: changed_tx,
            trades: trades_tx,
        },
        Subscriber {
            shared,
            changed: changed_rx,
            trades: trades_rx,
        },
    )
}

/// The top `DEPTH` levels of a book.
pub fn top_of(book: &LocalBook) -> BookTop {
    let mut top = BookTop {
        seq: book.seq().unwrap_or(0),
        ..BookTop::default()
    };
    for (i, l) in book.bids().take(DEPTH).enumerate() {
        top.bids[i] = l;
    }
    for (i, l) in book.asks().take(DEPTH).enumerate() {
        top.asks[i] = l;
    }
    top
}

impl Publisher {
    /// Publishes the newest top of `symbol`'s book; never waits.
    pub fn book(&mut self, symbol: u16, top: &BookTop) {
        let slot = &self.shared.slots[usize::from(symbol)];
        slot.write(top);
        if !slot.notified.swap(true, Ordering::AcqRel) {
            // Room is guaranteed: each symbol is in the ring at most once.
            let _ = self.changed.push(symbol);
        }
    }

    /// Publishes a trade; if the subscriber's ring is full the trade is dropped and the
    /// subscriber marked lagging. Never waits.
    pub fn trade(&mut self, trade: TradeTick) {
        if self.trades.push(trade).is_err() {
            self.shared.trades_dropped.fetch_add(1, Ordering::Relaxed);
            self.shared.lagging.store(true, Ordering::Release);
        }
    }

    /// The subscriber has gone (its end was dropped): stop publishing to it.
    pub fn is_abandoned(&self) -> bool {
        self.trades.is_abandoned()
    }
}

impl Subscriber {
    /// The next symbol whose book changed, with its newest top (intermediate states of a
    /// symbol the subscriber did not read in time are skipped).
    pub fn next_book(&mut self) -> Option<(u16, BookTop)> {
        let symbol = self.changed.pop().ok()?;
        let slot = &self.shared.slots[usize::from(symbol)];
        slot.notified.store(false, Ordering::Release);
        Some((symbol, slot.read()))
    }

    /// The newest top of a symbol, whether or not it changed.
    pub fn book(&self, symbol: u16) -> BookTop {
        self.shared.slots[usize::from(symbol)].read()
    }

    /// The next trade.
    pub fn next_trade(&mut self) -> Option<TradeTick> {
        self.trades.pop().ok()
    }

    /// Trades were dropped since the last call because this subscriber fell behind: its trade
    /// history has holes; resync from the books. Clears the mark.
    pub fn take_lagging(&self) -> bool {
        self.shared.lagging.swap(false, Ordering::AcqRel)
    }

    /// Trades dropped for this subscriber so far.
    pub fn trades_dropped(&self) -> u64 {
        self.shared.trades_dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(seq: u64) -> BookTop {
        BookTop {
            seq,
            bids: [(100 - seq as i64, seq); DEPTH],
            asks: [(200 + seq as i64, seq); DEPTH],
        }
    }

    // Goal: a subscriber that does not read gets one notice per symbol and the newest state;
    // a full trade ring drops, counts and marks it lagging; the publisher never waits.
    #[test]
    fn books_conflate_and_trades_overflow_marks_lagging() {
        let (mut p, mut s) = subscriber(3, 4);
        for seq in 1..=1_000 {
            p.book(1, &top(seq));
            p.book(2, &top(seq + 5));
        }
        assert_eq!(s.next_book(), Some((1, top(1_000))));
        assert_eq!(s.next_book(), Some((2, top(1_005))));
        assert_eq!(s.next_book(), None);
        p.book(1, &top(2_000));
        assert_eq!(s.next_book(), Some((1, top(2_000))));
        for seq in 1..=10 {
            p.trade(TradeTick {
                symbol: 0,
                seq,
                price: 1,
                qty: 1,
                buy: true,
            });
        }
        assert_eq!(s.trades_dropped(), 6);
        assert!(s.take_lagging());
        assert!(!s.take_lagging());
        let seqs: Vec<u64> = std::iter::from_fn(|| s.next_trade())
            .map(|t| t.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
    }

    // Goal: a reader racing a writer on another thread never sees a torn top of book.
    #[test]
    fn seqlock_never_tears() {
        let (mut p, s) = subscriber(1, 1);
        let writer = std::thread::spawn(move || {
            for seq in 1..200_000u64 {
                p.book(0, &top(seq));
            }
        });
        let mut last = 0;
        while !writer.is_finished() {
            let t = s.book(0);
            let whole = if t.seq == 0 {
                BookTop::default() // not written yet
            } else {
                top(t.seq)
            };
            assert_eq!(t, whole, "torn read");
            assert!(t.seq >= last);
            last = t.seq;
        }
        writer.join().unwrap();
    }
}
