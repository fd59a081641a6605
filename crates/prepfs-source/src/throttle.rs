//! The source read limit (`source: { read_limit: 200MB/s }`): one rate shared by every read of
//! the source dataset, for users on shared storage (and for benchmarks that model it).
//!
//! A virtual-clock token bucket (GCRA): each read of `n` bytes moves the bucket's "next free"
//! time on by `n / rate`; the reader sleeps until that time, less a small burst allowance. The
//! lock is held only to move the clock, never while sleeping, so readers queue fairly and a
//! throttled read never blocks an unthrottled request.

use std::time::{Duration, Instant};

use prepfs_base::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// How far ahead of the rate a reader may run (absorbs timer slack and small reads).
const BURST: Duration = Duration::from_millis(20);

/// A shared byte-rate limit.
pub struct ReadLimit {
    bytes_per_s: f64,
    next_free: Mutex<Instant>,
    /// Set at unmount: sleeping readers wake and give up, so unmount never waits on them.
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl ReadLimit {
    /// A limit of `bytes_per_s` (positive).
    pub fn new(bytes_per_s: u64) -> ReadLimit {
        ReadLimit {
            bytes_per_s: bytes_per_s.max(1) as f64,
            next_free: Mutex::new(Instant::now()),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// The rate, bytes per second.
    pub fn bytes_per_s(&self) -> u64 {
        self.bytes_per_s as u64
    }

    /// Wakes every sleeping reader and makes later ones return at once (unmount).
    pub fn stop(&self) {
        *self.stopped.lock_or_recover() = true;
        self.wake.notify_all();
    }

    /// Accounts for a read of `bytes` and sleeps the calling thread as long as the rate needs.
    /// Returns false when the limit was stopped (unmount): the read should be abandoned.
    pub fn take(&self, bytes: u64) -> bool {
        let now = Instant::now();
        let due = {
            let mut next = self.next_free.lock_or_recover();
            let start = (*next).max(now);
            *next = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_s);
            *next
        };
        let wake_at = due.checked_sub(BURST).unwrap_or(due);
        let mut stopped = self.stopped.lock_or_recover();
        while !*stopped {
            let Some(wait) = wake_at.checked_duration_since(Instant::now()) else { break };
            stopped = self.wake.wait_timeout_or_recover(stopped, wait);
        }
        !*stopped
    }
}

/// Accounts `bytes` against `limit`, if there is one; false once the limit was stopped.
pub fn take(limit: Option<&ReadLimit>, bytes: u64) -> bool {
    limit.is_none_or(|limit| limit.take(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn readers_together_keep_to_the_rate() {
        // 4 threads read 10 x 50 KB each at 10 MB/s: 2 MB, so at least 0.2 s less the burst.
        let limit = Arc::new(ReadLimit::new(10_000_000));
        let started = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let limit = Arc::clone(&limit);
                std::thread::spawn(move || (0..10).for_each(|_| assert!(limit.take(50_000))))
            })
            .collect();
        for t in threads {
            t.join().expect("reader");
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(175), "2 MB at 10 MB/s took only {took:?}");
    }

    #[test]
    fn stopping_the_limit_wakes_a_sleeping_reader_at_once() {
        let limit = Arc::new(ReadLimit::new(1000));
        let sleeper = {
            let limit = Arc::clone(&limit);
            // 60 s worth of bytes at 1 kB/s.
            std::thread::spawn(move || (limit.take(10), limit.take(60_000)))
        };
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        limit.stop();
        let (first, second) = sleeper.join().expect("reader");
        assert!(first && !second, "the throttled read was not abandoned");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!limit.take(1), "a read after stop does not wait");
    }

    #[test]
    fn no_limit_never_waits() {
        let started = Instant::now();
        for _ in 0..1000 {
            take(None, 1 << 30);
        }
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
