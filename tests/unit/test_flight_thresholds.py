"""Learned hang thresholds as tables: phases and their stats in, thresholds and verdict words out; the file in the
run folder read back, and bad or foreign files ignored."""
from __future__ import annotations

import json
import os

import pytest

from tfdist.launch.flight import thresholds as th
from tfdist.launch.flight.learner import PhaseLearner, heartbeat_interval
from tfdist.protocol.records import HeartbeatRecord, Phase, PhaseStats

CEILING = 300.0  # --hang-timeout's default
INTERVAL = 0.5  # TFDIST_HEARTBEAT_INTERVAL's default
STEPS_40MS = {Phase.STEP: PhaseStats(n=118, p99=0.062, max=0.071)}


def beat(phase: Phase | None, stats=None, *, finished: bool = False) -> HeartbeatRecord:
    from tfdist.protocol.records import TaskState

    return HeartbeatRecord(step=120, time=0.0, phase=phase, phase_since=0.0, phase_stats=stats,
                           state=TaskState.FINISHED if finished else TaskState.TRAINING)


@pytest.mark.parametrize("phase, learned, seconds, learned_flag", [
    (Phase.STEP, {}, CEILING, False),  # not seen yet: --hang-timeout
    (None, STEPS_40MS, CEILING, False),  # the task does not say its phase: --hang-timeout, as before
    (Phase.STEP, STEPS_40MS, th.FLOOR + INTERVAL, True),  # 5 x 62 ms is under the floor
    (Phase.STEP, {Phase.STEP: PhaseStats(10, 2.0, 2.5)}, 5 * 2.0 + INTERVAL, True),  # the factor decides
    (Phase.STARTUP, {Phase.STARTUP: PhaseStats(1, 100.0, 100.0)}, CEILING, True),  # capped at --hang-timeout
    (Phase.BETWEEN, STEPS_40MS, CEILING, False),  # another phase's stats do not count
])
def test_threshold(phase, learned, seconds, learned_flag):
    limit = th.threshold(phase, learned, ceiling=CEILING, interval=INTERVAL)
    assert (limit.seconds, limit.learned) == (pytest.approx(seconds), learned_flag)
    assert ("--hang-timeout" in limit.source) is (seconds == CEILING)


def test_the_verdict_says_the_threshold_and_where_it_came_from():
    call = th.hung(beat(Phase.STEP, STEPS_40MS), 4.2, STEPS_40MS, ceiling=CEILING, interval=INTERVAL)
    assert call is not None and call.threshold.seconds == pytest.approx(3.5)
    assert call.reason == "no step for 4.2 s; steps took up to 71 ms (p99 62 ms, 118 seen); threshold 3.5 s"


@pytest.mark.parametrize("phase, learned, silent_for, hung", [
    # A SIGSTOPped worker (or one deadlocked in a callback) of a 40 ms-step job: hung well within 10 s.
    (Phase.STEP, STEPS_40MS, 4.0, True),
    # The heartbeat throttle: a healthy run of steps shows a heartbeat up to one interval plus one step old.
    (Phase.STEP, STEPS_40MS, INTERVAL + 0.071, False),
    # A 25 s pause between epochs, the first one: --hang-timeout applies.
    (Phase.BETWEEN, STEPS_40MS, 25.0, False),
    # The next pause, once the first was learned (p99 25 s: 5 x 25 s).
    (Phase.BETWEEN, {**STEPS_40MS, Phase.BETWEEN: PhaseStats(1, 25.0, 25.0)}, 26.0, False),
    # A 60 s first step (XLA compile) in the start-up phase, the first start-up of the job.
    (Phase.STARTUP, {}, 60.0, False),
    # Slow steps after a restore (caches refill): 2 s against 40 ms steps, under the floor.
    (Phase.STEP, {**STEPS_40MS, Phase.RESTORE: PhaseStats(1, 4.0, 4.0)}, 2.0, False),
    # A restore twice as slow as the one learned before.
    (Phase.RESTORE, {Phase.RESTORE: PhaseStats(1, 4.0, 4.0)}, 8.0, False),
    # --hang-timeout is the ceiling even for a phase learned to be long.
    (Phase.STARTUP, {Phase.STARTUP: PhaseStats(1, 100.0, 100.0)}, 301.0, True),
])
def test_scenarios(phase, learned, silent_for, hung):
    own = learned if phase is Phase.STEP else None  # a task in a step has finished steps of its own
    assert (th.hung(beat(phase, own), silent_for, learned, ceiling=CEILING, interval=INTERVAL) is not None) is hung


def test_a_processs_first_step_waits_the_timeout_whatever_earlier_attempts_learned():
    """A restarted task traces its step again: 40 ms steps before say nothing about how long that takes."""
    first = beat(Phase.STEP, {Phase.STARTUP: PhaseStats(1, 5.0, 5.0)})
    assert th.hung(first, 60.0, STEPS_40MS, ceiling=CEILING, interval=INTERVAL) is None
    call = th.hung(first, 301.0, STEPS_40MS, ceiling=CEILING, interval=INTERVAL)
    assert call is not None and "the first step of this process" in call.reason


def test_off_and_finished_are_never_hung():
    assert th.hung(beat(Phase.STEP), 1e6, STEPS_40MS, ceiling=0, interval=INTERVAL) is None
    assert th.hung(beat(Phase.STEP, finished=True), 1e6, STEPS_40MS, ceiling=CEILING, interval=INTERVAL) is None
    assert th.hung(None, 301.0, {}, ceiling=CEILING, interval=INTERVAL).reason.startswith("no heartbeat for 301.0 s")


def test_learning_keeps_the_highest_p99_per_phase():
    learned = th.learn({}, {Phase.STEP: PhaseStats(5, 0.05, 0.06)})
    learned = th.learn(learned, {Phase.STEP: PhaseStats(3, 0.09, 0.09), Phase.STARTUP: PhaseStats(1, 9.0, 9.0)})
    learned = th.learn(learned, {Phase.STEP: PhaseStats(50, 0.04, 0.2)})
    learned = th.learn(learned, None)
    assert learned == {Phase.STEP: PhaseStats(50, 0.09, 0.2), Phase.STARTUP: PhaseStats(1, 9.0, 9.0)}


@pytest.mark.parametrize("learned, interval, lag", [({}, 0.5, 0), (STEPS_40MS, 0.0, 0), (STEPS_40MS, 0.5, 9),
                                                    ({Phase.STEP: PhaseStats(9, 2.0, 2.0)}, 0.5, 1)])
def test_step_lag(learned, interval, lag):
    assert th.step_lag(learned, interval) == lag


JOB = dict(command=("python", "train.py"), job_name="job")


def test_learned_phases_survive_a_new_launcher_of_the_same_job(tmp_path):
    first = PhaseLearner(str(tmp_path), interval=INTERVAL, **JOB)
    first.observe([beat(Phase.STEP, STEPS_40MS), None], now=100.0)
    assert (tmp_path / th.PHASES_FILE).exists()
    assert PhaseLearner(str(tmp_path), interval=INTERVAL, **JOB).limits.learned == STEPS_40MS
    other = PhaseLearner(str(tmp_path), interval=INTERVAL, command=("python", "other.py"), job_name="job")
    assert other.learned == {}  # another job's file in the same folder


def test_writes_are_throttled_then_flushed(tmp_path):
    learner = PhaseLearner(str(tmp_path), interval=INTERVAL, **JOB)
    learner.observe([beat(Phase.STEP, STEPS_40MS)], now=100.0)
    grown = {Phase.STEP: PhaseStats(200, 0.08, 0.09)}
    learner.observe([beat(Phase.STEP, grown)], now=100.5)
    assert th.load(str(tmp_path), **JOB) == STEPS_40MS  # within SAVE_EVERY of the last write
    assert learner.limits.learned == grown  # the rule uses it at once
    learner.flush()
    assert th.load(str(tmp_path), **JOB) == grown


@pytest.mark.parametrize("text", ["{not json", json.dumps({"schema": "tfdist.phases", "schema_version": 99}),
                                  json.dumps([1, 2]), json.dumps({"schema": "tfdist.phases", "schema_version": 1,
                                                                  "job": ["job", "python", "train.py"],
                                                                  "phases": {"step": {"n": -1, "p99": "x"}}})])
def test_a_bad_file_is_ignored(tmp_path, text):
    (tmp_path / th.PHASES_FILE).write_text(text)
    assert th.load(str(tmp_path), **JOB) == {}


def test_an_unwritable_folder_is_not_an_error(tmp_path):
    assert th.save(str(tmp_path / "missing"), STEPS_40MS, **JOB) is False
    learner = PhaseLearner(None, interval=INTERVAL, **JOB)
    learner.observe([beat(Phase.STEP, STEPS_40MS)])
    learner.flush()
    assert learner.limits.learned == STEPS_40MS and not os.listdir(tmp_path)


@pytest.mark.parametrize("environ, interval", [({}, 0.5), ({"TFDIST_HEARTBEAT_INTERVAL": "0"}, 0.0),
                                               ({"TFDIST_HEARTBEAT_INTERVAL": "2"}, 2.0),
                                               ({"TFDIST_HEARTBEAT_INTERVAL": "x"}, 0.5),
                                               ({"TFDIST_HEARTBEAT_INTERVAL": "-1"}, 0.5)])
def test_heartbeat_interval(environ, interval):
    assert heartbeat_interval(environ) == interval
