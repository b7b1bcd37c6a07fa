//! Hostile strategies against the real engine: processes that write nonsense into their
//! shared-memory channel (indices, records, header) while well-behaved strategies trade.
//!
//! The hostile side is played by this process through a raw mapping of the channel file (all
//! its writes are atomic word stores, as another process's would be to the engine); the engine
//! is the real one (`EngineBuilder`, its own loop and bridges) against keel's simulated venue
//! on loopback. Fuzz seeds: `KEEL_FUZZ_SEED` (printed with every failure).

// A test driver waits on other threads and processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::clock::{Clock, TscClock};
use keel::config::EngineConfig;
use keel::dispatch::StrategyHandle;
use keel::engine::{BridgeStats, EngineBuilder, EngineReport, RunningEngine};
use keel::ipc::{
    encode_command, offset, Channel, ChannelFault, EngineState, IpcEvent, RecordError, RingKind,
    RECORD_LEN,
};
use keel::order::{
    ClientOrderId, Command, EventKind, MassCancelScope, NewOrder, Price, RefusalReason, Side,
    StrategyId, SymbolId, TimeInForce, VenueId,
};
use keel::runtime::IdlePolicy;
use keel_venue::server::{VenueConfig, VenueServer};

mod common;

use common::peers::{Proc, KEEL};

const CAPACITY: u64 = 64;

/// The simulated venue in a thread of this process; publishes its open-order count.
struct VenueThread {
    stop: Arc<AtomicBool>,
    open: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<VenueServer>>,
    addr: std::net::SocketAddr,
}

impl VenueThread {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicU64::new(0));
        let (flag, count) = (Arc::clone(&stop), Arc::clone(&open));
        let (tx, rx) = std::sync::mpsc::channel();
        // The io_uring ring belongs to the thread that submits to it: build it there.
        let thread = std::thread::spawn(move || {
            let mut venue = VenueServer::new(VenueConfig::default()).unwrap();
            tx.send(venue.local_addr()).unwrap();
            let clock = TscClock::new();
            while !flag.load(Ordering::Relaxed) {
                venue.step(clock.now_ns(), 1_000_000).unwrap();
                let n = venue.exchange().open_account_orders().count();
                count.store(n as u64, Ordering::Release);
            }
            venue
        });
        Self {
            stop,
            open,
            thread: Some(thread),
            addr: rx.recv().unwrap(),
        }
    }

    fn open_orders(&self) -> u64 {
        self.open.load(Ordering::Acquire)
    }

    fn finish(mut self) -> VenueServer {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

fn config(venue: &str, strategies: u16, ipc: &Path) -> EngineConfig {
    EngineConfig::from_toml(&config_text(venue, strategies, ipc)).unwrap()
}

fn config_text(venue: &str, strategies: u16, ipc: &Path) -> String {
    format!(
        "symbols = [\"AAPL\", \"MSFT\", \"AMZN\", \"NVDA\"]\n\
         [dispatcher]\nstrategies = {strategies}\n\
         [engine]\ntopology = \"inline\"\nidle = \"backoff\"\n\
         [ipc]\ndir = \"{}\"\ncommand_capacity = {CAPACITY}\nevent_capacity = {CAPACITY}\n\
         strategy_timeout_ns = 60_000_000_000\n\
         [[venue]]\nname = \"sim\"\naddress = \"{venue}\"\nusername = \"keel\"\n\
         password = \"keel\"\nbackoff_base_ns = 20_000_000\nbackoff_cap_ns = 200_000_000\n",
        ipc.display()
    )
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn id(strategy: u16, seq: u64) -> ClientOrderId {
    ClientOrderId::new(StrategyId(strategy), seq).unwrap()
}

fn resting(id: ClientOrderId) -> NewOrder {
    NewOrder {
        id,
        venue: VenueId(0),
        symbol: SymbolId((id.sequence() % 4) as u16),
        side: Side::Buy,
        price: Price::from_units(50, 0),
        qty: 3,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

/// The hostile side's own mapping of a channel file: atomic word loads and stores only.
struct Raw {
    map: memmap2::MmapMut,
}

impl Raw {
    fn open(path: &Path) -> Self {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        // SAFETY: the file is a channel shared with the engine on purpose; this mapping is
        // only accessed through atomic word operations (below), like the engine's.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        Self { map }
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(at % 8 == 0 && at + 8 <= self.map.len(), "word {at}");
        // SAFETY: in bounds (asserted), 8-aligned (page-aligned mapping, `at` a multiple of
        // 8), valid while `self.map` lives (tied to &self), and only accessed atomically.
        #[allow(unsafe_code)]
        unsafe {
            &*self.map.as_ptr().add(at).cast::<AtomicU64>()
        }
    }

    fn load(&self, at: usize) -> u64 {
        self.word(at).load(Ordering::Acquire)
    }

    fn store(&self, at: usize, v: u64) {
        self.word(at).store(v, Ordering::Release);
    }

    fn write_command_slot(&self, position: u64, r: &[u8; RECORD_LEN]) {
        let at = 4096 + (position % CAPACITY) as usize * RECORD_LEN;
        for (i, bytes) in r.chunks_exact(8).enumerate() {
            self.store(at + 8 * i, u64::from_le_bytes(bytes.try_into().unwrap()));
        }
    }

    /// Lets the engine run at least one whole pass after the caller's last store.
    fn engine_passes(&self, n: u64) {
        let from = self.load(offset::ENGINE_HEARTBEAT);
        wait_until("engine passes", Duration::from_secs(10), || {
            self.load(offset::ENGINE_HEARTBEAT).wrapping_sub(from) >= n
        });
    }
}

fn sealed(mut r: [u8; RECORD_LEN], position: u64) -> [u8; RECORD_LEN] {
    r[8..16].copy_from_slice(&position.to_le_bytes());
    let crc = crc32fast::hash(&r[4..]);
    r[0..4].copy_from_slice(&crc.to_le_bytes());
    r
}

/// A strategy over shared memory, driven by this test.
struct Peer {
    strategy: u16,
    path: PathBuf,
    ch: Channel,
    raw: Raw,
    next_seq: u64,
    live: Vec<ClientOrderId>,
}

impl Peer {
    fn attach(dir: &Path, strategy: u16) -> Self {
        let path = dir.join(format!("strategy-{strategy}"));
        let ch = Channel::open(&path).unwrap();
        ch.claim_strategy().unwrap();
        wait_until("engine running and SYNCED", Duration::from_secs(15), || {
            ch.beat_strategy();
            ch.engine_state() == EngineState::Running && ch.venue_synced(VenueId(0))
        });
        Self {
            strategy,
            raw: Raw::open(&path),
            path,
            ch,
            next_seq: 0,
            live: Vec::new(),
        }
    }

    fn next_id(&mut self) -> ClientOrderId {
        self.next_seq += 1;
        id(self.strategy, self.next_seq)
    }

    fn send(&self, c: Command) {
        wait_until("room in the command ring", Duration::from_secs(10), || {
            self.ch.beat_strategy();
            self.ch.push_command(&c)
        });
    }

    fn next_event(&self, what: &str) -> IpcEvent {
        let mut got = None;
        wait_until(what, Duration::from_secs(10), || {
            self.ch.beat_strategy();
            got = self.ch.pop_event();
            got.is_some()
        });
        got.unwrap().expect("the engine writes whole records")
    }

    /// Places `n` resting orders and waits until the venue accepted each.
    fn place_resting(&mut self, n: usize) {
        let ids: Vec<_> = (0..n).map(|_| self.next_id()).collect();
        for &i in &ids {
            self.send(Command::New(resting(i)));
        }
        for &i in &ids {
            let e = self.next_event("accepted");
            assert_eq!(
                e,
                IpcEvent::Event(keel::order::Event {
                    id: i,
                    kind: EventKind::Accepted,
                    ..event_of(e)
                }),
                "strategy {}",
                self.strategy
            );
        }
        self.live.extend(ids);
    }
}

fn event_of(e: IpcEvent) -> keel::order::Event {
    match e {
        IpcEvent::Event(e) => e,
        IpcEvent::Malformed(m) => panic!("unexpected malformed notice {m:?}"),
    }
}

/// One deterministic index attack and the fault the engine must declare.
#[derive(Debug, Clone, Copy)]
enum Attack {
    TailToMax,
    TailToZero,
    TailBack,
    TailPastCapacity,
    EventHeadPastTail,
    EventHeadBack,
}

const ATTACKS: [Attack; 6] = [
    Attack::TailToMax,
    Attack::TailToZero,
    Attack::TailBack,
    Attack::TailPastCapacity,
    Attack::EventHeadPastTail,
    Attack::EventHeadBack,
];

impl Attack {
    /// Writes the bad index; returns the fault the engine must declare.
    fn apply(self, raw: &Raw) -> ChannelFault {
        let tail = raw.load(offset::COMMAND_TAIL);
        let event_tail = raw.load(offset::EVENT_TAIL);
        let event_head = raw.load(offset::EVENT_HEAD);
        let (at, value) = match self {
            Self::TailToMax => (offset::COMMAND_TAIL, u64::MAX),
            Self::TailToZero => (offset::COMMAND_TAIL, 0),
            Self::TailBack => (offset::COMMAND_TAIL, tail - 1),
            Self::TailPastCapacity => (offset::COMMAND_TAIL, tail + CAPACITY + 1),
            Self::EventHeadPastTail => (offset::EVENT_HEAD, event_tail + 5),
            Self::EventHeadBack => (offset::EVENT_HEAD, 0),
        };
        raw.store(at, value);
        match self {
            Self::TailToMax | Self::TailPastCapacity => ChannelFault::Beyond {
                ring: RingKind::Commands,
                found: value,
                limit: tail + CAPACITY,
            },
            Self::TailToZero | Self::TailBack => ChannelFault::Backwards {
                ring: RingKind::Commands,
                last: tail,
                found: value,
            },
            Self::EventHeadPastTail => ChannelFault::Beyond {
                ring: RingKind::Events,
                found: value,
                limit: event_tail,
            },
            Self::EventHeadBack => ChannelFault::Backwards {
                ring: RingKind::Events,
                last: event_head,
                found: value,
            },
        }
    }
}

/// A well-behaved strategy over shared memory, in its own thread: place, wait for the accept,
/// cancel, wait for the cancel, until told to stop. Every command must get its answer and
/// nothing else may arrive. Returns the rounds done.
fn trade_until(mut peer: Peer, stop: Arc<AtomicBool>, rounds: Arc<AtomicU64>) -> u64 {
    while !stop.load(Ordering::Relaxed) {
        let i = peer.next_id();
        peer.send(Command::New(resting(i)));
        let e = event_of(peer.next_event("good strategy: accepted"));
        assert_eq!((e.id, e.kind), (i, EventKind::Accepted));
        peer.send(Command::Cancel { id: i });
        let e = event_of(peer.next_event("good strategy: canceled"));
        assert_eq!((e.id, e.kind), (i, EventKind::Canceled));
        rounds.fetch_add(1, Ordering::Release);
    }
    assert_eq!(peer.ch.pop_event(), None, "nothing unanswered or extra");
    assert_eq!(peer.ch.fault(), None);
    rounds.load(Ordering::Acquire)
}

/// Stops the engine on another thread: it must return within a bound whatever the strategies
/// did.
fn stop_within(engine: RunningEngine, bound: Duration) -> EngineReport {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(engine.stop());
    });
    rx.recv_timeout(bound)
        .expect("stop() returned in time")
        .expect("the engine stopped cleanly (no panic)")
}

fn bridge(report: &EngineReport, strategy: u16) -> BridgeStats {
    report
        .bridges
        .iter()
        .find(|(s, _)| s.0 == strategy)
        .map(|(_, b)| *b)
        .unwrap_or_else(|| panic!("no bridge for strategy {strategy}"))
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fuzz_seed() -> u64 {
    std::env::var("KEEL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6b65_656c_2d69_7063)
}

/// How far random writes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fuzz {
    /// Garbage records and header words, but indices the protocol allows: the channel must
    /// never be declared broken.
    LegalIndices,
    /// Anything, indices included.
    Anything,
}

/// Random writes into a channel a hostile strategy holds: header words (its own, the engine's,
/// the indices), command slots (garbage, and sealed records with random fields), and tail moves
/// within and beyond the ring. With `Fuzz::Anything`, stops early once the engine declared the
/// channel broken.
fn fuzz_channel(peer: &Peer, rng: &mut Rng, steps: u32, fuzz: Fuzz) {
    let raw = &peer.raw;
    let legal = fuzz == Fuzz::LegalIndices;
    let mut tail = raw.load(offset::COMMAND_TAIL);
    let mut event_head = raw.load(offset::EVENT_HEAD);
    // Room for one more record (legal mode: never more than a ring ahead of the engine).
    let room = |tail: u64| !legal || tail - raw.load(offset::COMMAND_HEAD) < CAPACITY;
    // In legal mode the indices are left alone (the engine's too: this fuzzer reads them to
    // stay legal; the engine itself never reads its own back).
    let indices = [
        offset::COMMAND_TAIL,
        offset::COMMAND_HEAD,
        offset::EVENT_TAIL,
        offset::EVENT_HEAD,
    ];
    for step in 0..steps {
        if !legal && raw.load(offset::CHANNEL_FAULT) != 0 && step % 64 == 0 {
            return;
        }
        match rng.below(8) {
            0 => {
                let at = 8 * rng.below(64) as usize;
                let value = match rng.below(5) {
                    0 => 0,
                    1 => u64::MAX,
                    2 => tail.wrapping_add(rng.below(3 * CAPACITY)),
                    3 => tail.wrapping_sub(rng.below(4)),
                    _ => rng.next(),
                };
                // Never the fault word: the test reads the engine's verdict there. In legal
                // mode not the declared table either: a strategy that declares another table
                // is refused by design (fault 5; its own tests in ipc and engine.rs).
                let declared = at == offset::DECLARED_FINGERPRINT;
                if !(legal && (indices.contains(&at) || declared)) && at != offset::CHANNEL_FAULT {
                    raw.store(at, value);
                }
            }
            1 | 2 if room(tail) => {
                let mut r = [0u8; RECORD_LEN];
                for b in r.chunks_exact_mut(8) {
                    b.copy_from_slice(&rng.next().to_le_bytes());
                }
                raw.write_command_slot(tail, &r);
                tail = tail.wrapping_add(1);
                raw.store(offset::COMMAND_TAIL, tail);
            }
            3 | 4 if room(tail) => {
                // A sealed record with random fields: a real command, or one refused field by
                // field. Its own strategy's ids only; venue and symbol as given.
                let mut r = encode_command(&Command::Cancel {
                    id: id(peer.strategy, 1 + rng.below(1 << 40)),
                });
                r[4] = 1 + rng.below(5) as u8;
                r[5] = rng.below(4) as u8;
                r[6] = rng.below(4) as u8;
                r[24..26].copy_from_slice(&(rng.below(3) as u16 * 7).to_le_bytes());
                r[26..28].copy_from_slice(&(rng.below(6) as u16).to_le_bytes());
                r[32..36].copy_from_slice(&(rng.next() as u32).to_le_bytes());
                r[40..48].copy_from_slice(&rng.next().to_le_bytes());
                raw.write_command_slot(tail, &sealed(r, tail));
                tail = tail.wrapping_add(1);
                raw.store(offset::COMMAND_TAIL, tail);
            }
            5 => {
                raw.store(offset::STRATEGY_HEARTBEAT, rng.next());
            }
            6 if !legal => {
                tail = tail.wrapping_add(rng.below(CAPACITY + 2));
                raw.store(offset::COMMAND_TAIL, tail);
            }
            7 if !legal => {
                let head = raw.load(offset::EVENT_HEAD);
                raw.store(offset::EVENT_HEAD, head.wrapping_add(rng.below(3)));
            }
            _ => {
                // Read (skip) events as a legal reader would: never back, never past the tail.
                let published = raw.load(offset::EVENT_TAIL);
                event_head = published.min(event_head + rng.below(8)).max(event_head);
                raw.store(offset::EVENT_HEAD, event_head);
            }
        }
        if step % 16 == 0 {
            std::thread::yield_now();
        }
    }
}

// Goal: strategies that write bogus indices (command tail to u64::MAX, to 0, back by one, past
// the capacity; event head past the tail, back to 0), malformed records, garbage header words
// and random values into their channel never panic, hang or stall the engine: a well-behaved
// shared-memory strategy and an in-process one keep trading throughout; each broken channel is
// declared in its header with the fault and counted in the report; its live orders are
// canceled as on strategy loss; every malformed command gets exactly one answer; and stop()
// returns in bounded time. Method: the real engine and venue on loopback, hostile writes
// through a raw mapping, seeded random writes (KEEL_FUZZ_SEED).
#[test]
fn hostile_strategies_cannot_stall_or_corrupt_the_engine() {
    let seed = fuzz_seed();
    eprintln!("KEEL_FUZZ_SEED={seed}");
    let venue = VenueThread::start();
    let dir = tempfile::tempdir().unwrap();
    let ipc = dir.path().join("ipc");
    // 0: in process, good; 1..=6: index attacks; 7: bad records and header garbage;
    // 8, 9: random writes; 10: good, over shared memory.
    let (records, fuzzed, good) = (7u16, [8u16, 9], 10u16);
    let mut engine = EngineBuilder::new(config(&venue.addr.to_string(), 11, &ipc))
        .in_process_strategies(1)
        .idle(IdlePolicy::TEST)
        .start()
        .unwrap();
    let mut in_process = engine.take_strategy(StrategyId(0)).unwrap();
    wait_until("SYNCED", Duration::from_secs(15), || {
        engine.venue_synced(VenueId(0))
    });

    let stop_good = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let good_peer = Peer::attach(&ipc, good);
    let trader = {
        let (stop, rounds) = (Arc::clone(&stop_good), Arc::clone(&rounds));
        std::thread::spawn(move || trade_until(good_peer, stop, rounds))
    };

    let mut attackers: Vec<Peer> = (1..=6).map(|s| Peer::attach(&ipc, s)).collect();
    let mut resting_hostile = 0;
    for p in &mut attackers {
        p.place_resting(2);
        resting_hostile += 2;
    }
    let mut expected = HashMap::new();
    for (p, attack) in attackers.iter().zip(ATTACKS) {
        p.raw.engine_passes(2); // the engine has seen the indices as they are now
        let fault = attack.apply(&p.raw);
        expected.insert(p.strategy, fault);
    }
    for p in &attackers {
        let want = expected[&p.strategy];
        wait_until(
            "the broken channel declared",
            Duration::from_secs(10),
            || p.ch.published_fault().is_some(),
        );
        assert_eq!(
            p.ch.published_fault(),
            Some(want),
            "strategy {}",
            p.strategy
        );
        assert_eq!(
            p.ch.engine_state(),
            EngineState::Running,
            "the engine itself still runs"
        );
    }

    let mut rp = Peer::attach(&ipc, records);
    rp.place_resting(2);
    hostile_records(&mut rp);

    let mut rng = Rng(seed | 1);
    let mut fuzz_peers = Vec::new();
    for (s, fuzz) in fuzzed.into_iter().zip([Fuzz::LegalIndices, Fuzz::Anything]) {
        let mut p = Peer::attach(&ipc, s);
        p.place_resting(2);
        resting_hostile += 2;
        fuzz_channel(&p, &mut rng, 20_000, fuzz);
        if fuzz == Fuzz::LegalIndices {
            p.raw.engine_passes(2);
            assert_eq!(
                p.raw.load(offset::CHANNEL_FAULT),
                0,
                "seed {seed}: legal indices never break a channel"
            );
        }
        // Whatever the random writes did, end with a tail no ring allows: the channel breaks.
        p.raw.store(offset::COMMAND_TAIL, u64::MAX);
        wait_until(
            &format!("seed {seed}: strategy {s} declared broken"),
            Duration::from_secs(10),
            || p.raw.load(offset::CHANNEL_FAULT) != 0,
        );
        fuzz_peers.push(p);
    }

    // The loop still serves everyone else: the good strategies trade on.
    let before = rounds.load(Ordering::Acquire);
    wait_until(
        "the good strategy trades on",
        Duration::from_secs(20),
        || rounds.load(Ordering::Acquire) >= before + 20,
    );
    stop_good.store(true, Ordering::Relaxed);
    let good_rounds = trader.join().expect("the good strategy saw every answer");
    // Every hostile order canceled at the venue (as on strategy loss); the records strategy
    // canceled its own; the good strategy left nothing.
    wait_until(
        &format!("seed {seed}: the venue has no open order"),
        Duration::from_secs(20),
        || venue.open_orders() == 0,
    );
    // An in-process round trip last: its answers come after every earlier venue report on
    // the same link, so the engine's table has applied the hostile orders' cancels.
    place_and_cancel_in_process(&mut in_process, 20);
    let report = stop_within(engine, Duration::from_secs(10));
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
    for p in &attackers {
        let b = bridge(&report, p.strategy);
        assert_eq!(b.broken, 1, "strategy {}", p.strategy);
        assert_eq!(
            b.fault,
            Some(expected[&p.strategy]),
            "strategy {}",
            p.strategy
        );
        assert_eq!(b.cancels_on_loss, 1, "strategy {}", p.strategy);
        assert_eq!(b.lost, 0, "broken, not lost: {}", p.strategy);
        assert_eq!(p.ch.engine_state(), EngineState::Stopped);
    }
    for p in &fuzz_peers {
        let b = bridge(&report, p.strategy);
        assert_eq!(b.broken, 1, "seed {seed}: strategy {}", p.strategy);
        assert!(b.malformed > 0 || b.commands > 0, "seed {seed}: {b:?}");
        assert_eq!(b.cancels_on_loss, 1, "seed {seed}: strategy {}", p.strategy);
    }
    let r = bridge(&report, records);
    assert_eq!(
        (r.broken, r.cancels_on_loss),
        (0, 0),
        "bad records do not break"
    );
    assert_eq!(r.malformed, 5);
    let g = bridge(&report, good);
    assert_eq!((g.broken, g.malformed, g.cancels_on_loss), (0, 0, 0));
    assert_eq!(g.commands, 2 * good_rounds);
    let venue = venue.finish();
    let stats = venue.exchange().stats();
    assert!(
        stats.canceled >= resting_hostile + 2 + good_rounds + 20,
        "seed {seed}: every hostile order canceled: {stats:?}"
    );
}

/// The records strategy: malformed records, a refused order, header garbage; each command
/// answered exactly once, then its own mass cancel answered for both resting orders.
fn hostile_records(p: &mut Peer) {
    let (huge, marker) = (p.next_id(), p.next_id());
    let raw = &p.raw;
    let next = std::cell::Cell::new(raw.load(offset::COMMAND_TAIL));
    let publish = |r: [u8; RECORD_LEN]| {
        let at = next.get();
        raw.write_command_slot(at, &r);
        next.set(at + 1);
        raw.store(offset::COMMAND_TAIL, at + 1);
        at
    };
    let tail = || next.get();
    let valid = |c: Command| encode_command(&c);
    let some_id = id(p.strategy, 999);
    let mut bad_crc = sealed(valid(Command::Cancel { id: some_id }), tail());
    bad_crc[20] ^= 0x5a;
    let p_crc = publish(bad_crc);
    let mut bad_kind = valid(Command::Cancel { id: some_id });
    bad_kind[4] = 200;
    let p_kind = publish(sealed(bad_kind, tail()));
    let mut bad_side = valid(Command::New(resting(some_id)));
    bad_side[5] = 7;
    let p_side = publish(sealed(bad_side, tail()));
    let p_position = publish(sealed(valid(Command::Cancel { id: some_id }), tail() + 40));
    let mut zero_id = valid(Command::Cancel { id: some_id });
    zero_id[16..24].copy_from_slice(&0u64.to_le_bytes());
    let p_zero_id = publish(sealed(zero_id, tail()));
    let mut order = resting(huge);
    order.qty = u32::MAX;
    publish(sealed(valid(Command::New(order)), tail()));
    // Garbage in the header words the engine wrote once or writes itself.
    let (magic, version) = (raw.load(offset::MAGIC), raw.load(offset::VERSION));
    raw.store(offset::MAGIC, u64::MAX);
    raw.store(offset::VERSION, 0xdead_beef);
    raw.store(offset::ENGINE_EPOCH, 0);
    // (The engine keeps its own indices: a garbage head here is overwritten at its next
    // read. A garbage event tail would only fool this strategy's own reader, so not here.)
    raw.store(offset::COMMAND_HEAD, u64::MAX);
    publish(sealed(valid(Command::Cancel { id: marker }), tail()));
    // Answers: one per command, in any order between notices and dispatcher answers, the
    // marker's last among the dispatcher's.
    let mut answers: HashMap<String, u32> = HashMap::new();
    loop {
        let key = match p.next_event("answers to bad records") {
            IpcEvent::Malformed(m) => format!("{m:?}"),
            IpcEvent::Event(e) => format!("{:?} {:?}", e.id, e.kind),
        };
        *answers.entry(key.clone()).or_default() += 1;
        if key.starts_with(&format!("{marker:?}")) {
            break;
        }
    }
    let want = [
        format!(
            "{:?}",
            RecordError::Field {
                position: p_kind,
                field: "command",
                value: 200
            }
        ),
        format!(
            "{:?}",
            RecordError::Field {
                position: p_side,
                field: "command",
                value: 7
            }
        ),
        format!(
            "{:?}",
            RecordError::Position {
                position: p_position,
                found: p_position + 40
            }
        ),
        format!(
            "{:?}",
            RecordError::Field {
                position: p_zero_id,
                field: "command",
                value: 0
            }
        ),
        format!(
            "{:?} {:?}",
            huge,
            EventKind::Refused {
                reason: RefusalReason::RiskQty
            }
        ),
    ];
    for w in &want {
        assert_eq!(answers.get(w), Some(&1), "{w} answered once: {answers:?}");
    }
    let crc = answers
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("Checksum {{ position: {p_crc},")))
        .map(|(_, n)| *n)
        .sum::<u32>();
    assert_eq!(crc, 1, "the torn record answered once: {answers:?}");
    assert_eq!(answers.len(), want.len() + 2, "nothing else: {answers:?}");
    // The channel still works: its own mass cancel through a client opened afresh (this
    // test moved the tail behind the first client's back; the header made valid again).
    raw.store(offset::MAGIC, magic);
    raw.store(offset::VERSION, version);
    p.ch = Channel::open(&p.path).unwrap();
    assert!(p.ch.push_command(&Command::MassCancel {
        scope: MassCancelScope::Strategy,
    }));
    let mut canceled = 0;
    while canceled < p.live.len() {
        let e = event_of(p.next_event("mass cancel answers"));
        assert_eq!(e.kind, EventKind::Canceled, "{e:?}");
        assert!(p.live.contains(&e.id));
        canceled += 1;
    }
}

fn place_and_cancel_in_process(s: &mut StrategyHandle, n: u64) {
    let ids: Vec<_> = (1..=n).map(|q| id(0, q)).collect();
    for &i in &ids {
        s.commands.push(Command::New(resting(i))).unwrap();
    }
    let mut seen = HashMap::new();
    let mut pump = |seen: &mut HashMap<ClientOrderId, Vec<EventKind>>| {
        while let Ok(e) = s.events.pop() {
            seen.entry(e.id).or_default().push(e.kind);
        }
    };
    wait_until("in-process accepts", Duration::from_secs(10), || {
        pump(&mut seen);
        seen.len() == ids.len()
    });
    for &i in &ids {
        s.commands.push(Command::Cancel { id: i }).unwrap();
    }
    wait_until("in-process cancels", Duration::from_secs(10), || {
        pump(&mut seen);
        seen.values().all(|v| v.len() == 2)
    });
    for v in seen.values() {
        assert_eq!(v, &[EventKind::Accepted, EventKind::Canceled]);
    }
}

// Goal: a writer that stores its tail the way CPython's struct.pack_into does (zero, then
// the value) is caught the first time the engine reads the 0: the channel breaks with
// "went back to 0", every command read before is whole and in order (no unwritten slot is
// consumed), and nothing is read after. Method: the engine side of a real channel polled in
// this thread while another thread publishes with torn tail stores, until the fault.
#[test]
fn a_torn_zero_tail_from_a_concurrent_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strategy-1");
    let engine = Channel::create_or_attach(&path, StrategyId(1), CAPACITY as u32, 64).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (path, done) = (path.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let strategy = Channel::open(&path).unwrap();
            let raw = Raw::open(&path);
            let mut seq = 1;
            while !done.load(Ordering::Relaxed) {
                if !strategy.push_command(&Command::Cancel { id: id(1, seq) }) {
                    std::thread::yield_now();
                    continue;
                }
                seq += 1;
                // The torn store: the word reads 0 for a moment, then the value again.
                let tail = raw.load(offset::COMMAND_TAIL);
                raw.store(offset::COMMAND_TAIL, 0);
                for _ in 0..200 {
                    std::hint::spin_loop();
                }
                raw.store(offset::COMMAND_TAIL, tail);
            }
        })
    };
    let mut expected = 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine.fault().is_none() {
        assert!(Instant::now() < deadline, "the torn store was never seen");
        while let Some(c) = engine.pop_command() {
            assert_eq!(
                c,
                Ok(Command::Cancel {
                    id: id(1, expected)
                })
            );
            expected += 1;
        }
    }
    done.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        matches!(
            engine.fault(),
            Some(ChannelFault::Backwards {
                ring: RingKind::Commands,
                found: 0,
                ..
            })
        ),
        "{:?}",
        engine.fault()
    );
    assert_eq!(
        engine.pop_command(),
        None,
        "nothing is read after the fault"
    );
    assert_eq!(engine.commands_pending(), 0);
}

/// A process id that no longer exists (a child that ran and was reaped).
fn dead_pid() -> u64 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    u64::from(pid)
}

/// Whether the Python package (sdk/python) calls the header live (`engine_live`, sampled for
/// `window_s`).
fn python_says_live(path: &Path, window_s: f64) -> bool {
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, time\n\
             sys.path.insert(0, sys.argv[1])\n\
             import keel\n\
             ch = keel.Channel(sys.argv[2], stale_after_s=0.5)\n\
             end = time.monotonic() + float(sys.argv[3]); live = False\n\
             while time.monotonic() < end and not live:\n    \
                 ch.beat(); live = ch.engine_live(); time.sleep(0.005)\n\
             print('live' if live else 'stale')\n",
        )
        .arg(package)
        .arg(path)
        .arg(window_s.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    match String::from_utf8_lossy(&out.stdout).trim() {
        "live" => true,
        "stale" => false,
        other => panic!("python said {other:?}"),
    }
}

// Goal: after an engine dies without a word (its header left "running, venue 0 SYNCED"), a
// restarted engine that cannot reach its venue shows its own truth from its start: a new
// epoch, its pid, no venue SYNCED, and never SYNCED while the venue is unreachable; the Python
// client calls the dead engine's header stale and a live engine's live; the next engine with
// its venue shows SYNCED only once the dispatcher sees it. Method: the real engine, a closed
// port as the unreachable venue, the header written as a killed engine leaves it.
#[test]
fn a_restarted_engine_shows_its_own_state_not_a_dead_ones() {
    let dir = tempfile::tempdir().unwrap();
    let ipc = dir.path().join("ipc");
    let path = ipc.join("strategy-0");
    let unreachable = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let start = |venue: &str| {
        EngineBuilder::new(config(venue, 1, &ipc))
            .in_process_strategies(0)
            .idle(IdlePolicy::TEST)
            .start()
            .unwrap()
    };
    let first = start(&unreachable.to_string());
    let strategy = Channel::open(&path).unwrap();
    wait_until("first engine running", Duration::from_secs(10), || {
        strategy.engine_state() == EngineState::Running
    });
    stop_within(first, Duration::from_secs(10));
    // What a kill -9 leaves: running, SYNCED, a pid that is gone, a heartbeat that stopped.
    let raw = Raw::open(&path);
    raw.store(offset::ENGINE_STATE, EngineState::Running as u64);
    raw.store(offset::VENUES_SYNCED, 1);
    raw.store(offset::ENGINE_PID, dead_pid());
    let epoch = strategy.engine_epoch();
    assert!(
        !python_says_live(&path, 1.0),
        "a dead engine's header is stale"
    );

    let second = start(&unreachable.to_string());
    assert_eq!(strategy.engine_epoch(), epoch + 1);
    assert_eq!(strategy.engine_pid(), u64::from(std::process::id()));
    assert!(
        !strategy.venue_synced(VenueId(0)),
        "not SYNCED from the start"
    );
    assert!(matches!(
        strategy.engine_state(),
        EngineState::Starting | EngineState::Running
    ));
    let passes = second.passes();
    wait_until("engine passes", Duration::from_secs(10), || {
        assert!(
            !strategy.venue_synced(VenueId(0)),
            "never SYNCED without a venue"
        );
        second.passes() > passes + 200
    });
    assert_eq!(strategy.engine_state(), EngineState::Running);
    assert!(
        python_says_live(&path, 5.0),
        "a live engine's header is live"
    );
    stop_within(second, Duration::from_secs(10));
    assert_eq!(strategy.engine_state(), EngineState::Stopped);

    let venue = VenueThread::start();
    let third = start(&venue.addr.to_string());
    wait_until("SYNCED in the header", Duration::from_secs(15), || {
        strategy.venue_synced(VenueId(0))
    });
    assert!(
        third.venue_synced(VenueId(0)),
        "the header follows the dispatcher"
    );
    stop_within(third, Duration::from_secs(10));
    assert!(
        !strategy.venue_synced(VenueId(0)),
        "a stopped engine clears SYNCED"
    );
    venue.finish();
}

/// `keel run` on a configuration for `venue` (strategy 0 over shared memory in `ipc`).
fn keel_run(dir: &Path, name: &str, venue: &str, ipc: &Path) -> Proc {
    let config = dir.join(format!("{name}.toml"));
    let journal = format!("[journal]\ndir = \"{}\"\n", dir.join("journal").display());
    std::fs::write(&config, config_text(venue, 1, ipc) + &journal).unwrap();
    Proc(
        std::process::Command::new(KEEL)
            .args([
                "run",
                "--config",
                config.to_str().unwrap(),
                "--status-s",
                "0",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    )
}

// Goal: the scenario with real processes: `keel run` SYNCED, then kill -9, then a
// restart that cannot connect: the header must not say SYNCED at any moment of the restart,
// shows the new engine's pid and epoch, and the Python client calls the killed engine's header
// stale and the new one's live. Method: `keel run` processes, the simulated venue in a thread,
// a closed port as the unreachable venue.
#[test]
fn after_kill_dash_nine_a_restart_that_cannot_connect_never_says_synced() {
    let venue = VenueThread::start();
    let dir = tempfile::tempdir().unwrap();
    let ipc = dir.path().join("ipc");
    let path = ipc.join("strategy-0");
    let mut first = keel_run(dir.path(), "first", &venue.addr.to_string(), &ipc);
    let mut strategy = None;
    wait_until("the channel", Duration::from_secs(15), || {
        strategy = Channel::open(&path).ok();
        strategy.is_some()
    });
    let strategy = strategy.unwrap();
    wait_until("running and SYNCED", Duration::from_secs(15), || {
        strategy.beat_strategy();
        strategy.engine_state() == EngineState::Running && strategy.venue_synced(VenueId(0))
    });
    let epoch = strategy.engine_epoch();
    first.0.kill().unwrap(); // SIGKILL
    first.0.wait().unwrap();
    assert_eq!(
        strategy.engine_state(),
        EngineState::Running,
        "what a kill leaves"
    );
    assert!(strategy.venue_synced(VenueId(0)), "what a kill leaves");
    assert!(
        !python_says_live(&path, 1.0),
        "a killed engine's header is stale"
    );

    let unreachable = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let second = keel_run(dir.path(), "second", &unreachable.to_string(), &ipc);
    let mut samples = 0u64;
    wait_until(
        "the restarted engine's epoch",
        Duration::from_secs(15),
        || {
            samples += 1;
            strategy.engine_epoch() > epoch
        },
    );
    // From here on the header is the new engine's: never SYNCED without its venue.
    assert_eq!(strategy.engine_pid(), u64::from(second.0.id()));
    let beat = strategy.engine_heartbeat();
    wait_until("the new engine's passes", Duration::from_secs(15), || {
        assert!(!strategy.venue_synced(VenueId(0)), "SYNCED without a venue");
        strategy.engine_heartbeat().wrapping_sub(beat) > 200
    });
    assert_eq!(strategy.engine_state(), EngineState::Running);
    assert!(
        python_says_live(&path, 5.0),
        "the new engine's header is live"
    );
    drop(second);
    venue.finish();
    assert!(samples > 0);
}
