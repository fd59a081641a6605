//! `prepfs worker`: this machine's CPUs lent to the mounts that share a remote tier (issue 52;
//! the work itself is `prepfs_core::worker`). Here: the config read as a mount reads it, the
//! source scanned (or its shards indexed, its object store listed) as a mount does, so catalog
//! ids agree; the stop signals; the metrics endpoint; the run, and its end.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prepfs_core::config::{Config, Overrides};
use prepfs_core::worker::{Worker, WorkerError};
use prepfs_source::{LocalSource, SourceIo};

use crate::mount::MountError;

/// What `prepfs worker` was asked.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub config: PathBuf,
    pub source: Option<PathBuf>,
    pub name: Option<String>,
    pub threads: usize,
    pub metrics_addr: Option<String>,
}

/// Why a worker did not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerRunError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error(transparent)]
    Source(#[from] MountError),
    #[error("--metrics-addr {addr}: {source}")]
    Metrics { addr: String, source: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where a config that names no mountpoint is taken to mount for its checks: a worker mounts
/// nothing.
const NO_MOUNTPOINT: &str = "/nonexistent/prepfs-worker-mounts-nothing";

/// Runs a worker until a stop signal (SIGINT, SIGTERM, SIGHUP) and returns the line of what it
/// did. `ready` is called once it takes items.
pub fn run(args: &WorkerArgs, ready: impl FnOnce(&str)) -> Result<String, WorkerRunError> {
    let signals = crate::stop::signal_set();
    signals.thread_block().map_err(|e| WorkerRunError::Io(e.into()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let waiter = {
        let stop = Arc::clone(&stop);
        prepfs_base::tasks::spawn("prepfs-signals".into(), prepfs_base::tasks::REQUEST, move || {
            // Any of the stop signals (or the wake, when the worker ends by itself) ends the wait.
            let _ = signals.wait();
            stop.store(true, Ordering::SeqCst);
        })?
    };
    let ran = serve(args, &stop, ready);
    // The waiter is woken with its own signal if the worker ended by itself.
    if !stop.swap(true, Ordering::SeqCst) {
        // SAFETY: raising a blocked real-time signal to this process: only the waiter takes it.
        unsafe { libc::kill(libc::getpid(), libc::SIGRTMIN()) };
    }
    let _ = waiter.join();
    ran
}

fn serve(args: &WorkerArgs, stop: &Arc<AtomicBool>, ready: impl FnOnce(&str)) -> Result<String, WorkerRunError> {
    let overrides = |mountpoint: Option<PathBuf>| Overrides { source: args.source.clone(), mountpoint, seed: None };
    let config = match Config::check(&args.config, &overrides(None)) {
        Err(e) if e.to_string().contains("mountpoint") && e.to_string().contains("missing") => {
            Config::check(&args.config, &overrides(Some(PathBuf::from(NO_MOUNTPOINT))))
        }
        other => other,
    };
    let config = config.map_err(|e| WorkerRunError::Config(e.to_string()))?;
    if !config.cache.has_remote() {
        return Err(WorkerError::NoRemote.into());
    }
    let name = args.name.clone().unwrap_or_else(default_name);
    let (catalog, io) = catalog_and_io(&config, stop)?;
    let threads = if args.threads == 0 { 1 } else { args.threads };
    let worker = Arc::new(Worker::new(&config, catalog, io, &name, threads)?);
    let mut endpoint = prepfs_base::tasks::Workers::default();
    if let Some(addr) = &args.metrics_addr {
        let listener = std::net::TcpListener::bind(addr.as_str()).map_err(|source| WorkerRunError::Metrics { addr: addr.clone(), source })?;
        tracing::info!(url = %format!("http://{}/metrics", listener.local_addr()?), "metrics endpoint");
        let w = Arc::clone(&worker);
        endpoint.spawn("prepfs-metrics".into(), prepfs_base::tasks::REQUEST, move |own| prepfs_core::metrics::http::serve(listener, own, || w.metrics_text()))?;
    }
    ready(&name);
    let ran = worker.run(stop);
    endpoint.stop();
    endpoint.join();
    ran?;
    Ok(worker.summary())
}

/// HOSTNAME-PID: unique among the workers alive.
fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')).take(48).collect();
    format!("{}-{}", if host.is_empty() { "worker" } else { &host }, std::process::id())
}

/// The catalog of `config`'s source, made as a mount makes it, and the source's I/O.
fn catalog_and_io(config: &Config, stop: &AtomicBool) -> Result<(prepfs_source::catalog::Catalog, Arc<dyn SourceIo>), WorkerRunError> {
    Ok(match (&config.shards, &config.object_store) {
        (Some(shards), _) => {
            let (catalog, shards) = crate::mount::index_shards_with_progress(config, shards, stop)?;
            (catalog, shards.io())
        }
        (None, Some(store)) => {
            let (catalog, store) = crate::mount::list_objects_with_progress(store, config.listing_dir().as_deref(), stop)?;
            (catalog, store.io())
        }
        (None, None) => {
            let catalog = crate::mount::scan_with_progress(&config.source, stop)?;
            let io: Arc<dyn SourceIo> = Arc::new(LocalSource::new(catalog.root())?);
            (catalog, io)
        }
    })
}
