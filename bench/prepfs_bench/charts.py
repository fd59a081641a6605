"""prepfs_bench.charts: the PNG charts beside the results JSON (matplotlib).

Owns PREFIX-throughput.png (samples/s per case), PREFIX-cpu.png (CPU ms per sample, the
loader's part and the daemon's) and PREFIX-jobs.png (scenario 4's makespan per variant).
matplotlib is imported only when a chart is drawn: without it there are no charts.
"""

from __future__ import annotations

import sys
from typing import List

from .plan import SCENARIO_TITLES, SHORT
from .stats import (SENECA, baseline_ids, makespan_reduction, median_makespan, median_sps,
                    ratios)
from .units import fmt_num, fmt_pct, fmt_ratio


def write_jobs_chart(report: dict, prefix: str) -> List[str]:
    """PREFIX-jobs.png: scenario 4's makespan per variant (median, whiskers min-max), each bar
    annotated with its hit rate and its makespan against 4a; Seneca's "45% less than PyTorch"
    drawn as a line at 0.55 x 4a's makespan. [] without matplotlib or results."""
    jobs = report.get("jobs")
    vs = [v for v in ((jobs or {}).get("variants") or []) if v.get("summary")
          and v["summary"]["makespan_s"]["median"] is not None]
    if not vs:
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    st = jobs.get("settings") or {}
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.8 * len(vs) + 1.0))
    ys = list(range(len(vs)))[::-1]
    med = [v["summary"]["makespan_s"]["median"] for v in vs]
    lo = [m - v["summary"]["makespan_s"]["min"] for m, v in zip(med, vs)]
    hi = [v["summary"]["makespan_s"]["max"] - m for m, v in zip(med, vs)]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bars = ax.barh(ys, med, xerr=[lo, hi], capsize=3, height=0.6,
                   color=[colors[i % len(colors)] for i in range(len(vs))])
    labels = []
    for v, m in zip(vs, med):
        hit = "0% (no cache)" if v["key"] == "torchvision" else fmt_pct(v["summary"]["hit_rate"])
        lab = f"{m:.1f} s, hit rate {hit}"
        red = makespan_reduction(jobs, v["id"])
        if v["id"] != "4a" and red is not None:
            lab += f", {-red * 100:+.0f}% vs 4a"
        labels.append(lab)
    ax.bar_label(bars, labels=labels, fontsize=8, padding=4)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{v['id']}  {v['key']}" for v in vs], fontsize=9)
    base = median_makespan(jobs, "4a")
    if base:
        ax.axvline(base * (1 - SENECA["makespan_reduction"]), color="0.3", linestyle="--",
                   linewidth=1, label="Seneca: 45% less makespan than PyTorch (x 4a)")
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    ax.set_xlim(0, max(m + h for m, h in zip(med, hi)) * 1.7)
    sub = (f"{st.get('jobs', 3)} jobs x {st.get('epochs', 2)} epochs, "
           f"{st.get('data_samples', '?')} images, storage {st.get('read_limit')}, "
           f"cache {fmt_pct(st.get('cache_share'))} of the set, "
           f"{len(st.get('cpus') or [])} CPUs, {st.get('reps', '?')} run(s)")
    ax.set_title("scenario 4: makespan of concurrent jobs (median, whiskers min-max; lower is "
                 f"better)\n{sub}", fontsize=10)
    ax.set_xlabel("seconds")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = f"{prefix}-jobs.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def chart_label(case: dict) -> str:
    return (f"{case['id']}  {SHORT.get(case['loader'], case['loader'])} | "
            f"{case.get('chart_reads') or case['reads']}")


def write_charts(report: dict, prefix: str) -> List[str]:
    """PNG charts beside the JSON, one horizontal bar per case, grouped by scenario (cold,
    warm, floor), coloured by loader, with min-max whiskers. PREFIX-throughput.png: samples/s
    on a log scale, each bar labelled with its ratio to torchvision, each scenario's torchvision
    and DALI rates drawn as lines. PREFIX-cpu.png: CPU ms per sample on a linear scale, split
    into the loader's part and the prepfs daemon's (hatched). Returns the paths ([] without
    matplotlib or results)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        print("[bench] matplotlib missing: no charts", file=sys.stderr)
        return []
    cases = [c for c in report["cases"] if not c.get("error") and c.get("summary")]
    if not cases:
        return []
    order = {"cold": 0, "warm": 1, "warm25": 2, "floor": 3}
    cases = sorted(cases, key=lambda c: order.get(c["scenario"], 9))  # stable: plan order
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # one colour per loader and kind of source, the same in every report
    fixed = ["torchvision", "dali", "pil", "torchvision-ppm", "raw", "torch-npy", "raw tmpfs",
             "torchvision-ppm tmpfs"]

    def color_of(c: dict) -> str:
        key = c["loader"] + (" tmpfs" if "tmpfs" in c["reads"] else "")
        return colors[(fixed.index(key) if key in fixed else len(fixed)) % len(colors)]
    bar_colors = [color_of(c) for c in cases]
    # y positions, top to bottom, with a gap between scenarios
    ys, y, prev = [], 0.0, None
    for c in cases:
        if prev is not None and c["scenario"] != prev:
            y += 0.6
        ys.append(-y)
        y += 1
        prev = c["scenario"]
    groups = {scen: [yy for yy, c in zip(ys, cases) if c["scenario"] == scen] for scen in order}
    groups = {k: v for k, v in groups.items() if v}
    st = report.get("settings", {})
    m = report.get("machine", {})
    sub = f"{st.get('data_samples', '?')} images"
    if st.get("limit") and st.get("data_samples") and st["limit"] < st["data_samples"]:
        sub += f", {st['limit']} per run"
    sub += f", {len(st.get('cpus', []))} CPUs"
    if report.get("quick"):
        sub += ", quick run"
    load = (m.get("loadavg_before") or [0])[0]
    if load > 0.5:
        sub += f", busy machine (load {load:.1f})"
    all_ratios = ratios(report["cases"])

    def frame(ax, title):
        ax.set_yticks(ys)
        ax.set_yticklabels([chart_label(c) for c in cases], fontsize=8)
        for scen, sy in groups.items():
            ax.text(1.01, (max(sy) + min(sy)) / 2, SCENARIO_TITLES[scen],
                    transform=ax.get_yaxis_transform(), va="center", fontsize=9, rotation=-90)
        ax.set_title(f"{title}\n{sub}", fontsize=10)
        ax.grid(axis="x", which="major", alpha=0.3)

    paths = []
    height = 0.42 * len(cases) + 1.9

    # samples/s
    fig, ax = plt.subplots(figsize=(11, height))
    med = [c["summary"]["samples_per_s"]["median"] for c in cases]
    lo = [v - c["summary"]["samples_per_s"]["min"] for v, c in zip(med, cases)]
    hi = [c["summary"]["samples_per_s"]["max"] - v for v, c in zip(med, cases)]
    bars = ax.barh(ys, med, xerr=[lo, hi], capsize=2, height=0.8, color=bar_colors,
                   error_kw={"elinewidth": 0.8})
    labels = []
    for v, c in zip(med, cases):
        r = all_ratios.get(c["id"], {}).get("torchvision")
        lab = fmt_num(v, 0 if v >= 10 else 2)
        if r is not None and c["loader"] != "torchvision":
            lab += f"  ({fmt_ratio(r)})"
        labels.append(lab)
    ax.bar_label(bars, labels=labels, fontsize=8, padding=4)
    ax.set_xscale("log")
    ax.set_xlim(min(v for v in med if v > 0) / 2, max(v + h for v, h in zip(med, hi)) * 10)
    by_id = {c["id"]: c for c in report["cases"]}
    handles = []
    for scen, sy in groups.items():
        base = baseline_ids(report["cases"], scen)
        for key, style, name in (("torchvision", "--", "torchvision"),
                                 ("dali", ":", "DALI CPU")):
            cid = base.get(key)
            v = median_sps(by_id, cid) if cid else None
            if v:
                ax.vlines(v, min(sy) - 0.5, max(sy) + 0.5, colors="0.25", linestyles=style,
                          linewidth=1)
    handles += [Line2D([], [], color="0.25", linestyle="--", label="torchvision rate of the "
                       "scenario (1a; 2a when run)"),
                Line2D([], [], color="0.25", linestyle=":", label="DALI CPU rate of the "
                       "scenario (1b; 2b when run)")]
    ax.legend(handles=handles, fontsize=7, loc="upper right", framealpha=0.9)
    frame(ax, "samples/s (median, whiskers min-max, log scale; higher is better)\n"
          "in brackets: x the torchvision rate of the same scenario")
    fig.tight_layout()
    path = f"{prefix}-throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    # CPU per sample, split into the loader's and the daemon's
    fig, ax = plt.subplots(figsize=(11, height))
    tot = [c["summary"]["cpu_s_per_sample"]["median"] * 1e3 for c in cases]
    fs = [min(t, (c["summary"].get("fs_cpu_s_per_sample") or 0.0) * 1e3)
          for t, c in zip(tot, cases)]
    own = [t - f for t, f in zip(tot, fs)]
    lo = [t - c["summary"]["cpu_s_per_sample"]["min"] * 1e3 for t, c in zip(tot, cases)]
    hi = [c["summary"]["cpu_s_per_sample"]["max"] * 1e3 - t for t, c in zip(tot, cases)]
    ax.barh(ys, own, height=0.8, color=bar_colors)
    bars = ax.barh(ys, fs, left=own, height=0.8, color=bar_colors, alpha=0.45, hatch="///",
                   edgecolor="white", xerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8})
    labels = [fmt_num(t, 2) + (f"  (prepfs {fmt_num(f, 2)})" if f > 0 else "")
              for t, f in zip(tot, fs)]
    ax.bar_label(bars, labels=labels, fontsize=8, padding=4)
    ax.set_xlim(0, max(t + h for t, h in zip(tot, hi)) * 1.4)
    if any(f > 0 for f in fs):
        ax.legend(handles=[Patch(facecolor="0.5", label="loader process and its workers"),
                           Patch(facecolor="0.5", alpha=0.45, hatch="///", edgecolor="white",
                                 label="prepfs daemon")],
                  fontsize=7, loc="lower right", framealpha=0.9)
    frame(ax, "CPU ms per sample, all processes of the case (median; lower is better)")
    fig.tight_layout()
    path = f"{prefix}-cpu.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths
