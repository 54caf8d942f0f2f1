"""The sbatch script from `tfdist slurm`, run on a real single-node Slurm cluster started for this module.

Two kinds of job: a tiny Python task (no TensorFlow) that shows what each task resolved and how the script reacts
to failures and SIGTERM, and the real digits example (2 workers, MultiWorkerMirroredStrategy) that must train to
the target accuracy, also after one task dies and the job resumes from its checkpoint.
"""
from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration.slurm_cluster import SlurmCluster, SlurmUnavailable
from tfdist.cli.main import main
from tfdist.cluster.grpc_keepalive import keepalive_options

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "src" / "tfdist" / "examples" / "digits.py"

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

# A task that prints what it resolved, fails once when asked, and on SIGTERM "saves" and exits 143.
TINY_TASK = textwrap.dedent('''
    import json, os, signal, sys, time
    rank = os.environ["SLURM_PROCID"]
    restart = os.environ.get("TFDIST_RESTART_COUNT", "?")
    marker_dir = sys.argv[1]
    mode = sys.argv[2]
    print("tf_config=" + os.environ.get("TF_CONFIG", ""), flush=True)
    print(f"task={os.environ.get('TFDIST_TASK_TYPE')}:{os.environ.get('TFDIST_TASK_INDEX')} restart={restart} "
          f"legacy_keras={os.environ.get('TF_USE_LEGACY_KERAS', '')} model_dir={os.environ.get('TFDIST_MODEL_DIR')}",
          flush=True)
    print("grpc_options=" + os.environ.get("TF_GRPC_DEFAULT_OPTIONS", "(unset)"), flush=True)
    if mode == "fail-once" and restart == "0" and rank == "1":
        sys.exit(1)
    if mode == "wait-for-term" and restart == "0":
        def stop(signum, frame):
            open(os.path.join(marker_dir, f"saved-{rank}"), "w").write(restart)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        open(os.path.join(marker_dir, f"ready-{rank}"), "w").close()
        time.sleep(120)
        sys.exit(5)
    sys.exit(0)
''')


@pytest.fixture(scope="module")
def slurm():
    cluster = SlurmCluster()
    try:
        cluster.start()
    except SlurmUnavailable as why:
        cluster.stop()
        pytest.skip(f"cannot start a test Slurm cluster: {why}")
    try:
        yield cluster
    finally:
        cluster.stop()


def _write_job(tmp_path: Path, capsys, *argv: str) -> Path:
    out = tmp_path / "job.sbatch"
    rc = main(["slurm", "-o", str(out), "--python", sys.executable, *argv])
    capsys.readouterr()
    assert rc == 0
    return out


def _task_logs(tmp_path: Path, job_id: int) -> dict[tuple[int, int], str]:
    """(restart count, rank) -> that task's log."""
    logs = {}
    for path in (tmp_path / "logs").glob(f"*-{job_id}-r*-task*.log"):
        match = re.search(r"-r(\d+)-task(\d+)\.log$", path.name)
        assert match, path.name
        logs[(int(match.group(1)), int(match.group(2)))] = path.read_text(errors="replace")
    return logs


def _batch_log(tmp_path: Path, job_id: int) -> str:
    found = list(tmp_path.glob(f"*-{job_id}.out"))
    return found[0].read_text(errors="replace") if found else "(no batch log)"


def _tiny(tmp_path: Path) -> Path:
    script = tmp_path / "tiny_task.py"
    script.write_text(TINY_TASK)
    (tmp_path / "markers").mkdir()
    return script


def test_each_task_gets_its_tf_config_and_a_failed_step_is_restarted(slurm, tmp_path, capsys):
    script = _tiny(tmp_path)
    job = _write_job(tmp_path, capsys, "-N", "1", "-T", "2", "--max-restarts", "1", "-J", "tiny",
                     str(script), str(tmp_path / "markers"), "fail-once")
    job_id = slurm.submit(job, cwd=tmp_path)
    record = slurm.wait(job_id, timeout=90)
    batch = _batch_log(tmp_path, job_id)
    assert record["JobState"] == "COMPLETED", batch
    logs = _task_logs(tmp_path, job_id)
    assert set(logs) == {(0, 0), (0, 1), (1, 0), (1, 1)}, batch
    base = 20000 + 10 * (job_id % 1000)
    host = slurm.hostname
    for rank in (0, 1):
        config = json.loads(re.search(r"^tf_config=(.*)$", logs[(1, rank)], re.M).group(1))
        assert config == {"cluster": {"worker": [f"{host}:{base}", f"{host}:{base + 1}"]},
                          "task": {"type": "worker", "index": rank}}
        assert f"task=worker:{rank} restart=1" in logs[(1, rank)]
        assert "model_dir=checkpoints/tiny" in logs[(1, rank)]
        assert "grpc_options=(unset)\n" in logs[(1, rank)]  # a collective job: no coordinator to keep alive
    assert "restarting all of them" in batch
    assert (tmp_path / "checkpoints" / "tiny").is_dir()


def test_sigterm_before_the_time_limit_stops_the_tasks_and_requeues(slurm, tmp_path, capsys):
    script = _tiny(tmp_path)
    markers = tmp_path / "markers"
    job = _write_job(tmp_path, capsys, "-N", "1", "-T", "2", "-J", "preempt", "--time", "00:10:00",
                     str(script), str(markers), "wait-for-term")
    assert "#SBATCH --signal=B:TERM@60" in job.read_text()
    job_id = slurm.submit(job, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not all((markers / f"ready-{rank}").exists() for rank in (0, 1)):
        assert time.monotonic() < deadline, _batch_log(tmp_path, job_id)
        time.sleep(0.5)
    # What --signal=B:TERM@60 does at the time limit: SIGTERM to the batch shell only.
    signalled = slurm.query("scancel", "--signal=TERM", "--batch", str(job_id))
    assert signalled.returncode == 0, signalled.stderr
    record = slurm.wait(job_id, timeout=120, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"))
    batch = _batch_log(tmp_path, job_id)
    assert record["JobState"] == "COMPLETED", batch
    assert record["Restarts"] == "1", batch
    assert sorted(p.name for p in markers.glob("saved-*")) == ["saved-0", "saved-1"]
    assert "requeueing" in batch
    logs = _task_logs(tmp_path, job_id)
    assert "restart=1" in logs[(1, 0)] and "restart=1" in logs[(1, 1)]


def test_every_task_of_a_parameter_server_job_gets_grpc_keepalive_unless_the_submitter_set_it(slurm, tmp_path,
                                                                                                capsys):
    # Without keep-alive the chief waits for ever on a worker that stops answering (a frozen task, a node cut off).
    script = _tiny(tmp_path)
    # Two tasks (the test node may have only 2 CPUs): worker 0, which acts as chief, and one parameter server.
    job = _write_job(tmp_path, capsys, "-N", "1", "-T", "2", "--ps", "1", "--max-restarts", "0", "-J", "tiny-ps",
                     str(script), str(tmp_path / "markers"), "exit")
    for submitted, expected in (({}, keepalive_options()), ({"TF_GRPC_DEFAULT_OPTIONS": "grpc.keepalive_time_ms=7"},
                                                             "grpc.keepalive_time_ms=7")):
        job_id = slurm.submit(job, cwd=tmp_path, env=submitted)
        record = slurm.wait(job_id, timeout=90)
        batch = _batch_log(tmp_path, job_id)
        assert record["JobState"] == "COMPLETED", batch
        logs = _task_logs(tmp_path, job_id)
        assert set(logs) == {(0, 0), (0, 1)}, batch
        for rank, task in ((0, "worker:0"), (1, "ps:0")):
            assert f"task={task} " in logs[(0, rank)]
            assert f"grpc_options={expected}\n" in logs[(0, rank)], logs[(0, rank)]


# ------------------------------------------------------------------------------------------ the digits example

DIGITS_ARGS = ["--epochs", "3", "--steps-per-epoch", "25", "--no-tensorboard"]


def _digits_job(slurm, tmp_path: Path, capsys, name: str, *extra: str) -> tuple[int, dict, str]:
    if not DIGITS.exists():
        pytest.fail(f"{DIGITS} is missing")
    job = _write_job(tmp_path, capsys, "-N", "1", "-T", "2", "--max-restarts", "2", "-J", name,
                     "--model-dir", str(tmp_path / "model"), str(DIGITS), *DIGITS_ARGS, *extra)
    job_id = slurm.submit(job, cwd=tmp_path)
    record = slurm.wait(job_id, timeout=400)  # a bound for a stuck job; normally well under a minute
    return job_id, record, _batch_log(tmp_path, job_id)


def _value(log: str, key: str) -> float | None:
    found = re.findall(rf"^{key}=([-+0-9.e]+)(?: |$)", log, re.M)  # "resumed_from_step=N world_size=W" too
    return float(found[-1]) if found else None


def test_digits_trains_on_two_slurm_tasks(slurm, tmp_path, capsys):
    job_id, record, batch = _digits_job(slurm, tmp_path, capsys, "digits")
    logs = _task_logs(tmp_path, job_id)
    assert record["JobState"] == "COMPLETED", (batch, logs)
    assert set(logs) == {(0, 0), (0, 1)}, batch  # one attempt, one log per task
    chief = logs[(0, 0)]
    accuracy = _value(chief, "final_accuracy")
    assert accuracy is not None and accuracy >= 0.90, chief
    assert chief.strip().splitlines()[-1].startswith("final_accuracy=")
    assert _value(logs[(0, 1)], "final_accuracy") is None  # only the chief reports
    # Both replicas trained the same model.
    assert _value(chief, "weights_checksum") == pytest.approx(_value(logs[(0, 1)], "weights_checksum"), rel=1e-5)


def test_digits_task_dies_once_and_the_job_resumes_from_its_checkpoint(slurm, tmp_path, capsys):
    job_id, record, batch = _digits_job(slurm, tmp_path, capsys, "digits-resume",
                                        "--save-every", "10", "--fail-once-at-step", "25")
    logs = _task_logs(tmp_path, job_id)
    assert record["JobState"] == "COMPLETED", (batch, logs)
    assert set(logs) == {(0, 0), (0, 1), (1, 0), (1, 1)}, batch  # the step ran twice
    assert "injected failure at step 25" in logs[(0, 1)]
    assert "restarting all of them from the last checkpoint" in batch
    chief = logs[(1, 0)]
    resumed = _value(chief, "resumed_from_step")
    assert resumed is not None and 10 <= resumed <= 25, chief
    accuracy = _value(chief, "final_accuracy")
    assert accuracy is not None and accuracy >= 0.90, chief
