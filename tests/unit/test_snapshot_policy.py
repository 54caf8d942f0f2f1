"""The pure snapshot rules: which state a restarted group resumes from, the automatic interval, the size check."""
from __future__ import annotations

import pytest

from tfdist.errors import UsageError
from tfdist.runtime.snapshots.policy import (CHECKPOINT, SCRATCH, SNAPSHOT, Cadence, Resume, choose_resume, fits,
                                             interval_for, refusal)
from tfdist.runtime.snapshots.settings import settings_from_env


@pytest.mark.parametrize("loadable, checkpoint, expected", [
    # one replica, snapshot newer than the checkpoint
    ([[12, 11]], 10, Resume(SNAPSHOT, 12)),
    # every replica has 12: the newest common step wins
    ([[12, 11], [12, 11], [12]], 0, Resume(SNAPSHOT, 12)),
    # a replica whose machine only got 11 written: 12 would mix steps, 11 is taken
    ([[12, 11], [11, 10]], 0, Resume(SNAPSHOT, 11)),
    # no step in common (a machine's snapshots lag behind by more than it keeps): the checkpoint
    ([[12, 11], [9, 8]], 5, Resume(CHECKPOINT, 5)),
    # the checkpoint is as new as the snapshot: it is already loaded, keep it
    ([[20, 19]], 20, Resume(CHECKPOINT, 20)),
    # the checkpoint is newer (snapshots were off for a while)
    ([[12]], 40, Resume(CHECKPOINT, 40)),
    # a replica (a machine that joined) with no snapshot at all
    ([[12, 11], []], 0, Resume(SCRATCH, 0)),
    ([[12, 11], []], 7, Resume(CHECKPOINT, 7)),
    # nothing anywhere
    ([[], []], 0, Resume(SCRATCH, 0)),
    ([], 0, Resume(SCRATCH, 0)),
    # order does not matter
    ([[3, 7, 5], [5, 3, 7]], 0, Resume(SNAPSHOT, 7)),
])
def test_choose_resume_picks_newest_step_every_replica_can_load(loadable, checkpoint, expected):
    assert choose_resume(loadable, checkpoint) == expected


def test_resume_says_which_source_and_step():
    assert choose_resume([[8]], 0).describe() == "tfdist: resume: from snapshot at step 8"
    assert choose_resume([[]], 4).describe() == "tfdist: resume: from checkpoint at step 4"
    assert "scratch" in choose_resume([[]], 0).describe()


@pytest.mark.parametrize("copy, step, budget, expected", [
    (0.0001, 0.010, 0.02, 1),    # 1 % of a step: every step
    (0.0002, 0.010, 0.02, 1),    # exactly the budget
    (0.0003, 0.010, 0.02, 2),    # 3 % -> every other step is 1.5 %
    (0.0010, 0.005, 0.02, 10),   # 20 % -> every 10th
    (0.5, 0.001, 0.02, 1000),    # capped
    (0.0, 0.01, 0.02, 1),
    (0.001, 0.0, 0.02, 1000),
])
def test_interval_keeps_the_copy_within_budget(copy, step, budget, expected):
    assert interval_for(copy, step, budget) == expected


def test_cadence_measures_before_deciding_and_follows_the_medians():
    cadence = Cadence()
    assert cadence.every == 1
    cadence.step_took(0.010)
    cadence.copy_took(0.002)
    assert cadence.every == 1  # too few samples
    for _ in range(3):
        cadence.step_took(0.010)
        cadence.copy_took(0.002)
    assert cadence.every == 10
    assert not cadence.due(9) and not cadence.due(10)  # the four learning copies (8 ms) are not yet paid for
    for _ in range(36):  # 0.4 s of steps in all: 2 % of it is the 8 ms spent
        cadence.step_took(0.010)
    assert not cadence.due(9) and cadence.due(10)


# (start-up s, [(step s, copy s or None), ...], expected due(1) after them): an automatic cadence is due only once
# the step time so far pays for its start-up and copies within the 2 % budget.
@pytest.mark.parametrize("startup, events, expected", [
    (0.0, [], True),                                  # nothing spent yet: the first step may copy
    (0.1, [], False),                                 # 0.1 s of start-up needs 5 s of steps first
    (0.1, [(0.01, None)] * 499, False),               # 4.99 s of steps
    (0.1, [(0.01, None)] * 501, True),                # 5.01 s: paid
    (0.0, [(0.01, 0.001)], False),                    # a 1 ms copy after one 10 ms step: 10 %
    (0.0, [(0.01, 0.001)] + [(0.01, None)] * 4, True),  # 50 ms of steps pay for it
    (0.05, [(0.01, 0.001)] * 3 + [(0.01, None)] * 270, True),   # 0.053 s spent, 2.73 s of steps pay for it
    (0.05, [(0.01, 0.001)] * 3 + [(0.01, None)] * 260, False),  # 2.63 s of steps: not yet
])
def test_automatic_cadence_counts_its_start_up_and_copies_in_its_budget(startup, events, expected):
    cadence = Cadence(max_every=1)  # the interval stays 1: only the budget decides
    cadence.startup_took(startup)
    for step, copy in events:
        cadence.step_took(step)
        if copy is not None:
            cadence.copy_took(copy)
    assert cadence.due(1) is expected


def test_fixed_cadence_ignores_the_start_up_too():
    cadence = Cadence(fixed=2)
    cadence.startup_took(10.0)
    assert not cadence.due(1) and cadence.due(2)


def test_breakdown_says_what_snapshots_cost_against_the_step_time():
    cadence = Cadence()
    cadence.startup_took(0.08)
    for _ in range(4):
        cadence.step_took(0.5)
        cadence.copy_took(0.002)
    assert cadence.breakdown() == ("tfdist: snapshots cost 0.088s of 2.000s of steps (4.4%): start-up 0.080s, "
                                   "4 copies 0.008s, 2.0 ms each; every 1 step(s)")
    assert Cadence(fixed=5).breakdown() == ("tfdist: snapshots cost 0.000s of 0.000s of steps: start-up 0.000s, "
                                            "0 copies 0.000s; every 5 step(s) (fixed)")


def test_fixed_cadence_ignores_measurements():
    cadence = Cadence(fixed=1)
    for _ in range(5):
        cadence.step_took(0.001)
        cadence.copy_took(0.1)
    assert cadence.every == 1 and cadence.due(1)


def test_fits_needs_room_for_two_kept_and_one_being_written():
    assert fits(100, 300) and not fits(100, 299)
    line = refusal(200 * 2**20, 500 * 2**20, "/dev/shm/x")
    assert "\n" not in line and "200.0 MiB" in line and "500.0 MiB" in line and "TFDIST_SNAPSHOTS=0" in line


def test_settings_from_env():
    assert settings_from_env({}).active is False  # no launcher folder: off
    on = settings_from_env({"TFDIST_SNAPSHOT_DIR": "/dev/shm/tfdist-x"})
    assert on.active and on.every is None
    assert not settings_from_env({"TFDIST_SNAPSHOT_DIR": "/d", "TFDIST_SNAPSHOTS": "0"}).active
    assert not settings_from_env({"TFDIST_SNAPSHOT_DIR": "/d"}, enabled=False).active
    assert settings_from_env({"TFDIST_SNAPSHOT_DIR": "/d", "TFDIST_SNAPSHOT_EVERY": "3"}).every == 3
    with pytest.raises(UsageError, match="TFDIST_SNAPSHOT_EVERY"):
        settings_from_env({"TFDIST_SNAPSHOT_EVERY": "0"})
    with pytest.raises(UsageError, match="TFDIST_SNAPSHOT_EVERY"):
        settings_from_env({"TFDIST_SNAPSHOT_EVERY": "often"})
