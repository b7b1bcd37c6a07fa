//! The order journal: append-only, memory-mapped files of fixed-size, checksummed records.
//!
//! The engine writes an order's intent before the order leaves, then its acknowledgement, fills
//! and close, the session's last applied sequence number and the ClientOrderId high-water
//! marks. A record is 64 bytes: CRC-32 of the rest, kind, a global record index, payload.
//!
//! Files are reserved on disk before they are mapped (`posix_fallocate`), so a full disk is an
//! error at reservation — appends fail, the dispatcher refuses new orders
//! `JournalUnavailable` — never a SIGBUS at a store. A side thread (the keeper, see
//! `keeper.rs`) prepares the next file ahead of need, so a rollover is a swap of mappings, and
//! writes a checkpoint (the compacted state: open orders, id floors, wire references, session
//! sequences) after each completed file.
//!
//! Opening reads the newest readable checkpoint and only the files after it, scanning each
//! through its mapping up to the end of its good records (plus a bounded look past it). A
//! damaged last record of the newest file is a torn tail: reported, cleared, and overwritten
//! by the next append. A bad record *followed by intact ones* is corruption, refused with the
//! file and offset. Trailing files without records (a prepared spare, a creation cut short)
//! and leftover temporary files are removed with a note.
//!
//! Appending copies 64 bytes into the mapping: no allocation, no system call. The page cache
//! makes every appended record survive a killed process; [`Journal::sync`] (msync) makes them
//! survive a lost machine.

use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use crate::order::{
    ClientOrderId, NewOrder, Position, Price, ProtocolState, Qty, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};

mod files;
mod keeper;
mod recovery;
pub use recovery::{RecoveredOrder, Recovery};

use files::Shape;
use keeper::{Keeper, KeeperStart};

/// Bytes per record (and per file header).
pub const RECORD_LEN: usize = 64;

/// One journal entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalRecord {
    /// An order about to leave (written before it is sent), with the wire reference its
    /// session will carry it under (OUCH UserRefNum): executions name only that reference,
    /// so a restarted engine needs it to recognise them.
    Intent {
        /// The order.
        order: NewOrder,
        /// Per-venue ascending wire reference.
        wire_ref: u32,
    },
    /// The venue acknowledged the order.
    Accepted {
        /// The order.
        id: ClientOrderId,
        /// Sequence number of the venue message that said so (0: not a sequenced message).
        venue_seq: u64,
    },
    /// An execution.
    Fill {
        /// The order.
        id: ClientOrderId,
        /// Shares executed.
        qty: Qty,
        /// Execution price.
        price: Price,
        /// Sequence number of the venue message that reported it.
        venue_seq: u64,
    },
    /// The order reached a terminal state (filled, canceled, rejected).
    Closed {
        /// The order.
        id: ClientOrderId,
        /// Sequence number of the venue message that closed it (0: closed by keel itself,
        /// e.g. never sent, or by reconciliation's verdict).
        venue_seq: u64,
    },
    /// A venue session applied every report up to `applied_through`.
    SessionSeq {
        /// The venue.
        venue: VenueId,
        /// Highest applied sequence number.
        applied_through: u64,
    },
    /// A strategy's ClientOrderId lease: what `IdAllocator::extend_lease` returned, written
    /// before any id under it is used.
    IdHighWater {
        /// The strategy.
        strategy: StrategyId,
        /// Sequences up to and including this one may have been used.
        high_water_mark: u64,
    },
    /// Checkpoint only: an order open at the checkpoint, with what its records had said.
    OpenOrder {
        /// The order.
        order: NewOrder,
        /// The wire reference it was sent under.
        wire_ref: u32,
        /// The venue had acknowledged it.
        accepted: bool,
        /// Shares executed so far.
        filled: Qty,
    },
    /// Checkpoint only: the next unused wire reference of a venue.
    WireRefFloor {
        /// The venue.
        venue: VenueId,
        /// Next unused wire reference.
        next_wire_ref: u32,
    },
    /// A venue protocol's own state for `venue` from here on (for OUCH: the venue session,
    /// the trading day, its first login entered), opaque to the journal and checksummed with
    /// the record. Restored through the seam (`VenueProtocol::restore_state`), which refuses a
    /// state of another protocol or of a layout it does not read. Journals written before the
    /// seam held OUCH's session name in a kind of its own (9), read as OUCH's state version 1.
    ProtocolState {
        /// The venue.
        venue: VenueId,
        /// The protocol's state.
        state: ProtocolState,
    },
    /// keel's position in `symbol` on `venue`'s account is exactly `position` from here on
    /// (fills after it add to it). Written when the session adopts the venue's figure (see
    /// `OutcomeKind::PositionBaseline`) and, in checkpoints, once per position with activity
    /// (the fills it sums are compacted away with their closed orders).
    Position {
        /// The venue.
        venue: VenueId,
        /// The symbol.
        symbol: SymbolId,
        /// Shares bought and sold.
        position: Position,
    },
}

/// Where a record read by [`Journal::read`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordSource {
    /// The newest readable checkpoint (a snapshot of what older files said).
    Checkpoint(u64),
    /// Journal file `file`, record index `index`.
    File {
        /// The file's number (`journal-<file>.kj`).
        file: u64,
        /// The record's index.
        index: u64,
    },
}

/// Why the journal takes no record right now. Small and `Copy`: an append on the decision
/// path reports it without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The next file could not be reserved on disk (ENOSPC: the file system is full). The
    /// keeper retries; appends resume once it succeeds.
    #[error("journal file {file_no} could not be reserved on disk (errno {errno})")]
    Reserve {
        /// The file that could not be created.
        file_no: u64,
        /// The OS error number.
        errno: i32,
    },
    /// The next file is still being prepared.
    #[error("journal file {file_no} is not ready yet")]
    NotReady {
        /// The file being prepared.
        file_no: u64,
    },
}

/// Journal failures; each names the file and, for records, the byte offset.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A file operation failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file's header is not a keel journal header of this version.
    #[error("journal {path}: bad header: {what}")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A record fails its checksum or is out of sequence, and intact records follow it.
    #[error("journal {path}: corrupt record at byte {offset} (expected record index {expected})")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the bad record.
        offset: u64,
        /// The record index that should be there.
        expected: u64,
    },
    /// A record's kind or fields are not valid (written by a different program).
    #[error("journal {path}: record at byte {offset}: {what}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// Byte offset of the record.
        offset: u64,
        /// What is wrong.
        what: &'static str,
    },
    /// The configuration cannot work.
    #[error(
        "journal config: file_bytes = {0}: must be a multiple of 64 and hold at least 2 records"
    )]
    BadFileSize(u64),
    /// An append found no file to write to.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
}

/// Journal settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalConfig {
    /// Directory of the journal files.
    pub dir: PathBuf,
    /// Size of each file (header included); the journal rolls over to a new file when full.
    pub file_bytes: u64,
}

/// What opening found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenReport {
    /// Journal files read (checkpoint not counted).
    pub files: u64,
    /// Records replayed, the checkpoint's included.
    pub records: u64,
    /// Of `records`, those read from the checkpoint.
    pub checkpoint_records: u64,
    /// The checkpoint replay started from: the state after journal files up to this number
    /// (0: none, replay started at file 1).
    pub checkpoint: u64,
    /// Bytes of a torn tail ignored (0 when the journal ended cleanly).
    pub torn_tail_bytes: u64,
    /// Files removed: trailing journal files without records (a prepared spare, a creation
    /// cut short) and leftover temporary files.
    pub files_removed: u64,
}

/// An open journal, positioned at its end.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    map: MmapMut,
    file_no: u64,
    offset: usize,
    next_index: u64,
    rollovers: u64,
    /// This rollover already waited for its spare file once.
    roll_waited: bool,
    keeper: Keeper,
}

impl Journal {
    /// Opens (or creates) the journal in `config.dir`, replays the newest checkpoint and every
    /// record after it to `replay` in order, and positions the journal after the last good
    /// record.
    pub fn open(
        config: JournalConfig,
        mut replay: impl FnMut(&JournalRecord),
    ) -> Result<(Self, OpenReport), JournalError> {
        let size = config.file_bytes;
        if size % RECORD_LEN as u64 != 0 || size < 3 * RECORD_LEN as u64 {
            return Err(JournalError::BadFileSize(size));
        }
        let dir = config.dir;
        std::fs::create_dir_all(&dir).map_err(files::io(&dir))?;
        let mut report = OpenReport::default();
        let listing = tidy(&dir, &mut report)?;
        // The keeper's state: everything before the file appended to.
        let mut state = Recovery::default();
        let (checkpoint, mut next_index) =
            newest_checkpoint(&dir, &listing.checkpoints, &mut report, |r| {
                replay(r);
                state.apply(r);
            });
        let first = checkpoint.map_or(1, |c| c + 1);
        let to_read = files_after(&dir, &listing, checkpoint)?;
        let (newest, completed) = match to_read.split_last() {
            Some((&newest, completed)) => (newest, completed),
            None => (first, &[][..]),
        };
        for &n in completed {
            let path = files::journal_path(&dir, n);
            let map = files::open_completed(&path)?;
            check_first(&path, &map, n, next_index)?;
            let mut both = |r: &JournalRecord| {
                replay(r);
                state.apply(r);
            };
            files::scan(&path, &map, false, &mut next_index, &mut report, &mut both)?;
            report.files += 1;
        }
        let start = KeeperStart {
            dir: dir.clone(),
            file_bytes: size,
            current: newest,
            state,
            state_through: newest - 1,
            state_next_index: next_index,
            checkpoint,
        };
        let (map, offset) = if to_read.is_empty() {
            (files::create_journal(&dir, newest, size)?, RECORD_LEN)
        } else {
            let path = files::journal_path(&dir, newest);
            open_current(
                &path,
                newest,
                size,
                &mut next_index,
                &mut report,
                &mut replay,
            )?
        };
        let journal = Self {
            dir,
            map,
            file_no: newest,
            offset,
            next_index,
            rollovers: 0,
            roll_waited: false,
            keeper: Keeper::start(start)?,
        };
        Ok((journal, report))
    }

    /// Reads the journal in `dir` without changing anything (for `keel journal dump`): the
    /// newest readable checkpoint's records, then every record of the journal files after it,
    /// each handed to `each` with where it came from. A torn tail in the newest file is
    /// reported (`torn_tail_bytes`), not repaired; corruption is an error naming the file
    /// and offset.
    pub fn read(
        dir: &Path,
        mut each: impl FnMut(RecordSource, &JournalRecord),
    ) -> Result<OpenReport, JournalError> {
        let listing = files::list(dir)?;
        let mut report = OpenReport::default();
        let mut snapshot = Vec::new();
        let (checkpoint, mut next_index) =
            newest_checkpoint(dir, &listing.checkpoints, &mut report, |r| {
                snapshot.push(*r)
            });
        if let Some(c) = checkpoint {
            for r in &snapshot {
                each(RecordSource::Checkpoint(c), r);
            }
        }
        let first = checkpoint.map_or(1, |c| c + 1);
        let mut to_read = Vec::new();
        for &n in listing.journals.iter().filter(|&&n| n >= first) {
            let path = files::journal_path(dir, n);
            if files::shape(&path, n)? == Shape::Data {
                to_read.push(n);
            }
        }
        let last = to_read.last().copied();
        for n in to_read {
            let path = files::journal_path(dir, n);
            let map = files::open_completed(&path)?;
            check_first(&path, &map, n, next_index)?;
            let mut index = next_index;
            let end = files::scan(
                &path,
                &map,
                Some(n) == last,
                &mut next_index,
                &mut report,
                &mut |r| {
                    each(RecordSource::File { file: n, index }, r);
                    index += 1;
                },
            )?;
            report.files += 1;
            if Some(n) == last {
                report.torn_tail_bytes = end.torn_bytes as u64;
            }
        }
        Ok(report)
    }

    /// Appends one record; returns its index. Rolls over to the prepared next file when this
    /// one is full; fails (nothing written) when there is none: the disk is full, or the
    /// file is still being prepared after a bounded wait.
    pub fn append(&mut self, record: &JournalRecord) -> Result<u64, JournalError> {
        if self.offset + RECORD_LEN > self.map.len() {
            self.roll()?;
        }
        // Records sit back to back after the file's header record: a reader finds record n at
        // n × RECORD_LEN, and a torn tail is at most one record.
        debug_assert!(
            self.offset % RECORD_LEN == 0 && self.offset >= RECORD_LEN,
            "journal offset {} is not a record boundary past the header",
            self.offset
        );
        debug_assert!(
            self.offset + RECORD_LEN <= self.map.len(),
            "a roll makes room"
        );
        let index = self.next_index;
        let slot = &mut self.map[self.offset..self.offset + RECORD_LEN];
        encode(record, index, slot);
        self.offset += RECORD_LEN;
        self.next_index += 1;
        Ok(index)
    }

    /// Forces every appended record of the current file to the disk (msync): survives a lost
    /// machine, not only a killed process. (Completed files are synced by the keeper.) Costs a
    /// system call and a disk write; call it at the pace you choose.
    pub fn sync(&self) -> Result<(), JournalError> {
        self.map.flush().map_err(files::io(&self.path()))
    }

    /// Index the next record will get.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Files started since open.
    pub fn rollovers(&self) -> u64 {
        self.rollovers
    }

    /// The file being appended to.
    pub fn path(&self) -> PathBuf {
        files::journal_path(&self.dir, self.file_no)
    }

    /// A swap to the spare file the keeper prepared: no file I/O, no allocation.
    fn roll(&mut self) -> Result<(), Unavailable> {
        let next = self.file_no + 1;
        let map = self.keeper.take_spare(next, &mut self.roll_waited)?;
        let done = std::mem::replace(&mut self.map, map);
        self.keeper.retire(self.file_no, done);
        self.file_no = next;
        self.offset = RECORD_LEN;
        self.rollovers += 1;
        self.roll_waited = false;
        Ok(())
    }
}

/// Removes leftover temporary files and trailing journal files without records; returns the
/// remaining journal file numbers, ascending.
fn tidy(dir: &Path, report: &mut OpenReport) -> Result<files::Listing, JournalError> {
    let mut listing = files::list(dir)?;
    for leftover in &listing.leftovers {
        crate::warn_line!(
            "keel: journal: removing {} (a creation cut short)",
            leftover.display()
        );
        std::fs::remove_file(leftover).map_err(files::io(leftover))?;
        report.files_removed += 1;
    }
    while let Some(&n) = listing.journals.last() {
        let path = files::journal_path(dir, n);
        match files::shape(&path, n)? {
            Shape::Data => break,
            // A prepared spare, or a file a crash left before its first record: nothing lost.
            Shape::Empty => {}
            Shape::Partial => crate::warn_line!(
                "keel: journal: removing {}: no valid header and no records (a creation cut \
                 short)",
                path.display()
            ),
        }
        std::fs::remove_file(&path).map_err(files::io(&path))?;
        report.files_removed += 1;
        listing.journals.pop();
    }
    Ok(listing)
}

/// The journal files to replay after `checkpoint` (from file 1 without one), checked
/// contiguous; refuses when checkpoints exist, none is readable and file 1 is gone.
fn files_after(
    dir: &Path,
    listing: &files::Listing,
    checkpoint: Option<u64>,
) -> Result<Vec<u64>, JournalError> {
    let first = checkpoint.map_or(1, |c| c + 1);
    let to_read: Vec<u64> = listing
        .journals
        .iter()
        .copied()
        .filter(|&n| n >= first)
        .collect();
    match checkpoint {
        Some(c) => drop_stale_checkpoints(dir, &listing.checkpoints, c),
        // Only a journal from file 1 can rebuild the state: starting empty would issue ids
        // and wire references again.
        None if !listing.checkpoints.is_empty() && to_read.first() != Some(&1) => {
            return Err(JournalError::BadHeader {
                path: files::checkpoint_path(dir, listing.checkpoints[0]),
                what: "no checkpoint is readable and journal file 1 is gone: the state cannot \
                       be rebuilt"
                    .into(),
            });
        }
        None => {}
    }
    for (i, &n) in to_read.iter().enumerate() {
        let expected = first + i as u64;
        if n != expected {
            return Err(JournalError::BadHeader {
                path: files::journal_path(dir, expected),
                what: format!("file {expected} is missing"),
            });
        }
    }
    Ok(to_read)
}

/// Opens the newest file for appending: replays its good records and clears a torn tail
/// (only the torn bytes: the rest of the file is reserved and reads as zeros), so that a later
/// crash cannot revive them. Returns the mapping and the offset to append at.
fn open_current(
    path: &Path,
    n: u64,
    size: u64,
    next_index: &mut u64,
    report: &mut OpenReport,
    replay: &mut impl FnMut(&JournalRecord),
) -> Result<(MmapMut, usize), JournalError> {
    let mut map = files::open_newest(path, size)?;
    check_first(path, &map, n, *next_index)?;
    let end = files::scan(path, &map, true, next_index, report, replay)?;
    report.files += 1;
    map[end.offset..end.offset + end.torn_bytes].fill(0);
    report.torn_tail_bytes = end.torn_bytes as u64;
    Ok((map, end.offset))
}

/// Removes the checkpoints older than the one before `used` (they are never read again;
/// the one before is kept as the fallback should `used` be damaged later).
fn drop_stale_checkpoints(dir: &Path, checkpoints: &[u64], used: u64) {
    let Some(i) = checkpoints.iter().position(|&c| c == used) else {
        return;
    };
    for &c in &checkpoints[..i.saturating_sub(1)] {
        let _ = std::fs::remove_file(files::checkpoint_path(dir, c));
    }
}

/// Replays the newest readable checkpoint; returns its number and the index after it (1 and
/// none when there is no checkpoint). An unreadable checkpoint is reported and an older one
/// tried: replaying from further back is slower, never wrong.
fn newest_checkpoint(
    dir: &Path,
    checkpoints: &[u64],
    report: &mut OpenReport,
    mut replay: impl FnMut(&JournalRecord),
) -> (Option<u64>, u64) {
    for &c in checkpoints.iter().rev() {
        match files::read_checkpoint(dir, c) {
            Ok((records, next_index)) => {
                records.iter().for_each(&mut replay);
                report.checkpoint = c;
                report.checkpoint_records = records.len() as u64;
                report.records += records.len() as u64;
                return (Some(c), next_index);
            }
            Err(e) => crate::warn_line!("keel: journal: checkpoint {c} not used: {e}"),
        }
    }
    (None, 1)
}

/// Checks file `n`'s header and that its first record index (when the header names one) is
/// the one expected.
fn check_first(path: &Path, map: &[u8], n: u64, expected: u64) -> Result<(), JournalError> {
    let first = files::check_journal_header(path, &map[..RECORD_LEN], n)?;
    if first != 0 && first != expected {
        return Err(JournalError::BadHeader {
            path: path.to_path_buf(),
            what: format!(
                "first record index {first}, expected {expected} (records missing between files)"
            ),
        });
    }
    Ok(())
}

const KIND_INTENT: u8 = 1;
const KIND_ACCEPTED: u8 = 2;
const KIND_FILL: u8 = 3;
const KIND_CLOSED: u8 = 4;
const KIND_SESSION_SEQ: u8 = 5;
const KIND_ID_HIGH_WATER: u8 = 6;
const KIND_OPEN_ORDER: u8 = 7;
const KIND_WIRE_REF_FLOOR: u8 = 8;
/// Before the venue-protocol seam: OUCH's venue session name (read, never written).
const KIND_LEGACY_OUCH_SESSION: u8 = 9;
const KIND_POSITION: u8 = 10;
const KIND_PROTOCOL_STATE: u8 = 11;
/// The tag OUCH's state carries (`session::ouch::OuchClient::STATE_TAG`, which a test pins to
/// this): what a legacy kind-9 record is read as.
pub const LEGACY_OUCH_STATE_TAG: u8 = 1;

fn encode_order(o: &NewOrder, wire_ref: u32, p: &mut [u8]) {
    p[20..24].copy_from_slice(&wire_ref.to_le_bytes());
    p[0..8].copy_from_slice(&o.id.0.to_le_bytes());
    p[8..10].copy_from_slice(&o.venue.0.to_le_bytes());
    p[10..12].copy_from_slice(&o.symbol.0.to_le_bytes());
    p[12] = match o.side {
        Side::Buy => 1,
        Side::Sell => 2,
    };
    p[13] = match o.tif {
        TimeInForce::Day => 1,
        TimeInForce::ImmediateOrCancel => 2,
    };
    // A byte that was always zero: journals written before the flag read as not reduce-only.
    p[15] = u8::from(o.reduce_only);
    p[16..20].copy_from_slice(&o.qty.to_le_bytes());
    p[24..32].copy_from_slice(&o.price.0.to_le_bytes());
}

fn encode(record: &JournalRecord, index: u64, slot: &mut [u8]) {
    slot.fill(0);
    let p = &mut slot[16..];
    let kind = match *record {
        JournalRecord::Intent { order, wire_ref } => {
            encode_order(&order, wire_ref, p);
            KIND_INTENT
        }
        JournalRecord::Accepted { id, venue_seq } => {
            p[0..8].copy_from_slice(&id.0.to_le_bytes());
            p[40..48].copy_from_slice(&venue_seq.to_le_bytes());
            KIND_ACCEPTED
        }
        JournalRecord::Fill {
            id,
            qty,
            price,
            venue_seq,
        } => {
            p[0..8].copy_from_slice(&id.0.to_le_bytes());
            p[40..48].copy_from_slice(&venue_seq.to_le_bytes());
            p[8..12].copy_from_slice(&qty.to_le_bytes());
            p[16..24].copy_from_slice(&price.0.to_le_bytes());
            KIND_FILL
        }
        JournalRecord::Closed { id, venue_seq } => {
            p[0..8].copy_from_slice(&id.0.to_le_bytes());
            p[40..48].copy_from_slice(&venue_seq.to_le_bytes());
            KIND_CLOSED
        }
        JournalRecord::SessionSeq {
            venue,
            applied_through,
        } => {
            p[0..2].copy_from_slice(&venue.0.to_le_bytes());
            p[8..16].copy_from_slice(&applied_through.to_le_bytes());
            KIND_SESSION_SEQ
        }
        JournalRecord::IdHighWater {
            strategy,
            high_water_mark,
        } => {
            p[0..2].copy_from_slice(&strategy.0.to_le_bytes());
            p[8..16].copy_from_slice(&high_water_mark.to_le_bytes());
            KIND_ID_HIGH_WATER
        }
        JournalRecord::OpenOrder {
            order,
            wire_ref,
            accepted,
            filled,
        } => {
            encode_order(&order, wire_ref, p);
            p[14] = u8::from(accepted);
            p[32..36].copy_from_slice(&filled.to_le_bytes());
            KIND_OPEN_ORDER
        }
        JournalRecord::WireRefFloor {
            venue,
            next_wire_ref,
        } => {
            p[0..2].copy_from_slice(&venue.0.to_le_bytes());
            p[8..12].copy_from_slice(&next_wire_ref.to_le_bytes());
            KIND_WIRE_REF_FLOOR
        }
        JournalRecord::ProtocolState { venue, state } => {
            p[0..2].copy_from_slice(&venue.0.to_le_bytes());
            p[2] = state.protocol;
            p[3] = state.version;
            p[4] = state.bytes().len() as u8;
            p[8..8 + state.bytes().len()].copy_from_slice(state.bytes());
            KIND_PROTOCOL_STATE
        }
        JournalRecord::Position {
            venue,
            symbol,
            position,
        } => {
            p[0..2].copy_from_slice(&venue.0.to_le_bytes());
            p[2..4].copy_from_slice(&symbol.0.to_le_bytes());
            p[8..16].copy_from_slice(&position.bought.to_le_bytes());
            p[16..24].copy_from_slice(&position.sold.to_le_bytes());
            KIND_POSITION
        }
    };
    slot[4] = kind;
    slot[8..16].copy_from_slice(&index.to_le_bytes());
    let crc = crc32fast::hash(&slot[4..]);
    slot[0..4].copy_from_slice(&crc.to_le_bytes());
}

fn decode(slot: &[u8]) -> Result<JournalRecord, &'static str> {
    let p = &slot[16..];
    let u16_at = |i: usize| u16::from_le_bytes(p[i..i + 2].try_into().expect("2"));
    let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4"));
    let u64_at = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8"));
    let id = ClientOrderId(u64_at(0));
    let order = || -> Result<NewOrder, &'static str> {
        Ok(NewOrder {
            id,
            venue: VenueId(u16_at(8)),
            symbol: SymbolId(u16_at(10)),
            side: match p[12] {
                1 => Side::Buy,
                2 => Side::Sell,
                _ => return Err("bad side"),
            },
            tif: match p[13] {
                1 => TimeInForce::Day,
                2 => TimeInForce::ImmediateOrCancel,
                _ => return Err("bad time in force"),
            },
            qty: u32_at(16),
            price: Price(u64_at(24) as i64),
            reduce_only: match p[15] {
                0 => false,
                1 => true,
                _ => return Err("bad reduce-only flag"),
            },
        })
    };
    Ok(match slot[4] {
        KIND_INTENT => JournalRecord::Intent {
            wire_ref: u32_at(20),
            order: order()?,
        },
        KIND_OPEN_ORDER => JournalRecord::OpenOrder {
            order: order()?,
            wire_ref: u32_at(20),
            accepted: match p[14] {
                0 => false,
                1 => true,
                _ => return Err("bad accepted flag"),
            },
            filled: u32_at(32),
        },
        KIND_WIRE_REF_FLOOR => JournalRecord::WireRefFloor {
            venue: VenueId(u16_at(0)),
            next_wire_ref: u32_at(8),
        },
        KIND_PROTOCOL_STATE => JournalRecord::ProtocolState {
            venue: VenueId(u16_at(0)),
            state: ProtocolState::new(
                p[2],
                p[3],
                p.get(8..8 + usize::from(p[4]))
                    .ok_or("bad protocol state length")?,
            )
            .ok_or("bad protocol state length")?,
        },
        KIND_LEGACY_OUCH_SESSION => JournalRecord::ProtocolState {
            venue: VenueId(u16_at(0)),
            state: ProtocolState::new(LEGACY_OUCH_STATE_TAG, 1, &p[8..18]).expect("10 bytes fit"),
        },
        KIND_POSITION => JournalRecord::Position {
            venue: VenueId(u16_at(0)),
            symbol: SymbolId(u16_at(2)),
            position: Position {
                bought: u64_at(8),
                sold: u64_at(16),
            },
        },
        KIND_ACCEPTED => JournalRecord::Accepted {
            id,
            venue_seq: u64_at(40),
        },
        KIND_FILL => JournalRecord::Fill {
            id,
            qty: u32_at(8),
            price: Price(u64_at(16) as i64),
            venue_seq: u64_at(40),
        },
        KIND_CLOSED => JournalRecord::Closed {
            id,
            venue_seq: u64_at(40),
        },
        KIND_SESSION_SEQ => JournalRecord::SessionSeq {
            venue: VenueId(u16_at(0)),
            applied_through: u64_at(8),
        },
        KIND_ID_HIGH_WATER => JournalRecord::IdHighWater {
            strategy: StrategyId(u16_at(0)),
            high_water_mark: u64_at(8),
        },
        _ => return Err("unknown record kind"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::PROTOCOL_STATE_MAX;
    use proptest::prelude::*;

    // Goal: a journal written by one version of keel is read by the next: every record kind
    // has the number docs/architecture.md gives (renumbering one fails here).
    #[test]
    fn record_kinds_are_pinned_to_the_docs() {
        let doc = include_str!("../../../../docs/architecture.md");
        let line = doc
            .lines()
            .find(|l| l.starts_with("| 4 | kind: "))
            .expect("docs/architecture.md lists the journal record kinds");
        let o = order(1, 5);
        let id = o.id;
        let records = [
            (
                JournalRecord::Intent {
                    order: o,
                    wire_ref: 1,
                },
                1,
                "intent",
            ),
            (JournalRecord::Accepted { id, venue_seq: 1 }, 2, "accepted"),
            (
                JournalRecord::Fill {
                    id,
                    qty: 1,
                    price: Price(1),
                    venue_seq: 1,
                },
                3,
                "fill",
            ),
            (JournalRecord::Closed { id, venue_seq: 1 }, 4, "closed"),
            (
                JournalRecord::SessionSeq {
                    venue: VenueId(0),
                    applied_through: 1,
                },
                5,
                "session sequence",
            ),
            (
                JournalRecord::IdHighWater {
                    strategy: StrategyId(0),
                    high_water_mark: 1,
                },
                6,
                "id high-water",
            ),
            (
                JournalRecord::OpenOrder {
                    order: o,
                    wire_ref: 1,
                    accepted: true,
                    filled: 0,
                },
                7,
                "open order",
            ),
            (
                JournalRecord::ProtocolState {
                    venue: VenueId(0),
                    state: ProtocolState::new(1, 1, b"DAY0000001").unwrap(),
                },
                11,
                "protocol state",
            ),
            (
                JournalRecord::WireRefFloor {
                    venue: VenueId(0),
                    next_wire_ref: 2,
                },
                8,
                "wire-reference floor",
            ),
            (
                JournalRecord::Position {
                    venue: VenueId(0),
                    symbol: SymbolId(0),
                    position: Position { bought: 1, sold: 0 },
                },
                10,
                "position",
            ),
        ];
        for (record, kind, name) in records {
            let mut slot = [0u8; RECORD_LEN];
            encode(&record, 1, &mut slot);
            assert_eq!(slot[4], kind, "{name}");
            assert!(
                line.contains(&format!("{kind} {name}")),
                "`{kind} {name}` in {line}"
            );
        }
    }

    // Goal: a journal written before the venue-protocol seam still reads: its venue-session
    // record (kind 9) comes back as OUCH's protocol state, version 1, with the same name; and a
    // protocol-state record that claims more bytes than a record holds is refused, never read
    // past its end.
    #[test]
    fn a_journal_from_before_the_seam_reads_its_venue_session_as_ouch_state() {
        let mut slot = [0u8; RECORD_LEN];
        slot[4] = KIND_LEGACY_OUCH_SESSION;
        slot[16..18].copy_from_slice(&3u16.to_le_bytes());
        slot[24..34].copy_from_slice(b"DAY0000007");
        assert_eq!(
            decode(&slot),
            Ok(JournalRecord::ProtocolState {
                venue: VenueId(3),
                state: ProtocolState::new(LEGACY_OUCH_STATE_TAG, 1, b"DAY0000007").unwrap(),
            })
        );
        let mut slot = [0u8; RECORD_LEN];
        encode(
            &JournalRecord::ProtocolState {
                venue: VenueId(0),
                state: ProtocolState::new(1, 1, &[7; PROTOCOL_STATE_MAX]).unwrap(),
            },
            1,
            &mut slot,
        );
        slot[16 + 4] = PROTOCOL_STATE_MAX as u8 + 1;
        assert_eq!(decode(&slot), Err("bad protocol state length"));
        slot[16 + 4] = u8::MAX;
        assert_eq!(decode(&slot), Err("bad protocol state length"));
    }

    // Goal: a restart rebuilds keel's position per venue and symbol from the journal — the
    // last position record, plus the fills after it, each on its order's side — and a fill
    // recorded for an order already complete (a double fill) or never sent counts nowhere.
    #[test]
    fn positions_are_rebuilt_from_fills_and_position_records() {
        let buy = NewOrder {
            side: Side::Buy,
            venue: VenueId(0),
            ..order(2, 10)
        };
        let sell = NewOrder {
            side: Side::Sell,
            venue: VenueId(0),
            ..order(4, 5)
        };
        let fill = |o: &NewOrder, qty, venue_seq| JournalRecord::Fill {
            id: o.id,
            qty,
            price: Price(7),
            venue_seq,
        };
        let key = (VenueId(0), SymbolId(4));
        let mut r = Recovery::default();
        let records = [
            JournalRecord::Intent {
                order: buy,
                wire_ref: 1,
            },
            JournalRecord::Intent {
                order: sell,
                wire_ref: 2,
            },
            fill(&buy, 6, 1),
            fill(&sell, 5, 2),
            fill(&buy, 4, 3),
            // The same last fill again: the order is complete, so it is an orphan.
            fill(&buy, 4, 3),
            fill(&order(9, 1), 1, 4),
        ];
        records.iter().for_each(|rec| r.apply(rec));
        assert_eq!(
            r.positions[&key],
            Position {
                bought: 10,
                sold: 5
            }
        );
        assert_eq!(r.orphans, 2);
        // An adopted figure replaces what the fills summed; later fills add to it.
        let adopted = Position {
            bought: 40,
            sold: 2,
        };
        r.apply(&JournalRecord::Position {
            venue: key.0,
            symbol: key.1,
            position: adopted,
        });
        let third = NewOrder {
            side: Side::Sell,
            venue: VenueId(0),
            ..order(6, 3)
        };
        r.apply(&JournalRecord::Intent {
            order: third,
            wire_ref: 3,
        });
        r.apply(&fill(&third, 3, 5));
        assert_eq!(
            r.positions[&key],
            Position {
                bought: 40,
                sold: 5
            }
        );
        // A checkpoint carries it.
        let mut restarted = Recovery::default();
        r.snapshot().iter().for_each(|rec| restarted.apply(rec));
        assert_eq!(restarted.positions, r.positions);
    }

    fn order(seq: u64, qty: Qty) -> NewOrder {
        NewOrder {
            id: ClientOrderId::new(StrategyId((seq % 3) as u16), seq).unwrap(),
            venue: VenueId((seq % 2) as u16),
            symbol: SymbolId(4),
            side: if seq % 2 == 0 { Side::Buy } else { Side::Sell },
            price: Price(-5 + seq as i64),
            qty,
            tif: TimeInForce::ImmediateOrCancel,
            // Both values of the flag's byte (and beside `accepted`'s, in open orders).
            reduce_only: seq % 3 == 1,
        }
    }

    fn any_record() -> impl Strategy<Value = JournalRecord> {
        let seq = 1u64..12;
        prop_oneof![
            (seq.clone(), 1u32..20, any::<u32>()).prop_map(|(s, q, w)| JournalRecord::Intent {
                order: order(s, q),
                wire_ref: w,
            }),
            (seq.clone(), any::<u64>()).prop_map(|(s, v)| JournalRecord::Accepted {
                id: order(s, 1).id,
                venue_seq: v,
            }),
            (seq.clone(), 0u32..8, any::<u64>()).prop_map(|(s, q, v)| JournalRecord::Fill {
                id: order(s, 1).id,
                qty: q,
                price: Price(7),
                venue_seq: v,
            }),
            (seq.clone(), any::<u64>()).prop_map(|(s, v)| JournalRecord::Closed {
                id: order(s, 1).id,
                venue_seq: v,
            }),
            (0u16..3, any::<u64>()).prop_map(|(v, a)| JournalRecord::SessionSeq {
                venue: VenueId(v),
                applied_through: a,
            }),
            (0u16..3, any::<u64>()).prop_map(|(s, h)| JournalRecord::IdHighWater {
                strategy: StrategyId(s),
                high_water_mark: h,
            }),
            (seq.clone(), 1u32..20, any::<u32>(), any::<bool>(), 0u32..25).prop_map(
                |(s, q, w, accepted, filled)| JournalRecord::OpenOrder {
                    order: order(s, q),
                    wire_ref: w,
                    accepted,
                    filled,
                }
            ),
            (
                0u16..3,
                any::<u8>(),
                any::<u8>(),
                proptest::collection::vec(any::<u8>(), 0..=PROTOCOL_STATE_MAX)
            )
                .prop_map(|(v, tag, version, bytes)| {
                    JournalRecord::ProtocolState {
                        venue: VenueId(v),
                        state: ProtocolState::new(tag, version, &bytes).unwrap(),
                    }
                }),
            (0u16..3, any::<u32>()).prop_map(|(v, w)| JournalRecord::WireRefFloor {
                venue: VenueId(v),
                next_wire_ref: w,
            }),
            (0u16..3, 0u16..6, any::<u64>(), any::<u64>()).prop_map(|(v, s, b, d)| {
                JournalRecord::Position {
                    venue: VenueId(v),
                    symbol: SymbolId(s),
                    position: Position { bought: b, sold: d },
                }
            }),
        ]
    }

    proptest! {
        // Goal: every record kind survives encoding with its index and checksum.
        #[test]
        fn every_record_round_trips(record in any_record(), index in 1u64..u64::MAX) {
            let mut slot = [0u8; RECORD_LEN];
            encode(&record, index, &mut slot);
            prop_assert_eq!(files::check_slot(&slot, index), files::Slot::Good);
            prop_assert_eq!(decode(&slot), Ok(record));
        }

        // Goal: any 64 bytes from a disk decode to a record or a typed error, never a panic,
        // and a slot's condition is always one of the four.
        #[test]
        fn hostile_slots_never_panic(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let _ = decode(&bytes);
            let _ = files::check_slot(&bytes, 1);
        }

        // Goal: a checkpoint (the snapshot of a recovery) replayed into an empty recovery
        // rebuilds the same state, and replaying the records after it on both gives the same
        // state again: restarting from a checkpoint equals a full replay.
        #[test]
        fn a_snapshot_rebuilds_the_state(
            before in proptest::collection::vec(any_record(), 0..60),
            after in proptest::collection::vec(any_record(), 0..30),
        ) {
            let mut full = Recovery::default();
            before.iter().for_each(|r| full.apply(r));
            let mut restarted = Recovery::default();
            full.snapshot().iter().for_each(|r| restarted.apply(r));
            restarted.orphans = full.orphans;
            prop_assert_eq!(&restarted, &full);
            after.iter().for_each(|r| {
                full.apply(r);
                restarted.apply(r);
            });
            restarted.orphans = full.orphans;
            prop_assert_eq!(&restarted, &full);
        }
    }
}
