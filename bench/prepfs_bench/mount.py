"""prepfs_bench.mount: mounting prepfs for the runs that read it.

Owns the `prepfs mount` daemon's lifetime (`mount_prepfs`, `PrepfsMount`: started pinned to the
cases' cores, waited for until `.prepfs/stats.json` exists, ended by SIGTERM, the mount point
released; `Mount`, the scripts' one way to mount a config and unmount it at once), the mount-table probe `is_mounted`, `lazy_unmount`, `find_mount_daemon`, the
daemon's CPU (`proc_cpu_seconds`) and RSS, and `PrepfsSource`: where a case's prepfs views come
from (a mount the driver starts and can restart empty, one mounted by someone else, or a plain
directory standing in for `augmented/`).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import tempfile
import time
from typing import Callable, Optional, Sequence

from . import loaders



class PrepfsError(RuntimeError):
    pass


def is_mounted(path: str) -> bool:
    """Whether `path` is a mount point (per /proc/self/mountinfo)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mnt = line.split()[4]
                # mountinfo escapes space, tab, newline and backslash as octal
                mnt = (mnt.replace("\\040", " ").replace("\\011", "\t")
                       .replace("\\012", "\n").replace("\\134", "\\"))
                if mnt == real:
                    return True
    except OSError:
        pass
    return False


def lazy_unmount(mountpoint: str) -> bool:
    """`fusermount3 -u -z`, falling back to `umount -l`; True if it is no longer mounted."""
    for cmd in (["fusermount3", "-u", "-z", mountpoint], ["umount", "-l", mountpoint]):
        try:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if not is_mounted(mountpoint):
            return True
    return not is_mounted(mountpoint)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process, all its threads included."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def reap(proc: subprocess.Popen, mountpoint: str, timeout: float, signum: Optional[int] = None) -> None:
    """Ends a mount's daemon: `signum` sent first if given and it still runs, waited for up to
    `timeout` (then killed), and the mount point released if it is still mounted."""
    if signum is not None and proc.poll() is None:
        proc.send_signal(signum)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if is_mounted(mountpoint):
        lazy_unmount(mountpoint)


class PrepfsMount:
    """A running `prepfs mount`. close() ends it (SIGTERM, then SIGKILL) and makes sure the
    mount point is released (lazy unmount as a fallback); it also deletes the log when the log
    is a temporary file of its own (`own_log`). Usable as a context manager."""

    def __init__(self, proc: subprocess.Popen, mountpoint: str, log_path: str,
                 own_log: bool = False):
        self.proc = proc
        self.mountpoint = mountpoint
        self.log_path = log_path
        self.own_log = own_log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def view(self, name: str) -> str:
        return os.path.join(self.mountpoint, name)

    def stats(self) -> Optional[dict]:
        """The live figures of .prepfs/stats.json, or None."""
        try:
            with open(os.path.join(self.mountpoint, ".prepfs", "stats.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def cpu_seconds(self) -> float:
        """The mount's CPU seconds: the `prepfs mount` process's and, where it supervises a server
        (issue 53: the default), the server's (stats.json's `pid`), which does the work."""
        total = proc_cpu_seconds(self.proc.pid)
        server = (self.stats() or {}).get("pid")
        if server and server != self.proc.pid:
            total += proc_cpu_seconds(server)
        return total

    def rss_mb(self) -> float:
        return loaders.tree_memory_mb(self.proc.pid, use_pss=False)

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def close(self, timeout: float = 20.0) -> None:
        reap(self.proc, self.mountpoint, timeout, signal.SIGTERM)
        if self.own_log:
            try:
                os.remove(self.log_path)
            except OSError:
                pass

    def __enter__(self) -> "PrepfsMount":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def mount_prepfs(binary: str, config_yaml: str, source: str, mountpoint: str,
                 timeout: float = 60.0, cpus: Optional[Sequence[int]] = None,
                 log_path: Optional[str] = None, extra_args: Sequence[str] = (),
                 read_only: bool = True) -> PrepfsMount:
    """Start `BINARY mount CONFIG --source SRC --mountpoint MNT` (pinned to `cpus`) and wait
    until MNT/.prepfs/stats.json exists. Raises PrepfsError (with the end of its log) if the
    process exits or `timeout` passes first. A mount left behind at MNT is released first.
    The daemon's output goes to `log_path` (appended), or to a temporary file deleted when the
    mount is closed. `read_only`: mounted read-only at the kernel (the default, as a training
    mount would be)."""
    if not os.path.isfile(binary):
        raise PrepfsError(f"{binary} not found: build it first (cargo build --release)")
    if is_mounted(mountpoint):
        lazy_unmount(mountpoint)
    os.makedirs(mountpoint, exist_ok=True)
    own_log = log_path is None
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="prepfs-bench-", suffix=".log")
        os.close(fd)
    # Read-only at the kernel, as a training mount would be: a read-write FUSE mount has the
    # kernel ask the daemon for attributes at every open of a file read before (atime), one
    # round trip per sample more (docs/mounting.md, "What a sample costs"). Jobs still start by name.
    cmd = [binary, "mount", config_yaml, "--source", source, "--mountpoint", mountpoint,
           *(["--read-only"] if read_only else []), *extra_args]
    pin = (lambda: os.sched_setaffinity(0, set(cpus))) if cpus else None
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=pin,
                                start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
    handle = PrepfsMount(proc, mountpoint, log_path, own_log)
    stats = os.path.join(mountpoint, ".prepfs", "stats.json")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = handle.log_tail()
            handle.close()
            raise PrepfsError(f"{shlex.join(cmd)} exited with status {proc.returncode}:\n"
                              + tail)
        if os.path.exists(stats):
            return handle
        # Polled often: the refill starts working at mount, so whatever time passes between
        # the mount being ready and a cold row's first read is a head start for it.
        time.sleep(0.01)
    tail = handle.log_tail()
    handle.close()
    raise PrepfsError(f"{stats} did not appear within {timeout:.0f} s:\n" + tail)


class Mount(PrepfsMount):
    """The standalone scripts' mount (prepfs_bench.jobs, epochs, plan_matrix, loader,
    remote_two_mounts): SOURCE mounted at WORKDIR/mnt-NAME with the config YAML written to
    WORKDIR/NAME.yaml and the daemon's log at WORKDIR/NAME.log. close() (or stop()) unmounts at
    once, without the drain a signal would start, and waits for the daemon."""

    def __init__(self, binary: str, source: str, workdir: str, name: str, yaml: str,
                 read_only: bool = False, timeout: float = 60.0):
        cfg = os.path.join(workdir, name + ".yaml")
        with open(cfg, "w") as f:
            f.write(yaml)
        started = mount_prepfs(binary, cfg, source, os.path.join(workdir, "mnt-" + name), timeout=timeout,
                               log_path=os.path.join(workdir, name + ".log"), read_only=read_only)
        super().__init__(started.proc, started.mountpoint, started.log_path)
        self.name = name

    @property
    def mnt(self) -> str:
        return self.mountpoint

    def stats(self) -> dict:
        """.prepfs/stats.json now (raises if the mount does not answer)."""
        with open(os.path.join(self.mountpoint, ".prepfs", "stats.json")) as f:
            return json.load(f)

    def close(self, timeout: float = 30.0) -> None:
        subprocess.run(["fusermount3", "-u", self.mountpoint], stderr=subprocess.DEVNULL)
        reap(self.proc, self.mountpoint, timeout)

    stop = close


def find_mount_daemon(mountpoint: str) -> Optional[int]:
    """The pid of a running `... mount ... MOUNTPOINT ...` process, if one is found."""
    real = os.path.realpath(mountpoint)
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if "mount" in args[1:] and any(os.path.realpath(a) == real for a in args[2:]
                                       if a.startswith(("/", "."))):
            return int(d)
    return None


class PrepfsSource:
    """Where the prepfs views come from: a mount the driver starts (and can restart with an
    empty cache), one mounted by someone else, or a plain directory standing in for
    `augmented/`. `pid` is the daemon's, when there is one to account CPU and memory to."""

    def __init__(self, kind: str, augmented: str, mount: Optional[PrepfsMount] = None,
                 restart: Optional[Callable[[], PrepfsMount]] = None):
        self.kind = kind  # "driver-mount", "external-mount", "stand-in"
        self.augmented = augmented
        self.mount = mount
        self._restart = restart
        self._external_pid = (find_mount_daemon(os.path.dirname(augmented))
                              if kind == "external-mount" else None)

    @property
    def pid(self) -> Optional[int]:
        return self.mount.pid if self.mount else self._external_pid

    @property
    def can_empty_cache(self) -> bool:
        return self._restart is not None

    def fresh(self) -> None:
        """Remount with an empty cache (driver mounts only)."""
        if self._restart is None:
            return
        if self.mount:
            self.mount.close()
            self.mount = None
        self.mount = self._restart()

    def ensure(self) -> None:
        """Mounted, if the driver mounts it (after close(), or lazily)."""
        if self._restart is not None and self.mount is None:
            self.mount = self._restart()

    def stats(self) -> Optional[dict]:
        if self.mount:
            return self.mount.stats()
        if self.kind == "external-mount":
            try:
                with open(os.path.join(os.path.dirname(self.augmented), ".prepfs",
                                       "stats.json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None
        return None

    def close(self) -> None:
        if self.mount and self._restart is not None:
            self.mount.close()
            self.mount = None
