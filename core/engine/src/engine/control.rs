//! The adaptive controller's way in: the side thread (docs/observability.md, "Adaptive
//! control") hands its adjustments to the dispatcher loop through one bounded SPSC ring; the
//! loop applies at most [`COMMANDS_PER_PASS`] per pass, between decisions, without allocating.
//! A full ring refuses the command at the sender, which counts it and sends again on its next
//! tick (the controller is level-based: it resends what the loop has not published yet).

use crate::dispatch::Dispatcher;
use crate::order::{SymbolId, VenueId};

/// Capacity of the ring (side thread → dispatcher loop).
pub const CONTROL_RING_CAPACITY: usize = 64;
/// Commands the loop applies per pass at most.
const COMMANDS_PER_PASS: u32 = 4;

/// One adjustment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlCommand {
    /// Cap a venue's new orders and replaces at this ‰ of its first rate window (1000: no cap).
    NewOrderRate {
        /// The venue.
        venue: VenueId,
        /// The cap, ‰ (clamped to 1..=1000 by the limiter).
        permille: u32,
    },
    /// Shed (true) a non-core symbol's new orders, or stop shedding it.
    Shed {
        /// The symbol.
        symbol: SymbolId,
        /// On or off.
        on: bool,
    },
}

/// The side thread's end.
#[derive(Debug)]
pub struct ControlSender {
    tx: rtrb::Producer<ControlCommand>,
    full: u64,
}

impl ControlSender {
    /// Hands `command` to the loop; false (counted) when the ring is full.
    pub fn send(&mut self, command: ControlCommand) -> bool {
        if self.tx.push(command).is_ok() {
            true
        } else {
            self.full += 1;
            false
        }
    }

    /// Commands refused because the ring was full.
    pub fn ring_full(&self) -> u64 {
        self.full
    }
}

/// The dispatcher loop's end.
#[derive(Debug)]
pub(crate) struct ControlPort {
    rx: rtrb::Consumer<ControlCommand>,
}

impl ControlPort {
    /// Applies up to [`COMMANDS_PER_PASS`] commands; returns how many. A command naming a
    /// venue or symbol this engine lacks is refused by the dispatcher and counted there.
    pub(crate) fn serve(&mut self, now_ns: u64, dispatcher: &mut Dispatcher) -> u32 {
        let mut n = 0;
        while n < COMMANDS_PER_PASS {
            let Ok(command) = self.rx.pop() else { break };
            n += 1;
            let applied = match command {
                ControlCommand::NewOrderRate { venue, permille } => {
                    dispatcher.set_new_order_permille(now_ns, venue, permille)
                }
                ControlCommand::Shed { symbol, on } => dispatcher
                    .set_symbol_shed_by_control(now_ns, symbol, on)
                    .map(|_| ()),
            };
            dispatcher.count_control_command(applied.is_ok());
        }
        n
    }
}

impl ControlPort {
    /// The next command, unapplied (for tests of the controller).
    #[cfg(test)]
    pub(crate) fn pop(&mut self) -> Option<ControlCommand> {
        self.rx.pop().ok()
    }
}

/// The two ends of a new control ring.
pub(crate) fn control_channel() -> (ControlPort, ControlSender) {
    let (tx, rx) = rtrb::RingBuffer::new(CONTROL_RING_CAPACITY);
    (ControlPort { rx }, ControlSender { tx, full: 0 })
}
