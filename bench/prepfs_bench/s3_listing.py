"""The object store's listing, kept between mounts or not: N keys (one class directory per
1,000, small bodies) in moto's S3 server on loopback, mounted three times with the listing kept
in `source.index_dir`: the first mount lists the store (and keeps the listing), the next two
use the kept listing. Per mount: seconds from `prepfs mount` to `.prepfs/stats.json`, whether
the kept listing was used, and the kept file's size (docs/sources.md, "Object stores (S3)").

    PYTHONPATH=bench python3 -m prepfs_bench.s3_listing --prepfs target/release/prepfs \
        --keys 100000 [--out bench/results/DATE-s3-listing]
"""
import os
import re
import time

from .mount import Mount
from .runs import script_args, write_report
from .s3_epochs import moto_in_workdir, put_all


def main():
    ap = script_args(__doc__, "s3-listing", gen=False)
    ap.add_argument("--keys", type=int, default=100_000)
    args = ap.parse_args()
    with moto_in_workdir("prepfs-s3-listing-") as (workdir, port):
        started = time.time()
        put_all(port, [(f"data/c{i // 1000:04d}/k{i:07d}.bin", lambda: b"x" * 100) for i in range(args.keys)])
        print(f"uploaded {args.keys} keys in {time.time() - started:.0f} s", flush=True)
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
        kept = os.path.join(workdir, "listing")
        yaml = (f"seed: 1\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ url: s3://train/data, "
                f"endpoint: \"http://127.0.0.1:{port}\", region: us-east-1, index_dir: {kept} }}\n")
        rows = []
        for n in range(1, 4):
            t = time.time()
            mnt = Mount(args.prepfs, "s3://train/data", workdir, f"mount{n}", yaml, read_only=True, timeout=900)
            took = time.time() - t
            mnt.close()
            with open(mnt.log_path) as f:
                ready = [line for line in f if "object store ready" in line][-1]
            reused = re.search(r"reused=(\w+)", ready).group(1)
            files = re.search(r"files=(\d+)", ready).group(1)
            kept_bytes = sum(os.path.getsize(os.path.join(kept, f)) for f in os.listdir(kept))
            rows.append({"mount": n, "mount_s": took, "reused": reused, "files": int(files), "kept_bytes": kept_bytes})
            print(rows[-1], flush=True)
        lines = [f"{args.keys:,} keys (100-byte objects, 1,000 a class directory) in moto's S3 server on loopback; "
                 "three mounts in a row with the listing kept in `source.index_dir`.", "",
                 "| mount | listing | files | mount s | kept file MB |", "| ---: | --- | ---: | ---: | ---: |"]
        for r in rows:
            how = "kept, reused" if r["reused"] == "true" else "listed from the store"
            lines.append(f"| {r['mount']} | {how} | {r['files']:,} | {r['mount_s']:.1f} | {r['kept_bytes'] / 1e6:.1f} |")
        write_report(args.out, rows, lines)


if __name__ == "__main__":
    main()
