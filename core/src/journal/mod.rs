//! The order journal: an append-only, memory-mapped file of fixed-size, checksummed records.
//!
//! The engine writes an order's intent before the order leaves, then its acknowledgement, fills
//! and close, the session's last applied sequence number and the ClientOrderId high-water
//! marks. A record is 64 bytes: CRC-32 of the rest, kind, a global record index, payload. On
//! open, every file is checked and its records replayed in order; a torn tail (the last
//! records of the newest file, half written when the process died) is detected by checksum and
//! ignored, and appending resumes there. A bad record *followed by good ones* is corruption,
//! not a torn tail, and is refused with the file and offset. Files roll over at a size limit.
//!
//! Appending copies 64 bytes into the mapping: no allocation, no system call. The page cache
//! makes every appended record survive a killed process; [`Journal::sync`] (msync) makes them
//! survive a lost machine.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use crate::order::{
    ClientOrderId, NewOrder, Price, Qty, Side, StrategyId, SymbolId, TimeInForce, VenueId,
};

mod recovery;
pub use recovery::{RecoveredOrder, Recovery};

/// Bytes per record (and per file header).
pub const RECORD_LEN: usize = 64;
const MAGIC: &[u8; 8] = b"KEELJRNL";
const VERSION: u32 = 2;

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
    /// A record fails its checksum or is out of sequence, and good records follow it.
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
}

/// Journal settings.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// Directory of the journal files.
    pub dir: PathBuf,
    /// Size of each file (header included); the journal rolls over to a new file when full.
    pub file_bytes: u64,
}

/// What opening found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenReport {
    /// Files read.
    pub files: u64,
    /// Records replayed.
    pub records: u64,
    /// Bytes of a torn tail ignored (0 when the journal ended cleanly).
    pub torn_tail_bytes: u64,
}

/// An open journal, positioned at its end.
#[derive(Debug)]
pub struct Journal {
    config: JournalConfig,
    map: MmapMut,
    path: PathBuf,
    file_no: u64,
    offset: usize,
    next_index: u64,
    rollovers: u64,
}

impl Journal {
    /// Opens (or creates) the journal in `config.dir`, replays every record to `replay` in
    /// order, and positions the journal after the last good record.
    pub fn open(
        config: JournalConfig,
        mut replay: impl FnMut(&JournalRecord),
    ) -> Result<(Self, OpenReport), JournalError> {
        let size = config.file_bytes;
        if size % RECORD_LEN as u64 != 0 || size < 3 * RECORD_LEN as u64 {
            return Err(JournalError::BadFileSize(size));
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        std::fs::create_dir_all(&config.dir).map_err(io(&config.dir))?;
        let mut numbers = Vec::new();
        for entry in std::fs::read_dir(&config.dir).map_err(io(&config.dir))? {
            let entry = entry.map_err(io(&config.dir))?;
            if let Some(n) = file_number(&entry.file_name().to_string_lossy()) {
                numbers.push(n);
            }
        }
        numbers.sort_unstable();
        let mut report = OpenReport::default();
        let mut next_index = 1;
        let mut last: Option<(u64, PathBuf, MmapMut, usize)> = None;
        for (i, &n) in numbers.iter().enumerate() {
            let path = file_path(&config.dir, n);
            if i > 0 && n != numbers[i - 1] + 1 {
                return Err(JournalError::BadHeader {
                    path,
                    what: format!("file {} is missing", numbers[i - 1] + 1),
                });
            }
            let map = map_file(&path, None)?;
            check_header(&path, &map, n, next_index)?;
            let newest = i + 1 == numbers.len();
            let end = replay_file(
                &path,
                &map,
                newest,
                &mut next_index,
                &mut report,
                &mut replay,
            )?;
            report.files += 1;
            last = Some((n, path, map, end));
        }
        let (file_no, path, map, offset) = match last {
            Some(found) => found,
            None => {
                let path = file_path(&config.dir, 1);
                let map = create_file(&path, size, 1, next_index)?;
                (1, path, map, RECORD_LEN)
            }
        };
        let mut journal = Self {
            config,
            map,
            path,
            file_no,
            offset,
            next_index,
            rollovers: 0,
        };
        // Clear a torn tail so that a later crash cannot revive its bytes. Only the torn
        // bytes: zeroing the whole (sparse) rest of the file would touch every page of it.
        let torn = usize::try_from(report.torn_tail_bytes).unwrap_or(usize::MAX);
        let end = offset.saturating_add(torn).min(journal.map.len());
        journal.map[offset..end].fill(0);
        Ok((journal, report))
    }

    /// Appends one record; returns its index. Rolls over to a new file when this one is full.
    pub fn append(&mut self, record: &JournalRecord) -> Result<u64, JournalError> {
        if self.offset + RECORD_LEN > self.map.len() {
            self.roll()?;
        }
        let index = self.next_index;
        let slot = &mut self.map[self.offset..self.offset + RECORD_LEN];
        encode(record, index, slot);
        self.offset += RECORD_LEN;
        self.next_index += 1;
        Ok(index)
    }

    /// Forces every appended record to the disk (msync): survives a lost machine, not only a
    /// killed process. Costs a system call and a disk write; call it at the pace you choose.
    pub fn sync(&self) -> Result<(), JournalError> {
        self.map.flush().map_err(|source| JournalError::Io {
            path: self.path.clone(),
            source,
        })
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
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn roll(&mut self) -> Result<(), JournalError> {
        self.map.flush_async().map_err(|source| JournalError::Io {
            path: self.path.clone(),
            source,
        })?;
        let file_no = self.file_no + 1;
        let path = file_path(&self.config.dir, file_no);
        self.map = create_file(&path, self.config.file_bytes, file_no, self.next_index)?;
        self.path = path;
        self.file_no = file_no;
        self.offset = RECORD_LEN;
        self.rollovers += 1;
        Ok(())
    }
}

fn file_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("journal-{n:08}.kj"))
}

fn file_number(name: &str) -> Option<u64> {
    name.strip_prefix("journal-")?
        .strip_suffix(".kj")?
        .parse()
        .ok()
}

fn map_file(path: &Path, create_len: Option<u64>) -> Result<MmapMut, JournalError> {
    let io = |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file: File = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create_len.is_some())
        .truncate(false)
        .open(path)
        .map_err(io)?;
    if let Some(len) = create_len {
        file.set_len(len).map_err(io)?;
    }
    let len = file.metadata().map_err(io)?.len();
    if len < 2 * RECORD_LEN as u64 || len % RECORD_LEN as u64 != 0 {
        return Err(JournalError::BadHeader {
            path: path.to_path_buf(),
            what: format!("length {len} is not a whole number of 64-byte records"),
        });
    }
    // SAFETY: the journal directory belongs to one engine process (documented); nothing else
    // truncates or writes the file while it is mapped.
    #[allow(unsafe_code)]
    let map = unsafe { MmapMut::map_mut(&file) };
    map.map_err(io)
}

fn create_file(
    path: &Path,
    len: u64,
    file_no: u64,
    first_index: u64,
) -> Result<MmapMut, JournalError> {
    let mut map = map_file(path, Some(len))?;
    let h = &mut map[..RECORD_LEN];
    h.fill(0);
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&file_no.to_le_bytes());
    h[24..32].copy_from_slice(&first_index.to_le_bytes());
    let crc = crc32fast::hash(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    map.flush().map_err(|source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(map)
}

fn check_header(
    path: &Path,
    map: &[u8],
    file_no: u64,
    first_index: u64,
) -> Result<(), JournalError> {
    let bad = |what: String| JournalError::BadHeader {
        path: path.to_path_buf(),
        what,
    };
    let h = &map[..RECORD_LEN];
    if &h[0..8] != MAGIC {
        return Err(bad(format!("magic {:?}", &h[0..8])));
    }
    if crc32fast::hash(&h[..60]) != u32::from_le_bytes(h[60..64].try_into().expect("4")) {
        return Err(bad("header checksum mismatch".into()));
    }
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4"));
    if version != VERSION {
        return Err(bad(format!("version {version}, this keel reads {VERSION}")));
    }
    let record_len = u32::from_le_bytes(h[12..16].try_into().expect("4"));
    if record_len as usize != RECORD_LEN {
        return Err(bad(format!("record length {record_len}")));
    }
    let number = u64::from_le_bytes(h[16..24].try_into().expect("8"));
    if number != file_no {
        return Err(bad(format!(
            "file number {number} in a file named {file_no}"
        )));
    }
    let first = u64::from_le_bytes(h[24..32].try_into().expect("8"));
    if first != first_index {
        return Err(bad(format!(
            "first record index {first}, expected {first_index} (records missing between files)"
        )));
    }
    Ok(())
}

/// Replays one file's good records; returns the offset after the last. A bad record ends a
/// newest file's data if nothing good follows it (a torn tail); otherwise it is corruption.
fn replay_file(
    path: &Path,
    map: &[u8],
    newest: bool,
    next_index: &mut u64,
    report: &mut OpenReport,
    replay: &mut impl FnMut(&JournalRecord),
) -> Result<usize, JournalError> {
    let mut offset = RECORD_LEN;
    while offset + RECORD_LEN <= map.len() {
        let slot = &map[offset..offset + RECORD_LEN];
        if slot.iter().all(|&b| b == 0) && (!newest || rest_is_empty(map, offset)) {
            return Ok(offset);
        }
        match check_record(slot, *next_index) {
            Some(()) => {
                let record = decode(slot).map_err(|what| JournalError::BadRecord {
                    path: path.to_path_buf(),
                    offset: offset as u64,
                    what,
                })?;
                replay(&record);
                report.records += 1;
                *next_index += 1;
                offset += RECORD_LEN;
            }
            None => {
                let later_good = (offset + RECORD_LEN..map.len())
                    .step_by(RECORD_LEN)
                    .any(|o| check_record(&map[o..o + RECORD_LEN], 0).is_some());
                if newest && !later_good {
                    report.torn_tail_bytes = map[offset..]
                        .iter()
                        .rposition(|&b| b != 0)
                        .map_or(0, |last| last as u64 + 1);
                    return Ok(offset);
                }
                return Err(JournalError::Corrupt {
                    path: path.to_path_buf(),
                    offset: offset as u64,
                    expected: *next_index,
                });
            }
        }
    }
    Ok(offset)
}

fn rest_is_empty(map: &[u8], offset: usize) -> bool {
    map[offset..].iter().all(|&b| b == 0)
}

/// `Some` when the checksum holds and (unless `expected` is 0) the index is `expected`.
fn check_record(slot: &[u8], expected: u64) -> Option<()> {
    let crc = u32::from_le_bytes(slot[0..4].try_into().expect("4"));
    let index = u64::from_le_bytes(slot[8..16].try_into().expect("8"));
    let intact = index != 0 && crc32fast::hash(&slot[4..]) == crc;
    (intact && (expected == 0 || index == expected)).then_some(())
}

const KIND_INTENT: u8 = 1;
const KIND_ACCEPTED: u8 = 2;
const KIND_FILL: u8 = 3;
const KIND_CLOSED: u8 = 4;
const KIND_SESSION_SEQ: u8 = 5;
const KIND_ID_HIGH_WATER: u8 = 6;

fn encode(record: &JournalRecord, index: u64, slot: &mut [u8]) {
    slot.fill(0);
    let p = &mut slot[16..];
    let kind = match *record {
        JournalRecord::Intent { order: o, wire_ref } => {
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
            p[16..20].copy_from_slice(&o.qty.to_le_bytes());
            p[24..32].copy_from_slice(&o.price.0.to_le_bytes());
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
    Ok(match slot[4] {
        KIND_INTENT => JournalRecord::Intent {
            wire_ref: u32_at(20),
            order: NewOrder {
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
