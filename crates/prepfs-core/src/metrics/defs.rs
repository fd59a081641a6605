//! Every metric of the mount, declared once: its name in the Prometheus exposition, kind, help,
//! unit, labels, path in `stats.json` and whether `prepfs stats` prints it, with how its series
//! are read from the counters. `.prepfs/stats.json`, `.prepfs/metrics` and the summary are all
//! rendered from [`ALL`] (`render.rs`, `prepfs`'s `summary.rs`).
//!
//! Counting stays at the call site on the relaxed atomics of [`crate::stats::Stats`]
//! (`bump(&stats.decode_errors, 1)`): no lock, no allocation, no lookup by name on the serving
//! path. A new metric is a field there (or a figure of [`Gauges`]) and one entry here.
//!
//! Names and paths are those users and dashboards already read (docs/operations.md, Monitoring): changing
//! one here changes it everywhere at once, so change none lightly.

use std::sync::atomic::AtomicU64;

use prepfs_cache::form::Form;

use super::def::{ratio, Def, Unit, Value};
#[cfg(doc)]
use super::def::Gauges;
use crate::stats::latency::{Outcome, PixelKind};
use crate::stats::{get, ViewCounters};

/// Declares each metric as a `pub static` and lists them all in [`ALL`], in the order they are
/// written out.
macro_rules! registry {
    ($($(#[$doc:meta])* $id:ident = $def:expr;)*) => {
        $($(#[$doc])* pub static $id: Def = $def;)*
        /// Every registered metric, in the order stats.json and the exposition write them.
        pub static ALL: &[&Def] = &[$(&$id),*];
    };
}

/// Each view's counters with its name.
fn views(stats: &crate::stats::Stats) -> [(&'static str, &ViewCounters); 3] {
    [(Form::Encoded.dir_name(), &stats.encoded), (Form::Decoded.dir_name(), &stats.decoded), (Form::Augmented.dir_name(), &stats.augmented)]
}

/// The mean of `nanos` over `n` events, in milliseconds.
fn mean_ms(n: &AtomicU64, nanos: &AtomicU64) -> Value {
    Value::Float(ratio(get(nanos), get(n)) / 1e6)
}

/// An errno's name for a label (`ENOENT`), or its number where it is not one of these.
pub(crate) fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ENODATA => "ENODATA",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::ESTALE => "ESTALE",
        libc::EDQUOT => "EDQUOT",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECANCELED => "ECANCELED",
        _ => return errno.to_string(),
    };
    name.to_owned()
}

registry! {
    UPTIME = Def::gauge("prepfs_uptime_seconds", "Seconds since the mount started.")
        .unit(Unit::Seconds).at("/uptime_s").in_summary()
        .read(|f, out| out(&[], f.stats.uptime().as_secs_f64().into()));
    SAMPLES = Def::gauge("prepfs_samples", "Samples in the scanned source.")
        .at("/samples").in_summary()
        .read(|f, out| out(&[], f.gauges.samples.into()));

    // Each view's opens and bytes (top-level and jobs' views of that form alike).
    VIEW_OPENS = Def::counter("prepfs_opens_total", "Opens of files, by view (top-level and jobs').")
        .labels(&["view"]).at("/views/{view}/opens").in_summary()
        .read(|f, out| views(f.stats).iter().for_each(|(v, c)| out(&[*v], get(&c.opens).into())));
    VIEW_HITS = Def::counter("prepfs_open_hits_total", "Opens served from a cache form, by view (top-level and jobs').")
        .labels(&["view"]).at("/views/{view}/hits").in_summary()
        .read(|f, out| views(f.stats).iter().for_each(|(v, c)| out(&[*v], get(&c.hits).into())));
    VIEW_MISSES = Def::counter("prepfs_open_misses_total", "Opens that read the disk tier or the source, by view (top-level and jobs').")
        .labels(&["view"]).at("/views/{view}/misses").in_summary()
        .read(|f, out| views(f.stats).iter().for_each(|(v, c)| out(&[*v], get(&c.misses).into())));
    VIEW_SERVED_BYTES = Def::counter("prepfs_served_bytes_total", "Bytes served, by view: the daemon's reads and the passthrough files' sizes.")
        .unit(Unit::Bytes).labels(&["view"]).at("/views/{view}/bytes_served").in_summary()
        .read(|f, out| views(f.stats).iter().for_each(|(v, c)| out(&[*v], (get(&c.read_bytes) + get(&c.passthrough_bytes)).into())));
    VIEW_DAEMON_READ_BYTES = Def::counter("prepfs_daemon_read_bytes_total", "Bytes the daemon's own reads served, by view.")
        .unit(Unit::Bytes).labels(&["view"]).at("/views/{view}/bytes_read_by_daemon")
        .read(|f, out| views(f.stats).iter().for_each(|(v, c)| out(&[*v], get(&c.read_bytes).into())));
    VIEW_PASSTHROUGH_BYTES = Def::counter("prepfs_passthrough_bytes_total", "Sizes of the files handed to the kernel to read (passthrough), at their opens, by view.")
        .unit(Unit::Bytes).labels(&["view"]).at("/views/{view}/bytes_passthrough")
        .read(|f, out| views(f.stats).iter().for_each(|(v, c)| out(&[*v], get(&c.passthrough_bytes).into())));

    SOURCE_READ_BYTES = Def::counter("prepfs_source_read_bytes_total", "Bytes read from the source dataset.")
        .unit(Unit::Bytes).at("/source_bytes_read").in_summary()
        .read(|f, out| out(&[], get(&f.stats.source_bytes_read).into()));
    DECODE_ERRORS = Def::counter("prepfs_decode_errors_total", "Samples that could not be decoded (per attempt).")
        .at("/decode_errors").in_summary()
        .read(|f, out| out(&[], get(&f.stats.decode_errors).into()));
    SOURCE_ERRORS = Def::counter("prepfs_source_errors_total", "Source files that vanished or failed to read.")
        .at("/source_errors").in_summary()
        .read(|f, out| out(&[], get(&f.stats.source_errors).into()));
    DECODES = Def::counter("", "Pieces of pixel work done: full decodes, decode-and-augments, augments from pixels.")
        .at("/decodes")
        .read(|f, out| out(&[], f.stats.decodes().into()));
    DECODE_MS_MEAN = Def::gauge("", "Mean CPU time of a piece of pixel work, in milliseconds.")
        .unit(Unit::Milliseconds).at("/decode_ms_mean")
        .read(|f, out| {
            let s = f.stats;
            let nanos = get(&s.full_decode_nanos) + get(&s.decode_augment_nanos) + get(&s.pixel_augment_nanos);
            out(&[], Value::Float(ratio(nanos, s.decodes()) / 1e6));
        });
    SOURCE_CHANGES = Def::counter("prepfs_source_changes_total", "Source files found changed since last seen.")
        .at("/source_changes").in_summary()
        .read(|f, out| out(&[], get(&f.stats.source_changes).into()));
    OPEN_HANDLES = Def::gauge("prepfs_open_handles", "File handles open now.")
        .at("/open_handles").in_summary()
        .read(|f, out| out(&[], get(&f.stats.open_handles).into()));
    OPENS_REFUSED = Def::counter("prepfs_opens_refused_total", "Opens refused because open handles pinned max_open_bytes.")
        .at("/opens_refused")
        .read(|f, out| out(&[], get(&f.stats.opens_refused).into()));
    REFILLS = Def::counter("prepfs_refills_total", "Augmented outputs made by the background refill.")
        .at("/refills")
        .read(|f, out| out(&[], get(&f.stats.refills).into()));

    FUSE_REQUESTS = Def::counter("prepfs_fuse_requests_total", "FUSE requests received, by kind.")
        .labels(&["kind"]).at("/fuse_requests/{kind}")
        .read(|f, out| f.stats.requests.by_kind().iter().for_each(|(kind, n)| out(&[*kind], (*n).into())));
    /// What reading one file costs in round trips to the daemon (listings included).
    FUSE_REQUESTS_PER_OPEN = Def::gauge("", "FUSE requests per open of a file (listings included).")
        .unit(Unit::Ratio).at("/fuse_requests_per_open").in_summary()
        .read(|f, out| {
            let requests: u64 = f.stats.requests.by_kind().iter().map(|(_, n)| n).sum();
            let opens: u64 = views(f.stats).iter().map(|(_, c)| get(&c.opens)).sum();
            out(&[], ratio(requests, opens).into());
        });
    FUSE_ERRORS = Def::counter("prepfs_fuse_errors_total", "FUSE requests answered with an error, by operation and errno (only those seen).")
        .labels(&["op", "errno"]).at("/fuse_errors/{op}/{errno}")
        .read(|f, out| {
            for (op, errno, n) in f.stats.fuse_errors.counted() {
                out(&[op.name(), &errno_name(errno)], n.into());
            }
        });

    // Pixel work and source reads: counts and mean times (`work`).
    WORK_FULL_DECODES = Def::counter("", "Full decodes.")
        .at("/work/full_decodes")
        .read(|f, out| out(&[], get(&f.stats.full_decodes).into()));
    WORK_FULL_DECODE_MS = Def::gauge("", "Mean CPU time of a full decode, in milliseconds.")
        .unit(Unit::Milliseconds).at("/work/full_decode_ms_mean")
        .read(|f, out| out(&[], mean_ms(&f.stats.full_decodes, &f.stats.full_decode_nanos)));
    WORK_DECODE_AUGMENTS = Def::counter("", "Decode-and-augments from encoded bytes.")
        .at("/work/decode_augments")
        .read(|f, out| out(&[], get(&f.stats.decode_augments).into()));
    WORK_DECODE_AUGMENT_MS = Def::gauge("", "Mean CPU time of a decode-and-augment, in milliseconds.")
        .unit(Unit::Milliseconds).at("/work/decode_augment_ms_mean")
        .read(|f, out| out(&[], mean_ms(&f.stats.decode_augments, &f.stats.decode_augment_nanos)));
    WORK_PIXEL_AUGMENTS = Def::counter("", "Augments from decoded pixels.")
        .at("/work/pixel_augments")
        .read(|f, out| out(&[], get(&f.stats.pixel_augments).into()));
    WORK_PIXEL_AUGMENT_MS = Def::gauge("", "Mean CPU time of an augment from decoded pixels, in milliseconds.")
        .unit(Unit::Milliseconds).at("/work/pixel_augment_ms_mean")
        .read(|f, out| out(&[], mean_ms(&f.stats.pixel_augments, &f.stats.pixel_augment_nanos)));
    /// The set's decoded size as read: each sample's pixels counted once.
    WORK_SIZED_SAMPLES = Def::counter("", "Samples augmented at least once (each counted at its first).")
        .at("/work/sized_samples")
        .read(|f, out| out(&[], get(&f.stats.sized_samples).into()));
    WORK_SIZED_PIXEL_BYTES = Def::counter("", "Full pixels' bytes of the samples in sized_samples.")
        .unit(Unit::Bytes).at("/work/sized_pixel_bytes")
        .read(|f, out| out(&[], get(&f.stats.sized_pixel_bytes).into()));
    SOURCE_READS = Def::counter("prepfs_source_reads_total", "Whole-file reads of the source.")
        .at("/work/source_reads")
        .read(|f, out| out(&[], get(&f.stats.source_reads).into()));
    WORK_SOURCE_READ_MS = Def::gauge("", "Mean time a source read's caller waited, in milliseconds.")
        .unit(Unit::Milliseconds).at("/work/source_read_ms_mean")
        .read(|f, out| out(&[], mean_ms(&f.stats.source_reads, &f.stats.source_read_nanos)));
    WORK_SOURCE_READ_CPU_MS = Def::gauge("", "Mean CPU time of a source read on its I/O thread, in milliseconds.")
        .unit(Unit::Milliseconds).at("/work/source_read_cpu_ms_mean")
        .read(|f, out| out(&[], mean_ms(&f.stats.source_reads, &f.stats.source_read_cpu_nanos)));
    WORK_SOURCE_READ_BLOCKED_MS = Def::gauge("", "Mean time a source read was blocked on the storage, in milliseconds.")
        .unit(Unit::Milliseconds).at("/work/source_read_blocked_ms_mean")
        .read(|f, out| out(&[], mean_ms(&f.stats.source_reads, &f.stats.source_read_blocked_nanos)));

    // Latency histograms: count, p50, p90, p99 and max in microseconds in stats.json.
    OPEN_SECONDS = Def::histogram("prepfs_open_seconds", "Time to open a file (wall time), by view and outcome.")
        .labels(&["view", "outcome"]).at("/latency_us/open/{view}/{outcome}").in_summary()
        .read(|f, out| {
            for form in Form::ALL {
                for outcome in Outcome::ALL {
                    out(&[form.dir_name(), outcome.name()], Value::Hist(f.stats.latency.open_of(form, outcome).snapshot()));
                }
            }
        });
    PIXEL_WORK_SECONDS = Def::histogram("prepfs_pixel_work_seconds", "CPU time of each piece of pixel work, by kind.")
        .labels(&["kind"]).at("/latency_us/pixel_work/{kind}").in_summary()
        .read(|f, out| {
            for kind in PixelKind::ALL {
                out(&[kind.name()], Value::Hist(f.stats.latency.pixel[kind as usize].snapshot()));
            }
        });

    // Kernel passthrough (`passthrough`; its state and where output files are made are the
    // passthrough's own figures).
    PASSTHROUGH_ENABLED = Def::gauge("prepfs_passthrough_enabled", "1 when kernel passthrough serves reads.")
        .unit(Unit::Flag).at("/passthrough/on").in_summary()
        .read(|f, out| out(&[], Value::Flag(f.gauges.passthrough_on)));
    PASSTHROUGH_OPENS = Def::counter("prepfs_passthrough_opens_total", "Opens answered with a kernel passthrough backing file.")
        .at("/passthrough/opens").in_summary()
        .read(|f, out| out(&[], get(&f.stats.passthrough.opens).into()));
    PASSTHROUGH_BACKING_IDS_OPEN = Def::gauge("", "Backing ids registered with the kernel and not yet closed.")
        .at("/passthrough/backing_ids_open")
        .read(|f, out| {
            let p = &f.stats.passthrough;
            out(&[], get(&p.backing_ids_opened).saturating_sub(get(&p.backing_ids_closed)).into());
        });
    PASSTHROUGH_BACKING_IDS_OPENED = Def::counter("", "Backing ids registered with the kernel.")
        .at("/passthrough/backing_ids_opened")
        .read(|f, out| out(&[], get(&f.stats.passthrough.backing_ids_opened).into()));

    // The loader socket (`loader`; where it listens is the socket's own figure).
    LOADER_CONNECTIONS = Def::counter("", "Loader connections accepted.")
        .at("/loader/connections")
        .read(|f, out| out(&[], get(&f.stats.loader.connections).into()));
    LOADER_OPEN_CONNECTIONS = Def::gauge("", "Loader connections open now.")
        .at("/loader/open_connections")
        .read(|f, out| out(&[], get(&f.stats.loader.open_connections).into()));
    LOADER_REFUSED = Def::counter("", "Loader connections refused.")
        .at("/loader/refused")
        .read(|f, out| out(&[], get(&f.stats.loader.refused).into()));
    LOADER_BATCHES = Def::counter("", "Batches served over the loader socket.")
        .at("/loader/batches")
        .read(|f, out| out(&[], get(&f.stats.loader.batches).into()));
    LOADER_SAMPLES = Def::counter("", "Samples served over the loader socket.")
        .at("/loader/samples")
        .read(|f, out| out(&[], get(&f.stats.loader.samples).into()));
    LOADER_RING_BYTES = Def::gauge("", "Shared memory the live loader connections' rings take.")
        .unit(Unit::Bytes).at("/loader/ring_bytes")
        .read(|f, out| out(&[], get(&f.stats.loader.ring_bytes).into()));
    LOADER_DENIED = Def::counter("", "Samples the loader passed over because its user may not read them.")
        .at("/loader/denied")
        .read(|f, out| out(&[], get(&f.stats.loader.denied).into()));

    // Each recipe's figures by name (`recipes`; what its store keeps is the cache's).
    RECIPE_OPENS = Def::counter("prepfs_recipe_opens_total", "Opens of a recipe's files (its top-level view and the jobs'), by recipe.")
        .labels(&["recipe"]).at("/recipes/{recipe}/opens")
        .read(|f, out| each_recipe(f, out, |c| c.opens().into()));
    RECIPE_SERVED_KEPT = Def::counter("prepfs_recipe_served_kept_total", "Opens of a recipe's files served an output kept ahead (refill, prefetch, another job's open), by recipe.")
        .labels(&["recipe"]).at("/recipes/{recipe}/served_kept")
        .read(|f, out| each_recipe(f, out, |c| get(&c.served_kept).into()));
    RECIPE_MADE_AT_OPEN = Def::counter("", "Opens of a recipe's files served an output made for them, by recipe.")
        .labels(&["recipe"]).at("/recipes/{recipe}/made_at_open")
        .read(|f, out| each_recipe(f, out, |c| get(&c.made_at_open).into()));
    RECIPE_REFILLS = Def::counter("", "A recipe's outputs the background refill made and kept, by recipe.")
        .labels(&["recipe"]).at("/recipes/{recipe}/refills")
        .read(|f, out| each_recipe(f, out, |c| get(&c.refills).into()));
    RECIPE_OUTPUTS_MADE = Def::counter("prepfs_recipe_outputs_made_total", "Outputs made through a recipe's pipeline, wherever, by recipe.")
        .labels(&["recipe"]).at("/recipes/{recipe}/outputs_made")
        .read(|f, out| each_recipe(f, out, |c| get(&c.made).into()));
    RECIPE_PIXEL_NS_PER_SAMPLE = Def::gauge("", "Mean CPU nanoseconds of the pixel work that made one of a recipe's outputs, by recipe.")
        .unit(Unit::Nanoseconds).labels(&["recipe"]).at("/recipes/{recipe}/pixel_ns_per_sample")
        .read(|f, out| each_recipe(f, out, |c| {
            get(&c.made_nanos).checked_div(get(&c.made)).unwrap_or(0).into()
        }));
    RECIPE_PIXEL_SECONDS = Def::counter("prepfs_recipe_pixel_seconds_total", "CPU seconds of the pixel work that made a recipe's outputs (a decode included where one was made), by recipe.")
        .unit(Unit::Seconds).labels(&["recipe"])
        .read(|f, out| each_recipe(f, out, |c| Value::Float(get(&c.made_nanos) as f64 / 1e9)));
    // What each recipe's store of kept outputs holds of its share of the augmented budget (the
    // cache's figures, gathered into the gauges).
    RECIPE_CACHE_OUTPUTS = Def::gauge("prepfs_recipe_cache_outputs", "Outputs a recipe's store keeps ahead of its readers, by recipe.")
        .labels(&["recipe"]).at("/recipes/{recipe}/kept")
        .read(|f, out| each_recipe_store(f, out, |s| s.outputs));
    RECIPE_CACHE_USED = Def::gauge("prepfs_recipe_cache_used_bytes", "Bytes a recipe's store of kept outputs holds, by recipe.")
        .unit(Unit::Bytes).labels(&["recipe"]).at("/recipes/{recipe}/kept_bytes")
        .read(|f, out| each_recipe_store(f, out, |s| s.bytes));
    RECIPE_CACHE_BUDGET = Def::gauge("prepfs_recipe_cache_budget_bytes", "A recipe's share of the augmented budget, by recipe.")
        .unit(Unit::Bytes).labels(&["recipe"]).at("/recipes/{recipe}/budget")
        .read(|f, out| each_recipe_store(f, out, |s| s.budget));

    // Each active job's figures (`jobs.active`, the jobs' own section).
    JOBS_ACTIVE = Def::gauge("prepfs_jobs_active", "Jobs active now.")
        .read(|f, out| out(&[], (f.gauges.jobs.len() as u64).into()));
    JOB_SAMPLES_SERVED = Def::counter("prepfs_job_samples_served_total", "Samples a job's readers were served, by job.")
        .labels(&["job"]).owned_at("/jobs/active/{job}/samples_served")
        .read(|f, out| f.gauges.jobs.iter().for_each(|j| out(&[j.name.as_str()], j.served.into())));
    JOB_HITS = Def::counter("prepfs_job_hits_total", "A job's opens served from a cache form, by job.")
        .labels(&["job"]).owned_at("/jobs/active/{job}/hits")
        .read(|f, out| f.gauges.jobs.iter().for_each(|j| out(&[j.name.as_str()], j.hits.into())));
    JOB_MISSES = Def::counter("prepfs_job_misses_total", "A job's opens that read the disk tier or the source, by job.")
        .labels(&["job"]).owned_at("/jobs/active/{job}/misses")
        .read(|f, out| f.gauges.jobs.iter().for_each(|j| out(&[j.name.as_str()], j.misses.into())));
    JOB_EPOCH = Def::gauge("prepfs_job_epoch", "The epoch a job is in (1 for its first), by job.")
        .labels(&["job"]).owned_at("/jobs/active/{job}/epoch")
        .read(|f, out| f.gauges.jobs.iter().for_each(|j| out(&[j.name.as_str()], j.epoch.into())));

    // Memory and the cache.
    MEMORY = Def::gauge("prepfs_memory_bytes", "The daemon's memory by part (resident: the whole process, as ps shows it).")
        .unit(Unit::Bytes).labels(&["part"]).at("/memory/{part}").in_summary()
        .read(|f, out| f.gauges.memory.iter().for_each(|(part, bytes)| out(&[*part], (*bytes).into())));
    CACHE_USED = Def::gauge("prepfs_cache_used_bytes", "Bytes held by each cache form (disk: the disk tier).")
        .unit(Unit::Bytes).labels(&["form"]).owned_at("/cache/{form}/bytes_used").in_summary()
        .read(|f, out| f.gauges.cache.iter().for_each(|(form, used, _)| out(&[*form], (*used).into())));
    /// The disk tier's is `cache.disk.size` in stats.json (the cache's section).
    CACHE_BUDGET = Def::gauge("prepfs_cache_budget_bytes", "Budget of each cache form (disk: the disk tier's size).")
        .unit(Unit::Bytes).labels(&["form"]).owned_at("/cache/{form}/budget").in_summary()
        .read(|f, out| f.gauges.cache.iter().for_each(|(form, _, budget)| out(&[*form], (*budget).into())));
    // Preprocessing on other machines' CPUs (`remote_work` in stats.json, written whole there).
    REMOTE_WORK_ITEMS = Def::counter("prepfs_remote_work_items_total", "Work items this mount asked `prepfs worker`s for, by state: queued, done (a result arrived), late (after its readers were served the sample), dropped (a result not kept), lost (none came in time).")
        .labels(&["state"])
        .read(|f, out| f.gauges.remote_work.iter().for_each(|w| w.items.iter().for_each(|(state, n)| out(&[*state], (*n).into()))));
    REMOTE_WORK_BYTES = Def::counter("prepfs_remote_work_bytes_total", "Bytes of outputs received from workers.")
        .unit(Unit::Bytes)
        .read(|f, out| f.gauges.remote_work.iter().for_each(|w| out(&[], w.bytes.into())));
    REMOTE_WORKERS = Def::gauge("prepfs_remote_workers", "Workers heard from in the last 10 s.")
        .read(|f, out| f.gauges.remote_work.iter().for_each(|w| out(&[], (w.workers.len() as u64).into())));
    REMOTE_WORKER_RATE = Def::gauge("prepfs_remote_worker_rate", "Outputs a second a worker made over its last few seconds (for every mount), by worker.")
        .labels(&["worker", "host"])
        .read(|f, out| f.gauges.remote_work.iter().flat_map(|w| &w.workers).for_each(|(name, host, rate, _)| out(&[name.as_str(), host.as_str()], (*rate).into())));
    REMOTE_WORKER_LAST_SEEN = Def::gauge("prepfs_remote_worker_last_seen_seconds", "Seconds since a worker's last beat, by worker.")
        .unit(Unit::Seconds).labels(&["worker", "host"])
        .read(|f, out| f.gauges.remote_work.iter().flat_map(|w| &w.workers).for_each(|(name, host, _, ago)| out(&[name.as_str(), host.as_str()], (*ago).into())));
    // The serving process (issue 53; `server` in stats.json, written whole there).
    SERVER_PID = Def::gauge("prepfs_server_pid", "The pid of the process serving the mount now (a supervised mount's server changes at each restart).")
        .owned_at("/server/pid")
        .read(|f, out| out(&[], u64::from(f.gauges.server.pid).into()));
    SERVER_RESTARTS = Def::counter("prepfs_server_restarts_total", "Servers of this mount that ended before the one serving now and were replaced by the supervisor (crashes and upgrades).")
        .owned_at("/server/restarts")
        .read(|f, out| out(&[], f.gauges.server.restarts.into()));
    SERVER_LAST_RESTART = Def::gauge("prepfs_server_last_restart_info", "1, labelled with why the last server ended (absent before the first restart).")
        .labels(&["cause"])
        .read(|f, out| if let Some(cause) = &f.gauges.server.last_restart_cause { out(&[cause.as_str()], 1u64.into()) });
    REMOTE_FORGED = Def::counter("prepfs_remote_forged_total", "Remote tier values dropped for failing their MAC (forged, or another secret's).")
        .owned_at("/cache/remote/forged")
        .read(|f, out| out(&[], f.gauges.remote_forged.into()));
}

/// Each recipe's series of one figure of its pipeline's counters.
fn each_recipe(f: &super::def::Figures<'_>, out: &mut super::def::Sink<'_>, pick: fn(&crate::stats::PipelineCounters) -> Value) {
    for (name, r) in f.gauges.recipes.iter().zip(1u8..) {
        out(&[name.as_str()], pick(f.stats.pipeline(r)));
    }
}

/// Each recipe's store figure `pick` (a recipe with no store yet has none).
fn each_recipe_store(f: &super::def::Figures<'_>, out: &mut super::def::Sink<'_>, pick: fn(&super::def::RecipeStore) -> u64) {
    for (name, store) in f.gauges.recipes.iter().zip(&f.gauges.recipe_stores) {
        if let Some(store) = store {
            out(&[name.as_str()], pick(store).into());
        }
    }
}
