//! What a restarted engine rebuilds from its journal: every order not known closed, the
//! ClientOrderId high-water marks, each venue session's last applied sequence number, and
//! keel's position per venue account and symbol (the last position record, plus the fills
//! after it).
//! [`Recovery::snapshot`] writes that state back as records: a checkpoint.

use std::collections::BTreeMap;

use super::JournalRecord;
use crate::order::{
    ClientOrderId, IdAllocator, NewOrder, Position, ProtocolState, Qty, StrategyId, SymbolId,
    VenueId,
};

/// One order the journal does not show closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredOrder {
    /// The order as it left.
    pub order: NewOrder,
    /// The wire reference its session sent it under.
    pub wire_ref: u32,
    /// The venue acknowledged it.
    pub accepted: bool,
    /// Shares executed so far.
    pub filled: Qty,
}

impl RecoveredOrder {
    /// Sent and never answered: its outcome is unknown until the venue is asked (the engine
    /// marks it `Unknown` and reconciles; it is never resent).
    pub fn in_flight(&self) -> bool {
        !self.accepted && self.filled == 0
    }
}

/// The state rebuilt by replaying a journal; feed it every record in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Orders not closed, by id.
    pub open: BTreeMap<ClientOrderId, RecoveredOrder>,
    /// Next unused ClientOrderId sequence per strategy: above every id seen and every
    /// lease (high-water mark) recorded.
    pub next_sequence: BTreeMap<StrategyId, u64>,
    /// Highest venue sequence number whose report is on record, per venue session: the
    /// session resumes after it (reports are journaled in sequence order, and a report that
    /// changed nothing is harmless to see again).
    pub applied_through: BTreeMap<VenueId, u64>,
    /// Next unused wire reference per venue: above every one journaled.
    pub next_wire_ref: BTreeMap<VenueId, u32>,
    /// Each venue protocol's own state (the last recorded; for OUCH the venue session, the
    /// trading day, its records belong to), handed back to the protocol at restore.
    pub protocol_state: BTreeMap<VenueId, ProtocolState>,
    /// keel's position per venue account and symbol: what reconciliation compares with the
    /// venue's answer.
    pub positions: BTreeMap<(VenueId, SymbolId), Position>,
    /// Records that referred to an order the journal never saw the intent of.
    pub orphans: u64,
}

impl Recovery {
    /// Applies one record.
    pub fn apply(&mut self, record: &JournalRecord) {
        match *record {
            JournalRecord::Intent { order, wire_ref } => {
                self.see_open(order, wire_ref, false, 0);
            }
            JournalRecord::OpenOrder {
                order,
                wire_ref,
                accepted,
                filled,
            } => self.see_open(order, wire_ref, accepted, filled),
            JournalRecord::WireRefFloor {
                venue,
                next_wire_ref,
            } => {
                let next = self.next_wire_ref.entry(venue).or_insert(1);
                *next = (*next).max(next_wire_ref);
            }
            JournalRecord::Accepted { id, venue_seq } => match self.open.get_mut(&id) {
                Some(o) => {
                    o.accepted = true;
                    let venue = o.order.venue;
                    self.saw_seq(venue, venue_seq);
                }
                None => self.orphans += 1,
            },
            JournalRecord::Fill {
                id, qty, venue_seq, ..
            } => match self.open.get_mut(&id) {
                Some(o) => {
                    o.filled = o.filled.saturating_add(qty);
                    o.accepted = true;
                    let (venue, done) = (o.order.venue, o.filled >= o.order.qty);
                    let (symbol, side) = (o.order.symbol, o.order.side);
                    self.positions
                        .entry((venue, symbol))
                        .or_default()
                        .book(side, qty);
                    if done {
                        self.open.remove(&id);
                    }
                    self.saw_seq(venue, venue_seq);
                }
                None => self.orphans += 1,
            },
            JournalRecord::Closed { id, venue_seq } => match self.open.remove(&id) {
                Some(o) => self.saw_seq(o.order.venue, venue_seq),
                None => self.orphans += 1,
            },
            JournalRecord::SessionSeq {
                venue,
                applied_through,
            } => {
                let seq = self.applied_through.entry(venue).or_default();
                *seq = (*seq).max(applied_through);
            }
            JournalRecord::IdHighWater {
                strategy,
                high_water_mark,
            } => {
                let next = self.next_sequence.entry(strategy).or_default();
                *next = (*next).max(high_water_mark.saturating_add(1));
            }
            JournalRecord::ProtocolState { venue, state } => {
                self.protocol_state.insert(venue, state);
            }
            JournalRecord::Position {
                venue,
                symbol,
                position,
            } => {
                self.positions.insert((venue, symbol), position);
            }
        }
    }

    fn see_open(&mut self, order: NewOrder, wire_ref: u32, accepted: bool, filled: Qty) {
        self.see_id(order.id);
        let next = self.next_wire_ref.entry(order.venue).or_insert(1);
        *next = (*next).max(wire_ref.saturating_add(1));
        if filled >= order.qty && filled > 0 {
            // Fully executed: closed, whatever the record says about it being open.
            self.open.remove(&order.id);
            return;
        }
        let open = RecoveredOrder {
            order,
            wire_ref,
            accepted,
            filled,
        };
        self.open.insert(order.id, open);
    }

    /// This state as records (a checkpoint): replayed into an empty `Recovery` they rebuild
    /// it, `orphans` aside (a count of this replay's oddities, not state).
    pub fn snapshot(&self) -> Vec<JournalRecord> {
        let mut records = Vec::with_capacity(
            self.next_wire_ref.len()
                + self.next_sequence.len()
                + self.applied_through.len()
                + self.protocol_state.len()
                + self.positions.len()
                + self.open.len(),
        );
        for (&venue, &state) in &self.protocol_state {
            records.push(JournalRecord::ProtocolState { venue, state });
        }
        for (&venue, &next_wire_ref) in &self.next_wire_ref {
            records.push(JournalRecord::WireRefFloor {
                venue,
                next_wire_ref,
            });
        }
        for (&strategy, &next) in &self.next_sequence {
            records.push(JournalRecord::IdHighWater {
                strategy,
                high_water_mark: next.saturating_sub(1),
            });
        }
        for (&venue, &applied_through) in &self.applied_through {
            records.push(JournalRecord::SessionSeq {
                venue,
                applied_through,
            });
        }
        for (&(venue, symbol), &position) in &self.positions {
            records.push(JournalRecord::Position {
                venue,
                symbol,
                position,
            });
        }
        for o in self.open.values() {
            records.push(JournalRecord::OpenOrder {
                order: o.order,
                wire_ref: o.wire_ref,
                accepted: o.accepted,
                filled: o.filled,
            });
        }
        records
    }

    fn saw_seq(&mut self, venue: VenueId, seq: u64) {
        if seq > 0 {
            let through = self.applied_through.entry(venue).or_default();
            *through = (*through).max(seq);
        }
    }

    fn see_id(&mut self, id: ClientOrderId) {
        let next = self.next_sequence.entry(id.strategy()).or_default();
        *next = (*next).max(id.sequence().saturating_add(1));
    }

    /// The strategy's id allocator after a restart: it resumes above every id the journal
    /// saw and every lease it recorded, so no ClientOrderId is ever issued twice. (No lease is
    /// held: extend it and journal the new mark before allocating.)
    pub fn id_allocator(&self, strategy: StrategyId) -> IdAllocator {
        let next = self
            .next_sequence
            .get(&strategy)
            .copied()
            .unwrap_or(1)
            .max(1);
        IdAllocator::resume(strategy, next - 1)
    }

    /// Orders sent and never answered.
    pub fn in_flight(&self) -> impl Iterator<Item = &RecoveredOrder> {
        self.open.values().filter(|o| o.in_flight())
    }
}
