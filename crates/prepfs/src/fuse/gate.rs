//! The gate every request with an effect passes (issue 53's handover): open, read, release,
//! lookup (which starts a job), mkdir and rmdir under `jobs/`, listings. While it is open a
//! request takes a [`Pass`], held until it is answered. [`Gate::close_and_wait`] closes it and
//! waits for the passes out: from then on a request is left unanswered (its reply forgotten,
//! never failed), and the kernel sends it again to the server that takes the connection over
//! (FUSE_NOTIFY_RESEND). So a handover leaves no request half done: none marks a job's sample
//! served that the reader never gets.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use prepfs_base::sync::{Condvar, LockExt, Mutex};

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Gate {
    closed: AtomicBool,
    in_flight: AtomicUsize,
    /// Woken as the last pass drops after the gate closed.
    idle: Mutex<()>,
    idle_changed: Condvar,
}

/// A request let through: the gate waits for it to drop (its answer sent).
pub(crate) struct Pass(Arc<Gate>);

impl Gate {
    /// A pass for a request, or `None` once the gate is closed (leave the request unanswered).
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Pass> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.leave();
            return None;
        }
        Some(Pass(Arc::clone(self)))
    }

    fn leave(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 && self.closed.load(Ordering::SeqCst)
        {
            let _idle = self.idle.lock_or_recover();
            self.idle_changed.notify_all();
        }
    }

    /// Whether the gate is closed (a handover is under way).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Closes the gate and waits until every request let through has been answered.
    pub(crate) fn close_and_wait(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let mut idle = self.idle.lock_or_recover();
        while self.in_flight.load(Ordering::SeqCst) != 0 {
            idle = self
                .idle_changed
                .wait(idle)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.0.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_gate_lets_nothing_through_and_waits_for_the_passes_out() {
        let gate = Arc::new(Gate::default());
        let pass = gate.enter().expect("open gate");
        let closer = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.close_and_wait())
        };
        // The closer is waiting on the pass; new requests are turned away once it closed.
        while !gate.closed.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        assert!(gate.enter().is_none(), "a closed gate lets nothing through");
        assert!(
            !closer.is_finished(),
            "it waits for the pass let through before"
        );
        drop(pass);
        closer
            .join()
            .expect("the closer returns once the pass is out");
    }
}
