//! Fairness between the parts that share a venue, in counts: per-strategy quotas (a runaway
//! strategy cannot take the other's share) and per-symbol bulkheads in the cancel lane (one
//! symbol's cancel storm cannot hold another symbol's cancel behind it). The dispatcher is
//! driven by hand with a manual clock; what is checked is who got sent and in which position.

mod common;

use common::{limiter, roomy_config, Rig, MS};
use keel::dispatch::quota::StrategyQuota;
use keel::order::{
    ClientOrderId, Command, EventKind, MassCancelScope, OutcomeKind, RefusalReason, RequestKind,
    StrategyId, SymbolId, VenueId,
};

/// Answers every request the venue got: new orders accepted, cancels done. Returns the
/// requests in the order they were released.
fn answer_all(rig: &mut Rig) -> Vec<RequestKind> {
    let sent: Vec<RequestKind> = rig.requests(0).into_iter().map(|r| r.kind).collect();
    for kind in &sent {
        let outcome = match *kind {
            RequestKind::New(o) => OutcomeKind::Accepted { id: o.id },
            RequestKind::Cancel { id } => OutcomeKind::Canceled { id },
            other => panic!("unexpected request {other:?}"),
        };
        rig.outcome(0, outcome);
    }
    sent
}

/// One second in 10 ms steps: strategy 0 offers 50 new orders a step (5,000/s, a runaway),
/// strategy 1 offers one (100/s), both on symbol 0; the venue accepts everything released.
/// Returns (orders sent per strategy, events per strategy).
fn runaway_second(rig: &mut Rig) -> ([u64; 2], [Vec<EventKind>; 2]) {
    let mut sent = [0u64; 2];
    let mut events: [Vec<EventKind>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..100 {
        for _ in 0..50 {
            rig.new_order(0, 0, 1);
        }
        rig.new_order(1, 0, 1);
        rig.poll();
        for kind in answer_all(rig) {
            if let RequestKind::New(o) = kind {
                sent[usize::from(o.id.strategy().0)] += 1;
            }
        }
        rig.poll();
        for (s, seen) in events.iter_mut().enumerate() {
            seen.extend(rig.events(s as u16).into_iter().map(|e| e.kind));
        }
        rig.advance(10 * MS);
    }
    (sent, events)
}

fn runaway_config() -> keel::dispatch::DispatcherConfig {
    let mut config = roomy_config();
    // The venue takes 250 new orders a second (burst 20).
    config.limiter = limiter(250, 20);
    config
}

// Goal: with a quota each, a runaway strategy keeps to its share and the other's orders all
// flow; without quotas the same runaway starves it (so the test can fail). Method: one
// simulated second of `runaway_second`, counts of orders sent and refusals per strategy.
#[test]
fn a_runaway_strategy_keeps_to_its_quota_and_the_other_flows() {
    let mut rig = Rig::new(runaway_config());
    let quota = StrategyQuota {
        new_per_sec: 100,
        new_burst: 10,
        in_flight_max: 0,
    };
    for s in 0..2 {
        rig.dispatcher
            .set_strategy_quota(StrategyId(s), quota, rig.now_ns)
            .unwrap();
    }
    let (sent, events) = runaway_second(&mut rig);
    assert_eq!(sent[1], 100, "the quiet strategy's every order left");
    assert!(
        events[1].iter().all(|k| matches!(k, EventKind::Accepted)),
        "the quiet strategy was never refused: {:?}",
        events[1].iter().find(|k| !matches!(k, EventKind::Accepted))
    );
    // Its burst plus one second at its rate (one step's slack).
    assert!(sent[0] <= 10 + 100 + 1, "the runaway sent {}", sent[0]);
    assert!(
        sent[0] >= 100,
        "the runaway still got its share: {}",
        sent[0]
    );
    let refused = events[0]
        .iter()
        .filter(|k| {
            **k == EventKind::Refused {
                reason: RefusalReason::StrategyRate,
            }
        })
        .count() as u64;
    let stats = rig.dispatcher.quotas().stats(StrategyId(0));
    assert_eq!(stats.rate_refused, refused);
    assert_eq!(
        refused + sent[0],
        5_000,
        "every runaway order answered once"
    );
    assert_eq!(rig.dispatcher.quotas().stats(StrategyId(1)).rate_refused, 0);
    assert_eq!(
        rig.dispatcher
            .stats()
            .refused_for(RefusalReason::StrategyRate),
        refused
    );

    // The same second without quotas: the runaway's orders fill the venue's budget and the
    // symbol's queue ahead of the quiet strategy's.
    let mut rig = Rig::new(runaway_config());
    let (sent, _) = runaway_second(&mut rig);
    assert!(
        sent[1] < 50,
        "without quotas the quiet strategy starves: {sent:?}"
    );
}

// Goal: the in-flight quota holds a strategy at `in_flight_max` unanswered orders until the
// venue answers, names the refusal, and leaves another strategy (its own quota: none) alone.
#[test]
fn the_in_flight_quota_binds_until_answers_arrive() {
    let mut config = roomy_config();
    config.quota = StrategyQuota {
        new_per_sec: 0,
        new_burst: 0,
        in_flight_max: 5,
    };
    let mut rig = Rig::new(config);
    rig.dispatcher
        .set_strategy_quota(StrategyId(1), StrategyQuota::default(), rig.now_ns)
        .unwrap();
    for _ in 0..10 {
        rig.new_order(0, 1, 1);
        rig.new_order(1, 1, 1);
    }
    rig.settle();
    let sent = rig.requests(0);
    let by = |s: u16| {
        sent.iter()
            .filter(|r| matches!(r.kind, RequestKind::New(o) if o.id.strategy() == StrategyId(s)))
            .count()
    };
    assert_eq!((by(0), by(1)), (5, 10));
    let refused = EventKind::Refused {
        reason: RefusalReason::StrategyInFlight,
    };
    let kinds: Vec<EventKind> = rig.kinds(0).into_iter().map(|(_, k)| k).collect();
    assert_eq!(kinds, vec![refused; 5]);
    assert_eq!(rig.dispatcher.quotas().in_flight(StrategyId(0)), 5);
    assert_eq!(
        rig.dispatcher
            .quotas()
            .stats(StrategyId(0))
            .in_flight_refused,
        5
    );
    // Answers free the slots: the next five go.
    for r in sent {
        if let RequestKind::New(o) = r.kind {
            rig.outcome(0, OutcomeKind::Accepted { id: o.id });
        }
    }
    rig.settle();
    assert_eq!(rig.dispatcher.quotas().in_flight(StrategyId(0)), 0);
    for _ in 0..5 {
        rig.new_order(0, 1, 1);
    }
    rig.settle();
    assert_eq!(rig.requests(0).len(), 5);
    assert_eq!(rig.dispatcher.quotas().in_flight(StrategyId(0)), 5);
}

/// Live orders: `storm` on symbol 0, then one on symbol 1 (strategy 0). Returns their ids.
fn live_orders(rig: &mut Rig, storm: usize) -> (Vec<ClientOrderId>, ClientOrderId) {
    let storm_ids: Vec<ClientOrderId> = (0..storm).map(|_| rig.new_order(0, 0, 1)).collect();
    let other = rig.new_order(0, 1, 1);
    rig.settle();
    answer_all(rig);
    rig.settle();
    rig.events(0);
    (storm_ids, other)
}

/// Where the cancel of `id` left among the cancels released (0: first).
fn position_of(sent: &[RequestKind], id: ClientOrderId) -> usize {
    sent.iter()
        .filter(|k| matches!(k, RequestKind::Cancel { .. }))
        .position(|k| *k == RequestKind::Cancel { id })
        .expect("its cancel left")
}

// Goal: under a one-symbol cancel storm, a cancel on another symbol waits behind at most one
// of the storm's cancels (round robin across symbols), whether the storm is single cancels
// or a mass cancel, and however late in the storm it arrives. Method: 500 live orders on
// symbol 0 and one on symbol 1; the storm's cancels, then the other cancel, are queued before
// a release pass (at most 256 releases a pass, so the storm outlasts it); count the dispatch
// positions. A FIFO cancel lane would put it at position 500.
#[test]
fn a_cancel_storm_on_one_symbol_does_not_hold_back_another_symbols_cancel() {
    let mut config = roomy_config();
    config.commands_per_poll_max = 1_024;
    config.sends_per_poll_max = 256;
    let mut rig = Rig::new(config);
    let (storm, other) = live_orders(&mut rig, 500);
    for &id in &storm {
        rig.send(0, Command::Cancel { id });
    }
    rig.send(0, Command::Cancel { id: other });
    rig.poll();
    let depth = rig.dispatcher.lane_depths(VenueId(0)).unwrap().cancel;
    assert_eq!(depth, 501 - 256, "the storm outlasts one pass");
    let mut sent = answer_all(&mut rig);
    rig.settle();
    sent.extend(answer_all(&mut rig));
    assert_eq!(sent.len(), 501);
    let at = position_of(&sent, other);
    assert!(at <= 1, "behind {at} of the storm's cancels");

    // A mass cancel of the storm's symbol, then, once its first cancels have left, a single
    // cancel on the other symbol: from its arrival, at most one storm cancel goes first.
    let mut rig = Rig::new(config);
    let (_, other) = live_orders(&mut rig, 500);
    let scope = MassCancelScope::Symbol(SymbolId(0));
    rig.send(0, Command::MassCancel { scope });
    rig.poll();
    assert_eq!(answer_all(&mut rig).len(), 256);
    assert_eq!(rig.dispatcher.lane_depths(VenueId(0)).unwrap().cancel, 244);
    rig.send(0, Command::Cancel { id: other });
    rig.settle();
    let sent = answer_all(&mut rig);
    assert_eq!(sent.len(), 245);
    let at = position_of(&sent, other);
    assert!(at <= 1, "behind {at} of the storm's cancels");
}
