//! Criterion: the cost of the ring operations themselves, on one thread (no core crossing, so
//! what differs is each ring's own bookkeeping): one push then one pop, and a batch of 64
//! pushed then popped. keel's ring (`keel::ring::spsc`, `push_many`/`pop_many` publishing once
//! per batch) against rtrb (its write and read chunks) and crossbeam's `ArrayQueue` (no batch
//! API: 64 single calls). The hand-off between cores is `bin/spsc.rs`.
//!
//! cargo bench -p keel-bench --bench ring [-- --test]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use crossbeam_queue::ArrayQueue;
use keel::ring::spsc;

const SLOTS: u32 = 1024;
const BATCH: u64 = 64;

fn push_pop(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring/push_pop_1");
    let (mut tx, mut rx) = spsc::channel::<u64>(SLOTS).expect("valid capacity");
    tx.push(7).expect("room");
    assert_eq!(rx.pop(), Some(7), "keel ring round trip");
    g.bench_function("keel_ring", |b| {
        b.iter(|| {
            tx.push(black_box(1)).expect("room");
            rx.pop()
        })
    });
    let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(SLOTS as usize);
    g.bench_function("rtrb", |b| {
        b.iter(|| {
            tx.push(black_box(1)).expect("room");
            rx.pop().ok()
        })
    });
    let q = ArrayQueue::<u64>::new(SLOTS as usize);
    g.bench_function("crossbeam_array_queue", |b| {
        b.iter(|| {
            q.push(black_box(1)).expect("room");
            q.pop()
        })
    });
    g.finish();
}

/// Pushes 0..BATCH and pops them, returning their sum (checked before timing).
fn keel_batch(tx: &mut spsc::Producer<u64>, rx: &mut spsc::Consumer<u64>) -> u64 {
    let mut values = 0..black_box(BATCH);
    assert_eq!(u64::from(tx.push_many(&mut values)), BATCH);
    let mut sum = 0;
    rx.pop_many(BATCH as u32, |v| sum += v);
    sum
}

fn rtrb_batch(tx: &mut rtrb::Producer<u64>, rx: &mut rtrb::Consumer<u64>) -> u64 {
    let chunk = tx.write_chunk_uninit(BATCH as usize).expect("room");
    assert_eq!(chunk.fill_from_iter(0..black_box(BATCH)) as u64, BATCH);
    rx.read_chunk(BATCH as usize)
        .expect("64 ready")
        .into_iter()
        .sum()
}

fn crossbeam_batch(q: &ArrayQueue<u64>) -> u64 {
    for v in 0..black_box(BATCH) {
        q.push(v).expect("room");
    }
    let mut sum = 0;
    while let Some(v) = q.pop() {
        sum += v;
    }
    sum
}

fn batch(c: &mut Criterion) {
    let want = (0..BATCH).sum::<u64>();
    let mut g = c.benchmark_group("ring/batch_64");
    let (mut tx, mut rx) = spsc::channel::<u64>(SLOTS).expect("valid capacity");
    assert_eq!(keel_batch(&mut tx, &mut rx), want);
    g.bench_function("keel_ring", |b| b.iter(|| keel_batch(&mut tx, &mut rx)));
    let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(SLOTS as usize);
    assert_eq!(rtrb_batch(&mut tx, &mut rx), want);
    g.bench_function("rtrb", |b| b.iter(|| rtrb_batch(&mut tx, &mut rx)));
    let q = ArrayQueue::<u64>::new(SLOTS as usize);
    assert_eq!(crossbeam_batch(&q), want);
    g.bench_function("crossbeam_array_queue", |b| b.iter(|| crossbeam_batch(&q)));
    g.finish();
}

criterion_group!(benches, push_pop, batch);
criterion_main!(benches);
