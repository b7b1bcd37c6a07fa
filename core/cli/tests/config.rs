//! The configuration file: the shipped example parses; every class of bad input is refused
//! with its key, its value and what is allowed.

use keel::config::{EngineConfig, FileConfigError};
use keel::dispatch::ConfigError;

const MINIMAL: &str = r#"
symbols = ["AAPL", "MSFT"]
[[venue]]
name = "sim"
address = "127.0.0.1:15000"
username = "keel"
password = "keel"
"#;

fn refused(extra: &str) -> FileConfigError {
    EngineConfig::from_toml(&format!("{MINIMAL}\n{extra}")).unwrap_err()
}

// Goal: the example in docs parses, and its values land where they say.
#[test]
fn the_documented_example_parses() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/keel.example.toml"
    ))
    .unwrap();
    let c = EngineConfig::from_toml(&text).unwrap();
    assert_eq!(c.symbols.len(), 4);
    assert_eq!(c.dispatcher.symbols, 4);
    assert_eq!(c.dispatcher.venues, 1);
    assert_eq!(c.dispatcher.risk.order_qty_max, 10_000);
    assert_eq!(c.dispatcher.breaker.half_open_probes, 3);
    let w = c.dispatcher.limiter.windows;
    assert_eq!(w[1].unwrap().limit_weight, 30_000);
    assert!(w[2].is_none());
    assert_eq!(c.journal.unwrap().file_bytes, 67_108_864);
    let v = &c.venues[0];
    assert_eq!(v.address.port(), 15_000);
    assert_eq!(v.link.session.backoff.cap_ns, 30_000_000_000);
    assert_eq!(v.protocol.name(), "ouch");
}

// Goal: a minimal file takes the defaults.
#[test]
fn a_minimal_file_takes_the_defaults() {
    let c = EngineConfig::from_toml(MINIMAL).unwrap();
    let defaults = keel::dispatch::DispatcherConfig::default();
    assert_eq!(c.dispatcher.orders_max, defaults.orders_max);
    assert_eq!(c.dispatcher.symbols, 2);
    assert!(c.journal.is_none());
    assert_eq!(c.venues[0].ack_timeout_ns, 2_000_000_000);
    assert_eq!(
        c.venues[0].protocol,
        keel::session::ProtocolConfig::default()
    );
}

// Goal: a venue's reject codes are configured by meaning and replace keel's table; a code in
// two classes, out of range or of the wrong type is refused with its key and value.
#[test]
fn reject_codes_are_configured_per_venue() {
    use keel::order::RejectReason;
    use keel::session::ProtocolConfig;
    let rejects = |extra: &str| {
        let c = EngineConfig::from_toml(&format!("{MINIMAL}{extra}")).unwrap();
        let ProtocolConfig::Ouch(ouch) = c.venues[0].protocol.clone() else {
            panic!("an OUCH venue");
        };
        ouch.rejects
    };
    let keel = rejects("");
    assert_eq!(keel.reason(5), RejectReason::VenueThrottle);
    let venue = rejects("reject_codes_throttled = [42, 43]\nreject_codes_system = [500]\n");
    assert_eq!(venue.reason(42), RejectReason::VenueThrottle);
    assert_eq!(venue.reason(43), RejectReason::VenueThrottle);
    assert_eq!(venue.reason(500), RejectReason::VenueSystem);
    assert_eq!(
        venue.reason(5),
        RejectReason::Other(5),
        "keel's table is replaced"
    );
    assert!(matches!(
        refused_venue("reject_codes_throttled = [7]\nreject_codes_invalid = [7]"),
        FileConfigError::OutOfRange { key, value, .. } if key == "venue[0].reject_codes_invalid" && value == "7"
    ));
    assert!(matches!(
        refused_venue("reject_codes_system = [70000]"),
        FileConfigError::OutOfRange { key, value, .. } if key == "venue[0].reject_codes_system" && value == "70000"
    ));
    assert!(matches!(
        refused_venue("reject_codes_system = [\"X\"]"),
        FileConfigError::WrongType { key, .. } if key == "venue[0].reject_codes_system"
    ));
    let many: Vec<String> = (0..65).map(|c| c.to_string()).collect();
    assert!(matches!(
        refused_venue(&format!("reject_codes_invalid = [{}]", many.join(", "))),
        FileConfigError::OutOfRange { key, value, .. } if key == "venue[0].reject_codes_invalid" && value == "64"
    ));
}

/// MINIMAL with `extra` appended to its `[[venue]]` table, refused.
fn refused_venue(extra: &str) -> FileConfigError {
    EngineConfig::from_toml(&format!("{MINIMAL}{extra}\n")).unwrap_err()
}

// Goal: each class of bad input gets its own error naming the key and the value.
#[test]
fn every_class_of_bad_input_is_refused_with_key_and_value() {
    assert!(matches!(
        EngineConfig::from_toml("symbols = [").unwrap_err(),
        FileConfigError::Syntax(_)
    ));
    assert_eq!(
        refused("[dispatcher]\nshed_hihg_pct = 90"),
        FileConfigError::UnknownKey("dispatcher.shed_hihg_pct".into())
    );
    assert_eq!(
        EngineConfig::from_toml(&format!("colour = 1\n{MINIMAL}")).unwrap_err(),
        FileConfigError::UnknownKey("colour".into())
    );
    // After `[[venue]]`, a key belongs to that venue.
    assert_eq!(
        refused("colour = 1"),
        FileConfigError::UnknownKey("venue[0].colour".into())
    );
    assert_eq!(
        refused("[[venue]]\nname = \"b\""),
        FileConfigError::Missing("venue[1].address".into())
    );
    assert_eq!(
        refused("[dispatcher.breaker]\ncalls_min = \"twenty\""),
        FileConfigError::WrongType {
            key: "dispatcher.breaker.calls_min".into(),
            value: "\"twenty\"".into(),
            expected: "an integer",
        }
    );
    assert!(matches!(
        refused("[dispatcher]\norders_max = -5"),
        FileConfigError::OutOfRange { key, value, .. } if key == "dispatcher.orders_max" && value == "-5"
    ));
    assert_eq!(
        refused("[dispatcher]\nshed_high_pct = 40\nshed_low_pct = 60"),
        FileConfigError::Dispatcher(ConfigError::OutOfRange {
            key: "shed_low_pct",
            value: 60,
            allowed: "0..shed_high_pct",
        })
    );
    assert!(matches!(
        refused("[dispatcher.breaker]\nfailure_rate_threshold_pct = 0"),
        FileConfigError::Dispatcher(ConfigError::Breaker(_))
    ));
    assert!(matches!(
        refused("[[dispatcher.limiter.window]]\nwindow_ns = 0\nlimit_weight = 1\nburst_weight = 1"),
        FileConfigError::Dispatcher(ConfigError::Limiter(_))
    ));
    assert!(matches!(
        refused("[journal]\ndir = \"/tmp/j\"\nfile_bytes = 1000"),
        FileConfigError::OutOfRange { key, value, .. } if key == "journal.file_bytes" && value == "1000"
    ));
    assert_eq!(
        refused("[journal]\nfile_bytes = 6400"),
        FileConfigError::Missing("journal.dir".into())
    );
    assert_eq!(
        EngineConfig::from_toml("[[venue]]\nname = \"x\"").unwrap_err(),
        FileConfigError::Missing("symbols".into())
    );
    assert_eq!(
        EngineConfig::from_toml("symbols = [\"AAPL\"]").unwrap_err(),
        FileConfigError::Missing("venue".into())
    );
    let bad_venue = |extra: &str| {
        EngineConfig::from_toml(&format!(
            "symbols = [\"AAPL\"]\n[[venue]]\nname = \"v\"\nusername = \"keel\"\npassword = \"keel\"\n{extra}"
        ))
        .unwrap_err()
    };
    assert!(matches!(
        bad_venue("address = \"localhost\""),
        FileConfigError::WrongType { key, .. } if key == "venue[0].address"
    ));
    assert!(matches!(
        bad_venue("address = \"127.0.0.1:1\"\nprotocol = \"fix\""),
        FileConfigError::OutOfRange { key, value, .. } if key == "venue[0].protocol" && value == "\"fix\""
    ));
    assert!(matches!(
        bad_venue("address = \"127.0.0.1:1\"\nprotocol = 5"),
        FileConfigError::WrongType { key, .. } if key == "venue[0].protocol"
    ));
    assert!(matches!(
        bad_venue("address = \"127.0.0.1:1\"\ndialect = \"fix\""),
        FileConfigError::OutOfRange { key, value, .. } if key == "venue[0].dialect" && value == "\"fix\""
    ));
    assert!(matches!(
        bad_venue("address = \"127.0.0.1:1\"\nbackoff_base_ns = 10\nbackoff_cap_ns = 5"),
        FileConfigError::OutOfRange { key, .. } if key == "venue[0].backoff_cap_ns"
    ));
    assert!(matches!(
        bad_venue("address = \"127.0.0.1:1\"\nack_timeout_ns = 0"),
        FileConfigError::OutOfRange { key, .. } if key == "venue[0].ack_timeout_ns"
    ));
    assert!(matches!(
        EngineConfig::from_toml("symbols = [\"TOOLONGNAME\"]\n[[venue]]\nname=\"v\"").unwrap_err(),
        FileConfigError::WrongType { key, .. } if key == "symbols"
    ));
    // The message a user reads names all three.
    let text = refused("[dispatcher]\norders_max = -5").to_string();
    assert!(
        text.contains("dispatcher.orders_max") && text.contains("-5"),
        "{text}"
    );
}

// Goal: the loops and shared-memory tables take their documented values and refuse the rest
// with key and value.
#[test]
fn engine_and_ipc_tables_are_checked() {
    use keel::engine::Topology;
    use keel::runtime::IdlePolicy;
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n[engine]\ntopology = \"split\"\nidle = \"backoff\"\ndispatcher_core = 1\n\
         executor_core = 0\n[ipc]\ndir = \"/dev/shm/k\"\ncommand_capacity = 64\n\
         cancel_on_strategy_loss = false"
    ))
    .unwrap();
    assert_eq!(c.loops.topology, Topology::Split);
    assert_eq!(c.loops.idle, IdlePolicy::TEST);
    assert_eq!(c.loops.executor_idle, IdlePolicy::TEST, "follows idle");
    assert_eq!(
        (c.loops.dispatcher_core, c.loops.executor_core),
        (Some(1), Some(0))
    );
    let ipc = c.ipc.unwrap();
    assert_eq!(ipc.command_capacity, 64);
    assert!(!ipc.cancel_on_strategy_loss);
    let minimal = EngineConfig::from_toml(MINIMAL).unwrap();
    assert_eq!(minimal.loops.topology, Topology::Inline);
    assert_eq!(minimal.loops.dispatcher_core, None);
    assert!(minimal.ipc.is_none());

    assert!(matches!(
        refused("[engine]\ntopology = \"ring\""),
        FileConfigError::OutOfRange { key, value, .. } if key == "engine.topology" && value == "\"ring\""
    ));
    assert!(matches!(
        refused("[engine]\ntransport = \"dpdk\""),
        FileConfigError::OutOfRange { key, value, .. } if key == "engine.transport" && value == "\"dpdk\""
    ));
    let epoll =
        EngineConfig::from_toml(&format!("{MINIMAL}\n[engine]\ntransport = \"epoll\"")).unwrap();
    assert_eq!(epoll.loops.transport, keel::net::TransportKind::Epoll);
    let own = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n[engine]\nidle = \"backoff\"\nexecutor_idle = \"spin\""
    ))
    .unwrap();
    assert_eq!(own.loops.executor_idle, IdlePolicy::BusySpin);
    assert!(matches!(
        refused("[engine]\nidle = \"nap\""),
        FileConfigError::OutOfRange { key, .. } if key == "engine.idle"
    ));
    assert!(matches!(
        refused("[engine]\nstrategy_ring = 8"),
        FileConfigError::OutOfRange { key, value, .. } if key == "engine.strategy_ring" && value == "8"
    ));
    assert_eq!(
        refused("[engine]\npin = true"),
        FileConfigError::UnknownKey("engine.pin".into())
    );
    assert!(matches!(
        refused("[ipc]\nevent_capacity = 1000"),
        FileConfigError::OutOfRange { key, value, .. } if key == "ipc.event_capacity" && value == "1000"
    ));
    assert!(matches!(
        refused("[ipc]\nstrategy_timeout_ns = 0"),
        FileConfigError::OutOfRange { key, .. } if key == "ipc.strategy_timeout_ns"
    ));
    assert!(matches!(
        refused("[ipc]\ncancel_on_strategy_loss = 1"),
        FileConfigError::WrongType { key, .. } if key == "ipc.cancel_on_strategy_loss"
    ));
}

// Goal (issue 23, point 2): jitter seeds are drawn from the OS unless the file sets one: two
// parses of the same file draw different seeds (links of one file too), a seed the file sets is
// kept exactly, at its worst legal values (0, 2^63-1), and a negative one is refused by key.
#[test]
fn seeds_are_drawn_per_process_unless_the_file_fixes_them() {
    use keel::rng::Seed;
    let feed = "[[feed]]\naddress = \"127.0.0.1:15002\"";
    let second = "[[venue]]\nname = \"b\"\naddress = \"127.0.0.1:15001\"\nusername = \"k\"\n\
                  password = \"k\"";
    let text = format!("{MINIMAL}\n{second}\n{feed}");
    let (a, b) = (
        EngineConfig::from_toml(&text).unwrap(),
        EngineConfig::from_toml(&text).unwrap(),
    );
    let link = |c: &EngineConfig, i: usize| c.venues[i].link.session.jitter_seed;
    assert!(matches!(link(&a, 0), Seed::FromOs(_)));
    assert_ne!(link(&a, 0).value(), link(&b, 0).value(), "per process");
    assert_ne!(link(&a, 0).value(), link(&a, 1).value(), "per link");
    assert_ne!(a.feeds[0].seed.value(), b.feeds[0].seed.value(), "per feed");
    for v in ["0", "9223372036854775807"] {
        let c = EngineConfig::from_toml(&format!("{MINIMAL}jitter_seed = {v}\n{feed}\nseed = {v}"))
            .unwrap();
        assert_eq!(link(&c, 0), Seed::Fixed(v.parse().unwrap()));
        assert_eq!(c.feeds[0].seed, Seed::Fixed(v.parse().unwrap()));
    }
    assert!(matches!(
        refused("jitter_seed = -1"),
        FileConfigError::OutOfRange { key, .. } if key == "venue[0].jitter_seed"
    ));
    assert!(matches!(
        refused(&format!("{feed}\nseed = -1")),
        FileConfigError::OutOfRange { key, .. } if key == "feed[0].seed"
    ));
}

// Goal: market-data feeds take the engine's symbols and their defaults, and refuse bad values.
#[test]
fn feed_tables_are_checked() {
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n[[feed]]\naddress = \"127.0.0.1:15002\"\ntrades = false\nresync_retry_ns = 1000"
    ))
    .unwrap();
    assert_eq!(c.feeds.len(), 1);
    assert_eq!(c.feeds[0].symbols, ["AAPL", "MSFT"]);
    assert!(!c.feeds[0].trades);
    assert_eq!(c.feeds[0].path, "/md");
    assert!(matches!(
        refused("[[feed]]\naddress = \"nowhere\""),
        FileConfigError::WrongType { key, .. } if key == "feed[0].address"
    ));
    assert_eq!(
        refused("[[feed]]\npath = \"/md\""),
        FileConfigError::Missing("feed[0].address".into())
    );
    assert!(matches!(
        refused("[[feed]]\naddress = \"127.0.0.1:1\"\nbackoff_base_ns = 10\nbackoff_cap_ns = 5"),
        FileConfigError::OutOfRange { key, .. } if key == "feed[0].backoff_cap_ns"
    ));
    assert_eq!(
        refused("[[feed]]\naddress = \"127.0.0.1:1\"\nchannel = \"book\""),
        FileConfigError::UnknownKey("feed[0].channel".into())
    );
}

// Goal: a feed's TLS and REST-snapshot keys land where they say; each bad value, and a key
// that only means something with another (`rest_*` without `snapshot = "rest"`, `tls_*`
// without `tls = true`), is refused naming the key and the value.
#[test]
fn feed_tls_and_rest_snapshot_keys_are_checked() {
    use keel::feed::handler::SnapshotSource;
    let feed = "[[feed]]\naddress = \"127.0.0.1:15002\"\n";
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n{feed}tls = true\nsnapshot = \"rest\"\nrest_address = \"127.0.0.1:15003\"\nrest_second_weight = 20"
    ))
    .unwrap();
    assert!(c.feeds[0].alternates.is_empty());
    let tls = c.feeds[0].tls.as_ref().unwrap();
    assert_eq!(tls.server_name, "127.0.0.1", "defaults to the address");
    assert_eq!(tls.ca_file, None);
    let SnapshotSource::Rest(r) = &c.feeds[0].snapshot else {
        panic!("not rest")
    };
    assert_eq!(r.address.to_string(), "127.0.0.1:15003");
    assert_eq!(
        (r.second_weight, r.minute_weight, r.depth_limit),
        (20, 1_200, 1_000)
    );
    // The worst legal values build a handler (the gate's buckets fit the limiter's arithmetic).
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n{feed}snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\n\
         rest_second_weight = 1000000\nrest_minute_weight = 1000000\nrest_depth_weight = 100000\n\
         rest_depth_limit = 5000\nrest_connections = 64\nrest_retry_attempts = 100\n\
         rest_acquire_timeout_ns = \"60m\"\nrest_timeout_ns = \"60m\""
    ))
    .unwrap();
    keel::feed::handler::FeedHandler::with_snapshots(c.feeds[0].clone(), 0).unwrap();
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n{feed}snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\n\
         rest_second_weight = 1\nrest_minute_weight = 1\nrest_depth_weight = 1"
    ))
    .unwrap();
    keel::feed::handler::FeedHandler::with_snapshots(c.feeds[0].clone(), 0).unwrap();
    // Two TLS feeds trusting different CAs: refused (one trust store per transport).
    let two = format!(
        "{MINIMAL}\n{feed}tls = true\ntls_ca_file = \"/a.pem\"\n\
         [[feed]]\naddress = \"127.0.0.1:15004\"\ntls = true\ntls_ca_file = \"/b.pem\""
    );
    assert!(matches!(
        EngineConfig::from_toml(&two).unwrap_err(),
        FileConfigError::OutOfRange { key, .. } if key == "feed[1].tls_ca_file"
    ));
    // A CA file this machine cannot use: a warning naming it (missing; not a certificate).
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n{feed}tls = true\ntls_ca_file = \"/nonexistent/ca.pem\"\n\
         [[feed]]\naddress = \"127.0.0.1:15004\"\ntls = true\ntls_ca_file = \"/nonexistent/ca.pem\""
    ))
    .unwrap();
    let w = c.warnings_for(2);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].to_string()
            .starts_with("feed[0].tls_ca_file = \"/nonexistent/ca.pem\""),
        "{}",
        w[0]
    );
    let not_a_cert = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_a_cert.path(), "not a certificate").unwrap();
    let c = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n{feed}tls = true\ntls_ca_file = \"{}\"",
        not_a_cert.path().display()
    ))
    .unwrap();
    assert_eq!(c.warnings_for(2).len(), 1);
    let key_of = |e: FileConfigError| match e {
        FileConfigError::OutOfRange { key, value, .. }
        | FileConfigError::WrongType { key, value, .. } => (key, value),
        FileConfigError::Missing(key) => (key, String::new()),
        other => panic!("{other:?}"),
    };
    for (extra, key, value) in [
        ("snapshot = \"both\"", "snapshot", "\"both\""),
        ("snapshot = \"rest\"", "rest_address", ""),
        ("rest_address = \"127.0.0.1:1\"", "rest_address", "\"127.0.0.1:1\""),
        ("snapshot = \"rest\"\nrest_address = \"somewhere\"", "rest_address", "\"somewhere\""),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_depth_limit = 0", "rest_depth_limit", "0"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_depth_limit = 5001", "rest_depth_limit", "5001"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_depth_weight = 51", "rest_depth_weight", "51"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_connections = 65", "rest_connections", "65"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_path = \"/a b\"", "rest_path", "\"/a b\""),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_path = \"/a?x=1\"", "rest_path", "\"/a?x=1\""),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_api_key = \"a\\nb\"", "rest_api_key", "(not shown)"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_used_weight_minute_header = \"X: y\"", "rest_used_weight_minute_header", "\"X: y\""),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_timeout_ns = 5", "rest_timeout_ns", "5"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_minute_weight = 1000001", "rest_minute_weight", "1000001"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_second_weight = 0", "rest_second_weight", "0"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_second_weight = 1000000\nrest_minute_weight = 1000000\nrest_depth_weight = 100001", "rest_depth_weight", "100001"),
        ("tls_ca_file = \"/ca.pem\"", "tls_ca_file", "\"/ca.pem\""),
        ("alternates = [\"127.0.0.1:1\", \"nowhere\"]", "alternates[1]", "\"nowhere\""),
        ("alternates = [5]", "alternates[0]", "5"),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_path = \"/a#b\"", "rest_path", "\"/a#b\""),
        ("snapshot = \"rest\"\nrest_address = \"127.0.0.1:1\"\nrest_path = \"/a\\r\\nHost: x\"", "rest_path", "\"/a\\r\\nHost: x\""),
        ("pending_max = 0", "pending_max", "0"),
        ("tls = true\ntls_server_name = \"not a name\"", "tls_server_name", "\"not a name\""),
    ] {
        let (k, v) = key_of(refused(&format!("{feed}{extra}")));
        assert_eq!(k, format!("feed[0].{key}"), "{extra}");
        assert_eq!(v, value, "{extra}");
    }
}

// Goal: nothing that would be cut on the wire or abort at start gets past the configuration:
// a username wider than SoupBinTCP's 6 characters (two accounts "trader01" and "trader02"
// would log in as one), a packet limit past the receive buffer, and sizes whose start-up
// memory exceeds the ceiling — refused with the key, the value and the figure.
#[test]
fn values_that_would_be_cut_or_abort_are_refused() {
    let venue = |username: &str, extra: &str| {
        EngineConfig::from_toml(&format!(
            "symbols = [\"AAPL\"]\n[[venue]]\nname = \"v\"\naddress = \"127.0.0.1:1\"\n\
             username = \"{username}\"\npassword = \"keel\"\n{extra}"
        ))
    };
    for (name, ok) in [
        ("trader", true),
        ("trader01", false),
        ("", false),
        ("a b", false),
    ] {
        let got = venue(name, "");
        match got {
            Ok(_) => assert!(ok, "{name:?} accepted"),
            Err(FileConfigError::OutOfRange { key, value, .. }) => {
                assert!(!ok, "{name:?} refused");
                assert_eq!(
                    (key.as_str(), value),
                    ("venue[0].username", format!("\"{name}\""))
                );
            }
            Err(other) => panic!("{name:?}: {other}"),
        }
    }
    for (len, ok) in [(255, false), (256, true), (65_534, true), (65_535, false)] {
        let got = venue("keel", &format!("max_packet_len = {len}"));
        assert_eq!(got.is_ok(), ok, "max_packet_len {len}: {got:?}");
    }
    assert!(matches!(
        venue("keel", "orders_max = 4294967295"),
        Err(FileConfigError::OutOfRange { key, .. }) if key == "venue[0].orders_max"
    ));
    let need = EngineConfig::from_toml(&format!(
        "symbols = [\"AAPL\"]\n[engine]\nmemory_max_bytes = 1_000_000_000\n\
         [dispatcher]\norders_max = 1073741824\n{}",
        MINIMAL.replace("symbols = [\"AAPL\", \"MSFT\"]", "")
    ));
    match need {
        Err(FileConfigError::MemoryNeed {
            need_bytes,
            limit_bytes,
            largest_key,
            ..
        }) => {
            assert_eq!(limit_bytes, 1_000_000_000);
            assert_eq!(largest_key, "dispatcher.orders_max");
            assert!(
                need_bytes > 50 << 30,
                "2^30 slots need tens of GB: {need_bytes}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The default configuration fits a small ceiling.
    let fits = EngineConfig::from_toml(&format!(
        "{MINIMAL}\n[engine]\nmemory_max_bytes = 1_000_000_000\n"
    ));
    assert!(fits.is_ok(), "{fits:?}");
}

// Goal (issues 12–13): the operator, wire-log, metrics, alert and budget tables take their
// worst legal values and refuse their worst illegal ones by key, with the value.
#[test]
fn operator_metrics_alert_and_budget_keys_at_their_bounds() {
    let ok = |extra: &str| EngineConfig::from_toml(&format!("{MINIMAL}\n{extra}")).unwrap();
    let c = ok(
        "[operator]\nstop_timeout_ns = \"10m\"\ncancel_on_stop = false\n\
                [metrics]\nhttp = \"127.0.0.1:0\"\nenabled = false\n\
                [alerts]\nfailure_rate_pct = 100\np99_baseline_factor = 1000\n\
                p99_window_ns = \"1s\"\np99_samples_min = 1\n\
                loop_stall_ns = \"500ms\"\nlink_down_ns = \"1440m\"\nunknown_orders_for_ns = \"0s\"\n\
                [budget]\ncancel_ack_p99_ns = \"1ns\"\n\
                [wire_log]\ndir = \"w\"\nring_bytes = 4096\nfile_bytes_max = 1048576",
    );
    assert_eq!(c.operator.stop_timeout_ns, 600_000_000_000);
    assert_eq!(c.metrics.alerts.failure_rate_pct, 100);
    assert_eq!(c.metrics.alerts.loop_stall_ns, 500_000_000);
    assert_eq!(c.metrics.alerts.link_down_ns, 86_400_000_000_000);
    assert_eq!(c.metrics.alerts.unknown_orders_for_ns, 0);
    let other = ok("[alerts]\nloop_stall_ns = \"60m\"\nlink_down_ns = \"1s\"\n\
                    unknown_orders_for_ns = \"1440m\"");
    assert_eq!(other.metrics.alerts.loop_stall_ns, 3_600_000_000_000);
    assert_eq!(other.metrics.alerts.link_down_ns, 1_000_000_000);
    assert_eq!(
        other.metrics.alerts.unknown_orders_for_ns,
        86_400_000_000_000
    );
    assert_eq!(c.metrics.budget.cancel_ack_p99_ns, 1);
    assert_eq!(c.counters_file(), None, "metrics disabled: no file");
    // Quotas and the end-to-end budget at their worst legal values.
    let c = ok("[budget]\ne2e_p99_ns = 9223372036854775807\n\
                [dispatcher.quota]\nnew_per_sec = 10000000\nnew_burst = 10000000\n\
                in_flight_max = 4294967295\n\
                [[dispatcher.quota.strategy]]\nid = 3\nnew_per_sec = 0");
    assert_eq!(c.metrics.budget.e2e_p99_ns, i64::MAX as u64);
    assert_eq!(c.dispatcher.quota.in_flight_max, u32::MAX);
    let own = c.strategy_quotas[0];
    assert_eq!(own.0, keel::order::StrategyId(3));
    assert_eq!((own.1.new_per_sec, own.1.in_flight_max), (0, u32::MAX));
    for (extra, key) in [
        (
            "[operator]\nstop_timeout_ns = \"11m\"",
            "operator.stop_timeout_ns",
        ),
        ("[operator]\nadmin_socket = \"\"", "operator.admin_socket"),
        (
            &format!("[operator]\nadmin_socket = \"/{}\"", "a".repeat(107)) as &str,
            "operator.admin_socket",
        ),
        ("[metrics]\nhttp = \"nowhere\"", "metrics.http"),
        ("[metrics]\nfile = \"\"", "metrics.file"),
        ("[alerts]\nfailure_rate_pct = 0", "alerts.failure_rate_pct"),
        (
            "[alerts]\nfailure_rate_pct = 101",
            "alerts.failure_rate_pct",
        ),
        (
            "[alerts]\np99_baseline_factor = 0",
            "alerts.p99_baseline_factor",
        ),
        (
            "[alerts]\np99_window_ns = \"999ms\"",
            "alerts.p99_window_ns",
        ),
        ("[alerts]\np99_samples_min = 0", "alerts.p99_samples_min"),
        (
            "[alerts]\nbreaker_open_ns = \"-1s\"",
            "alerts.breaker_open_ns",
        ),
        ("[alerts]\npage_me = true", "alerts.page_me"),
        (
            "[alerts]\nloop_stall_ns = \"499ms\"",
            "alerts.loop_stall_ns",
        ),
        ("[alerts]\nloop_stall_ns = \"61m\"", "alerts.loop_stall_ns"),
        ("[alerts]\nlink_down_ns = \"999ms\"", "alerts.link_down_ns"),
        ("[alerts]\nlink_down_ns = \"1441m\"", "alerts.link_down_ns"),
        (
            "[alerts]\nunknown_orders_for_ns = \"1441m\"",
            "alerts.unknown_orders_for_ns",
        ),
        (
            "[alerts]\nunknown_orders_for_ns = \"-1s\"",
            "alerts.unknown_orders_for_ns",
        ),
        (
            "[budget]\nnew_ack_p99_ns = \"fast\"",
            "budget.new_ack_p99_ns",
        ),
        ("[budget]\ne2e_p99_ns = -1", "budget.e2e_p99_ns"),
        ("[budget]\ne2e_p99_ns = \"1 s\"", "budget.e2e_p99_ns"),
        (
            "[dispatcher.quota]\nnew_per_sec = 10000001\nnew_burst = 1",
            "dispatcher.quota.new_per_sec",
        ),
        (
            "[dispatcher.quota]\nnew_per_sec = 1",
            "dispatcher.quota.new_burst",
        ),
        (
            "[dispatcher.quota]\nin_flight_max = 4294967296",
            "dispatcher.quota.in_flight_max",
        ),
        (
            "[[dispatcher.quota.strategy]]\nnew_per_sec = 1\nnew_burst = 1",
            "dispatcher.quota.strategy[0].id",
        ),
        (
            "[[dispatcher.quota.strategy]]\nid = 1\n[[dispatcher.quota.strategy]]\nid = 1",
            "dispatcher.quota.strategy[1].id",
        ),
        (
            "[[dispatcher.quota.strategy]]\nid = 1\nburst = 1",
            "dispatcher.quota.strategy[0].burst",
        ),
        ("[wire_log]\nring_bytes = 4096", "wire_log.dir"),
        (
            "[wire_log]\ndir = \"w\"\nring_bytes = 4095",
            "wire_log.ring_bytes",
        ),
        (
            "[wire_log]\ndir = \"w\"\nfile_bytes_max = 1048575",
            "wire_log.file_bytes_max",
        ),
    ] {
        let e = refused(extra).to_string();
        assert!(e.contains(key), "{extra}: {e}");
    }
}

// Goal (issue 13): `[control]` takes its worst legal values and refuses its worst illegal ones
// by key, with the value; a core symbol must be one of `symbols`; the controller is refused
// without a counters file (it would steer blind).
#[test]
fn control_keys_at_their_bounds() {
    let with_file = "[metrics]\nfile = \"/tmp/keel-control-test-counters\"\n";
    let ok =
        |extra: &str| EngineConfig::from_toml(&format!("{MINIMAL}\n{with_file}{extra}")).unwrap();
    let c = ok(
        "[control]\nenabled = true\ninterval_ns = \"10ms\"\nrate_min_permille = 1\n\
                decrease_permille = 999\nincrease_permille = 1000\nhold_ns = \"60m\"\n\
                ack_p99_ns = \"1ns\"\nack_samples_min = 1\nshed_below_permille = 500\n\
                core_symbols = [\"AAPL\"]",
    );
    let k = &c.metrics.control;
    assert!(k.enabled);
    assert_eq!(
        (
            k.interval_ns,
            k.rate_min_permille,
            k.decrease_permille,
            k.hold_ns
        ),
        (10_000_000, 1, 999, 3_600_000_000_000)
    );
    assert_eq!(k.core_symbols, vec!["AAPL".to_string()]);
    let c =
        ok("[control]\ninterval_ns = \"60s\"\nrate_min_permille = 1000\nshed_below_permille = 0");
    assert!(!c.metrics.control.enabled, "off unless asked");
    for (extra, key, value) in [
        (
            "[control]\ninterval_ns = \"9ms\"",
            "control.interval_ns",
            "9000000",
        ),
        (
            "[control]\ninterval_ns = \"61s\"",
            "control.interval_ns",
            "61000000000",
        ),
        (
            "[control]\nrate_min_permille = 0",
            "control.rate_min_permille",
            "0",
        ),
        (
            "[control]\nrate_min_permille = 1001",
            "control.rate_min_permille",
            "1001",
        ),
        (
            "[control]\ndecrease_permille = 1000",
            "control.decrease_permille",
            "1000",
        ),
        (
            "[control]\ndecrease_permille = 0",
            "control.decrease_permille",
            "0",
        ),
        (
            "[control]\nincrease_permille = 0",
            "control.increase_permille",
            "0",
        ),
        (
            "[control]\nhold_ns = \"61m\"",
            "control.hold_ns",
            "3660000000000",
        ),
        (
            "[control]\nshed_below_permille = 501",
            "control.shed_below_permille",
            "501",
        ),
        (
            "[control]\nrate_min_permille = -1",
            "control.rate_min_permille",
            "-1",
        ),
        (
            "[control]\ncore_symbols = [\"TSLA\"]",
            "control.core_symbols",
            "TSLA",
        ),
        ("[control]\ncore_symbols = [1]", "control.core_symbols", "1"),
        ("[control]\nsteer = true", "control.steer", "control.steer"),
    ] {
        let e = EngineConfig::from_toml(&format!("{MINIMAL}\n{with_file}{extra}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains(value), "{extra}: {e}");
    }
    // No counters file: metrics off, or no file and no [ipc] directory.
    let e = refused("[control]\nenabled = true").to_string();
    assert!(e.contains("control.enabled"), "{e}");
    let e =
        refused("[metrics]\nenabled = false\nfile = \"c\"\n[control]\nenabled = true").to_string();
    assert!(e.contains("counters file"), "{e}");
}

// Goal: a FIX venue's keys at their worst legal values parse and print back to the same
// configuration; one step outside each bound, a wrong type or an unknown value is refused
// naming the key and the value. Method: `protocol = "fix44"` tables through from_toml and
// to_toml.
#[test]
fn fix_venue_keys_hold_at_their_bounds_and_refuse_beyond() {
    use keel::session::fix::{FixReconcile, FixSettings};
    use keel::session::ProtocolConfig;
    let fix = |extra: &str| format!("{MINIMAL}protocol = \"fix44\"\n{extra}");
    let c32 = "C".repeat(32);
    let legal = fix(&format!(
        "sender_comp_id = \"{c32}\"\ntarget_comp_id = \"~\"\naccount = \"{c32}\"\n\
         reset_on_logon = true\nreconcile = \"replay\"\nmessage_max = 65535\n\
         tags_max = 256\nfield_max = 4096\nreject_codes_throttled = [65535]\n"
    ));
    let c = EngineConfig::from_toml(&legal).unwrap();
    let ProtocolConfig::Fix44(s) = c.venues[0].protocol.clone() else {
        panic!("a FIX venue");
    };
    assert_eq!(
        (
            s.sender_comp_id.len(),
            s.target_comp_id.as_str(),
            s.reset_on_logon
        ),
        (32, "~", true)
    );
    assert_eq!(s.reconcile, FixReconcile::Replay);
    assert_eq!(
        (s.limits.message_max, s.limits.tags_max, s.limits.field_max),
        (65_535, 256, 4_096)
    );
    let printed = keel::config::to_toml(&c);
    assert_eq!(EngineConfig::from_toml(&printed).unwrap(), c, "{printed}");
    // The smallest legal bounds too.
    let small = fix(
        "sender_comp_id = \"K\"\ntarget_comp_id = \"V\"\nmessage_max = 256\ntags_max = 16\nfield_max = 16\n",
    );
    let c = EngineConfig::from_toml(&small).unwrap();
    let ProtocolConfig::Fix44(s) = c.venues[0].protocol.clone() else {
        panic!("a FIX venue");
    };
    assert_eq!(s.limits.tags_max, 16);
    assert_eq!(s.account, FixSettings::default().account);

    let ids = "sender_comp_id = \"KEEL\"\ntarget_comp_id = \"VENUE\"\n";
    let refused_fix = |extra: &str| EngineConfig::from_toml(&fix(extra)).unwrap_err();
    let c33 = "C".repeat(33);
    for (extra, key, value) in [
        (
            format!("sender_comp_id = \"{c33}\"\ntarget_comp_id = \"V\"\n"),
            "venue[0].sender_comp_id",
            format!("\"{c33}\""),
        ),
        (
            "sender_comp_id = \"\"\ntarget_comp_id = \"V\"\n".into(),
            "venue[0].sender_comp_id",
            "\"\"".into(),
        ),
        (
            "sender_comp_id = \"K\"\ntarget_comp_id = \"a b\"\n".into(),
            "venue[0].target_comp_id",
            "\"a b\"".into(),
        ),
        (
            format!("{ids}message_max = 255\n"),
            "venue[0].message_max",
            "255".into(),
        ),
        (
            format!("{ids}message_max = 65536\n"),
            "venue[0].message_max",
            "65536".into(),
        ),
        (
            format!("{ids}tags_max = 15\n"),
            "venue[0].tags_max",
            "15".into(),
        ),
        (
            format!("{ids}tags_max = 257\n"),
            "venue[0].tags_max",
            "257".into(),
        ),
        (
            format!("{ids}field_max = 4097\n"),
            "venue[0].field_max",
            "4097".into(),
        ),
        (
            format!("{ids}reconcile = \"resend\"\n"),
            "venue[0].reconcile",
            "\"resend\"".into(),
        ),
    ] {
        match refused_fix(&extra) {
            FileConfigError::OutOfRange {
                key: k, value: v, ..
            } => {
                assert_eq!((k.as_str(), v), (key, value), "{extra}")
            }
            other => panic!("{extra}: {other:?}"),
        }
    }
    // Required, wrong type, beyond the integer's type, an unknown protocol.
    assert!(
        matches!(refused_fix("target_comp_id = \"V\"\n"), FileConfigError::Missing(k) if k == "venue[0].sender_comp_id")
    );
    assert!(
        matches!(refused_fix(&format!("{ids}reset_on_logon = 1\n")), FileConfigError::WrongType { key, .. } if key == "venue[0].reset_on_logon")
    );
    assert!(
        matches!(refused_fix(&format!("{ids}tags_max = 70000\n")), FileConfigError::OutOfRange { key, .. } if key == "venue[0].tags_max")
    );
    let e = EngineConfig::from_toml(&format!("{MINIMAL}protocol = \"fix42\"\n")).unwrap_err();
    assert!(e.to_string().contains("fix44"), "{e}");
    // FIX's login fields: 1 to 64 printable characters.
    let long = "p".repeat(65);
    let e = EngineConfig::from_toml(
        &fix(ids).replace("password = \"keel\"", &format!("password = \"{long}\"")),
    )
    .unwrap_err();
    assert!(
        matches!(e, FileConfigError::OutOfRange { ref key, .. } if key == "venue[0].password"),
        "{e:?}"
    );
    let p64 = "p".repeat(64);
    assert!(EngineConfig::from_toml(
        &fix(ids).replace("password = \"keel\"", &format!("password = \"{p64}\""))
    )
    .is_ok());
}
