//! Strategies in other processes: a pair of SPSC rings in one shared-memory file per strategy.
//!
//! The file (under /dev/shm, mapped with memmap2 by both sides) holds a 4 KiB header and two
//! rings of 64-byte records: commands (strategy → engine) and events (engine → strategy). The
//! layout is fixed and documented in docs/ipc.md so that C, C++ and Python strategies can
//! speak it; sdk/c (C and C++) and sdk/python (standard library only) do, and
//! docs/strategies.md walks through them. Each feed's market data for these strategies is in
//! [`md`].
//!
//! Each ring has a producer index and a consumer index (free-running counts, each on its own
//! cache line, each written by one side only). A producer writes the whole record, then
//! publishes it by storing the new producer index (release); a consumer reads the index
//! (acquire), then the record. A producer killed mid-write therefore never publishes a torn
//! record; and every record carries a CRC-32 and its position, so a record published torn or
//! out of place by a faulty producer is detected, counted and skipped, never applied.
//!
//! Neither side trusts the other's indices. Each side keeps its own index and the last value it
//! saw of the peer's; a peer index that moves backwards (a torn store reads as a drop to 0) or
//! beyond what the ring allows (a tail more than its capacity ahead of the head, a head ahead
//! of the tail) latches a [`ChannelFault`]: the channel is broken, reads nothing and writes
//! nothing more, and the engine says so in the header and treats the strategy as lost. Records
//! are copied out of (and into) the shared slots with atomic word loads (stores), the only
//! access to memory a peer may be writing that Rust defines, and checked after the copy.
//!
//! Liveness: each side increments its heartbeat counter while it runs; the other side watches
//! it on its own clock ([`PeerMonitor`]) — no shared clock is needed. The engine publishes its
//! state, an epoch that grows at every engine start, the venues' SYNCED bits and the strategy's
//! id floor (ClientOrderId sequences at or below it were used before: allocate above it). On
//! attach it resets state and SYNCED bits before anything else, so a header never shows a dead
//! engine's state as this one's; a strategy tells a stale header (an engine killed without a
//! word) from a live one by the engine heartbeat and process id (docs/ipc.md).

pub(crate) mod codec;
pub mod md;
mod names;
pub use names::{fingerprint, VENUE_NAME_LEN};

use std::cell::Cell;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

pub use codec::{
    decode_command, decode_event, encode_command, encode_event, IpcEvent, CANCEL_REJECT_REASONS,
    COMMAND_KINDS, EVENT_KINDS, REJECT_REASONS,
};

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
/// Largest ring index accepted when a channel is opened: no run gets near it (2^62 records at
/// 10^9 a second is 146 years), so `index + 1` never overflows in a run that starts below it.
pub const INDEX_MAX: u64 = 1 << 62;

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
    /// u64 channel fault code the engine declared (0: none; see [`super::ChannelFault::code`]).
    pub const CHANNEL_FAULT: usize = 112;
    /// u64 strategy heartbeat counter.
    pub const STRATEGY_HEARTBEAT: usize = 128;
    /// u64 strategy process id.
    pub const STRATEGY_PID: usize = 136;
    /// u64 the symbol/venue table fingerprint the strategy was built for (0: none declared).
    pub const DECLARED_FINGERPRINT: usize = 144;
    /// u64 commands published (written by the strategy).
    pub const COMMAND_TAIL: usize = 192;
    /// u64 commands consumed (written by the engine).
    pub const COMMAND_HEAD: usize = 256;
    /// u64 events published (written by the engine).
    pub const EVENT_TAIL: usize = 320;
    /// u64 events consumed (written by the strategy).
    pub const EVENT_HEAD: usize = 384;
    /// u64 the offending index value of the declared fault.
    pub const FAULT_FOUND: usize = 448;
    /// u64 the value it was checked against (the last value seen, or the limit).
    pub const FAULT_LIMIT: usize = 456;
    /// u64 the engine's symbol/venue table fingerprint (see `names`).
    pub const CONFIG_FINGERPRINT: usize = 512;
    /// u64 name counts (see `names`).
    pub const NAME_COUNTS: usize = 1024;
    /// First name word.
    pub const NAMES: usize = 1032;
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
    /// The strategy's symbol/venue table is not the engine's.
    #[error(
        "ipc {path}: this strategy's table (symbols {ours:?}, fingerprint {ours_fingerprint:#018x}) \
         is not the engine's (symbols {engine:?}, fingerprint {engine_fingerprint:#018x})"
    )]
    TableMismatch {
        /// The file.
        path: PathBuf,
        /// The strategy's symbols.
        ours: Vec<String>,
        /// The engine's symbols.
        engine: Vec<String>,
        /// The strategy's fingerprint.
        ours_fingerprint: u64,
        /// The engine's fingerprint.
        engine_fingerprint: u64,
    },
    /// Another live process writes this channel (its pid is in the strategy-pid word): one
    /// writer per channel. The same refusal and words as the C and Python SDKs'.
    #[error("{path}: process {writer} writes this channel already")]
    InUse {
        /// The file.
        path: PathBuf,
        /// The live writer's pid.
        writer: u64,
    },
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

/// Which ring of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingKind {
    /// Strategy → engine.
    Commands,
    /// Engine → strategy.
    Events,
}

impl std::fmt::Display for RingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Commands => "command ring tail",
            Self::Events => "event ring head",
        })
    }
}

/// A peer index the protocol does not allow: the channel is broken for good (the engine makes
/// a new file at its next start). Codes cross the process boundary (header word 112).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChannelFault {
    /// The peer's index went back (a torn store reads as a drop to 0).
    #[error("{ring} went back from {last} to {found}")]
    Backwards {
        /// The ring.
        ring: RingKind,
        /// The value seen before.
        last: u64,
        /// The value now.
        found: u64,
    },
    /// The peer's index went past what the ring allows: a tail more than the capacity ahead
    /// of the head, or a head ahead of the tail.
    #[error("{ring} {found} is beyond {limit}")]
    Beyond {
        /// The ring.
        ring: RingKind,
        /// The value found.
        found: u64,
        /// The largest value allowed.
        limit: u64,
    },
    /// The strategy declared a symbol/venue table other than the engine's: its indices
    /// would name other symbols.
    #[error(
        "the strategy's symbol/venue table (fingerprint {declared:#018x}) is not the engine's \
         ({engine:#018x})"
    )]
    TableMismatch {
        /// The strategy's declared fingerprint.
        declared: u64,
        /// The engine's.
        engine: u64,
    },
}

impl ChannelFault {
    /// The code published in the header: 1 command tail backwards, 2 command tail beyond
    /// capacity, 3 event head backwards, 4 event head beyond the event tail.
    pub fn code(&self) -> u64 {
        match self {
            Self::Backwards {
                ring: RingKind::Commands,
                ..
            } => 1,
            Self::Beyond {
                ring: RingKind::Commands,
                ..
            } => 2,
            Self::Backwards {
                ring: RingKind::Events,
                ..
            } => 3,
            Self::Beyond {
                ring: RingKind::Events,
                ..
            } => 4,
            Self::TableMismatch { .. } => 5,
        }
    }

    fn values(&self) -> (u64, u64) {
        match *self {
            Self::Backwards { last, found, .. } => (found, last),
            Self::Beyond { found, limit, .. } => (found, limit),
            Self::TableMismatch { declared, engine } => (declared, engine),
        }
    }

    fn from_header(code: u64, found: u64, limit: u64) -> Option<Self> {
        let (ring, backwards) = match code {
            1 => (RingKind::Commands, true),
            2 => (RingKind::Commands, false),
            3 => (RingKind::Events, true),
            4 => (RingKind::Events, false),
            5 => {
                return Some(Self::TableMismatch {
                    declared: found,
                    engine: limit,
                })
            }
            _ => return None,
        };
        Some(if backwards {
            Self::Backwards {
                ring,
                last: limit,
                found,
            }
        } else {
            Self::Beyond { ring, found, limit }
        })
    }
}

/// Which end of the channel this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Engine,
    Strategy,
}

#[derive(Debug, Clone, Copy)]
struct Ring {
    kind: RingKind,
    base: usize,
    capacity: u64,
    tail: usize,
    head: usize,
}

/// This side's view of one ring: its own index (never read back from shared memory, where the
/// peer could change it) and the last value it accepted of the peer's.
#[derive(Debug)]
struct Cursor {
    own: Cell<u64>,
    peer: Cell<u64>,
}

/// One strategy's channel, from either side.
#[derive(Debug)]
pub struct Channel {
    /// Start of the mapping (shared with the peer; all access goes through this pointer).
    base: *mut u8,
    map: MmapMut,
    path: PathBuf,
    role: Role,
    commands: Ring,
    events: Ring,
    command_cursor: Cursor,
    event_cursor: Cursor,
    fault: Cell<Option<ChannelFault>>,
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

/// A consumer's check of the producer's tail: never back, never more than a ring ahead.
fn check_tail(ring: Ring, head: u64, last: u64, tail: u64) -> Result<(), ChannelFault> {
    if tail < last {
        return Err(ChannelFault::Backwards {
            ring: ring.kind,
            last,
            found: tail,
        });
    }
    // last >= head, so tail >= head here.
    if tail - head > ring.capacity {
        return Err(ChannelFault::Beyond {
            ring: ring.kind,
            found: tail,
            limit: head + ring.capacity,
        });
    }
    Ok(())
}

/// A producer's check of the consumer's head: never back, never past the tail.
fn check_head(ring: Ring, tail: u64, last: u64, head: u64) -> Result<(), ChannelFault> {
    if head < last {
        return Err(ChannelFault::Backwards {
            ring: ring.kind,
            last,
            found: head,
        });
    }
    if head > tail {
        return Err(ChannelFault::Beyond {
            ring: ring.kind,
            found: head,
            limit: tail,
        });
    }
    Ok(())
}

impl Channel {
    /// Engine side: creates the channel file, or re-attaches to a valid one of the same
    /// shape (after an engine restart the strategy may still be mapped to it: its indices
    /// and unread records are kept). Before anything else the header is reset to what this
    /// engine knows: state `Starting`, no venue SYNCED, no fault; then the epoch grows by one.
    /// A file whose indices are inconsistent or that a previous engine declared broken is
    /// replaced by a new one (a new inode: an old mapping is never rewritten under a peer).
    pub fn create_or_attach(
        path: &Path,
        strategy: StrategyId,
        command_capacity: u32,
        event_capacity: u32,
    ) -> Result<Self, IpcError> {
        check_capacity(command_capacity)?;
        check_capacity(event_capacity)?;
        let reusable = Self::open(path).is_ok_and(|c| {
            c.strategy == strategy
                && c.commands.capacity == u64::from(command_capacity)
                && c.events.capacity == u64::from(event_capacity)
                && c.published_fault().is_none()
        });
        if !reusable {
            Self::create(path, strategy, command_capacity, event_capacity)?;
        }
        let channel = Self::open_as(path, Role::Engine)?;
        channel.set_engine_state(EngineState::Starting);
        channel.set_venues_synced(0);
        channel
            .word(offset::CHANNEL_FAULT)
            .store(0, Ordering::Release);
        channel
            .word(offset::ENGINE_PID)
            .store(u64::from(std::process::id()), Ordering::Release);
        channel
            .word(offset::ENGINE_EPOCH)
            .fetch_add(1, Ordering::AcqRel);
        Ok(channel)
    }

    fn create(
        path: &Path,
        strategy: StrategyId,
        command_capacity: u32,
        event_capacity: u32,
    ) -> Result<(), IpcError> {
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
            // Owner and group only: whoever can write a channel can send its orders.
            .mode(0o660)
            .open(path)
            .map_err(io)?;
        let len = file_len(command_capacity, event_capacity);
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
        Ok(())
    }

    /// Strategy side: opens an existing channel and checks its header and indices.
    pub fn open(path: &Path) -> Result<Self, IpcError> {
        Self::open_as(path, Role::Strategy)
    }

    fn open_as(path: &Path, role: Role) -> Result<Self, IpcError> {
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
        let mut map = map(path, &file)?;
        if map.len() < HEADER_LEN {
            return Err(bad(format!(
                "length {}, shorter than the header",
                map.len()
            )));
        }
        let base = map.as_mut_ptr();
        // The header is read word by word with atomic loads: the peer may be writing it.
        let word = |at: usize| {
            // SAFETY: as in `Channel::word`: page-aligned mapping of at least HEADER_LEN
            // bytes, `at` a multiple of 8 inside the header, accessed only atomically.
            #[allow(unsafe_code)]
            unsafe {
                (*base.add(at).cast::<AtomicU64>()).load(Ordering::Acquire)
            }
        };
        let magic = word(offset::MAGIC).to_ne_bytes();
        if magic != MAGIC {
            return Err(bad(format!("magic {magic:?}")));
        }
        let (version, record_len) = split(word(offset::VERSION));
        if version != VERSION {
            return Err(bad(format!(
                "version {version}, this keel speaks {VERSION}"
            )));
        }
        if record_len as usize != RECORD_LEN {
            return Err(bad(format!("record length {record_len}")));
        }
        let (cc, ec) = split(word(offset::COMMAND_CAPACITY));
        check_capacity(cc).map_err(|_| bad(format!("command capacity {cc}")))?;
        check_capacity(ec).map_err(|_| bad(format!("event capacity {ec}")))?;
        if map.len() != file_len(cc, ec) {
            return Err(bad(format!(
                "length {}, capacities {cc} and {ec} need {}",
                map.len(),
                file_len(cc, ec)
            )));
        }
        let strategy = StrategyId(split(word(offset::STRATEGY)).0 as u16);
        let commands = Ring {
            kind: RingKind::Commands,
            base: HEADER_LEN,
            capacity: u64::from(cc),
            tail: offset::COMMAND_TAIL,
            head: offset::COMMAND_HEAD,
        };
        let events = Ring {
            kind: RingKind::Events,
            base: HEADER_LEN + cc as usize * RECORD_LEN,
            capacity: u64::from(ec),
            tail: offset::EVENT_TAIL,
            head: offset::EVENT_HEAD,
        };
        // Indices a protocol-abiding pair could not have left: a strategy refuses the file;
        // an engine (which replaces such a file before it attaches, see `create_or_attach`,
        // but may meet one written in between) attaches with the fault latched, so the bridge
        // declares the channel broken on its first pass instead of failing the engine's start.
        let cursor = |ring: Ring, own_is_tail: bool| {
            let (tail, head) = (word(ring.tail), word(ring.head));
            let (own, peer) = if own_is_tail {
                (tail, head)
            } else {
                (head, tail)
            };
            let cursor = Cursor {
                own: Cell::new(own),
                peer: Cell::new(peer),
            };
            if head <= tail && tail - head <= ring.capacity && tail <= INDEX_MAX {
                return Ok((cursor, None));
            }
            if role == Role::Strategy {
                let name = match ring.kind {
                    RingKind::Commands => "command",
                    RingKind::Events => "event",
                };
                return Err(bad(format!(
                    "{name} ring: head {head}, tail {tail}, capacity {}",
                    ring.capacity
                )));
            }
            let limit = if own_is_tail {
                own
            } else {
                own.saturating_add(ring.capacity).min(INDEX_MAX)
            };
            let fault = ChannelFault::Beyond {
                ring: ring.kind,
                found: peer,
                limit,
            };
            Ok((cursor, Some(fault)))
        };
        let (command_cursor, command_fault) = cursor(commands, role == Role::Strategy)?;
        let (event_cursor, event_fault) = cursor(events, role == Role::Engine)?;
        Ok(Self {
            base,
            map,
            path: path.to_path_buf(),
            role,
            commands,
            events,
            command_cursor,
            event_cursor,
            fault: Cell::new(command_fault.or(event_fault)),
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

    /// Why this side stopped using the channel: a peer index it refused (latched).
    pub fn fault(&self) -> Option<ChannelFault> {
        self.fault.get()
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(at % 8 == 0 && at + 8 <= HEADER_LEN, "header word {at}");
        // SAFETY: the mapping is page-aligned, at least HEADER_LEN long (checked at open) and
        // `at` is a multiple of 8 inside the header, so the pointer is aligned and valid for
        // the mapping's lifetime (tied to &self). Header words are only ever accessed
        // atomically by this process.
        #[allow(unsafe_code)]
        unsafe {
            &*self.base.add(at).cast::<AtomicU64>()
        }
    }

    /// The eight words of the slot of `position`.
    fn slot(&self, ring: Ring, position: u64) -> &[AtomicU64; RECORD_LEN / 8] {
        let at = ring.base + (position & (ring.capacity - 1)) as usize * RECORD_LEN;
        assert!(
            at + RECORD_LEN <= self.map.len(),
            "slot {at} outside the mapping"
        );
        // SAFETY: `at + RECORD_LEN` is inside the mapping (asserted above) and `at` is a
        // multiple of 64 from a page-aligned base, so the words are aligned; this process
        // accesses slots only through these atomics, for the mapping's lifetime (&self).
        #[allow(unsafe_code)]
        unsafe {
            &*self.base.add(at).cast::<[AtomicU64; RECORD_LEN / 8]>()
        }
    }

    /// Copies a record out of shared memory (the peer may be writing it: it is checked after).
    fn read_record(&self, ring: Ring, position: u64) -> [u8; RECORD_LEN] {
        let mut record = [0u8; RECORD_LEN];
        for (bytes, word) in record.chunks_exact_mut(8).zip(self.slot(ring, position)) {
            bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
        }
        record
    }

    fn write_record(&self, ring: Ring, position: u64, record: &[u8; RECORD_LEN]) {
        for (bytes, word) in record.chunks_exact(8).zip(self.slot(ring, position)) {
            word.store(
                u64::from_ne_bytes(bytes.try_into().expect("8")),
                Ordering::Relaxed,
            );
        }
    }

    fn cursor(&self, ring: Ring) -> &Cursor {
        match ring.kind {
            RingKind::Commands => &self.command_cursor,
            RingKind::Events => &self.event_cursor,
        }
    }

    fn produces(&self, ring: Ring) -> bool {
        matches!(
            (self.role, ring.kind),
            (Role::Strategy, RingKind::Commands) | (Role::Engine, RingKind::Events)
        )
    }

    /// Reads and checks the peer's index of `ring`; a bad one latches the fault.
    fn peer_index(&self, ring: Ring) -> Option<u64> {
        if self.fault.get().is_some() {
            return None;
        }
        let cursor = self.cursor(ring);
        let (own, last) = (cursor.own.get(), cursor.peer.get());
        let checked = if self.produces(ring) {
            let head = self.word(ring.head).load(Ordering::Acquire);
            check_head(ring, own, last, head).map(|()| head)
        } else {
            let tail = self.word(ring.tail).load(Ordering::Acquire);
            check_tail(ring, own, last, tail).map(|()| tail)
        };
        match checked {
            Ok(peer) => {
                cursor.peer.set(peer);
                Some(peer)
            }
            Err(fault) => {
                self.fault.set(Some(fault));
                None
            }
        }
    }

    fn push(&self, ring: Ring, record: &[u8; RECORD_LEN]) -> bool {
        debug_assert!(self.produces(ring));
        let Some(head) = self.peer_index(ring) else {
            return false;
        };
        let cursor = self.cursor(ring);
        let tail = cursor.own.get();
        if tail - head >= ring.capacity {
            return false;
        }
        let mut stamped = *record;
        codec::seal(&mut stamped, tail);
        self.write_record(ring, tail, &stamped);
        // Below INDEX_MAX + records of one run: never overflows.
        cursor.own.set(tail + 1);
        self.word(ring.tail).store(tail + 1, Ordering::Release);
        true
    }

    fn pop(&self, ring: Ring) -> Option<(u64, [u8; RECORD_LEN])> {
        debug_assert!(!self.produces(ring));
        let tail = self.peer_index(ring)?;
        let cursor = self.cursor(ring);
        let head = cursor.own.get();
        if head == tail {
            return None;
        }
        let record = self.read_record(ring, head);
        cursor.own.set(head + 1);
        self.word(ring.head).store(head + 1, Ordering::Release);
        Some((head, record))
    }

    /// Records published and not consumed (0 on a broken channel).
    fn len(&self, ring: Ring) -> u64 {
        let Some(peer) = self.peer_index(ring) else {
            return 0;
        };
        let own = self.cursor(ring).own.get();
        if self.produces(ring) {
            own - peer
        } else {
            peer - own
        }
    }

    // ----- strategy side -----------------------------------------------------------------

    /// Strategy: publishes one command; false if the command ring is full or broken.
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

    /// Strategy: records this process as the channel's only writer. Refused
    /// ([`IpcError::InUse`]) while another live process holds it — a strategy, or a drill —
    /// exactly as the C and Python SDKs refuse; a pid whose process is gone is taken over.
    pub fn claim_strategy(&self) -> Result<(), IpcError> {
        let me = u64::from(std::process::id());
        let word = self.word(offset::STRATEGY_PID);
        let mut writer = word.load(Ordering::Acquire);
        loop {
            if writer != 0 && writer != me && process_exists(writer) {
                return Err(IpcError::InUse {
                    path: self.path.clone(),
                    writer,
                });
            }
            match word.compare_exchange(writer, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => writer = now,
            }
        }
    }

    // ----- engine side -------------------------------------------------------------------

    /// Engine: the next command, or why the next record was refused. `None` when the ring is
    /// empty or the channel is broken ([`Channel::fault`] says which).
    pub fn pop_command(&self) -> Option<Result<Command, RecordError>> {
        self.pop(self.commands)
            .map(|(position, record)| decode_command(position, &record))
    }

    /// Engine: publishes one event; false if the event ring is full or broken.
    pub fn push_event(&self, event: &Event) -> bool {
        self.push(self.events, &encode_event(&IpcEvent::Event(*event)))
    }

    /// Engine: tells the strategy that a command record was refused.
    pub fn push_malformed(&self, error: RecordError) -> bool {
        self.push(self.events, &encode_event(&IpcEvent::Malformed(error)))
    }

    /// Events the engine may still publish before the ring is full (0 when broken).
    pub fn event_room(&self) -> u64 {
        debug_assert!(self.produces(self.events), "the engine's question");
        match self.peer_index(self.events) {
            Some(head) => self.events.capacity - (self.event_cursor.own.get() - head),
            None => 0,
        }
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

    /// Engine: declares the channel broken in the header (the values first, the code last).
    pub fn publish_fault(&self, fault: ChannelFault) {
        let (found, limit) = fault.values();
        self.word(offset::FAULT_FOUND)
            .store(found, Ordering::Relaxed);
        self.word(offset::FAULT_LIMIT)
            .store(limit, Ordering::Relaxed);
        self.word(offset::CHANNEL_FAULT)
            .store(fault.code(), Ordering::Release);
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

    /// The process id of the engine that attached last (check that it lives: a header whose
    /// engine is gone is stale).
    pub fn engine_pid(&self) -> u64 {
        self.word(offset::ENGINE_PID).load(Ordering::Acquire)
    }

    /// The fault the engine declared, if it declared one (it then reads and writes nothing
    /// more on this file).
    pub fn published_fault(&self) -> Option<ChannelFault> {
        let code = self.word(offset::CHANNEL_FAULT).load(Ordering::Acquire);
        ChannelFault::from_header(
            code,
            self.word(offset::FAULT_FOUND).load(Ordering::Relaxed),
            self.word(offset::FAULT_LIMIT).load(Ordering::Relaxed),
        )
    }

    /// The id floor the engine published.
    pub fn id_floor(&self) -> u64 {
        self.word(offset::ID_FLOOR).load(Ordering::Acquire)
    }

    /// Whether the engine says venue `v` is SYNCED.
    pub fn venue_synced(&self, v: crate::order::VenueId) -> bool {
        v.0 < 64 && self.word(offset::VENUES_SYNCED).load(Ordering::Acquire) & (1 << v.0) != 0
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

#[cfg(test)]
impl Channel {
    /// Tests: publishes a command record as given (sealed at its position), whatever its
    /// fields say.
    pub(crate) fn push_command_record(&self, record: &[u8; RECORD_LEN]) -> bool {
        self.push(self.commands, record)
    }

    /// Tests: stores a value into a header word, as a hostile peer would.
    pub(crate) fn store_word(&self, at: usize, value: u64) {
        self.word(at).store(value, Ordering::Release);
    }
}

impl Drop for Channel {
    /// An engine that lets go of its channel (a clean stop, a start that failed after the
    /// attach, a loop that panicked) says so: the header never keeps its `Running`.
    fn drop(&mut self) {
        if self.role == Role::Engine {
            self.set_venues_synced(0);
            self.set_engine_state(EngineState::Stopped);
        }
    }
}

/// The two u32 halves of a little-endian header word: (bytes 0..4, bytes 4..8).
fn split(word: u64) -> (u32, u32) {
    let b = word.to_ne_bytes();
    (
        u32::from_le_bytes(b[0..4].try_into().expect("4")),
        u32::from_le_bytes(b[4..8].try_into().expect("4")),
    )
}

// SAFETY: `base` points into `map`, which the channel owns and moves with it; every access
// through it is atomic (header words and record words). The cursors are `Cell`s: the channel
// is `Send` (one thread at a time) but not `Sync`.
#[allow(unsafe_code)]
unsafe impl Send for Channel {}

fn map(path: &Path, file: &std::fs::File) -> Result<MmapMut, IpcError> {
    // SAFETY: the channel file is shared on purpose with one peer process; every shared word
    // is accessed atomically and every record is copied out (with atomic loads) before it is
    // checked and used, so a misbehaving peer can corrupt records (caught by their checksums)
    // or indices (refused: the channel is declared broken) but not this process's memory
    // safety. The file is never truncated by keel while mapped: a new channel is always a new
    // file.
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

/// Whether process `pid` exists (its `/proc` entry; a pid past Linux's range never does).
fn process_exists(pid: u64) -> bool {
    pid <= 0x7fff_ffff && std::path::Path::new(&format!("/proc/{pid}")).exists()
}
