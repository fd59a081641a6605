#!/usr/bin/env python3
"""The import graph among each crate's top-level modules, and a check that it tangles no further.

A top-level module is a file or folder directly under a crate's src/ (lib.rs and main.rs aside).
Module A uses module B when the shipped code of a file of A (comments and test modules aside)
names `crate::B` (or, in the binary, `prepfs::B` is
another crate and does not count). The graph's strongly connected components of more than one
module are its import cycles.

Cargo forbids a cycle between crates; this check forbids one among the top-level modules of
each crate, so each crate's modules are layers too. It fails on any cycle and names its edges.

Usage: scripts/check-layers.py    (exit 0: no cycle; 1: a cycle, its edges printed)
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = sorted(os.path.join("crates", d) for d in os.listdir(os.path.join(ROOT, "crates")) if os.path.isdir(os.path.join(ROOT, "crates", d, "src")))
USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
# A test module in a file: `#[cfg(test)]` then `mod name {` at the left margin, to its `}` there.
TEST_MOD = re.compile(r"(?ms)^#\[cfg\(test\)\]\n(?:pub(?:\([a-z]+\))? )?mod \w+ \{\n.*?^\}\n?")
# A file that is a test module of its own (`tests.rs`, `recipe_tests.rs`, `reftests.rs`).
TEST_FILE = re.compile(r"tests\.rs$")


def modules(src):
    out = {}
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name in ("lib.rs", "main.rs"):
            continue
        if os.path.isdir(path):
            files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")]
            out[name] = files
        elif name.endswith(".rs"):
            out[name[:-3]] = [path]
    return out


def edges_of(src):
    mods = modules(src)
    edges = set()
    for mod, files in mods.items():
        for f in files:
            if TEST_FILE.search(os.path.basename(f)):
                continue
            text = open(f, encoding="utf-8", errors="replace").read()
            # Shipped code only: a doc link or a comment naming a module is not an import, and a
            # module's tests may use what stands above it (as Cargo lets a crate's tests use a
            # crate above it through dev-dependencies).
            text = TEST_MOD.sub("", text)
            code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
            for used in USE.findall(code):
                if used != mod and used in mods:
                    edges.add((mod, used))
    return sorted(mods), edges


def cycles(nodes, edges):
    """Tarjan's strongly connected components of more than one node."""
    graph = {n: sorted(b for a, b in edges if a == n) for n in nodes}
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for n in nodes:
        if n not in index:
            visit(n)
    return out


def main():
    on_cycles = []
    report = []
    for crate in CRATES:
        src = os.path.join(ROOT, crate, "src")
        if not os.path.isdir(src):
            continue
        name = os.path.basename(crate)
        nodes, edges = edges_of(src)
        comps = cycles(nodes, edges)
        for comp in comps:
            members = set(comp)
            inside = sorted((a, b) for a, b in edges if a in members and b in members)
            on_cycles.extend(f"{name}: {a} -> {b}" for a, b in inside)
            report.append(f"{name}: a cycle of {len(comp)} modules: {' '.join(comp)} ({len(inside)} edges)")
        if not comps:
            report.append(f"{name}: no import cycle among its {len(nodes)} top-level modules")
    print("\n".join(report))
    if on_cycles:
        print(f"{len(on_cycles)} edges on an import cycle (a module using one that uses it back; move the type or", file=sys.stderr)
        print("rule both need below both, or into a crate below):", file=sys.stderr)
        print("".join(f"  {e}\n" for e in on_cycles), end="", file=sys.stderr)
        return 1
    print("layers: no import cycle in any crate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
