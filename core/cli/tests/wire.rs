//! The order path on real sockets: dispatcher → OUCH link over io_uring → simulated venue over
//! io_uring → back, plus the venue's session layer against hand-driven SoupBinTCP clients
//! (malformed input, many sessions, restart and replay).

use std::io::{Read, Write};
use std::net::TcpStream;

mod common;

use common::world::World;
use keel::clock::{Clock, TscClock};
use keel::net::Reactor;
use keel::order::{Command, EventKind, NewOrder, Price, Side, SymbolId, VenueId};
use keel::proto::ouch::{
    decode_outbound, encode_inbound, Dialect, EnterOrder, Inbound, OrderFields, Outbound,
};
use keel::proto::soupbin::{
    alpha, decode_server, encode_client, frame, ClientPacket, LoginRequest, ServerPacket,
};
use keel::session::machine::LinkState;
use keel_venue::flow::FlowConfig;
use keel_venue::server::{DropReason, VenueConfig, VenueServer};

fn venue() -> VenueServer {
    let config = VenueConfig {
        flow: FlowConfig {
            events_per_sec: 0,
            ..FlowConfig::default()
        },
        ..VenueConfig::default()
    };
    VenueServer::new(config).expect("venue starts on loopback")
}

// Goal: the whole order path on real sockets: accepted, filled by the venue's market, a
// second order canceled; the strategy sees exactly those events.
#[test]
fn order_round_trip_through_the_venue() {
    let mut w = World::<Reactor>::new();
    w.until("login", |w| w.dispatcher().is_synced(VenueId(0)));
    assert_eq!(w.link().state(), LinkState::Synced);
    let buy = NewOrder {
        symbol: SymbolId(0),
        price: Price::from_units(10, 0),
        ..w.order(1, 100)
    };
    w.send(Command::New(buy));
    w.until("accept", |w| !w.kinds(buy.id).is_empty());
    let now = w.clock.now_ns();
    w.venue()
        .exchange_mut()
        .synthetic(now, 0, Side::Sell, Price::from_units(9, 9000).0, 100, true);
    w.until("fill", |w| w.kinds(buy.id).len() == 2);
    assert_eq!(
        w.kinds(buy.id),
        [
            EventKind::Accepted,
            EventKind::Filled {
                qty: 100,
                price: Price::from_units(10, 0)
            }
        ]
    );
    let rest = NewOrder {
        symbol: SymbolId(0),
        side: Side::Sell,
        price: Price::from_units(11, 0),
        ..w.order(2, 50)
    };
    w.send(Command::New(rest));
    w.until("second accept", |w| !w.kinds(rest.id).is_empty());
    w.send(Command::Cancel { id: rest.id });
    w.until("cancel", |w| w.kinds(rest.id).len() == 2);
    assert_eq!(w.kinds(rest.id), [EventKind::Accepted, EventKind::Canceled]);
    // Exactly those events, nothing else.
    assert_eq!(w.events.len(), 4, "{:?}", w.events);
    assert!(w.venue().exchange().book(0).is_empty());
    assert_eq!(w.link().stats().decode_errors, 0);
    assert_eq!(w.dispatcher().guards().risk.position(SymbolId(0)), 100);
}

/// A hand-driven SoupBinTCP client on a plain socket, for the venue's session tests.
struct RawClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawClient {
    fn connect(venue: &mut VenueServer) -> Self {
        let stream = TcpStream::connect(venue.local_addr()).unwrap();
        stream.set_nonblocking(true).unwrap();
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    fn send_packet(&mut self, packet: &ClientPacket<'_>) {
        let mut out = [0u8; 256];
        let n = encode_client(&mut out, packet).unwrap();
        self.stream.write_all(&out[..n]).unwrap();
    }

    fn login(&mut self, user: &str, seq: u64) {
        let login = LoginRequest {
            username: alpha(user),
            password: alpha("keel"),
            session: [b' '; 10],
            sequence: seq,
            heartbeat_timeout_ms: None,
        };
        self.send_packet(&ClientPacket::LoginRequest(login));
    }

    fn enter(&mut self, user_ref: u32, qty: u32) {
        let order = OrderFields {
            side: b'B',
            qty,
            symbol: *b"MSFT    ",
            price: 50_0000,
            tif: b'0',
            display: b'Y',
            capacity: b'A',
            ise: b'N',
            cross_type: b'N',
            cl_ord_id: alpha(&format!("R{user_ref}")),
        };
        let mut msg = [0u8; 128];
        let n = encode_inbound(
            &mut msg,
            &Inbound::EnterOrder(EnterOrder {
                user_ref,
                order,
                appendages: &[],
            }),
            Dialect::SPEC,
        )
        .unwrap();
        self.send_packet(&ClientPacket::Unsequenced(&msg[..n]));
    }

    /// Steps the venue until this client has `count` packets of interest (not heartbeats).
    fn read(&mut self, venue: &mut VenueServer, count: usize) -> Vec<(u8, Vec<u8>)> {
        let clock = TscClock::new();
        let mut packets = Vec::new();
        // Bounded by time, never by a count of passes: a fast machine runs 200,000 passes
        // before a 300 ms fault has elapsed.
        let deadline = clock.now_ns() + WAIT_NS;
        while clock.now_ns() < deadline {
            venue.step(clock.now_ns(), 0).unwrap();
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
            while let Some(f) = frame(&self.buf, 2048).unwrap() {
                if f.packet_type != b'H' {
                    packets.push((f.packet_type, f.payload.to_vec()));
                }
                let len = f.len;
                self.buf.drain(..len);
            }
            if packets.len() >= count {
                break;
            }
        }
        packets
    }

    fn closed(&mut self, venue: &mut VenueServer) -> bool {
        let clock = TscClock::new();
        let deadline = clock.now_ns() + WAIT_NS;
        while clock.now_ns() < deadline {
            venue.step(clock.now_ns(), 0).unwrap();
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return true,
            }
        }
        false
    }
}

/// Connections the venue has dropped so far, every reason.
fn venue_drops(venue: &VenueServer) -> u64 {
    venue.stats().drops.values().sum()
}

/// How long a read or a close is waited for: far past any fault a test sets.
const WAIT_NS: u64 = 10_000_000_000;

fn sequenced(packets: &[(u8, Vec<u8>)]) -> Vec<Outbound<'_>> {
    packets
        .iter()
        .filter(|(t, _)| *t == b'S')
        .map(|(_, p)| decode_outbound(p, Dialect::SPEC).unwrap())
        .collect()
}

// Goal: malformed input closes the connection with a counted, typed reason.
#[test]
fn malformed_input_is_refused_and_counted() {
    let mut venue = venue();
    let mut client = RawClient::connect(&mut venue);
    client.stream.write_all(&[0x00, 0x02, b'Y', 0]).unwrap();
    assert!(
        client.closed(&mut venue),
        "unknown packet type closes the connection"
    );
    let mut client = RawClient::connect(&mut venue);
    client.login("bob", 1);
    client.read(&mut venue, 1);
    client.send_packet(&ClientPacket::Unsequenced(&[b'X', 0, 0]));
    assert!(
        client.closed(&mut venue),
        "a truncated OUCH message closes the connection"
    );
    let mut client = RawClient::connect(&mut venue);
    client.send_packet(&ClientPacket::Unsequenced(b"Q"));
    assert!(
        client.closed(&mut venue),
        "a message before login closes the connection"
    );
    let drops = &venue.stats().drops;
    assert!(
        drops.keys().any(|r| matches!(
            r,
            DropReason::Malformed(keel::proto::DecodeError::UnknownType { byte: b'Y', .. })
        )),
        "{drops:?}"
    );
    assert!(
        drops.keys().any(|r| matches!(
            r,
            DropReason::Malformed(keel::proto::DecodeError::Length { msg_type: b'X', .. })
        )),
        "{drops:?}"
    );
    assert_eq!(drops.get(&DropReason::ProtocolViolation), Some(&1));
}

// Goal: 30 sessions at once, each sees only its own answers, numbered from 1.
#[test]
fn many_sessions_each_get_their_stream() {
    let mut venue = venue();
    let mut clients: Vec<RawClient> = (0..30).map(|_| RawClient::connect(&mut venue)).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.login(&format!("u{i}"), 1);
    }
    for c in clients.iter_mut() {
        let login = c.read(&mut venue, 1);
        assert_eq!(
            decode_server(login[0].0, &login[0].1).unwrap(),
            ServerPacket::LoginAccepted {
                session: *b"KEELSIM001",
                sequence: 1
            }
        );
    }
    for (i, c) in clients.iter_mut().enumerate() {
        c.enter(1, 10 + i as u32);
    }
    for (i, c) in clients.iter_mut().enumerate() {
        let got = c.read(&mut venue, 1);
        let msgs = sequenced(&got);
        assert!(
            matches!(msgs[0], Outbound::Accepted(a) if a.user_ref == 1 && a.order.qty == 10 + i as u32),
            "client {i}: {msgs:?}"
        );
    }
    assert_eq!(venue.stats().logins, 30);
}

// Goal: after a venue restart (every connection dropped, books and streams kept), a client
// that logs in again asking for its next sequence number receives exactly what it missed.
#[test]
fn restart_then_replay_from_the_requested_sequence() {
    let mut venue = venue();
    let mut client = RawClient::connect(&mut venue);
    client.login("carol", 1);
    client.read(&mut venue, 1);
    client.enter(1, 100);
    let first = client.read(&mut venue, 1);
    assert!(matches!(sequenced(&first)[0], Outbound::Accepted(_)));
    venue.apply_control(0, "restart").unwrap();
    assert!(client.closed(&mut venue));
    // While carol is away her order fills.
    venue
        .exchange_mut()
        .synthetic(0, 1, Side::Sell, 50_0000, 100, true);
    let mut again = RawClient::connect(&mut venue);
    again.login("carol", 2);
    let got = again.read(&mut venue, 2);
    assert_eq!(
        decode_server(got[0].0, &got[0].1).unwrap(),
        ServerPacket::LoginAccepted {
            session: *b"KEELSIM001",
            sequence: 2
        }
    );
    assert!(
        matches!(
            sequenced(&got)[..],
            [Outbound::Executed {
                user_ref: 1,
                qty: 100,
                ..
            }]
        ),
        "{got:?}"
    );
    // A client asking from 1 gets the whole day again.
    let mut full = RawClient::connect(&mut venue);
    full.login("carol", 1);
    let got = full.read(&mut venue, 3);
    assert_eq!(sequenced(&got).len(), 2);
    assert_eq!(venue.stats().drops.get(&DropReason::Injected), Some(&1));
}

// Goal: fault knobs change while running: accept limit refuses the extra session.
#[test]
fn accept_limit_refuses_extra_sessions() {
    let mut venue = venue();
    venue.apply_control(0, "accept-limit 1").unwrap();
    let mut first = RawClient::connect(&mut venue);
    first.login("dan", 1);
    assert_eq!(first.read(&mut venue, 1).len(), 1);
    let mut second = RawClient::connect(&mut venue);
    assert!(second.closed(&mut venue));
    assert_eq!(venue.stats().drops.get(&DropReason::AcceptLimit), Some(&1));
    assert!(venue.apply_control(0, "latency x").is_err());
    assert!(venue.apply_control(0, "bogus").is_err());
}

// Goal: the delayed-final-report fault (the "remainder reported after the timeout" incident):
// a partial fill arrives at once; the fill that completes the order is held for the set delay.
#[test]
fn final_report_is_delayed_by_the_fault() {
    let mut venue = venue();
    let mut client = RawClient::connect(&mut venue);
    client.login("erin", 1);
    client.read(&mut venue, 1);
    client.enter(1, 100);
    assert!(matches!(
        sequenced(&client.read(&mut venue, 1))[0],
        Outbound::Accepted(_)
    ));
    venue.apply_control(0, "delay-final 300").unwrap();
    let clock = TscClock::new();
    venue
        .exchange_mut()
        .synthetic(clock.now_ns(), 1, Side::Sell, 50_0000, 50, true);
    let partial = client.read(&mut venue, 1);
    assert!(matches!(
        sequenced(&partial)[0],
        Outbound::Executed { qty: 50, .. }
    ));
    let held_from = clock.now_ns();
    venue
        .exchange_mut()
        .synthetic(held_from, 1, Side::Sell, 50_0000, 50, true);
    let rest = client.read(&mut venue, 1);
    let waited_ns = clock.now_ns() - held_from;
    assert!(
        matches!(sequenced(&rest)[..], [Outbound::Executed { qty: 50, .. }]),
        "{rest:?}"
    );
    assert!(
        waited_ns >= 300_000_000,
        "final report released after {waited_ns} ns"
    );
}

// Goal: the control port works over a real socket: a command changes a fault, a bad one is
// answered with an error, nothing crashes.
#[test]
fn control_port_changes_faults_while_running() {
    let config = VenueConfig {
        control: Some("127.0.0.1:0".parse().unwrap()),
        flow: FlowConfig {
            events_per_sec: 0,
            ..FlowConfig::default()
        },
        ..VenueConfig::default()
    };
    let mut venue = VenueServer::new(config).unwrap();
    let mut control = TcpStream::connect(venue.control_addr().unwrap()).unwrap();
    control.set_nonblocking(true).unwrap();
    control
        .write_all(b"latency 5 2\nbogus\naccept-limit 3\nclock-jump -3600\nclock-jump soon\n")
        .unwrap();
    let clock = TscClock::new();
    let mut replies = Vec::new();
    let deadline = clock.now_ns() + WAIT_NS;
    while clock.now_ns() < deadline {
        venue.step(clock.now_ns(), 0).unwrap();
        let mut buf = [0u8; 256];
        if let Ok(n) = control.read(&mut buf) {
            replies.extend_from_slice(&buf[..n]);
        }
        if replies.iter().filter(|&&b| b == b'\n').count() == 5 {
            break;
        }
    }
    let text = String::from_utf8(replies).unwrap();
    assert_eq!(
        text,
        "ok latency 5 2\nerror unknown command 'bogus' (send help for the list of commands)\n\
         ok accept-limit 3\nok clock-jump -3600\n\
         error clock-jump: seconds 'soon' is not a whole number in -315360000..=315360000\n"
    );
    assert_eq!(
        venue.exchange().wall_offset_ns,
        (-3_600_000_000_000i64) as u64,
        "the wall clock stepped back an hour"
    );
    let faults = venue.faults();
    assert_eq!(
        (faults.latency_ns, faults.jitter_ns, faults.accept_limit),
        (5_000_000, 2_000_000, 3)
    );
}

// Goal: garbage on the order port never takes the venue down: 200 connections each send
// random bytes; every one is closed with a counted reason and a well-behaved session still
// trades afterwards.
#[test]
fn random_bytes_never_crash_the_venue() {
    use keel::rng::{Rng64, SplitMix64};
    let mut venue = venue();
    let mut rng = SplitMix64::new(99);
    for _ in 0..200 {
        let mut c = RawClient::connect(&mut venue);
        let len = 1 + rng.below_inclusive(300) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let _ = c.stream.write_all(&junk);
        // Either closed by the venue, or waiting for the rest of a packet: both are fine.
        let clock = TscClock::new();
        for _ in 0..200 {
            venue.step(clock.now_ns(), 0).unwrap();
        }
    }
    // The venue judges what the kernel has delivered: wait for the fact, up to a deadline.
    let clock = TscClock::new();
    let deadline = clock.now_ns() + WAIT_NS;
    while venue_drops(&venue) <= 100 && clock.now_ns() < deadline {
        venue.step(clock.now_ns(), 0).unwrap();
    }
    assert!(venue_drops(&venue) > 100, "{:?}", venue.stats().drops);
    let mut good = RawClient::connect(&mut venue);
    good.login("frank", 1);
    good.read(&mut venue, 1);
    good.enter(1, 10);
    assert!(matches!(
        sequenced(&good.read(&mut venue, 1))[0],
        Outbound::Accepted(_)
    ));
}
