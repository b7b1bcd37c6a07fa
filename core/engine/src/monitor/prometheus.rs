//! The counters file as Prometheus text exposition (version 0.0.4): one `# HELP`/`# TYPE` pair
//! per metric name, counters ending `_total`, histograms in seconds with cumulative `le`
//! buckets at every power of two of nanoseconds from 2^10 ns (about 1 µs) to 2^34 ns (about
//! 17 s), then `+Inf`, `_sum` and `_count`.

use std::fmt::Write as _;

use crate::metrics::histogram::{upper_bound, BUCKETS};
use crate::metrics::{MetricKind, Snapshot, Value};

/// Powers of two (ns) exported as `le` bounds.
const LE_EXPONENTS: std::ops::RangeInclusive<u32> = 10..=34;

/// What each metric name means (the `# HELP` line); names not listed get a generic text.
fn help(name: &str) -> &'static str {
    match name {
        "keel_dispatcher_passes_total" => "Passes of the dispatcher loop.",
        "keel_executor_passes_total" => "Passes of the executor loop.",
        "keel_commands_total" => "Strategy commands read by the dispatcher.",
        "keel_events_total" => "Events delivered to strategies.",
        "keel_events_lost_total" => "Events a strategy's full ring could not take.",
        "keel_sent_total" => "Requests released to venues, by kind.",
        "keel_refused_total" => "Commands keel refused itself, by reason.",
        "keel_shed_total" => "New orders shed under overload.",
        "keel_throttled_total" => "New orders that waited past the rate limiter's deadline.",
        "keel_breaker_refused_total" => "New orders refused by an open breaker.",
        "keel_open_orders" => "Orders open in the order table.",
        "keel_unknown_orders" => "Orders in doubt (a request unanswered; queried, never resent).",
        "keel_kill_switch" => "1 while the operator's kill switch is on.",
        "keel_venue_mode" => "What the dispatcher lets leave for the venue: 0 nothing, 1 cancels and queries, 2 everything.",
        "keel_breaker_state" => "The venue's breaker: 0 closed, 1 half-open, 2 open.",
        "keel_breaker_failure_permille" => "Failed calls per thousand in the breaker's window.",
        "keel_lane_depth" => "Requests waiting in a venue's lane.",
        "keel_venue_in_flight" => "Orders sent to the venue and not yet answered.",
        "keel_new_order_ack_seconds" => "A new order's release to its first answer from the venue.",
        "keel_cancel_ack_seconds" => "A cancel's release to the venue's Canceled.",
        "keel_strategy_in_flight" => "A strategy's orders sent or queued and not yet answered by the venue.",
        "keel_strategy_quota_refused_total" => "A strategy's new orders and replaces refused by its own quota (quota rate or in_flight).",
        "keel_order_e2e_seconds" => "A new order's arrival at keel to the venue's first answer (keel's queues included).",
        "keel_decision_seconds" => "A command's admission to its release (keel's own time).",
        "keel_link_state" => "The venue session: 0 disconnected, 1 connecting, 2 connected, 3 reconciling, 4 synced, 5 read-only.",
        "keel_link_connects_total" => "Connection attempts to the venue.",
        "keel_link_connect_failures_total" => "Connection attempts that failed.",
        "keel_link_unreconciled" => "Differences the last reconciliation could not settle.",
        "keel_link_position_mismatches" => "Symbols whose position keel booked otherwise than the venue reported at the last reconciliation.",
        "keel_link_position_mismatches_total" => "Position items that differed from the venue's, summed over reconciliations.",
        "keel_alert_firing" => "1 while an alert's condition holds.",
        "keel_alerts_fired_total" => "Times an alert started firing.",
        "keel_budget_seconds" => "A configured latency budget.",
        "keel_up" => "1 while the engine's counters file says it runs and every loop makes progress.",
        "keel_loop_stalled" => "1 while a loop's publications have not moved for [alerts] loop_stall_ns.",
        "keel_loop_still_seconds" => "Since when (seconds) a loop's publications have not moved.",
        "keel_cancel_lane_full_total" => "Cancels that found their lane full (critical).",
        "keel_journal_errors_total" => "Journal appends that failed (critical).",
        "keel_contradictions_total" => "Venue reports that contradicted keel's order table (link made READ-ONLY).",
        "keel_executor_stalls_total" => "Times the dispatcher found a venue's executor loop stalled.",
        "keel_e2e_p99_baseline_seconds" => "A venue's rolling end-to-end new-order p99 baseline (median of the last hour's window p99s, or configured).",
        "keel_e2e_p99_window_seconds" => "A venue's end-to-end new-order p99 (arrival at keel to the venue's answer) over the last window.",
        _ => "See docs/observability.md.",
    }
}

/// Writes `snap` (and any extra lines) as Prometheus text. `keel_up` is 1 while the file says
/// running and no `keel_loop_stalled` line among `extra` (the side thread's liveness) is 1.
pub fn render(snap: &Snapshot, extra: &[(String, &'static str, String, f64)]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let stalled = extra
        .iter()
        .any(|(name, _, _, v)| name == "keel_loop_stalled" && *v > 0.0);
    let _ = writeln!(out, "# HELP keel_up {}", help("keel_up"));
    let _ = writeln!(out, "# TYPE keel_up gauge");
    let _ = writeln!(out, "keel_up {}", u8::from(snap.state == 2 && !stalled));
    // Every series of a name together, names in the order the file first lists them.
    let mut order: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, (d, _)) in snap.metrics.iter().enumerate() {
        let slot = *at.entry(&d.name).or_insert_with(|| {
            order.push((&d.name, Vec::new()));
            order.len() - 1
        });
        order[slot].1.push(i);
    }
    let mut last_name = "";
    for (d, v) in order.iter().flat_map(|(_, idx)| {
        idx.iter()
            .map(|&i| (&snap.metrics[i].0, &snap.metrics[i].1))
    }) {
        if d.name != last_name {
            let kind = match d.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            let _ = writeln!(out, "# HELP {} {}", d.name, help(&d.name));
            let _ = writeln!(out, "# TYPE {} {kind}", d.name);
            last_name = &d.name;
        }
        match v {
            Value::Scalar(n) => {
                if d.labels.is_empty() {
                    let _ = writeln!(out, "{} {n}", d.name);
                } else {
                    let _ = writeln!(out, "{}{{{}}} {n}", d.name, d.labels);
                }
            }
            Value::Histogram {
                count,
                sum_ns,
                counts,
            } => histogram(&mut out, &d.name, &d.labels, *count, *sum_ns, counts),
        }
    }
    let mut last_name = String::new();
    for (name, kind, labels, value) in extra {
        if *name != last_name {
            let _ = writeln!(out, "# HELP {name} {}", help(name));
            let _ = writeln!(out, "# TYPE {name} {kind}");
            last_name.clone_from(name);
        }
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
    out
}

fn histogram(out: &mut String, name: &str, labels: &str, count: u64, sum_ns: u64, counts: &[u64]) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0u64;
    let mut b = 0usize;
    for e in LE_EXPONENTS {
        let le_ns = 1u64 << e;
        while b < BUCKETS.min(counts.len()) && upper_bound(b) < le_ns {
            cumulative += counts[b];
            b += 1;
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{}\"}} {cumulative}",
            le_ns as f64 / 1e9
        );
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    let brace = |s: &str| {
        if labels.is_empty() {
            String::new()
        } else {
            format!("{{{s}}}")
        }
    };
    let _ = writeln!(out, "{name}_sum{} {}", brace(labels), sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count{} {count}", brace(labels));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::histogram::Histogram;
    use crate::metrics::{Descriptor, MetricKind};

    // Goal: the exposition is what Prometheus expects: one TYPE per name, cumulative buckets
    // that never decrease and end at the count, sum in seconds.
    #[test]
    fn histograms_are_cumulative_in_seconds() {
        let mut h = Histogram::default();
        for v in [500, 1_500, 3_000, 40_000_000_000] {
            h.record(v);
        }
        let d = |name: &str, kind, labels: &str| Descriptor {
            kind,
            region: 0,
            slot: 0,
            name: name.into(),
            labels: labels.into(),
        };
        let snap = Snapshot {
            pid: 1,
            started_unix_ns: 0,
            state: 2,
            regions: vec![],
            metrics: vec![
                (
                    d("keel_sent_total", MetricKind::Counter, "kind=\"new\""),
                    Value::Scalar(7),
                ),
                (
                    d("keel_sent_total", MetricKind::Counter, "kind=\"cancel\""),
                    Value::Scalar(3),
                ),
                (
                    d("keel_ack_seconds", MetricKind::Histogram, "venue=\"sim\""),
                    Value::Histogram {
                        count: h.count(),
                        sum_ns: h.sum_ns(),
                        counts: h.counts().to_vec(),
                    },
                ),
            ],
        };
        let text = render(&snap, &[]);
        assert_eq!(text.matches("# TYPE keel_sent_total counter").count(), 1);
        assert!(text.contains("keel_sent_total{kind=\"new\"} 7"), "{text}");
        assert!(text.contains("keel_up 1"));
        let buckets: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("keel_ack_seconds_bucket"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert_eq!(buckets[0], 1, "500 ns is below 1.024 µs");
        assert_eq!(*buckets.last().unwrap(), 4, "+Inf holds all");
        assert!(text.contains("keel_ack_seconds_bucket{venue=\"sim\",le=\"0.000002048\"} 2"));
        assert!(
            text.contains("keel_ack_seconds_sum{venue=\"sim\"} 40.000005"),
            "{text}"
        );
        assert!(text.contains("keel_ack_seconds_count{venue=\"sim\"} 4"));
    }
}
