//! The engine's copy of a venue book: a snapshot, then deltas applied strictly in sequence.
//! Anything else — a gap, a delta out of order, a book that crosses after a delta — means the
//! copy can no longer be trusted: the caller drops it and resynchronises from a new snapshot.
//! A duplicate (a sequence already applied) is ignored and counted.

use super::levels::Levels;
use crate::proto::md::BookSide;

/// What applying a delta did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied; the book is at this sequence.
    Ok,
    /// At or below the book's sequence: already applied, ignored.
    Duplicate,
    /// Buffered: the book waits for its snapshot.
    Buffered,
    /// Not the next sequence: the book is dropped (resync).
    Gap {
        /// The sequence expected.
        expected: u64,
        /// The one received.
        got: u64,
    },
    /// After the delta the best bid is at or above the best ask: dropped (resync).
    Crossed {
        /// Best bid.
        bid: i64,
        /// Best ask.
        ask: i64,
    },
    /// Too many deltas waiting for a snapshot, or more levels than a side holds: dropped
    /// (resync).
    Overflow,
}

/// Levels a side holds by default.
pub const LEVELS_MAX: usize = 4_096;

/// A level delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// Sequence number.
    pub seq: u64,
    /// Side.
    pub side: BookSide,
    /// Price.
    pub price: i64,
    /// New total at the price (0: gone).
    pub qty: u64,
}

/// One symbol's book, with every bound fixed at start (nothing allocates after).
#[derive(Debug, Clone)]
pub struct LocalBook {
    bids: Levels,
    asks: Levels,
    /// Sequence of the last delta applied; `None` while waiting for a snapshot.
    seq: Option<u64>,
    pending: Vec<Delta>,
    pending_max: usize,
}

impl LocalBook {
    /// An empty book waiting for its snapshot; at most `pending_max` deltas wait with it;
    /// [`LEVELS_MAX`] levels a side.
    pub fn new(pending_max: usize) -> Self {
        Self::with_levels(pending_max, LEVELS_MAX)
    }

    /// As [`LocalBook::new`] with `levels_max` levels a side.
    pub fn with_levels(pending_max: usize, levels_max: usize) -> Self {
        Self {
            bids: Levels::with_capacity(levels_max),
            asks: Levels::with_capacity(levels_max),
            seq: None,
            pending: Vec::with_capacity(pending_max),
            pending_max,
        }
    }

    /// The last sequence applied (`None`: no snapshot yet, or dropped).
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// Drops the book: it waits for a new snapshot.
    pub fn reset(&mut self) {
        self.bids.clear();
        self.asks.clear();
        self.seq = None;
        self.pending.clear();
    }

    /// Replaces the book with a snapshot at `seq`, then applies the waiting deltas above it.
    pub fn snapshot(
        &mut self,
        seq: u64,
        bids: impl Iterator<Item = (i64, u64)>,
        asks: impl Iterator<Item = (i64, u64)>,
    ) -> Applied {
        if self.bids.replace(bids).is_err() || self.asks.replace(asks).is_err() {
            self.reset();
            return Applied::Overflow;
        }
        self.seq = Some(seq);
        if let Some(crossed) = self.crossed() {
            self.reset();
            return crossed;
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_unstable_by_key(|d| d.seq);
        let mut outcome = Applied::Ok;
        for d in pending.drain(..) {
            match self.delta(d) {
                Applied::Ok | Applied::Duplicate => {}
                other => {
                    outcome = other;
                    break;
                }
            }
        }
        self.pending = pending;
        outcome
    }

    /// Applies one delta. See [`Applied`].
    pub fn delta(&mut self, d: Delta) -> Applied {
        let Some(seq) = self.seq else {
            if self.pending.len() >= self.pending_max {
                self.reset();
                return Applied::Overflow;
            }
            self.pending.push(d);
            return Applied::Buffered;
        };
        if d.seq <= seq {
            return Applied::Duplicate;
        }
        if d.seq != seq + 1 {
            self.reset();
            return Applied::Gap {
                expected: seq + 1,
                got: d.seq,
            };
        }
        let side = match d.side {
            BookSide::Bid => &mut self.bids,
            BookSide::Ask => &mut self.asks,
        };
        if side.set(d.price, d.qty).is_err() {
            self.reset();
            return Applied::Overflow;
        }
        self.seq = Some(d.seq);
        if let Some(crossed) = self.crossed() {
            self.reset();
            return crossed;
        }
        Applied::Ok
    }

    fn crossed(&self) -> Option<Applied> {
        let (bid, ask) = (self.best(BookSide::Bid)?, self.best(BookSide::Ask)?);
        (bid.0 >= ask.0).then_some(Applied::Crossed {
            bid: bid.0,
            ask: ask.0,
        })
    }

    /// Best level of a side.
    pub fn best(&self, side: BookSide) -> Option<(i64, u64)> {
        match side {
            BookSide::Bid => self.bids.highest(),
            BookSide::Ask => self.asks.lowest(),
        }
    }

    /// Bid levels, best (highest) first.
    pub fn bids(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.bids.ascending().rev()
    }

    /// Ask levels, best (lowest) first.
    pub fn asks(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.asks.ascending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(seq: u64, side: BookSide, price: i64, qty: u64) -> Delta {
        Delta {
            seq,
            side,
            price,
            qty,
        }
    }

    // Goal: deltas before the snapshot wait and apply above it; duplicates are ignored; a gap,
    // a reorder, a crossed book and a buffer overflow each drop the book.
    #[test]
    fn sequence_rules() {
        let mut b = LocalBook::new(4);
        assert_eq!(b.delta(d(5, BookSide::Bid, 99, 1)), Applied::Buffered);
        assert_eq!(b.delta(d(6, BookSide::Ask, 101, 2)), Applied::Buffered);
        assert_eq!(
            b.snapshot(5, [(100, 3)].into_iter(), [(102, 1)].into_iter()),
            Applied::Ok
        );
        assert_eq!(b.seq(), Some(6));
        assert_eq!(b.best(BookSide::Ask), Some((101, 2)));
        assert_eq!(b.delta(d(6, BookSide::Ask, 101, 9)), Applied::Duplicate);
        assert_eq!(b.delta(d(7, BookSide::Ask, 101, 0)), Applied::Ok);
        assert_eq!(b.best(BookSide::Ask), Some((102, 1)));
        assert_eq!(
            b.delta(d(9, BookSide::Bid, 98, 1)),
            Applied::Gap {
                expected: 8,
                got: 9
            }
        );
        assert_eq!(b.seq(), None);
        b.snapshot(10, [(100, 3)].into_iter(), [(102, 1)].into_iter());
        assert_eq!(
            b.delta(d(11, BookSide::Bid, 102, 1)),
            Applied::Crossed { bid: 102, ask: 102 }
        );
        assert_eq!(b.seq(), None);
        for s in 0..4 {
            assert_eq!(b.delta(d(20 + s, BookSide::Bid, 1, 1)), Applied::Buffered);
        }
        assert_eq!(b.delta(d(30, BookSide::Bid, 1, 1)), Applied::Overflow);
        assert_eq!(b.bids().count(), 0);
    }
}
