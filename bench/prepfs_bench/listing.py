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

With --shards, the same DIRS x FILES samples are WebDataset shards instead, one a directory
(`train-NNNNN.tar`: `fNNNNNNNN.jpg`, empty, and `fNNNNNNNN.cls` naming the class), mounted by
their pattern with the index kept beside; the mount's time is the scan of every header, and
`find` runs through the mount only (the tree's own figures are those of a run without --shards).

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


def tar_header(name: bytes, size: int) -> bytes:
    """A ustar header for a regular file NAME of SIZE bytes (mode 0644, mtime fixed)."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % 1795000000
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def make_shards(root: str, dirs: int, files: int) -> float:
    """DIRS shards `train-NNNNN.tar` of FILES samples each under ROOT (an empty `.jpg` and a
    `.cls` naming the shard's class; made, or completed where an earlier run stopped); the
    seconds it took."""
    started = time.monotonic()
    for d in range(dirs):
        path = os.path.join(root, f"train-{d:05d}.tar")
        label = str(d).encode()
        size = files * (512 + 512 + 512) + 1024
        if os.path.exists(path) and os.path.getsize(path) == size:
            continue
        pad = label + bytes(512 - len(label))
        parts = []
        for f in range(files):
            key = f"f{d * files + f:08d}".encode()
            parts += [tar_header(key + b".jpg", 0), tar_header(key + b".cls", len(label)), pad]
        parts.append(bytes(1024))
        with open(path + ".part", "wb") as out:
            out.write(b"".join(parts))
        os.rename(path + ".part", path)
        if d % 500 == 499:
            print(f"  shards: {d + 1}/{dirs}", file=sys.stderr, flush=True)
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
    ap.add_argument("--shards", action="store_true", help="the samples as WebDataset shards, one a directory")
    ap.add_argument("--limit", type=float, default=600, help="seconds allowed per command")
    ap.add_argument("--label", default="", help="a word said in the report (the build measured)")
    ap.add_argument("--out", default=None, help="results' stem (default bench/results/listing-<N>)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("dropping the caches needs root")
    entries = args.dirs * args.files
    kind = "samples in shards" if args.shards else "files"
    tree = os.path.join(os.path.abspath(args.root), f"{args.dirs}x{args.files}" + ("-shards" if args.shards else ""))
    os.makedirs(tree, exist_ok=True)
    print(f"making {entries:,} {kind} under {tree}", file=sys.stderr, flush=True)
    made_s = (make_shards if args.shards else make_tree)(tree, args.dirs, args.files)
    workdir = tempfile.mkdtemp(prefix="prepfs-listing-")
    source, yaml, index_dir = tree, MOUNT_YAML, os.path.join(workdir, "index")
    if args.shards:
        source = f"{tree}/train-{{{0:05d}..{args.dirs - 1:05d}}}.tar"
        yaml += f"source:\n  shards: \"{source}\"\n  index_dir: {index_dir}\n"
    rows = []
    mount = None
    rss_after_mb = 0.0
    kept = None
    try:
        started = time.monotonic()
        mount = Mount(os.path.abspath(args.prepfs), source, workdir, "listing", yaml,
                      read_only=True, timeout=args.limit)
        mount_s = time.monotonic() - started
        rss_mb = mount.rss_mb()
        cases = [("encoded", mount.view("encoded"), mount), ("augmented", mount.view("augmented"), mount)]
        if args.shards:
            one = min(os.listdir(mount.view("encoded")))
            index_bytes = sum(os.path.getsize(os.path.join(index_dir, n)) for n in os.listdir(index_dir))
        else:
            one = "c00000"
            cases.insert(0, ("source", tree, None))
        for name, path, m in cases:
            rows.append(measure(f"find {name}", f"find {path} -type f | wc -l", args.limit, m))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        for name, path, m in cases:
            rows.append(measure(f"ls -f {name}/{one}", f"ls -f {os.path.join(path, one)} | wc -l", args.limit, m))
        rss_after_mb = mount.rss_mb()
        if args.shards:
            # A second mount, from the index the first kept.
            mount.close()
            mount = None
            started = time.monotonic()
            mount = Mount(os.path.abspath(args.prepfs), source, workdir, "listing-kept", yaml,
                          read_only=True, timeout=args.limit)
            kept = {"mount_s": round(time.monotonic() - started, 2), "rss_mb": round(mount.rss_mb())}
            print(json.dumps({"kept_index_mount": kept}), file=sys.stderr, flush=True)
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
    per_case = len(cases)
    src = {k: rows[0][k]["seconds"] for k in ("cold", "warm")}
    label = f" ({args.label})" if args.label else ""
    shards_note = (f"The samples as {args.dirs:,} WebDataset shards (an empty `.jpg` and a `.cls` each), mounted by "
                   f"their pattern; the mount's time is the scan of every tar header, the index kept: "
                   f"{index_bytes / 1e6:.1f} MB ({index_bytes / entries:.0f} B a sample). No source tree: "
                   f"x source is against the first row. A second mount, from the kept index: "
                   f"{kept['mount_s']:.1f} s, daemon RSS after it {kept['rss_mb']} MB. " if args.shards else "")
    lines = [f"# Listing {entries:,} entries ({args.dirs:,} directories x {args.files:,} {kind}){label}", "", shards_note +
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
        base = src if row["target"].startswith("find") else {k: rows[per_case][k]["seconds"] for k in ("cold", "warm")}
        req = c.get("requests")
        reqs = "" if req is None else f"{req.get('readdirplus', 0):,} / {req.get('readdir', 0):,} / {req.get('lookup', 0):,}"
        lines.append(f"| `{row['target']}` | {c['seconds']:.2f} | {fmt_num(c['seconds'] / base['cold'], 1)} | "
                     f"{w['seconds']:.2f} | {fmt_num(w['seconds'] / base['warm'], 1)} | "
                     f"{'yes' if c['complete'] and w['complete'] else 'NO'} | {c.get('daemon_cpu_s', '')} | {reqs} | "
                     f"{'' if w['fuse_inodes'] is None else format(w['fuse_inodes'], ',')} |")
    out = args.out or os.path.join(BENCH_DIR, "results", f"listing-{args.dirs}x{args.files}" + ("-shards" if args.shards else ""))
    data = {"dirs": args.dirs, "files": args.files, "shards": args.shards, "tree_made_s": round(made_s, 1),
            "index_bytes": index_bytes if args.shards else None, "kept_index_mount": kept,
            "mount_s": round(mount_s, 2), "rss_mb": round(rss_mb), "rss_after_mb": round(rss_after_mb), "label": args.label, "rows": rows}
    write_report(out, data, lines)
    return 0 if all(r[k]["complete"] for r in rows for k in ("cold", "warm")) else 1


if __name__ == "__main__":
    sys.exit(main())
