"""The launcher's own credentials never reach a task (issue 34): the etcd password exported for the launcher
(TFDIST_RDZV_ETCD_PASSWORD) is left out of every task's environment, on one machine, in a warm spare and in a
rendezvous agent's tasks, while the rest of the launcher's environment is inherited as before. Real launcher
processes and stand-in tasks (tests/bin/fake_task.py writes the environment it saw), no TensorFlow."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tfdist.launch.local.ports import free_ports
from tfdist.protocol.variables import ETCD_PASSWORD, LAUNCHER_SECRETS

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
PASSWORD = "hunter2-etcd"


def _launch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ETCD_PASSWORD: PASSWORD, "MY_INHERITED": "yes", "TFDIST_WARM_PRELOAD": "json",
           "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "tfdist", "launch", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)


def _seen(out: Path) -> dict[str, dict[str, str]]:
    return {p.stem: json.loads(p.read_text())["env"] for p in sorted(out.glob("*.json"))}


def _assert_scrubbed(seen: dict[str, dict[str, str]]) -> None:
    assert seen
    for task, env in seen.items():
        assert env.get("MY_INHERITED") == "yes", (task, "the launcher's environment is still inherited")
        assert ETCD_PASSWORD not in env and PASSWORD not in env.values(), task


def test_the_etcd_password_is_the_launchers_own_secret():
    assert ETCD_PASSWORD in LAUNCHER_SECRETS


def test_no_task_and_no_warm_spare_on_one_machine_inherits_the_etcd_password(tmp_path):
    out = tmp_path / "out"
    done = _launch(tmp_path, "-n", "2", "--max-restarts", "1", "--backoff", "0", "--", FAKE, str(out),
                   "--fail", "worker:1:5", "--fail-delay", "1.5", "--first-attempt-only", "--sleep", "2")
    assert done.returncode == 0, done.stderr
    assert "(2 from warm spares)" in done.stderr, done.stderr  # the second attempt ran in spares
    seen = _seen(out)
    assert {"worker-0-0", "worker-1-0", "worker-0-1", "worker-1-1"} <= set(seen)
    _assert_scrubbed(seen)


def test_a_rendezvous_agents_tasks_do_not_inherit_the_etcd_password(tmp_path):
    out, secret = tmp_path / "out", tmp_path / "job.secret"
    made = subprocess.run([sys.executable, "-m", "tfdist.launch.elastic.secret", str(secret)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})
    assert made.returncode == 0, made.stderr
    [port] = free_ports(1)
    done = _launch(tmp_path, "--nnodes", "1", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-secret-file",
                   str(secret), "--rdzv-last-call", "0", "-n", "2", "--", FAKE, str(out))
    assert done.returncode == 0, done.stderr
    seen = _seen(out)
    assert {"worker-0-0", "worker-1-0"} <= set(seen)
    _assert_scrubbed(seen)
