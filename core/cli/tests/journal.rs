//! The order journal on real files: replay after reopen, torn tails ignored, corruption
//! refused with its offset, rollover across files, checkpoints, bad headers and configuration
//! refused. (Storage faults — a full disk, half-created files, torn writes at every byte — are
//! in journal_faults.rs.)

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

mod common;

use keel::journal::{Journal, JournalConfig, JournalError, JournalRecord, Recovery, RECORD_LEN};
use keel::order::{
    ClientOrderId, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce, VenueId,
};

fn config(dir: &Path, records_per_file: u64) -> JournalConfig {
    JournalConfig {
        dir: dir.to_path_buf(),
        file_bytes: (records_per_file + 1) * RECORD_LEN as u64,
    }
}

fn order(seq: u64, qty: u32) -> NewOrder {
    NewOrder {
        id: ClientOrderId::new(StrategyId(2), seq).unwrap(),
        venue: VenueId(1),
        symbol: SymbolId(3),
        side: if seq % 2 == 0 { Side::Buy } else { Side::Sell },
        price: Price::from_units(101, 25),
        qty,
        tif: if seq % 3 == 0 {
            TimeInForce::ImmediateOrCancel
        } else {
            TimeInForce::Day
        },
        reduce_only: false,
    }
}

/// A day in miniature: intents, acks, fills, closes, a session sequence, a high-water mark.
fn day(n: u64) -> Vec<JournalRecord> {
    let mut records = vec![JournalRecord::IdHighWater {
        strategy: StrategyId(2),
        high_water_mark: 1_000,
    }];
    for seq in 1..=n {
        let o = order(seq, 10);
        records.push(JournalRecord::Intent {
            order: o,
            wire_ref: seq as u32,
        });
        let (id, venue_seq) = (o.id, seq * 2);
        match seq % 4 {
            0 => {} // in flight: never answered
            1 => records.push(JournalRecord::Accepted { id, venue_seq }),
            2 => {
                records.push(JournalRecord::Accepted { id, venue_seq });
                records.push(JournalRecord::Fill {
                    id,
                    qty: 4,
                    price: o.price,
                    venue_seq,
                });
            }
            _ => {
                records.push(JournalRecord::Accepted { id, venue_seq });
                records.push(JournalRecord::Closed { id, venue_seq });
            }
        }
        records.push(JournalRecord::SessionSeq {
            venue: VenueId(1),
            applied_through: seq * 2,
        });
    }
    records
}

fn reopen(cfg: &JournalConfig) -> Result<(Journal, Vec<JournalRecord>), JournalError> {
    let mut seen = Vec::new();
    let (journal, _) = Journal::open(cfg.clone(), |r| seen.push(*r))?;
    Ok((journal, seen))
}

fn remove_checkpoints(dir: &Path) -> usize {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "kjc") {
            std::fs::remove_file(path).unwrap();
            removed += 1;
        }
    }
    removed
}

fn recovery_of(records: &[JournalRecord]) -> Recovery {
    let mut recovery = Recovery::default();
    for r in records {
        recovery.apply(r);
    }
    recovery
}

// Goal: everything appended is replayed in order after reopening, across rollovers (method:
// checkpoints removed, so replay starts at file 1), and the recovery rebuilds open orders,
// in-flight orders, id high-water marks and session sequences.
#[test]
fn replays_everything_in_order_across_rollover() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 7);
    let records = day(20);
    let (mut journal, seen) = reopen(&cfg).unwrap();
    assert!(seen.is_empty());
    for r in &records {
        journal.append(r).unwrap();
    }
    assert!(
        journal.rollovers() >= 8,
        "{} rollovers",
        journal.rollovers()
    );
    drop(journal);
    assert!(
        remove_checkpoints(dir.path()) > 0,
        "checkpoints were written"
    );
    let (journal, seen) = reopen(&cfg).unwrap();
    assert_eq!(seen, records);
    assert_eq!(journal.next_index(), records.len() as u64 + 1);
    let recovery = recovery_of(&seen);
    // Open: seq%4 == 0 (in flight), 1 (accepted), 2 (partially filled); closed: 3.
    assert_eq!(recovery.open.len(), 15);
    assert_eq!(recovery.in_flight().count(), 5);
    assert_eq!(recovery.next_sequence[&StrategyId(2)], 1_001);
    // The restarted allocator never issues an id the journal may have seen used.
    let mut ids = recovery.id_allocator(StrategyId(2));
    assert!(ids.allocate().is_err(), "no lease is held after a restart");
    assert_eq!(ids.extend_lease(100), 1_100);
    assert_eq!(ids.allocate().unwrap().sequence(), 1_001);
    let mut fresh = recovery.id_allocator(StrategyId(9));
    fresh.extend_lease(1);
    assert_eq!(fresh.allocate().unwrap().sequence(), 1);
    assert_eq!(recovery.applied_through[&VenueId(1)], 40);
    // Wire references resume above every one journaled; each open order keeps its own.
    assert_eq!(recovery.next_wire_ref[&VenueId(1)], 21);
    assert_eq!(recovery.open[&order(6, 10).id].wire_ref, 6);
    assert_eq!(recovery.open[&order(2, 10).id].filled, 4);
    assert_eq!(recovery.orphans, 0);
}

// Goal: a restart from a checkpoint rebuilds exactly the state a full replay does, replaying
// only the checkpoint and the newest file; appends continue after it and a second restart
// agrees again.
#[test]
fn checkpoint_restart_equals_full_replay() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 7);
    let records = day(20);
    let (mut journal, _) = reopen(&cfg).unwrap();
    for r in &records {
        journal.append(r).unwrap();
    }
    drop(journal);
    let mut seen = Vec::new();
    let (mut journal, report) = Journal::open(cfg.clone(), |r| seen.push(*r)).unwrap();
    assert!(report.checkpoint > 0, "{report:?}");
    assert_eq!(report.files, 1, "only the newest file is read: {report:?}");
    assert!(
        report.records - report.checkpoint_records <= 7,
        "{report:?}"
    );
    assert_eq!(recovery_of(&seen), recovery_of(&records));
    assert_eq!(journal.next_index(), records.len() as u64 + 1);
    let more = day(3)[1..].to_vec();
    for r in &more {
        journal.append(r).unwrap();
    }
    drop(journal);
    let (_, seen) = reopen(&cfg).unwrap();
    let all: Vec<JournalRecord> = records.iter().chain(&more).copied().collect();
    let mut expected = recovery_of(&all);
    // A checkpoint does not carry the count of odd records of the replay it summarises.
    let got = recovery_of(&seen);
    expected.orphans = got.orphans;
    assert_eq!(got, expected);
}

// Goal: a record half written when the process died (a torn tail) is ignored, counted, and
// overwritten by the next append; nothing before it is lost.
#[test]
fn torn_tail_is_ignored_and_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 100);
    let records = day(3);
    let (mut journal, _) = reopen(&cfg).unwrap();
    for r in &records {
        journal.append(r).unwrap();
    }
    let path = journal.path().to_path_buf();
    let tail = (records.len() + 1) * RECORD_LEN;
    drop(journal);
    // Half a record: index and kind written, checksum and payload not.
    let mut file = OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(tail as u64 + 4)).unwrap();
    file.write_all(&[1, 0, 0, 0, 99, 0, 0, 0, 0, 0, 0, 0, 7, 7])
        .unwrap();
    drop(file);
    let mut seen = Vec::new();
    let (mut journal, report) = Journal::open(cfg.clone(), |r| seen.push(*r)).unwrap();
    assert_eq!(seen, records);
    assert!(report.torn_tail_bytes > 0, "{report:?}");
    let extra = JournalRecord::Closed {
        id: order(1, 10).id,
        venue_seq: 0,
    };
    journal.append(&extra).unwrap();
    drop(journal);
    let (_, seen) = reopen(&cfg).unwrap();
    assert_eq!(seen.len(), records.len() + 1);
    assert_eq!(seen.last(), Some(&extra));
}

// Goal: a damaged record with good records after it is corruption, not a torn tail: opening
// is refused with the file and the byte offset, nothing is silently skipped.
#[test]
fn corruption_in_the_middle_is_refused_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 100);
    let (mut journal, _) = reopen(&cfg).unwrap();
    for r in &day(3) {
        journal.append(r).unwrap();
    }
    let path = journal.path().to_path_buf();
    drop(journal);
    let bad_offset = 3 * RECORD_LEN as u64 + 20; // inside record 3's payload
    let mut file = OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(bad_offset)).unwrap();
    file.write_all(&[0xFF]).unwrap();
    drop(file);
    match reopen(&cfg) {
        Err(JournalError::Corrupt {
            path: p,
            offset,
            expected,
        }) => {
            assert_eq!((p, offset, expected), (path, 3 * RECORD_LEN as u64, 3));
        }
        other => panic!("expected corruption, got {:?}", other.map(|(_, s)| s.len())),
    }
}

// Goal: a missing file in the middle of the sequence and a foreign header are refused, as is
// a file size that cannot hold records.
#[test]
fn gaps_foreign_files_and_bad_sizes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2);
    let (mut journal, _) = reopen(&cfg).unwrap();
    for r in &day(4) {
        journal.append(r).unwrap();
    }
    drop(journal);
    // Without checkpoints, replay needs every file from the first.
    remove_checkpoints(dir.path());
    std::fs::remove_file(dir.path().join("journal-00000002.kj")).unwrap();
    let err = reopen(&cfg).unwrap_err();
    assert!(
        matches!(&err, JournalError::BadHeader { what, .. } if what.contains("file 2 is missing")),
        "{err}"
    );

    let other = tempfile::tempdir().unwrap();
    std::fs::write(
        other.path().join("journal-00000001.kj"),
        vec![b'x'; 4 * RECORD_LEN],
    )
    .unwrap();
    let err = reopen(&config(other.path(), 2)).unwrap_err();
    assert!(
        matches!(&err, JournalError::BadHeader { what, .. } if what.contains("magic")),
        "{err}"
    );

    let bad = JournalConfig {
        dir: dir.path().to_path_buf(),
        file_bytes: 100,
    };
    assert!(matches!(
        reopen(&bad).unwrap_err(),
        JournalError::BadFileSize(100)
    ));
}

// Goal: a journal whose protocol state the venue's protocol cannot read stops the engine at
// start, by name, before anything trades: a state of another protocol's tag (the venue's
// protocol changed), a layout version this keel does not read, bytes that are not OUCH's
// session name. OUCH's own state is taken.
#[test]
fn an_engine_does_not_start_on_a_protocol_state_it_cannot_read() {
    use keel::engine::{EngineBuilder, EngineError};
    use keel::order::ProtocolState;
    use keel::session::protocol::StateError;
    let start = |state: ProtocolState| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), 64);
        {
            let (mut journal, _) = Journal::open(cfg.clone(), |_| {}).unwrap();
            journal
                .append(&JournalRecord::ProtocolState {
                    venue: VenueId(0),
                    state,
                })
                .unwrap();
        }
        let mut engine = common::one_venue_config("127.0.0.1:9".parse().unwrap(), "j");
        engine.journal = Some(cfg);
        let transport = keel::net::EpollReactor::new(keel::net::ReactorConfig::default()).unwrap();
        EngineBuilder::new(engine).build(transport, 1).map(|_| ())
    };
    let refused = |state| match start(state) {
        Err(EngineError::ProtocolState { venue: 0, why }) => why,
        other => panic!("expected a refused protocol state, got {other:?}"),
    };
    assert!(matches!(
        refused(ProtocolState::new(2, 1, b"DAY0000001").unwrap()),
        StateError::OtherProtocol {
            found: 2,
            expected: 1,
            ..
        }
    ));
    assert!(matches!(
        refused(ProtocolState::new(1, u8::MAX, b"DAY0000001").unwrap()),
        StateError::Version {
            found: 255,
            supported: 1,
            ..
        }
    ));
    assert!(matches!(
        refused(ProtocolState::new(1, 1, &[]).unwrap()),
        StateError::Malformed { .. }
    ));
    let e = refused(ProtocolState::new(0, 0, &[0; keel::order::PROTOCOL_STATE_MAX]).unwrap());
    assert!(e.to_string().contains("protocol tag 0"), "{e}");
    start(ProtocolState::new(1, 1, b"DAY0000001").unwrap()).expect("OUCH's own state is taken");
}
