//! The order journal under storage faults: a file system that fills (a real, small tmpfs),
//! files a crash left half created, a torn write at every byte of the last record, corruption
//! in the middle still refused, and a restart whose reading is bounded by the last checkpoint
//! however long the journal. The tmpfs tests mount one (root, as here and in CI); where mount
//! is refused they print why and skip.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use keel::journal::{
    Journal, JournalConfig, JournalError, JournalRecord, OpenReport, Recovery, Unavailable,
    RECORD_LEN,
};
use keel::order::{
    ClientOrderId, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce, VenueId,
};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

fn config(dir: &Path, records_per_file: u64) -> JournalConfig {
    JournalConfig {
        dir: dir.to_path_buf(),
        file_bytes: (records_per_file + 1) * RECORD_LEN as u64,
    }
}

fn order(seq: u64) -> NewOrder {
    NewOrder {
        id: ClientOrderId::new(StrategyId(1), seq).unwrap(),
        venue: VenueId(0),
        symbol: SymbolId(2),
        side: if seq % 2 == 0 { Side::Buy } else { Side::Sell },
        price: Price::from_units(50, 5),
        qty: 10,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

/// Record `i` (1-based) of an endless day: every third order stays open, the others close.
fn record(i: u64) -> JournalRecord {
    let seq = i.div_ceil(3);
    let id = order(seq).id;
    match i % 3 {
        1 => JournalRecord::Intent {
            order: order(seq),
            wire_ref: seq as u32,
        },
        2 => JournalRecord::Accepted { id, venue_seq: i },
        _ if seq % 3 == 0 => JournalRecord::SessionSeq {
            venue: VenueId(0),
            applied_through: i,
        },
        _ => JournalRecord::Closed { id, venue_seq: i },
    }
}

fn records(n: u64) -> Vec<JournalRecord> {
    (1..=n).map(record).collect()
}

fn recovery_of(records: &[JournalRecord]) -> Recovery {
    let mut recovery = Recovery::default();
    records.iter().for_each(|r| recovery.apply(r));
    recovery
}

fn reopen(cfg: &JournalConfig) -> Result<(Journal, Vec<JournalRecord>, OpenReport), JournalError> {
    let mut seen = Vec::new();
    let (journal, report) = Journal::open(cfg.clone(), |r| seen.push(*r))?;
    Ok((journal, seen, report))
}

/// A journal of `n` records of `per_file` each, closed; returns the newest file's path.
fn written(cfg: &JournalConfig, n: u64) -> PathBuf {
    let (mut journal, _, _) = reopen(cfg).unwrap();
    for r in records(n) {
        journal.append(&r).unwrap();
    }
    journal.path()
}

/// A tmpfs of `size_kib` mounted on a fresh directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_kib: u64) -> Option<Self> {
        Self::try_mount(size_kib, true)
    }

    fn try_mount(size_kib: u64, say_why: bool) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let size = format!("size={size_kib}k");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Self { dir }),
            Ok(o) => {
                if say_why {
                    eprintln!(
                        "SKIPPED: cannot mount a tmpfs (needs root): {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    );
                }
                None
            }
            Err(e) => {
                if say_why {
                    eprintln!("SKIPPED: cannot run mount: {e}");
                }
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A roomy tmpfs for tests that create many files (fsync costs nothing there), or `None`
/// (then the system's temporary directory is used).
fn scratch() -> Option<Tmpfs> {
    Tmpfs::try_mount(256 << 10, false)
}

fn tempdir_on(fs: &Option<Tmpfs>) -> tempfile::TempDir {
    match fs {
        Some(fs) => tempfile::tempdir_in(fs.path()).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

/// Appends records from `next` until an append fails (at most `limit`); returns the records
/// appended and the error.
fn fill(journal: &mut Journal, next: &mut u64, limit: u64) -> (Vec<JournalRecord>, JournalError) {
    let mut ok = Vec::new();
    for _ in 0..limit {
        let r = record(*next);
        match journal.append(&r) {
            Ok(_) => {
                ok.push(r);
                *next += 1;
            }
            Err(e) => return (ok, e),
        }
    }
    panic!("{limit} appends and the disk never filled");
}

// Goal: a journal on a file system that fills gets an error at an append (the next file
// cannot be reserved: ENOSPC), never a signal; nothing is half written; every file left
// behind opens again on the still-full disk with every record appended; once space is freed,
// appends resume by themselves. Method: a 1 MiB tmpfs with a ballast file, 64 KiB journal
// files.
#[test]
fn a_full_disk_is_an_append_error_never_a_signal() {
    let Some(fs) = Tmpfs::mount(1024) else {
        return;
    };
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 256 << 10]).unwrap();
    let cfg = config(&fs.path().join("journal"), 1023);
    let (mut journal, _, _) = reopen(&cfg).unwrap();
    let mut next = 1;
    let (mut appended, err) = fill(&mut journal, &mut next, 1_000_000);
    assert!(
        journal.rollovers() >= 2,
        "{} rollovers",
        journal.rollovers()
    );
    match err {
        JournalError::Unavailable(Unavailable::Reserve { errno, .. }) => {
            assert_eq!(errno, libc::ENOSPC)
        }
        other => panic!("expected a reservation error, got {other}"),
    }
    // Still refused, still no signal, nothing written.
    let index = journal.next_index();
    for _ in 0..100 {
        assert!(journal.append(&record(next)).is_err());
    }
    assert_eq!(journal.next_index(), index);
    drop(journal);

    // The disk is still full: the journal opens, with everything that was appended.
    let (mut journal, seen, report) = reopen(&cfg).unwrap();
    assert_eq!(recovery_of(&seen), recovery_of(&appended), "{report:?}");
    assert_eq!(journal.next_index(), next);
    let (more, _) = fill(&mut journal, &mut next, 2_000);
    appended.extend(more);

    // Space comes back: appends resume without a restart (the keeper retries).
    std::fs::remove_file(&ballast).unwrap();
    let mut resumed = false;
    for _ in 0..1_000 {
        if journal.append(&record(next)).is_ok() {
            appended.push(record(next));
            next += 1;
            resumed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(resumed, "appends did not resume after space was freed");
    // The freed space takes more than a file: a rollover or two go through.
    let rollovers = journal.rollovers();
    for _ in 0..2_000 {
        journal.append(&record(next)).unwrap();
        appended.push(record(next));
        next += 1;
    }
    assert!(journal.rollovers() > rollovers);
    drop(journal);
    let (_, seen, _) = reopen(&cfg).unwrap();
    assert_eq!(recovery_of(&seen), recovery_of(&appended));
}

// Goal: when even the first file cannot be reserved, opening fails with a typed I/O error
// naming the file (the engine refuses to start), and no partial file is left behind.
#[test]
fn a_disk_too_small_for_one_file_refuses_to_open() {
    let Some(fs) = Tmpfs::mount(64) else {
        return;
    };
    let cfg = JournalConfig {
        dir: fs.path().join("journal"),
        file_bytes: 1 << 20,
    };
    match Journal::open(cfg.clone(), |_| {}) {
        Err(JournalError::Io { path, source }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{path:?}");
        }
        other => panic!("expected ENOSPC, got {:?}", other.map(|(_, r)| r)),
    }
    let left: Vec<_> = std::fs::read_dir(&cfg.dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Writes `bytes` as journal file `n` in `dir`.
fn plant(dir: &Path, n: u64, bytes: &[u8]) -> PathBuf {
    let path = dir.join(format!("journal-{n:08}.kj"));
    std::fs::write(&path, bytes).unwrap();
    path
}

// Goal: a file a crash left half created after the last one (empty, a header cut short, a
// header with a bad checksum and nothing after it, a valid header and no record, a leftover
// temporary file) is removed with a note, and the journal opens with every record and keeps
// appending; a bad header with records after it is still refused.
#[test]
fn half_created_files_are_removed_not_refused() {
    let mut bad_crc = vec![0u8; 4 * RECORD_LEN];
    bad_crc[..8].copy_from_slice(b"KEELJRNL");
    bad_crc[60] = 0x55;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty file", Vec::new()),
        ("header cut short", b"KEELJRNL\x03\0\0\0@\0".to_vec()),
        ("bad header checksum, no records", bad_crc),
        // What an older keel left when it died between sizing a file and writing its header.
        ("zero-filled, no header", vec![0u8; 8 * RECORD_LEN]),
    ];
    for (what, bytes) in cases {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), 3);
        written(&cfg, 10);
        // Files 1..=4 hold the 10 records; the next one is the half-created one.
        plant(dir.path(), 5, &bytes);
        std::fs::write(dir.path().join("journal-00000006.kj.tmp"), b"KEEL").unwrap();
        let (mut journal, seen, report) = reopen(&cfg).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(recovery_of(&seen), recovery_of(&records(10)), "{what}");
        assert_eq!(report.files_removed, 2, "{what}: {report:?}");
        assert!(!dir.path().join("journal-00000005.kj").exists(), "{what}");
        assert!(
            !dir.path().join("journal-00000006.kj.tmp").exists(),
            "{what}"
        );
        journal.append(&record(11)).unwrap();
        drop(journal);
        let (_, seen, _) = reopen(&cfg).unwrap();
        assert_eq!(recovery_of(&seen), recovery_of(&records(11)), "{what}");
    }

    // A garbage header with records after it is not a creation cut short: refused.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 3);
    written(&cfg, 10);
    let mut bytes = vec![0u8; 4 * RECORD_LEN];
    bytes[..8].copy_from_slice(b"NOTKEEL!");
    bytes[RECORD_LEN + 3] = 9;
    plant(dir.path(), 5, &bytes);
    let err = reopen(&cfg).unwrap_err();
    assert!(
        matches!(&err, JournalError::BadHeader { what, .. } if what.contains("magic")),
        "{err}"
    );
}

// Goal: a journal closed with a prepared spare file, or killed between creating a file and
// writing to it, reopens without refusing and without losing a record: the empty file is
// removed and appending continues at the right index.
#[test]
fn an_empty_newest_file_is_dropped_and_appending_continues() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 3);
    written(&cfg, 9); // files 1..=3 full
    let (journal, seen, _) = reopen(&cfg).unwrap();
    assert_eq!(recovery_of(&seen), recovery_of(&records(9)));
    drop(journal);
    // A valid, empty file 4, as the keeper prepares it.
    let (mut journal, _, _) = reopen(&cfg).unwrap();
    journal.append(&record(10)).unwrap();
    let file_4 = std::fs::read(journal.path()).unwrap();
    drop(journal);
    let mut empty = file_4.clone();
    empty[RECORD_LEN..].fill(0);
    plant(dir.path(), 4, &empty);
    let (mut journal, seen, report) = reopen(&cfg).unwrap();
    assert_eq!(report.files_removed, 1, "{report:?}");
    assert_eq!(recovery_of(&seen), recovery_of(&records(9)));
    assert_eq!(journal.next_index(), 10);
    journal.append(&record(10)).unwrap();
    drop(journal);
    let (_, seen, _) = reopen(&cfg).unwrap();
    assert_eq!(recovery_of(&seen), recovery_of(&records(10)));
}

/// How the last record was torn.
#[derive(Debug, Clone, Copy)]
enum Tear {
    /// Only the bytes whose bit is set in the mask reached the file (the rest stayed zero).
    Bytes(u64),
    /// The file ends after this many bytes of the record.
    Truncated(usize),
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

// Goal: a torn write anywhere in the last record — any subset of its bytes written, or the
// file cut at any byte of it — is a torn tail: every record before it is replayed, the tear
// is reported, and the next append takes its place and survives a reopen. Method: property
// test over the journal length, the file size and the tear.
#[test]
fn a_torn_last_record_is_a_torn_tail() {
    let fs = scratch();
    let tears = prop_oneof![
        any::<u64>().prop_map(Tear::Bytes),
        (0usize..RECORD_LEN).prop_map(Tear::Truncated),
    ];
    let result = runner(300).run(&(1u64..40, 2u64..9, tears), |(n, per_file, tear)| {
        let dir = tempdir_on(&fs);
        torn_case(dir.path(), n, per_file, tear)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // And every truncation point of one record, exhaustively.
    for k in 0..RECORD_LEN {
        let dir = tempdir_on(&fs);
        if let Err(e) = torn_case(dir.path(), 7, 4, Tear::Truncated(k)) {
            panic!("cut at byte {k}: {e}");
        }
    }
}

fn torn_case(dir: &Path, n: u64, per_file: u64, tear: Tear) -> Result<(), TestCaseError> {
    let cfg = config(dir, per_file);
    let path = written(&cfg, n);
    let slot = (((n - 1) % per_file + 1) * RECORD_LEN as u64) as usize;
    let mut bytes = std::fs::read(&path).unwrap();
    let whole = bytes[slot..slot + RECORD_LEN].to_vec();
    match tear {
        Tear::Bytes(mask) => {
            for (i, b) in bytes[slot..slot + RECORD_LEN].iter_mut().enumerate() {
                if mask & (1 << i) == 0 {
                    *b = 0;
                }
            }
            std::fs::write(&path, &bytes).unwrap();
        }
        Tear::Truncated(k) => {
            let file = OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len((slot + k) as u64).unwrap();
        }
    }
    // A tear that only lost bytes that were zero anyway left the record intact.
    let survived = match tear {
        Tear::Bytes(_) => bytes[slot..slot + RECORD_LEN] == whole[..],
        Tear::Truncated(k) => whole[k..].iter().all(|&b| b == 0),
    };
    let kept = if survived { n } else { n - 1 };
    let (mut journal, seen, report) = reopen(&cfg).unwrap();
    prop_assert_eq!(recovery_of(&seen), recovery_of(&records(kept)));
    prop_assert_eq!(journal.next_index(), kept + 1);
    if !survived {
        let torn = match tear {
            Tear::Bytes(_) => bytes[slot..slot + RECORD_LEN].iter().any(|&b| b != 0),
            Tear::Truncated(k) => whole[..k].iter().any(|&b| b != 0),
        };
        prop_assert_eq!(report.torn_tail_bytes > 0, torn, "{:?}", report);
    }
    journal.append(&record(kept + 1)).unwrap();
    journal.append(&record(kept + 2)).unwrap();
    drop(journal);
    let (_, seen, report) = reopen(&cfg).unwrap();
    prop_assert_eq!(report.torn_tail_bytes, 0);
    prop_assert_eq!(recovery_of(&seen), recovery_of(&records(kept + 2)));
    Ok(())
}

// Goal: a damaged record with intact records after it is corruption, not a torn tail,
// whichever record and byte: opening is refused with the file and the record's offset.
#[test]
fn corruption_followed_by_records_is_refused() {
    let fs = scratch();
    let cases = (3u64..40, 0u64..1_000, 0usize..RECORD_LEN, 1u8..=255);
    let result = runner(200).run(&cases, |(n, bad, byte, flip)| {
        let dir = tempdir_on(&fs);
        let cfg = config(dir.path(), 50);
        let path = written(&cfg, n);
        let bad = 1 + bad % (n - 1); // any record but the last
        let offset = bad * RECORD_LEN as u64;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut b = [0u8];
        file.read_exact_at(&mut b, offset + byte as u64).unwrap();
        file.write_all_at(&[b[0] ^ flip], offset + byte as u64)
            .unwrap();
        drop(file);
        match reopen(&cfg) {
            Err(JournalError::Corrupt {
                path: p,
                offset: o,
                expected,
            }) => {
                prop_assert_eq!(p, path);
                prop_assert_eq!(o, offset);
                prop_assert_eq!(expected, bad);
            }
            other => prop_assert!(false, "expected corruption, got {:?}", other.map(|r| r.2)),
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// Goal: a damaged last record of a file that is not the newest is corruption (a completed
// file is never torn), even with no record after it in that file.
#[test]
fn a_damaged_end_of_a_completed_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 4);
    written(&cfg, 10);
    // Make opening read file 1: no checkpoint.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "kjc") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let path = dir.path().join("journal-00000001.kj");
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[0xEE], 4 * RECORD_LEN as u64 + 30)
        .unwrap();
    drop(file);
    match reopen(&cfg) {
        Err(JournalError::Corrupt {
            path: p, offset, ..
        }) => {
            assert_eq!((p, offset), (path, 4 * RECORD_LEN as u64));
        }
        other => panic!("expected corruption, got {:?}", other.map(|r| r.2)),
    }
}

// Goal: restart cost is bounded by the last checkpoint, not by the length of the journal:
// after 300 rollovers, opening reads one checkpoint (the open orders and positions) and the
// newest file only, and rebuilds the same state as a full replay.
#[test]
fn restart_reads_only_the_last_checkpoint_and_the_newest_file() {
    let fs = scratch();
    let dir = tempdir_on(&fs);
    let per_file = 20;
    let cfg = config(dir.path(), per_file);
    let n = 300 * per_file + 7;
    written(&cfg, n);
    let (_, seen, report) = reopen(&cfg).unwrap();
    assert_eq!(report.files, 1, "{report:?}");
    assert!(report.checkpoint >= 300, "{report:?}");
    let all = records(n);
    let expected = recovery_of(&all);
    assert_eq!(recovery_of(&seen), expected);
    // The checkpoint holds the state (one record per open order, per venue, per strategy);
    // the rest is the newest file.
    let state_records = expected.open.len() as u64 + 3;
    assert!(report.checkpoint_records <= state_records, "{report:?}");
    assert!(
        report.records - report.checkpoint_records <= per_file,
        "{report:?}"
    );
    assert!(report.records < n / 2, "{report:?}");
    // Files covered by the checkpoint may be deleted: the journal still opens, same state.
    for k in 1..=report.checkpoint {
        std::fs::remove_file(dir.path().join(format!("journal-{k:08}.kj"))).unwrap();
    }
    let (_, seen, again) = reopen(&cfg).unwrap();
    assert_eq!(recovery_of(&seen), expected);
    assert_eq!(again.records, report.records);
}

/// Pages of `path` resident in the page cache.
fn resident_pages(path: &Path) -> usize {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a read-only mapping of a file nothing writes while the test holds it.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let page = 4096;
    let mut vec = vec![0u8; map.len().div_ceil(page)];
    // SAFETY: `map` is a live mapping of `map.len()` bytes at a page-aligned address, and
    // `vec` has one byte per page of it, as mincore requires.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            vec.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

/// Writes `path`'s dirty pages and drops its pages from the page cache.
fn evict(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: the descriptor is open and owned by `file` for the call.
    let rc = unsafe {
        libc::posix_fadvise(
            std::os::unix::io::AsRawFd::as_raw_fd(&file),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    assert_eq!(rc, 0);
}

// Goal: opening touches what it must, not the empty rest of the current file: a 64 MiB file
// holding 100 records, its pages dropped from the page cache, is opened with fewer than 256
// of its 16,384 pages brought in (the records, a bounded look past them, read-around). Method:
// mincore on a disk file system (a tmpfs's pages are always resident).
#[test]
fn opening_does_not_read_the_empty_rest_of_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = JournalConfig {
        dir: dir.path().to_path_buf(),
        file_bytes: 64 << 20,
    };
    let path = written(&cfg, 100);
    evict(&path);
    let before = resident_pages(&path);
    if before > 64 {
        eprintln!("SKIPPED: the page cache kept {before} pages of {path:?} after eviction");
        return;
    }
    let (journal, seen, _) = reopen(&cfg).unwrap();
    assert_eq!(seen.len(), 100);
    let after = resident_pages(&path);
    eprintln!("{before} pages resident before open, {after} after");
    assert!(after < 256, "{after} of 16384 pages resident after open");
    drop(journal);
}

// Goal: a damaged newest checkpoint is not trusted: opening falls back to the one before it
// (kept for this) and replays the files after it, with the same result; with no readable
// checkpoint and the first file gone, opening is refused.
#[test]
fn a_damaged_checkpoint_falls_back_to_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 5);
    written(&cfg, 53);
    let (_, _, report) = reopen(&cfg).unwrap();
    let newest = dir
        .path()
        .join(format!("checkpoint-{:08}.kjc", report.checkpoint));
    let file = OpenOptions::new().write(true).open(&newest).unwrap();
    file.write_all_at(&[0xAB], RECORD_LEN as u64 + 20).unwrap();
    drop(file);
    let (_, seen, fallback) = reopen(&cfg).unwrap();
    assert_eq!(fallback.checkpoint, report.checkpoint - 1, "{fallback:?}");
    assert_eq!(fallback.files, 2, "{fallback:?}");
    assert_eq!(recovery_of(&seen), recovery_of(&records(53)));

    // Every checkpoint damaged and the first journal file gone: refused, never a fresh start
    // (that would issue ids and wire references again).
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "kjc") {
            let file = OpenOptions::new().write(true).open(&path).unwrap();
            file.write_all_at(&[0xCD], 3).unwrap();
        }
    }
    std::fs::remove_file(dir.path().join("journal-00000001.kj")).unwrap();
    let err = reopen(&cfg).unwrap_err();
    assert!(
        matches!(&err, JournalError::BadHeader { what, .. } if what.contains("no checkpoint")),
        "{err}"
    );
}

// ----- the engine on a full disk ------------------------------------------------------------

/// The simulated venue in a thread of this process (stepped until dropped).
struct VenueThread {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: std::net::SocketAddr,
}

impl VenueThread {
    fn start() -> Self {
        use keel::clock::{Clock, TscClock};
        use keel_venue::server::{VenueConfig, VenueServer};
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let (tx, rx) = std::sync::mpsc::channel();
        // The io_uring ring belongs to the thread that submits to it: build it there.
        let thread = std::thread::spawn(move || {
            let mut venue = VenueServer::new(VenueConfig::default()).unwrap();
            tx.send(venue.local_addr()).unwrap();
            let clock = TscClock::new();
            while !flag.load(Ordering::Relaxed) {
                venue.step(clock.now_ns(), 1_000_000).unwrap();
            }
        });
        Self {
            stop,
            thread: Some(thread),
            addr: rx.recv().unwrap(),
        }
    }
}

impl Drop for VenueThread {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends one command and waits (bounded) for its answer.
fn answer(
    strategy: &mut keel::dispatch::StrategyHandle,
    command: keel::order::Command,
    id: ClientOrderId,
) -> keel::order::EventKind {
    strategy.commands.push(command).unwrap();
    for _ in 0..5_000 {
        while let Ok(e) = strategy.events.pop() {
            if e.id == id {
                return e.kind;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("no answer for {id}");
}

/// Fills the file system under `dir` to the last byte with a file; returns its path.
fn fill_disk(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("ballast");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![7u8; 4096];
    while file.write_all(&chunk).is_ok() {}
    while file.write_all(&chunk[..1]).is_ok() {}
    path
}

// Goal: the engine with its journal on a file system that fills refuses new orders
// `JournalUnavailable` (no signal, no crash) while cancels still flow and are answered; when
// space comes back new orders are accepted again without a restart, and the journal left
// behind opens. Method: the real engine against the in-process venue, the journal on a small
// tmpfs filled by a ballast file after start, 4 KiB journal files.
#[test]
fn the_engine_on_a_full_disk_refuses_new_orders_and_cancels_flow() {
    use keel::config::EngineConfig;
    use keel::engine::EngineBuilder;
    use keel::order::{Command, EventKind, RefusalReason};
    use keel::runtime::IdlePolicy;
    let Some(fs) = Tmpfs::mount(512) else {
        return;
    };
    let venue = VenueThread::start();
    let journal_dir = fs.path().join("journal");
    let text = format!(
        "symbols = [\"AAPL\", \"MSFT\"]\n[dispatcher]\nstrategies = 1\n\
         [engine]\ntopology = \"inline\"\nidle = \"backoff\"\n\
         [journal]\ndir = \"{}\"\nfile_bytes = 4096\n\
         [[venue]]\nname = \"sim\"\naddress = \"{}\"\nusername = \"keel\"\npassword = \"keel\"\n",
        journal_dir.display(),
        venue.addr
    );
    let mut engine = EngineBuilder::new(EngineConfig::from_toml(&text).unwrap())
        .idle(IdlePolicy::TEST)
        .start()
        .unwrap();
    let mut strategy = engine.take_strategy(StrategyId(0)).unwrap();
    for _ in 0..5_000 {
        if engine.venue_synced(VenueId(0)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(engine.venue_synced(VenueId(0)), "venue link never SYNCED");
    // Let the keeper prepare its spare file, then fill the disk.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let ballast = fill_disk(fs.path());
    let new = |seq: u64| {
        let mut o = order(seq);
        o.id = ClientOrderId::new(StrategyId(0), seq).unwrap();
        o.venue = VenueId(0);
        o.symbol = SymbolId((seq % 2) as u16);
        // Resting far from the venue's flow: nothing fills it.
        o.side = Side::Buy;
        o.price = Price::from_units(50, 0);
        o
    };
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for seq in 1..=200 {
        let o = new(seq);
        match answer(&mut strategy, Command::New(o), o.id) {
            EventKind::Accepted => accepted.push(o.id),
            EventKind::Refused {
                reason: RefusalReason::JournalUnavailable,
            } => refused += 1,
            other => panic!("order {seq}: {other:?}"),
        }
    }
    assert!(refused > 0, "the full disk never refused an order");
    assert!(!accepted.is_empty());
    // Cancels still flow (their close cannot be journaled, and that is counted).
    for &id in &accepted {
        assert_eq!(
            answer(&mut strategy, Command::Cancel { id }, id),
            EventKind::Canceled
        );
    }
    // Space comes back: new orders trade again without a restart.
    std::fs::remove_file(&ballast).unwrap();
    let mut traded = false;
    for seq in 201..=1_200 {
        let o = new(seq);
        if answer(&mut strategy, Command::New(o), o.id) == EventKind::Accepted {
            traded = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(traded, "new orders still refused after space came back");
    let report = engine.stop().unwrap();
    assert!(
        report.dispatch.journal_errors >= refused,
        "{:?}",
        report.dispatch
    );
    // The journal left behind opens (the cancels it missed leave orders open in it: a restart
    // reconciles them with the venue, never resends).
    let cfg = JournalConfig {
        dir: journal_dir,
        file_bytes: 4096,
    };
    let (_, seen, _) = reopen(&cfg).unwrap();
    assert!(recovery_of(&seen).open.len() <= accepted.len() + 1);
}
