//! What the venue serves beside order entry: market data (the WebSocket push server fed from
//! the exchange's books) and REST (depth snapshots and klines behind the venue's weight limits),
//! both optionally over TLS.

use super::*;

impl<T: Transport> VenueServer<T> {
    /// The market-data server, if configured.
    pub fn market_data(&self) -> Option<&crate::md_server::MdServer<T>> {
        self.md.as_ref()
    }

    /// The market-data server, to attach a bus to.
    pub fn market_data_mut(&mut self) -> Option<&mut crate::md_server::MdServer<T>> {
        self.md.as_mut()
    }

    /// The market-data server's address, if configured.
    pub fn market_data_addr(&self) -> Option<SocketAddr> {
        self.md.as_ref().map(crate::md_server::MdServer::local_addr)
    }

    /// Publishes what the exchange did since the last pass and runs the market-data server.
    pub(super) fn feed_market_data(&mut self, now_ns: u64) -> Result<(), NetError> {
        use keel::proto::md::BookSide;
        match self.md.as_mut() {
            Some(md) => {
                let mut trades = std::mem::take(&mut self.md_trades);
                let mut levels = std::mem::take(&mut self.md_levels);
                trades.clear();
                levels.clear();
                self.exchange.drain_market_data(
                    |symbol, side, price, qty| {
                        let side = if side == keel::order::Side::Buy {
                            BookSide::Bid
                        } else {
                            BookSide::Ask
                        };
                        levels.push((symbol, side, price, qty));
                    },
                    |t| trades.push(*t),
                );
                // Levels that shrink or go first, then those that grow or appear: the final
                // book is never crossed, and in this order no state in between is either (every
                // level present is one of the final book's), so a subscriber never sees a
                // crossed book it would have to treat as corruption.
                for grow in [false, true] {
                    for &(symbol, side, price, qty) in &levels {
                        if (qty > md.level_qty(symbol, side, price)) == grow {
                            md.update_level(symbol, side, price, qty);
                        }
                    }
                }
                self.md_levels = levels;
                for t in &trades {
                    md.trade(now_ns, t.symbol, t.price, u64::from(t.qty), t.buy);
                }
                self.md_trades = trades;
                md.step(now_ns, 0)
            }
            None => {
                self.exchange.drain_market_data(|_, _, _, _| {}, |_| {});
                Ok(())
            }
        }
    }

    /// Answers the REST API's requests from the exchange's state (the market-data server's
    /// books and sequence numbers when it runs, so a depth snapshot ties to the WebSocket
    /// stream).
    pub(super) fn serve_rest(&mut self, now_ns: u64) {
        let Some(mut rest) = self.rest.take() else {
            return;
        };
        let names = &self.config.exchange.symbols;
        let md = self.md.as_ref();
        let reference = self.config.flow.reference_price;
        rest.serve(now_ns, &mut self.reactor, |path, query| {
            rest_body(path, query, names, md, reference)
        });
        self.rest = Some(rest);
    }

    /// The TLS layer's counters (REST; all zero without TLS).
    pub fn tls_stats(&self) -> TlsStats {
        self.reactor.stats()
    }

    /// Whether the REST API is served over TLS.
    pub fn rest_is_tls(&self) -> bool {
        self.rest
            .as_ref()
            .is_some_and(|r| self.reactor.is_tls_listener(r.listener))
    }

    /// The FIX endpoint's address, if served.
    pub fn fix_addr(&self) -> Option<SocketAddr> {
        self.fix.as_ref().map(|f| f.local)
    }

    /// The FIX endpoint's counters, if served.
    pub fn fix_stats(&self) -> Option<FixVenueStats> {
        self.fix.as_ref().map(fix::FixEndpoint::stats)
    }

    /// Whether the FIX session `comp_id`'s order `cl_ord_id` is open at the exchange (`None`:
    /// no FIX endpoint, no such session or order).
    pub fn fix_order_open(&self, comp_id: &str, cl_ord_id: &[u8]) -> Option<bool> {
        let (account, user_ref) = self.fix.as_ref()?.order(comp_id, cl_ord_id)?;
        Some(
            self.exchange
                .order_of(account, user_ref)
                .is_some_and(|o| o.open_qty > 0),
        )
    }

    /// FIX session `comp_id`'s numbers: the last it was sent, and the messages of its
    /// account's stream not yet sent as FIX (held by a report fault, or the session is off).
    pub fn fix_session(&self, comp_id: &str) -> Option<(u64, u64)> {
        self.fix.as_ref()?.session_numbers(comp_id, &self.exchange)
    }

    /// FIX sessions logged on now.
    pub fn fix_sessions(&self) -> usize {
        self.fix.as_ref().map_or(0, fix::FixEndpoint::logged_on)
    }

    /// The REST API's address and counters, if served.
    pub fn rest(&self) -> Option<(SocketAddr, crate::rest::RestStats)> {
        self.rest.as_ref().map(|r| (r.local, r.stats()))
    }
}

/// A REST answer's JSON body for `path?query` (the endpoint already weighed and admitted it).
pub(super) fn rest_body<T: Transport>(
    path: &str,
    query: &str,
    names: &[String],
    md: Option<&crate::md_server::MdServer<T>>,
    reference: i64,
) -> crate::rest::Built {
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let scale = keel::order::Price::SCALE;
    let price = |p: i64| format!("{}.{:04}", p / scale, (p % scale).abs());
    if path == "/api/v3/exchangeInfo" {
        let symbols: Vec<_> = names
            .iter()
            .map(|n| serde_json::json!({"symbol": n, "status": "TRADING"}))
            .collect();
        return Ok(serde_json::json!({"symbols": symbols}).to_string());
    }
    let name = param("symbol").ok_or((400, "symbol is required".to_string()))?;
    let symbol = names
        .iter()
        .position(|n| n == name)
        .ok_or_else(|| (404, format!("no symbol {name}")))? as u16;
    let book = md.map(|m| m.book(symbol)).unwrap_or_default();
    match path {
        "/api/v3/ticker" => {
            let bid = book.bids.first().map_or(reference, |l| l.0);
            let ask = book.asks.first().map_or(reference, |l| l.0);
            Ok(serde_json::json!({
                "symbol": name, "bidPrice": price(bid), "askPrice": price(ask),
                "lastUpdateId": book.seq,
            })
            .to_string())
        }
        "/api/v3/depth" => {
            let limit = param("limit")
                .and_then(|v| v.parse().ok())
                .unwrap_or(100usize)
                .min(5_000);
            let side = |levels: &[(i64, u64)]| -> Vec<_> {
                levels
                    .iter()
                    .take(limit)
                    .map(|(p, q)| serde_json::json!([price(*p), q.to_string()]))
                    .collect()
            };
            Ok(serde_json::json!({
                "lastUpdateId": book.seq, "bids": side(&book.bids), "asks": side(&book.asks),
            })
            .to_string())
        }
        _ => {
            // Klines: the venue keeps no candle history; flat one-minute candles at the
            // reference price, as many as asked (at most 1,000), stand in for it.
            let limit = param("limit")
                .and_then(|v| v.parse().ok())
                .unwrap_or(500usize)
                .min(1_000);
            let p = price(reference);
            let candles: Vec<_> = (0..limit as u64)
                .map(|i| serde_json::json!([i * 60_000, p, p, p, p, "0"]))
                .collect();
            Ok(serde_json::Value::from(candles).to_string())
        }
    }
}
