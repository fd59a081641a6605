//! The crate's synchronisation primitives, in one place so that its concurrency can be
//! model-checked (the seam AWS's mountpoint-s3 uses).
//!
//! Normally these are `std::sync`'s own types, re-exported unchanged: no cost, no wrapper. Built
//! with `--features shuttle` they are [shuttle](https://docs.rs/shuttle)'s instead, whose every
//! lock, wait and atomic operation is a point where shuttle's scheduler may switch threads; its
//! checkers (`tests/shuttle.rs`) then run the code under many thread interleavings, each
//! reproducible from a seed.
//!
//! What goes through here: the locks and atomics of the sample cache (`cache`: shard locks, the
//! budget reservation, the status bytes, single-flight) and of opportunistic sampling (`sampling`:
//! the per-job lock, the seen and claimed bits, epochs). Not through here: the job registry's
//! `RwLock` (its guard types are spelled `std::sync::...` in `sampling`), the per-job counters
//! handed to `stats::bump`, and everything in the other modules; under `shuttle` those stay
//! `std`'s, which is correct as long as a model check does not contend on them (the checks create
//! and retire jobs from one thread).
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

/// Atomic integers and flags: `std::sync::atomic`, or shuttle's under `--features shuttle`.
pub mod atomic {
    #[cfg(not(feature = "shuttle"))]
    pub use std::sync::atomic::*;

    #[cfg(feature = "shuttle")]
    pub use shuttle::sync::atomic::*;
}

#[cfg(feature = "shuttle")]
mod once_lock {
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
            *self.running.lock().unwrap_or_else(|p| p.into_inner()) = false;
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
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(v) = self.value.get() {
                    return v;
                }
                if !*running {
                    break;
                }
                running = self.done.wait(running).unwrap_or_else(|p| p.into_inner());
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
