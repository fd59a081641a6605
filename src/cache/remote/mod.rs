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
//!   node, and the writer's pipeline is split by node ([`Conn`]). The client follows `MOVED` and
//!   `ASK` within [`CLUSTER_RETRIES`] retries. The budget then counts this mount's own bytes only
//!   (`used_memory` is per node): the nodes' `maxmemory` bounds the rest.
//!
//! - **Shared jobs** (`jobs.rs`): a job name's taken bits and epoch, claimed by server-side
//!   scripts, for `crate::sampling`'s shared jobs.
//!
//! Lookups run on the requesting thread, inside the tiers' single flight, so a remote round trip
//! (bounded by the timeout) stands where a source read would. Connections are pooled; the pool is
//! locked only to take or give back a connection, never across a call.

mod auth;
mod jobs;
mod network;

pub(crate) use auth::{SecretError, ValueKey, HOW_TO_MAKE};

pub(crate) use jobs::RemoteJobs;
pub(crate) use network::Network;

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::cache::entry::{self, Damage, Dropped, Format};
use crate::cache::fill::Origin;
use crate::cache::lower::{LowerHit, LowerKey, LowerTier, Payload, Put};
use crate::cache::queue::{self, Jobs, Taken, WriteQueue};
use crate::cache::SampleStatus;
use crate::shared::{fnv1a64, Rgb};
use crate::source::catalog::FileId;
use crate::source::catalog::Catalog;
use crate::source::Identity;
use crate::sync::{LockExt, Mutex};

/// Every remote call's bound: connecting (with the handshake), sending, and each reply.
pub(crate) const TIMEOUT: Duration = Duration::from_millis(200);
/// While down, one probe at most this often.
pub(crate) const RETRY_EVERY: Duration = Duration::from_secs(1);
/// Bytes of the header before every payload.
pub(crate) const HEADER_LEN: usize = CHECKED_LEN + auth::MAC_LEN;
/// Bytes of the header before its MAC (the entry codec's header: what the MAC covers of it).
const CHECKED_LEN: usize = entry::HEADER_LEN;
/// The remote tier's header. Version 2: the MAC (version 1 values, unauthenticated, are refused
/// as damaged).
const FORMAT: Format = Format { magic: *b"PFRM", version: 2 };
/// The writer's queue: at most this many jobs ...
const QUEUE_JOBS: usize = 256;
/// ... holding at most this many payload bytes.
const QUEUE_BYTES: u64 = 64 << 20;
/// One pipeline of writes carries at most this many payload bytes.
const BATCH_BYTES: u64 = 8 << 20;
/// Idle connections kept for lookups.
const POOL_MAX: usize = 32;
/// How often the writer reads the shared index of held samples (other mounts' writes).
pub(crate) const HELD_READ_EVERY: Duration = Duration::from_secs(1);
/// A cluster call's retries (redirects, a node's failover): each within [`TIMEOUT`].
pub(crate) const CLUSTER_RETRIES: u32 = 2;
/// The schemes of a Redis Cluster URL (`redis+cluster://HOST:PORT,HOST:PORT,...`; with TLS,
/// `rediss+cluster://`), each with its nodes' scheme.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [("redis+cluster://", "redis://"), ("rediss+cluster://", "rediss://")];

/// The server(s) a `cache.remote.url` names, each as a `redis://` URL the client accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerUrls {
    /// `redis[s]://[USER:PASSWORD@]HOST:PORT[/DB]`.
    Single(String),
    /// `redis[s]+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,...`: the seed nodes
    /// (credentials apply to each).
    Cluster(Vec<String>),
}

/// Parses a `cache.remote.url` (the one place its form is decided; the config checks it here).
pub(crate) fn server_urls(url: &str) -> Result<ServerUrls, String> {
    if let Some((rest, scheme)) = CLUSTER_SCHEMES.iter().find_map(|(cluster, node)| url.strip_prefix(cluster).map(|rest| (rest, node))) {
        let (auth, hosts) = match rest.rfind('@') {
            Some(at) => (&rest[..=at], &rest[at + 1..]),
            None => ("", rest),
        };
        let nodes: Vec<String> = hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).map(|h| format!("{scheme}{auth}{h}")).collect();
        if nodes.is_empty() {
            return Err("a cluster URL names its nodes: redis+cluster://HOST:PORT,HOST:PORT,...".into());
        }
        for node in &nodes {
            if node[scheme.len()..].contains('/') {
                return Err("a cluster has no databases: no /DB after a node".into());
            }
            redis::Client::open(node.as_str()).map_err(|e| format!("node `{}`: {e}", redacted(node)))?;
        }
        return Ok(ServerUrls::Cluster(nodes));
    }
    if !url.starts_with("redis://") && !url.starts_with("rediss://") {
        return Err("a single server's URL, redis://HOST:PORT[/DB] (rediss:// for TLS), or a cluster's, redis+cluster://HOST:PORT,HOST:PORT,... (rediss+cluster:// for TLS)".into());
    }
    redis::Client::open(url).map_err(|e| e.to_string())?;
    Ok(ServerUrls::Single(url.to_string()))
}

/// The client of the tier's server: one server, or a cluster.
enum Server {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

impl Server {
    fn open(url: &str, access: &Access) -> Result<Server, String> {
        let certs = || redis::TlsCertificates { client_tls: None, root_cert: access.tls_ca.clone() };
        Ok(match server_urls(url)? {
            ServerUrls::Single(url) => {
                let mut info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| e.to_string())?;
                if let Some(password) = &access.password {
                    let settings = info.redis_settings().clone().set_password(password);
                    info = info.set_redis_settings(settings);
                }
                let client = match access.tls_ca {
                    Some(_) => redis::Client::build_with_tls(info, certs()),
                    None => redis::Client::open(info),
                };
                Server::Single(client.map_err(|e| e.to_string())?)
            }
            ServerUrls::Cluster(nodes) => {
                let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
                    .connection_timeout(TIMEOUT)
                    .response_timeout(TIMEOUT)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(10)
                    .max_retry_wait(50);
                if let Some(password) = &access.password {
                    builder = builder.password(password);
                }
                if access.tls_ca.is_some() {
                    builder = builder.certs(certs());
                }
                Server::Cluster(builder.build().map_err(|e| e.to_string())?)
            }
        })
    }

    /// A new connection, every call on it bounded by [`TIMEOUT`].
    fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Server::Single(client) => {
                let conn = client.get_connection_with_timeout(TIMEOUT)?;
                conn.set_read_timeout(Some(TIMEOUT))?;
                conn.set_write_timeout(Some(TIMEOUT))?;
                Ok(Conn::Single(conn))
            }
            Server::Cluster(client) => Ok(Conn::Cluster(Box::new(client.get_connection()?))),
        }
    }
}

/// A connection to the tier: to one server, or to a cluster (one per node inside, routed by
/// slot). Single commands go through [`redis::ConnectionLike`]; a pipeline of writes through
/// [`Conn::set_nx_all`], which a cluster splits by node.
enum Conn {
    Single(redis::Connection),
    /// Boxed: a cluster connection (with its TLS settings) is several times a single one.
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Conn {
    /// `SET key value NX` for each item, in one pipeline (one per node in a cluster): each
    /// reply in order (`Nil` where the key existed).
    fn set_nx_all(&mut self, items: &[(&[u8], Vec<u8>)]) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            Conn::Single(c) => {
                let mut pipe = redis::pipe();
                for (key, value) in items {
                    pipe.cmd("SET").arg(*key).arg(&value[..]).arg("NX");
                }
                pipe.query(c)
            }
            Conn::Cluster(c) => {
                let mut pipe = redis::cluster::cluster_pipe();
                for (key, value) in items {
                    pipe.cmd("SET").arg(*key).arg(&value[..]).arg("NX");
                }
                pipe.query(c)
            }
        }
    }
}

impl redis::ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }
    fn req_packed_commands(&mut self, cmd: &[u8], offset: usize, count: usize) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }
    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        match self {
            Conn::Single(c) => c.req_command(cmd),
            Conn::Cluster(c) => c.req_command(cmd),
        }
    }
    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
    fn check_connection(&mut self) -> bool {
        match self {
            Conn::Single(c) => c.check_connection(),
            Conn::Cluster(c) => c.check_connection(),
        }
    }
    fn is_open(&self) -> bool {
        match self {
            Conn::Single(c) => c.is_open(),
            Conn::Cluster(c) => c.is_open(),
        }
    }
}

/// A remote tier that cannot be set up (its URL refused by the client, a file it names
/// unusable).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoteError {
    #[error("cache.remote {url}: {why}")]
    Url { url: String, why: String },
    #[error("cache.remote.{key}: {source}")]
    File { key: &'static str, source: SecretError },
    #[error("cache.remote: cannot start the writer thread: {0}")]
    Writer(#[source] io::Error),
}

/// What a mount needs of the tier besides its URL: the key values are authenticated with, the
/// server's password (`password_file`; else the URL's, if any) and the roots TLS trusts
/// (`tls_ca_file`; else the system's). Its `Debug` shows neither secret.
#[derive(Clone)]
pub(crate) struct Access {
    pub(crate) key: ValueKey,
    pub(crate) password: Option<String>,
    pub(crate) tls_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").field("password", &self.password.as_ref().map(|_| "***")).field("tls_ca", &self.tls_ca.is_some()).finish()
    }
}

impl Access {
    /// Only the key (the URL's password, if any; the system's roots).
    #[cfg(test)]
    pub(crate) fn with_key(key: ValueKey) -> Access {
        Access { key, password: None, tls_ca: None }
    }

    /// Reads the files `cache.remote` names: each checked as [`auth`] says (the CA file is
    /// public: only read).
    pub(crate) fn load(config: &crate::config::RemoteConfig) -> Result<Access, RemoteError> {
        let key = ValueKey::load(&config.secret_file).map_err(|source| RemoteError::File { key: "secret_file", source })?;
        let password = match &config.password_file {
            Some(path) => Some(auth::read_password(path).map_err(|source| RemoteError::File { key: "password_file", source })?),
            None => None,
        };
        let tls_ca = match &config.tls_ca_file {
            Some(path) => Some(
                std::fs::read(path)
                    .map_err(|e| RemoteError::File { key: "tls_ca_file", source: SecretError::Read { path: path.clone(), source: e } })?,
            ),
            None => None,
        };
        Ok(Access { key, password, tls_ca })
    }
}

/// The forms the remote tier holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoteKind {
    Encoded,
    Decoded,
    Augmented,
}

impl RemoteKind {
    /// Its kind in the entry header.
    fn entry(self) -> entry::Kind {
        match self {
            RemoteKind::Encoded => entry::Kind::Encoded,
            RemoteKind::Decoded => entry::Kind::Decoded,
            RemoteKind::Augmented => entry::Kind::Augmented,
        }
    }
    fn letter(self) -> u8 {
        match self {
            RemoteKind::Encoded => b'e',
            RemoteKind::Decoded => b'd',
            RemoteKind::Augmented => b'a',
        }
    }
}

/// The dataset's fingerprint: the catalog's relative paths (directories and files, in the
/// catalog's sorted order), hashed once at mount. Sizes and mtimes enter each key instead (see
/// the module documentation), so mounting stats no file and one changed file leaves the other
/// samples' entries valid.
pub(crate) fn dataset_fingerprint(catalog: &Catalog) -> u64 {
    let root = catalog.root();
    let dirs: Vec<Vec<u8>> = (0..catalog.dir_count() as u32)
        .map(|d| {
            let path = catalog.dir_path(d);
            path.strip_prefix(root).unwrap_or(&path).as_os_str().as_bytes().to_vec()
        })
        .collect();
    let mut h: u64 = fnv1a64(&[b"prepfs-dataset-1", &(catalog.file_count() as u64).to_le_bytes()]);
    for file in 0..catalog.file_count() as u32 {
        let dir = dirs.get(catalog.file_dir(file) as usize).map_or(&[][..], |d| &d[..]);
        h = fnv1a64(&[&h.to_le_bytes(), dir, b"/", catalog.file_name(file).as_bytes(), &[0]]);
    }
    h
}

/// The key of the dataset's shared index of held samples: a bitmap by catalog id (the
/// fingerprint's hash tag puts it in one cluster slot).
pub(crate) fn held_key_of(fingerprint: u64) -> Vec<u8> {
    format!("prepfs:1:{{{fingerprint:016x}}}:held").into_bytes()
}

/// The key of the dataset's shared index of augmented outputs waiting for a claimer, made by
/// `recipe` (a bitmap by catalog id).
pub(crate) fn waiting_key_of(fingerprint: u64, recipe: u64) -> Vec<u8> {
    format!("prepfs:1:{{{fingerprint:016x}}}:waiting:{recipe:016x}").into_bytes()
}

/// The fingerprint of what an augmented output is: the augmentations and the output format.
/// Mounts whose recipes differ never take each other's outputs.
pub(crate) fn recipe_fingerprint(augment: &impl serde::Serialize, output: &impl serde::Serialize) -> u64 {
    let text = serde_json::to_vec(&(augment, output)).unwrap_or_default();
    fnv1a64(&[b"prepfs-recipe-1", &text])
}

/// The key of one form of one version of a sample (see the module documentation); an
/// augmented output's also names the `recipe` that made it.
pub(crate) fn key_of(fingerprint: u64, recipe: u64, rel_path: &Path, version: &Identity, kind: RemoteKind) -> Vec<u8> {
    let rel = rel_path.as_os_str().as_bytes();
    let mut key = Vec::with_capacity(rel.len() + 96);
    key.extend_from_slice(format!("prepfs:1:{{{fingerprint:016x}:{}:{}:", version.len, version.mtime_ns).as_bytes());
    key.extend_from_slice(rel);
    key.extend_from_slice(b"}:");
    key.push(kind.letter());
    if kind == RemoteKind::Augmented {
        key.extend_from_slice(format!(":{recipe:016x}").as_bytes());
    }
    key
}

/// A value for `key`: the header (its MAC under `mac`), then `payload`.
pub(crate) fn encode_value(mac: &ValueKey, kind: RemoteKind, key: &[u8], payload: &[u8], dims: (u32, u32)) -> Vec<u8> {
    let head = entry::header(FORMAT, kind.entry(), fnv1a64(&[key]), payload, dims);
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(&head);
    v.extend_from_slice(&mac.mac(key, &head, payload));
    v.extend_from_slice(payload);
    v
}

/// Checks a value read under `key`, its MAC under `mac` last; returns its (width, height) and
/// the payload (the header taken off in place).
fn decode_value(mac: &ValueKey, kind: RemoteKind, key: &[u8], mut value: Vec<u8>) -> Result<((u32, u32), Vec<u8>), Damage> {
    if value.len() < HEADER_LEN {
        return Err(Damage::Short);
    }
    let (h, payload) = value.split_at(HEADER_LEN);
    let head = entry::head_of(h)?;
    let header = entry::check(head, payload, FORMAT, kind.entry(), fnv1a64(&[key]))?;
    if !mac.verify(key, head, payload, &h[CHECKED_LEN..]) {
        return Err(Damage::Forged);
    }
    value.drain(..HEADER_LEN);
    Ok(((header.width, header.height), value))
}

struct WriteJob {
    /// The sample (its catalog id: the same on every mount of the dataset).
    id: FileId,
    kind: RemoteKind,
    key: Vec<u8>,
    payload: Payload,
}

impl queue::Job for WriteJob {
    fn bytes(&self) -> u64 {
        self.payload.data().len() as u64
    }
}

/// Whether an error is the connection's (an outage) rather than the server's reply.
fn is_outage(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_unrecoverable_error()
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The URL as shown in stats, logs and the printed config: a password replaced by `***`.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

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
    waiting: Option<crate::sampling::Bitset>,
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

    /// Whether a call may go out now: always while up; while down, for one caller per
    /// [`RETRY_EVERY`] (the probe).
    fn usable(&self) -> bool {
        if !self.down.load(Ordering::Acquire) {
            return true;
        }
        let now = self.now_ms();
        let next = self.next_try_ms.load(Ordering::Acquire);
        now >= next
            && self
                .next_try_ms
                .compare_exchange(next, now + RETRY_EVERY.as_millis() as u64, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    fn mark_up(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            let since = self.down_since.lock_or_recover().take();
            let secs = since.and_then(|s| s.elapsed().ok()).map_or(0.0, |d| d.as_secs_f64());
            tracing::info!(url = %self.url, down_for_s = secs, "remote cache tier is back");
        }
    }

    fn mark_down(&self, e: &redis::RedisError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.next_try_ms.store(self.now_ms() + RETRY_EVERY.as_millis() as u64, Ordering::Release);
        let stale = std::mem::take(&mut *self.pool.lock_or_recover());
        drop(stale);
        if !self.down.swap(true, Ordering::AcqRel) {
            *self.down_since.lock_or_recover() = Some(SystemTime::now());
            self.outages.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                url = %self.url,
                error = %e,
                "remote cache tier is down; serving from the local tiers and the source, retrying once a second"
            );
        }
    }

    /// Runs `call` on a pooled (or new) connection if the tier is usable now. `None`: skipped
    /// (down) or failed (counted; an outage marks the tier down).
    fn with_conn<T>(&self, call: impl FnOnce(&mut Conn) -> redis::RedisResult<T>) -> Option<T> {
        if !self.usable() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let pooled = self.pool.lock_or_recover().pop();
        let (generation, mut conn) = match pooled {
            Some(c) => c,
            None => {
                let generation = self.generation.load(Ordering::Acquire);
                match self.server.connect() {
                    Ok(conn) => (generation, conn),
                    Err(e) => {
                        self.mark_down(&e);
                        return None;
                    }
                }
            }
        };
        match call(&mut conn) {
            Ok(v) => {
                self.mark_up();
                self.give_back(generation, conn);
                Some(v)
            }
            Err(e) if is_outage(&e) => {
                self.mark_down(&e);
                None
            }
            Err(e) => {
                // The server answered (an error reply): the connection is sound.
                self.errors.fetch_add(1, Ordering::Relaxed);
                crate::warn_limited!("remote-reply", url = %self.url, error = %e, "remote cache tier refused a call");
                self.give_back(generation, conn);
                None
            }
        }
    }

    fn give_back(&self, generation: u64, conn: Conn) {
        if generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        let mut pool = self.pool.lock_or_recover();
        if pool.len() < POOL_MAX {
            pool.push((generation, conn));
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
                    crate::warn_limited!(
                        "remote-forged",
                        key = %String::from_utf8_lossy(key),
                        "value in the remote cache tier fails its MAC (forged, or written with another secret_file); dropped, not served"
                    );
                } else {
                    crate::warn_limited!(
                        "remote-damaged",
                        key = %String::from_utf8_lossy(key),
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

    /// The server's `used_memory`, sampled at most once a second (0 when unknown, and with a
    /// cluster, whose nodes each have their own).
    fn server_used(&self) -> u64 {
        if matches!(self.server, Server::Cluster(_)) {
            return 0;
        }
        let now = self.now_ms().max(1);
        let at = self.server_used_at_ms.load(Ordering::Relaxed);
        if at == 0 || now.saturating_sub(at) >= 1000 {
            self.server_used_at_ms.store(now, Ordering::Relaxed);
            let info = self.with_conn(|c| redis::cmd("INFO").arg("memory").query::<String>(c));
            let used = info.as_deref().and_then(|text| {
                text.lines().find_map(|l| l.strip_prefix("used_memory:")).and_then(|v| v.trim().parse::<u64>().ok())
            });
            if let Some(used) = used {
                self.server_used.store(used, Ordering::Relaxed);
            }
        }
        self.server_used.load(Ordering::Relaxed)
    }

    /// Whether `len` more bytes keep within `size`.
    fn fits(&self, len: u64) -> bool {
        let own = self.bytes_written.load(Ordering::Relaxed).saturating_sub(self.bytes_freed.load(Ordering::Relaxed));
        own.max(self.server_used()).saturating_add(len) <= self.size
    }

    /// Writes one batch in one pipeline: `SET key value NX` each, within the budget.
    fn write_batch(&self, batch: &[Taken<WriteJob>]) {
        let mut items = Vec::with_capacity(batch.len());
        let mut lens = Vec::with_capacity(batch.len());
        let mut ids = Vec::with_capacity(batch.len());
        let mut kinds = Vec::with_capacity(batch.len());
        for job in batch {
            let data = job.payload.data();
            let len = (HEADER_LEN + data.len()) as u64;
            if !self.fits(len + lens.iter().sum::<u64>()) {
                self.over_size.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let value = encode_value(&self.value_key, job.kind, &job.key, data, job.payload.dims());
            items.push((&job.key[..], value));
            lens.push(len);
            ids.push(job.id);
            kinds.push(job.kind);
        }
        if lens.is_empty() {
            return;
        }
        match self.with_conn(|c| c.set_nx_all(&items)) {
            Some(replies) => {
                let (mut held, mut waiting) = (Vec::new(), Vec::new());
                for (((reply, len), id), kind) in replies.iter().zip(&lens).zip(ids).zip(kinds) {
                    if !matches!(reply, redis::Value::Nil) {
                        self.writes.fetch_add(1, Ordering::Relaxed);
                        self.bytes_written.fetch_add(*len, Ordering::Relaxed);
                        if kind != RemoteKind::Augmented {
                            self.saw_entry(*len, kind == RemoteKind::Decoded);
                        }
                        if kind == RemoteKind::Augmented {
                            waiting.push(id);
                        }
                    }
                    if kind != RemoteKind::Augmented {
                        held.push(id);
                    }
                }
                self.index_held(held);
                self.index_waiting(waiting);
            }
            None => {
                self.dropped_writes.fetch_add(lens.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// Records in the shared index that the tier now holds `ids` (one pipeline of `SETBIT`s on
    /// one key: one node of a cluster), and in this mount's status bytes.
    fn index_held(&self, ids: Vec<FileId>) {
        let Some(status) = &self.status else { return };
        if ids.is_empty() {
            return;
        }
        for &id in &ids {
            status.mark_remote(id);
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("SETBIT").arg(&self.held_key[..]).arg(id).arg(1).ignore();
        }
        self.with_conn(|c| pipe.query::<()>(c));
    }

    /// Records in the shared index of waiting outputs that `ids` have one now (one pipeline of
    /// `SETBIT`s), and in this mount's copy.
    fn index_waiting(&self, ids: Vec<FileId>) {
        let Some(waiting) = &self.waiting else { return };
        if ids.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for id in ids {
            waiting.set(id);
            pipe.cmd("SETBIT").arg(&self.waiting_key[..]).arg(id).arg(1).ignore();
        }
        self.with_conn(|c| pipe.query::<()>(c));
    }

    /// Copies the shared indexes into this mount's status bytes (what other mounts wrote) and
    /// its copy of the waiting outputs, at most once per [`HELD_READ_EVERY`]. A held bit is
    /// never cleared here: see [`HELD_REMOTE`]; a waiting bit follows the server's.
    fn read_held(&self) {
        let Some(status) = &self.status else { return };
        let now = self.now_ms().max(1);
        let at = self.held_read_at_ms.load(Ordering::Relaxed);
        if at != 0 && now.saturating_sub(at) < HELD_READ_EVERY.as_millis() as u64 {
            return;
        }
        self.held_read_at_ms.store(now, Ordering::Relaxed);
        let got = self.with_conn(|c| {
            redis::cmd("MGET").arg(&self.held_key[..]).arg(&self.waiting_key[..]).query::<(Option<Vec<u8>>, Option<Vec<u8>>)>(c)
        });
        let Some((held, waiting)) = got else { return };
        let received = held.as_ref().map_or(0, Vec::len) + waiting.as_ref().map_or(0, Vec::len);
        self.network.bytes_received.fetch_add(received as u64, Ordering::Relaxed);
        // Redis numbers a bitmap's bits from the most significant bit of its first byte.
        let set_bits = |bitmap: &[u8], mut each: Box<dyn FnMut(FileId, bool) + '_>| {
            for (i, &byte) in bitmap.iter().enumerate() {
                for bit in 0..8 {
                    each((i * 8 + bit) as FileId, byte & (0x80 >> bit) != 0);
                }
            }
        };
        if let Some(bitmap) = held {
            set_bits(&bitmap, Box::new(|id, on| if on { status.mark_remote(id) }));
        }
        if let Some(mine) = &self.waiting {
            mine.clear_all();
            if let Some(bitmap) = waiting {
                set_bits(&bitmap, Box::new(|id, on| if on { mine.set(id); }));
            }
        }
    }

    /// The writer: sends what is queued, in batches; while the tier is down and nothing is
    /// queued it probes (PING) once per [`RETRY_EVERY`], so the tier comes back by itself even
    /// while every request hits memory. Ends when the queue is closed and drained.
    fn run_writer(&self, jobs: Jobs<WriteJob>) {
        use std::sync::mpsc::RecvTimeoutError;
        loop {
            let first = match jobs.recv_timeout(RETRY_EVERY) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    if self.down.load(Ordering::Acquire) {
                        self.with_conn(|c| redis::cmd("PING").query::<String>(c));
                    } else {
                        self.read_held();
                        self.tick_network();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = vec![first];
            let mut bytes = batch[0].payload.data().len() as u64;
            while bytes < BATCH_BYTES {
                let Some(job) = jobs.try_recv() else { break };
                bytes += job.payload.data().len() as u64;
                batch.push(job);
            }
            self.write_batch(&batch);
            if !self.down.load(Ordering::Acquire) {
                self.read_held();
                self.tick_network();
            }
            // The batch is pending until here (a flush waits for the index it updated too).
            drop(batch);
        }
    }
}

/// What the tier measured, in the planner's terms; the plan's controller keeps one.
#[derive(Clone)]
pub(crate) struct RemoteGauge(Arc<Inner>);

impl RemoteGauge {
    /// The network to the server (mounts sharing the tier, the link's rate, what else it
    /// carries); none while the tier is down or before the link was measured.
    pub(crate) fn network(&self) -> Option<Network> {
        self.0.network()
    }

    /// What the tier keeps of a sample: the mean bytes of the samples' entries this mount
    /// wrote or was served, and the share of them that were decoded pixels (the rest encoded
    /// bytes); none before the first.
    pub(crate) fn entries(&self) -> Option<(f64, f64)> {
        let i = &self.0;
        let seen = i.entries_seen.load(Ordering::Relaxed);
        (seen > 0).then(|| {
            let decoded = i.decoded_seen.load(Ordering::Relaxed) as f64 / seen as f64;
            (i.entry_bytes.load(Ordering::Relaxed) as f64 / seen as f64, decoded.min(1.0))
        })
    }

    /// The tier's size, bytes.
    pub(crate) fn size(&self) -> u64 {
        self.0.size
    }

    /// Seconds a lookup that hit took on average (its round trip and transfer); none before
    /// the first.
    pub(crate) fn hit_seconds(&self) -> Option<f64> {
        let hits = self.0.hits.load(Ordering::Relaxed).saturating_sub(self.0.claims.load(Ordering::Relaxed));
        (hits > 0).then(|| self.0.hit_nanos.load(Ordering::Relaxed) as f64 / 1e9 / hits as f64)
    }
}

/// The remote tier: see the module documentation.
pub(crate) struct RemoteTier {
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
    pub(crate) fn open(url: &str, access: &Access, size: u64, fingerprint: u64, recipe: u64, status: Option<Arc<SampleStatus>>) -> Result<RemoteTier, RemoteError> {
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
            waiting: status.as_ref().map(|s| crate::sampling::Bitset::new(s.len())),
            network: network::NetworkState::new(url, fingerprint, size),
        });
        let for_writer = Arc::clone(&inner);
        let queue = WriteQueue::start("prepfs-remote-writer", QUEUE_JOBS, QUEUE_BYTES, move |jobs| for_writer.run_writer(jobs))
            .map_err(RemoteError::Writer)?;
        Ok(RemoteTier { inner, fingerprint, recipe, queue })
    }

    /// The store of the dataset's jobs shared by the mounts on this tier's server; a job's keys
    /// outlive its last claim by `ttl`.
    pub(crate) fn jobs(&self, ttl: Duration) -> RemoteJobs {
        RemoteJobs::new(Arc::clone(&self.inner), self.fingerprint, ttl)
    }

    /// The key of one form of a sample's version (relative path and identity).
    pub(crate) fn key(&self, rel_path: &Path, version: &Identity, kind: RemoteKind) -> Vec<u8> {
        key_of(self.fingerprint, self.recipe, rel_path, version, kind)
    }

    /// The sample's decoded pixels, else its encoded bytes, in one round trip; a damaged value
    /// is dropped and reads as a miss. `None` also while the tier is down.
    pub(crate) fn get(&self, id: FileId, rel_path: &Path, version: &Identity) -> Option<LowerHit> {
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
    pub(crate) fn remove(&self, rel_path: &Path, version: &Identity) {
        let (dkey, ekey) = (self.key(rel_path, version, RemoteKind::Decoded), self.key(rel_path, version, RemoteKind::Encoded));
        // One call: the hash tag puts both keys in one slot of a cluster.
        self.inner.with_conn(|c| redis::cmd("DEL").arg(&dkey[..]).arg(&ekey[..]).query::<u64>(c));
    }

    /// Waits (up to `limit`) until every queued write is sent; returns whether it is.
    pub(crate) fn flush(&self, limit: Duration) -> bool {
        self.queue.flush(limit)
    }

    /// The end of a mount: closes the queue, lets the writer send what is queued (each call
    /// within the timeouts; nothing while down) and joins it.
    pub(crate) fn close(&self) {
        if self.queue.close() {
            self.inner.leave_network();
        }
    }

    /// A reader of what the tier measures for the planner.
    pub(crate) fn gauge(&self) -> RemoteGauge {
        RemoteGauge(Arc::clone(&self.inner))
    }

    /// Whether the tier is up (false from a failed call until a probe succeeds).
    pub(crate) fn is_up(&self) -> bool {
        !self.inner.down.load(Ordering::Acquire)
    }

    /// Figures for stats (`cache.remote`).
    pub(crate) fn stats(&self) -> serde_json::Value {
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
            "samples_known_held": i.status.as_ref().map_or(0, |s| s.count_held(crate::cache::HELD_REMOTE)),
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
#[path = "../../../tests/common/redis_server.rs"]
#[allow(unreachable_pub)]
pub(crate) mod redis_server;

#[cfg(test)]
mod tests {
    use super::redis_server::{RedisCluster, RedisServer};
    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    /// The secret the tests' mounts share.
    pub(crate) fn test_key() -> ValueKey {
        ValueKey::from_secret(b"the tests' shared secret, 32 b.")
    }

    pub(crate) fn test_access() -> Access {
        Access::with_key(test_key())
    }

    fn version(len: u64) -> Identity {
        Identity { dev: 1, ino: 2, len, mtime_ns: 1_700_000_000_123_456_789, ctime_ns: 3 }
    }

    fn bytes(n: usize, seed: u8) -> Arc<[u8]> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<_>>().into()
    }

    fn pixels(w: u32, h: u32) -> Arc<Rgb> {
        Arc::new(Rgb { width: w, height: h, pixels: (0..w * h * 3).map(|i| (i % 251) as u8).collect() })
    }

    /// A tier for a dataset of `n` samples with status bytes, so it keeps the shared indexes.
    fn indexed(url: &str, fingerprint: u64, recipe: u64, n: usize) -> RemoteTier {
        RemoteTier::open(url, &test_access(), 1 << 30, fingerprint, recipe, Some(Arc::new(SampleStatus::new(n)))).expect("open")
    }

    /// Waits until `tier` knows `n` outputs wait for a claimer (its writer reads the index once a
    /// second).
    fn wait_waiting(tier: &RemoteTier, n: u64) {
        let started = Instant::now();
        while tier.stats()["outputs_waiting"] != n {
            assert!(started.elapsed() < WAIT, "outputs waiting: {}", tier.stats());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn exists(server: &RedisServer, key: &[u8]) -> bool {
        server.command_bytes(&[b"EXISTS", key]).is_some_and(|r| r.starts_with(b":1"))
    }

    #[test]
    fn keys_name_the_dataset_the_version_and_the_form() {
        let v = version(100);
        let k = key_of(7, 0, Path::new("c0/a.jpg"), &v, RemoteKind::Decoded);
        assert_eq!(k, b"prepfs:1:{0000000000000007:100:1700000000123456789:c0/a.jpg}:d".to_vec());
        assert_ne!(k, key_of(8, 0, Path::new("c0/a.jpg"), &v, RemoteKind::Decoded), "another dataset");
        assert_ne!(k, key_of(7, 0, Path::new("c0/a.jpg"), &Identity { len: 101, ..v }, RemoteKind::Decoded), "size counts");
        assert_ne!(k, key_of(7, 0, Path::new("c0/a.jpg"), &Identity { mtime_ns: 1, ..v }, RemoteKind::Decoded), "mtime counts");
        assert_eq!(k, key_of(7, 0, Path::new("c0/a.jpg"), &Identity { ino: 9, ctime_ns: 9, dev: 9, ..v }, RemoteKind::Decoded), "inode and ctime differ across machines");
        assert_ne!(k, key_of(7, 0, Path::new("c0/a.jpg"), &v, RemoteKind::Encoded), "form counts");
        assert_eq!(k, key_of(7, 5, Path::new("c0/a.jpg"), &v, RemoteKind::Decoded), "pixels are the same for every recipe");
        let a = |recipe| key_of(7, recipe, Path::new("c0/a.jpg"), &v, RemoteKind::Augmented);
        assert_ne!(a(1), a(2), "an output names the recipe that made it");
        assert_eq!(utc(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)), "2023-11-14T22:13:20Z");
        assert_eq!(redacted("redis://user:secret@h:6379/0"), "redis://user:***@h:6379/0");
        assert_eq!(redacted("redis://h:6379"), "redis://h:6379");
    }

    #[test]
    fn a_value_round_trips_and_every_kind_of_damage_is_refused() {
        let key = b"k".to_vec();
        let v = encode_value(&test_key(), RemoteKind::Decoded, &key, &pixels(4, 3).pixels, (4, 3));
        let ((w, h), payload) = decode_value(&test_key(), RemoteKind::Decoded, &key, v.clone()).expect("intact");
        assert_eq!(((w, h), payload), ((4, 3), pixels(4, 3).pixels.clone()));
        assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, b"other", v.clone()), Err(Damage::Key)));
        assert!(matches!(decode_value(&test_key(), RemoteKind::Encoded, &key, v.clone()), Err(Damage::Kind { found: 2, expected: 1 })));
        assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, v[..HEADER_LEN - 1].to_vec()), Err(Damage::Short)));
        assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, v[..v.len() - 1].to_vec()), Err(Damage::Length { .. })));
        let mut flipped = v.clone();
        flipped[HEADER_LEN + 5] ^= 0x10;
        assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, flipped), Err(Damage::Checksum)));
        let mut magic = v.clone();
        magic[0] = b'X';
        assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, magic), Err(Damage::Magic)));
        // Forged: the pixels changed and the CRC and key hash recomputed, as anyone can.
        let forged = forge(&v, |p| p.iter_mut().for_each(|b| *b = !*b));
        assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, forged), Err(Damage::Forged)));
        let other = ValueKey::from_secret(b"another deployment's secret....");
        assert!(matches!(decode_value(&other, RemoteKind::Decoded, &key, v), Err(Damage::Forged)), "another secret's value");
    }

    /// `value` with `change` applied to its payload and its CRC-32 recomputed exactly as the
    /// codec does (the key hash is unchanged: the key is the same): what a writer to Redis
    /// without the secret can do.
    fn forge(value: &[u8], change: impl Fn(&mut [u8])) -> Vec<u8> {
        let mut v = value.to_vec();
        change(&mut v[HEADER_LEN..]);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&v[0..32]);
        crc.update(&v[HEADER_LEN..]);
        let crc = crc.finalize().to_le_bytes();
        v[32..36].copy_from_slice(&crc);
        v
    }

    #[test]
    fn a_forged_value_with_recomputed_checksums_is_dropped_deleted_counted_and_written_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let writer = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
        let a = Path::new("c0/a.jpg");
        assert!(writer.put_decoded(0, a, &version(1), pixels(16, 8)));
        assert!(writer.flush(WAIT));
        let key = writer.key(a, &version(1), RemoteKind::Decoded);
        let stored = server.command_bytes(&[b"GET", &key]).expect("GET");
        // A bulk reply: `$LEN\r\n` then the value.
        let start = stored.iter().position(|&b| b == b'\n').expect("reply") + 1;
        let value = &stored[start..start + HEADER_LEN + 16 * 8 * 3];
        let forged = forge(value, |p| p.iter_mut().for_each(|b| *b = !*b));
        assert!(server.command_bytes(&[b"SET", &key, &forged]).is_some_and(|r| r.starts_with(b"+OK")));
        let reader = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
        assert!(reader.get(0, a, &version(1)).is_none(), "the forged pixels were served");
        assert!(!exists(&server, &key), "the forged value was left squatting its key");
        let stats = reader.stats();
        assert_eq!((stats["forged"].as_u64(), stats["damaged_dropped"].as_u64()), (Some(1), Some(0)), "{stats}");
        // The key is free again: the true pixels are written and served.
        assert!(reader.put_decoded(0, a, &version(1), pixels(16, 8)));
        assert!(reader.flush(WAIT));
        assert!(matches!(writer.get(0, a, &version(1)), Some(LowerHit::Pixels(p)) if p.pixels == pixels(16, 8).pixels));
    }

    #[test]
    fn mounts_with_different_secrets_do_not_share_each_drops_the_others_values() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let ours = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
        let theirs = Access::with_key(ValueKey::from_secret(b"another deployment's secret...."));
        let stranger = RemoteTier::open(&server.url(), &theirs, 1 << 30, 1, 0, None).expect("open");
        let (a, b) = (Path::new("a.jpg"), Path::new("b.jpg"));
        assert!(ours.put_encoded(0, a, &version(1), bytes(1_000, 1)));
        assert!(stranger.put_encoded(0, b, &version(2), bytes(1_000, 2)));
        assert!(ours.flush(WAIT) && stranger.flush(WAIT));
        assert!(stranger.get(0, a, &version(1)).is_none(), "another secret's mount served ours");
        assert!(ours.get(0, b, &version(2)).is_none(), "we served another secret's value");
        assert_eq!((ours.stats()["forged"].as_u64(), stranger.stats()["forged"].as_u64()), (Some(1), Some(1)));
    }

    #[test]
    fn what_is_put_is_got_back_from_a_real_redis_server() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let tier = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
        let (a, b) = (Path::new("c0/a.jpg"), Path::new("c1/b.jpg"));
        assert!(tier.get(0, a, &version(10_000)).is_none());
        assert!(tier.put_encoded(0, a, &version(10_000), bytes(10_000, 1)));
        assert!(tier.put_decoded(0, b, &version(500), pixels(33, 17)));
        assert!(tier.flush(WAIT));
        match tier.get(0, a, &version(10_000)) {
            Some(LowerHit::Bytes(got)) => assert_eq!(&got[..], &bytes(10_000, 1)[..]),
            _ => panic!("encoded value missing"),
        }
        match tier.get(0, b, &version(500)) {
            Some(LowerHit::Pixels(p)) => assert_eq!((p.width, p.height, &p.pixels), (33, 17, &pixels(33, 17).pixels)),
            _ => panic!("decoded value missing"),
        }
        assert!(tier.get(0, a, &version(10_001)).is_none(), "another version of the file misses");
        // Another mount of the same dataset shares; another dataset does not see them.
        let same = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
        assert!(same.get(0, a, &version(10_000)).is_some());
        let other = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 43, 0, None).expect("open");
        assert!(other.get(0, a, &version(10_000)).is_none());
        let stats = tier.stats();
        assert_eq!((stats["hits"].as_u64(), stats["misses"].as_u64(), stats["writes"].as_u64()), (Some(2), Some(2), Some(2)));
        assert_eq!(stats["bytes_written"], (10_000 + 33 * 17 * 3 + 2 * HEADER_LEN) as u64);
        assert_eq!(stats["state"], "up");
    }

    /// Waits until `tier` counts `mounts` mounts and its gauge gives the planner a network.
    fn wait_network(tier: &RemoteTier, mounts: u64) -> Network {
        let started = Instant::now();
        loop {
            if let Some(network) = tier.gauge().network().filter(|_| tier.stats()["network"]["mounts"] == mounts) {
                return network;
            }
            assert!(started.elapsed() < WAIT, "network: {}", tier.stats()["network"]);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn mounts_sharing_a_server_count_each_other_and_their_machine_measure_the_link_and_leave() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let first = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
        let second = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
        let other_dataset = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 43, 0, None).expect("open");
        let network = wait_network(&first, 2);
        assert_eq!(network.nodes, 1, "two mounts of one machine are one node");
        // Loopback moves far more than a megabyte a second; its other traffic cannot be negative.
        assert!(network.b_nic > 1e6 && network.c_nw >= 0.0, "{network:?}");
        wait_network(&other_dataset, 1);
        let stats = first.stats()["network"].clone();
        assert_eq!(stats["interface"], "lo", "{stats}");
        assert!(stats["bytes_received"].as_u64().is_some_and(|b| b >= 64 << 10), "the probe's reads are counted: {stats}");
        second.close();
        wait_network(&first, 1);
        // No probe value is left on the server.
        let keys = server.command(&["KEYS", "prepfs:1:*:probe:*"]).expect("KEYS");
        assert!(!String::from_utf8_lossy(&keys).contains("probe"), "{}", String::from_utf8_lossy(&keys));
        // Nothing written yet: the planner is not told what the tier holds of a sample.
        assert!(first.gauge().entries().is_none());
        assert!(first.put_decoded(0, Path::new("c0/a.jpg"), &version(500), pixels(10, 10)));
        assert!(first.put_encoded(1, Path::new("c0/b.jpg"), &version(500), bytes(500, 1)));
        assert!(first.flush(WAIT));
        let (mean, decoded) = first.gauge().entries().expect("two writes");
        assert_eq!((mean, decoded), ((300.0 + 500.0) / 2.0 + HEADER_LEN as f64, 0.5));
    }

    #[test]
    fn over_a_three_node_cluster_values_spread_across_nodes_round_trip_and_claims_stay_use_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = RedisCluster::start(dir.path());
        let n = 60u64;
        let tier = indexed(&cluster.url(), 42, 0, n as usize);
        let rel = |i: u64| format!("c{}/{i}.jpg", i % 3);
        for i in 0..n {
            assert!(tier.put_encoded(i as FileId, Path::new(&rel(i)), &version(i), bytes(2_000, i as u8)));
            assert!(tier.put_augmented(i as FileId, Path::new(&rel(i)), &version(i), bytes(300, i as u8)));
        }
        assert!(tier.flush(WAIT));
        let stats = tier.stats();
        assert_eq!(stats["writes"], 2 * n, "{stats}");
        assert_eq!(stats["state"], "up", "{stats}");
        let per_node = cluster.keys_per_node();
        assert_eq!(per_node.iter().sum::<u64>(), 2 * n + 2, "the values and the two indexes");
        assert!(per_node.iter().all(|&k| k > 0), "the keys did not spread over the nodes: {per_node:?}");
        // Another mount of the same dataset reads them all back, each from the node of its slot.
        let other = indexed(&cluster.url(), 42, 0, n as usize);
        wait_waiting(&other, n);
        for i in 0..n {
            match other.get(0, Path::new(&rel(i)), &version(i)) {
                Some(LowerHit::Bytes(got)) => assert_eq!(&got[..], &bytes(2_000, i as u8)[..], "{}", rel(i)),
                _ => panic!("{}: missing on the cluster", rel(i)),
            }
        }
        // Claims: each output exactly once, whichever mount asks first.
        let mut claimed = 0;
        for i in 0..n {
            let (path, v) = (rel(i), version(i));
            let first = if i % 2 == 0 { &tier } else { &other };
            let second = if i % 2 == 0 { &other } else { &tier };
            let id = i as FileId;
            assert!(first.claim_augmented(id, Path::new(&path), &v).is_some_and(|b| b[..] == bytes(300, i as u8)[..]));
            assert!(second.claim_augmented(id, Path::new(&path), &v).is_none(), "{path} claimed twice");
            claimed += 1;
        }
        assert_eq!(claimed, n);
        assert_eq!(cluster.keys_per_node().iter().sum::<u64>(), n + 2, "claimed outputs are gone");
        wait_waiting(&tier, 0);
    }

    #[test]
    fn a_cluster_whose_nodes_are_all_down_is_an_outage_noticed_within_the_timeouts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cluster = RedisCluster::start(dir.path());
        let tier = RemoteTier::open(&cluster.url(), &test_access(), 1 << 30, 9, 0, None).expect("open");
        assert!(tier.put_encoded(0, Path::new("a.jpg"), &version(1), bytes(100, 1)));
        assert!(tier.flush(WAIT));
        for node in &mut cluster.nodes {
            node.kill();
        }
        let started = Instant::now();
        assert!(tier.get(0, Path::new("a.jpg"), &version(1)).is_none());
        assert!(started.elapsed() < Duration::from_secs(3), "a lookup against a dead cluster took {:?}", started.elapsed());
        assert!(!tier.is_up(), "{}", tier.stats());
        assert_eq!(tier.stats()["outages"], 1);
    }

    #[test]
    fn what_one_mount_wrote_is_marked_held_in_the_other_mounts_status_within_a_second() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let (mine, theirs) = (Arc::new(SampleStatus::new(40)), Arc::new(SampleStatus::new(40)));
        let writer = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 7, 0, Some(Arc::clone(&mine))).expect("open");
        let _reader = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 7, 0, Some(Arc::clone(&theirs))).expect("open");
        for id in [3u32, 17, 38] {
            assert!(writer.put_encoded(id, Path::new(&format!("c/{id}.jpg")), &version(u64::from(id)), bytes(500, 1)));
        }
        // An augmented output is use-once, not a held sample: it is indexed as waiting.
        assert!(writer.put_augmented(5, Path::new("c/5.jpg"), &version(5), bytes(500, 1)));
        assert!(writer.flush(WAIT));
        let held = |s: &SampleStatus| (0..40).filter(|&i| s.held(i) & crate::cache::HELD_REMOTE != 0).collect::<Vec<_>>();
        assert_eq!(held(&mine), vec![3, 17, 38], "the writer's own status");
        let started = Instant::now();
        while held(&theirs) != vec![3, 17, 38] {
            assert!(started.elapsed() < Duration::from_secs(5), "the other mount never learned: {:?}", held(&theirs));
            std::thread::sleep(Duration::from_millis(50));
        }
        // Another dataset's mount learns nothing of them.
        let stranger = Arc::new(SampleStatus::new(40));
        let _other = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 8, 0, Some(Arc::clone(&stranger))).expect("open");
        std::thread::sleep(HELD_READ_EVERY + Duration::from_millis(300));
        assert!(held(&stranger).is_empty());
    }

    #[test]
    fn a_damaged_value_is_deleted_and_never_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let tier = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
        let (a, b) = (Path::new("a.jpg"), Path::new("b.jpg"));
        assert!(tier.put_encoded(0, a, &version(1), bytes(5_000, 1)));
        assert!(tier.put_encoded(0, b, &version(2), bytes(5_000, 2)));
        assert!(tier.flush(WAIT));
        // Garbage over a's value; b's intact value copied under a third key.
        let ka = tier.key(a, &version(1), RemoteKind::Encoded);
        let garbage = vec![0x5a_u8; 5_040];
        assert!(server.command_bytes(&[b"SET", &ka, &garbage]).is_some_and(|r| r.starts_with(b"+OK")));
        let kb = tier.key(b, &version(2), RemoteKind::Encoded);
        let kc = tier.key(Path::new("c.jpg"), &version(2), RemoteKind::Encoded);
        assert!(server.command_bytes(&[b"COPY", &kb, &kc]).is_some_and(|r| r.starts_with(b":1")));
        assert!(tier.get(0, a, &version(1)).is_none(), "garbage was served");
        assert!(!exists(&server, &ka), "the damaged value was not deleted");
        assert!(tier.get(0, Path::new("c.jpg"), &version(2)).is_none(), "a value under another key was served");
        assert!(!exists(&server, &kc));
        assert!(matches!(tier.get(0, b, &version(2)), Some(LowerHit::Bytes(got)) if got[..] == bytes(5_000, 2)[..]));
        assert_eq!(tier.stats()["damaged_dropped"], 2);
    }

    #[test]
    fn two_concurrent_claimers_of_one_augmented_output_never_both_get_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let url = server.url();
        let rounds = 40u64;
        let writer = indexed(&url, 5, 1, rounds as usize);
        for i in 0..rounds {
            let rel = format!("c/{i}.jpg");
            assert!(writer.put_augmented(i as FileId, Path::new(&rel), &version(i), bytes(1_000, i as u8)));
        }
        assert!(writer.flush(WAIT));
        // A mount of another recipe (other augmentations) sees none of them waiting.
        let stranger = indexed(&url, 5, 2, rounds as usize);
        // Two mounts (two tiers, their own connections) claim every output at once.
        let claimers: Vec<Arc<RemoteTier>> = (0..2).map(|_| Arc::new(indexed(&url, 5, 1, rounds as usize))).collect();
        for claimer in &claimers {
            wait_waiting(claimer, rounds);
        }
        assert_eq!(stranger.stats()["outputs_waiting"], 0);
        assert!(stranger.claim_augmented(0, Path::new("c/0.jpg"), &version(0)).is_none());
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = claimers
            .iter()
            .map(|tier| {
                let (tier, barrier) = (Arc::clone(tier), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    (0..rounds)
                        .map(|i| {
                            barrier.wait();
                            let rel = format!("c/{i}.jpg");
                            tier.claim_augmented(i as FileId, Path::new(&rel), &version(i)).map(|got| {
                                assert_eq!(&got[..], &bytes(1_000, i as u8)[..]);
                            })
                        })
                        .map(|got| got.is_some())
                        .collect::<Vec<bool>>()
                })
            })
            .collect();
        let won: Vec<Vec<bool>> = threads.into_iter().map(|t| t.join().expect("claimer")).collect();
        for (i, (a, b)) in won[0].iter().zip(&won[1]).enumerate() {
            assert!(a ^ b, "output {i}: claimed by {} readers", u8::from(*a) + u8::from(*b));
        }
        assert_eq!(server.data_keys().len(), 1, "every claimed output is gone (the index stays)");
        assert_eq!(server.command(&["BITCOUNT", "prepfs:1:{0000000000000005}:waiting:0000000000000001"]).expect("bitcount"), b":0\r\n".to_vec());
        // A later output for the same sample is a fresh one, offered again.
        assert!(writer.put_augmented(0, Path::new("c/0.jpg"), &version(0), bytes(1_000, 99)));
        assert!(writer.flush(WAIT));
        wait_waiting(&claimers[0], 1);
        assert!(claimers[0].claim_augmented(0, Path::new("c/0.jpg"), &version(0)).is_some_and(|b| b[..] == bytes(1_000, 99)[..]));
    }

    #[test]
    fn writes_stop_at_the_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        // Room for about 3 values of 100 KB. (The server's own used_memory, ~1 MB empty, is
        // within a size of 10 MB; here the running count is what stops the writes.)
        let tier = RemoteTier::open(&server.url(), &test_access(), 10 << 20, 9, 0, None).expect("open");
        for i in 0..300u64 {
            let rel = format!("{i}.jpg");
            tier.put_encoded(0, Path::new(&rel), &version(i), bytes(100_000, i as u8));
            assert!(tier.flush(WAIT));
        }
        let stats = tier.stats();
        let written = stats["bytes_written"].as_u64().expect("bytes_written");
        assert!(written <= 10 << 20, "{stats}");
        assert!(written > 5 << 20, "{stats}");
        assert!(stats["over_size"].as_u64() > Some(0), "{stats}");
    }

    #[test]
    fn a_killed_server_is_an_outage_logged_once_and_a_restarted_one_is_used_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = RedisServer::start(dir.path());
        let tier = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 3, 0, None).expect("open");
        let a = Path::new("a.jpg");
        assert!(tier.put_encoded(0, a, &version(1), bytes(1_000, 1)));
        assert!(tier.flush(WAIT));
        assert!(tier.get(0, a, &version(1)).is_some());
        server.kill();
        let started = Instant::now();
        assert!(tier.get(0, a, &version(1)).is_none());
        assert!(started.elapsed() < TIMEOUT * 3, "a dead server took {:?}", started.elapsed());
        assert!(!tier.is_up());
        let stats = tier.stats();
        assert!(stats["state"].as_str().is_some_and(|s| s.starts_with("down since ")), "{stats}");
        // While down, calls cost nothing: no connection is tried within the second.
        let started = Instant::now();
        for _ in 0..1000 {
            assert!(tier.get(0, a, &version(1)).is_none());
        }
        assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());
        assert!(!tier.put_encoded(0, a, &version(1), bytes(1_000, 1)), "no write is queued while down");
        assert_eq!(tier.stats()["outages"], 1);
        server.restart();
        let started = Instant::now();
        while !tier.is_up() {
            assert!(started.elapsed() < RETRY_EVERY * 5, "no reconnect");
            tier.get(0, a, &version(1));
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(tier.put_encoded(0, a, &version(1), bytes(1_000, 1)));
        assert!(tier.flush(WAIT));
        assert!(tier.get(0, a, &version(1)).is_some(), "hits resume");
        assert_eq!(tier.stats()["outages"], 1);
        assert_eq!(tier.stats()["state"], "up");
    }
}
