//! Exponential backoff with equal jitter, for reconnects.
//!
//! `d = min(cap, base · 2^attempt)`, then wait `d/2 + uniform(0, d/2)`. Equal jitter keeps the
//! exponential trend (every wait is at least half the nominal one) while spreading clients
//! that failed together, so a restarted gateway is not hit by all of them at once.

use crate::rng::Rng64;

/// Backoff parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Nominal delay of the first retry.
    pub base_ns: u64,
    /// Largest nominal delay.
    pub cap_ns: u64,
    /// Attempts after which the caller gives up (`u32::MAX`: never).
    pub attempts_max: u32,
    /// How delays are drawn.
    pub policy: BackoffPolicy,
}

/// How reconnect delays are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackoffPolicy {
    /// Exponential with equal jitter (the default; see the module docs).
    #[default]
    EqualJitter,
    /// Always `base_ns`, no jitter: the naive policy, kept only to show in drills what it
    /// does to a restarting gateway (the reconnect-storm test). Never use it in production.
    FixedInterval,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            base_ns: 100 * crate::clock::NS_PER_MS,
            cap_ns: 30 * crate::clock::NS_PER_SEC,
            attempts_max: u32::MAX,
            policy: Default::default(),
        }
    }
}

/// Backoff state for one link.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    attempt: u32,
}

impl Backoff {
    /// A fresh backoff at attempt zero.
    pub fn new(config: BackoffConfig) -> Self {
        assert!(config.base_ns > 0, "backoff base must be positive");
        assert!(config.cap_ns >= config.base_ns, "backoff cap below base");
        Self { config, attempt: 0 }
    }

    /// The nominal (un-jittered) delay for `attempt`: `min(cap, base · 2^attempt)`.
    pub fn nominal_ns(&self, attempt: u32) -> u64 {
        let factor = 1u64.checked_shl(attempt.min(63)).unwrap_or(u64::MAX);
        self.config
            .base_ns
            .saturating_mul(factor)
            .min(self.config.cap_ns)
    }

    /// The delay before the next attempt, or `None` once `attempts_max` is used up.
    pub fn next_delay_ns(&mut self, rng: &mut impl Rng64) -> Option<u64> {
        if self.attempt >= self.config.attempts_max {
            return None;
        }
        if self.config.policy == BackoffPolicy::FixedInterval {
            self.attempt += 1;
            return Some(self.config.base_ns);
        }
        let nominal = self.nominal_ns(self.attempt);
        self.attempt += 1;
        let half = nominal / 2;
        Some(half + rng.below_inclusive(nominal - half))
    }

    /// Attempts made since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Back to attempt zero (after a successful connection).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use proptest::prelude::*;

    proptest! {
        // Goal: every delay lies in [d/2, d] for the nominal d of its attempt; method: random
        // configs and seeds.
        #[test]
        fn delays_follow_equal_jitter(base in 1u64..1_000_000, mult in 1u64..1000, seed: u64) {
            let cfg = BackoffConfig { base_ns: base, cap_ns: base * mult, attempts_max: 40, ..BackoffConfig::default() };
            let mut backoff = Backoff::new(cfg);
            let mut rng = SplitMix64::new(seed);
            for attempt in 0..40 {
                let nominal = backoff.nominal_ns(attempt);
                prop_assert!(nominal <= cfg.cap_ns);
                let d = backoff.next_delay_ns(&mut rng).unwrap();
                prop_assert!(d >= nominal / 2 && d <= nominal, "{} not in [{}/2, {}]", d, nominal, nominal);
            }
            prop_assert_eq!(backoff.next_delay_ns(&mut rng), None);
        }
    }

    // Goal: jitter actually spreads clients; method: 60 clients with different seeds at the
    // same attempt must not all pick the same delay.
    #[test]
    fn jitter_spreads_clients() {
        let cfg = BackoffConfig {
            base_ns: 1_000_000,
            cap_ns: 1_000_000_000,
            attempts_max: 10,
            policy: Default::default(),
        };
        let mut delays: Vec<u64> = (0..60)
            .map(|seed| {
                let mut b = Backoff::new(cfg);
                let mut rng = SplitMix64::new(seed);
                b.next_delay_ns(&mut rng);
                b.next_delay_ns(&mut rng).unwrap()
            })
            .collect();
        delays.sort_unstable();
        delays.dedup();
        assert!(delays.len() > 50, "only {} distinct delays", delays.len());
    }
}
