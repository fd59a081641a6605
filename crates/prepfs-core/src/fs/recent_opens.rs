//! The samples recent job-view opens were given, by the kernel's request number (issue 53):
//! what makes an open the kernel sends again after its server died answer as the first try
//! would have.
//!
//! A job's open counts its sample served (with passthrough, at the open itself) and the
//! ledger keeps that before the answer goes out. A server that dies between the two leaves the
//! sample served and the reader unanswered; the kernel sends the open again to the next server
//! (FUSE_NOTIFY_RESEND), with the same request number. Were it given another sample, the first
//! would be lost to the epoch. So each job-view open writes (request, inode, sample) here
//! before its sample is counted, and an open whose request and inode are found here is given
//! that sample again.
//!
//! The record is a ring of [`SLOTS`] fixed slots in a memory file the supervisor holds, the slot
//! a request's number modulo the ring: the kernel numbers every request of the connection in
//! turn, so the opens outstanding when a server dies are among the last few thousand numbers
//! and still in the ring. Each slot carries a checksum: a torn slot reads as empty.

use std::fs::File;
use std::os::unix::fs::FileExt;

use prepfs_source::catalog::FileId;

/// Slots in the ring (24 bytes each: 1.5 MiB of a sparse memory file).
const SLOTS: u64 = 1 << 16;
const SLOT_LEN: u64 = 24;

/// A request as the kernel numbered it, for [`RecentOpens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRequest {
    /// The request's number (its unique id, without the mark of a resent request).
    pub unique: u64,
    /// Whether it may be one sent again: it carries the kernel's mark of a resent request, or
    /// the kernel marks none (it did not offer FUSE_HAS_RESEND). Only such a request is looked
    /// up; every job-view open is recorded.
    pub maybe_resent: bool,
}

/// See the module documentation.
pub(super) struct RecentOpens {
    file: File,
}

fn check(unique: u64, ino: u64, sample: FileId) -> u32 {
    prepfs_base::hash::fnv1a64(&[&unique.to_le_bytes(), &ino.to_le_bytes(), &sample.to_le_bytes()]) as u32
}

impl RecentOpens {
    pub(super) fn new(file: File) -> RecentOpens {
        RecentOpens { file }
    }

    fn offset(unique: u64) -> u64 {
        (unique % SLOTS) * SLOT_LEN
    }

    /// Records that `request` opening `ino` is given `sample` (before it is counted served).
    pub(super) fn record(&self, request: OpenRequest, ino: u64, sample: FileId) {
        let mut slot = [0u8; SLOT_LEN as usize];
        slot[..8].copy_from_slice(&request.unique.to_le_bytes());
        slot[8..16].copy_from_slice(&ino.to_le_bytes());
        slot[16..20].copy_from_slice(&sample.to_le_bytes());
        slot[20..24].copy_from_slice(&check(request.unique, ino, sample).to_le_bytes());
        if let Err(e) = self.file.write_at(&slot, Self::offset(request.unique)) {
            tracing::warn!(error = %e, "cannot record a job open's sample for the next server");
        }
    }

    /// The sample `request` opening `ino` was given by an earlier try, if it was recorded.
    pub(super) fn given(&self, request: OpenRequest, ino: u64) -> Option<FileId> {
        let mut slot = [0u8; SLOT_LEN as usize];
        self.file.read_exact_at(&mut slot, Self::offset(request.unique)).ok()?;
        let word = |r: std::ops::Range<usize>| slot[r].iter().rev().fold(0u64, |acc, &b| acc << 8 | u64::from(b));
        let (unique, recorded_ino, sample, sum) = (word(0..8), word(8..16), word(16..20) as FileId, word(20..24) as u32);
        (unique == request.unique && recorded_ino == ino && sum == check(unique, ino, sample)).then_some(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> RecentOpens {
        let file = tempfile::tempfile().expect("tempfile");
        file.set_len(SLOTS * SLOT_LEN).expect("size");
        RecentOpens::new(file)
    }

    #[test]
    fn an_open_sent_again_finds_the_sample_its_first_try_was_given() {
        let opens = ring();
        let request = OpenRequest { unique: 1_234_567, maybe_resent: true };
        assert_eq!(opens.given(request, 42), None, "nothing recorded yet");
        opens.record(request, 42, 7);
        assert_eq!(opens.given(request, 42), Some(7));
        assert_eq!(opens.given(request, 43), None, "another inode's open is another request");
        assert_eq!(opens.given(OpenRequest { unique: 1_234_567 + SLOTS, maybe_resent: true }, 42), None, "a later request in the same slot is not this one");
    }

    #[test]
    fn a_torn_slot_reads_as_nothing_recorded() {
        let opens = ring();
        let request = OpenRequest { unique: 99, maybe_resent: true };
        opens.record(request, 5, 3);
        opens.file.write_at(&[0xff], RecentOpens::offset(99) + 17).expect("tear");
        assert_eq!(opens.given(request, 5), None);
    }
}
