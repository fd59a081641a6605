//! The source's own I/O threads: every read of the source runs here, and the caller waits at
//! most the timeout for it. A read that hangs (a hung network share) costs one of these
//! threads, never a decode-pool thread or a FUSE thread, and its request gets an error.

use std::io;
use std::sync::mpsc;
use std::time::Duration;

use prepfs_base::tasks::{self, Task, TaskQueue};

/// See the module documentation.
pub struct IoPool {
    queue: TaskQueue,
    timeout: Duration,
}

impl IoPool {
    /// `threads` I/O threads (`prepfs-io-<i>`); a call not answered within `timeout` fails with
    /// `TimedOut`, and one whose read panicked fails at once (its thread goes on,
    /// `tasks::TaskQueue`).
    pub fn new(threads: usize, timeout: Duration) -> io::Result<IoPool> {
        Ok(IoPool { queue: TaskQueue::start("prepfs-io", threads, tasks::REQUEST)?, timeout })
    }

    /// Runs `work` on an I/O thread and waits for its answer, at most the timeout.
    pub fn run<T: Send + 'static>(&self, work: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
        let (answer, answered) = mpsc::sync_channel(1);
        let task: Task = Box::new(move || {
            let _ = answer.send(work());
        });
        if self.queue.submit(task).is_err() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "unmounting: source I/O stopped"));
        }
        match answered.recv_timeout(self.timeout) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the source did not answer within {:?} (source.timeout)", self.timeout),
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(io::Error::other("a source I/O thread failed")),
        }
    }

    /// Stops taking work and joins the threads; one stuck in a hung read past `grace` is left
    /// behind (said in the log), since nothing can interrupt it.
    pub fn shutdown(&self, grace: Duration) {
        self.queue.close(Some(grace));
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.shutdown(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_read_that_panics_fails_its_caller_and_its_thread_serves_the_next_read() {
        let pool = IoPool::new(1, Duration::from_secs(20)).expect("pool");
        let failed = pool.run::<u32>(|| panic!("a read failed"));
        assert!(failed.is_err(), "the caller hears of the panic");
        assert_ne!(failed.err().map(|e| e.kind()), Some(io::ErrorKind::TimedOut), "at once, not at the timeout");
        assert_eq!(pool.run(|| Ok(7)).expect("the one thread is still there"), 7);
    }

    #[test]
    fn a_read_past_the_timeout_fails_and_shutdown_leaves_its_stuck_thread_behind() {
        let pool = IoPool::new(1, Duration::from_millis(50)).expect("pool");
        let release = std::sync::Arc::new(std::sync::Barrier::new(2));
        let held = std::sync::Arc::clone(&release);
        let slow = pool.run(move || {
            held.wait();
            Ok(())
        });
        assert_eq!(slow.err().map(|e| e.kind()), Some(io::ErrorKind::TimedOut));
        // The stuck read ends 3 s from now: a shutdown that waited for it would take that long.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            release.wait();
        });
        let started = Instant::now();
        pool.shutdown(Duration::from_millis(100));
        assert!(started.elapsed() < Duration::from_secs(2), "shutdown waited past its grace");
        assert_eq!(
            pool.run(|| Ok(1)).err().map(|e| e.kind()),
            Some(io::ErrorKind::Interrupted),
            "no work is taken after shutdown"
        );
        releaser.join().expect("releaser");
    }
}
