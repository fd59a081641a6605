//! Stopping a mount on a signal: the thread that waits for SIGINT, SIGTERM and SIGHUP
//! ([`SignalWaiter`]), the drain it runs before unmounting (its rules in `prepfs_core::drain`), and
//! the forced unmount of a second signal or of a drain past its maximum.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};

use prepfs_core::drain::{describe, holders, Activity, Drain, DrainConfig, Step};
use crate::detach::{lazy_unmount, try_unmount};
use prepfs_base::sync::{LockExt, Mutex};

/// How long the waiter sleeps in `sigtimedwait` when nothing is draining: [`SignalWaiter::finish`]
/// wakes it at once, so this only bounds a missed wake.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// How often a drain that found the mount busy (a file open, a process inside) tries again.
const BUSY_RETRY: Duration = Duration::from_millis(500);
/// How often a long drain says who it still waits for.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The signal [`SignalWaiter::finish`] wakes the waiter with: the first real-time signal the C
/// library leaves free, blocked (and so only ever taken by `sigtimedwait`) with the stop signals.
fn wake_signal() -> i32 {
    libc::SIGRTMIN()
}

/// The stop signals, and the waiter's wake, to block in every thread before any starts.
pub(crate) fn signal_set() -> SigSet {
    let mut set: libc::sigset_t = *SigSet::empty().as_ref();
    for sig in [Signal::SIGINT as i32, Signal::SIGTERM as i32, Signal::SIGHUP as i32, wake_signal()] {
        // SAFETY: sigaddset on an initialised set, with valid signal numbers.
        unsafe { libc::sigaddset(&mut set, sig) };
    }
    // SAFETY: the set was initialised by sigemptyset (SigSet::empty) and filled by sigaddset.
    unsafe { SigSet::from_sigset_t_unchecked(set) }
}

/// The thread that waits for SIGINT, SIGTERM and SIGHUP. Before the mount is up, a signal stops
/// the scan. Once it is up, the first signal drains: the mount keeps serving until no reader's
/// request (an open, lookup, listing or read) has come for the drain period and no file is
/// open, then unmounts; a drain past its maximum, or a second signal, forces the unmount
/// (detached, the connection aborted) and the process exits.
pub(crate) struct SignalWaiter {
    pub(crate) stopping: Arc<AtomicBool>,
    state: Arc<Mutex<WaiterState>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the waiter watches once the FUSE session is up.
#[derive(Clone)]
struct Watched {
    connection: Option<u64>,
    activity: Arc<Activity>,
    /// The mountpoint as the kernel names it (symlinks resolved), to find who holds files.
    canonical: PathBuf,
}

#[derive(Default)]
struct WaiterState {
    /// Set once the FUSE session is up.
    mounted: Option<Watched>,
    finished: bool,
}

impl SignalWaiter {
    /// Starts the waiter; `signals` ([`signal_set`]) must be blocked in this thread already.
    pub(crate) fn start(signals: SigSet, mountpoint: PathBuf, drain: DrainConfig) -> io::Result<SignalWaiter> {
        let stopping = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(WaiterState::default()));
        let (stop, st) = (Arc::clone(&stopping), Arc::clone(&state));
        let thread = prepfs_base::tasks::spawn("prepfs-signals".into(), prepfs_base::tasks::REQUEST, move || {
            wait_for_signals(signals, &mountpoint, drain, &stop, &st)
        })?;
        Ok(SignalWaiter { stopping, state, thread: Some(thread) })
    }

    /// The FUSE session is up: its connection number, the requests a drain waits out, and the
    /// mountpoint made canonical before mounting.
    pub(crate) fn mounted(&self, connection: Option<u64>, activity: Arc<Activity>, canonical: PathBuf) {
        self.state.lock_or_recover().mounted = Some(Watched { connection, activity, canonical });
    }

    /// Ends the waiter (the mount is gone) and joins it.
    pub(crate) fn finish(mut self) {
        self.state.lock_or_recover().finished = true;
        if let Some(t) = self.thread.take() {
            use std::os::unix::thread::JoinHandleExt;
            // SAFETY: pthread_kill on a thread not joined yet, with a signal it has blocked and
            // takes in sigtimedwait: it wakes and sees `finished`.
            unsafe { libc::pthread_kill(t.as_pthread_t(), wake_signal()) };
            let _ = t.join();
        }
    }
}

/// Waits `d` for one of `signals`.
fn wait_signal(signals: &SigSet, d: Duration) -> Option<i32> {
    let timeout = libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long };
    // SAFETY: sigtimedwait with a valid set, no siginfo wanted, and a valid timeout.
    let sig = unsafe { libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), &timeout) };
    (sig > 0).then_some(sig)
}

/// A drain under way: its rules, and what it has said.
struct Draining {
    drain: Drain,
    busy_said: bool,
    next_report: Instant,
}

impl Draining {
    fn start(config: DrainConfig, canonical: &Path, activity: &Activity, signal: Option<i32>) -> Draining {
        let now = Instant::now();
        let recent = activity.recent(now, config.quiet.max(Duration::from_secs(1)));
        tracing::info!(
            signal,
            drain_s = config.quiet.as_secs_f64(),
            drain_max_s = config.max.as_secs_f64(),
            readers = %describe(&recent),
            holding = %describe(&holders(canonical)),
            "draining: serving until no open or read has come for the drain period and no file is open, then unmounting (at most the drain maximum; signal again to stop now)"
        );
        Draining { drain: Drain::start(config, now), busy_said: false, next_report: now + REPORT_EVERY }
    }

    /// Says, every [`REPORT_EVERY`], whom the drain still waits for.
    fn report(&mut self, now: Instant, canonical: &Path, activity: &Activity) {
        if now < self.next_report {
            return;
        }
        self.next_report = now + REPORT_EVERY;
        tracing::info!(
            seconds = format!("{:.0}", now.duration_since(self.drain.started).as_secs_f64()),
            readers = %describe(&activity.recent(now, REPORT_EVERY)),
            holding = %describe(&holders(canonical)),
            "still draining"
        );
    }
}

fn wait_for_signals(signals: SigSet, mountpoint: &Path, config: DrainConfig, stopping: &AtomicBool, state: &Mutex<WaiterState>) {
    let mut received = 0;
    let mut draining: Option<Draining> = None;
    let mut wait = IDLE_WAIT;
    loop {
        let signal = wait_signal(&signals, wait).filter(|&sig| sig != wake_signal());
        wait = IDLE_WAIT;
        // Read after the wait: the mount may have come up meanwhile.
        let (mounted, finished) = {
            let st = state.lock_or_recover();
            (st.mounted.clone(), st.finished)
        };
        if finished {
            return;
        }
        if let Some(sig) = signal {
            received += 1;
            stopping.store(true, Ordering::SeqCst);
            match (&mounted, received) {
                (None, 1) => tracing::info!(signal = sig, "stopping before the mount is ready"),
                (None, _) => {
                    tracing::warn!(signal = sig, "second signal: exiting now");
                    std::process::exit(1);
                }
                (Some(_), 1) => {}
                (Some(m), _) => {
                    tracing::warn!(signal = sig, "second signal: forcing the unmount; open files get errors");
                    force_unmount(mountpoint, m.connection);
                    return;
                }
            }
        }
        let Some(m) = mounted.filter(|_| received > 0) else { continue };
        let d = draining.get_or_insert_with(|| Draining::start(config, &m.canonical, &m.activity, signal));
        let now = Instant::now();
        match d.drain.step(now, m.activity.quiet_for(now)) {
            Step::Wait(left) => {
                d.report(now, &m.canonical, &m.activity);
                // Woken early by a signal; never a spin (the waits are whole milliseconds).
                wait = left.clamp(Duration::from_millis(10), IDLE_WAIT);
            }
            Step::Overrun => {
                tracing::warn!(
                    drain_max_s = config.max.as_secs_f64(),
                    readers = %describe(&m.activity.recent(now, config.quiet.max(Duration::from_secs(1)))),
                    holding = %describe(&holders(&m.canonical)),
                    "the drain reached its maximum with readers still active: forcing the unmount; open files get errors"
                );
                force_unmount(mountpoint, m.connection);
                return;
            }
            Step::Unmount => match try_unmount(mountpoint) {
                Ok(()) => {
                    tracing::info!(
                        seconds = format!("{:.1}", now.duration_since(d.drain.started).as_secs_f64()),
                        "drained: no reader for the drain period; unmounting"
                    );
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
                    if !d.busy_said {
                        d.busy_said = true;
                        tracing::warn!(
                            mountpoint = %prepfs_base::escape::escaped(&mountpoint),
                            holding = %describe(&holders(&m.canonical)),
                            "the mount is busy (files open, or a process inside it): serving until they are released; signal again to force"
                        );
                    }
                    d.report(now, &m.canonical, &m.activity);
                    wait = BUSY_RETRY;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "unmount failed; detaching");
                    let _ = lazy_unmount(mountpoint);
                    return;
                }
            },
        }
    }
}

/// Detaches the mount and aborts its FUSE connection, so the session ends and every user of
/// the mount gets an error at once; exits the process if the session does not end soon.
fn force_unmount(mountpoint: &Path, connection: Option<u64>) {
    let _ = lazy_unmount(mountpoint);
    if let Some(n) = connection {
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{n}/abort"), "1");
    }
    // Detached: this thread is the process's exit of last resort, never joined.
    let _ = prepfs_base::tasks::spawn("prepfs-force-exit".into(), prepfs_base::tasks::REQUEST, || {
        std::thread::sleep(Duration::from_secs(5));
        tracing::warn!("the session did not end after the forced unmount; exiting");
        std::process::exit(1);
    });
}
