//! The seam to a job's state shared by several mounts ([`SharedJobs`], [`SharedJob`]): the same
//! job name on every mount that shares a remote tier is one job, whose *taken* bits (a sample
//! claimed or served anywhere in the current epoch) and epoch number live in that store, claimed
//! atomically there. Sampling keeps its decisions in process and asks the store only to claim
//! one of a few candidates it has already ranked; the implementation (Redis, with its timeouts
//! and outages) is the remote tier's (`crate::remote::jobs`).
//!
//! Each mount's [`super::Job`] keeps a mirror of the taken bits it has learned (its own claims,
//! and candidates the store said were taken) and the epoch the store last reported; a store that
//! does not answer (an outage) leaves the job deciding alone on that mirror, so requests never
//! fail for it.

use prepfs_source::catalog::FileId;

/// What the store answered to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimReply {
    /// The epoch the claim was made in (the store's current one when it answered).
    pub epoch: u64,
    /// Which candidate was claimed (an index into the candidates); `None`: every one was
    /// taken already.
    pub got: Option<usize>,
    /// The epoch after the claim: one more when this claim took the epoch's last sample (or a
    /// requested roll happened), else `epoch`.
    pub epoch_after: u64,
}

/// One job's shared state.
pub trait SharedJob: Send + Sync {
    /// Claims, in the store's current epoch, the first of `candidates` no one has taken. With
    /// `roll` the caller has found its directory's every sample taken in epoch `seen_epoch`:
    /// if that is still the current epoch, the next one begins first (so it begins once, however
    /// many mounts find the same). `None`: the store did not answer.
    fn claim(&self, seen_epoch: u64, roll: bool, candidates: &[FileId]) -> Option<ClaimReply>;
    /// Gives back a claim made in `epoch` that was never read (its handle closed unread).
    fn release(&self, epoch: u64, sample: FileId);
    /// Begins a fresh epoch for every mount (the job was removed and is started anew).
    fn restart(&self);
}

/// Where jobs' shared state is kept: one [`SharedJob`] per job name.
pub trait SharedJobs: Send + Sync {
    /// The shared state of the job named `name`, over `samples` samples.
    fn job(&self, name: &str, samples: u64) -> Box<dyn SharedJob>;
}
