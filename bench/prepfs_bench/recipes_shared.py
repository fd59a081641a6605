"""Two recipes read at once against one recipe (docs/recipes.md): on a fresh mount each, the
JPEG decodes per sample served and the source bytes read, from stats.json, over two epochs with a
pause between them (the idle refill keeps each recipe's outputs ahead). A standalone script:

    PYTHONPATH=bench python3 -m prepfs_bench.recipes_shared --prepfs target/release/prepfs \
        --work /tmp/recipes-shared [--make-source 100]

`--make-source N` first writes N synthetic JPEGs per class (two classes) under WORK/src with
Pillow; else WORK/src must hold an ImageFolder tree. One JSON line per epoch and run."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import threading
import time

CONFIG = """cache: { memory: 256MiB, split: 0-50-50 }
recipes:
  r96: { augment: [ {random_resized_crop: {size: 96}} ] }
  r64: { augment: [ {random_resized_crop: {size: 64}} ] }
"""


def make_source(src: str, per_class: int) -> None:
    """`per_class` noisy JPEGs (480x360 to 640x480) in each of two classes."""
    from PIL import Image

    rng = random.Random(1)
    for c in range(2):
        d = os.path.join(src, f"c{c}")
        os.makedirs(d, exist_ok=True)
        for k in range(per_class):
            w, h = rng.choice([(500, 375), (640, 480), (480, 360)])
            img = Image.effect_mandelbrot((w, h), (-2 + k * 0.001, -1.2, 1, 1.2), 60).convert("RGB")
            noise = Image.effect_noise((w, h), 40)
            img = Image.merge("RGB", (img.getchannel(0), noise, img.getchannel(2).point(lambda v: 255 - v)))
            img.save(os.path.join(d, f"s{c * per_class + k:04d}.jpg"), quality=90)


def sample_files(src: str) -> list[str]:
    """Each sample's path in a recipe's view, relative to it."""
    return sorted(
        f"{c}/{os.path.splitext(n)[0]}.ppm" for c in sorted(os.listdir(src)) for n in os.listdir(os.path.join(src, c)) if n.endswith(".jpg")
    )


def stats(mnt: str) -> dict:
    with open(os.path.join(mnt, ".prepfs/stats.json")) as f:
        return json.load(f)


def delta(after: dict, before: dict, *keys: str) -> int:
    for k in keys:
        after, before = after[k], before[k]
    return after - before


def read_all(mnt: str, recipe: str, files: list[str]) -> None:
    for f in files:
        with open(os.path.join(mnt, recipe, f), "rb") as h:
            h.read()


def run(prepfs: str, work: str, name: str, recipes: list[str], files: list[str]) -> list[dict]:
    """A fresh mount, `recipes` read at once for two epochs; each epoch's figures."""
    mnt = os.path.join(work, f"mnt-{name}")
    os.makedirs(mnt, exist_ok=True)
    config = os.path.join(work, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(CONFIG)
    env = dict(os.environ, PREPFS_RUN_DIR=os.path.join(work, f"run-{name}"))
    with open(os.path.join(work, f"{name}.log"), "w") as log:
        cmd = ["nice", "-n", "19", prepfs, "mount", config, "--source", os.path.join(work, "src"), "--mountpoint", mnt, "--drain", "0.2"]
        daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    try:
        for _ in range(600):
            if os.path.exists(os.path.join(mnt, ".prepfs/stats.json")):
                break
            time.sleep(0.1)
        rows = []
        for epoch in (1, 2):
            before = stats(mnt)
            started = time.time()
            readers = [threading.Thread(target=read_all, args=(mnt, r, files)) for r in recipes]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            wall = time.time() - started
            after = stats(mnt)
            served = sum(delta(after, before, "recipes", r, "opens") for r in recipes)
            decodes = delta(after, before, "work", "full_decodes") + delta(after, before, "work", "decode_augments")
            total_decodes = after["work"]["full_decodes"] + after["work"]["decode_augments"]
            total_served = sum(after["recipes"][r]["opens"] for r in recipes)
            rows.append({
                "run": name, "epoch": epoch, "samples": len(files), "served": served,
                "jpeg_decodes": decodes, "decodes_per_sample_served": round(decodes / served, 3),
                "source_bytes_read": delta(after, before, "source_bytes_read"),
                "served_kept": {r: delta(after, before, "recipes", r, "served_kept") for r in recipes},
                "wall_s": round(wall, 2),
                # From the mount on (the refill works ahead of the first epoch too).
                "since_mount": {
                    "jpeg_decodes": total_decodes, "served": total_served,
                    "decodes_per_sample_served": round(total_decodes / total_served, 3),
                    "source_bytes_read": after["source_bytes_read"], "source_reads": after["work"]["source_reads"],
                    "pixel_ns_per_sample": {r: after["recipes"][r]["pixel_ns_per_sample"] for r in recipes},
                },
            })
            time.sleep(3)  # readers idle: the refill keeps outputs ahead
        return rows
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
        daemon.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepfs", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--make-source", type=int, default=0, metavar="N")
    args = ap.parse_args()
    src = os.path.join(args.work, "src")
    if args.make_source:
        make_source(src, args.make_source)
    files = sample_files(src)
    set_bytes = sum(os.path.getsize(os.path.join(src, c, n)) for c in os.listdir(src) for n in os.listdir(os.path.join(src, c)))
    print(json.dumps({"samples": len(files), "set_bytes": set_bytes}))
    for name, recipes in (("one", ["r96"]), ("two", ["r96", "r64"])):
        for row in run(args.prepfs, args.work, name, recipes, files):
            print(json.dumps(row))


if __name__ == "__main__":
    main()
