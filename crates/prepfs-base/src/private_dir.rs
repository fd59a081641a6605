//! Every directory and file the mount writes outside itself: the disk tier, the kept shard
//! indexes and object-store listings, the machine's memory registry and the log file. One rule
//! for all of them, so that another user of the machine can neither redirect a write (a planted
//! link, a pre-made directory) nor read what the source denies them:
//! - A directory the mount writes into ([`PrivateDir`]) is owned by the daemon's user and
//!   writable by no one else. So is every directory above it, unless it is root's and sticky
//!   (as `/tmp`), where no other user can rename or replace what is not theirs: once checked, no
//!   other user can change what a path inside it names.
//! - Every component is opened from its parent's descriptor without following a link
//!   (`O_NOFOLLOW`); missing directories are made 0700, and the mount's own directories are
//!   made private (0700) when found open (an older mount made them 0755).
//! - Files are made new (`O_CREAT | O_EXCL | O_NOFOLLOW`, 0600) under an unpredictable
//!   temporary name, then renamed over their name inside the same directory descriptor: a
//!   planted name is never written through, and a reader sees the old file or the new one.
//! - A file read back is a regular file of the daemon's user, opened through no link, read only
//!   up to a bound.
//!
//! An unsafe place is refused with an error that says which directory and why
//! ([`unsafe_place`]); the callers decide what a refusal costs (the disk tier refuses to mount,
//! a kept index is rebuilt and not kept).

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Mode of the directories the mount makes, and of its own it finds open.
const DIR_MODE: libc::mode_t = 0o700;
/// Mode of every file the mount makes.
const FILE_MODE: libc::mode_t = 0o600;

/// A directory only the daemon's user may change (see the module documentation), held open.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    fd: OwnedFd,
    /// Mode of the files written in it: 0600, or 0644 in a directory readable by all.
    file_mode: libc::mode_t,
}

/// How the last directory of a path is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    /// The mount's own: made if missing, owned by the daemon's user, made 0700.
    Own,
    /// The mount's own, readable by all (the memory registry, which every user's mounts read):
    /// made if missing (0755), owned by the daemon's user, writable by no one else.
    OwnReadable,
    /// A directory the mount only adds a file to (a log file's): it must exist, and may be
    /// root's sticky directory such as `/tmp`.
    Existing,
}

/// The daemon's effective user.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// An `InvalidInput`-free refusal: `PermissionDenied` saying which place and why.
fn unsafe_place(path: &Path, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("refusing {}: {why} (the mount writes only where no other user can redirect or read what it keeps)", crate::escape::escaped(path)),
    )
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value to be overwritten; fd is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid pointer to a stat; fd is an open descriptor.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `openat(dir, name, flags)` with `O_NOFOLLOW | O_CLOEXEC` always added.
fn open_at(dir: &OwnedFd, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let name = c_name(name)?;
    // SAFETY: name is a valid C string; dir is an open descriptor.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn mkdir_at(dir: &OwnedFd, name: &OsStr, mode: libc::mode_t) -> io::Result<()> {
    let name = c_name(name)?;
    // SAFETY: name is a valid C string; dir is an open descriptor.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) } != 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    Ok(())
}

/// Whether the directory `st` (at `path`) may stand above or be a place the mount writes:
/// `Ok(())`, or why not.
fn check_dir(path: &Path, st: &libc::stat, last: Option<Last>) -> io::Result<()> {
    let me = euid();
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(unsafe_place(path, "not a directory"));
    }
    let others_write = st.st_mode & 0o022 != 0;
    let sticky_root = st.st_uid == 0 && st.st_mode & libc::S_ISVTX != 0;
    match last {
        Some(Last::Own | Last::OwnReadable) => {
            if st.st_uid != me {
                return Err(unsafe_place(path, format_args!("owned by uid {}, not by the daemon's user (uid {me})", st.st_uid)));
            }
            if others_write {
                return Err(unsafe_place(path, format_args!("mode {:04o}: group or others may write to it", st.st_mode & 0o7777)));
            }
        }
        Some(Last::Existing) | None => {
            if st.st_uid != me && st.st_uid != 0 {
                return Err(unsafe_place(path, format_args!("owned by uid {}, neither the daemon's user (uid {me}) nor root", st.st_uid)));
            }
            if others_write && !sticky_root {
                return Err(unsafe_place(path, format_args!("mode {:04o}: group or others may write to it and it is not root's sticky directory", st.st_mode & 0o7777)));
            }
        }
    }
    Ok(())
}

/// The path made absolute, its existing part with links resolved (so that a system's own links,
/// such as `/var/run`, are taken as the system made them; the walk then follows none).
fn resolved(path: &Path) -> io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(real) => {
                let mut out = real;
                for part in missing.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else { return Err(e) };
                missing.push(name.to_os_string());
                existing = parent;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Opens the directory `path` component by component from `/`, following no link, checking
/// each as [`check_dir`] does, making what is missing when `last` is the mount's own.
fn walk(path: &Path, last: Last) -> io::Result<PrivateDir> {
    let path = resolved(path)?;
    let root = CString::new("/").expect("no NUL");
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(root.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    let mut dir = unsafe { OwnedFd::from_raw_fd(fd) };
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Ok(n)),
            Component::RootDir => None,
            _ => Some(Err(unsafe_place(&path, "a path with `.` or `..` in it"))),
        })
        .collect::<io::Result<_>>()?;
    let mut so_far = PathBuf::from("/");
    check_dir(&so_far, &fstat(&dir)?, if names.is_empty() { Some(last) } else { None })?;
    for (i, name) in names.iter().enumerate() {
        so_far.push(name);
        let is_last = i + 1 == names.len();
        let flags = if is_last { libc::O_RDONLY | libc::O_DIRECTORY } else { libc::O_PATH | libc::O_DIRECTORY };
        let next = match open_at(&dir, name, flags, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && last != Last::Existing => {
                let mode = if is_last && last == Last::OwnReadable { 0o755 } else { DIR_MODE };
                mkdir_at(&dir, name, mode).map_err(|e| io::Error::new(e.kind(), format!("cannot make {}: {e}", crate::escape::escaped(&so_far))))?;
                open_at(&dir, name, flags, 0)?
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(unsafe_place(&so_far, "a link or not a directory where a directory was checked"));
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", crate::escape::escaped(&so_far)))),
        };
        let st = fstat(&next)?;
        check_dir(&so_far, &st, is_last.then_some(last))?;
        if is_last && last == Last::Own && st.st_mode & 0o077 != 0 {
            // Ours, found open: made private.
            // SAFETY: next is an open directory descriptor.
            if unsafe { libc::fchmod(next.as_raw_fd(), DIR_MODE) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        dir = next;
    }
    let file_mode = if last == Last::OwnReadable { 0o644 } else { FILE_MODE };
    Ok(PrivateDir { path, fd: dir, file_mode })
}

/// Random bytes from the kernel, for temporary names and keys.
pub(crate) fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut out = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: the pointer and length describe the unfilled part of `out`.
        let n = unsafe { libc::getrandom(out[filled..].as_mut_ptr().cast(), N - filled, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += n as usize;
    }
    Ok(out)
}

impl PrivateDir {
    /// Opens the mount's own directory `path` (made, with what is missing above it, if
    /// missing; made 0700 if open), refusing it as the module documentation says.
    pub fn open(path: &Path) -> io::Result<PrivateDir> {
        walk(path, Last::Own)
    }

    /// As [`PrivateDir::open`], but readable by all users (made 0755): for what every user's
    /// mounts read and only its owner writes.
    pub fn open_readable(path: &Path) -> io::Result<PrivateDir> {
        walk(path, Last::OwnReadable)
    }

    /// The directory, as resolved when opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its subdirectory `name`, made if missing, checked and made private as [`PrivateDir::open`]
    /// does.
    pub fn subdir(&self, name: &str) -> io::Result<PrivateDir> {
        let path = self.path.join(name);
        let name = OsStr::new(name);
        let open = |dir: &OwnedFd| open_at(dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0);
        let fd = match open(&self.fd) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                mkdir_at(&self.fd, name, DIR_MODE)?;
                open(&self.fd)
            }
            other => other,
        }
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => unsafe_place(&path, "a link or not a directory"),
            _ => io::Error::new(e.kind(), format!("{}: {e}", crate::escape::escaped(&path))),
        })?;
        let st = fstat(&fd)?;
        check_dir(&path, &st, Some(Last::Own))?;
        if st.st_mode & 0o077 != 0 {
            // SAFETY: fd is an open directory descriptor.
            if unsafe { libc::fchmod(fd.as_raw_fd(), DIR_MODE) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(PrivateDir { path, fd, file_mode: FILE_MODE })
    }

    /// Writes `parts` one after another to the file `name` in this directory: made new (0600,
    /// or 0644 in a directory readable by all)
    /// under an unpredictable temporary name, then renamed over `name`; on an error the
    /// temporary file is removed and `name` is as it was.
    pub fn write_atomically(&self, name: &str, parts: &[&[u8]]) -> io::Result<()> {
        let tmp = format!(".{name}.{:016x}.tmp", u64::from_le_bytes(random_bytes()?));
        let fd = open_at(&self.fd, OsStr::new(&tmp), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, self.file_mode)?;
        let mut file = File::from(fd);
        let written = parts.iter().try_for_each(|part| file.write_all(part)).and_then(|()| self.rename(&tmp, name));
        if written.is_err() {
            let _ = self.remove(&tmp);
        }
        written
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (c_name(OsStr::new(from))?, c_name(OsStr::new(to))?);
        // SAFETY: valid C strings; the descriptor is an open directory.
        if unsafe { libc::renameat(self.fd.as_raw_fd(), from.as_ptr(), self.fd.as_raw_fd(), to.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes the file `name` (not a directory); a missing one is not an error.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        let name = c_name(OsStr::new(name))?;
        // SAFETY: a valid C string; the descriptor is an open directory.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::NotFound {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Opens the file `name` for reading: a regular file of the daemon's user that group and
    /// others cannot write, opened through no link (a FIFO is not waited on).
    pub(crate) fn open_file(&self, name: &str) -> io::Result<File> {
        let fd = open_at(&self.fd, OsStr::new(name), libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let st = fstat(&fd)?;
        let path = || self.path.join(name);
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(unsafe_place(&path(), "not a regular file"));
        }
        if st.st_uid != euid() || st.st_mode & 0o022 != 0 {
            return Err(unsafe_place(&path(), format_args!("owned by uid {} with mode {:04o}: not the mount's own file", st.st_uid, st.st_mode & 0o7777)));
        }
        Ok(File::from(fd))
    }

    /// The bytes of the file `name` ([`PrivateDir::open_file`]), if it holds at most `max`
    /// (a larger one is refused unread: `InvalidData`).
    pub fn read_bounded(&self, name: &str, max: u64) -> io::Result<Vec<u8>> {
        let file = self.open_file(name)?;
        let len = file.metadata()?.len();
        let too_big = || io::Error::new(io::ErrorKind::InvalidData, format!("{}: over the {max} bytes it may hold", crate::escape::escaped(&self.path.join(name))));
        if len > max {
            return Err(too_big());
        }
        let mut bytes = Vec::with_capacity(len as usize);
        file.take(max + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(too_big());
        }
        Ok(bytes)
    }

    /// The 32-byte key of this directory's MACs, in its file `name`: made (random, 0600) when
    /// missing; only the daemon's user can read it.
    pub fn key(&self, name: &str) -> io::Result<[u8; 32]> {
        match self.read_bounded(name, 32) {
            Ok(bytes) if bytes.len() == 32 => return Ok(bytes.try_into().expect("32 bytes")),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let key: [u8; 32] = random_bytes()?;
        self.write_atomically(name, &[&key])?;
        Ok(key)
    }
}

/// Opens `path` for appending, as the log file: its directory checked as every directory
/// above a place the mount writes (it may be root's sticky `/tmp`), the file opened through no
/// link and made 0600 if missing, and refused unless it is a regular file of the daemon's user
/// with one name (not a hard link planted to another file).
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = walk(parent, Last::Existing)?;
    if std::fs::symlink_metadata(dir.path().join(name)).is_ok_and(|m| m.file_type().is_symlink()) {
        // Refused by name first, for a clear error (the open below would not follow it either).
        return Err(unsafe_place(path, "a link"));
    }
    let fd = open_at(&dir.fd, name, libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NONBLOCK, FILE_MODE)
        .map_err(|e| if e.raw_os_error() == Some(libc::ELOOP) { unsafe_place(path, "a link") } else { e })?;
    let st = fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(unsafe_place(path, "not a regular file"));
    }
    if st.st_uid != euid() {
        return Err(unsafe_place(path, format_args!("owned by uid {}, not by the daemon's user", st.st_uid)));
    }
    if st.st_nlink != 1 {
        return Err(unsafe_place(path, format_args!("it has {} names (a hard link)", st.st_nlink)));
    }
    let file = File::from(fd);
    // Blocking again, for the log's writes.
    // SAFETY: fcntl on an open descriptor.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, libc::O_APPEND) };
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).expect("stat").mode() & 0o7777
    }

    #[test]
    fn a_missing_directory_is_made_private_and_an_open_one_of_ours_is_made_private() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = PrivateDir::open(&tmp.path().join("a/b")).expect("made");
        assert_eq!((mode(&tmp.path().join("a")), mode(dir.path())), (0o700, 0o700));
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        PrivateDir::open(&open).expect("ours");
        assert_eq!(mode(&open), 0o700);
        let sub = PrivateDir::open(&open).expect("again").subdir("encoded").expect("sub");
        assert_eq!(mode(sub.path()), 0o700);
    }

    #[test]
    fn a_link_in_place_of_a_directory_or_a_file_is_refused_and_not_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = tmp.path().join("victim");
        std::fs::create_dir(&victim).expect("mkdir");
        let base = PrivateDir::open(&tmp.path().join("base")).expect("base");
        std::os::unix::fs::symlink(&victim, base.path().join("encoded")).expect("link");
        let err = base.subdir("encoded").expect_err("a link");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        std::fs::write(victim.join("secret"), b"root's").expect("write");
        std::os::unix::fs::symlink(victim.join("secret"), base.path().join("kept.idx")).expect("link");
        assert!(base.read_bounded("kept.idx", 100).is_err(), "a link is not read");
        base.write_atomically("kept.idx", &[b"new"]).expect("replaces the link itself");
        assert_eq!(std::fs::read(victim.join("secret")).expect("read"), b"root's", "the victim is unchanged");
        assert_eq!(base.read_bounded("kept.idx", 100).expect("ours now"), b"new");
        assert_eq!(mode(&base.path().join("kept.idx")), 0o600);
    }

    #[test]
    fn a_directory_others_may_write_to_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert_eq!(PrivateDir::open(&open).expect_err("others write").kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(PrivateDir::open(&open.join("below")).expect_err("below it").kind(), io::ErrorKind::PermissionDenied);
        // Root's sticky /tmp is fine above a place, not as the place.
        let sticky = tmp.path().join("sticky");
        std::fs::create_dir(&sticky).expect("mkdir");
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        if euid() == 0 {
            PrivateDir::open(&sticky.join("mine")).expect("under a sticky root directory");
            assert!(PrivateDir::open(&sticky).is_err());
        }
    }

    #[test]
    fn the_log_file_is_not_opened_through_a_link_nor_a_second_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"keep").expect("write");
        let link = tmp.path().join("log");
        std::os::unix::fs::symlink(&victim, &link).expect("link");
        assert!(open_append(&link).is_err());
        let hard = tmp.path().join("hard");
        std::fs::hard_link(&victim, &hard).expect("hard link");
        assert!(open_append(&hard).is_err());
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep");
        let mut log = open_append(&tmp.path().join("new.log")).expect("new");
        log.write_all(b"line\n").expect("write");
        assert_eq!(mode(&tmp.path().join("new.log")), 0o600);
    }

    #[test]
    fn a_mac_key_is_made_once_and_read_back() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = PrivateDir::open(tmp.path()).expect("dir");
        let key = dir.key(".key").expect("made");
        assert_eq!(dir.key(".key").expect("read"), key);
        assert_eq!(mode(&tmp.path().join(".key")), 0o600);
    }
}
