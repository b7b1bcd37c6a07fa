//! The rings that join the dispatcher to strategies and venue sessions (rtrb SPSC rings,
//! sized at start, never grown), and keel's own SPSC ring ([`spsc`]), measured against rtrb
//! before it replaces them.

pub mod spsc;

use rtrb::{Consumer, Producer, RingBuffer};

use crate::order::{Command, Event, Outcome, VenueRequest};

/// The dispatcher's end of one strategy's rings.
#[derive(Debug)]
pub struct StrategyPort {
    /// Commands from the strategy.
    pub commands: Consumer<Command>,
    /// Events to the strategy.
    pub events: Producer<Event>,
}

/// The strategy's end: send commands, receive events.
#[derive(Debug)]
pub struct StrategyHandle {
    /// Commands to the dispatcher.
    pub commands: Producer<Command>,
    /// Events from the dispatcher.
    pub events: Consumer<Event>,
}

/// A strategy's pair of rings: `command_capacity` commands in, `event_capacity` events out.
pub fn strategy_channel(
    command_capacity: u32,
    event_capacity: u32,
) -> (StrategyHandle, StrategyPort) {
    let (command_tx, command_rx) = RingBuffer::new(command_capacity as usize);
    let (event_tx, event_rx) = RingBuffer::new(event_capacity as usize);
    (
        StrategyHandle {
            commands: command_tx,
            events: event_rx,
        },
        StrategyPort {
            commands: command_rx,
            events: event_tx,
        },
    )
}

/// The dispatcher's end of one venue session's rings.
#[derive(Debug)]
pub struct VenuePort {
    /// Requests to the venue session.
    pub requests: Producer<VenueRequest>,
    /// Outcomes from the venue session.
    pub outcomes: Consumer<Outcome>,
}

/// The venue session's end.
#[derive(Debug)]
pub struct VenueHandle {
    /// Requests from the dispatcher.
    pub requests: Consumer<VenueRequest>,
    /// Outcomes to the dispatcher.
    pub outcomes: Producer<Outcome>,
}

/// A venue session's pair of rings.
pub fn venue_channel(request_capacity: u32, outcome_capacity: u32) -> (VenueHandle, VenuePort) {
    let (request_tx, request_rx) = RingBuffer::new(request_capacity as usize);
    let (outcome_tx, outcome_rx) = RingBuffer::new(outcome_capacity as usize);
    (
        VenueHandle {
            requests: request_rx,
            outcomes: outcome_tx,
        },
        VenuePort {
            requests: request_tx,
            outcomes: outcome_rx,
        },
    )
}
