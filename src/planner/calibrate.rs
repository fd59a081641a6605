//! Measures the planner's inputs on the running machine, for `split: auto`.
//!
//! A handful of samples spread over the catalog are read, decoded and augmented at mount; their
//! sizes and timings, a memory-copy rate for the cache's bandwidth, the decode pool's thread
//! count (at most one per core) and the configured consumer rate become a [`PlanParams`] for Seneca's model. Nothing
//! is taken from an offline profile.

use std::time::Instant;

use crate::pixels::augment::plan_sample;
use crate::shared::{draw_rng, Size2};
use crate::source::catalog::{Catalog, DirId};
use crate::config::Config;
use crate::pixels::output;
use crate::pixels::pipeline;
use crate::planner::PlanParams;

/// Samples timed at mount.
pub(crate) const PROBE_SAMPLES: usize = 12;

/// What was measured, for logs and stats.
#[derive(Debug, Clone)]
pub struct Calibration {
    pub params: PlanParams,
    pub samples_timed: usize,
    /// Full decode and augment, samples/s on all the decode cores (`planner::run`'s `t_full`).
    pub t_full: f64,
}

/// Times up to [`PROBE_SAMPLES`] samples (their bytes from `read`, the source's bounded
/// reads) and the memory copy rate; `None` when no sample could be timed (an empty or
/// unreadable dataset).
pub(crate) fn measure(catalog: &Catalog, config: &Config, read: impl Fn(u32) -> Option<Vec<u8>>) -> Option<Calibration> {
    let images: Vec<u32> = (0..catalog.file_count() as u32).filter(|&f| catalog.is_image(f)).collect();
    if images.is_empty() {
        return None;
    }
    let stride = (images.len() / PROBE_SAMPLES).max(1);
    let (mut bytes, mut read_s, mut pixels, mut da_s, mut a_s, mut timed) = (0u64, 0f64, 0u64, 0f64, 0f64, 0usize);
    let mut full_s = 0f64;
    for &file in images.iter().step_by(stride).take(PROBE_SAMPLES) {
        let started = Instant::now();
        let Some(data) = read(file) else { continue };
        let read = started.elapsed().as_secs_f64();
        let Ok(size) = pipeline::probe_size(std::io::Cursor::new(&data)) else { continue };
        let plan = plan_sample(&config.augment, size, &mut draw_rng(config.seed, u64::MAX, 0, u64::from(file)));
        let started = Instant::now();
        if pipeline::augment(&data, &plan, config.max_pixels).is_err() {
            continue;
        }
        let da = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let Ok(full) = pipeline::decode_full(&data, config.max_pixels) else { continue };
        let full_decode = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let Ok(out) = pipeline::augment_pixels(&full, &plan) else { continue };
        let _ = output::encode(&config.output, &out);
        let a = started.elapsed().as_secs_f64();
        bytes += data.len() as u64;
        read_s += read;
        pixels += Size2::new(full.width, full.height).area();
        da_s += da;
        a_s += a;
        full_s += full_decode + a;
        timed += 1;
    }
    if timed == 0 {
        return None;
    }
    let n = timed as f64;
    let threads = config.decode_parallelism() as f64;
    let params = PlanParams {
        n_total: catalog.sample_count() as u64,
        s_data: bytes as f64 / n,
        s_decoded: pixels as f64 * 3.0 / n,
        s_augmented: output::encoded_len(&config.output, config.augmented_size().unwrap_or(Size2::new(224, 224))) as f64,
        s_cache: config.cache.memory as f64,
        b_cache: memory_copy_rate(),
        b_nic: f64::INFINITY,
        b_pcie: f64::INFINITY,
        b_storage: (bytes as f64 / read_s.max(1e-6)).min(1e12),
        t_gpu: config.cache.consumer_samples_per_s,
        t_da: threads * n / da_s.max(1e-9),
        t_a: threads * n / a_s.max(1e-9),
        nodes: 1,
        c_nw: 0.0,
        c_pcie: 0.0,
        // Measured while serving (it needs FUSE round trips); the model assumes a default.
        t_serve: None,
        jobs: 1,
        cores: threads as u32,
        dirs: (0..catalog.dir_count()).filter(|&d| !catalog.images(d as DirId).is_empty()).count().max(1) as u32,
        // Measured while serving, from the remote tier (the controller's `tick`).
        s_remote: 0.0,
        s_remote_entry: bytes as f64 / n,
        remote_decoded: 0.0,
        t_remote: 0.0,
    };
    Some(Calibration { params, samples_timed: timed, t_full: threads * n / full_s.max(1e-9) })
}

/// Seconds the machine's cores have been busy (all of them added up) since boot, from
/// `/proc/stat`'s first line (user, nice, system, irq, softirq, steal; not idle or iowait).
pub(crate) fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| busy as f64 / hz as f64)
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
