//! Eyes on the chain, from outside the engine: `keel run` with its counters file and side
//! thread, read by `keel stat`, the Python reader, a real Prometheus server (Debian's
//! `prometheus`) scraping `/metrics`, and headless Chromium (Debian's `chromium`) loading the
//! live page. scripts/test installs both and sets `KEEL_REQUIRE_OBSERVABILITY=1`; without it a
//! missing program skips its part, saying so.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use keel::ipc::{Channel, IpcEvent};
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
    VenueId,
};

mod common;

use common::observe::{
    get, keel, monitor_addr, program, prometheus, prometheus_with, synced_channel, wait_until,
    world, world_with, Page, World,
};
use common::peers::{keel_run, stop_keel_run, Proc, KEEL};

fn order(seq: u64) -> Command {
    Command::New(NewOrder {
        id: ClientOrderId::new(StrategyId(0), seq).unwrap(),
        venue: VenueId(0),
        symbol: SymbolId(1),
        side: Side::Buy,
        price: Price::from_units(50, 0),
        qty: 1,
        tif: TimeInForce::Day,
        reduce_only: false,
    })
}

/// Reads events until every id in `ids` saw `want`.
fn await_events(channel: &Channel, ids: &[u64], want: impl Fn(&EventKind) -> bool) {
    let mut seen: Vec<(u64, EventKind)> = Vec::new();
    wait_until("the engine's answers", Duration::from_secs(20), || {
        channel.beat_strategy();
        while let Some(e) = channel.pop_event() {
            if let Ok(IpcEvent::Event(e)) = e {
                seen.push((e.id.sequence(), e.kind));
            }
        }
        ids.iter()
            .all(|id| seen.iter().any(|(s, k)| s == id && want(k)))
    });
}

fn json_value(json: &serde_json::Value, name: &str, labels: &str) -> Option<u64> {
    json["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name && m["labels"] == labels)?["value"]
        .as_u64()
}

// Goal (issue 13): an operator with only `keel stat`, Prometheus or a browser sees the chain
// live. Method: `keel run` against `keel venue` on loopback; a strategy over shared memory
// places 10 orders and cancels 4. `keel stat --once`/`--json` and the Python reader show what
// happened while it runs; a real Prometheus server scrapes `/metrics` and its query API
// returns keel's series with the same values; headless Chromium loads the live page and finds
// the breaker shown open while an operator holds it open, closed after; `/health` says ready
// while the venue is SYNCED; after the stop, `keel stat --json` matches the stop report.
#[test]
fn stat_prometheus_and_the_live_page_see_the_chain() {
    let World {
        venue: v,
        dir,
        config,
        ipc,
    } = world();
    let log = dir.path().join("run.log");
    let engine = keel_run(&config, &log);
    let addr = monitor_addr(&log.with_extension("err"));
    let channel = synced_channel(&ipc);
    let ids: Vec<u64> = (1..=10).collect();
    for &seq in &ids {
        assert!(channel.push_command(&order(seq)));
    }
    await_events(&channel, &ids, |k| *k == EventKind::Accepted);
    for seq in 1..=4u64 {
        let id = ClientOrderId::new(StrategyId(0), seq).unwrap();
        assert!(channel.push_command(&Command::Cancel { id }));
    }
    await_events(&channel, &[1, 2, 3, 4], |k| *k == EventKind::Canceled);
    let config_arg = config.to_str().unwrap();

    // keel stat, live.
    let mut json = serde_json::Value::Null;
    wait_until(
        "keel stat to see the cancels",
        Duration::from_secs(10),
        || {
            let (code, text) = keel(&["stat", "--config", config_arg, "--json"]);
            assert_eq!(code, 0, "{text}");
            json = serde_json::from_str(&text).unwrap();
            json_value(&json, "keel_sent_total", "kind=\"cancel\"") == Some(4)
        },
    );
    assert_eq!(json["state"], "running");
    assert_eq!(
        json_value(&json, "keel_sent_total", "kind=\"new\""),
        Some(10)
    );
    assert_eq!(json_value(&json, "keel_open_orders", ""), Some(6));
    assert_eq!(
        json_value(&json, "keel_link_state", "venue=\"sim\""),
        Some(4)
    );
    let ack = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "keel_new_order_ack_seconds")
        .unwrap();
    assert_eq!(ack["count"], 10, "one ack per order: {ack}");
    // Decision and end-to-end times measured by `keel run`'s own loop, read from outside: ten
    // decisions weigh more than 0 ns (each was rounded to its pass's one instant), and every
    // order's end-to-end time covers at least its venue round trip.
    let histogram = |name: &str, labels: &str| {
        json["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name && m["labels"] == labels)
            .unwrap_or_else(|| panic!("{name}{{{labels}}} in {json}"))
            .clone()
    };
    let decision = histogram("keel_decision_seconds", "class=\"new\"");
    assert_eq!(decision["count"], 10, "{decision}");
    assert!(decision["sum_ns"].as_u64() > Some(0), "{decision}");
    let e2e = histogram("keel_order_e2e_seconds", "venue=\"sim\"");
    assert_eq!(e2e["count"], 10, "{e2e}");
    assert!(
        e2e["sum_ns"].as_u64() >= ack["sum_ns"].as_u64(),
        "{e2e} vs {ack}"
    );
    let (code, text) = keel(&["stat", "--config", config_arg, "--once"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("sent new 10 cancel 4"), "{text}");
    assert!(text.contains("SYNCED"), "{text}");
    assert!(
        text.contains("new-order ack p99") && text.contains("(budget 1000000.0 µs)"),
        "each p99 against its [budget]: {text}"
    );

    // The Python reader (stdlib only), from docs/observability.md.
    let reader =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python/keel_counters.py");
    let out = Process::new("python3")
        .arg(&reader)
        .arg(ipc.join("counters"))
        .args(["--name", "keel_sent_total"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json_value(&py, "keel_sent_total", "kind=\"new\""), Some(10));
    assert_eq!(
        json_value(&py, "keel_sent_total", "kind=\"cancel\""),
        Some(4)
    );

    // /health and /metrics.
    let (status, body) = get(&addr, "/health");
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("keel_sent_total{kind=\"new\"} 10"),
        "{metrics}"
    );
    assert!(metrics.contains("keel_new_order_ack_seconds_count{venue=\"sim\"} 10"));
    assert!(metrics.contains("keel_order_e2e_seconds_count{venue=\"sim\"} 10"));
    assert_eq!(get(&addr, "/nowhere").0, 404);
    assert_eq!(get(&addr, "/metrics?x=1").0, 200);

    // A real Prometheus scrapes it.
    if let Some((_server, web)) = prometheus(dir.path(), &addr) {
        let mut answer = String::new();
        wait_until(
            "Prometheus to have keel's series",
            Duration::from_secs(60),
            || {
                let ready = std::net::TcpStream::connect(&web).is_ok();
                if ready {
                    let q = "/api/v1/query?query=keel_sent_total%7Bkind%3D%22cancel%22%7D";
                    answer = get(&web, q).1;
                }
                answer.contains("\"value\":[") && answer.contains("\"4\"]")
            },
        );
        assert!(answer.contains("\"job\":\"keel\""), "{answer}");
        let q = "/api/v1/query?query=keel_open_orders";
        assert!(get(&web, q).1.contains("\"6\"]"), "open orders");
        let q = "/api/v1/query?query=histogram_quantile(0.99%2Ckeel_new_order_ack_seconds_bucket)";
        let p99 = get(&web, q).1;
        assert!(p99.contains("\"venue\":\"sim\""), "{p99}");
    }

    // Headless Chromium keeps the live page open (driven over the DevTools protocol): the
    // breaker shown open while an operator holds it open, closed after — the page updates
    // itself from the server-sent events, it is never reloaded.
    if let Some(mut page) = Page::open(&format!("http://{addr}/")) {
        let mut ask = |line: &str| page.ask(line);
        let breaker = "#venue-sim>.breaker";
        assert_eq!(ask(&format!("wait {breaker} closed 20")), "ok");
        assert_eq!(ask("wait #venue-sim>.link SYNCED 5"), "ok");
        let (code, answer) = keel(&["ctl", "--config", config_arg, "breaker", "sim", "open"]);
        assert_eq!(code, 0, "{answer}");
        assert_eq!(ask(&format!("wait {breaker} OPEN 10")), "ok", "shown open");
        let shot = dir.path().join("dashboard.png");
        assert_eq!(ask(&format!("shot {}", shot.display())), "ok");
        assert!(
            std::fs::metadata(&shot).unwrap().len() > 10_000,
            "a screenshot"
        );
        if let Ok(to) = std::env::var("KEEL_DASHBOARD_PNG") {
            std::fs::copy(&shot, to).unwrap();
        }
        let (code, answer) = keel(&["ctl", "--config", config_arg, "breaker", "sim", "close"]);
        assert_eq!(code, 0, "{answer}");
        assert_eq!(
            ask(&format!("wait {breaker} closed 10")),
            "ok",
            "shown closed again"
        );
    }
    // After the stop, the file holds the last values: they match the report.
    let report = stop_keel_run(engine, &log);
    let (code, text) = keel(&["stat", "--config", config_arg, "--json"]);
    assert_eq!(code, 0, "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["state"], "stopped");
    let commands = json_value(&json, "keel_commands_total", "").unwrap();
    let new = json_value(&json, "keel_sent_total", "kind=\"new\"").unwrap();
    let cancel = json_value(&json, "keel_sent_total", "kind=\"cancel\"").unwrap();
    assert!(
        report.contains(&format!(
            "commands {commands} | sent new {new} cancel {cancel} "
        )),
        "{report}\n{text}"
    );
    let open = json_value(&json, "keel_open_orders", "").unwrap();
    assert!(report.contains(&format!("open orders: {open}")), "{report}");
    drop(v);
}

fn docs(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(file)
}

/// `promtool ARGS…`: whether it succeeded, and what it said.
fn promtool(promtool: &Path, args: &[&Path]) -> (bool, String) {
    let out = Process::new(promtool).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

// Goal (issues 13, 23): the shipped alerting rules are valid Prometheus rules, every one of
// them has a promtool unit test in docs/keel-alerts.test.yml (a rule added without one fails
// here), and those tests pass: each rule fires where it should, not before, and not on a
// healthy reading.
#[test]
fn every_shipped_alert_rule_has_a_passing_promtool_test() {
    let Some(tool) = program("promtool") else {
        return;
    };
    let (rules, tests) = (docs("keel-alerts.yml"), docs("keel-alerts.test.yml"));
    let (ok, text) = promtool(&tool, &[Path::new("check"), Path::new("rules"), &rules]);
    assert!(ok, "{text}");
    let names: Vec<String> = std::fs::read_to_string(&rules)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|n| n.trim().to_string())
        .collect();
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", names.len())),
        "{text}"
    );
    let test_text = std::fs::read_to_string(&tests).unwrap();
    for name in &names {
        assert!(
            test_text.contains(&format!("alertname: {name}\n")),
            "rule {name} has no test in docs/keel-alerts.test.yml"
        );
    }
    let (ok, text) = promtool(&tool, &[Path::new("test"), Path::new("rules"), &tests]);
    assert!(ok && text.contains("SUCCESS"), "{text}");
}

/// One thread of another process, stopped for real while the others run on: seized and
/// interrupted with ptrace, as a debugger's non-stop mode stops one thread. It is what a loop
/// stuck in a system call or spinning on a lock looks like from outside: it simply stops
/// passing. Resumed (detached) on drop; ptrace ties it to the thread that froze it.
struct Frozen(libc::pid_t);

impl Frozen {
    fn thread(pid: u32, name: &str) -> Self {
        let task = format!("/proc/{pid}/task");
        let tid: libc::pid_t = std::fs::read_dir(&task)
            .unwrap()
            .filter_map(Result::ok)
            .find(|e| {
                std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
            .and_then(|e| e.file_name().to_str()?.parse().ok())
            .unwrap_or_else(|| panic!("no thread {name} in {task}"));
        let null = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: ptrace requests on a thread of our own child that pass no memory (null
        // address and data); waitpid writes only `status`, which we own.
        #[allow(unsafe_code)]
        unsafe {
            let seized = libc::ptrace(libc::PTRACE_SEIZE, tid, null, null);
            assert_eq!(
                seized,
                0,
                "seize {tid}: {}",
                std::io::Error::last_os_error()
            );
            assert_eq!(libc::ptrace(libc::PTRACE_INTERRUPT, tid, null, null), 0);
            let mut status = 0;
            assert_eq!(libc::waitpid(tid, &mut status, libc::__WALL), tid);
        }
        Self(tid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let null = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: detaching the thread this thread seized; no memory passed.
        #[allow(unsafe_code)]
        unsafe {
            libc::ptrace(libc::PTRACE_DETACH, self.0, null, null);
        }
    }
}

/// The alerts a Prometheus server's rules have firing now, by name and labels.
fn firing(web: &str) -> Vec<serde_json::Value> {
    let (_, body) = get(web, "/api/v1/alerts");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json["data"]["alerts"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|a| a["state"] == "firing")
                .map(|a| a["labels"].clone())
                .collect()
        })
        .unwrap_or_default()
}

fn await_firing(web: &str, alert: &str, label: (&str, &str)) {
    wait_until(alert, Duration::from_secs(90), || {
        firing(web)
            .iter()
            .any(|l| l["alertname"] == alert && l[label.0] == label.1)
    });
}

// Goal (issue 23): the shipped rules, evaluated by a real Prometheus against a running
// `keel run`, page for a hung loop and for a READ-ONLY link. Method: a split engine (its own
// dispatcher and executor threads) against `keel venue`; Prometheus scrapes it and evaluates
// docs/keel-alerts.yml every second. The dispatcher thread is stopped for real (ptrace, the
// executor and the side thread run on): the side thread sees its publications stand still
// past `loop_stall_ns` (its default, 2 s), `/health` answers 503 naming it, `keel_up` is 0, and Prometheus fires
// KeelLoopHung; resumed, it is live and ready again. Then the venue lies (a fill for an
// order never sent): the link goes READ-ONLY and KeelLinkReadOnly and KeelContradiction fire,
// as does keel's own `read_only` alert.
#[test]
fn prometheus_fires_the_shipped_rules_on_a_hung_loop_and_a_read_only_link() {
    if program("prometheus").is_none() {
        return;
    }
    let w = world();
    let text = std::fs::read_to_string(&w.config)
        .unwrap()
        .replace("[engine]", "[engine]\ntopology = \"split\"");
    std::fs::write(&w.config, text).unwrap();
    let log = w.dir.path().join("run.log");
    let engine = keel_run(&w.config, &log);
    let addr = monitor_addr(&log.with_extension("err"));
    synced_channel(&w.ipc);
    let rules = docs("keel-alerts.yml");
    let (_server, web) =
        prometheus_with(w.dir.path(), &addr, Some(&rules)).expect("prometheus is installed");
    wait_until(
        "Prometheus to scrape keel_up 1",
        Duration::from_secs(60),
        || {
            std::net::TcpStream::connect(&web).is_ok()
                && get(&web, "/api/v1/query?query=keel_up")
                    .1
                    .contains("\"1\"]")
        },
    );
    assert_eq!(get(&addr, "/health").0, 200);
    assert!(!firing(&web)
        .iter()
        .any(|l| l["alertname"] == "KeelLoopHung"));

    // The dispatcher stops passing.
    let frozen = Frozen::thread(engine.0.id(), "keel-dispatcher");
    let mut health = String::new();
    wait_until(
        "/health to name the stalled loop",
        Duration::from_secs(30),
        || {
            let (status, body) = get(&addr, "/health");
            health = body;
            status == 503 && health.starts_with("loop stalled: dispatcher")
        },
    );
    assert!(
        !health.contains("executor"),
        "the executor runs on: {health}"
    );
    let (_, metrics) = get(&addr, "/metrics");
    assert!(metrics.contains("\nkeel_up 0\n"), "{metrics}");
    assert!(metrics.contains("keel_loop_stalled{loop=\"dispatcher\"} 1"));
    assert!(metrics.contains("keel_loop_stalled{loop=\"executor\"} 0"));
    assert!(metrics.contains("keel_alert_firing{alert=\"loop_stalled\",loop=\"dispatcher\"} 1"));
    await_firing(&web, "KeelLoopHung", ("loop", "dispatcher"));
    drop(frozen);
    wait_until("the dispatcher live again", Duration::from_secs(30), || {
        get(&addr, "/health").0 == 200
    });
    assert!(get(&addr, "/metrics").1.contains("\nkeel_up 1\n"));

    // The venue contradicts keel.
    venue_control(&w.venue.control, "lie unknown-fill");
    await_firing(&web, "KeelLinkReadOnly", ("venue", "sim"));
    await_firing(&web, "KeelContradiction", ("severity", "page"));
    let (status, body) = get(&addr, "/health");
    assert_eq!((status, body.as_str()), (503, "not SYNCED: sim\n"));
    let metrics = get(&addr, "/metrics").1;
    assert!(
        metrics.contains("keel_alert_firing{alert=\"read_only\",venue=\"sim\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("keel_alert_firing{alert=\"contradiction\"} 1"));
    let report = stop_keel_run(engine, &log);
    assert!(report.contains("keel run"), "{report}");
}

// Goal: the side thread refuses what is not a request, and a slow or hostile client cannot
// hold it: an unfinished request is cut after its wait, an oversized head is refused 431,
// other methods 405; the engine goes on serving.
#[test]
fn the_monitor_refuses_garbage_and_slow_clients() {
    let World {
        venue: _v,
        dir,
        config,
        ipc,
    } = world();
    let log = dir.path().join("run.log");
    let engine = keel_run(&config, &log);
    let addr = monitor_addr(&log.with_extension("err"));
    synced_channel(&ipc);
    let send = |bytes: &[u8]| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    };
    assert!(send(b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    assert!(send(huge.as_bytes()).starts_with("HTTP/1.1 431"));
    assert!(send(b"\x00\xff\xfe garbage\r\n\r\n").starts_with("HTTP/1.1 405"));
    // A client that connects and says nothing holds nobody up (closed unanswered after its
    // wait: tests/monitor_http.rs); the three above were refused and counted.
    // (/health answers at once; it reads ready once the counters file shows the link SYNCED,
    // which on a busy machine may trail the engine's own word by a reading.)
    let idle = std::net::TcpStream::connect(&addr).unwrap();
    wait_until(
        "/health ready beside a silent client",
        Duration::from_secs(20),
        || get(&addr, "/health").0 == 200,
    );
    drop(idle);
    let (_, metrics) = get(&addr, "/metrics");
    assert!(
        metrics.contains("keel_monitor_bad_requests_total 3"),
        "{metrics}"
    );
    stop_keel_run(engine, &log);
}

// Goal (issue 13): headless Chromium keeps the live page open during the demo's incident
// scenario (`keel demo --scenario incident --dashboard`): it finds the venue's breaker shown
// opened (the page's count of openings) and closed after the probes succeed — the engine's
// own breaker, tripped by real orders, not an operator's drill.
#[test]
fn the_live_page_shows_the_incident_breaker_open_then_closed() {
    use std::io::{BufRead, BufReader};
    if program("chromium").is_none() || common::peers::python().is_none() {
        return;
    }
    let mut demo = Process::new(KEEL)
        .args([
            "demo",
            "--scenario",
            "incident",
            "--quick",
            "--idle",
            "backoff",
            "--dashboard",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(demo.stderr.take().unwrap());
    let mut url = String::new();
    while url.is_empty() {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "the demo ended first"
        );
        if let Some(at) = line.find("live page at ") {
            url = line[at + 13..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
        }
    }
    // Keep reading the demo's progress so it never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
    });
    // Waits on facts, never on a moment. The incident opens the breaker well under a second
    // after the demo starts (--quick), often before Chromium has loaded the page, and it may
    // half-open and close again between two readings: what the page can always show is its
    // count of openings, which only grows. Then closed, recorded by the page's observer from
    // the moment the opening was seen (so not the closed of before the incident).
    let breaker = "#venue-demo>.breaker";
    let mut page = Page::open(&url).unwrap();
    let opened = "Number((document.querySelector('#venue-demo>.opened') || {}).textContent) >= 1";
    let answer = page.ask(&format!("eval 30 {opened}"));
    assert!(answer.starts_with("ok"), "shown open: {answer}");
    assert_eq!(page.ask(&format!("watch {breaker}")), "ok");
    assert_eq!(
        page.ask(&format!("seen {breaker} closed 30")),
        "ok",
        "shown closed after"
    );
    drop(page);
    let out = demo.wait_with_output().unwrap();
    drain.join().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("invariants:"), "{report}");
}

/// A drill world: `keel venue`, `keel run` with two strategy slots (slot 1 is the drill's) and
/// a breaker that opens and probes quickly; `breaker_extra` adds keys to `[dispatcher.breaker]`.
fn drill_world(breaker_extra: &str) -> (World, Proc, PathBuf) {
    let w = world();
    let text = std::fs::read_to_string(&w.config)
        .unwrap()
        .replace("strategies = 1", "strategies = 2")
        .replace(
            "[engine]",
            &format!(
                "[dispatcher.breaker]\ncalls_min = 10\nopen_duration_ns = \"300ms\"\n\
                 half_open_wait_max_ns = \"2s\"\n{breaker_extra}\n[engine]"
            ),
        );
    std::fs::write(&w.config, text).unwrap();
    let log = w.dir.path().join("run.log");
    let engine = keel_run(&w.config, &log);
    synced_channel(&w.ipc);
    (w, engine, log)
}

fn drill(w: &World, fault: &str, timeout_s: &str) -> (i32, String) {
    keel(&[
        "drill",
        fault,
        "--config",
        w.config.to_str().unwrap(),
        "--venue-control",
        &w.venue.control,
        "--strategy",
        "1",
        "--timeout-s",
        timeout_s,
    ])
}

// Goal (issue 13): a drill on a running engine returns a verdict. Method: against a healthy
// engine, a link cut (the venue drops the session) passes every expectation — left SYNCED,
// reconnected, SYNCED again, nothing unreconciled, no new order sent while down — and so does
// a reject burst driven by the drill's own orders (breaker open, refusals to the strategy,
// probes, closed again), a gateway restart, and a venue stall past the ack timeout (orders in
// doubt, queried, never resent, the symbol's new orders refused meanwhile, every doubt
// resolved); the timeline is printed.
#[test]
fn drills_pass_on_a_healthy_engine() {
    let (w, engine, log) = drill_world("");
    let (code, text) = drill(&w, "link-cut", "20");
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("PASS no new order sent while not SYNCED"),
        "{text}"
    );
    assert!(text.contains("link SYNCED -> DISCONNECTED"), "{text}");
    let (code, text) = drill(&w, "reject-burst", "20");
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("PASS probed with real orders (half-open)"),
        "{text}"
    );
    assert!(text.contains("breaker closed -> OPEN"), "{text}");
    let (code, text) = drill(&w, "gateway-restart", "20");
    assert_eq!(code, 0, "gateway-restart: {text}");
    assert!(
        text.contains("PASS SYNCED again after reconciling"),
        "{text}"
    );
    // Last: its ack timeouts count against the breaker.
    let (code, text) = drill(&w, "venue-stall", "20");
    assert_eq!(code, 0, "venue-stall: {text}");
    for expected in [
        "PASS orders past the ack timeout went in doubt",
        "PASS queried, never resent",
        "PASS new orders on the symbol refused while in doubt",
        "PASS every doubt resolved once the venue answered",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    stop_keel_run(engine, &log);
}

// Goal (issue 13): a drill fails, naming the expectation, against an engine whose breaker was
// sabotaged (it needs more calls than the burst makes before it may open).
#[test]
fn a_drill_fails_on_a_sabotaged_breaker_naming_what_failed() {
    let (w, engine, log) = drill_world("");
    stop_keel_run(engine, &log);
    let text = std::fs::read_to_string(&w.config)
        .unwrap()
        .replace("calls_min = 10", "calls_min = 1000000");
    std::fs::write(&w.config, text).unwrap();
    let log = w.dir.path().join("run2.log");
    let engine = keel_run(&w.config, &log);
    // The new engine's file (the old one's, until replaced, says stopped), its link SYNCED.
    wait_until("SYNCED again", Duration::from_secs(20), || {
        let (_, text) = keel(&["stat", "--config", w.config.to_str().unwrap(), "--json"]);
        serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|json| {
            json["state"] == "running"
                && json_value(&json, "keel_link_state", "venue=\"sim\"") == Some(4)
        })
    });
    let (code, text) = drill(&w, "reject-burst", "3");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL the breaker opened"), "{text}");
    assert!(
        text.contains("PASS the venue's rejects reached the strategy"),
        "{text}"
    );
    stop_keel_run(engine, &log);
}

/// A drill on keel's own levers: the venue's control port is not given; `extra` flags after.
fn lever_drill(w: &World, fault: &str, timeout_s: &str, extra: &[&str]) -> (i32, String) {
    let config = w.config.to_str().unwrap();
    let mut args = vec!["drill", fault, "--config", config, "--strategy", "1"];
    args.extend(["--timeout-s", timeout_s]);
    args.extend(extra);
    keel(&args)
}

/// Waits until `keel stat` shows the engine running with its venue SYNCED (a fact once the
/// venue has nothing left to refuse it).
fn stat_synced(w: &World) {
    wait_until("SYNCED again", Duration::from_secs(30), || {
        let (_, text) = keel(&["stat", "--config", w.config.to_str().unwrap(), "--json"]);
        serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|json| {
            json["state"] == "running"
                && json_value(&json, "keel_link_state", "venue=\"sim\"") == Some(4)
        })
    });
}

// Goal (issue 38, point 6): `keel drill` refuses a strategy slot a live strategy holds — the
// same check and words as a second writer in the SDKs — instead of overwriting its pid word
// and writing into its command ring. Method: this test process holds slot 0 (live); a drill
// on slot 0 exits 2 naming this pid, and the strategy sees no event for an order it never
// sent; the drill on its own free slot still passes.
#[test]
fn a_drill_refuses_a_slot_a_live_strategy_holds() {
    let (w, engine, log) = drill_world("");
    let live = synced_channel(&w.ipc);
    live.claim_strategy().unwrap();
    let config = w.config.to_str().unwrap();
    let args = [
        "drill",
        "kill-switch",
        "--config",
        config,
        "--strategy",
        "0",
    ];
    let (code, text) = keel(&[&args[..], &["--timeout-s", "5"]].concat());
    assert_eq!(code, 2, "{text}");
    let words = format!("process {} writes this channel already", std::process::id());
    assert!(text.contains(&words), "{text}");
    std::thread::sleep(Duration::from_millis(300));
    live.beat_strategy();
    while let Some(e) = live.pop_event() {
        assert!(
            !matches!(e, Ok(keel::ipc::IpcEvent::Event(_))),
            "an event for an order the strategy never sent: {e:?}"
        );
    }
    // The slot is still this strategy's.
    live.claim_strategy().unwrap();
    let (code, text) = lever_drill(&w, "kill-switch", "20", &[]);
    assert_eq!(code, 0, "the drill's own slot: {text}");
    stop_keel_run(engine, &log);
}

// Goal (issue 23, point 7: `keel drill` needs the simulated venue's control port, so a desk
// cannot rehearse a failover on its real venue). Method: `keel run` on `keel venue`; the
// drills on keel's own levers (reconnect, breaker, kill-switch: the admin socket only) run
// WITHOUT the venue's control port and pass every expectation, judged from the counters and
// the drill's own orders; `--timeout-s` at its longest (3,600) is taken, 0 and 3,601 are
// refused, and so are prices that are not positive 4-decimal numbers and unknown symbols; a
// simulator drill without the port is refused naming the levers that need none.
#[test]
fn drills_on_keel_levers_pass_without_the_venue_control_port() {
    let (w, engine, log) = drill_world("");
    let (code, text) = lever_drill(&w, "reconnect", "20", &[]);
    assert_eq!(code, 0, "reconnect: {text}");
    for expected in [
        "lever: keel ctl reconnect sim",
        "PASS the link left SYNCED",
        "PASS SYNCED again after reconciling",
        "PASS no new order sent while not SYNCED",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    let (code, text) = lever_drill(&w, "breaker", "20", &[]);
    assert_eq!(code, 0, "breaker: {text}");
    for expected in [
        "PASS the breaker opened on command",
        "PASS new orders refused to the strategy while open",
        "PASS closed on command",
        "PASS new orders accepted again after closing",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    // The longest timeout, the lowest price, a symbol by name.
    let extra = ["--price", "0.0001", "--symbol", "MSFT"];
    let (code, text) = lever_drill(&w, "kill-switch", "3600", &extra);
    assert_eq!(code, 0, "kill-switch: {text}");
    for expected in [
        "kill switch off -> ON",
        "PASS new orders refused `kill switch`, none accepted",
        "PASS no new order left for the venue while on",
        "PASS a cancel still flows with the switch on",
        "PASS new orders accepted again once off",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    for bad in ["0", "3601"] {
        let (code, text) = lever_drill(&w, "kill-switch", bad, &[]);
        assert_eq!(code, 64, "--timeout-s {bad}: {text}");
        assert!(text.contains("1..=3600"), "{text}");
    }
    for bad in ["0", "-1", "1.00001", "922337203685477.5808"] {
        let flag = format!("--price={bad}"); // `-1` as a value, not a flag
        let (code, text) = lever_drill(&w, "kill-switch", "5", &[&flag]);
        assert_eq!(code, 64, "--price {bad}: {text}");
        assert!(text.contains(&format!("{bad}: ")), "{text}");
    }
    // The highest price keel parses: refused by keel's own price check, the drill says so.
    let (code, text) = lever_drill(&w, "kill-switch", "5", &["--price", "922337203685477.5807"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("was not accepted"), "{text}");
    let (code, text) = lever_drill(&w, "kill-switch", "5", &["--symbol", "NOPE"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("symbols: AAPL MSFT"), "{text}");
    let (code, text) = lever_drill(&w, "link-cut", "5", &[]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("--venue-control") && text.contains("reconnect, breaker, kill-switch"),
        "{text}"
    );
    stop_keel_run(engine, &log);
}

// Goal (issue 23, point 7: a lever drill's verdict can fail). Method: the test (not the drill)
// makes the venue refuse every connect: `reconnect` with its shortest timeout (1 s) fails
// naming "SYNCED again" (the link left, never came back); then the venue takes connects but
// rejects every order: `breaker` opens and closes on command but fails naming "accepted
// again". Each exits 1.
#[test]
fn a_lever_drill_fails_naming_what_did_not_recover() {
    let (w, engine, log) = drill_world("");
    venue_control(&w.venue.control, "refuse on");
    let (code, text) = lever_drill(&w, "reconnect", "1", &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("PASS the link left SYNCED"), "{text}");
    assert!(
        text.contains("FAIL SYNCED again after reconciling"),
        "{text}"
    );
    venue_control(&w.venue.control, "refuse off");
    stat_synced(&w);
    venue_control(&w.venue.control, "reject-burst 1000000");
    let (code, text) = lever_drill(&w, "breaker", "3", &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("PASS the breaker opened on command"),
        "{text}"
    );
    assert!(
        text.contains("FAIL new orders accepted again after closing"),
        "{text}"
    );
    venue_control(&w.venue.control, "reject-burst 0");
    stop_keel_run(engine, &log);
}

/// A series' value in Prometheus text (`name{labels} value`), 0 when absent.
fn series(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Venue refusals so far: new orders throttled, cancels refused on open orders.
fn refusals(addr: &str) -> u64 {
    let (_, text) = get(addr, "/metrics");
    series(&text, "keel_venue_throttle_rejects_total{venue=\"sim\"}")
        + series(&text, "keel_venue_cancel_refused_total{venue=\"sim\"}")
}

/// For `for_ms`: a new order every 2 ms (500/s, alternating sides and symbols), and a cancel
/// for each one accepted. Returns the sequence to continue from.
fn offer_load(channel: &Channel, mut seq: u64, for_ms: u64) -> u64 {
    let start = Instant::now();
    let mut next = Instant::now();
    while start.elapsed() < Duration::from_millis(for_ms) {
        channel.beat_strategy();
        if Instant::now() >= next {
            next += Duration::from_millis(2);
            seq += 1;
            let order = NewOrder {
                id: ClientOrderId::new(StrategyId(0), seq).unwrap(),
                venue: VenueId(0),
                symbol: SymbolId((seq % 2) as u16),
                side: if seq % 2 == 0 { Side::Buy } else { Side::Sell },
                price: Price::from_units(if seq % 2 == 0 { 50 } else { 60 }, 0),
                qty: 1,
                tif: TimeInForce::Day,
                reduce_only: false,
            };
            channel.push_command(&Command::New(order));
        }
        while let Some(e) = channel.pop_event() {
            if let Ok(IpcEvent::Event(e)) = e {
                if e.kind == EventKind::Accepted {
                    channel.push_command(&Command::Cancel { id: e.id });
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    seq
}

// Goal (issue 13, adaptive control): the controller measurably reduces the venue's refusals
// when its capacity drops 4×, against static limits in the same run. Method: `keel run` with
// `[control]` on; a strategy offers 500 new orders/s and cancels each one accepted (about
// 1,000 messages/s, what keel's limiter allows); the venue's rate limit is lowered to 250
// messages/s through its control port. For 3 s the controller is off (`keel ctl control off`:
// static limits), for 3 s on. Refusals (throttled new orders, refused cancels) are read from
// `/metrics` for each phase; with the controller they must be under half the static count,
// its cuts counted and logged, and `keel ctl control` says its state.
#[test]
fn the_controller_cuts_venue_refusals_when_capacity_drops() {
    let w = world_with(
        "[control]\nenabled = true\ninterval_ns = \"100ms\"\nhold_ns = \"300ms\"\n\
         increase_permille = 10\ncore_symbols = [\"AAPL\"]\nshed_below_permille = 50\n",
    );
    let log = w.dir.path().join("run.log");
    let err_log = log.with_extension("err");
    let engine = keel_run(&w.config, &log);
    let addr = monitor_addr(&err_log);
    let channel = synced_channel(&w.ipc);
    let config_arg = w.config.to_str().unwrap();
    let (code, answer) = keel(&["ctl", "--config", config_arg, "control", "off"]);
    assert_eq!(code, 0, "{answer}");
    let (code, answer) = keel(&["ctl", "--config", config_arg, "control"]);
    assert!(code == 0 && answer.contains("controller off"), "{answer}");
    let (code, answer) = keel(&["ctl", "--config", config_arg, "control", "maybe"]);
    assert!(
        code != 0 && answer.contains("expected on or off"),
        "{answer}"
    );
    let (code, answer) = keel(&["ctl", "--config", config_arg, "control", "on", "off"]);
    assert!(
        code != 0 && answer.contains("usage: control [on|off]"),
        "{answer}"
    );
    let seq = offer_load(&channel, 0, 500);
    assert_eq!(refusals(&addr), 0, "no refusal before the drop");

    venue_control(&w.venue.control, "rate-limit 25 100");
    let before = refusals(&addr);
    let seq = offer_load(&channel, seq, 3_000);
    let static_refusals = refusals(&addr) - before;

    let (code, answer) = keel(&["ctl", "--config", config_arg, "control", "on"]);
    assert_eq!(code, 0, "{answer}");
    let before = refusals(&addr);
    offer_load(&channel, seq, 3_000);
    let controlled = refusals(&addr) - before;
    let (_, text) = get(&addr, "/metrics");
    eprintln!("refusals: static {static_refusals}, controller {controlled}");
    assert!(
        static_refusals > 200,
        "the drop should refuse a lot: {static_refusals}"
    );
    assert!(
        controlled * 2 < static_refusals,
        "the controller should at least halve the refusals: static {static_refusals}, \
         controller {controlled}"
    );
    assert!(
        series(&text, "keel_controller_decreases_total") >= 1,
        "{text}"
    );
    assert!(
        series(&text, "keel_control_new_rate_permille{venue=\"sim\"}") < 1000,
        "the cap holds while the venue is slow"
    );
    assert_eq!(series(&text, "keel_controller_on"), 1);
    assert!(series(&text, "keel_control_commands_total") >= 1);
    let state = get(&addr, "/api/state").1;
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["control"]["on"], true, "{state}");
    assert!(state["venues"][0]["new_cap_permille"].as_u64().unwrap() < 1000);
    let report = stop_keel_run(engine, &log);
    let err = std::fs::read_to_string(&err_log).unwrap_or_default();
    assert!(err.contains("new-order cap lowered"), "{err}");
    assert!(report.contains("keel run"), "{report}");
}

/// One line to the venue's control port; its answer (which must be `ok`).
fn venue_control(addr: &str, command: &str) -> String {
    use std::io::BufRead;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("{command}\n").as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.starts_with("ok"), "{command}: {line}");
    line.trim_end().to_string()
}
