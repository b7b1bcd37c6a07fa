//! What an event loop does between passes that found no work, and pinning loops to cores.
//!
//! Busy-spinning gives the lowest latency and burns its core; on a shared or small machine (and
//! in tests) a loop must back off instead, or it starves the loops it waits for. Pinning to a
//! core the machine does not have is a warning, never a failure.

pub mod watchdog;

use std::time::Duration;

/// How a loop idles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Spin forever (a spin-loop hint per empty pass): for an isolated core.
    BusySpin,
    /// Spin for `spins` empty passes, then yield the core on each further one.
    SpinThenYield {
        /// Empty passes spent spinning first.
        spins: u32,
    },
    /// Spin, then yield, then sleep, doubling the sleep from `park_min_ns` to `park_max_ns`:
    /// for shared machines and tests.
    BackoffPark {
        /// Empty passes spent spinning first.
        spins: u32,
        /// Then this many yields.
        yields: u32,
        /// First sleep.
        park_min_ns: u64,
        /// Longest sleep (bounds the added wake-up latency).
        park_max_ns: u64,
    },
}

impl IdlePolicy {
    /// The policy for tests and small machines: 100 spins, 10 yields, sleeps 10 µs to 1 ms.
    pub const TEST: Self = Self::BackoffPark {
        spins: 100,
        yields: 10,
        park_min_ns: 10_000,
        park_max_ns: 1_000_000,
    };
}

/// One idle step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleAction {
    /// A spin-loop hint.
    Spin,
    /// Give the core to another thread.
    Yield,
    /// Sleep this long.
    Park(u64),
}

/// Counts of idle steps taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdleStats {
    /// Spin-loop hints.
    pub spins: u64,
    /// Yields.
    pub yields: u64,
    /// Sleeps.
    pub parks: u64,
}

/// Applies an [`IdlePolicy`] to a loop: call [`Idler::work`] after a pass that did work and
/// [`Idler::idle`] after one that did not.
#[derive(Debug, Clone)]
pub struct Idler {
    policy: IdlePolicy,
    empty_passes: u32,
    park_ns: u64,
    stats: IdleStats,
}

impl Idler {
    /// An idler following `policy`.
    pub fn new(policy: IdlePolicy) -> Self {
        Self {
            policy,
            empty_passes: 0,
            park_ns: 0,
            stats: IdleStats::default(),
        }
    }

    /// A pass found work: back to spinning.
    #[inline]
    pub fn work(&mut self) {
        self.empty_passes = 0;
        self.park_ns = 0;
    }

    /// The step the next empty pass takes (and counts it), without performing it.
    pub fn next_action(&mut self) -> IdleAction {
        let n = self.empty_passes;
        self.empty_passes = self.empty_passes.saturating_add(1);
        let action = match self.policy {
            IdlePolicy::BusySpin => IdleAction::Spin,
            IdlePolicy::SpinThenYield { spins } if n < spins => IdleAction::Spin,
            IdlePolicy::SpinThenYield { .. } => IdleAction::Yield,
            IdlePolicy::BackoffPark { spins, .. } if n < spins => IdleAction::Spin,
            IdlePolicy::BackoffPark { spins, yields, .. } if n < spins.saturating_add(yields) => {
                IdleAction::Yield
            }
            IdlePolicy::BackoffPark {
                park_min_ns,
                park_max_ns,
                ..
            } => {
                self.park_ns = if self.park_ns == 0 {
                    park_min_ns
                } else {
                    (self.park_ns.saturating_mul(2)).min(park_max_ns)
                };
                IdleAction::Park(self.park_ns)
            }
        };
        match action {
            IdleAction::Spin => self.stats.spins += 1,
            IdleAction::Yield => self.stats.yields += 1,
            IdleAction::Park(_) => self.stats.parks += 1,
        }
        action
    }

    /// An empty pass: takes the next step.
    pub fn idle(&mut self) {
        match self.next_action() {
            IdleAction::Spin => std::hint::spin_loop(),
            IdleAction::Yield => std::thread::yield_now(),
            IdleAction::Park(ns) => std::thread::sleep(Duration::from_nanos(ns)),
        }
    }

    /// Steps taken so far.
    pub fn stats(&self) -> IdleStats {
        self.stats
    }
}

/// Asks the kernel to wake the calling thread's sleeps within `ns` of their deadline instead of
/// the default 50 µs "timer slack" (a parked loop then wakes in microseconds, not 50+). Returns
/// false if the kernel refused (the default slack stays; nothing else changes).
pub fn tighten_timer_slack(ns: u64) -> bool {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and only changes the calling thread's
    // timer slack; no memory is passed.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    rc == 0
}

/// The outcome of pinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinning {
    /// The thread now runs only on that core.
    Pinned(usize),
    /// The machine has no such core or refused; the thread runs unpinned.
    Unpinned {
        /// The core asked for.
        core: usize,
        /// Cores the machine offers.
        cores: usize,
    },
}

/// Pins the calling thread to `core` (by OS index) if possible; never fails.
pub fn pin_current_thread(core: usize) -> Pinning {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if core < cores && core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Pinning::Pinned(core)
    } else {
        Pinning::Unpinned { core, cores }
    }
}

/// [`pin_current_thread`], with a warning on stderr when it could not pin.
pub fn pin_or_warn(core: usize) -> bool {
    match pin_current_thread(core) {
        Pinning::Pinned(_) => true,
        Pinning::Unpinned { core, cores } => {
            crate::warn_line!(
                "warning: could not pin to core {core} ({cores} cores); running unpinned"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the back-off policy spins, then yields, then sleeps doubling to its cap, and any
    // work resets it to spinning.
    #[test]
    fn backoff_park_escalates_and_resets_on_work() {
        let mut idler = Idler::new(IdlePolicy::BackoffPark {
            spins: 2,
            yields: 1,
            park_min_ns: 100,
            park_max_ns: 350,
        });
        let steps: Vec<_> = (0..7).map(|_| idler.next_action()).collect();
        assert_eq!(
            steps,
            [
                IdleAction::Spin,
                IdleAction::Spin,
                IdleAction::Yield,
                IdleAction::Park(100),
                IdleAction::Park(200),
                IdleAction::Park(350),
                IdleAction::Park(350),
            ]
        );
        assert_eq!(
            idler.stats(),
            IdleStats {
                spins: 2,
                yields: 1,
                parks: 4
            }
        );
        idler.work();
        assert_eq!(idler.next_action(), IdleAction::Spin);
    }

    // Goal: busy-spin never yields or sleeps; spin-then-yield yields after its spins.
    #[test]
    fn busy_spin_and_spin_then_yield() {
        let mut spin = Idler::new(IdlePolicy::BusySpin);
        assert!((0..1_000).all(|_| spin.next_action() == IdleAction::Spin));
        let mut sty = Idler::new(IdlePolicy::SpinThenYield { spins: 3 });
        let steps: Vec<_> = (0..5).map(|_| sty.next_action()).collect();
        assert_eq!(steps[2], IdleAction::Spin);
        assert_eq!(steps[3..], [IdleAction::Yield, IdleAction::Yield]);
    }

    // Goal: pinning to a core the machine does not have degrades to unpinned, never fails.
    #[test]
    fn pinning_to_a_missing_core_degrades() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let outcome = std::thread::spawn(move || pin_current_thread(cores + 7))
            .join()
            .unwrap();
        assert_eq!(
            outcome,
            Pinning::Unpinned {
                core: cores + 7,
                cores
            }
        );
        let pinned = std::thread::spawn(|| pin_current_thread(0)).join().unwrap();
        assert!(matches!(
            pinned,
            Pinning::Pinned(0) | Pinning::Unpinned { .. }
        ));
    }
}
