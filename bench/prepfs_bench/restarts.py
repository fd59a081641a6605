#!/usr/bin/env python3
"""Issue 53's measurement: what a training job sees when the server of a supervised mount dies
(SIGKILL) or is upgraded (`prepfs upgrade`) under it, and what that costs.

Per data set (JPEGs cut from real photographs, `prepfs_bench.real_photos`, and the generator's
500x375 ones; 20 classes x 30 each, `--quick`: the generator's, 10 x 20; kept under
target/bench-data/restarts-KIND-CxP), two runs, each on a fresh mount
(`prepfs mount SRC MNT --config CFG --read-only`, supervised as by default, CFG `seed: 5`,
`threads: 2` and nothing else), the source read once before (the page cache alike for both):

- the job's view as a training job lists it (ImageFolder: the class directories sorted, their
  files sorted), in the harness (the training script's main process), which starts the job:
  `MNT/jobs/train/augmented/` and `MNT/jobs/check/encoded/`;
- job `train`: two reader processes (a DataLoader's two workers,
  `python3 -m prepfs_bench.restarts read ...`) read two epochs of its listing, each epoch the
  listing shuffled with a fixed seed (`53 * 100 + epoch`), reader k reading entries k, k+2, ...
  (whole files, `open(p, "rb").read()`); an epoch's second starts when both readers ended the
  first (a DataLoader's epoch boundary);
- job `check`: one reader process reading two epochs of its listing the same way, each file's
  bytes hashed (BLAKE2b) and looked up among the source files' hashes (taken before): each must
  equal exactly one source file (the job view may serve another sample than the name asked:
  a sample is identified by its content), of the class directory the path names. Its reads
  cost far less than `train`'s (no decode), so it keeps `train`'s pace, as a second job of the
  same model on the same machine would: it may read its next file once `train` has done as large
  a share of its reads, plus a lead of 2% (credits the harness sends as `train`'s reads arrive;
  the wait for one is not in the read's latency). Without that it would end before the first
  restart;
- each reader records per read the time it started (CLOCK_MONOTONIC, one clock for every
  process), its latency (open to close), the sample (`check`: the source file; `train`: the
  class directory and the output's hash, an augmented output naming no sample), and any error.

The baseline run has no restart. In the restart run the harness follows the readers' progress
(a line each reader prints per file read: an event, never a sleep) and, once 20%, 45%, 55% and
70% of all the reads (both jobs') are done: SIGKILLs the server (the pid stats.json gives, checked
to be a child of the `prepfs mount` process the harness started), SIGKILLs it again, runs
`prepfs upgrade MNT`, SIGKILLs it again. Each restart's stall is the time from the kill (or from
the upgrade command's start) until `MNT/.prepfs/stats.json` answers with another pid, polled in
a loop of reads (each read of it waits while no server serves); from the readers' side, the
longest latency of the reads in flight during that stall.

Reported per set: per restart, the stall, the upgrade command's own time, the readers' longest
latency around it, how many reads were in flight, and the reads that failed from it to the next
restart, by kind; the read latency p50 / p99 / max per view,
in the baseline, in the restart run away from any stall and around one (in flight during one);
the read errors (must be 0); per epoch and job, the files read (`train`: must be the listing's
size; its distinct outputs beside) and for `check` the samples served twice, never, not a source
file or under another class (each sample exactly once per epoch is issue 53's promise, which
needs the jobs' ledger: reported as counted); the makespan (first read's start to last read's
end) of both runs, the restarts' total cost their difference; stats.json's `server` section and
`jobs` after the run where present, and the supervisor's log lines about its servers ("server
started", "the server serves ... seconds=", "the server ended ..."), with each server's time to
serve and the supervisor's delay from a server's end to the next one's start (its backoff).

Usage: PYTHONPATH=bench python3 -m prepfs_bench.restarts --prepfs target/release/prepfs --gen target/release/examples/make_dataset
                                                         [--quick] [--sets real,gen] [--classes 20 --per-class 30]
                                                         [--out bench/results/DATE-restarts]
Needs fusermount3. Everything runs under timeouts; every mount, reader and server it started is
ended (the mounts released: `fusermount3 -u`, then `-u -z`) on every way out. Exits 1 when a
read failed or hung, a run failed, a check above failed, or something stayed mounted.

`python3 -m prepfs_bench.restarts read LIST --root VIEW --share K --of N --epochs E --seed S
--out OUT [--sources HASHES] [--paced]` is the reader process itself.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import BENCH_DIR, module_command, show_path
from .mount import is_mounted
from .runs import script_command, write_report
from . import servers
from .servers import LIVE as _LIVE, end_all as _end_all, end_process, forget as _forget
from .workers import fmt, git_commit, log_tail, our_mounts, percentile

CLASSES, PER_CLASS, WIDTH, HEIGHT = 20, 30, 500, 375
QUICK_CLASSES, QUICK_PER_CLASS = 10, 20
EPOCHS = 2
SHUFFLE_SEED = 53
# (what, share of all the reads done when it happens)
EVENTS = (("kill", 0.20), ("kill", 0.45), ("upgrade", 0.55), ("kill", 0.70))
JOBS = (  # name, view, reader processes, whether each read is checked against the source
    ("train", "augmented", 2, False),
    ("check", "encoded", 1, True),
)
PACED = {"check": "train"}  # a job that keeps another's pace: follower -> leader
LEAD = 0.02  # how far (a share of its reads) a follower may be ahead of its leader
CONFIG = "seed: 5\nthreads: 2\n"
# torchvision's IMG_EXTENSIONS, matched as ImageFolder does (case-insensitive): the generator's
# README.txt in a class directory, which `encoded/` shows too, is no sample.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
READY_TIMEOUT = 60.0
STALL_TIMEOUT = 120.0  # a restart that takes longer is a failure (the supervisor gives up sooner)
RUN_TIMEOUT = 900.0  # one run's reads, all epochs of both jobs
LOG_WORDS = ("server started", "the server serves", "the server ended", "upgrade", "giving the mount up",
             "holding the mount's connection", "killing it")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ---------------------------------------------------------------- the pure parts (self-tested)

def shuffled_share(paths, epoch, share, of, seed=SHUFFLE_SEED):
    """What reader `share` of `of` reads in `epoch`: the listing shuffled with the epoch's seed
    (seed * 100 + epoch), every `of`-th entry from `share` on (a DataLoader's workers, one
    sample per batch)."""
    order = list(paths)
    random.Random(seed * 100 + epoch).shuffle(order)
    return order[share::of]


def event_thresholds(total, events=EVENTS):
    """The reads done (of `total`) at which each event happens: [(what, share, reads)]."""
    return [(what, share, max(1, math.ceil(round(share * total, 9)))) for what, share in events]


def credits(leader_done, leader_total, follower_total, lead=LEAD):
    """The reads a follower may have done once its leader did `leader_done` of
    `leader_total`: the same share of its own, plus `lead` of them (at least 1), at most all."""
    if leader_total <= 0 or leader_done >= leader_total:
        return follower_total
    share = math.ceil(leader_done * follower_total / leader_total)
    return min(follower_total, share + max(1, math.ceil(lead * follower_total)))


def in_flight(read, t0, t1):
    """Whether a read (its "t" start and "lat" latency) was in flight at some time in [t0, t1]."""
    return read["t"] <= t1 and read["t"] + read["lat"] >= t0


def around(reads, events):
    """(the reads in flight during some event's stall, the others): events with "t0" and "t1"."""
    windows = [(e["t0"], e["t1"]) for e in events if e.get("t0") is not None and e.get("t1") is not None]
    near, away = [], []
    for r in reads:
        (near if any(in_flight(r, a, b) for a, b in windows) else away).append(r)
    return near, away


def latency_figures(reads):
    """{"reads", "p50_ms", "p99_ms", "max_ms"} of the reads' latencies."""
    lat = [r["lat"] * 1e3 for r in reads]
    return {"reads": len(lat), "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "max_ms": max(lat) if lat else None}


def event_figures(event, reads):
    """An event's readers' side: the reads in flight during its stall, the longest latency among
    them (overall and per view) and whether any of them failed."""
    if event.get("t0") is None or event.get("t1") is None:
        return {"reads_in_flight": None, "max_latency_s": None, "max_latency_by_view": {}, "errors": None}
    hit = [r for r in reads if in_flight(r, event["t0"], event["t1"])]
    by_view = {}
    for r in hit:
        by_view[r["view"]] = max(by_view.get(r["view"], 0.0), r["lat"])
    return {"reads_in_flight": len(hit), "max_latency_s": max((r["lat"] for r in hit), default=None),
            "max_latency_by_view": by_view, "errors": sum(1 for r in hit if r.get("err"))}


def errors_after(events, reads):
    """Per event, the reads that failed from its start to the next event's (the last: to the
    end): what each restart cost the readers in errors, by kind."""
    starts = [e.get("t0") for e in events]
    out = []
    for i, t0 in enumerate(starts):
        if t0 is None:
            out.append(None)
            continue
        nxt = next((t for t in starts[i + 1:] if t is not None), float("inf"))
        out.append(error_kinds([r for r in reads if r.get("err") and t0 <= r["t"] + r["lat"] and r["t"] < nxt]))
    return out


def error_kinds(reads):
    """{kind: count} of the failed reads (the kind: the error's text before the path)."""
    kinds = {}
    for r in reads:
        if r.get("err"):
            k = r["err"].split(": '")[0].split(": /")[0]
            kinds[k] = kinds.get(k, 0) + 1
    return kinds


def makespan(reads):
    """First read's start to last read's end, seconds (None for no reads)."""
    if not reads:
        return None
    return max(r["t"] + r["lat"] for r in reads) - min(r["t"] for r in reads)


def class_of(rel):
    """The class directory of a path relative to a view or the source (`CLASS/FILE`)."""
    return rel.replace("\\", "/").split("/")[0]


def check_augmented(reads, listing_size, epochs=EPOCHS):
    """Per epoch of an augmented job: files read (must be `listing_size`), errors, distinct
    outputs and the reads repeating an earlier one's bytes (an output served twice: a sample's
    output is a function of the sample and the epoch, so two equal ones are one sample served
    twice), the verdict."""
    out = []
    for e in range(1, epochs + 1):
        rs = [r for r in reads if r["e"] == e]
        errors = sum(1 for r in rs if r.get("err"))
        hashes = [r["hash"] for r in rs if r.get("hash") and not r.get("err")]
        distinct = len(set(hashes))
        out.append({"epoch": e, "files": len(rs), "expected": listing_size, "errors": errors,
                    "distinct_outputs": distinct, "outputs_repeated": len(hashes) - distinct,
                    "ok": len(rs) == listing_size and not errors and len(hashes) == distinct})
    return out


def check_encoded(reads, sources, epochs=EPOCHS):
    """Per epoch of a job whose reads name the source file they equal ("sample"; None: equal to
    none): files read, errors, samples served more than once and never, reads equal to no source
    file, reads of a sample of another class than the path's; `ok` when every sample was served
    exactly once with no error. `sources`: the source's samples, relative paths."""
    out = []
    every = set(sources)
    for e in range(1, epochs + 1):
        rs = [r for r in reads if r["e"] == e]
        count = {}
        for r in rs:
            if r.get("sample"):
                count[r["sample"]] = count.get(r["sample"], 0) + 1
        twice = sorted(s for s, n in count.items() if n > 1)
        missing = sorted(every - set(count))
        not_source = sum(1 for r in rs if not r.get("err") and not r.get("sample"))
        wrong_class = sum(1 for r in rs if r.get("sample") and class_of(r["sample"]) != class_of(r["path"]))
        errors = sum(1 for r in rs if r.get("err"))
        out.append({"epoch": e, "files": len(rs), "expected": len(every), "errors": errors,
                    "served_twice": len(twice), "extra_reads": sum(count[s] - 1 for s in twice),
                    "never_served": len(missing), "not_a_source_file": not_source, "wrong_class": wrong_class,
                    "examples_twice": twice[:5], "examples_missing": missing[:5],
                    "ok": not (twice or missing or not_source or wrong_class or errors) and len(rs) == len(every)})
    return out


def supervisor_lines(text):
    """The supervisor's log lines about its servers (colour codes dropped), and the seconds each
    server took to serve ("the server serves ... seconds=S"), in order."""
    lines, serves = [], []
    for ln in text.splitlines():
        ln = ANSI.sub("", ln).rstrip()
        if any(w in ln for w in LOG_WORDS):
            lines.append(ln)
            if "the server serves" in ln:
                m = re.search(r'seconds="?([0-9.]+)', ln)
                if m:
                    serves.append(float(m.group(1)))
    return lines, serves


def restart_delays(lines):
    """From the supervisor's lines: per server that ended with the mount in place, the seconds
    from its end to the next server's start (the supervisor's backoff), by their timestamps."""
    def when(ln):
        try:
            return datetime.datetime.fromisoformat(ln.split()[0].replace("Z", "+00:00")).timestamp()
        except (ValueError, IndexError):
            return None
    out, ended = [], None
    for ln in lines:
        if "the server ended" in ln:
            ended = when(ln)
        elif "server started" in ln and ended is not None:
            started = when(ln)
            out.append(started - ended if started is not None else None)
            ended = None
    return out


def run_figures(run):
    """A run's figures from its reads and events: per event the readers' side, latencies per
    view (all, away from the stalls, around them), makespans, errors, the epoch checks."""
    reads = run.get("reads") or []
    events = run.get("events") or []
    for e, kinds in zip(events, errors_after(events, reads)):
        e.update(event_figures(e, reads))
        e["errors_until_next"] = kinds
    lat = {}
    for view in sorted({r["view"] for r in reads}):
        rs = [r for r in reads if r["view"] == view]
        near, away = around(rs, events)
        lat[view] = {"all": latency_figures(rs), "away": latency_figures(away), "around": latency_figures(near)}
    near, away = around(reads, events)
    lat["all"] = {"all": latency_figures(reads), "away": latency_figures(away), "around": latency_figures(near)}
    checks = {}
    for name, view, _, checked in JOBS:
        rs = [r for r in reads if r["job"] == name]
        if checked:
            checks[name] = check_encoded(rs, run.get("sources") or [], run.get("epochs", EPOCHS))
        else:
            checks[name] = check_augmented(rs, (run.get("listing") or {}).get(name), run.get("epochs", EPOCHS))
    return {"latency": lat, "makespan_s": makespan(reads),
            "makespan_by_job_s": {j: makespan([r for r in reads if r["job"] == j]) for j, *_ in JOBS},
            "reads": len(reads), "errors": sum(1 for r in reads if r.get("err")), "error_kinds": error_kinds(reads),
            "error_examples": [f"{r['job']} {r['path']}: {r['err']}" for r in reads if r.get("err")][:10],
            "checks": checks}


def verdict(set_report):
    """What failed in a set (empty: nothing): a failed run, read errors, a stall with no new
    server, an augmented epoch short of the listing, an encoded epoch not each sample once,
    equal to no source file or of another class."""
    bad = []
    for label in ("baseline", "restarts"):
        run = set_report.get(label) or {}
        if run.get("error"):
            bad.append(f"{label}: {run['error'].splitlines()[0]}")
            continue
        f = run.get("figures") or {}
        if f.get("errors"):
            bad.append(f"{label}: {f['errors']} read errors")
        for job, epochs in (f.get("checks") or {}).items():
            for ep in epochs:
                if not ep["ok"]:
                    what = [f"{ep['files']} files of {ep['expected']}"] if ep["files"] != ep["expected"] else []
                    what += [f"{ep[k]} {k.replace('_', ' ')}" for k in ("errors", "outputs_repeated", "served_twice",
                                                                       "never_served", "not_a_source_file", "wrong_class")
                             if ep.get(k)]
                    bad.append(f"{label}: {job} epoch {ep['epoch']}: " + ", ".join(what))
        for e in run.get("events") or []:
            if e.get("error"):
                bad.append(f"{label}: {e['what']} at {e['share'] * 100:.0f}%: {e['error'].splitlines()[0]}")
            if e.get("stats_errors"):
                bad.append(f"{label}: {e['what']} at {e['share'] * 100:.0f}%: stats.json read failed meanwhile: "
                           f"{e['stats_errors'][0]}")
    return bad


def fmt_s(x, spec=".2f"):
    return fmt(x, spec)


def fmt_kinds(kinds):
    """A count of failed reads with their kinds: `0`, `12 ([Errno 2] No such file or directory)`."""
    if kinds is None:
        return "-"
    n = sum(kinds.values())
    return f"{n} ({'; '.join(f'{k}: {v}' if len(kinds) > 1 else k for k, v in kinds.items())})" if n else "0"


def summary_lines(report):
    """The run's Markdown: a table with a row per set (the summary in BENCHMARKS.md), then per
    set its restarts, latencies, epochs, the server's figures and the supervisor's lines."""
    lines = [f"Supervised restarts (issue 53): a fresh `prepfs mount` per run (`{report['config'].strip().replace(chr(10), ', ')}`, "
             f"read-only); job `train` (two reader processes, `augmented/`) and job `check` (one, `encoded/`, every byte "
             f"checked against the source), {report['epochs']} epochs each, shuffled per epoch; the restart run SIGKILLs "
             "the server at 20%, 45% and 70% of the reads and runs `prepfs upgrade` at 55%. Stall: from the kill (the "
             "upgrade's start) to stats.json answering with a new pid. Load average "
             f"{fmt((report.get('load_before') or [None])[0], '.2f')} before, "
             f"{fmt((report.get('load_after') or [None])[0], '.2f')} after (2 cores others use too)"
             + (f"; built from {report['commit']}." if report.get("commit") else "."), "",
             "| set | samples | makespan baseline / restarts s | restarts' cost s | stalls s (kill, kill, upgrade, kill) "
             "| readers' max latency around each s | read errors | train: files per epoch | check: twice / never per epoch |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in report["sets"].items():
        b = (s.get("baseline") or {}).get("figures") or {}
        r = (s.get("restarts") or {}).get("figures") or {}
        ev = (s.get("restarts") or {}).get("events") or []
        mb, mr = b.get("makespan_s"), r.get("makespan_s")
        cost = (mr - mb) if mb is not None and mr is not None else None
        stalls = ", ".join(fmt_s(e.get("stall_s")) for e in ev) or "-"
        lats = ", ".join(fmt_s(e.get("max_latency_s")) for e in ev) or "-"
        errs = f"{fmt(b.get('errors'))} / {fmt(r.get('errors'))}"
        train = " / ".join(f"{ep['files']}" for ep in (r.get("checks") or {}).get("train", [])) or "-"
        check = " / ".join(f"{ep['served_twice']}, {ep['never_served']}" for ep in (r.get("checks") or {}).get("check", [])) or "-"
        lines.append(f"| {name} | {fmt((s.get('info') or {}).get('samples'))} | {fmt_s(mb)} / {fmt_s(mr)} | "
                     f"{fmt(cost, '+.2f')} | {stalls} | {lats} | {errs} | {train} | {check} |")
    for name, s in report["sets"].items():
        info = s.get("info") or {}
        lines += ["", f"## {name}: {fmt(info.get('samples'))} samples ({fmt(info.get('classes'))} classes), "
                  f"{fmt(info.get('source_mb'), '.1f')} MB, `{s.get('data')}`"]
        problems = s.get("problems") or []
        lines += ["", ("**Failed:** " + "; ".join(problems) + ".") if problems else "Every check passed."]
        run = s.get("restarts") or {}
        ev = run.get("events") or []
        if ev:
            lines += ["", "| # | what | at reads | stall s | upgrade command s | readers' max latency s (train / check) "
                      "| reads in flight | errors among them | failed reads until the next | pids |",
                      "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
            for i, e in enumerate(ev, 1):
                v = e.get("max_latency_by_view") or {}
                lines.append(f"| {i} | {e['what']} ({e['share'] * 100:.0f}%) | {fmt(e.get('at_reads'))} of {fmt(run.get('total_reads'))} "
                             f"| {fmt_s(e.get('stall_s'))} | {fmt_s(e.get('command_s'))} | {fmt_s(e.get('max_latency_s'))} "
                             f"({fmt_s(v.get('augmented'))} / {fmt_s(v.get('encoded'))}) | {fmt(e.get('reads_in_flight'))} "
                             f"| {fmt(e.get('errors'))} | {fmt_kinds(e.get('errors_until_next'))} "
                             f"| {e.get('old_pid')} -> {e.get('new_pid')}"
                             + (f"; **{e['error'].splitlines()[0]}**" if e.get("error") else "") + " |")
        lines += ["", "| view | run | reads | p50 ms | p99 ms | max ms |", "| --- | --- | ---: | ---: | ---: | ---: |"]
        for view in ("augmented", "encoded", "all"):
            for label, run_key, part in (("baseline", "baseline", "all"), ("restarts, away from the stalls", "restarts", "away"),
                                         ("restarts, around a stall", "restarts", "around")):
                f = (((s.get(run_key) or {}).get("figures") or {}).get("latency") or {}).get(view, {}).get(part)
                if not f:
                    continue
                lines.append(f"| {view} | {label} | {fmt(f['reads'])} | {fmt(f['p50_ms'], '.1f')} | {fmt(f['p99_ms'], '.1f')} "
                             f"| {fmt(f['max_ms'], '.1f')} |")
        lines += ["", "| run | job | epoch | files (expected) | errors | distinct outputs (repeated) | served twice "
                  "| never served | not a source file | other class |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for label in ("baseline", "restarts"):
            for job, epochs in (((s.get(label) or {}).get("figures") or {}).get("checks") or {}).items():
                for ep in epochs:
                    lines.append(f"| {label} | {job} | {ep['epoch']} | {ep['files']} ({fmt(ep['expected'])}) | {ep['errors']} "
                                 f"| {fmt(ep.get('distinct_outputs'))}"
                                 + (f" ({ep['outputs_repeated']})" if ep.get("outputs_repeated") is not None else "")
                                 + f" | {fmt(ep.get('served_twice'))} "
                                 f"| {fmt(ep.get('never_served'))} | {fmt(ep.get('not_a_source_file'))} "
                                 f"| {fmt(ep.get('wrong_class'))} |")
        for label in ("baseline", "restarts"):
            f = (s.get(label) or {}).get("figures") or {}
            if f.get("error_examples"):
                lines += ["", f"Read errors ({label}): {fmt_kinds(f.get('error_kinds'))}, e.g. "
                          + "; ".join(f"`{x}`" for x in f["error_examples"][:5])]
        server = run.get("server")
        lines += ["", "stats.json's `server` after the restart run: "
                  + (f"`{json.dumps(server, sort_keys=True)}`" if server is not None else "absent (this build has none).")]
        jobs = run.get("jobs")
        if jobs == []:
            lines.append("Its active jobs after the run: none (the server serving then knows of no job).")
        elif jobs:
            lines.append("Its active jobs after the run: " + "; ".join(
                f"{j.get('name')}: epoch {j.get('epoch')}, {j.get('served_this_epoch')} served this epoch, "
                f"{j.get('samples_served')} in all, {j.get('substitutions')} substitutions" for j in jobs) + ".")
        serves = run.get("serves_s") or []
        if serves:
            lines.append("Each server's start to serving (the supervisor's \"the server serves ... seconds=\"): "
                         + ", ".join(fmt_s(x) for x in serves) + " s.")
        delays = run.get("restart_delays_s") or []
        if delays:
            lines.append("The supervisor's delay from a killed server's end to the next one's start (its backoff, "
                         "doubled per end within its crash window): " + ", ".join(fmt_s(x) for x in delays) + " s.")
        if run.get("log_lines"):
            lines += ["", "The supervisor's lines about its servers (restart run):", "", "```"]
            lines += run["log_lines"][:40]
            lines += ["```"]
    if report.get("left_mounted"):
        lines += ["", "**Left mounted after the run:** " + ", ".join(report["left_mounted"])]
    return lines


# ---------------------------------------------------------------- the reader process

def reader_main(argv):
    """One reader process: the relative paths in LIST under --root, for each epoch (after a line
    "go E" on stdin) its share of the epoch's shuffle, each file opened and read whole; prints
    "@@r" after each file, "@@epoch E" after each epoch; at the end writes its reads to OUT (JSON:
    e, t, lat, path, hash, size, sample with --sources, err) and prints "@@done"."""
    ap = argparse.ArgumentParser(prog="prepfs_bench.restarts read")
    ap.add_argument("list")
    ap.add_argument("--root", required=True)
    ap.add_argument("--share", type=int, default=0)
    ap.add_argument("--of", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--seed", type=int, default=SHUFFLE_SEED)
    ap.add_argument("--sources", help="JSON {hash: source path}: each read must equal one of them")
    ap.add_argument("--out", required=True)
    ap.add_argument("--paced", action="store_true", help="read a file only with a credit (a line '+N' on stdin)")
    a = ap.parse_args(argv)
    with open(a.list) as f:
        paths = [ln.rstrip("\n") for ln in f if ln.strip()]
    sources = None
    if a.sources:
        with open(a.sources) as f:
            sources = json.load(f)
    sys.stdout.write("@@ready\n")
    sys.stdout.flush()
    reads = []
    have = [0]  # credits (--paced)

    def line():
        """The next line on stdin that is not a credit (credits counted); None at its end."""
        while True:
            text = sys.stdin.readline()
            if not text:
                return None
            if text.startswith("+"):
                have[0] += int(text[1:])
                if a.paced and have[0] > 0:
                    return ""
                continue
            return text.strip()

    for epoch in range(1, a.epochs + 1):
        said = line()
        while said == "":
            said = line()
        if said != f"go {epoch}":
            return 1
        for rel in shuffled_share(paths, epoch, a.share, a.of, a.seed):
            while a.paced and have[0] <= 0:
                if line() != "":
                    return 1
            have[0] -= 1
            rec = {"e": epoch, "path": rel}
            t0 = time.monotonic()
            try:
                with open(os.path.join(a.root, rel), "rb") as fh:
                    data = fh.read()
                rec["lat"] = time.monotonic() - t0
                rec["size"] = len(data)
                rec["hash"] = hashlib.blake2b(data, digest_size=16).hexdigest()
                if not data:
                    rec["err"] = "empty"
                if sources is not None:
                    rec["sample"] = sources.get(rec["hash"])
            except OSError as e:
                rec["lat"] = time.monotonic() - t0
                rec["err"] = str(e)
            rec["t"] = t0
            reads.append(rec)
            sys.stdout.write("@@r\n")
            sys.stdout.flush()
        sys.stdout.write(f"@@epoch {epoch}\n")
        sys.stdout.flush()
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(reads, f)
    os.replace(tmp, a.out)
    sys.stdout.write("@@done\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------- the processes it runs

def timed(fn, timeout, what):
    """fn() in a thread of its own, waited for `timeout` s (a read of a mount that no longer
    answers must not hang the harness): its value, or RuntimeError."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (passed on below)
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise RuntimeError(f"{what}: no answer within {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def parent_pid(pid):
    """The parent of process `pid` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class SupervisedMount:
    """`prepfs mount SRC MNT --config CFG --read-only` (supervised: this process is the
    supervisor, its servers its children), its stderr to its log; ready once it said "prepfs:
    serving" and stats.json answers. close(): `fusermount3 -u`, the supervisor waited for
    (SIGTERM, then SIGKILL), any server it started still alive SIGKILLed by its pid, then
    `fusermount3 -u -z` if still mounted."""

    def __init__(self, binary, source, mnt, cfg, log_path):
        self.mnt, self.log_path, self.proc = mnt, log_path, None
        self.servers = set()  # every server pid seen, to end on the way out
        try:
            self._start(binary, source, mnt, cfg, log_path)
        except BaseException:
            self.close()
            raise

    def _start(self, binary, source, mnt, cfg, log_path):
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], stderr=subprocess.DEVNULL, timeout=30)
        os.makedirs(mnt, exist_ok=True)
        self.cmd = [binary, "mount", source, mnt, "--config", cfg, "--read-only"]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
        _LIVE.append(self)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(self.cmd)} exited with status {self.proc.returncode}:\n{self.log_tail()}")
            if "prepfs: serving" in self.log():
                try:
                    self.server_pid(timeout=max(1.0, deadline - time.monotonic()))
                    break
                except (OSError, ValueError):
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mnt} not serving within {READY_TIMEOUT:.0f} s:\n{self.log_tail()}")
            time.sleep(0.02)

    def stats(self, timeout=30.0):
        def read():
            with open(os.path.join(self.mnt, ".prepfs", "stats.json")) as f:
                return json.load(f)
        return timed(read, timeout, f"{self.mnt}/.prepfs/stats.json")

    def server_pid(self, timeout=30.0):
        pid = int(self.stats(timeout)["pid"])
        if pid == self.proc.pid:
            raise RuntimeError(f"stats.json's pid {pid} is the supervisor's: is the mount supervised?")
        self.servers.add(pid)
        return pid

    def wait_new_pid(self, old, timeout=STALL_TIMEOUT):
        """Reads stats.json again and again (each read waits while no server serves) until it
        answers with another pid than `old`: that pid, the time it answered, and the errors
        reads of it got meanwhile (a reader would have got them too; the supervisor ended: an
        error)."""
        stop = threading.Event()
        errors = []

        def poll():
            while not stop.is_set():
                try:
                    with open(os.path.join(self.mnt, ".prepfs", "stats.json")) as f:
                        pid = int(json.load(f)["pid"])
                except (OSError, ValueError, KeyError) as e:
                    errors.append(f"{type(e).__name__}: {e}")
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"the supervisor exited with status {self.proc.returncode} "
                                           f"(stats.json: {errors[-1]})") from None
                    continue
                if pid != old:
                    return pid, time.monotonic()
            return None, None
        try:
            pid, at = timed(poll, timeout, f"a server after {old}")
        finally:
            stop.set()
        self.servers.add(pid)
        return pid, at, errors[:10] + ([f"... {len(errors)} in all"] if len(errors) > 10 else [])

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, n=20):
        return log_tail(self.log_path, n)

    def close(self, timeout=30):
        _forget(self)
        try:
            subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL, timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self.proc is not None:
            try:  # unmounted, the supervisor and its server exit by themselves
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                end_process(self.proc, 10)
        for pid in sorted(self.servers):
            # Only a server of this mount (its command line names the mountpoint) still alive.
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    mine = self.mnt.encode() in f.read()
            except OSError:
                mine = False
            if mine:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], stderr=subprocess.DEVNULL, timeout=30)

    def __repr__(self):
        return f"SupervisedMount({self.mnt})"


class Progress:
    """The reads done by every reader, and the readers ended, behind one condition: the harness
    waits on it for a count (an event per read)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.reads = 0
        self.ended = 0

    def add(self, reads=0, ended=0):
        with self.cond:
            self.reads += reads
            self.ended += ended
            self.cond.notify_all()

    def wait_for(self, reads, readers, deadline):
        """Until `reads` are done or all `readers` ended; False when `deadline` passed first."""
        with self.cond:
            return self.cond.wait_for(lambda: self.reads >= reads or self.ended >= readers,
                                      max(0.0, deadline - time.monotonic()))


class Reader:
    """A reader process (`python3 -m prepfs_bench.restarts read`) of one job; its output followed
    in a thread: each "@@r" and "@@epoch E" told to its job."""

    def __init__(self, job, share, of, list_path, root, out, sources=None, epochs=EPOCHS):
        self.job, self.share, self.out = job, share, out
        self.lock = threading.Lock()  # one writer of its stdin at a time
        cmd = (module_command(sys.executable, "restarts") + ["read", list_path, "--root", root, "--share", str(share),
                                                             "--of", str(of), "--epochs", str(epochs), "--out", out]
               + (["--sources", sources] if sources else []) + (["--paced"] if job.leader else []))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        _LIVE.append(self)
        self.done = False
        line = timed(self.proc.stdout.readline, READY_TIMEOUT, "a reader's start")
        if line.strip() != "@@ready":
            raise RuntimeError(f"a reader did not start (it said {line!r})")

    def start(self):
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def send(self, line):
        with self.lock:
            try:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass

    def _follow(self):
        try:
            for line in self.proc.stdout:
                if line.startswith("@@r"):
                    self.job.read_done()
                elif line.startswith("@@epoch "):
                    self.job.epoch_ended(self, int(line.split()[1]))
                elif line.startswith("@@done"):
                    self.done = True
        finally:
            self.job.reader_ended()

    def result(self, deadline):
        try:
            self.proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"a reader of job {self.job.name} did not finish within {RUN_TIMEOUT:.0f} s")
        self._thread.join(10)
        if not self.done:
            raise RuntimeError(f"a reader of job {self.job.name} exited with status {self.proc.returncode} and no result")
        with open(self.out) as f:
            reads = json.load(f)
        for r in reads:
            r["job"], r["view"] = self.job.name, self.job.view
        return reads

    def close(self):
        _forget(self)
        end_process(self.proc, 5, signal.SIGKILL)

    def __repr__(self):
        return f"Reader({self.job.name}, {self.proc.pid})"


class Job:
    """A job's reader processes, its reads counted in `progress`, and its epoch boundary: once
    each ended epoch E, each is told "go E+1" (from the reader threads, so a restart the harness
    is timing delays no epoch). A job with a `leader` reads on credits: each read of the leader's
    sends the credits `credits` allows, and the leader's end all that is left."""

    def __init__(self, name, view, epochs, total, progress, leader=None):
        self.name, self.view, self.epochs, self.total, self.progress = name, view, epochs, total, progress
        self.leader = leader
        self.followers = []
        self.readers = []
        self.lock = threading.Lock()
        self.ended = {}
        self.reads = 0
        self.readers_ended = 0
        self.granted = 0
        if leader is not None:
            leader.followers.append(self)

    def read_done(self):
        with self.lock:
            self.reads += 1
        self.progress.add(reads=1)
        for f in self.followers:
            f.grant(credits(self.reads, self.total, f.total))

    def reader_ended(self):
        with self.lock:
            self.readers_ended += 1
            everyone = self.readers_ended == len(self.readers)
        self.progress.add(ended=1)
        if everyone:
            for f in self.followers:
                f.grant(f.total)

    def grant(self, upto):
        """Credits up to `upto` reads in all (one reader: followers have one)."""
        with self.lock:
            more = upto - self.granted
            if more <= 0:
                return
            self.granted = upto
        self.readers[0].send(f"+{more}")

    def epoch_ended(self, reader, epoch):
        with self.lock:
            self.ended.setdefault(epoch, set()).add(reader.share)
            everyone = len(self.ended[epoch]) == len(self.readers)
        if everyone and epoch < self.epochs:
            for r in self.readers:
                r.send(f"go {epoch + 1}")


# ---------------------------------------------------------------- one run, one set

def image_folder(view):
    """A view listed as torchvision's ImageFolder does: the class directories sorted, their
    image files (by extension) sorted; paths relative to the view."""
    out = []
    for cls in sorted(e.name for e in os.scandir(view) if e.is_dir()):
        out += [f"{cls}/{f}" for f in sorted(e.name for e in os.scandir(os.path.join(view, cls))
                                             if e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS))]
    return out


def source_samples(source):
    """The source's samples (image files in the class directories, relative paths) and their
    hashes: ({hash: path}, [paths], paths sharing their bytes with another)."""
    by_hash, paths, same = {}, [], []
    for cls in sorted(e.name for e in os.scandir(source) if e.is_dir()):
        for name in sorted(os.listdir(os.path.join(source, cls))):
            if not name.lower().endswith(IMAGE_EXTENSIONS):
                continue
            rel = f"{cls}/{name}"
            with open(os.path.join(source, rel), "rb") as f:
                h = hashlib.blake2b(f.read(), digest_size=16).hexdigest()
            if h in by_hash:
                same.append(rel)
            by_hash.setdefault(h, rel)
            paths.append(rel)
    return by_hash, paths, same


def restart(mount, what, binary, log):
    """One restart of the mount's server: SIGKILL (the server's pid checked to be the
    supervisor's child) or `prepfs upgrade MNT`; the time it began ("t0"), the new server's first
    answer ("t1"), the stall, the pids, for an upgrade its command's time and output."""
    old = mount.server_pid()
    rec = {"old_pid": old}
    if what == "kill":
        if parent_pid(old) != mount.proc.pid:
            raise RuntimeError(f"the server {old} is not a child of the supervisor {mount.proc.pid}")
        rec["t0"] = time.monotonic()
        os.kill(old, signal.SIGKILL)
    else:
        rec["t0"] = time.monotonic()
        done = subprocess.run([binary, "upgrade", mount.mnt], capture_output=True, text=True, timeout=STALL_TIMEOUT,
                              env={**os.environ, "NO_COLOR": "1"})
        rec["command_s"] = time.monotonic() - rec["t0"]
        rec["command_rc"] = done.returncode
        rec["command_said"] = (done.stdout + done.stderr).strip()[-500:]
        log(f"    prepfs upgrade: {rec['command_said'] or '(nothing)'} (status {done.returncode})")
        if done.returncode != 0:
            raise RuntimeError(f"prepfs upgrade failed with status {done.returncode}: {rec['command_said']}")
    rec["new_pid"], rec["t1"], rec["stats_errors"] = mount.wait_new_pid(old)
    rec["stall_s"] = rec["t1"] - rec["t0"]
    return rec


def run_once(ctx, data, info, label, with_restarts):
    """One run over `data` on a fresh mount: the jobs' readers, the restarts when asked; its
    record (reads, events, the server's figures at the end, the supervisor's log lines)."""
    work, tag = ctx["work"], f"{os.path.basename(data)}-{label}"
    cfg = os.path.join(work, "mount.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    log_path = os.path.join(ctx["logs"], tag + ".log")
    mnt = os.path.join(work, "mnt")
    rec = {"label": label, "epochs": EPOCHS, "sources": info["paths"], "events": []}
    mount = SupervisedMount(ctx["binary"], data, mnt, cfg, log_path)
    readers = []
    try:
        rec["supervisor_pid"], rec["first_server_pid"] = mount.proc.pid, mount.server_pid()
        progress = Progress()
        jobs, listing = {}, {}
        for name, view, n, checked in JOBS:
            root = os.path.join(mnt, "jobs", name, view)
            paths = timed(lambda: image_folder(root), READY_TIMEOUT, f"listing {root}")
            listing[name] = len(paths)
            list_path = os.path.join(work, f"{tag}-{name}.list")
            with open(list_path, "w") as f:
                f.write("".join(p + "\n" for p in paths))
            job = Job(name, view, EPOCHS, len(paths) * EPOCHS, progress, leader=jobs.get(PACED.get(name)))
            for k in range(n):
                r = Reader(job, k, n, list_path, root, os.path.join(work, f"{tag}-{name}-{k}.json"),
                           sources=ctx["hashes"] if checked else None)
                job.readers.append(r)
                readers.append(r)
            jobs[name] = job
        rec["listing"] = listing
        total = sum(j.total for j in jobs.values())
        rec["total_reads"] = total
        for r in readers:
            r.start()
        deadline = time.monotonic() + RUN_TIMEOUT
        for job in jobs.values():
            if job.leader is not None:
                job.grant(credits(0, job.leader.total, job.total))
        for r in readers:
            r.send("go 1")
        if with_restarts:
            for what, share, at in event_thresholds(total):
                if not progress.wait_for(at, len(readers), deadline):
                    raise RuntimeError(f"the readers did not reach {at} reads within {RUN_TIMEOUT:.0f} s")
                if progress.ended >= len(readers) or progress.reads >= total:
                    # Reads that fail at once (an error answered without the server) race ahead.
                    rec["events"].append({"what": what, "share": share, "at_reads": progress.reads,
                                          "error": "the readers had done every read first"})
                    break
                ev = {"what": what, "share": share, "at_reads": progress.reads}
                try:
                    ev.update(restart(mount, what, ctx["binary"], ctx["say"]))
                except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
                    ev["error"] = f"{type(e).__name__}: {e}"
                    rec["events"].append(ev)
                    raise
                rec["events"].append(ev)
                ctx["say"](f"    {what} at {ev['at_reads']}/{total} reads: pid {ev['old_pid']} -> {ev['new_pid']}, "
                           f"stall {ev['stall_s']:.2f} s")
        reads = []
        for r in readers:
            reads += r.result(deadline)
        rec["reads"] = reads
        try:
            stats = mount.stats()
            rec["server"] = stats.get("server")
            rec["jobs"] = [{k: j.get(k) for k in ("name", "epoch", "served_this_epoch", "samples_served", "opens",
                                                  "misses", "substitutions")}
                           for j in (stats.get("jobs") or {}).get("active") or []]
            rec["last_pid"] = stats.get("pid")
        except (RuntimeError, OSError, ValueError) as e:
            rec["stats_error"] = f"{type(e).__name__}: {e}"
        return rec
    finally:
        for r in readers:
            r.close()
        mount.close()
        rec["log_lines"], rec["serves_s"] = supervisor_lines(mount.log())
        rec["restart_delays_s"] = restart_delays(rec["log_lines"])
        rec["supervisor_status"] = mount.proc.returncode


def guarded(ctx, data, info, label, with_restarts):
    try:
        rec = run_once(ctx, data, info, label, with_restarts)
        rec["figures"] = run_figures(rec)
        return rec
    except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        return {"label": label, "error": f"{type(e).__name__}: {e}"}


def make_set(kind, gen, root, classes, per_class):
    """target/bench-data/restarts-KIND-CxP, made unless already there (its count checked)."""
    path = os.path.join(root, f"restarts-{kind}-{classes}x{per_class}")
    return servers.make_set(kind, gen, path, classes, per_class, WIDTH, HEIGHT, lambda p: p.lower().endswith(IMAGE_EXTENSIONS))


def run_set(ctx, kind, data):
    by_hash, paths, same = source_samples(data)  # also puts the source in the page cache
    info = {"samples": len(paths), "classes": len({class_of(p) for p in paths}), "paths": paths,
            "source_mb": sum(os.path.getsize(os.path.join(data, p)) for p in paths) / 1e6,
            "sources_sharing_bytes": same}
    hashes = os.path.join(ctx["work"], f"{kind}-hashes.json")
    with open(hashes, "w") as f:
        json.dump(by_hash, f)
    ctx["hashes"] = hashes
    out = {"data": show_path(data), "info": {k: v for k, v in info.items() if k != "paths"}}
    for label, with_restarts in (("baseline", False), ("restarts", True)):
        ctx["say"](f"[{kind}] {label} run ({info['samples']} samples, {EPOCHS} epochs of two jobs)")
        rec = guarded(ctx, data, info, label, with_restarts)
        out[label] = rec
        if rec.get("error"):
            ctx["say"](f"[{kind}] {label}: failed: {rec['error']}")
        else:
            f = rec["figures"]
            ctx["say"](f"[{kind}] {label}: makespan {f['makespan_s']:.2f} s, {f['reads']} reads, {f['errors']} errors")
    out["problems"] = verdict(out)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["read"]:
        return reader_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    servers.process_bench_args(ap, "restarts")
    ap.add_argument("--quick", action="store_true", help=f"the generator's set only, {QUICK_CLASSES} x {QUICK_PER_CLASS}")
    ap.add_argument("--sets", help="real,gen (default; --quick: gen)")
    ap.add_argument("--classes", type=int, help=f"classes per set (default {CLASSES}; --quick: {QUICK_CLASSES})")
    ap.add_argument("--per-class", type=int, help=f"samples per class (default {PER_CLASS}; --quick: {QUICK_PER_CLASS})")
    ap.add_argument("--report-only", metavar="JSON", help="run nothing: rewrite an earlier run's Markdown (and its "
                    "section in BENCHMARKS.md) from its JSON with this code, the figures and checks recomputed "
                    "from its reads")
    args = ap.parse_args(argv)
    if args.report_only:
        with open(args.report_only) as f:
            report = json.load(f)
        for s in report["sets"].values():  # the figures and checks again, from the reads
            for label in ("baseline", "restarts"):
                if (s.get(label) or {}).get("reads") is not None:
                    s[label]["figures"] = run_figures(s[label])
            s["problems"] = verdict(s)
        lines = summary_lines(report)
        write_report(args.out or args.report_only, report, lines, summary=lines[:4 + len(report["sets"])],
                     command=report.get("command"), date=report.get("date"))
        return 0
    sets = (args.sets or ("gen" if args.quick else "real,gen")).split(",")
    classes = args.classes or (QUICK_CLASSES if args.quick else CLASSES)
    per_class = args.per_class or (QUICK_PER_CLASS if args.quick else PER_CLASS)
    out = args.out or os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-restarts"
                                   + ("-quick" if args.quick else ""))
    if not shutil.which("fusermount3"):
        raise SystemExit("fusermount3 not found")
    if not os.path.isfile(args.prepfs):
        raise SystemExit(f"{args.prepfs} not found: build it (cargo build --release -p prepfs --examples)")
    binary = os.path.abspath(args.prepfs)
    servers.end_on_exit()
    work = tempfile.mkdtemp(prefix="prepfs-restarts-")
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    report = {"binary": show_path(binary), "config": CONFIG, "epochs": EPOCHS, "classes": classes,
              "per_class": per_class, "events": [list(e) for e in EVENTS], "command": script_command(),
              "commit": git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "load_before": os.getloadavg(), "sets": {}}
    say = lambda text: print(text, flush=True)  # noqa: E731
    try:
        ctx = {"binary": binary, "work": work, "logs": logs, "say": say}
        for kind in sets:
            data = make_set(kind, args.gen, args.data_root, classes, per_class)
            report["sets"][kind] = run_set(ctx, kind, data)
    finally:
        _end_all()
        report["left_mounted"] = our_mounts(work)
        keep = os.path.join(os.path.dirname(os.path.abspath(out)), os.path.basename(out) + "-logs")
        if report["sets"]:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(logs, keep, dirs_exist_ok=True)
        if not report["left_mounted"]:
            shutil.rmtree(work, ignore_errors=True)
    report["load_after"] = os.getloadavg()
    lines = summary_lines(report)
    write_report(out, report, lines, summary=lines[:4 + len(report["sets"])])
    failed = any(s.get("problems") for s in report["sets"].values())
    return 1 if failed or report["left_mounted"] else 0


if __name__ == "__main__":
    sys.exit(main())
