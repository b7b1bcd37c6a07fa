//! What both socket transports share: their configuration ([`ReactorConfig`], [`WaitMode`]),
//! the bound on connections, the slot buffers allocated once at start, and the socket options
//! and addresses every socket gets. A new socket transport starts from these.

#![allow(unsafe_code)]

use std::net::SocketAddrV4;
use std::os::fd::RawFd;

use super::NetError;

/// How `poll` waits (both socket transports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// Never sleep: submit, reap what is there, return (for isolated cores). epoll: a
    /// zero-timeout `epoll_wait` on every poll.
    BusyPoll,
    /// Sleep in the kernel until a completion or the timeout (for shared cores). epoll: the
    /// timeout rounds up to whole milliseconds.
    Blocking,
}

/// Sizes and modes, fixed at start; both socket transports take it ([`super::Reactor`] and
/// [`super::EpollReactor`], which ignores the io_uring-only fields, as each says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReactorConfig {
    /// Submission queue entries (a power of two). io_uring only; epoll ignores it.
    pub ring_entries: u32,
    /// Connection slots.
    pub conns_max: u32,
    /// Receive buffer per connection.
    pub recv_buffer_bytes: u32,
    /// Send buffer per connection.
    pub send_buffer_bytes: u32,
    /// How `poll` waits.
    pub wait: WaitMode,
    /// Kernel-side submission polling with this idle time (ms); `None` (the default): off.
    /// io_uring only; epoll ignores it.
    pub sqpoll_idle_ms: Option<u32>,
    /// Timers that may be pending at once (`Reactor::set_timer`; epoll has no timers and
    /// ignores it: no driver uses them, every driver keeps its own deadlines).
    pub timers_max: u32,
    /// With `BusyPoll`: read every connection without blocking on every pass instead of
    /// arming a wake-up. Lowest latency for a few connections (an engine's venue links);
    /// wasteful for many (a venue serving hundreds of sessions). Default off.
    pub spin_reads: bool,
    /// Kernel send buffer (SO_SNDBUF) of every socket, bytes; `None`: the kernel's default
    /// (which autotunes up to `net.ipv4.tcp_wmem`). Set it to bound what a peer that stops
    /// reading can hold in the kernel on the server's behalf.
    pub socket_send_buffer: Option<u32>,
    /// io_uring only: which of the kernel's shortcuts the reactor takes (each measured on its
    /// own in `bench/order_rtt`, docs/benchmarks.md). epoll ignores it.
    pub uring: UringFeatures,
    /// AF_XDP only: the interface, queue, address and UMEM (`[engine.af_xdp]`). The socket
    /// transports ignore it.
    pub xdp: super::xdp::config::XdpConfig,
}

/// The io_uring shortcuts, each on or off (see [`ReactorConfig::uring`]). A shortcut the
/// kernel refuses at start is left off (the reactor's `features` says which are on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UringFeatures {
    /// Reads and writes name buffers registered once at start (`READ_FIXED`/`WRITE_FIXED`:
    /// the kernel pins and maps them once, not per operation). Off: socket `RECV`/`SEND` on
    /// the same memory. Default on.
    pub registered_buffers: bool,
    /// Operations name the connection's entry in a registered file table instead of its
    /// descriptor (no file lookup and reference count per operation). Default on.
    pub fixed_files: bool,
    /// One multishot receive per connection into a pool of provided buffers, copied into the
    /// connection's receive buffer: no receive is re-armed per read, and with `spin_reads` no
    /// read is tried on a quiet connection. Default off: it did not beat the plain receive on
    /// the round trip (docs/benchmarks.md, "Transport shortcuts"). One connection whose owner
    /// stops consuming can hold the whole pool; the others then wait for buffers.
    pub multishot_recv: bool,
    /// With `spin_reads`: each pass reads every open connection with a non-blocking
    /// `recv(2)` of its own instead of an io_uring read submitted per pass (sends still go
    /// through the ring). One system call a pass either way, but `recv` costs less than an
    /// entry that submits, runs and completes a read: 0.81× the round trip on the ping-pong
    /// (docs/benchmarks.md, "Transport shortcuts"). Default on.
    pub direct_spin_reads: bool,
    /// Provided buffers in the pool (a power of two, at most 32,768), with `multishot_recv`.
    pub provided_buffers: u16,
    /// Bytes of each provided buffer, with `multishot_recv`.
    pub provided_buffer_bytes: u32,
}

impl Default for UringFeatures {
    fn default() -> Self {
        Self {
            registered_buffers: true,
            fixed_files: true,
            multishot_recv: false,
            direct_spin_reads: true,
            provided_buffers: 64,
            provided_buffer_bytes: 4096,
        }
    }
}

impl Default for ReactorConfig {
    fn default() -> Self {
        Self {
            ring_entries: 256,
            conns_max: 64,
            recv_buffer_bytes: 64 * 1024,
            send_buffer_bytes: 64 * 1024,
            wait: WaitMode::Blocking,
            sqpoll_idle_ms: None,
            timers_max: 1024,
            spin_reads: false,
            socket_send_buffer: None,
            uring: UringFeatures::default(),
            xdp: super::xdp::config::XdpConfig::default(),
        }
    }
}

/// Connections per reactor (either transport): io_uring registers two buffers per connection
/// and at most 16,384 buffers.
pub const CONNS_MAX: u32 = 8_192;

/// The receive and send buffers of every slot, in one zeroed allocation (every page touched
/// here, so the first message on a slot takes no page fault). Sizes of zero, or a total that
/// cannot be allocated, are refused with the figures (never an overflow or an abort).
pub(crate) fn slot_buffers(config: &ReactorConfig) -> Result<Box<[u8]>, NetError> {
    let refused = NetError::BufferSizes {
        conns_max: config.conns_max,
        recv_buffer_bytes: config.recv_buffer_bytes,
        send_buffer_bytes: config.send_buffer_bytes,
    };
    if config.recv_buffer_bytes == 0 || config.send_buffer_bytes == 0 {
        return Err(refused);
    }
    let per_slot = config.recv_buffer_bytes as usize + config.send_buffer_bytes as usize;
    let Some(total) = per_slot.checked_mul(config.conns_max as usize) else {
        return Err(refused);
    };
    // More than the machine's memory would be granted by an overcommitting kernel and then
    // killed when touched below: refuse it here instead.
    // SAFETY: sysconf(3) reads a system value; no memory is passed.
    let (pages, page_bytes) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let physical = (pages.max(0) as u64).saturating_mul(page_bytes.max(0) as u64);
    if physical > 0 && total as u64 > physical {
        return Err(refused);
    }
    let mut buffers = Vec::new();
    if buffers.try_reserve_exact(total).is_err() {
        return Err(refused);
    }
    buffers.resize(total, 0u8);
    Ok(buffers.into_boxed_slice())
}

pub(crate) fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

pub(crate) fn set_send_buffer(fd: RawFd, bytes: u32) {
    set_int_option(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        bytes.min(i32::MAX as u32) as i32,
    );
}

pub(crate) fn set_nodelay(fd: RawFd) {
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
}

/// setsockopt with an int value; a failure leaves the kernel default (nothing depends on it).
fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: setsockopt with a valid fd and a pointer to a c_int of the stated size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::addr_of!(value).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
    }
}
