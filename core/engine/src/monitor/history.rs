//! The last 15 minutes the live page charts, kept by the side thread so a browser opened in
//! the middle of an incident sees the trend at once (`/api/history`), not only what happens
//! after it loads. One sample a second at most, bounded at [`HISTORY_MAX`]; each sample holds
//! what the charts draw and nothing else.

use std::collections::VecDeque;

use super::alerts::Alerts;
use crate::metrics::engine::{breaker_text, label_value, link_state_text};
use crate::metrics::histogram::quantile;
use crate::metrics::{Snapshot, Value};

/// Samples kept: 15 minutes at one a second.
pub const HISTORY_MAX: usize = 900;
/// The least time between two samples.
pub const HISTORY_STEP_NS: u64 = 1_000_000_000;

/// The ring of samples, oldest first, each with the reading's time.
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<(u64, serde_json::Value)>,
}

impl History {
    /// Records `snap` unless the last sample is younger than [`HISTORY_STEP_NS`].
    pub fn record(&mut self, now_ns: u64, snap: &Snapshot, alerts: &Alerts) {
        if self
            .samples
            .back()
            .is_some_and(|(t, _)| now_ns.saturating_sub(*t) < HISTORY_STEP_NS)
        {
            return;
        }
        if self.samples.len() == HISTORY_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back((now_ns, sample(snap, alerts)));
    }

    /// The samples as JSON, oldest first, each with its age in milliseconds (`ago_ms`).
    pub fn json(&self, now_ns: u64) -> String {
        let list: Vec<serde_json::Value> = self
            .samples
            .iter()
            .map(|(t, s)| {
                let mut s = s.clone();
                s["ago_ms"] = (now_ns.saturating_sub(*t) / 1_000_000).into();
                s
            })
            .collect();
        serde_json::Value::from(list).to_string()
    }
}

/// One sample, in the shape the page's own samples have (dashboard.html, `sample`).
fn sample(s: &Snapshot, alerts: &Alerts) -> serde_json::Value {
    let mut venues = serde_json::Map::new();
    for (d, v) in s
        .metrics
        .iter()
        .filter(|(d, _)| d.name == "keel_link_state")
    {
        let name = label_value(&d.labels, "venue").unwrap_or("?");
        let (baseline, window) = alerts.p99(name);
        let e2e = match s.get("keel_order_e2e_seconds", &d.labels) {
            Some(Value::Histogram { counts, count, .. }) if *count > 0 => {
                Some(quantile(counts, 0.99))
            }
            _ => None,
        };
        let us = |ns: Option<u64>| ns.map(|ns| ns as f64 / 1e3);
        venues.insert(
            name.to_string(),
            serde_json::json!({
                "p99": us(window.or(e2e)),
                "baseline": us(baseline),
                "link": match v { Value::Scalar(c) => link_state_text(*c), _ => "?" },
                "breaker": breaker_text(s.scalar("keel_breaker_state", &d.labels)),
            }),
        );
    }
    let refused: u64 = s
        .metrics
        .iter()
        .filter(|(d, _)| d.name == "keel_refused_total")
        .map(|(_, v)| match v {
            Value::Scalar(n) => *n,
            Value::Histogram { .. } => 0,
        })
        .sum();
    let budget = alerts.budget().e2e_p99_ns;
    serde_json::json!({
        "commands": s.scalar("keel_commands_total", ""),
        "refused": refused,
        "budget": (budget > 0).then(|| budget as f64 / 1e3),
        "venues": venues,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::alerts::{AlertsConfig, BudgetConfig};

    fn empty() -> Snapshot {
        Snapshot {
            pid: 1,
            started_unix_ns: 0,
            state: 2,
            regions: Vec::new(),
            metrics: Vec::new(),
        }
    }

    // Goal: the ring holds at most 15 minutes at one sample a second. Method: 4 readings a
    // second for 20 minutes; count the samples and check the oldest's age.
    #[test]
    fn the_history_is_bounded_and_sampled_once_a_second() {
        let alerts = Alerts::new(AlertsConfig::default(), BudgetConfig::default());
        let mut h = History::default();
        let quarter = HISTORY_STEP_NS / 4;
        let mut now = 0;
        for _ in 0..4 * 20 * 60 {
            h.record(now, &empty(), &alerts);
            now += quarter;
        }
        assert_eq!(h.samples.len(), HISTORY_MAX);
        let list: Vec<serde_json::Value> = serde_json::from_str(&h.json(now)).unwrap();
        assert_eq!(list.len(), HISTORY_MAX);
        let oldest = list[0]["ago_ms"].as_u64().unwrap();
        assert!(oldest <= 15 * 60 * 1000 + 1000, "{oldest}");
        assert_eq!(
            list[HISTORY_MAX - 1]["ago_ms"],
            1000,
            "the last at 1199 s, asked at 1200 s"
        );
        assert_eq!(list[0]["commands"], 0);
    }
}
