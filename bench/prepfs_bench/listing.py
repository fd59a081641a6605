"""prepfs_bench.listing: listing a large tree through the mount against the source (issue 36).

Makes a tree of DIRS directories x FILES empty `.jpg` files on disk (the scan takes image files
by extension and reads none of them; listing needs no bytes), mounts it, and times
`find DIR -type f | wc -l` on the source, through `encoded/` and through `augmented/`, and
`ls -f` of one class directory, each cold (the page, dentry and inode caches dropped first,
`echo 3 > /proc/sys/vm/drop_caches`: root) and warm (the same command again at once). Every
command runs under `timeout`. With each figure: the entries counted (checked against the tree),
the daemon's CPU seconds and FUSE requests over the command (from `.prepfs/stats.json`), and the
kernel's `fuse_inode` slab objects after it (the inodes READDIRPLUS made).

    python3 -m prepfs_bench.listing --prepfs target/release/prepfs --dirs 1280 --files 1000

The tree is made under --root (default: bench/results/listing-tree/, on the disk: a tree
of 10M files does not fit a tmpfs) and deleted at the end unless --keep (then a later run with
the same --root, --dirs and --files reuses it). Results: bench/results/<name>.json and .md,
and the run's section in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from . import BENCH_DIR
from .mount import Mount
from .runs import write_report
from .units import fmt_num

# The daemon's defaults but a small cache and no refill: nothing is read, the listing is what is
# measured (the tree's files are empty: a refill would find each sample undecodable, mark it bad
# and log a line for it, 10M lines competing with the listing for the 2 cores and the disk).
MOUNT_YAML = "cache:\n  memory: 256MiB\n  refill: false\n"


def make_tree(root: str, dirs: int, files: int) -> float:
    """DIRS directories `c00000...` of FILES empty files `f0000000.jpg` under ROOT (made, or
    completed where an earlier run stopped); the seconds it took."""
    started = time.monotonic()
    flags = os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC
    for d in range(dirs):
        path = os.path.join(root, f"c{d:05d}")
        os.makedirs(path, exist_ok=True)
        if len(os.listdir(path)) == files:
            continue
        for f in range(files):
            os.close(os.open(os.path.join(path, f"f{d * files + f:08d}.jpg"), flags, 0o644))
        if d % 500 == 499:
            print(f"  tree: {d + 1}/{dirs} directories", file=sys.stderr, flush=True)
    return time.monotonic() - started


def drop_caches() -> None:
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fuse_inodes() -> Optional[int]:
    """Active objects of the kernel's fuse_inode slab (None where /proc/slabinfo is unreadable)."""
    try:
        with open("/proc/slabinfo") as f:
            for line in f:
                if line.startswith("fuse_inode "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def requests(mount: Optional[Mount]) -> Dict[str, int]:
    stats = mount.stats() if mount else None
    return dict((stats or {}).get("fuse_requests") or {})


def timed(shell: str, limit: float, mount: Optional[Mount]) -> dict:
    """Runs SHELL (its output a count) under `timeout LIMIT`: seconds, the count, the daemon's
    CPU seconds and FUSE requests over it."""
    before = requests(mount)
    cpu = mount.cpu_seconds() if mount else 0.0
    started = time.monotonic()
    proc = subprocess.run(["timeout", str(int(limit)), "sh", "-c", shell], capture_output=True, text=True)
    seconds = time.monotonic() - started
    after = requests(mount)
    row = {"seconds": round(seconds, 3), "rc": proc.returncode,
           "count": int(proc.stdout.strip() or -1) if proc.returncode == 0 else None,
           "fuse_inodes": fuse_inodes()}
    if mount:
        row["daemon_cpu_s"] = round(mount.cpu_seconds() - cpu, 2)
        row["requests"] = {k: after.get(k, 0) - before.get(k, 0) for k in after
                           if isinstance(after.get(k), int) and after.get(k, 0) != before.get(k, 0)}
    return row


def measure(target: str, shell: str, limit: float, mount: Optional[Mount]) -> dict:
    drop_caches()
    cold = timed(shell, limit, mount)
    warm = timed(shell, limit, mount)
    return {"target": target, "command": shell, "cold": cold, "warm": warm}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prepfs", required=True, help="the prepfs binary (a release build)")
    ap.add_argument("--dirs", type=int, default=1280)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--root", default=os.path.join(BENCH_DIR, "results", "listing-tree"),
                    help="where the tree is made (on disk)")
    ap.add_argument("--keep", action="store_true", help="leave the tree for a later run")
    ap.add_argument("--limit", type=float, default=600, help="seconds allowed per command")
    ap.add_argument("--label", default="", help="a word said in the report (the build measured)")
    ap.add_argument("--out", default=None, help="results' stem (default bench/results/listing-<N>)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("dropping the caches needs root")
    entries = args.dirs * args.files
    tree = os.path.join(os.path.abspath(args.root), f"{args.dirs}x{args.files}")
    os.makedirs(tree, exist_ok=True)
    print(f"making {entries:,} files under {tree}", file=sys.stderr, flush=True)
    made_s = make_tree(tree, args.dirs, args.files)
    workdir = tempfile.mkdtemp(prefix="prepfs-listing-")
    rows = []
    mount = None
    rss_after_mb = 0.0
    try:
        started = time.monotonic()
        mount = Mount(os.path.abspath(args.prepfs), tree, workdir, "listing", MOUNT_YAML,
                      read_only=True, timeout=args.limit)
        mount_s = time.monotonic() - started
        rss_mb = mount.rss_mb()
        one = "c00000"
        cases = [("source", tree, None), ("encoded", mount.view("encoded"), mount),
                 ("augmented", mount.view("augmented"), mount)]
        for name, path, m in cases:
            rows.append(measure(f"find {name}", f"find {path} -type f | wc -l", args.limit, m))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        for name, path, m in cases:
            rows.append(measure(f"ls -f {name}/{one}", f"ls -f {os.path.join(path, one)} | wc -l", args.limit, m))
        rss_after_mb = mount.rss_mb()
    finally:
        if mount:
            mount.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if not args.keep:
            print(f"deleting {tree}", file=sys.stderr, flush=True)
            shutil.rmtree(tree, ignore_errors=True)
    for row in rows:
        want = entries if row["target"].startswith("find") else args.files + 2
        for k in ("cold", "warm"):
            row[k]["complete"] = row[k]["count"] == want
    src = {k: rows[0][k]["seconds"] for k in ("cold", "warm")}
    label = f" ({args.label})" if args.label else ""
    lines = [f"# Listing {entries:,} entries ({args.dirs:,} directories x {args.files:,} files){label}", "",
             f"`find DIR -type f | wc -l` on the source and through the mount, cold (caches dropped) and "
             f"warm (again at once), each under `timeout {int(args.limit)}`. Mounted in {mount_s:.1f} s; "
             f"daemon RSS after mount {rss_mb:.0f} MB, after the listings {rss_after_mb:.0f} MB. x source: the mount's time over the source's. "
             f"fuse inodes: the kernel's fuse_inode slab after the command. Daemon CPU and requests: over the "
             f"command and the `.prepfs/stats.json` read after it.", "",
             "| command | cold s | x source | warm s | x source | entries right | daemon CPU s (cold) | "
             "readdirplus / readdir / lookup (cold) | fuse inodes |",
             "|---|---:|---:|---:|---:|:---:|---:|---|---:|"]
    for row in rows:
        c, w = row["cold"], row["warm"]
        base = src if row["target"].startswith("find") else {k: rows[3][k]["seconds"] for k in ("cold", "warm")}
        req = c.get("requests")
        reqs = "" if req is None else f"{req.get('readdirplus', 0):,} / {req.get('readdir', 0):,} / {req.get('lookup', 0):,}"
        lines.append(f"| `{row['target']}` | {c['seconds']:.2f} | {fmt_num(c['seconds'] / base['cold'], 1)} | "
                     f"{w['seconds']:.2f} | {fmt_num(w['seconds'] / base['warm'], 1)} | "
                     f"{'yes' if c['complete'] and w['complete'] else 'NO'} | {c.get('daemon_cpu_s', '')} | {reqs} | "
                     f"{'' if w['fuse_inodes'] is None else format(w['fuse_inodes'], ',')} |")
    out = args.out or os.path.join(BENCH_DIR, "results", f"listing-{args.dirs}x{args.files}")
    data = {"dirs": args.dirs, "files": args.files, "tree_made_s": round(made_s, 1),
            "mount_s": round(mount_s, 2), "rss_mb": round(rss_mb), "rss_after_mb": round(rss_after_mb), "label": args.label, "rows": rows}
    write_report(out, data, lines)
    return 0 if all(r[k]["complete"] for r in rows for k in ("cold", "warm")) else 1


if __name__ == "__main__":
    sys.exit(main())
