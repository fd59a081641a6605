//! The object store client and the runtime it runs on: one `object_store` S3 client (its
//! credentials, endpoint, region and retries from the config and the environment) and the one
//! tokio runtime the source owns (`prepfs-s3-<i>` threads), shut down and its threads joined
//! when the client drops. The rest of prepfs stays synchronous: [`Client::block_on`] runs a
//! request to its end on the calling thread (a source I/O thread), and many may at once.
//!
//! Under `object_store` sits an HTTP service of ours ([`Service`], over reqwest's), through
//! which every request goes:
//! - **Retries** are its, not `object_store`'s: a refused or cut connection, a timeout of a
//!   safe request, 5xx, 429 and 408 are retried with exponential backoff for `retry_timeout`
//!   (a response's body read whole inside the retry, so a connection cut inside it is retried
//!   too); the lines saying so are rate-limited (`log::allow`: one a second per kind, saying how
//!   many were held back), where `object_store` wrote one per try (57 in a 10 s outage).
//! - **Listing pages** lose the keys no file can be named by (an empty, `.` or `..` part, a
//!   control character, a leading `/`: [`key_is_name`]) before `object_store` parses them: it
//!   refuses such a key, and with it the whole page, so one odd key failed every listing of
//!   its prefix. The keys taken out are counted and kept for the listing to say
//!   ([`Client::take_unnamed`]).
//!
//! A password in the endpoint's URL (`http://user:pass@host`) is never printed: each error
//! and log line naming a request goes through [`Client::scrub`] (the rule the Redis URL is
//! redacted by).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::client::{HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService, ReqwestConnector};
use object_store::{BackoffConfig, ClientOptions, RetryConfig};

use crate::settings::ObjectStoreConfig;

/// The runtime's worker threads: requests wait on the network, not on these.
const RUNTIME_THREADS: usize = 2;

/// How long a drop waits for the runtime's threads to end.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The S3 client and its runtime: see the module documentation.
pub struct Client {
    pub(super) store: AmazonS3,
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
    pub(super) retry_timeout: Duration,
    /// The runtime's threads alive (started and not yet ended): what a test checks a drop by.
    #[cfg_attr(not(test), allow(dead_code))]
    live: Arc<AtomicUsize>,
    /// The keys listing pages held that no file can be named by, taken out of them.
    unnamed: Arc<Mutex<Unnamed>>,
    /// The endpoint's `user:password@` and how it is shown (`user:***@`), if it holds one.
    secret: Option<(String, String)>,
    /// Requests retried (tries after a first), for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) retries: Arc<AtomicUsize>,
}

/// Keys taken out of listing pages: how many, and the first few (to be said).
#[derive(Debug, Default)]
pub(super) struct Unnamed {
    pub(super) count: usize,
    pub(super) first: Vec<String>,
}

/// How many of the keys taken out are kept to be said by name.
const UNNAMED_SAID: usize = 20;

impl Client {
    /// The client for `config`: credentials from the environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, web identity, container and instance
    /// credentials, as `object_store` reads them), else from the shared credentials file
    /// (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`; profile `AWS_PROFILE`, else
    /// `default`); the endpoint and region from the config, else `AWS_ENDPOINT_URL` and
    /// `AWS_REGION`. Each request is retried (5xx, SlowDown, 429, timeouts, refused
    /// connections) with exponential backoff for `retry_timeout_s`, each try bounded by as long.
    pub fn new(config: &ObjectStoreConfig) -> io::Result<Client> {
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
        let secret = secret_of(&endpoint);
        let options = ClientOptions::new()
            .with_allow_http(endpoint.starts_with("http://"))
            .with_timeout(retry_timeout)
            .with_connect_timeout(retry_timeout.min(Duration::from_secs(5)));
        // Retried by our service (see the module documentation): `object_store` tries once.
        let retry = RetryConfig {
            backoff: BackoffConfig { init_backoff: INIT_BACKOFF, max_backoff: MAX_BACKOFF, base: 2.0 },
            max_retries: 0,
            retry_timeout,
        };
        let unnamed = Arc::new(Mutex::new(Unnamed::default()));
        let retries = Arc::new(AtomicUsize::new(0));
        let connector = Connector { retry_timeout, unnamed: Arc::clone(&unnamed), secret: secret.clone(), retries: Arc::clone(&retries) };
        let store = builder
            .with_client_options(options)
            .with_retry(retry)
            .with_http_connector(connector)
            .build()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, scrub(&secret, &format!("{}: {e}", config.url))))?;
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
        Ok(Client { store, runtime: Some(runtime), retry_timeout, live, unnamed, secret, retries })
    }

    /// The keys taken out of the listing pages since the last call (see the module
    /// documentation).
    pub(super) fn take_unnamed(&self) -> Unnamed {
        std::mem::take(&mut *self.unnamed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// `text` (an error, a line naming a request) with the endpoint's password shown as `***`.
    pub(super) fn scrub(&self, text: &str) -> String {
        scrub(&self.secret, text)
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

/// The first wait before a retry, and the longest.
const INIT_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The endpoint's `user:password@` and how it is shown, if it holds a password: by the one
/// rule the Redis URL is redacted by (`cache::remote::redacted`).
fn secret_of(endpoint: &str) -> Option<(String, String)> {
    let shown = prepfs_base::escape::redacted(endpoint);
    if shown == endpoint {
        return None;
    }
    let scheme = endpoint.find("://")? + 3;
    let (at, shown_at) = (endpoint.rfind('@')?, shown.rfind('@')?);
    Some((endpoint[scheme..=at].to_string(), shown[scheme..=shown_at].to_string()))
}

fn scrub(secret: &Option<(String, String)>, text: &str) -> String {
    match secret {
        Some((raw, shown)) => text.replace(raw.as_str(), shown),
        None => text.to_string(),
    }
}

/// Whether an object key can be a path name: not empty, no leading `/`, no empty part (`a//b`),
/// no `.` or `..` part, no control character (a tab, a newline, ...). A directory marker's one
/// trailing `/` (`a/`) is allowed: `object_store` reads it as `a`.
pub(super) fn key_is_name(key: &str) -> bool {
    let key = key.strip_suffix('/').unwrap_or(key);
    !key.is_empty() && !key.starts_with('/') && !key.chars().any(char::is_control) && key.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
}

/// A listing page (ListObjectsV2's XML) without the `<Contents>` of keys that cannot be path
/// names ([`key_is_name`]), and those keys; `None` if it holds none (the page is used as it
/// came).
pub(super) fn without_unnamed_keys(page: &str) -> Option<(String, Vec<String>)> {
    const OPEN: &str = "<Contents>";
    const CLOSE: &str = "</Contents>";
    let (mut out, mut removed, mut rest) = (String::new(), Vec::new(), page);
    while let Some(start) = rest.find(OPEN) {
        let Some(len) = rest[start..].find(CLOSE) else { break };
        let end = start + len + CLOSE.len();
        let block = &rest[start..end];
        out.push_str(&rest[..start]);
        match key_of(block) {
            Some(key) if !key_is_name(&key) => removed.push(key),
            _ => out.push_str(block),
        }
        rest = &rest[end..];
    }
    if removed.is_empty() {
        return None;
    }
    out.push_str(rest);
    Some((out, removed))
}

/// The key of a `<Contents>` element, its XML escapes undone.
fn key_of(block: &str) -> Option<String> {
    let start = block.find("<Key>")? + "<Key>".len();
    let len = block[start..].find("</Key>")?;
    xml_text(&block[start..start + len])
}

/// XML character data with its references undone (`&amp;`, `&lt;`, `&gt;`, `&quot;`,
/// `&apos;`, `&#N;`, `&#xN;`); `None` if a reference is not one.
fn xml_text(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let semi = rest[amp..].find(';')? + amp;
        let name = &rest[amp + 1..semi];
        let c = match name {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let n = match name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                    None => name.strip_prefix('#')?.parse().ok()?,
                };
                char::from_u32(n)?
            }
        };
        out.push(c);
        rest = &rest[semi + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// Makes the HTTP client `object_store` sends through: reqwest's, under [`Service`].
#[derive(Debug)]
struct Connector {
    retry_timeout: Duration,
    unnamed: Arc<Mutex<Unnamed>>,
    secret: Option<(String, String)>,
    retries: Arc<AtomicUsize>,
}

impl HttpConnector for Connector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Service {
            inner,
            retry_timeout: self.retry_timeout,
            unnamed: Arc::clone(&self.unnamed),
            secret: self.secret.clone(),
            retries: Arc::clone(&self.retries),
        }))
    }
}

/// Every request of the store: retried, listing pages cleaned of unnamed keys (see the module
/// documentation).
#[derive(Debug)]
struct Service {
    inner: HttpClient,
    retry_timeout: Duration,
    unnamed: Arc<Mutex<Unnamed>>,
    secret: Option<(String, String)>,
    retries: Arc<AtomicUsize>,
}

impl HttpService for Service {
    // `object_store`'s trait is an `async_trait`: this is its expanded form.
    fn call<'life0, 'async_trait>(&'life0 self, req: HttpRequest) -> Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.send(req))
    }
}

/// Why a try is retried: the kind it is rate-limited by, and in words.
type RetryWhy = (&'static str, String);

impl Service {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let started = Instant::now();
        let listing = req.method().as_str() == "GET" && req.uri().query().is_some_and(|q| q.split('&').any(|p| p == "list-type=2"));
        let safe = req.method().is_safe();
        let mut backoff = INIT_BACKOFF;
        loop {
            let (outcome, why) = self.try_once(req.clone(), safe).await;
            let Some((kind, why)) = why else {
                return match outcome {
                    Ok(response) if listing && response.status().is_success() => self.cleaned(response).await,
                    other => other,
                };
            };
            let elapsed = started.elapsed();
            if elapsed >= self.retry_timeout {
                return outcome;
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            if let Some(held) = prepfs_base::log::allow(kind) {
                let left = (self.retry_timeout - elapsed).as_secs_f64();
                let line = self.scrub(&format!("object store request {} {} failed ({why}); retrying for up to {left:.1} s more", req.method(), req.uri()));
                if held > 0 {
                    tracing::warn!(held_back = held, "{line}");
                } else {
                    tracing::warn!("{line}");
                }
            }
            // A little jitter, so that many readers do not come back at once.
            let jitter = Duration::from_micros(u64::from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_micros())) % 20_000);
            tokio::time::sleep((backoff + jitter).min(self.retry_timeout - elapsed)).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One try: its outcome (a success's body read whole), and why it is to be retried.
    async fn try_once(&self, req: HttpRequest, safe: bool) -> (Result<HttpResponse, HttpError>, Option<RetryWhy>) {
        match self.inner.execute(req).await {
            Ok(response) => {
                let status = response.status();
                let code = status.as_u16();
                if status.is_server_error() || code == 429 || code == 408 {
                    return (Ok(response), Some(("s3-retry-status", format!("answered {status}"))));
                }
                if !status.is_success() {
                    return (Ok(response), None);
                }
                let (parts, body) = response.into_parts();
                match body.bytes().await {
                    Ok(bytes) => (Ok(HttpResponse::from_parts(parts, bytes.into())), None),
                    Err(e) => {
                        let why = retried_transport(&e, safe);
                        (Err(e), why)
                    }
                }
            }
            Err(e) => {
                let why = retried_transport(&e, safe);
                (Err(e), why)
            }
        }
    }

    /// A listing page without the keys no file can be named by (counted and kept).
    async fn cleaned(&self, response: HttpResponse) -> Result<HttpResponse, HttpError> {
        let (mut parts, body) = response.into_parts();
        let bytes = body.bytes().await?;
        let Some((page, removed)) = std::str::from_utf8(&bytes).ok().and_then(without_unnamed_keys) else {
            return Ok(HttpResponse::from_parts(parts, bytes.into()));
        };
        {
            let mut unnamed = self.unnamed.lock().unwrap_or_else(|e| e.into_inner());
            unnamed.count += removed.len();
            let room = UNNAMED_SAID.saturating_sub(unnamed.first.len());
            unnamed.first.extend(removed.into_iter().take(room));
        }
        parts.headers.remove("content-length");
        Ok(HttpResponse::from_parts(parts, page.into()))
    }

    fn scrub(&self, text: &str) -> String {
        scrub(&self.secret, text)
    }
}

/// Why a transport error is retried (a refused or failed connection; a timeout or a cut of a
/// safe request), or `None`.
fn retried_transport(e: &HttpError, safe: bool) -> Option<RetryWhy> {
    let retried = match e.kind() {
        HttpErrorKind::Connect | HttpErrorKind::Request => true,
        HttpErrorKind::Timeout | HttpErrorKind::Interrupted => safe,
        _ => false,
    };
    retried.then(|| ("s3-retry-transport", format!("{:?}: {e}", e.kind())))
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
