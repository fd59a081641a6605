"""The README's quick start runs as written (issue 54).

Every fenced code block under README.md's "## Quick start" heading is run in order, in one empty
directory, as a reader would paste it: `sh` blocks with bash (`-e -o pipefail`), `python` blocks
with this Python. `prepfs` on the PATH is the binary under test (PREPFS_BIN, as conftest finds
it). The blocks make their own dataset, mount it with `prepfs mount ... --background`, read it,
and unmount it; whatever happens, the mount is stopped and its daemon ended at the end (the
daemon's pid is read from the mount's stats.json as soon as it serves).

A block that imports a module this machine lacks (torch, torchvision; or the prepfs module where
PREPFS_REQUIRE_LOADER is not set) is skipped with the module named, and the blocks after it
still run. Each block runs under a time limit.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, detach, is_mounted, need_fuse, prepfs_bin

README = REPO / "README.md"
HEADING = "## Quick start"
BLOCK_LIMIT_S = 120
FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def quick_start_blocks():
    """[(language, code)] of the fenced blocks under the quick-start heading, in order."""
    text = README.read_text()
    start = text.find("\n" + HEADING + "\n")
    assert start >= 0, f"README.md has no '{HEADING}' heading"
    section = text[start + 1:]
    end = section.find("\n## ", len(HEADING))
    section = section[:end] if end >= 0 else section
    return [(lang or "text", code) for lang, code in FENCE.findall(section)]


BLOCKS = quick_start_blocks()


def missing_modules(code):
    """Top-level modules the block imports that do not import here."""
    names = set()
    for m in re.finditer(r"^\s*(?:import\s+([\w.]+(?:\s*,\s*[\w.]+)*)|from\s+([\w.]+)\s+import)", code, re.M):
        for name in (m.group(1) or m.group(2)).split(","):
            names.add(name.strip().split(".")[0].split(" ")[0])
    missing = []
    for name in sorted(names):
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, timeout=60)
        if probe.returncode != 0:
            missing.append(name)
    return missing


def _daemon_pid(mountpoint):
    try:
        import json

        return int(json.loads((mountpoint / ".prepfs" / "stats.json").read_text())["pid"])
    except Exception:
        return None


def _alive(pid):
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """Runs every block once; {index: ("ok" | "skip" | "fail", detail)} and what was left after."""
    need_fuse()
    binary = prepfs_bin()
    base = tmp_path_factory.mktemp("readme")
    bindir = base / "bin"
    bindir.mkdir()
    (bindir / "prepfs").symlink_to(Path(binary).resolve())
    work = base / "work"
    work.mkdir()
    mountpoint = work / "mnt"
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               PREPFS_RUN_DIR=str(base / "prepfs-run"))
    results, pid = {}, None
    left = {"mounted": None, "daemon_alive": None}
    try:
        for i, (lang, code) in enumerate(BLOCKS):
            if lang in ("sh", "bash", "shell", "console"):
                cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
            elif lang == "python":
                missing = missing_modules(code)
                if "prepfs" in missing and os.environ.get("PREPFS_REQUIRE_LOADER"):
                    missing.remove("prepfs")  # required: run it and let it fail
                if missing:
                    results[i] = ("skip", f"block {i + 1} imports {', '.join(missing)}, not installed here")
                    continue
                script = base / f"block{i + 1}.py"
                script.write_text(code)
                cmd = [sys.executable, str(script)]
            else:
                results[i] = ("skip", f"block {i + 1} is `{lang}`, not a command")
                continue
            try:
                run = subprocess.run(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                     timeout=BLOCK_LIMIT_S)
            except subprocess.TimeoutExpired as e:
                results[i] = ("fail", f"block {i + 1} ran past {BLOCK_LIMIT_S} s; output: {e.stdout!r} {e.stderr!r}")
                break
            out = (run.stdout + run.stderr).decode(errors="replace")
            if pid is None and is_mounted(mountpoint):
                pid = _daemon_pid(mountpoint)
            if run.returncode != 0:
                log = (work / "prepfs.log").read_text(errors="replace")[-3000:] if (work / "prepfs.log").exists() else ""
                results[i] = ("fail", f"block {i + 1} ({lang}) exited {run.returncode}:\n{code}\n--- output:\n{out}\n--- prepfs.log:\n{log}")
                break
            results[i] = ("ok", out)
        if pid is not None:
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        left = {"mounted": is_mounted(mountpoint), "daemon_alive": _alive(pid), "pid": pid}
        yield {"results": results, "left": left, "work": work}
    finally:
        if is_mounted(mountpoint):
            subprocess.run([str(binary), "unmount", "--now", str(mountpoint)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        detach(mountpoint)


def test_quick_start_has_the_steps():
    langs = [lang for lang, _ in BLOCKS]
    assert "python" in langs and "sh" in langs, langs
    shell = "\n".join(code for lang, code in BLOCKS if lang == "sh")
    assert "prepfs mount" in shell and "prepfs unmount" in shell, shell
    mount_at = next(i for i, (_, c) in enumerate(BLOCKS) if "prepfs mount" in c)
    unmount_at = next(i for i, (_, c) in enumerate(BLOCKS) if "prepfs unmount" in c)
    assert mount_at < unmount_at == len(BLOCKS) - 1, "the quick start ends by unmounting"
    assert any("prepfs.Loader" in c for _, c in BLOCKS), "the quick start shows prepfs.Loader"


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"block{i + 1}-{lang}" for i, (lang, _) in enumerate(BLOCKS)])
def test_quick_start_block_runs(quick_start, index):
    status, detail = quick_start["results"].get(index, ("fail", "not run: an earlier block failed"))
    if status == "skip":
        pytest.skip(detail)
    assert status == "ok", detail


def test_quick_start_reads_what_it_says(quick_start):
    """The outputs the README's comments promise: 224 x 224 RGB in three classes, in both reads."""
    results = quick_start["results"]
    outs = [detail for status, detail in results.values() if status == "ok"]
    joined = "\n".join(outs)
    assert "['cat', 'dog', 'fox'] (224, 224, 3) uint8" in joined, joined
    if any("prepfs.Loader" in BLOCKS[i][1] and s == "ok" for i, (s, _) in results.items()):
        assert "(12, 224, 224, 3) uint8 ['cat', 'dog', 'fox']" in joined, joined
    listing = sorted(os.listdir(quick_start["work"] / "data"))
    assert listing == ["cat", "dog", "fox"], listing


def test_quick_start_leaves_nothing_mounted(quick_start):
    """Its last step, `prepfs unmount`, leaves no mount and no daemon."""
    if any(s == "fail" for s, _ in quick_start["results"].values()):
        pytest.fail("a block failed; see its test")
    left = quick_start["left"]
    assert left["pid"] is not None, "no daemon pid was read from the mount's stats.json"
    assert left["mounted"] is False, left
    assert left["daemon_alive"] is False, left
