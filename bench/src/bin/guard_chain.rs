//! Cost per decision of keel's whole guard chain, side by side with `governor`'s direct
//! `check()` and a `Mutex`-protected token bucket, interleaved batch by batch in one run.
//!
//! One keel decision = admission (shed → risk → bulkhead → breaker) plus release (breaker →
//! two-window rate limiter), followed by the bookkeeping of the venue's answer (bulkhead and
//! risk release) so that the state stays steady. governor's check reads its own clock; keel
//! receives `now_ns` from its loop (one clock read per poll, not per order), as in production.
//!
//! Usage: cargo run -p keel-bench --release --bin guard_chain -- [--batches=N] [--smoke]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;

use governor::{Quota, RateLimiter as Governor};
use keel::clock::TscClock;
use keel::order::NewOrder;
use keel_bench::guard::{chain, keel_decision, order};
use keel_bench::{arg_u64, flag, histogram, print_header, print_row, summary};

const BATCH: u64 = 1_000;

/// The obvious hand-rolled alternative: one token bucket behind a mutex.
struct MutexBucket {
    inner: Mutex<(u64, u64)>,
    rate_per_ns_num: u64,
    capacity: u64,
}

impl MutexBucket {
    #[inline(never)]
    fn check(&self, now_ns: u64) -> bool {
        let mut guard = self.inner.lock().expect("no poisoning in a bench");
        let (tokens, last) = &mut *guard;
        *tokens = (*tokens + (now_ns - *last) * self.rate_per_ns_num).min(self.capacity);
        *last = now_ns;
        if *tokens >= 1_000_000 {
            *tokens -= 1_000_000;
            true
        } else {
            false
        }
    }
}

fn main() {
    let batches = if flag("smoke") {
        50
    } else {
        arg_u64("batches", 5_000)
    };
    keel_bench::pin_or_warn(1);
    let clock = TscClock::new();
    let mut chain = chain();
    let governor = Governor::direct(Quota::per_second(NonZeroU32::MAX));
    let bucket = MutexBucket {
        inner: Mutex::new((u64::MAX / 4, 0)),
        rate_per_ns_num: 1_000_000,
        capacity: 1 << 50,
    };

    // Check results before timing: every contender must say "yes" on this workload.
    assert!(
        keel_decision(&mut chain, 1, &order(0)),
        "keel refused the bench order"
    );
    assert!(governor.check().is_ok(), "governor refused");
    assert!(bucket.check(1), "mutex bucket refused");

    // The orders arrive built (from a strategy's ring), as governor's and the bucket's calls
    // take no input: building them is not part of a decision.
    let orders: Vec<NewOrder> = (0..BATCH).map(order).collect();
    let (mut h_keel, mut h_gov, mut h_mutex) = (histogram(), histogram(), histogram());
    let mut now_ns = 1_000;
    let mut passed = 0u64;
    for _ in 0..batches {
        let t0 = clock.raw();
        for o in &orders {
            now_ns += 1_000;
            passed += u64::from(keel_decision(&mut chain, now_ns, black_box(o)));
        }
        let t1 = clock.raw();
        for _ in 0..BATCH {
            passed += u64::from(black_box(&governor).check().is_ok());
        }
        let t2 = clock.raw();
        for _ in 0..BATCH {
            now_ns += 1_000;
            passed += u64::from(black_box(&bucket).check(now_ns));
        }
        let t3 = clock.raw();
        let per_op_ps = |a: u64, b: u64| (clock.raw_to_ns(b) - clock.raw_to_ns(a)) * 1_000 / BATCH;
        h_keel.record(per_op_ps(t0, t1).max(1)).expect("in range");
        h_gov.record(per_op_ps(t1, t2).max(1)).expect("in range");
        h_mutex.record(per_op_ps(t2, t3).max(1)).expect("in range");
    }
    assert_eq!(
        passed,
        3 * batches * BATCH,
        "every decision must pass on this workload"
    );

    let (k, g, m) = (summary(&h_keel), summary(&h_gov), summary(&h_mutex));
    println!("guard chain decision cost: per-op mean of {BATCH}-op batches, {batches} batches each, interleaved");
    print_header("per decision", "governor");
    print_row("governor direct check()", &g, g.p50_ns);
    print_row("Mutex<token bucket>", &m, g.p50_ns);
    print_row("keel guard chain (5 guards)", &k, g.p50_ns);
    println!("guard_chain_vs_governor_ratio: {:.2}", k.p50_ns / g.p50_ns);
}
