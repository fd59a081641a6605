//! The two ways a mountpoint is taken down, which the mount (a dead mount cleared, the session's
//! end) and the signal waiter (a stop's drain, a forced unmount) both use: [`try_unmount`], only
//! if nothing uses it, and [`lazy_unmount`], detached at once. Directly as root, else through
//! `fusermount3`.

use std::io;
use std::path::Path;

/// Unmounts `path` if nothing uses it: `Err` with `ResourceBusy` while files are open or a
/// process sits inside. Directly as root, else through `fusermount3 -u`.
pub(crate) fn try_unmount(path: &Path) -> io::Result<()> {
    match nix::mount::umount2(path, nix::mount::MntFlags::empty()) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => Err(io::Error::from(io::ErrorKind::ResourceBusy)),
        Err(nix::errno::Errno::EINVAL) => Ok(()), // not mounted (any more)
        Err(_) => {
            let out = std::process::Command::new("fusermount3").arg("-u").arg(path).output()?;
            if out.status.success() {
                Ok(())
            } else if String::from_utf8_lossy(&out.stderr).contains("busy") {
                Err(io::Error::from(io::ErrorKind::ResourceBusy))
            } else {
                Err(io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()))
            }
        }
    }
}

/// Detaches whatever is mounted at `path`: directly as root, else through `fusermount3`.
pub(crate) fn lazy_unmount(path: &Path) -> io::Result<()> {
    match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(_) => {
            let status = std::process::Command::new("fusermount3").arg("-u").arg("-z").arg(path).status()?;
            if status.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("fusermount3 -u -z exited with {status}")))
            }
        }
    }
}

