"""prepfs_bench.cli: the command line of `python3 -m prepfs_bench` and its `main`.

Owns the options (`build_parser`) and their checks and quick-run defaults (`resolve_args`), and
the order of a run: pin to the cores, describe the machine and the data set, set up the prepfs
sources the options ask for (`setup_prepfs`: the driver's mounts and 2p's derived config, an
existing mount, or a stand-in directory), start the report (`new_report`), run the cases
(`run_cases`; rows 3h-3k on a FUSE floor mounted for each, `run_floor_case`) and scenario 4, unmount and clean up on every way out, and write the report
(`finish`). `--report-only` rewrites an earlier report and runs nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

from . import BENCH_DIR, ROOT, loaders, show_path
from .config import cache_of_share, check_config, derive_config, policy_setting
from .floor import (FloorError, floor_record, floor_spec, mount_floorfs,
                    prepfs_fuse_threads)
from .mount import PrepfsError, PrepfsMount, PrepfsSource, mount_prepfs
from .plan import plan
from .report import progress_line, write_report
from .runner import copy_floor, dataset_info, machine_info, run_case
from .scenario4 import run_jobs_scenario
from .units import fmt_bytes, parse_size


def build_parser() -> argparse.ArgumentParser:
    """The options of `python3 -m prepfs_bench`."""
    today = _dt.date.today().isoformat()
    ap = argparse.ArgumentParser(description="prepfs benchmark driver (issue 3)",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--data", help="JPEG ImageFolder tree (class dirs); required unless "
                                    "--report-only")
    ap.add_argument("--report-only", metavar="JSON",
                    help="run nothing: rewrite the charts and the Markdown of an earlier "
                         "results JSON (with this version's report code), and the JSON itself")
    g = ap.add_argument_group("prepfs (pick one; none: the peers only)")
    g.add_argument("--prepfs-bin", help="mount prepfs with this binary (target/release/prepfs)")
    g.add_argument("--prepfs-config", default=os.path.join(ROOT, "mount-configs",
                                                           "imagenet.yaml"),
                   help="mount config for --prepfs-bin")
    g.add_argument("--mountpoint", default=f"/tmp/prepfs-bench-{os.getpid()}",
                   help="where --prepfs-bin mounts")
    g.add_argument("--prepfs-mount", help="an already mounted prepfs over --data")
    g.add_argument("--augmented-dir",
                   help="a plain directory of augmented PPMs standing in for augmented/")
    g.add_argument("--prepfs-npy-config",
                   help="with --prepfs-bin: also mount this npy float32 config (e.g. "
                        "mount-configs/imagenet-npy.yaml) for rows 1n/2n")
    g.add_argument("--augmented-npy-dir",
                   help="with --augmented-dir: a plain directory of augmented .npy files for "
                        "rows 1n/2n")
    g.add_argument("--floorfs-bin",
                   help="rows 3h-3k, issue 12's FUSE floor: mount this trivial fuser filesystem "
                        "(target/release/examples/floorfs) plain and with passthrough, at "
                        "MOUNTPOINT-floor-plain and -floor-passthrough, serving as many files "
                        "as 3d reads of the size prepfs serves; needs a prepfs source")
    g.add_argument("--floorfs-threads", type=int, default=None,
                   help="floorfs's FUSE threads (default: prepfs's fuse_threads, from "
                        "--prepfs-config, else prepfs's default 4)")
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    ap.add_argument("--limit", type=int, default=None,
                    help="samples per run (default: 512 with --quick, else the whole set)")
    ap.add_argument("--reps", type=int, default=None,
                    help="measured runs per case (default: 3 with --quick, else 5)")
    ap.add_argument("--workers", type=int, default=2, help="loader workers / threads")
    ap.add_argument("--cores", type=int, default=2, help="pin everything to this many CPUs")
    ap.add_argument("--only", default=None, help="comma-separated case ids to run, e.g. 1a,1b")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", f"{today}.json"))
    ap.add_argument("--md", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--charts-dir", default=os.path.join(BENCH_DIR, "results"))
    ap.add_argument("--python", default=sys.executable, help="interpreter for the loaders")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per case")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per run too")
    ap.add_argument("--invoked-as", default=None,
                    help="the command a user ran (e.g. `make bench`), for the report")
    ap.add_argument("--build-info", default=None, help="which prepfs build, for the report")
    ap.add_argument("--data-info", default=None, help="how the data set was made, for the report")
    ap.add_argument("--log-dir", default=None,
                    help="keep the prepfs daemons' logs here (prepfs-ppm.log, prepfs-npy.log, "
                         "prepfs-ppm25.log, prepfs-jobs*.log; appended over remounts); default: "
                         "temporary files, deleted")
    ap.add_argument("--config-dir", default=None,
                    help="write the derived mount configs here (2p's 25%% cache, scenario 4's); "
                         "default: a temporary directory, deleted")
    g4 = ap.add_argument_group("scenarios 2p and 4 (with --prepfs-bin)")
    g4.add_argument("--cache-share", type=float, default=0.25,
                    help="2p's and scenario 4's cache, as a share of the data set's bytes")
    g4.add_argument("--cache-split", default=os.environ.get("BENCH_SPLIT") or "auto",
                    help="the split of the 2p and 4b/4c caches: auto (the model's) or E-D-A")
    g4.add_argument("--cache-policy", default=os.environ.get("BENCH_POLICY") or "auto",
                    choices=["auto", "keep", "lru"],
                    help="the 2p and 4b/4c caches' policy (auto: the mount's default, not set)")
    g4.add_argument("--consumer-rate", type=float,
                    default=float(os.environ.get("BENCH_CONSUMER_RATE") or 900),
                    help="4d: the consumers' rate given to the cache model (samples/s; default "
                         "900, what the torchvision loop absorbs on 2 cores, row 3g)")
    g4.add_argument("--read-limit", default=os.environ.get("BENCH_READ_LIMIT") or "10MB/s",
                    help="scenario 4's storage read limit (prepfs source.read_limit; env "
                         "BENCH_READ_LIMIT)")
    g4.add_argument("--jobs", type=int, default=3, help="scenario 4: concurrent jobs")
    g4.add_argument("--jobs-epochs", type=int, default=2, help="scenario 4: epochs per job")
    g4.add_argument("--jobs-reps", type=int, default=None,
                    help="scenario 4: runs per variant (default: 1 with --quick, else 3)")
    g4.add_argument("--jobs-per-class", type=int, default=None,
                    help="scenario 4: only this many images per class (default: 16 with "
                         "--quick, else all)")
    g4.add_argument("--jobs-uncached", choices=loaders.UNCACHED_MODES, default="fadvise",
                    help="scenario 4a: how the torchvision jobs keep files out of the page cache")
    g4.add_argument("--jobs-timeout", type=float, default=1200,
                    help="scenario 4: seconds per variant, all its runs")
    return ap


def resolve_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Checks the options of a run (ap.error on a bad one) and fills in the defaults that
    depend on --quick."""
    if not args.data:
        ap.error("--data is required")
    if sum(x is not None for x in (args.prepfs_bin, args.prepfs_mount, args.augmented_dir)) > 1:
        ap.error("give at most one of --prepfs-bin, --prepfs-mount, --augmented-dir")
    if args.prepfs_npy_config and not args.prepfs_bin:
        ap.error("--prepfs-npy-config needs --prepfs-bin")
    if args.augmented_npy_dir and not args.augmented_dir:
        ap.error("--augmented-npy-dir needs --augmented-dir")
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    if args.limit is None and args.quick:
        args.limit = 512
    if args.jobs_reps is None:
        args.jobs_reps = 1 if args.quick else 3
    if args.jobs_per_class is None and args.quick:
        args.jobs_per_class = 16
    try:
        parse_size(args.read_limit)
    except ValueError:
        ap.error(f"--read-limit {args.read_limit!r}: not a rate (e.g. 10MB/s)")
    if not 0 < args.cache_share <= 1:
        ap.error("--cache-share must be in (0, 1]")


def unwind_on_signals() -> None:
    """SIGTERM / SIGHUP (e.g. from bench/run.sh's trap) unwind like Ctrl-C, so that every
    `finally` runs: the loader child killed, prepfs unmounted, the tmpfs copy removed."""
    def _interrupt(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def pin_cpus(cores: int) -> List[int]:
    """The first `cores` CPUs this process may use; the driver is pinned to them too, as
    everything else is: all on the same cores."""
    cpus = sorted(os.sched_getaffinity(0))[: max(1, cores)]
    os.sched_setaffinity(0, set(cpus))
    return cpus


@dataclasses.dataclass
class Prepfs:
    """The prepfs side of a run, as the options chose it: the sources of the PPM rows, the npy
    rows (1n/2n) and 2p's rows, and how the report describes them."""

    src: Optional[PrepfsSource] = None
    npy_src: Optional[PrepfsSource] = None
    src25: Optional[PrepfsSource] = None
    binary: Optional[str] = None  # --prepfs-bin, absolute
    base_text: Optional[str] = None  # the text of --prepfs-config (scenario 4 derives from it)
    pending_why: Optional[str] = None  # why 2p is not run, when prepfs check refused it
    desc: str = "not measured"
    config_text: Optional[str] = None  # the text of the PPM config, wherever it came from
    aug_reads: str = "prepfs augmented/"
    npy_reads: str = "prepfs augmented/ (npy)"

    def sources(self) -> Dict[str, PrepfsSource]:
        """By the key a Case's `source` names: "ppm", "npy", "ppm25"."""
        return {k: v for k, v in (("ppm", self.src), ("npy", self.npy_src),
                                  ("ppm25", self.src25)) if v is not None}


def setup_prepfs(args: argparse.Namespace, data: str, dinfo: dict, cpus: List[int],
                 config_dir: str) -> Prepfs:
    """The prepfs sources the options ask for; nothing is mounted yet."""
    pf = Prepfs()
    if args.prepfs_bin:
        setup_driver_mounts(pf, args, data, dinfo, cpus, config_dir)
    elif args.prepfs_mount:
        pf.src = PrepfsSource("external-mount",
                              os.path.join(os.path.abspath(args.prepfs_mount), "augmented"))
        pf.desc = (f"an existing mount at {args.prepfs_mount} (its cache not emptied for "
                   f"cold runs)")
    elif args.augmented_dir:
        pf.src = PrepfsSource("stand-in", os.path.abspath(args.augmented_dir))
        pf.aug_reads = "PPM files (stand-in, no prepfs)"
        pf.desc = (f"not measured: rows 1c/1d/2c/2d/3 read a plain directory of augmented "
                   f"PPMs ({args.augmented_dir}) in its place")
        if args.augmented_npy_dir:
            pf.npy_src = PrepfsSource("stand-in", os.path.abspath(args.augmented_npy_dir))
            pf.npy_reads = ".npy files (stand-in, no prepfs)"
    return pf


def setup_driver_mounts(pf: Prepfs, args: argparse.Namespace, data: str, dinfo: dict,
                        cpus: List[int], config_dir: str) -> None:
    """--prepfs-bin: the mounts the driver starts (and restarts empty for cold runs): the PPM
    config, the npy one, and 2p's, derived from the PPM one with a cache of 25% of the data
    set's bytes (Seneca's convention) unless `prepfs check` refuses it."""
    binary = pf.binary = os.path.abspath(args.prepfs_bin)

    def mounter(config: str, mnt: str, key: str) -> Callable[[], PrepfsMount]:
        log = None
        if args.log_dir:
            os.makedirs(args.log_dir, exist_ok=True)
            log = os.path.join(os.path.abspath(args.log_dir), f"prepfs-{key}.log")

        def restart() -> PrepfsMount:
            return mount_prepfs(binary, config, data, mnt, cpus=cpus, log_path=log)
        return restart

    configs = [("ppm", os.path.abspath(args.prepfs_config), os.path.abspath(args.mountpoint))]
    if args.prepfs_npy_config:
        configs.append(("npy", os.path.abspath(args.prepfs_npy_config),
                        os.path.abspath(args.mountpoint) + "-npy"))
    # 2p: the PPM config with a cache of 25% of the data set's bytes (Seneca's convention)
    with open(os.path.abspath(args.prepfs_config)) as f:
        pf.base_text = pf.config_text = f.read()
    cache25 = cache_of_share(dinfo["data_bytes"], args.cache_share)
    cfg25 = os.path.join(config_dir, "imagenet-cache25.yaml")
    with open(cfg25, "w") as f:
        f.write(derive_config(pf.base_text, f"{{ memory: {cache25}, split: {args.cache_split}"
                                            f"{policy_setting(args.cache_policy)} }}",
                              note=f"scenario 2p: a cache of {args.cache_share * 100:g}% "
                                   f"of the data set's {dinfo['data_bytes']} bytes"))
    why25 = check_config(binary, cfg25, data)
    if why25:
        print(f"[bench] 2p: prepfs check refused {cfg25}: {why25}; 2p not run", flush=True)
        pf.pending_why = f"prepfs check refused the 25% config: {why25}"
    else:
        configs.append(("ppm25", cfg25, os.path.abspath(args.mountpoint) + "-25"))
    for key, config, mnt in configs:
        print(f"[bench] prepfs: {show_path(binary)} mount {show_path(config)} at {mnt}",
              flush=True)
        s = PrepfsSource("driver-mount", os.path.join(mnt, "augmented"), None,
                         mounter(config, mnt, key))
        if key == "ppm":
            pf.src = s
        elif key == "npy":
            pf.npy_src = s
        else:
            pf.src25 = s
    pf.desc = (f"mounted by the harness (`{show_path(binary)} mount "
               + " / ".join(show_path(c) for _, c, _ in configs)
               + "`), remounted with an empty cache for cold runs")


def new_report(args: argparse.Namespace, argv: Optional[Sequence[str]], machine: dict,
               dinfo: dict, data: str, n: int, cpus: List[int], pf: Prepfs) -> dict:
    """The report before any case has run: the command, the machine, the settings."""
    src, npy_src, src25 = pf.src, pf.npy_src, pf.src25
    return {
        "schema": 1,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(["python3", "-m", "prepfs_bench"]
                              + list(argv if argv is not None else sys.argv[1:])),
        "quick": args.quick,
        "invoked_as": args.invoked_as,
        "build_info": args.build_info,
        "machine": machine,
        "settings": {
            "data": data, **dinfo, "data_info": args.data_info, "reps": args.reps,
            "limit": args.limit,
            "samples_desc": f"{n} samples" + (" (the whole set)" if n == dinfo["data_samples"]
                                              else " (a fixed random subset)"),
            "workers": args.workers, "batch_size": loaders.BATCH_SIZE, "cpus": cpus,
            "prepfs": {"kind": src.kind if src else None, "desc": pf.desc,
                       "augmented": src.augmented if src else None,
                       "augmented25": src25.augmented if src25 else None,
                       "cache25_split_asked": args.cache_split,
                       "cache25_policy": args.cache_policy,
                       "cache25_bytes": (cache_of_share(dinfo["data_bytes"], args.cache_share)
                                         if src25 else None),
                       "augmented_npy": npy_src.augmented if npy_src else None},
            "pending_why": pf.pending_why,
            "fuse_floor": fuse_floor_settings(args, pf),
        },
        "cases": [],
    }


def fuse_floor_settings(args: argparse.Namespace, pf: Prepfs) -> dict:
    """Rows 3h-3k as the options set them up (the files and their size are filled in when they
    are known, by `floor_spec`); `why`: why they are not run."""
    binary = os.path.abspath(args.floorfs_bin) if args.floorfs_bin else None
    why = None
    if binary is None:
        why = "no --floorfs-bin (the harness mounts examples/floorfs)"
    elif not os.path.isfile(binary):
        why = f"{show_path(binary)} not built (cargo build --release --examples)"
    elif pf.src is None:
        why = "no prepfs source to take the file count and size from"
    threads = args.floorfs_threads or prepfs_fuse_threads(pf.config_text)
    return {"binary": binary, "threads": threads, "why": why,
            "mountpoint": os.path.abspath(args.mountpoint) + "-floor"}


def run_floor_case(case, args: argparse.Namespace, cpus: List[int], floor: dict) -> dict:
    """Row 3h or 3i: floorfs mounted for the row (plain or with passthrough) at case.data, read
    by run_case as 3d is, then unmounted. A mount that fails is the row's error; passthrough
    refused by the kernel (floorfs then serves plainly) is said in the row (`skipped`), and the
    run goes on."""
    spec = floor["spec"]
    try:
        fm = mount_floorfs(floor["binary"], case.data, spec["files"], spec["size"],
                           mode=case.floorfs, threads=floor["threads"], cpus=cpus,
                           log_path=floor.get("log_dir") and os.path.join(
                               floor["log_dir"], f"floorfs-{case.floorfs}.log"),
                           python=args.python)
    except FloorError as e:
        rec = dataclasses.asdict(case)
        rec.update(runs=[], warmup_runs=[], error=f"floorfs: {e}")
        return rec
    try:
        refused = fm.refusal()
        if refused:
            rec = dataclasses.asdict(case)
            rec.update(runs=[], warmup_runs=[], error=None,
                       skipped=f"passthrough refused by the kernel, not measured ({refused})")
        else:
            rec = run_case(case, args, cpus, fm, verbose=args.verbose)
    finally:
        fm.close()
    rec["floor"] = floor_record(fm, spec, floor["threads"])
    return rec


def start_sources(report: dict, pf: Prepfs) -> Optional[bool]:
    """Mounts what the driver mounts and checks every source's `augmented/`; records the PPM
    mount's stats.json. Returns whether it has a sample cache (None: not known, or no prepfs).
    Raises PrepfsError."""
    for s in pf.sources().values():
        s.ensure()
        if not os.path.isdir(s.augmented):
            raise PrepfsError(f"{s.augmented} is not a directory")
    cache_on = None
    src = pf.src
    if src is not None and src.kind != "stand-in":
        st = src.stats()
        if st is not None:
            # prepfs reports its cache under "cache" (memory 0: disabled); none: no cache
            mem = (st.get("cache") or {}).get("memory") or 0
            cache_on = mem > 0
        report["settings"]["prepfs"]["stats"] = st
    report["settings"]["prepfs"]["cache_on"] = cache_on
    return cache_on


def run_cases(args: argparse.Namespace, cpus: List[int], data: str, report: dict, pf: Prepfs,
              cache_on: Optional[bool], floor_dir: Optional[str]) -> Optional[set]:
    """Scenarios 1-3: the plan (less what --only leaves out), each case run in turn with only
    the prepfs daemon it reads running, its record appended to report["cases"]. Returns the ids
    --only keeps (None: all)."""
    src, npy_src, src25 = pf.src, pf.npy_src, pf.src25
    sources = pf.sources()
    floor = report["settings"]["fuse_floor"]
    if args.log_dir:
        floor["log_dir"] = os.path.abspath(args.log_dir)
    cases = plan(data, src.augmented if src else None, pf.aug_reads, floor_dir,
                 prepfs=src is not None and src.kind != "stand-in", quick=args.quick,
                 npy_augmented=npy_src.augmented if npy_src else None, npy_reads=pf.npy_reads,
                 cache_on=cache_on, augmented25=src25.augmented if src25 else None,
                 reads25=f"prepfs augmented/, cache {args.cache_share * 100:g}% of the set "
                         f"({fmt_bytes(report['settings']['prepfs']['cache25_bytes'])})",
                 fuse_floor=None if floor["why"] else floor["mountpoint"])
    keep = None
    if args.only:
        keep = set(args.only.split(","))
        if report["settings"]["pending_why"] is None and pf.binary:
            report["settings"]["pending_why"] = "not run (--only)"
        cases = [c for c in cases if c.id in keep or (c.id.startswith("2p") and "2p" in keep)]
    if any(c.floorfs for c in cases):
        # what the FUSE floor serves: as many files as 3d reads, of the size prepfs serves them
        try:
            src.ensure()
            floor["spec"] = floor_spec(src.augmented, args.limit)
            print(f"[bench] FUSE floor: {floor['spec']['files']} files of "
                  f"{floor['spec']['size']:,} bytes (the size prepfs serves), "
                  f"{floor['threads']} FUSE threads", flush=True)
        except (FloorError, OSError) as e:
            floor["why"] = f"the size prepfs serves is not known: {e}"
            print(f"[bench] FUSE floor not run: {floor['why']}", flush=True)
            cases = [c for c in cases if not c.floorfs]
    floor_ready = False
    for case in cases:
        # one prepfs daemon at a time: its cache should have the memory to itself
        for key, s in sources.items():
            if key != case.source or not case.prepfs:
                s.close()
        case_src = sources.get(case.source) if case.prepfs else None
        if case_src is not None:
            case_src.ensure()
        if case.data == floor_dir and not floor_ready:
            src.ensure()
            k = copy_floor(src.augmented, floor_dir, args.limit)
            src.close()
            print(f"[bench] copied {k} augmented outputs to {floor_dir} for the floor",
                  flush=True)
            floor_ready = True
        if case.floorfs:
            rec = run_floor_case(case, args, cpus, floor)
        else:
            rec = run_case(case, args, cpus, case_src, verbose=args.verbose)
        if case.source == "ppm25" and case_src is not None:
            split = ((rec.get("prepfs_stats") or {}).get("cache") or {}).get("split")
            if isinstance(split, list):
                report["settings"]["prepfs"]["cache25_split"] = "-".join(map(str, split))
        report["cases"].append(rec)
        print(progress_line(rec), flush=True)
    return keep


def finish(report: dict, args: argparse.Namespace) -> int:
    """The last figures of the report, the report written; the exit status: 1 if any case or
    variant failed, else 0."""
    drops = [r.get("page_cache_dropped") for c in report["cases"] for r in c["runs"]
             if c["cold"]]
    report["page_cache_drop"] = ("not needed" if not drops else "yes" if all(drops)
                                 else "no (drop_caches refused)" if not any(drops)
                                 else "partly")
    report["machine"]["loadavg_after"] = list(os.getloadavg())
    write_report(report, args.out, args.charts_dir, args.md)
    failed = any(c.get("error") for c in report["cases"]) or any(
        v.get("error") for v in (report.get("jobs") or {}).get("variants") or [])
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.report_only:
        with open(args.report_only) as f:
            report = json.load(f)
        write_report(report, args.report_only, args.charts_dir, args.md)
        return 0
    resolve_args(ap, args)
    data = os.path.abspath(args.data)
    unwind_on_signals()
    cpus = pin_cpus(args.cores)

    machine = machine_info()
    dinfo = dataset_info(data)
    n = dinfo["data_samples"] if not args.limit else min(args.limit, dinfo["data_samples"])
    print(f"[bench] {dinfo['data_samples']} images in {data}; {args.reps} runs x {n} samples per "
          f"case; CPUs {cpus}; load average {machine['loadavg_before'][0]:.2f}", flush=True)
    if machine["loadavg_before"][0] > 0.5:
        print("[bench] warning: the machine is busy; throughput figures will be low",
              flush=True)

    own_config_dir = args.config_dir is None
    config_dir = tempfile.mkdtemp(prefix="prepfs-bench-configs-") if own_config_dir \
        else os.path.abspath(args.config_dir)
    os.makedirs(config_dir, exist_ok=True)
    pf = setup_prepfs(args, data, dinfo, cpus, config_dir)
    report = new_report(args, argv, machine, dinfo, data, n, cpus, pf)
    sources = pf.sources()
    floor_dir = None
    try:
        cache_on = start_sources(report, pf)
        if pf.src is not None:
            floor_dir = tempfile.mkdtemp(prefix=f"prepfs-bench-floor-{os.getpid()}-",
                                         dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        keep = run_cases(args, cpus, data, report, pf, cache_on, floor_dir)
        # scenario 4: concurrent jobs, on mounts of its own (the others closed first)
        for s in sources.values():
            s.close()
        if pf.binary and (keep is None or any(k.startswith("4") for k in keep)):
            report["jobs"] = run_jobs_scenario(args, cpus, pf.binary, pf.base_text, data,
                                               os.path.abspath(args.mountpoint), config_dir,
                                               keep)
    except PrepfsError as e:
        print(f"[bench] error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt as e:
        print(f"[bench] interrupted ({e or 'SIGINT'}); unmounting, no report written",
              file=sys.stderr, flush=True)
        return 130
    finally:
        for s in sources.values():
            s.close()
        if floor_dir:
            shutil.rmtree(floor_dir, ignore_errors=True)
        if own_config_dir:
            shutil.rmtree(config_dir, ignore_errors=True)
    return finish(report, args)
