//! Network namespaces for tests and benchmarks of the AF_XDP transport: two namespaces
//! joined by a veth pair, made with iproute2 and removed on drop. Needs root; where it cannot
//! run, [`available`] says so on stderr, and fails when `CI` or `KEEL_REQUIRE_AF_XDP` is set
//! (scripts/test sets it), so the tests are never skipped silently where they must run.

#![allow(unsafe_code)] // geteuid and setns

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Two namespaces, `a` (keel's end, no kernel address on its veth) and `b` (the kernel
/// peer, `peer_ip`/24), joined by a veth pair.
#[derive(Debug)]
pub struct Pair {
    /// keel's namespace.
    pub a: String,
    /// The peer's namespace.
    pub b: String,
    /// keel's end of the veth pair (in `a`; no kernel address).
    pub a_if: String,
    /// The peer's end (in `b`; the kernel's `peer_ip`/24).
    pub b_if: String,
    /// keel's address on `a_if` (x.x.x.2).
    pub keel_ip: std::net::Ipv4Addr,
    /// The peer kernel's address on `b_if` (x.x.x.1).
    pub peer_ip: std::net::Ipv4Addr,
    /// A second userspace address, on `b_if` (x.x.x.3): for an AF_XDP transport at the
    /// peer's end too (two keel transports talking across the pair).
    pub keel_ip_b: std::net::Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this process may make namespaces; otherwise says why, loudly, and fails in CI.
pub fn available(test: &str) -> bool {
    // SAFETY: geteuid(2) has no arguments.
    let root = unsafe { libc::geteuid() } == 0;
    let ip_ok = Command::new("ip").arg("-V").output().is_ok();
    if root && ip_ok {
        return true;
    }
    let why = if root {
        "no `ip` (iproute2)"
    } else {
        "not root"
    };
    assert!(
        std::env::var_os("CI").is_none() && std::env::var_os("KEEL_REQUIRE_AF_XDP").is_none(),
        "{test}: cannot run the AF_XDP tests here ({why}); CI must run them as root"
    );
    eprintln!("!!! {test}: AF_XDP test NOT RUN: {why} (it needs root and iproute2)");
    false
}

impl Pair {
    /// Makes the namespaces and the link; `None` (loudly) where that is not possible.
    pub fn create(test: &str) -> Option<Self> {
        if !available(test) {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let pair = Pair {
            a: format!("kxa{tag}"),
            b: format!("kxb{tag}"),
            a_if: format!("xa{tag}"),
            b_if: format!("xb{tag}"),
            keel_ip: std::net::Ipv4Addr::new(10, 77, (n % 250) as u8, 2),
            peer_ip: std::net::Ipv4Addr::new(10, 77, (n % 250) as u8, 1),
            keel_ip_b: std::net::Ipv4Addr::new(10, 77, (n % 250) as u8, 3),
        };
        pair.build()
            .unwrap_or_else(|e| panic!("{test}: making the veth pair: {e}"));
        Some(pair)
    }

    fn build(&self) -> Result<(), String> {
        ip(&["netns", "add", &self.a])?;
        ip(&["netns", "add", &self.b])?;
        ip(&[
            "link", "add", &self.a_if, "netns", &self.a, "type", "veth", "peer", "name",
            &self.b_if, "netns", &self.b,
        ])?;
        let peer = format!("{}/24", self.peer_ip);
        ip(&["-n", &self.b, "addr", "add", &peer, "dev", &self.b_if])?;
        for (ns, dev) in [(&self.a, &self.a_if), (&self.b, &self.b_if)] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }

    /// Runs `f` with this thread in namespace `name`, then returns to where it was.
    pub fn within<R>(name: &str, f: impl FnOnce() -> R) -> R {
        let here = open("/proc/thread-self/ns/net");
        let there = open(&format!("/var/run/netns/{name}"));
        enter(&there);
        let r = f();
        enter(&here);
        r
    }

    /// The AF_XDP settings of a transport at keel's end (`a_if`, `keel_ip`/24), checksums
    /// not verified (veth hands over frames whose checksums the sending kernel left to a NIC).
    pub fn xdp_a(&self) -> super::XdpConfig {
        Self::xdp(&self.a_if, self.keel_ip)
    }

    /// The same at the peer's end (`b_if`, `keel_ip_b`/24).
    pub fn xdp_b(&self) -> super::XdpConfig {
        Self::xdp(&self.b_if, self.keel_ip_b)
    }

    fn xdp(interface: &str, address: std::net::Ipv4Addr) -> super::XdpConfig {
        super::XdpConfig {
            interface: Some(super::IfName::new(interface).expect("a name made here")),
            address: Some((address, 24)),
            verify_checksums: false,
            ..super::XdpConfig::default()
        }
    }

    /// Runs `f` in keel's namespace.
    pub fn in_a<R>(&self, f: impl FnOnce() -> R) -> R {
        Self::within(&self.a, f)
    }

    /// Runs `f` in the peer's namespace.
    pub fn in_b<R>(&self, f: impl FnOnce() -> R) -> R {
        Self::within(&self.b, f)
    }

    /// Runs a command in the peer's namespace (tc, ip), failing the test on error.
    pub fn run_b(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.b];
        all.extend_from_slice(args);
        ip(&all).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Drops `percent`% of the packets between keel and the peer, each way, at random, in
    /// the peer's namespace (nftables: this kernel has no netem), counted.
    pub fn lose_percent(&self, percent: u32) {
        let keel = self.keel_ip.to_string();
        let pct = percent.to_string();
        self.run_b(&["nft", "add", "table", "inet", "keel_loss"]);
        for (chain, hook, dir) in [("out", "output", "daddr"), ("in", "input", "saddr")] {
            let spec = format!("{{ type filter hook {hook} priority 0 ; }}");
            self.run_b(&["nft", "add", "chain", "inet", "keel_loss", chain, &spec]);
            self.run_b(&[
                "nft",
                "add",
                "rule",
                "inet",
                "keel_loss",
                chain,
                "ip",
                dir,
                &keel,
                "numgen",
                "random",
                "mod",
                "100",
                "<",
                &pct,
                "counter",
                "drop",
            ]);
        }
    }

    /// Packets the loss rules dropped so far.
    pub fn frames_lost(&self) -> u64 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.b,
                "nft",
                "list",
                "table",
                "inet",
                "keel_loss",
            ])
            .output()
            .expect("nft list");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse::<u64>().ok())
            .sum()
    }

    /// Waits (up to 10 s) until keel's end has no XDP program: the kernel releases a
    /// closed link's program shortly after the last descriptor closes, not always at once.
    pub fn wait_detached(&self) {
        for _ in 0..1000 {
            if !self.link_a().contains("prog/xdp") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("XDP program still attached: {}", self.link_a());
    }

    /// `ip -d link show` of keel's end, as text (to see the XDP program).
    pub fn link_a(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.a, "-d", "link", "show", &self.a_if])
            .output()
            .expect("ip link show");
        assert!(
            out.status.success(),
            "ip link show {}: {}",
            self.a_if,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn open(path: &str) -> OwnedFd {
    std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .into()
}

fn enter(fd: &OwnedFd) {
    // SAFETY: setns(2) on a namespace descriptor; it changes this thread only.
    let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}
