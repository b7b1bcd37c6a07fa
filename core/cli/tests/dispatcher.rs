//! Behaviour of the dispatcher and its guard chain, driven through its real rings with time
//! passed by hand.

mod common;

use common::{limiter, roomy_config, Rig, MS, SEC};
use keel::dispatch::LaneDepths;
use keel::guard::breaker::{BreakerConfig, BreakerState};
use keel::order::{
    CancelRejectReason, ClientOrderId, Command, EventKind, LinkMode, MassCancelScope, OrderState,
    OutcomeKind, Price, RefusalReason, RejectReason, Replace, RequestKind, SymbolId, VenueId,
};

// Goal: priority is structural. Method: 10,000 new orders queue behind a slow rate limit,
// then a cancel for a live order arrives last; it must leave before the queued new orders.
#[test]
fn cancel_after_ten_thousand_new_orders_leaves_first() {
    let mut config = roomy_config();
    config.limiter = limiter(1_000, 10);
    let mut rig = Rig::new(config);
    let live = rig.live_order(0, 0, 10);
    rig.advance(SEC); // refill the burst used by the first order
    for i in 0..10_000 {
        rig.new_order(0, (i % 8) as u16, 1);
    }
    rig.send(0, Command::Cancel { id: live });
    let mut sent = Vec::new();
    for _ in 0..200 {
        rig.poll();
        sent.extend(rig.requests(0));
        rig.advance(MS);
    }
    let cancel_at = sent
        .iter()
        .position(|r| r.kind == RequestKind::Cancel { id: live })
        .expect("the cancel was sent");
    let news_before = sent[..cancel_at]
        .iter()
        .filter(|r| matches!(r.kind, RequestKind::New(_)))
        .count();
    // Only what the limiter released while the 10,001 commands were being read (40 polls of
    // 256 commands, 1 ms apart: a burst of 10 plus 1,000/s) precedes it; the rest still wait.
    assert!(
        news_before <= 10 + 41,
        "{news_before} new orders left before the cancel"
    );
    let queued_behind = 10_000 - news_before;
    assert!(
        queued_behind > 9_900,
        "only {queued_behind} new orders were still queued"
    );
    assert_eq!(rig.dispatcher.stats().shed, 0);
}

// Goal: the FIFO baseline (`LaneOrder::Arrival`, used by the demo and the benchmarks for
// comparison) is what it claims: the same setup as above, and the cancel now waits behind
// every new order queued before it. Switched back, priority returns at once.
#[test]
fn the_fifo_baseline_makes_the_cancel_wait_and_priority_returns() {
    let mut config = roomy_config();
    config.limiter = limiter(1_000, 10);
    let mut rig = Rig::new(config);
    let live = rig.live_order(0, 0, 10);
    rig.advance(SEC);
    rig.dispatcher
        .set_lane_order(keel::dispatch::LaneOrder::Arrival);
    for i in 0..50 {
        rig.new_order(0, (i % 8) as u16, 1);
    }
    // The cancel arrives after them (heads that arrive in the same pass tie, and a tie goes
    // to the cancel: the baseline is never made worse than FIFO).
    rig.poll();
    let mut sent = rig.requests(0);
    rig.advance(1);
    rig.send(0, Command::Cancel { id: live });
    for _ in 0..100 {
        rig.poll();
        sent.extend(rig.requests(0));
        rig.advance(MS);
    }
    let cancel_at = sent
        .iter()
        .position(|r| r.kind == RequestKind::Cancel { id: live })
        .expect("the cancel was sent");
    assert_eq!(cancel_at, 50, "FIFO: every earlier new order leaves first");
    // Priority again: a cancel overtakes what is queued.
    rig.dispatcher
        .set_lane_order(keel::dispatch::LaneOrder::Priority);
    let live = rig.live_order(0, 1, 10);
    for i in 0..50 {
        rig.new_order(0, (i % 8) as u16, 1);
    }
    rig.send(0, Command::Cancel { id: live });
    rig.poll();
    let first = rig.requests(0);
    assert!(
        first
            .iter()
            .any(|r| r.kind == RequestKind::Cancel { id: live }),
        "the cancel leaves in the first pass"
    );
}

// Goal: the adaptive controller's cap (issue 13) holds new orders to its rate while cancels
// keep the whole budget, and its shed refuses a symbol's new orders apart from an operator's
// (lifting one never lifts the other).
#[test]
fn the_controller_cap_spares_cancels_and_its_shed_is_its_own() {
    let mut config = roomy_config();
    config.limiter = limiter(1_000, 100);
    let mut rig = Rig::new(config);
    let live: Vec<_> = (0..20).map(|_| rig.live_order(0, 0, 10)).collect();
    rig.advance(SEC);
    rig.dispatcher
        .set_new_order_permille(rig.now_ns, VenueId(0), 100)
        .unwrap();
    assert_eq!(rig.dispatcher.new_order_permille(VenueId(0)), 100);
    for i in 0..50 {
        rig.new_order(0, (i % 8) as u16, 1);
    }
    for id in &live {
        rig.send(0, Command::Cancel { id: *id });
    }
    rig.poll();
    let sent = rig.requests(0);
    let news = sent
        .iter()
        .filter(|r| matches!(r.kind, RequestKind::New(_)))
        .count();
    let cancels = sent
        .iter()
        .filter(|r| matches!(r.kind, RequestKind::Cancel { .. }))
        .count();
    assert_eq!(cancels, 20, "cancels are not capped");
    assert_eq!(news, 10, "new orders: 10% of the burst of 100");
    assert_eq!(
        rig.dispatcher
            .set_new_order_permille(0, VenueId(7), 10)
            .err(),
        Some(keel::dispatch::OperatorError::NoVenue(7, 1))
    );
    // Controller and operator sheds are separate holds.
    rig.dispatcher
        .set_symbol_shed_by_control(rig.now_ns, SymbolId(3), true)
        .unwrap();
    rig.dispatcher
        .set_symbol_shed(rig.now_ns, SymbolId(3), true)
        .unwrap();
    rig.dispatcher
        .set_symbol_shed_by_control(rig.now_ns, SymbolId(3), false)
        .unwrap();
    let held = rig.new_order(0, 3, 1);
    rig.settle();
    let told = rig.kinds(0);
    assert!(
        told.contains(&(
            held,
            EventKind::Refused {
                reason: RefusalReason::SymbolShed
            }
        )),
        "the operator's shed still holds: {told:?}"
    );
    rig.dispatcher
        .set_symbol_shed(rig.now_ns, SymbolId(3), false)
        .unwrap();
    assert!(!rig.dispatcher.symbol_shed_by_control(SymbolId(3)));
}

// Goal: no new order leaves a link that is not SYNCED; it is refused with that reason.
#[test]
fn not_synced_refuses_new_orders() {
    let mut rig = Rig::new(roomy_config());
    rig.outcome(
        0,
        OutcomeKind::LinkState {
            mode: LinkMode::Down,
        },
    );
    rig.settle();
    let id = rig.new_order(0, 0, 1);
    rig.settle();
    assert!(rig.requests(0).is_empty());
    assert_eq!(
        rig.kinds(0),
        vec![(
            id,
            EventKind::Refused {
                reason: RefusalReason::NotSynced
            }
        )]
    );
    assert_eq!(
        rig.dispatcher.stats().refused_for(RefusalReason::NotSynced),
        1
    );
}

// Goal: a timeout makes an order Unknown, never resends it, gates the symbol, and the venue's
// later answer resolves it.
#[test]
fn timeout_is_unknown_and_never_resent() {
    let mut rig = Rig::new(roomy_config());
    let id = rig.new_order(0, 3, 100);
    rig.settle();
    assert_eq!(rig.requests(0).len(), 1);
    rig.advance(2 * SEC);
    rig.outcome(0, OutcomeKind::Timeout { id });
    rig.settle();
    assert_eq!(rig.kinds(0), vec![(id, EventKind::Unknown)]);
    assert_eq!(rig.state(id), OrderState::Unknown);
    // The dispatcher asks the venue about it (through the rate limiter), never resends it.
    assert_eq!(
        rig.requests(0).iter().map(|r| r.kind).collect::<Vec<_>>(),
        vec![RequestKind::Query { id }]
    );
    assert_eq!(rig.dispatcher.stats().sent_query, 1);
    // The gate: no new order on that symbol while one is Unknown; other symbols still trade.
    let gated = rig.new_order(0, 3, 1);
    let other = rig.new_order(0, 4, 1);
    rig.settle();
    let sent = rig.requests(0);
    assert_eq!(
        sent.len(),
        1,
        "only the other symbol's order leaves: {sent:?}"
    );
    assert!(matches!(sent[0].kind, RequestKind::New(o) if o.id == other));
    assert_eq!(
        rig.kinds(0),
        vec![(
            gated,
            EventKind::Refused {
                reason: RefusalReason::UnknownOrderOnSymbol
            }
        )]
    );
    // The late report: 50 filled, then the rest. Exactly the intended 100, nothing resent.
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id,
            qty: 50,
            price: Price::from_units(10, 0),
        },
    );
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id,
            qty: 50,
            price: Price::from_units(10, 0),
        },
    );
    rig.settle();
    assert_eq!(rig.state(id), OrderState::Filled);
    assert_eq!(rig.dispatcher.guards().risk.position(SymbolId(3)), 100);
    assert_eq!(rig.dispatcher.guards().risk.unknown_orders(SymbolId(3)), 0);
    assert_eq!(rig.dispatcher.stats().sent_new, 2);
    let again = rig.new_order(0, 3, 1);
    rig.settle();
    let sent = rig.requests(0);
    assert!(
        matches!(sent[..], [r] if matches!(r.kind, RequestKind::New(o) if o.id == again)),
        "gate lifted: {sent:?}"
    );
}

// Goal: a double fill is caught: counted, the order flagged, position not doubled, and the
// strategy sees exactly one Filled.
#[test]
fn double_fill_is_caught() {
    let mut rig = Rig::new(roomy_config());
    let id = rig.live_order(0, 1, 100);
    let px = Price::from_units(10, 0);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id,
            qty: 100,
            price: px,
        },
    );
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id,
            qty: 100,
            price: px,
        },
    );
    rig.settle();
    assert_eq!(
        rig.kinds(0),
        vec![(
            id,
            EventKind::Filled {
                qty: 100,
                price: px
            }
        )]
    );
    assert_eq!(rig.dispatcher.guards().risk.position(SymbolId(1)), 100);
    assert_eq!(rig.dispatcher.stats().report_errors, 1);
    assert!(rig.dispatcher.table().get(id).unwrap().needs_reconcile);
}

fn breaker_config() -> BreakerConfig {
    BreakerConfig {
        window_ns: 10 * SEC,
        window_buckets: 10,
        calls_min: 4,
        open_duration_ns: 5 * SEC,
        half_open_probes: 2,
        ..BreakerConfig::default()
    }
}

// Goal: the breaker drill. Venue system rejects trip it within the window; new orders are
// then refused at once with BreakerOpen while cancels pass; half-open probes close it.
#[test]
fn breaker_trips_refuses_new_passes_cancels_and_recovers() {
    let mut config = roomy_config();
    config.breaker = breaker_config();
    let mut rig = Rig::new(config);
    let resting = rig.live_order(0, 0, 10);
    for _ in 0..4 {
        let id = rig.new_order(0, 1, 1);
        rig.settle();
        rig.requests(0);
        rig.outcome(
            0,
            OutcomeKind::Rejected {
                id,
                reason: RejectReason::VenueSystem,
            },
        );
        rig.settle();
    }
    rig.events(0);
    assert!(matches!(
        rig.dispatcher.guards().venues[0]
            .breaker
            .clone()
            .state(rig.now_ns),
        BreakerState::Open { .. }
    ));
    let refused = rig.new_order(0, 2, 1);
    rig.send(0, Command::Cancel { id: resting });
    rig.settle();
    let sent = rig.requests(0);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].kind, RequestKind::Cancel { id: resting });
    let events = rig.kinds(0);
    assert_eq!(events.len(), 1);
    assert!(
        matches!(events[0], (id, EventKind::BreakerOpen { retry_after_ns }) if id == refused && retry_after_ns == 5 * SEC)
    );
    // After the open duration: probes go out; their success closes the breaker.
    rig.advance(5 * SEC);
    let probes = [rig.new_order(0, 2, 1), rig.new_order(0, 2, 1)];
    rig.settle();
    assert_eq!(rig.requests(0).len(), 2);
    for id in probes {
        rig.outcome(0, OutcomeKind::Accepted { id });
    }
    rig.settle();
    assert_eq!(
        rig.dispatcher.guards().venues[0]
            .breaker
            .clone()
            .state(rig.now_ns),
        BreakerState::Closed
    );
}

// Goal: user cancels never count against the breaker, even when every one of them is refused
// as too late (the orders had filled).
#[test]
fn user_cancels_never_trip_the_breaker() {
    let mut config = roomy_config();
    config.breaker = breaker_config();
    let mut rig = Rig::new(config);
    for _ in 0..20 {
        let id = rig.live_order(0, 0, 1);
        rig.send(0, Command::Cancel { id });
        rig.settle();
        rig.requests(0);
        rig.outcome(
            0,
            OutcomeKind::CancelRejected {
                id,
                reason: CancelRejectReason::TooLateToCancel,
            },
        );
        rig.outcome(
            0,
            OutcomeKind::Fill {
                id,
                qty: 1,
                price: Price::from_units(10, 0),
            },
        );
        rig.settle();
        rig.events(0);
    }
    let other = rig.live_order(0, 1, 1);
    rig.send(0, Command::Cancel { id: other });
    rig.settle();
    rig.outcome(0, OutcomeKind::Canceled { id: other });
    rig.settle();
    assert_eq!(
        rig.dispatcher.guards().venues[0]
            .breaker
            .clone()
            .state(rig.now_ns),
        BreakerState::Closed
    );
    assert_eq!(rig.dispatcher.guards().venues[0].breaker.stats().opened, 0);
}

// Goal: shedding under overload with hysteresis, and cancels are never shed.
#[test]
fn sheds_new_orders_above_watermark_but_never_cancels() {
    let mut config = roomy_config();
    config.lane_new_capacity = 100;
    config.lane_new_per_symbol_max = 100;
    config.shed_high_pct = 80;
    config.shed_low_pct = 50;
    config.limiter = limiter(1, 1);
    let mut rig = Rig::new(config);
    let live = rig.live_order(0, 0, 1);
    for _ in 0..90 {
        rig.new_order(0, 1, 1);
    }
    rig.send(0, Command::Cancel { id: live });
    rig.settle();
    let events = rig.kinds(0);
    let shed = events.iter().filter(|(_, k)| *k == EventKind::Shed).count();
    assert_eq!(shed, 10, "orders 81..=90 are shed once the lane holds 80");
    assert_eq!(rig.dispatcher.stats().shed, 10);
    assert_eq!(
        rig.dispatcher.lane_depths(VenueId(0)),
        Some(LaneDepths {
            cancel: 1,
            new: 80,
            ..LaneDepths::default()
        }),
        "the cancel is queued, not shed"
    );
}

// Goal: a full cancel lane refuses the cancel back with its own reason and a critical counter.
#[test]
fn full_cancel_lane_refuses_loudly() {
    let mut config = roomy_config();
    config.lane_cancel_capacity = 2;
    config.limiter = limiter(1, 1);
    let mut rig = Rig::new(config);
    let ids: Vec<ClientOrderId> = (0..3)
        .map(|_| {
            let id = rig.new_order(0, 0, 1);
            rig.settle();
            rig.advance(SEC);
            id
        })
        .collect();
    rig.settle();
    for &id in &ids {
        rig.outcome(0, OutcomeKind::Accepted { id });
    }
    rig.settle();
    rig.events(0);
    for &id in &ids {
        rig.send(0, Command::Cancel { id });
    }
    rig.settle();
    let events = rig.kinds(0);
    assert!(events.len() <= 1);
    if let [(id, kind)] = events[..] {
        assert_eq!(
            kind,
            EventKind::Refused {
                reason: RefusalReason::CancelLaneFull
            }
        );
        assert_eq!(id, ids[2]);
        assert_eq!(rig.dispatcher.stats().cancel_lane_full, 1);
    } else {
        panic!("expected exactly one refusal, got {events:?}");
    }
}

// Goal: an order short of budget waits in its lane until its acquire deadline, then the
// strategy gets Throttled and the order is closed locally (never sent).
#[test]
fn throttled_after_acquire_deadline() {
    let mut config = roomy_config();
    config.limiter = limiter(1, 1);
    config.acquire_timeout_ns = 100 * MS;
    let mut rig = Rig::new(config);
    let first = rig.new_order(0, 0, 1);
    let second = rig.new_order(0, 0, 1);
    rig.settle();
    assert_eq!(rig.requests(0).len(), 1);
    rig.advance(101 * MS);
    rig.settle();
    assert!(rig.requests(0).is_empty());
    assert_eq!(rig.kinds(0), vec![(second, EventKind::Throttled)]);
    assert_eq!(rig.state(second), OrderState::Rejected);
    assert_eq!(rig.state(first), OrderState::PendingNew);
    assert_eq!(rig.dispatcher.stats().throttled, 1);
}

// Goal: requests released to a venue never exceed the limiter's bound in any window.
#[test]
fn venue_never_sees_more_than_the_rate_limit() {
    let mut config = roomy_config();
    config.limiter = limiter(50, 10);
    let mut rig = Rig::new(config);
    let mut stamps = Vec::new();
    for step in 0..3_000 {
        if step % 2 == 0 {
            rig.new_order(0, (step % 8) as u16, 1);
        }
        rig.poll();
        stamps.extend(rig.requests(0).iter().map(|r| r.sent_ns));
        rig.advance(MS);
    }
    assert!(stamps.len() > 100);
    for (i, &start) in stamps.iter().enumerate() {
        let in_window = stamps[i..].iter().take_while(|&&t| t < start + SEC).count();
        assert!(
            in_window <= 60,
            "{in_window} requests in one second from {start}"
        );
    }
}

// Goal: bulkheads cap in-flight orders per symbol; an answer frees the slot.
#[test]
fn bulkhead_caps_in_flight_per_symbol() {
    let mut config = roomy_config();
    config.bulkhead.in_flight_per_symbol_max = 2;
    let mut rig = Rig::new(config);
    let a = rig.new_order(0, 0, 1);
    let _b = rig.new_order(0, 0, 1);
    let c = rig.new_order(0, 0, 1);
    rig.settle();
    assert_eq!(rig.requests(0).len(), 2);
    assert_eq!(
        rig.kinds(0),
        vec![(
            c,
            EventKind::Refused {
                reason: RefusalReason::BulkheadSymbol
            }
        )]
    );
    rig.outcome(0, OutcomeKind::Accepted { id: a });
    rig.settle();
    rig.new_order(0, 0, 1);
    rig.settle();
    assert_eq!(rig.requests(0).len(), 1);
}

// Goal: risk limits refuse with the precise reason and reserve nothing.
#[test]
fn risk_refusals() {
    let mut config = roomy_config();
    config.risk.order_qty_max = 10;
    config.risk.position_max = 15;
    let mut rig = Rig::new(config);
    let too_big = rig.new_order(0, 0, 11);
    let ok = rig.new_order(0, 0, 10);
    let over_position = rig.new_order(0, 0, 6);
    rig.settle();
    assert_eq!(
        rig.kinds(0),
        vec![
            (
                too_big,
                EventKind::Refused {
                    reason: RefusalReason::RiskQty
                }
            ),
            (
                over_position,
                EventKind::Refused {
                    reason: RefusalReason::RiskPosition
                }
            ),
        ]
    );
    assert!(
        matches!(rig.requests(0)[..], [r] if matches!(r.kind, RequestKind::New(o) if o.id == ok))
    );
}

// Goal: mass cancel closes queued orders locally and sends cancels for live ones, only for
// the issuing strategy and scope.
#[test]
fn mass_cancel_by_symbol() {
    let mut config = roomy_config();
    config.limiter = limiter(1_000, 3);
    let mut rig = Rig::new(config);
    let live = rig.live_order(0, 5, 1);
    let other_symbol = rig.live_order(0, 6, 1);
    let other_strategy = rig.live_order(1, 5, 1);
    rig.advance(SEC);
    let queued: Vec<_> = (0..10).map(|_| rig.new_order(0, 5, 1)).collect();
    rig.settle();
    let sent_news = rig.requests(0).len();
    assert_eq!(sent_news, 3, "burst of 3 goes out, 7 wait");
    rig.send(
        0,
        Command::MassCancel {
            scope: MassCancelScope::Symbol(SymbolId(5)),
        },
    );
    let mut sent = Vec::new();
    for _ in 0..4 {
        rig.settle();
        sent.extend(rig.requests(0));
        rig.advance(SEC);
    }
    let cancels: Vec<_> = sent
        .into_iter()
        .filter_map(|r| match r.kind {
            RequestKind::Cancel { id } => Some(id),
            _ => None,
        })
        .collect();
    // The live order and the three sent ones get wire cancels; the seven queued close here.
    assert!(cancels.contains(&live));
    assert_eq!(cancels.len(), 4, "{cancels:?}");
    assert!(!cancels.contains(&other_symbol) && !cancels.contains(&other_strategy));
    let canceled_locally = rig
        .kinds(0)
        .iter()
        .filter(|(_, k)| *k == EventKind::Canceled)
        .count();
    assert_eq!(canceled_locally, 7);
    for id in &queued[3..] {
        assert_eq!(rig.state(*id), OrderState::Canceled);
    }
}

// Goal: a replace swaps ids and keeps risk honest; a rejected replace restores the original.
#[test]
fn replace_accepted_and_rejected() {
    let mut rig = Rig::new(roomy_config());
    let id = rig.live_order(0, 0, 10);
    let new_id = rig.id(0);
    let r = Replace {
        id,
        new_id,
        price: Price::from_units(11, 0),
        qty: 5,
    };
    rig.send(0, Command::Replace(r));
    rig.settle();
    assert_eq!(rig.requests(0)[0].kind, RequestKind::Replace(r));
    rig.outcome(0, OutcomeKind::Replaced { id, new_id });
    rig.settle();
    assert_eq!(rig.kinds(0), vec![(id, EventKind::Replaced { new_id })]);
    let risk = &rig.dispatcher.guards().risk;
    assert_eq!(risk.open_qty(SymbolId(0), keel::order::Side::Buy), 5);
    // Now a replace the venue refuses: the replacement closes, the order stands again.
    let third = rig.id(0);
    let r2 = Replace {
        id: new_id,
        new_id: third,
        price: Price::from_units(12, 0),
        qty: 7,
    };
    rig.send(0, Command::Replace(r2));
    rig.settle();
    rig.requests(0);
    rig.outcome(
        0,
        OutcomeKind::Rejected {
            id: third,
            reason: RejectReason::Invalid,
        },
    );
    rig.settle();
    assert_eq!(rig.state(new_id), OrderState::Live);
    assert_eq!(rig.state(third), OrderState::Rejected);
    assert_eq!(
        rig.dispatcher
            .guards()
            .risk
            .open_qty(SymbolId(0), keel::order::Side::Buy),
        5
    );
}

// Goal: a strategy cannot act on another strategy's orders or reuse an id.
#[test]
fn ownership_and_duplicates() {
    let mut rig = Rig::new(roomy_config());
    let id = rig.live_order(0, 0, 1);
    rig.send(1, Command::Cancel { id });
    let mut dup = rig.order(0, 0, 1);
    dup.id = id;
    rig.send(0, Command::New(dup));
    rig.settle();
    assert_eq!(
        rig.kinds(1),
        vec![(
            id,
            EventKind::Refused {
                reason: RefusalReason::UnknownOrder
            }
        )]
    );
    assert_eq!(
        rig.kinds(0),
        vec![(
            id,
            EventKind::Refused {
                reason: RefusalReason::DuplicateId
            }
        )]
    );
    assert!(rig.requests(0).is_empty());
}

// Goal: a venue throttle reject cuts the refill rate (fewer releases in the next second) and
// does not count against the breaker.
#[test]
fn venue_throttle_cuts_the_rate_not_the_breaker() {
    let mut config = roomy_config();
    config.limiter = limiter(100, 1);
    config.limiter.throttle_rate_permille = 100;
    config.limiter.throttle_cooldown_ns = 10 * SEC;
    config.breaker = breaker_config();
    let mut rig = Rig::new(config);
    let released_in_one_second = |rig: &mut Rig| {
        let mut sent = 0;
        for _ in 0..1_000 {
            rig.new_order(0, 0, 1);
            rig.poll();
            for r in rig.requests(0) {
                if let RequestKind::New(o) = r.kind {
                    rig.outcome(0, OutcomeKind::Accepted { id: o.id });
                    sent += 1;
                }
            }
            rig.advance(MS);
        }
        rig.settle();
        rig.events(0);
        sent
    };
    let calm = released_in_one_second(&mut rig);
    for _ in 0..5 {
        rig.new_order(0, 1, 1);
        rig.advance(SEC);
        rig.settle();
        // The venue throttles an order it was sent (a report about one still queued in keel
        // would be a contradiction).
        let id = rig
            .requests(0)
            .iter()
            .find_map(|r| match r.kind {
                RequestKind::New(o) => Some(o.id),
                _ => None,
            })
            .expect("a second's budget releases a new order");
        rig.outcome(
            0,
            OutcomeKind::Rejected {
                id,
                reason: RejectReason::VenueThrottle,
            },
        );
        rig.settle();
    }
    rig.events(0);
    let throttled = released_in_one_second(&mut rig);
    assert!((95..=101).contains(&calm), "calm: {calm}");
    assert!(throttled <= 12, "after throttle rejects: {throttled}");
    assert_eq!(
        rig.dispatcher.guards().venues[0].limiter.throttle_events(),
        5
    );
    assert_eq!(rig.dispatcher.guards().venues[0].breaker.stats().opened, 0);
}

// Goal: a mass cancel withdraws a replace that has not left yet and cancels the original,
// so nothing of the strategy stays live.
#[test]
fn mass_cancel_withdraws_queued_replace() {
    let mut config = roomy_config();
    config.limiter = limiter(1, 1);
    let mut rig = Rig::new(config);
    let id = rig.live_order(0, 2, 10);
    let new_id = rig.id(0);
    rig.send(
        0,
        Command::Replace(Replace {
            id,
            new_id,
            price: Price::from_units(9, 0),
            qty: 10,
        }),
    );
    rig.settle();
    assert!(
        rig.requests(0).is_empty(),
        "no budget: the replace waits in its lane"
    );
    rig.send(
        0,
        Command::MassCancel {
            scope: MassCancelScope::Strategy,
        },
    );
    rig.settle();
    assert_eq!(rig.state(new_id), OrderState::Rejected);
    assert_eq!(rig.state(id), OrderState::PendingCancel);
    assert_eq!(rig.kinds(0), vec![(new_id, EventKind::Canceled)]);
    rig.advance(SEC);
    rig.settle();
    let sent: Vec<_> = rig.requests(0).into_iter().map(|r| r.kind).collect();
    assert_eq!(
        sent,
        vec![RequestKind::Cancel { id }],
        "the replace never leaves"
    );
    assert_eq!(
        rig.dispatcher.lane_depths(VenueId(0)),
        Some(LaneDepths::default())
    );
    assert_eq!(
        rig.dispatcher.lane_depths(VenueId(7)),
        None,
        "no such venue"
    );
    assert_eq!(rig.dispatcher.link_mode(VenueId(7)), LinkMode::Down);
    assert!(!rig.dispatcher.set_manual_shed(VenueId(7), true));
}

// Goal: every configuration error names its key, its value and what is allowed.
#[test]
fn bad_configuration_is_refused_with_key_and_value() {
    use keel::dispatch::{ConfigError, Dispatcher};
    let bad = keel::dispatch::DispatcherConfig {
        shed_low_pct: 100,
        ..roomy_config()
    };
    let err = Dispatcher::new(bad, Vec::new(), Vec::new(), 0).unwrap_err();
    assert_eq!(
        err,
        ConfigError::OutOfRange {
            key: "shed_low_pct",
            value: 100,
            allowed: "0..shed_high_pct"
        }
    );
    assert_eq!(
        err.to_string(),
        "shed_low_pct = 100: allowed 0..shed_high_pct"
    );
    let mut bad = roomy_config();
    bad.breaker.half_open_probes = 0;
    assert!(matches!(
        Dispatcher::new(bad, Vec::new(), Vec::new(), 0),
        Err(ConfigError::Breaker(_))
    ));
    let ok_but_no_ports = roomy_config();
    assert!(matches!(
        Dispatcher::new(ok_but_no_ports, Vec::new(), Vec::new(), 0),
        Err(ConfigError::OutOfRange {
            key: "strategies",
            value: 0,
            ..
        })
    ));
}

// Goal: a stalled executor loop (its heartbeat stops) gets no new orders; when it beats
// again, routing resumes.
#[test]
fn watchdog_stops_routing_to_a_stalled_executor() {
    use keel::runtime::watchdog::LoopHeartbeat;
    let mut rig = Rig::new(roomy_config());
    let (heartbeat, dog) = LoopHeartbeat::new(10 * MS);
    rig.dispatcher.attach_watchdog(VenueId(0), dog);
    heartbeat.beat();
    rig.settle();
    rig.advance(11 * MS);
    rig.settle();
    let refused = rig.new_order(0, 0, 1);
    rig.settle();
    assert_eq!(
        rig.kinds(0),
        vec![(
            refused,
            EventKind::Refused {
                reason: RefusalReason::ExecutorStalled
            }
        )]
    );
    assert!(rig.requests(0).is_empty());
    assert_eq!(rig.dispatcher.stats().executor_stalls, 1);
    heartbeat.beat();
    rig.advance(MS);
    let routed = rig.new_order(0, 0, 1);
    rig.settle();
    assert!(
        matches!(rig.requests(0)[..], [r] if matches!(r.kind, RequestKind::New(o) if o.id == routed))
    );
}

// Goal: requests the link hands back unsent (the session dropped before writing them) are
// never sent late: a new order is refused NotSynced with its risk released; a cancel waits
// in the cancel lane while the link is down and leaves, charged again, once it is SYNCED.
#[test]
fn requests_returned_unsent_are_refused_or_requeued_never_sent_late() {
    use keel::order::UnsentRequest;
    let mut rig = Rig::new(roomy_config());
    let live = rig.live_order(0, 1, 10);
    let fresh = rig.new_order(0, 2, 5);
    rig.send(0, Command::Cancel { id: live });
    rig.settle();
    let sent: Vec<_> = rig.requests(0).iter().map(|r| r.kind).collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    rig.outcome(
        0,
        OutcomeKind::LinkState {
            mode: LinkMode::Down,
        },
    );
    for kind in &sent {
        let (id, request) = UnsentRequest::of(kind);
        rig.outcome(0, OutcomeKind::NotSent { id, request });
    }
    rig.settle();
    assert!(
        rig.requests(0).is_empty(),
        "nothing leaves while not SYNCED"
    );
    assert_eq!(
        rig.kinds(0),
        vec![(
            fresh,
            EventKind::Refused {
                reason: RefusalReason::NotSynced
            }
        )]
    );
    assert_eq!(rig.state(fresh), OrderState::Rejected);
    assert_eq!(rig.state(live), OrderState::PendingCancel);
    assert_eq!(rig.dispatcher.stats().not_sent, 2);
    // Back to SYNCED: the cancel leaves; the refused order never does.
    rig.outcome(
        0,
        OutcomeKind::LinkState {
            mode: LinkMode::Trading,
        },
    );
    rig.settle();
    assert_eq!(
        rig.requests(0).iter().map(|r| r.kind).collect::<Vec<_>>(),
        vec![RequestKind::Cancel { id: live }]
    );
    assert_eq!(rig.dispatcher.stats().sent_cancel, 2);
}

// Goal: with a journal attached, what the journal says after the fact is what the order table
// says: every released order's intent, acceptances, fills and closes; a restart would find
// the open orders, the one still unanswered in flight, and the id high-water mark.
#[test]
fn the_journal_follows_the_order_table() {
    use keel::journal::{Journal, JournalConfig, Recovery, RECORD_LEN};
    let dir = tempfile::tempdir().unwrap();
    let jconfig = JournalConfig {
        dir: dir.path().to_path_buf(),
        file_bytes: 1_000 * RECORD_LEN as u64,
    };
    let mut rig = Rig::new(roomy_config());
    let (journal, _) = Journal::open(jconfig.clone(), |_| {}).unwrap();
    rig.dispatcher.attach_journal(journal);
    let resting = rig.live_order(0, 1, 10);
    let partly = rig.live_order(0, 2, 10);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id: partly,
            qty: 4,
            price: Price::from_units(10, 0),
        },
    );
    rig.settle();
    let _ = rig.events(0);
    let filled = rig.live_order(0, 3, 5);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id: filled,
            qty: 5,
            price: Price::from_units(10, 0),
        },
    );
    rig.settle();
    let _ = rig.events(0);
    let canceled = rig.live_order(0, 4, 5);
    rig.send(0, Command::Cancel { id: canceled });
    rig.settle();
    rig.outcome(0, OutcomeKind::Canceled { id: canceled });
    rig.settle();
    let _ = rig.events(0);
    let _ = rig.requests(0);
    let rejected = rig.new_order(0, 5, 5);
    rig.settle();
    rig.outcome(
        0,
        OutcomeKind::Rejected {
            id: rejected,
            reason: RejectReason::Invalid,
        },
    );
    let in_flight = rig.new_order(0, 6, 5);
    rig.settle();
    let _ = rig.requests(0);
    let _ = rig.events(0);
    assert_eq!(rig.dispatcher.stats().journal_errors, 0);
    drop(rig); // the engine dies here

    let mut recovery = Recovery::default();
    let (_, report) = Journal::open(jconfig, |r| recovery.apply(r)).unwrap();
    assert_eq!(report.torn_tail_bytes, 0);
    assert_eq!(recovery.orphans, 0);
    let open: Vec<_> = recovery.open.keys().copied().collect();
    let mut expected = vec![resting, partly, in_flight];
    expected.sort();
    assert_eq!(open, expected);
    assert_eq!(recovery.open[&partly].filled, 4);
    assert!(recovery.open[&resting].accepted);
    let flying: Vec<_> = recovery.in_flight().map(|o| o.order.id).collect();
    assert_eq!(flying, vec![in_flight]);
    let strategy = in_flight.strategy();
    assert_eq!(
        recovery.next_sequence[&strategy],
        in_flight.sequence() + 1,
        "ids above every recorded one"
    );

    // The restarted engine: the table, positions and gates come back; the unanswered order is
    // Unknown and is asked about, never resent.
    let mut rig = Rig::new(roomy_config());
    let restored = rig.dispatcher.restore(&recovery).unwrap();
    assert_eq!((restored.live, restored.unknown), (2, 1));
    assert_eq!(rig.state(resting), OrderState::Live);
    assert_eq!(rig.state(partly), OrderState::PartiallyFilled);
    assert_eq!(rig.state(in_flight), OrderState::Unknown);
    assert_eq!(rig.dispatcher.guards().risk.position(SymbolId(2)), 4);
    assert_eq!(rig.dispatcher.guards().risk.unknown_orders(SymbolId(6)), 1);
    rig.settle();
    assert_eq!(
        rig.requests(0).iter().map(|r| r.kind).collect::<Vec<_>>(),
        vec![RequestKind::Query { id: in_flight }]
    );
    assert_eq!(rig.dispatcher.stats().sent_new, 0, "nothing resent");
    // Twice is refused, by name.
    assert_eq!(
        rig.dispatcher.restore(&recovery).unwrap_err(),
        keel::dispatch::RestoreError::Duplicate(resting)
    );
}

// Goal: a read-only link takes cancels, never new orders or replaces. Method: the link
// reports ReadOnly; a new order and a replace are refused `LinkReadOnly` at once, a cancel of
// a live order is released; only `Trading` lets new orders leave again.
#[test]
fn read_only_link_refuses_new_orders_and_passes_cancels() {
    let mut rig = Rig::new(roomy_config());
    let live = rig.live_order(0, 0, 10);
    rig.events(0);
    let read_only = OutcomeKind::LinkState {
        mode: LinkMode::ReadOnly,
    };
    rig.outcome(0, read_only);
    rig.settle();
    assert_eq!(rig.dispatcher.link_mode(VenueId(0)), LinkMode::ReadOnly);
    let refused = rig.new_order(0, 1, 1);
    let new_id = rig.id(0);
    let replace = Replace {
        id: live,
        new_id,
        price: Price::from_units(11, 0),
        qty: 10,
    };
    rig.send(0, Command::Replace(replace));
    rig.settle(); // the replace is refused and the original stands again
    rig.send(0, Command::Cancel { id: live });
    rig.settle();
    let reason = RefusalReason::LinkReadOnly;
    let kinds = rig.kinds(0);
    assert!(
        kinds.contains(&(refused, EventKind::Refused { reason })),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(new_id, EventKind::Refused { reason })),
        "{kinds:?}"
    );
    let sent = rig.requests(0);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].kind, RequestKind::Cancel { id: live });
    rig.outcome(
        0,
        OutcomeKind::LinkState {
            mode: LinkMode::Trading,
        },
    );
    rig.settle();
    rig.new_order(0, 1, 1);
    rig.settle();
    assert!(matches!(rig.requests(0)[..], [r] if matches!(r.kind, RequestKind::New(_))));
}

// Goal (issue 38, point 2): an execution the venue stated after the order closed is booked
// into risk's position (not into the order, which the table keeps closed): a buy of 8 filled,
// then 2 more after its close, leave a long of 10, and with position_max 10 a further buy of
// 1 is refused `RiskPosition` once the link trades again.
#[test]
fn an_execution_after_the_close_is_booked_for_risk() {
    use keel::order::{Contradiction, Execution};
    let mut config = roomy_config();
    config.risk.position_max = 10;
    let mut rig = Rig::new(config);
    let live = rig.live_order(0, 2, 8);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id: live,
            qty: 8,
            price: Price::from_units(10, 0),
        },
    );
    rig.settle();
    assert_eq!(rig.dispatcher.guards().risk.position(SymbolId(2)), 8);
    rig.outcome(
        0,
        OutcomeKind::Contradiction {
            id: Some(live),
            what: Contradiction::AfterClose,
        },
    );
    let execution = Execution {
        symbol: SymbolId(2),
        side: keel::order::Side::Buy,
        qty: 2,
        price: Price::from_units(10, 0),
    };
    rig.outcome(0, OutcomeKind::UnmatchedExecution { execution });
    rig.settle();
    assert_eq!(rig.dispatcher.guards().risk.position(SymbolId(2)), 10);
    assert_eq!(rig.dispatcher.stats().unmatched_executions, 1);
    assert_eq!(rig.state(live), OrderState::Filled);
    assert_eq!(rig.dispatcher.link_mode(VenueId(0)), LinkMode::ReadOnly);
    // An operator settled it: trading again, and the position holds.
    rig.outcome(
        0,
        OutcomeKind::LinkState {
            mode: LinkMode::Trading,
        },
    );
    rig.events(0);
    let more = rig.new_order(0, 2, 1);
    rig.settle();
    let reason = RefusalReason::RiskPosition;
    let kinds = rig.kinds(0);
    assert!(
        kinds.contains(&(more, EventKind::Refused { reason })),
        "{kinds:?}"
    );
}

// Goal: a session contradiction makes the order Unknown (its strategy is told), the link
// read-only, and the counters name it; a report the table itself refuses asks the link to
// reconcile, and a `Trading` report crossing that request does not restore trust.
#[test]
fn contradictions_make_the_link_read_only_and_ask_for_reconciliation() {
    use keel::order::Contradiction;
    let mut rig = Rig::new(roomy_config());
    let live = rig.live_order(0, 0, 10);
    rig.events(0);
    let what = Contradiction::Overfill;
    rig.outcome(
        0,
        OutcomeKind::Contradiction {
            id: Some(live),
            what,
        },
    );
    rig.settle();
    assert_eq!(rig.state(live), OrderState::Unknown);
    assert_eq!(rig.kinds(0), vec![(live, EventKind::Unknown)]);
    assert_eq!(rig.dispatcher.link_mode(VenueId(0)), LinkMode::ReadOnly);
    assert_eq!(rig.dispatcher.stats().last_contradiction, Some(what));
    // Trusted again after a clean reconciliation; then a report the table refuses.
    rig.outcome(
        0,
        OutcomeKind::LinkState {
            mode: LinkMode::Trading,
        },
    );
    let other = rig.live_order(0, 1, 10);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id: other,
            qty: 10,
            price: Price::from_units(10, 0),
        },
    );
    rig.outcome(0, OutcomeKind::Accepted { id: other }); // after it filled: cannot be true
    rig.settle();
    assert_eq!(rig.dispatcher.link_mode(VenueId(0)), LinkMode::ReadOnly);
    assert_eq!(
        rig.dispatcher.stats().last_contradiction,
        Some(Contradiction::TableRefused)
    );
    let sent = rig.requests(0);
    assert!(
        sent.iter()
            .any(|r| r.kind == RequestKind::Reconcile { id: other }),
        "{sent:?}"
    );
    let trading = OutcomeKind::LinkState {
        mode: LinkMode::Trading,
    };
    rig.outcome(0, trading); // crossed the request: predates it
    rig.settle();
    assert_eq!(rig.dispatcher.link_mode(VenueId(0)), LinkMode::ReadOnly);
    rig.outcome(
        0,
        OutcomeKind::LinkState {
            mode: LinkMode::ReadOnly,
        },
    ); // the link's answer to the request
    rig.outcome(0, trading); // then a clean reconciliation
    rig.settle();
    assert_eq!(rig.dispatcher.link_mode(VenueId(0)), LinkMode::Trading);
}

// Goal: every command gets an answer: a cancel that waited behind the rate limit while its
// order filled is answered `CancelRejected { TooLateToCancel }`, not dropped.
#[test]
fn a_cancel_that_waited_while_its_order_filled_is_answered() {
    let mut config = roomy_config();
    config.limiter = limiter(1, 1);
    let mut rig = Rig::new(config);
    let live = rig.live_order(0, 0, 10);
    rig.events(0);
    rig.send(0, Command::Cancel { id: live });
    rig.settle();
    assert!(
        rig.requests(0).is_empty(),
        "the budget is spent: the cancel waits"
    );
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id: live,
            qty: 10,
            price: Price::from_units(10, 0),
        },
    );
    rig.settle();
    rig.advance(2 * SEC);
    rig.settle();
    let reason = CancelRejectReason::TooLateToCancel;
    let kinds = rig.kinds(0);
    assert_eq!(
        kinds.iter().filter(|(id, _)| *id == live).count(),
        2,
        "the fill and the cancel's answer: {kinds:?}"
    );
    assert!(kinds.contains(&(live, EventKind::CancelRejected { reason })));
    assert!(
        rig.requests(0).is_empty(),
        "nothing sent for a closed order"
    );
    assert_eq!(rig.dispatcher.stats().moot_cancels, 1);
}

// Goal: ids are never reused, even after their order left a small table. Method: a table of
// 2 slots churns through 10 orders; the first id is sent again and refused `DuplicateId`.
#[test]
fn ids_are_refused_after_their_orders_are_evicted() {
    let mut config = roomy_config();
    config.orders_max = 2;
    let mut rig = Rig::new(config);
    let first = rig.live_order(0, 0, 1);
    rig.outcome(0, OutcomeKind::Canceled { id: first });
    rig.settle();
    rig.events(0);
    for _ in 0..10 {
        let id = rig.live_order(0, 0, 1);
        rig.outcome(0, OutcomeKind::Canceled { id });
        rig.settle();
        rig.events(0);
    }
    assert!(rig.dispatcher.table().get(first).is_none(), "evicted");
    rig.events(0);
    let mut again = rig.order(0, 0, 1);
    again.id = first;
    rig.send(0, Command::New(again));
    rig.settle();
    let reason = RefusalReason::DuplicateId;
    assert_eq!(rig.kinds(0), vec![(first, EventKind::Refused { reason })]);
    assert!(
        rig.requests(0).is_empty(),
        "the id never reaches the venue twice"
    );
}

// Goal: bad prices never leave: zero, negative and collar-breaking prices are refused
// `RiskPrice`; a fill sets the collar's reference.
#[test]
fn bad_prices_are_refused_before_they_leave() {
    let mut rig = Rig::new(roomy_config());
    let mut refused = Vec::new();
    for price in [0, -1, i64::MIN] {
        let mut order = rig.order(0, 0, 1);
        order.price = Price(price);
        rig.send(0, Command::New(order));
        refused.push(order.id);
    }
    rig.settle();
    let mut kinds = rig.kinds(0);
    let live = rig.live_order(0, 0, 1);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id: live,
            qty: 1,
            price: Price::from_units(10, 0),
        },
    );
    rig.settle();
    let mut fat = rig.order(0, 0, 1);
    fat.price = Price::from_units(100, 0); // 10x the last fill, collar 10%
    rig.send(0, Command::New(fat));
    refused.push(fat.id);
    rig.settle();
    let reason = RefusalReason::RiskPrice;
    kinds.extend(rig.kinds(0));
    for id in refused {
        assert!(
            kinds.contains(&(id, EventKind::Refused { reason })),
            "{id}: {kinds:?}"
        );
    }
    assert!(rig.requests(0).is_empty());
}

// Goal: every cancel is answered exactly once, also when its order closes some other way after
// the cancel left (the soak's failure: a burst of cancels written into a connection that dropped
// before the venue read them; their new orders, never received either, were resolved "rejected"
// by status queries, and the cancels were never answered). Method: a sent order and its sent
// cancel both time out; the query's answer closes the order rejected; then the venue's refusal
// of the cancel arrives anyway. The strategy hears Unknown, Rejected, one CancelRejected.
#[test]
fn a_cancel_lost_on_the_wire_is_answered_when_its_order_closes() {
    let mut rig = Rig::new(roomy_config());
    let id = rig.new_order(0, 1, 10);
    rig.settle();
    rig.send(0, Command::Cancel { id });
    rig.settle();
    let sent: Vec<_> = rig.requests(0).iter().map(|r| r.kind).collect();
    assert_eq!(sent.len(), 2, "the new order and its cancel left: {sent:?}");
    assert_eq!(sent[1], RequestKind::Cancel { id });
    // Neither reached the venue: both answers are overdue.
    rig.advance(2 * SEC);
    rig.outcome(0, OutcomeKind::Timeout { id });
    rig.outcome(0, OutcomeKind::Timeout { id });
    rig.settle();
    assert_eq!(rig.state(id), OrderState::Unknown);
    assert_eq!(rig.kinds(0), vec![(id, EventKind::Unknown)]);
    // The status query: the venue never received the order.
    let reason = RejectReason::NotReceived;
    rig.outcome(0, OutcomeKind::Rejected { id, reason });
    rig.settle();
    let too_late = EventKind::CancelRejected {
        reason: CancelRejectReason::TooLateToCancel,
    };
    assert_eq!(
        rig.kinds(0),
        vec![(id, EventKind::Rejected { reason }), (id, too_late)],
        "the close answers the new order and, at once, the cancel"
    );
    assert_eq!(rig.dispatcher.stats().moot_cancels, 1);
    // A venue's refusal of that cancel, late: absorbed, not a second answer.
    let reason = CancelRejectReason::TooLateToCancel;
    rig.outcome(0, OutcomeKind::CancelRejected { id, reason });
    rig.settle();
    rig.advance(2 * SEC);
    rig.settle();
    assert_eq!(rig.kinds(0), vec![], "one answer per command");
    assert_eq!(rig.dispatcher.stats().late_cancel_answers, 1);
    assert_eq!(rig.dispatcher.stats().contradictions, 0);
}

// Goal: the three ways a cancel on the wire can meet its order's close answer it once each.
// Method: for a fill, a rejection and a venue cancel that close the order while its cancel is
// out, the venue's refusal of the cancel then arrives; count each order's cancel answers.
#[test]
fn a_cancel_crossing_its_orders_close_is_answered_once() {
    let mut rig = Rig::new(roomy_config());
    let filled = rig.live_order(0, 1, 10);
    let canceled = rig.live_order(0, 3, 10);
    let rejected = rig.new_order(0, 2, 10);
    rig.settle();
    rig.events(0);
    for id in [filled, rejected, canceled] {
        rig.send(0, Command::Cancel { id });
    }
    rig.settle();
    assert_eq!(rig.requests(0).len(), 4, "the new order and three cancels");
    let price = Price::from_units(10, 0);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id: filled,
            qty: 10,
            price,
        },
    );
    let reason = RejectReason::Invalid;
    rig.outcome(
        0,
        OutcomeKind::Rejected {
            id: rejected,
            reason,
        },
    );
    rig.outcome(0, OutcomeKind::Canceled { id: canceled });
    let reason = CancelRejectReason::TooLateToCancel;
    for id in [filled, rejected, canceled] {
        rig.outcome(0, OutcomeKind::CancelRejected { id, reason });
    }
    rig.settle();
    let kinds = rig.kinds(0);
    let answers = |id| {
        kinds
            .iter()
            .filter(|(i, k)| {
                *i == id && matches!(k, EventKind::CancelRejected { .. } | EventKind::Canceled)
            })
            .count()
    };
    for id in [filled, rejected, canceled] {
        assert_eq!(answers(id), 1, "{id}: {kinds:?}");
    }
    assert_eq!(rig.dispatcher.stats().late_cancel_answers, 3);
    assert_eq!(rig.dispatcher.stats().contradictions, 0);
}

// Goal (operator control): the kill switch is the fail-safe read-only state. Method: two new
// orders fill a venue ring of two, a third waits in its lane; the switch goes on: the queued
// one is withdrawn (`Canceled`, nothing on the wire), a new order and a replace are refused
// `KillSwitch`, and a cancel still leaves. Off again, new orders flow.
#[test]
fn the_kill_switch_withdraws_queued_orders_refuses_new_and_lets_cancels_through() {
    let mut rig = Rig::with_rings(roomy_config(), 64, 2);
    let live = rig.live_order(0, 1, 10);
    let queued: Vec<ClientOrderId> = (0..3).map(|_| rig.new_order(0, 2, 5)).collect();
    rig.poll();
    assert_eq!(rig.requests(0).len(), 2, "the ring took two");
    rig.kinds(0);
    let now = rig.now_ns;
    assert_eq!(rig.dispatcher.set_kill_switch(now, true), 1);
    assert_eq!(rig.kinds(0), vec![(queued[2], EventKind::Canceled)]);
    assert_eq!(rig.state(queued[2]), OrderState::Canceled);
    let refused = EventKind::Refused {
        reason: RefusalReason::KillSwitch,
    };
    let blocked = rig.new_order(0, 1, 1);
    let replacement = rig.id(0);
    rig.send(
        0,
        Command::Replace(Replace {
            id: live,
            new_id: replacement,
            price: Price::from_units(99, 0),
            qty: 10,
        }),
    );
    rig.send(0, Command::Cancel { id: live });
    rig.settle();
    assert_eq!(
        rig.kinds(0),
        vec![(blocked, refused), (replacement, refused)]
    );
    let sent: Vec<RequestKind> = rig.requests(0).iter().map(|r| r.kind).collect();
    assert!(
        sent.contains(&RequestKind::Cancel { id: live }),
        "cancels flow: {sent:?}"
    );
    assert!(sent.iter().all(|k| !k.enters_order()), "{sent:?}");
    assert_eq!(
        rig.dispatcher
            .stats()
            .refused_for(RefusalReason::KillSwitch),
        2
    );
    rig.dispatcher.set_kill_switch(now, false);
    let after = rig.new_order(0, 1, 1);
    rig.settle();
    assert!(rig
        .requests(0)
        .iter()
        .any(|r| matches!(r.kind, RequestKind::New(o) if o.id == after)));
}

// Goal (operator control): `cancel-all` covers exactly its scope, is never all-or-nothing,
// and says what it could not do: orders in doubt are counted (their query goes first), a full
// cancel lane leaves the rest for a second run, a disabled strategy and a shed symbol refuse
// only their own new orders, and a scope naming what is not configured is refused.
#[test]
fn operator_cancel_covers_its_scope_and_says_what_it_could_not() {
    use keel::dispatch::{OperatorError, OperatorScope};
    let mut config = roomy_config();
    config.lane_cancel_capacity = 4;
    let mut rig = Rig::new(config);
    let a: Vec<ClientOrderId> = (0..3).map(|_| rig.live_order(0, 1, 10)).collect();
    let b: Vec<ClientOrderId> = (0..3).map(|_| rig.live_order(1, 1, 10)).collect();
    let other = rig.live_order(1, 2, 10);
    rig.outcome(0, OutcomeKind::Timeout { id: b[2] });
    rig.settle();
    assert_eq!(rig.state(b[2]), OrderState::Unknown);
    let now = rig.now_ns;
    let symbol1 = OperatorScope {
        symbol: Some(SymbolId(1)),
        ..OperatorScope::default()
    };
    let done = rig.dispatcher.operator_cancel(now, symbol1).unwrap();
    assert_eq!(done.covered, 6);
    assert_eq!(done.in_doubt, 1);
    assert_eq!(done.queued, 4, "the lane holds four");
    assert_eq!(done.lane_full, 1);
    assert_eq!(rig.state(other), OrderState::Live, "outside the scope");
    rig.settle();
    let again = rig.dispatcher.operator_cancel(now, symbol1).unwrap();
    assert_eq!((again.queued, again.already, again.lane_full), (1, 4, 0));
    for id in a.iter().chain(&b[..2]) {
        assert_eq!(rig.state(*id), OrderState::PendingCancel, "{id}");
    }
    // Holds refuse only their own.
    rig.dispatcher
        .set_strategy_enabled(now, keel::order::StrategyId(0), false)
        .unwrap();
    rig.dispatcher
        .set_symbol_shed(now, SymbolId(3), true)
        .unwrap();
    let from_disabled = rig.new_order(0, 2, 1);
    let on_shed = rig.new_order(1, 3, 1);
    let fine = rig.new_order(1, 2, 1);
    rig.settle();
    let kinds = rig.kinds(0);
    assert!(kinds.contains(&(
        from_disabled,
        EventKind::Refused {
            reason: RefusalReason::StrategyDisabled
        }
    )));
    let kinds = rig.kinds(1);
    assert!(kinds.contains(&(
        on_shed,
        EventKind::Refused {
            reason: RefusalReason::SymbolShed
        }
    )));
    assert!(!kinds.iter().any(|(id, _)| *id == fine), "{kinds:?}");
    // Nothing that is not configured.
    let bad = OperatorScope {
        venue: Some(VenueId(9)),
        ..OperatorScope::default()
    };
    assert_eq!(
        rig.dispatcher.operator_cancel(now, bad),
        Err(OperatorError::NoVenue(9, 1))
    );
    assert!(rig
        .dispatcher
        .set_symbol_shed(now, SymbolId(8), true)
        .is_err());
}

/// Builds a filled long of `qty` on `symbol` (strategy 0, bought at 10).
fn long_position(rig: &mut Rig, symbol: u16, qty: u32) {
    let id = rig.live_order(0, symbol, qty);
    rig.outcome(
        0,
        OutcomeKind::Fill {
            id,
            qty,
            price: Price::from_units(10, 0),
        },
    );
    rig.settle();
    rig.kinds(0);
    assert_eq!(
        rig.dispatcher.guards().risk.position(SymbolId(symbol)),
        i64::from(qty)
    );
}

/// A reduce-only sell of `qty` on `symbol` from strategy 0.
fn reduce_sell(rig: &mut Rig, symbol: u16, qty: u32) -> ClientOrderId {
    let order = keel::order::NewOrder {
        side: keel::order::Side::Sell,
        reduce_only: true,
        ..rig.order(0, symbol, qty)
    };
    rig.send(0, Command::New(order));
    order.id
}

// Goal: under a storm that sheds and throttles new orders, reduce-only orders are never shed,
// leave ahead of every queued new order, draw on their reserve once new orders have spent
// theirs, and never take the venue past the limiter's total. Counted in dispatch positions.
#[test]
fn reduce_only_orders_flow_through_a_shed_and_throttled_storm() {
    let mut config = roomy_config();
    config.lane_new_capacity = 100;
    config.lane_new_per_symbol_max = 100;
    config.shed_high_pct = 80;
    config.shed_low_pct = 50;
    config.acquire_timeout_ns = 10 * SEC;
    // 10 a second, bursts of 20, a quarter of each bucket kept for reduce-only orders.
    config.limiter = limiter(10, 20);
    config.limiter.reduce_reserve_permille = 250;
    let mut rig = Rig::new(config);
    long_position(&mut rig, 0, 100);
    rig.advance(10 * SEC); // the bucket refills to its burst
    for i in 0..200 {
        rig.new_order(1, 1 + (i % 7) as u16, 1);
    }
    let reduces: Vec<_> = (0..8).map(|_| reduce_sell(&mut rig, 0, 5)).collect();
    rig.settle();
    let sent = rig.requests(0);
    let is_reduce =
        |r: &keel::order::VenueRequest| matches!(r.kind, RequestKind::New(o) if o.reduce_only);
    assert_eq!(sent.iter().filter(|r| is_reduce(r)).count(), 8, "none shed");
    assert!(
        sent[..8].iter().all(is_reduce),
        "reduce-only orders leave first"
    );
    // New orders stop where the reduce reserve (5 of the 20) starts: 20 - 8 - 5.
    assert_eq!(sent.len(), 15, "{sent:?}");
    assert_eq!(
        rig.dispatcher.stats().shed,
        120,
        "the storm is shed above 80 queued"
    );
    assert_eq!(rig.dispatcher.stats().sent_reduce_only, 8);
    // 5 tokens come back in half a second: 10 in the bucket, 5 of them the reserve. Only
    // reduce-only orders may use the reserve, however many new orders wait.
    let late: Vec<_> = (0..6).map(|_| reduce_sell(&mut rig, 0, 1)).collect();
    rig.advance(SEC / 2);
    rig.settle();
    let sent = rig.requests(0);
    assert_eq!(sent.len(), 6, "{sent:?}");
    assert!(
        sent.iter().all(is_reduce),
        "only reduce-only orders: {sent:?}"
    );
    // Past the acquire deadline the storm's queued orders are throttled; no reduce-only
    // order was ever shed, throttled or refused.
    rig.advance(11 * SEC);
    rig.settle();
    assert!(
        rig.dispatcher.stats().throttled > 0,
        "the storm was throttled"
    );
    let sent = rig.requests(0);
    assert!(sent.len() <= 20, "{} sent past the burst", sent.len());
    let told = rig.kinds(0);
    for id in reduces.iter().chain(&late) {
        assert_eq!(rig.state(*id), OrderState::PendingNew, "{id:?}");
        assert!(!told.iter().any(|(t, _)| t == id), "{id:?}: {told:?}");
    }
    assert_eq!(rig.dispatcher.stats().sent_reduce_only, 14);
    // More reduce-only orders than the bucket holds: the rest wait in their own lane, counted
    // there (`keel_lane_depth{lane="reduce"}`), not in the new-order lane.
    let queued_new = rig.dispatcher.lane_depths(VenueId(0)).unwrap().new;
    for _ in 0..30 {
        reduce_sell(&mut rig, 0, 1);
    }
    rig.settle();
    let sent = rig.requests(0).len() as u32;
    let depths = rig.dispatcher.lane_depths(VenueId(0)).unwrap();
    assert!(sent < 30 && depths.reduce > 0, "{sent} sent, {depths:?}");
    assert_eq!(depths.reduce + sent, 30, "{depths:?}");
    assert_eq!(depths.new, queued_new, "{depths:?}");
}

// Goal: a reduce-only order that could increase the position or flip it past zero is refused
// with its own reason and counted, on a flat symbol too; one that reduces to zero leaves.
#[test]
fn reduce_only_orders_that_would_increase_or_flip_are_refused() {
    let mut rig = Rig::new(roomy_config());
    long_position(&mut rig, 0, 50);
    let buy = keel::order::NewOrder {
        reduce_only: true,
        ..rig.order(0, 0, 1)
    };
    rig.send(0, Command::New(buy));
    let flip = reduce_sell(&mut rig, 0, 51);
    let flat = reduce_sell(&mut rig, 2, 1);
    let exact = reduce_sell(&mut rig, 0, 50);
    let beyond = reduce_sell(&mut rig, 0, 1);
    rig.settle();
    let refused = EventKind::Refused {
        reason: RefusalReason::ReduceOnlyIncreases,
    };
    let told = rig.kinds(0);
    for id in [buy.id, flip, flat, beyond] {
        assert!(told.contains(&(id, refused)), "{id:?}: {told:?}");
    }
    assert!(!told.iter().any(|(id, _)| *id == exact), "{told:?}");
    let sent = rig.requests(0);
    assert_eq!(sent.len(), 1);
    assert!(matches!(sent[0].kind, RequestKind::New(o) if o.id == exact && o.reduce_only));
    let stats = rig.dispatcher.stats();
    assert_eq!(stats.refused_for(RefusalReason::ReduceOnlyIncreases), 4);
}

// Goal: a replace of a reduce-only order stays reduce-only: it is judged by the same rule on
// its net quantity, and its replacement is held as reduce-only (its own replace too).
#[test]
fn a_replace_of_a_reduce_only_order_keeps_the_rule() {
    let mut rig = Rig::new(roomy_config());
    long_position(&mut rig, 0, 50);
    let id = reduce_sell(&mut rig, 0, 30);
    rig.settle();
    rig.requests(0);
    rig.outcome(0, OutcomeKind::Accepted { id });
    rig.settle();
    rig.kinds(0);
    let too_much = rig.id(0);
    rig.send(
        0,
        Command::Replace(Replace {
            id,
            new_id: too_much,
            price: Price::from_units(10, 0),
            qty: 51,
        }),
    );
    rig.settle();
    assert_eq!(
        rig.kinds(0),
        vec![(
            too_much,
            EventKind::Refused {
                reason: RefusalReason::ReduceOnlyIncreases
            }
        )]
    );
    assert_eq!(rig.state(id), OrderState::Live, "the original stands");
    let new_id = rig.id(0);
    let r = Replace {
        id,
        new_id,
        price: Price::from_units(10, 0),
        qty: 50,
    };
    rig.send(0, Command::Replace(r));
    rig.settle();
    assert_eq!(rig.requests(0)[0].kind, RequestKind::Replace(r));
    assert!(rig.dispatcher.table().get(new_id).unwrap().reduce_only);
    assert_eq!(rig.dispatcher.stats().sent_reduce_only, 2);
}

// Goal: the operator's and the controller's symbol sheds hold new orders but not reduce-only
// ones; the kill switch and a disabled strategy stop them too (the operator's explicit stop).
#[test]
fn symbol_sheds_pass_reduce_only_orders_the_kill_switch_does_not() {
    let mut rig = Rig::new(roomy_config());
    long_position(&mut rig, 0, 50);
    let now = rig.now_ns;
    rig.dispatcher
        .set_symbol_shed(now, SymbolId(0), true)
        .unwrap();
    rig.dispatcher
        .set_symbol_shed_by_control(now, SymbolId(0), true)
        .unwrap();
    let plain = rig.new_order(0, 0, 1);
    let reduce = reduce_sell(&mut rig, 0, 1);
    rig.settle();
    let shed = EventKind::Refused {
        reason: RefusalReason::SymbolShed,
    };
    assert_eq!(rig.kinds(0), vec![(plain, shed)]);
    let sent = rig.requests(0);
    assert!(matches!(sent[..], [ref r] if matches!(r.kind, RequestKind::New(o) if o.id == reduce)));
    rig.dispatcher.set_kill_switch(now, true);
    let held = reduce_sell(&mut rig, 0, 1);
    rig.settle();
    let kill = EventKind::Refused {
        reason: RefusalReason::KillSwitch,
    };
    assert_eq!(rig.kinds(0), vec![(held, kill)]);
}
