"""Listing a large object store, measured: N keys (one class directory per 1,000, 100-byte
bodies) served by a small S3-protocol STAND-IN server of this file's own, not a real store and
not moto: moto's ListObjectsV2 sorts the whole bucket for every page (100,000 keys took 84 s to
list, 1.28M would take hours), so it cannot show what a listing of ImageNet's size costs the
client. The stand-in answers ListObjectsV2 (list-type=2: prefix, continuation-token,
start-after, max-keys up to 1,000, encoding-type=url) from a sorted in-memory key list by
bisection, plus HEAD and (ranged) GET of the generated bodies, so a mount works; it runs in a
process of its own (Python's threaded http.server, HTTP/1.1 keep-alive) and times each page it
answers.

Per N: (a) `prepfs mount s3://train/data` to ready, listing from the store (and keeping the
listing in `source.index_dir`), then again from the kept listing, with the log's `listed the
object store ... secs=`; (b) the peer: boto3's list_objects_v2 paginator over the same server
and prefix (what a torchvision+boto3 job must do before its first sample); (c) the server's own
seconds per page during each listing, so what is the server and what is the client shows;
(d) `find MNT/encoded -type f | wc -l` through the mount on the kept listing, beside the
listing's time.

    PYTHONPATH=bench python3 -m prepfs_bench.s3_listing_large --prepfs target/release/prepfs \
        [--keys 100000 1280000] [--out bench/results/DATE-s3-listing-large]

`python3 -m prepfs_bench.s3_listing_large --serve N` runs the stand-in alone (it prints its
port, then serves until killed).
"""
import argparse
import base64
import bisect
import datetime
import hashlib
import http.server
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

BUCKET = "train"
MAX_KEYS = 1000
BODY_BYTES = 100


def key_of(i):
    """The stand-in's i-th key: `data/c<class>/k<i>.bin`, 1,000 a class; sorted as i is."""
    return f"data/c{i // 1000:04d}/k{i:07d}.bin"


def body_of(key):
    """A key's 100-byte body (its name repeated)."""
    raw = key.encode()
    return (raw * (BODY_BYTES // len(raw) + 1))[:BODY_BYTES]


def etag_of(body):
    return '"' + hashlib.md5(body).hexdigest() + '"'


def token_of(key):
    return base64.urlsafe_b64encode(key.encode()).decode()


def key_of_token(token):
    return base64.urlsafe_b64decode(token.encode()).decode()


class StandIn:
    """The store: a sorted list of keys (all in bucket `train`), their bodies made on demand,
    and the seconds each ListObjectsV2 page took to answer."""

    def __init__(self, keys):
        self.keys = sorted(keys)
        self.modified = datetime.datetime(2026, 11, 27, 6, 0, 0, tzinfo=datetime.timezone.utc)
        self.page_seconds = []
        self.lock = threading.Lock()

    def find(self, key):
        i = bisect.bisect_left(self.keys, key)
        return i < len(self.keys) and self.keys[i] == key

    def page(self, prefix="", token=None, start_after=None, max_keys=MAX_KEYS):
        """One ListObjectsV2 page: (keys, next token or None), keys in order, those after
        `start_after` and after the key `token` names, starting with `prefix`."""
        max_keys = max(0, min(int(max_keys), MAX_KEYS))
        start = bisect.bisect_left(self.keys, prefix)
        if start_after:
            start = max(start, bisect.bisect_right(self.keys, start_after))
        if token:
            start = max(start, bisect.bisect_right(self.keys, key_of_token(token)))
        out = []
        i = start
        while i < len(self.keys) and len(out) < max_keys and self.keys[i].startswith(prefix):
            out.append(self.keys[i])
            i += 1
        more = i < len(self.keys) and self.keys[i].startswith(prefix) and bool(out)
        return out, (token_of(out[-1]) if more else None)

    def list_xml(self, query):
        """ListObjectsV2's answer to the query (a dict of lists, as parse_qs gives it)."""
        arg = lambda name, default=None: query.get(name, [default])[0]
        prefix = arg("prefix", "")
        token = arg("continuation-token")
        start_after = arg("start-after")
        max_keys = arg("max-keys", str(MAX_KEYS))
        url = arg("encoding-type") == "url"
        keys, next_token = self.page(prefix, token, start_after, max_keys)
        name = (lambda k: urllib.parse.quote(k, safe="/")) if url else escape
        modified = self.modified.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        parts = ['<?xml version="1.0" encoding="UTF-8"?>',
                 '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
                 f"<Name>{BUCKET}</Name><Prefix>{name(prefix)}</Prefix>",
                 f"<KeyCount>{len(keys)}</KeyCount><MaxKeys>{min(int(max_keys), MAX_KEYS)}</MaxKeys>",
                 f"<IsTruncated>{'true' if next_token else 'false'}</IsTruncated>"]
        if url:
            parts.append("<EncodingType>url</EncodingType>")
        if token:
            parts.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
        if start_after:
            parts.append(f"<StartAfter>{name(start_after)}</StartAfter>")
        if next_token:
            parts.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
        for k in keys:
            parts.append(f"<Contents><Key>{name(k)}</Key><LastModified>{modified}</LastModified>"
                         f"<ETag>&quot;{etag_of(body_of(k))[1:-1]}&quot;</ETag><Size>{BODY_BYTES}</Size>"
                         "<StorageClass>STANDARD</StorageClass></Contents>")
        parts.append("</ListBucketResult>")
        return "".join(parts).encode()

    def take_stats(self):
        """The pages answered since the last call: count, total and per-page seconds."""
        with self.lock:
            times, self.page_seconds = self.page_seconds, []
        if not times:
            return {"pages": 0, "total_s": 0.0, "median_ms": 0.0, "p90_ms": 0.0}
        times.sort()
        return {"pages": len(times), "total_s": sum(times), "median_ms": statistics.median(times) * 1e3,
                "p90_ms": times[int(len(times) * 0.9)] * 1e3}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "prepfs-bench-standin"
    # Headers and body in one write, sent once the answer is whole (a page is ~230 KB):
    # unbuffered, each answer would be several writes, and Nagle's algorithm against the
    # client's delayed ACK would hold the last ~40 ms. A page's time is thus the server's work
    # to the buffered answer (its send on loopback is not in it).
    wbufsize = 1 << 20
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def send(self, status, body=b"", headers=(), head=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def error(self, status, code, head=False):
        body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code></Error>'.encode()
        self.send(status, body, [("Content-Type", "application/xml")], head)

    def do_GET(self):
        self.answer(head=False)

    def do_HEAD(self):
        self.answer(head=True)

    def answer(self, head):
        store = self.server.store
        started = time.perf_counter()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        path = urllib.parse.unquote(url.path)
        if path == "/_stats":
            return self.send(200, json.dumps(store.take_stats()).encode(), [("Content-Type", "application/json")])
        bucket, _, key = path.lstrip("/").partition("/")
        if bucket != BUCKET:
            return self.error(404, "NoSuchBucket", head)
        if not key:
            if query.get("list-type", [""])[0] != "2":
                return self.error(501, "NotImplemented", head)
            if query.get("delimiter", [""])[0]:
                return self.error(501, "NotImplemented", head)  # not needed by a recursive listing
            body = store.list_xml(query)
            self.send(200, body, [("Content-Type", "application/xml")], head)
            with store.lock:
                store.page_seconds.append(time.perf_counter() - started)
            return
        if not store.find(key):
            return self.error(404, "NoSuchKey", head)
        body = body_of(key)
        etag = etag_of(body)
        if_match = self.headers.get("If-Match")
        if if_match and if_match.strip() not in (etag, "*", etag.strip('"')):
            return self.error(412, "PreconditionFailed", head)
        headers = [("ETag", etag), ("Last-Modified", store.modified.strftime("%a, %d %b %Y %H:%M:%S GMT")),
                   ("Content-Type", "application/octet-stream"), ("Accept-Ranges", "bytes")]
        want = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", want.strip()) if want else None
        if want and not m:
            return self.error(416, "InvalidRange", head)
        if m:
            first, last = m.group(1), m.group(2)
            if first == "":
                start = max(0, len(body) - int(last or 0))
                end = len(body) - 1
            else:
                start = int(first)
                end = min(int(last), len(body) - 1) if last else len(body) - 1
            if start >= len(body) or start > end:
                return self.error(416, "InvalidRange", head)
            headers.append(("Content-Range", f"bytes {start}-{end}/{len(body)}"))
            return self.send(206, body[start:end + 1], headers, head)
        self.send(200, body, headers, head)


def start_server(store, port=0):
    """The stand-in serving `store` on 127.0.0.1 (a free port by default), in threads of this
    process: the server (its port is `server.server_address[1]`; `shutdown()` ends it)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.store = store
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve(n):
    """`--serve N`: the stand-in with N keys, its port printed, until killed."""
    server = start_server(StandIn(key_of(i) for i in range(n)))
    print(server.server_address[1], flush=True)
    threading.Event().wait()


class Server:
    """The stand-in with N keys in a process of its own (so the client measured beside it does
    not share its interpreter); ended on close."""

    def __init__(self, n):
        self.proc = subprocess.Popen([sys.executable, "-m", "prepfs_bench.s3_listing_large", "--serve", str(n)],
                                     stdout=subprocess.PIPE, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        line = self.proc.stdout.readline()
        if not line.strip():
            self.close()
            raise RuntimeError("the stand-in server did not start")
        self.port = int(line)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stats(self):
        """The server's pages since the last call (see StandIn.take_stats)."""
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", "/_stats")
        out = json.loads(c.getresponse().read())
        c.close()
        return out

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def boto3_listing(endpoint):
    """boto3's list_objects_v2 paginator over the prefix: (keys, seconds), the seconds from
    the first page's request (the import and the client's set-up, ~1 s, not counted)."""
    import boto3
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    started = time.time()
    keys = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="data/"):
        keys += len(page.get("Contents", []))
    return keys, time.time() - started


def listed_secs(log_path):
    """The last `listed the object store` line's `secs=` and `reused=` in a mount's log."""
    with open(log_path) as f:
        line = [ln for ln in f if "listed the object store" in ln][-1]
    return float(re.search(r"secs=([\d.]+)", line).group(1)), re.search(r"reused=(\w+)", line).group(1)


def find_count(mnt, limit_s):
    """`timeout LIMIT find MNT/encoded -type f | wc -l`: (files, seconds)."""
    started = time.time()
    out = subprocess.run(["bash", "-c", f"timeout {limit_s} find {mnt}/encoded -type f | wc -l"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip()), time.time() - started


def measure(prepfs, n, workdir, peer_max):
    """One N: boto3's listing (up to `peer_max` keys: 10M would take it over an hour), then
    two mounts (listing the store, then from the kept listing, with `find`)."""
    from .mount import Mount
    row = {"keys": n}
    server = Server(n)
    try:
        server.stats()
        if n <= peer_max:
            keys, secs = boto3_listing(server.endpoint)
            assert keys == n, (keys, n)
            row["boto3_s"] = secs
            row["boto3_server"] = server.stats()
            print({"keys": n, "boto3_s": round(secs, 1), "server": row["boto3_server"]}, flush=True)
        kept = os.path.join(workdir, f"listing-{n}")
        yaml = (f"seed: 1\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ url: s3://train/data, "
                f"endpoint: \"{server.endpoint}\", region: us-east-1, index_dir: {kept} }}\n")
        mounts = []
        for m in ("listed", "kept"):
            t = time.time()
            mnt = Mount(prepfs, "s3://train/data", workdir, f"{m}-{n}", yaml, read_only=True, timeout=3600)
            took = time.time() - t
            try:
                listing_s, reused = listed_secs(mnt.log_path)
                rec = {"mount": m, "mount_s": took, "listing_s": listing_s, "reused": reused == "true",
                       "server": server.stats(),
                       "kept_bytes": sum(os.path.getsize(os.path.join(kept, f)) for f in os.listdir(kept)),
                       "rss_mounted_mb": mnt.rss_mb()}
                if m == "kept":
                    rec["find_files"], rec["find_s"] = find_count(mnt.mnt, 3000)
                    rec["rss_mb"] = mnt.rss_mb()
            finally:
                mnt.close()
            mounts.append(rec)
            print({"keys": n, **{k: v for k, v in rec.items() if k != "server"}, "server": rec["server"]}, flush=True)
        row["mounts"] = mounts
    finally:
        server.close()
    return row


def report_lines(rows):
    """The report's Markdown: the lead and one table, a row per N."""
    lines = ["A stand-in S3 server (this script's own, Python http.server, threaded; answers "
             "ListObjectsV2 by bisection of a sorted in-memory key list: moto sorts the whole bucket "
             "per page and cannot list 1.28M keys in useful time) on loopback, N keys of 100 bytes, "
             "1,000 a class directory. prepfs mounted `s3://train/data` twice with the listing kept "
             "in `source.index_dir` (first listing the store, then the kept listing); boto3's "
             "list_objects_v2 paginator over the same prefix; `server s` is the server's own time "
             "answering the listing's pages (the rest of a listing's time is the client's and the "
             "loopback's); `find` is `find MNT/encoded -type f | wc -l` on the kept-listing mount. "
             "A shared 2-core machine, everything under `nice -n 19`.", "",
             "| keys | prepfs listing s (mount s) | server s (pages, median ms) | boto3 paginator s | server s (boto3) "
             "| kept listing s (mount s) | kept file MB | find files | find s |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        listed, kept = r["mounts"]
        sv = listed["server"]
        peer = (f"{r['boto3_s']:.1f} | {r['boto3_server']['total_s']:.1f}" if "boto3_s" in r
                else "not run (over --peer-max) | -")
        lines.append(
            f"| {r['keys']:,} | {listed['listing_s']:.1f} ({listed['mount_s']:.1f}) "
            f"| {sv['total_s']:.1f} ({sv['pages']:,}, {sv['median_ms']:.1f}) | {peer} "
            f"| {kept['listing_s']:.2f} ({kept['mount_s']:.1f}) "
            f"| {kept['kept_bytes'] / 1e6:.1f} | {kept['find_files']:,} | {kept['find_s']:.1f} |")
    return lines


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        return serve(int(sys.argv[2]))
    from .runs import script_args, write_report
    ap = script_args(__doc__, "s3-listing-large", gen=False)
    ap.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_280_000])
    ap.add_argument("--peer-max", type=int, default=1_280_000,
                    help="list with boto3 only up to this many keys (it takes ~7.5 min a million)")
    args = ap.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    workdir = tempfile.mkdtemp(prefix="prepfs-s3-listing-large-")
    rows = []
    try:
        for n in args.keys:
            rows.append(measure(args.prepfs, n, workdir, args.peer_max))
            write_report(args.out, rows, report_lines(rows))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
