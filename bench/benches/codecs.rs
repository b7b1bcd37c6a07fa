//! Criterion: keel's order-entry codecs, each in one group with the peer an engineer would
//! write without keel, both checked to produce the same bytes or values before timing.
//!
//! - OUCH 5.0 Enter Order encode: keel's `encode_inbound` into a caller's buffer, against
//!   pushes of `to_be_bytes` and padded strings into a fresh `Vec`.
//! - OUCH 5.0 Order Accepted decode: keel's `decode_outbound` (every code checked, borrowed
//!   appendages), against `from_be_bytes` reads into a struct with `String` alpha fields.
//! - FIX 4.4 NewOrderSingle encode: keel's `Encoder` as the FIX link writes it
//!   (`keel_bench::fix`), against `write!` into a `String` with BodyLength and CheckSum.
//! - FIX 4.4 ExecutionReport decode: keel's framing and field table, against splitting on SOH
//!   into a `HashMap` (BodyLength and CheckSum checked, values parsed with `str::parse`).
//!
//! The comparison with QuickFIX/C++ is `bin/fix_codec.rs`.
//!
//! cargo bench -p keel-bench --bench codecs [-- --test]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use keel::proto::ouch::{
    decode_outbound, encode_inbound, encode_outbound, Dialect, EnterOrder, Inbound, OrderAccepted,
    OrderFields, Outbound,
};
use keel::session::fix::codec::{FieldTable, Limits};
use keel_bench::fix::{execution_report, keel_decode, keel_encode};

const SOH: char = '\u{1}';

// ----- OUCH ---------------------------------------------------------------------------------

fn fields() -> OrderFields {
    OrderFields {
        side: b'B',
        qty: 100,
        symbol: *b"AAPL    ",
        price: 1_005_000,
        tif: b'0',
        display: b'Y',
        capacity: b'A',
        ise: b'N',
        cross_type: b'N',
        cl_ord_id: *b"1000042       ",
    }
}

/// The Enter Order as the peer holds it: plain fields, strings for the alpha ones.
struct PlainEnterOrder {
    user_ref: u32,
    side: u8,
    qty: u32,
    symbol: String,
    price: i64,
    tif: u8,
    display: u8,
    capacity: u8,
    ise: u8,
    cross_type: u8,
    cl_ord_id: String,
}

fn padded(v: &mut Vec<u8>, text: &str, width: usize) {
    v.extend_from_slice(text.as_bytes());
    v.resize(v.len() + width - text.len(), b' ');
}

fn peer_ouch_encode(o: &PlainEnterOrder) -> Vec<u8> {
    let mut v = Vec::new();
    v.push(b'O');
    v.extend_from_slice(&o.user_ref.to_be_bytes());
    v.push(o.side);
    v.extend_from_slice(&o.qty.to_be_bytes());
    padded(&mut v, &o.symbol, 8);
    v.extend_from_slice(&o.price.to_be_bytes());
    v.extend_from_slice(&[o.tif, o.display, o.capacity, o.ise, o.cross_type]);
    padded(&mut v, &o.cl_ord_id, 14);
    v.extend_from_slice(&0u16.to_be_bytes()); // no appendages
    v
}

/// Order Accepted as the peer reads it.
#[derive(Debug, PartialEq)]
struct PlainAccepted {
    timestamp: u64,
    user_ref: u32,
    side: u8,
    qty: u32,
    symbol: String,
    price: i64,
    order_ref: u64,
    state: u8,
    cl_ord_id: String,
}

fn peer_ouch_accepted(msg: &[u8]) -> Option<PlainAccepted> {
    if msg.len() < 64 || msg[0] != b'A' {
        return None;
    }
    let be64 = |at: usize| u64::from_be_bytes(msg[at..at + 8].try_into().expect("8 bytes"));
    let be32 = |at: usize| u32::from_be_bytes(msg[at..at + 4].try_into().expect("4 bytes"));
    let text = |at: usize, n: usize| {
        String::from_utf8_lossy(&msg[at..at + n])
            .trim_end()
            .to_string()
    };
    Some(PlainAccepted {
        timestamp: be64(1),
        user_ref: be32(9),
        side: msg[13],
        qty: be32(14),
        symbol: text(18, 8),
        price: be64(26) as i64,
        order_ref: be64(36),
        state: msg[47],
        cl_ord_id: text(48, 14),
    })
}

fn keel_ouch_accepted(msg: &[u8]) -> Option<PlainAccepted> {
    let Ok(Outbound::Accepted(a)) = decode_outbound(msg, Dialect::SPEC) else {
        return None;
    };
    let trim = |b: &[u8]| String::from_utf8_lossy(b).trim_end().to_string();
    Some(PlainAccepted {
        timestamp: a.timestamp,
        user_ref: a.user_ref,
        side: a.order.side,
        qty: a.order.qty,
        symbol: trim(&a.order.symbol),
        price: a.order.price,
        order_ref: a.order_ref,
        state: a.state,
        cl_ord_id: trim(&a.order.cl_ord_id),
    })
}

fn ouch(c: &mut Criterion) {
    let enter = EnterOrder {
        user_ref: 42,
        order: fields(),
        appendages: &[],
    };
    let plain = PlainEnterOrder {
        user_ref: 42,
        side: b'B',
        qty: 100,
        symbol: "AAPL".to_string(),
        price: 1_005_000,
        tif: b'0',
        display: b'Y',
        capacity: b'A',
        ise: b'N',
        cross_type: b'N',
        cl_ord_id: "1000042".to_string(),
    };
    let mut out = [0u8; 128];
    let n = encode_inbound(&mut out, &Inbound::EnterOrder(enter), Dialect::SPEC).expect("fits");
    assert_eq!(
        peer_ouch_encode(&plain),
        &out[..n],
        "same Enter Order bytes"
    );
    let mut g = c.benchmark_group("codecs/ouch_enter_order_encode");
    g.bench_function("keel", |b| {
        b.iter(|| {
            encode_inbound(
                &mut out,
                &Inbound::EnterOrder(black_box(enter)),
                Dialect::SPEC,
            )
        })
    });
    g.bench_function("vec_to_be_bytes", |b| {
        b.iter(|| peer_ouch_encode(black_box(&plain)))
    });
    g.finish();

    let accepted = Outbound::Accepted(OrderAccepted {
        timestamp: 34_200_000_000_123,
        orig_user_ref: 0,
        user_ref: 42,
        order: fields(),
        order_ref: 7_781,
        state: b'L',
        appendages: &[],
    });
    let mut msg = [0u8; 128];
    let n = encode_outbound(&mut msg, &accepted, Dialect::SPEC).expect("fits");
    let msg = &msg[..n];
    let want = keel_ouch_accepted(msg).expect("keel decodes it");
    assert_eq!(peer_ouch_accepted(msg), Some(want), "same Order Accepted");
    let mut g = c.benchmark_group("codecs/ouch_order_accepted_decode");
    g.bench_function("keel", |b| {
        b.iter(|| match decode_outbound(black_box(msg), Dialect::SPEC) {
            Ok(Outbound::Accepted(a)) => a.user_ref,
            _ => 0,
        })
    });
    g.bench_function("from_be_bytes_strings", |b| {
        b.iter(|| peer_ouch_accepted(black_box(msg)))
    });
    g.finish();
}

// ----- FIX ----------------------------------------------------------------------------------

/// `YYYYMMDD-HH:MM:SS.sss` from Unix nanoseconds, as a `String` (the peer holds strings); the
/// calendar is keel's own (`session::fix::time`), so the two sides differ only in how they
/// build the message.
fn peer_timestamp(unix_ns: u64) -> String {
    String::from_utf8_lossy(&keel::session::fix::time::utc_timestamp(unix_ns)).into_owned()
}

/// The NewOrderSingle keel's `keel_encode` writes, with `write!` into a `String`.
fn peer_fix_encode(n: u64, unix_ns: u64) -> String {
    let stamp = peer_timestamp(unix_ns);
    let mut body = String::new();
    write!(
        body,
        "35=D{SOH}49=KEEL{SOH}56=VENUE{SOH}34={}{SOH}52={stamp}{SOH}11={}{SOH}55=AAPL{SOH}54=1{SOH}60={stamp}{SOH}38=100{SOH}40=2{SOH}44={}{SOH}59=0{SOH}",
        n + 1,
        1_000_000 + n,
        100.5
    )
    .expect("a String takes any write");
    let mut msg = format!("8=FIX.4.4{SOH}9={}{SOH}{body}", body.len());
    let sum = msg.bytes().map(u32::from).sum::<u32>() % 256;
    write!(msg, "10={sum:03}{SOH}").expect("a String takes any write");
    msg
}

/// The ExecutionReport read by splitting on SOH into a map; the same sum `keel_decode` returns.
fn peer_fix_decode(msg: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(msg).ok()?;
    let trailer = text.rfind("\u{1}10=")? + 1;
    let sum = text[..trailer].bytes().map(u32::from).sum::<u32>() % 256;
    let fields: HashMap<u32, &str> = text
        .split(SOH)
        .filter(|f| !f.is_empty())
        .filter_map(|f| {
            let (tag, value) = f.split_once('=')?;
            Some((tag.parse().ok()?, value))
        })
        .collect();
    if fields.get(&10)?.parse::<u32>().ok()? != sum {
        return None;
    }
    let body_start = text.find("\u{1}35=")? + 1;
    if fields.get(&9)?.parse::<usize>().ok()? != trailer - body_start {
        return None;
    }
    let uint = |tag: u32| fields.get(&tag)?.parse::<u64>().ok();
    let px = (fields.get(&31)?.parse::<f64>().ok()? * 10_000.0).round() as u64;
    Some(
        fields.get(&11)?.len() as u64
            + u64::from(fields.get(&150)?.as_bytes()[0])
            + u64::from(fields.get(&39)?.as_bytes()[0])
            + uint(32)?
            + px
            + uint(14)?
            + uint(151)?,
    )
}

fn fix(c: &mut Criterion) {
    let unix_ns = 1_796_193_000_000_000_000u64;
    let mut out = [0u8; 512];
    let n = keel_encode(&mut out, 7, unix_ns);
    assert_eq!(
        peer_fix_encode(7, unix_ns).as_bytes(),
        &out[..n],
        "same NewOrderSingle bytes"
    );
    let mut g = c.benchmark_group("codecs/fix_new_order_single_encode");
    let mut seq = 0u64;
    g.bench_function("keel", |b| {
        b.iter(|| {
            seq += 1;
            keel_encode(&mut out, seq, unix_ns + seq * 1_000)
        })
    });
    g.bench_function("write_string", |b| {
        b.iter(|| {
            seq += 1;
            peer_fix_encode(seq, unix_ns + seq * 1_000)
        })
    });
    g.finish();

    let report = execution_report();
    let limits = Limits::default();
    let mut table = FieldTable::default();
    let want = keel_decode(&mut table, &report, &limits);
    assert_eq!(peer_fix_decode(&report), Some(want), "same values read");
    let mut g = c.benchmark_group("codecs/fix_execution_report_decode");
    g.bench_function("keel", |b| {
        b.iter(|| keel_decode(&mut table, black_box(&report), &limits))
    });
    g.bench_function("split_hashmap", |b| {
        b.iter(|| peer_fix_decode(black_box(&report)))
    });
    g.finish();
}

criterion_group!(benches, ouch, fix);
criterion_main!(benches);
