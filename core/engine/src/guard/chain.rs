//! The guard chain: the guards in the order a new order meets them.
//!
//! Admission (when the command is read from the strategy's ring):
//! shed watermark → pre-trade risk → bulkhead → breaker. Release (when the order reaches the
//! head of its lane): breaker (takes a probe slot in half-open) → rate limiter.
//!
//! A reduce-only order skips the shed watermark (shedding exists to protect the engine from
//! new risk; refusing the order that takes risk off would defeat it), meets the reduce-only
//! rule right after pre-trade risk, and at release may use the limiter's reduce reserve.
//! Bulkhead and breaker apply to it as to any order: they protect the venue link, and an
//! order the link cannot carry is no less lost for reducing risk.
//!
//! Admission checks every guard before any of them commits: the refusals come in the order
//! below, and only an order every guard agrees to reserves its risk and takes its in-flight
//! slot (nothing is taken and undone).
//!
//! After admission the guards see the rest of the order's life through the chain too, never
//! through calls from the dispatcher's internals: [`GuardChain::on_applied`] gets every
//! order-state change the order table applied (a venue's first answer gives the in-flight slot
//! back, a fill books risk and sets the price collar's reference, an order closed gives its
//! open quantity back, an order in doubt counts against its symbol), [`GuardChain::on_venue`]
//! every venue answer that says something about the link (a call's success and latency, a
//! failure, a throttle, a refused cancel: breaker and limiter feedback), and
//! [`GuardChain::on_link_state`] every change of what the link lets leave. A new stateful
//! guard reads them here (docs/architecture.md, "How to add a guard").
//!
//! Why this order: the cheapest and most global refusal comes first (shedding under overload
//! must cost almost nothing); risk before the bulkhead so a refused order never holds an
//! in-flight slot; the breaker before the limiter so an order the venue link cannot take never
//! spends rate budget; the limiter last because it is the only guard that commits a shared
//! budget and the only one that makes an order wait rather than refusing it.

use super::breaker::CallOutcome;
use super::breaker::{Breaker, Refused};
use super::bulkhead::Bulkhead;
use super::limiter::{Class, NotReady, RateLimiter};
use super::risk::Risk;
use super::shed::Shedder;
use crate::order::table::Applied;
use crate::order::{EventKind, LinkMode, NewOrder, OrderEvent, OrderState, Price, Qty, VenueId};

/// The per-venue guards.
#[derive(Debug, Clone)]
pub struct VenueGuards {
    /// Shedding on the venue's new-order lane.
    pub shed: Shedder,
    /// The venue link's breaker.
    pub breaker: Breaker,
    /// The venue's rate limiter.
    pub limiter: RateLimiter,
    /// What the venue's link lets leave, as its last `LinkState` report said (`Down` until
    /// the first): for a guard that acts on the link's state.
    pub link: LinkMode,
}

/// A venue answer that tells the guards about the link (not about one order's state: those
/// come through [`GuardChain::on_applied`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VenueNews {
    /// The venue answered a call (its first answer to a new order or replace) after
    /// `latency_ns`.
    Answered {
        /// Time from sending to the answer.
        latency_ns: u64,
    },
    /// A call failed on the venue's side: a timeout (the order is in doubt), a reject for a
    /// venue fault, a cancel refused for a system problem.
    Failed,
    /// The venue rejected an order as over its rate limit.
    Throttled,
    /// The venue refused a cancel while the order stays open (its rate limit, or a lost
    /// cancel).
    CancelRefused,
}

/// Why an order at the head of its lane cannot leave now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendBlock {
    /// The breaker refused: the order is refused back to its strategy.
    Breaker(Refused),
    /// Short of rate budget: the order waits in its lane.
    NotReady(NotReady),
}

/// Every guard of the engine.
#[derive(Debug, Clone)]
pub struct GuardChain {
    /// Pre-trade risk, all symbols.
    pub risk: Risk,
    /// In-flight caps, all symbols and venues.
    pub bulkhead: Bulkhead,
    /// One set per venue, indexed by `VenueId`.
    pub venues: Vec<VenueGuards>,
}

impl GuardChain {
    /// Admission of a new order (or replacement) whose venue lane holds `lane_depth` orders.
    /// On success the order's open quantity is reserved and it holds an in-flight slot;
    /// on refusal nothing is held. `released_qty` is the open quantity a replace gives back.
    #[inline]
    pub fn admit(
        &mut self,
        now_ns: u64,
        order: &NewOrder,
        lane_depth: u32,
        released_qty: Qty,
    ) -> Result<(), EventKind> {
        let venue = &mut self.venues[usize::from(order.venue.0)];
        // Every check first, in the order the module docs give; nothing is held yet.
        if !order.reduce_only && !venue.shed.admit(lane_depth) {
            return Err(EventKind::Shed);
        }
        let refuse = |reason| EventKind::Refused { reason };
        self.risk
            .check(
                order.symbol,
                order.side,
                order.price,
                order.qty,
                released_qty,
            )
            .map_err(refuse)?;
        if order.reduce_only {
            self.risk
                .check_reduce_only(order.symbol, order.side, order.qty, released_qty)
                .map_err(refuse)?;
        }
        self.bulkhead
            .check(order.venue, order.symbol)
            .map_err(refuse)?;
        if let Err(Refused { retry_after_ns }) = venue.breaker.check(now_ns) {
            return Err(EventKind::BreakerOpen { retry_after_ns });
        }
        // Every guard agreed: commit.
        self.bulkhead.acquire(order.venue, order.symbol);
        self.risk.reserve(order.symbol, order.side, order.qty);
        Ok(())
    }

    /// An order restored from the journal holds what an admitted one does: its in-flight slot
    /// and its open quantity's risk (no admission check: it is already at the venue). Refused
    /// only when the in-flight caps are full (a journal with more orders in flight than this
    /// configuration allows).
    pub fn hold_restored(&mut self, order: &NewOrder) -> Result<(), crate::order::RefusalReason> {
        self.bulkhead.try_acquire(order.venue, order.symbol)?;
        self.risk.reserve(order.symbol, order.side, order.qty);
        Ok(())
    }

    /// The venue stated an execution no open order can take (see
    /// `OutcomeKind::UnmatchedExecution`): the position moves.
    pub fn book_unmatched(&mut self, execution: &crate::order::Execution) {
        self.risk
            .book_unmatched(execution.symbol, execution.side, execution.qty);
    }

    /// Journal restore: the filled position on `symbol`, from every fill on record.
    pub fn restore_position(&mut self, symbol: crate::order::SymbolId, position: i64) {
        self.risk.restore_position(symbol, position);
    }

    /// The order table applied `event` (with `qty` shares for a fill, at `price`) to an
    /// order: what each guard holds for it follows. Called for every change, restored orders
    /// included.
    #[inline]
    pub fn on_applied(
        &mut self,
        applied: &Applied,
        event: OrderEvent,
        qty: Qty,
        price: Option<Price>,
    ) {
        let o = &applied.order;
        if applied.first_answer {
            self.bulkhead.release(o.venue, o.symbol);
        }
        if let OrderEvent::Fill { .. } = event {
            self.risk.fill(o.symbol, o.side, qty);
            // The last fill is the collar's reference (a venue's own print, checked on the
            // way in).
            if let Some(price) = price {
                self.risk.set_reference(o.symbol, price);
            }
        }
        match (
            applied.from == OrderState::Unknown,
            applied.to == OrderState::Unknown,
        ) {
            (false, true) => self.risk.unknown_changed(o.symbol, true),
            (true, false) => self.risk.unknown_changed(o.symbol, false),
            _ => {}
        }
        if applied.to.is_terminal() && !applied.from.is_terminal() && o.leaves_qty() > 0 {
            self.risk.release(o.symbol, o.side, o.leaves_qty());
        }
    }

    /// A venue answer about `venue`'s link: breaker and limiter feedback.
    #[inline]
    pub fn on_venue(&mut self, now_ns: u64, venue: VenueId, news: VenueNews) {
        let Some(guards) = self.venues.get_mut(venue.index()) else {
            return;
        };
        match news {
            VenueNews::Answered { latency_ns } => guards
                .breaker
                .record(now_ns, CallOutcome::Success { latency_ns }),
            VenueNews::Failed => guards.breaker.record(now_ns, CallOutcome::Failure),
            // A throttle is the venue's rate limit, not a link failure: the limiter cools
            // down, the breaker does not count it.
            VenueNews::Throttled => guards.limiter.on_venue_throttle(now_ns),
            VenueNews::CancelRefused => guards.limiter.on_cancel_refused(),
        }
    }

    /// `venue`'s link now lets `mode` leave.
    #[inline]
    pub fn on_link_state(&mut self, venue: VenueId, mode: LinkMode) {
        if let Some(guards) = self.venues.get_mut(venue.index()) {
            guards.link = mode;
        }
    }

    /// Release of a request at the head of its lane. New orders and replaces ask the breaker
    /// (`Release::Call`); cancels and queries never do, and may use the cancel reserve. Rate
    /// budget is taken only if everything else agrees.
    ///
    /// # Panics
    /// For a venue with no guards (the dispatcher only releases from the lanes of configured
    /// venues: routes are checked at admission).
    #[inline]
    pub fn clear_to_send(
        &mut self,
        now_ns: u64,
        venue: crate::order::VenueId,
        weight: u32,
        release: Release,
    ) -> Result<(), SendBlock> {
        let is_call = release != Release::Cancel;
        let class = match release {
            Release::Call => Class::New,
            Release::Reduce => Class::Reduce,
            Release::Cancel => Class::Cancel,
        };
        let guards = &mut self.venues[venue.index()];
        if is_call {
            // Peek first: a call that then waits for budget must not burn a half-open probe.
            guards.breaker.check(now_ns).map_err(SendBlock::Breaker)?;
        }
        guards
            .limiter
            .try_acquire_as(now_ns, weight, class)
            .map_err(SendBlock::NotReady)?;
        if is_call {
            guards.breaker.acquire(now_ns).map_err(SendBlock::Breaker)?;
        }
        Ok(())
    }
}

/// What a request released from a lane is, as the guards see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// A new order or a replace: a breaker call, paid from the budget new orders share.
    Call,
    /// A reduce-only order or a replace of one: a breaker call that may also use the
    /// limiter's reduce reserve and is not capped by the adaptive controller.
    Reduce,
    /// A cancel or a status query: never a breaker call; may draw on the cancel reserve.
    Cancel,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::breaker::BreakerConfig;
    use crate::guard::bulkhead::BulkheadConfig;
    use crate::guard::limiter::LimiterConfig;
    use crate::guard::risk::RiskLimits;
    use crate::guard::shed::ShedConfig;
    use crate::order::{ClientOrderId, Price, Side, StrategyId, SymbolId, TimeInForce};

    fn chain(in_flight_per_symbol_max: u32) -> GuardChain {
        GuardChain {
            risk: Risk::new(RiskLimits::default(), 2),
            bulkhead: Bulkhead::new(
                BulkheadConfig {
                    in_flight_per_symbol_max,
                    in_flight_per_venue_max: 100,
                },
                2,
                1,
            ),
            venues: vec![VenueGuards {
                shed: Shedder::new(ShedConfig::from_pct(64, 80, 50)),
                breaker: Breaker::new(BreakerConfig::default()).unwrap(),
                limiter: RateLimiter::new(LimiterConfig::default(), 0).unwrap(),
                link: LinkMode::Down,
            }],
        }
    }

    fn order(n: u64, qty: Qty) -> NewOrder {
        NewOrder {
            id: ClientOrderId::new(StrategyId(0), n).unwrap(),
            venue: VenueId(0),
            symbol: SymbolId(0),
            side: Side::Buy,
            price: Price::from_units(10, 0),
            qty,
            tif: TimeInForce::Day,
            reduce_only: false,
        }
    }

    // Goal: admission checks every guard before any commits — an order a later guard refuses
    // (the breaker open, the bulkhead full) holds no in-flight slot and no risk; an admitted one
    // holds both.
    #[test]
    fn a_refused_order_holds_nothing_an_admitted_one_holds_both() {
        let mut g = chain(1);
        g.venues[0].breaker.force_open(0);
        assert!(matches!(
            g.admit(1, &order(1, 5), 0, 0),
            Err(EventKind::BreakerOpen { .. })
        ));
        assert_eq!(g.bulkhead.symbol_in_flight(SymbolId(0)), 0);
        assert_eq!(g.risk.open_qty(SymbolId(0), Side::Buy), 0);
        g.venues[0].breaker.force_close();
        g.admit(1, &order(2, 5), 0, 0).unwrap();
        assert_eq!(g.bulkhead.symbol_in_flight(SymbolId(0)), 1);
        assert_eq!(g.risk.open_qty(SymbolId(0), Side::Buy), 5);
        // The bulkhead is full now: refused, and the risk reserved stays the first order's.
        assert_eq!(
            g.admit(1, &order(3, 7), 0, 0),
            Err(EventKind::Refused {
                reason: crate::order::RefusalReason::BulkheadSymbol
            })
        );
        assert_eq!(g.risk.open_qty(SymbolId(0), Side::Buy), 5);
    }

    // Goal: the rest of an order's life reaches the guards through the chain: the venue's
    // first answer gives the in-flight slot back, a fill books the position and sets the
    // collar's reference, the close gives the open quantity back; the link's state is kept.
    #[test]
    fn applied_changes_and_link_state_reach_the_guards() {
        let mut g = chain(4);
        let mut table = crate::order::OrderTable::new(8, 1);
        let o = order(1, 10);
        g.admit(1, &o, 0, 0).unwrap();
        table.insert(StrategyId(0), &o, None).unwrap();
        table.mark_sent(o.id, 1);
        let accepted = table.apply(o.id, OrderEvent::Accepted, 0).unwrap();
        g.on_applied(&accepted, OrderEvent::Accepted, 0, None);
        assert_eq!(g.bulkhead.symbol_in_flight(SymbolId(0)), 0);
        let price = Price::from_units(11, 0);
        let fill = OrderEvent::Fill { completes: false };
        let filled = table.apply(o.id, fill, 4).unwrap();
        g.on_applied(&filled, fill, 4, Some(price));
        assert_eq!(g.risk.position(SymbolId(0)), 4);
        assert_eq!(g.risk.reference(SymbolId(0)), Some(price));
        assert_eq!(g.risk.open_qty(SymbolId(0), Side::Buy), 6);
        let canceled = table.apply(o.id, OrderEvent::Canceled, 0).unwrap();
        g.on_applied(&canceled, OrderEvent::Canceled, 0, None);
        assert_eq!(g.risk.open_qty(SymbolId(0), Side::Buy), 0);
        g.on_link_state(VenueId(0), LinkMode::Trading);
        assert_eq!(g.venues[0].link, LinkMode::Trading);
        // A venue that is not configured is ignored, never a panic.
        g.on_link_state(VenueId(9), LinkMode::Trading);
        g.on_venue(1, VenueId(9), VenueNews::Failed);
    }
}
