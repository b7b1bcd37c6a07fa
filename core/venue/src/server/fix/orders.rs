//! The FIX endpoint's application side: NewOrderSingle, OrderCancelRequest,
//! OrderCancelReplaceRequest, OrderStatusRequest and OrderMassStatusRequest become the
//! exchange's OUCH messages (through the venue's latency fault); the account's stream becomes
//! ExecutionReports and OrderCancelRejects, in its order, with CumQty, LeavesQty and AvgPx
//! kept per order chain as FIX counts them.

use super::*;
use keel::proto::ouch::RejectCode;

/// Orders one session may enter in a day; past it a NewOrderSingle is rejected (101).
pub const ORDERS_PER_SESSION_MAX: usize = 1 << 22;

/// Queries (status, mass status) one session may have unanswered at once.
pub const QUERIES_MAX: usize = 4_096;

/// The OrdRejReason (103) the venue writes for an exchange reject code: the standard codes
/// where FIX has one, keel's 100 (throttled) and 101 (system failure) where it has none.
pub fn ord_rej_reason(code: u16) -> u64 {
    match RejectCode::from_wire(code) {
        Some(RejectCode::InvalidQuantity) => 13,
        Some(RejectCode::UnknownSymbol) => 1,
        Some(RejectCode::DuplicateId) => 6,
        Some(RejectCode::Throttled) => 100,
        Some(RejectCode::SystemUnavailable) => 101,
        Some(RejectCode::UnknownOrder) => 5,
        Some(RejectCode::InvalidPrice) | None => 99,
    }
}

/// A reject without the exchange: the order never reached it.
struct Refused {
    code: u64,
    text: &'static str,
}

/// The message's ClOrdID (11): 1 to 32 printable characters.
fn cl_ord_id(msg: &Msg<'_>) -> Result<Text, Refusal> {
    Text::new(msg.require(11).map_err(refusal)?).ok_or((
        11,
        5,
        "ClOrdID must be 1 to 32 printable characters",
    ))
}

/// FIX Side (54) to OUCH's.
fn ouch_side(side: &[u8]) -> Option<u8> {
    match side {
        b"1" => Some(b'B'),
        b"2" => Some(b'S'),
        b"5" => Some(b'T'),
        b"6" => Some(b'E'),
        _ => None,
    }
}

/// OrdStatus (39) of an order as its session knows it.
fn ord_status(o: &FixOrder) -> u8 {
    if o.closed {
        if o.cum >= o.qty {
            b'2'
        } else {
            b'4'
        }
    } else if o.cum > 0 {
        b'1'
    } else {
        b'0'
    }
}

/// A symbol of 1 to 8 printable characters, space padded (anything else names no symbol).
fn padded_symbol(name: &[u8]) -> Option<[u8; SYMBOL_NAME_LEN]> {
    if name.is_empty() || name.len() > SYMBOL_NAME_LEN || !name.iter().all(u8::is_ascii_graphic) {
        return None;
    }
    let mut s = [b' '; SYMBOL_NAME_LEN];
    s[..name.len()].copy_from_slice(name);
    Some(s)
}

fn symbol_text(s: &[u8; SYMBOL_NAME_LEN]) -> &[u8] {
    let end = s.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &s[..end]
}

/// The exchange's ClOrdID for a FIX order: its UserRefNum, space padded (FIX's own ClOrdID
/// stays with the FIX endpoint, which enforces its uniqueness).
fn ouch_cl_ord_id(user_ref: u32) -> keel::proto::ouch::ClOrdId {
    let mut id = [b' '; 14];
    codec::write_uint(&mut id, u64::from(user_ref));
    id
}

impl FixEndpoint {
    /// Hands one OUCH message to the exchange, after the venue's latency fault if any.
    fn to_exchange<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        s: usize,
        msg: &Inbound<'_>,
    ) {
        let mut bytes = [0u8; 256];
        let dialect = srv.config.exchange.dialect;
        // Checked as the OUCH sessions' messages are on arrival: the exchange's side decodes
        // it again when it is due, and must never meet bytes it refuses.
        let valid = encode_inbound(&mut bytes, msg, dialect)
            .ok()
            .filter(|&n| decode_inbound(&bytes[..n], dialect).is_ok());
        let Some(n) = valid else {
            self.stats.malformed += 1;
            return;
        };
        let account = self.sessions[s].account;
        srv.schedule(now_ns, conn, account, &bytes[..n]);
    }

    /// A fresh UserRefNum for the session.
    fn user_ref(&mut self, s: usize) -> Option<u32> {
        let session = &mut self.sessions[s];
        let r = session.next_user_ref;
        if r == u32::MAX || session.orders.len() >= ORDERS_PER_SESSION_MAX {
            return None;
        }
        session.next_user_ref += 1;
        Some(r)
    }

    pub(super) fn new_order<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        s: usize,
        msg: &Msg<'_>,
    ) -> Result<(), Refusal> {
        let id = cl_ord_id(msg)?;
        let side_raw = msg.require(54).map_err(refusal)?;
        let side = ouch_side(side_raw).ok_or((54, 5, "Side must be 1, 2, 5 or 6"))?;
        let qty = msg.require_uint(38).map_err(refusal)?;
        let ord_type = msg.require(40).map_err(refusal)?;
        let symbol_raw = msg.require(55).map_err(refusal)?;
        let price = msg
            .decimal(44, keel::order::Price::SCALE)
            .map_err(refusal)?;
        let mut order = FixOrder {
            id,
            orig: None,
            cancel_id: None,
            symbol: padded_symbol(symbol_raw).unwrap_or([b'?'; SYMBOL_NAME_LEN]),
            side: side_raw[0],
            price: price.unwrap_or(0),
            qty,
            cum: 0,
            notional: 0,
            leaves: 0,
            order_id: 0,
            closed: true,
            base: 0,
        };
        let tif = match msg.get(59) {
            None | Some(b"0") => Some(b'0'),
            Some(b"3") => Some(b'3'),
            Some(_) => None,
        };
        if msg.get(43) == Some(b"Y") && self.sessions[s].by_id.contains_key(&id) {
            // Sent again as a possible duplicate, and booked already: never booked twice.
            self.stats.poss_dup_orders_ignored += 1;
            return Ok(());
        }
        let refused = if self.sessions[s].by_id.contains_key(&id) {
            Some(Refused {
                code: 6,
                text: "duplicate ClOrdID",
            })
        } else if ord_type != b"2" {
            Some(Refused {
                code: 11,
                text: "only limit orders (OrdType 2)",
            })
        } else if tif.is_none() {
            Some(Refused {
                code: 11,
                text: "TimeInForce must be 0 (day) or 3 (IOC)",
            })
        } else if padded_symbol(symbol_raw).is_none() {
            Some(Refused {
                code: 1,
                text: "unknown symbol",
            })
        } else if qty > u64::from(u32::MAX) {
            Some(Refused {
                code: 13,
                text: "incorrect quantity",
            })
        } else {
            None
        };
        if let Some(r) = refused {
            self.refuse_order(srv, now_ns, s, &order, r);
            return Ok(());
        }
        let Some(price) = price else {
            return Err((44, 1, "Price is required for a limit order"));
        };
        let Some(user_ref) = self.user_ref(s) else {
            let r = Refused {
                code: 101,
                text: "the venue's order table for this session is full",
            };
            self.refuse_order(srv, now_ns, s, &order, r);
            return Ok(());
        };
        order.closed = false;
        order.leaves = qty;
        let session = &mut self.sessions[s];
        session.orders.insert(user_ref, order);
        session.by_id.insert(id, user_ref);
        let enter = Inbound::EnterOrder(EnterOrder {
            user_ref,
            order: OrderFields {
                side,
                qty: qty as u32,
                symbol: order.symbol,
                price,
                tif: tif.expect("checked"),
                display: b'Y',
                capacity: b'A',
                ise: b'N',
                cross_type: b'N',
                cl_ord_id: ouch_cl_ord_id(user_ref),
            },
            appendages: &[],
        });
        self.to_exchange(srv, now_ns, conn, s, &enter);
        Ok(())
    }

    fn refuse_order<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        order: &FixOrder,
        r: Refused,
    ) {
        let order = FixOrder {
            leaves: 0,
            closed: true,
            ..*order
        };
        self.report(srv, now_ns, s, &order, b'8', b'8', |f| {
            f.uint(103, r.code).bytes(58, r.text.as_bytes());
        });
    }

    pub(super) fn cancel<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        s: usize,
        msg: &Msg<'_>,
    ) -> Result<(), Refusal> {
        let orig = msg.require(41).map_err(refusal)?;
        let id = cl_ord_id(msg)?;
        let known = Text::new(orig).and_then(|o| self.sessions[s].by_id.get(&o).copied());
        let Some(user_ref) = known else {
            self.cancel_reject(srv, now_ns, s, id, orig, b'8', b'1', 1);
            return Ok(());
        };
        let o = self.sessions[s].orders.get_mut(&user_ref).expect("indexed");
        o.cancel_id = Some(id);
        self.to_exchange(
            srv,
            now_ns,
            conn,
            s,
            &Inbound::CancelOrder { user_ref, qty: 0 },
        );
        Ok(())
    }

    pub(super) fn replace<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        s: usize,
        msg: &Msg<'_>,
    ) -> Result<(), Refusal> {
        let orig = msg.require(41).map_err(refusal)?;
        let id = cl_ord_id(msg)?;
        if msg.get(43) == Some(b"Y") && self.sessions[s].by_id.contains_key(&id) {
            // A replace sent again and applied already: never booked twice.
            self.stats.poss_dup_orders_ignored += 1;
            return Ok(());
        }
        let total = msg.require_uint(38).map_err(refusal)?;
        let price = msg
            .decimal(44, keel::order::Price::SCALE)
            .map_err(refusal)?
            .ok_or((44, 1, "Price is required for a limit order"))?;
        let tif = match msg.get(59) {
            None | Some(b"0") => b'0',
            Some(b"3") => b'3',
            Some(_) => return Err((59, 5, "TimeInForce must be 0 (day) or 3 (IOC)")),
        };
        let known = Text::new(orig).and_then(|o| self.sessions[s].by_id.get(&o).copied());
        let Some(orig_ref) = known else {
            self.cancel_reject(srv, now_ns, s, id, orig, b'8', b'2', 1);
            return Ok(());
        };
        let old = self.sessions[s].orders[&orig_ref];
        if self.sessions[s].by_id.contains_key(&id) {
            self.cancel_reject(srv, now_ns, s, id, orig, ord_status(&old), b'2', 6);
            return Ok(());
        }
        // The chain's CumQty now: the shares before this order, and this order's at the
        // exchange (some may not be reported yet).
        let account = self.sessions[s].account;
        let executed = srv
            .exchange
            .order_of(account, orig_ref)
            .map_or(0, |o| u64::from(o.executed_qty));
        let chain_cum = old.base + executed;
        if old.closed {
            // Filled, canceled or replaced already: too late.
            self.cancel_reject(srv, now_ns, s, id, orig, ord_status(&old), b'2', 0);
            return Ok(());
        }
        let open = total.saturating_sub(chain_cum);
        if open == 0 || open > u64::from(u32::MAX) {
            self.cancel_reject(srv, now_ns, s, id, orig, ord_status(&old), b'2', 99);
            return Ok(());
        }
        let Some(user_ref) = self.user_ref(s) else {
            self.cancel_reject(srv, now_ns, s, id, orig, ord_status(&old), b'2', 99);
            return Ok(());
        };
        // `base` is the chain's shares before the replacement, known now: a second replace
        // sent before this one's report is sized from it (not from a report not yet written).
        let order = FixOrder {
            id,
            orig: Some(old.id),
            cancel_id: None,
            price,
            qty: total,
            cum: 0,
            notional: 0,
            leaves: open,
            order_id: 0,
            closed: false,
            base: chain_cum,
            ..old
        };
        let session = &mut self.sessions[s];
        session.orders.insert(user_ref, order);
        session.by_id.insert(id, user_ref);
        let replace = Inbound::ReplaceOrder(ReplaceOrder {
            orig_user_ref: orig_ref,
            user_ref,
            qty: open as u32,
            price,
            tif,
            display: b'Y',
            ise: b'N',
            cl_ord_id: ouch_cl_ord_id(user_ref),
            appendages: &[],
        });
        self.to_exchange(srv, now_ns, conn, s, &replace);
        Ok(())
    }

    pub(super) fn status_request<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        s: usize,
        msg: &Msg<'_>,
    ) -> Result<(), Refusal> {
        let asked = msg.require(11).map_err(refusal)?;
        let req_id = match msg.get(790) {
            Some(v) => Some(Text::new(v).ok_or((790, 5, "OrdStatusReqID too long"))?),
            None => None,
        };
        if self.sessions[s].queries.len() >= QUERIES_MAX {
            return Err((0, 99, "too many queries unanswered"));
        }
        let known = Text::new(asked).and_then(|o| self.sessions[s].by_id.get(&o).copied());
        let Some(user_ref) = known else {
            let unknown = FixOrder {
                symbol: msg
                    .get(55)
                    .and_then(padded_symbol)
                    .unwrap_or([b' '; SYMBOL_NAME_LEN]),
                side: msg.get(54).and_then(|v| v.first().copied()).unwrap_or(b'1'),
                ..FixOrder::placeholder(Text::new(asked).unwrap_or(Text::numbered(b'?', 0)))
            };
            self.report(srv, now_ns, s, &unknown, b'I', b'8', |f| {
                f.uint(103, 5);
                if let Some(r) = req_id {
                    f.bytes(790, r.as_bytes());
                }
            });
            return Ok(());
        };
        self.sessions[s]
            .queries
            .push_back(Query::Status { user_ref, req_id });
        self.to_exchange(
            srv,
            now_ns,
            conn,
            s,
            &Inbound::OrderStatusQuery { user_ref },
        );
        Ok(())
    }

    pub(super) fn mass_status<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        conn: ConnId,
        s: usize,
        msg: &Msg<'_>,
    ) -> Result<(), Refusal> {
        let req_id = Text::new(msg.require(584).map_err(refusal)?).ok_or((
            584,
            5,
            "MassStatusReqID must be 1 to 32 printable characters",
        ))?;
        msg.require(585).map_err(refusal)?;
        if self.sessions[s].queries.len() >= QUERIES_MAX {
            return Err((0, 99, "too many queries unanswered"));
        }
        let session = &mut self.sessions[s];
        session.mass_queries = session.mass_queries.wrapping_add(1);
        let token = session.mass_queries;
        session.queries.push_back(Query::Mass {
            req_id,
            listed: None,
        });
        self.to_exchange(srv, now_ns, conn, s, &Inbound::ReconcileQuery { token });
        Ok(())
    }

    /// An ExecutionReport about `o`; `extra` adds the fields of its kind.
    #[allow(clippy::too_many_arguments)]
    fn report<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        o: &FixOrder,
        exec_type: u8,
        status: u8,
        extra: impl FnOnce(&mut Fields<'_>),
    ) {
        // A fill's ExecID is its match number (`M<n>`, one per execution venue-wide); every
        // other report's the session's count (`E<n>`).
        let exec_id = match self.fill_exec_id.take() {
            Some(id) => id,
            None => {
                let incarnation = self.incarnation();
                let session = &mut self.sessions[s];
                session.exec_ids += 1;
                Text::incarnated(b'E', incarnation, session.exec_ids)
            }
        };
        let stamp = utc_timestamp(self.unix_ns(srv.exchange.wall_offset_ns, now_ns));
        let avg = if o.cum > 0 {
            (o.notional / i128::from(o.cum)) as i64
        } else {
            0
        };
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        let mut f = Fields(&mut body);
        if o.order_id > 0 {
            f.uint(37, o.order_id);
        } else {
            f.bytes(37, b"NONE");
        }
        f.bytes(11, o.id.as_bytes());
        if let Some(orig) = &o.orig {
            if exec_type == b'5' {
                f.bytes(41, orig.as_bytes());
            }
        }
        f.bytes(17, exec_id.as_bytes())
            .bytes(150, &[exec_type])
            .bytes(39, &[status])
            .bytes(55, symbol_text(&o.symbol))
            .bytes(54, &[o.side])
            .bytes(60, &stamp);
        if o.qty > 0 {
            f.uint(38, o.qty);
        }
        if o.price > 0 {
            f.price(44, o.price);
        }
        f.uint(151, if o.closed { 0 } else { o.leaves })
            .uint(14, o.cum)
            .price(6, avg);
        extra(&mut f);
        self.send_app(srv, now_ns, s, b'8', &body);
        self.body = body;
    }

    /// An OrderCancelReject (`response_to` 1 cancel, 2 replace).
    #[allow(clippy::too_many_arguments)]
    fn cancel_reject<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        id: Text,
        orig: &[u8],
        status: u8,
        response_to: u8,
        reason: u64,
    ) {
        let order_id = Text::new(orig)
            .and_then(|o| self.sessions[s].by_id.get(&o))
            .and_then(|r| self.sessions[s].orders.get(r))
            .map_or(0, |o| o.order_id);
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        let mut f = Fields(&mut body);
        if order_id > 0 {
            f.uint(37, order_id);
        } else {
            f.bytes(37, b"NONE");
        }
        f.bytes(11, id.as_bytes())
            .bytes(41, orig)
            .bytes(39, &[status])
            .bytes(434, &[response_to])
            .uint(102, reason);
        self.send_app(srv, now_ns, s, b'9', &body);
        self.body = body;
    }

    /// Translates the account's stream from where the session stands, as far as the report
    /// faults and the socket allow.
    pub(super) fn pump<T: Transport>(&mut self, srv: &mut VenueServer<T>, now_ns: u64, s: usize) {
        if !self.resend(srv, now_ns, s) {
            return;
        }
        let account = self.sessions[s].account;
        let stream_len = srv.exchange.account(account).stream_len();
        if self.sessions[s].stream_next > stream_len {
            return;
        }
        let hold = srv.config.faults.report_delay_ns;
        let final_hold = srv.config.faults.final_report_delay_ns.max(hold);
        let produced = srv.produced_ns.entry(account).or_default();
        while (produced.len() as u64) < stream_len {
            produced.push(now_ns);
        }
        let mut bytes = [0u8; 512];
        loop {
            let session = &self.sessions[s];
            let seq = session.stream_next;
            let Some(conn) = session.conn else {
                return;
            };
            if seq > stream_len || srv.reactor.send_pending(conn) > 128 * 1024 {
                return;
            }
            if self.store_full(s) {
                // The report stays in the account's stream (a logon with ResetSeqNumFlag empties
                // the store): never numbered and dropped.
                self.stats.store_full += 1;
                return self.logout(srv, now_ns, conn, "the venue's resend store is full");
            }
            let a = srv.exchange.account(account);
            let wait = if a.is_final(seq) { final_hold } else { hold };
            if wait > 0 && srv.produced_ns[&account][(seq - 1) as usize] + wait > now_ns {
                return;
            }
            let msg = a.message(seq);
            let n = msg.len().min(bytes.len());
            bytes[..n].copy_from_slice(&msg[..n]);
            self.sessions[s].stream_next = seq + 1;
            srv.stats.sequenced_sent += 1;
            match decode_outbound(&bytes[..n], srv.config.exchange.dialect) {
                Ok(m) => self.translate(srv, now_ns, s, seq, &m),
                Err(_) => self.stats.foreign_reports += 1,
            }
        }
    }

    /// One stream message as FIX (nothing for those FIX has no use for: system events,
    /// priority updates, positions).
    fn translate<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        seq: u64,
        msg: &Outbound<'_>,
    ) {
        let incarnation = self.incarnation();
        let orders = &mut self.sessions[s].orders;
        match *msg {
            Outbound::Accepted(a) => {
                let Some(o) = orders.get_mut(&a.user_ref) else {
                    self.stats.foreign_reports += 1;
                    return;
                };
                o.order_id = a.order_ref;
                let o = *o;
                self.report(srv, now_ns, s, &o, b'0', b'0', |_| {});
            }
            Outbound::Replaced(a) => {
                let Some(orig) = orders.get_mut(&a.orig_user_ref) else {
                    self.stats.foreign_reports += 1;
                    return;
                };
                orig.closed = true;
                orig.leaves = 0;
                let (cum, notional) = (orig.cum, orig.notional);
                let Some(o) = orders.get_mut(&a.user_ref) else {
                    self.stats.foreign_reports += 1;
                    return;
                };
                o.order_id = a.order_ref;
                o.base = cum;
                o.cum = cum;
                o.notional = notional;
                o.leaves = u64::from(a.order.qty);
                o.qty = cum + o.leaves;
                let o = *o;
                self.report(srv, now_ns, s, &o, b'5', ord_status(&o), |_| {});
            }
            Outbound::Canceled { user_ref, qty, .. }
            | Outbound::AiqCanceled {
                user_ref,
                decrement_qty: qty,
                ..
            } => {
                let Some(o) = orders.get_mut(&user_ref) else {
                    self.stats.foreign_reports += 1;
                    return;
                };
                o.leaves = o.leaves.saturating_sub(u64::from(qty));
                if o.leaves > 0 {
                    let o = *o;
                    return self.report(srv, now_ns, s, &o, b'D', ord_status(&o), |_| {});
                }
                o.closed = true;
                let mut r = *o;
                if let Some(cancel) = r.cancel_id {
                    r.orig = Some(r.id);
                    r.id = cancel;
                }
                let orig = r.orig;
                self.report(srv, now_ns, s, &r, b'4', b'4', |f| {
                    if let Some(orig) = orig {
                        f.bytes(41, orig.as_bytes());
                    }
                });
            }
            Outbound::Executed {
                user_ref,
                qty,
                price,
                match_number,
                ..
            } => {
                // A match's two sides may both be this session's (a self-match): the side
                // keeps their ExecIDs apart.
                let side = orders.get(&user_ref).map_or(b'1', |o| o.side);
                let exec = Text::incarnated(b'M', incarnation, match_number)
                    .with(b'-')
                    .with(side);
                let o = match orders.get_mut(&user_ref) {
                    Some(o) => {
                        o.cum += u64::from(qty);
                        o.notional += i128::from(price) * i128::from(qty);
                        o.leaves = o.leaves.saturating_sub(u64::from(qty));
                        o.closed |= o.leaves == 0;
                        *o
                    }
                    None => {
                        // A lie about an order no FIX message entered: reported as it is, so
                        // the client sees what the venue claims.
                        self.stats.foreign_reports += 1;
                        FixOrder {
                            cum: u64::from(qty),
                            notional: i128::from(price) * i128::from(qty),
                            ..FixOrder::placeholder(Text::numbered(b'U', u64::from(user_ref)))
                        }
                    }
                };
                let status = if o.closed { b'2' } else { b'1' };
                self.fill_exec_id = Some(exec);
                self.report(srv, now_ns, s, &o, b'F', status, |f| {
                    f.uint(32, u64::from(qty)).price(31, price);
                });
            }
            Outbound::BrokenTrade {
                user_ref,
                match_number,
                ..
            } => {
                let Some(o) = orders.get(&user_ref).copied() else {
                    self.stats.foreign_reports += 1;
                    return;
                };
                let exec = Text::numbered(b'M', match_number);
                self.report(srv, now_ns, s, &o, b'H', ord_status(&o), |f| {
                    f.bytes(19, exec.as_bytes());
                });
            }
            Outbound::Rejected {
                user_ref, reason, ..
            } => self.rejected(srv, now_ns, s, user_ref, reason),
            Outbound::CancelPending { user_ref, .. } => {
                if let Some(o) = orders.get(&user_ref).copied() {
                    self.report(srv, now_ns, s, &o, b'6', b'6', |_| {});
                }
            }
            Outbound::CancelReject { user_ref, .. } => {
                let Some(o) = orders.get(&user_ref).copied() else {
                    self.stats.foreign_reports += 1;
                    return;
                };
                // Too late for a closed order; refused (the throttle) for an open one.
                let reason = if o.closed { 0 } else { 99 };
                let id = o.cancel_id.unwrap_or(o.id);
                self.cancel_reject(
                    srv,
                    now_ns,
                    s,
                    id,
                    o.id.as_bytes(),
                    ord_status(&o),
                    b'1',
                    reason,
                );
            }
            Outbound::OrderStatus(st) => self.status_answer(srv, now_ns, s, seq, &st),
            Outbound::ReconcileEnd { .. } => {
                if let Some(Query::Mass { req_id, listed }) = self.sessions[s].queries.front() {
                    let (req_id, listed) = (*req_id, listed.is_some());
                    self.sessions[s].queries.pop_front();
                    if !listed {
                        let none = FixOrder::placeholder(Text::numbered(b'?', 0));
                        self.report(srv, now_ns, s, &none, b'I', b'8', |f| {
                            f.bytes(584, req_id.as_bytes())
                                .uint(911, 0)
                                .bytes(912, b"Y");
                        });
                    }
                } else {
                    self.stats.foreign_reports += 1;
                }
            }
            Outbound::SystemEvent { .. }
            | Outbound::PriorityUpdate { .. }
            | Outbound::Modified { .. }
            | Outbound::Restated { .. }
            | Outbound::AccountQueryResponse { .. }
            | Outbound::Position { .. } => {}
        }
    }

    /// A Rejected from the stream: a refused order, or a refused replacement (answered as an
    /// OrderCancelReject: the original stands).
    fn rejected<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        user_ref: u32,
        reason: u16,
    ) {
        let Some(o) = self.sessions[s].orders.get_mut(&user_ref) else {
            self.stats.foreign_reports += 1;
            return;
        };
        o.closed = true;
        o.leaves = 0;
        let o = *o;
        if let Some(orig) = o.orig {
            // A replacement refused: the original stands.
            let status = self.sessions[s]
                .by_id
                .get(&orig)
                .and_then(|r| self.sessions[s].orders.get(r))
                .map_or(b'8', ord_status);
            let why = if RejectCode::from_wire(reason) == Some(RejectCode::UnknownOrder) {
                1
            } else {
                99
            };
            return self.cancel_reject(srv, now_ns, s, o.id, orig.as_bytes(), status, b'2', why);
        }
        self.report(srv, now_ns, s, &o, b'8', b'8', |f| {
            f.uint(103, ord_rej_reason(reason));
        });
    }

    /// An order status from the stream: the answer to the query at the front.
    fn status_answer<T: Transport>(
        &mut self,
        srv: &mut VenueServer<T>,
        now_ns: u64,
        s: usize,
        seq: u64,
        st: &OrderStatus,
    ) {
        let Some(&query) = self.sessions[s].queries.front() else {
            self.stats.foreign_reports += 1;
            return;
        };
        let mut o = match self.sessions[s].orders.get(&st.user_ref) {
            Some(o) => *o,
            None => FixOrder {
                symbol: st.symbol,
                side: if st.side == b'B' { b'1' } else { b'2' },
                price: st.price,
                qty: u64::from(st.open_qty) + u64::from(st.executed_qty),
                ..FixOrder::placeholder(Text::numbered(b'U', u64::from(st.user_ref)))
            },
        };
        // The exchange's figures are the truth: the chain's shares before this order, and
        // this order's.
        let cum = o.base + u64::from(st.executed_qty);
        if cum != o.cum {
            o.notional = i128::from(st.price) * i128::from(cum);
        }
        o.cum = cum;
        o.leaves = u64::from(st.open_qty);
        o.closed = st.state != b'L';
        let status = match st.state {
            b'U' => b'8',
            _ => ord_status(&o),
        };
        match query {
            Query::Status { user_ref, req_id } => {
                if user_ref != st.user_ref {
                    self.stats.foreign_reports += 1;
                    return;
                }
                self.sessions[s].queries.pop_front();
                self.report(srv, now_ns, s, &o, b'I', status, |f| {
                    if st.state == b'U' {
                        f.uint(103, 5);
                    }
                    if let Some(r) = req_id {
                        f.bytes(790, r.as_bytes());
                    }
                });
            }
            Query::Mass { req_id, listed } => {
                let (total, left) = listed.unwrap_or_else(|| {
                    let total = self.answer_length(srv, s, seq);
                    (total, total)
                });
                let left = left.saturating_sub(1);
                if let Some(Query::Mass { listed, .. }) = self.sessions[s].queries.front_mut() {
                    *listed = Some((total, left));
                }
                self.report(srv, now_ns, s, &o, b'I', status, |f| {
                    f.bytes(584, req_id.as_bytes()).uint(911, u64::from(total));
                    if left == 0 {
                        f.bytes(912, b"Y");
                    }
                });
            }
        }
    }

    /// The open orders a reconciliation answer that starts at `seq` lists (its end marker
    /// follows them in the stream: the exchange writes the whole answer at once).
    fn answer_length<T: Transport>(&self, srv: &VenueServer<T>, s: usize, seq: u64) -> u32 {
        let a = srv.exchange.account(self.sessions[s].account);
        let dialect = srv.config.exchange.dialect;
        (seq..=a.stream_len())
            .find_map(|n| match decode_outbound(a.message(n), dialect) {
                Ok(Outbound::ReconcileEnd { open_orders, .. }) => Some(open_orders),
                _ => None,
            })
            .unwrap_or(1)
    }
}

impl FixOrder {
    /// An order no FIX message entered (a lie, an unknown ClOrdID, an empty mass status):
    /// closed, nothing open, only what a report about it needs.
    fn placeholder(id: Text) -> Self {
        Self {
            id,
            orig: None,
            cancel_id: None,
            symbol: [b' '; SYMBOL_NAME_LEN],
            side: b'1',
            price: 0,
            qty: 0,
            cum: 0,
            notional: 0,
            leaves: 0,
            order_id: 0,
            closed: true,
            base: 0,
        }
    }
}
