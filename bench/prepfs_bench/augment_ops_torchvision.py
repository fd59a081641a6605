#!/usr/bin/env python3
"""torchvision v2's cost per sample of the augment ops prepfs serves, beside
examples/op_cost.rs: RandomResizedCrop(224) + flip on the photographs (PIL, as torchvision's
reference recipes run it), then each op on the 224x224 result as a uint8 tensor (timm's
RandAugment on the PIL image, as timm runs it), single-threaded.
Prints a Markdown table (ms per sample).

    PYTHONPATH=bench python3 -m prepfs_bench.augment_ops_torchvision DIR [--reps 100]
"""
import glob
import os
import sys
import time

import torch
from PIL import Image
from torchvision.transforms import v2


def main():
    d = sys.argv[1]
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 100
    torch.set_num_threads(1)
    photos = [Image.open(p).convert("RGB") for p in sorted(glob.glob(os.path.join(d, "*.jpg")))]
    base = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.PILToTensor()])
    I = v2.InterpolationMode
    cases = [
        ("(base: random_resized_crop 224 bilinear + flip)", None),
        ("random_resized_crop 224 bicubic + flip", "BICUBIC"),
        ("color_jitter 0.4/0.4/0.4/0.1", v2.ColorJitter(0.4, 0.4, 0.4, 0.1)),
        ("color_jitter 0.4/0.4/0.4 (no hue)", v2.ColorJitter(0.4, 0.4, 0.4)),
        ("random_grayscale p=1", v2.RandomGrayscale(1.0)),
        ("gaussian_blur 9, sigma 0.1-2", v2.GaussianBlur(9)),
        ("random_erasing p=1", v2.RandomErasing(1.0)),
        ("trivial_augment_wide", v2.TrivialAugmentWide()),
        ("rand_augment (2 ops, m9)", v2.RandAugment()),
        ("auto_augment imagenet", v2.AutoAugment()),
        ("timm rand_augment rand-m9-mstd0.5-inc1", "TIMM:rand-m9-mstd0.5-inc1"),
        ("timm rand_augment rand-m7-mstd0.5-inc1", "TIMM:rand-m7-mstd0.5-inc1"),
        ("resize 256 then random_resized_crop 224", "RESIZE_FIRST"),
    ]
    print("| op | ms per sample | over the base |\n|---|---:|---:|")
    base_ms = 0.0
    for name, op in cases:
        if op is None:
            t = base
        elif op == "BICUBIC":
            t = v2.Compose([v2.RandomResizedCrop(224, interpolation=I.BICUBIC, antialias=True), v2.RandomHorizontalFlip(), v2.PILToTensor()])
        elif isinstance(op, str) and op.startswith("TIMM:"):
            # timm's RandAugment as create_transform builds it (on the PIL image, ImageNet's mean
            # as fill), after the same crop and flip; skipped without timm.
            try:
                from timm.data import auto_augment
            except ImportError:
                print(f"| {name} | (timm not installed) | |")
                continue
            ra = auto_augment.rand_augment_transform(op[5:], {"translate_const": int(224 * 0.45), "img_mean": (124, 116, 104)})
            t = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), ra, v2.PILToTensor()])
        elif op == "RESIZE_FIRST":
            t = v2.Compose([v2.Resize(256, antialias=True), v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.PILToTensor()])
        else:
            t = v2.Compose([base, op])
        start = time.perf_counter()
        for _ in range(reps):
            for p in photos:
                t(p)
        ms = (time.perf_counter() - start) * 1e3 / (reps * len(photos))
        if op is None:
            base_ms = ms
        print(f"| {name} | {ms:.3f} | {ms - base_ms:+.3f} |")


if __name__ == "__main__":
    main()
