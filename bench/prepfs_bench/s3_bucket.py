"""The same set in an S3-compatible store limited to 100 MB/s and to 10 MB/s, read for 3 epochs
by a torchvision training loop three ways (issue 36's comparison): the plain bucket, each sample
fetched with boto3 in the DataLoader's workers and transformed there (RandomResizedCrop(224),
flip, ToTensor), as a user without a caching mount reads it; ImageFolder with that transform
over a plain FUSE mount of the bucket (s3fs-fuse with its defaults, Mountpoint-style: no data
cache; left out where `s3fs` is not installed); and prepfs mounted on the bucket, the same
loop over `augmented/` with ToTensor alone. The store is moto's server on loopback
behind a forwarder that limits the bytes it sends (one bucket of tokens for every connection),
so both read the same limited store and the forwarder counts the bytes each epoch fetched.

    PYTHONPATH=bench python3 -m prepfs_bench.s3_bucket --prepfs target/release/prepfs \
        --gen target/release/examples/make_dataset [--out bench/results/DATE-s3-bucket]

moto answers about 400 GETs a second on 2 cores, so an epoch that fetches every sample runs at
moto's rate where the limit allows more.
"""
import os
import socket
import subprocess
import threading
import time

from .runs import script_args, write_report
from .s3_epochs import free_port, moto_in_workdir, uploaded_set


class Limiter:
    """Bytes a second for every connection together, and the bytes sent so far."""

    def __init__(self, rate):
        self.rate, self.sent, self.lock = rate, 0, threading.Lock()
        self.next_free = time.monotonic()

    def take(self, n):
        with self.lock:
            self.sent += n
            now = time.monotonic()
            start = max(now, self.next_free)
            self.next_free = start + n / self.rate
            wait = start - now
        if wait > 0:
            time.sleep(wait)


def forwarder(listen_port, target_port, limiter, stop):
    """A TCP forwarder on loopback: requests pass as they are, responses at the limiter's rate."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(64)
    server.settimeout(0.2)

    def pipe(src, dst, limited):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if limited:
                    limiter.take(len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve():
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except socket.timeout:
                continue
            upstream = socket.create_connection(("127.0.0.1", target_port))
            threading.Thread(target=pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client, True), daemon=True).start()
        server.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


class BucketDataset:
    """ImageFolder's samples read from the bucket with boto3, the transform done here."""

    def __init__(self, endpoint, keys, classes):
        self.endpoint, self.keys, self.classes, self.client = endpoint, keys, classes, None
        import torchvision.transforms as T
        self.transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        import io
        import boto3
        from PIL import Image
        if self.client is None:
            self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")
        key = self.keys[i]
        body = self.client.get_object(Bucket="train", Key=key)["Body"].read()
        image = Image.open(io.BytesIO(body)).convert("RGB")
        return self.transform(image), self.classes[key.split("/")[1]]


def run_epochs(dataset, limiter, n=3):
    """`n` shuffled epochs through a DataLoader (2 workers, batch 32): per epoch samples/s and
    the MB the store sent."""
    import torch
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2)
    out = {}
    for e in range(1, n + 1):
        before, t = limiter.sent, time.time()
        seen = sum(len(batch[1]) for batch in loader)
        took = time.time() - t
        out[f"e{e}_per_s"] = seen / took
        out[f"e{e}_mb"] = (limiter.sent - before) / 1e6
    return out


def prepfs_epochs(prepfs, workdir, name, endpoint, limiter):
    """The loop over prepfs's `augmented/` on a fresh mount of the bucket."""
    import torchvision
    import torchvision.transforms as T
    cfg = os.path.join(workdir, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(f"seed: 1\nthreads: 2\ncache: {{ memory: 256MiB }}\n"
                f"source: {{ url: s3://train/data, endpoint: \"{endpoint}\", region: us-east-1 }}\n")
    mnt = os.path.join(workdir, "mnt-" + name)
    os.makedirs(mnt, exist_ok=True)
    log = open(os.path.join(workdir, name + ".log"), "w")
    before = limiter.sent
    daemon = subprocess.Popen(["timeout", "900", prepfs, "mount", "s3://train/data", mnt, "--config", cfg], stdout=log, stderr=log)
    try:
        while not os.path.exists(os.path.join(mnt, ".prepfs", "stats.json")):
            if daemon.poll() is not None:
                raise RuntimeError(f"{name}: the mount ended: see {log.name}")
            time.sleep(0.1)
        listing_mb = (limiter.sent - before) / 1e6
        dataset = torchvision.datasets.ImageFolder(os.path.join(mnt, "augmented"), transform=T.ToTensor())
        out = run_epochs(dataset, limiter)
        out["listing_mb"] = listing_mb
        return out
    finally:
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        daemon.wait(60)


def s3fs_epochs(workdir, name, endpoint, limiter):
    """The boto3 loop's transform over a plain FUSE mount of the bucket (s3fs-fuse with its
    defaults: no data cache, as Mountpoint for S3 without its cache), by ImageFolder; None
    where s3fs is not installed."""
    import shutil as _shutil
    import torchvision
    import torchvision.transforms as T
    if _shutil.which("s3fs") is None:
        print(f"{name}: s3fs is not installed (apt-get install s3fs): its row is left out", flush=True)
        return None
    mnt = os.path.join(workdir, "mnt-" + name)
    os.makedirs(mnt, exist_ok=True)
    passwd = os.path.join(workdir, "s3fs-passwd")
    with open(passwd, "w") as f:
        f.write("test:test\n")
    os.chmod(passwd, 0o600)
    before = limiter.sent
    subprocess.run(["timeout", "60", "s3fs", "train", mnt, "-o", f"url={endpoint}", "-o", "use_path_request_style",
                    "-o", f"passwd_file={passwd}", "-o", "ro"], check=True)
    try:
        for _ in range(100):
            if os.path.isdir(os.path.join(mnt, "data")):
                break
            time.sleep(0.1)
        transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
        dataset = torchvision.datasets.ImageFolder(os.path.join(mnt, "data"), transform=transform)
        listing_mb = (limiter.sent - before) / 1e6
        out = run_epochs(dataset, limiter)
        out["listing_mb"] = listing_mb
        return out
    finally:
        subprocess.run(["timeout", "60", "fusermount3", "-u", "-z", mnt], stderr=subprocess.DEVNULL)


def main():
    ap = script_args(__doc__, "s3-bucket")
    args = ap.parse_args()
    stop = threading.Event()
    with moto_in_workdir("prepfs-s3-bucket-") as (workdir, moto_port):
        port = free_port()
        src, set_mb = uploaded_set(args.gen, workdir, moto_port)
        endpoint = f"http://127.0.0.1:{port}"
        limiter = Limiter(100e6)
        forwarder(port, moto_port, limiter, stop)
        classes = sorted(os.listdir(src))
        # Every image ImageFolder would take (the generator writes .jpg, .JPEG and .png).
        images = (".jpg", ".jpeg", ".png")
        keys = [f"data/{c}/{f}" for c in classes for f in sorted(os.listdir(os.path.join(src, c))) if f.lower().endswith(images)]
        rows = []
        for rate in (100e6, 10e6):
            limiter.rate = rate
            tag = f"{rate / 1e6:.0f}MBs"
            row = {"setting": f"torchvision + boto3, {tag}"}
            row.update(run_epochs(BucketDataset(endpoint, keys, {c: i for i, c in enumerate(classes)}), limiter))
            print(row, flush=True)
            rows.append(row)
            plain = s3fs_epochs(workdir, "s3fs-" + tag, endpoint, limiter)
            if plain is not None:
                row = {"setting": f"torchvision over an s3fs-fuse mount, {tag}"}
                row.update(plain)
                print(row, flush=True)
                rows.append(row)
            row = {"setting": f"torchvision over prepfs augmented/, {tag}"}
            row.update(prepfs_epochs(args.prepfs, workdir, "prepfs-" + tag, endpoint, limiter))
            print(row, flush=True)
            rows.append(row)
        lines = [f"The same {set_mb:.1f} MB set ({len(keys):,} generated images, 30 classes) in moto's S3 server behind a forwarder limiting what the store "
                 "sends; a torchvision loop (DataLoader, 2 workers, batch 32, shuffled), 3 epochs: reading the bucket with boto3 and transforming "
                 "(RandomResizedCrop 224, flip, ToTensor) in the workers, the same transform by ImageFolder over a plain FUSE mount of the "
                 "bucket (s3fs-fuse, its defaults: no data cache), or reading prepfs's `augmented/` of a fresh mount of the bucket "
                 "(`cache: { memory: 256MiB }`, ToTensor only). Samples/s, and the MB the store sent in the epoch.",
                 "", "| reader | epoch 1 /s (MB) | epoch 2 /s (MB) | epoch 3 /s (MB) |", "| --- | ---: | ---: | ---: |"]
        for r in rows:
            lines.append(f"| {r['setting']} | " + " | ".join(f"{r[f'e{e}_per_s']:.0f} ({r[f'e{e}_mb']:.1f})" for e in (1, 2, 3)) + " |")
        write_report(args.out, rows, lines)
        stop.set()


if __name__ == "__main__":
    main()
