//! The serving process's side of supervision (issue 53, docs/restarts.md): what a server
//! started by the supervisor (`crate::supervisor`) is given, and what it hands back.
//!
//! The supervisor starts every server with `PREPFS_SUPERVISOR` in its environment: a JSON
//! [`Given`] naming the descriptors it inherited (its control socket to the supervisor, the
//! ledger of the jobs' epochs) and, after the first server, the live mount's descriptors and
//! what the first server's FUSE_INIT decided ([`Taken`]). The first server mounts as an
//! unsupervised one does, then sends the supervisor the `/dev/fuse` descriptor, the loader
//! socket's and the metrics port's listeners, and the handshake's outcome ([`Mounted`]); every
//! later one takes them over instead of mounting. The messages are JSON, one per datagram of a
//! `SOCK_SEQPACKET` pair, descriptors riding as `SCM_RIGHTS`.
//!
//! The format of what is handed over is versioned ([`FORMAT`]): a server reads every format up
//! to its own and refuses a newer one, exiting with [`EXIT_UNKNOWN_FORMAT`] before it touches
//! the connection, so the supervisor starts the older binary again.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use serde::{Deserialize, Serialize};

/// The environment variable the supervisor gives each server.
pub(crate) const ENV: &str = "PREPFS_SUPERVISOR";
/// The handover's format: what [`Taken`] and the ledger mean. Bumped when either changes so
/// that an older server cannot misread it.
pub(crate) const FORMAT: u32 = 1;
/// A server exits with this after handing its mount over (`prepfs upgrade`).
pub(crate) const EXIT_HANDED_OVER: i32 = 75;
/// A server exits with this when the handed-over state is of a format it does not know.
pub(crate) const EXIT_UNKNOWN_FORMAT: i32 = 76;
/// `prepfs __takeover-formats` prints the newest handover format the binary reads: asked of a
/// new binary before `prepfs upgrade` stops the old server.
pub(crate) const FORMATS_ARG: &str = "__takeover-formats";
/// The largest control message.
const MAX_MESSAGE: usize = 64 * 1024;

/// What a supervised server is given (`PREPFS_SUPERVISOR`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Given {
    pub(crate) format: u32,
    /// The control socket to the supervisor.
    pub(crate) control: RawFd,
    /// The memory file holding the jobs' epochs (`prepfs_sampling`'s ledger).
    pub(crate) ledger: RawFd,
    /// The memory file holding the lowest kernel backing id a server may have left registered
    /// (`crate::fuse`'s backings).
    pub(crate) backings: RawFd,
    /// The memory file of the samples recent job-view opens were given (the core's
    /// `recent_opens`).
    pub(crate) opens: RawFd,
    /// The memory file of the pending job names (the core's `PendingNames`).
    pub(crate) pending: RawFd,
    /// How many servers of this mount came before this one (0 for the first).
    pub(crate) restarts: u64,
    /// Why the last one ended, for stats.
    pub(crate) last_cause: Option<String>,
    /// The mountpoint, canonical: a server taking the mount over must not stat it.
    pub(crate) canonical_mountpoint: std::path::PathBuf,
    /// The live mount, for every server after the first.
    pub(crate) taken: Option<Taken>,
}

/// A live mount a server takes over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Taken {
    /// `/dev/fuse`, the connection's own descriptor (the supervisor's, not a clone: requests
    /// a dead server had read stay on it, to be sent again).
    pub(crate) fuse: RawFd,
    pub(crate) loader: Option<RawFd>,
    pub(crate) metrics: Option<RawFd>,
    pub(crate) mounted: Mounted,
}

/// What the first server's FUSE_INIT decided, and where the mount is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Mounted {
    /// The kernel's ABI version (major, minor) as negotiated.
    pub(crate) proto: (u32, u32),
    /// Whether passthrough was enabled at the handshake (else why not).
    pub(crate) passthrough: Result<(), String>,
    /// Whether the kernel offered FUSE_HAS_RESEND (resent requests marked in their unique id).
    pub(crate) has_resend: bool,
    /// The FUSE connection number (`/sys/fs/fuse/connections/<n>`).
    pub(crate) connection: Option<u64>,
    /// Whether the loader socket and the metrics port ride with this message, in that order
    /// after `/dev/fuse`.
    pub(crate) loader: bool,
    pub(crate) metrics: bool,
    /// The loader socket's path (its file stays; a new server serves the same listener).
    pub(crate) loader_path: Option<std::path::PathBuf>,
    /// Directories the first server created for the mountpoint (deepest first), for the
    /// supervisor to remove at the mount's end if still empty.
    #[serde(default)]
    pub(crate) created_dirs: Vec<std::path::PathBuf>,
}

/// A server's message to the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum ToSupervisor {
    /// The mount is made (first server): `/dev/fuse`, then the listeners, ride with it.
    Mounted(Mounted),
    /// The server could not mount (first server): why, as the mount would say it.
    Failed { error: String },
    /// The server serves requests (every server).
    Ready {
        samples: usize,
        source: String,
        mountpoint: String,
        pid: u32,
    },
}

/// The supervisor's message to a server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum ToServer {
    /// Stop taking requests, finish those taken, and exit with [`EXIT_HANDED_OVER`].
    HandOver,
}

/// One end of the control socket between the supervisor and a server (`SOCK_SEQPACKET`: one
/// message per datagram, and a closed end reads as the end).
pub(crate) struct Control(OwnedFd);

impl Control {
    /// A connected pair, both ends close-on-exec.
    pub(crate) fn pair() -> io::Result<(Control, Control)> {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        Ok((Control(a), Control(b)))
    }

    /// The end a descriptor number names, inherited.
    pub(crate) fn inherited(fd: RawFd) -> io::Result<Control> {
        own(fd).map(Control)
    }

    /// A second descriptor of the same end (one thread receives while another sends).
    pub(crate) fn try_clone(&self) -> io::Result<Control> {
        self.0.try_clone().map(Control)
    }

    /// Shuts the socket down both ways: a receive waiting on it (another descriptor of the same
    /// end too) returns the end.
    pub(crate) fn shutdown(&self) {
        let _ = nix::sys::socket::shutdown(self.raw(), nix::sys::socket::Shutdown::Both);
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Sends `message` with `fds`.
    pub(crate) fn send<T: Serialize>(&self, message: &T, fds: &[RawFd]) -> io::Result<()> {
        let bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
        let iov = [IoSlice::new(&bytes)];
        let rights = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
        sendmsg::<()>(self.raw(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
        Ok(())
    }

    /// Receives one message and the descriptors riding with it (blocking). `Ok(None)`: the
    /// other end is closed.
    pub(crate) fn receive<T: for<'de> Deserialize<'de>>(
        &self,
    ) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut space = nix::cmsg_space!([RawFd; 8]);
        let (len, fds) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg = recvmsg::<()>(
                self.raw(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )?;
            let mut fds = Vec::new();
            for cmsg in msg.cmsgs()? {
                if let ControlMessageOwned::ScmRights(received) = cmsg {
                    // SAFETY: the kernel just installed these descriptors in this process for us.
                    fds.extend(
                        received
                            .into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            (msg.bytes, fds)
        };
        if len == 0 {
            return Ok(None);
        }
        let message = serde_json::from_slice(&buf[..len])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(Some((message, fds)))
    }
}

/// What this process was given, if a supervisor started it; a malformed variable is an error.
pub(crate) fn given() -> io::Result<Option<Given>> {
    let Some(text) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    let given: Given = serde_json::from_slice(text.as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{ENV}: {e}")))?;
    Ok(Some(given))
}

/// This server's end of the control socket, if a supervisor started it: taken from the
/// environment at first use, held for the process's life.
pub(crate) fn control() -> Option<&'static Control> {
    static CONTROL: std::sync::OnceLock<Option<Control>> = std::sync::OnceLock::new();
    CONTROL
        .get_or_init(|| {
            let given = given().ok().flatten()?;
            Control::inherited(given.control)
                .map_err(
                    |e| tracing::warn!(error = %e, "the supervisor's control socket is not open"),
                )
                .ok()
        })
        .as_ref()
}

/// Takes ownership of an inherited descriptor, close-on-exec from now on.
pub(crate) fn own(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD on any number is harmless; it fails for a descriptor that is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the supervisor passed this descriptor to this process alone, and nothing else
    // here owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD on a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_and_its_descriptors_cross_the_control_socket() {
        let (a, b) = Control::pair().expect("pair");
        let file = tempfile::tempfile().expect("tempfile");
        let mounted = Mounted {
            proto: (7, 41),
            passthrough: Err("off".into()),
            has_resend: true,
            connection: Some(42),
            loader: false,
            metrics: false,
            loader_path: None,
            created_dirs: Vec::new(),
        };
        a.send(&ToSupervisor::Mounted(mounted), &[file.as_raw_fd()])
            .expect("send");
        let (message, fds): (ToSupervisor, _) = b.receive().expect("receive").expect("a message");
        assert!(
            matches!(message, ToSupervisor::Mounted(m) if m.connection == Some(42) && m.proto == (7, 41))
        );
        assert_eq!(fds.len(), 1, "the descriptor rides with the message");
        drop(a);
        assert!(
            b.receive::<ToSupervisor>().expect("receive").is_none(),
            "a closed end reads as none"
        );
    }
}
