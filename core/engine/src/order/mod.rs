//! The order model: identifiers, prices, commands from strategies, requests to venues,
//! outcomes from venues, events to strategies, and the fixed-capacity order table with its
//! lifecycle transition table.
//!
//! Everything here is a fixed-size `Copy` value so it can cross an SPSC ring without
//! allocation. Nothing here reads a clock or performs I/O.

mod id;
pub mod lifecycle;
mod msg;
mod position;
mod refusal;
mod symbol;
pub mod table;

pub use id::{ClientOrderId, IdAllocator, IdError, StrategyId, VenueId, CLIENT_ORDER_ID_TEXT_LEN};
pub use lifecycle::{LifecycleError, OrderEvent, OrderState};
pub use msg::{
    CancelRejectReason, Command, Contradiction, Event, EventKind, Execution, LinkMode,
    MassCancelScope, NewOrder, Outcome, OutcomeKind, ProtocolState, RejectReason, Replace,
    RequestKind, TaggedCommand, UnsentRequest, VenueRequest, PROTOCOL_STATE_MAX,
};
pub use position::{Position, PositionMismatch};
pub use refusal::{RefusalAdvice, RefusalReason};
pub use symbol::{SymbolError, SymbolId, SymbolName, SymbolTable, SYMBOL_NAME_LEN};
pub use table::{Order, OrderTable, TableError, TableStats};

/// Side of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Buy.
    Buy,
    /// Sell (long or short is the venue's concern).
    Sell,
}

impl Side {
    /// The other side.
    pub fn opposite(self) -> Self {
        match self {
            Self::Buy => Self::Sell,
            Self::Sell => Self::Buy,
        }
    }
}

/// How long an order rests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeInForce {
    /// Rests until the end of the trading day.
    Day,
    /// Fills what it can at once; the remainder is canceled by the venue.
    ImmediateOrCancel,
}

/// A price in fixed point with [`Price::SCALE`] units per currency unit (4 decimals, as OUCH
/// and most cash-equity venues quote). Never a float.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Price(pub i64);

impl Price {
    /// Fixed-point units per currency unit.
    pub const SCALE: i64 = 10_000;

    /// A price from whole currency units and ten-thousandths.
    pub const fn from_units(units: i64, ten_thousandths: i64) -> Self {
        Self(units * Self::SCALE + ten_thousandths)
    }
}

/// A quantity in shares or contracts. OUCH carries 32 bits; so does keel.
pub type Qty = u32;

/// Notional value in fixed-point price units (price × quantity), wide enough never to overflow.
pub type Notional = i128;

/// `price × qty` as a notional in fixed-point units.
#[inline]
pub fn notional(price: Price, qty: Qty) -> Notional {
    i128::from(price.0) * i128::from(qty)
}
