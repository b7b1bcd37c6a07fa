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

use keel::order::Price;
use keel::session::fix::codec::{self, Encoder, FieldTable, Frame, Limits};
use keel::session::fix::time::utc_timestamp;
use keel_bench::{arg_u64, flag, histogram, mono_ns, print_header, print_row, summary};

/// The ExecutionReport both sides decode (a partial fill), written by keel's encoder.
fn execution_report() -> Vec<u8> {
    let mut out = vec![0u8; 512];
    let mut e = Encoder::new(&mut out, b"8");
    e.bytes(49, b"VENUE")
        .bytes(56, b"KEEL")
        .uint(34, 4_711)
        .bytes(52, b"20261202-06:30:00.001")
        .bytes(37, b"V1042")
        .bytes(11, b"1000042")
        .bytes(17, b"E7781")
        .bytes(150, b"F")
        .bytes(39, b"1")
        .bytes(55, b"AAPL")
        .bytes(54, b"1")
        .uint(38, 100)
        .decimal(44, 1_005_000, Price::SCALE)
        .uint(32, 40)
        .decimal(31, 1_005_000, Price::SCALE)
        .uint(151, 60)
        .uint(14, 40)
        .decimal(6, 1_005_000, Price::SCALE)
        .bytes(60, b"20261202-06:30:00.001");
    let n = e.finish().expect("fits");
    out.truncate(n);
    out
}

/// keel: one NewOrderSingle as the FIX link writes it.
fn keel_encode(out: &mut [u8], n: u64, unix_ns: u64) -> usize {
    let mut id = [0u8; 20];
    let len = codec::write_uint(&mut id, 1_000_000 + n);
    let stamp = utc_timestamp(unix_ns);
    let mut e = Encoder::new(out, b"D");
    e.bytes(49, b"KEEL")
        .bytes(56, b"VENUE")
        .uint(34, n + 1)
        .bytes(52, &stamp)
        .bytes(11, &id[..len])
        .bytes(55, b"AAPL")
        .bytes(54, b"1")
        .bytes(60, &stamp)
        .uint(38, 100)
        .bytes(40, b"2")
        .decimal(44, 1_005_000, Price::SCALE)
        .bytes(59, b"0");
    e.finish().expect("fits")
}

/// keel: one ExecutionReport framed, cut and read as the FIX link reads it.
fn keel_decode(table: &mut FieldTable, report: &[u8], limits: &Limits) -> u64 {
    let Ok(Frame::Whole { len }) = codec::frame(report, limits) else {
        panic!("the report frames");
    };
    let msg = table
        .parse(&report[..len], limits)
        .expect("the report parses");
    let id = msg.require(11).expect("ClOrdID").len() as u64;
    let exec = u64::from(msg.require(150).expect("ExecType")[0]);
    let status = u64::from(msg.require(39).expect("OrdStatus")[0]);
    let qty = msg.require_uint(32).expect("LastQty");
    let px = msg
        .decimal(31, Price::SCALE)
        .expect("LastPx")
        .expect("LastPx") as u64;
    let cum = msg.require_uint(14).expect("CumQty");
    let leaves = msg.require_uint(151).expect("LeavesQty");
    id + exec + status + qty + px + cum + leaves
}

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
