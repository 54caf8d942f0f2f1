"""Learned hang thresholds with real TensorFlow and default flags (no --hang-timeout): a worker deadlocked in a
callback of a 2-worker Keras job is called hung within seconds, not after --hang-timeout's 300 s.

Needs heartbeats that say their phase (the task bootstrap's and tfdist.runtime's callbacks'): a task side without
them is skipped here, since every hang then waits --hang-timeout by design (tests/unit/test_flight_thresholds.py
covers the rule itself)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT
from tfdist.protocol.records import read_heartbeat

pytestmark = [pytest.mark.slow, pytest.mark.tf]

HANG_JOB = REPO_ROOT / "tests" / "bin" / "hang_job.py"


def test_a_deadlocked_callback_is_called_hung_within_seconds_with_default_flags(tmp_path):
    logs, marker = tmp_path / "logs", tmp_path / "fault"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--log-dir", str(logs), "--max-restarts", "0", "--",
         str(HANG_JOB), "--mode", "deadlock", "--at-step", "40", "--steps", "100000"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO_ROOT / "src"),
             "HANG_JOB_FAULT_FILE": str(marker)})
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        assert marker.exists(), "worker:1 never reached its fault"
        beat = read_heartbeat(str(logs / "attempt-0" / "worker-1.heartbeat"))
        if beat is None or beat.phase is None:
            pytest.skip("the tasks' heartbeats do not say their phase (the task bootstrap's phases are not here)")
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    faulted = float(marker.read_text())
    events = [json.loads(line) for line in (logs / "events.jsonl").read_text().splitlines()]
    verdict = next(e for e in events if e["event"] == "verdict")
    assert (verdict["cause"], proc.returncode) == ("hung", 3), err[-3000:]
    assert verdict["time"] - faulted < 30, "a learned threshold, not --hang-timeout's 300 s"
    assert "; threshold " in err and "(p99 " in err, err[-3000:]
    assert "worker:1 stopped first" in err, err[-3000:]
