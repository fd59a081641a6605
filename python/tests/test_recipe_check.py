"""The YAML prepfs.recipe prints, handed to the mount without mounting: `prepfs check CONFIG`
validates a config as `prepfs mount` does and prints the effective one. Every recipe of
cases.SUPPORTED is accepted, under `recipes:` and as the top-level `augment:`, and the mount
reads back the parameters the transform was built with, its own defaults where the recipe leaves
a parameter out being torchvision's.
"""

import subprocess

import pytest

from cases import SUPPORTED, expected_recipe
from conftest import load_recipe_module, prepfs_bin
from standins import MEAN, STD, v2, v1

recipe_module = load_recipe_module()
recipe = recipe_module.recipe

# What the mount takes where a recipe leaves a parameter out: torchvision's defaults (a
# resize's interpolation is bilinear). A policy's interpolation (nearest where left out, as
# torchvision's) the effective config shows only where it is bilinear.
IMPLIED = {
    "random_resized_crop": {"interpolation": "bilinear"},
    "resize": {"interpolation": "bilinear"},
}
POLICIES = ("trivial_augment_wide", "rand_augment", "auto_augment")


def check(tmp_path, yaml_text):
    """`prepfs check` on `yaml_text`: (exit status, stdout, stderr)."""
    config = tmp_path / "check.yaml"
    config.write_text(yaml_text)
    source = tmp_path / "source"
    source.mkdir(exist_ok=True)
    out = subprocess.run([str(prepfs_bin()), "check", str(config), "--source", str(source), "--mountpoint", str(tmp_path / "mnt")],
                         capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout, out.stderr


def effective_op_matches(name, got, want):
    """The effective op `got` (the mount's, parsed) holds every parameter of `want` (the
    transform's), and torchvision's default for one the recipe left out."""
    if name in POLICIES and "timm" not in want:
        assert got.get("interpolation", "nearest") == want.get("interpolation", "nearest"), f"{name}: {got}"
        want = {k: v for k, v in want.items() if k != "interpolation"}
    want = dict(IMPLIED.get(name, {}), **want)
    if name == "random_crop" and "padding" in want:
        # A padded crop's settings the recipe leaves out: torchvision's defaults.
        want = dict({"pad_if_needed": False, "fill": [0, 0, 0], "padding_mode": "constant"}, **want)
    for key, value in want.items():
        assert key in got, f"{name}: the mount has no `{key}`: {got}"
        if name == "random_erasing" and key == "value" and value != "random":
            # One value, or one per channel: the mount keeps it per channel.
            value = [float(v) for v in (value if isinstance(value, list) else [value])]
            value = value * 3 if len(value) == 1 else value
        if name == "normalize" or (name == "random_erasing" and key == "value" and value != "random"):
            # The mount keeps mean, std and erasing values as float32.
            assert got[key] == pytest.approx(value, rel=1e-6), f"{name}.{key}: {got[key]} != {value}"
        else:
            assert got[key] == value, f"{name}.{key}: {got[key]!r} != {value!r}"


@pytest.mark.parametrize("case", sorted(SUPPORTED))
def test_prepfs_check_accepts_each_recipe_and_reads_back_the_transforms_parameters(case, tmp_path):
    yaml = pytest.importorskip("yaml", reason="PyYAML reads prepfs check's effective config (make deps installs it with moto[server])")
    transform, augment, output = SUPPORTED[case]
    status, stdout, stderr = check(tmp_path, "seed: 1\n" + recipe(transform, name="r"))
    assert status == 0, f"prepfs check refused the recipe:\n{recipe(transform, name='r')}\n{stderr}"
    effective = yaml.safe_load(stdout)["recipes"]["r"]
    want = expected_recipe(augment, output)
    assert [next(iter(op)) for op in effective["augment"]] == [next(iter(op)) for op in want["augment"]], effective["augment"]
    for got, wanted in zip(effective["augment"], want["augment"]):
        (name, params), = wanted.items()
        effective_op_matches(name, got[name], params)
    fmt = effective["output"]["format"], effective["output"]["dtype"]
    assert fmt == (("npy", "float32") if output else ("ppm", "uint8")), effective["output"]
    normalize = [op["normalize"] for op in want["augment"] if "normalize" in op]
    if normalize:
        # The output of a normalized recipe: its mean and std.
        assert effective["output"]["mean"] == pytest.approx(normalize[0]["mean"])
        assert effective["output"]["std"] == pytest.approx(normalize[0]["std"])


def test_a_recipe_without_a_name_is_a_config_whose_top_level_augment_and_output_the_mount_takes(tmp_path):
    yaml = pytest.importorskip("yaml", reason="PyYAML reads prepfs check's effective config")
    text = recipe(v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(), v1.Normalize(MEAN, STD)]))
    status, stdout, stderr = check(tmp_path, "seed: 1\n" + text)
    assert status == 0, stderr
    effective = yaml.safe_load(stdout)
    assert [next(iter(op)) for op in effective["augment"]] == ["resize", "center_crop", "normalize"]
    assert (effective["output"]["format"], effective["output"]["dtype"]) == ("npy", "float32")


def test_several_named_recipes_pasted_under_one_recipes_key_are_taken_together(tmp_path):
    yaml = pytest.importorskip("yaml", reason="PyYAML reads prepfs check's effective config")
    names = sorted(SUPPORTED)
    for first in range(0, len(names), 15):  # a mount serves at most 15 recipes
        group = names[first:first + 15]
        text = "seed: 1\nrecipes:\n" + "".join(
            recipe(SUPPORTED[case][0], name=f"r{k}")[len("recipes:\n"):] for k, case in enumerate(group))
        status, stdout, stderr = check(tmp_path, text)
        assert status == 0, stderr
        assert sorted(yaml.safe_load(stdout)["recipes"]) == sorted(f"r{k}" for k in range(len(group)))


def test_a_crop_after_a_pixel_op_is_refused_by_prepfs_recipe_and_written_by_hand_by_prepfs_check(tmp_path):
    """prepfs.recipe's order rule is the mount's: the transform is refused, and the same ops
    written as YAML by hand are refused by the mount, naming the op."""
    with pytest.raises(recipe_module.UnsupportedOp, match="prepfs cannot serve CenterCrop "):
        recipe(v2.Compose([v2.Resize(40), v2.ColorJitter(0.4), v2.CenterCrop(32)]))
    text = "seed: 1\naugment:\n  - resize: {size: 40}\n  - color_jitter: {brightness: [0.6, 1.4]}\n  - center_crop: {size: [32, 32]}\n"
    status, _, stderr = check(tmp_path, text)
    assert status != 0
    assert "center_crop" in stderr, stderr


def test_a_small_float_the_recipe_prints_for_yaml_1_1_readers_is_read_by_the_mount_as_the_same_number(tmp_path):
    # prepfs.recipe prints 1e-05 as 1.0e-05 (PyYAML, YAML 1.1, reads 1e-05 as a string): the
    # mount's YAML 1.2 parser must read that spelling as the number too.
    yaml = pytest.importorskip("yaml", reason="PyYAML reads prepfs check's effective config")
    text = recipe(v2.Compose([v2.RandomResizedCrop(24, scale=(1e-05, 1.0)), v2.GaussianBlur(3, (1.5e-07, 2.0))]), name="r")
    assert "scale: [1.0e-05, 1.0]" in text and "sigma: [1.5e-07, 2.0]" in text, text
    status, stdout, stderr = check(tmp_path, "seed: 1\n" + text)
    assert status == 0, f"prepfs check refused:\n{text}\n{stderr}"
    crop, blur = (next(iter(op.values())) for op in yaml.safe_load(stdout)["recipes"]["r"]["augment"])
    assert crop["scale"] == [1e-05, 1.0], stdout
    assert blur["sigma"] == pytest.approx([1.5e-07, 2.0], rel=1e-6), stdout
