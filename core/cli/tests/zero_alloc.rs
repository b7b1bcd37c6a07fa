//! Zero heap allocations on the hot path. Method: a counting global allocator that counts
//! only on this test's thread while armed; 1,000,000 mixed commands (new, cancel, replace,
//! mass cancel) flow through the dispatcher's real rings to an in-test venue that acks,
//! fills, cancels, replaces and times out, after a warm-up. The count must be zero. The same
//! holds for the journal's appends, the shared-memory strategy channel and the engine's
//! market-data path (WebSocket frames to bounded books to a subscriber).

mod common;

use std::cell::Cell;

use common::alloc::{CountingAllocator, ALLOCATIONS, ARMED};

use common::{roomy_config, Rig};
use keel::dispatch::OperatorScope;
use keel::order::{
    ClientOrderId, Command, LinkMode, MassCancelScope, OutcomeKind, Price, Replace, RequestKind,
    Side, StrategyId, SymbolId, VenueId,
};
use keel::rng::{Rng64, SplitMix64};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const RECENT: usize = 4096;

struct Driver {
    rng: SplitMix64,
    recent: [ClientOrderId; RECENT],
    recent_len: usize,
}

impl Driver {
    fn remember(&mut self, id: ClientOrderId) {
        self.recent[self.recent_len % RECENT] = id;
        self.recent_len += 1;
    }

    /// One of the last 64 ids issued (most of them still open).
    fn recent_id(&mut self) -> Option<ClientOrderId> {
        let n = self.recent_len.min(64) as u64;
        let back = self.rng.below_inclusive(n.checked_sub(1)?) as usize;
        Some(self.recent[(self.recent_len - 1 - back) % RECENT])
    }

    /// One command from strategy 0 or 1: 55% new, 30% cancel, 12% replace, 3% mass cancel.
    fn command(&mut self, rig: &mut Rig) {
        let strategy = (self.rng.next_u64() & 1) as u16;
        let roll = self.rng.below_inclusive(99);
        let command = if roll < 55 {
            let mut order = rig.order(
                strategy,
                self.rng.below_inclusive(7) as u16,
                1 + self.rng.below_inclusive(99) as u32,
            );
            order.side = if self.rng.next_u64() & 1 == 0 {
                Side::Buy
            } else {
                Side::Sell
            };
            // One in eight reduce-only: its lane, its reserve and its refusal are measured
            // too (positions drift with the fills, so some pass and some are refused).
            order.reduce_only = self.rng.below_inclusive(7) == 0;
            self.remember(order.id);
            Command::New(order)
        } else if let (true, Some(id)) = (roll < 85, self.recent_id()) {
            Command::Cancel { id }
        } else if let (true, Some(id)) = (roll < 97, self.recent_id()) {
            let new_id = rig.id(id.strategy().0);
            self.remember(new_id);
            Command::Replace(Replace {
                id,
                new_id,
                price: Price::from_units(9, 5_000),
                qty: 10,
            })
        } else {
            Command::MassCancel {
                scope: MassCancelScope::Symbol(SymbolId(self.rng.below_inclusive(7) as u16)),
            }
        };
        let strategy = match command {
            Command::Cancel { id } | Command::Replace(Replace { id, .. }) => id.strategy().0,
            _ => strategy,
        };
        rig.send(strategy, command);
    }

    /// The venue's side: answer everything it was sent.
    fn answer(&mut self, rig: &mut Rig) {
        while let Ok(request) = rig.venues[0].requests.pop() {
            let outcome = match request.kind {
                RequestKind::New(order) => match self.rng.below_inclusive(9) {
                    0..=2 => OutcomeKind::Fill {
                        id: order.id,
                        qty: order.qty,
                        price: order.price,
                    },
                    3 => OutcomeKind::Timeout { id: order.id },
                    _ => OutcomeKind::Accepted { id: order.id },
                },
                RequestKind::Cancel { id } => OutcomeKind::Canceled { id },
                RequestKind::Replace(r) => OutcomeKind::Replaced {
                    id: r.id,
                    new_id: r.new_id,
                },
                RequestKind::Query { id } => OutcomeKind::Accepted { id },
                // A contradiction the table found: the venue reconciles (read-only, then
                // trusted again) — the rare path is covered by the allocation count too.
                RequestKind::Reconcile { .. } => {
                    rig.outcome(
                        0,
                        OutcomeKind::LinkState {
                            mode: LinkMode::ReadOnly,
                        },
                    );
                    OutcomeKind::LinkState {
                        mode: LinkMode::Trading,
                    }
                }
            };
            rig.outcome(0, outcome);
            if let OutcomeKind::Timeout { id } = outcome {
                // The late answer that resolves the Unknown order.
                rig.outcome(0, OutcomeKind::Accepted { id });
            }
        }
    }

    fn run(&mut self, rig: &mut Rig, commands: u64) {
        for i in 0..commands {
            self.command(rig);
            if i % 32 == 31 {
                rig.poll();
                self.answer(rig);
                rig.poll();
                for s in 0..2 {
                    while rig.strategies[s].events.pop().is_ok() {}
                }
                rig.advance(20_000);
            }
        }
    }
}

#[test]
fn one_million_commands_allocate_nothing() {
    let mut config = roomy_config();
    config.orders_max = 65_536;
    // Per-strategy quotas on the decision path, tight enough to refuse some orders (rate)
    // and strategy 1 with its own; the cancel lane's per-symbol rotation serves every cancel,
    // mass cancel and status query below.
    config.quota = keel::dispatch::quota::StrategyQuota {
        new_per_sec: 300_000,
        new_burst: 64,
        in_flight_max: 2_048,
    };
    let mut rig = Rig::with_rings(config, 1_024, 1_024);
    let own = keel::dispatch::quota::StrategyQuota {
        in_flight_max: 1_024,
        ..config.quota
    };
    rig.dispatcher
        .set_strategy_quota(StrategyId(1), own, rig.now_ns)
        .unwrap();
    // With the order journal on the decision path, as in production, its files small enough
    // that it rolls over several times inside the measured million commands (a rollover is a
    // swap to the file its keeper thread prepared: nothing on the decision path allocates).
    let dir = tempfile::tempdir().unwrap();
    let journal_config = keel::journal::JournalConfig {
        dir: dir.path().to_path_buf(),
        file_bytes: 150_000 * keel::journal::RECORD_LEN as u64,
    };
    let (journal, _) = keel::journal::Journal::open(journal_config, |_| {}).unwrap();
    rig.dispatcher.attach_journal(journal);
    let mut driver = Driver {
        rng: SplitMix64::new(42),
        recent: [ClientOrderId(0); RECENT],
        recent_len: 0,
    };
    driver.run(&mut rig, 100_000);
    let before = *rig.dispatcher.stats();
    let rollovers_before = rig.dispatcher.journal_mut().unwrap().rollovers();

    ARMED.with(|a| a.set(true));
    // The adaptive controller's cap is set while armed: the measured run passes its gate.
    let now = rig.now_ns;
    rig.dispatcher
        .set_new_order_permille(now, VenueId(0), 500)
        .unwrap();
    driver.run(&mut rig, 1_000_000);
    let after = *rig.dispatcher.stats();
    // The operator's commands (`keel ctl`) on a loaded table: holds on and off (withdrawing
    // queued orders), a breaker forced both ways, cancels by strategy, symbol and venue.
    let now = rig.now_ns;
    let d = &mut rig.dispatcher;
    let open_before = d.table().open_count();
    d.set_kill_switch(now, true);
    d.set_kill_switch(now, false);
    d.set_strategy_enabled(now, StrategyId(1), false).unwrap();
    d.set_strategy_enabled(now, StrategyId(1), true).unwrap();
    d.set_symbol_shed(now, SymbolId(3), true).unwrap();
    d.set_symbol_shed(now, SymbolId(3), false).unwrap();
    d.force_breaker(now, VenueId(0), true).unwrap();
    d.force_breaker(now, VenueId(0), false).unwrap();
    // The adaptive controller's commands: a shed on and off, the cap lowered and lifted.
    d.set_symbol_shed_by_control(now, SymbolId(4), true)
        .unwrap();
    d.set_symbol_shed_by_control(now, SymbolId(4), false)
        .unwrap();
    d.set_new_order_permille(now, VenueId(0), 10).unwrap();
    d.set_new_order_permille(now, VenueId(0), 1000).unwrap();
    d.count_control_command(true);
    let by_symbol = OperatorScope {
        symbol: Some(SymbolId(2)),
        ..OperatorScope::default()
    };
    let cancels = [
        d.operator_cancel(now, by_symbol).unwrap(),
        d.operator_cancel(now, OperatorScope::default()).unwrap(),
    ];
    ARMED.with(|a| a.set(false));
    assert!(open_before > 0 && cancels[1].covered > 0, "{cancels:?}");

    let allocations = ALLOCATIONS.with(Cell::get);
    // The run did real work of every kind; otherwise zero would prove nothing.
    assert_eq!(after.commands - before.commands, 1_000_000);
    assert!(after.sent_new - before.sent_new > 200_000, "{after:?}");
    assert!(after.sent_cancel - before.sent_cancel > 50_000, "{after:?}");
    assert!(
        after.sent_replace - before.sent_replace > 10_000,
        "{after:?}"
    );
    assert!(after.events - before.events > 500_000, "{after:?}");
    assert!(
        after.sent_reduce_only - before.sent_reduce_only > 1_000,
        "{after:?}"
    );
    let reduce_refused = |s: &keel::dispatch::DispatchStats| {
        s.refused_for(keel::order::RefusalReason::ReduceOnlyIncreases)
    };
    assert!(
        reduce_refused(&after) > reduce_refused(&before),
        "{after:?}"
    );
    let quota_refused = rig.dispatcher.quotas().stats(StrategyId(0)).rate_refused
        + rig.dispatcher.quotas().stats(StrategyId(1)).rate_refused;
    assert!(quota_refused > 0, "the quota path refused some orders");
    assert!(rig.dispatcher.table().stats().evictions > 100_000);
    assert_eq!(allocations, 0, "heap allocations on the hot path");
    assert_eq!(rig.dispatcher.stats().journal_errors, 0);
    assert!(rig.dispatcher.journal_mut().unwrap().next_index() > 500_000);
    let rollovers = rig.dispatcher.journal_mut().unwrap().rollovers() - rollovers_before;
    assert!(
        rollovers >= 3,
        "{rollovers} rollovers inside the measured commands"
    );
}

// Goal: appending to the journal (intent, ack, fill, close) allocates nothing: 100,000
// records into mapped files after open, rolling over four times (a rollover is a swap to the
// file the journal's keeper thread prepared; its work is on its own thread).
#[test]
fn journal_appends_allocate_nothing() {
    use keel::journal::{Journal, JournalConfig, JournalRecord, RECORD_LEN};
    use keel::order::{NewOrder, StrategyId, TimeInForce, VenueId};
    let dir = tempfile::tempdir().unwrap();
    let config = JournalConfig {
        dir: dir.path().to_path_buf(),
        file_bytes: 20_001 * RECORD_LEN as u64,
    };
    let (mut journal, _) = Journal::open(config, |_| {}).unwrap();
    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    for seq in 1..=25_000u64 {
        let id = ClientOrderId::new(StrategyId(0), seq).unwrap();
        let order = NewOrder {
            id,
            venue: VenueId(0),
            symbol: SymbolId(1),
            side: Side::Buy,
            price: Price::from_units(10, 0),
            qty: 5,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        let wire_ref = u32::try_from(seq).unwrap();
        let venue_seq = u64::from(wire_ref);
        journal
            .append(&JournalRecord::Intent { order, wire_ref })
            .unwrap();
        journal
            .append(&JournalRecord::Accepted { id, venue_seq })
            .unwrap();
        journal
            .append(&JournalRecord::Fill {
                id,
                qty: 5,
                price: order.price,
                venue_seq,
            })
            .unwrap();
        journal
            .append(&JournalRecord::Closed { id, venue_seq })
            .unwrap();
    }
    ARMED.with(|a| a.set(false));
    assert_eq!(journal.next_index(), 100_001);
    assert_eq!(journal.rollovers(), 4);
    assert_eq!(
        ALLOCATIONS.with(Cell::get),
        0,
        "allocations while journaling"
    );
}

// Goal: a strategy in another process costs no allocation either: 1,000,000 commands and
// 1,000,000 events through a shared-memory channel (encode, checksum, publish, check, decode)
// after open.
#[test]
fn shared_memory_channel_allocates_nothing() {
    use keel::ipc::{Channel, IpcEvent};
    use keel::order::{Event, EventKind, StrategyId};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strategy-0");
    let engine = Channel::create_or_attach(&path, StrategyId(0), 1024, 1024).unwrap();
    let strategy = Channel::open(&path).unwrap();
    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    let mut moved = 0u64;
    for seq in 1..=1_000_000u64 {
        let id = ClientOrderId::new(StrategyId(0), seq).unwrap();
        let command = Command::Cancel { id };
        assert!(strategy.push_command(&command));
        strategy.beat_strategy();
        let Some(Ok(got)) = engine.pop_command() else {
            panic!("command {seq} lost");
        };
        let event = Event {
            id,
            kind: EventKind::Filled {
                qty: 3,
                price: Price::from_units(1, 0),
            },
            at_ns: seq,
        };
        assert!(engine.push_event(&event));
        engine.beat_engine();
        let Some(Ok(IpcEvent::Event(e))) = strategy.pop_event() else {
            panic!("event {seq} lost");
        };
        moved += u64::from(got == command && e == event);
    }
    ARMED.with(|a| a.set(false));
    assert_eq!(moved, 1_000_000);
    assert_eq!(
        ALLOCATIONS.with(Cell::get),
        0,
        "allocations on the shared-memory path"
    );
}

use keel::clock::{Clock, TscClock};
use keel::feed::fanout::Subscriber;
use keel::feed::handler::FeedHandler;
use keel::net::{NetEvent, Reactor};

/// How long a market-data drill may take before the test fails (a bound on waiting, not a
/// timing).
const DRILL_DEADLINE_NS: u64 = 60_000_000_000;

/// A feed handler driven by a real reactor, with a subscriber drained as it goes.
struct FeedRig {
    reactor: Reactor,
    handler: FeedHandler,
    strategy: Subscriber,
    events: Vec<NetEvent>,
    clock: TscClock,
}

impl FeedRig {
    /// Runs the feed loop until `done` holds (bounded: fails after `DRILL_DEADLINE_NS`).
    fn run_until(&mut self, what: &str, done: impl Fn(&FeedHandler) -> bool) {
        let deadline_ns = self.clock.now_ns() + DRILL_DEADLINE_NS;
        while !done(&self.handler) {
            let now = self.clock.now_ns();
            assert!(now < deadline_ns, "{what}: {:?}", self.handler.stats());
            self.events.clear();
            self.reactor.poll(now, 1_000_000, &mut self.events).unwrap();
            for e in &self.events {
                self.handler.on_event(now, &mut self.reactor, e);
            }
            self.handler.step(now, &mut self.reactor);
            while self.strategy.next_book().is_some() {}
            while self.strategy.next_trade().is_some() {}
        }
    }
}

// Goal: the engine's market-data path allocates nothing, and neither does losing the connection
// and rebuilding it. Method: after warm-up, tens of thousands of deltas and trades arrive over a
// real WebSocket (io_uring, loopback), are parsed, applied to bounded books and handed to a
// subscriber; inside the same armed window the server is made to close the connection
// (shutdown, close 1001) `CLOSES` times, to stall until the handler gives up on it (silence)
// once, and to drop a delta (a sequence gap) `GAPS` times. Each drill is waited for until the
// handler has seen it and recovered (reconnect, handshake, resubscribe, snapshots; or gap,
// snapshot request, snapshot), and the counts are checked: zero allocations on this thread.
// (The server runs in its own thread and is not counted.)
#[test]
fn market_data_path_allocates_nothing() {
    use keel::feed::handler::{FeedConfig, FeedStats};
    use keel::net::ReactorConfig;
    use keel::proto::md::BookSide;
    use keel_venue::md_server::{MdConfig, MdFaults, MdServer};
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;

    const CLOSES: u32 = 3;
    const GAPS: u32 = 3;

    /// What the test asks of the server thread (atomics: asking must not allocate).
    #[derive(Default)]
    struct Drills {
        stop: AtomicBool,
        /// Close every connection until this many closes were done.
        closes: AtomicU32,
        /// Drop one delta until this many were dropped.
        gaps: AtomicU32,
        /// Neither read, write nor publish.
        stalled: AtomicBool,
    }

    let drills = Arc::new(Drills::default());
    let server_drills = drills.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let drills = server_drills;
        let mut md = MdServer::new(MdConfig::default()).unwrap();
        tx.send(md.local_addr()).unwrap();
        let clock = TscClock::new();
        let (mut n, mut closes, mut gaps) = (0u64, 0u32, 0u32);
        while !drills.stop.load(Ordering::Relaxed) {
            if drills.stalled.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            let now = clock.now_ns();
            let want = drills.closes.load(Ordering::Relaxed);
            if closes < want {
                closes = want;
                md.shutdown(now);
            }
            let want = drills.gaps.load(Ordering::Relaxed);
            if gaps < want {
                gaps = want;
                // One delta of symbol 0 nobody hears of (a bid far below the asks: no cross).
                md.set_faults(MdFaults {
                    drop_every: 1,
                    ..MdFaults::default()
                });
                let qty = md.level_qty(0, BookSide::Bid, 900) % 9 + 1;
                md.update_level(0, BookSide::Bid, 900, qty);
                md.set_faults(MdFaults::default());
            }
            for _ in 0..20 {
                n += 1;
                let symbol = (n % 4) as u16;
                let price = 1_000 + (n * 7 % 40) as i64;
                if n % 5 == 0 {
                    md.trade(now, symbol, 1_100, n % 50, n % 2 == 0);
                } else if n % 2 == 0 {
                    md.update_level(symbol, BookSide::Bid, price, n % 9);
                } else {
                    md.update_level(symbol, BookSide::Ask, price + 100, n % 9);
                }
            }
            md.step(now, 0).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        md.stats()
    });
    let addr = rx.recv().unwrap();

    let mut handler = FeedHandler::new(FeedConfig {
        addr,
        // A stalled server is given up on after 1 s (the drill below).
        silent_ns: 1_000_000_000,
        ..FeedConfig::default()
    });
    let strategy = handler.subscribe(65_536);
    // And the market-data file strategies in other processes read (a ring small enough to
    // wrap many times).
    let md_dir = tempfile::tempdir().unwrap();
    let md_path = md_dir.path().join("md-0");
    handler.attach_market_data(
        keel::ipc::md::MdWriter::create(
            &md_path,
            FeedConfig::default().symbols.len() as u32,
            1_024,
        )
        .unwrap(),
    );
    let mut rig = FeedRig {
        reactor: Reactor::new(ReactorConfig::default()).unwrap(),
        handler,
        strategy,
        events: Vec::with_capacity(1_024),
        clock: TscClock::new(),
    };
    let now = rig.clock.now_ns();
    rig.handler.start(now, &mut rig.reactor);
    // Warm-up: connect, snapshots, buffers.
    rig.run_until("warm-up", |h| h.synced() && h.stats().deltas >= 5_000);
    let base = rig.handler.stats();

    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    rig.run_until("steady flow", |h| h.stats().deltas >= base.deltas + 10_000);
    // Recovered: connected, every book resynchronised, and deltas flowing again.
    let recovered = |h: &FeedHandler, before: &FeedStats| {
        h.synced() && h.stats().deltas >= before.deltas + 2_000
    };
    for i in 1..=CLOSES {
        let before = rig.handler.stats();
        drills.closes.store(i, Ordering::Relaxed);
        rig.run_until("server close", |h| {
            h.stats().disconnects > before.disconnects && recovered(h, &before)
        });
    }
    let before = rig.handler.stats();
    drills.stalled.store(true, Ordering::Relaxed);
    rig.run_until("stalled server", |h| {
        h.stats().disconnects > before.disconnects
    });
    drills.stalled.store(false, Ordering::Relaxed);
    rig.run_until("after the stall", |h| recovered(h, &before));
    // A gap is seen at the symbol's next delta; if the connection is lost before (a slow
    // consumer cut under load, say), the new connection's snapshot covers it: ask again.
    let mut gaps_asked = 0;
    for _ in 0..GAPS {
        let mut attempts = 0;
        loop {
            attempts += 1;
            assert!(attempts <= 20, "no gap seen: {:?}", rig.handler.stats());
            let before = rig.handler.stats();
            gaps_asked += 1;
            drills.gaps.store(gaps_asked, Ordering::Relaxed);
            rig.run_until("gap", |h| {
                let s = h.stats();
                let seen = s.gaps > before.gaps && s.snapshots > before.snapshots;
                (seen || s.disconnects > before.disconnects) && recovered(h, &before)
            });
            if rig.handler.stats().gaps > before.gaps {
                break;
            }
        }
    }
    ARMED.with(|a| a.set(false));
    drills.stop.store(true, Ordering::Relaxed);
    let server_stats = server.join().unwrap();

    let stats = rig.handler.stats();
    let allocations = ALLOCATIONS.with(Cell::get);
    // Every drill happened and was seen; otherwise zero would prove nothing.
    let disconnects = stats.disconnects - base.disconnects;
    assert!(disconnects > u64::from(CLOSES), "{stats:?}");
    assert!(
        stats.connects - base.connects > u64::from(CLOSES),
        "{stats:?}"
    );
    assert!(
        server_stats.upgraded > u64::from(CLOSES) + 1,
        "{server_stats:?}"
    );
    let books = 4 * (u64::from(CLOSES) + 1) + u64::from(GAPS);
    assert!(stats.snapshots - base.snapshots >= books, "{stats:?}");
    assert!(stats.gaps - base.gaps >= u64::from(GAPS), "{stats:?}");
    assert!(stats.resyncs - base.resyncs >= u64::from(GAPS), "{stats:?}");
    assert!(stats.deltas - base.deltas >= 20_000, "{stats:?}");
    assert!(stats.trades > 5_000, "{stats:?}");
    assert_eq!(stats.crossed + stats.malformed, 0, "{stats:?}");
    assert_eq!(
        stats.protocol_errors + stats.handshakes_refused,
        0,
        "{stats:?}"
    );
    assert_eq!(
        allocations, 0,
        "allocations on the market-data path: {stats:?}"
    );
    // The file was written all along: every book in it, the trade ring wrapped.
    let mut reader = keel::ipc::md::MdReader::open(&md_path).unwrap();
    for symbol in 0..reader.symbols() as u16 {
        assert!(reader.top(symbol).unwrap().seq > 0, "symbol {symbol}");
    }
    drop(rig);
    assert!(
        !reader.synced(),
        "a dropped writer says it is no longer in step"
    );
}

// Goal: a feed that takes its snapshots from REST (`snapshot = "rest"`) allocates nothing
// either: deltas buffered while a snapshot is fetched through the gate on a kept-alive HTTP
// connection, the depth answer parsed into the kept level buffers, deltas at or below its
// update id dropped, the rest applied — and every resync after a gap the same way. Method: a
// `keel venue` process (not counted) with its REST API streams a few thousand events a second;
// after warm-up, inside the armed window, its market data drops every 300th delta (control
// `md-faults`, written from bytes prepared before arming) until the handler has resynced from
// REST at least `RESYNCS` times, then runs clean until every book is in sync again.
#[test]
fn rest_snapshot_path_allocates_nothing() {
    use keel::feed::handler::{FeedConfig, RestSnapshots, SnapshotSource};
    use keel::net::ReactorConfig;
    use std::io::{Read, Write};

    const RESYNCS: u64 = 6;
    let v = common::peers::venue(&["--rest-listen", "127.0.0.1:0", "--flow-rate", "3000"]);
    let rest: std::net::SocketAddr = v.rest.as_deref().unwrap().parse().unwrap();
    let md: std::net::SocketAddr =
        v.md.trim_start_matches("ws://")
            .trim_end_matches("/md")
            .parse()
            .unwrap();
    let clock = TscClock::new();
    let mut handler = FeedHandler::with_snapshots(
        FeedConfig {
            addr: md,
            resync_retry_ns: 200_000_000,
            snapshot: SnapshotSource::Rest(Box::new(RestSnapshots::new(rest))),
            ..FeedConfig::default()
        },
        clock.now_ns(),
    )
    .unwrap();
    let strategy = handler.subscribe(65_536);
    let mut rig = FeedRig {
        reactor: Reactor::new(ReactorConfig::default()).unwrap(),
        handler,
        strategy,
        events: Vec::with_capacity(1_024),
        clock,
    };
    let now = rig.clock.now_ns();
    rig.handler.start(now, &mut rig.reactor);
    rig.run_until("warm-up", |h| h.synced() && h.stats().deltas >= 2_000);
    // A first resync from REST in warm-up too (its buffers, the gate's queue).
    let mut control = std::net::TcpStream::connect(&v.control).unwrap();
    let mut answer = [0u8; 256];
    let faults_on = b"md-faults 300 0 0 0\n";
    let faults_off = b"md-faults 0 0 0 0\n";
    control.write_all(faults_on).unwrap();
    let _ = control.read(&mut answer).unwrap();
    let before = rig.handler.stats();
    rig.run_until("a warm-up resync", |h| {
        h.stats().gaps > before.gaps && h.stats().snapshots > before.snapshots
    });
    control.write_all(faults_off).unwrap();
    let _ = control.read(&mut answer).unwrap();
    rig.run_until("in sync", |h| h.synced());
    let base = rig.handler.stats();

    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    rig.run_until("steady flow", |h| h.stats().deltas >= base.deltas + 3_000);
    control.write_all(faults_on).unwrap();
    let n = control.read(&mut answer).unwrap();
    assert!(answer[..n].starts_with(b"ok md-faults"));
    rig.run_until("resyncs from REST", |h| {
        let s = h.stats();
        s.gaps >= base.gaps + RESYNCS && s.snapshots >= base.snapshots + RESYNCS
    });
    control.write_all(faults_off).unwrap();
    let _ = control.read(&mut answer).unwrap();
    let after_faults = rig.handler.stats();
    rig.run_until("in sync again", |h| {
        h.synced() && h.stats().deltas >= after_faults.deltas + 1_000
    });
    ARMED.with(|a| a.set(false));
    let allocations = ALLOCATIONS.with(Cell::get);
    let stats = rig.handler.stats();
    let (rest_stats, gate) = rig.handler.rest_stats().unwrap();
    assert!(
        stats.rest_requests - base.rest_requests >= RESYNCS,
        "{stats:?}"
    );
    assert_eq!(stats.snapshots, rest_stats.done, "{stats:?} {rest_stats:?}");
    assert_eq!(
        stats.malformed + stats.protocol_errors + stats.rest_failures,
        0,
        "{stats:?}"
    );
    assert_eq!(gate.throttled_429 + gate.banned_418, 0);
    assert_eq!(
        allocations, 0,
        "allocations on the REST snapshot path: {stats:?} {rest_stats:?}"
    );
}

// Goal: a connection cut in the middle of a frame or of a fragmented message (no close frame:
// the socket just ends) costs no allocation either, and leaves nothing behind for the next
// connection. Method: a hand-written server on a plain TCP socket answers the upgrade, sends
// a snapshot per symbol, deltas and trades, then half a frame, a first fragment, or a header
// announcing more than follows, and ends the stream; the handler reconnects `CUTS` times in the
// armed window and must resynchronise every time without a protocol error or a malformed
// message. (The server thread is not counted.)
#[test]
fn connections_cut_mid_frame_allocate_nothing() {
    use keel::feed::handler::FeedConfig;
    use keel::guard::backoff::BackoffConfig;
    use keel::net::ReactorConfig;
    use keel::proto::ws::{self, Opcode};
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    const CUTS: u64 = 6;
    const SYMBOLS: [&str; 4] = ["AAPL", "MSFT", "AMZN", "NVDA"];

    fn text(out: &mut Vec<u8>, fin: bool, op: Opcode, json: &str) {
        let at = out.len();
        out.resize(at + ws::header_len(json.len(), false) + json.len(), 0);
        let n = ws::encode_frame(&mut out[at..], fin, op, json.as_bytes(), None);
        out.truncate(at + n);
    }

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let server_stop = stop.clone();
    let server = std::thread::spawn(move || {
        for k in 0..=CUTS {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut head = Vec::new();
            let key = loop {
                let mut chunk = [0u8; 1024];
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "client left during the handshake");
                head.extend_from_slice(&chunk[..n]);
                if let Some((request, _)) = ws::parse_request(&head).unwrap() {
                    break request.key;
                }
            };
            let mut out = ws::response(&key).into_bytes();
            for (i, symbol) in SYMBOLS.iter().enumerate() {
                let qty = i + 1;
                let snapshot = format!(
                    r#"{{"type":"snapshot","symbol":"{symbol}","seq":10,"bids":[[100,{qty}],[99,2]],"asks":[[101,3]]}}"#
                );
                text(&mut out, true, Opcode::Text, &snapshot);
                for seq in 11..60u64 {
                    let delta = format!(
                        r#"{{"type":"book","symbol":"{symbol}","seq":{seq},"side":"bid","price":98,"qty":{seq}}}"#
                    );
                    text(&mut out, true, Opcode::Text, &delta);
                }
                let trade = format!(
                    r#"{{"type":"trade","symbol":"{symbol}","seq":{k},"price":100,"qty":1,"aggressor":"buy"}}"#
                );
                text(&mut out, true, Opcode::Text, &trade);
            }
            if k == CUTS {
                // The last connection stays up until the test is done.
                s.write_all(&out).unwrap();
                while !server_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return;
            }
            let last =
                r#"{"type":"book","symbol":"AAPL","seq":60,"side":"ask","price":102,"qty":1}"#;
            match k % 3 {
                0 => {
                    // Half a frame.
                    let at = out.len();
                    text(&mut out, true, Opcode::Text, last);
                    out.truncate(at + (out.len() - at) / 2);
                }
                // A first fragment whose message never ends.
                1 => text(&mut out, false, Opcode::Text, &last[..20]),
                // A header announcing 1,000 bytes, and 10 of them.
                _ => out.extend_from_slice(&[
                    0x81, 126, 0x03, 0xE8, b'{', b'"', 0, 0, 0, 0, 0, 0, 0, 0,
                ]),
            }
            s.write_all(&out).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            // Read what the handler sends until it closes (so nothing unread resets the socket).
            let mut sink = [0u8; 4096];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        }
    });

    let mut handler = FeedHandler::new(FeedConfig {
        addr,
        backoff: BackoffConfig {
            base_ns: 10_000_000,
            cap_ns: 20_000_000,
            ..BackoffConfig::default()
        },
        ..FeedConfig::default()
    });
    let strategy = handler.subscribe(1_024);
    let mut rig = FeedRig {
        reactor: Reactor::new(ReactorConfig::default()).unwrap(),
        handler,
        strategy,
        events: Vec::with_capacity(1_024),
        clock: TscClock::new(),
    };
    let now = rig.clock.now_ns();
    rig.handler.start(now, &mut rig.reactor);
    rig.run_until("first snapshots", |h| h.stats().snapshots >= 4);
    let base = rig.handler.stats();

    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    rig.run_until("every cut and the last connection", |h| {
        h.stats().disconnects >= base.disconnects + CUTS
            && h.synced()
            && h.stats().deltas >= 49 * 4 * (CUTS + 1)
    });
    ARMED.with(|a| a.set(false));
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();

    let stats = rig.handler.stats();
    assert_eq!(stats.connects, CUTS + 1, "{stats:?}");
    assert_eq!(stats.disconnects, CUTS, "{stats:?}");
    assert_eq!(stats.snapshots, 4 * (CUTS + 1), "{stats:?}");
    assert_eq!(stats.deltas, 49 * 4 * (CUTS + 1), "{stats:?}");
    assert_eq!(stats.trades, 4 * (CUTS + 1), "{stats:?}");
    assert_eq!(
        stats.gaps + stats.crossed + stats.malformed + stats.protocol_errors,
        0,
        "{stats:?}"
    );
    assert_eq!(
        ALLOCATIONS.with(Cell::get),
        0,
        "allocations on cut connections: {stats:?}"
    );
}
