//! Loom models of keel's SPSC ring (core/engine/src/ring/spsc.rs): every interleaving of a
//! producer and a consumer thread on a ring of 2 slots, within loom's preemption bound, with
//! more values than slots so both the full and the empty edge are crossed. Loom checks each
//! slot access against the atomics' happens-before (a read racing a write fails the model)
//! and that every `loom::sync::Arc` is dropped (a value left undropped, or the ring itself
//! leaked, fails it).
//!
//! Only built under `--cfg keel_loom`: run with scripts/loom.

#![cfg(keel_loom)]

use keel::ring::spsc::{channel, Consumer, Full, Producer};
use loom::sync::Arc;
use loom::thread;

/// Values through the ring in each model: more than its 2 slots.
const VALUES: u32 = 3;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Bugs in a two-thread ring show within a few preemptions; unbounded, the search explodes.
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Pushes 0..VALUES one at a time, retrying (yielding) on full; a refused value comes back.
fn push_each(tx: &mut Producer<u32>) {
    let mut next = 0;
    while next < VALUES {
        match tx.push(next) {
            Ok(()) => next += 1,
            Err(Full(v)) => {
                assert_eq!(v, next, "a full ring hands back the value it refused");
                thread::yield_now();
            }
        }
    }
}

/// Pops until VALUES arrived, checking order; yields on empty.
fn pop_each(rx: &mut Consumer<u32>) {
    let mut expected = 0;
    while expected < VALUES {
        match rx.pop() {
            Some(v) => {
                assert_eq!(v, expected, "out of order, lost or duplicated");
                expected += 1;
            }
            None => thread::yield_now(),
        }
    }
}

/// Goal: single pushes and single pops deliver 0, 1, 2 in order through 2 slots, whatever the
/// interleaving, and the ring is empty afterwards.
#[test]
fn push_and_pop_one_at_a_time() {
    model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).expect("valid capacity");
        let producer = thread::spawn(move || push_each(&mut tx));
        pop_each(&mut rx);
        producer.join().expect("producer");
        assert_eq!(rx.pop(), None);
        assert!(rx.is_empty());
    });
}

/// Goal: batch publishing (one tail store for several values, one head store for several
/// reads) is as safe as single steps, on both edges.
#[test]
fn push_many_and_pop_many() {
    model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).expect("valid capacity");
        let producer = thread::spawn(move || {
            let mut values = 0..VALUES;
            while !values.is_empty() {
                if tx.push_many(&mut values) == 0 {
                    thread::yield_now();
                }
            }
        });
        let mut expected = 0;
        while expected < VALUES {
            let taken = rx.pop_many(2, |v| {
                assert_eq!(v, expected, "out of order, lost or duplicated");
                expected += 1;
            });
            if taken == 0 {
                thread::yield_now();
            }
        }
        producer.join().expect("producer");
        assert_eq!(rx.pop(), None);
    });
}

/// Goal: values still in the ring when both ends go are dropped exactly once, whichever
/// thread drops its end last. Method: the producer pushes 2 loom `Arc`s and drops its end; the
/// consumer, concurrently, takes at most one and drops its end; loom fails the model on any
/// `Arc` never dropped (and a double drop would be a use after free it reports too).
#[test]
fn leftover_values_are_dropped() {
    model(|| {
        let (mut tx, mut rx) = channel::<Arc<u32>>(2).expect("valid capacity");
        let producer = thread::spawn(move || {
            for v in 0..2 {
                assert!(tx.push(Arc::new(v)).is_ok(), "2 values fit 2 slots");
            }
        });
        if let Some(v) = rx.pop() {
            assert_eq!(*v, 0);
        }
        drop(rx);
        producer.join().expect("producer");
    });
}

/// Goal: the length the consumer reads and the free slots the producer reads stay within the
/// capacity while the other side moves.
#[test]
fn counts_stay_within_capacity() {
    model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).expect("valid capacity");
        let producer = thread::spawn(move || {
            push_each(&mut tx);
            assert!(tx.slots() <= 2);
        });
        let mut seen = 0;
        while seen < VALUES {
            let len = rx.len();
            assert!(len <= 2, "len {len} beyond 2 slots");
            seen += rx.pop_many(1, |_| ());
            if len == 0 {
                thread::yield_now();
            }
        }
        producer.join().expect("producer");
    });
}
