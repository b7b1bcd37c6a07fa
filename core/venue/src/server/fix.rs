//! Order entry over FIX 4.4 (`keel venue --fix-listen`): an acceptor on the same exchange,
//! books, faults and control port as the OUCH sessions. Each FIX session (a SenderCompID) has
//! an account of its own; what it sends becomes the exchange's OUCH messages, and its account's
//! sequenced stream comes back as FIX ExecutionReports, OrderCancelRejects and
//! BusinessMessageRejects, in stream order, so the report-delay and lie faults reach FIX too.
//!
//! Session layer, per SenderCompID, kept all day across connections:
//!
//! | state | message in | answer | state after |
//! | --- | --- | --- | --- |
//! | connected | Logon, password, CompIDs and HeartBtInt (1..=3600) good | Logon (ResetSeqNumFlag echoed) | logged on |
//! | connected | anything else, or a bad Logon | Logout with the reason | closed |
//! | logged on | MsgSeqNum as expected | handled | logged on |
//! | logged on | MsgSeqNum above expected | ResendRequest (once per gap, and again when a GapFill stopped short of the highest number seen and the next message is still above the expected one); only ResendRequest, Logout and SequenceReset-Reset are acted on | logged on |
//! | logged on | MsgSeqNum below expected, PossDupFlag Y | ignored (counted) | logged on |
//! | logged on | MsgSeqNum below expected, no PossDupFlag | Logout naming both numbers | closed |
//! | logged on | ResendRequest | application messages again (PossDupFlag Y, OrigSendingTime), session messages as SequenceReset-GapFill | logged on |
//! | any | garbled (CheckSum, trailer, BodyLength unreadable or too long, no BeginString) | discarded up to the next `8=FIX.4.4` (counted), the number not taken | as before |
//! | logged on | fields unreadable, the number the expected one | Reject, the number taken | logged on |
//! | logged on | silent for HeartBtInt + 20% | TestRequest | logged on |
//! | logged on | silent for twice HeartBtInt + 20% | Logout | closed |
//! | logged on | Logout | Logout | closed |
//!
//! Application messages: NewOrderSingle (limit orders, Day or IOC), OrderCancelRequest,
//! OrderCancelReplaceRequest (OrderQty the chain's total, as FIX has it), OrderStatusRequest and
//! OrderMassStatusRequest; any other type is answered with a BusinessMessageReject.
//! OrdRejReason codes are keel's (`keel_table` in the engine: 100 throttled, 101 system).

use super::*;
use keel::order::SYMBOL_NAME_LEN;
use keel::proto::ouch::{
    decode_outbound, encode_inbound, EnterOrder, Inbound, OrderFields, OrderStatus, Outbound,
    ReplaceOrder,
};
use keel::session::fix::codec::{self, Encoder, FieldTable, FixError, Frame, Limits, Msg};
use keel::session::fix::time::{utc_timestamp, UTC_TIMESTAMP_LEN};

/// The longest ClOrdID the venue keeps, bytes: a longer one is refused.
pub const CL_ORD_ID_MAX: usize = 32;

/// The widest HeartBtInt a Logon may ask for, seconds.
pub const HEARTBEAT_MAX_S: u64 = 3_600;

/// The FIX endpoint's settings.
#[derive(Debug, Clone)]
pub struct FixConfig {
    /// Listen address (`--fix-listen`).
    pub listen: SocketAddr,
    /// The venue's CompID: tag 56 on what it is sent, 49 on what it sends (`--fix-comp-id`).
    pub comp_id: String,
    /// Connections at once (logged on or not); more are accepted and closed.
    pub conns_max: u32,
    /// Sessions (SenderCompIDs, each with an account) the venue keeps in a day; a Logon for
    /// a new one past it is refused.
    pub sessions_max: u32,
    /// The codec's bounds on what sessions send.
    pub limits: Limits,
    /// Bytes of sent application messages a session keeps for resends; a session that would
    /// pass it is logged out (the venue never gap-fills an application message).
    pub store_bytes_max: usize,
    /// The wall clock (Unix ns) at the venue clock's 0, for SendingTime; `None`: read from the
    /// system clock at the first pass.
    pub unix_ns_at_origin: Option<u64>,
}

impl Default for FixConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            comp_id: "VENUE".into(),
            conns_max: 64,
            sessions_max: 256,
            limits: Limits::default(),
            store_bytes_max: 256 << 20,
            unix_ns_at_origin: None,
        }
    }
}

/// The FIX endpoint's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixVenueStats {
    /// Logons accepted.
    pub logons: u64,
    /// Logons refused (bad password, CompID, HeartBtInt, a session already logged on).
    pub logons_refused: u64,
    /// Messages read (every type).
    pub messages_in: u64,
    /// Messages sent (every type, resends included).
    pub messages_out: u64,
    /// Messages whose CheckSum or trailer was wrong: ignored.
    pub garbled: u64,
    /// Messages whose fields could not be read: ignored.
    pub malformed: u64,
    /// Session-level Rejects sent.
    pub rejects_sent: u64,
    /// BusinessMessageRejects sent.
    pub business_rejects_sent: u64,
    /// ResendRequests received.
    pub resend_requests_in: u64,
    /// ResendRequests sent (a gap in what a session sent).
    pub resend_requests_out: u64,
    /// Application messages sent again (PossDupFlag Y).
    pub resent: u64,
    /// SequenceReset-GapFills sent over session messages.
    pub gap_fills_sent: u64,
    /// TestRequests sent to a silent session.
    pub test_requests_out: u64,
    /// Messages with a number below the expected one and no PossDupFlag (logged out).
    pub seq_too_low: u64,
    /// Messages with a number below the expected one and PossDupFlag Y (ignored).
    pub duplicates_ignored: u64,
    /// Sessions logged out for silence.
    pub timeouts: u64,
    /// Logouts received.
    pub logouts: u64,
    /// Stream messages about an order no FIX message entered (lies): reported with a
    /// ClOrdID of `U<UserRefNum>`.
    pub foreign_reports: u64,
    /// Sessions logged out because their resend store was full.
    pub store_full: u64,
    /// Connections refused: every slot taken, or a connect fault.
    pub conns_refused: u64,
    /// Messages the `fix-lose` fault kept from the wire (stored, so a resend finds them).
    pub lost_injected: u64,
    /// Orders and replaces sent again (PossDupFlag Y) under a ClOrdID the session already
    /// booked: ignored, never booked twice.
    pub poss_dup_orders_ignored: u64,
    /// Logons refused because the venue holds no state for the SenderCompID and the Logon
    /// neither starts at 1 nor resets (the venue restarted without its sessions).
    pub logons_without_state: u64,
}

impl FixVenueStats {
    /// The counters as `name=value` pairs, as the control port's `fix` command answers.
    pub fn line(&self) -> String {
        format!(
            "logons={} logons_refused={} messages_in={} messages_out={} garbled={} \
             malformed={} rejects_sent={} business_rejects_sent={} resend_requests_in={} \
             resend_requests_out={} resent={} gap_fills_sent={} test_requests_out={} \
             seq_too_low={} duplicates_ignored={} timeouts={} logouts={} foreign_reports={} \
             store_full={} conns_refused={} lost_injected={} poss_dup_orders_ignored={} \
             logons_without_state={}",
            self.logons,
            self.logons_refused,
            self.messages_in,
            self.messages_out,
            self.garbled,
            self.malformed,
            self.rejects_sent,
            self.business_rejects_sent,
            self.resend_requests_in,
            self.resend_requests_out,
            self.resent,
            self.gap_fills_sent,
            self.test_requests_out,
            self.seq_too_low,
            self.duplicates_ignored,
            self.timeouts,
            self.logouts,
            self.foreign_reports,
            self.store_full,
            self.conns_refused,
            self.lost_injected,
            self.poss_dup_orders_ignored,
            self.logons_without_state
        )
    }
}

/// A short text kept by value (a ClOrdID, a request id).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Text {
    len: u8,
    bytes: [u8; CL_ORD_ID_MAX],
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl Text {
    /// `value` if it is 1..=32 printable bytes.
    fn new(value: &[u8]) -> Option<Self> {
        if value.is_empty() || value.len() > CL_ORD_ID_MAX {
            return None;
        }
        if !value.iter().all(u8::is_ascii_graphic) {
            return None;
        }
        let mut bytes = [0; CL_ORD_ID_MAX];
        bytes[..value.len()].copy_from_slice(value);
        Some(Self {
            len: value.len() as u8,
            bytes,
        })
    }

    /// `prefix`, this venue process's incarnation (its start in Unix milliseconds, base 36:
    /// 8 characters until the year 5188), `-`, then `n` in decimal: unique across restarts.
    fn incarnated(prefix: u8, incarnation: u64, n: u64) -> Self {
        let mut digits = [0u8; 13];
        let mut at = digits.len();
        let mut v = incarnation;
        loop {
            at -= 1;
            digits[at] = b"0123456789abcdefghijklmnopqrstuvwxyz"[(v % 36) as usize];
            v /= 36;
            if v == 0 {
                break;
            }
        }
        let mut text = Self::numbered(prefix, 0);
        text.len = 1;
        for &d in &digits[at..] {
            text = text.with(d);
        }
        text = text.with(b'-');
        let start = usize::from(text.len);
        let n_len = codec::write_uint(&mut text.bytes[start..], n);
        text.len += n_len as u8;
        text
    }

    /// `prefix` then `n` in decimal.
    fn numbered(prefix: u8, n: u64) -> Self {
        let mut bytes = [0; CL_ORD_ID_MAX];
        bytes[0] = prefix;
        let len = 1 + codec::write_uint(&mut bytes[1..], n);
        Self {
            len: len as u8,
            bytes,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// This text and one more byte (unchanged when full).
    fn with(mut self, b: u8) -> Self {
        if usize::from(self.len) < CL_ORD_ID_MAX {
            self.bytes[usize::from(self.len)] = b;
            self.len += 1;
        }
        self
    }
}

/// One order as its FIX session knows it: the chain of a replaced order carries CumQty and
/// the average price on, as FIX counts them.
#[derive(Debug, Clone, Copy)]
struct FixOrder {
    id: Text,
    /// The ClOrdID this order replaced.
    orig: Option<Text>,
    /// The ClOrdID of the newest cancel request for it.
    cancel_id: Option<Text>,
    symbol: [u8; SYMBOL_NAME_LEN],
    /// FIX Side (54).
    side: u8,
    price: i64,
    /// OrderQty: the chain's total.
    qty: u64,
    cum: u64,
    /// Sum of price × shares of every execution (for AvgPx).
    notional: i128,
    leaves: u64,
    /// The exchange's order reference (OrderID).
    order_id: u64,
    closed: bool,
    /// The chain's CumQty when this order began (0 unless it replaced one).
    base: u64,
}

/// A query whose answer rides the account's stream.
#[derive(Debug, Clone, Copy)]
enum Query {
    /// An OrderStatusRequest for one order.
    Status { user_ref: u32, req_id: Option<Text> },
    /// An OrderMassStatusRequest; once its first report is sent, how many it lists and how
    /// many are still to come.
    Mass {
        req_id: Text,
        listed: Option<(u32, u32)>,
    },
}

/// A message a session was sent, for resends: an application message's fields (after the
/// standard header) are kept in the store; a session message is gap-filled.
#[derive(Debug, Clone, Copy)]
struct Sent {
    stamp: [u8; UTC_TIMESTAMP_LEN],
    msg_type: u8,
    start: usize,
    end: usize,
}

/// One FIX session (a SenderCompID): its numbers, what it was sent, and its orders.
#[derive(Debug)]
struct FixSession {
    comp_id: String,
    account: u32,
    conn: Option<ConnId>,
    heartbeat_ns: u64,
    /// The next number the venue sends.
    out_seq: u64,
    /// The next number the venue expects.
    in_seq: u64,
    sent: Vec<Sent>,
    store: Vec<u8>,
    /// The next stream message to translate.
    stream_next: u64,
    next_user_ref: u32,
    orders: FxHashMap<u32, FixOrder>,
    by_id: FxHashMap<Text, u32>,
    queries: VecDeque<Query>,
    /// A resend under way: the next number to send again, and the last.
    resending: Option<(u64, u64)>,
    test_requests: u64,
    /// ExecIDs given so far (fills use the match number).
    exec_ids: u64,
    /// ReconcileQuery tokens given so far.
    mass_queries: u32,
    /// Fault (`fix-lose`): this many of the next messages are stored but never written.
    lose: u64,
}

/// One FIX connection.
#[derive(Debug, Clone, Copy)]
struct FixConn {
    session: Option<usize>,
    opened_ns: u64,
    last_rx_ns: u64,
    last_tx_ns: u64,
    test_request_out: bool,
    /// A ResendRequest was sent: the client's numbers up to this one are awaited.
    resend_through: Option<u64>,
    /// A GapFill stopped short of `resend_through`: if the next message is above the
    /// expected number too, what lies between was dropped here and is asked for again.
    refill: bool,
}

/// The FIX endpoint of a [`VenueServer`].
#[derive(Debug)]
pub(super) struct FixEndpoint {
    pub(super) listener: ListenerId,
    pub(super) local: SocketAddr,
    config: FixConfig,
    conns: FxHashMap<ConnId, FixConn>,
    sessions: Vec<FixSession>,
    by_comp_id: FxHashMap<String, usize>,
    table: Box<FieldTable>,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    body: Vec<u8>,
    unix_at_origin: Option<u64>,
    /// The wall clock (Unix ms) when this endpoint first stepped (the configured origin's,
    /// when one is set: a simulation replays byte for byte): ExecIDs carry it.
    incarnation_ms: Option<u64>,
    conn_scratch: Vec<ConnId>,
    /// The ExecID of the report being written, when it is a fill's.
    fill_exec_id: Option<Text>,
    stats: FixVenueStats,
}

/// Why a message could not be acted on: a session-level Reject's RefTagID, reason and text.
type Refusal = (u32, u32, &'static str);

fn refusal(e: FixError) -> Refusal {
    match e {
        FixError::Missing { tag, .. } => (tag, 1, "required tag missing"),
        other => (
            other.tag().unwrap_or(0),
            5,
            "value is incorrect for this tag",
        ),
    }
}

/// Message fields written into a growable buffer (a stored message's body).
struct Fields<'a>(&'a mut Vec<u8>);

impl Fields<'_> {
    fn bytes(&mut self, tag: u32, value: &[u8]) -> &mut Self {
        if value.is_empty() {
            return self;
        }
        let mut digits = [0u8; 20];
        let n = codec::write_uint(&mut digits, u64::from(tag));
        self.0.extend_from_slice(&digits[..n]);
        self.0.push(b'=');
        self.0.extend_from_slice(value);
        self.0.push(codec::SOH);
        self
    }

    fn uint(&mut self, tag: u32, value: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let n = codec::write_uint(&mut digits, value);
        self.bytes(tag, &digits[..n])
    }

    fn price(&mut self, tag: u32, units: i64) -> &mut Self {
        let mut text = [0u8; 48];
        let n = codec::write_decimal(&mut text, units, keel::order::Price::SCALE);
        self.bytes(tag, &text[..n])
    }
}

impl FixEndpoint {
    pub(super) fn new(listener: ListenerId, local: SocketAddr, config: FixConfig) -> Self {
        Self {
            listener,
            local,
            conns: FxHashMap::default(),
            sessions: Vec::new(),
            by_comp_id: FxHashMap::default(),
            table: Box::default(),
            inbuf: vec![0; config.limits.message_max as usize],
            out: vec![0; config.limits.message_max as usize + 512],
            body: Vec::with_capacity(1_024),
            unix_at_origin: config.unix_ns_at_origin,
            incarnation_ms: config.unix_ns_at_origin.map(|ns| ns / 1_000_000),
            conn_scratch: Vec::new(),
            fill_exec_id: None,
            stats: FixVenueStats::default(),
            config,
        }
    }

    pub(super) fn stats(&self) -> FixVenueStats {
        self.stats
    }

    /// The `fix-lose` fault: each logged-on session's next `n` messages are stored but not
    /// written. Returns the sessions it applies to.
    pub(super) fn lose_next(&mut self, n: u64) -> usize {
        let mut sessions = 0;
        for s in &mut self.sessions {
            if s.conn.is_some() {
                s.lose = n;
                sessions += 1;
            }
        }
        sessions
    }

    /// The account and UserRefNum of session `comp_id`'s order `cl_ord_id`.
    pub(super) fn order(&self, comp_id: &str, cl_ord_id: &[u8]) -> Option<(u32, u32)> {
        let session = &self.sessions[*self.by_comp_id.get(comp_id)?];
        let user_ref = *session.by_id.get(&Text::new(cl_ord_id)?)?;
        Some((session.account, user_ref))
    }

    /// The last number session `comp_id` was sent, and its account's stream messages not
    /// yet translated.
    pub(super) fn session_numbers(&self, comp_id: &str, exchange: &Exchange) -> Option<(u64, u64)> {
        let session = &self.sessions[*self.by_comp_id.get(comp_id)?];
        let stream_len = exchange.account(session.account).stream_len();
        Some((
            session.out_seq - 1,
            (stream_len + 1).saturating_sub(session.stream_next),
        ))
    }

    /// Sessions logged on now.
    pub(super) fn logged_on(&self) -> usize {
        self.conns.values().filter(|c| c.session.is_some()).count()
    }

    pub(super) fn accept<T: Transport>(&mut self, srv: &mut VenueServer<T>, conn: ConnId) {
        let f = srv.config.faults;
        let over = f.accept_limit > 0 && self.conns.len() as u32 >= f.accept_limit;
        if f.refuse_connects || over || self.conns.len() as u32 >= self.config.conns_max {
            self.stats.conns_refused += 1;
            srv.reactor.close(conn);
            return;
        }
        let now = srv.now_ns;
        self.conns.insert(
            conn,
            FixConn {
                session: None,
                opened_ns: now,
                last_rx_ns: now,
                last_tx_ns: now,
                test_request_out: false,
                resend_through: None,
                refill: false,
            },
        );
    }

    pub(super) fn closed(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            if let Some(s) = c.session {
                self.sessions[s].conn = None;
            }
        }
    }

    /// Every connection closed now (the `drop` fault).
    pub(super) fn drop_all<T: Transport>(&mut self, srv: &mut VenueServer<T>) {
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for conn in conns {
            self.closed(conn);
            srv.reactor.close(conn);
        }
    }

    /// One pass: read every connection, send what the streams hold, run the timers.
    pub(super) fn step<T: Transport>(&mut self, srv: &mut VenueServer<T>, now_ns: u64) {
        if self.unix_at_origin.is_none() {
            use keel::clock::Clock;
            // The wall clock now, on the process's one TSC line (the venue's clock reads
            // `now_ns` now).
            let tsc = keel::clock::TscClock::new();
            let wall = tsc.unix_ns_at_origin().saturating_add(tsc.now_ns());
            self.unix_at_origin = Some(wall.saturating_sub(now_ns));
            self.incarnation_ms = Some(wall / 1_000_000);
        }
        let mut conns = std::mem::take(&mut self.conn_scratch);
        conns.clear();
        conns.extend(self.conns.keys().copied());
        if now_ns >= srv.config.faults.stalled_until_ns {
            for &conn in &conns {
                self.read(srv, now_ns, conn);
            }
        }
        for &conn in &conns {
            let Some(s) = self.conns.get(&conn).and_then(|c| c.session) else {
                continue;
            };
            self.pump(srv, now_ns, s);
        }
        for &conn in &conns {
            self.timers(srv, now_ns, conn);
        }
        self.conn_scratch = conns;
    }

    /// This venue's incarnation: the wall clock in Unix milliseconds when it began serving
    /// (ExecIDs carry it, so no restart reuses one).
    fn incarnation(&self) -> u64 {
        self.incarnation_ms.unwrap_or(0)
    }

    fn unix_ns(&self, srv_wall_offset: u64, now_ns: u64) -> u64 {
        self.unix_at_origin
            .unwrap_or(0)
            .wrapping_add(now_ns)
            .wrapping_add(srv_wall_offset)
    }

    /// Reads every whole message a connection sent.
    fn read<T: Transport>(&mut self, srv: &mut VenueServer<T>, now_ns: u64, conn: ConnId) {
        loop {
            if !self.conns.contains_key(&conn) || srv.delayed.len() >= DELAYED_MAX {
                return;
            }
            let buf = srv.reactor.received(conn);
            let len = match codec::frame(buf, &self.config.limits) {
                Frame::Incomplete => return,
                Frame::Garbled { len, .. } => {
                    // Discarded up to the next BeginString; the session stays up (a number
                    // lost with it is a gap, asked for again).
                    srv.reactor.consume(conn, len);
                    self.stats.garbled += 1;
                    continue;
                }
                Frame::Whole { len } => len,
            };
            self.inbuf[..len].copy_from_slice(&buf[..len]);
            srv.reactor.consume(conn, len);
            self.stats.messages_in += 1;
            if let Some(c) = self.conns.get_mut(&conn) {
                c.last_rx_ns = now_ns;
                c.test_request_out = false;
            }
            let mut table = std::mem::take(&mut self.table);
            let inbuf = std::mem::take(&mut self.inbuf);
            match table.parse(&inbuf[..len], &self.config.limits) {
                Ok(msg) => self.on_message(srv, now_ns, conn, &msg),
                Err(e) => {
                    self.stats.malformed += 1;
                    self.unreadable(srv, now_ns, conn, &inbuf[..len], &e);
                }
            }
            self.inbuf = inbuf;
            self.table = table;
        }
    }

    /// A message whose CheckSum holds but whose fields cannot all be read (a value past
    /// `field_max`, too many fields, an empty value): when its MsgSeqNum is the one expected, a
    /// Reject takes the number, so the session goes on (ignoring it would leave a gap the
    /// client's resend of the same message could never fill); otherwise it is ignored.
    fn unreadable<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        raw: &[u8],
        error: &FixError,
    ) {
        let Some(s) = self.conns.get(&conn).and_then(|c| c.session) else {
            return;
        };
        let field = |tag: &[u8]| {
            raw.windows(tag.len())
                .position(|w| w == tag)
                .map(|at| &raw[at + tag.len()..])
                .and_then(|rest| rest.split(|&b| b == codec::SOH).next())
        };
        let seq = field(b"\x0134=").and_then(|v| codec::parse_uint(34, v).ok());
        if seq != Some(self.sessions[s].in_seq) {
            return;
        }
        let seq = self.sessions[s].in_seq;
        self.sessions[s].in_seq += 1;
        let msg_type = field(b"\x0135=").unwrap_or(b"?");
        let mut text = [0u8; 96];
        let n = {
            use std::io::Write;
            let mut w = &mut text[..];
            let _ = write!(w, "{error}");
            96 - w.len()
        };
        let tag = error.tag().unwrap_or(0);
        self.reject_with(srv, now_ns, s, seq, msg_type, (tag, 5), &text[..n]);
    }

    fn on_message<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        msg: &Msg<'_>,
    ) {
        let Some(s) = self.conns[&conn].session else {
            return self.logon(srv, now_ns, conn, msg);
        };
        if self.store_full(s) {
            // Every message in answer is numbered and kept: a flood ends here.
            self.stats.store_full += 1;
            return self.logout(srv, now_ns, conn, "the venue's resend store is full");
        }
        let comp = &self.sessions[s].comp_id;
        if msg.get(49) != Some(comp.as_bytes())
            || msg.get(56) != Some(self.config.comp_id.as_bytes())
        {
            let seq = msg.uint(34).ok().flatten().unwrap_or(0);
            let tag = if msg.get(49) == Some(comp.as_bytes()) {
                56
            } else {
                49
            };
            self.reject(
                srv,
                now_ns,
                s,
                seq,
                msg.msg_type(),
                (tag, 9, "CompID problem"),
            );
            return self.logout(
                srv,
                now_ns,
                conn,
                "CompID problem: SenderCompID or TargetCompID",
            );
        }
        let seq = match msg.require_uint(34) {
            Ok(seq) if seq > 0 => seq,
            _ => {
                return self.logout(
                    srv,
                    now_ns,
                    conn,
                    "MsgSeqNum (34) missing or not a positive number",
                )
            }
        };
        let msg_type = msg.msg_type();
        let expected = self.sessions[s].in_seq;
        let poss_dup = msg.get(43) == Some(b"Y");
        if msg_type == b"4" && msg.get(123) != Some(b"Y") {
            return self.sequence_reset(srv, now_ns, conn, s, msg, seq, false);
        }
        if seq < expected {
            if poss_dup {
                self.stats.duplicates_ignored += 1;
                return;
            }
            self.stats.seq_too_low += 1;
            let text = format!("MsgSeqNum too low, expecting {expected} but received {seq}");
            return self.logout(srv, now_ns, conn, &text);
        }
        if seq > expected {
            let c = self.conns.get_mut(&conn).expect("connected");
            if c.resend_through.is_none_or(|t| seq > t) {
                let asked = c.resend_through.is_some() && !std::mem::take(&mut c.refill);
                c.resend_through = Some(seq);
                if !asked {
                    self.stats.resend_requests_out += 1;
                    self.send_with(srv, now_ns, s, b'2', |f| {
                        f.uint(7, expected).uint(16, 0);
                    });
                }
            }
            // Only what keeps the session alive is acted on before the gap is filled.
            match msg_type {
                b"2" => self.resend_request(srv, now_ns, conn, s, msg, seq),
                b"5" => self.on_logout(srv, now_ns, conn),
                _ => {}
            }
            return;
        }
        if poss_dup && msg.get(122).is_none() {
            self.sessions[s].in_seq += 1;
            return self.reject(
                srv,
                now_ns,
                s,
                seq,
                msg_type,
                (122, 1, "OrigSendingTime missing"),
            );
        }
        if msg.get(52).is_none() {
            self.sessions[s].in_seq += 1;
            return self.reject(
                srv,
                now_ns,
                s,
                seq,
                msg_type,
                (52, 1, "SendingTime missing"),
            );
        }
        if msg_type == b"4" {
            return self.sequence_reset(srv, now_ns, conn, s, msg, seq, true);
        }
        self.sessions[s].in_seq += 1;
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.resend_through
                .is_some_and(|t| self.sessions[s].in_seq > t)
            {
                c.resend_through = None;
                c.refill = false;
            }
        }
        let outcome = match msg_type {
            b"0" | b"3" => Ok(()),
            b"1" if msg.get(112).is_none() => Err((112, 1, "TestReqID missing")),
            b"1" => {
                self.send_with(srv, now_ns, s, b'0', |f| {
                    f.bytes(112, msg.get(112).unwrap_or(b""));
                });
                Ok(())
            }
            b"2" => {
                self.resend_request(srv, now_ns, conn, s, msg, seq);
                Ok(())
            }
            b"5" => {
                self.on_logout(srv, now_ns, conn);
                Ok(())
            }
            b"A" => return self.logout(srv, now_ns, conn, "a second Logon on a logged-on session"),
            b"D" => self.new_order(srv, now_ns, conn, s, msg),
            b"F" => self.cancel(srv, now_ns, conn, s, msg),
            b"G" => self.replace(srv, now_ns, conn, s, msg),
            b"H" => self.status_request(srv, now_ns, conn, s, msg),
            b"AF" => self.mass_status(srv, now_ns, conn, s, msg),
            other => {
                self.stats.business_rejects_sent += 1;
                self.body.clear();
                let mut body = std::mem::take(&mut self.body);
                Fields(&mut body)
                    .uint(45, seq)
                    .bytes(372, other)
                    .uint(380, 3)
                    .bytes(58, b"unsupported message type");
                self.send_app(srv, now_ns, s, b'j', &body);
                self.body = body;
                Ok(())
            }
        };
        if let Err(why) = outcome {
            self.reject(srv, now_ns, s, seq, msg_type, why);
        }
    }

    fn logon<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        msg: &Msg<'_>,
    ) {
        let refused = |why: &str| Err(why.to_string());
        let checked: Result<(String, u64), String> = (|| {
            if msg.msg_type() != b"A" {
                return refused("the first message must be a Logon");
            }
            if msg.get(56) != Some(self.config.comp_id.as_bytes()) {
                return refused("TargetCompID is not this venue's CompID");
            }
            let Some(sender) = msg.get(49).and_then(Text::new) else {
                return refused("SenderCompID missing or not 1 to 32 printable characters");
            };
            if msg.get(98) != Some(b"0") {
                return refused("EncryptMethod (98) must be 0");
            }
            let hb = match msg.require_uint(108) {
                Ok(hb) if (1..=HEARTBEAT_MAX_S).contains(&hb) => hb,
                _ => return refused("HeartBtInt (108) must be 1 to 3600 seconds"),
            };
            if !srv.exchange.password_ok(msg.get(554).unwrap_or(b"")) {
                return refused("Password (554) not accepted");
            }
            match msg.require_uint(34) {
                Ok(seq) if seq > 0 => {}
                _ => return refused("MsgSeqNum (34) missing or not a positive number"),
            }
            let comp = String::from_utf8_lossy(sender.as_bytes()).into_owned();
            match self.by_comp_id.get(&comp) {
                Some(&s) if self.sessions[s].conn.is_some() => {
                    return refused("this SenderCompID is already logged on");
                }
                None if self.sessions.len() >= self.config.sessions_max as usize => {
                    return refused("every FIX session of the venue is taken");
                }
                _ => {}
            }
            if msg.get(141) == Some(b"Y") && msg.get(34) != Some(b"1") {
                return refused("ResetSeqNumFlag (141=Y) with a MsgSeqNum other than 1");
            }
            // No state for this session and a Logon that resumes one the client has seen this
            // venue's messages in (NextExpectedMsgSeqNum above 1, or absent so it cannot
            // tell): the venue restarted without its sessions. Resuming would ask for
            // everything from 1 and book what the client resends as new orders. Refused,
            // saying how to begin a new session. A client that never heard from this venue
            // (789=1: its first Logon was lost) resumes as before.
            let next_expected = msg.uint(789).ok().flatten();
            if !self.by_comp_id.contains_key(&comp)
                && msg.get(141) != Some(b"Y")
                && msg.get(34) != Some(b"1")
                && next_expected != Some(1)
            {
                self.stats.logons_without_state += 1;
                return Err(format!(
                    "no session state for SenderCompID {comp} (the venue restarted without it): \
                     a Logon numbered {} expecting the venue's message {} resumes a session \
                     this venue does not have; log on with ResetSeqNumFlag (141=Y) and \
                     MsgSeqNum 1 to begin a new one",
                    String::from_utf8_lossy(msg.get(34).unwrap_or(b"?")),
                    next_expected.map_or_else(|| "(not said, 789)".to_string(), |n| n.to_string())
                ));
            }
            Ok((comp, hb))
        })();
        let (comp, hb) = match checked {
            Ok(v) => v,
            Err(why) => {
                self.stats.logons_refused += 1;
                return self.refuse_logon(srv, now_ns, conn, msg, &why);
            }
        };
        let s = match self.by_comp_id.get(&comp) {
            Some(&s) => s,
            None => {
                let account = srv.exchange.fix_account(&comp);
                self.sessions.push(FixSession {
                    comp_id: comp.clone(),
                    account,
                    conn: None,
                    heartbeat_ns: 0,
                    out_seq: 1,
                    in_seq: 1,
                    sent: Vec::new(),
                    store: Vec::new(),
                    stream_next: srv.exchange.account(account).stream_len() + 1,
                    next_user_ref: srv.exchange.next_user_ref(account),
                    orders: FxHashMap::default(),
                    by_id: FxHashMap::default(),
                    queries: VecDeque::new(),
                    resending: None,
                    test_requests: 0,
                    exec_ids: 0,
                    mass_queries: 0,
                    lose: 0,
                });
                self.by_comp_id.insert(comp, self.sessions.len() - 1);
                self.sessions.len() - 1
            }
        };
        let reset = msg.get(141) == Some(b"Y");
        let seq = msg.require_uint(34).expect("checked");
        let session = &mut self.sessions[s];
        if reset {
            session.out_seq = 1;
            session.in_seq = 1;
            session.sent.clear();
            session.store.clear();
            session.resending = None;
        }
        if seq < session.in_seq {
            self.stats.logons_refused += 1;
            self.stats.seq_too_low += 1;
            let text = format!(
                "MsgSeqNum too low, expecting {} but received {seq}",
                session.in_seq
            );
            return self.refuse_logon(srv, now_ns, conn, msg, &text);
        }
        session.conn = Some(conn);
        session.heartbeat_ns = hb * 1_000_000_000;
        session.resending = None;
        let expected = session.in_seq;
        if seq == expected {
            session.in_seq += 1;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = Some(s);
        }
        self.stats.logons += 1;
        srv.stats.logins += 1;
        self.body.clear();
        let mut body = std::mem::take(&mut self.body);
        let mut f = Fields(&mut body);
        f.uint(98, 0).uint(108, hb);
        if reset {
            f.bytes(141, b"Y");
        }
        self.send(srv, now_ns, s, b'A', &body);
        // The `replay-all` fault: everything this session was sent comes again (PossDupFlag,
        // numbers below what the client expects: it must skip them all).
        if std::mem::take(&mut srv.exchange.replay_from_start_once) {
            let last = self.sessions[s].out_seq - 1;
            if last > 1 {
                self.sessions[s].resending = Some((1, last - 1));
            }
        }
        if seq > expected {
            self.conns.get_mut(&conn).expect("connected").resend_through = Some(seq);
            self.stats.resend_requests_out += 1;
            body.clear();
            Fields(&mut body).uint(7, expected).uint(16, 0);
            self.send(srv, now_ns, s, b'2', &body);
        }
        self.body = body;
    }

    /// A Logon refused: a Logout naming why (its header built from the Logon, numbered 1:
    /// no session's numbers are touched), then the connection closed.
    fn refuse_logon<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        msg: &Msg<'_>,
        why: &str,
    ) {
        let target = msg.get(49).and_then(Text::new);
        let stamp = utc_timestamp(self.unix_ns(srv.exchange.wall_offset_ns, now_ns));
        let mut e = Encoder::new(&mut self.out, b"5");
        e.bytes(49, self.config.comp_id.as_bytes())
            .bytes(56, target.as_ref().map_or(b"?".as_slice(), Text::as_bytes))
            .uint(34, 1)
            .bytes(52, &stamp)
            .bytes(58, why.as_bytes());
        if let Ok(n) = e.finish() {
            if srv.reactor.send(conn, &self.out[..n]).is_ok() {
                self.stats.messages_out += 1;
            }
        }
        srv.count_drop(DropReason::LoginRejected);
        self.conns.remove(&conn);
        srv.close_after_flush(conn, false);
    }

    /// A Logout with `why`, then the connection closed once it is written.
    fn logout<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        why: &str,
    ) {
        let Some(c) = self.conns.get(&conn).copied() else {
            return;
        };
        match c.session {
            Some(s) => {
                self.send_with(srv, now_ns, s, b'5', |f| {
                    f.bytes(58, why.as_bytes());
                });
                self.sessions[s].conn = None;
                srv.count_drop(DropReason::ProtocolViolation);
            }
            None => srv.count_drop(DropReason::Malformed(keel::proto::DecodeError::BadField {
                field: "FIX message",
                value: 0,
            })),
        }
        self.conns.remove(&conn);
        srv.close_after_flush(conn, false);
    }

    fn on_logout<T: Transport>(&mut self, srv: &mut VenueServer<T>, now_ns: u64, conn: ConnId) {
        self.stats.logouts += 1;
        let Some(s) = self.conns.get(&conn).and_then(|c| c.session) else {
            return;
        };
        self.send(srv, now_ns, s, b'5', &[]);
        self.sessions[s].conn = None;
        self.conns.remove(&conn);
        srv.count_drop(DropReason::Logout);
        srv.close_after_flush(conn, false);
    }

    #[allow(clippy::too_many_arguments)]
    fn sequence_reset<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        s: usize,
        msg: &Msg<'_>,
        seq: u64,
        gap_fill: bool,
    ) {
        let expected = self.sessions[s].in_seq;
        let new_seq = match msg.require_uint(36) {
            Ok(n) => n,
            Err(e) => {
                if gap_fill {
                    self.sessions[s].in_seq += 1;
                }
                return self.reject(srv, now_ns, s, seq, b"4", refusal(e));
            }
        };
        if !gap_fill && new_seq == expected {
            return; // a Reset to where the session stands: nothing to do
        }
        if new_seq <= expected {
            if gap_fill {
                self.sessions[s].in_seq += 1;
            }
            let why = (36, 5, "NewSeqNo is not above the expected MsgSeqNum");
            return self.reject(srv, now_ns, s, seq, b"4", why);
        }
        self.sessions[s].in_seq = new_seq;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match c.resend_through {
            Some(t) if new_seq > t => {
                c.resend_through = None;
                c.refill = false;
            }
            // A gap fill that stops short of what this venue has seen since (a client that
            // fills up to its Logon only, never past what it sent after it): if the client
            // does not resend what follows, what lies between was dropped here while the gap
            // was open, and the next message above the expected number asks for it again.
            Some(_) if gap_fill => c.refill = true,
            _ => {}
        }
    }

    /// A ResendRequest: the range is sent again from the next pass on (a long one over
    /// several passes, as the socket takes it).
    fn resend_request<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        _conn: ConnId,
        s: usize,
        msg: &Msg<'_>,
        seq: u64,
    ) {
        self.stats.resend_requests_in += 1;
        let last_sent = self.sessions[s].out_seq - 1;
        let (begin, end) = match (msg.require_uint(7), msg.require_uint(16)) {
            (Ok(b), Ok(e)) => (b, e),
            (Err(e), _) | (_, Err(e)) => return self.reject(srv, now_ns, s, seq, b"2", refusal(e)),
        };
        let end = if end == 0 {
            last_sent
        } else {
            end.min(last_sent)
        };
        if begin == 0 || begin > end {
            let why = (7, 5, "BeginSeqNo is not a number this venue sent");
            return self.reject(srv, now_ns, s, seq, b"2", why);
        }
        self.sessions[s].resending = Some((begin, end));
    }

    /// A session-level Reject.
    fn reject<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        ref_seq: u64,
        msg_type: &[u8],
        (tag, reason, text): Refusal,
    ) {
        self.reject_with(
            srv,
            now_ns,
            s,
            ref_seq,
            msg_type,
            (tag, reason),
            text.as_bytes(),
        );
    }

    /// A Reject (3) naming the message (45, 372), the tag (371, when known) and the reason
    /// (373, with 58's text).
    #[allow(clippy::too_many_arguments)]
    fn reject_with<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        ref_seq: u64,
        msg_type: &[u8],
        (tag, reason): (u32, u32),
        text: &[u8],
    ) {
        self.stats.rejects_sent += 1;
        self.send_with(srv, now_ns, s, b'3', |f| {
            f.uint(45, ref_seq);
            if tag > 0 {
                f.uint(371, u64::from(tag));
            }
            f.bytes(372, msg_type)
                .uint(373, u64::from(reason))
                .bytes(58, text);
        });
    }

    /// A session message whose fields `fill` writes (into the reused body buffer).
    fn send_with<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        msg_type: u8,
        fill: impl FnOnce(&mut Fields<'_>),
    ) {
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        fill(&mut Fields(&mut body));
        self.send(srv, now_ns, s, msg_type, &body);
        self.body = body;
    }

    /// Whether session `s` has used its resend store: the application messages kept, and
    /// every message's entry.
    pub(super) fn store_full(&self, s: usize) -> bool {
        let session = &self.sessions[s];
        let used = session.store.len() + session.sent.len() * std::mem::size_of::<Sent>();
        used + 2 * self.config.limits.message_max as usize > self.config.store_bytes_max
    }

    /// Sends an application message (kept for resends).
    fn send_app<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        msg_type: u8,
        body: &[u8],
    ) {
        let session = &mut self.sessions[s];
        if session.store.len() + body.len() > self.config.store_bytes_max {
            self.stats.store_full += 1;
            if let Some(conn) = session.conn {
                return self.logout(srv, now_ns, conn, "the venue's resend store is full");
            }
            return;
        }
        self.send_stored(srv, now_ns, s, msg_type, body, true);
    }

    /// Sends a session message (gap-filled on a resend).
    fn send<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        msg_type: u8,
        body: &[u8],
    ) {
        self.send_stored(srv, now_ns, s, msg_type, body, false);
    }

    fn send_stored<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        msg_type: u8,
        body: &[u8],
        app: bool,
    ) {
        let stamp = utc_timestamp(self.unix_ns(srv.exchange.wall_offset_ns, now_ns));
        let session = &mut self.sessions[s];
        let seq = session.out_seq;
        session.out_seq += 1;
        let start = session.store.len();
        if app {
            session.store.extend_from_slice(body);
        }
        session.sent.push(Sent {
            stamp,
            msg_type,
            start,
            end: session.store.len(),
        });
        let Some(conn) = session.conn else {
            return; // kept: the client asks for it after its next logon
        };
        if session.lose > 0 {
            session.lose -= 1;
            self.stats.lost_injected += 1;
            return;
        }
        let mut e = Encoder::new(&mut self.out, &[msg_type]);
        e.bytes(49, self.config.comp_id.as_bytes())
            .bytes(56, session.comp_id.as_bytes())
            .uint(34, seq)
            .bytes(52, &stamp)
            .raw(body);
        let Ok(n) = e.finish() else {
            return; // not reached: bodies are bounded far below the buffer
        };
        // A client that does not read loses the message on the wire, never from the store:
        // it sees the gap and asks for it again.
        if srv.reactor.send(conn, &self.out[..n]).is_ok() {
            self.stats.messages_out += 1;
            if let Some(c) = self.conns.get_mut(&conn) {
                c.last_tx_ns = now_ns;
            }
        }
    }

    /// Sends again what a ResendRequest asked for, as far as the socket takes it.
    fn resend<T: Transport>(&mut self, srv: &mut VenueServer<T>, now_ns: u64, s: usize) -> bool {
        let Some((mut next, end)) = self.sessions[s].resending else {
            return true;
        };
        let Some(conn) = self.sessions[s].conn else {
            return false;
        };
        let stamp = utc_timestamp(self.unix_ns(srv.exchange.wall_offset_ns, now_ns));
        while next <= end {
            if srv.reactor.send_pending(conn) > 128 * 1024 {
                self.sessions[s].resending = Some((next, end));
                return false;
            }
            let session = &self.sessions[s];
            let sent = session.sent[(next - 1) as usize];
            let mut e;
            let after;
            if sent.start == sent.end && !matches!(sent.msg_type, b'8' | b'9' | b'j') {
                // A run of session messages: one GapFill over all of them.
                let mut last = next;
                while last < end {
                    let n = session.sent[last as usize];
                    if n.start != n.end || matches!(n.msg_type, b'8' | b'9' | b'j') {
                        break;
                    }
                    last += 1;
                }
                e = Encoder::new(&mut self.out, b"4");
                e.bytes(49, self.config.comp_id.as_bytes())
                    .bytes(56, session.comp_id.as_bytes())
                    .uint(34, next)
                    .bytes(43, b"Y")
                    .bytes(52, &stamp)
                    .bytes(122, &sent.stamp)
                    .bytes(123, b"Y")
                    .uint(36, last + 1);
                self.stats.gap_fills_sent += 1;
                after = last + 1;
            } else {
                e = Encoder::new(&mut self.out, &[sent.msg_type]);
                e.bytes(49, self.config.comp_id.as_bytes())
                    .bytes(56, session.comp_id.as_bytes())
                    .uint(34, next)
                    .bytes(43, b"Y")
                    .bytes(52, &stamp)
                    .bytes(122, &sent.stamp)
                    .raw(&session.store[sent.start..sent.end]);
                self.stats.resent += 1;
                after = next + 1;
            }
            let Ok(n) = e.finish() else {
                break;
            };
            if srv.reactor.send(conn, &self.out[..n]).is_err() {
                self.sessions[s].resending = Some((next, end));
                return false;
            }
            self.stats.messages_out += 1;
            next = after;
        }
        self.sessions[s].resending = None;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.last_tx_ns = now_ns;
        }
        true
    }

    fn timers<T: Transport>(&mut self, srv: &mut VenueServer<T>, now_ns: u64, conn: ConnId) {
        let Some(c) = self.conns.get(&conn).copied() else {
            return;
        };
        let Some(s) = c.session else {
            if now_ns.saturating_sub(c.opened_ns) > srv.config.login_timeout_ns {
                srv.count_drop(DropReason::LoginTimeout);
                self.conns.remove(&conn);
                srv.close_after_flush(conn, false);
            }
            return;
        };
        let hb = self.sessions[s].heartbeat_ns;
        let silent = now_ns.saturating_sub(c.last_rx_ns);
        if silent > 2 * hb + hb / 5 {
            self.stats.timeouts += 1;
            return self.logout(srv, now_ns, conn, "no message within twice HeartBtInt");
        }
        if silent > hb + hb / 5 && !c.test_request_out {
            self.stats.test_requests_out += 1;
            self.sessions[s].test_requests += 1;
            let id = Text::numbered(b'T', self.sessions[s].test_requests);
            self.send_with(srv, now_ns, s, b'1', |f| {
                f.bytes(112, id.as_bytes());
            });
            if let Some(c) = self.conns.get_mut(&conn) {
                c.test_request_out = true;
            }
        } else if now_ns.saturating_sub(c.last_tx_ns) >= hb {
            self.send(srv, now_ns, s, b'0', &[]);
        }
    }
}

mod orders;

pub use orders::ord_rej_reason;
