//! The QuickFIX/C++ peers scripts/quickfix-peers builds (`target/quickfix/`, or
//! `KEEL_QUICKFIX_DIR`): a FIX 4.4 acceptor (a venue for keel's initiator) and a FIX 4.4
//! initiator (a trader for keel's venue), each driven through its stdin and read through its
//! stdout, one line per command and event.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use keel::clock::{Clock, TscClock};

use super::peers::Proc;

/// How long [`Acceptor::wait`] waits for a line before it fails the test.
const WAIT: Duration = Duration::from_secs(20);

/// The peers' folder; `None` (the test is skipped, saying so) unless `KEEL_REQUIRE_INTEROP=1`,
/// which makes missing peers a failure.
pub fn dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KEEL_QUICKFIX_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/quickfix"),
        PathBuf::from,
    );
    if dir.join("acceptor").exists()
        && dir.join("initiator").exists()
        && dir.join("FIX44.xml").exists()
    {
        return Some(dir);
    }
    if std::env::var("KEEL_REQUIRE_INTEROP").as_deref() == Ok("1") {
        panic!(
            "QuickFIX peers missing in {} but KEEL_REQUIRE_INTEROP=1 (scripts/quickfix-peers builds them)",
            dir.display()
        );
    }
    eprintln!("QuickFIX interop test not run: run scripts/quickfix-peers (scripts/test does)");
    None
}

/// A QuickFIX acceptor (SenderCompID VENUE, TargetCompID KEEL) on a loopback port.
pub type Acceptor = Peer;

/// A QuickFIX peer process: the acceptor, or the initiator.
pub struct Peer {
    /// Its order-entry address.
    pub addr: std::net::SocketAddr,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Every line it printed so far.
    pub seen: Vec<String>,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

impl Peer {
    /// Starts the acceptor; `None` when the peers are not built (see [`dir`]). A port taken
    /// between choosing it and QuickFIX binding it is chosen again (at most five times).
    pub fn start() -> Option<Self> {
        let peers = dir()?;
        for _ in 0..5 {
            let tmp = tempfile::tempdir().unwrap();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let settings = Self::acceptor_settings(&peers, &tmp, port);
            let addr = ([127, 0, 0, 1], port).into();
            if let Some(a) = Self::spawn(&peers, "acceptor", &settings, addr, tmp) {
                return Some(a);
            }
        }
        panic!("the QuickFIX acceptor did not start on any of five ports");
    }

    /// Starts the initiator (SenderCompID QF, TargetCompID VENUE, password keel), logging on
    /// to keel's venue at `venue` (reconnecting every second while it cannot); `None` when
    /// the peers are not built.
    pub fn initiator(venue: std::net::SocketAddr) -> Option<Self> {
        let peers = dir()?;
        let tmp = tempfile::tempdir().unwrap();
        let settings = tmp.path().join("initiator.cfg");
        std::fs::write(
            &settings,
            format!(
                "[DEFAULT]\nConnectionType=initiator\nSocketConnectHost={host}\n\
                 SocketConnectPort={port}\nReconnectInterval=1\nHeartBtInt=30\n\
                 StartTime=00:00:00\nEndTime=00:00:00\nFileStorePath={store}\n\
                 FileLogPath={log}\nUseDataDictionary=Y\nDataDictionary={dict}\n\
                 ValidateUserDefinedFields=N\nResetOnLogon=N\n\n[SESSION]\n\
                 BeginString=FIX.4.4\nSenderCompID=QF\nTargetCompID=VENUE\n",
                host = venue.ip(),
                port = venue.port(),
                store = tmp.path().join("store").display(),
                log = tmp.path().join("log").display(),
                dict = peers.join("FIX44.xml").display(),
            ),
        )
        .unwrap();
        let peer = Self::spawn(&peers, "initiator", &settings, venue, tmp);
        Some(peer.expect("the QuickFIX initiator starts"))
    }

    fn acceptor_settings(peers: &std::path::Path, tmp: &tempfile::TempDir, port: u16) -> PathBuf {
        let settings = tmp.path().join("acceptor.cfg");
        std::fs::write(
            &settings,
            format!(
                "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
                 SocketAcceptPort={port}\nSocketReuseAddress=Y\nStartTime=00:00:00\n\
                 EndTime=00:00:00\nFileStorePath={store}\nFileLogPath={log}\n\
                 UseDataDictionary=Y\nDataDictionary={dict}\nValidateUserDefinedFields=N\n\
                 ResetOnLogon=N\n\n[SESSION]\nBeginString=FIX.4.4\nSenderCompID=VENUE\n\
                 TargetCompID=KEEL\n",
                store = tmp.path().join("store").display(),
                log = tmp.path().join("log").display(),
                dict = peers.join("FIX44.xml").display(),
            ),
        )
        .unwrap();
        settings
    }

    fn spawn(
        peers: &std::path::Path,
        binary: &str,
        settings: &std::path::Path,
        addr: std::net::SocketAddr,
        tmp: tempfile::TempDir,
    ) -> Option<Self> {
        let mut child = Command::new(peers.join(binary))
            .arg(settings)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the QuickFIX peer starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut a = Self {
            addr,
            stdin,
            lines,
            seen: Vec::new(),
            _proc: Proc(child),
            _dir: tmp,
        };
        match a.next_line(WAIT) {
            Some(l) if l == "ready" => Some(a),
            Some(l) if l.starts_with("failed") => None,
            other => panic!("the QuickFIX {binary} said {other:?} at start"),
        }
    }

    fn next_line(&mut self, within: Duration) -> Option<String> {
        match self.lines.recv_timeout(within) {
            Ok(line) => {
                self.seen.push(line.clone());
                Some(line)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Every message QuickFIX's own log holds (what it sent and what it received, in order),
    /// as the bytes that crossed the wire.
    pub fn logged_messages(&self) -> Vec<Vec<u8>> {
        let mut all = Vec::new();
        let Ok(files) = std::fs::read_dir(self._dir.path().join("log")) else {
            return all;
        };
        for file in files.flatten() {
            if !file.file_name().to_string_lossy().contains("messages") {
                continue;
            }
            let text = std::fs::read(file.path()).unwrap_or_default();
            // Each line: a timestamp, " : ", then the message with its SOHs.
            for line in text.split(|&b| b == b'\n') {
                if let Some(at) = line.windows(3).position(|w| w == b" : ") {
                    all.push(line[at + 3..].to_vec());
                }
            }
        }
        all
    }

    /// Sends one command line.
    pub fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").expect("the QuickFIX peer reads its stdin");
        self.stdin.flush().unwrap();
    }

    /// Lines printed since the last call, without waiting.
    pub fn drain(&mut self) -> &[String] {
        let before = self.seen.len();
        while self.next_line(Duration::ZERO).is_some() {}
        &self.seen[before..]
    }

    /// Whether a line starting with `prefix` was printed (so far).
    pub fn saw(&mut self, prefix: &str) -> bool {
        self.drain();
        self.seen.iter().any(|l| l.starts_with(prefix))
    }

    /// How many lines starting with `prefix` were printed (so far).
    pub fn count(&mut self, prefix: &str) -> usize {
        self.drain();
        self.seen.iter().filter(|l| l.starts_with(prefix)).count()
    }

    /// Waits (stepping `step` meanwhile) until a line starting with `prefix` is printed
    /// beyond the first `after` such lines; fails the test after 20 s naming what it saw.
    pub fn wait_while(&mut self, prefix: &str, after: usize, step: impl FnMut()) -> String {
        self.wait_for(prefix, |l| l.starts_with(prefix), after, step)
    }

    /// Waits (stepping `step` meanwhile) until the `after`+1th line that `matches` is
    /// printed; fails the test after 20 s naming `what` and every line it saw.
    pub fn wait_for(
        &mut self,
        what: &str,
        matches: impl Fn(&str) -> bool,
        after: usize,
        mut step: impl FnMut(),
    ) -> String {
        let clock = TscClock::new();
        let deadline = clock.now_ns() + WAIT.as_nanos() as u64;
        loop {
            self.drain();
            if let Some(l) = self.seen.iter().filter(|l| matches(l)).nth(after) {
                return l.clone();
            }
            if clock.now_ns() > deadline {
                panic!(
                    "no {what:?} from the QuickFIX peer; it said {:?}",
                    self.seen
                );
            }
            step();
        }
    }
}
