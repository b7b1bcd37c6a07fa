use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc as StdArc, Mutex};
use std::thread;

use proptest::collection::vec;
use proptest::prelude::*;

use super::{channel, channel_at, CapacityError, Consumer, Full, Producer, SLOTS_MAX};

#[derive(Debug, Clone)]
enum Op {
    Push(u32),
    PushMany(Vec<u32>),
    Pop,
    PopMany(u32),
    Len,
    Slots,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u32>().prop_map(Op::Push),
        vec(any::<u32>(), 0..12).prop_map(Op::PushMany),
        Just(Op::Pop),
        (0u32..12).prop_map(Op::PopMany),
        Just(Op::Len),
        Just(Op::Slots),
    ]
}

/// Applies one operation to the ring and to the reference queue, and checks they agree.
fn step(
    op: Op,
    tx: &mut Producer<u32>,
    rx: &mut Consumer<u32>,
    model: &mut VecDeque<u32>,
    capacity: usize,
) -> Result<(), TestCaseError> {
    match op {
        Op::Push(v) => {
            let got = tx.push(v);
            if model.len() == capacity {
                prop_assert_eq!(got, Err(Full(v)), "a full ring hands the value back");
            } else {
                prop_assert_eq!(got, Ok(()));
                model.push_back(v);
            }
        }
        Op::PushMany(values) => {
            let mut items = values.iter().copied();
            let pushed = tx.push_many(&mut items) as usize;
            let room = capacity - model.len();
            prop_assert_eq!(pushed, values.len().min(room));
            model.extend(&values[..pushed]);
            prop_assert_eq!(items.next(), values.get(pushed).copied(), "remainder kept");
        }
        Op::Pop => prop_assert_eq!(rx.pop(), model.pop_front()),
        Op::PopMany(budget) => {
            let mut got = Vec::new();
            let taken = rx.pop_many(budget, |v| got.push(v));
            let want: Vec<u32> = (0..budget).map_while(|_| model.pop_front()).collect();
            prop_assert_eq!(taken as usize, want.len());
            prop_assert_eq!(got, want);
        }
        Op::Len => {
            prop_assert_eq!(rx.len() as usize, model.len());
            prop_assert_eq!(rx.is_empty(), model.is_empty());
        }
        Op::Slots => {
            prop_assert_eq!(tx.slots() as usize, capacity - model.len());
            prop_assert_eq!(tx.is_full(), model.len() == capacity);
        }
    }
    Ok(())
}

proptest! {
    /// The ring is a bounded FIFO: random pushes, batch pushes, pops and batch pops on one
    /// thread against a `VecDeque` holding at most `capacity`, from index 0 or from just
    /// before the indices wrap at `usize::MAX`.
    #[test]
    fn matches_a_bounded_vecdeque(
        capacity_log2 in 0u32..=5,
        before_wrap in proptest::option::of(0usize..64),
        ops in vec(op(), 0..300),
    ) {
        let capacity = 1usize << capacity_log2;
        let start = before_wrap.map_or(0, |k| usize::MAX - k);
        let (mut tx, mut rx) = channel_at::<u32>(capacity as u32, start).expect("valid capacity");
        let mut model = VecDeque::new();
        for op in ops {
            step(op, &mut tx, &mut rx, &mut model, capacity)?;
        }
        let mut rest = Vec::new();
        rx.pop_many(u32::MAX, |v| rest.push(v));
        prop_assert_eq!(rest, Vec::from(model));
    }
}

/// Goal: the edges, on a ring of 4. Empty refuses a pop, full refuses a push and hands the
/// value back, and one pop makes room for exactly one push.
#[test]
fn full_and_empty_edges() {
    let (mut tx, mut rx) = channel::<u64>(4).expect("valid capacity");
    assert_eq!(rx.pop(), None);
    assert!(rx.is_empty());
    assert_eq!(tx.slots(), 4);
    for v in 0..4 {
        assert_eq!(tx.push(v), Ok(()));
    }
    assert_eq!(tx.push(99), Err(Full(99)));
    assert!(tx.is_full());
    assert_eq!(tx.slots(), 0);
    assert_eq!(rx.len(), 4);
    assert_eq!(
        tx.push_many(&mut [7, 8].into_iter()),
        0,
        "no room for a batch"
    );
    assert_eq!(rx.pop(), Some(0));
    assert_eq!(tx.push(4), Ok(()));
    assert_eq!(tx.push(5), Err(Full(5)));
    let mut got = Vec::new();
    assert_eq!(rx.pop_many(10, |v| got.push(v)), 4);
    assert_eq!(got, [1, 2, 3, 4]);
    assert_eq!(rx.pop(), None);
    assert_eq!(rx.pop_many(10, |_| panic!("nothing to take")), 0);
    assert_eq!(tx.slots(), 4);
}

/// Goal: a ring of one slot (mask 0) alternates full and empty for many laps.
#[test]
fn capacity_one() {
    let (mut tx, mut rx) = channel::<u32>(1).expect("valid capacity");
    for v in 0..1_000 {
        assert_eq!(tx.push(v), Ok(()));
        assert_eq!(tx.push(v + 1), Err(Full(v + 1)));
        assert_eq!(rx.len(), 1);
        assert_eq!(rx.pop(), Some(v));
        assert_eq!(rx.pop(), None);
    }
}

/// Goal: the largest ring fills to exactly `SLOTS_MAX`, refuses one more, and drains in
/// order; the capacities around it are refused with their reason.
#[test]
fn capacity_max() {
    assert_eq!(
        channel::<u8>(SLOTS_MAX * 2).map(|_| ()),
        Err(CapacityError::AboveMax(SLOTS_MAX * 2))
    );
    assert_eq!(
        channel::<u8>(SLOTS_MAX + 1).map(|_| ()),
        Err(CapacityError::NotPowerOfTwo(SLOTS_MAX + 1))
    );
    assert_eq!(channel::<u8>(0).map(|_| ()), Err(CapacityError::Zero));
    let (mut tx, mut rx) = channel::<u8>(SLOTS_MAX).expect("the maximum is valid");
    assert_eq!(tx.capacity(), SLOTS_MAX);
    let mut values = (0..u64::MAX).map(|i| i as u8);
    assert_eq!(tx.push_many(&mut values), SLOTS_MAX);
    assert_eq!(tx.push(0), Err(Full(0)));
    assert_eq!(rx.len(), SLOTS_MAX);
    let mut expected = 0u8;
    let taken = rx.pop_many(u32::MAX, |v| {
        assert_eq!(v, expected);
        expected = expected.wrapping_add(1);
    });
    assert_eq!(taken, SLOTS_MAX);
    assert!(rx.is_empty());
}

/// Goal: the free-running indices wrap at `usize::MAX` without losing order or miscounting.
/// Method: start both indices 3 below the wrap and run 5 laps of a ring of 4.
#[test]
fn indices_wrap_around() {
    let (mut tx, mut rx) = channel_at::<u32>(4, usize::MAX - 2).expect("valid capacity");
    let mut next_in = 0;
    let mut next_out = 0;
    for _ in 0..5 {
        while tx.push(next_in).is_ok() {
            next_in += 1;
        }
        assert_eq!(rx.len(), 4);
        assert_eq!(tx.slots(), 0);
        for _ in 0..3 {
            assert_eq!(rx.pop(), Some(next_out));
            next_out += 1;
        }
        assert_eq!(rx.len(), 1);
        assert_eq!(tx.slots(), 3);
    }
    assert_eq!(next_in, 4 + 4 * 3);
}

/// Counts its drops in a table shared by the test: `drops[id]`.
#[derive(Debug)]
struct Tracked {
    id: usize,
    drops: StdArc<Mutex<Vec<u32>>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.lock().expect("not poisoned")[self.id] += 1;
    }
}

fn tracked(n: usize) -> (StdArc<Mutex<Vec<u32>>>, impl Iterator<Item = Tracked>) {
    let drops = StdArc::new(Mutex::new(vec![0; n]));
    let d = StdArc::clone(&drops);
    (
        drops,
        (0..n).map(move |id| Tracked {
            id,
            drops: StdArc::clone(&d),
        }),
    )
}

/// Goal: every value is dropped exactly once, whether popped or left in the ring when both
/// ends go, including across the indices' wrap-around.
#[test]
fn unconsumed_values_are_dropped_once() {
    let (drops, mut values) = tracked(10);
    let (mut tx, mut rx) = channel_at::<Tracked>(8, usize::MAX - 3).expect("valid capacity");
    assert_eq!(tx.push_many(&mut values), 8);
    assert_eq!(drops.lock().expect("not poisoned").iter().sum::<u32>(), 0);
    drop(rx.pop());
    assert_eq!(rx.pop_many(2, drop), 2);
    for v in values.by_ref() {
        assert!(tx.push(v).is_ok());
    }
    drop(tx);
    assert_eq!(rx.pop().map(|v| v.id), Some(3));
    drop(rx);
    assert_eq!(*drops.lock().expect("not poisoned"), vec![1; 10]);
}

/// Goal: a `pop_many` callback that panics neither double-drops the value it was handed nor
/// leaks the rest; likewise a `push_many` iterator that panics mid-batch.
#[test]
fn panics_mid_batch_drop_each_value_once() {
    let (drops, mut values) = tracked(6);
    let (mut tx, mut rx) = channel::<Tracked>(8).expect("valid capacity");
    let mut first_four = values.by_ref().take(4);
    assert_eq!(tx.push_many(&mut first_four), 4);
    let mut seen = 0;
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        rx.pop_many(4, |v| {
            seen += 1;
            assert!(v.id != 1, "the callback panics on value 1");
        })
    }));
    assert!(unwound.is_err());
    assert_eq!(seen, 2);
    let mut rest = values.chain(std::iter::from_fn(|| panic!("the iterator panics")));
    let unwound = catch_unwind(AssertUnwindSafe(|| tx.push_many(&mut rest)));
    assert!(unwound.is_err());
    drop((tx, rx));
    assert_eq!(*drops.lock().expect("not poisoned"), vec![1; 6]);
}

/// Goal: across two threads every value arrives exactly once and in order. Method: 200,000
/// sequence numbers through a ring of 16, pushed singly and in batches, popped singly and in
/// batches; a side with nothing to do yields (this machine's cores may be busy), and the count
/// is fixed, not the time.
#[test]
fn two_threads_deliver_each_value_once_in_order() {
    const VALUES: u64 = 200_000;
    let (mut tx, mut rx) = channel::<u64>(16).expect("valid capacity");
    let producer = thread::spawn(move || {
        let mut next = 0u64;
        while next < VALUES {
            let pushed = if next % 3 == 0 {
                let end = (next + 5).min(VALUES);
                let mut batch = next..end;
                u64::from(tx.push_many(&mut batch))
            } else {
                u64::from(tx.push(next).is_ok())
            };
            if pushed == 0 {
                thread::yield_now();
            }
            next += pushed;
        }
    });
    let mut expected = 0u64;
    let mut turn = 0u32;
    while expected < VALUES {
        turn = turn.wrapping_add(1);
        let taken = if turn % 2 == 0 {
            rx.pop_many(7, |v| {
                assert_eq!(v, expected, "out of order or lost");
                expected += 1;
            })
        } else {
            match rx.pop() {
                Some(v) => {
                    assert_eq!(v, expected, "out of order or lost");
                    expected += 1;
                    1
                }
                None => 0,
            }
        };
        if taken == 0 {
            thread::yield_now();
        }
    }
    producer.join().expect("producer thread");
    assert_eq!(rx.pop(), None, "nothing beyond the last value");
    assert_eq!(expected, VALUES);
}

/// The handles cross threads (Send) but are not shared (not Sync): checked at compile time.
#[test]
fn handles_are_send() {
    fn send<S: Send>() {}
    send::<Producer<u64>>();
    send::<Consumer<u64>>();
}
