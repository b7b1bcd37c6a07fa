//! The adaptive control plane (docs/observability.md, "Adaptive control"): a controller on the
//! side thread that reads the counters file and adjusts the engine through the control ring
//! ([`crate::engine::control`]), never touching a loop's memory.
//!
//! Per venue it keeps a cap on new orders and replaces, in ‰ of the limiter's first window,
//! and decides once per `interval_ns` (additive increase, multiplicative decrease):
//!
//! | tick                                   | cap                                              |
//! |----------------------------------------|--------------------------------------------------|
//! | bad (a venue throttle reject, a cancel refused on an open order, or the new-order ack p99 above `ack_p99_ns`) and not held | `max(rate_min, min(cap, sent) × decrease)`; held for `hold_ns` |
//! | good, not held, cap below 1000         | `min(1000, cap + increase)`                      |
//! | otherwise                              | unchanged                                        |
//!
//! `sent` is the new-order rate the venue actually got over the tick (in the same ‰): cutting
//! from what was sent, not from a cap far above it, reaches the venue's capacity in a few
//! ticks. While any venue's cap is at or below `shed_below_permille`, every symbol not in
//! `core_symbols` is shed; the shed is lifted once every cap is above twice that.
//!
//! The controller is level-based: each tick it compares what it wants with what the loop
//! published (`keel_control_new_rate_permille`, `keel_symbol_control_shed`) and sends what
//! differs, so a full ring or a restart of the loop's state heals on the next tick. Every
//! change is logged (`keel::control`), counted (`keel_controller_*` in `/metrics`) and shown on
//! the live page. Switched off (`[control] enabled = false`, or `keel ctl control off`), it
//! lifts every cap and shed it set and does nothing more.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::control::{ControlCommand, ControlSender};
use crate::metrics::engine::label;
use crate::metrics::histogram::quantile;
use crate::metrics::{Snapshot, Value};
use crate::order::{SymbolId, VenueId};

const PERMILLE: u32 = 1000;

/// `[control]` (docs/config.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    /// Run the controller at all.
    pub enabled: bool,
    /// How often it decides.
    pub interval_ns: u64,
    /// Lowest new-order cap, ‰ of the limiter's first window.
    pub rate_min_permille: u32,
    /// A bad tick multiplies the cap by this (‰).
    pub decrease_permille: u32,
    /// A good tick adds this to the cap (‰).
    pub increase_permille: u32,
    /// After a decrease, no other change for this long (its effect must show first).
    pub hold_ns: u64,
    /// A tick whose new-order ack p99 is above this is bad (0: latency is not a signal).
    pub ack_p99_ns: u64,
    /// Answers a tick needs before its ack p99 counts.
    pub ack_samples_min: u64,
    /// Symbols never shed; the others are shed while a cap is at or below
    /// `shed_below_permille` (empty: shed nothing).
    pub core_symbols: Vec<String>,
    /// The cap at or below which non-core symbols are shed.
    pub shed_below_permille: u32,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            interval_ns: 250_000_000,
            rate_min_permille: 20,
            decrease_permille: 500,
            increase_permille: 20,
            hold_ns: 1_000_000_000,
            ack_p99_ns: 0,
            ack_samples_min: 20,
            core_symbols: Vec::new(),
            shed_below_permille: 100,
        }
    }
}

/// A `[control]` value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[control] {key} = {value}: allowed {allowed}")]
pub struct ControlConfigError {
    /// The key.
    pub key: &'static str,
    /// The value.
    pub value: u64,
    /// What is allowed.
    pub allowed: &'static str,
}

impl ControlConfig {
    /// Checks every value against its range.
    pub fn validate(&self) -> Result<(), ControlConfigError> {
        let checks: [(&'static str, u64, bool, &'static str); 6] = [
            (
                "interval_ns",
                self.interval_ns,
                (10_000_000..=60_000_000_000).contains(&self.interval_ns),
                "10ms..=60s",
            ),
            (
                "rate_min_permille",
                self.rate_min_permille.into(),
                (1..=1000).contains(&self.rate_min_permille),
                "1..=1000",
            ),
            (
                "decrease_permille",
                self.decrease_permille.into(),
                (1..=999).contains(&self.decrease_permille),
                "1..=999",
            ),
            (
                "increase_permille",
                self.increase_permille.into(),
                (1..=1000).contains(&self.increase_permille),
                "1..=1000",
            ),
            (
                "hold_ns",
                self.hold_ns,
                self.hold_ns <= 3_600_000_000_000,
                "0..=1h",
            ),
            (
                "shed_below_permille",
                self.shed_below_permille.into(),
                self.shed_below_permille <= 500,
                "0..=500 (the shed lifts above twice it)",
            ),
        ];
        for (key, value, ok, allowed) in checks {
            if !ok {
                return Err(ControlConfigError {
                    key,
                    value,
                    allowed,
                });
            }
        }
        Ok(())
    }
}

/// What the controller counted (in `/metrics` as `keel_controller_*`).
#[derive(Debug, Default)]
pub struct ControllerCounters {
    /// Ticks decided.
    pub ticks: AtomicU64,
    /// Caps lowered.
    pub decreases: AtomicU64,
    /// Caps raised.
    pub increases: AtomicU64,
    /// Symbols shed, and shed lifted.
    pub sheds: AtomicU64,
    /// Sheds lifted.
    pub unsheds: AtomicU64,
    /// Commands sent to the loop.
    pub commands: AtomicU64,
    /// Commands refused because the control ring was full (sent again next tick).
    pub ring_full: AtomicU64,
}

/// One venue as the controller follows it.
#[derive(Debug, Clone)]
struct VenueControl {
    name: String,
    labels: String,
    cap: u32,
    held_until_ns: u64,
    last_throttle: Option<u64>,
    last_weight: Option<u64>,
    last_ack: Option<Vec<u64>>,
    /// Why the cap last changed, for the live page.
    last_change: &'static str,
}

/// One change the controller made (for the live page and the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjustment {
    /// The venue, or the symbol shed.
    pub target: String,
    /// What changed (`cap 1000‰ → 500‰: throttle rejects 12`, `shed on`, …).
    pub what: String,
}

/// The controller.
#[derive(Debug)]
pub struct Controller {
    config: ControlConfig,
    venues: Vec<VenueControl>,
    /// Per symbol (as the counters file lists them): name, core, shed wanted.
    symbols: Vec<(String, bool)>,
    shed: bool,
    last_tick_ns: Option<u64>,
    off: Arc<AtomicBool>,
    counters: Arc<ControllerCounters>,
    recent: Vec<Adjustment>,
}

/// Adjustments the live page lists.
const RECENT_MAX: usize = 16;

impl Controller {
    /// A controller for the venues and symbols the counters file lists.
    pub fn new(config: ControlConfig, snap: &Snapshot) -> Self {
        let mut venues = Vec::new();
        let mut symbols = Vec::new();
        for (d, _) in &snap.metrics {
            if d.name == "keel_control_new_rate_permille" {
                let name = crate::metrics::engine::label_value(&d.labels, "venue")
                    .unwrap_or("")
                    .to_string();
                venues.push(VenueControl {
                    name,
                    labels: d.labels.clone(),
                    cap: PERMILLE,
                    held_until_ns: 0,
                    last_throttle: None,
                    last_weight: None,
                    last_ack: None,
                    last_change: "",
                });
            }
            if d.name == "keel_symbol_control_shed" {
                let name = crate::metrics::engine::label_value(&d.labels, "symbol")
                    .unwrap_or("")
                    .to_string();
                let core = config.core_symbols.contains(&name);
                symbols.push((name, core));
            }
        }
        Self {
            config,
            venues,
            symbols,
            shed: false,
            last_tick_ns: None,
            off: Arc::new(AtomicBool::new(false)),
            counters: Arc::default(),
            recent: Vec::new(),
        }
    }

    /// Its counters.
    pub fn counters(&self) -> Arc<ControllerCounters> {
        Arc::clone(&self.counters)
    }

    /// The switch: store true to turn the controller off at run time (it lifts its caps).
    pub fn off_switch(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.off)
    }

    /// Whether it is on.
    pub fn is_on(&self) -> bool {
        self.config.enabled && !self.off.load(Ordering::Acquire)
    }

    /// The recent adjustments, newest last.
    pub fn recent(&self) -> &[Adjustment] {
        &self.recent
    }

    /// Per venue: name, the cap it wants (‰), why it last changed.
    pub fn venues(&self) -> impl Iterator<Item = (&str, u32, &'static str)> {
        self.venues
            .iter()
            .map(|v| (v.name.as_str(), v.cap, v.last_change))
    }

    /// Whether it sheds the non-core symbols now.
    pub fn shedding(&self) -> bool {
        self.shed
    }

    /// Whether a tick is due at `now_ns` (the caller reads the counters file only then).
    pub fn due(&self, now_ns: u64) -> bool {
        self.config.enabled
            && self
                .last_tick_ns
                .is_none_or(|t| now_ns.saturating_sub(t) >= self.config.interval_ns)
    }

    /// Decides, if a tick is due, and sends what the loop has not applied yet.
    pub fn tick(&mut self, now_ns: u64, snap: &Snapshot, ring: &mut ControlSender) {
        if !self.due(now_ns) {
            return;
        }
        let elapsed_ns = self.last_tick_ns.map(|t| now_ns.saturating_sub(t));
        self.last_tick_ns = Some(now_ns);
        self.counters.ticks.fetch_add(1, Ordering::Relaxed);
        if self.off.load(Ordering::Acquire) {
            self.lift_all(snap, ring);
            return;
        }
        for i in 0..self.venues.len() {
            self.decide(i, now_ns, elapsed_ns, snap);
        }
        let low = self.config.shed_below_permille;
        let any_low = self.venues.iter().any(|v| v.cap <= low);
        let all_high = self.venues.iter().all(|v| v.cap > low.saturating_mul(2));
        let has_core = self.symbols.iter().any(|(_, core)| *core);
        if has_core && low > 0 && !self.shed && any_low {
            self.shed = true;
            self.counters.sheds.fetch_add(1, Ordering::Relaxed);
            self.note(
                "symbols",
                "shed the non-core symbols: a new-order cap is low".into(),
            );
        } else if self.shed && all_high {
            self.shed = false;
            self.counters.unsheds.fetch_add(1, Ordering::Relaxed);
            tracing::info!(target: "keel::control", "non-core symbols no longer shed: every cap is back up");
            self.note("symbols", "lifted the shed: every cap is back up".into());
        }
        self.apply(snap, ring);
    }

    fn decide(&mut self, i: usize, now_ns: u64, elapsed_ns: Option<u64>, snap: &Snapshot) {
        let c = &self.config;
        let v = &mut self.venues[i];
        // Refusals: new orders throttled, and cancels refused on orders still open (a venue
        // over its own limit refuses those too).
        let throttles = snap.scalar("keel_venue_throttle_rejects_total", &v.labels)
            + snap.scalar("keel_venue_cancel_refused_total", &v.labels);
        let weight = snap.scalar("keel_limiter_new_weight_total", &v.labels);
        let per_second = snap.scalar("keel_limiter_weight_per_second", &v.labels);
        let ack = match snap.get("keel_new_order_ack_seconds", &v.labels) {
            Some(Value::Histogram { counts, .. }) => Some(counts.clone()),
            _ => None,
        };
        let new_throttles = v.last_throttle.map_or(0, |t| throttles.saturating_sub(t));
        let sent_weight = v.last_weight.map(|w| weight.saturating_sub(w));
        let ack_p99 = match (&ack, &v.last_ack) {
            (Some(now), Some(then)) => {
                let window: Vec<u64> = now
                    .iter()
                    .zip(then)
                    .map(|(a, b)| a.saturating_sub(*b))
                    .collect();
                let samples: u64 = window.iter().sum();
                (samples >= c.ack_samples_min).then(|| quantile(&window, 0.99))
            }
            _ => None,
        };
        v.last_throttle = Some(throttles);
        v.last_weight = Some(weight);
        v.last_ack = ack;
        let Some(elapsed_ns) = elapsed_ns.filter(|e| *e > 0) else {
            return;
        };
        // What the venue got over the tick, in ‰ of the first window's rate.
        let sent_permille = match (sent_weight, per_second) {
            (Some(w), 1..) => {
                let p = u128::from(w) * 1_000_000_000 * u128::from(PERMILLE)
                    / (u128::from(per_second) * u128::from(elapsed_ns));
                p.min(u128::from(PERMILLE)) as u32
            }
            _ => v.cap,
        };
        let slow = c.ack_p99_ns > 0 && ack_p99.is_some_and(|p| p > c.ack_p99_ns);
        let bad = new_throttles > 0 || slow;
        let held = now_ns < v.held_until_ns;
        let before = v.cap;
        let why;
        if bad && !held {
            let base = v.cap.min(sent_permille.max(c.rate_min_permille));
            let cut = (u64::from(base) * u64::from(c.decrease_permille) / 1000) as u32;
            v.cap = cut.max(c.rate_min_permille);
            v.held_until_ns = now_ns.saturating_add(c.hold_ns);
            why = if new_throttles > 0 {
                "venue refusals"
            } else {
                "ack p99 over target"
            };
        } else if !bad && !held && v.cap < PERMILLE {
            v.cap = (v.cap + c.increase_permille).min(PERMILLE);
            why = "healthy";
        } else {
            return;
        }
        if v.cap == before {
            return;
        }
        v.last_change = why;
        let (name, cap) = (v.name.clone(), v.cap);
        if cap < before {
            self.counters.decreases.fetch_add(1, Ordering::Relaxed);
            let detail = if new_throttles > 0 {
                format!("{new_throttles} venue refusals (throttled new orders, cancels refused)")
            } else {
                format!("ack p99 {} µs", ack_p99.unwrap_or(0) / 1_000)
            };
            tracing::warn!(
                target: "keel::control",
                venue = %name,
                from_permille = before,
                to_permille = cap,
                sent_permille,
                "new-order cap lowered: {detail}"
            );
            self.note(&name, format!("cap {before}‰ → {cap}‰: {detail}"));
        } else {
            self.counters.increases.fetch_add(1, Ordering::Relaxed);
            if cap == PERMILLE || before % 100 > cap % 100 {
                // Raises come every tick; the log says each tenth crossed and the full rate.
                tracing::info!(
                    target: "keel::control",
                    venue = %name,
                    from_permille = before,
                    to_permille = cap,
                    "new-order cap raised: healthy"
                );
            }
            self.note(&name, format!("cap {before}‰ → {cap}‰: healthy"));
        }
    }

    fn note(&mut self, target: &str, what: String) {
        if self.recent.len() >= RECENT_MAX {
            self.recent.remove(0);
        }
        self.recent.push(Adjustment {
            target: target.to_string(),
            what,
        });
    }

    /// Sends each cap and shed the loop has not published yet.
    fn apply(&mut self, snap: &Snapshot, ring: &mut ControlSender) {
        for (i, v) in self.venues.iter().enumerate() {
            let applied = snap.scalar("keel_control_new_rate_permille", &v.labels);
            if applied != u64::from(v.cap) {
                let command = ControlCommand::NewOrderRate {
                    venue: VenueId(i as u16),
                    permille: v.cap,
                };
                self.send(ring, command);
            }
        }
        for (i, (name, core)) in self.symbols.iter().enumerate() {
            let want = self.shed && !core;
            let applied = snap.scalar("keel_symbol_control_shed", &label("symbol", name)) == 1;
            if applied != want {
                let command = ControlCommand::Shed {
                    symbol: SymbolId(i as u16),
                    on: want,
                };
                self.send(ring, command);
            }
        }
    }

    fn send(&self, ring: &mut ControlSender, command: ControlCommand) {
        if ring.send(command) {
            self.counters.commands.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.ring_full.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Off: every cap back to 1000 ‰, every shed lifted.
    fn lift_all(&mut self, snap: &Snapshot, ring: &mut ControlSender) {
        let mut changed = false;
        for v in &mut self.venues {
            changed |= v.cap != PERMILLE;
            v.cap = PERMILLE;
            v.held_until_ns = 0;
            v.last_change = "controller off";
            // Switched on again, it starts from fresh readings, not from what happened while
            // it was off.
            v.last_throttle = None;
            v.last_weight = None;
            v.last_ack = None;
        }
        changed |= self.shed;
        self.shed = false;
        if changed {
            self.note("controller", "switched off: caps and sheds lifted".into());
        }
        self.apply(snap, ring);
    }

    /// Its state for the live page and `/api/state`.
    pub fn state_json(&self) -> serde_json::Value {
        serde_json::json!({
            "enabled": self.config.enabled,
            "on": self.is_on(),
            "shedding": self.shed,
            "venues": self.venues.iter().map(|v| serde_json::json!({
                "venue": v.name,
                "cap_permille": v.cap,
                "last_change": v.last_change,
            })).collect::<Vec<_>>(),
            "recent": self.recent.iter().map(|a| serde_json::json!({
                "target": a.target,
                "what": a.what,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::control::{control_channel, ControlPort};
    use crate::metrics::file::{Descriptor, MetricKind};
    use crate::metrics::histogram::{bucket, BUCKETS};

    const MS: u64 = 1_000_000;

    /// A counters snapshot as the engine publishes it for one venue `sim` and the symbols
    /// `AAPL` (core) and `NVDA`.
    struct World {
        throttles: u64,
        cancel_refused: u64,
        weight: u64,
        cap: u64,
        shed: [u64; 2],
        ack: Vec<u64>,
    }

    impl World {
        fn new() -> Self {
            Self {
                throttles: 0,
                cancel_refused: 0,
                weight: 0,
                cap: 1000,
                shed: [0, 0],
                ack: vec![0; BUCKETS],
            }
        }

        fn snapshot(&self) -> Snapshot {
            let d = |kind, name: &str, labels: &str| Descriptor {
                kind,
                region: 0,
                slot: 0,
                name: name.into(),
                labels: labels.into(),
            };
            let v = "venue=\"sim\"";
            let scalar = |name: &str, labels: &str, value: u64| {
                (d(MetricKind::Counter, name, labels), Value::Scalar(value))
            };
            Snapshot {
                pid: 1,
                started_unix_ns: 0,
                state: 2,
                regions: Vec::new(),
                metrics: vec![
                    scalar("keel_control_new_rate_permille", v, self.cap),
                    scalar("keel_venue_throttle_rejects_total", v, self.throttles),
                    scalar("keel_venue_cancel_refused_total", v, self.cancel_refused),
                    scalar("keel_limiter_new_weight_total", v, self.weight),
                    scalar("keel_limiter_weight_per_second", v, 10_000),
                    (
                        d(MetricKind::Histogram, "keel_new_order_ack_seconds", v),
                        Value::Histogram {
                            count: self.ack.iter().sum(),
                            sum_ns: 0,
                            counts: self.ack.clone(),
                        },
                    ),
                    scalar("keel_symbol_control_shed", "symbol=\"AAPL\"", self.shed[0]),
                    scalar("keel_symbol_control_shed", "symbol=\"NVDA\"", self.shed[1]),
                ],
            }
        }

        /// What the loop does with the commands: applies them to what it publishes.
        fn apply(&mut self, port: &mut ControlPort) -> Vec<ControlCommand> {
            let mut got = Vec::new();
            while let Some(c) = port.pop() {
                match c {
                    ControlCommand::NewOrderRate { permille, .. } => self.cap = permille.into(),
                    ControlCommand::Shed { symbol, on } => {
                        self.shed[usize::from(symbol.0)] = u64::from(on);
                    }
                }
                got.push(c);
            }
            got
        }
    }

    fn config() -> ControlConfig {
        ControlConfig {
            enabled: true,
            interval_ns: 100 * MS,
            hold_ns: 300 * MS,
            core_symbols: vec!["AAPL".into()],
            shed_below_permille: 50,
            ..ControlConfig::default()
        }
    }

    // Goal: the AIMD rows of the module's table, one by one. Method: a venue sending 2,000
    // weight/s (200 ‰ of its 10,000/s) starts refusing; the cap is cut from what was sent,
    // held, cut again, then raised by `increase` per healthy tick back to 1000 ‰, where the
    // cap is lifted; each change reaches the loop as one command, and nothing is resent once
    // the loop has published it.
    #[test]
    fn cuts_from_what_was_sent_holds_then_raises_to_the_full_rate() {
        let (mut port, mut ring) = control_channel();
        let mut w = World::new();
        let mut c = Controller::new(config(), &w.snapshot());
        let mut now = 0;
        let mut tick = |c: &mut Controller, w: &mut World, dt: u64, weight: u64, refused: u64| {
            now += dt;
            w.weight += weight;
            w.throttles += refused;
            c.tick(now, &w.snapshot(), &mut ring);
            w.apply(&mut port)
        };
        assert!(
            tick(&mut c, &mut w, 0, 0, 0).is_empty(),
            "the first reading is a baseline"
        );
        assert!(
            tick(&mut c, &mut w, 100 * MS, 200, 0).is_empty(),
            "healthy at full rate"
        );
        // Refusals: 200 weight in 100 ms is 200 ‰; halved to 100 ‰.
        let got = tick(&mut c, &mut w, 100 * MS, 200, 5);
        let rate = |permille| ControlCommand::NewOrderRate {
            venue: VenueId(0),
            permille,
        };
        assert_eq!(got, vec![rate(100)]);
        // Held for 300 ms: more refusals change nothing.
        assert!(tick(&mut c, &mut w, 100 * MS, 100, 3).is_empty());
        assert!(tick(&mut c, &mut w, 100 * MS, 100, 3).is_empty());
        // Past the hold: cut again from what was sent (100 ‰) to 50 ‰: the shed starts.
        let got = tick(&mut c, &mut w, 100 * MS, 100, 1);
        assert_eq!(
            got,
            vec![
                rate(50),
                ControlCommand::Shed {
                    symbol: SymbolId(1),
                    on: true
                }
            ]
        );
        assert_eq!(w.shed, [0, 1], "only the non-core symbol is shed");
        // Held, then healthy ticks raise by 20 ‰ each.
        for _ in 0..3 {
            tick(&mut c, &mut w, 100 * MS, 50, 0);
        }
        assert_eq!(w.cap, 70);
        assert_eq!(
            w.shed,
            [0, 1],
            "the shed holds until every cap is above 100 ‰"
        );
        let mut ticks = 0;
        while w.cap < 1000 {
            tick(&mut c, &mut w, 100 * MS, 50, 0);
            ticks += 1;
            assert!(ticks < 100, "the cap never came back");
        }
        assert_eq!(
            w.shed,
            [0, 0],
            "the shed is lifted once the caps are back up"
        );
        assert!(
            tick(&mut c, &mut w, 100 * MS, 200, 0).is_empty(),
            "nothing to resend"
        );
        let k = c.counters();
        assert_eq!(k.decreases.load(Ordering::Relaxed), 2);
        assert_eq!(k.sheds.load(Ordering::Relaxed), 1);
        assert_eq!(k.unsheds.load(Ordering::Relaxed), 1);
        assert!(c.recent().len() <= RECENT_MAX);
    }

    // Goal: a cancel refused on an open order is a bad tick too, and a slow venue (its ack
    // p99 above `ack_p99_ns`) is one; ticks come no faster than `interval_ns`.
    #[test]
    fn cancel_refusals_and_slow_acks_are_bad_ticks() {
        let (mut port, mut ring) = control_channel();
        let mut w = World::new();
        let mut cfg = config();
        cfg.ack_p99_ns = 5 * MS;
        cfg.ack_samples_min = 10;
        let mut c = Controller::new(cfg, &w.snapshot());
        c.tick(0, &w.snapshot(), &mut ring);
        w.weight += 1000;
        w.cancel_refused += 1;
        c.tick(50 * MS, &w.snapshot(), &mut ring);
        assert!(w.apply(&mut port).is_empty(), "not yet an interval");
        c.tick(100 * MS, &w.snapshot(), &mut ring);
        w.apply(&mut port);
        assert_eq!(w.cap, 500, "1000 weight in 100 ms is the full rate, halved");
        // Past the hold: 20 answers at 8 ms, 2,000 weight in 400 ms (500 ‰) sent.
        w.ack[bucket(8 * MS)] += 20;
        w.weight += 2000;
        c.tick(500 * MS, &w.snapshot(), &mut ring);
        w.apply(&mut port);
        assert_eq!(w.cap, 250, "slow acks halve the cap");
        assert_eq!(c.venues().next().map(|v| v.2), Some("ack p99 over target"));
    }

    // Goal: switched off, the controller lifts every cap and shed it set; switched on again it
    // starts from fresh readings (refusals seen while off do not cut at once). A full ring is
    // counted and the command sent again on the next tick.
    #[test]
    fn the_off_switch_lifts_everything_and_a_full_ring_heals() {
        let (mut port, mut ring) = control_channel();
        let mut w = World::new();
        let mut c = Controller::new(config(), &w.snapshot());
        c.tick(0, &w.snapshot(), &mut ring);
        w.weight += 100;
        w.throttles += 1;
        c.tick(100 * MS, &w.snapshot(), &mut ring);
        w.apply(&mut port);
        assert_eq!(w.cap, 50);
        assert_eq!(w.shed, [0, 1]);
        c.off_switch().store(true, Ordering::Release);
        assert!(!c.is_on());
        w.throttles += 100;
        c.tick(200 * MS, &w.snapshot(), &mut ring);
        w.apply(&mut port);
        assert_eq!((w.cap, w.shed), (1000, [0, 0]));
        c.off_switch().store(false, Ordering::Release);
        c.tick(300 * MS, &w.snapshot(), &mut ring);
        c.tick(400 * MS, &w.snapshot(), &mut ring);
        assert!(
            w.apply(&mut port).is_empty(),
            "no cut from what happened while off"
        );
        // Fill the ring, then a cut: counted as ring-full, sent once there is room.
        while ring.send(ControlCommand::Shed {
            symbol: SymbolId(0),
            on: false,
        }) {}
        w.throttles += 1;
        w.weight += 1000;
        c.tick(500 * MS, &w.snapshot(), &mut ring);
        assert_eq!(c.counters().ring_full.load(Ordering::Relaxed), 1);
        w.apply(&mut port);
        assert_eq!(w.cap, 1000, "the cut never reached the loop");
        c.tick(600 * MS, &w.snapshot(), &mut ring);
        w.apply(&mut port);
        assert_eq!(w.cap, 500, "sent again on the next tick");
    }

    #[test]
    fn bad_values_are_refused_by_key() {
        let ok = ControlConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        for (bad, key) in [
            (
                ControlConfig {
                    decrease_permille: 1000,
                    ..ok.clone()
                },
                "decrease_permille",
            ),
            (
                ControlConfig {
                    rate_min_permille: 0,
                    ..ok.clone()
                },
                "rate_min_permille",
            ),
            (
                ControlConfig {
                    interval_ns: 1,
                    ..ok.clone()
                },
                "interval_ns",
            ),
            (
                ControlConfig {
                    shed_below_permille: 501,
                    ..ok.clone()
                },
                "shed_below_permille",
            ),
        ] {
            assert_eq!(bad.validate().map_err(|e| e.key), Err(key));
        }
    }
}
