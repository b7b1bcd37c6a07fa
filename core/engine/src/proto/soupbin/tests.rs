//! SoupBinTCP codec tests: golden bytes, round trips, and arbitrary input.

use super::*;
use proptest::prelude::*;

fn one_client(bytes: &[u8]) -> Result<ClientPacket<'_>, DecodeError> {
    let f = frame(bytes, 1024)?.expect("whole packet");
    assert_eq!(f.len, bytes.len());
    decode_client(f.packet_type, f.payload)
}

fn one_server(bytes: &[u8]) -> Result<ServerPacket<'_>, DecodeError> {
    let f = frame(bytes, 1024)?.expect("whole packet");
    assert_eq!(f.len, bytes.len());
    decode_server(f.packet_type, f.payload)
}

// Golden: a login request exactly as the ouch-connect 5.0.1 client (PyPI) put it on the wire,
// captured on loopback. It right-justifies its alpha fields; keel accepts either side.
#[test]
fn golden_login_request_from_an_independent_client() {
    let mut wire = vec![0x00, 0x2f, b'L'];
    wire.extend_from_slice(b" dummy     dummysession #1                   1");
    let login = match one_client(&wire).unwrap() {
        ClientPacket::LoginRequest(l) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(&login.username, b"dummy ");
    assert_eq!(&login.password, b"dummy     ");
    assert_eq!(&login.session, b"session #1");
    assert_eq!(login.sequence, 1);
    assert_eq!(login.heartbeat_timeout_ms, None);
}

// Golden: keel's own encoding, field by field from the specification's layout.
#[test]
fn golden_login_request_encoded() {
    let login = LoginRequest {
        username: alpha("KEEL"),
        password: alpha("secret"),
        session: [b' '; SESSION_LEN],
        sequence: 42,
        heartbeat_timeout_ms: None,
    };
    let mut out = [0u8; 64];
    let n = encode_client(&mut out, &ClientPacket::LoginRequest(login)).unwrap();
    let mut expected = vec![0x00, 0x2f, b'L'];
    expected.extend_from_slice(b"KEEL  "); // Username, 6
    expected.extend_from_slice(b"secret    "); // Password, 10
    expected.extend_from_slice(&[b' '; 10]); // Requested Session: current
    expected.extend_from_slice(&[b' '; 18]); // Requested Sequence Number, 20, right-justified
    expected.extend_from_slice(b"42");
    assert_eq!(&out[..n], &expected[..]);
}

// Golden: server packets as the ouch-connect server sends them.
#[test]
fn golden_server_packets_from_an_independent_server() {
    let mut accepted = vec![0x00, 0x1f, b'A'];
    accepted.extend_from_slice(b"session #1                   1");
    assert_eq!(
        one_server(&accepted).unwrap(),
        ServerPacket::LoginAccepted {
            session: *b"session #1",
            sequence: 1
        }
    );
    assert_eq!(
        one_server(&[0x00, 0x02, b'J', b'A']).unwrap(),
        ServerPacket::LoginRejected(LoginRejectReason::NotAuthorized)
    );
    assert_eq!(
        one_server(&[0x00, 0x01, b'H']).unwrap(),
        ServerPacket::Heartbeat
    );
    assert_eq!(
        one_server(&[0x00, 0x01, b'Z']).unwrap(),
        ServerPacket::EndOfSession
    );
    assert_eq!(
        one_client(&[0x00, 0x01, b'R']).unwrap(),
        ClientPacket::Heartbeat
    );
    assert_eq!(
        one_client(&[0x00, 0x01, b'O']).unwrap(),
        ClientPacket::LogoutRequest
    );
}

#[test]
fn login_with_heartbeat_timeout_field() {
    let mut wire = vec![0x00, 0x34, b'L'];
    wire.extend_from_slice(b"user  pass      SESS01                       7 1500");
    match one_client(&wire).unwrap() {
        ClientPacket::LoginRequest(l) => {
            assert_eq!(l.sequence, 7);
            assert_eq!(l.heartbeat_timeout_ms, Some(1500));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_packets_are_typed_errors() {
    assert_eq!(frame(&[0x00, 0x00], 64), Err(DecodeError::EmptyPacket));
    assert_eq!(
        frame(&[0x10, 0x00], 64),
        Err(DecodeError::Oversize {
            len: 0x1000,
            max: 64
        })
    );
    assert_eq!(
        frame(&[0x00, 0x05, b'U', 1], 64),
        Ok(None),
        "truncated: wait for more"
    );
    assert_eq!(
        one_client(&[0x00, 0x01, b'x']),
        Err(DecodeError::UnknownType {
            protocol: "SoupBinTCP",
            byte: b'x'
        })
    );
    assert_eq!(
        one_client(&[0x00, 0x02, b'R', 0]),
        Err(DecodeError::Length {
            msg_type: b'R',
            expected: 0,
            got: 1
        })
    );
    let mut bad_seq = vec![0x00, 0x2f, b'L'];
    bad_seq.extend_from_slice(b"user  pass      SESS01                   12x45");
    assert_eq!(
        one_client(&bad_seq),
        Err(DecodeError::BadField {
            field: "Requested Sequence Number",
            value: u64::from(b'x')
        })
    );
    assert_eq!(
        one_server(&[0x00, 0x02, b'J', b'Q']),
        Err(DecodeError::BadField {
            field: "Reject Reason Code",
            value: u64::from(b'Q')
        })
    );
}

#[test]
fn buffer_too_small_is_reported() {
    let mut out = [0u8; 4];
    assert_eq!(
        encode_server(&mut out, &ServerPacket::Sequenced(b"hello")),
        Err(EncodeError::BufferTooSmall { needed: 8, got: 4 })
    );
}

fn client_packet() -> impl Strategy<Value = (u8, Vec<u8>, u64)> {
    (
        0u8..5,
        proptest::collection::vec(any::<u8>(), 0..40),
        0u64..=99_999_999_999_999_999,
    )
}

proptest! {
    // Goal: every client packet survives encode → frame → decode.
    #[test]
    fn client_round_trip((kind, bytes, seq) in client_packet()) {
        let login = LoginRequest { username: alpha("U1"), password: alpha("P1"), session: alpha("S1"), sequence: seq, heartbeat_timeout_ms: None };
        let packet = match kind {
            0 => ClientPacket::Debug(&bytes),
            1 => ClientPacket::LoginRequest(login),
            2 => ClientPacket::Unsequenced(&bytes),
            3 => ClientPacket::Heartbeat,
            _ => ClientPacket::LogoutRequest,
        };
        let mut out = [0u8; 128];
        let n = encode_client(&mut out, &packet).unwrap();
        prop_assert_eq!(one_client(&out[..n]).unwrap(), packet);
    }

    // Goal: every server packet survives encode → frame → decode.
    #[test]
    fn server_round_trip((kind, bytes, seq) in client_packet()) {
        let packet = match kind {
            0 => ServerPacket::Debug(&bytes),
            1 => ServerPacket::LoginAccepted { session: alpha("SESSION1"), sequence: seq },
            2 => ServerPacket::Sequenced(&bytes),
            3 => ServerPacket::Heartbeat,
            _ => ServerPacket::EndOfSession,
        };
        let mut out = [0u8; 128];
        let n = encode_server(&mut out, &packet).unwrap();
        prop_assert_eq!(one_server(&out[..n]).unwrap(), packet);
    }

    // Goal: arbitrary bytes never panic the framer or decoders; method: feed random streams.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut at = 0;
        while at < bytes.len() {
            match frame(&bytes[at..], 200) {
                Ok(Some(f)) => {
                    let _ = decode_client(f.packet_type, f.payload);
                    let _ = decode_server(f.packet_type, f.payload);
                    at += f.len;
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
}
