//! The client-side gate in front of a venue's REST API (issue 14; docs/rest.md): the venue's
//! 429s become local, controlled waiting.
//!
//! - **Buckets**: keel's own multi-window limiter ([`RateLimiter`]: token buckets refilled
//!   lazily, burst separate from rate, a request passes only if every window holds its weight,
//!   and only then is any debited), so the per-second and per-minute limits of a venue are one
//!   configuration, checked together.
//! - **Weights by endpoint**: the longest configured path prefix that matches a request's target
//!   gives its weight (e.g. ticker 1, depth 2, klines 5); others weigh `default_weight`.
//! - **Acquire with a deadline**: a request waits in a bounded FIFO queue (allocated at start;
//!   a full queue refuses at once) until every window has its weight, or its deadline passes
//!   and it is failed (`TimedOut`) for the layer above to retry or degrade. Nothing blocks a
//!   thread: the owner's loop calls [`RestGate::poll`]. A grant never comes after its deadline.
//! - **Retries go back through the gate**: [`RestGate::retry`] puts a request back in the queue
//!   after an equal-jitter backoff delay; it is granted only when the buckets allow, like any
//!   other.
//! - **The venue's answer steers it**: a 429 pauses every grant until `Retry-After` (or the
//!   configured cool-down) and cuts the refill rate, recovering gradually (the limiter's
//!   throttle ramp); a 418 (banned) pauses until its `Retry-After` or `ban_pause_ns`; a
//!   used-weight header lowers the local count to what the venue says is left
//!   ([`RateLimiter::align_used`]).
//! - **Figures**: acquire wait mean and p99, acquire timeouts, queue-full refusals, 429 and 418
//!   counts, retries, the current refill rate.

use std::collections::VecDeque;

use crate::guard::backoff::{Backoff, BackoffConfig};
use crate::guard::limiter::{LimiterConfig, LimiterConfigError, RateLimiter, WindowLimit};
use crate::metrics::Histogram;
use crate::rng::Rng64;

/// `[[venue.rest]]`-style settings of one gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestGateConfig {
    /// The windows (weights of the order-entry kinds are not used here).
    pub limiter: LimiterConfig,
    /// Path prefix → weight; the longest matching prefix wins.
    pub endpoints: Vec<(String, u32)>,
    /// Weight of a path no prefix matches.
    pub default_weight: u32,
    /// Requests waiting at most (more are refused at once).
    pub queue_max: usize,
    /// How long a request may wait for its weight.
    pub acquire_timeout_ns: u64,
    /// Pause after a 429 without `Retry-After`.
    pub throttle_pause_ns: u64,
    /// Pause after a 418 without `Retry-After`.
    pub ban_pause_ns: u64,
    /// Delays between retries (equal jitter).
    pub retry: BackoffConfig,
    /// Whether 429/418 answers pause the gate and cut its rate (off only to show what a
    /// client without the gate does: `keel fetch --no-limiter`).
    pub feedback: bool,
}

impl RestGateConfig {
    /// A gate for a venue that allows `per_second` weight per second and `per_minute` per
    /// minute to each client. The venue counts in fixed windows, so a bucket may send at most
    /// `burst + rate` in any one of them: each bucket keeps a tenth of the venue's limit as
    /// burst (at least `heaviest`, the heaviest request) and refills at the rest less a
    /// twentieth of the limit (the margin for time in flight). The
    /// endpoint weights and every other setting are the defaults, to be set by the caller.
    pub fn for_venue_limits(per_second: u32, per_minute: u32, heaviest: u32) -> Self {
        let window = |window_ns: u64, limit: u32| {
            let burst = (limit / 10).max(heaviest).min(limit);
            WindowLimit {
                window_ns,
                // A twentieth more held back: a request reaches the venue a little after it
                // leaves, and two that left a window apart may arrive within one.
                limit_weight: limit
                    .saturating_sub(burst)
                    .saturating_sub(limit / 20)
                    .max(1),
                burst_weight: burst,
            }
        };
        let mut config = Self::default();
        config.limiter.windows = [
            Some(window(1_000_000_000, per_second)),
            Some(window(60_000_000_000, per_minute)),
            None,
            None,
        ];
        config
    }
}

impl Default for RestGateConfig {
    fn default() -> Self {
        Self {
            limiter: LimiterConfig::default(),
            endpoints: Vec::new(),
            default_weight: 1,
            queue_max: 1_024,
            acquire_timeout_ns: 2_000_000_000,
            throttle_pause_ns: 1_000_000_000,
            ban_pause_ns: 60_000_000_000,
            retry: BackoffConfig {
                base_ns: 100_000_000,
                cap_ns: 5_000_000_000,
                attempts_max: 5,
                ..BackoffConfig::default()
            },
            feedback: true,
        }
    }
}

/// What the gate decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send it now: its weight is taken from every window.
    Granted {
        /// The caller's token.
        token: u64,
        /// How long it waited.
        waited_ns: u64,
    },
    /// Its deadline passed before the windows had its weight: not sent.
    TimedOut {
        /// The caller's token.
        token: u64,
    },
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// The queue is full.
    #[error("the REST gate's queue is full ({0} waiting)")]
    QueueFull(usize),
    /// A weight no window can ever hold.
    #[error("weight {weight} exceeds the smallest window's burst {burst}")]
    TooHeavy {
        /// The weight.
        weight: u32,
        /// The smallest burst.
        burst: u32,
    },
    /// No retries left.
    #[error("no retries left after {0} attempts")]
    RetriesSpent(u32),
}

/// The gate's figures.
#[derive(Debug, Clone, Default)]
pub struct RestGateStats {
    /// Requests granted.
    pub granted: u64,
    /// Requests failed at their deadline.
    pub timed_out: u64,
    /// Requests refused because the queue was full.
    pub queue_full: u64,
    /// Requests put back for a retry.
    pub retries: u64,
    /// 429 answers seen.
    pub throttled_429: u64,
    /// 418 answers seen.
    pub banned_418: u64,
    /// Sum of the waits of granted requests, ns (mean = sum / granted).
    pub wait_sum_ns: u64,
    /// The waits of granted requests.
    pub wait: Histogram,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    token: u64,
    weight: u32,
    enqueued_ns: u64,
    deadline_ns: u64,
    not_before_ns: u64,
}

/// One venue's REST gate (see the module docs).
#[derive(Debug)]
pub struct RestGate {
    config: RestGateConfig,
    limiter: RateLimiter,
    queue: VecDeque<Waiting>,
    paused_until_ns: u64,
    smallest_burst: u32,
    stats: RestGateStats,
}

impl RestGate {
    /// A gate with its queue allocated, every bucket full at `now_ns`.
    pub fn new(mut config: RestGateConfig, now_ns: u64) -> Result<Self, LimiterConfigError> {
        // No cancels or reduce-only orders here: every request may use the whole bucket.
        config.limiter.cancel_reserve_permille = 0;
        config.limiter.reduce_reserve_permille = 0;
        let limiter = RateLimiter::new(config.limiter, now_ns)?;
        let smallest_burst = config
            .limiter
            .windows
            .iter()
            .flatten()
            .map(|w| w.burst_weight)
            .min()
            .unwrap_or(0);
        Ok(Self {
            queue: VecDeque::with_capacity(config.queue_max),
            limiter,
            paused_until_ns: 0,
            smallest_burst,
            stats: RestGateStats::default(),
            config,
        })
    }

    /// Its figures.
    pub fn stats(&self) -> &RestGateStats {
        &self.stats
    }

    /// Requests waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// The refill rate now, ‰ of normal (below 1000 after a 429, recovering).
    pub fn rate_permille(&mut self, now_ns: u64) -> u64 {
        self.limiter.rate_permille(now_ns)
    }

    /// Until when nothing is granted (after a 429 or 418).
    pub fn paused_until_ns(&self) -> u64 {
        self.paused_until_ns
    }

    /// The weight of a request for `target` (path and query).
    pub fn weight_of(&self, target: &str) -> u32 {
        let path = target.split('?').next().unwrap_or(target);
        self.config
            .endpoints
            .iter()
            .filter(|(prefix, _)| path.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map_or(self.config.default_weight, |(_, w)| *w)
    }

    /// Queues a request of `weight` at `now_ns`; it is granted or failed by `poll`, within the
    /// acquire timeout.
    pub fn acquire(&mut self, now_ns: u64, token: u64, weight: u32) -> Result<(), GateError> {
        self.push(now_ns, token, weight, now_ns, 0)
    }

    fn push(
        &mut self,
        now_ns: u64,
        token: u64,
        weight: u32,
        not_before_ns: u64,
        extra_ns: u64,
    ) -> Result<(), GateError> {
        if weight > self.smallest_burst {
            return Err(GateError::TooHeavy {
                weight,
                burst: self.smallest_burst,
            });
        }
        if self.queue.len() >= self.config.queue_max {
            self.stats.queue_full += 1;
            return Err(GateError::QueueFull(self.queue.len()));
        }
        self.queue.push_back(Waiting {
            token,
            weight,
            enqueued_ns: now_ns,
            deadline_ns: not_before_ns
                .saturating_add(self.config.acquire_timeout_ns)
                .saturating_add(extra_ns),
            not_before_ns,
        });
        Ok(())
    }

    /// Puts a request back for its `attempt`-th retry (1 for the first): it waits an
    /// equal-jitter backoff delay, then goes through the windows like any request.
    pub fn retry(
        &mut self,
        now_ns: u64,
        token: u64,
        weight: u32,
        attempt: u32,
        rng: &mut impl Rng64,
    ) -> Result<u64, GateError> {
        if attempt > self.config.retry.attempts_max {
            return Err(GateError::RetriesSpent(attempt - 1));
        }
        let mut backoff = Backoff::new(self.config.retry);
        for _ in 1..attempt {
            let _ = backoff.next_delay_ns(rng);
        }
        let delay = backoff
            .next_delay_ns(rng)
            .ok_or(GateError::RetriesSpent(attempt - 1))?;
        self.push(now_ns, token, weight, now_ns.saturating_add(delay), 0)?;
        self.stats.retries += 1;
        Ok(delay)
    }

    /// Decides at `now_ns`: fails every waiting request past its deadline, then grants from
    /// the head of the queue while the windows allow (FIFO: a heavy head is not starved by
    /// light ones behind it). Nothing is granted while paused.
    pub fn poll(&mut self, now_ns: u64, decide: impl FnMut(Decision)) {
        self.poll_at_most(now_ns, usize::MAX, decide);
    }

    /// As [`RestGate::poll`], granting at most `grants_max` requests: a caller with that many
    /// free connections takes only what it can send at once, so a grant is never held back
    /// locally and then sent in a bunch the venue would count in one of its windows.
    pub fn poll_at_most(
        &mut self,
        now_ns: u64,
        grants_max: usize,
        mut decide: impl FnMut(Decision),
    ) {
        let mut i = 0;
        while i < self.queue.len() {
            let w = self.queue[i];
            if now_ns > w.deadline_ns {
                self.queue.remove(i);
                self.stats.timed_out += 1;
                decide(Decision::TimedOut { token: w.token });
            } else {
                i += 1;
            }
        }
        if now_ns < self.paused_until_ns {
            return;
        }
        let mut granted = 0;
        while let Some(&w) = self.queue.front() {
            if granted >= grants_max {
                return;
            }
            granted += 1;
            if now_ns < w.not_before_ns {
                // A retry still in its backoff: the requests behind it may go meanwhile.
                let Some(pos) = self.queue.iter().position(|q| now_ns >= q.not_before_ns) else {
                    return;
                };
                let w = self.queue[pos];
                if self.limiter.try_acquire(now_ns, w.weight, false).is_err() {
                    return;
                }
                self.queue.remove(pos);
                self.grant(now_ns, w, &mut decide);
                continue;
            }
            if self.limiter.try_acquire(now_ns, w.weight, false).is_err() {
                return;
            }
            self.queue.pop_front();
            self.grant(now_ns, w, &mut decide);
        }
    }

    fn grant(&mut self, now_ns: u64, w: Waiting, decide: &mut impl FnMut(Decision)) {
        let waited_ns = now_ns.saturating_sub(w.enqueued_ns);
        self.stats.granted += 1;
        self.stats.wait_sum_ns = self.stats.wait_sum_ns.saturating_add(waited_ns);
        self.stats.wait.record(waited_ns);
        decide(Decision::Granted {
            token: w.token,
            waited_ns,
        });
    }

    /// The venue's answer to a granted request: `status`, its `Retry-After` in seconds, and
    /// what it says was used of each window (`(window index, used weight)`, from its
    /// used-weight headers).
    pub fn on_response(
        &mut self,
        now_ns: u64,
        status: u16,
        retry_after_s: Option<u64>,
        used: &[(usize, u32)],
    ) {
        let after = retry_after_s.map(|s| s.saturating_mul(1_000_000_000));
        if !self.config.feedback {
            match status {
                429 => self.stats.throttled_429 += 1,
                418 => self.stats.banned_418 += 1,
                _ => {}
            }
            return;
        }
        match status {
            429 => {
                self.stats.throttled_429 += 1;
                self.limiter.on_venue_throttle(now_ns);
                let pause = after.unwrap_or(self.config.throttle_pause_ns);
                self.paused_until_ns = self.paused_until_ns.max(now_ns.saturating_add(pause));
            }
            418 => {
                self.stats.banned_418 += 1;
                self.limiter.on_venue_throttle(now_ns);
                let pause = after.unwrap_or(self.config.ban_pause_ns);
                self.paused_until_ns = self.paused_until_ns.max(now_ns.saturating_add(pause));
            }
            _ => {}
        }
        for &(window, weight) in used {
            self.limiter.align_used(now_ns, window, weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::limiter::WindowLimit;
    use crate::rng::SplitMix64;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;

    fn config(windows: &[(u64, u32, u32)]) -> RestGateConfig {
        let mut c = RestGateConfig {
            endpoints: vec![
                ("/api/v3/ticker".into(), 1),
                ("/api/v3/depth".into(), 2),
                ("/api/v3/klines".into(), 5),
            ],
            queue_max: 64,
            acquire_timeout_ns: 2 * SEC,
            ..RestGateConfig::default()
        };
        c.limiter.cancel_reserve_permille = 0;
        c.limiter.reduce_reserve_permille = 0;
        c.limiter.windows = [None; 4];
        for (i, &(window_ns, limit_weight, burst_weight)) in windows.iter().enumerate() {
            c.limiter.windows[i] = Some(WindowLimit {
                window_ns,
                limit_weight,
                burst_weight,
            });
        }
        c
    }

    proptest! {
        // Goal: any venue limits and heaviest request, the worst legal and illegal alike, make
        // buckets without a panic: burst within the limit, a rate of at least 1, and burst +
        // rate over one window never above the venue's limit unless one request fills it.
        #[test]
        fn venue_limits_make_buckets_for_any_values(
            second in any::<u32>(), minute in any::<u32>(), heaviest in any::<u32>()
        ) {
            let c = RestGateConfig::for_venue_limits(second, minute, heaviest);
            for (w, limit) in c.limiter.windows.iter().flatten().zip([second, minute]) {
                prop_assert!(w.burst_weight <= limit);
                prop_assert!(w.limit_weight >= 1);
                if w.burst_weight < limit {
                    prop_assert!(u64::from(w.burst_weight) + u64::from(w.limit_weight) <= u64::from(limit));
                }
            }
        }
    }

    #[test]
    fn weights_by_longest_prefix() {
        let mut c = config(&[(SEC, 10, 10)]);
        c.endpoints.push(("/api/v3/depth/full".into(), 7));
        let g = RestGate::new(c, 0).unwrap();
        assert_eq!(g.weight_of("/api/v3/ticker?symbol=BTCUSDT"), 1);
        assert_eq!(g.weight_of("/api/v3/depth?limit=5000"), 2);
        assert_eq!(g.weight_of("/api/v3/depth/full"), 7);
        assert_eq!(g.weight_of("/api/v3/exchangeInfo"), 1);
    }

    // Goal: a 429 pauses until Retry-After and cuts the rate; a 418 pauses for its ban; the
    // venue's used-weight count lowers what is left locally; a full queue refuses at once;
    // a request past its deadline is failed, never granted late.
    #[test]
    fn feedback_pauses_and_aligns() {
        let mut g = RestGate::new(config(&[(SEC, 10, 10)]), 0).unwrap();
        let mut got = Vec::new();
        g.acquire(0, 1, 5).unwrap();
        g.poll(0, |d| got.push(d));
        assert_eq!(
            got,
            vec![Decision::Granted {
                token: 1,
                waited_ns: 0
            }]
        );
        // The venue says 9 of 10 are used: only 1 left locally.
        g.on_response(0, 200, None, &[(0, 9)]);
        g.acquire(0, 2, 2).unwrap();
        got.clear();
        g.poll(0, |d| got.push(d));
        assert!(got.is_empty(), "aligned to the venue's count: {got:?}");
        // 429 with Retry-After: 3: nothing until 3 s, even with tokens.
        g.on_response(SEC / 2, 429, Some(3), &[]);
        got.clear();
        g.poll(2 * SEC, |d| got.push(d));
        assert!(got.is_empty());
        assert!(g.rate_permille(2 * SEC) < 1000);
        assert_eq!(g.stats().throttled_429, 1);
        // Its deadline (2 s after it queued) passed while paused: failed, not granted late.
        got.clear();
        g.poll(3 * SEC, |d| got.push(d));
        assert_eq!(got, vec![Decision::TimedOut { token: 2 }]);
        g.on_response(3 * SEC, 418, None, &[]);
        assert_eq!(g.paused_until_ns(), 63 * SEC);
        for t in 0..64 {
            g.acquire(3 * SEC, 100 + t, 1).unwrap();
        }
        assert_eq!(g.acquire(3 * SEC, 999, 1), Err(GateError::QueueFull(64)));
        assert_eq!(
            g.acquire(3 * SEC, 1000, 11),
            Err(GateError::TooHeavy {
                weight: 11,
                burst: 10
            })
        );
    }

    // Goal: a retry waits its equal-jitter delay, then goes through the windows; retries are
    // bounded.
    #[test]
    fn retries_wait_their_backoff_then_pass_the_windows() {
        let mut g = RestGate::new(config(&[(SEC, 100, 100)]), 0).unwrap();
        let mut rng = SplitMix64::new(7);
        let delay = g.retry(0, 5, 1, 1, &mut rng).unwrap();
        assert!((50_000_000..=100_000_000).contains(&delay), "{delay}");
        let mut got = Vec::new();
        g.poll(delay - 1, |d| got.push(d));
        assert!(got.is_empty(), "still in its backoff");
        g.poll(delay, |d| got.push(d));
        assert!(matches!(got[..], [Decision::Granted { token: 5, .. }]));
        assert_eq!(
            g.retry(0, 5, 1, 6, &mut rng),
            Err(GateError::RetriesSpent(5))
        );
        assert_eq!(g.stats().retries, 1);
    }

    proptest! {
        // Goal (issue 14): in any window of each configured length, the weight granted never
        // exceeds burst + limit, whatever arrives and whatever the venue answers; every grant
        // comes at or before its request's deadline; every request is decided exactly once
        // (granted, failed at its deadline, or refused at the door).
        #[test]
        fn windows_hold_and_deadlines_are_never_exceeded(
            windows in proptest::collection::vec((1_000_000u64..2_000_000_000, 1u32..40, 5u32..40), 1..3),
            steps in proptest::collection::vec((0u64..50_000_000, 1u32..5, 0u8..20), 1..300),
        ) {
            let mut c = config(&windows);
            c.acquire_timeout_ns = 100_000_000;
            c.throttle_pause_ns = 10_000_000;
            let mut g = RestGate::new(c, 0).unwrap();
            let mut now = 0;
            let mut deadlines = std::collections::HashMap::new();
            let mut granted: Vec<(u64, u32)> = Vec::new();
            let mut decided = std::collections::HashSet::new();
            let mut weights = std::collections::HashMap::new();
            for (token, (gap, weight, answer)) in steps.into_iter().enumerate() {
                let token = token as u64;
                now += gap;
                let weight = weight.min(g.smallest_burst);
                if g.acquire(now, token, weight).is_ok() {
                    deadlines.insert(token, now + 100_000_000);
                    weights.insert(token, weight);
                } else {
                    decided.insert(token);
                }
                if answer == 0 {
                    g.on_response(now, 429, None, &[]);
                }
                let mut out = Vec::new();
                g.poll(now, |d| out.push(d));
                for d in out {
                    match d {
                        Decision::Granted { token, .. } => {
                            prop_assert!(now <= deadlines[&token], "granted after its deadline");
                            granted.push((now, weights[&token]));
                            prop_assert!(decided.insert(token));
                        }
                        Decision::TimedOut { token } => {
                            prop_assert!(now > deadlines[&token]);
                            prop_assert!(decided.insert(token));
                        }
                    }
                }
            }
            for &(window_ns, limit, burst) in &windows {
                for (i, &(start, _)) in granted.iter().enumerate() {
                    let sum: u64 = granted[i..]
                        .iter()
                        .take_while(|(t, _)| *t < start + window_ns)
                        .map(|(_, w)| u64::from(*w))
                        .sum();
                    prop_assert!(sum <= u64::from(burst + limit), "{} in a window of {}", sum, window_ns);
                }
            }
            let undecided = deadlines.keys().filter(|t| !decided.contains(t)).count();
            prop_assert_eq!(undecided, g.waiting(), "a queued request is decided or still waiting");
        }
    }
}
