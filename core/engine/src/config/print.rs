//! The configuration written back as TOML that [`EngineConfig::from_toml`] reads to an equal
//! value: what `keel config-check` and `keel defaults` print. Every section the parser reads
//! is written, one function per section in file order; durations carry their unit when it is
//! exact (`"50ms"`); remarks for a person are TOML comments, so the output stays a valid file.
//!
//! A new key is one line in its section's function here and one in the parser; a new section
//! is one function, called from [`to_toml`] (the round-trip tests in core/cli/tests/config.rs catch
//! a key read but not written).

use toml::Value;

pub use super::section::duration_text;
use super::section::Out;
use super::{EngineConfig, ProtocolConfig, VenueLinkConfig};
use crate::dispatch::DispatcherConfig;
use crate::engine::{IpcConfig, LoopConfig, Topology};
use crate::feed::handler::{FeedConfig, SnapshotSource};
use crate::journal::JournalConfig;
use crate::net::WaitMode;

/// The venue address `keel defaults` prints: TEST-NET-1 (RFC 5737), reserved for examples, so
/// a configuration nobody edited connects nowhere.
pub const EXAMPLE_VENUE_ADDRESS: &str = "192.0.2.1:15000";
/// The market-data address `keel defaults` prints (TEST-NET-1 too).
pub const EXAMPLE_FEED_ADDRESS: &str = "192.0.2.1:15002";

/// `config` as a configuration file that parses back to an equal value.
pub fn to_toml(config: &EngineConfig) -> String {
    let mut out = Out::default();
    let symbols: Vec<Value> = config
        .symbols
        .iter()
        .map(|s| Value::String(String::from_utf8_lossy(s).trim_end().to_string()))
        .collect();
    out.line(format_args!("symbols = {}", Value::Array(symbols)));
    dispatcher(&mut out, &config.dispatcher);
    quotas(&mut out, &config.dispatcher, &config.strategy_quotas);
    engine(&mut out, &config.loops);
    match &config.ipc {
        Some(ipc) => self::ipc(&mut out, ipc),
        None => out.comment("no [ipc]: strategies in process only (keel run requires [ipc])"),
    }
    match &config.journal {
        Some(journal) => self::journal(&mut out, journal),
        None => out.comment("no [journal]: nothing journaled (keel run requires [journal])"),
    }
    operator(&mut out, &config.operator);
    wire_log(&mut out, config.wire_log.as_ref());
    metrics(&mut out, &config.metrics);
    for feed in &config.feeds {
        self::feed(&mut out, feed);
    }
    for venue in &config.venues {
        self::venue(&mut out, venue);
    }
    out.text
}

/// Every key at its default, with one example venue (address [`EXAMPLE_VENUE_ADDRESS`], to be
/// edited) and one example feed: what `keel defaults` prints.
pub fn example_config() -> EngineConfig {
    let names = ["AAPL", "MSFT", "AMZN", "NVDA"];
    let venue = VenueLinkConfig {
        name: "example".into(),
        address: EXAMPLE_VENUE_ADDRESS.parse().expect("literal address"),
        username: "keel".into(),
        password: "keel".into(),
        protocol: ProtocolConfig::default(),
        ack_timeout_ns: 2_000_000_000,
        orders_max: 65_536,
        link: crate::session::link::LinkConfig::default(),
    };
    let feed = FeedConfig {
        addr: EXAMPLE_FEED_ADDRESS.parse().expect("literal address"),
        symbols: names.iter().map(|s| s.to_string()).collect(),
        ..FeedConfig::default()
    };
    EngineConfig {
        symbols: names
            .iter()
            .map(|s| crate::proto::soupbin::alpha::<8>(s))
            .collect(),
        dispatcher: DispatcherConfig {
            symbols: names.len() as u16,
            venues: 1,
            ..DispatcherConfig::default()
        },
        journal: Some(JournalConfig {
            dir: "/var/lib/keel/journal".into(),
            file_bytes: 64 << 20,
        }),
        venues: vec![venue],
        loops: LoopConfig::default(),
        ipc: Some(IpcConfig::default()),
        feeds: vec![feed],
        operator: crate::engine::OperatorConfig::default(),
        wire_log: None,
        metrics: crate::engine::MetricsConfig::default(),
        strategy_quotas: Vec::new(),
    }
}

/// `[dispatcher.quota]` and each strategy's own quota.
fn quotas(
    out: &mut Out,
    d: &DispatcherConfig,
    own: &[(
        crate::order::StrategyId,
        crate::dispatch::quota::StrategyQuota,
    )],
) {
    let quota = |out: &mut Out, q: &crate::dispatch::quota::StrategyQuota| {
        out.int("new_per_sec", q.new_per_sec);
        out.int("new_burst", q.new_burst);
        out.int("in_flight_max", q.in_flight_max);
    };
    out.section("[dispatcher.quota]");
    quota(out, &d.quota);
    for (strategy, q) in own {
        out.section("[[dispatcher.quota.strategy]]");
        out.int("id", strategy.0);
        quota(out, q);
    }
}

/// `d` written as `[dispatcher]` and its subtables.
fn dispatcher(out: &mut Out, d: &DispatcherConfig) {
    out.section("[dispatcher]");
    out.int("strategies", d.strategies);
    out.int("orders_max", d.orders_max);
    out.int("lane_cancel_capacity", d.lane_cancel_capacity);
    out.int("lane_replace_capacity", d.lane_replace_capacity);
    out.int("lane_new_capacity", d.lane_new_capacity);
    out.int("lane_new_per_symbol_max", d.lane_new_per_symbol_max);
    out.int("shed_high_pct", d.shed_high_pct);
    out.int("shed_low_pct", d.shed_low_pct);
    out.duration("acquire_timeout_ns", d.acquire_timeout_ns);
    out.int("commands_per_poll_max", d.commands_per_poll_max);
    out.int("outcomes_per_poll_max", d.outcomes_per_poll_max);
    out.int("sends_per_poll_max", d.sends_per_poll_max);
    let r = &d.risk;
    out.section("[dispatcher.risk]");
    out.int("order_qty_max", r.order_qty_max);
    out.int("order_notional_max", r.order_notional_max);
    out.int("position_max", r.position_max);
    out.bool("unknown_gate", r.unknown_gate);
    out.int("price_max", r.price_max);
    out.int("price_collar_bps", r.price_collar_bps);
    out.section("[dispatcher.bulkhead]");
    out.int(
        "in_flight_per_symbol_max",
        d.bulkhead.in_flight_per_symbol_max,
    );
    out.int(
        "in_flight_per_venue_max",
        d.bulkhead.in_flight_per_venue_max,
    );
    let b = &d.breaker;
    out.section("[dispatcher.breaker]");
    out.duration("window_ns", b.window_ns);
    out.int("window_buckets", b.window_buckets);
    out.int("calls_min", b.calls_min);
    out.int("failure_rate_threshold_pct", b.failure_rate_threshold_pct);
    out.duration("slow_call_duration_ns", b.slow_call_duration_ns);
    out.int(
        "slow_call_rate_threshold_pct",
        b.slow_call_rate_threshold_pct,
    );
    out.duration("open_duration_ns", b.open_duration_ns);
    out.int("open_duration_multiplier", b.open_duration_multiplier);
    out.duration("open_duration_max_ns", b.open_duration_max_ns);
    out.int("half_open_probes", b.half_open_probes);
    out.duration("half_open_wait_max_ns", b.half_open_wait_max_ns);
    out.string("probe_judge", b.probe_judge.name());
    let l = &d.limiter;
    out.section("[dispatcher.limiter]");
    out.int("cancel_reserve_permille", l.cancel_reserve_permille);
    out.int("reduce_reserve_permille", l.reduce_reserve_permille);
    out.int("throttle_rate_permille", l.throttle_rate_permille);
    out.duration("throttle_cooldown_ns", l.throttle_cooldown_ns);
    out.duration("throttle_recovery_ns", l.throttle_recovery_ns);
    out.int("weight_new", l.weights.new);
    out.int("weight_cancel", l.weights.cancel);
    out.int("weight_replace", l.weights.replace);
    out.int("weight_query", l.weights.query);
    for w in l.windows.iter().flatten() {
        out.section("[[dispatcher.limiter.window]]");
        out.duration("window_ns", w.window_ns);
        out.int("limit_weight", w.limit_weight);
        out.int("burst_weight", w.burst_weight);
    }
}

/// `c` written as `[engine]`: loops, cores, idling and the transport's settings.
fn engine(out: &mut Out, c: &LoopConfig) {
    out.section("[engine]");
    let topology = match c.topology {
        Topology::Inline => "inline",
        Topology::Split => "split",
    };
    out.string("topology", topology);
    out.string("transport", c.transport.name());
    out.idle("idle", c.idle);
    out.idle("executor_idle", c.executor_idle);
    out.core("dispatcher_core", c.dispatcher_core);
    out.core("executor_core", c.executor_core);
    out.duration("executor_stall_ns", c.executor_stall_ns);
    out.int("strategy_ring", c.strategy_ring);
    out.int("venue_ring", c.venue_ring);
    out.int("memory_max_bytes", c.memory_max_bytes.unwrap_or(0));
    if c.memory_max_bytes.is_none() {
        out.comment("memory_max_bytes 0: the machine's physical memory is the ceiling");
    }
    let r = &c.reactor;
    let wait = match r.wait {
        WaitMode::Blocking => "blocking",
        WaitMode::BusyPoll => "busy-poll",
    };
    out.string("wait", wait);
    out.bool("spin_reads", r.spin_reads);
    out.int("sqpoll_idle_ms", r.sqpoll_idle_ms.unwrap_or(0));
    out.int("ring_entries", r.ring_entries);
    out.int(
        "socket_send_buffer_bytes",
        r.socket_send_buffer.unwrap_or(0),
    );
    let u = &r.uring;
    out.bool("uring_registered_buffers", u.registered_buffers);
    out.bool("uring_fixed_files", u.fixed_files);
    out.bool("uring_direct_spin_reads", u.direct_spin_reads);
    out.bool("uring_multishot_recv", u.multishot_recv);
    out.int("uring_provided_buffers", u.provided_buffers);
    out.int("uring_provided_buffer_bytes", u.provided_buffer_bytes);
    af_xdp(out, &r.xdp);
}

/// `x` written as `[engine.af_xdp]` (read only with `transport = "af_xdp"`).
fn af_xdp(out: &mut Out, x: &crate::net::xdp::XdpConfig) {
    use crate::net::xdp::XdpCopy;
    out.section("[engine.af_xdp]");
    out.comment("read with transport = \"af_xdp\" (docs/config.md, \"[engine.af_xdp]\")");
    out.string("interface", x.interface.as_ref().map_or("", |n| n.as_str()));
    out.int("queue", x.queue);
    let address = x
        .address
        .map_or(String::new(), |(ip, len)| format!("{ip}/{len}"));
    out.string("address", &address);
    out.string(
        "gateway",
        &x.gateway.map_or(String::new(), |g| g.to_string()),
    );
    let mac = x.mac.map_or(String::new(), |m| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    });
    out.string("mac", &mac);
    out.int("frames", x.frames);
    out.int("frame_bytes", x.frame_bytes);
    out.int("ring_entries", x.ring_entries);
    out.int("rx_batch", x.rx_batch);
    out.int("local_port_first", x.local_ports.0);
    out.int("local_port_last", x.local_ports.1);
    let copy = match x.copy {
        XdpCopy::Copy => "copy",
        XdpCopy::ZeroCopy => "zero-copy",
    };
    out.string("copy", copy);
    out.string("attach", x.attach.name());
    out.bool("verify_checksums", x.verify_checksums);
}

fn ipc(out: &mut Out, c: &IpcConfig) {
    out.section("[ipc]");
    out.path("dir", &c.dir);
    out.int("command_capacity", c.command_capacity);
    out.int("event_capacity", c.event_capacity);
    out.duration("strategy_timeout_ns", c.strategy_timeout_ns);
    out.duration("restored_attach_timeout_ns", c.restored_attach_timeout_ns);
    out.bool("cancel_on_strategy_loss", c.cancel_on_strategy_loss);
    out.int("market_data_trades", c.market_data_trades);
}

fn journal(out: &mut Out, c: &JournalConfig) {
    out.section("[journal]");
    out.path("dir", &c.dir);
    out.int("file_bytes", c.file_bytes);
}

fn operator(out: &mut Out, c: &crate::engine::OperatorConfig) {
    out.section("[operator]");
    match &c.admin_socket {
        Some(path) => out.path("admin_socket", path),
        None => out
            .comment("admin_socket absent: admin.sock in the [ipc] directory (else the journal's)"),
    }
    out.bool("cancel_on_stop", c.cancel_on_stop);
    out.duration("stop_timeout_ns", c.stop_timeout_ns);
}

/// `[wire_log]`; when absent, the table with its defaults as comments (a file that has none
/// must print as one that has none).
fn wire_log(out: &mut Out, c: Option<&crate::wirelog::WireLogConfig>) {
    let Some(c) = c else {
        let d = crate::wirelog::WireLogConfig::default();
        out.line(format_args!(
            "\n# no [wire_log]: venue messages are not recorded. To record them:\n\
             # [wire_log]\n# dir = \"{}\"\n# ring_bytes = {}\n# file_bytes_max = {}",
            d.dir.display(),
            d.ring_bytes,
            d.file_bytes_max
        ));
        return;
    };
    out.section("[wire_log]");
    out.path("dir", &c.dir);
    out.int("ring_bytes", c.ring_bytes);
    out.int("file_bytes_max", c.file_bytes_max);
}

fn metrics(out: &mut Out, c: &crate::engine::MetricsConfig) {
    out.section("[metrics]");
    out.bool("enabled", c.enabled);
    match &c.file {
        Some(file) => out.path("file", file),
        None => out.comment("file: counters in the [ipc] directory"),
    }
    match &c.http {
        Some(addr) => out.string("http", &addr.to_string()),
        None => out.comment("http = \"127.0.0.1:9464\" serves /metrics, /health and the live page"),
    }
    let a = &c.alerts;
    out.section("[alerts]");
    out.bool("enabled", a.enabled);
    out.duration("breaker_open_ns", a.breaker_open_ns);
    out.int("failure_rate_pct", a.failure_rate_pct);
    out.duration("failure_rate_for_ns", a.failure_rate_for_ns);
    out.int("reconnects_per_hour", a.reconnects_per_hour);
    out.int("p99_baseline_factor", a.p99_baseline_factor);
    out.duration("p99_window_ns", a.p99_window_ns);
    out.duration("p99_baseline_ns", a.p99_baseline_ns);
    out.int("p99_samples_min", a.p99_samples_min);
    out.duration("loop_stall_ns", a.loop_stall_ns);
    out.duration("link_down_ns", a.link_down_ns);
    out.duration("unknown_orders_for_ns", a.unknown_orders_for_ns);
    let b = &c.budget;
    out.section("[budget]");
    out.duration("decision_p99_ns", b.decision_p99_ns);
    out.duration("new_ack_p99_ns", b.new_ack_p99_ns);
    out.duration("e2e_p99_ns", b.e2e_p99_ns);
    out.duration("cancel_ack_p99_ns", b.cancel_ack_p99_ns);
    let k = &c.control;
    out.section("[control]");
    out.bool("enabled", k.enabled);
    out.duration("interval_ns", k.interval_ns);
    out.int("rate_min_permille", k.rate_min_permille);
    out.int("decrease_permille", k.decrease_permille);
    out.int("increase_permille", k.increase_permille);
    out.duration("hold_ns", k.hold_ns);
    out.duration("ack_p99_ns", k.ack_p99_ns);
    out.int("ack_samples_min", k.ack_samples_min);
    let core: Vec<Value> = k.core_symbols.iter().cloned().map(Value::String).collect();
    out.line(format_args!("core_symbols = {}", Value::Array(core)));
    out.int("shed_below_permille", k.shed_below_permille);
}

/// A seed the file fixed, or a comment saying it is drawn at start: a printed drawn value,
/// copied to a fleet, would make it reconnect in lockstep again.
fn seed(out: &mut Out, key: &str, seed: crate::rng::Seed) {
    match seed {
        crate::rng::Seed::Fixed(v) => out.int(key, v),
        crate::rng::Seed::FromOs(_) => out.comment(&format!(
            "{key}: drawn from the OS by each process at start (logged); set it to replay a run"
        )),
    }
}

fn feed(out: &mut Out, c: &FeedConfig) {
    out.section("[[feed]]");
    if c.addr.to_string() == EXAMPLE_FEED_ADDRESS {
        out.comment("an example address (TEST-NET-1): the venue's market data, or remove [[feed]]");
    }
    out.string("address", &c.addr.to_string());
    let alternates: Vec<Value> = c
        .alternates
        .iter()
        .map(|a| Value::String(a.to_string()))
        .collect();
    out.line(format_args!("alternates = {}", Value::Array(alternates)));
    out.string("path", &c.path);
    out.bool("trades", c.trades);
    seed(out, "seed", c.seed);
    out.duration("backoff_base_ns", c.backoff.base_ns);
    out.duration("backoff_cap_ns", c.backoff.cap_ns);
    out.duration("resync_retry_ns", c.resync_retry_ns);
    out.duration("silent_ns", c.silent_ns);
    out.int("pending_max", c.pending_max);
    match &c.tls {
        None => out.bool("tls", false),
        Some(tls) => {
            out.bool("tls", true);
            out.string("tls_server_name", &tls.server_name);
            match &tls.ca_file {
                Some(ca) => out.path("tls_ca_file", ca),
                None => out.comment("tls_ca_file absent: the public roots are trusted"),
            }
        }
    }
    let SnapshotSource::Rest(r) = &c.snapshot else {
        out.string("snapshot", "ws");
        return;
    };
    out.string("snapshot", "rest");
    out.string("rest_address", &r.address.to_string());
    out.string("rest_path", &r.path);
    out.int("rest_depth_limit", r.depth_limit);
    out.int("rest_depth_weight", r.depth_weight);
    out.int("rest_second_weight", r.second_weight);
    out.int("rest_minute_weight", r.minute_weight);
    out.int("rest_connections", r.connections);
    out.duration("rest_acquire_timeout_ns", r.acquire_timeout_ns);
    out.duration("rest_timeout_ns", r.timeout_ns);
    out.int("rest_retry_attempts", r.retry_attempts);
    match &r.api_key {
        Some(key) => out.string("rest_api_key", key),
        None => out.comment("rest_api_key absent: requests carry no X-Api-Key"),
    }
    out.string("rest_used_weight_second_header", &r.used_weight_headers[0]);
    out.string("rest_used_weight_minute_header", &r.used_weight_headers[1]);
}

fn venue(out: &mut Out, v: &VenueLinkConfig) {
    out.section("[[venue]]");
    out.string("name", &v.name);
    if v.address.to_string() == EXAMPLE_VENUE_ADDRESS {
        out.comment("an example address (TEST-NET-1) and credentials: edit them for your venue");
    }
    out.string("address", &v.address.to_string());
    out.string("username", &v.username);
    out.string("password", &v.password);
    out.string("protocol", v.protocol.name());
    crate::session::registry::write_protocol(out, &v.protocol);
    out.duration("ack_timeout_ns", v.ack_timeout_ns);
    out.int("orders_max", v.orders_max);
    let l = &v.link;
    out.duration("heartbeat_interval_ns", l.heartbeat_interval_ns);
    out.int("silent_intervals_max", l.silent_intervals_max);
    out.int("max_packet_len", l.max_packet_len);
    out.duration("reconcile_timeout_ns", l.session.reconcile_timeout_ns);
    seed(out, "jitter_seed", l.session.jitter_seed);
    out.duration("backoff_base_ns", l.session.backoff.base_ns);
    out.duration("backoff_cap_ns", l.session.backoff.cap_ns);
    out.int("backoff_attempts_max", l.session.backoff.attempts_max);
}
