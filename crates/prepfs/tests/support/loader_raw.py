#!/usr/bin/env python3
"""A loader client in the standard library alone (so any user's python3 runs it): one epoch of
JOB over the loader socket SOCKET; prints {"names": [...]} or {"error": message} as JSON.

    loader_raw.py SOCKET JOB
"""
import array
import json
import socket
import struct
import sys


def send(s, obj):
    """One request frame: a 4-byte little-endian length, then the JSON."""
    body = json.dumps(obj).encode()
    s.sendall(struct.pack("<I", len(body)) + body)


def frame(s, head=b""):
    """One reply frame, of which `head` holds the first bytes already received."""
    def exact(n, have):
        while len(have) < n:
            chunk = s.recv(n - len(have))
            if not chunk:
                raise EOFError("closed")
            have += chunk
        return have

    head = exact(4, head)
    n = struct.unpack("<I", head[:4])[0]
    return json.loads(exact(4 + n, head)[4:])


def main(path, job):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    send(s, {"op": "hello", "version": 1, "job": job, "batch_size": 4, "slots": 1})
    msg, anc, _, _ = s.recvmsg(1 << 16, socket.CMSG_LEN(4))
    welcome = frame(s, msg)
    if welcome["op"] == "error":
        return {"error": welcome["message"]}
    send(s, {"op": "begin"})
    frame(s)
    names = []
    while True:
        send(s, {"op": "next", "slot": 0})
        batch = frame(s)
        if batch["op"] == "error":
            return {"error": batch["message"]}
        names += batch["names"]
        if batch["end"]:
            return {"names": names}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
