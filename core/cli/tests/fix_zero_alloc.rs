//! Zero heap allocations on the engine's FIX path. Method: the engine's own loop
//! (`EngineBuilder::build`: dispatcher, FIX venue link, io_uring reactor) against a QuickFIX/C++
//! acceptor in another process; a counting allocator armed around every engine pass counts
//! what the engine allocates while, after a warm-up that walks every path once, 2,000 orders
//! are entered and canceled, every 50th filled instead, one replaced, and the rare paths run
//! again: a TestRequest answered, a gap in the venue's numbers asked for and filled, a dropped
//! connection reconnected with both numbers resumed and reconciled by mass status. The count
//! must be zero. (The test's own bookkeeping — the acceptor's lines, the commands it is sent —
//! runs between passes, unarmed.)

mod common;

use std::cell::Cell;

use common::alloc::{CountingAllocator, ALLOCATIONS, ARMED};
use common::quickfix::Acceptor;

use keel::clock::{Clock, TscClock};
use keel::dispatch::{DispatcherConfig, StrategyHandle};
use keel::engine::{EngineBuilder, EngineLoop};
use keel::net::{Reactor, ReactorConfig};
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, Replace, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};
use keel::session::fix::FixSettings;
use keel::session::ProtocolConfig;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

struct Rig {
    clock: TscClock,
    engine: EngineLoop<Reactor>,
    strategy: StrategyHandle,
    venue: Acceptor,
    seq: u64,
    news: usize,
}

impl Rig {
    /// One engine pass, counted.
    fn pass(&mut self) {
        let now = self.clock.now_ns();
        ARMED.with(|a| a.set(true));
        self.engine.pass(now);
        ARMED.with(|a| a.set(false));
    }

    /// Passes until the next strategy event (bounded).
    fn next_event(&mut self) -> (ClientOrderId, EventKind) {
        for _ in 0..50_000_000u64 {
            self.pass();
            if let Ok(e) = self.strategy.events.pop() {
                return (e.id, e.kind);
            }
        }
        panic!("no event; the acceptor said {:?}", self.venue.seen);
    }

    fn synced(&mut self) {
        for _ in 0..50_000_000u64 {
            self.pass();
            if self.engine.dispatcher().is_synced(VenueId(0)) {
                return;
            }
        }
        panic!("not SYNCED; the acceptor said {:?}", self.venue.seen);
    }

    /// A resting buy, accepted; returns its id and the ClOrdID the venue saw.
    fn enter(&mut self) -> (ClientOrderId, String) {
        self.seq += 1;
        let id = ClientOrderId::new(StrategyId(0), self.seq).unwrap();
        let order = NewOrder {
            id,
            venue: VenueId(0),
            symbol: SymbolId((self.seq % 4) as u16),
            side: Side::Buy,
            price: Price::from_units(10, 0),
            qty: 100,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        self.strategy.commands.push(Command::New(order)).unwrap();
        assert_eq!(self.next_event(), (id, EventKind::Accepted));
        let n = self.news;
        self.news += 1;
        let line = {
            let (venue, engine, clock) = (&mut self.venue, &mut self.engine, &self.clock);
            venue.wait_while("new ", n, || {
                ARMED.with(|a| a.set(true));
                engine.pass(clock.now_ns());
                ARMED.with(|a| a.set(false));
            })
        };
        (id, line.split(' ').nth(1).unwrap().to_string())
    }

    fn cancel(&mut self, id: ClientOrderId) {
        self.strategy.commands.push(Command::Cancel { id }).unwrap();
        assert_eq!(self.next_event(), (id, EventKind::Canceled));
    }

    fn fill(&mut self, id: ClientOrderId, cl_ord_id: &str) {
        self.venue.send(&format!("fill {cl_ord_id} 100 10"));
        let (got, kind) = self.next_event();
        assert_eq!(got, id);
        assert!(
            matches!(kind, EventKind::Filled { qty: 100, .. }),
            "{kind:?}"
        );
    }

    fn replace(&mut self, id: ClientOrderId) -> ClientOrderId {
        self.seq += 1;
        let new_id = ClientOrderId::new(StrategyId(0), self.seq).unwrap();
        self.strategy
            .commands
            .push(Command::Replace(Replace {
                id,
                new_id,
                price: Price::from_units(9, 9000),
                qty: 50,
            }))
            .unwrap();
        assert_eq!(self.next_event(), (id, EventKind::Replaced { new_id }));
        new_id
    }

    /// The venue does `command`; waits for its `nth` `line`.
    fn venue_does(&mut self, command: &str, line: &str, nth: usize) {
        self.venue.send(command);
        self.venue_says(line, nth);
    }

    /// Waits (stepping the engine, counted) for the venue's `nth` `line`.
    fn venue_says(&mut self, line: &str, nth: usize) {
        let (venue, engine, clock) = (&mut self.venue, &mut self.engine, &self.clock);
        venue.wait_while(line, nth, || {
            ARMED.with(|a| a.set(true));
            engine.pass(clock.now_ns());
            ARMED.with(|a| a.set(false));
        });
    }

    /// Every rare path once: a TestRequest, a gap then a fill behind it, a replace, a dropped
    /// connection and its reconnect.
    fn rare_paths(&mut self, round: usize) {
        self.venue_does(
            &format!("testrequest T{round}"),
            &format!("sent-testrequest T{round}"),
            0,
        );
        let (id, cl) = self.enter();
        self.venue_does("gap 2", "gapped", round);
        self.fill(id, &cl);
        let (id, _) = self.enter();
        let replaced = self.replace(id);
        self.cancel(replaced);
        self.venue_does("disconnect", "disconnected", round);
        self.venue_says("logon", round + 1);
        self.synced();
    }
}

#[test]
fn fix_path_allocates_nothing() {
    let Some(venue) = Acceptor::start() else {
        return;
    };
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
    for window in config.limiter.windows.iter_mut().flatten() {
        window.limit_weight = 1_000_000;
        window.burst_weight = 100_000;
    }
    let mut link = common::ouch_venue(venue.addr, "zero", 1_024, 2_000_000_000, Default::default());
    link.protocol = ProtocolConfig::Fix44(FixSettings {
        sender_comp_id: "KEEL".into(),
        target_comp_id: "VENUE".into(),
        ..FixSettings::default()
    });
    let config = common::engine_config(&["AAPL", "MSFT", "AMZN", "NVDA"], config, vec![link], 64);
    let mut engine: EngineLoop<Reactor> = EngineBuilder::new(config)
        .build(reactor, clock.now_ns())
        .unwrap();
    let strategy = engine.take_strategy(StrategyId(0)).unwrap();
    let mut rig = Rig {
        clock,
        engine,
        strategy,
        venue,
        seq: 0,
        news: 0,
    };
    rig.synced();
    // Warm-up: every path once, then orders.
    rig.rare_paths(0);
    for _ in 0..200 {
        let (id, _) = rig.enter();
        rig.cancel(id);
    }
    ALLOCATIONS.with(|n| n.set(0));
    for i in 0..2_000 {
        let (id, cl) = rig.enter();
        if i % 50 == 0 {
            rig.fill(id, &cl);
        } else {
            rig.cancel(id);
        }
    }
    rig.rare_paths(1);
    let allocations = ALLOCATIONS.with(Cell::get);
    let link = &rig.engine.links()[0];
    assert_eq!(link.stats().decode_errors, 0);
    let fix = match link.client() {
        keel::session::AnyProtocol::Fix44(c) => c.fix_stats(),
        _ => unreachable!(),
    };
    assert_eq!(fix.resend_requests_sent, 2, "{fix:?}");
    assert_eq!(
        (fix.garbled, fix.malformed, fix.rejects_received),
        (0, 0, 0)
    );
    assert!(!rig.venue.saw("reject-sent"), "{:?}", rig.venue.seen);
    assert_eq!(rig.engine.poll_errors(), 0);
    assert_eq!(allocations, 0, "heap allocations on the engine's FIX path");
}

// Goal: the same count against keel's own venue, whose FIX acceptor resends: reports lost on
// the wire (the `fix-lose` fault) asked for and received again with PossDupFlag, a restart of
// the venue's connections with a replay of the whole day (every message again, below the
// expected number: skipped as possible duplicates), the reconnect resuming both numbers and
// reconciled by mass status. Only the engine's passes are counted (the venue is the test's
// peer, stepped unarmed in between).
#[test]
fn fix_resends_and_duplicates_allocate_nothing() {
    use common::world::{World, WorldBuilder};
    let mut w: World<Reactor> = WorldBuilder::new()
        .protocol(ProtocolConfig::Fix44(FixSettings {
            sender_comp_id: "KEEL".into(),
            target_comp_id: "VENUE".into(),
            ..FixSettings::default()
        }))
        .tweak(|d, _| {
            for window in d.limiter.windows.iter_mut().flatten() {
                window.limit_weight = 1_000_000;
                window.burst_weight = 100_000;
            }
        })
        .build::<Reactor>();
    let step = |w: &mut World<Reactor>| {
        let now = w.clock.now_ns();
        w.venue().step(now, 0).unwrap();
        ARMED.with(|a| a.set(true));
        w.engine.pass(now);
        ARMED.with(|a| a.set(false));
        w.events
            .extend(std::iter::from_fn(|| w.strategy.events.pop().ok()));
    };
    let until = |w: &mut World<Reactor>, what: &str, done: &dyn Fn(&World<Reactor>) -> bool| {
        for _ in 0..50_000_000u64 {
            step(w);
            if done(w) {
                return;
            }
        }
        panic!("no {what}: {:?}", w.events);
    };
    let synced = |w: &World<Reactor>| w.dispatcher().is_synced(VenueId(0));
    let mut seq = 0;
    let mut round = |w: &mut World<Reactor>, lose: bool| {
        seq += 1;
        let order = w.order(seq, 30);
        w.strategy.commands.push(Command::New(order)).unwrap();
        until(w, "accepted", &|w| {
            w.kinds(order.id).contains(&EventKind::Accepted)
        });
        if lose {
            w.venue().apply_control(0, "fix-lose 2").unwrap();
        }
        for _ in 0..3 {
            let now = w.clock.now_ns();
            w.venue()
                .exchange_mut()
                .synthetic(now, 1, Side::Sell, order.price.0, 10, false);
        }
        until(w, "filled", &|w| {
            w.kinds(order.id)
                .iter()
                .any(|k| matches!(k, EventKind::Filled { .. }))
        });
    };
    let rare = |w: &mut World<Reactor>, round: &mut dyn FnMut(&mut World<Reactor>, bool)| {
        round(w, true);
        w.venue().apply_control(0, "replay-all").unwrap();
        w.venue().apply_control(0, "restart").unwrap();
        until(w, "link down", &|w| !synced(w));
        until(w, "SYNCED again", &synced);
        round(w, false);
    };
    until(&mut w, "SYNCED", &synced);
    // Warm-up: every path once, then orders.
    rare(&mut w, &mut round);
    for _ in 0..100 {
        round(&mut w, false);
    }
    ALLOCATIONS.with(|n| n.set(0));
    for _ in 0..1_000 {
        round(&mut w, false);
    }
    rare(&mut w, &mut round);
    let allocations = ALLOCATIONS.with(Cell::get);
    let fix = match w.link().client() {
        keel::session::AnyProtocol::Fix44(c) => c.fix_stats(),
        _ => unreachable!(),
    };
    assert!(fix.resend_requests_sent >= 2, "{fix:?}");
    assert!(fix.poss_dup_skipped > 100, "{fix:?}");
    assert_eq!(
        (fix.garbled, fix.malformed, fix.rejects_received),
        (0, 0, 0)
    );
    let venue = w.venue().fix_stats().unwrap();
    assert!(venue.resent >= 4 && venue.lost_injected == 4, "{venue:?}");
    assert_eq!(w.engine.poll_errors(), 0);
    assert_eq!(allocations, 0, "heap allocations on the engine's FIX path");
}
