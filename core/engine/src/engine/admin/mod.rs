//! The operator's way in: `keel ctl` talks to an admin thread over a local (Unix) socket, the
//! admin thread talks to the dispatcher loop through a pair of bounded SPSC rings. The loop
//! takes at most one request per pass and answers with fixed-size records (no allocation, no
//! formatting, no lock); the admin thread turns them into text. Reconnecting a venue goes
//! to the executor loop through a bit per venue in [`Shared`]. Every command is answered,
//! logged and counted (docs/operations.md, "Operator control").
//!
//! The socket speaks lines: one request line (at most [`REQUEST_LEN_MAX`] bytes), then the
//! answer — a first line `ok: …` or `error: …`, data lines, and the connection is closed.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, TscClock};

use super::bridge::{Bridge, BridgeStats};
use super::Shared;
use crate::dispatch::{
    DispatchStats, Dispatcher, OperatorCancel, OperatorError, OperatorScope, REFUSAL_REASONS,
};
use crate::guard::breaker::BreakerStats;
use crate::order::{LinkMode, Order, OrderState, Side, StrategyId, SymbolId, VenueId};

/// Longest request line accepted, bytes.
pub const REQUEST_LEN_MAX: usize = 512;
/// Capacity of the ring of requests (admin thread → loop).
const REQUESTS_CAPACITY: usize = 16;
/// Capacity of the ring of answers (loop → admin thread).
const REPLIES_CAPACITY: usize = 1024;
/// Order-table slots the loop scans per pass for a listing (bounds the pass).
const SCAN_PER_PASS: u32 = 4096;
/// How long the admin thread waits for the loop's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);
/// How long a client may take to send its request line, from its connect (in all, not per
/// read: a byte at a time does not extend it).
const READ_WAIT: Duration = Duration::from_secs(2);
/// How long writing one answer may take in all.
const WRITE_WAIT: Duration = Duration::from_secs(2);
/// Connections waiting for their request line at once.
const CONNECTIONS_MAX: usize = 16;

/// What the loop is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminCommand {
    /// The dispatcher's summary, one row per venue and per strategy, then the end.
    Status,
    /// Every open order the scope covers, one row each, then the end.
    OpenOrders(OperatorScope),
    /// Cancel every open order the scope covers.
    CancelAll(OperatorScope),
    /// Enable (true) or disable a strategy's new orders.
    Strategy(StrategyId, bool),
    /// Shed (true) a symbol's new orders, or stop shedding.
    Shed(SymbolId, bool),
    /// The kill switch on (true) or off.
    KillSwitch(bool),
    /// Force a venue's breaker open (true) or closed.
    Breaker(VenueId, bool),
}

/// One request: an id the answers carry, and the command.
#[derive(Debug, Clone, Copy)]
pub struct AdminRequest {
    id: u64,
    command: AdminCommand,
}

/// One venue as the dispatcher sees it.
#[derive(Debug, Clone, Copy)]
pub struct VenueRow {
    venue: VenueId,
    mode: LinkMode,
    breaker_open: bool,
    breaker: BreakerStats,
    lanes: crate::dispatch::LaneDepths,
}

/// One strategy as the dispatcher sees it.
#[derive(Debug, Clone, Copy)]
pub struct StrategyRow {
    strategy: StrategyId,
    disabled: bool,
    bridge: Option<BridgeStats>,
}

/// One answer record.
#[derive(Debug, Clone, Copy)]
#[allow(clippy::large_enum_variant)]
enum Answer {
    Summary {
        dispatch: DispatchStats,
        open_orders: u32,
        kill_switch: bool,
    },
    Venue(VenueRow),
    Strategy(StrategyRow),
    ShedSymbol(SymbolId),
    Order {
        order: Order,
        age_ns: u64,
    },
    /// The last record of a listing.
    End,
    Canceled(OperatorCancel),
    /// A hold changed; this many unreleased orders were withdrawn.
    Held {
        withdrawn: u32,
    },
    Done,
    Refused(OperatorError),
}

#[derive(Debug, Clone, Copy)]
struct AdminReply {
    id: u64,
    answer: Answer,
}

/// A listing the loop is part-way through (across passes).
#[derive(Debug, Clone, Copy)]
enum Listing {
    Status {
        id: u64,
        stage: u32,
    },
    Orders {
        id: u64,
        scope: OperatorScope,
        next_slot: u32,
        rows: u32,
    },
}

impl Listing {
    fn id(&self) -> u64 {
        match *self {
            Listing::Status { id, .. } | Listing::Orders { id, .. } => id,
        }
    }
}

/// The loop's end of the admin rings.
#[derive(Debug)]
pub(super) struct AdminPort {
    requests: rtrb::Consumer<AdminRequest>,
    replies: rtrb::Producer<AdminReply>,
    listing: Option<Listing>,
    /// Scratch: the engine's start, for order ages (sent_ns is in the loop's clock).
    stop_cancel: StopCancel,
    /// Requests up to this id were given up by the admin thread (no answer in time): the
    /// loop skips them, so a command reported unanswered is not carried out later.
    abandoned: Arc<AtomicU64>,
}

/// The admin thread's end.
#[derive(Debug)]
pub struct AdminClient {
    requests: rtrb::Producer<AdminRequest>,
    replies: rtrb::Consumer<AdminReply>,
    next_id: u64,
    abandoned: Arc<AtomicU64>,
}

/// The two ends of a new pair of admin rings.
pub(super) fn admin_channel() -> (AdminPort, AdminClient) {
    let (req_tx, req_rx) = rtrb::RingBuffer::new(REQUESTS_CAPACITY);
    let (rep_tx, rep_rx) = rtrb::RingBuffer::new(REPLIES_CAPACITY);
    let abandoned = Arc::new(AtomicU64::new(0));
    (
        AdminPort {
            requests: req_rx,
            replies: rep_tx,
            listing: None,
            stop_cancel: StopCancel::default(),
            abandoned: Arc::clone(&abandoned),
        },
        AdminClient {
            requests: req_tx,
            replies: rep_rx,
            next_id: 1,
            abandoned,
        },
    )
}

/// Cancel-on-stop as the loop runs it: once asked, the kill switch goes on and every open
/// order is canceled; the cancel is run again every interval (orders in doubt are canceled
/// once resolved, a full cancel lane is retried) until the engine stops.
#[derive(Debug, Clone, Copy, Default)]
struct StopCancel {
    started: bool,
    last_ns: u64,
}

const STOP_CANCEL_INTERVAL_NS: u64 = 100_000_000;

mod client;
mod port;
mod server;
mod text;

pub use client::*;
pub use server::*;
pub use text::*;

#[cfg(test)]
mod tests;
