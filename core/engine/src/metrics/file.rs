//! The counters file: labelled counters, gauges and latency histograms in shared memory, written
//! by the engine's loops and read by any process (`keel stat`, the side thread's `/metrics`, a
//! C or Python reader), in the manner of Aeron's CnC file. Layout in docs/observability.md.
//!
//! Each loop owns a *region*: a run of `u64` values only it writes, with plain atomic stores,
//! inside a sequence lock (the region's sequence word is odd while the loop writes, and grows by
//! two per publication), so a reader copies a consistent snapshot or retries. No lock, no
//! allocation, no system call on the writer's side. Descriptors (kind, region, slot, width,
//! name, labels) are written once, at creation, before the header's magic.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::MmapMut;

use super::histogram::{Histogram, BUCKETS};

/// File magic.
pub const MAGIC: [u8; 8] = *b"KEELCNT\0";
/// Layout version.
pub const VERSION: u32 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 4096;
/// Bytes of one descriptor.
pub const DESCRIPTOR_LEN: usize = 128;
/// Bytes of a descriptor's name field.
pub const NAME_LEN: usize = 48;
/// Bytes of a descriptor's labels field.
pub const LABELS_LEN: usize = 64;
/// Regions a file may have.
pub const REGIONS_MAX: usize = 8;
/// Bytes of a region's own header (its sequence word and publication stamps), before its
/// values; one cache line each so two loops' regions never share one.
pub const REGION_HEADER_LEN: usize = 64;

/// Header offsets.
pub mod offset {
    /// `u8[8]` magic.
    pub const MAGIC: usize = 0;
    /// `u32` version.
    pub const VERSION: usize = 8;
    /// `u32` descriptor count.
    pub const DESCRIPTORS: usize = 12;
    /// `u32` region count.
    pub const REGIONS: usize = 16;
    /// `u64` engine process id.
    pub const PID: usize = 24;
    /// `u64` Unix ns at the engine's start.
    pub const STARTED_UNIX_NS: usize = 32;
    /// `u64` engine state: 1 starting, 2 running, 3 stopped.
    pub const STATE: usize = 40;
    /// Region table: per region `u64` byte offset of its header, `u64` value count.
    pub const REGION_TABLE: usize = 64;
}

/// What a descriptor describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows (Prometheus `counter`).
    Counter = 1,
    /// Goes up and down (Prometheus `gauge`).
    Gauge = 2,
    /// A latency histogram: `count`, `sum` (ns), then [`BUCKETS`] bucket counts
    /// (docs/observability.md numbers them).
    Histogram = 3,
}

impl MetricKind {
    fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(Self::Counter),
            2 => Some(Self::Gauge),
            3 => Some(Self::Histogram),
            _ => None,
        }
    }

    /// The `u64` values it takes.
    pub fn width(self) -> usize {
        match self {
            Self::Counter | Self::Gauge => 1,
            Self::Histogram => 2 + BUCKETS,
        }
    }
}

/// One metric's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Its kind.
    pub kind: MetricKind,
    /// The region (loop) that writes it.
    pub region: u32,
    /// Its first value's index in the region.
    pub slot: u32,
    /// Prometheus-style name (`keel_venue_connects_total`).
    pub name: String,
    /// Prometheus-style labels (`venue="sim"`), or empty.
    pub labels: String,
}

/// Where a metric's values are, for the loop that writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(pub u32);

/// The metrics of one engine, before the file exists.
#[derive(Debug, Default, Clone)]
pub struct Layout {
    descriptors: Vec<Descriptor>,
    region_len: [u32; REGIONS_MAX],
}

/// Why the counters file could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    /// A file operation failed.
    #[error("counters file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a counters file of this version, or one whose tables do not fit it.
    #[error("counters file {path}: {what}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A name or labels too long for their field.
    #[error("metric {0}: name or labels too long (at most {NAME_LEN} and {LABELS_LEN} bytes)")]
    TooLong(String),
}

impl Layout {
    /// Adds a metric written by `region`; returns where its values go.
    pub fn add(
        &mut self,
        region: u32,
        kind: MetricKind,
        name: &str,
        labels: &str,
    ) -> Result<Slot, CountersError> {
        if name.len() > NAME_LEN || labels.len() > LABELS_LEN {
            return Err(CountersError::TooLong(format!("{name}{{{labels}}}")));
        }
        assert!((region as usize) < REGIONS_MAX, "region {region}");
        let slot = self.region_len[region as usize];
        self.region_len[region as usize] += kind.width() as u32;
        self.descriptors.push(Descriptor {
            kind,
            region,
            slot,
            name: name.into(),
            labels: labels.into(),
        });
        Ok(Slot(slot))
    }

    /// The descriptors, in order.
    pub fn descriptors(&self) -> &[Descriptor] {
        &self.descriptors
    }

    fn regions(&self) -> usize {
        self.region_len
            .iter()
            .rposition(|&n| n > 0)
            .map_or(1, |i| i + 1)
    }

    /// Byte offset of each region's header, and the file's length.
    fn placement(&self) -> (Vec<usize>, usize) {
        let mut at = HEADER_LEN + self.descriptors.len() * DESCRIPTOR_LEN;
        at = at.div_ceil(64) * 64;
        let mut regions = Vec::new();
        for r in 0..self.regions() {
            regions.push(at);
            at += REGION_HEADER_LEN + (self.region_len[r] as usize * 8).div_ceil(64) * 64;
        }
        (regions, at)
    }
}

/// The counters file, as the engine holds it: one writer per region.
#[derive(Debug)]
pub struct CountersFile {
    map: Arc<MmapMut>,
    path: PathBuf,
}

impl CountersFile {
    /// Creates `path` (replacing a file a previous engine left: the caller holds the
    /// directory's engine lock) with `layout`, state `starting`.
    pub fn create(
        path: &Path,
        layout: &Layout,
        pid: u64,
        started_unix_ns: u64,
    ) -> Result<(Self, Vec<RegionWriter>), CountersError> {
        let io = |source| CountersError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let _ = std::fs::remove_file(path);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            // Readable by the owner's group (monitoring), written by the engine only.
            .mode(0o640)
            .open(path)
            .map_err(io)?;
        let (regions, len) = layout.placement();
        file.set_len(len as u64).map_err(io)?;
        // SAFETY: a new file of `len` bytes, shared on purpose with readers that only read it;
        // this process writes its values atomically (below) and never truncates it while
        // mapped.
        #[allow(unsafe_code)]
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        map[offset::VERSION..offset::VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
        let count = layout.descriptors.len() as u32;
        map[offset::DESCRIPTORS..offset::DESCRIPTORS + 4].copy_from_slice(&count.to_le_bytes());
        let region_count = regions.len() as u32;
        map[offset::REGIONS..offset::REGIONS + 4].copy_from_slice(&region_count.to_le_bytes());
        map[offset::PID..offset::PID + 8].copy_from_slice(&pid.to_le_bytes());
        map[offset::STARTED_UNIX_NS..offset::STARTED_UNIX_NS + 8]
            .copy_from_slice(&started_unix_ns.to_le_bytes());
        map[offset::STATE..offset::STATE + 8].copy_from_slice(&1u64.to_le_bytes());
        for (r, &at) in regions.iter().enumerate() {
            let row = offset::REGION_TABLE + r * 16;
            map[row..row + 8].copy_from_slice(&(at as u64).to_le_bytes());
            map[row + 8..row + 16].copy_from_slice(&u64::from(layout.region_len[r]).to_le_bytes());
        }
        for (i, d) in layout.descriptors.iter().enumerate() {
            let at = HEADER_LEN + i * DESCRIPTOR_LEN;
            let rec = &mut map[at..at + DESCRIPTOR_LEN];
            rec[0..4].copy_from_slice(&(d.kind as u32).to_le_bytes());
            rec[4..8].copy_from_slice(&d.region.to_le_bytes());
            rec[8..12].copy_from_slice(&d.slot.to_le_bytes());
            rec[12..16].copy_from_slice(&(d.kind.width() as u32).to_le_bytes());
            rec[16..16 + d.name.len()].copy_from_slice(d.name.as_bytes());
            let l = 16 + NAME_LEN;
            rec[l..l + d.labels.len()].copy_from_slice(d.labels.as_bytes());
        }
        // The magic last: a reader never takes a half-written file for a counters file.
        fence(Ordering::Release);
        map[offset::MAGIC..offset::MAGIC + 8].copy_from_slice(&MAGIC);
        let map = Arc::new(map);
        let writers = regions
            .iter()
            .enumerate()
            .map(|(r, &at)| RegionWriter {
                map: Arc::clone(&map),
                at,
                values: layout.region_len[r] as usize,
            })
            .collect();
        let counters = Self {
            map,
            path: path.to_path_buf(),
        };
        Ok((counters, writers))
    }

    /// Sets the engine state word (1 starting, 2 running, 3 stopped).
    pub fn set_state(&self, state: u64) {
        self.word(offset::STATE).store(state, Ordering::Release);
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(at % 8 == 0 && at + 8 <= HEADER_LEN);
        // SAFETY: inside the header, 8-aligned (the mapping is page-aligned), valid while
        // `self` lives.
        #[allow(unsafe_code)]
        unsafe {
            &*self.map.as_ptr().add(at).cast::<AtomicU64>()
        }
    }
}

/// One loop's region: only that loop writes it (the mapping is shared with the file, kept
/// alive by whichever holds it last).
#[derive(Debug)]
pub struct RegionWriter {
    map: Arc<MmapMut>,
    /// Byte offset of the region's header.
    at: usize,
    values: usize,
}

impl RegionWriter {
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < 8 + self.values, "value {i} of {}", self.values);
        let at = self.at + i * 8;
        assert!(at + 8 <= self.map.len());
        // SAFETY: the region's header (8 words) and its `values` words lie inside the mapping
        // (placement sized it; asserted), 8-aligned (regions start on 64-byte boundaries of a
        // page-aligned mapping), alive while `self` holds the `Arc`. Shared memory: accessed
        // only atomically.
        #[allow(unsafe_code)]
        unsafe {
            &*self.map.as_ptr().add(at).cast::<AtomicU64>()
        }
    }

    /// Opens a publication: the sequence turns odd (readers wait).
    #[inline]
    pub fn begin(&mut self) {
        let seq = self.word(0).load(Ordering::Relaxed);
        self.word(0).store(seq | 1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Closes it at loop time `now_ns`: the sequence turns even again.
    #[inline]
    pub fn end(&mut self, now_ns: u64) {
        self.word(1).store(now_ns, Ordering::Relaxed);
        let publications = self.word(2).load(Ordering::Relaxed);
        self.word(2).store(publications + 1, Ordering::Relaxed);
        let seq = self.word(0).load(Ordering::Relaxed);
        self.word(0).store((seq | 1) + 1, Ordering::Release);
    }

    /// Writes one counter or gauge.
    #[inline]
    pub fn set(&mut self, slot: Slot, value: u64) {
        self.word(8 + slot.0 as usize)
            .store(value, Ordering::Relaxed);
    }

    /// Writes a histogram (count, sum, buckets).
    pub fn set_histogram(&mut self, slot: Slot, h: &Histogram) {
        let at = 8 + slot.0 as usize;
        self.word(at).store(h.count(), Ordering::Relaxed);
        self.word(at + 1).store(h.sum_ns(), Ordering::Relaxed);
        for (b, &c) in h.counts().iter().enumerate() {
            self.word(at + 2 + b).store(c, Ordering::Relaxed);
        }
    }
}

/// One metric's value in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A counter or gauge.
    Scalar(u64),
    /// A histogram.
    Histogram {
        /// Values recorded.
        count: u64,
        /// Their sum, ns.
        sum_ns: u64,
        /// Per bucket.
        counts: Vec<u64>,
    },
}

/// A consistent copy of a counters file.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Engine process id.
    pub pid: u64,
    /// Unix ns at the engine's start.
    pub started_unix_ns: u64,
    /// 1 starting, 2 running, 3 stopped.
    pub state: u64,
    /// Per region: publications so far and the loop time of the last.
    pub regions: Vec<(u64, u64)>,
    /// Every metric and its value.
    pub metrics: Vec<(Descriptor, Value)>,
}

impl Snapshot {
    /// The value of metric `name` with `labels`, if present.
    pub fn get(&self, name: &str, labels: &str) -> Option<&Value> {
        self.metrics
            .iter()
            .find(|(d, _)| d.name == name && d.labels == labels)
            .map(|(_, v)| v)
    }

    /// A counter or gauge's value (0 when absent).
    pub fn scalar(&self, name: &str, labels: &str) -> u64 {
        match self.get(name, labels) {
            Some(Value::Scalar(v)) => *v,
            _ => 0,
        }
    }
}

/// A reader of a counters file (any process).
#[derive(Debug)]
pub struct CountersReader {
    map: memmap2::Mmap,
    path: PathBuf,
    descriptors: Vec<Descriptor>,
    regions: Vec<(usize, usize)>,
}

impl CountersReader {
    /// Opens `path` and checks its header and tables against its length.
    pub fn open(path: &Path) -> Result<Self, CountersError> {
        let io = |source| CountersError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bad = |what: String| CountersError::Bad {
            path: path.to_path_buf(),
            what,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: read-only mapping of a file another process writes atomically; values are
        // read with atomic loads and every offset is checked against the length first.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        if map.len() < HEADER_LEN || map[..8] != MAGIC {
            return Err(bad("not a keel counters file (magic)".into()));
        }
        let u32_at = |at: usize| u32::from_le_bytes(map[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(map[at..at + 8].try_into().expect("8"));
        if u32_at(offset::VERSION) != VERSION {
            return Err(bad(format!(
                "version {}, this keel reads {VERSION}",
                u32_at(offset::VERSION)
            )));
        }
        let count = u32_at(offset::DESCRIPTORS) as usize;
        let region_count = u32_at(offset::REGIONS) as usize;
        if region_count > REGIONS_MAX || HEADER_LEN + count * DESCRIPTOR_LEN > map.len() {
            return Err(bad(format!("{count} descriptors, {region_count} regions")));
        }
        let mut regions = Vec::new();
        for r in 0..region_count {
            let row = offset::REGION_TABLE + r * 16;
            let (at, values) = (u64_at(row) as usize, u64_at(row + 8) as usize);
            let end = at
                .checked_add(REGION_HEADER_LEN)
                .and_then(|e| e.checked_add(values.checked_mul(8)?));
            if at % 64 != 0 || end.is_none_or(|e| e > map.len()) {
                return Err(bad(format!("region {r} at {at} with {values} values")));
            }
            regions.push((at, values));
        }
        let text = |b: &[u8]| {
            let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            String::from_utf8_lossy(&b[..end]).into_owned()
        };
        let mut descriptors = Vec::with_capacity(count);
        for i in 0..count {
            let at = HEADER_LEN + i * DESCRIPTOR_LEN;
            let rec = &map[at..at + DESCRIPTOR_LEN];
            let code = u32::from_le_bytes(rec[0..4].try_into().expect("4"));
            let kind = MetricKind::from_code(code)
                .ok_or_else(|| bad(format!("descriptor {i}: kind {code}")))?;
            let region = u32::from_le_bytes(rec[4..8].try_into().expect("4"));
            let slot = u32::from_le_bytes(rec[8..12].try_into().expect("4"));
            let width = u32::from_le_bytes(rec[12..16].try_into().expect("4")) as usize;
            let fits = regions
                .get(region as usize)
                .is_some_and(|&(_, values)| slot as usize + width <= values);
            if width != kind.width() || !fits {
                return Err(bad(format!(
                    "descriptor {i}: region {region} slot {slot} width {width}"
                )));
            }
            descriptors.push(Descriptor {
                kind,
                region,
                slot,
                name: text(&rec[16..16 + NAME_LEN]),
                labels: text(&rec[16 + NAME_LEN..16 + NAME_LEN + LABELS_LEN]),
            });
        }
        Ok(Self {
            map,
            path: path.to_path_buf(),
            descriptors,
            regions,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn word(&self, at: usize) -> u64 {
        assert!(at % 8 == 0 && at + 8 <= self.map.len());
        // SAFETY: inside the mapping (asserted), 8-aligned; read atomically because the
        // engine writes it concurrently.
        #[allow(unsafe_code)]
        let w = unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU64>() };
        w.load(Ordering::Relaxed)
    }

    /// A consistent copy of every region (retrying a region its loop was writing, at most
    /// `tries` times; then the last copy, possibly torn, is returned).
    pub fn snapshot(&self) -> Snapshot {
        let mut values: Vec<Vec<u64>> = Vec::with_capacity(self.regions.len());
        let mut stamps = Vec::with_capacity(self.regions.len());
        for &(at, n) in &self.regions {
            let mut copy = vec![0u64; n];
            for _ in 0..1_000 {
                let before = self.word(at);
                fence(Ordering::Acquire);
                for (i, v) in copy.iter_mut().enumerate() {
                    *v = self.word(at + REGION_HEADER_LEN + i * 8);
                }
                fence(Ordering::Acquire);
                let after = self.word(at);
                if before % 2 == 0 && before == after {
                    break;
                }
                std::hint::spin_loop();
            }
            stamps.push((self.word(at + 16), self.word(at + 8)));
            values.push(copy);
        }
        let metrics = self
            .descriptors
            .iter()
            .map(|d| {
                let v = &values[d.region as usize][d.slot as usize..];
                let value = match d.kind {
                    MetricKind::Counter | MetricKind::Gauge => Value::Scalar(v[0]),
                    MetricKind::Histogram => Value::Histogram {
                        count: v[0],
                        sum_ns: v[1],
                        counts: v[2..2 + BUCKETS].to_vec(),
                    },
                };
                (d.clone(), value)
            })
            .collect();
        Snapshot {
            pid: self.word(offset::PID),
            started_unix_ns: self.word(offset::STARTED_UNIX_NS),
            state: self.word(offset::STATE),
            regions: stamps,
            metrics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: what the loops write is what a reader reads, by name and labels, histograms
    // included; a file that is not a counters file, or whose tables do not fit it, is refused.
    #[test]
    fn writers_and_readers_agree_and_bad_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counters");
        let mut layout = Layout::default();
        let a = layout
            .add(0, MetricKind::Counter, "keel_commands_total", "")
            .unwrap();
        let h = layout
            .add(
                0,
                MetricKind::Histogram,
                "keel_ack_seconds",
                "venue=\"sim\"",
            )
            .unwrap();
        let g = layout
            .add(1, MetricKind::Gauge, "keel_link_state", "venue=\"sim\"")
            .unwrap();
        assert!(layout
            .add(1, MetricKind::Gauge, &"x".repeat(49), "")
            .is_err());
        let (file, mut writers) = CountersFile::create(&path, &layout, 42, 7).unwrap();
        let mut hist = Histogram::default();
        hist.record(1_000);
        hist.record(3_000);
        writers[0].begin();
        writers[0].set(a, 5);
        writers[0].set_histogram(h, &hist);
        writers[0].end(100);
        writers[1].begin();
        writers[1].set(g, 4);
        writers[1].end(200);
        file.set_state(2);
        let snap = CountersReader::open(&path).unwrap().snapshot();
        assert_eq!((snap.pid, snap.started_unix_ns, snap.state), (42, 7, 2));
        assert_eq!(snap.scalar("keel_commands_total", ""), 5);
        assert_eq!(snap.scalar("keel_link_state", "venue=\"sim\""), 4);
        match snap.get("keel_ack_seconds", "venue=\"sim\"") {
            Some(Value::Histogram {
                count,
                sum_ns,
                counts,
            }) => {
                assert_eq!((*count, *sum_ns), (2, 4_000));
                assert_eq!(counts.iter().sum::<u64>(), 2);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(snap.regions, vec![(1, 100), (1, 200)]);
        std::fs::write(dir.path().join("x"), vec![0u8; 5000]).unwrap();
        assert!(CountersReader::open(&dir.path().join("x")).is_err());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[offset::REGION_TABLE + 8] = 0xff; // region 0 claims more values than fit
        bytes[offset::REGION_TABLE + 9] = 0xff;
        bytes[offset::REGION_TABLE + 10] = 0xff;
        std::fs::write(dir.path().join("y"), bytes).unwrap();
        assert!(CountersReader::open(&dir.path().join("y")).is_err());
    }
}
