//! The admin thread: the Unix socket (its path checked and re-created, at most
//! [`CONNECTIONS_MAX`] clients, bounded reads and writes), one request line per connection
//! handed to the loop through the rings, the answer written back as text.

use super::*;

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
    pub(super) shared: Arc<Shared>,
    counters: Arc<AdminCounters>,
    clock: TscClock,
}

/// Binds a listener at `path` (mode 0600), replacing only a dead socket; returns it and the
/// socket file's (device, inode).
pub(super) fn open_listener(path: &Path) -> std::io::Result<(UnixListener, (u64, u64))> {
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
pub(super) const PATH_CHECK_NS: u64 = 1_000_000_000;

/// The longest an idle admin server sleeps before it looks at the stop flag and the path.
const IDLE_WAKE: Duration = Duration::from_millis(100);

/// A connection whose request line is not complete yet.
#[derive(Debug)]
pub(super) struct Waiting {
    stream: UnixStream,
    line: Vec<u8>,
    deadline_ns: u64,
}

impl Waiting {
    /// Reads what arrived (non-blocking). `None`: keep waiting; `Some(Ok(line))`: a whole
    /// request line (what follows its newline is ignored); `Some(Err(why))`: refused.
    pub(super) fn read(&mut self, now_ns: u64) -> Option<Result<String, String>> {
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
    pub(in crate::engine) fn bind(
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
    pub(in crate::engine) fn run(mut self) {
        let mut waiting: Vec<Waiting> = Vec::with_capacity(CONNECTIONS_MAX);
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(CONNECTIONS_MAX + 1);
        while !self.shared.stop.load(Ordering::Relaxed) {
            self.check_path();
            let accepted = self.accept_all(&mut waiting);
            let served = self.read_all(&mut waiting);
            if accepted + served == 0 {
                self.wait(&waiting, &mut fds);
            }
        }
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Sleeps in poll(2) until a connection arrives, a waiting one sends (or closes), its
    /// request deadline passes, or at most [`IDLE_WAKE`] (to see a stop and check the path):
    /// an idle server makes ten system calls a second, none of them an accept that fails.
    fn wait(&self, waiting: &[Waiting], fds: &mut Vec<libc::pollfd>) {
        use std::os::fd::AsRawFd;
        fds.clear();
        let watch = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        fds.push(watch(self.listener.as_raw_fd()));
        fds.extend(waiting.iter().map(|w| watch(w.stream.as_raw_fd())));
        let now_ns = self.clock.now_ns();
        let ms = waiting
            .iter()
            .map(|w| w.deadline_ns.saturating_sub(now_ns).div_ceil(1_000_000))
            .fold(IDLE_WAKE.as_millis() as u64, u64::min);
        // SAFETY: `fds` is a live Vec of initialised pollfd records owned here, of the length
        // given; poll(2) only writes their `revents`.
        #[allow(unsafe_code)]
        let _ = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms as i32) };
    }

    /// Once a second: a socket file removed while the engine runs (by hand, by a tmp
    /// cleaner) is made again, and said; a path that names something else now is said once
    /// and left alone.
    pub(super) fn check_path(&mut self) {
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
    pub(super) fn accept_all(&mut self, waiting: &mut Vec<Waiting>) -> usize {
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
    pub(super) fn read_all(&mut self, waiting: &mut Vec<Waiting>) -> usize {
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

    pub(super) fn refuse(&mut self, stream: UnixStream, why: String) {
        // Read what the client already sent (a socket closed with unread bytes resets the
        // connection, and the client would lose this answer).
        let _ = stream.set_nonblocking(true);
        let mut sink = [0u8; REQUEST_LEN_MAX + 1];
        let _ = (&stream).read(&mut sink);
        self.serve_one(stream, Err(why));
    }

    pub(super) fn serve_one(&mut self, stream: UnixStream, request: Result<String, String>) {
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
    pub(super) fn write_answer(&self, stream: &UnixStream, mut answer: &[u8]) {
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
    pub(super) fn reconcile(&mut self, v: VenueId) -> String {
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
    pub(super) fn answer(&mut self, line: &str) -> String {
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
    pub(super) fn ask(&mut self, command: AdminCommand) -> Result<Vec<Answer>, String> {
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

    pub(super) fn symbol(&self, s: SymbolId) -> &str {
        self.names
            .symbols
            .get(usize::from(s.0))
            .map_or("?", String::as_str)
    }

    pub(super) fn venue(&self, v: VenueId) -> &str {
        self.names
            .venues
            .get(usize::from(v.0))
            .map_or("?", String::as_str)
    }

    pub(super) fn format(&self, command: AdminCommand, stats: bool, answers: &[Answer]) -> String {
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

    pub(super) fn order_line(&self, o: &Order, age_ns: u64) -> String {
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
