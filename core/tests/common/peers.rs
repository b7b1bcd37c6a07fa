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
}

/// `keel venue` on free ports, with `extra` arguments.
pub fn venue(extra: &[&str]) -> Venue {
    let mut child = Command::new(KEEL)
        .args([
            "venue",
            "--listen",
            "127.0.0.1:0",
            "--control",
            "127.0.0.1:0",
        ])
        .args(["--md-listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("keel venue");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the venue's first line");
    // "keel venue: order entry on A, control on B, symbols S, market data on ws://C/md"
    let words: Vec<&str> = line.split_whitespace().collect();
    Venue {
        entry: words[5].trim_end_matches(',').to_string(),
        control: words[8].trim_end_matches(',').to_string(),
        md: words.last().expect("md address").to_string(),
        proc: Proc(child),
    }
}
