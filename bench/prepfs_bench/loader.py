#!/usr/bin/env python3
"""Issue 14's measurement: samples/s into CPU tensors through prepfs.Loader against a torch
DataLoader (ImageFolder, PILToTensor, 2 workers) reading the same job's `augmented/` files on the
same mount, same batch size, cold (a fresh mount, nothing cached) and warm (the refill has made
an output for every sample). Run with the bench venv's python (torch, torchvision) and the
module installed in it:

    target/bench-venv/bin/pip install target/wheels/prepfs-*.whl
    PYTHONPATH=bench target/bench-venv/bin/python -m prepfs_bench.loader [--data DIR] [--bin target/release/prepfs]
        [--out bench/results/DATE-loader]

Writes PREFIX.json and PREFIX.md (--out) and the table to BENCHMARKS.md's Runs.

Unmounts and stops what it started on every way out.
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np
import torch
import torchvision

import prepfs

from . import BENCH_DIR, ROOT
from .mount import Mount
from .runs import write_report  # the run's JSON and Markdown, its section in BENCHMARKS.md


def mount(binary, data, work):
    """A fresh mount of DATA with the bench's config (read-only at the kernel, the loader's
    socket in WORK)."""
    yaml = ("seed: 1\naugment:\n  - random_resized_crop: { size: 224 }\n  - random_horizontal_flip: { p: 0.5 }\n"
            "output: { format: ppm }\ncache: { memory: 1GiB }\nloader: { socket: %s/loader.sock }\n" % work)
    return Mount(binary, data, work, "bench", yaml, read_only=True)


def wait_refilled(m, n):
    """Waits (up to 2 minutes) until the refill has made `n` outputs."""
    for _ in range(1200):
        if m.stats()["cache"]["augmented"]["entries"] >= n:
            return
        time.sleep(0.1)


def with_loader(m, job, batch):
    loader = prepfs.Loader(m.mnt, job=job, batch_size=batch)
    n, t = 0, time.perf_counter()
    for images, labels in loader:
        x, y = torch.from_dlpack(images), torch.from_dlpack(labels)
        n += len(y)
        del x, y, images, labels
    return n, time.perf_counter() - t


def with_dataloader(m, job, batch):
    ds = torchvision.datasets.ImageFolder(os.path.join(m.mnt, "jobs", job, "augmented"),
                                          transform=torchvision.transforms.PILToTensor())
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=2)
    n, t = 0, time.perf_counter()
    for x, y in dl:
        n += len(y)
    return n, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "target/bench-data/train"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/prepfs"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-loader"),
                    help="PREFIX of the results: PREFIX.json, PREFIX.md (a .json suffix is dropped)")
    a = ap.parse_args()
    res = {"batch": a.batch, "data": a.data, "rounds": []}
    for r in range(a.rounds):
        row = {}
        for name, run in (("loader", with_loader), ("dataloader", with_dataloader)):
            with tempfile.TemporaryDirectory(prefix="prepfs-loader-bench-") as work:
                m = mount(a.bin, a.data, work)
                try:
                    n, cold = run(m, "cold", a.batch)
                    total = m.stats()["samples"]
                    wait_refilled(m, total)
                    n2, warm = run(m, "warm", a.batch)
                    row[name] = {"cold_samples_per_s": round(n / cold), "warm_samples_per_s": round(n2 / warm), "samples": n}
                finally:
                    m.stop()
        res["rounds"].append(row)
        print(json.dumps(row), flush=True)
    for name in ("loader", "dataloader"):
        for k in ("cold_samples_per_s", "warm_samples_per_s"):
            res.setdefault("median", {}).setdefault(name, {})[k] = float(np.median([r[name][k] for r in res["rounds"]]))
    res["ratio"] = {k: round(res["median"]["loader"][k] / res["median"]["dataloader"][k], 2) for k in ("cold_samples_per_s", "warm_samples_per_s")}
    med = res["median"]
    lines = [f"prepfs.Loader against a torch DataLoader (ImageFolder, PILToTensor, 2 workers) on the same job's "
             f"augmented/ files, batch {a.batch}, samples/s into CPU tensors, medians of {a.rounds} rounds, each on a "
             "fresh mount: cold (nothing cached), then warm (the refill has made an output for every sample).", "",
             "| | cold samples/s | warm samples/s |", "|---|---:|---:|",
             *(f"| {name} | {med[name]['cold_samples_per_s']:,.0f} | {med[name]['warm_samples_per_s']:,.0f} |"
               for name in ("loader", "dataloader")),
             f"| loader / dataloader | {res['ratio']['cold_samples_per_s']:.2f}x | {res['ratio']['warm_samples_per_s']:.2f}x |"]
    write_report(a.out, res, lines)


if __name__ == "__main__":
    main()
