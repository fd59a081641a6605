"""prepfs_bench.units: prepfs's size syntax and how figures are written.

Owns the one Python parser of prepfs's sizes and rates (`512MiB`, `1GiB`, `20MB/s`: the syntax
the Rust side accepts in mount configs, and `--read-limit`), and the number formats the report,
the progress lines and the charts share (bytes, counts, ratios, percentages). Standard library
only.
"""

from __future__ import annotations

from typing import Optional


# Mirrors config::SIZE_UNITS in crates/prepfs-core/src/config/units.rs (matched in any case): K/KB ... T/TB are powers of
# 1000, Ki/KiB ... Ti/TiB powers of 1024.
_SIZE_UNITS = {"": 1, "b": 1,
               "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
               "ki": 2 ** 10, "kib": 2 ** 10, "mi": 2 ** 20, "mib": 2 ** 20,
               "gi": 2 ** 30, "gib": 2 ** 30, "ti": 2 ** 40, "tib": 2 ** 40}


def parse_size(text: str) -> float:
    """prepfs's size syntax: a number of bytes, or with B, K/KB, M/MB, G/GB, T/TB (powers of
    ten) or Ki/KiB, Mi/MiB, Gi/GiB, Ti/TiB (powers of two), in any case; a rate may end in "/s"
    ("10MB/s" -> 10e6). ValueError if it is none of those."""
    t = str(text).strip().replace(" ", "")
    if t.endswith("/s"):
        t = t[:-2]
    i = len(t)
    while i and not (t[i - 1].isdigit() or t[i - 1] == "."):
        i -= 1
    num, unit = t[:i], t[i:].lower()
    if not num or unit not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r}")
    return float(num) * _SIZE_UNITS[unit]


def fmt_bytes(n: Optional[float]) -> str:
    """Decimal units, as prepfs's configs and the data set's size are given."""
    if n is None:
        return "-"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_num(x: Optional[float], digits: int = 0) -> str:
    if x is None:
        return "-"
    if digits == 0 and abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def fmt_ratio(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def fmt_pct(x: Optional[float], signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.0f}%" if signed else f"{x * 100:.0f}%"
