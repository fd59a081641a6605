//! Recipes' views (`recipes:` in the config): each recipe a view beside `augmented/`, at the
//! top (`MNT/<recipe>/`) and in every job's directory (`jobs/<job>/<recipe>/`). What a
//! directory of views lists and a name in it finds, whether a view's recipe exists, how its
//! files are written, a job's sampling state in it (its own per recipe: the readers its outputs
//! are kept for, [`states_in`]), its top-level pass, and each recipe's figures in `stats.json`.
//! A recipe's open is served as `augmented/`'s is, through its own pipeline and from its own
//! kept outputs, shared between the jobs reading it (`SampleProducer::output`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::{Filesystem, View};
use prepfs_cache::SampleCache;
use crate::config::OutputConfig;
use prepfs_sampling::Rank;
use prepfs_sampling::{Job, Pass};
use prepfs_cache::form::Form;
use prepfs_source::catalog::FileId;
use std::sync::Arc;

impl Filesystem {
    /// The views a directory of views lists, with their names: the root's (`job` 0) or a
    /// job's (its code): the forms' views, then each recipe's.
    pub(super) fn views_in(&self, job: u32) -> Vec<(View, &str)> {
        let forms = Form::ALL.into_iter().map(|form| (View::of(form, job), form.dir_name()));
        let recipes = self.config().recipes.iter().zip(1u8..).map(|(r, n)| (View::recipe(n, job), r.name.as_str()));
        forms.chain(recipes).collect()
    }

    /// The view `name` names in a directory of views (`job` as in [`Filesystem::views_in`]).
    pub(super) fn view_named(&self, name: &OsStr, job: u32) -> Option<View> {
        self.views_in(job).into_iter().find(|(_, n)| n.as_bytes() == name.as_bytes()).map(|(view, _)| view)
    }

    /// Whether `view`'s recipe is one of the config's (an inode can name any number).
    pub(super) fn view_exists(&self, view: View) -> bool {
        usize::from(view.recipe) <= self.config().recipes.len()
    }

    /// How `view`'s pixel files are written: a recipe's own output, else the top-level one.
    pub(super) fn view_output(&self, view: View) -> &OutputConfig {
        let recipe = usize::from(view.recipe).checked_sub(1).and_then(|i| self.config().recipes.get(i));
        recipe.map_or(&self.config().output, |r| &r.output)
    }

    /// What opportunistic sampling prefers `sample` by in `view` for a job (its used-by bit
    /// `job`), up to `SampleCache::top_preference(view.form)`: in a recipe's view a kept output of
    /// the recipe's the job has not used (kept ahead, or by another job's open) is the best, then
    /// the forms every view shares as `decoded/` ranks them (another pipeline's output is no use
    /// there); elsewhere the view's own form.
    pub(super) fn preference_in(&self, view: View, sample: FileId, job: u64) -> Rank {
        if view.recipe == 0 {
            return self.cache.preference(sample, view.form, job);
        }
        if self.cache.output_usable_by(view.recipe, sample, job) {
            return SampleCache::top_preference(Form::Augmented);
        }
        self.cache.preference(sample, Form::Decoded, job)
    }

    /// The pass of pipeline `pipeline`'s top-level readers (0: `augmented/`'s, else the
    /// recipe's): the samples its top-level view served in the current pass over the set.
    pub(super) fn top_pass_of(&self, pipeline: u8) -> Option<&Pass> {
        self.top_passes.get(usize::from(pipeline))
    }

    /// `job`'s sampling state in `view`: its own in a recipe's view, else the job itself.
    pub(super) fn job_in_view(&self, job: &Arc<Job>, view: View) -> Arc<Job> {
        self.jobs.in_recipe(job, view.recipe)
    }

    /// Whether `sample` is still needed this epoch by an active job in any view it reads (its
    /// own views, or a recipe's), other than `job` (the job itself, not its state in a recipe)
    /// in `view`: the encoded bytes and decoded pixels every view shares may make room only
    /// once none does.
    pub(super) fn needed_elsewhere(&self, job: &Job, view: View, sample: FileId) -> bool {
        let recipes = self.config().recipes.len() as u8;
        self.jobs.active().iter().any(|j| {
            let this = |recipe: u8| j.code() == job.code() && view.recipe == recipe;
            let own = !this(0) && !j.has_seen(sample);
            own || (1..=recipes).any(|r| !this(r) && j.recipe_state(r).is_some_and(|s| !s.has_seen(sample)))
        })
    }
}

/// The sampling states of `jobs` in pipeline `pipeline`'s view, the readers its outputs are kept
/// for: the jobs themselves in `augmented/` (0), else their states in the recipe's view, of those
/// that have read it.
pub(super) fn states_in(jobs: &[Arc<Job>], pipeline: u8) -> Vec<Arc<Job>> {
    match pipeline {
        0 => jobs.to_vec(),
        r => jobs.iter().filter_map(|j| j.recipe_state(r)).collect(),
    }
}
