//! An HTTP/1.1 client on keel's transport (io_uring or epoll, or the simulated network): one
//! kept-alive connection to one host, one request at a time, driven by the owner's loop like
//! every other protocol here (`on_event` with the transport's events, `poll` for timeouts),
//! with its buffers sized at start.
//!
//! Connection state machine, row by row:
//!
//! | state | event | next | what happens |
//! | --- | --- | --- | --- |
//! | idle, no connection | `send` | connecting | connect; the request waits in its buffer |
//! | idle, connected | `send` | awaiting | the request is written |
//! | connecting | connected | awaiting | the request is written |
//! | connecting | connect failed | idle, no connection | `Failed(Connect)` |
//! | awaiting | bytes | awaiting / idle | the response is read; complete: `Response`, and the connection is kept unless the response said close |
//! | awaiting | closed | idle, no connection | a body read until close completes: `Response`; else `Failed(Closed)` (a non-idempotent request is then unknown: see below) |
//! | connecting, awaiting | the deadline passes | idle, no connection | the connection is closed; `TimedOut { idempotent }` |
//! | idle, connected | closed by the peer | idle, no connection | nothing (the next `send` reconnects) |
//!
//! **A timeout is unknown, never failed.** A request whose answer did not come in time may
//! have been carried out; the outcome says whether its method is idempotent. The client never
//! retries anything itself: the layer above decides, and its retries go back through the
//! limiter (issue 14).

use std::net::SocketAddr;

use super::{encode_request, Head, HttpError, Limits, Method, Request, ResponseReader};
use crate::net::{ConnId, NetError, NetEvent, Transport};

/// Settings of one client.
#[derive(Debug, Clone)]
pub struct HttpClientConfig {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The `Host` header.
    pub host: String,
    /// Response bounds.
    pub limits: Limits,
    /// Longest request (line, headers and body), bytes.
    pub request_max: usize,
    /// From `send` to the whole response (connecting included).
    pub timeout_ns: u64,
}

impl HttpClientConfig {
    /// Defaults for `addr`: `Host` is the address, 16 KiB heads, 4 MiB bodies, 8 KiB requests,
    /// 2 s.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            host: addr.to_string(),
            limits: Limits::default(),
            request_max: 8 * 1024,
            timeout_ns: 2_000_000_000,
        }
    }
}

/// Why a request could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// A request is in flight (one at a time on a connection).
    #[error("a request is already in flight")]
    Busy,
    /// The request itself was refused (too large, a field the wire cannot take).
    #[error(transparent)]
    Request(#[from] HttpError),
    /// The transport refused to connect.
    #[error("cannot connect: {0}")]
    Connect(String),
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A whole response: its head in [`HttpClient::head`], its body in [`HttpClient::body`].
    Response {
        /// The status code.
        status: u16,
    },
    /// No whole answer within the timeout: the request may have been carried out. Only an
    /// idempotent one may be sent again.
    TimedOut {
        /// The method.
        method: Method,
        /// Whether sending it again is safe.
        idempotent: bool,
    },
    /// The connection failed or the response was malformed (the connection is closed). For a
    /// request that was written, its effect is unknown unless `idempotent`.
    Failed {
        /// What happened.
        why: FailReason,
        /// Whether the request had been written.
        written: bool,
        /// Whether sending it again is safe.
        idempotent: bool,
    },
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// The connection could not be made (errno).
    Connect(i32),
    /// The connection closed before the whole response.
    Closed,
    /// The response was malformed or too large.
    Response(HttpError),
    /// The transport refused the request's bytes.
    Transport(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    Awaiting,
}

/// What a client counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Requests written.
    pub requests: u64,
    /// Whole responses read.
    pub responses: u64,
    /// Connections made.
    pub connects: u64,
    /// Requests sent on a connection kept from an earlier one.
    pub reused: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Requests that failed (connect, close, malformed response).
    pub failures: u64,
}

/// One client (see the module docs).
#[derive(Debug)]
pub struct HttpClient {
    config: HttpClientConfig,
    conn: Option<ConnId>,
    connected: bool,
    state: State,
    method: Method,
    deadline_ns: u64,
    request: Vec<u8>,
    request_len: usize,
    reader: ResponseReader,
    body: Vec<u8>,
    stats: HttpStats,
}

impl HttpClient {
    /// A client with its buffers allocated (nothing is allocated per request).
    pub fn new(config: HttpClientConfig) -> Self {
        Self {
            request: vec![0; config.request_max],
            body: vec![0; config.limits.body_max],
            reader: ResponseReader::new(config.limits),
            conn: None,
            connected: false,
            state: State::Idle,
            method: Method::Get,
            deadline_ns: u64::MAX,
            request_len: 0,
            stats: HttpStats::default(),
            config,
        }
    }

    /// Its counters.
    pub fn stats(&self) -> HttpStats {
        self.stats
    }

    /// Whether a request is in flight.
    pub fn busy(&self) -> bool {
        self.state != State::Idle
    }

    /// The connection, if one is open or opening (to route the transport's events).
    pub fn conn(&self) -> Option<ConnId> {
        self.conn
    }

    /// The last response's head.
    pub fn head(&self) -> &Head {
        self.reader.head()
    }

    /// The last response's body.
    pub fn body(&self) -> &[u8] {
        &self.body[..self.reader.body_len()]
    }

    /// Starts `req` at `now_ns`: written at once on a kept connection, else after connecting.
    pub fn send(
        &mut self,
        transport: &mut impl Transport,
        now_ns: u64,
        req: &Request<'_>,
    ) -> Result<(), SendError> {
        if self.busy() {
            return Err(SendError::Busy);
        }
        let request = Request {
            host: &self.config.host,
            ..*req
        };
        self.request_len = encode_request(&request, &mut self.request)?;
        self.method = req.method;
        self.deadline_ns = now_ns.saturating_add(self.config.timeout_ns);
        self.reader.start(req.method);
        match (self.conn, self.connected) {
            (Some(conn), true) => {
                self.stats.reused += 1;
                if let Err(e) = self.write(transport, conn) {
                    // Nothing was written: the connection is dropped, the client stays idle.
                    self.drop_conn(transport);
                    return Err(SendError::Connect(e.to_string()));
                }
                self.state = State::Awaiting;
            }
            _ => {
                let conn = transport
                    .connect(self.config.addr)
                    .map_err(|e| SendError::Connect(e.to_string()))?;
                self.conn = Some(conn);
                self.connected = false;
                self.state = State::Connecting;
            }
        }
        Ok(())
    }

    fn write(&mut self, transport: &mut impl Transport, conn: ConnId) -> Result<(), NetError> {
        transport.send(conn, &self.request[..self.request_len])?;
        self.stats.requests += 1;
        Ok(())
    }

    /// Takes one transport event; returns the request's outcome when this event decided it.
    /// Events for other connections are ignored.
    pub fn on_event(
        &mut self,
        transport: &mut impl Transport,
        event: &NetEvent,
    ) -> Option<Outcome> {
        let mine = |c: &ConnId| self.conn == Some(*c);
        match *event {
            NetEvent::Connected { conn } if mine(&conn) => {
                self.connected = true;
                self.stats.connects += 1;
                if self.state != State::Connecting {
                    return None;
                }
                self.state = State::Awaiting;
                match self.write(transport, conn) {
                    Ok(()) => None,
                    Err(e) => {
                        Some(self.fail(transport, FailReason::Transport(e.to_string()), false))
                    }
                }
            }
            NetEvent::ConnectFailed { conn, errno } if mine(&conn) => {
                self.conn = None;
                self.connected = false;
                let was = self.state;
                self.state = State::Idle;
                (was != State::Idle).then(|| {
                    self.stats.failures += 1;
                    Outcome::Failed {
                        why: FailReason::Connect(errno),
                        written: false,
                        idempotent: self.method.idempotent(),
                    }
                })
            }
            NetEvent::Readable { conn } if mine(&conn) => self.read(transport, conn),
            NetEvent::Closed { conn, .. } if mine(&conn) => {
                self.conn = None;
                self.connected = false;
                if self.state != State::Awaiting {
                    self.state = State::Idle;
                    return None;
                }
                self.state = State::Idle;
                match self.reader.on_close() {
                    Ok(()) => {
                        self.stats.responses += 1;
                        Some(Outcome::Response {
                            status: self.reader.head().status,
                        })
                    }
                    Err(_) => {
                        self.stats.failures += 1;
                        Some(Outcome::Failed {
                            why: FailReason::Closed,
                            written: true,
                            idempotent: self.method.idempotent(),
                        })
                    }
                }
            }
            _ => None,
        }
    }

    fn read(&mut self, transport: &mut impl Transport, conn: ConnId) -> Option<Outcome> {
        if self.state != State::Awaiting {
            // Bytes nobody asked for (an answer after a timeout, or unsolicited): the
            // connection cannot be trusted to frame the next response.
            if !transport.received(conn).is_empty() {
                self.drop_conn(transport);
            }
            return None;
        }
        let result = self.reader.feed(transport.received(conn), &mut self.body);
        match result {
            Ok((used, done)) => {
                transport.consume(conn, used);
                if !done {
                    return None;
                }
                self.state = State::Idle;
                self.stats.responses += 1;
                if !self.reader.head().keep_alive || !transport.received(conn).is_empty() {
                    // Closing, or bytes past the response: not reused.
                    self.drop_conn(transport);
                }
                Some(Outcome::Response {
                    status: self.reader.head().status,
                })
            }
            Err(e) => Some(self.fail(transport, FailReason::Response(e), true)),
        }
    }

    /// Closes the connection and forgets it (its `Closed` event is then not ours).
    fn drop_conn(&mut self, transport: &mut impl Transport) {
        if let Some(conn) = self.conn.take() {
            transport.close(conn);
        }
        self.connected = false;
    }

    fn fail(&mut self, transport: &mut impl Transport, why: FailReason, written: bool) -> Outcome {
        self.drop_conn(transport);
        self.state = State::Idle;
        self.stats.failures += 1;
        Outcome::Failed {
            why,
            written,
            idempotent: self.method.idempotent(),
        }
    }

    /// Checks the deadline at `now_ns`: a request past it is `TimedOut` (its connection closed:
    /// a late answer must not be read as the next request's).
    pub fn poll(&mut self, transport: &mut impl Transport, now_ns: u64) -> Option<Outcome> {
        if self.state == State::Idle || now_ns < self.deadline_ns {
            return None;
        }
        self.drop_conn(transport);
        self.state = State::Idle;
        self.stats.timeouts += 1;
        Some(Outcome::TimedOut {
            method: self.method,
            idempotent: self.method.idempotent(),
        })
    }
}
