"""torchvision's reference classification training (references/classification/train.py) on a
mount: docs/recipes.md's worked example "torchvision's train.py on a mount", run as written.

train.py reads `<data-path>/train` and `<data-path>/val`. The mount serves two recipes named
`train` and `val`, printed by `prepfs.recipes(train=ClassificationPresetTrain(...),
val=ClassificationPresetEval(...))` from the presets train.py builds (torchvision v1, PIL
backend, as presets.py holds them: their Compose as `transforms`), so `--data-path
MNT/jobs/<job>` finds both views. The one edit to train.py's `load_data`: its two
`torchvision.datasets.ImageFolder(dir, preset)` become `prepfs.NpyFolder(dir)`, the presets' work
being the mount's. This test builds the presets as presets.py does, mounts an id-coded data set
(each sample's id in its mean red and green) with the printed recipes, and runs train.py's data
path and training step with that edit: `RandomSampler`, a `DataLoader` with 2 workers,
`resnet18(num_classes=...)`, SGD and cross entropy, then the evaluation pass over `val`.

It checks what the training script relies on: the classes and targets ImageFolder would give;
each epoch of `train` every sample exactly once with its own label, float32 CHW at the crop size,
new crops each epoch; each pass over `val` every sample once, each the same array every pass
(matched by the sample its pixels code: a job's view may serve a file another unseen sample of
its class), equal to torchvision's own
`ClassificationPresetEval` on the source JPEG (the mount's decode and antialiased resize against
PIL's, within a few levels); and training steps that run (finite loss, weights that move).

Needs torch and torchvision (`make compare-torchvision` installs them); skipped without them.
"""

import numpy as np
import pytest

from conftest import Mount, id_of_pixels, loader_module, make_id_dataset, prepfs_bin

torch = pytest.importorskip("torch", reason="torch is not installed (make compare-torchvision installs it)")
torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed (make compare-torchvision installs it)")

CLASSES, PER_CLASS = 2, 6
SAMPLES = CLASSES * PER_CLASS
CROP, RESIZE = 64, 72  # train.py's --train-crop-size, --val-crop-size and --val-resize-size, small for the test
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
LIMIT = 300.0


class ClassificationPresetTrain:
    """presets.py's, for its defaults (PIL backend, torchvision v1, no auto-augment, no random
    erasing): the same ops with the same arguments, held as presets.py holds them."""

    def __init__(self, crop_size, interpolation, hflip_prob=0.5):
        T = torchvision.transforms
        self.transforms = T.Compose([T.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True),
                                     T.RandomHorizontalFlip(hflip_prob), T.PILToTensor(),
                                     T.ConvertImageDtype(torch.float), T.Normalize(mean=MEAN, std=STD)])

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    """presets.py's, for its defaults (PIL backend, torchvision v1)."""

    def __init__(self, crop_size, resize_size, interpolation):
        T = torchvision.transforms
        self.transforms = T.Compose([T.Resize(resize_size, interpolation=interpolation, antialias=True),
                                     T.CenterCrop(crop_size), T.PILToTensor(), T.ConvertImageDtype(torch.float),
                                     T.Normalize(mean=MEAN, std=STD)])

    def __call__(self, img):
        return self.transforms(img)


def sample_of(chw):
    """The id a normalized float32 CHW image codes (its mean red and green), and how far off."""
    rgb = (np.transpose(np.asarray(chw), (1, 2, 0)) * np.array(STD) + np.array(MEAN)) * 255.0
    return id_of_pixels(rgb)


def test_train_py_with_its_two_datasets_made_npyfolders_trains_from_the_mounts_train_and_val_recipes(tmp_path):
    prepfs = loader_module()
    bilinear = torchvision.transforms.InterpolationMode.BILINEAR
    train_preset = ClassificationPresetTrain(CROP, bilinear)
    eval_preset = ClassificationPresetEval(CROP, RESIZE, bilinear)
    config = "seed: 5\n" + prepfs.recipes(train=train_preset, val=eval_preset)
    source = make_id_dataset(tmp_path / "idset", CLASSES, PER_CLASS)
    mount = Mount(prepfs_bin(), tmp_path, config, source, limit=LIMIT)
    try:
        # train.py: train_dir = os.path.join(args.data_path, "train"), val_dir likewise.
        data_path = mount.mountpoint / "jobs" / "resnet"
        dataset = prepfs.NpyFolder(data_path / "train")  # was ImageFolder(traindir, ClassificationPresetTrain(...))
        dataset_test = prepfs.NpyFolder(data_path / "val")  # was ImageFolder(valdir, ClassificationPresetEval(...))
        reference = torchvision.datasets.ImageFolder(source)
        assert dataset.classes == dataset_test.classes == reference.classes
        assert dataset.targets == dataset_test.targets == reference.targets

        torch.manual_seed(0)
        data_loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=torch.utils.data.RandomSampler(dataset),
                                                  num_workers=2)
        data_loader_test = torch.utils.data.DataLoader(dataset_test, batch_size=4,
                                                       sampler=torch.utils.data.SequentialSampler(dataset_test), num_workers=2)
        model = torchvision.models.resnet18(num_classes=len(dataset.classes))
        criterion = torch.nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        before = [p.detach().clone() for p in model.parameters()]

        crops = []
        for _ in range(2):  # train_one_epoch, twice
            model.train()
            seen, crop = [], {}
            for image, target in data_loader:
                assert image.dtype == torch.float32 and tuple(image.shape[1:]) == (3, CROP, CROP)
                for chw, label in zip(image, target):
                    sample, off = sample_of(chw)
                    assert off < 6, f"an image coding no sample (its levels {off:.1f} from the nearest)"
                    assert int(label) == sample // PER_CLASS, f"sample {sample} served with label {int(label)}"
                    seen.append(sample)
                    crop[sample] = chw.numpy().copy()
                loss = criterion(model(image), target)
                assert torch.isfinite(loss)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            assert sorted(seen) == list(range(SAMPLES)), "an epoch of train/ gave a sample twice or left one out"
            crops.append(crop)
        assert any(not np.array_equal(crops[0][s], crops[1][s]) for s in range(SAMPLES)), "epoch 2 gave epoch 1's crops"
        assert any(not torch.equal(a, p.detach()) for a, p in zip(before, model.parameters())), "the steps moved no weight"

        # evaluate(), twice. In a job's view a file may be served another unseen sample of its class
        # (opportunistic sampling), so each array is matched to the sample its pixels code.
        model.eval()
        passes = []
        for _ in range(2):
            by_sample = {}
            with torch.inference_mode():
                for image, target in data_loader_test:
                    assert torch.isfinite(criterion(model(image), target))
                    for chw, label in zip(image, target):
                        sample, off = sample_of(chw)
                        assert off < 6 and int(label) == sample // PER_CLASS and sample not in by_sample
                        by_sample[sample] = chw.numpy().copy()
            assert sorted(by_sample) == list(range(SAMPLES)), "a pass over val/ gave a sample twice or left one out"
            passes.append(by_sample)
        from PIL import Image
        for sample, (path, _) in enumerate(sorted(reference.samples, key=lambda s: s[0].rsplit("/s", 1)[1])):
            ours = passes[0][sample]
            assert np.array_equal(ours, passes[1][sample]), f"sample {sample}: two passes over val/ differ"
            theirs = eval_preset(Image.open(path).convert("RGB")).numpy()
            assert ours.shape == theirs.shape
            levels = np.abs(ours - theirs) * np.array(STD)[:, None, None] * 255.0
            assert levels.mean() < 1.0 and levels.max() < 12.0, \
                f"{path}: val/ differs from ClassificationPresetEval by {levels.mean():.2f} levels on average, {levels.max():.1f} at most"
    finally:
        assert mount.stop() == 0, mount.log()
