//! `keel run` on the AF_XDP transport refuses to start where it cannot run, naming the cause,
//! and leaves nothing attached: no capabilities (for the program; for the socket), a
//! locked-memory limit below the UMEM, an
//! interface that is not there, an interface that already has an XDP program. Each case runs
//! the real binary in one of a pair of network namespaces (`keel::net::xdp::netns`), as root;
//! without root the cases say so and pass only outside CI.

use std::process::Command;

use keel::net::xdp::netns::Pair;
use keel::net::{ReactorConfig, XdpReactor};

mod common;

/// A `keel run` configuration on AF_XDP at keel's end of `pair` (interface `interface`), its
/// venue at the peer's address (nobody listens: the run stops at the transport first).
fn config(dir: &std::path::Path, pair: &Pair, interface: &str) -> std::path::PathBuf {
    let path = dir.join("keel.toml");
    let text = format!(
        "symbols = [\"AAPL\"]\n[engine]\ntransport = \"af_xdp\"\nidle = \"backoff\"\n\
         [journal]\ndir = \"{dir}/journal\"\n[ipc]\ndir = \"{dir}/ipc\"\n\
         [engine.af_xdp]\ninterface = \"{interface}\"\naddress = \"{keel}/24\"\n\
         verify_checksums = false\n\
         [[venue]]\nname = \"sim\"\naddress = \"{peer}:9\"\nusername = \"keel\"\npassword = \"keel\"\n",
        dir = dir.display(),
        keel = pair.keel_ip,
        peer = pair.peer_ip,
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `keel run` in keel's namespace behind `prefix` (e.g. `setpriv ...`); returns its exit
/// status and stderr.
fn keel_run(pair: &Pair, prefix: &[&str], config: &std::path::Path) -> (bool, String) {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &pair.a]).args(prefix);
    let out = c
        .args([common::peers::KEEL, "run", "--config"])
        .arg(config)
        .args(["--status-s", "0"])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// Goal: each refusal is an exit with a non-zero status and one line that names the cause and
// the remedy, and no program is left on the interface.
#[test]
fn keel_run_on_af_xdp_refuses_what_it_cannot_run_with() {
    let Some(pair) = Pair::create("keel_run_on_af_xdp_refuses_what_it_cannot_run_with") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let good = config(dir.path(), &pair, &pair.a_if);
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "setpriv",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--ambient-caps=-all",
            ],
            "BPF_MAP_CREATE (XSKMAP): Operation not permitted (os error 1): the AF_XDP transport \
             needs CAP_BPF and CAP_NET_ADMIN",
        ),
        (
            &["setpriv", "--inh-caps=-net_raw", "--bounding-set=-net_raw"],
            "socket(AF_XDP): Operation not permitted (os error 1): the AF_XDP transport needs \
             CAP_NET_RAW",
        ),
        (
            &[
                "setpriv",
                "--inh-caps=-ipc_lock",
                "--bounding-set=-ipc_lock",
                "prlimit",
                "--memlock=65536",
            ],
            "a UMEM of 4194304 bytes does not fit the locked-memory limit of 65536 bytes",
        ),
    ];
    for (prefix, cause) in cases {
        let (ok, stderr) = keel_run(&pair, prefix, &good);
        assert!(!ok, "{prefix:?}: keel run started: {stderr}");
        assert!(
            stderr.contains(&format!("keel run: transport: af_xdp: {cause}")),
            "{prefix:?}: {stderr}"
        );
        pair.wait_detached();
    }
    let missing = config(dir.path(), &pair, "nosuch0");
    let (ok, stderr) = keel_run(&pair, &[], &missing);
    assert!(!ok);
    assert!(
        stderr.contains("af_xdp: no interface 'nosuch0' in this network namespace"),
        "{stderr}"
    );
    // Another XDP program on the interface (here keel's own, from this process).
    let holder = pair
        .in_a(|| {
            XdpReactor::new(ReactorConfig {
                xdp: pair.xdp_a(),
                ..ReactorConfig::default()
            })
        })
        .unwrap();
    let good = config(dir.path(), &pair, &pair.a_if);
    let (ok, stderr) = keel_run(&pair, &[], &good);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "af_xdp: attaching keel's XDP program to {} (native mode): Device or resource busy",
            pair.a_if
        )) && stderr.contains("another XDP program is attached"),
        "{stderr}"
    );
    drop(holder);
    pair.wait_detached();
}
