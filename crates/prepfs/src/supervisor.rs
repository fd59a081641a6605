//! The supervisor (issue 53, docs/restarts.md): the `prepfs mount` process itself, which holds
//! the mount's FUSE connection and starts the process that serves it, again and again.
//!
//! It does nothing else. The first server it starts mounts as an unsupervised mount does and
//! hands it the `/dev/fuse` descriptor, the loader socket's and the metrics port's listeners
//! (`crate::takeover`); the supervisor also makes the memory file that keeps the jobs' epochs
//! (the ledger) before any server runs. While it holds them the connection outlives any server:
//! a server that dies (SIGKILL, a panic, the OOM killer) leaves the kernel holding the readers'
//! requests, and the supervisor starts another after a backoff, which takes the connection
//! over, has the kernel send again what the dead one had read (FUSE_NOTIFY_RESEND) and resumes
//! each job's epoch from the ledger.
//!
//! - A server that ends with the mount gone (an unmount, `prepfs unmount`, a signal's drain)
//!   ends the supervisor with its status. Stop signals are passed on to the server.
//! - A server that fails before it mounted (a bad config, a busy mountpoint) is not started
//!   again: the mount fails as it would unsupervised.
//! - [`MAX_CRASHES`] ends within [`CRASH_WINDOW`] give up: the connection is aborted (every
//!   caller gets an error at once: `ENOTCONN`, `ECONNABORTED` for a request in flight), the
//!   mount detached, and the log says why.
//! - `prepfs upgrade MOUNTPOINT [--bin PATH]` asks over the handover socket (mode 0600, the
//!   peer's uid checked: the mount's user or root): the new binary is asked which handover
//!   formats it reads, the old server stops taking requests, finishes those it took and exits,
//!   and the new one takes over. A new binary that cannot read the format is refused before the
//!   old server stops; one that fails to come up is replaced by the old binary again.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::mount::{MountError, OnReady, Ready};
use crate::takeover::{self, Control, Given, Mounted, Taken, ToServer, ToSupervisor};

/// Ends of servers within [`CRASH_WINDOW`] that give up.
pub const MAX_CRASHES: usize = 5;
/// The window [`MAX_CRASHES`] is counted in.
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
/// The first restart's delay, doubled for each server in a row that ended within [`STEADY`] of
/// its start, at most [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A server that served this long before it ended was steady: the backoff starts over.
const STEADY: Duration = Duration::from_secs(10);
/// How long a server has to hand over before it is killed (its requests are then sent again).
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the supervisor waits between looks at its server, signals and requests.
const TICK: Duration = Duration::from_millis(50);

/// What `prepfs mount` asks of the supervisor.
pub struct Supervision {
    /// The command line to start each server with (this process's own, less argv[0]).
    pub args: Vec<std::ffi::OsString>,
    /// The mountpoint, canonical (found before anything is mounted on it).
    pub canonical_mountpoint: PathBuf,
    /// Called when the first server serves (by default: `prepfs: serving ...` on stderr).
    pub on_ready: Option<OnReady>,
    /// The mount's `allow_other`: the handover socket sits beside the loader's default socket,
    /// in the directory made for it.
    pub allow_other: bool,
    /// The servers get no terminal (`--background`): stdin and stdout go nowhere, stderr too
    /// unless it is systemd's journal.
    pub detach_stdio: bool,
}

/// Why a server ended, as said in the log and in stats (`last_restart_cause`).
fn cause(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (_, Some(sig)) => format!(
            "killed by signal {sig} ({})",
            Signal::try_from(sig).map_or("?", |s| s.as_str())
        ),
        (Some(code), _) => format!("exited with status {code}"),
        _ => format!("{status}"),
    }
}

/// A server the supervisor started, and what it said.
struct Server {
    child: Child,
    binary: PathBuf,
    control: Control,
    started: Instant,
    ready: bool,
    /// The thread passing on what the server says: it ends when the server's end closes.
    reader: Option<std::thread::JoinHandle<()>>,
    /// Asked to hand over: killed if still running then.
    hand_over_by: Option<Instant>,
}

/// What the control socket's reader thread passes on.
enum Event {
    Said(u32, ToSupervisor, Vec<OwnedFd>),
    /// An upgrade asked on the handover socket, and where to answer.
    Upgrade {
        binary: PathBuf,
        answer: Sender<Result<String, String>>,
    },
}

/// The live mount's descriptors, held from the first server's `mounted` on.
struct Held {
    fuse: OwnedFd,
    loader: Option<OwnedFd>,
    metrics: Option<OwnedFd>,
    mounted: Mounted,
}

/// Runs the mount under supervision until it ends: `Ok` when its last server ended well (an
/// unmount), else why not.
pub fn run(supervision: Supervision) -> Result<(), MountError> {
    let fail = |what: &str, e: std::io::Error| {
        MountError::Fuse(std::io::Error::new(
            e.kind(),
            format!("supervisor: {what}: {e}"),
        ))
    };
    let signals = crate::stop::signal_set();
    signals
        .thread_block()
        .map_err(|e| fail("blocking signals", e.into()))?;
    let binary = std::env::current_exe().map_err(|e| fail("finding its own binary", e))?;
    let ledger = memfd(c"prepfs-ledger").map_err(|e| fail("making the ledger's memory file", e))?;
    let (events, incoming) = mpsc::channel();
    let handover = HandoverSocket::bind(
        &supervision.canonical_mountpoint,
        supervision.allow_other,
        events.clone(),
    )
    .map_err(|e| fail("binding the handover socket", e))?;
    let mut supervisor = Supervisor {
        supervision,
        ledger,
        backings: memfd(c"prepfs-backings").map_err(|e| fail("making the backings' memory file", e))?,
        opens: memfd(c"prepfs-opens").map_err(|e| fail("making the opens' memory file", e))?,
        pending: memfd(c"prepfs-pending").map_err(|e| fail("making the pending names' memory file", e))?,
        events,
        incoming,
        held: None,
        restarts: 0,
        last_cause: None,
        crashes: Vec::new(),
        stopping: false,
        upgrade: None,
        failure: None,
        created_dirs: Vec::new(),
        quick_ends: 0,
    };
    let mut server = supervisor
        .start(&binary)
        .map_err(|e| fail("starting the server", e))?;
    let status = supervisor.supervise(&mut server, &signals);
    drop(handover);
    // What the first server created for the mountpoint goes once the mount has (each only if
    // still empty: remove_dir refuses anything else, a mounted directory too).
    for dir in &supervisor.created_dirs {
        if std::fs::remove_dir(dir).is_err() {
            break;
        }
    }
    match (status?, supervisor.failure.take()) {
        (status, _) if status.success() => Ok(()),
        (_, Some(error)) => Err(MountError::Server(error)),
        (status, None) => Err(MountError::Server(format!(
            "the mount's server {}",
            cause(&status)
        ))),
    }
}

/// An upgrade in progress.
struct Upgrade {
    new: PathBuf,
    old: PathBuf,
    /// Where the `prepfs upgrade` command waits for the answer.
    answer: Sender<Result<String, String>>,
}

struct Supervisor {
    supervision: Supervision,
    ledger: OwnedFd,
    /// The lowest backing id a server may have left registered (see `crate::fuse`).
    backings: OwnedFd,
    /// The samples recent job-view opens were given (see the core's `recent_opens`).
    opens: OwnedFd,
    /// The pending job names (see the core's `PendingNames`).
    pending: OwnedFd,
    events: Sender<Event>,
    incoming: Receiver<Event>,
    held: Option<Held>,
    restarts: u64,
    last_cause: Option<String>,
    /// When servers ended unasked, within the window.
    crashes: Vec<Instant>,
    /// A stop signal was passed on: the server's end is the mount's.
    stopping: bool,
    /// An upgrade in progress: the new binary, the old one, and where to answer.
    upgrade: Option<Upgrade>,
    /// What the first server said when it could not mount.
    failure: Option<String>,
    /// Directories the first server created for the mountpoint, deepest first.
    created_dirs: Vec<PathBuf>,
    /// Servers in a row that ended within [`STEADY`] of their start.
    quick_ends: u32,
}

impl Supervisor {
    /// Starts a server of `binary`: the first one mounts; later ones take the mount over.
    fn start(&mut self, binary: &Path) -> std::io::Result<Server> {
        let (ours, theirs) = Control::pair()?;
        let mut passed: Vec<RawFd> = vec![theirs.raw(), self.ledger.as_raw_fd(), self.backings.as_raw_fd(), self.opens.as_raw_fd(), self.pending.as_raw_fd()];
        let taken = self.held.as_ref().map(|held| {
            passed.push(held.fuse.as_raw_fd());
            passed.extend(
                held.loader
                    .iter()
                    .chain(held.metrics.iter())
                    .map(AsRawFd::as_raw_fd),
            );
            Taken {
                fuse: held.fuse.as_raw_fd(),
                loader: held.loader.as_ref().map(AsRawFd::as_raw_fd),
                metrics: held.metrics.as_ref().map(AsRawFd::as_raw_fd),
                mounted: held.mounted.clone(),
            }
        });
        let given = Given {
            format: takeover::FORMAT,
            control: theirs.raw(),
            ledger: self.ledger.as_raw_fd(),
            backings: self.backings.as_raw_fd(),
            opens: self.opens.as_raw_fd(),
            pending: self.pending.as_raw_fd(),
            restarts: self.restarts,
            last_cause: self.last_cause.clone(),
            canonical_mountpoint: self.supervision.canonical_mountpoint.clone(),
            taken,
        };
        let mut command = Command::new(binary);
        if self.supervision.detach_stdio {
            command
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null());
            if std::env::var_os("JOURNAL_STREAM").is_none() {
                command.stderr(std::process::Stdio::null());
            }
        }
        command.args(&self.supervision.args).env(
            takeover::ENV,
            serde_json::to_string(&given).map_err(std::io::Error::other)?,
        );
        // SAFETY: between fork and exec only async-signal-safe calls: fcntl, prctl, setpgid.
        unsafe {
            command.pre_exec(move || {
                for &fd in &passed {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                // The server goes (its drain unmounting) if the supervisor is killed.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                // Its own process group: a terminal's Ctrl-C reaches the supervisor alone, which
                // passes it on once (a second signal would cut the server's drain short).
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let child = command.spawn()?;
        drop(theirs);
        let reader = ours.try_clone()?;
        let events = self.events.clone();
        let pid = child.id();
        let reader = std::thread::Builder::new()
            .name("prepfs-supervisor-control".into())
            .spawn(move || {
                while let Ok(Some((message, fds))) = reader.receive::<ToSupervisor>() {
                    if events.send(Event::Said(pid, message, fds)).is_err() {
                        break;
                    }
                }
            })?;
        tracing::info!(pid, binary = %prepfs_base::escape::escaped(&binary), restarts = self.restarts, "server started");
        Ok(Server {
            child,
            binary: binary.to_path_buf(),
            control: ours,
            started: Instant::now(),
            ready: false,
            reader: Some(reader),
            hand_over_by: None,
        })
    }

    /// Watches `server` (and those after it) until the mount ends.
    fn supervise(
        &mut self,
        server: &mut Server,
        signals: &nix::sys::signal::SigSet,
    ) -> Result<ExitStatus, MountError> {
        loop {
            self.take_events(server);
            if let Some(sig) = wait_signal(signals, TICK) {
                tracing::info!(
                    signal = sig.as_str(),
                    pid = server.child.id(),
                    "passing the signal on to the server"
                );
                self.stopping = true;
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(server.child.id() as i32),
                    sig,
                );
            }
            if server.hand_over_by.is_some_and(|by| Instant::now() >= by) {
                tracing::warn!(pid = server.child.id(), "the server did not hand over in time; killing it (its requests are sent again)");
                let _ = server.child.kill();
                server.hand_over_by = None;
            }
            let Some(status) = server.child.try_wait().map_err(MountError::Fuse)? else {
                continue;
            };
            // Its end of the control socket is closed: the reader has passed on all it said.
            if let Some(reader) = server.reader.take() {
                let _ = reader.join();
            }
            self.take_events(server);
            let connected = self
                .held
                .as_ref()
                .is_some_and(|h| connection_alive(&h.fuse));
            let handed_over = status.code() == Some(takeover::EXIT_HANDED_OVER);
            if self.held.is_none() || !connected || (self.stopping && !handed_over) {
                // Never mounted, unmounted, or stopping: the mount's end is the server's.
                if connected {
                    self.give_up(&format!(
                        "the server ended while stopping ({})",
                        cause(&status)
                    ));
                }
                self.answer_upgrade(Err("the mount ended".into()));
                return Ok(status);
            }
            let next_binary = match (&self.upgrade, handed_over) {
                (Some(Upgrade { new, .. }), true) => new.clone(),
                (Some(Upgrade { new, old, .. }), false) if server.binary == *new => {
                    // The new binary failed to come up: the old one serves again.
                    let why = if status.code() == Some(takeover::EXIT_UNKNOWN_FORMAT) {
                        "it cannot read the handed-over state".to_string()
                    } else {
                        cause(&status)
                    };
                    tracing::warn!(binary = %prepfs_base::escape::escaped(new), why, "the upgrade failed; starting the old binary again");
                    let old = old.clone();
                    self.answer_upgrade(Err(format!(
                        "the new server did not come up: {why}; the old binary serves again"
                    )));
                    old
                }
                _ => {
                    let why = cause(&status);
                    let now = Instant::now();
                    self.crashes
                        .retain(|t| now.duration_since(*t) < CRASH_WINDOW);
                    self.crashes.push(now);
                    tracing::error!(
                        pid = server.child.id(),
                        why,
                        crashes_in_window = self.crashes.len(),
                        "the server ended with the mount still in place"
                    );
                    if self.crashes.len() >= MAX_CRASHES {
                        self.give_up(&format!(
                            "{} server ends within {}s, the last: {why}",
                            self.crashes.len(),
                            CRASH_WINDOW.as_secs()
                        ));
                        return Ok(status);
                    }
                    self.last_cause = Some(why);
                    // A server that served a while is started again at once (almost); one that
                    // ends soon after starting waits twice as long as the last.
                    if server.ready && server.started.elapsed() >= STEADY {
                        self.quick_ends = 0;
                    }
                    let backoff = FIRST_BACKOFF.saturating_mul(1 << self.quick_ends.min(6)).min(MAX_BACKOFF);
                    self.quick_ends += 1;
                    std::thread::sleep(backoff);
                    server.binary.clone()
                }
            };
            if handed_over {
                self.last_cause = Some("upgrade".into());
            }
            self.restarts += 1;
            *server = match self.start(&next_binary) {
                Ok(s) => s,
                Err(e) => {
                    self.give_up(&format!("cannot start a server: {e}"));
                    return Ok(status);
                }
            };
        }
    }

    /// Handles what the servers and the handover socket said.
    fn take_events(&mut self, server: &mut Server) {
        while let Ok(event) = self.incoming.try_recv() {
            match event {
                Event::Said(pid, ToSupervisor::Mounted(mounted), fds)
                    if pid == server.child.id() && self.held.is_none() =>
                {
                    let mut fds = fds.into_iter();
                    let Some(fuse) = fds.next() else { continue };
                    let loader = if mounted.loader { fds.next() } else { None };
                    let metrics = if mounted.metrics { fds.next() } else { None };
                    tracing::info!(connection = ?mounted.connection, passthrough = mounted.passthrough.is_ok(), resend = mounted.has_resend, "holding the mount's connection");
                    self.created_dirs = mounted.created_dirs.clone();
                    self.held = Some(Held {
                        fuse,
                        loader,
                        metrics,
                        mounted,
                    });
                }
                Event::Said(
                    pid,
                    ToSupervisor::Ready {
                        samples,
                        source,
                        mountpoint,
                        pid: _,
                    },
                    _,
                ) if pid == server.child.id() => {
                    let first = !server.ready && self.restarts == 0;
                    server.ready = true;
                    tracing::info!(
                        pid,
                        restarts = self.restarts,
                        seconds = format!("{:.2}", server.started.elapsed().as_secs_f64()),
                        "the server serves"
                    );
                    if first {
                        let ready = Ready {
                            samples,
                            source: Path::new(&source),
                            mountpoint: Path::new(&mountpoint),
                        };
                        match self.supervision.on_ready.take() {
                            Some(tell) => tell(&ready),
                            None => prepfs_base::log::say(&format!("prepfs: serving {samples} samples of {source} at {mountpoint} (Ctrl-C to unmount)")),
                        }
                    }
                    if self
                        .upgrade
                        .as_ref()
                        .is_some_and(|u| u.new == server.binary)
                    {
                        self.answer_upgrade(Ok(format!(
                            "upgraded: pid {pid} serves with {}",
                            server.binary.display()
                        )));
                    }
                }
                Event::Said(pid, ToSupervisor::Failed { error }, _) if pid == server.child.id() => {
                    self.failure = Some(error)
                }
                Event::Said(..) => {}
                Event::Upgrade { binary, answer } => self.begin_upgrade(server, binary, answer),
            }
        }
    }

    fn begin_upgrade(
        &mut self,
        server: &mut Server,
        binary: PathBuf,
        answer: Sender<Result<String, String>>,
    ) {
        if self.upgrade.is_some() || !server.ready || self.held.is_none() || self.stopping {
            let _ = answer.send(Err("the mount is not serving steadily now (starting, stopping or upgrading): try again".into()));
            return;
        }
        match formats_read_by(&binary) {
            Ok(max) if max >= takeover::FORMAT => {}
            Ok(max) => {
                let _ = answer.send(Err(format!("{} reads handover formats up to {max}, this mount hands over format {}: refused, the old server serves on", binary.display(), takeover::FORMAT)));
                return;
            }
            Err(e) => {
                let _ = answer.send(Err(format!(
                    "{}: {e}: refused, the old server serves on",
                    binary.display()
                )));
                return;
            }
        }
        tracing::info!(binary = %prepfs_base::escape::escaped(&binary), pid = server.child.id(), "upgrade: asking the server to hand over");
        if let Err(e) = server.control.send(&ToServer::HandOver, &[]) {
            let _ = answer.send(Err(format!("cannot ask the server to hand over: {e}")));
            return;
        }
        self.upgrade = Some(Upgrade { new: binary, old: server.binary.clone(), answer });
        // A server that does not hand over in time is killed: its requests are sent again.
        server.hand_over_by = Some(Instant::now() + HANDOVER_TIMEOUT);
    }

    fn answer_upgrade(&mut self, result: Result<String, String>) {
        if let Some(Upgrade { answer, .. }) = self.upgrade.take() {
            let _ = answer.send(result);
        }
    }

    /// Ends the mount for good: the connection aborted (every caller gets an error at once),
    /// the mountpoint detached.
    fn give_up(&mut self, why: &str) {
        tracing::error!(
            why,
            "giving the mount up: aborting its connection and unmounting"
        );
        prepfs_base::log::say(&format!("prepfs: giving the mount up: {why}"));
        if let Some(held) = self.held.take() {
            if let Some(n) = held.mounted.connection {
                let _ = std::fs::write(format!("/sys/fs/fuse/connections/{n}/abort"), "1");
            }
            drop(held); // the last descriptor of the connection: the kernel ends it
        }
        if let Err(e) = crate::detach::lazy_unmount(&self.supervision.canonical_mountpoint) {
            tracing::warn!(error = %e, "cannot detach the mountpoint");
        }
    }
}

/// Whether this process is a server a supervisor started (it then mounts in the foreground,
/// whatever its command line says).
pub fn started_by_supervisor() -> bool {
    std::env::var_os(takeover::ENV).is_some()
}

/// `prepfs __takeover-formats`, asked of a binary before it takes a mount over: the newest
/// handover format it reads.
pub fn print_formats() {
    println!("{}", takeover::FORMAT);
}

/// Waits up to `timeout` for a stop signal.
fn wait_signal(signals: &nix::sys::signal::SigSet, timeout: Duration) -> Option<Signal> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: sigtimedwait with a valid set and timespec, and no siginfo wanted.
    let sig = unsafe { libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), &ts) };
    if sig <= 0 || sig == libc::SIGRTMIN() {
        return None;
    }
    Signal::try_from(sig).ok()
}

/// Whether the FUSE connection of `fuse` is still up: its device reports `POLLERR` once the
/// mount is gone or the connection aborted.
fn connection_alive(fuse: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: fuse.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    !(n > 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0)
}

/// A memory file the supervisor holds for its servers (nix's `memfd_create`).
fn memfd(name: &std::ffi::CStr) -> std::io::Result<OwnedFd> {
    Ok(nix::sys::memfd::memfd_create(name, nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)?)
}

/// The newest handover format `binary` reads (`prepfs __takeover-formats`).
fn formats_read_by(binary: &Path) -> std::io::Result<u32> {
    let out = Command::new(binary).arg(takeover::FORMATS_ARG).output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "it does not take mounts over (`{}` {})",
            takeover::FORMATS_ARG,
            cause(&out.status)
        )));
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| std::io::Error::other("it answered no handover format"))
}

/// The handover socket's path for the mount at `canonical`: beside the loader's default
/// socket, `<hash>.supervisor`.
pub fn handover_path(canonical: &Path, public_dir: bool) -> std::io::Result<PathBuf> {
    let loader =
        prepfs_core::loader::default_path(canonical, public_dir).map_err(std::io::Error::other)?;
    Ok(loader.with_extension("supervisor"))
}

/// The handover socket: `prepfs upgrade` asks here. Mode 0600, each peer's uid checked.
struct HandoverSocket {
    path: PathBuf,
    made: (u64, u64),
    /// The listening descriptor (owned by the thread), shut down to end it.
    listening: RawFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HandoverSocket {
    fn bind(
        canonical: &Path,
        public_dir: bool,
        events: Sender<Event>,
    ) -> std::io::Result<HandoverSocket> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let path = handover_path(canonical, public_dir)?;
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(std::io::Error::other(format!(
                    "{} exists and is not a socket",
                    path.display()
                )));
            }
            if UnixStream::connect(&path).is_ok() {
                return Err(std::io::Error::other(format!(
                    "{}: another supervisor listens there",
                    path.display()
                )));
            }
            std::fs::remove_file(&path)?;
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let meta = std::fs::symlink_metadata(&path)?;
        let owner = nix::unistd::geteuid().as_raw();
        let listening = listener.as_raw_fd();
        let thread = std::thread::Builder::new()
            .name("prepfs-supervisor-handover".into())
            .spawn(move || {
                // Ends when the socket is shut down (at drop): accept then fails.
                for stream in listener.incoming() {
                    match stream {
                        Ok(stream) => {
                            let _ = serve_handover(stream, owner, &events);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })?;
        Ok(HandoverSocket {
            path,
            made: (meta.dev(), meta.ino()),
            listening,
            thread: Some(thread),
        })
    }
}

impl Drop for HandoverSocket {
    fn drop(&mut self) {
        // SAFETY: shutdown(2) of the listening socket the thread still owns: its accept fails.
        unsafe { libc::shutdown(self.listening, libc::SHUT_RDWR) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.made) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One request on the handover socket: a line `upgrade PATH`; the answer `ok ...` or `error ...`.
fn serve_handover(stream: UnixStream, owner: u32, events: &Sender<Event>) -> std::io::Result<()> {
    let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)?;
    let mut writer = stream.try_clone()?;
    if peer.uid() != owner && peer.uid() != 0 {
        tracing::warn!(
            uid = peer.uid(),
            pid = peer.pid(),
            "refused a handover request from another user"
        );
        return writeln!(
            writer,
            "error: only the mount's user or root may take it over"
        );
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    let Some(binary) = line.trim_end().strip_prefix("upgrade ") else {
        return writeln!(writer, "error: unknown request");
    };
    let binary = PathBuf::from(binary);
    if !binary.is_absolute() {
        return writeln!(writer, "error: the binary's path must be absolute");
    }
    let (answer, answered) = mpsc::channel();
    events
        .send(Event::Upgrade { binary, answer })
        .map_err(std::io::Error::other)?;
    match answered.recv_timeout(HANDOVER_TIMEOUT * 4) {
        Ok(Ok(text)) => writeln!(writer, "ok {text}"),
        Ok(Err(text)) => writeln!(writer, "error {text}"),
        Err(RecvTimeoutError::Timeout) => writeln!(writer, "error: no answer in time"),
        Err(RecvTimeoutError::Disconnected) => writeln!(writer, "error: the supervisor ended"),
    }
}

/// `prepfs upgrade MOUNTPOINT [--bin PATH]`: asks the mount's supervisor to hand the mount to
/// `binary` (by default the binary running this command); returns its answer.
pub fn upgrade(mountpoint: &Path, binary: Option<&Path>) -> Result<String, String> {
    let canonical = mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    let binary = match binary {
        Some(b) => b
            .canonicalize()
            .map_err(|e| format!("{}: {e}", b.display()))?,
        None => std::env::current_exe().map_err(|e| e.to_string())?,
    };
    let path = handover_path(&canonical, false)
        .or_else(|_| handover_path(&canonical, true))
        .map_err(|e| e.to_string())?;
    let mut stream = UnixStream::connect(&path).map_err(|e| {
        format!(
            "{}: no supervisor answers for {} ({e}): is it a supervised prepfs mount?",
            path.display(),
            canonical.display()
        )
    })?;
    writeln!(stream, "upgrade {}", binary.display()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    let answer = answer.trim_end();
    match answer.strip_prefix("ok ") {
        Some(ok) => Ok(ok.to_string()),
        None => Err(answer
            .strip_prefix("error ")
            .or(answer.strip_prefix("error: "))
            .unwrap_or(answer)
            .to_string()),
    }
}
