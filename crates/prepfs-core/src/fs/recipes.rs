//! Recipes' views (`recipes:` in the config): each recipe a view beside `augmented/`, at the
//! top (`MNT/<recipe>/`) and in every job's directory (`jobs/<job>/<recipe>/`). What a
//! directory of views lists and a name in it finds, whether a view's recipe exists, how its
//! files are written, and a job's sampling state in it (its own per recipe). A recipe's open
//! is served like `augmented/`'s, through its own pipeline (`SampleProducer::recipe`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::{Filesystem, View};
use crate::config::OutputConfig;
use crate::sampling::Job;
use crate::shared::Form;
use crate::source::catalog::FileId;
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
