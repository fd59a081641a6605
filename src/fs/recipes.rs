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

    /// The used-by bits of the active jobs that still need `sample` this epoch in `view`: in a
    /// recipe's view, those whose state there has not been served it (a job that never read
    /// the recipe needs nothing of it).
    pub(super) fn jobs_needing_in(&self, view: View, sample: FileId) -> u64 {
        if view.recipe == 0 {
            return self.jobs_needing(sample);
        }
        let needing = |j: &Arc<Job>| j.recipe_state(view.recipe).is_some_and(|r| !r.has_seen(sample));
        self.jobs.active().iter().filter(|j| needing(j)).fold(0, |m, j| m | j.bit())
    }
}
