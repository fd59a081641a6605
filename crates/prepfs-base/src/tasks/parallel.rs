//! A rayon pool its owner holds, for work split over borrowed data (a loader's batch, produced
//! into the slots of its ring; the samples validated at mount): threads named `<name>-<i>` at
//! the nice value asked for, joined when the pool is dropped. Work runs on it only through
//! [`Parallel::install`], so rayon's global pool is never built.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::sync::{LockExt, Mutex};

/// See the module documentation.
pub struct Parallel {
    /// `None` only while dropping.
    pool: Option<rayon::ThreadPool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Parallel {
    /// `threads` threads (at least one) named `<name>-<i>`, at nice `nice`.
    pub fn start(name: &str, threads: usize, nice: i32) -> io::Result<Parallel> {
        let started = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&started);
        let name = name.to_string();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .spawn_handler(move |thread| {
                let handle = super::spawn(format!("{name}-{}", thread.index()), nice, move || thread.run())?;
                keep.lock_or_recover().push(handle);
                Ok(())
            })
            .build()
            .map_err(io::Error::other)?;
        Ok(Parallel { pool: Some(pool), threads: started })
    }

    /// Runs `work` on the pool: the parallel iterators inside it use the pool's threads.
    pub fn install<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(work),
            None => work(),
        }
    }
}

impl Drop for Parallel {
    /// Ends the pool and joins its threads (they end once their work is done).
    fn drop(&mut self) {
        drop(self.pool.take());
        for thread in std::mem::take(&mut *self.threads.lock_or_recover()) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn work_installed_runs_on_the_named_threads_and_the_drop_joins_them() {
        let pool = Parallel::start("prepfs-test-fill", 2, crate::tasks::REQUEST).expect("pool");
        let names: Vec<String> =
            pool.install(|| (0..64).into_par_iter().map(|_| std::thread::current().name().unwrap_or_default().to_string()).collect());
        assert!(names.iter().all(|n| n.starts_with("prepfs-test-fill-")), "{names:?}");
        // SAFETY: gettid takes nothing.
        let tids: Vec<i64> = pool.install(|| rayon::broadcast(|_| unsafe { libc::syscall(libc::SYS_gettid) }));
        assert_eq!(tids.len(), 2);
        assert!(tids.iter().all(|tid| std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()));
        drop(pool);
        // The join returns once each thread has exited; the kernel reaps its task entry a moment
        // later (the join wakes on the thread's exit, before the entry goes), so allow it that.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        for tid in tids {
            let task = format!("/proc/self/task/{tid}");
            while std::path::Path::new(&task).exists() && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            assert!(!std::path::Path::new(&task).exists(), "thread {tid} still runs 5 s after the drop");
        }
    }
}
