#!/usr/bin/env python3
"""A dataset nobody tuned prepfs to: ImageNet-like JPEGs cut from real photographs.

The photographs are the public-domain and CC0 sample images that ship inside the scikit-image
and matplotlib wheels (NASA's astronaut, Hubble deep field and rocket, Chelsea the cat, a coffee
cup, a motorcycle, a retina, Grace Hopper, and grayscale ones: a camera man, brick, grass,
gravel, the moon), fetched with `pip download` into a cache directory (nothing of them is kept
in this repository). Each output is a random crop (a tenth of the photo's area to all of it,
aspect 3:4 to 4:3) resized to a size drawn around --width x --height (0.6x to 1.5x each side,
so sizes vary as ImageNet's do), flipped at random, and saved as JPEG at a quality of 70-95,
4:2:0 or 4:4:4, one in eight progressive; grayscale photographs stay grayscale (ImageNet has
some). Deterministic for a seed.

    PYTHONPATH=bench python3 -m prepfs_bench.real_photos --out DIR [--classes 20] [--per-class 150] [--width 600] [--height 420] [--seed 0]
"""
import argparse
import glob
import os
import random
import subprocess
import sys
import zipfile

from . import ROOT

PHOTOS = {
    "skimage/data/": ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "motorcycle_left.png",
                      "motorcycle_right.png", "retina.jpg", "rocket.jpg", "ihc.png", "camera.png", "brick.png",
                      "grass.png", "gravel.png", "moon.png"],
    "matplotlib/mpl-data/sample_data/": ["grace_hopper.jpg"],
}


def photographs(cache):
    """Paths of the photographs, fetched (pip download, then unzipped) into `cache` once."""
    os.makedirs(cache, exist_ok=True)
    wanted = [os.path.join(cache, prefix, name) for prefix, names in PHOTOS.items() for name in names]
    if all(os.path.exists(p) for p in wanted):
        return wanted
    wheels = os.path.join(cache, "wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", wheels,
                    "scikit-image", "matplotlib"], check=True)
    for wheel in glob.glob(os.path.join(wheels, "*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if any(member.startswith(prefix) and member[len(prefix):] in names for prefix, names in PHOTOS.items()):
                    z.extract(member, cache)
    missing = [p for p in wanted if not os.path.exists(p)]
    if missing:
        raise SystemExit(f"photographs missing from the wheels: {missing}")
    return wanted


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--per-class", type=int, default=150)
    ap.add_argument("--width", type=int, default=600)
    ap.add_argument("--height", type=int, default=420)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(ROOT, "target", "photos"))
    a = ap.parse_args()
    from PIL import Image

    rng = random.Random(a.seed)
    sources = []
    for path in photographs(a.cache):
        im = Image.open(path)
        im = im.convert("L") if im.mode in ("L", "I", "I;16") else im.convert("RGB")
        sources.append(im)
    total = 0
    for c in range(a.classes):
        d = os.path.join(a.out, f"n{c:08d}")
        os.makedirs(d, exist_ok=True)
        for k in range(a.per_class):
            src = sources[rng.randrange(len(sources))]
            w0, h0 = src.size
            area = w0 * h0 * rng.uniform(0.1, 1.0)
            ratio = rng.uniform(3 / 4, 4 / 3)
            cw = min(w0, max(16, int(round((area * ratio) ** 0.5))))
            ch = min(h0, max(16, int(round((area / ratio) ** 0.5))))
            x, y = rng.randint(0, w0 - cw), rng.randint(0, h0 - ch)
            out_w = max(64, int(a.width * rng.uniform(0.6, 1.5)))
            out_h = max(64, int(a.height * rng.uniform(0.6, 1.5)))
            im = src.crop((x, y, x + cw, y + ch)).resize((out_w, out_h), Image.BICUBIC)
            if rng.random() < 0.5:
                im = im.transpose(Image.FLIP_LEFT_RIGHT)
            path = os.path.join(d, f"img_{c:03d}_{k:05d}.JPEG")
            im.save(path, "JPEG", quality=rng.randint(70, 95), subsampling=rng.choice([0, 2, 2, 2]),
                    progressive=rng.random() < 0.125)
            total += os.path.getsize(path)
    n = a.classes * a.per_class
    print(f"wrote {n} JPEGs cut from {len(sources)} photographs to {a.out}, {total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
