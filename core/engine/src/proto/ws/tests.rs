use super::*;

fn server() -> Decoder {
    Decoder::new(Role::Server, 1 << 16)
}

fn client() -> Decoder {
    Decoder::new(Role::Client, 1 << 16)
}

/// Decodes everything; returns the messages as owned strings (text, or `kind:len`).
fn all(d: &mut Decoder, mut input: &[u8]) -> Result<Vec<String>, WsError> {
    let mut out = Vec::new();
    loop {
        let (used, msg) = d.decode(input)?;
        input = &input[used..];
        match msg {
            Some(WsMessage::Text(t)) => out.push(t.to_string()),
            Some(WsMessage::Binary(b)) => out.push(format!("binary:{}", b.len())),
            Some(WsMessage::Ping(p)) => out.push(format!("ping:{}", String::from_utf8_lossy(p))),
            Some(WsMessage::Pong(p)) => out.push(format!("pong:{}", String::from_utf8_lossy(p))),
            Some(WsMessage::Close { code, reason }) => out.push(format!("close:{code:?}:{reason}")),
            None if used == 0 => return Ok(out),
            None => {}
        }
    }
}

// Goal: the examples of RFC 6455 section 5.7 decode as the RFC says.
#[test]
fn rfc_examples() {
    assert_eq!(
        all(&mut client(), &[0x81, 0x05, b'H', b'e', b'l', b'l', b'o']).unwrap(),
        ["Hello"]
    );
    let masked = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    assert_eq!(all(&mut server(), &masked).unwrap(), ["Hello"]);
    let fragmented = [0x01, 0x03, b'H', b'e', b'l', 0x80, 0x02, b'l', b'o'];
    assert_eq!(all(&mut client(), &fragmented).unwrap(), ["Hello"]);
    assert_eq!(
        all(&mut client(), &[0x89, 0x05, b'H', b'e', b'l', b'l', b'o']).unwrap(),
        ["ping:Hello"]
    );
    let mut big = vec![0x82, 0x7E, 0x01, 0x00];
    big.extend(std::iter::repeat_n(7u8, 256));
    assert_eq!(all(&mut client(), &big).unwrap(), ["binary:256"]);
    assert_eq!(
        accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
}

// Goal: whatever way the bytes are split into reads, the same messages come out, and a control
// frame in the middle of a fragmented message is delivered in order.
#[test]
fn any_split_of_the_input_decodes_the_same() {
    let mut wire = Vec::new();
    let mut buf = [0u8; 300];
    let mask = Some([1, 2, 3, 4]);
    for (fin, op, payload) in [
        (false, Opcode::Text, "héllo ".as_bytes()),
        (true, Opcode::Ping, b"p".as_slice()),
        (false, Opcode::Continuation, "wö".as_bytes()),
        (true, Opcode::Continuation, "rld".as_bytes()),
        (true, Opcode::Binary, &[9u8; 200][..]),
    ] {
        let n = encode_frame(&mut buf, fin, op, payload, mask);
        wire.extend_from_slice(&buf[..n]);
    }
    let n = encode_close(&mut buf, 1000, "bye", mask);
    wire.extend_from_slice(&buf[..n]);
    let want = [
        "ping:p",
        "héllo wörld",
        "binary:200",
        "close:Some(1000):bye",
    ];
    for chunk in 1..wire.len() {
        let mut d = server();
        let mut got = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for piece in wire.chunks(chunk) {
            pending.extend_from_slice(piece);
            let used_total = {
                let mut input = &pending[..];
                let mut used_total = 0;
                loop {
                    let (used, msg) = d.decode(input).unwrap();
                    used_total += used;
                    input = &input[used..];
                    match msg {
                        Some(WsMessage::Text(t)) => got.push(t.to_string()),
                        Some(WsMessage::Binary(b)) => got.push(format!("binary:{}", b.len())),
                        Some(WsMessage::Ping(p)) => {
                            got.push(format!("ping:{}", String::from_utf8_lossy(p)))
                        }
                        Some(WsMessage::Close { code, reason }) => {
                            got.push(format!("close:{code:?}:{reason}"))
                        }
                        Some(WsMessage::Pong(_)) => unreachable!(),
                        None if used == 0 => break,
                        None => {}
                    }
                }
                used_total
            };
            pending.drain(..used_total);
        }
        assert_eq!(got, want, "chunk size {chunk}");
    }
}

// Goal: every framing violation fails with its close code.
#[test]
fn violations_fail_with_their_close_code() {
    let code = |d: &mut Decoder, bytes: &[u8]| all(d, bytes).unwrap_err().close_code();
    // Unmasked frame from a client, masked frame from a server.
    assert_eq!(code(&mut server(), &[0x81, 0x00]), 1002);
    assert_eq!(code(&mut client(), &[0x81, 0x80, 0, 0, 0, 0]), 1002);
    // Reserved bits, reserved opcodes.
    assert_eq!(code(&mut client(), &[0xC1, 0x00]), 1002);
    assert_eq!(code(&mut client(), &[0x83, 0x00]), 1002);
    assert_eq!(code(&mut client(), &[0x8B, 0x00]), 1002);
    // Fragmented and oversized control frames.
    assert_eq!(code(&mut client(), &[0x09, 0x00]), 1002);
    let mut long_ping = vec![0x89, 0x7E, 0x00, 0x7E];
    long_ping.extend([0u8; 126]);
    assert_eq!(code(&mut client(), &long_ping), 1002);
    // Continuation out of the blue; a new message inside a fragmented one.
    assert_eq!(code(&mut client(), &[0x80, 0x00]), 1002);
    assert_eq!(code(&mut client(), &[0x01, 0x00, 0x81, 0x00]), 1002);
    // Invalid UTF-8, fail fast: the bad byte ends it before the message does.
    assert_eq!(code(&mut client(), &[0x01, 0x02, 0xCE, 0xFF]), 1007);
    // An incomplete sequence at the end of the whole message.
    assert_eq!(code(&mut client(), &[0x81, 0x01, 0xCE]), 1007);
    // Close: 1 byte, an invalid code, a reason that is not UTF-8.
    assert_eq!(code(&mut client(), &[0x88, 0x01, 0x03]), 1002);
    assert_eq!(code(&mut client(), &[0x88, 0x02, 0x03, 0xED]), 1002); // 1005
    assert_eq!(code(&mut client(), &[0x88, 0x02, 0x13, 0x88]), 1002); // 5000
    assert_eq!(code(&mut client(), &[0x88, 0x03, 0x03, 0xE8, 0xFF]), 1007);
    // Too big.
    let mut d = Decoder::new(Role::Client, 100);
    assert_eq!(code(&mut d, &[0x82, 0x7E, 0x00, 0xC8]), 1009);
    let mut d = Decoder::new(Role::Client, 100);
    let mut two = vec![0x02, 60];
    two.extend([0u8; 60]);
    two.extend([0x80, 60]);
    two.extend([0u8; 60]);
    assert_eq!(
        code(&mut d, &two),
        1009,
        "the message over the limit across frames"
    );
    // A 64-bit length with its top bit set.
    assert_eq!(
        code(&mut client(), &[0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0]),
        1002
    );
}

// Goal: the opening handshake both ways, and its refusals.
#[test]
fn handshake_both_ways() {
    let (req, key) = request("localhost:9001", "/md", [7; 16]);
    assert_eq!(parse_request(&req.as_bytes()[..20]).unwrap(), None);
    let (parsed, used) = parse_request(req.as_bytes()).unwrap().unwrap();
    assert_eq!(used, req.len());
    assert_eq!(parsed.path, "/md");
    assert_eq!(parsed.key, key);
    let resp = response(&parsed.key);
    assert_eq!(
        parse_response(resp.as_bytes(), &key).unwrap(),
        Some(resp.len())
    );
    assert!(parse_response(resp.as_bytes(), "other").is_err());
    let v8 = req.replace("Version: 13", "Version: 8");
    assert!(matches!(
        parse_request(v8.as_bytes()),
        Err(HandshakeError::Version(v)) if v == "8"
    ));
    let no_upgrade = req.replace("Upgrade: websocket\r\n", "");
    assert!(matches!(
        parse_request(no_upgrade.as_bytes()),
        Err(HandshakeError::Bad(_))
    ));
    let short_key = req.replace(&key, "c2hvcnQ=");
    assert!(parse_request(short_key.as_bytes()).is_err());
    assert!(matches!(
        parse_request(&[b'a'; HANDSHAKE_MAX + 1]),
        Err(HandshakeError::TooLong(_))
    ));
}

proptest::proptest! {
    // Goal: arbitrary bytes never panic the decoder, in either role.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
        let _ = all(&mut Decoder::new(Role::Server, 256), &bytes);
        let _ = all(&mut Decoder::new(Role::Client, 256), &bytes);
        let _ = parse_request(&bytes);
    }
}

// Goal: the size limit is per message: many messages each just under the limit all pass (the
// previous message's length once counted against the next, refusing two 3 KiB requests under
// a 4 KiB limit with 1009), while a fragmented one that grows past the limit is refused.
#[test]
fn the_size_limit_is_per_message() {
    let limit = 4_096;
    let mut d = Decoder::new(Role::Server, limit);
    let mut wire = Vec::new();
    let mut buf = vec![0u8; 8_192];
    for i in 0..5u8 {
        let text = vec![b'a' + i; 3_072];
        let n = encode_frame(&mut buf, true, Opcode::Text, &text, Some([1, 2, 3, 4]));
        wire.extend_from_slice(&buf[..n]);
    }
    let n = encode_frame(
        &mut buf,
        true,
        Opcode::Binary,
        &[9; 4_096],
        Some([4, 3, 2, 1]),
    );
    wire.extend_from_slice(&buf[..n]);
    let got = all(&mut d, &wire).unwrap();
    assert_eq!(
        got.len(),
        6,
        "{:?}",
        got.iter().map(String::len).collect::<Vec<_>>()
    );
    assert_eq!(got[4].len(), 3_072);
    assert_eq!(got[5], "binary:4096");
    // Fragments add up within one message: 3 KiB + 2 KiB is over the limit.
    let mut wire = Vec::new();
    let n = encode_frame(
        &mut buf,
        false,
        Opcode::Text,
        &[b'x'; 3_072],
        Some([1, 1, 1, 1]),
    );
    wire.extend_from_slice(&buf[..n]);
    let n = encode_frame(
        &mut buf,
        true,
        Opcode::Continuation,
        &[b'y'; 2_048],
        Some([1, 1, 1, 1]),
    );
    wire.extend_from_slice(&buf[..n]);
    let err = all(&mut d, &wire).unwrap_err();
    assert_eq!(
        err,
        WsError::TooBig {
            len: 5_120,
            limit: 4_096
        }
    );
    assert_eq!(err.close_code(), close_code::TOO_BIG);
}

// Goal: `reset` makes a decoder that stopped anywhere — inside a frame, inside a fragmented
// message, after a failed frame — decode the next connection's frames as a new one would.
#[test]
fn reset_starts_afresh_wherever_the_decoder_stopped() {
    let unfragmented = [0x81, 0x02, b'o', b'k'];
    let stops: [&[u8]; 3] = [
        &[0x81, 0x05, b'h', b'e'],       // inside a frame
        &[0x01, 0x02, b'h', b'e'],       // a fragmented message's first part
        &[0x81, 0x03, b'a', 0xff, b'c'], // a frame that fails (invalid UTF-8)
    ];
    for stop in stops {
        let mut d = client();
        let _ = all(&mut d, stop);
        d.reset();
        assert_eq!(
            all(&mut d, &unfragmented),
            Ok(vec!["ok".to_string()]),
            "{stop:?}"
        );
    }
}

// Goal: an empty control frame carries an empty payload, not the previous control frame's
// (found by core/cli/tests/fuzz.rs: a ping then an empty close was refused as "invalid close
// code", the ping's bytes read as the code; an empty ping was answered with an old payload).
#[test]
fn an_empty_control_frame_is_empty() {
    let mut wire = Vec::new();
    let mut buf = [0u8; 64];
    for (op, payload) in [
        (Opcode::Ping, &b"mid"[..]),
        (Opcode::Ping, &[][..]),
        (Opcode::Pong, &b"abc"[..]),
        (Opcode::Pong, &[][..]),
        (Opcode::Ping, &b"xy"[..]),
        (Opcode::Close, &[][..]),
    ] {
        let n = encode_frame(&mut buf, true, op, payload, Some([9, 8, 7, 6]));
        wire.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        all(&mut server(), &wire).unwrap(),
        [
            "ping:mid",
            "ping:",
            "pong:abc",
            "pong:",
            "ping:xy",
            "close:None:"
        ]
    );
}
