//! Seeded synthetic order flow: makers that quote around a drifting reference price and takers
//! that cross the spread, so resting orders fill at a realistic pace. One seed, one history.

use super::book::OrderRef;
use super::exchange::Exchange;
use keel::order::Side;
use keel::rng::{Rng64, SplitMix64};

/// The highest synthetic event rate, events per second. Every event is an order in the
/// exchange and market data to every subscriber; above this the generator (and a 1 ms pass)
/// would do nothing else. `keel venue --flow-rate` and the control port's `flow` refuse more.
pub const EVENTS_PER_SEC_MAX: u32 = 100_000;

/// Events one [`Flow::run_until`] call emits at most, whatever the rate and however far
/// behind it is: the venue's loop comes back to its sockets and signals every pass.
pub const EVENTS_PER_PASS_MAX: u32 = 1_024;

/// A rate outside `0..=EVENTS_PER_SEC_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("flow rate {rate} events per second is out of range 0..={max}")]
pub struct RateOutOfRange {
    /// The rate asked for.
    pub rate: u64,
    /// [`EVENTS_PER_SEC_MAX`].
    pub max: u32,
}

/// Checks a synthetic event rate.
pub fn check_rate(rate: u64) -> Result<u32, RateOutOfRange> {
    match u32::try_from(rate) {
        Ok(r) if r <= EVENTS_PER_SEC_MAX => Ok(r),
        _ => Err(RateOutOfRange {
            rate,
            max: EVENTS_PER_SEC_MAX,
        }),
    }
}

/// Flow settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowConfig {
    /// Seed of the generator.
    pub seed: u64,
    /// Starting reference price of every symbol (4 decimals).
    pub reference_price: i64,
    /// Price step (tick) in price units.
    pub tick: i64,
    /// Synthetic events per second across all symbols (0: no flow).
    pub events_per_sec: u32,
    /// Share of events that are takers (‰); the rest are maker quotes.
    pub taker_permille: u32,
    /// Resting synthetic orders kept per symbol; the oldest are canceled beyond it.
    pub resting_per_symbol_max: usize,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            seed: 7,
            reference_price: 100_0000,
            tick: 100,
            events_per_sec: 200,
            taker_permille: 300,
            resting_per_symbol_max: 200,
        }
    }
}

/// The generator's state.
#[derive(Debug)]
pub struct Flow {
    config: FlowConfig,
    rng: SplitMix64,
    reference: Vec<i64>,
    resting: Vec<std::collections::VecDeque<OrderRef>>,
    next_event_ns: u64,
}

impl Flow {
    /// A generator for `symbols` symbols (a rate over [`EVENTS_PER_SEC_MAX`] runs at the
    /// maximum; the CLI refuses it before it gets here).
    pub fn new(mut config: FlowConfig, symbols: u16) -> Self {
        config.events_per_sec = config.events_per_sec.min(EVENTS_PER_SEC_MAX);
        Self {
            rng: SplitMix64::new(config.seed),
            reference: vec![config.reference_price; usize::from(symbols)],
            resting: (0..symbols).map(|_| Default::default()).collect(),
            next_event_ns: 0,
            config,
        }
    }

    /// Reference price of a symbol now.
    pub fn reference(&self, symbol: u16) -> i64 {
        self.reference[usize::from(symbol)]
    }

    /// Changes the synthetic event rate (0 stops the flow); refuses one over
    /// [`EVENTS_PER_SEC_MAX`], leaving the rate as it was.
    pub fn set_rate(&mut self, events_per_sec: u64) -> Result<(), RateOutOfRange> {
        self.config.events_per_sec = check_rate(events_per_sec)?;
        Ok(())
    }

    /// The synthetic event rate.
    pub fn rate(&self) -> u32 {
        self.config.events_per_sec
    }

    /// Emits the synthetic events due by `now_ns` into `exchange`, at most
    /// [`EVENTS_PER_PASS_MAX`]; the rest are due at the next call.
    pub fn run_until(&mut self, now_ns: u64, exchange: &mut Exchange) {
        if self.config.events_per_sec == 0 {
            return;
        }
        let gap_ns = (1_000_000_000 / u64::from(self.config.events_per_sec)).max(1);
        // After a long pause, do not replay a burst of the missed events.
        self.next_event_ns = self.next_event_ns.max(now_ns.saturating_sub(gap_ns * 100));
        let mut budget = EVENTS_PER_PASS_MAX;
        while self.next_event_ns <= now_ns && budget > 0 {
            self.event(self.next_event_ns, exchange);
            self.next_event_ns += gap_ns;
            budget -= 1;
        }
    }

    fn event(&mut self, now_ns: u64, exchange: &mut Exchange) {
        let symbol = self
            .rng
            .below_inclusive(u64::from(exchange.symbol_count() - 1)) as u16;
        let s = usize::from(symbol);
        let tick = self.config.tick;
        let drift = self.rng.below_inclusive(2) as i64 - 1;
        self.reference[s] = (self.reference[s] + drift * tick).max(tick * 10);
        let side = if self.rng.next_u64() & 1 == 0 {
            Side::Buy
        } else {
            Side::Sell
        };
        let qty = 100 * (1 + self.rng.below_inclusive(9) as u32);
        if self.rng.below_inclusive(999) < u64::from(self.config.taker_permille) {
            // A taker crosses a few ticks through the reference and keeps nothing.
            let through = tick * 5;
            let price = if side == Side::Buy {
                self.reference[s] + through
            } else {
                self.reference[s] - through
            };
            exchange.synthetic(now_ns, symbol, side, price, qty, false);
            return;
        }
        let offset = tick * (1 + self.rng.below_inclusive(4) as i64);
        let price = if side == Side::Buy {
            self.reference[s] - offset
        } else {
            self.reference[s] + offset
        };
        let order_ref = exchange.synthetic(now_ns, symbol, side, price, qty, true);
        let resting = &mut self.resting[s];
        resting.push_back(order_ref);
        while resting.len() > self.config.resting_per_symbol_max {
            let oldest = resting.pop_front().expect("non-empty");
            exchange.cancel_synthetic(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::ExchangeConfig;

    // Goal: the flow is deterministic per seed, keeps books bounded and never crossed, and
    // trades (takers hit makers).
    #[test]
    fn deterministic_bounded_and_trading() {
        let run = |seed| {
            let mut ex = Exchange::new(ExchangeConfig::default());
            let mut flow = Flow::new(
                FlowConfig {
                    seed,
                    events_per_sec: 1_000,
                    resting_per_symbol_max: 50,
                    ..FlowConfig::default()
                },
                4,
            );
            for ms in 0..5_000u64 {
                flow.run_until(ms * 1_000_000, &mut ex);
                for s in 0..4 {
                    if let (Some(bid), Some(ask)) = ex.book(s).best() {
                        assert!(bid < ask, "crossed at {ms} ms");
                    }
                    assert!(ex.book(s).len() <= 50);
                }
            }
            (
                ex.stats().matches,
                (0..4).map(|s| ex.book(s).best()).collect::<Vec<_>>(),
            )
        };
        let (matches, books) = run(11);
        assert!(matches > 500, "only {matches} matches");
        assert_eq!(run(11), (matches, books), "same seed, same history");
        assert_ne!(run(12).0, matches);
    }

    // Goal: a rate past the maximum is refused with the range and changes nothing; a config
    // rate past it runs at the maximum; one call after an hour's pause does a bounded amount
    // of work (it returns at all: a rate over 10^9 once made the gap 0 and the loop endless).
    #[test]
    fn rate_is_range_checked_and_work_per_pass_bounded() {
        let mut ex = Exchange::new(ExchangeConfig::default());
        let mut flow = Flow::new(
            FlowConfig {
                events_per_sec: u32::MAX,
                ..FlowConfig::default()
            },
            4,
        );
        assert_eq!(flow.rate(), EVENTS_PER_SEC_MAX);
        let err = flow.set_rate(2_000_000_000).unwrap_err();
        assert_eq!(
            err.to_string(),
            "flow rate 2000000000 events per second is out of range 0..=100000"
        );
        assert!(flow.set_rate(u64::MAX).is_err());
        assert_eq!(flow.rate(), EVENTS_PER_SEC_MAX);
        let now_ns = 3_600_000_000_000;
        flow.run_until(now_ns, &mut ex);
        let emitted = (flow.next_event_ns - (now_ns - 100 * 10_000)) / 10_000;
        assert!(
            emitted <= u64::from(EVENTS_PER_PASS_MAX),
            "{emitted} events in one pass"
        );
        assert!(
            flow.next_event_ns > now_ns,
            "caught up: only the last 100 gaps replayed"
        );
        assert!(flow.set_rate(0).is_ok());
        assert_eq!(flow.rate(), 0);
    }
}
