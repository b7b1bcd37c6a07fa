//! TCP over non-blocking sockets and epoll: keel's second socket transport.
//!
//! An [`EpollReactor`] behaves like the io_uring [`Reactor`](super::Reactor) in everything a
//! driver can observe: a fixed table of connection slots with generations (a stale [`ConnId`]
//! never touches the slot's next occupant), a receive and a send buffer per slot allocated once
//! in [`EpollReactor::new`], `Readable` when new bytes arrive, sends copied all or nothing and
//! written at the next [`EpollReactor::flush`] or poll, partial writes continued when the
//! kernel has room again, `Closed{Local}` on the poll after a close. Only the mechanism
//! differs: readiness and `recv`/`send` calls instead of completions. It runs where io_uring is
//! disabled (`kernel.io_uring_disabled`, container seccomp profiles), and it is the transport a
//! kernel-bypass stack that intercepts BSD socket calls (Onload, VMA) can accelerate.
//!
//! Readiness is level-triggered, and each socket's interest follows its state: EPOLLIN while
//! its receive buffer has room (a full buffer stops reading: back-pressure through TCP, never
//! unbounded memory; `consume` turns reading back on), EPOLLOUT only while a write is blocked
//! (the kernel took part of it, or none), EPOLLOUT alone while connecting. So a message costs
//! one `recv` (no second call to find the socket drained) and one `send`, and interest changes
//! (one `epoll_ctl`) only under back-pressure. Work per poll is bounded: one read per
//! connection, [`ACCEPTS_PER_PASS`] accepts per listener, [`EVENTS_PER_WAIT`] readiness
//! events; level-triggered readiness brings back whatever a pass left.
//!
//! A close (local, by the peer, on an error) shuts the socket down at once and is reported by
//! the poll that found it, or by the next poll when it happened between polls (`close`, a
//! write error in `flush`); the slot is freed (its descriptor closed, its generation advanced)
//! when `Closed` is reported, as the Reactor does.
//!
//! What it never does: allocate after [`EpollReactor::new`], block in `BusyPoll` mode, or lose
//! bytes a caller was told were queued. It has no timers (no driver uses the Reactor's).

#![allow(unsafe_code)]

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::socket::{set_nodelay, set_send_buffer, slot_buffers, sockaddr, CONNS_MAX};
use super::{
    CloseReason, ConnId, ListenerId, NetError, NetEvent, NetStats, ReactorConfig, WaitMode,
};

/// Readiness events taken from the kernel per poll (the rest wait for the next poll).
pub const EVENTS_PER_WAIT: usize = 256;

/// Connections accepted per listener per poll (the rest wait for the next poll).
pub const ACCEPTS_PER_PASS: u32 = 64;

/// The longest `Blocking` wait, ms (epoll_wait takes an int; -1 would mean forever).
const WAIT_MS_MAX: u64 = i32::MAX as u64;

/// With spin reads, passes between readiness checks while nothing waits for one (accepts and
/// errors are seen within this many passes; reads and writes every pass).
const SPIN_WAIT_EVERY: u64 = 64;

/// Epoll data of a listener: its index with this bit set (slots stay below [`CONNS_MAX`]).
const LISTENER_TAG: u32 = 1 << 31;

const _: () = assert!(CONNS_MAX < LISTENER_TAG);

const IN: u32 = libc::EPOLLIN as u32;
const OUT: u32 = libc::EPOLLOUT as u32;
const ERR: u32 = libc::EPOLLERR as u32;
const HUP: u32 = libc::EPOLLHUP as u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Connecting,
    Open,
    /// Shut down; `Closed` (or `ConnectFailed`) is owed and the slot freed at the end of the
    /// next poll.
    Closing,
}

#[derive(Debug)]
struct Conn {
    fd: Option<OwnedFd>,
    generation: u32,
    state: State,
    recv_len: u32,
    send_len: u32,
    /// The epoll interest registered now.
    interest: u32,
    /// A write came back short or empty: the rest waits for EPOLLOUT.
    send_blocked: bool,
    /// Listed in `dirty` (stays set across a release: the list entry is still there).
    dirty: bool,
    /// Listed in `pending` (likewise).
    pending: bool,
    /// The poll in which the connection was last read (one read per poll).
    read_pass: u64,
    /// connect(2) failed at once with this errno (0: it did not): `ConnectFailed` owed.
    connect_errno: i32,
    close_reason: CloseReason,
}

impl Conn {
    fn free() -> Self {
        Self {
            fd: None,
            generation: 0,
            state: State::Free,
            recv_len: 0,
            send_len: 0,
            interest: 0,
            send_blocked: false,
            dirty: false,
            pending: false,
            read_pass: 0,
            connect_errno: 0,
            close_reason: CloseReason::Local,
        }
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }
}

/// A non-blocking-socket TCP transport on epoll. See the module docs.
pub struct EpollReactor {
    epoll: OwnedFd,
    config: ReactorConfig,
    conns: Box<[Conn]>,
    free: Vec<u32>,
    buffers: Box<[u8]>,
    listeners: Vec<TcpListener>,
    /// What epoll_wait fills.
    ready: Box<[libc::epoll_event]>,
    /// Slots with bytes queued since the last flush.
    dirty: Vec<u32>,
    /// Slots owed `Closed` or `ConnectFailed` at the end of the next poll.
    pending: Vec<u32>,
    /// Polls so far.
    pass: u64,
    stats: NetStats,
}

impl std::fmt::Debug for EpollReactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpollReactor")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish()
    }
}

impl EpollReactor {
    /// Creates the epoll instance and allocates every buffer and table. `ring_entries`,
    /// `sqpoll_idle_ms` and `timers_max` mean nothing here and are ignored; `conns_max` has the
    /// io_uring transport's bound ([`CONNS_MAX`]), so a configuration runs on either.
    pub fn new(config: ReactorConfig) -> Result<Self, NetError> {
        if config.conns_max > CONNS_MAX {
            return Err(NetError::TooManyConnections {
                conns_max: config.conns_max,
                limit: CONNS_MAX,
            });
        }
        let buffers = slot_buffers(&config)?;
        // SAFETY: plain epoll_create1(2); the result is checked before it is owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io_error("epoll_create1"));
        }
        // SAFETY: fd was just created, is valid, and nothing else owns it.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let empty = libc::epoll_event { events: 0, u64: 0 };
        Ok(Self {
            epoll,
            conns: (0..config.conns_max).map(|_| Conn::free()).collect(),
            free: (0..config.conns_max).rev().collect(),
            buffers,
            listeners: Vec::with_capacity(8),
            ready: vec![empty; EVENTS_PER_WAIT].into_boxed_slice(),
            dirty: Vec::with_capacity(config.conns_max as usize),
            pending: Vec::with_capacity(config.conns_max as usize),
            pass: 0,
            stats: NetStats::default(),
            config,
        })
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Listens on `addr` (port 0 picks a free port) and starts accepting.
    pub fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| NetError::Listen { addr, source })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| NetError::Io {
                call: "fcntl(O_NONBLOCK)",
                source,
            })?;
        let local = listener.local_addr().map_err(|source| NetError::Io {
            call: "getsockname",
            source,
        })?;
        let index = self.listeners.len() as u32;
        let data = epoll_data(LISTENER_TAG | index, 0);
        if let Err(errno) = self.ctl(libc::EPOLL_CTL_ADD, listener.as_raw_fd(), IN, data) {
            return Err(NetError::Io {
                call: "epoll_ctl(ADD)",
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
        self.listeners.push(listener);
        Ok((ListenerId(index), local))
    }

    /// Starts connecting to `addr`; [`NetEvent::Connected`] or `ConnectFailed` follows.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError> {
        let SocketAddr::V4(v4) = addr else {
            return Err(NetError::NotIpv4(addr));
        };
        let Some(&slot) = self.free.last() else {
            return Err(NetError::NoFreeSlot {
                conns_max: self.config.conns_max,
            });
        };
        let flags = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: plain socket(2); the result is checked before it is owned.
        let raw = unsafe { libc::socket(libc::AF_INET, flags, 0) };
        if raw < 0 {
            return Err(io_error("socket"));
        }
        // SAFETY: raw was just created, is valid, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        self.tune(raw);
        let sa = sockaddr(v4);
        // SAFETY: connect(2) on a valid socket with a sockaddr_in of the size stated.
        let rc = unsafe {
            libc::connect(
                raw,
                std::ptr::addr_of!(sa).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        // A non-blocking connect completes later (EINPROGRESS; EINTR means the same). Any
        // other error is final now; it is reported by the next poll, as a completion would be.
        let connect_errno = match (rc, errno()) {
            (0, _) | (_, libc::EINPROGRESS | libc::EINTR) => 0,
            (_, e) => e,
        };
        // A connect that already failed is not registered: nothing more can happen to it.
        let interest = (connect_errno == 0).then_some(OUT);
        let id = self.install(slot, fd, State::Connecting, interest)?;
        if connect_errno != 0 {
            self.conns[slot as usize].connect_errno = connect_errno;
            self.owe(slot);
        }
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

    /// Drops the first `n` received bytes (the owner decoded them); a buffer that was full
    /// starts reading again.
    pub fn consume(&mut self, conn: ConnId, n: usize) {
        let base = self.recv_base(conn.slot);
        let Some(c) = self.live_mut(conn) else { return };
        let len = c.recv_len as usize;
        assert!(n <= len, "consumed {n} of {len} received bytes");
        c.recv_len -= n as u32;
        self.buffers.copy_within(base + n..base + len, base);
        self.update_interest(conn.slot);
    }

    /// Queues `bytes` for sending, all or nothing; they are written at the next
    /// [`EpollReactor::flush`] or poll.
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
                len: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
                free,
            });
        }
        let at = base + c.send_len as usize;
        c.send_len += bytes.len() as u32;
        let listed = std::mem::replace(&mut c.dirty, true);
        self.buffers[at..at + bytes.len()].copy_from_slice(bytes);
        if !listed {
            self.dirty.push(conn.slot);
        }
        Ok(())
    }

    /// Writes what was queued since the last flush now instead of at the next poll (call after
    /// a burst of sends so they leave in this pass). No system call when nothing is queued.
    pub fn flush(&mut self) -> Result<(), NetError> {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &slot in &dirty {
            self.conns[slot as usize].dirty = false;
            self.write(slot);
        }
        dirty.clear();
        self.dirty = dirty;
        Ok(())
    }

    /// Bytes queued and not yet written.
    pub fn send_pending(&self, conn: ConnId) -> u32 {
        self.live(conn).map_or(0, |c| c.send_len)
    }

    /// Closes a connection; [`NetEvent::Closed`] with [`CloseReason::Local`] follows.
    pub fn close(&mut self, conn: ConnId) {
        if self.live(conn).is_some() {
            self.begin_close(conn.slot, CloseReason::Local);
        }
    }

    /// Writes what is queued, waits for readiness (not at all in `BusyPoll` mode, at most
    /// `timeout_ns` rounded up to whole milliseconds in `Blocking` mode), reads, accepts, and
    /// appends events to `events`. `now_ns` is unused (no timers).
    pub fn poll(
        &mut self,
        _now_ns: u64,
        timeout_ns: u64,
        events: &mut Vec<NetEvent>,
    ) -> Result<(), NetError> {
        self.pass = self.pass.wrapping_add(1);
        self.flush()?;
        let timeout_ms = match self.config.wait {
            WaitMode::Blocking if self.pending.is_empty() => wait_ms(timeout_ns),
            WaitMode::Blocking | WaitMode::BusyPoll => 0,
        };
        let n = if self.needs_readiness() {
            self.stats.kernel_entries += 1;
            // SAFETY: `ready` is a live buffer of EVENTS_PER_WAIT epoll_event the kernel may
            // fill.
            unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    self.ready.as_mut_ptr(),
                    EVENTS_PER_WAIT as i32,
                    timeout_ms,
                )
            }
        } else {
            0
        };
        if n < 0 && errno() != libc::EINTR {
            return Err(io_error("epoll_wait"));
        }
        for i in 0..n.max(0) as usize {
            let event = self.ready[i];
            let (bits, data) = (event.events, event.u64);
            self.on_ready(bits, data, events);
        }
        if self.spinning() {
            for slot in 0..self.conns.len() as u32 {
                if self.conns[slot as usize].state == State::Open {
                    self.read(slot, 0, events);
                }
            }
        }
        self.report_pending(events);
        Ok(())
    }

    fn on_ready(&mut self, bits: u32, data: u64, events: &mut Vec<NetEvent>) {
        let (slot, generation) = split(data);
        if slot & LISTENER_TAG != 0 {
            return self.accept(slot & !LISTENER_TAG, events);
        }
        let Some(c) = self.conns.get_mut(slot as usize) else {
            return;
        };
        if c.generation != generation {
            return; // readiness of a previous occupant of the slot
        }
        match c.state {
            State::Connecting if c.connect_errno == 0 => self.finish_connect(slot, bits, events),
            State::Open => {
                if bits & (IN | ERR | HUP) != 0 {
                    self.read(slot, bits, events);
                }
                let c = &mut self.conns[slot as usize];
                if bits & OUT != 0 && c.state == State::Open && c.send_blocked {
                    c.send_blocked = false;
                    self.write(slot);
                }
            }
            // Closing: shut down, freed at the end of this poll. Connecting with an errno:
            // failed at once, reported at the end of this poll.
            State::Connecting | State::Closing | State::Free => {}
        }
    }

    /// Accepts up to [`ACCEPTS_PER_PASS`] connections (readiness brings back the rest).
    fn accept(&mut self, listener: u32, events: &mut Vec<NetEvent>) {
        let Some(l) = self.listeners.get(listener as usize) else {
            return;
        };
        let lfd = l.as_raw_fd();
        for _ in 0..ACCEPTS_PER_PASS {
            let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
            // SAFETY: accept4(2) on a valid listening socket; null address pointers are allowed.
            let raw =
                unsafe { libc::accept4(lfd, std::ptr::null_mut(), std::ptr::null_mut(), flags) };
            if raw < 0 {
                match errno() {
                    libc::EAGAIN | libc::EINTR => return,
                    libc::ECONNABORTED => continue, // gone before we took it
                    _ => {
                        self.stats.accept_errors += 1;
                        return;
                    }
                }
            }
            // SAFETY: raw was just returned by accept4, is valid, and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            self.adopt(listener, fd, events);
        }
    }

    fn adopt(&mut self, listener: u32, fd: OwnedFd, events: &mut Vec<NetEvent>) {
        let Some(&slot) = self.free.last() else {
            self.stats.accept_refused += 1;
            return; // dropping fd closes the socket at once
        };
        self.tune(fd.as_raw_fd());
        // Spin reads need no read readiness; errors and hang-ups are reported anyway.
        let interest = if self.spinning() { 0 } else { IN };
        match self.install(slot, fd, State::Open, Some(interest)) {
            Ok(conn) => {
                self.stats.accepted += 1;
                events.push(NetEvent::Accepted {
                    listener: ListenerId(listener),
                    conn,
                });
            }
            Err(_) => self.stats.accept_errors += 1,
        }
    }

    /// The connect finished one way or the other (or the readiness was stale: still going).
    fn finish_connect(&mut self, slot: u32, bits: u32, events: &mut Vec<NetEvent>) {
        let c = &self.conns[slot as usize];
        let id = ConnId {
            slot,
            generation: c.generation,
        };
        let errno = match socket_error(c.raw_fd()) {
            0 if is_connected(c.raw_fd()) => 0,
            // Hung up with no error to show and no peer: it will never connect (and a
            // level-triggered hang-up must not come back on every poll).
            0 if bits & (ERR | HUP) != 0 => libc::ENOTCONN,
            0 => return, // not yet
            e => e,
        };
        match errno {
            0 => {
                self.conns[slot as usize].state = State::Open;
                events.push(NetEvent::Connected { conn: id });
                self.update_interest(slot);
            }
            errno => {
                // Reported as ConnectFailed; no Closed for a connection that never opened.
                events.push(NetEvent::ConnectFailed { conn: id, errno });
                self.release(slot);
            }
        }
    }

    /// One read into the free end of the receive buffer (at most one per connection per
    /// poll). `bits` are the readiness flags (0 for a spin read).
    fn read(&mut self, slot: u32, bits: u32, events: &mut Vec<NetEvent>) {
        let cap = self.config.recv_buffer_bytes;
        let base = self.recv_base(slot);
        let c = &mut self.conns[slot as usize];
        if c.read_pass == self.pass {
            return;
        }
        c.read_pass = self.pass;
        let hung_up = bits & (ERR | HUP) != 0;
        if c.recv_len >= cap {
            // Not reading (back-pressure); an error or hang-up is level-triggered and would
            // come back on every poll, so it ends the connection now.
            if hung_up {
                let reason = reason_for(socket_error(c.raw_fd()));
                self.begin_close(slot, reason);
            }
            return;
        }
        let at = base + c.recv_len as usize;
        let room = (cap - c.recv_len) as usize;
        let fd = c.raw_fd();
        let buf = &mut self.buffers[at..at + room];
        // SAFETY: recv(2) into `buf`, which is valid for `room` bytes and not otherwise
        // borrowed during the call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), room, 0) };
        match n {
            n if n > 0 => {
                let c = &mut self.conns[slot as usize];
                c.recv_len += n as u32;
                self.stats.bytes_received += n as u64;
                let id = ConnId {
                    slot,
                    generation: c.generation,
                };
                events.push(NetEvent::Readable { conn: id });
                if c.recv_len == cap {
                    self.update_interest(slot);
                }
            }
            0 => self.begin_close(slot, CloseReason::PeerClosed),
            _ => match errno() {
                // Readiness can be stale, and a spin read finds nothing on most passes.
                libc::EAGAIN if hung_up => self.begin_close(slot, reason_for(socket_error(fd))),
                libc::EAGAIN => {}
                libc::EINTR => self.stats.retries += 1, // readiness brings it back
                e => self.begin_close(slot, reason_for(e)),
            },
        }
    }

    /// Writes what the slot has queued, as much as the kernel takes; the rest waits for
    /// EPOLLOUT. An error closes the connection (reported by the end of the next poll).
    fn write(&mut self, slot: u32) {
        let base = self.send_base(slot);
        let c = &mut self.conns[slot as usize];
        if c.state != State::Open || c.send_len == 0 || c.send_blocked {
            return;
        }
        let len = c.send_len as usize;
        let buf = &self.buffers[base..base + len];
        let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
        // SAFETY: send(2) from `buf`, valid for `len` bytes; MSG_NOSIGNAL: a closed peer is an
        // EPIPE, never a SIGPIPE.
        let n = unsafe { libc::send(c.raw_fd(), buf.as_ptr().cast(), len, flags) };
        if n >= 0 {
            let n = n as usize;
            self.stats.bytes_sent += n as u64;
            c.send_len -= n as u32;
            if n < len {
                self.stats.partial_sends += 1;
                c.send_blocked = true;
                self.buffers.copy_within(base + n..base + len, base);
            }
        } else {
            match errno() {
                libc::EAGAIN | libc::EINTR => {
                    self.stats.retries += 1;
                    c.send_blocked = true;
                }
                e => return self.begin_close(slot, reason_for(e)),
            }
        }
        self.update_interest(slot);
    }

    /// Starts closing an open or connecting slot: shut down now, reported and freed at the end
    /// of the next poll.
    fn begin_close(&mut self, slot: u32, reason: CloseReason) {
        let c = &mut self.conns[slot as usize];
        if !matches!(c.state, State::Open | State::Connecting) {
            return;
        }
        if reason == CloseReason::Reset {
            self.stats.resets += 1;
        }
        c.state = State::Closing;
        c.close_reason = reason;
        // The peer sees the end now, not at the next poll. A failure (the socket is already
        // dead) changes nothing.
        // SAFETY: shutdown(2) on the slot's own descriptor, still open.
        unsafe { libc::shutdown(c.raw_fd(), libc::SHUT_RDWR) };
        self.owe(slot);
    }

    fn owe(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        if !std::mem::replace(&mut c.pending, true) {
            self.pending.push(slot);
        }
    }

    /// Reports the closes and failed connects owed, and frees their slots.
    fn report_pending(&mut self, events: &mut Vec<NetEvent>) {
        let mut pending = std::mem::take(&mut self.pending);
        for &slot in &pending {
            let c = &mut self.conns[slot as usize];
            c.pending = false;
            let conn = ConnId {
                slot,
                generation: c.generation,
            };
            match c.state {
                State::Closing => events.push(NetEvent::Closed {
                    conn,
                    reason: c.close_reason,
                }),
                State::Connecting => events.push(NetEvent::ConnectFailed {
                    conn,
                    errno: c.connect_errno,
                }),
                State::Open | State::Free => continue,
            }
            self.release(slot);
        }
        pending.clear();
        self.pending = pending;
    }

    /// Takes `slot` (the last free one) for `fd` and registers it with `interest` (`None`: not
    /// at all, for a connect that already failed).
    fn install(
        &mut self,
        slot: u32,
        fd: OwnedFd,
        state: State,
        interest: Option<u32>,
    ) -> Result<ConnId, NetError> {
        let generation = self.conns[slot as usize].generation;
        if let Some(interest) = interest {
            let data = epoll_data(slot, generation);
            if let Err(errno) = self.ctl(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), interest, data) {
                return Err(NetError::Io {
                    call: "epoll_ctl(ADD)",
                    source: std::io::Error::from_raw_os_error(errno),
                });
            }
        }
        let popped = self.free.pop();
        assert_eq!(popped, Some(slot), "install takes the last free slot");
        let c = &mut self.conns[slot as usize];
        assert_eq!(c.state, State::Free, "slot {slot} installed while in use");
        c.fd = Some(fd);
        c.state = state;
        c.interest = interest.unwrap_or(0);
        Ok(ConnId { slot, generation })
    }

    /// Closes the descriptor (which leaves the epoll set) and frees the slot under a new
    /// generation. The `dirty` and `pending` marks stay: they say the slot is still listed.
    fn release(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        *c = Conn {
            generation: c.generation.wrapping_add(1),
            dirty: c.dirty,
            pending: c.pending,
            ..Conn::free()
        };
        self.free.push(slot);
    }

    /// Registers the interest an open slot calls for, if it changed (a connecting slot keeps
    /// the one it was installed with). A failure closes the connection with the errno.
    fn update_interest(&mut self, slot: u32) {
        let cap = self.config.recv_buffer_bytes;
        let spinning = self.spinning();
        let c = &self.conns[slot as usize];
        if c.state != State::Open {
            return;
        }
        let read = if !spinning && c.recv_len < cap { IN } else { 0 };
        let want = read | if c.send_blocked { OUT } else { 0 };
        if want == c.interest {
            return;
        }
        let (fd, data) = (c.raw_fd(), epoll_data(slot, c.generation));
        match self.ctl(libc::EPOLL_CTL_MOD, fd, want, data) {
            Ok(()) => self.conns[slot as usize].interest = want,
            Err(errno) => self.begin_close(slot, CloseReason::Error(errno)),
        }
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, interest: u32, data: u64) -> Result<(), i32> {
        let mut event = libc::epoll_event {
            events: interest,
            u64: data,
        };
        // SAFETY: epoll_ctl(2) on our epoll instance with a valid descriptor and event.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) };
        if rc == 0 {
            Ok(())
        } else {
            Err(errno())
        }
    }

    /// Socket options every connection gets: no Nagle delay, the configured kernel send buffer.
    fn tune(&self, fd: RawFd) {
        set_nodelay(fd);
        if let Some(bytes) = self.config.socket_send_buffer {
            set_send_buffer(fd, bytes);
        }
    }

    /// Whether this pass asks epoll for readiness. Always, except with spin reads (which read
    /// every connection anyway): then only while a connect or a blocked write waits for it,
    /// and every [`SPIN_WAIT_EVERY`] passes for accepts and anything else, so a spinning
    /// pass makes one system call a connection (its read), as a raw busy-polled socket does.
    fn needs_readiness(&self) -> bool {
        !self.spinning()
            || self.pass % SPIN_WAIT_EVERY == 0
            || self
                .conns
                .iter()
                .any(|c| c.state == State::Connecting || c.send_blocked)
    }

    fn spinning(&self) -> bool {
        self.config.spin_reads && self.config.wait == WaitMode::BusyPoll
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

/// A `Blocking` wait in epoll's milliseconds: rounded up (a wait is never cut short to
/// nothing) and capped at [`WAIT_MS_MAX`] (never read as "forever").
fn wait_ms(timeout_ns: u64) -> i32 {
    timeout_ns.div_ceil(1_000_000).min(WAIT_MS_MAX) as i32
}

fn epoll_data(slot: u32, generation: u32) -> u64 {
    u64::from(generation) << 32 | u64::from(slot)
}

fn split(data: u64) -> (u32, u32) {
    (data as u32, (data >> 32) as u32)
}

/// Why a connection ended, from the errno that ended it (0: an orderly end).
fn reason_for(errno: i32) -> CloseReason {
    match errno {
        0 => CloseReason::PeerClosed,
        libc::ECONNRESET | libc::EPIPE => CloseReason::Reset,
        e => CloseReason::Error(e),
    }
}

/// The socket's pending error (SO_ERROR, which clears it); a failing getsockopt gives its own
/// errno.
fn socket_error(fd: RawFd) -> i32 {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt(2) writing one c_int into `value`, whose size is `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            std::ptr::addr_of_mut!(value).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        value
    } else {
        errno()
    }
}

/// Whether the socket has a peer (a connect that reports no error may still be under way).
fn is_connected(fd: RawFd) -> bool {
    // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: getpeername(2) writing at most `len` bytes into `addr`.
    let rc = unsafe { libc::getpeername(fd, std::ptr::addr_of_mut!(addr).cast(), &mut len) };
    rc == 0
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn io_error(call: &'static str) -> NetError {
    NetError::Io {
        call,
        source: std::io::Error::last_os_error(),
    }
}

#[cfg(test)]
mod tests;
