"""The benchmarks' real servers and processes, written once: a free loopback port, a process ended
politely then surely, what a benchmark started and must end on every way out (`LIVE`,
`end_all`, `on_signal`), a data set of the generator's or of real photographs made once under
target/bench-data (`make_set`), and a `redis-server` on loopback (optionally pinned to cores)
with the deployment's secret file (0600) beside it: the remote tier's, the workers' and the
restarts' benchmarks start theirs here."""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from . import module_command
from .mount import proc_cpu_seconds

LIVE = []  # what to end on every way out, newest last (each has close())


def end_all():
    """Closes everything in LIVE, newest first; one that fails does not stop the rest."""
    while LIVE:
        thing = LIVE.pop()
        try:
            thing.close()
        except Exception as e:  # noqa: BLE001  (the rest must still be ended)
            print(f"closing {thing!r}: {e}", file=sys.stderr)


def on_signal(signum, _frame):
    """A stop signal ends the run through its `finally` and atexit (end_all)."""
    raise SystemExit(128 + signum)


def end_on_exit():
    """LIVE is ended at exit, a stop signal's too."""
    atexit.register(end_all)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)


def forget(thing):
    """`thing` was ended by its owner: no longer LIVE."""
    if thing in LIVE:
        LIVE.remove(thing)


def files_under(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def make_set(kind, gen, path, classes, per_class, width, height, is_sample):
    """The data set at `path` (`kind` real: JPEGs cut from real photographs, real_photos.py; gen:
    the generator's), made unless already there with classes * per_class files `is_sample` says
    are samples (the generator adds a README.txt)."""
    if os.path.isdir(path) and len([p for p in files_under(path) if is_sample(p)]) == classes * per_class:
        return path
    shutil.rmtree(path, ignore_errors=True)
    args = ["--out", path, "--classes", str(classes), "--per-class", str(per_class), "--width", str(width),
            "--height", str(height), "--seed", "0"]
    if kind == "real":
        subprocess.run(module_command(sys.executable, "real_photos") + args, check=True, timeout=900)
    elif kind == "gen":
        subprocess.run([gen] + args + ["--quiet"], check=True, timeout=900)
    else:
        raise SystemExit(f"unknown set {kind} (real, gen)")
    return path


def process_bench_args(ap, out_name):
    """The start of the arguments of a benchmark whose reader processes run this module's own
    `read` command (prepfs_bench.workers, prepfs_bench.restarts): the binaries, where the data
    sets go, and the report's prefix."""
    from . import ROOT
    ap.add_argument("--prepfs", default=os.path.join(ROOT, "target/release/prepfs"))
    ap.add_argument("--gen", default=os.path.join(ROOT, "target/release/examples/make_dataset"))
    ap.add_argument("--data-root", default=os.path.join(ROOT, "target/bench-data"))
    ap.add_argument("--out", help=f"PREFIX: PREFIX.json, PREFIX.md (default bench/results/DATE-{out_name}[-quick])")


def free_port():
    """A loopback TCP port free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def end_process(proc, timeout, signum=signal.SIGTERM):
    """`signum`, `timeout` s, then SIGKILL; the exit status."""
    if proc.poll() is None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


class RedisServer:
    """A redis-server on loopback under `work` (no persistence), pinned to `cores` (a taskset
    list such as "1") where given, in a session of its own; `secret` is a fresh 32-byte
    secret file (0600), as `cache.remote.secret_file` wants it."""

    def __init__(self, work, cores=None):
        self.secret = os.path.join(work, "redis.secret")
        fd = os.open(self.secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, os.urandom(32))
        os.close(fd)
        self.port = free_port()
        pin = ["taskset", "-c", str(cores)] if cores is not None else []
        self.proc = subprocess.Popen(pin + ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                            "--appendonly", "no", "--dir", work],
                                     stdout=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        end_process(self.proc, 5)
        raise SystemExit("redis-server did not start")

    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def flushall(self):
        subprocess.run(["redis-cli", "-p", str(self.port), "FLUSHALL"], check=True, timeout=30,
                       stdout=subprocess.DEVNULL)

    def cpu_seconds(self):
        return proc_cpu_seconds(self.proc.pid)

    def close(self):
        end_process(self.proc, 10)

    def __repr__(self):
        return f"Redis(:{self.port})"
