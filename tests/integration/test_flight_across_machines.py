"""The flight recorder across machines with real TensorFlow: 2 emulated machines (network namespaces), one worker each
under MultiWorkerMirroredStrategy (tests/bin/hang_job.py). The worker on machine 2 is SIGSTOPped; before anything is
stopped, the rendezvous on machine 1 asks both agents for their tasks' stacks and writes ONE report there, whose
verdict names machine 2's worker and which holds the evidence of machine 1's worker too."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.multilib import Agent, launch_env, rendezvous_args
from tests.integration.netns import Machines, why_no_namespaces
from tfdist.protocol.records import read_heartbeat

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]

HANG_JOB = str(REPO_ROOT / "tests" / "bin" / "hang_job.py")
HANG_TIMEOUT = "12"  # the tiny model's steps take milliseconds: 12 s of silence is a hang even under load


def wait_for_step(path, step: int, agents: list[Agent], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beat = read_heartbeat(str(path))
        if beat is not None and beat.step is not None and beat.step >= step:
            return
        assert all(a.proc.poll() is None for a in agents), "".join(a.err for a in agents)[-4000:]
        time.sleep(0.1)
    raise AssertionError(f"{path} never reached step {step}:\n" + "".join(a.err for a in agents)[-4000:])


def test_a_stopped_worker_on_machine_2_one_report_on_machine_1(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIST_HEARTBEAT_INTERVAL", "0")
    model = str(tmp_path / "model")
    logs = {i: tmp_path / f"logs{i}" for i in (1, 2)}
    with Machines(2) as machines:
        agents = []
        for i in (1, 2):
            args = rendezvous_args(machines, "2", 1, model, "--log-dir", str(logs[i]), "--node-rank", str(i - 1),
                                   "--hang-timeout", HANG_TIMEOUT, "--max-restarts", "0")
            # The same flags, hang_job.py as the script (it takes no --model-dir).
            args = args[:args.index("--") + 1] + [HANG_JOB, "--mode", "none", "--at-step", "5", "--steps", "100000"]
            agents.append(Agent(machines, i, args, tmp_path).start())
        wait_for_step(logs[2] / "attempt-0" / "worker-1.heartbeat", 5, agents)
        entries = json.loads((logs[2] / "attempt-0" / "tasks.json").read_text())
        stopped_pid = next(e["pid"] for e in entries if e["task"] == "worker:1")
        os.kill(stopped_pid, signal.SIGSTOP)
        codes = [a.wait(timeout=400) for a in agents]
        err1 = agents[0].err
        assert codes[0] != 0, err1[-4000:]

    report_path = logs[1] / "hang-attempt-0.txt"
    assert report_path.exists(), err1[-4000:]
    report = json.loads((logs[1] / "hang-attempt-0.json").read_text())
    verdict = report["verdict"]
    assert (verdict["culprit"], verdict["rule"]) == ("worker:1", "stopped"), verdict
    tasks = {t["task"]: t for t in report["tasks"]}
    assert sorted(tasks) == ["worker:0", "worker:1"]
    # Machine 2's worker, read there by py-spy while stopped, and carried over the wire.
    remote = tasks["worker:1"]
    assert remote["host"].startswith("node1 ") and remote["state"] == "T" and remote["pid"] == stopped_pid
    assert remote["step"] >= 5 and any(f["function"] == "main" for t in remote["threads"] for f in t["frames"])
    # Machine 1's worker is in the same report: its step, and its stacks (or, had TensorFlow's coordination service
    # aborted it first, how it ended and its last lines).
    local = tasks["worker:0"]
    assert local["host"].startswith("node0 ") and local["step"] is not None and local["step"] >= 5
    assert local["threads"] or (local["exited"] and local["output_tail"]), local
    # One report, pointed to on machine 1: the rendezvous' lines, the job's final report, and `tfdist status`.
    assert f"flight recorder (every machine, 2 of 2 answered): {verdict['headline']}" in err1
    assert f"flight recorder (every machine, round 0): {verdict['headline']}" in err1
    assert str(report_path) in err1
    assert not (logs[2] / "hang-attempt-0.txt").exists(), "machine 2 keeps only its own report, in its attempt folder"
    status = subprocess.run([sys.executable, "-m", "tfdist", "status", str(logs[1])], env=launch_env(),
                            capture_output=True, text=True, timeout=120)
    assert f"hang:    {report_path}" in status.stdout, status.stdout + status.stderr
