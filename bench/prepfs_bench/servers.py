"""The benchmarks' real servers, written once: a free loopback port, a process ended politely
then surely, and a `redis-server` on loopback (optionally pinned to cores) with the deployment's
secret file (0600) beside it: the remote tier's and the workers' benchmarks start theirs here."""
import os
import signal
import socket
import subprocess
import time

from .mount import proc_cpu_seconds


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
