//! Shared-memory channels against a real producer in another process (Python, standard
//! library only, the `keel` package from sdk/python).

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use keel::ipc::{Channel, Liveness, PeerMonitor};
use keel::order::{Command, StrategyId};

const PRODUCER: &str = r#"
import struct, sys, time, zlib
sys.path.insert(0, sys.argv[1])
import keel
from keel.layout import HEADER_LEN, RECORD_LEN

class SlowChannel(keel.Channel):
    # Writes each record in two halves with a pause between, so that a kill lands mid-write.
    def _push(self, record):
        t, head = self._cmd_tail, self._u64("COMMAND_HEAD")
        if t - head >= self.command_capacity:
            raise keel.RingFull("full")
        struct.pack_into("<Q", record, 8, t)
        struct.pack_into("<I", record, 0, zlib.crc32(bytes(record[4:])))
        at = HEADER_LEN + (t % self.command_capacity) * RECORD_LEN
        self._m[at:at + 32] = bytes(record[:32])
        self.beat()
        time.sleep(0.0005)
        self._m[at + 32:at + RECORD_LEN] = bytes(record[32:])
        self._cmd_tail = t + 1
        self._set("COMMAND_TAIL", t + 1)

ch = SlowChannel(sys.argv[2])
seq = int(sys.argv[3])
print("ready", flush=True)
while True:
    ch.beat()
    try:
        ch.cancel(ch.strategy << 48 | seq)
        seq += 1
    except keel.RingFull:
        pass
"#;

/// The Python package's source (sdk/python), imported from the tree: it needs nothing but the
/// standard library.
fn package() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python")
}

// Goal: a producer killed (SIGKILL) while writing records never publishes a torn one: every
// published record decodes, the ring's indices stay consistent, the producer's death is seen
// through its heartbeat, and a new producer continues on the same ring.
#[test]
fn producer_killed_mid_write_is_detected_and_the_ring_survives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strategy-2");
    let engine = Channel::create_or_attach(&path, StrategyId(2), 64, 64).unwrap();
    let spawn = |first_seq: u64| {
        let mut child = Process::new("python3")
            .arg("-c")
            .arg(PRODUCER)
            .arg(package())
            .arg(&path)
            .arg(first_seq.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = [0u8; 6];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut ready).unwrap();
        assert_eq!(&ready, b"ready\n");
        child
    };
    let clock = Instant::now();
    let ns = || clock.elapsed().as_nanos() as u64;
    let mut monitor = PeerMonitor::new(ns(), engine.strategy_heartbeat(), 200_000_000);
    let mut expected = 1u64;
    let consume = |engine: &Channel, expected: &mut u64| {
        while let Some(c) = engine.pop_command() {
            let c = c.expect("a published record is never torn");
            let Command::Cancel { id } = c else {
                panic!("unexpected command {c:?}");
            };
            assert_eq!(id.strategy(), StrategyId(2));
            assert_eq!(id.sequence(), *expected, "records in order, none lost");
            *expected += 1;
        }
    };
    for round in 0..3 {
        let mut child = spawn(expected + engine.commands_pending());
        let until = Instant::now() + Duration::from_millis(150 + 37 * round);
        let mut came_alive = false;
        while Instant::now() < until {
            consume(&engine, &mut expected);
            came_alive |= monitor.observe(ns(), engine.strategy_heartbeat()) == Liveness::CameAlive;
            std::thread::sleep(Duration::from_micros(300));
        }
        assert!(
            came_alive,
            "round {round}: the producer's heartbeat was seen"
        );
        child.kill().unwrap(); // SIGKILL, most likely between the two halves of a record
        child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            consume(&engine, &mut expected);
            if monitor.observe(ns(), engine.strategy_heartbeat()) == Liveness::Died {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: death not detected"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!monitor.alive());
        assert_eq!(engine.commands_pending(), 0);
    }
    assert!(expected > 30, "the producers wrote records: {expected}");
}

const STORER: &str = r#"
import select, sys
sys.path.insert(0, sys.argv[1])
import keel
ch = keel.Channel(sys.argv[2])
tag = int(sys.argv[3])
print("ready", flush=True)
store = ch._set  # the package's only way to write a shared word
i = 0
while True:
    for _ in range(10000):
        i += 1
        store("STRATEGY_HEARTBEAT", tag | i)
    if select.select([sys.stdin], [], [], 0)[0]:
        break
print(i, flush=True)
"#;

// Goal: the Python package (sdk/python) writes a shared word with one store: a reader in another
// process sampling the word while the client stores ascending values never sees one that is
// not a whole stored value (a torn store shows as a drop, e.g. to 0). Method: every value
// carries a tag in its top bytes, and values only ascend; the client stores until the reader
// has seen `CHANGES_MIN` of them change (a fact, so a busy machine only makes it slower), then
// stops and says its last value, which the reader must then read.
#[test]
fn python_client_stores_each_index_in_one_store() {
    const TAG: u64 = 0xa5a5 << 48;
    const CHANGES_MIN: u64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strategy-1");
    let engine = Channel::create_or_attach(&path, StrategyId(1), 64, 64).unwrap();
    let mut child = Process::new("python3")
        .arg("-c")
        .arg(STORER)
        .arg(package())
        .arg(&path)
        .arg(TAG.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mut stop = Some(child.stdin.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut reads, mut changes, mut torn) = (0u64, 0u64, 0u64, Vec::new());
    loop {
        let exited = child.try_wait().unwrap().is_some();
        for _ in 0..10_000 {
            let v = engine.strategy_heartbeat();
            reads += 1;
            if v == last {
                continue;
            }
            if v & !((1 << 48) - 1) != TAG || v < last {
                if torn.len() < 5 {
                    torn.push((last, v));
                }
            } else {
                changes += 1;
                last = v;
            }
        }
        if changes >= CHANGES_MIN {
            if let Some(mut stdin) = stop.take() {
                std::io::Write::write_all(&mut stdin, b"stop\n").unwrap();
            }
        }
        if exited {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Python storer did not finish: {changes} changes in {reads} reads"
        );
    }
    assert!(child.wait().unwrap().success());
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let stored: u64 = line.trim().parse().unwrap();
    assert!(
        torn.is_empty(),
        "torn values seen (last whole value, value read): {torn:x?}"
    );
    assert_eq!(
        engine.strategy_heartbeat(),
        TAG | stored,
        "the last store is read"
    );
    assert!(changes >= CHANGES_MIN, "{changes} changes in {reads} reads");
}

const FLAGGER: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
import keel
ch = keel.Channel(sys.argv[2])
ch.place(ch.strategy << 48 | 1, 0, 3, keel.SELL, 7, 1_000_000, reduce_only=True)
ch.place(ch.strategy << 48 | 2, 0, 3, keel.BUY, 7, 1_000_000)
"#;

// Goal: the Python package (sdk/python)'s `reduce_only=True` reaches the engine as a reduce-only
// new order, and its default stays a plain order (what every older strategy sends).
#[test]
fn python_client_sends_reduce_only_orders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strategy-1");
    let engine = Channel::create_or_attach(&path, StrategyId(1), 64, 64).unwrap();
    let status = Process::new("python3")
        .arg("-c")
        .arg(FLAGGER)
        .arg(package())
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let flags: Vec<_> = std::iter::from_fn(|| engine.pop_command())
        .map(|c| match c.expect("well-formed records") {
            Command::New(o) => (o.id.sequence(), o.side, o.qty, o.reduce_only),
            other => panic!("unexpected command {other:?}"),
        })
        .collect();
    use keel::order::Side;
    assert_eq!(
        flags,
        vec![(1, Side::Sell, 7, true), (2, Side::Buy, 7, false)]
    );
}
