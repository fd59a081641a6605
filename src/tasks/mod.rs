//! Every thread prepfs starts, started here (fuser's session threads aside): named
//! `prepfs-<what>[-<i>]`, at the priority its work is given (a nice value of its own: Linux
//! threads have one each), and owned by a value whose close (or drop) stops and joins it; the
//! one exception is `prepfs-force-exit` (`stop.rs`), the exit of last resort, never joined.
//! Nothing runs on a pool nobody owns: rayon's global pool is never built.
//!
//! - [`TaskQueue`] (`queue.rs`): threads taking boxed tasks off one queue: the decode threads
//!   (`prepfs-decode-<i>`, `fuse::OpenPool`) and the source's I/O threads (`prepfs-io-<i>`,
//!   `source::IoPool`).
//! - [`Parallel`] (`parallel.rs`): a rayon pool of its owner's, for work split over borrowed data:
//!   the loader's batch fills and the mount's sample validation (`prepfs-fill-<i>`).
//! - [`Workers`] (`workers.rs`): the mount's loops that run until unmount (refill, prefetch,
//!   closer, housekeeping, notifier, loader socket, metrics endpoint).
//! - [`spawn`]: one named thread; the lower tiers' writers (`cache::queue`), the loader
//!   socket's connections and the signal waiter (`stop.rs`) are started by it.
//!
//! The priorities: requests' work (decode, I/O, batch fills, writers) at the daemon's own;
//! work that only prepares what may be read next (refill, prefetch, the closer) at
//! [`BACKGROUND`].

mod parallel;
mod queue;
mod workers;

use std::io;
use std::thread::JoinHandle;

pub(crate) use parallel::Parallel;
pub(crate) use queue::{Task, TaskQueue};
pub(crate) use workers::Workers;

/// The nice value of work a request waits for: the daemon's own.
pub(crate) const REQUEST: i32 = 0;

/// The nice value of work that only prepares what may be read next.
pub(crate) const BACKGROUND: i32 = 10;

/// Starts a thread named `name` at nice `nice` ([`REQUEST`]: left as it is) running `work`.
pub(crate) fn spawn<T: Send + 'static>(name: String, nice: i32, work: impl FnOnce() -> T + Send + 'static) -> io::Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name).spawn(move || {
        set_nice(nice);
        work()
    })
}

/// Sets the calling thread's nice value (Linux threads have their own); nothing for
/// [`REQUEST`].
fn set_nice(nice: i32) {
    if nice == REQUEST {
        return;
    }
    // SAFETY: setpriority on this thread's own id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_thread_has_its_name_and_its_nice_value() {
        let seen = spawn("prepfs-test-nice".into(), BACKGROUND, || {
            let name = std::thread::current().name().map(str::to_string);
            // SAFETY: getpriority on this thread's own id.
            let nice = unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::getpriority(libc::PRIO_PROCESS, tid)
            };
            (name, nice)
        })
        .expect("spawn")
        .join()
        .expect("join");
        assert_eq!(seen.0.as_deref(), Some("prepfs-test-nice"));
        // A process already niced past BACKGROUND stays where it is (an unprivileged thread
        // cannot raise its priority): the thread is at least as nice as asked.
        assert!(seen.1 >= BACKGROUND, "nice {}", seen.1);
    }
}
