//! What the loader socket (`crate::loader`) asks of the core: the facts a loader needs (the
//! output's shape, ImageFolder's classes), and the next samples of one loader's walk through a
//! job's epoch in one view (`augmented/` or a recipe's), chosen by opportunistic sampling
//! exactly as an open in `jobs/<job>/<view>/` chooses them (each sample once per epoch across every reader of the job, cached first, a
//! substitute from the same directory), produced through the same cache and pixel work, and
//! written into the loader's ring slot as HWC uint8 pixels.
//!
//! Nothing the source's permissions deny the loader's user is written for them: the kernel
//! checks nothing here, so each sample is checked as the kernel checks an open through the
//! mount (`access.rs`: every directory of its path, then the file); a job is joined only by
//! its owner or root, as the job's directory says.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rayon::prelude::*;

use super::access::DirVerdicts;
use super::{Caller, Filesystem, View};
use crate::config::{Dtype, Format};
use crate::error::{Error, Result};
use prepfs_sampling::{Choice, Job};
use prepfs_cache::form::Form;
use prepfs_pixels::draw::draw_rng;
use prepfs_pixels::rgb::Size2;
use prepfs_source::catalog::{DirId, FileId};
use crate::stats::bump;

/// How long a loader's next epoch waits for the job's current one to end (the other loaders of
/// the job to finish their shares).
const EPOCH_WAIT: Duration = Duration::from_secs(60);

/// Why the loader cannot be served by this mount.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoaderRefusal {
    #[error("the loader takes 8-bit outputs (output: ppm, or npy with dtype uint8); this mount's {view} serves float32")]
    Float32 { view: String },
    #[error("the loader takes raw 8-bit pixels (output: ppm, or npy with dtype uint8); this mount's {view} serves {format}")]
    Encoded { view: String, format: &'static str },
    #[error("no view `{name}` on this mount: the loader walks {known}")]
    UnknownView { name: String, known: String },
    #[error("the dataset has no class directories (ImageFolder's layout: ROOT/CLASS/IMAGE)")]
    NoClasses,
    #[error(transparent)]
    Job(#[from] prepfs_sampling::JobError),
    #[error("the job is user {owner}'s; a job is used only by its owner (or root), as its directory jobs/<job> says")]
    NotYours { owner: u32 },
}

/// What a loader is told at its start.
pub(crate) struct LoaderFacts {
    /// The view walked: 0 for `augmented/`, else the recipe's number.
    pub(crate) recipe: u8,
    pub(crate) samples: u64,
    pub(crate) size: Size2,
    /// ImageFolder's classes: the source's top-level directories, sorted.
    pub(crate) classes: Vec<String>,
}

/// One loader's walk through its job's epochs.
pub(crate) struct Walk {
    /// The job's epoch this walk's order is for (0: not begun).
    epoch: u64,
    order: Vec<FileId>,
    next: usize,
    /// Spreads loaders of one job over different orders.
    nonce: u64,
    /// The view walked: 0 for `augmented/`, else the recipe's number.
    recipe: u8,
    /// Which directories the loader's user may search, found anew each epoch.
    dirs: DirVerdicts,
}


/// One batch written into a slot.
pub(crate) struct Filled {
    pub(crate) labels: Vec<i64>,
    pub(crate) names: Vec<String>,
    /// The walk's share of the epoch is served.
    pub(crate) end: bool,
}

impl Filesystem {
    /// Up to `want` samples of the walk, chosen and claimed for the job (see
    /// [`Filesystem::loader_fill`]).
    fn loader_choose(&self, job: &Job, walk: &mut Walk, want: usize) -> Vec<Choice> {
        let catalog = self.catalog();
        let view = View::recipe(walk.recipe, job.code());
        let mut chosen = Vec::with_capacity(want);
        while chosen.len() < want && walk.next < walk.order.len() {
            if job.epoch() != walk.epoch {
                // The job's epoch is over (the other readers served the rest): so is the walk's.
                walk.next = walk.order.len();
                break;
            }
            let requested = walk.order[walk.next];
            walk.next += 1;
            if job.has_seen(requested) {
                continue;
            }
            let dir = catalog.file_dir(requested);
            let choice = self.choose_within_epoch(job, walk.epoch, view, requested, catalog.images(dir));
            if !choice.claimed {
                continue;
            }
            if choice.substituted {
                // Served another in its place: the request's turn comes again at the end.
                walk.order.push(requested);
            }
            bump(&job.counters.opens, 1);
            chosen.push(choice);
        }
        chosen
    }

    /// The facts a loader of `view` (`augmented`, the default, or a recipe's name) needs, or
    /// why this mount cannot serve one: the loader writes raw 8-bit pixels into its ring, so a
    /// view whose files are float32 or compressed (png, jpeg) is refused, not served as bytes
    /// of another shape.
    pub(crate) fn loader_facts(&self, view: Option<&str>) -> std::result::Result<LoaderFacts, LoaderRefusal> {
        let name = view.unwrap_or("augmented");
        // The views a loader walks are the root's that serve pixels of one shape: `augmented/`
        // and each recipe's (`views_in`, the one list of what a directory of views holds).
        let walkable: Vec<(View, &str)> = self.views_in(0).into_iter().filter(|(v, _)| v.form == Form::Augmented).collect();
        let Some(recipe) = walkable.iter().find(|(_, n)| *n == name).map(|(v, _)| v.recipe) else {
            let known: Vec<String> = walkable.iter().map(|(_, n)| format!("`{n}`")).collect();
            return Err(LoaderRefusal::UnknownView { name: name.to_owned(), known: known.join(", ") });
        };
        let output = self.view_output(View::recipe(recipe, 0));
        match output.format {
            Format::Npy if output.dtype == Dtype::Float32 => return Err(LoaderRefusal::Float32 { view: format!("{name}/") }),
            Format::Png | Format::Jpeg => return Err(LoaderRefusal::Encoded { view: format!("{name}/"), format: output.extension() }),
            Format::Ppm | Format::Npy => {}
        }
        let catalog = self.catalog();
        let classes: Vec<String> = catalog.subdirs(0).map(|d| catalog.dir_name(d).to_string_lossy().into_owned()).collect();
        if classes.is_empty() {
            return Err(LoaderRefusal::NoClasses);
        }
        let samples = self.loader_samples().len() as u64;
        Ok(LoaderFacts { recipe, samples, size: self.producer.recipe_size(recipe), classes })
    }

    /// The samples a loader walks: the images inside a class directory, as ImageFolder lists.
    fn loader_samples(&self) -> Vec<FileId> {
        let catalog = self.catalog();
        (0..catalog.file_count() as FileId).filter(|&f| catalog.is_image(f) && self.class_of(catalog.file_dir(f)).is_some()).collect()
    }

    /// The class (index among the root's directories) a directory's samples belong to.
    fn class_of(&self, mut dir: DirId) -> Option<i64> {
        let catalog = self.catalog();
        while dir != 0 {
            let parent = catalog.dir_parent(dir);
            if parent == 0 {
                let first = catalog.subdirs(0).start;
                return Some(i64::from(dir - first));
            }
            dir = parent;
        }
        None
    }

    /// The job named `name` for a loader run by `caller`, made at first use as a job
    /// directory's is (within `jobs.max` and the per-user limit); another user's job is
    /// refused, as its directory refuses them.
    pub(crate) fn loader_job(&self, name: &str, caller: Caller) -> std::result::Result<Arc<Job>, LoaderRefusal> {
        let job = self.jobs.get_or_create(name.as_bytes(), self.requester(caller))?;
        self.check_may_join(&job, caller).map_err(|_| LoaderRefusal::NotYours { owner: job.owner() })?;
        Ok(job)
    }

    /// A loader's walk through `job`'s epochs in view `recipe` (0: `augmented/`), and the job's
    /// sampling state it walks: in a recipe's view, the job's own state there, as an open's.
    pub(crate) fn loader_walk(&self, job: &Arc<Job>, recipe: u8, nonce: u64) -> (Arc<Job>, Walk) {
        let state = self.job_in_view(job, View::recipe(recipe, job.code()));
        (state, Walk { epoch: 0, order: Vec::new(), next: 0, nonce, recipe, dirs: DirVerdicts::default() })
    }

    /// Begins the walk's next epoch: after its first, it waits (up to [`EPOCH_WAIT`], or
    /// `stop`) until the job's epoch it walked is over, then walks the job's current epoch in
    /// an order of its own. Returns the job's epoch (from 1).
    pub(crate) fn loader_begin(&self, job: &Job, walk: &mut Walk, stop: &AtomicBool) -> u64 {
        if walk.epoch != 0 {
            let started = Instant::now();
            while job.epoch() == walk.epoch && started.elapsed() < EPOCH_WAIT && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        walk.epoch = job.epoch();
        walk.order = self.loader_samples();
        walk.order.shuffle(&mut draw_rng(self.config().seed, walk.nonce, walk.epoch, 0x10ad));
        walk.next = 0;
        walk.dirs.clear();
        job.touch(self.jobs.now_ms());
        walk.epoch
    }

    /// Writes the walk's next samples into `slot` (room for `batch` samples of the output's
    /// size) for `caller`: each request of the walk is chosen as an open in the job's
    /// `augmented/` view is (never beginning the next epoch: a request whose directory has
    /// nothing left is passed over); the chosen samples are produced in parallel, each into its
    /// place in the slot, and served to the job. Samples that fail or that the caller may not
    /// read are passed over (a bad one counts as the job's), and the rest close up.
    pub(crate) fn loader_fill(&self, job: &Arc<Job>, walk: &mut Walk, caller: Caller, slot: &mut [u8], batch: usize) -> Filled {
        let catalog = self.catalog();
        let pixels = self.producer.recipe_size(walk.recipe).area() as usize * 3;
        let mut filled = Filled { labels: Vec::with_capacity(batch), names: Vec::with_capacity(batch), end: false };
        loop {
            let have = filled.labels.len();
            let mut chosen = self.loader_choose(job, walk, batch - have);
            if chosen.is_empty() {
                break;
            }
            // The directories on each one's path, as the kernel checks them (kept per epoch);
            // a sample the caller may not reach goes back to the job for its other readers.
            chosen.retain(|choice| {
                let reachable = self.check_path_as_kernel(choice.sample, caller, &mut walk.dirs).is_ok();
                if !reachable {
                    job.unclaim(choice.sample);
                    bump(&self.stats().loader.denied, 1);
                }
                reachable
            });
            // Produced in parallel (the fill pool's threads), each into its own place.
            let room = &mut slot[have * pixels..(have + chosen.len()) * pixels];
            let produced: Vec<Result<bool>> = self.fill.install(|| {
                chosen
                .par_iter()
                .zip(room.par_chunks_mut(pixels))
                .map(|(choice, place)| {
                    let sample = self.resolve(choice.sample)?;
                    self.check_file_as_kernel(&sample.meta, caller)?;
                    let (bytes, origin) = self.producer.output(walk.recipe, &sample, self.job_consumer(job, walk.recipe, sample.id))?;
                    bytes.copy_tail_into(place).map_err(|e| Error::source_io(&sample.path, e))?;
                    Ok(origin.is_miss())
                })
                .collect()
            });
            for (k, (choice, result)) in chosen.iter().zip(produced).enumerate() {
                let miss = match result {
                    Ok(miss) => miss,
                    Err(Error::Denied) => {
                        job.unclaim(choice.sample);
                        bump(&self.stats().loader.denied, 1);
                        continue;
                    }
                    Err(_) => {
                        // Refused or unreadable: the job's for this epoch, as a job view's open.
                        job.mark_served(choice.sample, true);
                        bump(&job.counters.bad_skipped, 1);
                        continue;
                    }
                };
                job.mark_served(choice.sample, true);
                // Close up behind samples passed over.
                let (at, to) = ((have + k) * pixels, filled.labels.len() * pixels);
                if at != to {
                    slot.copy_within(at..at + pixels, to);
                }
                bump(if miss { &job.counters.misses } else { &job.counters.hits_augmented }, 1);
                if choice.substituted {
                    bump(&job.counters.substitutions, 1);
                }
                filled.labels.push(self.class_of(catalog.file_dir(choice.sample)).unwrap_or(-1));
                let path = catalog.file_path(choice.sample);
                filled.names.push(path.strip_prefix(catalog.root()).unwrap_or(&path).to_string_lossy().into_owned());
            }
            if filled.labels.len() >= batch {
                break;
            }
        }
        filled.end = walk.next >= walk.order.len();
        job.touch(self.jobs.now_ms());
        bump(&self.stats().loader.batches, 1);
        bump(&self.stats().loader.samples, filled.labels.len() as u64);
        filled
    }
}
