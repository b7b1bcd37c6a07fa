//! Exchange core tests: the answers an account's stream receives for each kind of message.

use super::*;
use keel::proto::ouch::{decode_outbound, ReplaceOrder};

fn fields(side: u8, qty: u32, price: i64, tif: u8, cl: &str) -> OrderFields {
    OrderFields {
        side,
        qty,
        symbol: *b"AAPL    ",
        price,
        tif,
        display: b'Y',
        capacity: b'A',
        ise: b'N',
        cross_type: b'N',
        cl_ord_id: keel::proto::soupbin::alpha(cl),
    }
}

fn enter(ex: &mut Exchange, account: u32, user_ref: u32, f: OrderFields) {
    ex.handle(
        1,
        account,
        &Inbound::EnterOrder(EnterOrder {
            user_ref,
            order: f,
            appendages: &[],
        }),
    );
}

fn stream(ex: &Exchange, account: u32) -> Vec<Outbound<'_>> {
    ex.account(account)
        .messages()
        .map(|m| decode_outbound(m, Dialect::SPEC).expect("venue emits valid OUCH"))
        .collect()
}

fn login(ex: &mut Exchange, user: &str) -> u32 {
    let pass = keel::proto::soupbin::alpha("keel");
    ex.login(keel::proto::soupbin::alpha(user), &pass, &[b' '; 10], 1)
        .unwrap()
        .0
}

#[test]
fn accept_then_fill_against_synthetic_liquidity() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 100, 10_0000, b'0', "A1"));
    ex.synthetic(2, 0, Side::Sell, 9_9000, 60, true);
    ex.synthetic(3, 0, Side::Sell, 10_0000, 60, true);
    let s = stream(&ex, a);
    assert!(matches!(s[0], Outbound::Accepted(o) if o.user_ref == 1 && o.state == b'L'));
    // A sell at or below the resting bid trades at the resting buyer's price.
    assert!(matches!(
        s[1],
        Outbound::Executed {
            user_ref: 1,
            qty: 60,
            price: 10_0000,
            liquidity_flag: b'A',
            ..
        }
    ));
    assert!(matches!(
        s[2],
        Outbound::Executed {
            user_ref: 1,
            qty: 40,
            price: 10_0000,
            ..
        }
    ));
    assert_eq!(ex.order_of(a, 1).unwrap().open_qty, 0);
    assert_eq!(
        ex.book(0).best(),
        (None, Some(10_0000)),
        "20 shares of the second seller rest"
    );
}

#[test]
fn cancel_and_cancel_reject() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'S', 100, 10_0000, b'0', "A1"));
    ex.handle(
        2,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 30,
        },
    );
    ex.handle(
        3,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 0,
        },
    );
    ex.handle(
        4,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 0,
        },
    );
    ex.handle(
        5,
        a,
        &Inbound::CancelOrder {
            user_ref: 99,
            qty: 0,
        },
    );
    let s = stream(&ex, a);
    assert!(matches!(
        s[1],
        Outbound::Canceled {
            user_ref: 1,
            qty: 70,
            reason: b'U',
            ..
        }
    ));
    assert!(matches!(
        s[2],
        Outbound::Canceled {
            user_ref: 1,
            qty: 30,
            ..
        }
    ));
    assert!(
        matches!(s[3], Outbound::CancelReject { user_ref: 1, .. }),
        "already closed"
    );
    assert!(
        matches!(s[4], Outbound::CancelReject { user_ref: 99, .. }),
        "unknown"
    );
    assert!(ex.book(0).is_empty());
}

#[test]
fn duplicate_ids_are_rejected_unless_switched_off() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 5, fields(b'B', 1, 1_0000, b'0', "X"));
    enter(&mut ex, a, 5, fields(b'B', 1, 1_0000, b'0', "Y"));
    enter(&mut ex, a, 6, fields(b'B', 1, 1_0000, b'0', "X"));
    let s = stream(&ex, a);
    assert!(
        matches!(
            s[1],
            Outbound::Rejected {
                user_ref: 5,
                reason: 4,
                ..
            }
        ),
        "UserRefNum not increasing"
    );
    assert!(
        matches!(
            s[2],
            Outbound::Rejected {
                user_ref: 6,
                reason: 4,
                ..
            }
        ),
        "ClOrdID reused"
    );
    let mut ex = Exchange::new(ExchangeConfig {
        reject_duplicate_cl_ord_id: false,
        ..ExchangeConfig::default()
    });
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 5, fields(b'B', 1, 1_0000, b'0', "X"));
    enter(&mut ex, a, 6, fields(b'B', 1, 1_0000, b'0', "X"));
    assert!(matches!(stream(&ex, a)[1], Outbound::Accepted(o) if o.user_ref == 6));
}

#[test]
fn invalid_orders_are_rejected_with_their_code() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 0, 1_0000, b'0', "A"));
    enter(&mut ex, a, 2, fields(b'B', 1, 0, b'0', "B"));
    let mut f = fields(b'B', 1, 1_0000, b'0', "C");
    f.symbol = *b"ZZZZ    ";
    enter(&mut ex, a, 3, f);
    let codes: Vec<u16> = stream(&ex, a)
        .iter()
        .map(|m| match m {
            Outbound::Rejected { reason, .. } => *reason,
            _ => 0,
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            RejectCode::InvalidQuantity as u16,
            RejectCode::InvalidPrice as u16,
            RejectCode::UnknownSymbol as u16
        ]
    );
}

#[test]
fn ioc_remainder_is_canceled() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    ex.synthetic(0, 0, Side::Sell, 10_0000, 30, true);
    enter(&mut ex, a, 1, fields(b'B', 100, 10_0000, b'3', "I"));
    let s = stream(&ex, a);
    assert!(matches!(s[1], Outbound::Executed { qty: 30, .. }));
    assert!(matches!(
        s[2],
        Outbound::Canceled {
            qty: 70,
            reason: b'I',
            ..
        }
    ));
    assert!(ex.book(0).is_empty());
}

#[test]
fn replace_swaps_orders_and_loses_priority() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 100, 10_0000, b'0', "R1"));
    let r = ReplaceOrder {
        orig_user_ref: 1,
        user_ref: 2,
        qty: 50,
        price: 10_1000,
        tif: b'0',
        display: b'Y',
        ise: b'N',
        cl_ord_id: keel::proto::soupbin::alpha("R2"),
        appendages: &[],
    };
    ex.handle(2, a, &Inbound::ReplaceOrder(r));
    ex.handle(
        3,
        a,
        &Inbound::ReplaceOrder(ReplaceOrder {
            orig_user_ref: 1,
            user_ref: 3,
            cl_ord_id: keel::proto::soupbin::alpha("R3"),
            ..r
        }),
    );
    let s = stream(&ex, a);
    assert!(
        matches!(s[1], Outbound::Replaced(o) if o.orig_user_ref == 1 && o.user_ref == 2 && o.order.qty == 50)
    );
    assert!(
        matches!(
            s[2],
            Outbound::Rejected {
                user_ref: 3,
                reason: 7,
                ..
            }
        ),
        "the original is gone"
    );
    assert_eq!(ex.book(0).best(), (Some(10_1000), None));
    assert_eq!(ex.book(0).len(), 1);
}

#[test]
fn server_side_rate_limit() {
    let mut ex = Exchange::new(ExchangeConfig {
        rate_limit_messages: 3,
        rate_window_ns: 1_000,
        ..ExchangeConfig::default()
    });
    let a = login(&mut ex, "alice");
    for i in 1..=5 {
        enter(
            &mut ex,
            a,
            i,
            fields(b'B', 1, 1_0000, b'0', &format!("T{i}")),
        );
    }
    let throttled = stream(&ex, a)
        .iter()
        .filter(|m| matches!(m, Outbound::Rejected { reason: 5, .. }))
        .count();
    assert_eq!(throttled, 2);
    assert_eq!(ex.account(a).throttled, 2);
}

#[test]
fn status_query_and_login_replay_position() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 100, 10_0000, b'0', "S1"));
    ex.handle(2, a, &Inbound::OrderStatusQuery { user_ref: 1 });
    ex.handle(3, a, &Inbound::OrderStatusQuery { user_ref: 42 });
    let s = stream(&ex, a);
    assert!(matches!(s[1], Outbound::OrderStatus(o) if o.state == b'L' && o.open_qty == 100));
    assert!(matches!(s[2], Outbound::OrderStatus(o) if o.state == b'U'));
    let pass = keel::proto::soupbin::alpha("keel");
    let user = keel::proto::soupbin::alpha("alice");
    assert_eq!(
        ex.login(user, &pass, &[b' '; 10], 2),
        Ok((a, 2)),
        "resume at 2: replay from there"
    );
    assert_eq!(
        ex.login(user, &pass, &[b' '; 10], 0),
        Ok((a, 4)),
        "0: from now on"
    );
    assert_eq!(
        ex.login(user, &pass, &[b' '; 10], 99),
        Ok((a, 4)),
        "past the end: clamped"
    );
    assert_eq!(
        ex.login(user, &keel::proto::soupbin::alpha("nope"), &[b' '; 10], 1),
        Err(LoginRejectReason::NotAuthorized)
    );
    assert_eq!(
        ex.login(user, &pass, b"OTHERSESSN", 1),
        Err(LoginRejectReason::SessionNotAvailable)
    );
}

#[test]
fn reject_burst_fault() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    ex.reject_burst_remaining = 2;
    for i in 1..=3 {
        enter(
            &mut ex,
            a,
            i,
            fields(b'B', 1, 1_0000, b'0', &format!("B{i}")),
        );
    }
    let s = stream(&ex, a);
    assert!(matches!(s[0], Outbound::Rejected { reason: 6, .. }));
    assert!(matches!(s[1], Outbound::Rejected { reason: 6, .. }));
    assert!(matches!(s[2], Outbound::Accepted(_)));
}

// Goal: the reconciliation answer lists every open order, every position with activity, and
// ends with the counts and the sequence number it is consistent with.
#[test]
fn reconcile_reports_open_orders_and_positions() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 100, 10_0000, b'0', "O1"));
    enter(&mut ex, a, 2, fields(b'S', 30, 20_0000, b'0', "O2"));
    enter(&mut ex, a, 3, fields(b'B', 10, 10_0000, b'0', "O3"));
    ex.synthetic(2, 0, Side::Sell, 10_0000, 60, true); // fills 60 of order 1
    ex.handle(
        3,
        a,
        &Inbound::CancelOrder {
            user_ref: 3,
            qty: 0,
        },
    );
    let before = ex.account(a).stream_len();
    ex.handle(4, a, &Inbound::ReconcileQuery { token: 9 });
    let s = stream(&ex, a);
    let answer = &s[before as usize..];
    assert!(
        matches!(answer[0], Outbound::OrderStatus(o) if o.user_ref == 1 && o.open_qty == 40 && o.executed_qty == 60)
    );
    assert!(matches!(answer[1], Outbound::OrderStatus(o) if o.user_ref == 2 && o.open_qty == 30));
    assert!(
        matches!(answer[2], Outbound::Position { bought_qty: 60, sold_qty: 0, symbol, .. } if &symbol == b"AAPL    ")
    );
    assert_eq!(
        answer[3],
        Outbound::ReconcileEnd {
            timestamp: 4,
            token: 9,
            open_orders: 2,
            positions: 1,
            as_of_sequence: before
        }
    );
    assert_eq!(answer.len(), 4);
}

// Goal: races at the venue end the way a real venue's would: a cancel after a partial fill
// takes only the remainder; a cancel after the last fill is refused; the last fill and the
// cancel that closes an order are marked final.
#[test]
fn fill_and_cancel_races() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 100, 10_0000, b'0', "R1"));
    ex.synthetic(1, 0, Side::Sell, 10_0000, 70, true);
    ex.handle(
        2,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 0,
        },
    );
    enter(&mut ex, a, 2, fields(b'B', 50, 10_0000, b'0', "R2"));
    ex.synthetic(3, 0, Side::Sell, 10_0000, 50, true);
    ex.handle(
        4,
        a,
        &Inbound::CancelOrder {
            user_ref: 2,
            qty: 0,
        },
    );
    let s = stream(&ex, a);
    assert!(matches!(
        s[1],
        Outbound::Executed {
            user_ref: 1,
            qty: 70,
            ..
        }
    ));
    assert!(matches!(
        s[2],
        Outbound::Canceled {
            user_ref: 1,
            qty: 30,
            ..
        }
    ));
    assert!(matches!(
        s[4],
        Outbound::Executed {
            user_ref: 2,
            qty: 50,
            ..
        }
    ));
    assert!(matches!(s[5], Outbound::CancelReject { user_ref: 2, .. }));
    let finals: Vec<bool> = (1..=6).map(|seq| ex.account(a).is_final(seq)).collect();
    assert_eq!(finals, vec![false, false, true, false, true, false]);
}

/// The reject code of every Order Rejected in the stream, by UserRefNum (0: not a reject).
fn rejects(ex: &Exchange, account: u32) -> Vec<(u32, u16)> {
    stream(ex, account)
        .iter()
        .filter_map(|m| match m {
            Outbound::Rejected {
                user_ref, reason, ..
            } => Some((*user_ref, *reason)),
            _ => None,
        })
        .collect()
}

// Goal: the venue's price collar (issue 10, Build 2): prices <= 0, above the maximum, or more
// than the band from the symbol's reference (the configured start, then the last trade) are
// rejected InvalidPrice, for new orders and replacements, at the worst values; the band
// follows trades; with the band off only positivity and the maximum hold.
#[test]
fn price_collar_rejects_absurd_prices() {
    let price_max = 1_000 * 10_000;
    let mut ex = Exchange::new(ExchangeConfig {
        price_band_pct: 10,
        price_max,
        reference_price: Some(100_0000),
        ..ExchangeConfig::default()
    });
    let a = login(&mut ex, "alice");
    let bad = [0, -1, i64::MIN, i64::MAX, price_max + 1, 89_9999, 110_0001];
    for (i, price) in bad.iter().enumerate() {
        enter(
            &mut ex,
            a,
            i as u32 + 1,
            fields(b'B', 1, *price, b'0', &format!("B{i}")),
        );
    }
    let code = RejectCode::InvalidPrice as u16;
    let want: Vec<(u32, u16)> = (1..=bad.len() as u32).map(|u| (u, code)).collect();
    assert_eq!(rejects(&ex, a), want);
    assert_eq!(ex.stats().price_rejects, bad.len() as u64);
    assert_eq!(ex.stats().accepted, 0);
    // The band's edges are inside.
    enter(&mut ex, a, 20, fields(b'B', 1, 90_0000, b'0', "E1"));
    enter(&mut ex, a, 21, fields(b'S', 1, 110_0000, b'0', "E2"));
    assert_eq!(ex.stats().accepted, 2);
    // A trade at 110 moves the reference: 120 is now inside, 90 outside.
    ex.synthetic(2, 0, Side::Buy, 110_0000, 1, false);
    assert_eq!(ex.reference_price(0), Some(110_0000));
    enter(&mut ex, a, 22, fields(b'S', 1, 120_0000, b'0', "E3"));
    enter(&mut ex, a, 23, fields(b'B', 1, 90_0000, b'0', "E4"));
    assert_eq!(ex.stats().accepted, 3);
    assert_eq!(rejects(&ex, a).last(), Some(&(23, code)));
    // A replacement is held to the collar too, and a refused one leaves the order alone.
    let replace = |user_ref, price| {
        Inbound::ReplaceOrder(ReplaceOrder {
            orig_user_ref: 22,
            user_ref,
            qty: 1,
            price,
            tif: b'0',
            display: b'Y',
            ise: b'N',
            cl_ord_id: keel::proto::soupbin::alpha("R1"),
            appendages: &[],
        })
    };
    ex.handle(3, a, &replace(24, 1_000 * 10_000));
    assert_eq!(rejects(&ex, a).last(), Some(&(24, code)));
    assert!(ex.order_of(a, 22).is_some_and(|o| o.open_qty == 1));
    // Other symbols keep their own reference.
    let mut f = fields(b'B', 1, 95_0000, b'0', "M1");
    f.symbol = *b"MSFT    ";
    enter(&mut ex, a, 25, f);
    assert_eq!(ex.stats().accepted, 4);

    // Band off: only positivity and the maximum.
    let mut ex = Exchange::new(ExchangeConfig {
        price_max,
        ..ExchangeConfig::default()
    });
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 1, 1, b'0', "O1"));
    enter(&mut ex, a, 2, fields(b'B', 1, price_max, b'0', "O2"));
    enter(&mut ex, a, 3, fields(b'B', 1, price_max + 1, b'0', "O3"));
    assert_eq!(ex.stats().accepted, 2);
    assert_eq!(rejects(&ex, a), vec![(3, code)]);
}

// Goal: each lie of the hostile venue reaches every account's stream as an Order Executed that
// contradicts the account's orders (never entered; one share past the newest open order's
// quantity; one share of the newest closed order; zero shares; through the limit), without
// touching the book; a lie with nothing to lie about tells nothing.
#[test]
fn lies_contradict_the_account_orders() {
    let mut ex = Exchange::new(ExchangeConfig::default());
    let a = login(&mut ex, "alice");
    assert!(ex.lie(1, Lie::Overfill).is_empty(), "no open order yet");
    assert!(
        ex.lie(1, Lie::FillAfterClose).is_empty(),
        "no closed order yet"
    );
    enter(&mut ex, a, 1, fields(b'B', 3, 10_0000, b'0', "A1"));
    enter(&mut ex, a, 2, fields(b'B', 5, 10_0000, b'0', "A2"));
    ex.handle(
        2,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 0,
        },
    );
    assert_eq!(ex.lie(3, Lie::UnknownFill), vec![(a, LIE_UNKNOWN_USER_REF)]);
    assert_eq!(ex.lie(3, Lie::Overfill), vec![(a, 2)]);
    assert_eq!(ex.lie(3, Lie::FillAfterClose), vec![(a, 1)]);
    assert_eq!(ex.lie(3, Lie::ZeroFill), vec![(a, 2)]);
    assert_eq!(ex.lie(3, Lie::OffLimitFill), vec![(a, 2)]);
    let fills: Vec<(u32, u32, i64)> = stream(&ex, a)
        .iter()
        .filter_map(|m| match m {
            Outbound::Executed {
                user_ref,
                qty,
                price,
                ..
            } => Some((*user_ref, *qty, *price)),
            _ => None,
        })
        .collect();
    assert_eq!(
        fills,
        vec![
            (LIE_UNKNOWN_USER_REF, 1, 1_0000),
            (2, 6, 10_0000),
            (1, 1, 10_0000),
            (2, 0, 10_0000),
            (2, 1, 100_0000) // a buy at 10.0000 filled at ten times its limit
        ]
    );
    assert_eq!(ex.stats().lies, 5);
    assert_eq!(ex.stats().matches, 0, "the book is untouched");
    assert!(ex.order_of(a, 2).is_some_and(|o| o.open_qty == 5));
}

// Goal: an account stream at its bound drops what it cannot keep, and says so: the messages
// past `stream_messages_max` are counted, never silently lost.
#[test]
fn a_full_stream_counts_what_it_drops() {
    let mut ex = Exchange::new(ExchangeConfig {
        stream_messages_max: 2,
        ..ExchangeConfig::default()
    });
    let a = login(&mut ex, "keel");
    for user_ref in 1..=4 {
        enter(
            &mut ex,
            a,
            user_ref,
            fields(b'B', 10, 100_000, b'0', &format!("c{user_ref}")),
        );
    }
    assert_eq!(stream(&ex, a).len(), 2);
    assert_eq!(ex.stats().accepted, 4);
    assert_eq!(ex.stats().stream_full_drops, 2);
}

// Goal: a sink venue accepts and cancels like any venue but never books or matches, so a
// crossing pair of orders stays open on both sides and no trade reaches market data.
#[test]
fn a_sink_accepts_and_cancels_without_matching() {
    let mut ex = Exchange::new(ExchangeConfig {
        sink: true,
        ..ExchangeConfig::default()
    });
    let a = login(&mut ex, "alice");
    enter(&mut ex, a, 1, fields(b'B', 100, 10_0000, b'0', "A1"));
    enter(&mut ex, a, 2, fields(b'S', 100, 9_0000, b'0', "A2"));
    ex.synthetic(3, 0, Side::Sell, 9_0000, 60, true);
    assert_eq!(ex.order_of(a, 1).unwrap().open_qty, 100, "nothing traded");
    assert_eq!(ex.order_of(a, 2).unwrap().open_qty, 100);
    ex.handle(
        4,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 30,
        },
    );
    ex.handle(
        5,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 0,
        },
    );
    ex.handle(
        6,
        a,
        &Inbound::CancelOrder {
            user_ref: 1,
            qty: 0,
        },
    );
    // An order that was never valid is still rejected: sink mode keeps validation.
    enter(&mut ex, a, 7, fields(b'B', 0, 10_0000, b'0', "A7"));
    let s = stream(&ex, a);
    assert!(matches!(s[0], Outbound::Accepted(o) if o.user_ref == 1));
    assert!(matches!(s[1], Outbound::Accepted(o) if o.user_ref == 2));
    assert!(matches!(
        s[2],
        Outbound::Canceled {
            user_ref: 1,
            qty: 70,
            ..
        }
    ));
    assert!(matches!(
        s[3],
        Outbound::Canceled {
            user_ref: 1,
            qty: 30,
            ..
        }
    ));
    assert!(matches!(s[4], Outbound::CancelReject { user_ref: 1, .. }));
    assert!(matches!(s[5], Outbound::Rejected { user_ref: 7, .. }));
    assert_eq!(s.len(), 6, "no execution reached the account");
    assert_eq!(ex.stats().accepted, 2);
    assert!(
        ex.book(0).best().0.is_none(),
        "the account's bid never booked"
    );
}
