"""bench/tests: the self-test of the benchmark harness's own logic, on tiny fake data.

Owns no benchmark: it checks the package bench/prepfs_bench/ (the driver's statistics, ratios,
targets and table formatting, the derived mount configs, the options, the run of a case and of
scenario 4, the listing/sampling/measuring helpers and the run protocol of the loaders with the
raw reader, which needs only the standard library; the mount hooks against fake `prepfs` and
`floorfs` scripts; the standalone scripts' parts that need no mount; BENCHMARKS.md's "Runs").
One module per area, the shared fakes in fakes.py. Needs no torch, DALI or FUSE; charts are
checked when matplotlib is there, the derived configs' YAML when PyYAML is, the real floorfs
where it is built and FUSE is there.

    python3 bench/tests                      # all; "N passed, N failed, N skipped" last
    python3 bench/tests test_stats test_cli  # some modules
    python3 -m pytest bench/tests            # the same tests, where pytest is installed
"""
