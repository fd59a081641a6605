#!/usr/bin/env python3
"""Read every file of a directory whole, with K worker processes, for R rounds.

    PYTHONPATH=bench python3 -m prepfs_bench.floor_read DIR [--workers K] [--rounds R]

Each file is read as a data loader reads a sample (`open(p, 'rb').read()`); the files are split
among the workers round-robin, in listing order. Prints one JSON line: files/s and MB/s over all
rounds, and per round. Stdlib only.
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time

# The raw reader's loop, shared with scripts/read_tree.py (one definition of "read a sample").
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts'))
from read_tree import read_all  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('dir')
    ap.add_argument('--workers', '-k', type=int, default=2)
    ap.add_argument('--rounds', '-r', type=int, default=3)
    a = ap.parse_args()
    paths = [os.path.join(a.dir, n) for n in sorted(os.listdir(a.dir))]
    shares = [paths[i::a.workers] for i in range(a.workers)]
    rounds = []
    with mp.Pool(a.workers) as pool:
        for _ in range(a.rounds):
            t = time.perf_counter()
            nbytes = sum(pool.map(read_all, shares, chunksize=1))
            rounds.append((time.perf_counter() - t, nbytes))
    secs = sum(s for s, _ in rounds)
    nbytes = sum(b for _, b in rounds)
    print(json.dumps({
        'dir': a.dir, 'files': len(paths), 'workers': a.workers, 'rounds': a.rounds,
        'files_per_s': round(len(paths) * a.rounds / secs, 1),
        'mb_per_s': round(nbytes / secs / 1e6, 1),
        'round_files_per_s': [round(len(paths) / s, 1) for s, _ in rounds],
    }))


if __name__ == '__main__':
    main()
