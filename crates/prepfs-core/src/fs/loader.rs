//! What the loader socket (`crate::loader`) asks of the core: the facts a loader needs (the
//! output's shape, ImageFolder's classes), and the next samples of one loader's walk through a
//! job's epoch in one view (`augmented/` or a recipe's), chosen by opportunistic sampling
//! exactly as an open in `jobs/<job>/<view>/` chooses them (each sample once per epoch across every reader of the job, cached first, a
//! substitute from the same directory), produced through the same cache and pixel work, and
//! written into the loader's ring slot as HWC uint8 pixels.
//!
//! Each begin (`iter()` in Python) is the loader's next epoch, whether it walked the last one
//! through or left it part way. A walk counts as walking its job's epoch from its begin until it
//! is walked through, begun again, or dropped with its connection; a begin waits only while
//! another walk is in the epoch it leaves (ranks begin each epoch together), and an epoch that
//! no walk is in and no open holds a claim in is ended then, served or not, so a loader never
//! waits on itself ([`Filesystem::loader_begin`]).
//!
//! A loader restarted from its saved state (`prepfs.Loader.load_state_dict`), or reconnected to
//! a restarted daemon, resumes instead of beginning: the job's epoch is set to the one it names
//! with exactly the samples it yielded served, and its walk serves the rest
//! ([`Filesystem::loader_resume`]). Samples travel by index, their place among the loader's
//! samples in catalog order ([`Filesystem::loader_samples`]), fingerprinted in the facts.
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

/// How long a loader's next epoch waits for the job's current one to end while other loaders
/// of the job still walk it (finishing their shares); past it, the loader walks what is left of
/// the current epoch.
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
    #[error("a job shared across mounts (jobs.shared) cannot be resumed: its epochs are the shared store's")]
    SharedResume,
    #[error("epoch {epoch} cannot be resumed: epochs count from 1")]
    NoEpoch { epoch: u64 },
}

/// What a loader is told at its start.
pub(crate) struct LoaderFacts {
    /// The view walked: 0 for `augmented/`, else the recipe's number.
    pub(crate) recipe: u8,
    pub(crate) samples: u64,
    /// The samples' fingerprint: their paths in index order, hashed.
    pub(crate) dataset: u64,
    pub(crate) size: Size2,
    /// ImageFolder's classes: the source's top-level directories, sorted.
    pub(crate) classes: Vec<String>,
}

/// One loader's walk through its job's epochs.
pub(crate) struct Walk {
    /// The job's epoch this walk's order is for (0: not begun).
    epoch: u64,
    /// The loader's samples in catalog order: a sample's index is its place here.
    samples: Vec<FileId>,
    order: Vec<FileId>,
    next: usize,
    /// Spreads loaders of one job over different orders.
    nonce: u64,
    /// The view walked: 0 for `augmented/`, else the recipe's number.
    recipe: u8,
    /// Which directories the loader's user may search, found anew each epoch.
    dirs: DirVerdicts,
    /// The walk is in progress in the job's epoch `epoch`: counted there (the job's epoch is
    /// not ended for want of walkers while it is) until its order is walked through, the
    /// loader begins again, or the connection ends (the walk is dropped).
    walking: Option<Walking>,
}

/// A walk counted in progress in its job's epoch ([`Job::walk_begun`]) until dropped.
struct Walking {
    job: Arc<Job>,
    epoch: u64,
}

impl Drop for Walking {
    fn drop(&mut self) {
        self.job.walk_ended(self.epoch);
    }
}


/// One batch written into a slot.
pub(crate) struct Filled {
    pub(crate) labels: Vec<i64>,
    pub(crate) names: Vec<String>,
    /// The samples' indices among the loader's samples.
    pub(crate) ids: Vec<u64>,
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
        let samples = self.loader_samples();
        let dataset = self.loader_fingerprint(&samples);
        Ok(LoaderFacts { recipe, samples: samples.len() as u64, dataset, size: self.producer.recipe_size(recipe), classes })
    }

    /// The fingerprint of the loader's samples: their paths below the source's root, in index
    /// order, hashed (FNV-1a, the same on every build). A saved state is resumed only on the
    /// dataset it was taken on, whose samples have the same indices.
    fn loader_fingerprint(&self, samples: &[FileId]) -> u64 {
        let catalog = self.catalog();
        let mut hash = prepfs_base::hash::fnv1a64(&[&(samples.len() as u64).to_le_bytes()]);
        let mut dir = None;
        for &sample in samples {
            let d = catalog.file_dir(sample);
            if dir != Some(d) {
                dir = Some(d);
                let path = catalog.dir_path(d);
                let below = path.strip_prefix(catalog.root()).unwrap_or(&path);
                hash = prepfs_base::hash::fnv1a64(&[&hash.to_le_bytes(), b"/", below.as_os_str().as_encoded_bytes()]);
            }
            hash = prepfs_base::hash::fnv1a64(&[&hash.to_le_bytes(), b"\0", catalog.file_name(sample).as_encoded_bytes()]);
        }
        hash
    }

    /// The samples a loader walks: the images inside a class directory, as ImageFolder lists,
    /// in catalog order (a sample's index is its place here).
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
        (state, Walk { epoch: 0, samples: Vec::new(), order: Vec::new(), next: 0, nonce, recipe, dirs: DirVerdicts::default(), walking: None })
    }

    /// Begins the walk's next epoch (each `iter()` of a loader is one), and returns the job's
    /// epoch it walks (from 1). The walk's earlier epoch, walked through or left part way
    /// (`for batch in loader: break`), is over for it: it no longer walks it. While other
    /// loaders of the job still walk that epoch, it waits (up to [`EPOCH_WAIT`], or `stop`)
    /// until they have served it, so data-parallel ranks begin each epoch together; once none
    /// does, and no open holds a claim in it, the epoch is ended, served or not
    /// ([`Job::end_epoch_unless_walked`]): a loader alone on its job never waits on itself,
    /// and its new epoch is a whole one. It then walks the job's current epoch in an order of
    /// its own.
    pub(crate) fn loader_begin(&self, job: &Arc<Job>, walk: &mut Walk, stop: &AtomicBool) -> u64 {
        walk.walking = None;
        if walk.epoch != 0 {
            let started = Instant::now();
            while !job.end_epoch_unless_walked(walk.epoch) && started.elapsed() < EPOCH_WAIT && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let epoch = job.walk_begun();
        self.start_walk(job, walk, epoch, self.loader_samples())
    }

    /// The walk, counted in progress in the job's `epoch` (by [`Job::walk_begun`] or
    /// [`Job::resume_walk`]), walks it in an order of its own; returns `epoch`.
    fn start_walk(&self, job: &Arc<Job>, walk: &mut Walk, epoch: u64, samples: Vec<FileId>) -> u64 {
        walk.epoch = epoch;
        walk.walking = Some(Walking { job: Arc::clone(job), epoch });
        walk.order.clone_from(&samples);
        walk.samples = samples;
        walk.order.shuffle(&mut draw_rng(self.config().seed, walk.nonce, walk.epoch, 0x10ad));
        walk.next = 0;
        walk.dirs.clear();
        job.touch(self.jobs.now_ms());
        walk.epoch
    }

    /// Resumes the job's epoch `epoch` for a loader of `caller` (the job's owner or root, as a
    /// reset) whose saved state says it was served the samples whose indices `served` holds
    /// (a bitset over the loader's samples, [`prepfs_wire::served`]), and begins the walk there:
    /// it serves the rest of the epoch, each sample once. The job's epoch is set to exactly
    /// that, or, where another loader of the job walks that epoch already, `served` is added to
    /// it ([`Job::resume_walk`]). Returns the epoch walked: the next one where `served` held
    /// every sample. The walk must not have begun (a connection resumes once, first).
    pub(crate) fn loader_resume(&self, job: &Arc<Job>, walk: &mut Walk, caller: Caller, epoch: u64, served: &[u8]) -> std::result::Result<u64, LoaderRefusal> {
        self.check_may_join(job, caller).map_err(|_| LoaderRefusal::NotYours { owner: job.owner() })?;
        if job.is_shared() {
            return Err(LoaderRefusal::SharedResume);
        }
        if epoch == 0 {
            return Err(LoaderRefusal::NoEpoch { epoch });
        }
        let samples = self.loader_samples();
        let ids: Vec<FileId> = samples.iter().enumerate().filter(|(i, _)| prepfs_wire::served::has(served, *i as u64)).map(|(_, &s)| s).collect();
        walk.walking = None;
        let now = job.resume_walk(epoch, &ids);
        tracing::info!(job = job.name(), epoch, served = ids.len(), walked = now, "loader resumed its epoch");
        Ok(self.start_walk(job, walk, now, samples))
    }

    /// Writes the walk's next samples into `slot` (room for `batch` samples of the output's
    /// size) for `caller`: each request of the walk is chosen as an open in the job's
    /// `augmented/` view is (never beginning the next epoch: a request whose directory has
    /// nothing left is passed over); the chosen samples are produced in parallel, each into its
    /// place in the slot, and served to the job. Samples that fail or that the caller may not
    /// read are passed over (a bad one counts as the job's), and the rest close up.
    pub(crate) fn loader_fill(&self, job: &Arc<Job>, walk: &mut Walk, caller: Caller, slot: &mut [u8], batch: usize) -> Filled {
        self.note_reader();
        let catalog = self.catalog();
        let pixels = self.producer.recipe_size(walk.recipe).area() as usize * 3;
        let mut filled = Filled { labels: Vec::with_capacity(batch), names: Vec::with_capacity(batch), ids: Vec::with_capacity(batch), end: false };
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
                // Every sample chosen is one of the walk's (a substitute is of the same directory).
                filled.ids.push(walk.samples.binary_search(&choice.sample).map_or(u64::MAX, |i| i as u64));
                let path = catalog.file_path(choice.sample);
                filled.names.push(path.strip_prefix(catalog.root()).unwrap_or(&path).to_string_lossy().into_owned());
            }
            if filled.labels.len() >= batch {
                break;
            }
        }
        filled.end = walk.next >= walk.order.len();
        if filled.end {
            // Walked through: the rest of the epoch is no longer this walk's to serve.
            walk.walking = None;
        }
        job.touch(self.jobs.now_ms());
        bump(&self.stats().loader.batches, 1);
        bump(&self.stats().loader.samples, filled.labels.len() as u64);
        filled
    }
}

#[cfg(test)]
mod tests {
    //! A loader's epochs (`loader_begin`): each begin is a new epoch of the loader; one walking
    //! its job alone never waits on itself, and loaders sharing a job begin each epoch together.
    //! Every wait here ends on an event (a walk served, left or dropped), never on a clock.

    use super::*;
    use crate::fs::tests::core;

    const SAMPLES: usize = 6;
    const BATCH: usize = 2;
    const CACHE: &str = "cache: { memory: 64MiB, split: 0-0-100, refill: false }\n";

    /// A loader's walk of job `name` and a slot to fill, as a connection holds them.
    fn loader(fs: &Filesystem, name: &str, nonce: u64) -> (Arc<Job>, Walk, Vec<u8>) {
        let facts = fs.loader_facts(None).expect("facts");
        let job = fs.loader_job(name, Caller::ROOT).expect("job");
        let (job, walk) = fs.loader_walk(&job, facts.recipe, nonce);
        (job, walk, vec![0u8; BATCH * facts.size.area() as usize * 3])
    }

    /// One batch of the walk: its samples' names.
    fn batch(fs: &Filesystem, job: &Arc<Job>, walk: &mut Walk, slot: &mut [u8]) -> (Vec<String>, bool) {
        let filled = fs.loader_fill(job, walk, Caller::ROOT, slot, BATCH);
        (filled.names, filled.end)
    }

    /// The rest of the walk's epoch: its samples' names.
    fn rest(fs: &Filesystem, job: &Arc<Job>, walk: &mut Walk, slot: &mut [u8]) -> Vec<String> {
        let mut names = Vec::new();
        loop {
            let (got, end) = batch(fs, job, walk, slot);
            names.extend(got);
            if end {
                return names;
            }
        }
    }

    fn every_sample_once(mut names: Vec<String>) {
        names.sort();
        let all: Vec<String> = (0..SAMPLES).map(|i| format!("c0/s{i:03}.jpg")).collect();
        assert_eq!(names, all, "not every sample exactly once");
    }

    #[test]
    fn a_loader_alone_on_its_job_that_leaves_an_epoch_part_way_begins_a_whole_new_one_at_once() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut walk, mut slot) = loader(&fs, "alone", 1);
        let stop = AtomicBool::new(false);
        assert_eq!(fs.loader_begin(&job, &mut walk, &stop), 1);
        let (first, end) = batch(&fs, &job, &mut walk, &mut slot);
        assert_eq!((first.len(), end), (BATCH, false));
        // `for batch in loader: break`, then `for batch in loader:` again: the next epoch, whole,
        // with nothing left to wait for (before: a minute's wait on itself, then the old epoch's rest).
        assert_eq!(fs.loader_begin(&job, &mut walk, &stop), 2);
        every_sample_once(rest(&fs, &job, &mut walk, &mut slot));
        // Walked through: the next begin does not wait either.
        assert_eq!(fs.loader_begin(&job, &mut walk, &stop), 3);
        every_sample_once(rest(&fs, &job, &mut walk, &mut slot));
    }

    #[test]
    fn a_loader_that_leaves_its_epoch_waits_for_the_one_still_walking_it_to_serve_the_rest() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut a, mut slot_a) = loader(&fs, "ranks", 1);
        let (_, mut b, mut slot_b) = loader(&fs, "ranks", 2);
        let stop = AtomicBool::new(false);
        assert_eq!((fs.loader_begin(&job, &mut a, &stop), fs.loader_begin(&job, &mut b, &stop)), (1, 1));
        let mut served = batch(&fs, &job, &mut a, &mut slot_a).0;
        served.extend(batch(&fs, &job, &mut b, &mut slot_b).0);
        std::thread::scope(|s| {
            // A leaves epoch 1 and begins again: it waits while B walks epoch 1 ...
            let waiting = s.spawn(|| fs.loader_begin(&job, &mut a, &stop));
            // ... which B serves to its end (had A ended it, B's walk would stop short) ...
            served.extend(rest(&fs, &job, &mut b, &mut slot_b));
            // ... and then begins epoch 2, as B does.
            assert_eq!(waiting.join().expect("a's begin"), 2);
        });
        every_sample_once(served);
        assert_eq!(fs.loader_begin(&job, &mut b, &stop), 2);
    }

    #[test]
    fn loaders_that_all_leave_an_epoch_part_way_begin_the_next_together_and_split_it() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut a, mut slot_a) = loader(&fs, "lockstep", 1);
        let (_, mut b, mut slot_b) = loader(&fs, "lockstep", 2);
        let stop = AtomicBool::new(false);
        fs.loader_begin(&job, &mut a, &stop);
        fs.loader_begin(&job, &mut b, &stop);
        batch(&fs, &job, &mut a, &mut slot_a);
        batch(&fs, &job, &mut b, &mut slot_b);
        // Both ranks stop at the same step (a max-steps loop) and iterate again: A waits on B,
        // B (the last walking epoch 1) ends it, and both begin epoch 2.
        std::thread::scope(|s| {
            let waiting = s.spawn(|| fs.loader_begin(&job, &mut a, &stop));
            assert_eq!(fs.loader_begin(&job, &mut b, &stop), 2);
            assert_eq!(waiting.join().expect("a's begin"), 2);
        });
        // Epoch 2 is split between them, one batch each in turn, each sample once.
        let (mut served, mut ended) = (Vec::new(), (false, false));
        while !(ended.0 && ended.1) {
            if !ended.0 {
                let (names, end) = batch(&fs, &job, &mut a, &mut slot_a);
                served.extend(names);
                ended.0 = end;
            }
            if !ended.1 {
                let (names, end) = batch(&fs, &job, &mut b, &mut slot_b);
                served.extend(names);
                ended.1 = end;
            }
        }
        every_sample_once(served);
        assert_eq!(job.epoch(), 3, "epoch 2 served whole");
    }

    #[test]
    fn a_loader_whose_connection_ended_part_way_through_an_epoch_keeps_no_other_waiting() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut a, mut slot_a) = loader(&fs, "gone", 1);
        let (_, mut b, mut slot_b) = loader(&fs, "gone", 2);
        let stop = AtomicBool::new(false);
        fs.loader_begin(&job, &mut a, &stop);
        fs.loader_begin(&job, &mut b, &stop);
        batch(&fs, &job, &mut a, &mut slot_a);
        batch(&fs, &job, &mut b, &mut slot_b);
        drop(a); // its connection ended: the walk is dropped with it
        assert_eq!(fs.loader_begin(&job, &mut b, &stop), 2);
        every_sample_once(rest(&fs, &job, &mut b, &mut slot_b));
    }

    /// A bitset over the loader's samples holding `ids` ([`prepfs_wire::served`]).
    fn bits(ids: &[u64]) -> Vec<u8> {
        let mut bits = vec![0u8; prepfs_wire::served::bitset_len(SAMPLES as u64)];
        for &i in ids {
            assert!(prepfs_wire::served::put(&mut bits, i), "sample {i} twice");
        }
        bits
    }

    #[test]
    fn a_loader_resumed_with_what_it_yielded_walks_the_rest_of_its_epoch_exactly_once() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut a, mut slot) = loader(&fs, "resumed", 1);
        let stop = AtomicBool::new(false);
        assert_eq!(fs.loader_begin(&job, &mut a, &stop), 1);
        // One batch yielded to the training loop (its checkpoint), one more the daemon served
        // that the loop never saw (lost in the crash), then the connection ends.
        let yielded = fs.loader_fill(&job, &mut a, Caller::ROOT, &mut slot, BATCH);
        let lost = fs.loader_fill(&job, &mut a, Caller::ROOT, &mut slot, BATCH);
        assert_eq!((yielded.ids.len(), lost.ids.len()), (BATCH, BATCH));
        let facts = fs.loader_facts(None).expect("facts");
        for (id, name) in yielded.ids.iter().zip(&yielded.names) {
            let path = fs.catalog().file_path(fs.loader_samples()[*id as usize]);
            assert!(path.ends_with(name), "index {id} is not {name}");
        }
        assert_eq!(facts.samples, SAMPLES as u64);
        drop(a);
        // The restarted run: a fresh connection resumes epoch 1 with what was yielded.
        let (_, mut b, mut slot_b) = loader(&fs, "resumed", 2);
        assert_eq!(fs.loader_resume(&job, &mut b, Caller::ROOT, 1, &bits(&yielded.ids)).expect("resumed"), 1);
        let mut served = yielded.names.clone();
        let remaining = rest(&fs, &job, &mut b, &mut slot_b);
        assert!(lost.names.iter().all(|n| remaining.contains(n)), "the batch never yielded is served again");
        served.extend(remaining);
        every_sample_once(served);
        // The epoch after it is whole, as after any epoch.
        assert_eq!(fs.loader_begin(&job, &mut b, &stop), 2);
        every_sample_once(rest(&fs, &job, &mut b, &mut slot_b));
    }

    #[test]
    fn a_resume_past_the_end_of_its_epoch_walks_the_next_one_whole() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut walk, mut slot) = loader(&fs, "ended", 1);
        let all: Vec<u64> = (0..SAMPLES as u64).collect();
        // A fresh daemon (the job's epoch 1) told that epoch 4 was served whole: epoch 5.
        assert_eq!(fs.loader_resume(&job, &mut walk, Caller::ROOT, 4, &bits(&all)).expect("resumed"), 5);
        every_sample_once(rest(&fs, &job, &mut walk, &mut slot));
        assert_eq!(job.epoch(), 6, "epoch 5 served whole");
    }

    #[test]
    fn ranks_resuming_one_after_the_other_add_what_each_yielded_and_split_the_rest() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut a, mut slot_a) = loader(&fs, "ranks-resumed", 1);
        let (_, mut b, mut slot_b) = loader(&fs, "ranks-resumed", 2);
        // A fresh daemon (epoch 1): the first rank's resume sets epoch 3 with its sample; the
        // second, finding the first walking epoch 3, adds its own.
        assert_eq!(fs.loader_resume(&job, &mut a, Caller::ROOT, 3, &bits(&[0])).expect("a"), 3);
        assert_eq!(fs.loader_resume(&job, &mut b, Caller::ROOT, 3, &bits(&[5])).expect("b"), 3);
        let mut served = vec!["c0/s000.jpg".to_owned(), "c0/s005.jpg".to_owned()];
        served.extend(rest(&fs, &job, &mut a, &mut slot_a));
        served.extend(rest(&fs, &job, &mut b, &mut slot_b));
        every_sample_once(served);
    }

    #[test]
    fn a_resume_by_a_user_other_than_the_jobs_owner_or_of_no_epoch_is_refused() {
        let (_dir, fs) = core(SAMPLES, CACHE);
        let (job, mut walk, _) = loader(&fs, "theirs", 1);
        let other = Caller { uid: 4242, gid: 4242 };
        let refused = fs.loader_resume(&job, &mut walk, other, 1, &bits(&[])).expect_err("not the owner");
        assert!(matches!(refused, LoaderRefusal::NotYours { .. }), "{refused}");
        let refused = fs.loader_resume(&job, &mut walk, Caller::ROOT, 0, &bits(&[])).expect_err("epoch 0");
        assert!(refused.to_string().contains("epochs count from 1"), "{refused}");
        assert_eq!(job.epoch(), 1, "nothing changed");
    }
}
