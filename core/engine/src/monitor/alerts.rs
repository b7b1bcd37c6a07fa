//! Alert thresholds, evaluated on the side thread from successive readings of the counters
//! file (never on a loop): a breaker open too long, a failure rate too high for too long, too
//! many reconnects in an hour, a venue's end-to-end new-order p99 (arrival at keel to the
//! venue's answer, queue time included) worse than a multiple of its rolling baseline, any
//! unreconciled order, latency budgets breached, a link READ-ONLY or not SYNCED for too long,
//! orders left `Unknown`, a loop that stopped making progress, and the critical counters that
//! must never move (cancel lane full, contradictions, journal errors, executor stalls, REST
//! bans, shedding). Each alert has a name, a subject (a venue, a loop, a feed, or the engine),
//! whether it fires now, since when, and a count of the times it started firing.

use std::collections::VecDeque;

use crate::metrics::engine::label_value;
use crate::metrics::histogram::quantile;
use crate::metrics::{Snapshot, Value};

/// Thresholds (`[alerts]`; docs/observability.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertsConfig {
    /// Evaluate alerts at all.
    pub enabled: bool,
    /// A venue's breaker open longer than this.
    pub breaker_open_ns: u64,
    /// A venue's breaker window failure rate above this (percent) …
    pub failure_rate_pct: u32,
    /// … for this long.
    pub failure_rate_for_ns: u64,
    /// More connection attempts than this to one venue within an hour.
    pub reconnects_per_hour: u32,
    /// A venue's end-to-end new-order p99 (over the last window) above this multiple of its
    /// baseline.
    pub p99_baseline_factor: u32,
    /// The window for p99s; the baseline is the median of the last
    /// [`P99_BASELINE_WINDOWS`] windows' p99s (rolling: it follows lasting change).
    pub p99_window_ns: u64,
    /// A fixed baseline instead of a rolling one (0: rolling).
    pub p99_baseline_ns: u64,
    /// Answers a window needs before its p99 counts.
    pub p99_samples_min: u64,
    /// A loop whose publications into the counters file have not moved for this long is
    /// stalled: `keel_up` 0, `/health` 503, alert `loop_stalled`.
    pub loop_stall_ns: u64,
    /// A venue link neither SYNCED nor READ-ONLY (down, connecting, reconciling) this long.
    pub link_down_ns: u64,
    /// Orders in doubt (`keel_unknown_orders` > 0) continuously this long.
    pub unknown_orders_for_ns: u64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            breaker_open_ns: 300 * SEC,
            failure_rate_pct: 20,
            failure_rate_for_ns: 60 * SEC,
            reconnects_per_hour: 5,
            p99_baseline_factor: 2,
            p99_window_ns: 60 * SEC,
            p99_baseline_ns: 0,
            p99_samples_min: 100,
            loop_stall_ns: 2 * SEC,
            link_down_ns: 60 * SEC,
            unknown_orders_for_ns: 60 * SEC,
        }
    }
}

/// Latency budgets (`[budget]`): each p99 against its bound (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetConfig {
    /// keel's own decision time (admission to release) for new orders.
    pub decision_p99_ns: u64,
    /// Venue round trip of a new order (release to first answer), any venue.
    pub new_ack_p99_ns: u64,
    /// A new order's end-to-end time (arrival at keel to the venue's first answer, keel's
    /// queues included), any venue.
    pub e2e_p99_ns: u64,
    /// Venue round trip of a cancel.
    pub cancel_ack_p99_ns: u64,
}

const SEC: u64 = 1_000_000_000;
const HOUR_NS: u64 = 3_600 * SEC;
/// Readings kept for windowed p99s (one per `p99_window_ns / WINDOW_STEPS`).
const WINDOW_STEPS: u64 = 12;
/// A critical counter's alert fires when it moves and holds this long after its last move
/// (docs/keel-alerts.yml's `increase(…[5m]) > 0`), so a single event is seen, not flickered.
pub const COUNTER_HOLD_NS: u64 = 300 * SEC;

/// The critical counters (alert name, metric name, labels it must carry): any increase fires.
/// A feed's REST 418 is a ban, the rest are the dispatcher's and the links' alarms.
const CRITICAL_COUNTERS: [(&str, &str, &str); 8] = [
    ("cancel_lane_full", "keel_cancel_lane_full_total", ""),
    ("contradiction", "keel_contradictions_total", ""),
    ("contradiction", "keel_link_contradictions_total", "venue="),
    ("journal_errors", "keel_journal_errors_total", ""),
    ("executor_stall", "keel_executor_stalls_total", ""),
    ("rest_banned", "keel_rest_responses_total", "status=\"418\""),
    (
        "reconcile_stuck",
        "keel_link_reconcile_stuck_total",
        "venue=",
    ),
    ("shedding", "keel_shed_total", ""),
];

/// The loops writing the counters file, by region (`metrics::engine::REGION_*`).
pub const LOOP_NAMES: [&str; 2] = ["dispatcher", "executor"];

/// Windows whose p99s make the rolling baseline (an hour at the default 60 s window). Their
/// median: an incident shorter than half of them (30 min) is measured against the time before
/// it and fires; a change that lasts longer becomes the new normal and resolves, so a baseline
/// learned in a quiet first minute can no longer fire forever on an ordinary busy day.
pub const P99_BASELINE_WINDOWS: usize = 60;

/// One alert as evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Its name (`breaker_open`, `failure_rate`, `reconnects`, `p99_vs_baseline`,
    /// `unreconciled`, `budget`, `read_only`, `link_down`, `unknown_orders`, `loop_stalled`,
    /// and the critical counters' `cancel_lane_full`, `contradiction`, `journal_errors`,
    /// `executor_stall`, `rest_banned`, `shedding`).
    pub name: &'static str,
    /// What it is about: `venue="sim"`, `budget="cancel_ack_p99"`.
    pub subject: String,
    /// Whether it fires now.
    pub firing: bool,
    /// Since when (monitor time, ns) its condition holds (0: it does not).
    pub since_ns: u64,
    /// Times it started firing.
    pub fired: u64,
    /// The value behind it, in words (`open 312 s`, `27% for 64 s`, `7 in the last hour`).
    pub value: String,
}

#[derive(Debug, Default)]
struct VenueWatch {
    breaker_open_since: Option<u64>,
    failure_high_since: Option<u64>,
    last_connects: Option<u64>,
    connects: VecDeque<u64>,
    /// (time, bucket counts) of new orders' end-to-end times, newest last.
    acks: VecDeque<(u64, Vec<u64>)>,
    baseline_p99_ns: Option<u64>,
    window_p99_ns: Option<u64>,
    /// The p99s of the last [`P99_BASELINE_WINDOWS`] full windows, oldest first.
    p99_history: VecDeque<u64>,
    /// When the newest of them was taken.
    history_at_ns: Option<u64>,
    /// Since when the link is neither SYNCED nor READ-ONLY.
    down_since: Option<u64>,
}

impl VenueWatch {
    /// Takes the window's p99 into the rolling baseline once per window (a full one with
    /// enough answers), then sets the baseline to the median of the windows kept.
    fn roll_baseline(&mut self, now_ns: u64, window_start_ns: u64, window_ns: u64) {
        let full = now_ns - window_start_ns >= window_ns;
        let due = self.history_at_ns.is_none_or(|t| now_ns - t >= window_ns);
        if let (true, true, Some(p99)) = (full, due, self.window_p99_ns) {
            self.p99_history.push_back(p99);
            while self.p99_history.len() > P99_BASELINE_WINDOWS {
                self.p99_history.pop_front();
            }
            self.history_at_ns = Some(now_ns);
        }
        self.baseline_p99_ns = median(&self.p99_history);
    }
}

/// The median of `values` (the upper one of an even count); `None` when empty.
fn median(values: &VecDeque<u64>) -> Option<u64> {
    let mut sorted: Vec<u64> = values.iter().copied().collect();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

/// A loop's progress as the side thread sees it: its region's publication count and when
/// (monitor time) it last moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopProgress {
    /// Publications of its region so far.
    pub publications: u64,
    /// When the count last moved (or was first read).
    pub moved_ns: u64,
    /// Whether it has been still for `loop_stall_ns`.
    pub stalled: bool,
}

/// A critical counter's last value and last move.
#[derive(Debug)]
struct CounterWatch {
    metric: &'static str,
    labels: String,
    last: u64,
    moved_ns: Option<u64>,
}

/// The alert evaluator's memory between readings.
#[derive(Debug)]
pub struct Alerts {
    config: AlertsConfig,
    budget: BudgetConfig,
    venues: Vec<(String, VenueWatch)>,
    alerts: Vec<Alert>,
    loops: Vec<LoopProgress>,
    counters: Vec<CounterWatch>,
    unknown_since: Option<u64>,
}

fn histogram<'a>(snap: &'a Snapshot, name: &str, labels: &str) -> Option<&'a Vec<u64>> {
    match snap.get(name, labels) {
        Some(Value::Histogram { counts, .. }) => Some(counts),
        _ => None,
    }
}

impl Alerts {
    /// An evaluator with these thresholds and budgets.
    pub fn new(config: AlertsConfig, budget: BudgetConfig) -> Self {
        Self {
            config,
            budget,
            venues: Vec::new(),
            alerts: Vec::new(),
            loops: Vec::new(),
            counters: Vec::new(),
            unknown_since: None,
        }
    }

    /// Each loop's progress (in region order: [`LOOP_NAMES`]), as of the last evaluation.
    pub fn loops(&self) -> &[LoopProgress] {
        &self.loops
    }

    /// The thresholds.
    pub fn config(&self) -> &AlertsConfig {
        &self.config
    }

    /// The budgets.
    pub fn budget(&self) -> &BudgetConfig {
        &self.budget
    }

    /// Every alert as of the last evaluation.
    pub fn alerts(&self) -> &[Alert] {
        &self.alerts
    }

    /// A venue's rolling (or configured) end-to-end new-order p99 baseline, and its p99 over
    /// the last window, if known.
    pub fn p99(&self, venue: &str) -> (Option<u64>, Option<u64>) {
        self.venues
            .iter()
            .find(|(v, _)| v == venue)
            .map_or((None, None), |(_, w)| (w.baseline_p99_ns, w.window_p99_ns))
    }

    fn set(&mut self, name: &'static str, subject: String, holds: Option<u64>, value: String) {
        let at = match self
            .alerts
            .iter()
            .position(|a| a.name == name && a.subject == subject)
        {
            Some(i) => i,
            None => {
                self.alerts.push(Alert {
                    name,
                    subject,
                    firing: false,
                    since_ns: 0,
                    fired: 0,
                    value: String::new(),
                });
                self.alerts.len() - 1
            }
        };
        let a = &mut self.alerts[at];
        a.value = value;
        match holds {
            Some(since) => {
                if !a.firing {
                    a.fired += 1;
                    a.firing = true;
                    a.since_ns = since;
                    tracing::warn!(target: "keel::alert", alert = name, subject = %a.subject, value = %a.value, "alert firing");
                }
            }
            None => {
                if a.firing {
                    tracing::info!(target: "keel::alert", alert = name, subject = %a.subject, "alert resolved");
                }
                a.firing = false;
                a.since_ns = 0;
            }
        }
    }

    /// Liveness: a loop whose region's publication count has not moved for `loop_stall_ns`
    /// while the engine runs is stalled. Watched even with alerts switched off: it decides
    /// `keel_up` and `/health`. (A loop publishes at most once per millisecond of loop time
    /// but on every pass past that, busy or idle, so only a loop that stopped passing is still.)
    fn watch_loops(&mut self, now_ns: u64, snap: &Snapshot) {
        let running = snap.state == 2;
        let first = LoopProgress {
            publications: 0,
            moved_ns: now_ns,
            stalled: false,
        };
        self.loops
            .resize(snap.regions.len().min(LOOP_NAMES.len()), first);
        for (p, &(publications, _)) in self.loops.iter_mut().zip(&snap.regions) {
            // Not running (starting, stopped): nothing to wait for; the clock starts anew.
            if publications != p.publications || !running {
                p.publications = publications;
                p.moved_ns = now_ns;
            }
            p.stalled = running && now_ns - p.moved_ns >= self.config.loop_stall_ns;
        }
    }

    /// The critical counters: each fires when it moves and holds [`COUNTER_HOLD_NS`] after its
    /// last move; shedding also holds while any symbol is shed (by the operator or the
    /// controller).
    fn watch_counters(&mut self, now_ns: u64, snap: &Snapshot) {
        let shed_now = snap.metrics.iter().any(|(d, v)| {
            matches!(
                d.name.as_str(),
                "keel_symbol_shed" | "keel_symbol_control_shed"
            ) && *v == Value::Scalar(1)
        });
        for (alert, metric, must) in CRITICAL_COUNTERS {
            for (d, v) in &snap.metrics {
                let (true, Value::Scalar(n)) = (d.name == metric && d.labels.contains(must), v)
                else {
                    continue;
                };
                let at = match self
                    .counters
                    .iter()
                    .position(|c| c.metric == metric && c.labels == d.labels)
                {
                    Some(at) => at,
                    None => {
                        // From 0: a counter already above it at the first reading has moved.
                        self.counters.push(CounterWatch {
                            metric,
                            labels: d.labels.clone(),
                            last: 0,
                            moved_ns: None,
                        });
                        self.counters.len() - 1
                    }
                };
                let w = &mut self.counters[at];
                if *n > w.last {
                    w.moved_ns = Some(now_ns);
                }
                w.last = *n;
                let mut holds = w.moved_ns.filter(|&t| now_ns - t < COUNTER_HOLD_NS);
                if alert == "shedding" && shed_now {
                    holds = holds.or(Some(now_ns));
                }
                let text = match w.moved_ns {
                    Some(t) => format!("{n} so far, last {} s ago", (now_ns - t) / SEC),
                    None => format!("{n} so far"),
                };
                self.set(alert, d.labels.clone(), holds, text);
            }
        }
    }

    /// The engine's own alerts: a stalled loop, the critical counters, orders in doubt.
    fn engine_alerts(&mut self, now_ns: u64, snap: &Snapshot) {
        for (i, name) in LOOP_NAMES.iter().enumerate().take(self.loops.len()) {
            let p = self.loops[i];
            let still_ms = (now_ns - p.moved_ns) / 1_000_000;
            self.set(
                "loop_stalled",
                format!("loop=\"{name}\""),
                p.stalled.then_some(p.moved_ns),
                format!("no progress for {still_ms} ms"),
            );
        }
        self.watch_counters(now_ns, snap);
        let unknown = snap.scalar("keel_unknown_orders", "");
        self.unknown_since = (unknown > 0).then(|| self.unknown_since.unwrap_or(now_ns));
        let since = self.unknown_since;
        self.set(
            "unknown_orders",
            String::new(),
            since.filter(|&s| now_ns - s >= self.config.unknown_orders_for_ns),
            format!(
                "{unknown} in doubt{}",
                since.map_or(String::new(), |s| format!(" for {} s", (now_ns - s) / SEC))
            ),
        );
    }

    /// Evaluates every alert on a reading taken at monitor time `now_ns`.
    pub fn evaluate(&mut self, now_ns: u64, snap: &Snapshot) {
        self.watch_loops(now_ns, snap);
        if !self.config.enabled {
            return;
        }
        self.engine_alerts(now_ns, snap);
        let c = self.config.clone();
        let venues: Vec<String> = snap
            .metrics
            .iter()
            .filter(|(d, _)| d.name == "keel_link_state")
            .filter_map(|(d, _)| label_value(&d.labels, "venue").map(str::to_string))
            .collect();
        let mut new_ack_p99_max = None::<u64>;
        let mut e2e_p99_max = None::<u64>;
        let mut cancel_ack_p99_max = None::<u64>;
        for venue in venues {
            let l = format!("venue=\"{venue}\"");
            if !self.venues.iter().any(|(v, _)| *v == venue) {
                self.venues.push((venue.clone(), VenueWatch::default()));
            }
            let i = self
                .venues
                .iter()
                .position(|(v, _)| *v == venue)
                .expect("added");
            let w = &mut self.venues[i].1;
            // Breaker open too long.
            let open = snap.scalar("keel_breaker_state", &l) == 2;
            w.breaker_open_since = if open {
                Some(w.breaker_open_since.unwrap_or(now_ns))
            } else {
                None
            };
            let open_for = w.breaker_open_since.map(|s| now_ns - s);
            let breaker = w
                .breaker_open_since
                .filter(|_| open_for.unwrap_or(0) >= c.breaker_open_ns);
            let breaker_text =
                open_for.map_or("closed".into(), |ns| format!("open {} s", ns / SEC));
            // Failure rate too high for too long.
            let permille = snap.scalar("keel_breaker_failure_permille", &l);
            let high = permille > u64::from(c.failure_rate_pct) * 10;
            w.failure_high_since = if high {
                Some(w.failure_high_since.unwrap_or(now_ns))
            } else {
                None
            };
            let failure = w
                .failure_high_since
                .filter(|&s| now_ns - s >= c.failure_rate_for_ns);
            let failure_text = format!(
                "{}%{}",
                permille / 10,
                w.failure_high_since
                    .map_or(String::new(), |s| format!(" for {} s", (now_ns - s) / SEC))
            );
            // Reconnects in the last hour.
            let connects = snap.scalar("keel_link_connects_total", &l);
            if let Some(last) = w.last_connects {
                for _ in last..connects.min(last + 1_024) {
                    w.connects.push_back(now_ns);
                }
            }
            w.last_connects = Some(connects);
            while w.connects.front().is_some_and(|&t| now_ns - t > HOUR_NS) {
                w.connects.pop_front();
            }
            while w.connects.len() > 1_024 {
                w.connects.pop_front();
            }
            let reconnects = (w.connects.len() as u64 > u64::from(c.reconnects_per_hour))
                .then(|| *w.connects.front().expect("non-empty"));
            let reconnect_text = format!("{} in the last hour", w.connects.len());
            // End-to-end new-order p99 over the last window vs its rolling baseline: what a
            // strategy waits, keel's own queues included (an ack-only p99 never sees orders
            // held in a lane).
            if let Some(counts) = histogram(snap, "keel_order_e2e_seconds", &l) {
                let step = (c.p99_window_ns / WINDOW_STEPS).max(1);
                if w.acks.back().is_none_or(|(t, _)| now_ns - t >= step) {
                    w.acks.push_back((now_ns, counts.clone()));
                }
                while w
                    .acks
                    .front()
                    .is_some_and(|(t, _)| now_ns - t > c.p99_window_ns + step)
                {
                    w.acks.pop_front();
                }
                if let Some((t0, old)) = w.acks.front() {
                    let window: Vec<u64> = counts
                        .iter()
                        .zip(old)
                        .map(|(n, o)| n.saturating_sub(*o))
                        .collect();
                    let samples: u64 = window.iter().sum();
                    w.window_p99_ns =
                        (samples >= c.p99_samples_min).then(|| quantile(&window, 0.99));
                    if c.p99_baseline_ns > 0 {
                        w.baseline_p99_ns = Some(c.p99_baseline_ns);
                    } else {
                        let t0 = *t0;
                        w.roll_baseline(now_ns, t0, c.p99_window_ns);
                    }
                }
                if counts.iter().sum::<u64>() > 0 {
                    let p = quantile(counts, 0.99);
                    e2e_p99_max = Some(e2e_p99_max.map_or(p, |m| m.max(p)));
                }
            }
            if let Some(counts) = histogram(snap, "keel_new_order_ack_seconds", &l) {
                if counts.iter().sum::<u64>() > 0 {
                    let p = quantile(counts, 0.99);
                    new_ack_p99_max = Some(new_ack_p99_max.map_or(p, |m| m.max(p)));
                }
            }
            if let Some(counts) = histogram(snap, "keel_cancel_ack_seconds", &l) {
                if counts.iter().sum::<u64>() > 0 {
                    let p = quantile(counts, 0.99);
                    cancel_ack_p99_max = Some(cancel_ack_p99_max.map_or(p, |m| m.max(p)));
                }
            }
            let (baseline, window) = (w.baseline_p99_ns, w.window_p99_ns);
            let slow = match (baseline, window) {
                (Some(b), Some(p)) if p > b.saturating_mul(u64::from(c.p99_baseline_factor)) => {
                    Some(now_ns)
                }
                _ => None,
            };
            let p99_text = format!(
                "p99 {} µs, baseline {} µs",
                window.map_or("-".into(), |p| (p / 1_000).to_string()),
                baseline.map_or("-".into(), |b| (b / 1_000).to_string())
            );
            // READ-ONLY at once; down (not SYNCED, not READ-ONLY) for too long.
            let state = snap.scalar("keel_link_state", &l);
            w.down_since = (state < 4).then(|| w.down_since.unwrap_or(now_ns));
            let down = w.down_since.filter(|&s| now_ns - s >= c.link_down_ns);
            let down_text = format!(
                "{}{}",
                crate::metrics::engine::link_state_text(state),
                w.down_since
                    .map_or(String::new(), |s| format!(" for {} s", (now_ns - s) / SEC))
            );
            // Any unreconciled order, at once.
            let unreconciled = snap.scalar("keel_link_unreconciled", &l);
            self.set(
                "read_only",
                l.clone(),
                (state == 5).then_some(now_ns),
                crate::metrics::engine::link_state_text(state).into(),
            );
            self.set("link_down", l.clone(), down, down_text);
            self.set("breaker_open", l.clone(), breaker, breaker_text);
            self.set("failure_rate", l.clone(), failure, failure_text);
            self.set("reconnects", l.clone(), reconnects, reconnect_text);
            self.set("p99_vs_baseline", l.clone(), slow, p99_text);
            self.set(
                "unreconciled",
                l,
                (unreconciled > 0).then_some(now_ns),
                format!("{unreconciled} unreconciled"),
            );
        }
        let decision = histogram(snap, "keel_decision_seconds", "class=\"new\"")
            .filter(|c| c.iter().sum::<u64>() > 0)
            .map(|c| quantile(c, 0.99));
        let b = self.budget;
        for (name, bound, p99) in [
            ("decision_p99", b.decision_p99_ns, decision),
            ("new_ack_p99", b.new_ack_p99_ns, new_ack_p99_max),
            ("e2e_p99", b.e2e_p99_ns, e2e_p99_max),
            ("cancel_ack_p99", b.cancel_ack_p99_ns, cancel_ack_p99_max),
        ] {
            if bound == 0 {
                continue;
            }
            let breach = p99.filter(|&p| p > bound).map(|_| now_ns);
            let text = format!(
                "p99 {} µs, budget {} µs",
                p99.map_or("-".into(), |p| (p / 1_000).to_string()),
                bound / 1_000
            );
            self.set("budget", format!("budget=\"{name}\""), breach, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Descriptor, MetricKind};

    fn snap(breaker: u64, permille: u64, connects: u64, unreconciled: u64) -> Snapshot {
        let scalar = |name: &str, v: u64| {
            (
                Descriptor {
                    kind: MetricKind::Gauge,
                    region: 0,
                    slot: 0,
                    name: name.into(),
                    labels: "venue=\"sim\"".into(),
                },
                Value::Scalar(v),
            )
        };
        Snapshot {
            pid: 1,
            started_unix_ns: 0,
            state: 2,
            regions: vec![],
            metrics: vec![
                scalar("keel_link_state", 4),
                scalar("keel_breaker_state", breaker),
                scalar("keel_breaker_failure_permille", permille),
                scalar("keel_link_connects_total", connects),
                scalar("keel_link_unreconciled", unreconciled),
            ],
        }
    }

    /// A reading with the venue's end-to-end histogram `e2e` (cumulative, as the file has it).
    fn e2e_snap(e2e: &crate::metrics::Histogram) -> Snapshot {
        let mut s = snap(0, 0, 1, 0);
        s.metrics.push((
            Descriptor {
                kind: MetricKind::Histogram,
                region: 0,
                slot: 0,
                name: "keel_order_e2e_seconds".into(),
                labels: "venue=\"sim\"".into(),
            },
            Value::Histogram {
                count: e2e.count(),
                sum_ns: e2e.sum_ns(),
                counts: e2e.counts().to_vec(),
            },
        ));
        s
    }

    // Goal: the p99 alert watches end-to-end times against a rolling baseline: a short
    // spike fires against the quiet hour before it; a slowdown that lasts becomes the new
    // normal (the baseline moves up) and the alert resolves. Method: readings every 5 s
    // (the default window's step), 200 answers each at one latency: 100 µs for 20 windows,
    // a 5 s spike at 500 µs, then 300 µs for 40 windows.
    #[test]
    fn the_p99_baseline_rolls_and_follows_a_lasting_change() {
        let mut a = Alerts::new(AlertsConfig::default(), BudgetConfig::default());
        let mut e2e = crate::metrics::Histogram::default();
        let mut now = 0;
        let mut reading = |a: &mut Alerts, e2e: &mut crate::metrics::Histogram, ns: u64| {
            for _ in 0..200 {
                e2e.record(ns);
            }
            now += 5 * SEC;
            a.evaluate(now, &e2e_snap(e2e));
        };
        for _ in 0..20 * 12 {
            reading(&mut a, &mut e2e, 100_000);
        }
        let (quiet, _) = a.p99("sim");
        let quiet = quiet.expect("a baseline after 20 windows");
        assert!((100_000..150_000).contains(&quiet), "baseline {quiet} ns");
        assert!(!firing(&a, "p99_vs_baseline"));
        reading(&mut a, &mut e2e, 500_000);
        assert!(firing(&a, "p99_vs_baseline"), "a spike above 2x fires");
        for _ in 0..40 * 12 {
            reading(&mut a, &mut e2e, 300_000);
        }
        let (moved, window) = a.p99("sim");
        let moved = moved.expect("baseline");
        assert!(
            moved >= 2 * quiet,
            "the baseline follows: {quiet} -> {moved} ns"
        );
        assert!(window.is_some_and(|w| w <= 2 * moved));
        assert!(!firing(&a, "p99_vs_baseline"), "a lasting change resolves");
        let fired = a
            .alerts()
            .iter()
            .find(|x| x.name == "p99_vs_baseline")
            .map(|x| x.fired);
        assert_eq!(
            fired,
            Some(1),
            "it fired once, for the spike and its aftermath"
        );
    }

    fn firing(a: &Alerts, name: &str) -> bool {
        a.alerts().iter().any(|x| x.name == name && x.firing)
    }

    // Goal: each threshold fires exactly at its bound, not before, and resolves; counts are
    // kept.
    #[test]
    fn thresholds_fire_at_their_bounds_and_resolve() {
        let mut a = Alerts::new(AlertsConfig::default(), BudgetConfig::default());
        a.evaluate(0, &snap(2, 0, 1, 0));
        a.evaluate(299 * SEC, &snap(2, 0, 1, 0));
        assert!(!firing(&a, "breaker_open"), "open 299 s: not yet");
        a.evaluate(300 * SEC, &snap(2, 0, 1, 0));
        assert!(firing(&a, "breaker_open"));
        a.evaluate(301 * SEC, &snap(0, 250, 1, 0));
        assert!(!firing(&a, "breaker_open"), "closed again");
        assert!(!firing(&a, "failure_rate"), "25% for 0 s");
        a.evaluate(361 * SEC, &snap(0, 250, 1, 0));
        assert!(firing(&a, "failure_rate"), "25% for 60 s");
        a.evaluate(362 * SEC, &snap(0, 200, 1, 0));
        assert!(!firing(&a, "failure_rate"), "20% is not above 20%");
        a.evaluate(363 * SEC, &snap(0, 0, 6, 0));
        assert!(!firing(&a, "reconnects"), "5 in the hour");
        a.evaluate(364 * SEC, &snap(0, 0, 7, 0));
        assert!(firing(&a, "reconnects"), "6 in the hour");
        a.evaluate(364 * SEC + HOUR_NS, &snap(0, 0, 7, 0));
        assert!(!firing(&a, "reconnects"), "an hour later");
        assert!(!firing(&a, "unreconciled"));
        a.evaluate(365 * SEC + HOUR_NS, &snap(0, 0, 7, 1));
        assert!(firing(&a, "unreconciled"), "at once");
        let fired: u64 = a.alerts().iter().map(|x| x.fired).sum();
        assert_eq!(fired, 4);
    }

    /// `base` with `name{labels}` set to `v` (added when absent).
    fn with(mut base: Snapshot, name: &str, labels: &str, v: u64) -> Snapshot {
        base.metrics
            .retain(|(d, _)| !(d.name == name && d.labels == labels));
        base.metrics.push((
            Descriptor {
                kind: MetricKind::Counter,
                region: 0,
                slot: 0,
                name: name.into(),
                labels: labels.into(),
            },
            Value::Scalar(v),
        ));
        base
    }

    fn firing_on(a: &Alerts, name: &str, subject: &str) -> bool {
        a.alerts()
            .iter()
            .any(|x| x.name == name && x.subject == subject && x.firing)
    }

    // Goal (issue 23): a loop whose publications stand still is stalled exactly at
    // `loop_stall_ns`, only while the engine runs, alert or not; it recovers when they move.
    #[test]
    fn a_loop_that_stops_publishing_is_stalled_at_its_bound() {
        let mut a = Alerts::new(AlertsConfig::default(), BudgetConfig::default());
        let mut s = snap(0, 0, 1, 0);
        s.regions = vec![(10, 0), (10, 0)];
        a.evaluate(0, &s);
        s.regions[1].0 = 11;
        a.evaluate(2 * SEC - 1, &s);
        assert!(
            a.loops().iter().all(|p| !p.stalled),
            "1.999999999 s: not yet"
        );
        a.evaluate(2 * SEC, &s);
        assert!(a.loops()[0].stalled, "the dispatcher stood still 2 s");
        assert!(!a.loops()[1].stalled, "the executor moved at 2 s - 1 ns");
        assert!(firing_on(&a, "loop_stalled", "loop=\"dispatcher\""));
        s.regions[0].0 = 11;
        a.evaluate(3 * SEC, &s);
        assert!(!a.loops()[0].stalled, "moving again");
        assert!(!firing_on(&a, "loop_stalled", "loop=\"dispatcher\""));
        // Stopped: nothing moves, nothing is stalled.
        s.state = 3;
        a.evaluate(60 * SEC, &s);
        assert!(a.loops().iter().all(|p| !p.stalled));
        // Alerts off: liveness still watched (it decides keel_up and /health).
        let off = AlertsConfig {
            enabled: false,
            ..AlertsConfig::default()
        };
        let mut a = Alerts::new(off, BudgetConfig::default());
        s.state = 2;
        a.evaluate(0, &s);
        a.evaluate(2 * SEC, &s);
        assert!(a.loops()[0].stalled && a.alerts().is_empty());
    }

    // Goal (issue 23): each critical counter fires on its first increase (even one already
    // there at the first reading), holds COUNTER_HOLD_NS after its last move, then resolves;
    // READ-ONLY fires at once, a link down and orders in doubt only past their bounds.
    #[test]
    fn critical_counters_read_only_link_down_and_unknown_orders() {
        let mut a = Alerts::new(AlertsConfig::default(), BudgetConfig::default());
        let base = snap(0, 0, 1, 0);
        let feed = "feed=\"0\",status=\"418\"";
        let mut s = base.clone();
        for (name, labels) in [
            ("keel_cancel_lane_full_total", ""),
            ("keel_contradictions_total", ""),
            ("keel_journal_errors_total", ""),
            ("keel_executor_stalls_total", ""),
            ("keel_shed_total", ""),
            ("keel_rest_responses_total", feed),
            ("keel_rest_responses_total", "feed=\"0\",status=\"429\""),
        ] {
            s = with(s, name, labels, 0);
        }
        a.evaluate(0, &s);
        assert!(!a.alerts().iter().any(|x| x.firing), "{:?}", a.alerts());
        let moved = [
            ("cancel_lane_full", "keel_cancel_lane_full_total", ""),
            ("contradiction", "keel_contradictions_total", ""),
            ("journal_errors", "keel_journal_errors_total", ""),
            ("executor_stall", "keel_executor_stalls_total", ""),
            ("shedding", "keel_shed_total", ""),
            ("rest_banned", "keel_rest_responses_total", feed),
        ];
        for (_, name, labels) in moved {
            s = with(s, name, labels, 1);
        }
        s = with(
            s,
            "keel_rest_responses_total",
            "feed=\"0\",status=\"429\"",
            9,
        );
        a.evaluate(SEC, &s);
        for (alert, _, labels) in moved {
            assert!(firing_on(&a, alert, labels), "{alert}");
        }
        assert!(!a
            .alerts()
            .iter()
            .any(|x| x.firing && x.subject.contains("429")));
        a.evaluate(SEC + COUNTER_HOLD_NS - 1, &s);
        assert!(firing_on(&a, "journal_errors", ""), "held");
        a.evaluate(SEC + COUNTER_HOLD_NS, &s);
        assert!(!a.alerts().iter().any(|x| x.firing), "{:?}", a.alerts());
        // A counter above 0 at the very first reading has moved.
        let mut b = Alerts::new(AlertsConfig::default(), BudgetConfig::default());
        b.evaluate(0, &with(base.clone(), "keel_journal_errors_total", "", 3));
        assert!(firing_on(&b, "journal_errors", ""));
        // A symbol held shed is shedding, whatever the counter says.
        let held = with(s.clone(), "keel_symbol_control_shed", "symbol=\"AAPL\"", 1);
        a.evaluate(HOUR_NS, &held);
        assert!(firing_on(&a, "shedding", ""));
        // READ-ONLY at once; down only after link_down_ns; Unknown after its bound.
        let venue = "venue=\"sim\"";
        let t = 2 * HOUR_NS;
        a.evaluate(t, &with(s.clone(), "keel_link_state", venue, 5));
        assert!(firing_on(&a, "read_only", venue) && !firing_on(&a, "link_down", venue));
        let down = with(
            with(s, "keel_link_state", venue, 0),
            "keel_unknown_orders",
            "",
            2,
        );
        a.evaluate(t + SEC, &down);
        assert!(!firing_on(&a, "read_only", venue));
        a.evaluate(t + 61 * SEC - 1, &down);
        assert!(!firing_on(&a, "link_down", venue) && !firing_on(&a, "unknown_orders", ""));
        a.evaluate(t + 61 * SEC, &down);
        assert!(firing_on(&a, "link_down", venue) && firing_on(&a, "unknown_orders", ""));
        a.evaluate(t + 62 * SEC, &with(down, "keel_link_state", venue, 4));
        assert!(!firing_on(&a, "link_down", venue));
    }
}
