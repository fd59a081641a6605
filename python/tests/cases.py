"""The transforms prepfs.recipe serves, built from standins.py, each with the recipe it must print
(its `augment:` list and `output:`), for test_recipe.py (the YAML parsed back) and
test_recipe_check.py (the YAML handed to `prepfs check`)."""

from pytest import approx

from standins import MEAN, STD, I, AutoAugmentPolicy, Resampling, timm, torch, tv_tensors, v1, v2

RRC_DEFAULT = {"size": [24, 24], "scale": [0.08, 1.0], "ratio": [3.0 / 4.0, 4.0 / 3.0]}
FLOAT32 = {"format": "npy", "dtype": "float32"}
NORMALIZE = {"normalize": {"mean": list(MEAN), "std": list(STD)}}

# id: (the transform, the recipe it is: its `augment:` list and `output:` (None: the mount's own)).
# The values are written as the transform was given them (4/3, not its decimal), so comparing the
# parsed YAML with them checks that every parameter is carried over exactly; approx() only where
# the transform itself keeps a value derived from the one given (timm's log aspect ratios).
SUPPORTED = {
    "random_resized_crop_defaults": (v2.Compose([v2.RandomResizedCrop(24)]), [{"random_resized_crop": RRC_DEFAULT}], None),
    "random_resized_crop_size_scale_ratio_bicubic": (
        [v2.RandomResizedCrop((32, 48), scale=(0.25, 0.9), ratio=(0.5, 2.0), interpolation=I.BICUBIC)],
        [{"random_resized_crop": {"size": [32, 48], "scale": [0.25, 0.9], "ratio": [0.5, 2.0], "interpolation": "bicubic"}}],
        None,
    ),
    "random_resized_crop_one_side_list": (
        v2.RandomResizedCrop([40], scale=(0.35, 1.0)),
        [{"random_resized_crop": {"size": [40, 40], "scale": [0.35, 1.0], "ratio": [3.0 / 4.0, 4.0 / 3.0]}}],
        None,
    ),
    "timm_random_resized_crop_random_interpolation": (
        v2.Compose([timm.RandomResizedCropAndInterpolation(24)]),
        [{"random_resized_crop": dict(RRC_DEFAULT, interpolation="random")}],
        None,
    ),
    "horizontal_flip_probability": (
        v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip(0.25)]),
        [{"random_resized_crop": RRC_DEFAULT}, {"random_horizontal_flip": {"p": 0.25}}],
        None,
    ),
    "resize_shorter_side_v2_then_center_crop": (
        v2.Compose([v2.Resize(40), v2.CenterCrop(32)]),
        [{"resize": {"size": 40}}, {"center_crop": {"size": [32, 32]}}],
        None,
    ),
    "resize_then_random_crop_v2": (
        v2.Compose([v2.Resize(40), v2.RandomCrop(32), v2.RandomHorizontalFlip()]),
        [{"resize": {"size": 40}}, {"random_crop": {"size": [32, 32]}}, {"random_horizontal_flip": {"p": 0.5}}],
        None,
    ),
    "resize_then_random_crop_v1_rectangle": (
        v1.Compose([v1.Resize(40), v1.RandomCrop((20, 28))]),
        [{"resize": {"size": 40}}, {"random_crop": {"size": [20, 28]}}],
        None,
    ),
    "random_crop_padding_v2_cifar": (
        v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()]),
        [{"random_crop": {"size": [32, 32], "padding": [4, 4, 4, 4]}}, {"random_horizontal_flip": {"p": 0.5}}],
        None,
    ),
    "random_crop_v2_four_sides_reflect": (
        # v2 keeps [1, 2, 3, 4] (left, top, right, bottom) as [1, 3, 2, 4]: read back in the given order.
        [v2.RandomCrop((20, 28), padding=[1, 2, 3, 4], padding_mode="reflect")],
        [{"random_crop": {"size": [20, 28], "padding": [1, 2, 3, 4], "padding_mode": "reflect"}}],
        None,
    ),
    "random_crop_v1_four_sides_fill_per_channel": (
        [v1.RandomCrop(24, padding=(1, 2, 3, 4), fill=(10, 20, 30))],
        [{"random_crop": {"size": [24, 24], "padding": [1, 2, 3, 4], "fill": [10, 20, 30]}}],
        None,
    ),
    "random_crop_v2_fill_one_value": (
        [v2.RandomCrop(24, padding=2, fill=7)],
        [{"random_crop": {"size": [24, 24], "padding": [2, 2, 2, 2], "fill": [7, 7, 7]}}],
        None,
    ),
    "random_crop_v1_two_sides_pad_if_needed_edge": (
        v1.Compose([v1.Resize(20), v1.RandomCrop(24, padding=[2, 1], pad_if_needed=True, padding_mode="edge")]),
        [{"resize": {"size": 20}}, {"random_crop": {"size": [24, 24], "padding": [2, 1, 2, 1], "pad_if_needed": True, "padding_mode": "edge"}}],
        None,
    ),
    "random_crop_v2_pad_if_needed_symmetric": (
        # The fill is read in constant mode only.
        [v2.RandomCrop(24, pad_if_needed=True, fill=128, padding_mode="symmetric")],
        [{"random_crop": {"size": [24, 24], "padding": [0, 0, 0, 0], "pad_if_needed": True, "padding_mode": "symmetric"}}],
        None,
    ),
    "random_crop_v2_padding_zero_is_no_padding": (
        [v2.RandomCrop(24, padding=0, fill=9)],
        [{"random_crop": {"size": [24, 24]}}],
        None,
    ),
    "center_crop_then_random_rotation_v2": (
        v2.Compose([v2.CenterCrop(32), v2.RandomRotation(15), v2.RandomRotation((-5, 30), interpolation=I.BILINEAR, fill=0)]),
        [{"center_crop": {"size": [32, 32]}}, {"random_rotation": {"degrees": [-15.0, 15.0]}},
         {"random_rotation": {"degrees": [-5.0, 30.0], "interpolation": "bilinear"}}],
        None,
    ),
    "resize_shorter_side_v1_bicubic": (
        v1.Compose([v1.Resize(40, interpolation=I.BICUBIC), v1.CenterCrop((20, 28))]),
        [{"resize": {"size": 40, "interpolation": "bicubic"}}, {"center_crop": {"size": [20, 28]}}],
        None,
    ),
    "resize_to_height_and_width": (
        v2.Compose([v2.Resize((30, 50))]),
        [{"resize": {"size": [30, 50]}}],
        None,
    ),
    "identity_and_to_pure_tensor_change_nothing": (
        v2.Compose([v2.Identity(), v2.RandomResizedCrop(24), v2.Identity(), v2.ToPureTensor()]),
        [{"random_resized_crop": RRC_DEFAULT}],
        None,
    ),
    "color_jitter_v2": (
        v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.ColorJitter(0.4, 0.3, 0.2, 0.1)]),
        [{"resize": {"size": 40}}, {"center_crop": {"size": [32, 32]}},
         {"color_jitter": {"brightness": [1 - 0.4, 1 + 0.4], "contrast": [1 - 0.3, 1 + 0.3], "saturation": [1 - 0.2, 1 + 0.2], "hue": [-0.1, 0.1]}}],
        None,
    ),
    "color_jitter_v1_brightness_only": (
        v1.Compose([v1.CenterCrop(32), v1.ColorJitter(brightness=0.5)]),
        [{"center_crop": {"size": [32, 32]}}, {"color_jitter": {"brightness": [0.5, 1.5]}}],
        None,
    ),
    "random_grayscale": (
        v2.Compose([v2.CenterCrop(32), v2.RandomGrayscale(0.2)]),
        [{"center_crop": {"size": [32, 32]}}, {"random_grayscale": {"p": 0.2}}],
        None,
    ),
    "gaussian_blur_kernel_and_sigma": (
        v2.Compose([v2.CenterCrop(32), v2.GaussianBlur(5, (0.5, 1.5)), v2.GaussianBlur((3, 7), 1.0)]),
        [{"center_crop": {"size": [32, 32]}}, {"gaussian_blur": {"kernel_size": [5, 5], "sigma": [0.5, 1.5]}},
         {"gaussian_blur": {"kernel_size": [3, 7], "sigma": [1.0, 1.0]}}],
        None,
    ),
    "trivial_augment_wide_nearest_and_bilinear": (
        v2.Compose([v2.CenterCrop(32), v2.TrivialAugmentWide(), v2.TrivialAugmentWide(num_magnitude_bins=15, interpolation=I.BILINEAR)]),
        [{"center_crop": {"size": [32, 32]}}, {"trivial_augment_wide": {"num_magnitude_bins": 31}},
         {"trivial_augment_wide": {"num_magnitude_bins": 15, "interpolation": "bilinear"}}],
        None,
    ),
    "rand_augment": (
        v2.Compose([v2.CenterCrop(32), v2.RandAugment(num_ops=3, magnitude=7, num_magnitude_bins=21)]),
        [{"center_crop": {"size": [32, 32]}}, {"rand_augment": {"num_ops": 3, "magnitude": 7, "num_magnitude_bins": 21}}],
        None,
    ),
    "auto_augment_imagenet_bilinear": (
        v2.Compose([v2.CenterCrop(32), v2.AutoAugment(AutoAugmentPolicy.IMAGENET, interpolation=I.BILINEAR)]),
        [{"center_crop": {"size": [32, 32]}}, {"auto_augment": {"policy": "imagenet", "interpolation": "bilinear"}}],
        None,
    ),
    "policy_fill_zero": (
        v1.Compose([v1.CenterCrop(32), v1.TrivialAugmentWide(fill=[0, 0, 0])]),
        [{"center_crop": {"size": [32, 32]}}, {"trivial_augment_wide": {"num_magnitude_bins": 31}}],
        None,
    ),
    "to_tensor_and_normalize_v1": (
        v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(), v1.Normalize(MEAN, STD)]),
        [{"resize": {"size": 40}}, {"center_crop": {"size": [32, 32]}}, NORMALIZE],
        FLOAT32,
    ),
    "to_image_to_dtype_scaled_v2": (
        v2.Compose([v2.RandomResizedCrop(24), v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
        [{"random_resized_crop": RRC_DEFAULT}, NORMALIZE],
        FLOAT32,
    ),
    "to_dtype_per_type_dict": (
        v2.Compose([v2.RandomResizedCrop(24), v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)]),
        [{"random_resized_crop": RRC_DEFAULT}],
        FLOAT32,
    ),
    "pil_to_tensor_and_convert_image_dtype": (
        v2.Compose([v2.RandomResizedCrop(24), v2.PILToTensor(), v2.ConvertImageDtype(torch.float), v2.Normalize((0.5, 0.5, 0.5), (0.25, 0.5, 2.0))]),
        [{"random_resized_crop": RRC_DEFAULT}, {"normalize": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.5, 2.0]}}],
        FLOAT32,
    ),
    "timm_maybe_to_tensor_and_float32_normalize": (
        v2.Compose([v2.RandomResizedCrop(24), timm.MaybeToTensor(), timm.Normalize(MEAN, STD)]),
        [{"random_resized_crop": RRC_DEFAULT}, NORMALIZE],
        FLOAT32,
    ),
    "random_erasing_v2_zero_after_normalize": (
        v2.Compose([v2.RandomResizedCrop(24), v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
                    v2.RandomErasing(0.1)]),
        [{"random_resized_crop": RRC_DEFAULT}, NORMALIZE,
         {"random_erasing": {"p": 0.1, "scale": [0.02, 0.33], "ratio": [0.3, 3.3], "value": [0.0]}}],
        FLOAT32,
    ),
    "random_erasing_v1_number_per_channel_and_random": (
        v1.Compose([v1.RandomResizedCrop(24), v1.ToTensor(), v1.RandomErasing(0.3, (0.1, 0.2), (0.5, 2.0), value=(0.1, 0.2, 0.3))]),
        [{"random_resized_crop": RRC_DEFAULT}, {"random_erasing": {"p": 0.3, "scale": [0.1, 0.2], "ratio": [0.5, 2.0], "value": [0.1, 0.2, 0.3]}}],
        FLOAT32,
    ),
    "random_erasing_random_v2_none": (
        v2.Compose([v2.RandomResizedCrop(24), v1.ToTensor(), v2.RandomErasing(value="random")]),
        [{"random_resized_crop": RRC_DEFAULT}, {"random_erasing": {"p": 0.5, "scale": [0.02, 0.33], "ratio": [0.3, 3.3], "value": "random"}}],
        FLOAT32,
    ),
    "random_erasing_on_uint8_then_a_flip": (
        v2.Compose([v2.RandomResizedCrop(24), v2.RandomErasing(0.5, value=(10, 20, 30)), v2.RandomHorizontalFlip()]),
        [{"random_resized_crop": RRC_DEFAULT}, {"random_erasing": {"p": 0.5, "scale": [0.02, 0.33], "ratio": [0.3, 3.3], "value": [10.0, 20.0, 30.0]}},
         {"random_horizontal_flip": {"p": 0.5}}],
        None,
    ),
    "random_erasing_random_v1_string": (
        v1.Compose([v1.RandomResizedCrop(24), v1.ToTensor(), v1.RandomErasing(value="random")]),
        [{"random_resized_crop": RRC_DEFAULT}, {"random_erasing": {"p": 0.5, "scale": [0.02, 0.33], "ratio": [0.3, 3.3], "value": "random"}}],
        FLOAT32,
    ),
    "timm_rand_augment_inc1_mstd_and_fill": (
        v2.Compose([v2.RandomResizedCrop(24),
                    timm.rand_augment(timm.INCREASING, 9, hparams={"img_mean": timm.IMG_MEAN, "magnitude_std": 0.5})]),
        [{"random_resized_crop": RRC_DEFAULT},
         {"rand_augment": {"timm": "rand-m9-n2-p0.5-mstd0.5-inc1", "interpolation": "random", "fill": list(timm.IMG_MEAN)}}],
        None,
    ),
    "timm_rand_augment_default_ops_bicubic_mstd_inf_mmax": (
        v2.Compose([v2.CenterCrop(32),
                    timm.rand_augment(timm.RAND, 7, num_layers=3, prob=0.8,
                                      hparams={"interpolation": Resampling.BICUBIC, "magnitude_std": float("inf"), "magnitude_max": 12})]),
        [{"center_crop": {"size": [32, 32]}},
         {"rand_augment": {"timm": "rand-m7-n3-p0.8-mstd1000-mmax12", "interpolation": "bicubic", "fill": [128, 128, 128]}}],
        None,
    ),
    "timm_create_transform_whole": (
        v2.Compose([timm.RandomResizedCropAndInterpolation(24), v2.RandomHorizontalFlip(),
                    timm.rand_augment(timm.INCREASING, 9, hparams={"img_mean": timm.IMG_MEAN, "magnitude_std": 0.5}),
                    timm.MaybeToTensor(), timm.Normalize(MEAN, STD), timm.RandomErasing(0.25, mode="pixel")]),
        [{"random_resized_crop": dict(RRC_DEFAULT, interpolation="random")}, {"random_horizontal_flip": {"p": 0.5}},
         {"rand_augment": {"timm": "rand-m9-n2-p0.5-mstd0.5-inc1", "interpolation": "random", "fill": list(timm.IMG_MEAN)}},
         NORMALIZE,
         # timm keeps the aspect ratios as their logs: exp(log(r)) is r to within rounding.
         {"random_erasing": {"p": 0.25, "scale": [0.02, 1 / 3], "ratio": [approx(0.3), approx(1 / 0.3)], "value": "random"}}],
        FLOAT32,
    ),
    "timm_random_erasing_const_is_zero": (
        v2.Compose([v2.RandomResizedCrop(24), timm.MaybeToTensor(), timm.RandomErasing(0.5, max_area=0.4, min_aspect=0.5)]),
        [{"random_resized_crop": RRC_DEFAULT}, {"random_erasing": {"p": 0.5, "scale": [0.02, 0.4], "ratio": [approx(0.5), approx(2.0)], "value": 0.0}}],
        FLOAT32,
    ),
}


def expected_recipe(augment, output):
    return {"augment": augment, **({"output": output} if output is not None else {})}
