"""python3 -m prepfs_bench: the driver of `make bench` (issue 3), an entry point.

    PYTHONPATH=bench python3 -m prepfs_bench --data DIR [--quick] [--prepfs-bin target/release/prepfs
        --prepfs-config mount-configs/imagenet.yaml
        [--prepfs-npy-config mount-configs/imagenet-npy.yaml]
        | --prepfs-mount MNT | --augmented-dir DIR [--augmented-npy-dir DIR]]

Scenarios (ids as in the table; see issue 3):

- 1 cold (page cache dropped before each measured run; prepfs remounted with an empty cache when
  the driver mounts it): 1a torchvision on the JPEGs, 1b DALI CPU, 1e plain PIL (an extra peer),
  1c torchvision over prepfs ``augmented/`` with only ToTensor + Normalize, 1d the raw reader of
  ``augmented/``.
  With a second, npy float32 mount: 1n, torch over ``np.load`` with no transform at all.
- 2 warm (one unmeasured warm-up run first, so the page cache, or prepfs's cache, holds the set):
  2a, 2b, 2e, 2c, 2d (2n), the same loaders; 2p: 2c and 2d on a mount whose cache is 25% of the
  set.
- 3 floor: the raw reader over prepfs's cached outputs (3d) against the same number of augmented
  files copied to tmpfs (/dev/shm) and read by the same reader (3f); 3g is the torchvision loop of
  1c over the tmpfs copy (what that loop costs by itself).
- 4 concurrent jobs: training jobs started together over read-limited storage, 4a torchvision,
  4b prepfs without jobs, 4c prepfs with ODS, 4d ODS with the cache set for concurrent jobs.

Every measured run is a fresh run of a loader (prepfs_bench.loaders) in a child process that has
already imported its framework; the children of one case run its repetitions one after another
and wait for the driver before each (see loaders.run_reps), which drops caches or remounts.
The loader process and its workers, and the prepfs daemon, are pinned to the same cores; when
the driver mounts prepfs, only the daemon a case reads runs during that case.

Without any prepfs option only the peers run (1a 1b 1e 2a 2b 2e). ``--augmented-dir`` points
1c/1d/2c/2d/3 at a plain directory of augmented PPMs instead (e.g. one written by
``python3 -m prepfs_bench.loaders fake-augmented``), to exercise the harness without a mount.

The driver itself is this package (its __init__ lists the modules and what each owns); this
file only runs prepfs_bench.cli.main.
"""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
