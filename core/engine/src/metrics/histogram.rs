//! A latency histogram as a fixed array of buckets: log-linear, 8 buckets per power of two
//! (every bucket at most 12.5% wide), from 1 ns to 2^40 ns (about 18 minutes). Recording is an
//! index computation and one add: no allocation, no branch on the data beyond the range cap.
//! The same bucket numbering is the counters file's (docs/observability.md), so a reader in any
//! language computes percentiles from the raw counts.

/// Sub-buckets per power of two (a power of two itself).
pub const SUB_BUCKETS: u64 = 8;
const SUB_BITS: u32 = SUB_BUCKETS.trailing_zeros();
/// Largest power of two covered: values at or above `2^MAX_EXPONENT` ns fall in the last
/// bucket.
pub const MAX_EXPONENT: u32 = 40;
/// Buckets in a histogram: the exact values `0..SUB_BUCKETS`, then `SUB_BUCKETS` per power of
/// two from `2^SUB_BITS` up to `2^MAX_EXPONENT`.
pub const BUCKETS: usize = ((MAX_EXPONENT - SUB_BITS + 1) * SUB_BUCKETS as u32) as usize;

/// The bucket `value_ns` falls in.
#[inline]
pub fn bucket(value_ns: u64) -> usize {
    if value_ns < SUB_BUCKETS {
        return value_ns as usize;
    }
    let exponent = 63 - value_ns.leading_zeros(); // >= SUB_BITS
    if exponent >= MAX_EXPONENT {
        return BUCKETS - 1;
    }
    let sub = (value_ns >> (exponent - SUB_BITS)) & (SUB_BUCKETS - 1);
    ((exponent - SUB_BITS + 1) as u64 * SUB_BUCKETS + sub) as usize
}

/// The smallest value in bucket `b`.
pub fn lower_bound(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB_BUCKETS {
        return b;
    }
    let exponent = (b / SUB_BUCKETS) as u32 - 1 + SUB_BITS;
    let sub = b % SUB_BUCKETS;
    (SUB_BUCKETS + sub) << (exponent - SUB_BITS)
}

/// The largest value in bucket `b` (`u64::MAX` for the last, open-ended one).
pub fn upper_bound(b: usize) -> u64 {
    if b + 1 >= BUCKETS {
        u64::MAX
    } else {
        lower_bound(b + 1) - 1
    }
}

/// The value at quantile `q` (0..=1) of `counts` (bucket counts in this numbering): the upper
/// bound of the bucket holding it (at most 12.5% above the true value), 0 when empty.
pub fn quantile(counts: &[u64], q: f64) -> u64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return upper_bound(b);
        }
    }
    upper_bound(counts.len() - 1)
}

/// A histogram a loop owns and records into.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            count: 0,
            sum_ns: 0,
        }
    }
}

impl Histogram {
    /// Records one value.
    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        self.counts[bucket(value_ns)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(value_ns);
    }

    /// Bucket counts.
    pub fn counts(&self) -> &[u64; BUCKETS] {
        &self.counts
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Their sum (saturating).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The value at quantile `q` (see [`quantile`]).
    pub fn quantile(&self, q: f64) -> u64 {
        quantile(&self.counts[..], q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every value lands in the bucket whose bounds hold it, buckets tile the range with
    // no gap or overlap, each is at most 12.5% wide, and the extremes are safe.
    #[test]
    fn buckets_tile_the_range_and_hold_their_values() {
        for b in 0..BUCKETS - 1 {
            assert_eq!(upper_bound(b) + 1, lower_bound(b + 1), "bucket {b}");
            assert_eq!(bucket(lower_bound(b)), b);
            assert_eq!(bucket(upper_bound(b)), b);
            let (lo, hi) = (lower_bound(b), upper_bound(b));
            if lo >= SUB_BUCKETS {
                assert!(
                    (hi - lo + 1) * 8 <= lo,
                    "bucket {b}: {lo}..={hi} wider than 12.5%"
                );
            }
        }
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket(1 << MAX_EXPONENT), BUCKETS - 1);
        assert_eq!(bucket((1 << MAX_EXPONENT) - 1), BUCKETS - 1);
        assert_eq!(bucket((1 << (MAX_EXPONENT - 1)) - 1), BUCKETS - 9);
        assert_eq!(upper_bound(BUCKETS - 1), u64::MAX);
        for v in [1u64, 7, 8, 9, 15, 16, 1_000, 1_234_567, 999_999_999_999] {
            let b = bucket(v);
            assert!(lower_bound(b) <= v && v <= upper_bound(b), "{v} in {b}");
        }
    }

    // Goal: quantiles come back within one bucket (12.5%) of the truth.
    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1_000);
        }
        for (q, truth) in [(0.5, 5_000_000u64), (0.99, 9_900_000), (1.0, 10_000_000)] {
            let got = h.quantile(q);
            assert!(
                got >= truth && got <= truth + truth / 8,
                "q{q}: {got} vs {truth}"
            );
        }
        assert_eq!(Histogram::default().quantile(0.99), 0);
        assert_eq!(h.count(), 10_000);
    }
}
