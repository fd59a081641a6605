//! Threads that run boxed tasks taken off one queue: the decode threads (`fuse/pool.rs`) and the
//! source's I/O threads (`source/pool.rs`).
//!
//! Idle threads sleep on the queue's condition variable, and a task queued wakes one of them:
//! none spins, and no other is woken to go back to sleep (issue 55: a channel's receiver behind
//! a lock woke two threads a task, the one that took it and the next waiter for the lock, which
//! only went back to wait in `recv`: 3.4 context switches per sample served on the decode
//! threads, 1.0 on the I/O threads, in `make profile`'s three-job run). A
//! task that panics is caught, and what it held (a FUSE reply, an answer channel) is dropped on
//! the way out, so its caller hears of it; the thread goes on with the next task. Closed, the
//! queue takes no more tasks; each thread runs what is still queued, says it has finished, and
//! ends, and is joined, or, past the close's grace, left behind stuck in a task that never
//! returns (a hung read of the source: nothing can interrupt it).

use std::collections::VecDeque;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// A unit of work for the threads.
pub type Task = Box<dyn FnOnce() + Send>;

/// One thread of a queue.
struct TaskThread {
    handle: JoinHandle<()>,
    finished: Arc<AtomicBool>,
}

/// The tasks queued, and whether the queue is closed.
#[derive(Default)]
struct Pending {
    tasks: VecDeque<Task>,
    closed: bool,
}

/// What the threads share: the tasks, and where idle threads wait for one.
#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    ready: Condvar,
}

impl Shared {
    /// The next task, waited for; `None` once the queue is closed and empty.
    fn next(&self) -> Option<Task> {
        let mut pending = self.pending.lock_or_recover();
        loop {
            if let Some(task) = pending.tasks.pop_front() {
                return Some(task);
            }
            if pending.closed {
                return None;
            }
            pending = self.ready.wait_or_recover(pending);
        }
    }
}

/// See the module documentation.
pub struct TaskQueue {
    shared: Arc<Shared>,
    threads: Mutex<Vec<TaskThread>>,
    name: String,
}

impl TaskQueue {
    /// `threads` threads (at least one) named `<name>-<i>`, at nice `nice`. If one cannot be
    /// started, the ones already started are ended and joined.
    pub fn start(name: &str, threads: usize, nice: i32) -> io::Result<TaskQueue> {
        let shared = Arc::new(Shared::default());
        let queue = TaskQueue { shared: Arc::clone(&shared), threads: Mutex::new(Vec::new()), name: name.to_string() };
        for i in 0..threads.max(1) {
            let shared = Arc::clone(&shared);
            let finished = Arc::new(AtomicBool::new(false));
            let done = Arc::clone(&finished);
            let handle = super::spawn(format!("{name}-{i}"), nice, move || {
                // The lock is let go before the task runs (`next` returns it taken out).
                while let Some(task) = shared.next() {
                    drop(catch_unwind(AssertUnwindSafe(task)));
                }
                done.store(true, Ordering::Release);
            })?; // `queue` drops here on failure: closed, and its threads joined
            queue.threads.lock_or_recover().push(TaskThread { handle, finished });
        }
        Ok(queue)
    }

    /// Queues `task`; hands it back if the queue is closed.
    pub fn submit(&self, task: Task) -> Result<(), Task> {
        let mut pending = self.shared.pending.lock_or_recover();
        if pending.closed {
            return Err(task);
        }
        pending.tasks.push_back(task);
        drop(pending);
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Closes the queue and joins its threads once they have run what was queued; with a
    /// `grace`, a thread still busy past it is left behind (said in the log).
    pub fn close(&self, grace: Option<Duration>) {
        self.shared.pending.lock_or_recover().closed = true;
        self.shared.ready.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock_or_recover());
        let deadline = grace.map(|g| Instant::now() + g);
        let mut stuck = 0;
        for thread in threads {
            if let Some(deadline) = deadline {
                while !thread.finished.load(Ordering::Acquire) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if !thread.finished.load(Ordering::Acquire) {
                    stuck += 1;
                    continue;
                }
            }
            let _ = thread.handle.join();
        }
        if stuck > 0 {
            tracing::warn!(threads = stuck, queue = %self.name, "threads are stuck in tasks that never returned; leaving them");
        }
    }
}

impl Drop for TaskQueue {
    /// Closes the queue and waits for what it holds.
    fn drop(&mut self) {
        self.close(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_closed_queue_runs_what_it_holds_joins_its_threads_and_hands_back_new_tasks() {
        let queue = TaskQueue::start("prepfs-test-queue", 2, super::super::REQUEST).expect("start");
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..20 {
            let done = Arc::clone(&done);
            assert!(queue
                .submit(Box::new(move || {
                    assert!(std::thread::current().name().unwrap_or_default().starts_with("prepfs-test-queue-"));
                    done.fetch_add(1, Ordering::SeqCst);
                }))
                .is_ok());
        }
        queue.close(None);
        assert_eq!(done.load(Ordering::SeqCst), 20);
        assert!(queue.submit(Box::new(|| ())).is_err(), "closed: the task comes back");
    }
}
