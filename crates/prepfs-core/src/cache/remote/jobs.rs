//! Jobs' state shared by the mounts of one dataset on the remote tier's server
//! ([`RemoteJobs`], the Redis side of `crate::sampling::SharedJobs`).
//!
//! Per job name, three keys in one cluster slot (the hash tag names the dataset and the job):
//! `prepfs:1:{FP:job:NAME}:epoch` (the epoch number; absent is 0), `...:taken` (a bitmap by
//! catalog id: claimed or served anywhere in the epoch) and `...:count` (how many are taken).
//! Every change is one server-side script, so it is atomic across mounts:
//!
//! - **claim**: `SETBIT` each candidate in turn until one was clear (that one is the caller's),
//!   only for a caller that names the current epoch (else it is told the epoch, to look again);
//!   the epoch's last sample taken begins the next epoch (the bitmap cleared, the number
//!   raised). A caller that found its directory all taken asks for the next epoch too, naming
//!   the epoch it saw, so however many mounts find the same the epoch moves on once.
//! - **release**: a claim closed unread is cleared again, only in the epoch it was made in.
//! - **restart**: a job removed (`rmdir`) begins a fresh epoch everywhere.
//!
//! Each key's time to live is refreshed by every claim, so a job that every mount has retired
//! for idleness is forgotten by the server too. Every call goes through the tier's bounded,
//! outage-aware connections: a call that does not answer is `None`, and the job decides alone.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use crate::sampling::{ClaimReply, SharedJob, SharedJobs};
use prepfs_source::catalog::FileId;

/// KEYS: epoch, taken, count. ARGV: the epoch the caller saw, the job's sample count, the keys'
/// time to live (ms), whether to begin the next epoch (1) if the caller's is still current,
/// then the candidates. Returns {the current epoch (of the claim), index of the candidate
/// claimed or -1 (also when the caller's epoch is not current), epoch after}.
const CLAIM: &str = r"
local e = tonumber(redis.call('GET', KEYS[1]) or '0')
local function roll()
  redis.call('DEL', KEYS[2])
  redis.call('SET', KEYS[3], 0)
  e = redis.call('INCR', KEYS[1])
end
if ARGV[4] == '1' and e == tonumber(ARGV[1]) then roll() end
-- A caller whose epoch is not the current one ranked its candidates on a stale mirror.
if e ~= tonumber(ARGV[1]) then return {e, -1, e} end
local at, got = e, -1
for i = 5, #ARGV do
  if redis.call('SETBIT', KEYS[2], ARGV[i], 1) == 0 then
    got = i - 5
    if redis.call('INCR', KEYS[3]) >= tonumber(ARGV[2]) then roll() end
    break
  end
end
for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ARGV[3]) end
return {at, got, e}
";

/// KEYS: epoch, taken, count. ARGV: the claim's epoch, the sample.
const RELEASE: &str = r"
local e = tonumber(redis.call('GET', KEYS[1]) or '0')
if e == tonumber(ARGV[1]) and redis.call('SETBIT', KEYS[2], ARGV[2], 0) == 1 then
  redis.call('DECR', KEYS[3])
end
return e
";

/// KEYS: epoch, taken, count. ARGV: the keys' time to live (ms).
const RESTART: &str = r"
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[3], 0)
local e = redis.call('INCR', KEYS[1])
for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ARGV[1]) end
return e
";

/// The store of the dataset's shared jobs on the remote tier's server.
pub(crate) struct RemoteJobs {
    inner: Arc<Inner>,
    fingerprint: u64,
    /// How long a job's keys outlive its last claim.
    ttl: Duration,
    scripts: Arc<Scripts>,
}

struct Scripts {
    claim: redis::Script,
    release: redis::Script,
    restart: redis::Script,
}

impl RemoteJobs {
    pub(super) fn new(inner: Arc<Inner>, fingerprint: u64, ttl: Duration) -> RemoteJobs {
        let scripts = Scripts { claim: redis::Script::new(CLAIM), release: redis::Script::new(RELEASE), restart: redis::Script::new(RESTART) };
        RemoteJobs { inner, fingerprint, ttl, scripts: Arc::new(scripts) }
    }
}

/// The keys of one job: epoch, taken, count.
pub(crate) fn job_keys(fingerprint: u64, name: &str) -> [Vec<u8>; 3] {
    let base = format!("prepfs:1:{{{fingerprint:016x}:job:{name}}}:");
    ["epoch", "taken", "count"].map(|k| format!("{base}{k}").into_bytes())
}

impl SharedJobs for RemoteJobs {
    fn job(&self, name: &str, samples: u64) -> Box<dyn SharedJob> {
        Box::new(RemoteJob {
            inner: Arc::clone(&self.inner),
            keys: job_keys(self.fingerprint, name),
            samples,
            ttl_ms: self.ttl.as_millis().max(1) as u64,
            scripts: Arc::clone(&self.scripts),
        })
    }
}

/// One job's shared state on the server.
struct RemoteJob {
    inner: Arc<Inner>,
    keys: [Vec<u8>; 3],
    samples: u64,
    ttl_ms: u64,
    scripts: Arc<Scripts>,
}

impl RemoteJob {
    fn invocation<'a>(&'a self, script: &'a redis::Script) -> redis::ScriptInvocation<'a> {
        let mut call = script.prepare_invoke();
        for key in &self.keys {
            call.key(&key[..]);
        }
        call
    }
}

impl SharedJob for RemoteJob {
    fn claim(&self, seen_epoch: u64, roll: bool, candidates: &[FileId]) -> Option<ClaimReply> {
        let mut call = self.invocation(&self.scripts.claim);
        call.arg(seen_epoch).arg(self.samples).arg(self.ttl_ms).arg(u8::from(roll));
        for &c in candidates {
            call.arg(c);
        }
        let (at, got, after) = self.inner.with_conn(|c| call.invoke::<(i64, i64, i64)>(c))?;
        self.inner.job_calls.fetch_add(1, Ordering::Relaxed);
        let got = usize::try_from(got).ok().filter(|&i| i < candidates.len());
        Some(ClaimReply { epoch: at.max(0) as u64, got, epoch_after: after.max(0) as u64 })
    }

    fn release(&self, epoch: u64, sample: FileId) {
        let mut call = self.invocation(&self.scripts.release);
        call.arg(epoch).arg(sample);
        self.inner.with_conn(|c| call.invoke::<i64>(c));
    }

    fn restart(&self) {
        let mut call = self.invocation(&self.scripts.restart);
        call.arg(self.ttl_ms);
        self.inner.with_conn(|c| call.invoke::<i64>(c));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::redis_server::{RedisCluster, RedisServer, SharedRedis};
    use super::super::RemoteTier;
    use super::*;
    use crate::sampling::{Job, Jobs, Requester};

    const SAMPLES: u32 = 20;

    /// One mount's registry of jobs over a one-directory set of [`SAMPLES`], sharing through
    /// the server at `url` (its own tier, as another machine's would be).
    fn mount(url: &str) -> (RemoteTier, Jobs) {
        let tier = RemoteTier::open(url, &crate::cache::remote::tests::test_access(), 1 << 30, 9, 0, None).expect("open");
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
        std::thread::sleep(crate::cache::remote::RETRY_EVERY);
        let before = ja.counters.shared_claims.load(Ordering::Relaxed);
        open_and_read(&ja, 3);
        assert_eq!(ja.counters.shared_claims.load(Ordering::Relaxed), before + 1, "claims go to the store again");
    }
}
