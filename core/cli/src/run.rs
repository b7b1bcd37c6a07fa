//! `keel run --config FILE`: the engine against the configured venues, serving strategies over
//! shared memory, until SIGINT or SIGTERM (or `--duration-s`). At stop it syncs the journal and
//! prints what it did, including every order still open.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use keel::clock::{Clock, TscClock};
use keel::config::EngineConfig;
use keel::engine::{EngineBuilder, EngineReport, Topology};
use keel::session::protocol::ProtocolStats;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The engine configuration (TOML; see docs/config.md and docs/keel.example.toml). It
    /// must configure a `[journal]` (crash safety) and an `[ipc]` directory (where strategies
    /// find their channels, `strategy-<id>`).
    #[arg(long)]
    config: PathBuf,
    /// Stop after this many seconds (0: run until SIGINT or SIGTERM).
    #[arg(long, default_value_t = 0)]
    duration_s: u64,
    /// Seconds between status lines on stderr (0: none).
    #[arg(long, default_value_t = 1)]
    status_s: u64,
}

pub fn run(args: RunArgs) -> ExitCode {
    let (config, journal, ipc) = match load(&args) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    keel::log::install();
    // Signals are counted: the first stops (cancel-on-stop first, if configured), the second
    // stops at once.
    let signals = Arc::new(AtomicUsize::new(0));
    match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) {
        Ok(mut incoming) => {
            let count = Arc::clone(&signals);
            let _ = std::thread::Builder::new()
                .name("keel-signals".into())
                .spawn(move || {
                    for _ in incoming.forever() {
                        count.fetch_add(1, Ordering::AcqRel);
                    }
                });
        }
        Err(e) => {
            keel::warn_line!("keel run: cannot watch SIGINT/SIGTERM: {e}");
            return ExitCode::from(71);
        }
    }
    let venues: Vec<String> = config.venues.iter().map(|v| v.name.clone()).collect();
    let symbols: Vec<String> = config
        .symbols
        .iter()
        .map(|s| String::from_utf8_lossy(s).trim_end().to_string())
        .collect();
    let operator = config.operator.clone();
    let admin_socket = config.admin_socket();
    let counters_file = config.counters_file();
    let metrics = config.metrics.clone();
    let loop_cores: Vec<usize> = [config.loops.dispatcher_core, config.loops.executor_core]
        .into_iter()
        .flatten()
        .collect();
    let topology = config.loops.topology;
    let transport = config.loops.transport;
    let strategies = config.dispatcher.strategies;
    let mut engine = match EngineBuilder::new(config).start() {
        Ok(e) => e,
        Err(e) => {
            keel::warn_line!("keel run: {e}");
            return ExitCode::from(1);
        }
    };
    let mut admin = None;
    if let Some(path) = &admin_socket {
        match engine.serve_admin(path) {
            Ok(counters) => {
                admin = counters;
                tracing::info!(target: "keel::ctl", socket = %path.display(), "admin socket open");
            }
            Err(e) => {
                keel::warn_line!("keel run: {e}");
                let _ = engine.stop();
                return ExitCode::from(1);
            }
        }
    }
    let monitor_stop = Arc::new(AtomicBool::new(false));
    let mut monitor = None;
    let control_on = metrics.control.enabled;
    if let (true, Some(file)) = (metrics.http.is_some() || control_on, &counters_file) {
        let control = match (control_on, engine.take_control()) {
            (true, Some(ring)) => Some((metrics.control.clone(), ring)),
            _ => None,
        };
        let side = keel::monitor::SideThread {
            counters: file.clone(),
            alerts: metrics.alerts.clone(),
            budget: metrics.budget,
            control,
            avoid: loop_cores,
        };
        match keel::monitor::spawn(metrics.http, side, Arc::clone(&monitor_stop)) {
            Ok(spawned) => {
                if let Some(bound) = spawned.addr {
                    tracing::info!(
                        target: "keel::monitor",
                        url = %format!("http://{bound}/"),
                        "monitor serving /metrics, /health and the live page"
                    );
                }
                if let Some((_, off)) = &spawned.control {
                    engine.set_control_switch(Arc::clone(off));
                    tracing::info!(
                        target: "keel::control",
                        interval_ms = metrics.control.interval_ns / 1_000_000,
                        "adaptive controller on"
                    );
                }
                monitor = Some(spawned.thread);
            }
            Err(e) => {
                keel::warn_line!("keel run: {e}");
                let _ = engine.stop();
                return ExitCode::from(1);
            }
        }
    }
    let r = engine.restored();
    keel::say_line!(
        "keel run: {} topology, {} transport asked, {} venue(s), {} strategies over shared \
         memory in {}",
        match topology {
            Topology::Inline => "inline",
            Topology::Split => "split",
        },
        transport,
        venues.len(),
        strategies,
        ipc.dir.display()
    );
    keel::say_line!(
        "keel run: journal {}: {} records replayed ({} torn-tail bytes ignored); {} orders \
         restored live, {} in doubt (queried, never resent); streams resume after {:?}; id \
         floors {:?}",
        journal.dir.display(),
        r.journal.records,
        r.journal.torn_tail_bytes,
        r.orders.live,
        r.orders.unknown,
        r.applied_through,
        r.id_floor
    );
    let _ = std::io::stdout().flush();
    let clock = TscClock::new();
    let started = clock.now_ns();
    let mut last_status = started;
    let mut failed = false;
    while signals.load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_millis(20));
        if engine.has_failed() {
            failed = true;
            break;
        }
        let now = clock.now_ns();
        let elapsed = Duration::from_nanos(now - started);
        if args.duration_s > 0 && elapsed >= Duration::from_secs(args.duration_s) {
            break;
        }
        if args.status_s > 0 && now - last_status >= args.status_s * 1_000_000_000 {
            last_status = now;
            let synced: Vec<&str> = venues
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    if engine.venue_synced(keel::order::VenueId(i as u16)) {
                        name.as_str()
                    } else {
                        "-"
                    }
                })
                .collect();
            keel::warn_line!(
                "keel run: {:>6.1}s synced [{}] passes {}",
                elapsed.as_secs_f64(),
                synced.join(" "),
                engine.passes()
            );
        }
    }
    if signals.load(Ordering::Acquire) > 0 && operator.cancel_on_stop && !failed {
        cancel_on_stop(&engine, &signals, operator.stop_timeout_ns, &clock);
    }
    if let Some(a) = &admin {
        keel::say_line!(
            "keel run: operator commands: {} ok, {} errors, {} unanswered, {} unreadable",
            a.ok.load(Ordering::Relaxed),
            a.errors.load(Ordering::Relaxed),
            a.timeouts.load(Ordering::Relaxed),
            a.bad_requests.load(Ordering::Relaxed)
        );
    }
    let stopped = engine.stop();
    // The monitor's last readings see the engine stopped; then it goes too.
    monitor_stop.store(true, Ordering::Release);
    if let Some(m) = monitor {
        let _ = m.join();
    }
    match stopped {
        Ok(report) => {
            print_report(&report, &venues, &symbols);
            ExitCode::from(u8::from(failed))
        }
        Err(e) => {
            keel::warn_line!("keel run: {e}");
            ExitCode::from(1)
        }
    }
}

/// Reads and checks `keel run`'s configuration file: it must name a journal (orders survive a
/// crash) and an IPC directory (where strategies connect). A refusal is said on stderr and
/// answered with the exit code (66: unreadable, 65: refused).
fn load(
    args: &RunArgs,
) -> Result<
    (
        EngineConfig,
        keel::journal::JournalConfig,
        keel::engine::IpcConfig,
    ),
    ExitCode,
> {
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(e) => {
            keel::warn_line!("keel run: cannot read {}: {e}", args.config.display());
            return Err(ExitCode::from(66));
        }
    };
    let config = match EngineConfig::from_toml(&text) {
        Ok(c) => c,
        Err(e) => {
            keel::warn_line!("keel run: {}: {e}", args.config.display());
            return Err(ExitCode::from(65));
        }
    };
    for w in config.warnings() {
        keel::warn_line!("keel: warning: {w}");
    }
    // The host against what the benchmarks assume: warnings only (docs/tuning.md).
    for c in crate::preflight::for_config(&config) {
        if let crate::preflight::Verdict::Warn(_) = c.verdict {
            keel::warn_line!("keel: preflight: {}", crate::preflight::line(&c));
        }
    }
    let (Some(journal), Some(ipc)) = (config.journal.clone(), config.ipc.clone()) else {
        keel::warn_line!(
            "keel run: {}: needs a [journal] table (orders must survive a crash) and an [ipc] \
             table (where strategies connect)",
            args.config.display()
        );
        return Err(ExitCode::from(65));
    };
    Ok((config, journal, ipc))
}

/// Cancel-on-stop: kill switch on, every open order canceled, answers awaited until none is
/// open, the bound passes, or a second signal comes.
fn cancel_on_stop(
    engine: &keel::engine::RunningEngine,
    signals: &AtomicUsize,
    timeout_ns: u64,
    clock: &TscClock,
) {
    let open = engine.open_orders();
    tracing::warn!(
        target: "keel::stop",
        open_orders = open,
        timeout_ms = timeout_ns / 1_000_000,
        "stopping: kill switch on, canceling every open order (a second signal stops at once)"
    );
    engine.cancel_everything();
    let start = clock.now_ns();
    loop {
        let open = engine.open_orders();
        let waited = clock.now_ns() - start;
        // Only a count the dispatcher published after canceling is trusted.
        if open == 0 && engine.cancel_runs() > 0 {
            tracing::info!(target: "keel::stop", waited_ms = waited / 1_000_000, "no order open");
            return;
        }
        if signals.load(Ordering::Acquire) > 1 {
            tracing::warn!(target: "keel::stop", open_orders = open, "second signal: stopping now");
            return;
        }
        if waited >= timeout_ns {
            tracing::error!(
                target: "keel::stop",
                open_orders = open,
                "stop timeout: orders still open at keel (listed below): their cancels may still be on the wire; check the venue"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn print_report(report: &EngineReport, venues: &[String], symbols: &[String]) {
    let mut out = std::io::stdout().lock();
    let d = &report.dispatch;
    if let Some(t) = report.transport {
        let _ = writeln!(out, "keel run: executor transport {t}");
    }
    let _ = writeln!(
        out,
        "keel run: stopped. commands {} | sent new {} cancel {} replace {} query {} | shed {} \
         throttled {} breaker-refused {} | report errors {} | journal records {} ({} errors) \
         | duplicate-id rejects {} | cancels answered at their order's close {}",
        d.commands,
        d.sent_new,
        d.sent_cancel,
        d.sent_replace,
        d.sent_query,
        d.shed,
        d.throttled,
        d.breaker_refused,
        d.report_errors,
        report.journal_records,
        d.journal_errors,
        d.duplicate_id_rejects,
        d.moot_cancels
    );
    for (name, l) in venues.iter().zip(&report.links) {
        let _ = writeln!(
            out,
            "venue {name}: {}; {} connects, {} synced, {} reconciliations ({} not received, \
             {} unresolved, {} reconciliation timeouts), {} duplicates skipped, {} timeouts, \
             {} stalls of keel's own loop",
            l.state,
            l.session.connects,
            l.session.synced,
            l.client.reconciliations,
            l.client.last_reconciliation.not_received,
            l.session.unreconciled,
            l.session.reconcile_timeouts,
            l.client.duplicates_skipped,
            l.client.timeouts,
            l.link.loop_stalls
        );
        let r = l.client.last_reconciliation;
        let _ = writeln!(
            out,
            "venue {name}: contradictions {} (last {}), last reconciliation: {} in doubt, {} \
             unknown at keel, {} contradictions open; {} executions booked outside their order; \
             {} late reports absorbed; {} decode errors \
             (last {}); {} reconciliation queries, {} refused read-only; wire references \
             adopted {}; logins refused for a new venue session {}",
            l.client.contradictions,
            l.client
                .last_contradiction
                .map_or_else(|| "none".to_string(), |c| c.to_string()),
            r.in_doubt,
            r.unknown_at_keel,
            r.contradictions,
            l.client.unmatched_executions,
            l.client.late_reports_absorbed,
            l.link.decode_errors,
            l.link
                .last_decode_error
                .map_or_else(|| "none".to_string(), |e| e.to_string()),
            l.link.reconcile_queries,
            l.link.refused_read_only,
            l.client.wire_refs_adopted,
            l.client.new_session_refused
        );
        let _ = writeln!(
            out,
            "venue {name}: position mismatches {} ({} at the last reconciliation; first: {}), \
             positions adopted from the venue {}",
            l.client.position_mismatches,
            r.position_mismatches,
            l.client.last_position_mismatch.map_or_else(
                || "none".to_string(),
                |m| format!(
                    "{} keel {} venue {}",
                    String::from_utf8_lossy(&m.symbol).trim_end(),
                    m.keel,
                    m.venue
                )
            ),
            l.client.positions_adopted
        );
        let mut own = String::new();
        l.protocol.each(&mut |counter, value| {
            let _ = std::fmt::Write::write_fmt(&mut own, format_args!(" {counter}={value}"));
        });
        let _ = writeln!(out, "venue {name}: {}:{own}", l.protocol.protocol());
    }
    for (strategy, b) in &report.bridges {
        let _ = writeln!(
            out,
            "strategy {}: {} commands, {} events, {} malformed, attached {}, lost {}, broken {}, \
             never attached after a restart {}, mass cancels on loss {}",
            strategy.0,
            b.commands,
            b.events,
            b.malformed,
            b.attached,
            b.lost,
            b.broken,
            b.never_attached,
            b.cancels_on_loss
        );
    }
    for (i, f) in report.feeds.iter().enumerate() {
        let _ = writeln!(
            out,
            "feed {i}: {} connects, {} snapshots, {} deltas, {} trades; {} gaps, {} duplicates, \
             {} crossed, {} resyncs, {} trade gaps; REST snapshots asked {}, failed {}",
            f.connects,
            f.snapshots,
            f.deltas,
            f.trades,
            f.gaps,
            f.duplicates,
            f.crossed,
            f.resyncs,
            f.trade_gaps,
            f.rest_requests,
            f.rest_failures
        );
    }
    let _ = writeln!(out, "open orders: {}", report.open_orders.len());
    let name = |names: &[String], i: u16| {
        names
            .get(usize::from(i))
            .cloned()
            .unwrap_or_else(|| i.to_string())
    };
    for o in &report.open_orders {
        let _ = writeln!(
            out,
            "open {} strategy={} seq={} venue={} symbol={} side={} price={} qty={} filled={} \
             state={} clordid={}",
            o.id.0,
            o.strategy.0,
            o.id.sequence(),
            name(venues, o.venue.0),
            name(symbols, o.symbol.0),
            match o.side {
                keel::order::Side::Buy => "buy",
                keel::order::Side::Sell => "sell",
            },
            keel::engine::admin::price_text(o.price.0),
            o.qty,
            o.filled_qty,
            keel::engine::admin::state_name(o.state),
            o.id
        );
    }
}
