//! The crate's synchronisation primitives, in one place so that its concurrency can be
//! model-checked (the seam AWS's mountpoint-s3 uses).
//!
//! Normally these are `std::sync`'s own types, re-exported unchanged: no cost, no wrapper. Built
//! with `--features shuttle` they are [shuttle](https://docs.rs/shuttle)'s instead, whose every
//! lock, wait and atomic operation is a point where shuttle's scheduler may switch threads; its
//! checkers (`tests/shuttle.rs`) then run the code under many thread interleavings, each
//! reproducible from a seed.
//!
//! What goes through here: every lock in the crate (`Mutex`, `RwLock`, `Condvar`), each taken
//! through [`LockExt`], [`RwLockExt`] or [`CondvarExt`], which recover a poisoned lock (see
//! `recover`); and the atomics that synchronise the sample cache (`cache`: the budget
//! reservation, the status bytes) and opportunistic sampling (`sampling`: the seen and claimed
//! bits, epochs). Other atomics (statistics counters, flags) stay `std`'s. Under
//! `shuttle` only the cache and sampling are exercised (`tests/shuttle.rs`); the other modules'
//! locks are shuttle's too but are never taken in a shuttle build (its timed waits never time out
//! there). `log`'s table of line kinds sits in a `static`, so its cell is std's `OnceLock`.
//!
//! Shuttle has no `OnceLock` (and `Arc`/`Weak` are std's in shuttle too). std's `OnceLock` blocks
//! the OS thread while another initialises it, and under shuttle all threads share one OS thread,
//! so a waiting thread would hang the run whenever the initialiser yields. So under `shuttle` this
//! module provides a small `OnceLock` whose waiting goes through shuttle's `Mutex` and `Condvar`.
//! Only what the crate calls is provided (`new`, `default`, `get`, `get_or_init`).
//!
//! Builds with `shuttle` are for the model checks only: shuttle's primitives panic when used
//! outside a shuttle test, so the rest of the test suite runs without the feature.

// The whole set, used or not yet, so that a module switches over by its import lines alone.
#[cfg(not(feature = "shuttle"))]
#[allow(unused_imports)]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

#[cfg(feature = "shuttle")]
#[allow(unused_imports)]
pub use shuttle::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

#[cfg(feature = "shuttle")]
pub use once_lock::OnceLock;

use std::sync::{LockResult, PoisonError};
use std::time::Duration;

/// The guard of a lock result, poisoned or not.
///
/// Poisoned locks are recovered, never propagated: a lock is poisoned when a thread panicked
/// while holding it, and in prepfs that thread is serving one request (a decode that panicked, a
/// bug in one path). The structures behind these locks stay usable after such a panic (it loses
/// at most the entry being made), so the next caller takes the guard and goes on: a panicking
/// request thread must not take the mount down with it. The traits below are the one way the
/// crate locks, reads, writes and waits.
fn recover<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

/// [`Mutex::lock`] that recovers a poisoned lock (see the note on `recover` in this module: a
/// panicking request thread must not take the mount down).
pub trait LockExt<T> {
    /// The guard, whether or not a previous holder panicked.
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        recover(self.lock())
    }
}

/// [`RwLock::read`] and [`RwLock::write`] that recover a poisoned lock, as [`LockExt`] does.
pub trait RwLockExt<T> {
    /// The read guard, whether or not a previous writer panicked.
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T>;
    /// The write guard, whether or not a previous writer panicked.
    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T> {
        recover(self.read())
    }
    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T> {
        recover(self.write())
    }
}

/// [`Condvar`] waits that recover a poisoned lock, as [`LockExt`] does.
pub trait CondvarExt {
    /// Waits for a notification; the guard again.
    fn wait_or_recover<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
    /// Waits for a notification or `timeout`, whichever comes first; the guard again (callers
    /// check their condition, not whether the wait timed out).
    fn wait_timeout_or_recover<'a, T>(&self, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T>;
}

impl CondvarExt for Condvar {
    fn wait_or_recover<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        recover(self.wait(guard))
    }
    fn wait_timeout_or_recover<'a, T>(&self, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T> {
        recover(self.wait_timeout(guard, timeout)).0
    }
}

/// Atomic integers and flags: `std::sync::atomic`, or shuttle's under `--features shuttle`.
pub mod atomic {
    #[cfg(not(feature = "shuttle"))]
    pub use std::sync::atomic::*;

    #[cfg(feature = "shuttle")]
    pub use shuttle::sync::atomic::*;
}

#[cfg(feature = "shuttle")]
mod once_lock {
    use super::{CondvarExt, LockExt};
    use shuttle::sync::{Condvar, Mutex};

    /// A cell written once, whose waiters wait through shuttle (see the module documentation).
    /// The value lives in a std `OnceLock` that is only ever set by one thread at a time (the
    /// one that won `running`), so it never blocks.
    pub struct OnceLock<T> {
        value: std::sync::OnceLock<T>,
        /// Whether some thread is running an initialiser now.
        running: Mutex<bool>,
        done: Condvar,
    }

    impl<T> Default for OnceLock<T> {
        fn default() -> Self {
            Self::new()
        }
    }

    /// Clears `running` and wakes the waiters when the initialiser returns or unwinds (as std's
    /// does, a panicking initialiser leaves the cell empty for the next caller to try).
    struct Finished<'a> {
        running: &'a Mutex<bool>,
        done: &'a Condvar,
    }

    impl Drop for Finished<'_> {
        fn drop(&mut self) {
            *self.running.lock_or_recover() = false;
            self.done.notify_all();
        }
    }

    impl<T> OnceLock<T> {
        /// An empty cell.
        pub fn new() -> Self {
            OnceLock { value: std::sync::OnceLock::new(), running: Mutex::new(false), done: Condvar::new() }
        }

        /// The value, if set.
        #[allow(dead_code)]
        pub fn get(&self) -> Option<&T> {
            self.value.get()
        }

        /// The value, running `init` first if it is not set and no other thread is running an
        /// initialiser; if one is, waits for it.
        pub fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
            if let Some(v) = self.value.get() {
                return v;
            }
            let mut running = self.running.lock_or_recover();
            loop {
                if let Some(v) = self.value.get() {
                    return v;
                }
                if !*running {
                    break;
                }
                running = self.done.wait_or_recover(running);
            }
            *running = true;
            drop(running);
            let finished = Finished { running: &self.running, done: &self.done };
            let value = init();
            if self.value.set(value).is_err() {
                unreachable!("only the thread holding `running` sets the value");
            }
            drop(finished);
            self.value.get().expect("just set")
        }
    }
}
