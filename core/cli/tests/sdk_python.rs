//! The Python package (sdk/python, `import keel`; scripts/test installs it into the test
//! virtualenv from the repository) against the engine's own definitions and its own channel:
//! every offset, size, code and name equals the Rust one; commands Python writes are what the
//! engine reads and events the engine writes come back as typed objects with reasons by name,
//! an engine restart (epoch change) and an engine loss as events of their own; and bad use —
//! another layout version, another table, a full ring, a stopped engine, a second writer, a
//! broken channel — raises the error that names it, never harming the engine's side.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command as Process, Stdio};

use keel::ipc::{
    fingerprint, offset, Channel, ChannelFault, EngineState, RingKind, CANCEL_REJECT_REASONS,
    CAPACITY_MAX, COMMAND_KINDS, EVENT_KINDS, HEADER_LEN, RECORD_LEN, REJECT_REASONS,
    VENUE_NAME_LEN, VERSION,
};
use keel::order::{
    CancelRejectReason, ClientOrderId, Command, Event, EventKind, MassCancelScope, NewOrder, Price,
    RefusalAdvice, RefusalReason, RejectReason, Side, StrategyId, SymbolId, TimeInForce, VenueId,
    SYMBOL_NAME_LEN,
};
use serde_json::Value;

/// Runs `script` with the test virtualenv's Python (the package installed there); returns its
/// stdout. `None`: no Python peer configured (the test is skipped, saying so).
fn python(script: &str) -> Option<String> {
    let py = common::peers::python()?;
    let child = Process::new(py)
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

fn names(v: &Value) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = v
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.as_str().unwrap().to_string()))
        .collect();
    out.sort();
    out
}

// Goal: the package's layout module says exactly what the engine defines.
#[test]
fn the_package_says_what_the_engine_defines() {
    let Some(json) = python("import keel; print(keel.layout.as_json())") else {
        return;
    };
    let v: Value = serde_json::from_str(&json).unwrap();
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}"));
    assert_eq!(v["magic"], "KEELSHM");
    assert_eq!(n("version"), u64::from(VERSION));
    assert_eq!(n("record_len"), RECORD_LEN as u64);
    assert_eq!(n("header_len"), HEADER_LEN as u64);
    assert_eq!(n("capacity_max"), u64::from(CAPACITY_MAX));
    assert_eq!(n("symbol_name_len"), SYMBOL_NAME_LEN as u64);
    assert_eq!(n("venue_name_len"), VENUE_NAME_LEN as u64);
    assert_eq!(n("price_scale"), Price::SCALE as u64);
    let offsets = common::sdk::HEADER_OFFSETS;
    assert_eq!(v["offsets"].as_object().unwrap().len(), offsets.len());
    for (name, at) in offsets {
        assert_eq!(
            v["offsets"][name].as_u64(),
            Some(at as u64),
            "offset {name}"
        );
    }
    let states = names(&v["engine_states"]);
    for (state, name) in [
        (EngineState::Absent, "absent"),
        (EngineState::Starting, "starting"),
        (EngineState::Running, "running"),
        (EngineState::Stopped, "stopped"),
    ] {
        assert!(states.contains(&(state as u64, name.to_string())), "{name}");
    }
    let faults = v["faults"].as_object().unwrap();
    let codes = [
        ChannelFault::Backwards {
            ring: RingKind::Commands,
            last: 1,
            found: 0,
        },
        ChannelFault::Beyond {
            ring: RingKind::Commands,
            found: 2,
            limit: 1,
        },
        ChannelFault::Backwards {
            ring: RingKind::Events,
            last: 1,
            found: 0,
        },
        ChannelFault::Beyond {
            ring: RingKind::Events,
            found: 2,
            limit: 1,
        },
        ChannelFault::TableMismatch {
            declared: 1,
            engine: 2,
        },
    ]
    .map(|f| f.code());
    assert_eq!(
        faults
            .keys()
            .map(|k| k.parse::<u64>().unwrap())
            .collect::<Vec<_>>(),
        codes
    );
    let table = |t: &[(u8, &str)]| -> Vec<(u64, String)> {
        t.iter()
            .map(|(c, n)| (u64::from(*c), (*n).to_string()))
            .collect()
    };
    assert_eq!(names(&v["command_kinds"]), table(&COMMAND_KINDS));
    assert_eq!(names(&v["event_kinds"]), table(&EVENT_KINDS));
    assert_eq!(names(&v["reject_reasons"]), table(&REJECT_REASONS));
    assert_eq!(
        names(&v["cancel_reject_reasons"]),
        table(&CANCEL_REJECT_REASONS)
    );
    let refusals = v["refusals"].as_object().unwrap();
    assert_eq!(refusals.len(), RefusalReason::COUNT);
    for r in RefusalReason::ALL {
        let advice = match r.advice() {
            RefusalAdvice::Pause => "pause",
            RefusalAdvice::Never => "never",
        };
        assert_eq!(
            refusals[&r.code().to_string()],
            serde_json::json!([r.name(), advice]),
            "{r:?}"
        );
    }
    // Command bytes as the engine's encoder writes them.
    let id = ClientOrderId::new(StrategyId(1), 1).unwrap();
    let order = NewOrder {
        id,
        venue: VenueId(0),
        symbol: SymbolId(0),
        side: Side::Sell,
        price: Price(1),
        qty: 1,
        tif: TimeInForce::ImmediateOrCancel,
        reduce_only: true,
    };
    let r = keel::ipc::encode_command(&Command::New(order));
    assert_eq!(v["sides"][1].as_u64(), Some(u64::from(r[5])));
    assert_eq!(v["tifs"][1].as_u64(), Some(u64::from(r[6])));
    assert_eq!(v["flag_reduce_only"].as_u64(), Some(u64::from(r[7])));
    let one = keel::ipc::encode_command(&Command::MassCancel {
        scope: MassCancelScope::Symbol(SymbolId(1)),
    });
    assert_eq!(v["scopes"][1].as_u64(), Some(u64::from(one[5])));
    // The same fingerprint.
    let fp =
        python("import keel; print(keel.fingerprint(['AAPL', 'MSFT', 'AMZN', 'NVDA'], ['sim']))")
            .unwrap();
    assert_eq!(
        fp.trim().parse::<u64>().unwrap(),
        fingerprint(&["AAPL", "MSFT", "AMZN", "NVDA"], &["sim"])
    );
}

fn engine_side(dir: &Path) -> (std::path::PathBuf, Channel) {
    let path = dir.join("strategy-3");
    let ch = Channel::create_or_attach(&path, StrategyId(3), 8, 16).unwrap();
    ch.publish_names(&["AAPL", "MSFT"], &["sim"]);
    ch.set_engine_state(EngineState::Running);
    ch.beat_engine();
    (path, ch)
}

/// A Python process running `body` against the channel at `path`, with the engine's side
/// stepped (heartbeat) by this thread while it runs; returns its stdout lines.
fn run_against(
    path: &Path,
    engine: &Channel,
    body: &str,
    between: impl Fn(&Channel),
) -> Vec<String> {
    let Some(py) = common::peers::python() else {
        return Vec::new();
    };
    let script = format!(
        "import keel, sys, time\npath = {path:?}\n{body}",
        path = path.display().to_string()
    );
    let mut child = Process::new(py)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The engine beats while Python runs (so it looks live), and `between` plays its part.
    use keel::clock::Clock;
    let clock = keel::clock::TscClock::new();
    let deadline = clock.now_ns() + 60_000_000_000;
    loop {
        engine.beat_engine();
        between(engine);
        if let Some(_status) = child.try_wait().unwrap() {
            break;
        }
        assert!(clock.now_ns() < deadline, "the Python side did not finish");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let _ = stdin.flush();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

// Goal: commands Python writes are the engine's commands, field for field; every event the
// engine writes comes back typed with its fields and reasons by name; an epoch change and an
// engine loss come as events of their own.
#[test]
fn python_commands_reach_the_engine_and_events_come_back_typed() {
    if common::peers::python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, engine) = engine_side(dir.path());
    engine.set_id_floor(41);
    let id = |seq| ClientOrderId::new(StrategyId(3), seq).unwrap();
    let ev = |kind| Event {
        id: id(42),
        kind,
        at_ns: 777,
    };
    for e in [
        ev(EventKind::PartiallyFilled {
            qty: 30,
            price: Price(1_002_500),
            leaves: 70,
        }),
        ev(EventKind::Replaced { new_id: id(43) }),
        ev(EventKind::Rejected {
            reason: RejectReason::Other(77),
        }),
        ev(EventKind::CancelRejected {
            reason: CancelRejectReason::TooLateToCancel,
        }),
        ev(EventKind::Refused {
            reason: RefusalReason::StrategyRate,
        }),
        ev(EventKind::BreakerOpen {
            retry_after_ns: 5_000,
        }),
    ] {
        assert!(engine.push_event(&e));
    }
    let body = r#"
ch = keel.Channel(path)
ch.wait_live()
ch.declare_table(["AAPL", "MSFT"], ["sim"])
msft, sim = ch.symbol("MSFT"), ch.venue("sim")
oid = ch.next_id()
print("id", oid)
ch.place(oid, sim, msft, keel.SELL, 100, keel.price(-100.25), keel.IOC, reduce_only=True)
ch.cancel(oid)
ch.replace(oid, oid + 1, 7, 1002501)
ch.mass_cancel(msft)
ch.mass_cancel()
seen = []
for e in ch.events(timeout=0.5):
    seen.append(e)
    if len(seen) == 6:
        break
for e in seen:
    print(repr(e))
"#;
    let lines = run_against(&path, &engine, body, |_| {});
    assert_eq!(lines[0], format!("id {}", id(42).0));
    let got: Vec<Command> = std::iter::from_fn(|| engine.pop_command())
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, common::sdk::sent_commands(id));
    let i = id(42).0;
    let want = [
        format!("PartiallyFilled(id={i}, at_ns=777, position=0, qty=30, leaves=70, price=1002500)"),
        format!("Replaced(id={i}, at_ns=777, position=1, new_id={})", id(43).0),
        format!("Rejected(id={i}, at_ns=777, position=2, reason='other', code=7, venue_code=77)"),
        format!("CancelRejected(id={i}, at_ns=777, position=3, reason='too late', code=1)"),
        format!(
            "Refused(id={i}, at_ns=777, position=4, reason='strategy rate', code=30, advice='pause')"
        ),
        format!("BreakerOpen(id={i}, at_ns=777, position=5, retry_after_ns=5000)"),
    ];
    assert_eq!(&lines[1..], want);

    // An epoch change, then the engine's loss.
    let body = r#"
ch = keel.Channel(path)
ch.wait_live()
print("epoch", ch.engine_epoch)
sys.stdout.flush()
for _ in range(1000):  # the signal that this side is attached and live
    ch.beat()
deadline = time.monotonic() + 30
kinds = []
while time.monotonic() < deadline:
    e = ch.poll()
    if e is not None:
        kinds.append(repr(e))
        if isinstance(e, keel.EngineLost) and e.state == "stopped":
            break
    ch.beat()
    time.sleep(0.001)
for k in kinds:
    print(k)
"#;
    let epoch = engine.engine_epoch();
    let attached = engine.strategy_heartbeat() + 1_000;
    let restarted = std::cell::Cell::new(false);
    let stopped = std::cell::Cell::new(0u32);
    let lines = run_against(&path, &engine, body, |e| {
        // After Python is attached and has seen the engine live (its burst of beats), the
        // engine "restarts", then stops.
        if !restarted.get() && e.strategy_heartbeat() >= attached {
            let again = Channel::create_or_attach(&path, StrategyId(3), 8, 16).unwrap();
            again.set_engine_state(EngineState::Running);
            restarted.set(true);
        } else if restarted.get() {
            stopped.set(stopped.get() + 1);
            if stopped.get() == 200 {
                e.set_engine_state(EngineState::Stopped);
            }
        }
    });
    assert_eq!(lines[0], format!("epoch {epoch}"));
    // The restart is seen; the stop is the last event. (A poll between the restart's reset of
    // the header and its state `running` sees the engine starting: lost for that instant.)
    let restart = format!("EngineRestarted(epoch_before={epoch}, epoch={})", epoch + 1);
    assert!(lines[1..].contains(&restart), "{lines:?}");
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("EngineLost(state='stopped'"),
        "{lines:?}"
    );
    for l in &lines[1..lines.len() - 1] {
        assert!(
            *l == restart || l.starts_with("EngineLost(state='starting'"),
            "{l} in {lines:?}"
        );
    }
}

// Goal: bad use raises the error that names it, and the engine's side stays whole.
#[test]
fn bad_use_raises_the_error_that_names_it() {
    if common::peers::python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, engine) = engine_side(dir.path());
    let body = r#"
ch = keel.Channel(path)
ch.wait_live()
def says(what, f):
    try:
        f()
        print(what, "no error")
    except keel.ChannelError as e:
        print(what, type(e).__name__, e)
import subprocess
second = subprocess.run(
    [sys.executable, "-c",
     "import keel, sys\ntry:\n    keel.Channel(sys.argv[1])\nexcept keel.InUse as e:\n    print('InUse', e)",
     path], capture_output=True, text=True)
print("second", second.stdout.strip(), second.stderr.strip())
says("table", lambda: ch.declare_table(["MSFT", "AAPL"], ["sim"]))
says("symbol", lambda: ch.symbol("IBM"))
says("side", lambda: ch.place(ch.next_id(), 0, 0, 3, 1, 1))
says("venue", lambda: ch.place(ch.next_id(), 70000, 0, keel.BUY, 1, 1))
says("id", lambda: ch.cancel(-1))
says("missing", lambda: keel.Channel(path + ".missing"))
says("directory", lambda: keel.MarketData("/"))
n = 0
try:
    while True:
        ch.place(ch.next_id(), 0, 0, keel.BUY, 1, 10000)
        n += 1
except keel.RingFull as e:
    print("full", n, e)
"#;
    let lines = run_against(&path, &engine, body, |_| {});
    let find = |what: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("{what}: {lines:?}"))
            .clone()
    };
    assert!(
        find("second").contains("InUse") && find("second").contains("writes this channel already")
    );
    assert!(find("table").contains("TableError") && find("table").contains("['AAPL', 'MSFT']"));
    assert!(find("symbol").contains("NameError_ no symbol 'IBM'"));
    assert!(find("side").contains("side 3"));
    // Bad values and bad files are keel errors naming them, never a struct or OS exception.
    assert!(
        find("venue").contains("ChannelError venue 70000"),
        "{lines:?}"
    );
    assert!(find("id").contains("ChannelError order id -1"), "{lines:?}");
    assert!(
        find("missing").contains("ChannelError")
            && find("missing").contains(".missing: No such file"),
        "{lines:?}"
    );
    assert!(
        find("directory").starts_with("directory ChannelError"),
        "{lines:?}"
    );
    assert!(
        find("full").starts_with("full 8 the command ring is full"),
        "{lines:?}"
    );
    let read: Vec<_> = std::iter::from_fn(|| engine.pop_command()).collect();
    assert_eq!(read.len(), 8);
    assert!(read.iter().all(Result::is_ok));
    assert!(engine.fault().is_none());

    // A stopped engine, then a broken channel.
    engine.set_engine_state(EngineState::Stopped);
    let body = r#"
ch = keel.Channel(path)
try:
    ch.cancel(ch.next_id())
except keel.EngineStopped as e:
    print("stopped", e)
"#;
    let lines = run_against(&path, &engine, body, |_| {});
    assert!(
        lines[0].starts_with("stopped the engine stopped"),
        "{lines:?}"
    );
    engine.set_engine_state(EngineState::Running);
    engine.publish_fault(ChannelFault::Backwards {
        ring: RingKind::Commands,
        last: 5,
        found: 0,
    });
    let body = r#"
ch = keel.Channel(path)
try:
    ch.poll()
except keel.ChannelBroken as e:
    print("broken", e)
"#;
    let lines = run_against(&path, &engine, body, |_| {});
    assert!(
        lines[0].starts_with("broken the engine declared the channel broken: command tail went back (fault 1: found 0, limit 5)"),
        "{lines:?}"
    );
    // Another layout version.
    let other = dir.path().join("strategy-4");
    drop(Channel::create_or_attach(&other, StrategyId(4), 8, 8).unwrap());
    let mut bytes = std::fs::read(&other).unwrap();
    bytes[offset::VERSION] = 2;
    std::fs::write(&other, &bytes).unwrap();
    let out = python(&format!(
        "import keel\ntry:\n    keel.Channel({:?})\nexcept keel.LayoutError as e:\n    print(e)",
        other.display().to_string()
    ))
    .unwrap();
    assert!(
        out.contains("layout version 2, this package reads 1"),
        "{out}"
    );
}

// Goal: the package's market-data reader reads what the engine's writer writes: its layout
// numbers are the engine's; a top of book and trades field for field; a reader behind is told
// exactly how many it lost; a slot a writer thread hammers is never read torn nor back in time.
#[test]
fn python_reads_the_engine_s_market_data() {
    use keel::ipc::md::{md_offset, MdWriter, MD_VERSION, SLOT_LEN, TRADE_LEN};
    let Some(out) = python(
        "import keel.market_data as m, json\nprint(json.dumps([m.MD_VERSION, m.MD_DEPTH, m.MD_SLOT_LEN, m.MD_TRADE_LEN, m.MD_OFFSETS]))",
    ) else {
        return;
    };
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0].as_u64(), Some(u64::from(MD_VERSION)));
    assert_eq!(v[1].as_u64(), Some(keel::feed::fanout::DEPTH as u64));
    assert_eq!(v[2].as_u64(), Some(SLOT_LEN as u64));
    assert_eq!(v[3].as_u64(), Some(TRADE_LEN as u64));
    for (name, at) in [
        ("VERSION", md_offset::VERSION),
        ("SYMBOLS", md_offset::SYMBOLS),
        ("TRADE_CAPACITY", md_offset::TRADE_CAPACITY),
        ("DEPTH", md_offset::DEPTH),
        ("HEARTBEAT", md_offset::HEARTBEAT),
        ("SYNCED", md_offset::SYNCED),
        ("TRADES", md_offset::TRADES),
    ] {
        assert_eq!(v[4][name].as_u64(), Some(at as u64), "{name}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("md");
    let mut w = MdWriter::create(&path, 3, 8).unwrap();
    w.book(2, &common::sdk::derived_top(7));
    // The reader attaches after three trades: it starts at the newest, then reads 20 more of
    // which the 8-slot ring keeps the last 8.
    let trade = |n: u64| keel::feed::fanout::TradeTick {
        symbol: (n % 3) as u16,
        seq: n,
        price: -(n as i64),
        qty: n * 100,
        buy: n % 2 == 1,
    };
    for n in 1..=3 {
        w.trade(&trade(n));
    }
    let script = format!(
        r#"
import keel, sys
md = keel.MarketData({path:?})
print(md.top(2))
sys.stdout.flush()
sys.stdin.readline()          # the writer writes 20 trades
print(md.next_trade())
print(md.next_trade())
sys.stdout.flush()
sys.stdin.readline()          # the writer hammers symbol 1
torn = back = last = reads = 0
for _ in range(20000):
    t = md.top(1)
    if t is None or t.seq == 0:
        continue
    reads += 1
    for i in range(5):
        b = t.seq * 10 + i
        if t.bids[i] != (b, b + 1) or t.asks[i] != (b + 2, b + 3):
            torn += 1
            break
    back += t.seq < last
    last = t.seq
print("hammer", reads, torn, back, last)
sys.stdout.flush()
sys.stdin.readline()          # synced, and slot 0 left mid-write
print(md.synced, md.top(0))
"#,
        path = path.display().to_string()
    );
    let py = common::peers::python().unwrap();
    let mut child = Process::new(py)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut next = |line: &mut String| {
        line.clear();
        std::io::BufRead::read_line(&mut stdout, line).unwrap();
        line.trim_end().to_string()
    };
    assert_eq!(
        next(&mut line),
        "Top(seq=7, bids=((70, 71), (71, 72), (72, 73), (73, 74), (74, 75)), asks=((72, 73), (73, 74), (74, 75), (75, 76), (76, 77)))"
    );
    for n in 4..=23 {
        w.trade(&trade(n));
    }
    writeln!(stdin).unwrap();
    stdin.flush().unwrap();
    assert_eq!(next(&mut line), "TradeGap(lost=12)");
    assert_eq!(
        next(&mut line),
        "Trade(symbol=1, seq=16, price=-16, qty=1600, buy=False)"
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                w.book(1, &common::sdk::derived_top(n));
            }
            (n, w)
        })
    };
    writeln!(stdin).unwrap();
    stdin.flush().unwrap();
    let hammer = next(&mut line);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (written, mut w) = writer.join().unwrap();
    let f: Vec<u64> = hammer
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(f[0] > 0, "{hammer}");
    assert_eq!((f[1], f[2]), (0, 0), "torn or back: {hammer}");
    assert!(f[3] <= written, "{hammer}");
    // The synced word, and a writer that died inside a slot: reported, never waited on.
    w.set_synced(true);
    common::sdk::leave_slot_mid_write(&path, 0);
    writeln!(stdin).unwrap();
    stdin.flush().unwrap();
    assert_eq!(next(&mut line), "True None");
    let _ = child.wait();
}
