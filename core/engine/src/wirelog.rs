//! The wire log: every message to and from each venue, with its time, written by a side
//! thread — keel's counterpart of a FIX engine's message log, for the questions "what did we
//! send?" and "what did the venue say?" after the fact.
//!
//! A venue link hands each message's bytes to its [`WireTap`]: one bounded SPSC byte ring per
//! link, each record written and committed whole (a 16-byte header, then the bytes), never
//! blocking, never allocating; a record that does not fit is dropped and counted. The writer
//! thread ([`WireLogWriter`]) appends what the rings hold to `wire.log` in the configured
//! directory, rotating it to `wire.log.1` past `file_bytes_max`. `keel log dump` reads it back
//! as text ([`dump`]).
//!
//! File layout (little-endian): magic `KEELWIRE`, `u32` version (1), `u32` header length,
//! `u64` Unix ns at loop time 0, `u16` venue count, then per venue a `u8` length and its name;
//! then records: `u8` kind (1 in, 2 out, 3 dropped), `u8` 0, `u16` venue, `u32` length, `u64`
//! loop time in ns, then `length` bytes (for kind 3, a `u64` count of records dropped).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of a record's header.
pub const RECORD_HEADER_LEN: usize = 16;
const MAGIC: &[u8; 8] = b"KEELWIRE";
const VERSION: u32 = 1;

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the venue.
    In = 1,
    /// To the venue.
    Out = 2,
}

const KIND_DROPPED: u8 = 3;

/// The wire log's settings (`[wire_log]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireLogConfig {
    /// Directory of `wire.log` (created).
    pub dir: PathBuf,
    /// Bytes of each link's ring (a burst larger than this before the writer drains is
    /// dropped and counted).
    pub ring_bytes: u32,
    /// Rotate `wire.log` to `wire.log.1` (replacing it) past this size.
    pub file_bytes_max: u64,
}

impl Default for WireLogConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("wire"),
            ring_bytes: 4 << 20,
            file_bytes_max: 256 << 20,
        }
    }
}

/// A link's end: hands over each message.
#[derive(Debug)]
pub struct WireTap {
    ring: rtrb::Producer<u8>,
    venue: u16,
    dropped: Arc<AtomicU64>,
}

impl WireTap {
    /// Records one message; never blocks (no room: dropped and counted).
    #[inline]
    pub fn record(&mut self, now_ns: u64, direction: Direction, bytes: &[u8]) {
        let Ok(len) = u32::try_from(bytes.len()) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut header = [0u8; RECORD_HEADER_LEN];
        header[0] = direction as u8;
        header[2..4].copy_from_slice(&self.venue.to_le_bytes());
        header[4..8].copy_from_slice(&len.to_le_bytes());
        header[8..16].copy_from_slice(&now_ns.to_le_bytes());
        match self
            .ring
            .write_chunk_uninit(RECORD_HEADER_LEN + bytes.len())
        {
            // Filled and committed whole: the writer never sees half a record.
            Ok(chunk) => {
                chunk.fill_from_iter(header.iter().chain(bytes).copied());
            }
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

struct WireRx {
    ring: rtrb::Consumer<u8>,
    dropped: Arc<AtomicU64>,
    dropped_said: u64,
    /// Dropped records written into the file but not yet said in the log.
    unlogged: u64,
    venue: u16,
}

/// Dropped records are said in the log at most once per this interval per link (the file
/// records each drop where it happened).
const DROP_LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// Why the wire log could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum WireLogError {
    /// The file could not be opened, written or read.
    #[error("wire log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a wire log, or a record that cannot be.
    #[error("wire log {path}: {what} at byte {offset}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What.
        what: String,
    },
}

/// The writer: drains every link's ring into `wire.log`.
pub struct WireLogWriter {
    rings: Vec<WireRx>,
    config: WireLogConfig,
    venues: Vec<String>,
    unix_ns_at_origin: u64,
    file: Option<File>,
    written: u64,
    /// Bytes written in total (all files).
    pub bytes: u64,
    errors: u64,
    clock: crate::clock::TscClock,
    /// When dropped records were last said in the log.
    logged_at_ns: u64,
}

impl std::fmt::Debug for WireLogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireLogWriter")
            .field("dir", &self.config.dir)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

/// One tap per venue (in `VenueId` order) and the writer that drains them.
pub fn wire_log(
    config: &WireLogConfig,
    venues: &[String],
    unix_ns_at_origin: u64,
) -> (Vec<WireTap>, WireLogWriter) {
    let mut taps = Vec::new();
    let mut rings = Vec::new();
    for v in 0..venues.len() {
        let (tx, rx) = rtrb::RingBuffer::new(config.ring_bytes as usize);
        let dropped = Arc::new(AtomicU64::new(0));
        taps.push(WireTap {
            ring: tx,
            venue: v as u16,
            dropped: Arc::clone(&dropped),
        });
        rings.push(WireRx {
            ring: rx,
            dropped,
            dropped_said: 0,
            unlogged: 0,
            venue: v as u16,
        });
    }
    let writer = WireLogWriter {
        rings,
        config: config.clone(),
        venues: venues.to_vec(),
        unix_ns_at_origin,
        file: None,
        written: 0,
        bytes: 0,
        errors: 0,
        clock: crate::clock::TscClock::new(),
        logged_at_ns: 0,
    };
    (taps, writer)
}

impl WireLogWriter {
    /// The current file.
    pub fn path(&self) -> PathBuf {
        self.config.dir.join("wire.log")
    }

    /// Opens (creates or appends to) `wire.log`, writing a header first if it is new.
    pub fn open(&mut self) -> Result<(), WireLogError> {
        let path = self.path();
        let io = |source| WireLogError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.config.dir).map_err(io)?;
        // A new file per run: the previous run's goes to wire.log.1 (loop times restart).
        if path.exists() {
            let older = self.config.dir.join("wire.log.1");
            std::fs::rename(&path, &older).map_err(|source| WireLogError::Io {
                path: older.clone(),
                source,
            })?;
        }
        // Owner-only: the file holds the venue login (username and password) as sent.
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        let header = self.header();
        file.write_all(&header).map_err(io)?;
        self.written = header.len() as u64;
        self.bytes += header.len() as u64;
        self.file = Some(file);
        Ok(())
    }

    fn header(&self) -> Vec<u8> {
        let mut names = Vec::new();
        names.extend_from_slice(
            &(self.venues.len().min(usize::from(u16::MAX)) as u16).to_le_bytes(),
        );
        for v in self.venues.iter().take(usize::from(u16::MAX)) {
            let name = &v.as_bytes()[..v.len().min(255)];
            names.push(name.len() as u8);
            names.extend_from_slice(name);
        }
        let len = 8 + 4 + 4 + 8 + names.len();
        let mut h = Vec::with_capacity(len);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&(len as u32).to_le_bytes());
        h.extend_from_slice(&self.unix_ns_at_origin.to_le_bytes());
        h.extend_from_slice(&names);
        h
    }

    /// Appends what every ring holds; returns the bytes written.
    pub fn drain(&mut self) -> u64 {
        let mut moved = 0;
        for i in 0..self.rings.len() {
            let n = self.rings[i].ring.slots();
            if n > 0 {
                let Ok(chunk) = self.rings[i].ring.read_chunk(n) else {
                    continue;
                };
                let (a, b) = chunk.as_slices();
                let (file, written, bytes) = (&mut self.file, &mut self.written, &mut self.bytes);
                let dir = &self.config.dir;
                let result = append(file, written, bytes, dir, a)
                    .and_then(|()| append(file, written, bytes, dir, b));
                chunk.commit_all();
                if let Err(e) = result {
                    self.fail(&e);
                }
                moved += n as u64;
            }
            let rx = &mut self.rings[i];
            let dropped = rx.dropped.load(Ordering::Relaxed);
            if dropped > rx.dropped_said {
                let count = dropped - rx.dropped_said;
                rx.dropped_said = dropped;
                let venue = rx.venue;
                let mut r = [0u8; RECORD_HEADER_LEN + 8];
                r[0] = KIND_DROPPED;
                r[2..4].copy_from_slice(&venue.to_le_bytes());
                r[4..8].copy_from_slice(&8u32.to_le_bytes());
                r[16..24].copy_from_slice(&count.to_le_bytes());
                self.rings[i].unlogged += count;
                if let Err(e) = self.append(&r) {
                    self.fail(&e);
                }
            }
        }
        let now_ns = crate::clock::Clock::now_ns(&self.clock);
        self.say_drops(now_ns, false);
        if moved > 0 && self.written > self.config.file_bytes_max {
            if let Err(e) = self.open() {
                self.fail(&e);
            }
        }
        moved
    }

    /// Says the records dropped since the last time, one line per link, if an interval has
    /// passed (or `force`); returns the lines said. A ring too small for a sustained burst
    /// would otherwise log at every drain (every 2 ms).
    fn say_drops(&mut self, now_ns: u64, force: bool) -> u32 {
        let interval_ns = now_ns.saturating_sub(self.logged_at_ns);
        if !force && interval_ns < DROP_LOG_INTERVAL_NS {
            return 0;
        }
        let mut said = 0;
        for rx in &mut self.rings {
            if rx.unlogged > 0 {
                tracing::error!(
                    target: "keel::wire",
                    venue = self.venues.get(usize::from(rx.venue)).map_or("?", String::as_str),
                    count = rx.unlogged,
                    interval_ms = interval_ns / 1_000_000,
                    "wire log records dropped (the link's ring was full)"
                );
                rx.unlogged = 0;
                said += 1;
            }
        }
        if said > 0 {
            self.logged_at_ns = now_ns;
        }
        said
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), WireLogError> {
        append(
            &mut self.file,
            &mut self.written,
            &mut self.bytes,
            &self.config.dir,
            bytes,
        )
    }

    /// A write failed: said once, the file closed; the rings keep being drained (and their
    /// contents lost, counted as bytes not written).
    fn fail(&mut self, e: &WireLogError) {
        self.errors += 1;
        if self.file.take().is_some() {
            tracing::error!(target: "keel::wire", error = %e, "wire log stopped");
        }
    }

    /// Drains every `interval` until `stop`, then once more, and syncs the file.
    pub fn run(mut self, stop: &AtomicBool, interval: Duration) {
        while !stop.load(Ordering::Acquire) {
            if self.drain() == 0 {
                std::thread::sleep(interval);
            }
        }
        self.drain();
        let now_ns = crate::clock::Clock::now_ns(&self.clock);
        self.say_drops(now_ns, true);
        if let Some(f) = &self.file {
            let _ = f.sync_data();
        }
    }
}

fn append(
    file: &mut Option<File>,
    written: &mut u64,
    total: &mut u64,
    dir: &Path,
    bytes: &[u8],
) -> Result<(), WireLogError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let Some(f) = file.as_mut() else {
        return Ok(());
    };
    f.write_all(bytes).map_err(|source| WireLogError::Io {
        path: dir.join("wire.log"),
        source,
    })?;
    *written += bytes.len() as u64;
    *total += bytes.len() as u64;
    Ok(())
}

/// What [`dump`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpSummary {
    /// Messages from venues.
    pub messages_in: u64,
    /// Messages to venues.
    pub messages_out: u64,
    /// Records the links dropped (said in the file).
    pub dropped: u64,
    /// Bytes at the end that do not form a whole record (a writer killed mid-write).
    pub torn_tail_bytes: u64,
}

/// Writes `path` as text to `out`: one line per message (UTC time, venue, direction, length,
/// the SoupBinTCP packet type and, for data packets, the OUCH message type, then the bytes in
/// hex), and returns what it read.
pub fn dump(path: &Path, out: &mut dyn Write) -> Result<DumpSummary, WireLogError> {
    let io = |source| WireLogError::Io {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |offset: usize, what: String| WireLogError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    // Streamed: memory stays at one record whatever the file's size. Only a regular file is
    // read (a device or a pipe could be endless), and only the bytes it had when opened (the
    // running engine may be appending).
    let file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(corrupt(0, "not a regular file".into()));
    }
    let size = meta.len();
    let mut r = std::io::BufReader::with_capacity(1 << 16, file.take(size));
    let mut fixed = [0u8; 26];
    if read_full(&mut r, &mut fixed).map_err(io)? < fixed.len() || &fixed[..8] != MAGIC {
        return Err(corrupt(0, "not a keel wire log (magic)".into()));
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4"));
    if version != VERSION {
        return Err(corrupt(
            8,
            format!("version {version}, this keel reads {VERSION}"),
        ));
    }
    let header_len = u32::from_le_bytes(fixed[12..16].try_into().expect("4")) as usize;
    if header_len < 26 || header_len as u64 > size {
        return Err(corrupt(12, format!("header length {header_len}")));
    }
    let unix_origin = u64::from_le_bytes(fixed[16..24].try_into().expect("8"));
    let count = u16::from_le_bytes(fixed[24..26].try_into().expect("2"));
    let mut names = vec![0u8; header_len - 26];
    if read_full(&mut r, &mut names).map_err(io)? < names.len() {
        return Err(corrupt(26, "the header is cut short".into()));
    }
    let mut venues = Vec::new();
    let mut at = 0;
    for _ in 0..count {
        let Some(&len) = names.get(at) else {
            return Err(corrupt(26 + at, "venue names past the header".into()));
        };
        let end = at + 1 + usize::from(len);
        if end > names.len() {
            return Err(corrupt(26 + at, "venue names past the header".into()));
        }
        venues.push(String::from_utf8_lossy(&names[at + 1..end]).into_owned());
        at = end;
    }
    let mut summary = DumpSummary::default();
    let mut at = header_len;
    let mut body = Vec::new();
    loop {
        let mut h = [0u8; RECORD_HEADER_LEN];
        let got = read_full(&mut r, &mut h).map_err(io)?;
        if got == 0 {
            break;
        }
        if got < RECORD_HEADER_LEN {
            summary.torn_tail_bytes = got as u64;
            break;
        }
        let kind = h[0];
        let venue = u16::from_le_bytes([h[2], h[3]]);
        let len = u32::from_le_bytes(h[4..8].try_into().expect("4")) as usize;
        let t = u64::from_le_bytes(h[8..16].try_into().expect("8"));
        let body_at = at + RECORD_HEADER_LEN;
        if (len as u64) > size - body_at as u64 {
            summary.torn_tail_bytes = size - at as u64;
            break;
        }
        body.resize(len, 0);
        let got = read_full(&mut r, &mut body).map_err(io)?;
        if got < len {
            summary.torn_tail_bytes = (RECORD_HEADER_LEN + got) as u64;
            break;
        }
        let body = &body[..];
        let name = venues
            .get(usize::from(venue))
            .map_or_else(|| venue.to_string(), Clone::clone);
        let line = match kind {
            1 | 2 => {
                // One record is what one write or read carried: usually one SoupBinTCP packet,
                // sometimes several written together (an Account Query and keel's own query
                // at login); each packet is a message and a line of its own.
                // A FIX link's record holds FIX messages (tag=value text, shown with `|` for
                // SOH and the Password masked); every other link's SoupBinTCP packets (hex).
                let fix = body.starts_with(b"8=FIX");
                let packets = if fix {
                    fix_messages(body)
                } else {
                    soupbin_packets(body)
                };
                let mut lines = Vec::new();
                for packet in packets {
                    if kind == 1 {
                        summary.messages_in += 1;
                    } else {
                        summary.messages_out += 1;
                    }
                    let (types, shown) = if fix {
                        (fix_type(packet), fix_text(packet))
                    } else {
                        (packet_types(packet), hex(&masked(packet)))
                    };
                    lines.push(format!(
                        "{} {name} {} {:>4}B {types} {shown}",
                        utc_text(unix_origin.saturating_add(t)),
                        if kind == 1 { "in " } else { "out" },
                        packet.len(),
                    ));
                }
                lines.join("\n")
            }
            KIND_DROPPED if len == 8 => {
                let n = u64::from_le_bytes(body.try_into().expect("8"));
                summary.dropped += n;
                format!("# {name}: {n} messages dropped here (the link's ring was full)")
            }
            other => return Err(corrupt(at, format!("record kind {other} (length {len})"))),
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(summary);
        }
        at = body_at + len;
    }
    Ok(summary)
}

/// Reads until `buf` is full or the end; returns how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The SoupBinTCP packets in `bytes` (a 2-byte big-endian length, then that many bytes);
/// bytes that do not form a whole packet come last, as one piece.
fn soupbin_packets(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 3 {
        let len = 2 + usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        if len > rest.len() || len < 3 {
            break;
        }
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    if !rest.is_empty() || out.is_empty() {
        out.push(rest);
    }
    out
}

/// The FIX messages in `bytes`, cut where each one's BodyLength says; bytes that do not form
/// a whole message come last, as one piece.
fn fix_messages(bytes: &[u8]) -> Vec<&[u8]> {
    use crate::session::fix::codec::{frame, Frame, Limits};
    let limits = Limits {
        message_max: u32::MAX,
        ..Limits::default()
    };
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Frame::Whole { len } | Frame::Garbled { len, .. } = frame(rest, &limits) {
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    if !rest.is_empty() || out.is_empty() {
        out.push(rest);
    }
    out
}

/// `fix D` for a NewOrderSingle: the MsgType (35).
fn fix_type(message: &[u8]) -> String {
    let msg_type = message
        .split(|&b| b == 0x01)
        .find_map(|f| f.strip_prefix(b"35="))
        .map_or_else(
            || "?".to_string(),
            |t| String::from_utf8_lossy(t).into_owned(),
        );
    format!("fix {msg_type}")
}

/// A FIX message as text: SOH shown as `|`, a byte that is not printable as `?`, the
/// Password (554) and NewPassword (925) as `*` — a dump gets pasted into tickets.
fn fix_text(message: &[u8]) -> String {
    let mut text = String::with_capacity(message.len());
    for field in message.split_inclusive(|&b| b == 0x01) {
        let body = field.strip_suffix(&[0x01]).unwrap_or(field);
        let secret = body.starts_with(b"554=") || body.starts_with(b"925=");
        for (i, &b) in body.iter().enumerate() {
            text.push(match b {
                _ if secret && i >= 4 => '*',
                b if b.is_ascii_graphic() || b == b' ' => b as char,
                _ => '?',
            });
        }
        if field.ends_with(&[0x01]) {
            text.push('|');
        }
    }
    text
}

/// `S A` for a sequenced OUCH Order Accepted, `U O` for an unsequenced Enter Order, `H` for
/// a heartbeat: the SoupBinTCP packet type, then the OUCH type of a data packet.
fn packet_types(packet: &[u8]) -> String {
    let printable = |b: u8| {
        if b.is_ascii_graphic() {
            (b as char).to_string()
        } else {
            format!("0x{b:02x}")
        }
    };
    match packet {
        [_, _, t @ (b'S' | b'U'), m, ..] => {
            format!("soupbin {} ouch {}", *t as char, printable(*m))
        }
        [_, _, t, ..] => format!("soupbin {}", printable(*t)),
        _ => "short".into(),
    }
}

/// Where a SoupBinTCP Login Request (`L`) carries its password: after the 2-byte length, the
/// type and the 6-byte username, 10 bytes.
const LOGIN_PASSWORD: std::ops::Range<usize> = 9..19;

/// `packet` as the dump prints it: a Login Request's password is shown as `*` (0x2a) — a
/// dump is text that gets pasted into tickets; the file itself is owner-only.
fn masked(packet: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match packet {
        [_, _, b'L', ..] => {
            let mut p = packet.to_vec();
            let end = LOGIN_PASSWORD.end.min(p.len());
            if let Some(password) = p.get_mut(LOGIN_PASSWORD.start..end) {
                password.fill(b'*');
            }
            std::borrow::Cow::Owned(p)
        }
        _ => std::borrow::Cow::Borrowed(packet),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Unix ns as `2026-12-01T03:33:47.058772123Z`.
pub fn utc_text(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let nanos = unix_ns % 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: what the taps record comes back from the file whole and in order, a full ring
    // drops (and the file says how many), and a torn tail is reported, not misread.
    #[test]
    fn records_round_trip_drops_are_said_and_a_torn_tail_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let config = WireLogConfig {
            dir: dir.path().to_path_buf(),
            ring_bytes: 64,
            file_bytes_max: 1 << 20,
        };
        let (mut taps, mut writer) = wire_log(&config, &["sim".into(), "b".into()], 0);
        writer.open().unwrap();
        taps[0].record(1_000, Direction::Out, b"\x00\x02U\x4f");
        taps[1].record(2_000, Direction::In, b"\x00\x01H");
        taps[0].record(3_000, Direction::In, &[0u8; 60]); // does not fit: dropped
        assert_eq!(taps[0].dropped(), 1);
        writer.drain();
        taps[0].record(4_000, Direction::In, b"\x00\x02SA");
        writer.drain();
        let mut text = Vec::new();
        let summary = dump(&writer.path(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert_eq!(summary.messages_in, 2, "{text}");
        assert_eq!(summary.messages_out, 1, "{text}");
        assert_eq!(summary.dropped, 1, "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with(
                "1970-01-01T00:00:00.000001000Z sim out    4B soupbin U ouch O 0002554f"
            ),
            "{text}"
        );
        assert!(lines[1].starts_with("# sim: 1 messages dropped"), "{text}");
        assert!(lines[2].contains(" b in "), "{text}");
        assert!(lines[3].contains("soupbin S ouch A"), "{text}");
        // A torn tail: half a record.
        let mut f = OpenOptions::new().append(true).open(writer.path()).unwrap();
        f.write_all(&[1, 0, 0, 0, 9, 0]).unwrap();
        let summary = dump(&writer.path(), &mut Vec::new()).unwrap();
        assert_eq!(summary.torn_tail_bytes, 6);
        // Owner-only: it holds the venue login as sent.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(writer.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
        // A device is never read (before: `keel log dump /dev/zero` read until memory ran out).
        assert!(matches!(
            dump(Path::new("/dev/zero"), &mut Vec::new()),
            Err(WireLogError::Corrupt { .. })
        ));
        // Not a wire log.
        std::fs::write(dir.path().join("x"), b"hello").unwrap();
        assert!(matches!(
            dump(&dir.path().join("x"), &mut Vec::new()),
            Err(WireLogError::Corrupt { .. })
        ));
    }

    // Goal: a ring too small for a sustained burst is said in the log once per interval per
    // link, not at every 2-ms drain (before: an ERROR line every drain, hundreds a second),
    // while the file still marks each drop where it happened.
    #[test]
    fn dropped_records_are_said_once_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let config = WireLogConfig {
            dir: dir.path().to_path_buf(),
            ring_bytes: 64,
            file_bytes_max: 1 << 20,
        };
        let (mut taps, mut writer) = wire_log(&config, &["sim".into()], 0);
        writer.open().unwrap();
        let t0 = u64::MAX / 2;
        writer.logged_at_ns = t0; // an interval never passes during the drains below
        for i in 0..10 {
            taps[0].record(i, Direction::In, &[0u8; 60]); // does not fit: dropped
            writer.drain();
        }
        assert_eq!(writer.rings[0].unlogged, 10);
        assert_eq!(writer.say_drops(t0 + 1, false), 0);
        assert_eq!(writer.say_drops(t0 + DROP_LOG_INTERVAL_NS, false), 1);
        assert_eq!(writer.rings[0].unlogged, 0);
        assert_eq!(writer.say_drops(t0 + 3 * DROP_LOG_INTERVAL_NS, false), 0);
        let mut text = Vec::new();
        let summary = dump(&writer.path(), &mut text).unwrap();
        assert_eq!(summary.dropped, 10);
        let text = String::from_utf8(text).unwrap();
        assert_eq!(
            text.matches("# sim: 1 messages dropped here").count(),
            10,
            "{text}"
        );
    }

    // Goal: a dump pasted into a ticket never carries the venue password.
    #[test]
    fn a_dump_masks_the_login_password() {
        let dir = tempfile::tempdir().unwrap();
        let config = WireLogConfig {
            dir: dir.path().to_path_buf(),
            ring_bytes: 4096,
            file_bytes_max: 1 << 20,
        };
        let (mut taps, mut writer) = wire_log(&config, &["sim".into()], 0);
        writer.open().unwrap();
        let mut login = vec![0x00, 47, b'L'];
        login.extend_from_slice(b"keel  s3cr3tpass          ");
        login.extend_from_slice(&[b' '; 19]);
        login.push(b'1');
        assert_eq!(login.len(), 49);
        taps[0].record(1, Direction::Out, &login);
        // A login cut short is masked as far as it goes.
        taps[0].record(2, Direction::Out, &login[..12]);
        writer.drain();
        let mut text = Vec::new();
        dump(&writer.path(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(!text.contains(&hex(b"s3cr3tpass")), "{text}");
        assert!(!text.contains(&hex(b"s3c")), "{text}");
        assert!(text.contains(&hex(b"keel  **********")), "{text}");
        assert!(
            text.contains(&format!("4c{}\n", hex(b"keel  ***"))),
            "{text}"
        );
    }

    // Goal: a FIX link's records read as FIX: one line per message (two written together are
    // two lines), tag=value with `|` for SOH, the MsgType named, the Password masked; a cut
    // message is shown as it is, never read past its end.
    #[test]
    fn a_fix_dump_is_text_with_the_password_masked() {
        let dir = tempfile::tempdir().unwrap();
        let config = WireLogConfig {
            dir: dir.path().to_path_buf(),
            ring_bytes: 4096,
            file_bytes_max: 1 << 20,
        };
        let (mut taps, mut writer) = wire_log(&config, &["fix".into()], 0);
        writer.open().unwrap();
        let mut two = Vec::new();
        for (msg_type, body) in [("A", "98=0|108=1|553=demo|554=s3cr3t|"), ("0", "")] {
            let mut out = [0u8; 256];
            let mut e = crate::session::fix::codec::Encoder::new(&mut out, msg_type.as_bytes());
            e.raw(body.replace('|', "\x01").as_bytes());
            let n = e.finish().unwrap();
            two.extend_from_slice(&out[..n]);
        }
        taps[0].record(1, Direction::Out, &two);
        taps[0].record(2, Direction::In, b"8=FIX.4.4\x019=99\x0135=8");
        writer.drain();
        let mut text = Vec::new();
        let summary = dump(&writer.path(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert_eq!(
            (summary.messages_out, summary.messages_in),
            (2, 1),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains(" fix out "), "{text}");
        assert!(lines[0].contains("B fix A 8=FIX.4.4|9="), "{text}");
        assert!(lines[0].contains("|553=demo|554=******|"), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(lines[1].contains("B fix 0 8=FIX.4.4|"), "{text}");
        assert!(lines[2].ends_with("B fix 8 8=FIX.4.4|9=99|35=8"), "{text}");
    }

    #[test]
    fn utc_text_is_a_civil_date() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            utc_text(1_798_688_027_058_772_123),
            "2026-12-31T03:33:47.058772123Z"
        );
        assert_eq!(
            utc_text(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
    }
}
