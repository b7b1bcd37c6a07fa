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

#[test]
fn refusal_codes_follow_the_enum() {
    for (i, r) in codec::tests_refusals().iter().enumerate() {
        assert_eq!(*r as usize, i);
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
    };
    let commands = [
        Command::New(new),
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
    let slot = strategy.slot(strategy.commands, 0);
    // SAFETY: test-only write into a slot of the mapping, nothing else reads it concurrently.
    #[allow(unsafe_code)]
    unsafe {
        *slot.add(20) ^= 0xff;
    }
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
    let slot = strategy.slot(strategy.commands, 3);
    // SAFETY: as above.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(r.as_ptr(), slot, RECORD_LEN);
    }
    strategy
        .word(offset::COMMAND_TAIL)
        .store(4, Ordering::Release);
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
    assert!(strategy.venue_synced(1) && !strategy.venue_synced(0));

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
