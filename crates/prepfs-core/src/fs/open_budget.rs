//! The bound on what open files pin: every open handle holds its output (an augmented crop, a
//! decoded image, a listing) until it is released, so without a bound a user holding many
//! handles open could grow the daemon without end. Each handle takes a [`Lease`] of its bytes
//! from the [`OpenBudget`]; an open past the budget waits a moment for releases, then is
//! refused (ENFILE). One user may hold at most half the budget, so another user's training
//! keeps its share; root and the mount's owner may use all of it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prepfs_base::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// How long an open past the budget waits for releases before it is refused.
pub(crate) const OPEN_WAIT: Duration = Duration::from_secs(2);

/// See the module documentation.
pub(crate) struct OpenBudget {
    max: u64,
    wait: Duration,
    held: Mutex<Held>,
    released: Condvar,
}

#[derive(Default)]
struct Held {
    total: u64,
    by_uid: HashMap<u32, u64>,
    /// Opens waiting for a release: a release wakes them only when there are some (a wake is a
    /// system call, and nearly every release has no one to wake).
    waiting: usize,
}

/// Bytes pinned by one handle; given back when dropped (the handle released).
pub(crate) struct Lease {
    budget: Arc<OpenBudget>,
    uid: u32,
    bytes: u64,
}

impl OpenBudget {
    /// A budget of `max` bytes; opens past it wait up to `wait`.
    pub(crate) fn new(max: u64, wait: Duration) -> Arc<OpenBudget> {
        Arc::new(OpenBudget { max, wait, held: Mutex::new(Held::default()), released: Condvar::new() })
    }

    /// Leases `bytes` to a handle of `uid` (`privileged`: root or the mount's owner, who may
    /// use the whole budget), waiting for releases when it is spent. `None`: refused.
    pub(crate) fn lease(self: &Arc<Self>, uid: u32, privileged: bool, bytes: u64) -> Option<Lease> {
        let cap = if privileged { self.max } else { self.max / 2 };
        let deadline = Instant::now() + self.wait;
        let mut held = self.held.lock_or_recover();
        loop {
            let mine = held.by_uid.get(&uid).copied().unwrap_or(0);
            // An output larger than the whole budget is served when nothing else is pinned by
            // this user, so that one big image never becomes unreadable.
            let fits = (held.total + bytes <= self.max && mine + bytes <= cap) || (mine == 0 && held.total == 0);
            if fits {
                held.total += bytes;
                *held.by_uid.entry(uid).or_insert(0) += bytes;
                return Some(Lease { budget: Arc::clone(self), uid, bytes });
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            held.waiting += 1;
            held = self.released.wait_timeout_or_recover(held, left);
            held.waiting -= 1;
        }
    }

    /// Bytes leased now.
    pub(crate) fn held(&self) -> u64 {
        self.held.lock_or_recover().total
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut held = self.budget.held.lock_or_recover();
        held.total -= self.bytes;
        if let Some(mine) = held.by_uid.get_mut(&self.uid) {
            *mine -= self.bytes;
            if *mine == 0 {
                held.by_uid.remove(&self.uid);
            }
        }
        let wake = held.waiting > 0;
        drop(held);
        if wake {
            self.budget.released.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_past_the_budget_wait_for_a_release_and_are_refused_without_one() {
        let budget = OpenBudget::new(1000, Duration::from_millis(200));
        let a = budget.lease(0, true, 600).expect("fits");
        let started = Instant::now();
        assert!(budget.lease(0, true, 600).is_none(), "past the budget");
        assert!(started.elapsed() >= Duration::from_millis(200), "it waited first");
        let waiter = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || budget.lease(0, true, 600).is_some())
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(a);
        assert!(waiter.join().expect("waiter"), "a release lets the waiting open through");
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_release_wakes_an_open_waiting_for_it_rather_than_leaving_it_to_its_time_limit() {
        let budget = OpenBudget::new(1000, Duration::from_secs(60));
        let a = budget.lease(0, true, 600).expect("fits");
        let waiter = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                let started = Instant::now();
                budget.lease(0, true, 600).map(|_| started.elapsed())
            })
        };
        // The waiter is counted once it waits; the release must then wake it.
        while budget.held.lock_or_recover().waiting == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(a);
        let waited = waiter.join().expect("waiter").expect("let through");
        assert!(waited < Duration::from_secs(30), "woken by the release, not by its 60 s limit: {waited:?}");
        assert_eq!(budget.held.lock_or_recover().waiting, 0);
    }

    #[test]
    fn one_user_may_take_half_and_the_owner_the_rest() {
        let budget = OpenBudget::new(1000, Duration::ZERO);
        let mine: Vec<_> = (0..5).map(|_| budget.lease(65534, false, 100).expect("within half")).collect();
        assert!(budget.lease(65534, false, 100).is_none(), "a user is held to half");
        let other = budget.lease(1000, false, 100).expect("another user keeps a share");
        let owner: Vec<_> = (0..4).map(|_| budget.lease(0, true, 100).expect("the owner")).collect();
        assert_eq!(budget.held(), 1000);
        drop((mine, other, owner));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn an_output_larger_than_the_budget_is_served_alone() {
        let budget = OpenBudget::new(1000, Duration::ZERO);
        let big = budget.lease(5, false, 5000).expect("alone");
        assert!(budget.lease(6, false, 10).is_none());
        drop(big);
    }
}
