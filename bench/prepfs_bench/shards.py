"""prepfs_bench.shards: WebDataset tar shards as the source against the same samples as files (issue 36).

Makes an ImageFolder set with the project's generator (examples/make_dataset), packs it into
WebDataset shards (`KEY.jpg` + `KEY.cls`, as webdataset's ShardWriter writes them, with
Python's tarfile), and mounts each: the files, and the shards by their brace pattern with a kept
index. Measures the shards' index at mount (seconds, from the daemon's log, first from the
headers and then reused from the kept index, and the kept index's bytes per sample) against the
files' scan, and epoch 1 and epoch 2 rates through `augmented/` (every file read whole, in a
shuffled order, by reader threads) of each mount, the page cache dropped before epoch 1 where
root may. Every mount runs under a time limit; keep a run short (the defaults take about a
minute) and niced on a shared machine:

    nice -n 19 env PYTHONPATH=bench python3 -m prepfs_bench.shards --prepfs target/release/prepfs

Results: bench/results/shards-<N>.json and .md, and the run's section in BENCHMARKS.md (not with
PREPFS_BENCH_MD=-).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import List, Optional, Tuple

from . import BENCH_DIR, ROOT
from .mount import Mount
from .runs import write_report
from .units import fmt_num


def default_binary() -> str:
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "prepfs")


def make_images(binary: str, out: str, classes: int, per_class: int) -> None:
    gen = os.path.join(os.path.dirname(os.path.abspath(binary)), "examples", "make_dataset")
    if not os.path.isfile(gen):
        raise SystemExit(f"{gen} is missing: cargo build --release --examples")
    subprocess.run([gen, "--out", out, "--classes", str(classes), "--per-class", str(per_class),
                    "--width", "320", "--height", "240", "--quiet"], check=True, timeout=300)


def pack(tree: str, shards_dir: str, per_shard: int) -> Tuple[int, int]:
    """The tree's images packed into shards of PER_SHARD samples each: (shards, samples)."""
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    samples = [(c, i, name) for i, c in enumerate(classes)
               for name in sorted(os.listdir(os.path.join(tree, c)))
               if name.lower().endswith((".jpg", ".jpeg", ".png"))]
    os.makedirs(shards_dir, exist_ok=True)
    n = 0
    for start in range(0, len(samples), per_shard):
        with tarfile.open(os.path.join(shards_dir, f"train-{n:06d}.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
            for c, label, name in samples[start:start + per_shard]:
                key, ext = os.path.splitext(name)
                tar.add(os.path.join(tree, c, name), arcname=f"{c}_{key}{ext}")
                cls = f"{label}\n".encode()
                info = tarfile.TarInfo(f"{c}_{key}.cls")
                info.size = len(cls)
                tar.addfile(info, io.BytesIO(cls))
        n += 1
    return n, len(samples)


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def epoch(files: List[str], threads: int, seed: int) -> float:
    """Reads every file whole in a shuffled order on THREADS threads: samples per second."""
    order = list(files)
    random.Random(seed).shuffle(order)

    def read(path: str) -> int:
        with open(path, "rb") as f:
            return len(f.read())

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        sizes = list(pool.map(read, order))
    seconds = time.monotonic() - started
    assert all(s > 0 for s in sizes), "an empty read"
    return len(order) / seconds


def listed(view: str) -> List[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(view) for f in fs)


def log_seconds(log: str, message: str) -> Optional[float]:
    """The `secs=` of the daemon's log line saying MESSAGE."""
    for line in open(log, errors="replace"):
        if message in line:
            m = re.search(r"secs=([0-9.e-]+)", line)
            if m:
                return float(m.group(1))
    return None


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prepfs", default=default_binary(), help="the prepfs binary (a release build)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--per-shard", type=int, default=100)
    ap.add_argument("--threads", type=int, default=4, help="reader threads")
    ap.add_argument("--limit", type=float, default=120, help="seconds allowed for a mount to come up")
    ap.add_argument("--label", default="", help="a word said in the report (the build measured)")
    ap.add_argument("--out", default=None, help="results' stem (default bench/results/shards-<N>)")
    args = ap.parse_args(argv)
    binary = os.path.abspath(args.prepfs)
    work = tempfile.mkdtemp(prefix="prepfs-shards-")
    rows = []
    try:
        tree = os.path.join(work, "files")
        make_images(binary, tree, args.classes, args.per_class)
        shards_dir = os.path.join(work, "shards")
        nshards, samples = pack(tree, shards_dir, args.per_shard)
        shard_bytes = sum(os.path.getsize(os.path.join(shards_dir, n)) for n in os.listdir(shards_dir))
        pattern = f"{shards_dir}/train-{{{0:06d}..{nshards - 1:06d}}}.tar"
        index_dir = os.path.join(work, "index")
        yaml = "seed: 1\ncache:\n  memory: 512MiB\n"
        shard_yaml = yaml + f"source:\n  shards: \"{pattern}\"\n  index_dir: {index_dir}\n"
        scan = {}
        for name, source, cfg in [("files", tree, yaml), ("shards", pattern, shard_yaml), ("shards-reused", pattern, shard_yaml)]:
            rooted = drop_caches()
            started = time.monotonic()
            mount = Mount(binary, source, work, name, cfg, read_only=True, timeout=args.limit)
            try:
                mounted_s = time.monotonic() - started
                log = os.path.join(work, name + ".log")
                scan[name] = log_seconds(log, "indexed the shards" if name != "files" else "scanned source")
                if name == "shards-reused":
                    continue
                files = listed(mount.view("augmented"))
                assert len(files) == samples, f"{name}: {len(files)} samples listed, {samples} packed"
                drop_caches()
                e1 = epoch(files, args.threads, 1)
                e2 = epoch(files, args.threads, 2)
                rows.append({"source": name, "samples": len(files), "mount_s": round(mounted_s, 2),
                             "epoch1_per_s": round(e1, 1), "epoch2_per_s": round(e2, 1),
                             "daemon_cpu_s": round(mount.cpu_seconds(), 2), "caches_dropped": rooted})
                print(rows[-1], file=sys.stderr, flush=True)
            finally:
                mount.close()
        index_bytes = sum(os.path.getsize(os.path.join(index_dir, n)) for n in os.listdir(index_dir))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    label = f" ({args.label})" if args.label else ""
    per_sample = index_bytes / max(samples, 1)
    lines = [f"# WebDataset shards against files: {samples:,} samples, {nshards} shards{label}", "",
             f"The generator's {args.classes} x {args.per_class} JPEGs (320x240) as files and packed "
             f"into {nshards} shards of {args.per_shard} samples (`KEY.jpg` + `KEY.cls`, "
             f"{shard_bytes / 1e6:.1f} MB). Scan: the files' directory scan, the shards' index from their "
             f"headers, and from the kept index at the next mount (the daemon's log, seconds). Kept index: "
             f"{fmt_num(per_sample, 1)} bytes per sample. Epochs: every `augmented/` file read whole in a "
             f"shuffled order by {args.threads} threads, epoch 1 after the page cache was dropped, epoch 2 "
             f"at once (samples/s).", "",
             "| source | scan s | scan s, index kept | epoch 1 /s | epoch 2 /s | daemon CPU s |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        kept = fmt_num(scan.get("shards-reused"), 3) if row["source"] == "shards" else "-"
        lines.append(f"| {row['source']} | {fmt_num(scan.get(row['source']), 3)} | {kept} | "
                     f"{fmt_num(row['epoch1_per_s'])} | {fmt_num(row['epoch2_per_s'])} | {row['daemon_cpu_s']} |")
    out = args.out or os.path.join(BENCH_DIR, "results", f"shards-{samples}")
    data = {"samples": samples, "shards": nshards, "shard_bytes": shard_bytes, "scan_s": scan,
            "index_bytes": index_bytes, "index_bytes_per_sample": round(per_sample, 1),
            "label": args.label, "rows": rows}
    write_report(out, data, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
