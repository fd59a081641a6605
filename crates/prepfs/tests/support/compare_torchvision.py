#!/usr/bin/env python3
"""What tests/mounted/torchvision.rs asks: each augment op drawn many times through the mount and
through torchvision v2 on the same photographs, the distributions of per-image statistics
compared with a two-sample Kolmogorov-Smirnov test. Prints JSON.

    compare_torchvision.py check                 "ok", or "skipped: ..." without torch/torchvision
    compare_torchvision.py prepare SRC           real photographs as JPEGs under SRC/photos/
    compare_torchvision.py cases                 the cases: name, prepfs config
    compare_torchvision.py compare NAME MOUNT BASE DRAWS
                                                 case NAME: DRAWS reads of each augmented file of
                                                 MOUNT against DRAWS torchvision draws on BASE's
                                                 (the op's input, read from a mount of the same
                                                 config without the op) or on the source JPEG

timm's RandAugment (rand_augment: {timm: ...}) is compared against timm itself, on a PIL image
of the op's input, when timm is installed. Whole training transforms (torchvision's reference
recipe; timm's create_transform) are moved to the mount by prepfs.recipe, where the prepfs module
is installed, and compared from the source JPEG to the normalised float32 tensor.

The photographs are bench/prepfs_bench/real_photos.py's (public-domain sample images of the scikit-image and
matplotlib wheels, fetched with pip into target/photos once). Statistics per image: the three
channel means, the standard deviation of all values, the zero share (pixels whose three values
are all 0 in the 0-255 sense: 0 in a uint8 image, (0 - mean) / std in a normalised float32 one;
what the fill of a rotation, shear or padding, or an op mapping dark values to 0, leaves), and
for an erasing op the erased share (pixels whose three values all equal the erasing value). The
KS critical value is at alpha = 0.001 (two-sided, asymptotic); torchvision is seeded, the mount
too, so a result is reproducible.
"""
import io
import json
import math
import os
import random
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..", "..")
ALPHA = 0.001
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png"]
SIDE = 96
BASE = [{"resize": {"size": [SIDE, SIDE]}}]
NORMALIZE = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def has_timm():
    try:
        import timm  # noqa: F401
        return True
    except ImportError:
        return False


def timm_posterize_as_before_pillow_13():
    """timm's ImageOps with posterize(img, 0) as Pillow before 13 did it (every bit cleared):
    timm's inc1 asks for 0 bits at magnitude 10 (1 draw in 44 with m9-mstd0.5) and Pillow 13
    raises there; prepfs serves the older meaning."""
    from timm.data import auto_augment
    from PIL import Image, ImageOps

    class Ops:
        def __getattr__(self, name):
            return getattr(ImageOps, name)

        @staticmethod
        def posterize(img, bits):
            return Image.new(img.mode, img.size, (0,) * len(img.getbands())) if bits == 0 else ImageOps.posterize(img, bits)

    auto_augment.ImageOps = Ops()


def timm_rand_augment(config):
    """timm's RandAugment as create_transform builds it for ImageNet's mean: fill img_mean
    (124, 116, 104), and (interpolation 'random', timm's train default) bilinear or bicubic drawn
    per op."""
    from timm.data import auto_augment
    timm_posterize_as_before_pillow_13()
    return auto_augment.rand_augment_transform(config, {"translate_const": int(SIDE * 0.45), "img_mean": (124, 116, 104)})


def cases():
    """name -> (prepfs augment list, output, torchvision transform on a uint8 CHW tensor (timm's:
    on a PIL image, "pil") or None for a case starting from the source, erase value or None;
    "random" compares the share of pixels changed from the op's input instead)."""
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import InterpolationMode as I
    import torch

    def geometric(ops, build):
        return {"augment": ops, "output": {"format": "npy"}, "tv": build, "from_source": True, "erase": None}

    def op(entry, build, output=None, erase=None):
        out = {"augment": BASE + [entry], "output": output or {"format": "npy"}, "tv": build, "from_source": False}
        out["erase"] = erase
        return out

    rrc = lambda i: v2.RandomResizedCrop(48, interpolation=i, antialias=True)
    out = {
        "resize_then_random_resized_crop": geometric(
            [{"resize": {"size": 128}}, {"random_resized_crop": {"size": 48}}],
            lambda: v2.Compose([v2.Resize(128, antialias=True), rrc(I.BILINEAR)])),
        "resize_then_random_crop": geometric(
            [{"resize": {"size": 64}}, {"random_crop": {"size": 48}}],
            lambda: v2.Compose([v2.Resize(64, antialias=True), v2.RandomCrop(48)])),
        "random_resized_crop_bicubic": geometric(
            [{"random_resized_crop": {"size": 48, "interpolation": "bicubic"}}], lambda: rrc(I.BICUBIC)),
        "random_resized_crop_random": geometric(
            [{"random_resized_crop": {"size": 48, "interpolation": "random"}}],
            lambda: v2.RandomChoice([rrc(I.BILINEAR), rrc(I.BICUBIC)])),
        "color_jitter": op({"color_jitter": {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}},
                           lambda: v2.ColorJitter(0.4, 0.4, 0.4, 0.1)),
        "random_grayscale": op({"random_grayscale": {"p": 0.5}}, lambda: v2.RandomGrayscale(0.5)),
        "random_rotation": op({"random_rotation": {"degrees": 30}}, lambda: v2.RandomRotation(30)),
        # Bilinear, as torchvision turns a PIL image (PIL's rotate).
        "random_rotation_bilinear": dict(
            op({"random_rotation": {"degrees": [-10, 45], "interpolation": "bilinear"}},
               lambda: v2.RandomRotation([-10, 45], interpolation=I.BILINEAR)),
            pil=True),
        # random_crop's padding on the 96x96 input: the window reaches into the padding on most
        # draws (with size 96 and padding 12 it sits inside the image only at offset (12, 12)).
        "random_crop_pad_constant": op({"random_crop": {"size": 96, "padding": 12}},
                                       lambda: v2.RandomCrop(96, padding=12)),
        "random_crop_pad_fill": op(
            {"random_crop": {"size": 88, "padding": [10, 6], "fill": [255, 40, 128]}},
            lambda: v2.RandomCrop(88, padding=[10, 6], fill=[255, 40, 128])),
        "random_crop_pad_edge": op({"random_crop": {"size": 96, "padding": [8, 14], "padding_mode": "edge"}},
                                   lambda: v2.RandomCrop(96, padding=[8, 14], padding_mode="edge")),
        "random_crop_pad_reflect": op(
            {"random_crop": {"size": [90, 100], "padding": [2, 16, 14, 6], "padding_mode": "reflect"}},
            lambda: v2.RandomCrop([90, 100], padding=[2, 16, 14, 6], padding_mode="reflect")),
        "random_crop_pad_symmetric": op({"random_crop": {"size": 96, "padding": 12, "padding_mode": "symmetric"}},
                                        lambda: v2.RandomCrop(96, padding=12, padding_mode="symmetric")),
        # 112 high from 96: pad_if_needed pads 16 at the top and the bottom, the window drawn in
        # 128 (it always holds the whole height: v2 pads twice the shortfall); 64 wide, drawn
        # across the 96 (a size needing padding on both sides would give every draw one image).
        "random_crop_pad_if_needed": op({"random_crop": {"size": [112, 64], "pad_if_needed": True}},
                                        lambda: v2.RandomCrop([112, 64], pad_if_needed=True)),
        "gaussian_blur": op({"gaussian_blur": {"kernel_size": 9, "sigma": [0.1, 5.0]}},
                            lambda: v2.GaussianBlur(9, (0.1, 5.0))),
        "random_erasing_uint8": op({"random_erasing": {"p": 0.5}}, lambda: v2.RandomErasing(0.5), erase=0),
        "random_erasing_float32": op(
            {"random_erasing": {"p": 0.5}},
            lambda: v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(**NORMALIZE), v2.RandomErasing(0.5)]),
            output={"format": "npy", "dtype": "float32", **NORMALIZE}, erase=0.0),
        "trivial_augment_wide": op({"trivial_augment_wide": {}}, lambda: v2.TrivialAugmentWide()),
        # Bilinear, as torchvision's reference recipe runs it: on the PIL image, before PILToTensor.
        "trivial_augment_wide_bilinear": dict(
            op({"trivial_augment_wide": {"interpolation": "bilinear"}}, lambda: v2.TrivialAugmentWide(interpolation=I.BILINEAR)),
            pil=True),
        "rand_augment": op({"rand_augment": {}}, lambda: v2.RandAugment()),
        "auto_augment": op({"auto_augment": {"policy": "imagenet"}}, lambda: v2.AutoAugment()),
        "random_erasing_random_uint8": op({"random_erasing": {"p": 0.5, "value": "random"}},
                                          lambda: v2.RandomErasing(0.5, value="random"), erase="random"),
        "random_erasing_random_float32": op(
            {"random_erasing": {"p": 0.5, "value": "random"}},
            lambda: v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(**NORMALIZE),
                                v2.RandomErasing(0.5, value="random")]),
            output={"format": "npy", "dtype": "float32", **NORMALIZE}, erase="random"),
    }
    # Whole training transforms, moved to the mount by prepfs.recipe (the YAML it writes) and
    # compared from the source JPEG to the float32 tensor: torchvision's reference recipe
    # (TrivialAugmentWide bilinear, as its train.py passes --interpolation, RandomErasing 0.1)
    # and timm's create_transform with RandAugment.
    try:
        import prepfs
    except ImportError:
        prepfs = None
    if prepfs is not None:
        def whole(build, erase):
            transform = build()
            return {"yaml": prepfs.recipe(transform), "tv": build, "from_source": True, "erase": erase,
                    "output": {"format": "npy", "dtype": "float32", **normalize_of(transform)}}
        out["whole_torchvision_reference_recipe"] = whole(lambda: v2.Compose([
            v2.RandomResizedCrop(48, antialias=True), v2.RandomHorizontalFlip(0.5),
            v2.TrivialAugmentWide(interpolation=I.BILINEAR),
            v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(**NORMALIZE), v2.RandomErasing(0.1)]), 0.0)
        if has_timm():
            from timm.data import create_transform

            def timm_train():
                timm_posterize_as_before_pillow_13()
                return create_transform(48, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25)
            out["whole_timm_create_transform"] = whole(timm_train, 0.0)
    if has_timm():
        for config in ("rand-m9-mstd0.5-inc1", "rand-m9-mstd0.5", "rand-m7-mstd0.5-inc1", "rand-m9-n3-mstd0.5"):
            case = op({"rand_augment": {"timm": config}}, lambda config=config: timm_rand_augment(config))
            case["pil"] = True
            out["timm_" + config.replace("-", "_").replace(".", "")] = case
    return out


def normalize_of(transform):
    """The mean and std of a whole transform's Normalize (what the recipe's output normalises by)."""
    for t in getattr(transform, "transforms", []):
        if type(t).__name__ == "Normalize":
            return {"mean": [float(v) for v in t.mean], "std": [float(v) for v in t.std]}
    return {}


def zero_of(output):
    """Per channel, the value 0 (in the 0-255 sense) takes in an output: 0 in uint8; in float32,
    0 scaled to [0, 1] then normalised by the output's mean and std where it has them."""
    if output.get("dtype") != "float32":
        return np.zeros(3)
    mean, std = np.array(output.get("mean", [0.0] * 3)), np.array(output.get("std", [1.0] * 3))
    return (0.0 - mean) / std


def config_yaml(case):
    if "yaml" in case:
        return "seed: 11\nthreads: 2\n" + case["yaml"]
    return json.dumps({"seed": 11, "threads": 2, "augment": case["augment"], "output": case["output"]})


def base_yaml(case):
    return json.dumps({"seed": 11, "threads": 2, "augment": BASE, "output": {"format": "npy"}})


def read_npy(path):
    with open(path, "rb") as f:
        return np.load(io.BytesIO(f.read()))


def chw_of(img):
    return img if img.dtype == np.float32 and img.shape[0] == 3 else np.transpose(img, (2, 0, 1))


def stats(img, erase, zero, before=None):
    """Per-image statistics of an HWC (uint8) or CHW (float32) image, rounded to 4 decimals: an
    image the op left alone has one exact mean, and float32 normalisation summed in another order
    (ours against torch's, 4e-7 apart) must not split that tie into a KS step. The zero share:
    pixels whose three values are each within 1e-4 of `zero` (zero_of's, per channel). With erase
    "random", the changed share: pixels with a channel more than 1e-3 from `before` (the op's
    input, in the image's layout and dtype)."""
    chw = chw_of(img).astype(np.float64)
    out = {"mean_r": chw[0].mean(), "mean_g": chw[1].mean(), "mean_b": chw[2].mean(), "std": chw.std()}
    out["zero_share"] = float(np.all(np.abs(chw - np.asarray(zero, dtype=np.float64)[:, None, None]) <= 1e-4, axis=0).mean())
    if erase == "random":
        out["changed_share"] = float(np.any(np.abs(chw - chw_of(before).astype(np.float64)) > 1e-3, axis=0).mean())
    elif erase is not None:
        out["erased_share"] = float(np.all(chw == erase, axis=0).mean())
    return {k: round(float(v), 4) for k, v in out.items()}


def ks(a, b):
    """Two-sample KS statistic and the critical value at ALPHA."""
    a, b = np.sort(np.asarray(a)), np.sort(np.asarray(b))
    values = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, values, side="right") / len(a) - np.searchsorted(b, values, side="right") / len(b))))
    crit = math.sqrt(-math.log(ALPHA / 2) / 2) * math.sqrt((len(a) + len(b)) / (len(a) * len(b)))
    return d, crit


def photos_in(src):
    return sorted(os.path.join(src, "photos", f) for f in os.listdir(os.path.join(src, "photos")))


def main():
    cmd = sys.argv[1]
    if cmd == "check":
        try:
            import torch, torchvision  # noqa: F401
            from torchvision.transforms import v2  # noqa: F401
        except ImportError as e:
            print(f"skipped: torch/torchvision not installed for {sys.executable} ({e}); `make compare-torchvision` installs them and runs this")
            return
        timm = "timm " + __import__("timm").__version__ if has_timm() else "no timm (its cases left out)"
        print(f"ok torch {torch.__version__} torchvision {torchvision.__version__} {timm}")
    elif cmd == "prepare":
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from prepfs_bench.real_photos import photographs
        from PIL import Image
        wanted = [p for p in photographs(os.path.join(ROOT, "target", "photos")) if os.path.basename(p) in PHOTOS]
        out = os.path.join(sys.argv[2], "photos")
        os.makedirs(out, exist_ok=True)
        for path in wanted:
            im = Image.open(path).convert("RGB")
            im.thumbnail((256, 256), Image.Resampling.LANCZOS)
            im.save(os.path.join(out, os.path.splitext(os.path.basename(path))[0] + ".jpg"), quality=95)
        print(json.dumps({"photos": len(wanted)}))
    elif cmd == "cases":
        print(json.dumps({name: {"config": config_yaml(c), "base": None if c["from_source"] else base_yaml(c)} for name, c in cases().items()}))
    elif cmd == "compare":
        import torch
        from PIL import Image
        from torchvision.transforms import v2
        name, mount, base, src, draws = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
        case = cases()[name]
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)
        transform = case["tv"]()
        zero = zero_of(case["output"])
        ours, theirs = [], []
        for photo in photos_in(src):
            stem = os.path.splitext(os.path.basename(photo))[0]
            path = os.path.join(mount, "augmented", "photos", stem + ".npy")
            before = None
            if case["erase"] == "random":
                hwc = read_npy(os.path.join(base, "augmented", "photos", stem + ".npy"))
                before = hwc
                if case["output"].get("dtype") == "float32":
                    mean, std = (np.array(NORMALIZE[k], dtype=np.float32)[:, None, None] for k in ("mean", "std"))
                    before = (np.transpose(hwc, (2, 0, 1)).astype(np.float32) / 255 - mean) / std
            for _ in range(draws):
                ours.append(stats(read_npy(path), case["erase"], zero, before))
            if case["from_source"]:
                pil = Image.open(photo).convert("RGB")
                for _ in range(draws):
                    # A PIL image (geometric ops) or a float32 CHW tensor (a whole transform).
                    theirs.append(stats(np.asarray(transform(pil)), case["erase"], zero))
            elif case.get("pil"):
                pil = Image.fromarray(read_npy(os.path.join(base, "augmented", "photos", stem + ".npy")))
                for _ in range(draws):
                    theirs.append(stats(np.asarray(transform(pil.copy())), case["erase"], zero, before))
            else:
                hwc = read_npy(os.path.join(base, "augmented", "photos", stem + ".npy"))
                chw = torch.from_numpy(np.ascontiguousarray(np.transpose(hwc, (2, 0, 1))))
                for _ in range(draws):
                    out = transform(chw.clone()).numpy()
                    theirs.append(stats(out if out.dtype == np.float32 else np.transpose(out, (1, 2, 0)), case["erase"], zero,
                                        before))
        result = {"case": name, "n": len(ours), "m": len(theirs), "stats": {}}
        for key in ours[0]:
            d, crit = ks([s[key] for s in ours], [s[key] for s in theirs])
            result["stats"][key] = {"d": round(d, 4), "critical": round(crit, 4)}
        print(json.dumps(result))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
