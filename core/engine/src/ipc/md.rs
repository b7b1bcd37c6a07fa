//! Market data for strategies in other processes: one shared-memory file per feed, which the
//! engine's feed handler writes (`<[ipc] dir>/md-<feed>`) and any number of strategies read.
//!
//! For every symbol a conflating top-of-book slot (a seqlock: a reader retries while the writer
//! is in it and never returns torn data; the book's own sequence number tells a reader which
//! state it has), and one bounded ring of trades with a sequence number each. The writer never
//! waits for a reader: a reader that falls more than the ring's capacity behind finds the trades
//! it missed overwritten and is told how many (a gap), never given a torn or stale record.
//!
//! ```text
//! header (4096 bytes): 0 magic "KEELMD\0\0", 8 version u32, 12 symbols u32,
//!   16 trade capacity u32 (a power of two), 20 depth u32, 64 writer heartbeat u64,
//!   72 synced u64 (1: every book is in step with the venue; 0: connecting or resyncing, the
//!   tops may be stale), 128 trades published u64
//! slots: at 4096 + symbol × 192: version u64 (odd while written), book seq u64,
//!   then `depth` × (bid price i64, bid qty u64, ask price i64, ask qty u64)
//! trades: at 4096 + symbols × 192 + (n mod capacity) × 64: stamp u64 (n + 1 once the record is
//!   whole; 0 while written), symbol u16 + side u8 (1 buy, 2 sell) in the next word,
//!   venue seq u64, price i64, qty u64
//! ```

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use memmap2::{Mmap, MmapMut};

use super::{map, IpcError, HEADER_LEN};
use crate::feed::fanout::{BookTop, TradeTick, DEPTH};

/// File magic.
pub const MD_MAGIC: [u8; 8] = *b"KEELMD\0\0";
/// Layout version.
pub const MD_VERSION: u32 = 1;
/// Bytes per top-of-book slot (three cache lines).
pub const SLOT_LEN: usize = 192;
/// Bytes per trade record.
pub const TRADE_LEN: usize = 64;
/// The most symbols a file holds.
pub const SYMBOLS_MAX: u32 = 65_535;
/// A slot a reader finds mid-write this many reads in a row: the writer is preempted inside it,
/// or died there.
pub const SPINS_MAX: u32 = 1_000_000;

/// Header offsets.
pub mod md_offset {
    /// Magic.
    pub const MAGIC: usize = 0;
    /// Layout version (u32).
    pub const VERSION: usize = 8;
    /// Symbols (u32).
    pub const SYMBOLS: usize = 12;
    /// Trade ring capacity (u32).
    pub const TRADE_CAPACITY: usize = 16;
    /// Levels per side in a slot (u32).
    pub const DEPTH: usize = 20;
    /// The writer's heartbeat.
    pub const HEARTBEAT: usize = 64;
    /// 1 while every book is in step with the venue, else 0.
    pub const SYNCED: usize = 72;
    /// Trades published.
    pub const TRADES: usize = 128;
}

const SLOT_WORDS: usize = 2 + 4 * DEPTH;
// A slot's words fit its three cache lines.
const _: () = assert!(SLOT_WORDS * 8 <= SLOT_LEN);

fn file_len(symbols: u32, capacity: u32) -> usize {
    HEADER_LEN + symbols as usize * SLOT_LEN + capacity as usize * TRADE_LEN
}

/// The writer's mapping (read-write) or a reader's (read-only: a reader can never disturb the
/// engine or another reader). Held only to keep the mapping alive.
#[derive(Debug)]
#[allow(dead_code)]
enum Mapping {
    Write(MmapMut),
    Read(Mmap),
}

/// The mapping and where things are in it.
#[derive(Debug)]
struct Mapped {
    base: *mut u8,
    _map: Mapping,
    symbols: u32,
    capacity: u32,
}

impl Mapped {
    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(
            at % 8 == 0 && at + 8 <= file_len(self.symbols, self.capacity),
            "word {at}"
        );
        // SAFETY: the mapping is page-aligned and `file_len` long (checked at open), `at` is a
        // multiple of 8 inside it, and every access to shared memory is atomic.
        #[allow(unsafe_code)]
        unsafe {
            &*self.base.add(at).cast::<AtomicU64>()
        }
    }

    fn slot_word(&self, symbol: u16, i: usize) -> &AtomicU64 {
        self.word(HEADER_LEN + usize::from(symbol) * SLOT_LEN + 8 * i)
    }

    fn trade_word(&self, n: u64, i: usize) -> &AtomicU64 {
        let at = HEADER_LEN
            + self.symbols as usize * SLOT_LEN
            + (n % u64::from(self.capacity)) as usize * TRADE_LEN
            + 8 * i;
        self.word(at)
    }
}

// SAFETY: `base` points into the mapping the value owns; every access through it is atomic.
#[allow(unsafe_code)]
unsafe impl Send for Mapped {}

/// The engine's end: writes books and trades, never waits.
#[derive(Debug)]
pub struct MdWriter {
    m: Mapped,
    trades: u64,
    synced: bool,
}

impl MdWriter {
    /// Creates the file (a new inode: an old mapping is never rewritten under a reader) for
    /// `symbols` symbols and a ring of `trade_capacity` trades (a power of two, 2..=2^20).
    pub fn create(path: &Path, symbols: u32, trade_capacity: u32) -> Result<Self, IpcError> {
        if !trade_capacity.is_power_of_two() || !(2..=super::CAPACITY_MAX).contains(&trade_capacity)
        {
            return Err(IpcError::BadCapacity(trade_capacity));
        }
        let io = |source| IpcError::Io {
            path: path.to_path_buf(),
            source,
        };
        if symbols == 0 || symbols > SYMBOLS_MAX {
            return Err(IpcError::BadHeader {
                path: path.to_path_buf(),
                what: format!("{symbols} symbols (1..={SYMBOLS_MAX})"),
            });
        }
        let _ = std::fs::remove_file(path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644) // market data: readable by the strategies' group and others
            .open(path)
            .map_err(io)?;
        file.set_len(file_len(symbols, trade_capacity) as u64)
            .map_err(io)?;
        let mut map = map(path, &file)?;
        map[md_offset::VERSION..md_offset::VERSION + 4].copy_from_slice(&MD_VERSION.to_le_bytes());
        map[md_offset::SYMBOLS..md_offset::SYMBOLS + 4].copy_from_slice(&symbols.to_le_bytes());
        map[md_offset::TRADE_CAPACITY..md_offset::TRADE_CAPACITY + 4]
            .copy_from_slice(&trade_capacity.to_le_bytes());
        map[md_offset::DEPTH..md_offset::DEPTH + 4].copy_from_slice(&(DEPTH as u32).to_le_bytes());
        fence(Ordering::Release);
        map[md_offset::MAGIC..md_offset::MAGIC + 8].copy_from_slice(&MD_MAGIC);
        let base = map.as_mut_ptr();
        Ok(Self {
            m: Mapped {
                base,
                _map: Mapping::Write(map),
                symbols,
                capacity: trade_capacity,
            },
            trades: 0,
            synced: false,
        })
    }

    /// Says whether every book is in step with the venue (stored only when it changes).
    pub fn set_synced(&mut self, synced: bool) {
        if synced != self.synced {
            self.synced = synced;
            self.m
                .word(md_offset::SYNCED)
                .store(u64::from(synced), Ordering::Release);
        }
    }

    /// Publishes `symbol`'s top of book (a symbol past the file's is ignored).
    pub fn book(&mut self, symbol: u16, top: &BookTop) {
        if u32::from(symbol) >= self.m.symbols {
            return;
        }
        let version = self.m.slot_word(symbol, 0);
        let v = version.load(Ordering::Relaxed);
        version.store(v.wrapping_add(1), Ordering::Relaxed); // odd: being written
        fence(Ordering::Release);
        self.m
            .slot_word(symbol, 1)
            .store(top.seq, Ordering::Relaxed);
        for i in 0..DEPTH {
            let w = 2 + 4 * i;
            let put =
                |k: usize, x: u64| self.m.slot_word(symbol, w + k).store(x, Ordering::Relaxed);
            put(0, top.bids[i].0 as u64);
            put(1, top.bids[i].1);
            put(2, top.asks[i].0 as u64);
            put(3, top.asks[i].1);
        }
        version.store(v.wrapping_add(2), Ordering::Release); // even: whole
    }

    /// Publishes one trade; the oldest is overwritten when the ring is full.
    pub fn trade(&mut self, t: &TradeTick) {
        let n = self.trades;
        let stamp = self.m.trade_word(n, 0);
        stamp.store(0, Ordering::Relaxed); // being written
        fence(Ordering::Release);
        let side = if t.buy { 1u64 } else { 2 };
        self.m
            .trade_word(n, 1)
            .store(u64::from(t.symbol) | side << 16, Ordering::Relaxed);
        self.m.trade_word(n, 2).store(t.seq, Ordering::Relaxed);
        self.m
            .trade_word(n, 3)
            .store(t.price as u64, Ordering::Relaxed);
        self.m.trade_word(n, 4).store(t.qty, Ordering::Relaxed);
        stamp.store(n + 1, Ordering::Release);
        self.trades = n + 1;
        self.m
            .word(md_offset::TRADES)
            .store(n + 1, Ordering::Release);
    }

    /// The writer's heartbeat.
    pub fn beat(&self) {
        self.m
            .word(md_offset::HEARTBEAT)
            .fetch_add(1, Ordering::Release);
    }
}

impl Drop for MdWriter {
    /// A stopped engine's books are no longer kept: readers see "not synced" (and the
    /// heartbeat stop).
    fn drop(&mut self) {
        self.set_synced(false);
    }
}

/// What a reader got from the trade ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TradeRead {
    /// The next trade.
    Trade(TradeTick),
    /// This many trades were overwritten before they were read (the reader fell behind); the
    /// next read goes on from the oldest still there.
    Gap(u64),
}

/// A strategy's end: reads books and trades, never disturbs the writer.
#[derive(Debug)]
pub struct MdReader {
    m: Mapped,
    path: PathBuf,
    next: u64,
    /// Seqlock reads that had to start again (the writer was in the slot).
    pub retries: u64,
}

impl MdReader {
    /// Maps the file read-only and checks its header. Starts at the newest
    /// trade (history before attaching is not replayed).
    pub fn open(path: &Path) -> Result<Self, IpcError> {
        let bad = |what: String| IpcError::BadHeader {
            path: path.to_path_buf(),
            what,
        };
        let file = OpenOptions::new()
            .read(true)
            .open(path)
            .map_err(|source| IpcError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < HEADER_LEN as u64 {
            return Err(bad(format!("{len} bytes, shorter than the header")));
        }
        // SAFETY: as for every keel mapping (`super::map`): the file is shared on purpose, every
        // shared word is read atomically, and keel never truncates a mapped file. This end only
        // loads (a read-only mapping: an x86-64 load needs no write access).
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&file) }.map_err(|source| IpcError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let u32_at = |at: usize| u32::from_le_bytes(map[at..at + 4].try_into().expect("4"));
        if map[..8] != MD_MAGIC {
            return Err(bad(format!(
                "not a keel market-data file (magic {:?})",
                &map[..8]
            )));
        }
        let (version, symbols, capacity, depth) = (
            u32_at(md_offset::VERSION),
            u32_at(md_offset::SYMBOLS),
            u32_at(md_offset::TRADE_CAPACITY),
            u32_at(md_offset::DEPTH),
        );
        if version != MD_VERSION || depth as usize != DEPTH {
            return Err(bad(format!("version {version}, depth {depth}")));
        }
        if !capacity.is_power_of_two() || symbols == 0 || symbols > SYMBOLS_MAX {
            return Err(bad(format!("{symbols} symbols, trade capacity {capacity}")));
        }
        if len != file_len(symbols, capacity) as u64 {
            return Err(bad(format!(
                "{len} bytes, {} expected",
                file_len(symbols, capacity)
            )));
        }
        // Only ever loaded through (`MdReader` stores nothing).
        let base = map.as_ptr().cast_mut();
        let m = Mapped {
            base,
            _map: Mapping::Read(map),
            symbols,
            capacity,
        };
        let next = m.word(md_offset::TRADES).load(Ordering::Acquire);
        Ok(Self {
            m,
            path: path.to_path_buf(),
            next,
            retries: 0,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Symbols in the file.
    pub fn symbols(&self) -> u32 {
        self.m.symbols
    }

    /// The writer's heartbeat (watch it move on your own clock).
    pub fn heartbeat(&self) -> u64 {
        self.m.word(md_offset::HEARTBEAT).load(Ordering::Acquire)
    }

    /// Every book is in step with the venue (else the feed is connecting or resyncing, and a
    /// top may be stale).
    pub fn synced(&self) -> bool {
        self.m.word(md_offset::SYNCED).load(Ordering::Acquire) == 1
    }

    /// `symbol`'s newest top of book, never torn. Retries while the writer is in the slot;
    /// `None`: no such symbol, or the writer stayed in the slot [`SPINS_MAX`] reads in a row (try
    /// again; if the heartbeat stopped too, the engine died mid-write).
    pub fn top(&mut self, symbol: u16) -> Option<BookTop> {
        if u32::from(symbol) >= self.m.symbols {
            return None;
        }
        for _ in 0..SPINS_MAX {
            let version = self.m.slot_word(symbol, 0);
            let v1 = version.load(Ordering::Acquire);
            if v1 % 2 == 1 {
                self.retries += 1;
                std::hint::spin_loop();
                continue;
            }
            let get = |i: usize| self.m.slot_word(symbol, i).load(Ordering::Relaxed);
            let mut top = BookTop {
                seq: get(1),
                ..BookTop::default()
            };
            for i in 0..DEPTH {
                let w = 2 + 4 * i;
                top.bids[i] = (get(w) as i64, get(w + 1));
                top.asks[i] = (get(w + 2) as i64, get(w + 3));
            }
            fence(Ordering::Acquire);
            if version.load(Ordering::Relaxed) == v1 {
                return Some(top);
            }
            self.retries += 1;
        }
        None
    }

    /// The next trade, a gap, or `None` (nothing new).
    pub fn next_trade(&mut self) -> Option<TradeRead> {
        let published = self.m.word(md_offset::TRADES).load(Ordering::Acquire);
        let capacity = u64::from(self.m.capacity);
        if published < self.next {
            // The writer started again (a new file would be a new inode: this is one that
            // went back). Follow it from where it is.
            self.next = published;
            return None;
        }
        if published - self.next > capacity {
            let lost = published - capacity - self.next;
            self.next = published - capacity;
            return Some(TradeRead::Gap(lost));
        }
        if published == self.next {
            return None;
        }
        let n = self.next;
        let stamp = self.m.trade_word(n, 0);
        let before = stamp.load(Ordering::Acquire);
        let word = self.m.trade_word(n, 1).load(Ordering::Relaxed);
        let seq = self.m.trade_word(n, 2).load(Ordering::Relaxed);
        let price = self.m.trade_word(n, 3).load(Ordering::Relaxed) as i64;
        let qty = self.m.trade_word(n, 4).load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let after = stamp.load(Ordering::Relaxed);
        if before != n + 1 || after != n + 1 {
            // Overwritten while (or before) it was read: the writer lapped this reader.
            let now = self.m.word(md_offset::TRADES).load(Ordering::Acquire);
            let oldest = now.saturating_sub(capacity);
            let resume = oldest.max(n + 1);
            self.next = resume;
            return Some(TradeRead::Gap(resume - n));
        }
        self.next = n + 1;
        Some(TradeRead::Trade(TradeTick {
            symbol: (word & 0xFFFF) as u16,
            seq,
            price,
            qty,
            buy: (word >> 16) & 0xFF == 1,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top_of(n: u64) -> BookTop {
        let mut top = BookTop {
            seq: n,
            ..BookTop::default()
        };
        for i in 0..DEPTH {
            let k = n * 10 + i as u64;
            top.bids[i] = (k as i64, k + 1);
            top.asks[i] = (k as i64 + 2, k + 3);
        }
        top
    }

    fn trade(n: u64) -> TradeTick {
        TradeTick {
            symbol: (n % 3) as u16,
            seq: n,
            price: n as i64 * 7,
            qty: n * 11,
            buy: n % 2 == 0,
        }
    }

    // Goal: a reader never sees a torn book while the writer hammers the slot from another
    // thread: every field read belongs to one write (each is derived from its sequence number),
    // and the sequence never goes back.
    #[test]
    fn a_hammered_slot_is_never_read_torn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("md");
        let mut w = MdWriter::create(&path, 2, 64).unwrap();
        let mut r = MdReader::open(&path).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    w.book(1, &top_of(n));
                }
                n
            })
        };
        let mut last = 0;
        let mut reads = 0u64;
        while reads < 100_000 {
            // None: the writer was preempted inside the slot for a whole spin budget (a busy
            // machine): try again, as a strategy would.
            let Some(top) = r.top(1) else { continue };
            if top.seq == 0 {
                assert_eq!(top, BookTop::default(), "written before its first write");
                continue;
            }
            assert_eq!(top, top_of(top.seq), "a torn read");
            assert!(top.seq >= last, "went back from {last} to {}", top.seq);
            last = top.seq;
            reads += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let written = writer.join().unwrap();
        assert!(written > 0 && last <= written);
        assert_eq!(r.top(2), None, "no such symbol");
    }

    // Goal: trades come in order with their fields; a reader that falls more than the ring
    // behind is told exactly how many it lost and goes on from the oldest still there; a
    // reader racing the writer across the whole ring never returns a torn trade.
    #[test]
    fn trades_in_order_and_a_reader_behind_is_told_its_gap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("md");
        let mut w = MdWriter::create(&path, 3, 8).unwrap();
        let mut r = MdReader::open(&path).unwrap();
        assert!(!r.synced());
        w.set_synced(true);
        assert!(r.synced());
        w.set_synced(false);
        assert!(!r.synced());
        for n in 1..=5 {
            w.trade(&trade(n));
        }
        for n in 1..=5 {
            assert_eq!(r.next_trade(), Some(TradeRead::Trade(trade(n))));
        }
        assert_eq!(r.next_trade(), None);
        // 20 more while the reader sleeps: 8 fit, 12 are lost.
        for n in 6..=25 {
            w.trade(&trade(n));
        }
        assert_eq!(r.next_trade(), Some(TradeRead::Gap(12)));
        for n in 18..=25 {
            assert_eq!(r.next_trade(), Some(TradeRead::Trade(trade(n))));
        }
        assert_eq!(r.next_trade(), None);

        // Racing: the writer laps a slow reader again and again.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 25;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    w.trade(&trade(n));
                }
            })
        };
        let (mut got, mut lost, mut last) = (0u64, 0u64, 25u64);
        while got < 100_000 {
            match r.next_trade() {
                Some(TradeRead::Trade(t)) => {
                    assert_eq!(t, trade(t.seq), "a torn trade");
                    assert!(t.seq > last, "out of order: {} after {last}", t.seq);
                    last = t.seq;
                    got += 1;
                }
                Some(TradeRead::Gap(n)) => lost += n,
                None => std::hint::spin_loop(),
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        // Every trade up to the last one read was either read or counted lost.
        assert_eq!(
            got + lost,
            last - 25,
            "read {got}, lost {lost}, up to {last}"
        );
    }

    // Goal: a slot a writer died inside (its version left odd) is reported as no top, not
    // waited on for ever; the other slots read as before.
    #[test]
    fn a_slot_left_mid_write_is_reported_not_waited_on() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("md");
        let mut w = MdWriter::create(&path, 2, 4).unwrap();
        w.book(1, &top_of(3));
        let mut r = MdReader::open(&path).unwrap();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&7u64.to_le_bytes(), HEADER_LEN as u64)
            .unwrap();
        assert_eq!(r.top(0), None);
        assert_eq!(r.retries, u64::from(SPINS_MAX));
        assert_eq!(r.top(1), Some(top_of(3)));
    }

    // Goal: a file that is not market data, or of another shape, is refused naming it.
    #[test]
    fn a_bad_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let e = MdReader::open(&path).unwrap_err().to_string();
        assert!(e.contains("not a keel market-data file"), "{e}");
        assert!(matches!(
            MdWriter::create(&path, 1, 3),
            Err(IpcError::BadCapacity(3))
        ));
        let w = MdWriter::create(&path, 1, 4).unwrap();
        drop(w);
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(5000).unwrap();
        let e = MdReader::open(&path).unwrap_err().to_string();
        assert!(e.contains("5000 bytes"), "{e}");
    }
}
