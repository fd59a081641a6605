"""Reads a prepfs mount's png or jpeg outputs with the decoders users use and compares them with
another mount's PPM outputs of the same source.

usage: decode_formats.py FORMAT PPM_MOUNT MOUNT

- decoded/: every sample's file has the size stat showed before its first read, PIL decodes it,
  and (torchvision.io.decode_image too, where torchvision is installed) to the PPM's pixels:
  exactly for png, within a PSNR of at least 30 dB for jpeg;
- augmented/: every file has its stat size, and decodes to a 224x224 RGB image.
Prints one JSON line of figures; exits 1 on any mismatch.
"""

import io
import json
import math
import os
import sys

import numpy as np
from PIL import Image

try:
    import torch
    import torchvision.io
except ImportError:
    torchvision = None

EXT = {"png": ".png", "jpeg": ".jpg"}


def files(root, ext):
    out = []
    for d, _, names in sorted(os.walk(root)):
        out += [os.path.join(d, n) for n in sorted(names) if n.endswith(ext)]
    return out


def read_sized(path, failures):
    """The file's bytes, checking the size stat gave before the first read."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != size:
        failures.append(f"{path}: stat said {size} bytes, read {len(data)}")
    return data


def decodes(data):
    """(decoder name, HxWx3 uint8) for every decoder available."""
    out = [("PIL", np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))]
    if torchvision is not None:
        t = torchvision.io.decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        out.append(("torchvision", t.permute(1, 2, 0).numpy()))
    return out


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def main():
    fmt, ppm_mount, mount = sys.argv[1], sys.argv[2], sys.argv[3]
    ext = EXT[fmt]
    failures = []
    worst_psnr = math.inf
    decoded = 0
    for path in files(os.path.join(mount, "decoded"), ext):
        rel = os.path.relpath(path, mount)
        want = np.asarray(Image.open(os.path.join(ppm_mount, rel[: -len(ext)] + ".ppm")).convert("RGB"))
        for name, got in decodes(read_sized(path, failures)):
            if got.shape != want.shape:
                failures.append(f"{rel} ({name}): shape {got.shape}, ppm {want.shape}")
                continue
            p = psnr(got, want)
            worst_psnr = min(worst_psnr, p)
            if (fmt == "png" and p != math.inf) or p < 30.0:
                failures.append(f"{rel} ({name}): PSNR {p:.1f} dB against the ppm")
        decoded += 1
    augmented = 0
    for path in files(os.path.join(mount, "augmented"), ext):
        for name, got in decodes(read_sized(path, failures)):
            if got.shape != (224, 224, 3):
                failures.append(f"{path} ({name}): shape {got.shape}")
        augmented += 1
    print(json.dumps({
        "format": fmt,
        "decoded": decoded,
        "augmented": augmented,
        "worst_psnr_db": None if worst_psnr == math.inf else round(worst_psnr, 2),
        "decoders": ["PIL"] + (["torchvision"] if torchvision is not None else []),
        "failures": failures[:10],
    }))
    sys.exit(1 if failures or decoded == 0 or augmented == 0 else 0)


if __name__ == "__main__":
    main()
