"""The live view's pure parts: task states, rates and ETA, the rendered lines and summary, and the pinned region's
escape sequences."""
from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import pytest

from tfdist.launch.console import progress, runs
from tfdist.launch.console.liveview import (
    Row, Summary, _live_state, final_state, format_duration, render_header, render_rows, render_summary,
    training_rate, watch,
)
from tfdist.launch.outcome import RunState
from tfdist.protocol import HeartbeatRecord, TaskState
from tfdist.launch.console.terminal import PinnedLines, erase_rows


def beat(step: int | None = 10, t: float = 100.0, finished: bool = False, **kw) -> HeartbeatRecord:
    return HeartbeatRecord(step=step, time=t, state=TaskState.FINISHED if finished else TaskState.TRAINING, **kw)


@pytest.mark.parametrize("alive, heartbeat, failed, expected", [
    (True, None, False, "starting"),
    (True, beat(), False, "training"),
    (True, beat(finished=True), False, "finishing"),
    (False, beat(finished=True), False, "done"),
    (False, beat(), False, "exited"),
    (False, None, False, "exited"),
    (False, beat(), True, "failed"),
    (True, None, True, "failed"),
    (None, beat(), False, "unknown"),
])
def test_task_state(alive, heartbeat, failed, expected):
    assert progress.task_state(alive, heartbeat, failed) == expected


@pytest.mark.parametrize("alive, failed, expected", [(True, False, "running"), (False, False, "exited"),
                                                     (False, True, "failed")])
def test_state_of_roles_without_heartbeats(alive, failed, expected):
    assert progress.task_state(alive, None, failed, beats=False) == expected


def test_which_roles_send_heartbeats():
    assert progress.beating_roles(["worker", "worker", "evaluator"]) == ("chief", "worker")
    assert progress.beating_roles(["chief", "worker", "ps"]) == ("chief",)  # ParameterServerStrategy


def status(step: int | None, t: float, attempt: int = 0, name: str = "worker:0") -> progress.TaskStatus:
    return progress.TaskStatus(name=name, attempt=attempt, pid=1, state="training",
                               beat=None if step is None else beat(step, t), log_path="x.log")


def test_rate_over_the_window_and_reset_on_rewind():
    tracker = progress.RateTracker(window_s=10.0)
    assert tracker.update(status(None, 0)) is None  # no beat yet
    assert tracker.update(status(0, 100.0)) is None  # one sample: no rate yet
    assert tracker.update(status(50, 101.0)) == pytest.approx(50.0)
    assert tracker.update(status(50, 101.0)) == pytest.approx(50.0)  # the same beat read twice changes nothing
    assert tracker.update(status(150, 103.0)) == pytest.approx(50.0)
    # 20 s later, the old samples are out of the window: the rate follows the new speed.
    tracker.update(status(1150, 123.0))
    assert tracker.update(status(1160, 124.0)) == pytest.approx(10.0)
    # Restored from a checkpoint: the step went back, the estimate starts over.
    assert tracker.update(status(900, 125.0)) is None
    # Another attempt is another series.
    assert tracker.update(status(5, 126.0, attempt=1)) is None


@pytest.mark.parametrize("step, total, rate, expected", [
    (100, 400, 50.0, 6.0), (400, 400, 50.0, 0.0), (None, 400, 50.0, None), (100, None, 50.0, None),
    (100, 400, None, None), (100, 400, 0.0, None), (500, 400, 5.0, 0.0),
])
def test_eta(step, total, rate, expected):
    assert progress.eta_seconds(step, total, rate) == expected


@pytest.mark.parametrize("seconds, text", [(None, "-"), (0, "0s"), (59.4, "59s"), (60, "1m00s"), (3599, "59m59s"),
                                           (3600, "1h00m"), (90061, "25h01m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_rows_are_aligned_and_say_what_is_known():
    rows = [Row("chief:0", "training", 1234, 5000, 41.24, 0.23124, 1, 91.0),
            Row("worker:10", "starting", None, None, None, None, 1, None),
            Row("ps:0", "training", 7, None, None, None, 1, None)]
    assert render_rows(rows) == [
        "chief:0    training  step 1,234/5,000    41.2 steps/s  loss 0.2312    restarts 1  ETA 1m31s",
        "worker:10  starting  step           -       - steps/s  loss -         restarts 1",
        "ps:0       training  step           7       - steps/s  loss -         restarts 1",
    ]


def test_rows_without_any_rate_leave_the_column_out():
    assert render_rows([Row("worker:0", "done", 150, 150, None, 0.5, 0)]) == [
        "worker:0  done  step 150/150  loss 0.5       restarts 0"]
    assert render_rows([]) == []


def test_header():
    assert render_header("abc", 2, "running", 75) == "tfdist: job abc  running  attempt 2  1m15s"
    assert render_header("abc", None, "running", 0) == "tfdist: job abc  running  0s"  # no task started yet


@pytest.mark.parametrize("summary, lines", [
    (Summary("abc", "succeeded", 62.0, 1, steps=5000, loss=0.03125, examples=160000, steps_per_s=80.64,
             examples_per_s=2580.5),
     ["tfdist: job abc succeeded in 1m02s, 5,000 steps, 80.6 steps/s, 2,580 examples/s, 1 restart, "
      "final loss 0.03125"]),
    (Summary("abc", "failed", 3.0, 2),
     ["tfdist: job abc failed in 3s, 2 restarts"]),
    (Summary("abc", "interrupted", 0.0, 0, steps=0),
     ["tfdist: job abc interrupted in 0s, 0 steps, 0 restarts"]),
])
def test_summary(summary, lines):
    assert render_summary(summary) == lines


def test_summary_json_has_the_numbers():
    data = Summary("abc", "succeeded", 2.0, 0, steps=100, loss=0.5, examples=3200, steps_per_s=60.0,
                   examples_per_s=1920.0).to_json()
    assert data == {"steps": 100, "duration_s": 2.0, "restarts": 0, "steps_per_s": 60.0, "examples": 3200,
                    "examples_per_s": 1920.0, "loss": 0.5}


@pytest.mark.parametrize("first, last, expected", [
    (beat(10, 100.0, examples=320), beat(110, 102.0, examples=3520), (50.0, 1600.0)),
    (beat(10, 100.0), beat(110, 102.0), (50.0, None)),  # no example counts
    (None, beat(110, 102.0), (None, None)),
    (beat(10, 100.0), beat(10, 100.0), (None, None)),  # one beat: no interval
    (beat(50, 100.0), beat(10, 102.0), (None, None)),  # went back (a restore): no honest rate
])
def test_training_rate_leaves_out_the_start_up(first, last, expected):
    assert training_rate(first, last) == expected


def test_erase_rows():
    assert erase_rows(0) == ""
    assert erase_rows(1) == "\r\x1b[2K"
    assert erase_rows(3) == "\r\x1b[2K\x1b[1A\x1b[2K\x1b[1A\x1b[2K"


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_pinned_lines_stay_below_other_output(monkeypatch):
    tty = FakeTty()
    monkeypatch.setattr(sys, "stderr", tty)
    pinned = PinnedLines(tty, width=12)
    pinned.install()
    try:
        assert sys.stderr is not tty
        pinned.set_lines(["a" * 20, "b"])  # cut to width - 1 so that each takes one row
        sys.stderr.write("out 1\nout")  # a whole line goes above; the rest waits for its newline
        sys.stderr.write(" 2\n")
        pinned.set_lines(["c"])
    finally:
        pinned.close()
    assert sys.stderr is tty
    assert tty.getvalue() == ("a" * 11 + "\nb"
                              + erase_rows(2) + "out 1\n" + "a" * 11 + "\nb"
                              + erase_rows(2) + "out 2\n" + "a" * 11 + "\nb"
                              + erase_rows(2) + "c"
                              + "\n")


def test_unfinished_output_is_flushed_at_close(monkeypatch):
    tty = FakeTty()
    monkeypatch.setattr(sys, "stderr", tty)
    pinned = PinnedLines(tty, width=80)
    pinned.install()
    sys.stderr.write("no newline")
    pinned.close()
    assert tty.getvalue() == "no newline\n"


class Cause:
    def __init__(self, value: str) -> None:
        self.value = value


class Attempt:
    def __init__(self, cause: str) -> None:
        self.cause = Cause(cause)


@pytest.mark.parametrize("result, expected", [
    (SimpleNamespace(cause=Cause("succeeded")), "succeeded"),
    (SimpleNamespace(cause=Cause("hung")), "failed"),
    (SimpleNamespace(cause=Cause("task-preempted")), "failed"),  # the launcher's budget of preemptions ran out
    (SimpleNamespace(cause=Cause("preempted")), "preempted"),
    (SimpleNamespace(cause=Cause("interrupted")), "interrupted"),
    (SimpleNamespace(final=Attempt("port-conflict")), "failed"),  # a result without `cause`: its last attempt's
    (SimpleNamespace(final=None), None),
    (None, None),
])
def test_final_state(result, expected):
    assert final_state(result) == expected


def fake_supervisor(tmp_path, cause: str | None) -> SimpleNamespace:
    spec = SimpleNamespace(log_dir=None, job_name="j", command=SimpleNamespace(argv=lambda: ["python", "-u", "t.py"]))
    return SimpleNamespace(spec=spec, run_id="0123456789ab", log_dir=str(tmp_path), state=RunState.RUNNING,
                           before_log_cleanup=None,
                           result=SimpleNamespace(cause=None if cause is None else Cause(cause), restarts=2))


@pytest.mark.parametrize("raised, state, summary", [
    (None, "succeeded", True), (KeyboardInterrupt(), "interrupted", True), (RuntimeError("x"), "failed", False),
])
def test_watch_records_how_the_run_ended(tmp_path, raised, state, summary):
    environ = {"XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "xterm"}
    tty = FakeTty()
    supervisor = fake_supervisor(tmp_path, "succeeded")
    try:
        with watch(supervisor, environ=environ, stream=tty):
            record = runs.find_run(None, environ)
            assert record.state == "running" and record.temporary and record.command == ("python", "-u", "t.py")
            assert supervisor.before_log_cleanup is not None  # the hook the supervisor calls before removing logs
            if raised is not None:
                raise raised
    except (KeyboardInterrupt, RuntimeError):
        pass
    record = runs.find_run(None, environ)
    assert record.ended and record.state == state and record.summary["restarts"] == 2
    assert (f"tfdist: job 0123456789ab {state} in 0s, 2 restarts" in tty.getvalue()) is summary
    assert tty.getvalue().startswith("tfdist: job 0123456789ab  running  0s")  # the live header was drawn...
    if not summary:  # ...and erased again when the launch raised (its own error message says what happened)
        assert tty.getvalue() == "tfdist: job 0123456789ab  running  0s" + erase_rows(1)


def test_watch_draws_nothing_when_not_a_terminal(tmp_path):
    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    quiet = io.StringIO()
    with watch(fake_supervisor(tmp_path, "succeeded"), environ=environ, stream=quiet):
        pass
    assert quiet.getvalue() == ""
    assert runs.find_run(None, environ).state == "succeeded"


# -- the header shows the supervisor's state (it said "running" whatever happened: Supervisor had no `state`) --------
def test_a_supervisor_that_has_not_started_is_starting_in_the_header(tmp_path):
    from tfdist.launch.local.supervisor import Supervisor
    from tfdist.launch.spec import LaunchSpec

    supervisor = Supervisor(LaunchSpec(command=("true",), log_dir=str(tmp_path)), contain=False)
    assert _live_state(supervisor) == "starting"


def test_the_header_follows_the_supervisor_through_a_failure_and_a_restart(tmp_path, monkeypatch):
    from tests.conftest import REPO_ROOT
    from tfdist.launch.local.supervisor import Supervisor
    from tfdist.launch.spec import LaunchSpec

    fake = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
    spec = LaunchSpec(command=(sys.executable, fake, str(tmp_path / "out"), "--fail", "worker:0:3",
                               "--first-attempt-only"), workers=1, max_restarts=1, log_dir=str(tmp_path / "logs"),
                      warm_spares=False)
    supervisor = Supervisor(spec, contain=False)
    seen: list[tuple[str, str]] = []
    events, wait = supervisor._event, supervisor._wait
    monkeypatch.setattr(supervisor, "_event", lambda name, **f: (seen.append((name, _live_state(supervisor))),
                                                                   events(name, **f)))
    monkeypatch.setattr(supervisor, "_wait", lambda delay: (seen.append(("wait", _live_state(supervisor))),
                                                             wait(delay))[1])
    assert supervisor.run().succeeded
    assert ("attempt-started", "running") in seen and ("verdict", "stopping") in seen
    assert ("wait", "restarting") in seen
    assert [s for e, s in seen if e == "attempt-started"] == ["running", "running"]  # both attempts
