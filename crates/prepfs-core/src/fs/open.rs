//! Opening a file, the hot path, read top to bottom: resolve the inode, then the sample once
//! (its path and the version `stat` finds: a [`Sample`] every later step takes); in a top-level view produce the requested sample, in a job's view let opportunistic
//! sampling choose the sample to serve (and queue prefetch along the job's listing); pin the
//! bytes to a handle (a job view's open is `job_open.rs`). Each open of a file is timed, by view and outcome (`crate::metrics`).

use std::sync::Arc;
use std::time::Instant;

use super::handles::{Handle, HandleData};
use super::{CachePolicy, Caller, Filesystem, Node, Opened, View};
use crate::error::{Error, Result};
use crate::stats::latency::Outcome;
use crate::producer::Consumer;
use prepfs_cache::form::Form;
use prepfs_source::catalog::FileId;
use prepfs_source::Sample;
use prepfs_source::Observed;
use crate::stats::bump;

impl Filesystem {
    /// Resolves `file` for this request: its path and the version `stat` finds, checked
    /// against the one seen before; a changed file's inodes in every view are queued for the
    /// kernel to drop what it cached of them.
    pub(super) fn resolve(&self, file: FileId) -> Result<Sample> {
        let (sample, observed) = self.reader.resolve(file)?;
        if observed == Observed::Changed {
            self.queue_stale(file);
        }
        Ok(sample)
    }

    /// Opens a file: for pixel views this decodes and augments (the caller runs it on the
    /// decode pool) and pins the result to the returned handle.
    pub fn open(&self, ino: u64, write: bool, caller: Caller) -> Result<Opened> {
        self.open_request(ino, write, caller, None)
    }

    /// [`Filesystem::open`] of the kernel's request `request`: a job-view open the kernel sends
    /// again after a server died is given the sample its first try was (`recent_opens.rs`).
    pub fn open_request(&self, ino: u64, write: bool, caller: Caller, request: Option<super::OpenRequest>) -> Result<Opened> {
        if write {
            return Err(Error::ReadOnly);
        }
        let node = Node::from_ino(ino).ok_or(Error::NotFound)?;
        let (data, cache) = match node {
            Node::Root | Node::ControlDir | Node::JobsDir | Node::JobRoot(_) | Node::Dir(..) => {
                return Err(Error::IsADirectory)
            }
            Node::StatsFile => {
                (self.pin(HandleData::Control(self.stats_json().into_bytes().into()), caller)?, CachePolicy::DirectIo)
            }
            Node::ConfigFile => {
                (self.pin(HandleData::Control(self.config().to_yaml().into_bytes().into()), caller)?, CachePolicy::DirectIo)
            }
            Node::MetricsFile => {
                (self.pin(HandleData::Control(self.metrics_text().into_bytes().into()), caller)?, CachePolicy::DirectIo)
            }
            Node::LoaderFile => {
                self.check_loader_file_access(caller)?;
                (self.pin(HandleData::Control(self.loader_json().into_bytes().into()), caller)?, CachePolicy::DirectIo)
            }
            Node::File(view, file) => {
                if file as usize >= self.catalog().file_count() || !self.view_exists(view) {
                    return Err(Error::NotFound);
                }
                bump(&self.counters(view.form).opens, 1);
                self.note_reader();
                let started = Instant::now();
                // Every open resolves the sample once (path, version): nothing stale is served.
                let opened = self.resolve(file).and_then(|sample| {
                    self.check_source_access(&sample.meta, caller, super::access::READ)?;
                    if view.job != 0 {
                        let given_before = request.filter(|r| r.maybe_resent).and_then(|r| self.recent_opens.get()?.given(r, ino));
                        self.open_in_job(ino, view, sample, caller, given_before)
                    } else {
                        self.open_top_level(ino, view, &sample, caller)
                    }
                });
                let outcome = opened.as_ref().map_or(Outcome::Error, |&(_, outcome)| outcome);
                self.stats().latency.record_open(view.form, outcome, started.elapsed());
                // The view's counters, top level and jobs' alike: opens = hits + misses + errors.
                let counters = self.counters(view.form);
                match outcome {
                    Outcome::Hit => bump(&counters.hits, 1),
                    Outcome::Miss => bump(&counters.misses, 1),
                    Outcome::Error => {}
                }
                let (data, _) = opened?;
                // What is the same at every open may stay in the page cache; a job's view (the
                // served sample varies) and `augmented/` (a draw per open) may not.
                let cache = match (view.job, view.form) {
                    // Changed since the kernel may have cached its pages: this open drops them.
                    (0, Form::Encoded | Form::Decoded) if self.stale.take_refresh(file) => CachePolicy::Refresh,
                    (0, Form::Encoded | Form::Decoded) => CachePolicy::KeepCache,
                    _ => CachePolicy::DirectIo,
                };
                (data, cache)
            }
        };
        bump(&self.stats().open_handles, 1);
        // Before the sample counts served: an open sent again gets the same one.
        if let (Some(request), Some(opens), HandleData::Bytes { served: Some(served), .. }) = (request, self.recent_opens.get(), &data.data) {
            opens.record(request, ino, served.sample);
        }
        let backing = self.backing_of(&data);
        if backing.is_some() {
            // The kernel reads it without asking us: served now, all of it (what a reader of a
            // passthrough file can read; the daemon never sees how much it did).
            self.count_served(&data);
            let (form, len) = match &data.data {
                HandleData::Bytes { content, form, .. } => (*form, content.len() as u64),
                HandleData::Source { file } => (Form::Encoded, file.meta().identity.len),
                _ => (Form::Encoded, 0),
            };
            bump(&self.counters(form).passthrough_bytes, len);
        }
        Ok(Opened { fh: self.handles.insert(data), cache, backing })
    }

    /// The handle of another open of `ino` still open, if one shares its content; taken for
    /// this open (it joins the handle).
    pub(super) fn shared(&self, ino: u64) -> Option<Arc<Handle>> {
        self.handles.shared(ino)
    }

    /// Makes `handle` the one later opens of `ino` share while it is open; if another open of
    /// `ino` got there first, its handle is shared instead (and `handle` dropped).
    pub(super) fn share(&self, ino: u64, handle: Arc<Handle>) -> Arc<Handle> {
        self.handles.share(ino, handle)
    }

    /// Whether opening `ino` needs no decoding or augmenting (a control file, or a sample the
    /// cache holds in the form the view serves) and no round trip to a shared job's store, so
    /// the caller may run it in place rather than on the decode pool. A guess: the entry may be
    /// taken meanwhile, and the open then does the work itself.
    pub fn open_is_cheap(&self, ino: u64) -> bool {
        match Node::from_ino(ino) {
            // A recipe's output is cheap where one is kept for it (top level: taken whole).
            Some(Node::File(view, file)) if view.recipe != 0 => {
                view.job == 0 && self.cache.outputs(view.recipe).is_some_and(|store| store.contains(file))
            }
            Some(Node::File(view, file)) if (file as usize) < self.catalog().file_count() => match (view.job, view.form) {
                // Opening a source file is I/O (it may be a network share).
                (0, Form::Encoded) => false,
                (0, form) => self.cache.rank(file, form) == form.top_rank(),
                (_, form) => {
                    self.cache.rank(file, form) == form.top_rank()
                        && self.jobs.by_code(view.job).is_some_and(|j| !j.has_seen(file) && !j.is_shared())
                }
            },
            Some(Node::StatsFile | Node::ConfigFile | Node::MetricsFile | Node::LoaderFile) => true,
            _ => false,
        }
    }

    /// An open in a top-level view: the requested sample, always (while passthrough is on,
    /// the content of another open of the same file still open: see [`super::passthrough`]).
    /// With the handle, whether it was a hit (a shared handle is one).
    fn open_top_level(&self, ino: u64, view: View, sample: &Sample, caller: Caller) -> Result<(Arc<Handle>, Outcome)> {
        let share = self.passthrough_on();
        if let Some(live) = share.then(|| self.shared(ino)).flatten() {
            return Ok((live, Outcome::Hit));
        }
        let (handle, outcome) = self.produce_top_level(view, sample, caller)?;
        Ok((if share { self.share(ino, handle) } else { handle }, outcome))
    }

    /// A new handle on `sample` in a top-level view (the source file itself in `encoded/`, or
    /// the bytes the producer makes of it), and whether the cache answered it.
    fn produce_top_level(&self, view: View, sample: &Sample, caller: Caller) -> Result<(Arc<Handle>, Outcome)> {
        let form = view.form;
        if form == Form::Encoded {
            // The source file itself: a miss, for the latency figures.
            let (opened, observed) = self.reader.open(sample)?;
            if observed == Observed::Changed {
                self.queue_stale(sample.id);
            }
            return Ok((self.pin(HandleData::Source { file: opened }, caller)?, Outcome::Miss));
        }
        let (bytes, origin) = match form {
            Form::Decoded => self.producer.decoded(sample)?,
            _ => {
                let pass = self.top_pass_of(view.recipe);
                if let Some(pass) = pass {
                    pass.mark(sample.id);
                }
                self.producer.output(view.recipe, sample, Consumer::TopLevel)?
            }
        };
        Ok((self.pin(HandleData::bytes(bytes, form, None), caller)?, Outcome::served(origin.is_miss())))
    }
}
