//! The same cancel storm through keel's priority dispatcher and through a FIFO dispatcher.
//!
//! Both sit behind the same two-window rate limiter (10,000 messages/s, bursts of 1,000; keel's
//! own limiter with the same settings) and the same instant venue (every request answered in
//! the pass it is sent), so the only difference is the order in which queued work leaves:
//! keel serves cancels from their own lane before any new order; the FIFO serves commands in
//! arrival order (new orders still time out after the same 50 ms acquire deadline, so its queue
//! is bounded). Load is open loop (`keel_bench::loadgen`): latency is from each command's
//! intended send time to its answer event, so a backlog is charged in full.
//!
//! Two storms, each after a calm phase (1,000 messages/s, half cancels):
//! - saturating: 12,000 messages/s, half cancels — the offered load exceeds the limit, so work
//!   queues, and the order of service decides cancel latency;
//! - the demo's: 5,000 messages/s, 97% cancels — under the limit, nothing queues.
//!
//! (A 97%-cancel storm *over* the limit cannot show an order-of-service effect: its cancels
//! alone then exceed what the venue accepts, and they queue in any design.)
//!
//! `cancel_storm [--smoke] [--calm-ms=1000] [--storm-ms=2000]`

use std::collections::VecDeque;

use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::dispatch::{strategy_channel, venue_channel, Dispatcher, DispatcherConfig};
use keel::guard::limiter::{LimiterConfig, RateLimiter, WindowLimit};
use keel::order::{
    Command, Event, EventKind, LinkMode, Outcome, OutcomeKind, RequestKind, VenueId,
};
use keel_bench::loadgen::{OpenLoop, StormMix};
use keel_bench::{arg_u64, flag, pin_or_warn};

const RATE: WindowLimit = WindowLimit {
    window_ns: 1_000_000_000,
    limit_weight: 10_000,
    burst_weight: 1_000,
};
const ACQUIRE_TIMEOUT_NS: u64 = 50_000_000;

fn limiter_config() -> LimiterConfig {
    LimiterConfig {
        windows: [Some(RATE), None, None, None],
        ..LimiterConfig::default()
    }
}

/// What the strategy side sees of either dispatcher.
trait System {
    fn name(&self) -> &'static str;
    fn submit(&mut self, now: u64, command: Command) -> bool;
    /// One pass: dispatch, the venue answers, events come back through `events`.
    fn pass(&mut self, now: u64, events: &mut Vec<Event>);
}

/// keel's dispatcher with an instant venue on its rings.
struct Keel {
    dispatcher: Dispatcher,
    strategy: keel::dispatch::StrategyHandle,
    venue: keel::dispatch::VenueHandle,
}

impl Keel {
    fn new(now: u64) -> Self {
        let (strategy, sport) = strategy_channel(65_536, 65_536);
        let (mut venue, vport) = venue_channel(16_384, 16_384);
        let mut config = DispatcherConfig {
            strategies: 1,
            venues: 1,
            symbols: 4,
            acquire_timeout_ns: ACQUIRE_TIMEOUT_NS,
            ..DispatcherConfig::default()
        };
        config.limiter = limiter_config();
        config.bulkhead.in_flight_per_symbol_max = 16_384;
        config.bulkhead.in_flight_per_venue_max = 65_536;
        config.risk.position_max = i64::MAX / 4;
        config.risk.order_notional_max = i64::MAX / 4;
        config.lane_new_per_symbol_max = 4_096;
        let dispatcher =
            Dispatcher::new(config, vec![sport], vec![vport], now).expect("bench config");
        let synced = Outcome {
            venue: VenueId(0),
            received_ns: now,
            seq: 0,
            kind: OutcomeKind::LinkState {
                mode: LinkMode::Trading,
            },
        };
        venue.outcomes.push(synced).expect("room");
        Self {
            dispatcher,
            strategy,
            venue,
        }
    }
}

impl System for Keel {
    fn name(&self) -> &'static str {
        "keel (priority lanes)"
    }

    fn submit(&mut self, _now: u64, command: Command) -> bool {
        self.strategy.commands.push(command).is_ok()
    }

    fn pass(&mut self, now: u64, events: &mut Vec<Event>) {
        self.dispatcher.poll(now);
        while let Ok(request) = self.venue.requests.pop() {
            let kind = match request.kind {
                RequestKind::New(o) => OutcomeKind::Accepted { id: o.id },
                RequestKind::Cancel { id } => OutcomeKind::Canceled { id },
                _ => continue,
            };
            let outcome = Outcome {
                venue: VenueId(0),
                received_ns: now,
                seq: 0,
                kind,
            };
            let _ = self.venue.outcomes.push(outcome);
        }
        self.dispatcher.poll(now);
        while let Ok(e) = self.strategy.events.pop() {
            events.push(e);
        }
    }
}

/// The baseline: one bounded queue served in arrival order behind the same limiter.
struct Fifo {
    queue: VecDeque<(Command, u64)>,
    capacity: usize,
    limiter: RateLimiter,
}

impl Fifo {
    fn new(now: u64) -> Self {
        Self {
            queue: VecDeque::with_capacity(8_192),
            capacity: 8_192,
            limiter: RateLimiter::new(limiter_config(), now).expect("bench config"),
        }
    }
}

impl System for Fifo {
    fn name(&self) -> &'static str {
        "FIFO dispatcher (baseline)"
    }

    fn submit(&mut self, now: u64, command: Command) -> bool {
        if self.queue.len() >= self.capacity {
            return false;
        }
        self.queue.push_back((command, now));
        true
    }

    fn pass(&mut self, now: u64, events: &mut Vec<Event>) {
        while let Some(&(command, enqueued)) = self.queue.front() {
            let (id, cancel) = match command {
                Command::New(o) => (o.id, false),
                Command::Cancel { id } => (id, true),
                _ => unreachable!("the storm sends new orders and cancels"),
            };
            if !cancel && now.saturating_sub(enqueued) > ACQUIRE_TIMEOUT_NS {
                self.queue.pop_front();
                events.push(Event {
                    id,
                    kind: EventKind::Throttled,
                    at_ns: now,
                });
                continue;
            }
            if self.limiter.try_acquire(now, 1, cancel).is_err() {
                break;
            }
            self.queue.pop_front();
            // The instant venue answers in the same pass.
            let kind = if cancel {
                EventKind::Canceled
            } else {
                EventKind::Accepted
            };
            events.push(Event {
                id,
                kind,
                at_ns: now,
            });
        }
    }
}

/// Latencies (ns) of one system in one phase.
struct Phase {
    new: Histogram<u64>,
    cancel: Histogram<u64>,
    refused: u64,
    throttled: u64,
}

impl Phase {
    fn new() -> Self {
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
        Self {
            new: h(),
            cancel: h(),
            refused: 0,
            throttled: 0,
        }
    }
}

/// Runs calm then storm through `system`; returns (calm, storm).
fn run(
    system: &mut dyn System,
    clock: &TscClock,
    calm: (u64, u64, u64),
    storm: (u64, u64, u64),
) -> [Phase; 2] {
    let mut phases = [Phase::new(), Phase::new()];
    // Per id sequence (index 0 unused): the new order's and its cancel's intended send time
    // and phase.
    let mut intended: Vec<(u64, u8)> = vec![(0, 0)];
    let mut cancel_intended: Vec<(u64, u8)> = vec![(0, 0)];
    let mut mix = StormMix::new(0);
    let mut events = Vec::with_capacity(65_536);
    for (p, &(rate, duration_ns, cancel_pct)) in [calm, storm].iter().enumerate() {
        mix.cancel_pct = cancel_pct;
        let mut gen = OpenLoop::new(clock.now_ns(), rate, duration_ns);
        let end = clock.now_ns() + duration_ns + 200_000_000;
        loop {
            let now = clock.now_ns();
            while let Some(at) = gen.next_due(now) {
                let command = mix.next_command();
                match command {
                    Command::Cancel { id } => {
                        cancel_intended[id.sequence() as usize] = (at, p as u8);
                    }
                    _ => {
                        intended.push((at, p as u8));
                        cancel_intended.push((0, 0));
                    }
                }
                if !system.submit(now, command) {
                    phases[p].refused += 1;
                }
            }
            events.clear();
            system.pass(clock.now_ns(), &mut events);
            let done_at = clock.now_ns();
            for e in &events {
                let s = e.id.sequence() as usize;
                match e.kind {
                    EventKind::Accepted => {
                        let (at, ph) = intended[s];
                        let _ = phases[usize::from(ph)]
                            .new
                            .record(done_at.saturating_sub(at).max(1));
                        mix.live.push(e.id);
                    }
                    EventKind::Canceled => {
                        let (at, ph) = cancel_intended[s];
                        let _ = phases[usize::from(ph)]
                            .cancel
                            .record(done_at.saturating_sub(at).max(1));
                    }
                    EventKind::Throttled => phases[p].throttled += 1,
                    _ => phases[p].refused += 1,
                }
            }
            if gen.done() && now > end {
                break;
            }
        }
    }
    phases
}

fn row(name: &str, h: &Histogram<u64>, baseline_p99: f64) {
    let us = |ns: u64| ns as f64 / 1_000.0;
    println!(
        "{name:<44} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>9.2}x {:>8}",
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.max()),
        us(h.value_at_quantile(0.99)) / baseline_p99,
        h.len()
    );
}

fn main() {
    pin_or_warn(1);
    let smoke = flag("smoke");
    let calm_ms = arg_u64("calm-ms", if smoke { 200 } else { 1_000 });
    let storm_ms = arg_u64("storm-ms", if smoke { 300 } else { 2_000 });
    let ms = 1_000_000;
    let clock = TscClock::new();
    let calm = (1_000, calm_ms * ms, 50);
    let storms = [
        (
            "saturating: 12,000 msg/s, 50% cancels",
            (12_000, storm_ms * ms, 50),
        ),
        (
            "demo's: 5,000 msg/s, 97% cancels, under the limit",
            (5_000, storm_ms * ms, 97),
        ),
    ];
    println!(
        "cancel storm: rate limit {}/s (bursts {}), instant venue, open-loop load; latency from \
         intended send time to the answer (µs)",
        RATE.limit_weight, RATE.burst_weight
    );
    let mut verdicts = Vec::new();
    for (label, storm) in storms {
        let mut keel = Keel::new(clock.now_ns());
        let k = run(&mut keel, &clock, calm, storm);
        let mut fifo = Fifo::new(clock.now_ns());
        let f = run(&mut fifo, &clock, calm, storm);
        println!("\nstorm {label}");
        println!(
            "{:<44} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
            "(µs)", "p50", "p99", "p99.9", "max", "p99/keel", "samples"
        );
        let base = k[1].cancel.value_at_quantile(0.99) as f64 / 1_000.0;
        for (sys, phases) in [(keel.name(), &k), (fifo.name(), &f)] {
            for (phase, ph) in ["calm", "storm"].iter().zip(phases.iter()) {
                row(&format!("{sys} cancel, {phase}"), &ph.cancel, base);
            }
            for (phase, ph) in ["calm", "storm"].iter().zip(phases.iter()) {
                row(&format!("{sys} new, {phase}"), &ph.new, base);
            }
            println!(
                "{:<44} throttled {} refused {}",
                format!("{sys}, storm"),
                phases[1].throttled,
                phases[1].refused
            );
        }
        let p99 = |h: &Histogram<u64>| h.value_at_quantile(0.99).max(1) as f64;
        let storm_over_calm = p99(&k[1].cancel) / p99(&k[0].cancel);
        let fifo_over_keel = p99(&f[1].cancel) / p99(&k[1].cancel);
        println!(
            "keel cancel p99 storm/calm {storm_over_calm:.2}x; FIFO/keel storm cancel p99 \
             {fifo_over_keel:.1}x; FIFO/keel p99.9 {:.1}x",
            f[1].cancel.value_at_quantile(0.999).max(1) as f64
                / k[1].cancel.value_at_quantile(0.999).max(1) as f64
        );
        assert!(
            !k[1].cancel.is_empty() && !f[1].cancel.is_empty(),
            "both systems canceled orders in the storm"
        );
        verdicts.push((label, storm_over_calm, fifo_over_keel));
    }
    println!();
    for (label, s, f) in verdicts {
        println!(
            "{label}: keel storm/calm cancel p99 {s:.2}x (target <= 3x), FIFO/keel {f:.1}x (target >= 10x when the storm saturates the limit)"
        );
    }
}
