//! The FIX client's unit tests: sans-IO, messages in and messages out. The codec's own cases
//! (every malformed shape, worst legal and illegal values, a never-panic property) come first.

use super::codec::{self, parse_decimal, Encoder, FieldTable, FixError, Frame, Limits, SOH};
use super::*;
use crate::order::{
    CancelRejectReason, Contradiction, Price, RejectReason, Replace, RequestKind, Side, StrategyId,
    TimeInForce,
};
use proptest::prelude::*;

const LIMITS: Limits = Limits {
    message_max: 4096,
    tags_max: 128,
    field_max: 256,
};

/// `text` with `|` for SOH.
fn soh(text: &str) -> Vec<u8> {
    text.bytes()
        .map(|b| if b == b'|' { SOH } else { b })
        .collect()
}

/// A message as a peer would write it: the fields after MsgType, BodyLength and CheckSum
/// computed by hand here (not by the encoder under test).
fn by_hand(msg_type: &str, fields: &str) -> Vec<u8> {
    let body = format!("35={msg_type}|{fields}");
    let body = soh(&body);
    let mut out = soh(&format!("8=FIX.4.4|9={}|", body.len()));
    out.extend_from_slice(&body);
    let sum = out.iter().fold(0u32, |s, &b| s + u32::from(b)) % 256;
    out.extend_from_slice(&soh(&format!("10={sum:03}|")));
    out
}

fn parse(bytes: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, FixError> {
    let mut table = FieldTable::default();
    let msg = table.parse(bytes, &LIMITS)?;
    Ok(msg.fields().map(|(t, v)| (t, v.to_vec())).collect())
}

// ----- codec --------------------------------------------------------------------------------

#[test]
fn a_message_written_by_hand_frames_and_parses() {
    let m = by_hand("0", "49=VENUE|56=KEEL|34=7|52=20261202-06:30:00.001|");
    assert_eq!(codec::frame(&m, &LIMITS), Frame::Whole { len: m.len() });
    let fields = parse(&m).unwrap();
    let tags: Vec<u32> = fields.iter().map(|f| f.0).collect();
    assert_eq!(tags, [8, 9, 35, 49, 56, 34, 52, 10]);
    assert_eq!(fields[5].1, b"7");
}

#[test]
fn the_encoder_writes_what_a_hand_written_message_holds() {
    let mut out = [0u8; 256];
    let mut e = Encoder::new(&mut out, b"D");
    e.bytes(49, b"KEEL")
        .bytes(56, b"VENUE")
        .uint(34, 12)
        .bytes(11, b"42")
        .decimal(44, 1_005_000, Price::SCALE)
        .decimal(31, -25, Price::SCALE)
        .uint(38, 0);
    let n = e.finish().unwrap();
    let want = by_hand(
        "D",
        "49=KEEL|56=VENUE|34=12|11=42|44=100.5|31=-0.0025|38=0|",
    );
    assert_eq!(
        String::from_utf8_lossy(&out[..n]),
        String::from_utf8_lossy(&want)
    );
}

#[test]
fn a_buffer_too_small_is_an_error_not_a_cut_message() {
    for size in [0, 10, 19, 30, 40] {
        let mut out = vec![0u8; size];
        let mut e = Encoder::new(&mut out, b"0");
        e.bytes(49, b"KEEL").bytes(56, b"VENUE").uint(34, 1);
        assert!(e.finish().is_err(), "{size}");
    }
}

#[test]
fn every_prefix_of_a_message_is_incomplete() {
    let m = by_hand("0", "49=VENUE|56=KEEL|34=1|52=20261202-06:30:00.001|");
    for end in 0..m.len() {
        assert_eq!(
            codec::frame(&m[..end], &LIMITS),
            Frame::Incomplete,
            "prefix of {end} bytes"
        );
    }
}

#[test]
fn framing_errors_name_what_is_wrong() {
    let cases: [(&[u8], &str); 6] = [
        (b"8=FIX.4.2\x019=5\x01", "BeginString"),
        (b"9=5\x018=FIX.4.4\x01", "BeginString"),
        (b"8=FIX.4.4\x019=x\x01", "BodyLength"),
        (b"8=FIX.4.4\x019=1234567\x01", "BodyLength"),
        (b"8=FIX.4.4\x0135=0\x01", "BodyLength"),
        (b"8=FIX.4.4\x019=999999\x01", "exceeds message_max"),
    ];
    for (bytes, what) in cases {
        let Frame::Garbled { error, len } = codec::frame(bytes, &LIMITS) else {
            panic!("{bytes:?} not garbled")
        };
        assert!(error.to_string().contains(what), "{error} for {bytes:?}");
        // Discarded up to the next BeginString, or all of them when none follows.
        let next = bytes
            .windows(codec::BEGIN_STRING.len())
            .skip(1)
            .position(|w| w == codec::BEGIN_STRING)
            .map_or(bytes.len(), |at| at + 1);
        assert_eq!(len, next, "{bytes:?}");
    }
}

#[test]
fn a_wrong_checksum_or_misplaced_trailer_is_a_garbled_message() {
    let mut m = by_hand("0", "49=VENUE|56=KEEL|34=1|");
    let at = m.len() - 2;
    m[at] = if m[at] == b'9' { b'0' } else { b'9' };
    assert!(matches!(
        codec::frame(&m, &LIMITS),
        Frame::Garbled { error: FixError::CheckSum { .. }, len } if len == m.len()
    ));
    // BodyLength one short: the trailer is not where it says.
    let good = by_hand("0", "49=VENUE|56=KEEL|34=1|");
    let body_length = good.len() - "8=FIX.4.4|9=22|".len() - "10=000|".len();
    assert_eq!(body_length, 27);
    let text = String::from_utf8_lossy(&good).replace("9=27", "9=26");
    let short = text.as_bytes().to_vec();
    assert!(matches!(
        codec::frame(&short, &LIMITS),
        Frame::Garbled {
            error: FixError::Trailer { .. },
            ..
        }
    ));
}

#[test]
fn malformed_fields_are_refused_by_name() {
    let cases: [(&str, &str, &str); 6] = [
        ("0", "49=VENUE|56KEEL|34=1|", "garbled field"),
        ("0", "49=VENUE|056=KEEL|34=1|", "garbled field"),
        ("0", "49=VENUE|56=|34=1|", "non-empty"),
        ("0", "49=VENUE|=KEEL|34=1|", "garbled field"),
        ("0", "49=VENUE|4294967296=1|34=1|", "garbled field"),
        ("0", "49=VENUE|-5=1|34=1|", "garbled field"),
    ];
    for (t, fields, what) in cases {
        let m = by_hand(t, fields);
        let e = parse(&m).unwrap_err();
        assert!(e.to_string().contains(what), "{e} for {fields}");
    }
    // MsgType not third.
    let mut m = soh("8=FIX.4.4|9=12|49=VENUE|35=0|");
    let sum = m.iter().fold(0u32, |s, &b| s + u32::from(b)) % 256;
    m.extend_from_slice(&soh(&format!("10={sum:03}|")));
    assert!(matches!(
        parse(&m),
        Err(FixError::HeaderOrder {
            expected: 35,
            found: 49
        })
    ));
}

#[test]
fn the_bounds_hold_at_their_worst_legal_value_and_refuse_one_more() {
    let limits = Limits {
        message_max: 4096,
        tags_max: 10,
        field_max: 8,
    };
    // 10 fields in all (8, 9, 35, six more, 10): legal; one more is refused.
    let mut table = FieldTable::default();
    let legal = by_hand("0", "1=a|2=b|3=c|4=d|5=e|6=f|");
    assert_eq!(table.parse(&legal, &limits).unwrap().fields().count(), 10);
    let over = by_hand("0", "1=a|2=b|3=c|4=d|5=e|6=f|7=g|");
    assert!(matches!(
        table.parse(&over, &limits),
        Err(FixError::TooManyFields { max: 10 })
    ));
    let limits = Limits {
        tags_max: 128,
        ..limits
    };
    let eight = by_hand("0", "58=12345678|");
    assert!(table.parse(&eight, &limits).is_ok());
    let nine = by_hand("0", "58=123456789|");
    assert!(matches!(
        table.parse(&nine, &limits),
        Err(FixError::FieldTooLong {
            tag: 58,
            len: 9,
            max: 8
        })
    ));
}

#[test]
fn decimals_are_exact_or_refused() {
    let ok: [(&str, i64); 9] = [
        ("0", 0),
        ("100", 1_000_000),
        ("100.5", 1_005_000),
        ("100.5000", 1_005_000),
        ("100.50000000", 1_005_000),
        ("-0.0001", -1),
        (".5", 5_000),
        ("7.", 70_000),
        ("922337203685477.5807", i64::MAX),
    ];
    for (text, units) in ok {
        assert_eq!(
            parse_decimal(44, text.as_bytes(), Price::SCALE),
            Ok(units),
            "{text}"
        );
    }
    for bad in [
        "",
        "-",
        ".",
        "1.00001",
        "1e5",
        "+1",
        "1,5",
        "1000000000000000",
        "999999999999999",
        "922337203685477.5808",
        "0x10",
        "1.2.3",
    ] {
        let e = parse_decimal(44, bad.as_bytes(), Price::SCALE).unwrap_err();
        assert!(e.to_string().contains("tag 44"), "{bad}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn no_bytes_make_the_codec_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut with_header = b"8=FIX.4.4\x019=".to_vec();
        with_header.extend_from_slice(&bytes);
        for input in [&bytes, &with_header] {
            if let Frame::Whole { len } | Frame::Garbled { len, .. } = codec::frame(input, &LIMITS) {
                prop_assert!(len <= input.len());
                prop_assert!(len >= 1);
                let mut table = FieldTable::default();
                let _ = table.parse(&input[..len], &LIMITS);
            }
        }
    }

    #[test]
    fn what_the_encoder_writes_parses_back(
        values in proptest::collection::vec((1u32..100_000, "[ -~&&[^=|]]{1,40}"), 0..30),
        price in any::<i64>(),
    ) {
        let mut out = [0u8; 4096];
        let mut e = Encoder::new(&mut out, b"8");
        for (tag, value) in &values {
            e.bytes(*tag, value.as_bytes());
        }
        e.decimal(44, price, Price::SCALE);
        let n = e.finish().unwrap();
        prop_assert_eq!(codec::frame(&out[..n], &LIMITS), Frame::Whole { len: n });
        let mut table = FieldTable::default();
        let msg = table.parse(&out[..n], &LIMITS).unwrap();
        let got: Vec<(u32, Vec<u8>)> = msg.fields().skip(3).map(|(t, v)| (t, v.to_vec())).collect();
        for (i, (tag, value)) in values.iter().enumerate() {
            prop_assert_eq!(&got[i], &(*tag, value.as_bytes().to_vec()));
        }
        let (tag, text) = &got[values.len()];
        prop_assert_eq!(*tag, 44);
        prop_assert_eq!(parse_decimal(44, text, Price::SCALE), Ok(price));
    }
}

// ----- the session --------------------------------------------------------------------------

const SYMBOLS: [SymbolName; 1] = [*b"AAPL    "];

fn setup() -> LinkSetup<'static> {
    LinkSetup {
        venue: VenueId(0),
        username: "trader",
        password: "secret",
        orders_max: 8,
        ack_timeout_ns: 1_000,
        symbols: &SYMBOLS,
        heartbeat_interval_ns: 30_000_000_000,
        unix_ns_at_origin: 1_796_193_000_000_000_000,
    }
}

fn client() -> FixClient {
    FixClient::new(FixSettings::default(), &setup())
}

/// What the venue sends: its CompIDs, number `seq`, a SendingTime.
fn venue(msg_type: &str, seq: u64, fields: &str) -> Vec<u8> {
    by_hand(
        msg_type,
        &format!("49=VENUE|56=KEEL|34={seq}|52=20261202-06:30:00.001|{fields}"),
    )
}

/// Feeds one whole message; returns the news and the outcomes.
fn feed(c: &mut FixClient, bytes: &[u8]) -> (SessionNews, Vec<OutcomeKind>) {
    let mut out = Vec::new();
    let m = c
        .decode(5, bytes, 4096, &mut |o| out.push(o.kind))
        .unwrap()
        .expect("a whole message");
    assert_eq!(m.len, bytes.len());
    (m.news, out)
}

/// Every session message the client owes, as (MsgType, fields).
fn owed(c: &mut FixClient) -> Vec<(String, Vec<(u32, String)>)> {
    let mut all = Vec::new();
    let mut out = [0u8; 1024];
    while let Some(n) = c.encode_session(7, &mut out) {
        all.push(fields_of(&out[..n]));
    }
    all
}

fn fields_of(bytes: &[u8]) -> (String, Vec<(u32, String)>) {
    assert_eq!(
        codec::frame(bytes, &LIMITS),
        Frame::Whole { len: bytes.len() }
    );
    let f = parse(bytes).unwrap();
    let msg_type = String::from_utf8(f[2].1.clone()).unwrap();
    let fields = f
        .into_iter()
        .map(|(t, v)| (t, String::from_utf8(v).unwrap()))
        .collect();
    (msg_type, fields)
}

fn get(fields: &[(u32, String)], tag: u32) -> Option<&str> {
    fields.iter().find(|f| f.0 == tag).map(|f| f.1.as_str())
}

/// The id of the `n`th request a client of [`setup`] issues (the wall clock at its start in
/// microseconds, plus `n`).
fn id_of(n: u64) -> u64 {
    setup().unix_ns_at_origin / 1_000 + n
}

/// A client logged on: Logon sent (its number 1) and the venue's Logon (number 1) read.
fn logged_on() -> FixClient {
    let mut c = client();
    let mut out = [0u8; 512];
    c.encode_login(0, &mut out).unwrap();
    let (news, _) = feed(&mut c, &venue("A", 1, "98=0|108=30|"));
    assert_eq!(news, SessionNews::LoggedIn { next_seq: 2 });
    c
}

#[test]
fn the_logon_carries_the_session_settings() {
    let mut c = client();
    let mut out = [0u8; 512];
    let n = c.encode_login(0, &mut out).unwrap();
    let (t, f) = fields_of(&out[..n]);
    assert_eq!(t, "A");
    for (tag, value) in [
        (49, "KEEL"),
        (56, "VENUE"),
        (34, "1"),
        (52, "20261202-06:30:00.000"),
        (98, "0"),
        (108, "30"),
        (553, "trader"),
        (554, "secret"),
        (789, "1"),
    ] {
        assert_eq!(get(&f, tag), Some(value), "tag {tag}");
    }
    assert_eq!(get(&f, 141), None);
    let mut reset = FixClient::new(
        FixSettings {
            reset_on_logon: true,
            ..FixSettings::default()
        },
        &setup(),
    );
    let n = reset.encode_login(0, &mut out).unwrap();
    assert_eq!(get(&fields_of(&out[..n]).1, 141), Some("Y"));
}

#[test]
fn a_test_request_is_answered_with_its_id() {
    let mut c = logged_on();
    feed(&mut c, &venue("1", 2, "112=ping-7|"));
    let answers = owed(&mut c);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, "0");
    assert_eq!(get(&answers[0].1, 112), Some("ping-7"));
    assert_eq!(get(&answers[0].1, 34), Some("2"));
    assert_eq!(c.in_seq(), 3);
}

#[test]
fn a_gap_asks_once_for_a_resend_and_a_gap_fill_closes_it() {
    let mut c = logged_on();
    // 2 and 3 are lost; 4 arrives, then 5: one ResendRequest from 2 to infinity.
    feed(&mut c, &venue("0", 4, ""));
    feed(&mut c, &venue("0", 5, ""));
    let asked = owed(&mut c);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, "2");
    assert_eq!(get(&asked[0].1, 7), Some("2"));
    assert_eq!(get(&asked[0].1, 16), Some("0"));
    assert_eq!(c.in_seq(), 2);
    // The venue fills 2..=5 (its session messages) and resends nothing.
    feed(
        &mut c,
        &venue("4", 2, "43=Y|122=20261202-06:30:00.000|123=Y|36=6|"),
    );
    assert_eq!(c.in_seq(), 6);
    assert_eq!(c.fix_stats().resend_requests_sent, 1);
    // A later gap asks again.
    feed(&mut c, &venue("0", 8, ""));
    assert_eq!(owed(&mut c)[0].0, "2");
    assert_eq!(c.fix_stats().resend_requests_sent, 2);
}

#[test]
fn a_resend_request_is_answered_with_a_gap_fill_never_a_resend() {
    let mut c = logged_on();
    let mut out = [0u8; 512];
    for _ in 0..3 {
        c.encode_heartbeat(1, &mut out).unwrap();
    }
    // keel sent 1..=4; the venue asks from 2.
    feed(&mut c, &venue("2", 2, "7=2|16=0|"));
    let fill = owed(&mut c);
    assert_eq!(fill.len(), 1);
    let (t, f) = &fill[0];
    assert_eq!(t, "4");
    assert_eq!(get(f, 34), Some("2"));
    assert_eq!(get(f, 43), Some("Y"));
    assert_eq!(get(f, 123), Some("Y"));
    assert_eq!(get(f, 36), Some("5"));
    assert!(get(f, 122).is_some());
    // The gap fill took no number of its own.
    assert_eq!(c.out_seq(), 5);
    // A BeginSeqNo keel never sent is refused with a Reject, not a fill.
    feed(&mut c, &venue("2", 3, "7=9|16=0|"));
    let r = owed(&mut c);
    assert_eq!(r[0].0, "3");
    assert_eq!(get(&r[0].1, 45), Some("3"));
    assert_eq!(get(&r[0].1, 371), Some("7"));
}

#[test]
fn a_number_too_low_ends_the_session_unless_a_possible_duplicate() {
    let mut c = logged_on();
    feed(&mut c, &venue("0", 2, ""));
    let (news, _) = feed(&mut c, &venue("0", 2, "43=Y|122=20261202-06:30:00.000|"));
    assert_eq!(news, SessionNews::Nothing);
    assert_eq!(c.fix_stats().poss_dup_skipped, 1);
    let (news, _) = feed(&mut c, &venue("0", 1, ""));
    assert_eq!(news, SessionNews::EndOfSession);
    let logout = owed(&mut c);
    assert_eq!(logout[0].0, "5");
    assert_eq!(get(&logout[0].1, 58), Some("MsgSeqNum too low"));
    assert_eq!(c.fix_stats().seq_too_low, 1);
}

#[test]
fn a_garbled_message_is_ignored_and_its_number_not_taken() {
    let mut c = logged_on();
    let mut m = venue("0", 2, "");
    let at = m.len() - 3;
    m[at] = if m[at] == b'1' { b'2' } else { b'1' };
    let (news, out) = feed(&mut c, &m);
    assert_eq!((news, out.len()), (SessionNews::Unreadable, 0));
    assert_eq!(c.fix_stats().garbled, 1);
    assert_eq!(c.in_seq(), 2);
    feed(&mut c, &venue("0", 2, ""));
    assert_eq!(c.in_seq(), 3);
}

#[test]
fn another_comp_id_is_refused_and_the_session_ended() {
    let mut c = logged_on();
    let m = by_hand("0", "49=MALLORY|56=KEEL|34=2|52=20261202-06:30:00.001|");
    let (news, _) = feed(&mut c, &m);
    assert_eq!(news, SessionNews::EndOfSession);
    let sent = owed(&mut c);
    assert_eq!(sent[0].0, "3");
    assert_eq!(get(&sent[0].1, 373), Some("9"));
    assert_eq!(sent[1].0, "5");
}

#[test]
fn a_message_type_keel_does_not_read_is_rejected_and_counted() {
    let mut c = logged_on();
    feed(&mut c, &venue("W", 2, "55=AAPL|"));
    let r = owed(&mut c);
    assert_eq!(r[0].0, "3");
    assert_eq!(get(&r[0].1, 373), Some("11"));
    assert_eq!(get(&r[0].1, 372), Some("W"));
    assert_eq!(c.fix_stats().unsupported, 1);
    assert_eq!(c.in_seq(), 3);
}

#[test]
fn the_first_message_must_be_a_logon_with_the_interval_asked_for() {
    let mut c = client();
    let mut out = [0u8; 512];
    c.encode_login(0, &mut out).unwrap();
    assert_eq!(
        feed(&mut c, &venue("0", 1, "")).0,
        SessionNews::EndOfSession
    );
    let mut c = client();
    c.encode_login(0, &mut out).unwrap();
    assert_eq!(
        feed(&mut c, &venue("A", 1, "98=0|108=5|")).0,
        SessionNews::EndOfSession
    );
}

#[test]
fn a_silent_interval_sends_one_test_request() {
    let mut c = logged_on();
    let interval = 30_000_000_000u64;
    c.expire(interval, &mut |_| {});
    assert!(owed(&mut c).is_empty());
    c.expire(interval * 2, &mut |_| {});
    c.expire(interval * 3, &mut |_| {});
    let sent = owed(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, "1");
    assert_eq!(c.fix_stats().test_requests_sent, 1);
    // Its Heartbeat clears it.
    feed(&mut c, &venue("0", 2, "112=1|"));
    c.expire(interval * 5, &mut |_| {});
    assert_eq!(owed(&mut c).len(), 1);
}

fn order(n: u64, qty: u32) -> NewOrder {
    NewOrder {
        id: ClientOrderId::new(StrategyId(0), n).unwrap(),
        venue: VenueId(0),
        symbol: SymbolId(0),
        side: Side::Buy,
        price: Price::from_units(100, 5000),
        qty,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

fn send(c: &mut FixClient, kind: RequestKind, wire_ref: u32) -> (String, Vec<(u32, String)>) {
    let mut out = [0u8; 512];
    let n = c
        .encode_request(
            &VenueRequest {
                venue: VenueId(0),
                sent_ns: 10,
                wire_ref,
                kind,
            },
            &mut out,
        )
        .unwrap();
    fields_of(&out[..n])
}

#[test]
fn an_order_is_accepted_filled_in_parts_and_a_second_canceled() {
    let mut c = logged_on();
    let o = order(1, 100);
    let (t, f) = send(&mut c, RequestKind::New(o), 7);
    assert_eq!(t, "D");
    for (tag, value) in [
        (11, "7"),
        (55, "AAPL"),
        (54, "1"),
        (38, "100"),
        (40, "2"),
        (44, "100.5"),
        (59, "0"),
    ] {
        assert_eq!(get(&f, tag), Some(value), "tag {tag}");
    }
    let er = |seq, fields: &str| venue("8", seq, &format!("37=X|17=E{seq}|{fields}"));
    let (_, out) = feed(
        &mut c,
        &er(2, "11=7|150=0|39=0|55=AAPL|54=1|151=100|14=0|6=0|"),
    );
    assert_eq!(out, [OutcomeKind::Accepted { id: o.id }]);
    let (_, out) = feed(
        &mut c,
        &er(3, "11=7|150=F|39=1|32=40|31=100.5|151=60|14=40|6=100.5|"),
    );
    assert_eq!(
        out,
        [OutcomeKind::Fill {
            id: o.id,
            qty: 40,
            price: Price::from_units(100, 5000)
        }]
    );
    let (_, out) = feed(
        &mut c,
        &er(4, "11=7|150=F|39=2|32=60|31=100.4|151=0|14=100|6=100.46|"),
    );
    assert_eq!(out.len(), 1);
    // A fill after the order is done is a contradiction, never booked.
    let (news, out) = feed(
        &mut c,
        &er(5, "11=7|150=F|39=2|32=1|31=100.4|151=0|14=101|6=100.46|"),
    );
    assert_eq!(news, SessionNews::Contradicted(Contradiction::AfterClose));
    // Never into the order; into the position all the same (the venue says shares moved),
    // journaled with it, and handed to the dispatcher for risk.
    let booked = crate::order::Execution {
        symbol: SymbolId(0),
        side: Side::Buy,
        qty: 1,
        price: Price::from_units(100, 4000),
    };
    assert_eq!(
        out,
        [
            OutcomeKind::Contradiction {
                id: Some(o.id),
                what: Contradiction::AfterClose
            },
            OutcomeKind::UnmatchedExecution { execution: booked },
            OutcomeKind::PositionBaseline {
                symbol: SymbolId(0),
                position: Position {
                    bought: 101,
                    sold: 0
                }
            },
        ]
    );
    assert_eq!(c.position(SymbolId(0)).bought, 101);
    assert_eq!(c.stats().last_unmatched_execution, Some(booked));

    let second = order(2, 10);
    send(&mut c, RequestKind::New(second), 8);
    feed(&mut c, &er(6, "11=8|150=0|39=0|151=10|14=0|6=0|"));
    let (t, f) = send(&mut c, RequestKind::Cancel { id: second.id }, 0);
    assert_eq!(t, "F");
    assert_eq!((get(&f, 41), get(&f, 11)), (Some("8"), Some("8-1")));
    let (_, out) = feed(&mut c, &er(7, "11=8-1|41=8|150=4|39=4|151=0|14=0|6=0|"));
    assert_eq!(out, [OutcomeKind::Canceled { id: second.id }]);
    // A second cancel of a closed order has a new ClOrdID; its reject maps.
    let (_, f) = send(&mut c, RequestKind::Cancel { id: second.id }, 0);
    assert_eq!(get(&f, 11), Some("8-2"));
    let (_, out) = feed(&mut c, &venue("9", 8, "37=X|11=8-2|41=8|39=4|434=1|102=0|"));
    assert_eq!(
        out,
        [OutcomeKind::CancelRejected {
            id: second.id,
            reason: CancelRejectReason::TooLateToCancel
        }]
    );
}

#[test]
fn an_overfill_and_a_price_through_the_limit_are_contradictions() {
    let mut c = logged_on();
    let o = order(1, 10);
    send(&mut c, RequestKind::New(o), 1);
    let (news, _) = feed(
        &mut c,
        &venue(
            "8",
            2,
            "37=X|17=E1|11=1|150=F|39=2|32=11|31=100|151=0|14=11|6=100|",
        ),
    );
    assert_eq!(news, SessionNews::Contradicted(Contradiction::Overfill));
    let o = order(2, 10);
    send(&mut c, RequestKind::New(o), 2);
    let (news, _) = feed(
        &mut c,
        &venue(
            "8",
            3,
            "37=X|17=E2|11=2|150=F|39=1|32=1|31=100.5001|151=9|14=1|6=100|",
        ),
    );
    assert_eq!(
        news,
        SessionNews::Contradicted(Contradiction::ExecutionPrice)
    );
}

#[test]
fn a_replace_sends_the_total_quantity_and_maps_back() {
    let mut c = logged_on();
    let o = order(1, 100);
    send(&mut c, RequestKind::New(o), 1);
    feed(
        &mut c,
        &venue(
            "8",
            2,
            "37=X|17=E|11=1|150=F|39=1|32=30|31=100|151=70|14=30|6=100|",
        ),
    );
    let new_id = ClientOrderId::new(StrategyId(0), 2).unwrap();
    let (t, f) = send(
        &mut c,
        RequestKind::Replace(Replace {
            id: o.id,
            new_id,
            price: Price::from_units(100, 0),
            qty: 50,
        }),
        2,
    );
    assert_eq!(t, "G");
    assert_eq!(
        (get(&f, 41), get(&f, 11), get(&f, 38)),
        (Some("1"), Some("2"), Some("80"))
    );
    let (_, out) = feed(
        &mut c,
        &venue("8", 3, "37=X|17=E|11=2|41=1|150=5|39=5|151=50|14=30|6=100|"),
    );
    assert_eq!(out, [OutcomeKind::Replaced { id: o.id, new_id }]);
}

#[test]
fn a_status_of_a_replaced_order_counts_its_own_shares_not_the_chains() {
    // FIX's CumQty runs over the chain: 30 shares before the replace, 5 after it. keel's
    // replacement holds 50 shares of its own, so only the 5 may be booked (booking 35 would
    // double the 30 filled on the original).
    let mut c = logged_on();
    let o = order(1, 100);
    send(&mut c, RequestKind::New(o), 1);
    feed(
        &mut c,
        &venue(
            "8",
            2,
            "37=X|17=E|11=1|150=F|39=1|32=30|31=100|151=70|14=30|6=100|",
        ),
    );
    let new_id = ClientOrderId::new(StrategyId(0), 2).unwrap();
    send(
        &mut c,
        RequestKind::Replace(Replace {
            id: o.id,
            new_id,
            price: Price::from_units(100, 0),
            qty: 50,
        }),
        2,
    );
    feed(
        &mut c,
        &venue(
            "8",
            3,
            "37=X|17=E|11=2|41=1|150=5|39=0|38=80|151=50|14=30|6=100|",
        ),
    );
    send(&mut c, RequestKind::Query { id: new_id }, 3);
    let (_, out) = feed(
        &mut c,
        &venue(
            "8",
            4,
            &format!(
                "790={}|37=X|17=E|11=2|150=I|39=1|38=80|151=45|14=35|6=100|",
                id_of(1)
            ),
        ),
    );
    assert_eq!(
        out,
        [
            OutcomeKind::Fill {
                id: new_id,
                qty: 5,
                price: Price::from_units(100, 0),
            },
            OutcomeKind::StillOpen { id: new_id },
        ]
    );
}

#[test]
fn rejects_map_through_the_reject_table() {
    let mut c = logged_on();
    for (i, (code, reason)) in [
        (100u32, RejectReason::VenueThrottle),
        (101, RejectReason::VenueSystem),
        (6, RejectReason::DuplicateId),
        (2, RejectReason::MarketClosed),
        (77, RejectReason::Other(77)),
    ]
    .into_iter()
    .enumerate()
    {
        let o = order(i as u64 + 1, 10);
        send(&mut c, RequestKind::New(o), i as u32 + 1);
        let (_, out) = feed(
            &mut c,
            &venue(
                "8",
                i as u64 + 2,
                &format!(
                    "37=X|17=E|11={}|150=8|39=8|103={code}|151=0|14=0|6=0|",
                    i + 1
                ),
            ),
        );
        assert_eq!(out, [OutcomeKind::Rejected { id: o.id, reason }]);
    }
}

#[test]
fn a_report_missing_a_required_field_is_rejected_not_guessed() {
    let mut c = logged_on();
    send(&mut c, RequestKind::New(order(1, 10)), 1);
    // A Trade without LastQty.
    let (_, out) = feed(
        &mut c,
        &venue("8", 2, "37=X|17=E|11=1|150=F|39=1|31=100|151=9|14=1|6=100|"),
    );
    assert!(out.is_empty());
    let r = owed(&mut c);
    assert_eq!(r[0].0, "3");
    assert_eq!(get(&r[0].1, 371), Some("32"));
    assert_eq!(get(&r[0].1, 373), Some("1"));
}

#[test]
fn mass_status_reconciles_what_the_venue_lists() {
    let mut c = logged_on();
    let open = order(1, 10);
    let gone = order(2, 10);
    let filled = order(3, 10);
    for (i, o) in [open, gone, filled].iter().enumerate() {
        send(&mut c, RequestKind::New(*o), i as u32 + 1);
    }
    feed(
        &mut c,
        &venue("8", 2, "37=X|17=E|11=1|150=0|39=0|151=10|14=0|6=0|"),
    );
    feed(
        &mut c,
        &venue("8", 3, "37=X|17=E|11=3|150=0|39=0|151=10|14=0|6=0|"),
    );
    let mut out = [0u8; 512];
    let n = c.encode_reconcile_query(9, &mut out).unwrap();
    let (t, f) = fields_of(&out[..n]);
    assert_eq!((t.as_str(), get(&f, 585)), ("AF", Some("7")));
    let id = get(&f, 584).unwrap().to_string();
    // The venue lists order 1 open and order 3 filled while keel was away; order 2 (never
    // acknowledged) is not listed.
    feed(
        &mut c,
        &venue(
            "8",
            4,
            &format!("584={id}|911=2|37=X|17=E|11=1|150=I|39=0|151=10|14=0|6=0|"),
        ),
    );
    let (news, kinds) = feed(
        &mut c,
        &venue(
            "8",
            5,
            &format!("584={id}|911=2|912=Y|37=X|17=E|11=3|150=I|39=2|151=0|14=10|6=100|"),
        ),
    );
    let SessionNews::Reconciled(r) = news else {
        panic!("{news:?}")
    };
    assert_eq!(
        kinds,
        [
            OutcomeKind::Fill {
                id: filled.id,
                qty: 10,
                price: Price::from_units(100, 0)
            },
            OutcomeKind::Timeout { id: gone.id },
        ]
    );
    // keel had no sequence of its own to resume: the unlisted order is in doubt, not "not
    // received".
    assert_eq!((r.in_doubt, r.not_received, r.unknown_at_keel), (1, 0, 0));
}

#[test]
fn a_timeout_means_unknown_and_the_query_asks_the_status() {
    let mut c = logged_on();
    let o = order(1, 10);
    send(&mut c, RequestKind::New(o), 1);
    let mut out = Vec::new();
    c.expire(10 + 1_000, &mut |x| out.push(x.kind));
    assert!(out.contains(&OutcomeKind::Timeout { id: o.id }));
    let (t, f) = send(&mut c, RequestKind::Query { id: o.id }, 0);
    assert_eq!((t.as_str(), get(&f, 11)), ("H", Some("1")));
    let req = get(&f, 790).unwrap().to_string();
    let (_, kinds) = feed(
        &mut c,
        &venue(
            "8",
            2,
            &format!("790={req}|37=X|17=E|11=1|150=I|39=8|103=5|151=0|14=0|6=0|"),
        ),
    );
    assert_eq!(
        kinds,
        [OutcomeKind::Rejected {
            id: o.id,
            reason: RejectReason::NotReceived
        }]
    );
}

#[test]
fn the_state_resumes_both_numbers_and_refuses_another_session() {
    let mut c = client();
    let mut out = [0u8; 512];
    c.encode_login(0, &mut out).unwrap();
    let (_, kinds) = feed(&mut c, &venue("A", 1, "98=0|108=30|"));
    let states: Vec<ProtocolState> = kinds
        .iter()
        .filter_map(|k| match k {
            OutcomeKind::ProtocolState { state } => Some(*state),
            _ => None,
        })
        .collect();
    assert_eq!(
        states.len(),
        1,
        "one reservation journaled at the first message"
    );
    let state = states[0];
    // Nothing more is journaled until half the block is used.
    let mut more = 0;
    c.expire(1, &mut |_| more += 1);
    assert_eq!(more, 0);
    let mut again = client();
    again.restore_state(&state).unwrap();
    assert!(again.out_seq() >= c.out_seq() + OUT_SEQ_BLOCK / 2);
    assert_eq!(again.in_seq(), c.in_seq());
    let other = FixSettings {
        sender_comp_id: "OTHER".into(),
        ..FixSettings::default()
    };
    let mut stranger = FixClient::new(other, &setup());
    assert!(stranger
        .restore_state(&state)
        .unwrap_err()
        .to_string()
        .contains("other CompIDs"));
    let ouch = ProtocolState::new(1, 1, b"SESSION001").unwrap();
    assert!(matches!(
        again.restore_state(&ouch),
        Err(StateError::OtherProtocol { found: 1, .. })
    ));
    let zero = ProtocolState::new(FixClient::STATE_TAG, 1, &[0; 20]).unwrap();
    assert!(again.restore_state(&zero).is_err());
}

// ----- session-level cases, after the FIX community's session test cases ---------------------

#[test]
fn a_header_without_sending_time_is_rejected_and_its_number_taken() {
    let mut c = logged_on();
    let m = by_hand("0", "49=VENUE|56=KEEL|34=2|");
    assert_eq!(feed(&mut c, &m).0, SessionNews::Nothing);
    let r = owed(&mut c);
    assert_eq!(
        (r[0].0.as_str(), get(&r[0].1, 371), get(&r[0].1, 373)),
        ("3", Some("52"), Some("1"))
    );
    assert_eq!(c.in_seq(), 3);
}

#[test]
fn a_resent_message_without_orig_sending_time_is_rejected() {
    let mut c = logged_on();
    feed(&mut c, &venue("0", 2, "43=Y|"));
    let r = owed(&mut c);
    assert_eq!(
        (get(&r[0].1, 371), get(&r[0].1, 373)),
        (Some("122"), Some("1"))
    );
    assert_eq!(c.in_seq(), 3);
    // With it, the possible duplicate in sequence is handled.
    feed(
        &mut c,
        &venue("1", 3, "43=Y|122=20261202-06:29:59.000|112=X|"),
    );
    assert_eq!(get(&owed(&mut c)[0].1, 112), Some("X"));
}

#[test]
fn a_body_length_too_long_or_too_short_is_discarded_and_the_parser_resyncs() {
    // Goal (issue 38): a frame whose BodyLength lies is garbled — discarded up to the next
    // BeginString, its number not taken — and the message after it is read; the session stays
    // up and asks for the lost number as a gap. Worst legal neighbour: the next message right
    // behind it; worst illegal: a BodyLength past message_max, and bytes with no BeginString.
    let mut c = logged_on();
    let good = venue("0", 2, "");
    let text = String::from_utf8_lossy(&good).to_string();
    let digits = text.split('\u{1}').nth(1).unwrap()[2..]
        .parse::<usize>()
        .unwrap();
    let next = venue("0", 3, "");
    for lie in [
        format!("9={}", digits - 1),
        format!("9={}", digits + 1),
        "9=999999".to_string(),
        "9=x".to_string(),
    ] {
        let mut c = logged_on();
        let mut stream = text.replacen(&format!("9={digits}"), &lie, 1).into_bytes();
        stream.extend_from_slice(&next);
        let m = c.decode(5, &stream, 4096, &mut |_| {}).unwrap().unwrap();
        assert_eq!(
            (m.len, m.news),
            (stream.len() - next.len(), SessionNews::Unreadable),
            "{lie}"
        );
        assert_eq!((c.fix_stats().garbled, c.in_seq()), (1, 2), "{lie}");
        let (news, _) = feed(&mut c, &stream[m.len..]);
        assert_eq!(news, SessionNews::Nothing, "{lie}: the session goes on");
        let asked = owed(&mut c);
        assert_eq!(asked[0].0, "2", "{lie}: the lost number is asked for");
        assert_eq!(get(&asked[0].1, 7), Some("2"));
    }
    // Bytes that begin no message at all: discarded (all but a tail that may begin one).
    let junk = b"garbage\x01more8=FI";
    let m = c.decode(5, junk, 4096, &mut |_| {}).unwrap().unwrap();
    assert_eq!((m.len, m.news), (junk.len() - 4, SessionNews::Unreadable));
    assert_eq!(c.in_seq(), 2);
}

#[test]
fn a_logon_with_a_number_too_high_is_accepted_then_the_gap_asked_for() {
    let mut c = client();
    let mut out = [0u8; 512];
    c.encode_login(0, &mut out).unwrap();
    let (news, _) = feed(&mut c, &venue("A", 5, "98=0|108=30|"));
    assert_eq!(news, SessionNews::LoggedIn { next_seq: 1 });
    let asked = owed(&mut c);
    assert_eq!((asked[0].0.as_str(), get(&asked[0].1, 7)), ("2", Some("1")));
    // The venue fills 1..=4 with a SequenceReset-GapFill numbered 1; its Logon (5) is not
    // resent (an administrative message), so 5 comes as a further fill or the next message.
    feed(
        &mut c,
        &venue("4", 1, "43=Y|122=20261202-06:30:00.000|123=Y|36=6|"),
    );
    assert_eq!(c.in_seq(), 6);
}

#[test]
fn a_sequence_reset_reset_moves_forward_only() {
    let mut c = logged_on();
    feed(&mut c, &venue("4", 99, "36=10|"));
    assert_eq!(c.in_seq(), 10);
    // Backwards: refused with a Reject, the expectation kept.
    feed(&mut c, &venue("4", 10, "36=3|"));
    assert_eq!(c.in_seq(), 10);
    assert_eq!(owed(&mut c)[0].0, "3");
}

#[test]
fn averages_round_and_trade_prices_do_not() {
    use codec::parse_decimal_rounded as r;
    assert_eq!(r(6, b"49.99333333", Price::SCALE), Ok(499_933));
    assert_eq!(r(6, b"49.99335", Price::SCALE), Ok(499_934));
    assert_eq!(r(6, b"-0.00005", Price::SCALE), Ok(-1));
    assert_eq!(r(6, b"50", Price::SCALE), Ok(500_000));
    assert!(r(6, b"1.2345x", Price::SCALE).is_err());
    assert!(parse_decimal(31, b"49.99333333", Price::SCALE).is_err());
}

/// Messages QuickFIX/C++ 1.15 wrote (its log of a `fix_quickfix.rs` run, 2026-12-02; `|` for
/// SOH): its Logon, an empty mass-status answer, an acknowledgement, a partial and a full fill.
const QUICKFIX_GOLDEN: [&str; 5] = [
    "8=FIX.4.4|9=63|35=A|34=1|49=VENUE|52=20261202-08:08:09.320|56=KEEL|98=0|108=1|10=110|",
    "8=FIX.4.4|9=115|35=8|34=2|49=VENUE|52=20261202-08:08:09.320|56=KEEL|6=0|14=0|17=E1|37=NONE|39=8|54=1|150=I|151=0|584=1|911=0|912=Y|10=064|",
    "8=FIX.4.4|9=123|35=8|34=3|49=VENUE|52=20261202-08:08:09.320|56=KEEL|6=0|11=1|14=0|17=E2|37=V1|38=100|39=0|44=50|54=1|55=MSFT|150=0|151=100|10=132|",
    "8=FIX.4.4|9=136|35=8|34=4|49=VENUE|52=20261202-08:08:09.321|56=KEEL|6=50|11=1|14=40|17=E3|31=50|32=40|37=V1|38=100|39=1|44=50|54=1|55=MSFT|150=F|151=60|10=238|",
    "8=FIX.4.4|9=143|35=8|34=5|49=VENUE|52=20261202-08:08:09.364|56=KEEL|6=49.994|11=1|14=100|17=E4|31=49.99|32=60|37=V1|38=100|39=2|44=50|54=1|55=MSFT|150=F|151=0|10=115|",
];

#[test]
fn quickfix_s_own_messages_frame_parse_and_map() {
    let settings = FixSettings {
        sender_comp_id: "KEEL".into(),
        target_comp_id: "VENUE".into(),
        ..FixSettings::default()
    };
    // Recorded messages: stamped when recorded, answering a request numbered 1 (a client
    // whose ids start from 0; its clock is not checked against the stamps).
    let settings = FixSettings {
        sending_time_tolerance_s: 0,
        ..settings
    };
    let setup = LinkSetup {
        heartbeat_interval_ns: 1_000_000_000,
        unix_ns_at_origin: 0,
        ..setup()
    };
    let mut c = FixClient::new(settings, &setup);
    let mut out = [0u8; 512];
    c.encode_login(0, &mut out).unwrap();
    let golden: Vec<Vec<u8>> = QUICKFIX_GOLDEN.iter().map(|m| soh(m)).collect();
    for m in &golden {
        assert_eq!(codec::frame(m, &LIMITS), Frame::Whole { len: m.len() });
    }
    assert_eq!(
        feed(&mut c, &golden[0]).0,
        SessionNews::LoggedIn { next_seq: 2 }
    );
    c.encode_reconcile_query(1, &mut out).unwrap();
    assert!(matches!(
        feed(&mut c, &golden[1]).0,
        SessionNews::Reconciled(_)
    ));
    let o = NewOrder {
        qty: 100,
        price: Price::from_units(50, 0),
        ..order(1, 100)
    };
    send(&mut c, RequestKind::New(o), 1);
    assert_eq!(
        feed(&mut c, &golden[2]).1,
        [OutcomeKind::Accepted { id: o.id }]
    );
    assert_eq!(
        feed(&mut c, &golden[3]).1,
        [OutcomeKind::Fill {
            id: o.id,
            qty: 40,
            price: Price::from_units(50, 0)
        }]
    );
    assert_eq!(
        feed(&mut c, &golden[4]).1,
        [OutcomeKind::Fill {
            id: o.id,
            qty: 60,
            price: Price::from_units(49, 9900)
        }]
    );
    assert_eq!(c.in_seq(), 6);
    assert!(owed(&mut c).is_empty());
}

#[test]
fn executions_booked_from_two_status_answers_are_absorbed_when_their_reports_come() {
    let mut c = logged_on();
    let o = order(1, 100);
    send(&mut c, RequestKind::New(o), 1);
    feed(
        &mut c,
        &venue("8", 2, "37=X|17=E|11=1|150=0|39=0|151=100|14=0|6=0|"),
    );
    // Each answers a query of keel's (the first and the second request it issued).
    let status = |seq: u64, cum| {
        venue(
            "8",
            seq,
            &format!(
                "790={}|37=X|17=E|11=1|150=I|39=1|151={}|14={cum}|6=100|",
                id_of(seq - 2),
                100 - cum
            ),
        )
    };
    send(&mut c, RequestKind::Query { id: o.id }, 0);
    send(&mut c, RequestKind::Query { id: o.id }, 0);
    let fill = |qty| OutcomeKind::Fill {
        id: o.id,
        qty,
        price: Price::from_units(100, 0),
    };
    assert_eq!(
        feed(&mut c, &status(3, 30)).1,
        [fill(30), OutcomeKind::StillOpen { id: o.id }]
    );
    assert_eq!(
        feed(&mut c, &status(4, 50)).1,
        [fill(20), OutcomeKind::StillOpen { id: o.id }]
    );
    // The reports of those 50 shares arrive late: absorbed, never booked twice.
    let trade = |seq, qty, cum| {
        venue(
            "8",
            seq,
            &format!(
                "37=X|17=E{seq}|11=1|150=F|39=1|32={qty}|31=100|151={}|14={cum}|6=100|",
                100 - cum
            ),
        )
    };
    assert!(feed(&mut c, &trade(5, 30, 30)).1.is_empty());
    assert!(feed(&mut c, &trade(6, 20, 50)).1.is_empty());
    assert_eq!(feed(&mut c, &trade(7, 10, 60)).1, [fill(10)]);
    assert_eq!(c.position(SymbolId(0)).bought, 60);
    assert_eq!(c.stats().late_reports_absorbed, 2);
}

#[test]
fn a_status_answer_finding_an_order_open_after_a_cancel_settles_the_cancel_as_not_applied() {
    // The cancel's answer was lost (the order went Unknown from PendingCancel): the status
    // answer that finds the order open is the cancel's refusal, as for OUCH; a bare StillOpen
    // would leave the order in doubt for good (the simulation over FIX found it).
    let mut c = logged_on();
    let o = order(1, 10);
    send(&mut c, RequestKind::New(o), 1);
    feed(
        &mut c,
        &venue("8", 2, "37=X|17=E|11=1|150=0|39=0|151=10|14=0|6=0|"),
    );
    send(&mut c, RequestKind::Cancel { id: o.id }, 1);
    send(&mut c, RequestKind::Query { id: o.id }, 1);
    let (_, out) = feed(
        &mut c,
        &venue(
            "8",
            3,
            &format!(
                "790={}|37=X|17=E|11=1|150=I|39=0|151=10|14=0|6=0|",
                id_of(1)
            ),
        ),
    );
    assert_eq!(
        out,
        [OutcomeKind::CancelRejected {
            id: o.id,
            reason: CancelRejectReason::NotApplied,
        }]
    );
    // Asked again, the order is simply still open.
    send(&mut c, RequestKind::Query { id: o.id }, 1);
    let (_, out) = feed(
        &mut c,
        &venue(
            "8",
            4,
            &format!(
                "790={}|37=X|17=E|11=1|150=I|39=0|151=10|14=0|6=0|",
                id_of(2)
            ),
        ),
    );
    assert_eq!(out, [OutcomeKind::StillOpen { id: o.id }]);
}

#[test]
fn settling_contradictions_leaves_a_closed_order_closed() {
    // An overfill marks the order contradicted; the venue then cancels it. When the operator
    // settles the contradictions, only orders still open are put in doubt (a Timeout for a
    // closed one would be refused by the order table).
    let mut c = logged_on();
    let open = order(1, 10);
    let closed = order(2, 10);
    send(&mut c, RequestKind::New(open), 1);
    send(&mut c, RequestKind::New(closed), 2);
    for (seq, id) in [(2, 1), (3, 2)] {
        feed(
            &mut c,
            &venue(
                "8",
                seq,
                &format!("37=X|17=E|11={id}|150=F|39=2|32=11|31=100|151=0|14=11|6=100|"),
            ),
        );
    }
    feed(
        &mut c,
        &venue("8", 4, "37=X|17=E|11=2|150=4|39=4|151=0|14=0|6=0|"),
    );
    let mut out = Vec::new();
    let cleared = c.clear_contradictions(0, &mut |o| out.push(o.kind));
    assert_eq!(cleared, 2);
    assert_eq!(out, [OutcomeKind::Timeout { id: open.id }]);
}

#[test]
fn a_request_encoded_again_after_a_full_send_buffer_keeps_its_order() {
    // The link encodes a request, the socket's buffer is full, the request stays in the ring
    // and is encoded again next pass: the same ClOrdID, a new MsgSeqNum (the first is a gap
    // keel fills when asked), never a stale-reference refusal of an order the session holds
    // (the demo's storm over FIX on a busy machine rejected such orders, then timed them out).
    let mut c = logged_on();
    let o = order(1, 10);
    let (_, first) = send(&mut c, RequestKind::New(o), 5);
    let (_, second) = send(&mut c, RequestKind::New(o), 5);
    assert_eq!(get(&first, 11), get(&second, 11));
    assert!(
        get(&second, 34).unwrap().parse::<u64>().unwrap()
            > get(&first, 34).unwrap().parse::<u64>().unwrap()
    );
    // Once answered, the reference is spent.
    feed(
        &mut c,
        &venue("8", 2, "37=X|17=E|11=5|150=0|39=0|151=10|14=0|6=0|"),
    );
    let mut out = [0u8; 512];
    let again = c.encode_request(
        &VenueRequest {
            venue: VenueId(0),
            sent_ns: 10,
            wire_ref: 5,
            kind: RequestKind::New(o),
        },
        &mut out,
    );
    assert!(
        matches!(again, Err(RequestError::StaleWireRef { .. })),
        "{again:?}"
    );
}

// ----- issue 38: restarts, stale answers, contradictions, SendingTime -----------------------

/// A client restarted on a journal: keel sent up to 4 before (its reservation says it sends
/// from 100 now) and applied the venue's messages through 6.
fn restarted() -> FixClient {
    let mut c = client();
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&100u64.to_le_bytes());
    bytes[8..16].copy_from_slice(&7u64.to_le_bytes());
    bytes[16..20].copy_from_slice(&FixSettings::default().fingerprint().to_le_bytes());
    let state = ProtocolState::new(FixClient::STATE_TAG, 1, &bytes).unwrap();
    c.restore_state(&state).unwrap();
    c
}

#[test]
fn after_a_restart_the_gap_fill_never_skips_the_reconciliation_query() {
    // Goal (issue 38, point 1): the venue expects 5; keel logs on at 100 and sends its mass
    // status at 101. The venue's ResendRequest from 5 is filled up to 101 (just after the
    // Logon), so a venue that held 101 reads it; one that dropped it asks from 101, and that
    // fill asks the query again under a new id — never an order.
    let mut c = restarted();
    let mut out = [0u8; 512];
    let n = c.encode_login(0, &mut out).unwrap();
    assert_eq!(get(&fields_of(&out[..n]).1, 34), Some("100"));
    feed(&mut c, &venue("A", 7, "98=0|108=30|"));
    let n = c.encode_reconcile_query(1, &mut out).unwrap();
    let (_, query) = fields_of(&out[..n]);
    assert_eq!(get(&query, 34), Some("101"));
    let first_id = get(&query, 584).unwrap().to_string();
    assert_eq!(first_id, id_of(1).to_string());
    feed(&mut c, &venue("2", 8, "7=5|16=0|"));
    let fill = owed(&mut c);
    assert_eq!(fill.len(), 1, "a gap fill, nothing else: {fill:?}");
    assert_eq!(
        (get(&fill[0].1, 34), get(&fill[0].1, 36)),
        (Some("5"), Some("101"))
    );
    // The venue dropped 101 after all: asked for, it is filled, and the query asked again.
    feed(&mut c, &venue("2", 9, "7=101|16=0|"));
    let again = owed(&mut c);
    assert_eq!(again.len(), 2, "{again:?}");
    assert_eq!(
        (
            again[0].0.as_str(),
            get(&again[0].1, 34),
            get(&again[0].1, 36)
        ),
        ("4", Some("101"), Some("102"))
    );
    assert_eq!(again[1].0, "AF");
    assert_eq!(get(&again[1].1, 34), Some("102"));
    assert_eq!(get(&again[1].1, 584), Some(id_of(2).to_string().as_str()));
    assert_eq!(c.fix_stats().reconcile_queries_reissued, 1);
    // An EndSeqNo bounds the fill.
    feed(&mut c, &venue("2", 10, "7=5|16=20|"));
    assert_eq!(get(&owed(&mut c)[0].1, 36), Some("21"));
}

#[test]
fn an_answer_to_an_earlier_process_is_never_taken_and_a_list_never_says_not_received() {
    // Goal (issue 38, point 1): the restarted process's order 1 was sent and never
    // acknowledged. The venue resends the earlier process's mass-status answer ("no orders",
    // its id 1): ignored. This process's own answer does not list the order either: it is in
    // doubt (queried), not "not received"; only the venue's answer to keel's query about that
    // order ("unknown order") closes it as never received.
    let mut c = restarted();
    let mut out = [0u8; 512];
    let o = order(1, 10);
    c.restore_order(&o, 1, 0, false).unwrap();
    c.encode_login(0, &mut out).unwrap();
    feed(&mut c, &venue("A", 7, "98=0|108=30|"));
    c.encode_reconcile_query(1, &mut out).unwrap();
    let mine = id_of(1);
    let (news, kinds) = feed(
        &mut c,
        &venue(
            "8",
            8,
            "43=Y|122=20261202-06:29:00.000|584=1|911=0|912=Y|37=NONE|17=S1|150=I|39=8|151=0|14=0|6=0|",
        ),
    );
    assert_eq!((news, kinds), (SessionNews::Nothing, vec![]));
    assert_eq!(c.fix_stats().stale_answers, 1);
    // An id this process never issued, even without PossDup, is as stale.
    let never = format!(
        "584={}|911=0|912=Y|37=NONE|17=S2|150=I|39=8|151=0|14=0|6=0|",
        mine + 7
    );
    assert_eq!(feed(&mut c, &venue("8", 9, &never)).0, SessionNews::Nothing);
    assert_eq!(c.fix_stats().stale_answers, 2);
    let own = format!("584={mine}|911=0|912=Y|37=NONE|17=S3|150=I|39=8|151=0|14=0|6=0|");
    let (news, kinds) = feed(&mut c, &venue("8", 10, &own));
    let SessionNews::Reconciled(r) = news else {
        panic!("{news:?}")
    };
    assert_eq!((r.in_doubt, r.not_received), (1, 0));
    assert_eq!(kinds, [OutcomeKind::Timeout { id: o.id }]);
    // A stale "unknown order" about it (an earlier process's query, resent) settles nothing.
    let stale =
        "43=Y|122=20261202-06:29:00.000|790=3|37=X|17=S4|11=1|150=I|39=8|103=5|151=0|14=0|6=0|";
    assert!(feed(&mut c, &venue("8", 11, stale)).1.is_empty());
    let (_, f) = send(&mut c, RequestKind::Query { id: o.id }, 0);
    let asked = get(&f, 790).unwrap().to_string();
    let answer = format!("790={asked}|37=X|17=S5|11=1|150=I|39=8|103=5|151=0|14=0|6=0|");
    assert_eq!(
        feed(&mut c, &venue("8", 12, &answer)).1,
        [OutcomeKind::Rejected {
            id: o.id,
            reason: RejectReason::NotReceived
        }]
    );
}

#[test]
fn a_contradiction_on_a_closed_order_holds_until_an_operator_clears_it() {
    // Goal (issue 38, point 2): a fill after the venue's own Canceled is a contradiction that
    // every reconciliation keeps counting (the link stays READ-ONLY) until cleared; the fill
    // is booked into the position. The same for a duplicate ExecID, which is never booked.
    let mut c = logged_on();
    let o = order(1, 10);
    send(&mut c, RequestKind::New(o), 1);
    feed(
        &mut c,
        &venue("8", 2, "37=X|17=A1|11=1|150=0|39=0|151=10|14=0|6=0|"),
    );
    feed(
        &mut c,
        &venue("8", 3, "37=X|17=C1|11=1|150=4|39=4|151=0|14=0|6=0|"),
    );
    let (news, _) = feed(
        &mut c,
        &venue(
            "8",
            4,
            "37=X|17=F1|11=1|150=F|39=1|32=3|31=100|151=7|14=3|6=100|",
        ),
    );
    assert_eq!(news, SessionNews::Contradicted(Contradiction::AfterClose));
    assert_eq!(c.position(SymbolId(0)).bought, 3);
    let mut out = [0u8; 512];
    for (round, seq) in [(1u64, 5u64), (2, 6)] {
        c.encode_reconcile_query(10, &mut out).unwrap();
        let id = id_of(round);
        let answer = format!("584={id}|911=0|912=Y|37=NONE|17=R{seq}|150=I|39=8|151=0|14=0|6=0|");
        let (news, _) = feed(&mut c, &venue("8", seq, &answer));
        let SessionNews::Reconciled(r) = news else {
            panic!("{news:?}")
        };
        assert_eq!(r.contradictions, 1, "round {round}: still held");
    }
    assert_eq!(c.clear_contradictions(20, &mut |_| {}), 1);
    c.encode_reconcile_query(30, &mut out).unwrap();
    let answer = format!(
        "584={}|911=0|912=Y|37=NONE|17=R7|150=I|39=8|151=0|14=0|6=0|",
        id_of(3)
    );
    let SessionNews::Reconciled(r) = feed(&mut c, &venue("8", 7, &answer)).0 else {
        panic!()
    };
    assert_eq!(r.unresolved(), 0);

    // A second order: a fill, then the same ExecID again without PossDup, then with it.
    let o2 = order(2, 10);
    send(&mut c, RequestKind::New(o2), 2);
    let fill = "37=X|17=DUP|11=2|150=F|39=1|32=2|31=100|151=8|14=2|6=100|";
    assert_eq!(
        feed(&mut c, &venue("8", 8, fill)).1.len(),
        2,
        "accepted, filled"
    );
    let (news, kinds) = feed(&mut c, &venue("8", 9, fill));
    assert_eq!(
        news,
        SessionNews::Contradicted(Contradiction::DuplicateExecution)
    );
    assert_eq!(
        kinds,
        [OutcomeKind::Contradiction {
            id: Some(o2.id),
            what: Contradiction::DuplicateExecution
        }]
    );
    assert_eq!(
        c.position(SymbolId(0)).bought,
        5,
        "3 after close + 2, never 7"
    );
    let resent = format!("43=Y|122=20261202-06:30:00.000|{fill}");
    assert_eq!(
        feed(&mut c, &venue("8", 10, &resent)).0,
        SessionNews::Nothing
    );
    assert_eq!(c.fix_stats().duplicate_executions_skipped, 1);
    assert_eq!(c.position(SymbolId(0)).bought, 5);
    assert_eq!(c.contradictions_open(), 1);
}

#[test]
fn a_sending_time_past_the_tolerance_is_rejected_and_the_session_ended() {
    // Goal (issue 38, point 4): a Heartbeat stamped 2000-01-01 (worst illegal: decades off;
    // an unreadable stamp too) is refused with SessionRejectReason 10 and a Logout; one at
    // the tolerance's edge (worst legal) is taken.
    let mut c = logged_on();
    let now_unix = setup().unix_ns_at_origin + 5;
    let edge = time::utc_timestamp(now_unix - 119_000_000_000);
    let edge = String::from_utf8(edge.to_vec()).unwrap();
    let m = by_hand("0", &format!("49=VENUE|56=KEEL|34=2|52={edge}|"));
    assert_eq!(feed(&mut c, &m).0, SessionNews::Nothing);
    assert!(owed(&mut c).is_empty());
    for stamp in ["20000101-00:00:00.000", "2026-12-02T06:30:00"] {
        let mut c = logged_on();
        let m = by_hand("0", &format!("49=VENUE|56=KEEL|34=2|52={stamp}|"));
        assert_eq!(feed(&mut c, &m).0, SessionNews::EndOfSession, "{stamp}");
        let sent = owed(&mut c);
        let types: Vec<&str> = sent.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(types, ["3", "5"], "{stamp}");
        assert_eq!(get(&sent[0].1, 373), Some("10"));
        assert_eq!(get(&sent[0].1, 371), Some("52"));
        assert_eq!(c.fix_stats().sending_time_rejects, 1);
        assert_eq!(c.in_seq(), 3, "its number taken");
    }
    // Out of sequence (a gap first), it is asked for again, not judged yet.
    let mut c = logged_on();
    let m = by_hand("0", "49=VENUE|56=KEEL|34=4|52=20000101-00:00:00.000|");
    assert_eq!(feed(&mut c, &m).0, SessionNews::Nothing);
    assert_eq!(owed(&mut c)[0].0, "2");
    assert_eq!(c.fix_stats().sending_time_rejects, 0);
}
