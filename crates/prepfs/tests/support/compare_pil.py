"""Checks a prepfs mount against PIL, the way torchvision users read images.

usage: compare_pil.py SOURCE MOUNT [--skip NAME ...]

- decoded/: every sample's PPM equals PIL's Image.open(src).convert("RGB") within a mean
  absolute difference of 1.0 per channel (8-bit values);
- augmented/: an ImageFolder-style walk (sorted class directories, files with image
  extensions, PIL open + convert("RGB")) loads every sample as a 224x224 RGB image and finds the
  same classes and samples as the source.
Prints one JSON line of figures; exits 1 on any mismatch.
"""

import json
import os
import sys

import numpy as np
from PIL import Image

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def image_folder(root):
    """torchvision.datasets.ImageFolder's find_classes + make_dataset, without torch."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for index, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith(IMG_EXTENSIONS):
                    samples.append((os.path.join(dirpath, f), index))
    return classes, samples


def main():
    source, mount = sys.argv[1], sys.argv[2]
    skip = set(sys.argv[sys.argv.index("--skip") + 1:]) if "--skip" in sys.argv else set()
    failures = []
    worst = 0.0
    compared = 0
    src_classes, src_samples = image_folder(source)
    for path, _ in src_samples:
        rel = os.path.relpath(path, source)
        stem = os.path.splitext(rel)[0]
        if os.path.basename(stem) in skip:
            continue
        want = np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)
        got_img = Image.open(os.path.join(mount, "decoded", stem + ".ppm"))
        got = np.asarray(got_img.convert("RGB"), dtype=np.int16)
        if got.shape != want.shape:
            failures.append(f"{rel}: decoded shape {got.shape}, PIL {want.shape}")
            continue
        mad = np.abs(got - want).mean(axis=(0, 1))
        worst = max(worst, float(mad.max()))
        compared += 1
        if mad.max() > 1.0:
            failures.append(f"{rel}: mean abs diff per channel {mad.tolist()}")
    aug_classes, aug_samples = image_folder(os.path.join(mount, "augmented"))
    if aug_classes != src_classes:
        failures.append(f"augmented classes {aug_classes} != source classes {src_classes}")
    loaded = 0
    for path, label in aug_samples:
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem in skip:
            continue
        if os.path.basename(os.path.dirname(path)) != aug_classes[label]:
            failures.append(f"{path}: label {label}")
        img = Image.open(path).convert("RGB")
        if img.size != (224, 224):
            failures.append(f"{path}: augmented size {img.size}")
        loaded += 1
    expected = len([p for p, _ in src_samples if os.path.splitext(os.path.basename(p))[0] not in skip])
    if loaded != expected:
        failures.append(f"augmented loaded {loaded} samples, source has {expected}")
    print(json.dumps({"compared": compared, "worst_channel_mad": worst, "augmented_loaded": loaded}))
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
