//! Shared jobs on a real Redis (one server, and a three-node cluster): one job on two mounts
//! is served each sample once per epoch, claims closed unread are given back, and a store
//! that goes down leaves each mount serving alone (the remote tier's side is prepfs-cache's
//! `remote/jobs.rs`).

use std::collections::HashSet;

use prepfs_test_servers::{RedisCluster, RedisServer, SharedRedis};
use prepfs_cache::remote::{Access, RemoteTier, ValueKey};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use prepfs_cache::shared_jobs::SharedJobs;
use prepfs_source::catalog::FileId;
use crate::{Job, Jobs, Requester};

const SAMPLES: u32 = 20;

/// One mount's registry of jobs over a one-directory set of [`SAMPLES`], sharing through
/// the server at `url` (its own tier, as another machine's would be).
fn mount(url: &str) -> (RemoteTier, Jobs) {
    let tier = RemoteTier::open(url, &Access::with_key(ValueKey::from_secret(b"the tests' shared secret, 32 b.")), 1 << 30, 9, 0, None).expect("open");
    let store: Arc<dyn SharedJobs> = Arc::new(tier.jobs(Duration::from_secs(60)));
    let jobs = Jobs::new(4, SAMPLES as usize, u64::from(SAMPLES), 1).with_shared(Some(store));
    (tier, jobs)
}

/// An open of `requested` in the job (nothing cached: every rank 0), read at once.
fn open_and_read(job: &Job, requested: FileId) -> FileId {
    let dir: Vec<FileId> = (0..SAMPLES).collect();
    let choice = job.choose(requested, &dir, |_| 0, 3, requested as usize, true);
    assert!(choice.claimed, "{choice:?}");
    job.mark_served(choice.sample, choice.claimed);
    choice.sample
}

/// Two mounts read one job, alternating, asking for samples in an order that collides: the
/// samples served in each epoch, across both, are every sample once.
fn served_once_per_epoch_across_two_mounts(server: &impl SharedRedis) {
    let (_ta, a) = mount(&server.url());
    let (_tb, b) = mount(&server.url());
    let (ja, jb) = (a.get_or_create(b"train", Requester::OWNER).expect("job"), b.get_or_create(b"train", Requester::OWNER).expect("job"));
    assert!(ja.is_shared() && jb.is_shared());
    for epoch in 0..3u64 {
        let mut served = Vec::new();
        for i in 0..SAMPLES {
            // Both mounts ask for the same samples: the second is served another.
            let job = if i % 2 == 0 { &ja } else { &jb };
            served.push(open_and_read(job, (i / 2 + epoch as u32) % SAMPLES));
        }
        let distinct: HashSet<FileId> = served.iter().copied().collect();
        assert_eq!(distinct.len(), SAMPLES as usize, "epoch {epoch}: {served:?}");
    }
    let claims = |j: &Job| j.counters.shared_claims.load(Ordering::Relaxed);
    assert_eq!(claims(&ja) + claims(&jb), 3 * u64::from(SAMPLES));
    assert!(ja.counters.taken_elsewhere.load(Ordering::Relaxed) + jb.counters.taken_elsewhere.load(Ordering::Relaxed) > 0);
    assert_eq!(ja.counters.decided_alone.load(Ordering::Relaxed), 0);
    // The next claim learns the store's epoch: both mounts are in the fourth.
    open_and_read(&ja, 0);
    open_and_read(&jb, 0);
    assert_eq!((ja.epoch(), jb.epoch()), (4, 4));
}

#[test]
fn one_job_on_two_mounts_sharing_a_server_is_served_every_sample_once_per_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    served_once_per_epoch_across_two_mounts(&RedisServer::start(dir.path()));
}

#[test]
fn one_job_on_two_mounts_sharing_a_three_node_cluster_is_served_every_sample_once_per_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    served_once_per_epoch_across_two_mounts(&RedisCluster::start(dir.path()));
}

#[test]
fn a_claim_closed_unread_is_given_back_and_a_removed_job_starts_afresh_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let (_ta, a) = mount(&server.url());
    let (_tb, b) = mount(&server.url());
    let ja = a.get_or_create(b"t", Requester::OWNER).expect("job");
    let jb = b.get_or_create(b"t", Requester::OWNER).expect("job");
    let dir_samples: Vec<FileId> = (0..SAMPLES).collect();
    // Claimed on one mount, closed unread: the other mount is then served it.
    let held = ja.choose(5, &dir_samples, |_| 0, 3, 0, true);
    assert_eq!((held.sample, held.claimed), (5, true));
    let other = jb.choose(5, &dir_samples, |_| 0, 3, 0, true);
    assert_ne!(other.sample, 5, "a sample claimed on another mount was handed out twice");
    jb.mark_served(other.sample, true);
    ja.unclaim(5);
    assert_eq!(open_and_read(&ja, 5), 5, "a claim given back is free again");
    // The other 18 are served on `a` (it learns which `b` took as it goes); the epoch's end
    // is then seen by both.
    for s in 0..SAMPLES - 2 {
        open_and_read(&ja, s);
    }
    assert_eq!(open_and_read(&jb, 0), 0, "a new epoch: the first sample is free again");
    assert_eq!(jb.epoch(), 2);
    // `rmdir` on one mount: a fresh epoch for both.
    open_and_read(&ja, 1);
    ja.restart_everywhere();
    assert_eq!(open_and_read(&jb, 1), 1, "after a restart nothing is taken");
    assert_eq!(jb.epoch(), 3);
}

#[test]
fn the_epochs_last_sample_read_after_the_next_epoch_began_is_free_in_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let (_t, a) = mount(&server.url());
    let job = a.get_or_create(b"t", Requester::OWNER).expect("job");
    let dir_samples: Vec<FileId> = (0..SAMPLES).collect();
    for s in 0..SAMPLES - 1 {
        open_and_read(&job, s);
    }
    // The last claim begins the next epoch; its read (a passthrough open counts as one at
    // once) comes after that.
    let last = job.choose(SAMPLES - 1, &dir_samples, |_| 0, 3, 0, true);
    assert_eq!((last.sample, job.epoch()), (SAMPLES - 1, 2));
    job.mark_served(last.sample, last.claimed);
    assert!(!job.has_seen(last.sample), "the next epoch's mirror took a sample of the last one");
    let next: HashSet<FileId> = (0..SAMPLES).map(|s| open_and_read(&job, s)).collect();
    assert_eq!(next.len(), SAMPLES as usize, "the next epoch serves every sample once");
}

#[test]
fn a_job_whose_store_is_down_keeps_serving_on_each_mount_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path());
    let (_ta, a) = mount(&server.url());
    let ja = a.get_or_create(b"t", Requester::OWNER).expect("job");
    open_and_read(&ja, 0);
    server.kill();
    // Every open is still served, each sample once in the epoch on this mount; then the
    // mount begins the next epoch itself.
    let served: HashSet<FileId> = (0..SAMPLES - 1).map(|s| open_and_read(&ja, s)).collect();
    assert_eq!(served.len(), SAMPLES as usize - 1);
    assert!(!served.contains(&0), "sample 0 was served twice in one epoch");
    open_and_read(&ja, 0);
    assert_eq!(ja.counters.decided_alone.load(Ordering::Relaxed), u64::from(SAMPLES));
    // Back: the job follows the store's epoch again.
    server.restart();
    std::thread::sleep(prepfs_cache::remote::RETRY_EVERY);
    let before = ja.counters.shared_claims.load(Ordering::Relaxed);
    open_and_read(&ja, 3);
    assert_eq!(ja.counters.shared_claims.load(Ordering::Relaxed), before + 1, "claims go to the store again");
}
