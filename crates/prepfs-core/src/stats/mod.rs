//! Where the mount's counters live: plain relaxed atomics, bumped at their call sites on request
//! paths and never locked, and the latency histograms (`latency.rs`: each open per view and
//! outcome, each piece of pixel work by kind, in microseconds into HdrHistograms, each behind
//! its own mutex taken to record one value or copy the figures out).
//!
//! Storage only: what each figure is called, what it means and where it shows (`stats.json`,
//! `.prepfs/metrics`, `prepfs stats`) is declared once in `crate::metrics::defs`, which reads
//! these fields to render all three.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub(crate) mod latency;

use latency::Latencies;

/// The process serving the mount and how many came before it (issue 53): set once by the
/// binary at start from what its supervisor said; an unsupervised mount's is this process, no
/// restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLife {
    pub pid: u32,
    /// Servers of this mount that came before this one (crashes and upgrades).
    pub restarts: u64,
    /// Why the last one ended (`killed by signal 9 (SIGKILL)`, `exited with status 101`,
    /// `upgrade`).
    pub last_restart_cause: Option<String>,
    /// Whether a supervisor holds the mount (it starts the server again when it dies).
    pub supervised: bool,
}

impl Default for ServerLife {
    fn default() -> ServerLife {
        ServerLife { pid: std::process::id(), restarts: 0, last_restart_cause: None, supervised: false }
    }
}

/// One counter per view and form of work.
#[derive(Debug, Default)]
pub(crate) struct ViewCounters {
    pub(crate) opens: AtomicU64,
    /// Bytes the daemon's own reads served ...
    pub(crate) read_bytes: AtomicU64,
    /// ... and the sizes of the files it handed the kernel to read itself (passthrough): what
    /// their readers could read, counted at the open (the daemon never sees those reads).
    pub(crate) passthrough_bytes: AtomicU64,
    /// Opens (top level and jobs' views of this form alike) served without reading the source
    /// (from a cache form) ...
    pub(crate) hits: AtomicU64,
    /// ... and those that read it (or the disk tier); an open that fails is neither.
    pub(crate) misses: AtomicU64,
}

/// One pipeline's outputs (`augmented/`'s is pipeline 0, each recipe's its number): how its
/// opens were served and what making its outputs cost (`stats.json`'s `recipes`, and the plan's
/// augment cost weighted by reads).
#[derive(Debug, Default)]
pub(crate) struct PipelineCounters {
    /// Opens served an output kept ahead (by the refill, prefetch or another job's miss) ...
    pub(crate) served_kept: AtomicU64,
    /// ... and opens served an output made for them.
    pub(crate) made_at_open: AtomicU64,
    /// Outputs the background refill made and kept.
    pub(crate) refills: AtomicU64,
    /// Outputs made, wherever, and the CPU time of the pixel work that made them (a decode
    /// included where one was made from encoded bytes).
    pub(crate) made: AtomicU64,
    pub(crate) made_nanos: AtomicU64,
    /// Of those, the ones augmented from decoded pixels, and their CPU time (the plan's `t_a`).
    pub(crate) augments: AtomicU64,
    pub(crate) augment_nanos: AtomicU64,
}

impl PipelineCounters {
    /// Opens served (kept or made).
    pub(crate) fn opens(&self) -> u64 {
        get(&self.served_kept) + get(&self.made_at_open)
    }
}

/// Pipelines counted: `augmented/`'s and at most `config::MAX_RECIPES` recipes'.
pub(crate) const PIPELINES: usize = crate::config::MAX_RECIPES + 1;

/// FUSE requests received, by kind (what the kernel asks per file read shows here).
#[derive(Debug, Default)]
pub struct RequestCounters {
    pub lookup: AtomicU64,
    pub getattr: AtomicU64,
    pub open: AtomicU64,
    pub read: AtomicU64,
    pub release: AtomicU64,
    pub flush: AtomicU64,
    pub opendir: AtomicU64,
    pub readdir: AtomicU64,
    pub readdirplus: AtomicU64,
    pub releasedir: AtomicU64,
    pub ioctl: AtomicU64,
    pub xattr: AtomicU64,
    pub other: AtomicU64,
}

impl RequestCounters {
    /// Each kind's name and count.
    pub(crate) fn by_kind(&self) -> [(&'static str, u64); 13] {
        [
            ("lookup", get(&self.lookup)),
            ("getattr", get(&self.getattr)),
            ("open", get(&self.open)),
            ("read", get(&self.read)),
            ("release", get(&self.release)),
            ("flush", get(&self.flush)),
            ("opendir", get(&self.opendir)),
            ("readdir", get(&self.readdir)),
            ("readdirplus", get(&self.readdirplus)),
            ("releasedir", get(&self.releasedir)),
            ("ioctl", get(&self.ioctl)),
            ("xattr", get(&self.xattr)),
            ("other", get(&self.other)),
        ]
    }
}

/// FUSE operations whose failures are counted by errno (`prepfs_fuse_errors_total{op,errno}`):
/// the request kinds, with the changes a read-only mount refuses as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuseOp {
    Lookup,
    Getattr,
    Open,
    Read,
    Opendir,
    Readdir,
    Readdirplus,
    Statfs,
    Access,
    Mkdir,
    Rmdir,
    /// Any change but mkdir and rmdir (setattr, write, unlink, ...): refused.
    Change,
}

impl FuseOp {
    pub const ALL: [FuseOp; 12] = [
        FuseOp::Lookup,
        FuseOp::Getattr,
        FuseOp::Open,
        FuseOp::Read,
        FuseOp::Opendir,
        FuseOp::Readdir,
        FuseOp::Readdirplus,
        FuseOp::Statfs,
        FuseOp::Access,
        FuseOp::Mkdir,
        FuseOp::Rmdir,
        FuseOp::Change,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FuseOp::Lookup => "lookup",
            FuseOp::Getattr => "getattr",
            FuseOp::Open => "open",
            FuseOp::Read => "read",
            FuseOp::Opendir => "opendir",
            FuseOp::Readdir => "readdir",
            FuseOp::Readdirplus => "readdirplus",
            FuseOp::Statfs => "statfs",
            FuseOp::Access => "access",
            FuseOp::Mkdir => "mkdir",
            FuseOp::Rmdir => "rmdir",
            FuseOp::Change => "change",
        }
    }
}

/// Errnos counted one by one; a larger one counts in the last slot.
pub(crate) const ERRNO_SLOTS: usize = 134;

/// Failed FUSE requests by operation and errno: a fixed array of relaxed atomics, so counting
/// one is an index and an add (no lock, no lookup, no allocation).
#[derive(Debug)]
pub struct FuseErrors {
    by_op: [[AtomicU64; ERRNO_SLOTS]; FuseOp::ALL.len()],
}

impl Default for FuseErrors {
    fn default() -> Self {
        FuseErrors { by_op: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))) }
    }
}

impl FuseErrors {
    /// Counts one failure of `op` with `errno`.
    pub fn count(&self, op: FuseOp, errno: i32) {
        let slot = usize::try_from(errno).unwrap_or(0).min(ERRNO_SLOTS - 1);
        bump(&self.by_op[op as usize][slot], 1);
    }

    /// The failures counted so far: (op, errno, count) for each count above zero.
    pub(crate) fn counted(&self) -> impl Iterator<Item = (FuseOp, i32, u64)> + '_ {
        FuseOp::ALL.into_iter().flat_map(move |op| {
            self.by_op[op as usize].iter().enumerate().filter_map(move |(errno, n)| {
                let n = get(n);
                (n > 0).then_some((op, errno as i32, n))
            })
        })
    }
}

/// Kernel passthrough at work (the adapter counts; `stats.json` shows them under `passthrough`).
#[derive(Debug, Default)]
pub struct PassthroughCounters {
    /// Opens answered with a backing file: their reads never reach the daemon.
    pub opens: AtomicU64,
    /// Backing ids registered with the kernel, and closed (at the last release using each).
    pub backing_ids_opened: AtomicU64,
    pub backing_ids_closed: AtomicU64,
}

/// The loader socket at work (`stats.json`'s `loader`).
#[derive(Debug, Default)]
pub struct LoaderCounters {
    /// Where it listens, once it does.
    pub socket: std::sync::OnceLock<String>,
    pub(crate) connections: AtomicU64,
    pub(crate) open_connections: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) samples: AtomicU64,
    /// Shared memory the live connections' rings take (`loader.ring_memory` bounds it).
    pub(crate) ring_bytes: AtomicU64,
    /// Samples passed over because the loader's user may not read them (the source's modes,
    /// directories included).
    pub(crate) denied: AtomicU64,
}

/// The mount's counters.
#[derive(Debug)]
pub struct Stats {
    /// FUSE requests by kind.
    pub requests: RequestCounters,
    /// Failed FUSE requests by operation and errno.
    pub fuse_errors: FuseErrors,
    pub passthrough: PassthroughCounters,
    pub loader: LoaderCounters,
    started: Instant,
    pub(crate) encoded: ViewCounters,
    pub(crate) decoded: ViewCounters,
    pub(crate) augmented: ViewCounters,
    /// Each pipeline's outputs (0: `augmented/`'s; else the recipe's number).
    pipelines: [PipelineCounters; PIPELINES],
    /// Bytes read from the source dataset.
    pub(crate) source_bytes_read: AtomicU64,
    /// Samples that could not be decoded (each failure counted once per attempt).
    pub(crate) decode_errors: AtomicU64,
    /// Source files that vanished or failed to read under the mount.
    pub(crate) source_errors: AtomicU64,
    /// Source files found changed (replaced or rewritten) since last seen: their cached forms
    /// were dropped.
    pub(crate) source_changes: AtomicU64,
    /// File handles currently open.
    pub open_handles: AtomicU64,
    /// Opens refused because open handles pinned `max_open_bytes` (ENFILE).
    pub(crate) opens_refused: AtomicU64,
    /// Augmented outputs made by the background refill.
    pub(crate) refills: AtomicU64,
    /// Whole-file reads of the source and their total time as their callers waited (queued
    /// for the read limit and an I/O thread included).
    pub(crate) source_reads: AtomicU64,
    pub(crate) source_read_nanos: AtomicU64,
    /// The same reads' CPU and time blocked on the storage, on their I/O threads (the model's
    /// CPU per read and storage rate): see `source::ReadCost`.
    pub(crate) source_read_cpu_nanos: AtomicU64,
    pub(crate) source_read_blocked_nanos: AtomicU64,
    /// Full decodes and their total time.
    pub(crate) full_decodes: AtomicU64,
    pub(crate) full_decode_nanos: AtomicU64,
    /// Decode-and-augment from encoded bytes (the model's `t_da`) and their total time.
    pub(crate) decode_augments: AtomicU64,
    pub(crate) decode_augment_nanos: AtomicU64,
    /// Augment-only from decoded pixels (the model's `t_a`) and their total time.
    pub(crate) pixel_augments: AtomicU64,
    pub(crate) pixel_augment_nanos: AtomicU64,
    /// Samples the pixel work has augmented at least once, and their full pixels' bytes (width
    /// x height x 3), each sample counted at its first augmentation: the set's decoded size as
    /// the mount reads it (the plan's `s_decoded`). Not the full decodes' mean: those are of
    /// the samples decoded's room takes, its smallest where it has little.
    pub(crate) sized_samples: AtomicU64,
    pub(crate) sized_pixel_bytes: AtomicU64,
    /// Latency histograms of opens and pixel work (percentiles in `latency_us`).
    pub(crate) latency: Latencies,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            requests: RequestCounters::default(),
            fuse_errors: FuseErrors::default(),
            passthrough: PassthroughCounters::default(),
            loader: LoaderCounters::default(),
            started: Instant::now(),
            encoded: ViewCounters::default(),
            decoded: ViewCounters::default(),
            augmented: ViewCounters::default(),
            pipelines: Default::default(),
            source_bytes_read: AtomicU64::new(0),
            decode_errors: AtomicU64::new(0),
            source_errors: AtomicU64::new(0),
            source_changes: AtomicU64::new(0),
            open_handles: AtomicU64::new(0),
            opens_refused: AtomicU64::new(0),
            refills: AtomicU64::new(0),
            source_reads: AtomicU64::new(0),
            source_read_nanos: AtomicU64::new(0),
            source_read_cpu_nanos: AtomicU64::new(0),
            source_read_blocked_nanos: AtomicU64::new(0),
            full_decodes: AtomicU64::new(0),
            full_decode_nanos: AtomicU64::new(0),
            decode_augments: AtomicU64::new(0),
            decode_augment_nanos: AtomicU64::new(0),
            pixel_augments: AtomicU64::new(0),
            pixel_augment_nanos: AtomicU64::new(0),
            sized_samples: AtomicU64::new(0),
            sized_pixel_bytes: AtomicU64::new(0),
            latency: Latencies::default(),
        }
    }
}

/// Adds `n` to a counter.
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl Stats {
    /// Time since the mount started.
    pub(crate) fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Pipeline `pipeline`'s counters (0: `augmented/`'s; a number past the last recipe
    /// counts as the last).
    pub(crate) fn pipeline(&self, pipeline: u8) -> &PipelineCounters {
        &self.pipelines[usize::from(pipeline).min(PIPELINES - 1)]
    }

    /// Opens served by each of the first `pipelines` pipelines: what the augmented budget is
    /// split by.
    pub(crate) fn pipeline_reads(&self, pipelines: u8) -> Vec<u64> {
        (0..pipelines).map(|p| self.pipeline(p).opens()).collect()
    }

    /// The augments from pixels timed so far and their CPU time, as the plan takes them for its
    /// augment rate: the count as measured, the time as if each had cost the read-weighted mean
    /// of the `pipelines` pipelines' measured costs (a recipe read twice as often as another
    /// weighs twice; pipelines not yet read or not yet timed are left out). Measured alone, the
    /// mean would weigh each pipeline by the outputs made of it, refill's included. Without
    /// reads of a timed pipeline, the figures as measured.
    pub(crate) fn read_weighted_augments(&self, pipelines: u8) -> (u64, u64) {
        let (n, nanos) = (get(&self.pixel_augments), get(&self.pixel_augment_nanos));
        let timed: Vec<(f64, f64)> = (0..pipelines)
            .map(|p| self.pipeline(p))
            .filter(|c| get(&c.augments) > 0 && c.opens() > 0)
            .map(|c| (c.opens() as f64, get(&c.augment_nanos) as f64 / get(&c.augments) as f64))
            .collect();
        let reads: f64 = timed.iter().map(|(r, _)| r).sum();
        if reads == 0.0 {
            return (n, nanos);
        }
        let mean = timed.iter().map(|(r, ns)| r * ns).sum::<f64>() / reads;
        (n, (mean * n as f64) as u64)
    }

    /// Pieces of pixel work done (full decodes, decode-and-augments, augments from pixels).
    pub(crate) fn decodes(&self) -> u64 {
        get(&self.full_decodes) + get(&self.decode_augments) + get(&self.pixel_augments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plans_augment_cost_is_the_read_weighted_mean_of_the_pipelines_measured_costs() {
        let stats = Stats::default();
        // augmented/ (0): 10 augments of 1 ms, read 10 times; recipe 1: 90 augments of 3 ms (the
        // refill made most of them), read 30 times.
        for (p, augments, ms, reads) in [(0u8, 10u64, 1u64, 10u64), (1, 90, 3, 30)] {
            let c = stats.pipeline(p);
            bump(&c.augments, augments);
            bump(&c.augment_nanos, augments * ms * 1_000_000);
            bump(&c.made_at_open, reads);
            bump(&stats.pixel_augments, augments);
            bump(&stats.pixel_augment_nanos, augments * ms * 1_000_000);
        }
        let (n, nanos) = stats.read_weighted_augments(2);
        assert_eq!(n, 100, "the count as measured");
        // Reads weigh 1:3, so 0.25 * 1 ms + 0.75 * 3 ms = 2.5 ms (outputs made would say 2.8).
        assert_eq!(nanos / n, 2_500_000);
        // With only augmented/ counted, its figures as measured.
        let fresh = Stats::default();
        bump(&fresh.pixel_augments, 4);
        bump(&fresh.pixel_augment_nanos, 4000);
        assert_eq!(fresh.read_weighted_augments(3), (4, 4000));
    }

    #[test]
    fn a_pipelines_opens_are_those_served_kept_outputs_and_those_served_outputs_made_for_them() {
        let stats = Stats::default();
        bump(&stats.pipeline(1).served_kept, 3);
        bump(&stats.pipeline(1).made_at_open, 2);
        bump(&stats.pipeline(2).made_at_open, 1);
        assert_eq!(stats.pipeline(1).opens(), 5);
        assert_eq!(stats.pipeline_reads(3), [0, 5, 1]);
    }
}
