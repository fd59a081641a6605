//! The source read limit (`source: { read_limit: 200MB/s }`): one rate shared by every read of
//! the source dataset, for users on shared storage (and for benchmarks that model it).
//!
//! A virtual-clock token bucket (GCRA): each read of `n` bytes moves the bucket's "next free"
//! time on by `n / rate`; the reader sleeps until that time, less a small burst allowance. The
//! lock is held only to move the clock, never while sleeping, so readers queue fairly and a
//! throttled read never blocks an unthrottled request.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How far ahead of the rate a reader may run (absorbs timer slack and small reads).
const BURST: Duration = Duration::from_millis(20);

/// A shared byte-rate limit.
pub struct ReadLimit {
    bytes_per_s: f64,
    next_free: Mutex<Instant>,
}

impl ReadLimit {
    /// A limit of `bytes_per_s` (positive).
    pub fn new(bytes_per_s: u64) -> ReadLimit {
        ReadLimit { bytes_per_s: bytes_per_s.max(1) as f64, next_free: Mutex::new(Instant::now()) }
    }

    /// The rate, bytes per second.
    pub fn bytes_per_s(&self) -> u64 {
        self.bytes_per_s as u64
    }

    /// Accounts for a read of `bytes` and sleeps the calling thread as long as the rate needs.
    pub fn take(&self, bytes: u64) {
        let now = Instant::now();
        let due = {
            let mut next = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*next).max(now);
            *next = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_s);
            *next
        };
        if let Some(wait) = due.checked_duration_since(now + BURST) {
            std::thread::sleep(wait);
        }
    }
}

/// Accounts `bytes` against `limit`, if there is one.
pub fn take(limit: Option<&ReadLimit>, bytes: u64) {
    if let Some(limit) = limit {
        limit.take(bytes);
    }
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
                std::thread::spawn(move || (0..10).for_each(|_| limit.take(50_000)))
            })
            .collect();
        for t in threads {
            t.join().expect("reader");
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(175), "2 MB at 10 MB/s took only {took:?}");
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
