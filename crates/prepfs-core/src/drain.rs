//! The drain of a stopping mount: what the FUSE requests tell of the mount's readers
//! ([`Activity`]: when the last open, lookup, listing or read came, and which processes sent
//! the recent ones), who holds files in the mount ([`holders`], from `/proc`), and when a drain
//! ends ([`Drain`]: no request for the drain period, or its maximum reached).
//!
//! A data loader opens and closes files all the time, so a mount that unmounted as soon as no
//! file was open at one instant would fail its next open; a draining mount waits until the
//! readers have stopped coming. The signal waiter (`mount.rs`) runs the drain.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long no request must have come before a draining mount unmounts (`--drain`).
pub(crate) const DEFAULT_DRAIN: Duration = Duration::from_secs(3);
/// The longest a drain lasts (`--drain-max`): then the mount stops as a second signal stops it.
pub(crate) const DEFAULT_DRAIN_MAX: Duration = Duration::from_secs(60);

/// The drain's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainConfig {
    /// No open, lookup, listing or read for this long: the readers are done.
    pub quiet: Duration,
    /// The whole drain's bound, from the first signal.
    pub max: Duration,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig { quiet: DEFAULT_DRAIN, max: DEFAULT_DRAIN_MAX }
    }
}

/// Processes remembered per mount: a slot per pid modulo this (a collision forgets one).
const SLOTS: usize = 64;

/// When the readers' requests came, and from whom: a few atomics, stored by the request
/// threads without a lock.
pub struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last request, plus one (0: none yet).
    last_ms: AtomicU64,
    slots: [Slot; SLOTS],
}

#[derive(Default)]
struct Slot {
    pid: AtomicU32,
    at_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity { start: Instant::now(), last_ms: AtomicU64::new(0), slots: std::array::from_fn(|_| Slot::default()) }
    }
}

impl Activity {
    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_millis() as u64 + 1
    }

    /// A reader's request (`pid` 0: the kernel's own, remembered as activity only).
    pub fn touch(&self, pid: u32) {
        let now = self.ms(Instant::now());
        if self.last_ms.load(Ordering::Relaxed) < now {
            self.last_ms.fetch_max(now, Ordering::Relaxed);
        }
        if pid != 0 {
            let slot = &self.slots[pid as usize % SLOTS];
            if slot.pid.load(Ordering::Relaxed) != pid {
                slot.pid.store(pid, Ordering::Relaxed);
            }
            if slot.at_ms.load(Ordering::Relaxed) != now {
                slot.at_ms.store(now, Ordering::Relaxed);
            }
        }
    }

    /// How long no request has come at `now` (`Duration::MAX` if none ever came).
    pub fn quiet_for(&self, now: Instant) -> Duration {
        match self.last_ms.load(Ordering::Relaxed) {
            0 => Duration::MAX,
            last => Duration::from_millis(self.ms(now).saturating_sub(last)),
        }
    }

    /// The processes that sent a request within `within` of `now`, by pid.
    pub fn recent(&self, now: Instant, within: Duration) -> Vec<u32> {
        let since = self.ms(now).saturating_sub(within.as_millis() as u64);
        let mut pids: Vec<u32> = self
            .slots
            .iter()
            .filter(|s| s.at_ms.load(Ordering::Relaxed) >= since.max(1))
            .map(|s| s.pid.load(Ordering::Relaxed))
            .filter(|&pid| pid != 0)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// The processes with a file open in the mount, or their working directory in it, as far as
/// this process may see them in `/proc` (all of them as root).
pub fn holders(mountpoint: &Path) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    let inside = |link: &Path| std::fs::read_link(link).is_ok_and(|target| target.starts_with(mountpoint));
    let mut pids: Vec<u32> = procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let dir = Path::new("/proc").join(pid.to_string());
            // readlink of /proc's links never reaches the mount: it reads the kernel's names.
            inside(&dir.join("cwd"))
                || std::fs::read_dir(dir.join("fd")).is_ok_and(|fds| fds.filter_map(Result::ok).any(|fd| inside(&fd.path())))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// `1234 (python3), 1240 (python3)`: the processes by pid and command name, at most eight
/// named; `none` for none.
pub fn describe(pids: &[u32]) -> String {
    if pids.is_empty() {
        return "none".into();
    }
    const NAMED: usize = 8;
    let mut text: Vec<String> = pids
        .iter()
        .take(NAMED)
        // A process names itself (prctl): its name is printed escaped, as every name is.
        .map(|pid| match std::fs::read(format!("/proc/{pid}/comm")) {
            Ok(comm) => format!("{pid} ({})", prepfs_base::escape::escaped_bytes(comm.strip_suffix(b"\n").unwrap_or(&comm))),
            Err(_) => format!("{pid} (gone)"),
        })
        .collect();
    if pids.len() > NAMED {
        text.push(format!("and {} more", pids.len() - NAMED));
    }
    text.join(", ")
}

/// What a draining mount does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Requests came within the drain period: ask again after this long.
    Wait(Duration),
    /// Quiet for the drain period: unmount if nothing holds the mount.
    Unmount,
    /// The maximum is reached: stop now, as a second signal does.
    Overrun,
}

/// A drain under way, from the first signal.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    pub(crate) config: DrainConfig,
    pub started: Instant,
}

impl Drain {
    pub fn start(config: DrainConfig, now: Instant) -> Drain {
        Drain { config, started: now }
    }

    /// What to do at `now`, no request having come for `quiet`.
    pub fn step(&self, now: Instant, quiet: Duration) -> Step {
        let spent = now.saturating_duration_since(self.started);
        if spent >= self.config.max {
            return Step::Overrun;
        }
        if quiet >= self.config.quiet {
            return Step::Unmount;
        }
        Step::Wait((self.config.quiet - quiet).min(self.config.max - spent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_waits_out_the_quiet_period_and_stops_at_its_maximum() {
        let config = DrainConfig { quiet: Duration::from_secs(3), max: Duration::from_secs(10) };
        let t0 = Instant::now();
        let drain = Drain::start(config, t0);
        assert_eq!(drain.step(t0, Duration::from_secs(1)), Step::Wait(Duration::from_secs(2)));
        assert_eq!(drain.step(t0, Duration::MAX), Step::Unmount, "an idle mount goes at once");
        assert_eq!(drain.step(t0 + Duration::from_secs(9), Duration::ZERO), Step::Wait(Duration::from_secs(1)));
        assert_eq!(drain.step(t0 + Duration::from_secs(10), Duration::ZERO), Step::Overrun);
        let none = Drain::start(DrainConfig { quiet: Duration::ZERO, max: Duration::from_secs(1) }, t0);
        assert_eq!(none.step(t0, Duration::ZERO), Step::Unmount, "--drain 0 unmounts at once");
    }

    #[test]
    fn activity_tells_how_long_it_has_been_quiet_and_who_came() {
        let activity = Activity::default();
        let now = Instant::now();
        assert_eq!(activity.quiet_for(now), Duration::MAX);
        assert!(activity.recent(now, Duration::from_secs(1)).is_empty());
        activity.touch(4242);
        activity.touch(0);
        activity.touch(17);
        let later = Instant::now();
        assert!(activity.quiet_for(later) < Duration::from_secs(1));
        assert_eq!(activity.recent(later, Duration::from_secs(5)), vec![17, 4242]);
        assert!(activity.recent(later + Duration::from_secs(10), Duration::from_secs(5)).is_empty());
        assert!(activity.quiet_for(later + Duration::from_secs(10)) >= Duration::from_secs(9));
    }

    #[test]
    fn holders_finds_an_open_file_and_describe_names_processes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("held");
        std::fs::write(&path, "x").expect("write");
        // This process holds it, and holders leaves this process out: nobody else does.
        let _held = std::fs::File::open(&path).expect("open");
        assert!(holders(dir.path()).is_empty());
        let me = std::process::id();
        assert!(describe(&[me]).starts_with(&format!("{me} (")), "{}", describe(&[me]));
        assert_eq!(describe(&[]), "none");
        assert!(describe(&(1..=10).collect::<Vec<_>>()).ends_with("and 2 more"));
    }

    #[test]
    fn a_process_that_names_itself_with_a_newline_is_described_on_one_line() {
        // A thread's /proc/<tid>/comm is what a process holding a file would show.
        let named = std::thread::spawn(|| {
            // SAFETY: prctl on this thread with a NUL-terminated name; gettid has no arguments.
            unsafe { libc::prctl(libc::PR_SET_NAME, c"x\n* * * * *\x1b".as_ptr()) };
            let tid = unsafe { libc::gettid() } as u32;
            describe(&[tid])
        })
        .join()
        .expect("thread");
        assert!(!named.contains('\n') && !named.contains('\x1b'), "{named:?}");
        assert!(named.ends_with("(x\\n* * * * *\\x1b)"), "{named:?}");
    }
}
