"""prepfs_bench.stats: the figures, from the runs' records (pure functions).

Owns the summary of a case's runs (`summarize`: samples/s, CPU per sample with the daemon's,
peak memory, cache hits, refill waits), the ratios to the torchvision and DALI case of the same
cache state, the issue's targets, and scenario 4's figures (makespan, hit rates from
stats.json, one run's record, a variant's summary, the makespan against 4a, Seneca's targets).
Standard library only, so the self-test (bench/tests) tests them without torch.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence

from .plan import FLOOR_ROWS
from .units import fmt_pct, fmt_ratio


def spread(values: Sequence[float]) -> Dict[str, float]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


def cache_counts(stats: Optional[dict]) -> Optional[Dict[str, int]]:
    """The sample cache's counters from prepfs's stats.json: hits and misses of each form
    (augmented outputs taken, decoded pixels, encoded bytes); None without a cache."""
    cache = (stats or {}).get("cache")
    if not isinstance(cache, dict) or not cache.get("memory"):
        return None
    out = {}
    for form in ("augmented", "decoded", "encoded"):
        f = cache.get(form) or {}
        out[f"{form}_hits"] = int(f.get("hits") or 0)
        out[f"{form}_misses"] = int(f.get("misses") or 0)
    return out


def summarize(runs: Sequence[dict]) -> dict:
    """Aggregate the measured runs of one case: samples/s median/min/max; CPU seconds per
    sample (loader + prepfs daemon), median; peak memory, the largest of the runs."""
    sps = [r["samples"] / r["wall_s"] for r in runs if r.get("wall_s")]
    cpu = [(r["cpu_s"] + r.get("fs_cpu_s", 0.0)) / r["samples"] for r in runs if r["samples"]]
    loader_cpu = [r["cpu_s"] / r["samples"] for r in runs if r["samples"]]
    fs_cpu = [r.get("fs_cpu_s", 0.0) / r["samples"] for r in runs if r["samples"]]

    def peak(key: str) -> Optional[float]:
        vals = [r[key] + r.get("fs_peak_rss_mb", 0.0) for r in runs if r.get(key) is not None]
        return max(vals) if vals else None

    cache = None
    if any(r.get("cache") for r in runs):
        cache = {}
        for r in runs:
            for k, v in (r.get("cache") or {}).items():
                cache[k] = cache.get(k, 0) + v
        looked = cache.get("augmented_hits", 0) + cache.get("augmented_misses", 0)
        cache["augmented_hit_rate"] = cache.get("augmented_hits", 0) / looked if looked else None
    return {
        "cache": cache,
        "refill_wait": refill_summary(runs),
        "samples_per_s": spread(sps),
        "cpu_s_per_sample": spread(cpu),
        "loader_cpu_s_per_sample": statistics.median(loader_cpu) if loader_cpu else None,
        "fs_cpu_s_per_sample": statistics.median(fs_cpu) if fs_cpu else None,
        "peak_rss_mb": peak("peak_rss_mb"),
        "peak_pss_mb": peak("peak_pss_mb"),
        "samples_per_run": max((r["samples"] for r in runs), default=0),
        "runs": len(runs),
    }


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or not den:
        return None
    return num / den


def median_sps(cases: Dict[str, dict], cid: str) -> Optional[float]:
    c = cases.get(cid)
    if not c or c.get("error") or not c.get("summary"):
        return None
    return c["summary"]["samples_per_s"]["median"]


# The baselines of each cache state, in order of preference: the warm rows for the warm and
# floor scenarios, the cold ones where those were not run (quick runs).
BASELINE = {
    "cold": (("1a",), ("1b",)),
    "warm": (("2a", "1a"), ("2b", "1b")),
    "warm25": (("2a", "1a"), ("2b", "1b")),
    "floor": (("2a", "1a"), ("2b", "1b")),
}


def baseline_ids(results: Sequence[dict], scenario: str) -> Dict[str, Optional[str]]:
    """The torchvision and the DALI case that a case of `scenario` is compared with."""
    by_id = {c["id"]: c for c in results}
    tv, dali = BASELINE.get(scenario, BASELINE["warm"])
    first = lambda ids: next((i for i in ids if median_sps(by_id, i)), None)  # noqa: E731
    return {"torchvision": first(tv), "dali": first(dali)}


def ratios(results: Sequence[dict]) -> Dict[str, Dict[str, Optional[float]]]:
    """Per case: samples/s over the torchvision and the DALI case of the same cache state."""
    by_id = {c["id"]: c for c in results}
    out = {}
    for c in results:
        base = baseline_ids(results, c["scenario"])
        mine = median_sps(by_id, c["id"])
        out[c["id"]] = {k: ratio(mine, median_sps(by_id, v) if v else None)
                        for k, v in base.items()}
    return out


# (description, numerator case, denominator cases in order of preference, at least this ratio)
TARGETS = [
    ("cold: prepfs >= 5x torchvision", "1c", ("1a",), 5.0),
    ("cold: prepfs >= 3x DALI CPU", "1c", ("1b",), 3.0),
    ("warm: prepfs >= 20x torchvision", "2c", ("2a", "1a"), 20.0),
    ("floor: prepfs cached >= 1/2 tmpfs", "3d", ("3f",), 0.5),
    # issue 12: cached outputs against the trivial fuser filesystem, same reader, same run
    ("floor: prepfs cached >= 1.3x trivial fuser (plain)", "3d", ("3h",), 1.3),
]

# The prepfs row set against the FUSE floor (rows 3h/3i): the raw reader over prepfs's cached
# outputs after the refill wait (3d), else its warm row (2d).
FLOOR_PREPFS = ("3d", "2d")


def bytes_per_file(case: Optional[dict]) -> Optional[float]:
    """Bytes the raw reader read per file over a case's measured runs (None: not known)."""
    runs = [r for r in (case or {}).get("runs") or [] if r.get("bytes") is not None]
    n = sum(r["samples"] for r in runs)
    return sum(r["bytes"] for r in runs) / n if n else None


def fuse_floor(results: Sequence[dict]) -> Optional[dict]:
    """Issue 12's figures: prepfs's warm rate (3d, else 2d) as a ratio of each floor row (3h
    plain, 3i passthrough) of the same run; a row not measured says why. None without floor
    rows."""
    by_id = {c["id"]: c for c in results}
    rows = [by_id[i] for i, _, _ in FLOOR_ROWS if i in by_id]
    if not rows:
        return None
    pid = next((i for i in FLOOR_PREPFS if median_sps(by_id, i)), None)
    psps = median_sps(by_id, pid) if pid else None
    out = {"prepfs_case": pid, "prepfs_samples_per_s": psps,
           "prepfs_bytes_per_file": bytes_per_file(by_id.get(pid)) if pid else None,
           "prepfs_hit_rate": ((((by_id.get(pid) or {}).get("summary") or {}).get("cache")
                                or {}).get("augmented_hit_rate") if pid else None),
           "rows": []}
    for c in rows:
        sps = median_sps(by_id, c["id"])
        fl = c.get("floor") or {}
        why = (c.get("skipped") or (c.get("error") or "").split("\n")[0] or None) \
            if sps is None else None
        out["rows"].append({
            "id": c["id"], "mode": fl.get("mode") or c.get("floorfs"),
            "name": c.get("chart_reads") or c["reads"], "samples_per_s": sps,
            "min": c["summary"]["samples_per_s"]["min"] if sps else None,
            "max": c["summary"]["samples_per_s"]["max"] if sps else None,
            "files": fl.get("files"), "size": fl.get("size"),
            "bytes_per_file": bytes_per_file(c),
            "requests_per_open": fl.get("requests_per_open"),
            "prepfs_ratio": ratio(psps, sps), "not_measured": why})
    return out



def targets(results: Sequence[dict], cache_on: Optional[bool] = None,
            jobs: Optional[dict] = None) -> List[dict]:
    """The issue's targets: measured ratio, whether it is met (None: not measured), and a note
    saying what the measured cases stand for where that differs from the target's premise
    (no prepfs cache yet; warm peers left out by --quick); then scenario 4's (jobs_targets).
    "shown" is the measured value as the report prints it."""
    by_id = {c["id"]: c for c in results}
    out = []
    for desc, num, dens, want in TARGETS:
        den = next((d for d in dens if median_sps(by_id, d)), dens[0])
        r = ratio(median_sps(by_id, num), median_sps(by_id, den))
        notes = []
        if r is not None and cache_on is False and num in ("2c", "3d"):
            notes.append("prepfs has no cache yet: " + (
                "2c reads outputs computed at open from a page-cache-warm source"
                if num == "2c" else "3d reads outputs computed at open, not cached ones"))
        hit = ((by_id.get(num) or {}).get("summary") or {}).get("cache") or {}
        rate = hit.get("augmented_hit_rate")
        if r is not None and cache_on and num in ("2c", "3d") and rate is not None \
                and rate < 0.9:
            notes.append(f"only {rate * 100:.0f}% of {num}'s outputs came from the cache")
        if r is not None and den != dens[0]:
            notes.append(f"{dens[0]} not run: against {den}")
        loop = ratio(median_sps(by_id, "3g"), median_sps(by_id, den))
        if r is not None and num in ("1c", "2c") and loop is not None:
            notes.append(f"this loop alone, over tmpfs (3g), reaches {fmt_ratio(loop)}")
        out.append({"target": desc, "cases": f"{num} / {den}", "want": want, "ratio": r,
                    "shown": fmt_ratio(r),
                    "met": None if r is None else r >= want, "note": "; ".join(notes)})
    return out + jobs_targets(jobs)


def refill_summary(runs: Sequence[dict]) -> Optional[dict]:
    """The refill waits before a case's measured runs (None if it had none)."""
    waits = [r["refill_wait"] for r in runs if r.get("refill_wait")]
    if not waits:
        return None
    reasons: Dict[str, int] = {}
    for w in waits:
        reasons[w.get("reason") or "?"] = reasons.get(w.get("reason") or "?", 0) + 1
    return {"waited_s": spread([w.get("waited_s") for w in waits]),
            "augmented_entries_start": spread([w.get("augmented_entries_start")
                                               for w in waits]),
            "target": next((w.get("target") for w in waits if w.get("target")), None),
            "reasons": reasons}


# --------------------------------------------------------------------------------------------
# Scenario 4, concurrent jobs: figures of one run and of a variant

# Seneca's published figures (FAST '26): scenario 4's targets
SENECA = {"makespan_reduction": 0.45, "hit_rate": 0.54, "cached_share": 0.20}


def makespan(jobs: Sequence[dict]) -> Optional[float]:
    """From the first job's start to the last job's end (t_start / t_end on one clock)."""
    starts = [j["t_start"] for j in jobs if j.get("t_start") is not None]
    ends = [j["t_end"] for j in jobs if j.get("t_end") is not None]
    if not starts or not ends or len(ends) < len(jobs):
        return None
    return max(ends) - min(starts)


def view_hits(st0: Optional[dict], st1: Optional[dict],
              view: str = "augmented") -> Dict[str, Optional[float]]:
    """Hits and misses of a top-level view between two stats.json snapshots (the opens served
    from a cache form without reading the source, and the others), and their rate."""
    def get(st, k):
        return int((((st or {}).get("views") or {}).get(view) or {}).get(k) or 0)
    h = get(st1, "hits") - get(st0, "hits")
    m = get(st1, "misses") - get(st0, "misses")
    return {"hits": h, "misses": m, "hit_rate": h / (h + m) if h + m else None}


def merge_job_stats(known: Dict[str, dict], stats: Optional[dict]) -> Dict[str, dict]:
    """Keeps the latest figures of every job seen in stats.json's jobs.active (a job that
    retires drops out of it; its last figures stay here)."""
    for j in (((stats or {}).get("jobs") or {}).get("active") or []):
        if isinstance(j, dict) and j.get("name"):
            known[j["name"]] = j
    return known


def job_hits(jobs: Sequence[dict]) -> Dict[str, Optional[float]]:
    """Summed over the jobs' stats: hits in every form (augmented, decoded, encoded: served
    without reading the source) and misses, and their rate."""
    h = m = 0
    for j in jobs:
        hits = j.get("hits") or {}
        h += sum(int(hits.get(k) or 0) for k in ("augmented", "decoded", "encoded"))
        m += int(j.get("misses") or 0)
    return {"hits": h, "misses": m, "hit_rate": h / (h + m) if h + m else None}


def jobs_run_record(variant: str, jobs: Sequence[dict], st0: Optional[dict],
                    st1: Optional[dict], fs_cpu_s: float,
                    job_stats: Optional[Dict[str, dict]] = None,
                    expected_source_bytes: Optional[float] = None) -> dict:
    """One run of a variant: `jobs` are the jobs' RunResults (JSON), in job order; st0/st1 the
    mount's stats.json before the start and after the last job's end; fs_cpu_s the daemon's
    CPU over the run; job_stats the per-job figures of prepfs (ODS runs)."""
    samples = sum(j.get("samples") or 0 for j in jobs)
    loader_cpu = sum(j.get("cpu_s") or 0.0 for j in jobs)
    src = None
    if st0 is not None and st1 is not None:
        src = int(st1.get("source_bytes_read") or 0) - int(st0.get("source_bytes_read") or 0)
    if variant == "torchvision":
        hit = {"hits": 0, "misses": samples, "hit_rate": 0.0}
        hit_from = "none: no cache by construction"
    elif variant.startswith("prepfs-ods"):
        hit = job_hits(list((job_stats or {}).values()))
        hit_from = "jobs.active[].hits / (hits + misses), summed over the jobs"
    else:
        hit = view_hits(st0, st1, "augmented")
        hit_from = "views.augmented hits / (hits + misses), deltas over the run"
    ms = makespan([j.get("extra", j) for j in jobs])
    rec = {
        "jobs": [{"job": i, "t_start": (j.get("extra") or {}).get("t_start"),
                  "t_end": (j.get("extra") or {}).get("t_end"), "wall_s": j.get("wall_s"),
                  "samples": j.get("samples"), "cpu_s": j.get("cpu_s"),
                  "epoch_walls": (j.get("extra") or {}).get("epoch_walls"),
                  "peak_rss_mb": j.get("peak_rss_mb")}
                 for i, j in enumerate(jobs)],
        "makespan_s": ms, "samples": samples,
        "samples_per_s": samples / ms if ms else None,
        "loader_cpu_s": loader_cpu, "fs_cpu_s": fs_cpu_s, "cpu_s": loader_cpu + fs_cpu_s,
        "source_bytes_read": src, **hit, "hit_from": hit_from,
    }
    if expected_source_bytes and src is not None:
        rec["expected_source_bytes"] = expected_source_bytes
        rec["source_read_share"] = src / expected_source_bytes
    if job_stats:
        rec["job_stats"] = [{k: v for k, v in js.items() if k != "state_bytes"}
                            for _, js in sorted(job_stats.items())]
    return rec


def summarize_jobs(runs: Sequence[dict]) -> dict:
    """A variant over its runs: makespan median/min/max, each job's wall time (median over the
    runs, by job index), the hit rate, source bytes, CPU seconds, samples/s (all jobs' samples
    over the makespan), medians; every figure None where not measured."""
    def med(key):
        vals = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(vals) if vals else None
    n_jobs = max((len(r["jobs"]) for r in runs), default=0)
    walls = []
    for i in range(n_jobs):
        w = [r["jobs"][i]["wall_s"] for r in runs
             if i < len(r["jobs"]) and r["jobs"][i].get("wall_s") is not None]
        walls.append(statistics.median(w) if w else None)
    cpu_per = [r["cpu_s"] / r["samples"] for r in runs if r.get("samples")]
    return {
        "makespan_s": spread([r.get("makespan_s") for r in runs]),
        "samples_per_s": spread([r.get("samples_per_s") for r in runs]),
        "job_wall_s": walls,
        "hit_rate": med("hit_rate"),
        "source_bytes_read": med("source_bytes_read"),
        "source_read_share": med("source_read_share"),
        "cpu_s": med("cpu_s"), "loader_cpu_s": med("loader_cpu_s"), "fs_cpu_s": med("fs_cpu_s"),
        "cpu_s_per_sample": statistics.median(cpu_per) if cpu_per else None,
        "samples": med("samples"),
        "runs": len(runs),
    }


def find_variant(jobs: Optional[dict], vid: str) -> Optional[dict]:
    for v in (jobs or {}).get("variants") or []:
        if v.get("id") == vid and v.get("summary") and not v.get("error"):
            return v
    return None


def median_makespan(jobs: Optional[dict], vid: str) -> Optional[float]:
    v = find_variant(jobs, vid)
    return v["summary"]["makespan_s"]["median"] if v else None


def makespan_reduction(jobs: Optional[dict], vid: str, base: str = "4a") -> Optional[float]:
    """1 - makespan(vid) / makespan(base), medians: 0.45 is "45% less makespan"."""
    a, b = median_makespan(jobs, vid), median_makespan(jobs, base)
    if a is None or not b:
        return None
    return 1.0 - a / b


JOB_TARGETS = [
    ("jobs: ODS makespan >= 45% below torchvision's (Seneca: 45% less than PyTorch)",
     "4c", "4a", SENECA["makespan_reduction"], "makespan_reduction"),
    ("jobs: ODS hit rate >= 54% (Seneca: 54% with 20% cached)", "4c", None,
     SENECA["hit_rate"], "hit_rate"),
    ("jobs, cache set for jobs: ODS makespan >= 45% below torchvision's", "4d", "4a",
     SENECA["makespan_reduction"], "makespan_reduction"),
    ("jobs, cache set for jobs: ODS hit rate >= 54%", "4d", None, SENECA["hit_rate"],
     "hit_rate"),
]


def jobs_targets(jobs: Optional[dict]) -> List[dict]:
    """Scenario 4's targets, from Seneca's published figures: measured value (a share), met or
    not (None: not measured), notes on how our setting differs."""
    out = []
    st = (jobs or {}).get("settings") or {}
    for desc, vid, base, want, what in JOB_TARGETS:
        v = find_variant(jobs, vid)
        if what == "makespan_reduction":
            val = makespan_reduction(jobs, vid, base)
        else:
            val = v["summary"].get("hit_rate") if v else None
        notes = []
        if val is not None:
            share = st.get("cache_share")
            if share is not None:
                notes.append(f"{share * 100:.0f}% of the set cached here "
                             f"(Seneca's figure: {SENECA['cached_share'] * 100:.0f}%)")
            if what == "hit_rate":
                notes.append("a hit is an open served from any cache form without reading "
                             "the source")
            if st.get("reps") == 1:
                notes.append("1 run")
            if st.get("subset"):
                notes.append(st["subset"])
        out.append({"target": desc, "cases": f"{vid} / {base}" if base else vid,
                    "want": want, "ratio": val,
                    "shown": (fmt_pct(val) if what != "makespan_reduction" or val is None
                              else f"{fmt_pct(val)} less" if val >= 0
                              else f"{fmt_pct(-val)} more"),
                    "met": None if val is None else val >= want,
                    "note": "; ".join(notes)})
    return out
