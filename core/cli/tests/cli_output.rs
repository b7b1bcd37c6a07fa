//! What the command line prints for a person: states and scenario names as the docs and the
//! flags spell them (never Rust debug names), and progress lines that rewrite themselves with
//! `\r` only on a terminal.

use std::process::{Command, Stdio};

use keel::order::Contradiction;
use keel::session::machine::LinkState;
use keel_venue::demo::Scenario;

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

// Goal: the names printed are the names a user reads in the docs or types on the command line.
#[test]
fn names_are_the_documented_ones() {
    let links = [
        (LinkState::Disconnected, "DISCONNECTED"),
        (LinkState::Connecting, "CONNECTING"),
        (LinkState::Connected, "CONNECTED"),
        (LinkState::Reconciling, "RECONCILING"),
        (LinkState::Synced, "SYNCED"),
        (LinkState::ReadOnly, "READ-ONLY"),
    ];
    for (state, name) in links {
        assert_eq!(state.to_string(), name);
    }
    // Every scenario prints as the value `--scenario` takes, and that value parses back.
    use clap::ValueEnum;
    for scenario in Scenario::value_variants() {
        let name = scenario.to_string();
        assert_eq!(Scenario::from_str(&name, false), Ok(*scenario), "{name}");
    }
    assert_eq!(Scenario::ReconnectStorm.to_string(), "reconnect-storm");
    assert_eq!(Contradiction::AfterClose.to_string(), "AfterClose");
    assert_eq!(
        keel::proto::ouch::Dialect::OUCH_CONNECT.to_string(),
        "ouch-connect"
    );
    assert_eq!(
        keel::session::ouch::ReconcileMode::AccountQueryBarrier.to_string(),
        "account-query"
    );
}

// Goal: `keel demo` with stderr going to a pipe writes no carriage return, and its report
// names the scenario as the flag spells it. And (issue 12) its wire log, dumped by `keel log
// dump`, holds every message the venue's own counters say it exchanged with keel: the
// venue's packets in are keel's messages out and the other way round — counted at the
// demo's end, after its quiet drain, so nothing but a heartbeat can be in flight at that
// instant (at most one each way). The same over FIX (issue 25): the venue's FIX messages in
// and out are the wire log's, and the dump reads them as FIX.
#[test]
fn demo_progress_to_a_pipe_is_plain_lines() {
    demo_to_a_pipe("ouch", "venue order entry: ");
}

#[test]
fn demo_over_fix_logs_every_message_the_venue_counts() {
    demo_to_a_pipe("fix44", "venue order entry (FIX 4.4): ");
}

fn demo_to_a_pipe(protocol: &str, counted_prefix: &str) {
    let wire = tempfile::tempdir().unwrap();
    let output = Command::new(KEEL)
        .args(["demo", "--quick", "--idle", "backoff", "--scenario", "calm"])
        .args(["--protocol", protocol])
        .arg("--wire-log")
        .arg(wire.path())
        .stdin(Stdio::null())
        .output()
        .expect("keel demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains('\r'), "{stderr:?}");
    for line in stderr.lines().filter(|l| l.contains(" | link ")) {
        assert!(line.contains("| link SYNCED |"), "{line}");
    }
    assert!(
        stdout.contains("keel demo — scenario calm (quick)"),
        "{stdout}"
    );
    assert!(!stdout.contains("Calm"), "{stdout}");

    let counted = stdout
        .lines()
        .find_map(|l| l.strip_prefix(counted_prefix))
        .expect("the venue's counters in the report");
    let numbers: Vec<u64> = counted
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let (venue_in, venue_out) = (numbers[0], numbers[1]);
    let dump = Command::new(KEEL)
        .args(["log", "dump"])
        .arg(wire.path().join("wire.log"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let (mut keel_in, mut keel_out) = (0u64, 0u64);
    let kind = if protocol == "fix44" {
        " fix "
    } else {
        " soupbin "
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains(kind), "{line}");
        match line.split_whitespace().nth(2) {
            Some("in") => keel_in += 1,
            Some("out") => keel_out += 1,
            other => panic!("{other:?} in {line}"),
        }
    }
    assert!(
        text.contains(&format!(
            "# {} messages: {keel_in} in, {keel_out} out; 0 dropped",
            keel_in + keel_out
        )),
        "{text}"
    );
    assert!(venue_in > 100, "a real run: {venue_in} packets");
    assert!(
        (venue_in..=venue_in + 1).contains(&keel_out),
        "keel sent {keel_out}, the venue read {venue_in}"
    );
    assert!(
        (keel_in..=keel_in + 1).contains(&venue_out),
        "the venue wrote {venue_out}, keel read {keel_in}"
    );
}

// Goal (issue 25): the demo's incident over FIX 4.4: the breaker opens on the venue's system
// rejects (OrdRejReason 101) and closes after the probes; the venue's FIX endpoint refused
// nothing and no invariant broke. (The storm over FIX, whose report compares latencies, runs
// from the optimised binary in scripts/test's demo step, as the OUCH storm does: a timing
// belongs there, not in a debug test on a loaded machine.)
#[test]
fn the_incident_runs_over_fix() {
    let output = Command::new(KEEL)
        .args(["demo", "--quick", "--idle", "backoff", "--protocol", "fix"])
        .args(["--scenario", "incident"])
        .stdin(Stdio::null())
        .output()
        .expect("keel demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains(", protocol FIX 4.4"), "{stdout}");
    assert!(stdout.contains(" 0 rejected, 0 garbled"), "{stdout}");
    assert!(stdout.contains(" checked, 0 violated"), "{stdout}");
    // "breaker: O opened, H half-opened, C closed"
    let breaker: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("breaker: "))
        .unwrap_or_else(|| panic!("no breaker line: {stdout}"))
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(breaker[0] >= 1 && breaker[2] >= 1, "{stdout}");
}
