//! A venue link over any [`Transport`], speaking any [`VenueProtocol`], driven by the session
//! state machine
//! ([`super::machine`]): connect, log in asking for the next expected sequence number (the
//! venue replays what was missed), reconcile (the venue's open orders against this session's),
//! and only then report SYNCED so new orders may leave. A report that contradicts the
//! session's view (see [`crate::order::Contradiction`]) makes the link read-only — cancels and
//! queries flow, new orders are handed back refused — until a reconciliation, paced by
//! backoff, settles everything. Any failure — connect refused, login
//! rejected, reconciliation too slow, the venue silent for too many heartbeat intervals, the
//! connection lost — closes the connection, reports every order in flight as unknown (never
//! failed, never resent), and schedules a reconnect with backoff and equal jitter.

use std::net::SocketAddr;

use super::machine::{Action, LinkState, SessionConfig, SessionEvent, SessionMachine};
use super::protocol::{RequestError, SessionNews, VenueProtocol};
use crate::net::{ConnId, NetEvent, Transport};
use crate::order::{
    CancelRejectReason, LinkMode, Outcome, OutcomeKind, RefusalReason, RequestKind, UnsentRequest,
    VenueId,
};
use crate::proto::DecodeError;
use crate::ring::VenueHandle;

/// Link timing and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// Session state machine settings (backoff, reconciliation timeout).
    pub session: SessionConfig,
    /// Send a heartbeat after this long without sending.
    pub heartbeat_interval_ns: u64,
    /// Declare the venue dead after this many heartbeat intervals without hearing from it.
    pub silent_intervals_max: u32,
    /// Largest venue message accepted (a SoupBinTCP packet for OUCH), bytes.
    pub max_packet_len: u16,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            session: SessionConfig::default(),
            heartbeat_interval_ns: 1_000_000_000,
            silent_intervals_max: 3,
            max_packet_len: 1024,
        }
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Venue bytes that did not decode (the connection was closed).
    pub decode_errors: u64,
    /// The last decode error.
    pub last_decode_error: Option<DecodeError>,
    /// Requests that could not be encoded (answered to the dispatcher where possible).
    pub request_errors: u64,
    /// Requests written.
    pub requests_sent: u64,
    /// New orders and replaces written (each puts an order in the market).
    pub orders_entered: u64,
    /// Reconciliation queries written (at login, and paced retries while read-only).
    pub reconcile_queries: u64,
    /// Requests handed back unsent because the link was not SYNCED (see `NotSent`).
    pub returned_unsent: u64,
    /// Times the venue was declared dead for silence.
    pub heartbeat_timeouts: u64,
    /// Orders reported unknown because the link dropped while they were in flight.
    pub marked_unknown: u64,
    /// Session transitions the driver asked for that the machine refused (a bug, counted).
    pub invalid_transitions: u64,
    /// Logins that could not be encoded (a credential wider than its field): the connection
    /// is treated as refused and retried with backoff.
    pub login_errors: u64,
    /// New orders and replaces handed back refused because the link was read-only.
    pub refused_read_only: u64,
    /// Connection attempts that failed (refused, unreachable, timed out, no socket).
    pub connect_failures: u64,
    /// The OS error (errno) of the last failed connection attempt or lost connection (0:
    /// none, or not an OS error, e.g. every connection slot in use).
    pub last_os_error: i32,
    /// Reconnects an operator asked for (`keel ctl reconnect`).
    pub operator_reconnects: u64,
    /// Contradictions an operator cleared (`keel ctl reconcile`).
    pub contradictions_cleared: u64,
    /// Passes that came more than a heartbeat interval after the one before: keel's own loop
    /// stood still (descheduled, a stopped process, a blocked core). Silence is then judged
    /// from the resume, after reading what arrived: the venue is not blamed for keel's stall.
    pub loop_stalls: u64,
    /// How long the latest of them stood still, ns.
    pub last_loop_stall_ns: u64,
}

/// A venue link speaking protocol `P`. See the module docs.
#[derive(Debug)]
pub struct VenueLink<P> {
    addr: SocketAddr,
    venue: VenueId,
    client: P,
    handle: VenueHandle,
    config: LinkConfig,
    machine: SessionMachine,
    conn: Option<ConnId>,
    reconnect_at_ns: Option<u64>,
    /// When a paced reconciliation retry is due (read-only links).
    reconcile_at_ns: Option<u64>,
    last_rx_ns: u64,
    last_tx_ns: u64,
    /// When the link last stepped (0: never): a longer gap than a heartbeat interval is a
    /// stall of keel's own loop.
    last_step_ns: u64,
    /// The venue's silence is counted from here at the earliest: the resume after a stall.
    silence_from_ns: u64,
    /// keel is stopping: the link never connects again.
    stopping: bool,
    scratch: [u8; 512],
    /// Outcomes the outcome ring could not take yet (link state, unknowns), sent first on the
    /// next step; bounded by the client's order capacity plus one link state.
    backlog: Vec<Outcome>,
    stats: LinkStats,
    /// Every message to and from the venue, to the wire log (if one is configured).
    wire: Option<crate::wirelog::WireTap>,
}

impl<P: VenueProtocol> VenueLink<P> {
    /// A link to `addr` carrying `venue`'s rings. (The engine builds its links with
    /// [`super::protocol::build_link`].)
    pub fn new(addr: SocketAddr, venue: VenueId, client: P, handle: VenueHandle) -> Self {
        Self::with_config(addr, venue, client, handle, LinkConfig::default())
    }

    /// A link with explicit timing.
    pub fn with_config(
        addr: SocketAddr,
        venue: VenueId,
        client: P,
        handle: VenueHandle,
        config: LinkConfig,
    ) -> Self {
        Self {
            addr,
            venue,
            client,
            handle,
            machine: SessionMachine::new(config.session),
            config,
            conn: None,
            reconnect_at_ns: None,
            reconcile_at_ns: None,
            last_rx_ns: 0,
            last_tx_ns: 0,
            last_step_ns: 0,
            silence_from_ns: 0,
            stopping: false,
            scratch: [0; 512],
            backlog: Vec::with_capacity(4_096),
            stats: LinkStats::default(),
            wire: None,
        }
    }

    /// The session state.
    pub fn state(&self) -> LinkState {
        self.machine.state()
    }

    /// The session machine's counters.
    pub fn session_stats(&self) -> super::machine::SessionStats {
        self.machine.stats()
    }

    /// The venue this link carries.
    pub fn venue(&self) -> VenueId {
        self.venue
    }

    /// The protocol client, to restore a journal into before [`VenueLink::start`].
    pub fn client_mut(&mut self) -> &mut P {
        &mut self.client
    }

    /// Counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The protocol client (sequence numbers, id mapping, reconciliation results).
    pub fn client(&self) -> &P {
        &self.client
    }

    /// An operator has settled every contradiction with the venue: the session stops holding
    /// them against the link, and every order they concerned is reported in doubt again
    /// (`Timeout`: the dispatcher queries it, never resends). The link becomes trusted at the
    /// next reconciliation that finds nothing else. Returns how many were cleared.
    pub fn clear_contradictions(&mut self, now_ns: u64) -> u32 {
        let (outcomes, backlog) = (&mut self.handle.outcomes, &mut self.backlog);
        self.client.clear_contradictions(now_ns, &mut |o| {
            if let Err(rtrb::PushError::Full(o)) = outcomes.push(o) {
                backlog.push(o);
            }
        })
    }

    /// From now on every message to and from the venue is handed to `tap` (the wire log).
    pub fn attach_wire_tap(&mut self, tap: crate::wirelog::WireTap) {
        self.wire = Some(tap);
    }

    /// Messages the wire log could not take (its ring was full), so far.
    pub fn wire_dropped(&self) -> u64 {
        self.wire
            .as_ref()
            .map_or(0, crate::wirelog::WireTap::dropped)
    }

    fn tap_out(&mut self, now_ns: u64, n: usize) {
        if let Some(tap) = &mut self.wire {
            tap.record(now_ns, crate::wirelog::Direction::Out, &self.scratch[..n]);
        }
    }

    /// Connection attempts that failed so far.
    pub fn connect_failures(&self) -> u64 {
        self.stats.connect_failures
    }

    /// When the next connection attempt is due (`None`: none scheduled).
    pub fn reconnect_at_ns(&self) -> Option<u64> {
        self.reconnect_at_ns
    }

    /// An operator asks for a new session: a link waiting to reconnect tries now; a
    /// connected one is closed as if the connection were lost (orders in flight become
    /// unknown and are queried after the next login, never resent) and reconnects after the
    /// first backoff delay. A connection attempt under way is left to finish.
    pub fn reconnect(&mut self, now_ns: u64, reactor: &mut impl Transport) {
        self.stats.operator_reconnects += 1;
        match self.machine.state() {
            LinkState::Connecting => {}
            LinkState::Disconnected => {
                if self.reconnect_at_ns.is_some() {
                    self.reconnect_at_ns = Some(now_ns);
                }
            }
            LinkState::Connected
            | LinkState::Reconciling
            | LinkState::Synced
            | LinkState::ReadOnly => {
                if let Some(conn) = self.conn.take() {
                    reactor.close(conn);
                }
                self.event(now_ns, reactor, SessionEvent::ConnectionLost);
            }
        }
    }

    /// An operator has checked the account against the venue and asks keel to trust the
    /// link again (`keel ctl reconcile VENUE`). Only on a READ-ONLY link: every contradiction
    /// is cleared (each order it concerned, if open, is in doubt again and queried, never
    /// assumed) and the reconciliation query goes out now. The link trades again only if the
    /// venue's answer settles everything; otherwise it stays READ-ONLY. Returns the
    /// contradictions cleared, or `None` (nothing done) on a link in another state.
    pub fn reconcile_on_demand(
        &mut self,
        now_ns: u64,
        reactor: &mut impl Transport,
    ) -> Option<u32> {
        if self.machine.state() != LinkState::ReadOnly {
            return None;
        }
        let backlog = &mut self.backlog;
        let cleared = self
            .client
            .clear_contradictions(now_ns, &mut |o| backlog.push(o));
        self.stats.contradictions_cleared += u64::from(cleared);
        self.reconcile_at_ns = None;
        self.event(now_ns, reactor, SessionEvent::OperatorReconcile);
        self.flush_backlog();
        Some(cleared)
    }

    /// keel is stopping gracefully: the link never connects again, and a logged-on session
    /// says goodbye the protocol's way (FIX: a Logout now; the venue's Logout closes the
    /// session on a later pass). Returns whether a goodbye went out (then the caller keeps
    /// stepping the link, for a bounded time, until it is DISCONNECTED).
    pub fn log_out(&mut self, now_ns: u64, reactor: &mut impl Transport) -> bool {
        self.stopping = true;
        self.reconnect_at_ns = None;
        let logged_on = matches!(
            self.machine.state(),
            LinkState::Reconciling | LinkState::Synced | LinkState::ReadOnly
        );
        if !logged_on || self.conn.is_none() || !self.client.begin_logout() {
            return false;
        }
        self.send_owed(now_ns, reactor);
        let _ = reactor.flush();
        true
    }

    /// Starts the session (first connection attempt).
    pub fn start(&mut self, now_ns: u64, reactor: &mut impl Transport) {
        self.event(now_ns, reactor, SessionEvent::Start);
    }

    /// Reacts to a reactor event (ignores events for other connections).
    pub fn on_event(&mut self, now_ns: u64, reactor: &mut impl Transport, event: &NetEvent) {
        let Some(conn) = self.conn else { return };
        match *event {
            NetEvent::Connected { conn: c } if c == conn => {
                self.last_rx_ns = now_ns;
                self.event(now_ns, reactor, SessionEvent::TcpConnected);
            }
            NetEvent::ConnectFailed { conn: c, errno } if c == conn => {
                self.conn = None;
                self.stats.connect_failures += 1;
                self.stats.last_os_error = errno;
                self.event(now_ns, reactor, SessionEvent::TcpFailed);
            }
            NetEvent::Closed { conn: c, .. } if c == conn => {
                self.conn = None;
                self.event(now_ns, reactor, SessionEvent::ConnectionLost);
            }
            _ => {}
        }
    }

    /// One pass: backlog, timers, venue packets, requests, heartbeats.
    pub fn step(&mut self, now_ns: u64, reactor: &mut impl Transport) {
        let gap_ns = now_ns.saturating_sub(self.last_step_ns);
        if self.last_step_ns != 0 && gap_ns > self.config.heartbeat_interval_ns {
            self.stats.loop_stalls += 1;
            self.stats.last_loop_stall_ns = gap_ns;
            self.silence_from_ns = now_ns;
        }
        self.last_step_ns = now_ns;
        self.flush_backlog();
        if self.reconnect_at_ns.is_some_and(|at| now_ns >= at) {
            self.reconnect_at_ns = None;
            self.event(now_ns, reactor, SessionEvent::ReconnectDue);
        }
        let state = self.machine.state();
        if self.reconcile_at_ns.is_some_and(|at| now_ns >= at) {
            self.reconcile_at_ns = None;
            if state == LinkState::ReadOnly {
                self.event(now_ns, reactor, SessionEvent::ReconcileRetryDue);
            }
        }
        let reconciling = matches!(state, LinkState::Reconciling | LinkState::ReadOnly);
        if reconciling && now_ns >= self.machine.reconcile_deadline_ns() {
            return self.event(now_ns, reactor, SessionEvent::ReconcileTimeout);
        }
        if !matches!(state, LinkState::Synced | LinkState::ReadOnly) {
            self.return_unsent(now_ns);
        }
        let Some(conn) = self.conn.filter(|_| {
            matches!(
                state,
                LinkState::Connected
                    | LinkState::Reconciling
                    | LinkState::Synced
                    | LinkState::ReadOnly
            )
        }) else {
            return;
        };
        // What arrived is read before silence is judged: after a stall of keel's own loop the
        // venue's heartbeats wait in the socket, and they are its answer.
        self.read(now_ns, reactor, conn);
        if self.conn != Some(conn) {
            return;
        }
        let silent_ns = self
            .config
            .heartbeat_interval_ns
            .saturating_mul(u64::from(self.config.silent_intervals_max));
        let heard_ns = self.last_rx_ns.max(self.silence_from_ns);
        if now_ns.saturating_sub(heard_ns) > silent_ns {
            self.stats.heartbeat_timeouts += 1;
            return self.event(now_ns, reactor, SessionEvent::HeartbeatTimeout);
        }
        if matches!(
            self.machine.state(),
            LinkState::Synced | LinkState::ReadOnly
        ) {
            self.write(now_ns, reactor, conn);
        }
        if matches!(
            self.machine.state(),
            LinkState::Synced | LinkState::Reconciling | LinkState::ReadOnly
        ) {
            // Unanswered requests become Unknown (never failed, never resent).
            let (outcomes, backlog) = (&mut self.handle.outcomes, &mut self.backlog);
            self.client.expire(now_ns, &mut |o| {
                if let Err(rtrb::PushError::Full(o)) = outcomes.push(o) {
                    backlog.push(o);
                }
            });
            self.send_owed(now_ns, reactor);
        }
        if now_ns.saturating_sub(self.last_tx_ns) >= self.config.heartbeat_interval_ns {
            let n = self
                .client
                .encode_heartbeat(now_ns, &mut self.scratch)
                .expect("fits");
            if reactor.send(conn, &self.scratch[..n]).is_ok() {
                self.last_tx_ns = now_ns;
                self.tap_out(now_ns, n);
            }
        }
    }

    /// Feeds the machine and carries out its actions.
    fn event(&mut self, now_ns: u64, reactor: &mut impl Transport, event: SessionEvent) {
        let actions = match self.machine.on(now_ns, event) {
            Ok(actions) => actions,
            Err(_) => {
                self.stats.invalid_transitions += 1;
                return;
            }
        };
        for action in actions.iter() {
            self.act(now_ns, reactor, action);
        }
    }

    fn act(&mut self, now_ns: u64, reactor: &mut impl Transport, action: Action) {
        match action {
            Action::Connect => {
                // One connection per link: the machine asks for a connection only from
                // DISCONNECTED, after the last one was closed and forgotten.
                debug_assert!(
                    self.conn.is_none(),
                    "connecting while holding {:?}",
                    self.conn
                );
                self.connect(now_ns, reactor);
            }
            Action::SendLogin => match self.client.encode_login(now_ns, &mut self.scratch) {
                Ok(n) => self.send(now_ns, reactor, n),
                Err(_) => {
                    // A credential wider than its field (config-check refuses it): never cut,
                    // never sent; retried with backoff like a refused login.
                    self.stats.login_errors += 1;
                    self.event(now_ns, reactor, SessionEvent::LoginRejected);
                }
            },
            Action::SendReconcileQuery => {
                let n = self
                    .client
                    .encode_reconcile_query(now_ns, &mut self.scratch)
                    .expect("fits");
                self.stats.reconcile_queries += 1;
                self.send(now_ns, reactor, n);
            }
            Action::Close => {
                if let Some(conn) = self.conn.take() {
                    // What the protocol owed the venue this pass (a FIX Logout) is handed to
                    // the network before the socket shuts.
                    let _ = reactor.flush();
                    reactor.close(conn);
                }
            }
            Action::MarkInFlightUnknown => {
                let backlog = &mut self.backlog;
                self.stats.marked_unknown += self
                    .client
                    .mark_in_flight_unknown(now_ns, &mut |o| backlog.push(o));
            }
            Action::ScheduleReconnect { at_ns } => {
                self.reconcile_at_ns = None;
                // A stopping link stays down.
                self.reconnect_at_ns = (!self.stopping).then_some(at_ns);
            }
            Action::ScheduleReconcile { at_ns } => self.reconcile_at_ns = Some(at_ns),
            Action::Report { mode } => self.report_mode(now_ns, mode),
        }
        self.flush_backlog();
    }

    /// Opens the link's connection; a failure (no slot, no socket) is treated like a refused
    /// connect (backoff, retry).
    fn connect(&mut self, now_ns: u64, reactor: &mut impl Transport) {
        match reactor.connect(self.addr) {
            Ok(conn) => self.conn = Some(conn),
            Err(e) => {
                self.stats.connect_failures += 1;
                self.stats.last_os_error = match e {
                    crate::net::NetError::Io { source, .. } => source.raw_os_error().unwrap_or(0),
                    _ => 0,
                };
                self.event(now_ns, reactor, SessionEvent::TcpFailed)
            }
        }
    }

    fn report_mode(&mut self, now_ns: u64, mode: LinkMode) {
        self.backlog.push(Outcome {
            venue: self.venue,
            received_ns: now_ns,
            seq: 0,
            kind: OutcomeKind::LinkState { mode },
        });
    }

    /// The dispatcher's order table refused one of this link's reports: stop trusting the
    /// link (read-only, reconcile), and answer with the mode so the dispatcher knows its
    /// request was seen.
    fn reconcile_requested(&mut self, now_ns: u64, reactor: &mut impl Transport) {
        self.event(now_ns, reactor, SessionEvent::Contradiction);
        let mode = match self.machine.state() {
            LinkState::Synced => LinkMode::Trading,
            LinkState::ReadOnly | LinkState::Reconciling => LinkMode::ReadOnly,
            _ => LinkMode::Down,
        };
        self.report_mode(now_ns, mode);
    }

    fn send(&mut self, now_ns: u64, reactor: &mut impl Transport, n: usize) {
        if let Some(conn) = self.conn {
            if reactor.send(conn, &self.scratch[..n]).is_ok() {
                self.last_tx_ns = now_ns;
                self.tap_out(now_ns, n);
            }
        }
    }

    /// Sends every message the protocol's session layer owes the venue.
    fn send_owed(&mut self, now_ns: u64, reactor: &mut impl Transport) {
        while let Some(n) = self.client.encode_session(now_ns, &mut self.scratch) {
            self.send(now_ns, reactor, n);
        }
    }

    fn flush_backlog(&mut self) {
        let mut sent = 0;
        for outcome in &self.backlog {
            if self.handle.outcomes.push(*outcome).is_err() {
                break;
            }
            sent += 1;
        }
        self.backlog.drain(..sent);
    }

    fn read(&mut self, now_ns: u64, reactor: &mut impl Transport, conn: ConnId) {
        // A packet yields at most one outcome (a reconciliation answer a few): read only while
        // the outcome ring has room, so the venue waits in TCP rather than outcomes being lost.
        while self.handle.outcomes.slots() > 1 {
            let (outcomes, backlog) = (&mut self.handle.outcomes, &mut self.backlog);
            let decoded = self.client.decode(
                now_ns,
                reactor.received(conn),
                self.config.max_packet_len,
                &mut |o| {
                    if let Err(rtrb::PushError::Full(o)) = outcomes.push(o) {
                        backlog.push(o);
                    }
                },
            );
            let news = match decoded {
                Ok(Some(message)) => {
                    if message.news != SessionNews::Unreadable {
                        self.last_rx_ns = now_ns;
                    }
                    if let Some(tap) = &mut self.wire {
                        let bytes = reactor.received(conn);
                        let whole = &bytes[..message.len.min(bytes.len())];
                        tap.record(now_ns, crate::wirelog::Direction::In, whole);
                    }
                    reactor.consume(conn, message.len);
                    // What the message asked of the session layer (a Heartbeat for a
                    // TestRequest, a GapFill for a ResendRequest) goes out before any event
                    // the message causes (a Logout before the connection closes).
                    self.send_owed(now_ns, reactor);
                    message.news
                }
                Ok(None) => return,
                Err(e) => return self.malformed(now_ns, reactor, e),
            };
            let event = match news {
                SessionNews::LoggedIn { .. } => SessionEvent::LoginAccepted,
                SessionNews::LoginRejected => SessionEvent::LoginRejected,
                SessionNews::EndOfSession => SessionEvent::ConnectionLost,
                SessionNews::Reconciled(r) => SessionEvent::ReconcileComplete {
                    unresolved: r.unresolved(),
                },
                SessionNews::Contradicted(_) => SessionEvent::Contradiction,
                SessionNews::Nothing | SessionNews::Unreadable => continue,
            };
            self.event(now_ns, reactor, event);
            if self.conn != Some(conn) {
                return;
            }
        }
    }

    fn write(&mut self, now_ns: u64, reactor: &mut impl Transport, conn: ConnId) {
        while let Ok(request) = self.handle.requests.peek().copied() {
            if self.machine.state() != LinkState::Synced && request.kind.enters_order() {
                // Read-only: a new order or replace released before the dispatcher learned it
                // never leaves; it is handed back refused.
                let (id, _) = UnsentRequest::of(&request.kind);
                self.stats.refused_read_only += 1;
                self.backlog.push(Outcome {
                    venue: self.venue,
                    received_ns: now_ns,
                    seq: 0,
                    kind: OutcomeKind::Refused {
                        id,
                        reason: RefusalReason::LinkReadOnly,
                    },
                });
                let _ = self.handle.requests.pop();
                continue;
            }
            if let RequestKind::Reconcile { .. } = request.kind {
                let _ = self.handle.requests.pop();
                self.reconcile_requested(now_ns, reactor);
                if self.conn != Some(conn) {
                    return;
                }
                continue;
            }
            match self.client.encode_request(&request, &mut self.scratch) {
                Ok(n) => {
                    if reactor.send(conn, &self.scratch[..n]).is_err() {
                        return; // send buffer full: the request waits in the ring
                    }
                    self.tap_out(now_ns, n);
                    self.stats.requests_sent += 1;
                    self.stats.orders_entered += u64::from(request.kind.enters_order());
                    self.last_tx_ns = now_ns;
                }
                Err(e) => self.refuse(now_ns, &request.kind, e),
            }
            let _ = self.handle.requests.pop();
        }
    }

    /// Hands back every request in the ring while the link is not SYNCED: nothing the
    /// dispatcher released goes out late on a new connection (a stale order, or a burst past
    /// the rate limit); the dispatcher refuses or requeues each. Stops when the outcome ring is
    /// full (the rest wait for the next pass: nothing is dropped).
    fn return_unsent(&mut self, now_ns: u64) {
        while self.handle.outcomes.slots() > 0 {
            let Ok(request) = self.handle.requests.pop() else {
                return;
            };
            let (id, request) = UnsentRequest::of(&request.kind);
            let outcome = Outcome {
                venue: self.venue,
                received_ns: now_ns,
                seq: 0,
                kind: OutcomeKind::NotSent { id, request },
            };
            self.stats.returned_unsent += 1;
            if let Err(rtrb::PushError::Full(o)) = self.handle.outcomes.push(outcome) {
                self.backlog.push(o); // not reached: room was checked
            }
        }
    }

    /// A request the wire cannot carry: answered to the dispatcher, never dropped silently.
    fn refuse(&mut self, now_ns: u64, kind: &RequestKind, error: RequestError) {
        self.stats.request_errors += 1;
        let outcome = match (kind, error) {
            (RequestKind::New(_) | RequestKind::Replace(_), RequestError::SessionFull { .. }) => {
                Some(OutcomeKind::Refused {
                    id: UnsentRequest::of(kind).0,
                    reason: RefusalReason::SessionFull,
                })
            }
            (RequestKind::Cancel { id }, RequestError::UnknownOrder(_)) => {
                Some(OutcomeKind::CancelRejected {
                    id: *id,
                    reason: CancelRejectReason::UnknownOrder,
                })
            }
            (RequestKind::New(o), _) => Some(OutcomeKind::Rejected {
                id: o.id,
                reason: crate::order::RejectReason::Invalid,
            }),
            (RequestKind::Replace(r), _) => Some(OutcomeKind::Rejected {
                id: r.new_id,
                reason: crate::order::RejectReason::Invalid,
            }),
            _ => None,
        };
        if let Some(kind) = outcome {
            self.backlog.push(Outcome {
                venue: self.venue,
                received_ns: now_ns,
                seq: 0,
                kind,
            });
        }
    }

    fn malformed(&mut self, now_ns: u64, reactor: &mut impl Transport, error: DecodeError) {
        self.stats.decode_errors += 1;
        self.stats.last_decode_error = Some(error);
        self.event(now_ns, reactor, SessionEvent::ConnectionLost);
    }
}
