//! The out-of-band side thread: its own thread and its own port, never a loop core. It reads
//! the counters file (never the loops' memory), evaluates the alert thresholds, and serves
//! HTTP (many clients side by side: `http.rs`): Prometheus text at `/metrics`, readiness at
//! `/health`, the state as JSON at `/api/state` and its last 15 minutes at `/api/history`
//! (`history.rs`), a live dashboard at `/` fed by server-sent events at `/events`. A storm on
//! the business path cannot make it think the engine is dead, and a slow scraper or browser
//! cannot slow a loop: the loops only ever write their regions of the file.

pub mod alerts;
pub mod control;
pub mod history;
pub mod http;
pub mod prometheus;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use alerts::{Alerts, AlertsConfig, BudgetConfig};
use control::{ControlConfig, Controller};

use crate::clock::{Clock, TscClock};
use crate::metrics::engine::{breaker_text, engine_state_text, label_value, link_state_text};
use crate::metrics::histogram::quantile;
use crate::metrics::{CountersReader, Snapshot, Value};

/// How often the side thread reads the counters file (alerts and the live page run at this rate).
const READ_INTERVAL_NS: u64 = 250_000_000;
/// Longest wait for a socket while the controller runs (it decides when it is due).
const CONTROL_WAIT_NS: u64 = 5_000_000;

/// What the side thread counted (also in `/metrics`).
#[derive(Debug, Default)]
pub struct MonitorCounters {
    /// Requests answered, any path, any status.
    pub requests: AtomicU64,
    /// Requests refused (malformed, too large, unfinished in time, unknown path, wrong method).
    pub bad_requests: AtomicU64,
    /// Live-page clients dropped (too slow to take their events, or too many).
    pub clients_dropped: AtomicU64,
    /// Readings of the counters file.
    pub readings: AtomicU64,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections open now (a gauge: reading, answering, lingering, streaming).
    pub connections: AtomicU64,
    /// Connections that sent not one byte by their deadline, closed unanswered.
    pub silent_closed: AtomicU64,
    /// Connections whose request head was still unfinished at its deadline (answered 400).
    pub slow_cut: AtomicU64,
    /// Connections closed to make room in a full table (the oldest silent one first).
    pub evicted: AtomicU64,
    /// Answers the client did not take within their deadline (connection cut).
    pub write_timeouts: AtomicU64,
}

impl MonitorCounters {
    /// The connection handling's counters and gauge, as `/metrics` lines.
    fn export_connections(&self, extra: &mut Vec<(String, &'static str, String, f64)>) {
        for (name, v) in [
            ("keel_monitor_accepted_total", &self.accepted),
            ("keel_monitor_silent_closed_total", &self.silent_closed),
            ("keel_monitor_slow_cut_total", &self.slow_cut),
            ("keel_monitor_evicted_total", &self.evicted),
            ("keel_monitor_write_timeouts_total", &self.write_timeouts),
        ] {
            let v = v.load(Ordering::Relaxed) as f64;
            extra.push((name.to_string(), "counter", String::new(), v));
        }
        let open = self.connections.load(Ordering::Relaxed) as f64;
        extra.push((
            "keel_monitor_connections".into(),
            "gauge",
            String::new(),
            open,
        ));
    }
}

/// Why the side thread could not start.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// The port could not be bound.
    #[error("monitor: cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The counters file could not be read.
    #[error("monitor: {0}")]
    Counters(#[from] crate::metrics::CountersError),
}

/// The side thread's state.
pub struct Monitor {
    /// Its port and connections (`None`: no HTTP, the thread runs the controller only).
    http: Option<http::Server>,
    /// The adaptive controller and its ring into the dispatcher loop, if switched on.
    control: Option<(Controller, crate::engine::control::ControlSender)>,
    reader: CountersReader,
    alerts: Alerts,
    history: history::History,
    last: Option<Snapshot>,
    clock: TscClock,
    counters: Arc<MonitorCounters>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("addr", &self.local_addr())
            .finish_non_exhaustive()
    }
}

impl Monitor {
    /// Binds `addr` (if given) and opens the counters file at `counters`.
    pub fn bind(
        addr: Option<SocketAddr>,
        counters: &std::path::Path,
        alerts: AlertsConfig,
        budget: BudgetConfig,
    ) -> Result<Self, MonitorError> {
        let clock = TscClock::new();
        let monitor_counters: Arc<MonitorCounters> = Arc::default();
        let http = match addr {
            Some(addr) => {
                let server = TcpListener::bind(addr).and_then(|listener| {
                    http::Server::new(listener, clock.clone(), Arc::clone(&monitor_counters))
                });
                Some(server.map_err(|source| MonitorError::Listen { addr, source })?)
            }
            None => None,
        };
        Ok(Self {
            http,
            control: None,
            reader: CountersReader::open(counters)?,
            alerts: Alerts::new(alerts, budget),
            history: history::History::default(),
            last: None,
            clock,
            counters: monitor_counters,
        })
    }

    /// The address it serves.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(http::Server::local_addr)
    }

    /// Runs the adaptive controller on this thread, sending through `ring`; returns its
    /// counters and its off switch. A `config` switched off changes nothing.
    pub fn control(
        &mut self,
        config: ControlConfig,
        ring: crate::engine::control::ControlSender,
    ) -> (
        Arc<control::ControllerCounters>,
        Arc<std::sync::atomic::AtomicBool>,
    ) {
        let controller = Controller::new(config, &self.reader.snapshot());
        let handles = (controller.counters(), controller.off_switch());
        self.control = Some((controller, ring));
        handles
    }

    /// Its counters.
    pub fn counters(&self) -> Arc<MonitorCounters> {
        Arc::clone(&self.counters)
    }

    /// Serves until `stop`; avoids the cores in `avoid` (the loops') where it can.
    pub fn run(mut self, stop: &AtomicBool, avoid: &[usize]) {
        avoid_cores(avoid);
        let mut next_read = 0;
        while !stop.load(Ordering::Acquire) {
            let now = self.clock.now_ns();
            if now >= next_read {
                next_read = now + READ_INTERVAL_NS;
                self.read(now);
                self.push_events();
            }
            if let Some((controller, ring)) = &mut self.control {
                // The controller reads the file at its own interval, not at every turn here.
                if controller.due(now) {
                    let snap = self.reader.snapshot();
                    controller.tick(now, &snap, ring);
                }
            }
            let mut wait_ns = next_read.saturating_sub(now);
            if self.control.is_some() {
                wait_ns = wait_ns.min(CONTROL_WAIT_NS);
            }
            // Taken out for the pass so the routes can borrow the rest of the monitor.
            match self.http.take() {
                Some(mut server) => {
                    server.turn(wait_ns, |request| self.route(request));
                    self.http = Some(server);
                }
                None => std::thread::sleep(Duration::from_nanos(wait_ns.max(1_000_000))),
            }
        }
        // Stopping: whatever the controller capped stays with the engine, which stops too.
    }

    fn read(&mut self, now: u64) {
        let snap = self.reader.snapshot();
        self.alerts.evaluate(now, &snap);
        self.history.record(now, &snap, &self.alerts);
        self.counters.readings.fetch_add(1, Ordering::Relaxed);
        self.last = Some(snap);
    }

    fn push_events(&mut self) {
        if self.http.as_ref().is_none_or(|s| s.streams() == 0) {
            return;
        }
        // A client too far behind is dropped: the next reading is newer anyway, and nothing
        // here ever waits on a browser.
        let event = format!("data: {}\n\n", self.state_json());
        if let Some(server) = &mut self.http {
            server.broadcast(event.as_bytes());
        }
    }

    /// What a complete request is answered.
    fn route(&mut self, request: &http::Request) -> http::Answer {
        use http::Answer;
        if request.method != "GET" && request.method != "HEAD" {
            self.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            return Answer::refuse("405 Method Not Allowed", "GET only\n");
        }
        // Each answer shows the file as it is now (alerts as of their last evaluation).
        self.last = Some(self.reader.snapshot());
        let page = |status, content_type, body: String| Answer::Page {
            status,
            content_type,
            body: body.into_bytes(),
        };
        match request.path.as_str() {
            "/metrics" => {
                let snap = self.last.clone().unwrap_or_else(|| self.reader.snapshot());
                let text = prometheus::render(&snap, &self.extra_metrics());
                page("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
            }
            "/health" => {
                let (ready, why) = self.health();
                let status = if ready {
                    "200 OK"
                } else {
                    "503 Service Unavailable"
                };
                page(status, "text/plain; charset=utf-8", why)
            }
            "/api/state" => page("200 OK", "application/json", self.state_json()),
            "/api/history" => {
                let json = self.history.json(self.clock.now_ns());
                page("200 OK", "application/json", json)
            }
            "/" | "/index.html" => page("200 OK", "text/html; charset=utf-8", DASHBOARD.into()),
            "/events" => Answer::Stream(format!("data: {}\n\n", self.state_json())),
            _ => {
                self.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                Answer::refuse("404 Not Found", "no such page\n")
            }
        }
    }

    /// Ready only when the engine runs, every loop makes progress and every venue is SYNCED.
    fn health(&self) -> (bool, String) {
        let Some(s) = &self.last else {
            return (false, "no reading yet\n".into());
        };
        if s.state != 2 {
            return (false, "engine not running\n".into());
        }
        let stalled: Vec<String> = self
            .alerts
            .loops()
            .iter()
            .zip(alerts::LOOP_NAMES)
            .filter(|(p, _)| p.stalled)
            .map(|(p, name)| {
                let ms = self.clock.now_ns().saturating_sub(p.moved_ns) / 1_000_000;
                format!("{name} (no progress for {ms} ms)")
            })
            .collect();
        if !stalled.is_empty() {
            return (false, format!("loop stalled: {}\n", stalled.join(", ")));
        }
        let mut not = Vec::new();
        for (d, v) in &s.metrics {
            if d.name == "keel_link_state" && *v != Value::Scalar(4) {
                not.push(label_value(&d.labels, "venue").unwrap_or("?").to_string());
            }
        }
        if not.is_empty() {
            (true, "ready: every venue SYNCED\n".into())
        } else {
            (false, format!("not SYNCED: {}\n", not.join(" ")))
        }
    }

    fn extra_metrics(&self) -> Vec<(String, &'static str, String, f64)> {
        let mut extra = Vec::new();
        // Liveness first: `prometheus::render` reads `keel_loop_stalled` for `keel_up`.
        let now = self.clock.now_ns();
        for (name, value) in [
            ("keel_loop_stalled", true),
            ("keel_loop_still_seconds", false),
        ] {
            for (p, l) in self.alerts.loops().iter().zip(alerts::LOOP_NAMES) {
                let v = if value {
                    f64::from(u8::from(p.stalled))
                } else {
                    now.saturating_sub(p.moved_ns) as f64 / 1e9
                };
                extra.push((name.to_string(), "gauge", format!("loop=\"{l}\""), v));
            }
        }
        let alert_labels = |a: &alerts::Alert| match a.subject.as_str() {
            "" => format!("alert=\"{}\"", a.name),
            subject => format!("alert=\"{}\",{subject}", a.name),
        };
        for a in self.alerts.alerts() {
            extra.push((
                "keel_alert_firing".to_string(),
                "gauge",
                alert_labels(a),
                f64::from(u8::from(a.firing)),
            ));
        }
        for a in self.alerts.alerts() {
            let labels = alert_labels(a);
            extra.push((
                "keel_alerts_fired_total".to_string(),
                "counter",
                labels,
                a.fired as f64,
            ));
        }
        if let Some(s) = &self.last {
            for (d, _) in s
                .metrics
                .iter()
                .filter(|(d, _)| d.name == "keel_link_state")
            {
                let venue = label_value(&d.labels, "venue").unwrap_or("?");
                let (baseline, window) = self.alerts.p99(venue);
                for (name, value) in [
                    ("keel_e2e_p99_baseline_seconds", baseline),
                    ("keel_e2e_p99_window_seconds", window),
                ] {
                    if let Some(ns) = value {
                        extra.push((name.to_string(), "gauge", d.labels.clone(), ns as f64 / 1e9));
                    }
                }
            }
        }
        let b = self.alerts.budget();
        for (name, ns) in [
            ("decision_p99", b.decision_p99_ns),
            ("new_ack_p99", b.new_ack_p99_ns),
            ("e2e_p99", b.e2e_p99_ns),
            ("cancel_ack_p99", b.cancel_ack_p99_ns),
        ] {
            if ns > 0 {
                extra.push((
                    "keel_budget_seconds".to_string(),
                    "gauge",
                    format!("budget=\"{name}\""),
                    ns as f64 / 1e9,
                ));
            }
        }
        if let Some((controller, ring)) = &self.control {
            let c = controller.counters();
            for (name, v) in [
                (
                    "keel_controller_ticks_total",
                    c.ticks.load(Ordering::Relaxed),
                ),
                (
                    "keel_controller_decreases_total",
                    c.decreases.load(Ordering::Relaxed),
                ),
                (
                    "keel_controller_increases_total",
                    c.increases.load(Ordering::Relaxed),
                ),
                (
                    "keel_controller_sheds_total",
                    c.sheds.load(Ordering::Relaxed),
                ),
                (
                    "keel_controller_unsheds_total",
                    c.unsheds.load(Ordering::Relaxed),
                ),
                (
                    "keel_controller_commands_total",
                    c.commands.load(Ordering::Relaxed),
                ),
                ("keel_controller_ring_full_total", ring.ring_full()),
            ] {
                extra.push((name.to_string(), "counter", String::new(), v as f64));
            }
            extra.push((
                "keel_controller_on".to_string(),
                "gauge",
                String::new(),
                f64::from(u8::from(controller.is_on())),
            ));
        }
        let c = &self.counters;
        for (name, v) in [
            ("keel_monitor_requests_total", &c.requests),
            ("keel_monitor_bad_requests_total", &c.bad_requests),
            ("keel_monitor_clients_dropped_total", &c.clients_dropped),
        ] {
            extra.push((
                name.to_string(),
                "counter",
                String::new(),
                v.load(Ordering::Relaxed) as f64,
            ));
        }
        c.export_connections(&mut extra);
        extra
    }

    /// The whole state the page shows, as JSON.
    pub fn state_json(&self) -> String {
        let Some(s) = &self.last else {
            return "{}".into();
        };
        let p99_us = |name: &str, labels: &str| match s.get(name, labels) {
            Some(Value::Histogram { counts, count, .. }) if *count > 0 => {
                serde_json::Value::from(quantile(counts, 0.99) as f64 / 1e3)
            }
            _ => serde_json::Value::Null,
        };
        let mut venues = Vec::new();
        for (d, v) in &s.metrics {
            if d.name != "keel_link_state" {
                continue;
            }
            let name = label_value(&d.labels, "venue").unwrap_or("?");
            let l = &d.labels;
            let lane = |k: &str| s.scalar("keel_lane_depth", &format!("{l},lane=\"{k}\""));
            let (baseline, window) = self.alerts.p99(name);
            let reconnects_hour = self
                .alerts
                .alerts()
                .iter()
                .find(|a| a.name == "reconnects" && a.subject == *l)
                .map_or(String::new(), |a| a.value.clone());
            venues.push(serde_json::json!({
                "name": name,
                "link": match v { Value::Scalar(c) => link_state_text(*c), _ => "?" },
                "mode": match s.scalar("keel_venue_mode", l) { 0 => "down", 1 => "read-only", _ => "trading" },
                "breaker": breaker_text(s.scalar("keel_breaker_state", l)),
                "breaker_opened": s.scalar("keel_breaker_opened_total", l),
                "failure_pct": s.scalar("keel_breaker_failure_permille", l) as f64 / 10.0,
                "connects": s.scalar("keel_link_connects_total", l),
                "connect_failures": s.scalar("keel_link_connect_failures_total", l),
                "reconnects_hour": reconnects_hour,
                "unreconciled": s.scalar("keel_link_unreconciled", l),
                "position_mismatches": s.scalar("keel_link_position_mismatches", l),
                "in_flight": s.scalar("keel_venue_in_flight", l),
                "lanes": { "cancel": lane("cancel"), "reduce": lane("reduce"), "replace": lane("replace"), "new": lane("new") },
                "ack_p99_us": p99_us("keel_new_order_ack_seconds", l),
                "e2e_p99_us": p99_us("keel_order_e2e_seconds", l),
                "cancel_p99_us": p99_us("keel_cancel_ack_seconds", l),
                "window_p99_us": window.map(|p| p as f64 / 1e3),
                "baseline_p99_us": baseline.map(|p| p as f64 / 1e3),
                "new_cap_permille": s.scalar("keel_control_new_rate_permille", l),
                "venue_throttled": s.scalar("keel_venue_throttle_rejects_total", l),
            }));
        }
        let strategies: Vec<serde_json::Value> = s
            .metrics
            .iter()
            .filter(|(d, _)| d.name == "keel_strategy_disabled")
            .map(|(d, v)| {
                let l = &d.labels;
                serde_json::json!({
                    "id": label_value(l, "strategy").unwrap_or("?"),
                    "disabled": *v == Value::Scalar(1),
                    "commands": s.scalar("keel_strategy_commands_total", l),
                    "lost": s.scalar("keel_strategy_lost_total", l),
                    "broken": s.scalar("keel_strategy_broken", l) == 1,
                })
            })
            .collect();
        let refused: serde_json::Map<String, serde_json::Value> = s
            .metrics
            .iter()
            .filter(|(d, v)| d.name == "keel_refused_total" && *v != Value::Scalar(0))
            .map(|(d, v)| {
                let n = match v {
                    Value::Scalar(n) => *n,
                    Value::Histogram { .. } => 0,
                };
                (
                    label_value(&d.labels, "reason").unwrap_or("?").to_string(),
                    n.into(),
                )
            })
            .collect();
        let now = self.clock.now_ns();
        let alerts: Vec<serde_json::Value> = self
            .alerts
            .alerts()
            .iter()
            .map(|a| {
                serde_json::json!({
                    "name": a.name,
                    "subject": a.subject,
                    "firing": a.firing,
                    "for_s": if a.firing { (now.saturating_sub(a.since_ns)) / 1_000_000_000 } else { 0 },
                    "fired": a.fired,
                    "value": a.value,
                })
            })
            .collect();
        let b = self.alerts.budget();
        let budget_us = |ns: u64| (ns > 0).then(|| ns as f64 / 1e3);
        serde_json::json!({
            "pid": s.pid,
            "state": engine_state_text(s.state),
            "kill_switch": s.scalar("keel_kill_switch", "") == 1,
            "open_orders": s.scalar("keel_open_orders", ""),
            "unknown_orders": s.scalar("keel_unknown_orders", ""),
            "commands": s.scalar("keel_commands_total", ""),
            "shed": s.scalar("keel_shed_total", ""),
            "throttled": s.scalar("keel_throttled_total", ""),
            "breaker_refused": s.scalar("keel_breaker_refused_total", ""),
            "refused": refused,
            "decision_p99_us": p99_us("keel_decision_seconds", "class=\"new\""),
            "budget": {
                "decision_p99_us": budget_us(b.decision_p99_ns),
                "new_ack_p99_us": budget_us(b.new_ack_p99_ns),
                "e2e_p99_us": budget_us(b.e2e_p99_ns),
                "cancel_ack_p99_us": budget_us(b.cancel_ack_p99_ns),
            },
            "venues": venues,
            "strategies": strategies,
            "alerts": alerts,
            "control": self.control.as_ref().map(|(c, _)| c.state_json()),
        })
        .to_string()
    }
}

/// Moves the calling thread off `avoid` (the loops' cores) when another core exists.
fn avoid_cores(avoid: &[usize]) {
    if avoid.is_empty() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let others: Vec<usize> = (0..cores).filter(|c| !avoid.contains(c)).collect();
    if others.is_empty() {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes bits inside it for
    // core numbers below the machine's count; sched_setaffinity(0, …) applies to this thread
    // only and reads the set we own.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in &others {
            libc::CPU_SET(c, &mut set);
        }
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The live page: one screen, fed by `/events`.
pub const DASHBOARD: &str = include_str!("dashboard.html");

/// What the side thread needs besides its port.
#[derive(Debug)]
pub struct SideThread {
    /// The engine's counters file.
    pub counters: PathBuf,
    /// `[alerts]`.
    pub alerts: AlertsConfig,
    /// `[budget]`.
    pub budget: BudgetConfig,
    /// `[control]` and the engine's control ring (`None`: no controller).
    pub control: Option<(ControlConfig, crate::engine::control::ControlSender)>,
    /// The loops' cores, kept off.
    pub avoid: Vec<usize>,
}

/// The running side thread: where it serves, the controller's handles, the thread.
#[derive(Debug)]
pub struct Spawned {
    /// The bound address (`None`: no HTTP).
    pub addr: Option<SocketAddr>,
    /// The controller's counters and off switch, if it runs.
    pub control: Option<(
        Arc<control::ControllerCounters>,
        Arc<std::sync::atomic::AtomicBool>,
    )>,
    /// The thread.
    pub thread: std::thread::JoinHandle<()>,
}

/// Spawns the side thread: HTTP on `addr` (if given) and the controller (if given).
pub fn spawn(
    addr: Option<SocketAddr>,
    side: SideThread,
    stop: Arc<AtomicBool>,
) -> Result<Spawned, MonitorError> {
    let mut monitor = Monitor::bind(addr, &side.counters, side.alerts, side.budget)?;
    let control = side
        .control
        .map(|(config, ring)| monitor.control(config, ring));
    let bound = monitor.local_addr();
    let avoid = side.avoid;
    let thread = std::thread::Builder::new()
        .name("keel-monitor".into())
        .spawn(move || monitor.run(&stop, &avoid))
        .expect("spawning the monitor thread");
    Ok(Spawned {
        addr: bound,
        control,
        thread,
    })
}
