"""prepfs.NpyFolder (python/prepfs/_folder.py, this tree's): a view of .npy outputs read as
torchvision's ImageFolder reads images, on a tree made here and on a real mount's float32
recipe view."""

import importlib.util

import numpy as np
import pytest

from conftest import PYTHON_DIR


def load_folder_module():
    spec = importlib.util.spec_from_file_location("prepfs_folder_under_test", PYTHON_DIR / "prepfs" / "_folder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NpyFolder = load_folder_module().NpyFolder


def write_tree(root, layout):
    """`layout`: {relative path: array}; other files (a README, a .ppm) written as text."""
    for rel, value in layout.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, np.ndarray):
            np.save(path, value)
        else:
            path.write_text(value)


def test_classes_samples_and_targets_follow_imagefolders_order_and_items_are_the_arrays_written(tmp_path):
    arrays = {f"{c}/{n}.npy": np.full((3, 2, 2), i, dtype=np.float32) for i, (c, n) in enumerate(
        [("dog", "b"), ("cat", "z"), ("cat", "a"), ("dog", "sub/c"), ("ant", "x")])}
    write_tree(tmp_path, {**arrays, "cat/readme.txt": "not a sample", "dog/a.ppm": "P6"})
    (tmp_path / "notes.txt").write_text("a file beside the classes is no class")
    folder = NpyFolder(tmp_path)
    assert folder.classes == ["ant", "cat", "dog"]
    assert folder.class_to_idx == {"ant": 0, "cat": 1, "dog": 2}
    # torchvision's make_dataset: classes in order, each class's tree walked with names sorted.
    assert [p[len(str(tmp_path)) + 1:] for p, _ in folder.samples] == ["ant/x.npy", "cat/a.npy", "cat/z.npy", "dog/b.npy", "dog/sub/c.npy"]
    assert folder.targets == [0, 1, 1, 2, 2]
    assert len(folder) == 5
    for (path, target), i in zip(folder.samples, range(len(folder))):
        array, label = folder[i]
        rel = path[len(str(tmp_path)) + 1:]
        np.testing.assert_array_equal(array, arrays[rel])
        assert label == target


def test_transforms_apply_to_the_array_and_the_target_and_mmap_maps_the_file(tmp_path):
    write_tree(tmp_path, {"a/x.npy": np.arange(12, dtype=np.uint8).reshape(2, 2, 3)})
    folder = NpyFolder(tmp_path, transform=lambda a: a.sum(), target_transform=lambda t: f"class {t}", mmap=True)
    assert folder[0] == (66, "class 0")
    mapped = NpyFolder(tmp_path, mmap=True)[0][0]
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable


def test_a_view_without_npy_files_or_without_classes_is_refused_saying_what_it_looked_for(tmp_path):
    write_tree(tmp_path / "ppm_view", {"c0/a.ppm": "P6"})
    with pytest.raises(FileNotFoundError, match=r"no \.npy file in any class directory .*format: npy"):
        NpyFolder(tmp_path / "ppm_view")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no class directories"):
        NpyFolder(tmp_path / "empty")
