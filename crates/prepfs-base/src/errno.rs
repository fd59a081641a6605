//! The trait by which every layer's errors become errnos: each crate implements it for its own
//! error types, beside them; the FUSE adapter takes every errno of a failure from it.

use std::io;

/// The errno a FUSE reply carries for an error: implemented by each layer for its own error
/// type, beside it, so the errno is decided near the cause.
pub trait ToErrno {
    /// The errno of this error.
    fn to_errno(&self) -> libc::c_int;
}

/// A failed access to a file or an object as the reader sees it: a file gone is `ENOENT`, one the source
/// denies is `EACCES`; anything else (a timeout, a file over `max_file_size`, a disk error) is
/// `EIO`, as a failed read of the sample.
impl ToErrno for io::Error {
    fn to_errno(&self) -> libc::c_int {
        match self.kind() {
            io::ErrorKind::NotFound => libc::ENOENT,
            io::ErrorKind::PermissionDenied => libc::EACCES,
            _ => libc::EIO,
        }
    }
}
