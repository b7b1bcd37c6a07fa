//! An open-loop load generator: commands are due at fixed intended times (`start + i / rate`),
//! whatever the system under test is doing, and latency is measured from the *intended* time,
//! not from when the generator got round to sending. A system that stalls is charged for every
//! command that should have been sent during the stall (no coordinated omission).

/// The schedule of one phase at a fixed offered rate.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoop {
    start_ns: u64,
    interval_ps: u64,
    issued: u64,
    total: u64,
}

impl OpenLoop {
    /// `rate_per_sec` commands per second for `duration_ns`, from `start_ns`.
    pub fn new(start_ns: u64, rate_per_sec: u64, duration_ns: u64) -> Self {
        let interval_ps = 1_000_000_000_000 / rate_per_sec.max(1);
        Self {
            start_ns,
            interval_ps,
            issued: 0,
            total: (duration_ns as u128 * 1_000 / interval_ps as u128) as u64,
        }
    }

    /// The intended time of the next command if it is due at `now_ns` (call until `None`).
    pub fn next_due(&mut self, now_ns: u64) -> Option<u64> {
        if self.issued >= self.total {
            return None;
        }
        let intended =
            self.start_ns + (self.issued as u128 * self.interval_ps as u128 / 1_000) as u64;
        if intended > now_ns {
            return None;
        }
        self.issued += 1;
        Some(intended)
    }

    /// Every command has been issued.
    pub fn done(&self) -> bool {
        self.issued >= self.total
    }

    /// Commands issued so far.
    pub fn issued(&self) -> u64 {
        self.issued
    }
}

/// The cancel-storm mix: a cancel of a random open order `cancel_pct`% of the time when one
/// is open, else a new order (1 share at 100.00, symbols 0..4 in turn, sides alternating).
/// Deterministic (xorshift); the caller adds the ids the venue accepted to `live`.
#[derive(Debug)]
pub struct StormMix {
    /// Percent of commands that cancel, when an order is open.
    pub cancel_pct: u64,
    /// Accepted orders not yet canceled.
    pub live: Vec<keel::order::ClientOrderId>,
    rng: u64,
    seq: u64,
}

impl StormMix {
    /// A mix cancelling `cancel_pct`% of the time.
    pub fn new(cancel_pct: u64) -> Self {
        Self {
            cancel_pct,
            live: Vec::with_capacity(65_536),
            rng: 0x2545_F491_4F6C_DD1D,
            seq: 0,
        }
    }

    /// The next command.
    pub fn next_command(&mut self) -> keel::order::Command {
        use keel::order::{
            ClientOrderId, Command, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
            VenueId,
        };
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        if !self.live.is_empty() && self.rng % 100 < self.cancel_pct {
            let i = (self.rng >> 32) as usize % self.live.len();
            return Command::Cancel {
                id: self.live.swap_remove(i),
            };
        }
        self.seq += 1;
        Command::New(NewOrder {
            id: ClientOrderId::new(StrategyId(0), self.seq).expect("in range"),
            venue: VenueId(0),
            symbol: SymbolId((self.seq % 4) as u16),
            side: if self.seq.is_multiple_of(2) {
                Side::Buy
            } else {
                Side::Sell
            },
            price: Price::from_units(100, 0),
            qty: 1,
            tif: TimeInForce::Day,
            reduce_only: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a late caller gets every command it missed, each with its own intended time.
    #[test]
    fn a_stall_is_charged_for_every_missed_command() {
        let mut g = OpenLoop::new(1_000, 1_000_000, 10_000); // 1 per µs for 10 µs
        assert_eq!(g.next_due(999), None);
        assert_eq!(g.next_due(1_000), Some(1_000));
        assert_eq!(g.next_due(1_000), None);
        let late: Vec<u64> = std::iter::from_fn(|| g.next_due(5_500)).collect();
        assert_eq!(late, [2_000, 3_000, 4_000, 5_000]);
        let rest: Vec<u64> = std::iter::from_fn(|| g.next_due(u64::MAX)).collect();
        assert_eq!(rest.len(), 5);
        assert!(g.done());
    }
}
