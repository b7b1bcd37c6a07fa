//! kill -9 of `keel run` in the middle of a FIX 4.4 session with a QuickFIX/C++ acceptor, and
//! a restart that resumes it: keel logs on again from its journaled outbound reservation (the
//! jump QuickFIX asks for is gap-filled, never resent), asks for what it missed while it was
//! down (an execution QuickFIX sent into the void), books it once, and still owns its open
//! orders. The strategy is a Rust strategy on the shared-memory channel in this process.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use keel::ipc::{Channel, IpcEvent};
use keel::order::{Command, EventKind, NewOrder, RefusalReason, Side};

mod common;

use common::peers::{keel_run, stop_keel_run, synced_channel};
use common::quickfix::Acceptor;

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn order(seq: u64) -> NewOrder {
    common::resting_buy(0, seq)
}

/// `keel run`'s configuration in `dir` against a FIX venue at `venue`; `risk` is the body of
/// its `[dispatcher.risk]` section (empty: the defaults).
fn write_config(dir: &std::path::Path, venue: std::net::SocketAddr, risk: &str) -> PathBuf {
    let (journal, ipc) = (dir.join("journal"), dir.join("ipc"));
    let config = dir.join("keel.toml");
    std::fs::write(
        &config,
        format!(
            "symbols = [\"AAPL\", \"MSFT\"]\n\
             [dispatcher]\nstrategies = 1\n\
             [dispatcher.risk]\n{risk}\n\
             [engine]\nidle = \"backoff\"\n\
             [operator]\ncancel_on_stop = false\n\
             [journal]\ndir = \"{}\"\n\
             [ipc]\ndir = \"{}\"\nstrategy_timeout_ns = 500_000_000\n\
             [[venue]]\nname = \"quickfix\"\naddress = \"{}\"\nusername = \"keel\"\n\
             password = \"keel\"\nprotocol = \"fix44\"\nsender_comp_id = \"KEEL\"\n\
             target_comp_id = \"VENUE\"\nbackoff_base_ns = 20_000_000\nbackoff_cap_ns = 200_000_000\n",
            journal.display(),
            ipc.display(),
            venue
        ),
    )
    .unwrap();
    config
}

/// Collects events until every id in `ids` has one `want` accepts.
fn await_events(
    channel: &Channel,
    seen: &mut Vec<(u64, EventKind)>,
    ids: &[u64],
    want: impl Fn(&EventKind) -> bool,
) {
    wait_until("the engine's answers", || {
        channel.beat_strategy();
        while let Some(e) = channel.pop_event() {
            if let Ok(IpcEvent::Event(e)) = e {
                seen.push((e.id.sequence(), e.kind));
            }
        }
        ids.iter()
            .all(|id| seen.iter().any(|(s, k)| s == id && want(k)))
    });
}

// Goal: a kill -9 mid-session and a restart resume the FIX session with QuickFIX: both
// numbers resumed (no "MsgSeqNum too low" from QuickFIX, keel's jump gap-filled), the execution
// sent while keel was down asked for and booked once, the open orders still keel's.
#[test]
fn a_kill_nine_and_restart_resume_the_fix_session() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ipc = dir.path().join("ipc");
    let config = write_config(dir.path(), venue.addr, "");
    let log = dir.path().join("run0.log");
    let engine = keel_run(&config, &log);
    let channel = synced_channel(&ipc, 0);
    let mut seen = Vec::new();
    for seq in 1..=3 {
        assert!(channel.push_command(&Command::New(order(seq))));
    }
    await_events(&channel, &mut seen, &[1, 2, 3], |k| {
        *k == EventKind::Accepted
    });
    let ids: Vec<String> = (0..3)
        .map(|n| {
            let line = venue.wait_while("new ", n, || std::thread::sleep(Duration::from_millis(1)));
            line.split(' ').nth(1).unwrap().to_string()
        })
        .collect();
    let epoch = channel.engine_epoch();
    drop(engine); // SIGKILL, then reaped
    venue.wait_while("logout", 0, || std::thread::sleep(Duration::from_millis(1)));
    // While keel is down the venue fills order 2: QuickFIX numbers and stores the report.
    venue.send(&format!("fill {} 10 50", ids[1]));
    venue.wait_while("filled", 0, || std::thread::sleep(Duration::from_millis(1)));

    let log = dir.path().join("run1.log");
    let engine = keel_run(&config, &log);
    let channel = synced_channel(&ipc, epoch);
    // keel asked for what it missed and booked the fill (once).
    let mut after = Vec::new();
    await_events(&channel, &mut after, &[2], |k| {
        matches!(k, EventKind::Filled { qty: 10, .. })
    });
    venue.wait_while("admin 2 ", 0, || {
        std::thread::sleep(Duration::from_millis(1))
    });
    // keel's outbound jump was asked for by QuickFIX and filled with a SequenceReset.
    venue.wait_while("admin 4 ", 0, || {
        std::thread::sleep(Duration::from_millis(1))
    });
    assert!(!venue.saw("logout-sent"), "{:?}", venue.seen);
    assert!(!venue.saw("reject-sent"), "{:?}", venue.seen);
    // The orders left open are still keel's: both cancel.
    for seq in [1, 3] {
        assert!(channel.push_command(&Command::Cancel { id: order(seq).id }));
    }
    await_events(&channel, &mut after, &[1, 3], |k| *k == EventKind::Canceled);
    std::thread::sleep(Duration::from_millis(200));
    channel.beat_strategy();
    while let Some(e) = channel.pop_event() {
        if let Ok(IpcEvent::Event(e)) = e {
            after.push((e.id.sequence(), e.kind));
        }
    }
    let fills = after
        .iter()
        .filter(|(s, k)| *s == 2 && matches!(k, EventKind::Filled { .. }))
        .count();
    assert_eq!(fills, 1, "{after:?}");
    let report = stop_keel_run(engine, &log);
    assert!(report.contains("open orders: 0"), "{report}");
}

// Goal (issue 38, point 1): kill -9 with an order whose acknowledgement the venue never sent.
// The restarted engine logs on from its reserved number and asks for its mass status; the
// venue (QuickFIX) resends what keel missed, the earlier process's mass-status answer ("no
// orders") among it. That answer is never taken as the new process's: the order stays in
// doubt until the venue's own answer lists it open — never "not received" — and the new
// process's query is read by the venue (not skipped by a gap fill), so the link is SYNCED
// without waiting for a reconciliation timeout.
#[test]
fn a_restart_never_declares_dead_an_order_the_venue_holds() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), venue.addr, "");
    let ipc = dir.path().join("ipc");
    let log = dir.path().join("run0.log");
    let engine = keel_run(&config, &log);
    let channel = synced_channel(&ipc, 0);
    venue.wait_while("mass-status", 0, || {
        std::thread::sleep(Duration::from_millis(1))
    });
    venue.send("hold");
    venue.wait_while("holding", 0, || {
        std::thread::sleep(Duration::from_millis(1))
    });
    assert!(channel.push_command(&Command::New(order(1))));
    venue.wait_while("held ", 0, || std::thread::sleep(Duration::from_millis(1)));
    let epoch = channel.engine_epoch();
    drop(engine); // SIGKILL, then reaped
    venue.wait_while("logout", 0, || std::thread::sleep(Duration::from_millis(1)));

    let log = dir.path().join("run1.log");
    let engine = keel_run(&config, &log);
    let channel = synced_channel(&ipc, epoch);
    // The new process's own query reached the venue.
    venue.wait_while("mass-status", 1, || {
        std::thread::sleep(Duration::from_millis(1))
    });
    let mut after = Vec::new();
    await_events(&channel, &mut after, &[1], |k| *k == EventKind::Accepted);
    assert!(
        !after
            .iter()
            .any(|(s, k)| *s == 1 && matches!(k, EventKind::Rejected { .. })),
        "a live order declared dead: {after:?}"
    );
    assert!(!venue.saw("logout-sent"), "{:?}", venue.seen);
    // It is live and keel's: it cancels.
    assert!(channel.push_command(&Command::Cancel { id: order(1).id }));
    await_events(&channel, &mut after, &[1], |k| *k == EventKind::Canceled);
    // Before the kill it said "logout" once (the connection dropped); a graceful stop now
    // logs out (issue 38, point 4): keel's Logout reaches the venue, whose answer ends it.
    assert!(!venue.saw("admin 5 "), "{:?}", venue.seen);
    let report = stop_keel_run(engine, &log);
    assert!(report.contains(" 0 reconciliation timeouts"), "{report}");
    venue.wait_while("admin 5 ", 0, || {
        std::thread::sleep(Duration::from_millis(1))
    });
    let said = std::fs::read_to_string(log.with_extension("err")).unwrap();
    assert!(
        said.contains("logged out of 1 venue session(s), each answered"),
        "{said}"
    );
}

// Goal (issue 38, point 5): a position survives a restart for risk and reduce-only. With
// position_max 10 and a filled buy of 8, a buy of 5 is refused `RiskPosition` — before the
// restart, after a SIGTERM restart and after a kill -9 restart on the same journal — and a
// reduce-only sell of 8 is admitted after both.
#[test]
fn positions_survive_a_restart_for_risk_and_reduce_only() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), venue.addr, "position_max = 10");
    let ipc = dir.path().join("ipc");
    let log = dir.path().join("run0.log");
    let engine = keel_run(&config, &log);
    let channel = synced_channel(&ipc, 0);
    let buy = |seq, qty| NewOrder { qty, ..order(seq) };
    let mut seen = Vec::new();
    assert!(channel.push_command(&Command::New(buy(1, 8))));
    await_events(&channel, &mut seen, &[1], |k| *k == EventKind::Accepted);
    let line = venue.wait_while("new ", 0, || std::thread::sleep(Duration::from_millis(1)));
    let id = line.split(' ').nth(1).unwrap().to_string();
    venue.send(&format!("fill {id} 8 50"));
    await_events(&channel, &mut seen, &[1], |k| {
        matches!(k, EventKind::Filled { qty: 8, .. })
    });
    let refused = |k: &EventKind| {
        *k == EventKind::Refused {
            reason: RefusalReason::RiskPosition,
        }
    };
    assert!(channel.push_command(&Command::New(buy(2, 5))));
    await_events(&channel, &mut seen, &[2], refused);
    let mut epoch = channel.engine_epoch();
    let mut engine = Some(engine);
    let mut next = 3;
    for (round, kill) in [(1, false), (2, true)] {
        let old = engine.take().unwrap();
        if kill {
            drop(old); // SIGKILL, then reaped
        } else {
            stop_keel_run(old, &dir.path().join(format!("run{}.log", round - 1)));
        }
        let log = dir.path().join(format!("run{round}.log"));
        engine = Some(keel_run(&config, &log));
        let channel = synced_channel(&ipc, epoch);
        epoch = channel.engine_epoch();
        let mut after = Vec::new();
        assert!(channel.push_command(&Command::New(buy(next, 5))));
        await_events(&channel, &mut after, &[next], refused);
        // A reduce-only sell of 8 takes the long to 0: admitted, it reaches the venue.
        let sell = NewOrder {
            side: Side::Sell,
            reduce_only: true,
            ..buy(next + 1, 8)
        };
        assert!(channel.push_command(&Command::New(sell)));
        await_events(&channel, &mut after, &[next + 1], |k| {
            matches!(
                k,
                EventKind::Accepted | EventKind::Refused { .. } | EventKind::Rejected { .. }
            )
        });
        assert!(
            after
                .iter()
                .any(|(s, k)| *s == next + 1 && *k == EventKind::Accepted),
            "round {round} (kill -9: {kill}): {after:?}"
        );
        assert!(channel.push_command(&Command::Cancel { id: sell.id }));
        await_events(&channel, &mut after, &[next + 1], |k| {
            *k == EventKind::Canceled
        });
        next += 2;
    }
    stop_keel_run(engine.take().unwrap(), &dir.path().join("run2.log"));
}

// Goal (issue 39, point 1): orders restored live whose strategy does not come back are not
// left working unwatched. Method: an order rests at QuickFIX; kill -9 of the engine (and the
// strategy: this test stops beating); the restarted engine restores the order live; no
// strategy attaches within `restored_attach_timeout_ns` (1 s here): the strategy is treated as
// lost, the order is canceled at the venue, the log says why and the stop report counts it.
#[test]
fn restored_orders_of_a_strategy_that_never_attaches_are_canceled() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), venue.addr, "");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "strategy_timeout_ns = 500_000_000",
        "strategy_timeout_ns = 500_000_000\nrestored_attach_timeout_ns = \"1s\"",
    );
    std::fs::write(&config, text).unwrap();
    let ipc = dir.path().join("ipc");
    let log = dir.path().join("run0.log");
    let engine = keel_run(&config, &log);
    let channel = synced_channel(&ipc, 0);
    let mut seen = Vec::new();
    assert!(channel.push_command(&Command::New(order(1))));
    await_events(&channel, &mut seen, &[1], |k| *k == EventKind::Accepted);
    let line = venue.wait_while("new ", 0, || std::thread::sleep(Duration::from_millis(1)));
    let id = line.split(' ').nth(1).unwrap().to_string();
    let epoch = channel.engine_epoch();
    drop(engine); // SIGKILL, then reaped
    drop(channel); // the strategy is gone too

    let log = dir.path().join("run1.log");
    let engine = keel_run(&config, &log);
    // Nobody beats the channel: the restored order is canceled once the bound passes.
    let cancel = venue.wait_while("cancel ", 0, || {
        std::thread::sleep(Duration::from_millis(1))
    });
    assert_eq!(cancel, format!("cancel {id}"));
    let channel = keel::ipc::Channel::open(&ipc.join("strategy-0")).unwrap();
    assert!(channel.engine_epoch() > epoch);
    let report = stop_keel_run(engine, &log);
    assert!(
        report.contains("never attached after a restart 1, mass cancels on loss 1"),
        "{report}"
    );
    assert!(report.contains("open orders: 0"), "{report}");
    let said = std::fs::read_to_string(log.with_extension("err")).unwrap();
    assert!(
        said.contains("strategy never attached after the restart"),
        "{said}"
    );
}
