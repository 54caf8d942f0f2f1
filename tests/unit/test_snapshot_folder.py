"""The launcher's shared-memory folder for snapshots: private, named for the run, passed to tasks, removed."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfdist.launch.local.shm_folder import WatchedSnapshotFolder, create_snapshot_folder, remove_snapshot_folder
from tfdist.protocol import Command, TaskPlan


def test_folder_is_private_named_for_the_run_and_removed(tmp_path):
    path = create_snapshot_folder("abc123/../x", root=str(tmp_path))
    assert path is not None and os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path).startswith("tfdist-abc123_.._x-snapshots-")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    (tmp_path / os.path.basename(path) / "snap-000000000001.tfsnap").write_bytes(b"x")
    remove_snapshot_folder(path)
    assert not os.path.exists(path)


def test_no_shared_memory_means_no_folder(tmp_path):
    assert create_snapshot_folder("r", root=str(tmp_path / "missing")) is None


def test_remove_touches_only_tfdist_folders(tmp_path):
    other = tmp_path / "precious"
    other.mkdir()
    remove_snapshot_folder(str(other))
    remove_snapshot_folder(None)
    assert other.exists()


def test_task_gets_the_folder_in_its_environment():
    plan = TaskPlan(task_type="worker", task_index=0, address="127.0.0.1:1", tf_config="{}",
                    command=Command("train.py"), run_id="r", attempt=0, max_restarts=0, job_name="j",
                    heartbeat_path="h", error_path="e", snapshot_dir="/dev/shm/tfdist-r-snapshots-x")
    assert plan.environment()["TFDIST_SNAPSHOT_DIR"] == "/dev/shm/tfdist-r-snapshots-x"
    bare = TaskPlan(task_type="worker", task_index=0, address="127.0.0.1:1", tf_config="{}",
                    command=Command("train.py"), run_id="r", attempt=0, max_restarts=0, job_name="j",
                    heartbeat_path="h", error_path="e")
    assert "TFDIST_SNAPSHOT_DIR" not in bare.environment()


_AGENT = """
import sys, time
from tfdist.launch.local.shm_folder import WatchedSnapshotFolder
folder = WatchedSnapshotFolder("unit-test-agent")
print(folder.path, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_an_agent_killed_with_sigkill_leaves_no_folder():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    child = subprocess.Popen([sys.executable, "-c", _AGENT], env=env, stdout=subprocess.PIPE, text=True)
    path = None
    try:
        path = child.stdout.readline().strip()
        assert path.startswith("/dev/shm/tfdist-unit-test-agent-snapshots-") and os.path.isdir(path)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        deadline = time.monotonic() + 30
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(path), "the watcher did not remove the folder of a killed agent"
    finally:
        child.kill()
        child.wait(timeout=30)
        remove_snapshot_folder(path)


def test_an_agent_that_ends_removes_its_folder_and_its_watcher():
    folder = WatchedSnapshotFolder("unit-test-agent")
    assert folder.path is not None and os.path.isdir(folder.path)
    watcher = folder._watcher
    folder.remove()
    assert not os.path.exists(folder.path)
    assert watcher is not None and watcher.proc.poll() is not None
