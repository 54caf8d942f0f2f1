"""`tfdist logs` mechanics on a hand-made run folder: task names, partial lines, tails, and following."""
from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from tfdist.errors import UsageError
from tfdist.launch.console import logtail


def attempt(folder: Path, number: int, names: list[str]) -> Path:
    path = folder / f"attempt-{number}"
    path.mkdir(parents=True)
    # Written whole then renamed, as the supervisor does (TaskGroup._write_pids): a follower polling beside this
    # thread must never see the file created but still empty, which reads as an attempt without tasks.
    (path / "tasks.json.tmp").write_text(json.dumps([{"task": n, "pid": 1} for n in names]))
    os.replace(path / "tasks.json.tmp", path / "tasks.json")
    return path


@pytest.mark.parametrize("text, task", [("worker:1", "worker:1"), ("worker-12", "worker:12"), ("chief0", "chief:0"),
                                        ("evaluator:0", "evaluator:0"), ("worker:01", "worker:1"), ("3f2a", None),
                                        ("workers:1", None), ("worker:", None), ("ps:1:2", None)])
def test_parse_task(text, task):
    assert logtail.parse_task(text) == task


def test_show_prints_whole_lines_and_the_tail(tmp_path):
    a0 = attempt(tmp_path, 0, ["worker:0", "worker:1"])
    (a0 / "worker-0.log").write_bytes(b"one\ntwo\nthree")  # the last line is unfinished: printed at the end
    (a0 / "worker-1.log").write_bytes(b"\xff binary \xfe\n")
    out = io.BytesIO()
    logtail.show(str(tmp_path), None, None, out)
    assert out.getvalue() == b"[worker:0] one\n[worker:0] two\n[worker:0] three\n[worker:1] \xff binary \xfe\n"
    out = io.BytesIO()
    logtail.show(str(tmp_path), 0, "worker:0", out, tail=2)
    assert out.getvalue() == b"two\nthree\n"
    out = io.BytesIO()
    logtail.show(str(tmp_path), 0, "worker:0", out, tail=0)
    assert out.getvalue() == b""


def until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_follow_waits_for_the_first_attempt_and_switches_to_the_next(tmp_path):
    over = threading.Event()
    out = io.BytesIO()
    follower = threading.Thread(target=logtail.follow, args=(str(tmp_path), None, out),
                                kwargs={"run_over": over.is_set, "poll_s": 0.01})
    follower.start()
    time.sleep(0.05)
    assert follower.is_alive()  # nothing started yet: it waits instead of failing
    a0 = attempt(tmp_path, 0, ["worker:0"])
    log0 = a0 / "worker-0.log"
    log0.write_bytes(b"hel")
    time.sleep(0.05)
    assert out.getvalue() == b""  # half a line is held back
    with open(log0, "ab") as handle:
        handle.write(b"lo\nbye")
    until(lambda: out.getvalue() == b"hello\n")
    a1 = attempt(tmp_path, 1, ["worker:0"])
    (a1 / "worker-0.log").write_bytes(b"again\n")
    until(lambda: out.getvalue().endswith(b"again\n"))
    over.set()
    follower.join(timeout=10)
    assert not follower.is_alive()
    assert out.getvalue() == b"hello\nbye\ntfdist: attempt 1 started\nagain\n"


def test_unknown_task_names_the_tasks(tmp_path):
    attempt(tmp_path, 0, ["chief:0", "worker:0"])
    with pytest.raises(UsageError) as raised:
        logtail.show(str(tmp_path), None, "worker:3", io.BytesIO())
    assert raised.value.one_line() == "no task worker:3 in attempt 0 (the tasks are chief:0, worker:0)"
