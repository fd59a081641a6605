//! Preprocessing on other machines' CPUs: the work queue on the tier's server between the mounts
//! that ask for outputs and the `prepfs worker`s that make them (Pecan's remote input workers,
//! cedar's offload, the tf.data service's dispatcher, on the Redis every mount already shares).
//!
//! - **Items** go on one stream per dataset, `prepfs:1:{FP}:work`, read by the consumer group
//!   [`GROUP`] (`XREADGROUP`): each item to one worker. An item names what to make: the sample
//!   (catalog id, path relative to the source root, the version the mount resolved), the
//!   pipeline (`augmented/`'s or a recipe's, with the fingerprint of its ops and output), and the
//!   draw (the mount's seed and the draw's number), so the output is the one the mount would have
//!   made itself, and no draw is ever made for two outputs. Each item carries a MAC under the
//!   deployment's secret ([`super::ValueKey`]): a worker refuses an item anyone without the
//!   secret wrote, so nobody can make workers read files or spend their cores.
//! - **Results** go back to the asking mount on a list of its own, `prepfs:1:{FP}:done:MOUNT`
//!   (expiring [`DONE_TTL`] after the last push, so a mount gone leaves nothing behind): the
//!   item's sequence number, then a value in the tier's format (`value.rs`) whose MAC binds it to
//!   that mount and that item ([`result_key`]), so a result cannot be moved to another item or
//!   forged; its payload carries who made it, when it was taken and how long the making took.
//! - **At-least-once work, exactly-once serving.** A worker acknowledges (`XACK`, and deletes
//!   the entry) only after pushing the result. Items a dead worker held are taken over by the
//!   next worker that asks once they have been idle [`TAKE_OVER_AFTER`] (`XAUTOCLAIM`). A result
//!   made twice arrives twice; the mount takes the first and drops the second (its item is no
//!   longer outstanding): nothing is served twice.
//! - **Workers' beats**: each worker writes its name, host, rate and counts to
//!   `prepfs:1:{FP}:worker:NAME` every second (expiring after [`BEAT_TTL`]) and lists its name in
//!   `prepfs:1:{FP}:workers`; mounts read them to know who is alive and how fast.
//!
//! Every call goes through the tier's bounded, outage-aware connections (`health.rs`): with the
//! server down, nothing is asked and nothing arrives, and the mount makes everything itself.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use serde::{Deserialize, Serialize};

use super::value::{check_value, encode_value, HEADER_LEN};
use super::{Inner, RemoteKind, RemoteTier};
use crate::entry::Damage;
use prepfs_source::catalog::FileId;

/// The consumer group every worker reads the stream in.
pub const GROUP: &str = "workers";
/// Items a worker took and has not acknowledged for this long are taken over by another.
pub const TAKE_OVER_AFTER: Duration = Duration::from_secs(10);
/// A worker's beat lives this long: a worker not heard from since is gone.
pub const BEAT_TTL: Duration = Duration::from_secs(10);
/// A mount's list of results expires this long after its last push.
pub const DONE_TTL: Duration = Duration::from_secs(120);
/// Items older than this when taken are dropped unmade: the mount has stopped waiting for them.
pub const ITEM_MAX_AGE: Duration = Duration::from_secs(60);
/// The stream is trimmed to about this many entries (items of workers that never came).
const STREAM_MAX: u64 = 65_536;
/// The item format: magic and version (a worker of another format refuses it).
const ITEM_MAGIC: &[u8; 5] = b"PFWI\x01";
/// The stream field an item's bytes are under.
const FIELD: &str = "i";

/// One piece of work: see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// The asking mount (its results list) and the item's number there.
    pub mount: u64,
    pub seq: u64,
    /// The sample: catalog id, path relative to the source root, the version resolved (size and
    /// mtime, as every machine sees a file on shared storage).
    pub id: FileId,
    pub rel: PathBuf,
    pub len: u64,
    pub mtime_ns: i128,
    /// The pipeline (0: `augmented/`'s, else the recipe's number) and the fingerprint of its
    /// augmentations and output ([`super::recipe_fingerprint`]).
    pub pipeline: u8,
    pub recipe: u64,
    /// The draw: the mount's seed and the draw's number for this sample.
    pub seed: u64,
    pub draw: u64,
    /// When the mount queued it (ms since the Unix epoch, the mount's clock).
    pub queued_ms: u64,
}

/// Why a worker refuses an item it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not an item of this format (another version of prepfs, or garbage).
    Format,
    /// Its MAC fails: written without the deployment's secret.
    Forged,
}

/// An item as a worker took it: the stream entry (to acknowledge) and the item, or why it was
/// refused; `delivered` is how many times the server handed it out (more than once: taken over).
#[derive(Debug)]
pub struct Taken {
    pub entry: String,
    pub item: Result<WorkItem, Refusal>,
    pub delivered: u64,
}

/// A result as the mount received it, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkResult {
    pub seq: u64,
    /// The worker's name, when it took the item (ms since the Unix epoch, its clock) and how long
    /// making it took (µs of its CPU).
    pub worker: String,
    pub taken_ms: u64,
    pub made_us: u64,
    /// The value as it came, and where the output begins in it (not copied out: an output is
    /// copied once, into what serves it).
    raw: Vec<u8>,
    output_at: usize,
}

impl WorkResult {
    /// The output's bytes.
    pub fn output(&self) -> &[u8] {
        &self.raw[self.output_at..]
    }
}

/// A worker's beat: who it is and what it did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerBeat {
    pub name: String,
    pub host: String,
    /// Items it makes at once.
    pub threads: u32,
    /// Outputs a second over its last few seconds.
    pub rate: f64,
    pub done: u64,
    /// When it wrote this beat (ms since the Unix epoch, its clock).
    pub at_ms: u64,
}

/// The queue's keys for one dataset.
struct Keys {
    fingerprint: u64,
}

impl Keys {
    fn stream(&self) -> Vec<u8> {
        format!("prepfs:1:{{{:016x}}}:work", self.fingerprint).into_bytes()
    }
    fn done(&self, mount: u64) -> Vec<u8> {
        format!("prepfs:1:{{{:016x}}}:done:{mount:016x}", self.fingerprint).into_bytes()
    }
    fn workers(&self) -> Vec<u8> {
        format!("prepfs:1:{{{:016x}}}:workers", self.fingerprint).into_bytes()
    }
    fn beat(&self, name: &str) -> Vec<u8> {
        format!("prepfs:1:{{{:016x}}}:worker:{name}", self.fingerprint).into_bytes()
    }
}

/// The name a result's MAC binds it to: the dataset, the mount, the item. Never a key on the
/// server.
pub fn result_key(fingerprint: u64, mount: u64, seq: u64) -> Vec<u8> {
    format!("prepfs:1:{{{fingerprint:016x}}}:result:{mount:016x}:{seq}").into_bytes()
}

/// Milliseconds since the Unix epoch on this machine's clock.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl WorkItem {
    /// The item's bytes: the fields, then their MAC under `mac` bound to `stream`.
    fn encode(&self, mac: &super::ValueKey, stream: &[u8]) -> Vec<u8> {
        let rel = self.rel.as_os_str().as_bytes();
        let mut b = Vec::with_capacity(96 + rel.len());
        b.extend_from_slice(ITEM_MAGIC);
        for v in [self.mount, self.seq, u64::from(self.id), self.len] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.mtime_ns.to_le_bytes());
        b.push(self.pipeline);
        for v in [self.recipe, self.seed, self.draw, self.queued_ms, rel.len() as u64] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(rel);
        let tag = mac.mac(stream, &b, b"");
        b.extend_from_slice(&tag);
        b
    }

    /// An item from its bytes, its MAC checked under `mac` for `stream`.
    fn decode(mac: &super::ValueKey, stream: &[u8], bytes: &[u8]) -> Result<WorkItem, Refusal> {
        let mac_len = super::auth::MAC_LEN;
        if bytes.len() < ITEM_MAGIC.len() + mac_len || !bytes.starts_with(ITEM_MAGIC) {
            return Err(Refusal::Format);
        }
        let (body, tag) = bytes.split_at(bytes.len() - mac_len);
        if !mac.verify(stream, body, b"", tag) {
            return Err(Refusal::Forged);
        }
        let mut r = Reader { b: &body[ITEM_MAGIC.len()..] };
        let (mount, seq, id, len) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let mtime_ns = i128::from_le_bytes(r.take(16)?.try_into().map_err(|_| Refusal::Format)?);
        let pipeline = r.take(1)?[0];
        let (recipe, seed, draw, queued_ms, rel_len) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let rel = r.take(usize::try_from(rel_len).map_err(|_| Refusal::Format)?)?;
        if !r.b.is_empty() {
            return Err(Refusal::Format);
        }
        // An item names a path inside the source: relative, no `..`, no NUL (the worker's source
        // checks again as it reads).
        let rel = PathBuf::from(std::ffi::OsStr::from_bytes(rel));
        if !is_inside(&rel) {
            return Err(Refusal::Format);
        }
        let id = FileId::try_from(id).map_err(|_| Refusal::Format)?;
        Ok(WorkItem { mount, seq, id, rel, len, mtime_ns, pipeline, recipe, seed, draw, queued_ms })
    }
}

/// Whether `rel` stays inside the directory it is relative to (no root, no `..`).
fn is_inside(rel: &Path) -> bool {
    !rel.as_os_str().is_empty()
        && !rel.as_os_str().as_bytes().contains(&0)
        && rel.components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// A cursor over an item's bytes.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Refusal> {
        if self.b.len() < n {
            return Err(Refusal::Format);
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn u64(&mut self) -> Result<u64, Refusal> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| Refusal::Format)?))
    }
}

/// The mount's side of the queue: asks, receives results, reads the workers' beats.
pub struct WorkQueue {
    inner: Arc<Inner>,
    keys: Keys,
    mount: u64,
}

/// The worker's side of the queue: takes items, delivers results, beats.
pub struct WorkTaker {
    inner: Arc<Inner>,
    keys: Keys,
    name: String,
    /// How long another worker's item must lie idle before this one takes it over.
    take_over_after: Duration,
    /// When this worker last looked for idle items to take over (ms since the Unix epoch): at
    /// most once a second, so a busy worker's takes are one round trip.
    looked_for_idle_ms: std::sync::atomic::AtomicU64,
}

impl RemoteTier {
    /// The mount's side of the work queue, as mount `mount` (a number unique to this mount).
    pub fn work_queue(&self, mount: u64) -> WorkQueue {
        WorkQueue { inner: Arc::clone(&self.inner), keys: Keys { fingerprint: self.fingerprint }, mount }
    }

    /// A worker's side of the work queue, as consumer `name`.
    pub fn work_taker(&self, name: &str) -> WorkTaker {
        WorkTaker {
            inner: Arc::clone(&self.inner),
            keys: Keys { fingerprint: self.fingerprint },
            name: name.to_string(),
            take_over_after: TAKE_OVER_AFTER,
            looked_for_idle_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl WorkQueue {
    /// This mount's number in the queue.
    pub fn mount(&self) -> u64 {
        self.mount
    }

    /// Whether the server answers now.
    pub fn is_up(&self) -> bool {
        !self.inner.down.load(Ordering::Acquire)
    }

    /// Queues `items` (one round trip); returns how many the server took.
    pub fn ask(&self, items: &[WorkItem]) -> usize {
        if items.is_empty() {
            return 0;
        }
        let stream = self.keys.stream();
        let cmds: Vec<redis::Cmd> = items
            .iter()
            .map(|item| {
                let mut cmd = redis::cmd("XADD");
                cmd.arg(&stream[..]).arg("MAXLEN").arg("~").arg(STREAM_MAX).arg("*").arg(FIELD).arg(item.encode(&self.inner.value_key, &stream));
                cmd
            })
            .collect();
        let replies = self.inner.with_conn(|c| c.pipeline(cmds));
        replies.map_or(0, |r| r.iter().filter(|v| !matches!(v, redis::Value::Nil | redis::Value::ServerError(_))).count())
    }

    /// The results pushed for this mount: waits up to `wait` (under the tier's call timeout)
    /// for a first, then takes up to `max` in all. Each is checked: a value that is not a result
    /// for this mount's item `seq` under the deployment's secret is counted in `refused` and
    /// left out.
    pub fn receive(&self, wait: Duration, max: usize, refused: &mut u64) -> Vec<WorkResult> {
        let key = self.keys.done(self.mount);
        let wait = wait.min(super::TIMEOUT / 2);
        let first = self.inner.with_conn(|c| {
            redis::cmd("BLPOP").arg(&key[..]).arg(wait.as_secs_f64()).query::<Option<(Vec<u8>, Vec<u8>)>>(c)
        });
        let Some(Some((_, first))) = first else { return Vec::new() };
        let mut raw = vec![first];
        if max > 1 {
            let more = self.inner.with_conn(|c| redis::cmd("LPOP").arg(&key[..]).arg(max - 1).query::<Option<Vec<Vec<u8>>>>(c));
            raw.extend(more.flatten().unwrap_or_default());
        }
        let received: u64 = raw.iter().map(|r| r.len() as u64).sum();
        self.inner.network.bytes_received.fetch_add(received, Ordering::Relaxed);
        raw.into_iter()
            .filter_map(|r| match self.open(r) {
                Ok(result) => Some(result),
                Err(_) => {
                    *refused += 1;
                    None
                }
            })
            .collect()
    }

    /// A pushed result checked: its MAC binds it to this mount and its item.
    fn open(&self, raw: Vec<u8>) -> Result<WorkResult, Damage> {
        if raw.len() < 8 {
            return Err(Damage::Short);
        }
        let seq = u64::from_le_bytes(raw[..8].try_into().map_err(|_| Damage::Short)?);
        let key = result_key(self.keys.fingerprint, self.mount, seq);
        check_value(&self.inner.value_key, RemoteKind::Augmented, &key, &raw[8..])?;
        let payload_at = 8 + HEADER_LEN;
        let mut r = Reader { b: &raw[payload_at..] };
        let parsed = (|| {
            let (taken_ms, made_us, name_len) = (r.u64()?, r.u64()?, r.u64()?);
            let name = String::from_utf8_lossy(r.take(usize::try_from(name_len).map_err(|_| Refusal::Format)?)?).into_owned();
            Ok::<_, Refusal>((taken_ms, made_us, name, r.b.len()))
        })();
        let (taken_ms, made_us, worker, output_len) = parsed.map_err(|_| Damage::Short)?;
        let output_at = raw.len() - output_len;
        Ok(WorkResult { seq, worker, taken_ms, made_us, raw, output_at })
    }

    /// The workers heard from within [`BEAT_TTL`]; names whose beat expired are dropped from the
    /// list.
    pub fn workers(&self) -> Vec<WorkerBeat> {
        let set = self.keys.workers();
        let Some(names) = self.inner.with_conn(|c| redis::cmd("SMEMBERS").arg(&set[..]).query::<Vec<String>>(c)) else { return Vec::new() };
        if names.is_empty() {
            return Vec::new();
        }
        let mut get = redis::cmd("MGET");
        for name in &names {
            get.arg(self.keys.beat(name));
        }
        // In a cluster every key here shares the dataset's slot: one MGET.
        let Some(beats) = self.inner.with_conn(|c| get.query::<Vec<Option<Vec<u8>>>>(c)) else { return Vec::new() };
        let mut alive = Vec::new();
        for (name, beat) in names.iter().zip(beats) {
            match beat.and_then(|b| serde_json::from_slice::<WorkerBeat>(&b).ok()) {
                Some(beat) => alive.push(beat),
                None => {
                    self.inner.with_conn(|c| redis::cmd("SREM").arg(&set[..]).arg(name).query::<i64>(c));
                }
            }
        }
        alive.sort_by(|a, b| a.name.cmp(&b.name));
        alive
    }
}

impl WorkTaker {
    /// Takes over other workers' items once idle `after` (tests shorten it).
    pub fn with_take_over_after(mut self, after: Duration) -> WorkTaker {
        self.take_over_after = after;
        self
    }

    /// The consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Makes the stream and its group if they are not there; whether they are now. A group made
    /// now starts at the stream's beginning (`0`, not `$`): items mounts queued before the first
    /// worker joined are taken too, never passed over (a result no mount still wants is dropped
    /// by the mount).
    pub fn join(&self) -> bool {
        let stream = self.keys.stream();
        self.inner
            .with_conn(|c| match redis::cmd("XGROUP").arg("CREATE").arg(&stream[..]).arg(GROUP).arg("0").arg("MKSTREAM").query::<()>(c) {
                Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
                other => other,
            })
            .is_some()
    }

    /// Up to `count` items: first (looked for at most once a second) those other workers left
    /// idle past [`TAKE_OVER_AFTER`] (by default)
    /// (taken over), else new ones, waiting up to `wait` (under the tier's call timeout) for one.
    pub fn take(&self, count: usize, wait: Duration) -> Vec<Taken> {
        let stream = self.keys.stream();
        let now = unix_ms();
        let last = self.looked_for_idle_ms.load(Ordering::Relaxed);
        let look = now.saturating_sub(last) >= 1000.min(self.take_over_after.as_millis() as u64)
            && self.looked_for_idle_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        let over = if !look { None } else { self.inner.with_conn(|c| {
            redis::cmd("XAUTOCLAIM")
                .arg(&stream[..])
                .arg(GROUP)
                .arg(&self.name)
                .arg(self.take_over_after.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(count)
                .query::<StreamAutoClaimReply>(c)
        }) };
        let taken_over: Vec<Taken> = over.map(|r| r.claimed.into_iter().map(|e| self.taken(&stream, e, 2)).collect()).unwrap_or_default();
        if !taken_over.is_empty() {
            return taken_over;
        }
        let wait_ms = wait.min(super::TIMEOUT / 2).as_millis() as u64;
        let read = self.inner.with_conn(|c| {
            let reply = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(&self.name)
                .arg("COUNT")
                .arg(count)
                .arg("BLOCK")
                .arg(wait_ms)
                .arg("STREAMS")
                .arg(&stream[..])
                .arg(">")
                .query::<Option<StreamReadReply>>(c);
            // The group is made by the first worker; a stream flushed since has lost it.
            match reply {
                Err(e) if e.code() == Some("NOGROUP") => {
                    let made = redis::cmd("XGROUP").arg("CREATE").arg(&stream[..]).arg(GROUP).arg("0").arg("MKSTREAM").query::<()>(c);
                    made.or_else(|e| if e.code() == Some("BUSYGROUP") { Ok(()) } else { Err(e) }).map(|()| None)
                }
                other => other,
            }
        });
        read.flatten().map(|r| r.keys.into_iter().flat_map(|k| k.ids).map(|e| self.taken(&stream, e, 1)).collect()).unwrap_or_default()
    }

    fn taken(&self, stream: &[u8], entry: StreamId, delivered: u64) -> Taken {
        let item = match entry.map.get(FIELD) {
            Some(redis::Value::BulkString(b)) => WorkItem::decode(&self.inner.value_key, stream, b),
            _ => Err(Refusal::Format),
        };
        Taken { entry: entry.id, item, delivered }
    }

    /// Sends `output`, made of `item` (taken at `taken_ms`, made in `made_us` µs), to the mount
    /// that asked, and acknowledges the item; the bytes sent, `None` where the server did not
    /// take them.
    pub fn deliver(&self, entry: &str, item: &WorkItem, taken_ms: u64, made_us: u64, output: &[u8]) -> Option<u64> {
        let mut payload = Vec::with_capacity(24 + self.name.len() + output.len());
        for v in [taken_ms, made_us, self.name.len() as u64] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        payload.extend_from_slice(self.name.as_bytes());
        payload.extend_from_slice(output);
        let key = result_key(self.keys.fingerprint, item.mount, item.seq);
        let mut value = item.seq.to_le_bytes().to_vec();
        value.extend_from_slice(&encode_value(&self.inner.value_key, RemoteKind::Augmented, &key, &payload, (0, 0)));
        let done = self.keys.done(item.mount);
        let mut push = redis::cmd("RPUSH");
        push.arg(&done[..]).arg(&value[..]);
        let mut expire = redis::cmd("PEXPIRE");
        expire.arg(&done[..]).arg(DONE_TTL.as_millis() as u64);
        let mut cmds = vec![push, expire];
        cmds.extend(self.acknowledge_cmds(entry));
        self.inner.with_conn(|c| c.pipeline(cmds)).map(|_| value.len() as u64)
    }

    /// Acknowledges an item without a result (refused, or its sample changed): it is not
    /// handed out again.
    pub fn discard(&self, entry: &str) -> bool {
        let cmds = self.acknowledge_cmds(entry).to_vec();
        self.inner.with_conn(|c| c.pipeline(cmds)).is_some()
    }

    fn acknowledge_cmds(&self, entry: &str) -> [redis::Cmd; 2] {
        let stream = self.keys.stream();
        let mut ack = redis::cmd("XACK");
        ack.arg(&stream[..]).arg(GROUP).arg(entry);
        let mut del = redis::cmd("XDEL");
        del.arg(&stream[..]).arg(entry);
        [ack, del]
    }

    /// Writes the worker's beat (alive for [`BEAT_TTL`]).
    pub fn beat(&self, beat: &WorkerBeat) -> bool {
        let Ok(text) = serde_json::to_vec(beat) else { return false };
        let mut set = redis::cmd("SET");
        set.arg(self.keys.beat(&self.name)).arg(text).arg("PX").arg(BEAT_TTL.as_millis() as u64);
        let mut add = redis::cmd("SADD");
        add.arg(self.keys.workers()).arg(&self.name);
        self.inner.with_conn(|c| c.pipeline(vec![set, add])).is_some()
    }

    /// The worker leaves: its beat is removed at once.
    pub fn leave(&self) {
        let mut del = redis::cmd("DEL");
        del.arg(self.keys.beat(&self.name));
        let mut rem = redis::cmd("SREM");
        rem.arg(self.keys.workers()).arg(&self.name);
        self.inner.with_conn(|c| c.pipeline(vec![del, rem]));
    }
}

/// Whether `name` can name a worker: 1 to 64 of ASCII letters, digits, `-`, `_` and `.`.
pub fn valid_worker_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::ValueKey;

    fn item() -> WorkItem {
        WorkItem {
            mount: 7,
            seq: 42,
            id: 3,
            rel: PathBuf::from("c0/x.jpg"),
            len: 1234,
            mtime_ns: -5,
            pipeline: 1,
            recipe: 0xfeed,
            seed: 9,
            draw: 2,
            queued_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn an_item_survives_its_encoding_and_is_refused_when_forged_moved_cut_or_escaping_the_source() {
        let key = ValueKey::from_secret(b"0123456789abcdef0123");
        let bytes = item().encode(&key, b"stream");
        assert_eq!(WorkItem::decode(&key, b"stream", &bytes), Ok(item()));
        assert_eq!(WorkItem::decode(&ValueKey::from_secret(b"another secret 0123"), b"stream", &bytes), Err(Refusal::Forged));
        assert_eq!(WorkItem::decode(&key, b"another stream", &bytes), Err(Refusal::Forged), "moved to another dataset");
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert_eq!(WorkItem::decode(&key, b"stream", &flipped), Err(Refusal::Forged));
        assert_eq!(WorkItem::decode(&key, b"stream", &bytes[..bytes.len() - 1]), Err(Refusal::Forged));
        assert_eq!(WorkItem::decode(&key, b"stream", b"PFWI\x02garbage garbage garbage garbage garbage"), Err(Refusal::Format));
        for rel in ["../etc/shadow", "/etc/shadow", "a/../../b", ""] {
            let bad = WorkItem { rel: PathBuf::from(rel), ..item() }.encode(&key, b"stream");
            assert_eq!(WorkItem::decode(&key, b"stream", &bad), Err(Refusal::Format), "{rel}");
        }
    }

    #[test]
    fn worker_names_are_short_plain_words() {
        assert!(valid_worker_name("host-1.worker_2"));
        for bad in ["", "a b", "a:b", "a/b", "é", &"x".repeat(65)] {
            assert!(!valid_worker_name(bad), "{bad}");
        }
    }

    fn tier(url: &str, fingerprint: u64) -> RemoteTier {
        RemoteTier::open(url, &crate::remote::tests::test_access(), 1 << 30, fingerprint, 0, None).expect("open")
    }

    fn items(mount: u64, n: u64) -> Vec<WorkItem> {
        (0..n).map(|seq| WorkItem { mount, seq, id: seq as FileId, rel: PathBuf::from(format!("c0/{seq}.jpg")), ..item() }).collect()
    }

    /// Takes until `n` items came (the stream answers within the tier's timeout).
    fn take_n(taker: &WorkTaker, n: usize) -> Vec<Taken> {
        let mut got = Vec::new();
        let started = std::time::Instant::now();
        while got.len() < n {
            assert!(started.elapsed() < Duration::from_secs(10), "took {} of {n}", got.len());
            got.extend(taker.take(n - got.len(), Duration::from_millis(50)));
        }
        got
    }

    fn receive_n(queue: &WorkQueue, n: usize, refused: &mut u64) -> Vec<WorkResult> {
        let mut got = Vec::new();
        let started = std::time::Instant::now();
        while got.len() < n {
            assert!(started.elapsed() < Duration::from_secs(10), "received {} of {n}", got.len());
            got.extend(queue.receive(Duration::from_millis(50), 16, refused));
        }
        got
    }

    /// The queue's whole round on a server: asked, taken by one worker each, made, received by
    /// the asking mount only, a dead worker's item taken over, forged results refused.
    fn round(url: &str) {
        let (mount_tier, worker_tier) = (tier(url, 11), tier(url, 11));
        let (queue, other_mount) = (mount_tier.work_queue(1), mount_tier.work_queue(2));
        // Neither takes over another's items while the items are handed out (10 s idle first,
        // far longer than this phase on a busy machine); b_later is b again, taking over sooner.
        let (a, b) = (worker_tier.work_taker("a"), worker_tier.work_taker("b"));
        let b_later = worker_tier.work_taker("b").with_take_over_after(Duration::from_millis(300));
        assert!(a.join() && b.join(), "the group is made (or found)");
        assert_eq!(queue.ask(&items(1, 3)), 3);
        // Worker a takes two and dies holding the second; b takes the third.
        let took_a = take_n(&a, 2);
        let took_b = take_n(&b, 1);
        let item_of = |t: &Taken| t.item.clone().expect("a sound item");
        let seqs: Vec<u64> = took_a.iter().chain(&took_b).map(|t| item_of(t).seq).collect();
        assert_eq!({ let mut s = seqs.clone(); s.sort(); s }, vec![0, 1, 2], "each item to one worker");
        assert!(a.deliver(&took_a[0].entry, &item_of(&took_a[0]), 5, 6, b"output of a").is_some());
        assert!(b.deliver(&took_b[0].entry, &item_of(&took_b[0]), 7, 8, b"output of b").is_some());
        // a's second item is idle: b takes it over, and delivers it.
        let over = take_n(&b_later, 1);
        assert_eq!(item_of(&over[0]).seq, item_of(&took_a[1]).seq);
        assert!(over[0].delivered >= 2, "taken over");
        assert!(b_later.deliver(&over[0].entry, &item_of(&over[0]), 9, 10, b"output of b again").is_some());
        // A forged result (no secret) and one moved to another item are refused.
        let forged_key = result_key(11, 1, 0);
        let mut forged = 0u64.to_le_bytes().to_vec();
        forged.extend(encode_value(&ValueKey::from_secret(b"not the deployment's secret"), RemoteKind::Augmented, &forged_key, &[0; 40], (0, 0)));
        let mut moved = 1u64.to_le_bytes().to_vec();
        moved.extend(encode_value(&crate::remote::tests::test_key(), RemoteKind::Augmented, &forged_key, &[0; 40], (0, 0)));
        let done = Keys { fingerprint: 11 }.done(1);
        for value in [&forged, &moved] {
            mount_tier.inner.with_conn(|c| redis::cmd("RPUSH").arg(&done[..]).arg(&value[..]).query::<i64>(c)).expect("push");
        }
        let mut refused = 0;
        let mut results = receive_n(&queue, 3, &mut refused);
        while refused < 2 {
            results.extend(queue.receive(Duration::from_millis(50), 16, &mut refused));
        }
        results.sort_by_key(|r| r.seq);
        assert_eq!(results.len(), 3, "{results:?}");
        assert_eq!(refused, 2);
        for r in &results {
            assert!(r.output().starts_with(b"output of"), "{r:?}");
            assert!(r.worker == "a" || r.worker == "b");
        }
        assert_eq!(other_mount.receive(Duration::from_millis(20), 16, &mut refused), vec![], "another mount's list is its own");
        // Nothing is left to take: every item was acknowledged.
        assert!(b.take(8, Duration::from_millis(20)).is_empty() && a.take(8, Duration::from_millis(20)).is_empty());
        // Beats: alive while beating, gone when they leave.
        assert!(a.beat(&WorkerBeat { name: "a".into(), host: "h".into(), threads: 1, rate: 2.5, done: 1, at_ms: unix_ms() }));
        assert_eq!(queue.workers().iter().map(|w| w.name.as_str()).collect::<Vec<_>>(), ["a"]);
        a.leave();
        assert!(queue.workers().is_empty());
    }

    #[test]
    fn items_reach_one_worker_each_results_reach_only_the_asking_mount_and_a_dead_workers_items_are_taken_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = crate::remote::redis_server::RedisServer::start(dir.path());
        round(&server.url());
    }

    #[test]
    fn the_queue_works_the_same_on_a_redis_cluster() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = crate::remote::redis_server::RedisCluster::start(dir.path());
        round(&cluster.url());
    }
}
