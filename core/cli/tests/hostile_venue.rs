//! The real engine against a hostile `keel venue` on loopback (issue 10: "Panic", "Silent
//! desynchronization", "A wedged link"; Build 1 and 10). The venue process is told to lie
//! through its control port (`lie ...`, `gap N`, `login-seq S`, `debug-packet N`, `oversize N`);
//! the engine (EngineBuilder, an in-process strategy, back-off idle) must answer each with the
//! fail-safe outcome: no panic, no hang, the contradiction named in its counters, the link
//! read-only (cancels still flow, no new order reaches the venue) or resynchronized, and
//! nothing lost that the venue reported.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use keel::config::EngineConfig;
use keel::dispatch::StrategyHandle;
use keel::engine::{EngineBuilder, EngineReport, RunningEngine};
use keel::order::{
    ClientOrderId, Command, Contradiction, EventKind, NewOrder, Price, RefusalReason, Side,
    StrategyId, SymbolId, TimeInForce, VenueId,
};
use keel::proto::ouch::{encode_inbound, Dialect, EnterOrder, Inbound, OrderFields};
use keel::proto::soupbin::{alpha, encode_client, frame, ClientPacket, LoginRequest};
use keel::runtime::IdlePolicy;

mod common;

use common::peers::{venue, Venue};

/// Every wait in this file gives up (and fails the test) after this long: bounded time.
const LIMIT: Duration = Duration::from_secs(15);

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A control connection to the venue: one command, one answer line.
struct Control(BufReader<TcpStream>);

impl Control {
    fn connect(addr: &str) -> Self {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Self(BufReader::new(s))
    }

    /// Sends `line`; returns the answer line.
    fn raw(&mut self, line: &str) -> String {
        self.0
            .get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        self.0.read_line(&mut answer).unwrap();
        answer.trim_end().to_string()
    }

    /// Sends `line`, which must be answered `ok`; returns the answer.
    fn ok(&mut self, line: &str) -> String {
        let answer = self.raw(line);
        assert!(
            answer.starts_with(&format!("ok {line}")),
            "{line}: {answer}"
        );
        answer
    }

    /// The exchange counters (`stats`), by name.
    fn stats(&mut self) -> HashMap<String, u64> {
        self.ok("stats")
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    }
}

fn config_text(entry: &str, max_packet_len: u16) -> String {
    format!(
        "symbols = [\"AAPL\", \"MSFT\", \"AMZN\", \"NVDA\"]\n\
         [dispatcher]\nstrategies = 1\n\
         [engine]\ntopology = \"inline\"\nidle = \"backoff\"\n\
         [[venue]]\nname = \"sim\"\naddress = \"{entry}\"\nusername = \"keel\"\npassword = \"keel\"\n\
         max_packet_len = {max_packet_len}\n\
         backoff_base_ns = 20_000_000\nbackoff_cap_ns = 200_000_000\n"
    )
}

/// `keel venue` (no synthetic flow), the real engine connected to it, and its strategy.
struct Drill {
    venue: Venue,
    control: Control,
    /// Always running between calls (empty only inside `restart`).
    running: Option<RunningEngine>,
    strategy: StrategyHandle,
    events: Vec<(ClientOrderId, EventKind)>,
    next_seq: u64,
    /// The engine's configuration.
    text: String,
}

impl Drill {
    fn start(max_packet_len: u16) -> Self {
        let venue = venue(&["--flow-rate", "0"]);
        let control = Control::connect(&venue.control);
        let text = config_text(&venue.entry, max_packet_len);
        let (engine, strategy) = Self::engine(&text);
        Self {
            venue,
            control,
            running: Some(engine),
            strategy,
            events: Vec::new(),
            next_seq: 0,
            text,
        }
    }

    /// An engine started from `text`, SYNCED, and its strategy.
    fn engine(text: &str) -> (RunningEngine, StrategyHandle) {
        let config = EngineConfig::from_toml(text).unwrap();
        let mut engine = EngineBuilder::new(config)
            .idle(IdlePolicy::TEST)
            .start()
            .unwrap();
        let strategy = engine.take_strategy(StrategyId(0)).unwrap();
        wait_until("SYNCED", || engine.venue_synced(VenueId(0)));
        (engine, strategy)
    }

    /// Stops the engine (cleanly) and starts a new one from the same configuration (and
    /// journal), against the same venue; returns the first engine's report.
    /// (The first stops before the second starts: one engine per journal directory.)
    fn restart(&mut self) -> EngineReport {
        let old = self.running.take().expect("an engine runs");
        assert!(!old.has_failed(), "an engine loop ended on its own");
        let report = old.stop().expect("the engine stops cleanly");
        let (engine, strategy) = Self::engine(&self.text);
        self.running = Some(engine);
        self.strategy = strategy;
        self.events.clear();
        report
    }

    /// The running engine.
    fn running(&self) -> &RunningEngine {
        self.running.as_ref().expect("an engine runs")
    }

    fn order(&mut self, symbol: u16, side: Side, tif: TimeInForce) -> NewOrder {
        self.next_seq += 1;
        NewOrder {
            id: ClientOrderId::new(StrategyId(0), self.next_seq).unwrap(),
            venue: VenueId(0),
            symbol: SymbolId(symbol),
            side,
            price: Price::from_units(100, 0),
            qty: 3,
            tif,
            reduce_only: false,
        }
    }

    fn send(&mut self, command: Command) {
        self.strategy.commands.push(command).unwrap();
    }

    /// Sends `command` and waits until an event for `id` matches `want` (or one collected
    /// earlier did); returns that event.
    fn expect(
        &mut self,
        command: Option<Command>,
        id: ClientOrderId,
        what: &str,
        want: fn(&EventKind) -> bool,
    ) -> EventKind {
        if let Some(c) = command {
            self.send(c);
        }
        // An event already collected (while waiting for another) counts.
        let mut found = self
            .events
            .iter()
            .find(|(i, k)| *i == id && want(k))
            .map(|(_, k)| *k);
        let deadline = Instant::now() + LIMIT;
        while found.is_none() {
            while let Ok(e) = self.strategy.events.pop() {
                self.events.push((e.id, e.kind));
                if e.id == id && want(&e.kind) && found.is_none() {
                    found = Some(e.kind);
                }
            }
            assert!(
                found.is_some() || Instant::now() < deadline,
                "timed out waiting for {what} for {id:?}; its events: {:?}",
                self.events_of(id)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        found.unwrap()
    }

    /// Tells the venue `command` (one that closes keel's connection: `drop`, `oversize N`),
    /// then waits until keel has connected again: a count that only grows, so a reconnect
    /// faster than a poll cannot hide the drop (a wait on `!synced` could miss it).
    fn drop_with(&mut self, command: &str) -> String {
        let before = self.running().venue_connects(VenueId(0));
        let answer = self.control.ok(command);
        wait_until("the link to drop and connect again", || {
            self.running().venue_connects(VenueId(0)) > before
        });
        answer
    }

    /// A buy of 3 at 100 resting on `symbol`, accepted by the venue.
    fn resting(&mut self, symbol: u16) -> ClientOrderId {
        let o = self.order(symbol, Side::Buy, TimeInForce::Day);
        self.expect(Some(Command::New(o)), o.id, "Accepted", |k| {
            matches!(k, EventKind::Accepted)
        });
        o.id
    }

    /// Waits until the link is SYNCED, then places a resting buy (as [`Drill::resting`]).
    fn resting_when_trading(&mut self, symbol: u16) -> ClientOrderId {
        let what = format!("SYNCED again before an order on symbol {symbol}");
        wait_until(&what, || self.running().venue_synced(VenueId(0)));
        self.resting(symbol)
    }

    /// Places resting buys on `symbol` until one is accepted (each refused `LinkReadOnly` while
    /// the link is untrusted); returns the accepted one. Bounded by [`LIMIT`].
    fn accepted_once_trading(&mut self, symbol: u16) -> ClientOrderId {
        let deadline = Instant::now() + LIMIT;
        loop {
            assert!(Instant::now() < deadline, "never trading again");
            wait_until("SYNCED", || self.running().venue_synced(VenueId(0)));
            let o = self.order(symbol, Side::Buy, TimeInForce::Day);
            let answer = self.expect(Some(Command::New(o)), o.id, "an answer", |k| {
                matches!(k, EventKind::Accepted | EventKind::Refused { .. })
            });
            match answer {
                EventKind::Accepted => return o.id,
                EventKind::Refused {
                    reason: RefusalReason::LinkReadOnly,
                } => std::thread::sleep(Duration::from_millis(5)),
                other => panic!("{other:?}"),
            }
        }
    }

    /// Cancels `id` and waits for `Canceled`.
    fn cancel(&mut self, id: ClientOrderId) {
        self.expect(Some(Command::Cancel { id }), id, "Canceled", |k| {
            matches!(k, EventKind::Canceled)
        });
    }

    /// Events the strategy got for `id`, in order.
    fn events_of(&self, id: ClientOrderId) -> Vec<EventKind> {
        self.events
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, k)| *k)
            .collect()
    }

    /// Stops the engine: it must not have failed, and must stop cleanly (no panic).
    fn stop(mut self) -> (EngineReport, Control, Venue) {
        let engine = self.running.take().expect("an engine runs");
        assert!(!engine.has_failed(), "an engine loop ended on its own");
        let report = engine.stop().expect("the engine stops cleanly");
        (report, self.control, self.venue)
    }
}

// Goal (issue 10, "Panic"): with `max_packet_len = 4096` a legal 2,001-byte SoupBinTCP Debug
// packet, and one of exactly 4,096 bytes (the largest the link allows), are taken in stride:
// no panic, no decode error, no reconnect, and the link keeps trading.
#[test]
fn long_debug_packets_within_the_maximum_keep_the_link_trading() {
    let mut d = Drill::start(4096);
    let a = d.resting(0);
    assert_eq!(
        d.control.ok("debug-packet 2000"),
        "ok debug-packet 2000 sessions=1"
    );
    assert_eq!(
        d.control.ok("debug-packet 4095"),
        "ok debug-packet 4095 sessions=1"
    );
    // Orders after the packets are answered: the stream after them was read whole.
    let b = d.resting(1);
    d.cancel(a);
    d.cancel(b);
    assert!(d.running().venue_synced(VenueId(0)));
    let (report, mut control, _venue) = d.stop();
    let link = &report.links[0];
    assert_eq!(
        link.link.decode_errors, 0,
        "{:?}",
        link.link.last_decode_error
    );
    assert_eq!(link.session.connects, 1, "never reconnected");
    assert_eq!(link.client.contradictions, 0);
    let stats = control.stats();
    assert_eq!((stats["accepted"], stats["canceled"]), (2, 2));
}

// Goal (issue 10 Build 10, "oversized packets"): a packet announcing more than the link's
// maximum is refused as malformed (counted, the connection closed), never read past its
// buffer; the link reconnects with backoff, resyncs and trades again.
#[test]
fn an_oversize_packet_is_refused_and_the_link_resyncs() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    assert_eq!(d.drop_with("oversize 1025"), "ok oversize 1025 sessions=1");
    wait_until("SYNCED again", || d.running().venue_synced(VenueId(0)));
    let b = d.resting(1);
    d.cancel(a);
    d.cancel(b);
    let (report, _control, _venue) = d.stop();
    let link = &report.links[0];
    assert_eq!(link.link.decode_errors, 1);
    assert!(
        format!("{:?}", link.link.last_decode_error).contains("Oversize"),
        "{:?}",
        link.link.last_decode_error
    );
    assert!(link.session.connects >= 2);
}

/// After a lie: the link is read-only, a new order is refused `LinkReadOnly` and never
/// reaches the venue, a cancel of `resting` still flows and is `Canceled`, and the link stays
/// untrusted. Then stops the engine and checks the contradiction is named.
fn assert_read_only_after(
    mut d: Drill,
    resting: ClientOrderId,
    what: Contradiction,
) -> (EngineReport, Drill2) {
    wait_until("the link to leave SYNCED", || {
        !d.running().venue_synced(VenueId(0))
    });
    let before = d.control.stats();
    let o = d.order(2, Side::Buy, TimeInForce::Day);
    let refused = d.expect(Some(Command::New(o)), o.id, "a refusal", |k| {
        matches!(k, EventKind::Refused { .. })
    });
    assert_eq!(
        refused,
        EventKind::Refused {
            reason: RefusalReason::LinkReadOnly
        }
    );
    // The cancel goes out on the same connection after anything sent before it: once it is
    // answered, the venue has seen everything keel wrote.
    d.cancel(resting);
    let after = d.control.stats();
    assert_eq!(
        after["accepted"] + after["rejected"],
        before["accepted"] + before["rejected"],
        "no new order reached the venue after the contradiction"
    );
    assert_eq!(after["canceled"], before["canceled"] + 1);
    assert!(
        !d.running().venue_synced(VenueId(0)),
        "the link stays untrusted"
    );
    let events = std::mem::take(&mut d.events);
    let (report, _control, _venue) = d.stop();
    let link = &report.links[0];
    assert!(link.client.contradictions >= 1, "{:?}", link.client);
    assert_eq!(link.client.last_contradiction, Some(what));
    assert!(link.session.read_only_entries >= 1, "{:?}", link.session);
    assert!(report.dispatch.refused[RefusalReason::LinkReadOnly as usize] >= 1);
    (report, Drill2 { events })
}

/// What a stopped drill leaves to look at.
struct Drill2 {
    events: Vec<(ClientOrderId, EventKind)>,
}

// Goal (issue 10, "Silent desynchronization": a fill for an order keel never sent): the link
// goes read-only, the contradiction is counted and named, cancels still flow and no new order
// reaches the venue.
#[test]
fn a_fill_for_an_order_never_sent_makes_the_link_read_only() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    assert_eq!(
        d.control.ok("lie unknown-fill"),
        "ok lie unknown-fill 0:4294967295"
    );
    let (report, _) = assert_read_only_after(d, a, Contradiction::UnknownOrder);
    assert!(report.links[0].client.unknown_order_ref >= 1);
    // The dispatcher's counter, the one to alarm on, names it too.
    assert!(report.dispatch.contradictions >= 1, "{:?}", report.dispatch);
    assert_eq!(
        report.dispatch.last_contradiction,
        Some(Contradiction::UnknownOrder)
    );
}

// Goal (issue 10, "Silent desynchronization": an overfill left the order `Live 0/3` and the
// strategy told nothing): the order concerned becomes Unknown (the strategy is told), the
// dispatcher counts the contradiction, the link is read-only, cancels of other orders flow,
// no new order reaches the venue.
#[test]
fn an_overfill_makes_the_order_unknown_and_the_link_read_only() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    let b = d.resting(1); // the newest open order: the one the venue overfills
    assert_eq!(
        d.control.ok("lie overfill"),
        format!("ok lie overfill 0:{}", 2)
    );
    d.expect(None, b, "Unknown for the overfilled order", |k| {
        matches!(k, EventKind::Unknown)
    });
    assert!(
        !d.events_of(b).iter().any(|k| matches!(
            k,
            EventKind::Filled { .. } | EventKind::PartiallyFilled { .. }
        )),
        "the overfill was not applied: {:?}",
        d.events_of(b)
    );
    let (report, _) = assert_read_only_after(d, a, Contradiction::Overfill);
    assert!(report.dispatch.contradictions >= 1, "{:?}", report.dispatch);
    assert_eq!(
        report.dispatch.last_contradiction,
        Some(Contradiction::Overfill)
    );
}

// Goal (issue 10 Build 10, "extreme field values"): an execution through the order's limit (a
// buy filled at ten times its price) is a contradiction like an overfill: not applied (no fill
// reaches the strategy, and it never becomes the collar's reference), the order Unknown, the
// link read-only, cancels flowing, no new order reaching the venue.
#[test]
fn a_fill_through_the_limit_makes_the_order_unknown_and_the_link_read_only() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    let b = d.resting(1);
    assert_eq!(
        d.control.ok("lie off-limit-fill"),
        "ok lie off-limit-fill 0:2"
    );
    d.expect(
        None,
        b,
        "Unknown for the order filled through its limit",
        |k| matches!(k, EventKind::Unknown),
    );
    assert!(
        !d.events_of(b).iter().any(|k| matches!(
            k,
            EventKind::Filled { .. } | EventKind::PartiallyFilled { .. }
        )),
        "{:?}",
        d.events_of(b)
    );
    let (report, _) = assert_read_only_after(d, a, Contradiction::ExecutionPrice);
    assert_eq!(
        report.dispatch.last_contradiction,
        Some(Contradiction::ExecutionPrice)
    );
}

// Goal (issue 10, "Silent desynchronization": a second fill after the order was filled): the
// extra fill is not applied (the filled order gets no further event), the link goes read-only
// and names it, cancels flow, no new order reaches the venue.
#[test]
fn a_fill_after_the_order_filled_makes_the_link_read_only() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    // keel trades with itself: a resting buy on MSFT, then an IOC sell that fills against it.
    // The IOC sell is the newest closed order: the one the venue fills again.
    let buy = d.resting(1);
    let sell = d.order(1, Side::Sell, TimeInForce::ImmediateOrCancel);
    d.expect(Some(Command::New(sell)), sell.id, "the sell filled", |k| {
        matches!(k, EventKind::Filled { .. })
    });
    d.expect(None, buy, "the buy filled", |k| {
        matches!(k, EventKind::Filled { .. })
    });
    d.events.clear(); // from here on, the sell must get nothing
    assert_eq!(
        d.control.ok("lie fill-after-close"),
        format!("ok lie fill-after-close 0:{}", 3)
    );
    let (report, after) = assert_read_only_after(d, a, Contradiction::AfterClose);
    let sell_events: Vec<EventKind> = after
        .events
        .iter()
        .filter(|(i, _)| *i == sell.id)
        .map(|(_, k)| *k)
        .collect();
    assert!(
        sell_events.is_empty(),
        "a filled order gets no event after its terminal one: {sell_events:?}"
    );
    assert!(report.dispatch.contradictions >= 1, "{:?}", report.dispatch);
    // Issue 38: the execution the venue stated is booked into the position (the session's
    // and risk's), never into the order, and named.
    let client = &report.links[0].client;
    assert_eq!(client.unmatched_executions, 1, "{client:?}");
    assert_eq!(
        report.dispatch.unmatched_executions, 1,
        "{:?}",
        report.dispatch
    );
    let booked = client.last_unmatched_execution.expect("named");
    assert_eq!((booked.symbol, booked.side), (sell.symbol, Side::Sell));
}

/// A second participant on its own account, speaking SoupBinTCP/OUCH by hand.
struct Participant {
    stream: TcpStream,
}

impl Participant {
    fn login(entry: &str, user: &str) -> Self {
        let mut stream = TcpStream::connect(entry).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut out = [0u8; 128];
        let n = encode_client(
            &mut out,
            &ClientPacket::LoginRequest(LoginRequest {
                username: alpha(user),
                password: alpha("keel"),
                session: [b' '; 10],
                sequence: 1,
                heartbeat_timeout_ms: None,
            }),
        )
        .unwrap();
        stream.write_all(&out[..n]).unwrap();
        // Wait for Login Accepted ('A'), so what follows is order entry.
        let mut buf = Vec::new();
        loop {
            if let Some(f) = frame(&buf, 4096).unwrap() {
                assert_eq!(f.packet_type, b'A', "login answer");
                break;
            }
            let mut chunk = [0u8; 256];
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the venue closed the participant's login");
            buf.extend_from_slice(&chunk[..n]);
        }
        Self { stream }
    }

    /// Enters a day order: `side` 3 of `symbol` at 100.
    fn enter(&mut self, user_ref: u32, side: u8, symbol: &[u8; 8]) {
        self.enter_at(user_ref, side, symbol, Price::from_units(100, 0).0);
    }

    /// Enters a day order: `side` 3 of `symbol` at `price`.
    fn enter_at(&mut self, user_ref: u32, side: u8, symbol: &[u8; 8], price: i64) {
        let order = OrderFields {
            side,
            qty: 3,
            symbol: *symbol,
            price,
            tif: b'0',
            display: b'Y',
            capacity: b'A',
            ise: b'N',
            cross_type: b'N',
            cl_ord_id: alpha(&format!("P{user_ref}")),
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
        let mut out = [0u8; 160];
        let m = encode_client(&mut out, &ClientPacket::Unsequenced(&msg[..n])).unwrap();
        self.stream.write_all(&out[..m]).unwrap();
    }
}

// Goal (issue 10, "Silent desynchronization": a sequence gap on re-login whose skipped report
// carried a fill lost the fill): another participant fills keel's resting order while keel is
// disconnected, and the venue's next login answer skips that report. The gap is a
// contradiction; reconciliation holds the order in doubt and queries it, the strategy gets the
// fill (once), and the link returns to trading once that is settled.
#[test]
fn a_fill_skipped_by_a_login_gap_is_recovered() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    let mut other = Participant::login(&d.venue.entry, "other");
    // The participant's sell is held 300 ms by the venue; meanwhile keel is dropped and kept
    // out, so the fill lands in keel's stream while keel is away.
    d.control.ok("latency 300");
    other.enter(1, b'S', b"AAPL    ");
    d.control.ok("refuse on");
    d.drop_with("drop");
    let control = &mut d.control;
    wait_until("the venue to match the sell", || {
        control.stats()["matches"] == 1
    });
    d.control.ok("latency 0");
    d.control.ok("gap 1");
    d.control.ok("refuse off");
    let fill = d.expect(None, a, "the skipped fill", |k| {
        matches!(
            k,
            EventKind::Filled { .. } | EventKind::PartiallyFilled { .. }
        )
    });
    assert!(matches!(fill, EventKind::Filled { qty: 3, .. }), "{fill:?}");
    wait_until("SYNCED again", || d.running().venue_synced(VenueId(0)));
    // Trading again: a new order is accepted.
    let b = d.resting(1);
    d.cancel(b);
    let fills = d
        .events_of(a)
        .iter()
        .filter(|k| {
            matches!(
                k,
                EventKind::Filled { .. } | EventKind::PartiallyFilled { .. }
            )
        })
        .count();
    assert_eq!(fills, 1, "the fill is told once: {:?}", d.events_of(a));
    let (report, mut control, _venue) = d.stop();
    let link = &report.links[0];
    assert!(link.client.contradictions >= 1, "{:?}", link.client);
    assert_eq!(
        link.client.last_contradiction,
        Some(Contradiction::SequenceGap)
    );
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
    assert_eq!(control.stats()["duplicate_ids"], 0);
}

// Goal (issue 10, "A wedged link": one login answer of 2^64-1 made every later login ask for 0
// and every later message be skipped as a duplicate): a login answer of 2^64-1, and one of 0,
// is refused as malformed and counted; the link retries with backoff and, once the venue
// answers sanely again, resyncs and trades (its reports are applied, not skipped).
#[test]
fn impossible_login_sequences_are_refused_and_the_link_resyncs() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    for (i, sequence) in [u64::MAX, 0].into_iter().enumerate() {
        d.control.ok(&format!("login-seq {sequence}"));
        d.drop_with("drop");
        wait_until("SYNCED again", || d.running().venue_synced(VenueId(0)));
        // Not wedged: a new order's acceptance comes back through the stream.
        let b = d.resting(1 + i as u16);
        d.cancel(b);
    }
    d.cancel(a);
    let (report, _control, _venue) = d.stop();
    let link = &report.links[0];
    assert_eq!(
        link.client.last_contradiction,
        Some(Contradiction::ImpossibleSequence)
    );
    assert!(link.client.contradictions >= 2, "{:?}", link.client);
    assert!(link.link.decode_errors >= 2, "{:?}", link.link);
    // The first connect, and per lie: the refused login and the sane one.
    assert!(link.session.connects >= 5, "{:?}", link.session);
    assert_eq!(link.client.duplicates_skipped, 0, "{:?}", link.client);
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
}

// Goal (issue 10 Build 9/10): the hostile-venue commands are range-checked like every other
// control command, refused with the allowed range, and a lie with nothing to lie about says so.
#[test]
fn hostile_commands_are_range_checked() {
    let v = venue(&["--flow-rate", "0"]);
    let mut c = Control::connect(&v.control);
    for (line, answer) in [
        (
            "gap 4294967296",
            "error gap: reports 4294967296 is out of range 0..=4294967295",
        ),
        (
            "gap -1",
            "error gap: reports '-1' is not a whole number in 0..=4294967295",
        ),
        (
            "login-seq 18446744073709551616",
            "error login-seq: sequence '18446744073709551616' is not a whole number in \
             0..=18446744073709551615",
        ),
        (
            "login-seq",
            "error login-seq: missing sequence (0..=18446744073709551615)",
        ),
        (
            "debug-packet 65535",
            "error debug-packet: bytes 65535 is out of range 0..=65534",
        ),
        (
            "oversize 0",
            "error oversize: length 0 is out of range 1..=65535",
        ),
        (
            "oversize 65536",
            "error oversize: length 65536 is out of range 1..=65535",
        ),
        ("gap 1 2", "error gap: unexpected argument '2'"),
        (
            "lie sometimes",
            "error lie: expected unknown-fill|overfill|fill-after-close|zero-fill|\
             off-limit-fill|position, got 'sometimes'",
        ),
        (
            "lie position 0",
            "error lie: shares 0 is out of range 1..=1000000000",
        ),
        (
            "lie position 1000000001",
            "error lie: shares 1000000001 is out of range 1..=1000000000",
        ),
        ("lie position", "error lie: missing shares (1..=1000000000)"),
        (
            "lie position 1000000000",
            "error lie position: no account to lie to",
        ),
        (
            "lie overfill",
            "error lie overfill: no account has an order to lie about",
        ),
    ] {
        assert_eq!(c.raw(line), answer, "{line}");
    }
    assert_eq!(
        c.ok("debug-packet 65534"),
        "ok debug-packet 65534 sessions=0"
    );
    assert_eq!(c.ok("oversize 65535"), "ok oversize 65535 sessions=0");
    assert_eq!(
        c.ok("login-seq 18446744073709551615"),
        "ok login-seq 18446744073709551615"
    );
    assert_eq!(c.ok("gap 4294967295"), "ok gap 4294967295");
    assert_eq!(c.stats()["lies"], 0);
}

// Goal (issue 10, "A wedged link", its plausible cousin): a login answer past what was asked,
// but within the jump keel accepts as a gap, from a venue that then streams from where it
// really stands. keel must not keep counting the venue's messages from the announced number:
// if it did, the next login would ask past the venue's end, the venue would answer its true
// position, and keel would skip that many real reports as duplicates (fills lost, the
// reconciliation answer never seen: reconnecting for ever).
#[test]
fn a_login_answer_that_shifts_the_numbering_does_not_wedge_the_link() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    d.control.ok("login-seq 1000");
    d.drop_with("drop");
    // The lie is caught one way or another; what matters is what follows.
    let b = d.resting_when_trading(1);
    d.drop_with("drop");
    let c = d.resting_when_trading(2);
    for id in [a, b, c] {
        d.cancel(id);
    }
    let (report, mut control, _venue) = d.stop();
    let link = &report.links[0];
    // The login's jump, then the reconciliation answer's numbering: both named.
    assert!(link.client.contradictions >= 2, "{:?}", link.client);
    assert_eq!(
        link.client.last_contradiction,
        Some(Contradiction::SequenceGap)
    );
    assert_eq!(link.client.duplicates_skipped, 0, "{:?}", link.client);
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
    assert_eq!(control.stats()["duplicate_ids"], 0);
}

// Goal (issue 10 Build 2, "and in the simulated venue"): `keel venue --price-band-pct 10`
// rejects, with the invalid-price code, orders priced 0, negative, at the largest price, above
// `--price-max`, or more than 10% from the reference (the flow's 100.0000 before any trade),
// and accepts one inside; nothing rejected reaches the book.
#[test]
fn keel_venue_price_collar_rejects_absurd_prices() {
    let v = venue(&[
        "--flow-rate",
        "0",
        "--price-band-pct",
        "10",
        "--price-max",
        "2000000",
    ]);
    let mut c = Control::connect(&v.control);
    let mut p = Participant::login(&v.entry, "collar");
    let prices = [
        Price::from_units(100, 0).0,
        0,
        -1,
        i64::MAX,
        Price::from_units(200, 1).0, // above --price-max (200.0000)
        Price::from_units(89, 9_999).0,
        Price::from_units(110, 1).0,
        Price::from_units(90, 0).0, // the band's edge: inside
    ];
    for (i, price) in prices.iter().enumerate() {
        p.enter_at(i as u32 + 1, b'B', b"AAPL    ", *price);
    }
    wait_until("every order answered", || {
        let s = c.stats();
        s["accepted"] + s["rejected"] == prices.len() as u64
    });
    let s = c.stats();
    assert_eq!((s["accepted"], s["price_rejects"], s["matches"]), (2, 6, 0));
}

// Goal (issue 10, "Panic", at the worst legal and illegal values): with `max_packet_len` at
// its documented maximum (65,533), a Debug packet of exactly 65,533 bytes is taken in stride
// and the link keeps trading; a packet announcing 65,535 is refused as oversize, and the link
// reconnects and resyncs.
#[test]
fn packets_at_the_largest_maximum_are_read_or_refused_without_panic() {
    let mut d = Drill::start(65_533);
    let a = d.resting(0);
    assert_eq!(
        d.control.ok("debug-packet 65532"),
        "ok debug-packet 65532 sessions=1"
    );
    let b = d.resting(1);
    assert!(d.running().venue_synced(VenueId(0)));
    assert_eq!(
        d.drop_with("oversize 65535"),
        "ok oversize 65535 sessions=1"
    );
    let c = d.resting_when_trading(2);
    for id in [a, b, c] {
        d.cancel(id);
    }
    let (report, _control, _venue) = d.stop();
    let link = &report.links[0];
    assert_eq!(
        link.link.decode_errors, 1,
        "{:?}",
        link.link.last_decode_error
    );
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
}

// Goal (issue 10, "A wedged link", the other way): a login answer that announces an earlier
// sequence than asked (a replay) while the venue streams from where keel really stands. keel
// takes the venue's new reports for duplicates; the answer to its reconciliation query, which
// no replay can contain, shows the shift: keel adopts the venue's numbering, queries what is in
// doubt, and trades again without waiting for its reconciliation timeout; nothing is lost.
#[test]
fn a_login_answer_that_announces_a_replay_it_does_not_send_does_not_wedge_the_link() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    let b = d.resting(1);
    d.cancel(b);
    d.control.ok("login-seq 1");
    d.drop_with("drop");
    let c = d.resting_when_trading(2);
    for id in [a, c] {
        d.cancel(id);
    }
    let (report, _control, _venue) = d.stop();
    let link = &report.links[0];
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
    assert_eq!(
        link.link.decode_errors, 0,
        "{:?}",
        link.link.last_decode_error
    );
    assert!(
        link.client.duplicates_skipped >= 1,
        "the lie was told: {:?}",
        link.client
    );
    // Caught by the reconciliation answer's numbering, not left to the reconciliation timeout.
    assert_eq!(link.session.reconcile_timeouts, 0, "{:?}", link.session);
    assert_eq!(
        link.client.last_contradiction,
        Some(Contradiction::SequenceGap)
    );
}

// Goal (issue 10 Build 10, "extreme field values"): an execution of zero shares for an open
// order is not applied: the order table refuses it (a contradiction the dispatcher counts), no
// fill reaches the strategy, the link is reconciled before it trades again, and trading
// resumes once the venue's view matches keel's.
#[test]
fn a_zero_share_fill_is_refused_and_reconciled() {
    let mut d = Drill::start(1024);
    let a = d.resting(0);
    assert_eq!(d.control.ok("lie zero-fill"), "ok lie zero-fill 0:1");
    // The refusal makes the dispatcher ask the link to reconcile (new orders are refused
    // `LinkReadOnly` meanwhile); once settled, orders leave again.
    let b = d.accepted_once_trading(1);
    for id in [a, b] {
        d.cancel(id);
    }
    assert!(
        !d.events_of(a).iter().any(|k| matches!(
            k,
            EventKind::Filled { .. } | EventKind::PartiallyFilled { .. }
        )),
        "{:?}",
        d.events_of(a)
    );
    let (report, mut control, _venue) = d.stop();
    assert!(report.dispatch.contradictions >= 1, "{:?}", report.dispatch);
    assert_eq!(
        report.dispatch.last_contradiction,
        Some(Contradiction::TableRefused)
    );
    assert!(report.dispatch.sent_reconcile >= 1, "{:?}", report.dispatch);
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
    assert_eq!(control.stats()["lies"], 1);
}

// Goal (issue 10, "A wedged link ... until a restart", and across one): the journal records
// the sequence position of every report applied; after a login answer that shifted the count,
// an engine restarted on that journal must resume where the venue really stands: it resyncs,
// its open orders come back, and it trades. (Without the numbering fix the restarted engine
// asked past the venue's end and never synced.)
#[test]
fn a_restart_after_a_shifted_numbering_resyncs() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Drill::start(1024);
    d.text += &format!("[journal]\ndir = \"{}\"\n", dir.path().join("j").display());
    // Again, now with the journal.
    let report = d.restart();
    assert!(report.open_orders.is_empty());
    let a = d.resting(0);
    d.control.ok("login-seq 1000");
    d.drop_with("drop");
    let b = d.resting_when_trading(1);
    let first = d.restart();
    assert_eq!(first.open_orders.len(), 2, "{:?}", first.open_orders);
    let c = d.resting_when_trading(2);
    for id in [a, b, c] {
        d.cancel(id);
    }
    let (report, mut control, _venue) = d.stop();
    let link = &report.links[0];
    assert_eq!(link.session.reconcile_timeouts, 0, "{:?}", link.session);
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
    assert_eq!(control.stats()["duplicate_ids"], 0);
}

// Goal (issue 23, point 8): after a contradiction only an operator can trust the link again,
// without a restart. Method: `keel ctl reconcile` (the binary, over the engine's admin socket)
// is refused on a SYNCED link, an unknown venue and a missing or extra argument; the venue lies
// (a fill for an order keel never sent), the link is READ-ONLY (a new order is refused
// `LinkReadOnly`; the contradiction is sticky, see `assert_read_only_after`); `reconcile sim`
// is then accepted, clears it, and the venue's clean answer makes the link trade again (a new
// order is accepted), counted.
#[test]
fn an_operator_reconcile_trades_a_read_only_link_again_once_clean() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("admin.sock");
    let mut d = Drill::start(1024);
    d.running
        .as_mut()
        .unwrap()
        .serve_admin(&socket)
        .unwrap()
        .expect("the admin socket");
    let ctl = |words: &[&str]| {
        let out = std::process::Command::new(common::peers::KEEL)
            .arg("ctl")
            .arg("--socket")
            .arg(&socket)
            .args(words)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let a = d.resting(0);
    let (code, answer) = ctl(&["reconcile", "sim"]);
    assert_eq!(code, Some(1), "{answer}");
    assert!(answer.contains("is SYNCED, not READ-ONLY"), "{answer}");
    for bad in [
        &["reconcile", "nope"][..],
        &["reconcile"],
        &["reconcile", "sim", "now"],
    ] {
        let (code, answer) = ctl(bad);
        assert_eq!(code, Some(1), "{bad:?}: {answer}");
        assert!(answer.starts_with("error: "), "{bad:?}: {answer}");
    }
    d.control.ok("lie unknown-fill");
    wait_until("the link to leave SYNCED", || {
        !d.running().venue_synced(VenueId(0))
    });
    let o = d.order(2, Side::Buy, TimeInForce::Day);
    let refused = d.expect(Some(Command::New(o)), o.id, "a refusal", |k| {
        matches!(k, EventKind::Refused { .. })
    });
    assert_eq!(
        refused,
        EventKind::Refused {
            reason: RefusalReason::LinkReadOnly
        }
    );
    let (code, answer) = ctl(&["reconcile", "sim"]);
    assert_eq!(code, Some(0), "{answer}");
    assert!(
        answer.starts_with("ok: reconcile of venue sim requested"),
        "{answer}"
    );
    let b = d.resting_when_trading(1);
    d.cancel(a);
    d.cancel(b);
    let (report, mut control, _venue) = d.stop();
    let link = &report.links[0];
    assert_eq!(link.session.operator_reconciles, 1, "{:?}", link.session);
    assert!(link.session.read_only_entries >= 1, "{:?}", link.session);
    assert!(link.link.contradictions_cleared >= 1, "{:?}", link.link);
    assert_eq!(
        link.client.last_contradiction,
        Some(Contradiction::UnknownOrder)
    );
    assert!(report.open_orders.is_empty(), "{:?}", report.open_orders);
    assert_eq!(control.stats()["duplicate_ids"], 0);
}

impl Drill {
    /// Another participant sells 3 of AAPL at 100 into keel's resting buy `a`; waits for the
    /// fill to reach the strategy.
    fn filled_by(&mut self, other: &mut Participant, user_ref: u32, a: ClientOrderId) {
        other.enter(user_ref, b'S', b"AAPL    ");
        self.expect(None, a, "the fill", |k| {
            matches!(k, EventKind::Filled { qty: 3, .. })
        });
    }

    /// New orders until one is refused `LinkReadOnly` (each refused `NotSynced` while the link
    /// is down is tried again); none may be accepted. Bounded by [`LIMIT`].
    fn refused_read_only(&mut self, symbol: u16) {
        let deadline = Instant::now() + LIMIT;
        loop {
            assert!(Instant::now() < deadline, "never READ-ONLY");
            let o = self.order(symbol, Side::Buy, TimeInForce::Day);
            let answer = self.expect(Some(Command::New(o)), o.id, "an answer", |k| {
                matches!(k, EventKind::Accepted | EventKind::Refused { .. })
            });
            match answer {
                EventKind::Refused {
                    reason: RefusalReason::LinkReadOnly,
                } => return,
                EventKind::Refused {
                    reason: RefusalReason::NotSynced,
                } => std::thread::sleep(Duration::from_millis(5)),
                other => panic!("a new order must not leave: {other:?}"),
            }
        }
    }
}

// Goal (issue 23, point 1): reconciliation compares keel's position with the venue's position
// answer item by item. A real fill (another participant's sell) books 3 bought on both sides;
// then the venue books a billion more it never reports (`lie position`), and drops the link. The
// reconciliation after the reconnect finds the difference: the link goes READ-ONLY (new orders
// refused, cancels flow), the mismatch is counted with both figures.
#[test]
fn a_position_the_venue_booked_unreported_makes_the_link_read_only() {
    let mut d = Drill::start(1024);
    let mut other = Participant::login(&d.venue.entry, "other");
    let a = d.resting(0);
    d.filled_by(&mut other, 1, a);
    let b = d.resting(1);
    // The worst legal figure: a billion shares.
    let lied = d.control.ok("lie position 1000000000");
    assert!(lied.starts_with("ok lie position 1000000000 "), "{lied}");
    let before = d.control.stats();
    d.control.ok("drop");
    d.refused_read_only(2);
    d.cancel(b);
    let after = d.control.stats();
    assert_eq!(
        after["accepted"], before["accepted"],
        "no new order reached the venue after the mismatch"
    );
    let (report, _control, _venue) = d.stop();
    let client = &report.links[0].client;
    assert!(client.position_mismatches >= 1, "{client:?}");
    let m = client.last_position_mismatch.expect("both figures kept");
    assert_eq!(&m.symbol, b"AAPL    ");
    assert_eq!((m.keel.bought, m.keel.sold), (3, 0));
    assert_eq!((m.venue.bought, m.venue.sold), (1_000_000_003, 0));
    assert!(client.last_reconciliation.position_mismatches >= 1);
    assert!(report.links[0].session.read_only_entries >= 1);
}

// Goal (issue 23, point 1): keel's position is journaled and restored. Fills on both sides
// (a buy filled by another participant's sell, a sell filled by its buy), then a restart on
// the journal: the restarted engine's reconciliation compares the restored position with the
// venue's and comes back clean (SYNCED: without the restore it would find 0 against 3/3 and
// stay READ-ONLY), and it trades.
#[test]
fn a_restart_restores_positions_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Drill::start(1024);
    d.text += &format!("[journal]\ndir = \"{}\"\n", dir.path().join("j").display());
    d.restart();
    let mut other = Participant::login(&d.venue.entry, "other");
    let a = d.resting(0);
    d.filled_by(&mut other, 1, a);
    let s = d.order(0, Side::Sell, TimeInForce::Day);
    d.expect(Some(Command::New(s)), s.id, "Accepted", |k| {
        matches!(k, EventKind::Accepted)
    });
    other.enter(2, b'B', b"AAPL    ");
    d.expect(None, s.id, "the sell's fill", |k| {
        matches!(k, EventKind::Filled { qty: 3, .. })
    });
    let first = d.restart(); // waits for SYNCED
    assert_eq!(first.links[0].client.position_mismatches, 0);
    let c = d.resting(1);
    d.cancel(c);
    let (report, _control, _venue) = d.stop();
    let client = &report.links[0].client;
    assert_eq!(client.position_mismatches, 0, "{client:?}");
    assert_eq!(client.positions_adopted, 0, "compared, never adopted");
    assert!(client.reconciliations >= 1);
}

// Goal (issue 23, point 1): a journal that begins after the account traded (an engine started
// on an empty journal mid-day) takes the venue's position at its first reconciliation and
// journals it (record kind 10, through the dispatcher), so the next restart compares against
// that figure: clean, SYNCED, nothing adopted again. (Without the journaled figure the third
// engine would find 0 against the venue's 3 and stay READ-ONLY.)
#[test]
fn a_journal_begun_mid_day_adopts_the_venue_position_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Drill::start(1024); // no journal yet
    let mut other = Participant::login(&d.venue.entry, "other");
    let a = d.resting(0);
    d.filled_by(&mut other, 1, a);
    d.text += &format!("[journal]\ndir = \"{}\"\n", dir.path().join("j").display());
    d.restart(); // an empty journal: the venue's figure is taken
    let second = d.restart(); // a journal with that figure: compared
    assert_eq!(second.links[0].client.positions_adopted, 1);
    assert_eq!(second.links[0].client.position_mismatches, 0);
    let b = d.resting(1);
    d.cancel(b);
    let (report, _control, _venue) = d.stop();
    let client = &report.links[0].client;
    assert_eq!(client.positions_adopted, 0, "{client:?}");
    assert_eq!(client.position_mismatches, 0, "{client:?}");
}
