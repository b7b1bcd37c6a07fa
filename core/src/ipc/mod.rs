//! Strategies in other processes: a pair of SPSC rings in one shared-memory file per strategy.
//!
//! The file (under /dev/shm, mapped with memmap2 by both sides) holds a 4 KiB header and two
//! rings of 64-byte records: commands (strategy → engine) and events (engine → strategy). The
//! layout is fixed and documented in docs/ipc.md so that C, C++ and Python strategies can
//! speak it; `examples/python/keel_strategy.py` does, with the standard library only.
//!
//! Each ring has a producer index and a consumer index (free-running counts, each on its own
//! cache line, each written by one side only). A producer writes the whole record, then
//! publishes it by storing the new producer index (release); a consumer reads the index
//! (acquire), then the record. A producer killed mid-write therefore never publishes a torn
//! record; and every record carries a CRC-32 and its position, so a record published torn or
//! out of place by a faulty producer is detected, counted and skipped, never applied.
//!
//! Liveness: each side increments its heartbeat counter while it runs; the other side watches
//! it on its own clock ([`PeerMonitor`]) — no shared clock is needed. The engine publishes its
//! state, an epoch that grows at every engine start, the venues' SYNCED bits and the strategy's
//! id floor (ClientOrderId sequences at or below it were used before: allocate above it).

mod codec;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

pub use codec::{decode_command, decode_event, encode_command, encode_event, IpcEvent};

use crate::order::{Command, Event, StrategyId};

/// File magic.
pub const MAGIC: [u8; 8] = *b"KEELSHM\0";
/// Layout version.
pub const VERSION: u32 = 1;
/// Bytes per record.
pub const RECORD_LEN: usize = 64;
/// Bytes of header before the rings.
pub const HEADER_LEN: usize = 4096;
/// Largest ring capacity accepted (records).
pub const CAPACITY_MAX: u32 = 1 << 20;

/// Header field offsets (bytes); every u64 is 8-aligned and little-endian.
pub mod offset {
    /// `[u8; 8]` magic.
    pub const MAGIC: usize = 0;
    /// u32 layout version.
    pub const VERSION: usize = 8;
    /// u32 record length (64).
    pub const RECORD_LEN: usize = 12;
    /// u32 command ring capacity (records, a power of two).
    pub const COMMAND_CAPACITY: usize = 16;
    /// u32 event ring capacity (records, a power of two).
    pub const EVENT_CAPACITY: usize = 20;
    /// u16 strategy id.
    pub const STRATEGY: usize = 24;
    /// u64 engine heartbeat counter.
    pub const ENGINE_HEARTBEAT: usize = 64;
    /// u64 engine epoch (grows by one at every engine start).
    pub const ENGINE_EPOCH: usize = 72;
    /// u64 engine state (see [`super::EngineState`]).
    pub const ENGINE_STATE: usize = 80;
    /// u64 id floor: sequences at or below it are used.
    pub const ID_FLOOR: usize = 88;
    /// u64 bit `v` set: venue `v` is SYNCED.
    pub const VENUES_SYNCED: usize = 96;
    /// u64 engine process id.
    pub const ENGINE_PID: usize = 104;
    /// u64 strategy heartbeat counter.
    pub const STRATEGY_HEARTBEAT: usize = 128;
    /// u64 strategy process id.
    pub const STRATEGY_PID: usize = 136;
    /// u64 commands published (written by the strategy).
    pub const COMMAND_TAIL: usize = 192;
    /// u64 commands consumed (written by the engine).
    pub const COMMAND_HEAD: usize = 256;
    /// u64 events published (written by the engine).
    pub const EVENT_TAIL: usize = 320;
    /// u64 events consumed (written by the strategy).
    pub const EVENT_HEAD: usize = 384;
}

/// The engine's state as published in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineState {
    /// No engine has attached since the file was created.
    Absent = 0,
    /// Recovering its journal and connecting.
    Starting = 1,
    /// Serving commands.
    Running = 2,
    /// Shut down cleanly.
    Stopped = 3,
}

impl EngineState {
    fn from_u64(v: u64) -> Self {
        match v {
            1 => Self::Starting,
            2 => Self::Running,
            3 => Self::Stopped,
            _ => Self::Absent,
        }
    }
}

/// Why a channel could not be opened; each names the file and the offending value.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// A file operation failed.
    #[error("ipc {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a keel channel of this version, or its sizes do not agree.
    #[error("ipc {path}: {what}")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the value found.
        what: String,
    },
    /// A capacity is not a power of two in 2..=2^20.
    #[error("ipc capacity {0}: must be a power of two in 2..=1048576")]
    BadCapacity(u32),
}

/// Why one record was refused (it is skipped and counted; the ring goes on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The CRC-32 does not match: written torn or by a faulty producer.
    #[error("record {position}: checksum {found:#010x}, computed {computed:#010x}")]
    Checksum {
        /// Ring position.
        position: u64,
        /// Stored CRC.
        found: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// The record says it belongs at another position (a stale or misplaced write).
    #[error("record at position {position} says position {found}")]
    Position {
        /// Ring position.
        position: u64,
        /// Position in the record.
        found: u64,
    },
    /// A kind or field value this layout does not define.
    #[error("record {position}: {field} = {value}")]
    Field {
        /// Ring position.
        position: u64,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Ring {
    base: usize,
    capacity: u64,
    tail: usize,
    head: usize,
}

/// One strategy's channel, from either side.
#[derive(Debug)]
pub struct Channel {
    /// Start of the mapping (shared with the peer; all access goes through this pointer).
    base: *mut u8,
    map: MmapMut,
    path: PathBuf,
    commands: Ring,
    events: Ring,
    strategy: StrategyId,
}

fn file_len(command_capacity: u32, event_capacity: u32) -> usize {
    HEADER_LEN + (command_capacity as usize + event_capacity as usize) * RECORD_LEN
}

fn check_capacity(c: u32) -> Result<(), IpcError> {
    if c.is_power_of_two() && (2..=CAPACITY_MAX).contains(&c) {
        Ok(())
    } else {
        Err(IpcError::BadCapacity(c))
    }
}

impl Channel {
    /// Engine side: creates the channel file, or re-attaches to a valid one of the same
    /// shape (after an engine restart the strategy may still be mapped to it: its indices
    /// and unread records are kept). The engine epoch grows by one; the state is `Starting`.
    pub fn create_or_attach(
        path: &Path,
        strategy: StrategyId,
        command_capacity: u32,
        event_capacity: u32,
    ) -> Result<Self, IpcError> {
        check_capacity(command_capacity)?;
        check_capacity(event_capacity)?;
        let len = file_len(command_capacity, event_capacity);
        let reusable = Self::open(path).is_ok_and(|c| {
            c.strategy == strategy
                && c.commands.capacity == u64::from(command_capacity)
                && c.events.capacity == u64::from(event_capacity)
        });
        if !reusable {
            let io = |source| IpcError::Io {
                path: path.to_path_buf(),
                source,
            };
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(io)?;
            }
            // A new file, never a rewrite of one someone may have mapped.
            let _ = std::fs::remove_file(path);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(io)?;
            file.set_len(len as u64).map_err(io)?;
            let mut map = map(path, &file)?;
            map[offset::VERSION..offset::VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
            map[offset::RECORD_LEN..offset::RECORD_LEN + 4]
                .copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
            map[offset::COMMAND_CAPACITY..offset::COMMAND_CAPACITY + 4]
                .copy_from_slice(&command_capacity.to_le_bytes());
            map[offset::EVENT_CAPACITY..offset::EVENT_CAPACITY + 4]
                .copy_from_slice(&event_capacity.to_le_bytes());
            map[offset::STRATEGY..offset::STRATEGY + 2].copy_from_slice(&strategy.0.to_le_bytes());
            // The magic last: a reader never sees a half-initialised header as valid.
            std::sync::atomic::fence(Ordering::Release);
            map[offset::MAGIC..offset::MAGIC + 8].copy_from_slice(&MAGIC);
        }
        let channel = Self::open(path)?;
        channel
            .word(offset::ENGINE_EPOCH)
            .fetch_add(1, Ordering::AcqRel);
        channel
            .word(offset::ENGINE_PID)
            .store(u64::from(std::process::id()), Ordering::Release);
        channel.set_engine_state(EngineState::Starting);
        Ok(channel)
    }

    /// Opens an existing channel (either side) and checks its header against the file.
    pub fn open(path: &Path) -> Result<Self, IpcError> {
        let io = |source| IpcError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let bad = |what: String| IpcError::BadHeader {
            path: path.to_path_buf(),
            what,
        };
        let file_bytes = file.metadata().map_err(io)?.len();
        if file_bytes < HEADER_LEN as u64 {
            return Err(bad(format!("length {file_bytes}, shorter than the header")));
        }
        let mut map = map(path, &file)?;
        let base = map.as_mut_ptr();
        let u32_at = |o: usize| u32::from_le_bytes(map[o..o + 4].try_into().expect("4"));
        if map[..8] != MAGIC {
            return Err(bad(format!("magic {:?}", &map[..8])));
        }
        let version = u32_at(offset::VERSION);
        if version != VERSION {
            return Err(bad(format!(
                "version {version}, this keel speaks {VERSION}"
            )));
        }
        let record_len = u32_at(offset::RECORD_LEN);
        if record_len as usize != RECORD_LEN {
            return Err(bad(format!("record length {record_len}")));
        }
        let (cc, ec) = (
            u32_at(offset::COMMAND_CAPACITY),
            u32_at(offset::EVENT_CAPACITY),
        );
        check_capacity(cc).map_err(|_| bad(format!("command capacity {cc}")))?;
        check_capacity(ec).map_err(|_| bad(format!("event capacity {ec}")))?;
        if map.len() != file_len(cc, ec) {
            return Err(bad(format!(
                "length {}, capacities {cc} and {ec} need {}",
                map.len(),
                file_len(cc, ec)
            )));
        }
        let strategy = StrategyId(u16::from_le_bytes(
            map[offset::STRATEGY..offset::STRATEGY + 2]
                .try_into()
                .expect("2"),
        ));
        Ok(Self {
            base,
            map,
            path: path.to_path_buf(),
            commands: Ring {
                base: HEADER_LEN,
                capacity: u64::from(cc),
                tail: offset::COMMAND_TAIL,
                head: offset::COMMAND_HEAD,
            },
            events: Ring {
                base: HEADER_LEN + cc as usize * RECORD_LEN,
                capacity: u64::from(ec),
                tail: offset::EVENT_TAIL,
                head: offset::EVENT_HEAD,
            },
            strategy,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The strategy this channel serves.
    pub fn strategy(&self) -> StrategyId {
        self.strategy
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(at % 8 == 0 && at + 8 <= HEADER_LEN, "header word {at}");
        // SAFETY: the mapping is page-aligned, at least HEADER_LEN long (checked at open) and
        // `at` is a multiple of 8 inside the header, so the pointer is aligned and valid for
        // the mapping's lifetime (tied to &self). Header words are only ever accessed
        // atomically, by this process and its peer.
        #[allow(unsafe_code)]
        unsafe {
            &*self.base.add(at).cast::<AtomicU64>()
        }
    }

    fn slot(&self, ring: Ring, position: u64) -> *mut u8 {
        let at = ring.base + (position & (ring.capacity - 1)) as usize * RECORD_LEN;
        assert!(
            at + RECORD_LEN <= self.map.len(),
            "slot {at} outside the mapping"
        );
        // SAFETY: `at + RECORD_LEN` is inside the mapping (asserted above).
        #[allow(unsafe_code)]
        unsafe {
            self.base.add(at)
        }
    }

    fn push(&self, ring: Ring, record: &[u8; RECORD_LEN]) -> bool {
        let tail = self.word(ring.tail).load(Ordering::Relaxed);
        let head = self.word(ring.head).load(Ordering::Acquire);
        if tail.wrapping_sub(head) >= ring.capacity {
            return false;
        }
        let mut stamped = *record;
        codec::seal(&mut stamped, tail);
        // SAFETY: the slot lies inside the mapping; the consumer does not read it until the
        // release store of the new tail below, and the producer is the only writer of slots
        // between head and head + capacity.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(stamped.as_ptr(), self.slot(ring, tail), RECORD_LEN);
        }
        self.word(ring.tail).store(tail + 1, Ordering::Release);
        true
    }

    fn pop(&self, ring: Ring) -> Option<(u64, [u8; RECORD_LEN])> {
        let head = self.word(ring.head).load(Ordering::Relaxed);
        let tail = self.word(ring.tail).load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let mut record = [0u8; RECORD_LEN];
        // SAFETY: the slot lies inside the mapping and was published by the acquire load of
        // the tail; the producer does not reuse it until the head store below.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(self.slot(ring, head), record.as_mut_ptr(), RECORD_LEN);
        }
        self.word(ring.head).store(head + 1, Ordering::Release);
        Some((head, record))
    }

    fn len(&self, ring: Ring) -> u64 {
        let tail = self.word(ring.tail).load(Ordering::Acquire);
        tail.wrapping_sub(self.word(ring.head).load(Ordering::Acquire))
    }

    // ----- strategy side -----------------------------------------------------------------

    /// Strategy: publishes one command; false if the command ring is full.
    pub fn push_command(&self, command: &Command) -> bool {
        self.push(self.commands, &encode_command(command))
    }

    /// Strategy: the next event, or why the next record was refused.
    pub fn pop_event(&self) -> Option<Result<IpcEvent, RecordError>> {
        self.pop(self.events)
            .map(|(position, record)| decode_event(position, &record))
    }

    /// Strategy: one heartbeat (call it from the strategy's loop).
    pub fn beat_strategy(&self) {
        self.word(offset::STRATEGY_HEARTBEAT)
            .fetch_add(1, Ordering::Release);
    }

    /// Strategy: records this process as the channel's user.
    pub fn claim_strategy(&self) {
        self.word(offset::STRATEGY_PID)
            .store(u64::from(std::process::id()), Ordering::Release);
    }

    // ----- engine side -------------------------------------------------------------------

    /// Engine: the next command, or why the next record was refused.
    pub fn pop_command(&self) -> Option<Result<Command, RecordError>> {
        self.pop(self.commands)
            .map(|(position, record)| decode_command(position, &record))
    }

    /// Engine: publishes one event; false if the event ring is full.
    pub fn push_event(&self, event: &Event) -> bool {
        self.push(self.events, &encode_event(&IpcEvent::Event(*event)))
    }

    /// Engine: tells the strategy that a command record was refused.
    pub fn push_malformed(&self, error: RecordError) -> bool {
        self.push(self.events, &encode_event(&IpcEvent::Malformed(error)))
    }

    /// Events the engine may still publish before the ring is full.
    pub fn event_room(&self) -> u64 {
        self.events.capacity - self.len(self.events)
    }

    /// Engine: one heartbeat.
    pub fn beat_engine(&self) {
        self.word(offset::ENGINE_HEARTBEAT)
            .fetch_add(1, Ordering::Release);
    }

    /// Engine: publishes its state.
    pub fn set_engine_state(&self, state: EngineState) {
        self.word(offset::ENGINE_STATE)
            .store(state as u64, Ordering::Release);
    }

    /// Engine: publishes the id floor (sequences at or below are used).
    pub fn set_id_floor(&self, floor: u64) {
        self.word(offset::ID_FLOOR).store(floor, Ordering::Release);
    }

    /// Engine: publishes which venues are SYNCED (bit per venue id).
    pub fn set_venues_synced(&self, mask: u64) {
        self.word(offset::VENUES_SYNCED)
            .store(mask, Ordering::Release);
    }

    // ----- either side -------------------------------------------------------------------

    /// The engine's published state.
    pub fn engine_state(&self) -> EngineState {
        EngineState::from_u64(self.word(offset::ENGINE_STATE).load(Ordering::Acquire))
    }

    /// Engine starts so far on this file.
    pub fn engine_epoch(&self) -> u64 {
        self.word(offset::ENGINE_EPOCH).load(Ordering::Acquire)
    }

    /// The id floor the engine published.
    pub fn id_floor(&self) -> u64 {
        self.word(offset::ID_FLOOR).load(Ordering::Acquire)
    }

    /// Whether the engine says venue `v` is SYNCED.
    pub fn venue_synced(&self, v: u16) -> bool {
        v < 64 && self.word(offset::VENUES_SYNCED).load(Ordering::Acquire) & (1 << v) != 0
    }

    /// The engine's heartbeat counter.
    pub fn engine_heartbeat(&self) -> u64 {
        self.word(offset::ENGINE_HEARTBEAT).load(Ordering::Acquire)
    }

    /// The strategy's heartbeat counter.
    pub fn strategy_heartbeat(&self) -> u64 {
        self.word(offset::STRATEGY_HEARTBEAT)
            .load(Ordering::Acquire)
    }

    /// Commands published and not yet consumed.
    pub fn commands_pending(&self) -> u64 {
        self.len(self.commands)
    }
}

// SAFETY: `base` points into `map`, which the channel owns and moves with it; every access
// through it is either atomic (header words) or a whole-record copy into or out of a slot that
// the ring protocol gives to one side at a time.
#[allow(unsafe_code)]
unsafe impl Send for Channel {}

fn map(path: &Path, file: &std::fs::File) -> Result<MmapMut, IpcError> {
    // SAFETY: the channel file is shared on purpose with one peer process that follows the
    // documented protocol (docs/ipc.md); every shared word is accessed atomically and every
    // record is copied out before use, so a misbehaving peer can corrupt records (caught by
    // their checksums) but not this process's memory safety. The file is never truncated
    // while mapped: a new channel is always a new file.
    #[allow(unsafe_code)]
    let map = unsafe { MmapMut::map_mut(file) };
    map.map_err(|source| IpcError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Watches a peer's heartbeat counter on the observer's own clock.
#[derive(Debug, Clone, Copy)]
pub struct PeerMonitor {
    last_value: u64,
    last_change_ns: u64,
    timeout_ns: u64,
    alive: bool,
}

/// What [`PeerMonitor::observe`] concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// No change.
    Unchanged,
    /// The peer's heartbeat started moving (it attached, or came back).
    CameAlive,
    /// The peer's heartbeat stopped for longer than the timeout.
    Died,
}

impl PeerMonitor {
    /// A monitor that declares the peer dead after `timeout_ns` without a beat. The peer is
    /// not alive until its first observed beat.
    pub fn new(now_ns: u64, initial: u64, timeout_ns: u64) -> Self {
        Self {
            last_value: initial,
            last_change_ns: now_ns,
            timeout_ns,
            alive: false,
        }
    }

    /// Feeds the current counter.
    pub fn observe(&mut self, now_ns: u64, value: u64) -> Liveness {
        if value != self.last_value {
            self.last_value = value;
            self.last_change_ns = now_ns;
            if !self.alive {
                self.alive = true;
                return Liveness::CameAlive;
            }
            return Liveness::Unchanged;
        }
        if self.alive && now_ns.saturating_sub(self.last_change_ns) > self.timeout_ns {
            self.alive = false;
            return Liveness::Died;
        }
        Liveness::Unchanged
    }

    /// Whether the peer is beating.
    pub fn alive(&self) -> bool {
        self.alive
    }
}

#[cfg(test)]
mod tests;
