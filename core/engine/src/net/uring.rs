//! TCP over io_uring.
//!
//! A [`Reactor`] owns one ring, a fixed table of connection slots, and one registered buffer
//! region split into a receive and a send buffer per slot. The owner drives it with
//! [`Reactor::poll`], which submits what is pending, collects completions (busy-polling or
//! blocking with a timeout) and reports [`NetEvent`]s. Received bytes accumulate in the slot's
//! receive buffer until the owner consumes them (a full buffer stops reading: back-pressure
//! through TCP, never unbounded memory); bytes to send are copied into the slot's send buffer
//! and written with as many writes as the kernel needs (partial writes continue where they
//! stopped). Completions carry a slot generation, so a completion for a closed slot can never
//! touch its next occupant.
//!
//! What it never does: allocate after [`Reactor::new`], block in `Busy` mode, or lose bytes a
//! caller was told were queued.

#![allow(unsafe_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use io_uring::{cqueue, opcode, types, IoUring};

use super::socket::{set_nodelay, set_send_buffer, slot_buffers, sockaddr};
use super::{
    CloseReason, ConnId, ListenerId, NetError, NetEvent, NetStats, ReactorConfig, UringFeatures,
    WaitMode, CONNS_MAX,
};

mod provided;
use provided::{Held, Provided};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Connecting,
    Open,
    Closing,
}

#[derive(Debug, Clone, Copy)]
struct Conn {
    fd: RawFd,
    generation: u32,
    state: State,
    recv_len: u32,
    recv_at: Option<u32>,
    send_len: u32,
    send_inflight: u32,
    ops: u32,
    close_reason: CloseReason,
    addr: libc::sockaddr_in,
    /// Multishot receive: armed (counted in `ops` until its last completion).
    multishot: bool,
    /// Multishot receive: completions held for want of room in the receive buffer.
    held: u32,
    /// Multishot receive: ended for want of provided buffers; re-armed when one comes back.
    starved: bool,
}

const OP_ACCEPT: u64 = 1;
const OP_CONNECT: u64 = 2;
const OP_RECV: u64 = 3;
const OP_SEND: u64 = 4;
const OP_RECV_MULTI: u64 = 5;

fn user_data(op: u64, generation: u32, slot: u32) -> u64 {
    op << 56 | u64::from(generation & 0x00FF_FFFF) << 32 | u64::from(slot)
}

fn split(data: u64) -> (u64, u32, u32) {
    (data >> 56, ((data >> 32) & 0x00FF_FFFF) as u32, data as u32)
}

/// An io_uring TCP reactor. See the module docs.
pub struct Reactor {
    ring: IoUring,
    /// Each slot's socket, owned (closed when the slot is released or the reactor dropped,
    /// after the ring: fields drop in order, so no operation can outlive its descriptor).
    /// `Conn::fd` is its raw value, for submissions.
    fds: Vec<Option<OwnedFd>>,
    config: ReactorConfig,
    conns: Vec<Conn>,
    free: Vec<u32>,
    buffers: Box<[u8]>,
    listeners: Vec<TcpListener>,
    /// Slots whose close began with nothing in flight: reported on the next poll.
    pending_close: Vec<u32>,
    multishot_accept: bool,
    timers: BinaryHeap<Reverse<(u64, u64)>>,
    /// The shortcuts in force (those asked for that the kernel allowed).
    features: UringFeatures,
    stats: NetStats,
    /// Multishot receive's provided buffers (dropped after `ring`: see its module docs).
    provided: Option<Provided>,
}

impl std::fmt::Debug for Reactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Reactor {
    /// Sets up the ring (failing clearly when io_uring is unavailable), allocates and
    /// registers every buffer, and prepares the connection slots.
    pub fn new(config: ReactorConfig) -> Result<Self, NetError> {
        if config.conns_max > CONNS_MAX {
            return Err(NetError::TooManyConnections {
                conns_max: config.conns_max,
                limit: CONNS_MAX,
            });
        }
        let ring = build_ring(&config).map_err(|source| NetError::Unavailable {
            source,
            disabled: std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "not present".into()),
        })?;
        let per_slot = config.recv_buffer_bytes as usize + config.send_buffer_bytes as usize;
        let mut buffers = slot_buffers(&config)?;
        let mut features = config.uring;
        let iovecs: Vec<libc::iovec> = (0..config.conns_max as usize)
            .flat_map(|slot| {
                let base = slot * per_slot;
                [
                    (base, config.recv_buffer_bytes),
                    (
                        base + config.recv_buffer_bytes as usize,
                        config.send_buffer_bytes,
                    ),
                ]
            })
            .map(|(offset, len)| libc::iovec {
                // SAFETY: offset + len lies within `buffers` (computed from the same sizes).
                iov_base: unsafe { buffers.as_mut_ptr().add(offset) }.cast(),
                iov_len: len as usize,
            })
            .collect();
        if features.registered_buffers {
            // SAFETY: the iovecs point into `buffers`, a boxed slice that lives as long as the
            // ring (both are fields of the Reactor, and the ring is dropped first) and never
            // moves or reallocates.
            unsafe { ring.submitter().register_buffers(&iovecs) }.map_err(|source| {
                NetError::Io {
                    call: "io_uring_register(buffers)",
                    source,
                }
            })?;
        }
        // A fixed file table, one entry per slot: operations name the slot instead of the fd,
        // so the kernel skips a file lookup and reference count per operation. Kernels without
        // sparse tables (before 5.19) use plain descriptors.
        features.fixed_files = features.fixed_files
            && ring
                .submitter()
                .register_files_sparse(config.conns_max)
                .is_ok();
        let provided = features
            .multishot_recv
            .then(|| {
                Provided::new(
                    &ring,
                    features.provided_buffers,
                    features.provided_buffer_bytes,
                )
            })
            .flatten();
        features.multishot_recv = provided.is_some();
        // Multishot receive reads every connection already: never a second reader as well.
        features.direct_spin_reads &= !features.multishot_recv;
        let empty = Conn {
            fd: -1,
            generation: 0,
            state: State::Free,
            recv_len: 0,
            recv_at: None,
            send_len: 0,
            send_inflight: 0,
            ops: 0,
            close_reason: CloseReason::Local,
            // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
            addr: unsafe { std::mem::zeroed() },
            multishot: false,
            held: 0,
            starved: false,
        };
        Ok(Self {
            ring,
            fds: (0..config.conns_max).map(|_| None).collect(),
            conns: vec![empty; config.conns_max as usize],
            free: (0..config.conns_max).rev().collect(),
            buffers,
            listeners: Vec::with_capacity(8),
            pending_close: Vec::with_capacity(config.conns_max as usize),
            multishot_accept: true,
            timers: BinaryHeap::with_capacity(config.timers_max as usize),
            features,
            stats: NetStats::default(),
            provided,
            config,
        })
    }

    /// The io_uring shortcuts in force: those the configuration asked for that the kernel
    /// allowed.
    pub fn features(&self) -> UringFeatures {
        self.features
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Listens on `addr` (port 0 picks a free port) and starts accepting.
    pub fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| NetError::Listen { addr, source })?;
        let local = listener.local_addr().map_err(|source| NetError::Io {
            call: "getsockname",
            source,
        })?;
        let id = ListenerId(self.listeners.len() as u32);
        self.listeners.push(listener);
        self.arm_accept(id.0);
        Ok((id, local))
    }

    /// Starts connecting to `addr`; [`NetEvent::Connected`] or `ConnectFailed` follows.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError> {
        let SocketAddr::V4(v4) = addr else {
            return Err(NetError::NotIpv4(addr));
        };
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(NetError::Io {
                call: "socket",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: `raw` is a descriptor socket(2) just returned to us; nothing else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        let fd = owned.as_raw_fd();
        set_nodelay(fd);
        if let Some(bytes) = self.config.socket_send_buffer {
            set_send_buffer(fd, bytes);
        }
        let Some(slot) = self.free.pop() else {
            return Err(NetError::NoFreeSlot {
                conns_max: self.config.conns_max,
            }); // `owned` closes the socket
        };
        self.install(slot, owned);
        let conn = &mut self.conns[slot as usize];
        *conn = Conn {
            fd,
            state: State::Connecting,
            addr: sockaddr(v4),
            ops: 1,
            ..*conn
        };
        let entry = opcode::Connect::new(
            types::Fd(fd),
            std::ptr::addr_of!(conn.addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
        .build()
        .user_data(user_data(OP_CONNECT, conn.generation, slot));
        let id = ConnId {
            slot,
            generation: conn.generation,
        };
        self.push(entry);
        Ok(id)
    }

    /// The bytes received and not yet consumed.
    pub fn received(&self, conn: ConnId) -> &[u8] {
        match self.live(conn) {
            Some(c) => {
                let base = self.recv_base(conn.slot);
                &self.buffers[base..base + c.recv_len as usize]
            }
            None => &[],
        }
    }

    /// Drops the first `n` received bytes (the owner decoded them).
    pub fn consume(&mut self, conn: ConnId, n: usize) {
        let base = self.recv_base(conn.slot);
        let Some(c) = self.live_mut(conn) else { return };
        let len = c.recv_len as usize;
        assert!(n <= len, "consumed {n} of {len} received bytes");
        c.recv_len -= n as u32;
        let held = c.held;
        self.buffers.copy_within(base + n..base + len, base);
        if held > 0 {
            self.drain_held(conn.slot);
        }
        self.arm_recv(conn.slot);
    }

    /// Queues `bytes` for sending, all or nothing.
    pub fn send(&mut self, conn: ConnId, bytes: &[u8]) -> Result<(), NetError> {
        let cap = self.config.send_buffer_bytes;
        let base = self.send_base(conn.slot);
        let c = self
            .live_mut(conn)
            .filter(|c| c.state == State::Open)
            .ok_or(NetError::NotOpen)?;
        let free = cap - c.send_len;
        if bytes.len() > free as usize {
            return Err(NetError::SendBufferFull {
                len: bytes.len() as u32,
                free,
            });
        }
        let at = base + c.send_len as usize;
        c.send_len += bytes.len() as u32;
        self.buffers[at..at + bytes.len()].copy_from_slice(bytes);
        self.arm_send(conn.slot);
        Ok(())
    }

    /// Hands queued operations to the kernel now instead of at the next [`Reactor::poll`]
    /// (call after a burst of sends so they leave in this pass). No system call when nothing
    /// is queued.
    pub fn flush(&mut self) -> Result<(), NetError> {
        if self.ring.submission().is_empty() {
            return Ok(());
        }
        self.stats.kernel_entries += 1;
        match self.ring.submit() {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(source) => Err(NetError::Io {
                call: "io_uring_enter",
                source,
            }),
        }
    }

    /// Bytes queued and not yet written.
    pub fn send_pending(&self, conn: ConnId) -> u32 {
        self.live(conn).map_or(0, |c| c.send_len)
    }

    /// Closes a connection; [`NetEvent::Closed`] with [`CloseReason::Local`] follows.
    pub fn close(&mut self, conn: ConnId) {
        self.begin_close(conn.slot, conn.generation, CloseReason::Local);
    }

    /// Arms a timer: [`NetEvent::Timer`] with `token` once `now_ns` passes `deadline_ns`.
    pub fn set_timer(&mut self, deadline_ns: u64, token: u64) -> Result<(), NetError> {
        if self.timers.len() >= self.config.timers_max as usize {
            return Err(NetError::TimersFull {
                timers_max: self.config.timers_max,
            });
        }
        self.timers.push(Reverse((deadline_ns, token)));
        Ok(())
    }

    /// Submits pending work, collects completions and appends events to `events`.
    /// In `Blocking` mode waits at most `timeout_ns` (or until the next timer).
    pub fn poll(
        &mut self,
        now_ns: u64,
        timeout_ns: u64,
        events: &mut Vec<NetEvent>,
    ) -> Result<(), NetError> {
        self.fire_timers(now_ns, events);
        let next_timer = self
            .timers
            .peek()
            .map(|Reverse((d, _))| d.saturating_sub(now_ns));
        let wait_ns = next_timer.map_or(timeout_ns, |t| t.min(timeout_ns));
        let result = match self.config.wait {
            // Completions are read from the shared ring; the kernel is entered only to hand it
            // submissions or to let it post completions it holds for this thread (cooperative
            // task running raises the task-run flag then). Nothing to do: no system call.
            // A blocking loop that must not wait (a timeout of 0, or completions already
            // there) is the same.
            WaitMode::BusyPoll | WaitMode::Blocking
                if (self.config.wait == WaitMode::BusyPoll
                    || wait_ns == 0
                    || !self.ring.completion().is_empty())
                    && self.ring.submission().is_empty()
                    && !self.ring.submission().taskrun() =>
            {
                Ok(0)
            }
            WaitMode::BusyPoll => {
                self.stats.kernel_entries += 1;
                self.ring.submit()
            }
            WaitMode::Blocking if wait_ns == 0 || !self.ring.completion().is_empty() => {
                self.stats.kernel_entries += 1;
                self.ring.submit()
            }
            WaitMode::Blocking => {
                self.stats.kernel_entries += 1;
                let ts = types::Timespec::new()
                    .sec(wait_ns / 1_000_000_000)
                    .nsec((wait_ns % 1_000_000_000) as u32);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match result {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) => {}
            Err(source) => {
                return Err(NetError::Io {
                    call: "io_uring_enter",
                    source,
                })
            }
        }
        loop {
            let Some(cqe) = self.ring.completion().next() else {
                break;
            };
            self.complete(cqe.user_data(), cqe.result(), cqe.flags(), events);
        }
        if self.features.direct_spin_reads && self.spinning() {
            self.read_direct(events);
        }
        while let Some(slot) = self.pending_close.pop() {
            self.finish_close_if_idle(slot, events);
        }
        Ok(())
    }

    /// Direct spin reads: one non-blocking `recv(2)` per open connection with room, straight
    /// into its receive buffer (bounded by the slots).
    fn read_direct(&mut self, events: &mut Vec<NetEvent>) {
        let cap = self.config.recv_buffer_bytes;
        for slot in 0..self.conns.len() as u32 {
            let base = self.recv_base(slot);
            let conn = &self.conns[slot as usize];
            if conn.state != State::Open || conn.recv_len >= cap {
                continue;
            }
            let (fd, at, generation) = (conn.fd, conn.recv_len as usize, conn.generation);
            let room = (cap - conn.recv_len) as usize;
            let ptr = self.buffers[base + at..].as_mut_ptr();
            // SAFETY: `ptr` and `room` lie inside this slot's receive buffer, which no
            // operation in flight writes (direct spin reads arm none), and `fd` is the slot's
            // open socket.
            let n = unsafe { libc::recv(fd, ptr.cast(), room, libc::MSG_DONTWAIT) };
            let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            match n {
                n if n > 0 => {
                    self.conns[slot as usize].recv_len += n as u32;
                    self.stats.bytes_received += n as u64;
                    events.push(NetEvent::Readable {
                        conn: ConnId { slot, generation },
                    });
                }
                0 => self.begin_close(slot, generation, CloseReason::PeerClosed),
                _ => match errno() {
                    libc::EAGAIN | libc::EINTR => {}
                    libc::ECONNRESET => {
                        self.stats.resets += 1;
                        self.begin_close(slot, generation, CloseReason::Reset);
                    }
                    e => self.begin_close(slot, generation, CloseReason::Error(e)),
                },
            }
        }
    }

    /// Expires timers due at `now_ns` (`poll` does this with the time it is given).
    pub fn fire_timers(&mut self, now_ns: u64, events: &mut Vec<NetEvent>) {
        while let Some(Reverse((deadline, token))) = self.timers.peek().copied() {
            if deadline > now_ns {
                break;
            }
            self.timers.pop();
            events.push(NetEvent::Timer { token });
        }
    }

    fn complete(&mut self, data: u64, res: i32, flags: u32, events: &mut Vec<NetEvent>) {
        let (op, generation, slot) = split(data);
        if op == OP_ACCEPT {
            return self.on_accept(slot, res, flags, events);
        }
        let conn = &mut self.conns[slot as usize];
        if conn.generation & 0x00FF_FFFF != generation || conn.state == State::Free {
            // A completion for a previous occupant of the slot; a buffer it took goes back.
            if let (Some(bid), Some(pool)) = (cqueue::buffer_select(flags), &mut self.provided) {
                pool.give(bid);
            }
            return;
        }
        if op == OP_RECV_MULTI {
            if !cqueue::more(flags) {
                conn.ops -= 1;
                conn.multishot = false;
            }
            self.on_recv_multi(slot, res, flags, events);
            return self.finish_close_if_idle(slot, events);
        }
        debug_assert!(
            conn.ops > 0,
            "a completion on slot {slot} with no operation in flight"
        );
        conn.ops -= 1;
        match op {
            OP_CONNECT => self.on_connect(slot, res, events),
            OP_RECV => self.on_recv(slot, res, events),
            OP_SEND => self.on_send(slot, res),
            _ => unreachable!("unknown op in user data {data:#x}"),
        }
        self.finish_close_if_idle(slot, events);
    }

    fn on_accept(&mut self, listener: u32, res: i32, flags: u32, events: &mut Vec<NetEvent>) {
        let rearm = !cqueue::more(flags);
        if res == -libc::EINVAL && self.multishot_accept {
            self.multishot_accept = false; // old kernel: fall back to one accept per completion
            return self.arm_accept(listener);
        }
        if res >= 0 {
            self.adopt(listener, res, events);
        } else if res != -libc::EAGAIN && res != -libc::EINTR && res != -libc::ECONNABORTED {
            self.stats.accept_errors += 1;
        }
        if rearm || !self.multishot_accept {
            self.arm_accept(listener);
        }
    }

    fn adopt(&mut self, listener: u32, raw: RawFd, events: &mut Vec<NetEvent>) {
        // SAFETY: `raw` is a descriptor accept just handed to us; nothing else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        let Some(slot) = self.free.pop() else {
            self.stats.accept_refused += 1;
            return; // `owned` closes the socket
        };
        let fd = owned.as_raw_fd();
        set_nodelay(fd);
        if let Some(bytes) = self.config.socket_send_buffer {
            set_send_buffer(fd, bytes);
        }
        self.install(slot, owned);
        self.stats.accepted += 1;
        let conn = &mut self.conns[slot as usize];
        *conn = Conn {
            fd,
            state: State::Open,
            ..*conn
        };
        let id = ConnId {
            slot,
            generation: conn.generation,
        };
        events.push(NetEvent::Accepted {
            listener: ListenerId(listener),
            conn: id,
        });
        self.arm_recv(slot);
    }

    fn on_connect(&mut self, slot: u32, res: i32, events: &mut Vec<NetEvent>) {
        let conn = &mut self.conns[slot as usize];
        let id = ConnId {
            slot,
            generation: conn.generation,
        };
        if res < 0 {
            events.push(NetEvent::ConnectFailed {
                conn: id,
                errno: -res,
            });
            conn.state = State::Closing;
            conn.close_reason = CloseReason::Error(-res);
            // Reported as ConnectFailed; no Closed event for a connection that never opened.
            self.release(slot);
            return;
        }
        if conn.state == State::Connecting {
            conn.state = State::Open;
            events.push(NetEvent::Connected { conn: id });
            self.arm_recv(slot);
            self.arm_send(slot);
        }
    }

    fn on_recv(&mut self, slot: u32, res: i32, events: &mut Vec<NetEvent>) {
        let base = self.recv_base(slot);
        let conn = &mut self.conns[slot as usize];
        let at = conn.recv_at.take().expect("a read was in flight") as usize;
        let generation = conn.generation;
        let id = ConnId { slot, generation };
        match res {
            n if n > 0 => {
                // The owner may have consumed bytes while the read was in flight: move the new
                // bytes down to the end of what is still unconsumed.
                let n = n as usize;
                let end = conn.recv_len as usize;
                if at != end {
                    self.buffers
                        .copy_within(base + at..base + at + n, base + end);
                }
                let conn = &mut self.conns[slot as usize];
                conn.recv_len += n as u32;
                self.stats.bytes_received += n as u64;
                if conn.state == State::Open {
                    events.push(NetEvent::Readable { conn: id });
                    self.arm_recv(slot);
                }
            }
            0 => self.begin_close(slot, generation, CloseReason::PeerClosed),
            e if e == -libc::EAGAIN && self.spinning() => self.arm_recv(slot),
            e if e == -libc::EAGAIN || e == -libc::EINTR => {
                self.stats.retries += 1;
                self.arm_recv(slot);
            }
            e if e == -libc::ECONNRESET => {
                self.stats.resets += 1;
                self.begin_close(slot, generation, CloseReason::Reset);
            }
            e => self.begin_close(slot, generation, CloseReason::Error(-e)),
        }
    }

    /// A multishot receive's completion (its `ops` and `multishot` already settled).
    fn on_recv_multi(&mut self, slot: u32, res: i32, flags: u32, events: &mut Vec<NetEvent>) {
        let conn = &self.conns[slot as usize];
        let (generation, open) = (conn.generation, conn.state == State::Open);
        let bid = cqueue::buffer_select(flags);
        match (res, bid) {
            (n, Some(bid)) if n > 0 => {
                self.take_received(slot, bid, n as u32);
                if open {
                    events.push(NetEvent::Readable {
                        conn: ConnId { slot, generation },
                    });
                }
                self.arm_recv(slot); // if the kernel ended the receive (no-op while armed)
            }
            (n, None) if n > 0 => {
                // Data without a buffer: the kernel broke the contract; trust nothing after.
                self.begin_close(slot, generation, CloseReason::Error(libc::EINVAL));
            }
            (n, bid) => {
                if let (Some(bid), Some(pool)) = (bid, &mut self.provided) {
                    pool.give(bid);
                }
                match n {
                    0 => self.begin_close(slot, generation, CloseReason::PeerClosed),
                    e if e == -libc::ENOBUFS => {
                        // Every buffer was taken. Those not held are back in the kernel's ring
                        // (or on their way, in completions reaped this pass): re-arm now; if
                        // all are held, when the owner's consume gives one back.
                        self.stats.retries += 1;
                        if self.provided.as_ref().is_some_and(Provided::all_held) {
                            self.conns[slot as usize].starved = true;
                        } else {
                            self.arm_recv(slot);
                        }
                    }
                    e if e == -libc::EAGAIN || e == -libc::EINTR => {
                        self.stats.retries += 1;
                        self.arm_recv(slot);
                    }
                    e if e == -libc::ECONNRESET => {
                        self.stats.resets += 1;
                        self.begin_close(slot, generation, CloseReason::Reset);
                    }
                    e => self.begin_close(slot, generation, CloseReason::Error(-e)),
                }
            }
        }
    }

    /// `len` bytes arrived in provided buffer `bid` for `slot`: copied into the slot's receive
    /// buffer and the buffer given back, or held (behind what the slot already holds) until
    /// the owner makes room.
    fn take_received(&mut self, slot: u32, bid: u16, len: u32) {
        self.stats.bytes_received += u64::from(len);
        let pool = self
            .provided
            .as_mut()
            .expect("multishot receive runs with a pool");
        pool.held.push_back(Held {
            slot,
            bid,
            at: 0,
            len,
        });
        self.conns[slot as usize].held += 1;
        self.drain_held(slot);
    }

    /// Copies `slot`'s held completions, oldest first, into its receive buffer while they fit,
    /// giving each buffer back once emptied; re-arms receives that starved for buffers. Held
    /// completions number at most the pool's buffers, so the scan is bounded.
    fn drain_held(&mut self, slot: u32) {
        let cap = self.config.recv_buffer_bytes;
        let base = self.recv_base(slot);
        let Some(pool) = self.provided.as_mut() else {
            return;
        };
        let conn = &mut self.conns[slot as usize];
        let mut gave = false;
        let mut i = 0;
        while i < pool.held.len() && conn.held > 0 && conn.recv_len < cap {
            let h = pool.held[i];
            if h.slot != slot {
                i += 1;
                continue;
            }
            let n = (h.len - h.at).min(cap - conn.recv_len);
            let at = base + conn.recv_len as usize;
            self.buffers[at..at + n as usize].copy_from_slice(pool.bytes_of(h.bid, h.at, h.at + n));
            conn.recv_len += n;
            if h.at + n < h.len {
                pool.held[i].at += n;
                break; // the receive buffer is full
            }
            pool.held.remove(i);
            pool.give(h.bid);
            conn.held -= 1;
            gave = true;
        }
        if gave {
            self.rearm_starved();
        }
    }

    /// Re-arms the multishot receives that ended for want of buffers (after buffers came
    /// back). Bounded by the slots.
    fn rearm_starved(&mut self) {
        for slot in 0..self.conns.len() as u32 {
            if self.conns[slot as usize].starved {
                self.conns[slot as usize].starved = false;
                self.arm_recv(slot);
            }
        }
    }

    fn on_send(&mut self, slot: u32, res: i32) {
        let base = self.send_base(slot);
        let conn = &mut self.conns[slot as usize];
        let inflight = std::mem::take(&mut conn.send_inflight);
        match res {
            n if n >= 0 => {
                let n = n as u32;
                if n < inflight {
                    self.stats.partial_sends += 1;
                }
                let len = conn.send_len as usize;
                conn.send_len -= n;
                self.stats.bytes_sent += u64::from(n);
                self.buffers
                    .copy_within(base + n as usize..base + len, base);
                self.arm_send(slot);
            }
            e if e == -libc::EAGAIN || e == -libc::EINTR => {
                self.stats.retries += 1;
                self.arm_send(slot);
            }
            e if e == -libc::ECONNRESET || e == -libc::EPIPE => {
                self.stats.resets += 1;
                let generation = conn.generation;
                self.begin_close(slot, generation, CloseReason::Reset);
            }
            e => {
                let generation = conn.generation;
                self.begin_close(slot, generation, CloseReason::Error(-e));
            }
        }
    }

    fn arm_accept(&mut self, listener: u32) {
        let fd = self.listeners[listener as usize].as_raw_fd();
        let entry = if self.multishot_accept {
            opcode::AcceptMulti::new(types::Fd(fd))
                .flags(libc::SOCK_CLOEXEC)
                .build()
        } else {
            opcode::Accept::new(types::Fd(fd), std::ptr::null_mut(), std::ptr::null_mut())
                .flags(libc::SOCK_CLOEXEC)
                .build()
        };
        self.push(entry.user_data(user_data(OP_ACCEPT, 0, listener)));
    }

    fn arm_recv(&mut self, slot: u32) {
        if self.features.multishot_recv {
            return self.arm_recv_multi(slot);
        }
        if self.features.direct_spin_reads && self.spinning() {
            return; // read by `read_direct` every pass
        }
        let cap = self.config.recv_buffer_bytes;
        let base = self.recv_base(slot);
        let spinning = self.spinning();
        let conn = &mut self.conns[slot as usize];
        if conn.state != State::Open || conn.recv_at.is_some() || conn.recv_len >= cap {
            return;
        }
        conn.recv_at = Some(conn.recv_len);
        conn.ops += 1;
        let ptr = self.buffers[base + conn.recv_len as usize..].as_mut_ptr();
        // Spin reads: a non-blocking read that completes at once (data or EAGAIN) when it is
        // submitted, instead of arming a wake-up; the loop resubmits it every pass. One system
        // call per pass either way, without the task-work hop (see docs/benchmarks.md).
        let rw_flags = if spinning { libc::RWF_NOWAIT } else { 0 };
        let (len, index) = (cap - conn.recv_len, (slot * 2) as u16);
        let recv_flags = if spinning { libc::MSG_DONTWAIT } else { 0 };
        let entry = match (self.features.fixed_files, self.features.registered_buffers) {
            (true, true) => opcode::ReadFixed::new(types::Fixed(slot), ptr, len, index)
                .rw_flags(rw_flags)
                .build(),
            (false, true) => opcode::ReadFixed::new(types::Fd(conn.fd), ptr, len, index)
                .rw_flags(rw_flags)
                .build(),
            (true, false) => opcode::Recv::new(types::Fixed(slot), ptr, len)
                .flags(recv_flags)
                .build(),
            (false, false) => opcode::Recv::new(types::Fd(conn.fd), ptr, len)
                .flags(recv_flags)
                .build(),
        };
        let entry = entry.user_data(user_data(OP_RECV, conn.generation, slot));
        self.push(entry);
    }

    /// Arms the slot's multishot receive unless it is armed, closing, or waiting for buffers.
    fn arm_recv_multi(&mut self, slot: u32) {
        let conn = &mut self.conns[slot as usize];
        if conn.state != State::Open || conn.multishot || conn.starved {
            return;
        }
        conn.multishot = true;
        conn.ops += 1;
        let entry = if self.features.fixed_files {
            opcode::RecvMulti::new(types::Fixed(slot), provided::GROUP).build()
        } else {
            opcode::RecvMulti::new(types::Fd(conn.fd), provided::GROUP).build()
        };
        let entry = entry.user_data(user_data(OP_RECV_MULTI, conn.generation, slot));
        self.push(entry);
    }

    fn arm_send(&mut self, slot: u32) {
        let base = self.send_base(slot);
        let conn = &mut self.conns[slot as usize];
        if conn.state != State::Open || conn.send_inflight > 0 || conn.send_len == 0 {
            return;
        }
        conn.send_inflight = conn.send_len;
        conn.ops += 1;
        let ptr = self.buffers[base..].as_ptr();
        let (len, index) = (conn.send_len, (slot * 2 + 1) as u16);
        let entry = match (self.features.fixed_files, self.features.registered_buffers) {
            (true, true) => opcode::WriteFixed::new(types::Fixed(slot), ptr, len, index).build(),
            (false, true) => opcode::WriteFixed::new(types::Fd(conn.fd), ptr, len, index).build(),
            (true, false) => opcode::Send::new(types::Fixed(slot), ptr, len)
                .flags(libc::MSG_NOSIGNAL)
                .build(),
            (false, false) => opcode::Send::new(types::Fd(conn.fd), ptr, len)
                .flags(libc::MSG_NOSIGNAL)
                .build(),
        };
        let entry = entry.user_data(user_data(OP_SEND, conn.generation, slot));
        self.push(entry);
    }

    fn begin_close(&mut self, slot: u32, generation: u32, reason: CloseReason) {
        let conn = &mut self.conns[slot as usize];
        if conn.generation != generation || !matches!(conn.state, State::Open | State::Connecting) {
            return;
        }
        conn.state = State::Closing;
        conn.close_reason = reason;
        // Shutting the socket down completes any read or write still in flight.
        // SAFETY: fd is owned by this slot and still open.
        unsafe { libc::shutdown(conn.fd, libc::SHUT_RDWR) };
        if conn.ops == 0 {
            self.pending_close.push(slot);
        }
    }

    fn finish_close_if_idle(&mut self, slot: u32, events: &mut Vec<NetEvent>) {
        let conn = &self.conns[slot as usize];
        if conn.state == State::Closing && conn.ops == 0 {
            let id = ConnId {
                slot,
                generation: conn.generation,
            };
            events.push(NetEvent::Closed {
                conn: id,
                reason: conn.close_reason,
            });
            self.release(slot);
        }
    }

    /// Gives the slot its socket and puts it in the fixed file table at its slot.
    fn install(&mut self, slot: u32, owned: OwnedFd) {
        let fd = owned.as_raw_fd();
        self.fds[slot as usize] = Some(owned);
        if self.features.fixed_files
            && self
                .ring
                .submitter()
                .register_files_update(slot, &[fd])
                .is_err()
        {
            // Cannot happen with a sparse table of conns_max entries; plain fds still work.
            self.features.fixed_files = false;
        }
    }

    /// Closes the fd and frees the slot under a new generation.
    fn release(&mut self, slot: u32) {
        // What `push`'s SAFETY comment relies on: the kernel holds no pointer into this slot's
        // buffers once it is released (and the next occupant may reuse them).
        debug_assert_eq!(
            self.conns[slot as usize].ops, 0,
            "slot {slot} released with operations in flight"
        );
        debug_assert!(
            self.conns[slot as usize].state == State::Closing,
            "slot {slot} released without closing first"
        );
        if self.features.fixed_files {
            let _ = self.ring.submitter().register_files_update(slot, &[-1]);
        }
        if self.conns[slot as usize].held > 0 {
            // What the closed connection still held goes back to the pool.
            let pool = self
                .provided
                .as_mut()
                .expect("held completions imply a pool");
            while let Some(i) = pool.held.iter().position(|h| h.slot == slot) {
                let h = pool.held.remove(i).expect("found above");
                pool.give(h.bid);
            }
        }
        // No operation on the socket is in flight: dropping it closes it.
        self.fds[slot as usize] = None;
        let conn = &mut self.conns[slot as usize];
        *conn = Conn {
            fd: -1,
            generation: conn.generation.wrapping_add(1) & 0x00FF_FFFF,
            state: State::Free,
            recv_len: 0,
            recv_at: None,
            send_len: 0,
            send_inflight: 0,
            ops: 0,
            multishot: false,
            held: 0,
            starved: false,
            ..*conn
        };
        self.free.push(slot);
    }

    /// Submissions never exceed the ring: flush to the kernel when it is full.
    fn push(&mut self, entry: io_uring::squeue::Entry) {
        loop {
            // SAFETY: every buffer and address an entry points to lives in `self.buffers` or
            // `self.conns`, which outlive the operation (slots are released only when no
            // operation on them is in flight).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            if let Err(e) = self.ring.submit() {
                assert!(
                    e.raw_os_error() == Some(libc::EBUSY),
                    "io_uring_enter failed while flushing: {e}"
                );
            }
        }
    }

    fn spinning(&self) -> bool {
        self.config.spin_reads && self.config.wait == WaitMode::BusyPoll
    }

    #[cfg(test)]
    fn held_total(&self) -> usize {
        self.provided.as_ref().map_or(0, |p| p.held.len())
    }

    fn live(&self, id: ConnId) -> Option<&Conn> {
        self.conns
            .get(id.slot as usize)
            .filter(|c| c.generation == id.generation && c.state != State::Free)
    }

    fn live_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns
            .get_mut(id.slot as usize)
            .filter(|c| c.generation == id.generation && c.state != State::Free)
    }

    fn recv_base(&self, slot: u32) -> usize {
        slot as usize
            * (self.config.recv_buffer_bytes as usize + self.config.send_buffer_bytes as usize)
    }

    fn send_base(&self, slot: u32) -> usize {
        self.recv_base(slot) + self.config.recv_buffer_bytes as usize
    }
}

/// Builds the ring. Without SQPOLL, completions need no inter-processor interrupt: task work
/// runs on the owning thread's next entry (cooperative task running, single issuer), and the
/// kernel raises the ring's task-run flag when it has some, so a busy-polling loop enters only
/// then or with submissions queued. That halves the loopback round trip on a VM (see
/// docs/benchmarks.md, order round trip). Kernels without these flags (before 6.0) get a plain
/// ring, whose completions arrive by interrupt (the flag then never rises). The ring must be
/// used by the thread that created it.
fn build_ring(config: &ReactorConfig) -> std::io::Result<IoUring> {
    let mut builder = IoUring::builder();
    if let Some(idle) = config.sqpoll_idle_ms {
        builder.setup_sqpoll(idle);
        return builder.build(config.ring_entries);
    }
    builder
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_single_issuer();
    match builder.build(config.ring_entries) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::new(config.ring_entries),
        other => other,
    }
}

#[cfg(test)]
mod tests;
