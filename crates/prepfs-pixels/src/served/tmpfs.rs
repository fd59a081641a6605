//! Where output files are made: a tmpfs instance of the mount's own ([`OutputFs`]), mounted
//! nowhere (a detached mount of the new mount API, reachable only through its descriptor), with
//! `huge=within_size`, so a 150 KB output is a 128 KB folio and a few small ones rather than 37
//! pages, and freeing one costs a third of what it costs in pages (the closer's CPU per output
//! 25 → 10 µs; the warm pass of `make bench-floor` 0.74x → 0.99x of the plain floor,
//! docs/COLD_PATH.md). Each is an unnamed file (`O_TMPFILE`), written once and never again.
//! Where such a tmpfs cannot be made (no `CAP_SYS_ADMIN`, a kernel without `fsopen`), an
//! anonymous memory file (`memfd`) sealed against every change is made instead
//! ([`sealed_memfd`]).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The tmpfs instance outputs are made in: see the module documentation. It lasts as long as
/// its descriptor and the files made in it (a detached mount ends with the last of them).
pub(super) struct OutputFs {
    /// The root of the detached mount.
    root: OwnedFd,
}

// The new mount API's numbers (linux/mount.h; ABI, not in every libc release).
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOUNT_ATTR_NOSUID: libc::c_uint = 0x2;
const MOUNT_ATTR_NODEV: libc::c_uint = 0x4;
const MOUNT_ATTR_NOEXEC: libc::c_uint = 0x8;

impl OutputFs {
    /// A tmpfs mounted nowhere: `fsopen`, its options, `fsmount` (not `move_mount`).
    pub(super) fn mount() -> std::io::Result<OutputFs> {
        let last = std::io::Error::last_os_error;
        // SAFETY: fsopen with a valid C string and flags; the descriptor is ours alone.
        let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
        if fs < 0 {
            return Err(last());
        }
        // SAFETY: `fs` was just opened and nothing else owns it.
        let fs = unsafe { OwnedFd::from_raw_fd(fs as i32) };
        // No size or inode limit (the cache's budgets bound what is kept), only its owner may look
        // in, and large folios within each file's size.
        let options: [(&std::ffi::CStr, &std::ffi::CStr); 4] =
            [(c"huge", c"within_size"), (c"size", c"0"), (c"nr_inodes", c"0"), (c"mode", c"0700")];
        for (key, value) in options {
            // SAFETY: fsconfig on our descriptor with valid C strings.
            if unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr(), 0) } < 0 {
                return Err(last());
            }
        }
        // SAFETY: fsconfig's create command takes no key or value.
        if unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), FSCONFIG_CMD_CREATE, std::ptr::null::<u8>(), std::ptr::null::<u8>(), 0) } < 0 {
            return Err(last());
        }
        let attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
        // SAFETY: fsmount on our configured context; the descriptor returned is ours alone.
        let root = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) };
        if root < 0 {
            return Err(last());
        }
        // SAFETY: `root` was just opened and nothing else owns it.
        let fs = OutputFs { root: unsafe { OwnedFd::from_raw_fd(root as i32) } };
        // One file made and dropped, so a tmpfs that takes no files (or no O_TMPFILE) is found
        // here, not at the first output.
        fs.file_with(b"")?;
        Ok(fs)
    }

    /// A new unnamed file holding `bytes`.
    pub(super) fn file_with(&self, bytes: &[u8]) -> std::io::Result<File> {
        // SAFETY: openat on our root descriptor with a valid C string; the descriptor returned is
        // ours alone.
        let fd = unsafe { libc::openat(self.root.as_raw_fd(), c".".as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o600) };
        file_holding(fd, bytes)
    }
}

/// An anonymous memory file holding `bytes`, sealed so that nothing can change or resize it.
pub(super) fn sealed_memfd(bytes: &[u8]) -> std::io::Result<File> {
    // SAFETY: a valid C string and flags; the descriptor returned is ours alone.
    let fd = unsafe { libc::memfd_create(c"prepfs".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    let file = file_holding(fd, bytes)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// The file of `fd`, a descriptor just opened (negative: the call failed) that nothing else owns,
/// once `bytes` are written into it.
fn file_holding(fd: libc::c_int, bytes: &[u8]) -> std::io::Result<File> {
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(bytes)?;
    Ok(file)
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::{Read, Seek, SeekFrom};

    use super::*;

    pub(crate) fn read_back(mut f: &File) -> Vec<u8> {
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        back
    }

    #[test]
    fn a_sealed_memory_file_holds_the_bytes_and_refuses_every_change() {
        let file = sealed_memfd(b"pixels").expect("memfd");
        assert_eq!(read_back(&file), b"pixels");
        let mut f = &file;
        assert!(f.write_all(b"x").is_err(), "a write to a sealed file is refused");
        assert!(f.set_len(1).is_err(), "shrinking is refused");
        assert!(f.set_len(100).is_err(), "growing is refused");
        assert_eq!(read_back(&file), b"pixels");
    }
}
