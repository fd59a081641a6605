"""prepfs_bench.report: the written results.

Owns `write_report` (targets and ratios, then the results JSON, the charts and BENCHMARKS.md:
this run's report above the "Runs" recorded so far, which it keeps, and this run's section in
them, written by prepfs_bench.runs),
the Markdown of BENCHMARKS.md (`render_markdown`: the command and the machine, how to read it,
the targets, the table with its pending rows, the FUSE floor's section (`render_floor_section`),
the warm starts, scenario 4's section, the method), its tables, and the progress lines printed after each case or variant. The charts
themselves are prepfs_bench.charts'.
"""

from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence

from . import loaders, show_path
from .charts import write_charts, write_jobs_chart
from .plan import SCENARIO_TITLES, SHORT
from .refill import REFILL_MAX_S, REFILL_STABLE_S
from .runs import append_run, split_runs, summary_of
from .stats import find_variant, fuse_floor, makespan_reduction, ratio, ratios, targets
from .units import fmt_bytes, fmt_num, fmt_pct, fmt_ratio


def pending_rows(cache_on: Optional[bool], done: Sequence[str] = (),
                 why: Optional[str] = None) -> List[List[str]]:
    """Table rows for the scenarios of issue 3 that were not run (2p: rows 2pc/2pd; 4: rows
    4a-4c; `done` lists the ids that were), as wide as TABLE_HEADER. `why`: the reason to
    show (default: what each needs)."""
    blank = [""] * (len(TABLE_HEADER) - 5)
    rows = []
    if not any(d.startswith("2p") for d in done):
        rows.append(["2p", "2 warm, 25% cache", "prepfs with a cache of 25% of the set",
                     "prepfs augmented/",
                     f"pending: {why}" if why else
                     "pending: needs the harness to mount prepfs (--prepfs-bin)" if cache_on
                     else "pending: needs a prepfs cache"] + blank)
    if not any(d.startswith("4") for d in done):
        rows.append(["4", "4 concurrent jobs", "3 jobs x 2 epochs, cache 25%, read-limited "
                     "source: torchvision, prepfs without jobs, prepfs with ODS",
                     "makespan, hit rate",
                     f"pending: {why}" if why else
                     "pending: needs the harness to mount prepfs (--prepfs-bin)"] + blank)
    return rows


def floor_pending_row(settings: dict, done: Sequence[str] = ()) -> List[List[str]]:
    """The row of the FUSE floor (3h-3k, issue 12) when it was not run and why, as wide as
    TABLE_HEADER; [] when it was run or not asked for by its setting."""
    fl = settings.get("fuse_floor") or {}
    if not fl.get("why") or any(d in ("3h", "3i", "3j", "3k") for d in done):
        return []
    return [["3h-3k", SCENARIO_TITLES["floor"], "raw reader (whole files)",
             "floor (trivial fuser, plain / passthrough)", f"pending: {fl['why']}"]
            + [""] * (len(TABLE_HEADER) - 5)]


FLOOR_HEADER = ["#", "row", "files/s (median)", "min - max", "files x bytes",
                "bytes read per file", "FUSE requests per open", "prepfs warm / this"]


def render_floor_section(report: dict) -> List[str]:
    """BENCHMARKS.md's section on issue 12's FUSE floor: what 3h/3i served, their rates, and
    prepfs's warm rate as a ratio of each ([] without floor rows)."""
    ff = report.get("fuse_floor")
    if not ff:
        return []
    fl = report["settings"].get("fuse_floor") or {}
    spec = fl.get("spec") or {}
    cpus = ",".join(str(c) for c in report["settings"]["cpus"])
    pid = ff.get("prepfs_case")
    out = ["## FUSE floor (issue 12)", "",
           f"Rows 3h-3k: the raw reader of row 3d ({report['settings']['workers']} threads, "
           f"each file opened and read whole, one pass per run, one unmeasured pass first) over "
           f"`examples/floorfs`, a trivial fuser filesystem of this project serving "
           f"{fmt_num(spec.get('files'))} files of {fmt_num(spec.get('size'))} bytes from memory "
           f"(3h, 3i: every file from one buffer, which stays in the CPU's caches; 3j, 3k: each "
           f"file its own content, as prepfs's outputs are): as many files as 3d reads, each of the size prepfs serves an "
           f"augmented output ({spec.get('size_from', 'stat on the mount')}), with "
           f"{fl.get('threads')} FUSE threads (prepfs's `fuse_threads`), pinned to CPUs {cpus} "
           f"like everything else, mounted for its row only, in the same run. Plain: each open "
           f"answered `FOPEN_DIRECT_IO`, as prepfs answers opens of `augmented/`, so every read "
           f"is a FUSE `READ` answered from memory. Passthrough: each open answered "
           f"`FOPEN_PASSTHROUGH` with a backing memfd, so reads never reach the daemon (LOOKUP, "
           f"OPEN and RELEASE still do). What no FUSE daemon on this machine can beat with the "
           f"same opens; the CPU column of the main table includes floorfs's own.", ""]
    rows = []
    for r in ff["rows"]:
        if r["samples_per_s"] is None:
            rows.append([r["id"], r["name"], r.get("not_measured") or "not measured"]
                        + [""] * (len(FLOOR_HEADER) - 3))
            continue
        rows.append([r["id"], r["name"], fmt_num(r["samples_per_s"]),
                     f"{fmt_num(r['min'])} - {fmt_num(r['max'])}",
                     f"{fmt_num(r['files'])} x {fmt_num(r['size'])}",
                     fmt_num(r.get("bytes_per_file")),
                     fmt_num(r.get("requests_per_open"), 1),
                     fmt_ratio(r["prepfs_ratio"])])
    out += [markdown_table(FLOOR_HEADER, rows), ""]
    if ff.get("prepfs_samples_per_s"):
        out += [f"prepfs warm ({pid}: "
                + ("the raw reader over prepfs's cached outputs, after the refill wait"
                   if pid == "3d" else "the raw reader over prepfs `augmented/`, warm")
                + f"): {fmt_num(ff['prepfs_samples_per_s'])} files/s, "
                + f"{fmt_num(ff.get('prepfs_bytes_per_file'))} bytes read per file"
                + (f", {fmt_pct(ff['prepfs_hit_rate'])} of its outputs from the augmented "
                   f"cache (the rest augmented at open)"
                   if ff.get("prepfs_hit_rate") is not None else "") + "; "
                + "; ".join(f"{fmt_ratio(r['prepfs_ratio'])} of {r['name']}"
                            for r in ff["rows"] if r["prepfs_ratio"] is not None)
                + ". Issue 12's target: at least 1.3x the plain floor.", ""]
    else:
        out += ["prepfs's warm rate (3d, 2d) was not measured in this run: no ratio.", ""]
    return out


def floor_line(report: dict) -> Optional[str]:
    """The progress line with prepfs's warm rate as a ratio of the FUSE floor, or None."""
    ff = report.get("fuse_floor")
    if not ff:
        return None
    parts = []
    for r in ff["rows"]:
        if r["samples_per_s"] is None:
            parts.append(f"{r['name']}: {r.get('not_measured') or 'not measured'}")
        else:
            parts.append(f"{fmt_ratio(r['prepfs_ratio'])} of {r['name']} "
                         f"({fmt_num(r['samples_per_s'])} files/s)")
    head = (f"prepfs warm ({ff['prepfs_case']}) {fmt_num(ff['prepfs_samples_per_s'])} files/s"
            if ff.get("prepfs_samples_per_s") else "prepfs warm not measured")
    return f"[bench] FUSE floor: {head} = " + ", ".join(parts)


def fmt_hit_rate(cache: Optional[dict]) -> str:
    """Share of the measured runs' augmented outputs taken from prepfs's cache ("" for rows
    without a prepfs cache)."""
    if not cache or cache.get("augmented_hit_rate") is None:
        return ""
    return f"{cache['augmented_hit_rate'] * 100:.0f}%"


def table_rows(results: Sequence[dict]) -> List[List[str]]:
    rat = ratios(results)
    rows = []
    for c in results:
        head = [c["id"], SCENARIO_TITLES.get(c["scenario"], c["scenario"]), c["label"],
                c["reads"]]
        if c.get("error"):
            rows.append(head + [f"failed: {c['error'].splitlines()[0][:80]}"]
                        + [""] * (len(TABLE_HEADER) - 5))
            continue
        if c.get("skipped") or not c.get("summary"):
            rows.append(head + [c.get("skipped") or "not measured"]
                        + [""] * (len(TABLE_HEADER) - 5))
            continue
        s = c["summary"]
        sps = s["samples_per_s"]
        cpu = s["cpu_s_per_sample"]["median"]
        mem = s["peak_pss_mb"] if s.get("peak_pss_mb") is not None else s["peak_rss_mb"]
        rows.append(head + [
            fmt_num(sps["median"]),
            f"{fmt_num(sps['min'])} - {fmt_num(sps['max'])}",
            fmt_num(None if cpu is None else cpu * 1000, 2),
            fmt_num(mem),
            fmt_ratio(rat[c["id"]]["torchvision"]),
            fmt_ratio(rat[c["id"]]["dali"]),
            fmt_hit_rate(s.get("cache")),
        ])
    return rows


TABLE_HEADER = ["#", "scenario", "loader", "reads", "samples/s (median)", "min - max",
                "CPU ms/sample", "peak mem MB", "vs torchvision", "vs DALI",
                "outputs from prepfs cache"]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Scenario 4's rows of the main table, and its own table


def jobs_rows(jobs: Optional[dict]) -> List[List[str]]:
    """Rows of the main table for scenario 4 (as wide as TABLE_HEADER): samples/s is all the
    jobs' samples over the makespan; vs torchvision is against 4a; the last column the hit
    rate."""
    rows = []
    base = find_variant(jobs, "4a")
    base_sps = base["summary"]["samples_per_s"]["median"] if base else None
    st = (jobs or {}).get("settings") or {}
    head_label = f"{st.get('jobs', 3)} x "
    for v in (jobs or {}).get("variants") or []:
        head = [v["id"], SCENARIO_TITLES["jobs"], head_label + v["label"]
                + f", {st.get('epochs', 2)} epochs each", v["reads"]]
        if v.get("error") and not v.get("summary"):
            rows.append(head + [f"failed: {v['error'].splitlines()[0][:80]}"]
                        + [""] * (len(TABLE_HEADER) - 5))
            continue
        s = v["summary"]
        sps = s["samples_per_s"]
        cpu = s.get("cpu_s_per_sample")
        hit = s.get("hit_rate")
        rows.append(head + [
            fmt_num(sps["median"]),
            f"{fmt_num(sps['min'])} - {fmt_num(sps['max'])}",
            fmt_num(None if cpu is None else cpu * 1000, 2),
            "-",
            fmt_ratio(ratio(sps["median"], base_sps)),
            "-",
            ("0% (no cache)" if v["key"] == "torchvision" else fmt_pct(hit)),
        ])
    return rows


JOBS_HEADER = ["#", "variant", "makespan s (median)", "min - max", "each job's wall s",
               "hit rate", "source read", "CPU s (loaders + daemon)", "makespan vs 4a"]


def jobs_table(jobs: dict) -> List[List[str]]:
    """The scenario's own table: one row per variant."""
    rows = []
    data_bytes = ((jobs or {}).get("settings") or {}).get("data_bytes")
    for v in jobs.get("variants") or []:
        if v.get("error") and not v.get("summary"):
            rows.append([v["id"], v["key"], f"failed: {v['error'].splitlines()[0][:80]}"]
                        + [""] * (len(JOBS_HEADER) - 3))
            continue
        s = v["summary"]
        ms = s["makespan_s"]
        src = s.get("source_bytes_read")
        src_txt = fmt_bytes(src)
        if src is not None and data_bytes:
            src_txt += f" ({src / data_bytes:.1f}x the set)"
        red = makespan_reduction(jobs, v["id"])
        hit = "0% (no cache)" if v["key"] == "torchvision" else fmt_pct(s.get("hit_rate"))
        rows.append([
            v["id"], v["key"], fmt_num(ms["median"], 1),
            f"{fmt_num(ms['min'], 1)} - {fmt_num(ms['max'], 1)}",
            ", ".join(fmt_num(w, 1) for w in s["job_wall_s"]),
            hit, src_txt, fmt_num(s.get("cpu_s"), 1),
            "-" if v["id"] == "4a" else ("-" if red is None else f"{-red * 100:+.0f}%"),
        ])
    return rows


def cache_desc(cache_on: Optional[bool], stats: Optional[dict]) -> str:
    if cache_on is None:
        return "not known (no prepfs statistics)"
    if not cache_on:
        return ("none: the mount config sets no cache (or this prepfs has none), so every open "
                "of `augmented/` decodes and augments afresh; \"warm\" rows for prepfs have "
                "only the source JPEGs in the kernel page cache")
    c = (stats or {}).get("cache") or {}
    mem, split = c.get("memory"), c.get("split")
    out = f"{mem / 2**20:.0f} MiB" if isinstance(mem, (int, float)) else "on"
    if isinstance(split, (list, tuple)) and len(split) == 3:
        out += (f", split encoded-decoded-augmented {'-'.join(str(x) for x in split)} "
                f"(as the mount chose it)")
    return out + ("; remounted empty before every cold run; the last column of the table is "
                  "the share of a row's outputs taken from it (the rest computed at open)")


RUNS_POINTER = ("The latest `make bench` run first; below it, under \"Runs\", every benchmark "
                "run's summary table, newest first.")


def render_markdown(report: dict, charts: Sequence[str], md_dir: str) -> str:
    """BENCHMARKS.md above its "Runs": the command and the machine, how to read it, the
    targets, the table, the charts, the method."""
    m, s = report["machine"], report["settings"]
    tgt = report["targets"]
    cache_on = s.get("prepfs", {}).get("cache_on")
    invoked = report.get("invoked_as")
    out = ["# prepfs benchmarks", "", RUNS_POINTER, ""]
    if invoked:
        out.append(f"Produced by `{invoked}`" + (" (a quick run)" if report["quick"] else "")
                   + f", which ran `{report['command']}`.")
    else:
        out.append(f"Produced by `{report['command']}`"
                   + (" (quick run)" if report["quick"] else "") + ".")
    out.append("")
    cpus = ",".join(str(c) for c in s["cpus"])
    pk = m.get("packages") or {}
    pkgs = ", ".join(f"{k} {v}" for k, v in pk.items() if v)
    la = m["loadavg_before"]
    after = m.get("loadavg_after")
    out += [
        f"- Date: {report['date']}",
        f"- Machine: {m['cpu_model']}; nproc {m['nproc']}; every process of a case (loader, "
        f"its workers, the prepfs daemon) pinned to CPUs {cpus}; {m['mem_gib']:.0f} GiB "
        f"memory; Linux {m['kernel']}; Python {m.get('python', '?')}"
        + (f" ({pkgs})" if pkgs else ""),
        f"- Load average (1 min) {la[0]:.2f} before the runs"
        + (f", {after[0]:.2f} after" if after else ""),
    ]
    if report.get("build_info"):
        out.append(f"- Build: {report['build_info']}")
    out.append(f"- Data: {s['data_samples']} JPEGs in {s['data_classes']} classes, "
               f"{s['data_mb']:.0f} MB (mean {s['data_mean_kb']:.0f} KB)"
               + (f", {s['data_info']}" if s.get("data_info") else ""))
    out.append(f"- Each case: {s['reps']} measured runs of {s['samples_desc']}, "
               f"{s['workers']} workers or threads, batch {loaders.BATCH_SIZE}; page cache "
               f"dropped before cold runs: {report['page_cache_drop']}")
    out.append(f"- prepfs: {s['prepfs']['desc']}")
    if s.get("prepfs", {}).get("kind") in ("driver-mount", "external-mount"):
        out.append(f"- prepfs cache: {cache_desc(cache_on, s['prepfs'].get('stats'))}")
    if s.get("prepfs", {}).get("cache25_bytes"):
        c25 = s["prepfs"]
        out.append(f"- prepfs cache of rows 2pc/2pd: {fmt_bytes(c25['cache25_bytes'])}, 25% of the "
                   f"data set's bytes on storage, `split: {c25.get('cache25_split_asked', 'auto')}`, "
                   f"`policy: {c25.get('cache25_policy', 'auto')}`"
                   + (f" (the mount chose encoded-decoded-augmented {c25['cache25_split']})"
                      if c25.get("cache25_split") else ""))
    if la[0] > 0.5:
        out.append("")
        out.append(f"**Warning:** the machine was busy when the runs started (load average "
                   f"{la[0]:.2f} on {m['nproc']} CPUs: other work was running); samples/s is "
                   f"lower and noisier than on an idle machine. CPU ms per sample is the "
                   f"steadier figure.")
    out.append("")
    out += [
        "## How to read this", "",
        "- Each row is one loader, as a user would write it, reading one tree in one cache "
        "state, on the same cores and the same images. The id is scenario + loader: 1 cold "
        "(nothing cached anywhere), 2 warm (after one unmeasured pass), 3 floor (the raw rate "
        "of prepfs against tmpfs); a torchvision, b DALI CPU, e plain PIL (the peers, doing the "
        "whole ImageNet train transform themselves on the JPEGs), c the same torchvision loop "
        "over prepfs `augmented/` with only ToTensor + Normalize left, n torch over prepfs's "
        "normalized float32 `.npy` with no transform, d a raw reader of whole files (the "
        "filesystem's own rate: no loader can beat it), f/g the same over a tmpfs copy, h/i "
        "the raw reader over a trivial fuser filesystem serving same-size files from memory, "
        "plain and with kernel passthrough (the FUSE floor, see its section).",
        "- samples/s: higher is better; the median of the runs, min - max the spread. "
        "vs torchvision / vs DALI: this row's samples/s over 1a / 1b for cold rows, over 2a / "
        "2b for warm and floor rows (1a / 1b when the warm peers were not run).",
        "- CPU ms/sample: all the CPU one sample cost, the prepfs daemon's included: on a "
        "training machine these are cores taken from the job. Less sensitive to other load "
        "than samples/s.",
        "- The headline is 1c against 1a and 1b: the same training loop, pointed at "
        "`augmented/` instead of the JPEGs. 3d against 3f is what FUSE costs.",
        "- 2pc / 2pd: the loaders of 2c / 2d on a second mount whose cache is 25% of the data "
        "set's size on storage (Seneca's convention: \"X% cached\" is a cache X% the size of "
        "the data set), split as prepfs's model picks it, after one unmeasured pass.",
        "- 4a-4c: three training jobs started together, each reading the whole set for two "
        "epochs from read-limited storage (see \"Scenario 4\" below): 4a torchvision on the "
        "JPEGs, 4b the same jobs over prepfs `augmented/` (no jobs), 4c over "
        "`jobs/job<i>/augmented/` (opportunistic sampling); samples/s is all the jobs' samples "
        "over the makespan, vs torchvision is against 4a, the last column the hit rate.",
    ]
    jobs = report.get("jobs")
    done = ([c["id"] for c in report["cases"]]
            + [v["id"] for v in ((jobs or {}).get("variants") or [])])
    pending = (pending_rows(cache_on, done, s.get("pending_why"))
               if s.get("prepfs", {}).get("kind") in ("driver-mount", "external-mount") else [])
    pending += floor_pending_row(s, done) if s.get("prepfs", {}).get("kind") else []
    if cache_on is False:
        out.append("- prepfs has no sample cache yet, so its warm rows (2c, 2d, 2n) and 3d "
                   "measure outputs computed at open from a source already in the page cache, "
                   "not cached outputs; the warm and floor targets are about cached outputs.")
    elif cache_on:
        out.append("- prepfs runs with its sample cache on (see above): cold rows start with it "
                   "empty (their hits are outputs its background refill made ahead of the "
                   "reader during the run), warm rows and 3d come after one unmeasured pass; "
                   "the last column says how many of the row's outputs it served.")
    if pending:
        out.append("- Rows marked pending are scenarios of issue 3 that need work not yet "
                   "done; they are listed so the table shows the whole plan.")
    out.append("")
    if any(t["ratio"] is not None for t in tgt):
        out += ["## Targets", ""]
        rows = [[t["target"], t["cases"], t.get("shown") or fmt_ratio(t["ratio"]),
                 "-" if t["met"] is None else ("met" if t["met"] else "**missed**"),
                 t.get("note", "")]
                for t in tgt]
        out += [markdown_table(["target", "cases", "measured", "", "note"], rows), ""]
    rows = table_rows(report["cases"]) + jobs_rows(jobs) + pending
    out += ["## Results", "", markdown_table(TABLE_HEADER, rows), ""]
    out += chart_lines([c for c in charts if not c.endswith("-jobs.png")], md_dir)
    out += render_floor_section(report)
    warm = warm_start_rows(report["cases"])
    if warm:
        out += ["## Warm starts", "",
                "Before each measured run of a warm or floor row that reads a prepfs cache, the "
                "harness waits for the background refill to catch up (the augmented cache is "
                f"use-once: a pass empties it): it polls `stats.json` until "
                f"`cache.augmented.entries` has not grown for {REFILL_STABLE_S:g} s or holds "
                f"every sample, for at most {REFILL_MAX_S:.0f} s. What the measured runs "
                "started with:", "",
                markdown_table(WARM_HEADER, warm), ""]
    if jobs:
        out += render_jobs_section(jobs, [c for c in charts if c.endswith("-jobs.png")],
                                   md_dir)
    out += [
        "## How it is measured", "",
        "- samples/s: samples delivered to the consumer over the wall time from the first "
        "request to the last sample (building the dataset or pipeline excluded); the median of "
        "the runs, with the smallest and the largest.",
        "- CPU ms/sample: user + system CPU of the loader process, its threads and its worker "
        "processes, plus the prepfs daemon's for rows that read prepfs; the median of the runs.",
        "- peak mem: the largest, over the runs, of the summed memory of the loader process and "
        "its workers (PSS: pages shared by forked workers counted once; sampled 0.3 s and 1 s into "
        "each run, then every 2 s, so short peaks may be missed; the RSS sum where no PSS "
        "sample was taken) plus the prepfs daemon's RSS. RSS sums are in the JSON.",
        "- cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before each measured run, and prepfs "
        "remounted with an empty cache when the harness mounts it; warm: one unmeasured run "
        "first (the raw reader repeats its pass for at least 1 s over tmpfs; over prepfs it "
        "reads one pass, as the cache holds one output per sample, used once). "
        "vs torchvision / vs DALI: against 1a / 1b for cold rows, 2a / 2b otherwise (1a / 1b "
        "where the warm peers were not run).",
        "- warm and floor rows over a prepfs cache (2c, 2d, 2n, 2pc, 2pd, 3d): after the "
        "warm-up pass and before each measured run, the wait for the refill described under "
        "\"Warm starts\" (its length and the cache's augmented entries at the start of each "
        "run are in the JSON, `refill_wait`); the wait is not part of the measured run.",
        "- scenario 4: see its section; each variant on a freshly mounted prepfs (empty cache) "
        "and a dropped page cache, the three job processes started together once their imports "
        "are done; makespan from the first job's start to the last job's end (CLOCK_MONOTONIC, "
        "listing the tree included); CPU: the job processes, their DataLoader workers and the "
        "daemon.",
        f"- Raw JSON (not in git): `{os.path.relpath(report['json_path'], md_dir)}`.",
        "",
    ]
    return "\n".join(out)


def chart_lines(charts: Sequence[str], md_dir: str) -> List[str]:
    """The charts named, relative to MD_DIR: they stay beside the raw JSON, out of git, so
    BENCHMARKS.md names them instead of showing them."""
    if not charts:
        return []
    return ["Charts (not in git): " + ", ".join(f"`{os.path.relpath(c, md_dir)}`" for c in charts)
            + ".", ""]


WARM_HEADER = ["#", "refill wait s (median, max)", "augmented entries at the start (min - max)",
               "of samples", "how the waits ended"]


def warm_start_rows(results: Sequence[dict]) -> List[List[str]]:
    rows = []
    for c in results:
        rw = (c.get("summary") or {}).get("refill_wait")
        if not rw:
            continue
        w, e = rw["waited_s"], rw["augmented_entries_start"]
        rows.append([c["id"], f"{fmt_num(w['median'], 1)}, {fmt_num(w['max'], 1)}",
                     f"{fmt_num(e['min'])} - {fmt_num(e['max'])}",
                     fmt_num(rw.get("target")),
                     ", ".join(f"{k} x{v}" for k, v in sorted(rw["reasons"].items()))])
    return rows


def render_jobs_section(jobs: dict, charts: Sequence[str], md_dir: str) -> List[str]:
    """BENCHMARKS.md's section on scenario 4: the setting, the table, Seneca's figures."""
    st = jobs.get("settings") or {}
    out = ["## Scenario 4: concurrent jobs", ""]
    rate = st.get("read_limit_bytes_per_s")
    mean = (st["data_bytes"] / st["data_samples"]) if st.get("data_samples") else None
    per_sample = rate / mean if rate and mean else None
    cpus = ",".join(str(c) for c in st.get("cpus") or [])
    text = (f"{st.get('jobs', 3)} training jobs started together, each a process running "
            f"torchvision `ImageFolder` + `DataLoader(shuffle=True, num_workers="
            f"{st.get('workers', 2)}, batch_size={st.get('batch_size', 64)})` for "
            f"{st.get('epochs', 2)} epochs over {st.get('data_samples', '?')} images "
            f"({fmt_bytes(st.get('data_bytes'))})")
    if st.get("subset"):
        text += f" ({st['subset']})"
    text += (f"; everything (jobs, their workers, the prepfs daemons) pinned to CPUs {cpus}, "
             f"as the other rows. Storage: every read of the source goes through prepfs's "
             f"read limit, `{st.get('read_limit')}`")
    if per_sample:
        text += f" ({per_sample:.0f} samples/s of the mean {mean / 1e3:.0f} KB JPEG)"
    mi = st.get("model_inputs") or {}
    if mi.get("t_da"):
        text += (f"; prepfs measured, while serving, decode + augment at {mi['t_da']:.0f} "
                 f"samples/s on these cores")
        if mi.get("b_storage"):
            text += f" and the storage at {mi['b_storage'] / 1e6:.1f} MB/s"
    a = find_variant(jobs, "4a")
    if a and a["summary"]["samples_per_s"]["median"]:
        text += (f"; the torchvision jobs of 4a together reached "
                 f"{a['summary']['samples_per_s']['median']:.0f} samples/s")
    text += (f". Cache for 4b and 4c: {fmt_pct(st.get('cache_share'))} of the set's bytes on "
             f"storage ({fmt_bytes(st.get('cache_bytes'))}), `split: {st.get('cache_split', 'auto')}`, "
             f"`policy: {st.get('cache_policy', 'auto')}`")
    if st.get("split"):
        text += f" (the mount chose encoded-decoded-augmented {st['split']})"
    text += (f". Each variant on a freshly mounted prepfs (empty cache) after dropping the page "
             f"cache; the median of {st.get('reps', '?')} run(s) (min - max).")
    out += [text, ""]
    out += [f"- 4a: torchvision with the full ImageNet train transform on the JPEGs, read from "
            f"`encoded/` of a second prepfs mount that is only the read-limited storage (no "
            f"cache); its `ImageFolder` loader reads each file and drops it from the page cache "
            f"({st.get('uncached_desc') or 'posix_fadvise DONTNEED'}) so each epoch of each job "
            f"reads the storage, as with a data set larger than memory. Hit rate 0% by "
            f"construction.",
            "- 4b: the same jobs over prepfs's top-level `augmented/` with only ToTensor + "
            "Normalize; no job names, so no opportunistic sampling. Hit rate: "
            "`views.augmented` hits / (hits + misses) over the run (a hit: an open served from "
            "any cache form without reading the source).",
            "- 4c: the same, job i reading `jobs/job<i>/augmented/` (opportunistic sampling). "
            "Hit rate: the jobs' hits (augmented, decoded, encoded) over hits + misses, summed "
            "over `jobs.active` in stats.json.",
            "- 4d: as 4c, with the cache set as README advises for concurrent jobs: `policy: lru` "
            "(with ODS, entries just admitted are what the other jobs are served next) and the "
            "consumers' rate given to the model (`consumer_samples_per_s`, row 3g's figure), so "
            "`split: auto` does not rate augmented hits at memory speed.", ""]
    out += [markdown_table(JOBS_HEADER, jobs_table(jobs)), ""]
    red_c, red_b = makespan_reduction(jobs, "4c"), makespan_reduction(jobs, "4b")
    vc, vb = find_variant(jobs, "4c"), find_variant(jobs, "4b")
    line = ("Against Seneca's published figures (FAST '26; 45% less makespan than PyTorch, a "
            "54% hit rate with 20% of the data cached): makespan ")
    def vs_a(red: float) -> str:
        return (f"{fmt_pct(red)} below 4a's" if red >= 0 else f"{fmt_pct(-red)} above 4a's")
    line += (f"{vs_a(red_c)} with ODS (4c)" if red_c is not None else "not measured with ODS")
    if red_b is not None:
        line += f", {vs_a(red_b)} without jobs (4b)"
    line += "; hit rate "
    line += fmt_pct(vc["summary"].get("hit_rate")) + " with ODS" if vc else "not measured"
    if vb:
        line += f", {fmt_pct(vb['summary'].get('hit_rate'))} without jobs"
    vd, red_d = find_variant(jobs, "4d"), makespan_reduction(jobs, "4d")
    if vd:
        line += (f"; with the cache set for concurrent jobs (4d: policy lru, the consumers' rate "
                 f"given to the model), makespan {vs_a(red_d) if red_d is not None else 'n/a'} "
                 f"and hit rate {fmt_pct(vd['summary'].get('hit_rate'))}")
    line += f", with {fmt_pct(st.get('cache_share'))} cached."
    out += [line, ""]
    checks = jobs_checks(jobs)
    if checks:
        out += ["Checks:", ""] + [f"- {c}" for c in checks] + [""]
    for ch in charts:
        out += chart_lines([ch], md_dir)
    return out


def jobs_checks(jobs: dict) -> List[str]:
    """What the figures say about the runs themselves: whether 4a really read the storage every
    epoch, and whether each ODS job was served every sample once per epoch."""
    out = []
    st = jobs.get("settings") or {}
    a = find_variant(jobs, "4a")
    if a:
        shares = [r.get("source_read_share") for r in a.get("runs") or []
                  if r.get("source_read_share") is not None]
        if shares:
            ok = all(x >= 0.95 for x in shares)
            out.append(f"4a read {min(shares) * 100:.0f}% - {max(shares) * 100:.0f}% of "
                       f"{st.get('jobs', 3)} jobs x {st.get('epochs', 2)} epochs x the set's "
                       f"bytes from the storage mount: "
                       + ("every epoch of every job read the storage" if ok else
                          "**some reads were served from the page cache**"))
    for vid in ("4b", "4c", "4d"):
        v = find_variant(jobs, vid)
        if not v:
            continue
        for r in v.get("runs") or []:
            want = st.get("data_samples", 0) * st.get("epochs", 2)
            got = [j.get("samples") for j in r.get("jobs") or []]
            if want and any(g != want for g in got):
                out.append(f"{vid}: jobs delivered {got} samples, not {want} each")
                break
    for vid in ("4c", "4d"):
        c = find_variant(jobs, vid)
        if not c:
            continue
        served = []
        for r in c.get("runs") or []:
            served += [(js.get("name"), js.get("samples_served"), js.get("epoch"))
                       for js in r.get("job_stats") or []]
        want = st.get("data_samples", 0) * st.get("epochs", 2)
        if served:
            bad = [x for x in served if x[1] != want]
            out.append(f"{vid}: prepfs counted " + (
                f"{want} samples served to every job ({st.get('epochs', 2)} epochs of "
                f"{st.get('data_samples')})" if not bad else
                "samples served per job " + ", ".join(f"{n}: {k}" for n, k, _ in served)
                + f" (expected {want} each)"))
    return out


def progress_line(rec: dict) -> str:
    head = f"[bench] {rec['id']:<3} {rec['scenario']:<5} {SHORT.get(rec['loader'], rec['loader'])}" \
           f" on {rec['reads']}"
    if rec.get("error") and not rec.get("summary"):
        return f"{head}: FAILED: {rec['error']}"
    if rec.get("skipped"):
        return f"{head}: {rec['skipped']}"
    s = rec["summary"]
    sp = s["samples_per_s"]
    mem = s["peak_pss_mb"] if s.get("peak_pss_mb") is not None else s["peak_rss_mb"]
    line = (f"{head}: {fmt_num(sp['median'], 1)} samples/s ({fmt_num(sp['min'], 1)} - "
            f"{fmt_num(sp['max'], 1)}), {s['cpu_s_per_sample']['median'] * 1e3:.2f} ms CPU/sample,"
            f" {fmt_num(mem)} MB  [{s['runs']} x {s['samples_per_run']}]")
    rw = s.get("refill_wait")
    if rw:
        line += (f"  [refill wait {fmt_num(rw['waited_s']['median'], 1)} s, "
                 f"{fmt_num(rw['augmented_entries_start']['min'])}-"
                 f"{fmt_num(rw['augmented_entries_start']['max'])} augmented at start]")
    if rec.get("error"):
        line += f"  (partly failed: {rec['error']})"
    return line


def jobs_progress_line(v: dict) -> str:
    head = f"[bench] {v['id']:<3} jobs  {v['key']} on {v['reads']}"
    if v.get("error") and not v.get("summary"):
        return f"{head}: FAILED: {v['error']}"
    s = v["summary"]
    ms = s["makespan_s"]
    hit = "0% (no cache)" if v["key"] == "torchvision" else fmt_pct(s.get("hit_rate"))
    line = (f"{head}: makespan {fmt_num(ms['median'], 1)} s ({fmt_num(ms['min'], 1)} - "
            f"{fmt_num(ms['max'], 1)}), jobs {', '.join(fmt_num(w, 1) for w in s['job_wall_s'])}"
            f" s, hit rate {hit}, source {fmt_bytes(s.get('source_bytes_read'))}, CPU "
            f"{fmt_num(s.get('cpu_s'), 1)} s  [{s['runs']} run(s)]")
    if v.get("error"):
        line += f"  (partly failed: {v['error']})"
    return line


def write_report(report: dict, out: str, charts_dir: str, md: str) -> None:
    """Targets and ratios from the cases, then the JSON, the charts and BENCHMARKS.md."""
    report["targets"] = targets(report["cases"],
                                report["settings"].get("prepfs", {}).get("cache_on"),
                                report.get("jobs"))
    for c in report["cases"]:
        c["ratios"] = ratios(report["cases"])[c["id"]]
    report["fuse_floor"] = fuse_floor(report["cases"])
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    report["json_path"] = out
    charts_dir = os.path.abspath(charts_dir)
    os.makedirs(charts_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(out))[0]
    charts = write_charts(report, os.path.join(charts_dir, stem))
    charts += write_jobs_chart(report, os.path.join(charts_dir, stem))
    report["charts"] = charts
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    md = os.path.abspath(md)
    try:
        with open(md) as f:
            _, runs = split_runs(f.read())
    except FileNotFoundError:
        runs = ""
    text = render_markdown(report, charts, os.path.dirname(md))
    with open(md, "w") as f:  # the latest run's report, above the runs recorded so far
        f.write(text.rstrip("\n") + "\n\n" + runs if runs else text)
    invoked = report.get("invoked_as")
    command = (f"`{invoked}`, which ran " if invoked else "") + f"`{report['command']}`"
    results = text.split("\n## Results\n", 1)[1].split("\n## ", 1)[0].split("\n")
    append_run(md, stem, command,
               ["`make bench`'s results (\"How to read this\" above says what the columns are):",
                ""] + summary_of(results), f"`{show_path(out)}` and its charts (kept out of git)")
    print(f"[bench] wrote {out}, {md}" + "".join(f", {c}" for c in charts), flush=True)
    for t in report["targets"]:
        if t["ratio"] is not None:
            print(f"[bench] target {t['target']}: {t.get('shown') or fmt_ratio(t['ratio'])} "
                  f"({'met' if t['met'] else 'missed'})", flush=True)
    line = floor_line(report)
    if line:
        print(line, flush=True)
