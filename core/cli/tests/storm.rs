//! Reconnect storm, deterministic: 60 sessions to one venue that restarts and whose gateway
//! then saturates (more than 8 connection attempts in a 20 ms window and every handshake in
//! that window fails). With exponential backoff and equal jitter every session is SYNCED again
//! within a bound; with a fixed retry interval (kept only for this comparison) the sessions
//! retry in lockstep and the gateway stays saturated. Both times are printed.

mod common;

use keel::clock::{Clock, TscClock};
use keel::engine::{EngineBuilder, EngineLoop};
use keel::guard::backoff::{BackoffConfig, BackoffPolicy};
use keel::net::{Reactor, ReactorConfig, Transport};
use keel::session::link::LinkConfig;
use keel::session::machine::{LinkState, SessionConfig};
use keel_venue::flow::FlowConfig;
use keel_venue::server::{VenueConfig, VenueServer};
use keel_venue::simnet::{Overload, SimWorld};

use common::MS;
const SESSIONS: usize = 60;
const BOUND_NS: u64 = 20_000 * MS;

/// One engine with 60 venue links (the engine's own loop, `EngineBuilder::build`), all to
/// the same venue, over one transport.
struct Storm<T: Transport> {
    venue: VenueServer<T>,
    engine: EngineLoop<T>,
}

impl<T: Transport> Storm<T> {
    /// Builds the engine at `now`: every session makes its first connection attempt. Session
    /// `i`'s jitter seed is `seeds[i]`.
    fn new(
        venue: VenueServer<T>,
        net: T,
        backoff: BackoffConfig,
        seeds: &[u64; SESSIONS],
        now: u64,
    ) -> Self {
        let addr = venue.local_addr();
        let venues = (0..SESSIONS)
            .map(|i| {
                let link_config = LinkConfig {
                    session: SessionConfig {
                        backoff,
                        reconcile_timeout_ns: 1_000 * MS,
                        jitter_seed: keel::rng::Seed::Fixed(seeds[i]),
                    },
                    heartbeat_interval_ns: 100 * MS,
                    silent_intervals_max: 5,
                    max_packet_len: 1024,
                };
                common::ouch_venue(addr, &format!("s{i}"), 64, 1_000 * MS, link_config)
            })
            .collect();
        let config = common::engine_config(&["AAPL"], common::roomy_config(), venues, 64);
        let engine = EngineBuilder::new(config).build(net, now).unwrap();
        Self { venue, engine }
    }

    fn step(&mut self, now: u64) {
        self.venue.step(now, 0).unwrap();
        self.engine.pass(now);
        assert_eq!(self.engine.poll_errors(), 0);
    }

    fn all_synced(&self) -> bool {
        self.engine
            .links()
            .iter()
            .all(|l| l.state() == LinkState::Synced)
    }

    /// Connects every session, restarts the venue, applies `saturate`, and returns the time
    /// (by `clock`) until all sessions are SYNCED again, or `None` past `bound_ns`.
    fn run(
        mut self,
        start: u64,
        mut clock: impl FnMut() -> u64,
        bound_ns: u64,
        saturate: impl FnOnce(&mut Self),
    ) -> Option<u64> {
        while !self.all_synced() {
            let now = clock();
            assert!(
                now - start < BOUND_NS,
                "the first connection of all sessions did not settle"
            );
            self.step(now);
        }
        // The gateway restarts and comes back saturating.
        self.venue.drop_all();
        saturate(&mut self);
        let restart = clock();
        loop {
            let now = clock();
            if now - restart >= bound_ns {
                return None;
            }
            self.step(now);
            if self.all_synced() {
                return Some(now - restart);
            }
        }
    }
}

fn venue_config() -> VenueConfig {
    VenueConfig {
        flow: FlowConfig {
            events_per_sec: 0,
            ..FlowConfig::default()
        },
        heartbeat_interval_ns: 100 * MS,
        client_timeout_ns: 2_000 * MS,
        ..VenueConfig::default()
    }
}

/// Fixed seeds, one per session: the storm replays exactly.
fn fixed_seeds() -> [u64; SESSIONS] {
    std::array::from_fn(|i| 1_000 + i as u64)
}

/// Sim time for all sessions to be SYNCED again after the restart, or `None` within the bound.
fn storm(policy: BackoffPolicy, seeds: &[u64; SESSIONS]) -> Option<u64> {
    storm_with(storm_backoff(policy), seeds, BOUND_NS)
}

/// The storm's backoff: 50 ms base, 2 s cap.
fn storm_backoff(policy: BackoffPolicy) -> BackoffConfig {
    BackoffConfig {
        base_ns: 50 * MS,
        cap_ns: 2_000 * MS,
        attempts_max: u32::MAX,
        policy,
    }
}

/// [`storm`] with any backoff and bound.
fn storm_with(backoff: BackoffConfig, seeds: &[u64; SESSIONS], bound_ns: u64) -> Option<u64> {
    let world = SimWorld::new(5);
    {
        let mut w = world.borrow_mut();
        w.faults.delay_min_ns = 50_000;
        w.faults.delay_max_ns = 300_000;
    }
    let addr = "10.0.0.2:1".parse().unwrap(); // simulated
    let mut venue_net = SimWorld::endpoint(&world);
    venue_net.listen(addr).unwrap();
    let venue = VenueServer::with_transport(venue_config(), venue_net, addr).unwrap();
    let storm = Storm::new(venue, SimWorld::endpoint(&world), backoff, seeds, 0);
    let mut now = 0;
    let clock = move || {
        now += MS;
        now
    };
    storm.run(0, clock, bound_ns, |_| {
        world.borrow_mut().faults.overload = Some(Overload {
            attempts_max: 8,
            window_ns: 20 * MS,
        });
    })
}

/// The same storm on real sockets (loopback, io_uring) in real time; the venue's gateway
/// saturates the same way (`saturate 8 20`).
fn storm_on_sockets(policy: BackoffPolicy, bound_ns: u64) -> Option<u64> {
    let venue = VenueServer::new(venue_config()).unwrap();
    let reactor = Reactor::new(ReactorConfig {
        conns_max: SESSIONS as u32 + 4,
        ..ReactorConfig::default()
    })
    .unwrap();
    let clock = TscClock::new();
    let start = clock.now_ns();
    Storm::new(venue, reactor, storm_backoff(policy), &fixed_seeds(), start).run(
        start,
        || clock.now_ns(),
        bound_ns,
        |storm| {
            storm.venue.apply_control(0, "saturate 8 20").unwrap();
        },
    )
}

fn show(t: Option<u64>, bound_ns: u64) -> String {
    t.map_or(format!("not within {} ms", bound_ns / MS), |ns| {
        format!("{} ms", ns / MS)
    })
}

#[test]
fn equal_jitter_settles_a_reconnect_storm_fixed_interval_does_not() {
    let jitter = storm(BackoffPolicy::EqualJitter, &fixed_seeds());
    let fixed = storm(BackoffPolicy::FixedInterval, &fixed_seeds());
    println!("reconnect storm, {SESSIONS} sessions, gateway saturating above 8 connects per 20 ms: equal jitter {}, fixed interval {}", show(jitter, BOUND_NS), show(fixed, BOUND_NS));
    let jitter = jitter.expect("with equal jitter every session is SYNCED again within the bound");
    match fixed {
        None => {}
        Some(fixed) => assert!(
            fixed >= 3 * jitter,
            "fixed interval {fixed} ns vs equal jitter {jitter} ns"
        ),
    }
}

// Goal: the storm on real sockets. Every session must be SYNCED again after the restart with
// equal jitter; the fixed-interval time is reported for comparison but not asserted, as real
// scheduling can break the lockstep the simulation shows (the deterministic test above holds
// the claim).
#[test]
fn reconnect_storm_on_real_sockets() {
    let jitter = storm_on_sockets(BackoffPolicy::EqualJitter, BOUND_NS);
    let fixed_bound = 5_000 * MS;
    let fixed = storm_on_sockets(BackoffPolicy::FixedInterval, fixed_bound);
    println!("reconnect storm on loopback sockets, {SESSIONS} sessions, `saturate 8 20`: equal jitter {}, fixed interval {}", show(jitter, BOUND_NS), show(fixed, fixed_bound));
    assert!(
        jitter.is_some(),
        "with equal jitter every session is SYNCED again within {} ms",
        BOUND_NS / MS
    );
}

// Goal (issue 23, point 2): the storm settles just as well with the seeds a default
// configuration draws from the OS (what `keel run` uses) as with the fixed ones; the seeds are
// printed so a failure replays. Each default configuration draws its own.
#[test]
fn equal_jitter_with_default_seeds_settles_a_reconnect_storm() {
    let seeds: [u64; SESSIONS] =
        std::array::from_fn(|_| SessionConfig::default().jitter_seed.value());
    let mut distinct = seeds.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), SESSIONS, "every session draws its own seed");
    let jitter = storm(BackoffPolicy::EqualJitter, &seeds);
    println!(
        "reconnect storm, default seeds: {} (seeds {seeds:?})",
        show(jitter, BOUND_NS)
    );
    assert!(
        jitter.is_some(),
        "with default seeds every session is SYNCED again within {} ms; seeds {seeds:?}",
        BOUND_NS / MS
    );
}

// Goal (issue 23, point 9): the figures behind keel's reconnect defaults. The same simulated
// storm (60 sessions, a gateway saturating above 8 connects per 20 ms) with keel's defaults
// (100 ms base, 30 s cap) and with the design's (1 s base, 60 s cap): both settle; the times
// are printed for docs/config.md (sim time, deterministic seeds). Bounds on settling only,
// never a comparison of the two times.
#[test]
fn the_storm_settles_with_keel_and_with_the_design_backoff() {
    let backoff = |base_ms: u64, cap_ms: u64| BackoffConfig {
        base_ns: base_ms * MS,
        cap_ns: cap_ms * MS,
        ..BackoffConfig::default()
    };
    assert_eq!(
        BackoffConfig::default(),
        backoff(100, 30_000),
        "keel's defaults"
    );
    let bound_ns = 120_000 * MS;
    let keel = storm_with(backoff(100, 30_000), &fixed_seeds(), bound_ns);
    let design = storm_with(backoff(1_000, 60_000), &fixed_seeds(), bound_ns);
    println!(
        "reconnect storm, {SESSIONS} sessions: keel's 100 ms / 30 s {}, the design's 1 s / 60 s {}",
        show(keel, bound_ns),
        show(design, bound_ns)
    );
    assert!(keel.is_some() && design.is_some(), "{keel:?} {design:?}");
}
