//! FIX 4.4 order entry behind the venue-protocol seam: the session layer (Logon, Heartbeat,
//! TestRequest, ResendRequest, SequenceReset, Reject, Logout; both sequence numbers, kept
//! across restarts through the protocol state), here; the application messages keel sends and
//! reads (NewOrderSingle, OrderCancelRequest, OrderCancelReplaceRequest, OrderStatusRequest,
//! OrderMassStatusRequest; ExecutionReport, OrderCancelReject, BusinessMessageReject), in
//! `orders.rs`; the configuration section in `config.rs`; the tag=value codec in `codec.rs`.
//!
//! What the shared link does for every protocol holds here too: the session state machine,
//! reconnect with backoff, the reconciliation gate, read-only on a contradiction, and "a
//! timeout means unknown: query, never resend". In FIX terms the last one is a rule of the
//! session layer: keel answers every ResendRequest with a SequenceReset-GapFill and never
//! sends an application message twice (an order resent late is a new risk; an order in doubt
//! is queried with OrderStatusRequest). docs/protocol.md, "FIX 4.4", lists every message.

pub mod codec;
mod config;
mod orders;
pub mod time;

#[cfg(test)]
mod tests;

use codec::{Encoder, FieldTable, FixError, Frame, Limits, Msg, ValueText};
pub use config::{FixReconcile, FixSettings};

use crate::config::section::{FileConfigError, Out, Section};
use crate::hash::FxHashMap;
use crate::order::{
    ClientOrderId, NewOrder, Outcome, OutcomeKind, Position, SymbolId, SymbolName, VenueId,
    VenueRequest,
};
use crate::proto::{DecodeError, EncodeError};
use crate::session::protocol::{
    ClientStats, LinkSetup, Message, ProtocolState, ProtocolStats, RegisteredProtocol,
    RequestError, ResumeRefused, SessionNews, StateError, VenueProtocol,
};

/// Outbound sequence numbers reserved in the journal at a time: a restart (even after a
/// kill -9) sends from the reserved bound, never a number already used. The venue sees a gap,
/// asks for it, and keel fills it (SequenceReset-GapFill). A new reservation is journaled when
/// half of one is used.
pub const OUT_SEQ_BLOCK: u64 = 1 << 16;
/// Session messages keel may owe the venue at once (answers to its TestRequests and
/// ResendRequests, a Reject, a Logout); more means the venue floods the session, which is
/// then ended.
const PENDING_MAX: usize = 8;
/// The protocol state's layout version.
const STATE_VERSION: u8 = 1;
/// ExecIDs of applied executions remembered, to know a report sent twice: a duplicate of an
/// older one than this is not recognised by its ExecID (its order's quantity still bounds it).
pub const EXEC_IDS_KEPT: usize = 8_192;

/// A session message keel owes the venue, written at the next flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// A Heartbeat answering a TestRequest (its TestReqID).
    Heartbeat(ValueText),
    /// A TestRequest of keel's (its number is the TestReqID).
    TestRequest(u64),
    /// A ResendRequest from `begin` to infinity.
    ResendRequest(u64),
    /// A SequenceReset-GapFill with MsgSeqNum `begin`, up to `end` (exclusive; 0: keel's next
    /// number when it is written).
    GapFill { begin: u64, end: u64 },
    /// The reconciliation query again, under a new request id: the venue asked for the one
    /// sent (a ResendRequest covering it) and keel filled it with a gap, so the venue never
    /// read it. A query may be asked twice; an order never is.
    ReconcileQuery,
    /// A session-level Reject of the venue's message `ref_seq`.
    Reject {
        ref_seq: u64,
        ref_tag: u32,
        ref_msg_type: ValueText,
        reason: u32,
        text: &'static str,
    },
    /// A Logout, with its reason.
    Logout(&'static str),
}

/// FIX's own counters (beyond the [`ClientStats`] every protocol keeps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixStats {
    /// Messages whose trailer or CheckSum was wrong: ignored, their number not taken.
    pub garbled: u64,
    /// Messages whose fields were not well formed: ignored.
    pub malformed: u64,
    /// Session-level Rejects keel sent (a message with a missing or bad field).
    pub rejects_sent: u64,
    /// Session-level Rejects the venue sent about keel's messages.
    pub rejects_received: u64,
    /// BusinessMessageRejects the venue sent.
    pub business_rejects: u64,
    /// ResendRequests keel sent (a sequence number above the one expected).
    pub resend_requests_sent: u64,
    /// ResendRequests the venue sent, each answered by a GapFill.
    pub resend_requests_received: u64,
    /// SequenceResets received (GapFill or Reset).
    pub sequence_resets: u64,
    /// Messages with a number below the one expected and no PossDupFlag: the session ended.
    pub seq_too_low: u64,
    /// Possible duplicates (PossDupFlag) already seen, skipped.
    pub poss_dup_skipped: u64,
    /// TestRequests keel sent after a silent heartbeat interval.
    pub test_requests_sent: u64,
    /// Logouts keel sent.
    pub logouts_sent: u64,
    /// Logouts the venue sent.
    pub logouts_received: u64,
    /// Messages of a type keel does not read, refused with a Reject.
    pub unsupported: u64,
    /// Status answers to a request this process did not issue (an earlier process's, resent
    /// after a restart, or an id keel never used): ignored, never taken as the answer.
    pub stale_answers: u64,
    /// Reconciliation queries asked again because a ResendRequest covered the one sent (the
    /// venue never read it).
    pub reconcile_queries_reissued: u64,
    /// Messages whose SendingTime (52) was missing the tolerance of keel's clock: rejected
    /// (SessionRejectReason 10), then the session ended.
    pub sending_time_rejects: u64,
    /// Executions whose ExecID keel had applied, sent again with PossDupFlag: skipped.
    pub duplicate_executions_skipped: u64,
}

impl ProtocolStats for FixStats {
    fn protocol(&self) -> &'static str {
        "fix44"
    }
    fn each(&self, f: &mut dyn FnMut(&'static str, u64)) {
        for (name, value) in [
            ("garbled", self.garbled),
            ("malformed", self.malformed),
            ("rejects_sent", self.rejects_sent),
            ("rejects_received", self.rejects_received),
            ("business_rejects", self.business_rejects),
            ("resend_requests_sent", self.resend_requests_sent),
            ("resend_requests_received", self.resend_requests_received),
            ("sequence_resets", self.sequence_resets),
            ("seq_too_low", self.seq_too_low),
            ("poss_dup_skipped", self.poss_dup_skipped),
            ("test_requests_sent", self.test_requests_sent),
            ("logouts_sent", self.logouts_sent),
            ("logouts_received", self.logouts_received),
            ("unsupported", self.unsupported),
            ("stale_answers", self.stale_answers),
            (
                "reconcile_queries_reissued",
                self.reconcile_queries_reissued,
            ),
            ("sending_time_rejects", self.sending_time_rejects),
            (
                "duplicate_executions_skipped",
                self.duplicate_executions_skipped,
            ),
        ] {
            f(name, value);
        }
    }
}

/// What this session knows of one of its orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FixOrder {
    id: ClientOrderId,
    /// Open quantity when sent (a replacement: its new open quantity).
    qty: u32,
    executed: u32,
    price: i64,
    buy: bool,
    symbol: SymbolId,
    accepted: bool,
    closed: bool,
    /// Cancel requests sent for it (each has its own ClOrdID `<ref>-<n>`).
    cancels: u16,
    /// A cancel request is unanswered: a status answer that finds the order open settles it
    /// as refused (not applied).
    cancel_pending: bool,
    awaiting_since_ns: Option<u64>,
    contradicted: bool,
    /// Shares booked from a status answer whose execution reports have not come yet.
    inferred: u32,
}

/// The FIX 4.4 initiator state of one venue link.
#[derive(Debug)]
pub struct FixClient {
    settings: FixSettings,
    venue: VenueId,
    username: String,
    password: String,
    symbols: Vec<SymbolName>,
    ack_timeout_ns: u64,
    heartbeat_interval_ns: u64,
    unix_ns_at_origin: u64,
    /// The parse table, lent out while one message is handled (`None` only then).
    table: Option<Box<FieldTable>>,
    /// The next MsgSeqNum keel sends.
    out_seq: u64,
    /// The journal's bound: a restart sends from here.
    out_reserved: u64,
    /// The next MsgSeqNum expected from the venue.
    in_seq: u64,
    logged_on: bool,
    /// keel's Logout is out: the venue's Logout ends the session.
    logout_sent: bool,
    /// A ResendRequest is out and the gap not yet filled (up to this number).
    resend_through: Option<u64>,
    /// The MsgSeqNum of this connection's Logon: a GapFill answering a ResendRequest that
    /// begins at or below it ends right after it, so it never skips what keel sent after the
    /// Logon (the reconciliation query the venue may hold until the gap is filled).
    logon_seq: u64,
    /// The MsgSeqNum of the reconciliation query being answered (0: none).
    reconcile_seq: u64,
    /// Request ids (MassStatusReqID, OrdStatusReqID, the replay barrier's TestReqID) are this
    /// base plus a count: the wall clock at the process's start in microseconds (16 digits,
    /// within the 18 FIX integers keel reads), so no two processes of one session issue the
    /// same id — an earlier process would have had to ask more than once a microsecond over
    /// its whole life — and an answer to an earlier process's request (resent after a
    /// restart) is known for what it is.
    request_id_base: u64,
    /// ExecIDs of the executions applied, the most recent [`EXEC_IDS_KEPT`] (fingerprints),
    /// and the order they came in (the oldest is forgotten first).
    exec_ids: crate::hash::FxHashSet<u64>,
    exec_order: std::collections::VecDeque<u64>,
    pending: [Option<Pending>; PENDING_MAX],
    /// TestRequests sent; the number of the one unanswered (0: none).
    test_requests: u64,
    test_request_out: u64,
    last_rx_ns: u64,
    /// A new reservation is to be journaled.
    state_due: bool,
    // Orders, by the wire reference their ClOrdID carries.
    by_ref: FxHashMap<u32, FixOrder>,
    by_id: FxHashMap<ClientOrderId, u32>,
    closed_refs: std::collections::VecDeque<u32>,
    deadlines: std::collections::VecDeque<(u64, u32)>,
    next_ref: u32,
    /// Status requests sent (OrdStatusReqID and MassStatusReqID are numbered together).
    status_requests: u64,
    /// The mass status request being answered (0: none), the venue's open orders listed so
    /// far in it, and the reports it announced.
    mass_status: u64,
    venue_open: Vec<u32>,
    venue_unknown_open: u32,
    orphan_contradictions: u32,
    positions: Vec<Position>,
    stats: ClientStats,
    fix_stats: FixStats,
}

impl FixClient {
    /// A client for one link.
    pub fn new(settings: FixSettings, link: &LinkSetup<'_>) -> Self {
        let cap = link.orders_max as usize * 2;
        Self {
            venue: link.venue,
            username: link.username.to_string(),
            password: link.password.to_string(),
            symbols: link.symbols.to_vec(),
            ack_timeout_ns: link.ack_timeout_ns,
            heartbeat_interval_ns: link.heartbeat_interval_ns,
            unix_ns_at_origin: link.unix_ns_at_origin,
            table: Some(Box::default()),
            out_seq: 1,
            out_reserved: 0,
            in_seq: 1,
            logged_on: false,
            logout_sent: false,
            resend_through: None,
            logon_seq: 0,
            reconcile_seq: 0,
            request_id_base: link.unix_ns_at_origin / 1_000,
            exec_ids: crate::hash::FxHashSet::with_capacity_and_hasher(
                EXEC_IDS_KEPT * 2,
                Default::default(),
            ),
            exec_order: std::collections::VecDeque::with_capacity(EXEC_IDS_KEPT),
            pending: [None; PENDING_MAX],
            test_requests: 0,
            test_request_out: 0,
            last_rx_ns: 0,
            state_due: true,
            by_ref: FxHashMap::with_capacity_and_hasher(cap, Default::default()),
            by_id: FxHashMap::with_capacity_and_hasher(cap, Default::default()),
            closed_refs: std::collections::VecDeque::with_capacity(link.orders_max as usize),
            deadlines: std::collections::VecDeque::with_capacity(cap),
            next_ref: 1,
            status_requests: 0,
            mass_status: 0,
            venue_open: Vec::with_capacity(link.orders_max as usize),
            venue_unknown_open: 0,
            orphan_contradictions: 0,
            positions: vec![Position::default(); link.symbols.len()],
            stats: ClientStats::default(),
            fix_stats: FixStats::default(),
            settings,
        }
    }

    /// The next MsgSeqNum keel sends.
    pub fn out_seq(&self) -> u64 {
        self.out_seq
    }

    /// The next MsgSeqNum keel expects.
    pub fn in_seq(&self) -> u64 {
        self.in_seq
    }

    /// Whether the venue accepted keel's Logon on this connection.
    pub fn logged_on(&self) -> bool {
        self.logged_on
    }

    /// The session's settings.
    pub fn settings(&self) -> &FixSettings {
        &self.settings
    }

    /// `now_ns` as the UTCTimestamp keel writes (SendingTime, TransactTime).
    fn stamp(&self, now_ns: u64) -> [u8; time::UTC_TIMESTAMP_LEN] {
        time::utc_timestamp(self.unix_ns_at_origin.saturating_add(now_ns))
    }

    /// The standard header (after MsgType) of a message numbered `seq`, sent at `stamp`.
    fn header(&self, e: &mut Encoder<'_>, stamp: &[u8], seq: u64) {
        e.bytes(49, self.settings.sender_comp_id.as_bytes())
            .bytes(56, self.settings.target_comp_id.as_bytes())
            .uint(34, seq)
            .bytes(52, stamp);
    }

    /// Starts a message of `msg_type` with the next sequence number (taken).
    fn begin<'a>(&mut self, out: &'a mut [u8], now_ns: u64, msg_type: &[u8]) -> Encoder<'a> {
        self.begin_stamped(out, now_ns, msg_type).0
    }

    /// [`Self::begin`], also returning its SendingTime (formatted once per message: an order's
    /// TransactTime is the same instant).
    fn begin_stamped<'a>(
        &mut self,
        out: &'a mut [u8],
        now_ns: u64,
        msg_type: &[u8],
    ) -> (Encoder<'a>, [u8; time::UTC_TIMESTAMP_LEN]) {
        let mut e = Encoder::new(out, msg_type);
        let stamp = self.stamp(now_ns);
        self.header(&mut e, &stamp, self.out_seq);
        self.out_seq += 1;
        if self.out_seq + OUT_SEQ_BLOCK / 2 > self.out_reserved {
            self.state_due = true;
        }
        (e, stamp)
    }

    /// HeartBtInt: the link's heartbeat interval in whole seconds (at least 1).
    fn heartbeat_secs(&self) -> u64 {
        self.heartbeat_interval_ns.div_ceil(1_000_000_000).max(1)
    }

    /// The Logon: a reset of both numbers with `reset_on_logon`, else a resume from keel's
    /// next outbound number.
    pub fn encode_login(&mut self, now_ns: u64, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.logged_on = false;
        self.logout_sent = false;
        self.resend_through = None;
        self.pending = [None; PENDING_MAX];
        self.test_request_out = 0;
        if self.settings.reset_on_logon {
            self.out_seq = 1;
            self.in_seq = 1;
            self.state_due = true;
        }
        self.logon_seq = self.out_seq;
        self.reconcile_seq = 0;
        let next_expected = self.in_seq;
        let mut e = self.begin(out, now_ns, b"A");
        e.uint(98, 0).uint(108, self.heartbeat_secs());
        if self.settings.reset_on_logon {
            e.flag(141, true);
        } else {
            // NextExpectedMsgSeqNum: a venue that lost its state learns the client has seen
            // its messages before (and refuses a resume it cannot honour, naming why).
            e.uint(789, next_expected);
        }
        e.bytes(553, self.username.as_bytes())
            .bytes(554, self.password.as_bytes());
        e.finish()
    }

    /// A Heartbeat.
    pub fn encode_heartbeat(&mut self, now_ns: u64, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.begin(out, now_ns, b"0").finish()
    }

    /// The reconciliation query: an OrderMassStatusRequest for every order
    /// (`reconcile = "mass-status"`), or a TestRequest whose Heartbeat marks the end of the
    /// venue's replay (`reconcile = "replay"`).
    pub fn encode_reconcile_query(
        &mut self,
        now_ns: u64,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        self.venue_open.clear();
        self.venue_unknown_open = 0;
        let id = self.next_request_id();
        self.mass_status = id;
        self.reconcile_seq = self.out_seq;
        match self.settings.reconcile {
            FixReconcile::MassStatus => {
                let mut e = self.begin(out, now_ns, b"AF");
                e.uint(584, id).uint(585, 7);
                e.finish()
            }
            FixReconcile::Replay => {
                let (text, n) = reconcile_test_req_id(id);
                let mut e = self.begin(out, now_ns, b"1");
                e.bytes(112, &text[..n]);
                e.finish()
            }
        }
    }

    /// A new request id (see `request_id_base`).
    fn next_request_id(&mut self) -> u64 {
        self.status_requests += 1;
        self.request_id_base.saturating_add(self.status_requests)
    }

    /// Whether this process issued request `id`.
    fn issued(&self, id: u64) -> bool {
        id > self.request_id_base && id - self.request_id_base <= self.status_requests
    }

    /// The next session message keel owes the venue, if any.
    pub fn encode_session(&mut self, now_ns: u64, out: &mut [u8]) -> Option<usize> {
        let slot = self.pending.iter().position(Option::is_some)?;
        let pending = self.pending[slot].take()?;
        let written = match pending {
            Pending::Heartbeat(id) => {
                let mut e = self.begin(out, now_ns, b"0");
                e.bytes(112, id.as_str().as_bytes());
                e.finish()
            }
            Pending::TestRequest(n) => {
                let mut text = [0u8; 20];
                let len = codec::write_uint(&mut text, n);
                let mut e = self.begin(out, now_ns, b"1");
                e.bytes(112, &text[..len]);
                e.finish()
            }
            Pending::ResendRequest(begin) => {
                let mut e = self.begin(out, now_ns, b"2");
                e.uint(7, begin).uint(16, 0);
                e.finish()
            }
            Pending::GapFill { begin, end } => {
                // Sent with the first number asked for, as a possible duplicate; it moves the
                // venue's expectation to the end of the range and takes no number itself.
                let end = if end == 0 { self.out_seq } else { end };
                let mut e = Encoder::new(out, b"4");
                let stamp = self.stamp(now_ns);
                self.header(&mut e, &stamp, begin);
                e.flag(43, true)
                    .bytes(122, &stamp)
                    .flag(123, true)
                    .uint(36, end);
                e.finish()
            }
            Pending::ReconcileQuery => {
                self.fix_stats.reconcile_queries_reissued += 1;
                self.encode_reconcile_query(now_ns, out)
            }
            Pending::Reject {
                ref_seq,
                ref_tag,
                ref_msg_type,
                reason,
                text,
            } => {
                self.fix_stats.rejects_sent += 1;
                let mut e = self.begin(out, now_ns, b"3");
                e.uint(45, ref_seq);
                if ref_tag != 0 {
                    e.uint(371, u64::from(ref_tag));
                }
                e.bytes(372, ref_msg_type.as_str().as_bytes())
                    .uint(373, u64::from(reason))
                    .bytes(58, text.as_bytes());
                e.finish()
            }
            Pending::Logout(text) => {
                self.fix_stats.logouts_sent += 1;
                self.logout_sent = true;
                let mut e = self.begin(out, now_ns, b"5");
                e.bytes(58, text.as_bytes());
                e.finish()
            }
        };
        // Session messages are small and the link's scratch buffer holds any of them.
        written.ok()
    }

    /// Queues a session message; `false` when the queue is full (the session is ended).
    fn owe(&mut self, message: Pending) -> bool {
        match self.pending.iter_mut().find(|p| p.is_none()) {
            Some(slot) => {
                *slot = Some(message);
                true
            }
            None => false,
        }
    }

    /// The protocol state the journal keeps: the outbound bound, the inbound number expected
    /// and the CompIDs' fingerprint.
    fn state(&self) -> ProtocolState {
        let mut bytes = [0u8; 20];
        bytes[..8].copy_from_slice(&self.out_reserved.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.in_seq.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.settings.fingerprint().to_le_bytes());
        ProtocolState::new(Self::STATE_TAG, STATE_VERSION, &bytes).expect("20 bytes fit")
    }

    /// Journals a new outbound reservation when one is due.
    fn reserve(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) {
        if !self.state_due {
            return;
        }
        self.state_due = false;
        self.out_reserved = self.out_seq + OUT_SEQ_BLOCK;
        emit(Outcome {
            venue: self.venue,
            received_ns: now_ns,
            seq: 0,
            kind: OutcomeKind::ProtocolState {
                state: self.state(),
            },
        });
    }

    /// Restores the journal's state: keel sends from the reserved bound and expects the
    /// venue's next number; a state of other CompIDs is refused.
    pub fn restore_state(&mut self, state: &ProtocolState) -> Result<(), StateError> {
        if state.protocol != Self::STATE_TAG {
            return Err(StateError::OtherProtocol {
                protocol: "fix44",
                expected: Self::STATE_TAG,
                found: state.protocol,
            });
        }
        if state.version != STATE_VERSION {
            return Err(StateError::Version {
                protocol: "fix44",
                found: state.version,
                supported: STATE_VERSION,
            });
        }
        let b = state.bytes();
        if b.len() != 20 {
            return Err(StateError::Malformed {
                protocol: "fix44",
                what: "a state of other than 20 bytes",
            });
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let fingerprint = u32::from_le_bytes(b[16..20].try_into().expect("4 bytes"));
        let (reserved, in_seq) = (word(0), word(8));
        if reserved == 0 || in_seq == 0 || reserved > u64::MAX / 2 || in_seq > u64::MAX / 2 {
            return Err(StateError::Malformed {
                protocol: "fix44",
                what: "a sequence number of 0 or beyond 2^63",
            });
        }
        if fingerprint != self.settings.fingerprint() {
            return Err(StateError::Malformed {
                protocol: "fix44",
                what: "the journal's session has other CompIDs than this venue's configuration",
            });
        }
        self.out_seq = reserved;
        self.out_reserved = reserved;
        self.in_seq = self.in_seq.max(in_seq);
        self.state_due = true;
        Ok(())
    }

    /// Journal restore: the venue's stream is applied through `seq`.
    pub fn resume_after(&mut self, seq: u64) {
        if seq > 0 && seq < u64::MAX / 2 {
            self.in_seq = self.in_seq.max(seq + 1);
        }
    }

    /// Cuts and handles the first message in `received`.
    pub fn decode(
        &mut self,
        now_ns: u64,
        received: &[u8],
        max_len: u16,
        emit: &mut impl FnMut(Outcome),
    ) -> Result<Option<Message>, DecodeError> {
        let limits = Limits {
            message_max: self
                .settings
                .limits
                .message_max
                .min(u32::from(max_len).max(64)),
            ..self.settings.limits
        };
        let len = match codec::frame(received, &limits) {
            Frame::Incomplete => return Ok(None),
            Frame::Garbled { len, .. } => {
                // Discarded up to where the next message may begin; not a sign of life.
                self.fix_stats.garbled += 1;
                return Ok(Some(Message {
                    len,
                    news: SessionNews::Unreadable,
                }));
            }
            Frame::Whole { len } => len,
        };
        self.last_rx_ns = now_ns;
        // Lent out (no allocation) so the message can borrow it while the session changes.
        let Some(mut table) = self.table.take() else {
            // Not reached: decode is not re-entered while a message is handled.
            return Err(DecodeError::BadField {
                field: "FIX parse table (in use)",
                value: 0,
            });
        };
        let news = match table.parse(&received[..len], &self.settings.limits) {
            Ok(msg) => self.on_message(now_ns, &msg, emit),
            Err(_) => {
                // A message whose CheckSum holds but whose fields are not tag=value: its
                // number cannot be trusted, so it is ignored like a garbled one.
                self.fix_stats.malformed += 1;
                Ok(SessionNews::Nothing)
            }
        };
        self.table = Some(table);
        self.reserve(now_ns, emit);
        let news = news?;
        Ok(Some(Message { len, news }))
    }

    /// One well-formed message: header checks, sequence, then its type.
    fn on_message(
        &mut self,
        now_ns: u64,
        msg: &Msg<'_>,
        emit: &mut impl FnMut(Outcome),
    ) -> Result<SessionNews, DecodeError> {
        let msg_type = msg.msg_type();
        let comp_ok = msg.get(49) == Some(self.settings.target_comp_id.as_bytes())
            && msg.get(56) == Some(self.settings.sender_comp_id.as_bytes());
        let seq = match msg.require_uint(34) {
            Ok(seq) if seq > 0 => seq,
            _ => return Ok(self.end("MsgSeqNum (34) missing or not a positive number")),
        };
        if !comp_ok {
            self.owe(Pending::Reject {
                ref_seq: seq,
                ref_tag: if msg.get(49) == Some(self.settings.target_comp_id.as_bytes()) {
                    56
                } else {
                    49
                },
                ref_msg_type: ValueText::new(msg_type),
                reason: 9,
                text: "CompID problem",
            });
            return Ok(self.end("CompID problem"));
        }
        if !self.logged_on && msg_type != b"A" && msg_type != b"5" {
            return Ok(self.end("first message not a Logon"));
        }
        let poss_dup = msg.flag(43).unwrap_or(false);
        if msg_type == b"4" && !msg.flag(123).unwrap_or(false) {
            // SequenceReset-Reset: the number is ignored.
            return Ok(self.on_sequence_reset(msg, seq, false));
        }
        if msg_type == b"A" {
            if self.sending_time_off(now_ns, msg) {
                return Ok(self.refuse_sending_time(msg, seq));
            }
            return self.on_logon(msg, seq);
        }
        if seq < self.in_seq {
            if poss_dup {
                self.fix_stats.poss_dup_skipped += 1;
                self.stats.duplicates_skipped += 1;
                return Ok(SessionNews::Nothing);
            }
            self.fix_stats.seq_too_low += 1;
            return Ok(self.end("MsgSeqNum too low"));
        }
        if seq > self.in_seq {
            if msg_type == b"5" {
                self.fix_stats.logouts_received += 1;
                return Ok(SessionNews::EndOfSession);
            }
            self.ask_resend(seq);
            if msg_type == b"2" {
                // Answer the venue's own ResendRequest even while keel's is out.
                self.on_resend_request(msg, seq);
            }
            return Ok(SessionNews::Nothing);
        }
        // In sequence. A header without SendingTime, or a possible duplicate without
        // OrigSendingTime, is refused (its number taken), never handled.
        let missing = if msg.get(52).is_none() {
            Some((52, "SendingTime (52) missing"))
        } else if poss_dup && msg.get(122).is_none() {
            Some((122, "OrigSendingTime (122) missing on a possible duplicate"))
        } else {
            None
        };
        if let Some((tag, text)) = missing {
            self.in_seq = seq + 1;
            self.gap_filled_through();
            self.reject(msg, seq, tag, 1, text);
            return Ok(SessionNews::Nothing);
        }
        if self.sending_time_off(now_ns, msg) {
            self.in_seq = seq + 1;
            self.gap_filled_through();
            return Ok(self.refuse_sending_time(msg, seq));
        }
        if msg_type == b"4" {
            return Ok(self.on_sequence_reset(msg, seq, true));
        }
        self.in_seq = seq + 1;
        self.gap_filled_through();
        self.stats.sequenced += 1;
        Ok(match msg_type {
            b"0" => self.on_heartbeat(msg),
            b"1" => {
                match msg.get(112) {
                    Some(id) => {
                        if !self.owe(Pending::Heartbeat(ValueText::new(id))) {
                            return Ok(self.end("too many session messages owed"));
                        }
                    }
                    None => self.reject(msg, seq, 112, 1, "TestReqID (112) missing"),
                }
                SessionNews::Nothing
            }
            b"2" => {
                self.on_resend_request(msg, seq);
                SessionNews::Nothing
            }
            b"3" => {
                self.fix_stats.rejects_received += 1;
                SessionNews::Nothing
            }
            b"5" => {
                self.fix_stats.logouts_received += 1;
                if !self.logout_sent {
                    self.owe(Pending::Logout("logout acknowledged"));
                }
                SessionNews::EndOfSession
            }
            b"8" | b"9" | b"j" => self.on_application(now_ns, msg, seq, emit),
            _ => {
                self.fix_stats.unsupported += 1;
                self.reject(msg, seq, 35, 11, "MsgType not supported");
                SessionNews::Nothing
            }
        })
    }

    /// Whether the message's SendingTime is unreadable or farther from keel's clock than the
    /// tolerance (`sending_time_tolerance_s`; 0: never).
    fn sending_time_off(&self, now_ns: u64, msg: &Msg<'_>) -> bool {
        let tolerance_ns = u64::from(self.settings.sending_time_tolerance_s) * 1_000_000_000;
        if tolerance_ns == 0 {
            return false;
        }
        let now_unix = self.unix_ns_at_origin.saturating_add(now_ns);
        match msg.get(52).and_then(time::parse_utc_timestamp) {
            Some(sent) => sent.abs_diff(now_unix) > tolerance_ns,
            None => true,
        }
    }

    /// A SendingTime keel cannot accept: a Reject (SessionRejectReason 10, "SendingTime
    /// accuracy problem"), then a Logout: a stream stamped that far from now is stale or
    /// replayed, or one of the two clocks is wrong, and neither is traded on.
    fn refuse_sending_time(&mut self, msg: &Msg<'_>, seq: u64) -> SessionNews {
        self.fix_stats.sending_time_rejects += 1;
        self.reject(msg, seq, 52, 10, "SendingTime accuracy problem");
        self.end("SendingTime accuracy problem")
    }

    /// The venue's Logon: heartbeat interval checked, a reset applied, then a gap asked for.
    fn on_logon(&mut self, msg: &Msg<'_>, seq: u64) -> Result<SessionNews, DecodeError> {
        if self.logged_on {
            return Ok(self.end("a second Logon in one session"));
        }
        match msg.uint(108) {
            Ok(Some(secs)) if secs == self.heartbeat_secs() => {}
            _ => return Ok(self.end("HeartBtInt (108) not the one keel asked for")),
        }
        let reset = msg.flag(141).unwrap_or(false);
        if reset {
            if !self.settings.reset_on_logon || seq != 1 {
                return Ok(self.end("the venue reset the sequence numbers keel did not"));
            }
            self.in_seq = 1;
        } else if self.settings.reset_on_logon {
            return Ok(self.end("the venue did not confirm ResetSeqNumFlag"));
        }
        self.logged_on = true;
        if seq < self.in_seq {
            self.fix_stats.seq_too_low += 1;
            return Ok(self.end("MsgSeqNum too low"));
        }
        if seq > self.in_seq {
            self.ask_resend(seq);
        } else {
            self.in_seq = seq + 1;
        }
        self.stats.sequenced += 1;
        Ok(SessionNews::LoggedIn {
            next_seq: self.in_seq,
        })
    }

    /// A gap up to `seq`: ask once for everything from the number expected; while that
    /// request is out, a later number only widens the gap it must fill.
    fn ask_resend(&mut self, seq: u64) {
        match self.resend_through {
            Some(through) => self.resend_through = Some(through.max(seq)),
            None => {
                self.resend_through = Some(seq);
                self.fix_stats.resend_requests_sent += 1;
                if !self.owe(Pending::ResendRequest(self.in_seq)) {
                    self.end("too many session messages owed");
                }
            }
        }
    }

    /// The venue asks for keel's messages from BeginSeqNo: every one is filled with a gap
    /// (keel never sends an application message twice).
    fn on_resend_request(&mut self, msg: &Msg<'_>, seq: u64) {
        self.fix_stats.resend_requests_received += 1;
        let begin = match msg.require_uint(7) {
            Ok(b) if b >= 1 && b < self.out_seq => b,
            Ok(_) => return self.reject(msg, seq, 7, 5, "BeginSeqNo (7) not a number keel sent"),
            Err(_) => return self.reject(msg, seq, 7, 1, "BeginSeqNo (7) missing or bad"),
        };
        let asked_end = match msg.require_uint(16) {
            Ok(end) if end == 0 || end >= begin => end,
            _ => return self.reject(msg, seq, 16, 5, "EndSeqNo (16) below BeginSeqNo"),
        };
        // What the venue asks for up to the Logon is filled up to just after it; what keel
        // sent after the Logon the venue may hold until that gap is filled, so the fill never
        // skips it. Asked for again (the venue dropped it), it is filled too: an order is
        // never sent twice (it times out and is queried), the reconciliation query is asked
        // again under a new id.
        let mut end = if begin <= self.logon_seq && self.logon_seq < self.out_seq {
            self.logon_seq + 1
        } else {
            0
        };
        if asked_end != 0 {
            let through = asked_end.saturating_add(1).min(self.out_seq);
            end = if end == 0 { through } else { end.min(through) };
        }
        let fill_end = if end == 0 { self.out_seq } else { end };
        let query_lost =
            self.mass_status != 0 && self.reconcile_seq >= begin && self.reconcile_seq < fill_end;
        if !self.owe(Pending::GapFill { begin, end }) {
            self.end("too many session messages owed");
            return;
        }
        if query_lost {
            self.reconcile_seq = 0;
            if !self.owe(Pending::ReconcileQuery) {
                self.end("too many session messages owed");
            }
        }
    }

    /// SequenceReset: GapFill (`gap_fill`, in sequence) or Reset (any number).
    fn on_sequence_reset(&mut self, msg: &Msg<'_>, seq: u64, gap_fill: bool) -> SessionNews {
        self.fix_stats.sequence_resets += 1;
        let new_seq = match msg.require_uint(36) {
            Ok(n) if n < u64::MAX / 2 => n,
            _ => {
                self.reject(msg, seq, 36, 5, "NewSeqNo (36) missing or bad");
                if gap_fill {
                    self.in_seq = seq + 1;
                }
                return SessionNews::Nothing;
            }
        };
        if new_seq <= self.in_seq && (gap_fill || new_seq < self.in_seq) {
            self.reject(
                msg,
                seq,
                36,
                5,
                "NewSeqNo (36) does not move the sequence forward",
            );
            if gap_fill {
                self.in_seq = seq + 1;
            }
            return SessionNews::Nothing;
        }
        self.in_seq = new_seq;
        self.gap_filled_through();
        SessionNews::Nothing
    }

    /// The gap keel asked for is filled once the expected number passes its end.
    fn gap_filled_through(&mut self) {
        if self
            .resend_through
            .is_some_and(|through| self.in_seq > through)
        {
            self.resend_through = None;
        }
    }

    fn on_heartbeat(&mut self, msg: &Msg<'_>) -> SessionNews {
        let Some(id) = msg.get(112) else {
            return SessionNews::Nothing;
        };
        if self.test_request_out != 0 {
            let mut text = [0u8; 20];
            let len = codec::write_uint(&mut text, self.test_request_out);
            if id == &text[..len] {
                self.test_request_out = 0;
            }
        }
        let (barrier, n) = reconcile_test_req_id(self.mass_status);
        if self.settings.reconcile == FixReconcile::Replay
            && self.mass_status != 0
            && id == &barrier[..n]
        {
            // Everything the venue replayed came before this Heartbeat.
            self.mass_status = 0;
            return SessionNews::Reconciled(self.reconcile(&mut |_| {}));
        }
        SessionNews::Nothing
    }

    /// A session-level Reject of the venue's message `seq` (its number is taken).
    fn reject(&mut self, msg: &Msg<'_>, seq: u64, tag: u32, reason: u32, text: &'static str) {
        let owed = self.owe(Pending::Reject {
            ref_seq: seq,
            ref_tag: tag,
            ref_msg_type: ValueText::new(msg.msg_type()),
            reason,
            text,
        });
        if !owed {
            self.end("too many session messages owed");
        }
    }

    /// Ends the session: a Logout with `why` (if the queue has room), then the connection
    /// closes and the link reconnects with backoff.
    fn end(&mut self, why: &'static str) -> SessionNews {
        if !self.logout_sent {
            let _ = self.owe(Pending::Logout(why));
        }
        SessionNews::EndOfSession
    }

    /// Timers: overdue requests become Unknown; a silent interval sends a TestRequest.
    pub fn expire(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) {
        self.expire_orders(now_ns, emit);
        let silent = now_ns.saturating_sub(self.last_rx_ns);
        if self.logged_on
            && self.test_request_out == 0
            && silent
                > self
                    .heartbeat_interval_ns
                    .saturating_add(self.heartbeat_interval_ns / 5)
        {
            self.test_requests += 1;
            self.test_request_out = self.test_requests;
            if self.owe(Pending::TestRequest(self.test_requests)) {
                self.fix_stats.test_requests_sent += 1;
            }
        }
        self.reserve(now_ns, emit);
    }

    /// Counters every protocol keeps.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// FIX's own counters.
    pub fn fix_stats(&self) -> FixStats {
        self.fix_stats
    }

    /// The highest venue number applied.
    pub fn applied_through(&self) -> u64 {
        self.in_seq.saturating_sub(1)
    }

    /// Journal restore: keel's position in one symbol.
    pub fn restore_position(
        &mut self,
        symbol: SymbolId,
        position: Position,
    ) -> Result<(), RequestError> {
        let slot = self
            .positions
            .get_mut(usize::from(symbol.0))
            .ok_or(RequestError::UnknownSymbol(symbol.0))?;
        *slot = position;
        Ok(())
    }

    /// keel's position in `symbol`, from the fills this session reported.
    pub fn position(&self, symbol: SymbolId) -> Position {
        self.positions
            .get(usize::from(symbol.0))
            .copied()
            .unwrap_or_default()
    }
}

/// The TestReqID of the replay barrier with request id `n`, and its length.
fn reconcile_test_req_id(n: u64) -> ([u8; 36], usize) {
    const PREFIX: &[u8] = b"keel-reconcile-";
    let mut id = [0u8; 36];
    id[..PREFIX.len()].copy_from_slice(PREFIX);
    let len = PREFIX.len() + codec::write_uint(&mut id[PREFIX.len()..], n);
    (id, len)
}

impl RegisteredProtocol for FixClient {
    const STATE_TAG: u8 = 2;
    type Settings = FixSettings;
    fn read_settings(s: &mut Section<'_>) -> Result<FixSettings, FileConfigError> {
        config::read(s)
    }
    fn check_login(s: &Section<'_>, username: &str, password: &str) -> Result<(), FileConfigError> {
        config::check_login(s, username, password)
    }
    fn write_settings(out: &mut Out, settings: &FixSettings) {
        config::write(out, settings);
    }
    fn build(settings: &FixSettings, link: &LinkSetup<'_>) -> Self {
        Self::new(settings.clone(), link)
    }
    /// Bytes [`FixClient::new`] allocates for `orders_max`: both maps at twice the bound with
    /// their control bytes, the deadline and close queues, the reconciliation list, the
    /// remembered ExecIDs, the field table.
    fn memory_bytes(_: &FixSettings, orders_max: u32) -> u64 {
        let cap = u64::from(orders_max) * 2;
        let buckets = (cap * 8 / 7).next_power_of_two();
        let by_ref = std::mem::size_of::<(u32, FixOrder)>() as u64 + 1;
        let by_id = std::mem::size_of::<(ClientOrderId, u32)>() as u64 + 1;
        let exec_buckets = (EXEC_IDS_KEPT as u64 * 2 * 8 / 7).next_power_of_two();
        buckets * (by_ref + by_id)
            + cap * 16
            + u64::from(orders_max) * (4 + 4)
            + exec_buckets * (8 + 1)
            + EXEC_IDS_KEPT as u64 * 8
            + std::mem::size_of::<FieldTable>() as u64
    }
    fn describe_state(state: &ProtocolState) -> String {
        let b = state.bytes();
        if state.version != STATE_VERSION || b.len() != 20 {
            return format!("fix44 state of unknown layout (version {})", state.version);
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        format!(
            "fix44 outbound reserved through {} (a restart sends from it), inbound next {}, CompIDs {:08x}",
            word(0),
            word(8),
            u32::from_le_bytes(b[16..20].try_into().expect("4 bytes"))
        )
    }
}

impl VenueProtocol for FixClient {
    type Stats = FixStats;
    fn protocol_stats(&self) -> FixStats {
        self.fix_stats
    }
    fn encode_login(&mut self, now_ns: u64, out: &mut [u8]) -> Result<usize, EncodeError> {
        FixClient::encode_login(self, now_ns, out)
    }
    fn encode_heartbeat(&mut self, now_ns: u64, out: &mut [u8]) -> Result<usize, EncodeError> {
        FixClient::encode_heartbeat(self, now_ns, out)
    }
    fn encode_reconcile_query(
        &mut self,
        now_ns: u64,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        FixClient::encode_reconcile_query(self, now_ns, out)
    }
    fn encode_session(&mut self, now_ns: u64, out: &mut [u8]) -> Option<usize> {
        FixClient::encode_session(self, now_ns, out)
    }
    fn begin_logout(&mut self) -> bool {
        self.logged_on && !self.logout_sent && self.owe(Pending::Logout("keel is stopping"))
    }
    fn encode_request(
        &mut self,
        request: &VenueRequest,
        out: &mut [u8],
    ) -> Result<usize, RequestError> {
        FixClient::encode_request(self, request, out)
    }
    fn decode(
        &mut self,
        now_ns: u64,
        received: &[u8],
        max_len: u16,
        emit: &mut impl FnMut(Outcome),
    ) -> Result<Option<Message>, DecodeError> {
        FixClient::decode(self, now_ns, received, max_len, emit)
    }
    fn expire(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) {
        FixClient::expire(self, now_ns, emit)
    }
    fn mark_in_flight_unknown(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) -> u64 {
        self.logged_on = false;
        FixClient::mark_in_flight_unknown(self, now_ns, emit)
    }
    fn clear_contradictions(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) -> u32 {
        FixClient::clear_contradictions(self, now_ns, emit)
    }
    fn resume_after(&mut self, seq: u64) {
        FixClient::resume_after(self, seq)
    }
    fn restore_state(&mut self, state: &ProtocolState) -> Result<(), StateError> {
        FixClient::restore_state(self, state)
    }
    fn refused_resume(&self) -> Option<ResumeRefused> {
        None
    }
    fn restore_order(
        &mut self,
        order: &NewOrder,
        wire_ref: u32,
        executed: u32,
        accepted: bool,
    ) -> Result<(), RequestError> {
        FixClient::restore_order(self, order, wire_ref, executed, accepted)
    }
    fn restore_position(
        &mut self,
        symbol: SymbolId,
        position: Position,
    ) -> Result<(), RequestError> {
        FixClient::restore_position(self, symbol, position)
    }
    fn applied_through(&self) -> u64 {
        FixClient::applied_through(self)
    }
    fn stats(&self) -> ClientStats {
        self.stats
    }
}
