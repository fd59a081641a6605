"""prepfs_bench.refill: the wait for the cache's background refill before a warm run.

prepfs's augmented cache is use-once: a pass empties it and a background refill makes new
outputs. Before each measured run of a warm or floor row over a prepfs cache, the driver polls
`.prepfs/stats.json` until the refill has caught up. Owns that wait (`wait_for_refill`), its
decision (`refill_decision`, a pure function), its constants, and the stats.json readers it
needs (`aug_entries`, `cache_memory`). Standard library only.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence


def cache_memory(stats: Optional[dict]) -> int:
    """The mount's cache budget in bytes from its stats.json (0: no cache, or not known)."""
    try:
        return int(((stats or {}).get("cache") or {}).get("memory") or 0)
    except (TypeError, ValueError):
        return 0


def aug_entries(stats: Optional[dict]) -> Optional[int]:
    """cache.augmented.entries of a stats.json, or None."""
    try:
        return int(((stats or {}).get("cache") or {}).get("augmented", {}).get("entries"))
    except (TypeError, ValueError, AttributeError):
        return None


# Before a measured warm (or floor) run: poll stats.json until the augmented cache has stopped
# growing for REFILL_STABLE_S, or holds every sample, or REFILL_MAX_S have passed.
REFILL_STABLE_S = 1.5
REFILL_MAX_S = 90.0
REFILL_POLL_S = 0.25


def refill_decision(history: Sequence[tuple], target: Optional[int],
                    stable_s: float = REFILL_STABLE_S,
                    max_s: float = REFILL_MAX_S) -> Optional[str]:
    """Whether the wait for the refill is over, from the polls so far: `history` is
    [(seconds since the wait began, augmented entries or None), ...] in order. Returns None
    (keep waiting) or why it is over: "full" (entries >= target, the number of samples),
    "stable" (no new high for `stable_s`), "timeout" (`max_s` passed), "no-stats" (no figure
    after 5 polls: nothing to wait for)."""
    if not history:
        return None
    now = history[-1][0]
    seen = [(t, e) for t, e in history if e is not None]
    if not seen:
        return "no-stats" if len(history) >= 5 else None
    if target and seen[-1][1] >= target:
        return "full"
    if now >= max_s:
        return "timeout"
    high, since = None, seen[0][0]
    for t, e in seen:
        if high is None or e > high:
            high, since = e, t
    if now - since >= stable_s:
        return "stable"
    return None


def wait_for_refill(stats: Callable[[], Optional[dict]], target: Optional[int] = None,
                    stable_s: float = REFILL_STABLE_S, max_s: float = REFILL_MAX_S,
                    poll_s: float = REFILL_POLL_S,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> dict:
    """Polls `stats` (a mount's stats.json) until refill_decision says the refill has caught
    up. Returns {"waited_s", "reason", "augmented_entries_start" (at the end of the wait: the
    measured run starts with these), "augmented_entries_before" (when the wait began),
    "target"}. `target` defaults to the mount's sample count."""
    t0 = clock()
    history = []
    first = None
    while True:
        st = stats()
        if target is None and st and isinstance(st.get("samples"), int):
            target = st["samples"]
        e = aug_entries(st)
        if first is None:
            first = e
        history.append((clock() - t0, e))
        why = refill_decision(history, target, stable_s, max_s)
        if why:
            return {"waited_s": round(clock() - t0, 3), "reason": why,
                    "augmented_entries_start": e, "augmented_entries_before": first,
                    "target": target}
        sleep(poll_s)
