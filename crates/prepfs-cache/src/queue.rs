//! The write queue of a tier below memory: a bounded queue (by jobs and by payload bytes) that
//! request threads push to without waiting, one named worker thread that takes from it, the
//! count of what is pending, a flush that waits (within a limit) until nothing is, and the close
//! that lets the worker drain the queue and joins it (also at drop). The disk tier's writer and
//! the remote tier's writer are each one of these; what a job does is theirs.
//!
//! A job counts as pending from its push until the worker drops it (its [`Taken`]), so a
//! worker that writes in batches keeps its batch pending until the batch is written.

use std::io;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prepfs_base::sync::{LockExt, Mutex};

/// What a queue carries: its payload bytes count against the queue's bound.
pub trait Job: Send + 'static {
    fn bytes(&self) -> u64;
}

/// Why a push was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The queue holds its bound of jobs or bytes: the write is dropped, never waited for.
    #[error("the write queue is full")]
    Full,
    /// The queue is closed (the end of a mount) or its worker is gone.
    #[error("the write queue is closed")]
    Closed,
}

/// What is pending: jobs pushed and not yet done, and their bytes.
#[derive(Default)]
struct Pending {
    jobs: AtomicU64,
    bytes: AtomicU64,
}

impl Pending {
    fn done(&self, bytes: u64) {
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.jobs.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A job the worker took: pending until dropped.
pub struct Taken<J: Job> {
    job: J,
    bytes: u64,
    pending: Arc<Pending>,
}

impl<J: Job> Deref for Taken<J> {
    type Target = J;
    fn deref(&self) -> &J {
        &self.job
    }
}

impl<J: Job> Drop for Taken<J> {
    fn drop(&mut self) {
        self.pending.done(self.bytes);
    }
}

/// The worker's end of the queue. Its takes end (`None`, `Disconnected`) once the queue is
/// closed and drained.
pub struct Jobs<J: Job> {
    receiver: Receiver<J>,
    pending: Arc<Pending>,
}

impl<J: Job> Jobs<J> {
    fn taken(&self, job: J) -> Taken<J> {
        let bytes = job.bytes();
        Taken { job, bytes, pending: Arc::clone(&self.pending) }
    }

    /// The next job, waiting for it; `None` once the queue is closed and drained.
    pub fn recv(&self) -> Option<Taken<J>> {
        self.receiver.recv().ok().map(|job| self.taken(job))
    }

    /// The next job, waiting at most `limit`.
    pub fn recv_timeout(&self, limit: Duration) -> Result<Taken<J>, RecvTimeoutError> {
        self.receiver.recv_timeout(limit).map(|job| self.taken(job))
    }

    /// The next job if one is queued now.
    pub(crate) fn try_recv(&self) -> Option<Taken<J>> {
        self.receiver.try_recv().ok().map(|job| self.taken(job))
    }
}

/// The queue and its worker: see the module documentation.
pub(crate) struct WriteQueue<J: Job> {
    sender: Mutex<Option<SyncSender<J>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    pending: Arc<Pending>,
    max_bytes: u64,
}

impl<J: Job> WriteQueue<J> {
    /// A queue of at most `max_jobs` jobs holding at most `max_bytes` (one job of any size is
    /// taken into an empty queue), and its worker, a thread named `name` running `work`.
    pub fn start(name: &str, max_jobs: usize, max_bytes: u64, work: impl FnOnce(Jobs<J>) + Send + 'static) -> io::Result<WriteQueue<J>> {
        let (sender, receiver) = sync_channel(max_jobs);
        let pending = Arc::new(Pending::default());
        let jobs = Jobs { receiver, pending: Arc::clone(&pending) };
        let worker = prepfs_base::tasks::spawn(name.to_string(), prepfs_base::tasks::REQUEST, move || work(jobs))?;
        Ok(WriteQueue { sender: Mutex::new(Some(sender)), worker: Mutex::new(Some(worker)), pending, max_bytes })
    }

    /// Queues `job` if the bounds allow, never waiting.
    pub fn push(&self, job: J) -> Result<(), Refused> {
        let len = job.bytes();
        let queued = self.pending.bytes.fetch_add(len, Ordering::AcqRel);
        if queued > 0 && queued.saturating_add(len) > self.max_bytes {
            self.pending.bytes.fetch_sub(len, Ordering::AcqRel);
            return Err(Refused::Full);
        }
        self.pending.jobs.fetch_add(1, Ordering::AcqRel);
        let sent = match &*self.sender.lock_or_recover() {
            Some(sender) => sender.try_send(job).map_err(|e| match e {
                TrySendError::Full(_) => Refused::Full,
                TrySendError::Disconnected(_) => Refused::Closed,
            }),
            None => Err(Refused::Closed),
        };
        if sent.is_err() {
            self.pending.done(len);
        }
        sent
    }

    /// Jobs pushed and not yet done.
    pub fn pending(&self) -> u64 {
        self.pending.jobs.load(Ordering::Acquire)
    }

    /// Waits (up to `limit`) until every queued job is done; returns whether it is.
    pub fn flush(&self, limit: Duration) -> bool {
        let started = Instant::now();
        while self.pending() > 0 {
            if started.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Closes the queue: the worker does what is queued and ends, and is joined. Returns whether
    /// this call joined it (the first close).
    pub fn close(&self) -> bool {
        self.sender.lock_or_recover().take();
        let worker = self.worker.lock_or_recover().take();
        match worker {
            Some(worker) => {
                if worker.join().is_err() {
                    tracing::warn!("a cache tier's writer thread panicked");
                }
                true
            }
            None => false,
        }
    }
}

impl<J: Job> Drop for WriteQueue<J> {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    struct Write(u64);

    impl Job for Write {
        fn bytes(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn a_queue_past_its_bytes_or_jobs_refuses_without_waiting_and_close_drains_and_joins() {
        let (go, wait) = channel::<()>();
        let (done, written) = channel::<(String, u64)>();
        let queue = WriteQueue::start("prepfs-test-writer", 2, 100, move |jobs: Jobs<Write>| {
            let _ = wait.recv();
            while let Some(job) = jobs.recv() {
                let name = std::thread::current().name().unwrap_or_default().to_string();
                let _ = done.send((name, job.0));
            }
        })
        .expect("start");
        assert_eq!(queue.push(Write(500)), Ok(()), "one job of any size goes into an empty queue");
        assert_eq!(queue.push(Write(1)), Err(Refused::Full), "past the bytes");
        assert_eq!(queue.pending(), 1);
        assert!(!queue.flush(Duration::from_millis(20)), "the worker waits");
        go.send(()).expect("go");
        assert!(queue.flush(Duration::from_secs(10)));
        for n in 0..2 {
            assert_eq!(queue.push(Write(n)), Ok(()));
        }
        assert!(queue.close(), "the first close joins the worker");
        assert!(!queue.close());
        assert_eq!(queue.push(Write(1)), Err(Refused::Closed));
        let got: Vec<_> = written.try_iter().collect();
        assert_eq!(got, vec![("prepfs-test-writer".to_string(), 500), ("prepfs-test-writer".into(), 0), ("prepfs-test-writer".into(), 1)]);
        assert_eq!(queue.pending(), 0);
    }

    #[test]
    fn a_batch_taken_stays_pending_until_it_is_dropped() {
        let (go, wait) = channel::<()>();
        let (took, taken) = channel::<usize>();
        let queue = WriteQueue::start("prepfs-test-batch", 8, 1 << 20, move |jobs: Jobs<Write>| {
            let mut batch = Vec::new();
            while let Some(job) = jobs.recv() {
                batch.push(job);
                while let Some(more) = jobs.try_recv() {
                    batch.push(more);
                }
                let _ = took.send(batch.len());
                let _ = wait.recv();
                batch.clear();
            }
        })
        .expect("start");
        for n in 0..3 {
            assert_eq!(queue.push(Write(n)), Ok(()));
        }
        // The worker has taken a batch (the event, not a time) and holds it: all three stay pending.
        let took = taken.recv_timeout(Duration::from_secs(10)).expect("the worker takes a batch");
        assert!(took >= 1);
        assert_eq!(queue.pending(), 3, "taken but not written: still pending");
        go.send(()).expect("go");
        go.send(()).expect("go");
        go.send(()).expect("go");
        assert!(queue.flush(Duration::from_secs(10)));
        drop(queue);
    }
}
