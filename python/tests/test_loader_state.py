"""prepfs.Loader's saved state and its reconnection (issue 53), against real mounts made by the
binary under test (PREPFS_BIN) of the id-coded dataset (3 classes of 8 samples, each sample's id
in its pixels):

- `state_dict()` / `load_state_dict()` in the shape of torchdata's StatefulDataLoader: a
  training run restarted from its checkpoint resumes its epoch, each sample of the epoch once
  over both runs; a state taken at an epoch's end resumes with a whole next epoch (torchdata
  issue #1437); `load_state_dict` after iteration began, or with a state of another job, view,
  dataset or version, is refused.
- A loader whose daemon is killed and started again on the same socket reconnects and goes on
  with the same epoch, each sample once, the training loop seeing no error.

Every Loader has a timeout and each mount a watchdog, so nothing here waits without end.
"""

import os
import signal
import json
import pickle
import threading
import time

import numpy as np
import pytest

from conftest import module_mount, Mount, id_of_pixels, load_recipe_module, loader_module, make_id_dataset, prepfs_bin
from standins import v2

LIMIT = 120.0  # seconds a mount may live before its watchdog detaches it
TIMEOUT = 30.0  # each Loader's: the longest the daemon may take to answer
CLASSES, PER_CLASS = 3, 8
SAMPLES = CLASSES * PER_CLASS
ALL_NAMES = sorted(f"c{i // PER_CLASS}/s{i:02}.jpg" for i in range(SAMPLES))

recipe = load_recipe_module().recipe
AUGMENTED = recipe(v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()]))
VAL = recipe(v2.Compose([v2.Resize(40), v2.CenterCrop(32)]), name="val")
CONFIG = "seed: 5\n" + AUGMENTED + VAL


@pytest.fixture(scope="module")
def prepfs():
    return loader_module()


@pytest.fixture(scope="module")
def mounted(tmp_path_factory, fuse, prepfs):
    """The module's mount; its daemon must exit cleanly (status 0) when stopped at the end."""
    yield from module_mount(tmp_path_factory.mktemp("loader-state"), CONFIG, CLASSES, PER_CLASS, LIMIT)


def sample_id(name):
    return int(name.rsplit("/s", 1)[1].split(".")[0])


def take(loader, batches):
    """The names of the next batch of the iterator `batches`, each image's pixels checked to be
    its name's sample."""
    images, labels = next(batches)
    imgs = np.from_dlpack(images)
    names = list(loader.names)
    for i, name in enumerate(names):
        found, distance = id_of_pixels(imgs[i])
        assert distance < 12 and found == sample_id(name), f"{name}: its pixels are sample {found}'s"
    del images, labels, imgs
    return names


def rest(loader, batches):
    """The names of every batch left in `batches` (pixels checked)."""
    names = []
    while True:
        try:
            names += take(loader, batches)
        except StopIteration:
            return names


def epoch(loader):
    return rest(loader, iter(loader))


def once(names):
    """Fails unless `names` is every sample, each once."""
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"served twice: {duplicates}"
    assert sorted(names) == ALL_NAMES, f"missing: {sorted(set(ALL_NAMES) - set(names))}"


def connections_closed(mount):
    """Waits until the daemon has seen every loader connection end (as a restarted training
    process finds it: its old connections died with it)."""
    deadline = time.monotonic() + 10
    while mount.stats()["loader"]["open_connections"] != 0:
        assert time.monotonic() < deadline, "the daemon still counts a loader connection"
        time.sleep(0.02)


def test_a_loader_resumed_from_state_dict_sees_the_rest_of_its_epoch_exactly_once(mounted, prepfs):
    first = prepfs.Loader(mounted.mountpoint, job="resume", batch_size=5, timeout=TIMEOUT)
    fresh = first.state_dict()
    assert (fresh["version"], fresh["job"], fresh["view"], fresh["samples"]) == (1, "resume", "augmented", SAMPLES)
    assert (fresh["epoch"], fresh["epoch_ended"], fresh["samples_yielded"]) == (0, False, 0)
    batches = iter(first)
    yielded = take(first, batches) + take(first, batches)
    # The checkpoint: a plain dict, through JSON and pickle unchanged.
    state = first.state_dict()
    assert json.loads(json.dumps(state)) == state and pickle.loads(pickle.dumps(state)) == state
    assert (state["epoch"], state["epoch_ended"], state["samples_yielded"]) == (1, False, 10)
    # One more batch the daemon served after the checkpoint: the crash loses it.
    lost = take(first, batches)
    first.close()
    connections_closed(mounted)

    second = prepfs.Loader(mounted.mountpoint, job="resume", batch_size=5, timeout=TIMEOUT)
    second.load_state_dict(json.loads(json.dumps(state)))
    assert second.state_dict() == state, "a loaded state is the state until the loader goes on"
    remaining = epoch(second)
    assert set(lost) <= set(remaining), "the batch served after the checkpoint is served again"
    once(yielded + remaining)
    after = second.state_dict()
    assert (after["epoch"], after["epoch_ended"], after["samples_yielded"]) == (1, True, SAMPLES)
    # The epoch after it is whole, numbered on.
    once(epoch(second))
    assert second.state_dict()["epoch"] == 2
    second.close()


def test_a_state_taken_at_the_end_of_an_epoch_resumes_with_a_full_next_epoch(mounted, prepfs):
    # torchdata #1437: a state taken after an epoch's last batch (before or after its
    # StopIteration) must resume with the next epoch, whole: not an empty one, nothing skipped.
    first = prepfs.Loader(mounted.mountpoint, job="at-end", batch_size=5, timeout=TIMEOUT)
    batches = iter(first)
    names = []
    for _ in range(len(first)):
        names += take(first, batches)
    once(names)
    at_last_batch = first.state_dict()
    assert (at_last_batch["epoch"], at_last_batch["epoch_ended"], at_last_batch["samples_yielded"]) == (1, True, SAMPLES)
    with pytest.raises(StopIteration):
        next(batches)
    assert first.state_dict() == at_last_batch
    first.close()
    for state in (at_last_batch, json.loads(json.dumps(at_last_batch))):
        connections_closed(mounted)
        resumed = prepfs.Loader(mounted.mountpoint, job="at-end", batch_size=5, timeout=TIMEOUT)
        resumed.load_state_dict(state)
        once(epoch(resumed))
        assert resumed.state_dict()["epoch"] == 2
        resumed.close()
    # A state taken after `iter()` began the next epoch, before its first batch: epoch 2, whole.
    connections_closed(mounted)
    again = prepfs.Loader(mounted.mountpoint, job="at-end-2", batch_size=5, timeout=TIMEOUT)
    once(epoch(again))
    iter(again)
    begun = again.state_dict()
    assert (begun["epoch"], begun["epoch_ended"], begun["samples_yielded"]) == (2, False, 0)
    again.close()
    connections_closed(mounted)
    resumed = prepfs.Loader(mounted.mountpoint, job="at-end-2", batch_size=5, timeout=TIMEOUT)
    resumed.load_state_dict(begun)
    once(epoch(resumed))
    assert resumed.state_dict()["epoch"] == 2
    resumed.close()


def test_load_state_dict_after_iteration_began_is_refused(mounted, prepfs):
    source = prepfs.Loader(mounted.mountpoint, job="late-load", batch_size=5, timeout=TIMEOUT)
    state = source.state_dict()
    loader = prepfs.Loader(mounted.mountpoint, job="late-load", batch_size=5, timeout=TIMEOUT)
    batches = iter(loader)
    with pytest.raises(RuntimeError, match=r"load_state_dict comes before the loader is iterated.*make a new prepfs\.Loader"):
        loader.load_state_dict(state)
    yielded = take(loader, batches)
    before = loader.state_dict()
    with pytest.raises(RuntimeError, match="load_state_dict comes before the loader is iterated"):
        loader.load_state_dict(state)
    assert loader.state_dict() == before, "a refused load changed the loader"
    once(yielded + rest(loader, batches))
    loader.close()
    source.close()
    with pytest.raises(ValueError, match="closed"):
        source.load_state_dict(state)


def test_a_state_of_another_job_view_dataset_or_version_is_refused_and_changes_nothing(mounted, prepfs):
    taken = prepfs.Loader(mounted.mountpoint, job="theirs", batch_size=5, timeout=TIMEOUT)
    batches = iter(taken)
    take(taken, batches)
    state = taken.state_dict()
    taken.close()
    loader = prepfs.Loader(mounted.mountpoint, job="mine", batch_size=5, timeout=TIMEOUT)
    with pytest.raises(ValueError, match=r'of job "theirs", not of this loader\'s job "mine"'):
        loader.load_state_dict(state)
    val = prepfs.Loader(mounted.mountpoint, job="theirs", view="val", batch_size=5, timeout=TIMEOUT)
    with pytest.raises(ValueError, match=r'of view "augmented", not of this loader\'s view "val"'):
        val.load_state_dict(state)
    val.close()
    mine = dict(state, job="mine")
    for changed, message in [
        ({"dataset": "0000000000000000"}, "of another dataset"),
        ({"samples": SAMPLES + 1}, "of another dataset"),
        ({"version": 2}, "of version 2; this prepfs reads version 1"),
        ({"yielded": "not a bitset"}, "yielded samples cannot be read"),
        ({"samples_yielded": 3}, "says 3 samples yielded but holds 5"),
    ]:
        with pytest.raises(ValueError, match=message):
            loader.load_state_dict(dict(mine, **changed))
    with pytest.raises(ValueError, match="it has no `version`"):
        loader.load_state_dict({})
    with pytest.raises(ValueError, match="not a prepfs.Loader state"):
        loader.load_state_dict([1, 2, 3])
    # Refused, it changed nothing: the loader walks a fresh epoch, whole; then takes the state.
    assert loader.state_dict()["epoch"] == 0
    once(epoch(loader))
    loader.close()
    connections_closed(mounted)
    resumed = prepfs.Loader(mounted.mountpoint, job="mine", batch_size=5, timeout=TIMEOUT)
    resumed.load_state_dict(mine)
    remaining = epoch(resumed)
    assert len(remaining) == SAMPLES - 5
    resumed.close()


def test_a_loader_whose_daemon_is_restarted_reconnects_and_goes_on_with_its_epoch_each_sample_once(tmp_path, fuse, prepfs):
    # The mount's daemon is killed part way through an epoch (as a crash would end it) and a new
    # one started on the same socket a moment later (as a supervisor restarts it): the loader
    # reconnects, resumes its epoch with what it yielded, and the loop sees no error. Then again
    # between two epochs.
    source = make_id_dataset(tmp_path / "idset", CLASSES, PER_CLASS)
    socket_path = tmp_path / "loader.sock"
    config = CONFIG + f"loader: {{ socket: {socket_path} }}\n"
    mounts = []

    def start(name):
        (tmp_path / name).mkdir()
        mount = Mount(prepfs_bin(), tmp_path / name, config, source, limit=LIMIT)
        mounts.append(mount)
        return mount

    def kill(mount):
        # The whole mount dies at once: its server (stats.json's pid) and its supervisor (the
        # `prepfs mount` process), so that nothing of it serves on.
        server = mount.stats()["pid"]
        mount.proc.kill()
        os.kill(server, signal.SIGKILL)
        mount.proc.wait(timeout=30)
        mount.stop()  # detaches the dead mount

    def start_later(name, delay):
        started = threading.Event()

        def run():
            time.sleep(delay)
            try:
                start(name)
            finally:
                started.set()

        threading.Thread(target=run, daemon=True).start()
        return started

    try:
        first = start("one")
        loader = prepfs.Loader(first.mountpoint, job="restarted", batch_size=5, timeout=TIMEOUT)
        batches = iter(loader)
        yielded = take(loader, batches) + take(loader, batches)
        kill(first)
        # The daemon is gone for a second before its successor listens on the same socket.
        second_up = start_later("two", 1.0)
        started = time.monotonic()
        after = rest(loader, batches)
        assert time.monotonic() - started < 25, "the reconnection took too long"
        assert second_up.wait(30) and len(mounts) == 2, "the epoch went on without a second daemon"
        once(yielded + after)
        state = loader.state_dict()
        assert (state["epoch"], state["epoch_ended"], state["samples_yielded"]) == (1, True, SAMPLES)
        assert mounts[1].stats()["loader"]["samples"] == SAMPLES - 10, "the new daemon served more than the rest"

        # Between two epochs: the next iter() reconnects and begins epoch 2, numbered on, whole.
        kill(mounts[1])
        third_up = start_later("three", 0.5)
        once(epoch(loader))
        assert third_up.wait(30) and len(mounts) == 3
        assert loader.state_dict()["epoch"] == 2
        loader.close()
    finally:
        statuses = [mount.stop() for mount in mounts]
    assert statuses[-1] == 0, f"the last daemon exited with {statuses[-1]}: {mounts[-1].log()}"


def test_a_loader_whose_daemon_is_restarted_with_another_dataset_raises_saying_so(tmp_path, fuse, prepfs):
    socket_path = tmp_path / "loader.sock"
    config = CONFIG + f"loader: {{ socket: {socket_path} }}\n"
    mounts = []
    try:
        (tmp_path / "one").mkdir()
        mounts.append(Mount(prepfs_bin(), tmp_path / "one", config, make_id_dataset(tmp_path / "a", CLASSES, PER_CLASS), limit=LIMIT))
        loader = prepfs.Loader(mounts[0].mountpoint, job="swapped", batch_size=5, timeout=TIMEOUT, reconnect=20)
        batches = iter(loader)
        take(loader, batches)
        server = mounts[0].stats()["pid"]
        mounts[0].proc.kill()
        os.kill(server, signal.SIGKILL)
        mounts[0].proc.wait(timeout=30)
        mounts[0].stop()
        (tmp_path / "two").mkdir()
        mounts.append(Mount(prepfs_bin(), tmp_path / "two", config, make_id_dataset(tmp_path / "b", 2, 4), limit=LIMIT))
        with pytest.raises(RuntimeError, match="the restarted mount serves another dataset"):
            next(batches)
        loader.close()
    finally:
        for mount in mounts:
            mount.stop()


def test_a_loader_goes_on_with_its_epoch_when_the_supervised_server_is_killed(tmp_path, fuse, prepfs):
    # The real case under supervision (the default): the serving process dies (SIGKILL), the
    # `prepfs mount` process keeps the mount and the loader socket listening and starts a new
    # server; the loader reconnects to the same mount and the loop sees no error.
    source = make_id_dataset(tmp_path / "idset", CLASSES, PER_CLASS)
    mount = Mount(prepfs_bin(), tmp_path, CONFIG, source, limit=LIMIT)
    try:
        loader = prepfs.Loader(mount.mountpoint, job="supervised", batch_size=5, timeout=TIMEOUT)
        batches = iter(loader)
        yielded = take(loader, batches) + take(loader, batches)
        server = mount.stats()["pid"]
        assert server != mount.proc.pid, "the mount's server is the supervisor's child"
        os.kill(server, signal.SIGKILL)
        after = rest(loader, batches)
        once(yielded + after)
        assert mount.stats()["pid"] != server, "a new server serves"
        loader.close()
    finally:
        status = mount.stop()
    assert status == 0, f"prepfs exited with {status}: {mount.log()}"
