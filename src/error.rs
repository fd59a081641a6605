//! The one error type of the filesystem core, and the one place where errors become errnos.
//!
//! Every request path returns [`Error`]; the FUSE adapter calls [`Error::errno`] and nothing
//! else decides which errno a failure gets.

use std::io;
use std::path::PathBuf;

/// Why a request (or mount set-up) failed.
#[derive(Debug, thiserror::Error)]
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
    /// A write, create, rename or delete on the read-only mount.
    #[error("the mount is read-only")]
    ReadOnly,
    /// An unknown or released file handle.
    #[error("bad file handle")]
    BadHandle,
    /// A name or argument the filesystem refuses.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A sample that cannot be turned into pixels: corrupt, truncated, too many pixels,
    /// unsupported. The file is named so the log line can say which.
    #[error("cannot decode {path}: {reason}")]
    Decode { path: PathBuf, reason: String },
    /// A job name or a new job refused (see [`crate::sampling::JobError`]).
    #[error("{0}")]
    Job(#[from] crate::sampling::JobError),
    /// Open files pin `max_open_bytes` of output already, and none was released in time.
    #[error("open files pin max_open_bytes of output; close some")]
    TooManyOpen,
    /// Reading the source failed.
    #[error("source I/O on {path}: {source}")]
    SourceIo {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The errno a FUSE reply carries for this error.
    pub fn errno(&self) -> libc::c_int {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::NotADirectory => libc::ENOTDIR,
            Error::IsADirectory => libc::EISDIR,
            Error::ReadOnly => libc::EROFS,
            Error::BadHandle => libc::EBADF,
            Error::Invalid(_) => libc::EINVAL,
            Error::Decode { .. } => libc::EIO,
            Error::Job(e) => match e {
                crate::sampling::JobError::BadName(_) => libc::EINVAL,
                crate::sampling::JobError::NameTooLong => libc::ENAMETOOLONG,
                // "Too many users": the mount's limit on concurrent jobs.
                crate::sampling::JobError::TooMany(_) => libc::EUSERS,
                // One user's share of the jobs: a quota.
                crate::sampling::JobError::TooManyForUser { .. } => libc::EDQUOT,
            },
            Error::TooManyOpen => libc::ENFILE,
            Error::SourceIo { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => libc::ENOENT,
                io::ErrorKind::PermissionDenied => libc::EACCES,
                _ => libc::EIO,
            },
        }
    }

    /// A source I/O error on `path`.
    pub fn source_io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::SourceIo { path: path.into(), source }
    }

    /// A decode failure of `path`.
    pub fn decode(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Decode { path: path.into(), reason: reason.into() }
    }
}

/// Result of a filesystem-core operation.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_errno_a_user_expects() {
        assert_eq!(Error::NotFound.errno(), libc::ENOENT);
        assert_eq!(Error::ReadOnly.errno(), libc::EROFS);
        assert_eq!(Error::decode("/x.jpg", "truncated").errno(), libc::EIO);
        let gone = Error::source_io("/x.jpg", io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(gone.errno(), libc::ENOENT);
        let broken = Error::source_io("/x.jpg", io::Error::other("disk"));
        assert_eq!(broken.errno(), libc::EIO);
        use crate::sampling::JobError;
        assert_eq!(Error::from(JobError::BadName("..".into())).errno(), libc::EINVAL);
        assert_eq!(Error::from(JobError::NameTooLong).errno(), libc::ENAMETOOLONG);
        assert_eq!(Error::from(JobError::TooMany(16)).errno(), libc::EUSERS);
        assert_eq!(Error::from(JobError::TooManyForUser { uid: 1, held: 4 }).errno(), libc::EDQUOT);
        assert_eq!(Error::TooManyOpen.errno(), libc::ENFILE);
        let huge = Error::source_io("/x.jpg", io::Error::from(io::ErrorKind::FileTooLarge));
        assert_eq!(huge.errno(), libc::EIO);
        let hung = Error::source_io("/x.jpg", io::Error::from(io::ErrorKind::TimedOut));
        assert_eq!(hung.errno(), libc::EIO);
    }
}
