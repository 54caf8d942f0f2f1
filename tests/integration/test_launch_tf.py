"""Real multi-worker TensorFlow training under `tfdist launch`, on loopback (tensorflow-cpu)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.tf]
pytest.importorskip("tensorflow")
DIGITS = str(REPO_ROOT / "examples" / "digits.py")
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def values(text: str, key: str) -> list[str]:
    return re.findall(rf"^\[(\w+:\d+)\] {key}=(\S+)", text, flags=re.M)


def run_launch(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **QUIET}
    return subprocess.run([sys.executable, "-m", "tfdist", "launch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, env=env)


def test_two_workers_train_and_agree_on_weights(tmp_path):
    result = run_launch(["-n", "2", "--", DIGITS, "--epochs", "3", "--steps-per-epoch", "40",
                         "--model-dir", str(tmp_path / "m")])
    assert result.returncode == 0, result.stderr[-3000:]
    checksums = dict(values(result.stdout, "weights_checksum"))
    assert set(checksums) == {"worker:0", "worker:1"}
    assert checksums["worker:0"] == checksums["worker:1"], "replicas diverged"
    accuracy = float(dict(values(result.stdout, "final_accuracy"))["worker:0"])
    assert accuracy >= 0.90
    assert "resumed_from_step" not in result.stdout
    assert (tmp_path / "m" / "final.keras").exists()


def test_parameter_server_job_trains(tmp_path):
    result = run_launch(["-n", "2", "--ps", "1", "--chief", "--", DIGITS, "--epochs", "2", "--steps-per-epoch", "40",
                         "--model-dir", str(tmp_path / "m")])
    assert result.returncode == 0, result.stderr[-3000:]
    steps = dict(values(result.stdout, "train_steps"))
    assert steps.get("chief:0") == "80", result.stdout[-2000:]
    assert float(dict(values(result.stdout, "final_accuracy"))["chief:0"]) > 0.5


def test_kill_9_of_a_worker_restarts_the_group_and_resumes(tmp_path):
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--max-restarts", "2", "--backoff", "0",
         "--log-dir", str(logs), "--tee", "--", DIGITS, "--epochs", "4", "--steps-per-epoch", "50",
         "--save-every", "20", "--step-delay", "0.02", "--model-dir", str(tmp_path / "m")],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **QUIET})
    heartbeat = logs / "attempt-0" / "worker-1.heartbeat"
    deadline = time.monotonic() + 240
    victim = None
    while time.monotonic() < deadline and proc.poll() is None:
        backup = tmp_path / "m" / "backup"
        if heartbeat.exists() and backup.exists() and any(backup.rglob("checkpoint")):
            for child in psutil.Process(proc.pid).children():
                if "TFDIST_TASK_INDEX" in child.environ() and child.environ()["TFDIST_TASK_INDEX"] == "1":
                    victim = child
            break
        time.sleep(0.1)
    assert victim is not None, "worker 1 never got past its first checkpoint"
    victim.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "killed by SIGKILL" in err and "restarting the group (1/2)" in err
    resumed = int(dict(values(out, "resumed_from_step"))["worker:0"])
    assert resumed > 0
    assert float(dict(values(out, "final_accuracy"))["worker:0"]) >= 0.90
    assert dict(values(out, "train_steps"))["worker:0"] == "200"
