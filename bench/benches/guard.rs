//! Criterion: one decision of keel's whole guard chain (shed → risk → bulkhead → breaker →
//! two-window rate limiter, and the bookkeeping of the venue's answer; built and run by
//! `keel_bench::guard` with the engine's own types) against one `governor` direct `check()`,
//! in one group. The batch view with HdrHistogram quantiles is `bin/guard_chain.rs`.
//!
//! cargo bench -p keel-bench --bench guard [-- --test]

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{criterion_group, criterion_main, Criterion};
use governor::{Quota, RateLimiter as Governor};
use keel::order::NewOrder;
use keel_bench::guard::{chain, keel_decision, order};

/// Orders cycled through: built before timing, as they arrive built from a strategy's ring.
const ORDERS: u64 = 1_024;
const _: () = assert!(ORDERS.is_power_of_two());

fn guard(c: &mut Criterion) {
    let mut g = c.benchmark_group("guard");
    let mut keel = chain();
    let orders: Vec<NewOrder> = (0..ORDERS).map(order).collect();
    let mut now_ns = 1_000u64;
    let mut next = 0usize;
    // Check results before timing: every decision on this workload passes.
    assert!(keel_decision(&mut keel, now_ns, &orders[0]), "keel refused");
    g.bench_function("keel_guard_chain", |b| {
        b.iter(|| {
            now_ns += 1_000;
            // ORDERS is a power of two: a mask, not a division, on keel's side of the timing.
            next = (next + 1) & (ORDERS as usize - 1);
            keel_decision(&mut keel, now_ns, black_box(&orders[next]))
        })
    });
    let governor = Governor::direct(Quota::per_second(NonZeroU32::MAX));
    assert!(governor.check().is_ok(), "governor refused");
    g.bench_function("governor_check", |b| {
        b.iter(|| black_box(&governor).check().is_ok())
    });
    g.finish();
}

criterion_group!(benches, guard);
criterion_main!(benches);
