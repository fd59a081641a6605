//! Jobs' state shared by the mounts of one dataset on the remote tier's server
//! ([`RemoteJobs`], the Redis side of `crate::shared_jobs::SharedJobs`).
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
use crate::shared_jobs::{ClaimReply, SharedJob, SharedJobs};
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
pub struct RemoteJobs {
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
