"""The launcher's shared-memory folder for snapshots: private, named for the run, passed to tasks, removed."""
from __future__ import annotations

import os
import stat

from tfdist.launch.local.shm_folder import create_snapshot_folder, remove_snapshot_folder
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
