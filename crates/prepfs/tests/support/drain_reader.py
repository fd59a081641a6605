"""A data loader's reads, torch-free: worker processes open, read and close every file of
MOUNT/augmented/ in turn (an epoch), pausing a moment after each as a training step would.

    drain_reader.py MOUNT [--workers N] [--delay S] [--epochs N | --forever]
                          [--mark-after N --mark PATH] [--signal-pid PID --signal-after N]
                          [--progress PATH]

--mark-after writes PATH once N files are read; --signal-after sends SIGTERM to PID once N files
are read (the training job's stop arriving mid-epoch); --progress rewrites PATH with the number of
files read whole so far after each (for a test to see reads served at a point it chose). Prints one JSON object: the files read
and those that failed or were short, when the signal went and when the reading ended (Unix
seconds). With --forever it reads until a read fails (the mount stopped).
"""

import argparse
import json
import os
import re
import signal
import sys
import time
from multiprocessing import Pool


def ppm_ok(data):
    """Whether `data` is a whole binary PPM: its header's width x height x 3 bytes follow."""
    m = re.match(rb"P6\s+(\d+)\s+(\d+)\s+(\d+)\s", data)
    if m is None:
        return False
    width, height, maxval = (int(g) for g in m.groups())
    return maxval == 255 and len(data) - m.end() == width * height * 3


def read(path):
    """(path, bytes read, error): the file read whole, checked against its own size."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read()
        error = None
        if len(data) != size:
            error = f"read {len(data)} bytes of {size}"
        elif not ppm_ok(data):
            error = "not a whole PPM"
    except OSError as e:
        return path, 0, f"{type(e).__name__}: {e}"
    time.sleep(DELAY)
    return path, len(data), error


DELAY = 0.0


def init(delay):
    global DELAY
    DELAY = delay


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mount")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.01)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--forever", action="store_true")
    ap.add_argument("--mark-after", type=int)
    ap.add_argument("--mark")
    ap.add_argument("--signal-pid", type=int)
    ap.add_argument("--signal-after", type=int)
    ap.add_argument("--progress")
    args = ap.parse_args()
    root = os.path.join(args.mount, "augmented")
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)
    out = {"files": len(files), "read": 0, "failed": [], "epochs": 0, "signalled_at": None, "read_after_signal": 0}
    started = time.time()
    done = 0
    with Pool(args.workers, initializer=init, initargs=(args.delay,)) as pool:
        epoch = 0
        while args.forever or epoch < args.epochs:
            epoch += 1
            for path, n, error in pool.imap_unordered(read, files, chunksize=1):
                done += 1
                if error is None:
                    out["read"] += 1
                    if out["signalled_at"] is not None:
                        out["read_after_signal"] += 1
                else:
                    out["failed"].append([path, error])
                if args.progress:
                    # Written whole, then renamed: a test never reads half a number.
                    with open(args.progress + ".tmp", "w") as f:
                        f.write(str(out["read"]))
                    os.replace(args.progress + ".tmp", args.progress)
                if args.mark_after and done == args.mark_after:
                    with open(args.mark, "w") as f:
                        f.write(str(time.time()))
                if args.signal_after and done == args.signal_after:
                    out["signalled_at"] = time.time()
                    os.kill(args.signal_pid, signal.SIGTERM)
            out["epochs"] = epoch
            if out["failed"]:
                break
    out["started_at"] = started
    out["ended_at"] = time.time()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
