"""``prepfs.recipe(transform)``: a torchvision (v2 or v1) ``Compose``, or timm's
``create_transform``, as the YAML of a prepfs
recipe (its ``augment:`` list and ``output:``), for the ops the mount serves.

The transform's objects are read by class name and attributes (duck typing): torchvision is
not imported, so this works wherever the transform was built, and the YAML is the mount's to
validate. An op the mount cannot serve raises :class:`UnsupportedOp`, naming it: the user keeps
that op, and every op after it, in the DataLoader.
"""

import math
import numbers
from typing import Any, Callable, List, Optional, Sequence, Tuple

__all__ = ["recipe", "UnsupportedOp"]


class UnsupportedOp(ValueError):
    """An op of the transform the mount cannot serve.

    ``op`` is its class name (with the setting refused, where one is), ``index`` its place in
    the ``Compose``, and ``served`` the YAML of the ops before it, which the mount can serve
    (``None`` when those end in no fixed size)."""

    def __init__(self, op: str, index: int, why: str, served: Optional[str]):
        self.op, self.index, self.served = op, index, served
        super().__init__(
            f"prepfs cannot serve {op} (op {index} of the transform): {why}. Keep {op} and every op "
            f"after it in your DataLoader's transform, and move only the ops before it to the mount "
            f"(prepfs.recipe(Compose(transforms[:{index}])))"
        )


def _name(op: Any) -> str:
    return type(op).__name__


def _interpolation(op: Any, default: str = "bilinear") -> str:
    mode = getattr(op, "interpolation", default)
    if isinstance(mode, (list, tuple)):
        # timm's RandomResizedCropAndInterpolation(interpolation="random"): one of these per sample.
        names = sorted(_mode_name(m) for m in mode)
        return "random" if names == ["bicubic", "bilinear"] else "+".join(names)
    return _mode_name(mode)


def _warp(op: Any, args: dict) -> dict:
    """A torchvision policy's arguments with its `interpolation` where it is not the default
    (nearest): bilinear, as torchvision's reference recipe passes it."""
    if _interpolation(op, "nearest") == "bilinear":
        args["interpolation"] = "bilinear"
    return args


def _mode_name(mode: Any) -> str:
    mode = getattr(mode, "value", mode)  # torchvision's InterpolationMode, PIL's Resampling
    mode = {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(mode, mode)  # PIL.Image's filters
    return str(mode).lower()


def _range(value: Any) -> Optional[List[float]]:
    """ColorJitter's factor as torchvision keeps it: None (off) or (low, high)."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return None if value == 0 else [float(value), float(value)]
    return _pair(value)


def _is_zero_fill(fill: Any) -> bool:
    """Whether a policy's fill, in any form torchvision keeps it, is 0 in every channel: None
    (torchvision's default, 0), a number, a sequence of one per channel (v1's ``[0, 0, 0]``),
    or v2's ``{type: fill}`` (``{"others": [0.0, 0.0, 0.0]}``, or a defaultdict whose default
    is the fill) holding any of these."""
    if fill is None:
        return True
    if isinstance(fill, str):
        return False
    if isinstance(fill, dict):
        default = getattr(fill, "default_factory", None)
        if default is not None and not _is_zero_fill(default()):
            return False
        return all(_is_zero_fill(v) for v in fill.values())
    if isinstance(fill, (list, tuple)):
        return all(_is_zero_fill(f) for f in fill)
    try:
        return bool(fill == 0)
    except (TypeError, ValueError):  # an object that is no number (an array compares per element)
        return False


def _fill_is_zero(op: Any) -> bool:
    return _is_zero_fill(getattr(op, "fill", None))


# The ops applied to the pixels after the geometry (the mount runs them on the small image).
_PIXEL_OPS = ("ColorJitter", "RandomGrayscale", "GaussianBlur", "RandomRotation", "TrivialAugmentWide", "RandAugment", "AutoAugment")


def _size(value: Any, op: str) -> List[int]:
    """torchvision's size: an int, or a sequence of one int (a side) or two (h, w)."""
    if isinstance(value, int):
        return [value, value]
    if isinstance(value, (list, tuple)) and len(value) in (1, 2) and all(isinstance(v, int) for v in value):
        return [value[0], value[0]] if len(value) == 1 else [value[0], value[1]]
    raise ValueError(f"{op}: size {value!r} is not an int or (h, w)")


_PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


def _is_v2(op: Any) -> bool:
    """Whether ``op`` is (or derives from) a torchvision.transforms.v2 class."""
    return any(c.__module__.startswith("torchvision.transforms.v2") for c in type(op).__mro__)


def _random_crop(op: Any, refuse: Callable[[str, str], Exception]) -> dict:
    """``RandomCrop``'s arguments: ``size``, and where it pads, ``padding`` as the mount's
    [left, top, right, bottom], ``pad_if_needed``, ``fill`` and ``padding_mode`` (each written
    only where it is not torchvision's default).

    v2 keeps ``padding`` parsed as [left, right, top, bottom] (None for 0), v1 as given: n, or
    [n], [left/right, top/bottom], [left, top, right, bottom]."""
    args: dict = {"size": _size(op.size, "RandomCrop")}
    padding = getattr(op, "padding", None)
    pad_if_needed = bool(getattr(op, "pad_if_needed", False))
    sides = [0, 0, 0, 0]
    if padding is not None:
        given = [padding] if isinstance(padding, numbers.Number) else list(padding)
        if not all(isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in given) or len(given) not in (1, 2, 4):
            raise refuse(f"padding={padding!r}", "the mount's padding is n, [left/right, top/bottom] or [left, top, right, bottom], whole numbers")
        if any(p < 0 for p in given):
            raise refuse(f"padding={padding!r}", "the mount does not pad by a negative amount (a crop)")
        if len(given) == 1:
            sides = given * 4
        elif len(given) == 2:
            sides = [given[0], given[1], given[0], given[1]]
        elif _is_v2(op):
            left, right, top, bottom = given
            sides = [left, top, right, bottom]
        else:
            sides = given
        sides = [int(p) for p in sides]
    if sides == [0, 0, 0, 0] and not pad_if_needed:
        return args
    mode = str(getattr(op, "padding_mode", "constant"))
    if mode not in _PADDING_MODES:
        raise refuse(f"padding_mode={mode!r}", "the mount pads constant, edge, reflect or symmetric")
    args["padding"] = sides
    if pad_if_needed:
        args["pad_if_needed"] = True
    if mode == "constant":  # the fill is read in constant mode only, as torchvision does
        fill = _crop_fill(getattr(op, "fill", 0))
        if fill is None:
            raise refuse(f"fill={getattr(op, 'fill', None)!r}", "the mount fills with a whole number from 0 to 255, or one per channel (RGB)")
        if fill != [0, 0, 0]:
            args["fill"] = fill
    else:
        args["padding_mode"] = mode
    return args


def _crop_fill(fill: Any) -> Optional[List[int]]:
    """RandomCrop's fill as the mount's [r, g, b] of whole numbers 0-255, or None where it is no
    such value: None (0), a number, one per channel (or one for all), or v2's ``{type: fill}``
    (an image's entry, else ``"others"``)."""
    if fill is None:
        return [0, 0, 0]
    if isinstance(fill, dict):
        image = [v for k, v in fill.items() if "Image" in str(k)]
        default = getattr(fill, "default_factory", None)
        fill = image[0] if image else fill.get("others", default() if default is not None else None)
        return _crop_fill(fill)
    values = list(fill) if isinstance(fill, (list, tuple)) else [fill]
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        return None
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            return None
        if isinstance(v, bool) or not f.is_integer() or not 0 <= f <= 255:
            return None
        out.append(int(f))
    return out


def _pair(value: Any) -> List[float]:
    return [float(value[0]), float(value[1])]


def _yaml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return _yaml_float(v)
    return str(v)


def _yaml_float(v: float) -> str:
    """``v`` as a YAML float that YAML 1.2 (the mount's parser) and YAML 1.1 (PyYAML's) both read
    back as this number: the shortest repr, with a ``.0`` in a mantissa that has no point
    (``1.0e-05``, not ``1e-05``, which YAML 1.1 reads as a string) and YAML's spelling of
    infinity and NaN."""
    if math.isnan(v):
        return ".nan"
    if math.isinf(v):
        return ".inf" if v > 0 else "-.inf"
    text = repr(v)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


def _yaml(augment: Sequence[Tuple[str, dict]], output: Optional[dict], name: Optional[str]) -> str:
    def mapping(d: dict) -> str:
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in d.items()) + "}"

    lines = ["augment:"] + [f"  - {op}: {mapping(args)}" for op, args in augment]
    if output is not None:
        lines.append(f"output: {mapping(output)}")
    if name is None:
        return "\n".join(lines) + "\n"
    return "recipes:\n  " + name + ":\n" + "".join(f"    {line}\n" for line in lines)


def _is_float32(dtype: Any) -> bool:
    if isinstance(dtype, dict):  # v2's ToDtype({tv_tensors.Image: torch.float32, ...})
        return any(_is_float32(d) for k, d in dtype.items() if "Image" in str(k))
    return str(dtype) in ("torch.float32", "torch.float", "float32")


def _fixed_size(augment: Sequence[Tuple[str, dict]]) -> bool:
    size = False
    for op, args in augment:
        if op in ("random_resized_crop", "center_crop", "random_crop"):
            size = True
        elif op == "resize":
            size = isinstance(args["size"], list)
    return size


# timm's RandAugment op lists (timm/data/auto_augment.py): the default and `inc1`'s.
_TIMM_RAND = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
              "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
_TIMM_RAND_INCREASING = [n if n not in ("Posterize", "Solarize", "Color", "Contrast", "Brightness", "Sharpness")
                         else n + "Increasing" for n in _TIMM_RAND]


def _is_timm_rand_augment(op: Any) -> bool:
    """timm's ``RandAugment`` (``rand_augment_transform``) rather than torchvision's: a list of
    ``AugmentOp``s and ``num_layers`` where torchvision's has ``num_ops``."""
    return hasattr(op, "ops") and hasattr(op, "num_layers") and not hasattr(op, "num_ops")


def _timm_rand_augment(op: Any, refuse: Any) -> dict:
    """timm's RandAugment as ``rand_augment: {timm: CONFIG, interpolation, fill}``; ``refuse(why)``
    builds the error for what the mount does not serve."""
    if getattr(op, "choice_weights", None) is not None:
        raise refuse("the mount chooses timm's ops uniformly (no weighted transform set)")
    ops = list(op.ops)
    names = [getattr(o, "name", None) for o in ops]
    if names == _TIMM_RAND:
        increasing = False
    elif names == _TIMM_RAND_INCREASING:
        increasing = True
    else:
        raise refuse("the mount serves timm's default op list and inc1's, not " + ", ".join(map(str, names)))
    first = ops[0]
    hp = dict(getattr(first, "hparams", {}) or {})
    def setting(o: Any) -> tuple:
        resample = o.kwargs.get("resample")
        modes = tuple(_mode_name(r) for r in resample) if isinstance(resample, (list, tuple)) else _mode_name(resample)
        hp = o.hparams or {}
        return (o.prob, o.magnitude, hp.get("magnitude_std", 0), hp.get("magnitude_max"), o.kwargs.get("fillcolor"), modes)

    if any(setting(o) != setting(first) for o in ops[1:]):
        raise refuse("its ops differ in probability, magnitude, noise, fill or interpolation")
    if hp.get("translate_pct", 0.45) != 0.45:
        raise refuse(f"the mount translates by timm's default 0.45 of a side, not {hp['translate_pct']}")
    magnitude = first.magnitude
    if magnitude != int(magnitude) or magnitude < 0:
        raise refuse(f"the mount's magnitude is a whole number, not {magnitude}")
    config = f"rand-m{int(magnitude)}-n{int(op.num_layers)}-p{float(first.prob)}"
    mstd = hp.get("magnitude_std", 0)
    if mstd == float("inf"):
        config += "-mstd1000"
    elif mstd:
        config += f"-mstd{float(mstd)}"
    if hp.get("magnitude_max"):
        config += f"-mmax{int(hp['magnitude_max'])}"
    if increasing:
        config += "-inc1"
    resample = first.kwargs.get("resample")
    if isinstance(resample, (list, tuple)):
        modes = sorted(_mode_name(r) for r in resample)
        if modes != ["bicubic", "bilinear"]:
            raise refuse(f"the mount draws bilinear or bicubic per op, not one of {modes}")
        interpolation = "random"
    else:
        interpolation = _mode_name(resample)
        if interpolation not in ("bilinear", "bicubic"):
            raise refuse(f"the mount's warps are bilinear, bicubic or random, not {interpolation}")
    fill = first.kwargs.get("fillcolor", (128, 128, 128))
    fill = [int(fill)] * 3 if isinstance(fill, (int, float)) else [int(f) for f in fill]
    if len(fill) != 3:
        raise refuse(f"the mount fills with one colour of three channels, not {fill}")
    return {"timm": config, "interpolation": interpolation, "fill": fill}


def _timm_random_erasing(op: Any, refuse: Any) -> dict:
    """timm's ``RandomErasing`` (timm.data.random_erasing) as the mount's ``random_erasing``:
    its draw is torchvision's (area share, log aspect ratio, 10 tries, a uniform corner), its
    ``const`` mode erases to 0 and ``pixel`` to a normal draw per pixel (torchvision's
    ``value="random"``); ``refuse(why)`` otherwise."""
    mode = getattr(op, "mode", "const")
    values = {"const": 0.0, "pixel": "random"}
    if mode not in values:
        raise refuse(f"the mount erases to 0 (mode='const') or a draw per pixel (mode='pixel'), not mode={mode!r}")
    if int(getattr(op, "max_count", 1) or 1) != 1 or int(getattr(op, "min_count", 1)) != 1:
        raise refuse("the mount erases one region per sample (max_count=1)")
    if int(getattr(op, "num_splits", 0) or 0) != 0:
        raise refuse("the mount erases every sample alike (num_splits=0)")
    low, high = (math.exp(float(r)) for r in op.log_aspect_ratio)
    return {"p": float(op.probability), "scale": [float(op.min_area), float(op.max_area)], "ratio": [low, high], "value": values[mode]}


def _ops_of(transform: Any) -> List[Any]:
    """The ops of a transform: a ``Compose``'s list, the list or one op given, or, for an object
    holding its ``Compose`` as ``transforms`` (torchvision's reference ``presets.py``:
    ``ClassificationPresetTrain`` and ``ClassificationPresetEval``), that ``Compose``'s list."""
    held = getattr(transform, "transforms", None)
    while held is not None and not isinstance(held, (list, tuple)) and hasattr(held, "transforms"):
        held = held.transforms
    if held is not None:
        return list(held)
    return list(transform) if isinstance(transform, (list, tuple)) else [transform]


def recipes(**named: Any) -> str:
    """One ``recipes:`` mapping of several named transforms, e.g. a training and a validation
    view of one mount: ``prepfs.recipes(train=..., val=...)`` (each read as :func:`recipe` reads
    it; the names become the views ``MNT/<name>/`` and ``MNT/jobs/<job>/<name>/``)."""
    if not named:
        raise ValueError("prepfs.recipes needs at least one name=transform")
    return "recipes:\n" + "".join(recipe(t, name).split("\n", 1)[1] for name, t in named.items())


def recipe(transform: Any, name: Optional[str] = None) -> str:
    """The YAML of a prepfs recipe doing what ``transform`` does per sample.

    ``transform``: a torchvision ``Compose`` (v2 or v1), timm's ``create_transform(...)``, an
    object holding its ``Compose`` as ``transforms`` (torchvision's reference presets), a list
    of transforms, or one transform.
    Served: ``RandomResizedCrop`` (size, scale, ratio; bilinear or bicubic, antialiased; timm's
    ``RandomResizedCropAndInterpolation`` too, its ``random`` interpolation included),
    ``RandomHorizontalFlip`` (p), ``Resize`` (an int: the shorter side, or (h, w); bilinear or
    bicubic, antialiased, no ``max_size``), ``CenterCrop``, ``RandomCrop`` (with ``padding``, ``pad_if_needed``, ``fill`` and
    ``padding_mode``, v2's or v1's); after them
    the pixel ops
    ``ColorJitter``, ``RandomGrayscale``, ``GaussianBlur``, ``RandomRotation`` (nearest or bilinear,
    fill 0, not expanded), ``TrivialAugmentWide``,
    ``RandAugment``, ``AutoAugment`` (imagenet; nearest or bilinear, fill 0), timm's ``RandAugment`` (from
    ``rand_augment_transform`` or ``create_transform``: its default or ``inc1`` op list, as
    ``rand_augment: {timm: "rand-m9-n2-p0.5-mstd0.5-inc1", ...}``); ``RandomErasing`` last (a
    number, one per channel, or ``"random"`` as its value; after ``Normalize`` on float output,
    as the reference recipes place it); and the conversion to float with ``Normalize``
    (``ToTensor``, or ``ToImage``/``PILToTensor`` then ``ToDtype(torch.float32, scale=True)`` or
    ``ConvertImageDtype(torch.float32)``, or timm's ``MaybeToTensor``): the output is then ``npy``
    float32 CHW, normalized. timm's ``RandomErasing`` maps where torchvision's draw is its own
    (``mode`` const or pixel, one region).
    Without a conversion to float the output is the mount's (``output:`` left out).

    Returns ``augment:`` and ``output:`` (which are top-level keys of a config too, for
    ``augmented/``), or with ``name`` a ``recipes:`` mapping holding them under that name.
    Raises :class:`UnsupportedOp` for an op the mount cannot serve, and ``ValueError`` when the
    ops end in no fixed size (every file of a view has one size, known before it is read).
    """
    ops = _ops_of(transform)
    augment: List[Tuple[str, dict]] = []
    to_float = False  # a conversion to float (0-1) has been met
    pending_tensor: Optional[int] = None  # a ToImage/PILToTensor not yet followed by a float conversion
    normalized = False

    def refuse(i: int, op: str, why: str) -> UnsupportedOp:
        served = _yaml(augment, None, name) if _fixed_size(augment) else None
        return UnsupportedOp(op, i, why, served)

    pixel_op: Optional[str] = None  # a pixel op met: the geometry is over
    erased = False
    for i, op in enumerate(ops):
        kind = _name(op)
        if kind == "ToPureTensor":
            continue  # v2's unwrapping of tv_tensors (the reference recipe's last step): the same values
        if erased and kind not in ("RandomHorizontalFlip", "Identity"):
            raise refuse(i, kind, "the mount serves nothing but a flip after RandomErasing")
        if to_float and kind not in ("Normalize", "ToDtype", "ConvertImageDtype", "RandomErasing", "Identity"):
            raise refuse(i, kind, "the mount serves no op after the conversion to float but Normalize and RandomErasing")
        if normalized and kind not in ("RandomErasing", "Identity"):
            raise refuse(i, kind, "the mount serves no op after Normalize but RandomErasing")
        if pixel_op is not None and kind in ("RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop"):
            raise refuse(i, kind, f"the mount resizes and crops before the pixel ops ({pixel_op} comes first here)")
        if kind == "RandomResizedCropAndInterpolation":
            kind = "RandomResizedCrop"  # timm's: torchvision's draw, and "random" interpolation
        if kind == "MaybeToTensor":
            kind = "ToTensor"  # timm's: ToTensor on a PIL image
        if kind in ("RandomResizedCrop", "Resize"):
            if _interpolation(op) not in ("bilinear", "bicubic", "random") or (_interpolation(op) == "random" and kind == "Resize"):
                raise refuse(i, f"{kind}(interpolation={_interpolation(op)})", "the mount's resizes are bilinear or bicubic (RandomResizedCrop's also random)")
            if getattr(op, "antialias", True) is False:
                raise refuse(i, f"{kind}(antialias=False)", "the mount's resizes are antialiased")
        timm_ra = kind == "RandAugment" and _is_timm_rand_augment(op)
        if kind in ("TrivialAugmentWide", "RandAugment", "AutoAugment") and not timm_ra:
            if _interpolation(op, "nearest") not in ("nearest", "bilinear"):
                raise refuse(i, f"{kind}(interpolation={_interpolation(op, 'nearest')})", "the mount's policies warp nearest or bilinear")
            if not _fill_is_zero(op):
                raise refuse(i, f"{kind}(fill={op.fill})", "the mount's policies fill with 0")
        if kind in _PIXEL_OPS:
            pixel_op = pixel_op or kind
        if kind == "RandomResizedCrop":
            args = {"size": _size(op.size, kind), "scale": _pair(op.scale), "ratio": _pair(op.ratio)}
            if _interpolation(op) != "bilinear":
                args["interpolation"] = _interpolation(op)
            augment.append(("random_resized_crop", args))
        elif kind == "RandomHorizontalFlip":
            augment.append(("random_horizontal_flip", {"p": float(getattr(op, "p", 0.5))}))
        elif kind == "Resize":
            if getattr(op, "max_size", None) is not None:
                raise refuse(i, f"Resize(max_size={op.max_size})", "the mount's Resize has no max_size")
            size = op.size
            if size is None:
                raise refuse(i, "Resize(size=None)", "the mount's Resize needs a size")
            one = isinstance(size, int) or (isinstance(size, (list, tuple)) and len(size) == 1)
            side = size if isinstance(size, int) else size[0]
            args = {"size": side if one else _size(size, kind)}
            if _interpolation(op) != "bilinear":
                args["interpolation"] = _interpolation(op)
            augment.append(("resize", args))
        elif kind == "CenterCrop":
            augment.append(("center_crop", {"size": _size(op.size, kind)}))
        elif kind == "RandomCrop":
            augment.append(("random_crop", _random_crop(op, lambda setting, why: refuse(i, f"RandomCrop({setting})", why))))
        elif kind in ("PILToTensor", "ToImage", "ToImageTensor"):
            pending_tensor = i if pending_tensor is None else pending_tensor
        elif kind == "ToTensor":
            to_float = True
        elif kind == "ToDtype" or kind == "ConvertImageDtype":
            if not _is_float32(getattr(op, "dtype", None)):
                raise refuse(i, f"{kind}(dtype={getattr(op, 'dtype', None)})", "the mount serves uint8 or float32")
            if kind == "ToDtype" and not getattr(op, "scale", False):
                raise refuse(i, "ToDtype(scale=False)", "the mount's float32 is scaled to 0-1 (scale=True)")
            if pending_tensor is None and not to_float:
                raise refuse(i, kind, "it needs ToImage or PILToTensor before it")
            to_float, pending_tensor = True, None
        elif kind == "Normalize":
            if not to_float:
                raise refuse(i, kind, "it needs a conversion to float32 (ToTensor, or ToDtype(torch.float32, scale=True)) before it")
            # Shortest as float32 (timm keeps them as float32 tensors: 0.48500001430511475).
            mean, std = [float(f"{float(m):.7g}") for m in op.mean], [float(f"{float(s):.7g}") for s in op.std]
            if len(mean) != 3 or len(std) != 3:
                raise refuse(i, kind, "the mount normalizes three channels (RGB)")
            augment.append(("normalize", {"mean": mean, "std": std}))
            normalized = True
        elif kind == "ColorJitter":
            args = {k: r for k in ("brightness", "contrast", "saturation", "hue") if (r := _range(getattr(op, k, None))) is not None}
            augment.append(("color_jitter", args))
        elif kind == "RandomGrayscale":
            augment.append(("random_grayscale", {"p": float(getattr(op, "p", 0.1))}))
        elif kind == "GaussianBlur":
            kernel = op.kernel_size
            kernel = [kernel, kernel] if isinstance(kernel, int) else [int(k) for k in kernel]
            sigma = op.sigma
            sigma = [float(sigma), float(sigma)] if isinstance(sigma, (int, float)) else _pair(sigma)
            augment.append(("gaussian_blur", {"kernel_size": kernel, "sigma": sigma}))
        elif kind == "RandomRotation":
            if getattr(op, "expand", False):
                raise refuse(i, "RandomRotation(expand=True)", "the mount's rotations keep the image's size")
            if getattr(op, "center", None) is not None:
                raise refuse(i, f"RandomRotation(center={op.center})", "the mount turns about the image's centre")
            if not _fill_is_zero(op):
                raise refuse(i, f"RandomRotation(fill={op.fill})", "the mount's rotations fill with 0")
            if _interpolation(op, "nearest") not in ("nearest", "bilinear"):
                raise refuse(i, f"RandomRotation(interpolation={_interpolation(op, 'nearest')})", "the mount's rotations warp nearest or bilinear")
            augment.append(("random_rotation", _warp(op, {"degrees": _pair(op.degrees)})))
        elif kind == "TrivialAugmentWide":
            augment.append(("trivial_augment_wide", _warp(op, {"num_magnitude_bins": int(getattr(op, "num_magnitude_bins", 31))})))
        elif timm_ra:
            augment.append(("rand_augment", _timm_rand_augment(op, lambda why: refuse(i, "RandAugment (timm's)", why))))
        elif kind == "RandAugment":
            augment.append(("rand_augment", _warp(op, {"num_ops": int(op.num_ops), "magnitude": int(op.magnitude),
                                                       "num_magnitude_bins": int(getattr(op, "num_magnitude_bins", 31))})))
        elif kind == "AutoAugment":
            policy = getattr(op, "policy", "imagenet")
            policy = str(getattr(policy, "value", policy)).lower()
            if policy != "imagenet":
                raise refuse(i, f"AutoAugment(policy={policy})", "the mount's AutoAugment policy is imagenet")
            augment.append(("auto_augment", _warp(op, {"policy": "imagenet"})))
        elif kind == "RandomErasing" and hasattr(op, "probability"):
            augment.append(("random_erasing", _timm_random_erasing(op, lambda why: refuse(i, "RandomErasing (timm's)", why))))
            erased = True
        elif kind == "RandomErasing":
            value = getattr(op, "value", 0)
            if value is None or value == "random":  # v2 keeps value="random" as None, v1 as the string
                value = "random"
            elif isinstance(value, str):
                raise refuse(i, f"RandomErasing(value={value!r})", "the mount erases to a number, one per channel, or random")
            else:
                value = float(value) if isinstance(value, (int, float)) else [float(v) for v in value]
            augment.append(("random_erasing", {"p": float(op.p), "scale": _pair(op.scale), "ratio": _pair(op.ratio), "value": value}))
            erased = True
        elif kind == "Identity":
            pass
        else:
            raise refuse(i, kind, "it is not one of the ops the mount serves")
    if pending_tensor is not None:
        # A uint8 tensor is the DataLoader's: the mount serves images PIL decodes.
        raise refuse(pending_tensor, _name(ops[pending_tensor]), "the mount serves a uint8 tensor only as an image file (the DataLoader makes the tensor)")
    if not _fixed_size(augment):
        raise ValueError(
            "prepfs serves one size per view: the transform must end in RandomResizedCrop, CenterCrop "
            "or Resize to (h, w) before any conversion"
        )
    output = {"format": "npy", "dtype": "float32"} if to_float else None
    return _yaml(augment, output, name)
