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


def main(path, job):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)

    def send(obj):
        body = json.dumps(obj).encode()
        s.sendall(struct.pack("<I", len(body)) + body)

    def exact(n, have=b""):
        while len(have) < n:
            chunk = s.recv(n - len(have))
            if not chunk:
                raise EOFError("closed")
            have += chunk
        return have

    def frame(head=b""):
        head = exact(4, head)
        n = struct.unpack("<I", head[:4])[0]
        return json.loads(exact(4 + n, head)[4:])

    send({"op": "hello", "version": 1, "job": job, "batch_size": 4, "slots": 1})
    msg, anc, _, _ = s.recvmsg(1 << 16, socket.CMSG_LEN(4))
    welcome = frame(msg)
    if welcome["op"] == "error":
        return {"error": welcome["message"]}
    send({"op": "begin"})
    frame()
    names = []
    while True:
        send({"op": "next", "slot": 0})
        batch = frame()
        if batch["op"] == "error":
            return {"error": batch["message"]}
        names += batch["names"]
        if batch["end"]:
            return {"names": names}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
