"""The fault tests' own teardown: a job still running when its test ends is stopped, with everything under it."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil

from tests.integration import faultlib
from tests.integration.faultlib import Job, stop_left_over_jobs

# A stand-in launcher that ignores SIGTERM and has a child that ignores it too and is stopped (as a SIGSTOPped task).
STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
os.kill(child.pid, signal.SIGSTOP)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_job_left_running_is_stopped_with_its_tasks_even_stopped_ones_that_ignore_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(faultlib, "STOP_GRACE_S", 0.5)
    job = Job(tmp_path, ["-n", "1"])
    job.proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    finished = Job(tmp_path, ["-n", "2"])
    finished.proc = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    faultlib._started.extend([job, finished])  # as Job.start does: the teardown stops them if this test fails early
    finished.proc.communicate()
    child = psutil.Process(int(job.proc.stdout.readline()))
    deadline = time.monotonic() + 30  # SIGSTOP takes effect when the child is next scheduled
    while child.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.status() == psutil.STATUS_STOPPED

    assert stop_left_over_jobs() == [["-n", "1"]]
    assert job.proc.returncode is not None
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert stop_left_over_jobs() == []


def test_a_wait_that_times_out_shows_the_last_lines_of_each_task_log(tmp_path):
    attempt = tmp_path / "logs" / "attempt-0"
    attempt.mkdir(parents=True)
    (attempt / "chief-0.log").write_text("".join(f"chief line {i}\n" for i in range(30)))
    (attempt / "worker-0.log").write_text("worker says UNAVAILABLE: ping timeout\n")
    job = Job(tmp_path, ["-n", "1"])
    job.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    faultlib._started.append(job)
    try:
        job.wait_for_step(0, "chief:0", 80, timeout=0.2)
    except AssertionError as error:
        message = str(error)
    else:
        raise AssertionError("the wait did not time out")
    assert "chief:0 never reached step 80 in attempt 0" in message
    assert "chief line 29" in message and "chief line 18" in message and "chief line 17" not in message
    assert "--- worker-0.log\nworker says UNAVAILABLE: ping timeout" in message
    assert job.stop() and job.proc.returncode is not None
