//! Fuzz targets for every decoder keel runs on bytes it did not write: SoupBinTCP, OUCH (both
//! dialects), WebSocket frames and handshakes (both roles), market-data JSON (requests and the
//! feed handler's parsing, driven over the simulated network), IPC records, journal files, the
//! configuration file, the OUCH session's `on_packet`, HTTP/1.1 responses (`http`) and the FIX 4.4
//! client (framing, fields and its session layer, `fix44`).
//!
//! Method: property tests (proptest), not coverage-guided fuzzing: cargo-fuzz needs a nightly
//! compiler (`-Zsanitizer`), and CI has only stable Rust (docs/architecture.md, "Fuzzing").
//! Each target feeds (a) arbitrary bytes and (b) *mutations of valid inputs* — a message built
//! with keel's own encoder, then bytes flipped, set, inserted, deleted, spliced from a
//! dictionary of the format's tokens, overwritten with boundary integers, or cut short —
//! because a mutated valid message passes the length and type checks that random bytes almost
//! never pass, and so reaches the field decoders behind them. Every decode must end in a value
//! or a typed error, never a panic or a loop that stops consuming. Where an encoder exists the
//! unmutated input must also round-trip (decode(encode(x)) == x).
//!
//! `KEEL_FUZZ_CASES` sets the cases per target (default 512; the slower targets run a fraction:
//! journal files a quarter, the configuration and the session half). Every run draws new inputs;
//! a failure prints proptest's shrunk input, which becomes a regular test with its fix.

use std::collections::HashMap;
use std::fmt::Debug;
use std::net::SocketAddr;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use keel::config::EngineConfig;
use keel::feed::handler::{FeedConfig, FeedHandler};
use keel::ipc::{decode_command, decode_event, encode_command, encode_event, IpcEvent};
use keel::journal::{Journal, JournalConfig, JournalRecord, Recovery, RECORD_LEN};
use keel::net::{ConnId, NetEvent, Transport};
use keel::order::{
    CancelRejectReason, ClientOrderId, Command, Event, EventKind, MassCancelScope, NewOrder,
    OutcomeKind, Price, RefusalReason, RejectReason, Replace, RequestKind, Side, StrategyId,
    SymbolId, TimeInForce, VenueId, VenueRequest,
};
use keel::proto::md::{self as md, BookSide, Channel, Request};
use keel::proto::ouch::{
    decode_inbound, decode_outbound, encode_inbound, encode_outbound, Dialect, EnterOrder, Inbound,
    OrderAccepted, OrderFields, OrderStatus, Outbound, ReplaceOrder,
};
use keel::proto::soupbin::{
    self, decode_client, decode_server, encode_client, encode_server, ClientPacket,
    LoginRejectReason, LoginRequest, ServerPacket,
};
use keel::proto::ws::{self, Decoder, Opcode, Role, WsMessage};
use keel::session::ouch::{ClientConfig, OuchClient, ReconcileMode};
use keel_venue::simnet::{SimEndpoint, SimWorld};

// ----- the runner ------------------------------------------------------------------------------

/// Cases per target: `KEEL_FUZZ_CASES`, or a default that keeps the file well under a minute in
/// a debug build on a small shared machine.
fn fuzz_cases() -> u32 {
    std::env::var("KEEL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(512)
}

/// Runs `test` on `fuzz_cases() / divisor` inputs from `strategy`; a failure (a panic inside
/// the decoder included: proptest catches it) fails the test with the shrunk input.
fn fuzz<S>(
    name: &str,
    divisor: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let cases = (fuzz_cases() / divisor).max(1);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4_096,
        ..Config::default()
    });
    let result = runner.run(&strategy, test);
    eprintln!(
        "fuzz target {name}: {cases} cases, {}",
        if result.is_ok() { "clean" } else { "FAILED" }
    );
    if let Err(e) = result {
        panic!("fuzz target {name}: {e}");
    }
}

// ----- mutations -------------------------------------------------------------------------------

/// Integers at the edges of the widths wire formats use.
const INTERESTING: [u64; 18] = [
    0,
    1,
    0x7e,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0xffff_ffff,
    0x1_0000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
    125,
];

/// One edit of a byte string. Positions are `Index`es, resolved against the length at the
/// time the edit is applied.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(Index, u8),
    Set(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, u8),
    Truncate(Index),
    /// Overwrite 1, 2, 4 or 8 bytes (big- or little-endian) with a boundary integer.
    Word(Index, u8, bool, usize),
    /// Insert a token of the format (a field separator, a header name, a keyword).
    Splice(Index, Index),
    /// Copy a run of the input over another place (repeats a field or a whole message).
    Copy(Index, Index, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => (any::<Index>(), vec(any::<u8>(), 1..8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1u8..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), 0u8..4, any::<bool>(), 0..INTERESTING.len())
            .prop_map(|(i, w, le, v)| Mutation::Word(i, w, le, v)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(i, t)| Mutation::Splice(i, t)),
        1 => (any::<Index>(), any::<Index>(), 1u8..64)
            .prop_map(|(a, b, n)| Mutation::Copy(a, b, n)),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    vec(mutation(), 1..8)
}

/// Applies `edits` to `bytes`, with `dictionary` as the source of spliced tokens.
fn mutate(bytes: &mut Vec<u8>, edits: &[Mutation], dictionary: &[&[u8]]) {
    for edit in edits {
        let len = bytes.len();
        let at = |i: &Index| if len == 0 { 0 } else { i.index(len) };
        match edit {
            Mutation::Flip(i, bit) if len > 0 => bytes[at(i)] ^= 1 << bit,
            Mutation::Set(i, b) if len > 0 => bytes[at(i)] = *b,
            Mutation::Insert(i, b) => {
                let p = if len == 0 { 0 } else { i.index(len + 1) };
                bytes.splice(p..p, b.iter().copied());
            }
            Mutation::Delete(i, n) if len > 0 => {
                let p = at(i);
                bytes.drain(p..(p + usize::from(*n)).min(len));
            }
            Mutation::Truncate(i) => bytes.truncate(if len == 0 { 0 } else { i.index(len) }),
            Mutation::Word(i, w, le, v) if len > 0 => {
                let width = 1usize << w;
                let value = INTERESTING[*v];
                let be = value.to_be_bytes();
                let word = if *le {
                    value.to_le_bytes()[..width].to_vec()
                } else {
                    be[8 - width..].to_vec()
                };
                let p = at(i);
                let end = (p + width).min(len);
                bytes[p..end].copy_from_slice(&word[..end - p]);
            }
            Mutation::Splice(i, t) if !dictionary.is_empty() => {
                let p = if len == 0 { 0 } else { i.index(len + 1) };
                let token = dictionary[t.index(dictionary.len())];
                bytes.splice(p..p, token.iter().copied());
            }
            Mutation::Copy(from, to, n) if len > 0 => {
                let (src, dst) = (at(from), at(to));
                let n = usize::from(*n).min(len - src);
                let run = bytes[src..src + n].to_vec();
                bytes.splice(dst..dst, run);
            }
            _ => {}
        }
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

// ----- SoupBinTCP --------------------------------------------------------------------------------

/// Printable ASCII, left-justified and space padded (what the decoder normalizes to).
fn alpha<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    vec(0x21u8..=0x7e, 0..=N).prop_map(|v| {
        let mut out = [b' '; N];
        out[..v.len()].copy_from_slice(&v);
        out
    })
}

fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (0..INTERESTING.len()).prop_map(|i| INTERESTING[i])
    ]
}

/// A SoupBinTCP packet as owned values.
#[derive(Debug, Clone, PartialEq)]
enum Soup {
    ServerDebug(Vec<u8>),
    Accepted([u8; 10], u64),
    Rejected(bool),
    Sequenced(Vec<u8>),
    ServerHeartbeat,
    End,
    ClientDebug(Vec<u8>),
    Login([u8; 6], [u8; 10], [u8; 10], u64),
    Unsequenced(Vec<u8>),
    ClientHeartbeat,
    Logout,
}

fn soup() -> impl Strategy<Value = Soup> {
    prop_oneof![
        bytes(40).prop_map(Soup::ServerDebug),
        (alpha::<10>(), any_u64()).prop_map(|(s, q)| Soup::Accepted(s, q)),
        any::<bool>().prop_map(Soup::Rejected),
        bytes(80).prop_map(Soup::Sequenced),
        Just(Soup::ServerHeartbeat),
        Just(Soup::End),
        bytes(40).prop_map(Soup::ClientDebug),
        (alpha::<6>(), alpha::<10>(), alpha::<10>(), any_u64())
            .prop_map(|(u, p, s, q)| Soup::Login(u, p, s, q)),
        bytes(80).prop_map(Soup::Unsequenced),
        Just(Soup::ClientHeartbeat),
        Just(Soup::Logout),
    ]
}

impl Soup {
    fn is_server(&self) -> bool {
        matches!(
            self,
            Self::ServerDebug(_)
                | Self::Accepted(..)
                | Self::Rejected(_)
                | Self::Sequenced(_)
                | Self::ServerHeartbeat
                | Self::End
        )
    }

    fn encode(&self, out: &mut [u8]) -> usize {
        let server = |p: ServerPacket<'_>, out: &mut [u8]| encode_server(out, &p).unwrap();
        let client = |p: ClientPacket<'_>, out: &mut [u8]| encode_client(out, &p).unwrap();
        match self {
            Self::ServerDebug(b) => server(ServerPacket::Debug(b), out),
            Self::Accepted(session, sequence) => server(
                ServerPacket::LoginAccepted {
                    session: *session,
                    sequence: *sequence,
                },
                out,
            ),
            Self::Rejected(a) => server(
                ServerPacket::LoginRejected(if *a {
                    LoginRejectReason::NotAuthorized
                } else {
                    LoginRejectReason::SessionNotAvailable
                }),
                out,
            ),
            Self::Sequenced(b) => server(ServerPacket::Sequenced(b), out),
            Self::ServerHeartbeat => server(ServerPacket::Heartbeat, out),
            Self::End => server(ServerPacket::EndOfSession, out),
            Self::ClientDebug(b) => client(ClientPacket::Debug(b), out),
            Self::Login(username, password, session, sequence) => client(
                ClientPacket::LoginRequest(LoginRequest {
                    username: *username,
                    password: *password,
                    session: *session,
                    sequence: *sequence,
                    heartbeat_timeout_ms: None,
                }),
                out,
            ),
            Self::Unsequenced(b) => client(ClientPacket::Unsequenced(b), out),
            Self::ClientHeartbeat => client(ClientPacket::Heartbeat, out),
            Self::Logout => client(ClientPacket::LogoutRequest, out),
        }
    }

    fn decoded(&self, packet_type: u8, payload: &[u8]) -> Soup {
        if self.is_server() {
            match decode_server(packet_type, payload).unwrap() {
                ServerPacket::Debug(b) => Soup::ServerDebug(b.to_vec()),
                ServerPacket::LoginAccepted { session, sequence } => {
                    Soup::Accepted(session, sequence)
                }
                ServerPacket::LoginRejected(r) => {
                    Soup::Rejected(r == LoginRejectReason::NotAuthorized)
                }
                ServerPacket::Sequenced(b) => Soup::Sequenced(b.to_vec()),
                ServerPacket::Heartbeat => Soup::ServerHeartbeat,
                ServerPacket::EndOfSession => Soup::End,
            }
        } else {
            match decode_client(packet_type, payload).unwrap() {
                ClientPacket::Debug(b) => Soup::ClientDebug(b.to_vec()),
                ClientPacket::LoginRequest(l) => {
                    Soup::Login(l.username, l.password, l.session, l.sequence)
                }
                ClientPacket::Unsequenced(b) => Soup::Unsequenced(b.to_vec()),
                ClientPacket::Heartbeat => Soup::ClientHeartbeat,
                ClientPacket::LogoutRequest => Soup::Logout,
            }
        }
    }
}

const SOUP_TOKENS: &[&[u8]] = &[
    b"\x00\x00",
    b"\x00\x01",
    b"\xff\xff",
    b"+",
    b"A",
    b"J",
    b"S",
    b"H",
    b"Z",
    b"L",
    b"U",
    b"R",
    b"O",
    b"          ",
    b"00000000000000000001",
    b"18446744073709551616",
    b"30000",
];

/// Walks a byte stream packet by packet and decodes each both ways; checks what `frame`
/// promises and that a decoded packet re-encodes to the same meaning.
fn walk_soup(stream: &[u8], max_packet_len: u16) -> Result<(), TestCaseError> {
    let mut rest = stream;
    let mut out = vec![0u8; 70_000];
    while let Ok(Some(f)) = soupbin::frame(rest, max_packet_len) {
        prop_assert!(f.len > soupbin::LENGTH_PREFIX && f.len <= rest.len());
        prop_assert_eq!(f.len, soupbin::LENGTH_PREFIX + 1 + f.payload.len());
        prop_assert!(f.len - soupbin::LENGTH_PREFIX <= usize::from(max_packet_len));
        if let Ok(p) = decode_server(f.packet_type, f.payload) {
            let n = encode_server(&mut out, &p).unwrap();
            let again = soupbin::frame(&out[..n], u16::MAX).unwrap().unwrap();
            prop_assert_eq!(decode_server(again.packet_type, again.payload), Ok(p));
        }
        if let Ok(p) = decode_client(f.packet_type, f.payload) {
            let n = encode_client(&mut out, &p).unwrap();
            let again = soupbin::frame(&out[..n], u16::MAX).unwrap().unwrap();
            // The short login form is what keel sends: the optional heartbeat field drops.
            let expected = match p {
                ClientPacket::LoginRequest(l) => ClientPacket::LoginRequest(LoginRequest {
                    heartbeat_timeout_ms: None,
                    ..l
                }),
                other => other,
            };
            prop_assert_eq!(
                decode_client(again.packet_type, again.payload),
                Ok(expected)
            );
        }
        rest = &rest[f.len..];
    }
    Ok(())
}

fn max_packet_len() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(1u16),
        Just(37),
        Just(1_024),
        Just(4_096),
        Just(u16::MAX),
        any::<u16>()
    ]
}

// Goal: SoupBinTCP framing and both directions' packet decoders never panic, on random bytes
// and on mutated streams of valid packets; unmutated streams round-trip packet for packet.
#[test]
fn soupbin_frame_and_packets() {
    let input = (
        vec(soup(), 1..8),
        mutations(),
        bytes(300),
        max_packet_len(),
        any::<bool>(),
    );
    fuzz(
        "soupbin",
        1,
        input,
        |(packets, edits, random, max, use_random)| {
            let mut buf = [0u8; 200];
            let mut stream = Vec::new();
            for p in &packets {
                let n = p.encode(&mut buf);
                stream.extend_from_slice(&buf[..n]);
            }
            // Round trip: the stream splits into exactly the packets, each decoding to itself.
            let mut rest = &stream[..];
            for p in &packets {
                let f = soupbin::frame(rest, u16::MAX).unwrap().unwrap();
                prop_assert_eq!(&p.decoded(f.packet_type, f.payload), p);
                rest = &rest[f.len..];
            }
            prop_assert!(rest.is_empty());
            if use_random {
                walk_soup(&random, max)?;
            }
            mutate(&mut stream, &edits, SOUP_TOKENS);
            walk_soup(&stream, max)
        },
    );
}

// ----- OUCH --------------------------------------------------------------------------------------

fn dialect() -> impl Strategy<Value = Dialect> {
    prop_oneof![Just(Dialect::SPEC), Just(Dialect::OUCH_CONNECT)]
}

fn code(allowed: &'static [u8]) -> impl Strategy<Value = u8> {
    (0..allowed.len()).prop_map(move |i| allowed[i])
}

fn printable() -> impl Strategy<Value = u8> {
    0x20u8..=0x7e
}

fn printable_array<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    vec(printable(), N).prop_map(|v| v.try_into().unwrap())
}

fn qty() -> impl Strategy<Value = u32> {
    prop_oneof![any::<u32>(), Just(0), Just(u32::MAX), 1u32..1_000]
}

fn price() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(0),
        -1i64..1_000_000
    ]
}

fn fields() -> impl Strategy<Value = OrderFields> {
    (
        (code(b"BSTE"), qty(), printable_array::<8>(), price()),
        (
            code(b"0356E"),
            code(b"YNAZ"),
            code(b"APRO"),
            code(b"YN"),
            code(b"NOCHSREA"),
        ),
        printable_array::<14>(),
    )
        .prop_map(
            |((side, qty, symbol, price), (tif, display, capacity, ise, cross_type), id)| {
                OrderFields {
                    side,
                    qty,
                    symbol,
                    price,
                    tif,
                    display,
                    capacity,
                    ise,
                    cross_type,
                    cl_ord_id: id,
                }
            },
        )
}

/// Well-formed optional appendages: TLVs of 1..=12 bytes each.
fn appendages() -> impl Strategy<Value = Vec<u8>> {
    vec(vec(any::<u8>(), 1..=12), 0..4).prop_map(|elements| {
        let mut out = Vec::new();
        for e in elements {
            out.push(e.len() as u8);
            out.extend_from_slice(&e);
        }
        out
    })
}

/// Everything needed to build one message of each direction (messages borrow their
/// appendages, so they are built inside the test).
#[derive(Debug, Clone)]
struct OuchSeed {
    kind: u8,
    f: OrderFields,
    ts: u64,
    refs: (u32, u32),
    small: (u8, u16, u8),
    appendages: Vec<u8>,
}

fn ouch_seed() -> impl Strategy<Value = OuchSeed> {
    (
        0u8..24,
        fields(),
        any_u64(),
        (any::<u32>(), any::<u32>()),
        (printable(), any::<u16>(), code(b"LDU")),
        appendages(),
    )
        .prop_map(|(kind, f, ts, refs, small, appendages)| OuchSeed {
            kind,
            f,
            ts,
            refs,
            small,
            appendages,
        })
}

fn inbound(s: &OuchSeed) -> Inbound<'_> {
    let (f, refs) = (s.f, s.refs);
    match s.kind % 7 {
        0 => Inbound::EnterOrder(EnterOrder {
            user_ref: refs.0,
            order: f,
            appendages: &s.appendages,
        }),
        1 => Inbound::ReplaceOrder(ReplaceOrder {
            orig_user_ref: refs.0,
            user_ref: refs.1,
            qty: f.qty,
            price: f.price,
            tif: f.tif,
            display: f.display,
            ise: f.ise,
            cl_ord_id: f.cl_ord_id,
            appendages: &s.appendages,
        }),
        2 => Inbound::CancelOrder {
            user_ref: refs.0,
            qty: f.qty,
        },
        3 => Inbound::ModifyOrder {
            user_ref: refs.0,
            side: f.side,
            qty: f.qty,
        },
        4 => Inbound::AccountQuery,
        5 => Inbound::ReconcileQuery { token: refs.1 },
        _ => Inbound::OrderStatusQuery { user_ref: refs.0 },
    }
}

fn outbound(s: &OuchSeed, d: Dialect) -> Outbound<'_> {
    let (f, ts, refs) = (s.f, s.ts, s.refs);
    let (reason, reason16, state) = s.small;
    let accepted = OrderAccepted {
        timestamp: ts,
        orig_user_ref: 0,
        user_ref: refs.0,
        order: f,
        order_ref: ts.rotate_left(7),
        state: if state == b'U' { b'L' } else { state },
        appendages: &s.appendages,
    };
    match s.kind % 17 {
        0 => Outbound::SystemEvent {
            timestamp: ts,
            event_code: reason,
        },
        1 => Outbound::Accepted(accepted),
        2 => Outbound::Replaced(OrderAccepted {
            orig_user_ref: refs.1,
            ..accepted
        }),
        3 => Outbound::Canceled {
            timestamp: ts,
            orig_user_ref: if d.canceled_orig_user_ref {
                refs.1
            } else {
                refs.0
            },
            user_ref: refs.0,
            qty: f.qty,
            reason,
        },
        4 => Outbound::AiqCanceled {
            timestamp: ts,
            user_ref: refs.0,
            decrement_qty: f.qty,
            reason,
            prevented_qty: refs.1,
            execution_price: f.price,
            liquidity_flag: f.cl_ord_id[0],
            aiq_strategy: f.cl_ord_id[1],
        },
        5 => Outbound::Executed {
            timestamp: ts,
            user_ref: refs.0,
            qty: f.qty,
            price: f.price,
            liquidity_flag: reason,
            match_number: ts ^ 0x55,
            appendages: &s.appendages,
        },
        6 => Outbound::BrokenTrade {
            timestamp: ts,
            user_ref: refs.0,
            match_number: ts,
            reason,
            cl_ord_id: f.cl_ord_id,
        },
        7 => Outbound::Rejected {
            timestamp: ts,
            user_ref: refs.0,
            reason: reason16,
            cl_ord_id: f.cl_ord_id,
        },
        8 => Outbound::CancelPending {
            timestamp: ts,
            user_ref: refs.0,
        },
        9 => Outbound::CancelReject {
            timestamp: ts,
            user_ref: refs.0,
        },
        10 => Outbound::PriorityUpdate {
            timestamp: ts,
            user_ref: refs.0,
            price: f.price,
            display: f.display,
            order_ref: ts,
        },
        11 => Outbound::Modified {
            timestamp: ts,
            user_ref: refs.0,
            side: f.side,
            qty: f.qty,
        },
        12 => Outbound::Restated {
            timestamp: ts,
            user_ref: refs.0,
            reason,
            appendages: &s.appendages,
        },
        13 => Outbound::AccountQueryResponse {
            timestamp: ts,
            next_user_ref: refs.1,
        },
        14 => Outbound::Position {
            timestamp: ts,
            symbol: f.symbol,
            bought_qty: ts,
            sold_qty: u64::from(refs.1),
        },
        15 => Outbound::ReconcileEnd {
            timestamp: ts,
            token: refs.1,
            open_orders: refs.0,
            positions: f.qty,
            as_of_sequence: ts,
        },
        _ => Outbound::OrderStatus(OrderStatus {
            timestamp: ts,
            user_ref: refs.0,
            state,
            side: f.side,
            symbol: f.symbol,
            price: f.price,
            open_qty: f.qty,
            executed_qty: refs.1,
            cl_ord_id: f.cl_ord_id,
        }),
    }
}

const OUCH_TOKENS: &[&[u8]] = &[
    b"O",
    b"U",
    b"X",
    b"M",
    b"Q",
    b"q",
    b"r",
    b"S",
    b"A",
    b"C",
    b"D",
    b"E",
    b"B",
    b"J",
    b"P",
    b"I",
    b"T",
    b"R",
    b"o",
    b"y",
    b"z",
    b"\x00\x00",
    b"\x00\x05",
    b"\xff\xff",
    b"\x01",
    b"        ",
    b"\x7f",
];

/// Decodes `msg` every way; a message that decodes re-encodes to exactly the same bytes
/// (OUCH has one encoding per message: the decoder accepts nothing the encoder cannot write).
fn decode_ouch_every_way(msg: &[u8]) -> Result<(), TestCaseError> {
    let mut out = [0u8; 512];
    for d in [Dialect::SPEC, Dialect::OUCH_CONNECT] {
        if let Ok(m) = decode_inbound(msg, d) {
            let n = encode_inbound(&mut out, &m, d).unwrap();
            prop_assert_eq!(&out[..n], msg, "inbound {:?} in {:?}", m, d);
        }
        if let Ok(m) = decode_outbound(msg, d) {
            let n = encode_outbound(&mut out, &m, d).unwrap();
            prop_assert_eq!(&out[..n], msg, "outbound {:?} in {:?}", m, d);
        }
    }
    Ok(())
}

// Goal: OUCH decoders of both directions, in both dialects, never panic on random or mutated
// valid messages, every valid message round-trips, and whatever decodes re-encodes to the same
// bytes.
#[test]
fn ouch_inbound_and_outbound() {
    let input = (
        ouch_seed(),
        dialect(),
        mutations(),
        bytes(120),
        any::<bool>(),
    );
    fuzz(
        "ouch",
        1,
        input,
        |(seed, d, edits, random, outbound_side)| {
            let mut out = [0u8; 512];
            let mut wire = if outbound_side {
                let msg = outbound(&seed, d);
                let n = encode_outbound(&mut out, &msg, d).unwrap();
                prop_assert_eq!(decode_outbound(&out[..n], d), Ok(msg));
                out[..n].to_vec()
            } else {
                let msg = inbound(&seed);
                let n = encode_inbound(&mut out, &msg, d).unwrap();
                prop_assert_eq!(decode_inbound(&out[..n], d), Ok(msg));
                out[..n].to_vec()
            };
            decode_ouch_every_way(&random)?;
            mutate(&mut wire, &edits, OUCH_TOKENS);
            decode_ouch_every_way(&wire)
        },
    );
}

// ----- WebSocket frames --------------------------------------------------------------------------

/// A message as the peer means it.
#[derive(Debug, Clone, PartialEq)]
enum WsMsg {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(Option<u16>, String),
}

fn ws_msg() -> impl Strategy<Value = WsMsg> {
    let close_code = prop_oneof![1000u16..=1003, 1007u16..=1014, 3000u16..=4999];
    prop_oneof![
        3 => ".{0,40}".prop_map(WsMsg::Text),
        1 => "[a-z]{126,300}".prop_map(WsMsg::Text),
        2 => bytes(200).prop_map(WsMsg::Binary),
        2 => vec(any::<u8>(), 0..=125).prop_map(WsMsg::Ping),
        1 => vec(any::<u8>(), 0..=125).prop_map(WsMsg::Pong),
        1 => (proptest::option::of(close_code), "[ -~]{0,40}")
            .prop_map(|(c, r)| WsMsg::Close(c, if c.is_some() { r } else { String::new() })),
    ]
}

impl WsMsg {
    fn owned(m: WsMessage<'_>) -> Self {
        match m {
            WsMessage::Text(t) => Self::Text(t.to_string()),
            WsMessage::Binary(b) => Self::Binary(b.to_vec()),
            WsMessage::Ping(p) => Self::Ping(p.to_vec()),
            WsMessage::Pong(p) => Self::Pong(p.to_vec()),
            WsMessage::Close { code, reason } => Self::Close(code, reason.to_string()),
        }
    }

    /// Appends the message's frames: a data message split into `fragments` frames, with a
    /// ping between the first two when `interleave`.
    fn encode(
        &self,
        wire: &mut Vec<u8>,
        mask: Option<[u8; 4]>,
        fragments: usize,
        interleave: bool,
    ) {
        let mut buf = vec![0u8; 1_024];
        let mut frame = |wire: &mut Vec<u8>, fin: bool, op: Opcode, payload: &[u8]| {
            let n = ws::encode_frame(&mut buf, fin, op, payload, mask);
            wire.extend_from_slice(&buf[..n]);
        };
        let (op, payload): (Opcode, &[u8]) = match self {
            Self::Text(t) => (Opcode::Text, t.as_bytes()),
            Self::Binary(b) => (Opcode::Binary, b),
            Self::Ping(p) => return frame(wire, true, Opcode::Ping, p),
            Self::Pong(p) => return frame(wire, true, Opcode::Pong, p),
            Self::Close(None, _) => return frame(wire, true, Opcode::Close, &[]),
            Self::Close(Some(code), reason) => {
                let n = ws::encode_close(&mut buf, *code, reason, mask);
                wire.extend_from_slice(&buf[..n]);
                return;
            }
        };
        // Split anywhere, even inside a UTF-8 sequence: the decoder must reassemble first.
        let parts = fragments.clamp(1, payload.len().max(1));
        let step = payload.len().div_ceil(parts).max(1);
        let chunks: Vec<&[u8]> = if payload.is_empty() {
            vec![&[][..]]
        } else {
            payload.chunks(step).collect()
        };
        for (i, chunk) in chunks.iter().enumerate() {
            let op = if i == 0 { op } else { Opcode::Continuation };
            frame(wire, i + 1 == chunks.len(), op, chunk);
            if i == 0 && interleave && chunks.len() > 1 {
                frame(wire, true, Opcode::Ping, b"mid");
            }
        }
    }
}

/// Feeds `wire` to `d` in chunks of the given sizes (as reads would deliver it) and returns
/// the messages decoded, stopping at the first error. Checks that every call either consumes
/// bytes or returns a message, so no input can stall the decoder in a loop.
fn ws_decode(d: &mut Decoder, wire: &[u8], chunks: &[usize]) -> (Vec<WsMsg>, Option<ws::WsError>) {
    let mut got = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut at = 0;
    let mut chunk = chunks.iter().cycle();
    while at < wire.len() {
        let n = (*chunk.next().unwrap_or(&1)).clamp(1, wire.len() - at);
        pending.extend_from_slice(&wire[at..at + n]);
        at += n;
        // Each pass consumes a byte or more, or ends this read: bounded by the bytes held.
        let mut ended = false;
        for _ in 0..=pending.len() + 1 {
            match d.decode(&pending) {
                Err(e) => return (got, Some(e)),
                Ok((used, msg)) => {
                    assert!(
                        used <= pending.len(),
                        "consumed {used} of {}",
                        pending.len()
                    );
                    let done = used == 0 && msg.is_none();
                    if let Some(m) = msg {
                        got.push(WsMsg::owned(m));
                    }
                    pending.drain(..used);
                    if done {
                        ended = true;
                        break;
                    }
                }
            }
        }
        assert!(
            ended,
            "the decoder kept returning without consuming its input"
        );
    }
    (got, None)
}

fn ws_role() -> impl Strategy<Value = Role> {
    prop_oneof![Just(Role::Server), Just(Role::Client)]
}

const WS_TOKENS: &[&[u8]] = &[
    b"\x81",
    b"\x01",
    b"\x80",
    b"\x88",
    b"\x89",
    b"\x8a",
    b"\x82",
    b"\x00",
    b"\x7e",
    b"\x7f",
    b"\xfe",
    b"\xff",
    b"\x80\x00",
    b"\x03\xe8",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
];

// Goal: the WebSocket decoder, both roles, streaming in arbitrary read sizes, never panics or
// stalls on random or mutated valid frame streams; unmutated streams (fragmented messages,
// pings between fragments) decode to exactly the messages sent.
#[test]
fn websocket_frames() {
    let input = (
        ws_role(),
        vec((ws_msg(), 1usize..4, any::<bool>()), 1..6),
        any::<[u8; 4]>(),
        vec(1usize..64, 1..4),
        mutations(),
        bytes(400),
    );
    fuzz(
        "websocket frames",
        1,
        input,
        |(role, msgs, key, chunks, edits, random)| {
            let mask = (role == Role::Server).then_some(key);
            let mut wire = Vec::new();
            let mut expected = Vec::new();
            for (m, fragments, interleave) in &msgs {
                m.encode(&mut wire, mask, *fragments, *interleave);
                let fragmented = matches!(m, WsMsg::Text(t) if t.len() > 1)
                    || matches!(m, WsMsg::Binary(b) if b.len() > 1);
                if *interleave && *fragments > 1 && fragmented {
                    expected.push(WsMsg::Ping(b"mid".to_vec()));
                }
                expected.push(m.clone());
            }
            let (got, err) = ws_decode(&mut Decoder::new(role, 1_024), &wire, &chunks);
            prop_assert_eq!(err, None);
            prop_assert_eq!(got, expected);
            let _ = ws_decode(&mut Decoder::new(role, 256), &random, &chunks);
            mutate(&mut wire, &edits, WS_TOKENS);
            let _ = ws_decode(&mut Decoder::new(role, 256), &wire, &chunks);
            let _ = ws_decode(&mut Decoder::new(role, 1_024), &wire, &chunks);
            Ok(())
        },
    );
}

// ----- WebSocket handshake -----------------------------------------------------------------------

const HTTP_TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b":",
    b": ",
    b",",
    b" ",
    b"\n",
    b"GET ",
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"Upgrade: websocket\r\n",
    b"Connection: Upgrade\r\n",
    b"Sec-WebSocket-Version: 13\r\n",
    b"Sec-WebSocket-Version: 8\r\n",
    b"Sec-WebSocket-Key: ",
    b"Sec-WebSocket-Accept: ",
    b"==",
    b"\xc3\xa9",
    b"\xff",
    b"HTTP/1.1 101 Switching Protocols",
    b"\x00",
];

// Goal: the opening handshake parsers (server: request; client: response) never panic on
// random or mutated valid heads, answer `None` for every strict prefix of a valid head, and
// accept the valid head whole.
#[test]
fn websocket_handshake() {
    let input = (
        "[a-z0-9.:]{1,30}",
        "/[a-z/]{0,20}",
        any::<[u8; 16]>(),
        mutations(),
        bytes(300),
        any::<bool>(),
    );
    fuzz(
        "websocket handshake",
        1,
        input,
        |(host, path, nonce, edits, random, respond)| {
            let (request, key) = ws::request(&host, &path, nonce);
            let response = ws::response(&key);
            let head = if respond { &response } else { &request };
            for cut in 0..head.len() {
                let partial = &head.as_bytes()[..cut];
                if respond {
                    prop_assert_eq!(ws::parse_response(partial, &key), Ok(None));
                } else {
                    prop_assert_eq!(ws::parse_request(partial), Ok(None));
                }
            }
            if respond {
                prop_assert_eq!(
                    ws::parse_response(response.as_bytes(), &key),
                    Ok(Some(response.len()))
                );
            } else {
                let (parsed, len) = ws::parse_request(request.as_bytes()).unwrap().unwrap();
                prop_assert_eq!(
                    (parsed.path.as_str(), parsed.key.as_str(), len),
                    (path.as_str(), key.as_str(), request.len())
                );
            }
            let _ = ws::parse_request(&random);
            let _ = ws::parse_response(&random, &key);
            let mut mutated = head.as_bytes().to_vec();
            mutate(&mut mutated, &edits, HTTP_TOKENS);
            let _ = ws::parse_request(&mutated);
            let _ = ws::parse_response(&mutated, &key);
            if let Ok(Some((_, len))) = ws::parse_request(&mutated) {
                prop_assert!(len <= mutated.len() && len <= ws::HANDSHAKE_MAX);
            }
            Ok(())
        },
    );
}

// ----- market-data JSON ------------------------------------------------------------------------

fn md_request() -> impl Strategy<Value = Request> {
    let channel = prop_oneof![
        Just(Channel::Book),
        Just(Channel::Trades),
        Just(Channel::Ticker)
    ];
    prop_oneof![
        (channel.clone(), ".{0,12}")
            .prop_map(|(channel, symbol)| Request::Subscribe { channel, symbol }),
        (channel, ".{0,12}").prop_map(|(channel, symbol)| Request::Unsubscribe { channel, symbol }),
        ".{0,12}".prop_map(|symbol| Request::Snapshot { symbol }),
    ]
}

fn request_json(r: &Request) -> String {
    let v = match r {
        Request::Subscribe { channel, symbol } => {
            serde_json::json!({"op": "subscribe", "channel": channel.name(), "symbol": symbol})
        }
        Request::Unsubscribe { channel, symbol } => {
            serde_json::json!({"op": "unsubscribe", "channel": channel.name(), "symbol": symbol})
        }
        Request::Snapshot { symbol } => serde_json::json!({"op": "snapshot", "symbol": symbol}),
    };
    v.to_string()
}

const JSON_TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"null",
    b"true",
    b"-",
    b"1e999",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"\"op\"",
    b"\"type\"",
    b"\"seq\"",
    b"\"bids\"",
    b"\"symbol\"",
    b"\"AAPL\"",
    b"[[1,2]]",
    b"[[[[[[[[",
];

/// A market-data message from the venue, written by the server's own encoders.
#[derive(Debug, Clone)]
enum MdSeed {
    Snapshot(String, u64, Vec<(i64, u64)>, Vec<(i64, u64)>),
    Delta(String, u64, bool, i64, u64),
    Trade(String, u64, i64, u64, bool),
    Ticker(String, u64, (i64, u64), (i64, u64)),
    Notice(String),
}

fn md_symbol() -> impl Strategy<Value = String> {
    prop_oneof![4 => Just("AAPL".to_string()), 2 => Just("MSFT".to_string()), 1 => "[A-Z]{0,9}"]
}

fn md_seq() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..12, 1 => any_u64()]
}

fn md_seed() -> impl Strategy<Value = MdSeed> {
    let level = (
        prop_oneof![90i64..110, any::<i64>()],
        prop_oneof![0u64..5, any::<u64>()],
    );
    prop_oneof![
        2 => (md_symbol(), md_seq(), vec(level.clone(), 0..6), vec(level.clone(), 0..6))
            .prop_map(|(s, q, b, a)| MdSeed::Snapshot(s, q, b, a)),
        4 => (md_symbol(), md_seq(), any::<bool>(), level.clone())
            .prop_map(|(s, q, bid, (p, n))| MdSeed::Delta(s, q, bid, p, n)),
        2 => (md_symbol(), md_seq(), level.clone(), any::<bool>())
            .prop_map(|(s, q, (p, n), buy)| MdSeed::Trade(s, q, p, n, buy)),
        1 => (md_symbol(), md_seq(), level.clone(), level)
            .prop_map(|(s, q, b, a)| MdSeed::Ticker(s, q, b, a)),
        1 => ".{0,20}".prop_map(MdSeed::Notice),
    ]
}

impl MdSeed {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Snapshot(s, q, b, a) => md::write_snapshot(
                out,
                s,
                *q,
                b.iter().map(|(p, n)| (p, n)),
                a.iter().map(|(p, n)| (p, n)),
            ),
            Self::Delta(s, q, bid, p, n) => {
                let side = if *bid { BookSide::Bid } else { BookSide::Ask };
                md::write_delta(out, s, *q, side, *p, *n)
            }
            Self::Trade(s, q, p, n, buy) => md::write_trade(out, s, *q, *p, *n, *buy),
            Self::Ticker(s, q, b, a) => md::write_ticker(out, s, *q, *b, *a),
            Self::Notice(d) => md::write_notice(out, "error", d),
        }
    }
}

// Goal: the market-data request parser never panics on random or mutated valid JSON and parses
// every valid request to itself.
#[test]
fn market_data_requests() {
    let input = (md_request(), mutations(), bytes(200));
    fuzz(
        "market-data requests",
        1,
        input,
        |(request, edits, random)| {
            let text = request_json(&request);
            prop_assert_eq!(md::parse_request(&text), Ok(request));
            let _ = md::parse_request(&String::from_utf8_lossy(&random));
            let mut mutated = text.into_bytes();
            mutate(&mut mutated, &edits, JSON_TOKENS);
            let _ = md::parse_request(&String::from_utf8_lossy(&mutated));
            Ok(())
        },
    );
}

/// Runs a feed handler against a scripted venue on the simulated network: the venue answers
/// the handshake, then sends `wire` (frames as bytes); returns the handler afterwards.
fn run_feed(wire: &[u8]) -> FeedHandler {
    let world = SimWorld::new(11);
    let mut venue: SimEndpoint = SimWorld::endpoint(&world);
    let mut engine: SimEndpoint = SimWorld::endpoint(&world);
    let addr: SocketAddr = "10.1.2.3:15002".parse().unwrap();
    venue.listen(addr).unwrap();
    let mut handler = FeedHandler::new(FeedConfig {
        addr,
        symbols: vec!["AAPL".into(), "MSFT".into()],
        pending_max: 16,
        max_message: 16 * 1024,
        ..FeedConfig::default()
    });
    handler.start(0, &mut engine);
    let (mut events, mut sent) = (Vec::new(), false);
    for step in 1..40u64 {
        let now_ns = step * 1_000_000;
        engine.poll(now_ns, 0, &mut events).unwrap();
        for e in events.drain(..) {
            handler.on_event(now_ns, &mut engine, &e);
        }
        handler.step(now_ns, &mut engine);
        venue.poll(now_ns, 0, &mut events).unwrap();
        for e in events.drain(..) {
            if let NetEvent::Readable { conn } = e {
                venue_answer(&mut venue, conn, wire, &mut sent);
            }
        }
    }
    handler
}

fn venue_answer(venue: &mut SimEndpoint, conn: ConnId, wire: &[u8], sent: &mut bool) {
    if *sent {
        let n = venue.received(conn).len();
        venue.consume(conn, n); // pongs and requests: read and ignored
        return;
    }
    if let Ok(Some((request, n))) = ws::parse_request(venue.received(conn)) {
        venue.consume(conn, n);
        venue
            .send(conn, ws::response(&request.key).as_bytes())
            .unwrap();
        if !wire.is_empty() {
            venue.send(conn, wire).unwrap();
        }
        *sent = true;
    }
}

// Goal: the feed handler (WebSocket client, JSON parsing, local books) never panics on a venue
// that sends random or mutated valid market data, and a book it holds in sync is never
// crossed. Method: a scripted venue on the simulated network answers the handshake with the
// fuzzed stream.
#[test]
fn market_data_feed_handler() {
    let input = (
        vec(md_seed(), 1..12),
        mutations(),
        any::<bool>(),
        any::<bool>(),
        bytes(200),
    );
    fuzz(
        "market-data feed handler",
        1,
        input,
        |(seeds, edits, frame_level, random_tail, random)| {
            let mut wire = Vec::new();
            let mut text = Vec::new();
            let mut frame = vec![0u8; 32 * 1024];
            for (i, seed) in seeds.iter().enumerate() {
                text.clear();
                seed.write(&mut text);
                if !frame_level && i == 0 {
                    mutate(&mut text, &edits, JSON_TOKENS);
                }
                let op = if std::str::from_utf8(&text).is_ok() {
                    Opcode::Text
                } else {
                    Opcode::Binary
                };
                let n = ws::encode_frame(&mut frame, true, op, &text, None);
                wire.extend_from_slice(&frame[..n]);
            }
            if frame_level {
                mutate(&mut wire, &edits, WS_TOKENS);
            }
            if random_tail {
                wire.extend_from_slice(&random);
            }
            let handler = run_feed(&wire);
            for symbol in 0..2u16 {
                let book = handler.book(symbol);
                if let (Some(_), Some(bid), Some(ask)) = (
                    book.seq(),
                    book.best(BookSide::Bid),
                    book.best(BookSide::Ask),
                ) {
                    prop_assert!(bid.0 < ask.0, "crossed book kept: {:?} / {:?}", bid, ask);
                }
            }
            Ok(())
        },
    );
}

// Goal: a trade numbered 2^64-1 followed by another is a counted gap, not an overflow (found
// by market_data_feed_handler: `prev + 1` panicked in debug builds and wrapped in release).
#[test]
fn a_trade_after_the_last_sequence_number_is_a_gap() {
    let mut wire = Vec::new();
    let (mut text, mut frame) = (Vec::new(), [0u8; 256]);
    for seq in [u64::MAX, 0] {
        text.clear();
        md::write_trade(&mut text, "AAPL", seq, 100, 1, true);
        let n = ws::encode_frame(&mut frame, true, Opcode::Text, &text, None);
        wire.extend_from_slice(&frame[..n]);
    }
    let stats = run_feed(&wire).stats();
    assert_eq!((stats.trades, stats.trade_gaps), (2, 1));
    assert_eq!(stats.protocol_errors, 0);
}

// ----- IPC records -----------------------------------------------------------------------------

/// Stamps position and checksum as the ring does (docs/ipc.md: CRC-32 of bytes 4..64 at 0..4,
/// the position at 8..16, little-endian).
fn seal(record: &mut [u8; 64], position: u64) {
    record[8..16].copy_from_slice(&position.to_le_bytes());
    let crc = crc32fast::hash(&record[4..]);
    record[0..4].copy_from_slice(&crc.to_le_bytes());
}

fn order_id() -> impl Strategy<Value = ClientOrderId> {
    (any::<u16>(), prop_oneof![1u64..100, 1u64..(1 << 48)])
        .prop_map(|(s, q)| ClientOrderId::new(StrategyId(s), q).unwrap())
}

fn command() -> impl Strategy<Value = Command> {
    let new = (
        order_id(),
        (any::<u16>(), any::<u16>()),
        any::<bool>(),
        (any::<bool>(), any::<bool>()),
        qty(),
        price(),
    )
        .prop_map(
            |(id, (venue, symbol), buy, (ioc, reduce_only), qty, price)| {
                Command::New(NewOrder {
                    id,
                    venue: VenueId(venue),
                    symbol: SymbolId(symbol),
                    side: if buy { Side::Buy } else { Side::Sell },
                    price: Price(price),
                    qty,
                    tif: if ioc {
                        TimeInForce::ImmediateOrCancel
                    } else {
                        TimeInForce::Day
                    },
                    reduce_only,
                })
            },
        );
    prop_oneof![
        new,
        order_id().prop_map(|id| Command::Cancel { id }),
        (order_id(), order_id(), qty(), price()).prop_map(|(id, new_id, qty, price)| {
            Command::Replace(Replace {
                id,
                new_id,
                price: Price(price),
                qty,
            })
        }),
        Just(Command::MassCancel {
            scope: MassCancelScope::Strategy
        }),
        any::<u16>().prop_map(|s| Command::MassCancel {
            scope: MassCancelScope::Symbol(SymbolId(s))
        }),
    ]
}

const REFUSALS: [RefusalReason; 23] = [
    RefusalReason::NotSynced,
    RefusalReason::RiskQty,
    RefusalReason::RiskNotional,
    RefusalReason::RiskPosition,
    RefusalReason::UnknownOrderOnSymbol,
    RefusalReason::BulkheadSymbol,
    RefusalReason::BulkheadVenue,
    RefusalReason::CancelLaneFull,
    RefusalReason::ReplaceLaneFull,
    RefusalReason::NewLaneFull,
    RefusalReason::DuplicateId,
    RefusalReason::OrderTableFull,
    RefusalReason::UnknownOrder,
    RefusalReason::AlreadyPending,
    RefusalReason::ExecutorStalled,
    RefusalReason::JournalUnavailable,
    RefusalReason::BadRoute,
    RefusalReason::LinkReadOnly,
    RefusalReason::RiskPrice,
    RefusalReason::SessionFull,
    // Codes past a gap (24-29 unused) round-trip like the others.
    RefusalReason::StrategyRate,
    RefusalReason::StrategyInFlight,
    // Past the second gap (32-39 unused).
    RefusalReason::ReduceOnlyIncreases,
];

fn event_kind() -> impl Strategy<Value = EventKind> {
    let reject = prop_oneof![
        Just(RejectReason::VenueSystem),
        Just(RejectReason::VenueThrottle),
        Just(RejectReason::Invalid),
        Just(RejectReason::DuplicateId),
        Just(RejectReason::MarketClosed),
        Just(RejectReason::NotReceived),
        any::<u8>().prop_map(RejectReason::Other),
    ];
    let cancel_reject = prop_oneof![
        Just(CancelRejectReason::TooLateToCancel),
        Just(CancelRejectReason::UnknownOrder),
        Just(CancelRejectReason::VenueSystem),
        Just(CancelRejectReason::NotApplied),
    ];
    prop_oneof![
        Just(EventKind::Accepted),
        (qty(), price(), qty()).prop_map(|(qty, p, leaves)| EventKind::PartiallyFilled {
            qty,
            price: Price(p),
            leaves
        }),
        (qty(), price()).prop_map(|(qty, p)| EventKind::Filled {
            qty,
            price: Price(p)
        }),
        Just(EventKind::Canceled),
        order_id().prop_map(|new_id| EventKind::Replaced { new_id }),
        reject.prop_map(|reason| EventKind::Rejected { reason }),
        cancel_reject.prop_map(|reason| EventKind::CancelRejected { reason }),
        Just(EventKind::Unknown),
        Just(EventKind::Shed),
        Just(EventKind::Throttled),
        any_u64().prop_map(|retry_after_ns| EventKind::BreakerOpen { retry_after_ns }),
        (0..REFUSALS.len()).prop_map(|i| EventKind::Refused {
            reason: REFUSALS[i]
        }),
    ]
}

fn to_record(bytes: &[u8]) -> [u8; 64] {
    let mut r = [0u8; 64];
    let n = bytes.len().min(64);
    r[..n].copy_from_slice(&bytes[..n]);
    r
}

// Goal: the shared-memory record decoders never panic on random or mutated valid records
// (resealed, as a hostile strategy that computes the checksum would write them, or not);
// every command and event round-trips, and whatever decodes re-encodes to the same meaning.
// (core/engine/src/ipc/tests.rs keeps the random-record test; this one adds valid-record mutation.)
#[test]
fn ipc_records() {
    let input = (
        command(),
        (order_id(), event_kind(), any_u64()),
        any_u64(),
        mutations(),
        any::<bool>(),
        bytes(64),
    );
    fuzz(
        "ipc records",
        1,
        input,
        |(cmd, (id, kind, at_ns), position, edits, reseal, random)| {
            let mut r = encode_command(&cmd);
            seal(&mut r, position);
            prop_assert_eq!(decode_command(position, &r), Ok(cmd));
            let event = IpcEvent::Event(Event { id, kind, at_ns });
            let mut e = encode_event(&event);
            seal(&mut e, position);
            prop_assert_eq!(decode_event(position, &e), Ok(event));
            for valid in [r, e, to_record(&random)] {
                let mut bytes = valid.to_vec();
                mutate(&mut bytes, &edits, &[]);
                let mut record = to_record(&bytes);
                if reseal {
                    seal(&mut record, position);
                }
                if let Ok(c) = decode_command(position, &record) {
                    let mut again = encode_command(&c);
                    seal(&mut again, position);
                    prop_assert_eq!(decode_command(position, &again), Ok(c));
                }
                if let Ok(IpcEvent::Event(ev)) = decode_event(position, &record) {
                    let mut again = encode_event(&IpcEvent::Event(ev));
                    seal(&mut again, position);
                    prop_assert_eq!(decode_event(position, &again), Ok(IpcEvent::Event(ev)));
                }
            }
            Ok(())
        },
    );
}

// ----- journal files ---------------------------------------------------------------------------

fn journal_order(seq: u64, qty: u32, price: i64) -> NewOrder {
    NewOrder {
        id: ClientOrderId::new(StrategyId((seq % 3) as u16), seq).unwrap(),
        venue: VenueId((seq % 2) as u16),
        symbol: SymbolId(1),
        side: if seq % 2 == 0 { Side::Buy } else { Side::Sell },
        price: Price(price),
        qty,
        tif: TimeInForce::Day,
        reduce_only: false,
    }
}

/// Records over a few orders (so fills and closes find their intents), values at the edges.
fn journal_record() -> impl Strategy<Value = JournalRecord> {
    let seq = 1u64..10;
    let id = seq.clone().prop_map(|s| journal_order(s, 1, 0).id);
    prop_oneof![
        3 => (seq.clone(), qty(), any::<u32>(), price()).prop_map(|(s, q, w, p)| {
            JournalRecord::Intent { order: journal_order(s, q, p), wire_ref: w }
        }),
        1 => (id.clone(), any_u64())
            .prop_map(|(id, venue_seq)| JournalRecord::Accepted { id, venue_seq }),
        2 => (id.clone(), qty(), price(), any_u64()).prop_map(|(id, qty, p, venue_seq)| {
            JournalRecord::Fill { id, qty, price: Price(p), venue_seq }
        }),
        1 => (id, any_u64()).prop_map(|(id, venue_seq)| JournalRecord::Closed { id, venue_seq }),
        1 => (any::<u16>(), any_u64()).prop_map(|(v, a)| JournalRecord::SessionSeq {
            venue: VenueId(v),
            applied_through: a
        }),
        1 => (any::<u16>(), any_u64()).prop_map(|(s, h)| JournalRecord::IdHighWater {
            strategy: StrategyId(s),
            high_water_mark: h
        }),
        1 => (seq, qty(), any::<u32>(), any::<bool>(), qty()).prop_map(|(s, q, w, a, f)| {
            let order = journal_order(s, q, 5);
            JournalRecord::OpenOrder { order, wire_ref: w, accepted: a, filled: f }
        }),
        1 => (any::<u16>(), any::<u32>()).prop_map(|(v, w)| JournalRecord::WireRefFloor {
            venue: VenueId(v),
            next_wire_ref: w
        }),
    ]
}

fn recovery_of(records: &[JournalRecord]) -> Recovery {
    let mut recovery = Recovery::default();
    records.iter().for_each(|r| recovery.apply(r));
    recovery
}

/// The journal's files, sorted (journal files, checkpoints, whatever else is there).
fn journal_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

const JOURNAL_TOKENS: &[&[u8]] = &[&[0u8; 64], &[0xffu8; 8], &[0u8; 4], b"\x01", b"\x09"];

// Goal: opening a journal whose files were damaged anywhere (records, headers, checkpoints:
// bytes flipped, boundary integers written, runs repeated, files cut short or grown) ends in
// an open journal or a typed refusal, never a panic; an undamaged journal (rollovers and
// checkpoints included) replays to the state its records describe; and applying arbitrary
// records (hostile quantities and sequence numbers) to a recovery never panics and its
// checkpoint rebuilds the same state.
#[test]
fn journal_records_and_files() {
    let input = (
        vec(journal_record(), 1..30),
        2u64..6,
        any::<Index>(),
        mutations(),
    );
    fuzz("journal", 4, input, |(records, per_file, which, edits)| {
        let expected = recovery_of(&records);
        let mut rebuilt = recovery_of(&expected.snapshot());
        rebuilt.orphans = expected.orphans;
        prop_assert_eq!(&rebuilt, &expected);

        let dir = tempfile::tempdir().unwrap();
        let config = JournalConfig {
            dir: dir.path().to_path_buf(),
            file_bytes: (per_file + 1) * RECORD_LEN as u64,
        };
        let (mut journal, _) = Journal::open(config.clone(), |_| {}).unwrap();
        for r in &records {
            journal.append(r).unwrap();
        }
        drop(journal);
        let mut replayed = Recovery::default();
        let (journal, _) = Journal::open(config.clone(), |r| replayed.apply(r)).unwrap();
        drop(journal);
        replayed.orphans = expected.orphans;
        prop_assert_eq!(&replayed, &expected);

        let files = journal_files(dir.path());
        let victim = &files[which.index(files.len())];
        let mut bytes = std::fs::read(victim).unwrap();
        mutate(&mut bytes, &edits, JOURNAL_TOKENS);
        std::fs::write(victim, &bytes).unwrap();
        if let Ok((mut journal, _)) = Journal::open(config.clone(), |_| {}) {
            let _ = journal.append(&records[0]);
        }
        Ok(())
    });
}

// ----- the configuration file ------------------------------------------------------------------

const EXAMPLE_TOML: &str = include_str!("../../../docs/keel.example.toml");

/// Where a value sits in a TOML document.
type TomlPath = Vec<TomlStep>;

#[derive(Debug, Clone)]
enum TomlStep {
    Key(String),
    At(usize),
}

fn toml_paths(value: &toml::Value, here: &mut TomlPath, out: &mut Vec<TomlPath>) {
    out.push(here.clone());
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                here.push(TomlStep::Key(k.clone()));
                toml_paths(v, here, out);
                here.pop();
            }
        }
        toml::Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                here.push(TomlStep::At(i));
                toml_paths(v, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn toml_at<'a>(mut value: &'a mut toml::Value, path: &[TomlStep]) -> &'a mut toml::Value {
    for step in path {
        value = match (step, value) {
            (TomlStep::Key(k), toml::Value::Table(t)) => t.get_mut(k).unwrap(),
            (TomlStep::At(i), toml::Value::Array(a)) => &mut a[*i],
            _ => unreachable!("paths come from the same document"),
        };
    }
    value
}

/// Values at the edges of what a configuration key may hold, and of the wrong types.
fn toml_edge(pick: usize) -> toml::Value {
    use toml::Value as V;
    let ints = [
        i64::MIN,
        -1,
        0,
        1,
        2,
        7,
        100,
        101,
        1_000,
        65_535,
        65_536,
        u32::MAX as i64,
        u32::MAX as i64 + 1,
        1 << 40,
        i64::MAX,
    ];
    let others = [
        V::Float(f64::NAN),
        V::Float(1e300),
        V::Float(-0.5),
        V::Boolean(true),
        V::Boolean(false),
        V::String(String::new()),
        V::String("x".repeat(300)),
        V::String("\u{0}é".into()),
        V::String("spin".into()),
        V::String("split".into()),
        V::String("127.0.0.1:0".into()),
        V::String("ouch-connect".into()),
        V::String("account-query".into()),
        V::String("1ns".into()),
        V::String("9223372036854775807ns".into()),
        V::String("153722868m".into()),
        V::String("busy-poll".into()),
        V::Array(Vec::new()),
        V::Array(vec![V::Integer(1), V::Integer(2)]),
        V::Array(vec![V::String("TOOLONGSYM".into())]),
        V::Table(toml::Table::new()),
    ];
    if pick < ints.len() {
        V::Integer(ints[pick])
    } else {
        others[(pick - ints.len()) % others.len()].clone()
    }
}

#[derive(Debug, Clone)]
enum TomlEdit {
    Replace(Index, usize),
    Remove(Index),
    Add(Index, Index, usize),
    Duplicate(Index),
}

fn toml_edit() -> impl Strategy<Value = TomlEdit> {
    prop_oneof![
        4 => (any::<Index>(), 0usize..36).prop_map(|(i, v)| TomlEdit::Replace(i, v)),
        1 => any::<Index>().prop_map(TomlEdit::Remove),
        1 => (any::<Index>(), any::<Index>(), 0usize..36)
            .prop_map(|(i, k, v)| TomlEdit::Add(i, k, v)),
        1 => any::<Index>().prop_map(TomlEdit::Duplicate),
    ]
}

/// Applies value-level edits to the example configuration and writes it back out.
fn edit_toml(edits: &[TomlEdit]) -> String {
    let mut doc = toml::Value::Table(EXAMPLE_TOML.parse::<toml::Table>().unwrap());
    let mut keys: Vec<String> = Vec::new();
    let mut all = Vec::new();
    toml_paths(&doc, &mut Vec::new(), &mut all);
    for p in &all {
        if let Some(TomlStep::Key(k)) = p.last() {
            keys.push(k.clone());
        }
    }
    keys.push("bogus_key".into());
    for edit in edits {
        let mut paths = Vec::new();
        toml_paths(&doc, &mut Vec::new(), &mut paths);
        paths.remove(0); // the document itself stays a table
        if paths.is_empty() {
            break;
        }
        match edit {
            TomlEdit::Replace(i, v) => {
                let path = &paths[i.index(paths.len())];
                *toml_at(&mut doc, path) = toml_edge(*v);
            }
            TomlEdit::Remove(i) => {
                let path = &paths[i.index(paths.len())];
                let Some((last, parent)) = path.split_last() else {
                    continue;
                };
                match (last, toml_at(&mut doc, parent)) {
                    (TomlStep::Key(k), toml::Value::Table(t)) => {
                        t.remove(k);
                    }
                    (TomlStep::At(n), toml::Value::Array(a)) => {
                        a.remove(*n);
                    }
                    _ => {}
                }
            }
            TomlEdit::Add(i, k, v) => {
                let tables: Vec<_> = paths
                    .iter()
                    .filter(|p| matches!(toml_at(&mut doc.clone(), p), toml::Value::Table(_)))
                    .collect();
                let path = match tables.is_empty() {
                    true => Vec::new(),
                    false => tables[i.index(tables.len())].clone(),
                };
                if let toml::Value::Table(t) = toml_at(&mut doc, &path) {
                    t.insert(keys[k.index(keys.len())].clone(), toml_edge(*v));
                }
            }
            TomlEdit::Duplicate(i) => {
                let path = &paths[i.index(paths.len())];
                if let toml::Value::Array(a) = toml_at(&mut doc, path) {
                    if let Some(first) = a.first().cloned() {
                        a.push(first);
                    }
                }
            }
        }
    }
    // The writer refuses some edited documents (a value after a table, NaN in some places):
    // then the edit is tried as the example itself.
    toml::to_string(&doc).unwrap_or_else(|_| EXAMPLE_TOML.to_string())
}

const TOML_TOKENS: &[&[u8]] = &[
    b"\n",
    b"=",
    b"[",
    b"]",
    b"[[",
    b"]]",
    b"\"",
    b"#",
    b".",
    b"-1",
    b"0",
    b"_",
    b"9223372036854775808",
    b"inf",
    b"nan",
    b"true",
    b"{}",
    b"'''",
    b"\n[venue]\n",
    b"\n[[venue]]\n",
    b"\n[[feed]]\n",
];

// Goal: the configuration loader gives a config or a typed error — never a panic — for the
// example file edited value by value (every key given edge integers, wrong types, removed,
// moved to other tables, arrays grown) and for the example's text mutated byte by byte; a
// configuration it accepts has a memory figure.
#[test]
fn configuration_file() {
    assert!(
        EngineConfig::from_toml(EXAMPLE_TOML).is_ok(),
        "the example must load"
    );
    let input = (
        vec(toml_edit(), 1..5),
        mutations(),
        any::<bool>(),
        bytes(100),
    );
    fuzz(
        "configuration",
        2,
        input,
        |(edits, byte_edits, text_level, random)| {
            let text = if text_level {
                let mut b = EXAMPLE_TOML.as_bytes().to_vec();
                mutate(&mut b, &byte_edits, TOML_TOKENS);
                String::from_utf8_lossy(&b).into_owned()
            } else {
                edit_toml(&edits)
            };
            if let Ok(config) = EngineConfig::from_toml(&text) {
                let _ = config.memory_need();
                // What is accepted prints to a file that means the same configuration.
                let printed = keel::config::to_toml(&config);
                match EngineConfig::from_toml(&printed) {
                    Ok(again) if again == config => {}
                    other => {
                        return Err(TestCaseError::fail(format!(
                            "printed back as {other:?}:\n{printed}"
                        )))
                    }
                }
            }
            let _ = EngineConfig::from_toml(&String::from_utf8_lossy(&random));
            Ok(())
        },
    );
}

// ----- the OUCH session's on_packet --------------------------------------------------------------

/// One thing that happens to a session: a request keel sends, a packet from the venue, a timer.
#[derive(Debug, Clone)]
enum SessionStep {
    New {
        qty: u32,
        ioc: bool,
        wire_ref: u32,
    },
    Cancel(Index),
    Replace(Index, u32),
    Query(Index),
    /// A sequenced OUCH message about known orders (or not), maybe mutated.
    Report(OuchSeed, Index, Index, u32, Vec<Mutation>, bool),
    Login(u64),
    Raw(u8, Vec<u8>),
    ReconcileQuery,
    Expire(u64),
    ClearContradictions,
    LinkDropped,
}

/// Outbound kinds (as `outbound` numbers them) that change an order: accepted, replaced,
/// canceled, executed (twice the weight), account query answer, reconciliation end, status.
const ORDER_REPORTS: [u8; 8] = [1, 2, 3, 5, 5, 13, 15, 16];

/// A venue message seed, half the time one of the kinds that change an order.
fn report_seed() -> impl Strategy<Value = OuchSeed> {
    (ouch_seed(), proptest::option::of(0..ORDER_REPORTS.len())).prop_map(|(mut seed, focus)| {
        if let Some(k) = focus {
            seed.kind = ORDER_REPORTS[k];
        }
        seed
    })
}

fn session_step() -> impl Strategy<Value = SessionStep> {
    let small_qty = prop_oneof![8 => 0u32..25, 1 => Just(u32::MAX)];
    prop_oneof![
        4 => (1u32..20, any::<bool>(), prop_oneof![4 => Just(0u32), 1 => any::<u32>()])
            .prop_map(|(qty, ioc, wire_ref)| SessionStep::New { qty, ioc, wire_ref }),
        1 => any::<Index>().prop_map(SessionStep::Cancel),
        1 => (any::<Index>(), 1u32..20).prop_map(|(i, q)| SessionStep::Replace(i, q)),
        1 => any::<Index>().prop_map(SessionStep::Query),
        10 => (
            report_seed(),
            any::<Index>(),
            any::<Index>(),
            small_qty,
            vec(mutation(), 0..3),
            any::<bool>()
        )
            .prop_map(|(s, a, b, q, m, known)| SessionStep::Report(s, a, b, q, m, known)),
        1 => prop_oneof![any_u64(), 0u64..40].prop_map(SessionStep::Login),
        1 => (any::<u8>(), bytes(60)).prop_map(|(t, b)| SessionStep::Raw(t, b)),
        1 => Just(SessionStep::ReconcileQuery),
        1 => (0u64..5_000).prop_map(SessionStep::Expire),
        1 => Just(SessionStep::ClearContradictions),
        1 => Just(SessionStep::LinkDropped),
    ]
}

/// What the test knows it sent: ids by issue order, each with its quantity.
#[derive(Default)]
struct Sent {
    ids: Vec<ClientOrderId>,
    qty: HashMap<ClientOrderId, u32>,
    filled: HashMap<ClientOrderId, u64>,
}

impl Sent {
    fn pick(&self, i: &Index) -> Option<ClientOrderId> {
        (!self.ids.is_empty()).then(|| self.ids[i.index(self.ids.len())])
    }

    /// Checks one outcome: about an order this session was given, and never filling an order
    /// beyond its quantity.
    fn check(&mut self, kind: &OutcomeKind) -> Result<(), TestCaseError> {
        let id = match *kind {
            OutcomeKind::Accepted { id }
            | OutcomeKind::Canceled { id }
            | OutcomeKind::Rejected { id, .. }
            | OutcomeKind::CancelRejected { id, .. }
            | OutcomeKind::StillOpen { id }
            | OutcomeKind::NotSent { id, .. }
            | OutcomeKind::Timeout { id }
            | OutcomeKind::Refused { id, .. }
            | OutcomeKind::Contradiction { id: Some(id), .. } => id,
            // A report for an order this session never sent: nothing to check against.
            OutcomeKind::Contradiction { id: None, .. }
            | OutcomeKind::WireRefFloor { .. }
            | OutcomeKind::ProtocolState { .. }
            // The venue's figure taken as keel's (no figure of its own yet): any figure is
            // legal; it names no order.
            | OutcomeKind::PositionBaseline { .. }
            // An execution booked outside its order: it follows a contradiction, names no
            // order and never fills one.
            | OutcomeKind::UnmatchedExecution { .. } => return Ok(()),
            OutcomeKind::Replaced { id, new_id } => {
                prop_assert!(
                    self.qty.contains_key(&new_id),
                    "replaced by unknown {:?}",
                    new_id
                );
                id
            }
            OutcomeKind::Fill { id, qty, .. } => {
                let filled = self.filled.entry(id).or_default();
                *filled += u64::from(qty);
                let limit = self.qty.get(&id).copied().unwrap_or(0);
                prop_assert!(
                    *filled <= u64::from(limit),
                    "{:?} filled {} of {}",
                    id,
                    filled,
                    limit
                );
                id
            }
            OutcomeKind::LinkState { .. } => return Ok(()),
        };
        prop_assert!(
            self.qty.contains_key(&id),
            "outcome for an order never sent: {:?}",
            kind
        );
        Ok(())
    }
}

// Goal: arbitrary sequences of venue packets — well-formed reports about the session's own
// orders (acks, fills, overfills, fills after close, replaces, status answers, reconciliation
// answers, login answers with any sequence number), mutated ones and random ones — interleaved
// with new orders, cancels, replaces, queries, timers, contradiction clearing and link drops,
// never panic the OUCH client, name only orders it was given, and never report more filled
// than an order's quantity.
#[test]
fn session_on_packet() {
    let input = (
        vec(session_step(), 1..60),
        dialect(),
        prop_oneof![
            Just(ReconcileMode::KeelExtension),
            Just(ReconcileMode::AccountQueryBarrier)
        ],
        2u32..16,
    );
    fuzz(
        "session on_packet",
        2,
        input,
        |(steps, d, reconcile, orders_max)| {
            let mut client = OuchClient::new(
                ClientConfig {
                    username: "keel".into(),
                    password: "keel".into(),
                    dialect: d,
                    orders_max,
                    symbols: vec![soupbin::alpha::<8>("AAPL")],
                    reconcile,
                    rejects: Default::default(),
                    ack_timeout_ns: 1_000,
                },
                VenueId(3),
            );
            let mut sent = Sent::default();
            let mut out = [0u8; 512];
            let (mut now_ns, mut next_seq) = (0u64, 1u64);
            let mut outcomes = Vec::new();
            for step in steps {
                now_ns += 10;
                let request = |kind| VenueRequest {
                    venue: VenueId(3),
                    sent_ns: now_ns,
                    wire_ref: 0,
                    kind,
                };
                match step {
                    SessionStep::New { qty, ioc, wire_ref } => {
                        next_seq += 1;
                        let order = NewOrder {
                            id: ClientOrderId::new(StrategyId(1), next_seq).unwrap(),
                            venue: VenueId(3),
                            symbol: SymbolId(0),
                            side: Side::Buy,
                            price: Price(100),
                            qty,
                            tif: if ioc {
                                TimeInForce::ImmediateOrCancel
                            } else {
                                TimeInForce::Day
                            },
                            reduce_only: false,
                        };
                        let r = VenueRequest {
                            wire_ref,
                            ..request(RequestKind::New(order))
                        };
                        if client.encode_request(&r, &mut out).is_ok() {
                            sent.ids.push(order.id);
                            sent.qty.insert(order.id, qty);
                        }
                    }
                    SessionStep::Cancel(i) => {
                        if let Some(id) = sent.pick(&i) {
                            let _ = client
                                .encode_request(&request(RequestKind::Cancel { id }), &mut out);
                        }
                    }
                    SessionStep::Replace(i, qty) => {
                        if let Some(id) = sent.pick(&i) {
                            next_seq += 1;
                            let new_id = ClientOrderId::new(StrategyId(1), next_seq).unwrap();
                            let r = Replace {
                                id,
                                new_id,
                                price: Price(101),
                                qty,
                            };
                            if client
                                .encode_request(&request(RequestKind::Replace(r)), &mut out)
                                .is_ok()
                            {
                                sent.ids.push(new_id);
                                sent.qty.insert(new_id, qty);
                            }
                        }
                    }
                    SessionStep::Query(i) => {
                        if let Some(id) = sent.pick(&i) {
                            let _ = client
                                .encode_request(&request(RequestKind::Query { id }), &mut out);
                        }
                    }
                    SessionStep::Report(mut seed, a, b, qty, edits, known) => {
                        let user_ref =
                            |i: &Index| match sent.pick(i).and_then(|id| client.user_ref(id)) {
                                Some(r) if known => r,
                                _ => i.index(40) as u32,
                            };
                        seed.refs = (user_ref(&a), user_ref(&b));
                        seed.f.qty = qty;
                        let msg = outbound(&seed, d);
                        let n = encode_outbound(&mut out, &msg, d).unwrap();
                        let mut bytes = out[..n].to_vec();
                        mutate(&mut bytes, &edits, OUCH_TOKENS);
                        let _ = client.on_packet(now_ns, b'S', &bytes, &mut |o| outcomes.push(o));
                    }
                    SessionStep::Login(sequence) => {
                        let n = encode_server(
                            &mut out,
                            &ServerPacket::LoginAccepted {
                                session: [b' '; 10],
                                sequence,
                            },
                        )
                        .unwrap();
                        let _ =
                            client.on_packet(now_ns, b'A', &out[3..n], &mut |o| outcomes.push(o));
                    }
                    SessionStep::Raw(t, payload) => {
                        let _ = client.on_packet(now_ns, t, &payload, &mut |o| outcomes.push(o));
                    }
                    SessionStep::ReconcileQuery => {
                        let _ = client.encode_reconcile_query(&mut out);
                    }
                    SessionStep::Expire(dt) => {
                        now_ns += dt;
                        client.expire(now_ns, &mut |o| outcomes.push(o));
                    }
                    SessionStep::ClearContradictions => {
                        client.clear_contradictions(now_ns, &mut |o| outcomes.push(o));
                    }
                    SessionStep::LinkDropped => {
                        client.mark_in_flight_unknown(now_ns, &mut |o| outcomes.push(o));
                    }
                }
                for o in outcomes.drain(..) {
                    prop_assert_eq!(o.venue, VenueId(3));
                    sent.check(&o.kind)?;
                }
            }
            Ok(())
        },
    );
}

// ----- HTTP/1.1 responses (issue 14) -----------------------------------------------------------

const HTTP_RESPONSE_TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"HTTP/1.1 ",
    b"HTTP/1.0 ",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip\r\n",
    b"Connection: close\r\n",
    b"0\r\n\r\n",
    b"ffffffffffffffff\r\n",
    b";ext=1",
    b"100 Continue\r\n\r\n",
    b"204",
    b" ",
    b":",
];

/// Reads `stream` as responses, one after the other, in pieces of `step` bytes, as a client's
/// loop would: every read ends in a response, a typed error, or a wait for more; consumed bytes
/// never exceed what was given; the body never outgrows its buffer.
fn walk_http(stream: &[u8], step: usize) -> Result<(), TestCaseError> {
    use keel::http::{Limits, Method, ResponseReader};
    let limits = Limits {
        head_max: 512,
        headers_max: 16,
        body_max: 256,
    };
    let mut reader = ResponseReader::new(limits);
    let mut body = [0u8; 128];
    let mut buffered: Vec<u8> = Vec::new();
    let mut fed = 0;
    reader.start(Method::Get);
    while fed < stream.len() {
        let n = step.max(1).min(stream.len() - fed);
        buffered.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        loop {
            match reader.feed(&buffered, &mut body) {
                Ok((used, done)) => {
                    prop_assert!(used <= buffered.len());
                    prop_assert!(reader.body_len() <= body.len());
                    buffered.drain(..used);
                    if !done {
                        break;
                    }
                    reader.start(Method::Get);
                    if used == 0 && buffered.is_empty() {
                        break;
                    }
                }
                Err(_) => return Ok(()),
            }
        }
    }
    let _ = reader.on_close();
    Ok(())
}

#[test]
fn http_responses() {
    let input = (
        vec(
            (
                vec(any::<u8>(), 0..120),
                any::<bool>(),
                100u16..600,
                vec(1usize..30, 0..6),
            ),
            1..4,
        ),
        mutations(),
        bytes(400),
        1usize..64,
    );
    fuzz("http", 1, input, |(responses, edits, random, step)| {
        let mut stream = Vec::new();
        for (body, chunked, status, sizes) in &responses {
            let status = if (100..200).contains(status) {
                200
            } else {
                *status
            };
            stream.extend_from_slice(format!("HTTP/1.1 {status} X\r\nServer: t\r\n").as_bytes());
            if *chunked {
                stream.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                let mut rest = body.as_slice();
                let mut sizes = sizes.iter().copied().cycle();
                while !rest.is_empty() {
                    let n = sizes.next().unwrap_or(rest.len()).min(rest.len());
                    stream.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                    stream.extend_from_slice(&rest[..n]);
                    stream.extend_from_slice(b"\r\n");
                    rest = &rest[n..];
                }
                stream.extend_from_slice(b"0\r\n\r\n");
            } else {
                stream.extend_from_slice(
                    format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                stream.extend_from_slice(body);
            }
        }
        walk_http(&random, step)?;
        mutate(&mut stream, &edits, HTTP_RESPONSE_TOKENS);
        walk_http(&stream, step)
    });
}

// ----- FIX 4.4 -----------------------------------------------------------------------------------

/// FIX's tokens: separators, the framing fields, the session and application types and tags.
const FIX_TOKENS: &[&[u8]] = &[
    b"\x01",
    b"=",
    b"8=FIX.4.4\x01",
    b"9=",
    b"10=",
    b"35=8\x01",
    b"35=4\x01",
    b"35=2\x01",
    b"35=A\x01",
    b"34=",
    b"43=Y\x01",
    b"123=Y\x01",
    b"36=",
    b"150=F\x01",
    b"150=I\x01",
    b"39=2\x01",
    b"32=",
    b"31=",
    b"14=",
    b"11=1\x01",
    b"584=1\x01",
    b"912=Y\x01",
    b"-",
    b".",
    b"999999999999999999",
];

/// One venue message a logged-on FIX client may receive, by its fields after MsgSeqNum.
fn fix_message() -> impl Strategy<Value = (String, Vec<(u32, String)>)> {
    let value = prop_oneof![
        "[0-9]{1,6}".prop_map(|s| s),
        "-?[0-9]{1,4}\\.[0-9]{0,6}".prop_map(|s| s),
        "[A-Z]{1,2}".prop_map(|s| s),
        Just("Y".to_string()),
    ];
    let tags = prop_oneof![
        Just(11u32),
        Just(41),
        Just(150),
        Just(39),
        Just(32),
        Just(31),
        Just(14),
        Just(151),
        Just(6),
        Just(103),
        Just(434),
        Just(102),
        Just(584),
        Just(790),
        Just(911),
        Just(912),
        Just(7),
        Just(16),
        Just(36),
        Just(43),
        Just(123),
        Just(112),
        Just(108),
        Just(141),
        Just(380),
        Just(379),
        1u32..2000,
    ];
    let msg_type = prop_oneof![
        Just("8"),
        Just("9"),
        Just("j"),
        Just("0"),
        Just("1"),
        Just("2"),
        Just("3"),
        Just("4"),
        Just("5"),
        Just("A"),
        Just("W"),
    ];
    (msg_type.prop_map(str::to_string), vec((tags, value), 0..12))
}

/// Feeds `stream` to a FIX client logged on with orders 1..=4 sent, as the link does: whole
/// messages cut from the front, what they ask of the session drained; each step must consume
/// bytes, wait for more, or fail with a typed error.
fn walk_fix(stream: &[u8], max_len: u16) -> Result<(), TestCaseError> {
    use keel::session::fix::{FixClient, FixSettings};
    use keel::session::protocol::LinkSetup;
    let symbols = [*b"AAPL    "];
    let setup = LinkSetup {
        venue: VenueId(0),
        username: "u",
        password: "p",
        orders_max: 4,
        ack_timeout_ns: 1_000,
        symbols: &symbols,
        heartbeat_interval_ns: 1_000_000_000,
        // The instant `fix_encode` stamps (2026-12-02 06:30): within the SendingTime tolerance,
        // so the messages are judged, not refused for their clock.
        unix_ns_at_origin: 1_796_193_000_000_000_000,
    };
    let mut c = FixClient::new(
        FixSettings {
            sender_comp_id: "KEEL".into(),
            target_comp_id: "VENUE".into(),
            ..FixSettings::default()
        },
        &setup,
    );
    let mut out = [0u8; 1024];
    c.encode_login(0, &mut out).unwrap();
    let logon = fix_encode("A", 1, &[(98, "0".into()), (108, "1".into())]);
    c.decode(1, &logon, 4096, &mut |_| {}).unwrap();
    for n in 1..=4u64 {
        let order = NewOrder {
            id: ClientOrderId::new(StrategyId(0), n).unwrap(),
            venue: VenueId(0),
            symbol: SymbolId(0),
            side: Side::Buy,
            price: Price::from_units(100, 0),
            qty: 100,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        let request = VenueRequest {
            venue: VenueId(0),
            sent_ns: 1,
            wire_ref: n as u32,
            kind: RequestKind::New(order),
        };
        prop_assert!(c.encode_request(&request, &mut out).is_ok());
    }
    let mut rest = stream;
    for step in 0..10_000u64 {
        match c.decode(step, rest, max_len, &mut |_| {}) {
            Ok(Some(m)) => {
                prop_assert!(
                    m.len > 0 && m.len <= rest.len(),
                    "{} of {}",
                    m.len,
                    rest.len()
                );
                rest = &rest[m.len..];
                while c.encode_session(step, &mut out).is_some() {}
            }
            Ok(None) | Err(_) => return Ok(()),
        }
        c.expire(step, &mut |_| {});
    }
    prop_assert!(false, "the client never stopped consuming");
    Ok(())
}

/// A venue message with its header, numbered `seq`, by keel's encoder.
fn fix_encode(msg_type: &str, seq: u64, fields: &[(u32, String)]) -> Vec<u8> {
    let mut out = vec![0u8; 4096];
    let mut e = keel::session::fix::codec::Encoder::new(&mut out, msg_type.as_bytes());
    e.bytes(49, b"VENUE")
        .bytes(56, b"KEEL")
        .uint(34, seq)
        .bytes(52, b"20261202-06:30:00.000");
    for (tag, value) in fields {
        e.bytes(*tag, value.as_bytes());
    }
    let n = e.finish().unwrap();
    out.truncate(n);
    out
}

// Goal: no bytes from a FIX venue make the client panic or stop consuming: streams of well
// formed session and application messages (numbered on from the Logon) with random fields,
// mutated with FIX's tokens, and random bytes.
#[test]
fn fix_session_and_messages() {
    let input = (
        vec(fix_message(), 1..10),
        mutations(),
        bytes(300),
        prop_oneof![Just(64u16), Just(512), Just(4096), Just(u16::MAX)],
        any::<bool>(),
    );
    fuzz(
        "fix44",
        2,
        input,
        |(messages, edits, random, max, use_random)| {
            let mut stream = Vec::new();
            for (i, (msg_type, fields)) in messages.iter().enumerate() {
                stream.extend(fix_encode(msg_type, i as u64 + 2, fields));
            }
            walk_fix(&stream, max)?;
            if use_random {
                walk_fix(&random, max)?;
            }
            mutate(&mut stream, &edits, FIX_TOKENS);
            walk_fix(&stream, max)
        },
    );
}
