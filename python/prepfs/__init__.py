"""prepfs: batches of a prepfs job's preprocessed samples (``prepfs.Loader``, the compiled
extension ``prepfs.prepfs``, python/src/) and a torchvision transform moved to a mount
(``prepfs.recipe``, pure Python: ``_recipe.py``), and a view of ``.npy`` outputs read as
``ImageFolder`` reads images (``prepfs.NpyFolder``, ``_folder.py``)."""

from .prepfs import *  # noqa: F401,F403  (Loader, Tensor, gpu_support)
from ._recipe import UnsupportedOp, recipe, recipes  # noqa: F401
from ._folder import NpyFolder  # noqa: F401
