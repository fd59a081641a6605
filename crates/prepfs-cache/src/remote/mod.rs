//! The remote tier of the sample cache: encoded bytes, decoded pixels (uint8) and augmented
//! outputs on a Redis server that every mount naming it shares, behind the memory and disk tiers.
//!
//! It owns the keys and the value format, the connections and their timeouts, the tier's health
//! (up, or down since when; reconnects), the background writer and its queue, and the budget.
//!
//! - **Keys** (bytes): `prepfs:1:{FP:LEN:MTIME:REL}:K`, `FP` the dataset's fingerprint
//!   ([`dataset_fingerprint`]: the catalog's relative names, hashed once at mount), `LEN` and
//!   `MTIME` the version of the sample's file (size, mtime in ns: what every machine sees of a
//!   file on shared storage, unlike inode or ctime), `REL` its path relative to the source root,
//!   `K` the form (`e` encoded, `d` decoded, `a` augmented). So mounts of the same dataset share,
//!   different datasets never collide, and a changed file never finds its stale entries. The
//!   braces are a Redis Cluster hash tag: a sample's forms live in one slot (one `MGET`).
//! - **Values**: a 72-byte header then the payload: the entry codec's 40-byte header
//!   (`super::entry`: magic `PFRM`, version 2, kinds encoded, decoded and augmented, the FNV-1a 64
//!   of the Redis key in the key field), then `40..72` the value's MAC: keyed BLAKE3 under the
//!   deployment's secret (`cache.remote.secret_file`) over the key, header bytes `0..40` and the
//!   payload (`auth.rs`). Every read checks them all, by the codec's damage rules: a damaged
//!   value (or one stored under another key) is deleted, counted (`damaged_dropped`) and
//!   answered as a miss; one intact but failing its MAC (forged by someone who can write to the
//!   server, or written with another secret) is deleted (else its `SET NX` squat would keep the
//!   true value out), counted (`forged`) and answered as a miss. Neither is ever served.
//! - **Access**: the URL's `USER:PASSWORD@` (Redis AUTH / ACL user), or a password read from
//!   `cache.remote.password_file`; `rediss://` for TLS, trusting the system's roots or
//!   `cache.remote.tls_ca_file`. Passwords are never logged or shown: see [`redacted`].
//! - **Augmented outputs are use-once across machines**: one waiting output per sample, written
//!   with `SET NX`, taken with `GETDEL` (Redis 6.2 or later), so no two readers anywhere get it.
//!   Their keys also name the recipe that made them ([`recipe_fingerprint`]), and a shared bitmap
//!   per recipe (`prepfs:1:{FP}:waiting:RECIPE`) says which samples have one waiting: each mount
//!   reads it once a second, and asks for an output only where its bit is set.
//! - **Faults**: every call is bounded (connect, read and write: [`TIMEOUT`]). A connection-level
//!   failure (refused, timed out, dropped) marks the tier down: logged once per outage, and while
//!   down every lookup is a miss and every write is dropped at no cost, except one probe at most
//!   once per [`RETRY_EVERY`] (a lookup's, or the writer's PING when nothing else calls); its
//!   success brings the tier back (logged). A server's error reply
//!   (for example `OOM` past its `maxmemory`) is counted, not an outage. Requests never fail for
//!   the remote tier.
//! - **Writes** never wait on the request path: the tier's write queue (`super::queue`: bounded
//!   by jobs and by bytes; a write that does not fit is dropped and counted) feeds one writer
//!   thread (`prepfs-remote-writer`), which sends what is queued in one pipeline (`SET NX` each). [`RemoteTier::close`] (the end of a mount) writes
//!   out what is queued within the timeouts and joins the writer.
//! - **Budget**: the writer stops writing while the bytes this mount wrote, less what it deleted
//!   or claimed, or the server's `used_memory` (sampled at most once a second) would pass `size`.
//!   Across machines the real bound is the server's `maxmemory` with an eviction policy
//!   (`allkeys-lru`), which the operator sets; prepfs sets no TTLs.
//!
//! - **Redis Cluster** (`redis+cluster://HOST:PORT,HOST:PORT,...`): the same keys and values;
//!   each sample's forms share a slot (the hash tag), so a lookup is still one `MGET` on one
//!   node, and the writer's pipeline is split by node (`server.rs`). The client follows `MOVED` and
//!   `ASK` within [`CLUSTER_RETRIES`] retries. The budget then counts this mount's own bytes only
//!   (`used_memory` is per node): the nodes' `maxmemory` bounds the rest.
//!
//! - **Shared jobs** (`jobs.rs`): a job name's taken bits and epoch, claimed by server-side
//!   scripts, for `crate::sampling`'s shared jobs.
//! - **Work for other machines' CPUs** ([`work`]): the queue between mounts that ask for
//!   outputs and the `prepfs worker`s that make them (a stream with a consumer group).
//!
//! Lookups run on the requesting thread, inside the tiers' single flight, so a remote round trip
//! (bounded by the timeout) stands where a source read would. Connections are pooled; the pool is
//! locked only to take or give back a connection, never across a call.

mod access;
mod auth;
mod gauge;
mod health;
mod index;
mod jobs;
mod network;
mod server;
#[cfg(test)]
mod tests;
mod value;
pub mod work;
mod writer;

pub use access::{Access, RemoteError};
pub use auth::{ValueKey, HOW_TO_MAKE};
pub use jobs::RemoteJobs;
pub use network::Network;
pub use gauge::RemoteGauge;
pub use prepfs_base::escape::redacted;
pub use server::server_urls;
pub use value::{
    dataset_fingerprint, held_key_of, key_of, recipe_fingerprint, waiting_key_of, RemoteKind, HEADER_LEN,
};

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::entry::{Damage, Dropped};
use crate::form::Origin;
use crate::lower::{LowerHit, LowerKey, LowerTier, Payload, Put};
use crate::queue::{self, WriteQueue};
use crate::SampleStatus;
use prepfs_pixels::rgb::Rgb;
use prepfs_source::catalog::FileId;
use prepfs_source::Identity;
use prepfs_base::sync::{LockExt, Mutex};

use health::utc;
use server::{Conn, Server};
use value::decode_value;
use writer::{WriteJob, QUEUE_BYTES, QUEUE_JOBS};

/// Every remote call's bound: connecting (with the handshake), sending, and each reply.
pub(crate) const TIMEOUT: Duration = Duration::from_millis(200);
/// While down, one probe at most this often.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How often the writer reads the shared index of held samples (other mounts' writes).
pub(crate) const HELD_READ_EVERY: Duration = Duration::from_secs(1);
/// A cluster call's retries (redirects, a node's failover): each within [`TIMEOUT`].
pub(crate) const CLUSTER_RETRIES: u32 = 2;

/// The state shared by request threads and the writer.
struct Inner {
    server: Server,
    /// What values are authenticated with.
    value_key: ValueKey,
    url: String,
    size: u64,
    /// Idle connections, each with the generation it was made in.
    pool: Mutex<Vec<(u64, Conn)>>,
    /// Bumped at each outage: connections of an older generation are not pooled again.
    generation: AtomicU64,
    down: AtomicBool,
    down_since: Mutex<Option<SystemTime>>,
    /// While down: the next probe's time, in ms since `epoch`.
    next_try_ms: AtomicU64,
    epoch: Instant,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Lookups and writes skipped because the tier was down.
    skipped: AtomicU64,
    writes: AtomicU64,
    /// Samples' entries (encoded bytes or decoded pixels; not augmented outputs) this mount
    /// wrote or was served, their bytes, and how many were decoded pixels: what the tier holds
    /// of a sample, for the planner.
    entries_seen: AtomicU64,
    entry_bytes: AtomicU64,
    decoded_seen: AtomicU64,
    /// Nanoseconds the lookups that hit took (the round trip and the transfer).
    hit_nanos: AtomicU64,
    bytes_written: AtomicU64,
    /// Bytes this mount removed from the server (damaged values deleted, outputs claimed).
    bytes_freed: AtomicU64,
    claims: AtomicU64,
    errors: AtomicU64,
    outages: AtomicU64,
    /// Values dropped as damaged, and apart those intact but failing their MAC (forged, or
    /// another secret's).
    dropped: Dropped,
    dropped_writes: AtomicU64,
    over_size: AtomicU64,
    /// The server's `used_memory`, and when it was sampled (ms since `epoch`; 0: never).
    server_used: AtomicU64,
    server_used_at_ms: AtomicU64,
    /// The shared index of samples held (`prepfs:1:{FP}:held`, a bitmap by catalog id), and
    /// the samples' status bytes its bits are copied into ([`HELD_REMOTE`]), for
    /// opportunistic sampling. `None`: not kept (a tier without a cache beside it).
    held_key: Vec<u8>,
    status: Option<Arc<SampleStatus>>,
    /// When the writer last read the shared index (ms since `epoch`).
    held_read_at_ms: AtomicU64,
    /// Shared jobs' claims answered by the server (`jobs`).
    job_calls: AtomicU64,
    /// The shared index of augmented outputs waiting for a claimer (made by this mount's
    /// recipe), and this mount's copy of it, read with the held index: a miss asks the server
    /// only for a sample whose bit is set. `None`: outputs are neither offered nor claimed.
    waiting_key: Vec<u8>,
    waiting: Option<prepfs_base::bitset::Bitset>,
    /// The network to the server, measured for the planner (`network.rs`).
    network: network::NetworkState,
}

impl Inner {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Counts a sample's entry of `len` bytes written or served (see `entries_seen`).
    fn saw_entry(&self, len: u64, decoded: bool) {
        self.entries_seen.fetch_add(1, Ordering::Relaxed);
        self.entry_bytes.fetch_add(len, Ordering::Relaxed);
        if decoded {
            self.decoded_seen.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Checks a value read under `key`; a damaged or forged one is deleted (if still there) and
    /// counted.
    fn check(&self, kind: RemoteKind, key: &[u8], value: Vec<u8>, delete: bool) -> Option<((u32, u32), Vec<u8>)> {
        let len = value.len() as u64;
        match decode_value(&self.value_key, kind, key, value) {
            Ok(v) => Some(v),
            Err(why) => {
                self.dropped.count(&why);
                if matches!(why, Damage::Forged) {
                    prepfs_base::warn_limited!(
                        "remote-forged",
                        key = %prepfs_base::escape::escaped_bytes(key),
                        "value in the remote cache tier fails its MAC (forged, or written with another secret_file); dropped, not served"
                    );
                } else {
                    prepfs_base::warn_limited!(
                        "remote-damaged",
                        key = %prepfs_base::escape::escaped_bytes(key),
                        why = %why,
                        "damaged value in the remote cache tier; dropped, not served"
                    );
                }
                if delete {
                    if let Some(removed) = self.with_conn(|c| redis::cmd("DEL").arg(key).query::<u64>(c)) {
                        if removed > 0 {
                            self.bytes_freed.fetch_add(len, Ordering::Relaxed);
                        }
                    }
                } else {
                    self.bytes_freed.fetch_add(len, Ordering::Relaxed);
                }
                None
            }
        }
    }
}

/// The remote tier: see the module documentation.
pub struct RemoteTier {
    inner: Arc<Inner>,
    fingerprint: u64,
    /// What this mount's augmented outputs are ([`recipe_fingerprint`]).
    recipe: u64,
    queue: WriteQueue<WriteJob>,
}

impl RemoteTier {
    /// The tier on the server at `url` (`redis://HOST:PORT[/DB]`, or a cluster's
    /// `redis+cluster://HOST:PORT,...`; `rediss` for TLS) reached and trusted with `access`,
    /// within `size` bytes, for the dataset `fingerprint`.
    /// Connects lazily: a server down at mount (or refusing the password) is an outage like any.
    /// `status`: the status bytes the shared index of held samples is copied into.
    pub fn open(url: &str, access: &Access, size: u64, fingerprint: u64, recipe: u64, status: Option<Arc<SampleStatus>>) -> Result<RemoteTier, RemoteError> {
        let server = Server::open(url, access).map_err(|why| RemoteError::Url { url: redacted(url), why })?;
        let inner = Arc::new(Inner {
            server,
            value_key: access.key.clone(),
            url: redacted(url),
            size,
            pool: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            down: AtomicBool::new(false),
            down_since: Mutex::new(None),
            next_try_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            entries_seen: AtomicU64::new(0),
            entry_bytes: AtomicU64::new(0),
            decoded_seen: AtomicU64::new(0),
            hit_nanos: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            bytes_freed: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            outages: AtomicU64::new(0),
            dropped: Dropped::default(),
            dropped_writes: AtomicU64::new(0),
            over_size: AtomicU64::new(0),
            server_used: AtomicU64::new(0),
            server_used_at_ms: AtomicU64::new(0),
            held_key: held_key_of(fingerprint),
            status: status.clone(),
            held_read_at_ms: AtomicU64::new(0),
            job_calls: AtomicU64::new(0),
            waiting_key: waiting_key_of(fingerprint, recipe),
            waiting: status.as_ref().map(|s| prepfs_base::bitset::Bitset::new(s.len())),
            network: network::NetworkState::new(url, fingerprint, size),
        });
        let for_writer = Arc::clone(&inner);
        let queue = WriteQueue::start("prepfs-remote-writer", QUEUE_JOBS, QUEUE_BYTES, move |jobs| for_writer.run_writer(jobs))
            .map_err(RemoteError::Writer)?;
        Ok(RemoteTier { inner, fingerprint, recipe, queue })
    }

    /// The store of the dataset's jobs shared by the mounts on this tier's server; a job's keys
    /// outlive its last claim by `ttl`.
    pub fn jobs(&self, ttl: Duration) -> RemoteJobs {
        RemoteJobs::new(Arc::clone(&self.inner), self.fingerprint, ttl)
    }

    /// The key of one form of a sample's version (relative path and identity).
    pub fn key(&self, rel_path: &Path, version: &Identity, kind: RemoteKind) -> Vec<u8> {
        key_of(self.fingerprint, self.recipe, rel_path, version, kind)
    }

    /// The sample's decoded pixels, else its encoded bytes, in one round trip; a damaged value
    /// is dropped and reads as a miss. `None` also while the tier is down.
    pub fn get(&self, id: FileId, rel_path: &Path, version: &Identity) -> Option<LowerHit> {
        let inner = &self.inner;
        let dkey = self.key(rel_path, version, RemoteKind::Decoded);
        let ekey = self.key(rel_path, version, RemoteKind::Encoded);
        let started = Instant::now();
        let values = inner.with_conn(|c| redis::cmd("MGET").arg(&dkey[..]).arg(&ekey[..]).query::<Vec<Option<Vec<u8>>>>(c))?;
        let took = started.elapsed().as_nanos() as u64;
        let received: usize = values.iter().flatten().map(Vec::len).sum();
        inner.network.bytes_received.fetch_add(received as u64, Ordering::Relaxed);
        let mut values = values.into_iter();
        let (decoded, encoded) = (values.next().flatten(), values.next().flatten());
        let hit = decoded
            .and_then(|v| inner.check(RemoteKind::Decoded, &dkey, v, true))
            .map(|((width, height), pixels)| LowerHit::Pixels(Rgb { width, height, pixels }))
            .or_else(|| encoded.and_then(|v| inner.check(RemoteKind::Encoded, &ekey, v, true)).map(|(_, b)| LowerHit::Bytes(b)));
        if let (Some(status), true) = (&inner.status, hit.is_some()) {
            status.mark_remote(id);
        }
        match &hit {
            Some(LowerHit::Pixels(p)) => inner.saw_entry((HEADER_LEN + p.pixels.len()) as u64, true),
            Some(LowerHit::Bytes(b)) => inner.saw_entry((HEADER_LEN + b.len()) as u64, false),
            None => {}
        }
        if hit.is_some() {
            inner.hit_nanos.fetch_add(took, Ordering::Relaxed);
        }
        let counter = if hit.is_some() { &inner.hits } else { &inner.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// Takes the sample's waiting augmented output, if the shared index says one waits: `GETDEL`
    /// (and its index bit cleared), so exactly one reader anywhere gets it.
    /// No round trip where none waits. A damaged one is gone with the take and reads as a miss.
    pub(crate) fn claim_augmented(&self, id: FileId, rel_path: &Path, version: &Identity) -> Option<Vec<u8>> {
        let inner = &self.inner;
        let waiting = inner.waiting.as_ref()?;
        if !waiting.clear(id) {
            return None;
        }
        let key = self.key(rel_path, version, RemoteKind::Augmented);
        // Two calls, not a pipeline: in a cluster the output and the index live in two slots.
        let value = inner.with_conn(|c| redis::cmd("GETDEL").arg(&key[..]).query::<Option<Vec<u8>>>(c)).flatten();
        inner.with_conn(|c| redis::cmd("SETBIT").arg(&inner.waiting_key[..]).arg(id).arg(0).query::<i64>(c));
        let Some(value) = value else {
            inner.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let len = value.len() as u64;
        inner.network.bytes_received.fetch_add(len, Ordering::Relaxed);
        let out = inner.check(RemoteKind::Augmented, &key, value, false).map(|(_, b)| b);
        if out.is_some() {
            inner.bytes_freed.fetch_add(len, Ordering::Relaxed);
            inner.claims.fetch_add(1, Ordering::Relaxed);
            inner.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            inner.misses.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    /// Queues the sample's source bytes for writing; returns whether they were queued.
    #[cfg(test)]
    pub(crate) fn put_encoded(&self, id: FileId, rel_path: &Path, version: &Identity, bytes: Arc<[u8]>) -> bool {
        self.enqueue(id, RemoteKind::Encoded, rel_path, version, Payload::Bytes(bytes)) == Put::Queued
    }

    /// Queues the sample's decoded pixels (uint8 RGB) for writing.
    #[cfg(test)]
    pub(crate) fn put_decoded(&self, id: FileId, rel_path: &Path, version: &Identity, pixels: Arc<Rgb>) -> bool {
        self.enqueue(id, RemoteKind::Decoded, rel_path, version, Payload::Pixels(pixels)) == Put::Queued
    }

    /// Queues a fresh augmented output for the next claimer anywhere (kept only when none waits;
    /// nothing without the shared index of waiting outputs).
    pub(crate) fn put_augmented(&self, id: FileId, rel_path: &Path, version: &Identity, out: Arc<[u8]>) -> bool {
        if self.inner.waiting.is_none() {
            return false;
        }
        self.enqueue(id, RemoteKind::Augmented, rel_path, version, Payload::Bytes(out)) == Put::Queued
    }

    fn enqueue(&self, id: FileId, kind: RemoteKind, rel_path: &Path, version: &Identity, payload: Payload) -> Put {
        let inner = &self.inner;
        // Down: dropped at no cost (the probe belongs to lookups and the writer's batches).
        if inner.down.load(Ordering::Acquire) {
            inner.skipped.fetch_add(1, Ordering::Relaxed);
            return Put::Off;
        }
        let len = payload.data().len() as u64;
        if (HEADER_LEN as u64 + len) > inner.size {
            inner.over_size.fetch_add(1, Ordering::Relaxed);
            return Put::NoRoom;
        }
        let job = WriteJob { id, kind, key: self.key(rel_path, version, kind), payload };
        match self.queue.push(job) {
            Ok(()) => Put::Queued,
            Err(why) => {
                inner.dropped_writes.fetch_add(1, Ordering::Relaxed);
                match why {
                    queue::Refused::Full => Put::NoRoom,
                    queue::Refused::Closed => Put::Off,
                }
            }
        }
    }

    /// Deletes the sample's encoded and decoded values (not a waiting output: that is a
    /// claimer's). Nothing while down.
    pub fn remove(&self, rel_path: &Path, version: &Identity) {
        let (dkey, ekey) = (self.key(rel_path, version, RemoteKind::Decoded), self.key(rel_path, version, RemoteKind::Encoded));
        // One call: the hash tag puts both keys in one slot of a cluster.
        self.inner.with_conn(|c| redis::cmd("DEL").arg(&dkey[..]).arg(&ekey[..]).query::<u64>(c));
    }

    /// Waits (up to `limit`) until every queued write is sent; returns whether it is.
    pub fn flush(&self, limit: Duration) -> bool {
        self.queue.flush(limit)
    }

    /// The end of a mount: closes the queue, lets the writer send what is queued (each call
    /// within the timeouts; nothing while down) and joins it.
    pub fn close(&self) {
        if self.queue.close() {
            self.inner.leave_network();
        }
    }

    /// A reader of what the tier measures for the planner.
    pub fn gauge(&self) -> RemoteGauge {
        RemoteGauge(Arc::clone(&self.inner))
    }

    /// Whether the tier is up (false from a failed call until a probe succeeds).
    pub(crate) fn is_up(&self) -> bool {
        !self.inner.down.load(Ordering::Acquire)
    }

    /// Figures for stats (`cache.remote`).
    pub fn stats(&self) -> serde_json::Value {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let i = &self.inner;
        let state = match *i.down_since.lock_or_recover() {
            Some(since) if !self.is_up() => format!("down since {}", utc(since)),
            _ => "up".to_string(),
        };
        json!({
            "url": i.url,
            "state": state,
            "fingerprint": format!("{:016x}", self.fingerprint),
            "size": i.size,
            "hits": get(&i.hits),
            "misses": get(&i.misses),
            "skipped_while_down": get(&i.skipped),
            "claims": get(&i.claims),
            "writes": get(&i.writes),
            "bytes_written": get(&i.bytes_written),
            "bytes_freed": get(&i.bytes_freed),
            "server_used_memory": get(&i.server_used),
            "errors": get(&i.errors),
            "outages": get(&i.outages),
            "damaged_dropped": i.dropped.damaged(),
            // Values that failed their MAC (forged, or written with another secret): dropped.
            "forged": i.dropped.forged(),
            "dropped_writes": get(&i.dropped_writes),
            "over_size": get(&i.over_size),
            "pending_writes": self.queue.pending(),
            // Samples this mount knows the tier holds (the shared index): what opportunistic
            // sampling prefers after the local forms.
            "samples_known_held": i.status.as_ref().map_or(0, |s| s.count_held(crate::HELD_REMOTE)),
            // Shared jobs' claims the server answered.
            "job_claims": get(&i.job_calls),
            // Augmented outputs this mount knows wait for a claimer (its recipe's).
            "outputs_waiting": i.waiting.as_ref().map_or(0, |w| w.count()),
            "network": i.network_stats(),
        })
    }
}

/// The remote tier in the chain below memory (its augmented outputs, use-once, are not: they
/// are offered and claimed through [`RemoteTier`] itself).
impl LowerTier for RemoteTier {
    fn origin(&self) -> Origin {
        Origin::Remote
    }

    fn name(&self) -> &'static str {
        "remote"
    }

    fn get(&self, key: &LowerKey<'_>) -> Option<LowerHit> {
        RemoteTier::get(self, key.id, key.rel, key.version)
    }

    fn put(&self, key: &LowerKey<'_>, payload: Payload) -> Put {
        let kind = match payload {
            Payload::Bytes(_) => RemoteKind::Encoded,
            Payload::Pixels(_) => RemoteKind::Decoded,
        };
        self.enqueue(key.id, kind, key.rel, key.version, payload)
    }

    fn remove(&self, key: &LowerKey<'_>) {
        RemoteTier::remove(self, key.rel, key.version);
    }

    fn flush(&self, limit: Duration) -> bool {
        RemoteTier::flush(self, limit)
    }

    fn close(&self) {
        RemoteTier::close(self);
    }

    fn stats(&self) -> serde_json::Value {
        RemoteTier::stats(self)
    }
}

impl Drop for RemoteTier {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
pub(crate) use prepfs_test_servers as redis_server;

impl crate::exchange::OutputExchange for RemoteTier {
    fn is_open(&self) -> bool {
        self.is_up()
    }
    fn claim(&self, key: &crate::lower::LowerKey<'_>) -> Option<Arc<[u8]>> {
        self.claim_augmented(key.id, key.rel, key.version).map(Into::into)
    }
    fn offer(&self, key: &crate::lower::LowerKey<'_>, out: Arc<[u8]>) -> bool {
        self.put_augmented(key.id, key.rel, key.version, out)
    }
}
