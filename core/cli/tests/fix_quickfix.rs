//! keel's FIX 4.4 initiator against a QuickFIX/C++ acceptor (Debian's libquickfix, validating
//! every message against the FIX 4.4 data dictionary): the engine's own loop over io_uring
//! (the one test world, against a venue that is another process), QuickFIX's own session
//! layer on the other side. Orders, cancels, replaces, partial and full fills; a TestRequest;
//! a sequence gap from the venue answered by ResendRequest and QuickFIX's gap fill and resend;
//! a disconnect and a reconnect that resumes both sequence numbers; a restart from the journal
//! whose outbound jump QuickFIX asks for and keel fills; a Logout from the venue.

mod common;

use common::quickfix::Acceptor;
use common::world::{World, WorldBuilder};
use keel::net::Reactor;
use keel::order::{Command, EventKind, Price, Replace, VenueId};
use keel::session::fix::FixSettings;
use keel::session::{AnyProtocol, ProtocolConfig};

fn fix44() -> ProtocolConfig {
    ProtocolConfig::Fix44(FixSettings {
        sender_comp_id: "KEEL".into(),
        target_comp_id: "VENUE".into(),
        ..FixSettings::default()
    })
}

/// keel's engine loop with one FIX link to `venue`, SYNCED.
fn synced_world(venue: &Acceptor) -> World<Reactor> {
    let mut w = WorldBuilder::new()
        .protocol(fix44())
        .build_against::<Reactor>(venue.addr);
    synced(&mut w);
    w
}

fn synced(w: &mut World<Reactor>) {
    w.until("SYNCED over FIX", |w| w.dispatcher().is_synced(VenueId(0)));
}

/// The FIX client behind the world's link.
fn fix(w: &World<Reactor>) -> &keel::session::fix::FixClient {
    match w.link().client() {
        AnyProtocol::Fix44(c) => c,
        other => panic!("not a FIX link: {other:?}"),
    }
}

/// The ClOrdID the acceptor printed in its `nth` "new" line.
fn new_cl_ord_id(venue: &mut Acceptor, nth: usize, w: &mut World<Reactor>) -> String {
    let line = venue.wait_while("new ", nth, || w.step());
    line.split(' ').nth(1).unwrap().to_string()
}

/// Nothing keel sent was refused by QuickFIX's session layer or its data dictionary.
fn nothing_refused(venue: &mut Acceptor, w: &World<Reactor>) {
    assert!(
        !venue.saw("reject-sent"),
        "QuickFIX refused: {:?}",
        venue.seen
    );
    assert_eq!(w.link().stats().decode_errors, 0);
    let stats = fix(w).fix_stats();
    assert_eq!(
        (
            stats.garbled,
            stats.malformed,
            stats.rejects_received,
            stats.rejects_sent
        ),
        (0, 0, 0, 0),
        "{stats:?}"
    );
}

// Goal: the order path over FIX against QuickFIX: logon and mass-status reconciliation to
// SYNCED, a buy accepted and filled in two parts, a second order canceled, a third replaced.
#[test]
fn keel_trades_with_a_quickfix_acceptor() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let mut w = synced_world(&venue);
    // The peer prints what it handled on its own time: wait for the lines, not for a moment.
    venue.wait_while("logon", 0, || w.step());
    venue.wait_while("mass-status 0", 0, || w.step());

    let buy = w.order(1, 100);
    w.send(Command::New(buy));
    w.until("the buy accepted", |w| {
        w.kinds(buy.id) == [EventKind::Accepted]
    });
    let id = new_cl_ord_id(&mut venue, 0, &mut w);
    venue.send(&format!("fill {id} 40 50"));
    w.until("a partial fill", |w| w.kinds(buy.id).len() == 2);
    venue.send(&format!("fill {id} 60 49.99"));
    w.until("the fill", |w| w.kinds(buy.id).len() == 3);
    assert_eq!(
        w.kinds(buy.id),
        [
            EventKind::Accepted,
            EventKind::PartiallyFilled {
                qty: 40,
                price: Price::from_units(50, 0),
                leaves: 60
            },
            EventKind::Filled {
                qty: 60,
                price: Price::from_units(49, 9900)
            }
        ]
    );

    let rest = w.order(2, 10);
    w.send(Command::New(rest));
    w.until("the second accepted", |w| {
        w.kinds(rest.id) == [EventKind::Accepted]
    });
    w.send(Command::Cancel { id: rest.id });
    w.until("the cancel", |w| {
        w.kinds(rest.id).last() == Some(&EventKind::Canceled)
    });

    let third = w.order(3, 10);
    w.send(Command::New(third));
    w.until("the third accepted", |w| {
        w.kinds(third.id) == [EventKind::Accepted]
    });
    let new_id = keel::order::ClientOrderId::new(keel::order::StrategyId(0), 4).unwrap();
    w.send(Command::Replace(Replace {
        id: third.id,
        new_id,
        price: Price::from_units(49, 5000),
        qty: 20,
    }));
    w.until("the replace", |w| {
        w.kinds(third.id).last() == Some(&EventKind::Replaced { new_id })
    });
    venue.wait_while("replace ", 0, || w.step());
    nothing_refused(&mut venue, &w);
    // Golden vectors from QuickFIX's own output: every message its log holds (what it wrote
    // and what it read of keel's) frames whole and parses with keel's codec.
    let logged = venue.logged_messages();
    assert!(
        logged.len() >= 15,
        "{} messages in QuickFIX's log",
        logged.len()
    );
    let limits = keel::session::fix::codec::Limits::default();
    let mut table = keel::session::fix::codec::FieldTable::default();
    for m in &logged {
        assert_eq!(
            keel::session::fix::codec::frame(m, &limits),
            keel::session::fix::codec::Frame::Whole { len: m.len() },
            "{}",
            String::from_utf8_lossy(m)
        );
        assert!(
            table.parse(m, &limits).is_ok(),
            "{}",
            String::from_utf8_lossy(m)
        );
    }
    if let Ok(dir) = std::env::var("KEEL_FIX_GOLDEN_OUT") {
        let text: Vec<String> = logged
            .iter()
            .map(|m| String::from_utf8_lossy(m).replace('\u{1}', "|"))
            .collect();
        std::fs::write(
            std::path::Path::new(&dir).join("quickfix.txt"),
            text.join("\n"),
        )
        .unwrap();
    }
}

// Goal: the session layer's exchanges with QuickFIX: its TestRequest answered with its id; a
// gap in the venue's numbers (QuickFIX skips three) asked for once, filled by QuickFIX, and
// the execution report behind the gap resent and booked once.
#[test]
fn test_requests_and_a_venue_gap_are_answered() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let mut w = synced_world(&venue);
    venue.send("testrequest T7");
    // keel's Heartbeat carrying the TestReqID (the interval's own Heartbeats carry none).
    venue.wait_for(
        "a Heartbeat answering T7",
        |l| l.starts_with("admin 0 ") && l.ends_with(" T7"),
        0,
        || w.step(),
    );

    let buy = w.order(1, 100);
    w.send(Command::New(buy));
    w.until("accepted", |w| w.kinds(buy.id) == [EventKind::Accepted]);
    let id = new_cl_ord_id(&mut venue, 0, &mut w);
    venue.send("gap 3");
    venue.wait_while("gapped", 0, || w.step());
    venue.send(&format!("fill {id} 100 50"));
    w.until("the fill behind the gap", |w| w.kinds(buy.id).len() == 2);
    venue.wait_while("admin 2 ", 0, || w.step());
    assert_eq!(fix(&w).fix_stats().resend_requests_sent, 1);
    // The report was resent once and booked once.
    for _ in 0..2_000 {
        w.step();
    }
    assert_eq!(w.kinds(buy.id).len(), 2, "{:?}", w.kinds(buy.id));
    assert_eq!(
        w.dispatcher()
            .guards()
            .risk
            .position(keel::order::SymbolId(1)),
        100
    );
    nothing_refused(&mut venue, &w);
}

// Goal: a dropped connection resumes both sequence numbers: keel logs on again with its next
// number (no reset) and QuickFIX accepts it; orders flow again after reconciliation.
#[test]
fn a_disconnect_and_reconnect_resume_the_sequence() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let mut w = synced_world(&venue);
    let first = w.order(1, 10);
    w.send(Command::New(first));
    w.until("accepted", |w| w.kinds(first.id) == [EventKind::Accepted]);
    let out_before = fix(&w).out_seq();
    venue.send("disconnect");
    venue.wait_while("logon", 1, || w.step());
    synced(&mut w);
    assert!(fix(&w).out_seq() > out_before);
    assert!(!venue.saw("logout-sent"), "{:?}", venue.seen);
    let second = w.order(2, 10);
    w.send(Command::New(second));
    w.until("accepted after the reconnect", |w| {
        w.kinds(second.id) == [EventKind::Accepted]
    });
    nothing_refused(&mut venue, &w);
}

// Goal: a restart from the journal resumes the session: keel sends from its journaled
// reservation (a jump QuickFIX asks for with a ResendRequest, which keel fills with a
// SequenceReset-GapFill, never a resend), expects the venue's next number, and the order
// left open before the restart is still keel's to cancel.
#[test]
fn a_restart_from_the_journal_resumes_both_numbers() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let builder = WorldBuilder::new().protocol(fix44()).journal(dir.path());
    let open = {
        let mut w = builder.clone().build_against::<Reactor>(venue.addr);
        synced(&mut w);
        let open = w.order(1, 10);
        w.send(Command::New(open));
        w.until("accepted", |w| w.kinds(open.id) == [EventKind::Accepted]);
        open
    };
    let mut w = builder.build_against::<Reactor>(venue.addr);
    synced(&mut w);
    venue.wait_while("admin 4 ", 0, || w.step());
    venue.wait_while("logon", 0, || w.step());
    assert!(fix(&w).out_seq() > keel::session::fix::OUT_SEQ_BLOCK);
    w.send(Command::Cancel { id: open.id });
    w.until("the journaled order canceled", |w| {
        w.kinds(open.id).last() == Some(&EventKind::Canceled)
    });
    nothing_refused(&mut venue, &w);
}

// Goal: a Logout from the venue is answered with a Logout and ends the session; keel does not
// trade on the link until it is logged on again.
#[test]
fn a_venue_logout_is_answered_and_ends_the_session() {
    let Some(mut venue) = Acceptor::start() else {
        return;
    };
    let mut w = synced_world(&venue);
    venue.send("logout");
    venue.wait_while("admin 5 ", 0, || w.step());
    w.until("the link down", |w| !w.dispatcher().is_synced(VenueId(0)));
    assert_eq!(fix(&w).fix_stats().logouts_received, 1);
    nothing_refused(&mut venue, &w);
}
