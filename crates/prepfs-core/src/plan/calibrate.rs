//! Measures the planner's inputs on the running machine, for `split: auto`.
//!
//! A couple of dozen samples spread over the catalog are read, decoded and augmented at mount,
//! on the decode threads at once; their timings, the mean file size of a few hundred, a
//! memory-copy rate for the cache's bandwidth, the decode pool's thread count (at most one per
//! core) and the configured consumer rate become a [`PlanParams`] for the models. Nothing is
//! taken from an offline profile.

use std::time::Instant;

use prepfs_pixels::draw::draw_rng;

use prepfs_pixels::rgb::Size2;
use prepfs_source::catalog::{Catalog, DirId};
use crate::config::Config;
use prepfs_pixels::output;
use prepfs_pixels::pipeline;
use prepfs_pixels::output::Dest;
use prepfs_base::thread_time::thread_cpu_nanos;
use prepfs_planner::PlanParams;

/// Samples timed at mount, on all the decode threads at once: the pixel work of one image can
/// take twice or half the mean of a set (the crop drawn, the image), so a dozen left the cold
/// epoch's prediction 30% off by chance alone.
pub(crate) const PROBE_SAMPLES: usize = 48;

/// Each calibration thread starts no sample after this long (a slow source, large images), once
/// it has timed [`PROBE_MIN_PER_THREAD`].
const PROBE_BUDGET: std::time::Duration = std::time::Duration::from_millis(1500);
const PROBE_MIN_PER_THREAD: usize = 4;

/// Files whose size is looked up at mount for the mean sample size (a lookup each, no read).
pub(crate) const SIZE_SAMPLES: usize = 512;

/// What was measured, for logs and stats.
#[derive(Debug, Clone)]
pub(crate) struct Calibration {
    pub(crate) params: PlanParams,
    pub(crate) samples_timed: usize,
    /// Full decode and augment, samples/s on all the decode cores (`planner::run`'s `t_full`).
    pub(crate) t_full: f64,
}

/// One thread's sums over the samples it timed.
#[derive(Default)]
struct Timed {
    n: usize,
    bytes: u64,
    read_s: f64,
    pixels: u64,
    da_s: f64,
    a_s: f64,
    full_s: f64,
}

impl Timed {
    fn add(&mut self, other: Timed) {
        self.n += other.n;
        self.bytes += other.bytes;
        self.read_s += other.read_s;
        self.pixels += other.pixels;
        self.da_s += other.da_s;
        self.a_s += other.a_s;
        self.full_s += other.full_s;
    }
}

/// Times up to [`PROBE_SAMPLES`] samples (their bytes from `read`, the source's bounded
/// reads) and the memory copy rate; `None` when no sample could be timed (an empty or
/// unreadable dataset). The samples are timed on as many threads at once as decodes run while
/// serving (so each time includes what decodes side by side cost each other), in thread CPU
/// time through the served pixel work, as the mount times it while serving. A dozen samples
/// timed on one thread through another path put a region decode of 1600x1200 JPEGs at 3.3 ms
/// against 4.7 ms while serving (one image's work can be half or twice the mean), and the cold
/// epoch up to 2.1x too fast (BENCHMARKS.md#2026-11-26-plan-matrix-run-gen1600).
/// The mean sample size comes from `size` (the source's lookup, no read) over up to
/// [`SIZE_SAMPLES`] files spread over the set: a dozen timed samples can miss it (the
/// generator's 500x375 set: 28.6 KB against 37.6 KB, which put the cold epoch at 10 MB/s 31% high).
pub(crate) fn measure(
    catalog: &Catalog,
    config: &Config,
    read: impl Fn(u32) -> Option<Vec<u8>> + Sync,
    size: impl Fn(u32) -> Option<u64>,
) -> Option<Calibration> {
    let images: Vec<u32> = (0..catalog.file_count() as u32).filter(|&f| catalog.is_image(f)).collect();
    if images.is_empty() {
        return None;
    }
    let probes = spread(&images, PROBE_SAMPLES);
    let threads = config.decode_parallelism().max(1);
    let mut sum = Timed::default();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(probes.len()))
            .filter_map(|t| {
                let mine: Vec<u32> = probes.iter().copied().skip(t).step_by(threads).collect();
                let read = &read;
                std::thread::Builder::new()
                    .name(format!("prepfs-calibrate-{t}"))
                    .spawn_scoped(scope, move || time_samples(&mine, config, read))
                    .ok()
            })
            .collect();
        for worker in workers {
            if let Ok(timed) = worker.join() {
                sum.add(timed);
            }
        }
    });
    if sum.n == 0 {
        return None;
    }
    let n = sum.n as f64;
    let sizes: Vec<u64> = spread(&images, SIZE_SAMPLES).into_iter().filter_map(&size).collect();
    let s_data = match sizes.is_empty() {
        true => sum.bytes as f64 / n,
        false => sizes.iter().sum::<u64>() as f64 / sizes.len() as f64,
    };
    let threads = threads as f64;
    let params = PlanParams {
        n_total: catalog.sample_count() as u64,
        s_data,
        s_decoded: sum.pixels as f64 * 3.0 / n,
        // `augmented/`'s; the controller counts the recipes' beside it (`output_sizes`).
        s_augmented: output_sizes(config)[0],
        s_cache: config.cache.memory as f64,
        b_cache: memory_copy_rate(),
        b_nic: f64::INFINITY,
        b_pcie: f64::INFINITY,
        // The threads read side by side: their rate together.
        b_storage: (threads * sum.bytes as f64 / sum.read_s.max(1e-6)).min(1e12),
        t_gpu: config.cache.consumer_samples_per_s,
        t_da: threads * n / sum.da_s.max(1e-9),
        t_a: threads * n / sum.a_s.max(1e-9),
        nodes: 1,
        c_nw: 0.0,
        c_pcie: 0.0,
        // Measured while serving (it needs FUSE round trips); the model assumes a default.
        t_serve: None,
        jobs: 1,
        // The controller counts the jobs of each pipeline while serving.
        output_jobs: None,
        cores: threads as u32,
        dirs: (0..catalog.dir_count()).filter(|&d| !catalog.images(d as DirId).is_empty()).count().max(1) as u32,
        // Measured while serving, from the remote tier (the controller's `tick`).
        s_remote: 0.0,
        s_remote_entry: s_data,
        remote_decoded: 0.0,
        t_remote: 0.0,
        // A read's wall time: on local storage its CPU (the controller zeroes it behind a read
        // limit, where a read waits for the link).
        t_read: sum.read_s / n,
        // A made output's cost beyond its pixel work and read: the serving probe's, with jobs.
        t_output: 0.0,
    };
    Some(Calibration { params, samples_timed: sum.n, t_full: threads * n / sum.full_s.max(1e-9) })
}

/// The bytes of one output of each pipeline: `augmented/`'s, then each recipe's in order (an
/// output whose size the pipeline leaves open counted at 224x224).
pub(crate) fn output_sizes(config: &Config) -> Vec<f64> {
    let len = |output, augment| output::encoded_len(output, prepfs_pixels::augment::fixed_output_size(augment).unwrap_or(Size2::new(224, 224))) as f64;
    std::iter::once(len(&config.output, &config.augment)).chain(config.recipes.iter().map(|r| len(&r.output, &r.augment))).collect()
}

/// Up to `k` of `items`, evenly spread, starting half a stride in (a set's first file of each
/// stride is no more typical than any other, and a class's first is often a generator's).
fn spread(items: &[u32], k: usize) -> Vec<u32> {
    let stride = (items.len() / k.max(1)).max(1);
    items.iter().skip(stride / 2).step_by(stride).take(k).copied().collect()
}

/// Reads and times `files` one after another through the served pixel work (`pixels::work`,
/// outputs in memory): a region decode and augment, then a full decode and an augment of its
/// pixels (by each pipeline: `augmented/`'s and each recipe's, their mean). The pixel work is timed in the
/// thread's CPU time, as the mount times it while serving (`pixels::work`); the read in wall
/// time (the storage's rate).
fn time_samples(files: &[u32], config: &Config, read: &(impl Fn(u32) -> Option<Vec<u8>> + Sync)) -> Timed {
    let mut t = Timed::default();
    let began = Instant::now();
    for &file in files {
        if t.n >= PROBE_MIN_PER_THREAD && began.elapsed() > PROBE_BUDGET {
            break;
        }
        let started = Instant::now();
        let Some(data) = read(file) else { continue };
        let read_s = started.elapsed().as_secs_f64();
        let Ok(size) = pipeline::probe_size(std::io::Cursor::new(&data)) else { continue };
        // The same draw for both ways of making the output.
        let rng = || draw_rng(config.seed, u64::MAX, 0, u64::from(file));
        let started = thread_cpu_nanos();
        if prepfs_pixels::pipeline::draw_augment_served(&data, Some(size), &config.augment, &mut rng(), config.max_pixels, &config.output, Dest::Memory).is_err() {
            continue;
        }
        let da = seconds_since(started);
        let started = thread_cpu_nanos();
        let Ok(full) = pipeline::decode_full(&data, config.max_pixels) else { continue };
        let full_decode = seconds_since(started);
        let started = thread_cpu_nanos();
        if prepfs_pixels::pipeline::draw_augment_pixels_served(&full, &config.augment, &mut rng(), &config.output, Dest::Memory).is_err() {
            continue;
        }
        let mut a = seconds_since(started);
        // Each recipe's augment of the same pixels: until reads are counted the pipelines are
        // planned alike (their shares of the room are equal), so the first plan takes their mean.
        for recipe in &config.recipes {
            let started = thread_cpu_nanos();
            let _ = prepfs_pixels::pipeline::draw_augment_pixels_served(&full, &recipe.augment, &mut rng(), &recipe.output, Dest::Memory);
            a += seconds_since(started);
        }
        let a = a / (1 + config.recipes.len()) as f64;
        t.n += 1;
        t.bytes += data.len() as u64;
        t.read_s += read_s;
        t.pixels += Size2::new(full.width, full.height).area();
        t.da_s += da;
        t.a_s += a;
        t.full_s += full_decode + a;
    }
    t
}

/// This thread's CPU seconds since `started` (nanoseconds of [`thread_cpu_nanos`]).
fn seconds_since(started: u64) -> f64 {
    thread_cpu_nanos().saturating_sub(started) as f64 / 1e9
}

/// Seconds the machine's cores have been busy (all of them added up) since boot, from
/// `/proc/stat`'s first line (user, nice, system, irq, softirq, steal; not idle or iowait),
/// less the user time other processes ran niced: a build or batch job at `nice -n 19` is no
/// part of serving's cost, yet counted in it swung the several-jobs probe's serving cost 2x
/// (what it takes from serving's cores still shows in the rates measured). This mount's own
/// niced threads (its background work, or all of it where the daemon was started under `nice`)
/// stay counted. Not left out: other processes' system time, and neighbours at nice 0. Left out
/// wrongly: readers run under `nice`.
pub(crate) fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    let niced_elsewhere = at(1).saturating_sub(own_niced_user_ticks());
    let busy = (at(0) + at(1) + at(2) + at(5) + at(6) + at(7)).saturating_sub(niced_elsewhere);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| busy as f64 / hz as f64)
}

/// Clock ticks of user time this process's threads at a positive nice value have run (their
/// share of `/proc/stat`'s nice column): `/proc/self/task/*/stat`, fields 14 (utime) and 19
/// (nice). A thread's ticks are counted while it lives; the mount's threads live until unmount.
fn own_niced_user_ticks() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter_map(|stat| niced_user_ticks(&stat))
        .sum()
}

/// A task's user ticks from its `stat` line where it runs niced (None where it does not, or the
/// line does not parse). The name (field 2) may hold spaces and parentheses: fields are counted
/// from its closing one.
fn niced_user_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 (state) is fields[0]: utime (14) is fields[11], nice (19) fields[16].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let nice: i64 = fields.get(16)?.parse().ok()?;
    (nice > 0).then_some(utime)
}

/// Bytes per second one thread copies between two 32 MiB buffers: the cache's read bandwidth.
fn memory_copy_rate() -> f64 {
    let src = vec![1u8; 32 << 20];
    let mut dst = vec![0u8; 32 << 20];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let started = Instant::now();
    for _ in 0..4 {
        dst.copy_from_slice(&src);
        std::hint::black_box(&dst);
    }
    (4.0 * src.len() as f64) / started.elapsed().as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_stat_line_gives_its_user_ticks_only_where_it_runs_niced() {
        // A name with spaces and parentheses, as a thread may be named.
        let niced = "4242 (prepfs (fill) 1) S 1 2 3 0 -1 4194368 10 0 0 0 731 55 0 0 30 10 1 0 99 0 0";
        assert_eq!(niced_user_ticks(niced), Some(731));
        let plain = "4243 (prepfs-io-0) S 1 2 3 0 -1 4194368 10 0 0 0 731 55 0 0 20 0 1 0 99 0 0";
        assert_eq!(niced_user_ticks(plain), None);
        assert_eq!(niced_user_ticks("4244 (cut short) S 1 2"), None);
    }

    #[test]
    fn this_process_s_niced_thread_counts_as_its_own_niced_time() {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let (spun, spinning) = std::sync::mpsc::channel::<libc::pid_t>();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid and setpriority on this thread's own id have no preconditions.
            let tid = unsafe { libc::gettid() };
            unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10) };
            let started = thread_cpu_nanos();
            let mut x = 0u64;
            // User time: the thread's clock (a system call) read only every few million steps.
            while thread_cpu_nanos() - started < 300_000_000 {
                for _ in 0..4_000_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            let _ = spun.send(tid);
            // Alive while counted: a thread's ticks leave /proc/self/task with it.
            let _ = wait.recv();
        });
        let tid = spinning.recv().expect("the niced thread spun");
        // Its own line, then the process's sum, which holds it (other tests' threads come and
        // go meanwhile, so the sum is compared with the line, not with an earlier sum).
        let line = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("its stat");
        let ticks = niced_user_ticks(&line).expect("it runs niced");
        let all = own_niced_user_ticks();
        let _ = done.send(());
        thread.join().expect("the niced thread ended");
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        // 0.3 s of user CPU at nice 10 (ticks are coarse: at least half of it).
        assert!(ticks as f64 / hz >= 0.15, "{ticks} ticks at {hz} Hz");
        assert!(all >= ticks, "the process's niced ticks {all} leave out its niced thread's {ticks}");
    }

}
