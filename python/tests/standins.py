"""Stand-ins for torchvision's (v2 and v1) and timm's transforms, for the tests of
``prepfs.recipe`` without torch.

``prepfs.recipe`` reads a transform by its class name and attributes (it never imports
torchvision), so a class named like torchvision's that keeps its arguments as torchvision keeps
them is, to it, the same transform. Each stand-in stores its attributes the way the real class's
``__init__`` does (torchvision 0.2x, timm 1.0), noted where v2 and v1 differ: v2's ``Resize(40)``
keeps ``size=[40]``, v1's ``40``; v2's ``RandomErasing(value=0)`` keeps ``[0.0]`` and
``value="random"`` as ``None``; v2's policies keep ``fill`` as ``{"others": fill}``; v2's
``RandomCrop(padding=[1, 2, 3, 4])`` keeps ``[1, 3, 2, 4]`` (left, right, top, bottom), v1's the
list as given, which ``prepfs.recipe`` tells apart by the class's module (the stand-ins name
torchvision's).
test_recipe.py's last test runs the same transforms built by the real torchvision where it is
installed, so a stand-in that drifts from torchvision shows there.
"""

import enum
import math
import numbers

import numpy as np


class InterpolationMode(enum.Enum):  # torchvision.transforms.InterpolationMode
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class AutoAugmentPolicy(enum.Enum):  # torchvision.transforms.AutoAugmentPolicy
    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


class Resampling(enum.IntEnum):  # PIL.Image.Resampling
    NEAREST = 0
    LANCZOS = 1
    BILINEAR = 2
    BICUBIC = 3


class _Dtype:  # torch.float32 prints as "torch.float32"
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name

    __repr__ = __str__


class torch:  # the two dtypes the recipes name
    float32 = float = _Dtype("torch.float32")
    uint8 = _Dtype("torch.uint8")
    float16 = _Dtype("torch.float16")


class tv_tensors:  # v2's ToDtype({tv_tensors.Image: ..., "others": None}) keys
    class Image:
        pass


I = InterpolationMode
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _setup_size(size):
    """torchvision's _setup_size: an int as (s, s), one side as (s, s), (h, w) as given."""
    if isinstance(size, numbers.Number):
        return int(size), int(size)
    if len(size) == 1:
        return size[0], size[0]
    return size


def _color_range(value, center=1.0, bound=(0.0, float("inf")), clip_first_on_zero=True, as_tuple=True):
    """ColorJitter's _check_input: None (off) or (low, high)."""
    if isinstance(value, numbers.Number):
        value = [center - float(value), center + float(value)]
        if clip_first_on_zero:
            value[0] = max(value[0], 0.0)
    if value[0] == value[1] == center:
        return None
    return (float(value[0]), float(value[1])) if as_tuple else list(value)


def _parse_pad_padding(padding):
    """v2's _parse_pad_padding: n, [n], [left/right, top/bottom] or [left, top, right, bottom]
    as [left, right, top, bottom]."""
    if isinstance(padding, int):
        padding = [padding]
    if len(padding) == 1:
        return [padding[0]] * 4
    if len(padding) == 2:
        return [padding[0], padding[0], padding[1], padding[1]]
    left, top, right, bottom = padding
    return [left, right, top, bottom]


def _policy_fill(fill):
    """v2's _setup_fill_arg: {"others": fill}, a sequence as floats."""
    if isinstance(fill, dict):
        return fill
    if fill is not None and not isinstance(fill, (int, float)):
        fill = [float(v) for v in fill]
    return {"others": fill}


class v2:
    """torchvision.transforms.v2's classes, keeping their arguments as v2 does."""

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

    class RandomResizedCrop:
        def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation=I.BILINEAR, antialias=True):
            self.size = _setup_size(size)
            self.scale, self.ratio, self.interpolation, self.antialias = scale, ratio, interpolation, antialias

    class Resize:
        def __init__(self, size, interpolation=I.BILINEAR, max_size=None, antialias=True):
            self.size = [size] if isinstance(size, int) else (list(size) if size is not None else None)
            self.interpolation, self.max_size, self.antialias = interpolation, max_size, antialias

    class CenterCrop:
        def __init__(self, size):
            self.size = _setup_size(size)

    class RandomCrop:
        # v2 keeps padding parsed as [left, right, top, bottom] (None for none or 0); prepfs.recipe
        # tells it from v1's (kept as given) by the class's module, as the real one's.
        __module__ = "torchvision.transforms.v2._geometry"

        def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
            self.size, self.padding, self.pad_if_needed = _setup_size(size), _parse_pad_padding(padding) if padding else None, pad_if_needed
            self.fill, self._fill, self.padding_mode = fill, _policy_fill(fill), padding_mode

    class RandomHorizontalFlip:
        def __init__(self, p=0.5):
            self.p = p

    class RandomVerticalFlip:
        def __init__(self, p=0.5):
            self.p = p

    class RandomRotation:
        def __init__(self, degrees, interpolation=InterpolationMode.NEAREST, expand=False, center=None, fill=0):
            self.degrees = [-float(degrees), float(degrees)] if isinstance(degrees, (int, float)) else [float(d) for d in degrees]
            self.interpolation, self.expand, self.center = interpolation, expand, center
            self.fill = _policy_fill(fill)

    class ToImage:
        pass

    class PILToTensor:
        pass

    class ToPureTensor:
        pass

    class Identity:
        pass

    class ToDtype:
        def __init__(self, dtype, scale=False):
            self.dtype, self.scale = dtype, scale

    class ConvertImageDtype:
        def __init__(self, dtype=torch.float32):
            self.dtype = dtype

    class Normalize:
        def __init__(self, mean, std, inplace=False):
            self.mean, self.std, self.inplace = list(mean), list(std), inplace

    class ColorJitter:
        def __init__(self, brightness=None, contrast=None, saturation=None, hue=None):
            off = lambda v, **kw: None if v is None else _color_range(v, **kw)
            self.brightness, self.contrast, self.saturation = off(brightness), off(contrast), off(saturation)
            self.hue = off(hue, center=0.0, bound=(-0.5, 0.5), clip_first_on_zero=False)

    class RandomGrayscale:
        def __init__(self, p=0.1):
            self.p = p

    class GaussianBlur:
        def __init__(self, kernel_size, sigma=(0.1, 2.0)):
            self.kernel_size = _setup_size(kernel_size)
            self.sigma = [float(sigma), float(sigma)] if isinstance(sigma, (int, float)) else [float(sigma[0]), float(sigma[-1])]

    class TrivialAugmentWide:
        def __init__(self, num_magnitude_bins=31, interpolation=I.NEAREST, fill=None):
            self.num_magnitude_bins, self.interpolation, self.fill = num_magnitude_bins, interpolation, _policy_fill(fill)

    class RandAugment:
        def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation=I.NEAREST, fill=None):
            self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins
            self.interpolation, self.fill = interpolation, _policy_fill(fill)

    class AutoAugment:
        def __init__(self, policy=AutoAugmentPolicy.IMAGENET, interpolation=I.NEAREST, fill=None):
            self.policy, self.interpolation, self.fill = policy, interpolation, _policy_fill(fill)

    class RandomErasing:
        def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0.0, inplace=False):
            self.p, self.scale, self.ratio, self.inplace = p, scale, ratio, inplace
            if isinstance(value, (int, float)):
                self.value = [float(value)]
            elif isinstance(value, str):
                if value != "random":
                    raise ValueError("If value is str, it should be 'random'")
                self.value = None
            else:
                self.value = [float(v) for v in value]

    class Lambda:
        def __init__(self, lambd):
            self.lambd = lambd


class v1:
    """torchvision.transforms' (v1) classes where they keep arguments otherwise than v2's."""

    Compose = v2.Compose
    RandomResizedCrop = v2.RandomResizedCrop
    RandomHorizontalFlip = v2.RandomHorizontalFlip
    CenterCrop = v2.CenterCrop
    PILToTensor = v2.PILToTensor
    ConvertImageDtype = v2.ConvertImageDtype

    class RandomCrop:
        __module__ = "torchvision.transforms.transforms"

        def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
            self.size, self.padding, self.pad_if_needed = _setup_size(size), padding, pad_if_needed
            self.fill, self.padding_mode = fill, padding_mode
    RandomRotation = v2.RandomRotation
    RandomHorizontalFlip = v2.RandomHorizontalFlip
    PILToTensor = v2.PILToTensor
    ConvertImageDtype = v2.ConvertImageDtype

    class Resize:
        def __init__(self, size, interpolation=I.BILINEAR, max_size=None, antialias=True):
            self.size, self.interpolation, self.max_size, self.antialias = size, interpolation, max_size, antialias

    class ToTensor:
        pass

    class Normalize:
        def __init__(self, mean, std, inplace=False):
            self.mean, self.std, self.inplace = mean, std, inplace

    class ColorJitter:
        def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
            self.brightness = _color_range(brightness, as_tuple=False)
            self.contrast = _color_range(contrast, as_tuple=False)
            self.saturation = _color_range(saturation, as_tuple=False)
            self.hue = _color_range(hue, center=0.0, clip_first_on_zero=False, as_tuple=False)

    class TrivialAugmentWide:
        def __init__(self, num_magnitude_bins=31, interpolation=I.NEAREST, fill=None):
            self.num_magnitude_bins, self.interpolation, self.fill = num_magnitude_bins, interpolation, fill

    class RandomErasing:
        def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
            self.p, self.scale, self.ratio, self.value, self.inplace = p, scale, ratio, value, inplace


class timm:
    """timm.data's classes as create_transform and rand_augment_transform build them."""

    RAND = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
            "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
    INCREASING = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
                  "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                  "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
    # IMAGENET_DEFAULT_MEAN as create_transform computes img_mean: round(255 * m).
    IMG_MEAN = (124, 116, 104)

    class AugmentOp:
        def __init__(self, name, prob=0.5, magnitude=10, hparams=None):
            hparams = dict(hparams or {})
            self.name, self.prob, self.magnitude, self.hparams = name, prob, magnitude, hparams
            self.kwargs = dict(fillcolor=hparams.get("img_mean", (128, 128, 128)),
                               resample=hparams.get("interpolation", (Resampling.BILINEAR, Resampling.BICUBIC)))

    class RandAugment:
        def __init__(self, ops, num_layers=2, choice_weights=None):
            self.ops, self.num_layers, self.choice_weights = ops, num_layers, choice_weights

    @staticmethod
    def rand_augment(names, magnitude=9, num_layers=2, prob=0.5, hparams=None, choice_weights=None):
        """rand_augment_transform's result: one AugmentOp per name, all alike."""
        return timm.RandAugment([timm.AugmentOp(n, prob, magnitude, hparams) for n in names], num_layers, choice_weights)

    class RandomResizedCropAndInterpolation:
        def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation="random"):
            self.size = _setup_size(size)
            self.scale, self.ratio = scale, ratio
            self.interpolation = (I.BILINEAR, I.BICUBIC) if interpolation == "random" else I(interpolation)

    class MaybeToTensor:
        pass

    class Normalize:  # create_transform's: mean and std as float32 tensors
        def __init__(self, mean, std):
            self.mean, self.std = np.asarray(mean, dtype=np.float32), np.asarray(std, dtype=np.float32)

    class RandomErasing:
        def __init__(self, probability=0.5, min_area=0.02, max_area=1 / 3, min_aspect=0.3, max_aspect=None,
                     mode="const", min_count=1, max_count=None, num_splits=0):
            self.probability, self.min_area, self.max_area = probability, min_area, max_area
            max_aspect = max_aspect or 1 / min_aspect
            self.log_aspect_ratio = (math.log(min_aspect), math.log(max_aspect))
            self.min_count, self.max_count = min_count, max_count or min_count
            self.num_splits, self.mode = num_splits, mode.lower()
