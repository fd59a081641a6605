//! The cache tiers' settings as plain typed data: the eviction policy and the remote tier's
//! server; prepfs-core's `config` parses and checks them (`cache:` in the mount's config).

use std::path::PathBuf;

use serde::Serialize;

/// Whether encoded and decoded entries stay once admitted (Seneca) or make room by LRU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictionPolicy {
    /// Admit while there is room; never evict (no thrashing under random access).
    Keep,
    /// Evict the least recently used entry to admit a new one.
    Lru,
    /// Keep with one job (or none), LRU while several jobs share the cache: with opportunistic
    /// sampling, what one job's miss admitted is what the others are served next, so eviction
    /// then follows use instead of thrashing.
    Auto,
}

/// The cache's remote tier: a Redis server every mount naming it shares, and the bytes prepfs
/// keeps within there ([`crate::remote`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteConfig {
    /// `redis[s]://[USER:PASSWORD@]HOST:PORT[/DB]` (or a cluster's). Printed with its password
    /// as `***`: `password_file` keeps a password out of the config.
    #[serde(serialize_with = "redacted_url")]
    pub url: String,
    /// Bytes prepfs writes there at most (the server's `maxmemory` is the operator's bound).
    pub size: u64,
    /// The deployment's shared secret, which every value's MAC is keyed with: a private file
    /// (mode 0600 or stricter), the same on every machine sharing the tier. Required.
    pub secret_file: PathBuf,
    /// The server's password (Redis AUTH, or the URL's ACL user's), instead of one in the URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// PEM roots that `rediss://` trusts instead of the system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
}

fn redacted_url<S: serde::Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&prepfs_base::escape::redacted(url))
}
