"""The peer of issue 2: torchvision's RandomResizedCrop(224) + RandomHorizontalFlip on the
original JPEGs, in plain PIL (what torchvision.transforms does on PIL images: the same draws,
crop, then a bilinear resize), with N worker processes; prints samples/s.

usage: pil_pipeline.py DIR [WORKERS]
"""
import math
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image

EXTS = (".jpg", ".jpeg", ".png")


def random_resized_crop(img, size=224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    width, height = img.size
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * random.uniform(*scale)
        aspect = math.exp(random.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = random.randint(0, height - h)
            j = random.randint(0, width - w)
            break
    else:
        i, j, h, w = 0, 0, height, width
    return img.crop((j, i, j + w, i + h)).resize((size, size), Image.BILINEAR)


def work(paths):
    done = 0
    for p in paths:
        img = random_resized_crop(Image.open(p).convert("RGB"))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        np.asarray(img)
        done += 1
    return done


def main():
    root = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.lower().endswith(EXTS))
    chunks = [files[i::workers] for i in range(workers)]
    started = time.time()
    with ProcessPoolExecutor(workers) as pool:
        done = sum(pool.map(work, chunks))
    elapsed = time.time() - started
    print(f"{done / elapsed:.0f} samples/s ({done} samples, {elapsed:.2f} s)")


if __name__ == "__main__":
    main()
