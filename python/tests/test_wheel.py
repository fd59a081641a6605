"""The wheel installs where no Rust is (issue 54): `make python`'s wheel (the same build `make
wheel` makes in release) into a fresh virtual environment with pip alone, offline, then
imported from there: `prepfs.Loader` (the compiled module) and `prepfs.NpyFolder` are there."""
import glob
import os
import subprocess
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def built_wheel():
    wheels = sorted(glob.glob(os.path.join(ROOT, "target", "wheels", "prepfs-*.whl")))
    return wheels[-1] if wheels else None


def test_the_wheel_is_abi3_and_installs_into_a_fresh_venv_without_a_toolchain(tmp_path):
    wheel = built_wheel()
    if wheel is None:
        if os.environ.get("PREPFS_REQUIRE_LOADER"):
            pytest.fail("no wheel under target/wheels: `make python` builds it")
        pytest.skip("no wheel under target/wheels (make python)")
    name = os.path.basename(wheel)
    assert "-cp38-abi3-" in name, f"{name}: not one abi3 wheel for every CPython from 3.8"
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    # No cargo, no rustc, no index: the wheel alone.
    clean = {k: v for k, v in os.environ.items() if k not in ("CARGO_HOME", "RUSTUP_HOME")}
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep) if "cargo" not in p and "rustup" not in p)
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel], check=True, env=clean, timeout=120)
    script = (
        "import prepfs, os\n"
        "assert os.path.dirname(prepfs.__file__).startswith(os.environ['VENV']), prepfs.__file__\n"
        "print(prepfs.Loader.__name__, prepfs.NpyFolder.__name__)\n"
    )
    out = subprocess.run([py, "-c", script], check=True, env=dict(clean, VENV=str(env_dir)), capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert out.stdout.split() == ["Loader", "NpyFolder"], out.stdout + out.stderr
