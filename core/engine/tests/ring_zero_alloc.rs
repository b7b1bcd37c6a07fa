//! keel's SPSC ring allocates only when it is built. Method: a counting global allocator that
//! counts allocations on this test's thread while armed; the ring is built (counted: its two
//! allocations, the shared indices and the slot array), then 100,000 single and batch pushes
//! and pops run through full and empty, then both ends are dropped with values still inside.
//! Nothing after construction may allocate.

#![cfg(not(keel_loom))]
#![allow(unsafe_code)] // the counting allocator; the ring itself is what is under test

use std::cell::Cell;

use keel::ring::spsc;

// The counting allocator of the command line's zero-allocation tests, the same file.
#[path = "../../cli/tests/common/alloc.rs"]
mod alloc;

use alloc::{CountingAllocator, ALLOCATIONS, ARMED};

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
