"""Reads a job's augmented/ view as torchvision's ImageFolder + DataLoader(shuffle=True,
num_workers=2) would: the listing sorted once, every file opened once per epoch in a shuffled
order by two worker processes, each through PIL (Image.open, then convert("RGB"), which opens a
PPM a second time to try mmap).

Usage: read_job_pil.py VIEW EPOCHS SEED
Prints JSON: per epoch, a list of [class index, mean red, mean green, sha1 of the pixels].
"""
import hashlib
import json
import os
import random
import sys
from multiprocessing import Pool

import numpy as np
from PIL import Image


def load(item):
    class_index, path = item
    with Image.open(path) as im:
        pixels = np.asarray(im.convert("RGB"))
    return [class_index, float(pixels[..., 0].mean()), float(pixels[..., 1].mean()),
            hashlib.sha1(pixels.tobytes()).hexdigest()]


def main():
    root, epochs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    classes = sorted(os.listdir(root))
    files = [(ci, os.path.join(root, c, f))
             for ci, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(root, c)))]
    out = []
    with Pool(2) as pool:
        for epoch in range(epochs):
            order = files[:]
            random.Random(seed * 100 + epoch).shuffle(order)
            out.append(pool.map(load, order, chunksize=3))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
