#!/usr/bin/env bash
# make demo: generate a small ImageNet-like dataset, mount it with prepfs, read it the way a
# training job would (an ImageFolder-style walk with PIL), print what was seen, unmount.
set -euo pipefail
cd "$(dirname "$0")/.."

work=target/demo
src=$work/source
mnt=$work/mnt
bin=target/release/prepfs

if [ ! -d "$src" ]; then
  echo "== making a sample dataset in $src"
  target/release/examples/make_dataset --out "$src" --classes 5 --per-class 40 --bad
fi
mkdir -p "$mnt"

echo "== mounting $src at $mnt"
printf 'cache: { memory: 256MiB }\n' | cat mount-configs/imagenet.yaml - > "$work/demo.yaml"
$bin mount "$work/demo.yaml" --source "$src" --mountpoint "$mnt" 2>"$work/prepfs.log" &
pid=$!
cleanup() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if grep -qs " $(realpath "$mnt") " /proc/mounts; then fusermount3 -u -z "$mnt" || true; fi
}
trap cleanup EXIT INT TERM
for _ in $(seq 200); do
  grep -qs "prepfs: serving" "$work/prepfs.log" && cat "$mnt/.prepfs/stats.json" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/prepfs.log"; exit 1; }
  sleep 0.05
done

echo "== what the mount looks like"
ls "$mnt"
echo "\$ ls $mnt/augmented/n00000000 | head -3"
ls "$mnt/augmented/n00000000" | head -3
first=$(ls "$mnt/augmented/n00000000" | head -1)
echo "\$ ls -l decoded/ and augmented/ of $first (sizes are exact before any read)"
ls -l "$mnt/decoded/n00000000/$first" "$mnt/augmented/n00000000/$first" | awk '{print $5, $9}'

echo "== reading augmented/ as torchvision's ImageFolder would (PIL open + convert RGB)"
python3 - "$mnt" <<'PY'
import os, sys, time, hashlib
from PIL import Image
import numpy as np
root = os.path.join(sys.argv[1], "augmented")
classes = sorted(os.listdir(root))
ok = bad = 0
t0 = time.time()
for c in classes:
    for f in sorted(os.listdir(os.path.join(root, c))):
        try:
            img = Image.open(os.path.join(root, c, f)).convert("RGB")
            ok += 1
        except OSError as e:
            bad += 1
            print(f"  {c}/{f}: {e.__class__.__name__}: {e}")
dt = time.time() - t0
print(f"  {len(classes)} classes, {ok} samples read as {img.size[0]}x{img.size[1]} RGB, "
      f"{bad} refused (the generator's bad files), {ok / dt:.0f} samples/s")
p = os.path.join(root, classes[0], sorted(os.listdir(os.path.join(root, classes[0])))[0])
a, b = (hashlib.sha1(open(p, "rb").read()).hexdigest()[:12] for _ in range(2))
print(f"  two opens of {os.path.basename(p)}: {a} vs {b} ({'different crops' if a != b else 'SAME'})")
arr = np.asarray(Image.open(p).convert("RGB"))
print(f"  pixel mean per channel: {arr.reshape(-1, 3).mean(0).round(1).tolist()}")
PY

echo "== two training jobs at once under jobs/ (opportunistic sampling), 2 epochs each"
python3 - "$mnt" <<'PY'
import os, sys, threading
from PIL import Image
mnt = sys.argv[1]
def job(name):
    root = os.path.join(mnt, "jobs", name, "augmented")
    files = [os.path.join(root, c, f) for c in sorted(os.listdir(root)) for f in sorted(os.listdir(os.path.join(root, c)))]
    for epoch in range(2):
        for p in files:
            try:
                Image.open(p).convert("RGB")
            except OSError:
                pass  # the generator's bad files
threads = [threading.Thread(target=job, args=(n,)) for n in ("resnet", "vit")]
[t.start() for t in threads]; [t.join() for t in threads]
PY
$bin stats --json "$mnt" | python3 -c "
import json, sys
d = json.load(sys.stdin)
for j in d['jobs']['active']:
    print(f\"  job {j['name']}: epoch {j['epoch']}, {j['samples_served']} samples served, \"
          f\"hit rate {j['hit_rate']:.2f}, {j['substitutions']} substitutions, {j['prefetched']} prefetched\")
c = d['cache']
print(f\"  cache split {c['split']}: \" + ', '.join(f\"{f} {c[f]['entries']} entries\" for f in ('encoded', 'decoded', 'augmented')))
"

echo "== live stats (prepfs stats $mnt)"
$bin stats "$mnt"
echo "== unmounting"
cleanup
trap - EXIT
grep -qs " $(realpath "$mnt") " /proc/mounts && { echo "still mounted!"; exit 1; }
echo "done: nothing left mounted"
