#!/bin/sh
# make gpu-check: the GPU path on a machine with an NVIDIA GPU, in one short run (a few minutes).
# Builds and installs the Python module with the `gpu` feature (make python), runs the mounted GPU
# test (uint8 batches equal to the mount's files, float32 equal to the CPU path's), then measures
# samples/s and upload throughput with device="cuda" against the CPU path on a generated set.
# Without a GPU (no nvidia-smi, or it sees none) it prints "skipped: no GPU" and exits 0.
set -eu
PYTHON=${PYTHON:-python3}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skipped: no GPU"
    exit 0
fi
nvidia-smi -L
make python PYTHON="$PYTHON"
cargo build --release --examples
PREPFS_REQUIRE_LOADER=1 cargo test --release --test mounted loader::the_gpu_path -- --nocapture
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    fusermount3 -u -z "$tmp/mnt" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
target/release/examples/make_dataset --out "$tmp/src" --classes 4 --per-class 250 --quiet
mkdir -p "$tmp/mnt"
target/release/prepfs mount "$tmp/src" "$tmp/mnt" --drain 0.2 2>"$tmp/prepfs.log" &
pid=$!
i=0
until [ -r "$tmp/mnt/.prepfs/stats.json" ]; do
    i=$((i + 1))
    [ "$i" -lt 600 ] || { echo "prepfs did not come up"; cat "$tmp/prepfs.log"; exit 1; }
    sleep 0.1
done
timeout 240 "$PYTHON" scripts/gpu_throughput.py "$tmp/mnt" 2
