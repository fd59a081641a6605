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
//!
//! The loader socket is a door the kernel does not guard at all, so there the core checks what
//! the kernel would check of an open through the mount ([`Filesystem::check_path_as_kernel`]):
//! search on every directory from the source's root down to the sample's, read on the sample,
//! against the owner shown and the source's own.

use std::collections::HashMap;

use super::{Caller, Filesystem};
use crate::error::{Error, Result};
use prepfs_source::catalog::{DirId, FileId};
use prepfs_source::FileMeta;

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

    /// Refuses `caller` the directories on the way to the sample `file` unless an open of it
    /// through the mount would pass the kernel's check of them: search on each directory of its
    /// path (the mount's root and a view's directory show the source's root). Verdicts are kept
    /// in `dirs` (the caller's to clear, as the kernel's attributes expire). With
    /// [`Filesystem::check_file_as_kernel`], the whole of the kernel's check of an open.
    pub(crate) fn check_path_as_kernel(&self, file: FileId, caller: Caller, dirs: &mut DirVerdicts) -> Result<()> {
        if caller.uid == 0 {
            return Ok(());
        }
        let catalog = self.catalog();
        let mut dir = catalog.file_dir(file);
        loop {
            let allowed = match dirs.0.get(&dir) {
                Some(&allowed) => allowed,
                None => {
                    let allowed = match self.reader.metadata(&catalog.dir_path(dir)) {
                        Ok(meta) => self.shown_mode_allows(&meta, caller, SEARCH).is_ok(),
                        Err(_) => false,
                    };
                    dirs.0.insert(dir, allowed);
                    allowed
                }
            };
            if !allowed {
                return Err(Error::Denied);
            }
            if dir == 0 {
                return Ok(());
            }
            dir = catalog.dir_parent(dir);
        }
    }

    /// Refuses `caller` a sample whose metadata is `meta` unless the kernel would let them
    /// open it for reading through the mount.
    pub(crate) fn check_file_as_kernel(&self, meta: &FileMeta, caller: Caller) -> Result<()> {
        self.shown_mode_allows(meta, caller, READ)
    }

    /// Both checks an access through the mount passes: the kernel's, against the owner shown,
    /// and the core's, against the source's owner (the same one unless overridden).
    fn shown_mode_allows(&self, meta: &FileMeta, caller: Caller, want: u32) -> Result<()> {
        mode_allows(meta, caller, want)?;
        if self.owner_overridden() {
            let (uid, gid) = self.shown_owner(meta.uid, meta.gid);
            mode_allows(&FileMeta { uid, gid, ..*meta }, caller, want)?;
        }
        Ok(())
    }

    /// [`Filesystem::check_source_access`] for a source directory of the catalog.
    pub(super) fn check_dir_access(&self, dir: prepfs_source::catalog::DirId, caller: Caller, want: u32) -> Result<()> {
        if !self.owner_overridden() || caller.uid == 0 {
            return Ok(());
        }
        let meta = self.reader.metadata(&self.catalog().dir_path(dir))?;
        self.check_source_access(&meta, caller, want)
    }
}

/// Directories' verdicts for one caller (whether they may search them), kept while a loader
/// walks an epoch.
#[derive(Default)]
pub(crate) struct DirVerdicts(HashMap<DirId, bool>);

impl DirVerdicts {
    pub(crate) fn clear(&mut self) {
        self.0.clear();
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
