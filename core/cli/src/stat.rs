//! `keel stat`: a running engine's counters file, from another process — a live terminal view,
//! or one reading (`--once`), or JSON for scripts (`--json`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use keel::metrics::engine::{breaker_text, engine_state_text, label_value, link_state_text};
use keel::metrics::histogram::quantile;
use keel::metrics::{CountersReader, MetricKind, Snapshot, Value};

#[derive(Debug, Args)]
pub struct StatArgs {
    /// The engine's configuration: its counters file is `[metrics] file`, else `counters` in
    /// its `[ipc]` directory.
    #[arg(long, conflicts_with = "file")]
    config: Option<PathBuf>,
    /// The counters file itself.
    #[arg(long)]
    file: Option<PathBuf>,
    /// One reading, then exit.
    #[arg(long)]
    once: bool,
    /// Every metric as one JSON object (implies --once).
    #[arg(long)]
    json: bool,
    /// Seconds between readings of the live view.
    #[arg(long, default_value_t = 1.0)]
    interval_s: f64,
}

pub fn run(args: StatArgs) -> ExitCode {
    let mut budget = None;
    let path = match (&args.file, &args.config) {
        (Some(f), _) => f.clone(),
        (None, Some(config)) => {
            let read = std::fs::read_to_string(config)
                .map_err(|e| format!("cannot read {}: {e}", config.display()))
                .and_then(|t| {
                    keel::config::EngineConfig::from_toml(&t)
                        .map_err(|e| format!("{}: {e}", config.display()))
                });
            if let Ok(c) = &read {
                budget = Some(c.metrics.budget);
            }
            match read.map(|c| c.counters_file()) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    keel::warn_line!(
                        "keel stat: {}: no counters file ([metrics] enabled = false, or no \
                         [ipc] directory and no [metrics] file)",
                        config.display()
                    );
                    return ExitCode::from(65);
                }
                Err(e) => {
                    keel::warn_line!("keel stat: {e}");
                    return ExitCode::from(65);
                }
            }
        }
        (None, None) => {
            keel::warn_line!("keel stat: give --config FILE or --file PATH");
            return ExitCode::from(64);
        }
    };
    let reader = match CountersReader::open(&path) {
        Ok(r) => r,
        Err(e) => {
            keel::warn_line!("keel stat: {e} (is `keel run` running with this configuration?)");
            return ExitCode::from(69);
        }
    };
    if args.json {
        keel::say_line!("{}", json(&reader.snapshot()));
        return ExitCode::SUCCESS;
    }
    let terminal = std::io::stdout().is_terminal();
    let interval = Duration::from_secs_f64(args.interval_s.clamp(0.05, 3600.0));
    loop {
        let text = view(&reader.snapshot(), budget.as_ref());
        let mut out = std::io::stdout().lock();
        if terminal && !args.once {
            // Home and clear: the view redraws in place.
            let _ = write!(out, "\x1b[H\x1b[2J");
        }
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::SUCCESS; // the reader went away
        }
        if args.once {
            return ExitCode::SUCCESS;
        }
        drop(out);
        std::thread::sleep(interval);
    }
}

fn micros(ns: u64) -> String {
    if ns == u64::MAX {
        "inf".into()
    } else {
        format!("{:.1}", ns as f64 / 1e3)
    }
}

fn p(snap: &Snapshot, name: &str, labels: &str, q: f64) -> Option<u64> {
    match snap.get(name, labels) {
        Some(Value::Histogram { counts, count, .. }) if *count > 0 => Some(quantile(counts, q)),
        _ => None,
    }
}

/// ` (budget B µs, OVER)` after a p99, when a budget is set.
fn against(p99: Option<u64>, budget_ns: u64) -> String {
    match (p99, budget_ns) {
        (_, 0) => String::new(),
        (Some(p), b) if p > b => format!(" (budget {} µs, OVER)", micros(b)),
        (_, b) => format!(" (budget {} µs)", micros(b)),
    }
}

/// The human view of one snapshot, each p99 against its budget when one is given.
pub fn view(s: &Snapshot, budget: Option<&keel::monitor::alerts::BudgetConfig>) -> String {
    let b = budget.copied().unwrap_or_default();
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "keel engine pid {} — {} — open orders {} (unknown {}) — kill switch {}",
        s.pid,
        engine_state_text(s.state),
        s.scalar("keel_open_orders", ""),
        s.scalar("keel_unknown_orders", ""),
        if s.scalar("keel_kill_switch", "") == 1 {
            "ON"
        } else {
            "off"
        }
    );
    let _ = writeln!(
        o,
        "commands {}  sent new {} cancel {} replace {} query {}  shed {} throttled {} breaker-refused {}  events lost {}",
        s.scalar("keel_commands_total", ""),
        s.scalar("keel_sent_total", "kind=\"new\""),
        s.scalar("keel_sent_total", "kind=\"cancel\""),
        s.scalar("keel_sent_total", "kind=\"replace\""),
        s.scalar("keel_sent_total", "kind=\"query\""),
        s.scalar("keel_shed_total", ""),
        s.scalar("keel_throttled_total", ""),
        s.scalar("keel_breaker_refused_total", ""),
        s.scalar("keel_events_lost_total", ""),
    );
    let refused: Vec<String> = s
        .metrics
        .iter()
        .filter(|(d, v)| d.name == "keel_refused_total" && *v != Value::Scalar(0))
        .map(|(d, v)| {
            let n = match v {
                Value::Scalar(n) => *n,
                Value::Histogram { .. } => 0,
            };
            format!("{} {n}", label_value(&d.labels, "reason").unwrap_or("?"))
        })
        .collect();
    let _ = writeln!(
        o,
        "refused: {}",
        if refused.is_empty() {
            "none".to_string()
        } else {
            refused.join(", ")
        }
    );
    for (name, labels, bound) in [
        ("new", "class=\"new\"", b.decision_p99_ns),
        ("cancel", "class=\"cancel\"", 0),
    ] {
        if let Some(p99) = p(s, "keel_decision_seconds", labels, 0.99) {
            let _ = writeln!(
                o,
                "decision ({name}): p50 {} µs, p99 {} µs{}",
                micros(p(s, "keel_decision_seconds", labels, 0.5).unwrap_or(0)),
                micros(p99),
                against(Some(p99), bound)
            );
        }
    }
    let _ = writeln!(
        o,
        "\n{:<12} {:<13} {:<9} {:>6} {:>8} {:>8} {:>6} {:>9} {:>14} {:>12} {:>12} {:>6} {:>9}",
        "venue",
        "link",
        "breaker",
        "fail‰",
        "connects",
        "failures",
        "unrec",
        "in-flight",
        "lanes c/ro/r/n",
        "ack p99 µs",
        "cancel p99",
        "cap‰",
        "refusals"
    );
    let (worst, worst_e2e) = venue_rows(&mut o, s);
    for (d, _) in s
        .metrics
        .iter()
        .filter(|(d, _)| d.name == "keel_link_position_mismatches")
    {
        let differ = s.scalar("keel_link_position_mismatches", &d.labels);
        if differ > 0 {
            let _ = writeln!(
                o,
                "venue {}: positions differ from the venue's in {differ} symbols (link READ-ONLY; \
                 both figures in the engine's log)",
                label_value(&d.labels, "venue").unwrap_or("?"),
            );
        }
    }
    if b.new_ack_p99_ns > 0 || b.cancel_ack_p99_ns > 0 {
        let _ = writeln!(
            o,
            "venue round trips, worst venue: new-order ack p99 {} µs{}, cancel ack p99 {} µs{}",
            worst.0.map_or("-".into(), micros),
            against(worst.0, b.new_ack_p99_ns),
            worst.1.map_or("-".into(), micros),
            against(worst.1, b.cancel_ack_p99_ns)
        );
    }
    if worst_e2e.is_some() || b.e2e_p99_ns > 0 {
        let _ = writeln!(
            o,
            "end to end (arrival at keel to the venue's answer, queues included), worst venue: \
             new-order p99 {} µs{}",
            worst_e2e.map_or("-".into(), micros),
            against(worst_e2e, b.e2e_p99_ns)
        );
    }
    let strategies: Vec<(&str, u64, u64, u64)> = s
        .metrics
        .iter()
        .filter(|(d, _)| d.name == "keel_strategy_disabled")
        .filter_map(|(d, v)| {
            let id = label_value(&d.labels, "strategy")?;
            let l = format!("strategy=\"{id}\"");
            let disabled = matches!(v, Value::Scalar(1));
            Some((
                id,
                u64::from(disabled),
                s.scalar("keel_strategy_commands_total", &l),
                s.scalar("keel_strategy_lost_total", &l),
            ))
        })
        .collect();
    for (id, disabled, commands, lost) in strategies {
        let _ = writeln!(
            o,
            "strategy {id}: {}, {commands} commands over shared memory, lost {lost}",
            if disabled == 1 { "DISABLED" } else { "enabled" }
        );
    }
    let feeds: Vec<&str> = s
        .metrics
        .iter()
        .filter(|(d, _)| d.name == "keel_feed_synced")
        .filter_map(|(d, _)| label_value(&d.labels, "feed"))
        .collect();
    for id in feeds {
        let l = format!("feed=\"{id}\"");
        let _ = write!(
            o,
            "feed {id}: {}, {} snapshots, {} deltas, {} gaps, {} resyncs, {} disconnects",
            if s.scalar("keel_feed_synced", &l) == 1 {
                "synced"
            } else {
                "NOT SYNCED"
            },
            s.scalar("keel_feed_snapshots_total", &l),
            s.scalar("keel_feed_deltas_total", &l),
            s.scalar("keel_feed_gaps_total", &l),
            s.scalar("keel_feed_resyncs_total", &l),
            s.scalar("keel_feed_disconnects_total", &l),
        );
        if let Some(Value::Histogram { count, sum_ns, .. }) =
            s.get("keel_rest_acquire_wait_seconds", &l)
        {
            let mean = if *count == 0 { 0 } else { sum_ns / count };
            let _ = write!(
                o,
                "; REST gate: wait mean {} µs p99 {} µs, {} granted, {} acquire timeouts, 429 {}, 418 {}, {} retries, rate {}‰",
                micros(mean),
                p(s, "keel_rest_acquire_wait_seconds", &l, 0.99).map_or("-".into(), micros),
                s.scalar("keel_rest_granted_total", &l),
                s.scalar("keel_rest_acquire_timeouts_total", &l),
                s.scalar("keel_rest_responses_total", &format!("{l},status=\"429\"")),
                s.scalar("keel_rest_responses_total", &format!("{l},status=\"418\"")),
                s.scalar("keel_rest_retries_total", &l),
                s.scalar("keel_rest_rate_permille", &l),
            );
        }
        let _ = writeln!(o);
    }
    o
}

/// One row per venue link (state, breaker, connects, lanes, ack p99s, the controller's cap,
/// the venue's refusals); returns the worst venue's new-order and cancel ack p99s and its
/// end-to-end p99.
fn venue_rows(o: &mut String, s: &Snapshot) -> ((Option<u64>, Option<u64>), Option<u64>) {
    use std::fmt::Write as _;
    let venues: Vec<&str> = s
        .metrics
        .iter()
        .filter(|(d, _)| d.name == "keel_link_state")
        .filter_map(|(d, _)| label_value(&d.labels, "venue"))
        .collect();
    let mut worst = (None::<u64>, None::<u64>);
    let mut worst_e2e = None::<u64>;
    for v in venues {
        let l = format!("venue=\"{v}\"");
        let max = |a: Option<u64>, b: Option<u64>| a.max(b);
        worst.0 = max(worst.0, p(s, "keel_new_order_ack_seconds", &l, 0.99));
        worst.1 = max(worst.1, p(s, "keel_cancel_ack_seconds", &l, 0.99));
        worst_e2e = max(worst_e2e, p(s, "keel_order_e2e_seconds", &l, 0.99));
        let lane = |k: &str| s.scalar("keel_lane_depth", &format!("{l},lane=\"{k}\""));
        let _ = writeln!(
            o,
            "{:<12} {:<13} {:<9} {:>6} {:>8} {:>8} {:>6} {:>9} {:>14} {:>12} {:>12} {:>6} {:>9}",
            v,
            link_state_text(s.scalar("keel_link_state", &l)),
            breaker_text(s.scalar("keel_breaker_state", &l)),
            s.scalar("keel_breaker_failure_permille", &l),
            s.scalar("keel_link_connects_total", &l),
            s.scalar("keel_link_connect_failures_total", &l),
            s.scalar("keel_link_unreconciled", &l),
            s.scalar("keel_venue_in_flight", &l),
            format!(
                "{}/{}/{}/{}",
                lane("cancel"),
                lane("reduce"),
                lane("replace"),
                lane("new")
            ),
            p(s, "keel_new_order_ack_seconds", &l, 0.99).map_or("-".into(), micros),
            p(s, "keel_cancel_ack_seconds", &l, 0.99).map_or("-".into(), micros),
            match s.scalar("keel_control_new_rate_permille", &l) {
                1000.. => "full".to_string(),
                cap => cap.to_string(),
            },
            s.scalar("keel_venue_throttle_rejects_total", &l)
                + s.scalar("keel_venue_cancel_refused_total", &l),
        );
    }
    (worst, worst_e2e)
}

/// Every metric of one snapshot as JSON.
pub fn json(s: &Snapshot) -> String {
    let metrics: Vec<serde_json::Value> = s
        .metrics
        .iter()
        .map(|(d, v)| {
            let mut m = serde_json::json!({
                "name": d.name,
                "labels": d.labels,
                "kind": match d.kind {
                    MetricKind::Counter => "counter",
                    MetricKind::Gauge => "gauge",
                    MetricKind::Histogram => "histogram",
                },
            });
            match v {
                Value::Scalar(n) => m["value"] = (*n).into(),
                Value::Histogram {
                    count,
                    sum_ns,
                    counts,
                } => {
                    m["count"] = (*count).into();
                    m["sum_ns"] = (*sum_ns).into();
                    for (key, q) in [("p50_ns", 0.5), ("p99_ns", 0.99), ("p999_ns", 0.999)] {
                        m[key] = quantile(counts, q).into();
                    }
                    m["buckets"] = counts.clone().into();
                }
            }
            m
        })
        .collect();
    serde_json::json!({
        "pid": s.pid,
        "state": engine_state_text(s.state),
        "started_unix_ns": s.started_unix_ns,
        "metrics": metrics,
    })
    .to_string()
}
