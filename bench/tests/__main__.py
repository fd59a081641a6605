"""Runs the self-test (`python3 bench/tests [MODULE...]`): every test_*.py here, or the modules
named; prints "N passed, N failed, N skipped" last and exits 1 if any failed."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)


def main(names) -> int:
    sys.path.insert(0, BENCH)  # the package prepfs_bench, and this one as `tests`
    loader = unittest.defaultTestLoader
    if names:
        suite = loader.loadTestsFromNames("tests." + n.removesuffix(".py") for n in names)
    else:
        suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=BENCH)
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or result.testsRun == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
