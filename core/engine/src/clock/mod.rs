//! The one clock of keel: monotonic nanoseconds.
//!
//! Production reads the CPU's time-stamp counter through `quanta` and scales it once per read;
//! tests and simulations use [`ManualClock`], which only moves when told to. Everything else
//! in the core receives `now_ns: u64` from its caller and never reads a clock itself (enforced
//! by clippy's `disallowed-methods` in `clippy.toml`). Wall-clock time appears only at the
//! edges (protocol timestamps, logs) and never drives a timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of monotonic nanoseconds. Implementations never go backwards.
pub trait Clock {
    /// Nanoseconds since this clock's origin.
    fn now_ns(&self) -> u64;
}

/// Monotonic clock backed by the TSC (via `quanta`), falling back to the OS monotonic clock
/// where the TSC is not invariant; `quanta` makes that choice once at construction.
#[derive(Debug, Clone)]
pub struct TscClock {
    inner: quanta::Clock,
    origin_raw: u64,
}

impl TscClock {
    /// Calibrates the TSC (quanta does this once per process). Every `TscClock` of a process
    /// shares one origin (the first one's creation), so times read on different threads — a
    /// loop's, the logger's, the wire log's — are on one line.
    pub fn new() -> Self {
        static ORIGIN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let inner = quanta::Clock::new();
        let origin_raw = *ORIGIN.get_or_init(|| inner.raw());
        Self { inner, origin_raw }
    }

    /// The wall clock (Unix ns) at this clock's `now_ns() == 0`, measured now: for logs that
    /// print loop times as dates. Never drives a timeout.
    #[allow(clippy::disallowed_methods)] // the edge where wall time meets loop time: logs only
    pub fn unix_ns_at_origin(&self) -> u64 {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        unix.saturating_sub(self.now_ns())
    }

    /// The raw counter value, for hot loops that stamp many events and scale later.
    #[inline]
    pub fn raw(&self) -> u64 {
        self.inner.raw()
    }

    /// Scales a raw counter value taken from [`TscClock::raw`] to nanoseconds since origin.
    #[inline]
    pub fn raw_to_ns(&self, raw: u64) -> u64 {
        self.inner.delta_as_nanos(self.origin_raw, raw)
    }
}

impl Default for TscClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TscClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.raw_to_ns(self.inner.raw())
    }
}

/// A clock that moves only when told; shared handles see the same time.
///
/// Used by tests and the deterministic simulator so one seed replays exactly.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        Self {
            now_ns: Arc::new(AtomicU64::new(start_ns)),
        }
    }

    /// Moves the clock forward by `delta_ns`.
    pub fn advance(&self, delta_ns: u64) {
        self.now_ns.fetch_add(delta_ns, Ordering::Relaxed);
    }

    /// Sets the clock to `now_ns`; refuses to go backwards because no monotonic clock may.
    pub fn set(&self, now_ns: u64) {
        let previous = self.now_ns.swap(now_ns, Ordering::Relaxed);
        assert!(
            previous <= now_ns,
            "manual clock moved backwards: {previous} -> {now_ns}"
        );
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::Relaxed)
    }
}

/// A clock frozen at one reading: what a caller that took `now_ns` once for a whole pass
/// hands to code that reads a clock (e.g. [`crate::dispatch::Dispatcher::poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrozenClock(pub u64);

impl Clock for FrozenClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.0
    }
}

/// Nanoseconds per second, millisecond and microsecond, to keep literals readable.
pub const NS_PER_SEC: u64 = 1_000_000_000;
/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per microsecond.
pub const NS_PER_US: u64 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the TSC clock is monotonic across many reads; method: read it in a loop.
    #[test]
    fn tsc_clock_never_goes_backwards() {
        let clock = TscClock::new();
        let mut last = clock.now_ns();
        for _ in 0..100_000 {
            let now = clock.now_ns();
            assert!(now >= last, "{now} < {last}");
            last = now;
        }
    }

    // Goal: manual clock handles share one time and refuse to go back.
    #[test]
    fn manual_clock_is_shared_and_monotonic() {
        let a = ManualClock::new(10);
        let b = a.clone();
        a.advance(5);
        assert_eq!(b.now_ns(), 15);
        b.set(20);
        assert_eq!(a.now_ns(), 20);
        let back = std::panic::catch_unwind(|| a.set(19));
        assert!(back.is_err());
    }
}
