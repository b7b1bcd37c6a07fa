//! The operator's way in: `keel ctl` talks to an admin thread over a local (Unix) socket, the
//! admin thread talks to the dispatcher loop through a pair of bounded SPSC rings. The loop
//! takes at most one request per pass and answers with fixed-size records (no allocation, no
//! formatting, no lock); the admin thread turns them into text. Reconnecting a venue goes
//! to the executor loop through a bit per venue in [`Shared`]. Every command is answered,
//! logged and counted (docs/operations.md, "Operator control").
//!
//! The socket speaks lines: one request line (at most [`REQUEST_LEN_MAX`] bytes), then the
//! answer — a first line `ok: …` or `error: …`, data lines, and the connection is closed.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, TscClock};

use super::bridge::{Bridge, BridgeStats};
use super::Shared;
use crate::dispatch::{
    DispatchStats, Dispatcher, OperatorCancel, OperatorError, OperatorScope, REFUSAL_REASONS,
};
use crate::guard::breaker::BreakerStats;
use crate::order::{LinkMode, Order, OrderState, Side, StrategyId, SymbolId, VenueId};

/// Longest request line accepted, bytes.
pub const REQUEST_LEN_MAX: usize = 512;
/// Capacity of the ring of requests (admin thread → loop).
const REQUESTS_CAPACITY: usize = 16;
/// Capacity of the ring of answers (loop → admin thread).
const REPLIES_CAPACITY: usize = 1024;
/// Order-table slots the loop scans per pass for a listing (bounds the pass).
const SCAN_PER_PASS: u32 = 4096;
/// How long the admin thread waits for the loop's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);
/// How long a client may take to send its request line, from its connect (in all, not per
/// read: a byte at a time does not extend it).
const READ_WAIT: Duration = Duration::from_secs(2);
/// How long writing one answer may take in all.
const WRITE_WAIT: Duration = Duration::from_secs(2);
/// Connections waiting for their request line at once.
const CONNECTIONS_MAX: usize = 16;

/// What the loop is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminCommand {
    /// The dispatcher's summary, one row per venue and per strategy, then the end.
    Status,
    /// Every open order the scope covers, one row each, then the end.
    OpenOrders(OperatorScope),
    /// Cancel every open order the scope covers.
    CancelAll(OperatorScope),
    /// Enable (true) or disable a strategy's new orders.
    Strategy(StrategyId, bool),
    /// Shed (true) a symbol's new orders, or stop shedding.
    Shed(SymbolId, bool),
    /// The kill switch on (true) or off.
    KillSwitch(bool),
    /// Force a venue's breaker open (true) or closed.
    Breaker(VenueId, bool),
}

/// One request: an id the answers carry, and the command.
#[derive(Debug, Clone, Copy)]
pub struct AdminRequest {
    id: u64,
    command: AdminCommand,
}

/// One venue as the dispatcher sees it.
#[derive(Debug, Clone, Copy)]
pub struct VenueRow {
    venue: VenueId,
    mode: LinkMode,
    breaker_open: bool,
    breaker: BreakerStats,
    lanes: crate::dispatch::LaneDepths,
}

/// One strategy as the dispatcher sees it.
#[derive(Debug, Clone, Copy)]
pub struct StrategyRow {
    strategy: StrategyId,
    disabled: bool,
    bridge: Option<BridgeStats>,
}

/// One answer record.
#[derive(Debug, Clone, Copy)]
#[allow(clippy::large_enum_variant)]
enum Answer {
    Summary {
        dispatch: DispatchStats,
        open_orders: u32,
        kill_switch: bool,
    },
    Venue(VenueRow),
    Strategy(StrategyRow),
    ShedSymbol(SymbolId),
    Order {
        order: Order,
        age_ns: u64,
    },
    /// The last record of a listing.
    End,
    Canceled(OperatorCancel),
    /// A hold changed; this many unreleased orders were withdrawn.
    Held {
        withdrawn: u32,
    },
    Done,
    Refused(OperatorError),
}

#[derive(Debug, Clone, Copy)]
struct AdminReply {
    id: u64,
    answer: Answer,
}

/// A listing the loop is part-way through (across passes).
#[derive(Debug, Clone, Copy)]
enum Listing {
    Status {
        id: u64,
        stage: u32,
    },
    Orders {
        id: u64,
        scope: OperatorScope,
        next_slot: u32,
        rows: u32,
    },
}

impl Listing {
    fn id(&self) -> u64 {
        match *self {
            Listing::Status { id, .. } | Listing::Orders { id, .. } => id,
        }
    }
}

/// The loop's end of the admin rings.
#[derive(Debug)]
pub(super) struct AdminPort {
    requests: rtrb::Consumer<AdminRequest>,
    replies: rtrb::Producer<AdminReply>,
    listing: Option<Listing>,
    /// Scratch: the engine's start, for order ages (sent_ns is in the loop's clock).
    stop_cancel: StopCancel,
    /// Requests up to this id were given up by the admin thread (no answer in time): the
    /// loop skips them, so a command reported unanswered is not carried out later.
    abandoned: Arc<AtomicU64>,
}

/// The admin thread's end.
#[derive(Debug)]
pub struct AdminClient {
    requests: rtrb::Producer<AdminRequest>,
    replies: rtrb::Consumer<AdminReply>,
    next_id: u64,
    abandoned: Arc<AtomicU64>,
}

/// The two ends of a new pair of admin rings.
pub(super) fn admin_channel() -> (AdminPort, AdminClient) {
    let (req_tx, req_rx) = rtrb::RingBuffer::new(REQUESTS_CAPACITY);
    let (rep_tx, rep_rx) = rtrb::RingBuffer::new(REPLIES_CAPACITY);
    let abandoned = Arc::new(AtomicU64::new(0));
    (
        AdminPort {
            requests: req_rx,
            replies: rep_tx,
            listing: None,
            stop_cancel: StopCancel::default(),
            abandoned: Arc::clone(&abandoned),
        },
        AdminClient {
            requests: req_tx,
            replies: rep_rx,
            next_id: 1,
            abandoned,
        },
    )
}

/// Cancel-on-stop as the loop runs it: once asked, the kill switch goes on and every open
/// order is canceled; the cancel is run again every interval (orders in doubt are canceled
/// once resolved, a full cancel lane is retried) until the engine stops.
#[derive(Debug, Clone, Copy, Default)]
struct StopCancel {
    started: bool,
    last_ns: u64,
}

const STOP_CANCEL_INTERVAL_NS: u64 = 100_000_000;

impl AdminPort {
    /// One pass: cancel-on-stop if asked, a listing under way, or one new request. Returns the
    /// units of work done.
    pub(super) fn serve(
        &mut self,
        now_ns: u64,
        dispatcher: &mut Dispatcher,
        bridges: &[Bridge],
        shared: &Shared,
    ) -> u32 {
        let mut work = 0;
        if shared.stop_cancel.load(Ordering::Relaxed) {
            work += self.stop_cancel(now_ns, dispatcher, shared);
        }
        if let Some(listing) = self.listing {
            if listing.id() <= self.abandoned.load(Ordering::Acquire) {
                self.listing = None;
                return work;
            }
            return work + self.continue_listing(now_ns, listing, dispatcher, bridges);
        }
        // An answer needs room: leave the request in its ring until there is some.
        if self.replies.slots() == 0 {
            return work;
        }
        let Ok(request) = self.requests.pop() else {
            return work;
        };
        let id = request.id;
        if id <= self.abandoned.load(Ordering::Acquire) {
            return work + 1;
        }
        let answer = match request.command {
            AdminCommand::Status => {
                self.listing = Some(Listing::Status { id, stage: 0 });
                return work + 1;
            }
            AdminCommand::OpenOrders(scope) => {
                self.listing = Some(Listing::Orders {
                    id,
                    scope,
                    next_slot: 0,
                    rows: 0,
                });
                return work + 1;
            }
            AdminCommand::CancelAll(scope) => match dispatcher.operator_cancel(now_ns, scope) {
                Ok(done) => Answer::Canceled(done),
                Err(e) => Answer::Refused(e),
            },
            AdminCommand::Strategy(s, enabled) => {
                held(dispatcher.set_strategy_enabled(now_ns, s, enabled))
            }
            AdminCommand::Shed(symbol, on) => held(dispatcher.set_symbol_shed(now_ns, symbol, on)),
            AdminCommand::KillSwitch(false) if shared.stop_cancel.load(Ordering::Relaxed) => {
                Answer::Refused(OperatorError::Stopping)
            }
            AdminCommand::KillSwitch(on) => Answer::Held {
                withdrawn: dispatcher.set_kill_switch(now_ns, on),
            },
            AdminCommand::Breaker(venue, open) => {
                match dispatcher.force_breaker(now_ns, venue, open) {
                    Ok(()) => Answer::Done,
                    Err(e) => Answer::Refused(e),
                }
            }
        };
        let pushed = self.replies.push(AdminReply { id, answer });
        debug_assert!(pushed.is_ok(), "room was checked");
        work + 1
    }

    fn stop_cancel(&mut self, now_ns: u64, dispatcher: &mut Dispatcher, shared: &Shared) -> u32 {
        if self.stop_cancel.started
            && now_ns.saturating_sub(self.stop_cancel.last_ns) < STOP_CANCEL_INTERVAL_NS
        {
            return 0;
        }
        if !self.stop_cancel.started {
            self.stop_cancel.started = true;
            dispatcher.set_kill_switch(now_ns, true);
        }
        self.stop_cancel.last_ns = now_ns;
        let everything = OperatorScope::default();
        let work = match dispatcher.operator_cancel(now_ns, everything) {
            Ok(done) => done.queued + done.withdrawn,
            Err(_) => 0,
        };
        // What is still open after this run, then the run itself: the stop trusts the count
        // only once a run has happened.
        shared.open_orders.store(
            u64::from(dispatcher.table().open_count()),
            Ordering::Release,
        );
        shared.stop_cancel_runs.fetch_add(1, Ordering::AcqRel);
        work
    }

    fn continue_listing(
        &mut self,
        now_ns: u64,
        listing: Listing,
        dispatcher: &Dispatcher,
        bridges: &[Bridge],
    ) -> u32 {
        match listing {
            Listing::Status { id, stage } => self.list_status(id, stage, dispatcher, bridges),
            Listing::Orders {
                id,
                scope,
                next_slot,
                rows,
            } => self.list_orders(now_ns, id, scope, next_slot, rows, dispatcher),
        }
    }

    /// Stage 0: the summary; then one row per venue, per strategy, per shed symbol; the end.
    fn list_status(
        &mut self,
        id: u64,
        mut stage: u32,
        dispatcher: &Dispatcher,
        bridges: &[Bridge],
    ) -> u32 {
        let venues = dispatcher.guards().venues.len() as u32;
        let strategies = dispatcher.strategy_count() as u32;
        let symbols = dispatcher.symbol_count();
        let last = 1 + venues + strategies + symbols;
        let mut work = 0;
        while stage <= last && self.replies.slots() > 0 {
            let answer = if stage == 0 {
                Some(Answer::Summary {
                    dispatch: *dispatcher.stats(),
                    open_orders: dispatcher.table().open_count(),
                    kill_switch: dispatcher.kill_switch(),
                })
            } else if stage <= venues {
                let v = VenueId((stage - 1) as u16);
                let guards = &dispatcher.guards().venues[usize::from(v.0)];
                Some(Answer::Venue(VenueRow {
                    venue: v,
                    mode: dispatcher.link_mode(v),
                    breaker_open: guards.breaker.is_open(),
                    breaker: guards.breaker.stats(),
                    lanes: dispatcher.lane_depths(v).unwrap_or_default(),
                }))
            } else if stage <= venues + strategies {
                let s = StrategyId((stage - 1 - venues) as u16);
                // No walk of the strategy's orders here: a pass stays bounded (`open-orders
                // strategy N` lists them, a scan bounded per pass).
                Some(Answer::Strategy(StrategyRow {
                    strategy: s,
                    disabled: dispatcher.strategy_disabled(s),
                    bridge: bridges
                        .iter()
                        .find(|b| b.strategy() == s)
                        .map(Bridge::stats),
                }))
            } else if stage <= venues + strategies + symbols {
                let symbol = SymbolId((stage - 1 - venues - strategies) as u16);
                dispatcher
                    .symbol_shed(symbol)
                    .then_some(Answer::ShedSymbol(symbol))
            } else {
                Some(Answer::End)
            };
            if let Some(answer) = answer {
                let pushed = self.replies.push(AdminReply { id, answer });
                debug_assert!(pushed.is_ok(), "room was checked");
                work += 1;
            }
            stage += 1;
        }
        self.listing = (stage <= last).then_some(Listing::Status { id, stage });
        work
    }

    fn list_orders(
        &mut self,
        now_ns: u64,
        id: u64,
        scope: OperatorScope,
        mut next_slot: u32,
        mut rows: u32,
        dispatcher: &Dispatcher,
    ) -> u32 {
        let table = dispatcher.table();
        let end = next_slot
            .saturating_add(SCAN_PER_PASS)
            .min(table.capacity());
        while next_slot < end && self.replies.slots() > 1 {
            if let Some(order) = table
                .slot(next_slot)
                .filter(|o| !o.state.is_terminal() && scope.covers(o))
            {
                let age_ns = if order.sent_ns == 0 {
                    0
                } else {
                    now_ns.saturating_sub(order.sent_ns)
                };
                let answer = Answer::Order {
                    order: *order,
                    age_ns,
                };
                let pushed = self.replies.push(AdminReply { id, answer });
                debug_assert!(pushed.is_ok(), "room was checked");
                rows += 1;
            }
            next_slot += 1;
        }
        if next_slot >= table.capacity() && self.replies.slots() > 0 {
            let pushed = self.replies.push(AdminReply {
                id,
                answer: Answer::End,
            });
            debug_assert!(pushed.is_ok(), "room was checked");
            self.listing = None;
        } else {
            self.listing = Some(Listing::Orders {
                id,
                scope,
                next_slot,
                rows,
            });
        }
        1
    }
}

fn held(result: Result<u32, OperatorError>) -> Answer {
    match result {
        Ok(withdrawn) => Answer::Held { withdrawn },
        Err(e) => Answer::Refused(e),
    }
}

/// Names and counts the admin thread needs to read and write commands.
#[derive(Debug, Clone)]
pub struct AdminNames {
    /// Symbols, in `SymbolId` order.
    pub symbols: Vec<String>,
    /// Venues, in `VenueId` order.
    pub venues: Vec<String>,
    /// Strategies configured.
    pub strategies: u16,
}

/// Commands the admin thread served, by outcome (read by `keel run`'s report).
#[derive(Debug, Default)]
pub struct AdminCounters {
    /// Requests answered `ok`.
    pub ok: AtomicU64,
    /// Requests answered `error` (unknown command, bad argument, refused by the engine).
    pub errors: AtomicU64,
    /// Requests the loop did not answer in time.
    pub timeouts: AtomicU64,
    /// Connections that sent no complete request line in time, or an oversized one.
    pub bad_requests: AtomicU64,
}

/// The admin thread: accepts `keel ctl` connections on `path`, one at a time, until `stop`.
#[derive(Debug)]
pub struct AdminServer {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file this server made (device, inode): removed at the end only if the
    /// path still names it.
    inode: (u64, u64),
    /// When the path was last checked (a socket removed by hand or a tmp cleaner is made
    /// again).
    checked_at_ns: u64,
    /// The path names something else now: said once.
    path_lost_said: bool,
    client: AdminClient,
    names: AdminNames,
    shared: Arc<Shared>,
    counters: Arc<AdminCounters>,
    clock: TscClock,
}

/// Binds a listener at `path` (mode 0600), replacing only a dead socket; returns it and the
/// socket file's (device, inode).
fn open_listener(path: &Path) -> std::io::Result<(UnixListener, (u64, u64))> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "a live process serves this socket (another engine?): give this engine \
                     its own [operator] admin_socket",
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket: keel replaces only a socket a dead engine left \
                 (move it away or choose another [operator] admin_socket)",
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    let made = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::symlink_metadata(path))
        .and_then(|m| listener.set_nonblocking(true).map(|()| m));
    match made {
        Ok(m) => Ok((listener, (m.dev(), m.ino()))),
        Err(e) => {
            let _ = std::fs::remove_file(path);
            Err(e)
        }
    }
}

/// How often the admin thread checks that its socket file is still there.
const PATH_CHECK_NS: u64 = 1_000_000_000;

/// A connection whose request line is not complete yet.
#[derive(Debug)]
struct Waiting {
    stream: UnixStream,
    line: Vec<u8>,
    deadline_ns: u64,
}

impl Waiting {
    /// Reads what arrived (non-blocking). `None`: keep waiting; `Some(Ok(line))`: a whole
    /// request line (what follows its newline is ignored); `Some(Err(why))`: refused.
    fn read(&mut self, now_ns: u64) -> Option<Result<String, String>> {
        let mut buf = [0u8; REQUEST_LEN_MAX + 1];
        loop {
            let room = REQUEST_LEN_MAX + 1 - self.line.len();
            match (&self.stream).read(&mut buf[..room]) {
                Ok(0) => {
                    return Some(Err(
                        "no complete request line (end it with a newline)".to_string()
                    ))
                }
                Ok(n) => {
                    self.line.extend_from_slice(&buf[..n]);
                    if let Some(end) = self.line.iter().position(|&b| b == b'\n') {
                        // A script piped in whole (`kill-switch on\ncancel-all all\n`) is
                        // refused, not half done: one request per connection.
                        if !self.line[end + 1..].iter().all(u8::is_ascii_whitespace) {
                            return Some(Err("one request line per connection: more followed \
                                             the first line (nothing was done)"
                                .to_string()));
                        }
                        self.line.truncate(end + 1);
                        let line = std::mem::take(&mut self.line);
                        return Some(
                            String::from_utf8(line)
                                .map_err(|_| "the request is not UTF-8".to_string()),
                        );
                    }
                    if self.line.len() > REQUEST_LEN_MAX {
                        return Some(Err(format!(
                            "request longer than {REQUEST_LEN_MAX} bytes (one line per request)"
                        )));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return (now_ns >= self.deadline_ns).then(|| {
                        Err(format!(
                            "no complete request line within {} s of connecting (end it with a \
                             newline)",
                            READ_WAIT.as_secs()
                        ))
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Some(Err(format!("reading the request: {e}"))),
            }
        }
    }
}

/// Why the admin socket could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("admin socket {path}: {source}")]
pub struct AdminSocketError {
    /// The socket path.
    pub path: PathBuf,
    /// The error.
    pub source: std::io::Error,
}

impl AdminServer {
    /// Binds `path`, owner-only (mode 0600: the socket can turn the kill switch off and
    /// cancel every order). A socket file left by a dead engine is replaced; a socket that
    /// something still answers on (another engine's) and anything that is not a socket (a
    /// file, a directory) are refused, never removed.
    pub(super) fn bind(
        path: &Path,
        client: AdminClient,
        names: AdminNames,
        shared: Arc<Shared>,
    ) -> Result<Self, AdminSocketError> {
        let err = |source| AdminSocketError {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let (listener, inode) = open_listener(path).map_err(err)?;
        Ok(Self {
            listener,
            path: path.to_path_buf(),
            inode,
            checked_at_ns: 0,
            path_lost_said: false,
            client,
            names,
            shared,
            counters: Arc::default(),
            clock: TscClock::new(),
        })
    }

    /// The counters, shared with whoever reports them.
    pub fn counters(&self) -> Arc<AdminCounters> {
        Arc::clone(&self.counters)
    }

    /// Serves until the engine stops; removes the socket file at the end (if the path still
    /// names the socket this server made).
    ///
    /// Connections are read side by side, non-blocking, each within [`READ_WAIT`] of its
    /// accept: a client that connects and sends nothing, or a byte at a time, holds only its
    /// own slot, never another operator's command. At most [`CONNECTIONS_MAX`] wait for
    /// their request line at once; more are answered `error:` at once and closed.
    pub(super) fn run(mut self) {
        let mut waiting: Vec<Waiting> = Vec::with_capacity(CONNECTIONS_MAX);
        while !self.shared.stop.load(Ordering::Relaxed) {
            self.check_path();
            let accepted = self.accept_all(&mut waiting);
            let served = self.read_all(&mut waiting);
            if accepted + served == 0 {
                std::thread::sleep(if waiting.is_empty() {
                    Duration::from_millis(10)
                } else {
                    Duration::from_millis(1)
                });
            }
        }
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Once a second: a socket file removed while the engine runs (by hand, by a tmp
    /// cleaner) is made again, and said; a path that names something else now is said once
    /// and left alone.
    fn check_path(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let now_ns = self.clock.now_ns();
        if now_ns.saturating_sub(self.checked_at_ns) < PATH_CHECK_NS {
            return;
        }
        self.checked_at_ns = now_ns;
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.inode => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match open_listener(&self.path) {
                Ok((listener, inode)) => {
                    self.listener = listener;
                    self.inode = inode;
                    self.path_lost_said = false;
                    tracing::warn!(
                        target: "keel::ctl",
                        socket = %self.path.display(),
                        "admin socket file was removed: opened again"
                    );
                }
                Err(e) if !self.path_lost_said => {
                    self.path_lost_said = true;
                    tracing::error!(
                        target: "keel::ctl",
                        socket = %self.path.display(),
                        error = %e,
                        "admin socket file was removed and cannot be made again: keel ctl \
                         cannot reach this engine"
                    );
                }
                Err(_) => {}
            },
            _ if !self.path_lost_said => {
                self.path_lost_said = true;
                tracing::error!(
                    target: "keel::ctl",
                    socket = %self.path.display(),
                    "admin socket path names something else now: keel ctl cannot reach this \
                     engine (left alone)"
                );
            }
            _ => {}
        }
    }

    /// Takes the connections waiting in the listener's backlog, at most
    /// `2 * CONNECTIONS_MAX` per call (a flood of connects never starves the reading of
    /// those already taken); returns how many.
    fn accept_all(&mut self, waiting: &mut Vec<Waiting>) -> usize {
        let mut n = 0;
        while n < 2 * CONNECTIONS_MAX {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    n += 1;
                    if waiting.len() >= CONNECTIONS_MAX || stream.set_nonblocking(true).is_err() {
                        let why = format!(
                            "{CONNECTIONS_MAX} connections are already waiting to send their \
                             request: try again"
                        );
                        self.refuse(stream, why);
                        continue;
                    }
                    waiting.push(Waiting {
                        stream,
                        line: Vec::with_capacity(REQUEST_LEN_MAX + 1),
                        deadline_ns: self.clock.now_ns() + READ_WAIT.as_nanos() as u64,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return n,
                Err(e) => {
                    crate::warn_line!("keel: admin socket {}: accept: {e}", self.path.display());
                    std::thread::sleep(Duration::from_millis(100));
                    return n;
                }
            }
        }
        n
    }

    /// Reads what each waiting connection sent; serves those whose request line is complete
    /// (or refused); returns how many were served.
    fn read_all(&mut self, waiting: &mut Vec<Waiting>) -> usize {
        let mut served = 0;
        let mut i = 0;
        while i < waiting.len() {
            let now_ns = self.clock.now_ns();
            match waiting[i].read(now_ns) {
                None => i += 1,
                Some(request) => {
                    let w = waiting.swap_remove(i);
                    self.serve_one(w.stream, request);
                    served += 1;
                }
            }
        }
        served
    }

    fn refuse(&mut self, stream: UnixStream, why: String) {
        // Read what the client already sent (a socket closed with unread bytes resets the
        // connection, and the client would lose this answer).
        let _ = stream.set_nonblocking(true);
        let mut sink = [0u8; REQUEST_LEN_MAX + 1];
        let _ = (&stream).read(&mut sink);
        self.serve_one(stream, Err(why));
    }

    fn serve_one(&mut self, stream: UnixStream, request: Result<String, String>) {
        let text = match request {
            Ok(line) => {
                let line = line.trim().to_string();
                let answer = self.answer(&line);
                let ok = answer.starts_with("ok");
                let counter = if ok {
                    &self.counters.ok
                } else if answer.starts_with("error: the engine did not answer") {
                    &self.counters.timeouts
                } else {
                    &self.counters.errors
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let first = answer.lines().next().unwrap_or_default();
                crate::log::operator(&line, first);
                answer
            }
            Err(why) => {
                self.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                crate::log::operator("(unreadable request)", &format!("error: {why}"));
                format!("error: {why}\n")
            }
        };
        self.write_answer(&stream, text.as_bytes());
    }

    /// Writes `answer` within [`WRITE_WAIT`] in all (a client that does not read loses it).
    fn write_answer(&self, stream: &UnixStream, mut answer: &[u8]) {
        let deadline_ns = self.clock.now_ns() + WRITE_WAIT.as_nanos() as u64;
        let mut out = stream;
        while !answer.is_empty() {
            match out.write(answer) {
                Ok(0) => return,
                Ok(n) => answer = &answer[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if self.clock.now_ns() >= deadline_ns {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// `reconcile VENUE`: only a READ-ONLY link (as its executor loop last published it) is
    /// asked; the loop clears its contradictions and queries the venue, and logs what it did.
    fn reconcile(&mut self, v: VenueId) -> String {
        let name = &self.names.venues[usize::from(v.0)];
        let state = self.shared.link(v).state_name();
        if v.0 >= 64 || state != crate::session::machine::LinkState::ReadOnly.name() {
            return format!(
                "error: venue {name} is {state}, not READ-ONLY: nothing to reconcile (a \
                 disconnected link reconciles at its next login; `keel ctl reconnect {name}` asks \
                 for one)\n"
            );
        }
        self.shared.reconcile.fetch_or(1 << v.0, Ordering::AcqRel);
        tracing::warn!(
            target: "keel::ctl",
            venue = name.as_str(),
            "operator reconcile requested: contradictions will be cleared and the venue asked again"
        );
        format!(
            "ok: reconcile of venue {name} requested: its contradictions are cleared and the venue \
             asked again; it trades again only if the answer settles everything (watch `keel ctl \
             status`)\n"
        )
    }

    /// The answer text to one request line.
    fn answer(&mut self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        let parsed = match parse(&words, &self.names) {
            Ok(p) => p,
            Err(e) => return format!("error: {e}\n"),
        };
        match parsed {
            Parsed::Help => format!("ok: commands\n{HELP}"),
            Parsed::Reconnect(v) => {
                if v.0 >= 64 {
                    return format!(
                        "error: venue index {} above 63 cannot be reconnected\n",
                        v.0
                    );
                }
                self.shared.reconnect.fetch_or(1 << v.0, Ordering::AcqRel);
                format!(
                    "ok: reconnect of venue {} requested (its link state is in `keel ctl status`)\n",
                    self.names.venues[usize::from(v.0)]
                )
            }
            Parsed::Reconcile(v) => self.reconcile(v),
            Parsed::Control(on) => match (self.shared.control_off.get(), on) {
                (None, _) => {
                    "error: no adaptive controller runs (set [control] enabled = true)\n".into()
                }
                (Some(off), None) => format!(
                    "ok: adaptive controller {}\n",
                    if off.load(Ordering::Acquire) {
                        "off"
                    } else {
                        "on"
                    }
                ),
                (Some(off), Some(on)) => {
                    off.store(!on, Ordering::Release);
                    format!(
                        "ok: adaptive controller {} (its caps and sheds {} at its next tick)\n",
                        if on { "on" } else { "off" },
                        if on {
                            "follow the venue again"
                        } else {
                            "are lifted"
                        }
                    )
                }
            },
            Parsed::Loop(command, stats) => match self.ask(command) {
                Ok(answers) => self.format(command, stats, &answers),
                Err(e) => format!("error: {e}\n"),
            },
        }
    }

    /// Sends `command` to the loop and collects its answers (one, or a listing's rows to its
    /// end), discarding answers to earlier requests that timed out.
    fn ask(&mut self, command: AdminCommand) -> Result<Vec<Answer>, String> {
        let id = self.client.next_id;
        self.client.next_id += 1;
        let deadline = self.clock.now_ns() + ANSWER_WAIT.as_nanos() as u64;
        while self
            .client
            .requests
            .push(AdminRequest { id, command })
            .is_err()
        {
            if self.clock.now_ns() >= deadline {
                return Err("the engine did not answer: its admin ring is full".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let listing = matches!(command, AdminCommand::Status | AdminCommand::OpenOrders(_));
        let mut answers = Vec::new();
        loop {
            match self.client.replies.pop() {
                Ok(reply) if reply.id != id => {}
                Ok(reply) => {
                    let end = !listing || matches!(reply.answer, Answer::End);
                    answers.push(reply.answer);
                    if end {
                        return Ok(answers);
                    }
                }
                Err(_) => {
                    if self.clock.now_ns() >= deadline {
                        self.client.abandoned.store(id, Ordering::Release);
                        return Err(format!(
                            "the engine did not answer within {} s (is its loop stalled?); the \
                             command is withdrawn unless the loop took it at this very moment: \
                             check `keel ctl status`",
                            ANSWER_WAIT.as_secs()
                        ));
                    }
                    if self.shared.stop.load(Ordering::Relaxed) {
                        self.client.abandoned.store(id, Ordering::Release);
                        return Err("the engine is stopping".into());
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }

    fn symbol(&self, s: SymbolId) -> &str {
        self.names
            .symbols
            .get(usize::from(s.0))
            .map_or("?", String::as_str)
    }

    fn venue(&self, v: VenueId) -> &str {
        self.names
            .venues
            .get(usize::from(v.0))
            .map_or("?", String::as_str)
    }

    fn format(&self, command: AdminCommand, stats: bool, answers: &[Answer]) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let mut rows = Vec::new();
        for a in answers {
            match *a {
                Answer::Refused(e) => return format!("error: {e}\n"),
                Answer::Summary {
                    dispatch,
                    open_orders,
                    kill_switch,
                } => {
                    if stats {
                        let _ = writeln!(out, "ok: dispatcher counters");
                        write_stats(&mut out, &dispatch);
                    } else {
                        let _ = writeln!(
                            out,
                            "ok: engine pid {}, up {:.1} s, kill switch {}, open orders {}",
                            std::process::id(),
                            self.clock.now_ns() as f64 / 1e9,
                            on_off(kill_switch),
                            open_orders
                        );
                    }
                }
                Answer::Venue(_) | Answer::Strategy(_) | Answer::ShedSymbol(_) if stats => {}
                Answer::Venue(r) => {
                    let link = self.shared.link(r.venue);
                    let _ = writeln!(
                        out,
                        "venue {}: link {}, new orders {}, breaker {} (opened {}, closed {}, \
                         refused {}), lanes cancel {} reduce {} replace {} new {}, connects {}, connect \
                         failures {}{}{}",
                        self.venue(r.venue),
                        link.state_name(),
                        mode_name(r.mode),
                        if r.breaker_open { "open" } else { "closed" },
                        r.breaker.opened,
                        r.breaker.closed,
                        r.breaker.refused,
                        r.lanes.cancel,
                        r.lanes.reduce,
                        r.lanes.replace,
                        r.lanes.new,
                        link.connects.load(Ordering::Relaxed),
                        link.connect_failures.load(Ordering::Relaxed),
                        match link.last_os_error.load(Ordering::Relaxed) {
                            0 => String::new(),
                            e =>
                                format!(" (last: {})", std::io::Error::from_raw_os_error(e as i32)),
                        },
                        match link.position_mismatches.load(Ordering::Relaxed) {
                            0 => String::new(),
                            n => format!(
                                ", positions differ from the venue's in {n} symbols (see the log)"
                            ),
                        }
                    );
                }
                Answer::Strategy(r) => {
                    let _ = write!(
                        out,
                        "strategy {}: {}",
                        r.strategy.0,
                        if r.disabled { "DISABLED" } else { "enabled" }
                    );
                    match r.bridge {
                        Some(b) => {
                            let _ = writeln!(
                                out,
                                ", shared memory: {} commands, attached {}, lost {}, broken {}",
                                b.commands, b.attached, b.lost, b.broken
                            );
                        }
                        None => {
                            let _ = writeln!(out, ", in process");
                        }
                    }
                }
                Answer::ShedSymbol(s) => {
                    let _ = writeln!(out, "symbol {}: SHED", self.symbol(s));
                }
                Answer::Order { order, age_ns } => rows.push((order, age_ns)),
                Answer::End => {}
                Answer::Canceled(c) => {
                    let _ = writeln!(
                        out,
                        "ok: {} open orders covered: {} cancels queued, {} withdrawn before \
                         leaving, {} already canceling, {} in doubt (their status query goes \
                         first: run it again once resolved), {} not queued (cancel lane full: \
                         run it again)",
                        c.covered, c.queued, c.withdrawn, c.already, c.in_doubt, c.lane_full
                    );
                }
                Answer::Held { withdrawn } => {
                    let _ = writeln!(
                        out,
                        "ok: {}; {withdrawn} unreleased new orders withdrawn",
                        describe(command, &self.names)
                    );
                }
                Answer::Done => {
                    let _ = writeln!(out, "ok: {}", describe(command, &self.names));
                }
            }
        }
        if let AdminCommand::OpenOrders(_) = command {
            let _ = writeln!(out, "ok: {} open orders", rows.len());
            for (o, age_ns) in rows {
                let _ = writeln!(out, "{}", self.order_line(&o, age_ns));
            }
        }
        out
    }

    fn order_line(&self, o: &Order, age_ns: u64) -> String {
        format!(
            "order {} strategy={} seq={} venue={} symbol={} side={} price={} qty={} filled={} \
             state={} age={}",
            o.id.0,
            o.strategy.0,
            o.id.sequence(),
            self.venue(o.venue),
            self.symbol(o.symbol),
            match o.side {
                Side::Buy => "buy",
                Side::Sell => "sell",
            },
            price_text(o.price.0),
            o.qty,
            o.filled_qty,
            state_name(o.state),
            if o.sent_ns == 0 {
                "unsent".to_string()
            } else {
                format!("{:.3}s", age_ns as f64 / 1e9)
            }
        )
    }
}

/// The order's state as docs/architecture.md spells it.
pub fn state_name(s: OrderState) -> &'static str {
    match s {
        OrderState::PendingNew => "pending-new",
        OrderState::Live => "live",
        OrderState::PartiallyFilled => "partially-filled",
        OrderState::PendingCancel => "pending-cancel",
        OrderState::PendingReplace => "pending-replace",
        OrderState::Filled => "filled",
        OrderState::Canceled => "canceled",
        OrderState::Replaced => "replaced",
        OrderState::Rejected => "rejected",
        OrderState::Unknown => "unknown",
    }
}

/// A fixed-point price as text (4 decimals).
pub fn price_text(p: i64) -> String {
    let scale = crate::order::Price::SCALE;
    let sign = if p < 0 { "-" } else { "" };
    let a = p.unsigned_abs();
    format!("{sign}{}.{:04}", a / scale as u64, a % scale as u64)
}

fn mode_name(m: LinkMode) -> &'static str {
    match m {
        LinkMode::Down => "refused (link down)",
        LinkMode::ReadOnly => "refused (read-only)",
        LinkMode::Trading => "flow",
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "ON"
    } else {
        "off"
    }
}

fn describe(command: AdminCommand, names: &AdminNames) -> String {
    let sym = |s: SymbolId| names.symbols[usize::from(s.0)].clone();
    let ven = |v: VenueId| names.venues[usize::from(v.0)].clone();
    match command {
        AdminCommand::Strategy(s, true) => format!("strategy {} enabled", s.0),
        AdminCommand::Strategy(s, false) => format!(
            "strategy {} disabled: its new orders are refused (strategy disabled), its cancels flow",
            s.0
        ),
        AdminCommand::Shed(s, true) => format!(
            "symbol {} shed: new orders on it are refused (symbol shed), cancels flow",
            sym(s)
        ),
        AdminCommand::Shed(s, false) => format!("symbol {} no longer shed", sym(s)),
        AdminCommand::KillSwitch(true) => {
            "kill switch ON: no new order or replace leaves; cancels and market data flow".into()
        }
        AdminCommand::KillSwitch(false) => "kill switch off: new orders flow again".into(),
        AdminCommand::Breaker(v, true) => format!(
            "breaker of venue {} forced open (new orders refused `breaker open` until it \
             half-opens or `breaker {} close`)",
            ven(v),
            ven(v)
        ),
        AdminCommand::Breaker(v, false) => format!("breaker of venue {} closed", ven(v)),
        AdminCommand::Status | AdminCommand::OpenOrders(_) | AdminCommand::CancelAll(_) => {
            String::new()
        }
    }
}

fn write_stats(out: &mut String, d: &DispatchStats) {
    use std::fmt::Write as _;
    let pairs: [(&str, u64); 25] = [
        ("commands", d.commands),
        ("outcomes", d.outcomes),
        ("events", d.events),
        ("events_lost", d.events_lost),
        ("sent_new", d.sent_new),
        ("sent_cancel", d.sent_cancel),
        ("sent_replace", d.sent_replace),
        ("sent_query", d.sent_query),
        ("sent_reconcile", d.sent_reconcile),
        ("sent_reduce_only", d.sent_reduce_only),
        ("contradictions", d.contradictions),
        ("moot_cancels", d.moot_cancels),
        ("duplicate_id_rejects", d.duplicate_id_rejects),
        ("late_cancel_answers", d.late_cancel_answers),
        ("shed", d.shed),
        ("throttled", d.throttled),
        ("breaker_refused", d.breaker_refused),
        ("cancel_lane_full", d.cancel_lane_full),
        ("executor_stalls", d.executor_stalls),
        ("query_lane_full", d.query_lane_full),
        ("not_sent", d.not_sent),
        ("journal_errors", d.journal_errors),
        ("mass_cancel_skipped", d.mass_cancel_skipped),
        ("report_errors", d.report_errors),
        ("polls", d.polls),
    ];
    for (k, v) in pairs {
        let _ = writeln!(out, "{k} {v}");
    }
    for (reason, code) in crate::ipc::codec::REFUSAL_CODES {
        let _ = writeln!(
            out,
            "refused{{reason=\"{}\"}} {}",
            crate::log::refusal_name(reason),
            d.refused[reason as usize]
        );
        let _ = code;
    }
    debug_assert_eq!(crate::ipc::codec::REFUSAL_CODES.len(), REFUSAL_REASONS);
}

/// The commands, as `help` prints them.
pub const HELP: &str = "\
status                                   engine, venues, strategies, shed symbols
stats                                    the dispatcher's counters
open-orders [strategy N] [symbol S] [venue V]
cancel-all all | [strategy N] [symbol S] [venue V]
disable N | enable N                     a strategy's new orders (its cancels flow)
shed SYMBOL on|off                       a symbol's new orders on every venue
kill-switch on|off                       no new order or replace leaves; cancels flow
reconnect VENUE                          a new session for the venue
reconcile VENUE                          READ-ONLY link, account checked: clear its
                                         contradictions, reconcile now (trades if clean)
breaker VENUE open|close                 force the venue's breaker (drills)
control [on|off]                         the adaptive controller: its state, or switch it
help                                     this list
";

enum Parsed {
    Help,
    Reconnect(VenueId),
    Reconcile(VenueId),
    /// The adaptive controller: `None` asks its state.
    Control(Option<bool>),
    /// A command for the loop; `true`: print counters (`stats`).
    Loop(AdminCommand, bool),
}

fn parse(words: &[&str], names: &AdminNames) -> Result<Parsed, String> {
    let symbol = |w: &str| {
        names
            .symbols
            .iter()
            .position(|s| s == w)
            .map(|i| SymbolId(i as u16))
            .ok_or_else(|| format!("no symbol `{w}` (symbols: {})", names.symbols.join(" ")))
    };
    let venue = |w: &str| {
        names
            .venues
            .iter()
            .position(|v| v == w)
            .map(|i| VenueId(i as u16))
            .ok_or_else(|| format!("no venue `{w}` (venues: {})", names.venues.join(" ")))
    };
    let strategy = |w: &str| match w.parse::<u16>() {
        Ok(s) if s < names.strategies => Ok(StrategyId(s)),
        _ => Err(format!(
            "no strategy `{w}` (strategies are 0 to {})",
            names.strategies.saturating_sub(1)
        )),
    };
    let on = |w: Option<&&str>| match w.copied() {
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        other => Err(format!("expected on or off, got `{}`", other.unwrap_or(""))),
    };
    let scope = |rest: &[&str]| -> Result<OperatorScope, String> {
        let mut scope = OperatorScope::default();
        let mut it = rest.iter();
        while let Some(&key) = it.next() {
            let value = it.next().ok_or_else(|| format!("`{key}` needs a value"))?;
            let twice = || format!("`{key}` given twice (one value per filter)");
            match key {
                "strategy" if scope.strategy.is_some() => return Err(twice()),
                "symbol" if scope.symbol.is_some() => return Err(twice()),
                "venue" if scope.venue.is_some() => return Err(twice()),
                "strategy" => scope.strategy = Some(strategy(value)?),
                "symbol" => scope.symbol = Some(symbol(value)?),
                "venue" => scope.venue = Some(venue(value)?),
                other => {
                    return Err(format!(
                        "unknown filter `{other}` (strategy N, symbol S, venue V)"
                    ))
                }
            }
        }
        Ok(scope)
    };
    let exact = |n: usize, usage: &str| {
        if words.len() == n {
            Ok(())
        } else {
            Err(format!("usage: {usage}"))
        }
    };
    let loop_ = |c| Ok(Parsed::Loop(c, false));
    match words.first().copied() {
        None => Err("empty request (try `help`)".into()),
        Some("help") => Ok(Parsed::Help),
        Some("status") => exact(1, "status").and_then(|()| loop_(AdminCommand::Status)),
        Some("stats") => exact(1, "stats").map(|()| Parsed::Loop(AdminCommand::Status, true)),
        Some("open-orders") => loop_(AdminCommand::OpenOrders(scope(&words[1..])?)),
        Some("cancel-all") => match &words[1..] {
            [] => {
                Err("say what to cancel: cancel-all all | [strategy N] [symbol S] [venue V]".into())
            }
            ["all"] => loop_(AdminCommand::CancelAll(OperatorScope::default())),
            rest => loop_(AdminCommand::CancelAll(scope(rest)?)),
        },
        Some(w @ ("disable" | "enable")) => {
            exact(2, &format!("{w} N"))?;
            loop_(AdminCommand::Strategy(strategy(words[1])?, w == "enable"))
        }
        Some("shed") => {
            exact(3, "shed SYMBOL on|off")?;
            loop_(AdminCommand::Shed(symbol(words[1])?, on(words.get(2))?))
        }
        Some("kill-switch") => {
            exact(2, "kill-switch on|off")?;
            loop_(AdminCommand::KillSwitch(on(words.get(1))?))
        }
        Some("reconnect") => {
            exact(2, "reconnect VENUE")?;
            Ok(Parsed::Reconnect(venue(words[1])?))
        }
        Some("reconcile") => {
            exact(2, "reconcile VENUE")?;
            Ok(Parsed::Reconcile(venue(words[1])?))
        }
        Some("control") => match words.len() {
            1 => Ok(Parsed::Control(None)),
            2 => Ok(Parsed::Control(Some(on(words.get(1))?))),
            _ => Err("usage: control [on|off]".into()),
        },
        Some("breaker") => {
            exact(3, "breaker VENUE open|close")?;
            let open = match words[2] {
                "open" => true,
                "close" => false,
                other => return Err(format!("expected open or close, got `{other}`")),
            };
            loop_(AdminCommand::Breaker(venue(words[1])?, open))
        }
        Some(other) => Err(format!(
            "unknown command `{}` (try `help`)",
            other.chars().take(64).collect::<String>()
        )),
    }
}

/// Why `keel ctl` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Nothing accepted the connection: the request was not delivered.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// Connected, but sending the request or reading the whole answer failed (timed out):
    /// the engine may have carried the command out.
    #[error("{0}")]
    Answer(std::io::Error),
}

/// `keel ctl`: sends one request line to the admin socket at `path` and returns the answer.
pub fn request(path: &Path, line: &str) -> Result<String, RequestError> {
    let mut stream = UnixStream::connect(path).map_err(RequestError::Connect)?;
    stream
        .set_read_timeout(Some(ANSWER_WAIT + READ_WAIT + WRITE_WAIT))
        .map_err(RequestError::Answer)?;
    // A refusal may come before the request is read (too many connections waiting): read
    // the answer even if sending failed.
    let sent = stream
        .write_all(line.as_bytes())
        .and_then(|()| stream.write_all(b"\n"));
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    // A one-line refusal that arrived whole before the connection broke is the answer.
    let refusal = answer.starts_with(b"error: ") && answer.ends_with(b"\n");
    if !refusal {
        sent.map_err(RequestError::Answer)?;
        read.map_err(RequestError::Answer)?;
    }
    String::from_utf8(answer).map_err(|_| {
        RequestError::Answer(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the answer is not UTF-8",
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::DispatcherConfig;
    use crate::ring::{strategy_channel, venue_channel};
    use std::os::unix::fs::PermissionsExt;

    fn dispatcher() -> Dispatcher {
        let config = DispatcherConfig {
            strategies: 1,
            venues: 1,
            ..DispatcherConfig::default()
        };
        let (_strategy, port) = strategy_channel(64, 64);
        let (_venue, venue_port) = venue_channel(64, 64);
        Dispatcher::new(config, vec![port], vec![venue_port], 1).expect("config")
    }

    fn names() -> AdminNames {
        AdminNames {
            symbols: vec!["AAPL".into()],
            venues: vec!["sim".into()],
            strategies: 1,
        }
    }

    fn push(client: &mut AdminClient, command: AdminCommand) -> u64 {
        let id = client.next_id;
        client.next_id += 1;
        client
            .requests
            .push(AdminRequest { id, command })
            .expect("room");
        id
    }

    // Goal: an operator told "the engine did not answer" must be able to trust that the
    // command will not be carried out later, when a stalled loop comes back.
    #[test]
    fn a_request_given_up_on_is_never_carried_out_later() {
        let (mut port, mut client) = admin_channel();
        let mut d = dispatcher();
        let shared = Shared::new(1);
        let id = push(&mut client, AdminCommand::KillSwitch(true));
        client.abandoned.store(id, Ordering::Release);
        port.serve(10, &mut d, &[], &shared);
        assert!(!d.kill_switch(), "a request given up on was carried out");
        assert!(
            client.replies.pop().is_err(),
            "an abandoned request was answered"
        );
        // A listing given up on part-way stops.
        let id = push(&mut client, AdminCommand::Status);
        port.serve(20, &mut d, &[], &shared);
        client.abandoned.store(id, Ordering::Release);
        while client.replies.pop().is_ok() {}
        port.serve(30, &mut d, &[], &shared);
        assert!(port.listing.is_none());
        // The next request is served.
        let id = push(&mut client, AdminCommand::KillSwitch(true));
        port.serve(40, &mut d, &[], &shared);
        assert!(d.kill_switch());
        let reply = client.replies.pop().expect("answered");
        assert_eq!(reply.id, id);
        assert!(matches!(reply.answer, Answer::Held { .. }));
    }

    // Goal: while a stop cancels every order, nobody can turn the kill switch off and let new
    // orders leave during the shutdown.
    #[test]
    fn the_kill_switch_stays_on_while_the_engine_stops() {
        let (mut port, mut client) = admin_channel();
        let mut d = dispatcher();
        let shared = Shared::new(1);
        shared.stop_cancel.store(true, Ordering::Release);
        port.serve(10, &mut d, &[], &shared);
        assert!(d.kill_switch(), "cancel-on-stop turns the kill switch on");
        push(&mut client, AdminCommand::KillSwitch(false));
        port.serve(STOP_CANCEL_INTERVAL_NS / 2, &mut d, &[], &shared);
        let reply = client.replies.pop().expect("answered");
        assert!(matches!(
            reply.answer,
            Answer::Refused(OperatorError::Stopping)
        ));
        assert!(d.kill_switch(), "the kill switch went off during a stop");
    }

    fn bind(path: &Path) -> Result<AdminServer, AdminSocketError> {
        let (_port, client) = admin_channel();
        AdminServer::bind(path, client, names(), Arc::new(Shared::new(1)))
    }

    // Goal: the admin socket never destroys what is at its path (a file, a directory, a
    // live engine's socket) and is owner-only whatever the umask.
    #[test]
    fn binding_replaces_only_a_dead_socket_and_is_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("journal-00000001.kj");
        std::fs::write(&file, b"precious").unwrap();
        let e = bind(&file).expect_err("a regular file is not replaced");
        assert!(e.to_string().contains("is not a socket"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"precious");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(bind(&sub).is_err());
        assert!(sub.is_dir());

        let path = dir.path().join("admin.sock");
        let live = UnixListener::bind(&path).unwrap();
        let e = bind(&path).expect_err("a live socket is not taken over");
        assert!(
            e.to_string().contains("a live process serves this socket"),
            "{e}"
        );
        drop(live); // the file stays, nothing listens: what a killed engine leaves
        let server = bind(&path).expect("a dead socket is replaced");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

        // At the end, a path that names another socket by now is left alone.
        std::fs::remove_file(&path).unwrap();
        let other = UnixListener::bind(&path).unwrap();
        server.shared.stop.store(true, Ordering::Release);
        server.run();
        assert!(path.exists(), "the server removed a socket it did not make");
        drop(other);
    }

    // Goal: clients that connect and send nothing, or a byte at a time, never keep another
    // operator's command from being answered; past CONNECTIONS_MAX waiting, a connection is
    // refused at once, with a reason.
    #[test]
    fn silent_and_slow_clients_never_block_another_operator() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let server = bind(&path).unwrap();
        let shared = Arc::clone(&server.shared);
        let thread = std::thread::spawn(move || server.run());
        let mut idle = Vec::new();
        for _ in 0..CONNECTIONS_MAX - 1 {
            idle.push(UnixStream::connect(&path).unwrap());
        }
        let mut slow = UnixStream::connect(&path).unwrap();
        slow.write_all(b"he").unwrap();
        // The 16 waiting connections fill every slot: one more is refused with the reason.
        let answer = loop {
            let a = request(&path, "help").expect("an answer");
            if !a.starts_with("ok") {
                break a;
            }
        };
        assert!(answer.starts_with("error: 16 connections"), "{answer}");
        idle.pop();
        drop(slow);
        // Slots free (closed connections are refused and dropped): served while the other
        // idle clients still hold theirs.
        let answer = loop {
            let a = request(&path, "help").expect("an answer");
            if a.starts_with("ok") {
                break a;
            }
        };
        assert!(answer.starts_with("ok: commands"), "{answer}");
        // Each idle client is answered in the end, with the reason.
        for mut c in idle {
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut text = String::new();
            c.read_to_string(&mut text).unwrap();
            assert!(
                text.starts_with("error: no complete request line within"),
                "{text}"
            );
        }
        shared.stop.store(true, Ordering::Release);
        thread.join().unwrap();
        assert!(!path.exists());
    }

    // Goal: a socket file removed while the engine runs (by hand, a tmp cleaner) does not
    // leave the engine unreachable for the rest of its run.
    #[test]
    fn a_removed_socket_file_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let server = bind(&path).unwrap();
        let shared = Arc::clone(&server.shared);
        let thread = std::thread::spawn(move || server.run());
        assert!(request(&path, "help").unwrap().starts_with("ok"));
        std::fs::remove_file(&path).unwrap();
        // Bounded: 30 s of 1-ms naps.
        let mut naps = 0;
        while request(&path, "help").is_err() {
            naps += 1;
            assert!(naps < 30_000, "never made again");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
        shared.stop.store(true, Ordering::Release);
        thread.join().unwrap();
        assert!(!path.exists());
    }

    // Goal: a script piped in whole is refused, not half done; a filter given twice is
    // refused, not silently narrowed to its last value.
    #[test]
    fn a_second_line_or_a_filter_given_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let server = bind(&path).unwrap();
        let shared = Arc::clone(&server.shared);
        let thread = std::thread::spawn(move || server.run());
        let answer = request(&path, "help\nkill-switch off").unwrap();
        assert!(
            answer.starts_with("error: one request line per connection"),
            "{answer}"
        );
        assert!(request(&path, "help  ").unwrap().starts_with("ok"));
        shared.stop.store(true, Ordering::Release);
        thread.join().unwrap();

        let names = AdminNames {
            symbols: vec!["AAPL".into(), "MSFT".into()],
            venues: vec!["sim".into()],
            strategies: 2,
        };
        for line in [
            "cancel-all strategy 0 strategy 1",
            "open-orders symbol AAPL symbol MSFT",
            "cancel-all venue sim venue sim",
        ] {
            let words: Vec<&str> = line.split_whitespace().collect();
            match parse(&words, &names) {
                Err(e) => assert!(e.contains("given twice"), "{line}: {e}"),
                Ok(_) => panic!("{line}: accepted"),
            }
        }
    }
}
