//! Opportunistic sampling (ODS) for concurrent training jobs: the job registry, each job's
//! per-sample state, and the two decisions ODS makes — which sample an open in a job's view is
//! served, and in what order a job's directory is listed.
//!
//! It owns no pixels and does no I/O: the filesystem core asks it to choose, then produces the
//! chosen sample itself. What it keeps, per job, is what the paper sizes (Seneca, FAST '26 §6):
//! one *seen* bit per sample (served to this job in its current epoch) and an epoch counter, plus
//! one *claimed* bit per sample (chosen for an open handle that has not read it yet). The
//! dataset-wide status byte per sample (which forms hold it) is the cache's
//! ([`prepfs_cache::SampleStatus`]); a [`Rank`] function turns it into a preference here.
//!
//! # The rules
//!
//! - **Substitution at open** ([`Job::choose`]): the requested sample is served if it is unseen
//!   and cached in the best form the view can use. Otherwise the best-cached unseen sample of
//!   the same directory (so the same class label) is served in its place; failing that, the
//!   requested one if unseen (a miss); failing that, any unseen one of the directory. A sample
//!   is marked seen when its bytes are first read ([`Job::mark_served`]), not at open: PIL opens
//!   a PPM twice per sample. A chosen sample is *claimed* from open to its first read, so no two
//!   handles of a job are handed the same sample.
//! - **Epochs**: a job's epoch ends when it has been served every sample; or, for jobs that read
//!   only part of the data per pass, when it opens a file in a directory of which it has been
//!   served every sample (it has started its next pass). The seen bits are then cleared.
//! - **Listing order** ([`Job::listing_order`]): a fresh shuffle per (job, epoch, directory), with
//!   the samples that are cached and unseen by the job first. The order is remembered (for the
//!   most recent directories) so prefetch can run along it ([`Job::prefetch_candidates`]).
//!
//! A job lives in a slot (at most [`MAX_JOBS`] at once, so that an augmented output can record
//! which jobs used it in a 64-bit mask); its inode code adds a generation to the slot, so a
//! retired job's stale inodes never reach its successor. A name or a job refused is a
//! [`JobError`], whose errno is decided beside it.
//!
//! - **Shared jobs** (`jobs.shared`, with a remote tier): the same job name on every mount
//!   sharing the remote is one job. Its taken bits and epoch live in the store ([`SharedJobs`]);
//!   an open's choice offers the store the few best candidates ODS ranks, and the store claims
//!   the first no mount has taken, atomically. So a job read through several mounts is served
//!   each sample once per epoch across all of them. A store that does not answer leaves each
//!   mount deciding alone (once per epoch on that mount) until it is back.
//!
//! - **Restarts**: with an epoch ledger attached ([`Jobs::attach_ledger`]: a file the server's
//!   supervisor keeps, a memfd), each job's identity (name, owner, slot and generation, so its
//!   inode code), epoch and samples served in it, in each of its views, are written as they
//!   change, and a server started again on the same file puts them back: each sample is still
//!   served once per epoch across the restart (but for marks in flight at the crash).
//!
//! Where things are: [`Job`] and its decisions in `job.rs`, the registry of jobs ([`Jobs`]) in
//! `registry.rs`, one pass over the set in `pass.rs`, the epoch ledger's file in `ledger.rs` and
//! its replay in `replay.rs`; the seam to a shared job's store is
//! prepfs-cache's `shared_jobs`, which the remote tier implements; here the limits, names and
//! errors.

mod job;
mod ledger;
#[cfg(test)]
mod ledger_tests;
mod pass;
mod registry;
mod replay;
#[cfg(test)]
mod remote_tests;
#[cfg(test)]
mod tests;

pub use job::{Choice, Job};
pub use ledger::LedgerError;
pub use replay::LedgerReport;
pub use pass::Pass;
pub use prepfs_base::bitset::Bitset;
pub use registry::Jobs;
pub use prepfs_cache::shared_jobs::SharedJobs;

/// Jobs that can be active at once: each is a bit of an augmented output's used-by mask.
pub use prepfs_cache::MAX_JOBS;
/// Longest job name, bytes.
pub(crate) const MAX_NAME_LEN: usize = 64;
/// Substitution looks at most this many samples of a directory per open.
pub(crate) const SCAN_LIMIT: usize = 4096;

/// A preference for a sample in some view (shared.rs's, beside the forms it ranks).
pub use prepfs_cache::form::Rank;

/// Why a job name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("job name `{}`: use letters, digits, `.`, `_` and `-`, not starting with `.`", prepfs_base::escape::escaped(.0))]
    BadName(String),
    #[error("job name longer than {MAX_NAME_LEN} bytes")]
    NameTooLong,
    #[error("{0} jobs are active, the most this mount allows (jobs.max); retire one (rmdir) or wait for one to go idle")]
    TooMany(usize),
    #[error("user {uid} holds {held} jobs, the most one user may (jobs.per_user); retire one (rmdir) or wait for one to go idle")]
    TooManyForUser { uid: u32, held: usize },
}

impl prepfs_base::errno::ToErrno for JobError {
    fn to_errno(&self) -> libc::c_int {
        match self {
            JobError::BadName(_) => libc::EINVAL,
            JobError::NameTooLong => libc::ENAMETOOLONG,
            // "Too many users": the mount's limit on concurrent jobs.
            JobError::TooMany(_) => libc::EUSERS,
            // One user's share of the jobs: a quota.
            JobError::TooManyForUser { .. } => libc::EDQUOT,
        }
    }
}

/// Who asks for a job: the requesting user, and whether it is root or the mount's owner (who
/// are not held to `jobs.per_user` and always find a slot kept for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requester {
    pub uid: u32,
    pub privileged: bool,
}

impl Requester {
    /// Root or the mount's owner.
    pub const OWNER: Requester = Requester { uid: 0, privileged: true };
}

/// Checks a job name: 1 to [`MAX_NAME_LEN`] bytes of `[A-Za-z0-9._-]`, not starting with `.`
/// (so never `.` or `..`, and never a path).
pub fn check_name(name: &[u8]) -> Result<&str, JobError> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.len() > MAX_NAME_LEN {
        return Err(JobError::NameTooLong);
    }
    let ok = !name.is_empty()
        && name[0] != b'.'
        && name.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(JobError::BadName(shown()));
    }
    std::str::from_utf8(name).map_err(|_| JobError::BadName(shown()))
}
