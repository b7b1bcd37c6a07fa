//! A weighted rate limiter over several windows at once (token buckets, lazy refill).
//!
//! Each [`WindowLimit`] is a token bucket holding at most `burst_weight` tokens and refilled
//! at `limit_weight` per `window_ns`. A request of weight `w` passes only if *every* bucket
//! holds `w` tokens; only then is any bucket debited, so a refusal costs no budget. The
//! guarantee, checked by property tests: over any interval of length `T`, the weight admitted
//! through a bucket is at most `burst_weight + limit_weight · T / window_ns`; over one window,
//! at most `burst_weight + limit_weight`. Configure so that sum stays under the venue's limit.
//!
//! Arithmetic is exact integers: tokens are kept in units of `1 / (window_ns · 1000)` of a
//! weight, so refill never drifts and no division sits on the admission path.
//!
//! A venue throttle reject (the "429" of order entry) cuts the refill rate to
//! `throttle_rate_permille` for `throttle_cooldown_ns`, then ramps it back linearly over
//! `throttle_recovery_ns`. An optional share of every bucket (`cancel_reserve_permille`) is
//! usable only by cancels, so a flood of new orders can never lock cancels out; a second share
//! above it (`reduce_reserve_permille`) is usable only by reduce-only orders and cancels, so a
//! flood of new orders can never lock a forced liquidation out either. Both reserves are
//! floors inside the same buckets: they never add budget, so the window totals hold for
//! every kind together.
//!
//! The adaptive controller (docs/observability.md, "Adaptive control") may cap new orders and
//! replaces further at run time: [`RateLimiter::set_new_order_permille`] puts one more bucket
//! in their way (the first window's rate and burst scaled to the cap). Cancels and queries
//! never see it, so a lowered new-order rate leaves them the whole budget.

use crate::order::RequestKind;

/// Most windows one limiter checks.
pub const WINDOWS_MAX: usize = 4;
const PERMILLE: u64 = 1000;

/// One window of a limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLimit {
    /// Window length.
    pub window_ns: u64,
    /// Weight refilled per window (the sustained rate).
    pub limit_weight: u32,
    /// Bucket capacity (the largest burst).
    pub burst_weight: u32,
}

/// Weight of each message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    /// New order.
    pub new: u32,
    /// Cancel.
    pub cancel: u32,
    /// Replace.
    pub replace: u32,
    /// Status query.
    pub query: u32,
}

/// Limiter configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimiterConfig {
    /// The windows, checked together (1 to [`WINDOWS_MAX`]).
    pub windows: [Option<WindowLimit>; WINDOWS_MAX],
    /// Message weights.
    pub weights: Weights,
    /// Share of each bucket (‰) that only cancels may use.
    pub cancel_reserve_permille: u32,
    /// Share of each bucket (‰), above the cancel reserve, that only reduce-only orders (and
    /// cancels) may use. With the cancel reserve it must leave new orders some budget.
    pub reduce_reserve_permille: u32,
    /// Refill rate (‰ of normal) right after a venue throttle reject.
    pub throttle_rate_permille: u32,
    /// How long the cut rate holds.
    pub throttle_cooldown_ns: u64,
    /// How long the rate then takes to ramp back to normal.
    pub throttle_recovery_ns: u64,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self {
            windows: [
                Some(WindowLimit {
                    window_ns: 1_000_000_000,
                    limit_weight: 1_000,
                    burst_weight: 200,
                }),
                Some(WindowLimit {
                    window_ns: 60_000_000_000,
                    limit_weight: 30_000,
                    burst_weight: 2_000,
                }),
                None,
                None,
            ],
            weights: Weights {
                new: 1,
                cancel: 1,
                replace: 1,
                query: 1,
            },
            cancel_reserve_permille: 100,
            reduce_reserve_permille: 100,
            throttle_rate_permille: 500,
            throttle_cooldown_ns: 5_000_000_000,
            throttle_recovery_ns: 10_000_000_000,
        }
    }
}

/// A configuration the limiter cannot honour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimiterConfigError {
    /// No window configured.
    #[error("rate limiter needs at least one window")]
    NoWindow,
    /// A window with zero length, rate or burst.
    #[error("rate limiter window {index}: window_ns, limit_weight and burst_weight must be > 0")]
    ZeroWindow {
        /// Which window.
        index: u32,
    },
    /// The scaled token count would overflow 64 bits.
    #[error("rate limiter window {index}: burst_weight × window_ns too large")]
    Overflow {
        /// Which window.
        index: u32,
    },
    /// A message weight larger than what a bucket can ever hold for it.
    #[error(
        "rate limiter window {index}: {key} = {weight} exceeds the usable burst {usable} \
         (burst_weight, less the cancel reserve for all but cancels)"
    )]
    WeightTooLarge {
        /// Which window.
        index: u32,
        /// The weight's key (`weight_new`, `weight_cancel`, `weight_replace`, `weight_query`).
        key: &'static str,
        /// The weight.
        weight: u32,
        /// What the bucket can hold for that message kind.
        usable: u32,
    },
    /// The reserves leave a window no budget for new orders: none could ever leave.
    #[error(
        "rate limiter window {index}: {key} = {value} (with the other reserve) leaves none of \
         its burst_weight for new orders"
    )]
    ReserveAll {
        /// Which window.
        index: u32,
        /// The reserve's key (`cancel_reserve_permille` or `reduce_reserve_permille`).
        key: &'static str,
        /// The reserve.
        value: u32,
    },
    /// A per-mille value above 1000.
    #[error("rate limiter: {name} = {value} is above 1000 ‰")]
    Permille {
        /// The key.
        name: &'static str,
        /// The value.
        value: u32,
    },
}

/// The limiter's answer when budget is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotReady {
    /// Earliest time the request could pass, at the current refill rate.
    pub ready_at_ns: u64,
}

/// Which reserves a request may dig into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A cancel or a status query: the whole bucket.
    Cancel,
    /// A reduce-only order (or its replace): all but the cancel reserve; never capped by the
    /// adaptive controller (a forced liquidation is not the load it sheds).
    Reduce,
    /// Any other new order or replace: all but both reserves, under the controller's cap.
    New,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// `limit_weight`: at rate `r` ‰ the bucket gains `limit_weight · r` scaled units per ns.
    limit: u64,
    /// Scaled units per weight: `window_ns · PERMILLE`.
    unit: u64,
    capacity: u64,
    /// Scaled tokens only cancels may use.
    reserve: u64,
    /// Scaled tokens, above `reserve`, only reduce-only orders and cancels may use.
    reduce_reserve: u64,
    tokens: u64,
    last_ns: u64,
}

impl Bucket {
    #[inline]
    fn refill(&mut self, now_ns: u64, rate_permille: u64) {
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        // Saturates instead of overflowing on long idles; the cap applies right after.
        let added = elapsed.saturating_mul(self.limit * rate_permille);
        self.tokens = self.tokens.saturating_add(added).min(self.capacity);
    }

    /// Scaled tokens missing for `cost`, keeping `floor` in the bucket.
    fn deficit(&self, cost: u64, floor: u64) -> u64 {
        (cost + floor).saturating_sub(self.tokens)
    }
}

/// A multi-window weighted rate limiter for one venue.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    config: LimiterConfig,
    buckets: [Bucket; WINDOWS_MAX],
    bucket_count: usize,
    throttled_at_ns: Option<u64>,
    throttle_events: u64,
    /// The controller's cap on new orders and replaces, ‰ of the first window (1000: none).
    new_permille: u64,
    /// The bucket that enforces the cap (checked only below 1000 ‰).
    gate: Bucket,
    /// Weight admitted for new orders and replaces (what the controller measures).
    admitted_new_weight: u64,
    /// Cancels the venue refused on orders still open.
    cancel_refusals: u64,
}

impl RateLimiter {
    /// Validates `config` and starts with every bucket full at `now_ns`.
    pub fn new(config: LimiterConfig, now_ns: u64) -> Result<Self, LimiterConfigError> {
        validate(&config)?;
        let empty = Bucket {
            limit: 0,
            unit: 1,
            capacity: 0,
            reserve: 0,
            reduce_reserve: 0,
            tokens: 0,
            last_ns: now_ns,
        };
        let mut buckets = [empty; WINDOWS_MAX];
        let mut bucket_count = 0;
        for window in config.windows.iter().flatten() {
            let unit = window.window_ns * PERMILLE;
            let capacity = unit * u64::from(window.burst_weight);
            buckets[bucket_count] = Bucket {
                limit: u64::from(window.limit_weight),
                unit,
                capacity,
                reserve: capacity / PERMILLE * u64::from(config.cancel_reserve_permille),
                reduce_reserve: capacity / PERMILLE * u64::from(config.reduce_reserve_permille),
                tokens: capacity,
                last_ns: now_ns,
            };
            bucket_count += 1;
        }
        let gate = buckets[0];
        Ok(Self {
            config,
            buckets,
            bucket_count,
            throttled_at_ns: None,
            throttle_events: 0,
            new_permille: PERMILLE,
            gate,
            admitted_new_weight: 0,
            cancel_refusals: 0,
        })
    }

    /// Caps new orders and replaces at `permille` ‰ (clamped to 1..=1000) of the first
    /// window's rate and burst (never below one order of the heaviest such kind); 1000 lifts
    /// the cap. Tokens already earned under the old cap are kept up to the new burst.
    pub fn set_new_order_permille(&mut self, now_ns: u64, permille: u32) {
        let permille = u64::from(permille).clamp(1, PERMILLE);
        let window = self.buckets[0];
        let was_open = self.new_permille >= PERMILLE;
        self.gate.refill(now_ns, PERMILLE);
        self.new_permille = permille;
        if permille >= PERMILLE {
            return;
        }
        let heaviest = u64::from(self.config.weights.new.max(self.config.weights.replace));
        let burst = (window.capacity / window.unit * permille / PERMILLE).max(heaviest);
        self.gate.limit = (window.limit * permille / PERMILLE).max(1);
        self.gate.unit = window.unit;
        self.gate.capacity = window.unit * burst;
        self.gate.reserve = 0;
        self.gate.reduce_reserve = 0;
        self.gate.tokens = if was_open {
            self.gate.capacity
        } else {
            self.gate.tokens.min(self.gate.capacity)
        };
        self.gate.last_ns = self.gate.last_ns.max(now_ns);
    }

    /// Weight admitted so far for new orders and replaces.
    pub fn admitted_new_weight(&self) -> u64 {
        self.admitted_new_weight
    }

    /// The sustained rate of the first window, weight per second (what caps are ‰ of).
    pub fn weight_per_second(&self) -> u64 {
        let w = self.buckets[0];
        (u128::from(w.limit) * 1_000_000_000 * u128::from(PERMILLE) / u128::from(w.unit)) as u64
    }

    /// The controller's cap on new orders, ‰ (1000: none).
    pub fn new_order_permille(&self) -> u32 {
        self.new_permille as u32
    }

    /// The weight of a request kind.
    pub fn weight(&self, kind: &RequestKind) -> u32 {
        let w = self.config.weights;
        match kind {
            RequestKind::New(_) => w.new,
            RequestKind::Cancel { .. } => w.cancel,
            RequestKind::Replace(_) => w.replace,
            RequestKind::Query { .. } | RequestKind::Reconcile { .. } => w.query,
        }
    }

    /// Takes `weight` from every bucket, or none of them. Cancels may dig into the reserve.
    #[inline]
    pub fn try_acquire(
        &mut self,
        now_ns: u64,
        weight: u32,
        is_cancel: bool,
    ) -> Result<(), NotReady> {
        let class = if is_cancel { Class::Cancel } else { Class::New };
        self.try_acquire_as(now_ns, weight, class)
    }

    /// Takes `weight` from every bucket, or none of them, keeping the reserves `class` may not
    /// use: cancels use the whole bucket, reduce-only orders all but the cancel reserve, other
    /// orders neither reserve.
    #[inline]
    pub fn try_acquire_as(
        &mut self,
        now_ns: u64,
        weight: u32,
        class: Class,
    ) -> Result<(), NotReady> {
        let is_cancel = class == Class::Cancel;
        let rate = self.rate_permille(now_ns);
        let mut worst_wait_ns = 0;
        for bucket in &mut self.buckets[..self.bucket_count] {
            bucket.refill(now_ns, rate);
            let floor = match class {
                Class::Cancel => 0,
                Class::Reduce => bucket.reserve,
                Class::New => bucket.reserve + bucket.reduce_reserve,
            };
            let deficit = bucket.deficit(bucket.unit * u64::from(weight), floor);
            if deficit > 0 {
                let per_ns = (bucket.limit * rate).max(1);
                worst_wait_ns = worst_wait_ns.max(deficit.div_ceil(per_ns));
            }
        }
        let gated = class == Class::New && self.new_permille < PERMILLE;
        if gated {
            let gate = &mut self.gate;
            gate.refill(now_ns, PERMILLE);
            let deficit = gate.deficit(gate.unit * u64::from(weight), 0);
            if deficit > 0 {
                let per_ns = gate.limit * PERMILLE;
                worst_wait_ns = worst_wait_ns.max(deficit.div_ceil(per_ns));
            }
        }
        if worst_wait_ns > 0 {
            return Err(NotReady {
                ready_at_ns: now_ns + worst_wait_ns,
            });
        }
        for bucket in &mut self.buckets[..self.bucket_count] {
            bucket.tokens -= bucket.unit * u64::from(weight);
        }
        if gated {
            self.gate.tokens -= self.gate.unit * u64::from(weight);
        }
        if !is_cancel {
            self.admitted_new_weight += u64::from(weight);
        }
        Ok(())
    }

    /// The venue throttled us: cut the refill rate, then recover gradually.
    pub fn on_venue_throttle(&mut self, now_ns: u64) {
        // Settle refills at the old rate first so the cut applies only from now on.
        let rate = self.rate_permille(now_ns);
        for bucket in &mut self.buckets[..self.bucket_count] {
            bucket.refill(now_ns, rate);
        }
        self.throttled_at_ns = Some(now_ns);
        self.throttle_events += 1;
    }

    /// The venue says `used` weight of window `window`'s limit is spent (a used-weight header):
    /// what is left locally is lowered to `limit_weight - used` if it was more (never raised:
    /// the venue's count may lag the requests in flight). Unknown windows are ignored.
    pub fn align_used(&mut self, now_ns: u64, window: usize, used: u32) {
        let rate = self.rate_permille(now_ns);
        let Some(bucket) = self.buckets[..self.bucket_count].get_mut(window) else {
            return;
        };
        bucket.refill(now_ns, rate);
        let left = bucket.limit.saturating_sub(u64::from(used));
        bucket.tokens = bucket.tokens.min(left.saturating_mul(bucket.unit));
    }

    /// Venue throttle rejects seen.
    pub fn throttle_events(&self) -> u64 {
        self.throttle_events
    }

    /// The venue refused a cancel of an order it still holds open (a venue under its own rate
    /// limit refuses cancels too): counted for the adaptive controller; the refill rate is not
    /// cut (a cancel refused is not a new order refused).
    pub fn on_cancel_refused(&mut self) {
        self.cancel_refusals += 1;
    }

    /// Cancels refused on orders still open.
    pub fn cancel_refusals(&self) -> u64 {
        self.cancel_refusals
    }

    /// Current refill rate in ‰ of normal.
    pub fn rate_permille(&mut self, now_ns: u64) -> u64 {
        let Some(at) = self.throttled_at_ns else {
            return PERMILLE;
        };
        let cut = u64::from(self.config.throttle_rate_permille);
        let since = now_ns.saturating_sub(at);
        if since < self.config.throttle_cooldown_ns {
            return cut;
        }
        let ramp = since - self.config.throttle_cooldown_ns;
        if ramp >= self.config.throttle_recovery_ns {
            self.throttled_at_ns = None;
            return PERMILLE;
        }
        cut + (PERMILLE - cut) * ramp / self.config.throttle_recovery_ns
    }
}

fn validate(config: &LimiterConfig) -> Result<(), LimiterConfigError> {
    for (name, value) in [
        ("cancel_reserve_permille", config.cancel_reserve_permille),
        ("reduce_reserve_permille", config.reduce_reserve_permille),
        ("throttle_rate_permille", config.throttle_rate_permille),
    ] {
        if value > PERMILLE as u32 {
            return Err(LimiterConfigError::Permille { name, value });
        }
    }
    if config.windows.iter().flatten().next().is_none() {
        return Err(LimiterConfigError::NoWindow);
    }
    let w = config.weights;
    for (index, window) in config.windows.iter().enumerate() {
        let Some(window) = window else { continue };
        let index = index as u32;
        if window.window_ns == 0 || window.limit_weight == 0 || window.burst_weight == 0 {
            return Err(LimiterConfigError::ZeroWindow { index });
        }
        let fits = window
            .window_ns
            .checked_mul(PERMILLE)
            .and_then(|unit| unit.checked_mul(u64::from(window.burst_weight)))
            .and_then(|cap| cap.checked_mul(2));
        if fits.is_none() {
            return Err(LimiterConfigError::Overflow { index });
        }
        // Both reserves as the buckets keep them: what new orders may use must hold one.
        let reserves =
            u64::from(config.cancel_reserve_permille) + u64::from(config.reduce_reserve_permille);
        let reserve = (u64::from(window.burst_weight) * reserves).div_ceil(PERMILLE);
        let usable = u64::from(window.burst_weight).saturating_sub(reserve) as u32;
        if usable == 0 {
            // Name the reserve that tipped it over: the reduce reserve unless the cancel
            // reserve alone already takes everything.
            let cancel_alone = (u64::from(window.burst_weight)
                * u64::from(config.cancel_reserve_permille))
            .div_ceil(PERMILLE);
            let (key, value) = if cancel_alone < u64::from(window.burst_weight) {
                ("reduce_reserve_permille", config.reduce_reserve_permille)
            } else {
                ("cancel_reserve_permille", config.cancel_reserve_permille)
            };
            return Err(LimiterConfigError::ReserveAll { index, key, value });
        }
        let weights = [
            ("weight_new", w.new),
            ("weight_replace", w.replace),
            ("weight_query", w.query),
        ];
        for (key, weight) in weights {
            if weight > usable {
                return Err(LimiterConfigError::WeightTooLarge {
                    index,
                    key,
                    weight,
                    usable,
                });
            }
        }
        if w.cancel > window.burst_weight {
            let usable = window.burst_weight;
            return Err(LimiterConfigError::WeightTooLarge {
                index,
                key: "weight_cancel",
                weight: w.cancel,
                usable,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(windows: &[(u64, u32, u32)], reserve: u32) -> LimiterConfig {
        let mut cfg = LimiterConfig {
            cancel_reserve_permille: reserve,
            reduce_reserve_permille: 0,
            ..LimiterConfig::default()
        };
        cfg.windows = [None; WINDOWS_MAX];
        for (i, &(window_ns, limit_weight, burst_weight)) in windows.iter().enumerate() {
            cfg.windows[i] = Some(WindowLimit {
                window_ns,
                limit_weight,
                burst_weight,
            });
        }
        cfg
    }

    /// Reference model: a token bucket with capacity B and rate r that starts full admits a
    /// sequence iff for every i ≤ j, Σ w[i..=j] ≤ B + r·(t_j − t_i). Checked by brute force
    /// over the admitted log, with exact rational arithmetic (no token state at all).
    fn reference_admits(
        log: &[(u64, u32)],
        now: u64,
        weight: u32,
        windows: &[(u64, u32, u32)],
    ) -> bool {
        windows.iter().all(|&(window_ns, limit, burst)| {
            let mut sum = u128::from(weight);
            if sum > u128::from(burst) {
                return false;
            }
            for &(t, w) in log.iter().rev() {
                sum += u128::from(w);
                let allowed = u128::from(burst) * u128::from(window_ns)
                    + u128::from(limit) * u128::from(now - t);
                if sum * u128::from(window_ns) > allowed {
                    return false;
                }
            }
            true
        })
    }

    fn windows_strategy() -> impl Strategy<Value = Vec<(u64, u32, u32)>> {
        proptest::collection::vec((1_000u64..1_000_000, 1u32..50, 3u32..40), 1..=3)
    }

    proptest! {
        // Goal: the limiter admits exactly what the (σ, ρ) reference model admits, with no
        // reserve and no throttle; method: random windows, weights and inter-arrival gaps.
        #[test]
        fn matches_reference_model(
            windows in windows_strategy(),
            steps in proptest::collection::vec((0u64..50_000, 1u32..3), 1..300),
        ) {
            let mut limiter = RateLimiter::new(config(&windows, 0), 0).unwrap();
            let mut log = Vec::new();
            let mut now = 0;
            for (gap, weight) in steps {
                now += gap;
                let expected = reference_admits(&log, now, weight, &windows);
                let got = limiter.try_acquire(now, weight, false);
                prop_assert_eq!(got.is_ok(), expected, "t={} w={}", now, weight);
                if let Err(NotReady { ready_at_ns }) = got {
                    prop_assert!(ready_at_ns > now);
                } else {
                    log.push((now, weight));
                }
            }
        }

        // Goal: in any window of each configured length, admitted weight ≤ burst + limit,
        // even with cancels using the reserve and venue throttles; method: sliding check.
        #[test]
        fn never_exceeds_window_bound(
            windows in windows_strategy(),
            reserve in 0u32..300,
            steps in proptest::collection::vec((0u64..20_000, any::<bool>(), 0u8..40), 1..400),
        ) {
            let cfg = config(&windows, reserve);
            prop_assume!(validate(&cfg).is_ok());
            let mut limiter = RateLimiter::new(cfg, 0).unwrap();
            let mut log: Vec<(u64, u64)> = Vec::new();
            let mut now = 0;
            for (gap, is_cancel, throttle) in steps {
                now += gap;
                if throttle == 0 {
                    limiter.on_venue_throttle(now);
                }
                if limiter.try_acquire(now, 1, is_cancel).is_ok() {
                    log.push((now, 1));
                }
            }
            for &(window_ns, limit, burst) in &windows {
                for (i, &(start, _)) in log.iter().enumerate() {
                    let in_window: u64 = log[i..].iter().take_while(|(t, _)| *t < start + window_ns).map(|(_, w)| *w).sum();
                    prop_assert!(in_window <= u64::from(burst + limit), "{} in window of {} from {}", in_window, window_ns, start);
                }
            }
        }

        // Goal: `ready_at_ns` is honest: a retry at that instant succeeds.
        #[test]
        fn ready_at_is_exact(windows in windows_strategy(), weight in 1u32..3) {
            let mut limiter = RateLimiter::new(config(&windows, 0), 0).unwrap();
            let mut now = 0;
            for _ in 0..200 {
                match limiter.try_acquire(now, weight, false) {
                    Ok(()) => {}
                    Err(NotReady { ready_at_ns }) => {
                        prop_assert!(limiter.try_acquire(ready_at_ns - 1, weight, false).is_err());
                        now = ready_at_ns;
                        prop_assert!(limiter.try_acquire(now, weight, false).is_ok());
                    }
                }
            }
        }
    }

    proptest! {
        // Goal: the controller's cap holds: with new orders capped at p ‰, in any window of
        // the first length the new orders admitted stay within p ‰ of burst + limit (at least
        // one of each), and cancels are never held by it. Method: a random cap set after a
        // random prefix, then a sliding check of the new orders admitted under it.
        #[test]
        fn new_order_cap_holds_and_spares_cancels(
            windows in windows_strategy(),
            cap in 1u32..=1000,
            prefix in 0usize..50,
            steps in proptest::collection::vec((0u64..20_000, any::<bool>()), 1..400),
        ) {
            let mut limiter = RateLimiter::new(config(&windows, 0), 0).unwrap();
            let mut now = 0;
            let mut log: Vec<u64> = Vec::new();
            for (i, (gap, is_cancel)) in steps.iter().enumerate() {
                now += gap;
                if i == prefix {
                    limiter.set_new_order_permille(now, cap);
                }
                let ok = limiter.try_acquire(now, 1, *is_cancel).is_ok();
                if ok && !is_cancel && i >= prefix {
                    log.push(now);
                }
            }
            let (window_ns, limit, burst) = windows[0];
            let p = u64::from(cap);
            let most = (u64::from(burst) * p / 1000).max(1) + (u64::from(limit) * p / 1000).max(1);
            for (i, &start) in log.iter().enumerate() {
                let n = log[i..].iter().take_while(|t| **t < start + window_ns).count() as u64;
                prop_assert!(n <= most, "{} new orders in a window, cap allows {}", n, most);
            }
        }
    }

    // Goal: a cap of 250 ‰ admits a quarter of the rate to new orders, none of it taken from
    // cancels, and 1000 ‰ lifts it.
    #[test]
    fn new_order_cap_is_a_quarter_and_lifts() {
        let cfg = config(&[(1_000_000_000, 1000, 100)], 0);
        let mut limiter = RateLimiter::new(cfg, 0).unwrap();
        limiter.set_new_order_permille(0, 250);
        // Burst: 25 of 100.
        let burst = (0..200)
            .filter(|_| limiter.try_acquire(0, 1, false).is_ok())
            .count();
        assert_eq!(burst, 25);
        // Cancels still have the rest of the bucket.
        let cancels = (0..200)
            .filter(|_| limiter.try_acquire(0, 1, true).is_ok())
            .count();
        assert_eq!(cancels, 75);
        // Over one second at 1 ms steps: 250 new orders (the gate), when the buckets allow.
        let mut news = 0;
        for ms in 1..=1000u64 {
            let now = ms * 1_000_000;
            while limiter.try_acquire(now, 1, false).is_ok() {
                news += 1;
            }
        }
        assert_eq!(news, 250);
        limiter.set_new_order_permille(1_000_000_000, 1000);
        assert_eq!(limiter.new_order_permille(), 1000);
        let mut news = 0;
        for ms in 1001..=2000u64 {
            let now = ms * 1_000_000;
            while limiter.try_acquire(now, 1, false).is_ok() {
                news += 1;
            }
        }
        assert!(
            news >= 990,
            "{news} new orders in the second after the cap was lifted"
        );
    }

    // Goal: a flood of new orders cannot take the cancels' reserve.
    #[test]
    fn reserve_is_for_cancels() {
        let cfg = config(&[(1_000_000_000, 100, 100)], 200);
        let mut limiter = RateLimiter::new(cfg, 0).unwrap();
        let news = (0..200)
            .filter(|_| limiter.try_acquire(0, 1, false).is_ok())
            .count();
        assert_eq!(news, 80);
        let cancels = (0..200)
            .filter(|_| limiter.try_acquire(0, 1, true).is_ok())
            .count();
        assert_eq!(cancels, 20);
    }

    // Goal: a flood of new orders cannot take the reduce-only reserve, reduce-only orders
    // cannot take the cancels' reserve, and all kinds together never pass the bucket.
    #[test]
    fn reduce_reserve_is_for_reduce_only_and_cancels() {
        let mut cfg = config(&[(1_000_000_000, 100, 100)], 200);
        cfg.reduce_reserve_permille = 100;
        let mut limiter = RateLimiter::new(cfg, 0).unwrap();
        let take = |l: &mut RateLimiter, class| {
            (0..200)
                .filter(|_| l.try_acquire_as(0, 1, class).is_ok())
                .count()
        };
        assert_eq!(
            take(&mut limiter, Class::New),
            70,
            "new orders: all but both reserves"
        );
        assert_eq!(
            take(&mut limiter, Class::Reduce),
            10,
            "reduce-only: the reduce reserve"
        );
        assert_eq!(
            take(&mut limiter, Class::Cancel),
            20,
            "cancels: the cancel reserve"
        );
        assert_eq!(
            take(&mut limiter, Class::Reduce),
            0,
            "the bucket's total holds"
        );
        // Reduce-only orders first: they may use what new orders left, beyond their reserve.
        let mut limiter = RateLimiter::new(cfg, 0).unwrap();
        assert_eq!(take(&mut limiter, Class::Reduce), 80);
        assert_eq!(take(&mut limiter, Class::New), 0);
        assert_eq!(take(&mut limiter, Class::Cancel), 20);
    }

    // Goal: the controller's cap on new orders never holds a reduce-only order back.
    #[test]
    fn reduce_only_passes_the_controller_cap() {
        let mut cfg = config(&[(1_000_000_000, 1000, 100)], 0);
        cfg.reduce_reserve_permille = 100;
        let mut limiter = RateLimiter::new(cfg, 0).unwrap();
        limiter.set_new_order_permille(0, 1);
        let news = (0..100)
            .filter(|_| limiter.try_acquire_as(0, 1, Class::New).is_ok())
            .count();
        assert_eq!(news, 1, "the cap's burst is one order");
        let reduces = (0..200)
            .filter(|_| limiter.try_acquire_as(0, 1, Class::Reduce).is_ok())
            .count();
        assert_eq!(reduces, 99, "the rest of the bucket");
    }

    // Goal: `reduce_reserve_permille` at its worst legal and illegal values.
    #[test]
    fn reduce_reserve_bounds() {
        let with = |cancel: u32, reduce: u32| {
            let mut cfg = config(&[(1_000_000_000, 200, 200)], cancel);
            cfg.reduce_reserve_permille = reduce;
            RateLimiter::new(cfg, 0).map(|_| ())
        };
        assert_eq!(with(0, 0), Ok(()));
        assert_eq!(with(0, 995), Ok(()), "leaves 1 of 200 for new orders");
        assert_eq!(with(500, 495), Ok(()));
        let all = |key, value| {
            Err(LimiterConfigError::ReserveAll {
                index: 0,
                key,
                value,
            })
        };
        assert_eq!(with(0, 996), all("reduce_reserve_permille", 996));
        assert_eq!(with(500, 500), all("reduce_reserve_permille", 500));
        assert_eq!(with(1000, 0), all("cancel_reserve_permille", 1000));
        assert_eq!(
            with(0, 1001),
            Err(LimiterConfigError::Permille {
                name: "reduce_reserve_permille",
                value: 1001
            })
        );
    }

    // Goal: a venue throttle halves the refill during cool-down, then recovers gradually.
    #[test]
    fn throttle_cuts_then_recovers() {
        let mut cfg = config(&[(1_000_000_000, 1000, 10)], 0);
        cfg.throttle_rate_permille = 500;
        cfg.throttle_cooldown_ns = 1_000;
        cfg.throttle_recovery_ns = 1_000;
        let mut limiter = RateLimiter::new(cfg, 0).unwrap();
        limiter.on_venue_throttle(0);
        assert_eq!(limiter.rate_permille(500), 500);
        assert_eq!(limiter.rate_permille(1_500), 750);
        assert_eq!(limiter.rate_permille(2_000), 1000);
        assert_eq!(limiter.throttle_events(), 1);
    }

    #[test]
    fn bad_configs_are_refused_with_the_value() {
        let zero = config(&[(0, 1, 1)], 0);
        assert_eq!(
            RateLimiter::new(zero, 0).unwrap_err(),
            LimiterConfigError::ZeroWindow { index: 0 }
        );
        let mut heavy = config(&[(1_000, 10, 10)], 0);
        heavy.weights.new = 11;
        assert_eq!(
            RateLimiter::new(heavy, 0).unwrap_err(),
            LimiterConfigError::WeightTooLarge {
                index: 0,
                key: "weight_new",
                weight: 11,
                usable: 10
            }
        );
        let none = config(&[], 0);
        assert_eq!(
            RateLimiter::new(none, 0).unwrap_err(),
            LimiterConfigError::NoWindow
        );
        let permille = config(&[(1_000, 10, 10)], 1001);
        assert!(matches!(
            RateLimiter::new(permille, 0),
            Err(LimiterConfigError::Permille { value: 1001, .. })
        ));
    }
}
