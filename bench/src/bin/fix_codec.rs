//! FIX 4.4 codec cost per message, keel against QuickFIX/C++ in the same run: encode a
//! NewOrderSingle (header with CompIDs, MsgSeqNum and a SendingTime formatted from the clock;
//! the order's fields; BodyLength and CheckSum), and decode an ExecutionReport (framing with
//! BodyLength and CheckSum checked, the fields cut, then ClOrdID, ExecType, OrdStatus, LastQty,
//! LastPx, CumQty and LeavesQty read as values). QuickFIX's side is bench/quickfix/codec.cpp
//! (built by scripts/quickfix-peers into target/quickfix, or `KEEL_QUICKFIX_DIR`), run as a
//! child process between keel's rounds: rounds alternate, five each. Each sample is the mean of
//! one batch of messages (a single message is too short for the clock).
//!
//! usage: fix_codec [--smoke] [--batches=N] [--batch=N]

use std::process::Command;

use keel::session::fix::codec::{self, FieldTable, Limits};
use keel_bench::fix::{execution_report, keel_decode, keel_encode};
use keel_bench::{arg_u64, flag, histogram, mono_ns, print_header, print_row, summary};

fn main() {
    let smoke = flag("smoke");
    let batches = arg_u64("batches", if smoke { 200 } else { 4_000 });
    let batch = arg_u64("batch", 50);
    let rounds = if smoke { 1 } else { 5 };
    let dir = std::env::var_os("KEEL_QUICKFIX_DIR").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/quickfix"),
        std::path::PathBuf::from,
    );
    let peer = dir.join("quickfix-codec");
    assert!(
        peer.exists(),
        "{} missing: run scripts/quickfix-peers first",
        peer.display()
    );
    let report = execution_report();
    let report_text: String = report
        .iter()
        .map(|&b| if b == codec::SOH { '|' } else { b as char })
        .collect();
    let limits = Limits::default();
    let mut table = FieldTable::default();
    let mut out = [0u8; 512];
    let mut sink = 0u64;
    let (mut k_enc, mut k_dec, mut q_enc, mut q_dec) =
        (histogram(), histogram(), histogram(), histogram());
    let unix_origin = 1_796_193_000_000_000_000u64;
    for _ in 0..rounds {
        for b in 0..batches {
            let t0 = mono_ns();
            for i in 0..batch {
                sink += keel_encode(&mut out, b * batch + i, unix_origin + t0) as u64;
            }
            let t1 = mono_ns();
            for _ in 0..batch {
                sink += keel_decode(&mut table, std::hint::black_box(&report), &limits);
            }
            let t2 = mono_ns();
            k_enc.saturating_record((t1 - t0) * 1_000 / batch);
            k_dec.saturating_record((t2 - t1) * 1_000 / batch);
        }
        let output = Command::new(&peer)
            .args([batches.to_string(), batch.to_string(), report_text.clone()])
            .output()
            .expect("the QuickFIX codec peer runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let (what, ns) = line.split_once(' ').expect("'<what> <ns>'");
            let ps = (ns.parse::<f64>().expect("a number") * 1_000.0) as u64;
            match what {
                "encode" => q_enc.saturating_record(ps),
                _ => q_dec.saturating_record(ps),
            }
        }
    }
    std::hint::black_box(sink);
    println!(
        "FIX 4.4 codec per message, keel vs QuickFIX/C++ (Debian libquickfix 1.15, g++ -O2 -march=native), {rounds} alternating rounds of {batches} batches of {batch}; each sample a batch's mean"
    );
    for (title, q, k) in [
        ("encode NewOrderSingle", &q_enc, &k_enc),
        ("decode ExecutionReport", &q_dec, &k_dec),
    ] {
        print_header(title, "QuickFIX");
        let (qs, ks) = (summary(q), summary(k));
        print_row("QuickFIX/C++ (baseline)", &qs, qs.p50_ns);
        print_row("keel", &ks, qs.p50_ns);
    }
    let (qe, ke, qd, kd) = (
        summary(&q_enc),
        summary(&k_enc),
        summary(&q_dec),
        summary(&k_dec),
    );
    println!(
        "keel/QuickFIX at p50: encode {:.3}x, decode {:.3}x (goal: at most 0.1x); keel p50 encode {:.0} ns, decode {:.0} ns (commercial figures quoted: 300-500 ns, 200-300 ns)",
        ke.p50_ns / qe.p50_ns,
        kd.p50_ns / qd.p50_ns,
        ke.p50_ns,
        kd.p50_ns
    );
}
