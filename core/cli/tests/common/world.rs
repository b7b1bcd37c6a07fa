//! The one test world: the simulated venue on real loopback sockets, the engine's own loop
//! (`EngineBuilder::build`, the loop `keel run` runs) over any socket transport, and one
//! in-process strategy, stepped together on the test's thread with the TSC clock. Every wait
//! is bounded ([`World::until`]: ten seconds of the clock, then a panic naming what was
//! awaited and the link's state) and waits for a fact, never for a time.
//!
//! [`WorldBuilder`] holds the configuration: a quiet venue (no synthetic flow), four symbols,
//! one strategy, one OUCH venue link with fast backoff, no market data; each test changes what
//! it needs ([`WorldBuilder::market_data`] adds the venue's WebSocket feed and the engine's feed
//! handler with a book subscriber). The venue may run on another transport than the engine
//! ([`WorldBuilder::build_on`]). A
//! scenario on every transport is a generic `fn name<T: SocketTransport>()` listed in
//! [`crate::on_every_transport!`]:
//!
//! ```ignore
//! fn accepted_then_canceled<T: SocketTransport>() {
//!     let mut w = World::<T>::new();
//!     w.until("SYNCED", |w| w.dispatcher().is_synced(VenueId(0)));
//!     let order = w.order(1, 100);
//!     w.send(Command::New(order));
//!     w.until("accept", |w| w.kinds(order.id).contains(&EventKind::Accepted));
//!     w.send(Command::Cancel { id: order.id });
//!     w.until("cancel", |w| w.kinds(order.id).contains(&EventKind::Canceled));
//! }
//! on_every_transport!(accepted_then_canceled);
//! ```

use keel::clock::{Clock, TscClock};
use keel::dispatch::{Dispatcher, DispatcherConfig, StrategyHandle};
use keel::engine::{EngineBuilder, EngineConfig, EngineLoop};
use keel::feed::fanout::Subscriber;
use keel::feed::handler::FeedConfig;
use keel::guard::backoff::BackoffConfig;
use keel::net::{ReactorConfig, SocketTransport};
use keel::order::{
    ClientOrderId, Command, Event, EventKind, NewOrder, Price, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};
use keel::session::link::LinkConfig;
use keel::session::machine::SessionConfig;
use keel::session::EngineLink;
use keel_venue::flow::FlowConfig;
use keel_venue::md_server::MdConfig;
use keel_venue::server::{VenueConfig, VenueServer};

use super::MS;

/// How long [`World::until`] waits for a fact before it fails the test.
pub const WAIT_NS: u64 = 10_000 * MS;

/// The world's configuration, built up by the test.
#[derive(Debug, Clone)]
pub struct WorldBuilder {
    /// The engine's symbols.
    pub symbols: Vec<&'static str>,
    /// The dispatcher (strategies 1; venues and symbols follow the lists).
    pub dispatcher: DispatcherConfig,
    /// The venue link's timing.
    pub link: LinkConfig,
    /// A request unanswered this long makes its order Unknown.
    pub ack_timeout_ns: u64,
    /// The link's session map.
    pub orders_max: u32,
    /// The simulated venue.
    pub venue: VenueConfig,
    /// The venue account's username.
    pub username: &'static str,
    /// Slots in each strategy and venue ring.
    pub ring: u32,
    /// The engine's transport settings.
    pub reactor: ReactorConfig,
    /// The symbols of the engine's market-data feed (empty: no feed).
    pub feed_symbols: Vec<&'static str>,
    /// The link's protocol and its settings (`None`: OUCH, as the simulated venue speaks it).
    pub protocol: Option<keel::session::ProtocolConfig>,
    /// The engine's journal (`None`: none).
    pub journal: Option<keel::journal::JournalConfig>,
}

impl Default for WorldBuilder {
    fn default() -> Self {
        Self {
            symbols: vec!["AAPL", "MSFT", "AMZN", "NVDA"],
            dispatcher: DispatcherConfig {
                strategies: 1,
                ..DispatcherConfig::default()
            },
            link: LinkConfig {
                session: SessionConfig {
                    backoff: BackoffConfig {
                        base_ns: 20 * MS,
                        cap_ns: 200 * MS,
                        attempts_max: u32::MAX,
                        policy: Default::default(),
                    },
                    ..SessionConfig::default()
                },
                ..LinkConfig::default()
            },
            ack_timeout_ns: 2_000 * MS,
            orders_max: 1024,
            venue: VenueConfig {
                flow: FlowConfig {
                    events_per_sec: 0,
                    ..FlowConfig::default()
                },
                ..VenueConfig::default()
            },
            username: "sess",
            ring: 256,
            reactor: ReactorConfig {
                conns_max: 4,
                ..ReactorConfig::default()
            },
            feed_symbols: Vec::new(),
            protocol: None,
            journal: None,
        }
    }
}

impl WorldBuilder {
    /// The default world's configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests unanswered for `ns` make their orders Unknown.
    pub fn ack_timeout(mut self, ns: u64) -> Self {
        self.ack_timeout_ns = ns;
        self
    }

    /// Changes the dispatcher's and the link's settings.
    pub fn tweak(mut self, f: impl FnOnce(&mut DispatcherConfig, &mut LinkConfig)) -> Self {
        f(&mut self.dispatcher, &mut self.link);
        self
    }

    /// Changes the simulated venue's settings.
    pub fn venue(mut self, f: impl FnOnce(&mut VenueConfig)) -> Self {
        f(&mut self.venue);
        self
    }

    /// Changes the engine's transport settings.
    pub fn reactor(mut self, f: impl FnOnce(&mut ReactorConfig)) -> Self {
        f(&mut self.reactor);
        self
    }

    /// The engine journals into `dir` (a restart from it resumes).
    pub fn journal(mut self, dir: &std::path::Path) -> Self {
        self.journal = Some(keel::journal::JournalConfig {
            dir: dir.to_path_buf(),
            file_bytes: keel::journal::RECORD_LEN as u64 * 4096,
        });
        self
    }

    /// The link speaks `protocol` with its settings.
    pub fn protocol(mut self, protocol: keel::session::ProtocolConfig) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// The venue serves WebSocket market data and the engine's feed handler subscribes to
    /// `symbols`; the world's [`World::book`] receives the handler's books.
    pub fn market_data(mut self, symbols: &[&'static str]) -> Self {
        self.venue.market_data = Some(MdConfig {
            conns_max: 8,
            ..MdConfig::default()
        });
        self.feed_symbols = symbols.to_vec();
        self
    }

    /// The engine's configuration for a venue whose order entry listens at `venue` (and
    /// market data at `market_data`, when the world has a feed).
    pub fn engine_config(
        &self,
        venue: std::net::SocketAddr,
        market_data: Option<std::net::SocketAddr>,
    ) -> EngineConfig {
        let mut link = super::ouch_venue(
            venue,
            self.username,
            self.orders_max,
            self.ack_timeout_ns,
            self.link,
        );
        if let Some(protocol) = &self.protocol {
            link.protocol = protocol.clone();
        }
        let mut config =
            super::engine_config(&self.symbols, self.dispatcher, vec![link], self.ring);
        config.journal = self.journal.clone();
        if let Some(addr) = market_data.filter(|_| !self.feed_symbols.is_empty()) {
            config.feeds = vec![FeedConfig {
                addr,
                symbols: self.feed_symbols.iter().map(|s| (*s).into()).collect(),
                ..FeedConfig::default()
            }];
        }
        config
    }

    /// The venue started on loopback and the engine's loop built, both over transport `T`.
    pub fn build<T: SocketTransport>(self) -> World<T> {
        self.build_on::<T, T>()
    }

    /// The venue started on loopback over transport `V` and the engine's loop built over
    /// transport `T`.
    pub fn build_on<T: SocketTransport, V: SocketTransport>(self) -> World<T, V> {
        let clock = TscClock::new();
        let fix = matches!(self.protocol, Some(keel::session::ProtocolConfig::Fix44(_)));
        let mut venue_config = self.venue.clone();
        if fix && venue_config.fix.is_none() {
            venue_config.fix = Some(keel_venue::server::FixConfig::default());
        }
        let venue = VenueServer::<V>::open(venue_config).expect("the venue starts on loopback");
        let transport = T::open(self.reactor).expect("the transport opens");
        // A FIX link trades with the venue's FIX acceptor, on the same exchange.
        let order_entry = match venue.fix_addr() {
            Some(addr) if fix => addr,
            _ => venue.local_addr(),
        };
        let config = self.engine_config(order_entry, venue.market_data_addr());
        let mut builder = EngineBuilder::new(config);
        let book = (!self.feed_symbols.is_empty())
            .then(|| builder.market_data(0, 1_024).expect("a book subscriber"));
        let mut engine = builder
            .build(transport, clock.now_ns())
            .expect("the engine builds");
        let strategy = engine.take_strategy(StrategyId(0)).expect("strategy 0");
        World {
            clock,
            venue: Some(venue),
            engine,
            strategy,
            book,
            events: Vec::new(),
        }
    }

    /// The engine's loop built over transport `T` against a venue that is not keel's (a
    /// QuickFIX acceptor, a Python peer) listening at `venue`: the world steps the engine only.
    pub fn build_against<T: SocketTransport>(self, venue: std::net::SocketAddr) -> World<T> {
        let clock = TscClock::new();
        let transport = T::open(self.reactor).expect("the transport opens");
        let mut engine = EngineBuilder::new(self.engine_config(venue, None))
            .build(transport, clock.now_ns())
            .expect("the engine builds");
        let strategy = engine.take_strategy(StrategyId(0)).expect("strategy 0");
        World {
            clock,
            venue: None,
            engine,
            strategy,
            book: None,
            events: Vec::new(),
        }
    }
}

/// The venue, the engine's loop and strategy 0, stepped together.
pub struct World<T: SocketTransport, V: SocketTransport = T> {
    /// The clock both are stepped with.
    pub clock: TscClock,
    /// The simulated venue (`None`: the venue is another process).
    pub venue: Option<VenueServer<V>>,
    /// The engine's own loop.
    pub engine: EngineLoop<T>,
    /// Strategy 0's rings.
    pub strategy: StrategyHandle,
    /// The feed handler's books (with [`WorldBuilder::market_data`]).
    pub book: Option<Subscriber>,
    /// Every event strategy 0 received, in order.
    pub events: Vec<Event>,
}

impl<T: SocketTransport> World<T> {
    /// The default world (see [`WorldBuilder`]).
    pub fn new() -> Self {
        WorldBuilder::new().build()
    }
}

impl<T: SocketTransport, V: SocketTransport> World<T, V> {
    /// The engine's dispatcher.
    pub fn dispatcher(&self) -> &Dispatcher {
        self.engine.dispatcher()
    }

    /// The engine's venue link.
    pub fn link(&self) -> &EngineLink {
        &self.engine.links()[0]
    }

    /// The simulated venue.
    pub fn venue(&mut self) -> &mut VenueServer<V> {
        self.venue
            .as_mut()
            .expect("this world's venue is another process")
    }

    /// One pass of the venue and the engine; strategy 0's events are collected.
    pub fn step(&mut self) {
        let now = self.clock.now_ns();
        if let Some(venue) = &mut self.venue {
            venue.step(now, 0).expect("the venue steps");
        }
        self.engine.pass(now);
        assert_eq!(self.engine.poll_errors(), 0);
        self.events
            .extend(std::iter::from_fn(|| self.strategy.events.pop().ok()));
    }

    /// Steps until `done` holds; fails the test after [`WAIT_NS`] naming `what`.
    pub fn until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let deadline = self.clock.now_ns() + WAIT_NS;
        while self.clock.now_ns() < deadline {
            self.step();
            if done(self) {
                return;
            }
        }
        panic!(
            "timed out waiting for {what}; link {:?} {:?}, events {:?}",
            self.link().state(),
            self.link().stats(),
            self.events
        );
    }

    /// Hands strategy 0's command to the engine (its ring has room: the world's rings are
    /// far larger than any scenario's burst).
    pub fn send(&mut self, command: Command) {
        self.strategy
            .commands
            .push(command)
            .expect("the strategy ring has room");
    }

    /// A day buy of `qty` in symbol 1 at 50.00, strategy 0's `seq`th order.
    pub fn order(&self, seq: u64, qty: u32) -> NewOrder {
        NewOrder {
            id: ClientOrderId::new(StrategyId(0), seq).unwrap(),
            venue: VenueId(0),
            symbol: SymbolId(1),
            side: Side::Buy,
            price: Price::from_units(50, 0),
            qty,
            tif: TimeInForce::Day,
            reduce_only: false,
        }
    }

    /// Every event kind strategy 0 received for `id`, in order.
    pub fn kinds(&self, id: ClientOrderId) -> Vec<EventKind> {
        self.events
            .iter()
            .filter(|e| e.id == id)
            .map(|e| e.kind)
            .collect()
    }
}

/// Runs each generic scenario `fn name<T: SocketTransport>()` on every socket transport the
/// engine has, as the tests `io_uring::name` and `epoll::name`. A new transport is one more
/// module here.
#[macro_export]
macro_rules! on_every_transport {
    ($($name:ident),+ $(,)?) => {
        mod io_uring {
            $(#[test]
            fn $name() {
                super::$name::<keel::net::Reactor>()
            })+
        }
        mod epoll {
            $(#[test]
            fn $name() {
                super::$name::<keel::net::EpollReactor>()
            })+
        }
    };
}
