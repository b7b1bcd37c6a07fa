//! Pre-trade risk: valid limit prices and a price collar around each symbol's reference price
//! (the fat-finger control), per-order quantity and notional caps, worst-case position per
//! symbol, and the unknown-state gate (no new order on a symbol while one of its orders is
//! `Unknown`).
//!
//! Position is checked worst-case: filled position plus every open order on the same side, as
//! if all of them filled. Open quantity is reserved when an order is admitted and released
//! when it fills, closes or is refused.

use crate::order::{notional, Price, Qty, RefusalReason, Side, SymbolId};

/// Risk limits (one set for every symbol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RiskLimits {
    /// Largest quantity of one order.
    pub order_qty_max: Qty,
    /// Largest notional of one order, in fixed-point price units × quantity.
    pub order_notional_max: i64,
    /// Largest absolute worst-case position per symbol.
    pub position_max: i64,
    /// Refuse new orders on a symbol while one of its orders is `Unknown`.
    pub unknown_gate: bool,
    /// Largest limit price accepted (fixed point, 1/10,000); prices at or below zero are
    /// always refused.
    pub price_max: i64,
    /// Price collar: an order's price may differ from the symbol's reference price (its last
    /// fill, or one set by the embedder) by at most this many basis points. 0: no collar.
    pub price_collar_bps: u32,
}

impl Default for RiskLimits {
    fn default() -> Self {
        Self {
            order_qty_max: 10_000,
            order_notional_max: 1_000_000 * Price::SCALE,
            position_max: 100_000,
            unknown_gate: true,
            price_max: 1_000_000 * Price::SCALE,
            price_collar_bps: 1_000,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Exposure {
    position: i64,
    open_buy: i64,
    open_sell: i64,
    unknown_orders: u32,
    /// Reference price for the collar (0: none known yet: the collar waits for one).
    reference: i64,
}

/// Pre-trade risk state for every symbol.
#[derive(Debug, Clone)]
pub struct Risk {
    limits: RiskLimits,
    symbols: Vec<Exposure>,
}

impl Risk {
    /// Flat exposure on `symbols` symbols.
    pub fn new(limits: RiskLimits, symbols: u16) -> Self {
        Self {
            limits,
            symbols: vec![Exposure::default(); usize::from(symbols)],
        }
    }

    /// Checks a new order (or a replacement's additional open quantity) without changing state.
    #[inline]
    pub fn check(
        &self,
        symbol: SymbolId,
        side: Side,
        price: Price,
        qty: Qty,
        released_qty: Qty,
    ) -> Result<(), RefusalReason> {
        let l = &self.limits;
        self.check_price(symbol, price)?;
        if qty == 0 || qty > l.order_qty_max {
            return Err(RefusalReason::RiskQty);
        }
        if notional(price, qty).abs() > i128::from(l.order_notional_max) {
            return Err(RefusalReason::RiskNotional);
        }
        let e = &self.symbols[usize::from(symbol.0)];
        if l.unknown_gate && e.unknown_orders > 0 {
            return Err(RefusalReason::UnknownOrderOnSymbol);
        }
        let added = i64::from(qty) - i64::from(released_qty);
        let worst = match side {
            Side::Buy => e.position + e.open_buy + added,
            Side::Sell => -(e.position - e.open_sell - added),
        };
        if worst > l.position_max {
            return Err(RefusalReason::RiskPosition);
        }
        Ok(())
    }

    /// The reduce-only rule, for an order that already passed [`Self::check`]: filled together
    /// with every open order on its side (net of `released_qty`, what a replace gives back),
    /// the order must leave the symbol's position on the same side of zero or at zero. A buy
    /// reduces a short, a sell a long; on a flat position nothing can be reduced. Open orders
    /// on the other side are not counted: they add risk whether or not this order fills.
    #[inline]
    pub fn check_reduce_only(
        &self,
        symbol: SymbolId,
        side: Side,
        qty: Qty,
        released_qty: Qty,
    ) -> Result<(), RefusalReason> {
        let e = &self.symbols[usize::from(symbol.0)];
        let added = i64::from(qty) - i64::from(released_qty);
        // The position held against this side, and what this side could take off it.
        let (held, taking) = match side {
            Side::Sell => (e.position, e.open_sell + added),
            Side::Buy => (-e.position, e.open_buy + added),
        };
        if held <= 0 || taking > held {
            return Err(RefusalReason::ReduceOnlyIncreases);
        }
        Ok(())
    }

    /// A limit price must be positive, at most `price_max`, and inside the collar around the
    /// symbol's reference price when one is known.
    #[inline]
    fn check_price(&self, symbol: SymbolId, price: Price) -> Result<(), RefusalReason> {
        let l = &self.limits;
        if price.0 <= 0 || price.0 > l.price_max {
            return Err(RefusalReason::RiskPrice);
        }
        let reference = self.symbols[usize::from(symbol.0)].reference;
        if l.price_collar_bps > 0 && reference > 0 {
            // |price − ref| · 10,000 ≤ ref · bps, in i128: no overflow for any i64 price.
            let distance = (i128::from(price.0) - i128::from(reference)).abs() * 10_000;
            if distance > i128::from(reference) * i128::from(l.price_collar_bps) {
                return Err(RefusalReason::RiskPrice);
            }
        }
        Ok(())
    }

    /// Sets `symbol`'s reference price for the collar (a fill's price, a market-data mid, an
    /// operator's figure). Non-positive prices are ignored.
    pub fn set_reference(&mut self, symbol: SymbolId, price: Price) {
        if price.0 > 0 {
            self.symbols[usize::from(symbol.0)].reference = price.0;
        }
    }

    /// `symbol`'s reference price (`None`: none known yet).
    pub fn reference(&self, symbol: SymbolId) -> Option<Price> {
        let reference = self.symbols[usize::from(symbol.0)].reference;
        (reference > 0).then_some(Price(reference))
    }

    /// Reserves open quantity for an admitted order.
    #[inline]
    pub fn reserve(&mut self, symbol: SymbolId, side: Side, qty: Qty) {
        *self.open_mut(symbol, side) += i64::from(qty);
    }

    /// Releases open quantity that will never fill (cancel, reject, replace, refusal).
    #[inline]
    pub fn release(&mut self, symbol: SymbolId, side: Side, qty: Qty) {
        let open = self.open_mut(symbol, side);
        *open -= i64::from(qty);
        assert!(*open >= 0, "risk released more open quantity than reserved");
    }

    /// Moves filled quantity from open to position.
    #[inline]
    pub fn fill(&mut self, symbol: SymbolId, side: Side, qty: Qty) {
        self.release(symbol, side, qty);
        let e = &mut self.symbols[usize::from(symbol.0)];
        e.position += match side {
            Side::Buy => i64::from(qty),
            Side::Sell => -i64::from(qty),
        };
    }

    /// Books an execution that belongs to no open order (the venue stated it after the order
    /// closed, or past its quantity): the position moves, no open quantity is released.
    pub fn book_unmatched(&mut self, symbol: SymbolId, side: Side, qty: Qty) {
        let e = &mut self.symbols[usize::from(symbol.0)];
        e.position += match side {
            Side::Buy => i64::from(qty),
            Side::Sell => -i64::from(qty),
        };
    }

    /// Journal restore: the filled position on `symbol` is `position` (every fill on record,
    /// of open and closed orders alike).
    pub fn restore_position(&mut self, symbol: SymbolId, position: i64) {
        self.symbols[usize::from(symbol.0)].position = position;
    }

    /// An order on `symbol` became `Unknown` (+1) or was resolved (−1).
    pub fn unknown_changed(&mut self, symbol: SymbolId, became_unknown: bool) {
        let e = &mut self.symbols[usize::from(symbol.0)];
        if became_unknown {
            e.unknown_orders += 1;
        } else {
            assert!(e.unknown_orders > 0, "unknown count below zero");
            e.unknown_orders -= 1;
        }
    }

    /// Filled position on `symbol` (positive long).
    pub fn position(&self, symbol: SymbolId) -> i64 {
        self.symbols[usize::from(symbol.0)].position
    }

    /// Open (unfilled) quantity on `symbol` and `side`.
    pub fn open_qty(&self, symbol: SymbolId, side: Side) -> i64 {
        let e = &self.symbols[usize::from(symbol.0)];
        match side {
            Side::Buy => e.open_buy,
            Side::Sell => e.open_sell,
        }
    }

    /// Orders on `symbol` currently `Unknown`.
    pub fn unknown_orders(&self, symbol: SymbolId) -> u32 {
        self.symbols[usize::from(symbol.0)].unknown_orders
    }

    fn open_mut(&mut self, symbol: SymbolId, side: Side) -> &mut i64 {
        let e = &mut self.symbols[usize::from(symbol.0)];
        match side {
            Side::Buy => &mut e.open_buy,
            Side::Sell => &mut e.open_sell,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn risk() -> Risk {
        let limits = RiskLimits {
            order_qty_max: 100,
            order_notional_max: 1_000 * Price::SCALE,
            position_max: 150,
            unknown_gate: true,
            price_max: 100 * Price::SCALE,
            price_collar_bps: 500,
        };
        Risk::new(limits, 2)
    }

    // Goal: the price checks refuse zero, negative, above-maximum and outside-the-collar
    // prices with `RiskPrice` (worst legal and worst illegal values), and admit the edges.
    #[test]
    fn prices_are_valid_and_collared() {
        let mut r = risk();
        let s = SymbolId(0);
        let check = |r: &Risk, p: i64| r.check(s, Side::Buy, Price(p), 1, 0);
        for bad in [0, -1, i64::MIN, 100 * Price::SCALE + 1, i64::MAX] {
            assert_eq!(check(&r, bad), Err(RefusalReason::RiskPrice), "{bad}");
        }
        assert_eq!(check(&r, 1), Ok(()), "no reference yet: any valid price");
        assert_eq!(check(&r, 100 * Price::SCALE), Ok(()), "the maximum itself");
        r.set_reference(s, Price(10 * Price::SCALE));
        assert_eq!(check(&r, 1), Err(RefusalReason::RiskPrice), "fat finger");
        assert_eq!(check(&r, 10 * Price::SCALE * 105 / 100), Ok(()), "+5% edge");
        assert_eq!(check(&r, 10 * Price::SCALE * 95 / 100), Ok(()), "-5% edge");
        assert_eq!(
            check(&r, 10 * Price::SCALE * 105 / 100 + 1),
            Err(RefusalReason::RiskPrice)
        );
        r.set_reference(s, Price(-5));
        assert_eq!(
            r.reference(s),
            Some(Price(10 * Price::SCALE)),
            "bad reference ignored"
        );
    }

    #[test]
    fn per_order_caps() {
        let r = risk();
        let s = SymbolId(0);
        let px = Price::from_units(1, 0);
        assert_eq!(r.check(s, Side::Buy, px, 0, 0), Err(RefusalReason::RiskQty));
        assert_eq!(
            r.check(s, Side::Buy, px, 101, 0),
            Err(RefusalReason::RiskQty)
        );
        assert_eq!(
            r.check(s, Side::Buy, Price::from_units(11, 0), 100, 0),
            Err(RefusalReason::RiskNotional)
        );
        assert_eq!(r.check(s, Side::Buy, px, 100, 0), Ok(()));
    }

    // Goal: worst-case position counts open orders and fills on each side.
    #[test]
    fn worst_case_position() {
        let mut r = risk();
        let (s, px) = (SymbolId(1), Price::from_units(1, 0));
        r.reserve(s, Side::Buy, 100);
        assert_eq!(
            r.check(s, Side::Buy, px, 60, 0),
            Err(RefusalReason::RiskPosition)
        );
        assert_eq!(r.check(s, Side::Buy, px, 50, 0), Ok(()));
        r.fill(s, Side::Buy, 100);
        assert_eq!(r.position(s), 100);
        // Selling reduces the long: a sell of 100 leaves the worst case at 0 short.
        assert_eq!(r.check(s, Side::Sell, px, 100, 0), Ok(()));
        r.reserve(s, Side::Sell, 100);
        r.reserve(s, Side::Sell, 100);
        assert_eq!(
            r.check(s, Side::Sell, px, 100, 0),
            Err(RefusalReason::RiskPosition)
        );
        // A replace that lowers quantity is checked on its net addition.
        assert_eq!(r.check(s, Side::Sell, px, 60, 100), Ok(()));
    }

    // Goal: the reduce-only rule refuses an order on a flat position, one on the side that
    // increases the position, and one that with the open orders on its side could flip the
    // position past zero; it admits reducing to exactly zero, and a replace is judged net.
    #[test]
    fn reduce_only_never_increases_or_flips() {
        let mut r = risk();
        let s = SymbolId(0);
        let refused = Err(RefusalReason::ReduceOnlyIncreases);
        assert_eq!(r.check_reduce_only(s, Side::Sell, 1, 0), refused, "flat");
        assert_eq!(r.check_reduce_only(s, Side::Buy, 1, 0), refused, "flat");
        r.reserve(s, Side::Buy, 50);
        r.fill(s, Side::Buy, 50);
        assert_eq!(
            r.check_reduce_only(s, Side::Buy, 1, 0),
            refused,
            "adds to a long"
        );
        assert_eq!(r.check_reduce_only(s, Side::Sell, 50, 0), Ok(()), "to zero");
        assert_eq!(
            r.check_reduce_only(s, Side::Sell, 51, 0),
            refused,
            "flips short"
        );
        r.reserve(s, Side::Sell, 30);
        assert_eq!(r.check_reduce_only(s, Side::Sell, 20, 0), Ok(()));
        assert_eq!(
            r.check_reduce_only(s, Side::Sell, 21, 0),
            refused,
            "with the open sells it could flip"
        );
        // A replace of the open 30 to 50 adds 20 net: allowed; to 51: refused.
        assert_eq!(r.check_reduce_only(s, Side::Sell, 50, 30), Ok(()));
        assert_eq!(r.check_reduce_only(s, Side::Sell, 51, 30), refused);
        // A short: only buys reduce it.
        let (t, px) = (SymbolId(1), Price::from_units(1, 0));
        assert_eq!(r.check(t, Side::Sell, px, 40, 0), Ok(()));
        r.reserve(t, Side::Sell, 40);
        r.fill(t, Side::Sell, 40);
        assert_eq!(r.check_reduce_only(t, Side::Sell, 1, 0), refused);
        assert_eq!(r.check_reduce_only(t, Side::Buy, 40, 0), Ok(()));
        assert_eq!(
            r.check_reduce_only(t, Side::Buy, u32::MAX, 0),
            refused,
            "worst qty"
        );
    }

    #[test]
    fn unknown_gate_blocks_symbol_until_resolved() {
        let mut r = risk();
        let (s, px) = (SymbolId(0), Price::from_units(1, 0));
        r.unknown_changed(s, true);
        assert_eq!(
            r.check(s, Side::Buy, px, 1, 0),
            Err(RefusalReason::UnknownOrderOnSymbol)
        );
        assert_eq!(r.check(SymbolId(1), Side::Buy, px, 1, 0), Ok(()));
        r.unknown_changed(s, false);
        assert_eq!(r.check(s, Side::Buy, px, 1, 0), Ok(()));
    }
}
