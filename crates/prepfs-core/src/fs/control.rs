//! The `.prepfs/` control files: who may read them, `stats.json`'s content, `loader.json`'s
//! (what a loader needs, for every user an `allow_other` mount serves) and what `metrics`
//! gathers for [`crate::metrics::exposition`] (`config.yaml` serves the effective
//! configuration, [`crate::config::Config::to_yaml`]).

use std::sync::atomic::Ordering;

use super::Filesystem;
use crate::metrics::{exposition, Gauges, JobFigures};
use prepfs_cache::form::Form;

impl Filesystem {
    /// `.prepfs/` and its files: the owner's only, unless `control_public`. On an
    /// `allow_other` mount every user may search `.prepfs/` (not list it), to reach
    /// `loader.json`; `stats.json`, `config.yaml` and `metrics` stay the owner's (stats.json
    /// names the bad samples' paths).
    pub(super) fn control_perm(&self, dir: bool) -> u16 {
        let access = &self.config().access;
        match (access.control_public, dir) {
            (true, true) => 0o555,
            (true, false) => 0o444,
            (false, true) if access.allow_other => 0o511,
            (false, true) => 0o500,
            (false, false) => 0o400,
        }
    }

    /// `.prepfs/loader.json`: every user's on an `allow_other` mount (the mount's root, the
    /// source's, still decides who reaches it), else as the other control files.
    pub(super) fn loader_file_perm(&self) -> u16 {
        if self.config().access.allow_other {
            0o444
        } else {
            self.control_perm(false)
        }
    }

    /// Refuses `caller` `loader.json` when the source's root denies them search and the mount
    /// shows another owner (`--uid`/`--gid`: else the kernel checked the root as the source
    /// has it): whoever the source keeps out of the dataset learns nothing of the mount.
    pub(super) fn check_loader_file_access(&self, caller: super::Caller) -> crate::error::Result<()> {
        self.check_dir_access(0, caller, super::access::SEARCH)
    }

    /// What a loader needs to find the mount's loader socket, as served in
    /// `.prepfs/loader.json`: `{"version": 1, "socket": PATH}` (`null` with the socket off).
    /// Nothing else: the socket checks each sample against its caller.
    pub(crate) fn loader_json(&self) -> String {
        let doc = serde_json::json!({ "version": 1, "socket": self.stats().loader.socket.get() });
        let mut text = doc.to_string();
        text.push('\n');
        text
    }

    /// Bytes of opportunistic-sampling metadata: the status byte per sample and every active
    /// job's bits.
    pub(crate) fn ods_metadata_bytes(&self) -> usize {
        self.cache().status.bytes() + self.jobs.active().iter().map(|j| j.state_bytes()).sum::<usize>()
    }

    /// Where the daemon's memory is: each cache form's bytes, the loader's rings, the catalog
    /// and the jobs' state, beside the process's resident and peak resident set (what `ps`
    /// shows; decode buffers and the allocator's slack are the rest).
    fn memory_json(&self, cache: &serde_json::Value) -> serde_json::Value {
        let used = |form: &str| cache[form]["bytes_used"].as_u64().unwrap_or(0);
        let catalog = self.catalog();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kb = |key: &str| {
            status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        };
        serde_json::json!({
            "cache_encoded": used("encoded"),
            "cache_decoded": used("decoded"),
            "cache_augmented": used("augmented"),
            "loader_rings": self.stats().loader.ring_bytes.load(Ordering::Relaxed),
            "catalog": (catalog.bytes_per_sample() * catalog.sample_count().max(1) as f64) as u64,
            "jobs_state": self.ods_metadata_bytes(),
            "open_handles": self.open_budget.held(),
            "resident": kb("VmRSS:").map(|k| k * 1024),
            "peak_resident": kb("VmHWM:").map(|k| k * 1024),
        })
    }

    /// The live figures, as served in `.prepfs/stats.json`.
    pub(crate) fn stats_json(&self) -> String {
        let catalog = self.catalog();
        let cache = self.producer.cache_stats();
        let extra = serde_json::json!({
            // The daemon's, for `prepfs unmount`.
            "pid": std::process::id(),
            // As text: a path that is not UTF-8 would fail the whole document (JSON holds only
            // text), its bytes shown as U+FFFD.
            "source": self.config().source.to_string_lossy(),
            "samples": catalog.sample_count(),
            "files": catalog.file_count(),
            "directories": catalog.dir_count(),
            "stem_collisions": catalog.stem_collisions,
            "bad_samples": self.reader.bad_samples_json(),
            "catalog_bytes_per_sample": catalog.bytes_per_sample(),
            "memory": self.memory_json(&cache),
            "memory_auto": self.config().cache.auto,
            "cache": cache,
            "plan": self.plan.plan_json(self.epochs_done()),
            "jobs": self.jobs.stats(),
            "ods_metadata_bytes": self.ods_metadata_bytes(),
            "open_bytes": self.open_budget.held(),
            "max_open_bytes": self.config().access.max_open_bytes,
            // Pixel work in flight, within max_open_bytes of its own (pixels::budget).
            "pixel_work_bytes": self.producer.pixels_in_flight().0,
            "passthrough": self.passthrough_json(),
            "loader": self.stats().loader.to_json(),
            "recipes": self.recipes_json(),
        });
        let mut text = serde_json::to_string_pretty(&self.stats().to_json(extra)).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The live figures in Prometheus's text format, as served in `.prepfs/metrics`.
    pub fn metrics_text(&self) -> String {
        // The cache's figures are read from its JSON (the cache owns no typed view of them).
        let cache = self.producer.cache_stats();
        let figure = |form: &serde_json::Value, key: &str| form.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0);
        let mut forms: Vec<(&'static str, u64, u64)> = Form::ALL
            .iter()
            .map(|f| {
                let form = &cache[f.dir_name()];
                (f.dir_name(), figure(form, "bytes_used"), figure(form, "budget"))
            })
            .collect();
        let disk = &cache["disk"];
        if !disk.is_null() {
            forms.push(("disk", figure(disk, "bytes_used"), figure(disk, "size")));
        }
        let memory = self.memory_json(&cache);
        let memory = memory.as_object().map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect()).unwrap_or_default();
        let gauges = Gauges {
            memory,
            recipes: self.config().recipes.iter().map(|r| r.name.clone()).collect(),
            samples: self.catalog().sample_count() as u64,
            cache: forms,
            jobs_active: self.jobs.active().len() as u64,
            passthrough_on: self.passthrough_on(),
            remote_forged: cache["remote"]["forged"].as_u64(),
            jobs: self
                .jobs
                .active()
                .iter()
                .map(|j| {
                    let c = &j.counters;
                    JobFigures {
                        name: j.name().to_owned(),
                        epoch: j.epoch(),
                        served: c.served.load(Ordering::Relaxed),
                        hits: c.hits(),
                        misses: c.misses.load(Ordering::Relaxed),
                    }
                })
                .collect(),
        };
        exposition(self.stats(), &gauges)
    }
}
