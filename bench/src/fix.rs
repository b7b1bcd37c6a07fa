//! keel's FIX 4.4 codec as the benchmarks time it (`bin/fix_codec.rs`, `benches/codecs.rs`):
//! a NewOrderSingle written and an ExecutionReport read the way the FIX link does.

use keel::order::Price;
use keel::session::fix::codec::{self, Encoder, FieldTable, Frame, Limits};
use keel::session::fix::time::utc_timestamp;

/// The ExecutionReport the benchmarks decode (a partial fill), written by keel's encoder.
pub fn execution_report() -> Vec<u8> {
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
pub fn keel_encode(out: &mut [u8], n: u64, unix_ns: u64) -> usize {
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
pub fn keel_decode(table: &mut FieldTable, report: &[u8], limits: &Limits) -> u64 {
    let Frame::Whole { len } = codec::frame(report, limits) else {
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
