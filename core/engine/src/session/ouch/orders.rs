//! OUCH order mapping: keel's requests to OUCH messages (UserRefNums assigned strictly
//! ascending, the session's order map kept within `orders_max`), and every venue message back
//! to one [`Mapped`] meaning, checked against the session's view of the order (an execution
//! that cannot be true is a contradiction, never booked).

use super::*;

impl OuchClient {
    /// Encodes a dispatcher request as one SoupBinTCP packet carrying an OUCH message.
    pub fn encode_request(
        &mut self,
        request: &VenueRequest,
        out: &mut [u8],
    ) -> Result<usize, RequestError> {
        let mut msg = [0u8; 128];
        let dialect = self.config.dialect;
        let n = match request.kind {
            RequestKind::New(order) => {
                let user_ref = self.assign(request.wire_ref, order.id, order.qty, order.price.0)?;
                self.update(user_ref, |o| {
                    o.ioc = order.tif == TimeInForce::ImmediateOrCancel;
                    o.buy = order.side == Side::Buy;
                    o.symbol = order.symbol;
                });
                self.await_answer(user_ref, request.sent_ns);
                let order = self.fields(&order)?;
                encode_inbound(
                    &mut msg,
                    &Inbound::EnterOrder(EnterOrder {
                        user_ref,
                        order,
                        appendages: &[],
                    }),
                    dialect,
                )?
            }
            RequestKind::Cancel { id } => {
                let user_ref = self.user_ref(id).ok_or(RequestError::UnknownOrder(id))?;
                self.update(user_ref, |o| o.cancel_pending = true);
                self.await_answer(user_ref, request.sent_ns);
                encode_inbound(
                    &mut msg,
                    &Inbound::CancelOrder { user_ref, qty: 0 },
                    dialect,
                )?
            }
            RequestKind::Replace(r) => self.encode_replace(&r, request, &mut msg)?,
            RequestKind::Query { id } => {
                let user_ref = self.user_ref(id).ok_or(RequestError::UnknownOrder(id))?;
                self.await_answer(user_ref, request.sent_ns);
                let query = match self.config.reconcile {
                    ReconcileMode::KeelExtension => Inbound::OrderStatusQuery { user_ref },
                    ReconcileMode::AccountQueryBarrier => {
                        let barrier = self.next_barrier();
                        self.update(user_ref, |o| o.barrier = barrier);
                        Inbound::AccountQuery
                    }
                };
                encode_inbound(&mut msg, &query, dialect)?
            }
            // Handled by the link (it reconciles); nothing of it goes on the wire.
            RequestKind::Reconcile { .. } => return Err(RequestError::NotWire),
        };
        Ok(soupbin::encode_client(
            out,
            &ClientPacket::Unsequenced(&msg[..n]),
        )?)
    }

    pub(super) fn encode_replace(
        &mut self,
        r: &Replace,
        request: &VenueRequest,
        msg: &mut [u8],
    ) -> Result<usize, RequestError> {
        let sent_ns = request.sent_ns;
        let orig_user_ref = self
            .user_ref(r.id)
            .ok_or(RequestError::UnknownOrder(r.id))?;
        let (buy, symbol) = self
            .by_user_ref
            .get(&orig_user_ref)
            .map_or((false, SymbolId(0)), |o| (o.buy, o.symbol));
        let user_ref = self.assign(request.wire_ref, r.new_id, r.qty, r.price.0)?;
        self.update(user_ref, |o| {
            o.buy = buy;
            o.symbol = symbol;
        });
        self.await_answer(user_ref, sent_ns);
        let replace = ReplaceOrder {
            orig_user_ref,
            user_ref,
            qty: r.qty,
            price: r.price.0,
            tif: b'0',
            display: b'Y',
            ise: b'N',
            cl_ord_id: cl_ord_id(r.new_id),
            appendages: &[],
        };
        Ok(encode_inbound(
            msg,
            &Inbound::ReplaceOrder(replace),
            self.config.dialect,
        )?)
    }

    /// Takes `wire_ref` (the dispatcher's, journaled with the intent) as the order's
    /// UserRefNum, or the session's next one when the request carries none (0).
    pub(super) fn assign(
        &mut self,
        wire_ref: u32,
        id: ClientOrderId,
        qty: u32,
        price: i64,
    ) -> Result<u32, RequestError> {
        let user_ref = match wire_ref {
            0 => self.next_user_ref,
            // The same request encoded again: its bytes never reached the socket (the send
            // buffer was full, so the link keeps the request and encodes it once more). The
            // order keeps its reference; refusing it would reject an order this session still
            // holds as sent.
            r if self
                .by_user_ref
                .get(&r)
                .is_some_and(|o| o.id == id && !o.accepted && !o.closed) =>
            {
                return Ok(r);
            }
            r if r < self.next_user_ref => {
                return Err(RequestError::StaleWireRef {
                    got: r,
                    last: self.next_user_ref - 1,
                })
            }
            r => r,
        };
        // The last reference OUCH can carry is never used, so a venue's "next is 2^32 - 1"
        // (its worst legal answer) refuses new orders instead of wrapping or reusing one.
        if user_ref == u32::MAX {
            return Err(RequestError::WireRefsExhausted { next: user_ref });
        }
        self.make_room()?;
        self.next_user_ref = user_ref.saturating_add(1);
        let order = SessionOrder {
            id,
            qty,
            executed: 0,
            price,
            accepted: false,
            closed: false,
            ioc: false,
            buy: false,
            cancel_pending: false,
            awaiting_since_ns: None,
            contradicted: false,
            inferred: 0,
            barrier: 0,
            gap_doubt: false,
            symbol: SymbolId(0),
        };
        self.by_user_ref.insert(user_ref, order);
        self.by_id.insert(id, user_ref);
        Ok(user_ref)
    }

    /// Makes room for one more order: forgets the longest-closed one (O(1), no scan), or
    /// refuses when every order in the map is open (or in doubt): their fills and cancels
    /// must still map, and the map never grows past its sizing.
    pub(super) fn make_room(&mut self) -> Result<(), RequestError> {
        while self.by_user_ref.len() >= self.config.orders_max as usize {
            let Some(user_ref) = self.closed_order.pop_front() else {
                self.stats.session_full += 1;
                return Err(RequestError::SessionFull {
                    orders_max: self.config.orders_max,
                });
            };
            if let Some(order) = self.by_user_ref.remove(&user_ref) {
                self.by_id.remove(&order.id);
                self.stats.forgotten += 1;
            }
        }
        Ok(())
    }

    /// Marks `user_ref`'s order closed (once) and queues it to be forgotten last-closed-last.
    pub(super) fn close(&mut self, user_ref: u32) {
        if let Some(order) = self.by_user_ref.get_mut(&user_ref) {
            if !order.closed {
                order.closed = true;
                if self.closed_order.len() < self.closed_order.capacity() {
                    self.closed_order.push_back(user_ref);
                }
            }
        }
    }

    pub(super) fn fields(&self, order: &NewOrder) -> Result<OrderFields, RequestError> {
        let symbol = *self
            .config
            .symbols
            .get(usize::from(order.symbol.0))
            .ok_or(RequestError::UnknownSymbol(order.symbol.0))?;
        Ok(OrderFields {
            side: if order.side == Side::Buy { b'B' } else { b'S' },
            qty: order.qty,
            symbol,
            price: order.price.0,
            tif: if order.tif == TimeInForce::ImmediateOrCancel {
                b'3'
            } else {
                b'0'
            },
            display: b'Y',
            capacity: b'A',
            ise: b'N',
            cross_type: b'N',
            cl_ord_id: cl_ord_id(order.id),
        })
    }

    /// Checks a report against what this session knows of `user_ref`'s order: an execution
    /// or acknowledgement for an order never sent, one after the order closed, or executions
    /// beyond its quantity cannot be true. The order is flagged (never guessed at).
    pub(super) fn check_report(&mut self, user_ref: u32, executed: u32) -> Result<(), Mapped> {
        let Some(order) = self.by_user_ref.get_mut(&user_ref) else {
            self.stats.unknown_order_ref += 1;
            self.orphan_contradictions = self.orphan_contradictions.saturating_add(1);
            self.note_contradiction(Contradiction::UnknownOrder);
            return Err(Mapped::Contradiction(None, Contradiction::UnknownOrder));
        };
        let what = if order.closed {
            Contradiction::AfterClose
        } else if u64::from(order.executed) + u64::from(executed) > u64::from(order.qty) {
            Contradiction::Overfill
        } else {
            return Ok(());
        };
        order.contradicted = true;
        order.awaiting_since_ns = None;
        let id = order.id;
        self.note_contradiction(what);
        Err(Mapped::Contradiction(Some(id), what))
    }

    /// An execution of a known, open order must be at a positive price no worse than its limit
    /// (a venue may improve on it, never go through it). Otherwise the report is a
    /// contradiction like an overfill: not applied, the order flagged and in doubt. Found by
    /// core/cli/tests/hostile_venue.rs (`lie off-limit-fill`): such a fill was applied, reached the
    /// strategy, and became the pre-trade collar's reference price.
    pub(super) fn check_execution_price(
        &mut self,
        user_ref: u32,
        price: i64,
    ) -> Result<(), Mapped> {
        let order = self
            .by_user_ref
            .get_mut(&user_ref)
            .expect("check_report found it");
        let through = if order.buy {
            price > order.price
        } else {
            price < order.price
        };
        if price > 0 && !through {
            return Ok(());
        }
        order.contradicted = true;
        order.awaiting_since_ns = None;
        let id = order.id;
        self.note_contradiction(Contradiction::ExecutionPrice);
        Err(Mapped::Contradiction(
            Some(id),
            Contradiction::ExecutionPrice,
        ))
    }

    /// Takes up to `qty` shares of `user_ref`'s inferred executions (booked from a status
    /// answer before their reports arrived); returns how many.
    pub(super) fn absorb_inferred(&mut self, user_ref: u32, qty: u32) -> u32 {
        let Some(order) = self.by_user_ref.get_mut(&user_ref) else {
            return 0;
        };
        let taken = order.inferred.min(qty);
        order.inferred -= taken;
        if taken > 0 {
            self.stats.late_reports_absorbed += 1;
        }
        taken
    }

    pub(super) fn map(&mut self, msg: &Outbound<'_>) -> Mapped {
        let kind = match *msg {
            Outbound::Accepted(a) => {
                if let Err(contradiction) = self.check_report(a.user_ref, 0) {
                    return contradiction;
                }
                self.update(a.user_ref, |o| {
                    o.accepted = true;
                    if !o.ioc {
                        o.awaiting_since_ns = None;
                    }
                });
                OutcomeKind::Accepted {
                    id: self.known(a.user_ref),
                }
            }
            Outbound::Replaced(a) => {
                if let Err(contradiction) = self.check_report(a.orig_user_ref, 0) {
                    return contradiction;
                }
                if let Err(contradiction) = self.check_report(a.user_ref, 0) {
                    return contradiction;
                }
                self.close(a.orig_user_ref);
                self.update(a.user_ref, |o| {
                    o.accepted = true;
                    o.awaiting_since_ns = None;
                });
                OutcomeKind::Replaced {
                    id: self.known(a.orig_user_ref),
                    new_id: self.known(a.user_ref),
                }
            }
            Outbound::Executed {
                user_ref,
                qty,
                price,
                ..
            } => {
                // Shares a status answer already booked: this report is their execution. (A
                // report of zero shares is not one: it goes on, to be refused as it must.)
                let absorbed = self.absorb_inferred(user_ref, qty);
                let qty = qty - absorbed;
                if absorbed > 0 && qty == 0 {
                    return Mapped::Nothing;
                }
                let checked = self
                    .check_report(user_ref, qty)
                    .and_then(|()| self.check_execution_price(user_ref, price));
                if let Err(contradiction) = checked {
                    let order = self.by_user_ref.get(&user_ref).copied();
                    return match (contradiction, order) {
                        (Mapped::Contradiction(Some(id), what), Some(o)) if qty > 0 => {
                            let execution = crate::order::Execution {
                                symbol: o.symbol,
                                side: if o.buy { Side::Buy } else { Side::Sell },
                                qty,
                                price: Price(price),
                            };
                            Mapped::UnmatchedExecution(id, what, execution)
                        }
                        (other, _) => other,
                    };
                }
                self.update(user_ref, |o| {
                    o.accepted = true;
                    o.executed += qty;
                });
                let order = self.by_user_ref[&user_ref];
                // `check_report` refused anything past the order's quantity: a fill is never
                // booked beyond it.
                debug_assert!(
                    order.executed <= order.qty,
                    "{:?}: executed {} of {}",
                    order.id,
                    order.executed,
                    order.qty
                );
                self.book_fill(order.symbol, order.buy, qty);
                if order.executed >= order.qty {
                    self.close(user_ref);
                }
                if !order.ioc || order.executed >= order.qty {
                    self.update(user_ref, |o| o.awaiting_since_ns = None);
                }
                OutcomeKind::Fill {
                    id: order.id,
                    qty,
                    price: Price(price),
                }
            }
            Outbound::Canceled { user_ref, .. } | Outbound::AiqCanceled { user_ref, .. } => {
                let Some(id) = self.id(user_ref) else {
                    return Mapped::Nothing; // closing an order keel does not track: counted
                };
                self.update(user_ref, |o| {
                    o.cancel_pending = false;
                    o.awaiting_since_ns = None;
                });
                self.close(user_ref);
                OutcomeKind::Canceled { id }
            }
            Outbound::Rejected {
                user_ref, reason, ..
            } => {
                let Some(id) = self.id(user_ref) else {
                    return Mapped::Nothing;
                };
                self.close(user_ref);
                OutcomeKind::Rejected {
                    id,
                    reason: self.config.rejects.reason(reason),
                }
            }
            // OUCH's cancel reject carries no reason: the order was not open to cancel (or the
            // venue refused the cancel, e.g. over its rate limit). Either way the cancel is
            // answered: nothing is pending any more, so a later status answer or barrier must
            // not answer it a second time.
            Outbound::CancelReject { user_ref, .. } => {
                let Some(id) = self.id(user_ref) else {
                    return Mapped::Nothing;
                };
                self.update(user_ref, |o| {
                    o.cancel_pending = false;
                    o.awaiting_since_ns = None;
                });
                OutcomeKind::CancelRejected {
                    id,
                    reason: CancelRejectReason::TooLateToCancel,
                }
            }
            Outbound::OrderStatus(status) => {
                // An answer to a status query, or part of a reconciliation answer.
                if status.state == b'L' && self.venue_open.len() < self.venue_open.capacity() {
                    self.venue_open.push(status.user_ref);
                }
                return self.resolve(&status);
            }
            Outbound::BrokenTrade { .. } => {
                self.stats.broken_trades += 1;
                return Mapped::Nothing;
            }
            // Part of a reconciliation answer: compared when its end (`z`) arrives.
            Outbound::Position {
                symbol,
                bought_qty,
                sold_qty,
                ..
            } => {
                let venue = Position {
                    bought: bought_qty,
                    sold: sold_qty,
                };
                self.note_venue_position(symbol, venue);
                return Mapped::Nothing;
            }
            _ => {
                self.stats.informational += 1;
                return Mapped::Nothing;
            }
        };
        Mapped::Outcome(kind)
    }

    /// What a status answer tells keel that it did not know: at most one outcome — the
    /// acceptance, the fills it missed (at the order's limit price: the venue's status does
    /// not carry execution prices), or the close. Anything else changes nothing. An answer
    /// claiming more executed than the order's quantity is a contradiction.
    pub(super) fn resolve(&mut self, status: &crate::proto::ouch::OrderStatus) -> Mapped {
        let Some(order) = self.by_user_ref.get_mut(&status.user_ref) else {
            return Mapped::Nothing;
        };
        order.awaiting_since_ns = None;
        if order.closed || order.contradicted {
            return Mapped::Nothing;
        }
        if status.executed_qty > order.qty {
            order.contradicted = true;
            let id = order.id;
            self.note_contradiction(Contradiction::Overfill);
            return Mapped::Contradiction(Some(id), Contradiction::Overfill);
        }
        let id = order.id;
        let (kind, closes) = match status.state {
            b'U' => (
                OutcomeKind::Rejected {
                    id,
                    reason: RejectReason::NotReceived,
                },
                true,
            ),
            _ if status.executed_qty > order.executed => {
                let qty = status.executed_qty - order.executed;
                order.executed = status.executed_qty;
                order.inferred = order.inferred.saturating_add(qty);
                order.accepted = true;
                // Booked once here; the execution reports that follow are absorbed.
                let side = if order.buy { Side::Buy } else { Side::Sell };
                if let Some(p) = self.positions.get_mut(usize::from(order.symbol.0)) {
                    p.book(side, qty);
                }
                let kind = OutcomeKind::Fill {
                    id,
                    qty,
                    price: Price(order.price),
                };
                (kind, order.executed >= order.qty)
            }
            b'L' if !order.accepted => {
                order.accepted = true;
                (OutcomeKind::Accepted { id }, false)
            }
            b'L' if order.cancel_pending => {
                order.cancel_pending = false;
                let kind = OutcomeKind::CancelRejected {
                    id,
                    reason: CancelRejectReason::NotApplied,
                };
                (kind, false)
            }
            // Open exactly as keel knew it: a confirmation (settles an order keel has in doubt;
            // the dispatcher ignores it otherwise).
            b'L' => (OutcomeKind::StillOpen { id }, false),
            b'D' => (OutcomeKind::Canceled { id }, true),
            _ => return Mapped::Nothing,
        };
        if closes {
            self.close(status.user_ref);
        }
        self.stats.resolutions += 1;
        Mapped::Outcome(kind)
    }

    /// Starts the ack clock for a request on `user_ref`.
    pub(super) fn await_answer(&mut self, user_ref: u32, sent_ns: u64) {
        self.update(user_ref, |o| o.awaiting_since_ns = Some(sent_ns));
        if self.deadlines.len() < self.deadlines.capacity() {
            self.deadlines
                .push_back((sent_ns.saturating_add(self.config.ack_timeout_ns), user_ref));
        }
    }

    pub(super) fn update(&mut self, user_ref: u32, change: impl FnOnce(&mut SessionOrder)) {
        if let Some(order) = self.by_user_ref.get_mut(&user_ref) {
            change(order);
        }
    }

    /// The id of an order `check_report` found in the map.
    pub(super) fn known(&self, user_ref: u32) -> ClientOrderId {
        self.by_user_ref[&user_ref].id
    }

    pub(super) fn id(&mut self, user_ref: u32) -> Option<ClientOrderId> {
        let id = self.by_user_ref.get(&user_ref).map(|o| o.id);
        if id.is_none() {
            self.stats.unknown_order_ref += 1;
        }
        id
    }
}

/// What one venue message means for the session.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mapped {
    /// An outcome for the dispatcher.
    Outcome(OutcomeKind),
    /// A report that cannot be true, about this order (if keel knows it).
    Contradiction(Option<ClientOrderId>, Contradiction),
    /// An execution that cannot be applied to its order (after it closed, past its quantity,
    /// through its limit): a contradiction, and booked into the position all the same (the
    /// venue says shares moved).
    UnmatchedExecution(ClientOrderId, Contradiction, crate::order::Execution),
    /// Nothing for the dispatcher.
    Nothing,
}

/// keel's ClientOrderId as an OUCH ClOrdID: 13 base-36 characters and one space.
pub fn cl_ord_id(id: ClientOrderId) -> ClOrdId {
    let mut out = [b' '; 14];
    let mut text = [0u8; CLIENT_ORDER_ID_TEXT_LEN];
    id.encode_text(&mut text);
    out[..CLIENT_ORDER_ID_TEXT_LEN].copy_from_slice(&text);
    out
}
