//! Reconnect storm, deterministic: 60 sessions to one venue that restarts and whose gateway
//! then saturates (more than 8 connection attempts in a 20 ms window and every handshake in
//! that window fails). With exponential backoff and equal jitter every session is SYNCED again
//! within a bound; with a fixed retry interval (kept only for this comparison) the sessions
//! retry in lockstep and the gateway stays saturated. Both times are printed.

use keel::dispatch::{venue_channel, VenuePort};
use keel::guard::backoff::{BackoffConfig, BackoffPolicy};
use keel::net::sim::{Overload, SimEndpoint, SimWorld};
use keel::net::{NetEvent, Transport};
use keel::order::VenueId;
use keel::proto::ouch::Dialect;
use keel::proto::soupbin::alpha;
use keel::session::link::{LinkConfig, VenueLink};
use keel::session::machine::{LinkState, SessionConfig};
use keel::session::ouch::{ClientConfig, OuchClient};
use keel::venue::flow::FlowConfig;
use keel::venue::server::{VenueConfig, VenueServer};

const MS: u64 = 1_000_000;
const SESSIONS: usize = 60;
const BOUND_NS: u64 = 20_000 * MS;

/// Sim time for all sessions to be SYNCED again after the restart, or `None` within the bound.
fn storm(policy: BackoffPolicy) -> Option<u64> {
    let world = SimWorld::new(5);
    {
        let mut w = world.borrow_mut();
        w.faults.delay_min_ns = 50_000;
        w.faults.delay_max_ns = 300_000;
    }
    let addr = "10.0.0.2:1".parse().unwrap(); // simulated
    let mut venue_net = SimWorld::endpoint(&world);
    venue_net.listen(addr);
    let config = VenueConfig {
        flow: FlowConfig {
            events_per_sec: 0,
            ..FlowConfig::default()
        },
        heartbeat_interval_ns: 100 * MS,
        client_timeout_ns: 2_000 * MS,
        ..VenueConfig::default()
    };
    let mut venue = VenueServer::with_transport(config, venue_net, addr);
    let mut net = SimWorld::endpoint(&world);
    let mut links: Vec<(VenueLink, VenuePort)> = (0..SESSIONS)
        .map(|i| {
            let (handle, port) = venue_channel(64, 64);
            let client = OuchClient::new(
                ClientConfig {
                    username: format!("s{i}"),
                    password: "keel".into(),
                    dialect: Dialect::SPEC,
                    orders_max: 64,
                    symbols: vec![alpha("AAPL")],
                    reconcile: Default::default(),
                    ack_timeout_ns: 1_000 * MS,
                },
                VenueId(0),
            );
            let backoff = BackoffConfig {
                base_ns: 50 * MS,
                cap_ns: 2_000 * MS,
                attempts_max: u32::MAX,
                policy,
            };
            let link_config = LinkConfig {
                session: SessionConfig {
                    backoff,
                    reconcile_timeout_ns: 1_000 * MS,
                    jitter_seed: 1_000 + i as u64,
                },
                heartbeat_interval_ns: 100 * MS,
                silent_intervals_max: 5,
                max_packet_len: 1024,
            };
            (
                VenueLink::with_config(addr, VenueId(0), client, handle, link_config),
                port,
            )
        })
        .collect();
    let mut now = 0;
    let mut events: Vec<NetEvent> = Vec::new();
    let mut step = |now: u64,
                    venue: &mut VenueServer<SimEndpoint>,
                    net: &mut SimEndpoint,
                    links: &mut Vec<(VenueLink, VenuePort)>| {
        venue.step(now, 0).unwrap();
        events.clear();
        net.poll(now, 0, &mut events).unwrap();
        for (link, port) in links.iter_mut() {
            for e in &events {
                link.on_event(now, net, e);
            }
            link.step(now, net);
            while port.outcomes.pop().is_ok() {}
        }
    };
    for (link, _) in links.iter_mut() {
        link.start(0, &mut net);
    }
    while links.iter().any(|(l, _)| l.state() != LinkState::Synced) {
        now += MS;
        assert!(
            now < BOUND_NS,
            "the first connection of all sessions did not settle"
        );
        step(now, &mut venue, &mut net, &mut links);
    }
    // The gateway restarts and comes back saturating.
    venue.drop_all();
    world.borrow_mut().faults.overload = Some(Overload {
        attempts_max: 8,
        window_ns: 20 * MS,
    });
    let restart = now;
    while now - restart < BOUND_NS {
        now += MS;
        step(now, &mut venue, &mut net, &mut links);
        if links.iter().all(|(l, _)| l.state() == LinkState::Synced) {
            return Some(now - restart);
        }
    }
    None
}

#[test]
fn equal_jitter_settles_a_reconnect_storm_fixed_interval_does_not() {
    let jitter = storm(BackoffPolicy::EqualJitter);
    let fixed = storm(BackoffPolicy::FixedInterval);
    let show = |t: Option<u64>| {
        t.map_or(format!("not within {} ms", BOUND_NS / MS), |ns| {
            format!("{} ms", ns / MS)
        })
    };
    println!("reconnect storm, {SESSIONS} sessions, gateway saturating above 8 connects per 20 ms: equal jitter {}, fixed interval {}", show(jitter), show(fixed));
    let jitter = jitter.expect("with equal jitter every session is SYNCED again within the bound");
    match fixed {
        None => {}
        Some(fixed) => assert!(
            fixed >= 3 * jitter,
            "fixed interval {fixed} ns vs equal jitter {jitter} ns"
        ),
    }
}
