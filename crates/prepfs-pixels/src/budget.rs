//! The bound on pixel work in flight: each decode, augmentation and encoding reserves the bytes
//! it holds at its peak (the image's pixels, the output's pixels and its served bytes) from one
//! budget of `max_open_bytes` before it starts, and gives them back when it ends. Without it
//! nothing bounded the work itself: four outputs of `random_resized_crop: {size: 16384}` (805 MB
//! each as PPM) made at once took the daemon to 3.19 GB with `cache.memory: 0`.
//!
//! - Work that fits waits for room (at most [`WORK_WAIT`]), then is refused ([`WorkRefused::Busy`]).
//! - Work with a part larger than the whole budget (one output, or the decode that feeds it) is
//!   refused at once ([`WorkRefused::TooLarge`]); `prepfs check` and the mount warn of it from
//!   the config ([`crate::config::Config::memory_warnings`]).
//! - Work whose parts each fit but whose sum does not (a large image's decode and its full-size
//!   output, `decoded/`) runs alone: it waits until nothing else is in flight and takes the
//!   whole budget, so one big image never becomes unreadable.
//!
//! The reservation is one atomic compare-and-swap: no lock is taken while there is room, and none
//! is held across the work. Only work waiting for room takes the lock, to sleep.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prepfs_base::human::human_bytes;
use prepfs_base::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// How long work waits for room before it is refused.
pub const WORK_WAIT: Duration = Duration::from_secs(10);

/// See the module documentation.
pub struct WorkBudget {
    max: u64,
    wait: Duration,
    held: AtomicU64,
    /// Work sleeping for room: a release takes the lock to wake it only when there is some.
    waiting: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
}

/// What one piece of pixel work holds at its peak, in parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkSize {
    /// The image's pixels as decoded (0: it is decoded already and held elsewhere).
    pub decode: u64,
    /// The output's pixels and its served bytes.
    pub output: u64,
}

impl WorkSize {
    fn total(self) -> u64 {
        self.decode.saturating_add(self.output)
    }
}

/// Bytes reserved by one piece of work; given back when dropped.
pub struct WorkLease<'a> {
    budget: &'a WorkBudget,
    bytes: u64,
}

/// Why pixel work was refused. Not the sample's fault: it is not marked bad, and the reader
/// gets `ENOMEM`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkRefused {
    #[error(
        "{what} takes {} to make, more than max_open_bytes ({}), the bound on pixel work in flight; refused (raise max_open_bytes, or make it smaller)",
        human_bytes(*need),
        human_bytes(*max)
    )]
    TooLarge { what: &'static str, need: u64, max: u64 },
    #[error(
        "pixel work in flight held {} of max_open_bytes ({}) for {:.0} s; work of {} refused",
        human_bytes(*held),
        human_bytes(*max),
        waited.as_secs_f64(),
        human_bytes(*need)
    )]
    Busy { need: u64, held: u64, max: u64, waited: Duration },
}

impl WorkBudget {
    /// A budget of `max` bytes; work past it waits up to `wait`.
    pub fn new(max: u64, wait: Duration) -> WorkBudget {
        WorkBudget { max, wait, held: AtomicU64::new(0), waiting: AtomicUsize::new(0), lock: Mutex::new(()), freed: Condvar::new() }
    }

    /// The budget's size.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes reserved now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Reserves `size` for one piece of work (see the module documentation).
    pub fn reserve(&self, size: WorkSize) -> Result<WorkLease<'_>, WorkRefused> {
        for (what, part) in [("the decode of one image", size.decode), ("one output", size.output)] {
            if part > self.max {
                return Err(WorkRefused::TooLarge { what, need: part, max: self.max });
            }
        }
        // Parts that each fit but not together: the whole budget, alone.
        let bytes = size.total().min(self.max);
        if self.try_take(bytes) {
            return Ok(WorkLease { budget: self, bytes });
        }
        let started = Instant::now();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock.lock_or_recover();
        let taken = loop {
            // Tried under the lock: a release after this try takes the lock to wake us.
            if self.try_take(bytes) {
                break true;
            }
            let Some(left) = self.wait.checked_sub(started.elapsed()).filter(|l| !l.is_zero()) else { break false };
            guard = self.freed.wait_timeout_or_recover(guard, left);
        };
        drop(guard);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if taken {
            Ok(WorkLease { budget: self, bytes })
        } else {
            Err(WorkRefused::Busy { need: size.total(), held: self.held(), max: self.max, waited: started.elapsed() })
        }
    }

    /// Takes `bytes` if they fit now.
    fn try_take(&self, bytes: u64) -> bool {
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| held.checked_add(bytes).filter(|&after| after <= self.max))
            .is_ok()
    }
}

impl Drop for WorkLease<'_> {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::SeqCst);
        if self.budget.waiting.load(Ordering::SeqCst) > 0 {
            // Taken so the wake cannot fall between a waiter's try and its sleep.
            let _guard = self.budget.lock.lock_or_recover();
            self.budget.freed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn size(decode: u64, output: u64) -> WorkSize {
        WorkSize { decode, output }
    }

    #[test]
    fn work_within_the_budget_runs_at_once_and_gives_its_bytes_back() {
        let budget = WorkBudget::new(1000, Duration::ZERO);
        let a = budget.reserve(size(300, 200)).expect("fits");
        let b = budget.reserve(size(0, 500)).expect("fits beside it");
        assert_eq!(budget.held(), 1000);
        let err = budget.reserve(size(1, 0)).err().expect("no room, no wait");
        assert!(matches!(err, WorkRefused::Busy { need: 1, held: 1000, max: 1000, .. }), "{err}");
        drop((a, b));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn an_output_or_a_decode_larger_than_the_budget_is_refused_at_once() {
        let budget = WorkBudget::new(1000, Duration::from_secs(60));
        let started = Instant::now();
        let err = budget.reserve(size(10, 1001)).err().expect("one output larger than the bound");
        assert!(matches!(err, WorkRefused::TooLarge { what: "one output", need: 1001, max: 1000 }), "{err}");
        assert!(err.to_string().contains("1001 B") && err.to_string().contains("1000 B"), "both figures: {err}");
        assert!(matches!(budget.reserve(size(1001, 0)), Err(WorkRefused::TooLarge { what: "the decode of one image", .. })));
        assert!(started.elapsed() < Duration::from_secs(5), "refused without waiting");
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn work_whose_parts_fit_but_not_together_runs_alone() {
        let budget = Arc::new(WorkBudget::new(1000, Duration::from_secs(60)));
        let small = budget.reserve(size(0, 100)).expect("fits");
        let big = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                let lease = budget.reserve(size(800, 800)).expect("alone");
                let held = budget.held();
                drop(lease);
                held
            })
        };
        while budget.waiting.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(budget.held(), 100, "the big one waits while anything else is in flight");
        drop(small);
        assert_eq!(big.join().expect("thread"), 1000, "it took the whole budget");
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn concurrent_work_never_holds_more_than_the_budget_and_waiters_are_woken_by_releases() {
        let budget = Arc::new(WorkBudget::new(1000, Duration::from_secs(60)));
        let peak = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (budget, peak) = (Arc::clone(&budget), Arc::clone(&peak));
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let lease = budget.reserve(size(200, 200)).expect("woken in time");
                        peak.fetch_max(budget.held(), Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(200));
                        drop(lease);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert!(peak.load(Ordering::SeqCst) <= 1000, "peak {}", peak.load(Ordering::SeqCst));
        assert_eq!(budget.held(), 0);
        assert_eq!(budget.waiting.load(Ordering::SeqCst), 0);
    }
}
