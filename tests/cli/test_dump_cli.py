"""`tfdist dump` on a real running launch of the stand-in task (no TensorFlow): worker 1 stops sending heartbeats at
step 1 and sleeps, worker 0 keeps stepping; the dump says so, with file:line, and leaves both running."""
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
from tfdist.cli.main import main
from tfdist.protocol.records import read_heartbeat

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
# The line after the hanging task's one beat: where it sleeps.
HANG_LINE = Path(FAKE).read_text().splitlines().index("        heartbeat.beat(1)") + 2


@pytest.fixture
def running_job(tmp_path):
    logs = tmp_path / "logs"
    launcher = subprocess.Popen(
        # --no-bootstrap: the task bootstrap would register faulthandler; this job checks a task that did not.
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--log-dir", str(logs), "--hang-timeout", "0",
         "--no-bootstrap", "--",
         FAKE, str(tmp_path / "out"), "--hang", "worker:1", "--sleep", "120"],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            beat = read_heartbeat(str(logs / "attempt-0" / "worker-0.heartbeat"))
            if beat is not None and beat.step and beat.step > 3 and \
                    read_heartbeat(str(logs / "attempt-0" / "worker-1.heartbeat")) is not None:
                break
            assert launcher.poll() is None, launcher.stderr.read()
            time.sleep(0.05)
        yield logs
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)


def test_dump_names_the_silent_task_and_its_line(running_job, capsys):
    logs = running_job
    assert main(["dump", str(logs)]) == 0
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert re.search(rf"worker:1 stopped first: at step 1 while the others are at step \d+, in fake_task.py:"
                     rf"{HANG_LINE} `main` \(blocked in time.sleep\)", verdict), verdict
    report = Path(out.splitlines()[-1].removeprefix("report: "))
    assert report.parent == logs and report.name.startswith("hang-dump-") and report.read_text() in out + "\n"
    assert main(["dump", "--json", "--dumper", "faulthandler", str(logs)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["schema"], document["schema_version"]) == ("tfdist.hang", 1)
    assert document["reason"] == "on-demand" and document["verdict"]["rule"] == "lowest-step"
    # The stand-in task registers no faulthandler: nothing is read, and nothing is signalled.
    assert all(t["threads"] == [] and "registered no faulthandler" in t["stacks_from"] for t in document["tasks"])
    states = {t["task"]: t["state"] for t in document["tasks"]}
    # Worker 0 is stepping: running (R), sleeping between steps (S), or in the write of its heartbeat (D, seen
    # under load); never stopped (T) nor gone.
    assert states["worker:1"] == "S" and states["worker:0"] in ("R", "S", "D"), states


def test_dump_refuses_a_folder_that_is_no_run(tmp_path, capsys):
    assert main(["dump", str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_a_plain_task_without_heartbeats_that_waits_is_hung_and_recorded(tmp_path, capsys):
    """No heartbeats at all (a plain script, no bootstrap): the launcher's cheap watch sees no CPU time and no output
    for --hang-timeout, calls it hung, and the flight recorder reads where the tasks wait before stopping them."""
    script = tmp_path / "plain.py"
    script.write_text("import time\n\n\ndef wait_for_peer():\n    time.sleep(120)\n\n\nwait_for_peer()\n")
    logs = tmp_path / "logs"
    rc = main(["launch", "-n", "2", "--no-bootstrap", "--hang-timeout", "2", "--max-restarts", "0", "--log-dir",
               str(logs), "--",
               str(script)])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "made no progress for 2s (quiet (no heartbeat nor CPU time nor output)): stopping the group" in err
    report = json.loads((logs / "hang-attempt-0.json").read_text())
    assert report["reason"] == "hang" and report["verdict"]["rule"] == "none"
    assert "plain.py:5 `wait_for_peer` (blocked in time.sleep)" in report["verdict"]["headline"]
    assert "(the hang watchdog named it" in report["verdict"]["headline"]
    assert f"flight recorder: {report['verdict']['headline']}" in err
    assert main(["status", str(logs)]) == 0
    assert f"hang:    {logs / 'hang-attempt-0.txt'}" in capsys.readouterr().out


def test_the_bootstraps_faulthandler_is_the_fallback_for_a_plain_script(tmp_path, capsys):
    """A plain script (no tfdist import) under the task bootstrap registers faulthandler: `tfdist dump` reads it
    without py-spy, and each task writes its stacks next to its heartbeat file."""
    script = tmp_path / "plain.py"
    script.write_text("import time\n\n\ndef wait_for_peer():\n    time.sleep(120)\n\n\nwait_for_peer()\n")
    logs = tmp_path / "logs"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--log-dir", str(logs), "--hang-timeout", "0", "--",
         str(script)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})
    try:
        stacks = [logs / "attempt-0" / f"worker-{i}.stacks" for i in range(2)]
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in stacks) and time.monotonic() < deadline:
            assert launcher.poll() is None, launcher.stderr.read()
            time.sleep(0.05)
        document = None
        while time.monotonic() < deadline:  # the scripts reach their sleep right after the bootstrap ran
            assert main(["dump", "--json", "--dumper", "faulthandler", str(logs)]) == 0
            document = json.loads(capsys.readouterr().out)
            if all(t["where"] and t["where"]["function"] == "wait_for_peer" for t in document["tasks"]):
                break
            time.sleep(0.2)
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)
    assert document is not None
    for task in document["tasks"]:
        assert task["stacks_from"] == "faulthandler", task
        assert (Path(task["where"]["file"]).name, task["where"]["line"]) == ("plain.py", 5)


@pytest.mark.parametrize("how", ["flag", "environment twin"])
def test_the_flight_recorder_can_be_turned_off(tmp_path, capsys, monkeypatch, how):
    """--no-flight-recorder (or TFDIST_LAUNCH_FLIGHT_RECORDER=false): the hung task is stopped as before, but
    nothing is read and no report is written."""
    script = tmp_path / "plain.py"
    script.write_text("import time\n\n\ndef wait_for_peer():\n    time.sleep(120)\n\n\nwait_for_peer()\n")
    logs = tmp_path / "logs"
    flags = ["--no-flight-recorder"] if how == "flag" else []
    if how != "flag":
        monkeypatch.setenv("TFDIST_LAUNCH_FLIGHT_RECORDER", "false")
    rc = main(["launch", "-n", "1", "--no-bootstrap", "--hang-timeout", "2", "--max-restarts", "0", *flags,
               "--log-dir", str(logs), "--", str(script)])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "made no progress for 2s" in err
    assert "flight recorder" not in err
    assert not list(logs.glob("hang-*")), sorted(p.name for p in logs.iterdir())
