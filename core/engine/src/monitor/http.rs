//! The side thread's HTTP connections, many side by side: one non-blocking listener and a
//! bounded table of non-blocking connections, watched with poll(2). Each connection walks
//! reading → writing → lingering (or streaming, for the live page's events). It owns the
//! deadlines and limits; what a request means (the routes) stays in `monitor/mod.rs`.
//!
//! Not a hot path: it allocates (request heads, answers), but every table has a named bound
//! and every pass does a bounded amount of work, so a crowd of idle, slow or hostile clients
//! can never keep Prometheus or a browser waiting. A connection that sent not one byte by its
//! deadline is closed without an answer: a browser opens such connections speculatively, and
//! an answer on one would be taken as the answer to the request it sends later.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::clock::{Clock, TscClock};

use super::MonitorCounters;

/// Connections being read, answered or lingering at once (live-page streams not included);
/// one more evicts the oldest silent one.
pub const CONNECTIONS_MAX: usize = 256;
/// Browsers on the live page at once; one more is refused (503).
pub const EVENT_CLIENTS_MAX: usize = 16;
/// Longest request head accepted, its final blank line (`\r\n\r\n`) not counted; a longer
/// one is refused 431.
pub const REQUEST_HEAD_MAX: usize = 8 * 1024;
/// The terminator that ends a request head.
const HEAD_END: &[u8] = b"\r\n\r\n";
/// How long a client may take to send its whole request head, from its connection.
pub const REQUEST_WAIT_NS: u64 = 500_000_000;
/// How long a client may take to read its whole answer.
pub const RESPONSE_WAIT_NS: u64 = 5_000_000_000;
/// After an answer, how long what the client still sends is read and dropped before the
/// close: closing with unread bytes would reset the connection and could destroy the answer
/// in the client's buffers.
pub const LINGER_NS: u64 = 1_000_000_000;
/// Event bytes buffered for one live-page client; a client further behind is dropped.
pub const EVENT_BACKLOG_MAX: usize = 256 * 1024;
/// Connections accepted per pass (the rest wait in the kernel's queue for the next pass).
const ACCEPTS_PER_PASS: usize = 64;
/// Reads or writes per connection per pass.
const IO_PER_PASS: usize = 4;
/// Bytes per read.
const READ_CHUNK: usize = 4096;

/// A complete request head, as the routes see it.
#[derive(Debug)]
pub struct Request {
    /// The method, as sent.
    pub method: String,
    /// The path, without its query.
    pub path: String,
}

/// What a route answers.
#[derive(Debug)]
pub enum Answer {
    /// A whole answer; the connection closes after it.
    Page {
        /// Status line's code and reason, e.g. "200 OK".
        status: &'static str,
        /// Its `Content-Type`.
        content_type: &'static str,
        /// Its body.
        body: Vec<u8>,
    },
    /// A server-sent event stream whose first event is this (the `data: …` line included).
    Stream(String),
}

impl Answer {
    /// A plain-text refusal.
    pub fn refuse(status: &'static str, why: &str) -> Self {
        Answer::Page {
            status,
            content_type: "text/plain; charset=utf-8",
            body: why.as_bytes().to_vec(),
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug)]
enum Phase {
    /// Reading the request head (empty: nothing received yet).
    Reading(Vec<u8>),
    /// Writing `out` from `sent`; a stream stays open after it, a page lingers.
    Writing {
        out: Vec<u8>,
        sent: usize,
        stream: bool,
    },
    /// Answered and shut for writing; reading and dropping until the peer closes.
    Lingering,
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    phase: Phase,
    /// When the current phase must end (`u64::MAX`: a stream, no end).
    deadline_ns: u64,
    /// Set once it is to be dropped at the end of the pass.
    closed: bool,
}

impl Conn {
    fn is_stream(&self) -> bool {
        matches!(self.phase, Phase::Writing { stream: true, .. })
    }

    fn is_silent(&self) -> bool {
        matches!(&self.phase, Phase::Reading(head) if head.is_empty())
    }
}

/// The listener and its connections.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    conns: Vec<Conn>,
    fds: Vec<libc::pollfd>,
    clock: TscClock,
    counters: Arc<MonitorCounters>,
}

impl Server {
    /// Takes a bound listener (made non-blocking here).
    pub fn new(
        listener: TcpListener,
        clock: TscClock,
        counters: Arc<MonitorCounters>,
    ) -> std::io::Result<Self> {
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            conns: Vec::with_capacity(CONNECTIONS_MAX + EVENT_CLIENTS_MAX),
            fds: Vec::with_capacity(1 + CONNECTIONS_MAX + EVENT_CLIENTS_MAX),
            clock,
            counters,
        })
    }

    /// The address it serves.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Live-page clients now.
    pub fn streams(&self) -> usize {
        self.conns.iter().filter(|c| c.is_stream()).count()
    }

    /// One pass: waits at most `wait_ns` for any socket (less if a deadline comes first),
    /// accepts, reads, answers complete requests through `route`, writes, and ends what
    /// passed its deadline.
    pub fn turn(&mut self, wait_ns: u64, mut route: impl FnMut(&Request) -> Answer) {
        let now = self.clock.now_ns();
        let next = self.conns.iter().map(|c| c.deadline_ns).min();
        let wait_ns = next.map_or(wait_ns, |d| wait_ns.min(d.saturating_sub(now)));
        self.wait(wait_ns);
        let now = self.clock.now_ns();
        for i in 0..self.conns.len() {
            let revents = self.fds.get(i + 1).map_or(0, |p| p.revents);
            if revents != 0 {
                self.ready(i, now, &mut route);
            }
        }
        self.expire(now);
        self.conns.retain(|c| !c.closed);
        if self.fds.first().is_some_and(|p| p.revents != 0) {
            self.accept(now);
        }
        self.counters
            .connections
            .store(self.conns.len() as u64, Ordering::Relaxed);
    }

    /// Queues `event` for every live-page client; one too far behind is dropped.
    pub fn broadcast(&mut self, event: &[u8]) {
        let mut dropped = 0;
        for c in self.conns.iter_mut().filter(|c| c.is_stream()) {
            let Phase::Writing { out, sent, .. } = &mut c.phase else {
                continue;
            };
            out.drain(..*sent);
            *sent = 0;
            if out.len() + event.len() > EVENT_BACKLOG_MAX {
                c.closed = true;
                dropped += 1;
                continue;
            }
            out.extend_from_slice(event);
            Self::write(c, self.clock.now_ns(), &self.counters);
        }
        self.conns.retain(|c| !c.closed);
        self.counters
            .clients_dropped
            .fetch_add(dropped, Ordering::Relaxed);
    }

    /// poll(2) on the listener and every connection, for what each phase waits for.
    fn wait(&mut self, wait_ns: u64) {
        self.fds.clear();
        let fd = self.listener.as_raw_fd();
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        for c in &self.conns {
            let events = match &c.phase {
                Phase::Writing { out, sent, .. } if *sent < out.len() => libc::POLLOUT,
                _ => libc::POLLIN,
            };
            self.fds.push(libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        // Rounded up so a deadline is never polled short of, then spun on.
        let ms = i32::try_from(wait_ns.div_ceil(1_000_000)).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a live Vec of initialised pollfd records owned here; poll(2)
        // writes only their `revents` fields, within the length passed; every fd in it
        // belongs to a socket this server owns for the duration of the call.
        #[allow(unsafe_code)]
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            // EINTR: the pass goes on with nothing ready.
            self.fds.iter_mut().for_each(|p| p.revents = 0);
        }
    }

    /// Accepts what the kernel holds, at most [`ACCEPTS_PER_PASS`]; a full table evicts.
    fn accept(&mut self, now: u64) {
        for _ in 0..ACCEPTS_PER_PASS {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // Out of descriptors or a connection reset before its accept: next pass.
                Err(_) => return,
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            if self.conns.len() - self.streams() >= CONNECTIONS_MAX {
                self.evict();
            }
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
            self.conns.push(Conn {
                stream,
                phase: Phase::Reading(Vec::new()),
                deadline_ns: now + REQUEST_WAIT_NS,
                closed: false,
            });
        }
    }

    /// Closes one connection to make room: the oldest that sent nothing, else the oldest
    /// lingering, else the oldest of all but the streams (the table is in accept order).
    fn evict(&mut self) {
        let lingering = |c: &Conn| matches!(c.phase, Phase::Lingering);
        let victim = (self.conns.iter().position(Conn::is_silent))
            .or_else(|| self.conns.iter().position(lingering))
            .or_else(|| self.conns.iter().position(|c| !c.is_stream()));
        if let Some(i) = victim {
            self.conns.remove(i);
            self.counters.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Serves connection `i`, which poll(2) says is ready.
    fn ready(&mut self, i: usize, now: u64, route: &mut impl FnMut(&Request) -> Answer) {
        let counters = Arc::clone(&self.counters);
        let streams = self.streams();
        let c = &mut self.conns[i];
        match &mut c.phase {
            Phase::Reading(head) => match read_head(&mut c.stream, head) {
                Head::More => {}
                Head::Closed if head.is_empty() => c.closed = true,
                Head::Closed => {
                    answer_bad(c, now, &counters, "400 Bad Request", "incomplete request\n")
                }
                Head::TooLarge => answer_bad(
                    c,
                    now,
                    &counters,
                    "431 Request Header Fields Too Large",
                    "request head too large\n",
                ),
                Head::Complete(request, head_only) => {
                    counters.requests.fetch_add(1, Ordering::Relaxed);
                    let answer = match route(&request) {
                        Answer::Stream(_) if streams >= EVENT_CLIENTS_MAX => {
                            counters.clients_dropped.fetch_add(1, Ordering::Relaxed);
                            Answer::refuse("503 Service Unavailable", "too many live clients\n")
                        }
                        answer => answer,
                    };
                    start_answer(c, now, &answer, head_only);
                    Self::write(c, now, &counters);
                }
            },
            Phase::Writing {
                stream: true,
                out,
                sent,
            } if *sent >= out.len() => {
                // A live-page client only ever sends its close.
                drain(c);
            }
            Phase::Writing { .. } => Self::write(c, now, &counters),
            Phase::Lingering => drain(c),
        }
    }

    /// Writes what it can of the connection's answer; a finished page lingers.
    fn write(c: &mut Conn, now: u64, counters: &MonitorCounters) {
        let Phase::Writing { out, sent, stream } = &mut c.phase else {
            return;
        };
        for _ in 0..IO_PER_PASS {
            if *sent >= out.len() {
                break;
            }
            match c.stream.write(&out[*sent..]) {
                Ok(0) => {
                    c.closed = true;
                    return;
                }
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    if *stream {
                        counters.clients_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    c.closed = true;
                    return;
                }
            }
        }
        if *sent < out.len() || *stream {
            return;
        }
        let _ = c.stream.shutdown(Shutdown::Write);
        c.phase = Phase::Lingering;
        c.deadline_ns = now + LINGER_NS;
    }

    /// Ends what passed its deadline: a silent connection closed unanswered, a partial head
    /// answered 400, an answer not taken in time cut, a lingering one closed.
    fn expire(&mut self, now: u64) {
        let counters = Arc::clone(&self.counters);
        for c in self
            .conns
            .iter_mut()
            .filter(|c| !c.closed && now >= c.deadline_ns)
        {
            match &c.phase {
                Phase::Reading(head) if head.is_empty() => {
                    counters.silent_closed.fetch_add(1, Ordering::Relaxed);
                    c.closed = true;
                }
                Phase::Reading(_) => {
                    counters.slow_cut.fetch_add(1, Ordering::Relaxed);
                    answer_bad(c, now, &counters, "400 Bad Request", "incomplete request\n");
                }
                Phase::Writing { stream: false, .. } => {
                    counters.write_timeouts.fetch_add(1, Ordering::Relaxed);
                    c.closed = true;
                }
                Phase::Writing { stream: true, .. } => {}
                Phase::Lingering => c.closed = true,
            }
        }
    }
}

/// What reading a request head came to.
enum Head {
    More,
    Closed,
    TooLarge,
    /// The request, and whether only the head is wanted (HEAD).
    Complete(Request, bool),
}

/// Reads what the socket holds into `head`, bounded, and looks for the head's end.
fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> Head {
    let mut buf = [0u8; READ_CHUNK];
    for _ in 0..IO_PER_PASS {
        match stream.read(&mut buf) {
            Ok(0) => return Head::Closed,
            Ok(n) => {
                // Only the new bytes (and the 3 before them) can complete the terminator.
                let from = head.len().saturating_sub(HEAD_END.len() - 1);
                head.extend_from_slice(&buf[..n]);
                let found = head[from..]
                    .windows(HEAD_END.len())
                    .position(|w| w == HEAD_END);
                if let Some(end) = found {
                    return parse(&head[..from + end]);
                }
                // No terminator within the longest head and its terminator: too large.
                if head.len() >= REQUEST_HEAD_MAX + HEAD_END.len() {
                    return Head::TooLarge;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Head::More,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Head::Closed,
        }
    }
    Head::More
}

fn parse(head: &[u8]) -> Head {
    if head.len() > REQUEST_HEAD_MAX {
        return Head::TooLarge;
    }
    let text = String::from_utf8_lossy(head);
    let mut words = text.lines().next().unwrap_or("").split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let request = Request {
        method: method.to_string(),
        path: path.to_string(),
    };
    Head::Complete(request, method == "HEAD")
}

/// Refuses what the side thread could not read as a request (counted).
fn answer_bad(c: &mut Conn, now: u64, counters: &MonitorCounters, status: &'static str, why: &str) {
    counters.requests.fetch_add(1, Ordering::Relaxed);
    counters.bad_requests.fetch_add(1, Ordering::Relaxed);
    start_answer(c, now, &Answer::refuse(status, why), false);
    Server::write(c, now, counters);
}

fn start_answer(c: &mut Conn, now: u64, answer: &Answer, head_only: bool) {
    let (out, stream) = match answer {
        Answer::Page {
            status,
            content_type,
            body,
        } => {
            let mut out = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
                 Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            if !head_only {
                out.extend_from_slice(body);
            }
            (out, false)
        }
        Answer::Stream(first) => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                        Cache-Control: no-cache\r\nConnection: keep-alive\r\n\r\n";
            ((head.to_string() + first).into_bytes(), true)
        }
    };
    c.phase = Phase::Writing {
        out,
        sent: 0,
        stream,
    };
    c.deadline_ns = if stream {
        u64::MAX
    } else {
        now + RESPONSE_WAIT_NS
    };
}

/// Reads and drops what a peer sends after its answer; its close ends the connection.
fn drain(c: &mut Conn) {
    let mut buf = [0u8; READ_CHUNK];
    for _ in 0..IO_PER_PASS {
        match c.stream.read(&mut buf) {
            Ok(0) => {
                c.closed = true;
                return;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                c.closed = true;
                return;
            }
        }
    }
}
