//! Live counters of the mount and its latency histograms (`latency.rs`: each open per view and
//! outcome, each piece of pixel work by kind, in microseconds into HdrHistograms, each behind
//! its own mutex taken to record one value or copy the figures out), served as
//! `.prepfs/stats.json` and printed by `prepfs stats` (`crate::metrics` serves them as
//! `.prepfs/metrics` too).
//!
//! Plain relaxed atomics: counters are bumped on request paths and never locked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::json;

pub(crate) mod latency;

use latency::Latencies;

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

    fn to_json(&self) -> serde_json::Value {
        let made = get(&self.made);
        json!({
            "opens": self.opens(),
            "served_kept": get(&self.served_kept),
            "made_at_open": get(&self.made_at_open),
            "refills": get(&self.refills),
            "outputs_made": made,
            "pixel_ns_per_sample": if made == 0 { 0 } else { get(&self.made_nanos) / made },
        })
    }
}

/// Pipelines counted: `augmented/`'s and at most `config::MAX_RECIPES` recipes'.
const PIPELINES: usize = crate::config::MAX_RECIPES + 1;

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

    /// Every request counted.
    fn total(&self) -> u64 {
        self.by_kind().iter().map(|(_, n)| n).sum()
    }

    fn to_json(&self) -> serde_json::Value {
        self.by_kind().iter().map(|&(kind, n)| (kind.to_owned(), serde_json::Value::from(n))).collect::<serde_json::Map<_, _>>().into()
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

impl LoaderCounters {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "socket": self.socket.get(),
            "connections": get(&self.connections),
            "open_connections": get(&self.open_connections),
            "refused": get(&self.refused),
            "batches": get(&self.batches),
            "samples": get(&self.samples),
            "ring_bytes": get(&self.ring_bytes),
            "denied": get(&self.denied),
        })
    }
}

/// The mount's counters.
#[derive(Debug)]
pub struct Stats {
    /// FUSE requests by kind.
    pub requests: RequestCounters,
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

fn get(counter: &AtomicU64) -> u64 {
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

    /// Each recipe's figures by name (`names[r - 1]` is recipe `r`'s): `stats.json`'s `recipes`.
    pub(crate) fn recipes_json<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> serde_json::Value {
        let by_name = names.into_iter().zip(1u8..).map(|(name, r)| (name.to_owned(), self.pipeline(r).to_json()));
        serde_json::Value::Object(by_name.collect())
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

    /// The figures as a JSON document; `extra` adds the sections other parts own
    /// (catalog, configuration).
    pub(crate) fn to_json(&self, extra: serde_json::Value) -> serde_json::Value {
        let view = |v: &ViewCounters| {
            json!({
                "opens": get(&v.opens),
                "hits": get(&v.hits),
                "misses": get(&v.misses),
                "bytes_served": get(&v.read_bytes) + get(&v.passthrough_bytes),
                "bytes_read_by_daemon": get(&v.read_bytes),
                "bytes_passthrough": get(&v.passthrough_bytes),
            })
        };
        let decodes = self.decodes();
        let decode_nanos = get(&self.full_decode_nanos) + get(&self.decode_augment_nanos) + get(&self.pixel_augment_nanos);
        let mean_ms = |n: &AtomicU64, nanos: &AtomicU64| {
            let n = get(n);
            if n == 0 { 0.0 } else { get(nanos) as f64 / n as f64 / 1e6 }
        };
        let opens = get(&self.encoded.opens) + get(&self.decoded.opens) + get(&self.augmented.opens);
        let requests_per_open = if opens == 0 { 0.0 } else { self.requests.total() as f64 / opens as f64 };
        let mut doc = json!({
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "views": {
                "encoded": view(&self.encoded),
                "decoded": view(&self.decoded),
                "augmented": view(&self.augmented),
            },
            "source_bytes_read": get(&self.source_bytes_read),
            "decode_errors": get(&self.decode_errors),
            "source_errors": get(&self.source_errors),
            "decodes": decodes,
            "decode_ms_mean": if decodes == 0 { 0.0 } else {
                decode_nanos as f64 / decodes as f64 / 1e6
            },
            "source_changes": get(&self.source_changes),
            "open_handles": get(&self.open_handles),
            "opens_refused": get(&self.opens_refused),
            "refills": get(&self.refills),
            "fuse_requests": self.requests.to_json(),
            // What reading one file costs in round trips to the daemon (listings included).
            "fuse_requests_per_open": requests_per_open,
            "work": {
                "full_decodes": get(&self.full_decodes),
                "full_decode_ms_mean": mean_ms(&self.full_decodes, &self.full_decode_nanos),
                "decode_augments": get(&self.decode_augments),
                "decode_augment_ms_mean": mean_ms(&self.decode_augments, &self.decode_augment_nanos),
                "pixel_augments": get(&self.pixel_augments),
                "pixel_augment_ms_mean": mean_ms(&self.pixel_augments, &self.pixel_augment_nanos),
                // The set's decoded size as read: each sample's pixels counted once.
                "sized_samples": get(&self.sized_samples),
                "sized_pixel_bytes": get(&self.sized_pixel_bytes),
                "source_reads": get(&self.source_reads),
                "source_read_ms_mean": mean_ms(&self.source_reads, &self.source_read_nanos),
                "source_read_cpu_ms_mean": mean_ms(&self.source_reads, &self.source_read_cpu_nanos),
                "source_read_blocked_ms_mean": mean_ms(&self.source_reads, &self.source_read_blocked_nanos),
            },
            // Open latency (wall time) by view and outcome, and pixel work (CPU time) by kind:
            // count, p50, p90, p99 and max, in microseconds.
            "latency_us": self.latency.to_json(),
        });
        if let (Some(doc), serde_json::Value::Object(extra)) = (doc.as_object_mut(), extra) {
            doc.extend(extra);
        }
        doc
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
    fn each_recipe_shows_its_opens_kept_or_made_and_its_pixel_work_per_sample_by_name() {
        let stats = Stats::default();
        bump(&stats.pipeline(1).served_kept, 3);
        bump(&stats.pipeline(1).made_at_open, 2);
        bump(&stats.pipeline(1).made, 4);
        bump(&stats.pipeline(1).made_nanos, 4000);
        bump(&stats.pipeline(2).made_at_open, 1);
        let doc = stats.recipes_json(["val", "ta"]);
        assert_eq!(doc["val"]["opens"], 5);
        assert_eq!(doc["val"]["served_kept"], 3);
        assert_eq!(doc["val"]["made_at_open"], 2);
        assert_eq!(doc["val"]["pixel_ns_per_sample"], 1000);
        assert_eq!(doc["ta"]["opens"], 1);
        assert_eq!(stats.pipeline_reads(3), [0, 5, 1]);
    }
}
