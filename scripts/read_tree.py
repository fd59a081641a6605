"""Reads every file under a directory with N parallel reader processes; prints samples/s.

usage: read_tree.py DIR [READERS]   (a raw reader: what prepfs itself delivers)
"""
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def read_all(paths):
    total = 0
    for p in paths:
        with open(p, "rb") as f:
            total += len(f.read())
    return total


def main():
    root = sys.argv[1]
    readers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
    chunks = [files[i::readers] for i in range(readers)]
    started = time.time()
    with ProcessPoolExecutor(readers) as pool:
        total = sum(pool.map(read_all, chunks))
    elapsed = time.time() - started
    print(f"{len(files) / elapsed:.0f} samples/s ({len(files)} files, {total / 1e6:.1f} MB, {elapsed:.2f} s)")


if __name__ == "__main__":
    main()
