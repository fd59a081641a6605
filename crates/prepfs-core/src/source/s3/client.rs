//! The object store client and the runtime it runs on: one `object_store` S3 client (its
//! credentials, endpoint, region and retries from the config and the environment) and the one
//! tokio runtime the source owns (`prepfs-s3-<i>` threads), shut down and its threads joined
//! when the client drops. The rest of prepfs stays synchronous: [`Client::block_on`] runs a
//! request to its end on the calling thread (a source I/O thread), and many may at once.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::{BackoffConfig, ClientOptions, RetryConfig};

use crate::config::ObjectStoreConfig;

/// The runtime's worker threads: requests wait on the network, not on these.
const RUNTIME_THREADS: usize = 2;

/// How long a drop waits for the runtime's threads to end.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The S3 client and its runtime: see the module documentation.
pub(crate) struct Client {
    pub(super) store: AmazonS3,
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
    pub(super) retry_timeout: Duration,
    /// The runtime's threads alive (started and not yet ended): what a test checks a drop by.
    #[cfg_attr(not(test), allow(dead_code))]
    live: Arc<AtomicUsize>,
}

impl Client {
    /// The client for `config`: credentials from the environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, web identity, container and instance
    /// credentials, as `object_store` reads them), else from the shared credentials file
    /// (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`; profile `AWS_PROFILE`, else
    /// `default`); the endpoint and region from the config, else `AWS_ENDPOINT_URL` and
    /// `AWS_REGION`. Each request is retried (5xx, SlowDown, 429, timeouts, refused
    /// connections) with exponential backoff for `retry_timeout_s`, each try bounded by as long.
    pub(crate) fn new(config: &ObjectStoreConfig) -> io::Result<Client> {
        Client::with_keys(config, None)
    }

    /// [`Client::new`] with the keys given (`(key id, secret)`) rather than looked for (tests:
    /// the environment is the process's, shared by tests running at once).
    pub(super) fn with_keys(config: &ObjectStoreConfig, keys: Option<(&str, &str)>) -> io::Result<Client> {
        let retry_timeout = Duration::from_secs_f64(config.retry_timeout_s.max(0.1));
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&config.bucket);
        if let Some((key_id, secret)) = keys {
            builder = builder.with_access_key_id(key_id).with_secret_access_key(secret);
        } else if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
            if let Some(profile) = profile_credentials() {
                builder = builder.with_access_key_id(profile.key_id).with_secret_access_key(profile.secret);
                if let Some(token) = profile.token {
                    builder = builder.with_token(token);
                }
            }
        }
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &config.region {
            builder = builder.with_region(region);
        }
        // A plain-HTTP endpoint (a store on the local network, the tests' server) is the
        // operator's choice of URL, not something to refuse.
        let endpoint = config.endpoint.clone().or_else(|| std::env::var("AWS_ENDPOINT_URL").ok()).unwrap_or_default();
        let options = ClientOptions::new()
            .with_allow_http(endpoint.starts_with("http://"))
            .with_timeout(retry_timeout)
            .with_connect_timeout(retry_timeout.min(Duration::from_secs(5)));
        let retry = RetryConfig {
            backoff: BackoffConfig { init_backoff: Duration::from_millis(50), max_backoff: Duration::from_secs(2), base: 2.0 },
            // Bounded by time, not by count.
            max_retries: 1000,
            retry_timeout,
        };
        let store = builder
            .with_client_options(options)
            .with_retry(retry)
            .build()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {e}", config.url)))?;
        let counter = Arc::new(AtomicUsize::new(0));
        let live = Arc::new(AtomicUsize::new(0));
        let (started, ended) = (Arc::clone(&live), Arc::clone(&live));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            // DNS lookups run on the blocking pool: a few are plenty.
            .max_blocking_threads(2)
            .thread_name_fn(move || format!("prepfs-s3-{}", counter.fetch_add(1, Ordering::Relaxed)))
            .on_thread_start(move || {
                started.fetch_add(1, Ordering::AcqRel);
            })
            .on_thread_stop(move || {
                ended.fetch_sub(1, Ordering::AcqRel);
            })
            .enable_all()
            .build()?;
        Ok(Client { store, runtime: Some(runtime), retry_timeout, live })
    }

    /// Runs `work` to its end on the calling thread (never one of the runtime's own).
    pub(super) fn block_on<T>(&self, work: impl std::future::Future<Output = T>) -> io::Result<T> {
        match &self.runtime {
            Some(runtime) => Ok(runtime.block_on(work)),
            None => Err(io::Error::new(io::ErrorKind::Interrupted, "the object store client is shut down")),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Waits for the runtime's threads to end (a request in flight is dropped).
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
        }
    }
}

/// Keys from a shared credentials file.
#[derive(Debug, PartialEq)]
struct ProfileKeys {
    key_id: String,
    secret: String,
    token: Option<String>,
}

/// The keys of profile `AWS_PROFILE` (else `default`) in `AWS_SHARED_CREDENTIALS_FILE` (else
/// `~/.aws/credentials`), if that file holds them.
fn profile_credentials() -> Option<ProfileKeys> {
    let path = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".aws/credentials")))?;
    let text = std::fs::read_to_string(path).ok()?;
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_string());
    parse_profile(&text, &profile)
}

/// The keys of `[profile]` in the INI text of a shared credentials file.
fn parse_profile(text: &str, profile: &str) -> Option<ProfileKeys> {
    let (mut inside, mut key_id, mut secret, mut token) = (false, None, None, None);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = section.trim() == profile;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        if !inside {
            continue;
        }
        let value = Some(value.trim().to_string());
        match key.trim() {
            "aws_access_key_id" => key_id = value,
            "aws_secret_access_key" => secret = value,
            "aws_session_token" => token = value,
            _ => {}
        }
    }
    Some(ProfileKeys { key_id: key_id?, secret: secret?, token })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiles_keys_are_read_from_its_section_only() {
        let text = "[default]\naws_access_key_id = AKD\naws_secret_access_key = sd\n\n# a comment\n[train]\naws_access_key_id=AKT\naws_secret_access_key= st \naws_session_token = tok\n[empty]\naws_access_key_id = only\n";
        assert_eq!(parse_profile(text, "default"), Some(ProfileKeys { key_id: "AKD".into(), secret: "sd".into(), token: None }));
        assert_eq!(parse_profile(text, "train"), Some(ProfileKeys { key_id: "AKT".into(), secret: "st".into(), token: Some("tok".into()) }));
        assert_eq!(parse_profile(text, "empty"), None, "no secret: no keys");
        assert_eq!(parse_profile(text, "missing"), None);
    }

    #[test]
    fn the_runtimes_threads_are_named_and_gone_once_the_client_drops() {
        let config = ObjectStoreConfig::of_url("s3://bucket/p", Some("http://127.0.0.1:9".into()), Some("us-east-1".into()), 1.0).expect("url");
        let client = Client::new(&config).expect("client");
        let names = client.block_on(async { tokio::task::spawn(async { std::thread::current().name().map(str::to_string) }).await }).expect("runs");
        assert!(names.expect("joined").is_some_and(|n| n.starts_with("prepfs-s3-")));
        let live = Arc::clone(&client.live);
        // The workers start as the runtime is built, each in its own time.
        let started = std::time::Instant::now();
        while live.load(Ordering::Acquire) < RUNTIME_THREADS && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(live.load(Ordering::Acquire) >= RUNTIME_THREADS, "the workers run");
        drop(client);
        assert_eq!(live.load(Ordering::Acquire), 0, "every thread of the runtime ended before the drop returned");
    }
}
