//! The tuning kit (tuning/) and `keel preflight`, for what can run on a test machine: every
//! script parses; the kernel command-line generator's output for given cores, and its refusals;
//! the IRQ script on a prepared /proc (a dry run, then `--apply`); preflight's verdicts on
//! prepared host trees, tuned and stock, and on this machine.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use keel_cli::preflight::{checks, cpulist, parse_cpulist, Check, Process, Verdict};

fn tuning(script: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tuning")
        .join(script)
}

fn run(script: &str, args: &[&str]) -> Output {
    Command::new("bash")
        .arg(tuning(script))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// Goal: every script of the kit parses.
#[test]
fn every_script_parses() {
    for script in ["cmdline.sh", "irq-affinity.sh", "preflight.sh"] {
        let out = Command::new("bash")
            .args(["-n"])
            .arg(tuning(script))
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", text(&out.stderr));
    }
}

// Goal: the generator prints the arguments for the cores asked, with every other core left for
// the kernel, and refuses (exit 64, naming it) what is not a core list or leaves no core.
#[test]
fn the_command_line_generator_isolates_the_cores_asked() {
    let out = run("cmdline.sh", &["2-5", "8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "isolcpus=managed_irq,domain,2,3,4,5 nohz_full=2,3,4,5 rcu_nocbs=2,3,4,5 \
         irqaffinity=0,1,6,7 processor.max_cstate=1 intel_idle.max_cstate=0 nosoftlockup \
         tsc=reliable\n"
    );
    let out = run("cmdline.sh", &["3,1", "4"]);
    assert!(
        text(&out.stdout).contains(" nohz_full=3,1 ")
            && text(&out.stdout).contains("irqaffinity=0,2 ")
    );
    for (args, says) in [
        (&["x", "4"][..], "'x' is not a core number or range"),
        (&["5-3", "8"], "bad range '5-3'"),
        (&["4", "4"], "core 4: this machine has 4 cores"),
        (&["0-3", "4"], "no core left"),
        (&["0-99999999999999999999", "8"], "this machine has 8 cores"),
        (&[",", "8"], "is not a core number"),
        (&[], "usage"),
    ] {
        let out = run("cmdline.sh", args);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// A /proc/irq tree under `root` with `(irq, smp_affinity_list)` entries.
fn irq_tree(root: &Path, irqs: &[(u32, &str)]) {
    for (irq, list) in irqs {
        let dir = root.join(format!("proc/irq/{irq}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("smp_affinity_list"), format!("{list}\n")).unwrap();
    }
}

// Goal: the IRQ script moves exactly the interrupts that may run on a loop core, onto the
// other cores: a dry run says so and changes nothing; `--apply` writes them. Method: a
// prepared /proc on this machine's core count, the last core the loop's.
#[test]
fn the_irq_script_moves_interrupts_off_the_loop_cores() {
    let total = std::thread::available_parallelism().unwrap().get();
    if total < 2 {
        eprintln!("a single core: nothing to isolate");
        return;
    }
    let loop_core = total - 1;
    let house = cpulist(&(0..loop_core).collect::<Vec<_>>());
    let dir = tempfile::tempdir().unwrap();
    let all = format!("0-{loop_core}");
    let only = loop_core.to_string();
    irq_tree(dir.path(), &[(1, &all), (2, "0"), (3, &only)]);
    let root = dir.path().to_str().unwrap();
    let out = run("irq-affinity.sh", &[&only, "--root", root]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!("irq 1: {all} -> {house} (dry run)")),
        "{said}"
    );
    assert!(
        said.contains(&format!("irq 3: {only} -> {house} (dry run)")),
        "{said}"
    );
    assert!(!said.contains("irq 2:"), "{said}");
    assert!(said.contains("2 to move off"), "{said}");
    let read = |irq: u32| {
        std::fs::read_to_string(dir.path().join(format!("proc/irq/{irq}/smp_affinity_list")))
            .unwrap()
    };
    assert_eq!(read(1).trim(), all, "a dry run changed a file");
    let out = run("irq-affinity.sh", &[&only, "--apply", "--root", root]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        (read(1).trim(), read(2).trim(), read(3).trim()),
        (house.as_str(), "0", house.as_str())
    );
    let out = run("irq-affinity.sh", &["nonsense"]);
    assert_eq!(out.status.code(), Some(64));
}

/// A host tree under `root`: `cores` online, `isolated` isolated and nohz_full, every core's
/// governor and idle states, THP, swaps, io_uring, IRQs, CPU flags.
struct Host<'a> {
    cores: usize,
    isolated: &'a str,
    governor: &'a str,
    deep_idle_on: bool,
    thp: &'a str,
    swaps: &'a str,
    io_uring_disabled: &'a str,
    irqs: &'a [(u32, &'a str)],
    flags: &'a str,
}

fn host(root: &Path, h: &Host<'_>) {
    let put = |path: &str, text: &str| {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    put(
        "sys/devices/system/cpu/online",
        &format!("0-{}\n", h.cores - 1),
    );
    put(
        "sys/devices/system/cpu/isolated",
        &format!("{}\n", h.isolated),
    );
    put(
        "sys/devices/system/cpu/nohz_full",
        &format!("{}\n", h.isolated),
    );
    for c in 0..h.cores {
        let cpu = format!("sys/devices/system/cpu/cpu{c}");
        put(
            &format!("{cpu}/cpufreq/scaling_governor"),
            &format!("{}\n", h.governor),
        );
        for (s, name, latency) in [(0, "POLL", 0), (1, "C1", 2), (2, "C6", 133)] {
            put(
                &format!("{cpu}/cpuidle/state{s}/name"),
                &format!("{name}\n"),
            );
            put(
                &format!("{cpu}/cpuidle/state{s}/latency"),
                &format!("{latency}\n"),
            );
            let off = s == 2 && !h.deep_idle_on;
            put(
                &format!("{cpu}/cpuidle/state{s}/disable"),
                if off { "1\n" } else { "0\n" },
            );
        }
    }
    put(
        "sys/kernel/mm/transparent_hugepage/enabled",
        &format!("{}\n", h.thp),
    );
    put("proc/swaps", h.swaps);
    put(
        "proc/sys/kernel/io_uring_disabled",
        &format!("{}\n", h.io_uring_disabled),
    );
    put(
        "proc/cpuinfo",
        &format!("processor\t: 0\nflags\t\t: {}\n", h.flags),
    );
    irq_tree(root, h.irqs);
}

fn verdict<'a>(checks: &'a [Check], name: &str) -> &'a Verdict {
    &checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {checks:?}"))
        .verdict
}

const SWAPS_HEADER: &str = "Filename\tType\tSize\tUsed\tPriority\n";

// Goal: on a tuned host every check is ok; on a stock one each item the benchmarks assume is a
// warning that says what to do; what a VM lacks is `?`, not a verdict. Method: prepared host
// trees (the files preflight reads), and the limits and clock given.
#[test]
fn preflight_judges_prepared_hosts() {
    let tuned = tempfile::tempdir().unwrap();
    host(
        tuned.path(),
        &Host {
            cores: 8,
            isolated: "2-5",
            governor: "performance",
            deep_idle_on: false,
            thp: "always madvise [never]",
            swaps: SWAPS_HEADER,
            io_uring_disabled: "0",
            irqs: &[(24, "0-1"), (25, "6-7")],
            flags: "fpu tsc constant_tsc nonstop_tsc",
        },
    );
    let good = Process {
        memlock: u64::MAX,
        nofile: 1 << 20,
        clock: Some((true, 12)),
    };
    let all = checks(tuned.path(), &[2, 3], true, 200 << 20, good);
    for c in &all {
        assert!(matches!(c.verdict, Verdict::Ok(_)), "{c:?}");
    }
    assert_eq!(all.len(), 11, "{all:?}");

    let stock = tempfile::tempdir().unwrap();
    host(
        stock.path(),
        &Host {
            cores: 4,
            isolated: "",
            governor: "powersave",
            deep_idle_on: true,
            thp: "[always] madvise never",
            swaps: &format!("{SWAPS_HEADER}/swap.img\tfile\t2097148\t0\t-2\n"),
            io_uring_disabled: "2",
            irqs: &[(24, "0-3"), (30, "1")],
            flags: "fpu tsc",
        },
    );
    let bad = Process {
        memlock: 8 << 20,
        nofile: 1_024,
        clock: Some((false, 16_000_000)),
    };
    let all = checks(stock.path(), &[2, 3], true, 200 << 20, bad);
    let says = |name: &str, what: &str| match verdict(&all, name) {
        Verdict::Warn(t) => assert!(t.contains(what), "{name}: {t}"),
        other => panic!("{name}: {other:?}"),
    };
    says("loop cores isolated", "2-3 not in isolcpus and nohz_full");
    says("loop cores isolated", "tuning/cmdline.sh 2-3");
    says("CPU frequency governor", "core 2 runs `powersave`");
    says("deep C-states", "core 2 C6 (133 µs)");
    says("transparent huge pages", "`always`");
    says("swap", "1 swap device(s) on");
    says(
        "interrupts off the loop cores",
        "1 IRQ(s) may run on 2-3 (24)",
    );
    says("io_uring allowed", "kernel.io_uring_disabled = 2");
    says(
        "memory lockable",
        "RLIMIT_MEMLOCK 8192 KiB, the engine's memory is 200 MiB",
    );
    says("open files", "RLIMIT_NOFILE 1024");
    says("clock synchronised", "not synchronised");
    says("invariant TSC", "no invariant TSC");
    // Unpinned loops: said, and no per-loop-core check pretends to know the cores.
    let all = checks(stock.path(), &[], false, 0, bad);
    assert!(
        matches!(verdict(&all, "loop cores pinned"), Verdict::Warn(t) if t.contains("not pinned"))
    );
    assert!(all
        .iter()
        .all(|c| c.name != "interrupts off the loop cores" && c.name != "io_uring allowed"));

    // A VM: no cpufreq, no cpuidle, nothing readable under /sys: `?`, not ok and not warn.
    let vm = tempfile::tempdir().unwrap();
    let all = checks(vm.path(), &[1], true, 0, good);
    for name in [
        "CPU frequency governor",
        "deep C-states",
        "transparent huge pages",
        "swap",
        "invariant TSC",
    ] {
        assert!(
            matches!(verdict(&all, name), Verdict::Unknown(_)),
            "{name}: {all:?}"
        );
    }
}

// Goal: cpulists parse as the kernel writes them, and what is not one is refused (None).
#[test]
fn cpulists_parse_and_print() {
    assert_eq!(
        parse_cpulist("0-3,8,10-11\n"),
        Some(vec![0, 1, 2, 3, 8, 10, 11])
    );
    assert_eq!(parse_cpulist(""), Some(vec![]));
    assert_eq!(parse_cpulist("3-1"), None);
    assert_eq!(parse_cpulist("x"), None);
    assert_eq!(parse_cpulist("0-99999999999"), None);
    assert_eq!(cpulist(&[5, 2, 3, 4, 8]), "2-5,8");
    assert_eq!(cpulist(&[]), "");
}

// Goal: `keel preflight` on this machine prints one line per check and the summary, its exit
// status says whether `--strict` found a warning, and a bad configuration is refused (65).
#[test]
fn preflight_runs_on_this_machine() {
    let out = Command::new(common::peers::KEEL)
        .arg("preflight")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    let summary = lines.last().unwrap();
    assert!(summary.starts_with("keel preflight: "), "{said}");
    let warnings = lines.iter().filter(|l| l.starts_with("warn ")).count();
    assert!(
        summary.contains(&format!(
            "{warnings} warning(s) in {} checks",
            lines.len() - 1
        )),
        "{said}"
    );
    for l in &lines[..lines.len() - 1] {
        assert!(
            l.starts_with("ok   ") || l.starts_with("warn ") || l.starts_with("?    "),
            "{l}"
        );
    }
    let strict = Command::new(common::peers::KEEL)
        .args(["preflight", "--strict"])
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(i32::from(warnings > 0)));
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/keel.example.toml");
    let out = Command::new(common::peers::KEEL)
        .args(["preflight", "--config"])
        .arg(&example)
        .output()
        .unwrap();
    assert!(out.status.success());
    // The example pins its loop to core 2: the per-core checks are about it.
    assert!(
        text(&out.stdout).contains("loop cores isolated: 2"),
        "{}",
        text(&out.stdout)
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "symbols = 7\n").unwrap();
    let out = Command::new(common::peers::KEEL)
        .args(["preflight", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(
        text(&out.stderr).contains("symbols"),
        "{}",
        text(&out.stderr)
    );
}
