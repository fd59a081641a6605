//! The source's own I/O threads: every read of the source runs here, and the caller waits at
//! most the timeout for it. A read that hangs (a hung network share) costs one of these
//! threads, never a decode-pool thread or a FUSE thread, and its request gets an error.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sync::{LockExt, Mutex};

type Task = Box<dyn FnOnce() + Send>;

/// See the module documentation.
pub struct IoPool {
    tx: Mutex<Option<mpsc::Sender<Task>>>,
    threads: Mutex<Vec<(JoinHandle<()>, Arc<AtomicBool>)>>,
    timeout: Duration,
}

impl IoPool {
    /// `threads` I/O threads; a call not answered within `timeout` fails with `TimedOut`.
    pub fn new(threads: usize, timeout: Duration) -> io::Result<IoPool> {
        let (tx, rx) = mpsc::channel::<Task>();
        let rx = Arc::new(Mutex::new(rx));
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            let finished = Arc::new(AtomicBool::new(false));
            let done = Arc::clone(&finished);
            let handle = std::thread::Builder::new().name(format!("prepfs-io-{i}")).spawn(move || {
                loop {
                    let task = rx.lock_or_recover().recv();
                    match task {
                        Ok(task) => task(),
                        Err(_) => break, // the pool is shutting down
                    }
                }
                done.store(true, Ordering::Release);
            })?;
            handles.push((handle, finished));
        }
        Ok(IoPool { tx: Mutex::new(Some(tx)), threads: Mutex::new(handles), timeout })
    }

    /// Runs `work` on an I/O thread and waits for its answer, at most the timeout.
    pub fn run<T: Send + 'static>(&self, work: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
        let (answer, answered) = mpsc::sync_channel(1);
        let task: Task = Box::new(move || {
            let _ = answer.send(work());
        });
        let sent = match self.tx.lock_or_recover().as_ref() {
            Some(tx) => tx.send(task).is_ok(),
            None => false,
        };
        if !sent {
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
        drop(self.tx.lock_or_recover().take());
        let threads = std::mem::take(&mut *self.threads.lock_or_recover());
        let deadline = Instant::now() + grace;
        let mut stuck = 0;
        for (handle, finished) in threads {
            while !finished.load(Ordering::Acquire) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if finished.load(Ordering::Acquire) {
                let _ = handle.join();
            } else {
                stuck += 1;
            }
        }
        if stuck > 0 {
            tracing::warn!(threads = stuck, "source I/O threads are stuck in reads that never returned; leaving them");
        }
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.shutdown(Duration::from_millis(100));
    }
}
