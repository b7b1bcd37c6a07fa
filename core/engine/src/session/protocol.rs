//! The venue-protocol seam: what a venue link asks of the protocol it speaks.
//!
//! A [`super::link::VenueLink`] owns everything every protocol shares — the session state
//! machine ([`super::machine`]), connect and reconnect with backoff, the reconciliation gate,
//! heartbeat timing, read-only on a contradiction, "unknown, never resend" — and asks its
//! protocol, through [`VenueProtocol`], only what differs between venues: how to log in, how a
//! heartbeat and a request look on the wire, how to cut and decode what the venue sends, when
//! a request has waited too long, and which orders were in flight when the link dropped.
//! The trait is statically dispatched: a link is generic over its protocol, and the engine's
//! links use [`super::registry::AnyProtocol`], an enum of every protocol keel speaks (one arm
//! each, declared in `registry.rs`).
//!
//! This file holds the trait and the types every protocol shares, and imports no protocol: a
//! protocol depends on it, never the other way round (docs/architecture.md, "How to add a venue
//! protocol").

use crate::config::section::{FileConfigError, Out, Section};
use crate::order::{
    ClientOrderId, Contradiction, NewOrder, Outcome, SymbolName, VenueId, VenueRequest,
};
pub use crate::order::{ProtocolState, PROTOCOL_STATE_MAX};
use crate::proto::{DecodeError, EncodeError};

/// One message cut from the bytes a venue sent, and what it meant for the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Bytes it took from the front of the receive buffer (the link consumes them).
    pub len: usize,
    /// What it meant for the session state.
    pub news: SessionNews,
}

/// What a venue link needs from the protocol it speaks. Every method is sans-IO: encoders
/// write into the link's scratch buffer and return the length; answers for the dispatcher are
/// handed to `emit`; nothing allocates after construction.
pub trait VenueProtocol {
    /// The protocol's own counters, beyond the [`ClientStats`] every protocol keeps (OUCH:
    /// stale Account Query answers). Reported at stop by name.
    type Stats: ProtocolStats;
    /// The login request, asking to resume after [`VenueProtocol::applied_through`]. (A
    /// protocol whose every message is numbered, FIX, takes a number here: `&mut`.)
    fn encode_login(&mut self, now_ns: u64, out: &mut [u8]) -> Result<usize, EncodeError>;
    /// A heartbeat.
    fn encode_heartbeat(&mut self, now_ns: u64, out: &mut [u8]) -> Result<usize, EncodeError>;
    /// The reconciliation query sent after login (and paced while read-only); the answer comes
    /// back as [`SessionNews::Reconciled`].
    fn encode_reconcile_query(&mut self, now_ns: u64, out: &mut [u8])
        -> Result<usize, EncodeError>;
    /// A message the protocol's session layer owes the venue now, written into `out` (FIX:
    /// a Heartbeat answering a TestRequest, a ResendRequest, a SequenceReset-GapFill, a
    /// session-level Reject, a Logout). The link asks after every message it decodes and
    /// every timer pass, and sends each until `None`. OUCH owes nothing.
    fn encode_session(&mut self, _now_ns: u64, _out: &mut [u8]) -> Option<usize> {
        None
    }
    /// keel is stopping gracefully: owe the venue the protocol's goodbye (FIX: a Logout, then
    /// the venue's Logout ends the session). `false`: the protocol has none to say (OUCH: the
    /// connection simply closes), or the session is not logged on.
    fn begin_logout(&mut self) -> bool {
        false
    }
    /// One dispatcher request on the wire (a request the wire cannot carry is an error the
    /// link answers to the dispatcher, never a silent drop).
    fn encode_request(
        &mut self,
        request: &VenueRequest,
        out: &mut [u8],
    ) -> Result<usize, RequestError>;
    /// Cuts and decodes the first message in `received` (at most `max_len` bytes long):
    /// `Ok(None)` until a whole message is there; malformed bytes are an error (the link
    /// closes the connection, counts it and reconnects).
    fn decode(
        &mut self,
        now_ns: u64,
        received: &[u8],
        max_len: u16,
        emit: &mut impl FnMut(Outcome),
    ) -> Result<Option<Message>, DecodeError>;
    /// Requests unanswered past their deadline become `Timeout` (the order is unknown).
    fn expire(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome));
    /// The connection dropped: every order sent and not answered is reported in doubt
    /// (`Timeout`), never failed and never resent. Returns how many.
    fn mark_in_flight_unknown(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) -> u64;
    /// An operator settled every contradiction: orders they concerned are in doubt again.
    /// Returns how many were cleared.
    fn clear_contradictions(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) -> u32;
    /// Journal restore, before the first login: resume the venue's stream after `seq`.
    fn resume_after(&mut self, seq: u64);
    /// Journal restore, before the first login: the protocol's own state, as it last emitted
    /// it (`OutcomeKind::ProtocolState`). A state of another protocol, or of a layout version
    /// this one does not read, is refused by name: the engine does not start on it.
    fn restore_state(&mut self, state: &ProtocolState) -> Result<(), StateError>;
    /// The venue began another session than the journal's (a new trading day, or a venue
    /// that lost its state) and the login was refused: both sessions' names. The engine's log
    /// says it once, with the command that resolves it.
    fn refused_resume(&self) -> Option<ResumeRefused>;
    /// Journal restore, before the first login: one open order and its wire reference.
    fn restore_order(
        &mut self,
        order: &NewOrder,
        wire_ref: u32,
        executed: u32,
        accepted: bool,
    ) -> Result<(), RequestError>;
    /// Journal restore, before the first login: keel's position in one symbol (what
    /// reconciliation compares with the venue's answer).
    fn restore_position(
        &mut self,
        symbol: crate::order::SymbolId,
        position: crate::order::Position,
    ) -> Result<(), RequestError>;
    /// The highest venue sequence number applied (what the journal persists).
    fn applied_through(&self) -> u64;
    /// Counters every protocol keeps.
    fn stats(&self) -> ClientStats;
    /// The protocol's own counters.
    fn protocol_stats(&self) -> Self::Stats;
}

/// A protocol's own counters, read by name (the stop report prints each `name=value`).
pub trait ProtocolStats: Copy + std::fmt::Debug {
    /// The protocol's name (`protocol = "..."`).
    fn protocol(&self) -> &'static str;
    /// Hands every counter to `f`, with the name reports use.
    fn each(&self, f: &mut dyn FnMut(&'static str, u64));
}

/// The outcome of comparing keel's view with the venue's reconciliation answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Orders keel thought open that the venue never received (reported as rejected).
    pub not_received: u32,
    /// Executions the venue reports that keel had not seen (reported as fills).
    pub missed_fills: u32,
    /// Open orders at the venue that keel does not know: cannot be resolved automatically.
    pub unknown_at_keel: u32,
    /// Orders keel has open that the venue does not list, after a sequence gap: they may have
    /// filled in the reports that were skipped, so each is queried, never assumed dead.
    pub in_doubt: u32,
    /// Orders and reports that contradicted keel's view and are not settled (sticky: an
    /// operator must look).
    pub contradictions: u32,
    /// Symbols whose position (shares bought, shares sold) keel booked otherwise than the
    /// venue reports: a fill one side saw and the other did not. Compared again at every
    /// reconciliation; settled by the venue and keel agreeing, or by an operator.
    pub position_mismatches: u32,
}

impl Reconciliation {
    /// Differences keel could not settle from the answer.
    pub fn unresolved(&self) -> u32 {
        self.unknown_at_keel + self.in_doubt + self.contradictions + self.position_mismatches
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Venue messages mapped to outcomes.
    pub mapped: u64,
    /// Venue messages naming an order reference (OUCH: UserRefNum) this session never sent.
    pub unknown_order_ref: u64,
    /// Broken trades reported (need an operator).
    pub broken_trades: u64,
    /// Venue messages with no outcome (system events, priority updates...).
    pub informational: u64,
    /// Sequenced messages received.
    pub sequenced: u64,
    /// Requests whose answer did not come within the ack timeout (reported Unknown).
    pub timeouts: u64,
    /// Status answers that changed keel's view (resolutions).
    pub resolutions: u64,
    /// Replayed reports already applied before a reconnect, skipped by sequence number.
    pub duplicates_skipped: u64,
    /// Times the venue's Account Query response said the account's next UserRefNum is above
    /// this session's (it traded before this journal began).
    pub wire_refs_adopted: u64,
    /// Logins refused because the venue began another session than the journal's (a new
    /// trading day, or a venue that lost its state): the link never trades on that journal.
    pub new_session_refused: u64,
    /// Reconciliations completed.
    pub reconciliations: u64,
    /// The last reconciliation's result.
    pub last_reconciliation: Reconciliation,
    /// Reports that contradicted this session's view (each made the link read-only).
    pub contradictions: u64,
    /// The most recent one.
    pub last_contradiction: Option<Contradiction>,
    /// Closed orders forgotten to make room in the map (oldest closed first).
    pub forgotten: u64,
    /// Execution reports that arrived after a status answer had already booked their shares
    /// (a report delayed behind the answer): absorbed, not booked twice.
    pub late_reports_absorbed: u64,
    /// New orders refused because the map was full of open orders.
    pub session_full: u64,
    /// Position items (symbols) that differed from the venue's at a reconciliation, summed
    /// over reconciliations (each made the link read-only).
    pub position_mismatches: u64,
    /// The first differing item of the latest reconciliation that had one: both figures.
    pub last_position_mismatch: Option<crate::order::PositionMismatch>,
    /// Times the session took the venue's positions as its own (no figure of its own yet, or
    /// an operator settled a mismatch).
    pub positions_adopted: u64,
    /// Executions the venue stated that keel could not apply to their order (after it
    /// closed, past its quantity, through its limit): each a contradiction, booked into the
    /// position all the same.
    pub unmatched_executions: u64,
    /// The latest of them, until an operator clears the contradictions.
    pub last_unmatched_execution: Option<crate::order::Execution>,
}

/// Why a request could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The order is not known to this session (never sent, or forgotten).
    #[error("no UserRefNum for order {0}")]
    UnknownOrder(ClientOrderId),
    /// The symbol id has no name.
    #[error("symbol id {0} not configured")]
    UnknownSymbol(u16),
    /// The dispatcher's wire reference is not above the last one this session used (the
    /// venue would reject it; UserRefNums must ascend).
    #[error("wire reference {got} is not above {last}")]
    StaleWireRef {
        /// The reference given.
        got: u32,
        /// The last one used.
        last: u32,
    },
    /// The account's wire references are used up (the venue said the next is 2^32 − 1, the
    /// last one OUCH can carry): no new order can be sent on this account.
    #[error("wire references exhausted: the venue expects {next} next")]
    WireRefsExhausted {
        /// The next reference the venue expects.
        next: u32,
    },
    /// The session's order map is full of open orders: a new one cannot be tracked.
    #[error("session order map full: {orders_max} open orders")]
    SessionFull {
        /// The configured capacity.
        orders_max: u32,
    },
    /// The request is for the link itself (a reconciliation), not for the wire.
    #[error("not a wire request")]
    NotWire,
    /// The encoder refused.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// What a server packet meant for the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionNews {
    /// Logged in; sequenced messages continue from `next_seq`.
    LoggedIn {
        /// Next sequence number.
        next_seq: u64,
    },
    /// The venue refused the login.
    LoginRejected,
    /// The venue ended the session.
    EndOfSession,
    /// A reconciliation answer was compared.
    Reconciled(Reconciliation),
    /// A report contradicted keel's view: the link must stop trusting itself.
    Contradicted(Contradiction),
    /// Nothing for the session state (data, heartbeat, debug).
    Nothing,
    /// Bytes that were not a good message, discarded (FIX: a garbled frame, resynced at the
    /// next BeginString): nothing for the session state, and no sign that the venue lives.
    Unreadable,
}

/// Why a protocol refuses the state a journal holds for its venue (the engine does not start:
/// the journal belongs to another protocol's link, or to a keel that wrote a newer layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The state was written by another protocol (its registry tag).
    #[error("the journal's state for this venue was written by protocol tag {found}, not {protocol} (tag {expected}): the venue's protocol changed; start on a new journal")]
    OtherProtocol {
        /// This link's protocol.
        protocol: &'static str,
        /// Its tag.
        expected: u8,
        /// The tag in the journal.
        found: u8,
    },
    /// A layout version this keel does not read.
    #[error(
        "the journal's {protocol} state has layout version {found}; this keel reads {supported}"
    )]
    Version {
        /// The protocol.
        protocol: &'static str,
        /// The version in the journal.
        found: u8,
        /// The version this keel reads.
        supported: u8,
    },
    /// The bytes do not hold what the layout says.
    #[error("the journal's {protocol} state is malformed: {what}")]
    Malformed {
        /// The protocol.
        protocol: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

/// Characters a [`SessionLabel`] keeps.
pub const SESSION_LABEL_MAX: usize = 16;

/// A venue session's name as the venue gave it (OUCH: SoupBinTCP's 10-character Session), for
/// the operator: printable ASCII, at most [`SESSION_LABEL_MAX`] bytes, fixed size.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionLabel {
    len: u8,
    bytes: [u8; SESSION_LABEL_MAX],
}

impl SessionLabel {
    /// `name` without trailing spaces, cut at [`SESSION_LABEL_MAX`] bytes; a byte that is not
    /// printable ASCII becomes `?` (a label goes into logs).
    pub fn new(name: &[u8]) -> Self {
        let mut end = name.len().min(SESSION_LABEL_MAX);
        while end > 0 && name[end - 1] == b' ' {
            end -= 1;
        }
        let mut bytes = [0; SESSION_LABEL_MAX];
        for (out, &b) in bytes.iter_mut().zip(&name[..end]) {
            *out = if b.is_ascii_graphic() || b == b' ' {
                b
            } else {
                b'?'
            };
        }
        Self {
            len: end as u8,
            bytes,
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only printable ASCII is stored.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("?")
    }
}

impl std::fmt::Debug for SessionLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for SessionLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A login refused because the venue began another session than the journal's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeRefused {
    /// The session the venue began.
    pub venue: SessionLabel,
    /// The session the journal's records belong to.
    pub journal: SessionLabel,
}

/// What the registry asks of a protocol to offer it by name (`protocol = "<name>"`): its own
/// settings, read from and written back to its `[[venue]]` table, how to build its client, the
/// memory that client takes, and its persisted state as text. The shared keys (address,
/// credentials, timeouts, session timing) are read once for every protocol.
pub trait RegisteredProtocol: VenueProtocol + Sized {
    /// The tag its persisted state carries (`ProtocolState::protocol`): unique in the
    /// registry (a test checks), never 0, never reused.
    const STATE_TAG: u8;
    /// Its own settings.
    type Settings: Clone + std::fmt::Debug + PartialEq + Eq;
    /// Reads its keys from the venue's table; a value out of range is refused with the key,
    /// the value and what is allowed.
    fn read_settings(s: &mut Section<'_>) -> Result<Self::Settings, FileConfigError>;
    /// Checks the shared login keys against what its wire can carry.
    fn check_login(s: &Section<'_>, username: &str, password: &str) -> Result<(), FileConfigError>;
    /// Writes its keys (what `read_settings` reads back to the same settings).
    fn write_settings(out: &mut Out, settings: &Self::Settings);
    /// Its client for one link.
    fn build(settings: &Self::Settings, link: &LinkSetup<'_>) -> Self;
    /// Bytes its client needs for `orders_max` orders (counted in the engine's memory need).
    fn memory_bytes(settings: &Self::Settings, orders_max: u32) -> u64;
    /// A journaled state as `keel journal dump` prints it.
    fn describe_state(state: &ProtocolState) -> String;
}

/// The shared settings of one link, as a protocol's client is built from them.
#[derive(Debug, Clone, Copy)]
pub struct LinkSetup<'a> {
    /// The venue.
    pub venue: VenueId,
    /// Login username.
    pub username: &'a str,
    /// Login password.
    pub password: &'a str,
    /// Orders whose wire reference the session keeps.
    pub orders_max: u32,
    /// A request unanswered this long makes its order Unknown.
    pub ack_timeout_ns: u64,
    /// The engine's symbols, in `SymbolId` order.
    pub symbols: &'a [SymbolName],
    /// The link's heartbeat interval (FIX announces it in its Logon).
    pub heartbeat_interval_ns: u64,
    /// The wall clock (Unix ns) at the loop clock's 0: for timestamps a protocol writes on
    /// the wire (FIX's SendingTime). Never drives a timeout.
    pub unix_ns_at_origin: u64,
}
