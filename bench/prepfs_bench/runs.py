"""prepfs_bench.runs: BENCHMARKS.md's "Runs" section, one section per benchmark run.

A run's raw figures, charts and full Markdown stay in bench/results/, which git ignores; what
git keeps of a run is its section here: the run's name (its results' stem, which is also the
heading and so the anchor others cite, `BENCHMARKS.md#<stem>`), the date, the command, and its
summary table (the text that introduces the table, and the table). Newest runs first.

Owns the standalone scripts' report (`write_report`: the run's JSON and Markdown in
bench/results/, then its section here), the section's heading and introduction, `summary_of`
(the lead text and one table of a report's lines), `run_section`, `append_run` (a run's
section put first in "Runs", replacing an earlier section of the same name, so a script that
rewrites its report as it goes keeps one section; "Runs" created at the end of the file when
missing), `split_runs` (the text before
"Runs" and "Runs" itself, for `make bench`'s report, which rewrites what is before it), and
`script_command` (the command line of a standalone script, as `python3 -m`).
"""

from __future__ import annotations

import argparse
import datetime
import time
import json
import os
import re
import shlex
import sys
from typing import List, Optional, Sequence, Tuple

from . import BENCH_DIR, ROOT, show_path

RUNS_HEADING = "## Runs"
RUNS_INTRO = ("One section per benchmark run, newest first: the date, the command and the run's "
              "summary table. The raw figures, the charts and the full report of a run stay in "
              "`bench/results/` on the machine that ran it (git ignores them); the heading is "
              "the results' name there.")
# Where runs are recorded: the repository's BENCHMARKS.md, or the file PREPFS_BENCH_MD names
# ("" or "-": nowhere, for a trial run).
BENCHMARKS_MD = os.path.join(ROOT, "BENCHMARKS.md")
SECTION = re.compile(r"^### (\S+)\s*$", re.M)
SEPARATOR = re.compile(r"^\s*\|(\s*:?-+:?\s*\|)+\s*$")  # a Markdown table's second line


def summary_of(lines: Sequence[str], table: int = 0) -> List[str]:
    """The run's summary in a report's Markdown `lines`: the paragraph just before the
    TABLE-th table (0: the first) and that table. All of `lines` when they hold no such table."""
    text = [ln for chunk in lines for ln in str(chunk).split("\n")]
    starts = [i - 1 for i in range(1, len(text))
              if SEPARATOR.match(text[i]) and text[i - 1].lstrip().startswith("|")]
    if len(starts) <= table:
        return text
    head = end = starts[table]
    while end < len(text) and text[end].lstrip().startswith("|"):
        end += 1
    start = head
    while start > 0 and not text[start - 1].strip():
        start -= 1
    while start > 0 and text[start - 1].strip() and not text[start - 1].startswith(("|", "#")):
        start -= 1
    lead = [ln for ln in text[start:head] if ln.strip()]
    return lead + ([""] if lead else []) + text[head:end]


def run_section(name: str, date: str, command: str, summary: Sequence[str],
                results: Optional[str] = None) -> str:
    """One run's section: `### NAME`, the date, the command, where its full results are, and
    its summary (lead text and table)."""
    out = [f"### {name}", "", f"- Date: {date}", f"- Command: {command}"]
    if results:
        out.append(f"- Full results: {results}")
    out += ["", *summary, ""]
    return "\n".join(out)


def split_runs(text: str) -> Tuple[str, str]:
    """TEXT cut before its "Runs" heading: (what is before it, "Runs" to the end); the second
    is "" when there is no such heading."""
    m = re.search(r"^" + re.escape(RUNS_HEADING) + r"\s*$", text, re.M)
    if not m:
        return text, ""
    return text[:m.start()], text[m.start():]


def sections(runs: str) -> List[Tuple[str, str]]:
    """The run sections of a "Runs" text, in order: (name, the section's text)."""
    marks = list(SECTION.finditer(runs))
    return [(m.group(1), runs[m.start():(marks[i + 1].start() if i + 1 < len(marks) else len(runs))]
             .rstrip("\n") + "\n") for i, m in enumerate(marks)]


def with_run(text: str, section: str) -> str:
    """TEXT (a BENCHMARKS.md) with SECTION first under "Runs", in place of an earlier section of
    the same name; "Runs" added at the end when missing."""
    name = SECTION.match(section).group(1)
    head, runs = split_runs(text)
    kept = [s for n, s in sections(runs) if n != name]
    body = "\n".join([section.rstrip("\n") + "\n"] + kept)
    if head and not head.endswith("\n\n"):
        head = head.rstrip("\n") + "\n\n"
    return f"{head}{RUNS_HEADING}\n\n{RUNS_INTRO}\n\n{body}"


def append_run(md: str, name: str, command: str, summary: Sequence[str],
               results: Optional[str] = None, date: Optional[str] = None) -> None:
    """Puts a run's section first in MD's "Runs" (see `with_run`); MD is created if missing.
    DATE defaults to now, in UTC."""
    date = date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        with open(md) as f:
            text = f.read()
    except FileNotFoundError:
        text = "# prepfs benchmarks\n"
    section = run_section(name, date, command, summary, results)
    tmp = md + ".tmp"
    with open(tmp, "w") as f:
        f.write(with_run(text, section))
    os.replace(tmp, md)


def script_command(argv: Optional[Sequence[str]] = None) -> str:
    """The command line of the running standalone script, as `python3 -m prepfs_bench.NAME`,
    in backticks."""
    argv = list(sys.argv if argv is None else argv)
    name = os.path.splitext(os.path.basename(argv[0]))[0]
    module = "prepfs_bench" if name == "__main__" else f"prepfs_bench.{name}"
    return "`" + shlex.join(["python3", "-m", module] + argv[1:]) + "`"


def benchmarks_md() -> Optional[str]:
    """The BENCHMARKS.md runs are recorded in (PREPFS_BENCH_MD, else the repository's); None
    when PREPFS_BENCH_MD is "" or "-"."""
    md = os.environ.get("PREPFS_BENCH_MD", BENCHMARKS_MD)
    return None if md in ("", "-") else md


def write_report(out: str, data, lines: Sequence[str], summary: Optional[Sequence[str]] = None,
                 md: Optional[str] = None, command: Optional[str] = None, date: Optional[str] = None) -> None:
    """A standalone script's report: OUT.json (the figures) and OUT.md (the Markdown `lines`),
    printed, then the run's section in BENCHMARKS.md (MD, else `benchmarks_md()`) with SUMMARY
    (default: the lead text and first table of `lines`). OUT may end in .json (dropped). Called
    again for the same OUT (a report rewritten as cells finish), it replaces that run's section.
    COMMAND and DATE: the section's (default: this script's command line, now), for a report
    rewritten later from a run's JSON."""
    out = out[:-len(".json")] if out.endswith(".json") else out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump(data, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    md = md or benchmarks_md()
    if md:
        append_run(md, os.path.basename(out), command or script_command(),
                   summary if summary is not None else summary_of(lines),
                   f"`{show_path(os.path.abspath(out))}.json`, `.md` (kept out of git)", date=date)


def script_args(doc: str, stem: str, gen: bool = True) -> argparse.ArgumentParser:
    """A standalone script's arguments, for it to add its own to: `--prepfs` (the binary),
    `--gen` (the data set generator, where the script makes its set: GEN) and `--out` (default
    bench/results/DATE-STEM)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepfs", required=True)
    if gen:
        ap.add_argument("--gen", required=True)
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-" + stem))
    return ap
