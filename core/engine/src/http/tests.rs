use super::*;
use proptest::prelude::*;

fn read_all(
    limits: Limits,
    method: Method,
    wire: &[u8],
) -> Result<(Head, Vec<u8>, usize), HttpError> {
    let mut r = ResponseReader::new(limits);
    r.start(method);
    let mut body = vec![0u8; 1 << 16];
    let (used, done) = r.feed(wire, &mut body)?;
    if !done {
        r.on_close()?;
    }
    Ok((r.head().clone(), body[..r.body_len()].to_vec(), used))
}

fn get(wire: &[u8]) -> Result<(Head, Vec<u8>, usize), HttpError> {
    read_all(Limits::default(), Method::Get, wire)
}

// Goal: a request is framed by keel alone and carries nothing the wire could misread.
#[test]
fn requests_are_encoded_and_bad_fields_refused() {
    let mut out = [0u8; 256];
    let n = encode_request(
        &Request {
            method: Method::Get,
            target: "/api/v3/depth?symbol=BTCUSDT&limit=5",
            host: "venue.example:443",
            headers: &[("Accept", "application/json")],
            body: b"",
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(
        &out[..n],
        b"GET /api/v3/depth?symbol=BTCUSDT&limit=5 HTTP/1.1\r\nHost: venue.example:443\r\n\
          Accept: application/json\r\n\r\n"
    );
    let n = encode_request(
        &Request {
            method: Method::Post,
            target: "/order",
            host: "h",
            headers: &[],
            body: b"{}",
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(
        &out[..n],
        b"POST /order HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"
    );
    let base = Request {
        method: Method::Get,
        target: "/",
        host: "h",
        headers: &[],
        body: b"",
    };
    for (req, field) in [
        (
            Request {
                target: "/a b",
                ..base
            },
            "target",
        ),
        (
            Request {
                target: "no-slash",
                ..base
            },
            "target",
        ),
        (
            Request {
                target: "/a\r\nX: y",
                ..base
            },
            "target",
        ),
        (Request { host: "", ..base }, "host"),
        (
            Request {
                headers: &[("X-A", "1\r\nX-B: 2")],
                ..base
            },
            "header value",
        ),
        (
            Request {
                headers: &[("Bad Name", "1")],
                ..base
            },
            "header name",
        ),
        (
            Request {
                headers: &[("content-length", "5")],
                ..base
            },
            "header name",
        ),
        (
            Request {
                headers: &[("Transfer-Encoding", "chunked")],
                ..base
            },
            "header name",
        ),
    ] {
        match encode_request(&req, &mut out) {
            Err(HttpError::BadRequestField { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{req:?}: {other:?}"),
        }
    }
    let mut small = [0u8; 10];
    assert_eq!(
        encode_request(&base, &mut small),
        Err(HttpError::RequestTooLarge { need: 27, room: 10 })
    );
    assert!(!Method::Post.idempotent() && Method::Get.idempotent() && Method::Delete.idempotent());
}

// Goal: each row of the module's framing table.
#[test]
fn framing_rows() {
    let (h, body, used) =
        get(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Used-Weight-1m: 12\r\n\r\nhelloNEXT")
            .unwrap();
    assert_eq!(
        (h.status, h.framing, body.as_slice()),
        (200, Framing::Length(5), &b"hello"[..])
    );
    assert_eq!(
        used, 65,
        "stops at the end of the response: the rest is the next one's"
    );
    assert_eq!(h.header_u64("x-used-weight-1m"), Some(12));
    assert!(h.keep_alive);

    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";
    let (h, body, used) = get(chunked).unwrap();
    assert_eq!(
        (h.framing, body.as_slice()),
        (Framing::Chunked, &b"Wikipedia"[..])
    );
    assert_eq!(used, chunked.len() - 4);

    let (h, body, _) =
        get(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n").unwrap();
    assert_eq!((h.status, h.framing, body.len()), (204, Framing::None, 0));

    let (h, body, _) = read_all(
        Limits::default(),
        Method::Head,
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
    )
    .unwrap();
    assert_eq!(
        (h.framing, body.len()),
        (Framing::None, 0),
        "a HEAD answer has no body"
    );

    let (h, body, _) = get(b"HTTP/1.1 200 OK\r\n\r\nuntil the end").unwrap();
    assert_eq!(
        (h.framing, body.as_slice()),
        (Framing::UntilClose, &b"until the end"[..])
    );
    assert!(!h.keep_alive, "a body read until close ends the connection");

    let (h, _, _) =
        get(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    assert!(!h.keep_alive);
    let (h, _, _) = get(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap();
    assert!(!h.keep_alive, "HTTP/1.0 closes unless it says keep-alive");

    let (h, _, _) =
        get(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
    assert_eq!((h.status, h.retry_after_s()), (429, Some(7)));
    let (h, _, _) = get(b"HTTP/1.1 503 x\r\nRetry-After: Wed, 21 Oct 2026 07:28:00 GMT\r\nContent-Length: 0\r\n\r\n").unwrap();
    assert_eq!(h.retry_after_s(), None, "a date is not a number of seconds");
}

// Goal: the worst illegal values are refused by name, never misread.
#[test]
fn malformed_responses_are_typed_errors() {
    let cases: [(&[u8], &str); 12] = [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "ConflictingFraming",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n",
            "BadContentLength",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "BadContentLength",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "BadContentLength",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            "BadContentLength",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "UnsupportedTransferEncoding",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "UnsupportedTransferEncoding",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "BadChunk",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX",
            "BadChunk",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
            "BodyTooLarge",
        ),
        (b"HTTP/2 200 OK\r\n\r\n", "Malformed"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "Malformed"),
    ];
    for (wire, want) in cases {
        let got = get(wire).expect_err(&String::from_utf8_lossy(wire));
        assert!(
            format!("{got:?}").starts_with(want),
            "{}: {got:?}",
            String::from_utf8_lossy(wire)
        );
    }
    // A head without its end, past the limit.
    let limits = Limits {
        head_max: 64,
        ..Limits::default()
    };
    let long = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'a'; 100]].concat();
    assert_eq!(
        read_all(limits, Method::Get, &long).unwrap_err(),
        HttpError::HeadTooLarge { max: 64 }
    );
    // More header lines than allowed.
    let limits = Limits {
        headers_max: 2,
        ..Limits::default()
    };
    let many = b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nContent-Length: 0\r\n\r\n";
    assert!(matches!(
        read_all(limits, Method::Get, many),
        Err(HttpError::Malformed(_))
    ));
    // A chunked body growing past the limit.
    let limits = Limits {
        body_max: 8,
        ..Limits::default()
    };
    let big = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n";
    assert_eq!(
        read_all(limits, Method::Get, big).unwrap_err(),
        HttpError::BodyTooLarge { max: 8 }
    );
    // Closed mid-body.
    assert_eq!(
        get(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").unwrap_err(),
        HttpError::Truncated { got: 42 }
    );
    // A body larger than the caller's buffer is refused, never overrun.
    let mut r = ResponseReader::new(Limits::default());
    r.start(Method::Get);
    let mut small = [0u8; 4];
    assert_eq!(
        r.feed(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            &mut small
        ),
        Err(HttpError::BodyTooLarge { max: 4 })
    );
    // The worst legal chunk size (2^64 - 1, after a first chunk) is refused as too large,
    // never summed past the end of a u64 (the fuzz target found the wrap).
    let mut r = ResponseReader::new(Limits::default());
    r.start(Method::Get);
    let mut body = [0u8; 64];
    assert!(matches!(
        r.feed(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\n",
            &mut body
        ),
        Err(HttpError::BodyTooLarge { .. })
    ));
}

fn responses() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<bool>(),
        proptest::collection::vec(1usize..40, 0..10),
    )
        .prop_map(|(body, chunked, sizes)| {
            let mut wire = b"HTTP/1.1 200 OK\r\nServer: t\r\n".to_vec();
            if chunked {
                wire.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                let mut rest = body.as_slice();
                let mut sizes = sizes.into_iter().cycle();
                while !rest.is_empty() {
                    let n = sizes.next().unwrap_or(rest.len()).min(rest.len());
                    wire.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                    wire.extend_from_slice(&rest[..n]);
                    wire.extend_from_slice(b"\r\n");
                    rest = &rest[n..];
                }
                wire.extend_from_slice(b"0\r\n\r\n");
            } else {
                wire.extend_from_slice(
                    format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                wire.extend_from_slice(&body);
            }
            (wire, body)
        })
}

proptest! {
    // Goal: however the bytes arrive (any split into reads, as a socket delivers them), the
    // same body is read and exactly the response is consumed; the next response on the
    // connection is then read whole. Method: random bodies, chunked or sized, fed in random
    // pieces, the transport's buffer kept as the client keeps it (consumed bytes dropped).
    #[test]
    fn any_split_reads_the_same_response(
        (wire, body) in responses(),
        cuts in proptest::collection::vec(1usize..50, 1..40),
    ) {
        let mut stream = wire.clone();
        stream.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
        let mut reader = ResponseReader::new(Limits::default());
        let mut out = vec![0u8; 1024];
        let mut buffered: Vec<u8> = Vec::new();
        let mut fed = 0;
        let mut cuts = cuts.into_iter().cycle();
        reader.start(Method::Get);
        let mut responses = 0;
        while responses < 2 {
            let n = cuts.next().unwrap().min(stream.len() - fed);
            buffered.extend_from_slice(&stream[fed..fed + n]);
            fed += n;
            loop {
                let (used, done) = reader.feed(&buffered, &mut out).unwrap();
                buffered.drain(..used);
                if !done {
                    break;
                }
                responses += 1;
                if responses == 1 {
                    prop_assert_eq!(&out[..reader.body_len()], body.as_slice());
                    reader.start(Method::Get);
                } else {
                    prop_assert_eq!(reader.head().status, 204);
                    break;
                }
            }
            prop_assert!(fed < stream.len() || responses == 2, "all fed, {} responses", responses);
        }
        prop_assert!(buffered.is_empty());
    }

    // Goal: hostile bytes never panic the reader, never make it write past the caller's
    // buffer, and it never claims more than it was given.
    #[test]
    fn hostile_bytes_never_panic(
        prefix in proptest::sample::select(vec![
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            &b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"[..],
            &b"HTTP/1.1 "[..],
            &b""[..],
        ]),
        noise in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut wire = prefix.to_vec();
        wire.extend_from_slice(&noise);
        let mut reader = ResponseReader::new(Limits { head_max: 256, headers_max: 8, body_max: 64 });
        reader.start(Method::Get);
        let mut out = [0u8; 32];
        if let Ok((used, _)) = reader.feed(&wire, &mut out) {
            prop_assert!(used <= wire.len());
            prop_assert!(reader.body_len() <= out.len());
        }
    }
}
