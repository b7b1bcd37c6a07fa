//! FIX order mapping: keel's requests to NewOrderSingle, OrderCancelRequest,
//! OrderCancelReplaceRequest and OrderStatusRequest (ClOrdID: the dispatcher's wire reference
//! in decimal, a cancel's `<reference>-<n>`), and every ExecutionReport, OrderCancelReject and
//! BusinessMessageReject back to one outcome, checked against the session's view of the order
//! (an execution that cannot be true is a contradiction, never booked).

use super::codec::{parse_decimal, Msg};
use super::*;
use crate::order::{
    CancelRejectReason, Contradiction, Execution, Price, RejectReason, RequestKind, Side,
    TimeInForce,
};
use crate::session::protocol::Reconciliation;

/// OrdStatus values of an order still working at the venue.
const OPEN_STATUSES: [&[u8]; 6] = [b"0", b"1", b"6", b"A", b"E", b"5"];
/// OrdRejReason "Unknown order".
const UNKNOWN_ORDER: u16 = 5;

/// A ClOrdID's text: the reference, then `-<n>` for a cancel request.
fn cl_ord_id(wire_ref: u32, cancel: u16) -> ([u8; 20], usize) {
    let mut text = [0u8; 20];
    let mut n = codec::write_uint(&mut text, u64::from(wire_ref));
    if cancel > 0 {
        text[n] = b'-';
        n += 1;
        n += codec::write_uint(&mut text[n..], u64::from(cancel));
    }
    (text, n)
}

/// The wire reference a ClOrdID names (its digits before an optional `-<n>`).
fn wire_ref_of(cl_ord_id: &[u8]) -> Option<u32> {
    let digits = cl_ord_id.split(|&b| b == b'-').next()?;
    if digits.is_empty() || digits.len() > 10 || digits[0] == b'0' {
        return None;
    }
    codec::parse_uint(11, digits)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
}

/// A symbol's name without its padding.
fn symbol_text(name: &SymbolName) -> &[u8] {
    let end = name
        .iter()
        .rposition(|&b| b != b' ' && b != 0)
        .map_or(0, |i| i + 1);
    &name[..end]
}

impl FixClient {
    /// Encodes a dispatcher request as one FIX message.
    pub fn encode_request(
        &mut self,
        request: &VenueRequest,
        out: &mut [u8],
    ) -> Result<usize, RequestError> {
        let now = request.sent_ns;
        match request.kind {
            RequestKind::New(order) => {
                let symbol = *self
                    .symbols
                    .get(usize::from(order.symbol.0))
                    .ok_or(RequestError::UnknownSymbol(order.symbol.0))?;
                let wire_ref = self.assign(request.wire_ref, &order)?;
                self.await_answer(wire_ref, now);
                let (id, n) = cl_ord_id(wire_ref, 0);
                let (mut e, stamp) = self.begin_stamped(out, now, b"D");
                e.bytes(11, &id[..n]);
                if !self.settings.account.is_empty() {
                    e.bytes(1, self.settings.account.as_bytes());
                }
                e.bytes(55, symbol_text(&symbol))
                    .bytes(54, side(order.side))
                    .bytes(60, &stamp)
                    .uint(38, u64::from(order.qty))
                    .bytes(40, b"2")
                    .decimal(44, order.price.0, Price::SCALE)
                    .bytes(59, tif(order.tif));
                Ok(e.finish()?)
            }
            RequestKind::Cancel { id } => {
                let wire_ref = self.wire_ref(id).ok_or(RequestError::UnknownOrder(id))?;
                let o = self.by_ref[&wire_ref];
                let cancels = o.cancels.saturating_add(1);
                self.update(wire_ref, |o| {
                    o.cancels = cancels;
                    o.cancel_pending = true;
                });
                self.await_answer(wire_ref, now);
                self.encode_cancel(out, now, wire_ref, &o, cancels)
            }
            RequestKind::Replace(r) => {
                let orig = self
                    .wire_ref(r.id)
                    .ok_or(RequestError::UnknownOrder(r.id))?;
                let old = self.by_ref[&orig];
                let replacement = NewOrder {
                    id: r.new_id,
                    venue: self.venue,
                    symbol: old.symbol,
                    side: if old.buy { Side::Buy } else { Side::Sell },
                    price: r.price,
                    qty: r.qty,
                    tif: TimeInForce::Day,
                    reduce_only: false,
                };
                let symbol = self.symbols[usize::from(old.symbol.0)];
                let wire_ref = self.assign(request.wire_ref, &replacement)?;
                self.await_answer(wire_ref, now);
                let (orig_id, on) = cl_ord_id(orig, 0);
                let (id, n) = cl_ord_id(wire_ref, 0);
                // FIX's OrderQty is the order's total; keel's is the new open quantity.
                let total = u64::from(old.executed) + u64::from(r.qty);
                let (mut e, stamp) = self.begin_stamped(out, now, b"G");
                e.bytes(41, &orig_id[..on]).bytes(11, &id[..n]);
                if !self.settings.account.is_empty() {
                    e.bytes(1, self.settings.account.as_bytes());
                }
                e.bytes(55, symbol_text(&symbol))
                    .bytes(54, side(replacement.side))
                    .bytes(60, &stamp)
                    .uint(38, total)
                    .bytes(40, b"2")
                    .decimal(44, r.price.0, Price::SCALE);
                Ok(e.finish()?)
            }
            RequestKind::Query { id } => {
                let wire_ref = self.wire_ref(id).ok_or(RequestError::UnknownOrder(id))?;
                let o = self.by_ref[&wire_ref];
                self.await_answer(wire_ref, now);
                let req = self.next_request_id();
                let symbol = self.symbols[usize::from(o.symbol.0)];
                let (id, n) = cl_ord_id(wire_ref, 0);
                let mut e = self.begin(out, now, b"H");
                e.uint(790, req)
                    .bytes(11, &id[..n])
                    .bytes(55, symbol_text(&symbol))
                    .bytes(54, if o.buy { b"1" } else { b"2" });
                Ok(e.finish()?)
            }
            RequestKind::Reconcile { .. } => Err(RequestError::NotWire),
        }
    }

    fn encode_cancel(
        &mut self,
        out: &mut [u8],
        now: u64,
        wire_ref: u32,
        o: &FixOrder,
        cancel: u16,
    ) -> Result<usize, RequestError> {
        let symbol = self.symbols[usize::from(o.symbol.0)];
        let (orig, on) = cl_ord_id(wire_ref, 0);
        let (id, n) = cl_ord_id(wire_ref, cancel);
        let (mut e, stamp) = self.begin_stamped(out, now, b"F");
        e.bytes(41, &orig[..on]).bytes(11, &id[..n]);
        if !self.settings.account.is_empty() {
            e.bytes(1, self.settings.account.as_bytes());
        }
        e.bytes(55, symbol_text(&symbol))
            .bytes(54, if o.buy { b"1" } else { b"2" })
            .bytes(60, &stamp)
            .uint(38, u64::from(o.qty));
        Ok(e.finish()?)
    }

    /// Takes `wire_ref` (the dispatcher's, journaled with the intent) for the order, or the
    /// session's next one when the request carries none (0).
    fn assign(&mut self, wire_ref: u32, order: &NewOrder) -> Result<u32, RequestError> {
        let wire_ref = match wire_ref {
            0 => self.next_ref,
            // The same request encoded again: its bytes never reached the socket (a full send
            // buffer; the link keeps the request). The order keeps its ClOrdID; the number the
            // first encoding took is a gap the venue asks for and keel fills.
            r if self
                .by_ref
                .get(&r)
                .is_some_and(|o| o.id == order.id && !o.accepted && !o.closed) =>
            {
                return Ok(r);
            }
            r if r < self.next_ref => {
                return Err(RequestError::StaleWireRef {
                    got: r,
                    last: self.next_ref - 1,
                })
            }
            r => r,
        };
        if wire_ref == u32::MAX {
            return Err(RequestError::WireRefsExhausted { next: wire_ref });
        }
        self.make_room()?;
        self.next_ref = wire_ref + 1;
        self.by_ref.insert(
            wire_ref,
            FixOrder {
                id: order.id,
                qty: order.qty,
                executed: 0,
                price: order.price.0,
                buy: order.side == Side::Buy,
                symbol: order.symbol,
                accepted: false,
                closed: false,
                cancels: 0,
                cancel_pending: false,
                awaiting_since_ns: None,
                contradicted: false,
                inferred: 0,
            },
        );
        self.by_id.insert(order.id, wire_ref);
        Ok(wire_ref)
    }

    /// Forgets the oldest closed orders while the map is full; refuses when all are open.
    fn make_room(&mut self) -> Result<(), RequestError> {
        let orders_max = self.closed_refs.capacity().max(1);
        while self.by_ref.len() >= orders_max {
            let Some(wire_ref) = self.closed_refs.pop_front() else {
                self.stats.session_full += 1;
                return Err(RequestError::SessionFull {
                    orders_max: orders_max as u32,
                });
            };
            if let Some(order) = self.by_ref.remove(&wire_ref) {
                self.by_id.remove(&order.id);
                self.stats.forgotten += 1;
                // Forgetting the order does not settle its contradiction.
                if order.contradicted {
                    self.orphan_contradictions = self.orphan_contradictions.saturating_add(1);
                }
            }
        }
        Ok(())
    }

    fn close(&mut self, wire_ref: u32) {
        if let Some(order) = self.by_ref.get_mut(&wire_ref) {
            if !order.closed {
                order.closed = true;
                order.awaiting_since_ns = None;
                if self.closed_refs.len() < self.closed_refs.capacity() {
                    self.closed_refs.push_back(wire_ref);
                }
            }
        }
    }

    fn await_answer(&mut self, wire_ref: u32, sent_ns: u64) {
        self.update(wire_ref, |o| o.awaiting_since_ns = Some(sent_ns));
        if self.deadlines.len() < self.deadlines.capacity() {
            self.deadlines
                .push_back((sent_ns.saturating_add(self.ack_timeout_ns), wire_ref));
        }
    }

    fn update(&mut self, wire_ref: u32, change: impl FnOnce(&mut FixOrder)) {
        if let Some(order) = self.by_ref.get_mut(&wire_ref) {
            change(order);
        }
    }

    /// The wire reference of one of this session's orders.
    pub fn wire_ref(&self, id: ClientOrderId) -> Option<u32> {
        self.by_id.get(&id).copied()
    }

    /// Journal restore: one open order and its wire reference.
    pub fn restore_order(
        &mut self,
        order: &NewOrder,
        wire_ref: u32,
        executed: u32,
        accepted: bool,
    ) -> Result<(), RequestError> {
        if usize::from(order.symbol.0) >= self.symbols.len() {
            return Err(RequestError::UnknownSymbol(order.symbol.0));
        }
        let wire_ref = self.assign(wire_ref, order)?;
        self.update(wire_ref, |o| {
            o.executed = executed.min(o.qty);
            o.accepted = accepted;
        });
        Ok(())
    }

    /// Requests unanswered past their deadline become `Timeout` (the order is unknown).
    pub(super) fn expire_orders(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) {
        while let Some(&(deadline, wire_ref)) = self.deadlines.front() {
            if deadline > now_ns {
                return;
            }
            self.deadlines.pop_front();
            let timeout = self.ack_timeout_ns;
            let Some(order) = self.by_ref.get_mut(&wire_ref) else {
                continue;
            };
            let overdue = order
                .awaiting_since_ns
                .is_some_and(|since| since.saturating_add(timeout) <= now_ns);
            if overdue && !order.closed {
                order.awaiting_since_ns = None;
                self.stats.timeouts += 1;
                emit(Outcome {
                    venue: self.venue,
                    received_ns: now_ns,
                    seq: 0,
                    kind: OutcomeKind::Timeout { id: order.id },
                });
            }
        }
    }

    /// The connection dropped: every order sent and not yet acknowledged is in doubt.
    pub(super) fn mark_in_flight_unknown(
        &mut self,
        now_ns: u64,
        emit: &mut impl FnMut(Outcome),
    ) -> u64 {
        self.mass_status = 0;
        let mut marked = 0;
        for order in self
            .by_ref
            .values_mut()
            .filter(|o| !o.accepted && !o.closed)
        {
            order.awaiting_since_ns = None;
            marked += 1;
            emit(Outcome {
                venue: self.venue,
                received_ns: now_ns,
                seq: 0,
                kind: OutcomeKind::Timeout { id: order.id },
            });
        }
        marked
    }

    /// An operator settled every contradiction: the orders concerned are in doubt again.
    pub(super) fn clear_contradictions(
        &mut self,
        now_ns: u64,
        emit: &mut impl FnMut(Outcome),
    ) -> u32 {
        let mut cleared = std::mem::take(&mut self.orphan_contradictions);
        self.stats.last_unmatched_execution = None;
        for order in self.by_ref.values_mut().filter(|o| o.contradicted) {
            order.contradicted = false;
            cleared += 1;
            // A closed order stays closed (the table would refuse the Timeout: the
            // simulation over FIX caught it); an open one is in doubt and queried.
            if !order.closed {
                emit(Outcome {
                    venue: self.venue,
                    received_ns: now_ns,
                    seq: 0,
                    kind: OutcomeKind::Timeout { id: order.id },
                });
            }
        }
        cleared
    }

    /// An application message from the venue (in sequence).
    pub(super) fn on_application(
        &mut self,
        now_ns: u64,
        msg: &Msg<'_>,
        seq: u64,
        emit: &mut impl FnMut(Outcome),
    ) -> SessionNews {
        let venue = self.venue;
        let mut emit_kind = |kind: OutcomeKind| {
            emit(Outcome {
                venue,
                received_ns: now_ns,
                seq,
                kind,
            })
        };
        let news = match msg.msg_type() {
            b"8" => self.on_execution_report(msg, &mut emit_kind),
            b"9" => self.on_cancel_reject(msg, &mut emit_kind),
            _ => self.on_business_reject(msg, &mut emit_kind),
        };
        match news {
            Ok(news) => news,
            Err(e) => {
                // A required field missing or a value keel cannot read: refused at the
                // session level, counted, never guessed at.
                let (tag, reason) = match e {
                    FixError::Missing { tag, .. } => (tag, 1),
                    other => (other.tag().unwrap_or(0), 5),
                };
                self.reject(msg, seq, tag, reason, "application message not understood");
                SessionNews::Nothing
            }
        }
    }

    /// The order an answer is about: its ClOrdID, else its OrigClOrdID.
    fn answered(&mut self, msg: &Msg<'_>) -> Option<u32> {
        let by = |tag| {
            msg.get(tag)
                .and_then(wire_ref_of)
                .filter(|r| self.by_ref.contains_key(r))
        };
        let found = by(11).or_else(|| by(41));
        if found.is_none() {
            self.stats.unknown_order_ref += 1;
        }
        found
    }

    fn on_execution_report(
        &mut self,
        msg: &Msg<'_>,
        emit: &mut impl FnMut(OutcomeKind),
    ) -> Result<SessionNews, FixError> {
        let exec_type = msg.require(150)?;
        msg.require(39)?;
        let status_request = msg.get(790).is_some() || msg.get(584).is_some();
        if exec_type == b"I" || status_request {
            return self.on_status(msg, emit);
        }
        let Some(wire_ref) = self.answered(msg) else {
            if exec_type == b"F" {
                self.orphan_contradictions = self.orphan_contradictions.saturating_add(1);
                return Ok(self.contradiction(None, Contradiction::UnknownOrder, None, emit));
            }
            self.stats.informational += 1;
            return Ok(SessionNews::Nothing);
        };
        let order = self.by_ref[&wire_ref];
        let id = order.id;
        self.stats.mapped += 1;
        if exec_type == b"F" {
            let exec_id = exec_id_fingerprint(msg.require(17)?);
            if self.exec_ids.contains(&exec_id) {
                if msg.flag(43)? {
                    // The same execution sent again, said to be a possible duplicate.
                    self.fix_stats.duplicate_executions_skipped += 1;
                    self.stats.duplicates_skipped += 1;
                    return Ok(SessionNews::Nothing);
                }
                let what = Contradiction::DuplicateExecution;
                return Ok(self.contradiction(Some(id), what, None, emit));
            }
            let news = self.on_trade(msg, wire_ref, emit)?;
            self.remember_exec_id(exec_id);
            return Ok(news);
        }
        match exec_type {
            b"0" => {
                if !order.accepted && !order.closed {
                    self.update(wire_ref, |o| {
                        o.accepted = true;
                        o.awaiting_since_ns = None;
                    });
                    emit(OutcomeKind::Accepted { id });
                }
            }
            b"4" | b"C" | b"3" => {
                if !order.closed {
                    self.close(wire_ref);
                    emit(OutcomeKind::Canceled { id });
                }
            }
            b"5" => {
                // Replaced: the ClOrdID is the replacement, the OrigClOrdID the original.
                let orig = msg.get(41).and_then(wire_ref_of);
                let Some(orig_order) = orig.and_then(|r| self.by_ref.get(&r).copied()) else {
                    let what = Contradiction::UnknownOrder;
                    return Ok(self.contradiction(Some(id), what, None, emit));
                };
                self.update(wire_ref, |o| {
                    o.accepted = true;
                    o.awaiting_since_ns = None;
                });
                if let Some(r) = orig {
                    self.close(r);
                }
                emit(OutcomeKind::Replaced {
                    id: orig_order.id,
                    new_id: id,
                });
            }
            b"8" => {
                if order.accepted || order.closed {
                    let what = Contradiction::ImpossibleSequence;
                    return Ok(self.contradiction(Some(id), what, None, emit));
                }
                let code = msg.uint(103)?.unwrap_or(0).min(u64::from(u16::MAX)) as u16;
                self.close(wire_ref);
                emit(OutcomeKind::Rejected {
                    id,
                    reason: self.settings.rejects.reason(code),
                });
            }
            b"H" => {
                self.stats.broken_trades += 1;
            }
            _ => self.stats.informational += 1,
        }
        Ok(SessionNews::Nothing)
    }

    /// A Trade: LastQty at LastPx, checked against the order's quantity, state and limit.
    fn on_trade(
        &mut self,
        msg: &Msg<'_>,
        wire_ref: u32,
        emit: &mut impl FnMut(OutcomeKind),
    ) -> Result<SessionNews, FixError> {
        let order = self.by_ref[&wire_ref];
        let qty = msg.require_uint(32)?;
        let price = parse_decimal(31, msg.require(31)?, Price::SCALE)?;
        let qty = u32::try_from(qty).map_err(|_| codec_value(32, "a quantity below 2^32"))?;
        if qty == 0 {
            return Err(codec_value(32, "a positive LastQty"));
        }
        // An execution keel cannot apply to its order is still one the venue says happened:
        // booked into the position, never into the order.
        let execution = Execution {
            symbol: order.symbol,
            side: if order.buy { Side::Buy } else { Side::Sell },
            qty,
            price: Price(price),
        };
        let absorbed = qty.min(order.inferred);
        let through = if order.buy {
            price > order.price
        } else {
            price < order.price
        };
        let what = if order.closed {
            Some(Contradiction::AfterClose)
        } else if order.executed + qty - absorbed > order.qty {
            Some(Contradiction::Overfill)
        } else if through {
            Some(Contradiction::ExecutionPrice)
        } else {
            None
        };
        if let Some(what) = what {
            return Ok(self.contradiction(Some(order.id), what, Some(execution), emit));
        }
        if !order.accepted {
            emit(OutcomeKind::Accepted { id: order.id });
        }
        let booked = qty - absorbed;
        self.update(wire_ref, |o| {
            o.accepted = true;
            o.awaiting_since_ns = None;
            o.inferred -= absorbed;
            o.executed += booked;
        });
        if absorbed > 0 {
            self.stats.late_reports_absorbed += 1;
        }
        if booked > 0 {
            if let Some(p) = self.positions.get_mut(usize::from(order.symbol.0)) {
                p.book(if order.buy { Side::Buy } else { Side::Sell }, booked);
            }
            emit(OutcomeKind::Fill {
                id: order.id,
                qty: booked,
                price: Price(price),
            });
        }
        if order.executed + booked == order.qty {
            self.close(wire_ref);
        }
        Ok(SessionNews::Nothing)
    }

    /// An answer to an OrderStatusRequest or an OrderMassStatusRequest (ExecType I): what
    /// the venue's figures settle becomes outcomes; the mass status's last report reconciles.
    fn on_status(
        &mut self,
        msg: &Msg<'_>,
        emit: &mut impl FnMut(OutcomeKind),
    ) -> Result<SessionNews, FixError> {
        let mass = msg.uint(584)?;
        let status = msg.require(39)?;
        let open = OPEN_STATUSES.contains(&status);
        let last = msg.flag(912)?;
        let listed = msg.uint(911)?;
        // The request this answers: taken only if this process issued it. An earlier
        // process's (resent after a restart, its numbering started again) says what was
        // true then, and an unsolicited status resent as a possible duplicate is as stale.
        let query = msg.get(790).map(|v| codec::parse_uint(790, v).unwrap_or(0));
        let ours = match mass.or(query) {
            Some(request) => self.issued(request),
            None => !msg.flag(43)?,
        };
        if !ours {
            self.fix_stats.stale_answers += 1;
            self.stats.informational += 1;
            return Ok(SessionNews::Nothing);
        }
        let wire_ref = msg
            .get(11)
            .and_then(wire_ref_of)
            .filter(|r| self.by_ref.contains_key(r));
        let in_this_mass = mass.is_some_and(|m| m == self.mass_status && m != 0);
        if in_this_mass && listed != Some(0) {
            match wire_ref {
                Some(r) if open => self.venue_open.push(r),
                None if open => self.venue_unknown_open += 1,
                _ => {}
            }
        }
        if let Some(r) = wire_ref {
            self.settle(msg, r, open, query.is_some() || mass.is_some(), emit)?;
        } else if mass.is_none() {
            self.stats.unknown_order_ref += 1;
        }
        if in_this_mass && (last || listed == Some(0)) {
            self.mass_status = 0;
            return Ok(SessionNews::Reconciled(self.reconcile(emit)));
        }
        Ok(SessionNews::Nothing)
    }

    /// One order's status as the venue reports it: executions keel missed are booked (and
    /// absorbed when their reports come), a close keel missed is applied, an open order
    /// answers a query with `StillOpen`.
    fn settle(
        &mut self,
        msg: &Msg<'_>,
        wire_ref: u32,
        open: bool,
        answers_query: bool,
        emit: &mut impl FnMut(OutcomeKind),
    ) -> Result<(), FixError> {
        let order = self.by_ref[&wire_ref];
        self.update(wire_ref, |o| o.awaiting_since_ns = None);
        if order.contradicted {
            return Ok(());
        }
        let status = msg.require(39)?;
        if status == b"8" {
            let code = msg.uint(103)?.unwrap_or(0).min(u64::from(u16::MAX)) as u16;
            if !order.accepted && !order.closed {
                self.close(wire_ref);
                self.stats.resolutions += 1;
                // "Not received" only from the venue's answer to keel's own question about
                // this order.
                let reason = if code == UNKNOWN_ORDER && answers_query {
                    RejectReason::NotReceived
                } else {
                    self.settings.rejects.reason(code)
                };
                emit(OutcomeKind::Rejected {
                    id: order.id,
                    reason,
                });
            }
            return Ok(());
        }
        let cum = msg.require_uint(14)?;
        // FIX counts CumQty and OrderQty over a replaced order's chain; keel counts each order
        // (a replacement's quantity is what was open when it was sent). The chain's shares
        // before this order are OrderQty less keel's quantity: what keel's replace request
        // had executed already.
        let total = msg.uint(38)?.unwrap_or(0);
        let before = total.saturating_sub(u64::from(order.qty)).min(cum);
        let cum =
            u32::try_from(cum - before).map_err(|_| codec_value(14, "a quantity below 2^32"))?;
        if cum > order.qty {
            self.contradiction(Some(order.id), Contradiction::Overfill, None, emit);
            return Ok(());
        }
        if !order.accepted && !order.closed {
            self.update(wire_ref, |o| o.accepted = true);
            emit(OutcomeKind::Accepted { id: order.id });
        }
        if cum > order.executed && !order.closed {
            let missed = cum - order.executed;
            // An average may carry any precision: rounded to keel's, never refused.
            let price = match msg.get(6) {
                Some(v) => codec::parse_decimal_rounded(6, v, Price::SCALE)?,
                None => return Err(codec_value(6, "an AvgPx with the executions")),
            };
            self.stats.resolutions += 1;
            // Booked now; their execution reports, when they come, are absorbed.
            self.update(wire_ref, |o| {
                o.executed = cum;
                o.inferred += missed;
            });
            if let Some(p) = self.positions.get_mut(usize::from(order.symbol.0)) {
                p.book(if order.buy { Side::Buy } else { Side::Sell }, missed);
            }
            emit(OutcomeKind::Fill {
                id: order.id,
                qty: missed,
                price: Price(price),
            });
        }
        let executed = self.by_ref[&wire_ref].executed;
        if !open && !order.closed {
            self.close(wire_ref);
            if executed < order.qty {
                self.stats.resolutions += 1;
                emit(OutcomeKind::Canceled { id: order.id });
            }
        } else if open && order.cancel_pending && !order.closed {
            // Open after a cancel keel sent: the cancel was not applied (as for OUCH).
            self.update(wire_ref, |o| o.cancel_pending = false);
            emit(OutcomeKind::CancelRejected {
                id: order.id,
                reason: CancelRejectReason::NotApplied,
            });
        } else if open && msg.get(790).is_some() {
            emit(OutcomeKind::StillOpen { id: order.id });
        }
        Ok(())
    }

    fn on_cancel_reject(
        &mut self,
        msg: &Msg<'_>,
        emit: &mut impl FnMut(OutcomeKind),
    ) -> Result<SessionNews, FixError> {
        msg.require(39)?;
        let response_to = msg.require(434)?;
        let reason = msg.uint(102)?.unwrap_or(99);
        let Some(wire_ref) = self.answered(msg) else {
            self.stats.informational += 1;
            return Ok(SessionNews::Nothing);
        };
        self.stats.mapped += 1;
        let order = self.by_ref[&wire_ref];
        self.update(wire_ref, |o| {
            o.awaiting_since_ns = None;
            o.cancel_pending &= response_to == b"2";
        });
        if response_to == b"2" {
            // A replace refused: the replacement (the ClOrdID) never lived.
            let replacement = msg.get(11).and_then(wire_ref_of).unwrap_or(wire_ref);
            let id = self.by_ref.get(&replacement).map_or(order.id, |o| o.id);
            self.close(replacement);
            emit(OutcomeKind::Rejected {
                id,
                reason: RejectReason::Invalid,
            });
            return Ok(SessionNews::Nothing);
        }
        let reason = match reason {
            0 => CancelRejectReason::TooLateToCancel,
            1 => CancelRejectReason::UnknownOrder,
            _ => CancelRejectReason::NotApplied,
        };
        emit(OutcomeKind::CancelRejected {
            id: order.id,
            reason,
        });
        Ok(SessionNews::Nothing)
    }

    fn on_business_reject(
        &mut self,
        msg: &Msg<'_>,
        emit: &mut impl FnMut(OutcomeKind),
    ) -> Result<SessionNews, FixError> {
        self.fix_stats.business_rejects += 1;
        let reason = msg.require_uint(380)?;
        let refused = msg
            .get(379)
            .and_then(wire_ref_of)
            .and_then(|r| self.by_ref.get(&r).map(|o| (r, *o)));
        let Some((wire_ref, order)) = refused else {
            self.stats.informational += 1;
            return Ok(SessionNews::Nothing);
        };
        self.stats.mapped += 1;
        if order.accepted || order.closed {
            return Ok(SessionNews::Nothing);
        }
        self.close(wire_ref);
        emit(OutcomeKind::Rejected {
            id: order.id,
            reason: match reason {
                // Application not available.
                4 => RejectReason::VenueSystem,
                _ => RejectReason::Invalid,
            },
        });
        Ok(SessionNews::Nothing)
    }

    /// A report that cannot be true: the order's state is in doubt until an operator settles
    /// it, and the link stops trusting itself.
    /// An execution the venue stated (`booked`) is booked into this session's position and
    /// journaled with it (`PositionBaseline`); the dispatcher books it for risk
    /// (`UnmatchedExecution`).
    fn contradiction(
        &mut self,
        id: Option<ClientOrderId>,
        what: Contradiction,
        booked: Option<Execution>,
        emit: &mut impl FnMut(OutcomeKind),
    ) -> SessionNews {
        if let Some(r) = id.and_then(|id| self.wire_ref(id)) {
            self.update(r, |o| {
                o.contradicted = true;
                o.awaiting_since_ns = None;
            });
        }
        self.stats.contradictions += 1;
        self.stats.last_contradiction = Some(what);
        emit(OutcomeKind::Contradiction { id, what });
        if let Some(e) = booked {
            emit(OutcomeKind::UnmatchedExecution { execution: e });
            self.stats.unmatched_executions += 1;
            self.stats.last_unmatched_execution = Some(e);
            if let Some(p) = self.positions.get_mut(usize::from(e.symbol.0)) {
                p.book(e.side, e.qty);
                emit(OutcomeKind::PositionBaseline {
                    symbol: e.symbol,
                    position: *p,
                });
            }
        }
        SessionNews::Contradicted(what)
    }

    /// Contradictions not settled: every flagged order, open or closed, and reports for
    /// orders this session never sent (or has forgotten). Only an operator settles them.
    pub(super) fn contradictions_open(&self) -> u32 {
        let flagged = self.by_ref.values().filter(|o| o.contradicted).count();
        self.orphan_contradictions
            .saturating_add(u32::try_from(flagged).unwrap_or(u32::MAX))
    }

    /// Remembers an applied execution's ExecID; the oldest is forgotten past
    /// [`EXEC_IDS_KEPT`].
    fn remember_exec_id(&mut self, fingerprint: u64) {
        if self.exec_order.len() == EXEC_IDS_KEPT {
            if let Some(old) = self.exec_order.pop_front() {
                self.exec_ids.remove(&old);
            }
        }
        if self.exec_ids.insert(fingerprint) {
            self.exec_order.push_back(fingerprint);
        }
    }

    /// Compares this session's open orders with the venue's list. An order the venue does not
    /// list is in doubt and queried, never declared "not received" from the list: a list can
    /// be stale (an answer resent from before a restart, a replay not yet complete), and only
    /// the venue's answer about that order itself (OrderStatusRequest: "unknown order")
    /// closes it as never received.
    pub(super) fn reconcile(&mut self, emit: &mut impl FnMut(OutcomeKind)) -> Reconciliation {
        let mut result = Reconciliation::default();
        let listed = self.settings.reconcile == FixReconcile::MassStatus;
        self.venue_open.sort_unstable();
        for (&wire_ref, order) in self.by_ref.iter() {
            if order.closed || order.contradicted || !listed {
                continue;
            }
            if self.venue_open.binary_search(&wire_ref).is_ok() {
                continue;
            }
            result.in_doubt += 1;
            emit(OutcomeKind::Timeout { id: order.id });
        }
        result.unknown_at_keel = self.venue_unknown_open;
        result.contradictions = self.contradictions_open();
        self.stats.reconciliations += 1;
        self.stats.last_reconciliation = result;
        result
    }
}

/// An ExecID's fingerprint (FNV-1a over its bytes, then its length mixed in): what the
/// session remembers of an applied execution.
fn exec_id_fingerprint(exec_id: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in exec_id {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ exec_id.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn codec_value(tag: u32, expected: &'static str) -> FixError {
    FixError::Value {
        tag,
        value: codec::ValueText::new(b""),
        expected,
    }
}

fn side(side: Side) -> &'static [u8] {
    match side {
        Side::Buy => b"1",
        Side::Sell => b"2",
    }
}

fn tif(tif: TimeInForce) -> &'static [u8] {
    match tif {
        TimeInForce::Day => b"0",
        TimeInForce::ImmediateOrCancel => b"3",
    }
}
