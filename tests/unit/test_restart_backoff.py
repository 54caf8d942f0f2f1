"""The one back-off rule, for the group's restarts and for a task restarted alone: the wait starts at --backoff and
doubles with each restart that still counts against --max-restarts (those within --restart-window; all of them when
the window is 0), capped at 30 s. A job that ran well for longer than the window starts again from --backoff."""
from __future__ import annotations

import pytest

from tfdist.launch.local.restart import RestartPolicy, TaskRestartPolicy
from tfdist.launch.outcome import Cause

# (window, times of the failures, the delay before each restart)
TABLE = [
    pytest.param(0.0, (0, 10, 100, 200), (1, 2, 4, 8), id="no window: every restart counts"),
    pytest.param(60.0, (0, 10, 20), (1, 2, 4), id="all within the window"),
    pytest.param(60.0, (0, 10, 100), (1, 2, 1), id="the first two expired: from --backoff again"),
    pytest.param(60.0, (0, 50, 100), (1, 2, 2), id="one expired, one still counts"),
    pytest.param(0.0, tuple(range(0, 80, 10)), (1, 2, 4, 8, 16, 30, 30, 30), id="capped at 30 s"),
]


def _group_delays(window: float, times: tuple[int, ...]) -> tuple[float, ...]:
    policy = RestartPolicy(max_restarts=100, window=window, backoff=1.0)
    return tuple(policy.after(Cause.TASK_FAILED, float(t)).delay for t in times)


def _task_delays(window: float, times: tuple[int, ...]) -> tuple[float, ...]:
    policy = TaskRestartPolicy(max_restarts=100, window=window, backoff=1.0)
    return tuple(policy.after("worker:1", float(t)).delay for t in times)


@pytest.mark.parametrize("window, times, delays", TABLE)
def test_a_task_restarted_alone_backs_off_by_the_rule(window, times, delays):
    assert _task_delays(window, times) == delays




@pytest.mark.parametrize("window, times, delays", TABLE)
def test_the_group_backs_off_by_the_same_rule(window, times, delays):
    assert _group_delays(window, times) == delays
