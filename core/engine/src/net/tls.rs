//! TLS over any [`Transport`]: [`Tls<T>`] wraps a transport (io_uring, epoll, the simulated
//! network) and is itself a [`Transport`], so the protocol code that is generic over the seam
//! (the HTTP client, the WebSocket feed handler, the venue's market-data and REST servers) runs
//! over TLS unchanged. It owns the rustls state of each TLS connection, a bounded plaintext
//! receive buffer and a bounded ciphertext staging buffer per connection; it never touches
//! plaintext connections (they pass straight through to the inner transport).
//!
//! **Which connections are TLS.** Outgoing: a destination registered with
//! [`Tls::add_destination`] (so generic code calling plain [`Transport::connect`] gets TLS), or
//! one connection made with [`Tls::connect_tls`]; a connect to any other address stays
//! plaintext. Incoming: the listeners marked with [`Tls::serve_tls`] after `listen` (or made with
//! [`Tls::listen_tls`]); other listeners stay plaintext.
//!
//! **What is verified.** A client verifies the server's certificate chain and its name (DNS
//! name or IP address) with webpki: against the public roots (`webpki-roots`) by default, or
//! only against the CA certificates of a PEM file ([`client_config`]) for a private venue. There
//! is no switch that turns verification off. A server presents a chain and key read from PEM
//! files ([`server_config`]) and does not ask for client certificates.
//!
//! **What the application sees.** `Connected` and `Accepted` are reported only once the
//! handshake is complete; a handshake that fails never reaches the application as a connection:
//! a client gets `ConnectFailed { errno }` (`EPROTO` for a TLS error, `ETIMEDOUT` for a handshake
//! that took longer than `handshake_timeout_ns`, `ECONNRESET` for a peer that hung up), a server
//! counts it and closes the socket. The typed error is kept ([`Tls::last_error`], the last
//! [`ERRORS_KEPT`] of them), counted ([`TlsStats`]) and logged (`tracing::warn!` with the rustls
//! text, e.g. "invalid peer certificate: UnknownIssuer"). Before closing, the alert rustls
//! queued for the peer is written (for at most [`FAIL_LINGER_NS`]) so the peer learns why.
//!
//! Connection state machine, row by row (`Tls::on_inner`, `Tls::pump`):
//!
//! | state | event | next | what happens |
//! | --- | --- | --- | --- |
//! | connecting (client) | inner `Connected` | handshaking | the ClientHello is written; nothing reported |
//! | connecting (client) | inner `ConnectFailed` | gone | `ConnectFailed` passed on |
//! | (server) | inner `Accepted` on a TLS listener | handshaking | nothing reported yet |
//! | handshaking | ciphertext | handshaking / open | records processed, answers written; complete: `Connected` (client) or `Accepted` (server), then `Readable` if plaintext came with it |
//! | handshaking | TLS error, or `handshake_timeout_ns` passed | closing (failed) | error kept, counted, logged; the alert written, then the inner connection closed |
//! | handshaking | inner `Closed` | gone | client: `ConnectFailed { ECONNRESET }`; server: counted, nothing reported |
//! | open | ciphertext | open | plaintext moved into the connection's buffer (up to its bound), `Readable` |
//! | open | the peer's close_notify | closing | once the plaintext before it is in the buffer, the inner connection is closed; then `Closed { PeerClosed }` |
//! | open | TLS error (a bad record, an alert) | closing (failed) | as for a handshake error; then `Closed { Error(EPROTO) }` |
//! | open | inner `Closed` | gone | `Closed` with the inner reason (a peer that hangs up without close_notify included: the application's framing decides whether that truncated anything) |
//! | any | the owner's `close` | closing | inner connection closed; `Closed { Local }` (a client still handshaking: `Closed { Local }` too, as the socket transports report a close while connecting) |
//! | closing | inner `Closed` | gone | what the closing asked for is reported |
//!
//! A connection's plaintext stays readable until the next `poll` after its `Closed` is reported,
//! so bytes announced in the same batch as the close are not lost.
//!
//! **Bounds and back-pressure.** Received plaintext goes into a buffer of
//! `plaintext_buffer_bytes` per connection; when it is full, ciphertext is left in the inner
//! transport's receive buffer, which then stops reading from the socket (back-pressure through
//! TCP). `consume` turns reading back on at the next poll. Outgoing records are staged in at most
//! `send_buffer_bytes` per connection; `send` is all or nothing and refuses with
//! `SendBufferFull` beyond it, like the socket transports. Work per connection per poll is
//! bounded ([`RECORDS_PER_PASS`]); what is left is carried to the next poll.
//!
//! **Allocation, honestly.** The socket transports never allocate after start; this layer does.
//! rustls's buffered API allocates during the handshake (messages, certificates, keys) and per
//! record (its incoming and outgoing record buffers), and each TLS connection allocates its two
//! buffers when it is made. TLS is for market data and REST, where a venue demands it; it is
//! never on the order-entry hot path, which stays plaintext (OUCH over SoupBinTCP, FIX) on
//! private lines. A [`Tls`] with no TLS listener and no TLS destination costs one empty-table
//! lookup per call and adds no allocation.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use super::{CloseReason, ConnId, ListenerId, NetError, NetEvent, Transport};
use crate::hash::FxHashMap;

/// Records read per connection per poll at most (the rest wait for the next poll).
pub const RECORDS_PER_PASS: u32 = 64;

/// Errors kept for [`Tls::last_error`] (the oldest is dropped first).
pub const ERRORS_KEPT: usize = 64;

/// How long a connection closed for a TLS error may take to have its alert written before its
/// socket is closed anyway.
pub const FAIL_LINGER_NS: u64 = 200_000_000;

/// The largest piece of staged ciphertext handed to the inner transport at once (one TLS
/// record with its overhead fits).
const CHUNK_BYTES: usize = 17 * 1024;

/// What a TLS record adds to its plaintext at most (header, tag, padding), bytes.
const RECORD_OVERHEAD_BYTES: usize = 64;

/// The longest wait in the inner poll while a handshake may time out.
const HANDSHAKE_POLL_NS: u64 = 50_000_000;

/// Why setting TLS up failed (start-up: files, names, configuration).
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {reason}")]
    Pem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// rustls refused the configuration (a key that does not match the certificate, ...).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// Not a DNS name or IP address a certificate could be checked against.
    #[error("invalid TLS server name '{0}'")]
    ServerName(String),
    /// A listener marked TLS with no server configuration (no certificate to present).
    #[error("no TLS server configuration: give a certificate and key")]
    NoServerConfig,
    /// A TLS destination with no client configuration.
    #[error("no TLS client configuration")]
    NoClientConfig,
}

/// Why a TLS connection failed: kept by [`Tls::last_error`], counted in [`TlsStats`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TlsError {
    /// rustls refused the peer: a certificate that does not verify (unknown issuer, wrong
    /// name, expired), an alert from the peer, or bytes that are not TLS.
    #[error("{0}")]
    Rustls(rustls::Error),
    /// The handshake was not complete within `handshake_timeout_ns`.
    #[error("TLS handshake timed out")]
    HandshakeTimeout,
    /// The peer closed the connection during the handshake.
    #[error("peer closed the connection during the TLS handshake")]
    ClosedInHandshake,
}

impl TlsError {
    /// The errno-like value a client's `ConnectFailed` (or a `Closed { Error }`) carries.
    pub fn errno(&self) -> i32 {
        match self {
            TlsError::Rustls(_) => libc::EPROTO,
            TlsError::HandshakeTimeout => libc::ETIMEDOUT,
            TlsError::ClosedInHandshake => libc::ECONNRESET,
        }
    }

    /// Whether it is a certificate the local side refused.
    pub fn is_certificate(&self) -> bool {
        matches!(
            self,
            TlsError::Rustls(
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        )
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsStats {
    /// Handshakes completed as a client.
    pub client_handshakes: u64,
    /// Handshakes completed as a server.
    pub server_handshakes: u64,
    /// Handshakes that failed (any cause below, before the connection opened).
    pub handshake_failures: u64,
    /// Of the failures (in or after the handshake): certificates this side refused.
    pub certificate_errors: u64,
    /// Of the failures: alerts the peer sent.
    pub alerts_received: u64,
    /// Of the failures: other rustls errors (bytes that are not TLS, a bad record, ...).
    pub protocol_errors: u64,
    /// Handshakes past `handshake_timeout_ns`.
    pub handshake_timeouts: u64,
    /// Peers that closed during the handshake.
    pub closed_in_handshake: u64,
    /// Open connections that failed with a TLS error.
    pub open_failures: u64,
    /// close_notify alerts received.
    pub close_notify_received: u64,
    /// Plaintext bytes handed to the application.
    pub plaintext_bytes_in: u64,
    /// Plaintext bytes the application sent.
    pub plaintext_bytes_out: u64,
    /// Ciphertext bytes read from the inner transport.
    pub tls_bytes_in: u64,
    /// Ciphertext bytes handed to the inner transport.
    pub tls_bytes_out: u64,
    /// Passes that left ciphertext unread because a plaintext buffer was full.
    pub backpressure_stalls: u64,
}

/// Settings of a [`Tls`] layer.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// For TLS destinations ([`client_config`]); `None`: none can be added.
    pub client: Option<Arc<ClientConfig>>,
    /// For TLS listeners ([`server_config`]); `None`: none can be marked.
    pub server: Option<Arc<ServerConfig>>,
    /// Received plaintext held per TLS connection, bytes (the application's receive buffer).
    pub plaintext_buffer_bytes: u32,
    /// Ciphertext staged per TLS connection when the inner send buffer is full, bytes: `send`
    /// refuses beyond it.
    pub send_buffer_bytes: u32,
    /// A handshake not complete within this long of its start fails.
    pub handshake_timeout_ns: u64,
}

impl Default for TlsConfig {
    /// No client or server configuration (every connection plaintext), 64 KiB buffers, 10 s.
    fn default() -> Self {
        Self {
            client: None,
            server: None,
            plaintext_buffer_bytes: 64 * 1024,
            send_buffer_bytes: 256 * 1024,
            handshake_timeout_ns: 10_000_000_000,
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_error(what: &'static str, path: &Path, reason: impl ToString) -> TlsSetupError {
    TlsSetupError::Pem {
        what,
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Reads every certificate of a PEM file.
fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_error(what, path, "no CERTIFICATE in it"));
    }
    Ok(certs)
}

/// A client configuration that verifies servers against the CA certificates of the PEM file
/// `ca_file` only (a private venue), or against the public roots (`webpki-roots`) when `None`.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in certificates("CA file", path)? {
                roots.add(cert).map_err(|e| pem_error("CA file", path, e))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A server configuration presenting the certificate chain of the PEM file `cert_chain` (the
/// leaf first) with the private key of the PEM file `key`.
pub fn server_config(cert_chain: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let chain = certificates("certificate file", cert_chain)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error("key file", key, e))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}

/// A DNS name or IP address to verify a server's certificate against.
pub fn server_name(name: &str) -> Result<ServerName<'static>, TlsSetupError> {
    ServerName::try_from(name.to_string()).map_err(|_| TlsSetupError::ServerName(name.to_string()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A client whose TCP connect is under way.
    Connecting,
    Handshaking,
    Open,
    /// The inner connection is closed (or about to be, once the alert is written); `Closed`
    /// or `ConnectFailed` follows per `Ending`.
    Closing,
    /// The inner connection is gone; what was reported stays readable until the next poll.
    Gone,
}

/// What a closing connection reports when its inner connection is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Report(CloseReason),
    /// A client whose handshake failed.
    ConnectFailed(i32),
    /// A server connection that never opened: counted, not reported.
    Silent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server(ListenerId),
}

#[derive(Debug)]
struct Conn {
    tls: rustls::Connection,
    side: Side,
    state: State,
    ending: Ending,
    started_ns: u64,
    /// When a connection closed for an error is closed whatever is still unwritten.
    linger_until_ns: u64,
    /// Received plaintext, at most `plaintext_buffer_bytes` (allocated once, with that capacity).
    plain: Vec<u8>,
    /// Ciphertext not yet taken by the inner transport.
    out: Vec<u8>,
    /// Listed in `pump` (ciphertext or plaintext may be left to move).
    listed: bool,
}

/// A TLS layer over the transport `T`. See the module docs.
pub struct Tls<T: Transport> {
    inner: T,
    config: TlsConfig,
    destinations: Vec<(SocketAddr, ServerName<'static>)>,
    listeners: Vec<ListenerId>,
    conns: FxHashMap<ConnId, Conn>,
    /// Connections to pump at the next poll (plaintext consumed, a pass's budget spent).
    pump: Vec<ConnId>,
    /// Connections reported gone, removed at the next poll.
    gone: Vec<ConnId>,
    /// Connections closing for an error, closed once their alert is written.
    lingering: Vec<ConnId>,
    /// Connections with staged ciphertext.
    staged: Vec<ConnId>,
    /// Accepted connections closed before TLS began (their inner `Closed` is not reported).
    swallow: Vec<ConnId>,
    errors: VecDeque<(ConnId, TlsError)>,
    inner_events: Vec<NetEvent>,
    now_ns: u64,
    stats: TlsStats,
}

impl<T: Transport> std::fmt::Debug for Tls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("listeners", &self.listeners)
            .field("destinations", &self.destinations.len())
            .field("conns", &self.conns.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl<T: Transport> Tls<T> {
    /// A layer over `inner` with `config`.
    pub fn new(inner: T, config: TlsConfig) -> Self {
        Self {
            inner,
            config,
            destinations: Vec::new(),
            listeners: Vec::new(),
            conns: FxHashMap::default(),
            pump: Vec::new(),
            gone: Vec::new(),
            lingering: Vec::new(),
            staged: Vec::new(),
            swallow: Vec::new(),
            errors: VecDeque::with_capacity(ERRORS_KEPT),
            inner_events: Vec::with_capacity(256),
            now_ns: 0,
            stats: TlsStats::default(),
        }
    }

    /// A layer with no TLS at all: every call passes through to `inner`.
    pub fn plain(inner: T) -> Self {
        Self::new(inner, TlsConfig::default())
    }

    /// The inner transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The inner transport, mutably (its own calls bypass TLS: use them for plaintext
    /// connections only).
    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Counters.
    pub fn stats(&self) -> TlsStats {
        self.stats
    }

    /// Marks `addr` as a TLS destination: every later `connect(addr)` runs TLS, verifying the
    /// server's certificate for `name`.
    pub fn add_destination(
        &mut self,
        addr: SocketAddr,
        name: ServerName<'static>,
    ) -> Result<(), TlsSetupError> {
        if self.config.client.is_none() {
            return Err(TlsSetupError::NoClientConfig);
        }
        self.destinations.retain(|(a, _)| *a != addr);
        self.destinations.push((addr, name));
        Ok(())
    }

    /// Connects to `addr` over TLS, verifying the certificate for `name` (`Connected` once the
    /// handshake is complete).
    pub fn connect_tls(
        &mut self,
        addr: SocketAddr,
        name: ServerName<'static>,
    ) -> Result<ConnId, NetError> {
        let Some(client) = self.config.client.clone() else {
            return Err(NetError::NotOpen);
        };
        let tls = ClientConnection::new(client, name).map_err(|e| NetError::Io {
            call: "TLS client",
            source: std::io::Error::other(e),
        })?;
        let conn = self.inner.connect(addr)?;
        self.insert(conn, rustls::Connection::Client(tls), Side::Client);
        Ok(conn)
    }

    /// Serves TLS on `listener` (from `listen`): its connections are reported `Accepted` once
    /// their handshake is complete.
    pub fn serve_tls(&mut self, listener: ListenerId) -> Result<(), TlsSetupError> {
        if self.config.server.is_none() {
            return Err(TlsSetupError::NoServerConfig);
        }
        if !self.listeners.contains(&listener) {
            self.listeners.push(listener);
        }
        Ok(())
    }

    /// Listens on `addr` and serves TLS there.
    pub fn listen_tls(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
        if self.config.server.is_none() {
            return Err(NetError::NotOpen);
        }
        let (id, local) = self.inner.listen(addr)?;
        self.listeners.push(id);
        Ok((id, local))
    }

    /// Whether `listener` serves TLS.
    pub fn is_tls_listener(&self, listener: ListenerId) -> bool {
        self.listeners.contains(&listener)
    }

    /// Whether `conn` is a TLS connection (in any state this layer still knows).
    pub fn is_tls(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// The error a TLS connection failed with, among the last [`ERRORS_KEPT`].
    pub fn last_error(&self, conn: ConnId) -> Option<&TlsError> {
        self.errors
            .iter()
            .rev()
            .find(|(c, _)| *c == conn)
            .map(|(_, e)| e)
    }

    /// The most recent TLS error of any connection.
    pub fn latest_error(&self) -> Option<&(ConnId, TlsError)> {
        self.errors.back()
    }

    /// The negotiated protocol version of an open TLS connection.
    pub fn protocol_version(&self, conn: ConnId) -> Option<rustls::ProtocolVersion> {
        self.conns.get(&conn).and_then(|c| c.tls.protocol_version())
    }

    fn insert(&mut self, conn: ConnId, tls: rustls::Connection, side: Side) {
        let state = match side {
            Side::Client => State::Connecting,
            Side::Server(_) => State::Handshaking,
        };
        let mut tls = tls;
        // The staging buffer (`send_buffer_bytes`) is the bound on what is queued.
        tls.set_buffer_limit(None);
        let c = Conn {
            tls,
            side,
            state,
            ending: Ending::Silent,
            started_ns: self.now_ns,
            linger_until_ns: 0,
            plain: Vec::with_capacity(self.config.plaintext_buffer_bytes as usize),
            out: Vec::with_capacity(CHUNK_BYTES),
            listed: false,
        };
        self.conns.insert(conn, c);
    }

    /// Handles one event of the inner transport: passes plaintext connections' events on,
    /// runs TLS connections' state machine (see the module docs' table).
    fn on_inner(&mut self, event: NetEvent, events: &mut Vec<NetEvent>) {
        match event {
            NetEvent::Accepted { listener, conn } if self.listeners.contains(&listener) => {
                let server = self
                    .config
                    .server
                    .clone()
                    .expect("TLS listener without config");
                match ServerConnection::new(server) {
                    Ok(tls) => {
                        let tls = rustls::Connection::Server(tls);
                        self.insert(conn, tls, Side::Server(listener));
                    }
                    // rustls refusing its own configuration: nothing a peer did.
                    Err(e) => {
                        tracing::warn!(?conn, "TLS server connection refused: {e}");
                        self.stats.handshake_failures += 1;
                        self.record(conn, TlsError::Rustls(e));
                        self.swallow.push(conn);
                        self.inner.close(conn);
                    }
                }
            }
            NetEvent::Connected { conn } | NetEvent::Readable { conn }
                if self.conns.contains_key(&conn) =>
            {
                let state = self.conns[&conn].state;
                match (state, event) {
                    (State::Connecting, NetEvent::Connected { .. }) => {
                        self.to_handshaking(conn);
                    }
                    (State::Handshaking | State::Open, NetEvent::Readable { .. }) => {
                        self.pump(conn, events);
                    }
                    // Bytes for a connection that is closing: dropped with it.
                    (State::Closing | State::Gone, NetEvent::Readable { .. }) => {}
                    // A connect completing after the owner closed the connection, or an
                    // inner transport reporting out of order: nothing to do.
                    (s, e) => tracing::debug!(?conn, ?s, ?e, "TLS: inner event ignored"),
                }
            }
            NetEvent::ConnectFailed { conn, .. } if self.conns.contains_key(&conn) => {
                self.to_gone(conn);
                events.push(event);
            }
            NetEvent::Closed { conn, reason } if self.conns.contains_key(&conn) => {
                self.on_inner_closed(conn, reason, events);
            }
            NetEvent::Closed { conn, .. } if self.swallow.contains(&conn) => {
                self.swallow.retain(|c| *c != conn);
            }
            e => events.push(e),
        }
    }

    fn on_inner_closed(&mut self, conn: ConnId, reason: CloseReason, events: &mut Vec<NetEvent>) {
        let c = &self.conns[&conn];
        match (c.state, c.side) {
            (State::Connecting, _) => events.push(NetEvent::Closed { conn, reason }),
            (State::Handshaking, side) => {
                self.record(conn, TlsError::ClosedInHandshake);
                self.stats.handshake_failures += 1;
                self.stats.closed_in_handshake += 1;
                if side == Side::Client {
                    let errno = TlsError::ClosedInHandshake.errno();
                    events.push(NetEvent::ConnectFailed { conn, errno });
                }
            }
            (State::Open, _) => events.push(NetEvent::Closed { conn, reason }),
            (State::Closing, _) => match c.ending {
                Ending::Report(r) => events.push(NetEvent::Closed { conn, reason: r }),
                Ending::ConnectFailed(errno) => {
                    events.push(NetEvent::ConnectFailed { conn, errno })
                }
                Ending::Silent => {}
            },
            // An inner close reported twice cannot happen (its id is then stale); ignore it.
            (State::Gone, _) => {}
        }
        self.to_gone(conn);
    }

    fn to_handshaking(&mut self, conn: ConnId) {
        let c = self.conns.get_mut(&conn).expect("TLS connection");
        assert_eq!(c.state, State::Connecting);
        c.state = State::Handshaking;
        c.started_ns = self.now_ns;
        self.write_out(conn);
    }

    fn to_open(&mut self, conn: ConnId, events: &mut Vec<NetEvent>) {
        let c = self.conns.get_mut(&conn).expect("TLS connection");
        assert_eq!(c.state, State::Handshaking);
        c.state = State::Open;
        match c.side {
            Side::Client => {
                self.stats.client_handshakes += 1;
                events.push(NetEvent::Connected { conn });
            }
            Side::Server(listener) => {
                self.stats.server_handshakes += 1;
                events.push(NetEvent::Accepted { listener, conn });
            }
        }
    }

    fn to_gone(&mut self, conn: ConnId) {
        let c = self.conns.get_mut(&conn).expect("TLS connection");
        c.state = State::Gone;
        self.gone.push(conn);
    }

    /// Closes `conn` for `error`: kept, counted, logged; the alert rustls queued is written
    /// first (for at most [`FAIL_LINGER_NS`]).
    fn fail(&mut self, conn: ConnId, error: TlsError) {
        let c = self.conns.get_mut(&conn).expect("TLS connection");
        let handshaking = c.state == State::Handshaking;
        c.ending = match (handshaking, c.side) {
            (true, Side::Client) => Ending::ConnectFailed(error.errno()),
            (true, Side::Server(_)) => Ending::Silent,
            (false, _) => Ending::Report(CloseReason::Error(error.errno())),
        };
        c.state = State::Closing;
        c.linger_until_ns = self.now_ns.saturating_add(FAIL_LINGER_NS);
        let side = c.side;
        if handshaking {
            self.stats.handshake_failures += 1;
        } else {
            self.stats.open_failures += 1;
        }
        match &error {
            e if e.is_certificate() => self.stats.certificate_errors += 1,
            TlsError::Rustls(rustls::Error::AlertReceived(_)) => self.stats.alerts_received += 1,
            TlsError::Rustls(_) => self.stats.protocol_errors += 1,
            TlsError::HandshakeTimeout => self.stats.handshake_timeouts += 1,
            TlsError::ClosedInHandshake => self.stats.closed_in_handshake += 1,
        }
        tracing::warn!(?conn, ?side, handshaking, "TLS connection refused: {error}");
        self.record(conn, error);
        self.write_out(conn);
        self.lingering.push(conn);
    }

    fn record(&mut self, conn: ConnId, error: TlsError) {
        if self.errors.len() == ERRORS_KEPT {
            self.errors.pop_front();
        }
        self.errors.push_back((conn, error));
    }

    /// Moves ciphertext from the inner receive buffer through rustls into the plaintext buffer,
    /// within the pass's budget and the buffer's room; reports what changed.
    fn pump(&mut self, conn: ConnId, events: &mut Vec<NetEvent>) {
        let plain_before = self.conns[&conn].plain.len();
        let mut rounds = 0;
        let mut stalled = false;
        loop {
            if !self.drain_plaintext(conn) {
                stalled = true;
                break;
            }
            let c = self.conns.get_mut(&conn).expect("TLS connection");
            let mut ciphertext = self.inner.received(conn);
            if ciphertext.is_empty() || !c.tls.wants_read() {
                break;
            }
            if rounds == RECORDS_PER_PASS {
                self.list_pump(conn);
                break;
            }
            rounds += 1;
            let before = ciphertext.len();
            let read = c.tls.read_tls(&mut ciphertext);
            let n = before - ciphertext.len();
            self.inner.consume(conn, n);
            self.stats.tls_bytes_in += n as u64;
            let processed = match read {
                Ok(_) => c.tls.process_new_packets().map_err(TlsError::Rustls),
                Err(e) => Err(TlsError::Rustls(rustls::Error::General(e.to_string()))),
            };
            match processed {
                Ok(io) if io.peer_has_closed() && c.state == State::Open => {
                    self.drain_plaintext(conn);
                    self.on_close_notify(conn);
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    self.fail(conn, e);
                    return;
                }
            }
            let c = &self.conns[&conn];
            if c.state == State::Handshaking && !c.tls.is_handshaking() {
                self.to_open(conn, events);
            }
        }
        if stalled {
            self.stats.backpressure_stalls += 1;
        }
        self.write_out(conn);
        let c = &self.conns[&conn];
        if c.state == State::Open && c.plain.len() > plain_before {
            events.push(NetEvent::Readable { conn });
        }
    }

    /// Moves decrypted plaintext from rustls into the connection's buffer; false when the
    /// buffer is full and rustls still holds some (back-pressure).
    fn drain_plaintext(&mut self, conn: ConnId) -> bool {
        let cap = self.config.plaintext_buffer_bytes as usize;
        let c = self.conns.get_mut(&conn).expect("TLS connection");
        if c.state != State::Open {
            return true;
        }
        loop {
            let old = c.plain.len();
            if old == cap {
                return false; // rustls may hold more: it waits for `consume`
            }
            c.plain.resize(cap, 0);
            let read = c.tls.reader().read(&mut c.plain[old..]);
            match read {
                Ok(n) if n > 0 => {
                    c.plain.truncate(old + n);
                    self.stats.plaintext_bytes_in += n as u64;
                }
                // 0: close_notify came; WouldBlock: nothing more now; UnexpectedEof: the peer
                // hung up without close_notify (the inner close follows).
                Ok(_) | Err(_) => {
                    c.plain.truncate(old);
                    return true;
                }
            }
        }
    }

    fn on_close_notify(&mut self, conn: ConnId) {
        self.stats.close_notify_received += 1;
        let c = self.conns.get_mut(&conn).expect("TLS connection");
        assert_eq!(c.state, State::Open);
        c.state = State::Closing;
        c.ending = Ending::Report(CloseReason::PeerClosed);
        c.tls.send_close_notify();
        self.write_out(conn);
        self.inner.close(conn);
    }

    fn list_pump(&mut self, conn: ConnId) {
        let c = self.conns.get_mut(&conn).expect("TLS connection");
        if !c.listed {
            c.listed = true;
            self.pump.push(conn);
        }
    }

    /// Takes every record rustls has for the peer into the staging buffer and hands what the
    /// inner transport takes to it.
    fn write_out(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let was_staged = !c.out.is_empty();
        while c.tls.wants_write() {
            if c.tls.write_tls(&mut c.out).is_err() {
                break;
            }
        }
        self.stats.tls_bytes_out += send_staged(&mut self.inner, conn, &mut c.out);
        if !c.out.is_empty() && !was_staged {
            self.staged.push(conn);
        }
    }

    /// Per poll: connections left to pump, staged ciphertext, handshake deadlines, lingering
    /// failed connections.
    fn sweep(&mut self, events: &mut Vec<NetEvent>) {
        let mut pump = std::mem::take(&mut self.pump);
        for &conn in &pump {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.listed = false;
                if matches!(c.state, State::Handshaking | State::Open) {
                    self.pump(conn, events);
                }
            }
        }
        pump.clear();
        if self.pump.is_empty() {
            self.pump = pump;
        }
        let mut staged = std::mem::take(&mut self.staged);
        staged.retain(|&conn| {
            self.write_out_listed(conn);
            self.conns.get(&conn).is_some_and(|c| !c.out.is_empty())
        });
        self.staged = staged;
        self.expire_handshakes();
        let mut lingering = std::mem::take(&mut self.lingering);
        lingering.retain(|&conn| {
            let Some(c) = self.conns.get(&conn) else {
                return false;
            };
            if c.state != State::Closing {
                return false;
            }
            let written = c.out.is_empty() && self.inner.send_pending(conn) == 0;
            if written || self.now_ns >= c.linger_until_ns {
                self.inner.close(conn);
                return false;
            }
            true
        });
        self.lingering.extend(lingering);
    }

    /// [`Tls::write_out`] for a connection already in the staged list.
    fn write_out_listed(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        self.stats.tls_bytes_out += send_staged(&mut self.inner, conn, &mut c.out);
    }

    fn expire_handshakes(&mut self) {
        let timeout = self.config.handshake_timeout_ns;
        let now = self.now_ns;
        let mut expired: Vec<ConnId> = Vec::new();
        for (&conn, c) in &self.conns {
            let handshaking = matches!(c.state, State::Connecting | State::Handshaking);
            if handshaking && now.saturating_sub(c.started_ns) >= timeout {
                expired.push(conn);
            }
        }
        for conn in expired {
            let c = self.conns.get_mut(&conn).expect("TLS connection");
            if c.state == State::Connecting {
                // The TCP connect itself is the inner transport's to time out.
                continue;
            }
            self.fail(conn, TlsError::HandshakeTimeout);
        }
    }

    fn handshaking(&self) -> bool {
        self.conns.values().any(|c| c.state == State::Handshaking)
    }
}

impl<T: Transport> Transport for Tls<T> {
    fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
        self.inner.listen(addr)
    }

    fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError> {
        match self.destinations.iter().find(|(a, _)| *a == addr) {
            Some((_, name)) => {
                let name = name.clone();
                self.connect_tls(addr, name)
            }
            None => self.inner.connect(addr),
        }
    }

    fn send(&mut self, conn: ConnId, bytes: &[u8]) -> Result<(), NetError> {
        let Some(c) = self.conns.get_mut(&conn) else {
            return self.inner.send(conn, bytes);
        };
        if c.state != State::Open {
            return Err(NetError::NotOpen);
        }
        let records = bytes.len().div_ceil(16 * 1024).max(1);
        let needed = bytes.len() + records * RECORD_OVERHEAD_BYTES;
        let cap = self.config.send_buffer_bytes as usize;
        let free = cap.saturating_sub(c.out.len());
        if needed > free {
            return Err(NetError::SendBufferFull {
                len: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
                free: u32::try_from(free).unwrap_or(u32::MAX),
            });
        }
        c.tls
            .writer()
            .write_all(bytes)
            .map_err(|source| NetError::Io {
                call: "TLS write",
                source,
            })?;
        self.stats.plaintext_bytes_out += bytes.len() as u64;
        self.write_out(conn);
        Ok(())
    }

    fn received(&self, conn: ConnId) -> &[u8] {
        match self.conns.get(&conn) {
            Some(c) => &c.plain,
            None => self.inner.received(conn),
        }
    }

    fn consume(&mut self, conn: ConnId, n: usize) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return self.inner.consume(conn, n);
        };
        let len = c.plain.len();
        assert!(n <= len, "consumed {n} of {len} received bytes");
        c.plain.drain(..n);
        if c.state == State::Open && n > 0 {
            self.list_pump(conn);
        }
    }

    fn close(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return self.inner.close(conn);
        };
        match c.state {
            State::Connecting | State::Handshaking | State::Open => {
                if c.state == State::Open {
                    c.tls.send_close_notify();
                }
                c.state = State::Closing;
                c.ending = Ending::Report(CloseReason::Local);
                self.write_out(conn);
                self.inner.close(conn);
            }
            State::Closing | State::Gone => {}
        }
    }

    fn poll(
        &mut self,
        now_ns: u64,
        timeout_ns: u64,
        events: &mut Vec<NetEvent>,
    ) -> Result<(), NetError> {
        self.now_ns = now_ns;
        for conn in self.gone.drain(..) {
            self.conns.remove(&conn);
        }
        if self.conns.is_empty() && self.listeners.is_empty() {
            return self.inner.poll(now_ns, timeout_ns, events);
        }
        let busy = !self.pump.is_empty() || !self.lingering.is_empty() || !self.staged.is_empty();
        let timeout_ns = match (busy, self.handshaking()) {
            (true, _) => 0,
            (false, true) => timeout_ns.min(HANDSHAKE_POLL_NS),
            (false, false) => timeout_ns,
        };
        let mut inner_events = std::mem::take(&mut self.inner_events);
        inner_events.clear();
        let polled = self.inner.poll(now_ns, timeout_ns, &mut inner_events);
        for &e in &inner_events {
            self.on_inner(e, events);
        }
        self.inner_events = inner_events;
        self.sweep(events);
        polled
    }

    fn flush(&mut self) -> Result<(), NetError> {
        let mut staged = std::mem::take(&mut self.staged);
        staged.retain(|&conn| {
            self.write_out_listed(conn);
            self.conns.get(&conn).is_some_and(|c| !c.out.is_empty())
        });
        self.staged = staged;
        self.inner.flush()
    }

    fn send_pending(&self, conn: ConnId) -> u32 {
        let staged = self.conns.get(&conn).map_or(0, |c| c.out.len());
        let staged = u32::try_from(staged).unwrap_or(u32::MAX);
        self.inner.send_pending(conn).saturating_add(staged)
    }
}

/// Hands staged ciphertext to `inner` in chunks of [`CHUNK_BYTES`] until it takes no more;
/// drops what it took from `out` and returns how many bytes that was.
fn send_staged<T: Transport>(inner: &mut T, conn: ConnId, out: &mut Vec<u8>) -> u64 {
    let mut sent = 0;
    while sent < out.len() {
        let end = (sent + CHUNK_BYTES).min(out.len());
        if inner.send(conn, &out[sent..end]).is_err() {
            break;
        }
        sent = end;
    }
    out.drain(..sent);
    sent as u64
}

/// A [`Tls`] over a socket transport is one too (the venue opens its transport this way).
impl<T: super::SocketTransport> Tls<T> {
    /// Opens the inner socket transport and wraps it.
    pub fn open(reactor: super::ReactorConfig, config: TlsConfig) -> Result<Self, NetError> {
        Ok(Self::new(T::open(reactor)?, config))
    }
}
