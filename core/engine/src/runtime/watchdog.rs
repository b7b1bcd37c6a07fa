//! A watchdog for event loops: the watched loop bumps a counter on every pass
//! ([`LoopHeartbeat::beat`]); the watchdog, in another loop, notices when the counter has not
//! moved for `stall_ns` and reports the loop stalled until it moves again. The dispatcher uses
//! one per executor loop and stops routing to a stalled one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The watched loop's end: bump once per pass (one relaxed atomic add, no allocation).
#[derive(Debug, Clone)]
pub struct LoopHeartbeat(Arc<AtomicU64>);

impl LoopHeartbeat {
    /// A heartbeat and the watchdog that reads it.
    pub fn new(stall_ns: u64) -> (Self, Watchdog) {
        let counter = Arc::new(AtomicU64::new(0));
        let dog = Watchdog {
            counter: Arc::clone(&counter),
            last: 0,
            last_change_ns: None,
            stall_ns,
            stalled: false,
            stalls: 0,
        };
        (Self(counter), dog)
    }

    /// Another watchdog on the same loop (e.g. one per venue served by one executor loop).
    pub fn watchdog(&self, stall_ns: u64) -> Watchdog {
        Watchdog {
            counter: Arc::clone(&self.0),
            last: 0,
            last_change_ns: None,
            stall_ns,
            stalled: false,
            stalls: 0,
        }
    }

    /// One pass of the watched loop.
    #[inline]
    pub fn beat(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The watching end.
#[derive(Debug)]
pub struct Watchdog {
    counter: Arc<AtomicU64>,
    last: u64,
    last_change_ns: Option<u64>,
    stall_ns: u64,
    stalled: bool,
    stalls: u64,
}

impl Watchdog {
    /// Checks the counter at `now_ns`; true while the watched loop is stalled.
    #[inline]
    pub fn check(&mut self, now_ns: u64) -> bool {
        let value = self.counter.load(Ordering::Relaxed);
        let since = *self.last_change_ns.get_or_insert(now_ns);
        if value != self.last {
            self.last = value;
            self.last_change_ns = Some(now_ns);
            self.stalled = false;
        } else if !self.stalled && now_ns.saturating_sub(since) > self.stall_ns {
            self.stalled = true;
            self.stalls += 1;
        }
        self.stalled
    }

    /// Stalls detected so far.
    pub fn stalls(&self) -> u64 {
        self.stalls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a loop that stops beating is reported stalled after stall_ns, and recovers when
    // it beats again.
    #[test]
    fn detects_stall_and_recovery() {
        let (beat, mut dog) = LoopHeartbeat::new(100);
        assert!(!dog.check(0));
        beat.beat();
        assert!(!dog.check(50));
        assert!(!dog.check(150), "100 ns since the last beat: not yet");
        assert!(dog.check(151));
        assert!(dog.check(1_000));
        beat.beat();
        assert!(!dog.check(1_001));
        assert_eq!(dog.stalls(), 1);
    }
}
