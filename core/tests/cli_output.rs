//! What the command line prints for a person: states and scenario names as the docs and the
//! flags spell them (never Rust debug names), and progress lines that rewrite themselves with
//! `\r` only on a terminal.

use std::process::{Command, Stdio};

use keel::demo::Scenario;
use keel::order::Contradiction;
use keel::session::machine::LinkState;

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
// names the scenario as the flag spells it.
#[test]
fn demo_progress_to_a_pipe_is_plain_lines() {
    let output = Command::new(KEEL)
        .args(["demo", "--quick", "--idle", "backoff", "--scenario", "calm"])
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
}
