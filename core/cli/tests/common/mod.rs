//! The integration tests' shared harness. [`world`] is the one test world (the simulated
//! venue, the engine's own loop and a strategy, stepped together, with bounded waits, and its
//! configuration builder); [`Rig`] drives one dispatcher alone, strategies and venues by hand
//! with time passed explicitly; `engine_config`, `ouch_venue` and `one_venue_config` build the
//! configurations the tests start from; [`peers`] and [`observe`] start and read the real
//! processes (the `keel` binary, Python peers, Prometheus, Chromium); [`alloc`] counts
//! allocations.

#![allow(dead_code)]

pub mod alloc;
pub mod observe;
pub mod peers;
pub mod quickfix;
pub mod sdk;
pub mod world;

use keel::dispatch::{
    strategy_channel, venue_channel, Dispatcher, DispatcherConfig, StrategyHandle, VenueHandle,
};
use keel::guard::limiter::{LimiterConfig, WindowLimit, WINDOWS_MAX};
use keel::order::{
    ClientOrderId, Command, Event, EventKind, LinkMode, NewOrder, Outcome, OutcomeKind, Price,
    Side, StrategyId, SymbolId, TimeInForce, VenueId, VenueRequest,
};

/// Buy 10 of symbol 1 at 50.0000 on venue 0 for `strategy`, its `seq`th order: a day order
/// that rests (nothing sells that low).
pub fn resting_buy(strategy: u16, seq: u64) -> NewOrder {
    NewOrder {
        id: ClientOrderId::new(StrategyId(strategy), seq).unwrap(),
        venue: VenueId(0),
        symbol: SymbolId(1),
        side: Side::Buy,
        price: Price::from_units(50, 0),
        qty: 10,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

pub const MS: u64 = 1_000_000;
pub const SEC: u64 = 1_000_000_000;

/// The breaker of the drills (simulated and on sockets): a 1 s window, 5 calls at least,
/// open 300 ms (up to 1.2 s), two half-open probes.
pub fn drill_breaker() -> keel::guard::breaker::BreakerConfig {
    keel::guard::breaker::BreakerConfig {
        window_ns: 1_000 * MS,
        window_buckets: 10,
        calls_min: 5,
        open_duration_ns: 300 * MS,
        open_duration_max_ns: 1_200 * MS,
        half_open_probes: 2,
        half_open_wait_max_ns: 500 * MS,
        ..keel::guard::breaker::BreakerConfig::default()
    }
}

pub struct Rig {
    pub dispatcher: Dispatcher,
    pub strategies: Vec<StrategyHandle>,
    pub venues: Vec<VenueHandle>,
    pub now_ns: u64,
    pub next_seq: Vec<u64>,
}

/// A generous configuration: limits high enough that only the guard under test bites.
pub fn roomy_config() -> DispatcherConfig {
    let mut c = DispatcherConfig {
        strategies: 2,
        venues: 1,
        symbols: 8,
        orders_max: 32_768,
        lane_cancel_capacity: 1_024,
        lane_replace_capacity: 256,
        lane_new_capacity: 16_384,
        lane_new_per_symbol_max: 16_384,
        shed_high_pct: 100,
        shed_low_pct: 50,
        acquire_timeout_ns: 3_600 * SEC,
        ..DispatcherConfig::default()
    };
    c.risk.position_max = i64::MAX / 4;
    c.risk.order_notional_max = i64::MAX / 4;
    c.bulkhead.in_flight_per_symbol_max = 1 << 20;
    c.bulkhead.in_flight_per_venue_max = 1 << 20;
    c.limiter = limiter(1_000_000, 1_000_000);
    c
}

/// A limiter with one one-second window.
pub fn limiter(limit_weight: u32, burst_weight: u32) -> LimiterConfig {
    let mut windows = [None; WINDOWS_MAX];
    windows[0] = Some(WindowLimit {
        window_ns: SEC,
        limit_weight,
        burst_weight,
    });
    LimiterConfig {
        windows,
        cancel_reserve_permille: 0,
        // Tests that exercise a reserve set it themselves.
        reduce_reserve_permille: 0,
        ..LimiterConfig::default()
    }
}

impl Rig {
    pub fn new(config: DispatcherConfig) -> Self {
        Self::with_rings(config, 32_768, 32_768)
    }

    pub fn with_rings(config: DispatcherConfig, strategy_ring: u32, venue_ring: u32) -> Self {
        let (handles, ports): (Vec<_>, Vec<_>) = (0..config.strategies)
            .map(|_| strategy_channel(strategy_ring, strategy_ring))
            .unzip();
        let (vhandles, vports): (Vec<_>, Vec<_>) = (0..config.venues)
            .map(|_| venue_channel(venue_ring, venue_ring))
            .unzip();
        let dispatcher = Dispatcher::new(config, ports, vports, 0).expect("valid config");
        let mut rig = Self {
            dispatcher,
            strategies: handles,
            venues: vhandles,
            now_ns: 1,
            next_seq: vec![0; usize::from(config.strategies)],
        };
        for v in 0..config.venues {
            rig.outcome(
                v,
                OutcomeKind::LinkState {
                    mode: LinkMode::Trading,
                },
            );
        }
        rig.poll();
        rig
    }

    pub fn id(&mut self, strategy: u16) -> ClientOrderId {
        self.next_seq[usize::from(strategy)] += 1;
        ClientOrderId::new(StrategyId(strategy), self.next_seq[usize::from(strategy)]).unwrap()
    }

    pub fn order(&mut self, strategy: u16, symbol: u16, qty: u32) -> NewOrder {
        NewOrder {
            id: self.id(strategy),
            venue: VenueId(0),
            symbol: SymbolId(symbol),
            side: Side::Buy,
            price: Price::from_units(10, 0),
            qty,
            tif: TimeInForce::Day,
            reduce_only: false,
        }
    }

    pub fn send(&mut self, strategy: u16, command: Command) {
        self.strategies[usize::from(strategy)]
            .commands
            .push(command)
            .expect("strategy ring has room");
    }

    pub fn new_order(&mut self, strategy: u16, symbol: u16, qty: u32) -> ClientOrderId {
        let order = self.order(strategy, symbol, qty);
        self.send(strategy, Command::New(order));
        order.id
    }

    pub fn outcome(&mut self, venue: u16, kind: OutcomeKind) {
        let outcome = Outcome {
            venue: VenueId(venue),
            received_ns: self.now_ns,
            seq: 0,
            kind,
        };
        self.venues[usize::from(venue)]
            .outcomes
            .push(outcome)
            .expect("venue ring has room");
    }

    pub fn poll(&mut self) -> u32 {
        self.dispatcher.poll(self.now_ns)
    }

    /// Polls until a pass does no work.
    pub fn settle(&mut self) {
        while self.poll() > 0 {}
    }

    pub fn advance(&mut self, ns: u64) {
        self.now_ns += ns;
    }

    pub fn requests(&mut self, venue: u16) -> Vec<VenueRequest> {
        let ring = &mut self.venues[usize::from(venue)].requests;
        std::iter::from_fn(|| ring.pop().ok()).collect()
    }

    pub fn events(&mut self, strategy: u16) -> Vec<Event> {
        let ring = &mut self.strategies[usize::from(strategy)].events;
        std::iter::from_fn(|| ring.pop().ok()).collect()
    }

    pub fn kinds(&mut self, strategy: u16) -> Vec<(ClientOrderId, EventKind)> {
        self.events(strategy)
            .into_iter()
            .map(|e| (e.id, e.kind))
            .collect()
    }

    /// The order's state in the dispatcher's table (panics if the id is unknown).
    pub fn state(&self, id: ClientOrderId) -> keel::order::OrderState {
        self.dispatcher
            .table()
            .get(id)
            .expect("order in table")
            .state
    }

    /// Places an order and has the venue accept it; returns its id.
    pub fn live_order(&mut self, strategy: u16, symbol: u16, qty: u32) -> ClientOrderId {
        let id = self.new_order(strategy, symbol, qty);
        self.settle();
        let sent = self.requests(0);
        assert_eq!(sent.len(), 1, "one request for the new order: {sent:?}");
        self.outcome(0, OutcomeKind::Accepted { id });
        self.settle();
        let events = self.kinds(strategy);
        assert_eq!(events, vec![(id, EventKind::Accepted)]);
        id
    }
}

/// One OUCH venue link as the tests configure it (SPEC dialect, keel's reconciliation).
pub fn ouch_venue(
    address: std::net::SocketAddr,
    username: &str,
    orders_max: u32,
    ack_timeout_ns: u64,
    link: keel::session::link::LinkConfig,
) -> keel::session::VenueLinkConfig {
    keel::session::VenueLinkConfig {
        name: username.into(),
        address,
        username: username.into(),
        password: "keel".into(),
        protocol: keel::session::ProtocolConfig::Ouch(keel::session::ouch::OuchSettings {
            dialect: keel::proto::ouch::Dialect::SPEC,
            reconcile: keel::session::ouch::ReconcileMode::KeelExtension,
            rejects: Default::default(),
        }),
        ack_timeout_ns,
        orders_max,
        link,
    }
}

/// An engine configuration for tests that step the engine's loop themselves
/// (`EngineBuilder::build`): `symbols` by name, one in-process strategy per
/// `dispatcher.strategies`, rings of `ring` slots, no journal, no IPC, no feeds.
pub fn engine_config(
    symbols: &[&str],
    dispatcher: DispatcherConfig,
    venues: Vec<keel::session::VenueLinkConfig>,
    ring: u32,
) -> keel::engine::EngineConfig {
    keel::engine::EngineConfig {
        symbols: symbols
            .iter()
            .map(|s| keel::proto::soupbin::alpha::<8>(s))
            .collect(),
        dispatcher: DispatcherConfig {
            venues: venues.len() as u16,
            symbols: symbols.len() as u16,
            ..dispatcher
        },
        journal: None,
        venues,
        loops: keel::engine::LoopConfig {
            strategy_ring: ring,
            venue_ring: ring,
            ..keel::engine::LoopConfig::default()
        },
        ipc: None,
        feeds: Vec::new(),
        operator: Default::default(),
        wire_log: None,
        strategy_quotas: Vec::new(),
        metrics: Default::default(),
    }
}

/// The engine configuration of the wire-level tests: one in-process strategy, the four
/// symbols, one OUCH venue at `address` logged in as `username` (1,024 orders, 2 s ack
/// timeout, default link timing), rings of 1,024.
pub fn one_venue_config(
    address: std::net::SocketAddr,
    username: &str,
) -> keel::engine::EngineConfig {
    let dispatcher = DispatcherConfig {
        strategies: 1,
        ..DispatcherConfig::default()
    };
    let link = ouch_venue(address, username, 1024, 2 * SEC, Default::default());
    engine_config(
        &["AAPL", "MSFT", "AMZN", "NVDA"],
        dispatcher,
        vec![link],
        1024,
    )
}
