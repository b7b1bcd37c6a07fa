//! Priority lanes for one venue: cancels, then replaces, then new orders.
//!
//! Priority is structural: three separate bounded queues, served in that order, so a cancel
//! never waits behind a new order whatever their arrival order. The cancel and new-order
//! lanes are fair across symbols ([`SymbolLane`]): one queue per symbol, linked through a
//! shared node arena, served round-robin one item per symbol per turn. So under one symbol's
//! cancel storm a cancel on another symbol waits behind at most one of the storm's cancels
//! per other symbol with cancels queued, never behind the whole storm; the new-order lane
//! adds a per-symbol cap so one hot symbol cannot fill it (the cancel lane has none: a cancel
//! is never refused to make room, it reduces risk). All memory is allocated at start.

use std::collections::VecDeque;

use crate::order::{ClientOrderId, NewOrder, Replace, SymbolId};

/// Work in the cancel lane. Mass cancels are expanded into single cancels on admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelWork {
    /// Cancel one order.
    One {
        /// The order.
        id: ClientOrderId,
        /// Its symbol (the lane's fairness key).
        symbol: SymbolId,
        /// When it entered the lane.
        enqueued_ns: u64,
    },
    /// Ask the venue for an `Unknown` order's state (never a resend). Rides the cancel lane:
    /// resolving doubt is as urgent as reducing risk, and it is never shed.
    Query {
        /// The order.
        id: ClientOrderId,
        /// Its symbol (the lane's fairness key).
        symbol: SymbolId,
        /// When it entered the lane.
        enqueued_ns: u64,
    },
}

impl CancelWork {
    /// When it entered the lane.
    pub fn enqueued_ns(&self) -> u64 {
        match *self {
            CancelWork::One { enqueued_ns, .. } | CancelWork::Query { enqueued_ns, .. } => {
                enqueued_ns
            }
        }
    }
}

/// What a [`SymbolLane`] needs of its items: the symbol that keys its fairness, and the
/// order it is about (for removal by id).
pub trait LaneItem: Copy {
    /// The fairness key.
    fn symbol(&self) -> SymbolId;
    /// The order it is about.
    fn order_id(&self) -> ClientOrderId;
}

impl LaneItem for QueuedNew {
    fn symbol(&self) -> SymbolId {
        self.order.symbol
    }
    fn order_id(&self) -> ClientOrderId {
        self.order.id
    }
}

impl LaneItem for CancelWork {
    fn symbol(&self) -> SymbolId {
        match *self {
            CancelWork::One { symbol, .. } | CancelWork::Query { symbol, .. } => symbol,
        }
    }
    fn order_id(&self) -> ClientOrderId {
        match *self {
            CancelWork::One { id, .. } | CancelWork::Query { id, .. } => id,
        }
    }
}

/// A queued replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedReplace {
    /// The replace.
    pub replace: Replace,
    /// When it entered the lane.
    pub enqueued_ns: u64,
}

/// A queued new order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedNew {
    /// The order.
    pub order: NewOrder,
    /// When it entered the lane.
    pub enqueued_ns: u64,
}

/// A bounded FIFO: a `VecDeque` allocated once and never allowed to grow.
#[derive(Debug)]
pub struct BoundedQueue<T> {
    items: VecDeque<T>,
    capacity: usize,
}

impl<T> BoundedQueue<T> {
    /// An empty queue holding at most `capacity` items.
    pub fn new(capacity: u32) -> Self {
        Self {
            items: VecDeque::with_capacity(capacity as usize),
            capacity: capacity as usize,
        }
    }

    /// Appends, or hands the item back when full.
    #[inline]
    pub fn push(&mut self, item: T) -> Result<(), T> {
        if self.items.len() >= self.capacity {
            return Err(item);
        }
        self.items.push_back(item);
        Ok(())
    }

    /// Removes the oldest item.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// The oldest item.
    #[inline]
    pub fn front(&self) -> Option<&T> {
        self.items.front()
    }

    /// Items queued.
    #[inline]
    pub fn len(&self) -> u32 {
        self.items.len() as u32
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Room left.
    pub fn free(&self) -> u32 {
        (self.capacity - self.items.len()) as u32
    }
}

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node<T> {
    item: Option<T>,
    next: u32,
}

#[derive(Debug, Clone, Copy)]
struct SymbolQueue {
    head: u32,
    tail: u32,
    len: u32,
}

/// Why an item could not enter a [`SymbolLane`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewLaneFull {
    /// The lane holds its capacity (`lane_new_capacity`, `lane_cancel_capacity`).
    Total,
    /// The symbol holds its cap (`lane_new_per_symbol_max`).
    Symbol,
}

/// The new-order lane: per-symbol FIFOs served round-robin.
pub type NewLane = SymbolLane<QueuedNew>;

/// The cancel lane: cancels and status queries, per-symbol FIFOs served round-robin, with no
/// per-symbol cap (see the module docs).
pub type CancelLane = SymbolLane<CancelWork>;

impl CancelLane {
    /// A cancel lane of `capacity` items over `symbols` symbols.
    pub fn cancels(capacity: u32, symbols: u16) -> Self {
        Self::new(capacity, capacity, symbols)
    }
}

/// A lane fair across symbols: per-symbol FIFOs linked through one node arena, served
/// round-robin one item per symbol per turn.
#[derive(Debug)]
pub struct SymbolLane<T> {
    nodes: Vec<Node<T>>,
    free_head: u32,
    symbols: Vec<SymbolQueue>,
    /// Symbols with queued orders, in service order.
    active: BoundedQueue<u16>,
    len: u32,
    per_symbol_max: u32,
}

impl<T: LaneItem> SymbolLane<T> {
    /// A lane of `capacity` items over `symbols` symbols, at most `per_symbol_max` each.
    pub fn new(capacity: u32, per_symbol_max: u32, symbols: u16) -> Self {
        assert!(
            capacity > 0 && per_symbol_max > 0,
            "lane bounds must be positive"
        );
        let nodes = (0..capacity)
            .map(|i| Node {
                item: None,
                next: if i + 1 < capacity { i + 1 } else { NIL },
            })
            .collect();
        Self {
            nodes,
            free_head: 0,
            symbols: vec![
                SymbolQueue {
                    head: NIL,
                    tail: NIL,
                    len: 0
                };
                usize::from(symbols)
            ],
            active: BoundedQueue::new(u32::from(symbols)),
            len: 0,
            per_symbol_max,
        }
    }

    /// Orders queued.
    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity chosen at start.
    pub fn capacity(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// Room left (in total; a symbol's cap may bind first).
    pub fn free(&self) -> u32 {
        self.capacity() - self.len
    }

    /// Whether an order on `symbol` would fit now.
    #[inline]
    pub fn can_push(&self, symbol: SymbolId) -> Result<(), NewLaneFull> {
        if self.free_head == NIL {
            return Err(NewLaneFull::Total);
        }
        if self.symbols[usize::from(symbol.0)].len >= self.per_symbol_max {
            return Err(NewLaneFull::Symbol);
        }
        Ok(())
    }

    /// Queues `item` behind its symbol's other items.
    pub fn push(&mut self, item: T) -> Result<(), NewLaneFull> {
        let symbol = item.symbol().0;
        self.can_push(item.symbol())?;
        let node = self.free_head;
        self.free_head = self.nodes[node as usize].next;
        self.nodes[node as usize] = Node {
            item: Some(item),
            next: NIL,
        };
        let queue = &mut self.symbols[usize::from(symbol)];
        if queue.tail == NIL {
            queue.head = node;
            // Every active symbol has at least one order, so `active` never overflows.
            self.active
                .push(symbol)
                .expect("active ring holds every symbol");
        } else {
            self.nodes[queue.tail as usize].next = node;
        }
        queue.tail = node;
        queue.len += 1;
        self.len += 1;
        Ok(())
    }

    /// The item that would be served next.
    #[inline]
    pub fn peek(&self) -> Option<&T> {
        let symbol = *self.active.front()?;
        let head = self.symbols[usize::from(symbol)].head;
        self.nodes[head as usize].item.as_ref()
    }

    /// Serves the next item and moves its symbol to the back of the rotation.
    pub fn pop(&mut self) -> Option<T> {
        let symbol = self.active.pop()?;
        let item = self.unlink_head(symbol);
        if self.symbols[usize::from(symbol)].len > 0 {
            self.active
                .push(symbol)
                .expect("a symbol just left the ring");
        }
        Some(item)
    }

    /// Removes a queued item by order id (a cancel that catches its order before it left).
    pub fn remove(&mut self, symbol: SymbolId, id: ClientOrderId) -> Option<T> {
        let queue = self.symbols[usize::from(symbol.0)];
        let (mut prev, mut at) = (NIL, queue.head);
        while at != NIL {
            let node = self.nodes[at as usize];
            if node.item.is_some_and(|q| q.order_id() == id) {
                let item = self.unlink(symbol.0, prev, at);
                if self.symbols[usize::from(symbol.0)].len == 0 {
                    // Keep the rotation naming only symbols with queued orders.
                    self.drop_active(symbol.0);
                }
                return Some(item);
            }
            (prev, at) = (at, node.next);
        }
        None
    }

    fn unlink_head(&mut self, symbol: u16) -> T {
        let head = self.symbols[usize::from(symbol)].head;
        self.unlink(symbol, NIL, head)
    }

    fn unlink(&mut self, symbol: u16, prev: u32, at: u32) -> T {
        let node = self.nodes[at as usize];
        let queue = &mut self.symbols[usize::from(symbol)];
        if prev == NIL {
            queue.head = node.next;
        } else {
            self.nodes[prev as usize].next = node.next;
        }
        if queue.tail == at {
            queue.tail = prev;
        }
        queue.len -= 1;
        self.len -= 1;
        self.nodes[at as usize] = Node {
            item: None,
            next: self.free_head,
        };
        self.free_head = at;
        node.item.expect("linked node holds an item")
    }

    /// Takes `symbol` out of the rotation, keeping the others' order.
    fn drop_active(&mut self, symbol: u16) {
        for _ in 0..self.active.len() {
            let s = self.active.pop().expect("len checked");
            if s != symbol {
                self.active.push(s).expect("rotation keeps the count");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::{Price, Side, TimeInForce, VenueId};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn order(seq: u64, symbol: u16) -> QueuedNew {
        let order = NewOrder {
            id: ClientOrderId(seq),
            venue: VenueId(0),
            symbol: SymbolId(symbol),
            side: Side::Buy,
            price: Price(1),
            qty: 1,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        QueuedNew {
            order,
            enqueued_ns: seq,
        }
    }

    proptest! {
        // Goal: the lane is per-symbol FIFO, round-robin across symbols, bounded in total and
        // per symbol, and removal by id keeps all of that. Method: random push/pop/remove
        // against a model of per-symbol VecDeques plus a rotation list.
        #[test]
        fn matches_model(ops in proptest::collection::vec((0u8..3, 0u16..4), 1..400)) {
            let mut lane = NewLane::new(10, 4, 4);
            let mut model: BTreeMap<u16, VecDeque<u64>> = BTreeMap::new();
            let mut rotation: VecDeque<u16> = VecDeque::new();
            let mut seq = 0;
            for (op, symbol) in ops {
                match op {
                    0 => {
                        seq += 1;
                        let total: usize = model.values().map(VecDeque::len).sum();
                        let mine = model.get(&symbol).map_or(0, VecDeque::len);
                        let got = lane.push(order(seq, symbol));
                        let expected = if total >= 10 { Err(NewLaneFull::Total) }
                            else if mine >= 4 { Err(NewLaneFull::Symbol) } else { Ok(()) };
                        prop_assert_eq!(got, expected);
                        if got.is_ok() {
                            if mine == 0 { rotation.push_back(symbol); }
                            model.entry(symbol).or_default().push_back(seq);
                        }
                    }
                    1 => {
                        let got = lane.pop().map(|q| q.order.id.0);
                        let expected = rotation.pop_front().map(|s| {
                            let q = model.get_mut(&s).unwrap();
                            let id = q.pop_front().unwrap();
                            if !q.is_empty() { rotation.push_back(s); }
                            id
                        });
                        prop_assert_eq!(got, expected);
                    }
                    _ => {
                        let target = model.get(&symbol).and_then(|q| q.back().copied());
                        if let Some(id) = target {
                            let got = lane.remove(SymbolId(symbol), ClientOrderId(id));
                            prop_assert_eq!(got.map(|q| q.order.id.0), Some(id));
                            let q = model.get_mut(&symbol).unwrap();
                            q.pop_back();
                            if q.is_empty() { rotation.retain(|&s| s != symbol); }
                        } else {
                            prop_assert!(lane.remove(SymbolId(symbol), ClientOrderId(u64::MAX)).is_none());
                        }
                    }
                }
                let total: usize = model.values().map(VecDeque::len).sum();
                prop_assert_eq!(lane.len() as usize, total);
                prop_assert_eq!(lane.peek().map(|q| q.order.id.0), rotation.front().map(|s| model[s][0]));
            }
        }
    }

    fn cancel(seq: u64, symbol: u16) -> CancelWork {
        let (id, symbol) = (ClientOrderId(seq), SymbolId(symbol));
        if seq % 5 == 0 {
            CancelWork::Query {
                id,
                symbol,
                enqueued_ns: seq,
            }
        } else {
            CancelWork::One {
                id,
                symbol,
                enqueued_ns: seq,
            }
        }
    }

    proptest! {
        // Goal: the cancel lane is per-symbol FIFO and round-robin across symbols, bounded in
        // total only (no symbol's cancel is refused while the lane has room), and no cancel
        // waits behind more than one cancel of any other symbol for each cancel of its own
        // symbol queued ahead of it. Method: random pushes (cancels and queries) and pops
        // against per-symbol VecDeques plus a rotation list; for each queued cancel, the
        // other symbols' cancels served since it arrived.
        #[test]
        fn cancel_lane_matches_model(ops in proptest::collection::vec((0u8..2, 0u16..4), 1..600)) {
            let mut lane = CancelLane::cancels(64, 4);
            let mut model: BTreeMap<u16, VecDeque<u64>> = BTreeMap::new();
            let mut rotation: VecDeque<u16> = VecDeque::new();
            // Per queued cancel: (its symbol, own cancels ahead at arrival, served per symbol since).
            let mut waits: BTreeMap<u64, (u16, u64, [u64; 4])> = BTreeMap::new();
            let mut seq = 0;
            for (op, symbol) in ops {
                if op == 0 {
                    seq += 1;
                    let total: usize = model.values().map(VecDeque::len).sum();
                    let got = lane.push(cancel(seq, symbol));
                    prop_assert_eq!(got.is_ok(), total < 64);
                    if total >= 64 {
                        prop_assert_eq!(got, Err(NewLaneFull::Total));
                        continue;
                    }
                    let q = model.entry(symbol).or_default();
                    if q.is_empty() { rotation.push_back(symbol); }
                    waits.insert(seq, (symbol, q.len() as u64, [0; 4]));
                    q.push_back(seq);
                } else {
                    let got = lane.pop();
                    let expected = rotation.pop_front().map(|s| {
                        let q = model.get_mut(&s).unwrap();
                        let id = q.pop_front().unwrap();
                        if !q.is_empty() { rotation.push_back(s); }
                        id
                    });
                    prop_assert_eq!(got.map(|c| c.order_id().0), expected);
                    if let Some(c) = got {
                        prop_assert_eq!(c, cancel(c.order_id().0, c.symbol().0));
                        let (_, ahead, behind) = waits.remove(&c.order_id().0).unwrap();
                        for (other, n) in behind.iter().enumerate() {
                            if other as u16 != c.symbol().0 {
                                prop_assert!(*n <= ahead + 1, "waited behind {} of symbol {}", n, other);
                            }
                        }
                        for w in waits.values_mut() {
                            w.2[usize::from(c.symbol().0)] += 1;
                        }
                    }
                }
                let total: usize = model.values().map(VecDeque::len).sum();
                prop_assert_eq!(lane.len() as usize, total);
                prop_assert_eq!(lane.free() as usize, 64 - total);
                prop_assert_eq!(lane.peek().map(|c| c.order_id().0), rotation.front().map(|s| model[s][0]));
            }
        }
    }

    // Goal: under one symbol's storm, another symbol's cancel leaves second, not last; the
    // storm may fill the whole lane (a cancel is never refused for fairness).
    #[test]
    fn a_cancel_storm_does_not_hold_another_symbol_back() {
        let mut lane = CancelLane::cancels(1_001, 2);
        for seq in 0..1_000 {
            lane.push(cancel(seq, 0)).unwrap();
        }
        lane.push(cancel(5_000, 1)).unwrap();
        assert_eq!(lane.push(cancel(5_001, 0)), Err(NewLaneFull::Total));
        let served: Vec<u64> = (0..3).map(|_| lane.pop().unwrap().order_id().0).collect();
        assert_eq!(served, vec![0, 5_000, 1]);
    }

    // Goal: one hot symbol cannot starve the rest.
    #[test]
    fn hot_symbol_does_not_starve_others() {
        let mut lane = NewLane::new(100, 90, 2);
        for seq in 0..90 {
            lane.push(order(seq, 0)).unwrap();
        }
        lane.push(order(1000, 1)).unwrap();
        let served: Vec<u64> = (0..3).map(|_| lane.pop().unwrap().order.id.0).collect();
        assert_eq!(served, vec![0, 1000, 1]);
    }
}
