//! The owner the mount shows, and the core's own access check that goes with it.
//!
//! By default every node made of the source shows the source's owner and mode (write bits
//! cleared) and the kernel (`default_permissions`) checks each access against them: nothing
//! more is needed. With `--uid`/`--gid` (`access.uid`/`gid`) every node shows that owner
//! instead, as mount-s3 and gcsfuse do; the kernel's check is then against the shown owner, so
//! the core also checks the caller against the source's own owner and mode (search on a
//! directory looked up in, read on a directory listed or a file opened). Both must allow.
//! Group access is checked against the caller's primary group only (the request carries no
//! supplementary groups), which may refuse, never allow, more than the source.
//!
//! The same rule guards opportunistic sampling, with or without `--uid`: a job's open may be
//! served another sample than the one the kernel checked, so a substitute the caller may not
//! read is passed over ([`Filesystem::check_substitute`]).

use super::{Caller, Filesystem};
use crate::error::{Error, Result};
use crate::source::FileMeta;

/// Read permission, in a mode's bit triple.
pub(super) const READ: u32 = 4;
/// Search (execute) permission.
pub(super) const SEARCH: u32 = 1;

impl Filesystem {
    /// The uid and gid shown for a node whose own owner is `(uid, gid)`.
    pub(super) fn shown_owner(&self, uid: u32, gid: u32) -> (u32, u32) {
        let access = &self.config().access;
        (access.uid.unwrap_or(uid), access.gid.unwrap_or(gid))
    }

    /// Whether the shown owner differs from the source's, so the core checks access itself.
    fn owner_overridden(&self) -> bool {
        let access = &self.config().access;
        access.uid.is_some() || access.gid.is_some()
    }

    /// Refuses `caller` the access `want` (bits of [`READ`], [`SEARCH`]) to a source file or
    /// directory whose metadata is `meta`, when the source's owner and mode deny it and the
    /// mount shows another owner (else the kernel has checked the same).
    pub(super) fn check_source_access(&self, meta: &FileMeta, caller: Caller, want: u32) -> Result<()> {
        if !self.owner_overridden() {
            return Ok(());
        }
        mode_allows(meta, caller, want)
    }

    /// Refuses `caller` a sample that a job's open would serve in place of the one it asked
    /// for (opportunistic sampling), when the source's owner and mode deny them reading it:
    /// the kernel checked only the requested file.
    pub(super) fn check_substitute(&self, meta: &FileMeta, caller: Caller) -> Result<()> {
        mode_allows(meta, caller, READ)
    }

    /// [`Filesystem::check_source_access`] for a source directory of the catalog.
    pub(super) fn check_dir_access(&self, dir: crate::source::catalog::DirId, caller: Caller, want: u32) -> Result<()> {
        if !self.owner_overridden() || caller.uid == 0 {
            return Ok(());
        }
        let meta = self.reader.metadata(&self.catalog().dir_path(dir))?;
        self.check_source_access(&meta, caller, want)
    }
}

/// The one rule: whether the source's owner and mode (`meta`) give `caller` the access `want`,
/// by the owner, then the primary group, then the others' bits. Root passes, as
/// `default_permissions` lets it.
fn mode_allows(meta: &FileMeta, caller: Caller, want: u32) -> Result<()> {
    if caller.uid == 0 {
        return Ok(());
    }
    let shift = if caller.uid == meta.uid {
        6
    } else if caller.gid == meta.gid {
        3
    } else {
        0
    };
    if (meta.mode >> shift) & want == want {
        Ok(())
    } else {
        Err(Error::Denied)
    }
}
