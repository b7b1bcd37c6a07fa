//! Networking drivers. `uring` is keel's TCP transport over io_uring: one ring per event-loop
//! thread, connection slots and registered buffers allocated at start, no allocation per
//! message. There is no epoll fallback: when io_uring is unavailable, [`uring::Reactor::new`]
//! fails with [`NetError::Unavailable`] naming the cause (see docs/operations.md).

#[cfg(feature = "simulator")]
pub mod sim;
pub mod uring;

use std::net::SocketAddr;

/// What the session and venue drivers need from a transport: keel's io_uring [`Reactor`] in
/// production, the simulated network ([`sim::SimEndpoint`]) in deterministic tests.
pub trait Transport {
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

pub use uring::{
    CloseReason, ConnId, ListenerId, NetError, NetEvent, Reactor, ReactorConfig, WaitMode,
};
