//! The configuration printed back (`config::to_toml`, `keel config-check`, `keel defaults`):
//! what is printed parses to an equal configuration; durations with units; the transport
//! settings in `[engine]`; the warnings for a machine that lacks a pinned core or a directory's
//! parent. Round trips compare whole `EngineConfig`s, so a key read but not printed fails here.

use std::io::Write;
use std::process::{Command, Stdio};

use keel::config::print::{duration_text, example_config};
use keel::config::{parse_duration, to_toml, ConfigWarning, EngineConfig, FileConfigError};
use keel::net::WaitMode;

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

const MINIMAL: &str = r#"
symbols = ["AAPL", "MSFT"]
[[venue]]
name = "sim"
address = "127.0.0.1:15000"
username = "keel"
password = "keel"
"#;

/// Every section, no value at its default, a feed, two venues (one with a venue table of
/// reject codes, one with an empty one), three limiter windows, odd durations.
const EVERYTHING: &str = r#"
symbols = ["A", "BB", "CCCCCCCC"]

[dispatcher]
strategies = 7
orders_max = 1000
lane_cancel_capacity = 100
lane_replace_capacity = 50
lane_new_capacity = 200
lane_new_per_symbol_max = 20
shed_high_pct = 90
shed_low_pct = 10
acquire_timeout_ns = 1_234_567
commands_per_poll_max = 3
outcomes_per_poll_max = 5
sends_per_poll_max = 9

[dispatcher.risk]
order_qty_max = 77
order_notional_max = 123456789
position_max = 999
unknown_gate = false
price_max = 5000000
price_collar_bps = 0

[dispatcher.bulkhead]
in_flight_per_symbol_max = 3
in_flight_per_venue_max = 11

[dispatcher.quota]
new_per_sec = 500
new_burst = 50
in_flight_max = 40

[[dispatcher.quota.strategy]]
id = 6
new_per_sec = 10000000
new_burst = 1

[[dispatcher.quota.strategy]]
id = 0
in_flight_max = 0

[dispatcher.breaker]
window_ns = "90s"
window_buckets = 30
calls_min = 4
failure_rate_threshold_pct = 33
slow_call_duration_ns = "7us"
slow_call_rate_threshold_pct = 66
open_duration_ns = "2m"
open_duration_multiplier = 3
open_duration_max_ns = "9223372036854775807ns"
half_open_probes = 2
half_open_wait_max_ns = 0
probe_judge = "rate"

[dispatcher.limiter]
cancel_reserve_permille = 250
reduce_reserve_permille = 150
throttle_rate_permille = 125
throttle_cooldown_ns = "1ms"
throttle_recovery_ns = 999
weight_new = 2
weight_cancel = 1
weight_replace = 3
weight_query = 4

[[dispatcher.limiter.window]]
window_ns = "100ms"
limit_weight = 100
burst_weight = 40

[[dispatcher.limiter.window]]
window_ns = "10s"
limit_weight = 5000
burst_weight = 500

[[dispatcher.limiter.window]]
window_ns = "1m"
limit_weight = 20000
burst_weight = 1000

[engine]
topology = "split"
transport = "epoll"
idle = "backoff"
executor_idle = "spin-then-yield"
dispatcher_core = 0
executor_core = 1
executor_stall_ns = "3ms"
strategy_ring = 64
venue_ring = 1024
memory_max_bytes = 8_000_000_000
wait = "busy-poll"
spin_reads = true
sqpoll_idle_ms = 60000
ring_entries = 2
socket_send_buffer_bytes = 4096
uring_registered_buffers = false
uring_fixed_files = false
uring_direct_spin_reads = false
uring_multishot_recv = true
uring_provided_buffers = 32768
uring_provided_buffer_bytes = 64

[ipc]
dir = "/tmp/keel \"quoted\" \\ dir"
command_capacity = 2
event_capacity = 1048576
strategy_timeout_ns = "1ns"
cancel_on_strategy_loss = false
market_data_trades = 2

[journal]
dir = "relative/journal"
file_bytes = 192

[operator]
admin_socket = "/run/keel/admin.sock"
cancel_on_stop = false
stop_timeout_ns = "10m"

[wire_log]
dir = "/tmp/wire \u00e9"
ring_bytes = 4096
file_bytes_max = 1048576

[metrics]
enabled = false
file = "/dev/shm/other/counters"
http = "127.0.0.1:9464"

[alerts]
enabled = false
breaker_open_ns = "1m"
failure_rate_pct = 50
failure_rate_for_ns = "2s"
reconnects_per_hour = 9
p99_baseline_factor = 3
p99_window_ns = "30s"
p99_baseline_ns = "250us"
p99_samples_min = 7
loop_stall_ns = "3s"
link_down_ns = "2m"
unknown_orders_for_ns = "30s"

[budget]
decision_p99_ns = "20us"
new_ack_p99_ns = "2ms"
e2e_p99_ns = "3ms"
cancel_ack_p99_ns = "1ms"

[[feed]]
address = "10.1.2.3:9999"
alternates = ["10.1.2.4:9999", "[::1]:80"]
path = "/other"
trades = false
backoff_base_ns = 1
backoff_cap_ns = "1m"
resync_retry_ns = "250us"
silent_ns = 61_000_000_000
pending_max = 1
tls = true
tls_server_name = "md.venue.example"
tls_ca_file = "/etc/keel/venue-ca.pem"
snapshot = "rest"
rest_address = "10.1.2.3:9443"
rest_path = "/v1/depth"
rest_depth_limit = 5000
rest_depth_weight = 7
rest_second_weight = 9
rest_minute_weight = 99
rest_connections = 64
rest_acquire_timeout_ns = "1ms"
rest_timeout_ns = "1m"
rest_retry_attempts = 100
rest_api_key = "k\"ey"
rest_used_weight_second_header = ""
rest_used_weight_minute_header = "X-Weight-Minute"

[[venue]]
name = "venue \"one\""
address = "10.0.0.1:1"
username = "u"
password = "0123456789"
protocol = "ouch"
dialect = "ouch-connect"
reconcile = "account-query"
reject_codes_throttled = [65535, 0]
reject_codes_system = []
reject_codes_duplicate_id = [17]
reject_codes_invalid = [1, 2]
reject_codes_market_closed = [3]
ack_timeout_ns = "9223372036854775807ns"
orders_max = 3
heartbeat_interval_ns = "153722867m"
silent_intervals_max = 4294967295
max_packet_len = 65534
reconcile_timeout_ns = 0
jitter_seed = 9223372036854775807
backoff_base_ns = "1us"
backoff_cap_ns = "1us"
backoff_attempts_max = 0

[[venue]]
name = "two"
address = "10.0.0.2:2"
username = "uu"
password = "pp"
reject_codes_invalid = []
"#;

/// Prints `config`, parses it back, and insists on the same configuration; printing the
/// re-read one gives the same text.
fn round_trip(config: &EngineConfig) -> String {
    let text = to_toml(config);
    let again = EngineConfig::from_toml(&text)
        .unwrap_or_else(|e| panic!("printed configuration refused: {e}\n{text}"));
    assert_eq!(&again, config, "printed:\n{text}");
    assert_eq!(to_toml(&again), text);
    text
}

/// Every section the parser reads appears in `text`.
fn assert_every_section(text: &str) {
    for header in [
        "symbols = ",
        "\n[dispatcher]\n",
        "\n[dispatcher.risk]\n",
        "\n[dispatcher.bulkhead]\n",
        "\n[dispatcher.quota]\n",
        "\n[dispatcher.breaker]\n",
        "\n[dispatcher.limiter]\n",
        "\n[[dispatcher.limiter.window]]\n",
        "\n[engine]\n",
        "\n[ipc]\n",
        "\n[journal]\n",
        "\n[operator]\n",
        "[wire_log]\n",
        "\n[metrics]\n",
        "\n[alerts]\n",
        "\n[budget]\n",
        "\n[[feed]]\n",
        "\n[[venue]]\n",
    ] {
        assert!(text.contains(header), "{header:?} missing from:\n{text}");
    }
}

fn example_file() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/keel.example.toml"
    ))
    .unwrap()
}

// Goal: the shipped example, keel's defaults and a file with every key away from its default
// (a feed, two venues, three windows, quotes in strings) each print to text that parses back
// to the same configuration; durations print with their exact unit.
#[test]
fn printed_configurations_parse_back_equal() {
    let example = EngineConfig::from_toml(&example_file()).unwrap();
    let text = round_trip(&example);
    assert_every_section(&text);
    assert!(text.contains("acquire_timeout_ns = \"50ms\""), "{text}");
    assert!(
        text.contains("# reject codes") || text.contains("reject_codes_invalid = [1, 2, 3, 7]")
    );

    let defaults = example_config();
    let text = round_trip(&defaults);
    assert_every_section(&text);
    assert!(text.contains("address = \"192.0.2.1:15000\""), "{text}");

    let everything = EngineConfig::from_toml(EVERYTHING).unwrap();
    assert_ne!(everything.loops, keel::engine::LoopConfig::default());
    let text = round_trip(&everything);
    assert_every_section(&text);
    for line in [
        "acquire_timeout_ns = \"1234567ns\"",
        "window_ns = \"90s\"",
        "slow_call_duration_ns = \"7us\"",
        "open_duration_ns = \"2m\"",
        "half_open_wait_max_ns = \"0s\"",
        "probe_judge = \"rate\"",
        "silent_ns = \"61s\"",
        "ack_timeout_ns = \"9223372036854775807ns\"",
        "reject_codes_system = []",
        "reject_codes_throttled = [65535, 0]",
        "wait = \"busy-poll\"",
        "sqpoll_idle_ms = 60000",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    // The second venue's empty table stays a table that replaces keel's.
    assert_eq!(
        everything.venues[1].protocol,
        EngineConfig::from_toml(&text).unwrap().venues[1].protocol
    );
    // Without the optional tables: a comment says what their absence means.
    let minimal = EngineConfig::from_toml(MINIMAL).unwrap();
    let text = round_trip(&minimal);
    assert!(
        text.contains("# no [journal]") && text.contains("# no [ipc]"),
        "{text}"
    );
}

// Goal: every accepted form of a duration lands on its nanoseconds, at both ends of the
// range, and the printer's text reads back to the same value.
#[test]
fn durations_take_units() {
    let max = i64::MAX as u64;
    for (text, ns) in [
        ("0ns", 0),
        ("0s", 0),
        ("1ns", 1),
        ("250ns", 250),
        ("50us", 50_000),
        ("50µs", 50_000),
        ("50ms", 50_000_000),
        ("1_000ms", 1_000_000_000),
        ("2s", 2_000_000_000),
        ("1m", 60_000_000_000),
        ("0007s", 7_000_000_000),
        ("9223372036854775807ns", max),
        ("153722867m", 153_722_867 * 60_000_000_000),
    ] {
        assert_eq!(parse_duration(text), Ok(ns), "{text}");
        assert_eq!(parse_duration(&duration_text(ns)), Ok(ns), "{text}");
        let c = EngineConfig::from_toml(&format!(
            "{MINIMAL}ack_timeout_ns = {:?}\n",
            text.to_string()
        ));
        // A zero ack timeout is refused by its own rule, not as a duration.
        match c {
            Ok(c) => assert_eq!(c.venues[0].ack_timeout_ns, ns, "{text}"),
            Err(FileConfigError::OutOfRange { allowed, .. }) => {
                assert_eq!((ns, allowed), (0, ">= 1"), "{text}")
            }
            Err(e) => panic!("{text}: {e}"),
        }
    }
    assert_eq!(duration_text(1_500_000_000), "1500ms");
    assert_eq!(duration_text(max), "9223372036854775807ns");
    // Relations between keys hold whatever the units.
    assert!(matches!(
        EngineConfig::from_toml(&format!(
            "{MINIMAL}backoff_base_ns = \"10ms\"\nbackoff_cap_ns = \"9999us\"\n"
        )),
        Err(FileConfigError::OutOfRange { key, .. }) if key == "venue[0].backoff_cap_ns"
    ));
}

// Goal: a duration that is not one is refused with its key, its value and the forms allowed;
// one beyond the range with the range — never wrapped, cut or read as another unit.
#[test]
fn bad_durations_are_refused_with_key_value_and_forms() {
    let wrong_form = [
        "\"50 parsecs\"",
        "\"-1s\"",
        "\"\"",
        "\"5\"",
        "\"1.5s\"",
        "\"5 s\"",
        "\" 5s\"",
        "\"s\"",
        "\"ms\"",
        "\"1h\"",
        "\"1d\"",
        "\"_1s\"",
        "\"1_s\"",
        "\"1__0s\"",
        "\"1S\"",
        "\"1sec\"",
        "\"+1s\"",
        "\"0x10ns\"",
        "true",
        "1.5",
        "[1]",
    ];
    for value in wrong_form {
        match EngineConfig::from_toml(&format!("{MINIMAL}\n[ipc]\nstrategy_timeout_ns = {value}")) {
            Err(FileConfigError::WrongType {
                key,
                value: got,
                expected,
            }) => {
                assert_eq!(key, "ipc.strategy_timeout_ns", "{value}");
                assert_eq!(got, value, "{value}");
                assert!(expected.contains("\"50ms\""), "{expected}");
                let shown = FileConfigError::WrongType {
                    key,
                    value: got,
                    expected,
                }
                .to_string();
                assert!(shown.contains("ipc.strategy_timeout_ns") && shown.contains(value));
            }
            other => panic!("{value}: {other:?}"),
        }
    }
    let out_of_range = [
        "\"9223372036854775808ns\"",
        "\"18446744073709551615ns\"",
        "\"18446744073709551616ns\"",
        "\"153722868m\"",
        "\"9223372037s\"",
        "\"99999999999999999999999999999999999999m\"",
        "-1",
        "-9223372036854775808",
    ];
    for value in out_of_range {
        match EngineConfig::from_toml(&format!(
            "{MINIMAL}\n[dispatcher.breaker]\nopen_duration_max_ns = {value}"
        )) {
            Err(FileConfigError::OutOfRange {
                key,
                value: got,
                allowed,
            }) => {
                assert_eq!(key, "dispatcher.breaker.open_duration_max_ns", "{value}");
                assert_eq!(got, value, "{value}");
                assert!(allowed.contains("9223372036854775807"), "{allowed}");
            }
            other => panic!("{value}: {other:?}"),
        }
    }
}

// Goal: the transport settings are read from `[engine]`, land in `LoopConfig::reactor`, and
// are refused out of range with the key, the value and what is allowed.
#[test]
fn transport_settings_are_read_and_checked() {
    let engine = |lines: &str| EngineConfig::from_toml(&format!("{MINIMAL}\n[engine]\n{lines}"));
    let c = engine(
        "wait = \"busy-poll\"\nspin_reads = true\nsqpoll_idle_ms = 1\nring_entries = 32768\n\
         socket_send_buffer_bytes = 1073741824",
    )
    .unwrap();
    let r = c.loops.reactor;
    assert_eq!(r.wait, WaitMode::BusyPoll);
    assert!(r.spin_reads);
    assert_eq!(r.sqpoll_idle_ms, Some(1));
    assert_eq!(r.ring_entries, 32_768);
    assert_eq!(r.socket_send_buffer, Some(1 << 30));
    let d = engine("").unwrap().loops.reactor;
    assert_eq!(d, keel::net::ReactorConfig::default());
    let u = engine(
        "uring_registered_buffers = false\nuring_fixed_files = false\n\
         uring_direct_spin_reads = false\nuring_multishot_recv = true\n\
         uring_provided_buffers = 1\nuring_provided_buffer_bytes = 1048576",
    )
    .unwrap()
    .loops
    .reactor
    .uring;
    assert_eq!(
        u,
        keel::net::UringFeatures {
            registered_buffers: false,
            fixed_files: false,
            direct_spin_reads: false,
            multishot_recv: true,
            provided_buffers: 1,
            provided_buffer_bytes: 1 << 20,
        }
    );
    assert_eq!(
        engine("sqpoll_idle_ms = 0")
            .unwrap()
            .loops
            .reactor
            .sqpoll_idle_ms,
        None
    );
    assert_eq!(
        engine("ring_entries = 2")
            .unwrap()
            .loops
            .reactor
            .ring_entries,
        2
    );
    assert_eq!(
        engine("socket_send_buffer_bytes = 4096")
            .unwrap()
            .loops
            .reactor
            .socket_send_buffer,
        Some(4096)
    );
    for (line, key) in [
        ("wait = \"spin\"", "engine.wait"),
        ("wait = \"\"", "engine.wait"),
        ("spin_reads = true", "engine.spin_reads"),
        (
            "wait = \"blocking\"\nspin_reads = true",
            "engine.spin_reads",
        ),
        ("sqpoll_idle_ms = 60001", "engine.sqpoll_idle_ms"),
        ("sqpoll_idle_ms = -1", "engine.sqpoll_idle_ms"),
        (
            "sqpoll_idle_ms = 9223372036854775807",
            "engine.sqpoll_idle_ms",
        ),
        ("ring_entries = 0", "engine.ring_entries"),
        ("ring_entries = 1", "engine.ring_entries"),
        ("ring_entries = 3", "engine.ring_entries"),
        ("ring_entries = 65536", "engine.ring_entries"),
        (
            "socket_send_buffer_bytes = 1",
            "engine.socket_send_buffer_bytes",
        ),
        (
            "socket_send_buffer_bytes = 4095",
            "engine.socket_send_buffer_bytes",
        ),
        (
            "socket_send_buffer_bytes = 1073741825",
            "engine.socket_send_buffer_bytes",
        ),
        (
            "socket_send_buffer_bytes = -1",
            "engine.socket_send_buffer_bytes",
        ),
        (
            "uring_provided_buffers = 0",
            "engine.uring_provided_buffers",
        ),
        (
            "uring_provided_buffers = 3",
            "engine.uring_provided_buffers",
        ),
        (
            "uring_provided_buffers = 65536",
            "engine.uring_provided_buffers",
        ),
        (
            "uring_provided_buffer_bytes = 63",
            "engine.uring_provided_buffer_bytes",
        ),
        (
            "uring_provided_buffer_bytes = 1048577",
            "engine.uring_provided_buffer_bytes",
        ),
    ] {
        match engine(line) {
            Err(FileConfigError::OutOfRange { key: k, .. }) => assert_eq!(k, key, "{line}"),
            other => panic!("{line}: {other:?}"),
        }
    }
    assert!(matches!(
        engine("wait = 1"),
        Err(FileConfigError::WrongType { key, .. }) if key == "engine.wait"
    ));
    assert!(matches!(
        engine("spin_reads = \"yes\""),
        Err(FileConfigError::WrongType { key, .. }) if key == "engine.spin_reads"
    ));
}

// Goal: `[engine.af_xdp]` is read into the AF_XDP transport's settings, printed back equal,
// required with `transport = "af_xdp"`, and refused out of range with the key, the value and
// what is allowed.
#[test]
fn af_xdp_settings_are_read_and_checked() {
    use keel::net::xdp::{IfName, XdpAttach, XdpConfig, XdpCopy};
    let engine = |lines: &str| {
        EngineConfig::from_toml(&format!(
            "{MINIMAL}\n[engine]\ntransport = \"af_xdp\"\n[engine.af_xdp]\n{lines}"
        ))
    };
    let all = "interface = \"eth1\"\nqueue = 3\naddress = \"192.168.7.2/24\"\n\
               gateway = \"192.168.7.1\"\nmac = \"02:aa:bb:cc:dd:ee\"\nframes = 4096\n\
               frame_bytes = 4096\nring_entries = 2048\nrx_batch = 16\n\
               local_port_first = 40000\nlocal_port_last = 40999\ncopy = \"zero-copy\"\n\
               attach = \"generic\"\nverify_checksums = false";
    let c = engine(all).unwrap();
    assert_eq!(c.loops.transport, keel::net::TransportKind::AfXdp);
    assert_eq!(
        c.loops.reactor.xdp,
        XdpConfig {
            interface: Some(IfName::new("eth1").unwrap()),
            queue: 3,
            address: Some(("192.168.7.2".parse().unwrap(), 24)),
            gateway: Some("192.168.7.1".parse().unwrap()),
            mac: Some([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]),
            frames: 4096,
            frame_bytes: 4096,
            ring_entries: 2048,
            copy: XdpCopy::ZeroCopy,
            attach: XdpAttach::Generic,
            verify_checksums: false,
            local_ports: (40_000, 40_999),
            rx_batch: 16,
        }
    );
    let printed = to_toml(&c);
    assert!(printed.contains("[engine.af_xdp]"), "{printed}");
    assert_eq!(EngineConfig::from_toml(&printed).unwrap(), c);
    let minimal = "interface = \"eth1\"\naddress = \"10.0.0.2/24\"";
    assert!(engine(minimal).is_ok());
    for (lines, key) in [
        ("address = \"10.0.0.2/24\"", "engine.af_xdp.interface"),
        ("interface = \"eth1\"", "engine.af_xdp.address"),
    ] {
        match engine(lines) {
            Err(FileConfigError::Missing(k)) => assert_eq!(k, key, "{lines}"),
            other => panic!("{lines}: {other:?}"),
        }
    }
    for (line, key) in [
        ("interface = \"sixteen-bytes-xx\"", "interface"),
        ("interface = \"a/b\"", "interface"),
        ("address = \"10.0.0.2\"", "address"),
        ("address = \"10.0.0.2/33\"", "address"),
        ("address = \"10.0.0.2/0\"", "address"),
        ("address = \"255.255.255.255/24\"", "address"),
        ("address = \"::1/64\"", "address"),
        ("gateway = \"10.0.0\"", "gateway"),
        ("mac = \"02:aa:bb:cc:dd\"", "mac"),
        ("mac = \"02:aa:bb:cc:dd:ee:ff\"", "mac"),
        ("mac = \"zz:aa:bb:cc:dd:ee\"", "mac"),
        ("frames = 1000", "frames"),
        ("frames = 32", "frames"),
        ("frames = 131072", "frames"),
        ("frame_bytes = 1500", "frame_bytes"),
        ("ring_entries = 512", "ring_entries"),
        ("ring_entries = 1000", "ring_entries"),
        ("rx_batch = 0", "rx_batch"),
        ("local_port_first = 0", "local_port_first"),
        (
            "local_port_first = 60000\nlocal_port_last = 50000",
            "local_port_first",
        ),
        ("copy = \"zerocopy\"", "copy"),
        ("attach = \"driver\"", "attach"),
    ] {
        // The line replaces the minimal settings' own key where it names one.
        let lines = match key {
            "interface" => format!("address = \"10.0.0.2/24\"\n{line}"),
            "address" => format!("interface = \"eth1\"\n{line}"),
            _ => format!("{minimal}\n{line}"),
        };
        match engine(&lines) {
            Err(FileConfigError::OutOfRange { key: k, .. }) => {
                assert_eq!(k, format!("engine.af_xdp.{key}"), "{line}")
            }
            other => panic!("{line}: {other:?}"),
        }
    }
    assert!(matches!(
        engine(&format!("{minimal}\nqueue = -1")),
        Err(FileConfigError::OutOfRange { key, .. }) if key == "engine.af_xdp.queue"
    ));
    assert!(matches!(
        engine(&format!("{minimal}\nnot_a_key = 1")),
        Err(FileConfigError::UnknownKey(key)) if key == "engine.af_xdp.not_a_key"
    ));
}

// Goal: a pinned core the machine lacks and a directory whose parent is missing are warned
// about (naming the core count and the missing parent), and a machine that has them is not.
#[test]
fn warnings_name_the_missing_core_and_parent() {
    let dir = tempfile::tempdir().unwrap();
    let present = dir.path().join("journal");
    let absent = dir.path().join("no-such-parent").join("ipc");
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n[engine]\ndispatcher_core = 3\nexecutor_core = 4\n\
         [journal]\ndir = {:?}\n[ipc]\ndir = {:?}\n",
        present.display().to_string(),
        absent.display().to_string()
    ))
    .unwrap();
    // Inline: the executor core is not used, so not warned about.
    assert_eq!(
        c.warnings_for(3),
        [
            ConfigWarning::CoreMissing {
                key: "dispatcher_core",
                core: 3,
                cores: 3
            },
            ConfigWarning::ParentMissing {
                key: "ipc.dir",
                dir: absent.clone(),
                parent: dir.path().join("no-such-parent"),
            }
        ]
    );
    let shown = c.warnings_for(3)[0].to_string();
    assert!(
        shown.contains("dispatcher_core = 3") && shown.contains("has 3 cores"),
        "{shown}"
    );
    let shown = c.warnings_for(3)[1].to_string();
    assert!(shown.contains("no-such-parent does not exist"), "{shown}");
    assert_eq!(
        c.warnings_for(4).len(),
        1,
        "core 3 exists on a 4-core machine"
    );
    let mut split = c.clone();
    split.loops.topology = keel::engine::Topology::Split;
    assert!(split.warnings_for(4).contains(&ConfigWarning::CoreMissing {
        key: "executor_core",
        core: 4,
        cores: 4
    }));
    assert_eq!(split.warnings_for(5).len(), 1);
    // The wire log's directory and the admin socket are checked the same way.
    let mut more = c.clone();
    more.operator.admin_socket = Some(dir.path().join("gone").join("admin.sock"));
    more.wire_log = Some(keel::wirelog::WireLogConfig {
        dir: dir.path().join("gone-too").join("wire"),
        ..Default::default()
    });
    let keys: Vec<&str> = more
        .warnings_for(4)
        .iter()
        .filter_map(|w| match w {
            ConfigWarning::ParentMissing { key, .. } => Some(*key),
            _ => None,
        })
        .collect();
    assert_eq!(keys, ["ipc.dir", "wire_log.dir", "operator.admin_socket"]);
}

/// Runs `keel ARGS` with `stdin`, returning (exit code, stdout, stderr).
fn keel(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(KEEL)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

// Goal: the binary's `keel defaults` is accepted by `keel config-check -` and means the same
// configuration; config-check's own output is accepted again, unchanged but for its header;
// a bad file still fails with the key (exit 65).
#[test]
fn keel_defaults_and_config_check_print_what_config_check_accepts() {
    let (code, defaults, _) = keel(&["defaults"], "");
    assert_eq!(code, 0);
    assert!(defaults.starts_with("# "), "{defaults}");
    assert_eq!(
        EngineConfig::from_toml(&defaults).unwrap(),
        example_config()
    );
    let (code, checked, _) = keel(&["config-check", "-"], &defaults);
    assert_eq!(code, 0, "{checked}");
    assert!(checked.contains("# <stdin>: ok"), "{checked}");
    assert!(checked.contains("# memory at start: "), "{checked}");
    assert_eq!(EngineConfig::from_toml(&checked).unwrap(), example_config());
    let (code, again, _) = keel(&["config-check", "-"], &checked);
    assert_eq!(code, 0);
    assert_eq!(again, checked);
    // A file too, and the example and the every-key file through the binary.
    let dir = tempfile::tempdir().unwrap();
    for text in [example_file(), EVERYTHING.to_string()] {
        let path = dir.path().join("keel.toml");
        std::fs::write(&path, &text).unwrap();
        let (code, out, err) = keel(&["config-check", path.to_str().unwrap()], "");
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            EngineConfig::from_toml(&out).unwrap(),
            EngineConfig::from_toml(&text).unwrap()
        );
    }
    let (code, out, err) = keel(
        &["config-check", "-"],
        &format!("{MINIMAL}ack_timeout_ns = \"2 s\""),
    );
    assert_eq!((code, out.as_str()), (65, ""));
    assert!(
        err.contains("venue[0].ack_timeout_ns") && err.contains("\"2 s\""),
        "{err}"
    );
}

// Goal: `keel config-check` and `keel run` warn on stderr (and still accept the file) about
// a pinned core this machine lacks, with its core count, and a directory whose parent is
// missing, naming it.
#[test]
fn config_check_and_run_warn_about_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let file = dir.path().join("keel.toml");
    // A venue address nothing listens on: this test must not log in anywhere.
    let minimal = MINIMAL.replace("127.0.0.1:15000", "127.0.0.1:1");
    std::fs::write(
        &file,
        format!(
            "{minimal}\n[engine]\ndispatcher_core = 100000\nidle = \"backoff\"\n\
             [journal]\ndir = {:?}\nfile_bytes = 65536\n[ipc]\ndir = {:?}\n",
            missing.join("journal").display().to_string(),
            missing.join("ipc").display().to_string(),
        ),
    )
    .unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    let expect = |err: &str| {
        let core = format!(
            "keel: warning: engine.dispatcher_core = 100000: this machine has {cores} cores"
        );
        assert!(err.contains(&core), "{err}");
        for key in ["journal.dir", "ipc.dir"] {
            let line = format!(
                "keel: warning: {key} = \"{}/{}\": its parent directory {} does not exist",
                missing.display(),
                key.trim_end_matches(".dir"),
                missing.display()
            );
            assert!(err.contains(&line), "{line}\nin:\n{err}");
        }
    };
    let (code, out, err) = keel(&["config-check", file.to_str().unwrap()], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(": ok"));
    expect(&err);
    // keel run says the same before it starts (whatever then becomes of the start).
    let (_, _, err) = keel(
        &[
            "run",
            "--config",
            file.to_str().unwrap(),
            "--duration-s",
            "1",
        ],
        "",
    );
    expect(&err);
}
