//! The threads that answer opens needing pixel work (a decode, an augmentation): a FUSE thread
//! hands such an open here, its reply with it, and goes back to other requests.
//!
//! Idle threads sleep on the queue. The rayon pool this replaces kept its idle workers awake in
//! a loop of `sched_yield` calls before they slept, after every job: on 2 cores, during a cold
//! pass, about 6% of the daemon's CPU samples were decode threads yielding, taken from the misses
//! and the refill. The threads are stopped and joined when the pool is dropped (with the FUSE
//! adapter, at unmount: `TaskQueue`'s drop), after the opens already handed over are answered.

use std::io;

use prepfs_base::tasks::{self, TaskQueue};

/// See the module documentation.
pub(crate) struct OpenPool {
    queue: TaskQueue,
}

impl OpenPool {
    /// `threads` threads (at least one), named `prepfs-decode-<i>`, at the priority of requests.
    /// A job that panics has dropped its reply (the kernel gets EIO); its thread goes on serving
    /// (`tasks::TaskQueue`).
    pub(crate) fn new(threads: usize) -> io::Result<OpenPool> {
        Ok(OpenPool { queue: TaskQueue::start("prepfs-decode", threads, tasks::REQUEST)? })
    }

    /// Runs `job` on one of the threads; on the caller's own thread should the pool be closed
    /// (the job carries a reply, which must be answered either way).
    pub(crate) fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        if let Err(job) = self.queue.submit(Box::new(job)) {
            job();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prepfs_base::sync::{Arc, LockExt, Mutex};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn every_job_runs_on_a_pool_thread_and_dropping_the_pool_waits_for_them() {
        let pool = OpenPool::new(3).expect("pool");
        let done = Arc::new(AtomicUsize::new(0));
        let names = Arc::new(Mutex::new(HashSet::new()));
        for _ in 0..50 {
            let (done, names) = (Arc::clone(&done), Arc::clone(&names));
            pool.spawn(move || {
                std::thread::sleep(Duration::from_millis(1));
                let name = std::thread::current().name().unwrap_or_default().to_string();
                names.lock_or_recover().insert(name);
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), 50, "every job handed over ran before the drop returned");
        let names = names.lock_or_recover();
        assert!(!names.is_empty() && names.iter().all(|n| n.starts_with("prepfs-decode-")), "{names:?}");
    }

    #[test]
    fn a_job_that_panics_leaves_its_thread_serving_the_next_ones() {
        let pool = OpenPool::new(1).expect("pool");
        let done = Arc::new(AtomicUsize::new(0));
        pool.spawn(|| panic!("a job failed"));
        let after = Arc::clone(&done);
        pool.spawn(move || {
            after.fetch_add(1, Ordering::SeqCst);
        });
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}
