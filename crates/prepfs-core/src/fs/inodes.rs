//! Inode numbers: the nodes of the mount ([`Node`]), the views they belong to ([`View`]), and how
//! a node packs into an inode number and back. Inodes are computed, never allocated.

use prepfs_cache::form::Form;
use prepfs_source::catalog::{DirId, FileId};

/// A view: one form of the whole tree, top-level or one job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct View {
    pub(crate) form: Form,
    /// 0 for the top-level views, else the code of the job (see [`prepfs_sampling::Job::code`]),
    /// or a pending job name's ([`PENDING_JOB`]).
    pub(crate) job: u32,
    /// 0, else (with `form` augmented) the number of the recipe whose view this is: the
    /// config's `recipes[recipe - 1]`, at most [`crate::config::MAX_RECIPES`].
    pub(crate) recipe: u8,
}

impl View {
    /// A view of one form (no recipe's) in `job`'s directory (0: at the top).
    pub(crate) fn of(form: Form, job: u32) -> View {
        View { form, job, recipe: 0 }
    }

    /// Recipe `recipe`'s view (its number, from 1) in `job`'s directory (0: at the top).
    pub(crate) fn recipe(recipe: u8, job: u32) -> View {
        View { form: Form::Augmented, job, recipe }
    }

    /// The form prefetch prepares for this view: a recipe's view, the decoded form every view
    /// shares (its own outputs are the refill's, `Filesystem::preference_in` ranks by them).
    pub(crate) fn cached_form(self) -> Form {
        if self.recipe == 0 {
            self.form
        } else {
            Form::Decoded
        }
    }
}

/// A node of the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    Root,
    /// `.prepfs/`
    ControlDir,
    /// `.prepfs/stats.json`
    StatsFile,
    /// `.prepfs/config.yaml`
    ConfigFile,
    /// `.prepfs/metrics` (Prometheus text format)
    MetricsFile,
    /// `.prepfs/loader.json` (what a loader needs: the socket's path)
    LoaderFile,
    /// `jobs/`
    JobsDir,
    /// `jobs/<job>/`, by the job's code (or a pending name's: [`PENDING_JOB`]).
    JobRoot(u32),
    Dir(View, DirId),
    File(View, FileId),
}

// Inode numbers: the fixed nodes are 1 to 7; the others pack, from the top, the job code
// (24 bits, 0 for top-level views), a kind (2 bits), the form (2 bits), the recipe (4 bits, 0
// but in a recipe's view) and a catalog index (32 bits).
/// The root directory's inode, the mount's top (FUSE's root id).
pub const ROOT_INO: u64 = 1;
const CONTROL_DIR_INO: u64 = 2;
const STATS_INO: u64 = 3;
const CONFIG_INO: u64 = 4;
pub(super) const JOBS_DIR_INO: u64 = 5;
const METRICS_INO: u64 = 6;
const LOADER_INO: u64 = 7;
const JOB_SHIFT: u32 = 40;
const KIND_SHIFT: u32 = 38;
const FORM_SHIFT: u32 = 36;
const RECIPE_SHIFT: u32 = 32;
/// Set in the job code of the inodes of a name under `jobs/` that was no job when looked up
/// (`fs::jobs::PendingNames`): its directory and the views under it resolve without a job, and
/// the first open inside makes it. Real job codes stay below it.
pub(crate) const PENDING_JOB: u32 = 1 << 23;
const KIND_DIR: u64 = 1;
const KIND_FILE: u64 = 2;
const KIND_JOB_ROOT: u64 = 3;

/// Whether `ino` is `.prepfs/` or one of its files.
pub fn is_control(ino: u64) -> bool {
    matches!(ino, CONTROL_DIR_INO | STATS_INO | CONFIG_INO | METRICS_INO | LOADER_INO)
}

impl Node {
    /// The inode number of this node.
    pub(crate) fn ino(self) -> u64 {
        let pack = |view: View, kind: u64, index: u32| {
            u64::from(view.job) << JOB_SHIFT
                | kind << KIND_SHIFT
                | view.form.index() << FORM_SHIFT
                | u64::from(view.recipe & 0xf) << RECIPE_SHIFT
                | u64::from(index)
        };
        match self {
            Node::Root => ROOT_INO,
            Node::ControlDir => CONTROL_DIR_INO,
            Node::StatsFile => STATS_INO,
            Node::ConfigFile => CONFIG_INO,
            Node::MetricsFile => METRICS_INO,
            Node::LoaderFile => LOADER_INO,
            Node::JobsDir => JOBS_DIR_INO,
            Node::JobRoot(code) => pack(View::of(Form::Encoded, code), KIND_JOB_ROOT, 0),
            Node::Dir(view, d) => pack(view, KIND_DIR, d),
            Node::File(view, f) => pack(view, KIND_FILE, f),
        }
    }

    /// The node an inode number names, if it names one.
    pub(crate) fn from_ino(ino: u64) -> Option<Node> {
        match ino {
            ROOT_INO => return Some(Node::Root),
            CONTROL_DIR_INO => return Some(Node::ControlDir),
            STATS_INO => return Some(Node::StatsFile),
            CONFIG_INO => return Some(Node::ConfigFile),
            METRICS_INO => return Some(Node::MetricsFile),
            LOADER_INO => return Some(Node::LoaderFile),
            JOBS_DIR_INO => return Some(Node::JobsDir),
            _ => {}
        }
        let job = (ino >> JOB_SHIFT) as u32;
        let form = Form::from_index((ino >> FORM_SHIFT) & 3)?;
        let index = ino as u32;
        let recipe = ((ino >> RECIPE_SHIFT) & 0xf) as u8;
        if recipe != 0 && form != Form::Augmented {
            return None;
        }
        let view = View { form, job, recipe };
        match (ino >> KIND_SHIFT) & 3 {
            KIND_DIR => Some(Node::Dir(view, index)),
            KIND_FILE => Some(Node::File(view, index)),
            KIND_JOB_ROOT if job != 0 && recipe == 0 => Some(Node::JobRoot(job)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recipe_view_has_inodes_of_its_own_that_decode_back() {
        let mut seen = std::collections::HashSet::new();
        for job in [0, 1, 0x3f_ffff, PENDING_JOB | 5] {
            let views = Form::ALL.map(|f| View::of(f, job)).into_iter().chain((1..=15).map(|r| View::recipe(r, job)));
            for view in views {
                for node in [Node::Dir(view, 0), Node::Dir(view, 7), Node::File(view, 0), Node::File(view, u32::MAX)] {
                    assert!(seen.insert(node.ino()), "{node:?} shares an inode");
                    assert_eq!(Node::from_ino(node.ino()), Some(node));
                }
            }
            if job != 0 {
                assert!(seen.insert(Node::JobRoot(job).ino()));
                assert_eq!(Node::from_ino(Node::JobRoot(job).ino()), Some(Node::JobRoot(job)));
            }
        }
    }
}
