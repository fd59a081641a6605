#!/usr/bin/env python3
"""Three training jobs at once, 2 epochs each, with prepfs's defaults (no policy, no consumer
rate given) and a cache of 20% of the set's bytes, against three jobs that decode the JPEGs
themselves (PIL: open, convert to RGB, a RandomResizedCrop-like crop and resize to 224, a flip),
as the cache-pays-off issue asks: with storage limited to 10 MB/s and with local storage.

A job is one process, as an unmodified ImageFolder loop with one worker: it lists its view
sorted (class = directory), shuffles the indices each epoch, and opens and decodes every file
once per epoch. prepfs jobs read `jobs/<job>/augmented` (PPM through PIL); the peers read the
source (local) or a prepfs mount's `encoded/` with no cache and the read limit, each file read past
the page cache as scenario 4's torchvision jobs do (limited).

The floor, measured in the same run: the same three jobs reading ready-made outputs (one per
sample, made through the mount's augmented/) from tmpfs, as fast as a cache could serve them.
The model's predicted makespan is the samples the jobs were served over the plan's predicted
samples/s, averaged over the run (polled every half second).

Usage: PYTHONPATH=bench python3 -m prepfs_bench.jobs --prepfs target/release/prepfs --gen target/release/examples/make_dataset
                                          [--classes 30 --per-class 40 | --source DIR] [--out bench/results/DATE-jobs]
Prints and writes per setting: makespan of each system and of the floor, prepfs's hit rate and
decodes per sample served, and the predicted makespan.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Process

from . import BENCH_DIR
from .mount import Mount
from .runs import write_report


def job(root, decode_jpeg, seed, epochs, uncached=False, trace=None):
    """One job's epochs (see the module's text). TRACE: a path the job writes its waits to at
    the end (JSON; prepfs_bench.profile): per sample, its open (the `open` call PIL makes:
    FUSE lookup and open) and its reads (the rest of `Image.open`, the header's read, and
    `load()`, the pixels' read or page faults of PIL's mmap), each as [start, end] on
    time.monotonic(); and the job's own CPU seconds. The loop is the same with or without."""
    import io
    from PIL import Image
    from .loaders import read_uncached
    classes = sorted(os.listdir(root))
    items = [(os.path.join(root, c, n), i) for i, c in enumerate(classes) for n in sorted(os.listdir(os.path.join(root, c)))
             if n.lower().endswith((".jpg", ".jpeg", ".ppm"))]
    rng = random.Random(seed)
    waits = _Waits() if trace else None
    for _ in range(epochs):
        order = list(range(len(items)))
        rng.shuffle(order)
        for k in order:
            path, _label = items[k]
            # Limited storage stands for a set larger than memory: as scenario 4's torchvision
            # jobs do, the peers read each file past the page cache (else one job's read would
            # serve the other two and every later epoch from memory).
            if waits:
                waits.begin()
            with Image.open(io.BytesIO(read_uncached(path)) if uncached else path) as im:
                if waits:
                    waits.loaded(im)
                im = im.convert("RGB")
                if decode_jpeg:
                    w, h = im.size
                    area = w * h * rng.uniform(0.08, 1.0)
                    cw = min(w, int(area ** 0.5))
                    ch = min(h, int(area ** 0.5))
                    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
                    im = im.crop((x, y, x + cw, y + ch)).resize((224, 224), Image.BILINEAR)
                    if rng.random() < 0.5:
                        im = im.transpose(Image.FLIP_LEFT_RIGHT)
                im.tobytes()
    if waits:
        waits.write(trace)


class _Waits:
    """A traced job's waits (`job`'s TRACE): the `open` PIL calls, timed through builtins.open
    (patched in the job's own process only), and the reads around it."""

    def __init__(self):
        import builtins
        self.opens, self.reads = [], []
        self._open = builtins.open
        self._last = None

        def timed_open(*a, **k):
            t0 = time.monotonic()
            f = self._open(*a, **k)
            self._last = (t0, time.monotonic())
            return f
        builtins.open = timed_open

    def begin(self):
        self._last = None
        self._start = time.monotonic()

    def loaded(self, im):
        """Image.open has returned: its open and its header's read are timed; `load()` the pixels."""
        t_opened = time.monotonic()
        if self._last:
            self.opens.append(self._last)
            self.reads.append((self._last[1], t_opened))
        im.load()
        self.reads.append((t_opened, time.monotonic()))

    def write(self, path):
        with self._open(path, "w") as f:
            json.dump({"pid": os.getpid(), "opens": self.opens, "reads": self.reads, "cpu_s": time.process_time(),
                       "schedstat": _schedstat()}, f)


def _schedstat():
    """This process's [CPU ns, ns runnable but waiting for a core, time slices] (/proc's schedstat)."""
    try:
        with open("/proc/self/schedstat") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return None


def children_cpu():
    """CPU seconds (user + system) of this process's ended children: the jobs' own work."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def makespan(roots, decode_jpeg, epochs=2, uncached=False, poll=None, traces=None):
    """Seconds until every job is done; `poll` is called about every half second meanwhile.
    The jobs' CPU seconds (all three together) are left in `makespan.jobs_cpu`. TRACES: one
    path per job for its waits (`job`'s TRACE)."""
    cpu_before = children_cpu()
    started = time.time()
    procs = [Process(target=job, args=(root, decode_jpeg, 100 + i, epochs, uncached, traces[i] if traces else None))
             for i, root in enumerate(roots)]
    for p in procs:
        p.start()
    for p in procs:
        while p.is_alive():
            p.join(0.5)
            if poll:
                poll()
        if p.exitcode != 0:
            raise RuntimeError(f"a job failed ({p.exitcode})")
    took = time.time() - started
    makespan.jobs_cpu = children_cpu() - cpu_before
    return took


def three_jobs(mount, epochs, traces=None):
    """Three jobs at once over `mount`, one process each over jobs/job<i>/augmented, `epochs`
    epochs each: their makespan, and the plan's per-epoch predictions for several jobs seen
    meanwhile (stats.json's `plan.epochs`, for `predicted_makespan`). TRACES: `makespan`'s."""
    roots = [os.path.join(mount.mnt, "jobs", f"job{i}", "augmented") for i in range(3)]
    for r in roots:
        os.listdir(r)
    seen = []

    def poll():
        plan = mount.stats().get("plan") or {}
        if (plan.get("inputs") or {}).get("jobs", 1) > 1 and plan.get("epochs"):
            seen.append(plan["epochs"])
    return makespan(roots, False, epochs=epochs, poll=poll, traces=traces), seen


def predicted_makespan(served, epochs, seen):
    """The makespan the plan predicted for `served` samples over `epochs` epochs of all the
    jobs together: each epoch's samples at the rate predicted for it, the first seen while it
    was the current epoch, else the next epoch's prediction from the one before, else the
    steady state's. None when no prediction for several jobs was seen."""
    if not seen:
        return None
    total = 0.0
    for e in range(1, epochs + 1):
        now = [s for s in seen if s.get("current") == e]
        before = [s for s in seen if s.get("current") == e - 1]
        earlier = [s for s in seen if (s.get("current") or 0) < e]
        if now:
            rate = now[0]["predicted_current_samples_per_s"]
        elif before:
            rate = before[-1]["predicted_next_samples_per_s"]
        elif earlier:
            rate = earlier[-1]["predicted_steady_samples_per_s"]
        else:
            rate = seen[0]["predicted_steady_samples_per_s"]
        if not rate:
            return None
        total += served / epochs / rate
    return total


def ready_made(view, out):
    """Copies one output per sample from a mount's augmented/ VIEW to OUT (tmpfs): the floor's
    data, served as fast as files in memory are."""
    for c in os.listdir(view):
        os.makedirs(os.path.join(out, c), exist_ok=True)
        for n in os.listdir(os.path.join(view, c)):
            with open(os.path.join(view, c, n), "rb") as f, open(os.path.join(out, c, n), "wb") as g:
                g.write(f.read())


def generated_source(gen, out, classes, per_class):
    """`classes` x `per_class` JPEGs from the generator at OUT (its README left out): OUT."""
    subprocess.run([gen, "--out", out, "--classes", str(classes), "--per-class", str(per_class), "--quiet"], check=True)
    readme = os.path.join(out, "README.txt")
    if os.path.exists(readme):
        os.remove(readme)
    return out


def tree_bytes(root):
    """The bytes of every file under `root`."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def hits_and_misses(jobs):
    """The opens of stats.json's active `jobs` served from a cache form, and those not."""
    return sum(sum(j["hits"].values()) for j in jobs), sum(j["misses"] for j in jobs)


def pixel_seconds(work):
    """CPU seconds of the mount's pixel work, from stats.json's `work` counts and means."""
    return sum(work.get(n, 0) * (work.get(n[:-1] + "_ms_mean") or 0) / 1e3
               for n in ("full_decodes", "decode_augments", "pixel_augments"))


def pct(x):
    return "-" if x is None else f"{x * 100:.0f}%"


def num(x):
    return "-" if x is None else f"{x:.0f}"


def secs(x):
    return "-" if x is None else f"{x:.1f}"


def common_args(ap, per_class):
    """The arguments prepfs_bench.jobs and prepfs_bench.epochs share: the binaries and the data set's size."""
    ap.add_argument("--prepfs", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--classes", type=int, default=30)
    ap.add_argument("--per-class", type=int, default=per_class)


def main():
    ap = argparse.ArgumentParser()
    common_args(ap, per_class=40)
    ap.add_argument("--cache-extra", default="", help="more cache settings, e.g. 'split: 0-0-100'")
    ap.add_argument("--settings", default="limited,local")
    ap.add_argument("--source", help="an existing data set (ImageFolder of JPEGs) instead of a generated one")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-concurrent-jobs"))
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="prepfs-jobs-")
    rows = []
    try:
        source = args.source or generated_source(args.gen, os.path.join(workdir, "source"), args.classes, args.per_class)
        set_bytes = tree_bytes(source)
        cache = max(1 << 20, set_bytes // 5)
        chosen = args.settings.split(",")
        for setting, limit in [s for s in (("storage 10 MB/s", "10MB/s"), ("local storage", None)) if ("limited" if s[1] else "local") in chosen]:
            src_yaml = f"source: {{ path: /unused, read_limit: {limit} }}\n" if limit else ""
            # The peers: the JPEGs themselves (through a cacheless mount for the read limit).
            peer_mount = Mount(args.prepfs, source, workdir, "peer", src_yaml + "cache: { memory: 0 }\n") if limit else None
            try:
                peer_root = os.path.join(peer_mount.mnt, "encoded") if peer_mount else source
                peer = makespan([peer_root] * 3, True, uncached=bool(limit))
                peer_cpu = makespan.jobs_cpu
            finally:
                if peer_mount:
                    peer_mount.close()
            mount = Mount(args.prepfs, source, workdir, "prepfs", src_yaml + f"cache: {{ memory: {cache}{', ' + args.cache_extra if args.cache_extra else ''} }}\n")
            try:
                daemon_before = mount.cpu_seconds()
                ours, seen = three_jobs(mount, 2)
                ours_jobs_cpu = makespan.jobs_cpu
                daemon_cpu = mount.cpu_seconds() - daemon_before
                st = mount.stats()
                # The floor: the same jobs over ready-made outputs in memory (tmpfs).
                shm = tempfile.mkdtemp(prefix="prepfs-floor-", dir="/dev/shm")
                try:
                    ready_made(os.path.join(mount.mnt, "augmented"), shm)
                    floor = makespan([shm] * 3, False)
                    floor_cpu = makespan.jobs_cpu
                finally:
                    shutil.rmtree(shm, ignore_errors=True)
            finally:
                mount.close()
            jobs = st["jobs"]["active"]
            hits, misses = hits_and_misses(jobs)
            served = sum(j["samples_served"] for j in jobs)
            row = {
                "setting": setting,
                "samples": len([1 for _, _, fs in os.walk(source) for _ in fs]),
                "cache_bytes": cache,
                "set_bytes": set_bytes,
                "peer_makespan_s": peer,
                "prepfs_makespan_s": ours,
                "makespan_ratio": ours / peer,
                "floor_makespan_s": floor,
                "floor_ratio": floor / peer,
                "predicted_makespan_s": None,
                "hit_rate": hits / max(1, hits + misses),
                "decodes": st["decodes"],
                "samples_served": served,
                "jobs_per_decode": served / max(1, st["decodes"]),
                "split": (st.get("plan") or {}).get("split"),
                "samples_per_s": served / ours,
                "predicted_samples_per_s": (st.get("plan") or {}).get("predicted_samples_per_s"),
                "predicted_hit_rate": (st.get("plan") or {}).get("predicted_hit_rate"),
                # Where the time went (CPU seconds, all cores): the peers' jobs; prepfs's jobs and
                # its daemon, of which the pixel work (decodes and augments, as the mount times
                # it); the floor's jobs. The makespan can be no less than their sum over the cores.
                "peer_jobs_cpu_s": peer_cpu,
                "prepfs_jobs_cpu_s": ours_jobs_cpu,
                "daemon_cpu_s": daemon_cpu,
                "daemon_pixel_cpu_s": pixel_seconds(st.get("work") or {}),
                "floor_jobs_cpu_s": floor_cpu,
                "cores": len(os.sched_getaffinity(0)),
            }
            row["predicted_makespan_s"] = predicted_makespan(served, 2, seen)
            rows.append(row)
            print(json.dumps(row), flush=True)
        lines = [f"3 jobs x 2 epochs at once, one process each; prepfs with its defaults and a cache of 20% of the set's bytes "
                 f"({os.path.basename(source.rstrip('/'))}); the floor: the same jobs over ready-made outputs on tmpfs.", "",
                 "| setting | peer makespan s | prepfs makespan s | ratio | floor s (ratio) | predicted makespan s | hit rate (predicted) "
                 "| samples/s (predicted) | samples served per decode | split | CPU s: peers; prepfs jobs + daemon (pixel work); floor |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for r in rows:
            lines.append(f"| {r['setting']} | {r['peer_makespan_s']:.1f} | {r['prepfs_makespan_s']:.1f} | {r['makespan_ratio']:.2f}x "
                         f"| {r['floor_makespan_s']:.1f} ({r['floor_ratio']:.2f}x) | {secs(r['predicted_makespan_s'])} "
                         f"| {r['hit_rate'] * 100:.0f}% ({pct(r['predicted_hit_rate'])}) "
                         f"| {r['samples_per_s']:.0f} ({num(r['predicted_samples_per_s'])}) "
                         f"| {r['jobs_per_decode']:.2f} | {r['split']} "
                         f"| {r['peer_jobs_cpu_s']:.1f}; {r['prepfs_jobs_cpu_s']:.1f} + {r['daemon_cpu_s']:.1f} "
                         f"({r['daemon_pixel_cpu_s']:.1f}); {r['floor_jobs_cpu_s']:.1f} |")
        write_report(args.out, rows, lines)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
