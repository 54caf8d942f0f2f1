"""The state beyond the model's variables in a snapshot: random generators and the input position (in-process, real
TensorFlow), and snapshots of the older format (variables only)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tfdist.protocol.snapshot_file import END, LEN, MAGIC, ArraySpec, fingerprint
from tfdist.runtime.snapshots.format import SnapshotRefused, decode
from tfdist.runtime.snapshots.settings import SnapshotSettings
from tfdist.runtime.snapshots.store import SnapshotStore

SPECS = [ArraySpec("w:0", "<f4", (3,)), ArraySpec("iter:0", "<i8", ())]


def old_format_file(step: int, arrays: list[np.ndarray], version: int = 1) -> bytes:
    """A snapshot as tfdist wrote it before format 2: no "model" count, every array the model's."""
    import zlib

    header = json.dumps({"version": version, "step": step, "fingerprint": fingerprint(SPECS), "meta": {"epoch": 0},
                         "arrays": [[s.name, s.dtype, list(s.shape)] for s in SPECS]}).encode()
    body = header + b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
    return MAGIC + LEN.pack(len(header)) + body + LEN.pack(zlib.crc32(body) & 0xFFFFFFFF) + END


def test_an_old_format_snapshot_loads_as_variables_only(tmp_path):
    arrays = [np.array([1, 2, 3], np.float32), np.array(4, np.int64)]
    (tmp_path / "snap-000000000004.tfsnap").write_bytes(old_format_file(4, arrays))
    store = SnapshotStore(tmp_path)
    assert store.loadable(fingerprint(SPECS)) == [4]  # the same model matches the old file
    snap = store.load(4, fingerprint(SPECS))
    assert snap.version == 1 and snap.extras == {}
    assert [a.tolist() for a in snap.arrays] == [a.tolist() for a in arrays]


def test_a_newer_format_is_refused_with_one_line(tmp_path):
    data = old_format_file(4, [np.zeros(3, np.float32), np.array(4, np.int64)], version=99)
    with pytest.raises(SnapshotRefused, match="format 99 is newer"):
        decode(data, expect_step=4)


def test_extras_do_not_change_which_model_a_snapshot_matches(tmp_path):
    store = SnapshotStore(tmp_path)
    specs = SPECS + [ArraySpec("task:input:0", "|u1", (5,))]
    arrays = [np.zeros(3, np.float32), np.array(2, np.int64), np.frombuffer(b"state", np.uint8)]
    store.write(2, arrays, specs, {}, model_count=2)
    snap = store.load(2, fingerprint(SPECS))
    assert len(snap.arrays) == 2 and snap.extras["task:input:0"].tobytes() == b"state"
    with pytest.raises(SnapshotRefused, match="another model"):
        store.load(2, fingerprint(SPECS[:1]))


# --- real TensorFlow, in process ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


def loop_objects(tf, seed: int):
    """What a custom loop's step draws from: a tf.data iterator, the global generator, a tf-keras augmentation
    layer's own generator (tracked by no checkpoint), and a generator the checkpoint tracks."""
    tf_keras = pytest.importorskip("tf_keras")
    dataset = tf.data.Dataset.range(10_000).shuffle(64, seed=seed).batch(4).prefetch(2)
    flip = tf_keras.layers.RandomFlip(seed=seed)
    flip.build((None, 4, 4, 1))
    tracked = tf.random.Generator.from_seed(seed + 1)
    weight = tf.Variable(tf.zeros([3]))
    checkpoint = tf.train.Checkpoint(weight=weight, flip=flip, tracked=tracked)
    return dataset, flip, tracked, weight, checkpoint


def draw(tf, iterator, flip, tracked) -> dict[str, list]:
    image = tf.reshape(tf.range(16, dtype=tf.float32), [1, 4, 4, 1])
    return {"batch": next(iterator).numpy().tolist(),
            "global": tf.random.get_global_generator().uniform([4]).numpy().tolist(),
            "flip": [flip(image, training=True).numpy().ravel().tolist() for _ in range(4)],
            "tracked": tracked.normal([2]).numpy().tolist()}


def run_loop(tf, snapshots, iterator, flip, tracked, weight, steps: int, start: int = 0) -> list[dict]:
    draws = []
    for step in range(start + 1, start + steps + 1):
        draws.append(draw(tf, iterator, flip, tracked))
        weight.assign_add(tf.ones([3]))
        snapshots.step_done(step)
    return draws


@pytest.mark.slow
@pytest.mark.tf
def test_a_restored_loop_continues_every_random_stream_and_the_input(tf, tmp_path, capfd):
    from tfdist.runtime.snapshots.loop import LoopSnapshots

    settings = SnapshotSettings(enabled=True, directory=str(tmp_path), every=1)
    tf.random.set_global_generator(tf.random.Generator.from_seed(11))
    dataset, flip, tracked, weight, checkpoint = loop_objects(tf, 5)
    iterator = iter(dataset)
    first = LoopSnapshots(checkpoint, settings=settings, iterator=iterator)
    assert first.resume(0).source == "scratch"
    run_loop(tf, first, iterator, flip, tracked, weight, 6)
    first.close()
    uninterrupted = run_loop(tf, first, iterator, flip, tracked, weight, 3, start=6)  # what step 7.. draw

    # A restarted task: fresh objects from other seeds, a fresh iterator at the dataset's start.
    tf.random.set_global_generator(tf.random.Generator.from_seed(99))
    _, flip2, tracked2, weight2, checkpoint2 = loop_objects(tf, 6)
    fresh = iter(dataset)
    second = LoopSnapshots(checkpoint2, settings=settings, iterator=fresh)
    resumed = second.resume(0)
    assert (resumed.source, resumed.step) == ("snapshot", 6)
    assert weight2.numpy().tolist() == [6.0, 6.0, 6.0]
    after = run_loop(tf, second, fresh, flip2, tracked2, weight2, 3, start=6)
    second.close()
    for key in ("batch", "global", "flip", "tracked"):
        assert [d[key] for d in after] == [d[key] for d in uninterrupted], key
    assert after[0]["batch"] != next(iter(dataset)).numpy().tolist()  # not the dataset's start
    err = capfd.readouterr().err
    assert "tfdist: resume: from snapshot at step 6" in err
    assert "2 random generator(s), 1 input position(s)" in err  # the flip layer's and the global one
    assert "not restored" not in err and "not saved" not in err


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.parametrize("pipeline", ["from_generator", "py_function"])
def test_an_iterator_tensorflow_cannot_save_gives_one_line_and_the_rest_is_restored(tf, tmp_path, capfd, pipeline):
    from tfdist.runtime.snapshots.loop import LoopSnapshots

    settings = SnapshotSettings(enabled=True, directory=str(tmp_path), every=1)
    if pipeline == "from_generator":
        generated = tf.data.Dataset.from_generator(lambda: iter(range(1000)),
                                                   output_signature=tf.TensorSpec((), tf.int64)).batch(2)
    else:
        generated = tf.data.Dataset.range(1000).map(lambda x: tf.py_function(lambda y: y * 2, [x], tf.int64))
    tf.random.set_global_generator(tf.random.Generator.from_seed(21))
    _, flip, tracked, weight, checkpoint = loop_objects(tf, 7)
    iterator = iter(generated)
    first = LoopSnapshots(checkpoint, settings=settings, iterator=iterator)
    first.resume(0)
    run_loop(tf, first, iterator, flip, tracked, weight, 4)
    first.close()
    expected = tf.random.get_global_generator().uniform([4]).numpy().tolist()
    lines = [line for line in capfd.readouterr().err.splitlines() if "input position" in line]
    assert len(lines) == 1, lines
    assert re.fullmatch(r"tfdist: snapshots: the input position is not saved \(\w[^()]*\): a restored run "
                        r"restarts that iterator; the rest is snapshotted", lines[0]), lines[0]

    tf.random.set_global_generator(tf.random.Generator.from_seed(98))
    _, _, _, weight2, checkpoint2 = loop_objects(tf, 8)
    second = LoopSnapshots(checkpoint2, settings=settings, iterator=iter(generated))
    assert second.resume(0).step == 4 and weight2.numpy().tolist() == [4.0] * 3
    assert tf.random.get_global_generator().uniform([4]).numpy().tolist() == expected
    second.close()


@pytest.mark.slow
@pytest.mark.tf
def test_a_distributed_iterator_is_named_in_one_line(tf, tmp_path, capfd):
    from tfdist.runtime.snapshots.extras import ExtraState

    strategy = tf.distribute.get_strategy()
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    iterator = iter(mirrored.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(2)))
    extras = ExtraState([], iterators=[iterator], strategy=strategy)
    assert extras.iterators == []
    assert "the input position is not saved (a DistributedIterator cannot be serialized by TensorFlow" in \
        capfd.readouterr().err


def test_an_old_format_snapshot_restores_no_extras_and_says_so(capfd):
    from tfdist.runtime.snapshots.extras import ExtraState

    extras = ExtraState.__new__(ExtraState)  # restore() of an old file reads nothing of the task's state
    extras.restore(4, 1, {}, {})
    assert capfd.readouterr().err.strip() == ("tfdist: resume: the snapshot of step 4 is from an older tfdist "
                                              "(variables only): random generators and the input position start "
                                              "afresh")


def test_one_tasks_state_is_not_restored_into_a_job_of_several_tasks_and_says_so(capfd):
    from tfdist.runtime.snapshots.extras import ExtraState

    extras = ExtraState.__new__(ExtraState)
    extras.replicated, extras.tasks, extras.iterators = [], 2, []
    extras.restore(9, 2, {"task:input:0": np.frombuffer(b"x", np.uint8)}, {"tasks": 1})
    assert capfd.readouterr().err.strip() == ("tfdist: resume: the snapshot of step 9 holds one task's global random "
                                              "generator and input position, not restored in a job of 2 tasks: they "
                                              "start afresh")


@pytest.mark.slow
@pytest.mark.tf
def test_an_object_graph_that_cannot_be_walked_costs_the_layer_generators_only(tf, capfd):
    from tfdist.runtime.snapshots.extras import ExtraState

    class Unwalkable:  # TrackableView refuses what is not trackable
        pass

    extras = ExtraState([], root=Unwalkable(), strategy=tf.distribute.get_strategy())
    assert extras.replicated == []
    assert capfd.readouterr().err.startswith("tfdist: snapshots: the layers' random generators are not saved (")


@pytest.mark.slow
@pytest.mark.tf
def test_an_iterator_of_another_pipeline_is_not_restored_and_says_so(tf, tmp_path, capfd):
    from tfdist.runtime.snapshots.loop import LoopSnapshots

    settings = SnapshotSettings(enabled=True, directory=str(tmp_path), every=1)
    weight = tf.Variable(tf.zeros([3]))
    iterator = iter(tf.data.Dataset.range(100).shuffle(10, seed=1).batch(4))
    first = LoopSnapshots(tf.train.Checkpoint(weight=weight), settings=settings, iterator=iterator)
    first.resume(0)
    for step in (1, 2):
        next(iterator)
        first.step_done(step)
    first.close()
    capfd.readouterr()

    other = iter(tf.data.Dataset.from_tensor_slices(tf.ones([50, 2])).map(lambda x: x * 2).batch(3))
    second = LoopSnapshots(tf.train.Checkpoint(weight=weight), settings=settings, iterator=other)
    assert second.resume(0).step == 2
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("tfdist: resume: the input")]
    assert len(lines) == 1 and lines[0].startswith("tfdist: resume: the input position of iterator 0 is not "
                                                   "restored ("), lines
    assert next(other).numpy().tolist() == [[2.0, 2.0]] * 3  # starts afresh
    second.close()
