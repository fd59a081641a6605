"""``prepfs.NpyFolder``: a view of ``.npy`` outputs read as torchvision's ``ImageFolder`` reads
images, for a mount whose view serves ``output: {format: npy}`` (pure Python: numpy only).

``ImageFolder(root, loader=numpy.load)`` refuses such a view ("Found no valid file"), since it
keeps only image extensions; ``DatasetFolder(root, numpy.load, extensions=(".npy",))`` reads
it. ``NpyFolder`` is that, without torchvision: the same classes (the sorted subdirectories),
the same order of samples (each class's tree walked as torchvision walks it, names sorted) and
the same attributes (``classes``, ``class_to_idx``, ``samples``, ``targets``), so a training
script swaps one for the other and a ``torch.utils.data.DataLoader`` takes it as it is. Each item
is ``(array, class index)``: the float32 CHW or uint8 HWC array the mount made, with no transform
left to run (``torch.from_numpy`` makes it a tensor without a copy).
"""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

EXTENSION = ".npy"


class NpyFolder:
    """The ``.npy`` files under ``root/<class>/`` as ``(array, class index)`` items."""

    def __init__(self, root: "os.PathLike[str] | str", transform: Optional[Callable[[Any], Any]] = None,
                 target_transform: Optional[Callable[[int], Any]] = None, mmap: bool = False):
        self.root = os.fspath(root)
        self.transform, self.target_transform, self.mmap = transform, target_transform, mmap
        self.classes: List[str] = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not self.classes:
            raise FileNotFoundError(f"{self.root}: no class directories (a view of the mount is <view>/<class>/<name>{EXTENSION})")
        self.class_to_idx: Dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        self.samples: List[Tuple[str, int]] = []
        for name in self.classes:
            index = self.class_to_idx[name]
            for dirpath, _, files in sorted(os.walk(os.path.join(self.root, name), followlinks=True)):
                self.samples.extend((os.path.join(dirpath, f), index) for f in sorted(files) if f.lower().endswith(EXTENSION))
        if not self.samples:
            raise FileNotFoundError(f"{self.root}: no {EXTENSION} file in any class directory (does this view serve `output: {{format: npy}}`?)")
        self.targets: List[int] = [t for _, t in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Tuple[Any, Any]:
        import numpy  # imported here: `import prepfs` needs no numpy

        path, target = self.samples[index]
        sample = numpy.load(path, mmap_mode="r" if self.mmap else None, allow_pickle=False)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __repr__(self) -> str:
        return f"NpyFolder({self.root!r}: {len(self.samples)} samples, {len(self.classes)} classes)"
