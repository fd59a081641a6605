#!/usr/bin/env python3
"""What tests/mount_recipes.rs asks of prepfs.recipe, printed as JSON on the last line.

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


BILINEAR, BICUBIC = InterpolationMode("bilinear"), InterpolationMode("bicubic")


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


class Normalize:
    def __init__(self, mean, std, inplace=False):
        self.mean, self.std, self.inplace = list(mean), list(std), inplace


class TrivialAugmentWide:
    pass


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
    "errors": {
        "trivial": error(Compose([RandomResizedCrop(24), RandomHorizontalFlip(), TrivialAugmentWide(), ToTensor()])),
        "bicubic": error(Compose([RandomResizedCrop(24, interpolation=BICUBIC), ToTensor()])),
        "lambda": error(Compose([Resize(40), Lambda(lambda x: x), CenterCrop(32)])),
        "uint8": error(Compose([RandomResizedCrop(24), ToImage()])),
        "no_size": error(Compose([Resize(40), ToTensor()])),
    },
}
try:
    recipe(Compose([RandomResizedCrop(24), RandomHorizontalFlip(), TrivialAugmentWide(), ToTensor()]))
except UnsupportedOp as e:
    out["served_before_trivial"] = e.served
print(json.dumps(out))
