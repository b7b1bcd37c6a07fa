//! SPSC hand-off round trip between two threads pinned to different cores: a message goes
//! A → B on one queue and comes back B → A on another; A times each round trip with the TSC.
//! Contenders, interleaved in one run: a raw atomic ping-pong (the floor), rtrb (what keel's
//! in-process rings use), keel's own ring (`keel::ring::spsc`), crossbeam's `ArrayQueue`, and
//! `std::sync::mpsc::sync_channel`. Both sides busy-poll, so the queue's own cost is what
//! differs.
//!
//! Then one-way throughput: a burst of messages from B to A through one ring of 1,024 slots,
//! keel's ring and rtrb each pushed and popped one at a time and in batches of 64 (keel's
//! `push_many`/`pop_many`, rtrb's write and read chunks), messages per second per round.
//!
//! Usage: cargo run -p keel-bench --release --bin spsc -- [--round-trips=N] [--burst=N] [--smoke]

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread;

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use keel::clock::TscClock;
use keel::ring::spsc;
use keel_bench::{arg_u64, flag, histogram, pin_or_warn, print_header, print_row, summary};

/// One direction of a raw ping-pong: a sequence number on its own cache line pair.
#[repr(align(128))]
struct Slot(AtomicU64);

/// A queue pair for one contender: `send` from A, `echo` run by B.
trait Pair: Send + Sync + 'static {
    fn a_send(&self, v: u64);
    fn a_recv(&self) -> u64;
    /// B: echo `n` messages back.
    fn b_echo(&self, n: u64);
}

struct Raw {
    there: Slot,
    back: Slot,
}

/// Sequence numbers only grow, so neither side ever resets a slot: A waits for `back == i`,
/// B waits for `there == expected`.
impl Pair for Raw {
    fn a_send(&self, v: u64) {
        self.there.0.store(v, Ordering::Release);
    }
    fn a_recv(&self) -> u64 {
        let want = self.there.0.load(Ordering::Relaxed);
        loop {
            let v = self.back.0.load(Ordering::Acquire);
            if v == want {
                return v;
            }
            spin_loop();
        }
    }
    fn b_echo(&self, n: u64) {
        for expected in 1..=n {
            while self.there.0.load(Ordering::Acquire) != expected {
                spin_loop();
            }
            self.back.0.store(expected, Ordering::Release);
        }
    }
}

struct Crossbeam {
    there: ArrayQueue<u64>,
    back: ArrayQueue<u64>,
}

impl Pair for Crossbeam {
    fn a_send(&self, v: u64) {
        self.there.push(v).expect("one in flight");
    }
    fn a_recv(&self) -> u64 {
        loop {
            if let Some(v) = self.back.pop() {
                return v;
            }
            spin_loop();
        }
    }
    fn b_echo(&self, n: u64) {
        for _ in 0..n {
            let v = loop {
                if let Some(v) = self.there.pop() {
                    break v;
                }
                spin_loop();
            };
            self.back.push(v).expect("one in flight");
        }
    }
}

/// rtrb and sync_channel endpoints are not `Sync`; each side owns its ends, so they run in
/// dedicated loops below rather than through `Pair`.
fn run_pair<P: Pair>(pair: Arc<P>, n: u64, clock: &TscClock, h: &mut Histogram<u64>) {
    let b = Arc::clone(&pair);
    let echo = thread::spawn(move || {
        pin_or_warn(0);
        b.b_echo(n);
    });
    for i in 1..=n {
        let t0 = clock.raw();
        pair.a_send(i);
        let v = pair.a_recv();
        let t1 = clock.raw();
        assert_eq!(v, i, "round trip returned the wrong message");
        h.record(((clock.raw_to_ns(t1) - clock.raw_to_ns(t0)) * 1_000).max(1))
            .expect("in range");
    }
    echo.join().expect("echo thread");
}

/// A ring with separate ends, as the ping-pong drives it: `push` never fails with one value
/// in flight, `pop` is `None` while empty.
struct Split<Tx, Rx> {
    channel: fn() -> (Tx, Rx),
    push: fn(&mut Tx, u64),
    pop: fn(&mut Rx) -> Option<u64>,
}

/// Round trips through two rings of `ring`'s kind: out on one, echoed back on the other by a
/// thread on core 0.
fn run_split<Tx: Send + 'static, Rx: Send + 'static>(
    ring: &Split<Tx, Rx>,
    n: u64,
    clock: &TscClock,
    h: &mut Histogram<u64>,
) {
    let (mut there_tx, mut there_rx) = (ring.channel)();
    let (mut back_tx, mut back_rx) = (ring.channel)();
    let (push, pop) = (ring.push, ring.pop);
    let echo = thread::spawn(move || {
        pin_or_warn(0);
        for _ in 0..n {
            let v = loop {
                if let Some(v) = pop(&mut there_rx) {
                    break v;
                }
                spin_loop();
            };
            push(&mut back_tx, v);
        }
    });
    for i in 1..=n {
        let t0 = clock.raw();
        push(&mut there_tx, i);
        let v = loop {
            if let Some(v) = pop(&mut back_rx) {
                break v;
            }
            spin_loop();
        };
        let t1 = clock.raw();
        assert_eq!(v, i);
        h.record(((clock.raw_to_ns(t1) - clock.raw_to_ns(t0)) * 1_000).max(1))
            .expect("in range");
    }
    echo.join().expect("echo thread");
}

const RTRB: Split<rtrb::Producer<u64>, rtrb::Consumer<u64>> = Split {
    channel: || rtrb::RingBuffer::new(1024),
    push: |tx, v| tx.push(v).expect("one in flight"),
    pop: |rx| rx.pop().ok(),
};

const KEEL: Split<spsc::Producer<u64>, spsc::Consumer<u64>> = Split {
    channel: || spsc::channel(1024).expect("valid capacity"),
    push: |tx, v| tx.push(v).expect("one in flight"),
    pop: |rx| rx.pop(),
};

const SYNC_CHANNEL: Split<SyncSender<u64>, Receiver<u64>> = Split {
    channel: || sync_channel(1024),
    push: |tx, v| tx.send(v).expect("receiver alive"),
    pop: |rx| match rx.try_recv() {
        Ok(v) => Some(v),
        Err(TryRecvError::Empty) => None,
        Err(TryRecvError::Disconnected) => panic!("the other end is gone"),
    },
};

fn main() {
    let smoke = flag("smoke");
    let total = if smoke {
        20_000
    } else {
        arg_u64("round-trips", 1_000_000)
    };
    let rounds = 10;
    let per_round = total / rounds;
    pin_or_warn(1);
    let clock = TscClock::new();
    let mut h = [
        histogram(),
        histogram(),
        histogram(),
        histogram(),
        histogram(),
    ];
    // Interleave contenders in rounds so drift on a shared machine hits all of them alike.
    for _ in 0..rounds {
        let raw = Arc::new(Raw {
            there: Slot(AtomicU64::new(0)),
            back: Slot(AtomicU64::new(0)),
        });
        run_pair(raw, per_round, &clock, &mut h[0]);
        run_split(&RTRB, per_round, &clock, &mut h[1]);
        let cb = Arc::new(Crossbeam {
            there: ArrayQueue::new(1024),
            back: ArrayQueue::new(1024),
        });
        run_pair(cb, per_round, &clock, &mut h[2]);
        run_split(&SYNC_CHANNEL, per_round, &clock, &mut h[3]);
        run_split(&KEEL, per_round, &clock, &mut h[4]);
    }
    let s: Vec<_> = h.iter().map(summary).collect();
    println!("SPSC round trip between two pinned threads, {total} round trips each, interleaved in {rounds} rounds");
    print_header("round trip", "raw");
    let names = [
        "raw atomic ping-pong (floor)",
        "rtrb (keel's in-process ring)",
        "crossbeam ArrayQueue",
        "std mpsc::sync_channel",
        "keel ring (ring::spsc)",
    ];
    for (name, summary) in names.iter().zip(&s) {
        print_row(name, summary, s[0].p50_ns);
    }
    println!("rtrb_vs_raw_ratio: {:.2}", s[1].p50_ns / s[0].p50_ns);
    println!("keel_ring_vs_raw_ratio: {:.2}", s[4].p50_ns / s[0].p50_ns);
    println!("keel_ring_vs_rtrb_ratio: {:.2}", s[4].p50_ns / s[1].p50_ns);
    throughput(&clock, rounds);
}

/// Messages per burst batch: the most either side moves per publish.
const BURST_BATCH: u32 = 64;

/// How a throughput contender moves messages.
#[derive(Clone, Copy)]
enum Burst {
    KeelOne,
    KeelBatch,
    RtrbOne,
    RtrbBatch,
}

/// One burst of `n` messages B → A through a ring of 1,024; A checks every value arrives in
/// order and returns the burst's time in ns, from A's first look at the ring to the last value.
fn burst(kind: Burst, n: u64, clock: &TscClock) -> u64 {
    let (t0, t1) = match kind {
        Burst::KeelOne | Burst::KeelBatch => burst_keel(matches!(kind, Burst::KeelBatch), n, clock),
        Burst::RtrbOne | Burst::RtrbBatch => burst_rtrb(matches!(kind, Burst::RtrbBatch), n, clock),
    };
    clock.raw_to_ns(t1) - clock.raw_to_ns(t0)
}

fn burst_keel(batch: bool, n: u64, clock: &TscClock) -> (u64, u64) {
    let (mut tx, mut rx) = spsc::channel::<u64>(1024).expect("valid capacity");
    let producer = thread::spawn(move || {
        pin_or_warn(0);
        let mut next = 0u64;
        while next < n {
            if batch {
                let mut values = next..(next + u64::from(BURST_BATCH)).min(n);
                next += u64::from(tx.push_many(&mut values));
            } else if tx.push(next).is_ok() {
                next += 1;
            }
            spin_loop();
        }
    });
    let t0 = clock.raw();
    let mut expected = 0u64;
    while expected < n {
        if batch {
            rx.pop_many(BURST_BATCH, |v| {
                assert_eq!(v, expected, "keel ring burst out of order");
                expected += 1;
            });
        } else if let Some(v) = rx.pop() {
            assert_eq!(v, expected, "keel ring burst out of order");
            expected += 1;
        }
    }
    let t1 = clock.raw();
    producer.join().expect("producer thread");
    (t0, t1)
}

fn burst_rtrb(batch: bool, n: u64, clock: &TscClock) -> (u64, u64) {
    let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(1024);
    let producer = thread::spawn(move || {
        pin_or_warn(0);
        let mut next = 0u64;
        while next < n {
            if batch {
                let want = (n - next).min(u64::from(BURST_BATCH)) as usize;
                let room = tx.slots().min(want);
                if room > 0 {
                    let chunk = tx.write_chunk_uninit(room).expect("room was counted");
                    next += chunk.fill_from_iter(next..) as u64;
                }
            } else if tx.push(next).is_ok() {
                next += 1;
            }
            spin_loop();
        }
    });
    let t0 = clock.raw();
    let mut expected = 0u64;
    while expected < n {
        if batch {
            let ready = rx.slots().min(BURST_BATCH as usize);
            if ready > 0 {
                for v in rx.read_chunk(ready).expect("ready was counted") {
                    assert_eq!(v, expected, "rtrb burst out of order");
                    expected += 1;
                }
            }
        } else if let Ok(v) = rx.pop() {
            assert_eq!(v, expected, "rtrb burst out of order");
            expected += 1;
        }
    }
    let t1 = clock.raw();
    producer.join().expect("producer thread");
    (t0, t1)
}

/// One-way throughput, contenders interleaved round by round; prints each one's median round
/// in messages per second and keel's batch rate over rtrb's.
fn throughput(clock: &TscClock, rounds: u64) {
    let n = if flag("smoke") {
        100_000
    } else {
        arg_u64("burst", 1_000_000)
    };
    let kinds = [
        (Burst::RtrbOne, "rtrb push/pop"),
        (Burst::RtrbBatch, "rtrb chunks of 64"),
        (Burst::KeelOne, "keel ring push/pop"),
        (Burst::KeelBatch, "keel ring push_many/pop_many 64"),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    for _ in 0..rounds {
        for (i, (kind, _)) in kinds.iter().enumerate() {
            let ns = burst(*kind, n, clock).max(1);
            rates[i].push(n as f64 * 1e9 / ns as f64);
        }
    }
    let medians: Vec<f64> = rates
        .iter_mut()
        .map(|r| {
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        })
        .collect();
    println!("SPSC one-way burst of {n} messages through 1,024 slots, median of {rounds} interleaved rounds");
    for ((_, name), rate) in kinds.iter().zip(&medians) {
        println!(
            "{name:<34} {:>14.0} msg/s {:>9.2}x",
            rate,
            rate / medians[0]
        );
    }
    println!(
        "keel_ring_batch_vs_rtrb_batch_throughput_ratio: {:.2}",
        medians[3] / medians[1]
    );
}
