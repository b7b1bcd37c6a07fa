//! The journal's files: names, creation (reserved on disk, header written, then renamed into
//! place), mapping, headers, the record scan, and checkpoint files.
//!
//! A journal file is never mapped before its blocks are reserved (`posix_fallocate`): a store
//! into a mapped page the file system cannot back is a SIGBUS, so a full disk must show up as
//! an error here, at reservation, and never as a signal at an append. A file appears under its
//! final name only complete (reserved, header written), so a crash can leave at most a `.tmp`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use super::{decode, JournalError, JournalRecord, OpenReport, RECORD_LEN};

const MAGIC: &[u8; 8] = b"KEELJRNL";
const CHECKPOINT_MAGIC: &[u8; 8] = b"KEELCKPT";
/// Version 3: the header's first record index may be 0 (the file was prepared before its first
/// index was known; its first record says it). Version 2 files are read too.
const VERSION: u32 = 3;
const VERSION_READ_MIN: u32 = 2;

/// How far past the end of the good records opening looks for intact records, to tell a torn
/// tail (nothing intact follows) from corruption (intact records follow). A torn write spans
/// one record; this bounds what opening reads of the empty rest of a file.
pub(super) const LOOKAHEAD_BYTES: usize = 64 << 10;

pub(super) fn journal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("journal-{n:08}.kj"))
}

pub(super) fn checkpoint_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("checkpoint-{n:08}.kjc"))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

fn number(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What a journal directory holds.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Journal file numbers, ascending.
    pub journals: Vec<u64>,
    /// Checkpoint numbers, ascending.
    pub checkpoints: Vec<u64>,
    /// Leftover temporary files (a crash during a creation).
    pub leftovers: Vec<PathBuf>,
}

pub(super) fn list(dir: &Path) -> Result<Listing, JournalError> {
    let mut listing = Listing::default();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(n) = number(&name, "journal-", ".kj") {
            listing.journals.push(n);
        } else if let Some(n) = number(&name, "checkpoint-", ".kjc") {
            listing.checkpoints.push(n);
        } else if (name.starts_with("journal-") || name.starts_with("checkpoint-"))
            && name.ends_with(".tmp")
        {
            listing.leftovers.push(entry.path());
        }
    }
    listing.journals.sort_unstable();
    listing.checkpoints.sort_unstable();
    Ok(listing)
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError {
    let path = path.to_path_buf();
    move |source| JournalError::Io { path, source }
}

/// Reserves `len` bytes of `file` on disk (real blocks, not a sparse length), growing it if
/// shorter. Returns the errno on failure (ENOSPC on a full file system).
pub(super) fn reserve(file: &File, len: u64) -> Result<(), i32> {
    let len = libc::off_t::try_from(len).map_err(|_| libc::EFBIG)?;
    // SAFETY: posix_fallocate reads no memory of ours; the descriptor is open for writing and
    // owned by `file`, which outlives the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

fn errno_error(path: &Path, errno: i32) -> JournalError {
    JournalError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from_raw_os_error(errno),
    }
}

fn header(magic: &[u8; 8], number: u64, word_a: u64, word_b: u64) -> [u8; RECORD_LEN] {
    let mut h = [0u8; RECORD_LEN];
    h[0..8].copy_from_slice(magic);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&number.to_le_bytes());
    h[24..32].copy_from_slice(&word_a.to_le_bytes());
    h[32..40].copy_from_slice(&word_b.to_le_bytes());
    let crc = crc32fast::hash(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Moves a complete temporary file to its final name, never over an existing file (a hard
/// link fails if the name is taken), and makes the name durable.
fn publish(dir: &Path, tmp: &Path, path: &Path) -> Result<(), JournalError> {
    let linked = std::fs::hard_link(tmp, path).map_err(io(path));
    let removed = std::fs::remove_file(tmp).map_err(io(tmp));
    linked?;
    removed?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Creates journal file `n` of `len` bytes: reserved on disk, header written, synced, then
/// renamed into place; returns it mapped (pages populated, so appends take no page fault).
pub(super) fn create_journal(dir: &Path, n: u64, len: u64) -> Result<MmapMut, JournalError> {
    let path = journal_path(dir, n);
    let tmp = tmp_path(&path);
    let made = (|| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io(&tmp))?;
        reserve(&file, len).map_err(|errno| errno_error(&tmp, errno))?;
        file.write_all_at(&header(MAGIC, n, 0, 0), 0)
            .map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        Ok(file)
    })();
    let file = match made {
        Ok(file) => file,
        Err(e) => {
            // Give the reservation back: a full disk must not stay full of our leftovers.
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    publish(dir, &tmp, &path)?;
    map_mut(&path, &file, true)
}

fn map_mut(path: &Path, file: &File, populate: bool) -> Result<MmapMut, JournalError> {
    let mut options = MmapOptions::new();
    if populate {
        options.populate();
    }
    // SAFETY: the journal directory belongs to one engine process (documented); nothing else
    // truncates or writes the file while it is mapped, and its blocks are reserved, so no
    // store into the mapping can fault for want of space.
    #[allow(unsafe_code)]
    let map = unsafe { options.map_mut(file) };
    map.map_err(io(path))
}

/// Opens the newest journal file for appending: reserves it to at least `len` (and to whole
/// records: a file truncated inside a record grows back, the cut record becoming a torn tail
/// that the scan finds) and maps it.
pub(super) fn open_newest(path: &Path, len: u64) -> Result<MmapMut, JournalError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io(path))?;
    let have = file.metadata().map_err(io(path))?.len();
    let whole = have.div_ceil(RECORD_LEN as u64) * RECORD_LEN as u64;
    reserve(&file, whole.max(len)).map_err(|errno| errno_error(path, errno))?;
    let map = map_mut(path, &file, false)?;
    // No read-around: the scan brings in the pages it reads, not megabytes of the empty rest
    // (a device's read-ahead can be 8 MiB); later appends fault one page at a time instead of
    // one large window at once. (Files the keeper prepares are populated up front.)
    map.advise(memmap2::Advice::Random).map_err(io(path))?;
    Ok(map)
}

/// Maps a completed journal file read-only, refusing a length that is not whole records.
pub(super) fn open_completed(path: &Path) -> Result<Mmap, JournalError> {
    let file = File::open(path).map_err(io(path))?;
    let len = file.metadata().map_err(io(path))?.len();
    if len < 2 * RECORD_LEN as u64 || len % RECORD_LEN as u64 != 0 {
        return Err(JournalError::BadHeader {
            path: path.to_path_buf(),
            what: format!("length {len} is not a whole number of 64-byte records"),
        });
    }
    // SAFETY: as in `map_mut`: nothing else writes or truncates a journal file; this one is
    // complete and only read.
    #[allow(unsafe_code)]
    let map = unsafe { Mmap::map(&file) };
    map.map_err(io(path))
}

/// What the start of a journal file shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// A valid header and at least one non-empty record slot.
    Data,
    /// A valid header and nothing after it: a prepared spare, or a file that a crash left
    /// before its first record.
    Empty,
    /// No valid header and nothing after it: a creation cut short (by an older keel, or by
    /// something other than keel), never read by anyone.
    Partial,
}

/// Classifies journal file `n` from its first two record slots (never more).
pub(super) fn shape(path: &Path, n: u64) -> Result<Shape, JournalError> {
    let file = File::open(path).map_err(io(path))?;
    let mut head = [0u8; 2 * RECORD_LEN];
    let mut got = 0;
    while got < head.len() {
        match file
            .read_at(&mut head[got..], got as u64)
            .map_err(io(path))?
        {
            0 => break,
            k => got += k,
        }
    }
    if got < RECORD_LEN {
        // Not even a whole header, so no record after it.
        return Ok(Shape::Partial);
    }
    let body_empty = head[RECORD_LEN..].iter().all(|&b| b == 0);
    match check_journal_header(path, &head[..RECORD_LEN], n) {
        Ok(_) if body_empty => Ok(Shape::Empty),
        Ok(_) => Ok(Shape::Data),
        Err(_) if body_empty => Ok(Shape::Partial),
        Err(e) => Err(e),
    }
}

fn check_common(
    path: &Path,
    h: &[u8],
    magic: &[u8; 8],
    number: u64,
) -> Result<(u64, u64), JournalError> {
    let bad = |what: String| JournalError::BadHeader {
        path: path.to_path_buf(),
        what,
    };
    if &h[0..8] != magic {
        return Err(bad(format!("magic {:?}", &h[0..8])));
    }
    if crc32fast::hash(&h[..60]) != u32_at(h, 60) {
        return Err(bad("header checksum mismatch".into()));
    }
    let version = u32_at(h, 8);
    if !(VERSION_READ_MIN..=VERSION).contains(&version) {
        return Err(bad(format!("version {version}, this keel reads {VERSION}")));
    }
    let record_len = u32_at(h, 12);
    if record_len as usize != RECORD_LEN {
        return Err(bad(format!("record length {record_len}")));
    }
    let found = u64_at(h, 16);
    if found != number {
        return Err(bad(format!("file number {found} in a file named {number}")));
    }
    Ok((u64_at(h, 24), u64_at(h, 32)))
}

/// Checks a journal file header; returns the first record index it names (0: not named).
pub(super) fn check_journal_header(path: &Path, h: &[u8], n: u64) -> Result<u64, JournalError> {
    check_common(path, h, MAGIC, n).map(|(first, _)| first)
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// One record slot's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Checksum good and the expected index.
    Good,
    /// Checksum good, another index: a record out of place (never a torn write).
    Misplaced(u64),
    /// Every byte zero: never written.
    Zero,
    /// Checksum bad: torn or damaged.
    Bad,
}

pub(super) fn check_slot(slot: &[u8], expected: u64) -> Slot {
    let index = u64_at(slot, 8);
    let intact = index != 0 && crc32fast::hash(&slot[4..]) == u32_at(slot, 0);
    match (intact, index == expected) {
        (true, true) => Slot::Good,
        (true, false) => Slot::Misplaced(index),
        (false, _) if slot.iter().all(|&b| b == 0) => Slot::Zero,
        (false, _) => Slot::Bad,
    }
}

/// How a file's scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ScanEnd {
    /// Offset after the last good record.
    pub offset: usize,
    /// Non-zero bytes found after it (a torn tail), 0 for a clean end.
    pub torn_bytes: usize,
}

/// Replays a file's good records from `offset`, in order, until the first slot that is not
/// good. That slot ends the data when nothing intact follows within [`LOOKAHEAD_BYTES`]: a
/// never-written slot is a clean end, a damaged one is a torn tail (allowed only in the newest
/// file, `tail_allowed`). An intact record after it is corruption, refused with its offset.
pub(super) fn scan(
    path: &Path,
    map: &[u8],
    tail_allowed: bool,
    next_index: &mut u64,
    report: &mut OpenReport,
    replay: &mut impl FnMut(&JournalRecord),
) -> Result<ScanEnd, JournalError> {
    let mut offset = RECORD_LEN;
    let whole = map.len() / RECORD_LEN * RECORD_LEN;
    while offset < whole {
        let slot = &map[offset..offset + RECORD_LEN];
        let corrupt = JournalError::Corrupt {
            path: path.to_path_buf(),
            offset: offset as u64,
            expected: *next_index,
        };
        match check_slot(slot, *next_index) {
            Slot::Good => {
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
            Slot::Misplaced(_) => return Err(corrupt),
            end @ (Slot::Zero | Slot::Bad) => {
                let window = &map[offset..(offset + LOOKAHEAD_BYTES).min(map.len())];
                let intact_follows = window[..window.len() / RECORD_LEN * RECORD_LEN]
                    .chunks_exact(RECORD_LEN)
                    .skip(1)
                    .any(|s| matches!(check_slot(s, 0), Slot::Misplaced(_)));
                let torn_bytes = window.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                if intact_follows || (end == Slot::Bad && !tail_allowed) {
                    return Err(corrupt);
                }
                return Ok(ScanEnd { offset, torn_bytes });
            }
        }
    }
    Ok(ScanEnd {
        offset,
        torn_bytes: 0,
    })
}

/// Writes checkpoint `n`: the state after every record of journal files up to `n`, as
/// `records`, the journal continuing at `next_index`. Complete or absent: written under a
/// temporary name, synced, renamed.
pub(super) fn write_checkpoint(
    dir: &Path,
    n: u64,
    next_index: u64,
    records: &[JournalRecord],
) -> Result<(), JournalError> {
    let path = checkpoint_path(dir, n);
    let tmp = tmp_path(&path);
    let mut bytes = vec![0u8; (records.len() + 1) * RECORD_LEN];
    bytes[..RECORD_LEN].copy_from_slice(&header(
        CHECKPOINT_MAGIC,
        n,
        next_index,
        records.len() as u64,
    ));
    for (i, (record, slot)) in records
        .iter()
        .zip(bytes[RECORD_LEN..].chunks_exact_mut(RECORD_LEN))
        .enumerate()
    {
        super::encode(record, i as u64 + 1, slot);
    }
    let written = (|| {
        let mut file = File::create(&tmp).map_err(io(&tmp))?;
        file.write_all(&bytes).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if path.exists() {
        // Written before by a run that stopped before recording it elsewhere: same content.
        std::fs::remove_file(&path).map_err(io(&path))?;
    }
    publish(dir, &tmp, &path)
}

/// Reads checkpoint `n`: its records and the index the journal continues at.
pub(super) fn read_checkpoint(
    dir: &Path,
    n: u64,
) -> Result<(Vec<JournalRecord>, u64), JournalError> {
    let path = checkpoint_path(dir, n);
    let file = File::open(&path).map_err(io(&path))?;
    let len = file.metadata().map_err(io(&path))?.len();
    let mut head = [0u8; RECORD_LEN];
    file.read_exact_at(&mut head, 0).map_err(io(&path))?;
    let (next_index, count) = check_common(&path, &head, CHECKPOINT_MAGIC, n)?;
    // The header's count is checked against the file's length before anything is read.
    let expected_len = count
        .checked_add(1)
        .and_then(|c| c.checked_mul(RECORD_LEN as u64));
    if expected_len != Some(len) {
        return Err(JournalError::BadHeader {
            path,
            what: format!("{count} records in {len} bytes"),
        });
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0).map_err(io(&path))?;
    let mut records = Vec::with_capacity(count as usize);
    for (i, slot) in bytes[RECORD_LEN..].chunks_exact(RECORD_LEN).enumerate() {
        let offset = ((i + 1) * RECORD_LEN) as u64;
        if check_slot(slot, i as u64 + 1) != Slot::Good {
            return Err(JournalError::Corrupt {
                path,
                offset,
                expected: i as u64 + 1,
            });
        }
        let record = decode(slot).map_err(|what| JournalError::BadRecord {
            path: path.clone(),
            offset,
            what,
        })?;
        records.push(record);
    }
    Ok((records, next_index))
}
