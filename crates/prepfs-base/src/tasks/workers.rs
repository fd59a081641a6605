//! The mount's loops that run until unmount (refill, prefetch, the closer, housekeeping, the
//! stale-inode notifier, the loader socket, the metrics endpoint): each a named thread at its
//! priority, all told to stop by one flag and joined.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// See the module documentation.
#[derive(Default)]
pub struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts `work` on a thread named `name` at nice `nice`; it runs until the flag it is
    /// given is set.
    pub fn spawn(&mut self, name: String, nice: i32, work: impl FnOnce(&AtomicBool) + Send + 'static) -> io::Result<()> {
        let stop = Arc::clone(&self.stop);
        self.threads.push(super::spawn(name, nice, move || work(&stop))?);
        Ok(())
    }

    /// Sets the stop flag: each worker returns at its next look at it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Joins every worker (after [`Workers::stop`]).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}
