//! Where the milliseconds of a cold `augmented/` miss go (issue 12), on one thread.
//!
//! Reads every image under `--data` once (timed: the source read), then runs `--rounds` fresh
//! draws of each through prepfs's pixel work twice: as served (`MissProfiler::serve`, untimed
//! inside) and stage by stage (`MissProfiler::staged`), and prints ms per sample for each stage.
//! Run it under `perf record -g` with `--mode serve` for the symbol-level picture.
//!
//! ```text
//! cargo build --release --examples
//! target/release/examples/make_dataset --out /tmp/ds --classes 20 --per-class 40 --width 500 --height 375 --seed 0
//! target/release/examples/miss_profile --data /tmp/ds [--rounds 5] [--mode both|serve|staged|pixels] [--npy] [--float] [--sealed]
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use prepfs_core::config::{Dtype, Format, OutputConfig, DEFAULT_MAX_PIXELS};
use prepfs_pixels::profile::{MissProfiler, StageNanos};

/// The daemon's allocator, so that a miss here meets memory as it does in the daemon.
#[global_allocator]
static ALLOCATOR: prepfs_base::alloc::MapLarge = prepfs_base::alloc::MapLarge;

struct Args {
    data: PathBuf,
    rounds: u64,
    mode: String,
    output: OutputConfig,
    sealed: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { data: PathBuf::new(), rounds: 5, mode: "both".into(), output: OutputConfig::default(), sealed: false };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--data" => args.data = PathBuf::from(value()?),
            "--rounds" => args.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--mode" => args.mode = value()?,
            "--npy" => args.output.format = Format::Npy,
            "--sealed" => args.sealed = true,
            "--float" => {
                args.output.format = Format::Npy;
                args.output.dtype = Dtype::Float32;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.data.as_os_str().is_empty() {
        return Err("--data DIR is required".into());
    }
    Ok(args)
}

fn images(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            images(&path, out)?;
        } else {
            let ext = path.extension().and_then(|x| x.to_str()).unwrap_or("").to_ascii_lowercase();
            let bad = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("bad_"));
            if matches!(ext.as_str(), "jpeg" | "jpg" | "png") && !bad {
                out.push(path);
            }
        }
    }
    Ok(())
}

/// CPU time this thread has used, nanoseconds (a busy machine's preemption left out).
fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn ms(nanos: u64, n: u64) -> f64 {
    nanos as f64 / 1e6 / n.max(1) as f64
}

fn main() -> Result<(), String> {
    prepfs_base::alloc::tune_malloc();
    let args = parse_args()?;
    let mut paths = Vec::new();
    images(&args.data, &mut paths).map_err(|e| format!("{}: {e}", args.data.display()))?;
    let started = Instant::now();
    let files: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display())))
        .collect::<Result<_, _>>()?;
    let read_nanos = started.elapsed().as_nanos() as u64;
    let n = files.len() as u64;
    let mut profiler = MissProfiler::imagenet(args.output.clone(), DEFAULT_MAX_PIXELS, 0);
    if args.sealed {
        profiler = profiler.sealed();
    }
    // Warm up: the thread's decoder, resizer and buffers, the page cache of the binary.
    for (i, bytes) in files.iter().enumerate() {
        profiler.serve(i as u64, 1_000_000, bytes).map_err(|e| format!("{}: {e}", paths[i].display()))?;
    }
    let misses = n * args.rounds;
    println!("{} images, {} MB, {} rounds: {misses} misses on one thread", n, files.iter().map(Vec::len).sum::<usize>() / 1_000_000, args.rounds);
    println!("read (std::fs::read, page cache)  {:.3} ms/sample", ms(read_nanos, n));
    let mut served_bytes = 0usize;
    if args.mode == "both" || args.mode == "serve" {
        let (t, cpu) = (Instant::now(), thread_cpu_nanos());
        for round in 0..args.rounds {
            for (i, bytes) in files.iter().enumerate() {
                let out = profiler.serve(i as u64, round, bytes).map_err(|e| format!("{e}"))?;
                served_bytes += out.len();
            }
        }
        let (nanos, cpu) = (t.elapsed().as_nanos() as u64, thread_cpu_nanos() - cpu);
        println!("served path, whole (wall)         {:.3} ms/sample  ({:.0} samples/s)", ms(nanos, misses), misses as f64 / (nanos as f64 / 1e9));
        println!("served path, whole (thread CPU)   {:.3} ms/sample  ({:.0} samples/s per core)", ms(cpu, misses), misses as f64 / (cpu as f64 / 1e9));
    }
    if args.mode == "both" || args.mode == "pixels" {
        // A miss that keeps pixels: the full decode, then each draw from the pixels.
        let (t, cpu) = (Instant::now(), thread_cpu_nanos());
        let full: Vec<_> = files
            .iter()
            .map(|b| prepfs_pixels::pipeline::decode_full(b, DEFAULT_MAX_PIXELS).map_err(|e| format!("{e}")))
            .collect::<Result<_, _>>()?;
        let (nanos, cpu) = (t.elapsed().as_nanos() as u64, thread_cpu_nanos() - cpu);
        println!("full decode (thread CPU)          {:.3} ms/sample  (wall {:.3})", ms(cpu, n), ms(nanos, n));
        let cpu = thread_cpu_nanos();
        for round in 0..args.rounds {
            for (i, pixels) in full.iter().enumerate() {
                let out = profiler.serve_from_pixels(i as u64, round, pixels).map_err(|e| format!("{e}"))?;
                served_bytes += out.len();
            }
        }
        println!("augment from pixels (thread CPU)  {:.3} ms/sample", ms(thread_cpu_nanos() - cpu, misses));
    }
    if args.mode == "both" || args.mode == "staged" {
        // Wall time between stages: on a busy machine run it more than once.
        let mut times = StageNanos::default();
        for round in 0..args.rounds {
            for (i, bytes) in files.iter().enumerate() {
                let out = profiler.staged(i as u64, round, bytes, &mut times).map_err(|e| format!("{e}"))?;
                served_bytes += out.len();
            }
        }
        println!("staged:");
        for (name, v) in [
            ("header, checks, draw, region", times.header),
            ("decode (region, DCT scale)", times.decode),
            ("resize (crop to output)", times.resize),
            ("mirror", times.mirror),
            ("served bytes (header + pixels)", times.encode),
            ("sum of stages", times.total()),
        ] {
            println!("  {name:<32} {:.3} ms/sample", ms(v, misses));
        }
    }
    println!("({served_bytes} bytes served)");
    Ok(())
}
