"""prepfs.Loader (the installed module, python/src/lib.rs) against a real mount of an id-coded
dataset (3 classes of 8 samples, each sample's id in its pixels' mean red and green), made by
the binary under test (PREPFS_BIN), its config written by prepfs.recipe: `augmented/` a random
64x64 crop and flip, the recipe `val` a resize and center crop to 32x32 (no chance in it), the
recipe `tv1` the same to normalized float32.

The mount is shared by this module's tests (each its own job), and one test mounts its own to
stop it under a loader. Every Loader has a timeout, and each mount a watchdog that detaches it
once LIMIT s have passed, so nothing here waits without end. Tests that need no mount (a path
that is no mount, a socket that never answers) run against a temporary directory.
"""

import errno
import gc
import json
import socket
import threading
import time

import numpy as np
import pytest

from conftest import module_mount, Mount, id_of_pixels, load_recipe_module, loader_module, make_id_dataset, parse_ppm, prepfs_bin
from standins import MEAN, STD, v1, v2

LIMIT = 120.0  # seconds a mount may live before its watchdog detaches it
TIMEOUT = 30.0  # each Loader's: the longest the daemon may take to answer
CLASSES, PER_CLASS = 3, 8
SAMPLES = CLASSES * PER_CLASS
ALL_NAMES = sorted(f"c{i // PER_CLASS}/s{i:02}.jpg" for i in range(SAMPLES))

recipe = load_recipe_module().recipe
AUGMENTED = recipe(v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip()]))
VAL = recipe(v2.Compose([v2.Resize(40), v2.CenterCrop(32)]), name="val")
TV1 = recipe(v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(), v1.Normalize(MEAN, STD)]), name="tv1")
CONFIG = "seed: 3\n" + AUGMENTED + VAL + TV1[len("recipes:\n"):]


@pytest.fixture(scope="module")
def prepfs():
    return loader_module()


@pytest.fixture(scope="module")
def mounted(tmp_path_factory, fuse, prepfs):
    """The module's mount; its daemon must exit cleanly (status 0) when stopped at the end."""
    yield from module_mount(tmp_path_factory.mktemp("loader"), CONFIG, CLASSES, PER_CLASS, LIMIT)


def sample_id(name):
    """The id a sample's name says: c<class>/s<id>.jpg."""
    return int(name.rsplit("/s", 1)[1].split(".")[0])


def view_pixels(mount, view, name):
    """The HWC pixels of `name`'s file in the mount's `view`/ (a PPM)."""
    _, _, pixels = parse_ppm(mount.path(f"{view}/{name.rsplit('.', 1)[0]}.ppm").read_bytes())
    return pixels


def epoch(loader):
    """One epoch of `loader`: {name: (a copy of its image, its label)}, each name checked once."""
    out = {}
    for images, labels in loader:
        imgs, labs = np.from_dlpack(images), np.from_dlpack(labels)
        for i, name in enumerate(loader.names):
            assert name not in out, f"{name} served twice in one epoch"
            out[name] = (imgs[i].copy(), int(labs[i]))
        del images, labels, imgs, labs  # the slot goes back before the next batch
    return out


def ring_bytes(mount):
    return mount.stats()["loader"]["ring_bytes"]


def wait_for(what, condition, limit=10.0):
    """Waits until `condition()` holds, at most `limit` s; fails saying `what` otherwise."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {limit} s"
        time.sleep(0.02)


def test_an_epoch_yields_every_sample_exactly_once_its_pixels_and_label_those_of_its_name(mounted, prepfs):
    loader = prepfs.Loader(mounted.mountpoint, job="once", batch_size=5, timeout=TIMEOUT)
    assert (loader.samples, loader.classes, len(loader)) == (SAMPLES, ["c0", "c1", "c2"], 5)
    seen, batches = [], 0
    for images, labels in loader:
        imgs, labs = np.from_dlpack(images), np.from_dlpack(labels)
        batches += 1
        for i, name in enumerate(loader.names):
            found, distance = id_of_pixels(imgs[i])
            assert distance < 12, f"{name}: its pixels carry no id (distance {distance})"
            seen.append((name, found, int(labs[i])))
        del images, labels, imgs, labs
    assert batches == len(loader)
    assert sorted(name for name, _, _ in seen) == ALL_NAMES, "not every sample exactly once"
    for name, found, label in seen:
        assert found == sample_id(name), f"{name} holds sample {found}'s pixels"
        assert loader.classes[label] == name.split("/")[0], f"{name}: label {label}"
    assert mounted.stats()["loader"]["samples"] == SAMPLES


def test_two_loaders_of_one_job_share_its_epoch_each_sample_served_to_one_of_them_once(mounted, prepfs):
    a, b = (prepfs.Loader(mounted.mountpoint, job="ranks", batch_size=3, timeout=TIMEOUT) for _ in range(2))
    got = {a: [], b: []}
    iters = {a: iter(a), b: iter(b)}
    while iters:
        for loader in list(iters):  # one batch each in turn, as two ranks would
            try:
                images, _ = next(iters[loader])
            except StopIteration:
                del iters[loader]
                continue
            imgs = np.from_dlpack(images)
            got[loader] += [(name, id_of_pixels(imgs[i])[0]) for i, name in enumerate(loader.names)]
            del images, imgs
    names = sorted(name for served in got.values() for name, _ in served)
    assert names == ALL_NAMES, f"the two loaders were not served every sample once: {len(got[a])} + {len(got[b])}"
    assert got[a] and got[b], "one loader was served nothing"
    assert all(found == sample_id(name) for served in got.values() for name, found in served)


def test_batches_are_nhwc_uint8_of_the_views_size_with_int64_labels_and_a_short_last_batch(mounted, prepfs):
    loader = prepfs.Loader(mounted.mountpoint, job="shapes", batch_size=5, timeout=TIMEOUT)
    sizes = []
    for images, labels in loader:
        n = len(labels)
        sizes.append(n)
        assert (images.shape, images.dtype, labels.shape, labels.dtype) == ([n, 64, 64, 3], "uint8", [n], "int64")
        assert images.__dlpack_device__() == (1, 0)  # kDLCPU
        imgs, labs = np.from_dlpack(images), np.from_dlpack(labels)
        assert (imgs.shape, imgs.dtype, labs.shape, labs.dtype) == ((n, 64, 64, 3), np.uint8, (n,), np.int64)
        assert len(images) == n
        del images, labels, imgs, labs
    assert sizes == [5, 5, 5, 5, 4]


def test_drop_last_leaves_the_short_batch_out_and_len_counts_only_full_ones(mounted, prepfs):
    loader = prepfs.Loader(mounted.mountpoint, job="drop", batch_size=5, drop_last=True, timeout=TIMEOUT)
    assert len(loader) == 4
    assert [len(labels) for _, labels in loader] == [5, 5, 5, 5]


def test_a_loader_that_breaks_out_of_an_epoch_begins_a_whole_new_one_when_iterated_again(mounted, prepfs):
    # A loader alone on its job: the next iter() must not wait on the epoch it left (before:
    # a minute's wait on itself, past TIMEOUT, then only that epoch's rest).
    loader = prepfs.Loader(mounted.mountpoint, job="break", batch_size=5, timeout=TIMEOUT)
    for images, labels in loader:
        first = list(loader.names)
        break
    assert len(first) == 5
    del images, labels
    second = epoch(loader)
    assert sorted(second) == ALL_NAMES, "the epoch after a break is not a whole one"
    # Left part way again, after two batches; then two whole epochs.
    batches = iter(loader)
    next(batches), next(batches)
    assert sorted(epoch(loader)) == sorted(epoch(loader)) == ALL_NAMES
    loader.close()


def test_ranks_that_break_out_of_an_epoch_together_begin_the_next_together_and_split_it(mounted, prepfs):
    # Two loaders of one job in threads, as two data-parallel ranks stepping together (the
    # barriers): each leaves epoch 1 after one batch and iterates again. The first to ask waits
    # on the other, which ends epoch 1; both then split epoch 2, each sample to one of them.
    ranks = [prepfs.Loader(mounted.mountpoint, job="break-ranks", batch_size=3, timeout=TIMEOUT) for _ in range(2)]
    step = threading.Barrier(2, timeout=2 * TIMEOUT)  # a bound on a broken test, not a condition
    served, errors = {}, []

    def rank(k, loader):
        try:
            for _ in loader:
                step.wait()  # both in epoch 1, one batch each
                break
            names = []
            for n, (images, labels) in enumerate(loader):
                names += loader.names
                del images, labels
                if n == 0:
                    step.wait()  # both in epoch 2 before either serves it to its end
            served[k] = names
        except Exception as e:  # raised in the test's thread below
            step.abort()
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(k, loader), daemon=True) for k, loader in enumerate(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    assert served[0] and served[1], f"one rank was served nothing of epoch 2: {served}"
    assert sorted(served[0] + served[1]) == ALL_NAMES, "epoch 2 not split between the ranks, each sample once"
    for loader in ranks:
        loader.close()


def test_a_recipes_view_is_served_at_the_recipes_size_pixel_for_pixel_as_its_files(mounted, prepfs):
    loader = prepfs.Loader(mounted.mountpoint, job="val", view="val", batch_size=7, timeout=TIMEOUT)
    served = epoch(loader)
    assert sorted(served) == ALL_NAMES
    for name, (pixels, label) in served.items():
        assert pixels.shape == (32, 32, 3)
        assert np.array_equal(pixels, view_pixels(mounted, "val", name)), f"{name} differs from val/'s file"
        assert loader.classes[label] == name.split("/")[0]


def test_float32_normalized_batches_are_nchw_the_views_pixels_normalized_by_the_loaders_mean_and_std(mounted, prepfs):
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    loader = prepfs.Loader(mounted.mountpoint, job="f32", view="val", batch_size=6, dtype="float32-normalized",
                           mean=mean, std=std, timeout=TIMEOUT)
    seen = 0
    for images, _ in loader:
        assert images.dtype == "float32" and images.shape[1:] == [3, 32, 32]
        imgs = np.from_dlpack(images)
        assert imgs.dtype == np.float32
        for i, name in enumerate(loader.names):
            want = (view_pixels(mounted, "val", name) / 255.0 - np.array(mean)) / np.array(std)
            worst = float(np.abs(imgs[i] - want.transpose(2, 0, 1)).max())
            assert worst < 1e-5, f"{name}: off by {worst} from its pixels normalized"
            seen += 1
        del images, imgs
    assert seen == SAMPLES


def test_two_epochs_of_the_random_pipeline_are_new_draws_while_the_pipeline_without_chance_repeats(mounted, prepfs):
    loader = prepfs.Loader(mounted.mountpoint, job="draws", batch_size=8, timeout=TIMEOUT)
    first, second = epoch(loader), epoch(loader)
    assert sorted(first) == sorted(second) == ALL_NAMES
    for name in ALL_NAMES:
        assert id_of_pixels(first[name][0])[0] == id_of_pixels(second[name][0])[0] == sample_id(name)
    same = [name for name in ALL_NAMES if np.array_equal(first[name][0], second[name][0])]
    assert same == [], f"epoch 2 served epoch 1's crops of {same}"
    # The control: val/ has no chance in it, so the comparison above sees draws, not noise.
    fixed = prepfs.Loader(mounted.mountpoint, job="draws-val", view="val", batch_size=8, timeout=TIMEOUT)
    first, second = epoch(fixed), epoch(fixed)
    assert all(np.array_equal(first[name][0], second[name][0]) for name in ALL_NAMES)


def test_a_view_the_mount_has_not_or_whose_files_are_not_pixels_is_refused_saying_why(mounted, prepfs):
    with pytest.raises(RuntimeError) as raised:
        prepfs.Loader(mounted.mountpoint, job="views-nope", view="nope", timeout=TIMEOUT)
    message = str(raised.value)
    assert "no view `nope`" in message and "`val`" in message and "`augmented`" in message, message
    with pytest.raises(RuntimeError, match=r"takes 8-bit outputs .*tv1/ serves float32"):
        prepfs.Loader(mounted.mountpoint, job="views-tv1", view="tv1", timeout=TIMEOUT)


def test_iterating_a_closed_loader_raises_valueerror_and_a_batch_kept_past_close_stays_intact(mounted, prepfs):
    gc.collect()
    wait_for("the module's earlier loaders' rings given back", lambda: ring_bytes(mounted) == 0)
    with prepfs.Loader(mounted.mountpoint, job="closing", view="val", batch_size=4, timeout=TIMEOUT) as loader:
        assert not loader.closed and repr(loader).endswith(", open)")
        assert 'job="closing"' in repr(loader) and "samples=24, classes=3" in repr(loader)
        images, labels = next(iter(loader))
        kept = np.from_dlpack(images)
        names = loader.names
        assert ring_bytes(mounted) > 0
    assert loader.closed and repr(loader).endswith(", closed)")
    with pytest.raises(ValueError, match="closed"):
        iter(loader)
    with pytest.raises(ValueError, match="closed"):
        next(loader)
    loader.close()  # twice: nothing happens
    assert loader.closed
    # The batch kept past the block: still the view's pixels, its ring still the daemon's.
    for i, name in enumerate(names):
        assert np.array_equal(kept[i], view_pixels(mounted, "val", name)), name
    assert ring_bytes(mounted) > 0
    # Dropping the last view of it ends the connection: the ring is given back.
    del kept, images, labels
    wait_for("the ring given back once the kept batch was dropped", lambda: ring_bytes(mounted) == 0)


def test_a_batch_beyond_the_slots_held_alive_raises_an_error_saying_so_and_dropping_one_frees_it(mounted, prepfs):
    loader = prepfs.Loader(mounted.mountpoint, job="slots", batch_size=2, slots=2, timeout=TIMEOUT)
    batches = iter(loader)
    held = [next(batches), next(batches)]
    with pytest.raises(RuntimeError, match="all 2 slots are held by earlier batches still alive"):
        next(batches)
    del held[0]
    images, labels = next(batches)
    assert len(labels) == 2
    del images, labels, held
    loader.close()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dtype": "float16"}, 'dtype "float16"'),
        ({"device": "tpu"}, 'device "tpu"'),
        ({"view": "decoded"}, 'view "decoded"'),
        ({"view": "encoded"}, 'view "encoded"'),
        ({"std": (0.2, 0.0, 0.2)}, "std must be positive"),
    ],
    ids=["dtype", "device", "view_decoded", "view_encoded", "std"],
)
def test_an_argument_the_loader_cannot_take_is_refused_with_valueerror_before_it_looks_for_a_mount(prepfs, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        prepfs.Loader(tmp_path, job="j", timeout=5, **kwargs)


def test_a_path_that_is_no_mount_raises_oserror_naming_what_it_looked_for_at_once(prepfs, tmp_path):
    for path in (tmp_path, tmp_path / "missing"):
        started = time.monotonic()
        with pytest.raises(OSError, match=r"\.prepfs/stats\.json.*is a prepfs mount there\?"):
            prepfs.Loader(path, job="j", timeout=5)
        assert time.monotonic() - started < 5


def fake_mount(dir, socket_path):
    """A directory holding what prepfs.Loader reads to find a mount's socket."""
    (dir / ".prepfs").mkdir()
    (dir / ".prepfs" / "loader.json").write_text(json.dumps({"version": 1, "socket": str(socket_path)}))
    return dir


def test_a_socket_path_where_no_socket_is_raises_oserror_at_once(prepfs, tmp_path):
    mount = fake_mount(tmp_path, tmp_path / "gone.sock")
    started = time.monotonic()
    with pytest.raises(OSError) as raised:
        prepfs.Loader(mount, job="j", timeout=5)
    assert "No such file or directory" in str(raised.value), raised.value
    assert time.monotonic() - started < 5


def test_a_loader_json_without_a_socket_raises_oserror_saying_the_mount_has_no_loader_socket(prepfs, tmp_path):
    (tmp_path / ".prepfs").mkdir()
    (tmp_path / ".prepfs" / "loader.json").write_text('{"version": 1}')
    with pytest.raises(OSError, match="has no loader socket"):
        prepfs.Loader(tmp_path, job="j", timeout=5)


class SilentDaemon:
    """A socket that takes connections and then says nothing (or, with `hang_up`, closes each at
    once); every connection is closed after `limit` s whatever happens, so a loader that ignored
    its timeout gets an error there rather than hanging the suite."""

    def __init__(self, path, hang_up=False, limit=20.0):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(4)
        self.hang_up, self.limit, self.done = hang_up, limit, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.listener.settimeout(self.limit)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            if not self.hang_up:
                self.done.wait(self.limit)

    def close(self):
        self.done.set()
        self.listener.close()
        self.thread.join(timeout=self.limit)


def test_a_daemon_that_never_answers_raises_timeouterror_after_the_loaders_timeout(prepfs, tmp_path):
    daemon = SilentDaemon(tmp_path / "silent.sock")
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="did not answer in time"):
            prepfs.Loader(fake_mount(tmp_path, tmp_path / "silent.sock"), job="j", timeout=1)
        assert time.monotonic() - started < 10
    finally:
        daemon.close()


def test_a_daemon_that_hangs_up_raises_connectionerror(prepfs, tmp_path):
    daemon = SilentDaemon(tmp_path / "hangup.sock", hang_up=True)
    try:
        with pytest.raises(ConnectionError, match="closed the loader's connection"):
            prepfs.Loader(fake_mount(tmp_path, tmp_path / "hangup.sock"), job="j", timeout=5)
    finally:
        daemon.close()


def test_a_mount_that_goes_away_mid_epoch_makes_the_next_batch_raise_connectionerror(tmp_path, fuse, prepfs):
    # Once no daemon comes back within `reconnect` seconds (0: without trying), the next batch
    # raises, saying so.
    source = make_id_dataset(tmp_path / "idset", 2, 4)
    mount = Mount(prepfs_bin(), tmp_path, "seed: 1\n" + AUGMENTED, source, limit=LIMIT)
    try:
        at_once = prepfs.Loader(mount.mountpoint, job="u", batch_size=2, timeout=20, reconnect=0)
        retrying = prepfs.Loader(mount.mountpoint, job="v", batch_size=2, timeout=20, reconnect=1.5)
        batches = [iter(at_once), iter(retrying)]
        for loader in batches:
            images, _ = next(loader)
            del images
        status = mount.stop()
        assert status == 0, f"prepfs exited with {status} under a loader: {mount.log()}"
        started = time.monotonic()
        with pytest.raises(ConnectionError, match=r"was the mount unmounted\?"):
            next(batches[0])
        assert time.monotonic() - started < 10
        started = time.monotonic()
        with pytest.raises(ConnectionError, match=r"no daemon took it again within 1.5 s .*was the mount unmounted\?"):
            next(batches[1])
        assert 1.0 < time.monotonic() - started < 10
    finally:
        mount.stop()


def test_the_error_for_a_socket_path_where_no_socket_is_names_that_path_and_the_file_that_named_it(prepfs, tmp_path):
    mount = fake_mount(tmp_path, tmp_path / "gone.sock")
    with pytest.raises(FileNotFoundError) as raised:
        prepfs.Loader(mount, job="j", timeout=5)
    error = raised.value
    assert (error.errno, error.filename) == (errno.ENOENT, str(tmp_path / "gone.sock")), error
    assert "gone.sock" in str(error) and str(mount / ".prepfs" / "loader.json") in str(error), error


def test_a_socket_no_daemon_listens_on_raises_connectionrefusederror_naming_it(prepfs, tmp_path):
    path = tmp_path / "dead.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # bound, never listening: a connect is refused
    try:
        with pytest.raises(ConnectionRefusedError) as raised:
            prepfs.Loader(fake_mount(tmp_path, path), job="j", timeout=5)
    finally:
        dead.close()
    assert (raised.value.errno, raised.value.filename) == (errno.ECONNREFUSED, str(path)), raised.value
    assert "loader.json" in str(raised.value)


def test_a_daemon_that_stopped_accepting_connections_raises_timeouterror_after_the_loaders_timeout(prepfs, tmp_path):
    path = tmp_path / "full.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(64):  # fill the backlog: the next connect would block
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            try:
                filler.connect(str(path))
            except BlockingIOError:
                break
        else:
            pytest.skip("this kernel's listen backlog did not fill")
        got = {}

        def construct():
            try:
                prepfs.Loader(fake_mount(tmp_path, path), job="j", timeout=1)
            except Exception as e:
                got["error"] = e

        thread = threading.Thread(target=construct, daemon=True)
        thread.start()
        thread.join(3)
        blocked = thread.is_alive()
    finally:
        listener.close()  # a connect still blocked on it fails now (ECONNREFUSED)
        for filler in fillers:
            filler.close()
    thread.join(10)
    assert not blocked, "Loader(timeout=1) still blocked in connect after 3 s"
    error = got.get("error")
    assert isinstance(error, TimeoutError) and error.errno == errno.ETIMEDOUT, got
    assert "did not accept the connection" in str(error) and error.filename == str(path), error


@pytest.mark.parametrize("timeout", [float("inf"), None], ids=["inf", "none"])
def test_an_infinite_timeout_or_none_waits_without_a_limit(prepfs, tmp_path, timeout):
    # The daemon hangs up: the loader connected and waited for it (no timeout, no panic).
    daemon = SilentDaemon(tmp_path / "hangup.sock", hang_up=True)
    try:
        with pytest.raises(ConnectionError, match="closed the loader's connection"):
            prepfs.Loader(fake_mount(tmp_path, tmp_path / "hangup.sock"), job="j", timeout=timeout)
    finally:
        daemon.close()


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, 0, 0.0, float("-inf"), 1e300, 4e7],
                         ids=["nan", "negative", "zero", "zero_float", "minus_inf", "1e300", "past_a_year"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused_with_valueerror_naming_it_before_it_looks_for_a_mount(prepfs, tmp_path, timeout):
    with pytest.raises(ValueError, match=r"^timeout=.*or None \(or float\(\"inf\"\)\) to wait without a limit"):
        prepfs.Loader(tmp_path, job="j", timeout=timeout)


def test_npy_folder_reads_the_float32_recipe_view_as_imagefolder_would_every_sample_once(mounted):
    from test_folder import NpyFolder

    folder = NpyFolder(mounted.path("tv1"))
    assert folder.classes == [f"c{k}" for k in range(CLASSES)]
    names = [p[len(str(mounted.path("tv1"))) + 1:] for p, _ in folder.samples]
    assert names == [n.rsplit(".", 1)[0] + ".npy" for n in ALL_NAMES]
    for i, name in enumerate(names):
        array, target = folder[i]
        assert array.dtype == np.float32 and array.shape == (3, 32, 32), name
        assert target == int(name[1]) == folder.targets[i], name
        # The recipe has no chance in it: the file read again is the same array.
        np.testing.assert_array_equal(array, np.load(mounted.path(f"tv1/{name}")))
