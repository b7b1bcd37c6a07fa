//! The provided buffers behind multishot receive (`UringFeatures::multishot_recv`).
//!
//! One region of `count` buffers of `bytes` each, allocated at start, and the page-aligned ring
//! of entries through which they are handed to the kernel (buffer group 0). A multishot receive
//! completes into whichever buffer the kernel takes next; the reactor copies the bytes into the
//! connection's own receive buffer and hands the buffer back at once. When the connection's
//! buffer is full (its owner has not consumed), the completion is *held*, in arrival order,
//! until the owner consumes: at most `count` completions can be held, one per buffer, so the
//! queue of held completions is bounded by the pool itself. While every buffer is held the
//! kernel ends the connections' multishot receives with ENOBUFS; the reactor re-arms them as
//! buffers come back.
//!
//! What it never does: allocate after [`Provided::new`], or hand the kernel a buffer that a
//! held completion still points into.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// The buffer group every connection's multishot receive names.
pub(super) const GROUP: u16 = 0;

/// A completion whose bytes did not fit its connection's receive buffer yet.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub slot: u32,
    pub bid: u16,
    /// Bytes of the buffer already copied out.
    pub at: u32,
    pub len: u32,
}

/// The pool of provided buffers and its ring. See the module docs.
pub(super) struct Provided {
    entries: *mut BufRingEntry,
    layout: Layout,
    data: Box<[u8]>,
    bytes: u32,
    mask: u16,
    tail: u16,
    /// Completions waiting for room, oldest first (per slot, in arrival order).
    pub held: VecDeque<Held>,
}

impl std::fmt::Debug for Provided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provided")
            .field("count", &(u32::from(self.mask) + 1))
            .field("bytes", &self.bytes)
            .field("held", &self.held.len())
            .finish()
    }
}

impl Provided {
    /// Allocates `count` (a power of two, at most 32,768) buffers of `bytes`, registers their
    /// ring with `ring` as group [`GROUP`] and hands every buffer to the kernel. `None` when the
    /// kernel refuses the ring (before 5.19) or the sizes are unusable: the caller falls back
    /// to one receive per read.
    pub fn new(ring: &IoUring, count: u16, bytes: u32) -> Option<Self> {
        if !count.is_power_of_two() || count > 32_768 || bytes == 0 {
            return None;
        }
        let ring_bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        let layout = Layout::from_size_align(ring_bytes, 4096).ok()?;
        // SAFETY: the layout has a non-zero size (count >= 1); the memory is freed in Drop with
        // the same layout.
        let entries = unsafe { alloc_zeroed(layout) }.cast::<BufRingEntry>();
        if entries.is_null() {
            return None;
        }
        let data = vec![0u8; usize::from(count) * bytes as usize].into_boxed_slice();
        let mut pool = Self {
            entries,
            layout,
            data,
            bytes,
            mask: count - 1,
            tail: 0,
            held: VecDeque::with_capacity(usize::from(count)),
        };
        // SAFETY: `entries` is page-aligned, zeroed memory for `count` entries that lives as
        // long as `pool`; the reactor drops its ring (which unregisters the group) before its
        // pool (field order), so the kernel never reads the ring after it is freed.
        let registered = unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, GROUP, 0)
        };
        if registered.is_err() {
            return None; // Drop frees the memory
        }
        for bid in 0..count {
            pool.give(bid);
        }
        Some(pool)
    }

    /// Whether every buffer is held (none is with the kernel or on its way back).
    pub fn all_held(&self) -> bool {
        self.held.len() > usize::from(self.mask)
    }

    /// Bytes of buffer `bid` from `at` to `len`.
    pub fn bytes_of(&self, bid: u16, at: u32, len: u32) -> &[u8] {
        let base = usize::from(bid) * self.bytes as usize;
        &self.data[base + at as usize..base + len as usize]
    }

    /// Hands buffer `bid` (back) to the kernel.
    pub fn give(&mut self, bid: u16) {
        let index = usize::from(self.tail & self.mask);
        let addr = self.data[usize::from(bid) * self.bytes as usize..].as_ptr() as u64;
        // SAFETY: `index` < count, so the entry lies inside the ring's allocation; the kernel
        // reads only entries below the published tail, and this one is published below.
        let entry = unsafe { &mut *self.entries.add(index) };
        entry.set_addr(addr);
        entry.set_len(self.bytes);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field overlays the first entry's reserved word (the kernel's
        // layout); it is 2-byte aligned inside the page-aligned ring, and the kernel reads it
        // concurrently, hence the atomic store that publishes the entry written above.
        let tail = unsafe { &*BufRingEntry::tail(self.entries).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}

// SAFETY: the ring's memory is owned by this value alone (the kernel reads it, never frees it),
// so moving the pool, with the reactor that owns it, to another thread is sound.
unsafe impl Send for Provided {}

impl Drop for Provided {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the ring that read it is gone.
        unsafe { dealloc(self.entries.cast(), self.layout) };
    }
}
