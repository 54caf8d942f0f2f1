"""Plain tf.distribute scripts (tests/plain: TensorFlow's tutorials' patterns, importing nothing of tfdist) under
`tfdist launch` with real TensorFlow: the four tutorials train and report through the task bootstrap, and each item
of issue 24 holds (states and hang detection, signals, progress bars, blame, after-training, repeated failures, the
root-cause excerpt, the interpreter as first word and one summary). Small and few steps, but real: slow."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tfdist.protocol import TaskState, read_heartbeat
from tfdist.protocol.records import Phase

pytestmark = pytest.mark.slow
PLAIN = REPO_ROOT / "tests" / "plain"
KERAS, LOOP, PS, MIRRORED, TWO_FITS = (str(PLAIN / n) for n in (
    "keras_multiworker.py", "custom_loop.py", "ps_training.py", "mirrored_one_machine.py", "keras_two_fits.py"))
TIMEOUT = 900  # a loaded 2-core machine runs TensorFlow's start-up several times slower


def launch(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfdist", "launch", "--backoff", "0", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO_ROOT)


def beat(logs: Path, task: str, attempt: int = 0):
    return read_heartbeat(str(logs / f"attempt-{attempt}" / f"{task.replace(':', '-')}.heartbeat"))


def wait_for(condition, timeout: float = TIMEOUT, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def progressed(logs: Path, tasks: list[str], past: int = 5) -> bool:
    beats = [beat(logs, t) for t in tasks]
    return all(b is not None and b.step is not None and b.step > past for b in beats)


# -- the four tutorials -------------------------------------------------------------------------------------------
def test_keras_with_backup_and_restore_reports_steps_loss_and_done(tmp_path):
    logs = tmp_path / "logs"
    done = launch("-n", "2", "--log-dir", str(logs), "--", KERAS, "--backup-dir", str(tmp_path / "b"),
                  "--epochs", "2", "--steps", "5")
    assert done.returncode == 0, done.stderr
    for task in ("worker:0", "worker:1"):
        record = beat(logs, task)
        assert record.state is TaskState.FINISHED and record.step == 10 and record.total_steps == 10, record
        assert record.loss is not None and record.saves  # its BackupAndRestore got the save on SIGTERM
    status = subprocess.run([sys.executable, "-m", "tfdist", "status", str(logs)], capture_output=True, text=True,
                            timeout=120, cwd=REPO_ROOT)
    assert re.search(r"worker:0\s+done\s+step 10/10", status.stdout), status.stdout
    assert re.search(r"worker:1\s+done", status.stdout), status.stdout


def test_custom_loop_with_checkpoint_manager_reports_the_optimizer_step(tmp_path):
    logs = tmp_path / "logs"
    done = launch("-n", "2", "--log-dir", str(logs), "--", LOOP, "--checkpoint-dir", str(tmp_path / "c"),
                  "--epochs", "2", "--steps", "5", "--step-sleep", "0.2")
    assert done.returncode == 0, done.stderr
    assert "Epoch: 1," in (logs / "attempt-0" / "worker-0.log").read_text()
    for task in ("worker:0", "worker:1"):
        record = beat(logs, task)
        assert record.state is TaskState.FINISHED and record.step == 10, record
    assert (tmp_path / "c" / "ckpt" / "checkpoint").exists()  # the chief's CheckpointManager wrote


def test_parameter_server_training_with_a_coordinator(tmp_path):
    logs = tmp_path / "logs"
    done = launch("--chief", "-n", "2", "--ps", "1", "--log-dir", str(logs), "--", PS, "--epochs", "2",
                  "--steps", "10")
    assert done.returncode == 0, done.stderr
    assert "Final step: 20" in (logs / "attempt-0" / "chief-0.log").read_text()
    chief = beat(logs, "chief:0")
    assert chief.state is TaskState.FINISHED and chief.step == 20, chief


def test_mirrored_on_one_machine_with_python_as_first_word_and_one_summary(tmp_path):
    """Also issue 24 item 9: `-- python script.py` runs the script with that Python, and the success summary is
    printed once when the live view is on (it prints its own)."""
    logs = tmp_path / "logs"
    done = launch("--live", "-n", "1", "--log-dir", str(logs), "--", sys.executable, MIRRORED,
                  "--checkpoint-dir", str(tmp_path / "c"), "--epochs", "3")
    assert done.returncode == 0, done.stderr
    assert "Eval accuracy" in (logs / "attempt-0" / "worker-0.log").read_text()
    record = beat(logs, "worker:0")
    assert record.state is TaskState.FINISHED and record.step == 30 and record.loss is not None, record
    run_id = re.search(r"job (\w+): logs in", done.stderr).group(1)
    assert len(re.findall(rf"job {run_id} succeeded", done.stderr)) == 1, done.stderr


# -- issue 24, item by item ---------------------------------------------------------------------------------------
def test_1_a_stuck_plain_script_is_caught_and_restarts_from_warm_spares(tmp_path):
    logs = tmp_path / "logs"
    # 240 steps of 0.1 s: over 20 s of training left when the pace is known, so warm spares start
    # (launch/local/spare_timing.py; a shorter job would restart cold); the hang comes in the second epoch.
    done = launch("-n", "2", "--hang-timeout", "10", "--max-restarts", "1", "--log-dir", str(logs), "--", KERAS,
                  "--backup-dir", str(tmp_path / "b"), "--epochs", "8", "--steps", "30", "--step-sleep", "0.1",
                  "--hang-once", str(tmp_path / "hung-once"), "--hang-epoch", "1")
    assert done.returncode == 0, done.stderr
    # The step phase's learned threshold calls the hang (seconds), well before --hang-timeout's 10 s.
    assert re.search(r"made no progress for [0-9.]+s \(silent: no step for .*; threshold [0-9.]+ s\)", done.stderr), \
        done.stderr
    # The attempt after the hang (attempt 1, unless a port lost to another program on a busy machine cost one more).
    after_hang = done.stderr.split("made no progress", 1)[1]
    started = re.search(r"attempt (\d+): started 2 task\(s\)( \(2 from warm spares\))?", after_hang)
    assert started and started.group(2), done.stderr
    assert beat(logs, "worker:0", attempt=int(started.group(1))).state is TaskState.FINISHED


def test_2_parameter_servers_without_a_chief_are_refused_and_dry_run_says_what_roles_do(tmp_path):
    refused = launch("--ps", "1", "-n", "2", "--", PS, timeout=120)
    assert refused.returncode == 2 and "--chief" in refused.stderr and "Traceback" not in refused.stderr
    dry = launch("--dry-run", "--chief", "--ps", "1", "-n", "2", "--", PS, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert "chief:0 is the coordinator" in dry.stdout and "ps:0 hold the variables" in dry.stdout


def test_3_a_stop_says_who_saves_and_keeps_the_folder_it_points_at(tmp_path):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--grace-period", "5", "--", LOOP, "--checkpoint-dir",
         str(tmp_path / "c"), "--epochs", "1", "--steps", "100000", "--step-sleep", "0.05"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        first = launcher.stderr.readline()
        logs = Path(re.search(r"logs in (\S+)", first).group(1))
        wait_for(lambda: progressed(logs, ["worker:0", "worker:1"]), what="both workers to run steps")
        launcher.send_signal(signal.SIGTERM)
        err = first + launcher.stderr.read()
        launcher.wait(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 143, err
    assert "got SIGTERM: stopping all tasks (no task has a save handler: nothing is saved" in err, err
    assert "Ctrl-C" not in err and "they save first" not in err
    report = err.split("did not succeed")[1]
    assert f"logs in {logs}" in report and logs.is_dir()  # the folder the report points at is still there


def test_4_progress_bars_are_relayed_as_they_come_each_redraw_prefixed(tmp_path):
    done = subprocess.run(  # bytes: text mode would turn each \r into a newline
        [sys.executable, "-m", "tfdist", "launch", "-n", "1", "--", KERAS, "--backup-dir", str(tmp_path / "b"),
         "--epochs", "1", "--steps", "20", "--step-sleep", "0.05", "--verbose", "1"], capture_output=True,
        timeout=TIMEOUT, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    stdout = done.stdout.decode(errors="replace")
    redraws = stdout.split("\r")[1:]  # tf-keras redraws its bar with \b...\r, even into a pipe
    assert len(redraws) > 5, repr(stdout[-500:])
    assert all(seg.startswith("[worker:0] ") for seg in redraws if seg), repr(stdout[-800:])


def test_5_a_stopped_worker_is_blamed_not_the_healthy_one_tensorflow_aborted(tmp_path):
    logs = tmp_path / "logs"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--hang-timeout", "0", "--max-restarts", "0",
         "--log-dir", str(logs), "--", KERAS, "--backup-dir", str(tmp_path / "b"), "--epochs", "1", "--steps",
         "100000", "--step-sleep", "0.05"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        cwd=REPO_ROOT)
    try:
        wait_for(lambda: progressed(logs, ["worker:0", "worker:1"]), what="both workers to run steps")
        tasks = json.loads((logs / "attempt-0" / "tasks.json").read_text())
        victim = next(t["pid"] for t in tasks if t["task"] == "worker:1")
        os.kill(victim, signal.SIGSTOP)
        _, err = launcher.communicate(timeout=TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 3, err
    log0 = (logs / "attempt-0" / "worker-0.log").read_text(errors="replace")
    assert "unhealthy" in log0  # TensorFlow aborted the healthy worker, as in the issue
    assert re.search(r"root cause \(attempt #0\): worker:1 ", err), err
    assert "stopped (SIGSTOP)" in err


def test_6_a_failure_after_training_finished_is_reported_and_not_retrained(tmp_path):
    logs = tmp_path / "logs"
    done = launch("-n", "2", "--max-restarts", "2", "--log-dir", str(logs), "--", KERAS, "--backup-dir",
                  str(tmp_path / "b"), "--epochs", "1", "--steps", "5", "--fail-after-fit")
    assert done.returncode == 3, done.stderr
    assert re.search(r"worker:1 failed after training finished, in \S*keras_multiworker\.py:\d+", done.stderr), \
        done.stderr
    assert "--restart-after-training" in done.stderr
    assert not (logs / "attempt-1").exists()


def test_7_the_same_failure_twice_stops_the_restarts(tmp_path):
    logs = tmp_path / "logs"
    done = launch("-n", "2", "--log-dir", str(logs), "--", KERAS, "--backup-dir", str(tmp_path / "b"),
                  "--divide-by-zero")  # the default --max-restarts (3)
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stderr.splitlines() if "in two attempts in a row" in line]
    assert len(lines) == 1 and re.search(r"the same ZeroDivisionError at \S*keras_multiworker\.py:\d+", lines[0])
    assert (logs / "attempt-1").exists() and not (logs / "attempt-2").exists()


GLOG = re.compile(r"^\s*[IWEF]\d{4} \d")


def test_8_the_root_cause_excerpt_is_filtered_like_the_console(tmp_path):
    done = launch("--no-bootstrap", "-n", "2", "--max-restarts", "0", "--tf-log-level", "fatal", "--", KERAS,
                  "--backup-dir", str(tmp_path / "b"), "--divide-by-zero")
    assert done.returncode == 3, done.stderr
    excerpt = done.stderr.split("last lines of its stderr:")[1]
    assert "ZeroDivisionError" in excerpt
    assert not [line for line in excerpt.splitlines() if GLOG.match(line) or "absl::InitializeLog" in line], excerpt


# -- issue 35 -----------------------------------------------------------------------------------------------------
def test_issue_35_1_an_exit_with_a_status_before_any_training_is_retried(tmp_path):
    script = tmp_path / "f.py"
    script.write_text("import sys\nsys.exit(3)\n")
    logs = tmp_path / "logs"
    done = launch("--max-restarts", "2", "--log-dir", str(logs), "--", str(script), timeout=300)
    assert done.returncode == 3, done.stderr
    assert "after training finished" not in done.stderr, done.stderr
    assert (logs / "attempt-2").is_dir() and not (logs / "attempt-3").exists(), done.stderr  # the whole budget
    assert beat(logs, "worker:0", attempt=2) is None  # nothing trained, nothing said it finished


def status_tasks(logs: Path) -> list[dict]:
    shown = subprocess.run([sys.executable, "-m", "tfdist", "status", "--json", str(logs)], capture_output=True,
                           text=True, timeout=120, cwd=REPO_ROOT)
    return json.loads(shown.stdout)["tasks"] if shown.returncode == 0 and shown.stdout.strip() else []


def test_issue_35_2_a_script_that_fits_twice_shows_steps_that_belong_together_and_done(tmp_path):
    """TensorFlow's multi-worker tutorial: fit 2x3 steps, save, reload, fit 2x8 more: while it runs every step shown
    is within its total, the second fit shows on from the first (6 + 16), and at the end both workers are done."""
    logs = tmp_path / "logs"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--log-dir", str(logs), "--", TWO_FITS, "--model-dir",
         str(tmp_path / "model"), "--first", "2x3", "--second", "2x8", "--step-sleep", "0.4"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    seen = []
    try:
        while launcher.poll() is None:
            seen += [(t["task"], t["state"], t["step"], t["total_steps"]) for t in status_tasks(logs)]
        err = launcher.stderr.read()
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, err
    assert all(step <= total for _, _, step, total in seen if step is not None and total is not None), seen
    assert any(state == "training" and total == 22 and 6 <= step < 22 for _, state, step, total in seen), seen
    final = {t["task"]: (t["state"], t["step"], t["total_steps"]) for t in status_tasks(logs)}
    assert final == {"worker:0": ("done", 22, 22), "worker:1": ("done", 22, 22)}, final


# -- issue 36 -----------------------------------------------------------------------------------------------------
def test_issue_36_heartbeats_say_the_phase_and_a_restarted_group_restores(tmp_path):
    """A plain Keras script under the bootstrap: while it steps its heartbeat says ``step`` with start-up and step
    durations; a killed worker's group restarts, and there the restore (BackupAndRestore, snapshots) is a phase."""
    logs = tmp_path / "logs"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--max-restarts", "1", "--backoff", "0", "--log-dir",
         str(logs), "--", KERAS, "--backup-dir", str(tmp_path / "b"), "--epochs", "2", "--steps", "40",
         "--step-sleep", "0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        wait_for(lambda: progressed(logs, ["worker:0", "worker:1"], past=8), what="both workers to run steps")
        stepping = beat(logs, "worker:0")
        tasks = json.loads((logs / "attempt-0" / "tasks.json").read_text())
        os.kill(next(t["pid"] for t in tasks if t["task"] == "worker:1"), signal.SIGKILL)
        _, err = launcher.communicate(timeout=TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, err
    assert stepping.phase in (Phase.STEP, Phase.BETWEEN) and stepping.phase_since <= stepping.time, stepping
    assert stepping.phase_stats[Phase.STARTUP].n == 1 and stepping.phase_stats[Phase.STEP].n >= 1, stepping
    assert stepping.phase_stats[Phase.STEP].p99 < stepping.phase_stats[Phase.STARTUP].p99  # the first step is not one
    again = beat(logs, "worker:0", attempt=1)
    assert again.finished and again.phase is Phase.BETWEEN, again
    assert again.phase_stats[Phase.RESTORE].n == 1 and again.phase_stats[Phase.STARTUP].n == 1, again
    assert again.phase_stats[Phase.BETWEEN].n >= 1 and again.phase_stats[Phase.STEP].n >= 1, again
