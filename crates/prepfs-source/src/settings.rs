//! How the source is reached, as plain typed data the mount's config fills in: WebDataset
//! shards by their pattern ([`ShardsConfig`]) or an S3-compatible object store
//! ([`ObjectStoreConfig`]). prepfs-core's `config` parses and checks them.

use std::path::PathBuf;

/// WebDataset tar shards as the source (`source: { shards: "/data/train-*.tar" }`, or a pattern
/// where a directory would be): see [`crate::shards`].
#[derive(Debug, Clone, PartialEq)]
pub struct ShardsConfig {
    /// The shard pattern (braces and globs in the file name), its directory made absolute.
    pub pattern: String,
    /// Where shard indexes are kept between mounts when there is no disk tier (`index_dir`);
    /// `None`: not kept.
    pub index_dir: Option<PathBuf>,
}

/// An S3-compatible object store as the source (`source: { url: s3://BUCKET/PREFIX, endpoint:
/// http://HOST:PORT, region: REGION }`, or `s3://BUCKET/PREFIX` where a directory would be): see
/// [`crate::s3`]. Credentials come from the environment (`AWS_ACCESS_KEY_ID`, ...), never the
/// config.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectStoreConfig {
    /// `s3://BUCKET/PREFIX` as given (no trailing `/`).
    pub url: String,
    pub bucket: String,
    /// The key prefix served as the tree's root, without slashes at either end; empty: the
    /// whole bucket.
    pub prefix: String,
    /// The store's endpoint (`http://127.0.0.1:9000`); `None`: `AWS_ENDPOINT_URL`, else AWS.
    pub endpoint: Option<String>,
    /// `None`: `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// How long one request is retried (5xx, SlowDown, timeouts, refused connections) before
    /// it fails with EIO, seconds: `source.retry_timeout`, at most half of `source.timeout`.
    pub retry_timeout_s: f64,
    /// Where the listing is kept between mounts when there is no disk tier (`index_dir`);
    /// `None`: not kept.
    pub index_dir: Option<PathBuf>,
    /// How old a kept listing may be and still be used, seconds (`source.listing_max_age`,
    /// [`DEFAULT_LISTING_MAX_AGE_S`]); 0: the store is listed at every mount, nothing kept.
    pub listing_max_age_s: f64,
}

/// How old a kept listing may be by default: an hour.
pub const DEFAULT_LISTING_MAX_AGE_S: f64 = 3600.0;

impl ObjectStoreConfig {
    /// `s3://BUCKET[/PREFIX]` parsed; an error says what is wrong with it.
    pub fn of_url(url: &str, endpoint: Option<String>, region: Option<String>, retry_timeout_s: f64) -> Result<ObjectStoreConfig, String> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| format!("{url}: an object store URL is s3://BUCKET/PREFIX"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{url}: no bucket (s3://BUCKET/PREFIX)"));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
            return Err(format!("{url}: the prefix must not hold `.`, `..` or an empty part"));
        }
        let url = if prefix.is_empty() { format!("s3://{bucket}") } else { format!("s3://{bucket}/{prefix}") };
        Ok(ObjectStoreConfig {
            url,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            endpoint,
            region,
            retry_timeout_s,
            index_dir: None,
            listing_max_age_s: DEFAULT_LISTING_MAX_AGE_S,
        })
    }
}
