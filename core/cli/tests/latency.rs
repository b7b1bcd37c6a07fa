//! keel's own latency measures, driven for real: the decision time (a command's arrival at
//! keel to its release) and the end-to-end time (arrival to the venue's first answer, keel's
//! queues included). Time is simulated: a clock that moves on every read, or the rig's manual
//! clock, so every figure checked is a count or a simulated duration, never a wall-clock one.

mod common;

use keel::clock::{Clock, ManualClock};
use keel::engine::{EngineBuilder, EngineLoop};
use keel::net::Transport;
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, OutcomeKind, Price, RequestKind, Side, StrategyId,
    SymbolId, TimeInForce, VenueId,
};
use keel_venue::flow::FlowConfig;
use keel_venue::server::{VenueConfig, VenueServer};
use keel_venue::simnet::{SimEndpoint, SimWorld};

use common::{limiter, roomy_config, Rig, MS};

/// Moves 1 µs every time it is read: code that reads it at each command's arrival and at each
/// release measures a non-zero decision; code that reads one `now_ns` per pass measures 0.
struct Ticking(ManualClock);

impl Clock for Ticking {
    fn now_ns(&self) -> u64 {
        self.0.advance(1_000);
        self.0.now_ns()
    }
}

struct World {
    venue: VenueServer<SimEndpoint>,
    engine: EngineLoop<SimEndpoint>,
    clock: Ticking,
}

impl World {
    /// The engine's own loop (`EngineBuilder::build`) and a simulated venue on a simulated
    /// network, both at the ticking clock.
    fn new() -> Self {
        let world = SimWorld::new(11);
        let addr = "10.0.0.2:1".parse().unwrap(); // simulated
        let mut venue_net = SimWorld::endpoint(&world);
        venue_net.listen(addr).unwrap();
        let venue_config = VenueConfig {
            flow: FlowConfig {
                events_per_sec: 0,
                ..FlowConfig::default()
            },
            ..VenueConfig::default()
        };
        let venue = VenueServer::with_transport(venue_config, venue_net, addr).unwrap();
        let link = common::ouch_venue(addr, "lat", 256, 1_000 * MS, Default::default());
        let config = common::engine_config(&["AAPL"], roomy_config(), vec![link], 256);
        let clock = Ticking(ManualClock::new(1_000 * MS));
        let engine = EngineBuilder::new(config)
            .build(SimWorld::endpoint(&world), clock.now_ns())
            .unwrap();
        Self {
            venue,
            engine,
            clock,
        }
    }

    /// Steps venue and engine (`frozen`: the engine with one `now_ns` per pass) until `done`,
    /// within a bounded number of passes.
    fn until(&mut self, what: &str, frozen: bool, mut done: impl FnMut(&mut Self) -> bool) {
        for _ in 0..200_000 {
            self.clock.0.advance(10_000);
            let now = self.clock.0.now_ns();
            self.venue.step(now, 0).unwrap();
            if frozen {
                self.engine.pass(now);
            } else {
                self.engine.pass_clocked(&self.clock);
            }
            if done(self) {
                return;
            }
        }
        panic!("timed out waiting for {what}");
    }
}

fn resting(seq: u64) -> NewOrder {
    NewOrder {
        id: ClientOrderId::new(StrategyId(0), seq).unwrap(),
        venue: VenueId(0),
        symbol: SymbolId(0),
        side: Side::Buy,
        price: Price::from_units(10, 0),
        qty: 10,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

// Goal: decision times recorded by the engine's own loop are measured, not rounded to the
// pass (the histogram's sum was exactly 0 for every decision). Method: 20 resting orders
// through `pass_clocked` with a clock that moves on every read; the decision and end-to-end
// histograms count them with a non-zero sum, end-to-end at least the venue's part. Then 5
// more through `pass(now)` (one instant per pass): those decisions weigh 0, as documented.
#[test]
fn decision_and_end_to_end_times_are_measured_by_the_engine_loop() {
    let mut w = World::new();
    w.until("SYNCED", false, |w| {
        w.engine.dispatcher().is_synced(VenueId(0))
    });
    let mut strategy = w.engine.take_strategy(StrategyId(0)).unwrap();
    for seq in 1..=20 {
        strategy.commands.push(Command::New(resting(seq))).unwrap();
    }
    let mut accepted = 0;
    w.until("20 accepts", false, |_| {
        while let Ok(e) = strategy.events.pop() {
            assert_eq!(e.kind, EventKind::Accepted, "{e:?}");
            accepted += 1;
        }
        accepted == 20
    });
    let lat = w.engine.dispatcher().latency().clone();
    assert_eq!(lat.decision_new.count(), 20);
    assert!(
        lat.decision_new.sum_ns() >= 20 * 1_000,
        "each decision spans at least one clock read: sum {} ns",
        lat.decision_new.sum_ns()
    );
    assert_eq!(lat.new_ack[0].count(), 20);
    assert_eq!(lat.new_e2e[0].count(), 20);
    assert!(
        lat.new_e2e[0].sum_ns() > lat.new_ack[0].sum_ns(),
        "end-to-end {} ns includes the venue's {} ns and keel's own time",
        lat.new_e2e[0].sum_ns(),
        lat.new_ack[0].sum_ns()
    );
    for seq in 21..=25 {
        strategy.commands.push(Command::New(resting(seq))).unwrap();
    }
    w.until("5 more accepts", true, |_| {
        while strategy.events.pop().is_ok() {
            accepted += 1;
        }
        accepted == 25
    });
    let frozen = &w.engine.dispatcher().latency().decision_new;
    assert_eq!(frozen.count(), 25);
    assert_eq!(
        frozen.sum_ns(),
        lat.decision_new.sum_ns(),
        "admitted and released at one instant: 0 ns each"
    );
}

// Goal: time an order spends held in its lane counts in the end-to-end histogram and not in
// the venue's ack time. Method: a limiter of 10 new orders a second with a burst of 1; three
// orders arrive together, so the second and third wait ~100 ms and ~200 ms for budget; the
// venue answers each 1 ms after its release (manual clock).
#[test]
fn queue_time_counts_end_to_end_but_not_in_ack_time() {
    let mut config = roomy_config();
    config.limiter = limiter(10, 1);
    let mut rig = Rig::new(config);
    for _ in 0..3 {
        rig.new_order(0, 0, 10);
    }
    let mut answered = 0;
    for _ in 0..1_000 {
        rig.poll();
        let sent = rig.requests(0);
        if !sent.is_empty() {
            rig.advance(MS);
        }
        for r in sent {
            let RequestKind::New(order) = r.kind else {
                panic!("only new orders here: {r:?}");
            };
            rig.outcome(0, OutcomeKind::Accepted { id: order.id });
            answered += 1;
        }
        rig.poll();
        if answered == 3 {
            break;
        }
        rig.advance(5 * MS);
    }
    assert_eq!(answered, 3, "every order left within the bound");
    let lat = rig.dispatcher.latency();
    assert_eq!(lat.new_ack[0].count(), 3);
    assert_eq!(lat.new_e2e[0].count(), 3);
    let ack_max = lat.new_ack[0].quantile(1.0);
    let e2e_max = lat.new_e2e[0].quantile(1.0);
    assert!(
        ack_max <= 2 * MS,
        "ack time is the venue's 1 ms: {ack_max} ns"
    );
    assert!(
        e2e_max >= 150 * MS,
        "the third order waited ~200 ms in its lane: end-to-end max {e2e_max} ns"
    );
}
