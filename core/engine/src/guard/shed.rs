//! Load shedding on the new-order lane, with hysteresis and a manual switch.
//!
//! Shedding starts when the lane's depth reaches `high_watermark` and stops only when it falls
//! to `low_watermark`, so the engine does not flap at the boundary. Cancels are never shed:
//! this type is consulted only for new orders and replaces.

/// Shedding thresholds, as lane depths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShedConfig {
    /// Depth at or above which new orders are shed.
    pub high_watermark: u32,
    /// Depth at or below which shedding stops.
    pub low_watermark: u32,
}

impl ShedConfig {
    /// Watermarks as percentages of `capacity` (defaults: 80% and 50%).
    pub fn from_pct(capacity: u32, high_pct: u32, low_pct: u32) -> Self {
        assert!(
            low_pct < high_pct && high_pct <= 100,
            "need low < high <= 100"
        );
        let of = |pct: u32| (u64::from(capacity) * u64::from(pct) / 100) as u32;
        let high_watermark = of(high_pct).max(1);
        Self {
            high_watermark,
            // On a small lane both percentages may round to one depth: hysteresis needs the
            // low mark strictly below the high one (a lane of 2 at 80%/50% sheds at 1, stops at 0).
            low_watermark: of(low_pct).min(high_watermark - 1),
        }
    }
}

/// Shedding state for one lane.
#[derive(Debug, Clone)]
pub struct Shedder {
    config: ShedConfig,
    shedding: bool,
    manual: bool,
    episodes: u64,
}

impl Shedder {
    /// Not shedding.
    pub fn new(config: ShedConfig) -> Self {
        assert!(
            config.low_watermark < config.high_watermark,
            "low watermark must be below high"
        );
        Self {
            config,
            shedding: false,
            manual: false,
            episodes: 0,
        }
    }

    /// Updates the hysteresis from the lane's current depth.
    #[inline]
    pub fn observe(&mut self, depth: u32) {
        if !self.shedding && depth >= self.config.high_watermark {
            self.shedding = true;
            self.episodes += 1;
        } else if self.shedding && depth <= self.config.low_watermark {
            self.shedding = false;
        }
    }

    /// Whether a new order arriving at `depth` may enter the lane.
    #[inline]
    pub fn admit(&mut self, depth: u32) -> bool {
        self.observe(depth);
        !(self.shedding || self.manual)
    }

    /// Operator switch: shed every new order regardless of depth.
    pub fn set_manual(&mut self, on: bool) {
        self.manual = on;
    }

    /// True while shedding (by watermark or by hand).
    pub fn is_shedding(&self) -> bool {
        self.shedding || self.manual
    }

    /// Times the high watermark started a shedding episode.
    pub fn episodes(&self) -> u64 {
        self.episodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Goal: hysteresis against a reference: shedding switches on only at or above high and
        // off only at or below low; in between it keeps its previous value.
        #[test]
        fn hysteresis(depths in proptest::collection::vec(0u32..100, 1..300)) {
            let cfg = ShedConfig::from_pct(100, 80, 50);
            let mut shed = Shedder::new(cfg);
            let mut model = false;
            for depth in depths {
                if depth >= 80 { model = true } else if depth <= 50 { model = false }
                prop_assert_eq!(shed.admit(depth), !model, "depth {}", depth);
            }
        }
    }

    #[test]
    fn manual_switch_sheds_everything() {
        let mut shed = Shedder::new(ShedConfig::from_pct(10, 80, 50));
        shed.set_manual(true);
        assert!(!shed.admit(0));
        shed.set_manual(false);
        assert!(shed.admit(0));
    }
}
