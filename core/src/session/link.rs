//! A venue link over the io_uring reactor: connects, logs in, pumps dispatcher requests to the
//! venue and venue answers back as outcomes, and keeps the line alive with heartbeats.
//!
//! Scope today: one connection attempt per [`VenueLink::start`]; on login the link reports
//! `LinkState { synced: true }`, on any disconnect `synced: false`. Reconnect with backoff,
//! reconciliation before SYNCED and ack timeouts are the session state machine's job (next
//! issue); this driver is the wire underneath it.

use std::net::SocketAddr;

use super::ouch::{OuchClient, RequestError, SessionNews};
use crate::dispatch::VenueHandle;
use crate::net::{ConnId, NetError, NetEvent, Reactor};
use crate::order::{CancelRejectReason, Outcome, OutcomeKind, RequestKind, VenueId};
use crate::proto::soupbin::frame;
use crate::proto::DecodeError;

/// Where the link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No connection.
    Disconnected,
    /// TCP connect in progress.
    Connecting(ConnId),
    /// Login sent, no answer yet.
    LoggingIn(ConnId),
    /// Logged in: orders flow.
    LoggedIn(ConnId),
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Connections lost or refused.
    pub disconnects: u64,
    /// Venue bytes that did not decode (the connection was closed).
    pub decode_errors: u64,
    /// The last decode error.
    pub last_decode_error: Option<DecodeError>,
    /// Requests that could not be encoded (answered to the dispatcher where possible).
    pub request_errors: u64,
    /// Requests written.
    pub requests_sent: u64,
}

/// A venue link. See the module docs.
#[derive(Debug)]
pub struct VenueLink {
    addr: SocketAddr,
    venue: VenueId,
    client: OuchClient,
    handle: VenueHandle,
    phase: Phase,
    heartbeat_interval_ns: u64,
    max_packet_len: u16,
    last_tx_ns: u64,
    scratch: [u8; 512],
    /// A link-state change the outcome ring could not take yet (delivered on the next step).
    pending_link_state: Option<bool>,
    stats: LinkStats,
}

impl VenueLink {
    /// A link to `addr` carrying `venue`'s rings.
    pub fn new(addr: SocketAddr, venue: VenueId, client: OuchClient, handle: VenueHandle) -> Self {
        Self {
            addr,
            venue,
            client,
            handle,
            phase: Phase::Disconnected,
            heartbeat_interval_ns: 1_000_000_000,
            max_packet_len: 1024,
            last_tx_ns: 0,
            scratch: [0; 512],
            pending_link_state: None,
            stats: LinkStats::default(),
        }
    }

    /// Where the link is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The OUCH client (sequence numbers, id mapping, its counters).
    pub fn client(&self) -> &OuchClient {
        &self.client
    }

    /// Starts connecting.
    pub fn start(&mut self, reactor: &mut Reactor) -> Result<(), NetError> {
        assert_eq!(
            self.phase,
            Phase::Disconnected,
            "start only from Disconnected"
        );
        self.phase = Phase::Connecting(reactor.connect(self.addr)?);
        Ok(())
    }

    /// Reacts to a reactor event (ignores events for other connections).
    pub fn on_event(&mut self, now_ns: u64, reactor: &mut Reactor, event: &NetEvent) {
        match (self.phase, *event) {
            (Phase::Connecting(c), NetEvent::Connected { conn }) if c == conn => {
                let n = self
                    .client
                    .encode_login(&mut self.scratch)
                    .expect("login fits the scratch buffer");
                if reactor.send(conn, &self.scratch[..n]).is_ok() {
                    self.last_tx_ns = now_ns;
                    self.phase = Phase::LoggingIn(conn);
                }
            }
            (Phase::Connecting(c), NetEvent::ConnectFailed { conn, .. }) if c == conn => {
                self.lost(now_ns)
            }
            (Phase::LoggingIn(c) | Phase::LoggedIn(c), NetEvent::Closed { conn, .. })
                if c == conn =>
            {
                self.lost(now_ns)
            }
            _ => {}
        }
    }

    /// Reads venue packets, writes pending requests, sends a heartbeat when idle.
    pub fn step(&mut self, now_ns: u64, reactor: &mut Reactor) {
        if let Some(synced) = self.pending_link_state.take() {
            self.link_state(now_ns, synced);
        }
        let (Phase::LoggingIn(conn) | Phase::LoggedIn(conn)) = self.phase else {
            return;
        };
        self.read(now_ns, reactor, conn);
        if let Phase::LoggedIn(conn) = self.phase {
            self.write(now_ns, reactor, conn);
            if now_ns.saturating_sub(self.last_tx_ns) >= self.heartbeat_interval_ns {
                let n = OuchClient::encode_heartbeat(&mut self.scratch).expect("fits");
                if reactor.send(conn, &self.scratch[..n]).is_ok() {
                    self.last_tx_ns = now_ns;
                }
            }
        }
    }

    fn read(&mut self, now_ns: u64, reactor: &mut Reactor, conn: ConnId) {
        // Each packet yields at most one outcome: read only while the outcome ring has room.
        while self.handle.outcomes.slots() > 1 {
            let f = match frame(reactor.received(conn), self.max_packet_len) {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => return self.malformed(reactor, conn, e),
            };
            let (packet_type, len) = (f.packet_type, f.len);
            let mut payload = [0u8; 1024];
            payload[..f.payload.len()].copy_from_slice(f.payload);
            let payload_len = f.payload.len();
            reactor.consume(conn, len);
            let outcomes = &mut self.handle.outcomes;
            let news =
                self.client
                    .on_packet(now_ns, packet_type, &payload[..payload_len], &mut |o| {
                        outcomes.push(o).expect("room was checked");
                    });
            match news {
                Ok(SessionNews::LoggedIn { .. }) => {
                    self.phase = Phase::LoggedIn(conn);
                    self.link_state(now_ns, true);
                }
                Ok(SessionNews::LoginRejected | SessionNews::EndOfSession) => {
                    reactor.close(conn);
                    return;
                }
                Ok(SessionNews::Nothing) => {}
                Err(e) => return self.malformed(reactor, conn, e),
            }
        }
    }

    fn write(&mut self, now_ns: u64, reactor: &mut Reactor, conn: ConnId) {
        while let Ok(request) = self.handle.requests.peek().copied() {
            match self.client.encode_request(&request, &mut self.scratch) {
                Ok(n) => {
                    if reactor.send(conn, &self.scratch[..n]).is_err() {
                        return; // send buffer full: the request waits in the ring
                    }
                    self.stats.requests_sent += 1;
                    self.last_tx_ns = now_ns;
                }
                Err(e) => self.refuse(now_ns, &request.kind, e),
            }
            let _ = self.handle.requests.pop();
        }
    }

    /// A request the wire cannot carry: answered to the dispatcher, never dropped silently.
    fn refuse(&mut self, now_ns: u64, kind: &RequestKind, error: RequestError) {
        self.stats.request_errors += 1;
        let outcome = match (kind, error) {
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
            // The outcome ring has room: read() keeps a slot spare and requests are few.
            let _ = self.handle.outcomes.push(Outcome {
                venue: self.venue,
                received_ns: now_ns,
                kind,
            });
        }
    }

    fn malformed(&mut self, reactor: &mut Reactor, conn: ConnId, error: DecodeError) {
        self.stats.decode_errors += 1;
        self.stats.last_decode_error = Some(error);
        reactor.close(conn);
    }

    fn lost(&mut self, now_ns: u64) {
        let was_logged_in = matches!(self.phase, Phase::LoggedIn(_));
        self.phase = Phase::Disconnected;
        self.stats.disconnects += 1;
        if was_logged_in {
            self.link_state(now_ns, false);
        }
    }

    fn link_state(&mut self, now_ns: u64, synced: bool) {
        let outcome = Outcome {
            venue: self.venue,
            received_ns: now_ns,
            kind: OutcomeKind::LinkState { synced },
        };
        // Link state must never be lost: if the ring is full, it is retried on the next step.
        if self.handle.outcomes.push(outcome).is_err() {
            self.pending_link_state = Some(synced);
        }
    }
}
