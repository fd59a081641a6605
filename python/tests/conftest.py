"""Shared set-up of python/'s tests: prepfs.recipe loaded from the source tree, the prepfs binary
(PREPFS_BIN), an id-coded ImageFolder dataset, and a mount guard that runs the real binary, waits
until it serves, and unmounts on every way out (a fixture's teardown, the end of the session, or
a watchdog when a test overruns its time limit), as crates/prepfs/tests/mounted/common/mod.rs
does for the Rust tests.

Environment:
    PREPFS_BIN              the prepfs binary (default: <repo>/target/debug/prepfs); a path that
                            is set and missing fails the tests that need it, the default missing
                            skips them
    PREPFS_REQUIRE_LOADER   set (make test sets it): the Loader's tests fail, not skip, when the
                            prepfs module is not installed
"""

import atexit
import gc
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PYTHON_DIR = TESTS.parent
REPO = PYTHON_DIR.parent

# `import prepfs` must find the installed module (with its compiled extension), never the source
# tree's python/prepfs/ (no extension), which is on sys.path when pytest runs from python/.
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != PYTHON_DIR]


def load_recipe_module():
    """python/prepfs/_recipe.py of this tree (not the installed copy), on its own: it is pure
    Python and needs neither torch nor the compiled extension."""
    spec = importlib.util.spec_from_file_location("prepfs_recipe_under_test", PYTHON_DIR / "prepfs" / "_recipe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepfs_bin():
    """The binary under test, or a skip (a fail where PREPFS_BIN names a missing file)."""
    named = os.environ.get("PREPFS_BIN")
    path = Path(named) if named else REPO / "target" / "debug" / "prepfs"
    if not path.is_file():
        if named:
            pytest.fail(f"PREPFS_BIN={named} does not exist (make test builds it)")
        pytest.skip(f"{path} is not built (cargo build -p prepfs, or set PREPFS_BIN)")
    return path


def loader_module():
    """The installed prepfs module, or a skip (a fail under PREPFS_REQUIRE_LOADER)."""
    try:
        import prepfs
    except ImportError as e:
        if os.environ.get("PREPFS_REQUIRE_LOADER"):
            pytest.fail(f"the prepfs Python module does not import ({e}); make python installs it")
        pytest.skip(f"the prepfs Python module is not installed ({e}); make python builds and installs it")
    if not hasattr(prepfs, "Loader"):
        pytest.fail(f"{prepfs.__file__}: a prepfs package without the compiled Loader (the source tree's?)")
    return prepfs


def need_fuse():
    """Skips where a mount cannot be made here: no /dev/fuse, not root, or no fusermount3."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this machine")
    if os.geteuid() != 0:
        pytest.skip("the mounted tests run as root (as make test does)")
    if shutil.which("fusermount3") is None:
        pytest.skip("fusermount3 is not installed (make deps installs fuse3)")


# ---------------------------------------------------------------------------------------------
# The id-coded dataset (crates/prepfs/tests/mounted/common/mod.rs: make_id_dataset, id_levels)


def id_levels(sample_id):
    """Red and green levels that code sample `sample_id` (7 x 7 = 49 ids), kept by any crop,
    resize or flip."""
    return 20 + 36 * (sample_id % 7), 20 + 36 * ((sample_id // 7) % 7)


def id_of_pixels(rgb):
    """The id whose levels are nearest the mean red and green of an HWC array, and that distance."""
    r, g = float(rgb[..., 0].mean()), float(rgb[..., 1].mean())
    return min(((i, max(abs(id_levels(i)[0] - r), abs(id_levels(i)[1] - g))) for i in range(49)), key=lambda t: t[1])


def make_id_dataset(root, classes, per_class):
    """An ImageFolder of id-coded JPEGs: class directories c0, c1, ... of `per_class` samples
    s<id>.jpg, each of its own size, sample `id` coded by id_levels with a blue pattern that makes
    every crop differ. Returns the source root."""
    import numpy as np
    from PIL import Image

    assert classes * per_class <= 49, "49 ids at most"
    root = Path(root)
    for c in range(classes):
        (root / f"c{c}").mkdir(parents=True)
        for k in range(per_class):
            sample_id = c * per_class + k
            width, height = 176 + 16 * (sample_id % 5), 144 + 8 * (sample_id % 3)
            x, y = np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64)
            blue = 128.0 + 90.0 * (np.sin(x / 9.0 + sample_id)[None, :] * np.cos(y / 11.0)[:, None])
            pixels = np.empty((height, width, 3), dtype=np.uint8)
            pixels[..., 0], pixels[..., 1] = id_levels(sample_id)
            pixels[..., 2] = blue.astype(np.uint8)
            Image.fromarray(pixels, "RGB").save(root / f"c{c}" / f"s{sample_id:02}.jpg", quality=95, subsampling=0)
    return root


def parse_ppm(data):
    """A binary PPM's (width, height, HWC uint8 pixels), its length checked against its header."""
    import numpy as np

    magic, size, maxval, pixels = data.split(b"\n", 3)
    assert magic == b"P6" and maxval == b"255", data[:20]
    width, height = (int(v) for v in size.split())
    assert len(pixels) == width * height * 3, "PPM length does not match its header"
    return width, height, np.frombuffer(pixels, dtype=np.uint8).reshape(height, width, 3)


# ---------------------------------------------------------------------------------------------
# Mounts


def is_mounted(path):
    """Whether `path` (absolute, no symlinks) is a mountpoint now, by /proc/self/mountinfo."""
    target = str(path).replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def detach(path):
    """Unmounts whatever is mounted at `path`: fusermount3 -u, then -u -z, then umount -l, each
    under a time limit."""
    for cmd in (["fusermount3", "-u"], ["fusermount3", "-u", "-z"], ["umount", "-l"]):
        if not is_mounted(path):
            return
        try:
            subprocess.run(cmd + [str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        except subprocess.TimeoutExpired:
            pass


_LIVE = set()  # mounts not yet stopped, stopped at exit whatever happened


@atexit.register
def _stop_live_mounts():
    for mount in list(_LIVE):
        mount.stop()


class Mount:
    """A running `prepfs mount` of `source` at `dir/mnt` with the config `yaml` (written to
    `dir/mount.yaml`). Waits (at most `start_limit` s) until it serves; a watchdog kills it and
    detaches the mountpoint once `limit` s have passed, so that a test stuck on the mount ends
    with an error instead of hanging. `stop()` ends it (SIGTERM, then SIGKILL) and unmounts."""

    def __init__(self, binary, dir, yaml, source, limit=120.0, start_limit=60.0):
        dir = Path(dir).resolve()
        self.mountpoint = dir / "mnt"
        self.mountpoint.mkdir()
        self.config = dir / "mount.yaml"
        self.config.write_text(yaml)
        self.log_path = dir / "prepfs.log"
        env = dict(os.environ, PREPFS_RUN_DIR=str(dir / "prepfs-run"))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(binary), "mount", str(self.config), "--source", str(source), "--mountpoint", str(self.mountpoint), "--drain", "0.2"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env)
        _LIVE.add(self)
        self._done = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._watchdog, args=(limit,), daemon=True, name="prepfs-mount-watchdog").start()
        try:
            self._wait_serving(start_limit)
        except BaseException:
            self.stop()
            raise

    def _wait_serving(self, limit):
        deadline = time.monotonic() + limit
        stats = self.mountpoint / ".prepfs" / "stats.json"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prepfs exited before serving ({self.proc.returncode}): {self.log()}")
            if "prepfs: serving" in self.log() and stats.is_file():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"prepfs did not serve within {limit} s: {self.log()}")
            time.sleep(0.02)

    def _watchdog(self, limit):
        if not self._done.wait(limit):
            sys.stderr.write(f"watchdog: the test overran {limit} s; killing prepfs and detaching {self.mountpoint}\n")
            self.stop(grace=0)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def path(self, rel):
        return self.mountpoint / rel

    def stats(self):
        return json.loads((self.mountpoint / ".prepfs" / "stats.json").read_text())

    def stop(self, grace=10.0):
        """SIGTERM (as a user's Ctrl-C), SIGKILL after `grace` s, then whatever is still mounted
        detached. Its exit status (None if it had to be killed). Stopping twice does nothing."""
        with self._lock:
            self._done.set()
            status = self.proc.poll()
            if status is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    status = self.proc.wait(timeout=grace) if grace > 0 else None
                except subprocess.TimeoutExpired:
                    status = None
                if status is None:
                    self.proc.kill()
            detach(self.mountpoint)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sys.stderr.write(f"prepfs (pid {self.proc.pid}) did not exit 30 s after SIGKILL\n")
            _LIVE.discard(self)
            return status


@pytest.fixture(scope="session")
def fuse():
    need_fuse()


def module_mount(dir, config, classes, per_class, limit):
    """A test module's mount (a generator for its fixture: `yield from`): an id dataset of
    `classes` x `per_class` made in `dir`, mounted with `config`; its daemon must exit cleanly
    (status 0) when stopped at the end."""
    source = make_id_dataset(dir / "idset", classes, per_class)
    mount = Mount(prepfs_bin(), dir, config, source, limit=limit)
    try:
        yield mount
    finally:
        gc.collect()  # loaders a failed test's traceback kept
        status = mount.stop()
    assert status == 0, f"prepfs exited with {status}: {mount.log()}"
