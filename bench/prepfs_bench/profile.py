#!/usr/bin/env python3
"""`make profile` (issue 55): where the daemon's CPU goes, and where the jobs wait, in the
three-job run of prepfs_bench.jobs (`three_jobs`: three unmodified ImageFolder-like jobs, one
process each over jobs/job<i>/augmented, 2 epochs, prepfs's defaults with a cache of 20% of the
set's bytes, local storage with the source in the page cache).

The daemon: `perf record -e cpu-clock` (software clock: this machine's VMs have no hardware
cycles) on the mount's server process (stats.json's `server.pid`; the supervisor is left out),
from just before the jobs start to just after they end. Call graphs are unwound from DWARF
(`--call-graph dwarf`) at a modest rate (`--freq`, 499 Hz): the release build has line tables
(`debug = 1`) but no frame pointers, and neither have the libc and libjpeg-turbo it links to, so
frame-pointer chains there are broken; DWARF unwinds them all without a rebuild, at the cost of
an 8 KiB stack copy per sample (about 4 MB/s at 499 Hz on 2 cores) and a slower `perf script`.
`--call-graph fp` is there for a build with `-C force-frame-pointers=yes`.

Every sample's stack goes to one category (CATEGORIES, below: the rules are written once, here):
a stack in the kernel by the way it entered it (the syscall or fault; a fault of the allocator's
fresh memory is allocation), else by its innermost frame that names a category's work. Out come
the table (% of samples, ms of daemon CPU per sample served), the folded stacks and two flame
graphs (by thread, and by category), drawn by inferno (`cargo install inferno`) where
`inferno-flamegraph` is found.

The waiting side: each job times its `open` calls and its reads (prepfs_bench.jobs's TRACE: the
open PIL makes, the header's read, and the pixels' load, which is page faults of PIL's mmap of a
PPM) and reads its own schedstat (CPU, time runnable waiting for a core). Beside the daemon's
perf, a second `perf record -a` (no call graphs) samples both cores: during each job's blocked
time, what the cores did (the daemon, the other jobs, idle, anything else). The plan's
prediction of the makespan (prepfs_bench.jobs's `predicted_makespan`) stands beside them.
`--baseline` first runs the same scenario without perf, for what perf itself costs.

Usage: PYTHONPATH=bench python3 -m prepfs_bench.profile --prepfs target/release/prepfs --gen target/release/examples/make_dataset
                                              [--sets real,gen500] [--epochs 2] [--freq 499] [--baseline] [--out PREFIX]
Writes PREFIX/<set>.folded, PREFIX/<set>-threads.svg, PREFIX/<set>-categories.svg, PREFIX.json and
PREFIX.md (default bench/results/DATE-profile), and the table to BENCHMARKS.md's Runs.
"""
import bisect
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import ROOT
from .epochs import warm
from .jobs import predicted_makespan, three_jobs, tree_bytes
from .mount import Mount, proc_cpu_seconds
from .plan_matrix import make_set
from .runs import script_args, summary_of, write_report
from .warm_floor import thread_cpu

# The categories, in the order they are tried on a stack's frames from the innermost out; the
# first whose pattern matches a frame's symbol (or its library, for libjpeg-turbo and libc's
# allocator) takes the sample. Symbols are Rust's demangled paths, C names, kernel names.
CATEGORIES = [
    ("allocation", r"^(__libc_)?(malloc|free|calloc|realloc|cfree)$|^_int_(malloc|free|realloc)|^malloc_consolidate|"
                   r"^__rust_(alloc|dealloc|realloc|alloc_zeroed)|^alloc::raw_vec|^alloc::alloc::|^<alloc::alloc::Global|"
                   r"^sysmalloc|^unlink_chunk|^tcache_|^__default_morecore|mi_|^je_|^prepfs_base::alloc"),
    ("locks and waiting", r"futex|^std::sys::sync::|^std::thread::park|parking_lot|^crossbeam_channel::|"
                          r"^std::sync::(mpmc|mpsc|poison|Condvar|Mutex|RwLock|condvar|mutex|rwlock)|"
                          r"^__lll_lock|^pthread_(mutex|cond|rwlock)|^sched_yield|^__sched_yield|"
                          r"^prepfs_base::sync"),
    # libjpeg-turbo, and the image crate's decoders for the sources that are not JPEG (PNG:
    # the generator's set has some, as ImageNet does).
    ("JPEG decode", r"^(tj|jpeg_|jinit_|jsimd_|decode_mcu|decompress_|process_data_|ycc_|h2v[12]_|"
                    r"jpeg_idct|jpeg_fill|sep_upsample|fullsize_upsample|start_pass|consume_data|"
                    r"fill_bit_buffer|jpeg_huff_decode|prepfs_pixels::jpeg|turbojpeg::|zune_jpeg::)|"
                    r"libturbojpeg|libjpeg|^<?image::(codecs|io|images::dynimage)|^<alloc::boxed::Box<T> as image::io|"
                    r"^png::|^<png::|^fdeflate::decompress|^<fdeflate::decompress"),
    ("resize/resample", r"fast_image_resize|^image::imageops::sample|resample|resize"),
    ("augment ops", r"^prepfs_pixels::(augment|pixel_ops|color|erasing|crop_padding|pil_warp|autoaugment|"
                    r"timm_rand|pipeline)|^image::imageops::(colorops|affine)|^rand|^rand_pcg"),
    ("output encoding and copies", r"^prepfs_pixels::(output|encode_png|encode_jpeg|served)|^flate2::|^miniz_oxide::deflate|"
                                   r"^fdeflate::compress|memcpy|memmove|^__memcpy|^__memmove|copy_user|_copy_to_iter|"
                                   r"_copy_from_iter|copyout|copyin|^bytes::|<bytes::"),
    ("FUSE request handling", r"^fuser::|^prepfs::fuse|fuse_dev|^fuse_|^__x64_sys_(read|write|writev|splice)$"),
    ("page cache / kernel", r"^filemap_|^generic_file|^page_cache|^__x64_sys_(pread64|openat|statx|newfstatat|close)|"
                            r"^ext4_|^xfs_|^vfs_|^do_sys_|^asm_exc_page_fault|^exc_page_fault|^handle_mm_fault"),
]
# A stack in the kernel goes by what it is there for: the first of these whose pattern matches
# any of its kernel frames (the syscall or fault, or the file system it works in), tried before
# the frames above:
KERNEL_ENTRY = [
    # The served bytes written into their file of the mount's tmpfs (passthrough's copy).
    ("output encoding and copies", r"^shmem_file_write_iter$|^shmem_tmpfile$"),
    ("locks and waiting", r"^__x64_sys_(futex|sched_yield|epoll_wait|epoll_pwait|nanosleep|clock_nanosleep|poll|ppoll)$"),
    ("allocation", r"^__x64_sys_(mmap|munmap|mremap|madvise|brk|mprotect)$"),
    ("FUSE request handling", r"fuse_dev_|^__x64_sys_(writev|splice)$"),
    ("page faults", r"^asm_exc_page_fault$"),
    # The source's reads and stats, from the page cache here.
    ("page cache / kernel", r"^__x64_sys_(pread64|read|openat|newfstatat|statx|close|readlink)$|^filemap_read$"),
]
# A sample whose innermost frame is the scheduler's: the CPU of a context switch (cpu-clock is
# sampled as interrupts come back on at its end), shown apart within each category.
SWITCH = re.compile(r"^(finish_task_switch|__schedule|schedule)\b")
OTHER = "other"
ORDER = [c for c, _ in CATEGORIES] + ["page faults", OTHER]


def compiled():
    return [(c, re.compile(p)) for c, p in CATEGORIES], [(c, re.compile(p)) for c, p in KERNEL_ENTRY]


def categorize(frames, rules=None):
    """The category of one stack: FRAMES innermost first, each (symbol, library). A page fault
    is the allocator's (fresh memory) when the user code it came from is, else 'page cache /
    kernel' (shown as 'page faults' apart when the faulting code is the daemon's own work)."""
    rules, entries = rules or compiled()
    kernel = [f for f in frames if f[1] == "[kernel.kallsyms]"]
    user = [f for f in frames if f[1] != "[kernel.kallsyms]"]
    for cat, rx in entries:
        if any(rx.search(sym) for sym, _ in kernel):
            if cat != "page faults":
                return cat
            inner = categorize(user, (rules, entries)) if user else OTHER
            return "allocation" if inner == "allocation" else "page faults"
    # A read or write syscall on /dev/fuse names fuse_dev_* inside it (KERNEL_ENTRY); a read of
    # the source (or any other kernel work) goes by the frames below.
    for sym, lib in frames:
        for cat, rx in rules:
            if rx.search(sym) or (cat in ("JPEG decode", "allocation") and rx.search(os.path.basename(lib))):
                return cat
    return OTHER


HEADER = re.compile(r"^\s*(\S.*?)\s+(\d+)(?:/(\d+))?\s+\[(\d+)\]\s+([\d.]+):")
FRAME = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def perf_samples(data, callchains=True):
    """The samples of a perf.data: dicts of comm, pid, tid, cpu, time (s) and frames (innermost
    first: (symbol without its +offset, library)), from `perf script`."""
    fields = "comm,pid,tid,cpu,time" + (",ip,sym,dso" if callchains else "")
    run = subprocess.run(["perf", "script", "-i", data, "-F", fields, "--ns"], capture_output=True, text=True,
                         errors="replace")
    if run.returncode != 0:
        raise RuntimeError(f"perf script -i {data}: {run.stderr[-2000:]}")
    out = run.stdout
    samples, cur = [], None
    for line in out.splitlines():
        m = HEADER.match(line)
        if m and not line.startswith("\t"):
            comm, pid, tid, cpu, t = m.groups()
            cur = {"comm": comm, "pid": int(pid), "tid": int(tid or pid), "cpu": int(cpu), "time": float(t), "frames": []}
            samples.append(cur)
            continue
        f = FRAME.match(line)
        if f and cur is not None:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", f.group(1))
            cur["frames"].append((sym, f.group(2)))
    return samples


def thread_kind(comm):
    return comm.rsplit("-", 1)[0] if comm[-1:].isdigit() else comm


def folded(samples, cats, by_category):
    """Folded stacks (outermost first; ';' and spaces kept out of names) with the thread's kind,
    or the category, as the root frame: `inferno-flamegraph`'s input."""
    counts = collections.Counter()
    for s, c in zip(samples, cats):
        names = [re.sub(r"[; ]", "_", sym) for sym, _ in reversed(s["frames"])] or ["[unknown]"]
        root = c if by_category else thread_kind(s["comm"])
        counts[";".join([root] + names)] += 1
    return "".join(f"{k} {v}\n" for k, v in sorted(counts.items()))


def flamegraph(folded_path, svg, title):
    """The flame graph of a folded file with inferno, where installed; False otherwise."""
    tool = shutil.which("inferno-flamegraph") or os.path.expanduser("~/.cargo/bin/inferno-flamegraph")
    if not os.path.exists(tool):
        return False
    with open(folded_path) as f, open(svg, "w") as g:
        subprocess.run([tool, "--title", title, "--countname", "samples"], stdin=f, stdout=g, check=True)
    return True


def start_perf(args):
    """A `perf record` started, its output file there (perf has attached) before this returns."""
    out = args[args.index("-o") + 1]
    proc = subprocess.Popen(["perf", "record", "-q"] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while not (os.path.exists(out) and os.path.getsize(out) > 0):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"perf record {' '.join(args)} did not start: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    return proc


def stop_perf(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def merged(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def within(t, starts, ivs):
    i = bisect.bisect_right(starts, t) - 1
    return i >= 0 and t <= ivs[i][1]


def context_switches(pid):
    """Context switches of a process's threads by kind (`thread_kind`), from /proc's status: the
    voluntary ones (the thread slept) under the kind, the others (it was preempted) under
    "<kind> preempted"."""
    by_kind = collections.Counter()
    task = f"/proc/{pid}/task"
    for tid in os.listdir(task):
        try:
            with open(f"{task}/{tid}/comm") as f:
                kind = thread_kind(f.read().strip())
            with open(f"{task}/{tid}/status") as f:
                for ln in f:
                    if ln.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                        by_kind[kind + (" preempted" if ln.startswith("non") else "")] += int(ln.split()[1])
        except OSError:
            continue  # the thread ended meanwhile
    return by_kind


def waits(traces, machine, daemon_pid, freq):
    """Each job's blocked time (open, read) and what both cores did meanwhile: the system-wide
    samples (`machine`) that fall in its blocked intervals, as core-seconds, by who ran; what no
    sample fell on was idle (cpu-clock does not tick on an idle core)."""
    cores = len(os.sched_getaffinity(0))
    job_pids = {t["pid"] for t in traces}
    rows = []
    for i, t in enumerate(traces):
        opens = sum(b - a for a, b in t["opens"])
        reads = sum(b - a for a, b in t["reads"])
        ivs = merged(t["opens"] + t["reads"])
        starts = [a for a, _ in ivs]
        during = collections.Counter()
        for s in machine:
            if within(s["time"], starts, ivs):
                who = ("daemon" if s["pid"] == daemon_pid else "this job" if s["pid"] == t["pid"]
                       else "other jobs" if s["pid"] in job_pids else "idle" if s["pid"] == 0 else "other")
                during[who] += 1 / freq
        if machine:
            during["idle"] += max(0.0, sum(b - a for a, b in ivs) * cores - sum(during.values()))
        cpu_ns, runnable_ns, _ = t.get("schedstat") or (None, None, None)
        rows.append({"job": f"job{i}", "opens": len(t["opens"]), "open_s": opens, "read_s": reads, "blocked_s": opens + reads,
                     "cpu_s": t["cpu_s"], "runnable_s": runnable_ns / 1e9 if runnable_ns is not None else None,
                     "during_blocked_core_s": dict(during)})
    return rows


def profile_set(args, kind, workdir, outdir, with_perf):
    source = make_set(kind, args.gen, args.data)
    warm(source)
    cache = max(1 << 20, tree_bytes(source) // 5)
    name = f"{kind}-{'perf' if with_perf else 'plain'}"
    mount = Mount(args.prepfs, source, workdir, name, f"cache: {{ memory: {cache} }}\n")
    perfs = []
    try:
        spid = mount.stats()["server"]["pid"]
        # The perf.data files are kept beside the report (`perf report -i` them for more).
        daemon_data, machine_data = os.path.join(outdir, name + ".data"), os.path.join(outdir, name + "-all.data")
        if with_perf:
            perfs.append(start_perf(["-e", "cpu-clock", "-F", str(args.freq), "--call-graph", args.call_graph,
                                     "-k", "CLOCK_MONOTONIC", "--sample-cpu", "-p", str(spid), "-o", daemon_data]))
            perfs.append(start_perf(["-a", "-e", "cpu-clock", "-F", str(args.freq), "-k", "CLOCK_MONOTONIC",
                                     "-o", machine_data]))
        traces = [os.path.join(workdir, f"{name}-job{i}.json") for i in range(3)]
        cpu0, threads0, switches0 = proc_cpu_seconds(spid), thread_cpu(spid), context_switches(spid)
        took, seen = three_jobs(mount, args.epochs, traces)
        cpu1, threads1, switches1 = proc_cpu_seconds(spid), thread_cpu(spid), context_switches(spid)
        for p in perfs:
            stop_perf(p)
        perfs = []
        st = mount.stats()
    finally:
        for p in perfs:
            stop_perf(p)
        mount.close()
    served = sum(j["samples_served"] for j in st["jobs"]["active"])
    row = {"set": kind, "perf": with_perf, "cache_bytes": cache, "makespan_s": took, "samples_served": served,
           "predicted_makespan_s": predicted_makespan(served, args.epochs, seen), "plan": st.get("plan"),
           "decodes": st["decodes"], "decode_ms_mean": st.get("decode_ms_mean"), "work": st.get("work"),
           "daemon_cpu_s": cpu1 - cpu0, "context_switches": sum((switches1 - switches0).values()),
           "context_switches_by_thread": dict(switches1 - switches0),
           "threads_cpu_s": {k: v - threads0.get(k, 0.0) for k, v in threads1.items() if v - threads0.get(k, 0.0) >= 0.01},
           "fuse_requests": st.get("fuse_requests"), "latency_us": st.get("latency_us")}
    jobs = []
    for t in traces:
        with open(t) as f:
            jobs.append(json.load(f))
    if not with_perf:
        row["waits"] = waits(jobs, [], spid, args.freq)
        return row
    samples = perf_samples(daemon_data)
    rules = compiled()
    cats = [categorize(s["frames"], rules) for s in samples]
    counts = collections.Counter(cats)
    switching = collections.Counter(c for s, c in zip(samples, cats) if s["frames"] and SWITCH.match(s["frames"][0][0]))
    row["daemon_samples"] = len(samples)
    # How many stacks DWARF unwound whole, to the thread's start (the rest stop early, in code
    # without unwind tables such as libjpeg-turbo's SIMD; their innermost frames still count).
    row["unwound_share"] = sum(1 for s in samples if s["frames"] and s["frames"][-1][0] in ("clone3", "__clone3", "start_thread", "_start")) / max(1, len(samples))
    row["categories"] = {c: {"samples": counts.get(c, 0), "share": counts.get(c, 0) / max(1, len(samples)),
                             "switch_share": switching.get(c, 0) / max(1, len(samples)),
                             "ms_per_sample": counts.get(c, 0) / args.freq * 1e3 / max(1, served)} for c in ORDER}
    # What a reader of the table asks next: the leaf functions, and who calls the copies.
    leaf = collections.Counter((s["frames"][0][0] if s["frames"] else "[unknown]") for s in samples)
    row["top_leaves"] = [[k, v] for k, v in leaf.most_common(40)]
    copy_rx = re.compile(dict(CATEGORIES)["output encoding and copies"])
    callers = collections.Counter()
    for s, c in zip(samples, cats):
        if c == "output encoding and copies":
            outer = [sym for sym, lib in s["frames"] if not copy_rx.search(sym) and lib != "[kernel.kallsyms]"][:3]
            callers[" < ".join(outer) or "[kernel]"] += 1
    row["copy_callers"] = [[k, v] for k, v in callers.most_common(20)]
    by_thread = collections.Counter((thread_kind(s["comm"]), c) for s, c in zip(samples, cats))
    row["by_thread"] = {f"{k[0]} / {k[1]}": v for k, v in by_thread.most_common(40)}
    for by_category, suffix in ((False, "threads"), (True, "categories")):
        path = os.path.join(outdir, f"{kind}-{suffix}.folded")
        with open(path, "w") as f:
            f.write(folded(samples, cats, by_category))
        row[f"flamegraph_{suffix}"] = flamegraph(path, path[:-len(".folded")] + ".svg",
                                                  f"prepfs server, three jobs x {args.epochs} epochs, {kind} ({suffix})") and path[:-len(".folded")] + ".svg"
    machine = perf_samples(machine_data, callchains=False)
    row["machine_samples"] = len(machine)
    # The whole run's cores: this run's daemon and jobs, and anyone else's work (a shared machine).
    job_pids = {j["pid"] for j in jobs}
    who = collections.Counter("daemon" if s["pid"] == spid else "jobs" if s["pid"] in job_pids else "idle" if s["pid"] == 0
                              else "perf" if s["comm"] == "perf" else "others" for s in machine)
    row["machine_core_s"] = {k: v / args.freq for k, v in who.items()}
    row["waits"] = waits(jobs, machine, spid, args.freq)
    return row


def table(rows):
    lines = []
    for r in (r for r in rows if r["perf"]):
        base = next((b for b in rows if not b["perf"] and b["set"] == r["set"]), None)
        lines += [f"Daemon CPU in the three-job run on `{r['set']}` ({r['samples_served']:,} samples served, makespan "
                  f"{r['makespan_s']:.1f} s with perf" + (f", {base['makespan_s']:.1f} s without" if base else "") +
                  f"; the plan predicted {r['predicted_makespan_s'] or 0:.1f} s): {r['daemon_samples']:,} cpu-clock samples "
                  f"at {r['freq']} Hz of the server process ({r['daemon_cpu_s']:.1f} CPU s by /proc), "
                  f"{r['decodes']:,} decodes of {r['decode_ms_mean'] or 0:.2f} ms; {r.get('unwound_share', 0) * 100:.0f}% of the stacks "
                  "unwound to their thread's start.", "",
                  "| category | % of samples | of which context switches | ms per sample served |", "| --- | ---: | ---: | ---: |"]
        for c in ORDER:
            v = r["categories"][c]
            lines.append(f"| {c} | {v['share'] * 100:.1f}% | {v['switch_share'] * 100:.1f}% | {v['ms_per_sample']:.3f} |")
        total = sum(v["ms_per_sample"] for v in r["categories"].values())
        switch = sum(v["switch_share"] for v in r["categories"].values())
        lines += [f"| all | 100% | {switch * 100:.1f}% | {total:.3f} |", "",
                  f"Context switches of the server's threads: {r['context_switches']:,} ({r['context_switches'] / r['samples_served']:.1f} "
                  f"per sample served; {switch * r['daemon_samples'] / r['freq'] / max(1, r['context_switches']) * 1e6:.0f} µs of CPU each "
                  "by the samples that fell in one), by thread: " + ", ".join(
                      f"{k} {v / r['samples_served']:.2f}" for k, v in sorted(r["context_switches_by_thread"].items(), key=lambda kv: -kv[1])
                      if v / r["samples_served"] >= 0.01) + ".", ""]
        lines += [f"The jobs' side (`{r['set']}`): seconds blocked in `open` and in reads (header, and the "
                  "pixels' page faults through PIL's mmap), their own CPU, time runnable waiting for a core; and during "
                  "their blocked time, what the two cores did (core-seconds from `perf record -a`).", "",
                  "| job | opens | open s | read s | blocked s (predicted) | CPU s | runnable s | cores while blocked: daemon / other jobs / idle / other |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for w in r["waits"]:
            d = w["during_blocked_core_s"]
            # The plan's rate leaves a job this long off its own CPU: the predicted makespan less its CPU.
            predicted = f"{r['predicted_makespan_s'] - w['cpu_s']:.1f}" if r["predicted_makespan_s"] else "-"
            lines.append(f"| {w['job']} | {w['opens']:,} | {w['open_s']:.1f} | {w['read_s']:.1f} | {w['blocked_s']:.1f} ({predicted}) "
                         f"| {w['cpu_s']:.1f} | {w['runnable_s'] or 0:.1f} | {d.get('daemon', 0):.1f} / "
                         f"{d.get('other jobs', 0):.1f} / {d.get('idle', 0):.1f} / {d.get('other', 0) + d.get('this job', 0):.1f} |")
        m = r.get("machine_core_s") or {}
        lines += ["", f"The machine's two cores over the run (core-seconds, `perf record -a`): this daemon {m.get('daemon', 0):.1f}, "
                  f"its jobs {m.get('jobs', 0):.1f}, perf {m.get('perf', 0):.1f}, other people's processes {m.get('others', 0):.1f}, "
                  f"of {r['makespan_s'] * len(os.sched_getaffinity(0)):.1f} (idle is not sampled)."]
        lines += ["", "The daemon's threads (CPU s): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["threads_cpu_s"].items(), key=lambda kv: -kv[1])),
                  "", "Top leaf functions (samples): " + "; ".join(f"`{k}` {v}" for k, v in r["top_leaves"][:15]),
                  "", "Copies' callers (samples): " + "; ".join(f"`{k}` {v}" for k, v in r["copy_callers"][:8]), ""]
        if r.get("flamegraph_threads"):
            lines += [f"Flame graphs: `{r['flamegraph_threads']}`, `{r['flamegraph_categories']}`", ""]
    return lines


def main():
    ap = script_args(__doc__, "profile")
    ap.add_argument("--sets", default="real", help="real, gen500 (prepfs_bench.plan_matrix's sets), comma-separated")
    ap.add_argument("--data", default=os.path.join(ROOT, "target", "plan-matrix-data"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--freq", type=int, default=499)
    ap.add_argument("--call-graph", default="dwarf", help="dwarf (default), or fp for a frame-pointer build")
    ap.add_argument("--baseline", action="store_true", help="first the same run without perf")
    args = ap.parse_args()
    os.makedirs(args.data, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="prepfs-profile-")
    rows = []
    try:
        for kind in args.sets.split(","):
            for with_perf in ([False] if args.baseline else []) + [True]:
                row = profile_set(args, kind, workdir, args.out, with_perf)
                row["freq"] = args.freq
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("set", "perf", "makespan_s", "daemon_cpu_s")}), flush=True)
        lines = table(rows)
        # BENCHMARKS.md keeps each set's two tables (the daemon's categories, the jobs' waits) and their lead text.
        summary = [ln for k in range(2 * sum(r["perf"] for r in rows)) for ln in summary_of(lines, k) + [""]]
        write_report(args.out, rows, lines, summary=summary)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
