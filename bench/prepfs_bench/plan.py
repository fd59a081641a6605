"""prepfs_bench.plan: what runs.

Owns the cases of scenarios 1 (cold), 2 (warm), 2p (warm, 25% cache) and 3 (floor, with issue
12's trivial fuser filesystem, `FLOOR_ROWS`): `Case` and
`plan()`, which loader reads which directory in which cache state, in which order; the names
the report gives scenarios and loaders; and scenario 4's variants (`JOB_VARIANTS`). Standard
library only.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

# (case id, floorfs mode, the row's name): issue 12's FUSE ceiling. 3h/3i serve every file
# from one buffer (it stays in the CPU's caches); 3j/3k give each file its own content, as
# prepfs's outputs are (`floorfs --distinct`).
FLOOR_ROWS = [("3h", "plain", "floor (trivial fuser, plain)"),
              ("3i", "passthrough", "floor (passthrough)"),
              ("3j", "plain-distinct", "floor (plain, distinct files)"),
              ("3k", "passthrough-distinct", "floor (passthrough, distinct files)")]


def floor_flags(mode: str) -> list:
    """floorfs's options for a FLOOR_ROWS mode."""
    return ((["--passthrough"] if mode.startswith("passthrough") else [])
            + (["--distinct"] if mode.endswith("-distinct") else []))


@dataclasses.dataclass
class Case:
    id: str  # "1a": scenario number + loader letter, as in issue 3
    scenario: str  # "cold", "warm", "warm25" (2p), "floor"
    loader: str  # a key of loaders.LOADERS
    label: str  # the loader, for people
    reads: str  # what it reads, for people
    data: str  # the directory it reads
    cold: bool = False  # drop the page cache (and empty prepfs's cache) before each run
    warmup: int = 0  # unmeasured runs first
    prepfs: bool = False  # reads through prepfs: account the daemon's CPU and memory
    source: str = "ppm"  # which prepfs mount it reads: "ppm", "npy" (the output format) or
    # "ppm25" (the PPM config with a cache of 25% of the data set, scenario 2p)
    chart_reads: str = ""  # a shorter `reads` for chart labels ("": the same)
    floorfs: str = ""  # rows 3h-3k: the trivial fuser filesystem it reads, a FLOOR_ROWS mode
    # (mounted by the driver for the row, at `data`)


SCENARIO_TITLES = {
    "cold": "1 cold",
    "warm": "2 warm",
    "warm25": "2p warm, 25% cache",
    "floor": "3 floor",
    "jobs": "4 concurrent jobs",
}
LABELS = {
    "torchvision": "torchvision ImageFolder + DataLoader, full transform",
    "dali": "DALI CPU pipeline",
    "pil": "PIL + numpy, no torch",
    "torchvision-ppm": "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
    "torch-npy": "torch DatasetFolder(np.load) + DataLoader, no transform",
    "raw": "raw reader (whole files)",
}
SHORT = {
    "torchvision": "torchvision",
    "dali": "DALI CPU",
    "pil": "PIL",
    "torchvision-ppm": "torchvision, ToTensor+Normalize",
    "torch-npy": "torch, np.load",
    "raw": "raw reader",
}


# What "warm" and "cached outputs" mean for rows that read prepfs, by whether the mount has a
# cache: (warm rows' suffix, the floor row's suffix, the same for chart labels).
NO_CACHE_WARM = ", source page-cache warm (prepfs has no cache)"
NO_CACHE_FLOOR = ", no cache: computed at open, source warm"


def plan(data: str, augmented: Optional[str], aug_reads: str, floor_dir: Optional[str],
         prepfs: bool, quick: bool = False, npy_augmented: Optional[str] = None,
         npy_reads: str = "", cache_on: Optional[bool] = None,
         augmented25: Optional[str] = None, reads25: str = "",
         fuse_floor: Optional[str] = None) -> List[Case]:
    """The cases to run, in order: cold ones first, then warm, then the floor. Quick runs
    leave out the PIL peer, the warm peers (their warm rate is their cold rate: they are
    CPU-bound; ratios fall back to the cold rows) and 3g. With `npy_augmented` (prepfs with
    npy float32 output), 1n and 2n: torch over np.load with no transform at all.

    cache_on: whether the prepfs mount has a sample cache (None: unknown, or not prepfs).
    Without one (False), "warm" for prepfs rows only means the source JPEGs are in the page
    cache, and 3d reads outputs computed at open, not cached ones: their `reads` say so.

    augmented25: `augmented/` of a second PPM mount whose cache is 25% of the data set
    (scenario 2p): rows 2pc and 2pd, the loaders of 2c and 2d after a warm-up pass, right after
    the warm rows (quick runs too).

    fuse_floor: where the driver mounts examples/floorfs (issue 12's FUSE ceiling; the mode
    appended): rows 3h-3k, the raw reader of 3d over the trivial fuser filesystem serving as
    many files as 3d reads, of the size prepfs serves, from memory, plain and with kernel
    passthrough, from one buffer (3h, 3i) and each file its own (3j, 3k) (quick runs too)."""
    warm_sfx = floor_sfx = ""
    warm_chart = floor_chart = ""
    if cache_on is False:
        warm_sfx, floor_sfx = NO_CACHE_WARM, NO_CACHE_FLOOR
        warm_chart, floor_chart = ", source warm, no cache", ", no cache, source warm"
    elif cache_on:
        warm_sfx = warm_chart = ", cache on, after a warm-up pass"
        floor_sfx = floor_chart = ", cache on, after a warm-up pass"
    cases = []
    peers = [("a", "torchvision"), ("b", "dali"), ("e", "pil")]
    ours = [("c", "torchvision-ppm"), ("d", "raw")]
    for num, scen in (("1", "cold"), ("2", "warm")):
        for letter, loader in peers:
            if quick and (loader == "pil" or scen == "warm"):
                continue
            cases.append(Case(num + letter, scen, loader, LABELS[loader], "JPEG files", data,
                              cold=scen == "cold", warmup=int(scen == "warm")))
        sfx, csfx = (warm_sfx, warm_chart) if scen == "warm" else ("", "")
        if augmented:
            for letter, loader in ours:
                cases.append(Case(num + letter, scen, loader, LABELS[loader], aug_reads + sfx,
                                  augmented, cold=scen == "cold", warmup=int(scen == "warm"),
                                  prepfs=prepfs, chart_reads=aug_reads + csfx))
        if npy_augmented:
            cases.append(Case(num + "n", scen, "torch-npy", LABELS["torch-npy"],
                              npy_reads + sfx, npy_augmented, cold=scen == "cold",
                              warmup=int(scen == "warm"), prepfs=prepfs, source="npy",
                              chart_reads=npy_reads + csfx))
    if augmented25:
        for letter, loader in ours:
            cases.append(Case("2p" + letter, "warm25", loader, LABELS[loader],
                              reads25 + ", after a warm-up pass", augmented25, warmup=1,
                              prepfs=prepfs, source="ppm25", chart_reads=reads25))
    if augmented and floor_dir:
        cases.append(Case("3d", "floor", "raw", LABELS["raw"],
                          aug_reads + (floor_sfx or ", after a warm-up"), augmented, warmup=1,
                          prepfs=prepfs, chart_reads=aug_reads + floor_chart))
        cases.append(Case("3f", "floor", "raw", LABELS["raw"], "tmpfs copy of the same outputs",
                          floor_dir, warmup=1))
        if not quick:
            cases.append(Case("3g", "floor", "torchvision-ppm", LABELS["torchvision-ppm"],
                              "tmpfs copy of the same outputs", floor_dir, warmup=1))
    if augmented and fuse_floor:
        for cid, mode, name in FLOOR_ROWS:
            cases.append(Case(cid, "floor", "raw", LABELS["raw"],
                              f"{name}: examples/floorfs, as many files as 3d reads, of the "
                              f"size prepfs serves, from memory", f"{fuse_floor}-{mode}",
                              warmup=1, floorfs=mode, chart_reads=name))
    return cases


# The variants, in order: (id, key, loader of each job, label, what the jobs read)
JOB_VARIANTS = [
    ("4a", "torchvision", "job-torchvision",
     "torchvision ImageFolder + DataLoader, full transform",
     "prepfs encoded/ as storage limited to {R} (no cache), page cache dropped per file"),
    ("4b", "prepfs", "job-ppm", "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
     "prepfs augmented/ (no jobs), {C} cache, source limited to {R}"),
    ("4c", "prepfs-ods", "job-ppm", "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
     "prepfs jobs/job<i>/augmented/ (ODS), {C} cache, source limited to {R}"),
    ("4d", "prepfs-ods-tuned", "job-ppm",
     "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
     "prepfs jobs/job<i>/augmented/ (ODS), {C} cache as README advises for concurrent jobs "
     "(policy: lru, consumer_samples_per_s: {T}), source limited to {R}"),
]
