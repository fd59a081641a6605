"""crates/prepfs/examples/dali_external_source.py, the DALI example docs/loader.md ships, run as
a user runs it against a real mount: three epochs, each of every sample of the job (DALI's
`external_source` with `cycle="raise"`: without it the source was spent after epoch 1 and
epoch 2 returned nothing). `--cpu` keeps DALI's operators on the CPU, so no GPU is needed.

Needs DALI (`pip install nvidia-dali-cuda120`) and the prepfs module; skipped without DALI.
"""

import re
import subprocess
import sys

import pytest

from conftest import REPO, Mount, load_recipe_module, loader_module, make_id_dataset, prepfs_bin
from standins import v2

pytest.importorskip("nvidia.dali", reason="DALI is not installed (pip install nvidia-dali-cuda120)")

CLASSES, PER_CLASS, EPOCHS, BATCH = 3, 5, 3, 4
CONFIG = "seed: 9\n" + load_recipe_module().recipe(v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip()]))


def test_the_dali_example_reads_three_whole_epochs_of_the_job_from_the_mount(tmp_path, fuse):
    loader_module()
    source = make_id_dataset(tmp_path / "idset", CLASSES, PER_CLASS)
    mount = Mount(prepfs_bin(), tmp_path, CONFIG, source, limit=300.0)
    try:
        run = subprocess.run(
            [sys.executable, str(REPO / "crates" / "prepfs" / "examples" / "dali_external_source.py"), str(mount.mountpoint),
             "--job", "dali", "--batch-size", str(BATCH), "--epochs", str(EPOCHS), "--cpu"],
            capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-3000:]
        epochs = re.findall(r"^epoch (\d+): (\d+) samples \((\d+) classes\)$", run.stdout, re.M)
        assert epochs == [(str(e), str(CLASSES * PER_CLASS), str(CLASSES)) for e in range(1, EPOCHS + 1)], run.stdout
        job = next(j for j in mount.stats()["jobs"]["active"] if j["name"] == "dali")
        # DALI runs ahead of the loop (prefetch_queue_depth, 2 batches by default): after the last
        # epoch it has already asked for the next one's first batches.
        whole = EPOCHS * CLASSES * PER_CLASS
        assert whole <= job["samples_served"] <= whole + 2 * BATCH and job["epoch"] >= EPOCHS, job
    finally:
        assert mount.stop() == 0, mount.log()
