//! keel's own single-producer single-consumer ring: a fixed power-of-two array of slots and two
//! free-running indices, one per side, each on cache lines of its own.
//!
//! [`channel`] allocates everything the ring will ever use (the shared indices and the slot
//! array) and hands out a [`Producer`] and a [`Consumer`]; nothing allocates after that, and
//! the capacity never changes. Each side owns its index and keeps a cached copy of the other
//! side's: the producer re-reads the consumer's head only when its cache says the ring is full,
//! the consumer re-reads the producer's tail only when its cache says it is empty, so in steady
//! state a message costs one store on each side and the shared lines move only when they must.
//! Batch calls ([`Producer::push_many`], [`Consumer::pop_many`]) publish their index once for
//! the whole batch. This module never blocks, never spins and never reads a clock: waiting is
//! the caller's idle policy.
//!
//! Under `--cfg keel_loom` the atomics, the slot cells and the `Arc` are loom's, so
//! `core/engine/tests/loom_ring.rs` (run by `scripts/loom`) explores the interleavings.
//!
//! The existing channels in `ring/mod.rs` are still rtrb; whether they move to this ring is
//! decided on the figures of `bench/src/bin/spsc.rs` and `bench/benches/ring.rs`.

#![allow(unsafe_code)] // the ring is one of the three modules allowed unsafe (STYLE.md)

use std::fmt;
use std::mem::MaybeUninit;

use sync::{Arc, AtomicUsize, Ordering, UnsafeCell};

/// The largest ring: 16 Mi slots. A bigger one is a sizing mistake rather than a need (at
/// keel's 48-byte commands it would take 768 MiB), and the bound keeps every count a
/// `u32` with room to spare.
pub const SLOTS_MAX: u32 = 1 << 24;

/// std's primitives, or loom's when the model checker explores the ring (`--cfg keel_loom`).
/// Both expose the cell through `with`/`with_mut`, loom's API, so the ring's code is one.
#[cfg(not(keel_loom))]
mod sync {
    pub(super) use std::sync::atomic::{AtomicUsize, Ordering};
    pub(super) use std::sync::Arc;

    /// `std::cell::UnsafeCell` behind loom's closure API.
    #[derive(Debug)]
    pub(super) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(super) fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        #[inline(always)]
        pub(super) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        #[inline(always)]
        pub(super) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(keel_loom)]
mod sync {
    pub(super) use loom::cell::UnsafeCell;
    pub(super) use loom::sync::atomic::{AtomicUsize, Ordering};
    pub(super) use loom::sync::Arc;
}

/// Two cache lines: Intel's adjacent-line prefetcher pulls 64-byte lines in pairs, so 64-byte
/// padding would still let one side's writes slow the other's reads.
#[repr(align(128))]
#[derive(Debug)]
struct Padded<T>(T);

type Slot<T> = UnsafeCell<MaybeUninit<T>>;

/// What both sides share. Slots in `[head, tail)` (indices taken modulo the capacity) hold
/// initialised values; every other slot is uninitialised.
struct Shared<T> {
    /// Next slot the consumer reads. Written only by the consumer.
    head: Padded<AtomicUsize>,
    /// Next slot the producer writes. Written only by the producer.
    tail: Padded<AtomicUsize>,
    /// `capacity` slots; never reallocated, so the handles may keep a pointer into it.
    slots: Box<[Slot<T>]>,
}

impl<T> Drop for Shared<T> {
    /// Drops the values still in the ring. Both handles are gone (this is the last `Arc`), and
    /// each published its own index as it dropped, so `[head, tail)` is exactly what was pushed
    /// and never popped. Relaxed loads suffice: the `Arc`'s last decrement synchronises with
    /// every earlier one, so both sides' final stores are visible here.
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        let mask = self.slots.len() - 1;
        let tail = self.tail.0.load(Ordering::Relaxed);
        let mut index = self.head.0.load(Ordering::Relaxed);
        while index != tail {
            // SAFETY: slots in [head, tail) hold initialised values that nobody popped, and no
            // handle is left to touch them; each is dropped once as `index` moves past it.
            self.slots[index & mask].with_mut(|slot| unsafe { (*slot).assume_init_drop() });
            index = index.wrapping_add(1);
        }
    }
}

/// [`Producer::push`] on a full ring: the value, handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

/// Why [`channel`] refused a capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CapacityError {
    /// Zero slots.
    #[error("a ring needs at least one slot")]
    Zero,
    /// Indices are taken modulo the capacity with a mask.
    #[error("ring capacity {0} is not a power of two")]
    NotPowerOfTwo(u32),
    /// Above [`SLOTS_MAX`].
    #[error("ring capacity {0} is above the maximum of {SLOTS_MAX} slots")]
    AboveMax(u32),
}

/// A ring of `capacity_slots` slots (a power of two, at most [`SLOTS_MAX`]): its two ends.
pub fn channel<T>(capacity_slots: u32) -> Result<(Producer<T>, Consumer<T>), CapacityError> {
    channel_at(capacity_slots, 0)
}

/// [`channel`] with both indices starting at `start_index`, so tests reach the indices'
/// wrap-around at `usize::MAX` without pushing that many values.
fn channel_at<T>(
    capacity_slots: u32,
    start_index: usize,
) -> Result<(Producer<T>, Consumer<T>), CapacityError> {
    if capacity_slots == 0 {
        return Err(CapacityError::Zero);
    }
    if !capacity_slots.is_power_of_two() {
        return Err(CapacityError::NotPowerOfTwo(capacity_slots));
    }
    if capacity_slots > SLOTS_MAX {
        return Err(CapacityError::AboveMax(capacity_slots));
    }
    let capacity = capacity_slots as usize;
    let slots: Box<[Slot<T>]> = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        head: Padded(AtomicUsize::new(start_index)),
        tail: Padded(AtomicUsize::new(start_index)),
        slots,
    });
    // Taken once the array is in its final owner, so no later move of the `Box` retags it.
    let buffer: *const Slot<T> = shared.slots.as_ptr();
    let ends = Ends {
        buffer,
        mask: capacity - 1,
        capacity,
    };
    let producer = Producer {
        shared: Arc::clone(&shared),
        ends,
        tail: start_index,
        head_cached: start_index,
    };
    let consumer = Consumer {
        shared,
        ends,
        head: start_index,
        tail_cached: start_index,
    };
    Ok((producer, consumer))
}

/// What each handle keeps of the ring's shape, so that reaching a slot takes no load through
/// the `Arc`.
struct Ends<T> {
    /// The first slot of `Shared::slots`, which lives (unmoved) as long as the `Arc` does.
    buffer: *const Slot<T>,
    mask: usize,
    capacity: usize,
}

impl<T> Clone for Ends<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Ends<T> {}

impl<T> Ends<T> {
    /// The slot for the free-running `index`.
    #[inline(always)]
    fn slot(&self, index: usize) -> &Slot<T> {
        // SAFETY: `index & mask` is below `capacity`, the slot array's length, and the array
        // outlives `&self`: the handle holding these `Ends` also holds the `Arc` that owns it.
        unsafe { &*self.buffer.add(index & self.mask) }
    }
}

/// The writing end. Cache-line aligned: its fields are written on the producer's core only.
#[repr(align(128))]
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    ends: Ends<T>,
    /// Next slot to write; the shared tail is a published copy of it.
    tail: usize,
    /// The consumer's head as last read: the ring has at least `capacity - (tail -
    /// head_cached)` free slots.
    head_cached: usize,
}

// SAFETY: a `Producer` moved to another thread takes its values with it (`T: Send`); the raw
// slot pointer is only used through `&mut self`, and the consumer's accesses are ordered
// against it by the head and tail atomics. It is not `Sync`: two threads may not share one.
unsafe impl<T: Send> Send for Producer<T> {}

impl<T> Producer<T> {
    /// Appends `value`, or hands it back if the ring is full.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), Full<T>> {
        let tail = self.tail;
        if tail.wrapping_sub(self.head_cached) == self.ends.capacity {
            // Acquire: the consumer's reads of the slots it freed happen before we overwrite.
            self.head_cached = self.shared.head.0.load(Ordering::Acquire);
            if tail.wrapping_sub(self.head_cached) == self.ends.capacity {
                return Err(Full(value));
            }
        }
        self.write(tail, value);
        self.tail = tail.wrapping_add(1);
        // Release: the slot's contents are visible to whoever acquires this tail.
        self.shared.tail.0.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Appends values from `items` while there is room, publishing them once at the end;
    /// returns how many it took. An item is taken from `items` only when a slot is free for
    /// it, so what the ring had no room for stays in the iterator.
    pub fn push_many<I: Iterator<Item = T>>(&mut self, items: &mut I) -> u32 {
        let mut free = self.free_cached();
        if free < items.size_hint().0.max(1) {
            self.head_cached = self.shared.head.0.load(Ordering::Acquire);
            free = self.free_cached();
        }
        let mut pushed = 0;
        while pushed < free {
            let Some(value) = items.next() else { break };
            self.write(self.tail, value);
            // Counted before publishing: should `items` panic, `Drop` publishes what was
            // written, and the ring drops it then.
            self.tail = self.tail.wrapping_add(1);
            pushed += 1;
        }
        if pushed > 0 {
            self.shared.tail.0.store(self.tail, Ordering::Release);
        }
        pushed as u32
    }

    /// Free slots now (reads the consumer's head).
    pub fn slots(&mut self) -> u32 {
        self.head_cached = self.shared.head.0.load(Ordering::Acquire);
        self.free_cached() as u32
    }

    /// Whether the ring is full now (reads the consumer's head).
    pub fn is_full(&mut self) -> bool {
        self.slots() == 0
    }

    /// Slots in the ring, free or not.
    pub fn capacity(&self) -> u32 {
        self.ends.capacity as u32
    }

    fn free_cached(&self) -> usize {
        self.ends.capacity - self.tail.wrapping_sub(self.head_cached)
    }

    /// Writes the slot at `index`, which the caller checked is free.
    #[inline(always)]
    fn write(&mut self, index: usize, value: T) {
        // SAFETY: `index` is in [tail, head_cached + capacity), so the consumer finished with
        // this slot (the head's Acquire load ordered its read before now) and will not touch
        // it until the tail is published past it; overwriting drops nothing, as the slot holds
        // no value.
        self.ends
            .slot(index)
            .with_mut(|slot| unsafe { (*slot).write(value) });
    }
}

impl<T> Drop for Producer<T> {
    /// Publishes the tail, so values a panicking `push_many` iterator left written but
    /// unpublished are dropped with the ring rather than leaked.
    fn drop(&mut self) {
        self.shared.tail.0.store(self.tail, Ordering::Release);
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.ends.capacity)
            .field("tail", &self.tail)
            .field("head_cached", &self.head_cached)
            .finish()
    }
}

/// The reading end. Cache-line aligned: its fields are written on the consumer's core only.
#[repr(align(128))]
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    ends: Ends<T>,
    /// Next slot to read; the shared head is a published copy of it.
    head: usize,
    /// The producer's tail as last read: slots in [head, tail_cached) are ready.
    tail_cached: usize,
}

// SAFETY: as for `Producer`: values cross threads (`T: Send`), the slot pointer is used only
// through `&mut self`, ordered against the producer by the atomics. Not `Sync`.
unsafe impl<T: Send> Send for Consumer<T> {}

impl<T> Consumer<T> {
    /// Takes the oldest value, if any.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        let head = self.head;
        if head == self.tail_cached {
            // Acquire: the producer's write of the slot happens before our read.
            self.tail_cached = self.shared.tail.0.load(Ordering::Acquire);
            if head == self.tail_cached {
                return None;
            }
        }
        let value = self.read(head);
        self.head = head.wrapping_add(1);
        // Release: our read of the slot happens before the producer overwrites it.
        self.shared.head.0.store(self.head, Ordering::Release);
        Some(value)
    }

    /// Takes up to `budget` values, oldest first, handing each to `f`, and publishes the head
    /// once at the end; returns how many it took. The budget bounds the pass whatever the
    /// producer does.
    pub fn pop_many(&mut self, budget: u32, mut f: impl FnMut(T)) -> u32 {
        let budget = budget as usize;
        let mut ready = self.tail_cached.wrapping_sub(self.head);
        if ready < budget {
            self.tail_cached = self.shared.tail.0.load(Ordering::Acquire);
            ready = self.tail_cached.wrapping_sub(self.head);
        }
        let take = ready.min(budget);
        for _ in 0..take {
            let value = self.read(self.head);
            // Counted before `f` runs: should it panic, `Drop` publishes the head past this
            // value, which now belongs to `f`, so the ring never drops it a second time.
            self.head = self.head.wrapping_add(1);
            f(value);
        }
        if take > 0 {
            self.shared.head.0.store(self.head, Ordering::Release);
        }
        take as u32
    }

    /// Values ready now (reads the producer's tail).
    pub fn len(&mut self) -> u32 {
        self.tail_cached = self.shared.tail.0.load(Ordering::Acquire);
        self.tail_cached.wrapping_sub(self.head) as u32
    }

    /// Whether no value is ready now (reads the producer's tail).
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Slots in the ring, free or not.
    pub fn capacity(&self) -> u32 {
        self.ends.capacity as u32
    }

    /// Moves the value out of the slot at `index`, which the caller checked is ready.
    #[inline(always)]
    fn read(&mut self, index: usize) -> T {
        // SAFETY: `index` is in [head, tail_cached): the producer initialised this slot before
        // publishing a tail past it (ordered by the tail's Acquire load) and will not write it
        // again until our head passes it. The caller advances the head at once, so the value
        // is moved out exactly once.
        self.ends
            .slot(index)
            .with(|slot| unsafe { (*slot).assume_init_read() })
    }
}

impl<T> Drop for Consumer<T> {
    /// Publishes the head (see `pop_many`), so the ring drops only values nobody took.
    fn drop(&mut self) {
        self.shared.head.0.store(self.head, Ordering::Release);
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.ends.capacity)
            .field("head", &self.head)
            .field("tail_cached", &self.tail_cached)
            .finish()
    }
}

#[cfg(all(test, not(keel_loom)))]
mod tests;
