//! A QuickFIX/C++ initiator (Debian's libquickfix, validating every message it receives
//! against the FIX 4.4 data dictionary) trades with keel's venue serving FIX: logon with a
//! password, orders, partial and full fills, a cancel, a replace that carries CumQty over
//! the chain, a status and a mass status, a TestRequest, a gap in each direction (QuickFIX's
//! numbers skipped, answered by its gap fill and resend; the venue's reports lost on the wire,
//! sent again with PossDupFlag), a disconnect and a reconnect that resumes both numbers with a
//! fill made while away, and a Logout. QuickFIX never refuses a message the venue sent.

mod common;

use common::quickfix::Peer;
use keel::clock::{Clock, TscClock};
use keel::order::{Price, Side};
use keel_venue::flow::FlowConfig;
use keel_venue::server::{FixConfig, VenueConfig, VenueServer};

struct Rig {
    venue: VenueServer,
    clock: TscClock,
    trader: Peer,
}

impl Rig {
    fn start() -> Option<Self> {
        // No synthetic flow: the test's sells trade with the trader's bids only.
        let venue = VenueServer::new(VenueConfig {
            fix: Some(FixConfig::default()),
            flow: FlowConfig {
                events_per_sec: 0,
                ..FlowConfig::default()
            },
            ..VenueConfig::default()
        })
        .unwrap();
        let trader = Peer::initiator(venue.fix_addr().unwrap())?;
        let mut rig = Self {
            venue,
            clock: TscClock::new(),
            trader,
        };
        rig.wait("logon", 0);
        Some(rig)
    }

    fn step(venue: &mut VenueServer, clock: &TscClock) {
        venue.step(clock.now_ns(), 1_000_000).unwrap();
    }

    /// Waits (stepping the venue) for the `after`+1th line starting with `prefix`.
    fn wait(&mut self, prefix: &str, after: usize) -> String {
        let (venue, clock) = (&mut self.venue, &self.clock);
        self.trader
            .wait_while(prefix, after, || Self::step(venue, clock))
    }

    /// Waits for the `after`+1th line that is exactly `line`.
    fn expect(&mut self, line: &str, after: usize) {
        let (venue, clock) = (&mut self.venue, &self.clock);
        self.trader
            .wait_for(line, |l| l == line, after, || Self::step(venue, clock));
    }

    fn send(&mut self, command: &str) {
        self.trader.send(command);
    }

    fn sell(&mut self, qty: u32) {
        let now = self.clock.now_ns();
        self.venue.exchange_mut().synthetic(
            now,
            1,
            Side::Sell,
            Price::from_units(50, 0).0,
            qty,
            false,
        );
    }

    /// QuickFIX refused nothing the venue sent, and the venue nothing QuickFIX sent.
    fn clean(&mut self) {
        assert!(
            !self.trader.saw("reject-sent") && !self.trader.saw("business-reject"),
            "QuickFIX refused: {:?}",
            self.trader.seen
        );
        let v = self.venue.fix_stats().unwrap();
        assert_eq!(
            (
                v.rejects_sent,
                v.business_rejects_sent,
                v.garbled,
                v.malformed,
                v.seq_too_low,
                v.foreign_reports,
                v.logons_refused
            ),
            (0, 0, 0, 0, 0, 0, 0),
            "{v:?}"
        );
    }
}

// Goal: the order path: partial and full fills, a cancel, a replace (OrderQty the chain's
// total, CumQty carried on), a status and a mass status, a TestRequest answered.
#[test]
fn a_quickfix_initiator_trades_with_keel_venue() {
    let Some(mut rig) = Rig::start() else {
        return;
    };
    rig.send("order A1 100 50");
    rig.expect("er 0 0 A1 0 100 0 N", 0);
    rig.sell(30);
    rig.expect("er F 1 A1 30 70 30 N", 0);
    rig.sell(70);
    rig.expect("er F 2 A1 100 0 70 N", 0);

    rig.send("order A2 10 50");
    rig.expect("er 0 0 A2 0 10 0 N", 0);
    rig.send("cancel C2 A2");
    rig.expect("er 4 4 C2 0 0 0 N", 0);
    // A cancel of what is closed: too late (0).
    rig.send("cancel C3 A2");
    rig.expect("cancel-reject C3 0", 0);

    rig.send("order A3 40 50");
    rig.expect("er 0 0 A3 0 40 0 N", 0);
    rig.sell(15);
    rig.expect("er F 1 A3 15 25 15 N", 0);
    rig.send("replace A4 A3 60 50");
    rig.expect("er 5 1 A4 15 45 0 N", 0);
    rig.sell(5);
    rig.expect("er F 1 A4 20 40 5 N", 0);
    rig.send("status A4");
    rig.expect("er I 1 A4 20 40 0 N", 0);
    rig.send("mass M1");
    rig.expect("er I 1 A4 20 40 0 N", 1);
    rig.send("testrequest T1");
    rig.wait("admin 0 ", 0);

    let e = rig.venue.exchange().stats();
    assert_eq!((e.accepted, e.canceled), (4, 1), "{e:?}");
    assert_eq!(rig.venue.exchange().account(0).position(1), (120, 0));
    rig.clean();
}

// Goal: a gap each way, a reconnect and a Logout: QuickFIX skips numbers (the venue asks once,
// QuickFIX fills and resends the order it sent past the gap, handled once); the venue's
// reports are lost on the wire (QuickFIX asks, they come again with PossDupFlag); the venue
// drops the connection, a fill happens while away, QuickFIX logs on again resuming both
// numbers and gets the fill; then it logs out.
#[test]
fn gaps_each_way_a_reconnect_and_a_logout() {
    let Some(mut rig) = Rig::start() else {
        return;
    };
    rig.send("order B1 100 50");
    rig.expect("er 0 0 B1 0 100 0 N", 0);
    rig.send("gap 3");
    rig.wait("gapped", 0);
    rig.send("order B2 10 50");
    rig.expect("er 0 0 B2 0 10 0 N", 0);
    let v = rig.venue.fix_stats().unwrap();
    assert_eq!(v.resend_requests_out, 1, "{v:?}");
    assert_eq!(rig.venue.exchange().stats().accepted, 2, "B2 entered once");

    assert_eq!(
        rig.venue.apply_control(0, "fix-lose 2").unwrap(),
        "sessions=1"
    );
    rig.sell(10);
    rig.sell(20);
    rig.sell(30);
    rig.expect("er F 1 B1 10 90 10 Y", 0);
    rig.expect("er F 1 B1 30 70 20 Y", 0);
    rig.wait("er F 1 B1 60 40 30 ", 0);
    let v = rig.venue.fix_stats().unwrap();
    assert_eq!((v.lost_injected, v.resend_requests_in), (2, 1), "{v:?}");

    rig.venue.apply_control(0, "restart").unwrap();
    rig.sell(40);
    rig.wait("logon", 1);
    rig.expect("er F 2 B1 100 0 40 N", 0);
    assert_eq!(rig.venue.fix_stats().unwrap().logons, 2);

    rig.send("logout");
    rig.expect("logout", 1);
    let v = rig.venue.fix_stats().unwrap();
    assert_eq!(v.logouts, 1, "{v:?}");
    assert_eq!(
        rig.venue.exchange().stats().accepted,
        2,
        "nothing entered twice"
    );
    rig.clean();
}
