"""The GPU path's two upload paths side by side on one mount: straight from the pinned ring
("direct") against the staging copy ("staged", PREPFS_LOADER_STAGING=1), and the CPU path's uint8
for scale. usage: gpu_upload_ab.py MOUNT EPOCHS ROUNDS

Each case is a new job (batch 64): one warm-up epoch out of the clock, then EPOCHS epochs timed,
synchronised before the clock stops; the cases are interleaved, ROUNDS times. Prints the
samples/s so far after each round, one JSON line."""
import json
import os
import sys
import time

import prepfs
import torch


def run(mnt, job, device, dtype, staged, epochs):
    if staged:
        os.environ["PREPFS_LOADER_STAGING"] = "1"
    else:
        os.environ.pop("PREPFS_LOADER_STAGING", None)
    kwargs = {"job": job, "batch_size": 64, "dtype": dtype}
    if device != "cpu":
        kwargs["device"] = device
    loader = prepfs.Loader(mnt, **kwargs)
    for images, _labels in loader:
        del images
    torch.cuda.synchronize()
    samples = 0
    started = time.perf_counter()
    for _ in range(epochs):
        for images, _labels in loader:
            t = torch.from_dlpack(images)
            samples += t.shape[0]
            del images, t
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    path = loader.gpu_upload
    loader.close()
    return round(samples / seconds), path


def main():
    mnt, epochs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = {"gpu": torch.cuda.get_device_name(0)}
    for r in range(rounds):
        for dtype in ("uint8", "float32-normalized"):
            for name, device, staged in (("cpu", "cpu", False), ("direct", "cuda", False), ("staged", "cuda", True)):
                if name == "cpu" and dtype != "uint8":
                    continue
                rate, path = run(mnt, f"ab-{r}-{dtype}-{name}", device, dtype, staged, epochs)
                assert path == (None if device == "cpu" else name), (path, name)
                out.setdefault(f"{name} {dtype}", []).append(rate)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
