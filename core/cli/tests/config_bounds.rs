//! Configurations at every documented bound (docs/config.md), started for real.
//!
//! For each numeric key: its documented minimum and maximum, and the values just outside them
//! (and, where no maximum is documented, the largest value its type or TOML can hold). Each is
//! either refused by `EngineConfig::from_toml` with a typed error naming the key (or, for a
//! configuration that would allocate more than the machine has, `MemoryNeed`), or started with
//! `EngineBuilder::start` against a simulated venue, traded (one order and its cancel, each
//! answered) where the configuration lets orders through, and stopped cleanly. Never an abort,
//! a panic or a hang: each case runs in a child process (this test binary again), so one
//! that aborts or hangs is reported with its key instead of taking the suite down.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::io::Read;
use std::process::{Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::config::{EngineConfig, FileConfigError};
use keel::engine::EngineBuilder;
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
    VenueId,
};
use keel::runtime::IdlePolicy;
use keel_venue::server::{VenueConfig, VenueServer};

/// What a case must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Start, trade one order and its cancel (both answered), stop cleanly.
    Trade,
    /// Start and stop cleanly; orders may be refused (e.g. a 1 ns stall bound), the venue
    /// link may not sync (e.g. a 1 ns heartbeat), but nothing hangs or crashes.
    Start,
    /// Refused by `from_toml` with an error naming the key.
    Refused,
    /// Refused with `MemoryNeed` (this machine lacks the memory), or starts if it has it.
    Memory,
    /// No documented maximum: refused naming the key, or starts and stops; never a crash.
    Either,
}

use Expect::*;

/// One case: `key = value` in `section` (plus `extra` lines there), and what must happen.
struct Case {
    section: &'static str,
    key: &'static str,
    value: String,
    extra: &'static str,
    expect: Expect,
}

const I64_MAX: &str = "9223372036854775807";
const U32_MAX: &str = "4294967295";

fn case(section: &'static str, key: &'static str, value: &str, expect: Expect) -> Case {
    Case {
        section,
        key,
        value: value.to_string(),
        extra: "",
        expect,
    }
}

fn with(mut c: Case, extra: &'static str) -> Case {
    c.extra = extra;
    c
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(dispatcher_cases());
    v.extend(risk_cases());
    v.extend(breaker_and_limiter_cases());
    v.extend(runtime_cases());
    v.extend(venue_cases());
    // Symbols: at least one, at most 65,535.
    let names = |n: usize| -> String {
        let list: Vec<String> = (0..n).map(|i| format!("\"S{i}\"")).collect();
        format!("[{}]", list.join(", "))
    };
    v.push(case("", "symbols", "[]", Refused));
    v.push(case("", "symbols", &names(65_535), Either));
    v.push(case("", "symbols", &names(65_536), Refused));
    v
}

/// The dispatcher's own keys.
fn dispatcher_cases() -> Vec<Case> {
    let d = "dispatcher";
    vec![
        // Dispatcher.
        case(d, "strategies", "0", Refused),
        case(d, "strategies", "1", Trade),
        case(d, "strategies", "65535", Memory),
        case(d, "strategies", "65536", Refused),
        case(d, "orders_max", "0", Refused),
        case(d, "orders_max", "1", Trade),
        case(d, "orders_max", "1073741824", Memory),
        case(d, "orders_max", "1073741825", Refused),
        case(d, "lane_cancel_capacity", "0", Refused),
        case(d, "lane_cancel_capacity", "1", Trade),
        case(d, "lane_cancel_capacity", "16777216", Either),
        case(d, "lane_cancel_capacity", "16777217", Refused),
        case(d, "lane_cancel_capacity", U32_MAX, Refused),
        case(d, "lane_replace_capacity", "0", Refused),
        case(d, "lane_replace_capacity", "1", Trade),
        case(d, "lane_replace_capacity", "16777216", Either),
        case(d, "lane_replace_capacity", U32_MAX, Refused),
        case(d, "lane_new_capacity", "1", Refused),
        with(
            case(d, "lane_new_capacity", "2", Trade),
            "lane_new_per_symbol_max = 2",
        ),
        case(d, "lane_new_capacity", "16777216", Either),
        case(d, "lane_new_capacity", U32_MAX, Refused),
        case(d, "lane_new_per_symbol_max", "0", Refused),
        case(d, "lane_new_per_symbol_max", "1", Trade),
        case(d, "lane_new_per_symbol_max", "4096", Trade),
        case(d, "lane_new_per_symbol_max", "4097", Refused),
        case(d, "shed_high_pct", "1", Refused),
        with(case(d, "shed_high_pct", "2", Trade), "shed_low_pct = 1"),
        case(d, "shed_high_pct", "100", Trade),
        case(d, "shed_high_pct", "101", Refused),
        case(d, "shed_low_pct", "0", Trade),
        case(d, "shed_low_pct", "79", Trade),
        case(d, "shed_low_pct", "80", Refused),
        case(d, "acquire_timeout_ns", "0", Start),
        case(d, "acquire_timeout_ns", I64_MAX, Trade),
        case(d, "acquire_timeout_ns", "-1", Refused),
        case(d, "commands_per_poll_max", "0", Refused),
        case(d, "commands_per_poll_max", "1", Trade),
        case(d, "commands_per_poll_max", U32_MAX, Trade),
        case(d, "outcomes_per_poll_max", "0", Refused),
        case(d, "outcomes_per_poll_max", "1", Trade),
        case(d, "outcomes_per_poll_max", U32_MAX, Trade),
        case(d, "sends_per_poll_max", "0", Refused),
        case(d, "sends_per_poll_max", "1", Trade),
        case(d, "sends_per_poll_max", U32_MAX, Trade),
    ]
}

/// Risk, bulkheads and per-strategy quotas.
fn risk_cases() -> Vec<Case> {
    let risk = "dispatcher.risk";
    let bulk = "dispatcher.bulkhead";
    let quota = "dispatcher.quota";
    let own = "dispatcher.quota.strategy";
    vec![
        // Risk: orders below are 3 at 50.0000 (notional 1,500,000 in price units).
        case(risk, "order_qty_max", "0", Start),
        case(risk, "order_qty_max", U32_MAX, Trade),
        case(risk, "order_notional_max", "0", Start),
        case(risk, "order_notional_max", I64_MAX, Trade),
        case(risk, "position_max", "0", Start),
        case(risk, "position_max", I64_MAX, Trade),
        case(risk, "price_max", "0", Refused),
        case(risk, "price_max", "1", Start),
        case(risk, "price_max", I64_MAX, Trade),
        case(risk, "price_collar_bps", "0", Trade),
        case(risk, "price_collar_bps", I64_MAX, Either),
        // Bulkheads: no documented range.
        case(bulk, "in_flight_per_symbol_max", "0", Either),
        case(bulk, "in_flight_per_symbol_max", U32_MAX, Either),
        case(bulk, "in_flight_per_venue_max", "0", Either),
        case(bulk, "in_flight_per_venue_max", U32_MAX, Either),
        // Per-strategy quotas: no limit, the largest rate and burst, the tightest that still
        // trades one order and its cancel, and just past each bound.
        case(quota, "new_per_sec", "0", Trade),
        with(
            case(quota, "new_per_sec", "10000000", Trade),
            "new_burst = 10000000",
        ),
        with(
            case(quota, "new_per_sec", "10000001", Refused),
            "new_burst = 1",
        ),
        case(quota, "new_per_sec", "-1", Refused),
        with(case(quota, "new_burst", "1", Trade), "new_per_sec = 1"),
        with(case(quota, "new_burst", "0", Refused), "new_per_sec = 1"),
        with(
            case(quota, "new_burst", U32_MAX, Refused),
            "new_per_sec = 1",
        ),
        case(quota, "in_flight_max", "0", Trade),
        case(quota, "in_flight_max", "1", Trade),
        case(quota, "in_flight_max", U32_MAX, Trade),
        case(quota, "in_flight_max", "4294967296", Refused),
        with(
            case(own, "id", "0", Trade),
            "new_per_sec = 1\nnew_burst = 1",
        ),
        with(case(own, "id", "1", Trade), "in_flight_max = 1"),
        case(own, "id", "2", Refused),
        case(own, "id", "-1", Refused),
        case(own, "id", "65535", Refused),
    ]
}

/// The breaker and the rate limiter.
fn breaker_and_limiter_cases() -> Vec<Case> {
    let brk = "dispatcher.breaker";
    let lim = "dispatcher.limiter";
    let win = "dispatcher.limiter.window";
    vec![
        // Breaker.
        case(brk, "window_buckets", "0", Refused),
        case(brk, "window_buckets", "1", Trade),
        case(brk, "window_buckets", "3600", Trade),
        case(brk, "window_buckets", "3601", Refused),
        case(brk, "window_ns", "59", Refused),
        case(brk, "window_ns", "60", Trade),
        case(brk, "window_ns", I64_MAX, Trade),
        case(brk, "calls_min", "0", Refused),
        case(brk, "calls_min", "1", Trade),
        case(brk, "calls_min", U32_MAX, Either),
        case(brk, "failure_rate_threshold_pct", "0", Refused),
        case(brk, "failure_rate_threshold_pct", "1", Trade),
        case(brk, "failure_rate_threshold_pct", "100", Trade),
        case(brk, "failure_rate_threshold_pct", "101", Refused),
        case(brk, "slow_call_duration_ns", "0", Trade),
        case(brk, "slow_call_duration_ns", I64_MAX, Trade),
        case(brk, "slow_call_rate_threshold_pct", "0", Refused),
        case(brk, "slow_call_rate_threshold_pct", "1", Trade),
        case(brk, "slow_call_rate_threshold_pct", "100", Trade),
        case(brk, "slow_call_rate_threshold_pct", "101", Refused),
        case(brk, "open_duration_ns", "0", Refused),
        case(brk, "open_duration_ns", "1", Trade),
        case(brk, "open_duration_ns", I64_MAX, Either),
        case(brk, "open_duration_multiplier", "0", Refused),
        case(brk, "open_duration_multiplier", "1", Trade),
        case(brk, "open_duration_multiplier", U32_MAX, Either),
        case(brk, "open_duration_max_ns", "29999999999", Refused),
        case(brk, "open_duration_max_ns", I64_MAX, Trade),
        case(brk, "half_open_probes", "0", Refused),
        case(brk, "half_open_probes", "1", Trade),
        case(brk, "half_open_probes", U32_MAX, Either),
        case(brk, "half_open_wait_max_ns", "0", Trade),
        case(brk, "half_open_wait_max_ns", I64_MAX, Trade),
        case(brk, "probe_judge", "\"any-failure\"", Trade),
        case(brk, "probe_judge", "\"rate\"", Trade),
        case(brk, "probe_judge", "\"Rate\"", Refused),
        case(brk, "probe_judge", "\"\"", Refused),
        // Limiter.
        case(lim, "cancel_reserve_permille", "0", Trade),
        // 999 per mille of a 200 burst leaves nothing for new orders: refused by name.
        case(lim, "cancel_reserve_permille", "999", Either),
        case(lim, "cancel_reserve_permille", "1000", Refused),
        case(lim, "cancel_reserve_permille", "1001", Refused),
        // With the default cancel reserve (100) and burst (200): 895 leaves new orders 1 of
        // the 200, 900 leaves none (refused naming the key), 1001 is not a per-mille value.
        case(lim, "reduce_reserve_permille", "0", Trade),
        case(lim, "reduce_reserve_permille", "895", Trade),
        case(lim, "reduce_reserve_permille", "900", Refused),
        case(lim, "reduce_reserve_permille", "1001", Refused),
        case(lim, "throttle_rate_permille", "0", Trade),
        case(lim, "throttle_rate_permille", "1000", Trade),
        case(lim, "throttle_rate_permille", "1001", Refused),
        case(lim, "throttle_cooldown_ns", "0", Trade),
        case(lim, "throttle_cooldown_ns", I64_MAX, Trade),
        case(lim, "throttle_recovery_ns", "0", Trade),
        case(lim, "throttle_recovery_ns", I64_MAX, Trade),
        case(lim, "weight_new", "0", Either),
        case(lim, "weight_new", "201", Refused),
        case(lim, "weight_cancel", "201", Refused),
        case(lim, "weight_replace", "201", Refused),
        case(lim, "weight_query", "201", Refused),
        with(
            case(win, "window_ns", "0", Refused),
            "limit_weight = 10\nburst_weight = 10",
        ),
        with(
            case(win, "window_ns", "1", Trade),
            "limit_weight = 10\nburst_weight = 10",
        ),
        with(
            case(win, "limit_weight", "0", Refused),
            "window_ns = 1_000_000_000\nburst_weight = 10",
        ),
        with(
            case(win, "limit_weight", U32_MAX, Trade),
            "window_ns = 1_000_000_000\nburst_weight = 10",
        ),
        with(
            case(win, "burst_weight", "0", Refused),
            "window_ns = 1_000_000_000\nlimit_weight = 10",
        ),
        with(
            case(win, "burst_weight", U32_MAX, Refused),
            "window_ns = 1_000_000_000_000\nlimit_weight = 10",
        ),
        with(
            case(win, "burst_weight", U32_MAX, Trade),
            "window_ns = 1_000_000\nlimit_weight = 10",
        ),
    ]
}

/// The engine's loops, the shared-memory channels and the journal.
fn runtime_cases() -> Vec<Case> {
    let eng = "engine";
    let ipc = "ipc";
    let jrn = "journal";
    vec![
        // Engine loops.
        case(eng, "strategy_ring", "15", Refused),
        case(eng, "strategy_ring", "16", Trade),
        case(eng, "strategy_ring", "1048576", Trade),
        case(eng, "strategy_ring", "1048577", Refused),
        case(eng, "venue_ring", "15", Refused),
        case(eng, "venue_ring", "16", Trade),
        case(eng, "venue_ring", "1048576", Trade),
        case(eng, "venue_ring", "1048577", Refused),
        with(
            case(eng, "executor_stall_ns", "0", Refused),
            "topology = \"split\"",
        ),
        with(
            case(eng, "executor_stall_ns", "1", Start),
            "topology = \"split\"",
        ),
        with(
            case(eng, "executor_stall_ns", I64_MAX, Trade),
            "topology = \"split\"",
        ),
        case(eng, "memory_max_bytes", "1", Refused),
        case(eng, "memory_max_bytes", I64_MAX, Trade),
        case(eng, "dispatcher_core", "-1", Trade),
        case(eng, "dispatcher_core", I64_MAX, Trade),
        // The transport's settings reach the reactor the engine opens.
        case(eng, "wait", "\"busy-poll\"", Trade),
        case(eng, "wait", "\"poll\"", Refused),
        with(
            case(eng, "spin_reads", "true", Trade),
            "wait = \"busy-poll\"",
        ),
        case(eng, "spin_reads", "true", Refused),
        case(eng, "sqpoll_idle_ms", "0", Trade),
        case(eng, "sqpoll_idle_ms", "60001", Refused),
        case(eng, "ring_entries", "1", Refused),
        case(eng, "ring_entries", "2", Trade),
        case(eng, "ring_entries", "32768", Trade),
        case(eng, "ring_entries", "65536", Refused),
        case(eng, "socket_send_buffer_bytes", "4095", Refused),
        case(eng, "socket_send_buffer_bytes", "4096", Trade),
        case(eng, "socket_send_buffer_bytes", "1073741824", Trade),
        case(eng, "socket_send_buffer_bytes", "1073741825", Refused),
        case(eng, "uring_multishot_recv", "true", Trade),
        case(eng, "uring_registered_buffers", "false", Trade),
        case(eng, "uring_fixed_files", "false", Trade),
        case(eng, "uring_provided_buffers", "1", Trade),
        case(eng, "uring_provided_buffers", "32768", Trade),
        case(eng, "uring_provided_buffers", "65536", Refused),
        case(eng, "uring_provided_buffer_bytes", "64", Trade),
        case(eng, "uring_provided_buffer_bytes", "1048576", Trade),
        case(eng, "uring_provided_buffer_bytes", "0", Refused),
        // Shared-memory channels.
        case(ipc, "command_capacity", "1", Refused),
        case(ipc, "command_capacity", "2", Trade),
        case(ipc, "command_capacity", "3", Refused),
        case(ipc, "command_capacity", "1048576", Trade),
        case(ipc, "command_capacity", "2097152", Refused),
        case(ipc, "event_capacity", "1", Refused),
        case(ipc, "event_capacity", "2", Trade),
        case(ipc, "event_capacity", "1048576", Trade),
        case(ipc, "event_capacity", "2097152", Refused),
        case(ipc, "market_data_trades", "1", Refused),
        case(ipc, "market_data_trades", "2", Trade),
        case(ipc, "market_data_trades", "3", Refused),
        case(ipc, "market_data_trades", "1048576", Trade),
        case(ipc, "market_data_trades", "2097152", Refused),
        case(ipc, "strategy_timeout_ns", "0", Refused),
        case(ipc, "strategy_timeout_ns", "1", Trade),
        case(ipc, "strategy_timeout_ns", I64_MAX, Trade),
        // Journal: no documented maximum; a size the disk cannot reserve fails the start.
        case(jrn, "file_bytes", "128", Refused),
        case(jrn, "file_bytes", "192", Trade),
        case(jrn, "file_bytes", "200", Refused),
        // Two such files (the current and the next, populated) exceed any machine.
        case(jrn, "file_bytes", "4611686018427387904", Memory),
    ]
}

/// The venue link, durations with units.
fn venue_cases() -> Vec<Case> {
    let ven = "venue";
    vec![
        // Venue link.
        case(ven, "max_packet_len", "255", Refused),
        case(ven, "max_packet_len", "256", Trade),
        case(ven, "max_packet_len", "65534", Trade),
        case(ven, "max_packet_len", "65535", Refused),
        case(ven, "orders_max", "0", Refused),
        case(ven, "orders_max", "1", Trade),
        case(ven, "orders_max", "1073741824", Memory),
        case(ven, "orders_max", "1073741825", Refused),
        case(ven, "orders_max", U32_MAX, Refused),
        case(ven, "ack_timeout_ns", "0", Refused),
        // Durations with units, at the ends of their range.
        case(ven, "ack_timeout_ns", "\"1ns\"", Start),
        case(ven, "ack_timeout_ns", "\"9223372036854775807ns\"", Trade),
        case(ven, "ack_timeout_ns", "\"153722867m\"", Trade),
        case(ven, "ack_timeout_ns", "\"9223372036854775808ns\"", Refused),
        case(ven, "ack_timeout_ns", "\"2 s\"", Refused),
        case(ven, "ack_timeout_ns", "1", Start),
        case(ven, "ack_timeout_ns", I64_MAX, Trade),
        case(ven, "heartbeat_interval_ns", "0", Refused),
        case(ven, "heartbeat_interval_ns", "1", Start),
        case(ven, "heartbeat_interval_ns", I64_MAX, Trade),
        case(ven, "silent_intervals_max", "0", Refused),
        case(ven, "silent_intervals_max", "1", Trade),
        case(ven, "silent_intervals_max", U32_MAX, Either),
        case(ven, "reconcile_timeout_ns", "0", Start),
        case(ven, "reconcile_timeout_ns", I64_MAX, Trade),
        case(ven, "jitter_seed", "0", Trade),
        case(ven, "jitter_seed", I64_MAX, Trade),
        case(ven, "backoff_base_ns", "0", Refused),
        with(
            case(ven, "backoff_base_ns", "1", Trade),
            "backoff_cap_ns = 1",
        ),
        with(
            case(ven, "backoff_cap_ns", "99", Refused),
            "backoff_base_ns = 100",
        ),
        case(ven, "backoff_cap_ns", I64_MAX, Trade),
        case(ven, "backoff_attempts_max", "0", Either),
        case(ven, "backoff_attempts_max", U32_MAX, Trade),
        case(ven, "username", "\"abcdef\"", Start),
        case(ven, "username", "\"abcdefg\"", Refused),
        case(ven, "password", "\"abcdefghij\"", Start),
        case(ven, "password", "\"abcdefghijk\"", Refused),
    ]
}

/// The configuration of one case: two symbols, two strategies, a journal, one venue link (and
/// a shared-memory channel for the strategy that is not in process, for `ipc` cases).
fn config_text(c: &Case, venue: &str, dir: &std::path::Path) -> String {
    let line = |section: &str| -> String {
        if section == c.section {
            format!("{} = {}\n{}\n", c.key, c.value, c.extra)
        } else {
            String::new()
        }
    };
    let symbols = if c.key == "symbols" {
        c.value.clone()
    } else {
        "[\"AAPL\", \"MSFT\"]".to_string()
    };
    let mut t = format!("symbols = {symbols}\n");
    let strategies = if c.key == "strategies" {
        ""
    } else {
        "strategies = 2\n"
    };
    t += &format!("[dispatcher]\n{strategies}{}", line("dispatcher"));
    for section in [
        "dispatcher.risk",
        "dispatcher.bulkhead",
        "dispatcher.breaker",
        "dispatcher.limiter",
        "dispatcher.quota",
    ] {
        t += &format!("[{section}]\n{}", line(section));
    }
    if c.section == "dispatcher.quota.strategy" {
        t += &format!("[[dispatcher.quota.strategy]]\n{}", line(c.section));
    }
    if c.section == "dispatcher.limiter.window" {
        t += &format!("[[dispatcher.limiter.window]]\n{}", line(c.section));
    }
    t += &format!("[engine]\nidle = \"backoff\"\n{}", line("engine"));
    let file_bytes = if c.section == "journal" {
        String::new()
    } else {
        "file_bytes = 1_048_576\n".to_string()
    };
    t += &format!(
        "[journal]\ndir = \"{}\"\n{file_bytes}{}",
        dir.join("journal").display(),
        line("journal")
    );
    if c.section == "ipc" {
        t += &format!(
            "[ipc]\ndir = \"{}\"\n{}",
            dir.join("ipc").display(),
            line("ipc")
        );
    }
    let credentials = match c.key {
        "username" | "password" => "",
        _ => "username = \"keel\"\npassword = \"keel\"\n",
    };
    t += &format!(
        "[[venue]]\nname = \"sim\"\naddress = \"{venue}\"\n{credentials}{}",
        line("venue")
    );
    if c.key == "username" {
        t += "password = \"keel\"\n";
    }
    if c.key == "password" {
        t += "username = \"keel\"\n";
    }
    t
}

/// Whether a refusal names the case's key (the memory check names the largest part instead).
fn names_key(e: &FileConfigError, key: &str) -> bool {
    match e {
        FileConfigError::Syntax(_) | FileConfigError::UnknownKey(_) => false,
        FileConfigError::MemoryNeed { .. } => true,
        _ => {
            let text = e.to_string();
            let leaf = key.trim_start_matches("weight_");
            text.contains(key)
                || text.contains(leaf)
                || (key.ends_with("weight") && text.contains("window"))
                || (key == "window_ns" && text.contains("window"))
        }
    }
}

/// Runs case `index` in this process: prints one `outcome:` line.
fn run_case(index: usize) {
    let c = &cases()[index];
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let (tx, rx) = std::sync::mpsc::channel();
    let venue = std::thread::spawn(move || {
        let mut venue = VenueServer::new(VenueConfig::default()).unwrap();
        tx.send(venue.local_addr()).unwrap();
        let clock = TscClock::new();
        while !flag.load(Ordering::Relaxed) {
            venue.step(clock.now_ns(), 1_000_000).unwrap();
        }
    });
    let addr = rx.recv().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(c, &addr.to_string(), dir.path());
    let config = match EngineConfig::from_toml(&text) {
        Ok(config) => config,
        Err(e) => {
            let kind = if matches!(e, FileConfigError::MemoryNeed { .. }) {
                "memory"
            } else {
                "refused"
            };
            println!("outcome: {kind} named={} {e}", names_key(&e, c.key));
            stop.store(true, Ordering::Relaxed);
            venue.join().unwrap();
            return;
        }
    };
    let mut builder = EngineBuilder::new(config).idle(IdlePolicy::TEST);
    if c.section == "ipc" {
        builder = builder.in_process_strategies(1);
    }
    let mut engine = match builder.start() {
        Ok(engine) => engine,
        Err(e) => {
            println!("outcome: start-error {e}");
            stop.store(true, Ordering::Relaxed);
            venue.join().unwrap();
            return;
        }
    };
    let mut traded = "no";
    let synced = wait(Duration::from_secs(5), || engine.venue_synced(VenueId(0)));
    if synced {
        let mut strategy = engine.take_strategy(StrategyId(0)).unwrap();
        let id = ClientOrderId::new(StrategyId(0), 1).unwrap();
        let order = NewOrder {
            id,
            venue: VenueId(0),
            symbol: SymbolId(1),
            side: Side::Buy,
            price: Price::from_units(50, 0),
            qty: 3,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        strategy.commands.push(Command::New(order)).unwrap();
        let mut answers = Vec::new();
        let mut pop = |answers: &mut Vec<EventKind>, n: usize| {
            wait(Duration::from_secs(10), || {
                while let Ok(e) = strategy.events.pop() {
                    answers.push(e.kind);
                }
                answers.len() >= n
            })
        };
        pop(&mut answers, 1);
        if answers == [EventKind::Accepted] {
            strategy.commands.push(Command::Cancel { id }).unwrap();
            pop(&mut answers, 2);
        }
        traded = match answers.as_slice() {
            [EventKind::Accepted, EventKind::Canceled] => "yes",
            _ => "partly",
        };
        eprintln!("answers: {answers:?}");
    }
    let report = engine.stop();
    stop.store(true, Ordering::Relaxed);
    venue.join().unwrap();
    match report {
        Ok(_) => println!("outcome: started synced={synced} traded={traded}"),
        Err(e) => println!("outcome: stop-error {e}"),
    }
}

fn wait(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Runs case `index` in a child process; its `outcome:` line, or what killed it.
fn child(index: usize) -> String {
    let mut child = Process::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "every_documented_bound_starts_or_is_refused_by_name",
            "--nocapture",
        ])
        .env("KEEL_BOUNDS_CASE", index.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let outcome = out
        .lines()
        .find_map(|l| l.strip_prefix("outcome: "))
        .map(str::to_string);
    match (status, outcome) {
        (None, _) => "hang (killed after 60 s)".to_string(),
        (Some(s), Some(o)) if s.success() => o,
        (Some(s), o) => format!("crash: {s} ({o:?})"),
    }
}

fn satisfied(expect: Expect, outcome: &str) -> bool {
    let refused_named = outcome.starts_with("refused named=true");
    let memory = outcome.starts_with("memory");
    let started = outcome.starts_with("started");
    match expect {
        Trade => outcome == "started synced=true traded=yes",
        Start => started,
        Refused => refused_named || memory,
        Memory => memory || started,
        Either => refused_named || memory || started,
    }
}

// Goal: every documented bound of the configuration file starts the engine (and trades
// through it) or is refused by name; nothing aborts, panics or hangs. Method: each case in a
// child process against a simulated venue thread.
#[test]
fn every_documented_bound_starts_or_is_refused_by_name() {
    if let Ok(index) = std::env::var("KEEL_BOUNDS_CASE") {
        run_case(index.parse().unwrap());
        return;
    }
    let cases = cases();
    // Each child mostly waits (on the venue, on timers): a few at once keep the run short.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new(vec![String::new(); cases.len()]);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= cases.len() {
                    break;
                }
                let outcome = child(i);
                outcomes.lock().unwrap()[i] = outcome;
            });
        }
    });
    let mut failures = Vec::new();
    for (c, outcome) in cases.iter().zip(outcomes.into_inner().unwrap()) {
        let value: String = c.value.chars().take(24).collect();
        let line = format!(
            "[{}] {} = {value}: expected {:?}, got {outcome}",
            c.section, c.key, c.expect
        );
        let ok = satisfied(c.expect, &outcome);
        eprintln!("{line}");
        if !ok {
            failures.push(line);
        }
    }
    eprintln!("{} cases", cases.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
