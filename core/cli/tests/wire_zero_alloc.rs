//! Zero heap allocations on the engine's wire path. Method: the engine thread runs the
//! engine's own loop (`EngineBuilder::build`: dispatcher, OUCH venue link, io_uring reactor)
//! against keel's venue running in
//! another thread, over loopback; a counting allocator armed on the engine thread only counts
//! every allocation while 20,000 orders are entered and canceled after a warm-up. The count
//! must be zero — with the engine's log records and the wire log on (every message handed to
//! the wire log's ring, written out by its side thread, then dumped and counted). (The venue
//! is a simulator and allocates freely in its own thread.)

mod common;

use std::cell::Cell;

use common::alloc::{CountingAllocator, ALLOCATIONS, ARMED};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use keel::clock::{Clock, TscClock};
use keel::dispatch::DispatcherConfig;
use keel::engine::{EngineBuilder, EngineLoop};
use keel::net::{Reactor, ReactorConfig};
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
    VenueId,
};
use keel_venue::flow::FlowConfig;
use keel_venue::server::{VenueConfig, VenueServer};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[test]
fn wire_path_allocates_nothing() {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let venue_stop = Arc::clone(&stop);
    let venue = std::thread::spawn(move || {
        let config = VenueConfig {
            flow: FlowConfig {
                events_per_sec: 0,
                ..FlowConfig::default()
            },
            ..VenueConfig::default()
        };
        let mut venue = VenueServer::new(config).unwrap();
        tx.send(venue.local_addr()).unwrap();
        let clock = TscClock::new();
        while !venue_stop.load(Ordering::Relaxed) {
            venue.step(clock.now_ns(), 1_000_000).unwrap();
        }
        venue.exchange().stats()
    });
    let addr = rx.recv().unwrap();

    let clock = TscClock::new();
    let reactor = Reactor::new(ReactorConfig {
        conns_max: 2,
        ..ReactorConfig::default()
    })
    .unwrap();
    let mut config = DispatcherConfig {
        strategies: 1,
        venues: 1,
        symbols: 4,
        orders_max: 4_096,
        ..DispatcherConfig::default()
    };
    // The venue is not rate limited here and the test is about allocation, not budget.
    for window in config.limiter.windows.iter_mut().flatten() {
        window.limit_weight = 1_000_000;
        window.burst_weight = 100_000;
    }
    let venue_link = common::ouch_venue(addr, "zero", 1_024, 2_000_000_000, Default::default());
    let mut config = common::engine_config(
        &["AAPL", "MSFT", "AMZN", "NVDA"],
        config,
        vec![venue_link],
        64,
    );
    let wire_dir = tempfile::tempdir().unwrap();
    config.wire_log = Some(keel::wirelog::WireLogConfig {
        dir: wire_dir.path().to_path_buf(),
        ..keel::wirelog::WireLogConfig::default()
    });
    let mut engine: EngineLoop<Reactor> = EngineBuilder::new(config)
        .build(reactor, clock.now_ns())
        .unwrap();
    let mut strategy = engine.take_strategy(StrategyId(0)).unwrap();

    let mut seq = 0u64;
    let mut outstanding: Option<ClientOrderId> = None;
    let mut done = 0u64;
    let mut run = |target: u64,
                   strategy: &mut keel::dispatch::StrategyHandle,
                   engine: &mut EngineLoop<Reactor>| {
        let mut passes = 0u64;
        while done < target {
            passes += 1;
            assert!(passes < 50_000_000, "stalled after {done} orders");
            engine.pass(clock.now_ns());
            if outstanding.is_none() && engine.dispatcher().is_synced(VenueId(0)) {
                seq += 1;
                let id = ClientOrderId::new(StrategyId(0), seq).unwrap();
                let order = NewOrder {
                    id,
                    venue: VenueId(0),
                    symbol: SymbolId((seq % 4) as u16),
                    side: Side::Buy,
                    price: Price::from_units(1, 0),
                    qty: 10,
                    tif: TimeInForce::Day,
                    reduce_only: false,
                };
                strategy.commands.push(Command::New(order)).unwrap();
                outstanding = Some(id);
            }
            while let Ok(e) = strategy.events.pop() {
                match e.kind {
                    EventKind::Accepted => strategy
                        .commands
                        .push(Command::Cancel { id: e.id })
                        .unwrap(),
                    EventKind::Canceled => {
                        outstanding = None;
                        done += 1;
                    }
                    other => panic!("unexpected {other:?} for {}", e.id),
                }
            }
        }
    };
    run(2_000, &mut strategy, &mut engine);
    ARMED.with(|a| a.set(true));
    run(22_000, &mut strategy, &mut engine);
    ARMED.with(|a| a.set(false));
    let allocations = ALLOCATIONS.with(Cell::get);

    stop.store(true, Ordering::Relaxed);
    let venue_stats = venue.join().unwrap();
    assert_eq!(venue_stats.accepted, 22_000);
    assert_eq!(venue_stats.canceled, 22_000);
    assert_eq!(engine.dispatcher().stats().sent_new, 22_000);
    assert_eq!(engine.links()[0].stats().decode_errors, 0);
    assert_eq!(engine.poll_errors(), 0);
    assert_eq!(allocations, 0, "heap allocations on the engine's wire path");
    assert_eq!(engine.links()[0].wire_dropped(), 0);
    let sent = engine.links()[0].stats().requests_sent;
    drop(engine.finish());
    let mut text = Vec::new();
    let wire = keel::wirelog::dump(&wire_dir.path().join("wire.log"), &mut text).unwrap();
    assert_eq!(wire.dropped, 0);
    assert_eq!(wire.torn_tail_bytes, 0);
    // Every order and cancel went out and was answered (plus login, reconciliation and
    // heartbeats).
    assert!(
        wire.messages_out >= sent && sent >= 2 * 22_000,
        "{wire:?}, {sent} sent"
    );
    assert!(wire.messages_in >= 2 * 22_000, "{wire:?}");
}
