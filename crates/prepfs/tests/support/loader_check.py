#!/usr/bin/env python3
"""What tests/mounted/loader.rs asks of prepfs.Loader (the installed module), printed as JSON.

    loader_check.py pixels MOUNT JOB     one epoch; each sample's pixels against the mount's
                                         augmented/ file of the same name, and its label
    loader_check.py two MOUNT JOB        two loaders of one job in two threads, 2 epochs meeting
                                         between them: each one's names and content ids
    loader_check.py torch MOUNT JOB      one batch into torch (skipped, saying so, without torch)
    loader_check.py unmount MOUNT JOB    one batch, "ready", waits for a line on stdin (the test
                                         unmounts), then asks for the next batch
    loader_check.py close MOUNT JOB      a loader used as a context manager: its repr, one batch
                                         kept past the block, what iterating after close() does,
                                         and the daemon's ring bytes once it is closed (process
                                         still alive)
    loader_check.py recipe MOUNT JOB     one epoch of Loader(view="val") (the mount's recipe `val`, a
                                         transform without chance): each sample's pixels against
                                         val/'s file of the same name, and each sample once; then
                                         what Loader(view=...) says for a view the mount does not
                                         have and for `pngs` (a recipe whose files are PNGs)
    loader_check.py gpu MOUNT JOB        where a GPU and torch with CUDA are there: one epoch on
                                         "cuda" in uint8 (each sample against the mount's file),
                                         uploaded from the ring and through the staging copy,
                                         and in float32 (against the CPU path's normalisation);
                                         elsewhere the error device="cuda" gives
"""
import json
import os
import sys
import threading

import numpy as np
import prepfs


def ppm_pixels(path):
    data = open(path, "rb").read()
    fields = data.split(b"\n", 3)
    assert fields[0] == b"P6", path
    return np.frombuffer(fields[3], dtype=np.uint8)


def id_of(sample):
    """The sample id coded in an id-dataset image's mean red and green (tests/common)."""
    r, g = float(sample[..., 0].mean()), float(sample[..., 1].mean())
    best = min(range(49), key=lambda i: max(abs(20 + 36 * (i % 7) - r), abs(20 + 36 * ((i // 7) % 7) - g)))
    return best


def view_name(name):
    stem = name.rsplit(".", 1)[0]
    return stem + ".ppm"


def pixels(mnt, job):
    loader = prepfs.Loader(mnt, job=job, batch_size=5)
    out = {"samples": 0, "mismatches": [], "label_errors": [], "classes": loader.classes, "batches": 0}
    for images, labels in loader:
        imgs, labs = np.from_dlpack(images), np.from_dlpack(labels)
        assert imgs.dtype == np.uint8 and imgs.shape[1:] == (224, 224, 3), imgs.shape
        assert labs.dtype == np.int64
        out["batches"] += 1
        for i, name in enumerate(loader.names):
            out["samples"] += 1
            want = ppm_pixels(os.path.join(mnt, "augmented", view_name(name)))
            if not np.array_equal(imgs[i].reshape(-1), want):
                out["mismatches"].append(name)
            if labs[i] != loader.classes.index(name.split("/")[0]):
                out["label_errors"].append(name)
    out["len"] = len(loader)
    return out


def two(mnt, job):
    loaders = [prepfs.Loader(mnt, job=job, batch_size=4, slots=2) for _ in range(2)]
    barrier = threading.Barrier(2)
    # Both loaders hold a batch of the epoch before either takes more: without it one thread
    # could read the whole epoch before the other's first request (the test asserts both share
    # it). The one waiting holds a batch or two of the 24 samples, so the other always finds
    # some; the timeout turns a loader that found none into an error, not a hang.
    first = threading.Barrier(2, timeout=60)
    seen = [[[], []] for _ in range(2)]
    errors = []

    def run(k):
        try:
            for epoch in range(2):
                for b, (images, labels) in enumerate(loaders[k]):
                    imgs = np.from_dlpack(images)
                    for i, name in enumerate(loaders[k].names):
                        seen[k][epoch].append([name, id_of(imgs[i]), int(np.from_dlpack(labels)[i])])
                    del images, imgs
                    if b == 0:
                        first.wait()
                barrier.wait()
        except Exception as e:  # reported, not swallowed
            errors.append(repr(e))
            barrier.abort()
            first.abort()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"seen": seen, "errors": errors, "classes": loaders[0].classes}


def torch_batch(mnt, job):
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not installed for this python3"}
    loader = prepfs.Loader(mnt, job=job, batch_size=3, dtype="float32-normalized")
    images, labels = next(iter(loader))
    t, l = torch.from_dlpack(images), torch.from_dlpack(labels)
    return {"shape": list(t.shape), "dtype": str(t.dtype), "labels": str(l.dtype)}


def unmount(mnt, job):
    # reconnect=0: the mount is unmounted, no daemon comes back; the error comes at once.
    loader = prepfs.Loader(mnt, job=job, batch_size=2, timeout=20, reconnect=0)
    it = iter(loader)
    next(it)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        next(it)
        return {"error": None}
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)}


def gpu_epoch(torch, loader, mnt):
    """One epoch of a uint8 loader on "cuda": each sample against the mount's file."""
    out = {"samples": 0, "mismatches": [], "label_errors": [], "devices": set()}
    for images, labels in loader:
        t, l = torch.from_dlpack(images), torch.from_dlpack(labels)
        out["devices"].add(str(t.device))
        assert t.dtype == torch.uint8 and tuple(t.shape[1:]) == (224, 224, 3), t.shape
        imgs, labs = t.cpu().numpy(), l.cpu().numpy()
        for i, name in enumerate(loader.names):
            out["samples"] += 1
            if not np.array_equal(imgs[i].reshape(-1), ppm_pixels(os.path.join(mnt, "augmented", view_name(name)))):
                out["mismatches"].append(name)
            if labs[i] != loader.classes.index(name.split("/")[0]):
                out["label_errors"].append(name)
        del images, labels, t, l
    out["devices"] = sorted(out["devices"])
    return out


def gpu(mnt, job):
    import warnings
    out = {"gpu_support": prepfs.gpu_support}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            loader = prepfs.Loader(mnt, job=job, batch_size=5, device="cuda")
        except RuntimeError as e:
            out["error"] = str(e)
            return out
    out["warnings"] = [str(w.message) for w in said]
    try:
        import torch
    except ImportError:
        out["skipped"] = "a GPU is here but torch is not installed for this python3"
        return out
    # Uploads straight from the ring where the driver registers it (the path said).
    out["gpu_upload"] = loader.gpu_upload
    out.update(gpu_epoch(torch, loader, mnt))
    loader.close()
    # The staging copy, the fallback where the driver refuses the ring, asked for here; with 2
    # slots (one uploading, one handed out).
    os.environ["PREPFS_LOADER_STAGING"] = "1"
    staged = prepfs.Loader(mnt, job=job + "-staged", batch_size=5, device="cuda", slots=2)
    del os.environ["PREPFS_LOADER_STAGING"]
    out["staged_upload"] = staged.gpu_upload
    out["staged"] = gpu_epoch(torch, staged, mnt)
    staged.close()
    # float32: the GPU's normalisation against the CPU path's, sample by sample (the second
    # job sees the same center-cropped pixels); 2 slots, so a slot is waited for while its upload
    # still reads it.
    cpu = {}
    gpu_loader = prepfs.Loader(mnt, job=job + "-f32", batch_size=5, device="cuda", dtype="float32-normalized", slots=2)
    cpu_loader = prepfs.Loader(mnt, job=job + "-cpu", batch_size=5, dtype="float32-normalized")
    for images, _ in cpu_loader:
        arr = np.from_dlpack(images)
        for i, name in enumerate(cpu_loader.names):
            cpu[name] = arr[i].copy()
    out["f32_max_diff"] = 0.0
    out["f32_samples"] = 0
    out["f32_upload"] = gpu_loader.gpu_upload
    for images, _ in gpu_loader:
        t = torch.from_dlpack(images)
        assert t.dtype == torch.float32 and tuple(t.shape[1:]) == (3, 224, 224), t.shape
        arr = t.cpu().numpy()
        for i, name in enumerate(gpu_loader.names):
            out["f32_samples"] += 1
            out["f32_max_diff"] = max(out["f32_max_diff"], float(np.abs(arr[i] - cpu[name]).max()))
    out["cpu_upload"] = cpu_loader.gpu_upload
    return out


def recipe(mnt, job):
    loader = prepfs.Loader(mnt, job=job, batch_size=5, view="val")
    out = {"samples": [], "mismatches": [], "shapes": set()}
    for images, _ in loader:
        imgs = np.from_dlpack(images)
        out["shapes"].add(str(list(imgs.shape[1:])))
        for i, name in enumerate(loader.names):
            out["samples"].append(name)
            if not np.array_equal(imgs[i].reshape(-1), ppm_pixels(os.path.join(mnt, "val", view_name(name)))):
                out["mismatches"].append(name)
    out["shapes"] = sorted(out["shapes"])
    for view in ("nope", "pngs"):
        try:
            prepfs.Loader(mnt, job=job + "-" + view, batch_size=5, view=view)
            out[view] = None
        except Exception as e:
            out[view] = str(e)
    stats = json.load(open(os.path.join(mnt, ".prepfs", "stats.json")))
    out["job_served"] = {j["name"]: j["samples_served"] for j in stats["jobs"]["active"]}
    return out


def close(mnt, job):
    import time
    out = {}
    with prepfs.Loader(mnt, job=job, batch_size=4) as loader:
        out["repr_open"] = repr(loader)
        images, labels = next(iter(loader))
        kept = np.from_dlpack(images)
        out["ring_bytes_open"] = json.load(open(os.path.join(mnt, ".prepfs", "stats.json")))["loader"]["ring_bytes"]
    out["closed"] = loader.closed
    out["repr_closed"] = repr(loader)
    # The batch kept past the block is still the mount's sample.
    out["kept_sum"] = int(kept.astype(np.int64).sum())
    out["kept_shape"] = list(kept.shape)
    for what, call in (("iter", lambda: iter(loader)), ("next", lambda: next(loader))):
        try:
            call()
            out[what] = None
        except Exception as e:
            out[what] = type(e).__name__
    loader.close()  # twice: nothing happens
    # The ring stays while a batch views it; dropping the last one ends the connection.
    time.sleep(0.3)
    out["ring_bytes_while_kept"] = json.load(open(os.path.join(mnt, ".prepfs", "stats.json")))["loader"]["ring_bytes"]
    out["kept_sum_later"] = int(kept.astype(np.int64).sum())
    del kept, images, labels
    deadline = time.time() + 10
    while True:
        ring = json.load(open(os.path.join(mnt, ".prepfs", "stats.json")))["loader"]["ring_bytes"]
        if ring == 0 or time.time() > deadline:
            break
        time.sleep(0.05)
    out["ring_bytes_closed"] = ring
    return out


if __name__ == "__main__":
    mode, mnt, job = sys.argv[1:4]
    result = {"pixels": pixels, "two": two, "torch": torch_batch, "unmount": unmount, "close": close, "gpu": gpu, "recipe": recipe}[mode](mnt, job)
    print(json.dumps(result), flush=True)
