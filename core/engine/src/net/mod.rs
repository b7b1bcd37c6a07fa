//! Networking: the transport seam ([`Transport`] and the types every transport shares) and its
//! drivers. Two transports run over real TCP sockets with the same observable behaviour (the
//! tests in `net/tests.rs` run every case against both):
//!
//! - `uring` ([`Reactor`]): io_uring, one ring per event-loop thread, connection slots and
//!   registered buffers allocated at start. The default.
//! - `epoll` ([`EpollReactor`]): non-blocking sockets and epoll, the same slots and buffers. It
//!   runs where io_uring is disabled (`kernel.io_uring_disabled`, container seccomp profiles),
//!   and it is the one a kernel-bypass stack that intercepts BSD socket calls (Onload, VMA) can
//!   accelerate.
//!
//! Neither allocates per message. Which one a process runs on is a [`TransportKind`]; when
//! io_uring is asked for and cannot be set up ([`NetError::Unavailable`]), the rule of
//! [`TransportKind::fallback`] moves the process to epoll with a warning (docs/operations.md,
//! "Transports"). A third, the simulated network (`keel_venue::simnet`), is an
//! in-memory network for deterministic tests, outside this package. [`Tls`] (`tls`) wraps any of them and is a transport itself: TLS
//! for market data and REST, never for order entry.

pub mod epoll;
pub mod socket;
pub mod tls;
pub mod uring;
pub mod xdp;

use std::net::SocketAddr;
use std::str::FromStr;

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
    /// A timer set with `Reactor::set_timer` expired (io_uring transport only).
    Timer {
        /// The caller's token.
        token: u64,
    },
}

/// Transport errors (edges: set-up and misuse), with the offending values.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// io_uring cannot be used on this host.
    #[error("io_uring unavailable: {source} (kernel.io_uring_disabled = {disabled})")]
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
    /// The AF_XDP transport could not start (docs/config.md, "[engine.af_xdp]").
    #[error("af_xdp: {0}")]
    Xdp(xdp::XdpError),
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
    /// A listener could not be bound (address in use, not this host's, a privileged port).
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// The error from bind(2).
        source: std::io::Error,
    },
    /// Only IPv4 addresses are supported.
    #[error("address {0} is not IPv4")]
    NotIpv4(SocketAddr),
    /// More connection slots than one ring can register buffers for (two per slot, and the
    /// kernel registers at most 16,384): run more reactors. The epoll transport keeps the same
    /// bound, so a configuration that runs on one transport runs on the other.
    #[error("conns_max = {conns_max}: at most {limit} connections per reactor")]
    TooManyConnections {
        /// Asked.
        conns_max: u32,
        /// Allowed.
        limit: u32,
    },
    /// Per-connection buffer sizes a transport cannot work with: zero, or more memory in all
    /// (`conns_max` times both) than can be allocated.
    #[error(
        "buffers of {recv_buffer_bytes} (receive) + {send_buffer_bytes} (send) bytes for each of \
         {conns_max} connections: each must be at least 1 byte and all of them must fit in memory"
    )]
    BufferSizes {
        /// Connection slots.
        conns_max: u32,
        /// Receive buffer per connection.
        recv_buffer_bytes: u32,
        /// Send buffer per connection.
        send_buffer_bytes: u32,
    },
}

/// Counters of a socket transport (the same for both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Accepted sockets closed at once because no slot was free.
    pub accept_refused: u64,
    /// Accept calls that failed for a reason other than "nothing to accept" (descriptor
    /// limits EMFILE/ENFILE, ENOBUFS, ...): the listener is tried again on the next poll.
    pub accept_errors: u64,
    /// Bytes written.
    pub bytes_sent: u64,
    /// Bytes read.
    pub bytes_received: u64,
    /// Writes the kernel took only part of.
    pub partial_sends: u64,
    /// Reads or writes that returned EAGAIN/EINTR and were retried. (With epoll, a read that
    /// finds nothing is not counted: readiness can be stale, and spin reads expect it.)
    pub retries: u64,
    /// Connections reset by the peer (ECONNRESET, or EPIPE on a write).
    pub resets: u64,
    /// Times `poll` and `flush` entered the kernel (`io_uring_enter`, `epoll_wait`). A
    /// busy-polling io_uring loop enters only with submissions queued or completions waiting
    /// for it (the ring's task-run flag): an idle pass makes no system call.
    pub kernel_entries: u64,
}

/// What the session, feed and venue drivers need from a transport: keel's io_uring
/// [`Reactor`] or [`EpollReactor`] in production, the simulated network (`keel_venue::simnet::SimEndpoint`) in deterministic tests.
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

/// Implements [`Transport`] for a socket transport by its inherent methods of the same names.
macro_rules! socket_transport {
    ($t:ty) => {
        impl Transport for $t {
            fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
                <$t>::listen(self, addr)
            }
            fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError> {
                <$t>::connect(self, addr)
            }
            fn send(&mut self, conn: ConnId, bytes: &[u8]) -> Result<(), NetError> {
                <$t>::send(self, conn, bytes)
            }
            fn received(&self, conn: ConnId) -> &[u8] {
                <$t>::received(self, conn)
            }
            fn consume(&mut self, conn: ConnId, n: usize) {
                <$t>::consume(self, conn, n)
            }
            fn close(&mut self, conn: ConnId) {
                <$t>::close(self, conn)
            }
            fn poll(
                &mut self,
                now_ns: u64,
                timeout_ns: u64,
                events: &mut Vec<NetEvent>,
            ) -> Result<(), NetError> {
                <$t>::poll(self, now_ns, timeout_ns, events)
            }
            fn flush(&mut self) -> Result<(), NetError> {
                <$t>::flush(self)
            }
            fn send_pending(&self, conn: ConnId) -> u32 {
                <$t>::send_pending(self, conn)
            }
        }
    };
}

socket_transport!(Reactor);
socket_transport!(EpollReactor);
socket_transport!(XdpReactor);

/// A transport over real sockets, built from a [`ReactorConfig`]: what a driver that opens its
/// own transport (the venue servers; the engine) is generic over, so the same code runs on
/// [`Reactor`] and [`EpollReactor`].
pub trait SocketTransport: Transport + std::fmt::Debug + Sized {
    /// Which transport this is.
    const KIND: TransportKind;
    /// Sets it up; every buffer is allocated here.
    fn open(config: ReactorConfig) -> Result<Self, NetError>;
    /// Counters.
    fn stats(&self) -> NetStats;
}

impl SocketTransport for Reactor {
    const KIND: TransportKind = TransportKind::IoUring;
    fn open(config: ReactorConfig) -> Result<Self, NetError> {
        Reactor::new(config)
    }
    fn stats(&self) -> NetStats {
        Reactor::stats(self)
    }
}

impl SocketTransport for EpollReactor {
    const KIND: TransportKind = TransportKind::Epoll;
    fn open(config: ReactorConfig) -> Result<Self, NetError> {
        EpollReactor::new(config)
    }
    fn stats(&self) -> NetStats {
        EpollReactor::stats(self)
    }
}

impl SocketTransport for XdpReactor {
    const KIND: TransportKind = TransportKind::AfXdp;
    fn open(config: ReactorConfig) -> Result<Self, NetError> {
        XdpReactor::new(config)
    }
    fn stats(&self) -> NetStats {
        XdpReactor::stats(self)
    }
}

/// Declares [`TransportKind`] and [`on_transport`] from one list of `"name" => Variant(Type)`:
/// adding a socket transport adds one line to the `transports!` list below.
macro_rules! transports {
    ($($name:literal => $variant:ident($transport:ty)),+ $(,)?) => {
        /// Which socket transport a process runs on, by the names operators write: `io_uring` (the
        /// default) or `epoll` (`keel venue --transport`, the engine's `[engine] transport` key).
        ///
        /// The fallback rule ([`TransportKind::fallback`]): when io_uring is asked for and cannot be set
        /// up at all ([`NetError::Unavailable`]: disabled by `kernel.io_uring_disabled`, refused by a
        /// seccomp profile, missing from the kernel), the process warns on stderr, naming the cause, and
        /// runs on epoll, which needs nothing but sockets. Nothing else falls back: any other error (an
        /// address in use, too many connections, a failed registration) is reported as it is, and
        /// epoll asked for is epoll.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum TransportKind {
            $(
                #[doc = concat!("`", $name, "` ([`", stringify!($transport), "`]).")]
                $variant,
            )+
        }

        impl TransportKind {
            /// Every kind, in the order of their names in messages.
            pub const ALL: &'static [TransportKind] = &[$(TransportKind::$variant),+];

            /// The name operators write.
            pub fn name(self) -> &'static str {
                match self {
                    $(TransportKind::$variant => $name,)+
                }
            }
        }

        /// Runs `body` on the transport `kind` names: the one place a transport kind becomes a
        /// type. When the transport asked for cannot be set up and the fallback rule names
        /// another (io_uring unavailable: epoll, see [`TransportKind`]), `who` says so on
        /// stderr with the cause and the body runs there instead; any other error is returned
        /// as it is.
        pub fn on_transport<B: OnTransport>(
            kind: TransportKind,
            who: &str,
            body: &mut B,
        ) -> Result<B::Output, NetError> {
            let opened = match kind {
                $(TransportKind::$variant => body.run::<$transport>(),)+
            };
            match opened {
                Err(e) => match kind.fallback(&e) {
                    Some(instead) => {
                        crate::warn_line!(
                            "{who}: warning: {e}; running on {instead} instead \
                             (docs/operations.md, \"Transports\")"
                        );
                        on_transport(instead, who, body)
                    }
                    None => Err(e),
                },
                opened => opened,
            }
        }
    };
}

transports! {
    "io_uring" => IoUring(Reactor),
    "epoll" => Epoll(EpollReactor),
    "af_xdp" => AfXdp(XdpReactor),
}

/// A transport name that names no transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTransport(pub String);

impl std::fmt::Display for UnknownTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown transport '{}': expected one of:", self.0)?;
        for kind in TransportKind::ALL {
            write!(f, " {}", kind.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownTransport {}

/// The default transport: io_uring.
impl Default for TransportKind {
    fn default() -> Self {
        TransportKind::IoUring
    }
}

impl TransportKind {
    /// The transport to run on instead when setting up `self` failed with `error`, per the
    /// fallback rule (see the type's docs): `Some(Epoll)` for io_uring that is unavailable,
    /// `None` otherwise (report the error). A fallback never falls back again.
    pub fn fallback(self, error: &NetError) -> Option<TransportKind> {
        match (self, error) {
            (TransportKind::IoUring, NetError::Unavailable { .. }) => Some(TransportKind::Epoll),
            _ => None,
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A body of code that runs on whichever socket transport a process opens: the engine's loop
/// threads, `keel venue`, `keel gateway`, `keel fetch`, the demo. [`on_transport`] picks the
/// transport type and runs the body monomorphized for it (no dynamic dispatch on the hot
/// path), applying the fallback rule once, for all of them.
pub trait OnTransport {
    /// What the body returns once its transport is open.
    type Output;
    /// Opens transport `T` (the body's own way: `T::open`, a server's `open`) and runs on it.
    /// `Err` only for a transport that could not be opened (then, per the fallback rule, the
    /// body may be run again on another transport); everything after the open is `Output`.
    fn run<T: SocketTransport>(&mut self) -> Result<Self::Output, NetError>;
}

impl FromStr for TransportKind {
    type Err = UnknownTransport;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TransportKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownTransport(s.to_string()))
    }
}

pub use epoll::EpollReactor;
pub use socket::{ReactorConfig, UringFeatures, WaitMode, CONNS_MAX};
pub use tls::{Tls, TlsConfig, TlsError, TlsStats};
pub use uring::Reactor;
pub use xdp::XdpReactor;

#[cfg(test)]
mod tests;
