//! `keel preflight [--config FILE]`: reads the host and the configuration together and says,
//! item by item, what stands between this machine and the one the benchmarks assume
//! (docs/tuning.md). It changes nothing. `keel run` runs the same checks at start and prints
//! the warnings (it never refuses to start over them).
//!
//! Every check reads files under a root (`/` in production; a prepared tree in the tests), so
//! a verdict can be checked for any host.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use keel::config::EngineConfig;

#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// The engine configuration whose loop cores, transport and memory are checked (without
    /// it: the host alone, for every core).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Exit 1 when any check warns (for provisioning scripts).
    #[arg(long)]
    strict: bool,
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// As the benchmarks assume.
    Ok(String),
    /// Costs latency; what to do is said.
    Warn(String),
    /// Cannot be read here (a VM without cpufreq, say): said, not judged.
    Unknown(String),
}

/// A named check and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked ("loop cores isolated", ...).
    pub name: &'static str,
    /// What was found.
    pub verdict: Verdict,
}

/// What the checks need besides the files: limits and the clock, as this process sees them.
#[derive(Debug, Clone, Copy)]
pub struct Process {
    /// RLIMIT_MEMLOCK soft limit (bytes; `u64::MAX`: unlimited).
    pub memlock: u64,
    /// RLIMIT_NOFILE soft limit.
    pub nofile: u64,
    /// The kernel's clock discipline: synchronised, and the estimated error (µs).
    pub clock: Option<(bool, i64)>,
}

impl Process {
    /// This process's limits and the kernel clock's state (adjtimex, read only).
    pub fn here() -> Self {
        let limit = |resource| {
            let mut r = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit fills the struct it is given.
            #[allow(unsafe_code)]
            let ok = unsafe { libc::getrlimit(resource, &mut r) } == 0;
            if !ok || r.rlim_cur == libc::RLIM_INFINITY {
                u64::MAX
            } else {
                r.rlim_cur
            }
        };
        // SAFETY: adjtimex with modes 0 only reads the kernel's clock state into `t`.
        #[allow(unsafe_code)]
        let clock = unsafe {
            let mut t: libc::timex = std::mem::zeroed();
            let state = libc::adjtimex(&mut t);
            (state >= 0).then(|| {
                let synced = state != libc::TIME_ERROR && t.status & libc::STA_UNSYNC == 0;
                (synced, t.esterror)
            })
        };
        Self {
            memlock: limit(libc::RLIMIT_MEMLOCK),
            nofile: limit(libc::RLIMIT_NOFILE),
            clock,
        }
    }
}

/// A cpulist (`0-3,8,10-11`) as core numbers; `None` when it does not parse.
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    let mut cores = Vec::new();
    if text.is_empty() {
        return Some(cores);
    }
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                cores.extend(a..=b);
            }
            None => cores.push(part.trim().parse().ok()?),
        }
    }
    Some(cores)
}

/// Cores as a cpulist, ranges joined (`2-5,8`).
pub fn cpulist(cores: &[usize]) -> String {
    let mut sorted = cores.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn read(root: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(root.join(path.trim_start_matches('/'))).ok()
}

/// Every check, for the loop cores `loops` (empty: the loops are not pinned), on the host
/// under `root`, with this process's `process` limits and `memory` bytes to lock.
pub fn checks(root: &Path, loops: &[usize], io_uring: bool, memory: u64, p: Process) -> Vec<Check> {
    let mut out = cpu_checks(root, loops);
    out.extend(system_checks(root, io_uring, memory, p));
    out
}

/// The loop cores: isolated, their governor, idle states and interrupts.
fn cpu_checks(root: &Path, loops: &[usize]) -> Vec<Check> {
    let mut out = Vec::new();
    let mut push = |name, verdict| out.push(Check { name, verdict });
    let list = |path: &str| read(root, path).and_then(|t| parse_cpulist(&t));
    let isolated = list("/sys/devices/system/cpu/isolated").unwrap_or_default();
    let nohz = list("/sys/devices/system/cpu/nohz_full").unwrap_or_default();
    if loops.is_empty() {
        push(
            "loop cores pinned",
            Verdict::Warn(
                "the loops are not pinned: set [engine] dispatcher_core (and executor_core) to \
                 isolated cores"
                    .into(),
            ),
        );
    } else {
        let lacking: Vec<usize> = loops
            .iter()
            .copied()
            .filter(|c| !isolated.contains(c) || !nohz.contains(c))
            .collect();
        push(
            "loop cores isolated",
            if lacking.is_empty() {
                Verdict::Ok(format!("{} isolated and nohz_full", cpulist(loops)))
            } else {
                Verdict::Warn(format!(
                    "{} not in isolcpus and nohz_full (isolated: '{}', nohz_full: '{}'): add \
                     `tuning/cmdline.sh {}` to the kernel command line",
                    cpulist(&lacking),
                    cpulist(&isolated),
                    cpulist(&nohz),
                    cpulist(loops)
                ))
            },
        );
    }
    let cores = list("/sys/devices/system/cpu/online").unwrap_or_default();
    let watched: Vec<usize> = if loops.is_empty() {
        cores.clone()
    } else {
        loops.to_vec()
    };
    let governors: Vec<(usize, String)> = watched
        .iter()
        .filter_map(|c| {
            read(
                root,
                &format!("/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"),
            )
            .map(|g| (*c, g.trim().to_string()))
        })
        .collect();
    push(
        "CPU frequency governor",
        if governors.is_empty() {
            Verdict::Unknown("no cpufreq here (a VM: the host sets the frequency)".into())
        } else if let Some((c, g)) = governors.iter().find(|(_, g)| g != "performance") {
            Verdict::Warn(format!(
                "core {c} runs `{g}`: set `performance` (the tuned profile does)"
            ))
        } else {
            Verdict::Ok("performance".into())
        },
    );
    // Idle states deeper than 10 µs to leave, still enabled on a watched core.
    let mut deep = Vec::new();
    let mut any_state = false;
    for c in &watched {
        for s in 0..16 {
            let at = format!("/sys/devices/system/cpu/cpu{c}/cpuidle/state{s}");
            let Some(latency) = read(root, &format!("{at}/latency")) else {
                break;
            };
            any_state = true;
            let off = read(root, &format!("{at}/disable")).is_some_and(|d| d.trim() == "1");
            let latency: u64 = latency.trim().parse().unwrap_or(0);
            if latency > 10 && !off {
                let name = read(root, &format!("{at}/name")).unwrap_or_default();
                deep.push(format!("core {c} {} ({latency} µs)", name.trim()));
            }
        }
    }
    push(
        "deep C-states",
        if !any_state {
            Verdict::Unknown("no cpuidle states here (a VM, or idle=poll)".into())
        } else if deep.is_empty() {
            Verdict::Ok("none deeper than 10 µs enabled".into())
        } else {
            Verdict::Warn(format!(
                "enabled: {}; disable them (`tuning/cmdline.sh` adds processor.max_cstate=1 \
                 intel_idle.max_cstate=0) or hold /dev/cpu_dma_latency at 0",
                deep.join(", ")
            ))
        },
    );
    if !loops.is_empty() {
        let mut on_loops = Vec::new();
        if let Ok(dir) = std::fs::read_dir(root.join("proc/irq")) {
            for irq in dir.flatten() {
                let Some(text) = std::fs::read_to_string(irq.path().join("smp_affinity_list"))
                    .ok()
                    .and_then(|t| parse_cpulist(&t))
                else {
                    continue;
                };
                if text.iter().any(|c| loops.contains(c)) {
                    on_loops.push(irq.file_name().to_string_lossy().into_owned());
                }
            }
        }
        on_loops.sort_by_key(|n| n.parse::<u64>().unwrap_or(u64::MAX));
        push(
            "interrupts off the loop cores",
            if on_loops.is_empty() {
                Verdict::Ok(format!("no IRQ may run on {}", cpulist(loops)))
            } else {
                Verdict::Warn(format!(
                    "{} IRQ(s) may run on {} ({}): `tuning/irq-affinity.sh {} --apply`, and stop \
                     irqbalance",
                    on_loops.len(),
                    cpulist(loops),
                    on_loops
                        .iter()
                        .take(8)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" "),
                    cpulist(loops)
                ))
            },
        );
    }
    out
}

/// The rest of the host and this process: huge pages, swap, io_uring, limits, the clock.
fn system_checks(root: &Path, io_uring: bool, memory: u64, p: Process) -> Vec<Check> {
    let mut out = Vec::new();
    let mut push = |name, verdict| out.push(Check { name, verdict });
    push(
        "transparent huge pages",
        match read(root, "/sys/kernel/mm/transparent_hugepage/enabled") {
            None => Verdict::Unknown("no THP setting here".into()),
            Some(t) if t.contains("[always]") => Verdict::Warn(
                "`always`: compaction can stall a loop; set `madvise` or `never` \
                 (tuning/sysctl and the tuned profile do)"
                    .into(),
            ),
            Some(t) => Verdict::Ok(t.trim().to_string()),
        },
    );
    push(
        "swap",
        match read(root, "/proc/swaps") {
            None => Verdict::Unknown("/proc/swaps unreadable".into()),
            Some(t) if t.lines().count() > 1 => Verdict::Warn(format!(
                "{} swap device(s) on: a page-in on the hot path costs milliseconds; `swapoff -a`",
                t.lines().count() - 1
            )),
            Some(_) => Verdict::Ok("off".into()),
        },
    );
    if io_uring {
        push(
            "io_uring allowed",
            match read(root, "/proc/sys/kernel/io_uring_disabled").map(|t| t.trim().to_string()) {
                None => Verdict::Ok("no io_uring_disabled switch (allowed)".into()),
                Some(v) if v == "0" => Verdict::Ok("kernel.io_uring_disabled = 0".into()),
                Some(v) => Verdict::Warn(format!(
                    "kernel.io_uring_disabled = {v}: keel falls back to epoll; set it to 0 \
                     (tuning/sysctl.d/90-keel.conf)"
                )),
            },
        );
    }
    push(
        "memory lockable",
        if p.memlock >= memory {
            Verdict::Ok(if p.memlock == u64::MAX {
                "unlimited".into()
            } else {
                format!("{} MiB (need {} MiB)", p.memlock >> 20, memory >> 20)
            })
        } else {
            Verdict::Warn(format!(
                "RLIMIT_MEMLOCK {} KiB, the engine's memory is {} MiB: raise it \
                 (tuning/limits.d/90-keel.conf: memlock unlimited)",
                p.memlock >> 10,
                memory >> 20
            ))
        },
    );
    push(
        "open files",
        if p.nofile >= 65_536 {
            Verdict::Ok(format!("{}", p.nofile))
        } else {
            Verdict::Warn(format!(
                "RLIMIT_NOFILE {}: many market-data connections need more \
                 (tuning/limits.d/90-keel.conf: nofile 1048576)",
                p.nofile
            ))
        },
    );
    push(
        "clock synchronised",
        match p.clock {
            None => Verdict::Unknown("adjtimex unavailable".into()),
            Some((false, _)) => Verdict::Warn(
                "the kernel clock is not synchronised: run chrony (or PTP) so that timestamps \
                 agree with the venue's"
                    .into(),
            ),
            Some((true, err)) if err > 1_000 => Verdict::Warn(format!(
                "synchronised, but the estimated error is {err} µs (over 1 ms)"
            )),
            Some((true, err)) => Verdict::Ok(format!("estimated error {err} µs")),
        },
    );
    let flags = read(root, "/proc/cpuinfo")
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("flags"))
                .map(str::to_string)
        })
        .unwrap_or_default();
    push(
        "invariant TSC",
        if flags.is_empty() {
            Verdict::Unknown("no CPU flags in /proc/cpuinfo".into())
        } else if flags.contains(" constant_tsc") && flags.contains(" nonstop_tsc") {
            Verdict::Ok("constant_tsc nonstop_tsc".into())
        } else {
            Verdict::Warn("no invariant TSC: keel's clock calibrates against the OS clock".into())
        },
    );
    out
}

/// The loop cores a configuration pins (the dispatcher's, and the executor's in `split`).
pub fn loop_cores(config: &EngineConfig) -> Vec<usize> {
    let split = config.loops.topology == keel::engine::Topology::Split;
    let mut cores: Vec<usize> = config.loops.dispatcher_core.into_iter().collect();
    if split {
        cores.extend(config.loops.executor_core);
    }
    cores
}

/// The checks for `config` on this host.
pub fn for_config(config: &EngineConfig) -> Vec<Check> {
    checks(
        Path::new("/"),
        &loop_cores(config),
        config.loops.transport == keel::net::TransportKind::IoUring,
        config.memory_need().total_bytes,
        Process::here(),
    )
}

/// One line per check: `ok`, `warn` or `?`, the name, what was found.
pub fn line(c: &Check) -> String {
    let (tag, text) = match &c.verdict {
        Verdict::Ok(t) => ("ok  ", t),
        Verdict::Warn(t) => ("warn", t),
        Verdict::Unknown(t) => ("?   ", t),
    };
    format!("{tag} {}: {text}", c.name)
}

pub fn run(args: PreflightArgs) -> ExitCode {
    let checks = match &args.config {
        Some(path) => {
            let config = match std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| EngineConfig::from_toml(&t).map_err(|e| e.to_string()))
            {
                Ok(c) => c,
                Err(e) => {
                    keel::warn_line!("keel preflight: {}: {e}", path.display());
                    return ExitCode::from(65);
                }
            };
            for_config(&config)
        }
        None => checks(Path::new("/"), &[], true, 0, Process::here()),
    };
    for c in &checks {
        keel::say_line!("{}", line(c));
    }
    let warnings = checks
        .iter()
        .filter(|c| matches!(c.verdict, Verdict::Warn(_)))
        .count();
    keel::say_line!(
        "keel preflight: {warnings} warning(s) in {} checks (docs/tuning.md explains each)",
        checks.len()
    );
    if args.strict && warnings > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
