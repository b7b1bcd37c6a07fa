//! The messages that cross keel's rings, all fixed-size and `Copy`.
//!
//! - [`Command`]: strategy → dispatcher (new, cancel, replace, mass cancel).
//! - [`VenueRequest`]: dispatcher → venue session (what goes on the wire).
//! - [`Outcome`]: venue session → dispatcher (acks, fills, rejects, timeouts, link state).
//! - [`Event`]: dispatcher → strategy (what happened to its order, or why it was refused).

use super::refusal::RefusalReason;
use super::{ClientOrderId, Price, Qty, Side, StrategyId, SymbolId, TimeInForce, VenueId};

/// A new order as a strategy asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewOrder {
    /// Id chosen by the strategy's [`super::IdAllocator`].
    pub id: ClientOrderId,
    /// Venue to route to.
    pub venue: VenueId,
    /// Interned symbol.
    pub symbol: SymbolId,
    /// Buy or sell.
    pub side: Side,
    /// Limit price.
    pub price: Price,
    /// Quantity; zero is refused by risk.
    pub qty: Qty,
    /// Time in force.
    pub tif: TimeInForce,
    /// Reduce-only (as venues and the ecosystem name it): the order may only bring the
    /// symbol's position towards zero. It rides its own lane (after cancels, before replaces
    /// and new orders), is never shed, may use the rate limiter's reduce reserve, and is
    /// refused `ReduceOnlyIncreases` if, with every open order on its side, it could take the
    /// position past zero (docs/architecture.md, "Reduce-only orders").
    pub reduce_only: bool,
}

/// A replace (cancel/replace) of a live order: the venue swaps `id` for `new_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replace {
    /// The order to replace.
    pub id: ClientOrderId,
    /// The id the replacement will carry.
    pub new_id: ClientOrderId,
    /// New limit price.
    pub price: Price,
    /// New total quantity (OUCH semantics: the new open quantity).
    pub qty: Qty,
}

/// Which of the strategy's own orders a mass cancel covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MassCancelScope {
    /// Every open order of the strategy on this symbol.
    Symbol(SymbolId),
    /// Every open order of the strategy.
    Strategy,
}

/// A strategy's instruction to the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Enter a new order.
    New(NewOrder),
    /// Cancel one order.
    Cancel {
        /// Order to cancel.
        id: ClientOrderId,
    },
    /// Replace an order.
    Replace(Replace),
    /// Cancel many orders; expanded into single cancels in the cancel lane.
    MassCancel {
        /// Which orders.
        scope: MassCancelScope,
    },
}

/// A command tagged with the strategy that sent it (the dispatcher adds the tag from the ring
/// it read, so a strategy cannot act for another).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedCommand {
    /// The sending strategy.
    pub strategy: StrategyId,
    /// The command.
    pub command: Command,
}

/// What the dispatcher asks a venue session to put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Enter this order.
    New(NewOrder),
    /// Cancel this order (all remaining quantity).
    Cancel {
        /// Order to cancel.
        id: ClientOrderId,
    },
    /// Replace an order.
    Replace(Replace),
    /// Ask the venue for the state of this order (never a resend).
    Query {
        /// Order to ask about.
        id: ClientOrderId,
    },
    /// The dispatcher's order table refused a venue report about this order: the link must
    /// stop trusting itself and reconcile (it goes read-only; nothing is sent for the order).
    Reconcile {
        /// The order the refused report was about.
        id: ClientOrderId,
    },
}

impl RequestKind {
    /// True for requests that put a new order in the market (a new order, a replace): only a
    /// trusted, SYNCED link carries them.
    pub fn enters_order(&self) -> bool {
        matches!(self, Self::New(_) | Self::Replace(_))
    }
}

/// A request to a venue session, stamped with when the dispatcher released it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VenueRequest {
    /// The venue link.
    pub venue: VenueId,
    /// When the dispatcher released it (monotonic ns).
    pub sent_ns: u64,
    /// For `New` and `Replace`: the wire reference of the (new) order, ascending per venue
    /// and journaled with its intent (OUCH UserRefNum); 0 for cancels and queries.
    pub wire_ref: u32,
    /// What to send.
    pub kind: RequestKind,
}

/// Why a venue rejected an order. Split by whose fault it is: the breaker counts only
/// venue/system faults, never the strategy's own mistakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The venue reported a system problem (unavailable, internal error, halted gateway).
    VenueSystem,
    /// The venue throttled us (the "429" of order entry); feeds the rate limiter's cool-down.
    VenueThrottle,
    /// The order itself was invalid at the venue (price, quantity, symbol, permissions).
    Invalid,
    /// The venue already knew this client order id.
    DuplicateId,
    /// Trading halted or market closed for the symbol.
    MarketClosed,
    /// Found by reconciliation: the venue has no record of the order (it never arrived). It
    /// is dead; re-entering it is a new order with a new id, never a resend.
    NotReceived,
    /// Any other venue reason, carried as the venue's one-byte code.
    Other(u8),
}

impl RejectReason {
    /// True when the reject says the venue link is unhealthy (a breaker failure).
    pub fn is_venue_fault(self) -> bool {
        matches!(self, Self::VenueSystem)
    }
}

/// Why a venue refused a cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRejectReason {
    /// The order was already filled or closed: a business outcome, not a failure.
    TooLateToCancel,
    /// The venue does not know the order.
    UnknownOrder,
    /// A venue/system problem: counts as a breaker failure.
    VenueSystem,
    /// Found by a status query: the order is still open at the venue, so the cancel never
    /// took effect (it was lost). Cancel again if still wanted.
    NotApplied,
}

/// The kind of a request returned unsent ([`OutcomeKind::NotSent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsentRequest {
    /// A new order.
    New,
    /// A cancel.
    Cancel,
    /// A status query.
    Query,
    /// A reconciliation request (the link was not connected: its next login reconciles).
    Reconcile,
    /// A replace of `replaced` (the outcome's id is the replacement).
    Replace {
        /// The order being replaced.
        replaced: ClientOrderId,
    },
}

impl UnsentRequest {
    /// The order id and kind of `request`.
    pub fn of(request: &RequestKind) -> (ClientOrderId, Self) {
        match *request {
            RequestKind::New(o) => (o.id, Self::New),
            RequestKind::Cancel { id } => (id, Self::Cancel),
            RequestKind::Query { id } => (id, Self::Query),
            RequestKind::Reconcile { id } => (id, Self::Reconcile),
            RequestKind::Replace(r) => (r.new_id, Self::Replace { replaced: r.id }),
        }
    }
}

/// What a venue session reports to the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// The venue accepted a new order.
    Accepted {
        /// The order.
        id: ClientOrderId,
    },
    /// A (partial or full) execution.
    Fill {
        /// The order.
        id: ClientOrderId,
        /// Executed quantity in this fill.
        qty: Qty,
        /// Execution price.
        price: Price,
    },
    /// The order is closed at the venue with nothing more to fill (user cancel, IOC remainder,
    /// venue-initiated cancel).
    Canceled {
        /// The order.
        id: ClientOrderId,
    },
    /// The venue swapped `id` for `new_id`.
    Replaced {
        /// The old order (now closed).
        id: ClientOrderId,
        /// The new order (now live).
        new_id: ClientOrderId,
    },
    /// A new or replace request was rejected.
    Rejected {
        /// The order (for a replace, the new id).
        id: ClientOrderId,
        /// Why.
        reason: RejectReason,
    },
    /// A cancel was refused; the order stays as it was.
    CancelRejected {
        /// The order.
        id: ClientOrderId,
        /// Why.
        reason: CancelRejectReason,
    },
    /// The protocol's own state changed (for OUCH: the venue session, the trading day, it
    /// first logged into): the dispatcher journals it as it is, opaque, so a restart hands it
    /// back to the protocol (`VenueProtocol::restore_state`).
    ProtocolState {
        /// The protocol's bytes, tagged with the protocol and its layout version.
        state: ProtocolState,
    },
    /// The venue expects this account's wire references (OUCH UserRefNums) from `next` on: it
    /// saw references this journal never issued (an account that traded before the journal
    /// began). New ones start there, instead of being refused as duplicates one by one.
    WireRefFloor {
        /// The first reference the venue will accept.
        next: u32,
    },
    /// A status answer: the order is open at the venue exactly as keel last knew it. Settles
    /// an order keel has as `Unknown`; changes nothing otherwise.
    StillOpen {
        /// The order.
        id: ClientOrderId,
    },
    /// A request the link took from the ring but could not write before the session stopped
    /// being SYNCED: it never reached the venue (definitively, unlike `Timeout`).
    NotSent {
        /// The order the request was for (for a replace: the replacement).
        id: ClientOrderId,
        /// What the request was.
        request: UnsentRequest,
    },
    /// No answer within the ack timeout: the order's state is unknown (never "failed").
    Timeout {
        /// The order.
        id: ClientOrderId,
    },
    /// The session's trading mode changed; only a `Trading` link may carry new orders.
    LinkState {
        /// What may leave on the link now.
        mode: LinkMode,
    },
    /// The link refused to write a new order or replace (the session could not track it, or
    /// the wire cannot carry a value): it never left. Closed with this reason.
    Refused {
        /// The order (for a replace: the replacement).
        id: ClientOrderId,
        /// Why.
        reason: RefusalReason,
    },
    /// A venue report contradicted this session's view of an order (an execution beyond the
    /// order's quantity, an execution after it closed) or named an order this session never
    /// sent: the order's state is in doubt and the link is read-only until reconciliation
    /// settles it. Never counted and carried on.
    Contradiction {
        /// The order concerned (`None`: a report for an order this session never sent — told to
        /// the dispatcher all the same, so its `contradictions` counter, the one to alarm on,
        /// sees someone else trading on the account).
        id: Option<ClientOrderId>,
        /// What the venue reported.
        what: Contradiction,
    },
    /// An execution the venue stated that the session could not apply to its order (it came
    /// after the order closed, past its quantity, or through its limit: a contradiction,
    /// reported just before this). The order table cannot take it, but the venue says shares
    /// moved: the dispatcher books it into the symbol's position (risk, reduce-only), the
    /// session into its own (and journals that figure with a `PositionBaseline`). A duplicate
    /// execution (an ExecID already applied) is not one: it moved nothing.
    UnmatchedExecution {
        /// What the venue stated.
        execution: Execution,
    },
    /// The session took the venue's figure as its position in `symbol` (it had no journaled
    /// figure of its own: the account traded before this journal began, or an operator
    /// settled a position mismatch): the dispatcher books it and journals it, so fills after
    /// it add to it and a restart compares against it.
    PositionBaseline {
        /// The symbol.
        symbol: super::SymbolId,
        /// The figure taken.
        position: super::Position,
    },
}

/// Bytes a venue protocol may persist in one [`ProtocolState`].
pub const PROTOCOL_STATE_MAX: usize = 24;

/// A venue protocol's own persisted state, opaque to the dispatcher and the journal: what the
/// protocol needs after a restart beyond what every protocol shares (orders and their wire
/// references, the venue sequence applied, positions). Written through the seam as one
/// checksummed journal record per change, tagged with the protocol that wrote it (its registry
/// tag) and its layout version, so a protocol refuses another's state or a layout it does not
/// know by name instead of misreading it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ProtocolState {
    /// The registry tag of the protocol that wrote it.
    pub protocol: u8,
    /// That protocol's layout version.
    pub version: u8,
    len: u8,
    bytes: [u8; PROTOCOL_STATE_MAX],
}

impl ProtocolState {
    /// `bytes` tagged; `None` when they are longer than [`PROTOCOL_STATE_MAX`].
    pub fn new(protocol: u8, version: u8, bytes: &[u8]) -> Option<Self> {
        if bytes.len() > PROTOCOL_STATE_MAX {
            return None;
        }
        let mut out = [0; PROTOCOL_STATE_MAX];
        out[..bytes.len()].copy_from_slice(bytes);
        Some(Self {
            protocol,
            version,
            len: bytes.len() as u8,
            bytes: out,
        })
    }

    /// The protocol's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for ProtocolState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ProtocolState {{ protocol: {}, version: {}, bytes: ",
            self.protocol, self.version
        )?;
        for b in self.bytes() {
            write!(f, "{b:02x}")?;
        }
        f.write_str(" }")
    }
}

/// What a venue session lets leave, as the dispatcher is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkMode {
    /// Not connected and reconciled: nothing leaves; new orders are refused `NotSynced`.
    Down,
    /// Connected but not trusted (a contradiction, or unsettled reconciliation): cancels and
    /// status queries leave, new orders and replaces are refused `LinkReadOnly`.
    ReadOnly,
    /// SYNCED: everything may leave.
    Trading,
}

/// An execution as a venue stated it, outside any order keel can apply it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Execution {
    /// The symbol.
    pub symbol: SymbolId,
    /// The side of the order it executed.
    pub side: Side,
    /// Shares executed.
    pub qty: Qty,
    /// Execution price.
    pub price: Price,
}

/// A venue report that cannot be true given what keel sent and was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Contradiction {
    /// A report (ack, fill, cancel) for an order this session never sent.
    UnknownOrder,
    /// Executions beyond the order's quantity.
    Overfill,
    /// An execution or acceptance for an order already closed (filled, canceled, rejected).
    AfterClose,
    /// An execution at a price the order could not trade at: not positive, or through its
    /// limit (a buy above it, a sell below it).
    ExecutionPrice,
    /// The venue's stream skipped sequence numbers: reports may have been lost.
    SequenceGap,
    /// A sequence number no venue can legally send (0, or a jump past any plausible day).
    ImpossibleSequence,
    /// A verdict (report or reconciliation answer) the engine's order table refused.
    TableRefused,
    /// An execution whose ExecID keel already applied, sent again without PossDupFlag: the
    /// venue reports one trade twice (never booked twice).
    DuplicateExecution,
}

impl std::fmt::Display for Contradiction {
    /// The names docs/operations.md ("When the venue contradicts keel") uses.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::UnknownOrder => "UnknownOrder",
            Self::Overfill => "Overfill",
            Self::AfterClose => "AfterClose",
            Self::ExecutionPrice => "ExecutionPrice",
            Self::SequenceGap => "SequenceGap",
            Self::ImpossibleSequence => "ImpossibleSequence",
            Self::TableRefused => "TableRefused",
            Self::DuplicateExecution => "DuplicateExecution",
        })
    }
}

/// An outcome from a venue session, stamped with when it was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The venue link.
    pub venue: VenueId,
    /// When the session received it (monotonic ns).
    pub received_ns: u64,
    /// Sequence number of the venue message it came from (0: not from a sequenced message,
    /// e.g. a timeout or a link state change). Journaled, so a restart resumes after it.
    pub seq: u64,
    /// What happened.
    pub kind: OutcomeKind,
}

/// What happened, as a strategy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Accepted by the venue.
    Accepted,
    /// Part filled; `leaves` remain open.
    PartiallyFilled {
        /// Quantity in this fill.
        qty: Qty,
        /// Fill price.
        price: Price,
        /// Open quantity left.
        leaves: Qty,
    },
    /// Completely filled.
    Filled {
        /// Quantity in this fill.
        qty: Qty,
        /// Fill price.
        price: Price,
    },
    /// Closed with nothing more to fill.
    Canceled,
    /// Replaced by `new_id`.
    Replaced {
        /// The replacement's id.
        new_id: ClientOrderId,
    },
    /// Rejected by the venue.
    Rejected {
        /// The venue's reason.
        reason: RejectReason,
    },
    /// A cancel was refused by the venue.
    CancelRejected {
        /// The venue's reason.
        reason: CancelRejectReason,
    },
    /// No answer in time: the order may be live or filled. keel is asking the venue; it will
    /// never resend. Treat the order as live until told otherwise.
    Unknown,
    /// Shed under overload (new-order lane above its high watermark, or manual shedding).
    Shed,
    /// Short of rate budget past the acquire deadline.
    Throttled,
    /// The venue link's breaker is open; try again no sooner than `retry_after_ns`.
    BreakerOpen {
        /// Nanoseconds until the breaker may admit probes.
        retry_after_ns: u64,
    },
    /// Refused by the engine itself.
    Refused {
        /// Why.
        reason: RefusalReason,
    },
}

/// An event for one strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The order concerned.
    pub id: ClientOrderId,
    /// What happened.
    pub kind: EventKind,
    /// When the dispatcher produced it (monotonic ns).
    pub at_ns: u64,
}

// Fixed-size messages keep ring slots small; growth here is a design change, so it is caught.
const _: () = assert!(std::mem::size_of::<Command>() <= 48);
const _: () = assert!(std::mem::size_of::<Event>() <= 48);
// An outcome carries its venue sequence number for the journal: 56 bytes, under a cache line.
const _: () = assert!(std::mem::size_of::<Outcome>() <= 56);
const _: () = assert!(std::mem::size_of::<VenueRequest>() <= 64);
