//! Bulkheads: caps on orders in flight (released to keel and not yet answered by the venue)
//! per symbol and per venue, so one hot symbol or one slow venue cannot take every slot.

use crate::order::{RefusalReason, SymbolId, VenueId};

/// Bulkhead caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkheadConfig {
    /// Most unanswered orders per symbol.
    pub in_flight_per_symbol_max: u32,
    /// Most unanswered orders per venue.
    pub in_flight_per_venue_max: u32,
}

impl Default for BulkheadConfig {
    fn default() -> Self {
        Self {
            in_flight_per_symbol_max: 64,
            in_flight_per_venue_max: 1024,
        }
    }
}

/// In-flight counters, sized at start.
#[derive(Debug, Clone)]
pub struct Bulkhead {
    config: BulkheadConfig,
    per_symbol: Vec<u32>,
    per_venue: Vec<u32>,
}

impl Bulkhead {
    /// Counters for `symbols` symbols and `venues` venues.
    pub fn new(config: BulkheadConfig, symbols: u16, venues: u16) -> Self {
        Self {
            config,
            per_symbol: vec![0; usize::from(symbols)],
            per_venue: vec![0; usize::from(venues)],
        }
    }

    /// Takes one in-flight slot on both, or refuses naming the full one.
    #[inline]
    pub fn try_acquire(&mut self, venue: VenueId, symbol: SymbolId) -> Result<(), RefusalReason> {
        self.check(venue, symbol)?;
        self.acquire(venue, symbol);
        Ok(())
    }

    /// Whether a slot is free on both, naming the full one; takes nothing.
    #[inline]
    pub fn check(&self, venue: VenueId, symbol: SymbolId) -> Result<(), RefusalReason> {
        if self.per_symbol[usize::from(symbol.0)] >= self.config.in_flight_per_symbol_max {
            return Err(RefusalReason::BulkheadSymbol);
        }
        if self.per_venue[usize::from(venue.0)] >= self.config.in_flight_per_venue_max {
            return Err(RefusalReason::BulkheadVenue);
        }
        Ok(())
    }

    /// Takes the slot [`Bulkhead::check`] found free.
    #[inline]
    pub fn acquire(&mut self, venue: VenueId, symbol: SymbolId) {
        let s = &mut self.per_symbol[usize::from(symbol.0)];
        let v = &mut self.per_venue[usize::from(venue.0)];
        debug_assert!(
            *s < self.config.in_flight_per_symbol_max && *v < self.config.in_flight_per_venue_max,
            "bulkhead acquired past its caps"
        );
        *s += 1;
        *v += 1;
    }

    /// Gives a slot back when the venue answers (or the order never left).
    #[inline]
    pub fn release(&mut self, venue: VenueId, symbol: SymbolId) {
        let s = &mut self.per_symbol[usize::from(symbol.0)];
        let v = &mut self.per_venue[usize::from(venue.0)];
        assert!(*s > 0 && *v > 0, "bulkhead released more than acquired");
        *s -= 1;
        *v -= 1;
    }

    /// In flight on `symbol`.
    pub fn symbol_in_flight(&self, symbol: SymbolId) -> u32 {
        self.per_symbol[usize::from(symbol.0)]
    }

    /// In flight on `venue`.
    pub fn venue_in_flight(&self, venue: VenueId) -> u32 {
        self.per_venue[usize::from(venue.0)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Goal: caps hold under any acquire/release sequence; method: count against a model.
        #[test]
        fn caps_hold(ops in proptest::collection::vec((0u16..4, any::<bool>()), 1..500)) {
            let cfg = BulkheadConfig { in_flight_per_symbol_max: 3, in_flight_per_venue_max: 7 };
            let mut bh = Bulkhead::new(cfg, 4, 1);
            let mut held: Vec<u16> = Vec::new();
            for (symbol, acquire) in ops {
                let (v, s) = (VenueId(0), SymbolId(symbol));
                if acquire {
                    let per_symbol = held.iter().filter(|&&h| h == symbol).count() as u32;
                    let expected = if per_symbol >= 3 { Err(RefusalReason::BulkheadSymbol) }
                        else if held.len() as u32 >= 7 { Err(RefusalReason::BulkheadVenue) }
                        else { Ok(()) };
                    let got = bh.try_acquire(v, s);
                    prop_assert_eq!(got, expected);
                    if got.is_ok() { held.push(symbol); }
                } else if let Some(at) = held.iter().position(|&h| h == symbol) {
                    held.swap_remove(at);
                    bh.release(v, s);
                }
                prop_assert!(bh.venue_in_flight(v) <= 7);
                prop_assert!(bh.symbol_in_flight(s) <= 3);
            }
        }
    }
}
