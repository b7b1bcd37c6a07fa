//! What a restarted engine rebuilds from its journal: every order not known closed, the
//! ClientOrderId high-water marks, and each venue session's last applied sequence number.

use std::collections::BTreeMap;

use super::JournalRecord;
use crate::order::{ClientOrderId, IdAllocator, NewOrder, Qty, StrategyId, VenueId};

/// One order the journal does not show closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredOrder {
    /// The order as it left.
    pub order: NewOrder,
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
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Orders not closed, by id.
    pub open: BTreeMap<ClientOrderId, RecoveredOrder>,
    /// Next unused ClientOrderId sequence per strategy: above every id seen and every
    /// lease (high-water mark) recorded.
    pub next_sequence: BTreeMap<StrategyId, u64>,
    /// Last applied sequence number per venue session.
    pub applied_through: BTreeMap<VenueId, u64>,
    /// Records that referred to an order the journal never saw the intent of.
    pub orphans: u64,
}

impl Recovery {
    /// Applies one record.
    pub fn apply(&mut self, record: &JournalRecord) {
        match *record {
            JournalRecord::Intent(order) => {
                self.see_id(order.id);
                self.open.insert(
                    order.id,
                    RecoveredOrder {
                        order,
                        accepted: false,
                        filled: 0,
                    },
                );
            }
            JournalRecord::Accepted { id } => match self.open.get_mut(&id) {
                Some(o) => o.accepted = true,
                None => self.orphans += 1,
            },
            JournalRecord::Fill { id, qty, .. } => match self.open.get_mut(&id) {
                Some(o) => {
                    o.filled += qty;
                    o.accepted = true;
                    if o.filled >= o.order.qty {
                        self.open.remove(&id);
                    }
                }
                None => self.orphans += 1,
            },
            JournalRecord::Closed { id } => {
                if self.open.remove(&id).is_none() {
                    self.orphans += 1;
                }
            }
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
                *next = (*next).max(high_water_mark + 1);
            }
        }
    }

    fn see_id(&mut self, id: ClientOrderId) {
        let next = self.next_sequence.entry(id.strategy()).or_default();
        *next = (*next).max(id.sequence() + 1);
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
