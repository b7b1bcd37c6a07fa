//! A price-time priority limit order book for one symbol.
//!
//! Bids and asks are price levels in `BTreeMap`s, each level a FIFO of resting orders. An
//! incoming order matches against the best opposite levels while it crosses, oldest order
//! first, at the resting order's price; what is left rests (day orders) or is dropped
//! (immediate-or-cancel). Reducing an order's quantity keeps its place; a price change or a
//! quantity increase loses it. This is the venue simulator's book, not the engine's hot path:
//! it favours clarity over zero allocation.

use std::collections::{BTreeMap, VecDeque};

use keel::hash::FxHashMap;

use keel::order::Side;

/// Venue-wide order reference number.
pub type OrderRef = u64;

/// An order resting in the book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resting {
    /// Reference number.
    pub order_ref: OrderRef,
    /// Shares still open.
    pub open_qty: u32,
}

/// One match between an incoming order and a resting one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fill {
    /// The resting (maker) order.
    pub maker: OrderRef,
    /// The incoming (taker) order.
    pub taker: OrderRef,
    /// Shares.
    pub qty: u32,
    /// Price (the maker's).
    pub price: i64,
    /// Whether the maker is now fully filled (and gone from the book).
    pub maker_done: bool,
}

/// What happened to an incoming order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted {
    /// Shares filled on entry.
    pub filled_qty: u32,
    /// Shares now resting (0 for IOC or a fully filled order).
    pub resting_qty: u32,
}

#[derive(Debug, Clone, Copy)]
struct Location {
    side: Side,
    price: i64,
}

/// The book of one symbol.
#[derive(Debug, Default)]
pub struct Book {
    bids: BTreeMap<i64, VecDeque<Resting>>,
    asks: BTreeMap<i64, VecDeque<Resting>>,
    index: FxHashMap<OrderRef, Location>,
    /// Levels changed since the last [`Book::take_touched`] (for market data), possibly
    /// repeated.
    touched: Vec<(Side, i64)>,
}

impl Book {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty book whose order index is sized for `orders` resting orders up front.
    pub fn with_capacity(orders: usize) -> Self {
        Self {
            index: FxHashMap::with_capacity_and_hasher(orders, Default::default()),
            ..Self::default()
        }
    }

    /// Matches an incoming order, appending fills to `fills`; rests the remainder if `rest`.
    pub fn submit(
        &mut self,
        order_ref: OrderRef,
        side: Side,
        price: i64,
        qty: u32,
        rest: bool,
        fills: &mut Vec<Fill>,
    ) -> Submitted {
        assert!(
            !self.index.contains_key(&order_ref),
            "order ref {order_ref} reused"
        );
        let mut left = qty;
        while left > 0 {
            let Some((level_price, level)) = self.best_opposite_mut(side) else {
                break;
            };
            let crosses = match side {
                Side::Buy => level_price <= price,
                Side::Sell => level_price >= price,
            };
            if !crosses {
                break;
            }
            let maker = level.front_mut().expect("levels are never empty");
            let qty = left.min(maker.open_qty);
            maker.open_qty -= qty;
            left -= qty;
            let maker_done = maker.open_qty == 0;
            let maker_ref = maker.order_ref;
            if maker_done {
                level.pop_front();
            }
            let level_empty = level.is_empty();
            if maker_done {
                self.index.remove(&maker_ref);
            }
            if level_empty {
                self.opposite_mut(side).remove(&level_price);
            }
            self.touched.push((side.opposite(), level_price));
            fills.push(Fill {
                maker: maker_ref,
                taker: order_ref,
                qty,
                price: level_price,
                maker_done,
            });
        }
        let resting_qty = if rest { left } else { 0 };
        if resting_qty > 0 {
            self.own_mut(side)
                .entry(price)
                .or_default()
                .push_back(Resting {
                    order_ref,
                    open_qty: left,
                });
            self.index.insert(order_ref, Location { side, price });
            self.touched.push((side, price));
        }
        Submitted {
            filled_qty: qty - left,
            resting_qty,
        }
    }

    /// Reduces a resting order to `open_qty` (0 removes it), keeping its time priority.
    /// Returns the shares taken off, or `None` if the order is not resting.
    pub fn reduce(&mut self, order_ref: OrderRef, open_qty: u32) -> Option<u32> {
        let loc = *self.index.get(&order_ref)?;
        let levels = self.own_mut(loc.side);
        let level = levels.get_mut(&loc.price).expect("indexed level exists");
        let at = level
            .iter()
            .position(|r| r.order_ref == order_ref)
            .expect("indexed order rests");
        let before = level[at].open_qty;
        if open_qty >= before {
            return Some(0);
        }
        if open_qty == 0 {
            level.remove(at);
            if level.is_empty() {
                levels.remove(&loc.price);
            }
            self.index.remove(&order_ref);
        } else {
            level[at].open_qty = open_qty;
        }
        self.touched.push((loc.side, loc.price));
        Some(before - open_qty)
    }

    /// Shares open on a resting order.
    pub fn open_qty(&self, order_ref: OrderRef) -> Option<u32> {
        let loc = self.index.get(&order_ref)?;
        let levels = match loc.side {
            Side::Buy => &self.bids,
            Side::Sell => &self.asks,
        };
        levels[&loc.price]
            .iter()
            .find(|r| r.order_ref == order_ref)
            .map(|r| r.open_qty)
    }

    /// Total open shares at a level (0 if none rests there).
    pub fn level_qty(&self, side: Side, price: i64) -> u64 {
        let levels = match side {
            Side::Buy => &self.bids,
            Side::Sell => &self.asks,
        };
        levels
            .get(&price)
            .map_or(0, |l| l.iter().map(|r| u64::from(r.open_qty)).sum())
    }

    /// Hands over the levels changed since the last call (the caller dedupes), leaving an
    /// empty list with the same capacity in their place.
    pub fn take_touched(&mut self, into: &mut Vec<(Side, i64)>) {
        into.append(&mut self.touched);
    }

    /// Best bid and best ask prices.
    pub fn best(&self) -> (Option<i64>, Option<i64>) {
        (
            self.bids.keys().next_back().copied(),
            self.asks.keys().next().copied(),
        )
    }

    /// Resting orders.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when nothing rests.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Depth per level from the best outwards: (price, total open shares) for `side`.
    pub fn depth(&self, side: Side, levels: usize) -> Vec<(i64, u64)> {
        let sum = |(p, l): (&i64, &VecDeque<Resting>)| {
            (*p, l.iter().map(|r| u64::from(r.open_qty)).sum())
        };
        match side {
            Side::Buy => self.bids.iter().rev().take(levels).map(sum).collect(),
            Side::Sell => self.asks.iter().take(levels).map(sum).collect(),
        }
    }

    fn own_mut(&mut self, side: Side) -> &mut BTreeMap<i64, VecDeque<Resting>> {
        match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        }
    }

    fn opposite_mut(&mut self, side: Side) -> &mut BTreeMap<i64, VecDeque<Resting>> {
        match side {
            Side::Buy => &mut self.asks,
            Side::Sell => &mut self.bids,
        }
    }

    fn best_opposite_mut(&mut self, side: Side) -> Option<(i64, &mut VecDeque<Resting>)> {
        match side {
            Side::Buy => self.asks.iter_mut().next().map(|(p, l)| (*p, l)),
            Side::Sell => self.bids.iter_mut().next_back().map(|(p, l)| (*p, l)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Goal: price-time priority and partial fills, by hand.
    #[test]
    fn price_then_time_priority() {
        let mut book = Book::new();
        let mut fills = Vec::new();
        book.submit(1, Side::Sell, 101, 10, true, &mut fills);
        book.submit(2, Side::Sell, 100, 10, true, &mut fills);
        book.submit(3, Side::Sell, 100, 10, true, &mut fills);
        assert!(fills.is_empty());
        let done = book.submit(4, Side::Buy, 101, 25, true, &mut fills);
        assert_eq!(
            done,
            Submitted {
                filled_qty: 25,
                resting_qty: 0
            }
        );
        let got: Vec<_> = fills
            .iter()
            .map(|f| (f.maker, f.qty, f.price, f.maker_done))
            .collect();
        assert_eq!(
            got,
            vec![(2, 10, 100, true), (3, 10, 100, true), (1, 5, 101, false)]
        );
        assert_eq!(book.open_qty(1), Some(5));
        assert_eq!(book.best(), (None, Some(101)));
    }

    // Goal: IOC never rests; a reduce keeps priority; a full reduce removes the order.
    #[test]
    fn ioc_and_reduce() {
        let mut book = Book::new();
        let mut fills = Vec::new();
        let ioc = book.submit(1, Side::Buy, 100, 10, false, &mut fills);
        assert_eq!(
            ioc,
            Submitted {
                filled_qty: 0,
                resting_qty: 0
            }
        );
        assert!(book.is_empty());
        book.submit(2, Side::Buy, 100, 10, true, &mut fills);
        book.submit(3, Side::Buy, 100, 10, true, &mut fills);
        assert_eq!(book.reduce(2, 4), Some(6));
        book.submit(4, Side::Sell, 100, 5, true, &mut fills);
        assert_eq!(fills[0].maker, 2, "a reduced order keeps its place");
        // The sell of 5 took all 4 of order 2, then 1 of order 3.
        assert_eq!(book.reduce(3, 0), Some(9));
        assert_eq!(book.reduce(3, 0), None);
        assert_eq!(
            book.open_qty(4),
            None,
            "fully filled on entry: never rested"
        );
    }

    /// Reference: a flat list of resting orders in arrival order; matching picks the best
    /// price, then the earliest arrival, by scanning.
    #[derive(Default)]
    struct Model {
        resting: Vec<(OrderRef, Side, i64, u32)>,
    }

    impl Model {
        fn submit(
            &mut self,
            r: OrderRef,
            side: Side,
            price: i64,
            mut qty: u32,
            rest: bool,
        ) -> Vec<(OrderRef, u32, i64)> {
            let mut fills = Vec::new();
            loop {
                let best = self
                    .resting
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| {
                        o.1 != side
                            && match side {
                                Side::Buy => o.2 <= price,
                                Side::Sell => o.2 >= price,
                            }
                    })
                    .min_by_key(|(i, o)| {
                        (
                            match side {
                                Side::Buy => o.2,
                                Side::Sell => -o.2,
                            },
                            *i,
                        )
                    })
                    .map(|(i, _)| i);
                let (Some(i), true) = (best, qty > 0) else {
                    break;
                };
                let take = qty.min(self.resting[i].3);
                fills.push((self.resting[i].0, take, self.resting[i].2));
                self.resting[i].3 -= take;
                qty -= take;
                if self.resting[i].3 == 0 {
                    self.resting.remove(i);
                }
            }
            if rest && qty > 0 {
                self.resting.push((r, side, price, qty));
            }
            fills
        }
    }

    proptest! {
        // Goal: the book matches exactly like the scanning reference model, and is never
        // left crossed. Method: random order flow over a narrow price band.
        #[test]
        fn matches_reference_model(orders in proptest::collection::vec((any::<bool>(), 95i64..105, 1u32..20, any::<bool>()), 1..300)) {
            let mut book = Book::new();
            let mut model = Model::default();
            for (i, (buy, price, qty, rest)) in orders.into_iter().enumerate() {
                let side = if buy { Side::Buy } else { Side::Sell };
                let r = i as u64 + 1;
                let mut fills = Vec::new();
                book.submit(r, side, price, qty, rest, &mut fills);
                let got: Vec<_> = fills.iter().map(|f| (f.maker, f.qty, f.price)).collect();
                prop_assert_eq!(got, model.submit(r, side, price, qty, rest));
                if let (Some(bid), Some(ask)) = book.best() {
                    prop_assert!(bid < ask, "crossed book {} >= {}", bid, ask);
                }
                prop_assert_eq!(book.len(), model.resting.len());
            }
        }
    }
}
