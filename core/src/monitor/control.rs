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
                let core = config.core_symbols.iter().any(|c| *c == name);
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

    /// Decides, if a tick is due, and sends what the loop has not applied yet.
    pub fn tick(&mut self, now_ns: u64, snap: &Snapshot, ring: &mut ControlSender) {
        if !self.config.enabled {
            return;
        }
        if self
            .last_tick_ns
            .is_some_and(|t| now_ns.saturating_sub(t) < self.config.interval_ns)
        {
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
            self.note("symbols", "shed the non-core symbols: a new-order cap is low".into());
        } else if self.shed && all_high {
            self.shed = false;
            self.counters.unsheds.fetch_add(1, Ordering::Relaxed);
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
        if target == "symbols" {
            tracing::warn!(target: "keel::control", "{what}");
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
