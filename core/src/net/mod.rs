//! Networking: the transport seam ([`Transport`] and the types every transport shares) and its
//! drivers. `uring` is keel's TCP transport over io_uring: one ring per event-loop
//! thread, connection slots and registered buffers allocated at start, no allocation per
//! message. There is no epoll fallback: when io_uring is unavailable, [`uring::Reactor::new`]
//! fails with [`NetError::Unavailable`] naming the cause (see docs/operations.md).

#[cfg(feature = "simulator")]
pub mod sim;
pub mod uring;

use std::net::SocketAddr;

/// A connection, by slot and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    slot: u32,
    generation: u32,
}

impl ConnId {
    /// An id for another transport's connection table (the simulated network).
    pub fn new(slot: u32, generation: u32) -> Self {
        Self { slot, generation }
    }

    /// The slot.
    pub fn slot(self) -> u32 {
        self.slot
    }
}

/// A listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(pub u32);

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed its side (read returned 0).
    PeerClosed,
    /// The peer reset the connection.
    Reset,
    /// Another socket error (errno).
    Error(i32),
    /// Closed by the owner.
    Local,
}

/// What happened, as reported by [`Transport::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetEvent {
    /// A listener accepted a connection.
    Accepted {
        /// Which listener.
        listener: ListenerId,
        /// The new connection.
        conn: ConnId,
    },
    /// An outgoing connection is established.
    Connected {
        /// The connection.
        conn: ConnId,
    },
    /// An outgoing connection failed (its slot is already free).
    ConnectFailed {
        /// The connection.
        conn: ConnId,
        /// errno.
        errno: i32,
    },
    /// New bytes arrived in the connection's receive buffer (edge-triggered: bytes the owner
    /// leaves unconsumed are not announced again).
    Readable {
        /// The connection.
        conn: ConnId,
    },
    /// The connection is closed and its slot free.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
    /// A timer set with `Reactor::set_timer` expired.
    Timer {
        /// The caller's token.
        token: u64,
    },
}

/// Transport errors (edges: set-up and misuse), with the offending values.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// io_uring cannot be used on this host.
    #[error("io_uring unavailable: {source} (kernel.io_uring_disabled = {disabled}); keel needs io_uring for venue links, see docs/operations.md")]
    Unavailable {
        /// The error from io_uring_setup.
        source: std::io::Error,
        /// The sysctl's value, or "not present".
        disabled: String,
    },
    /// A system call failed.
    #[error("{call}: {source}")]
    Io {
        /// Which call.
        call: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Every connection slot is taken.
    #[error("all {conns_max} connection slots in use")]
    NoFreeSlot {
        /// The configured bound.
        conns_max: u32,
    },
    /// The send buffer cannot take the bytes now.
    #[error("send buffer full: {len} bytes offered, {free} free")]
    SendBufferFull {
        /// Bytes offered.
        len: u32,
        /// Bytes free.
        free: u32,
    },
    /// The connection is not open (closed, closing, or a stale id).
    #[error("connection not open")]
    NotOpen,
    /// Too many timers pending.
    #[error("timer table full ({timers_max})")]
    TimersFull {
        /// The configured bound.
        timers_max: u32,
    },
    /// Only IPv4 addresses are supported.
    #[error("address {0} is not IPv4")]
    NotIpv4(SocketAddr),
    /// More connection slots than one ring can register buffers for (two per slot, and the
    /// kernel registers at most 16,384): run more reactors.
    #[error("conns_max = {conns_max}: at most {limit} connections per reactor")]
    TooManyConnections {
        /// Asked.
        conns_max: u32,
        /// Allowed.
        limit: u32,
    },
}

/// What the session, feed and venue drivers need from a transport: keel's io_uring
/// [`Reactor`] in production, the simulated network (`sim::SimEndpoint`, feature `simulator`)
/// in deterministic tests.
pub trait Transport {
    /// Listens on `addr` (port 0 picks a free port) and starts accepting: each connection is
    /// reported as [`NetEvent::Accepted`]. Returns the listener and the address bound.
    fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError>;
    /// Starts connecting; `Connected` or `ConnectFailed` follows from `poll`.
    fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError>;
    /// Queues bytes, all or nothing.
    fn send(&mut self, conn: ConnId, bytes: &[u8]) -> Result<(), NetError>;
    /// Bytes received and not yet consumed.
    fn received(&self, conn: ConnId) -> &[u8];
    /// Drops the first `n` received bytes.
    fn consume(&mut self, conn: ConnId, n: usize);
    /// Closes a connection; `Closed` follows.
    fn close(&mut self, conn: ConnId);
    /// Moves what is pending and reports events.
    fn poll(
        &mut self,
        now_ns: u64,
        timeout_ns: u64,
        events: &mut Vec<NetEvent>,
    ) -> Result<(), NetError>;
    /// Hands queued work to the network now.
    fn flush(&mut self) -> Result<(), NetError>;
    /// Bytes queued for `conn` and not yet written (a transport that writes at once: 0).
    fn send_pending(&self, _conn: ConnId) -> u32 {
        0
    }
}

impl Transport for Reactor {
    fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
        Reactor::listen(self, addr)
    }
    fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError> {
        Reactor::connect(self, addr)
    }
    fn send(&mut self, conn: ConnId, bytes: &[u8]) -> Result<(), NetError> {
        Reactor::send(self, conn, bytes)
    }
    fn received(&self, conn: ConnId) -> &[u8] {
        Reactor::received(self, conn)
    }
    fn consume(&mut self, conn: ConnId, n: usize) {
        Reactor::consume(self, conn, n)
    }
    fn close(&mut self, conn: ConnId) {
        Reactor::close(self, conn)
    }
    fn poll(
        &mut self,
        now_ns: u64,
        timeout_ns: u64,
        events: &mut Vec<NetEvent>,
    ) -> Result<(), NetError> {
        Reactor::poll(self, now_ns, timeout_ns, events)
    }
    fn flush(&mut self) -> Result<(), NetError> {
        Reactor::flush(self)
    }
    fn send_pending(&self, conn: ConnId) -> u32 {
        Reactor::send_pending(self, conn)
    }
}

pub use uring::{Reactor, ReactorConfig, WaitMode};
