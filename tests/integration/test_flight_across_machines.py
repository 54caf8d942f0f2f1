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

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.multilib import Agent, launch_env, rendezvous_args, wait_for_round_at_step
from tests.integration.netns import Machines, why_no_namespaces

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]

HANG_JOB = str(REPO_ROOT / "tests" / "bin" / "hang_job.py")
HANG_TIMEOUT = "12"  # the tiny model's steps take milliseconds: 12 s of silence is a hang even under load


def test_a_stopped_worker_on_machine_2_one_report_on_machine_1(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIST_HEARTBEAT_INTERVAL", "0")
    model = str(tmp_path / "model")
    logs = {i: tmp_path / f"logs{i}" for i in (1, 2)}
    with Machines(2) as machines:
        agents = []
        for i in (1, 2):
            # The default 10 s node timeout: only a task is stopped here, never an agent, and a machine that missed
            # FAST's 2 s keep-alive under load (TensorFlow starting, py-spy reading stacks) re-formed the job.
            args = rendezvous_args(machines, "2", 1, model, "--log-dir", str(logs[i]), "--node-rank", str(i - 1),
                                   "--hang-timeout", HANG_TIMEOUT, "--max-restarts", "0", "--node-timeout", "10")
            # The same flags, hang_job.py as the script (it takes no --model-dir).
            args = args[:args.index("--") + 1] + [HANG_JOB, "--mode", "none", "--at-step", "5", "--steps", "100000"]
            agents.append(Agent(machines, i, args, tmp_path).start())
        # The newest round of 2, not round 0: under load a machine can miss a keep-alive while TensorFlow starts, and
        # then the job re-forms (a lost machine is no task failure: --max-restarts 0 does not end it).
        round_ = wait_for_round_at_step(agents[1], logs[2], 2, 5, agents, task="worker-1", timeout=300)
        entries = json.loads((logs[2] / f"attempt-{round_}" / "tasks.json").read_text())
        stopped_pid = next(e["pid"] for e in entries if e["task"] == "worker:1")
        os.kill(stopped_pid, signal.SIGSTOP)
        codes = [a.wait(timeout=400) for a in agents]
        err1 = agents[0].err
        assert codes[0] != 0, err1[-4000:]

    report_path = logs[1] / f"hang-attempt-{round_}.txt"
    assert report_path.exists(), err1[-4000:]
    report = json.loads((logs[1] / f"hang-attempt-{round_}.json").read_text())
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
    assert f"flight recorder (every machine, round {round_}): {verdict['headline']}" in err1
    assert str(report_path) in err1
    assert not (logs[2] / f"hang-attempt-{round_}.txt").exists(), \
        "machine 2 keeps only its own report, in its attempt folder"
    status = subprocess.run([sys.executable, "-m", "tfdist", "status", str(logs[1])], env=launch_env(),
                            capture_output=True, text=True, timeout=120)
    assert f"hang:    {report_path}" in status.stdout, status.stdout + status.stderr
