#!/usr/bin/env python3
"""What tests/mounted/recipes.rs asks of prepfs.recipe, printed as JSON on the last line.

    recipe_check.py PYTHON_DIR     prepfs.recipe (PYTHON_DIR/prepfs/_recipe.py, the source tree's,
                                   whatever module is installed) on stand-ins named like
                                   torchvision's transforms (v2 and v1), which it reads by class
                                   name and attributes: the YAML of the ops it serves, and the
                                   errors of those it does not
"""
import importlib.util
import json
import os
import sys

spec = importlib.util.spec_from_file_location("prepfs_recipe", os.path.join(sys.argv[1], "prepfs", "_recipe.py"))
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
recipe, UnsupportedOp = module.recipe, module.UnsupportedOp


class InterpolationMode:  # torchvision.transforms.InterpolationMode's members carry .value
    def __init__(self, value):
        self.value = value


BILINEAR, BICUBIC, NEAREST = InterpolationMode("bilinear"), InterpolationMode("bicubic"), InterpolationMode("nearest")


class dtype:  # torch.float32 prints as "torch.float32"
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


float32, uint8 = dtype("torch.float32"), dtype("torch.uint8")


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms


class RandomResizedCrop:
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation=BILINEAR, antialias=True):
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.scale, self.ratio, self.interpolation, self.antialias = scale, ratio, interpolation, antialias


class RandomHorizontalFlip:
    def __init__(self, p=0.5):
        self.p = p


class Resize:
    def __init__(self, size, interpolation=BILINEAR, max_size=None, antialias=True):
        self.size, self.interpolation, self.max_size, self.antialias = size, interpolation, max_size, antialias


class CenterCrop:
    def __init__(self, size):
        self.size = (size, size) if isinstance(size, int) else tuple(size)


class ToImage:
    pass


class ToDtype:
    def __init__(self, dtype, scale=False):
        self.dtype, self.scale = dtype, scale


class ToTensor:
    pass


class ToPureTensor:  # v2's last step in the reference recipe: unwraps tv_tensors
    pass


class Normalize:
    def __init__(self, mean, std, inplace=False):
        self.mean, self.std, self.inplace = list(mean), list(std), inplace


class TrivialAugmentWide:
    def __init__(self, num_magnitude_bins=31, interpolation=NEAREST, fill=None):
        self.num_magnitude_bins, self.interpolation, self.fill = num_magnitude_bins, interpolation, fill


class RandAugment:
    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation=NEAREST, fill=None):
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins
        self.interpolation, self.fill = interpolation, fill


class AutoAugmentPolicy:  # torchvision's enum: members carry .value
    def __init__(self, value):
        self.value = value


class AutoAugment:
    def __init__(self, policy=AutoAugmentPolicy("imagenet"), interpolation=NEAREST, fill=None):
        self.policy, self.interpolation, self.fill = policy, interpolation, fill


class ColorJitter:  # torchvision keeps each factor as None (off) or (low, high)
    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        one = lambda v: None if v == 0 else (max(0.0, 1 - v), 1 + v)
        self.brightness, self.contrast, self.saturation = one(brightness), one(contrast), one(saturation)
        self.hue = None if hue == 0 else (-hue, hue)


class RandomGrayscale:
    def __init__(self, p=0.1):
        self.p = p


class GaussianBlur:
    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        self.kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        self.sigma = [float(sigma), float(sigma)] if isinstance(sigma, (int, float)) else list(sigma)


class RandomErasing:
    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        self.p, self.scale, self.ratio, self.value, self.inplace = p, scale, ratio, value, inplace


class timm:  # timm.data.auto_augment's classes, as rand_augment_transform builds them
    RAND = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
            "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
    INCREASING = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
                  "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                  "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]

    class Resampling:  # PIL.Image.Resampling's members carry .value
        def __init__(self, value):
            self.value = value

    class AugmentOp:
        def __init__(self, name, prob=0.5, magnitude=10, hparams=None):
            self.name, self.prob, self.magnitude, self.hparams = name, prob, magnitude, dict(hparams or {})
            self.kwargs = dict(fillcolor=self.hparams.get("img_mean", (128, 128, 128)),
                               resample=self.hparams.get("interpolation", (timm.Resampling(2), timm.Resampling(3))))

    class RandAugment:
        def __init__(self, names, magnitude=9, num_layers=2, prob=0.5, hparams=None, choice_weights=None):
            self.ops = [timm.AugmentOp(n, prob, magnitude, hparams) for n in names]
            self.num_layers, self.choice_weights = num_layers, choice_weights


class RandomResizedCropAndInterpolation:  # timm.data.transforms': interpolation "random" is a pair
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation=(BILINEAR, BICUBIC)):
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.scale, self.ratio, self.interpolation = scale, ratio, interpolation


class MaybeToTensor:  # timm.data.transforms': ToTensor on a PIL image
    pass


class timm_erasing:  # timm.data.random_erasing's
    class RandomErasing:
        def __init__(self, probability=0.5, min_area=0.02, max_area=1 / 3, min_aspect=0.3, mode="const", min_count=1, max_count=None, num_splits=0):
            import math
            self.probability, self.min_area, self.max_area, self.mode = probability, min_area, max_area, mode
            self.log_aspect_ratio = (math.log(min_aspect), math.log(1 / min_aspect))
            self.min_count, self.max_count, self.num_splits = min_count, max_count or min_count, num_splits


class Lambda:
    def __init__(self, f):
        self.lambd = f


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def error(transform):
    try:
        recipe(transform)
    except (UnsupportedOp, ValueError) as e:
        return str(e)
    return None


out = {
    "v2": recipe(
        Compose([RandomResizedCrop(24), RandomHorizontalFlip(), ToImage(), ToDtype(float32, scale=True), Normalize(MEAN, STD)]),
        name="tv2",
    ),
    "v1": recipe(Compose([Resize(40), CenterCrop(32), ToTensor(), Normalize(MEAN, STD)]), name="tv1"),
    # torchvision's reference recipe (TrivialAugmentWide with the script's bilinear, RandomErasing
    # 0.1), bicubic as Swin's.
    "reference": recipe(
        Compose([RandomResizedCrop(24, interpolation=BICUBIC), RandomHorizontalFlip(), TrivialAugmentWide(interpolation=BILINEAR),
                 ToImage(), ToDtype(float32, scale=True), Normalize(MEAN, STD), RandomErasing(0.1), ToPureTensor()]),
        name="ref",
    ),
    # The other pixel ops, as a uint8 recipe (no conversion: the mount's own output).
    "pixel": recipe(
        Compose([Resize(40), CenterCrop(32), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale(0.2),
                 GaussianBlur(3, (0.1, 2.0)), RandAugment(), AutoAugment()]),
        name="pix",
    ),
    # timm's create_transform(auto_augment="rand-m9-mstd0.5-inc1", re_mode="pixel") as the mount
    # serves it: its RandAugment (fill img_mean, bilinear or bicubic drawn per op), then
    # torchvision's RandomErasing with value="random" (v2 keeps it as None).
    "timm": recipe(
        Compose([RandomResizedCrop(24), RandomHorizontalFlip(),
                 timm.RandAugment(timm.INCREASING, 9, hparams={"img_mean": (124, 116, 104), "magnitude_std": 0.5}),
                 ToTensor(), Normalize(MEAN, STD), RandomErasing(0.25, value=None)]),
        name="timm",
    ),
    "timm_plain": recipe(
        Compose([Resize(40), CenterCrop(32),
                 timm.RandAugment(timm.RAND, 7, num_layers=3, hparams={"interpolation": timm.Resampling(3),
                                                                      "magnitude_std": float("inf"), "magnitude_max": 12}),
                 ToTensor(), RandomErasing(0.5, value="random")]),
        name="tp",
    ),
    # timm's create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
    # interpolation="random", re_prob=0.25, re_mode="pixel"), its own classes, whole.
    "timm_create": recipe(
        Compose([RandomResizedCropAndInterpolation(24), RandomHorizontalFlip(),
                 timm.RandAugment(timm.INCREASING, 9, hparams={"img_mean": (124, 116, 104), "magnitude_std": 0.5}),
                 MaybeToTensor(), Normalize(MEAN, STD), timm_erasing.RandomErasing(0.25, mode="pixel")]),
        name="timmc",
    ),
    "errors": {
        "timm_erasing_rand": error(Compose([RandomResizedCropAndInterpolation(24), MaybeToTensor(), timm_erasing.RandomErasing(mode="rand")])),
        "timm_erasing_count": error(Compose([RandomResizedCropAndInterpolation(24), MaybeToTensor(), timm_erasing.RandomErasing(max_count=3)])),
        "timm_weighted": error(Compose([Resize(40), CenterCrop(32), timm.RandAugment(timm.RAND, choice_weights=[1 / 15] * 15)])),
        "timm_transform_set": error(Compose([Resize(40), CenterCrop(32), timm.RandAugment(["Rotate", "ShearX"])])),
        "random_erasing_other_string": error(Compose([RandomResizedCrop(24), ToTensor(), RandomErasing(value="noise")])),
        "nearest": error(Compose([RandomResizedCrop(24, interpolation=NEAREST), ToTensor()])),
        "lambda": error(Compose([Resize(40), Lambda(lambda x: x), CenterCrop(32)])),
        "uint8": error(Compose([RandomResizedCrop(24), ToImage()])),
        "no_size": error(Compose([Resize(40), ToTensor()])),
        "geometry_after_jitter": error(Compose([Resize(40), ColorJitter(0.4), CenterCrop(32)])),
        "after_erasing": error(Compose([RandomResizedCrop(24), ToTensor(), RandomErasing(), Normalize(MEAN, STD)])),
    },
}
try:
    recipe(Compose([RandomResizedCrop(24), RandomHorizontalFlip(), Lambda(lambda x: x), ToTensor()]))
except UnsupportedOp as e:
    out["served_before_lambda"] = e.served
print(json.dumps(out))
