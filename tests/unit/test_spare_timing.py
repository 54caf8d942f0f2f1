"""When warm spares start (tfdist.launch.local.spare_timing) as tables: snapshots and a pace in, yes or no out; no
processes, no clock."""
from __future__ import annotations

import pytest

from tfdist.launch.local import spare_timing
from tfdist.launch.local.snapshot import GroupSnapshot, TaskView
from tfdist.launch.local.spare_timing import Pace, pace_of, seconds_left, spares_due
from tfdist.protocol import HeartbeatRecord

AFTER, WORTH = 30.0, 20.0


def group(step: int | None = 50, total: int | None = None, progressed: bool = True, elapsed: float = 5.0,
          beats: bool = True, roles: tuple[str, ...] = ("worker", "worker")) -> GroupSnapshot:
    views = []
    for index, role in enumerate(roles):
        beat = HeartbeatRecord(step=step, time=0.0, total_steps=total) if beats else None
        views.append(TaskView(name=f"{role}:{index}", task_type=role, task_index=index, pid=100 + index,
                              heartbeat=beat, heartbeat_age=0.1 if beats else None,
                              progressed=progressed and beats))
    return GroupSnapshot(tasks=tuple(views), elapsed=elapsed)


# (case, snapshot, pace, now, due)
CASES = [
    # The short digits job: 90 steps at 25 steps/s, 2 s in: 1.6 s left, never worth two imports.
    ("short job with a known length", group(step=50, total=90), Pace(since=0.0, step=0), 2.0, False),
    ("short job, slow start past spares_after", group(step=50, total=90, elapsed=AFTER + 5), Pace(0.0, 0), 2.0,
     False),
    # 10 000 steps at 25 steps/s: 398 s left.
    ("long job with a known length", group(step=50, total=10_000), Pace(since=0.0, step=0), 2.0, True),
    ("exactly worth it", group(step=10, total=10 + int(WORTH * 10)), Pace(since=0.0, step=0), 1.0, True),
    ("just short of worth it", group(step=10, total=9 + int(WORTH * 10)), Pace(since=0.0, step=0), 1.0, False),
    ("known length, pace window not passed yet", group(step=50, total=10_000), Pace(0.0, 0),
     spare_timing.PACE_WINDOW / 2, False),
    ("known length, no pace mark yet", group(step=50, total=10_000), None, 2.0, False),
    ("known length, no step since the mark (a long pause)", group(step=50, total=10_000), Pace(0.0, 50), 5.0, False),
    ("known length, past the end (the last steps)", group(step=95, total=90), Pace(0.0, 0), 2.0, False),
    # Unknown length (a custom loop, a dataset of unknown size): as soon as every trainer ran steps.
    ("unknown length, trainers ran steps", group(total=None), None, 0.0, True),
    ("unknown length, one trainer still starting", group(total=None, progressed=False), None, 0.0, False),
    # No heartbeats at all (--no-bootstrap scripts), or a start-up that outlasts spares_after.
    ("no heartbeats, early", group(beats=False, elapsed=AFTER - 1), None, 0.0, False),
    ("no heartbeats, after spares_after", group(beats=False, elapsed=AFTER + 1), None, 0.0, True),
    ("still starting after spares_after", group(progressed=False, total=90, elapsed=AFTER + 1), None, 0.0, True),
]


@pytest.mark.parametrize("case,snapshot,pace,now,due", CASES, ids=[c[0] for c in CASES])
def test_spares_due(case, snapshot, pace, now, due):
    assert spares_due(snapshot, pace, now, spares_after=AFTER, worth=WORTH) is due, case


def test_worth_zero_starts_them_once_the_pace_is_known():
    assert spares_due(group(step=50, total=90), Pace(0.0, 0), 2.0, spares_after=AFTER, worth=0.0)


def test_pace_is_marked_once_every_trainer_ran_steps_and_then_kept():
    assert pace_of(None, group(progressed=False), 1.0) is None
    mark = pace_of(None, group(step=7), 1.0)
    assert mark == Pace(since=1.0, step=7)
    assert pace_of(mark, group(step=40), 9.0) is mark


def test_seconds_left_uses_the_pace_since_the_mark():
    # 40 steps in 2 s: 20 steps/s; 960 steps left: 48 s.
    assert seconds_left(group(step=40, total=1000), Pace(since=1.0, step=0), 3.0) == pytest.approx(48.0)


def test_the_largest_total_of_the_training_tasks_counts_and_parameter_servers_do_not():
    snapshot = group(step=10, total=None, roles=("chief", "worker", "ps"))
    chief = TaskView(name="chief:0", task_type="chief", task_index=0, pid=1, progressed=True, heartbeat_age=0.1,
                     heartbeat=HeartbeatRecord(step=10, time=0.0, total_steps=5000))
    with_total = GroupSnapshot(tasks=(chief, *snapshot.tasks[1:]), elapsed=5.0)
    assert spare_timing.total_steps(with_total) == 5000
    assert spare_timing.total_steps(snapshot) is None
