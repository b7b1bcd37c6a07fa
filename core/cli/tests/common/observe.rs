//! What the tests of the side thread share: programs from the machine (Prometheus,
//! Chromium), one-shot HTTP, a `keel venue` + `keel run` world with its monitor's address,
//! and the live page kept open in headless Chromium by tests/interop/page_watch.py.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command as Process, Stdio};
use std::time::{Duration, Instant};

use keel::ipc::{Channel, EngineState};
use keel::order::VenueId;

use super::peers::{venue, Proc, Venue, KEEL};

/// Waits (bounded) until `done`, failing with `what`.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A program the test needs from the machine: its path, or `None` (skip) unless
/// `KEEL_REQUIRE_OBSERVABILITY=1` makes a missing one a failure.
pub fn program(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("KEEL_REQUIRE_OBSERVABILITY").as_deref() != Ok("1"),
            "{name} is not installed but KEEL_REQUIRE_OBSERVABILITY=1 (scripts/test installs it)"
        );
        eprintln!(
            "{name} not installed: that part of the test is skipped (scripts/test installs it)"
        );
    }
    found
}

/// One HTTP GET on loopback: status code and body.
pub fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// A port free on loopback now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `keel ARGS`: its exit code and its stdout then stderr.
pub fn keel(args: &[&str]) -> (i32, String) {
    let out = Process::new(KEEL).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// A real Prometheus server (`None`: not installed, skipped) in `dir/prometheus`, scraping
/// `target` every second: the process (killed on drop) and its web address.
pub fn prometheus(dir: &Path, target: &str) -> Option<(Proc, String)> {
    prometheus_with(dir, target, None)
}

/// [`prometheus`], also evaluating the alerting rules in `rules` (if given) every second.
pub fn prometheus_with(dir: &Path, target: &str, rules: Option<&Path>) -> Option<(Proc, String)> {
    let prometheus = program("prometheus")?;
    let web = format!("127.0.0.1:{}", free_port());
    let pdir = dir.join("prometheus");
    std::fs::create_dir_all(&pdir).unwrap();
    let pconfig = pdir.join("prometheus.yml");
    let rules = rules.map_or(String::new(), |r| {
        format!(
            "  evaluation_interval: 1s\nrule_files:\n  - '{}'\n",
            r.display()
        )
    });
    std::fs::write(
        &pconfig,
        format!(
            "global:\n  scrape_interval: 1s\n{rules}scrape_configs:\n  - job_name: keel\n    \
             static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let server = Proc(
        Process::new(prometheus)
            .arg(format!("--config.file={}", pconfig.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                pdir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(pdir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    Some((server, web))
}

/// `keel venue` and a `keel run` configuration against it (not started).
pub struct World {
    /// The venue (killed on drop).
    pub venue: Venue,
    /// Where the journal, the IPC files and the logs go.
    pub dir: tempfile::TempDir,
    /// The engine's configuration file.
    pub config: PathBuf,
    /// The IPC directory.
    pub ipc: PathBuf,
}

/// [`world_with`] nothing extra.
pub fn world() -> World {
    world_with("")
}

/// [`world`] with `extra` appended to the engine's configuration.
pub fn world_with(extra: &str) -> World {
    let venue = venue(&["--flow-rate", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let (journal, ipc) = (dir.path().join("journal"), dir.path().join("ipc"));
    let text = format!(
        "symbols = [\"AAPL\", \"MSFT\"]\n\
         [dispatcher]\nstrategies = 1\n\
         [engine]\nidle = \"backoff\"\n\
         [operator]\ncancel_on_stop = false\n\
         [journal]\ndir = \"{}\"\n\
         [ipc]\ndir = \"{}\"\nstrategy_timeout_ns = \"60s\"\n\
         [metrics]\nhttp = \"127.0.0.1:0\"\n\
         [budget]\nnew_ack_p99_ns = \"1s\"\n\
         [[venue]]\nname = \"sim\"\naddress = \"{}\"\nusername = \"keel\"\n\
         password = \"keel\"\nbackoff_base_ns = \"20ms\"\nbackoff_cap_ns = \"200ms\"\n{extra}",
        journal.display(),
        ipc.display(),
        venue.entry
    );
    let config = dir.path().join("keel.toml");
    std::fs::write(&config, text).unwrap();
    World {
        venue,
        dir,
        config,
        ipc,
    }
}

/// The monitor's address, from the engine's log line `url=http://ADDR/`.
pub fn monitor_addr(err_log: &Path) -> String {
    let mut addr = String::new();
    wait_until("the monitor's log line", Duration::from_secs(20), || {
        let log = std::fs::read_to_string(err_log).unwrap_or_default();
        if let Some(at) = log.find("url=http://") {
            addr = log[at + 11..]
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string();
        }
        !addr.is_empty()
    });
    addr
}

pub fn synced_channel(ipc: &Path) -> Channel {
    let path = ipc.join("strategy-0");
    let mut channel = None;
    wait_until("a running, SYNCED engine", Duration::from_secs(20), || {
        if channel.is_none() {
            channel = Channel::open(&path).ok();
        }
        channel.as_ref().is_some_and(|c| {
            c.beat_strategy();
            c.engine_state() == EngineState::Running && c.venue_synced(VenueId(0))
        })
    });
    channel.unwrap()
}

/// The live page open in headless Chromium (tests/interop/page_watch.py over the DevTools
/// protocol); `None` (skipped, saying so) without Chromium or the interop Python.
pub struct Page {
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    _driver: Proc,
    _profile: tempfile::TempDir,
}

impl Page {
    /// Opens `url` and waits for the driver's `ready`.
    pub fn open(url: &str) -> Option<Page> {
        Self::open_watching(url, &[])
    }

    /// [`Page::open`], recording every text the elements `watched` show from the first load.
    pub fn open_watching(url: &str, watched: &[&str]) -> Option<Page> {
        let (Some(chromium), Some(python)) = (program("chromium"), super::peers::python()) else {
            return None;
        };
        let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/page_watch.py");
        let profile = tempfile::tempdir().unwrap();
        let mut child = Process::new(python)
            .arg(&driver)
            .arg(&chromium)
            .arg(url)
            .arg(profile.path())
            .args(watched)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let to = child.stdin.take().unwrap();
        let from = BufReader::new(child.stdout.take().unwrap());
        let mut page = Page {
            to,
            from,
            _driver: Proc(child),
            _profile: profile,
        };
        let mut ready = String::new();
        page.from.read_line(&mut ready).unwrap();
        assert_eq!(ready.trim(), "ready", "the driver started Chromium");
        Some(page)
    }

    /// One command to the driver (see page_watch.py), its one-line answer.
    pub fn ask(&mut self, line: &str) -> String {
        writeln!(self.to, "{line}").unwrap();
        let mut answer = String::new();
        self.from.read_line(&mut answer).unwrap();
        answer.trim_end().to_string()
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = writeln!(self.to, "quit");
    }
}
