"""prepfs_bench.scenario4: running scenario 4, concurrent jobs.

Owns the scenario's setting (the subset of the data set in quick runs, the derived read-limited
configs, checked by `prepfs check`), its job processes (`JobProcs`: one `loaders run --sync`
per job, their output on one queue) and the runs of each variant (`run_jobs_variant`: a fresh
mount per run, the page cache dropped, every job started at once; figures from the jobs'
results and the mount's stats.json, computed by prepfs_bench.stats).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from . import loaders, module_command, show_path
from .config import cache_of_share, check_config, derive_config, policy_setting
from .mount import PrepfsError, PrepfsMount, mount_prepfs
from .plan import JOB_VARIANTS
from .report import jobs_progress_line
from .stats import jobs_run_record, merge_job_stats, summarize_jobs
from .units import fmt_bytes, fmt_pct, parse_size


def make_subset_tree(src: str, dst: str, per_class: int) -> int:
    """`per_class` images of each class of the ImageFolder tree `src` (a fixed random pick)
    under `dst`, same class directories, hard-linked (copied across file systems)."""
    classes, samples = loaders.list_image_folder(src)
    n = 0
    for ci, c in enumerate(classes):
        paths = [p for p, k in samples if k == ci]
        for p in loaders.pick(paths, per_class):
            out = os.path.join(dst, os.path.relpath(p, src))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            try:
                os.link(p, out)
            except OSError:
                shutil.copyfile(p, out)
            n += 1
    return n


class JobProcs:
    """The job processes of one variant (`loaders run --sync`, one per job), each running
    `reps` runs; their output lines, read by one thread each, arrive on one queue."""

    def __init__(self, cmds: Sequence[Sequence[str]]):
        import queue

        self.queue: "queue.Queue" = queue.Queue()
        self.procs, self.errs = [], []
        for i, cmd in enumerate(cmds):
            errf = tempfile.TemporaryFile(mode="w+")
            p = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=errf, text=True, bufsize=1)
            self.procs.append(p)
            self.errs.append(errf)
            threading.Thread(target=self._pump, args=(i, p), daemon=True).start()

    def _pump(self, i: int, p: subprocess.Popen) -> None:
        for line in p.stdout:
            self.queue.put((i, line))
        self.queue.put((i, None))

    def next(self, deadline: float):
        """(job index, line or None at its end); raises TimeoutError at the deadline."""
        import queue

        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            return self.queue.get(timeout=left)
        except queue.Empty:
            raise TimeoutError from None

    def go(self) -> None:
        for p in self.procs:
            p.stdin.write("go\n")
            p.stdin.flush()

    def stderr_tail(self, i: int, n: int = 3000) -> str:
        self.errs[i].seek(0)
        return self.errs[i].read()[-n:]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in self.errs:
            f.close()


def _trim_stats(st: Optional[dict]) -> Optional[dict]:
    if not st:
        return None
    return {k: st.get(k) for k in ("source_bytes_read", "views", "cache", "plan", "refills",
                                   "jobs", "decode_errors", "source_errors", "samples")}


def run_jobs_variant(vid: str, key: str, loader: str, label: str, reads: str, *, args,
                     cpus: List[int], mounter: Callable[[], PrepfsMount],
                     data_for: Callable[[str, int], str], settings: dict) -> dict:
    """All runs of one variant of scenario 4: the job processes start (importing torch) and
    wait; before each run the mount is made afresh (empty cache), the page cache dropped, then
    every job is told to go at once; figures come from the jobs' results and the mount's
    stats.json."""
    rec = {"id": vid, "key": key, "loader": loader, "label": label, "reads": reads,
           "runs": [], "error": None}
    n_jobs, reps = settings["jobs"], settings["reps"]
    mnt_root = None
    cmds = []
    for i in range(n_jobs):
        cmd = module_command(args.python, "loaders") + ["run", "--loader", loader,
               "--data", "@DATA@", "--workers", str(args.workers), "--reps", str(reps),
               "--epochs", str(settings["epochs"]), "--seed", str(1000 * (i + 1)), "--sync",
               "--cpus", ",".join(map(str, cpus))]
        if loader == "job-torchvision":
            cmd += ["--uncached", settings["uncached"]]
        cmds.append(cmd)
    mount: Optional[PrepfsMount] = None
    procs: Optional[JobProcs] = None
    try:
        # the path each job reads is known once the mount point is (the same every run)
        mnt_root = mounter.mountpoint  # type: ignore[attr-defined]
        cmds = [[data_for(mnt_root, i) if a == "@DATA@" else a for a in c]
                for i, c in enumerate(cmds)]
        procs = JobProcs(cmds)
        deadline = time.monotonic() + args.jobs_timeout
        early: set = set()  # jobs whose next @@ready came while the run was being collected
        for rep in range(reps):
            ready, ended = set(early), set()
            early = set()
            while len(ready) < n_jobs:
                i, line = procs.next(deadline)
                if line is None:
                    raise RuntimeError(f"job {i} exited before run {rep}: "
                                       + (procs.stderr_tail(i).strip().splitlines() or ["?"])[-1])
                if line.startswith(loaders.READY_TAG):
                    ready.add(i)
            if mount:
                mount.close()
            mount = mounter()
            dropped = loaders.drop_page_cache()
            st0 = mount.stats()
            cpu0 = mount.cpu_seconds()
            known: Dict[str, dict] = {}
            results: Dict[int, dict] = {}
            procs.go()
            while len(results) + len(ended) < n_jobs:
                i, line = procs.next(deadline)
                if line is None:
                    ended.add(i)
                    continue
                if line.startswith(loaders.RESULT_TAG):
                    results[i] = json.loads(line[len(loaders.RESULT_TAG):])
                    merge_job_stats(known, mount.stats())
                elif line.startswith(loaders.READY_TAG):
                    early.add(i)
            fs_cpu = mount.cpu_seconds() - cpu0
            st1 = mount.stats()
            merge_job_stats(known, st1)
            if len(results) < n_jobs:
                bad = sorted(set(range(n_jobs)) - set(results))
                raise RuntimeError(f"job {bad[0]} failed in run {rep}: "
                                   + (procs.stderr_tail(bad[0]).strip().splitlines()
                                      or ["?"])[-1])
            expected = (settings["data_bytes"] * settings["epochs"] * n_jobs
                        if key == "torchvision" else None)
            run = jobs_run_record(key, [results[i] for i in range(n_jobs)], st0, st1, fs_cpu,
                                  known if key.startswith("prepfs-ods") else None, expected)
            run["rep"] = rep
            run["page_cache_dropped"] = dropped
            run["fs_stats_end"] = _trim_stats(st1)
            rec["runs"].append(run)
            split = ((st1 or {}).get("cache") or {}).get("split")
            if key != "torchvision" and isinstance(split, list) and "split" not in settings:
                settings["split"] = "-".join(str(x) for x in split)
            inputs = (((st1 or {}).get("plan") or {}).get("inputs") or {})
            if key != "torchvision" and inputs and "model_inputs" not in settings:
                settings["model_inputs"] = {k: inputs.get(k) for k in
                                            ("t_da", "t_a", "b_storage", "s_data", "b_cache")}
                settings["model_inputs"]["predicted_samples_per_s"] = (
                    (st1.get("plan") or {}).get("predicted_samples_per_s"))
            if args.verbose:
                print(f"[bench]     {vid} run {rep}: makespan {run['makespan_s']:.1f} s, hit "
                      f"rate {fmt_pct(run.get('hit_rate'))}, source "
                      f"{fmt_bytes(run.get('source_bytes_read'))}, CPU {run['cpu_s']:.1f} s",
                      flush=True)
            mount.close()
            mount = None
    except TimeoutError:
        rec["error"] = f"timed out after {args.jobs_timeout:.0f} s"
    except (RuntimeError, PrepfsError, ValueError, OSError) as e:
        rec["error"] = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        if mount is not None:
            rec["log_tail"] = mount.log_tail()
    finally:
        if procs is not None:
            if rec["error"]:
                rec["stderr_tail"] = "\n".join(procs.stderr_tail(i, 1000)
                                               for i in range(n_jobs))
            procs.close()
        if mount is not None:
            mount.close()
    if rec["runs"]:
        rec["summary"] = summarize_jobs(rec["runs"])
    return rec


def run_jobs_scenario(args, cpus: List[int], binary: str, base_text: str, data: str,
                      mountpoint: str, config_dir: str, keep: Optional[set]) -> dict:
    """Scenario 4: the three variants, each on fresh mounts. Returns report["jobs"]."""
    tmp = None
    jobs_data = data
    subset = None
    try:
        if args.jobs_per_class:
            tmp = tempfile.mkdtemp(prefix=f"prepfs-bench-jobs-data-{os.getpid()}-")
            k = make_subset_tree(data, tmp, args.jobs_per_class)
            jobs_data = tmp
            subset = f"quick: {args.jobs_per_class} images per class, {k} in all"
        _, samples = loaders.list_image_folder(jobs_data)
        data_bytes = sum(os.stat(p).st_size for p, _ in samples)
        cache_bytes = cache_of_share(data_bytes, args.cache_share)
        settings = {
            "jobs": args.jobs, "epochs": args.jobs_epochs, "reps": args.jobs_reps,
            "workers": args.workers, "batch_size": loaders.BATCH_SIZE, "cpus": cpus,
            "data": jobs_data, "data_samples": len(samples), "data_bytes": data_bytes,
            "subset": subset, "read_limit": args.read_limit,
            "read_limit_bytes_per_s": parse_size(args.read_limit),
            "cache_share": args.cache_share, "cache_bytes": cache_bytes,
            "cache_split": args.cache_split, "cache_policy": args.cache_policy,
            "uncached": args.jobs_uncached,
            "uncached_desc": {"fadvise": "`posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)` after "
                                         "reading it",
                              "direct": "opened with `O_DIRECT`",
                              "none": "no: read normally"}[args.jobs_uncached],
        }
        storage_cfg = os.path.join(config_dir, "jobs-storage.yaml")
        prepfs_cfg = os.path.join(config_dir, "jobs-prepfs.yaml")
        tuned_cfg = os.path.join(config_dir, "jobs-prepfs-tuned.yaml")
        settings["consumer_rate"] = args.consumer_rate
        configs = [
            (storage_cfg, None, "scenario 4's storage: read-limited, no cache"),
            (prepfs_cfg, f"{{ memory: {cache_bytes}, split: {args.cache_split}"
                         f"{policy_setting(args.cache_policy)} }}",
             f"scenario 4: read-limited source, a cache of {args.cache_share * 100:.0f}% of the "
             f"set's bytes"),
            (tuned_cfg, f"{{ memory: {cache_bytes}, split: auto, policy: lru, "
                        f"consumer_samples_per_s: {args.consumer_rate} }}",
             "scenario 4d: the same cache, set as README advises for concurrent jobs"),
        ]
        for path, cache, note in configs:
            with open(path, "w") as f:
                f.write(derive_config(base_text, cache, jobs_data, args.read_limit, note))
        settings["configs"] = {"storage": storage_cfg, "prepfs": prepfs_cfg, "tuned": tuned_cfg}
        out = {"settings": settings, "variants": []}
        for cfg in (storage_cfg, prepfs_cfg, tuned_cfg):
            err = check_config(binary, cfg, jobs_data)
            if err:
                out["error"] = f"prepfs check {show_path(cfg)}: {err}"
                print(f"[bench] 4: not run: {out['error']}", flush=True)
                return out
        log_dir = os.path.abspath(args.log_dir) if args.log_dir else None

        def mounter_for(cfg: str, mnt: str, key: str):
            log = os.path.join(log_dir, f"prepfs-{key}.log") if log_dir else None

            def m() -> PrepfsMount:
                return mount_prepfs(binary, cfg, jobs_data, mnt, cpus=cpus, log_path=log)
            m.mountpoint = mnt  # type: ignore[attr-defined]
            return m
        storage = mounter_for(storage_cfg, mountpoint + "-storage", "jobs-storage")
        shared = mounter_for(prepfs_cfg, mountpoint + "-jobs", "jobs")
        tuned = mounter_for(tuned_cfg, mountpoint + "-jobs", "jobs-tuned")
        paths = {
            "prepfs-ods-tuned": (tuned, lambda mnt, i: os.path.join(mnt, "jobs", f"job{i}",
                                                                     "augmented")),
            "torchvision": (storage, lambda mnt, i: os.path.join(mnt, "encoded")),
            "prepfs": (shared, lambda mnt, i: os.path.join(mnt, "augmented")),
            "prepfs-ods": (shared, lambda mnt, i: os.path.join(mnt, "jobs", f"job{i}",
                                                               "augmented")),
        }
        rate = settings["read_limit_bytes_per_s"] / (data_bytes / len(samples))
        print(f"[bench] 4: {args.jobs} jobs x {args.jobs_epochs} epochs over {len(samples)} "
              f"images ({fmt_bytes(data_bytes)}), storage {args.read_limit} (~{rate:.0f} "
              f"samples/s), cache {fmt_bytes(cache_bytes)}, {args.jobs_reps} run(s) per variant",
              flush=True)
        for vid, key, loader, label, reads in JOB_VARIANTS:
            if keep is not None and vid not in keep and "4" not in keep:
                continue
            mounter, data_for = paths[key]
            reads = reads.format(R=args.read_limit, C=fmt_pct(args.cache_share),
                                 T=args.consumer_rate)
            v = run_jobs_variant(vid, key, loader, label, reads, args=args, cpus=cpus,
                                 mounter=mounter, data_for=data_for, settings=settings)
            out["variants"].append(v)
            print(jobs_progress_line(v), flush=True)
        return out
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
