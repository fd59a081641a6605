"""prepfs_bench.loaders: the data loaders that `make bench` measures, and how one run is measured.

This module owns the loaders: each is a function ``(data_dir, workers=2, limit=None, epochs=1,
seed=0) -> RunResult`` that consumes samples the way a user of that loader would, and reports
how many it consumed, the wall time, the CPU seconds (the process, its threads, and its worker
processes) and the peak RSS. The harness (`python3 -m prepfs_bench`) runs all repetitions of one case
in a child process of their own, through this module's command line, with the framework
imported before the first run:

    python3 -m prepfs_bench.loaders run --loader torchvision --data DIR [--workers 2] [--limit N]
        [--reps 5] [--warmup 1] [--cold] [--sync] [--cpus 0,1]

prints one line `@@result {json}` (a RunResult) per run; with --sync it first prints
`@@ready {json}` and waits for a line on stdin, so the driver can drop caches or remount prepfs
between runs. `python3 -m prepfs_bench.loaders fake-augmented` writes a directory of augmented files
that stands in for prepfs's `augmented/` view.

Loaders (names as used on the command line and in results):

- ``torchvision``     torchvision ImageFolder + DataLoader(batch_size=64, shuffle=True,
                      num_workers=workers) with the standard ImageNet train transform
                      (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize), on JPEGs.
- ``dali``            NVIDIA DALI CPU pipeline (device_id=None): readers.file (random_shuffle),
                      decoders.image_random_crop, resize 224x224, crop_mirror_normalize (random
                      mirror, ImageNet mean/std, CHW), batch 64, num_threads=workers.
- ``torchvision-ppm`` the same DataLoader over already-augmented 224x224 PPM files (what prepfs's
                      ``augmented/`` view serves), with only ToTensor + Normalize left.
- ``torch-npy``       the same DataLoader over already-normalized float32 CHW .npy files
                      (prepfs's npy output): ``torch.from_numpy(np.load(path))``, no transform.
- ``raw``             ``workers`` threads (or processes) reading whole files from a tree: the rate
                      of the filesystem itself, with no decoding.
- ``pil``             a plain PIL + numpy pipeline (no torch): ``workers`` processes decode JPEGs,
                      RandomResizedCrop(224) (torchvision's sampling algorithm, reimplemented),
                      random flip, to uint8 numpy arrays, batched by 64.

Training jobs of scenario 4 (concurrent jobs; each job is one such process, started by the driver
together with the others, and runs `epochs` epochs):

- ``job-torchvision`` ImageFolder + DataLoader(batch 64, shuffle, ``workers`` workers) with the full
                      ImageNet train transform, whose ``loader=`` reads each file's bytes and drops
                      them from the page cache (``posix_fadvise(DONTNEED)``, see
                      ``read_uncached``) before decoding them with PIL: every epoch of every job
                      reads the storage, as with a data set larger than memory.
- ``job-ppm``         the same DataLoader over prepfs ``augmented/`` (or a job's
                      ``jobs/<name>/augmented/``), ToTensor + Normalize only.

Their RunResult's ``extra`` has ``t_start``/``t_end`` (CLOCK_MONOTONIC, shared by every process
of the machine, so the driver computes the makespan across jobs) and ``epoch_walls``.

Only the standard library is needed to import this module; each loader imports its framework
when it runs, so the harness's own tests run without torch or DALI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import resource
import sys
import threading
import time
from typing import List, Optional, Sequence, Tuple

# torchvision's IMG_EXTENSIONS: what ImageFolder (and so every loader here) accepts as a sample.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BATCH_SIZE = 64
CROP_SIZE = 224
# `limit` always picks the same subset of samples (so a warm-up warms what is measured);
# `seed` only changes the order and the augmentation draws.
SUBSET_SEED = 20240


@dataclasses.dataclass
class RunResult:
    """What one measured run of one loader reports."""

    loader: str
    data: str
    samples: int  # samples delivered to the consumer
    wall_s: float  # from the first sample requested to the last delivered (setup excluded)
    cpu_s: float  # user+system CPU of this process, its threads and its (exited) workers
    cpu_self_s: float  # ... of which this process and its threads
    cpu_children_s: float  # ... of which worker processes
    peak_rss_mb: float  # peak over the run of the summed RSS of this process and its children
    maxrss_self_mb: float  # getrusage's ru_maxrss for this process
    maxrss_children_mb: float  # ... for its largest child
    setup_s: float  # building the dataset / pipeline (listing, framework import), not in wall_s
    bytes: int = 0  # bytes read (raw reader only)
    workers: int = 2
    epochs: int = 1
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["samples_per_s"] = self.samples_per_s
        return d


# --------------------------------------------------------------------------------------------
# Measuring


def drain_epoch(loader) -> int:
    """Iterates one epoch of a torch DataLoader; returns the samples it delivered. The exhausted
    iterator's workers are reaped, so that RUSAGE_CHILDREN includes them."""
    n = 0
    it = iter(loader)
    for images, _labels in it:
        n += images.shape[0]
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown:
        shutdown()
    del it
    return n


def _read_mem_kb(pid: int, use_pss: bool) -> int:
    """PSS (or RSS) of one process in KiB; 0 if it is gone."""
    try:
        if use_pss:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        return int(line.split()[1])
            return 0
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


def _descendants(pid: int) -> List[int]:
    """pid and all its descendants, from /proc/PID/task/*/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def tree_memory_mb(pid: int, use_pss: bool = False) -> float:
    """Summed memory of a process tree in MB: RSS, or PSS (forked workers' shared pages split
    between them, so they count once in the sum; reading it costs tens of ms per process)."""
    return sum(_read_mem_kb(p, use_pss) for p in _descendants(pid)) / 1024.0


class MemorySampler:
    """Samples the summed RSS of this process and its descendants every `interval` seconds in
    a thread; `peak_mb` is the largest sum seen. Reading RSS (/proc/PID/statm) is cheap, so the
    sampler costs the measured run nothing noticeable. A sum of RSS counts pages that forked
    workers share (the interpreter, torch's libraries) once per process: an upper bound. The
    driver samples PSS, which splits shared pages, from outside the run (see prepfs_bench.runner)."""

    def __init__(self, pid: Optional[int] = None, interval: float = 0.1):
        self.pid = pid or os.getpid()
        self.interval = interval
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mem-sampler", daemon=True)

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self) -> float:
        mb = tree_memory_mb(self.pid, use_pss=False)
        self.peak_mb = max(self.peak_mb, mb)
        return mb

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_times() -> Tuple[float, float]:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


class Measure:
    """Context for one run: wall clock between start() and stop(), CPU deltas of this process
    and of its reaped children (RUSAGE_CHILDREN counts a worker once it has exited and been
    waited for, so call finish() after the workers are gone), and sampled peak memory."""

    def __init__(self, loader: str, data: str, workers: int, epochs: int, setup_t0: float):
        self.loader, self.data, self.workers, self.epochs = loader, data, workers, epochs
        self.setup_t0 = setup_t0
        self.sampler = MemorySampler()

    def __enter__(self) -> "Measure":
        self.sampler.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.sampler.__exit__(*exc)

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.setup_s = self.t0 - self.setup_t0
        self.cpu0 = _cpu_times()
        self.t1: Optional[float] = None

    def stop(self) -> None:
        """The last sample has been delivered."""
        self.t1 = time.perf_counter()

    def finish(self, samples: int, nbytes: int = 0, **extra) -> RunResult:
        if self.t1 is None:
            self.stop()
        self.sampler.sample()
        cpu1 = _cpu_times()
        s = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_self = cpu1[0] - self.cpu0[0]
        cpu_children = cpu1[1] - self.cpu0[1]
        return RunResult(
            loader=self.loader,
            data=self.data,
            samples=samples,
            wall_s=self.t1 - self.t0,
            cpu_s=cpu_self + cpu_children,
            cpu_self_s=cpu_self,
            cpu_children_s=cpu_children,
            peak_rss_mb=self.sampler.peak_mb,
            maxrss_self_mb=s.ru_maxrss / 1024.0,
            maxrss_children_mb=c.ru_maxrss / 1024.0,
            setup_s=self.setup_s,
            bytes=nbytes,
            workers=self.workers,
            epochs=self.epochs,
            extra=extra,
        )


# --------------------------------------------------------------------------------------------
# Data sets


def list_image_folder(root: str) -> Tuple[List[str], List[Tuple[str, int]]]:
    """ImageFolder's view of `root`: sorted class directories, and (path, class index) for
    every file with an image extension below each, in sorted order."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    if not classes:
        raise FileNotFoundError(f"no class directories in {root}")
    samples = []
    for ci, c in enumerate(classes):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, c), followlinks=True):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.lower().endswith(IMG_EXTENSIONS):
                    samples.append((os.path.join(dirpath, fn), ci))
    if not samples:
        raise FileNotFoundError(f"no image files under {root}")
    return classes, samples


def list_files(root: str) -> List[str]:
    """Every regular file below `root` (os.walk), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        out.extend(os.path.join(dirpath, f) for f in sorted(filenames))
    return out


def pick(items: Sequence, limit: Optional[int], seed: int = SUBSET_SEED) -> List:
    """`limit` items drawn at random (fixed by `seed`), in their original order; or all."""
    items = list(items)
    if limit is None or limit >= len(items):
        return items
    return sorted(random.Random(seed).sample(items, limit))


# --------------------------------------------------------------------------------------------
# RandomResizedCrop without torch


def rrc_params(
    width: int,
    height: int,
    rng: random.Random,
    scale: Tuple[float, float] = (0.08, 1.0),
    ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
) -> Tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params: (top, left, h, w) of the crop.

    Ten tries at a random area in `scale` of the image and a log-uniform aspect ratio in
    `ratio`; failing those, the central crop with the ratio clamped into `ratio`."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def pil_augment(path: str, rng: random.Random, size: int = CROP_SIZE):
    """Decode `path` with PIL, RandomResizedCrop(size) (bilinear, as torchvision on PIL
    images) and a random horizontal flip; an RGB PIL image of size x size."""
    from PIL import Image

    with open(path, "rb") as f:
        img = Image.open(f)
        img = img.convert("RGB")
    top, left, h, w = rrc_params(img.width, img.height, rng)
    img = img.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img


def write_augmented_tree(src: str, dst: str, limit: Optional[int] = None, seed: int = 0,
                         fmt: str = "ppm") -> int:
    """Write one augmentation of each JPEG of the ImageFolder tree `src` (or of `limit` of
    them) under `dst`, same class directories, as `<stem>.ppm` (binary P6 224x224) or
    `<stem>.npy` (float32 CHW, ImageNet-normalized): a stand-in for prepfs's `augmented/`
    view, to exercise the harness without a mount."""
    classes, samples = list_image_folder(src)
    rng = random.Random(seed)
    n = 0
    for path, _ in pick(samples, limit):
        rel = os.path.relpath(path, src)
        out = os.path.join(dst, os.path.splitext(rel)[0] + "." + fmt)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        img = pil_augment(path, rng)
        if fmt == "ppm":
            img.save(out, format="PPM")
        elif fmt == "npy":
            import numpy as np

            a = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
            a = (a - np.array(IMAGENET_MEAN, np.float32)[:, None, None]) \
                / np.array(IMAGENET_STD, np.float32)[:, None, None]
            np.save(out, a.astype(np.float32))
        else:
            raise ValueError(f"unknown format {fmt}")
        n += 1
    return n


# --------------------------------------------------------------------------------------------
# The loaders


def _torch_loop(m: Measure, dataset, workers: int, epochs: int, seed: int) -> RunResult:
    import torch
    from torch.utils.data import DataLoader

    torch.manual_seed(seed)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=workers)
    n = 0
    m.start()
    for _ in range(epochs):
        n += drain_epoch(loader)
    m.stop()
    return m.finish(n, batch_size=BATCH_SIZE, torch_threads=torch.get_num_threads())


def _subset(dataset, limit: Optional[int]):
    if limit is None or limit >= len(dataset):
        return dataset
    from torch.utils.data import Subset

    return Subset(dataset, pick(range(len(dataset)), limit))


def run_torchvision(data: str, workers: int = 2, limit: Optional[int] = None, epochs: int = 1,
                    seed: int = 0) -> RunResult:
    """(a) Unmodified torchvision: ImageFolder on JPEGs + DataLoader(batch 64, shuffle,
    `workers` workers) with RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize."""
    t0 = time.perf_counter()
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    with Measure("torchvision", data, workers, epochs, t0) as m:
        tf = T.Compose([
            T.RandomResizedCrop(CROP_SIZE),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ])
        ds = _subset(ImageFolder(data, transform=tf), limit)
        return _torch_loop(m, ds, workers, epochs, seed)


def run_torchvision_ppm(data: str, workers: int = 2, limit: Optional[int] = None, epochs: int = 1,
                        seed: int = 0) -> RunResult:
    """(c) The same DataLoader over already-augmented 224x224 PPMs (prepfs `augmented/`):
    ToTensor + Normalize only."""
    t0 = time.perf_counter()
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    with Measure("torchvision-ppm", data, workers, epochs, t0) as m:
        tf = T.Compose([T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        ds = _subset(ImageFolder(data, transform=tf), limit)
        return _torch_loop(m, ds, workers, epochs, seed)


def run_torch_npy(data: str, workers: int = 2, limit: Optional[int] = None, epochs: int = 1,
                  seed: int = 0) -> RunResult:
    """(c, npy) The DataLoader over already-augmented and normalized float32 CHW .npy files
    (prepfs `augmented/` with mount-configs/imagenet-npy.yaml): DatasetFolder with
    `torch.from_numpy(np.load(path))` as its loader and no transform at all."""
    t0 = time.perf_counter()
    from torchvision.datasets import DatasetFolder

    with Measure("torch-npy", data, workers, epochs, t0) as m:
        ds = _subset(DatasetFolder(data, loader=_load_npy, extensions=(".npy",)), limit)
        return _torch_loop(m, ds, workers, epochs, seed)


def _load_npy(path: str):
    import numpy as np
    import torch

    return torch.from_numpy(np.load(path))


def run_dali(data: str, workers: int = 2, limit: Optional[int] = None, epochs: int = 1,
             seed: int = 0) -> RunResult:
    """(b) DALI on the CPU (device_id=None): readers.file(random_shuffle) ->
    decoders.image_random_crop(RGB) -> resize(224, 224) -> crop_mirror_normalize(random
    mirror, ImageNet mean/std x 255, CHW float), batch 64, num_threads=`workers`.

    The reader gets the same file list ImageFolder would (so `limit` picks the same subset);
    an epoch is ceil(n / 64) batches, the last one counted only for its n % 64 real samples."""
    t0 = time.perf_counter()
    from nvidia.dali import fn, pipeline_def, types

    with Measure("dali", data, workers, epochs, t0) as m:
        _, samples = list_image_folder(data)
        samples = pick(samples, limit)
        files = [os.path.relpath(p, data) for p, _ in samples]
        labels = [c for _, c in samples]

        @pipeline_def(batch_size=BATCH_SIZE, num_threads=max(1, workers), device_id=None,
                      seed=seed + 1, prefetch_queue_depth=2)
        def pipe():
            jpegs, lab = fn.readers.file(file_root=data, files=files, labels=labels,
                                         random_shuffle=True, name="Reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=CROP_SIZE, resize_y=CROP_SIZE)
            images = fn.crop_mirror_normalize(
                images,
                dtype=types.FLOAT,
                output_layout="CHW",
                mean=[x * 255 for x in IMAGENET_MEAN],
                std=[x * 255 for x in IMAGENET_STD],
                mirror=fn.random.coin_flip(),
            )
            return images, lab

        p = pipe()
        p.build()
        per_epoch = len(files)
        n = 0
        m.start()
        for _ in range(epochs):
            left = per_epoch
            while left > 0:
                images, _labels = p.run()
                arr = images.as_array()  # the batch as one numpy array, as a consumer takes it
                take = min(left, arr.shape[0])
                n += take
                left -= take
        m.stop()
        res = m.finish(n, batch_size=BATCH_SIZE)
        del p
        return res


def _read_whole(path: str) -> int:
    with open(path, "rb", buffering=0) as f:
        return len(f.readall())


def _read_chunk(paths: List[str]) -> Tuple[int, int]:
    return len(paths), sum(_read_whole(p) for p in paths)


def run_raw(data: str, workers: int = 2, limit: Optional[int] = None, epochs: int = 1,
            seed: int = 0, mode: str = "thread", min_seconds: float = 0.0) -> RunResult:
    """(d) The filesystem's own rate: `workers` threads (mode="thread") or processes
    (mode="process") read whole files (every file below `data`, in a random order each epoch).
    One sample = one file. After `epochs` epochs, more follow until `min_seconds` have passed
    (a warm pass over a few hundred cached files takes milliseconds: too short to time)."""
    t0 = time.perf_counter()
    with Measure("raw" if mode == "thread" else "raw-proc", data, workers, epochs, t0) as m:
        files = pick(list_files(data), limit)
        if not files:
            raise FileNotFoundError(f"no files under {data}")
        rng = random.Random(seed)
        n = nbytes = 0
        if mode == "thread":
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(max_workers=workers)
            mapper = pool.map
        else:
            import multiprocessing as mp

            pool = mp.get_context("fork").Pool(workers)
            mapper = pool.imap_unordered
        try:
            m.start()
            done = 0
            while done < epochs or time.perf_counter() - m.t0 < min_seconds:
                order = files[:]
                rng.shuffle(order)
                chunks = [order[i:i + 16] for i in range(0, len(order), 16)]
                for k, b in mapper(_read_chunk, chunks):
                    n += k
                    nbytes += b
                done += 1
            m.stop()
        finally:
            if mode == "thread":
                pool.shutdown()
            else:
                pool.close()
                pool.join()
        return m.finish(n, nbytes, mode=mode, epochs_done=done)


def _pil_batch(args: Tuple[List[str], int]):
    import numpy as np

    paths, seed = args
    rng = random.Random(seed)
    return np.stack([np.asarray(pil_augment(p, rng)) for p in paths])


def run_pil(data: str, workers: int = 2, limit: Optional[int] = None, epochs: int = 1,
            seed: int = 0) -> RunResult:
    """(e) Plain PIL + numpy, no torch: `workers` forked processes each decode a shuffled batch
    of 64 JPEGs, RandomResizedCrop(224) + random flip, and send back a uint8 (64, 224, 224, 3)
    array."""
    t0 = time.perf_counter()
    import multiprocessing as mp

    with Measure("pil", data, workers, epochs, t0) as m:
        _, samples = list_image_folder(data)
        paths = [p for p, _ in pick(samples, limit)]
        rng = random.Random(seed)
        pool = mp.get_context("fork").Pool(workers)
        n = 0
        try:
            m.start()
            for e in range(epochs):
                order = paths[:]
                rng.shuffle(order)
                batches = [(order[i:i + BATCH_SIZE], seed * 1000003 + e * 10007 + i)
                           for i in range(0, len(order), BATCH_SIZE)]
                for arr in pool.imap(_pil_batch, batches):
                    n += arr.shape[0]
            m.stop()
        finally:
            pool.close()
            pool.join()
        return m.finish(n, batch_size=BATCH_SIZE)


# --------------------------------------------------------------------------------------------
# Scenario 4: one training job of several running at once


# How `read_uncached` keeps a file's pages out of the page cache: "fadvise" reads it, then
# posix_fadvise(POSIX_FADV_DONTNEED) over the whole file; "direct" opens it with O_DIRECT
# (FUSE serves such reads without the page cache); "none" reads it normally (cached).
UNCACHED_MODES = ("fadvise", "direct", "none")


def read_uncached(path: str, mode: str = "fadvise") -> bytes:
    """The whole file, read so that the kernel page cache does not keep it (see UNCACHED_MODES):
    the next read of it, by this job's next epoch or by another job, goes to the storage again,
    as it would with a data set larger than memory."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if mode == "direct" else 0)
    fd = os.open(path, flags)
    try:
        chunks = []
        if mode == "direct":
            import mmap

            buf = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT may require
            while True:
                k = os.readv(fd, [buf])
                if k <= 0:
                    break
                chunks.append(buf[:k])
            buf.close()
        else:
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
            if mode == "fadvise":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return b"".join(chunks)


class UncachedPilLoader:
    """ImageFolder's `loader=` for scenario 4's torchvision jobs: the file's bytes through
    read_uncached, decoded by PIL from memory, converted to RGB (as torchvision's
    default_loader does). A class, not a closure, so DataLoader workers can use it."""

    def __init__(self, mode: str = "fadvise"):
        self.mode = mode

    def __call__(self, path: str):
        import io

        from PIL import Image

        img = Image.open(io.BytesIO(read_uncached(path, self.mode)))
        return img.convert("RGB")


def run_train_job(data: str, workers: int = 2, limit: Optional[int] = None, epochs: int = 2,
                  seed: int = 0, transform: str = "full",
                  uncached: Optional[str] = None) -> RunResult:
    """One training job of scenario 4: ImageFolder (built inside the timed part: listing the
    tree is the job's work too) + DataLoader(batch 64, shuffle, `workers` workers), `epochs`
    epochs. transform "full": RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
    Normalize (the JPEGs), with `uncached` ("fadvise", "direct") as the way each file is read;
    "ppm": ToTensor + Normalize only (prepfs's augmented outputs). wall_s covers the whole job;
    extra has t_start / t_end (time.monotonic) and each epoch's wall time."""
    t0 = time.perf_counter()
    import torch
    import torchvision.transforms as T
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    name = "job-torchvision" if transform == "full" else "job-ppm"
    with Measure(name, data, workers, epochs, t0) as m:
        m.start()
        t_start = time.monotonic()
        if transform == "full":
            tf = T.Compose([T.RandomResizedCrop(CROP_SIZE), T.RandomHorizontalFlip(),
                            T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        else:
            tf = T.Compose([T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        kw = {"loader": UncachedPilLoader(uncached)} if uncached and transform == "full" else {}
        ds = _subset(ImageFolder(data, transform=tf, **kw), limit)
        torch.manual_seed(seed)
        loader = DataLoader(ds, batch_size=BATCH_SIZE, shuffle=True, num_workers=workers)
        n = 0
        walls = []
        for _ in range(epochs):
            te = time.monotonic()
            n += drain_epoch(loader)
            walls.append(time.monotonic() - te)
        m.stop()
        t_end = time.monotonic()
        return m.finish(n, batch_size=BATCH_SIZE, t_start=t_start, t_end=t_end,
                        epoch_walls=walls, transform=transform, uncached=uncached,
                        samples_per_epoch=len(ds))


LOADERS: dict = {
    "torchvision": run_torchvision,
    "dali": run_dali,
    "torchvision-ppm": run_torchvision_ppm,
    "torch-npy": run_torch_npy,
    "raw": run_raw,
    "raw-proc": lambda *a, **k: run_raw(*a, mode="process", **k),
    "pil": run_pil,
    "job-torchvision": lambda *a, uncached="fadvise", **k: run_train_job(
        *a, transform="full", uncached=uncached, **k),
    "job-ppm": lambda *a, uncached=None, **k: run_train_job(*a, transform="ppm", **k),
}


# --------------------------------------------------------------------------------------------
# Command line: runs of one loader in this process, each RunResult as a JSON line.


def drop_page_cache() -> bool:
    """sync, then drop the kernel's page cache, dentries and inodes (needs root). False if the
    kernel refused (not root, or a read-only /proc/sys in a container)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def preimport(loader: str) -> None:
    """Import the loader's framework now, so that no run pays for it and a dropped page cache
    does not turn the import into disk reads."""
    if loader.startswith(("torch", "job-")):
        import torch  # noqa: F401
        import torchvision.datasets  # noqa: F401
        import torchvision.transforms  # noqa: F401
        from torch.utils.data import DataLoader  # noqa: F401
    elif loader == "dali":
        import nvidia.dali.fn  # noqa: F401
    elif loader == "pil":
        import numpy  # noqa: F401
        from PIL import Image  # noqa: F401


def _parse_cpus(s: Optional[str]) -> Optional[set]:
    if not s:
        return None
    cpus = set()
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


RESULT_TAG = "@@result "  # a line "@@result {json}": one run's RunResult (plus "rep", "warmup")
READY_TAG = "@@ready "  # with --sync: "@@ready {json}" before each run; answer with a line


def run_reps(loader: str, data: str, workers: int = 2, limit: Optional[int] = None,
             epochs: int = 1, seed: int = 0, reps: int = 1, warmup: int = 0, cold: bool = False,
             sync: bool = False, min_seconds: float = 0.0, out=sys.stdout,
             inp=sys.stdin, uncached: Optional[str] = None) -> List[RunResult]:
    """`warmup` unmeasured runs, then `reps` measured ones, each printed as a RESULT_TAG line.
    min_seconds: for the raw reader, repeat epochs until the run has lasted this long.

    cold: drop the page cache before each measured run. sync: before each run print a READY_TAG
    line and wait for a line on `inp`, so a driver can prepare it (drop caches, remount)."""
    preimport(loader)
    fn = LOADERS[loader]
    kw = {"min_seconds": min_seconds} if loader.startswith("raw") and min_seconds else {}
    if loader.startswith("job-") and uncached:
        kw["uncached"] = uncached
    results = []
    for i in range(warmup + reps):
        is_warmup = i < warmup
        info = {"run": i, "warmup": is_warmup}
        if sync:
            print(READY_TAG + json.dumps(info), file=out, flush=True)
            if not inp.readline():
                raise SystemExit("driver went away")
        elif cold and not is_warmup:
            info["page_cache_dropped"] = drop_page_cache()
        res = fn(data, workers=workers, limit=limit, epochs=epochs, seed=seed + i, **kw)
        res.extra.update(info)
        print(RESULT_TAG + json.dumps(res.to_json()), file=out, flush=True)
        if not is_warmup:
            results.append(res)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measured runs of one loader; prints JSON RunResult lines")
    r.add_argument("--loader", choices=sorted(LOADERS), required=True)
    r.add_argument("--data", required=True, help="ImageFolder tree (or any tree, for raw)")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--limit", type=int, default=None, help="samples per epoch (default: all)")
    r.add_argument("--epochs", type=int, default=1)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--reps", type=int, default=1, help="measured runs")
    r.add_argument("--warmup", type=int, default=0, help="unmeasured runs first")
    r.add_argument("--cold", action="store_true", help="drop the page cache before each run")
    r.add_argument("--sync", action="store_true",
                   help="print a ready line before each run and wait for a line on stdin")
    r.add_argument("--min-seconds", type=float, default=0.0,
                   help="raw reader: repeat epochs until a run has lasted this long")
    r.add_argument("--cpus", default=None, help="pin to these CPUs first, e.g. 0,1 or 0-1")
    r.add_argument("--uncached", choices=UNCACHED_MODES, default=None,
                   help="job-torchvision: how each file is kept out of the page cache "
                        "(default fadvise)")
    f = sub.add_parser("fake-augmented",
                       help="write augmented files of a JPEG tree (a stand-in for prepfs "
                            "augmented/)")
    f.add_argument("--data", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--limit", type=int, default=None)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--format", choices=("ppm", "npy"), default="ppm")
    a = ap.parse_args(argv)
    if a.cmd == "fake-augmented":
        n = write_augmented_tree(a.data, a.out, a.limit, a.seed, a.format)
        print(f"wrote {n} {a.format} files under {a.out}")
        return 0
    cpus = _parse_cpus(a.cpus)
    if cpus:
        os.sched_setaffinity(0, cpus)
    run_reps(a.loader, a.data, a.workers, a.limit, a.epochs, a.seed, a.reps, a.warmup, a.cold,
             a.sync, a.min_seconds, uncached=a.uncached)
    return 0


if __name__ == "__main__":
    sys.exit(main())
