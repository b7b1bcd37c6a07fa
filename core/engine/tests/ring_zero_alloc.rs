//! keel's SPSC ring allocates only when it is built. Method: a counting global allocator that
//! counts allocations on this test's thread while armed; the ring is built (counted: its two
//! allocations, the shared indices and the slot array), then 100,000 single and batch pushes
//! and pops run through full and empty, then both ends are dropped with values still inside.
//! Nothing after construction may allocate.

#![cfg(not(keel_loom))]
#![allow(unsafe_code)] // the counting allocator; the ring itself is what is under test

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use keel::ring::spsc;

struct CountingAllocator;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_if_armed() {
    // try_with: the thread-local may be gone during thread teardown.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: delegates every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_if_armed();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_if_armed();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocations made on this thread while `f` runs.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (R, u64) {
    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    let r = f();
    ARMED.with(|a| a.set(false));
    (r, ALLOCATIONS.with(Cell::get))
}

#[test]
fn only_construction_allocates() {
    let ((mut tx, mut rx), built) =
        allocations_in(|| spsc::channel::<[u64; 6]>(64).expect("valid capacity"));
    assert_eq!(built, 2, "the shared indices and the slot array");
    let ((), used) = allocations_in(|| {
        let mut sum = 0u64;
        for i in 0..100_000u64 {
            if i % 2 == 0 {
                while tx.push([i; 6]).is_ok() {}
                while let Some(v) = rx.pop() {
                    sum = sum.wrapping_add(v[0]);
                }
            } else {
                let mut batch = (0..100).map(|k| [k; 6]);
                tx.push_many(&mut batch);
                rx.pop_many(40, |v| sum = sum.wrapping_add(v[5]));
            }
        }
        tx.push_many(&mut (0..10).map(|k| [k; 6]));
        std::hint::black_box(sum);
    });
    assert_eq!(used, 0, "pushes and pops allocated");
    let ((), dropped) = allocations_in(|| drop((tx, rx)));
    assert_eq!(dropped, 0, "dropping the ends allocated");
}
