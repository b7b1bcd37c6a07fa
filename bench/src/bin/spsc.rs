//! SPSC hand-off round trip between two threads pinned to different cores: a message goes
//! A → B on one queue and comes back B → A on another; A times each round trip with the TSC.
//! Contenders, interleaved in one run: a raw atomic ping-pong (the floor), rtrb (what keel's
//! in-process rings use), crossbeam's `ArrayQueue`, and `std::sync::mpsc::sync_channel`.
//! Both sides busy-poll, so the queue's own cost is what differs.
//!
//! Usage: cargo run -p keel-bench --release --bin spsc -- [--round-trips=N] [--smoke]

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, TryRecvError};
use std::sync::Arc;
use std::thread;

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use keel::clock::TscClock;
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

fn run_rtrb(n: u64, clock: &TscClock, h: &mut Histogram<u64>) {
    let (mut there_tx, mut there_rx) = rtrb::RingBuffer::<u64>::new(1024);
    let (mut back_tx, mut back_rx) = rtrb::RingBuffer::<u64>::new(1024);
    let echo = thread::spawn(move || {
        pin_or_warn(0);
        for _ in 0..n {
            let v = loop {
                if let Ok(v) = there_rx.pop() {
                    break v;
                }
                spin_loop();
            };
            back_tx.push(v).expect("one in flight");
        }
    });
    for i in 1..=n {
        let t0 = clock.raw();
        there_tx.push(i).expect("one in flight");
        let v = loop {
            if let Ok(v) = back_rx.pop() {
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

fn run_sync_channel(n: u64, clock: &TscClock, h: &mut Histogram<u64>) {
    let (there_tx, there_rx) = sync_channel::<u64>(1024);
    let (back_tx, back_rx) = sync_channel::<u64>(1024);
    let echo = thread::spawn(move || {
        pin_or_warn(0);
        for _ in 0..n {
            let v = loop {
                match there_rx.try_recv() {
                    Ok(v) => break v,
                    Err(TryRecvError::Empty) => spin_loop(),
                    Err(TryRecvError::Disconnected) => panic!("sender gone"),
                }
            };
            back_tx.send(v).expect("receiver alive");
        }
    });
    for i in 1..=n {
        let t0 = clock.raw();
        there_tx.send(i).expect("receiver alive");
        let v = loop {
            match back_rx.try_recv() {
                Ok(v) => break v,
                Err(TryRecvError::Empty) => spin_loop(),
                Err(TryRecvError::Disconnected) => panic!("echo gone"),
            }
        };
        let t1 = clock.raw();
        assert_eq!(v, i);
        h.record(((clock.raw_to_ns(t1) - clock.raw_to_ns(t0)) * 1_000).max(1))
            .expect("in range");
    }
    echo.join().expect("echo thread");
}

fn main() {
    let total = if flag("smoke") {
        20_000
    } else {
        arg_u64("round-trips", 1_000_000)
    };
    let rounds = 10;
    let per_round = total / rounds;
    pin_or_warn(1);
    let clock = TscClock::new();
    let mut h = [histogram(), histogram(), histogram(), histogram()];
    // Interleave contenders in rounds so drift on a shared machine hits all of them alike.
    for _ in 0..rounds {
        let raw = Arc::new(Raw {
            there: Slot(AtomicU64::new(0)),
            back: Slot(AtomicU64::new(0)),
        });
        run_pair(raw, per_round, &clock, &mut h[0]);
        run_rtrb(per_round, &clock, &mut h[1]);
        let cb = Arc::new(Crossbeam {
            there: ArrayQueue::new(1024),
            back: ArrayQueue::new(1024),
        });
        run_pair(cb, per_round, &clock, &mut h[2]);
        run_sync_channel(per_round, &clock, &mut h[3]);
    }
    let s: Vec<_> = h.iter().map(summary).collect();
    println!("SPSC round trip between two pinned threads, {total} round trips each, interleaved in {rounds} rounds");
    print_header("round trip", "raw");
    let names = [
        "raw atomic ping-pong (floor)",
        "rtrb (keel's in-process ring)",
        "crossbeam ArrayQueue",
        "std mpsc::sync_channel",
    ];
    for (name, summary) in names.iter().zip(&s) {
        print_row(name, summary, s[0].p50_ns);
    }
}
