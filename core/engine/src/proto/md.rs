//! Market-data messages: JSON text frames (docs/market-data.md). The server writes them by
//! hand into caller buffers (no allocation per event); requests from clients are parsed with
//! serde_json (a few per connection, off the hot path).

use std::io::Write;

/// A feed channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Snapshot plus sequenced level deltas.
    Book,
    /// Every trade, sequenced.
    Trades,
    /// Best bid and ask (conflated).
    Ticker,
}

impl Channel {
    /// The channel's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Book => "book",
            Self::Trades => "trades",
            Self::Ticker => "ticker",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "book" => Self::Book,
            "trades" => Self::Trades,
            "ticker" => Self::Ticker,
            _ => return None,
        })
    }

    /// Index for per-channel tables.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Book side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BookSide {
    /// Bids.
    Bid,
    /// Asks.
    Ask,
}

impl BookSide {
    /// The side's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bid => "bid",
            Self::Ask => "ask",
        }
    }
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Start a channel for a symbol.
    Subscribe {
        /// The channel.
        channel: Channel,
        /// The symbol.
        symbol: String,
    },
    /// Stop it.
    Unsubscribe {
        /// The channel.
        channel: Channel,
        /// The symbol.
        symbol: String,
    },
    /// Send a fresh book snapshot.
    Snapshot {
        /// The symbol.
        symbol: String,
    },
}

/// Why a request was refused (sent back as an `error` message; the connection stays).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MdRequestError {
    /// Not JSON, or not an object of strings.
    #[error("not a JSON object: {0}")]
    NotJson(String),
    /// A required field is missing.
    #[error("missing field `{0}`")]
    Missing(&'static str),
    /// An op, channel or symbol the server does not know.
    #[error("unknown {field} {value:?}")]
    Unknown {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
    },
}

/// Parses one request.
pub fn parse_request(text: &str) -> Result<Request, MdRequestError> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| MdRequestError::NotJson(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| MdRequestError::NotJson("not an object".into()))?;
    let field = |name: &'static str| -> Result<&str, MdRequestError> {
        obj.get(name)
            .and_then(|v| v.as_str())
            .ok_or(MdRequestError::Missing(name))
    };
    let op = field("op")?;
    let channel = || {
        let c = field("channel")?;
        Channel::parse(c).ok_or_else(|| MdRequestError::Unknown {
            field: "channel",
            value: c.to_string(),
        })
    };
    Ok(match op {
        "subscribe" => Request::Subscribe {
            channel: channel()?,
            symbol: field("symbol")?.to_string(),
        },
        "unsubscribe" => Request::Unsubscribe {
            channel: channel()?,
            symbol: field("symbol")?.to_string(),
        },
        "snapshot" => Request::Snapshot {
            symbol: field("symbol")?.to_string(),
        },
        other => {
            return Err(MdRequestError::Unknown {
                field: "op",
                value: other.to_string(),
            })
        }
    })
}

/// A level delta: `qty` 0 removes the level.
pub fn write_delta(
    out: &mut Vec<u8>,
    symbol: &str,
    seq: u64,
    side: BookSide,
    price: i64,
    qty: u64,
) {
    let _ = write!(
        out,
        r#"{{"type":"book","symbol":"{symbol}","seq":{seq},"side":"{}","price":{price},"qty":{qty}}}"#,
        side.name()
    );
}

/// A trade.
pub fn write_trade(out: &mut Vec<u8>, symbol: &str, seq: u64, price: i64, qty: u64, buy: bool) {
    let _ = write!(
        out,
        r#"{{"type":"trade","symbol":"{symbol}","seq":{seq},"price":{price},"qty":{qty},"aggressor":"{}"}}"#,
        if buy { "buy" } else { "sell" }
    );
}

/// The best bid and ask (0 price and qty: that side is empty).
pub fn write_ticker(out: &mut Vec<u8>, symbol: &str, seq: u64, bid: (i64, u64), ask: (i64, u64)) {
    let _ = write!(
        out,
        r#"{{"type":"ticker","symbol":"{symbol}","seq":{seq},"bid":{},"bid_qty":{},"ask":{},"ask_qty":{}}}"#,
        bid.0, bid.1, ask.0, ask.1
    );
}

/// A book snapshot: every level, bids best first, asks best first.
pub fn write_snapshot<'a>(
    out: &mut Vec<u8>,
    symbol: &str,
    seq: u64,
    bids: impl Iterator<Item = (&'a i64, &'a u64)>,
    asks: impl Iterator<Item = (&'a i64, &'a u64)>,
) {
    let _ = write!(
        out,
        r#"{{"type":"snapshot","symbol":"{symbol}","seq":{seq},"bids":["#
    );
    for (i, (p, q)) in bids.enumerate() {
        let _ = write!(out, "{}[{p},{q}]", if i > 0 { "," } else { "" });
    }
    out.extend_from_slice(br#"],"asks":["#);
    for (i, (p, q)) in asks.enumerate() {
        let _ = write!(out, "{}[{p},{q}]", if i > 0 { "," } else { "" });
    }
    out.extend_from_slice(b"]}");
}

/// A control answer (`subscribed`, `unsubscribed`, `error`).
pub fn write_notice(out: &mut Vec<u8>, kind: &str, detail: &str) {
    let detail = serde_json::to_string(detail).unwrap_or_else(|_| "\"\"".into());
    let _ = write!(out, r#"{{"type":"{kind}","detail":{detail}}}"#);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_or_name_what_is_wrong() {
        assert_eq!(
            parse_request(r#"{"op":"subscribe","channel":"book","symbol":"AAPL"}"#),
            Ok(Request::Subscribe {
                channel: Channel::Book,
                symbol: "AAPL".into()
            })
        );
        assert_eq!(
            parse_request(r#"{"op":"snapshot","symbol":"MSFT"}"#),
            Ok(Request::Snapshot {
                symbol: "MSFT".into()
            })
        );
        assert!(matches!(
            parse_request("nope"),
            Err(MdRequestError::NotJson(_))
        ));
        assert_eq!(
            parse_request(r#"{"op":"subscribe","symbol":"AAPL"}"#),
            Err(MdRequestError::Missing("channel"))
        );
        assert_eq!(
            parse_request(r#"{"op":"subscribe","channel":"quotes","symbol":"AAPL"}"#),
            Err(MdRequestError::Unknown {
                field: "channel",
                value: "quotes".into()
            })
        );
        assert!(matches!(
            parse_request(r#"{"op":"buy"}"#),
            Err(MdRequestError::Unknown { field: "op", .. })
        ));
    }

    #[test]
    fn messages_are_json() {
        let mut out = Vec::new();
        write_snapshot(
            &mut out,
            "AAPL",
            7,
            [(&100, &5), (&99, &1)].into_iter(),
            [(&101, &2)].into_iter(),
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["seq"], 7);
        assert_eq!(v["bids"][1][0], 99);
        out.clear();
        write_delta(&mut out, "AAPL", 8, BookSide::Ask, 101, 0);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["side"], "ask");
        out.clear();
        write_notice(&mut out, "error", "bad \"quote\"");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["detail"], "bad \"quote\"");
    }
}
