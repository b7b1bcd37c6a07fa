//! Per-strategy quotas: a new-order rate (a token bucket) and an in-flight cap per strategy,
//! so one runaway strategy cannot take a venue's whole rate budget or in-flight capacity from
//! the others (the venue-wide limiter and bulkhead still bound them all together).
//!
//! New orders and replaces (a replace enters a new order) take one token at admission and
//! hold one in-flight slot until the venue's first answer, exactly like the bulkhead's slots;
//! cancels and queries never meet a quota (they reduce risk). Refusals are named
//! (`StrategyRate`, `StrategyInFlight`) and counted per strategy. Everything is sized at start;
//! checking and taking are arithmetic on fixed arrays.

use crate::order::{RefusalReason, StrategyId};

/// One strategy's quota (`[dispatcher.quota]`, docs/config.md). 0 in a field: no such limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StrategyQuota {
    /// New orders (and replaces) per second the strategy may send, sustained (0: no limit).
    pub new_per_sec: u32,
    /// How many of them it may send at once after a quiet spell (the bucket's depth; at
    /// least 1 when `new_per_sec` is set).
    pub new_burst: u32,
    /// Its orders sent or queued and not yet answered by the venue (0: no limit).
    pub in_flight_max: u32,
}

/// Largest `new_per_sec` and `new_burst` (far above any venue's order rate).
pub const QUOTA_RATE_MAX: u32 = 10_000_000;

/// Why a quota cannot be used, naming the field and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// `new_per_sec` above [`QUOTA_RATE_MAX`].
    #[error("new_per_sec = {0}: allowed 0..=10000000 (0: no limit)")]
    Rate(u32),
    /// `new_burst` 0 with a rate set, or above [`QUOTA_RATE_MAX`].
    #[error("new_burst = {0}: allowed 1..=10000000 when new_per_sec is set")]
    Burst(u32),
    /// A per-strategy setting names a strategy that is not configured.
    #[error("strategy {0}: not configured (strategies 0..{1})")]
    Strategy(u16, u16),
}

impl StrategyQuota {
    /// Checks the fields' bounds.
    pub fn validate(&self) -> Result<(), QuotaError> {
        if self.new_per_sec > QUOTA_RATE_MAX {
            return Err(QuotaError::Rate(self.new_per_sec));
        }
        let burst_ok = (1..=QUOTA_RATE_MAX).contains(&self.new_burst);
        if self.new_per_sec > 0 && !burst_ok {
            return Err(QuotaError::Burst(self.new_burst));
        }
        Ok(())
    }
}

/// One token, in the bucket's units (a token is worth one second of nanoseconds times the
/// rate: refilling `elapsed_ns * new_per_sec` units per step keeps the arithmetic integral).
const TOKEN_UNITS: u64 = 1_000_000_000;

/// One strategy's live quota state.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    quota: StrategyQuota,
    /// Tokens held, in [`TOKEN_UNITS`].
    level: u64,
    refilled_ns: u64,
    in_flight: u32,
}

impl Bucket {
    fn new(quota: StrategyQuota, now_ns: u64) -> Self {
        Self {
            quota,
            level: u64::from(quota.new_burst) * TOKEN_UNITS,
            refilled_ns: now_ns,
            in_flight: 0,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let elapsed_ns = now_ns.saturating_sub(self.refilled_ns);
        self.refilled_ns = self.refilled_ns.max(now_ns);
        let cap = u64::from(self.quota.new_burst) * TOKEN_UNITS;
        let gained = elapsed_ns.saturating_mul(u64::from(self.quota.new_per_sec));
        self.level = self.level.saturating_add(gained).min(cap);
    }
}

/// Per-strategy counters (`keel_strategy_quota_refused_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaStats {
    /// New orders and replaces refused `StrategyRate`.
    pub rate_refused: u64,
    /// New orders and replaces refused `StrategyInFlight`.
    pub in_flight_refused: u64,
}

/// Every strategy's quota (sized at start).
#[derive(Debug)]
pub struct Quotas {
    buckets: Vec<Bucket>,
    stats: Vec<QuotaStats>,
}

impl Quotas {
    /// `quota` for each of `strategies` strategies.
    pub fn new(strategies: u16, quota: StrategyQuota, now_ns: u64) -> Self {
        Self {
            buckets: vec![Bucket::new(quota, now_ns); usize::from(strategies)],
            stats: vec![QuotaStats::default(); usize::from(strategies)],
        }
    }

    /// Gives `strategy` its own quota (before trading: its bucket starts full, its in-flight
    /// count is kept).
    pub fn set(
        &mut self,
        strategy: StrategyId,
        quota: StrategyQuota,
        now_ns: u64,
    ) -> Result<(), QuotaError> {
        quota.validate()?;
        let count = self.buckets.len() as u16;
        let bucket = self
            .buckets
            .get_mut(usize::from(strategy.0))
            .ok_or(QuotaError::Strategy(strategy.0, count))?;
        let in_flight = bucket.in_flight;
        *bucket = Bucket {
            in_flight,
            ..Bucket::new(quota, now_ns)
        };
        Ok(())
    }

    /// `strategy`'s quota.
    pub fn quota(&self, strategy: StrategyId) -> Option<StrategyQuota> {
        self.buckets.get(usize::from(strategy.0)).map(|b| b.quota)
    }

    /// Whether `strategy` may enter one more new order now; the refusal is counted. Takes
    /// nothing: [`Quotas::take`] does, once every other guard agreed.
    pub fn check(&mut self, now_ns: u64, strategy: StrategyId) -> Result<(), RefusalReason> {
        let i = usize::from(strategy.0);
        let b = &mut self.buckets[i];
        if b.quota.in_flight_max > 0 && b.in_flight >= b.quota.in_flight_max {
            self.stats[i].in_flight_refused += 1;
            return Err(RefusalReason::StrategyInFlight);
        }
        if b.quota.new_per_sec > 0 {
            b.refill(now_ns);
            if b.level < TOKEN_UNITS {
                self.stats[i].rate_refused += 1;
                return Err(RefusalReason::StrategyRate);
            }
        }
        Ok(())
    }

    /// Takes a token and an in-flight slot for an order [`Quotas::check`] let through.
    pub fn take(&mut self, strategy: StrategyId) {
        let b = &mut self.buckets[usize::from(strategy.0)];
        if b.quota.new_per_sec > 0 {
            assert!(b.level >= TOKEN_UNITS, "a token was checked before taking");
            b.level -= TOKEN_UNITS;
        }
        b.in_flight += 1;
    }

    /// An order restored from the journal, still unanswered: it holds its slot (never
    /// refused: the venue may have it).
    pub fn hold_restored(&mut self, strategy: StrategyId) {
        self.buckets[usize::from(strategy.0)].in_flight += 1;
    }

    /// The venue's first answer to one of `strategy`'s orders (or its close before leaving).
    pub fn release(&mut self, strategy: StrategyId) {
        let b = &mut self.buckets[usize::from(strategy.0)];
        // Every order in the table took its slot (admission or restore); a miscount would
        // only loosen a quota, never stop the loop.
        debug_assert!(b.in_flight > 0, "a slot is released only once it was taken");
        b.in_flight = b.in_flight.saturating_sub(1);
    }

    /// `strategy`'s orders in flight.
    pub fn in_flight(&self, strategy: StrategyId) -> u32 {
        self.buckets
            .get(usize::from(strategy.0))
            .map_or(0, |b| b.in_flight)
    }

    /// `strategy`'s counters.
    pub fn stats(&self, strategy: StrategyId) -> QuotaStats {
        self.stats
            .get(usize::from(strategy.0))
            .copied()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    // Goal: the bucket lets `new_burst` through at once, then `new_per_sec` per second, and
    // the in-flight cap holds until a release; refusals are named and counted.
    #[test]
    fn rate_and_in_flight_bind_and_recover() {
        let quota = StrategyQuota {
            new_per_sec: 10,
            new_burst: 3,
            in_flight_max: 5,
        };
        let mut q = Quotas::new(2, quota, 0);
        let s = StrategyId(0);
        for _ in 0..3 {
            q.check(0, s).unwrap();
            q.take(s);
        }
        assert_eq!(q.check(0, s), Err(RefusalReason::StrategyRate));
        // 100 ms later: one token.
        q.check(SEC / 10, s).unwrap();
        q.take(s);
        assert_eq!(q.check(SEC / 10, s), Err(RefusalReason::StrategyRate));
        q.check(2 * SEC, s).unwrap();
        q.take(s);
        assert_eq!(q.in_flight(s), 5);
        assert_eq!(q.check(3 * SEC, s), Err(RefusalReason::StrategyInFlight));
        q.release(s);
        q.check(3 * SEC, s).unwrap();
        assert_eq!(q.stats(s).rate_refused, 2);
        assert_eq!(q.stats(s).in_flight_refused, 1);
        // The other strategy's quota is its own.
        assert_eq!(q.in_flight(StrategyId(1)), 0);
        q.check(3 * SEC, StrategyId(1)).unwrap();
    }

    // Goal: the worst legal values work without overflow, the worst illegal ones are refused
    // naming the value.
    #[test]
    fn bounds_are_checked() {
        let max = StrategyQuota {
            new_per_sec: QUOTA_RATE_MAX,
            new_burst: QUOTA_RATE_MAX,
            in_flight_max: u32::MAX,
        };
        max.validate().unwrap();
        let mut q = Quotas::new(1, max, 0);
        q.check(u64::MAX, StrategyId(0)).unwrap();
        q.take(StrategyId(0));
        let none = StrategyQuota::default();
        none.validate().unwrap();
        let over = StrategyQuota {
            new_per_sec: QUOTA_RATE_MAX + 1,
            ..max
        };
        assert_eq!(over.validate(), Err(QuotaError::Rate(QUOTA_RATE_MAX + 1)));
        let no_burst = StrategyQuota {
            new_per_sec: 1,
            new_burst: 0,
            in_flight_max: 0,
        };
        assert_eq!(no_burst.validate(), Err(QuotaError::Burst(0)));
        let deep = StrategyQuota {
            new_burst: u32::MAX,
            ..no_burst
        };
        assert_eq!(deep.validate(), Err(QuotaError::Burst(u32::MAX)));
        assert_eq!(
            q.set(StrategyId(1), none, 0),
            Err(QuotaError::Strategy(1, 1))
        );
    }
}
