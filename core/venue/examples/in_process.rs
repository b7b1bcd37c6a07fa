//! Embedding keel: an in-process strategy trading through the engine.
//!
//! Run it with `cargo run --release --example in_process`. It starts keel's simulated venue on
//! loopback (your venues go in the configuration instead), builds the engine from a TOML
//! configuration, takes strategy 0's handle (an order sender and an event receiver, both
//! lock-free SPSC rings), places orders, cancels what rests, and prints what happened.
//!
//! Copy it: everything a strategy needs is `EngineBuilder`, `take_strategy`, `Command` and
//! `Event`. The strategy loop must not block the engine: it pushes commands (a full ring
//! refuses, never waits) and pops events when it likes.

use std::collections::HashMap;
use std::time::Duration;

use keel::clock::{Clock, TscClock};
use keel::config::EngineConfig;
use keel::engine::{EngineBuilder, Topology};
use keel::order::{
    ClientOrderId, Command, EventKind, IdAllocator, NewOrder, Price, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};
use keel::runtime::IdlePolicy;
use keel::strategy::{retry_advice, Retry};
use keel_venue::server::{VenueConfig, VenueServer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. A venue to trade with: keel's simulator on loopback, stepped by its own thread.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut venue = VenueServer::new(VenueConfig::default()).expect("venue");
        addr_tx.send(venue.local_addr()).expect("main waits");
        let clock = TscClock::new();
        loop {
            venue.step(clock.now_ns(), 1_000_000).expect("venue step");
        }
    });
    let venue = addr_rx.recv()?;

    // 2. The engine, from a configuration (see docs/config.md for every key).
    let config = EngineConfig::from_toml(&format!(
        r#"
        symbols = ["AAPL", "MSFT", "AMZN", "NVDA"]
        [dispatcher]
        strategies = 1
        [engine]
        topology = "inline"
        [[venue]]
        name = "sim"
        address = "{venue}"
        username = "demo"
        password = "keel"
        "#
    ))?;
    let mut engine = EngineBuilder::new(config)
        .topology(Topology::Inline)
        .idle(IdlePolicy::TEST) // a shared machine: back off when idle (use BusySpin on an isolated core)
        .start()?;
    let mut strategy = engine
        .take_strategy(StrategyId(0))
        .expect("strategy 0 is in process");
    while !engine.venue_synced(VenueId(0)) {
        std::thread::sleep(Duration::from_millis(1));
    }

    // 3. Trade: ids come from the strategy's own allocator, resumed above every id the
    //    engine's journal has seen from this strategy (0 without a journal).
    let mut ids = IdAllocator::resume(StrategyId(0), engine.restored().id_floor[0]);
    ids.extend_lease(1_000);
    let mut placed: Vec<ClientOrderId> = Vec::new();
    for i in 0..10u16 {
        let id = ids.allocate()?;
        let order = NewOrder {
            id,
            venue: VenueId(0),
            symbol: SymbolId(i % 4),
            side: if i % 2 == 0 { Side::Buy } else { Side::Sell },
            // Bids well below and offers well above 100.00: they rest until canceled.
            price: if i % 2 == 0 {
                Price::from_units(95, 0)
            } else {
                Price::from_units(105, 0)
            },
            qty: 10,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        if strategy.commands.push(Command::New(order)).is_ok() {
            placed.push(id);
        }
    }
    let mut states: HashMap<ClientOrderId, Vec<EventKind>> = HashMap::new();
    let mut canceled_sent = false;
    let deadline = TscClock::new();
    let start = deadline.now_ns();
    while deadline.now_ns() - start < 5_000_000_000 {
        while let Ok(event) = strategy.events.pop() {
            if let Retry::After(ns) = retry_advice(&event.kind) {
                println!(
                    "{}: {:?} (transient: retry with a new id after {ns} ns)",
                    event.id, event.kind
                );
            }
            states.entry(event.id).or_default().push(event.kind);
        }
        let accepted = placed
            .iter()
            .filter(|id| {
                states
                    .get(id)
                    .is_some_and(|e| e.contains(&EventKind::Accepted))
            })
            .count();
        if accepted == placed.len() && !canceled_sent {
            for id in &placed {
                let _ = strategy.commands.push(Command::Cancel { id: *id });
            }
            canceled_sent = true;
        }
        let canceled = placed
            .iter()
            .filter(|id| {
                states
                    .get(id)
                    .is_some_and(|e| e.contains(&EventKind::Canceled))
            })
            .count();
        if canceled == placed.len() {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    for id in &placed {
        println!(
            "{id}: {:?}",
            states.get(id).map_or(&[][..], |v| v.as_slice())
        );
    }

    // 4. Stop: every loop ends, the journal (if any) is synced, and the engine reports.
    let report = engine.stop()?;
    println!(
        "sent {} new, {} cancels; {} orders still open",
        report.dispatch.sent_new,
        report.dispatch.sent_cancel,
        report.open_orders.len()
    );
    if report.open_orders.is_empty() && placed.len() == 10 {
        Ok(())
    } else {
        Err("not every order was accepted and canceled".into())
    }
}
