//! Venue sessions that survive, on real sockets (loopback): a venue restart while an
//! order rests (the missed fill arrives by replay, then reconciliation, then SYNCED); an order
//! lost in a dropped connection (Unknown, then resolved as never received — never resent); the
//! incident (a late remainder); the gateway restarting mid-reconciliation; a reconciliation
//! timeout; the breaker drill. Each scenario also runs on the simulator (`simulation.rs`), and
//! each runs on both of the engine's transports (io_uring and epoll).

mod common;

use common::world::{World, WorldBuilder};
use keel::clock::Clock;
use keel::net::SocketTransport;
use keel::order::{
    Command, EventKind, NewOrder, OrderState, Price, RefusalReason, RejectReason, Side, SymbolId,
    TimeInForce, VenueId,
};
use keel::session::machine::LinkState;
use keel::session::VenueProtocol;

use common::MS;

// Every scenario runs on both of the engine's transports: `io_uring::<name>` and
// `epoll::<name>`.
on_every_transport!(
    accepted_then_canceled,
    restart_replay_reconcile_then_synced,
    order_lost_in_a_drop_is_unknown_then_resolved_never_resent,
    the_incident_late_remainder_is_unknown_never_resent,
    gateway_restart_mid_reconciliation_on_sockets,
    reconciliation_timeout_then_synced_on_sockets,
    breaker_drill_on_sockets,
    a_stall_of_keel_s_own_loop_is_not_blamed_on_the_venue,
);

// Goal: the shortest session scenario, as the test world's docs show it: an order accepted,
// then canceled at the strategy's request, each answered once, on every transport.
fn accepted_then_canceled<T: SocketTransport>() {
    let mut w = World::<T>::new();
    w.until("SYNCED", |w| w.dispatcher().is_synced(VenueId(0)));
    let order = w.order(1, 100);
    w.send(Command::New(order));
    w.until("accept", |w| {
        w.kinds(order.id).contains(&EventKind::Accepted)
    });
    w.send(Command::Cancel { id: order.id });
    w.until("cancel", |w| {
        w.kinds(order.id).contains(&EventKind::Canceled)
    });
    assert_eq!(
        w.kinds(order.id),
        [EventKind::Accepted, EventKind::Canceled]
    );
    assert_eq!(w.venue().exchange().stats().canceled, 1);
}

// Goal: the gateway restarts while an order rests; it fills while keel is away; keel
// reconnects with backoff, the replay brings the fill, reconciliation finds nothing
// unresolved, and only then are new orders allowed again. Nothing is resent.
fn restart_replay_reconcile_then_synced<T: SocketTransport>() {
    let mut rig = World::<T>::new();
    rig.until("first SYNCED", |r| r.dispatcher().is_synced(VenueId(0)));
    let resting = rig.order(1, 100);
    rig.strategy.commands.push(Command::New(resting)).unwrap();
    rig.until("accept", |r| {
        r.kinds(resting.id).contains(&EventKind::Accepted)
    });

    rig.venue().apply_control(0, "restart").unwrap();
    rig.until("link down", |r| !r.dispatcher().is_synced(VenueId(0)));
    let now = rig.clock.now_ns();
    rig.venue()
        .exchange_mut()
        .synthetic(now, 1, Side::Sell, Price::from_units(50, 0).0, 100, true);
    // While not synced a new order is refused with the precise reason.
    let refused = rig.order(2, 1);
    rig.strategy.commands.push(Command::New(refused)).unwrap();
    rig.until("refusal", |r| !r.kinds(refused.id).is_empty());
    assert_eq!(
        rig.kinds(refused.id),
        vec![EventKind::Refused {
            reason: RefusalReason::NotSynced
        }]
    );

    rig.until("SYNCED again", |r| r.dispatcher().is_synced(VenueId(0)));
    assert_eq!(rig.link().state(), LinkState::Synced);
    assert_eq!(
        rig.kinds(resting.id),
        vec![
            EventKind::Accepted,
            EventKind::Filled {
                qty: 100,
                price: Price::from_units(50, 0)
            }
        ]
    );
    assert_eq!(
        rig.dispatcher().table().get(resting.id).unwrap().state,
        OrderState::Filled
    );
    assert_eq!(rig.dispatcher().guards().risk.position(SymbolId(1)), 100);
    assert_eq!(
        rig.venue().exchange().stats().accepted,
        1,
        "nothing was resent"
    );
    let session = rig.link().session_stats();
    assert_eq!((session.synced, session.disconnects), (2, 1));
    // What the journal will persist: every message of the venue's stream was applied.
    assert_eq!(
        rig.link().client().applied_through(),
        rig.venue().exchange().account(0).stream_len()
    );
    assert_eq!(
        rig.link().client().stats().last_reconciliation.unresolved(),
        0
    );
}

// Goal: an order written while the venue had stopped reading is lost when the connection
// drops. keel reports it Unknown (never failed, never resent); after reconnecting, the
// venue's reconciliation answer shows no such order, so keel resolves it as never received.
fn order_lost_in_a_drop_is_unknown_then_resolved_never_resent<T: SocketTransport>() {
    let mut rig = World::<T>::new();
    rig.until("SYNCED", |r| r.dispatcher().is_synced(VenueId(0)));
    rig.venue().apply_control(0, "stall 300").unwrap();
    let lost = rig.order(1, 10);
    rig.strategy.commands.push(Command::New(lost)).unwrap();
    rig.until("order written", |r| {
        r.dispatcher().stats().sent_new == 1 && r.link().stats().requests_sent == 1
    });
    rig.venue().apply_control(0, "drop").unwrap();
    rig.until("Unknown", |r| {
        r.kinds(lost.id).contains(&EventKind::Unknown)
    });
    rig.until("SYNCED again", |r| r.dispatcher().is_synced(VenueId(0)));
    rig.until("resolution", |r| r.kinds(lost.id).len() == 2);
    assert_eq!(
        rig.kinds(lost.id),
        vec![
            EventKind::Unknown,
            EventKind::Rejected {
                reason: RejectReason::NotReceived
            }
        ]
    );
    assert_eq!(
        rig.dispatcher().table().get(lost.id).unwrap().state,
        OrderState::Rejected
    );
    assert_eq!(
        rig.dispatcher().guards().risk.unknown_orders(SymbolId(1)),
        0,
        "the gate lifted"
    );
    assert_eq!(
        rig.venue().exchange().stats().accepted,
        0,
        "the venue never saw it and keel never resent it"
    );
    assert_eq!(
        rig.link().client().stats().last_reconciliation.not_received,
        1
    );
}

// Goal: the incident. An immediate-or-cancel buy of 100 gets 50 at once; the venue's final
// report for the remainder is late (past keel's ack timeout). keel marks the order Unknown,
// asks the venue (a status query, never a resend), and the late report resolves it: the
// strategy saw Unknown and then the resolution, the position is exactly the 50 bought, and
// the venue received exactly one order.
fn the_incident_late_remainder_is_unknown_never_resent<T: SocketTransport>() {
    let mut rig = WorldBuilder::new().ack_timeout(200 * MS).build::<T>();
    rig.until("SYNCED", |r| r.dispatcher().is_synced(VenueId(0)));
    let now = rig.clock.now_ns();
    rig.venue()
        .exchange_mut()
        .synthetic(now, 1, Side::Sell, Price::from_units(50, 0).0, 50, true);
    rig.venue().apply_control(0, "delay-final 500").unwrap();
    let ioc = NewOrder {
        tif: TimeInForce::ImmediateOrCancel,
        ..rig.order(1, 100)
    };
    rig.strategy.commands.push(Command::New(ioc)).unwrap();
    rig.until("resolution", |r| {
        r.kinds(ioc.id).contains(&EventKind::Canceled)
    });
    let px = Price::from_units(50, 0);
    assert_eq!(
        rig.kinds(ioc.id),
        vec![
            EventKind::Accepted,
            EventKind::PartiallyFilled {
                qty: 50,
                price: px,
                leaves: 50
            },
            EventKind::Unknown,
            EventKind::Canceled,
        ]
    );
    assert_eq!(
        rig.dispatcher().table().get(ioc.id).unwrap().state,
        OrderState::Canceled
    );
    assert_eq!(
        rig.dispatcher().guards().risk.position(SymbolId(1)),
        50,
        "exactly the intended fill"
    );
    assert_eq!(
        rig.dispatcher().guards().risk.unknown_orders(SymbolId(1)),
        0
    );
    assert_eq!(
        rig.venue().exchange().stats().accepted,
        1,
        "never a second order for the remainder"
    );
    assert_eq!(rig.dispatcher().stats().sent_new, 1);
    // The status query's own answer waits behind the held report, so it times out too and is
    // asked again: queries, never a resend.
    assert!(rig.dispatcher().stats().sent_query >= 1);
    assert!(rig.link().client().stats().timeouts >= 1);
}

// Goal: the gateway restarts in the middle of reconciliation, on real sockets: the link is
// caught RECONCILING (its query sent, the answer not yet read) and the venue drops it. keel
// reconnects and ends SYNCED with the resting order intact and nothing resent.
fn gateway_restart_mid_reconciliation_on_sockets<T: SocketTransport>() {
    let mut rig = World::<T>::new();
    rig.until("first SYNCED", |r| r.dispatcher().is_synced(VenueId(0)));
    let resting = rig.order(1, 10);
    rig.strategy.commands.push(Command::New(resting)).unwrap();
    rig.until("accept", |r| {
        r.kinds(resting.id).contains(&EventKind::Accepted)
    });
    rig.venue().apply_control(0, "drop").unwrap();
    // Each step ends after the link has acted, before the venue reads again: a link seen
    // RECONCILING has its query in flight.
    rig.until("reconciling", |r| {
        r.link().state() == LinkState::Reconciling
    });
    rig.venue().apply_control(0, "restart").unwrap();
    rig.until("SYNCED after the second drop", |r| {
        r.dispatcher().is_synced(VenueId(0))
            && r.link().client().stats().last_reconciliation.unresolved() == 0
    });
    let session = rig.link().session_stats();
    assert!(session.disconnects >= 2, "{session:?}");
    assert_eq!(
        rig.dispatcher().table().get(resting.id).unwrap().state,
        OrderState::Live
    );
    assert_eq!(rig.kinds(resting.id), vec![EventKind::Accepted]);
    assert_eq!(rig.venue().exchange().stats().accepted, 1, "nothing resent");
}

// Goal: a venue that stops answering during reconciliation, on real sockets: the
// reconciliation times out (300 ms here), keel drops the connection and reconnects, and is
// SYNCED once the venue answers again.
fn reconciliation_timeout_then_synced_on_sockets<T: SocketTransport>() {
    let mut rig = WorldBuilder::new()
        .ack_timeout(2_000 * MS)
        .tweak(|_, link| {
            link.session.reconcile_timeout_ns = 300 * MS;
        })
        .build::<T>();
    rig.until("first SYNCED", |r| r.dispatcher().is_synced(VenueId(0)));
    rig.venue().apply_control(0, "drop").unwrap();
    rig.until("reconciling", |r| {
        r.link().state() == LinkState::Reconciling
    });
    let now = rig.clock.now_ns();
    rig.venue().apply_control(now, "stall 500").unwrap();
    rig.until("SYNCED after the timeout", |r| {
        r.dispatcher().is_synced(VenueId(0))
    });
    assert_eq!(rig.link().session_stats().reconcile_timeouts, 1);
    assert_eq!(
        rig.link().client().stats().last_reconciliation.unresolved(),
        0
    );
}

// Goal: the breaker drill on real sockets: the venue starts rejecting (system problem); the
// breaker opens within its window; a strategy following `retry_advice` stops at BreakerOpen;
// while open a cancel still reaches the venue and no new order does; once the venue recovers,
// half-open probes close it.
fn breaker_drill_on_sockets<T: SocketTransport>() {
    use keel::guard::breaker::BreakerState;
    use keel::strategy::{retry_advice, Retry};
    let mut rig = WorldBuilder::new()
        .ack_timeout(2_000 * MS)
        .tweak(|config, _| {
            config.breaker = common::drill_breaker();
        })
        .build::<T>();
    rig.until("SYNCED", |r| r.dispatcher().is_synced(VenueId(0)));
    let resting = rig.order(1, 10);
    rig.strategy.commands.push(Command::New(resting)).unwrap();
    rig.until("accept", |r| {
        r.kinds(resting.id).contains(&EventKind::Accepted)
    });
    rig.venue().apply_control(0, "reject-burst 1000").unwrap();
    let mut seq = 1;
    let mut retries = 0;
    let last = loop {
        seq += 1;
        let order = rig.order(seq, 1);
        rig.strategy.commands.push(Command::New(order)).unwrap();
        rig.until("an answer", |r| !r.kinds(order.id).is_empty());
        let kind = rig.kinds(order.id)[0];
        match retry_advice(&kind) {
            Retry::After(_) => retries += 1,
            Retry::Never => break kind,
            Retry::NotApplicable => panic!("the failing venue answered {kind:?}"),
        }
        assert!(retries < 50, "the strategy kept retrying");
    };
    assert!(matches!(last, EventKind::BreakerOpen { .. }), "{last:?}");
    // The resting order's ack and four system rejects are the five calls that open it.
    assert_eq!(retries, 4);
    let rejected = rig.venue().exchange().stats().rejected;
    rig.strategy
        .commands
        .push(Command::Cancel { id: resting.id })
        .unwrap();
    rig.until("the cancel", |r| {
        r.kinds(resting.id).contains(&EventKind::Canceled)
    });
    assert_eq!(
        rig.venue().exchange().stats().rejected,
        rejected,
        "no new order reached the venue while open"
    );
    rig.venue().apply_control(0, "reject-burst 0").unwrap();
    rig.until("half-open", |r| {
        let now = r.clock.now_ns();
        matches!(
            r.dispatcher().guards().venues[0].breaker.clone().state(now),
            BreakerState::HalfOpen { .. }
        )
    });
    let probes = [rig.order(seq + 1, 1), rig.order(seq + 2, 1)];
    for probe in probes {
        rig.strategy.commands.push(Command::New(probe)).unwrap();
    }
    rig.until("probes accepted, breaker closed", |r| {
        let now = r.clock.now_ns();
        matches!(
            r.dispatcher().guards().venues[0].breaker.clone().state(now),
            BreakerState::Closed
        )
    });
    for probe in probes {
        assert!(rig.kinds(probe.id).contains(&EventKind::Accepted));
    }
    let stats = rig.dispatcher().guards().venues[0].breaker.stats();
    assert_eq!((stats.opened, stats.half_opened, stats.closed), (1, 1, 1));
}

// Goal (issue 38, point 7): keel's own loop stands still for four times the link's silence
// window while the venue keeps heartbeating. On resume the link reads what arrived before it
// judges silence: no heartbeat timeout, no reconnect, and the stall is counted as keel's own
// (the executor logs it). Method: the world steps only the venue for the stall.
fn a_stall_of_keel_s_own_loop_is_not_blamed_on_the_venue<T: SocketTransport>() {
    let mut w = WorldBuilder::new()
        .tweak(|_, link| {
            link.heartbeat_interval_ns = 50 * MS;
            link.silent_intervals_max = 3;
        })
        .venue(|v| {
            v.heartbeat_interval_ns = 20 * MS;
            v.client_timeout_ns = 10_000 * MS;
        })
        .build::<T>();
    w.until("SYNCED", |w| w.dispatcher().is_synced(VenueId(0)));
    let connects = w.link().session_stats().connects;
    let until = w.clock.now_ns() + 600 * MS;
    while w.clock.now_ns() < until {
        let now = w.clock.now_ns();
        w.venue().step(now, 0).expect("the venue steps");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    w.until("the stall counted", |w| w.link().stats().loop_stalls >= 1);
    let deadline = w.clock.now_ns() + 300 * MS;
    while w.clock.now_ns() < deadline {
        w.step();
    }
    let stats = w.link().stats();
    assert_eq!(
        stats.heartbeat_timeouts, 0,
        "the venue was blamed: {stats:?}"
    );
    assert!(stats.last_loop_stall_ns >= 600 * MS, "{stats:?}");
    assert_eq!(w.link().session_stats().connects, connects, "reconnected");
    assert_eq!(w.link().session_stats().disconnects, 0);
    assert!(w.dispatcher().is_synced(VenueId(0)));
}
