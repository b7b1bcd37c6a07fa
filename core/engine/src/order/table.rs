//! The order table: fixed capacity, keyed by [`ClientOrderId`], no allocation after start.
//!
//! Slots live in one array allocated at start. An open-addressing index (linear probing,
//! backward-shift deletion, twice the slot count) maps ids to slots. Closed orders stay in the
//! table, so a late report still finds its order, until their slot is needed: closed slots are
//! reused oldest first. When every slot holds an open order the table is full and new orders
//! are refused, never evicted.
//!
//! Open orders of each strategy are also threaded on an intrusive list (prev/next slot
//! indices), so a mass cancel walks only that strategy's open orders, never the whole table.
//!
//! Every change of state goes through [`super::lifecycle::transition`]. A report the
//! lifecycle does not allow is a typed error: counted, the order flagged for reconciliation,
//! nothing applied.

use std::collections::VecDeque;

use super::lifecycle::{transition, Context, LifecycleError, OrderEvent, OrderState};
use super::{
    ClientOrderId, NewOrder, Price, Qty, Side, StrategyId, SymbolId, TimeInForce, VenueId,
};

/// One order as keel knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    /// Client order id.
    pub id: ClientOrderId,
    /// Owning strategy.
    pub strategy: StrategyId,
    /// Venue link.
    pub venue: VenueId,
    /// Symbol.
    pub symbol: SymbolId,
    /// Side.
    pub side: Side,
    /// Limit price.
    pub price: Price,
    /// Order quantity.
    pub qty: Qty,
    /// Time in force.
    pub tif: TimeInForce,
    /// Reduce-only: kept so a replace of it keeps the rule (and its lane).
    pub reduce_only: bool,
    /// Quantity filled so far.
    pub filled_qty: Qty,
    /// Current state.
    pub state: OrderState,
    /// Open state before the current cancel/replace request.
    pub pending_from: OrderState,
    /// Pending state at the time the order became `Unknown`.
    pub unknown_from: OrderState,
    /// For a replacement order: the order it replaces. For an order being replaced: its
    /// replacement. `None` otherwise.
    pub linked: Option<ClientOrderId>,
    /// When the last request for this order was released to the venue (0: not yet).
    pub sent_ns: u64,
    /// A report contradicted keel's belief: reconcile this order with the venue.
    pub needs_reconcile: bool,
    /// The venue has said anything at all about this order (ack, fill, reject, cancel).
    /// Until then the order counts as in flight for the bulkheads.
    pub answered: bool,
    /// The strategy asked to cancel and has not been answered yet (`Canceled` or
    /// `CancelRejected`). Set by `CancelRequested`; the dispatcher clears it when it answers.
    pub cancel_owed: bool,
    /// When its command arrived at keel (`None` for an order restored from the journal): the
    /// start of its end-to-end time, queue time included.
    pub admitted_ns: Option<u64>,
}

impl Order {
    /// Quantity still open.
    pub fn leaves_qty(&self) -> Qty {
        self.qty - self.filled_qty
    }
}

/// Errors from the order table. The external ones (`UnknownId`, `Lifecycle`, `Overfill`) come
/// from venue reports and are counted; none of them changes the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The id is already in the table (open or recently closed).
    #[error("client order id {0} already in the order table")]
    DuplicateId(ClientOrderId),
    /// Every slot holds an open order.
    #[error("order table full: {orders_max} open orders")]
    Full {
        /// The configured capacity.
        orders_max: u32,
    },
    /// No order with this id (never seen, or closed long enough ago to be reused).
    #[error("no order with client order id {0}")]
    UnknownId(ClientOrderId),
    /// The lifecycle does not allow this event in this state.
    #[error("order {id}: {error}")]
    Lifecycle {
        /// The order.
        id: ClientOrderId,
        /// The refused transition.
        error: LifecycleError,
    },
    /// A fill larger than the open quantity: a double fill or a venue error.
    #[error("order {id}: fill of {fill_qty} exceeds open quantity {leaves_qty}")]
    Overfill {
        /// The order.
        id: ClientOrderId,
        /// Open quantity before the fill.
        leaves_qty: Qty,
        /// Quantity reported.
        fill_qty: Qty,
    },
}

/// Counters kept by the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Reports the lifecycle refused.
    pub invalid_transitions: u64,
    /// Fills that exceeded the open quantity.
    pub overfills: u64,
    /// Reports for ids the table does not hold.
    pub unknown_ids: u64,
    /// Closed orders whose slot was reused.
    pub evictions: u64,
}

/// A state change the table applied: what the caller needs to update risk and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// State before.
    pub from: OrderState,
    /// State after.
    pub to: OrderState,
    /// The order after the change.
    pub order: Order,
    /// This event is the venue's first word on the order.
    pub first_answer: bool,
}

const EMPTY: u32 = u32::MAX;

/// Fixed-capacity order table.
#[derive(Debug)]
pub struct OrderTable {
    slots: Vec<Option<Order>>,
    index: Vec<u32>,
    index_mask: usize,
    free: Vec<u32>,
    closed: VecDeque<u32>,
    open_count: u32,
    /// Per strategy: first slot of its open-order list.
    open_head: Vec<u32>,
    open_prev: Vec<u32>,
    open_next: Vec<u32>,
    stats: TableStats,
}

impl OrderTable {
    /// Bytes [`OrderTable::new`] allocates for `orders_max` slots.
    pub fn memory_bytes(orders_max: u32, strategies: u16) -> u64 {
        let slots = u64::from(orders_max);
        let index = (slots * 2).next_power_of_two();
        let slot = std::mem::size_of::<Option<Order>>() as u64;
        slots * slot + index * 4 + slots * (4 + 4 + 4 + 4) + u64::from(strategies) * 4
    }

    /// A table for `orders_max` orders (open plus retained closed) of `strategies` strategies.
    /// Allocates everything now.
    pub fn new(orders_max: u32, strategies: u16) -> Self {
        assert!(orders_max > 0, "orders_max must be positive");
        assert!(orders_max < EMPTY / 2, "orders_max too large for the index");
        let index_len = (orders_max as usize * 2).next_power_of_two();
        Self {
            slots: vec![None; orders_max as usize],
            index: vec![EMPTY; index_len],
            index_mask: index_len - 1,
            free: (0..orders_max).rev().collect(),
            closed: VecDeque::with_capacity(orders_max as usize),
            open_count: 0,
            open_head: vec![EMPTY; usize::from(strategies)],
            open_prev: vec![EMPTY; orders_max as usize],
            open_next: vec![EMPTY; orders_max as usize],
            stats: TableStats::default(),
        }
    }

    /// First slot of `strategy`'s open orders (newest first), for walks with [`Self::next_open`].
    pub fn first_open(&self, strategy: StrategyId) -> Option<u32> {
        let head = self.open_head[usize::from(strategy.0)];
        (head != EMPTY).then_some(head)
    }

    /// The open order after `slot` in its strategy's list. Read it before changing `slot`'s
    /// order: closing an order unlinks it.
    pub fn next_open(&self, slot: u32) -> Option<u32> {
        let next = self.open_next[slot as usize];
        (next != EMPTY).then_some(next)
    }

    fn link_open(&mut self, strategy: StrategyId, slot: u32) {
        let head = &mut self.open_head[usize::from(strategy.0)];
        self.open_prev[slot as usize] = EMPTY;
        self.open_next[slot as usize] = *head;
        if *head != EMPTY {
            self.open_prev[*head as usize] = slot;
        }
        *head = slot;
    }

    fn unlink_open(&mut self, strategy: StrategyId, slot: u32) {
        let (prev, next) = (self.open_prev[slot as usize], self.open_next[slot as usize]);
        if prev == EMPTY {
            self.open_head[usize::from(strategy.0)] = next;
        } else {
            self.open_next[prev as usize] = next;
        }
        if next != EMPTY {
            self.open_prev[next as usize] = prev;
        }
        self.open_prev[slot as usize] = EMPTY;
        self.open_next[slot as usize] = EMPTY;
    }

    /// Slot count chosen at start.
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Orders not yet in a terminal state.
    pub fn open_count(&self) -> u32 {
        self.open_count
    }

    /// Counters.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// The order with this id, open or recently closed.
    pub fn get(&self, id: ClientOrderId) -> Option<&Order> {
        self.find(id)
            .and_then(|(_, slot)| self.slots[slot as usize].as_ref())
    }

    /// The order in slot `slot`, for scans (mass cancel, reconciliation).
    pub fn slot(&self, slot: u32) -> Option<&Order> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// Inserts a new order in `PendingNew`.
    pub fn insert(
        &mut self,
        strategy: StrategyId,
        new: &NewOrder,
        linked: Option<ClientOrderId>,
    ) -> Result<&Order, TableError> {
        if self.find(new.id).is_some() {
            return Err(TableError::DuplicateId(new.id));
        }
        let slot = self.take_slot()?;
        self.slots[slot as usize] = Some(Order {
            id: new.id,
            strategy,
            venue: new.venue,
            symbol: new.symbol,
            side: new.side,
            price: new.price,
            qty: new.qty,
            tif: new.tif,
            reduce_only: new.reduce_only,
            filled_qty: 0,
            state: OrderState::PendingNew,
            pending_from: OrderState::PendingNew,
            unknown_from: OrderState::PendingNew,
            linked,
            sent_ns: 0,
            needs_reconcile: false,
            answered: false,
            cancel_owed: false,
            admitted_ns: None,
        });
        self.index_insert(new.id, slot);
        self.link_open(strategy, slot);
        self.open_count += 1;
        Ok(self.slots[slot as usize]
            .as_ref()
            .expect("slot just filled"))
    }

    /// Records when a request for `id` was released to the venue.
    pub fn mark_sent(&mut self, id: ClientOrderId, sent_ns: u64) {
        if let Some(order) = self.get_mut(id) {
            order.sent_ns = sent_ns;
        }
    }

    /// Records when the command that entered `id` arrived at keel.
    pub fn mark_admitted(&mut self, id: ClientOrderId, admitted_ns: u64) {
        if let Some(order) = self.get_mut(id) {
            order.admitted_ns = Some(admitted_ns);
        }
    }

    /// Links an order being replaced to its replacement.
    pub fn set_link(&mut self, id: ClientOrderId, linked: ClientOrderId) {
        if let Some(order) = self.get_mut(id) {
            order.linked = Some(linked);
        }
    }

    /// Applies a lifecycle event (with the fill quantity for fills). On error nothing changes
    /// except the counters and the order's reconcile flag.
    pub fn apply(
        &mut self,
        id: ClientOrderId,
        event: OrderEvent,
        fill_qty: Qty,
    ) -> Result<Applied, TableError> {
        let Some((_, slot)) = self.find(id) else {
            self.stats.unknown_ids += 1;
            return Err(TableError::UnknownId(id));
        };
        let order = self.slots[slot as usize]
            .as_mut()
            .expect("indexed slot is occupied");
        let event = match event {
            OrderEvent::Fill { .. } => {
                let leaves_qty = order.qty - order.filled_qty;
                if fill_qty == 0 || fill_qty > leaves_qty {
                    order.needs_reconcile = true;
                    self.stats.overfills += 1;
                    return Err(TableError::Overfill {
                        id,
                        leaves_qty,
                        fill_qty,
                    });
                }
                OrderEvent::Fill {
                    completes: fill_qty == leaves_qty,
                }
            }
            other => other,
        };
        let ctx = Context {
            filled: order.filled_qty > 0,
            pending_from: order.pending_from,
            unknown_from: order.unknown_from,
        };
        let from = order.state;
        let to = match transition(from, event, ctx) {
            Ok(to) => to,
            Err(error) => {
                order.needs_reconcile = true;
                self.stats.invalid_transitions += 1;
                return Err(TableError::Lifecycle { id, error });
            }
        };
        if let OrderEvent::Fill { .. } = event {
            order.filled_qty += fill_qty;
        }
        remember_origin(order, from, to, event);
        order.state = to;
        order.cancel_owed |= event == OrderEvent::CancelRequested;
        let first_answer = !order.answered && is_venue_answer(event);
        order.answered |= first_answer;
        let applied = Applied {
            from,
            to,
            order: *order,
            first_answer,
        };
        if to.is_terminal() && !from.is_terminal() {
            self.open_count -= 1;
            self.closed.push_back(slot);
            self.unlink_open(applied.order.strategy, slot);
        }
        Ok(applied)
    }

    /// Clears the order's owed cancel answer; true if one was owed.
    pub fn take_cancel_owed(&mut self, id: ClientOrderId) -> bool {
        self.get_mut(id)
            .is_some_and(|o| std::mem::replace(&mut o.cancel_owed, false))
    }

    fn get_mut(&mut self, id: ClientOrderId) -> Option<&mut Order> {
        let (_, slot) = self.find(id)?;
        self.slots[slot as usize].as_mut()
    }

    fn take_slot(&mut self) -> Result<u32, TableError> {
        if let Some(slot) = self.free.pop() {
            return Ok(slot);
        }
        let Some(slot) = self.closed.pop_front() else {
            return Err(TableError::Full {
                orders_max: self.capacity(),
            });
        };
        let old = self.slots[slot as usize].expect("closed slot is occupied");
        assert!(old.state.is_terminal(), "only closed orders are evicted");
        self.index_remove(old.id);
        self.slots[slot as usize] = None;
        self.stats.evictions += 1;
        Ok(slot)
    }

    fn home(&self, id: ClientOrderId) -> usize {
        // Fibonacci hashing spreads sequential ids across the index.
        (id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & self.index_mask
    }

    /// (index position, slot) of `id`.
    fn find(&self, id: ClientOrderId) -> Option<(usize, u32)> {
        let mut at = self.home(id);
        loop {
            let slot = self.index[at];
            if slot == EMPTY {
                return None;
            }
            if self.slots[slot as usize]
                .as_ref()
                .is_some_and(|o| o.id == id)
            {
                return Some((at, slot));
            }
            at = (at + 1) & self.index_mask;
        }
    }

    fn index_insert(&mut self, id: ClientOrderId, slot: u32) {
        let mut at = self.home(id);
        while self.index[at] != EMPTY {
            at = (at + 1) & self.index_mask;
        }
        self.index[at] = slot;
    }

    /// Removes `id` from the index by backward-shift deletion (no tombstones, so probe
    /// lengths never degrade over a long session). Call while the slot still holds the order.
    fn index_remove(&mut self, id: ClientOrderId) {
        let Some((mut hole, _)) = self.find(id) else {
            return;
        };
        let mut at = hole;
        loop {
            at = (at + 1) & self.index_mask;
            let slot = self.index[at];
            if slot == EMPTY {
                break;
            }
            let home = self.home(self.slot_id(slot));
            // Move the entry back if its home is not inside (hole, at] cyclically.
            let distance_to_at = at.wrapping_sub(home) & self.index_mask;
            let distance_to_hole = at.wrapping_sub(hole) & self.index_mask;
            if distance_to_at >= distance_to_hole {
                self.index[hole] = slot;
                hole = at;
            }
        }
        self.index[hole] = EMPTY;
    }

    fn slot_id(&self, slot: u32) -> ClientOrderId {
        self.slots[slot as usize]
            .as_ref()
            .map(|o| o.id)
            .expect("indexed slot is occupied")
    }
}

/// True for events that carry the venue's word (not our own requests, not a timeout).
fn is_venue_answer(event: OrderEvent) -> bool {
    !matches!(
        event,
        OrderEvent::CancelRequested | OrderEvent::ReplaceRequested | OrderEvent::Timeout
    )
}

/// Keeps the context a later transition needs: where a pending request started and which
/// pending state an `Unknown` order was in.
fn remember_origin(order: &mut Order, from: OrderState, to: OrderState, event: OrderEvent) {
    match (event, to) {
        (OrderEvent::CancelRequested | OrderEvent::ReplaceRequested, _) => {
            order.pending_from = from;
        }
        (OrderEvent::Accepted, _) if order.pending_from == OrderState::PendingNew => {
            order.pending_from = OrderState::Live;
        }
        (OrderEvent::Timeout, OrderState::Unknown) if from != OrderState::Unknown => {
            order.unknown_from = from;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::lifecycle::OrderEvent as E;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};

    fn new_order(seq: u64, qty: Qty) -> NewOrder {
        NewOrder {
            id: ClientOrderId(seq),
            venue: VenueId(0),
            symbol: SymbolId(0),
            side: Side::Buy,
            price: Price(100),
            qty,
            tif: TimeInForce::Day,
            reduce_only: false,
        }
    }

    #[derive(Debug, Clone, Copy)]
    struct ModelOrder {
        state: OrderState,
        qty: Qty,
        filled: Qty,
        pending_from: OrderState,
        unknown_from: OrderState,
    }

    fn event_strategy() -> impl Strategy<Value = (E, Qty)> {
        prop_oneof![
            Just((E::Accepted, 0)),
            (1u32..6).prop_map(|q| (E::Fill { completes: false }, q)),
            Just((E::CancelRequested, 0)),
            Just((E::Canceled, 0)),
            Just((E::CancelRejected, 0)),
            Just((E::ReplaceRequested, 0)),
            Just((E::Replaced, 0)),
            Just((E::ReplaceRejected, 0)),
            Just((E::Rejected, 0)),
            Just((E::Timeout, 0)),
        ]
    }

    proptest! {
        // Goal: the table's bookkeeping (index, eviction of the oldest closed order, refusal
        // when full of open orders, overfill detection, errors that change nothing) matches a
        // BTreeMap model. Method: random inserts and reports on a small table.
        #[test]
        fn matches_btreemap_model(
            ops in proptest::collection::vec((0u64..12, any::<bool>(), event_strategy()), 1..500),
        ) {
            const CAP: u32 = 6;
            let mut table = OrderTable::new(CAP, 1);
            let mut model: BTreeMap<u64, ModelOrder> = BTreeMap::new();
            let mut closed: VecDeque<u64> = VecDeque::new();
            for (seq, insert, (event, qty)) in ops {
                let id = ClientOrderId(seq + 1);
                if insert {
                    let open = model.values().filter(|o| !o.state.is_terminal()).count() as u32;
                    let got = table.insert(StrategyId(0), &new_order(seq + 1, 10), None).map(|o| o.id);
                    if model.contains_key(&id.0) {
                        prop_assert_eq!(got, Err(TableError::DuplicateId(id)));
                    } else if model.len() as u32 == CAP && open == CAP {
                        prop_assert_eq!(got, Err(TableError::Full { orders_max: CAP }));
                    } else {
                        prop_assert_eq!(got, Ok(id));
                        if model.len() as u32 == CAP {
                            let evicted = closed.pop_front().unwrap();
                            model.remove(&evicted);
                        }
                        let m = ModelOrder { state: OrderState::PendingNew, qty: 10, filled: 0, pending_from: OrderState::PendingNew, unknown_from: OrderState::PendingNew };
                        model.insert(id.0, m);
                    }
                } else {
                    let got = table.apply(id, event, qty);
                    match model.get_mut(&id.0) {
                        None => prop_assert_eq!(got, Err(TableError::UnknownId(id))),
                        Some(m) => {
                            let leaves = m.qty - m.filled;
                            let is_fill = matches!(event, E::Fill { .. });
                            if is_fill && qty > leaves {
                                prop_assert_eq!(got, Err(TableError::Overfill { id, leaves_qty: leaves, fill_qty: qty }));
                                continue;
                            }
                            let event = if is_fill { E::Fill { completes: qty == leaves } } else { event };
                            let ctx = Context { filled: m.filled > 0, pending_from: m.pending_from, unknown_from: m.unknown_from };
                            match transition(m.state, event, ctx) {
                                Err(error) => prop_assert_eq!(got, Err(TableError::Lifecycle { id, error })),
                                Ok(to) => {
                                    let applied = got.unwrap();
                                    prop_assert_eq!(applied.to, to);
                                    let from = m.state;
                                    if is_fill { m.filled += qty; }
                                    if matches!(event, E::CancelRequested | E::ReplaceRequested) { m.pending_from = from; }
                                    if event == E::Accepted && m.pending_from == OrderState::PendingNew { m.pending_from = OrderState::Live; }
                                    if event == E::Timeout && from != OrderState::Unknown { m.unknown_from = from; }
                                    m.state = to;
                                    if to.is_terminal() && !from.is_terminal() { closed.push_back(id.0); }
                                }
                            }
                        }
                    }
                }
                for (&raw, m) in &model {
                    let o = table.get(ClientOrderId(raw));
                    prop_assert!(o.is_some(), "{} lost", raw);
                    let o = o.unwrap();
                    prop_assert_eq!((o.state, o.filled_qty), (m.state, m.filled));
                }
                let open = model.values().filter(|o| !o.state.is_terminal()).count() as u32;
                prop_assert_eq!(table.open_count(), open);
                let mut walked = 0;
                let mut at = table.first_open(StrategyId(0));
                while let Some(slot) = at {
                    prop_assert!(!table.slot(slot).unwrap().state.is_terminal());
                    walked += 1;
                    at = table.next_open(slot);
                }
                prop_assert_eq!(walked, open, "open list length");
            }
        }
    }

    // Goal: a double fill is caught, counted, flags the order, and changes nothing.
    #[test]
    fn double_fill_is_refused() {
        let mut table = OrderTable::new(4, 1);
        let id = ClientOrderId(1);
        table
            .insert(StrategyId(0), &new_order(1, 100), None)
            .unwrap();
        table.apply(id, E::Accepted, 0).unwrap();
        table.apply(id, E::Fill { completes: false }, 100).unwrap();
        let again = table.apply(id, E::Fill { completes: false }, 100);
        assert!(
            matches!(
                again,
                Err(TableError::Overfill {
                    leaves_qty: 0,
                    fill_qty: 100,
                    ..
                })
            ),
            "{again:?}"
        );
        let order = table.get(id).unwrap();
        assert_eq!((order.state, order.filled_qty), (OrderState::Filled, 100));
        assert!(order.needs_reconcile);
        assert_eq!(table.stats().overfills, 1);
    }

    // Goal: backward-shift deletion keeps every surviving id findable through heavy churn.
    #[test]
    fn index_survives_churn() {
        let mut table = OrderTable::new(64, 1);
        for seq in 1..=20_000u64 {
            table
                .insert(StrategyId(0), &new_order(seq, 1), None)
                .unwrap();
            table.apply(ClientOrderId(seq), E::Rejected, 0).unwrap();
            if seq >= 64 {
                for back in seq - 63..=seq {
                    assert!(
                        table.get(ClientOrderId(back)).is_some(),
                        "{back} lost at {seq}"
                    );
                }
                assert!(table.get(ClientOrderId(seq - 64)).is_none());
            }
        }
        assert_eq!(table.stats().evictions, 20_000 - 64);
    }
}
