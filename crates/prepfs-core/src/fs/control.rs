//! The `.prepfs/` control files: who may read them, `loader.json`'s content (what a loader
//! needs, for every user an `allow_other` mount serves), and the figures other parts own that
//! `stats.json` and `metrics` both show ([`Gauges`], gathered once here for the registry in
//! [`crate::metrics::defs`], which renders both); `stats.json` adds the sections its owners
//! write whole (cache, plan, jobs, bad samples). `config.yaml` serves the effective
//! configuration, [`crate::config::Config::to_yaml`].

use std::sync::atomic::Ordering;

use super::Filesystem;
use crate::metrics::{exposition, Figures, Gauges, JobFigures, RecipeStore};
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
    /// shows; decode buffers and the allocator's slack are the rest; `None` where the system
    /// does not say).
    fn memory(&self, cache: &serde_json::Value) -> Vec<(&'static str, Option<u64>)> {
        let used = |form: &str| cache[form]["bytes_used"].as_u64().unwrap_or(0);
        let catalog = self.catalog();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kb = |key: &str| {
            status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        };
        vec![
            ("cache_encoded", Some(used("encoded"))),
            ("cache_decoded", Some(used("decoded"))),
            ("cache_augmented", Some(used("augmented"))),
            ("loader_rings", Some(self.stats().loader.ring_bytes.load(Ordering::Relaxed))),
            ("catalog", Some((catalog.bytes_per_sample() * catalog.sample_count().max(1) as f64) as u64)),
            ("jobs_state", Some(self.ods_metadata_bytes() as u64)),
            ("open_handles", Some(self.open_budget.held())),
            ("resident", kb("VmRSS:").map(|k| k * 1024)),
            ("peak_resident", kb("VmHWM:").map(|k| k * 1024)),
        ]
    }

    /// The figures the registry reads beside the counters, given the cache's (`cache_stats`).
    fn gauges(&self, cache: &serde_json::Value) -> Gauges {
        // The cache's figures are read from its JSON (the cache owns no typed view of them).
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
        Gauges {
            memory: self.memory(cache),
            recipes: self.config().recipes.iter().map(|r| r.name.clone()).collect(),
            recipe_stores: (1u8..)
                .take(self.config().recipes.len())
                .map(|r| {
                    self.cache.outputs(r).map(|store| RecipeStore {
                        outputs: store.entries(),
                        bytes: store.used(),
                        budget: store.budget(),
                    })
                })
                .collect(),
            samples: self.catalog().sample_count() as u64,
            cache: forms,
            passthrough_on: self.passthrough_on(),
            remote_forged: cache["remote"]["forged"].as_u64(),
            remote_work: self.remote_work_figures(),
            server: self.server_life(),
            jobs: self
                .jobs
                .active()
                .iter()
                .map(|j| {
                    let (c, all) = (&j.counters, j.across_views());
                    JobFigures {
                        name: j.name().to_owned(),
                        epoch: all.epoch,
                        served: all.served,
                        hits: c.hits(),
                        misses: c.misses.load(Ordering::Relaxed),
                    }
                })
                .collect(),
        }
    }

    /// The live figures, as served in `.prepfs/stats.json`: the registry's, then the sections
    /// their owners write whole.
    pub(crate) fn stats_json(&self) -> String {
        let catalog = self.catalog();
        let cache = self.producer.cache_stats();
        let gauges = self.gauges(&cache);
        let mut doc = crate::metrics::json(&Figures { stats: self.stats(), gauges: &gauges });
        let life = self.server_life();
        // Which server of the mount this is (issue 53): a supervised mount's changes at each
        // restart.
        let server = serde_json::json!({
            "pid": life.pid,
            "restarts": life.restarts,
            "last_restart_cause": life.last_restart_cause,
            "supervised": life.supervised,
        });
        let extra = serde_json::json!({
            // The daemon's, for `prepfs unmount`.
            "pid": std::process::id(),
            "server": server,
            // As text: a path that is not UTF-8 would fail the whole document (JSON holds only
            // text), its bytes shown as U+FFFD.
            "source": self.config().source.to_string_lossy(),
            "files": catalog.file_count(),
            "directories": catalog.dir_count(),
            "stem_collisions": catalog.stem_collisions,
            "bad_samples": self.reader.bad_samples_json(),
            "catalog_bytes_per_sample": catalog.bytes_per_sample(),
            "memory_auto": self.config().cache.auto,
            "cache": cache,
            "plan": self.plan.plan_json(self.epochs_done()),
            "jobs": self.jobs.stats(&gauges.recipes),
            "ods_metadata_bytes": self.ods_metadata_bytes(),
            "open_bytes": self.open_budget.held(),
            "max_open_bytes": self.config().access.max_open_bytes,
            // Pixel work in flight, within max_open_bytes of its own (pixels::budget).
            "pixel_work_bytes": self.producer.pixels_in_flight().0,
            "passthrough": self.passthrough_json(),
            "loader": { "socket": self.stats().loader.socket.get() },
            "remote_work": self.remote_work_stats(),
        });
        if let serde_json::Value::Object(extra) = extra {
            crate::metrics::merge(&mut doc, extra);
        }
        let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The live figures in Prometheus's text format, as served in `.prepfs/metrics`.
    pub fn metrics_text(&self) -> String {
        let gauges = self.gauges(&self.producer.cache_stats());
        exposition(&Figures { stats: self.stats(), gauges: &gauges })
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::super::inodes::ROOT_INO;
    use super::super::tests::{core, ino_of, read_file};
    use super::*;
    use crate::metrics::defs::{self, ALL};
    use crate::stats::FuseOp;

    #[test]
    fn every_registered_metric_appears_in_a_mounts_stats_json_and_exposition() {
        let recipes = "cache: { memory: 64MiB, refill: false }\nrecipes:\n  small: { augment: [ {random_resized_crop: {size: 8}} ] }\n";
        let (_dir, fs) = core(2, recipes);
        read_file(&fs, ino_of(&fs, "augmented", "s000.ppm"));
        let jobs = fs.lookup(ROOT_INO, OsStr::new("jobs"), super::super::Caller::ROOT).expect("jobs/").ino;
        fs.mkdir(jobs, OsStr::new("train"), super::super::Caller::ROOT).expect("a job");
        fs.stats().fuse_errors.count(FuseOp::Lookup, libc::ENOENT);
        // A server started again by its supervisor (issue 53): the restart's figures too.
        fs.set_server_life(crate::stats::ServerLife { pid: 7, restarts: 1, last_restart_cause: Some("killed by signal 9 (SIGKILL)".into()), supervised: true });

        let doc: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("stats.json parses");
        let text = fs.metrics_text();
        let gauges = fs.gauges(&fs.producer.cache_stats());
        let figures = Figures { stats: fs.stats(), gauges: &gauges };
        for def in ALL {
            let series: Vec<_> = def.series(&figures).into_iter().filter(|(_, v)| *v != crate::metrics::Value::Absent).collect();
            // A unit core has no remote tier: the figures of one (and of the work asked through it,
            // the mounted tests' in crates/prepfs/tests/mounted/workers.rs) it cannot show.
            let remote_only = [&defs::REMOTE_FORGED, &defs::REMOTE_WORK_ITEMS, &defs::REMOTE_WORK_BYTES, &defs::REMOTE_WORKERS, &defs::REMOTE_WORKER_RATE, &defs::REMOTE_WORKER_LAST_SEEN];
            if remote_only.iter().any(|d| std::ptr::eq(*def, *d)) {
                assert!(series.is_empty());
                continue;
            }
            assert!(!series.is_empty(), "{def:?} has a series on this core");
            if def.json_template().is_some() {
                for (values, _) in &series {
                    let values: Vec<&str> = values.iter().map(String::as_str).collect();
                    assert!(def.lookup(&doc, &values).is_some_and(|v| !v.is_null()), "{} in stats.json", def.pointer(&values));
                }
            }
            if let Some(name) = def.prom_name() {
                assert!(text.contains(&format!("\n# TYPE {name} ")) || text.starts_with(&format!("# HELP {name} ")), "{name} in the exposition");
            }
        }
        assert!(doc["recipes"]["small"]["budget"].as_u64().is_some(), "the cache's keys beside the registry's: {}", doc["recipes"]);
        assert!(doc["passthrough"].get("off_because").is_some() && doc["passthrough"].get("opens").is_some(), "{}", doc["passthrough"]);
        assert!(doc["loader"].get("socket").is_some() && doc["loader"].get("batches").is_some(), "{}", doc["loader"]);
    }
}
