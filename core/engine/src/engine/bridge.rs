//! A strategy in another process: its shared-memory channel joined to the dispatcher's
//! in-process rings by copying fixed-size records (no allocation), in the dispatcher loop.
//!
//! Every pass does a bounded amount of work per strategy ([`COMMANDS_PER_PASS_MAX`],
//! [`EVENTS_PER_PASS_MAX`]) whatever the strategy's indices say, so one strategy can never
//! hold the loop, the other strategies or the venue links. A channel whose peer index the
//! [`Channel`] refuses is broken: counted, logged once, declared in the header, never read or
//! written again in this run, and its strategy's orders are handled as on strategy loss.

use super::IpcConfig;
use crate::dispatch::StrategyHandle;
use crate::ipc::{Channel, ChannelFault, EngineState, Liveness, PeerMonitor};
use crate::order::{Command, MassCancelScope, StrategyId};

/// Command records taken from one strategy's ring per pass at most, good or malformed.
/// (A pass is microseconds; 256 is far above what a strategy sends between two passes, and
/// the rest waits for the next pass, a few microseconds later.)
pub const COMMANDS_PER_PASS_MAX: u32 = 256;
/// Events moved to one strategy's ring per pass at most.
pub const EVENTS_PER_PASS_MAX: u32 = 1_024;

/// One shared-memory strategy's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// Commands passed to the dispatcher.
    pub commands: u64,
    /// Command records refused (bad checksum, position or field); each answered with a
    /// `Malformed` event (a record is only taken when the event ring has room for the answer).
    pub malformed: u64,
    /// The last refused record.
    pub last_malformed: Option<crate::ipc::RecordError>,
    /// Events passed to the strategy.
    pub events: u64,
    /// Times the strategy's heartbeat stopped.
    pub lost: u64,
    /// Times it started beating (attached, or came back).
    pub attached: u64,
    /// Mass cancels issued because the strategy was lost or its channel broke.
    pub cancels_on_loss: u64,
    /// Times the strategy had orders restored live and did not attach within
    /// `restored_attach_timeout_ns` (treated as lost).
    pub never_attached: u64,
    /// Times the channel was declared broken (0 or 1 per run: it stays broken).
    pub broken: u64,
    /// Why it broke.
    pub fault: Option<ChannelFault>,
    /// Events for a strategy whose channel is broken (no longer deliverable), discarded.
    pub events_discarded: u64,
}

#[derive(Debug)]
pub(super) struct Bridge {
    channel: Channel,
    handle: StrategyHandle,
    monitor: PeerMonitor,
    cancel_on_loss: bool,
    /// A mass cancel for a lost strategy waits here if the command ring was full.
    pending_cancel: bool,
    /// Whether the header says `Running` yet (set by the first pass of the loop).
    running: bool,
    /// The journal restored this strategy's orders live: it must attach by then, or it is
    /// treated as lost.
    attach_by_ns: Option<u64>,
    /// The id floor last published: the highest sequence of this strategy's ids the engine
    /// has read (journaled ones at start, then every new order and replacement as it is
    /// read), so a strategy that re-attaches while the engine runs allocates above it.
    id_floor: u64,
    stats: BridgeStats,
}

impl Bridge {
    pub(super) fn new(channel: Channel, handle: StrategyHandle, ipc: &IpcConfig, now: u64) -> Self {
        let monitor = PeerMonitor::new(now, channel.strategy_heartbeat(), ipc.strategy_timeout_ns);
        Self {
            handle,
            monitor,
            cancel_on_loss: ipc.cancel_on_strategy_loss,
            pending_cancel: false,
            running: false,
            attach_by_ns: None,
            id_floor: channel.id_floor(),
            channel,
            stats: BridgeStats::default(),
        }
    }

    /// Raises the published id floor past `command`'s new id (one header store, only when
    /// it rises). Ids of another strategy are the dispatcher's to refuse, not a floor.
    fn raise_id_floor(&mut self, command: &Command) {
        let id = match command {
            Command::New(order) => order.id,
            Command::Replace(r) => r.new_id,
            Command::Cancel { .. } | Command::MassCancel { .. } => return,
        };
        if id.strategy() == self.channel.strategy() && id.sequence() > self.id_floor {
            self.id_floor = id.sequence();
            self.channel.set_id_floor(self.id_floor);
        }
    }

    /// The strategy has orders the journal restored live: unless it attaches (its heartbeat
    /// moves) by `deadline_ns`, it is treated as lost — its orders canceled with
    /// `cancel_on_strategy_loss` — instead of leaving them working unwatched.
    pub(super) fn await_attach(&mut self, deadline_ns: u64) {
        self.attach_by_ns = Some(deadline_ns);
    }

    /// Counters so far.
    pub(super) fn stats(&self) -> BridgeStats {
        self.stats
    }

    pub(super) fn strategy(&self) -> StrategyId {
        self.channel.strategy()
    }

    /// Shared memory → dispatcher; heartbeats both ways. Returns records moved (at most
    /// [`COMMANDS_PER_PASS_MAX`]).
    pub(super) fn pump_commands(&mut self, now: u64) -> u32 {
        self.channel.beat_engine();
        if !self.running {
            // The loop serves commands from now on: only now is the header's state true.
            self.running = true;
            self.channel.set_engine_state(EngineState::Running);
        }
        match self.monitor.observe(now, self.channel.strategy_heartbeat()) {
            Liveness::Died => {
                self.stats.lost += 1;
                // A broken channel's orders were handled when it broke.
                self.pending_cancel |= self.cancel_on_loss && self.stats.broken == 0;
            }
            Liveness::CameAlive => self.stats.attached += 1,
            Liveness::Unchanged => {}
        }
        if let Some(by) = self.attach_by_ns {
            if self.monitor.alive() {
                self.attach_by_ns = None;
            } else if now >= by {
                self.attach_by_ns = None;
                self.stats.never_attached += 1;
                self.pending_cancel |= self.cancel_on_loss && self.stats.broken == 0;
            }
        }
        self.push_pending_cancel();
        if self.stats.broken > 0 {
            return 0;
        }
        // The tail is checked every pass, even when no record can be taken (the dispatcher's
        // ring or the event ring full): a bad index is declared at once, not when the strategy
        // next reads its events.
        let _ = self.channel.commands_pending();
        self.channel.check_declared_table();
        self.check_fault();
        let mut moved = 0;
        // Room for the answer first: a malformed record is answered at once, never dropped.
        while moved < COMMANDS_PER_PASS_MAX
            && self.handle.commands.slots() > 0
            && self.channel.event_room() > 0
        {
            match self.channel.pop_command() {
                None => break,
                Some(Ok(command)) => {
                    self.raise_id_floor(&command);
                    let pushed = self.handle.commands.push(command);
                    debug_assert!(pushed.is_ok(), "room was checked");
                    self.stats.commands += 1;
                }
                Some(Err(error)) => {
                    self.stats.malformed += 1;
                    self.stats.last_malformed = Some(error);
                    let answered = self.channel.push_malformed(error);
                    debug_assert!(answered || self.channel.fault().is_some(), "room checked");
                }
            }
            moved += 1;
        }
        self.check_fault();
        moved
    }

    fn push_pending_cancel(&mut self) {
        if !self.pending_cancel {
            return;
        }
        let all = Command::MassCancel {
            scope: MassCancelScope::Strategy,
        };
        if self.handle.commands.push(all).is_ok() {
            self.pending_cancel = false;
            self.stats.cancels_on_loss += 1;
        }
    }

    /// A peer index the channel refused: the channel is broken for the rest of this run.
    fn check_fault(&mut self) {
        let Some(fault) = self.channel.fault() else {
            return;
        };
        if self.stats.broken > 0 {
            return;
        }
        self.stats.broken += 1;
        self.stats.fault = Some(fault);
        self.channel.publish_fault(fault);
        self.pending_cancel |= self.cancel_on_loss;
        // Said by the engine's logger (the dispatcher loop's watch sees `broken` move): the
        // loop never writes to stderr itself.
        self.push_pending_cancel();
    }

    /// Dispatcher → shared memory. Events wait in the in-process ring while the strategy's
    /// ring is full (the dispatcher then holds back that strategy's commands). A broken
    /// channel's events are discarded (counted) so that the dispatcher never waits on it.
    pub(super) fn pump_events(&mut self) -> u32 {
        if self.stats.broken > 0 {
            return self.discard_events();
        }
        let mut moved = 0;
        let mut room = self
            .channel
            .event_room()
            .min(u64::from(EVENTS_PER_PASS_MAX));
        while room > 0 {
            let Ok(event) = self.handle.events.pop() else {
                break;
            };
            if !self.channel.push_event(&event) {
                // The strategy's event head went bad between the room check and the push.
                self.stats.events_discarded += 1;
                break;
            }
            room -= 1;
            moved += 1;
            self.stats.events += 1;
        }
        self.check_fault();
        moved
    }

    fn discard_events(&mut self) -> u32 {
        let mut moved = 0;
        while moved < EVENTS_PER_PASS_MAX && self.handle.events.pop().is_ok() {
            moved += 1;
            self.stats.events_discarded += 1;
        }
        moved
    }

    pub(super) fn publish_synced(&self, mask: u64) {
        self.channel.set_venues_synced(mask);
    }

    /// The engine is stopping: say so in the header.
    pub(super) fn stop(&mut self) -> BridgeStats {
        self.channel.set_venues_synced(0);
        self.channel.set_engine_state(EngineState::Stopped);
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{strategy_channel, StrategyPort};
    use crate::ipc::{IpcEvent, RecordError};
    use crate::order::{ClientOrderId, Event, EventKind};

    const STRATEGY: StrategyId = StrategyId(1);

    fn rig(
        dir: &std::path::Path,
        command_capacity: u32,
        event_capacity: u32,
    ) -> (Bridge, Channel, StrategyPort) {
        let path = dir.join("strategy-1");
        let engine =
            Channel::create_or_attach(&path, STRATEGY, command_capacity, event_capacity).unwrap();
        let strategy = Channel::open(&path).unwrap();
        let (handle, port) = strategy_channel(4_096, 4_096);
        let bridge = Bridge::new(engine, handle, &IpcConfig::default(), 0);
        (bridge, strategy, port)
    }

    fn cancel(seq: u64) -> Command {
        Command::Cancel {
            id: ClientOrderId::new(STRATEGY, seq).unwrap(),
        }
    }

    // Goal: one pass takes at most COMMANDS_PER_PASS_MAX records, however many the strategy
    // published, so one strategy never holds the loop; the rest follow in the next passes.
    #[test]
    fn a_pass_takes_a_bounded_number_of_commands() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bridge, strategy, mut port) = rig(dir.path(), 1_024, 1_024);
        for seq in 1..=1_000 {
            assert!(strategy.push_command(&cancel(seq)));
        }
        assert_eq!(bridge.pump_commands(1), COMMANDS_PER_PASS_MAX);
        let mut passes = 1;
        while bridge.pump_commands(1 + passes) > 0 {
            passes += 1;
        }
        assert_eq!(passes, 1_000_u64.div_ceil(u64::from(COMMANDS_PER_PASS_MAX)));
        for seq in 1..=1_000 {
            assert_eq!(port.commands.pop(), Ok(cancel(seq)));
        }
        assert_eq!(bridge.stats.commands, 1_000);
    }

    // Goal: the id floor is live (issue 12, rail 3): a strategy that re-attaches while the
    // engine runs reads a floor above every id the engine has read, not the one published at
    // start. Method: start from a journaled floor of 7; new orders and a replace raise it, a
    // lower id, a cancel and another strategy's id do not.
    #[test]
    fn the_id_floor_follows_every_new_id_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strategy-1");
        let engine = Channel::create_or_attach(&path, STRATEGY, 64, 64).unwrap();
        engine.set_id_floor(7);
        let strategy = Channel::open(&path).unwrap();
        let (handle, _port) = strategy_channel(64, 64);
        let mut bridge = Bridge::new(engine, handle, &IpcConfig::default(), 0);
        let new = |strategy, seq| {
            let id = ClientOrderId::new(strategy, seq).unwrap();
            Command::New(crate::order::NewOrder {
                id,
                venue: crate::order::VenueId(0),
                symbol: crate::order::SymbolId(0),
                side: crate::order::Side::Buy,
                price: crate::order::Price(1),
                qty: 1,
                tif: crate::order::TimeInForce::Day,
                reduce_only: false,
            })
        };
        assert!(strategy.push_command(&new(STRATEGY, 12)));
        assert!(strategy.push_command(&new(STRATEGY, 9)));
        assert!(strategy.push_command(&cancel(40)));
        assert!(strategy.push_command(&new(StrategyId(2), 50)));
        bridge.pump_commands(1);
        assert_eq!(strategy.id_floor(), 12);
        let replace = Command::Replace(crate::order::Replace {
            id: ClientOrderId::new(STRATEGY, 12).unwrap(),
            new_id: ClientOrderId::new(STRATEGY, 13).unwrap(),
            price: crate::order::Price(2),
            qty: 1,
        });
        assert!(strategy.push_command(&replace));
        bridge.pump_commands(2);
        assert_eq!(strategy.id_floor(), 13);
    }

    // Goal: every malformed record gets its answer, even when the event ring is nearly full:
    // a record is taken only when there is room for its answer, never answered by a drop.
    #[test]
    fn malformed_records_are_each_answered_even_with_a_small_event_ring() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bridge, strategy, _port) = rig(dir.path(), 16, 2);
        let mut bad = crate::ipc::encode_command(&cancel(1));
        bad[4] = 99; // a kind the layout does not define
        for _ in 0..10 {
            assert!(strategy.push_command_record(&bad));
        }
        assert_eq!(
            bridge.pump_commands(1),
            2,
            "as many as the event ring has room for"
        );
        assert_eq!(
            bridge.pump_commands(2),
            0,
            "the ring is full: nothing is taken"
        );
        let mut answers = Vec::new();
        for now in 3..100 {
            while let Some(e) = strategy.pop_event() {
                answers.push(e.unwrap());
            }
            if answers.len() == 10 {
                break;
            }
            bridge.pump_commands(now);
        }
        let positions: Vec<u64> = answers
            .iter()
            .map(|a| match a {
                IpcEvent::Malformed(RecordError::Field { position, .. }) => *position,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            positions,
            (0..10).collect::<Vec<_>>(),
            "each once, in order"
        );
        assert_eq!(bridge.stats.malformed, 10);
    }

    // Goal: a broken channel (here: the tail jumps past the ring) is declared in the header,
    // counted once, its strategy's orders mass-canceled as on loss, and its events discarded
    // so the dispatcher never waits on it; nothing more is read from it.
    #[test]
    fn a_broken_channel_is_handled_as_strategy_loss() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bridge, strategy, mut port) = rig(dir.path(), 16, 16);
        assert!(strategy.push_command(&cancel(1)));
        assert_eq!(bridge.pump_commands(1), 1);
        assert_eq!(port.commands.pop(), Ok(cancel(1)));
        strategy.store_word(crate::ipc::offset::COMMAND_TAIL, u64::MAX);
        assert_eq!(bridge.pump_commands(2), 0);
        assert_eq!(bridge.stats.broken, 1);
        assert_eq!(bridge.stats.cancels_on_loss, 1);
        assert_eq!(
            port.commands.pop(),
            Ok(Command::MassCancel {
                scope: MassCancelScope::Strategy
            })
        );
        assert_eq!(strategy.published_fault(), bridge.stats.fault);
        for i in 0..3 {
            port.events
                .push(Event {
                    id: ClientOrderId::new(STRATEGY, 1).unwrap(),
                    kind: EventKind::Canceled,
                    at_ns: i,
                })
                .unwrap();
        }
        assert_eq!(bridge.pump_events(), 3);
        assert_eq!(bridge.stats.events_discarded, 3);
        assert_eq!(strategy.pop_event(), None);
        assert_eq!(bridge.pump_commands(3), 0);
        assert_eq!(bridge.stats.broken, 1, "counted once");
        assert!(port.commands.pop().is_err(), "nothing more read");
    }
}
