#!/usr/bin/env python3
"""Issue 13's measurement: two prepfs mounts of one dataset (standing in for two machines), with
and without a shared Redis tier, storage limited to 10 MB/s in all (5 MB/s per mount), 2 epochs
read at once through both: one job each (`train-a`, `train-b`, each reading every file), and one
job across both (`train` on both mounts, each mount reading its half of a shuffled listing per
epoch, the halves meeting between epochs as a data-parallel job's ranks do). Writes (--out
PREFIX: PREFIX.json, PREFIX.md, and the table to BENCHMARKS.md's Runs) makespan, source bytes,
hit rates and samples served; then the cost of a remote hit against a local one (decoded/ read
with memory too small to hold it, against memory that holds it).

usage: PYTHONPATH=bench python3 -m prepfs_bench.remote_two_mounts [--data DIR] [--bin target/release/prepfs]
                                                                  [--out bench/results/DATE-remote-two-mounts]
Needs redis-server on PATH and a prepfs release build; runs everything under timeouts and
unmounts and stops what it started on every way out.
"""
import argparse
import random
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from . import BENCH_DIR, ROOT
from .mount import Mount
from .servers import RedisServer as Redis
from .runs import write_report  # the run's JSON and Markdown, its section in BENCHMARKS.md

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from read_tree import read_all as read_files  # noqa: E402  (the raw reader: whole files, in order)


def files_under(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def epoch(mount, job, seed, readers=2, part=(0, 1)):
    """One epoch of `job` through `mount`'s job view by `readers` threads, in an order shuffled
    by `seed` (as a training loader shuffles); `part` (k, n): this rank's k-th of n shares of
    it. Its seconds."""
    paths = files_under(os.path.join(mount.mnt, "jobs", job, "augmented"))
    random.Random(seed).shuffle(paths)
    paths = paths[part[0]::part[1]]
    started = time.perf_counter()
    with ThreadPoolExecutor(readers) as pool:
        list(pool.map(read_files, [paths[i::readers] for i in range(readers)]))
    return time.perf_counter() - started, len(paths)


def config(redis, memory, read_limit="5MB/s", extra=""):
    yaml = ("seed: 1\nsource: { path: /unused, read_limit: %s }\naugment:\n"
            "  - random_resized_crop: { size: 224, scale: [0.08, 1.0], ratio: [0.75, 1.3333333] }\n"
            "  - random_horizontal_flip: { p: 0.5 }\noutput: { format: ppm }\ncache:\n  memory: %s\n" % (read_limit, memory))
    if redis:
        yaml += "  remote: { url: \"%s\", size: 4GiB, secret_file: %s }\n" % (redis.url(), redis.secret)
    return yaml + extra


def two_mounts(binary, data, work, shared, across):
    redis = Redis(work) if shared else None
    mounts = []
    try:
        for name in ("a", "b"):
            tag = ("-shared" if shared else "-alone") + ("-across" if across else "-each")
            mounts.append(Mount(binary, data, work, name + tag, config(redis, "64MiB"), read_only=True))
        started = time.perf_counter()
        times = {m.name: [] for m in mounts}
        with ThreadPoolExecutor(2) as pool:
            if across:
                # One job: each epoch both mounts read their half of one shuffled listing, then meet.
                for e in range(2):
                    runs = pool.map(lambda km: epoch(km[1], "train", "epoch:%d" % e, part=(km[0], 2))[0], enumerate(mounts))
                    for m, t in zip(mounts, runs):
                        times[m.name].append(t)
            else:
                def run(km):
                    k, m = km
                    return [epoch(m, "train-" + "ab"[k], "%s:%d" % (m.name, e))[0] for e in range(2)]
                for m, t in zip(mounts, pool.map(run, enumerate(mounts))):
                    times[m.name] = t
        makespan = time.perf_counter() - started
        out = {"makespan_s": round(makespan, 2), "epochs_s": times, "mounts": {}}
        for m in mounts:
            s = m.stats()
            active = s.get("jobs", {}).get("active") or [{}]
            job = active[0]
            remote = s["cache"].get("remote") or {}
            out["mounts"][m.name] = {
                "source_bytes_read": s["source_bytes_read"],
                "job": {k: job.get(k) for k in ("name", "epoch", "opens", "samples_served", "hits", "misses", "hit_rate",
                                                 "shared", "shared_claims", "taken_elsewhere", "decided_alone")},
                "remote": {k: remote.get(k) for k in ("hits", "misses", "writes", "state", "network")} if remote else None,
                # The model's prediction at the end (with a remote tier, for all the mounts
                # sharing it: `inputs.nodes`), and its measured network terms.
                "plan": {"predicted_samples_per_s": round(s["plan"]["predicted_samples_per_s"]),
                         "predicted_hit_rate": round(s["plan"]["predicted_hit_rate"], 3),
                         "inputs": {k: s["plan"]["inputs"].get(k) for k in
                                    ("nodes", "b_nic", "c_nw", "s_remote", "s_remote_entry", "remote_decoded", "b_storage")}},
                "second_epoch_samples_per_s": round(len(files_under(os.path.join(m.mnt, "jobs", job.get("name") or "train", "augmented")))
                                                    / (2 if across else 1) / times[m.name][1]),
            }
        out["source_bytes_read"] = sum(v["source_bytes_read"] for v in out["mounts"].values())
        out["second_epoch_samples_per_s_both"] = sum(v["second_epoch_samples_per_s"] for v in out["mounts"].values())
        out["samples_served"] = sum(v["job"]["samples_served"] or 0 for v in out["mounts"].values())
        return out
    finally:
        for m in mounts:
            m.stop()
        if redis:
            redis.close()


def hit_cost(binary, data, work):
    """decoded/ read twice by one reader: memory holding it (local hits) vs memory too small
    with the remote tier holding it (remote hits)."""
    redis = Redis(work)
    res = {}
    try:
        for name, memory in (("local", "1GiB"), ("remote", "1MiB")):
            m = Mount(binary, data, work, "cost-" + name, config(redis, memory, read_limit="null",
                                                                 extra="  refill: false\n"), read_only=True)
            try:
                paths = files_under(m.mnt + "/decoded")
                read_files(paths)  # fills memory (local) or the remote (remote)
                time.sleep(1.0)  # the remote writer sends what is queued
                before = m.stats()
                started = time.perf_counter()
                read_files(paths)
                dt = time.perf_counter() - started
                after = m.stats()
                lat = after.get("latency_us", {})
                res[name] = {"samples_per_s": round(len(paths) / dt), "ms_per_sample": round(dt * 1000 / len(paths), 3),
                             "remote_hits": (after["cache"]["remote"]["hits"] - before["cache"]["remote"]["hits"]),
                             "source_bytes_read_in_pass": after["source_bytes_read"] - before["source_bytes_read"],
                             "open_latency_us": lat.get("open", {}).get("decoded")}
            finally:
                m.stop()
    finally:
        redis.close()
    return res


def summary_lines(report):
    """The run's table: per setting and tier, makespan, source bytes, hit rates, the second
    epoch measured on both mounts and the plan's prediction for each; the hit cost below."""
    out = ["Two mounts of one data set standing in for two machines, " + report["storage"] +
           ", 2 epochs, without (alone) and with (shared) a Redis tier; the plan's prediction for each "
           "mount against the second epoch measured on both.", "",
           "| jobs | tier | makespan s | source MB read | hit rate (a, b) | 2nd epoch samples/s, both mounts "
           "| predicted samples/s (a, b) |",
           "|---|---|---:|---:|---|---:|---|"]
    for setting, label in (("one_job_each", "one job each"), ("one_job_across_both", "one job across both")):
        for tier in ("alone", "shared"):
            x = report[setting][tier]
            ms = list(x["mounts"].values())
            out.append(f"| {label} | {tier} | {x['makespan_s']:.2f} | {x['source_bytes_read'] / 1e6:.1f} | "
                       + ", ".join(f"{m['job']['hit_rate']:.0%}" for m in ms)
                       + f" | {x['second_epoch_samples_per_s_both']:,} | "
                       + ", ".join(f"{m['plan']['predicted_samples_per_s']:,}" for m in ms) + " |")
    cost = report.get("hit_cost") or {}
    if "local" in cost and "remote" in cost:
        out += ["", f"A pass of decoded/ from memory: {cost['local']['ms_per_sample']} ms per sample; from the "
                f"remote tier: {cost['remote']['ms_per_sample']} ms ({cost['remote']['remote_hits']} remote hits)."]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "target/bench-data/train"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/prepfs"))
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-remote-two-mounts"),
                    help="PREFIX of the results: PREFIX.json, PREFIX.md (a .json suffix is dropped)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="prepfs-remote-bench-")
    try:
        report = {"data": args.data, "storage": "5 MB/s per mount (10 MB/s in all)",
                  "one_job_each": {"alone": two_mounts(args.bin, args.data, work, shared=False, across=False),
                                   "shared": two_mounts(args.bin, args.data, work, shared=True, across=False)},
                  "one_job_across_both": {"alone": two_mounts(args.bin, args.data, work, shared=False, across=True),
                                          "shared": two_mounts(args.bin, args.data, work, shared=True, across=True)},
                  "hit_cost": hit_cost(args.bin, args.data, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_report(args.out, report, summary_lines(report))


if __name__ == "__main__":
    main()
