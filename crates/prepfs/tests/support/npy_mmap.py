"""Opens every .npy file under the given directories with numpy's mmap_mode="r" and checks it
against a plain read of the same path; prints one JSON line: {"mapped": N}. Fails on the
first file that cannot be mapped or differs."""
import json
import os
import sys

import numpy as np

mapped = 0
for root in sys.argv[1:]:
    for d, _, names in sorted(os.walk(root)):
        for n in sorted(names):
            if not n.endswith(".npy"):
                continue
            p = os.path.join(d, n)
            m = np.load(p, mmap_mode="r")
            assert isinstance(m, np.memmap), f"{p}: not mapped"
            assert m.dtype == np.uint8 and m.ndim == 3 and m.shape[2] == 3, (p, m.dtype, m.shape)
            assert int(np.asarray(m).sum()) > 0, f"{p}: all zero"
            mapped += 1
print(json.dumps({"mapped": mapped}))
