//! Every thread prepfs starts, started here (fuser's session threads aside): named
//! `prepfs-<what>[-<i>]`, at the priority its work is given (a nice value of its own, counted
//! from the daemon's: Linux threads have one each), and owned by a value whose close (or drop) stops and joins it; the
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

pub use parallel::Parallel;
pub use queue::TaskQueue;
pub use queue::Task;
pub use workers::Workers;

/// How much nicer than the daemon work a request waits for runs: not at all.
pub const REQUEST: i32 = 0;

/// How much nicer than the daemon work that only prepares what may be read next runs (at most
/// 19, the nicest): below requests however the daemon was started (`nice -n 19 prepfs` too,
/// where an absolute 10 would put it above them).
pub const BACKGROUND: i32 = 10;

/// The nicest value a thread can have.
const NICEST: i32 = 19;

/// Starts a thread named `name`, `nice` nicer than the thread starting it ([`REQUEST`]: left
/// as it is), running `work`.
pub fn spawn<T: Send + 'static>(name: String, nice: i32, work: impl FnOnce() -> T + Send + 'static) -> io::Result<JoinHandle<T>> {
    let base = thread_nice();
    std::thread::Builder::new().name(name).spawn(move || {
        if nice != REQUEST {
            set_thread_nice((base + nice).min(NICEST));
        }
        work()
    })
}

/// The calling thread's nice value (Linux threads have their own).
fn thread_nice() -> i32 {
    // SAFETY: getpriority on this thread's own id; -1 is a valid answer, and nothing here
    // fails (the id is ours).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    }
}

/// Sets the calling thread's nice value.
fn set_thread_nice(nice: i32) {
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
    fn a_spawned_thread_has_its_name_and_runs_as_much_nicer_than_its_starter_as_asked() {
        let base = thread_nice();
        let seen = |nice| {
            spawn("prepfs-test-nice".into(), nice, || (std::thread::current().name().map(str::to_string), thread_nice()))
                .expect("spawn")
                .join()
                .expect("join")
        };
        assert_eq!(seen(BACKGROUND), (Some("prepfs-test-nice".to_string()), (base + BACKGROUND).min(NICEST)));
        assert_eq!(seen(REQUEST).1, base, "requests' work at the starter's own");
    }
}
