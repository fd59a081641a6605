"""prepfs_bench.config: the mount configs the driver derives from the base one.

Owns the YAML text of 2p's config (the base config with a cache of 25% of the set) and of
scenario 4's (a read-limited source, with or without a cache), the cache-size convention
(`cache_of_share`), and `prepfs check`. The configs are edited as text, in one place
(`strip_top_level`), not loaded and dumped again: PyYAML is not in bench/requirements.txt, and
text keeps the base config's comments and its own spelling of sizes (`1GiB`) as prepfs reads
them. Sizes and rates are parsed by prepfs_bench.units.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import List, Optional, Sequence


# A top-level mapping key at column 0: a plain key, or a quoted one, then ":" and a space or
# the end of the line ("key: value", "key:", "'key':").
_TOP_KEY = re.compile(
    r"""^(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<plain>[^\s#'"-][^:#]*?|-[^\s:#][^:#]*?))"""
    r"\s*:(?:\s|$)")


def top_level_key(line: str) -> Optional[str]:
    """The key a line at column 0 starts (`source` for "source: /d", "source:"), or None: an
    indented line, a blank one, a comment, a block sequence's item ("- x"), a document marker
    ("---")."""
    m = _TOP_KEY.match(line)
    if not m:
        return None
    return next(g for g in m.groups() if g is not None).strip()


def strip_top_level(text: str, keys: Sequence[str]) -> str:
    """`text` (YAML) without the top-level sections `keys`: each key's line and the lines that
    follow it up to the next line at column 0 that is not part of it. Part of it: indented and
    blank lines, block-sequence items at column 0 ("- x", valid YAML for a key's list), and
    comments at column 0 that more of the section follows. A comment at column 0 followed by
    another top-level line is kept (it belongs to what follows), as is everything else at
    column 0 (other keys, "---")."""
    out: List[str] = []
    held: List[str] = []  # comments at column 0 inside a section being dropped, so far
    skipping = False
    for line in text.splitlines():
        key = top_level_key(line)
        if key is not None:
            skipping = key in keys
        elif skipping:
            if line.startswith("#"):
                held.append(line)
                continue
            if not line.strip():
                if held:
                    held.append(line)
                continue
            if line[:1] in (" ", "\t") or line == "-" or line.startswith(("- ", "-\t")):
                held = []  # the section goes on: its comments go with it
                continue
            skipping = False  # "---" or another line at column 0 ends it
        if held:
            out += held
            held = []
        if not skipping:
            out.append(line)
    out += held
    return "\n".join(out).rstrip("\n") + "\n"


def derive_config(base: str, cache: Optional[str] = None, source: Optional[str] = None,
                  read_limit: Optional[str] = None, note: str = "") -> str:
    """A mount config from the base config's text: its `cache:` section replaced by `cache`
    (a flow mapping such as "{ memory: 7250000, split: auto }"; None: no cache at all), and,
    with `read_limit`, its `source:` replaced by `{ path: SOURCE, read_limit: LIMIT }` (the
    mount's --source overrides the path; the limit stays)."""
    keys = ["cache"] + (["source"] if read_limit else [])
    out = strip_top_level(base, keys)
    out += f"\n# added by prepfs_bench{': ' + note if note else ''}\n"
    if read_limit:
        out += f"source: {{ path: {json.dumps(source or '.')}, read_limit: {read_limit} }}\n"
    if cache:
        out += f"cache: {cache}\n"
    return out


def cache_of_share(data_bytes: float, share: float) -> int:
    """Seneca's convention: "X% of the data cached" is a cache X% the size of the data set on
    storage (its encoded bytes), whatever forms the cache then holds."""
    return max(1, int(data_bytes * share))


def check_config(binary: str, config: str, source: str) -> Optional[str]:
    """None if `prepfs check CONFIG --source SRC` accepts it, else its complaint."""
    try:
        p = subprocess.run([binary, "check", config, "--source", source], capture_output=True,
                           text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode == 0:
        return None
    lines = [ln for ln in (p.stderr + p.stdout).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {p.returncode}"


def policy_setting(policy: str) -> str:
    """The `policy` entry of a derived `cache:` flow map: none for "auto" (the mount's default,
    so the bench measures what a user who sets nothing gets), else ", policy: <policy>"."""
    return "" if policy == "auto" else f", policy: {policy}"
