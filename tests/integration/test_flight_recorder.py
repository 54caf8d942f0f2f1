"""The flight recorder on injected hangs of a real 2-worker MultiWorkerMirroredStrategy job (tests/bin/hang_job.py,
one script with a --mode argument): worker 1 hangs at step 5, one way per test; the hang watchdog (or the failure of
a peer) triggers the recorder before anything is stopped, and its verdict must name worker 1 and, where the hang is
in Python, the function and file:line.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT
from tfdist.protocol.records import read_heartbeat

pytestmark = [pytest.mark.slow, pytest.mark.tf]

HANG_JOB = REPO_ROOT / "tests" / "bin" / "hang_job.py"
SOURCE = HANG_JOB.read_text().splitlines()
# The job traces its step before its first heartbeat (the watchdog counts from there); a step of the tiny model then
# takes milliseconds, so 15 s of silence is a hang even on a loaded 2-core machine.
HANG_TIMEOUT = "15"


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE, 1) if text in line)


class HungJob:
    def __init__(self, tmp: Path, mode: str) -> None:
        self.logs = tmp / "logs"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--log-dir", str(self.logs), "--hang-timeout",
             HANG_TIMEOUT, "--max-restarts", "0", "--grace-period", "5", "--", str(HANG_JOB), "--mode", mode,
             "--at-step", "5"],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TFDIST_HEARTBEAT_INTERVAL": "0",
                 "PYTHONPATH": str(REPO_ROOT / "src")})
        self.err = ""

    def wait_for_step(self, task: str, step: int, timeout: float = 300) -> None:
        path = self.logs / "attempt-0" / f"{task.replace(':', '-')}.heartbeat"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()[1][-3000:]
            beat = read_heartbeat(str(path))
            if beat is not None and beat.step is not None and beat.step >= step:
                return
            time.sleep(0.05)
        raise AssertionError(f"{task} never reached step {step}")

    def pid(self, task: str) -> int:
        entries = json.loads((self.logs / "attempt-0" / "tasks.json").read_text())
        return next(e["pid"] for e in entries if e["task"] == task)

    def report(self) -> dict:
        _, self.err = self.proc.communicate(timeout=400)
        assert self.proc.returncode == 3, self.err[-4000:]
        return json.loads((self.logs / "hang-attempt-0.json").read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.communicate(timeout=120)


@pytest.fixture
def job(tmp_path):
    started: list[HungJob] = []

    def start(mode: str) -> HungJob:
        started.append(HungJob(tmp_path, mode))
        return started[-1]

    yield start
    for one in started:
        one.stop()


def task_entry(report: dict, name: str) -> dict:
    return next(t for t in report["tasks"] if t["task"] == name)


def assert_names_worker_1(job: HungJob, report: dict, rule: str) -> None:
    verdict = report["verdict"]
    assert (verdict["culprit"], verdict["rule"]) == ("worker:1", rule), verdict
    assert verdict["headline"].startswith("worker:1 stopped first")
    assert f"tfdist: flight recorder: {verdict['headline']}" in job.err
    assert str(job.logs / "hang-attempt-0.txt") in job.err
    assert (job.logs / "hang-attempt-0.txt").read_text().splitlines()[1] == f"verdict: {verdict['headline']}"
    assert "flight recorder (attempt #0): worker:1 stopped first" in job.err, "the job report points to it"
    # Worker 0 waits in the all-reduce, unless TensorFlow's coordination service (when worker 1 stopped sending
    # its own heartbeats) aborted that collective first.
    assert "waiting in a collective all-reduce" in verdict["others"] or "worker:1 unhealthy" in verdict["others"] \
        or task_entry(report, "worker:0")["exited"], verdict["others"]


def assert_where(report: dict, function: str, line: int) -> None:
    where = task_entry(report, "worker:1")["where"]
    assert (Path(where["file"]).name, where["line"], where["function"]) == ("hang_job.py", line, function), where
    assert f"hang_job.py:{line} `{function}`" in report["verdict"]["headline"]


def _alive(pid: int) -> bool:
    """True while ``pid`` is a process that is not a zombie (one that exits meanwhile counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigstopped_worker(job):
    hung = job("none")
    hung.wait_for_step("worker:1", 5)
    os.kill(hung.pid("worker:1"), signal.SIGSTOP)
    report = hung.report()
    assert_names_worker_1(hung, report, "stopped")
    stopped = task_entry(report, "worker:1")
    assert stopped["state"] == "T" and stopped["stacks_from"] == "py-spy", "py-spy reads a stopped task"
    assert any(f["function"] == "main" for t in stopped["threads"] for f in t["frames"])
    assert not _alive(stopped["pid"])


def test_python_deadlock_in_a_callback(job):
    hung = job("deadlock")
    report = hung.report()
    assert_names_worker_1(hung, report, "outside-tensorflow")
    assert_where(report, "update_stats", line_of("with LOCK_B:  # deadlock"))
    assert "blocked in a lock or condition wait" in report["verdict"]["headline"]
    helper = next(t for t in task_entry(report, "worker:1")["threads"] if t["name"] == "stats-writer")
    assert helper["frames"][0]["function"] == "hold_b_then_a"


def test_generator_input_blocks(job):
    hung = job("generator")
    report = hung.report()
    assert_names_worker_1(hung, report, "outside-tensorflow")
    assert_where(report, "load_batch", line_of("return EMPTY.get()"))
    assert task_entry(report, "worker:1")["doing"] == "input"
    assert "its Python input pipeline" in report["verdict"]["headline"] and "Queue.get" in report["verdict"]["headline"]


def test_sleep_in_a_user_function(job):
    hung = job("sleep")
    report = hung.report()
    assert_names_worker_1(hung, report, "outside-tensorflow")
    assert_where(report, "slow_user_function", line_of("time.sleep(3600)"))
    assert "(blocked in time.sleep)" in report["verdict"]["headline"]


def test_worker_leaves_its_training_loop_early(job):
    hung = job("leave")
    report = hung.report()
    assert_names_worker_1(hung, report, "outside-tensorflow")
    assert_where(report, "wait_for_results", line_of("threading.Event().wait(3600)"))
    left = task_entry(report, "worker:1")
    assert f"left its training loop (Model.fit is not on its stack) at step {left['step']}" in \
        report["verdict"]["headline"]
    assert not any(f["function"] == "Model.fit" for t in left["threads"] for f in t["frames"])
