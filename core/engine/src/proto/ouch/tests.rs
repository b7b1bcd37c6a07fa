//! OUCH codec tests: golden bytes captured from an independent implementation (the
//! `ouch-connect` 5.0.1 package from PyPI, on loopback), golden bytes built from the
//! specification's field table, round trips in both dialects, and arbitrary input.

use super::*;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// The appendages ouch-connect attaches to its sample Enter Order (83 bytes of TLVs).
const SAMPLE_APPENDAGES: &str = "05023f3f3f3f05030000000002042005050000000002064c0507bf8fcb92\
    09090000000000000000020a4c050bbf8fcb92020c4e050d00000000050e3f3f3f3f050f000000000210200211200318000002194e";

#[test]
fn golden_enter_order_from_ouch_connect() {
    let wire = hex(&format!(
        "4f 00000001 42 00000064 44554d4d5920202020 0000000000003039 30 59 41 59 4e \
         3120202020202020202020202020 0053 {SAMPLE_APPENDAGES}"
    ));
    let msg = decode_inbound(&wire, Dialect::OUCH_CONNECT).unwrap();
    let Inbound::EnterOrder(e) = msg else {
        panic!("{msg:?}")
    };
    assert_eq!(e.user_ref, 1);
    assert_eq!(
        (e.order.side, e.order.qty, e.order.price),
        (b'B', 100, 12_345)
    );
    assert_eq!(&e.order.symbol, b"DUMMY   ");
    assert_eq!(
        (
            e.order.tif,
            e.order.display,
            e.order.capacity,
            e.order.ise,
            e.order.cross_type
        ),
        (b'0', b'Y', b'A', b'Y', b'N')
    );
    assert_eq!(&e.order.cl_ord_id, b"1             ");
    assert_eq!(e.appendages.len(), 83);
    // Re-encoding gives back the same bytes.
    let mut out = [0u8; 256];
    let n = encode_inbound(&mut out, &msg, Dialect::OUCH_CONNECT).unwrap();
    assert_eq!(&out[..n], &wire[..]);
}

#[test]
fn golden_small_client_messages_from_ouch_connect() {
    let cancel = hex("58 00000001 0000000a");
    assert_eq!(
        decode_inbound(&cancel, Dialect::SPEC).unwrap(),
        Inbound::CancelOrder {
            user_ref: 1,
            qty: 10
        }
    );
    let modify = hex("4d 00000001 42 0000000a");
    assert_eq!(
        decode_inbound(&modify, Dialect::SPEC).unwrap(),
        Inbound::ModifyOrder {
            user_ref: 1,
            side: b'B',
            qty: 10
        }
    );
    assert_eq!(
        decode_inbound(b"Q", Dialect::SPEC).unwrap(),
        Inbound::AccountQuery
    );
}

#[test]
fn golden_server_messages_from_ouch_connect() {
    let d = Dialect::OUCH_CONNECT;
    let canceled = hex("43 0000156d0d699031 00000001 00000001 0000000a 55");
    assert_eq!(
        decode_outbound(&canceled, d).unwrap(),
        Outbound::Canceled {
            timestamp: 0x156d_0d69_9031,
            orig_user_ref: 1,
            user_ref: 1,
            qty: 10,
            reason: b'U'
        }
    );
    let rejected = hex("4a 0000156d0d699424 00000001 0001 3120202020202020202020202020");
    assert_eq!(
        decode_outbound(&rejected, d).unwrap(),
        Outbound::Rejected {
            timestamp: 0x156d_0d69_9424,
            user_ref: 1,
            reason: 1,
            cl_ord_id: *b"1             "
        }
    );
    let executed = hex(&format!("45 0000156d0d6991df 00000001 00000064 0000000000003039 41 0000000000000000 0053 {SAMPLE_APPENDAGES}"));
    let Outbound::Executed {
        user_ref,
        qty,
        price,
        liquidity_flag,
        ..
    } = decode_outbound(&executed, d).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (user_ref, qty, price, liquidity_flag),
        (1, 100, 12_345, b'A')
    );
    let accepted = hex(&format!(
        "41 0000156d0d698d1a 00000001 42 00000064 44554d4d5920202020 0000000000003039 30 59 \
         0000000000000001 41 59 4e 4c 3120202020202020202020202020 0053 {SAMPLE_APPENDAGES}"
    ));
    let Outbound::Accepted(a) = decode_outbound(&accepted, d).unwrap() else {
        panic!()
    };
    assert_eq!(
        (a.user_ref, a.order.qty, a.order_ref, a.state),
        (1, 100, 1, b'L')
    );
    let mut out = [0u8; 256];
    let n = encode_outbound(&mut out, &Outbound::Accepted(a), d).unwrap();
    assert_eq!(&out[..n], &accepted[..]);
    for (bytes, expect) in [
        (
            hex("50 0000156d0d6994e3 00000001"),
            Outbound::CancelPending {
                timestamp: 0x156d_0d69_94e3,
                user_ref: 1,
            },
        ),
        (
            hex("49 0000156d0d6995a1 00000001"),
            Outbound::CancelReject {
                timestamp: 0x156d_0d69_95a1,
                user_ref: 1,
            },
        ),
        (
            hex("51 0000156d0d699872 00000001"),
            Outbound::AccountQueryResponse {
                timestamp: 0x156d_0d69_9872,
                next_user_ref: 1,
            },
        ),
        (
            hex("53 0000156d0d69342e 53"),
            Outbound::SystemEvent {
                timestamp: 0x156d_0d69_342e,
                event_code: b'S',
            },
        ),
        (
            hex("4d 0000156d0d69971d 00000001 42 0000000a"),
            Outbound::Modified {
                timestamp: 0x156d_0d69_971d,
                user_ref: 1,
                side: b'B',
                qty: 10,
            },
        ),
    ] {
        assert_eq!(decode_outbound(&bytes, d).unwrap(), expect);
    }
}

// Golden from the specification's field table (8-byte Symbol; Order Canceled without the
// original UserRefNum): keel's default layout.
#[test]
fn golden_spec_layout() {
    let enter = EnterOrder {
        user_ref: 7,
        order: OrderFields {
            side: b'S',
            qty: 300,
            symbol: *b"AAPL    ",
            price: 1_501_234,
            tif: b'3',
            display: b'Y',
            capacity: b'P',
            ise: b'N',
            cross_type: b'N',
            cl_ord_id: *b"00000000000AB ",
        },
        appendages: &[],
    };
    let mut out = [0u8; 64];
    let n = encode_inbound(&mut out, &Inbound::EnterOrder(enter), Dialect::SPEC).unwrap();
    let expected = hex("4f 00000007 53 0000012c 4141504c20202020 000000000016e832 33 59 50 4e 4e 3030303030303030303030414220 0000");
    assert_eq!(n, 47);
    assert_eq!(&out[..n], &expected[..]);
    let canceled = Outbound::Canceled {
        timestamp: 5,
        orig_user_ref: 7,
        user_ref: 7,
        qty: 300,
        reason: b'U',
    };
    let n = encode_outbound(&mut out, &canceled, Dialect::SPEC).unwrap();
    assert_eq!(
        &out[..n],
        &hex("43 0000000000000005 00000007 0000012c 55")[..]
    );
}

#[test]
fn malformed_messages_are_typed_errors() {
    let d = Dialect::SPEC;
    assert_eq!(
        decode_inbound(b"", d),
        Err(DecodeError::Length {
            msg_type: 0,
            expected: 1,
            got: 0
        })
    );
    assert_eq!(
        decode_inbound(b"Z", d),
        Err(DecodeError::UnknownType {
            protocol: "OUCH",
            byte: b'Z'
        })
    );
    assert_eq!(
        decode_inbound(&hex("58 00000001 00"), d),
        Err(DecodeError::Length {
            msg_type: b'X',
            expected: 9,
            got: 6
        })
    );
    let bad_side = hex("4d 00000001 58 0000000a");
    assert_eq!(
        decode_inbound(&bad_side, d),
        Err(DecodeError::BadField {
            field: "Side",
            value: u64::from(b'X')
        })
    );
    // Appendage length says 4, one byte follows.
    let mut enter = hex("4f 00000007 53 0000012c 4141504c20202020 000000000016e832 33 59 50 4e 4e 3030303030303030303030414220 0004");
    enter.push(0x01);
    assert_eq!(
        decode_inbound(&enter, d),
        Err(DecodeError::Length {
            msg_type: b'O',
            expected: 51,
            got: 48
        })
    );
    // A TLV element running past the end.
    let mut enter = hex("4f 00000007 53 0000012c 4141504c20202020 000000000016e832 33 59 50 4e 4e 3030303030303030303030414220 0002");
    enter.extend_from_slice(&[0x05, 0x02]);
    assert_eq!(
        decode_inbound(&enter, d),
        Err(DecodeError::BadField {
            field: "Optional Appendage",
            value: 5
        })
    );
    // A 9-byte symbol whose ninth byte is not a space cannot be represented.
    let mut wire = hex("4f 00000001 42 00000064 44554d4d5920202058 0000000000003039 30 59 41 59 4e 3120202020202020202020202020 0000");
    assert_eq!(
        decode_inbound(&wire, Dialect::OUCH_CONNECT),
        Err(DecodeError::BadField {
            field: "Symbol",
            value: u64::from(b'X')
        })
    );
    wire[10] = 0x07;
    assert!(matches!(
        decode_inbound(&wire, Dialect::OUCH_CONNECT),
        Err(DecodeError::BadField {
            field: "Symbol",
            ..
        })
    ));
}

fn fields() -> impl Strategy<Value = OrderFields> {
    (any::<u32>(), any::<i64>(), 0usize..4, 0usize..5).prop_map(|(qty, price, s, t)| OrderFields {
        side: SIDES[s],
        qty,
        symbol: *b"MSFT    ",
        price,
        tif: TIME_IN_FORCE[t],
        display: b'N',
        capacity: b'A',
        ise: b'N',
        cross_type: b'N',
        cl_ord_id: *b"ABCDEFGHIJKLMN",
    })
}

fn dialect() -> impl Strategy<Value = Dialect> {
    prop_oneof![Just(Dialect::SPEC), Just(Dialect::OUCH_CONNECT)]
}

proptest! {
    // Goal: every client message survives encode → decode in both dialects.
    #[test]
    fn inbound_round_trip(f in fields(), refs in (any::<u32>(), any::<u32>()), d in dialect(), kind in 0u8..7) {
        let msg = match kind {
            0 => Inbound::EnterOrder(EnterOrder { user_ref: refs.0, order: f, appendages: &[0x02, 0x04, b' '] }),
            1 => Inbound::ReplaceOrder(ReplaceOrder { orig_user_ref: refs.0, user_ref: refs.1, qty: f.qty, price: f.price, tif: f.tif, display: f.display, ise: f.ise, cl_ord_id: f.cl_ord_id, appendages: &[] }),
            2 => Inbound::CancelOrder { user_ref: refs.0, qty: f.qty },
            3 => Inbound::ModifyOrder { user_ref: refs.0, side: f.side, qty: f.qty },
            4 => Inbound::AccountQuery,
            5 => Inbound::ReconcileQuery { token: refs.0 },
            _ => Inbound::OrderStatusQuery { user_ref: refs.1 },
        };
        let mut out = [0u8; 128];
        let n = encode_inbound(&mut out, &msg, d).unwrap();
        prop_assert_eq!(decode_inbound(&out[..n], d).unwrap(), msg);
    }

    // Goal: every venue message survives encode → decode in both dialects.
    #[test]
    fn outbound_round_trip(f in fields(), ts: u64, refs in (any::<u32>(), any::<u32>()), d in dialect(), kind in 0u8..17) {
        let accepted = OrderAccepted { timestamp: ts, orig_user_ref: 0, user_ref: refs.0, order: f, order_ref: ts ^ 7, state: b'L', appendages: &[] };
        let msg = match kind {
            0 => Outbound::SystemEvent { timestamp: ts, event_code: b'E' },
            1 => Outbound::Accepted(accepted),
            2 => Outbound::Replaced(OrderAccepted { orig_user_ref: refs.1, ..accepted }),
            3 => Outbound::Canceled { timestamp: ts, orig_user_ref: if d.canceled_orig_user_ref { refs.1 } else { refs.0 }, user_ref: refs.0, qty: f.qty, reason: b'U' },
            4 => Outbound::AiqCanceled { timestamp: ts, user_ref: refs.0, decrement_qty: 1, reason: b'Q', prevented_qty: 2, execution_price: f.price, liquidity_flag: b'A', aiq_strategy: b'?' },
            5 => Outbound::Executed { timestamp: ts, user_ref: refs.0, qty: f.qty, price: f.price, liquidity_flag: b'R', match_number: ts, appendages: &[] },
            6 => Outbound::BrokenTrade { timestamp: ts, user_ref: refs.0, match_number: 9, reason: b'E', cl_ord_id: f.cl_ord_id },
            7 => Outbound::Rejected { timestamp: ts, user_ref: refs.0, reason: 3, cl_ord_id: f.cl_ord_id },
            8 => Outbound::CancelPending { timestamp: ts, user_ref: refs.0 },
            9 => Outbound::CancelReject { timestamp: ts, user_ref: refs.0 },
            10 => Outbound::PriorityUpdate { timestamp: ts, user_ref: refs.0, price: f.price, display: b'Y', order_ref: 4 },
            11 => Outbound::Modified { timestamp: ts, user_ref: refs.0, side: f.side, qty: f.qty },
            12 => Outbound::Restated { timestamp: ts, user_ref: refs.0, reason: b'R', appendages: &[0x05, 0x16, 0, 0, 0, 1] },
            13 => Outbound::AccountQueryResponse { timestamp: ts, next_user_ref: refs.1 },
            14 => Outbound::Position { timestamp: ts, symbol: f.symbol, bought_qty: u64::from(f.qty), sold_qty: ts },
            15 => Outbound::ReconcileEnd { timestamp: ts, token: refs.1, open_orders: refs.0, positions: refs.1, as_of_sequence: ts },
            _ => Outbound::OrderStatus(OrderStatus { timestamp: ts, user_ref: refs.0, state: b'D', side: f.side, symbol: f.symbol, price: f.price, open_qty: 0, executed_qty: f.qty, cl_ord_id: f.cl_ord_id }),
        };
        let mut out = [0u8; 128];
        let n = encode_outbound(&mut out, &msg, d).unwrap();
        prop_assert_eq!(decode_outbound(&out[..n], d).unwrap(), msg);
    }

    // Goal: decoders never panic on arbitrary bytes; method: random bytes under every type.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), d in dialect()) {
        let _ = decode_inbound(&bytes, d);
        let _ = decode_outbound(&bytes, d);
        if !bytes.is_empty() {
            // Force every known type byte so the field decoders see the random bytes too.
            for t in b"OUXMQqrSAUCDEBJPITMRQoyz" {
                let mut b = bytes.clone();
                b[0] = *t;
                let _ = decode_inbound(&b, d);
                let _ = decode_outbound(&b, d);
            }
        }
    }
}
