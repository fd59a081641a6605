"""Type stubs of the prepfs module: batches of a prepfs job's preprocessed samples, straight from
a running mount's cache over its loader socket (the extension: python/src/lib.rs,
python/src/dlpack.rs), and a torchvision transform moved to a mount as a recipe
(python/prepfs/_recipe.py)."""

from os import PathLike
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Type, Union

#: Whether this build has the GPU path (``device="cuda..."``).
gpu_support: bool

class Tensor:
    """A batch's images or labels, handed on through DLPack (``torch.from_dlpack``,
    ``np.from_dlpack``, ``cupy.from_dlpack``) without a copy."""

    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> str:
        """``"uint8"``, ``"float32"`` or ``"int64"``."""
    def __dlpack__(self, *, stream: Optional[int] = None, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __len__(self) -> int: ...

class Loader:
    """A job's samples in batches: ``for images, labels in prepfs.Loader("/mnt/prepfs", job="train")``.

    Each iteration is one epoch of the loader; ``images`` is NHWC uint8 (a view of shared memory)
    or, with ``dtype="float32-normalized"``, NCHW float32 normalised by ``mean`` and ``std``;
    ``labels`` is int64, the class index in ImageFolder's sorted class order.
    ``with prepfs.Loader(...) as batches:`` closes it when the block ends.

    Epochs: every ``iter()`` begins a new epoch of the loader, also after an iteration left part
    way (``for batch in loader: break``): what that epoch had not yet served is not served in it.
    Loaders of one job share its epochs (each sample once per epoch across all of them): a new
    ``iter()`` waits (up to a minute) while another loader of the job still walks the current
    epoch, so data-parallel ranks begin each epoch together; a loader alone on its job never waits.

    ``timeout``: the seconds the daemon may take to answer; connecting and its welcome together
    within it, then each batch within it. ``None`` (or ``float("inf")``) waits without a limit.
    A number that is not above 0 (``0`` is refused, not taken as "no limit"), NaN, or more than
    a year raises ``ValueError``. Past the timeout: ``TimeoutError``.

    Checkpoints: ``state_dict()`` and ``load_state_dict()``, as torchdata's StatefulDataLoader
    has them: a training run restarted from its checkpoint resumes its epoch, each sample of the
    epoch once over both runs (see their docs).

    Daemon restarts: where the connection dies (the mount's daemon killed, or restarted by its
    supervisor, which keeps the socket), the loader connects again for up to ``reconnect``
    seconds (``0``: not at all), says hello again and goes on with the same epoch, telling the
    new daemon exactly which samples it yielded; batches fetched and never yielded are asked
    again. The loop sees no error; past ``reconnect``: ``ConnectionError``. A restarted daemon
    serving another dataset raises ``RuntimeError``.

    Errors reaching the mount's loader socket are ``OSError`` subclasses with their ``errno``
    (``FileNotFoundError``: no socket there; ``ConnectionRefusedError``: no daemon listens;
    ``PermissionError``; ``TimeoutError``: the daemon did not accept within ``timeout``), the
    socket as ``filename``, and the file that named it (``.prepfs/loader.json``) in the message.
    """

    def __init__(
        self,
        mountpoint: Union[str, PathLike[str]],
        job: str,
        view: str = "augmented",
        batch_size: int = 256,
        device: str = "cpu",
        dtype: str = "uint8",
        drop_last: bool = False,
        mean: Tuple[float, float, float] = (0.485, 0.456, 0.406),
        std: Tuple[float, float, float] = (0.229, 0.224, 0.225),
        slots: int = 4,
        timeout: Optional[float] = 600.0,
        reconnect: float = 30.0,
    ) -> None: ...
    def __iter__(self) -> Iterator[Tuple[Tensor, Tensor]]:
        """Begins the loader's next epoch (a new one even where the last was left part way)."""
    def __next__(self) -> Tuple[Tensor, Tensor]: ...
    def __len__(self) -> int:
        """Batches in one epoch of the whole job."""
    def __enter__(self) -> "Loader": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is in its epochs, as a plain dict (JSON-able, picklable); may be
        called between any two batches. Keys: ``version`` (1), ``job``, ``view``, ``dataset``
        (the samples' fingerprint) and ``samples``; ``epoch`` (the job's epoch the loader is in,
        from 1; 0 before its first ``iter()``), ``epoch_ended`` (its share of that epoch was
        all yielded), ``samples_yielded``, and ``yielded``: exactly the samples yielded to the
        caller in that epoch (not those fetched ahead), a bitset of sample indices, sample ``i``
        at bit ``i % 8`` of byte ``i // 8``, zlib-compressed and base64-encoded
        (``zlib.decompress(base64.b64decode(state["yielded"]))``)."""
    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Takes a ``state_dict()`` of a loader of the same job, view and dataset, on a loader
        not iterated yet: its first ``iter()`` then goes on with that epoch, serving only the
        samples the state does not hold (each once), or, for a state taken at an epoch's end
        (after its last batch, before or after ``StopIteration``), with the next epoch, whole.
        Raises ``RuntimeError`` once iteration began (never ignored), and ``ValueError`` for a
        state of another job, view, dataset or version (the loader is then unchanged)."""
    def close(self) -> None:
        """Ends the connection, once the batches still alive are dropped (they stay intact until then). Closing twice does nothing."""
    @property
    def closed(self) -> bool: ...
    @property
    def gpu_upload(self) -> Optional[str]:
        """On the GPU path, how batches reach the device: ``"direct"`` (straight from the ring,
        registered with the driver) or ``"staged"`` (through a pinned staging copy: the driver
        refused the ring, or ``PREPFS_LOADER_STAGING=1``); ``None`` on the CPU."""
    @property
    def classes(self) -> List[str]:
        """ImageFolder's classes: a label indexes this list."""
    @property
    def samples(self) -> int:
        """Samples in the dataset."""
    @property
    def names(self) -> List[str]:
        """The last batch's samples, as paths relative to the source."""

class UnsupportedOp(ValueError):
    """An op of the transform the mount cannot serve: keep it, and every op after it, in the
    DataLoader."""

    op: str
    """Its class name (with the setting refused, where one is)."""
    index: int
    """Its place in the ``Compose``."""
    served: Optional[str]
    """The YAML of the ops before it (``None`` where those end in no fixed size)."""

def recipe(transform: Any, name: Optional[str] = None) -> str:
    """The YAML of a prepfs recipe doing what a torchvision (v2 or v1) ``Compose`` does per
    sample: ``augment:`` and ``output:``, or with ``name`` a ``recipes:`` mapping holding them.
    Raises :class:`UnsupportedOp` naming an op the mount cannot serve."""

def recipes(**named: Any) -> str:
    """One ``recipes:`` mapping of several named transforms (``recipes(train=..., val=...)``):
    the views ``MNT/<name>/`` and ``MNT/jobs/<job>/<name>/`` of one mount."""


class NpyFolder:
    """The ``.npy`` files under ``root/<class>/`` as ``(array, class index)`` items, read as
    torchvision's ``ImageFolder`` reads images (sorted classes, torchvision's order of samples,
    ``classes``, ``class_to_idx``, ``samples``, ``targets``): for a view serving
    ``output: {format: npy}``, which ``ImageFolder(root, loader=numpy.load)`` refuses.
    ``mmap``: map each array (``numpy.load(mmap_mode="r")``) rather than read it."""

    root: str
    classes: List[str]
    class_to_idx: Dict[str, int]
    samples: List[Tuple[str, int]]
    targets: List[int]

    def __init__(self, root: Union[str, PathLike[str]], transform: Optional[Callable[[Any], Any]] = None,
                 target_transform: Optional[Callable[[int], Any]] = None, mmap: bool = False) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Tuple[Any, Any]: ...
