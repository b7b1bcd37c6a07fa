//! A small seeded random number generator (SplitMix64).
//!
//! Backoff jitter and simulations take their randomness from here so that a seed replays
//! exactly. The core never reads OS entropy on its own: a configuration's default seed comes
//! from [`os_seed`] once, when the configuration is made (start-up, never the hot path), so
//! two processes on the same default configuration do not draw the same delays (a fleet that
//! reconnects in lockstep is the storm equal jitter exists to prevent). A test or a simulation
//! that must replay sets its seeds explicitly.

use std::hash::{BuildHasher, Hasher};
use std::io::Read;

/// Source of uniformly distributed `u64` values, injectable for tests.
pub trait Rng64 {
    /// The next uniformly distributed value.
    fn next_u64(&mut self) -> u64;

    /// A value uniform in `0..=max` (inclusive), without modulo bias worth caring about for
    /// jitter: the 128-bit multiply maps the full range evenly.
    fn below_inclusive(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        ((u128::from(self.next_u64()) * (u128::from(max) + 1)) >> 64) as u64
    }
}

/// SplitMix64: tiny, fast, and good enough for jitter and fault schedules.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }
}

impl Rng64 for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A seed from the operating system: 8 bytes of `/dev/urandom`, or, where that cannot be read
/// (a sandbox without `/dev`), the standard library's OS-seeded hasher keys. Every call gives
/// a different value, so links and feeds of one process differ too. 63 bits, so the seed a
/// run logs or prints (`keel config-print`) is a TOML integer that replays it. Start-up only
/// (it reads a file).
pub fn os_seed() -> u64 {
    let mut bytes = [0u8; 8];
    let from_file = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    let keyed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let seed = match from_file {
        Ok(()) => u64::from_le_bytes(bytes),
        // RandomState's keys come from the OS once per thread and advance on every `new`.
        Err(_) => keyed,
    };
    seed >> 1
}

/// A jitter seed and where it came from. Two seeds drawn from the OS compare equal whatever
/// their values: a configuration is equal to another that says the same thing, and "draw one
/// at start" is what such a file says (its printed form leaves the value out).
#[derive(Debug, Clone, Copy, Eq)]
pub enum Seed {
    /// Drawn from the OS ([`os_seed`]) when the configuration was made: the default.
    FromOs(u64),
    /// Set by the configuration: a run that replays.
    Fixed(u64),
}

impl Seed {
    /// A fresh seed from the OS.
    pub fn from_os() -> Self {
        Self::FromOs(os_seed())
    }

    /// The seed itself.
    pub fn value(self) -> u64 {
        match self {
            Self::FromOs(v) | Self::Fixed(v) => v,
        }
    }
}

impl Default for Seed {
    fn default() -> Self {
        Self::from_os()
    }
}

impl PartialEq for Seed {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::FromOs(_), Self::FromOs(_)) => true,
            (Self::Fixed(a), Self::Fixed(b)) => a == b,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the same seed gives the same sequence and `below_inclusive` respects its bound.
    #[test]
    fn seeded_and_bounded() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.below_inclusive(10) <= 10);
            b.below_inclusive(10);
        }
        let mut c = SplitMix64::new(1);
        let hits_max = (0..10_000).any(|_| c.below_inclusive(3) == 3);
        assert!(hits_max, "the inclusive bound is reachable");
    }

    // Goal (issue 23, point 2): OS seeds differ call to call (64 draws, no repeat: a repeat
    // by chance has odds of about 2^-52).
    #[test]
    fn os_seeds_differ() {
        let mut seeds: Vec<u64> = (0..64).map(|_| os_seed()).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), 64);
    }
}
