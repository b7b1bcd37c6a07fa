//! The example strategies trade through `keel run` against `keel venue`, as
//! docs/strategies.md tells a newcomer to run them: examples/c/quoter.c (built here with the
//! system's compiler against sdk/c) and examples/python/keel_strategy.py (the `keel` package,
//! installed into the test virtualenv by scripts/test). Each quotes around the top of book it
//! reads from the engine's market-data file; what each says it did is what the venue counts.
//! Then the flow stops, and the top of book the external readers (C and Python) see equals the
//! venue's own.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output, Stdio};
use std::time::{Duration, Instant};

use common::peers::{self, Proc};
use keel::ipc::md::MdReader;
use keel::ipc::{Channel, EngineState};
use keel::order::VenueId;
use serde_json::Value;

const SYMBOLS: [&str; 4] = ["AAPL", "MSFT", "AMZN", "NVDA"];

/// `keel venue` with its flow, and `keel run` on examples/strategies.toml (the tutorial's
/// configuration: three strategies over shared memory, the venue's market data as its feed).
struct World {
    venue: peers::Venue,
    dir: tempfile::TempDir,
    engine: Option<Proc>,
}

impl World {
    fn start() -> Self {
        let venue = peers::venue(&["--flow-rate", "400"]);
        let dir = tempfile::tempdir().unwrap();
        let md = venue
            .md
            .trim_start_matches("ws://")
            .trim_end_matches("/md")
            .to_string();
        // The tutorial's own configuration, on this run's ports and directory.
        let tutorial = std::fs::read_to_string(repo("examples/strategies.toml")).unwrap();
        for fixed in [
            "/dev/shm/keel-tutorial",
            "127.0.0.1:15000",
            "127.0.0.1:15002",
        ] {
            assert!(
                tutorial.contains(fixed),
                "examples/strategies.toml: {fixed}"
            );
        }
        let config = dir.path().join("keel.toml");
        std::fs::write(
            &config,
            tutorial
                .replace("/dev/shm/keel-tutorial", &dir.path().display().to_string())
                .replace("127.0.0.1:15000", &venue.entry)
                .replace("127.0.0.1:15002", &md),
        )
        .unwrap();
        let engine = peers::keel_run(&config, &dir.path().join("run.log"));
        let world = Self {
            venue,
            dir,
            engine: Some(engine),
        };
        // Facts, not time: the engine running with its venue SYNCED, its books in step.
        let channel = world.path("strategy-1");
        wait_until("the engine running and SYNCED", || {
            Channel::open(&channel).is_ok_and(|c| {
                c.beat_strategy();
                c.engine_state() == EngineState::Running && c.venue_synced(VenueId(0))
            })
        });
        wait_until("the engine's market data in step", || {
            MdReader::open(&world.path("md-0")).is_ok_and(|r| r.synced())
        });
        world
    }

    /// How many times the engine declared `strategy` lost (`keel ctl status`).
    fn lost(&self, strategy: u16) -> u64 {
        let out = Process::new(peers::KEEL)
            .args(["ctl", "--config"])
            .arg(self.dir.path().join("keel.toml"))
            .arg("status")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("strategy {strategy}:")))
            .unwrap_or_else(|| panic!("strategy {strategy} in {text}"));
        line.split(", ")
            .find_map(|w| w.strip_prefix("lost "))
            .unwrap_or_else(|| panic!("lost in {line}"))
            .parse()
            .unwrap()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join("ipc").join(name)
    }

    fn control(&self, command: &str) -> String {
        let mut s = TcpStream::connect(&self.venue.control).unwrap();
        s.write_all(format!("{command}\n").as_bytes()).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let answer = line.trim_end();
        assert!(answer.starts_with("ok"), "{command}: {answer}");
        answer
            .strip_prefix(&format!("ok {}", command.split(' ').next().unwrap()))
            .unwrap_or(answer)
            .trim()
            .to_string()
    }

    /// The venue's counters and positions: accepted, canceled, bought, sold, open orders.
    fn venue_counts(&self) -> [u64; 5] {
        let stats = self.control("stats");
        let positions = self.control("positions");
        let open = self.control("open-orders");
        let field = |line: &str, key: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("{key} in {line}"))
                .parse()
                .unwrap()
        };
        [
            field(&stats, "accepted"),
            field(&stats, "canceled"),
            field(&positions, "bought"),
            field(&positions, "sold"),
            open.split_whitespace().next().unwrap().parse().unwrap(),
        ]
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The strategy's one JSON line, checked to be a clean stop with every order accounted for:
/// each placed order was accepted, refused, or withdrawn inside keel (canceled before it
/// left), each accepted one canceled or filled.
fn summary(who: &str, out: &Output, quotes: u64) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{who}: {}\n{stdout}\n{stderr}",
        out.status
    );
    let v: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{who}: {e}: {stdout}"));
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{who}: {k} in {v}"));
    assert_eq!(v["stopped"], "done", "{who}: {v}");
    assert_eq!(n("placed"), 2 * quotes, "{who}: {v}");
    assert_eq!(
        n("accepted") + n("refused") + n("rejected") + n("withdrawn"),
        n("placed"),
        "{who}: every order answered: {v}"
    );
    assert_eq!(
        n("canceled") + n("filled"),
        n("accepted"),
        "{who}: every accepted order closed: {v}"
    );
    assert_eq!(n("unknown"), 0, "{who}: {v}");
    // It re-quotes only once both quotes closed: after a move of the top, or fills.
    assert!(n("moves") + n("filled") >= quotes - 1, "{who}: {v}");
    v
}

/// What a strategy's summary says the venue must have counted since `before`.
fn agrees(who: &str, v: &Value, before: [u64; 5], after: [u64; 5]) {
    let n = |k: &str| v[k].as_u64().unwrap();
    let said = [n("accepted"), n("canceled"), n("bought"), n("sold"), 0];
    let counted = [
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2],
        after[3] - before[3],
        after[4],
    ];
    assert_eq!(
        said, counted,
        "{who} said (accepted, canceled, bought, sold, open) {said:?}, the venue counted {counted:?}"
    );
}

/// The venue's `top SYMBOL` as (seq, bids, asks), five levels a side with (0, 0) padding, as
/// the market-data file holds them.
type Top = (u64, Vec<(i64, u64)>, Vec<(i64, u64)>);

fn venue_top(world: &World, symbol: &str) -> Top {
    let line = world.control(&format!("top {symbol}"));
    let part = |key: &str| -> &str {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap()
    };
    let levels = |text: &str| -> Vec<(i64, u64)> {
        let mut l: Vec<(i64, u64)> = if text == "-" {
            Vec::new()
        } else {
            text.split(',')
                .map(|pq| {
                    let (p, q) = pq.split_once(':').unwrap();
                    (p.parse().unwrap(), q.parse().unwrap())
                })
                .collect()
        };
        l.resize(5, (0, 0));
        l
    };
    (
        part("seq").parse().unwrap(),
        levels(part("bids")),
        levels(part("asks")),
    )
}

/// `probe md PATH` (sdk/c/tests/probe.c): symbol `s`'s top as C reads it.
fn c_top(probe: &Path, md: &Path, symbols: usize) -> Vec<Top> {
    let mut child = Process::new(probe)
        .arg("md")
        .arg(md)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let stdin = child.stdin.as_mut().unwrap();
        for s in 0..symbols {
            writeln!(stdin, "top {s}").unwrap();
        }
        writeln!(stdin, "quit").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("ok symbols"), "{text}");
    lines
        .map(|line| {
            // "top seq=N bp/bq:ap/aq ..." five times.
            let mut words = line.split_whitespace().skip(1);
            let seq = words
                .next()
                .unwrap()
                .strip_prefix("seq=")
                .unwrap()
                .parse()
                .unwrap();
            let (mut bids, mut asks) = (Vec::new(), Vec::new());
            for w in words {
                let (b, a) = w.split_once(':').unwrap();
                let pair = |x: &str| {
                    let (p, q) = x.split_once('/').unwrap();
                    (p.parse().unwrap(), q.parse().unwrap())
                };
                bids.push(pair(b));
                asks.push(pair(a));
            }
            (seq, bids, asks)
        })
        .collect()
}

/// Every symbol's top as the Python package reads it.
fn python_top(py: &str, md: &Path) -> Vec<Top> {
    let out = Process::new(py)
        .arg("-c")
        .arg(
            "import keel, sys, json\n\
             md = keel.MarketData(sys.argv[1])\n\
             print(json.dumps([[t.seq, t.bids, t.asks] for t in (md.top(s) for s in range(md.symbols))]))",
        )
        .arg(md)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

// Goal: the C and the Python example strategies, run as docs/strategies.md says, quote around
// the engine's top of book through `keel run`, stop cleanly, and account for every order; the
// venue counts exactly what each says it did (accepted, canceled, shares bought and sold, and
// nothing left open). A second writer on a strategy's channel is refused and harms neither the
// engine nor the strategy. After the flow stops, the top of book C and Python read from the
// engine's market-data file equals the venue's, symbol by symbol; after the engine stops, the
// file says it is no longer in step.
#[test]
fn the_example_strategies_trade_and_the_venue_agrees() {
    let Some(py) = peers::python() else {
        return;
    };
    let world = World::start();
    let bin = world.dir.path().join("quoter");
    common::sdk::build_c(&bin, &["examples/c/quoter.c"]);
    let probe = world.dir.path().join("probe");
    common::sdk::build_c(&probe, &["sdk/c/tests/probe.c"]);
    let md = world.path("md-0");
    const QUOTES: u64 = 12;

    // Careless use, refused by name before anything is sent: an unknown symbol, and a market
    // data file whose engine is gone (a stale copy: its heartbeat never moves), which is
    // never quoted on.
    let out = Process::new(&bin)
        .arg(world.path("strategy-1"))
        .arg(&md)
        .args(["XXX", "sim", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no symbol 'XXX': the engine's are AAPL MSFT AMZN NVDA"),
        "{stderr}"
    );
    let stale = world.dir.path().join("md-stale");
    std::fs::copy(&md, &stale).unwrap();
    let child = Process::new(&bin)
        .arg(world.path("strategy-1"))
        .arg(&stale)
        .args(["NVDA", "sim", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It is live with the engine (its channel is real) and waits for market data that moves.
    wait_until("the quoter attached", || {
        strategy_pid(&world.path("strategy-1")) == u64::from(child.id())
    });
    std::thread::sleep(Duration::from_millis(1_500));
    // SAFETY: a signal to our own child.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM)
    };
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["placed"].as_u64(), v["stopped"].as_str()),
        (Some(0), Some("done")),
        "{v}"
    );

    // A quoter killed mid-run leaves the engine's answers (its cancels on the loss) in the
    // channel: the next one on it counts only its own orders.
    let before = world.venue_counts();
    let mut doomed = Process::new(&bin)
        .arg(world.path("strategy-1"))
        .arg(&md)
        .args(["NVDA", "sim", "100000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the doomed quoter's orders at the venue", || {
        world.venue_counts()[0] >= before[0] + 6
    });
    let lost = world.lost(1);
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    wait_until("the engine declares the strategy lost", || {
        world.lost(1) > lost
    });
    wait_until("the engine cancels a lost strategy's orders", || {
        world.venue_counts()[4] == 0
    });

    // C, on strategy 1.
    let before = world.venue_counts();
    let out = Process::new(&bin)
        .arg(world.path("strategy-1"))
        .arg(&md)
        .args(["NVDA", "sim", &QUOTES.to_string()])
        .output()
        .unwrap();
    let c = summary("quoter.c", &out, QUOTES);
    let after = world.venue_counts();
    agrees("quoter.c", &c, before, after);

    // Python, on strategy 2; meanwhile a second writer on its channel is refused by name.
    let before = after;
    let mut child = Process::new(&py)
        .arg(repo("examples/python/keel_strategy.py"))
        .arg(world.path("strategy-2"))
        .arg("--market-data")
        .arg(&md)
        .args(["--symbol", "MSFT", "--venue", "sim", "--quotes"])
        .arg(QUOTES.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = u64::from(child.id());
    wait_until("the Python strategy attached", || {
        strategy_pid(&world.path("strategy-2")) == pid || child.try_wait().unwrap().is_some()
    });
    let second = Process::new(&bin)
        .arg(world.path("strategy-2"))
        .arg(&md)
        .args(["MSFT", "sim", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    if child.try_wait().unwrap().is_none() {
        assert_eq!(second.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("writes this channel already"), "{stderr}");
    }
    let out = child.wait_with_output().unwrap();
    let p = summary("keel_strategy.py", &out, QUOTES);
    agrees("keel_strategy.py", &p, before, world.venue_counts());

    // The flow stops: the engine's books settle on the venue's, and both readers see them.
    world.control("flow 0");
    let venue: Vec<Top> = {
        let mut last = Vec::new();
        wait_until("the venue's books still", || {
            let now: Vec<Top> = SYMBOLS.iter().map(|s| venue_top(&world, s)).collect();
            let still = now == last;
            last = now;
            still
        });
        last
    };
    assert!(
        venue
            .iter()
            .all(|(seq, bids, asks)| *seq > 0 && bids[0].1 > 0 && asks[0].1 > 0),
        "the flow built books: {venue:?}"
    );
    wait_until("C reads the venue's top of book", || {
        c_top(&probe, &md, SYMBOLS.len()) == venue
    });
    wait_until("Python reads the venue's top of book", || {
        python_top(&py, &md) == venue
    });

    let mut world = world;
    let report = peers::stop_keel_run(
        world.engine.take().unwrap(),
        &world.dir.path().join("run.log"),
    );
    assert!(report.contains("open orders: 0"), "{report}");
    assert!(
        !MdReader::open(&md).unwrap().synced(),
        "a stopped engine's market data says so"
    );
}

/// The strategy process id in a channel's header (offset 136).
fn strategy_pid(path: &Path) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut word = [0u8; 8];
    let f = std::fs::File::open(path).unwrap();
    f.read_exact_at(&mut word, keel::ipc::offset::STRATEGY_PID as u64)
        .unwrap();
    u64::from_le_bytes(word)
}
