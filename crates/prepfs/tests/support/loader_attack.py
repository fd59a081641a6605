#!/usr/bin/env python3
"""What a hostile local user tries on the loader socket, in the standard library alone (so any
user's python3 runs it, `nobody` included). Prints one JSON object.

    loader_attack.py silent SOCKET N SECONDS
        opens N connections that never say hello, waits SECONDS; {"closed": how many the
        daemon closed, "open": how many it still holds}
    loader_attack.py rings SOCKET JOB N BATCH SLOTS
        opens N connections asking for SLOTS slots of BATCH samples each and has every slot of
        those welcomed filled; {"welcomed": [ring bytes...], "errors": [messages...],
        "samples": samples written}; holds them until stdin closes
    loader_attack.py idle SOCKET JOB N LENGTH
        opens N connections that say hello, then declare a frame of LENGTH bytes and send only
        its first 6; {"welcomed": how many, "errors": [messages...]}; holds them until stdin
        closes
    loader_attack.py shrink SOCKET JOB
        takes a ring and tries to shrink and to grow the shared memory file under the daemon,
        then asks for a batch; {"shrink": errno name or "ok", "grow": ..., "batch": samples}
"""
import array
import errno
import json
import os
import socket
import sys
import time

from loader_raw import frame as frame_of, send  # the protocol's framing, written once


def hello(path, job, batch, slots):
    """A connection and its welcome (with the ring's descriptor) or error."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    send(s, {"op": "hello", "version": 1, "job": job, "batch_size": batch, "slots": slots})
    fds = array.array("i")
    msg, anc, _, _ = s.recvmsg(1 << 16, socket.CMSG_LEN(fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return s, frame_of(s, msg), (fds[0] if fds else None)


def silent(path, n, seconds):
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.setblocking(False)
        conns.append(s)
    time.sleep(seconds)
    closed = 0
    for s in conns:
        try:
            data = s.recv(1 << 16)
            closed += 1  # an error frame then EOF, or EOF: the daemon let it go
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return {"closed": closed, "open": n - closed}


def rings(path, job, n, batch, slots):
    welcomed, errors, samples, held = [], [], 0, []
    for _ in range(n):
        try:
            s, reply, fd = hello(path, job, batch, slots)
        except OSError as e:
            errors.append(str(e))
            continue
        if reply["op"] != "welcome":
            errors.append(reply.get("message", str(reply)))
            s.close()
            continue
        welcomed.append(reply["slots"] * reply["slot_bytes"])
        held.append((s, fd))
        send(s, {"op": "begin"})
        frame_of(s)
        for slot in range(slots):
            send(s, {"op": "next", "slot": slot})
            batch_reply = frame_of(s)
            samples += len(batch_reply.get("names", []))
    print(json.dumps({"welcomed": welcomed, "errors": errors, "samples": samples}), flush=True)
    sys.stdin.read()
    return None


def idle(path, job, n, length):
    welcomed, errors, held = 0, [], []
    for _ in range(n):
        try:
            s, reply, fd = hello(path, job, 1, 1)
        except OSError as e:
            errors.append(str(e))
            continue
        if reply["op"] != "welcome":
            errors.append(reply.get("message", str(reply)))
            s.close()
            continue
        welcomed += 1
        s.sendall(length.to_bytes(4, "little") + b'{"op":')
        held.append((s, fd))
    print(json.dumps({"welcomed": welcomed, "errors": errors}), flush=True)
    sys.stdin.read()
    return None


def shrink(path, job):
    s, reply, fd = hello(path, job, 2, 1)
    if reply["op"] != "welcome":
        return {"error": reply.get("message")}
    size = reply["slots"] * reply["slot_bytes"]

    def attempt(length):
        try:
            os.ftruncate(fd, length)
            return "ok"
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))

    result = {"shrink": attempt(0), "grow": attempt(size * 4)}
    send(s, {"op": "begin"})
    frame_of(s)
    send(s, {"op": "next", "slot": 0})
    result["batch"] = len(frame_of(s).get("names", []))
    return result


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "silent":
        out = silent(args[0], int(args[1]), float(args[2]))
    elif mode == "rings":
        out = rings(args[0], args[1], int(args[2]), int(args[3]), int(args[4]))
    elif mode == "idle":
        out = idle(args[0], args[1], int(args[2]), int(args[3]))
    elif mode == "shrink":
        out = shrink(args[0], args[1])
    else:
        raise SystemExit(f"unknown mode {mode}")
    if out is not None:
        print(json.dumps(out))
