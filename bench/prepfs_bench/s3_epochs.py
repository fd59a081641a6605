"""The same set as local files and as objects in an S3-compatible store (moto's server on
loopback, as the tests start it), and packed into WebDataset shards (`KEY.jpg` + `KEY.cls`,
100 samples a shard) kept locally and as objects of the store, three back-to-back epochs of
`augmented/` with 2 readers (each epoch shuffled) on a fresh mount each, the source unlimited,
and limited to 100 MB/s and 10 MB/s (`read_limit`): samples/s and the MB read from the source
per epoch (issue 36's measurement; moto answers about 400 GETs a second on 2 cores, so its
epochs are moto's rate, not a remote store's). `--no-shards` leaves the shards' rows out.

    PYTHONPATH=bench python3 -m prepfs_bench.s3_epochs --prepfs target/release/prepfs \
        --gen target/release/examples/make_dataset [--out bench/results/DATE-s3-epochs]
"""
import contextlib
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from .jobs import generated_source, tree_bytes
from .runs import script_args, write_report
from .servers import free_port


def start_moto():
    """moto's S3 server on a free loopback port, once it answers: (process, port)."""
    port = free_port()
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(150):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    return moto, port


def stop_moto(moto):
    """Ends moto's server (killed if it has not ended 30 s after SIGTERM) and reaps it."""
    moto.terminate()
    try:
        moto.wait(30)
    except subprocess.TimeoutExpired:
        moto.kill()
        moto.wait(10)


@contextlib.contextmanager
def moto_in_workdir(prefix):
    """A temporary work directory and moto's server on a free port: `(workdir, port)`, both
    gone after the `with` block."""
    workdir = tempfile.mkdtemp(prefix=prefix)
    moto, port = start_moto()
    try:
        yield workdir, port
    finally:
        stop_moto(moto)
        shutil.rmtree(workdir, ignore_errors=True)


def put_all(port, objects):
    """Bucket `train`, and in it each `(key, body())` of `objects` (a list), 8 PUTs at a time."""
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("PUT", "/train", b"")
    c.getresponse().read()

    def put(k):
        c = http.client.HTTPConnection("127.0.0.1", port)
        for key, body in objects[k::8]:
            c.request("PUT", "/train/" + key, body())
            r = c.getresponse()
            r.read()
            assert r.status == 200, r.status
    threads = [threading.Thread(target=put, args=(k,)) for k in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]


def upload(port, src):
    """Every file of `src` as an object of bucket `train` under `data/`."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs]

    def body(p):
        with open(p, "rb") as f:
            return f.read()
    put_all(port, [("data/" + os.path.relpath(p, src), lambda p=p: body(p)) for p in files])


def uploaded_set(gen, workdir, port):
    """The generator's set of 1,200 images in 30 classes, in WORKDIR/src and as objects of
    bucket `train` under `data/` in the store on PORT, with test credentials in the
    environment: (its directory, its MB)."""
    src = generated_source(gen, os.path.join(workdir, "src"), 30, 40)
    upload(port, src)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    return src, tree_bytes(src) / 1e6


def uploaded_shards(src, workdir, port, per_shard=100):
    """SRC's images packed into WebDataset shards of PER_SHARD samples in WORKDIR/shards and
    uploaded as objects of bucket `train` under `shards/`: (local pattern, store pattern)."""
    from .shards import pack
    shards_dir = os.path.join(workdir, "shards")
    n, _ = pack(src, shards_dir, per_shard)

    def body(p):
        with open(p, "rb") as f:
            return f.read()
    names = sorted(os.listdir(shards_dir))
    put_all(port, [("shards/" + name, lambda p=os.path.join(shards_dir, name): body(p)) for name in names])
    return f"{shards_dir}/train-{{{0:06d}..{n - 1:06d}}}.tar", "s3://train/shards/train-*.tar"


def epochs(prepfs, workdir, name, source, src_yaml, n=3):
    """`n` epochs of augmented/ on a fresh mount: per epoch samples/s and source MB."""
    cfg = os.path.join(workdir, name + ".yaml")
    with open(cfg, "w") as f:
        f.write("seed: 1\nthreads: 2\ncache: { memory: 64MiB }\n" + src_yaml)
    mnt = os.path.join(workdir, "mnt-" + name)
    os.makedirs(mnt, exist_ok=True)
    log = open(os.path.join(workdir, name + ".log"), "w")
    started = time.time()
    daemon = subprocess.Popen(["timeout", "600", prepfs, "mount", source, mnt, "--config", cfg], stdout=log, stderr=log)
    out = {"setting": name}
    try:
        while not os.path.exists(os.path.join(mnt, ".prepfs", "stats.json")):
            if daemon.poll() is not None:
                raise RuntimeError(f"{name}: the mount ended: see {log.name}")
            time.sleep(0.1)
        out["mount_s"] = time.time() - started
        view = os.path.join(mnt, "augmented")
        paths = [os.path.join(view, c, f) for c in sorted(os.listdir(view)) for f in sorted(os.listdir(os.path.join(view, c)))]
        for e in range(1, n + 1):
            # Each epoch in its own shuffled order, as a training loop reads.
            random.Random(e).shuffle(paths)
            with open(os.path.join(mnt, ".prepfs", "stats.json")) as f:
                before = json.load(f)["source_bytes_read"]
            t = time.time()

            def read(k):
                for p in paths[k::2]:
                    with open(p, "rb") as f:
                        f.read()
            threads = [threading.Thread(target=read, args=(k,)) for k in range(2)]
            [x.start() for x in threads]
            [x.join() for x in threads]
            took = time.time() - t
            with open(os.path.join(mnt, ".prepfs", "stats.json")) as f:
                after = json.load(f)
            out[f"e{e}_per_s"] = len(paths) / took
            out[f"e{e}_source_mb"] = (after["source_bytes_read"] - before) / 1e6
            out["split"] = (after.get("plan") or {}).get("split")
    finally:
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        daemon.wait(60)
    print(json.dumps(out), flush=True)
    return out


def main():
    ap = script_args(__doc__, "s3-epochs")
    ap.add_argument("--no-shards", action="store_true", help="leave the shards' rows out")
    args = ap.parse_args()
    with moto_in_workdir("prepfs-s3-epochs-") as (workdir, port):
        src, set_mb = uploaded_set(args.gen, workdir, port)
        endpoint = f"http://127.0.0.1:{port}"
        store = f"endpoint: \"{endpoint}\", region: us-east-1"
        local_shards, store_shards = (None, None) if args.no_shards else uploaded_shards(src, workdir, port)
        rows = []
        for limit in (None, "100MB/s", "10MB/s"):
            extra = f", read_limit: {limit}" if limit else ""
            tag = (limit or "unlimited").replace("/", "")
            rows.append(epochs(args.prepfs, workdir, "local-" + tag, src, f"source: {{ path: /unused{extra} }}\n"))
            rows.append(epochs(args.prepfs, workdir, "s3-" + tag, "s3://train/data",
                               f"source: {{ url: s3://train/data, {store}{extra} }}\n"))
            if local_shards:
                # Each mount indexes the shards afresh (no index kept between mounts here).
                rows.append(epochs(args.prepfs, workdir, "local-shards-" + tag, local_shards,
                                   f"source: {{ shards: \"{local_shards}\"{extra} }}\n"))
                rows.append(epochs(args.prepfs, workdir, "s3-shards-" + tag, store_shards,
                                   f"source: {{ shards: \"{store_shards}\", {store}{extra} }}\n"))
        shards = "" if args.no_shards else (", and packed into 12 WebDataset shards of 100 samples (`KEY.jpg` + `KEY.cls`) "
                                           "as local files and as objects of the same store (`*-shards-*`)")
        lines = [f"The same {set_mb:.1f} MB set (1,200 generated JPEGs, 30 classes) as local files and as objects in moto's S3 "
                 f"server on loopback{shards}; `augmented/`, 2 readers, 3 epochs, `cache: {{ memory: 64MiB }}` (`split: auto`), a fresh mount each; each epoch in a shuffled order.",
                 "", "| source | mount s | epoch 1 /s (source MB) | epoch 2 /s (source MB) | epoch 3 /s (source MB) | split at the end |",
                 "| --- | ---: | ---: | ---: | ---: | --- |"]
        for r in rows:
            lines.append(f"| {r['setting']} | {r['mount_s']:.1f} | " + " | ".join(
                f"{r[f'e{e}_per_s']:.0f} ({r[f'e{e}_source_mb']:.1f})" for e in (1, 2, 3)) + f" | {r.get('split')} |")
        write_report(args.out, rows, lines)


if __name__ == "__main__":
    main()
