//! Dispatcher configuration: every bound named, every default listed in docs/config.md, every
//! relation between bounds checked once at start.

use crate::guard::breaker::{BreakerConfig, BreakerConfigError};
use crate::guard::bulkhead::BulkheadConfig;
use crate::guard::limiter::{LimiterConfig, LimiterConfigError};
use crate::guard::risk::RiskLimits;

/// Everything the dispatcher needs to size itself at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatcherConfig {
    /// Strategies attached (one command ring and one event ring each).
    pub strategies: u16,
    /// Venue links.
    pub venues: u16,
    /// Interned symbols.
    pub symbols: u16,
    /// Order table slots (open orders plus recently closed ones kept for late reports).
    pub orders_max: u32,
    /// Cancel lane capacity per venue (single cancels and mass cancels).
    pub lane_cancel_capacity: u32,
    /// Replace lane capacity per venue.
    pub lane_replace_capacity: u32,
    /// New-order lane capacity per venue.
    pub lane_new_capacity: u32,
    /// New orders one symbol may hold in a venue's lane.
    pub lane_new_per_symbol_max: u32,
    /// Shed new orders when the new-order lane is this full (%).
    pub shed_high_pct: u32,
    /// Stop shedding when the new-order lane has drained to this (%).
    pub shed_low_pct: u32,
    /// Longest a new order or replace waits in its lane for rate budget before `Throttled`.
    pub acquire_timeout_ns: u64,
    /// Commands read from strategy rings per poll.
    pub commands_per_poll_max: u32,
    /// Outcomes read from venue rings per poll.
    pub outcomes_per_poll_max: u32,
    /// Requests released to each venue per poll.
    pub sends_per_poll_max: u32,
    /// Pre-trade risk limits.
    pub risk: RiskLimits,
    /// In-flight caps.
    pub bulkhead: BulkheadConfig,
    /// Breaker, one per venue link.
    pub breaker: BreakerConfig,
    /// Rate limiter, one per venue.
    pub limiter: LimiterConfig,
    /// Every strategy's quota unless it has its own (`[dispatcher.quota]`; none by default).
    pub quota: super::quota::StrategyQuota,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            strategies: 4,
            venues: 1,
            symbols: 64,
            orders_max: 65_536,
            lane_cancel_capacity: 4_096,
            lane_replace_capacity: 1_024,
            lane_new_capacity: 4_096,
            lane_new_per_symbol_max: 256,
            shed_high_pct: 80,
            shed_low_pct: 50,
            acquire_timeout_ns: 50_000_000,
            commands_per_poll_max: 256,
            outcomes_per_poll_max: 256,
            sends_per_poll_max: 256,
            risk: RiskLimits::default(),
            bulkhead: BulkheadConfig::default(),
            breaker: BreakerConfig::default(),
            limiter: LimiterConfig::default(),
            quota: super::quota::StrategyQuota::default(),
        }
    }
}

/// A configuration refused at start, naming the key, the value and what is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A value outside its range.
    #[error("{key} = {value}: allowed {allowed}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range or relation.
        allowed: &'static str,
    },
    /// The breaker section is invalid.
    #[error("breaker: {0}")]
    Breaker(#[from] BreakerConfigError),
    /// The limiter section is invalid.
    #[error("limiter: {0}")]
    Limiter(#[from] LimiterConfigError),
    /// A strategy quota is invalid.
    #[error("quota: {0}")]
    Quota(#[from] super::quota::QuotaError),
}

/// Largest capacity of one lane (16,777,216 entries: a venue's lanes then take about 3 GB;
/// `EngineConfig::memory_need` counts them).
pub const LANE_CAPACITY_MAX: u32 = 1 << 24;

impl DispatcherConfig {
    /// Checks every bound and every relation between bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = self;
        let rules: [(&'static str, u64, bool, &'static str); 12] = [
            (
                "strategies",
                c.strategies.into(),
                c.strategies >= 1,
                "1..=65535",
            ),
            ("venues", c.venues.into(), c.venues >= 1, "1..=65535"),
            ("symbols", c.symbols.into(), c.symbols >= 1, "1..=65535"),
            (
                "orders_max",
                c.orders_max.into(),
                (1..=1 << 30).contains(&c.orders_max),
                "1..=2^30",
            ),
            (
                "lane_cancel_capacity",
                c.lane_cancel_capacity.into(),
                (1..=LANE_CAPACITY_MAX).contains(&c.lane_cancel_capacity),
                "1..=2^24",
            ),
            (
                "lane_replace_capacity",
                c.lane_replace_capacity.into(),
                (1..=LANE_CAPACITY_MAX).contains(&c.lane_replace_capacity),
                "1..=2^24",
            ),
            (
                "lane_new_capacity",
                c.lane_new_capacity.into(),
                (2..=LANE_CAPACITY_MAX).contains(&c.lane_new_capacity),
                "2..=2^24",
            ),
            (
                "lane_new_per_symbol_max",
                c.lane_new_per_symbol_max.into(),
                (1..=c.lane_new_capacity).contains(&c.lane_new_per_symbol_max),
                "1..=lane_new_capacity",
            ),
            (
                "shed_high_pct",
                c.shed_high_pct.into(),
                (2..=100).contains(&c.shed_high_pct),
                "2..=100",
            ),
            (
                "shed_low_pct",
                c.shed_low_pct.into(),
                c.shed_low_pct < c.shed_high_pct,
                "0..shed_high_pct",
            ),
            (
                "commands_per_poll_max",
                c.commands_per_poll_max.into(),
                c.commands_per_poll_max >= 1 && c.outcomes_per_poll_max >= 1,
                ">= 1 (and outcomes_per_poll_max >= 1)",
            ),
            (
                "sends_per_poll_max",
                c.sends_per_poll_max.into(),
                c.sends_per_poll_max >= 1,
                ">= 1",
            ),
        ];
        for (key, value, ok, allowed) in rules {
            if !ok {
                return Err(ConfigError::OutOfRange {
                    key,
                    value,
                    allowed,
                });
            }
        }
        crate::guard::breaker::Breaker::new(c.breaker)?;
        crate::guard::limiter::RateLimiter::new(c.limiter, 0)?;
        c.quota.validate()?;
        Ok(())
    }
}
