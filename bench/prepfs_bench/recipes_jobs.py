"""Three jobs at once over recipes (docs/recipes.md), with `split: auto`: all three reading one
recipe's view, against each reading a recipe of its own (three recipes, the same ops at three
sizes), 2 epochs each, a cache of 20% of the set's bytes, `split: auto` against fixed splits
(`--splits`). Per setting: the makespan, the split
the plan chose, its inputs for recipes (`output_jobs`: the jobs one output may serve;
`s_augmented`: the room per sample), and its predicted hit rate against the one measured (the
jobs' opens served without reading the source), the samples served per decode.

    PYTHONPATH=bench python3 -m prepfs_bench.recipes_jobs --prepfs target/release/prepfs \
        --gen target/release/examples/make_dataset [--out bench/results/DATE-recipes-jobs]
"""
import argparse
import json
import os
import shutil
import tempfile
import time

from . import BENCH_DIR
from .jobs import generated_source, hits_and_misses, makespan, pct, tree_bytes
from .mount import Mount
from .runs import write_report

RECIPES = """recipes:
  r224: { augment: [ {random_resized_crop: {size: 224}}, {random_horizontal_flip: {}} ] }
  r192: { augment: [ {random_resized_crop: {size: 192}}, {random_horizontal_flip: {}} ] }
  r160: { augment: [ {random_resized_crop: {size: 160}}, {random_horizontal_flip: {}} ] }
"""


def run(prepfs, source, workdir, cache, views, split):
    """Three jobs, job i reading `jobs/job<i>/<views[i]>`, on a fresh mount with `split`: one
    result row."""
    mount = Mount(prepfs, source, workdir, "recipes-" + "-".join(views) + "-" + split,
                  f"cache: {{ memory: {cache}, split: {split} }}\n" + RECIPES)
    try:
        roots = [os.path.join(mount.mnt, "jobs", f"job{i}", v) for i, v in enumerate(views)]
        for r in roots:
            os.listdir(r)
        took = makespan(roots, False, epochs=2)
        st = mount.stats()
    finally:
        mount.close()
    jobs = st["jobs"]["active"]
    hits, misses = hits_and_misses(jobs)
    # A job's figures count its opens in every view (its epochs' own counts are per view).
    served = hits + misses
    plan = st.get("plan") or {}
    inputs = plan.get("inputs") or {}
    return {
        "views": views,
        "split_asked": split,
        "makespan_s": took,
        "split": plan.get("split"),
        "output_jobs": inputs.get("output_jobs"),
        "jobs": inputs.get("jobs"),
        "s_augmented": inputs.get("s_augmented"),
        "pipelines": plan.get("pipelines"),
        "hit_rate": hits / max(1, hits + misses),
        "predicted_hit_rate": plan.get("predicted_hit_rate"),
        "decodes": st["decodes"],
        "served": served,
        "served_per_decode": served / max(1, st["decodes"]),
        "source_bytes_read": st.get("source_bytes_read"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepfs", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--classes", type=int, default=30)
    ap.add_argument("--per-class", type=int, default=40)
    ap.add_argument("--splits", default="auto,0-0-100,0-100-0", help="splits to run each setting with")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-recipes-jobs"))
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="prepfs-recipes-jobs-")
    try:
        source = generated_source(args.gen, os.path.join(workdir, "source"), args.classes, args.per_class)
        set_bytes = tree_bytes(source)
        cache = max(1 << 20, set_bytes // 5)
        rows = []
        for views in (["r224"] * 3, ["r224", "r192", "r160"]):
            for split in args.splits.split(","):
                row = run(args.prepfs, source, workdir, cache, views, split)
                rows.append(row)
                print(json.dumps(row), flush=True)
        lines = [f"3 jobs x 2 epochs at once over recipes (the same crop and flip at 224, 192, 160), `split: auto` against fixed splits, a cache of "
                 f"20% of the set's bytes ({set_bytes / 1e6:.1f} MB, {args.classes} x {args.per_class} generated JPEGs); "
                 "a fresh mount per setting.", "",
                 "| jobs read | split asked | makespan s | split | plan's output_jobs | room per sample (s_augmented) B | hit rate (predicted) "
                 "| samples served per decode | source MB read |",
                 "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in rows:
            lines.append(f"| {', '.join(r['views'])} | {r['split_asked']} | {r['makespan_s']:.1f} | {r['split']} | "
                         f"{'-' if r['output_jobs'] is None else format(r['output_jobs'], '.2f')} | {r['s_augmented']:.0f} "
                         f"| {pct(r['hit_rate'])} ({pct(r['predicted_hit_rate'])}) "
                         f"| {r['served_per_decode']:.2f} | {(r['source_bytes_read'] or 0) / 1e6:.1f} |")
        write_report(args.out, rows, lines)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
