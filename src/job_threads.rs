//! Threads that run boxed jobs taken off one queue: the loop the decode threads
//! (`fuse/pool.rs`) and the source's I/O threads (`source/pool.rs`) share.
//!
//! Idle threads sleep on the queue (one waits in `recv`, the others on its lock): none spins. A
//! job that panics is caught, and what it held (a FUSE reply, an answer channel) is dropped on
//! the way out, so its caller hears of it; the thread goes on with the next job. Once the queue's
//! sender is dropped, each thread runs what is still queued, says it has finished, and ends; its
//! owner joins it, or leaves behind one stuck in a job that never returns (`source/pool.rs`).

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crate::sync::{LockExt, Mutex};

/// A unit of work for the threads.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// One thread of a queue.
pub(crate) struct JobThread {
    handle: JoinHandle<()>,
    finished: Arc<AtomicBool>,
}

impl JobThread {
    /// Whether it has ended (its queue closed and emptied).
    pub(crate) fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Waits for it to end.
    pub(crate) fn join(self) {
        let _ = self.handle.join();
    }
}

/// `threads` threads (at least one) named `<name>-<i>`, and the sender of their queue. If one
/// cannot be started, the ones already started are ended and joined.
pub(crate) fn start(name: &str, threads: usize) -> io::Result<(mpsc::Sender<Job>, Vec<JobThread>)> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut started = Vec::new();
    for i in 0..threads.max(1) {
        let rx = Arc::clone(&rx);
        let finished = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&finished);
        let spawned = std::thread::Builder::new().name(format!("{name}-{i}")).spawn(move || {
            loop {
                // The lock is let go before the job runs (the guard is a temporary).
                let job = rx.lock_or_recover().recv();
                match job {
                    Ok(job) => drop(catch_unwind(AssertUnwindSafe(job))),
                    Err(_) => break, // the sender is gone and the queue is empty
                }
            }
            done.store(true, Ordering::Release);
        });
        match spawned {
            Ok(handle) => started.push(JobThread { handle, finished }),
            Err(e) => {
                drop(tx);
                for t in started {
                    t.join();
                }
                return Err(e);
            }
        }
    }
    Ok((tx, started))
}
