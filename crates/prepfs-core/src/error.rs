//! The core's error type, and the trait by which every layer's errors become errnos.
//!
//! Each layer has its own typed error and says, beside it, which errno it means ([`ToErrno`]):
//! the source's I/O errors (`source`), refused jobs (`sampling`), JPEG decoding (`jpeg`), pixel
//! work (`pipeline`), samples found bad (`producer`). Every request path returns [`Error`],
//! which carries those errors as they are (no flattening into strings) and maps through them;
//! the FUSE adapter takes every errno of a core failure from [`ToErrno`] and decides none itself.
//!
//! | error | errno |
//! | --- | --- |
//! | [`Error::NotFound`] | `ENOENT` |
//! | [`Error::NotADirectory`] | `ENOTDIR` |
//! | [`Error::IsADirectory`] | `EISDIR` |
//! | [`Error::ReadOnly`] | `EROFS` |
//! | [`Error::BadHandle`] | `EBADF` |
//! | [`Error::TooManyOpen`] | `ENFILE` |
//! | [`Error::Decode`] | its [`SampleError`]'s: `EIO` |
//! | [`Error::Job`] | its [`prepfs_sampling::JobError`]'s: `EINVAL`, `ENAMETOOLONG`, `EUSERS`, `EDQUOT` |
//! | [`Error::SourceIo`] | its `io::Error`'s (`source`): `ENOENT`, `EACCES`, else `EIO` |
//! | [`Error::PixelWork`] | `ENOMEM` |
//!
//! A path in a message is printed by [`prepfs_base::escape`]'s rule: a name with a newline writes no
//! line of its own in the log.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use prepfs_pixels::pipeline::PixelError;

pub use prepfs_base::errno::ToErrno;

/// Why a sample is refused as undecodable, in every view, until its file changes. Every one is
/// `EIO` to a reader: the file is there, but no pixels can be served of it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SampleError {
    /// The pipeline could not make pixels of it (corrupt, truncated, too many pixels, ...).
    #[error(transparent)]
    Pixels(#[from] PixelError),
    /// The source file is no sample prepfs will read (over `source.max_file_size`, not a
    /// regular file): the source's error, as it came.
    #[error("{0}")]
    NotASample(Arc<std::io::Error>),
    /// Its header was found unreadable when its size was probed earlier.
    #[error("unreadable header")]
    UnreadableHeader,
    /// It was found undecodable earlier; the first log line says why.
    #[error("undecodable (found earlier; see the first log line)")]
    FoundEarlier,
}

impl ToErrno for SampleError {
    fn to_errno(&self) -> libc::c_int {
        match self {
            SampleError::Pixels(e) => e.to_errno(),
            // A refused file, not a missing or forbidden one: the same errno as a damaged sample.
            SampleError::NotASample(_) | SampleError::UnreadableHeader | SampleError::FoundEarlier => libc::EIO,
        }
    }
}

/// Why a request (or mount set-up) failed. Cheap to clone (a source `io::Error` is shared), so
/// the requests that wait on one load all get its error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No such entry in the mount (or the source file vanished).
    #[error("not found")]
    NotFound,
    /// The name or handle does not refer to a directory.
    #[error("not a directory")]
    NotADirectory,
    /// A directory was opened or read as a file.
    #[error("is a directory")]
    IsADirectory,
    /// The source's own owner and mode deny the caller this access (checked by the core when
    /// the mount shows another owner: `--uid`/`--gid`).
    #[error("permission denied by the source's owner and mode")]
    Denied,
    /// A write, create, rename or delete on the read-only mount.
    #[error("the mount is read-only")]
    ReadOnly,
    /// An unknown or released file handle.
    #[error("bad file handle")]
    BadHandle,
    /// A sample that cannot be turned into pixels: corrupt, truncated, too many pixels,
    /// unsupported, or no sample prepfs will read. The file is named so the log line can say
    /// which.
    #[error("cannot decode {}: {reason}", prepfs_base::escape::escaped(path))]
    Decode {
        path: PathBuf,
        #[source]
        reason: SampleError,
    },
    /// A job name or a new job refused (see [`prepfs_sampling::JobError`]).
    #[error("{0}")]
    Job(#[from] prepfs_sampling::JobError),
    /// Open files pin `max_open_bytes` of output already, and none was released in time.
    #[error("open files pin max_open_bytes of output; close some")]
    TooManyOpen,
    /// Reading the source failed.
    #[error("source I/O on {}: {source}", prepfs_base::escape::escaped(path))]
    SourceIo {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// Pixel work refused by the bound on work in flight (`max_open_bytes`): too large for it,
    /// or no room in time. Not the sample's fault: it is not marked bad.
    #[error(transparent)]
    PixelWork(#[from] prepfs_pixels::budget::WorkRefused),
    /// Reading the memory file holding an open handle's bytes failed.
    #[error("reading an open file's memory copy: {0}")]
    MemoryFile(Arc<io::Error>),
}

impl ToErrno for Error {
    fn to_errno(&self) -> libc::c_int {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::NotADirectory => libc::ENOTDIR,
            Error::IsADirectory => libc::EISDIR,
            Error::ReadOnly => libc::EROFS,
            Error::Denied => libc::EACCES,
            Error::BadHandle => libc::EBADF,
            Error::Decode { reason, .. } => reason.to_errno(),
            Error::Job(e) => e.to_errno(),
            Error::TooManyOpen => libc::ENFILE,
            Error::SourceIo { source, .. } => source.to_errno(),
            Error::MemoryFile(_) => libc::EIO,
            Error::PixelWork(_) => libc::ENOMEM,
        }
    }
}

impl Error {
    /// A source I/O error on `path`.
    pub(crate) fn source_io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::SourceIo { path: path.into(), source: Arc::new(source) }
    }

    /// A decode failure of `path`.
    pub(crate) fn decode(path: impl Into<PathBuf>, reason: impl Into<SampleError>) -> Self {
        Error::Decode { path: path.into(), reason: reason.into() }
    }
}

/// Result of a filesystem-core operation.
pub(crate) type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use prepfs_pixels::jpeg::JpegError;
    use prepfs_pixels::pipeline::PixelError;

    #[test]
    fn errors_map_to_the_errno_a_user_expects() {
        assert_eq!(Error::NotFound.to_errno(), libc::ENOENT);
        assert_eq!(Error::ReadOnly.to_errno(), libc::EROFS);
        let truncated = Error::decode("/x.jpg", PixelError::from(JpegError::Header("truncated segment")));
        assert_eq!(truncated.to_errno(), libc::EIO);
        assert_eq!(truncated.to_string(), "cannot decode /x.jpg: truncated segment");
        assert_eq!(Error::decode("/x.jpg", SampleError::FoundEarlier).to_errno(), libc::EIO);
        let gone = Error::source_io("/x.jpg", io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(gone.to_errno(), libc::ENOENT);
        let denied = Error::source_io("/x.jpg", io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(denied.to_errno(), libc::EACCES);
        let broken = Error::source_io("/x.jpg", io::Error::other("disk"));
        assert_eq!(broken.to_errno(), libc::EIO);
        use prepfs_sampling::JobError;
        assert_eq!(Error::from(JobError::BadName("..".into())).to_errno(), libc::EINVAL);
        assert_eq!(Error::from(JobError::NameTooLong).to_errno(), libc::ENAMETOOLONG);
        assert_eq!(Error::from(JobError::TooMany(16)).to_errno(), libc::EUSERS);
        assert_eq!(Error::from(JobError::TooManyForUser { uid: 1, held: 4 }).to_errno(), libc::EDQUOT);
        assert_eq!(Error::TooManyOpen.to_errno(), libc::ENFILE);
        let huge = Error::source_io("/x.jpg", io::Error::from(io::ErrorKind::FileTooLarge));
        assert_eq!(huge.to_errno(), libc::EIO);
        let hung = Error::source_io("/x.jpg", io::Error::from(io::ErrorKind::TimedOut));
        assert_eq!(hung.to_errno(), libc::EIO);
    }

    #[test]
    fn a_path_in_an_error_is_printed_escaped_on_one_line() {
        use std::os::unix::ffi::OsStrExt;
        let name = std::path::Path::new(std::ffi::OsStr::from_bytes(b"/d/a\n* * * * * root touch /tmp/pwned\n\x1b[2J\xff.jpg"));
        let bad = Error::decode(name, SampleError::UnreadableHeader).to_string();
        assert_eq!(bad, "cannot decode /d/a\\n* * * * * root touch /tmp/pwned\\n\\x1b[2J\\xff.jpg: unreadable header");
        let io = Error::source_io(name, io::Error::other("disk")).to_string();
        assert!(!io.contains('\n') && !io.contains('\x1b'), "{io:?}");
        let job = Error::from(prepfs_sampling::JobError::BadName("x\ny".into())).to_string();
        assert!(!job.contains('\n'), "{job:?}");
    }

    #[test]
    fn a_shared_error_keeps_its_source_error() {
        let denied = Error::source_io("/x.jpg", io::Error::from_raw_os_error(libc::EACCES));
        let Error::SourceIo { source, .. } = denied.clone() else { unreachable!() };
        assert_eq!(source.raw_os_error(), Some(libc::EACCES));
        assert_eq!(denied.clone().to_errno(), libc::EACCES);
    }
}
