//! A reference model of opportunistic sampling (`prepfs_sampling`), checked against the real
//! module on random sequences of operations, driven the way `fs` drives it: an open asks
//! `Job::choose` and pins the choice to a handle; the handle's first read calls `mark_served`; a
//! handle released unread gives its claim back with `unclaim`.
//!
//! The model is plain sets: per job, the samples seen (served) this epoch and those claimed by
//! open handles, and the epoch number; per directory, its samples (one label each). It states the
//! rules of the module documentation without the scan: a claimed choice is a free sample of the
//! requested one's directory with the best rank there, the requested one whenever it ranks as well;
//! the epoch ends when every sample is served or an open finds nothing free in its directory.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::Rng;

use prepfs_pixels::draw::draw_rng;
use prepfs_source::catalog::FileId;
use prepfs_sampling::{Choice, Job, Jobs, Requester};

const SEED: u64 = 7;
const JOB_NAMES: [&str; 3] = ["j0", "j1", "j2"];

/// A dataset: directory `d` holds the samples `dirs[d]`, ids numbered from 0 across directories.
#[derive(Debug, Clone)]
struct Layout {
    dirs: Vec<Vec<FileId>>,
}

impl Layout {
    fn new(sizes: &[usize]) -> Layout {
        let mut next = 0;
        let dirs = sizes
            .iter()
            .map(|&n| {
                let d: Vec<FileId> = (next..next + n as FileId).collect();
                next += n as FileId;
                d
            })
            .collect();
        Layout { dirs }
    }
    fn samples(&self) -> usize {
        self.dirs.iter().map(Vec::len).sum()
    }
    fn dir_of(&self, s: FileId) -> &[FileId] {
        self.dirs.iter().find(|d| d.contains(&s)).expect("sample in a directory")
    }
}

fn make_jobs(layout: &Layout) -> Jobs {
    let n = layout.samples();
    Jobs::new(JOB_NAMES.len(), n, n as u64, SEED)
}

fn get_or_create(reg: &Jobs, name: &str) -> Arc<Job> {
    reg.get_or_create(name.as_bytes(), Requester::OWNER).expect("job")
}

/// The model of one job.
#[derive(Debug, Default)]
struct ModelJob {
    epoch: u64,
    seen: HashSet<FileId>,
    claimed: HashSet<FileId>,
    /// Samples ever handed to an open unclaimed (sharing a sample pinned to another handle).
    shared: HashSet<FileId>,
}

impl ModelJob {
    fn new() -> ModelJob {
        ModelJob { epoch: 1, ..ModelJob::default() }
    }
    fn free(&self, s: FileId) -> bool {
        !self.seen.contains(&s) && !self.claimed.contains(&s)
    }
    fn next_epoch(&mut self) {
        self.seen.clear();
        self.epoch += 1;
    }
}

/// An open handle of a job's view.
struct Handle {
    job: usize,
    /// The job as it was at open (a retired job's handles stay readable).
    real: Arc<Job>,
    sample: FileId,
    claimed: bool,
    read: bool,
    /// Whether its job has since been retired (the model stops following it).
    stale: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Open { job: usize, requested: FileId, ranks: Vec<u8>, top: u8, start: usize },
    Read(usize),
    Release(usize),
    FinishEpoch(usize),
    Retire(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let job = 0..JOB_NAMES.len();
    prop_oneof![
        1 => job.clone().prop_map(Op::Create),
        6 => (job.clone(), 0..64u32, prop::collection::vec(0..4u8, 64), 1..4u8, 0..64usize)
            .prop_map(|(job, requested, ranks, top, start)| Op::Open { job, requested, ranks, top, start }),
        4 => (0..16usize).prop_map(Op::Read),
        2 => (0..16usize).prop_map(Op::Release),
        1 => job.clone().prop_map(Op::FinishEpoch),
        1 => job.prop_map(Op::Retire),
    ]
}

/// The real registry and the model side by side.
struct World {
    layout: Layout,
    ods: bool,
    reg: Jobs,
    real: Vec<Option<Arc<Job>>>,
    model: Vec<Option<ModelJob>>,
    handles: Vec<Handle>,
    /// (job incarnation, epoch, sample) of every sample served, for the draws.
    served: HashSet<(u64, u64, FileId)>,
    incarnations: u64,
    incarnation: Vec<u64>,
}

impl World {
    fn new(layout: Layout, ods: bool) -> World {
        let reg = make_jobs(&layout);
        World {
            layout,
            ods,
            reg,
            real: vec![None, None, None],
            model: vec![None, None, None],
            handles: Vec::new(),
            served: HashSet::new(),
            incarnations: 0,
            incarnation: vec![0; 3],
        }
    }

    fn create(&mut self, j: usize) {
        let job = get_or_create(&self.reg, JOB_NAMES[j]);
        match &self.real[j] {
            Some(known) => assert!(Arc::ptr_eq(known, &job), "a job exists once by name"),
            None => {
                assert_eq!(job.epoch(), 1, "a new job starts at epoch 1");
                self.real[j] = Some(job);
                self.model[j] = Some(ModelJob::new());
                self.incarnations += 1;
                self.incarnation[j] = self.incarnations;
            }
        }
    }

    /// Opens `requested` in job `j` with the ranks `rank`, checks the choice against the model
    /// and records the handle. Returns its index.
    fn open(&mut self, j: usize, requested: FileId, rank: &dyn Fn(FileId) -> u8, top: u8, start: usize) -> Option<usize> {
        let job = Arc::clone(self.real[j].as_ref()?);
        let m = self.model[j].as_mut().expect("model job");
        let dir = self.layout.dir_of(requested).to_vec();
        let choice: Choice = job.choose(requested, &dir, rank, top, start, self.ods);

        let any_free = |m: &ModelJob| dir.iter().any(|&s| m.free(s));
        // Without ods a pinned request is shared (a claim may outlive a sharer's read).
        let ended = if self.ods { !any_free(m) } else { m.seen.contains(&requested) && !m.claimed.contains(&requested) };
        if ended {
            // Nothing left to serve in this directory: the job has started its next pass.
            m.next_epoch();
        }
        assert_eq!(job.epoch(), m.epoch, "epoch after opening {requested}");
        assert!(dir.contains(&choice.sample), "{choice:?} is not of the directory of {requested} (its label)");
        let expect_claim = if self.ods { any_free(m) } else { m.free(requested) };
        assert_eq!(choice.claimed, expect_claim, "{choice:?} for {requested}: {m:?}");
        if !choice.claimed {
            // Everything left is pinned to open handles: the request is served as it is, shared.
            assert_eq!((choice.sample, choice.substituted), (requested, false));
            assert!(m.claimed.contains(&requested));
            m.shared.insert(requested);
        } else if self.ods {
            assert!(m.free(choice.sample), "{choice:?}: not free in {m:?}");
            let best = dir.iter().filter(|&&s| m.free(s)).map(|&s| rank(s)).max().expect("a free sample");
            assert_eq!(rank(choice.sample), best, "{choice:?} is not the best cached free sample");
            if m.free(requested) && rank(requested) == best {
                assert_eq!(choice.sample, requested, "the requested sample ranks best: it is served");
            }
            assert_eq!(choice.substituted, choice.sample != requested);
        } else {
            assert_eq!((choice.sample, choice.substituted), (requested, false), "without ods the request is served");
        }
        if choice.claimed {
            assert!(m.claimed.insert(choice.sample));
        }
        self.handles.push(Handle { job: j, real: job, sample: choice.sample, claimed: choice.claimed, read: false, stale: false });
        self.check(j);
        Some(self.handles.len() - 1)
    }

    /// The first read of handle `h`: the sample is served to its job.
    fn read(&mut self, h: usize) {
        let Some(handle) = self.handles.get_mut(h) else { return };
        if handle.read {
            return;
        }
        handle.read = true;
        let new = handle.real.mark_served(handle.sample, handle.claimed);
        if handle.stale {
            return;
        }
        let (j, s, claimed) = (handle.job, handle.sample, handle.claimed);
        let m = self.model[j].as_mut().expect("model job");
        assert_eq!(new, !m.seen.contains(&s), "sample {s} served before this epoch: {m:?}");
        if new {
            assert!(self.served.insert((self.incarnation[j], m.epoch, s)));
        } else {
            // Served twice in an epoch only where an open shared a sample pinned to another
            // handle (every sample of its directory was pinned), never to a claimant.
            assert!(!claimed || m.shared.contains(&s), "sample {s} served twice in epoch {}: {m:?}", m.epoch);
        }
        // Only the claimant's read releases the claim (a sharer's leaves it in force).
        if claimed {
            m.claimed.remove(&s);
        }
        m.seen.insert(s);
        if m.seen.len() == self.layout.samples() {
            m.next_epoch();
        }
        self.check(j);
    }

    /// Handle `h` closed: unread, it gives its claim back.
    fn release(&mut self, h: usize) {
        if h >= self.handles.len() {
            return;
        }
        let handle = self.handles.remove(h);
        if handle.claimed && !handle.read {
            handle.real.unclaim(handle.sample);
            if !handle.stale {
                let m = self.model[handle.job].as_mut().expect("model job");
                m.claimed.remove(&handle.sample);
                // Unless another handle read it meanwhile, it is unseen and free to serve again.
                if !m.seen.contains(&handle.sample) {
                    assert!(!handle.real.has_seen(handle.sample), "a sample released unread is unseen");
                    assert!(m.free(handle.sample));
                }
                self.check(handle.job);
            }
        }
    }

    /// Opens and reads every free sample of job `j` until its epoch ends (or only samples pinned
    /// to open handles are left).
    fn finish_epoch(&mut self, j: usize) {
        let Some(m) = self.model[j].as_ref() else { return };
        let epoch = m.epoch;
        let free: Vec<FileId> = (0..self.layout.samples() as FileId).filter(|&s| m.free(s)).collect();
        for s in free {
            if self.model[j].as_ref().expect("model job").epoch != epoch {
                break;
            }
            let h = self.open(j, s, &|_| 0, 1, 0).expect("open");
            assert_eq!(self.handles[h].sample, s, "the requested free sample is served");
            self.read(h);
            self.handles.remove(h);
        }
        let m = self.model[j].as_ref().expect("model job");
        assert!(m.epoch == epoch + 1 || !m.claimed.is_empty(), "epoch {epoch} did not end: {m:?}");
    }

    fn retire(&mut self, j: usize) {
        let retired = self.reg.retire(JOB_NAMES[j]);
        assert_eq!(retired.is_some(), self.real[j].is_some());
        self.real[j] = None;
        self.model[j] = None;
        for h in self.handles.iter_mut().filter(|h| h.job == j) {
            h.stale = true;
        }
    }

    /// The real job's state equals the model's.
    fn check(&self, j: usize) {
        let (Some(job), Some(m)) = (&self.real[j], &self.model[j]) else { return };
        assert_eq!(job.epoch(), m.epoch);
        assert_eq!(job.served_this_epoch(), m.seen.len() as u64);
        for s in 0..self.layout.samples() as FileId {
            assert_eq!(job.has_seen(s), m.seen.contains(&s), "sample {s} in job {j}: {m:?}");
        }
    }

    fn apply(&mut self, op: &Op) {
        let n = self.layout.samples() as FileId;
        match op {
            Op::Create(j) => self.create(*j),
            Op::Open { job, requested, ranks, top, start } => {
                let rank = |s: FileId| ranks[s as usize].min(*top);
                self.open(*job, requested % n, &rank, *top, *start);
            }
            Op::Read(h) => {
                let len = self.handles.len().max(1);
                self.read(h % len)
            }
            Op::Release(h) => {
                let len = self.handles.len().max(1);
                self.release(h % len)
            }
            Op::FinishEpoch(j) => self.finish_epoch(*j),
            Op::Retire(j) => self.retire(*j),
        }
    }

    /// Distinct (seed, job, epoch, sample) give distinct augmentation draws, so no crop repeats;
    /// and so do the producer's draws, numbered per sample: (seed, 0, draw, sample).
    fn check_draws(&self) {
        let mut draws = HashMap::new();
        let tuples = self
            .served
            .iter()
            .map(|&(job, epoch, s)| (job, epoch, u64::from(s)))
            .chain((0..self.layout.samples() as u64).flat_map(|s| (0..4).map(move |k| (0, k, s))));
        for (job, epoch, s) in tuples {
            let mut rng = draw_rng(SEED, job, epoch, s);
            let draw: (u64, u64) = (rng.gen(), rng.gen());
            if let Some(other) = draws.insert(draw, (job, epoch, s)) {
                panic!("{:?} and {other:?} draw the same augmentation", (job, epoch, s));
            }
        }
    }
}

fn layout() -> impl Strategy<Value = Layout> {
    prop::collection::vec(1..6usize, 1..5).prop_map(|sizes| Layout::new(&sizes))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// The random-operation model check: substitutes keep the label, claims are exclusive, a
    /// sample released unread goes back to unseen, the epochs and seen bits follow the model, and
    /// nothing is served twice in an epoch except to a handle that shares a pinned sample.
    #[test]
    fn the_sampling_module_follows_its_reference_model_under_random_opens_reads_and_releases(
        layout in layout(),
        ods in prop::bool::weighted(0.8),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut world = World::new(layout, ods);
        world.create(0);
        for op in &ops {
            world.apply(op);
        }
        for h in (0..world.handles.len()).rev() {
            world.release(h);
        }
        for j in 0..JOB_NAMES.len() {
            world.check(j);
        }
        world.check_draws();
    }

    /// Jobs that read every file once per pass, each with a few handles open at once and the
    /// cache ranks changing under them, are each served every sample exactly once per epoch, and
    /// each pass is one epoch.
    #[test]
    fn each_job_reading_every_file_once_is_served_every_sample_exactly_once_per_epoch(
        layout in layout(),
        jobs in 1..=3usize,
        window in 1..=4usize,
        seed in any::<u64>(),
    ) {
        let mut world = World::new(layout, true);
        let mut rng = draw_rng(seed, 1, 2, 3);
        let n = world.layout.samples();
        for pass in 0..3u64 {
            // Each job's loader: every path once, in its own order.
            let mut orders: Vec<Vec<FileId>> = (0..jobs)
                .map(|j| {
                    world.create(j);
                    let mut order: Vec<FileId> = (0..n as FileId).collect();
                    order.shuffle(&mut rng);
                    order
                })
                .collect();
            let mut served: Vec<Vec<FileId>> = vec![Vec::new(); jobs];
            let mut open: Vec<Vec<usize>> = vec![Vec::new(); jobs];
            while orders.iter().any(|o| !o.is_empty()) || open.iter().any(|o| !o.is_empty()) {
                let j = rng.gen_range(0..jobs);
                let ranks: Vec<u8> = (0..n).map(|_| rng.gen_range(0..3)).collect();
                let rank = |s: FileId| ranks[s as usize];
                // Open the next path while the window has room; else read one of the open files.
                if !orders[j].is_empty() && (open[j].len() < window && rng.gen_bool(0.7) || open[j].is_empty()) {
                    let path = orders[j].pop().expect("path");
                    let h = world.open(j, path, &rank, 2, rng.gen_range(0..n)).expect("open");
                    prop_assert!(world.handles[h].claimed, "pass {pass}: an open while files are left is claimed");
                    open[j].push(h);
                } else if !open[j].is_empty() {
                    let k = rng.gen_range(0..open[j].len());
                    let h = open[j].swap_remove(k);
                    world.read(h);
                    served[j].push(world.handles[h].sample);
                }
            }
            for j in 0..jobs {
                let mut got = served[j].clone();
                got.sort_unstable();
                prop_assert_eq!(&got, &(0..n as FileId).collect::<Vec<_>>(), "pass {}: job {}", pass, j);
                let job = world.real[j].as_ref().expect("job");
                prop_assert_eq!(job.epoch(), pass + 2, "pass {} of job {} is one epoch", pass, j);
                prop_assert_eq!(job.served_this_epoch(), 0);
            }
            world.handles.clear();
        }
        world.check_draws();
    }
}

/// A sample handed to a second open while pinned to a first (shared, unclaimed: every sample of
/// its directory was pinned, or ods is off) keeps its claim at the sharer's first read, while the
/// first handle is still open and unread: a third open cannot claim it again (two open handles
/// would hold one claimed sample, and one of their reads would serve it twice in an epoch).
#[test]
fn a_sharing_handles_read_leaves_the_holders_claim_in_force() {
    let layout = Layout::new(&[1, 1]);
    let reg = make_jobs(&layout);
    let job = get_or_create(&reg, "j");
    let dir = [1];
    let none = |_c: FileId| 0u8;
    for ods in [false, true] {
        let holder = job.choose(1, &dir, none, 1, 0, ods);
        let sharer = job.choose(1, &dir, none, 1, 0, ods);
        assert!(holder.claimed && !sharer.claimed && sharer.sample == holder.sample);
        job.mark_served(sharer.sample, false); // the sharer reads; the holder is still open, unread
        let third = job.choose(1, &dir, none, 1, 0, ods);
        assert!(
            !(third.claimed && third.sample == holder.sample),
            "ods {ods}: sample {} claimed by two open handles",
            holder.sample
        );
        job.mark_served(holder.sample, true);
        job.unclaim(third.sample);
    }
}
