#!/usr/bin/env bash
# Side-by-side figures for the closing notes of issues 2 and 4, on one generated dataset.
#   scripts/measure.sh cold  [N_PER_CLASS]   prepfs augmented/ (2 readers, cold) vs the PIL pipeline
#   scripts/measure.sh epochs [N_PER_CLASS]  epoch 1 / epoch 2 through augmented/ for each split,
#                                            cache = 100% and 25% of the set in the split's form
#                                            (auto: the decoded form), predicted beside measured;
#                                            between the epochs, the refill is let settle
# Repeats each measurement 3 times, alternating peers; prints one line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-cold}
per_class=${2:-100}
bin=target/release/prepfs
data=target/measure/source
mnt=target/measure/mnt
if [ ! -f "$data/.n$per_class" ]; then
  rm -rf "$data"
  target/release/examples/make_dataset --out "$data" --classes 10 --per-class "$per_class" --quiet >/dev/null
  touch "$data/.n$per_class"
fi
mkdir -p "$mnt"
pid=
start_mount() {
  $bin mount "$1" --source "$data" --mountpoint "$mnt" 2>target/measure/prepfs.log &
  pid=$!
  for _ in $(seq 400); do grep -qs "prepfs: serving" target/measure/prepfs.log && break; sleep 0.05; done
}
stop_mount() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  pid=
  grep -qs " $(realpath "$mnt") " /proc/mounts && fusermount3 -u -z "$mnt" || true
}
trap stop_mount EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
stat_of() { python3 -c "import json,sys; d=json.load(open('$mnt/.prepfs/stats.json')); print(eval(sys.argv[1]))" "$1"; }

# Waits (at most 60 s) until the refill stops adding augmented outputs for a second.
settle() {
  local last=-1 now
  for _ in $(seq 120); do
    now=$(stat_of "d['cache']['augmented']['entries']")
    [ "$now" = "$last" ] && return
    last=$now
    sleep 0.5
  done
}

set_bytes=$(du -sb "$data" | cut -f1)
echo "dataset: $(find "$data" -type f -name '*.*' | wc -l) files, $((set_bytes / 1000000)) MB, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
if [ "$mode" = cold ]; then
  printf "seed: 0\n" > target/measure/cold.yaml
  for run in 1 2 3; do
    drop; echo "run $run PIL pipeline (2 processes): $(python3 scripts/pil_pipeline.py "$data" 2)"
    start_mount target/measure/cold.yaml; drop
    echo "run $run prepfs augmented/ (2 readers, cold): $(python3 scripts/read_tree.py "$mnt/augmented" 2)"
    stop_mount
  done
else
  # Bytes the whole set takes in each form (payload plus the cache's per-entry overhead).
  read -r enc_bytes dec_bytes aug_bytes < <(python3 - "$data" <<'PY'
import os, sys
from PIL import Image
enc = dec = aug = 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        if f.lower().endswith((".jpg", ".jpeg", ".png")):
            p = os.path.join(d, f)
            w, h = Image.open(p).size
            enc += os.path.getsize(p) + 96; dec += w * h * 3 + 120; aug += 150543 + 96
print(enc, dec, aug)
PY
)
  for pct in 100 25; do
    for split in auto 100-0-0 0-100-0 0-0-100; do
      case $split in
        100-0-0) need=$enc_bytes ;;
        0-0-100) need=$aug_bytes ;;
        *) need=$dec_bytes ;;
      esac
      mem=$((need * pct / 100))
      printf "seed: 0\ncache: { memory: $mem, split: $split }\n" > target/measure/epochs.yaml
      drop; start_mount target/measure/epochs.yaml
      e1=$(python3 scripts/read_tree.py "$mnt/augmented" 2)
      settle
      e2=$(python3 scripts/read_tree.py "$mnt/augmented" 2)
      echo "cache ${pct}% ($((mem / 1000000)) MB) split=$split -> $(stat_of "d['cache']['split']") predicted $(stat_of "round(d['plan']['predicted_samples_per_s'])")/s | epoch 1: $e1 | epoch 2: $e2"
      stop_mount
    done
  done
fi
