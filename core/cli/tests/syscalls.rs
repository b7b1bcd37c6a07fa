//! System calls of `keel run`'s loop thread, counted from outside with ptrace (every entry
//! into the kernel stops the thread once; nothing in keel is instrumented). A busy-polling
//! io_uring loop reads completions from the shared ring and enters the kernel only to submit
//! or when the ring says completions wait for it: an idle loop makes no system call, and a
//! busy one makes a bounded number per message.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use common::peers;
use keel::ipc::{Channel, EngineState};
use keel::order::{ClientOrderId, Command, EventKind, NewOrder, VenueId};

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The thread of process `pid` named `name` (its `comm`).
fn thread_named(pid: u32, name: &str) -> i32 {
    let mut found = None;
    wait_until(&format!("thread {name}"), || {
        found = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .find(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
            .and_then(|t| t.file_name().to_str()?.parse().ok());
        found.is_some()
    });
    found.unwrap()
}

/// System calls made, and how many of each (by number: x86-64's table).
type Calls = (u64, std::collections::BTreeMap<i64, u64>);

/// Stops thread `tid` (of a child process) at every system call it makes while `during` runs
/// here, and returns how many it made; the thread is released after. The tracing is done by a
/// thread of its own (a ptrace tracer is one thread), which is ready before `during` starts.
fn syscalls_during(tid: i32, during: impl FnOnce()) -> Calls {
    use std::sync::atomic::{AtomicBool, Ordering};
    let counting = std::sync::Arc::new(AtomicBool::new(true));
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let tracer = {
        let counting = std::sync::Arc::clone(&counting);
        std::thread::spawn(move || trace(tid, &counting, &ready_tx))
    };
    ready.recv().expect("the tracer attached");
    during();
    counting.store(false, Ordering::Release);
    tracer.join().expect("the tracer")
}

fn trace(
    tid: i32,
    counting: &std::sync::atomic::AtomicBool,
    ready: &std::sync::mpsc::Sender<()>,
) -> Calls {
    let mut calls = std::collections::BTreeMap::new();
    // SAFETY: ptrace and waitpid on a thread of our own child process, with valid arguments;
    // the thread is detached before returning, whatever state it is in.
    #[allow(unsafe_code)]
    unsafe {
        let ok = libc::ptrace(
            libc::PTRACE_SEIZE,
            tid,
            0,
            libc::PTRACE_O_TRACESYSGOOD as libc::c_long,
        );
        assert_eq!(ok, 0, "ptrace seize: {}", std::io::Error::last_os_error());
        let mut status = 0;
        libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
        assert_eq!(libc::waitpid(tid, &mut status, libc::__WALL), tid);
        libc::ptrace(libc::PTRACE_SYSCALL, tid, 0, 0);
        ready.send(()).expect("the test waits");
        let mut stops = 0u64;
        while counting.load(std::sync::atomic::Ordering::Acquire) {
            let r = libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG);
            if r != tid {
                std::thread::sleep(Duration::from_micros(100));
                continue;
            }
            let signal = libc::WSTOPSIG(status);
            let deliver = if libc::WIFSTOPPED(status) && signal == (libc::SIGTRAP | 0x80) {
                stops += 1;
                if stops % 2 == 1 {
                    // The call's number (orig_rax: word 15 of the saved registers on x86-64).
                    let nr = libc::ptrace(libc::PTRACE_PEEKUSER, tid, 15 * 8, 0);
                    *calls.entry(nr).or_insert(0) += 1;
                }
                0
            } else if libc::WIFSTOPPED(status) && signal != libc::SIGTRAP {
                signal // a signal for the thread: pass it on
            } else {
                0
            };
            libc::ptrace(libc::PTRACE_SYSCALL, tid, 0, deliver as libc::c_long);
        }
        libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
        loop {
            assert_eq!(libc::waitpid(tid, &mut status, libc::__WALL), tid);
            if libc::WIFSTOPPED(status) {
                if libc::WSTOPSIG(status) == (libc::SIGTRAP | 0x80) {
                    stops += 1;
                }
                break;
            }
        }
        libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0);
        // An entry and an exit stop per call.
        (stops.div_ceil(2), calls)
    }
}

fn order(seq: u64) -> NewOrder {
    common::resting_buy(1, seq)
}

/// Waits for `id`'s event of `kind` on the channel (beating meanwhile).
fn wait_event(channel: &Channel, id: ClientOrderId, kind: EventKind) {
    wait_until("the order's event", || {
        channel.beat_strategy();
        while let Some(e) = channel.pop_event() {
            if let Ok(keel::ipc::IpcEvent::Event(e)) = e {
                assert_eq!(e.id, id, "{e:?}");
                if e.kind == kind {
                    return true;
                }
            }
        }
        false
    });
}

// Goal: `keel run`'s loop (inline, busy-spinning, io_uring), SYNCED with a venue and serving a
// strategy over shared memory, makes no system call while nothing happens but the session's
// heartbeats, and at most a handful per message while orders flow. Method: ptrace counts the loop thread's system calls
// over a second of idleness, then over 200 orders placed and canceled one at a time.
#[test]
fn an_idle_loop_enters_the_kernel_only_for_work() {
    let (idle, busy) = loop_syscalls("io_uring");
    let ((idle, idle_by), (busy, busy_by)) = (idle, busy);
    // Idle is the session's heartbeats only, one each way a second: ours is submitted and
    // completes, the venue's completes. Nothing else enters the kernel (it was one entry per
    // pass, thousands a second, before the loop read completions without entering).
    assert!(
        idle <= 6,
        "{idle} system calls of an idle loop in one second: {idle_by:?}"
    );
    // Each order: two messages out (new, cancel), each one entry to submit it and at most one
    // for its completion, and two in (accepted, canceled), at most one entry each.
    assert!(
        busy <= 6 * ORDERS + 20,
        "{busy} system calls for {ORDERS} orders placed and canceled: {busy_by:?}"
    );
}

// Goal: what the epoll transport costs an idle busy-polling loop, shown rather than hidden:
// readiness has no shared ring to read, so every pass asks the kernel (one zero-timeout
// epoll_wait a pass, and nothing else but the heartbeats' reads and writes). Method: as above,
// on epoll; the counts are printed for docs/benchmarks.md (under ptrace every call stops the
// thread, so the count is far below an untraced loop's).
#[test]
fn an_idle_epoll_loop_asks_the_kernel_every_pass() {
    let ((idle, idle_by), (busy, busy_by)) = loop_syscalls("epoll");
    let waits = |by: &std::collections::BTreeMap<i64, u64>| {
        by.get(&libc::SYS_epoll_wait).copied().unwrap_or(0)
            + by.get(&libc::SYS_epoll_pwait).copied().unwrap_or(0)
    };
    assert!(
        idle > 100,
        "{idle} system calls of an idle epoll loop in one second: {idle_by:?}"
    );
    assert!(
        idle - waits(&idle_by) <= 6,
        "an idle epoll loop made calls other than epoll_wait and the heartbeats': {idle_by:?}"
    );
    assert!(busy > 0, "{busy_by:?}");
}

const ORDERS: u64 = 200;

/// Runs `keel run` (inline, busy-spinning, on `transport`) SYNCED with a venue and serving a
/// strategy over shared memory, and counts its loop thread's system calls over a second of
/// idleness, then over [`ORDERS`] orders placed and canceled one at a time.
fn loop_syscalls(transport: &str) -> (Calls, Calls) {
    let venue = peers::venue(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("keel.toml");
    std::fs::write(
        &config,
        format!(
            "symbols = [\"AAPL\", \"MSFT\"]\n\
             [dispatcher]\nstrategies = 2\n\
             [engine]\nidle = \"spin\"\ntransport = \"{transport}\"\n\
             [journal]\ndir = \"{dir}/journal\"\n\
             [ipc]\ndir = \"{dir}/ipc\"\nstrategy_timeout_ns = \"10s\"\n\
             [[venue]]\nname = \"sim\"\naddress = \"{entry}\"\nusername = \"keel\"\npassword = \"keel\"\n",
            dir = dir.path().display(),
            entry = venue.entry,
        ),
    )
    .unwrap();
    let log = dir.path().join("run.log");
    let engine = peers::keel_run(&config, &log);
    let path = dir.path().join("ipc/strategy-1");
    let mut channel = None;
    wait_until("the engine running and SYNCED", || {
        channel = Channel::open(&path).ok().filter(|c| {
            c.beat_strategy();
            c.engine_state() == EngineState::Running && c.venue_synced(VenueId(0))
        });
        channel.is_some()
    });
    let channel = channel.unwrap();
    let tid = thread_named(engine.0.id(), "keel-engine");

    // Warm: one order through, so every buffer and operation is in place.
    channel.claim_strategy().unwrap();
    let mut seq = 0;
    let round_trip = |seq: &mut u64| {
        *seq += 1;
        let o = order(*seq);
        assert!(channel.push_command(&Command::New(o)));
        wait_event(&channel, o.id, EventKind::Accepted);
        assert!(channel.push_command(&Command::Cancel { id: o.id }));
        wait_event(&channel, o.id, EventKind::Canceled);
    };
    round_trip(&mut seq);

    let idle = syscalls_during(tid, || {
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            channel.beat_strategy();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let busy = syscalls_during(tid, || {
        for _ in 0..ORDERS {
            round_trip(&mut seq);
        }
    });
    let report = peers::stop_keel_run(engine, &log);
    assert!(report.contains("open orders: 0"), "{report}");
    eprintln!(
        "{transport} loop thread: {} system calls idle for 1 s {:?}, {} for {ORDERS} orders \
         {:?} (by x86-64 number)",
        idle.0, idle.1, busy.0, busy.1
    );
    (idle, busy)
}
