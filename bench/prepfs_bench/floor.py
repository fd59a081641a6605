"""prepfs_bench.floor: the FUSE ceiling of issue 12, rows 3h and 3i.

Owns the trivial fuser filesystem's side of a run: what it must serve to stand beside prepfs's
cached outputs (`floor_spec`: as many files as row 3d reads, each as long as prepfs serves an
augmented output, found by `stat` on the mount), mounting `examples/floorfs` plain or with
`--passthrough` (`mount_floorfs`, `FloorMount`: pinned to the cases' cores, started with a
deadline, probed by a child process under a timeout, ended by SIGTERM, then SIGKILL, the mount
point released lazily if it is still there), and reading what it said: whether the kernel
refused passthrough (`passthrough_refusal`) and the request counts it prints at exit
(`floorfs_counters`). The rows themselves are read by the raw reader of row 3d (`run_case`).
Standard library only.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from . import loaders
from .mount import is_mounted, lazy_unmount, proc_cpu_seconds, reap
from .plan import FLOOR_ROWS, floor_flags

# prepfs's FUSE threads when its config does not set `fuse_threads` (crates/prepfs-core/src/config/mod.rs: 0 -> one
# per core it may run on, at least 2 and at most 16)
PREPFS_FUSE_THREADS_RULE = "cores.clamp(2, 16)"


def default_fuse_threads(cores: Optional[int] = None) -> int:
    """prepfs's default `fuse_threads` on `cores` cores (default: the CPUs this process may run
    on, as prepfs counts them, since the harness pins prepfs where it runs itself)."""
    n = cores if cores is not None else len(os.sched_getaffinity(0))
    return min(max(n, 2), 16)
# What floorfs prints (stderr) when it serves plainly although --passthrough was asked
REFUSAL_MARK = "serving plainly"


class FloorError(RuntimeError):
    pass


def floor_spec(augmented: str, limit: Optional[int]) -> dict:
    """What the floor serves: as many files as the raw reader reads from prepfs's `augmented/`
    (the same `pick` of the same listing), each of the size prepfs serves them at (`stat` on
    the mount; the most common size if they differ, all sizes seen are kept). Stats no file
    content: nothing of prepfs's cache is used."""
    files = loaders.pick(loaders.list_files(augmented), limit)
    if not files:
        raise FloorError(f"no files under {augmented}")
    sizes = collections.Counter(os.stat(p).st_size for p in files)
    size, _ = sizes.most_common(1)[0]
    return {"files": len(files), "size": size,
            "sizes_seen": {str(k): v for k, v in sorted(sizes.items())},
            "size_from": f"stat of the {len(files)} files of {augmented} that row 3d reads"}


def prepfs_fuse_threads(config_text: Optional[str]) -> int:
    """`fuse_threads` of a prepfs mount config (a top-level `fuse_threads: N`), else prepfs's
    default; 0 means the default there too."""
    for line in (config_text or "").splitlines():
        if line.startswith("fuse_threads:"):
            val = line.split(":", 1)[1].split("#", 1)[0].strip()
            if val.isdigit() and int(val) > 0:
                return int(val)
    return default_fuse_threads()


def passthrough_refusal(log_text: str) -> Optional[str]:
    """floorfs's line saying it serves plainly although passthrough was asked (the kernel does
    not offer it, refused the backing file, or there is no memfd), or None."""
    for line in log_text.splitlines():
        if REFUSAL_MARK in line:
            return line.strip()
    return None


def floorfs_counters(log_text: str) -> Optional[Dict[str, int]]:
    """The request counts floorfs prints as one JSON line at exit (the last such line)."""
    found = None
    for line in log_text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"open"' in line:
            try:
                found = json.loads(line)
            except ValueError:
                pass
    return found


def requests_per_open(counters: Optional[Dict[str, int]]) -> Optional[float]:
    """FUSE requests floorfs answered per file opened (lookups, opens, reads, releases, ioctls,
    ...; not its own backing ioctls, which are not requests)."""
    if not counters or not counters.get("open"):
        return None
    kinds = ("lookup", "getattr", "open", "read", "flush", "release", "ioctl", "opendir",
             "readdir", "forget")
    return sum(int(counters.get(k) or 0) for k in kinds) / counters["open"]


# A child that lists the mount, opens and reads one file whole, and says what it saw: the
# driver never touches the FUSE mount itself (a hung request would hang the driver).
PROBE = """\
import json, os, sys
d = sys.argv[1]
names = sorted(os.listdir(d))
n = 0
if names:
    with open(os.path.join(d, names[0]), "rb") as f:
        n = len(f.read())
print(json.dumps({"files": len(names), "first_read": n}))
"""


class FloorMount:
    """A running floorfs. close() ends it (SIGTERM, then SIGKILL) and makes sure the mount point
    is released (lazy unmount as a fallback), then collects what it printed. It stands in for a
    PrepfsSource in run_case: `pid` (its CPU and memory are the row's daemon's), no stats."""

    kind = "floorfs"
    can_empty_cache = False

    def __init__(self, proc: subprocess.Popen, mountpoint: str, mode: str, log_path: str,
                 own_log: bool):
        self.proc, self.mountpoint, self.mode = proc, mountpoint, mode
        self.log_path, self.own_log = log_path, own_log
        self.probe: Optional[dict] = None
        self.log_text = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stats(self) -> Optional[dict]:
        return None

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.proc.pid)

    def read_log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return self.log_text

    def refusal(self) -> Optional[str]:
        return passthrough_refusal(self.read_log()) if self.mode.startswith("passthrough") else None

    def close(self, timeout: float = 10.0) -> None:
        reap(self.proc, self.mountpoint, timeout, signal.SIGTERM)  # floorfs unmounts, prints its counts
        self.log_text = self.read_log()
        if self.own_log:
            try:
                os.remove(self.log_path)
            except OSError:
                pass
        try:
            os.rmdir(self.mountpoint)
        except OSError:
            pass

    def __enter__(self) -> "FloorMount":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def mount_floorfs(binary: str, mountpoint: str, files: int, size: int, mode: str = "plain",
                  threads: Optional[int] = None, cpus: Optional[Sequence[int]] = None,
                  timeout: float = 30.0, log_path: Optional[str] = None,
                  python: str = sys.executable) -> FloorMount:
    """Start `BINARY MNT --files N --size B --threads T [--passthrough]` (pinned to `cpus`),
    wait until it says it is mounted, and probe it from a child process (list, read one file
    whole) under `timeout`: it must list `files` files and the first must read `size` bytes.
    Raises FloorError (with the end of its output) otherwise; nothing is left mounted or
    running then. Its stderr goes to `log_path` (appended) or to a temporary file."""
    if not os.path.isfile(binary):
        raise FloorError(f"{binary} not found: build it (cargo build --release --examples)")
    if is_mounted(mountpoint):
        lazy_unmount(mountpoint)
    os.makedirs(mountpoint, exist_ok=True)
    own_log = log_path is None
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="prepfs-bench-floorfs-", suffix=".log")
        os.close(fd)
    cmd = [binary, mountpoint, "--files", str(files), "--size", str(size),
           "--threads", str(threads or default_fuse_threads(len(cpus) if cpus else None))] + floor_flags(mode)
    pin = (lambda: os.sched_setaffinity(0, set(cpus))) if cpus else None
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                preexec_fn=pin, start_new_session=True)
    fm = FloorMount(proc, mountpoint, mode, log_path, own_log)
    deadline = time.monotonic() + timeout
    try:
        while "files of" not in fm.read_log():
            if proc.poll() is not None:
                raise FloorError(f"{' '.join(cmd)} exited with status {proc.returncode}:\n"
                                 + fm.read_log()[-2000:])
            if time.monotonic() > deadline:
                raise FloorError(f"floorfs did not mount within {timeout:.0f} s:\n"
                                 + fm.read_log()[-2000:])
            time.sleep(0.05)
        try:
            out = subprocess.run([python, "-c", PROBE, mountpoint], capture_output=True,
                                 text=True, timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise FloorError(f"floorfs at {mountpoint} did not answer a listing and one read "
                             f"within {timeout:.0f} s") from None
        if out.returncode != 0:
            raise FloorError(f"probing floorfs at {mountpoint}: {out.stderr.strip()[-500:]}")
        fm.probe = json.loads(out.stdout)
        if fm.probe["files"] != files or fm.probe["first_read"] != size:
            raise FloorError(f"floorfs at {mountpoint} lists {fm.probe['files']} files (want "
                             f"{files}) and reads {fm.probe['first_read']} bytes (want {size})")
        return fm
    except BaseException:
        fm.close()
        raise


def floor_record(fm: FloorMount, spec: dict, threads: int) -> dict:
    """What a floor row's record keeps of its mount (after close()): the mode, what it served,
    the probe, the request counts, and passthrough's refusal if there was one."""
    counters = floorfs_counters(fm.log_text)
    return {"mode": fm.mode, "files": spec["files"], "size": spec["size"], "threads": threads,
            "probe": fm.probe, "counters": counters,
            "requests_per_open": requests_per_open(counters),
            "refused": (passthrough_refusal(fm.log_text) if fm.mode.startswith("passthrough")
                        else None)}


def floor_modes(results: Sequence[dict]) -> List[dict]:
    """The floor rows of a report's cases, in FLOOR_ROWS order."""
    by_id = {c["id"]: c for c in results}
    return [by_id[cid] for cid, _, _ in FLOOR_ROWS if cid in by_id]
