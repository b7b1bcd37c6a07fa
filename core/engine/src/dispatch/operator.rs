//! What an operator can do to a running dispatcher (`keel ctl`, docs/operations.md): cancel
//! open orders by strategy, symbol and venue; hold new orders back engine-wide (the kill
//! switch), per strategy or per symbol; force a venue's breaker open or closed for a drill.
//! Each is a cold path taken once per operator command: it walks the order table but never
//! allocates.
//!
//! Holding new orders back never touches cancels: they flow as always. New orders and
//! replaces not yet released to the venue when a hold starts are withdrawn (each closes as
//! `Canceled` to its strategy, a queued replace leaves its original standing): nothing held
//! back leaves later by surprise.

use super::{Dispatcher, MassCancelStep};
use crate::order::{Order, OrderState, RefusalReason, StrategyId, SymbolId, VenueId};

/// Which open orders an operator command covers: every order matching all the fields given
/// (none given: every open order of the engine).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatorScope {
    /// Only this strategy's orders.
    pub strategy: Option<StrategyId>,
    /// Only orders on this symbol.
    pub symbol: Option<SymbolId>,
    /// Only orders on this venue.
    pub venue: Option<VenueId>,
}

impl OperatorScope {
    /// Whether `order` is covered.
    pub fn covers(&self, order: &Order) -> bool {
        self.strategy.is_none_or(|s| order.strategy == s)
            && self.symbol.is_none_or(|s| order.symbol == s)
            && self.venue.is_none_or(|v| order.venue == v)
    }
}

/// What an operator's cancel did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatorCancel {
    /// Open orders the scope covered.
    pub covered: u32,
    /// Cancels queued for the wire (answered by the venue).
    pub queued: u32,
    /// Orders that had not left yet, closed here (`Canceled`).
    pub withdrawn: u32,
    /// Orders in doubt (`Unknown`): their status query goes first; cancel again once
    /// resolved.
    pub in_doubt: u32,
    /// Orders already canceling (or covered through their replacement).
    pub already: u32,
    /// Orders left uncanceled because their venue's cancel lane was full: run it again.
    pub lane_full: u32,
}

/// Why an operator command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    /// No such strategy in this configuration.
    #[error("no strategy {0} (there are {1} strategies, numbered from 0)")]
    NoStrategy(u16, u16),
    /// No such symbol.
    #[error("no symbol index {0} (there are {1} symbols, numbered from 0)")]
    NoSymbol(u16, u16),
    /// No such venue.
    #[error("no venue index {0} (there are {1} venues, numbered from 0)")]
    NoVenue(u16, u16),
    /// The engine is stopping with cancel-on-stop: the kill switch stays on.
    #[error("the engine is stopping (cancel on stop): the kill switch stays on")]
    Stopping,
}

/// Engine-wide and per-strategy / per-symbol holds on new orders.
#[derive(Debug, Clone)]
pub(super) struct Holds {
    /// The kill switch: no new order or replace leaves; cancels and queries flow.
    pub(super) kill_switch: bool,
    /// Per strategy: disabled by an operator.
    pub(super) strategy_disabled: Vec<bool>,
    /// Per symbol: shed by an operator ("close non-core symbols").
    pub(super) symbol_shed: Vec<bool>,
    /// Per symbol: shed by the adaptive controller. Kept apart from the operator's, so the
    /// controller's restore never lifts an operator's hold (and the other way round).
    pub(super) symbol_shed_by_control: Vec<bool>,
}

impl Holds {
    pub(super) fn new(strategies: u16, symbols: u16) -> Self {
        Self {
            kill_switch: false,
            strategy_disabled: vec![false; usize::from(strategies)],
            symbol_shed: vec![false; usize::from(symbols)],
            symbol_shed_by_control: vec![false; usize::from(symbols)],
        }
    }

    /// Why a new order or replace from `strategy` on `symbol` is held back, if it is. A
    /// reduce-only order passes a symbol shed (by the operator or the controller: both shed
    /// load, not risk-reducing orders); the kill switch and a disabled strategy stop it too,
    /// as the operator's explicit "nothing new from here".
    #[inline]
    pub(super) fn block(
        &self,
        strategy: StrategyId,
        symbol: SymbolId,
        reduce_only: bool,
    ) -> Option<RefusalReason> {
        if self.kill_switch {
            Some(RefusalReason::KillSwitch)
        } else if self.strategy_disabled[usize::from(strategy.0)] {
            Some(RefusalReason::StrategyDisabled)
        } else if !reduce_only
            && (self.symbol_shed[usize::from(symbol.0)]
                || self.symbol_shed_by_control[usize::from(symbol.0)])
        {
            Some(RefusalReason::SymbolShed)
        } else {
            None
        }
    }
}

impl Dispatcher {
    fn check_scope(&self, scope: OperatorScope) -> Result<(), OperatorError> {
        let c = &self.config;
        if let Some(s) = scope.strategy.filter(|s| s.0 >= c.strategies) {
            return Err(OperatorError::NoStrategy(s.0, c.strategies));
        }
        if let Some(s) = scope.symbol.filter(|s| s.0 >= c.symbols) {
            return Err(OperatorError::NoSymbol(s.0, c.symbols));
        }
        if let Some(v) = scope.venue.filter(|v| v.0 >= c.venues) {
            return Err(OperatorError::NoVenue(v.0, c.venues));
        }
        Ok(())
    }

    /// Cancels every open order `scope` covers, as far as the cancel lanes have room (unlike
    /// a strategy's mass cancel, never all-or-nothing: an operator's cancel takes what it
    /// can and says what is left). Each strategy hears its orders' answers as usual.
    pub fn operator_cancel(
        &mut self,
        now_ns: u64,
        scope: OperatorScope,
    ) -> Result<OperatorCancel, OperatorError> {
        self.check_scope(scope)?;
        let mut done = OperatorCancel::default();
        for s in 0..self.config.strategies {
            let mut at = self.table.first_open(StrategyId(s));
            while let Some(slot) = at {
                at = self.table.next_open(slot);
                let order = *self
                    .table
                    .slot(slot)
                    .expect("open list names occupied slots");
                if !scope.covers(&order) {
                    continue;
                }
                done.covered += 1;
                match self.cancel_step(&order) {
                    MassCancelStep::Skip => done.already += 1,
                    MassCancelStep::SkipUnknown => {
                        self.stats.mass_cancel_skipped += 1;
                        done.in_doubt += 1;
                    }
                    MassCancelStep::Local => {
                        self.withdraw(now_ns, &order);
                        done.withdrawn += 1;
                    }
                    MassCancelStep::Wire => {
                        let target = match order.linked.filter(|_| order.sent_ns == 0) {
                            Some(original) => original,
                            None => order.id,
                        };
                        let venue = usize::from(order.venue.0);
                        if self.venues[venue].cancels.free() == 0 {
                            self.stats.cancel_lane_full += 1;
                            done.lane_full += 1;
                            continue;
                        }
                        if target != order.id {
                            self.withdraw_replacement(now_ns, &order, target);
                        }
                        self.queue_cancel(now_ns, target);
                        done.queued += 1;
                    }
                }
            }
        }
        Ok(done)
    }

    /// The kill switch: on, no new order or replace is admitted (refused `KillSwitch`) and
    /// those not yet released are withdrawn; cancels, queries and market data flow. Returns
    /// how many were withdrawn.
    pub fn set_kill_switch(&mut self, now_ns: u64, on: bool) -> u32 {
        self.holds.kill_switch = on;
        if on {
            self.withdraw_unsent(now_ns, OperatorScope::default(), false)
        } else {
            0
        }
    }

    /// Whether the kill switch is on.
    pub fn kill_switch(&self) -> bool {
        self.holds.kill_switch
    }

    /// Disables (or enables) one strategy's new orders and replaces (refused
    /// `StrategyDisabled`; its unreleased ones withdrawn). Its cancels flow.
    pub fn set_strategy_enabled(
        &mut self,
        now_ns: u64,
        strategy: StrategyId,
        enabled: bool,
    ) -> Result<u32, OperatorError> {
        let scope = OperatorScope {
            strategy: Some(strategy),
            ..OperatorScope::default()
        };
        self.check_scope(scope)?;
        self.holds.strategy_disabled[usize::from(strategy.0)] = !enabled;
        Ok(if enabled {
            0
        } else {
            self.withdraw_unsent(now_ns, scope, false)
        })
    }

    /// Whether an operator disabled `strategy`.
    pub fn strategy_disabled(&self, strategy: StrategyId) -> bool {
        self.holds
            .strategy_disabled
            .get(usize::from(strategy.0))
            .copied()
            .unwrap_or(false)
    }

    /// Sheds (or stops shedding) one symbol's new orders and replaces on every venue
    /// (refused `SymbolShed`; unreleased ones withdrawn). Its cancels flow.
    pub fn set_symbol_shed(
        &mut self,
        now_ns: u64,
        symbol: SymbolId,
        on: bool,
    ) -> Result<u32, OperatorError> {
        self.shed_hold(now_ns, symbol, on, false)
    }

    /// One of the two shed holds on `symbol` (the operator's, or the controller's) on or off;
    /// returns the unreleased orders withdrawn.
    fn shed_hold(
        &mut self,
        now_ns: u64,
        symbol: SymbolId,
        on: bool,
        by_control: bool,
    ) -> Result<u32, OperatorError> {
        let scope = OperatorScope {
            symbol: Some(symbol),
            ..OperatorScope::default()
        };
        self.check_scope(scope)?;
        let holds = if by_control {
            &mut self.holds.symbol_shed_by_control
        } else {
            &mut self.holds.symbol_shed
        };
        holds[usize::from(symbol.0)] = on;
        Ok(if on {
            self.withdraw_unsent(now_ns, scope, true)
        } else {
            0
        })
    }

    /// Whether an operator shed `symbol`.
    pub fn symbol_shed(&self, symbol: SymbolId) -> bool {
        self.holds
            .symbol_shed
            .get(usize::from(symbol.0))
            .copied()
            .unwrap_or(false)
    }

    /// The adaptive controller sheds (or stops shedding) one symbol's new orders and replaces
    /// (refused `SymbolShed`, unreleased ones withdrawn), apart from any operator's shed.
    pub fn set_symbol_shed_by_control(
        &mut self,
        now_ns: u64,
        symbol: SymbolId,
        on: bool,
    ) -> Result<u32, OperatorError> {
        self.shed_hold(now_ns, symbol, on, true)
    }

    /// Counts one adaptive controller command, applied or refused.
    pub fn count_control_command(&mut self, applied: bool) {
        if applied {
            self.stats.control_commands += 1;
        } else {
            self.stats.control_refused += 1;
        }
    }

    /// Whether the adaptive controller sheds `symbol`.
    pub fn symbol_shed_by_control(&self, symbol: SymbolId) -> bool {
        self.holds
            .symbol_shed_by_control
            .get(usize::from(symbol.0))
            .copied()
            .unwrap_or(false)
    }

    /// The adaptive controller caps venue `venue`'s new orders and replaces at `permille` ‰
    /// of its first rate window (clamped to 1..=1000; 1000 lifts the cap). Cancels and queries
    /// are never capped by it.
    pub fn set_new_order_permille(
        &mut self,
        now_ns: u64,
        venue: VenueId,
        permille: u32,
    ) -> Result<(), OperatorError> {
        let scope = OperatorScope {
            venue: Some(venue),
            ..OperatorScope::default()
        };
        self.check_scope(scope)?;
        self.guards.venues[usize::from(venue.0)]
            .limiter
            .set_new_order_permille(now_ns, permille);
        Ok(())
    }

    /// Venue `venue`'s new-order cap, ‰ (1000: none; 0: no such venue).
    pub fn new_order_permille(&self, venue: VenueId) -> u32 {
        self.guards
            .venues
            .get(usize::from(venue.0))
            .map_or(0, |g| g.limiter.new_order_permille())
    }

    /// Venue `venue`'s limiter: weight admitted for new orders and replaces so far, and its
    /// first window's rate in weight per second (zeros: no such venue).
    pub fn new_order_weight(&self, venue: VenueId) -> (u64, u64) {
        self.guards
            .venues
            .get(usize::from(venue.0))
            .map_or((0, 0), |g| {
                (
                    g.limiter.admitted_new_weight(),
                    g.limiter.weight_per_second(),
                )
            })
    }

    /// Venue throttle rejects venue `venue` sent (new orders and replaces refused for rate).
    pub fn venue_throttle_rejects(&self, venue: VenueId) -> u64 {
        self.guards
            .venues
            .get(usize::from(venue.0))
            .map_or(0, |g| g.limiter.throttle_events())
    }

    /// Cancels venue `venue` refused on orders it still held open.
    pub fn venue_cancel_refusals(&self, venue: VenueId) -> u64 {
        self.guards
            .venues
            .get(usize::from(venue.0))
            .map_or(0, |g| g.limiter.cancel_refusals())
    }

    /// Forces venue `venue`'s breaker open (for its configured open duration, as a trip) or
    /// closed (a clean window), for drills. Every transition is counted in its stats.
    pub fn force_breaker(
        &mut self,
        now_ns: u64,
        venue: VenueId,
        open: bool,
    ) -> Result<(), OperatorError> {
        let scope = OperatorScope {
            venue: Some(venue),
            ..OperatorScope::default()
        };
        self.check_scope(scope)?;
        let breaker = &mut self.guards.venues[usize::from(venue.0)].breaker;
        if open {
            breaker.force_open(now_ns);
        } else {
            breaker.force_close();
        }
        Ok(())
    }

    /// Withdraws every covered new order or replace that has not left yet.
    /// `spare_reduce_only`: a symbol shed leaves queued reduce-only orders (and replaces of
    /// them) to leave; the kill switch and a disabled strategy take them back too.
    fn withdraw_unsent(
        &mut self,
        now_ns: u64,
        scope: OperatorScope,
        spare_reduce_only: bool,
    ) -> u32 {
        let mut withdrawn = 0;
        for s in 0..self.config.strategies {
            let mut at = self.table.first_open(StrategyId(s));
            while let Some(slot) = at {
                at = self.table.next_open(slot);
                let order = *self
                    .table
                    .slot(slot)
                    .expect("open list names occupied slots");
                if order.state != OrderState::PendingNew || order.sent_ns != 0 {
                    continue;
                }
                if !scope.covers(&order) || (spare_reduce_only && order.reduce_only) {
                    continue;
                }
                match order.linked {
                    Some(original) => self.withdraw_replacement(now_ns, &order, original),
                    None => self.withdraw(now_ns, &order),
                }
                withdrawn += 1;
            }
        }
        withdrawn
    }

    /// Closes a new order still in its lane (`Canceled`; nothing on the wire).
    fn withdraw(&mut self, now_ns: u64, order: &Order) {
        let removed = self.venues[usize::from(order.venue.0)]
            .new_lane_mut(order.reduce_only)
            .remove(order.symbol, order.id);
        assert!(removed.is_some(), "unsent new order is in its lane");
        self.cancel_unsent(now_ns, order.id);
    }

    /// What cancelling one open order takes (as a strategy's mass cancel would).
    fn cancel_step(&self, order: &Order) -> MassCancelStep {
        self.mass_cancel_step(order, crate::order::MassCancelScope::Strategy)
    }
}
