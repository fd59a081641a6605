#!/usr/bin/env bash
# bench/setup_env.sh: the Python environment of `make bench`.
#
# Creates a virtual environment (default: target/bench-venv, under the build directory) and
# installs bench/requirements.txt into it from PyPI: torch, torchvision, nvidia-dali-cuda120,
# pillow, numpy, matplotlib.
#
# Idempotent: a stamp file in the venv records the hash of requirements.txt and the Python
# version; when it matches and the packages import, nothing is done. Delete the venv (or the
# stamp) to force a reinstall.
#
# Footprint: PyPI has no CPU-only torch for Linux x86_64, so torch brings its CUDA runtime
# wheels even though the benchmark never uses a GPU. Expect about 1.5 GB of downloads and
# about 5 GB in the venv; a first install takes a few minutes (see bench/README.md).
#
# Environment:
#   BENCH_VENV   where the venv goes (default: <repo>/target/bench-venv)
#   PYTHON       the interpreter that creates it (default: python3; 3.9 or newer)
#
# Prints the venv's python path as its last line, so a caller may do
#   PY=$(bench/setup_env.sh | tail -1)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${BENCH_VENV:-$root/target/bench-venv}"
python="${PYTHON:-python3}"
reqs="$here/requirements.txt"
stamp="$venv/.prepfs-bench-stamp"

log() { echo "[bench-env] $*" >&2; }

if ! command -v "$python" >/dev/null 2>&1; then
    log "error: $python not found; set PYTHON to a Python 3.9+ interpreter"
    exit 1
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'; then
    log "error: $python is $("$python" -V 2>&1); need 3.9 or newer"
    exit 1
fi

want="$( { sha256sum "$reqs" | cut -d' ' -f1; "$python" -c 'import sys; print(sys.version.split()[0])'; } | tr '\n' ' ')"

check_imports() {
    "$venv/bin/python" - <<'EOF' 2>/dev/null
import matplotlib, numpy, PIL, torch, torchvision
import nvidia.dali
EOF
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && check_imports; then
    log "venv $venv is up to date (stamp matches $reqs); nothing to do"
    echo "$venv/bin/python"
    exit 0
fi

start=$(date +%s)
if [[ ! -x "$venv/bin/python" ]]; then
    log "creating venv $venv with $("$python" -V 2>&1)"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
else
    log "reusing venv $venv (stamp missing or stale)"
fi

log "installing $(grep -cv '^\s*\(#\|$\)' "$reqs") packages from $reqs (torch brings ~4 GB of CUDA runtime wheels; first install takes minutes)"
"$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q -r "$reqs"

log "checking imports"
if ! check_imports; then
    log "error: packages installed but do not import; output follows"
    "$venv/bin/python" -c 'import matplotlib, numpy, PIL, torch, torchvision, nvidia.dali'
    exit 1
fi
echo "$want" >"$stamp"
end=$(date +%s)
size="$(du -sh "$venv" 2>/dev/null | cut -f1)"
log "done in $((end - start)) s; venv is $size"
"$venv/bin/python" - <<'EOF' >&2
import importlib.metadata as md
print("[bench-env] " + ", ".join(f"{p} {md.version(p)}" for p in
      ("torch", "torchvision", "nvidia-dali-cuda120", "pillow", "numpy", "matplotlib")))
EOF
echo "$venv/bin/python"
