"""Samples/s and upload throughput of prepfs.Loader with device="cuda" against the CPU path, over
one mount (run by scripts/gpu-check.sh). usage: gpu_throughput.py MOUNT [EPOCHS]
(PREPFS_LOADER_STAGING=1 in the environment measures the CUDA cases through the staging copy.)

Each case reads EPOCHS epochs as a new job (batch 64, uint8 and float32-normalized); the CUDA
cases synchronise before the clock stops, so uploads are counted whole. Prints one JSON line."""
import json
import sys
import time

import prepfs
import torch


def run(mnt, job, device, dtype, epochs):
    kwargs = {"job": job, "batch_size": 64, "dtype": dtype}
    if device != "cpu":
        kwargs["device"] = device
    loader = prepfs.Loader(mnt, **kwargs)
    samples = nbytes = 0
    started = time.perf_counter()
    for _ in range(epochs):
        for images, _labels in loader:
            t = torch.from_dlpack(images)
            samples += t.shape[0]
            nbytes += t.numel() * t.element_size()
            del images, t
    if device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    upload = loader.gpu_upload
    loader.close()
    out = {"samples_per_s": round(samples / seconds, 1), "mb_per_s": round(nbytes / seconds / 1e6, 1), "samples": samples}
    if upload is not None:
        out["upload"] = upload
    return out


def main():
    mnt = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    out = {"gpu": torch.cuda.get_device_name(0)}
    for dtype in ("uint8", "float32-normalized"):
        for device in ("cpu", "cuda"):
            out[f"{device} {dtype}"] = run(mnt, f"bench-{device}-{dtype}", device, dtype, epochs)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
