#!/usr/bin/env python3
"""Issue 52's measurement: `prepfs worker` lending another machine's cores to a mount, this
machine standing in for two (core 0: the training machine, its mount and its readers; core 1: the
network side, Redis and the workers).

Per data set (JPEGs cut from real photographs, `prepfs_bench.real_photos`, and the generator's
500x375 ones; 20 classes x 30 each, kept under target/bench-data/) and per case, a cold first
epoch of `augmented/`: Redis flushed (FLUSHALL) and the set mounted afresh
(`taskset -c 0 prepfs mount SRC MNT --config CFG`, `threads: 2`, `cache: {memory: 512MiB,
remote: {url, size: 2GiB, secret_file}}`, the secret 0600), the case's workers started
(`taskset -c 1 prepfs worker --config CFG --name wN`) and ready (their "serving" line on stderr),
then two reader processes pinned to core 0 (`taskset -c 0`), each reading whole files of half the
listing, shuffled with a fixed seed, timed from the first open to the last close: files/s.

Cases: (a) alone, `placement: local`; (b) alone, `placement: auto`, no worker (costs nothing:
equal to a within noise); (c) one worker; (d) two workers, both on core 1; (e) two jobs at once,
`jobs/j1/augmented/` and `jobs/j2/augmented/`, one reader each, alone (`placement: local`) against
one worker; (f) the kill test: one worker SIGKILLed when half the files are read and a new one
started at once: no read error, every output of the epoch distinct (each hashed), and from
stats.json's counters no output served twice. The timed cases run `--repeats` times, the cases
alternated within each round; the report has each case's median and spread, the ratios c/a, d/a
and e(worker)/e(alone) against the target 1.6x, each case's `remote_work` (done, late, dropped,
lost, queue_ms, bytes received per remote sample against the set's decoded bytes per sample, what
placement chose: asking, why), and the model's prediction for one worker (`prepfs plan`'s
placement flags where the binary has them, else the formula in `predict`) against the measured
rate, from the per-sample costs measured here.

Usage: PYTHONPATH=bench python3 -m prepfs_bench.workers --prepfs target/release/prepfs --gen target/release/examples/make_dataset
                                                        [--quick] [--sets real,gen] [--repeats 3] [--cases a,b,c,d,e,f]
                                                        [--out bench/results/DATE-workers]
`--quick`: one round, the generator's set only. Needs redis-server, taskset and fusermount3;
everything runs under timeouts, and every mount, worker and Redis it started is ended (and the
mounts released: `fusermount3 -u`, then `-u -z`) on every way out.

`python3 -m prepfs_bench.workers read LIST [--hash] [--progress]` is the reader process itself.
"""
import argparse
import datetime
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from . import BENCH_DIR, ROOT, module_command, show_path
from .mount import is_mounted, proc_cpu_seconds
from . import servers
from .servers import LIVE as _LIVE, RedisServer, end_all as _end_all, end_process, files_under, free_port
from .runs import script_command, write_report  # the run's JSON and Markdown, its section in BENCHMARKS.md

MOUNT_CORE, NETWORK_CORE = 0, 1
TARGET = 1.6  # issue 52: one worker's core makes the first epoch this much faster
CLASSES, PER_CLASS, WIDTH, HEIGHT = 20, 30, 500, 375
SHUFFLE_SEED = 52
TIMED_CASES = ("a", "b", "c", "d", "e_alone", "e_worker")
CASES = {
    # name: (placement, workers, jobs); jobs 0: the top-level augmented/ read by two readers.
    "a": ("local", 0, 0),
    "b": ("auto", 0, 0),
    "c": ("auto", 1, 0),
    "d": ("auto", 2, 0),
    "e_alone": ("local", 0, 2),
    "e_worker": ("auto", 1, 2),
    "f": ("auto", 1, 0),
}
LABELS = {
    "a": "a: alone, placement local",
    "b": "b: alone, placement auto, no worker",
    "c": "c: one worker",
    "d": "d: two workers (one core)",
    "e_alone": "e: two jobs, alone (local)",
    "e_worker": "e: two jobs, one worker",
    "f": "f: kill test (one worker, SIGKILL at half)",
}
REMOTE_KEYS = ("placement", "asking", "why", "workers_alive", "queued", "done", "late", "dropped", "lost",
               "outstanding", "bytes_received", "queue_ms", "make_ms")
READ_TIMEOUT = 300.0
READY_TIMEOUT = 60.0


# ---------------------------------------------------------------- the pure parts (self-tested)

def percentile(values, q):
    """The q-th percentile (0-100) of `values`, linearly interpolated between the closest ranks
    (numpy's default); None for no values."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(values):
    """A case's runs: median, min, max, the spread ((max - min) / median, percent) and n."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"median": None, "min": None, "max": None, "spread_pct": None, "n": 0}
    med = percentile(xs, 50)
    return {"median": med, "min": min(xs), "max": max(xs),
            "spread_pct": (max(xs) - min(xs)) / med * 100 if med else None, "n": len(xs)}


def ratio(num, den):
    """num's median over den's (summaries), with the range the runs allow (min/max to max/min)."""
    if not num or not den or not num.get("median") or not den.get("median"):
        return None
    return {"median": num["median"] / den["median"], "low": num["min"] / den["max"], "high": num["max"] / den["min"]}


def predict(t_local, t_worker, recv, workers, worker_cores=1, demand=None, link=None, output_bytes=None):
    """The rate (samples/s) one mount reaches with `workers` workers on `worker_cores` cores, each
    sample costing the mount's core `t_local` s when made there and `recv` s when received (the
    result's check, its insertion and its serving), and the worker side `t_worker` s per sample on
    one core: the remote rate r = min(workers' capacity, the link's samples/s, what the readers
    could take if every sample came from afar), then r plus what the mount's core makes locally in
    the time the received ones leave it: r + (1 - r * recv) / t_local, at most `demand`.
    Returns {"rate", "remote_rate", "bound"} (bound: what limits r)."""
    caps = {"workers": min(workers, worker_cores) / t_worker if workers and t_worker else 0.0}
    if link and output_bytes:
        caps["link"] = link / output_bytes
    if recv:
        caps["receiving"] = 1.0 / recv
    if demand:
        caps["demand"] = demand
    bound = min(caps, key=caps.get)
    r = caps[bound]
    rate = r + max(0.0, 1.0 - r * (recv or 0.0)) / t_local
    if demand:
        rate = min(rate, demand)
    return {"rate": rate, "remote_rate": r, "bound": bound}


def fit_recv(core0_cpu_s, files, remote_done, t_local):
    """The mount's core seconds per received sample, from a run with workers: its core-0 CPU
    (mount and readers) less what the samples made locally cost at `t_local`, over the received
    ones. None when too few came from afar (under 5% of the files) to tell."""
    if not remote_done or not files or remote_done < 0.05 * files:
        return None
    local = max(files - remote_done, 0)
    return max(core0_cpu_s - local * t_local, 0.0) / remote_done


def prediction_error(predicted, measured):
    """(predicted - measured) / measured, in percent."""
    if not predicted or not measured:
        return None
    return (predicted - measured) / measured * 100


def distinct_outputs(hashes):
    """(distinct, duplicates): how many different outputs an epoch's hashes hold, and the hashes
    seen more than once with their counts."""
    seen = {}
    for h in hashes:
        seen[h] = seen.get(h, 0) + 1
    return len(seen), {h: n for h, n in seen.items() if n > 1}


def item_bounds(rw):
    """What `remote_work`'s counters must satisfy if each item ended once (crate::remote_work):
    an item asked (`queued`) is outstanding until a result for it arrives (`done`; `late` when
    its readers had been made the sample here first; `dropped` too when no stock took it) or it is
    given up (`lost`); a result for an item not outstanding (made twice after a takeover, or lost
    before) is only `dropped`, never kept. So, once nothing is in flight: done + lost +
    outstanding == queued, and late <= done. What fails (empty: none)."""
    g = lambda k: rw.get(k) or 0
    ended = g("done") + g("lost") + g("outstanding")
    bad = []
    if ended != g("queued"):
        bad.append(f"done + lost + outstanding = {ended} != queued {g('queued')}"
                   + (": an item ended twice" if ended > g("queued") else ""))
    if g("late") > g("done"):
        bad.append(f"late {g('late')} > done {g('done')}")
    return bad


def served_once(stats, files):
    """The kill test's counter checks on the mount's stats.json at the epoch's end: what failed
    (empty: none). Each file of the epoch was opened once in augmented/ (opens == files), each open
    took one output (hits + misses == opens), and each remote item ended once (`item_bounds`)."""
    bad = []
    view = (stats.get("views") or {}).get("augmented") or {}
    if view.get("opens") != files:
        bad.append(f"augmented/ opened {view.get('opens')} times for {files} files")
    if (view.get("hits") or 0) + (view.get("misses") or 0) != view.get("opens"):
        bad.append(f"hits {view.get('hits')} + misses {view.get('misses')} != opens {view.get('opens')}")
    rw = stats.get("remote_work") or {}
    if rw:
        bad += item_bounds(rw)
    else:
        bad.append("stats.json has no remote_work")
    return bad


def remote_figures(stats, decoded_per_sample=None):
    """A case's `remote_work` at its end (stats.json), with the network bytes per received sample
    beside the set's decoded bytes per sample (what sending pixels would cost)."""
    rw = (stats or {}).get("remote_work") or {}
    out = {k: rw.get(k) for k in REMOTE_KEYS if k in rw}
    done = rw.get("done") or 0
    out["bytes_per_remote_sample"] = rw.get("bytes_received", 0) / done if done else None
    out["decoded_bytes_per_sample"] = decoded_per_sample
    if out["bytes_per_remote_sample"] and decoded_per_sample:
        out["pixels_over_outputs"] = decoded_per_sample / out["bytes_per_remote_sample"]
    return out


def parse_prometheus(text):
    """{"name{labels}": value} of a Prometheus text exposition (comments skipped)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            pass
    return out


def fmt(x, spec=",.0f", none="-"):
    return none if x is None else format(x, spec)


def fmt_summary(s, spec=",.0f"):
    if not s or s.get("median") is None:
        return "-"
    if s["n"] == 1:
        return fmt(s["median"], spec)
    return f"{fmt(s['median'], spec)} ({fmt(s['min'], spec)} - {fmt(s['max'], spec)}, {s['spread_pct']:.0f}%)"


def fmt_ratio(r):
    if not r:
        return "-"
    return f"{r['median']:.2f}x ({r['low']:.2f} - {r['high']:.2f})"


def busy(run, *who):
    """CPU seconds of `who` (keys of the run's cpu_s) per second of its epoch."""
    cpu, sec = run.get("cpu_s") or {}, run.get("seconds")
    return sum(cpu.get(w) or 0 for w in who) / sec if sec else None


def set_summary(runs, decoded_per_sample=None):
    """One data set's figures from its runs (each {"case", "rate", "stats", ...}): per timed case
    the rate's summary and the median remote_work figures, and the ratios c/a, d/a,
    e(worker)/e(alone) against TARGET, and b/a (placement auto with no worker: costs nothing)."""
    cases = {}
    for case in TIMED_CASES:
        rs = [r for r in runs if r["case"] == case and r.get("rate")]
        if not rs:
            continue
        rem = [r.get("remote") or {} for r in rs]
        med = lambda key: percentile([x.get(key) for x in rem], 50)
        q = lambda part, key: percentile([(x.get(part) or {}).get(key) for x in rem], 50)
        cases[case] = {
            "rate": summarize([r["rate"] for r in rs]),
            "done": med("done"), "late": med("late"), "dropped": med("dropped"), "lost": med("lost"),
            "queue_ms_p50": q("queue_ms", "p50"), "queue_ms_p99": q("queue_ms", "p99"),
            "bytes_per_remote_sample": med("bytes_per_remote_sample"),
            "decoded_bytes_per_sample": decoded_per_sample,
            "placement": sorted({f"{x.get('placement')}: {'asking' if x.get('asking') else 'not asking'}"
                                 f"{' (' + x['why'] + ')' if x.get('why') else ''}" for x in rem if x.get("placement")}),
            "asked_during": sorted({w for r in rs for w in r.get("placement_seen") or []}),
            # How busy each side's core was over the epoch: its processes' CPU seconds per second.
            "core0_busy": percentile([busy(r, "mount", "readers") for r in rs], 50),
            "core1_busy": percentile([busy(r, "workers", "redis") for r in rs], 50),
        }
    rate = lambda c: (cases.get(c) or {}).get("rate")
    ratios = {}
    for name, num, den in (("c/a", "c", "a"), ("d/a", "d", "a"), ("e(worker)/e(alone)", "e_worker", "e_alone"),
                           ("b/a", "b", "a")):
        r = ratio(rate(num), rate(den))
        if r:
            r["target"] = None if name == "b/a" else TARGET
            r["met"] = None if name == "b/a" else r["median"] >= TARGET
            if name == "b/a":  # costs nothing: 1 inside what the runs allow
                r["within_noise"] = r["low"] <= 1.0 <= r["high"]
            ratios[name] = r
    return {"cases": cases, "ratios": ratios}


def summary_lines(report):
    """The run's Markdown: the ratios against the target (the run's summary in BENCHMARKS.md),
    then per set the cases, the remote work, the prediction, the kill test."""
    lines = [f"`prepfs worker` (issue 52), this machine as two: core 0 the mount ({report['mount_threads']} threads) and two "
             "reader processes, core 1 Redis and the workers; a cold first epoch of `augmented/` per run (Redis flushed, "
             f"remounted), files/s from first open to last close, median of {report['repeats']} "
             f"run{'s' if report['repeats'] != 1 else ''} (min - max, spread), cases alternated; target {TARGET}x. "
             f"Load average {fmt((report.get('load_before') or [None])[0], '.2f')} before, "
             f"{fmt((report.get('load_after') or [None])[0], '.2f')} after (2 cores others use too)"
             + (f"; built from {report['commit']}." if report.get("commit") else "."), "",
             "| set | a alone files/s | c one worker files/s | c/a | d/a (two workers, one core) "
             "| e worker/alone (two jobs) | b/a (auto, no worker) | predicted c, error |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in report["sets"].items():
        r = s["summary"]["ratios"]
        def cell(k):
            x = r.get(k)
            if not x:
                return "-"
            if "within_noise" in x:
                return fmt_ratio(x) + (" within noise" if x["within_noise"] else " **outside noise**")
            return fmt_ratio(x) + ("" if x["met"] is None else (" met" if x["met"] else " **missed**"))
        p = s.get("prediction") or {}
        pc = (f"{fmt(p.get('predicted_c'))} files/s, {p['error_pct']:+.0f}%" if p.get("error_pct") is not None else "-")
        rate = lambda c: fmt(((s["summary"]["cases"].get(c) or {}).get("rate") or {}).get("median"))
        lines.append(f"| {name} | {rate('a')} | {rate('c')} | {cell('c/a')} | {cell('d/a')} | {cell('e(worker)/e(alone)')} "
                     f"| {cell('b/a')} | {pc} |")
    for name, s in report["sets"].items():
        info = s["info"]
        lines += ["", f"## {name}: {info['files']} files, {info['source_mb']:.1f} MB, "
                  f"{fmt(info['decoded_bytes_per_sample'])} decoded bytes per sample (width x height x 3), "
                  f"outputs {fmt(info.get('output_bytes'))} bytes", "",
                  "| case | files/s median (min - max, spread) | core 0 / core 1 busy | done | late | dropped | lost "
                  "| queue ms p50 / p99 | network bytes per remote sample | pixels / outputs | placement at the end |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for case, c in s["summary"]["cases"].items():
            bps = c.get("bytes_per_remote_sample")
            po = (info["decoded_bytes_per_sample"] / bps) if bps else None
            lines.append(f"| {LABELS[case]} | {fmt_summary(c['rate'])} | {fmt(c.get('core0_busy'), '.2f')} / "
                         f"{fmt(c.get('core1_busy'), '.2f')} | {fmt(c['done'])} | {fmt(c['late'])} | "
                         f"{fmt(c['dropped'])} | {fmt(c['lost'])} | {fmt(c['queue_ms_p50'], '.1f')} / "
                         f"{fmt(c['queue_ms_p99'], '.1f')} | {fmt(bps)} | {fmt(po, '.1f', '-')}"
                         f"{'x' if po else ''} | {'; '.join(c['placement']) or '-'} |")
        for r in s.get("runs") or []:
            if r.get("worker_exit_bad"):
                lines.append(f"\n**{LABELS[r['case']]}, round {r['round'] + 1}:** workers ended by SIGTERM exited "
                             + ", ".join(f"{n}: {st}" for n, st in r["worker_exit_bad"].items()) + " (not 0)")
        for r in s.get("failed_runs") or []:
            lines.append(f"\n**{LABELS[r['case']]}, round {r['round'] + 1}, failed:** {r['error'].splitlines()[0]}")
        p = s.get("prediction")
        if p:
            lines += ["", f"Model ({p['source']}): t_local {p['t_local_ms']:.2f} ms (core 0 per sample made there, "
                      f"case a), t_worker {p['t_worker_ms']:.2f} ms (core 1 per remote sample: worker + Redis, case c), "
                      f"recv {fmt(p.get('recv_ms'), '.2f')} ms (core 0 per received sample, fitted on case "
                      f"{p.get('recv_from') or '-'}), link {fmt((p.get('link') or 0) / 1e6, ',.0f')} MB/s, "
                      f"output {fmt(p.get('output_bytes'))} bytes. One worker: predicted {fmt(p.get('predicted_c'))} "
                      f"files/s ({p.get('bound_c') or '-'}-bound), measured {fmt(p.get('measured_c'))}: "
                      f"error {fmt(p.get('error_pct'), '+.1f')}%. Alone: predicted {fmt(p.get('predicted_a'))}, "
                      f"measured {fmt(p.get('measured_a'))} ({fmt(p.get('error_a_pct'), '+.1f')}%)."
                      + (f" (`{p['command_c']}`, PARAMS the set's sizes and t_da = 1 / t_local on one core.)"
                         if p.get("command_c") else "")]
        k = s.get("kill")
        if k and k.get("files") is None:
            lines += ["", "Kill test **failed**: " + "; ".join(x.splitlines()[0] for x in k["problems"]) + "."]
        elif k:
            ok = "passed" if k["passed"] else "**failed**"
            lines += ["", f"Kill test {ok}: {k['files_read']} files read of {k['files']}, {k['read_errors']} read "
                      f"errors, {k['distinct']} distinct outputs; worker killed after {k.get('killed_at_files')} "
                      f"files, its successor serving in {fmt(k.get('successor_ready_s'), '.2f')} s (took over "
                      f"{fmt(k.get('successor_takeovers'))} items, made {fmt(k.get('successor_done'))}); settled, "
                      f"done {k['remote'].get('done')}, late {k['remote'].get('late')}, dropped "
                      f"{k['remote'].get('dropped')}, lost {k['remote'].get('lost')}, outstanding "
                      f"{k['remote'].get('outstanding')}; " + ("; ".join(k["problems"]) or "counters consistent") + "."]
    if report.get("left_mounted"):
        lines += ["", "**Left mounted after the run:** " + ", ".join(report["left_mounted"])]
    return lines


# ---------------------------------------------------------------- the reader process

def reader_main(argv):
    """One reader: the paths in LIST (one per line), each opened and read whole, after a line on
    stdin ("go"); prints one JSON line: first_open and last_close (CLOCK_MONOTONIC, the same clock
    in every process), files, bytes, errors, its CPU seconds, and with --hash each output's hash."""
    ap = argparse.ArgumentParser(prog="prepfs_bench.workers read")
    ap.add_argument("list")
    ap.add_argument("--hash", action="store_true")
    ap.add_argument("--progress", action="store_true", help="a line '@@N' after each file")
    a = ap.parse_args(argv)
    with open(a.list) as f:
        paths = [ln.rstrip("\n") for ln in f if ln.strip()]
    sys.stdout.write("@@ready\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() != "go":
        return 1
    hashes, errors, total = [], [], 0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru.ru_utime + ru.ru_stime
    first = time.monotonic()
    for n, p in enumerate(paths, 1):
        try:
            with open(p, "rb") as fh:
                data = fh.read()
            if not data:
                errors.append(f"{p}: empty")
            total += len(data)
            if a.hash:
                hashes.append(hashlib.blake2b(data, digest_size=16).hexdigest())
        except OSError as e:
            errors.append(f"{p}: {e}")
        if a.progress:
            sys.stdout.write(f"@@{n}\n")
            sys.stdout.flush()
    last = time.monotonic()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"first_open": first, "last_close": last, "files": len(paths), "bytes": total,
                      "errors": errors[:20], "error_count": len(errors),
                      "cpu_s": ru.ru_utime + ru.ru_stime - cpu0, "hashes": hashes}), flush=True)
    return 0


# ---------------------------------------------------------------- the processes it runs

def log_tail(path, n=20):
    """The last `n` lines of the log at `path` (empty where it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Redis(RedisServer):
    """The network side's redis-server: pinned to its core, ended on every way out."""

    def __init__(self, work):
        super().__init__(work, cores=NETWORK_CORE)
        _LIVE.append(self)


class Worker:
    """`taskset -c 1 prepfs worker --config CFG --name NAME --metrics-addr 127.0.0.1:PORT`, its
    stderr copied to its log; `ready` once it printed its "serving" line."""

    def __init__(self, binary, cfg, name, log_dir):
        self.name = name
        self.port = free_port()
        self.log_path = os.path.join(log_dir, f"worker-{name}.log")
        self.cmd = ["taskset", "-c", str(NETWORK_CORE), binary, "worker", "--config", cfg, "--name", name,
                    "--metrics-addr", f"127.0.0.1:{self.port}"]
        self.started = time.monotonic()
        self.ready_after = None
        self.ready = threading.Event()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
        _LIVE.append(self)
        self._copier = threading.Thread(target=self._copy, daemon=True)
        self._copier.start()
        self.cpu_at_ready = None
        self.exit_status = None
        self.killed = False

    def _copy(self):
        with open(self.log_path, "ab") as log:
            for line in self.proc.stderr:
                log.write(line)
                log.flush()
                if not self.ready.is_set() and b"serving" in line:
                    self.ready_after = time.monotonic() - self.started
                    self.cpu_at_ready = self.cpu_seconds()
                    self.ready.set()

    def wait_ready(self, timeout=READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.05):
            if self.proc.poll() is not None:
                self._copier.join(5)
                raise RuntimeError(f"worker {self.name} exited with status {self.proc.returncode} before serving:\n"
                                   + self.log_tail())
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {self.name} not serving within {timeout:.0f} s:\n" + self.log_tail())

    def cpu_seconds(self):
        return proc_cpu_seconds(self.proc.pid)

    def metrics(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                return parse_prometheus(r.read().decode())
        except OSError:
            return None

    def log_tail(self, n=20):
        return log_tail(self.log_path, n)

    def kill(self):
        self.killed = True
        self.proc.kill()
        self.exit_status = self.proc.wait(10)

    def close(self, timeout=30):
        """SIGTERM (it drains and exits 0), then SIGKILL after `timeout`."""
        if self.exit_status is None:
            self.exit_status = end_process(self.proc, timeout)
        self._copier.join(5)
        return self.exit_status

    def __repr__(self):
        return f"Worker({self.name})"


class WorkerMount:
    """`taskset -c 0 prepfs mount SRC MNT --config CFG --read-only` in the foreground, in the
    harness's background; ready when MNT/.prepfs/stats.json exists. close(): `fusermount3 -u`,
    the daemon waited for (SIGKILL if it stays), then `fusermount3 -u -z` if still mounted."""

    def __init__(self, binary, source, mnt, cfg, log_path, timeout=READY_TIMEOUT):
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], stderr=subprocess.DEVNULL, timeout=30)
        os.makedirs(mnt, exist_ok=True)
        self.mnt, self.log_path = mnt, log_path
        self.cmd = ["taskset", "-c", str(MOUNT_CORE), binary, "mount", source, mnt, "--config", cfg, "--read-only"]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
        _LIVE.append(self)
        deadline = time.monotonic() + timeout
        while not os.path.exists(os.path.join(mnt, ".prepfs", "stats.json")):
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.close()
                raise RuntimeError(f"{' '.join(self.cmd)} exited with status {self.proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.close()
                raise RuntimeError(f"{mnt} not serving within {timeout:.0f} s:\n{tail}")
            time.sleep(0.01)

    def stats(self):
        with open(os.path.join(self.mnt, ".prepfs", "stats.json")) as f:
            return json.load(f)

    def cpu_seconds(self):
        return proc_cpu_seconds(self.proc.pid)

    def log_tail(self, n=20):
        return log_tail(self.log_path, n)

    def close(self, timeout=30):
        if self in _LIVE:
            _LIVE.remove(self)
        try:
            subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL, timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:  # unmounted, the foreground daemon exits by itself
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            end_process(self.proc, 10)
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], stderr=subprocess.DEVNULL, timeout=30)

    def __repr__(self):
        return f"WorkerMount({self.mnt})"


class Reader:
    """A reader process pinned to core 0 (`taskset -c 0 python3 -m prepfs_bench.workers read`)
    over the paths written to LIST, waiting for go()."""

    def __init__(self, paths, list_path, hash_outputs=False, progress=False):
        with open(list_path, "w") as f:
            f.write("".join(p + "\n" for p in paths))
        cmd = (["taskset", "-c", str(MOUNT_CORE)] + module_command(sys.executable, "workers")
               + ["read", list_path] + (["--hash"] if hash_outputs else []) + (["--progress"] if progress else []))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        _LIVE.append(self)
        self.done = 0
        self.result = None
        if self.proc.stdout.readline().strip() != "@@ready":
            raise RuntimeError("a reader did not start")

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self):
        for line in self.proc.stdout:
            if line.startswith("@@"):
                self.done = int(line[2:])
            elif line.startswith("{"):
                self.result = json.loads(line)

    def wait(self, deadline):
        try:
            self.proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"a reader took over {READ_TIMEOUT:.0f} s")
        self._thread.join(10)
        if self.result is None:
            raise RuntimeError(f"a reader exited with status {self.proc.returncode} and no result")
        return self.result

    def close(self):
        end_process(self.proc, 5, signal.SIGKILL)

    def __repr__(self):
        return f"Reader({self.proc.pid})"


# ---------------------------------------------------------------- one case, one set

def config_yaml(source, redis, placement, threads=2):
    return (f"source: {source}\nseed: 1\nthreads: {threads}\nplacement: {placement}\naugment:\n"
            "  - random_resized_crop: { size: 224, scale: [0.08, 1.0], ratio: [0.75, 1.3333333] }\n"
            "  - random_horizontal_flip: { p: 0.5 }\noutput: { format: ppm }\n"
            f"cache:\n  memory: 512MiB\n  remote: {{ url: \"{redis.url()}\", size: 2GiB, secret_file: {redis.secret} }}\n")


def halves(paths, n=2, seed=SHUFFLE_SEED):
    """The listing shuffled with a fixed seed, cut into n interleaved shares."""
    paths = list(paths)
    random.Random(seed).shuffle(paths)
    return [paths[i::n] for i in range(n)]


def run_case(ctx, data, case, round_no):
    """One cold first epoch of `case` over `data`: its record (rate, CPU by side, remote_work, the
    workers' metrics and exit statuses)."""
    placement, n_workers, jobs = CASES[case]
    redis, work = ctx["redis"], ctx["work"]
    redis.flushall()
    cfg = os.path.join(work, f"{case}.yaml")
    with open(cfg, "w") as f:
        f.write(config_yaml(data, redis, placement, ctx["threads"]))
    tag = f"{os.path.basename(data)}-{case}-{round_no}"
    mount = WorkerMount(ctx["binary"], data, os.path.join(work, "mnt"), cfg, os.path.join(ctx["logs"], tag + ".log"))
    workers, readers = [], []
    try:
        for i in range(n_workers):
            workers.append(Worker(ctx["binary"], cfg, f"w{i + 1}", ctx["logs"]))
        for w in workers:
            w.wait_ready()
        # Ready means the mount has heard them too (it reads the workers' beats once a second):
        # else the first second of a two-second epoch would be the mount's alone.
        heard = time.monotonic()
        while n_workers and ((mount.stats().get("remote_work") or {}).get("workers_alive") or 0) < n_workers:
            if time.monotonic() - heard > READY_TIMEOUT:
                raise RuntimeError(f"the mount did not hear of its {n_workers} workers within {READY_TIMEOUT:.0f} s")
            time.sleep(0.05)
        heard = time.monotonic() - heard
        if jobs:
            shares = [halves(files_under(os.path.join(mount.mnt, "jobs", f"j{j + 1}", "augmented")), 1)[0]
                      for j in range(jobs)]
        else:
            shares = halves(files_under(os.path.join(mount.mnt, "augmented")))
        kill = case == "f"
        readers = [Reader(s, os.path.join(work, f"list-{k}"), hash_outputs=kill, progress=kill)
                   for k, s in enumerate(shares)]
        files = sum(len(s) for s in shares)
        load = os.getloadavg()[0]
        cpu0 = {"mount": mount.cpu_seconds(), "redis": redis.cpu_seconds(),
                "workers": sum(w.cpu_seconds() for w in workers)}
        seen, killed_at, successor = set(), None, None
        for r in readers:
            r.go()
        deadline = time.monotonic() + READ_TIMEOUT
        next_poll = 0.0
        while any(r.proc.poll() is None for r in readers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"case {case}: the readers took over {READ_TIMEOUT:.0f} s")
            if kill and killed_at is None and sum(r.done for r in readers) >= files // 2:
                killed_at = sum(r.done for r in readers)
                victim = workers[0]
                victim.kill()
                successor = Worker(ctx["binary"], cfg, "w2", ctx["logs"])
                workers.append(successor)
            if time.monotonic() >= next_poll:  # what placement says while the readers read
                next_poll = time.monotonic() + 0.5
                try:
                    rw = mount.stats().get("remote_work") or {}
                    if rw:
                        seen.add(f"{'asking' if rw.get('asking') else 'not asking'}"
                                 f"{' (' + rw['why'] + ')' if rw.get('why') else ''}")
                except (OSError, ValueError):
                    pass
            time.sleep(0.01)
        results = [r.wait(deadline) for r in readers]
        cpu1 = {"mount": mount.cpu_seconds(), "redis": redis.cpu_seconds(),
                "workers": sum(w.cpu_seconds() for w in workers if w.proc.poll() is None)}
        started = min(x["first_open"] for x in results)
        ended = max(x["last_close"] for x in results)
        stats = mount.stats()
        rec = {"case": case, "round": round_no, "placement": placement, "workers": n_workers, "jobs": jobs,
               "load_before": load,
               "files": files, "files_read": sum(x["files"] for x in results),
               "read_errors": sum(x["error_count"] for x in results),
               "errors": [e for x in results for e in x["errors"]][:20],
               "bytes": sum(x["bytes"] for x in results), "seconds": ended - started,
               "rate": files / (ended - started) if ended > started else None,
               "cpu_s": {"mount": cpu1["mount"] - cpu0["mount"], "readers": sum(x["cpu_s"] for x in results),
                         "redis": cpu1["redis"] - cpu0["redis"], "workers": cpu1["workers"] - cpu0["workers"]},
               "remote": remote_figures(stats, ctx["decoded_per_sample"]), "placement_seen": sorted(seen)[:12],
               "views_augmented": (stats.get("views") or {}).get("augmented"),
               "work": stats.get("work"), "remote_tier": {k: ((stats.get("cache") or {}).get("remote") or {}).get(k)
                                                          for k in ("hits", "misses", "writes", "bytes_written", "network")},
               "workers_ready_s": [w.ready_after for w in workers], "mount_heard_workers_s": heard,
               # The mount's own model inputs (what `prepfs plan --params` takes) and its cold prediction.
               "plan_inputs": (stats.get("plan") or {}).get("inputs"),
               "plan_predicted_cold": (stats.get("plan") or {}).get("predicted_cold_samples_per_s")}
        if kill:
            if successor is not None:
                try:
                    successor.wait_ready(30)
                except RuntimeError as e:
                    rec["successor_error"] = str(e)
            # The killed worker's items are taken over after 10 s idle: wait for what is
            # outstanding to end one way or the other, so the counters hold every result.
            settle = time.monotonic() + 40  # LOST_AFTER (30 s) and a takeover's 10 s
            while time.monotonic() < settle:
                rw = mount.stats().get("remote_work") or {}
                if not rw.get("outstanding"):
                    break
                time.sleep(0.5)
            end_stats = mount.stats()
            distinct, dups = distinct_outputs([h for x in results for h in x["hashes"]])
            problems = served_once(end_stats, files)  # settled: no item in flight
            if rec["read_errors"]:
                problems.append(f"{rec['read_errors']} read errors: {rec['errors'][:3]}")
            if rec["files_read"] != files:
                problems.append(f"{rec['files_read']} files read of {files}")
            if distinct != files:
                problems.append(f"{files - distinct} outputs byte-identical to another ({len(dups)} hashes repeated)")
            rec["kill"] = {"files": files, "files_read": rec["files_read"], "read_errors": rec["read_errors"],
                           "distinct": distinct, "killed_at_files": killed_at,
                           "successor_ready_s": successor.ready_after if successor else None,
                           "remote": remote_figures(end_stats, ctx["decoded_per_sample"]),
                           "remote_at_epoch_end": rec["remote"], "problems": problems, "passed": not problems}
        metrics = {}
        for w in workers:
            if w.proc.poll() is None:
                metrics[w.name] = w.metrics()
        rec["worker_metrics"] = metrics
        if kill and successor is not None and "kill" in rec:
            m = metrics.get(successor.name) or {}
            rec["kill"]["successor_takeovers"] = m.get("prepfs_worker_takeovers_total")
            rec["kill"]["successor_done"] = m.get('prepfs_worker_items_total{outcome="done"}')
        # SIGTERM drains a worker and it exits 0 (the killed one's -9 is the kill test's own).
        rec["worker_exit"] = {w.name + (" (killed)" if w.killed else ""): w.close() for w in workers}
        rec["worker_exit_bad"] = {n: st for n, st in rec["worker_exit"].items() if st != 0 and "(killed)" not in n}
        return rec
    finally:
        for r in readers:
            r.close()
            if r in _LIVE:
                _LIVE.remove(r)
        for w in workers:
            w.close()
            if w in _LIVE:
                _LIVE.remove(w)
        mount.close()


def decoded_per_sample(source):
    """The set's mean decoded size per sample (width x height x 3, from the JPEG headers), its
    files and MB on disk."""
    from PIL import Image
    total, n, size = 0, 0, 0
    for p in files_under(source):
        try:
            with Image.open(p) as im:
                total += im.size[0] * im.size[1] * 3
                n += 1
                size += os.path.getsize(p)
        except OSError:
            pass
    return {"files": n, "source_mb": size / 1e6, "decoded_bytes_per_sample": total / n if n else None}


def make_set(kind, gen, root):
    """target/bench-data/workers-KIND: 20 classes x 30, made unless already there (count checked)."""
    # The generator adds a README.txt among the images (not a sample).
    return servers.make_set(kind, gen, os.path.join(root, "workers-" + kind), CLASSES, PER_CLASS, WIDTH, HEIGHT,
                            lambda p: not p.endswith(".txt"))


def plan_flags(binary):
    """Whether `prepfs plan` takes the placement flags (--worker-cost and the rest)."""
    try:
        out = subprocess.run([binary, "plan", "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return all(f in out for f in ("--workers", "--worker-cost", "--recv-cost"))


def plan_params_yaml(info, t_local):
    """`prepfs plan --params`'s file for this set on core 0: the set's sizes, one core making a
    sample in `t_local` s (t_da = 1 / t_local on `cores: 1`), no other limit (the storage is the
    page cache: 1e12 bytes/s, as the file must give a finite rate)."""
    return ("# prepfs_bench.workers: the set measured, core 0 as the host\n"
            f"n_total: {info['files']}\ns_data: {info['source_mb'] * 1e6 / info['files']:.0f}\n"
            f"s_decoded: {info['decoded_bytes_per_sample']:.0f}\ns_augmented: {info.get('output_bytes') or 150543:.0f}\n"
            "s_cache: 536870912\nb_cache: 1.0e10\nb_nic: .inf\nb_pcie: .inf\nb_storage: 1.0e12\n"
            f"t_da: {1.0 / t_local:.3f}\nt_a: {4.0 / t_local:.3f}\nnodes: 1\nc_nw: 0\nc_pcie: 0\ncores: 1\n")


def plan_placement(binary, info, t_local, t_worker, recv, workers, link, out_bytes):
    """`prepfs plan --params P --demand inf --hosts 1 --workers N --worker-cores 1 --worker-cost S
    --recv-cost S --link B --output-bytes B`'s placement: {"rate", "bound", "command"}, or None
    when it fails or says nothing of placement."""
    fd, params = tempfile.mkstemp(prefix="prepfs-workers-plan-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(plan_params_yaml(info, t_local))
    cmd = [binary, "plan", "--params", params, "--demand", "inf", "--hosts", "1", "--workers", str(workers),
           "--worker-cores", "1", "--worker-cost", f"{t_worker:.6g}", "--recv-cost", f"{recv or 0.0:.6g}",
           "--link", f"{link or 1e12:.6g}", "--output-bytes", f"{out_bytes or 150543:.0f}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        doc = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        doc = None
    finally:
        os.remove(params)
    placement = (doc or {}).get("placement") if isinstance(doc, dict) else None
    if not placement or placement.get("samples_per_s_per_host") is None:
        print(f"prepfs plan's placement: nothing ({' '.join(cmd)})", file=sys.stderr)
        return None
    return {"rate": placement["samples_per_s_per_host"], "bound": placement.get("bound"),
            "command": " ".join(["prepfs", "plan", "--params", "PARAMS"] + cmd[4:])}


def made(run):
    """Items the run's workers made (their metrics' done outcomes), else the mount's `done`."""
    counts = [m.get('prepfs_worker_items_total{outcome="done"}') for m in (run.get("worker_metrics") or {}).values() if m]
    counts = [x for x in counts if x is not None]
    return sum(counts) if counts else (run.get("remote") or {}).get("done")


def served_remote(run):
    """Samples of the epoch the workers' results stood in for: results arrived (`done`) less
    those its readers had been made here first (`late`) and those no stock took (`dropped`)."""
    rw = run.get("remote") or {}
    return max((rw.get("done") or 0) - (rw.get("late") or 0) - (rw.get("dropped") or 0), 0)


def model(binary, runs, info):
    """The per-sample costs measured on this set's runs and the prediction for one worker (and
    two) against what was measured: `prepfs plan`'s placement flags where the binary has them,
    else `predict`."""
    med = lambda xs: percentile(xs, 50)
    by = lambda case: [r for r in runs if r["case"] == case and r.get("rate")]
    a, c, d = by("a"), by("c"), by("d")
    if not a or not c:
        return None
    core0 = lambda r: r["cpu_s"]["mount"] + r["cpu_s"]["readers"]
    t_local = med([core0(r) / r["files"] for r in a])
    t_worker = med([(r["cpu_s"]["workers"] + r["cpu_s"]["redis"]) / made(r) for r in c if made(r)])
    t_worker_only = med([r["cpu_s"]["workers"] / made(r) for r in c if made(r)])
    recv, recv_from = None, None
    for case, rs in (("d", d), ("c", c)):
        recv = med([fit_recv(core0(r), r["files"], served_remote(r), t_local) for r in rs])
        if recv is not None:
            recv_from = case
            break
    link = med([((r.get("remote_tier") or {}).get("network") or {}).get("b_nic") for r in c])
    out_bytes = info.get("output_bytes")
    measured_a, measured_c = med([r["rate"] for r in a]), med([r["rate"] for r in c])
    res = {"t_local_ms": t_local * 1e3, "t_worker_ms": (t_worker or 0) * 1e3,
           "t_worker_only_ms": (t_worker_only or 0) * 1e3, "recv_ms": recv * 1e3 if recv is not None else None,
           "recv_from": recv_from, "link": link, "output_bytes": out_bytes,
           "measured_a": measured_a, "measured_c": measured_c,
           "measured_d": med([r["rate"] for r in d]) if d else None}
    if not t_worker:
        res.update(source="no remote sample in case c: nothing to predict from")
        return res
    res["predicted_a"] = 1.0 / t_local
    res["error_a_pct"] = prediction_error(res["predicted_a"], measured_a)
    flags = plan_flags(binary)
    sources = set()
    for label, workers in (("c", 1), ("d", 2)):
        # Two workers on core 1 share its one core: the capacity of one.
        p = plan_placement(binary, info, t_local, t_worker, recv, min(workers, 1), link, out_bytes) if flags else None
        if p is not None:
            sources.add("prepfs plan")
        else:
            p = predict(t_local, t_worker, recv, workers, worker_cores=1, link=link, output_bytes=out_bytes)
            sources.add("the formula r + (1 - r recv) / t_local"
                        + (" (prepfs plan's placement failed)" if flags else " (prepfs plan has no placement flags)"))
        res[f"predicted_{label}"] = p["rate"]
        res[f"bound_{label}"] = p.get("bound")
        if p.get("command"):
            res[f"command_{label}"] = p["command"]
    res["source"] = "; ".join(sorted(sources))
    res["error_pct"] = prediction_error(res["predicted_c"], measured_c)
    res["error_d_pct"] = prediction_error(res.get("predicted_d"), res["measured_d"])
    return res


def guarded(ctx, data, case, round_no):
    """run_case, or {"case", "round", "error"} when it failed (the run goes on; it exits 1)."""
    try:
        return run_case(ctx, data, case, round_no)
    except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        return {"case": case, "round": round_no, "error": f"{type(e).__name__}: {e}"}


def run_set(ctx, kind, data, cases, repeats):
    info = decoded_per_sample(data)
    ctx["decoded_per_sample"] = info["decoded_bytes_per_sample"]
    for p in files_under(data):  # the source in the page cache for every case alike
        with open(p, "rb") as f:
            f.read()
    timed = [c for c in TIMED_CASES if c in cases]
    runs = []
    for round_no in range(repeats):
        order = timed if round_no % 2 == 0 else timed[::-1]  # alternated: no case always first
        for case in order:
            rec = guarded(ctx, data, case, round_no)
            runs.append(rec)
            if "error" in rec:
                print(f"[{kind}] round {round_no + 1} {LABELS[case]}: failed: {rec['error']}", flush=True)
                continue
            print(f"[{kind}] round {round_no + 1} {LABELS[case]}: {fmt(rec['rate'])} files/s "
                  f"(remote done {rec['remote'].get('done')}, errors {rec['read_errors']}, "
                  f"load {rec['load_before']:.2f})", flush=True)
    outs = [r["bytes"] / r["files_read"] for r in runs if r.get("files_read") and not r.get("jobs")]
    info["output_bytes"] = percentile(outs, 50)
    out = {"info": info, "runs": runs, "summary": set_summary(runs, info["decoded_bytes_per_sample"])}
    out["prediction"] = model(ctx["binary"], runs, info)
    out["failed_runs"] = [r for r in runs if "error" in r]
    if "f" in cases:
        rec = guarded(ctx, data, "f", 0)
        out["kill"] = rec.pop("kill", None) or {"passed": False, "problems": [f"the run failed: {rec.get('error')}"],
                                                "files": None, "files_read": None, "read_errors": None,
                                                "distinct": None, "remote": {}}
        out["kill_run"] = rec
        print(f"[{kind}] kill test: {'passed' if out['kill']['passed'] else 'FAILED: ' + '; '.join(out['kill']['problems'])}",
              flush=True)
    return out


def git_commit():
    """The repository's commit (with "+changes" when the tree differs from it), or None."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (head + ("+changes" if dirty else "")) or None


def our_mounts(work):
    """Lines of /proc/mounts that are fuse mounts under `work`."""
    try:
        with open("/proc/mounts") as f:
            return [ln.strip() for ln in f if "fuse" in ln and work in ln]
    except OSError:
        return []


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["read"]:
        return reader_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    servers.process_bench_args(ap, "workers")
    ap.add_argument("--quick", action="store_true", help="one round, the generator's set only")
    ap.add_argument("--sets", help="real,gen (default; --quick: gen)")
    ap.add_argument("--repeats", type=int, help="rounds of the timed cases (default 3; --quick: 1)")
    ap.add_argument("--cases", default="a,b,c,d,e,f")
    ap.add_argument("--threads", type=int, default=2, help="the mount's threads (default 2)")
    ap.add_argument("--report-only", metavar="JSON", help="run nothing: rewrite an earlier run's Markdown (and its "
                    "section in BENCHMARKS.md) from its JSON with this code")
    args = ap.parse_args(argv)
    if args.report_only:
        with open(args.report_only) as f:
            report = json.load(f)
        for s in report["sets"].values():
            s["summary"] = set_summary(s["runs"], s["info"]["decoded_bytes_per_sample"])
            if os.path.isfile(args.prepfs):  # the prediction again, from the costs the run measured
                s["prediction"] = model(os.path.abspath(args.prepfs), s["runs"], s["info"])
        lines = summary_lines(report)
        write_report(args.out or args.report_only, report, lines, summary=lines[:2 + 2 + len(report["sets"])],
                     command=report.get("command"), date=report.get("date"))
        return 0
    sets = (args.sets or ("gen" if args.quick else "real,gen")).split(",")
    repeats = args.repeats or (1 if args.quick else 3)
    cases = set()
    for c in args.cases.split(","):
        cases |= {"e_alone", "e_worker"} if c == "e" else {c}
    unknown = cases - set(CASES)
    if unknown:
        ap.error(f"unknown cases {sorted(unknown)}")
    out = args.out or os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-workers"
                                   + ("-quick" if args.quick else ""))
    for tool in ("redis-server", "redis-cli", "taskset", "fusermount3"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found")
    if not os.path.isfile(args.prepfs):
        raise SystemExit(f"{args.prepfs} not found: build it (cargo build --release -p prepfs --examples)")
    binary = os.path.abspath(args.prepfs)
    servers.end_on_exit()
    work = tempfile.mkdtemp(prefix="prepfs-workers-")
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    report = {"binary": show_path(binary), "mount_threads": args.threads, "repeats": repeats,
              "command": script_command(), "commit": git_commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "cores": {"mount and readers": MOUNT_CORE, "redis and workers": NETWORK_CORE},
              "load_before": os.getloadavg(), "sets": {}}
    try:
        redis = Redis(work)
        ctx = {"binary": binary, "redis": redis, "work": work, "logs": logs, "threads": args.threads}
        for kind in sets:
            data = make_set(kind, args.gen, args.data_root)
            report["sets"][kind] = run_set(ctx, kind, data, cases, repeats)
            report["sets"][kind]["data"] = show_path(data)
    finally:
        _end_all()
        report["left_mounted"] = our_mounts(work)
        keep = os.path.join(os.path.dirname(os.path.abspath(out)), os.path.basename(out) + "-logs")
        if report["sets"]:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(logs, keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    report["load_after"] = os.getloadavg()
    lines = summary_lines(report)
    write_report(out, report, lines, summary=lines[:2 + 2 + len(report["sets"])])
    failed = any(not (s.get("kill") or {"passed": True})["passed"] or s.get("failed_runs")
                 for s in report["sets"].values())
    return 1 if failed or report["left_mounted"] else 0


if __name__ == "__main__":
    sys.exit(main())
