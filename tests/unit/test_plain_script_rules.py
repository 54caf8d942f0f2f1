"""Issue 24's rules as tables: whom to blame (a stopped task, a task TensorFlow names unhealthy), a failure after
training finished, the same failure twice, who saves on a stop, the relay's segments, and the small pure helpers."""
from __future__ import annotations

import io
import os

import pytest

from tfdist.launch.console.runs import RunRecord, chosen_because, latest
from tfdist.launch.console.terminal import PinnedLines
from tfdist.launch.local.command_check import is_python_word, other_python, resolve_command
from tfdist.launch.local.layout import role_meanings
from tfdist.launch.local.restart import RestartPolicy
from tfdist.launch.local.rules import GroupAction, decide
from tfdist.launch.local.snapshot import GroupSnapshot, TaskView
from tfdist.launch.local.stops import StopRequests, saving_words
from tfdist.launch.outcome import Attempt, Cause, LaunchResult, TaskFailure, render_report, render_success, \
    repeated_failure
from tfdist.launch.process.spawn import split_segments
from tfdist.launch.spec import LaunchSpec
from tfdist.errors import UsageError
from tfdist.protocol import ErrorRecord, HeartbeatRecord, TaskState

SPEC = LaunchSpec(command=("x",), workers=3)
RUNNING = HeartbeatRecord(step=5, time=0.0)
DONE = HeartbeatRecord(step=9, time=0.0, state=TaskState.FINISHED)


def view(name: str, **kw) -> TaskView:
    role, index = name.split(":")
    fields = {"heartbeat": RUNNING, "heartbeat_age": 0.1, **kw}
    return TaskView(name=name, task_type=role, task_index=int(index), pid=1, **fields)


def group(*views: TaskView) -> GroupSnapshot:
    return GroupSnapshot(tasks=views)


UNHEALTHY = ("worker:2",)


@pytest.mark.parametrize("tasks, culprit, detail", [
    # worker:0 ended first; nothing else known: it is the cause (as before)
    ((view("worker:0", exit_code=1, ended_at=1.0), view("worker:1"), view("worker:2")), "worker:0", ""),
    # worker:0 exited because TensorFlow found worker:2 unhealthy: worker:2 is the cause
    ((view("worker:0", exit_code=1, ended_at=1.0, blames=UNHEALTHY), view("worker:1"), view("worker:2")),
     "worker:2", "TensorFlow found worker:2 unhealthy"),
    # a stopped task (T state) comes before anything a failed task says
    ((view("worker:0", exit_code=1, ended_at=1.0, blames=("worker:1",)), view("worker:1"),
      view("worker:2", stopped=True)), "worker:2", "stopped (SIGSTOP)"),
    # a task naming itself is not blamed on anyone else
    ((view("worker:0", exit_code=1, ended_at=1.0, blames=("worker:0",)), view("worker:1"), view("worker:2")),
     "worker:0", ""),
    # a name that is not in this group (another machine's task) leaves the first failure as the cause
    ((view("worker:0", exit_code=1, ended_at=1.0, blames=("worker:7",)), view("worker:1"), view("worker:2")),
     "worker:0", ""),
])
def test_blame(tasks, culprit, detail):
    verdict = decide(group(*tasks), SPEC)
    assert (verdict.action, verdict.culprit) == (GroupAction.FAIL, culprit)
    assert detail in verdict.detail and bool(detail) == bool(verdict.detail)


@pytest.mark.parametrize("beats, after", [
    ((DONE, DONE, DONE), True),  # every worker's fit returned before worker:0 failed
    ((DONE, RUNNING, DONE), False),  # worker:1 still trains
    ((None, None, None), False),  # no task said anything (no bootstrap): not known, so not claimed
])
def test_failure_after_training_finished(beats, after):
    tasks = [view(f"worker:{i}") for i in range(3)]
    tasks = [TaskView(**{**t.__dict__, "heartbeat": b}) for t, b in zip(tasks, beats)]
    tasks[0] = TaskView(**{**tasks[0].__dict__, "exit_code": 1, "ended_at": 2.0})
    assert decide(group(*tasks), SPEC).after_training is after


def test_parameter_server_jobs_judge_training_by_the_chief():
    spec = LaunchSpec(command=("x",), workers=1, ps=1, chief=True)
    tasks = (view("chief:0", heartbeat=DONE, exit_code=1, ended_at=1.0), view("worker:0", heartbeat=None),
             view("ps:0", heartbeat=None))
    assert decide(group(*tasks), spec).after_training
    assert group(view("chief:0", heartbeat=HeartbeatRecord(step=1, time=0)), view("worker:0", heartbeat=None),
                 view("ps:0", heartbeat=None)).beating[0].name == "chief:0"


ZERO = 'Traceback (most recent call last):\n  File "t.py", line 9, in <module>\nZeroDivisionError: division by zero\n'


def failed(number: int, traceback: str = ZERO, cause: Cause = Cause.TASK_FAILED, **kw) -> Attempt:
    error = ErrorRecord(type="ZeroDivisionError", message="division by zero", traceback=traceback)
    return Attempt(number, cause, 1.0, failure=TaskFailure(task="worker:1", pid=5, exit_code=1, log_path="l",
                                                           error=error), **kw)


@pytest.mark.parametrize("attempts, expected", [
    ([failed(0), failed(1)], "ZeroDivisionError at t.py:9"),
    ([failed(0)], None),
    ([failed(0), failed(1, ZERO.replace("line 9", "line 10"))], None),  # another line: not the same failure
    ([failed(0, cause=Cause.HUNG), failed(1)], None),
    ([failed(0), failed(1, "Killed\n")], None),  # no traceback to compare
])
def test_repeated_failure(attempts, expected):
    assert repeated_failure(attempts) == expected


def test_restart_rules_for_repeats_and_after_training():
    policy = RestartPolicy(max_restarts=3)
    stop = policy.after(Cause.TASK_FAILED, 0.0, repeated="ZeroDivisionError at t.py:9")
    assert not stop.restart and "same ZeroDivisionError at t.py:9 in two attempts in a row" in stop.message
    done = policy.after(Cause.TASK_FAILED, 0.0, after_training="worker:1 failed in t.py:9")
    assert not done.restart and "after training finished" in done.message and "--restart-after-training" in done.message
    assert policy.after(Cause.TASK_FAILED, 0.0).restart and policy.restarts  # otherwise the budget as before


def test_report_says_a_failure_came_after_training():
    result = LaunchResult(run_id="r", log_dir="/l", attempts=[failed(0, after_training=True)])
    assert "worker:1 failed after training finished, in t.py:9" in render_report(result)


def test_success_line_once_where_the_live_view_printed_its_summary():
    result = LaunchResult(run_id="r", log_dir="/l", attempts=[Attempt(0, Cause.SUCCEEDED, 1.0)])
    assert render_success(result).startswith("tfdist: job r succeeded")
    assert render_success(result, headline=False) == ""


@pytest.mark.parametrize("savers, others, words", [
    ([], ["worker:0"], "no task has a save handler: nothing is saved"),
    (["worker:0", "worker:1"], [], "worker:0, worker:1 save first"),
    (["chief:0"], ["worker:0"], "chief:0 saves first; worker:0 cannot"),
])
def test_saving_words(savers, others, words):
    assert saving_words(savers, others) == words


@pytest.mark.parametrize("signum, terminal, again", [
    (2, True, "press Ctrl-C again to kill now"),
    (2, False, "a second SIGINT kills them now"),
    (15, True, "a second SIGTERM kills them now"),  # a scheduler's SIGTERM is not a Ctrl-C
])
def test_stop_announcement(signum, terminal, again):
    stops = StopRequests()
    stops.saving, stops.terminal = (lambda: "no task has a save handler: nothing is saved"), (lambda: terminal)
    stops._on_signal(signum, None)
    (message,) = stops.announcements()
    assert again in message and "nothing is saved" in message and "they save first" not in message


@pytest.mark.parametrize("data, segments, rest", [
    (b"a\nb", [b"a\n"], b"b"),
    (b" 1/9 [=>...]\x08\x08\r 2/9 [==>..]\r", [b" 1/9 [=>...]\x08\x08\r", b" 2/9 [==>..]\r"], b""),
    (b"line\r\nnext\n", [b"line\r\n", b"next\n"], b""),
    (b"", [], b""),
    (b"x" * 70000, [b"x" * 70000], b""),  # no line end for too long: passed on anyway
])
def test_split_segments(data, segments, rest):
    assert split_segments(data) == (segments, rest)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_view_keeps_a_progress_bar_on_one_row_above_the_pinned_lines():
    tty = Tty()
    pinned = PinnedLines(tty, width=80)
    pinned.set_lines(["worker:0 training"])
    pinned.emit("[worker:0]  1/9 [=>..]\r", tty)
    pinned.emit("[worker:0]  2/9 [==>.]\r", tty)
    pinned.emit("[worker:0]  9/9 [=====]\n", tty)
    out = tty.getvalue()
    # each redraw goes up onto the bar's row (UP, erase) before writing, so the bar never scrolls a new row
    assert out.count("[worker:0]") == 3 and out.count("\x1b[1A\r\x1b[2K[worker:0]") == 2
    assert out.endswith("[worker:0]  9/9 [=====]\nworker:0 training") and not pinned._open


def test_role_meanings():
    ps = role_meanings(chief=True, workers=2, ps=1, evaluator=False)
    assert ps[0].startswith("chief:0 is the coordinator") and "worker:0..1" in ps[1] and ps[2].startswith("ps:0 ")
    mwms = role_meanings(chief=False, workers=3, ps=0, evaluator=True)
    assert mwms[0].startswith("worker:0 trains and, as the chief,") and "worker:1..2 train" in mwms[1]
    assert mwms[-1].startswith("evaluator:0")


def test_python_as_the_first_word(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    command = resolve_command(["python3", "-u", "train.py", "--epochs", "2"], module=False, no_python=False)
    assert (command.interpreter, command.target, command.args) == ("python3", "train.py", ("--epochs", "2"))
    module = resolve_command(["python3", "-m", "pkg.train"], module=False, no_python=False)
    assert module.module and module.target == "pkg.train"
    with pytest.raises(UsageError, match="passes no interpreter options"):
        resolve_command(["python3", "-O", "train.py"], module=False, no_python=False)
    assert is_python_word("/usr/bin/python3.11") and not is_python_word("pythonic.py")


def test_other_python_on_path(tmp_path, monkeypatch):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert other_python("python3", python="/nowhere/python") == str(fake)
    assert other_python("python3", python=str(fake)) is None
    assert other_python("bash") is None


def record(run_id: str, cwd: str, started: float) -> RunRecord:
    return RunRecord(run_id=run_id, log_dir="/l", temporary=False, job_name="j", command=("x",), host="h",
                     launcher_pid=1, started_at=started, cwd=cwd)


def test_status_prefers_runs_started_from_this_folder():
    records = [record("newest0000aa", "/other", 3.0), record("mine00000000", "/here", 2.0)]
    assert latest(records, "/here").run_id == "mine00000000"
    assert latest(records, "/elsewhere").run_id == "newest0000aa"
    assert "this folder" in chosen_because(records[1], "/here")
    assert "started from /other" in chosen_because(records[0], "/elsewhere")


def test_readme_quick_start_says_to_activate_the_demo_environment():
    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    before_first_command = quick_start.split("tfdist launch", 1)[0]
    assert "make demo" in before_first_command and ". .venv/bin/activate" in before_first_command
