//! OUCH 5.0 order-entry messages: the ones a full order lifecycle needs, both directions,
//! plus keel's extension for order-status queries (types `q` and `o`, documented in
//! docs/protocol.md; OUCH itself has no per-order status query).
//!
//! Integers are big-endian binary; prices are signed 64-bit with four implied decimals
//! (keel's [`crate::order::Price`] scale); alpha fields are space padded. Messages that carry
//! optional appendages keep them as a borrowed, validated TLV byte string.
//!
//! [`Dialect`] covers the two layouts seen in practice: the published one (`SPEC`: 8-byte
//! Symbol, Order Canceled without the original UserRefNum) and the one the `ouch-connect`
//! package uses (`OUCH_CONNECT`: 9-byte Symbol, Order Canceled with OrigUserRefNum), which
//! keel's interoperability tests run against.

use super::wire::{check_alpha, check_code, DecodeError, EncodeError, Reader, Writer};
use crate::order::{SymbolName, SYMBOL_NAME_LEN};

/// Width of ClOrdID.
pub const CL_ORD_ID_LEN: usize = 14;
/// A ClOrdID, space padded.
pub type ClOrdId = [u8; CL_ORD_ID_LEN];

/// Layout differences between OUCH 5.0 implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// Bytes of the Symbol field on the wire (8 in the specification).
    pub symbol_len: usize,
    /// Order Canceled carries OrigUserRefNum before UserRefNum.
    pub canceled_orig_user_ref: bool,
}

impl Dialect {
    /// The published layout.
    pub const SPEC: Self = Self {
        symbol_len: 8,
        canceled_orig_user_ref: false,
    };
    /// The layout of the `ouch-connect` package (PyPI) 5.0.x, observed on the wire.
    pub const OUCH_CONNECT: Self = Self {
        symbol_len: 9,
        canceled_orig_user_ref: true,
    };

    /// The name a configuration file and `keel venue --dialect` use (`spec`, `ouch-connect`);
    /// `None` for a layout built in code that neither names.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Self::SPEC => Some("spec"),
            Self::OUCH_CONNECT => Some("ouch-connect"),
            _ => None,
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(
                f,
                "custom (symbol {} bytes{})",
                self.symbol_len,
                if self.canceled_orig_user_ref {
                    ", OrigUserRefNum in Order Canceled"
                } else {
                    ""
                }
            ),
        }
    }
}

const SIDES: &[u8] = b"BSTE";
const TIME_IN_FORCE: &[u8] = b"0356E";
const DISPLAY: &[u8] = b"YNAZ";
const CAPACITY: &[u8] = b"APRO";
const ISE: &[u8] = b"YN";
const CROSS_TYPE: &[u8] = b"NOCHSREA";
const ORDER_STATE: &[u8] = b"LD";

/// The order fields shared by Enter Order, Order Accepted and Order Replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderFields {
    /// 'B' buy, 'S' sell, 'T' sell short, 'E' sell short exempt.
    pub side: u8,
    /// Shares.
    pub qty: u32,
    /// Symbol, space padded to 8.
    pub symbol: SymbolName,
    /// Price, four implied decimals.
    pub price: i64,
    /// '0' day, '3' IOC, '5' GTX, '6' GTT, 'E' after hours.
    pub tif: u8,
    /// 'Y' visible, 'N' hidden, 'A' attributable (Z accepted from peers).
    pub display: u8,
    /// 'A' agency, 'P' principal, 'R' riskless, 'O' other.
    pub capacity: u8,
    /// Intermarket sweep eligibility 'Y'/'N'.
    pub ise: u8,
    /// Cross type ('N' continuous market, ...).
    pub cross_type: u8,
    /// Customer order id.
    pub cl_ord_id: ClOrdId,
}

/// Enter Order ('O').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnterOrder<'a> {
    /// Day-unique, strictly increasing per account.
    pub user_ref: u32,
    /// The order.
    pub order: OrderFields,
    /// Optional appendages (validated TLVs).
    pub appendages: &'a [u8],
}

/// Replace Order ('U').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplaceOrder<'a> {
    /// The order being replaced.
    pub orig_user_ref: u32,
    /// The replacement's UserRefNum.
    pub user_ref: u32,
    /// New total shares.
    pub qty: u32,
    /// New price.
    pub price: i64,
    /// Time in force.
    pub tif: u8,
    /// Display.
    pub display: u8,
    /// Intermarket sweep eligibility.
    pub ise: u8,
    /// ClOrdID of the replacement.
    pub cl_ord_id: ClOrdId,
    /// Optional appendages.
    pub appendages: &'a [u8],
}

/// Messages a client sends (carried in SoupBinTCP unsequenced data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound<'a> {
    /// 'O'.
    EnterOrder(EnterOrder<'a>),
    /// 'U'.
    ReplaceOrder(ReplaceOrder<'a>),
    /// 'X': reduce the order to `qty` shares (0 cancels it).
    CancelOrder {
        /// The order.
        user_ref: u32,
        /// Shares to leave open (0: cancel all).
        qty: u32,
    },
    /// 'M': change side or reduce quantity.
    ModifyOrder {
        /// The order.
        user_ref: u32,
        /// New side.
        side: u8,
        /// New quantity.
        qty: u32,
    },
    /// 'Q': ask for the next expected UserRefNum.
    AccountQuery,
    /// 'q' (keel extension): ask for one order's state.
    OrderStatusQuery {
        /// The order.
        user_ref: u32,
    },
    /// 'r' (keel extension): ask for every open order ('o' each) and every position ('y'
    /// each), closed by one 'z' that echoes `token`.
    ReconcileQuery {
        /// Chosen by the client, echoed in the answer's end marker (a stale answer replayed
        /// after a reconnect is told apart from the current one by it).
        token: u32,
    },
}

/// Order Accepted ('A') and, with `orig_user_ref`, Order Replaced ('U').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderAccepted<'a> {
    /// Venue timestamp (ns since midnight).
    pub timestamp: u64,
    /// For Order Replaced: the order replaced. Zero for Order Accepted.
    pub orig_user_ref: u32,
    /// The order.
    pub user_ref: u32,
    /// The order as accepted.
    pub order: OrderFields,
    /// Venue order reference number.
    pub order_ref: u64,
    /// 'L' live, 'D' dead.
    pub state: u8,
    /// Optional appendages.
    pub appendages: &'a [u8],
}

/// keel's order status report ('o').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderStatus {
    /// Venue timestamp.
    pub timestamp: u64,
    /// The order asked about.
    pub user_ref: u32,
    /// 'L' live, 'D' dead (filled, canceled or rejected), 'U' unknown to the venue.
    pub state: u8,
    /// Side.
    pub side: u8,
    /// Symbol.
    pub symbol: SymbolName,
    /// Limit price.
    pub price: i64,
    /// Shares still open.
    pub open_qty: u32,
    /// Shares executed.
    pub executed_qty: u32,
    /// Customer order id.
    pub cl_ord_id: ClOrdId,
}

/// The reject codes of keel's OUCH venue, carried in Order Rejected's Reason field (OUCH leaves
/// the table to each venue; this is keel's, documented in docs/protocol.md). The session reads
/// a venue's codes through this table, the simulated venue writes them: both depend on the
/// protocol definition, neither on the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum RejectCode {
    /// Quantity zero or above the venue maximum.
    InvalidQuantity = 1,
    /// Price not positive, above the venue's maximum, or outside its collar around the
    /// symbol's reference price.
    InvalidPrice = 2,
    /// Symbol not listed.
    UnknownSymbol = 3,
    /// UserRefNum not above the last one, or ClOrdID already used today.
    DuplicateId = 4,
    /// Over the account's message rate limit.
    Throttled = 5,
    /// Rejected by fault injection ("venue system problem").
    SystemUnavailable = 6,
    /// The order to replace is not open.
    UnknownOrder = 7,
}

impl RejectCode {
    /// The code from its wire value.
    pub fn from_wire(code: u16) -> Option<Self> {
        [
            Self::InvalidQuantity,
            Self::InvalidPrice,
            Self::UnknownSymbol,
            Self::DuplicateId,
            Self::Throttled,
            Self::SystemUnavailable,
            Self::UnknownOrder,
        ]
        .into_iter()
        .find(|c| *c as u16 == code)
    }
}

/// Messages the venue sends (carried in SoupBinTCP sequenced data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outbound<'a> {
    /// 'S'.
    SystemEvent {
        /// Venue timestamp.
        timestamp: u64,
        /// 'S' start of day, 'E' end of day.
        event_code: u8,
    },
    /// 'A'.
    Accepted(OrderAccepted<'a>),
    /// 'U'.
    Replaced(OrderAccepted<'a>),
    /// 'C': `qty` shares were taken off the order (incremental).
    Canceled {
        /// Venue timestamp.
        timestamp: u64,
        /// OrigUserRefNum where the dialect carries it; else equal to `user_ref`.
        orig_user_ref: u32,
        /// The order.
        user_ref: u32,
        /// Shares canceled now.
        qty: u32,
        /// Reason code ('U' user requested, ...).
        reason: u8,
    },
    /// 'D': canceled by self-match prevention (AIQ).
    AiqCanceled {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
        /// Shares taken off.
        decrement_qty: u32,
        /// Reason code.
        reason: u8,
        /// Shares prevented from trading.
        prevented_qty: u32,
        /// Price of the prevented execution.
        execution_price: i64,
        /// Liquidity flag.
        liquidity_flag: u8,
        /// AIQ strategy.
        aiq_strategy: u8,
    },
    /// 'E'.
    Executed {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
        /// Shares executed in this fill.
        qty: u32,
        /// Execution price.
        price: i64,
        /// Liquidity flag.
        liquidity_flag: u8,
        /// Venue match number.
        match_number: u64,
        /// Optional appendages.
        appendages: &'a [u8],
    },
    /// 'B': an execution was broken.
    BrokenTrade {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
        /// The execution's match number.
        match_number: u64,
        /// Reason code.
        reason: u8,
        /// Customer order id.
        cl_ord_id: ClOrdId,
    },
    /// 'J'.
    Rejected {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
        /// Reason code (binary).
        reason: u16,
        /// Customer order id.
        cl_ord_id: ClOrdId,
    },
    /// 'P'.
    CancelPending {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
    },
    /// 'I'.
    CancelReject {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
    },
    /// 'T'.
    PriorityUpdate {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
        /// Price.
        price: i64,
        /// Display.
        display: u8,
        /// Venue order reference number.
        order_ref: u64,
    },
    /// 'M'.
    Modified {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
        /// Side.
        side: u8,
        /// Quantity.
        qty: u32,
    },
    /// 'R'.
    Restated {
        /// Venue timestamp.
        timestamp: u64,
        /// The order.
        user_ref: u32,
        /// Reason code.
        reason: u8,
        /// Appendages with the restated values.
        appendages: &'a [u8],
    },
    /// 'Q'.
    AccountQueryResponse {
        /// Venue timestamp.
        timestamp: u64,
        /// Next UserRefNum the venue expects.
        next_user_ref: u32,
    },
    /// 'o' (keel extension).
    OrderStatus(OrderStatus),
    /// 'y' (keel extension): the account's net position in one symbol.
    Position {
        /// Venue timestamp.
        timestamp: u64,
        /// Symbol.
        symbol: SymbolName,
        /// Shares bought today.
        bought_qty: u64,
        /// Shares sold today.
        sold_qty: u64,
    },
    /// 'z' (keel extension): the end of a reconciliation answer.
    ReconcileEnd {
        /// Venue timestamp.
        timestamp: u64,
        /// The query's token.
        token: u32,
        /// Open orders reported.
        open_orders: u32,
        /// Positions reported.
        positions: u32,
        /// The sequence number this answer is consistent with: every message up to it is
        /// reflected (the answer itself follows it in the stream).
        as_of_sequence: u64,
    },
}

// ----- decoding ------------------------------------------------------------------------------

/// Decodes one client message.
pub fn decode_inbound(msg: &[u8], dialect: Dialect) -> Result<Inbound<'_>, DecodeError> {
    let Some(&msg_type) = msg.first() else {
        return Err(DecodeError::Length {
            msg_type: 0,
            expected: 1,
            got: 0,
        });
    };
    match msg_type {
        b'O' => {
            let mut r = Reader::new(msg, msg_type, 39 + dialect.symbol_len)?;
            r.skip(1);
            let user_ref = r.u32();
            let side = check_code("Side", r.u8(), SIDES)?;
            let qty = r.u32();
            let symbol = symbol(&mut r, dialect)?;
            let price = r.i64();
            let order = order_tail(&mut r, side, qty, symbol, price)?;
            let appendages = appendages(&mut r, msg_type)?;
            Ok(Inbound::EnterOrder(EnterOrder {
                user_ref,
                order,
                appendages,
            }))
        }
        b'U' => {
            let mut r = Reader::new(msg, msg_type, 40)?;
            r.skip(1);
            let (orig_user_ref, user_ref, qty, price) = (r.u32(), r.u32(), r.u32(), r.i64());
            let tif = check_code("Time In Force", r.u8(), TIME_IN_FORCE)?;
            let display = check_code("Display", r.u8(), DISPLAY)?;
            let ise = check_code("InterMarket Sweep Eligibility", r.u8(), ISE)?;
            let cl_ord_id = cl_ord_id(&mut r)?;
            let appendages = appendages(&mut r, msg_type)?;
            Ok(Inbound::ReplaceOrder(ReplaceOrder {
                orig_user_ref,
                user_ref,
                qty,
                price,
                tif,
                display,
                ise,
                cl_ord_id,
                appendages,
            }))
        }
        b'X' => {
            let mut r = Reader::exact(msg, msg_type, 9)?;
            r.skip(1);
            Ok(Inbound::CancelOrder {
                user_ref: r.u32(),
                qty: r.u32(),
            })
        }
        b'M' => {
            let mut r = Reader::exact(msg, msg_type, 10)?;
            r.skip(1);
            let user_ref = r.u32();
            let side = check_code("Side", r.u8(), SIDES)?;
            Ok(Inbound::ModifyOrder {
                user_ref,
                side,
                qty: r.u32(),
            })
        }
        b'Q' => Reader::exact(msg, msg_type, 1).map(|_| Inbound::AccountQuery),
        b'q' => {
            let mut r = Reader::exact(msg, msg_type, 5)?;
            r.skip(1);
            Ok(Inbound::OrderStatusQuery { user_ref: r.u32() })
        }
        b'r' => {
            let mut r = Reader::exact(msg, msg_type, 5)?;
            r.skip(1);
            Ok(Inbound::ReconcileQuery { token: r.u32() })
        }
        byte => Err(DecodeError::UnknownType {
            protocol: "OUCH",
            byte,
        }),
    }
}

/// Decodes one venue message.
pub fn decode_outbound(msg: &[u8], dialect: Dialect) -> Result<Outbound<'_>, DecodeError> {
    let Some(&msg_type) = msg.first() else {
        return Err(DecodeError::Length {
            msg_type: 0,
            expected: 1,
            got: 0,
        });
    };
    match msg_type {
        b'S' => {
            let mut r = exact_after_type(msg, 10)?;
            Ok(Outbound::SystemEvent {
                timestamp: r.u64(),
                event_code: alpha_byte(&mut r, "Event Code")?,
            })
        }
        b'A' => decode_accepted(msg, dialect, false).map(Outbound::Accepted),
        b'U' => decode_accepted(msg, dialect, true).map(Outbound::Replaced),
        b'C' => {
            let len = if dialect.canceled_orig_user_ref {
                22
            } else {
                18
            };
            let mut r = exact_after_type(msg, len)?;
            let timestamp = r.u64();
            let orig = if dialect.canceled_orig_user_ref {
                Some(r.u32())
            } else {
                None
            };
            let user_ref = r.u32();
            let qty = r.u32();
            let reason = alpha_byte(&mut r, "Reason")?;
            Ok(Outbound::Canceled {
                timestamp,
                orig_user_ref: orig.unwrap_or(user_ref),
                user_ref,
                qty,
                reason,
            })
        }
        b'D' => {
            let mut r = exact_after_type(msg, 32)?;
            Ok(Outbound::AiqCanceled {
                timestamp: r.u64(),
                user_ref: r.u32(),
                decrement_qty: r.u32(),
                reason: alpha_byte(&mut r, "Reason")?,
                prevented_qty: r.u32(),
                execution_price: r.i64(),
                liquidity_flag: alpha_byte(&mut r, "Liquidity Flag")?,
                aiq_strategy: alpha_byte(&mut r, "AIQ Strategy")?,
            })
        }
        b'E' => {
            let mut r = Reader::new(msg, msg_type, 36)?;
            r.skip(1);
            let (timestamp, user_ref, qty, price) = (r.u64(), r.u32(), r.u32(), r.i64());
            let liquidity_flag = alpha_byte(&mut r, "Liquidity Flag")?;
            let match_number = r.u64();
            let appendages = appendages(&mut r, msg_type)?;
            Ok(Outbound::Executed {
                timestamp,
                user_ref,
                qty,
                price,
                liquidity_flag,
                match_number,
                appendages,
            })
        }
        b'B' => {
            let mut r = exact_after_type(msg, 36)?;
            let (timestamp, user_ref, match_number) = (r.u64(), r.u32(), r.u64());
            let reason = alpha_byte(&mut r, "Reason")?;
            Ok(Outbound::BrokenTrade {
                timestamp,
                user_ref,
                match_number,
                reason,
                cl_ord_id: cl_ord_id(&mut r)?,
            })
        }
        b'J' => {
            let mut r = exact_after_type(msg, 29)?;
            let (timestamp, user_ref, reason) = (r.u64(), r.u32(), r.u16());
            Ok(Outbound::Rejected {
                timestamp,
                user_ref,
                reason,
                cl_ord_id: cl_ord_id(&mut r)?,
            })
        }
        b'P' => {
            let mut r = exact_after_type(msg, 13)?;
            Ok(Outbound::CancelPending {
                timestamp: r.u64(),
                user_ref: r.u32(),
            })
        }
        b'I' => {
            let mut r = exact_after_type(msg, 13)?;
            Ok(Outbound::CancelReject {
                timestamp: r.u64(),
                user_ref: r.u32(),
            })
        }
        b'T' => {
            let mut r = exact_after_type(msg, 30)?;
            let (timestamp, user_ref, price) = (r.u64(), r.u32(), r.i64());
            let display = check_code("Display", r.u8(), DISPLAY)?;
            Ok(Outbound::PriorityUpdate {
                timestamp,
                user_ref,
                price,
                display,
                order_ref: r.u64(),
            })
        }
        b'M' => {
            let mut r = exact_after_type(msg, 18)?;
            let (timestamp, user_ref) = (r.u64(), r.u32());
            let side = check_code("Side", r.u8(), SIDES)?;
            Ok(Outbound::Modified {
                timestamp,
                user_ref,
                side,
                qty: r.u32(),
            })
        }
        b'R' => {
            let mut r = Reader::new(msg, msg_type, 16)?;
            r.skip(1);
            let (timestamp, user_ref) = (r.u64(), r.u32());
            let reason = alpha_byte(&mut r, "Restate Reason")?;
            Ok(Outbound::Restated {
                timestamp,
                user_ref,
                reason,
                appendages: appendages(&mut r, msg_type)?,
            })
        }
        b'Q' => {
            let mut r = exact_after_type(msg, 13)?;
            Ok(Outbound::AccountQueryResponse {
                timestamp: r.u64(),
                next_user_ref: r.u32(),
            })
        }
        b'o' => {
            let mut r = Reader::exact(msg, msg_type, 45 + dialect.symbol_len)?;
            r.skip(1);
            let (timestamp, user_ref) = (r.u64(), r.u32());
            let state = check_code("Order State", r.u8(), b"LDU")?;
            let side = check_code("Side", r.u8(), SIDES)?;
            let symbol = symbol(&mut r, dialect)?;
            let (price, open_qty, executed_qty) = (r.i64(), r.u32(), r.u32());
            let cl_ord_id = cl_ord_id(&mut r)?;
            Ok(Outbound::OrderStatus(OrderStatus {
                timestamp,
                user_ref,
                state,
                side,
                symbol,
                price,
                open_qty,
                executed_qty,
                cl_ord_id,
            }))
        }
        b'y' => {
            let mut r = Reader::exact(msg, msg_type, 25 + dialect.symbol_len)?;
            r.skip(1);
            let timestamp = r.u64();
            let symbol = symbol(&mut r, dialect)?;
            Ok(Outbound::Position {
                timestamp,
                symbol,
                bought_qty: r.u64(),
                sold_qty: r.u64(),
            })
        }
        b'z' => {
            let mut r = exact_after_type(msg, 29)?;
            Ok(Outbound::ReconcileEnd {
                timestamp: r.u64(),
                token: r.u32(),
                open_orders: r.u32(),
                positions: r.u32(),
                as_of_sequence: r.u64(),
            })
        }
        byte => Err(DecodeError::UnknownType {
            protocol: "OUCH",
            byte,
        }),
    }
}

fn exact_after_type(msg: &[u8], len: usize) -> Result<Reader<'_>, DecodeError> {
    let mut r = Reader::exact(msg, msg[0], len)?;
    r.skip(1);
    Ok(r)
}

fn decode_accepted(
    msg: &[u8],
    dialect: Dialect,
    replaced: bool,
) -> Result<OrderAccepted<'_>, DecodeError> {
    let fixed = 56 + dialect.symbol_len + if replaced { 4 } else { 0 };
    let mut r = Reader::new(msg, msg[0], fixed)?;
    r.skip(1);
    let timestamp = r.u64();
    let orig_user_ref = if replaced { r.u32() } else { 0 };
    let user_ref = r.u32();
    let side = check_code("Side", r.u8(), SIDES)?;
    let qty = r.u32();
    let symbol = symbol(&mut r, dialect)?;
    let price = r.i64();
    let tif = check_code("Time In Force", r.u8(), TIME_IN_FORCE)?;
    let display = check_code("Display", r.u8(), DISPLAY)?;
    let order_ref = r.u64();
    let capacity = check_code("Capacity", r.u8(), CAPACITY)?;
    let ise = check_code("InterMarket Sweep Eligibility", r.u8(), ISE)?;
    let cross_type = check_code("Cross Type", r.u8(), CROSS_TYPE)?;
    let state = check_code("Order State", r.u8(), ORDER_STATE)?;
    let cl_ord_id = cl_ord_id(&mut r)?;
    let appendages = appendages(&mut r, msg[0])?;
    let order = OrderFields {
        side,
        qty,
        symbol,
        price,
        tif,
        display,
        capacity,
        ise,
        cross_type,
        cl_ord_id,
    };
    Ok(OrderAccepted {
        timestamp,
        orig_user_ref,
        user_ref,
        order,
        order_ref,
        state,
        appendages,
    })
}

fn order_tail(
    r: &mut Reader<'_>,
    side: u8,
    qty: u32,
    symbol: SymbolName,
    price: i64,
) -> Result<OrderFields, DecodeError> {
    let tif = check_code("Time In Force", r.u8(), TIME_IN_FORCE)?;
    let display = check_code("Display", r.u8(), DISPLAY)?;
    let capacity = check_code("Capacity", r.u8(), CAPACITY)?;
    let ise = check_code("InterMarket Sweep Eligibility", r.u8(), ISE)?;
    let cross_type = check_code("Cross Type", r.u8(), CROSS_TYPE)?;
    let cl_ord_id = cl_ord_id(r)?;
    Ok(OrderFields {
        side,
        qty,
        symbol,
        price,
        tif,
        display,
        capacity,
        ise,
        cross_type,
        cl_ord_id,
    })
}

fn symbol(r: &mut Reader<'_>, dialect: Dialect) -> Result<SymbolName, DecodeError> {
    let wire = r.slice(dialect.symbol_len);
    check_alpha("Symbol", wire)?;
    let (name, extra) = wire.split_at(SYMBOL_NAME_LEN.min(wire.len()));
    if let Some(&b) = extra.iter().find(|&&b| b != b' ') {
        return Err(DecodeError::BadField {
            field: "Symbol",
            value: u64::from(b),
        });
    }
    let mut out = [b' '; SYMBOL_NAME_LEN];
    out[..name.len()].copy_from_slice(name);
    Ok(out)
}

fn cl_ord_id(r: &mut Reader<'_>) -> Result<ClOrdId, DecodeError> {
    let id: ClOrdId = r.array();
    check_alpha("ClOrdID", &id)?;
    Ok(id)
}

fn alpha_byte(r: &mut Reader<'_>, field: &'static str) -> Result<u8, DecodeError> {
    let b = r.u8();
    check_alpha(field, &[b]).map(|()| b)
}

/// Reads the appendage length and checks the appendages are well-formed TLVs
/// (`[length][tag][value]`, length counting tag and value) filling exactly that length.
fn appendages<'a>(r: &mut Reader<'a>, msg_type: u8) -> Result<&'a [u8], DecodeError> {
    let len = usize::from(r.u16());
    let rest = r.rest();
    if rest.len() != len {
        // Report whole-message lengths: what the appendage length implies, and what arrived.
        let before = r.consumed() as u32;
        return Err(DecodeError::Length {
            msg_type,
            expected: before + len as u32,
            got: before + rest.len() as u32,
        });
    }
    let mut at = 0;
    while at < rest.len() {
        let element = usize::from(rest[at]);
        if element == 0 || at + 1 + element > rest.len() {
            return Err(DecodeError::BadField {
                field: "Optional Appendage",
                value: element as u64,
            });
        }
        at += 1 + element;
    }
    Ok(r.slice(len))
}

// ----- encoding ------------------------------------------------------------------------------

/// Encodes one client message into `out`; returns the bytes written.
pub fn encode_inbound(
    out: &mut [u8],
    msg: &Inbound<'_>,
    dialect: Dialect,
) -> Result<usize, EncodeError> {
    match msg {
        Inbound::EnterOrder(e) => {
            let mut w = Writer::new(out, 39 + dialect.symbol_len + e.appendages.len())?;
            w.u8(b'O').u32(e.user_ref).u8(e.order.side).u32(e.order.qty);
            w.alpha(&e.order.symbol, dialect.symbol_len)
                .i64(e.order.price);
            let o = &e.order;
            w.u8(o.tif)
                .u8(o.display)
                .u8(o.capacity)
                .u8(o.ise)
                .u8(o.cross_type)
                .bytes(&o.cl_ord_id);
            appendages_out(&mut w, e.appendages)?;
            Ok(w.written())
        }
        Inbound::ReplaceOrder(u) => {
            let mut w = Writer::new(out, 40 + u.appendages.len())?;
            w.u8(b'U')
                .u32(u.orig_user_ref)
                .u32(u.user_ref)
                .u32(u.qty)
                .i64(u.price);
            w.u8(u.tif).u8(u.display).u8(u.ise).bytes(&u.cl_ord_id);
            appendages_out(&mut w, u.appendages)?;
            Ok(w.written())
        }
        Inbound::CancelOrder { user_ref, qty } => {
            let mut w = Writer::new(out, 9)?;
            w.u8(b'X').u32(*user_ref).u32(*qty);
            Ok(w.written())
        }
        Inbound::ModifyOrder {
            user_ref,
            side,
            qty,
        } => {
            let mut w = Writer::new(out, 10)?;
            w.u8(b'M').u32(*user_ref).u8(*side).u32(*qty);
            Ok(w.written())
        }
        Inbound::AccountQuery => Writer::new(out, 1).map(|mut w| w.u8(b'Q').written()),
        Inbound::ReconcileQuery { token } => {
            let mut w = Writer::new(out, 5)?;
            w.u8(b'r').u32(*token);
            Ok(w.written())
        }
        Inbound::OrderStatusQuery { user_ref } => {
            let mut w = Writer::new(out, 5)?;
            w.u8(b'q').u32(*user_ref);
            Ok(w.written())
        }
    }
}

/// Encodes one venue message into `out`; returns the bytes written.
pub fn encode_outbound(
    out: &mut [u8],
    msg: &Outbound<'_>,
    dialect: Dialect,
) -> Result<usize, EncodeError> {
    match msg {
        Outbound::SystemEvent {
            timestamp,
            event_code,
        } => fixed(out, 10, |w| {
            w.u8(b'S').u64(*timestamp).u8(*event_code);
        }),
        Outbound::Accepted(a) => encode_accepted(out, a, dialect, false),
        Outbound::Replaced(a) => encode_accepted(out, a, dialect, true),
        Outbound::Canceled {
            timestamp,
            orig_user_ref,
            user_ref,
            qty,
            reason,
        } => {
            let len = if dialect.canceled_orig_user_ref {
                22
            } else {
                18
            };
            fixed(out, len, |w| {
                w.u8(b'C').u64(*timestamp);
                if dialect.canceled_orig_user_ref {
                    w.u32(*orig_user_ref);
                }
                w.u32(*user_ref).u32(*qty).u8(*reason);
            })
        }
        Outbound::AiqCanceled {
            timestamp,
            user_ref,
            decrement_qty,
            reason,
            prevented_qty,
            execution_price,
            liquidity_flag,
            aiq_strategy,
        } => fixed(out, 32, |w| {
            w.u8(b'D')
                .u64(*timestamp)
                .u32(*user_ref)
                .u32(*decrement_qty)
                .u8(*reason);
            w.u32(*prevented_qty)
                .i64(*execution_price)
                .u8(*liquidity_flag)
                .u8(*aiq_strategy);
        }),
        Outbound::Executed {
            timestamp,
            user_ref,
            qty,
            price,
            liquidity_flag,
            match_number,
            appendages,
        } => {
            let mut w = Writer::new(out, 36 + appendages.len())?;
            w.u8(b'E')
                .u64(*timestamp)
                .u32(*user_ref)
                .u32(*qty)
                .i64(*price);
            w.u8(*liquidity_flag).u64(*match_number);
            appendages_out(&mut w, appendages)?;
            Ok(w.written())
        }
        Outbound::BrokenTrade {
            timestamp,
            user_ref,
            match_number,
            reason,
            cl_ord_id,
        } => fixed(out, 36, |w| {
            w.u8(b'B')
                .u64(*timestamp)
                .u32(*user_ref)
                .u64(*match_number)
                .u8(*reason)
                .bytes(cl_ord_id);
        }),
        Outbound::Rejected {
            timestamp,
            user_ref,
            reason,
            cl_ord_id,
        } => fixed(out, 29, |w| {
            w.u8(b'J')
                .u64(*timestamp)
                .u32(*user_ref)
                .u16(*reason)
                .bytes(cl_ord_id);
        }),
        Outbound::CancelPending {
            timestamp,
            user_ref,
        } => fixed(out, 13, |w| {
            w.u8(b'P').u64(*timestamp).u32(*user_ref);
        }),
        Outbound::CancelReject {
            timestamp,
            user_ref,
        } => fixed(out, 13, |w| {
            w.u8(b'I').u64(*timestamp).u32(*user_ref);
        }),
        Outbound::PriorityUpdate {
            timestamp,
            user_ref,
            price,
            display,
            order_ref,
        } => fixed(out, 30, |w| {
            w.u8(b'T')
                .u64(*timestamp)
                .u32(*user_ref)
                .i64(*price)
                .u8(*display)
                .u64(*order_ref);
        }),
        Outbound::Modified {
            timestamp,
            user_ref,
            side,
            qty,
        } => fixed(out, 18, |w| {
            w.u8(b'M')
                .u64(*timestamp)
                .u32(*user_ref)
                .u8(*side)
                .u32(*qty);
        }),
        Outbound::Restated {
            timestamp,
            user_ref,
            reason,
            appendages,
        } => {
            let mut w = Writer::new(out, 16 + appendages.len())?;
            w.u8(b'R').u64(*timestamp).u32(*user_ref).u8(*reason);
            appendages_out(&mut w, appendages)?;
            Ok(w.written())
        }
        Outbound::AccountQueryResponse {
            timestamp,
            next_user_ref,
        } => fixed(out, 13, |w| {
            w.u8(b'Q').u64(*timestamp).u32(*next_user_ref);
        }),
        Outbound::OrderStatus(s) => fixed(out, 45 + dialect.symbol_len, |w| {
            w.u8(b'o')
                .u64(s.timestamp)
                .u32(s.user_ref)
                .u8(s.state)
                .u8(s.side);
            w.alpha(&s.symbol, dialect.symbol_len)
                .i64(s.price)
                .u32(s.open_qty)
                .u32(s.executed_qty);
            w.bytes(&s.cl_ord_id);
        }),
        Outbound::Position {
            timestamp,
            symbol,
            bought_qty,
            sold_qty,
        } => fixed(out, 25 + dialect.symbol_len, |w| {
            w.u8(b'y').u64(*timestamp).alpha(symbol, dialect.symbol_len);
            w.u64(*bought_qty).u64(*sold_qty);
        }),
        Outbound::ReconcileEnd {
            timestamp,
            token,
            open_orders,
            positions,
            as_of_sequence,
        } => fixed(out, 29, |w| {
            w.u8(b'z')
                .u64(*timestamp)
                .u32(*token)
                .u32(*open_orders)
                .u32(*positions)
                .u64(*as_of_sequence);
        }),
    }
}

fn fixed(
    out: &mut [u8],
    len: usize,
    body: impl FnOnce(&mut Writer<'_>),
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out, len)?;
    body(&mut w);
    debug_assert_eq!(w.written(), len, "encoder wrote the wrong length");
    Ok(w.written())
}

fn encode_accepted(
    out: &mut [u8],
    a: &OrderAccepted<'_>,
    dialect: Dialect,
    replaced: bool,
) -> Result<usize, EncodeError> {
    let fixed_len = 56 + dialect.symbol_len + if replaced { 4 } else { 0 };
    let mut w = Writer::new(out, fixed_len + a.appendages.len())?;
    w.u8(if replaced { b'U' } else { b'A' }).u64(a.timestamp);
    if replaced {
        w.u32(a.orig_user_ref);
    }
    let o = &a.order;
    w.u32(a.user_ref)
        .u8(o.side)
        .u32(o.qty)
        .alpha(&o.symbol, dialect.symbol_len)
        .i64(o.price);
    w.u8(o.tif)
        .u8(o.display)
        .u64(a.order_ref)
        .u8(o.capacity)
        .u8(o.ise)
        .u8(o.cross_type);
    w.u8(a.state).bytes(&o.cl_ord_id);
    appendages_out(&mut w, a.appendages)?;
    Ok(w.written())
}

fn appendages_out(w: &mut Writer<'_>, appendages: &[u8]) -> Result<(), EncodeError> {
    let len = u16::try_from(appendages.len()).map_err(|_| EncodeError::Unrepresentable {
        field: "Appendage Length",
        value: appendages.len() as u64,
    })?;
    w.u16(len).bytes(appendages);
    Ok(())
}

#[cfg(test)]
mod tests;
