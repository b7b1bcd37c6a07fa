//! What the end-to-end tests start: `keel venue` processes and the Python interpreter of the
//! virtualenv scripts/test makes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The `keel` binary under test.
pub const KEEL: &str = env!("CARGO_BIN_EXE_keel");

/// The interop interpreter (`KEEL_INTEROP_PYTHON`); `None` (the test is skipped, saying so)
/// unless `KEEL_REQUIRE_INTEROP=1`, which makes a missing one a failure.
pub fn python() -> Option<String> {
    match std::env::var("KEEL_INTEROP_PYTHON") {
        Ok(p) => Some(p),
        Err(_) if std::env::var("KEEL_REQUIRE_INTEROP").as_deref() == Ok("1") => {
            panic!("KEEL_INTEROP_PYTHON is not set but KEEL_REQUIRE_INTEROP=1")
        }
        Err(_) => {
            eprintln!("interop test not run: set KEEL_INTEROP_PYTHON (scripts/test does)");
            None
        }
    }
}

/// A child process killed (SIGKILL) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `keel venue` and its addresses.
pub struct Venue {
    /// The process (killed on drop).
    pub proc: Proc,
    /// Order entry, `host:port`.
    pub entry: String,
    /// Control port, `host:port`.
    pub control: String,
    /// Market data, `ws://host:port/md`.
    pub md: String,
    /// The REST API, `host:port` (with `--rest-listen`).
    pub rest: Option<String>,
}

/// `keel venue` on free ports, with `extra` arguments.
pub fn venue(extra: &[&str]) -> Venue {
    venue_at("127.0.0.1:0", extra)
}

/// `keel venue` taking order entry on `listen` (e.g. where a venue that went away listened),
/// its other ports free, with `extra` arguments.
pub fn venue_at(listen: &str, extra: &[&str]) -> Venue {
    let mut child = Command::new(KEEL)
        .args(["venue", "--listen", listen, "--control", "127.0.0.1:0"])
        .args(["--md-listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("keel venue");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    out.read_line(&mut line).expect("the venue's first line");
    // "keel venue: order entry on A, control on B, symbols S, market data on ws://C/md", then
    // with --rest-listen "keel venue: REST API on http://D" (https:// with --tls-cert).
    let rest = extra.contains(&"--rest-listen").then(|| {
        let mut second = String::new();
        out.read_line(&mut second).expect("the venue's REST line");
        second.rsplit("://").next().unwrap_or("").trim().to_string()
    });
    let words: Vec<&str> = line.split_whitespace().collect();
    Venue {
        entry: words[5].trim_end_matches(',').to_string(),
        control: words[8].trim_end_matches(',').to_string(),
        md: words.last().expect("md address").to_string(),
        rest,
        proc: Proc(child),
    }
}

/// Makes `command`'s process run as a container runtime's default seccomp profile would have
/// it: the io_uring system calls (`io_uring_setup`, `io_uring_enter`, `io_uring_register`:
/// 425–427 on every architecture) fail with EPERM. Everything else is allowed. The filter is
/// installed in the child between fork and exec, so the test process is untouched.
pub fn without_io_uring(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    const LOAD_NR: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JUMP_IF: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RETURN: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |k, jt, jf| libc::sock_filter {
        code: JUMP_IF,
        jt,
        jf,
        k,
    };
    let filter = [
        stmt(LOAD_NR, 0), // seccomp_data.nr
        jump(428, 2, 0),  // nr >= 428: allow
        jump(425, 0, 1),  // nr >= 425 (and < 428): EPERM
        stmt(RETURN, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(RETURN, libc::SECCOMP_RET_ALLOW),
    ];
    // SAFETY: the closure runs in the child between fork and exec and only makes two prctl
    // calls (async-signal-safe) on the filter it owns, which outlives both calls.
    unsafe {
        command.pre_exec(move || {
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    std::ptr::addr_of!(program),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// `keel run --config CONFIG` with its stdout in `log` and its stderr in `log` with the
/// extension `err` (warnings: read them when a test fails).
pub fn keel_run(config: &std::path::Path, log: &std::path::Path) -> Proc {
    keel_run_with(&mut Command::new(KEEL), config, log)
}

/// [`keel_run`] on a prepared command (e.g. [`without_io_uring`]).
pub fn keel_run_with(
    command: &mut Command,
    config: &std::path::Path,
    log: &std::path::Path,
) -> Proc {
    Proc(
        command
            .args([
                "run",
                "--config",
                config.to_str().unwrap(),
                "--status-s",
                "0",
            ])
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Stops `keel run` with SIGTERM (it must exit cleanly) and returns its stdout.
pub fn stop_keel_run(mut engine: Proc, log: &std::path::Path) -> String {
    let pid = engine.0.id() as i32;
    // SAFETY: sending a signal to our own child process.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = engine.0.wait().unwrap();
    let stderr = std::fs::read_to_string(log.with_extension("err")).unwrap_or_default();
    assert!(status.success(), "keel run exited {status}: {stderr}");
    std::mem::forget(engine);
    std::fs::read_to_string(log).unwrap()
}

/// A book as the venue tells it: update id, bids, asks (best first).
pub type Book = (u64, Vec<(i64, u64)>, Vec<(i64, u64)>);

/// The venue's depth of `symbol` (5,000 levels) from its REST API at `rest`, as JSON text
/// (its own API key, so no other client's budget is touched).
pub fn http_get(rest: std::net::SocketAddr, symbol: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(rest).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let req = format!(
        "GET /api/v3/depth?symbol={symbol}&limit=5000 HTTP/1.1\r\nHost: x\r\nX-Api-Key: test\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    // Read the head, then the body by its Content-Length (the venue keeps connections alive).
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65_536];
    let body = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer");
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .unwrap()
                .parse()
                .unwrap();
            if body.len() >= len {
                break body.to_string();
            }
        }
    };
    body
}

/// A REST depth answer as `(update id, bids, asks)` in keel's fixed point.
pub fn parse_book(body: &str) -> Book {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let side = |k: &str| -> Vec<(i64, u64)> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let p = l[0].as_str().unwrap();
                let (w, f) = p.split_once('.').unwrap();
                let price = w.parse::<i64>().unwrap() * 10_000 + f.parse::<i64>().unwrap();
                (price, l[1].as_str().unwrap().parse().unwrap())
            })
            .collect()
    };
    (
        v["lastUpdateId"].as_u64().unwrap(),
        side("bids"),
        side("asks"),
    )
}

/// The shared-memory channel of strategy 0 in `ipc`, once an engine of epoch above
/// `epoch_above` made it and says it runs with venue 0 SYNCED (30 s at most, beating as the
/// strategy).
#[allow(clippy::disallowed_methods)] // a test driver waits on another process by the wall clock
pub fn synced_channel(ipc: &std::path::Path, epoch_above: u64) -> keel::ipc::Channel {
    use keel::ipc::{Channel, EngineState};
    let path = ipc.join("strategy-0");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut channel: Option<Channel> = None;
    loop {
        if channel.is_none() {
            channel = Channel::open(&path)
                .ok()
                .filter(|c| c.engine_epoch() > epoch_above);
        }
        let ready = channel.as_ref().is_some_and(|c| {
            c.beat_strategy();
            c.engine_state() == EngineState::Running && c.venue_synced(keel::order::VenueId(0))
        });
        if ready {
            return channel.expect("ready");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for a running, SYNCED engine"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
