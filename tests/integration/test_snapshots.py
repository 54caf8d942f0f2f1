"""In-memory snapshots with real TensorFlow processes killed with SIGKILL: the restarted run resumes from the newest
whole snapshot, holding exactly the state the killed run had at that step (never a torn or mixed-step state)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.tf]

TASK = str(Path(__file__).with_name("snapshot_task.py"))
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": f"{REPO_ROOT / 'src'}:{REPO_ROOT}", "TF_USE_LEGACY_KERAS": "1"}


@pytest.fixture
def shm_dir():
    """A snapshot folder as the launcher would make it (removed even when the test fails)."""
    path = Path("/dev/shm") / f"tfdist-test-{uuid.uuid4().hex[:10]}"
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_task(tmp_path: Path, shm: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **QUIET, "TFDIST_SNAPSHOT_DIR": str(shm), "TFDIST_SNAPSHOT_EVERY": "1"}
    return subprocess.run([sys.executable, TASK, "--model-dir", str(tmp_path / "model"), *extra], env=env,
                          capture_output=True, text=True, timeout=600)


def step_hashes(out: str) -> dict[int, str]:
    return {int(s): h for s, h in re.findall(r"^step=(\d+) state=(\w+)", out, flags=re.M)}


@pytest.mark.parametrize("mode", [[], ["--loop"], ["--plain"]],
                         ids=["keras-fit", "custom-loop", "plain-backup-and-restore"])
def test_kill_between_the_optimizer_update_and_the_snapshot(tmp_path, shm_dir, mode):
    killed = run_task(tmp_path, shm_dir, "--kill-at", "17", *mode)
    assert killed.returncode == -9, killed.stderr[-3000:]
    before = step_hashes(killed.stdout)
    assert max(before) == 16  # step 17 was applied but never recorded nor snapshotted

    resumed = run_task(tmp_path, shm_dir, *mode)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step, state = re.search(r"^restored step=(\d+) state=(\w+)", resumed.stdout, flags=re.M).groups()
    step = int(step)
    assert f"tfdist: resume: from snapshot at step {step}" in resumed.stderr
    assert 0 < step <= 16
    assert state == before[step], "the restored variables are not the state the killed run had at that step"
    assert re.search(r"^train_steps=40\b", resumed.stdout, flags=re.M)
    if not mode:
        assert f"resumed_from_step={step}" in resumed.stdout
    after = step_hashes(resumed.stdout)
    assert min(after) == step + 1


def test_custom_loop_with_an_unbuilt_optimizer_takes_no_partial_snapshot(tmp_path, shm_dir):
    result = run_task(tmp_path, shm_dir, "--loop", "--unbuilt-optimizer", "--steps", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tfdist: snapshots off: the checkpoint gained variables" in result.stderr
    assert not list(shm_dir.glob("snap-*.tfsnap"))


def test_tfdist_snapshots_0_turns_them_off(tmp_path, shm_dir):
    killed = run_task(tmp_path, shm_dir, "--kill-at", "9")
    assert killed.returncode == -9 and list(shm_dir.glob("snap-*.tfsnap"))
    off = subprocess.run([sys.executable, TASK, "--model-dir", str(tmp_path / "model")], capture_output=True,
                         text=True, timeout=600,
                         env={**os.environ, **QUIET, "TFDIST_SNAPSHOT_DIR": str(shm_dir), "TFDIST_SNAPSHOTS": "0"})
    assert off.returncode == 0, off.stderr[-3000:]
    assert "tfdist: resume" not in off.stderr
    assert re.search(r"^restored step=0 ", off.stdout, flags=re.M)


def test_launch_worker_sigkill_resumes_from_the_snapshot_and_removes_the_folder(tmp_path):
    from tests.integration.faultlib import Job, task_values

    job = Job(tmp_path, ["-n", "2", "--max-restarts", "1", "--no-warm-spares", "--env", "TFDIST_SNAPSHOT_EVERY=1"],
              script_args=["--save-every", "1000"]).start()
    job.wait_for_step(0, "worker:1", 25)
    folder = Path(job.process("worker:0").environ()["TFDIST_SNAPSHOT_DIR"])  # other jobs here have their own
    assert folder.parent == Path("/dev/shm") and folder.name.startswith("tfdist-")
    assert any(folder.glob("snap-*.tfsnap")), "no snapshot in shared memory while training"
    job.signal("worker:1", signal.SIGKILL)
    assert job.finish() == 0, job.err[-4000:]
    resumed = re.findall(r"\[worker:(\d)\] tfdist: resume: from snapshot at step (\d+)", job.err)
    assert sorted(w for w, _ in resumed) == ["0", "1"] and len({s for _, s in resumed}) == 1, job.err[-4000:]
    step = int(resumed[0][1])
    assert step >= 25  # past the kill's heartbeat, and no durable backup exists before step 1000
    assert int(task_values(job.out, "resumed_from_step")["worker:0"]) == step
    checksums = task_values(job.out, "weights_checksum")
    assert checksums["worker:0"] == checksums["worker:1"], "replicas diverged after the restore"
    assert not folder.exists(), "the launcher left its shared-memory folder behind"


def start_workers(tmp_path: Path, shm: Path, count: int, *extra: str) -> list[subprocess.Popen[str]]:
    """``count`` workers of one MultiWorkerMirroredStrategy job, as an elastic job's next round would start them."""
    from tfdist.launch.local.ports import free_ports

    workers = [f"127.0.0.1:{p}" for p in free_ports(count)]
    procs = []
    for index in range(count):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        env = {**os.environ, **QUIET, "TF_CONFIG": tf_config, "TFDIST_SNAPSHOT_DIR": str(shm),
               "TFDIST_SNAPSHOT_EVERY": "1"}
        procs.append(subprocess.Popen([sys.executable, TASK, "--model-dir", str(tmp_path / "model"), *extra], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=600)
        finally:
            proc.kill()
        results.append((proc.returncode, out, err))
    return results


def test_a_job_that_grew_from_two_to_three_workers_resumes_from_the_snapshot(tmp_path, shm_dir):
    first = finish(start_workers(tmp_path, shm_dir, 2, "--kill-at", "13"))
    assert [code for code, _, _ in first] == [-9, -9], first[0][2][-3000:]  # both reach step 13 and die there
    before = step_hashes(first[0][1])
    assert before == step_hashes(first[1][1]) and max(before) == 12

    second = finish(start_workers(tmp_path, shm_dir, 3))
    assert [code for code, _, _ in second] == [0, 0, 0], second[0][2][-3000:]
    restored = {re.search(r"^restored step=(\d+) state=(\w+)", out, flags=re.M).groups() for _, out, _ in second}
    assert len(restored) == 1, "the three replicas restored different states"
    step, state = restored.pop()
    assert 0 < int(step) <= 12 and state == before[int(step)]
    assert all(f"tfdist: resume: from snapshot at step {step}" in err for _, _, err in second)
    assert all(re.search(r"^train_steps=40\b", out, flags=re.M) for _, out, _ in second)
