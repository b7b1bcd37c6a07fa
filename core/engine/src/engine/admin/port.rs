//! The loop's end of the admin rings: at most one request per pass, answered with
//! fixed-size records (no allocation, no formatting, no lock), listings scanned a bounded number
//! of order-table slots per pass, and cancel-on-stop.

use super::*;

impl AdminPort {
    /// One pass: cancel-on-stop if asked, a listing under way, or one new request. Returns the
    /// units of work done.
    pub(in crate::engine) fn serve(
        &mut self,
        now_ns: u64,
        dispatcher: &mut Dispatcher,
        bridges: &[Bridge],
        shared: &Shared,
    ) -> u32 {
        let mut work = 0;
        if shared.stop_cancel.load(Ordering::Relaxed) {
            work += self.stop_cancel(now_ns, dispatcher, shared);
        }
        if let Some(listing) = self.listing {
            if listing.id() <= self.abandoned.load(Ordering::Acquire) {
                self.listing = None;
                return work;
            }
            return work + self.continue_listing(now_ns, listing, dispatcher, bridges);
        }
        // An answer needs room: leave the request in its ring until there is some.
        if self.replies.slots() == 0 {
            return work;
        }
        let Ok(request) = self.requests.pop() else {
            return work;
        };
        let id = request.id;
        if id <= self.abandoned.load(Ordering::Acquire) {
            return work + 1;
        }
        let answer = match request.command {
            AdminCommand::Status => {
                self.listing = Some(Listing::Status { id, stage: 0 });
                return work + 1;
            }
            AdminCommand::OpenOrders(scope) => {
                self.listing = Some(Listing::Orders {
                    id,
                    scope,
                    next_slot: 0,
                    rows: 0,
                });
                return work + 1;
            }
            AdminCommand::CancelAll(scope) => match dispatcher.operator_cancel(now_ns, scope) {
                Ok(done) => Answer::Canceled(done),
                Err(e) => Answer::Refused(e),
            },
            AdminCommand::Strategy(s, enabled) => {
                held(dispatcher.set_strategy_enabled(now_ns, s, enabled))
            }
            AdminCommand::Shed(symbol, on) => held(dispatcher.set_symbol_shed(now_ns, symbol, on)),
            AdminCommand::KillSwitch(false) if shared.stop_cancel.load(Ordering::Relaxed) => {
                Answer::Refused(OperatorError::Stopping)
            }
            AdminCommand::KillSwitch(on) => Answer::Held {
                withdrawn: dispatcher.set_kill_switch(now_ns, on),
            },
            AdminCommand::Breaker(venue, open) => {
                match dispatcher.force_breaker(now_ns, venue, open) {
                    Ok(()) => Answer::Done,
                    Err(e) => Answer::Refused(e),
                }
            }
        };
        let pushed = self.replies.push(AdminReply { id, answer });
        debug_assert!(pushed.is_ok(), "room was checked");
        work + 1
    }

    pub(super) fn stop_cancel(
        &mut self,
        now_ns: u64,
        dispatcher: &mut Dispatcher,
        shared: &Shared,
    ) -> u32 {
        if self.stop_cancel.started
            && now_ns.saturating_sub(self.stop_cancel.last_ns) < STOP_CANCEL_INTERVAL_NS
        {
            return 0;
        }
        if !self.stop_cancel.started {
            self.stop_cancel.started = true;
            dispatcher.set_kill_switch(now_ns, true);
        }
        self.stop_cancel.last_ns = now_ns;
        let everything = OperatorScope::default();
        let work = match dispatcher.operator_cancel(now_ns, everything) {
            Ok(done) => done.queued + done.withdrawn,
            Err(_) => 0,
        };
        // What is still open after this run, then the run itself: the stop trusts the count
        // only once a run has happened.
        shared.open_orders.store(
            u64::from(dispatcher.table().open_count()),
            Ordering::Release,
        );
        shared.stop_cancel_runs.fetch_add(1, Ordering::AcqRel);
        work
    }

    pub(super) fn continue_listing(
        &mut self,
        now_ns: u64,
        listing: Listing,
        dispatcher: &Dispatcher,
        bridges: &[Bridge],
    ) -> u32 {
        match listing {
            Listing::Status { id, stage } => self.list_status(id, stage, dispatcher, bridges),
            Listing::Orders {
                id,
                scope,
                next_slot,
                rows,
            } => self.list_orders(now_ns, id, scope, next_slot, rows, dispatcher),
        }
    }

    /// Stage 0: the summary; then one row per venue, per strategy, per shed symbol; the end.
    pub(super) fn list_status(
        &mut self,
        id: u64,
        mut stage: u32,
        dispatcher: &Dispatcher,
        bridges: &[Bridge],
    ) -> u32 {
        let venues = dispatcher.guards().venues.len() as u32;
        let strategies = dispatcher.strategy_count() as u32;
        let symbols = dispatcher.symbol_count();
        let last = 1 + venues + strategies + symbols;
        let mut work = 0;
        while stage <= last && self.replies.slots() > 0 {
            let answer = if stage == 0 {
                Some(Answer::Summary {
                    dispatch: *dispatcher.stats(),
                    open_orders: dispatcher.table().open_count(),
                    kill_switch: dispatcher.kill_switch(),
                })
            } else if stage <= venues {
                let v = VenueId((stage - 1) as u16);
                let guards = &dispatcher.guards().venues[usize::from(v.0)];
                Some(Answer::Venue(VenueRow {
                    venue: v,
                    mode: dispatcher.link_mode(v),
                    breaker_open: guards.breaker.is_open(),
                    breaker: guards.breaker.stats(),
                    lanes: dispatcher.lane_depths(v).unwrap_or_default(),
                }))
            } else if stage <= venues + strategies {
                let s = StrategyId((stage - 1 - venues) as u16);
                // No walk of the strategy's orders here: a pass stays bounded (`open-orders
                // strategy N` lists them, a scan bounded per pass).
                Some(Answer::Strategy(StrategyRow {
                    strategy: s,
                    disabled: dispatcher.strategy_disabled(s),
                    bridge: bridges
                        .iter()
                        .find(|b| b.strategy() == s)
                        .map(Bridge::stats),
                }))
            } else if stage <= venues + strategies + symbols {
                let symbol = SymbolId((stage - 1 - venues - strategies) as u16);
                dispatcher
                    .symbol_shed(symbol)
                    .then_some(Answer::ShedSymbol(symbol))
            } else {
                Some(Answer::End)
            };
            if let Some(answer) = answer {
                let pushed = self.replies.push(AdminReply { id, answer });
                debug_assert!(pushed.is_ok(), "room was checked");
                work += 1;
            }
            stage += 1;
        }
        self.listing = (stage <= last).then_some(Listing::Status { id, stage });
        work
    }

    pub(super) fn list_orders(
        &mut self,
        now_ns: u64,
        id: u64,
        scope: OperatorScope,
        mut next_slot: u32,
        mut rows: u32,
        dispatcher: &Dispatcher,
    ) -> u32 {
        let table = dispatcher.table();
        let end = next_slot
            .saturating_add(SCAN_PER_PASS)
            .min(table.capacity());
        while next_slot < end && self.replies.slots() > 1 {
            if let Some(order) = table
                .slot(next_slot)
                .filter(|o| !o.state.is_terminal() && scope.covers(o))
            {
                let age_ns = if order.sent_ns == 0 {
                    0
                } else {
                    now_ns.saturating_sub(order.sent_ns)
                };
                let answer = Answer::Order {
                    order: *order,
                    age_ns,
                };
                let pushed = self.replies.push(AdminReply { id, answer });
                debug_assert!(pushed.is_ok(), "room was checked");
                rows += 1;
            }
            next_slot += 1;
        }
        if next_slot >= table.capacity() && self.replies.slots() > 0 {
            let pushed = self.replies.push(AdminReply {
                id,
                answer: Answer::End,
            });
            debug_assert!(pushed.is_ok(), "room was checked");
            self.listing = None;
        } else {
            self.listing = Some(Listing::Orders {
                id,
                scope,
                next_slot,
                rows,
            });
        }
        1
    }
}

pub(super) fn held(result: Result<u32, OperatorError>) -> Answer {
    match result {
        Ok(withdrawn) => Answer::Held { withdrawn },
        Err(e) => Answer::Refused(e),
    }
}
