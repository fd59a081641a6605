#!/usr/bin/env python3
"""prepfs.Loader as a DALI pipeline's input: batches already decoded and augmented by the mount,
handed to DALI's `external_source`, which copies each into its own buffers (the loader's slot is
then free for the next batch) and runs what is left of the pipeline, here on the GPU.

    python3 crates/prepfs/examples/dali_external_source.py /mnt/prepfs --job train [--batch-size 256] [--epochs 2]

Needs a running mount (`prepfs mount ...`), the prepfs module (`make python`), and DALI
(`pip install nvidia-dali-cuda120`); without a GPU, `--cpu` keeps every operator on the CPU.
"""
import argparse

import numpy as np
import prepfs
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy


class Batches:
    """One epoch of the job's batches per iteration: NHWC uint8 images and int64 labels."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        self.epoch = iter(self.loader)
        return self

    def __next__(self):
        images, labels = next(self.epoch)  # StopIteration ends DALI's epoch too
        # Views of the loader's shared memory: external_source copies them (no_copy=False).
        return np.from_dlpack(images), np.from_dlpack(labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mountpoint")
    ap.add_argument("--job", default="dali")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--cpu", action="store_true", help="keep every operator on the CPU (no GPU needed)")
    args = ap.parse_args()
    device = "cpu" if args.cpu else "gpu"

    with prepfs.Loader(args.mountpoint, job=args.job, batch_size=args.batch_size) as loader:

        @pipeline_def(batch_size=args.batch_size, num_threads=2, device_id=None if args.cpu else 0)
        def pipeline():
            # cycle="raise": DALI calls iter() again at each reset, so every epoch is a new one of the
            # job (without it the source is spent after the first and epoch 2 returns nothing).
            images, labels = fn.external_source(source=Batches(loader), num_outputs=2, batch=True, cycle="raise",
                                                layout=["HWC", ""], dtype=[types.UINT8, types.INT64])
            if device == "gpu":
                images = images.gpu()
            # What the mount did not do: the float conversion and normalisation, on the device.
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                              std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
            return images, labels

        pipe = pipeline()
        pipe.build()
        batches = DALIGenericIterator(pipe, ["images", "labels"], last_batch_policy=LastBatchPolicy.PARTIAL,
                                      auto_reset=True)
        for epoch in range(args.epochs):
            seen = 0
            for batch in batches:
                seen += batch[0]["labels"].shape[0]
            print(f"epoch {epoch + 1}: {seen} samples ({len(loader.classes)} classes)")


if __name__ == "__main__":
    main()
