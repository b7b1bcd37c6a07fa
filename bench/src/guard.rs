//! The guard chain as the benchmarks time it (`bin/guard_chain.rs`, `benches/guard.rs`): a
//! chain of keel's own guards built with the engine's constructors, one venue, limits wide
//! enough that every decision on the bench's workload passes, and one decision with the
//! bookkeeping that keeps the state steady.

use keel::guard::breaker::{Breaker, BreakerConfig};
use keel::guard::bulkhead::{Bulkhead, BulkheadConfig};
use keel::guard::chain::{GuardChain, Release, VenueGuards};
use keel::guard::limiter::{LimiterConfig, RateLimiter, WindowLimit, WINDOWS_MAX};
use keel::guard::risk::{Risk, RiskLimits};
use keel::guard::shed::{ShedConfig, Shedder};
use keel::order::{
    ClientOrderId, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce, VenueId,
};

/// The chain: shed, risk, bulkhead, breaker and a two-window rate limiter for venue 0.
pub fn chain() -> GuardChain {
    let mut windows = [None; WINDOWS_MAX];
    windows[0] = Some(WindowLimit {
        window_ns: 1_000_000_000,
        limit_weight: 1_000_000_000,
        burst_weight: 50_000,
    });
    windows[1] = Some(WindowLimit {
        window_ns: 60_000_000_000,
        limit_weight: 1_000_000_000,
        burst_weight: 50_000,
    });
    let limiter = LimiterConfig {
        windows,
        ..LimiterConfig::default()
    };
    let venue = VenueGuards {
        shed: Shedder::new(ShedConfig::from_pct(4096, 80, 50)),
        breaker: Breaker::new(BreakerConfig::default()).expect("default breaker config"),
        limiter: RateLimiter::new(limiter, 0).expect("bench limiter config"),
        link: keel::order::LinkMode::Trading,
    };
    let risk = RiskLimits {
        position_max: i64::MAX / 4,
        ..RiskLimits::default()
    };
    GuardChain {
        risk: Risk::new(risk, 64),
        bulkhead: Bulkhead::new(BulkheadConfig::default(), 64, 1),
        venues: vec![venue],
    }
}

/// The `i`th order of the workload: 64 symbols, alternating sides, all passing.
pub fn order(i: u64) -> NewOrder {
    NewOrder {
        id: ClientOrderId::new(StrategyId(0), i + 1).expect("in range"),
        venue: VenueId(0),
        symbol: SymbolId((i % 64) as u16),
        side: if i & 1 == 0 { Side::Buy } else { Side::Sell },
        price: Price::from_units(100, 0),
        qty: 100,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

/// One full keel decision plus the bookkeeping that undoes it.
#[inline(never)]
pub fn keel_decision(chain: &mut GuardChain, now_ns: u64, order: &NewOrder) -> bool {
    let admitted = chain.admit(now_ns, order, 10, 0).is_ok();
    let cleared = admitted
        && chain
            .clear_to_send(now_ns, VenueId(0), 1, Release::Call)
            .is_ok();
    if admitted {
        chain.bulkhead.release(order.venue, order.symbol);
        chain.risk.release(order.symbol, order.side, order.qty);
    }
    cleared
}
