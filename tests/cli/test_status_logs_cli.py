"""`tfdist status` and `tfdist logs` on real launches of the stand-in task (no TensorFlow), finished and running."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tfdist.cli.main import main
from tfdist.launch.console import runs

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


def launch(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["launch", *argv])
    return rc, capsys.readouterr().err


def latest() -> runs.RunRecord:
    return runs.find_run(None, os.environ)


def test_status_of_a_finished_run(capsys, tmp_path):
    logs = tmp_path / "logs"
    rc, err = launch(capsys, "-n", "2", "--log-dir", str(logs), "--", FAKE, str(tmp_path / "out"), "--total-steps",
                     "20")
    assert rc == 0, err
    assert "\x1b[" not in err and "steps/s" not in err  # not a terminal: no live lines, no summary
    record = latest()
    assert record.log_dir == str(logs) and record.ended and record.state == "succeeded"
    assert record.summary["steps"] == 20 and record.summary["restarts"] == 0

    assert main(["status"]) == 0
    text = capsys.readouterr().out
    assert f"run {record.run_id} (tfdist): succeeded" in text
    assert "summary: 20 steps" in text
    assert "worker:0  done  step 20/20  loss 0.05" in text
    assert f"log: {logs}/attempt-0/worker-1.log" in text

    for ref in (record.run_id[:5], str(logs)):
        assert main(["status", "--json", ref]) == 0
        document = json.loads(capsys.readouterr().out)
        assert document["schema"] == "tfdist.status" and document["schema_version"] == 1
        assert document["run"]["run_id"] == record.run_id and document["state"] == "succeeded"
        assert document["folder_exists"] is True and document["attempt"] == 0
        assert [(t["task"], t["state"], t["step"], t["total_steps"]) for t in document["tasks"]] == [
            ("worker:0", "done", 20, 20), ("worker:1", "done", 20, 20)]

    assert main(["status", "--list"]) == 0
    assert capsys.readouterr().out.startswith(f"{record.run_id}  ")


def test_status_and_logs_when_the_temporary_folder_is_gone(capsys, tmp_path):
    rc, err = launch(capsys, "-n", "1", "--", FAKE, str(tmp_path / "out"), "--total-steps", "3")
    assert rc == 0, err
    record = latest()
    assert record.temporary
    assert not os.path.exists(record.log_dir)  # the launcher removes a temporary folder after a success
    assert main(["status"]) == 0
    text = capsys.readouterr().out
    assert "is gone: it was a temporary folder, removed when the job ended" in text
    assert f"run {record.run_id} (tfdist): succeeded" in text  # the state folder's record knows how it ended
    assert "summary: 3 steps" in text  # read just before the folder went (Supervisor.before_log_cleanup)
    assert main(["logs"]) == 1
    err = capsys.readouterr().err
    assert f"the logs of run {record.run_id} are gone" in err and len(err.strip().splitlines()) == 1


def test_logs_of_one_task_all_tasks_and_the_tail(capsys, tmp_path):
    logs = tmp_path / "logs"
    rc, err = launch(capsys, "-n", "2", "--log-dir", str(logs), "--", FAKE, str(tmp_path / "out"), "--total-steps", "2")
    assert rc == 0, err
    assert main(["logs", "worker:1"]) == 0
    assert capsys.readouterr().out == "hello from worker:1 attempt 0\nworker:1 done\n"
    assert main(["logs", str(logs), "worker-0", "--tail", "1"]) == 0
    assert capsys.readouterr().out == "worker:0 done\n"
    assert main(["logs"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[worker:0] hello from worker:0 attempt 0", "[worker:0] worker:0 done",
        "[worker:1] hello from worker:1 attempt 0", "[worker:1] worker:1 done"]


@pytest.mark.parametrize("argv, needle", [
    (["logs", "worker:7"], "no task worker:7 in attempt 0 (the tasks are worker:0)"),
    (["logs", "--attempt", "3"], "--attempt 3: the run has attempts 0"),
    (["logs", "a", "b", "c"], "unexpected argument 'c'"),
    (["logs", "worker:0", "worker:1"], "expected [RUN] [TASK]"),
    (["logs", "-f", "--attempt", "0"], "--attempt and --follow"),
    (["status", "nosuchrun"], "no run 'nosuchrun'"),
])
def test_bad_requests_are_one_line_and_exit_2(capsys, tmp_path, argv, needle):
    rc, err = launch(capsys, "-n", "1", "--log-dir", str(tmp_path / "logs"), "--", FAKE, str(tmp_path / "o"),
                     "--total-steps", "1")
    assert rc == 0, err
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_no_runs_yet(capsys):
    assert main(["status"]) == 2
    assert "no runs recorded in" in capsys.readouterr().err


def test_a_run_whose_launcher_was_killed_is_lost(capsys, tmp_path):
    log_dir = tmp_path / "logs"
    launcher = subprocess.Popen([sys.executable, "-m", "tfdist", "launch", "-n", "1", "--log-dir", str(log_dir),
                                 "--", FAKE, str(tmp_path / "o"), "--sleep", "60"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not runs.attempts(str(log_dir)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert main(["status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["state"] == "running"
    finally:
        launcher.kill()  # no chance to record an end; its task dies with it (PR_SET_PDEATHSIG)
        launcher.wait()
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert ": lost (" in out and "the launcher is gone without recording an end" in out


def test_status_shows_the_job_running_now_from_another_folder(capsys, tmp_path, monkeypatch):
    """Issue 35: a run from this folder ended long ago, a job started from another folder runs now: that one is shown,
    and is known by its launcher's pid and start time (a real `tfdist launch`)."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(here)
    rc, err = launch(capsys, "-n", "1", "--log-dir", str(tmp_path / "old"), "--", FAKE, str(tmp_path / "o1"),
                     "--total-steps", "2")
    assert rc == 0, err
    finished = latest()
    log_dir = tmp_path / "logs"
    launcher = subprocess.Popen([sys.executable, "-m", "tfdist", "launch", "-n", "1", "--log-dir", str(log_dir),
                                 "--", FAKE, str(tmp_path / "o2"), "--sleep", "60"], cwd=elsewhere,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not runs.attempts(str(log_dir)) and time.monotonic() < deadline:
            time.sleep(0.1)
        live = runs.find_run(str(log_dir), os.environ)
        assert live.launcher_pid == launcher.pid and live.launcher_started_at is not None
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"showing run {live.run_id}, the one running now (started from {elsewhere})\n"), out
        assert f"run {live.run_id} (tfdist): running" in out
        assert main(["status", "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert document["run"]["run_id"] == live.run_id and document["chosen"]["by"] == "running"
    finally:
        launcher.kill()
        launcher.wait()
    assert main(["status"]) == 0  # its launcher gone: the latest started from this folder again
    assert capsys.readouterr().out.startswith(f"showing run {finished.run_id}, the latest started from this folder")


def _follow(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tfdist", "logs", "-f", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_logs_follow_across_a_restart_until_the_job_ends(tmp_path):
    """`logs -f` started while the job runs prints what comes, marks the restart, and returns when the job ends.

    Worker 1 beats for 4 s before it fails (worker 0, the leader, needs 6 s for its 300 steps): time for the two
    followers (new Python processes) to start during the first attempt even on a loaded machine."""
    log_dir = tmp_path / "logs"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--max-restarts", "1", "--log-dir", str(log_dir), "--",
         FAKE, str(tmp_path / "o"), "--fail", "worker:1:3", "--fail-delay", "4.0", "--first-attempt-only",
         "--total-steps", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not runs.attempts(str(log_dir)) and time.monotonic() < deadline:
            time.sleep(0.05)
        everyone, one = _follow(), _follow("worker:1")
        # Bounds, not timings: generous so that a loaded machine (the task bootstrap, warm spares) still fits.
        out, err = everyone.communicate(timeout=180)
        out_one, _ = one.communicate(timeout=180)
    finally:
        launcher.wait(timeout=180)
    assert everyone.returncode == 0, err
    assert "tfdist: attempt 1 started" in out
    assert "[worker:1] worker:1 failing with 3" in out
    assert out.rstrip().endswith("done")  # the job's last lines, then the command returned by itself
    assert "[worker:0] worker:0 done" in out.split("attempt 1 started")[1]
    assert "[worker:1] worker:1 done" in out.split("attempt 1 started")[1]
    assert "[worker:0]" not in out_one and out_one.count("hello from worker:1") == 2
    assert launcher.returncode == 0, launcher.stderr.read()


def test_live_can_be_forced_and_refused(capsys, tmp_path, monkeypatch):
    """--live draws the view even into a non-terminal (here pytest's capture); --no-live / its twin never do."""
    rc, err = launch(capsys, "-n", "1", "--live", "--", FAKE, str(tmp_path / "o1"), "--total-steps", "30")
    assert rc == 0, err
    assert "\x1b[2K" in err and "worker:0  done  step 30/30" in err
    assert re.search(r"tfdist: job \w{12} succeeded in \d+s, 30 steps, [\d.]+ steps/s", err), err
    monkeypatch.setenv("TFDIST_LAUNCH_LIVE", "0")
    rc, err = launch(capsys, "-n", "1", "--", FAKE, str(tmp_path / "o2"), "--total-steps", "3")
    assert rc == 0, err
    assert "\x1b" not in err and "steps/s" not in err
