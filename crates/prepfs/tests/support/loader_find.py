#!/usr/bin/env python3
"""Finds a mount's loader socket from its mountpoint as prepfs.Loader does (python/src/lib.rs:
`.prepfs/loader.json`, else `.prepfs/stats.json`), then reads one epoch of JOB over it with
loader_raw.py's stdlib client. Prints {"found_in": FILE, "names": [...]}, or {"error": message}
(with "found_in" once the socket was found) as JSON.

    loader_find.py MOUNTPOINT JOB
"""
import json
import os
import sys

from loader_raw import main as epoch


def socket_of(mountpoint):
    loader = os.path.join(mountpoint, ".prepfs/loader.json")
    stats = os.path.join(mountpoint, ".prepfs/stats.json")
    try:
        with open(loader) as f:
            return loader, json.load(f).get("socket")
    except OSError:
        pass
    with open(stats) as f:
        return stats, json.load(f)["loader"].get("socket")


def run(mountpoint, job):
    try:
        found_in, socket = socket_of(mountpoint)
    except OSError as e:
        return {"error": f"{e} (is a prepfs mount there?)"}
    if socket is None:
        return {"found_in": found_in, "error": "no loader socket"}
    got = epoch(socket, job)
    got["found_in"] = found_in
    return got


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2])))
