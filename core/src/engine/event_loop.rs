//! The engine's loop, written once: the dispatcher side ([`Front`]: strategy bridges, the
//! dispatcher and its journal) and the executor side ([`Executor`]: the transport, the venue
//! links and the feed handlers). `inline` runs both in one thread as an [`EngineLoop`];
//! `split` runs each in its own. The demo, the deterministic simulation and the engine's tests
//! drive an [`EngineLoop`] built by `EngineBuilder::build` with their own clock, over the
//! simulated network or a real transport: the code they exercise is the code `keel run` runs
//! (the end-to-end benchmark runs `EngineBuilder::start` itself).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::bridge::{Bridge, BridgeStats};
use super::{LinkReport, Restored, Shared};
use crate::dispatch::{DispatchStats, Dispatcher, StrategyHandle};
use crate::feed::handler::{FeedHandler, FeedStats};
use crate::net::{NetEvent, Transport};
use crate::order::{Order, StrategyId, VenueId};
use crate::runtime::watchdog::LoopHeartbeat;
use crate::session::link::VenueLink;
use crate::session::protocol::VenueProtocol;

/// Network events one executor pass takes from the transport at most is not bounded here:
/// the transport bounds them (one per connection and completion); the buffer is sized once.
const NET_EVENTS_CAPACITY: usize = 256;

/// The dispatcher side: strategy bridges, the dispatcher (and its journal).
#[derive(Debug)]
pub(super) struct Front {
    pub(super) dispatcher: Dispatcher,
    bridges: Vec<Bridge>,
    shared: Arc<Shared>,
    first_journal_index: u64,
    synced_mask: u64,
    /// The journal and IPC directory locks, held as long as the dispatcher runs.
    _locks: Vec<super::lock::DirLock>,
}

/// The dispatcher loop's part of the engine's report.
pub(super) struct FrontReport {
    pub(super) dispatch: DispatchStats,
    pub(super) open_orders: Vec<Order>,
    pub(super) bridges: Vec<(StrategyId, BridgeStats)>,
    pub(super) journal_records: u64,
}

impl Front {
    pub(super) fn new(
        dispatcher: Dispatcher,
        bridges: Vec<Bridge>,
        shared: Arc<Shared>,
        first_journal_index: u64,
        locks: Vec<super::lock::DirLock>,
    ) -> Self {
        Self {
            dispatcher,
            bridges,
            shared,
            first_journal_index,
            synced_mask: 0,
            _locks: locks,
        }
    }

    /// One pass: commands from shared-memory strategies, the dispatcher, events back to them,
    /// and the SYNCED mask published when it changes. Returns whether anything moved.
    pub(super) fn pass(&mut self, now: u64) -> bool {
        let mut work = 0;
        for b in &mut self.bridges {
            work += b.pump_commands(now);
        }
        work += self.dispatcher.poll(now);
        for b in &mut self.bridges {
            work += b.pump_events();
        }
        let mut mask = 0u64;
        for v in 0..self.dispatcher.guards().venues.len().min(64) {
            if self.dispatcher.is_synced(VenueId(v as u16)) {
                mask |= 1 << v;
            }
        }
        if mask != self.synced_mask {
            self.synced_mask = mask;
            self.shared.synced.store(mask, Ordering::Release);
            for b in &self.bridges {
                b.publish_synced(mask);
            }
        }
        self.shared.passes.fetch_add(1, Ordering::Relaxed);
        work > 0
    }

    pub(super) fn finish(mut self) -> FrontReport {
        let journal_records = match self.dispatcher.journal_mut() {
            Some(j) => {
                if let Err(e) = j.sync() {
                    crate::warn_line!("keel: journal sync at stop: {e}");
                }
                j.next_index() - self.first_journal_index
            }
            None => 0,
        };
        let table = self.dispatcher.table();
        let mut open = Vec::new();
        for s in 0..self.dispatcher.strategy_count() {
            let mut slot = table.first_open(StrategyId(s as u16));
            while let Some(at) = slot {
                if let Some(o) = table.slot(at) {
                    open.push(*o);
                }
                slot = table.next_open(at);
            }
        }
        let bridges = self
            .bridges
            .iter_mut()
            .map(|b| (b.strategy(), b.stop()))
            .collect();
        FrontReport {
            dispatch: *self.dispatcher.stats(),
            open_orders: open,
            bridges,
            journal_records,
        }
    }
}

/// The executor side: a transport, the venue links and the market-data feed handlers.
#[derive(Debug)]
pub struct Executor<T: Transport> {
    transport: T,
    /// Transport polls that failed (counted; the loop carries on).
    poll_errors: u64,
    links: Vec<VenueLink>,
    feeds: Vec<FeedHandler>,
    net: Vec<NetEvent>,
    heartbeat: Option<LoopHeartbeat>,
}

impl<T: Transport> Executor<T> {
    /// Starts every link and feed (their first connection attempts) on `transport`.
    pub(super) fn new(
        mut transport: T,
        mut links: Vec<VenueLink>,
        mut feeds: Vec<FeedHandler>,
        heartbeat: Option<LoopHeartbeat>,
        now_ns: u64,
    ) -> Self {
        for link in &mut links {
            link.start(now_ns, &mut transport);
        }
        for feed in &mut feeds {
            feed.start(now_ns, &mut transport);
        }
        Self {
            transport,
            poll_errors: 0,
            links,
            feeds,
            net: Vec::with_capacity(NET_EVENTS_CAPACITY),
            heartbeat,
        }
    }

    /// One pass: the transport's events to every link and feed, then each one's step (reads,
    /// writes, timers). Returns whether anything moved (an event, or a request sent).
    pub fn pass(&mut self, now: u64) -> bool {
        self.net.clear();
        if self.transport.poll(now, 0, &mut self.net).is_err() {
            self.poll_errors += 1;
        }
        let mut sent_before = 0;
        for link in &self.links {
            sent_before += link.stats().requests_sent;
        }
        for e in &self.net {
            for link in &mut self.links {
                link.on_event(now, &mut self.transport, e);
            }
            for feed in &mut self.feeds {
                feed.on_event(now, &mut self.transport, e);
            }
        }
        for feed in &mut self.feeds {
            feed.step(now, &mut self.transport);
        }
        let mut sent = 0;
        for link in &mut self.links {
            link.step(now, &mut self.transport);
            sent += link.stats().requests_sent;
        }
        if let Some(h) = &self.heartbeat {
            h.beat();
        }
        !self.net.is_empty() || sent != sent_before
    }

    /// Transport polls that failed so far.
    pub fn poll_errors(&self) -> u64 {
        self.poll_errors
    }

    pub(super) fn finish(self) -> (Vec<LinkReport>, Vec<FeedStats>) {
        let links = self.links.iter().map(link_report).collect();
        let feeds = self.feeds.iter().map(FeedHandler::stats).collect();
        (links, feeds)
    }
}

fn link_report(l: &VenueLink) -> LinkReport {
    LinkReport {
        state: l.state(),
        link: l.stats(),
        session: l.session_stats(),
        client: l.client().stats(),
    }
}

/// The whole engine as one loop (the `inline` topology), stepped by its owner: see the
/// module docs. What a test needs to observe, it exposes.
#[derive(Debug)]
pub struct EngineLoop<T: Transport> {
    front: Front,
    exec: Executor<T>,
    strategies: Vec<Option<StrategyHandle>>,
    restored: Restored,
}

impl<T: Transport> EngineLoop<T> {
    pub(super) fn new(
        front: Front,
        exec: Executor<T>,
        strategies: Vec<Option<StrategyHandle>>,
        restored: Restored,
    ) -> Self {
        Self {
            front,
            exec,
            strategies,
            restored,
        }
    }

    /// One pass at `now_ns`: the executor side, then the dispatcher side. Returns whether
    /// anything moved (an idle policy parks on `false`).
    pub fn pass(&mut self, now_ns: u64) -> bool {
        self.exec.pass(now_ns) | self.front.pass(now_ns)
    }

    /// The in-process strategy's handle (once; `None` if taken or served over IPC).
    pub fn take_strategy(&mut self, strategy: StrategyId) -> Option<StrategyHandle> {
        self.strategies.get_mut(usize::from(strategy.0))?.take()
    }

    /// The dispatcher (order table, guards, counters).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.front.dispatcher
    }

    /// The dispatcher, to act on as an operator would (reset a breaker, set a reference price).
    pub fn dispatcher_mut(&mut self) -> &mut Dispatcher {
        &mut self.front.dispatcher
    }

    /// Every venue link, in `VenueId` order.
    pub fn links(&self) -> &[VenueLink] {
        &self.exec.links
    }

    /// One venue link, to act on as an operator would (clear contradictions).
    pub fn link_mut(&mut self, venue: VenueId) -> Option<&mut VenueLink> {
        self.exec.links.get_mut(usize::from(venue.0))
    }

    /// The market-data feed handlers, in `[[feed]]` order.
    pub fn feeds(&self) -> &[FeedHandler] {
        &self.exec.feeds
    }

    /// The transport (the simulated network's endpoint, or a reactor's counters).
    pub fn transport(&self) -> &T {
        &self.exec.transport
    }

    /// The transport, mutably.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.exec.transport
    }

    /// Transport polls that failed so far.
    pub fn poll_errors(&self) -> u64 {
        self.exec.poll_errors
    }

    /// What the journal gave back at build.
    pub fn restored(&self) -> &Restored {
        &self.restored
    }

    pub(super) fn into_halves(self) -> (Front, Executor<T>) {
        (self.front, self.exec)
    }

    /// Stops the loop (the journal is synced) and returns what it measured.
    pub fn finish(self) -> super::EngineReport {
        let poll_errors = self.exec.poll_errors;
        let front = self.front.finish();
        let (links, feeds) = self.exec.finish();
        super::EngineReport {
            dispatch: front.dispatch,
            open_orders: front.open_orders,
            links,
            bridges: front.bridges,
            journal_records: front.journal_records,
            feeds,
            transport_poll_errors: poll_errors,
            transport: None,
        }
    }
}
