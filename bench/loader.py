#!/usr/bin/env python3
"""Issue 14's measurement: samples/s into CPU tensors through prepfs.Loader against a torch
DataLoader (ImageFolder, PILToTensor, 2 workers) reading the same job's `augmented/` files on the
same mount, same batch size, cold (a fresh mount, nothing cached) and warm (the refill has made
an output for every sample). Run with the bench venv's python (torch, torchvision) and the
module installed in it:

    target/bench-venv/bin/pip install target/wheels/prepfs-*.whl
    target/bench-venv/bin/python bench/loader.py [--data DIR] [--bin target/release/prepfs] [--out F.json]

Unmounts and stops what it started on every way out.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np
import torch
import torchvision

import prepfs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mount:
    def __init__(self, binary, data, work):
        self.mnt = os.path.join(work, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        cfg = os.path.join(work, "mount.yaml")
        with open(cfg, "w") as f:
            f.write("seed: 1\naugment:\n  - random_resized_crop: { size: 224 }\n  - random_horizontal_flip: { p: 0.5 }\n"
                    "output: { format: ppm }\ncache: { memory: 1GiB }\nloader: { socket: %s/loader.sock }\n" % work)
        self.log = open(os.path.join(work, "log"), "w")
        self.proc = subprocess.Popen(["timeout", "900", binary, "mount", data, self.mnt, "--config", cfg, "--read-only", "--foreground"],
                                     stderr=self.log)
        for _ in range(600):
            if os.path.exists(self.mnt + "/.prepfs/stats.json"):
                return
            time.sleep(0.1)
        raise SystemExit("mount not ready")

    def stats(self):
        with open(self.mnt + "/.prepfs/stats.json") as f:
            return json.load(f)

    def wait_refilled(self, n):
        for _ in range(1200):
            if self.stats()["cache"]["augmented"]["entries"] >= n:
                return
            time.sleep(0.1)

    def stop(self):
        subprocess.call(["fusermount3", "-u", self.mnt])
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            subprocess.call(["fusermount3", "-u", "-z", self.mnt])
            self.proc.kill()


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
    ap.add_argument("--out")
    a = ap.parse_args()
    res = {"batch": a.batch, "data": a.data, "rounds": []}
    for r in range(a.rounds):
        row = {}
        for name, run in (("loader", with_loader), ("dataloader", with_dataloader)):
            with tempfile.TemporaryDirectory(prefix="prepfs-loader-bench-") as work:
                m = Mount(a.bin, a.data, work)
                try:
                    n, cold = run(m, "cold", a.batch)
                    total = m.stats()["samples"]
                    m.wait_refilled(total)
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
    print(json.dumps({"median": res["median"], "ratio": res["ratio"]}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
