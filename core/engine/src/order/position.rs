//! A position: the shares one venue account bought and sold in one symbol, as keel booked them
//! from the fills it applied (or as the venue reports them in its reconciliation answer).
//!
//! Kept as two monotonic totals, never as a net figure: the venue's answer (`y`) carries both,
//! so reconciliation compares each item as the venue states it, and a fill booked twice shows
//! in the total of its side even when a fill of the other side would hide it in the net.

use super::{Qty, Side};

/// Shares bought and sold (since the venue session began, or since the figure keel adopted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// Shares bought.
    pub bought: u64,
    /// Shares sold.
    pub sold: u64,
}

impl Position {
    /// Books one execution of `qty` shares on `side`. Saturates (2^64 shares is no venue's
    /// day; a wrap would turn a long into a short).
    pub fn book(&mut self, side: Side, qty: Qty) {
        let total = match side {
            Side::Buy => &mut self.bought,
            Side::Sell => &mut self.sold,
        };
        *total = total.saturating_add(u64::from(qty));
    }

    /// Shares held: bought minus sold (negative: short).
    pub fn net(&self) -> i128 {
        i128::from(self.bought) - i128::from(self.sold)
    }

    /// Nothing bought or sold.
    pub fn is_flat_and_idle(&self) -> bool {
        self.bought == 0 && self.sold == 0
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bought {} sold {} (net {})",
            self.bought,
            self.sold,
            self.net()
        )
    }
}

/// One item of a reconciliation where keel's position and the venue's differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PositionMismatch {
    /// The symbol as the venue named it (it may be one keel does not trade).
    pub symbol: super::SymbolName,
    /// keel's figure.
    pub keel: Position,
    /// The venue's figure.
    pub venue: Position,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: each side's total moves only with its own executions, and saturates, never wraps.
    #[test]
    fn booking_keeps_each_side_and_saturates() {
        let mut p = Position::default();
        p.book(Side::Buy, 10);
        p.book(Side::Sell, 4);
        assert_eq!(
            p,
            Position {
                bought: 10,
                sold: 4
            }
        );
        assert_eq!(p.net(), 6);
        let mut top = Position {
            bought: u64::MAX - 1,
            sold: 0,
        };
        top.book(Side::Buy, u32::MAX);
        assert_eq!(top.bought, u64::MAX);
        assert_eq!(top.net(), i128::from(u64::MAX));
    }
}
