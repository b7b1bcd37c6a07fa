//! The engine's log: what happened, said once, with a timestamp, written off the hot path.
//!
//! The loops never format and never block on a log: they notice changes (a link's state, a
//! failed connect, a breaker's transition, a strategy attached or lost, refusals per reason
//! per interval) by comparing a few counters per pass, and hand a fixed-size [`LogRecord`] to
//! a bounded SPSC ring ([`LogTx`]). A full ring drops the record and counts it
//! ([`LogTx::dropped`]). The logger thread ([`Logger`]) empties the rings and writes each
//! record through `tracing` (one line each, UTC timestamp, level, fields as `key=value`).
//! Cold paths that run outside the loops (the admin thread, start and stop) log through
//! `tracing` directly. docs/operations.md lists every line an operator will see.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::order::{RefusalReason, StrategyId, VenueId};
use crate::session::machine::LinkState;
use crate::session::protocol::Reconciliation;

/// Records one loop's ring holds before it drops.
pub const LOG_RING_CAPACITY: usize = 4096;

/// One thing worth saying, as a loop hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRecord {
    /// A connection attempt to a venue failed; the next is due in `retry_in_ns` (0: not
    /// scheduled, e.g. attempts exhausted).
    ConnectFailed {
        /// The venue.
        venue: VenueId,
        /// The OS error (0: not an OS error, e.g. no free connection slot).
        os_error: i32,
        /// Failed attempts so far.
        failures: u64,
        /// Until the next attempt.
        retry_in_ns: u64,
    },
    /// A venue link changed state.
    Link {
        /// The venue.
        venue: VenueId,
        /// From.
        from: LinkState,
        /// To.
        to: LinkState,
        /// For SYNCED: since the link began connecting; for DISCONNECTED: until the next
        /// attempt (0: none scheduled).
        ns: u64,
        /// For SYNCED and READ-ONLY: what the reconciliation found.
        reconciliation: Reconciliation,
        /// For DISCONNECTED: why.
        because: LostBecause,
    },
    /// A venue's breaker changed state.
    Breaker {
        /// The venue.
        venue: VenueId,
        /// Its new state.
        to: BreakerChange,
    },
    /// A shared-memory strategy was seen beating, stopped beating, or broke its channel.
    Strategy {
        /// The strategy.
        strategy: StrategyId,
        /// What happened.
        what: StrategyChange,
    },
    /// Commands refused for one reason during the last interval.
    Refusals {
        /// The reason.
        reason: RefusalReason,
        /// How many in the interval.
        count: u64,
        /// The interval.
        interval_ns: u64,
    },
    /// New orders held back or refused other than by a keel refusal, during the last
    /// interval: shed under overload, throttled by the rate limiter, refused by an open
    /// breaker, rejected by the venue as duplicate ids.
    HeldBack {
        /// What held them back.
        what: HeldBack,
        /// How many in the interval.
        count: u64,
        /// The interval.
        interval_ns: u64,
    },
    /// A venue began another session (a new trading day) than the journal's: the link does
    /// not trade on this journal (said once per run).
    NewVenueSession {
        /// The venue.
        venue: VenueId,
        /// The session the venue began, and the one the journal's records belong to.
        sessions: crate::session::protocol::ResumeRefused,
    },
    /// An operator's `keel ctl reconcile` reached the link: `cleared` contradictions were
    /// cleared and the query sent (`Some`), or the link was no longer READ-ONLY (`None`).
    OperatorReconcile {
        /// The venue.
        venue: VenueId,
        /// Contradictions cleared, if carried out.
        cleared: Option<u32>,
    },
    /// Reconciliation timed out `timeouts` times in a row (a multiple of
    /// `machine::RECONCILE_TIMEOUTS_HINT`): said with its likely causes and what to do.
    ReconcileStuck {
        /// The venue.
        venue: VenueId,
        /// Timeouts in a row.
        timeouts: u32,
    },
    /// A reconciliation found keel's position in `differ` symbols otherwise than the venue
    /// reports (the link is READ-ONLY): the first of them, with both figures.
    PositionMismatch {
        /// The venue.
        venue: VenueId,
        /// Symbols that differ.
        differ: u32,
        /// The first: keel's figure and the venue's.
        mismatch: crate::order::PositionMismatch,
    },
    /// A venue report contradicted keel's view (the link is READ-ONLY until an operator
    /// clears it): what, and the execution the venue stated if it could not be applied to its
    /// order (booked into the position all the same).
    Contradiction {
        /// The venue.
        venue: VenueId,
        /// What the venue reported.
        what: crate::order::Contradiction,
        /// Contradictions this session has seen so far.
        total: u64,
        /// The execution booked outside its order, if the report stated one.
        booked: Option<crate::order::Execution>,
    },
    /// keel's own loop stood still for `ns` (a pass came that long after the one before):
    /// the venue is not blamed for the silence this caused.
    LoopStalled {
        /// The venue whose link noticed it.
        venue: VenueId,
        /// How long, ns.
        ns: u64,
    },
    /// Records the loop could not hand over (its ring was full), since the last such record.
    Dropped {
        /// How many.
        count: u64,
    },
}

/// What held new orders back (see [`LogRecord::HeldBack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBack {
    /// Shed: the venue's new-order lane above its watermark.
    Shed,
    /// Throttled: waited past the limiter's deadline.
    Throttled,
    /// Refused by an open (or probing) breaker.
    BreakerOpen,
    /// Rejected by the venue as a duplicate ClientOrderId.
    DuplicateIdRejects,
}

impl HeldBack {
    /// As the log line says it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shed => "shed",
            Self::Throttled => "throttled",
            Self::BreakerOpen => "breaker open",
            Self::DuplicateIdRejects => "duplicate-id rejects (venue)",
        }
    }
}

/// Why a venue session ended (as the executor loop's counters tell it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostBecause {
    /// The venue said nothing for too many heartbeat intervals.
    Silence,
    /// The venue sent bytes that do not decode (the connection was closed).
    Malformed,
    /// Reconciliation did not finish in time.
    ReconcileTimeout,
    /// The venue refused the login.
    LoginRefused,
    /// An operator asked (`keel ctl reconnect`).
    Operator,
    /// The connection closed (by the venue, or the network).
    Closed,
}

impl LostBecause {
    /// As the log line says it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Silence => "the venue was silent too long (heartbeat timeout)",
            Self::Malformed => "the venue sent a message that does not decode",
            Self::ReconcileTimeout => "reconciliation timed out",
            Self::LoginRefused => "the venue refused the login",
            Self::Operator => "an operator asked for a reconnect",
            Self::Closed => "the connection closed",
        }
    }
}

/// A breaker transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerChange {
    /// Tripped: new orders refused.
    Opened,
    /// Probing.
    HalfOpened,
    /// Closed: new orders flow.
    Closed,
}

/// A strategy's change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyChange {
    /// Its heartbeat started (attached, or came back).
    Attached,
    /// Its heartbeat stopped.
    Lost,
    /// The journal restored its orders live and it did not attach in time (treated as
    /// lost).
    NeverAttached,
    /// Its channel was declared broken, for this fault.
    Broken(crate::ipc::ChannelFault),
}

/// A loop's end of its log ring.
#[derive(Debug)]
pub struct LogTx {
    ring: rtrb::Producer<LogRecord>,
    dropped: Arc<AtomicU64>,
}

impl LogTx {
    /// Hands `record` over; never blocks (a full ring counts a drop).
    #[inline]
    pub fn send(&mut self, record: LogRecord) {
        if self.ring.push(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The logger's end of one loop's ring.
#[derive(Debug)]
pub struct LogRx {
    ring: rtrb::Consumer<LogRecord>,
    dropped: Arc<AtomicU64>,
    dropped_said: u64,
}

/// A new log ring.
pub fn log_ring() -> (LogTx, LogRx) {
    let (tx, rx) = rtrb::RingBuffer::new(LOG_RING_CAPACITY);
    let dropped = Arc::new(AtomicU64::new(0));
    (
        LogTx {
            ring: tx,
            dropped: Arc::clone(&dropped),
        },
        LogRx {
            ring: rx,
            dropped,
            dropped_said: 0,
        },
    )
}

/// Names the logger writes instead of indices.
#[derive(Debug, Clone, Default)]
pub struct LogNames {
    /// Venues, in `VenueId` order.
    pub venues: Vec<String>,
    /// The journal's directory (named in the command that resolves a new venue session).
    pub journal_dir: Option<std::path::PathBuf>,
}

/// The logger: empties the loops' rings into `tracing`.
#[derive(Debug)]
pub struct Logger {
    rings: Vec<LogRx>,
    names: LogNames,
}

impl Logger {
    /// A logger over `rings`.
    pub fn new(rings: Vec<LogRx>, names: LogNames) -> Self {
        Self { rings, names }
    }

    /// Writes every record waiting; returns how many.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.rings.len() {
            while let Ok(record) = self.rings[i].ring.pop() {
                self.write(&record);
                n += 1;
            }
            let dropped = self.rings[i].dropped.load(Ordering::Relaxed);
            let said = self.rings[i].dropped_said;
            if dropped > said {
                self.rings[i].dropped_said = dropped;
                self.write(&LogRecord::Dropped {
                    count: dropped - said,
                });
            }
        }
        n
    }

    /// Drains every `interval` until `stop` is set, then once more.
    pub fn run(mut self, stop: &std::sync::atomic::AtomicBool, interval: Duration) {
        while !stop.load(Ordering::Acquire) {
            if self.drain() == 0 {
                std::thread::sleep(interval);
            }
        }
        self.drain();
    }

    fn venue(&self, v: VenueId) -> &str {
        self.names
            .venues
            .get(usize::from(v.0))
            .map_or("?", String::as_str)
    }

    /// The lines about whether a link can be trusted: a contradiction (with the execution it
    /// booked outside its order), a position mismatch, and a stall of keel's own loop.
    fn write_venue_trust(&self, record: &LogRecord) {
        match *record {
            LogRecord::Contradiction {
                venue,
                what,
                total,
                booked: Some(e),
            } => tracing::error!(
                target: "keel::venue",
                venue = self.venue(venue),
                contradiction = %what,
                total,
                symbol_id = e.symbol.0,
                side = ?e.side,
                qty = e.qty,
                price = e.price.0,
                "contradiction {what}: the venue reported an execution of {} at {} (price units \
                 of 1/10,000; {:?}, symbol id {}) that its order cannot take; booked into the \
                 position (risk counts it), not into the order. READ-ONLY (new orders refused, \
                 cancels flow) until an operator who checked the account runs `keel ctl \
                 reconcile` (docs/operations.md, \"When the venue contradicts keel\")",
                e.qty,
                e.price.0,
                e.side,
                e.symbol.0
            ),
            LogRecord::Contradiction {
                venue,
                what,
                total,
                booked: None,
            } => tracing::error!(
                target: "keel::venue",
                venue = self.venue(venue),
                contradiction = %what,
                total,
                "contradiction {what}: a venue report keel's view cannot take; READ-ONLY (new \
                 orders refused, cancels flow) until an operator who checked the account runs \
                 `keel ctl reconcile` (docs/operations.md, \"When the venue contradicts keel\")"
            ),
            LogRecord::LoopStalled { venue, ns } => tracing::warn!(
                target: "keel::engine",
                venue = self.venue(venue),
                stalled_ms = ns / 1_000_000,
                "keel's own loop stood still for {} ms (descheduled, stopped, or a blocked \
                 core): the venue's silence in that time is keel's, not the venue's; what arrived \
                 is read before the link judges silence (docs/tuning.md: isolate the core)",
                ns / 1_000_000
            ),
            LogRecord::PositionMismatch {
                venue,
                differ,
                mismatch: m,
            } => tracing::error!(
                target: "keel::venue",
                venue = self.venue(venue),
                symbol = %String::from_utf8_lossy(&m.symbol).trim_end(),
                keel_bought = m.keel.bought,
                keel_sold = m.keel.sold,
                venue_bought = m.venue.bought,
                venue_sold = m.venue.sold,
                differ,
                "position mismatch: keel booked {} but the venue reports {}; READ-ONLY (new \
                 orders refused, cancels flow) until they agree or an operator who checked the \
                 account settles it (docs/operations.md, \"Position mismatch\")",
                m.keel,
                m.venue
            ),
            _ => {}
        }
    }

    fn write(&self, record: &LogRecord) {
        match *record {
            LogRecord::ConnectFailed {
                venue,
                os_error,
                failures,
                retry_in_ns,
            } => tracing::warn!(
                target: "keel::venue",
                venue = self.venue(venue),
                error = %os_error_text(os_error),
                failures,
                "connect failed; {}",
                retry_text(retry_in_ns)
            ),
            LogRecord::Link {
                venue,
                from,
                to,
                ns,
                reconciliation: r,
                because,
            } => match to {
                LinkState::Synced => tracing::info!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    from = from.name(),
                    after_ms = ns / 1_000_000,
                    not_received = r.not_received,
                    missed_fills = r.missed_fills,
                    in_doubt = r.in_doubt,
                    unknown_at_keel = r.unknown_at_keel,
                    contradictions = r.contradictions,
                    "SYNCED: new orders flow"
                ),
                LinkState::ReadOnly => tracing::warn!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    from = from.name(),
                    in_doubt = r.in_doubt,
                    unknown_at_keel = r.unknown_at_keel,
                    contradictions = r.contradictions,
                    position_mismatches = r.position_mismatches,
                    "READ-ONLY: new orders refused, cancels flow; reconciling"
                ),
                LinkState::Disconnected => tracing::warn!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    from = from.name(),
                    "DISCONNECTED: {}; {}",
                    because.name(),
                    retry_text(ns)
                ),
                _ => tracing::info!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    from = from.name(),
                    "{}",
                    to.name()
                ),
            },
            LogRecord::Breaker { venue, to } => match to {
                BreakerChange::Opened => tracing::warn!(
                    target: "keel::breaker",
                    venue = self.venue(venue),
                    "breaker OPEN: new orders refused"
                ),
                BreakerChange::HalfOpened => tracing::info!(
                    target: "keel::breaker",
                    venue = self.venue(venue),
                    "breaker HALF-OPEN: probing"
                ),
                BreakerChange::Closed => tracing::info!(
                    target: "keel::breaker",
                    venue = self.venue(venue),
                    "breaker CLOSED: new orders flow"
                ),
            },
            LogRecord::Strategy { strategy, what } => match what {
                StrategyChange::Attached => tracing::info!(
                    target: "keel::strategy",
                    strategy = strategy.0,
                    "strategy attached (heartbeat seen)"
                ),
                StrategyChange::Lost => tracing::warn!(
                    target: "keel::strategy",
                    strategy = strategy.0,
                    "strategy lost (heartbeat stopped)"
                ),
                StrategyChange::NeverAttached => tracing::warn!(
                    target: "keel::strategy",
                    strategy = strategy.0,
                    "strategy never attached after the restart (restored_attach_timeout_ns): \
                     treated as lost; its restored orders are canceled when \
                     cancel_on_strategy_loss is set"
                ),
                StrategyChange::Broken(fault) => tracing::error!(
                    target: "keel::strategy",
                    strategy = strategy.0,
                    fault_code = fault.code(),
                    "strategy channel broken: {fault}; no more commands are read from it (its \
                     orders are canceled as on loss when cancel_on_strategy_loss is set)"
                ),
            },
            LogRecord::OperatorReconcile { venue, cleared } => match cleared {
                Some(cleared) => tracing::warn!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    cleared,
                    "operator reconcile: contradictions cleared, the venue asked again; the link \
                     trades again only if its answer settles everything"
                ),
                None => tracing::warn!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    "operator reconcile not carried out: the link was no longer READ-ONLY"
                ),
            },
            LogRecord::ReconcileStuck { venue, timeouts } => {
                let journal = match &self.names.journal_dir {
                    Some(dir) => format!("the journal in {}", dir.display()),
                    None => "keel's journal".into(),
                };
                tracing::error!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    timeouts,
                    "reconciliation timed out {timeouts} times in a row: the venue never \
                     completes the answer {journal} expects. Likely causes: the venue restarted \
                     without its state (its messages no longer reach the sequence number keel \
                     asks from), the journal belongs to another venue session or venue, or the \
                     venue reset its numbering. Check the venue's session and sequence number \
                     (`keel ctl status`, the venue's own tools); if the venue really lost the \
                     session, stop keel and start on a new journal (move the old one aside \
                     after checking its open orders at the venue); if the venue is only slow, \
                     raise [[venue]] reconcile_timeout_ns"
                )
            }
            LogRecord::NewVenueSession { venue, sessions } => {
                let resolve = match &self.names.journal_dir {
                    Some(dir) => format!(
                        "mv {d} {d}.{old} && keel run --config <this file>",
                        d = dir.display(),
                        old = sessions.journal
                    ),
                    None => "move the journal directory aside and start again".into(),
                };
                tracing::error!(
                    target: "keel::venue",
                    venue = self.venue(venue),
                    "keel: venue {}: the venue began session \"{}\" but the journal's records \
                     belong to session \"{}\": no trading on this journal (its sequence numbers \
                     and open orders are the old session's). Stop keel, start a new journal: \
                     {resolve}",
                    venue.0,
                    sessions.venue,
                    sessions.journal
                )
            }
            LogRecord::Contradiction { .. }
            | LogRecord::LoopStalled { .. }
            | LogRecord::PositionMismatch { .. } => self.write_venue_trust(record),
            LogRecord::Refusals {
                reason,
                count,
                interval_ns,
            } => tracing::warn!(
                target: "keel::refusals",
                reason = refusal_name(reason),
                count,
                interval_ms = interval_ns / 1_000_000,
                "commands refused"
            ),
            LogRecord::HeldBack {
                what,
                count,
                interval_ns,
            } => tracing::warn!(
                target: "keel::refusals",
                what = what.name(),
                count,
                interval_ms = interval_ns / 1_000_000,
                "new orders held back"
            ),
            LogRecord::Dropped { count } => tracing::error!(
                target: "keel::log",
                count,
                "log records dropped (a loop's log ring was full)"
            ),
        }
    }
}

/// How a retry delay reads in a log line.
fn retry_text(retry_in_ns: u64) -> String {
    if retry_in_ns == 0 {
        "no retry scheduled".into()
    } else {
        format!("next attempt in {} ms", retry_in_ns.div_ceil(1_000_000))
    }
}

/// An OS error number as text (`Connection refused (os error 111)`).
pub fn os_error_text(errno: i32) -> String {
    if errno == 0 {
        "no OS error (no free connection slot or socket)".into()
    } else {
        std::io::Error::from_raw_os_error(errno).to_string()
    }
}

/// A refusal reason as docs/ipc.md spells it.
pub fn refusal_name(r: RefusalReason) -> &'static str {
    r.name()
}

/// An operator command and the first line of its answer (admin thread, a cold path).
pub fn operator(request: &str, answer: &str) {
    if answer.starts_with("ok") {
        tracing::info!(target: "keel::ctl", request, answer, "operator command");
    } else {
        tracing::warn!(target: "keel::ctl", request, answer, "operator command refused");
    }
}

/// Installs the process's log subscriber: one line per record on stderr, UTC timestamps,
/// no colour unless stderr is a terminal. Once per process; later calls do nothing.
pub fn install() {
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_writer(|| QuietStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(true)
        .try_init();
}

/// Lines waiting for stderr at most.
const STDERR_LINES_MAX: usize = 1024;
/// How long a thread that logs waits for its line to reach stderr before going on without it.
const STDERR_WAIT: Duration = Duration::from_millis(100);

/// Standard error that never fails and never blocks for long: a log line to a closed stderr
/// is lost, and one to a stderr nobody reads (a full pipe) is queued — at most
/// [`STDERR_LINES_MAX`], then dropped and counted — so that the admin thread (`keel ctl`)
/// and a stop never hang on their log. The engine's state does not depend on its log.
struct QuietStderr;

impl std::io::Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        static PIPE: std::sync::OnceLock<Option<LinePipe>> = std::sync::OnceLock::new();
        match PIPE.get_or_init(|| LinePipe::spawn(std::io::stderr(), STDERR_LINES_MAX)) {
            Some(pipe) => pipe.write(buf, STDERR_WAIT),
            None => {
                let _ = std::io::stderr().write_all(buf);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Lines handed to a writer thread through a bounded queue. A caller waits (a bounded time)
/// until its line is written, so lines keep their order with what the process writes to the
/// same stream directly and none is lost at exit; once a write has outlasted the wait (the
/// reader stopped reading), callers only queue until the writer catches up.
struct LinePipe {
    tx: std::sync::Mutex<(std::sync::mpsc::SyncSender<Vec<u8>>, u64)>,
    written: Arc<(std::sync::Mutex<u64>, std::sync::Condvar)>,
    stalled: Arc<std::sync::atomic::AtomicBool>,
    dropped: Arc<AtomicU64>,
}

impl LinePipe {
    /// A pipe to `out` with room for `lines`; `None` if its thread cannot start.
    fn spawn(mut out: impl std::io::Write + Send + 'static, lines: usize) -> Option<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(lines);
        let written = Arc::new((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
        let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let (w, st, dr) = (
            Arc::clone(&written),
            Arc::clone(&stalled),
            Arc::clone(&dropped),
        );
        std::thread::Builder::new()
            .name("keel-stderr".into())
            .spawn(move || {
                let mut said = 0;
                while let Ok(line) = rx.recv() {
                    let _ = out.write_all(&line);
                    let lost = dr.load(Ordering::Relaxed);
                    if lost > said {
                        let _ = writeln!(
                            out,
                            "keel: {} log lines dropped (stderr was not being read)",
                            lost - said
                        );
                        said = lost;
                    }
                    let _ = out.flush();
                    let mut n =
                        w.0.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    *n += 1;
                    st.store(false, Ordering::Relaxed);
                    w.1.notify_all();
                }
            })
            .ok()?;
        Some(Self {
            tx: std::sync::Mutex::new((tx, 0)),
            written,
            stalled,
            dropped,
        })
    }

    /// Queues `line` and waits up to `wait` for it to be written (not at all while the
    /// writer is stalled); a full queue drops it and counts it.
    fn write(&self, line: &[u8], wait: Duration) {
        let seq = {
            let mut tx = self
                .tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if tx.0.try_send(line.to_vec()).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            tx.1 += 1;
            tx.1
        };
        if self.stalled.load(Ordering::Relaxed) {
            return;
        }
        let (lock, cv) = &*self.written;
        let n = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_n, waited) = cv
            .wait_timeout_while(n, wait, |n| *n < seq)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if waited.timed_out() {
            self.stalled.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that blocks every write until the test lets it go (a pipe nobody reads).
    struct Blocked {
        gate: std::sync::mpsc::Receiver<()>,
        out: Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl std::io::Write for Blocked {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.gate.recv();
            self.out.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    // Goal: a stderr nobody reads never hangs a thread that logs (before, the admin thread
    // and the stop blocked forever on a full pipe: `keel ctl` died, SIGTERM never ended);
    // what does not fit is dropped and said once the stream moves again.
    #[test]
    fn a_stderr_nobody_reads_never_blocks_a_logging_thread() {
        let (open, gate) = std::sync::mpsc::channel();
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let pipe = LinePipe::spawn(
            Blocked {
                gate,
                out: Arc::clone(&out),
            },
            4,
        )
        .unwrap();
        // The writer takes the first line and blocks in it; 4 more fill the queue; the rest
        // are dropped. Every call returns.
        for i in 0..20 {
            pipe.write(format!("line {i}\n").as_bytes(), Duration::from_millis(1));
        }
        assert!(pipe.dropped.load(Ordering::Relaxed) >= 15 - 1);
        // The reader comes back: every queued line is written, then the drop is said.
        for _ in 0..64 {
            let _ = open.send(());
        }
        drop(open);
        let said = |text: &str| {
            let out = out.lock().unwrap();
            String::from_utf8_lossy(&out).contains(text)
        };
        // Bounded: 30 s of 1-ms naps.
        let mut naps = 0;
        while !said("log lines dropped (stderr was not being read)") {
            naps += 1;
            assert!(naps < 30_000, "never said");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(said("line 0\n"));
        // In order, a caller waits until its line is written when the stream flows.
        pipe.write(b"last\n", Duration::from_secs(30));
        assert!(said("last\n"));
    }
}
