//! Kernel FUSE passthrough, the core's half: whether it is on, and what an open file's reads
//! may go to instead of the daemon ([`Backing`]): the source file itself (`encoded/`), or the
//! file of its own holding a produced output's bytes (`prepfs_pixels::served::OutputFile`: an unnamed file
//! in the mount's own tmpfs, or a sealed memfd where that cannot be made).
//!
//! The adapter (`fuse/mod.rs`, `fuse/backings.rs`) owns the other half: it registers a backing file with the kernel
//! (`FUSE_DEV_IOC_BACKING_OPEN`), answers the open with the id, and closes the id at release.
//!
//! The kernel keeps one backing file per inode while any passthrough open of it lasts, and
//! fails an open of that inode with another backing file, or without one (`fs/fuse/iomode.c`).
//! So while passthrough is on, every open of one inode made while another is open shares that
//! open's handle (and so its content): in `augmented/` the same draw, in a job's view the same
//! served sample (as PIL's double open already did). The share ends at the last release. A
//! source file changed while a handle of it is open is therefore served as that handle has it
//! to the opens that overlap it (the kernel would fail them otherwise); the first open after
//! the last release serves the new version, and the change is noticed (and the kernel told)
//! at once either way.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::handles::{Content, Handle, HandleData};
use super::Filesystem;
use prepfs_pixels::served::{OutputFile, OutputFiles};

/// Whether opens are answered with backing files, why not when they are not, and the files
/// outputs are served from with passthrough (made, counted, closed when spent).
pub(super) struct PassthroughState {
    on: AtomicBool,
    /// Why passthrough is off, said once (the configuration, the kernel or the privileges).
    off_because: OnceLock<String>,
    output_files: Arc<OutputFiles>,
}

impl PassthroughState {
    /// Off until the kernel grants it at init; off for good when `configured` is false.
    pub(super) fn new(configured: bool, output_files: Arc<OutputFiles>) -> Self {
        let off_because = OnceLock::new();
        if !configured {
            let _ = off_because.set("turned off (`passthrough: false`, --no-passthrough)".to_string());
        }
        PassthroughState { on: AtomicBool::new(false), off_because, output_files }
    }
}

/// What the kernel may read an open file from: the file behind one open handle. Handles
/// shared by concurrent opens of one inode are one [`Backing`] (the same [`Backing::key`]).
pub struct Backing(Arc<Handle>);

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backing({:#x})", self.key())
    }
}

impl Backing {
    /// The file to register with the kernel.
    pub fn file(&self) -> Option<&File> {
        self.0.backing_file()
    }

    /// Identifies the backing file while this value lives: equal for opens sharing a handle.
    pub fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}

impl Handle {
    /// The file the kernel may read this handle's content from.
    pub(super) fn backing_file(&self) -> Option<&File> {
        match &self.data {
            HandleData::Source { file } => file.as_file(),
            HandleData::Bytes { content: Content::File(file), .. } => Some(file.file()),
            HandleData::Bytes { content: Content::Memory(_), .. } => None,
            HandleData::Listing(_) | HandleData::Control(_) => None,
        }
    }
}

impl Filesystem {
    /// Turns passthrough on (the kernel granted `FUSE_PASSTHROUGH` at init), unless the
    /// configuration turned it off.
    pub fn enable_passthrough(&self) {
        match self.passthrough.off_because.get() {
            None => {
                self.passthrough.on.store(true, Ordering::Release);
                self.producer.seal_outputs(true);
                tracing::info!("kernel passthrough is on: reads of open files go straight to their backing files");
            }
            Some(why) => tracing::info!("kernel passthrough is {why}"),
        }
    }

    /// Whether the configuration lets the mount ask the kernel for passthrough.
    pub fn passthrough_wanted(&self) -> bool {
        self.config().passthrough
    }

    /// Turns passthrough off for the rest of the mount, saying why (once, in the log and in
    /// `stats.json`). Opens already answered with a backing file keep it.
    pub fn disable_passthrough(&self, why: String) {
        self.passthrough.on.store(false, Ordering::Release);
        self.producer.seal_outputs(false);
        if self.passthrough.off_because.set(why.clone()).is_ok() {
            tracing::warn!("kernel passthrough is off: {why}; reads are served by the daemon");
        }
    }

    /// Whether opens are answered with backing files.
    pub(crate) fn passthrough_on(&self) -> bool {
        self.passthrough.on.load(Ordering::Acquire)
    }

    /// Whether passthrough is on, or why not, for `stats.json`.
    pub(super) fn passthrough_json(&self) -> serde_json::Value {
        // Whether it is on and its counts are the registry's (`metrics::defs`).
        serde_json::json!({
            "off_because": self.passthrough.off_because.get(),
            // Outputs held in files of their own: in the cache, ready to pass through, and
            // those of open handles; and where those files are made.
            "memory_files": self.passthrough.output_files.live(),
            "output_files_in": self.passthrough.output_files.kind(),
        })
    }

    /// The backing of an open handle, when passthrough is on and the handle has a file to offer.
    /// A source read limit keeps `encoded/` reads coming through the daemon (to be throttled).
    pub(super) fn backing_of(&self, handle: &Arc<Handle>) -> Option<Backing> {
        let throttled = matches!(handle.data, HandleData::Source { .. }) && self.reader.read_limit().is_some();
        (self.passthrough_on() && !throttled && handle.backing_file().is_some()).then(|| Backing(Arc::clone(handle)))
    }

    /// An output file holding `bytes`, when passthrough is on (`None` otherwise, or when the
    /// file cannot be made: the handle is then served by the daemon).
    pub(super) fn output_file_for(&self, bytes: &[u8]) -> Option<OutputFile> {
        if !self.passthrough_on() {
            return None;
        }
        self.passthrough.output_files.try_make(bytes)
    }

    /// The mount's output files (the mount runs their closer).
    pub fn output_files(&self) -> &Arc<OutputFiles> {
        &self.passthrough.output_files
    }
}
