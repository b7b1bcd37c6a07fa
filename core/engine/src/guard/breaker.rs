//! Circuit breaker per venue link: closed, open, half-open.
//!
//! Semantics follow the ones resilience4j made standard. In `Closed`, calls are recorded in a
//! time-based rolling window of `window_buckets` buckets covering `window_ns`. Once the window
//! holds at least `calls_min` calls and either the failure rate reaches
//! `failure_rate_threshold_pct` or the slow-call rate (calls answered after
//! `slow_call_duration_ns`) reaches `slow_call_rate_threshold_pct`, the breaker opens. `Open`
//! refuses new orders at once with the time left; after `open_duration_ns` (growing by
//! `open_duration_multiplier` on each consecutive trip, up to `open_duration_max_ns`) the next
//! request finds it `HalfOpen`, where `half_open_probes` real orders are let through. By default
//! (`ProbeJudge::AnyFailure`, the design's rule) the first probe that fails or is slow reopens
//! it at once, and it closes only when every probe came back good; `ProbeJudge::Rate` judges
//! the answered probes with the closed-state thresholds instead (see its docs for when that is
//! the better choice). If the probes are not all answered within `half_open_wait_max_ns`, it
//! reopens. Every transition clears the window.
//!
//! What is a failure is the caller's call (see `dispatch`): timeouts, venue/system rejects and
//! failed cancels. A cancel a user asked for is never a failure. Cancels always pass an open
//! breaker: the safe state of an unhealthy link is "no new risk, cancels allowed".

/// Breaker configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Length of the rolling window.
    pub window_ns: u64,
    /// Buckets in the window (its time resolution is `window_ns / window_buckets`).
    pub window_buckets: u32,
    /// Calls the window must hold before its rates are judged.
    pub calls_min: u32,
    /// Failure rate (%) at or above which the breaker opens.
    pub failure_rate_threshold_pct: u32,
    /// A call answered after this long is slow.
    pub slow_call_duration_ns: u64,
    /// Slow-call rate (%) at or above which the breaker opens.
    pub slow_call_rate_threshold_pct: u32,
    /// How long the breaker stays open after its first trip.
    pub open_duration_ns: u64,
    /// Factor applied to the open duration on each consecutive trip.
    pub open_duration_multiplier: u32,
    /// Longest open duration.
    pub open_duration_max_ns: u64,
    /// Real orders let through in half-open.
    pub half_open_probes: u32,
    /// Longest wait for the probes' answers before reopening.
    pub half_open_wait_max_ns: u64,
    /// How the half-open probes are judged.
    pub probe_judge: ProbeJudge,
}

/// How half-open probes decide between closing and reopening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProbeJudge {
    /// Any failed or slow probe reopens the breaker at once; it closes only when all
    /// `half_open_probes` came back good. The design's rule: a link that just failed must
    /// prove itself on every probe before it carries risk again.
    #[default]
    AnyFailure,
    /// The answered probes are judged like the closed window (failure and slow-call rates
    /// against their thresholds) once all are in. Better only with many probes (say 20 or
    /// more) on a venue whose healthy reject rate is not zero (venue/system rejects it sends
    /// now and then on a sound link): there, one stray reject would keep reopening the
    /// breaker, each time for longer. With the default 3 probes and a 50% threshold it lets a
    /// link that failed one probe in three close, which is why it is not the default.
    Rate,
}

impl ProbeJudge {
    /// The name in the configuration: `"any-failure"` or `"rate"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::AnyFailure => "any-failure",
            Self::Rate => "rate",
        }
    }

    /// The judge a configuration names, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::AnyFailure, Self::Rate]
            .into_iter()
            .find(|j| j.name() == name)
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        const S: u64 = 1_000_000_000;
        Self {
            window_ns: 60 * S,
            window_buckets: 60,
            calls_min: 20,
            failure_rate_threshold_pct: 50,
            slow_call_duration_ns: S / 10,
            slow_call_rate_threshold_pct: 80,
            open_duration_ns: 30 * S,
            open_duration_multiplier: 2,
            open_duration_max_ns: 300 * S,
            half_open_probes: 3,
            half_open_wait_max_ns: 10 * S,
            probe_judge: ProbeJudge::AnyFailure,
        }
    }
}

/// A configuration the breaker cannot honour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BreakerConfigError {
    /// A value out of its range.
    #[error("breaker: {name} = {value} out of range {range}")]
    OutOfRange {
        /// The key.
        name: &'static str,
        /// The value.
        value: u64,
        /// Allowed range.
        range: &'static str,
    },
}

/// The three states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls flow; outcomes are recorded.
    Closed,
    /// Calls are refused until `until_ns`.
    Open {
        /// When the breaker may admit probes.
        until_ns: u64,
    },
    /// A few probes are let through.
    HalfOpen {
        /// When half-open began.
        since_ns: u64,
        /// Probes let through so far.
        permitted: u32,
    },
}

/// How a call ended, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// Answered, after `latency_ns`.
    Success {
        /// Time from release to answer.
        latency_ns: u64,
    },
    /// Timed out, rejected for a venue/system reason, or a failed cancel.
    Failure,
}

/// Why the breaker refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// Nanoseconds until it is worth asking again.
    pub retry_after_ns: u64,
}

/// Counters for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerStats {
    /// Closed or half-open → open.
    pub opened: u64,
    /// Open → half-open.
    pub half_opened: u64,
    /// Half-open → closed.
    pub closed: u64,
    /// Calls refused while open or out of probes.
    pub refused: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    calls: u32,
    failures: u32,
    slow: u32,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.calls += other.calls;
        self.failures += other.failures;
        self.slow += other.slow;
    }

    fn sub(&mut self, other: Tally) {
        self.calls -= other.calls;
        self.failures -= other.failures;
        self.slow -= other.slow;
    }
}

/// A circuit breaker for one venue link.
#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    bucket_ns: u64,
    state: BreakerState,
    buckets: Vec<Tally>,
    /// Epoch (time / bucket_ns) of the newest bucket; older epochs map cyclically.
    epoch: u64,
    total: Tally,
    consecutive_trips: u32,
    stats: BreakerStats,
}

impl Breaker {
    /// Validates `config` and starts closed with an empty window.
    pub fn new(config: BreakerConfig) -> Result<Self, BreakerConfigError> {
        validate(&config)?;
        Ok(Self {
            bucket_ns: config.window_ns / u64::from(config.window_buckets),
            state: BreakerState::Closed,
            buckets: vec![Tally::default(); config.window_buckets as usize],
            epoch: 0,
            total: Tally::default(),
            consecutive_trips: 0,
            stats: BreakerStats::default(),
            config,
        })
    }

    /// Current state, after applying any timed transition due at `now_ns`.
    pub fn state(&mut self, now_ns: u64) -> BreakerState {
        self.tick(now_ns);
        self.state
    }

    /// Its state as of its last transition (no timed transition applied: for reports).
    pub fn peek_state(&self) -> BreakerState {
        self.state
    }

    /// Failed calls in the current window, per thousand calls (0 with no calls).
    pub fn failure_permille(&self) -> u64 {
        if self.total.calls == 0 {
            0
        } else {
            u64::from(self.total.failures) * 1_000 / u64::from(self.total.calls)
        }
    }

    /// Whether it is open as of its last transition (no timed transition applied: a read
    /// for reports, not for admission).
    pub fn is_open(&self) -> bool {
        matches!(self.state, BreakerState::Open { .. })
    }

    /// Counters.
    pub fn stats(&self) -> BreakerStats {
        self.stats
    }

    /// Admission check for a new order: refuses at once while open, takes no probe slot.
    #[inline]
    pub fn check(&mut self, now_ns: u64) -> Result<(), Refused> {
        self.tick(now_ns);
        match self.state {
            BreakerState::Closed => Ok(()),
            BreakerState::HalfOpen { permitted, .. }
                if permitted < self.config.half_open_probes =>
            {
                Ok(())
            }
            _ => Err(self.refuse(now_ns)),
        }
    }

    /// Permission to release one call now; in half-open this takes a probe slot.
    #[inline]
    pub fn acquire(&mut self, now_ns: u64) -> Result<(), Refused> {
        self.tick(now_ns);
        match &mut self.state {
            BreakerState::Closed => Ok(()),
            BreakerState::HalfOpen { permitted, .. }
                if *permitted < self.config.half_open_probes =>
            {
                *permitted += 1;
                Ok(())
            }
            _ => Err(self.refuse(now_ns)),
        }
    }

    /// Records how a call ended. Outcomes arriving while open are ignored (those calls were
    /// judged before the trip; the window restarts clean).
    pub fn record(&mut self, now_ns: u64, outcome: CallOutcome) {
        self.tick(now_ns);
        if let BreakerState::Open { .. } = self.state {
            return;
        }
        self.advance_window(now_ns);
        let tally = match outcome {
            CallOutcome::Failure => Tally {
                calls: 1,
                failures: 1,
                slow: 0,
            },
            CallOutcome::Success { latency_ns } => {
                let slow = u32::from(latency_ns >= self.config.slow_call_duration_ns);
                Tally {
                    calls: 1,
                    failures: 0,
                    slow,
                }
            }
        };
        let at = (self.epoch % self.buckets.len() as u64) as usize;
        self.buckets[at].add(tally);
        self.total.add(tally);
        self.judge(now_ns);
    }

    fn judge(&mut self, now_ns: u64) {
        match self.state {
            BreakerState::Closed => {
                if self.total.calls >= self.config.calls_min && self.over_threshold() {
                    self.to_open(now_ns);
                }
            }
            BreakerState::HalfOpen { .. } => match self.config.probe_judge {
                ProbeJudge::AnyFailure if self.total.failures + self.total.slow > 0 => {
                    self.to_open(now_ns)
                }
                _ if self.total.calls < self.config.half_open_probes => {}
                ProbeJudge::Rate if self.over_threshold() => self.to_open(now_ns),
                _ => self.to_closed(),
            },
            BreakerState::Open { .. } => unreachable!("open breakers record nothing"),
        }
    }

    fn over_threshold(&self) -> bool {
        let calls = u64::from(self.total.calls);
        let failures = u64::from(self.total.failures) * 100;
        let slow = u64::from(self.total.slow) * 100;
        failures >= u64::from(self.config.failure_rate_threshold_pct) * calls
            || slow >= u64::from(self.config.slow_call_rate_threshold_pct) * calls
    }

    /// Applies transitions that are due by time alone.
    #[inline]
    fn tick(&mut self, now_ns: u64) {
        // The common case, closed, costs one compare and no call.
        if matches!(self.state, BreakerState::Closed) {
            return;
        }
        self.tick_slow(now_ns);
    }

    #[cold]
    fn tick_slow(&mut self, now_ns: u64) {
        match self.state {
            BreakerState::Open { until_ns } if now_ns >= until_ns => self.to_half_open(now_ns),
            BreakerState::HalfOpen { since_ns, .. }
                if now_ns.saturating_sub(since_ns) >= self.config.half_open_wait_max_ns =>
            {
                self.to_open(now_ns)
            }
            _ => {}
        }
    }

    fn refuse(&mut self, now_ns: u64) -> Refused {
        self.stats.refused += 1;
        let retry_after_ns = match self.state {
            BreakerState::Open { until_ns } => until_ns - now_ns,
            BreakerState::HalfOpen { since_ns, .. } => {
                (since_ns + self.config.half_open_wait_max_ns).saturating_sub(now_ns)
            }
            BreakerState::Closed => 0,
        };
        Refused { retry_after_ns }
    }

    fn to_open(&mut self, now_ns: u64) {
        assert!(
            !matches!(self.state, BreakerState::Open { .. }),
            "open → open"
        );
        let factor =
            u64::from(self.config.open_duration_multiplier).saturating_pow(self.consecutive_trips);
        let duration = self.config.open_duration_ns.saturating_mul(factor);
        let until_ns = now_ns + duration.min(self.config.open_duration_max_ns);
        self.consecutive_trips += 1;
        self.stats.opened += 1;
        self.state = BreakerState::Open { until_ns };
        self.clear_window();
    }

    fn to_half_open(&mut self, now_ns: u64) {
        assert!(
            matches!(self.state, BreakerState::Open { .. }),
            "half-open only from open"
        );
        self.stats.half_opened += 1;
        self.state = BreakerState::HalfOpen {
            since_ns: now_ns,
            permitted: 0,
        };
        self.clear_window();
    }

    fn to_closed(&mut self) {
        assert!(
            matches!(self.state, BreakerState::HalfOpen { .. }),
            "closed only from half-open"
        );
        self.consecutive_trips = 0;
        self.stats.closed += 1;
        self.state = BreakerState::Closed;
        self.clear_window();
    }

    /// Operator drill: trips the breaker now (counted as a trip) unless it is already open.
    pub fn force_open(&mut self, now_ns: u64) {
        self.tick(now_ns);
        if !matches!(self.state, BreakerState::Open { .. }) {
            self.to_open(now_ns);
        }
    }

    /// Operator: closes the breaker now with a clean window and no trip history (counted as
    /// a close unless it was closed already).
    pub fn force_close(&mut self) {
        if self.state != BreakerState::Closed {
            self.stats.closed += 1;
        }
        self.consecutive_trips = 0;
        self.state = BreakerState::Closed;
        self.clear_window();
    }

    fn clear_window(&mut self) {
        self.buckets.iter_mut().for_each(|b| *b = Tally::default());
        self.total = Tally::default();
    }

    /// Moves the window so `now_ns` falls in its newest bucket, dropping expired buckets.
    fn advance_window(&mut self, now_ns: u64) {
        let epoch = now_ns / self.bucket_ns;
        if epoch <= self.epoch {
            return;
        }
        let len = self.buckets.len() as u64;
        let expired = (epoch - self.epoch).min(len);
        for step in 1..=expired {
            let at = ((self.epoch + step) % len) as usize;
            let old = std::mem::take(&mut self.buckets[at]);
            self.total.sub(old);
        }
        self.epoch = epoch;
    }
}

fn validate(c: &BreakerConfig) -> Result<(), BreakerConfigError> {
    let checks: [(&'static str, u64, bool, &'static str); 8] = [
        (
            "open_duration_multiplier",
            c.open_duration_multiplier.into(),
            c.open_duration_multiplier >= 1,
            ">= 1",
        ),
        (
            "window_buckets",
            c.window_buckets.into(),
            (1..=3600).contains(&c.window_buckets),
            "1..=3600",
        ),
        (
            "window_ns",
            c.window_ns,
            c.window_ns >= u64::from(c.window_buckets),
            ">= window_buckets",
        ),
        ("calls_min", c.calls_min.into(), c.calls_min >= 1, ">= 1"),
        (
            "failure_rate_threshold_pct",
            c.failure_rate_threshold_pct.into(),
            (1..=100).contains(&c.failure_rate_threshold_pct),
            "1..=100",
        ),
        (
            "slow_call_rate_threshold_pct",
            c.slow_call_rate_threshold_pct.into(),
            (1..=100).contains(&c.slow_call_rate_threshold_pct),
            "1..=100",
        ),
        (
            "half_open_probes",
            c.half_open_probes.into(),
            c.half_open_probes >= 1,
            ">= 1",
        ),
        (
            "open_duration_max_ns",
            c.open_duration_max_ns,
            c.open_duration_max_ns >= c.open_duration_ns && c.open_duration_ns > 0,
            ">= open_duration_ns > 0",
        ),
    ];
    for (name, value, ok, range) in checks {
        if !ok {
            return Err(BreakerConfigError::OutOfRange { name, value, range });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// Reference model: a plain log of calls (no buckets, no running totals), judged from
    /// scratch after every call. Its window is the same bucket-aligned span as the breaker's.
    struct Model {
        cfg: BreakerConfig,
        bucket_ns: u64,
        log: VecDeque<(u64, CallOutcome)>,
    }

    impl Model {
        fn over(&self, now: u64) -> (u32, bool) {
            let newest = now / self.bucket_ns;
            let in_window: Vec<_> = self
                .log
                .iter()
                .filter(|(t, _)| t / self.bucket_ns + u64::from(self.cfg.window_buckets) > newest)
                .collect();
            let calls = in_window.len() as u64;
            let failures = in_window
                .iter()
                .filter(|(_, o)| *o == CallOutcome::Failure)
                .count() as u64;
            let slow = in_window
                .iter()
                .filter(|(_, o)| matches!(o, CallOutcome::Success { latency_ns } if *latency_ns >= self.cfg.slow_call_duration_ns))
                .count() as u64;
            let over = failures * 100 >= u64::from(self.cfg.failure_rate_threshold_pct) * calls
                || slow * 100 >= u64::from(self.cfg.slow_call_rate_threshold_pct) * calls;
            (calls as u32, over)
        }

        /// Half-open: what the probes recorded so far decide (`Some(true)`: reopen,
        /// `Some(false)`: close, `None`: wait for more).
        fn probes(&self, now: u64) -> Option<bool> {
            let (calls, over) = self.over(now);
            let bad = self.log.iter().any(|(_, o)| match o {
                CallOutcome::Failure => true,
                CallOutcome::Success { latency_ns } => {
                    *latency_ns >= self.cfg.slow_call_duration_ns
                }
            });
            match self.cfg.probe_judge {
                ProbeJudge::AnyFailure if bad => Some(true),
                _ if calls < self.cfg.half_open_probes => None,
                ProbeJudge::AnyFailure => Some(false),
                ProbeJudge::Rate => Some(over),
            }
        }
    }

    fn small_config() -> BreakerConfig {
        BreakerConfig {
            window_ns: 10_000,
            window_buckets: 10,
            calls_min: 5,
            failure_rate_threshold_pct: 50,
            slow_call_duration_ns: 800,
            slow_call_rate_threshold_pct: 80,
            open_duration_ns: 5_000,
            open_duration_multiplier: 2,
            open_duration_max_ns: 15_000,
            half_open_probes: 3,
            half_open_wait_max_ns: 4_000,
            probe_judge: ProbeJudge::AnyFailure,
        }
    }

    fn outcome_strategy() -> impl Strategy<Value = CallOutcome> {
        prop_oneof![
            Just(CallOutcome::Failure),
            (0u64..1_000).prop_map(|latency_ns| CallOutcome::Success { latency_ns }),
        ]
    }

    proptest! {
        // Goal: in Closed, the breaker opens exactly when the window holds at least calls_min
        // calls and a threshold is met, and the window clears on every transition; in
        // HalfOpen, the probes decide. Method: random call sequences against the log model.
        #[test]
        fn matches_reference_model(
            steps in proptest::collection::vec((0u64..1_500, outcome_strategy()), 1..400),
            by_rate: bool,
        ) {
            let judge = if by_rate { ProbeJudge::Rate } else { ProbeJudge::AnyFailure };
            let cfg = BreakerConfig { probe_judge: judge, ..small_config() };
            let mut breaker = Breaker::new(cfg).unwrap();
            let mut model = Model { cfg, bucket_ns: cfg.window_ns / u64::from(cfg.window_buckets), log: VecDeque::new() };
            let mut now = 0;
            let mut last = BreakerState::Closed;
            for (gap, outcome) in steps {
                now += gap;
                let before = breaker.state(now);
                if std::mem::discriminant(&before) != std::mem::discriminant(&last) {
                    model.log.clear(); // a timed transition (open ↔ half-open) cleared it
                }
                last = before;
                if matches!(before, BreakerState::HalfOpen { .. }) && breaker.acquire(now).is_err() {
                    continue; // out of probes: nothing is sent, nothing recorded
                }
                if let BreakerState::Open { until_ns } = before {
                    prop_assert!(now < until_ns);
                    let refused = breaker.check(now).unwrap_err();
                    prop_assert_eq!(refused.retry_after_ns, until_ns - now);
                    continue;
                }
                model.log.push_back((now, outcome));
                breaker.record(now, outcome);
                let after = breaker.state(now);
                let (calls, over) = model.over(now);
                let verdict = model.probes(now);
                let expect_open = match before {
                    BreakerState::Closed => calls >= cfg.calls_min && over,
                    BreakerState::HalfOpen { .. } => verdict == Some(true),
                    BreakerState::Open { .. } => unreachable!(),
                };
                let expect_closed = matches!(before, BreakerState::HalfOpen { .. })
                    && verdict == Some(false);
                prop_assert_eq!(matches!(after, BreakerState::Open { .. }), expect_open, "{:?} -> {:?} calls {}", before, after, calls);
                if expect_open || expect_closed {
                    model.log.clear(); // every transition clears the window
                }
                if expect_closed {
                    prop_assert_eq!(after, BreakerState::Closed);
                }
                last = after;
            }
        }
    }

    // Goal: the full cycle with growing open durations and the half-open wait limit.
    #[test]
    fn open_half_open_close_cycle() {
        let cfg = small_config();
        let mut b = Breaker::new(cfg).unwrap();
        for t in 0..5 {
            b.record(t, CallOutcome::Failure);
        }
        assert_eq!(
            b.state(5),
            BreakerState::Open {
                until_ns: 4 + 5_000
            }
        );
        assert_eq!(
            b.check(1_004),
            Err(Refused {
                retry_after_ns: 4_000
            })
        );
        // Half-open after the open duration; three probes, then refusal.
        assert!(b.check(5_004).is_ok());
        for _ in 0..3 {
            assert!(b.acquire(5_004).is_ok());
        }
        assert!(b.acquire(5_004).is_err());
        // Probes not answered within the half-open wait: reopen, for twice as long.
        assert_eq!(
            b.state(9_004),
            BreakerState::Open {
                until_ns: 9_004 + 10_000
            }
        );
        // Next half-open: probes succeed, breaker closes and the trip count resets.
        assert!(b.acquire(19_004).is_ok());
        for _ in 0..3 {
            b.record(19_100, CallOutcome::Success { latency_ns: 10 });
        }
        assert_eq!(b.state(19_100), BreakerState::Closed);
        let stats = b.stats();
        assert_eq!((stats.opened, stats.half_opened, stats.closed), (2, 2, 1));
        // Trip again: duration back to the base.
        for t in 0..5 {
            b.record(20_000 + t, CallOutcome::Failure);
        }
        assert_eq!(
            b.state(20_004),
            BreakerState::Open {
                until_ns: 20_004 + 5_000
            }
        );
    }

    // Goal (issue 23, point 9): by default one failed probe reopens the breaker at once, even
    // with the other probes still out and a rate below the threshold; one slow probe too. With
    // `ProbeJudge::Rate` the same one-in-three failure closes it (33% < 50%).
    #[test]
    fn any_failed_probe_reopens_unless_judged_by_rate() {
        let half_open = |judge| {
            let mut b = Breaker::new(BreakerConfig {
                probe_judge: judge,
                ..small_config()
            })
            .unwrap();
            for t in 0..5 {
                b.record(t, CallOutcome::Failure);
            }
            for _ in 0..3 {
                assert!(b.acquire(5_004).is_ok());
            }
            b
        };
        let good = CallOutcome::Success { latency_ns: 10 };
        for first in [
            CallOutcome::Failure,
            CallOutcome::Success { latency_ns: 900 },
        ] {
            let mut b = half_open(ProbeJudge::AnyFailure);
            b.record(5_010, good);
            b.record(5_020, first);
            assert_eq!(
                b.state(5_020),
                BreakerState::Open {
                    until_ns: 5_020 + 10_000
                },
                "{first:?}"
            );
            // The third probe's answer, arriving while open, changes nothing.
            b.record(5_030, good);
            assert_eq!(b.stats().closed, 0);
        }
        let mut b = half_open(ProbeJudge::Rate);
        b.record(5_010, good);
        b.record(5_020, CallOutcome::Failure);
        assert!(matches!(b.state(5_020), BreakerState::HalfOpen { .. }));
        b.record(5_030, good);
        assert_eq!(b.state(5_030), BreakerState::Closed);
        // Names as the configuration spells them, and nothing else.
        for j in [ProbeJudge::AnyFailure, ProbeJudge::Rate] {
            assert_eq!(ProbeJudge::from_name(j.name()), Some(j));
        }
        assert_eq!(ProbeJudge::from_name("Rate"), None);
        assert_eq!(ProbeJudge::from_name(""), None);
    }

    // Goal: fewer than calls_min calls never open it, whatever they are; old calls expire.
    #[test]
    fn minimum_calls_and_expiry() {
        let cfg = small_config();
        let mut b = Breaker::new(cfg).unwrap();
        for t in 0..4 {
            b.record(t, CallOutcome::Failure);
        }
        assert_eq!(b.state(4), BreakerState::Closed);
        // The four failures leave the window; one more failure is then 1 call, not 5.
        b.record(20_000, CallOutcome::Failure);
        assert_eq!(b.state(20_000), BreakerState::Closed);
    }

    // Goal: slow calls alone can open the breaker.
    #[test]
    fn slow_calls_open_it() {
        let mut b = Breaker::new(small_config()).unwrap();
        for t in 0..5 {
            b.record(t, CallOutcome::Success { latency_ns: 900 });
        }
        assert!(matches!(b.state(5), BreakerState::Open { .. }));
    }

    #[test]
    fn bad_config_names_the_key() {
        let cfg = BreakerConfig {
            failure_rate_threshold_pct: 0,
            ..BreakerConfig::default()
        };
        assert_eq!(
            Breaker::new(cfg).unwrap_err(),
            BreakerConfigError::OutOfRange {
                name: "failure_rate_threshold_pct",
                value: 0,
                range: "1..=100"
            }
        );
    }
}
