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
//! Why this order: the cheapest and most global refusal comes first (shedding under overload
//! must cost almost nothing); risk before the bulkhead so a refused order never holds an
//! in-flight slot; the breaker before the limiter so an order the venue link cannot take never
//! spends rate budget; the limiter last because it is the only guard that commits a shared
//! budget and the only one that makes an order wait rather than refusing it.

use super::breaker::{Breaker, Refused};
use super::bulkhead::Bulkhead;
use super::limiter::{Class, NotReady, RateLimiter};
use super::risk::Risk;
use super::shed::Shedder;
use crate::order::{EventKind, NewOrder, Qty};

/// The per-venue guards.
#[derive(Debug, Clone)]
pub struct VenueGuards {
    /// Shedding on the venue's new-order lane.
    pub shed: Shedder,
    /// The venue link's breaker.
    pub breaker: Breaker,
    /// The venue's rate limiter.
    pub limiter: RateLimiter,
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
            .try_acquire(order.venue, order.symbol)
            .map_err(|reason| EventKind::Refused { reason })?;
        if let Err(Refused { retry_after_ns }) = venue.breaker.check(now_ns) {
            self.bulkhead.release(order.venue, order.symbol);
            return Err(EventKind::BreakerOpen { retry_after_ns });
        }
        self.risk.reserve(order.symbol, order.side, order.qty);
        Ok(())
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
