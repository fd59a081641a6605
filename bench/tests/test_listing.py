"""prepfs_bench.listing: the tree it lists, made whole and completed where a run stopped."""

from __future__ import annotations

import os
import tempfile
import unittest

from prepfs_bench import listing


class ListingTreeTest(unittest.TestCase):
    """The tree of DIRS x FILES empty .jpg files the listing benchmark times."""

    def test_the_tree_has_every_file_once_and_a_stopped_run_is_completed(self):
        with tempfile.TemporaryDirectory() as root:
            listing.make_tree(root, 3, 4)
            want = {f"c{d:05d}": sorted(f"f{d * 4 + f:08d}.jpg" for f in range(4)) for d in range(3)}
            got = {d: sorted(os.listdir(os.path.join(root, d))) for d in sorted(os.listdir(root))}
            self.assertEqual(got, want)
            self.assertTrue(all(os.path.getsize(os.path.join(root, d, f)) == 0
                                for d in want for f in want[d]))
            # A run stopped inside a directory: the next one completes it, and adds nothing else.
            os.remove(os.path.join(root, "c00001", "f00000005.jpg"))
            listing.make_tree(root, 3, 4)
            got = {d: sorted(os.listdir(os.path.join(root, d))) for d in sorted(os.listdir(root))}
            self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()
