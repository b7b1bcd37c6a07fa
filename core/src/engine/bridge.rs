//! A strategy in another process: its shared-memory channel joined to the dispatcher's
//! in-process rings by copying fixed-size records (no allocation), in the dispatcher loop.

use super::IpcConfig;
use crate::dispatch::StrategyHandle;
use crate::ipc::{Channel, EngineState, Liveness, PeerMonitor};
use crate::order::{Command, MassCancelScope, StrategyId};

/// One shared-memory strategy's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// Commands passed to the dispatcher.
    pub commands: u64,
    /// Command records refused (bad checksum, position or field); each answered with a
    /// `Malformed` event.
    pub malformed: u64,
    /// The last refused record.
    pub last_malformed: Option<crate::ipc::RecordError>,
    /// Events passed to the strategy.
    pub events: u64,
    /// Times the strategy's heartbeat stopped.
    pub lost: u64,
    /// Times it started beating (attached, or came back).
    pub attached: u64,
    /// Mass cancels issued because the strategy was lost.
    pub cancels_on_loss: u64,
    /// Malformed-record notices that found the event ring full (the count above still has
    /// them).
    pub notices_dropped: u64,
}

#[derive(Debug)]
pub(super) struct Bridge {
    channel: Channel,
    handle: StrategyHandle,
    monitor: PeerMonitor,
    cancel_on_loss: bool,
    /// A mass cancel for a lost strategy waits here if the command ring was full.
    pending_cancel: bool,
    stats: BridgeStats,
}

impl Bridge {
    pub(super) fn new(channel: Channel, handle: StrategyHandle, ipc: &IpcConfig, now: u64) -> Self {
        let monitor = PeerMonitor::new(now, channel.strategy_heartbeat(), ipc.strategy_timeout_ns);
        channel.set_engine_state(EngineState::Running);
        Self {
            channel,
            handle,
            monitor,
            cancel_on_loss: ipc.cancel_on_strategy_loss,
            pending_cancel: false,
            stats: BridgeStats::default(),
        }
    }

    pub(super) fn strategy(&self) -> StrategyId {
        self.channel.strategy()
    }

    /// Shared memory → dispatcher; heartbeats both ways. Returns commands moved.
    pub(super) fn pump_commands(&mut self, now: u64) -> u32 {
        self.channel.beat_engine();
        match self.monitor.observe(now, self.channel.strategy_heartbeat()) {
            Liveness::Died => {
                self.stats.lost += 1;
                self.pending_cancel = self.cancel_on_loss;
            }
            Liveness::CameAlive => self.stats.attached += 1,
            Liveness::Unchanged => {}
        }
        if self.pending_cancel {
            let all = Command::MassCancel {
                scope: MassCancelScope::Strategy,
            };
            if self.handle.commands.push(all).is_ok() {
                self.pending_cancel = false;
                self.stats.cancels_on_loss += 1;
            }
        }
        let mut moved = 0;
        while self.handle.commands.slots() > 0 {
            match self.channel.pop_command() {
                None => break,
                Some(Ok(command)) => {
                    let pushed = self.handle.commands.push(command);
                    debug_assert!(pushed.is_ok(), "room was checked");
                    self.stats.commands += 1;
                }
                Some(Err(error)) => {
                    self.stats.malformed += 1;
                    self.stats.last_malformed = Some(error);
                    if !self.channel.push_malformed(error) {
                        self.stats.notices_dropped += 1;
                    }
                }
            }
            moved += 1;
        }
        moved
    }

    /// Dispatcher → shared memory. Events wait in the in-process ring while the strategy's
    /// ring is full (the dispatcher then holds back that strategy's commands).
    pub(super) fn pump_events(&mut self) -> u32 {
        let mut moved = 0;
        let mut room = self.channel.event_room();
        while room > 0 {
            let Ok(event) = self.handle.events.pop() else {
                break;
            };
            let pushed = self.channel.push_event(&event);
            debug_assert!(pushed, "room was checked");
            room -= 1;
            moved += 1;
            self.stats.events += 1;
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
