#!/usr/bin/env python3
"""Peak resident memory of the prepfs daemon under two attacks from the hardening issue:
20,000 open handles on augmented/, and a 50 GB sparse .jpg in the source read through every view.

Usage: scripts/measure_hardening.py PREPFS_BIN MAKE_DATASET_BIN OUT.json
Mounts under a temporary directory (unmounted on every way out); prints and writes the figures.
"""
import json, os, resource, subprocess, sys, tempfile, time

def vm(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0

def main():
    prepfs, gen, out = sys.argv[1:4]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = tempfile.mkdtemp()
    src, mnt = os.path.join(tmp, "src"), os.path.join(tmp, "mnt")
    subprocess.run([gen, "--out", src, "--classes", "4", "--per-class", "50", "--quiet"], check=True)
    with open(os.path.join(src, "n00000000", "huge.jpg"), "wb") as f:
        f.truncate(50 << 30)
    cfg = os.path.join(tmp, "c.yaml")
    open(cfg, "w").write("cache: { memory: 256MiB }\n")
    log = open(os.path.join(tmp, "log"), "w")
    p = subprocess.Popen([prepfs, "mount", cfg, "--source", src, "--mountpoint", mnt], stderr=log)
    figures = {}
    try:
        for _ in range(600):
            if os.path.exists(os.path.join(mnt, "augmented")):
                break
            time.sleep(0.05)
        base = vm(p.pid, "VmRSS")
        # Attack 1: the 50 GB sparse sample through every view.
        for path in ["decoded/n00000000/huge.ppm", "augmented/n00000000/huge.ppm", "jobs/a/augmented/n00000000/huge.ppm"]:
            try:
                open(os.path.join(mnt, path), "rb").read()
            except OSError as e:
                figures.setdefault("sparse_50gb_errors", []).append(f"{path}: {e.strerror}")
        with open(os.path.join(mnt, "encoded/n00000000/huge.jpg"), "rb") as f:
            f.read(1 << 20)
        figures["rss_base_mb"] = base / 1e6
        figures["peak_rss_after_sparse_50gb_mb"] = vm(p.pid, "VmHWM") / 1e6
        # Attack 2: 20,000 open handles on augmented/ (stops at 5 refusals; each waits 2 s).
        files = sorted(os.path.join(mnt, "augmented", c, n) for c in os.listdir(os.path.join(mnt, "augmented"))
                       for n in os.listdir(os.path.join(mnt, "augmented", c)) if not n.startswith("huge"))
        held, refused, started = [], 0, time.time()
        for i in range(20000):
            try:
                held.append(open(files[i % len(files)], "rb"))
            except OSError as e:
                refused += 1
                figures["refusal"] = e.strerror
                if refused >= 5:
                    break
        figures["handles_opened"] = len(held)
        figures["opens_refused"] = refused
        figures["peak_rss_with_handles_mb"] = vm(p.pid, "VmHWM") / 1e6
        figures["open_seconds"] = time.time() - started
        for f in held:
            f.close()
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            subprocess.run(["fusermount3", "-u", "-z", mnt])
    print(json.dumps(figures, indent=1))
    json.dump(figures, open(out, "w"), indent=1)

main()
