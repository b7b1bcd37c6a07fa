use super::*;
use crate::order::{
    CancelRejectReason, ClientOrderId, EventKind, MassCancelScope, NewOrder, Price, RefusalReason,
    RejectReason, Replace, Side, SymbolId, TimeInForce, VenueId,
};

fn id(seq: u64) -> ClientOrderId {
    ClientOrderId::new(StrategyId(3), seq).unwrap()
}

fn channel(dir: &Path) -> (Channel, Channel) {
    let path = dir.join("s3");
    let engine = Channel::create_or_attach(&path, StrategyId(3), 8, 8).unwrap();
    let strategy = Channel::open(&path).unwrap();
    (engine, strategy)
}

// Goal: the refusal codes a strategy reads are the ones docs/ipc.md writes down, each reason
// has exactly one, and both directions agree (adding a reason cannot renumber the others).
#[test]
fn refusal_codes_are_pinned_to_the_docs() {
    let doc = include_str!("../../../../docs/ipc.md");
    let line = doc
        .lines()
        .find(|l| l.contains("refused by keel") && l.contains("reason@5"))
        .expect("docs/ipc.md lists the refusal codes");
    let mut seen = std::collections::HashSet::new();
    // The names the log and `keel ctl stats` print are the docs' names too.
    for (reason, code) in codec::REFUSAL_CODES.iter() {
        let name = crate::log::refusal_name(*reason);
        assert_eq!(codec::refusal_code(*reason), *code);
        assert_eq!(codec::refusal_from_code(*code), Some(*reason));
        assert!(seen.insert(*code), "code {code} used twice");
        let written = format!("{code} {name}");
        assert!(
            line.contains(&written),
            "docs/ipc.md does not say `{written}`: {line}"
        );
    }
    assert_eq!(codec::refusal_from_code(0), None);
    assert_eq!(codec::refusal_from_code(24), None);
    assert_eq!(codec::refusal_from_code(32), None);
    assert_eq!(seen.len(), crate::dispatch::REFUSAL_REASONS);
}

/// The row of docs/ipc.md's table whose first cell is `code` (the table starting at the line
/// that contains `heading`).
fn doc_row<'a>(doc: &'a str, heading: &str, code: u8) -> &'a str {
    let prefix = format!("| {code} | ");
    doc.lines()
        .skip_while(|l| !l.contains(heading))
        .take_while(|l| !l.starts_with("## ") || l.contains(heading))
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("docs/ipc.md has no row `{prefix}` under `{heading}`"))
}

// Goal: every code a strategy in another language reads or writes has an explicit number,
// and that number is the one docs/ipc.md gives: command kinds, event kinds, venue reject
// codes, cancel-reject codes (refusal codes: above). Renumbering any of them fails here.
#[test]
fn command_event_and_reason_codes_are_pinned_to_the_docs() {
    let doc = include_str!("../../../../docs/ipc.md");
    let id = ClientOrderId::new(StrategyId(1), 1).unwrap();
    let order = NewOrder {
        id,
        venue: VenueId(0),
        symbol: SymbolId(0),
        side: Side::Buy,
        price: Price(1),
        qty: 1,
        tif: TimeInForce::Day,
        reduce_only: false,
    };
    let commands = [
        (Command::New(order), 1, "new order"),
        (Command::Cancel { id }, 2, "cancel"),
        (
            Command::Replace(Replace {
                id,
                new_id: id,
                qty: 1,
                price: Price(1),
            }),
            3,
            "replace",
        ),
        (
            Command::MassCancel {
                scope: MassCancelScope::Strategy,
            },
            4,
            "mass cancel",
        ),
    ];
    for (command, code, name) in commands {
        assert_eq!(codec::encode_command(&command)[4], code, "{name}");
        let row = doc_row(doc, "### Commands", code);
        assert!(row.starts_with(&format!("| {code} | {name} |")), "{row}");
    }
    use crate::order::{CancelRejectReason as C, RejectReason as R};
    let events = [
        (EventKind::Accepted, 1, "accepted"),
        (
            EventKind::PartiallyFilled {
                qty: 1,
                price: Price(1),
                leaves: 1,
            },
            2,
            "partially filled",
        ),
        (
            EventKind::Filled {
                qty: 1,
                price: Price(1),
            },
            3,
            "filled",
        ),
        (EventKind::Canceled, 4, "canceled"),
        (EventKind::Replaced { new_id: id }, 5, "replaced"),
        (
            EventKind::Rejected {
                reason: R::VenueSystem,
            },
            6,
            "rejected by the venue",
        ),
        (
            EventKind::CancelRejected {
                reason: C::TooLateToCancel,
            },
            7,
            "cancel rejected",
        ),
        (EventKind::Unknown, 8, "unknown"),
        (EventKind::Shed, 9, "shed"),
        (EventKind::Throttled, 10, "throttled"),
        (
            EventKind::BreakerOpen { retry_after_ns: 1 },
            11,
            "breaker open",
        ),
        (
            EventKind::Refused {
                reason: RefusalReason::NotSynced,
            },
            12,
            "refused by keel",
        ),
    ];
    let event = |kind| codec::encode_event(&IpcEvent::Event(Event { id, kind, at_ns: 0 }));
    for (kind, code, name) in events {
        assert_eq!(event(kind)[4], code, "{name}");
        let row = doc_row(doc, "### Events", code);
        assert!(row.starts_with(&format!("| {code} | {name} |")), "{row}");
    }
    let malformed = codec::encode_event(&IpcEvent::Malformed(RecordError::Checksum {
        position: 0,
        found: 0,
        computed: 1,
    }));
    assert_eq!(malformed[4], 13);
    assert!(doc_row(doc, "### Events", 13).starts_with("| 13 | malformed command |"));
    let rejects = [
        (R::VenueSystem, 1, "venue system"),
        (R::VenueThrottle, 2, "venue throttle"),
        (R::Invalid, 3, "invalid"),
        (R::DuplicateId, 4, "duplicate id"),
        (R::MarketClosed, 5, "market closed"),
        (R::NotReceived, 6, "not received"),
        (R::Other(42), 7, "other"),
    ];
    let row = doc_row(doc, "### Events", 6);
    for (reason, code, name) in rejects {
        assert_eq!(event(EventKind::Rejected { reason })[5], code, "{name}");
        assert!(
            row.contains(&format!("{code} {name}")),
            "`{code} {name}` in {row}"
        );
    }
    assert_eq!(
        event(EventKind::Rejected {
            reason: R::Other(42)
        })[6],
        42
    );
    let cancel_rejects = [
        (C::TooLateToCancel, 1, "too late"),
        (C::UnknownOrder, 2, "unknown order"),
        (C::VenueSystem, 3, "venue system"),
        (C::NotApplied, 4, "not applied"),
    ];
    let row = doc_row(doc, "### Events", 7);
    for (reason, code, name) in cancel_rejects {
        assert_eq!(
            event(EventKind::CancelRejected { reason })[5],
            code,
            "{name}"
        );
        assert!(
            row.contains(&format!("{code} {name}")),
            "`{code} {name}` in {row}"
        );
    }
}

// Goal: the rest of what crosses the boundary is pinned too: side, time in force and
// mass-cancel scope (command bytes), the malformed-command sub-codes, the header's engine
// states and channel-fault codes — each number as code and docs/ipc.md say it.
#[test]
fn field_header_and_fault_codes_are_pinned_to_the_docs() {
    let doc = include_str!("../../../../docs/ipc.md");
    let id = ClientOrderId::new(StrategyId(1), 1).unwrap();
    let new = |side, tif| {
        codec::encode_command(&Command::New(NewOrder {
            id,
            venue: VenueId(0),
            symbol: SymbolId(0),
            side,
            price: Price(1),
            qty: 1,
            tif,
            reduce_only: false,
        }))
    };
    assert_eq!(new(Side::Buy, TimeInForce::Day)[5..7], [1, 1]);
    assert_eq!(
        new(Side::Sell, TimeInForce::ImmediateOrCancel)[5..7],
        [2, 2]
    );
    let row = doc_row(doc, "### Commands", 1);
    assert!(
        row.contains("side@5: 1 buy, 2 sell; tif@6: 1 day, 2 immediate-or-cancel"),
        "{row}"
    );
    let scope = |scope| codec::encode_command(&Command::MassCancel { scope })[5];
    assert_eq!(scope(MassCancelScope::Strategy), 1);
    assert_eq!(scope(MassCancelScope::Symbol(SymbolId(3))), 2);
    let row = doc_row(doc, "### Commands", 4);
    assert!(
        row.contains("scope@5: 1 all of this strategy's orders, 2 one symbol"),
        "{row}"
    );
    let malformed = |error| codec::encode_event(&IpcEvent::Malformed(error))[5];
    let checksum = RecordError::Checksum {
        position: 0,
        found: 0,
        computed: 1,
    };
    let position = RecordError::Position {
        position: 0,
        found: 1,
    };
    let field = RecordError::Field {
        position: 0,
        field: "kind",
        value: 99,
    };
    assert_eq!(
        [malformed(checksum), malformed(position), malformed(field)],
        [1, 2, 3]
    );
    let row = doc_row(doc, "### Events", 13);
    assert!(row.contains("code@5 1 checksum, 2 position"), "{row}");
    assert!(row.contains("3 a field value"), "{row}");
    let states = [
        (EngineState::Absent, 0, "absent"),
        (EngineState::Starting, 1, "starting"),
        (EngineState::Running, 2, "running"),
        (EngineState::Stopped, 3, "stopped"),
    ];
    let line = doc.lines().find(|l| l.contains("engine state:")).unwrap();
    for (state, code, name) in states {
        assert_eq!(state as u64, code);
        assert!(line.contains(&format!("{code} {name}")), "{line}");
    }
    let faults = [
        (
            ChannelFault::Backwards {
                ring: RingKind::Commands,
                last: 2,
                found: 1,
            },
            1,
            "command tail went back",
        ),
        (
            ChannelFault::Beyond {
                ring: RingKind::Commands,
                found: 9,
                limit: 8,
            },
            2,
            "command tail beyond the ring",
        ),
        (
            ChannelFault::Backwards {
                ring: RingKind::Events,
                last: 2,
                found: 1,
            },
            3,
            "event head went back",
        ),
        (
            ChannelFault::Beyond {
                ring: RingKind::Events,
                found: 9,
                limit: 8,
            },
            4,
            "event head beyond the event tail",
        ),
        (
            ChannelFault::TableMismatch {
                declared: 1,
                engine: 2,
            },
            5,
            "the strategy declared another symbol/venue table",
        ),
    ];
    let line = doc
        .lines()
        .find(|l| l.contains("channel fault the engine declared"))
        .unwrap();
    for (fault, code, name) in faults {
        assert_eq!(fault.code(), code);
        assert!(line.contains(&format!("{code} {name}")), "{line}");
    }
}

// Goal: every command and event survives the ring unchanged, in order, across wrap-around,
// and a full ring refuses instead of overwriting.
#[test]
fn commands_and_events_round_trip_through_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    assert_eq!(strategy.strategy(), StrategyId(3));
    let new = NewOrder {
        id: id(1),
        venue: VenueId(2),
        symbol: SymbolId(7),
        side: Side::Sell,
        price: Price::from_units(-3, 5),
        qty: 42,
        tif: TimeInForce::ImmediateOrCancel,
        reduce_only: false,
    };
    let commands = [
        Command::New(new),
        Command::New(NewOrder {
            id: id(3),
            reduce_only: true,
            ..new
        }),
        Command::Cancel { id: id(1) },
        Command::Replace(Replace {
            id: id(1),
            new_id: id(2),
            price: Price::from_units(9, 0),
            qty: 7,
        }),
        Command::MassCancel {
            scope: MassCancelScope::Symbol(SymbolId(7)),
        },
        Command::MassCancel {
            scope: MassCancelScope::Strategy,
        },
    ];
    for round in 0..5 {
        for c in &commands {
            assert!(strategy.push_command(c), "round {round}");
        }
        for c in &commands {
            assert_eq!(engine.pop_command(), Some(Ok(*c)));
        }
        assert_eq!(engine.pop_command(), None);
    }
    for _ in 0..8 {
        assert!(strategy.push_command(&commands[1]));
    }
    assert!(!strategy.push_command(&commands[1]), "a full ring refuses");
    assert_eq!(strategy.commands_pending(), 8);

    let kinds = [
        EventKind::Accepted,
        EventKind::PartiallyFilled {
            qty: 3,
            price: Price::from_units(1, 5),
            leaves: 4,
        },
        EventKind::Filled {
            qty: 4,
            price: Price::from_units(1, 5),
        },
        EventKind::Canceled,
        EventKind::Replaced { new_id: id(9) },
        EventKind::Rejected {
            reason: RejectReason::Other(77),
        },
        EventKind::Rejected {
            reason: RejectReason::NotReceived,
        },
        EventKind::CancelRejected {
            reason: CancelRejectReason::NotApplied,
        },
        EventKind::Unknown,
        EventKind::Shed,
        EventKind::Throttled,
        EventKind::BreakerOpen { retry_after_ns: 5 },
        EventKind::Refused {
            reason: RefusalReason::BadRoute,
        },
        EventKind::Refused {
            reason: RefusalReason::NotSynced,
        },
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let e = Event {
            id: id(i as u64 + 1),
            kind: *kind,
            at_ns: 1_000 + i as u64,
        };
        assert!(engine.push_event(&e));
        assert_eq!(strategy.pop_event(), Some(Ok(IpcEvent::Event(e))));
    }
}

/// Publishes `r` as it is (no seal) at the strategy's next command position.
fn publish_raw(strategy: &Channel, r: &[u8; RECORD_LEN]) {
    let tail = strategy.command_cursor.own.get();
    strategy.write_record(strategy.commands, tail, r);
    strategy.command_cursor.own.set(tail + 1);
    strategy
        .word(offset::COMMAND_TAIL)
        .store(tail + 1, Ordering::Release);
}

// Goal: a record published torn (bytes changed after sealing) or in the wrong place is
// refused with the position and the values, and the records after it still flow.
#[test]
fn torn_or_misplaced_records_are_refused_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    assert!(strategy.push_command(&Command::Cancel { id: id(1) }));
    assert!(strategy.push_command(&Command::Cancel { id: id(2) }));
    // Corrupt the first record's payload, as a producer killed mid-write that published
    // anyway would leave it.
    let mut torn = strategy.read_record(strategy.commands, 0);
    torn[20] ^= 0xff;
    strategy.write_record(strategy.commands, 0, &torn);
    assert!(matches!(
        engine.pop_command(),
        Some(Err(RecordError::Checksum { position: 0, .. }))
    ));
    assert_eq!(
        engine.pop_command(),
        Some(Ok(Command::Cancel { id: id(2) }))
    );
    // A record sealed for another position.
    let mut r = encode_command(&Command::Cancel { id: id(3) });
    codec::seal(&mut r, 99);
    assert!(strategy.push(strategy.commands, &r)); // push re-seals at the right position
    assert_eq!(
        engine.pop_command(),
        Some(Ok(Command::Cancel { id: id(3) }))
    );
    publish_raw(&strategy, &r);
    assert_eq!(
        engine.pop_command(),
        Some(Err(RecordError::Position {
            position: 3,
            found: 99
        }))
    );
    // An unknown kind and a bad side name their field and value.
    let mut r = encode_command(&Command::Cancel { id: id(4) });
    r[4] = 200;
    assert!(strategy.push(strategy.commands, &r));
    assert_eq!(
        engine.pop_command(),
        Some(Err(RecordError::Field {
            position: 4,
            field: "kind",
            value: 200
        }))
    );
    // The flags byte of a new order: reduce-only (1) reads back, any other bit is refused
    // by name (2: the next bit a future flag would take; 255: every bit).
    let new = NewOrder {
        id: id(5),
        venue: VenueId(0),
        symbol: SymbolId(0),
        side: Side::Buy,
        price: Price(1),
        qty: 1,
        tif: TimeInForce::Day,
        reduce_only: true,
    };
    let r = encode_command(&Command::New(new));
    assert_eq!(r[7], 1, "reduce-only is bit 0 of byte 7 (docs/ipc.md)");
    assert!(strategy.push(strategy.commands, &r));
    assert_eq!(engine.pop_command(), Some(Ok(Command::New(new))));
    for (position, bad) in [(6, 2u8), (7, 255)] {
        let mut r = encode_command(&Command::New(new));
        r[7] = bad;
        assert!(strategy.push(strategy.commands, &r));
        assert_eq!(
            engine.pop_command(),
            Some(Err(RecordError::Field {
                position,
                field: "flags",
                value: u64::from(bad)
            }))
        );
    }
    assert_eq!(engine.fault(), None, "bad records do not break the channel");
}

// Goal: a command tail that drops (a torn store reads as 0), goes back, or jumps more than a
// ring ahead (to u64::MAX, to capacity + 1) is refused: the engine reads no slot it names,
// the fault is latched with the values, and nothing more is read from the channel.
#[test]
fn a_bad_command_tail_breaks_the_channel_and_nothing_is_read() {
    type Case = (&'static str, fn(u64) -> u64, fn(u64, u64) -> ChannelFault);
    let cases: [Case; 5] = [
        (
            "torn to zero",
            |_| 0,
            |last, found| back(RingKind::Commands, last, found),
        ),
        (
            "one back",
            |t| t - 1,
            |last, found| back(RingKind::Commands, last, found),
        ),
        (
            "u64::MAX",
            |_| u64::MAX,
            |head, found| beyond(RingKind::Commands, found, head + 8),
        ),
        (
            "capacity + 1 ahead",
            |t| t + 9,
            |head, found| beyond(RingKind::Commands, found, head + 8),
        ),
        (
            "2^63",
            |_| 1 << 63,
            |head, found| beyond(RingKind::Commands, found, head + 8),
        ),
    ];
    for (what, bad_tail, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (engine, strategy) = channel(dir.path());
        for seq in 1..=5 {
            assert!(strategy.push_command(&Command::Cancel { id: id(seq) }));
        }
        for seq in 1..=5 {
            assert_eq!(
                engine.pop_command(),
                Some(Ok(Command::Cancel { id: id(seq) }))
            );
        }
        let found = bad_tail(5);
        strategy
            .word(offset::COMMAND_TAIL)
            .store(found, Ordering::Release);
        assert_eq!(engine.pop_command(), None, "{what}");
        assert_eq!(engine.fault(), Some(expected(5, found)), "{what}");
        // Latched: a tail put right again is not followed either.
        strategy
            .word(offset::COMMAND_TAIL)
            .store(6, Ordering::Release);
        assert_eq!(engine.pop_command(), None, "{what}");
        assert_eq!(engine.commands_pending(), 0, "{what}");
        assert_eq!(engine.event_room(), 0, "{what}");
        assert!(!engine.push_event(&event(1)), "{what}");
        engine.publish_fault(engine.fault().unwrap());
        assert_eq!(strategy.published_fault(), engine.fault(), "{what}");
    }
}

fn back(ring: RingKind, last: u64, found: u64) -> ChannelFault {
    ChannelFault::Backwards { ring, last, found }
}

fn beyond(ring: RingKind, found: u64, limit: u64) -> ChannelFault {
    ChannelFault::Beyond { ring, found, limit }
}

fn event(seq: u64) -> Event {
    Event {
        id: id(seq),
        kind: EventKind::Accepted,
        at_ns: seq,
    }
}

// Goal: an event head (written by the strategy) that goes back or past the event tail breaks
// the channel on the engine side; an event tail past capacity breaks it on the strategy side.
#[test]
fn a_bad_event_index_breaks_the_channel_on_either_side() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    for seq in 1..=3 {
        assert!(engine.push_event(&event(seq)));
    }
    assert!(strategy.pop_event().is_some());
    assert!(strategy.pop_event().is_some());
    assert_eq!(engine.event_room(), 7);
    strategy
        .word(offset::EVENT_HEAD)
        .store(4, Ordering::Release);
    assert!(!engine.push_event(&event(4)));
    assert_eq!(
        engine.fault(),
        Some(beyond(RingKind::Events, 4, 3)),
        "a head past the tail"
    );

    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    assert!(engine.push_event(&event(1)));
    assert!(strategy.pop_event().is_some());
    assert_eq!(engine.event_room(), 8);
    strategy
        .word(offset::EVENT_HEAD)
        .store(0, Ordering::Release);
    assert_eq!(engine.event_room(), 0);
    assert_eq!(engine.fault(), Some(back(RingKind::Events, 1, 0)));

    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    engine.word(offset::EVENT_TAIL).store(9, Ordering::Release);
    assert_eq!(strategy.pop_event(), None);
    assert_eq!(strategy.fault(), Some(beyond(RingKind::Events, 9, 8)));
    assert!(
        !strategy.push_command(&Command::Cancel { id: id(1) }),
        "a broken channel publishes nothing"
    );
}

// Goal: fault codes crossing the process boundary are pinned, and round-trip the header.
#[test]
fn fault_codes_are_pinned() {
    let faults = [
        (back(RingKind::Commands, 5, 0), 1),
        (beyond(RingKind::Commands, 99, 13), 2),
        (back(RingKind::Events, 7, 6), 3),
        (beyond(RingKind::Events, u64::MAX, 2), 4),
        (
            ChannelFault::TableMismatch {
                declared: 7,
                engine: 9,
            },
            5,
        ),
    ];
    for (fault, code) in faults {
        assert_eq!(fault.code(), code);
        let (found, limit) = fault.values();
        assert_eq!(ChannelFault::from_header(code, found, limit), Some(fault));
    }
    assert_eq!(ChannelFault::from_header(0, 1, 2), None);
    assert_eq!(ChannelFault::from_header(6, 1, 2), None);
}

// Goal: an engine attaching to a file a dead engine left "running, venue 0 SYNCED" shows its
// own truth before anything else (starting, nothing SYNCED, its pid, a new epoch), and an
// engine that lets go of the file leaves it "stopped".
#[test]
fn attach_resets_a_dead_engines_state_and_drop_says_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s3");
    let (engine, strategy) = channel(dir.path());
    engine.set_engine_state(EngineState::Running);
    engine.set_venues_synced(0b1);
    engine.word(offset::ENGINE_PID).store(1, Ordering::Release);
    std::mem::forget(engine); // killed: no drop, the header keeps "running, SYNCED"
    assert_eq!(strategy.engine_state(), EngineState::Running);
    let engine = Channel::create_or_attach(&path, StrategyId(3), 8, 8).unwrap();
    assert_eq!(strategy.engine_state(), EngineState::Starting);
    assert!(!strategy.venue_synced(VenueId(0)));
    assert_eq!(strategy.engine_pid(), u64::from(std::process::id()));
    assert_eq!(strategy.engine_epoch(), 2);
    assert_eq!(strategy.published_fault(), None);
    drop(engine);
    assert_eq!(strategy.engine_state(), EngineState::Stopped);
}

// Goal: a file whose indices are inconsistent, or that an engine declared broken, is refused
// by `open` (with the values) and replaced by a new file at the next engine start; the old
// mapping is left as it was.
#[test]
fn inconsistent_or_broken_files_are_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s3");
    let (engine, strategy) = channel(dir.path());
    strategy
        .word(offset::COMMAND_TAIL)
        .store(100, Ordering::Release);
    drop(engine);
    let e = Channel::open(&path).unwrap_err().to_string();
    assert!(
        e.contains("command ring: head 0, tail 100, capacity 8"),
        "{e}"
    );
    // An engine meeting such a file (written after its check) attaches broken, not failed.
    let attached = Channel::open_as(&path, Role::Engine).unwrap();
    assert_eq!(
        attached.fault(),
        Some(beyond(RingKind::Commands, 100, 8)),
        "latched at attach"
    );
    assert_eq!(attached.pop_command(), None);
    std::mem::forget(attached); // not an engine that attached for real: leave the header
    let engine = Channel::create_or_attach(&path, StrategyId(3), 8, 8).unwrap();
    assert_eq!(engine.engine_epoch(), 1, "a new file");
    assert_eq!(engine.commands_pending(), 0);
    assert_eq!(
        strategy.engine_epoch(),
        1,
        "the old mapping keeps its old header"
    );

    engine.publish_fault(back(RingKind::Commands, 3, 0));
    drop(engine);
    let engine = Channel::create_or_attach(&path, StrategyId(3), 8, 8).unwrap();
    assert_eq!(engine.engine_epoch(), 1, "a broken file is replaced");
    assert_eq!(engine.published_fault(), None);
}

// Goal: a restarted engine re-attaches to the same file (the strategy's mapping stays valid,
// unread commands are kept) and the epoch tells the strategy it restarted; a file of another
// shape or version is refused with the value found.
#[test]
fn engine_restart_reattaches_and_bad_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    assert_eq!(strategy.engine_epoch(), 1);
    assert_eq!(strategy.engine_state(), EngineState::Starting);
    assert!(strategy.push_command(&Command::Cancel { id: id(1) }));
    drop(engine);
    let engine = Channel::create_or_attach(&dir.path().join("s3"), StrategyId(3), 8, 8).unwrap();
    assert_eq!(strategy.engine_epoch(), 2);
    assert_eq!(
        engine.pop_command(),
        Some(Ok(Command::Cancel { id: id(1) }))
    );
    engine.set_id_floor(41);
    engine.set_venues_synced(0b10);
    assert_eq!(strategy.id_floor(), 41);
    assert!(strategy.venue_synced(VenueId(1)) && !strategy.venue_synced(VenueId(0)));

    let path = dir.path().join("bad");
    std::fs::write(&path, vec![0u8; HEADER_LEN]).unwrap();
    let e = Channel::open(&path).unwrap_err().to_string();
    assert!(e.contains("magic"), "{e}");
    assert!(matches!(
        Channel::create_or_attach(&path, StrategyId(0), 3, 8),
        Err(IpcError::BadCapacity(3))
    ));
    // Another shape: a new file replaces it.
    let other = Channel::create_or_attach(&path, StrategyId(0), 16, 8).unwrap();
    assert_eq!(other.engine_epoch(), 1);
}

#[test]
fn peer_monitor_sees_a_heartbeat_stop() {
    let mut m = PeerMonitor::new(0, 5, 100);
    assert_eq!(m.observe(50, 5), Liveness::Unchanged);
    assert!(!m.alive());
    assert_eq!(m.observe(60, 6), Liveness::CameAlive);
    assert_eq!(m.observe(150, 6), Liveness::Unchanged);
    assert_eq!(m.observe(161, 6), Liveness::Died);
    assert_eq!(m.observe(500, 6), Liveness::Unchanged);
    assert_eq!(m.observe(501, 7), Liveness::CameAlive);
}

proptest::proptest! {
    // Goal: any 64 bytes at any position, sealed or not, decode to a value or a typed refusal,
    // never a panic; a sealed command record that decodes re-encodes to the same bytes' meaning
    // (decoding is a function of the fields, not of leftovers).
    #[test]
    fn arbitrary_records_never_panic_the_decoders(
        bytes in proptest::array::uniform32(proptest::prelude::any::<u8>()),
        more in proptest::array::uniform32(proptest::prelude::any::<u8>()),
        position in proptest::prelude::any::<u64>(),
        seal_it in proptest::prelude::any::<bool>(),
    ) {
        let mut r = [0u8; RECORD_LEN];
        r[..32].copy_from_slice(&bytes);
        r[32..].copy_from_slice(&more);
        if seal_it {
            codec::seal(&mut r, position);
        }
        let _ = decode_event(position, &r);
        if let Ok(c) = decode_command(position, &r) {
            let mut again = encode_command(&c);
            codec::seal(&mut again, position);
            proptest::prop_assert_eq!(decode_command(position, &again), Ok(c));
        }
    }
}

// Goal: symbols and venues cross the boundary by name: a strategy reads the engine's table
// (index = position), resolves names to indices, and the fingerprint covers order and every
// name — reordering `symbols` changes it.
#[test]
fn names_and_fingerprint_are_published_and_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    assert_eq!(strategy.config_fingerprint(), 0, "nothing published yet");
    let symbols = [*b"AAPL    ", *b"MSFT    ", *b"NVDA    "];
    let venues = ["sim", "a-venue-with-a-very-long-name"];
    engine.publish_names(&symbols, &venues);
    assert_eq!(strategy.symbol_names(), ["AAPL", "MSFT", "NVDA"]);
    assert_eq!(
        strategy.venue_names(),
        ["sim", "a-venue-with-a-v"],
        "venue names are cut at 16 bytes"
    );
    assert_eq!(strategy.symbol_id("NVDA"), Some(SymbolId(2)));
    assert_eq!(strategy.symbol_id("TSLA"), None);
    assert_eq!(strategy.venue_id("sim"), Some(VenueId(0)));
    let fp = strategy.config_fingerprint();
    assert_eq!(fp, crate::ipc::fingerprint(&symbols, &venues));
    let reordered = [*b"MSFT    ", *b"AAPL    ", *b"NVDA    "];
    assert_ne!(fp, crate::ipc::fingerprint(&reordered, &venues));
    assert_ne!(fp, crate::ipc::fingerprint(&symbols, &["sim"]));
    assert_ne!(fp, 0);
    // Pinned: the Python package's `keel.fingerprint` gives the same value (sdk_python.rs).
    assert_eq!(
        crate::ipc::fingerprint(
            &[*b"AAPL    ", *b"MSFT    ", *b"AMZN    ", *b"NVDA    "],
            &["sim"]
        ),
        0xd949_da2d_3f7a_cea0
    );
}

// Goal: the worst legal table — more symbols than the header lists — still publishes a
// fingerprint over all of them, lists what fits, and never writes past the header.
#[test]
fn a_table_larger_than_the_header_lists_what_fits() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    let symbols: Vec<[u8; 8]> = (0..1000u32)
        .map(|i| {
            let mut n = [b' '; 8];
            let s = format!("S{i}");
            n[..s.len()].copy_from_slice(s.as_bytes());
            n
        })
        .collect();
    engine.publish_names(&symbols, &["sim"]);
    let listed = strategy.symbol_names();
    assert_eq!(listed.len(), (crate::ipc::HEADER_LEN - offset::NAMES) / 8);
    assert_eq!(listed[0], "S0");
    assert!(strategy.venue_names().is_empty(), "no room left for venues");
    assert_eq!(
        strategy.config_fingerprint(),
        crate::ipc::fingerprint(&symbols, &["sim"])
    );
}

// Goal: a strategy built against another table is refused at attach (naming both tables),
// and the engine declares the channel broken with code 5 — before any of its commands is
// acted on; the same table is accepted.
#[test]
fn a_strategy_with_another_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, strategy) = channel(dir.path());
    let symbols = [*b"AAPL    ", *b"MSFT    "];
    engine.publish_names(&symbols, &["sim"]);
    strategy.declare_table(&symbols, &["sim"]).unwrap();
    engine.check_declared_table();
    assert_eq!(engine.fault(), None, "the same table is accepted");
    let swapped = [*b"MSFT    ", *b"AAPL    "];
    let err = strategy.declare_table(&swapped, &["sim"]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("[\"MSFT\", \"AAPL\"]") && text.contains("[\"AAPL\", \"MSFT\"]"),
        "{text}"
    );
    engine.check_declared_table();
    let fault = engine.fault().expect("declared broken");
    assert_eq!(fault.code(), 5);
    assert_eq!(
        fault.values(),
        (
            crate::ipc::fingerprint(&swapped, &["sim"]),
            crate::ipc::fingerprint(&symbols, &["sim"])
        )
    );
}

// Goal: the Python package names every refusal code the engine sends, with the docs' names
// and the engine's advice (a reason added to keel without its Python name fails here, even
// where no interpreter runs: core/cli/tests/sdk_python.rs checks the whole layout through
// one). Method: read sdk/python/keel/layout.py's `REFUSALS` table, `code: ("name", "advice")`.
#[test]
fn the_python_package_names_every_refusal_code() {
    let py = include_str!("../../../../sdk/python/keel/layout.py");
    let table = py
        .split("REFUSALS = {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .expect("sdk/python/keel/layout.py has REFUSALS");
    let triples: Vec<(u8, &str, &str)> = table
        .lines()
        .filter_map(|l| {
            let (code, rest) = l.split_once(':')?;
            let rest = rest.trim().trim_start_matches('(').trim_end_matches("),");
            let (name, advice) = rest.split_once(',')?;
            Some((
                code.trim().parse().ok()?,
                name.trim().trim_matches('"'),
                advice.trim().trim_matches('"'),
            ))
        })
        .collect();
    assert_eq!(triples.len(), codec::REFUSAL_CODES.len(), "{triples:?}");
    for (reason, code) in codec::REFUSAL_CODES {
        let name = crate::log::refusal_name(reason);
        let advice = match reason.advice() {
            crate::order::RefusalAdvice::Pause => "pause",
            crate::order::RefusalAdvice::Never => "never",
        };
        assert!(
            triples.contains(&(code, name, advice)),
            "Python lacks `{code}: (\"{name}\", \"{advice}\")`"
        );
    }
}
