//! The C library (sdk/c/keel.h and keel.c), compiled by the system's C compiler, against the
//! engine's own definitions and its own channel: every offset, size, code and name in the
//! header equals the Rust one (a change on either side fails here); commands a C strategy
//! writes are what the engine reads, and events the engine writes are what C decodes; and bad
//! use — another layout version, another symbol table, a full ring, a stopped engine, a
//! second writer, a broken channel, a bad argument — gets a clear error in C and never harms
//! the engine's side.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command as Process, Stdio};
use std::sync::OnceLock;

use keel::ipc::{
    encode_command, encode_event, fingerprint, offset, Channel, ChannelFault, EngineState,
    IpcEvent, RecordError, CANCEL_REJECT_REASONS, CAPACITY_MAX, EVENT_KINDS, HEADER_LEN, MAGIC,
    RECORD_LEN, REJECT_REASONS, VENUE_NAME_LEN, VERSION,
};
use keel::order::{
    CancelRejectReason, ClientOrderId, Command, Event, EventKind, MassCancelScope, NewOrder, Price,
    RefusalAdvice, RefusalReason, RejectReason, Replace, Side, StrategyId, SymbolId, TimeInForce,
    VenueId, SYMBOL_NAME_LEN,
};

/// The probe (sdk/c/tests/probe.c with the library), built once per test process.
fn probe() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("probe");
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/c");
        common::sdk::build_c(&out, &["sdk/c/tests/probe.c"]);
        // And as C++, unchanged.
        let status = Process::new("g++")
            .args([
                "-std=c++11",
                "-Wall",
                "-Werror",
                "-fsyntax-only",
                "-x",
                "c++",
            ])
            .arg(sdk.join("keel.h"))
            .status();
        if let Ok(status) = status {
            assert!(status.success(), "keel.h does not compile as C++");
        }
        (dir, out)
    });
    path
}

/// `probe layout`: name → value (the rest of the line).
fn layout() -> BTreeMap<String, String> {
    let out = Process::new(probe()).arg("layout").output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            // "event 3 filled" and the like keep their code in the key.
            match k.split_once(' ') {
                Some((kind, code)) if kind != "KEEL_MAGIC" => {
                    (format!("{kind} {code}"), v.to_string())
                }
                _ => (k.to_string(), v.to_string()),
            }
        })
        .collect()
}

/// The layout's lines as they are (names with spaces in them).
fn layout_lines() -> Vec<String> {
    let out = Process::new(probe()).arg("layout").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

// Goal: keel.h's layout is the engine's: sizes, every header offset, engine states, fault
// codes.
#[test]
fn the_header_says_what_the_engine_defines() {
    let c = layout();
    let num = |name: &str| -> u64 {
        c.get(name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} not a number"))
    };
    assert_eq!(c["KEEL_MAGIC"].as_bytes(), &MAGIC[..7]);
    assert_eq!(num("KEEL_VERSION"), u64::from(VERSION));
    assert_eq!(num("KEEL_RECORD_LEN"), RECORD_LEN as u64);
    assert_eq!(num("KEEL_HEADER_LEN"), HEADER_LEN as u64);
    assert_eq!(num("KEEL_CAPACITY_MAX"), u64::from(CAPACITY_MAX));
    assert_eq!(num("KEEL_SYMBOL_NAME_LEN"), SYMBOL_NAME_LEN as u64);
    assert_eq!(num("KEEL_VENUE_NAME_LEN"), VENUE_NAME_LEN as u64);
    assert_eq!(num("KEEL_PRICE_SCALE"), Price::SCALE as u64);
    let offsets = common::sdk::HEADER_OFFSETS;
    for (name, at) in offsets {
        assert_eq!(num(&format!("KEEL_OFF_{name}")), at as u64, "offset {name}");
    }
    let states = [
        ("ABSENT", EngineState::Absent),
        ("STARTING", EngineState::Starting),
        ("RUNNING", EngineState::Running),
        ("STOPPED", EngineState::Stopped),
    ];
    for (name, state) in states {
        assert_eq!(num(&format!("KEEL_ENGINE_{name}")), state as u64, "{name}");
    }
    let faults = [
        ("COMMAND_TAIL_BACK", back(keel::ipc::RingKind::Commands)),
        ("COMMAND_TAIL_BEYOND", beyond(keel::ipc::RingKind::Commands)),
        ("EVENT_HEAD_BACK", back(keel::ipc::RingKind::Events)),
        ("EVENT_HEAD_BEYOND", beyond(keel::ipc::RingKind::Events)),
        (
            "TABLE",
            ChannelFault::TableMismatch {
                declared: 1,
                engine: 2,
            },
        ),
    ];
    for (name, fault) in faults {
        assert_eq!(num(&format!("KEEL_FAULT_{name}")), fault.code(), "{name}");
    }
}

// Goal: every code and name in keel.h and the library is the engine's: command bytes as its
// encoder writes them, event kinds, refusal reasons with their advice, venue and cancel
// rejects; the table fingerprint and the CRC computed the same way.
#[test]
fn the_codes_and_names_are_the_engine_s() {
    let c = layout();
    let num = |name: &str| -> u64 {
        c.get(name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} not a number"))
    };
    // Commands: kind, side, time in force, flags and scope bytes as the engine encodes them.
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
    let new = encode_command(&Command::New(order));
    assert_eq!(u64::from(new[4]), num("KEEL_CMD_NEW"));
    assert_eq!(u64::from(new[5]), num("KEEL_SIDE_SELL"));
    assert_eq!(u64::from(new[6]), num("KEEL_TIF_IOC"));
    assert_eq!(u64::from(new[7]), num("KEEL_FLAG_REDUCE_ONLY"));
    let buy = encode_command(&Command::New(NewOrder {
        side: Side::Buy,
        tif: TimeInForce::Day,
        ..order
    }));
    assert_eq!(
        (u64::from(buy[5]), u64::from(buy[6])),
        (num("KEEL_SIDE_BUY"), num("KEEL_TIF_DAY"))
    );
    assert_eq!(
        u64::from(encode_command(&Command::Cancel { id })[4]),
        num("KEEL_CMD_CANCEL")
    );
    let replace = Command::Replace(Replace {
        id,
        new_id: id,
        qty: 1,
        price: Price(1),
    });
    assert_eq!(
        u64::from(encode_command(&replace)[4]),
        num("KEEL_CMD_REPLACE")
    );
    let all = encode_command(&Command::MassCancel {
        scope: MassCancelScope::Strategy,
    });
    let one = encode_command(&Command::MassCancel {
        scope: MassCancelScope::Symbol(SymbolId(3)),
    });
    assert_eq!(u64::from(all[4]), num("KEEL_CMD_MASS_CANCEL"));
    assert_eq!(
        (u64::from(all[5]), u64::from(one[5])),
        (num("KEEL_SCOPE_STRATEGY"), num("KEEL_SCOPE_SYMBOL"))
    );

    // Events: every kind's code and name, from the engine's encoder.
    let lines = layout_lines();
    let event = |kind| encode_event(&IpcEvent::Event(Event { id, kind, at_ns: 0 }));
    let kinds = [
        EventKind::Accepted,
        EventKind::PartiallyFilled {
            qty: 1,
            price: Price(1),
            leaves: 1,
        },
        EventKind::Filled {
            qty: 1,
            price: Price(1),
        },
        EventKind::Canceled,
        EventKind::Replaced { new_id: id },
        EventKind::Rejected {
            reason: RejectReason::Invalid,
        },
        EventKind::CancelRejected {
            reason: CancelRejectReason::TooLateToCancel,
        },
        EventKind::Unknown,
        EventKind::Shed,
        EventKind::Throttled,
        EventKind::BreakerOpen { retry_after_ns: 1 },
        EventKind::Refused {
            reason: RefusalReason::NotSynced,
        },
    ];
    let mut codes: Vec<u8> = kinds.iter().map(|k| event(*k)[4]).collect();
    codes.push(
        encode_event(&IpcEvent::Malformed(RecordError::Checksum {
            position: 0,
            found: 0,
            computed: 0,
        }))[4],
    );
    let rust_events: Vec<(u8, &str)> = EVENT_KINDS.to_vec();
    assert_eq!(
        codes,
        rust_events.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        "EVENT_KINDS in the engine's encoder's order"
    );
    for (code, name) in EVENT_KINDS {
        assert!(
            lines.contains(&format!("event {code} {name}")),
            "event {code} {name}: {lines:?}"
        );
    }
    assert_eq!(lines.iter().filter(|l| l.starts_with("event ")).count(), 13);
    // Refusals: every code, name and advice, and no other.
    let c_refusals: Vec<&String> = lines.iter().filter(|l| l.starts_with("refusal ")).collect();
    assert_eq!(c_refusals.len(), RefusalReason::COUNT);
    for r in RefusalReason::ALL {
        let advice = match r.advice() {
            RefusalAdvice::Pause => "pause",
            RefusalAdvice::Never => "never",
        };
        let line = format!("refusal {} {}|{advice}", r.code(), r.name());
        assert!(lines.contains(&line), "{line} missing from keel.c");
    }
    // Venue rejects and cancel rejects, from the engine's encoder.
    let rejects = [
        RejectReason::VenueSystem,
        RejectReason::VenueThrottle,
        RejectReason::Invalid,
        RejectReason::DuplicateId,
        RejectReason::MarketClosed,
        RejectReason::NotReceived,
        RejectReason::Other(9),
    ];
    for (reason, (code, name)) in rejects.into_iter().zip(REJECT_REASONS) {
        assert_eq!(event(EventKind::Rejected { reason })[5], code, "{name}");
        assert!(lines.contains(&format!("reject {code} {name}")), "{name}");
    }
    let cancel_rejects = [
        CancelRejectReason::TooLateToCancel,
        CancelRejectReason::UnknownOrder,
        CancelRejectReason::VenueSystem,
        CancelRejectReason::NotApplied,
    ];
    for (reason, (code, name)) in cancel_rejects.into_iter().zip(CANCEL_REJECT_REASONS) {
        assert_eq!(
            event(EventKind::CancelRejected { reason })[5],
            code,
            "{name}"
        );
        assert!(
            lines.contains(&format!("cancel-reject {code} {name}")),
            "{name}"
        );
    }
    // The same fingerprint and CRC.
    assert_eq!(
        num("fingerprint"),
        fingerprint(&["AAPL", "MSFT", "AMZN", "NVDA"], &["sim"])
    );
    assert_eq!(num("crc"), u64::from(crc32fast::hash(b"123456789")));
}

fn back(ring: keel::ipc::RingKind) -> ChannelFault {
    ChannelFault::Backwards {
        ring,
        last: 1,
        found: 0,
    }
}

fn beyond(ring: keel::ipc::RingKind) -> ChannelFault {
    ChannelFault::Beyond {
        ring,
        found: 2,
        limit: 1,
    }
}

/// `probe run PATH`, line by line.
struct Probe {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Probe {
    /// Attached (or refused: the first line says which).
    fn start(path: &Path) -> (Self, String) {
        let mut child = Process::new(probe())
            .arg("run")
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        (
            Self {
                child,
                stdin,
                stdout,
            },
            first.trim_end().to_string(),
        )
    }

    fn ask(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer.trim_end().to_string()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

/// The engine's side of a channel for strategy 3: 8 command slots, 16 event slots, symbols
/// AAPL and MSFT, venue sim, running.
fn engine_side(dir: &Path) -> (PathBuf, Channel) {
    let path = dir.join("strategy-3");
    let ch = Channel::create_or_attach(&path, StrategyId(3), 8, 16).unwrap();
    ch.publish_names(&["AAPL", "MSFT"], &["sim"]);
    ch.set_engine_state(EngineState::Running);
    (path, ch)
}

// Goal: what a C strategy writes is what the engine reads — every command, with its fields —
// and every event the engine writes is decoded by C with its fields; names resolve to the
// engine's indices; ids are allocated above the engine's id floor.
#[test]
fn c_commands_reach_the_engine_and_engine_events_reach_c() {
    let dir = tempfile::tempdir().unwrap();
    let (path, engine) = engine_side(dir.path());
    engine.set_id_floor(41);
    let (mut c, first) = Probe::start(&path);
    assert_eq!(first, "ok attached strategy 3");
    assert_eq!(c.ask("symbol MSFT"), "symbol 1");
    assert_eq!(c.ask("symbol IBM"), "symbol -5");
    assert_eq!(c.ask("venue sim"), "venue 0");
    assert_eq!(c.ask("declare AAPL,MSFT sim"), "ok");
    let id = |seq| ClientOrderId::new(StrategyId(3), seq).unwrap();
    assert_eq!(c.ask("nextid"), format!("id {}", id(42).0));
    let (a, b) = (id(42).0, id(43).0);
    assert_eq!(c.ask(&format!("place {a} 0 1 2 100 -1002500 2 1")), "ok");
    assert_eq!(c.ask(&format!("cancel {a}")), "ok");
    assert_eq!(c.ask(&format!("replace {a} {b} 7 1002501")), "ok");
    assert_eq!(c.ask("mass 2 1"), "ok");
    assert_eq!(c.ask("mass 1 0"), "ok");
    let got: Vec<Command> = std::iter::from_fn(|| engine.pop_command())
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, common::sdk::sent_commands(id));
    let ev = |kind| Event {
        id: id(42),
        kind,
        at_ns: 777,
    };
    let events = [
        (
            ev(EventKind::PartiallyFilled {
                qty: 30,
                price: Price(1_002_500),
                leaves: 70,
            }),
            "partially filled id=ID new_id=0 qty=30 leaves=70 price=1002500 reason=0 venue_code=0",
        ),
        (
            ev(EventKind::Filled {
                qty: 70,
                price: Price(-5),
            }),
            "filled id=ID new_id=0 qty=70 leaves=0 price=-5 reason=0",
        ),
        (
            ev(EventKind::Replaced { new_id: id(43) }),
            "replaced id=ID new_id=NEW",
        ),
        (
            ev(EventKind::Rejected {
                reason: RejectReason::Other(77),
            }),
            "rejected id=ID new_id=0 qty=0 leaves=0 price=0 reason=7 venue_code=77",
        ),
        (
            ev(EventKind::CancelRejected {
                reason: CancelRejectReason::NotApplied,
            }),
            "cancel rejected id=ID new_id=0 qty=0 leaves=0 price=0 reason=4",
        ),
        (
            ev(EventKind::BreakerOpen {
                retry_after_ns: 123_456,
            }),
            "breaker open id=ID new_id=0 qty=0 leaves=0 price=0 reason=0 venue_code=0 retry=123456",
        ),
        (
            ev(EventKind::Refused {
                reason: RefusalReason::StrategyRate,
            }),
            "refused id=ID new_id=0 qty=0 leaves=0 price=0 reason=30",
        ),
    ];
    for (event, want) in events {
        assert!(engine.push_event(&event));
        let got = c.ask("poll");
        let want = want
            .replace("NEW", &id(43).0.to_string())
            .replace("ID", &id(42).0.to_string());
        assert!(got.starts_with(&format!("event {want}")), "{got} / {want}");
        assert!(got.ends_with(" at=777"), "{got}");
    }
    assert!(engine.push_malformed(RecordError::Field {
        position: 9,
        field: "side",
        value: 3,
    }));
    let got = c.ask("poll");
    assert!(
        got.starts_with("event malformed id=0")
            && got.contains("reason=3 ")
            && got.contains("mpos=9 mval=3"),
        "{got}"
    );
    assert_eq!(c.ask("poll"), "empty");
    // The heartbeat moves the strategy's word.
    let before = engine.strategy_heartbeat();
    assert_eq!(c.ask("heartbeat"), "ok");
    assert_eq!(engine.strategy_heartbeat(), before + 1);
}

// Goal: bad use gets a clear error naming what was found, and the engine's side is unharmed:
// a file of another layout version, a symbol table other than the engine's, a full ring (the
// records before it all good), a bad side or time in force, a stopped engine, a second
// process on the same channel, a channel the engine declared broken.
#[test]
fn bad_use_gets_a_clear_error_and_never_harms_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (path, engine) = engine_side(dir.path());

    // A second writer, while the first lives.
    let (mut first, line) = Probe::start(&path);
    assert_eq!(line, "ok attached strategy 3");
    let (_second, line) = Probe::start(&path);
    assert!(
        line.starts_with("error channel in use") && line.contains("writes this channel already"),
        "{line}"
    );
    // An engine whose heartbeat never moved is not live, however its header reads; once it
    // moves, it is.
    assert_eq!(first.ask("live 1000"), "live 0");
    engine.beat_engine();
    assert_eq!(first.ask("live 1000"), "live 1");
    // Another table: refused, naming both.
    let answer = first.ask("declare MSFT,AAPL sim");
    assert!(
        answer.starts_with("error symbol/venue table") && answer.contains("AAPL,MSFT"),
        "{answer}"
    );
    // Bad arguments.
    let answer = first.ask("place 1 0 0 3 1 1 1 0");
    assert!(answer.starts_with("error bad argument side 3"), "{answer}");
    let answer = first.ask("place 1 0 0 1 1 1 9 0");
    assert!(
        answer.starts_with("error bad argument time in force 9"),
        "{answer}"
    );
    let answer = first.ask("mass 7 0");
    assert!(
        answer.starts_with("error bad argument mass cancel scope 7"),
        "{answer}"
    );
    // A full ring: 8 published, the ninth refused; the engine reads 8 good records.
    let answer = first.ask("flood");
    assert!(
        answer.starts_with("full 8 the command ring is full"),
        "{answer}"
    );
    let read: Vec<_> = std::iter::from_fn(|| engine.pop_command()).collect();
    assert_eq!(read.len(), 8);
    assert!(read.iter().all(Result::is_ok), "{read:?}");
    assert!(engine.fault().is_none());
    // A stopped engine: nothing would read the command.
    engine.set_engine_state(EngineState::Stopped);
    let answer = first.ask(&format!(
        "cancel {}",
        ClientOrderId::new(StrategyId(3), 1).unwrap().0
    ));
    assert!(answer.starts_with("error engine stopped"), "{answer}");
    engine.set_engine_state(EngineState::Running);
    // A channel the engine declared broken.
    engine.publish_fault(ChannelFault::Backwards {
        ring: keel::ipc::RingKind::Commands,
        last: 5,
        found: 0,
    });
    let answer = first.ask("poll");
    assert!(
        answer.starts_with("error channel broken") && answer.contains("fault 1 (found 0, limit 5)"),
        "{answer}"
    );
    drop(first);

    // Another layout version: refused at attach, naming it.
    let other = dir.path().join("strategy-4");
    let ch = Channel::create_or_attach(&other, StrategyId(4), 8, 8).unwrap();
    drop(ch);
    let mut bytes = std::fs::read(&other).unwrap();
    bytes[offset::VERSION] = 2;
    std::fs::write(&other, &bytes).unwrap();
    let (_p, line) = Probe::start(&other);
    assert!(
        line.starts_with("error layout") && line.contains("layout version 2, this library reads 1"),
        "{line}"
    );
    // Not a channel at all.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    let (_p, line) = Probe::start(&junk);
    assert!(
        line.starts_with("error layout") && line.contains("not a keel channel"),
        "{line}"
    );
}

/// `probe md PATH`, line by line.
fn md_probe(path: &Path) -> (Probe, String) {
    let mut child = Process::new(probe())
        .arg("md")
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    (
        Probe {
            child,
            stdin,
            stdout,
        },
        first.trim_end().to_string(),
    )
}

// Goal: the C market-data reader reads what the engine's writer writes: its layout numbers are
// the engine's; a top of book field for field; trades in order, a reader that fell behind told
// exactly how many it lost; and a slot the writer hammers from another thread is never read
// torn nor back in time.
#[test]
fn c_reads_the_engine_s_market_data() {
    use keel::ipc::md::{md_offset, MdWriter, MD_VERSION, SLOT_LEN, TRADE_LEN};
    let c = layout();
    let num = |name: &str| c[name].parse::<u64>().unwrap();
    assert_eq!(num("KEEL_MD_VERSION"), u64::from(MD_VERSION));
    assert_eq!(num("KEEL_MD_DEPTH"), keel::feed::fanout::DEPTH as u64);
    assert_eq!(num("KEEL_MD_SLOT_LEN"), SLOT_LEN as u64);
    assert_eq!(num("KEEL_MD_TRADE_LEN"), TRADE_LEN as u64);
    assert_eq!(
        num("KEEL_MD_SYMBOLS_MAX"),
        u64::from(keel::ipc::md::SYMBOLS_MAX)
    );
    for (name, at) in [
        ("VERSION", md_offset::VERSION),
        ("SYMBOLS", md_offset::SYMBOLS),
        ("TRADE_CAPACITY", md_offset::TRADE_CAPACITY),
        ("DEPTH", md_offset::DEPTH),
        ("HEARTBEAT", md_offset::HEARTBEAT),
        ("SYNCED", md_offset::SYNCED),
        ("TRADES", md_offset::TRADES),
    ] {
        assert_eq!(num(&format!("KEEL_MD_OFF_{name}")), at as u64, "{name}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("md");
    let mut w = MdWriter::create(&path, 3, 8).unwrap();
    let (mut reader, first) = md_probe(&path);
    assert_eq!(first, "ok symbols 3 capacity 8");
    w.book(2, &common::sdk::derived_top(7));
    let line = reader.ask("top 2");
    assert!(
        line.starts_with("top seq=7 70/71:72/73 71/72:73/74 "),
        "{line}"
    );
    assert_eq!(reader.ask("top 3"), "error no such name");
    assert_eq!(reader.ask("synced"), "synced 0");
    w.set_synced(true);
    assert_eq!(reader.ask("synced"), "synced 1");
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
    for n in 1..=3u64 {
        assert_eq!(
            reader.ask("trade"),
            format!(
                "trade symbol={} seq={n} price=-{n} qty={} buy={}",
                n % 3,
                n * 100,
                u8::from(n % 2 == 1)
            )
        );
    }
    assert_eq!(reader.ask("trade"), "empty");
    for n in 4..=23 {
        w.trade(&trade(n));
    }
    assert_eq!(reader.ask("trade"), "gap 12");
    assert!(reader.ask("trade").starts_with("trade symbol=1 seq=16 "));

    // The hammer: a writer thread rewrites symbol 1 as fast as it can while C reads it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                w.book(1, &common::sdk::derived_top(n));
            }
            n
        })
    };
    let line = reader.ask("hammer 1 2000000");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().unwrap();
    let field = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!((field("torn"), field("back")), (0, 0), "{line}");
    assert!(field("reads") > 0 && field("last") <= written, "{line}");

    // A writer that died inside a slot (its version left odd) is reported, never waited on.
    common::sdk::leave_slot_mid_write(&path, 0);
    assert_eq!(reader.ask("top 0"), "error empty");
}
