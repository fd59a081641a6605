//! Inode numbers: the nodes of the mount ([`Node`]), the views they belong to ([`View`]), and how
//! a node packs into an inode number and back. Inodes are computed, never allocated.

use crate::shared::Form;
use crate::source::catalog::{DirId, FileId};

/// A view: one form of the whole tree, top-level or one job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct View {
    pub form: Form,
    /// 0 for the top-level views, else the code of the job (see [`crate::sampling::Job::code`]),
    /// or a pending job name's ([`PENDING_JOB`]).
    pub job: u32,
}

impl View {
    /// A top-level view.
    pub(crate) fn top(form: Form) -> View {
        View { form, job: 0 }
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
// (24 bits, 0 for top-level views), a kind (4 bits), the form (2 bits) and a catalog index
// (32 bits).
/// The root directory's inode, the mount's top (FUSE's root id).
pub const ROOT_INO: u64 = 1;
const CONTROL_DIR_INO: u64 = 2;
const STATS_INO: u64 = 3;
const CONFIG_INO: u64 = 4;
pub(super) const JOBS_DIR_INO: u64 = 5;
const METRICS_INO: u64 = 6;
const LOADER_INO: u64 = 7;
const JOB_SHIFT: u32 = 40;
const KIND_SHIFT: u32 = 36;
const FORM_SHIFT: u32 = 34;
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
        let pack = |job: u32, kind: u64, form: Form, index: u32| {
            u64::from(job) << JOB_SHIFT | kind << KIND_SHIFT | form.index() << FORM_SHIFT | u64::from(index)
        };
        match self {
            Node::Root => ROOT_INO,
            Node::ControlDir => CONTROL_DIR_INO,
            Node::StatsFile => STATS_INO,
            Node::ConfigFile => CONFIG_INO,
            Node::MetricsFile => METRICS_INO,
            Node::LoaderFile => LOADER_INO,
            Node::JobsDir => JOBS_DIR_INO,
            Node::JobRoot(code) => pack(code, KIND_JOB_ROOT, Form::Encoded, 0),
            Node::Dir(view, d) => pack(view.job, KIND_DIR, view.form, d),
            Node::File(view, f) => pack(view.job, KIND_FILE, view.form, f),
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
        let view = View { form, job };
        match (ino >> KIND_SHIFT) & 0xf {
            KIND_DIR => Some(Node::Dir(view, index)),
            KIND_FILE => Some(Node::File(view, index)),
            KIND_JOB_ROOT if job != 0 => Some(Node::JobRoot(job)),
            _ => None,
        }
    }
}
