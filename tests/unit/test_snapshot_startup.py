"""What snapshots cost the training thread at start (issue 36): the copy function compiles off the training thread,
an automatic cadence pays for its start-up before its first copy, a fixed one copies when told, and the session
prints what it cost (in-process, real TensorFlow)."""
from __future__ import annotations

import pytest

from tfdist.runtime.snapshots.settings import SnapshotSettings
from tfdist.runtime.snapshots.store import SnapshotStore


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


def session_for(tf, tmp_path, every):
    from tfdist.runtime.snapshots.session import SnapshotSession
    from tfdist.runtime.snapshots.variables import TrainingVariables

    weight = tf.Variable(tf.zeros([3]))
    settings = SnapshotSettings(enabled=True, directory=str(tmp_path), every=every)
    session = SnapshotSession(TrainingVariables([weight]), tf.distribute.get_strategy(), settings)
    session.resume(0)
    assert session.start_writing()
    return session, weight


@pytest.mark.slow
@pytest.mark.tf
def test_an_automatic_cadence_takes_no_copy_and_compiles_nothing_before_training_paid_for_its_start_up(
        tf, tmp_path, capfd):
    session, weight = session_for(tf, tmp_path, every=None)
    assert session.cadence.startup > 0  # the resume's agreement and the folder's claim are counted
    for step in (1, 2, 3):  # back-to-back steps of microseconds cannot pay for milliseconds of start-up
        weight.assign_add(tf.ones([3]))
        session.step_done(step)
    # The copy function's XLA compile (a background thread, whose CPU time a small machine takes from training) has
    # not started: a short job never pays for it. Before: compiled at start_writing.
    assert session.variables._warmed is None
    session.close()
    assert SnapshotStore(tmp_path).steps() == []  # before: copies at steps 1, 2 and 3
    last = capfd.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("tfdist: snapshots cost ") and ": start-up " in last and "0 copies" in last, last


@pytest.mark.slow
@pytest.mark.tf
def test_an_automatic_cadence_compiles_when_its_first_copy_is_due_and_copies_once_compiled(tf, tmp_path):
    session, weight = session_for(tf, tmp_path, every=None)
    session.step_done(1)
    session.cadence.trained = 100.0  # as if 100 s of steps had paid for the start-up: the first copy is due
    weight.assign_add(tf.ones([3]))
    session.step_done(2)
    assert session.variables._warmed is not None  # compiling on its own thread; no copy on this one meanwhile
    assert session.variables._warmed.wait(60)
    session.step_done(3)
    session.close()
    store = SnapshotStore(tmp_path)
    assert store.steps() == [3] and store.load(3).arrays[0].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.slow
@pytest.mark.tf
def test_a_fixed_cadence_copies_at_its_first_step_once_the_background_compile_is_done(tf, tmp_path, capfd):
    session, weight = session_for(tf, tmp_path, every=1)
    assert session.variables._warmed is not None  # compiling on its own thread, not on this one
    weight.assign_add(tf.ones([3]))
    session.step_done(1)  # waits for the compile if it is still under way
    session.close()
    store = SnapshotStore(tmp_path)
    assert store.steps() == [1]
    assert store.load(1).arrays[0].tolist() == [1.0, 1.0, 1.0]
    assert "1 copies" in capfd.readouterr().err.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.tf
def test_a_failed_warm_up_turns_snapshots_off_with_one_line(tf, tmp_path, capfd):
    session, weight = session_for(tf, tmp_path, every=1)
    session.variables._warmed.wait(60)
    session.variables.warm_up_error = RuntimeError("no compiler here")
    session.step_done(1)
    err = capfd.readouterr().err
    assert "tfdist: snapshots off: the host copy failed: RuntimeError: no compiler here" in err
    assert session.writer is None and SnapshotStore(tmp_path).steps() == []
    session.step_done(2)  # training goes on
