//! One side of a book as a sorted array of `(price, quantity)` with a capacity fixed at start:
//! a lookup is a binary search, a change a shift within the array, and nothing allocates after
//! construction. A side that would exceed its capacity refuses the level (the caller treats the
//! book as unusable and resynchronises).

/// The side is at its capacity and the level is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Levels in ascending price order.
#[derive(Debug, Clone)]
pub struct Levels {
    levels: Vec<(i64, u64)>,
    capacity: usize,
}

impl Levels {
    /// An empty side that holds at most `capacity` levels (allocated now).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            levels: Vec::with_capacity(capacity),
            capacity,
        }
    }

    /// Sets a level; `qty` 0 removes it.
    pub fn set(&mut self, price: i64, qty: u64) -> Result<(), Full> {
        match self.levels.binary_search_by_key(&price, |l| l.0) {
            Ok(at) if qty == 0 => {
                self.levels.remove(at);
            }
            Ok(at) => self.levels[at].1 = qty,
            Err(_) if qty == 0 => {}
            Err(_) if self.levels.len() >= self.capacity => return Err(Full),
            Err(at) => self.levels.insert(at, (price, qty)),
        }
        Ok(())
    }

    /// Replaces every level (any order; zero quantities skipped).
    pub fn replace(&mut self, levels: impl Iterator<Item = (i64, u64)>) -> Result<(), Full> {
        self.levels.clear();
        for l in levels.filter(|l| l.1 > 0) {
            if self.levels.len() >= self.capacity {
                self.levels.clear();
                return Err(Full);
            }
            self.levels.push(l);
        }
        self.levels.sort_unstable_by_key(|l| l.0);
        self.levels.dedup_by_key(|l| l.0);
        Ok(())
    }

    /// Removes every level.
    pub fn clear(&mut self) {
        self.levels.clear();
    }

    /// The lowest-priced level.
    pub fn lowest(&self) -> Option<(i64, u64)> {
        self.levels.first().copied()
    }

    /// The highest-priced level.
    pub fn highest(&self) -> Option<(i64, u64)> {
        self.levels.last().copied()
    }

    /// Levels from the lowest price up.
    pub fn ascending(&self) -> impl DoubleEndedIterator<Item = (i64, u64)> + '_ {
        self.levels.iter().copied()
    }

    /// Number of levels.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// No level.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_sorted_side() {
        let mut l = Levels::with_capacity(3);
        l.set(101, 5).unwrap();
        l.set(99, 1).unwrap();
        l.set(100, 2).unwrap();
        assert_eq!(l.set(102, 1), Err(Full));
        l.set(100, 0).unwrap();
        l.set(100, 0).unwrap(); // removing a missing level is nothing
        l.set(101, 7).unwrap();
        assert_eq!(l.ascending().collect::<Vec<_>>(), [(99, 1), (101, 7)]);
        assert_eq!((l.lowest(), l.highest()), (Some((99, 1)), Some((101, 7))));
        l.replace([(5, 1), (3, 0), (4, 2)].into_iter()).unwrap();
        assert_eq!(l.ascending().collect::<Vec<_>>(), [(4, 2), (5, 1)]);
        assert_eq!(l.replace((1..=4).map(|p| (p, 1))), Err(Full));
        assert!(l.is_empty());
    }
}
