//! keel's FIX 4.4 initiator against keel's own venue serving FIX (`keel venue --fix-listen`):
//! the engine's loop and the venue's, one exchange, real sockets. Fills in parts, cancels and
//! replaces; application messages lost on the wire asked for and sent again with PossDupFlag;
//! a disconnect that resumes both numbers with a fill made while away booked once. Then the
//! venue's acceptor under a hostile client speaking raw FIX: every bad Logon, every bad field,
//! sequence numbers too low, unknown message types — each answered by name, counted, and
//! never an order half entered.

mod common;

use common::world::{World, WorldBuilder};
use keel::clock::Clock;
use keel::net::Reactor;
use keel::order::{Command, EventKind, Price, Replace, Side, SymbolId, VenueId};
use keel::session::fix::codec::{self, Encoder, FieldTable, Frame, Limits};
use keel::session::fix::FixSettings;
use keel::session::{AnyProtocol, ProtocolConfig, VenueProtocol};
use keel_venue::server::{FixConfig, VenueConfig, VenueServer};
use std::io::{Read, Write};
use std::net::TcpStream;

fn fix44() -> ProtocolConfig {
    ProtocolConfig::Fix44(FixSettings {
        sender_comp_id: "KEEL".into(),
        target_comp_id: "VENUE".into(),
        ..FixSettings::default()
    })
}

fn synced_world() -> World<Reactor> {
    let mut w = WorldBuilder::new().protocol(fix44()).build::<Reactor>();
    w.until("SYNCED over FIX", |w| w.dispatcher().is_synced(VenueId(0)));
    w
}

fn fix(w: &World<Reactor>) -> keel::session::fix::FixStats {
    match w.link().client() {
        AnyProtocol::Fix44(c) => c.fix_stats(),
        other => panic!("not a FIX link: {other:?}"),
    }
}

/// A sell of `qty` at `price` that trades with resting buys.
fn sell(w: &mut World<Reactor>, price: Price, qty: u32) {
    let now = w.clock.now_ns();
    w.venue()
        .exchange_mut()
        .synthetic(now, 1, Side::Sell, price.0, qty, false);
}

/// The shares of every fill strategy 0 was told of for `id`, in order.
fn fills(w: &World<Reactor>, id: keel::order::ClientOrderId) -> Vec<u32> {
    w.kinds(id)
        .iter()
        .filter_map(|k| match k {
            EventKind::PartiallyFilled { qty, .. } | EventKind::Filled { qty, .. } => Some(*qty),
            _ => None,
        })
        .collect()
}

/// Neither side refused anything the other sent, and every report was about a known order.
fn clean(w: &mut World<Reactor>) {
    let v = w.venue().fix_stats().expect("the venue serves FIX");
    assert_eq!(
        (
            v.rejects_sent,
            v.business_rejects_sent,
            v.garbled,
            v.malformed,
            v.foreign_reports,
            v.seq_too_low
        ),
        (0, 0, 0, 0, 0, 0),
        "{v:?}"
    );
    let c = fix(w);
    assert_eq!(
        (
            c.garbled,
            c.malformed,
            c.rejects_sent,
            c.rejects_received,
            c.seq_too_low
        ),
        (0, 0, 0, 0, 0),
        "{c:?}"
    );
    assert_eq!(w.link().stats().decode_errors, 0);
    assert_eq!(w.link().client().stats().contradictions, 0);
}

// Goal: the order path over FIX against keel's venue: logon and mass status to SYNCED, a buy
// filled in two parts, a second order canceled, a third replaced then filled on its new
// quantity; the engine's position equals the venue's, and the venue sent every report once.
#[test]
fn keel_trades_with_keel_venue_over_fix() {
    let mut w = synced_world();
    let buy = w.order(1, 100);
    w.send(Command::New(buy));
    w.until("accepted", |w| {
        w.kinds(buy.id).contains(&EventKind::Accepted)
    });
    sell(&mut w, buy.price, 30);
    w.until("first fill", |w| w.kinds(buy.id).len() == 2);
    sell(&mut w, buy.price, 70);
    w.until("second fill", |w| w.kinds(buy.id).len() == 3);
    assert_eq!(w.kinds(buy.id)[0], EventKind::Accepted);
    assert_eq!(fills(&w, buy.id), [30, 70]);
    assert!(matches!(w.kinds(buy.id)[2], EventKind::Filled { .. }));

    let canceled = w.order(2, 10);
    w.send(Command::New(canceled));
    w.until("second accepted", |w| {
        w.kinds(canceled.id).contains(&EventKind::Accepted)
    });
    w.send(Command::Cancel { id: canceled.id });
    w.until("canceled", |w| {
        w.kinds(canceled.id).contains(&EventKind::Canceled)
    });

    let replaced = w.order(3, 40);
    w.send(Command::New(replaced));
    w.until("third accepted", |w| {
        w.kinds(replaced.id).contains(&EventKind::Accepted)
    });
    sell(&mut w, replaced.price, 15);
    w.until("fill before the replace", |w| {
        w.kinds(replaced.id).len() == 2
    });
    let new_id = w.order(4, 1).id;
    w.send(Command::Replace(Replace {
        id: replaced.id,
        new_id,
        price: replaced.price,
        qty: 60,
    }));
    w.until("replaced", |w| {
        w.kinds(replaced.id)
            .iter()
            .any(|k| matches!(k, EventKind::Replaced { .. }))
    });
    sell(&mut w, replaced.price, 60);
    w.until("the replacement filled", |w| {
        fills(w, new_id).iter().sum::<u32>() == 60
    });

    // 100 + 15 + 60 bought; the venue's FIX account says the same.
    let symbol = buy.symbol;
    assert_eq!(symbol, SymbolId(1));
    assert_eq!(w.dispatcher().guards().risk.position(symbol), 175);
    let (bought, sold) = w.venue().exchange().account(0).position(1);
    assert_eq!((bought, sold), (175, 0));
    let orders = w.venue().exchange().stats();
    assert_eq!((orders.accepted, orders.canceled), (4, 1));
    clean(&mut w);
}

// Goal: reports lost on the wire (stored, never written) make a gap keel sees at the next
// message; it asks once, the venue sends them again with PossDupFlag and OrigSendingTime, and
// every fill is booked exactly once — neither lost nor doubled.
#[test]
fn lost_reports_are_asked_for_and_sent_again_once() {
    let mut w = synced_world();
    let buy = w.order(1, 100);
    w.send(Command::New(buy));
    w.until("accepted", |w| {
        w.kinds(buy.id).contains(&EventKind::Accepted)
    });
    let lost = w.venue().apply_control(0, "fix-lose 2").unwrap();
    assert_eq!(lost, "sessions=1");
    sell(&mut w, buy.price, 10);
    sell(&mut w, buy.price, 20);
    w.until("both lost", |w| {
        w.venue().fix_stats().unwrap().lost_injected == 2
    });
    sell(&mut w, buy.price, 70);
    w.until("every fill", |w| {
        fills(w, buy.id).iter().sum::<u32>() == 100
    });
    assert_eq!(fills(&w, buy.id), [10, 20, 70]);
    let v = w.venue().fix_stats().unwrap();
    assert_eq!(v.resend_requests_in, 1, "{v:?}");
    assert!(v.resent >= 2, "{v:?}");
    assert_eq!(fix(&w).resend_requests_sent, 1);
    assert_eq!(w.dispatcher().guards().risk.position(buy.symbol), 100);
    clean(&mut w);
}

// Goal: the venue drops the connection while an order rests; the order fills while keel is
// away; keel logs on again resuming both numbers (no reset, nothing too low), the fill comes
// as the next report, mass status reconciles, and the order was entered once.
#[test]
fn a_reconnect_resumes_both_numbers_and_books_a_fill_made_while_away_once() {
    let mut w = synced_world();
    let buy = w.order(1, 50);
    w.send(Command::New(buy));
    w.until("accepted", |w| {
        w.kinds(buy.id).contains(&EventKind::Accepted)
    });
    w.venue().apply_control(0, "restart").unwrap();
    w.until("link down", |w| !w.dispatcher().is_synced(VenueId(0)));
    sell(&mut w, buy.price, 50);
    w.until("SYNCED again", |w| w.dispatcher().is_synced(VenueId(0)));
    w.until("the fill", |w| w.kinds(buy.id).len() == 2);
    assert_eq!(
        w.kinds(buy.id),
        [
            EventKind::Accepted,
            EventKind::Filled {
                qty: 50,
                price: buy.price
            }
        ]
    );
    let v = w.venue().fix_stats().unwrap();
    assert_eq!((v.logons, v.logons_refused), (2, 0), "{v:?}");
    assert_eq!(w.venue().exchange().stats().accepted, 1, "nothing resent");
    let session = w.link().session_stats();
    assert_eq!((session.synced, session.disconnects), (2, 1));
    assert_eq!(
        w.link().client().stats().last_reconciliation.unresolved(),
        0
    );
    clean(&mut w);
}

// ----- a hostile client ----------------------------------------------------------------------

/// keel's venue serving FIX, and a raw client.
struct Raw {
    venue: VenueServer,
    clock: keel::clock::TscClock,
    stream: TcpStream,
    inbox: Vec<u8>,
    out_seq: u64,
    sender: &'static str,
}

impl Raw {
    fn open() -> Self {
        Self::open_as("EVIL")
    }

    fn open_as(sender: &'static str) -> Self {
        Self::open_with(sender, FixConfig::default())
    }

    fn open_with(sender: &'static str, fix: FixConfig) -> Self {
        let venue = VenueServer::new(VenueConfig {
            fix: Some(fix),
            flow: keel_venue::flow::FlowConfig {
                events_per_sec: 0,
                ..keel_venue::flow::FlowConfig::default()
            },
            ..VenueConfig::default()
        })
        .unwrap();
        let stream = TcpStream::connect(venue.fix_addr().unwrap()).unwrap();
        stream.set_nonblocking(true).unwrap();
        Self {
            venue,
            clock: keel::clock::TscClock::new(),
            stream,
            inbox: Vec::new(),
            out_seq: 1,
            sender,
        }
    }

    fn reconnect(&mut self) {
        self.stream = TcpStream::connect(self.venue.fix_addr().unwrap()).unwrap();
        self.stream.set_nonblocking(true).unwrap();
        self.inbox.clear();
    }

    fn step(&mut self) {
        let now = self.clock.now_ns();
        self.venue.step(now, 0).unwrap();
        let mut buf = [0u8; 8192];
        match self.stream.read(&mut buf) {
            Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }

    /// A message with the standard header (`fields` as `tag=value|...`, `|` for SOH).
    fn build(&self, msg_type: &str, seq: u64, fields: &str) -> Vec<u8> {
        let mut out = vec![0u8; 4096];
        let mut e = Encoder::new(&mut out, msg_type.as_bytes());
        e.bytes(49, self.sender.as_bytes())
            .bytes(56, b"VENUE")
            .uint(34, seq)
            .bytes(52, b"20261202-12:00:00.000");
        let body = fields.replace('|', "\x01");
        e.raw(body.as_bytes());
        let n = e.finish().unwrap();
        out.truncate(n);
        out
    }

    fn send(&mut self, msg_type: &str, fields: &str) {
        let msg = self.build(msg_type, self.out_seq, fields);
        self.out_seq += 1;
        self.stream.write_all(&msg).unwrap();
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    fn logon(&mut self) {
        self.send("A", "98=0|108=30|554=keel|");
        let logon = self.next();
        assert_eq!(field(&logon, 35), "A", "{logon}");
    }

    /// The next whole message from the venue, as `tag=value|...`.
    fn next(&mut self) -> String {
        let deadline = self.clock.now_ns() + 10_000_000_000;
        loop {
            if let Frame::Whole { len } = codec::frame(&self.inbox, &Limits::default()) {
                let msg: Vec<u8> = self.inbox.drain(..len).collect();
                let mut table = FieldTable::default();
                table.parse(&msg, &Limits::default()).unwrap();
                return String::from_utf8(msg).unwrap().replace('\x01', "|");
            }
            assert!(self.clock.now_ns() < deadline, "no message from the venue");
            self.step();
        }
    }

    /// The next whole message if one has come (a few passes of the venue).
    fn try_next(&mut self) -> Option<String> {
        for _ in 0..100 {
            if let Frame::Whole { len } = codec::frame(&self.inbox, &Limits::default()) {
                let msg: Vec<u8> = self.inbox.drain(..len).collect();
                return Some(String::from_utf8(msg).unwrap().replace('\x01', "|"));
            }
            self.step();
        }
        None
    }

    /// The next message that is not a Heartbeat.
    fn next_not_heartbeat(&mut self) -> String {
        loop {
            let m = self.next();
            if field(&m, 35) != "0" {
                return m;
            }
        }
    }

    /// Whether the venue closes the connection within 200 ms of passes (the connection is
    /// expected to stay: a deadline, so a fast machine waits as long as a slow one).
    fn closed_within_a_moment(&mut self) -> bool {
        self.closed_within(200_000_000)
    }

    /// Steps until the venue closes the connection.
    fn closed(&mut self) -> bool {
        self.closed_within(10_000_000_000)
    }

    /// Steps until the venue closes the connection, for at most `wait_ns`.
    fn closed_within(&mut self, wait_ns: u64) -> bool {
        let deadline = self.clock.now_ns() + wait_ns;
        while self.clock.now_ns() < deadline {
            let now = self.clock.now_ns();
            self.venue.step(now, 0).unwrap();
            let mut buf = [0u8; 8192];
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return true,
            }
        }
        false
    }
}

/// A field of a `tag=value|` message ("" when absent).
fn field(msg: &str, tag: u32) -> String {
    let key = format!("|{tag}=");
    msg.find(&key)
        .map(|at| {
            let rest = &msg[at + key.len()..];
            rest[..rest.find('|').unwrap()].to_string()
        })
        .unwrap_or_default()
}

// Goal: every bad Logon is refused by a Logout naming what was wrong, and the connection
// closed: a message before the Logon, the wrong TargetCompID, a bad password, HeartBtInt at
// 0 and at 3,601 (one past the widest), a SenderCompID of 33 characters; a second Logon for a
// CompID already logged on is refused without disturbing the first.
#[test]
fn bad_logons_are_refused_by_name() {
    let cases: [(&str, &str, &str); 6] = [
        ("D", "11=1|", "the first message must be a Logon"),
        ("A", "98=0|108=30|", "Password"),
        ("A", "98=0|108=0|554=keel|", "HeartBtInt"),
        ("A", "98=0|108=3601|554=keel|", "HeartBtInt"),
        ("A", "98=1|108=30|554=keel|", "EncryptMethod"),
        ("A", "98=0|108=30|554=wrong|", "Password"),
    ];
    let mut raw = Raw::open();
    for (msg_type, fields, why) in cases {
        raw.reconnect();
        raw.out_seq = 1;
        raw.send(msg_type, fields);
        let logout = raw.next();
        assert_eq!(field(&logout, 35), "5", "{logout}");
        assert!(field(&logout, 58).contains(why), "{why}: {logout}");
        assert!(raw.closed(), "{why}: still open");
    }
    // The wrong venue CompID.
    raw.reconnect();
    let mut wrong = raw.build("A", 1, "98=0|108=30|554=keel|");
    let text = String::from_utf8(wrong.clone())
        .unwrap()
        .replace("56=VENUE", "56=OTHER");
    wrong = text.into_bytes();
    // The CheckSum no longer holds after the edit: rebuilt by hand.
    let body_end = wrong.len() - 7;
    let sum = codec::checksum(&wrong[..body_end]);
    wrong.truncate(body_end);
    wrong.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
    raw.send_raw(&wrong);
    let logout = raw.next();
    assert!(field(&logout, 58).contains("TargetCompID"), "{logout}");
    assert!(raw.closed());
    // A CompID of 33 characters.
    let mut long = Raw::open_as("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456");
    long.send("A", "98=0|108=30|554=keel|");
    let logout = long.next();
    assert!(field(&logout, 58).contains("SenderCompID"), "{logout}");
    // A second Logon for a CompID already logged on.
    raw.reconnect();
    raw.out_seq = 1;
    raw.logon();
    let first = std::mem::replace(
        &mut raw.stream,
        TcpStream::connect(raw.venue.fix_addr().unwrap()).unwrap(),
    );
    raw.stream.set_nonblocking(true).unwrap();
    raw.send("A", "98=0|108=30|554=keel|");
    let logout = raw.next();
    assert!(field(&logout, 58).contains("already logged on"), "{logout}");
    drop(first);
    let v = raw.venue.fix_stats().unwrap();
    assert_eq!((v.logons, v.logons_refused), (1, 8), "{v:?}");
    assert_eq!(raw.venue.exchange().stats().accepted, 0);
}

// Goal: after a Logon, bad application fields are refused by name and never reach the
// exchange: a missing Symbol (Reject, 373=1, 371=55), a ClOrdID of 33 characters (Reject),
// a Side of 9 (Reject), a price with five decimals (Reject), a quantity of 2^32 (rejected
// order, 103=13), a market order (103=11), a duplicate ClOrdID (103=6), an unknown message
// type (BusinessMessageReject 380=3), a cancel of an unknown order (OrderCancelReject 102=1),
// a status of an unknown order (103=5); a garbled message is ignored and its number not taken.
// Then the worst legal order (quantity 2^32 - 1 over the venue's maximum: the exchange rejects
// it 103=13) and a good one, accepted.
#[test]
fn bad_fields_are_refused_by_name_and_never_half_entered() {
    let mut raw = Raw::open();
    raw.logon();
    let order = "54=1|38=10|40=2|44=50|55=MSFT|60=20261202-12:00:00.000|";
    let cases: [(&str, String, &str, &str); 4] = [
        ("D", "11=A|54=1|38=10|40=2|44=50|".to_string(), "3", "55"),
        ("D", format!("11={}|{order}", "X".repeat(33)), "3", "11"),
        (
            "D",
            "11=B|54=9|38=10|40=2|44=50|55=MSFT|".to_string(),
            "3",
            "54",
        ),
        (
            "D",
            "11=C|54=1|38=10|40=2|44=50.00001|55=MSFT|".to_string(),
            "3",
            "44",
        ),
    ];
    for (msg_type, fields, answer, tag) in cases {
        raw.send(msg_type, &fields);
        let m = raw.next_not_heartbeat();
        assert_eq!(field(&m, 35), answer, "{fields}: {m}");
        assert_eq!(field(&m, 371), tag, "{fields}: {m}");
    }
    let rejected: [(String, &str); 2] = [
        (
            "11=D|54=1|38=4294967296|40=2|44=50|55=MSFT|".to_string(),
            "13",
        ),
        ("11=E|54=1|38=10|40=1|55=MSFT|".to_string(), "11"),
    ];
    for (fields, code) in rejected {
        raw.send("D", &fields);
        let m = raw.next_not_heartbeat();
        assert_eq!(
            (field(&m, 35), field(&m, 150)),
            ("8".into(), "8".into()),
            "{m}"
        );
        assert_eq!(field(&m, 103), code, "{fields}: {m}");
    }
    raw.send("D", &format!("11=F|{order}"));
    let m = raw.next_not_heartbeat();
    assert_eq!(field(&m, 150), "0", "{m}");
    raw.send("D", &format!("11=F|{order}"));
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 150), field(&m, 103)),
        ("8".into(), "6".into()),
        "{m}"
    );
    raw.send("ZZ", "");
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 35), field(&m, 380)),
        ("j".into(), "3".into()),
        "{m}"
    );
    raw.send("F", "11=G|41=NOPE|54=1|55=MSFT|60=20261202-12:00:00.000|");
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 35), field(&m, 102)),
        ("9".into(), "1".into()),
        "{m}"
    );
    raw.send("H", "11=NOPE|790=q1|");
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 150), field(&m, 103)),
        ("I".into(), "5".into()),
        "{m}"
    );
    assert_eq!(field(&m, 790), "q1");
    // Garbled: the CheckSum is wrong; the number is not taken, so the next message at the
    // same number is handled.
    let mut garbled = raw.build("D", raw.out_seq, &format!("11=H|{order}"));
    let at = garbled.len() - 2;
    garbled[at] = if garbled[at] == b'0' { b'1' } else { b'0' };
    raw.send_raw(&garbled);
    raw.send(
        "D",
        &format!("11=I|54=1|38={}|40=2|44=50|55=MSFT|", u32::MAX),
    );
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 11), field(&m, 103)),
        ("I".into(), "13".into()),
        "{m}"
    );
    let v = raw.venue.fix_stats().unwrap();
    assert_eq!(
        (v.garbled, v.rejects_sent, v.business_rejects_sent),
        (1, 4, 1),
        "{v:?}"
    );
    let e = raw.venue.exchange().stats();
    assert_eq!((e.accepted, e.rejected), (1, 1), "{e:?}");
}

// Goal: the session layer's numbers: a number too high gets one ResendRequest from the
// expected number; a GapFill closes the gap; a number too low with PossDupFlag is ignored; a
// ResendRequest is answered by the application messages again (PossDupFlag, OrigSendingTime)
// and a GapFill over session messages; a number too low without PossDupFlag ends the session
// with a Logout naming both numbers.
#[test]
fn sequence_numbers_too_high_and_too_low() {
    let mut raw = Raw::open();
    raw.logon();
    raw.send(
        "D",
        "11=A|54=1|38=10|40=2|44=50|55=MSFT|60=20261202-12:00:00.000|",
    );
    let ack = raw.next_not_heartbeat();
    assert_eq!(field(&ack, 150), "0", "{ack}");
    let ack_seq = field(&ack, 34);
    // Too high: 3 expected, 6 sent.
    raw.out_seq = 6;
    raw.send("0", "");
    let resend = raw.next_not_heartbeat();
    assert_eq!(
        (field(&resend, 35), field(&resend, 7), field(&resend, 16)),
        ("2".into(), "3".into(), "0".into()),
        "{resend}"
    );
    let fill = raw.build("4", 3, "43=Y|122=20261202-12:00:00.000|123=Y|36=7|");
    raw.send_raw(&fill);
    raw.out_seq = 7;
    // Too low with PossDupFlag: ignored.
    let dup = raw.build("0", 2, "43=Y|122=20261202-12:00:00.000|");
    raw.send_raw(&dup);
    // A ResendRequest for everything: the Logon (2.. are the venue's), the ack again.
    raw.send("2", "7=1|16=0|");
    let first = raw.next_not_heartbeat();
    assert_eq!(
        (field(&first, 35), field(&first, 123), field(&first, 36)),
        ("4".into(), "Y".into(), ack_seq.clone()),
        "{first}"
    );
    let again = raw.next_not_heartbeat();
    assert_eq!(
        (field(&again, 35), field(&again, 34), field(&again, 43)),
        ("8".into(), ack_seq, "Y".into()),
        "{again}"
    );
    assert!(!field(&again, 122).is_empty(), "{again}");
    let last = raw.next_not_heartbeat();
    assert_eq!(
        (field(&last, 35), field(&last, 34), field(&last, 36)),
        ("4".into(), "3".into(), "4".into()),
        "{last}"
    );
    // Too low without PossDupFlag.
    raw.out_seq = 2;
    raw.send("0", "");
    let logout = raw.next_not_heartbeat();
    assert_eq!(field(&logout, 35), "5", "{logout}");
    assert!(
        field(&logout, 58).contains("expecting 8 but received 2"),
        "{logout}"
    );
    assert!(raw.closed());
    let v = raw.venue.fix_stats().unwrap();
    assert_eq!(
        (
            v.resend_requests_out,
            v.duplicates_ignored,
            v.resend_requests_in,
            v.seq_too_low
        ),
        (1, 1, 1, 1),
        "{v:?}"
    );
    assert_eq!(raw.venue.exchange().stats().accepted, 1);
}

// Goal (found by an adversarial review): a symbol with a byte OUCH cannot carry (0x7f) is an
// unknown symbol, never a venue crash; a value past field_max at the expected number is
// refused by a Reject that takes the number (the session goes on, no gap that can never be
// filled); a TestRequest without TestReqID is refused; two replaces sent back to back are
// sized from the chain's true shares (the chain never fills past its total); a self-match's
// two fills have different ExecIDs.
#[test]
fn hostile_symbols_fields_and_replaces() {
    let mut raw = Raw::open();
    raw.logon();
    raw.send("D", "11=A|54=1|38=10|40=2|44=50|55=MS\x7fT|");
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 150), field(&m, 103)),
        ("8".into(), "1".into()),
        "{m}"
    );
    raw.send(
        "D",
        &format!("11=B|54=1|38=10|40=2|44=50|55=MSFT|58={}|", "x".repeat(300)),
    );
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 35), field(&m, 373)),
        ("3".into(), "5".into()),
        "{m}"
    );
    raw.send("1", "");
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 35), field(&m, 371)),
        ("3".into(), "112".into()),
        "{m}"
    );
    // The session goes on: the next order is handled.
    let order = "54=1|40=2|44=50|55=MSFT|60=20261202-12:00:00.000|";
    raw.send("D", &format!("11=C|38=100|{order}"));
    let m = raw.next_not_heartbeat();
    assert_eq!(field(&m, 150), "0", "{m}");
    // 40 of C fill; then C→D and D→E sent together, each for a total of 100.
    let now = raw.clock.now_ns();
    raw.venue
        .exchange_mut()
        .synthetic(now, 1, Side::Sell, Price::from_units(50, 0).0, 40, false);
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 150), field(&m, 14)),
        ("F".into(), "40".into()),
        "{m}"
    );
    let first = raw.build("G", raw.out_seq, &format!("11=D|41=C|38=100|{order}"));
    let second = raw.build("G", raw.out_seq + 1, &format!("11=E|41=D|38=100|{order}"));
    raw.out_seq += 2;
    raw.send_raw(&[first, second].concat());
    for id in ["D", "E"] {
        let m = raw.next_not_heartbeat();
        assert_eq!(
            (field(&m, 150), field(&m, 11)),
            ("5".into(), id.into()),
            "{m}"
        );
        assert_eq!(
            (field(&m, 38), field(&m, 151)),
            ("100".into(), "60".into()),
            "{m}"
        );
    }
    // Everything left trades: 60, never more.
    let now = raw.clock.now_ns();
    raw.venue
        .exchange_mut()
        .synthetic(now, 1, Side::Sell, Price::from_units(50, 0).0, 500, true);
    let m = raw.next_not_heartbeat();
    assert_eq!(
        (field(&m, 150), field(&m, 32), field(&m, 14)),
        ("F".into(), "60".into(), "100".into()),
        "{m}"
    );
    // A self-match: the session's sell meets its own buy.
    raw.send("D", "11=F|54=1|38=5|40=2|44=40|55=AAPL|");
    let m = raw.next_not_heartbeat();
    assert_eq!(field(&m, 150), "0", "{m}");
    raw.send("D", "11=G|54=2|38=5|40=2|44=40|55=AAPL|");
    let mut exec_ids = Vec::new();
    while exec_ids.len() < 2 {
        let m = raw.next_not_heartbeat();
        if field(&m, 150) == "F" {
            exec_ids.push(field(&m, 17));
        }
    }
    assert_ne!(exec_ids[0], exec_ids[1]);
    assert_eq!(raw.venue.fix_stats().unwrap().foreign_reports, 0);
}

// Goal: the venue's own bounds: a new SenderCompID past `sessions_max` is refused at Logon;
// ResetSeqNumFlag with a MsgSeqNum other than 1 is refused; a flood of TestRequests that
// fills the resend store (every answer is numbered and kept) ends in a Logout, and the
// venue keeps running.
#[test]
fn sessions_and_the_resend_store_are_bounded() {
    let config = FixConfig {
        sessions_max: 1,
        store_bytes_max: 64 << 10,
        ..FixConfig::default()
    };
    let mut raw = Raw::open_with("ONE", config);
    raw.send("A", "98=0|108=30|141=Y|554=keel|");
    assert_eq!(field(&raw.next(), 35), "A");
    raw.send("5", "");
    assert_eq!(field(&raw.next_not_heartbeat(), 35), "5");
    assert!(raw.closed());
    // A reset must come at 34=1.
    raw.reconnect();
    raw.out_seq = 2;
    raw.send("A", "98=0|108=30|141=Y|554=keel|");
    let m = raw.next();
    assert!(field(&m, 58).contains("ResetSeqNumFlag"), "{m}");
    raw.sender = "TWO";
    raw.reconnect();
    raw.out_seq = 1;
    raw.send("A", "98=0|108=30|554=keel|");
    let m = raw.next();
    assert!(field(&m, 58).contains("every FIX session"), "{m}");
    raw.sender = "ONE";
    raw.reconnect();
    raw.out_seq = 1;
    raw.send("A", "98=0|108=30|141=Y|554=keel|");
    assert_eq!(field(&raw.next(), 35), "A");
    let mut logout = None;
    for i in 0..10_000 {
        raw.send("1", &format!("112=T{i}|"));
        if i % 50 == 0 {
            while let Some(m) = raw.try_next() {
                if field(&m, 35) == "5" {
                    logout = Some(m);
                }
            }
            if logout.is_some() {
                break;
            }
        }
    }
    let logout = logout.expect("a Logout once the store is full");
    assert!(
        field(&logout, 58).contains("resend store is full"),
        "{logout}"
    );
    assert!(raw.venue.fix_stats().unwrap().store_full >= 1);
}

// Goal (issue 38, point 3): the venue after a restart without its sessions neither resumes a
// session it does not have nor books twice. Method: a client trades (one order), the venue is
// replaced by a fresh one (a kill -9 and restart: no state), the client logs on resuming its
// numbers — refused with a Logout naming why; logged on again with ResetSeqNumFlag it begins
// a new session; an order sent again as a possible duplicate under a ClOrdID the venue booked
// is ignored (counted), never booked twice; no ExecID of the first venue is used again.
#[test]
fn a_restarted_venue_refuses_a_resume_it_cannot_honour_and_never_books_twice() {
    let order = "11=7|54=1|38=10|40=2|44=50|55=MSFT|60=20261202-12:00:00.000|";
    let mut raw = Raw::open_as("TRADER");
    raw.logon();
    raw.send("D", order);
    let first = raw.next_not_heartbeat();
    assert_eq!(field(&first, 150), "0", "{first}");
    // Sent again as a possible duplicate (in sequence): the venue booked it: ignored.
    let again = format!("43=Y|122=20261202-12:00:00.000|{order}");
    raw.send("D", &again);
    raw.send("1", "112=after-dup|");
    let answer = loop {
        let m = raw.next();
        if field(&m, 35) != "0" || field(&m, 112) == "after-dup" {
            break m;
        }
    };
    assert_eq!(
        field(&answer, 112),
        "after-dup",
        "no second booking: {answer}"
    );
    assert_eq!(raw.venue.fix_stats().unwrap().poss_dup_orders_ignored, 1);
    assert_eq!(raw.venue.exchange().stats().accepted, 1);

    // The venue restarts without its state.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let fresh = Raw::open_as("TRADER");
    raw.venue = fresh.venue;
    raw.clock = fresh.clock; // a new process: its own clock's origin
    raw.reconnect();
    raw.send("A", "98=0|108=30|554=keel|");
    let logout = raw.next();
    assert_eq!(field(&logout, 35), "5", "{logout}");
    let why = field(&logout, 58);
    assert!(
        why.contains("no session state for SenderCompID TRADER"),
        "{why}"
    );
    assert!(why.contains("141=Y"), "{why}");
    assert!(raw.closed());
    // The same saying it has seen the venue's messages up to 2 (789=3): refused too.
    raw.reconnect();
    raw.send("A", "98=0|108=30|789=3|554=keel|");
    let logout = raw.next();
    assert!(
        field(&logout, 58).contains("expecting the venue's message 3"),
        "{logout}"
    );
    assert!(raw.closed());
    assert_eq!(raw.venue.fix_stats().unwrap().logons_without_state, 2);
    assert_eq!(raw.venue.exchange().stats().accepted, 0);
    // Another client whose first Logon was lost (numbered 2, never heard the venue: 789=1)
    // is no restart: it logs on, and the venue asks for its number 1.
    let mut lost = Raw::open_as("LATE");
    lost.venue = raw.venue;
    lost.clock = raw.clock;
    lost.reconnect();
    lost.out_seq = 2;
    lost.send("A", "98=0|108=30|789=1|554=keel|");
    assert_eq!(field(&lost.next(), 35), "A");
    let resend = lost.next_not_heartbeat();
    assert_eq!(
        (field(&resend, 35), field(&resend, 7)),
        ("2".into(), "1".into())
    );
    raw.venue = lost.venue;
    raw.clock = lost.clock;

    // A new session, explicitly reset: the order is new to this venue and booked once.
    raw.reconnect();
    raw.out_seq = 1;
    raw.send("A", "98=0|108=30|141=Y|554=keel|");
    let logon = raw.next();
    assert_eq!(
        (field(&logon, 35), field(&logon, 141)),
        ("A".into(), "Y".into())
    );
    raw.send("D", order);
    let second = raw.next_not_heartbeat();
    assert_eq!(field(&second, 150), "0", "{second}");
    assert_ne!(
        field(&first, 17),
        field(&second, 17),
        "an ExecID used again"
    );
    assert!(field(&second, 17).contains('-'), "{second}");
}

// Goal (issue 38, point 4): the venue's acceptor discards a frame whose BodyLength lies (one
// short, and one past message_max) and resyncs at the next BeginString: the session stays up,
// the garbled message's number is not taken, and the venue asks for it again.
#[test]
fn a_garbled_frame_is_discarded_and_the_venue_resyncs() {
    for lie in ["short", "huge"] {
        let mut raw = Raw::open_as("NOISY");
        raw.logon();
        let good = raw.build("1", 2, "112=lost|");
        let text = String::from_utf8(good).unwrap();
        let body_length = text.split('\x01').nth(1).unwrap().to_string();
        let n: usize = body_length[2..].parse().unwrap();
        let bad = match lie {
            "short" => format!("9={}", n - 1),
            _ => "9=999999".to_string(),
        };
        let garbled = text.replacen(&body_length, &bad, 1);
        raw.send_raw(garbled.as_bytes());
        let next = raw.build("1", 3, "112=after|");
        raw.send_raw(&next);
        raw.out_seq = 4;
        let asked = raw.next_not_heartbeat();
        assert_eq!(
            (field(&asked, 35), field(&asked, 7)),
            ("2".into(), "2".into()),
            "{lie}: {asked}"
        );
        let stats = raw.venue.fix_stats().unwrap();
        assert_eq!(stats.garbled, 1, "{lie}: {stats:?}");
        assert_eq!(stats.logons, 1, "{lie}");
        assert!(!raw.closed_within_a_moment(), "{lie}: the session ended");
    }
}
