#!/usr/bin/env bash
# bench/run.sh: what `make bench` runs (after `make build`), issue 3.
#
#   1. the Python environment: bench/setup_env.sh (target/bench-venv; a no-op when current);
#   2. the data set: target/release/examples/make_dataset writes an ImageNet-like JPEG tree to
#      target/bench-data/train, skipped when its stamp says it already has this size and seed;
#   3. the driver, `python -m prepfs_bench` (bench/prepfs_bench/), over it, mounting prepfs (mount-configs/imagenet.yaml for the PPM rows,
#      mount-configs/imagenet-npy.yaml for the npy rows; each with `cache: { memory: 1GiB }`
#      added, in target/bench-run/, when the config sets no cache and this prepfs accepts one),
#      writing bench/results/<date>.json, its PNG charts beside it, and BENCHMARKS.md. It also
#      mounts, itself, a PPM mount with a cache of 25% of the set (scenario 2p) and, for
#      scenario 4 (3 concurrent jobs), read-limited mounts; their configs go to target/bench-run/.
#      Rows 3h-3k (issue 12's FUSE floor): target/release/examples/floorfs, a trivial fuser
#      filesystem serving same-size files from memory, mounted plain and with passthrough.
#
# Nothing stays mounted on any exit path: the driver unmounts what it mounts, and the trap
# here stops any prepfs daemon left on this run's mount points and lazily unmounts them.
#
# Environment:
#   QUICK=1              a short run (the driver's --quick: 3 runs of 512 samples per case,
#                        no PIL peer, no warm peers, no 3g; scenario 4 once, over 16 images
#                        per class); outputs <date>-quick.json/.png
#   BENCH_CLASSES        classes in the generated data set (default 20)
#   BENCH_PER_CLASS      images per class (default 40: 800 images, about 30 MB)
#   BENCH_DATA           where the data set goes (default target/bench-data/train)
#   BENCH_ARGS           extra arguments for the driver (e.g. "--only 1a,1c -v")
#   BENCH_CACHE          prepfs's cache memory for the run (default 1GiB: holds the whole default
#                        set in any form); 0: mount the configs as they are (no cache)
#   BENCH_READ_LIMIT     scenario 4's storage read limit (default 10MB/s)
#   PREPFS_BIN           the binary to benchmark (default target/release/prepfs)
#   FLOORFS_BIN          the FUSE floor of rows 3h-3k (default target/release/examples/floorfs,
#                        built by `make build`); missing: those rows are pending
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { echo "[bench] $*"; }

quick=${QUICK:-}
case "$quick" in 0 | no | false) quick= ;; esac
classes=${BENCH_CLASSES:-20}
per_class=${BENCH_PER_CLASS:-40}
data=${BENCH_DATA:-target/bench-data/train}
bin_src=${PREPFS_BIN:-target/release/prepfs}
gen=target/release/examples/make_dataset
floorfs_src=${FLOORFS_BIN:-target/release/examples/floorfs}
work=target/bench-run
mnt=${TMPDIR:-/tmp}/prepfs-bench-$$
today=$(date +%F)
stem=$today${quick:+-quick}
started=$(date +%s)

for f in "$bin_src" "$gen"; do
  if [ ! -x "$f" ]; then
    echo "bench/run.sh: $f is missing; run \`make build\` (or \`make bench\`, which builds)" >&2
    exit 1
  fi
done

# --- cleanup: no mount, daemon or tmpfs copy outlives this script -----------------------------
py_pid=
py_ran=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$py_pid" ] && kill -0 "$py_pid" 2>/dev/null; then
    kill -TERM "$py_pid" 2>/dev/null || true   # the driver unmounts in its `finally`
    for _ in $(seq 100); do kill -0 "$py_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$py_pid" 2>/dev/null || true
    wait "$py_pid" 2>/dev/null || true
  fi
  local m p pids
  for m in "$mnt" "$mnt-npy" "$mnt-25" "$mnt-storage" "$mnt-jobs" "$mnt-floor-plain" \
    "$mnt-floor-passthrough" "$mnt-floor-plain-distinct" "$mnt-floor-passthrough-distinct"; do
    # a daemon of this run still serving m (possible only if the driver was killed hard)
    pids=
    for p in /proc/[0-9]*; do
      if tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF -- "$m"; then
        pids="$pids ${p#/proc/}"
      fi
    done
    for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $pids; do
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$p" 2>/dev/null || true
    done
    if grep -qsF " $m " /proc/self/mountinfo; then
      log "unmounting $m, left behind"
      fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    fi
    rmdir "$m" 2>/dev/null || true
  done
  if [ -n "$py_ran" ]; then
    rm -rf /dev/shm/prepfs-bench-floor-"$py_ran"-* "${TMPDIR:-/tmp}"/prepfs-bench-jobs-data-"$py_ran"-* \
      2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# --- 1. the Python environment ----------------------------------------------------------------
log "python environment (bench/setup_env.sh)"
PY=$(bench/setup_env.sh | tail -1)

# --- 2. the data set --------------------------------------------------------------------------
want="make_dataset --classes $classes --per-class $per_class --width 500 --height 375 --seed 0"
stamp=$data/.prepfs-bench-stamp
count() { find "$data" -type f \( -name '*.JPEG' -o -name '*.jpg' -o -name '*.jpeg' \) | wc -l; }
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ "$(count)" -eq $((classes * per_class)) ]; then
  log "data set $data is current ($want)"
else
  log "writing the data set: $gen --out $data --classes $classes --per-class $per_class (ImageNet-like 500x375 JPEGs)"
  rm -rf "$data"
  mkdir -p "$(dirname "$data")"
  t0=$(date +%s)
  "$gen" --out "$data" --classes "$classes" --per-class "$per_class" --width 500 --height 375 \
    --seed 0 --quiet
  echo "$want" >"$stamp"
  log "data set written in $(($(date +%s) - t0)) s"
fi

# --- 3. the benchmark -------------------------------------------------------------------------
# A private copy of the binary: a rebuild during the run (cold runs remount) cannot change it.
rm -rf "$work/logs"
mkdir -p "$work/logs" bench/results
cp -f "$bin_src" "$work/prepfs"
floor_args=()
if [ -x "$floorfs_src" ]; then
  cp -f "$floorfs_src" "$work/floorfs"
  floor_args=(--floorfs-bin "$work/floorfs")
else
  log "$floorfs_src is missing (cargo build --release --examples): rows 3h/3i (the FUSE floor) pending"
fi
# The mount configs: the project's, plus a cache that holds the set (issue 3, scenario 2: warm
# is "after the cache holds the set"), unless the config has one or this prepfs has no cache.
cache_mem=${BENCH_CACHE:-1GiB}
config_note=
with_cache() {  # CONFIG -> the config to mount (printed)
  local cfg=$1 out
  out=$work/$(basename "$cfg" .yaml)-cache.yaml
  if [ "$cache_mem" = 0 ] || grep -q '^cache:' "$cfg"; then
    echo "$cfg"
    return
  fi
  { cat "$cfg"; printf '\n# added by bench/run.sh: a sample cache that holds the bench set\ncache: { memory: %s }\n' "$cache_mem"; } >"$out"
  if "$work/prepfs" check "$out" --source "$data" >/dev/null 2>&1; then
    echo "$out"
  else
    log "this prepfs does not take a cache section; mounting $cfg as it is" >&2
    echo "$cfg"
  fi
}
ppm_cfg=$(with_cache mount-configs/imagenet.yaml)
npy_cfg=$(with_cache mount-configs/imagenet-npy.yaml)
case "$ppm_cfg" in
  "$work"/*) config_note="; configs: mount-configs/imagenet.yaml and imagenet-npy.yaml with \`cache: { memory: $cache_mem }\` added ($ppm_cfg, $npy_cfg)" ;;
esac

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null)" ]; then
  rev="$rev + uncommitted changes in src/"
fi
if [ "$bin_src" != target/release/prepfs ]; then
  # PREPFS_BIN: another build, whose commit this checkout cannot tell.
  rev="unknown (PREPFS_BIN; this checkout is at $rev)"
fi

if [ -n "${MAKELEVEL:-}" ]; then
  invoked="make bench${quick:+ QUICK=1}"
else
  invoked="${quick:+QUICK=1 }bench/run.sh"
fi
[ -n "${BENCH_ARGS:-}" ] && invoked="BENCH_ARGS='$BENCH_ARGS' $invoked"

args=(--data "$data"
      --prepfs-bin "$work/prepfs" --prepfs-config "$ppm_cfg" --prepfs-npy-config "$npy_cfg"
      --mountpoint "$mnt" --log-dir "$work/logs" --config-dir "$work"
      --read-limit "${BENCH_READ_LIMIT:-10MB/s}" "${floor_args[@]}"
      --out "bench/results/$stem.json" --charts-dir bench/results --md BENCHMARKS.md
      --invoked-as "$invoked"
      --build-info "prepfs $bin_src (copied to $work/prepfs), commit $rev$config_note"
      --data-info "written by \`$gen --out $data --classes $classes --per-class $per_class --width 500 --height 375 --seed 0\`")
[ -n "$quick" ] && args+=(--quick)
# shellcheck disable=SC2206
[ -n "${BENCH_ARGS:-}" ] && args+=($BENCH_ARGS)

log "running python -m prepfs_bench${quick:+ --quick} (one line per case)"
set +e
PYTHONPATH=bench "$PY" -m prepfs_bench "${args[@]}" &
py_pid=$!
py_ran=$py_pid
wait "$py_pid"
rc=$?
set -e
py_pid=
log "finished in $(($(date +%s) - started)) s (exit status $rc)"
exit "$rc"
