"""prepfs.recipe (python/prepfs/_recipe.py, this tree's) without a mount and without torch: a
torchvision (v2 or v1) or timm transform, built from the stand-ins of standins.py (named and
keeping their arguments as the real classes do), to the YAML of a prepfs recipe.

Each supported op maps to the mount's op with its parameters carried over exactly (the YAML is
parsed back and compared with the values the transform was built with); each op the mount cannot
serve is refused with an UnsupportedOp naming it, its place, and what the mount could serve
before it. test_recipe_check.py hands the same YAML to `prepfs check`.
"""

import pytest

from cases import SUPPORTED, expected_recipe
from conftest import load_recipe_module
from standins import MEAN, STD, I, AutoAugmentPolicy, timm, torch, tv_tensors, v1, v2

recipe_module = load_recipe_module()
recipe, UnsupportedOp = recipe_module.recipe, recipe_module.UnsupportedOp

def assert_same_values(got, want, where="recipe"):
    """`got` (parsed YAML) is `want`: the same keys in the same order, numbers equal exactly
    (a float's printed decimal parses back to the same float), pytest.approx where `want` says."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: {got!r} != {want!r}"
        for k in want:
            assert_same_values(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same_values(g, w, f"{where}[{k}]")
    elif isinstance(want, float) or type(want).__name__.startswith("Approx"):
        assert isinstance(got, (int, float)) and not isinstance(got, bool), f"{where}: {got!r} is not a number"
        assert got == want, f"{where}: {got!r} != {want!r}"
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("case", sorted(SUPPORTED))
def test_each_supported_op_maps_to_the_mounts_op_with_its_parameters_carried_over_and_the_yaml_parses_back(case):
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the printed recipe back (make deps installs it with moto[server])")
    transform, augment, output = SUPPORTED[case]
    text = recipe(transform)
    assert_same_values(yaml.safe_load(text), expected_recipe(augment, output))
    # Named, the same recipe under `recipes: NAME:`.
    assert_same_values(yaml.safe_load(recipe(transform, name="r1")), {"recipes": {"r1": expected_recipe(augment, output)}})


def test_the_readmes_worked_example_prints_the_exact_yaml_the_readme_shows():
    # torchvision's reference recipe (docs/recipes.md, "From the training script's transform").
    train = v2.Compose([v2.RandomResizedCrop(176, interpolation=I.BILINEAR, antialias=True), v2.RandomHorizontalFlip(0.5),
                        v2.TrivialAugmentWide(interpolation=I.BILINEAR), v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
                        v2.Normalize(MEAN, STD), v2.RandomErasing(0.1), v2.ToPureTensor()])
    assert recipe(train, name="ta") == (
        "recipes:\n"
        "  ta:\n"
        "    augment:\n"
        "      - random_resized_crop: {size: [176, 176], scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333]}\n"
        "      - random_horizontal_flip: {p: 0.5}\n"
        "      - trivial_augment_wide: {num_magnitude_bins: 31, interpolation: bilinear}\n"
        "      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n"
        "      - random_erasing: {p: 0.1, scale: [0.02, 0.33], ratio: [0.3, 3.3], value: [0.0]}\n"
        "    output: {format: npy, dtype: float32}\n"
    )


def test_without_a_name_the_recipe_is_top_level_augment_and_output_keys_for_a_config():
    text = recipe(v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor()]))
    assert text == "augment:\n  - resize: {size: 40}\n  - center_crop: {size: [32, 32]}\noutput: {format: npy, dtype: float32}\n"


def test_a_list_of_transforms_and_a_single_transform_are_read_as_a_compose_is():
    ops = [v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()]
    assert recipe(ops) == recipe(v2.Compose(ops)) == recipe(tuple(ops))
    assert recipe(v2.CenterCrop(16)) == "augment:\n  - center_crop: {size: [16, 16]}\n"


class ReferencePreset:
    """As torchvision's references/classification/presets.py holds a preset: its Compose as
    ``transforms``, called as a transform."""

    def __init__(self, ops):
        self.transforms = v1.Compose(ops)

    def __call__(self, img):
        return img


def test_a_preset_holding_its_compose_as_transforms_is_read_as_that_compose():
    # ClassificationPresetEval(crop_size=224, resize_size=256) as presets.py builds it (v1, PIL).
    ops = [v1.Resize(256, interpolation=I.BILINEAR, antialias=True), v1.CenterCrop(224), v1.PILToTensor(),
           v1.ConvertImageDtype(torch.float), v1.Normalize(MEAN, STD)]
    assert recipe(ReferencePreset(ops)) == recipe(v1.Compose(ops))
    assert recipe(ReferencePreset(ops), name="val") == recipe(v1.Compose(ops), name="val")


def test_recipes_of_several_names_is_one_mapping_holding_each_names_recipe_in_order():
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the printed recipes back (make deps installs it with moto[server])")
    train = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip(), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    val = v1.Compose([v1.Resize(28), v1.CenterCrop(24), v1.ToTensor()])
    both = yaml.safe_load(recipe_module.recipes(train=train, val=val))
    assert list(both) == ["recipes"] and list(both["recipes"]) == ["train", "val"]
    assert both["recipes"]["train"] == yaml.safe_load(recipe(train, name="train"))["recipes"]["train"]
    assert both["recipes"]["val"] == yaml.safe_load(recipe(val, name="val"))["recipes"]["val"]
    with pytest.raises(ValueError, match="at least one"):
        recipe_module.recipes()


def test_normalize_given_float32_tensors_writes_the_shortest_decimals_of_the_values():
    # timm's create_transform holds mean and std as float32 tensors: 0.48500001430511475, ...
    text = recipe([v2.CenterCrop(8), timm.MaybeToTensor(), timm.Normalize(MEAN, STD)])
    assert "normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}" in text


def test_without_a_conversion_to_float_the_output_is_left_to_the_mount():
    text = recipe(v2.Compose([v2.RandomResizedCrop(24), v2.ColorJitter(0.4)]))
    assert "output" not in text


# id: (the transform, the op the error names, its index in the Compose).
UNSUPPORTED = {
    "lambda": (v2.Compose([v2.Resize(40), v2.Lambda(lambda x: x), v2.CenterCrop(32)]), "Lambda", 1),
    "vertical_flip": (v2.Compose([v2.RandomResizedCrop(24), v2.RandomVerticalFlip()]), "RandomVerticalFlip", 1),
    "rotation_before_the_crop": (v2.Compose([v2.RandomRotation(10), v2.CenterCrop(24)]), "CenterCrop", 1),
    "rotation_expanded": (v2.Compose([v2.CenterCrop(24), v2.RandomRotation(10, expand=True)]), "RandomRotation(expand=True)", 1),
    "rotation_filled_grey": (v2.Compose([v2.CenterCrop(24), v2.RandomRotation(10, fill=128)]), "RandomRotation(fill=", 1),
    "random_crop_negative_padding": (v2.Compose([v2.Resize(40), v2.RandomCrop(32, padding=-4)]), "RandomCrop(padding=[-4, -4, -4, -4])", 1),
    "random_crop_three_sides": (v2.Compose([v2.Resize(40), v1.RandomCrop(32, padding=[1, 2, 3])]), "RandomCrop(padding=[1, 2, 3])", 1),
    "random_crop_fractional_fill": (v2.Compose([v2.Resize(40), v2.RandomCrop(32, padding=4, fill=0.5)]), "RandomCrop(fill=0.5)", 1),
    "random_crop_fill_over_255": (v2.Compose([v2.Resize(40), v1.RandomCrop(32, padding=4, fill=(0, 0, 256))]), "RandomCrop(fill=(0, 0, 256))", 1),
    "random_crop_padding_mode_wrap": (v2.Compose([v2.Resize(40), v1.RandomCrop(32, padding=4, padding_mode="wrap")]), "RandomCrop(padding_mode='wrap')", 1),
    "crop_nearest": (v2.Compose([v2.RandomResizedCrop(24, interpolation=I.NEAREST), v1.ToTensor()]), "RandomResizedCrop(interpolation=nearest)", 0),
    "resize_lanczos": (v2.Compose([v2.Resize(40, interpolation=I.LANCZOS), v2.CenterCrop(32)]), "Resize(interpolation=lanczos)", 0),
    "resize_random_interpolation": (
        v2.Compose([v2.Resize(40, interpolation=(I.BILINEAR, I.BICUBIC)), v2.CenterCrop(32)]), "Resize(interpolation=random)", 0),
    "crop_without_antialias": (v2.Compose([v2.RandomResizedCrop(24, antialias=False)]), "RandomResizedCrop(antialias=False)", 0),
    "resize_max_size": (v2.Compose([v2.Resize(40, max_size=64), v2.CenterCrop(32)]), "Resize(max_size=64)", 0),
    "resize_no_size": (v2.Compose([v2.CenterCrop(32), v1.Resize(None)]), "Resize(size=None)", 1),
    "to_dtype_uint8": (v2.Compose([v2.CenterCrop(32), v2.ToImage(), v2.ToDtype(torch.uint8, scale=True)]), "ToDtype(dtype=torch.uint8)", 2),
    "to_dtype_float16": (v2.Compose([v2.CenterCrop(32), v2.ToImage(), v2.ToDtype(torch.float16, scale=True)]), "ToDtype(dtype=torch.float16)", 2),
    "to_dtype_unscaled": (v2.Compose([v2.CenterCrop(32), v2.ToImage(), v2.ToDtype(torch.float32)]), "ToDtype(scale=False)", 2),
    "to_dtype_without_to_image": (v2.Compose([v2.CenterCrop(32), v2.ToDtype(torch.float32, scale=True)]), "ToDtype", 1),
    "uint8_tensor_output": (v2.Compose([v2.RandomResizedCrop(24), v2.ToImage()]), "ToImage", 1),
    "normalize_before_float": (v2.Compose([v2.CenterCrop(32), v2.Normalize(MEAN, STD)]), "Normalize", 1),
    "normalize_one_channel": (v2.Compose([v2.CenterCrop(32), v1.ToTensor(), v2.Normalize([0.5], [0.5])]), "Normalize", 2),
    "op_after_float_conversion": (v2.Compose([v2.CenterCrop(32), v1.ToTensor(), v2.ColorJitter(0.4)]), "ColorJitter", 2),
    "op_after_normalize": (
        v2.Compose([v2.CenterCrop(32), v1.ToTensor(), v2.Normalize(MEAN, STD), v2.ToDtype(torch.float32, scale=True)]), "ToDtype", 3),
    "geometry_after_a_pixel_op": (v2.Compose([v2.Resize(40), v2.ColorJitter(0.4), v2.CenterCrop(32)]), "CenterCrop", 2),
    "op_after_random_erasing": (v2.Compose([v2.RandomResizedCrop(24), v1.ToTensor(), v2.RandomErasing(), v2.Normalize(MEAN, STD)]), "Normalize", 3),
    "random_erasing_other_string": (v2.Compose([v2.RandomResizedCrop(24), v1.ToTensor(), v1.RandomErasing(value="noise")]), "RandomErasing(value='noise')", 2),
    "auto_augment_cifar10": (v2.Compose([v2.CenterCrop(32), v2.AutoAugment(AutoAugmentPolicy.CIFAR10)]), "AutoAugment(policy=cifar10)", 1),
    "policy_bicubic": (v2.Compose([v2.CenterCrop(32), v2.TrivialAugmentWide(interpolation=I.BICUBIC)]), "TrivialAugmentWide(interpolation=bicubic)", 1),
    "policy_fill_grey": (v2.Compose([v2.CenterCrop(32), v2.RandAugment(fill=128)]), "RandAugment(fill=", 1),
    "timm_weighted_choice": (
        v2.Compose([v2.CenterCrop(32), timm.rand_augment(timm.RAND, choice_weights=[1 / 15] * 15)]), "RandAugment (timm's)", 1),
    "timm_other_op_list": (v2.Compose([v2.CenterCrop(32), timm.rand_augment(["Rotate", "ShearX"])]), "RandAugment (timm's)", 1),
    "timm_fractional_magnitude": (v2.Compose([v2.CenterCrop(32), timm.rand_augment(timm.RAND, 9.5)]), "RandAugment (timm's)", 1),
    "timm_translate_pct": (
        v2.Compose([v2.CenterCrop(32), timm.rand_augment(timm.RAND, hparams={"translate_pct": 0.3})]), "RandAugment (timm's)", 1),
    "timm_erasing_rand_mode": (
        v2.Compose([v2.RandomResizedCrop(24), timm.MaybeToTensor(), timm.RandomErasing(mode="rand")]), "RandomErasing (timm's)", 2),
    "timm_erasing_several_regions": (
        v2.Compose([v2.RandomResizedCrop(24), timm.MaybeToTensor(), timm.RandomErasing(max_count=3)]), "RandomErasing (timm's)", 2),
    "timm_erasing_split": (
        v2.Compose([v2.RandomResizedCrop(24), timm.MaybeToTensor(), timm.RandomErasing(num_splits=2)]), "RandomErasing (timm's)", 2),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_an_op_the_mount_cannot_serve_is_refused_with_an_error_naming_the_op_and_its_place(case):
    transform, op, index = UNSUPPORTED[case]
    with pytest.raises(UnsupportedOp) as raised:
        recipe(transform)
    e = raised.value
    assert e.op.startswith(op) and e.index == index, (e.op, e.index)
    message = str(e)
    assert f"prepfs cannot serve {e.op} (op {index} of the transform): " in message
    assert f"Keep {e.op} and every op after it in your DataLoader's transform" in message
    assert f"prepfs.recipe(Compose(transforms[:{index}]))" in message
    assert isinstance(e, ValueError)


def test_an_unsupported_op_carries_the_yaml_of_the_ops_before_it_which_the_mount_serves():
    ops = [v2.RandomResizedCrop(24), v2.RandomHorizontalFlip(), v2.Lambda(lambda x: x), v1.ToTensor()]
    with pytest.raises(UnsupportedOp) as raised:
        recipe(v2.Compose(ops), name="ta")
    assert raised.value.served == recipe(v2.Compose(ops[:2]), name="ta")
    assert raised.value.served == "recipes:\n  ta:\n    augment:\n      - random_resized_crop: {size: [24, 24], scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333]}\n      - random_horizontal_flip: {p: 0.5}\n"


def test_an_unsupported_op_after_ops_of_no_fixed_size_carries_none_as_what_is_served():
    with pytest.raises(UnsupportedOp) as raised:
        recipe(v2.Compose([v2.Resize(40), v2.Lambda(lambda x: x), v2.CenterCrop(32)]))
    assert raised.value.served is None


@pytest.mark.parametrize(
    "transform",
    [v2.Compose([v2.Resize(40), v1.ToTensor()]), v2.Compose([v2.RandomHorizontalFlip()]), v2.Compose([])],
    ids=["resize_one_side", "flip_only", "empty"],
)
def test_a_transform_ending_in_no_fixed_size_is_refused_saying_a_view_has_one_size(transform):
    with pytest.raises(ValueError, match="prepfs serves one size per view") as raised:
        recipe(transform)
    assert not isinstance(raised.value, UnsupportedOp)


def test_a_size_that_is_no_int_or_pair_is_refused_naming_the_op():
    with pytest.raises(ValueError, match=r"CenterCrop: size \(1, 2, 3\) is not an int or \(h, w\)"):
        recipe([v1.CenterCrop((1, 2, 3))])


def test_the_same_transforms_built_by_torchvision_itself_give_the_recipes_the_stand_ins_give():
    """Where torchvision is installed (make compare-torchvision installs it), the real classes read
    as the stand-ins do: a stand-in that stores an argument otherwise than torchvision shows here."""
    tv = pytest.importorskip("torchvision.transforms.v2", reason="torchvision is not installed (make compare-torchvision installs it)")
    import torch as real_torch
    import torchvision.transforms as tv1
    from torchvision.transforms import InterpolationMode as TI

    pairs = [
        (tv.Compose([tv.RandomResizedCrop(24), tv.ToImage(), tv.ToDtype(real_torch.float32, scale=True),
                     tv.Normalize(MEAN, STD), tv.RandomErasing(0.1)]),
         SUPPORTED["random_erasing_v2_zero_after_normalize"][0], None),
        (tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ColorJitter(0.4, 0.3, 0.2, 0.1)]), SUPPORTED["color_jitter_v2"][0], None),
        (tv1.Compose([tv1.Resize(40, interpolation=TI.BICUBIC), tv1.CenterCrop((20, 28))]), SUPPORTED["resize_shorter_side_v1_bicubic"][0], None),
        (tv.Compose([tv.CenterCrop(32), tv.GaussianBlur(5, (0.5, 1.5)), tv.GaussianBlur((3, 7), 1.0)]),
         SUPPORTED["gaussian_blur_kernel_and_sigma"][0], None),
        (tv.Compose([tv.CenterCrop(32), tv.TrivialAugmentWide(), tv.TrivialAugmentWide(num_magnitude_bins=15, interpolation=TI.BILINEAR)]),
         SUPPORTED["trivial_augment_wide_nearest_and_bilinear"][0], None),
        (tv.Compose([tv.CenterCrop(32), tv.AutoAugment(interpolation=TI.BILINEAR)]), SUPPORTED["auto_augment_imagenet_bilinear"][0], None),
        (tv.Compose([tv.RandomResizedCrop(24), tv1.ToTensor(), tv.RandomErasing(value="random")]),
         SUPPORTED["random_erasing_random_v2_none"][0], None),
        ([tv.RandomCrop((20, 28), padding=[1, 2, 3, 4], padding_mode="reflect")], SUPPORTED["random_crop_v2_four_sides_reflect"][0], None),
        ([tv1.RandomCrop(24, padding=(1, 2, 3, 4), fill=(10, 20, 30))], SUPPORTED["random_crop_v1_four_sides_fill_per_channel"][0], None),
        ([tv.RandomCrop(24, pad_if_needed=True, fill=128, padding_mode="symmetric")], SUPPORTED["random_crop_v2_pad_if_needed_symmetric"][0], None),
    ]
    for real, standin, _ in pairs:
        assert recipe(real) == recipe(standin)
    with pytest.raises(UnsupportedOp) as raised:
        recipe(tv.Compose([tv.CenterCrop(32), tv.RandAugment(fill=128)]))
    assert raised.value.op.startswith("RandAugment(fill=")


@pytest.mark.parametrize(
    "fill",
    [None, 0, 0.0, (0, 0, 0), [0.0, 0.0, 0.0], [0], {"others": [0.0, 0.0, 0.0]}, {"others": 0}, {"others": None}],
    ids=["none", "int", "float", "tuple", "list", "one_channel", "v2_others_per_channel", "v2_others_int", "v2_others_none"],
)
@pytest.mark.parametrize("policy", ["TrivialAugmentWide", "RandAugment", "AutoAugment"])
def test_a_policy_filling_with_zero_in_any_form_is_served_as_a_fill_of_zero(policy, fill):
    # v2 keeps fill=(0, 0, 0) as {"others": [0.0, 0.0, 0.0]}, v1 as it was given; the v2
    # stand-in keeps a dict as given, so {"others": fill} is each form as v2 keeps it.
    makers = [getattr(v2, policy)] + ([v1.TrivialAugmentWide] if policy == "TrivialAugmentWide" else [])
    for make in makers:
        want = recipe([v2.CenterCrop(32), make()])
        assert recipe([v2.CenterCrop(32), make(fill=fill)]) == want
        if not isinstance(fill, dict):
            assert recipe([v2.CenterCrop(32), make(fill={"others": fill})]) == want


@pytest.mark.parametrize("fill", [128, (0, 0, 1), [0.0, 0.5, 0.0], {"others": [0.0, 0.0, 1.0]}, {"others": 128}],
                         ids=["grey", "tuple_blue", "list_green", "v2_others_blue", "v2_others_grey"])
def test_a_policy_filling_with_anything_but_zero_is_refused_naming_the_fill(fill):
    for make in (v2.RandAugment, v2.TrivialAugmentWide, v1.TrivialAugmentWide):
        with pytest.raises(UnsupportedOp) as raised:
            recipe([v2.CenterCrop(32), make(fill=fill)])
        assert raised.value.op.startswith(f"{make.__name__}(fill=") and raised.value.index == 1


@pytest.mark.parametrize("value", [1e-05, 1.5e-07, 5e-324, 1e16, 1e+20, 0.1, 0.08])
def test_a_float_is_printed_as_a_number_that_yaml_parsers_of_either_version_read(value):
    # PyYAML is YAML 1.1, whose floats need a point in the mantissa and a sign in the exponent:
    # it reads 1e-05 as a string, 1.0e-05 as the number (as YAML 1.2 reads both).
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the printed recipe back")
    text = recipe([v2.RandomResizedCrop(24, scale=(value, 1.0))])
    got = yaml.safe_load(text)["augment"][0]["random_resized_crop"]["scale"]
    assert got == [value, 1.0] and all(type(v) is float for v in got), text


@pytest.mark.parametrize("fill", [7, 7.0, [7], (7, 7, 7), [7.0, 7.0, 7.0], {"others": 7}, {tv_tensors.Image: 7, "others": 0}])
def test_random_crops_fill_in_any_form_torchvision_keeps_is_written_per_channel(fill):
    assert recipe([v2.RandomCrop(24, padding=2, fill=fill)]) == "augment:\n  - random_crop: {size: [24, 24], padding: [2, 2, 2, 2], fill: [7, 7, 7]}\n"
