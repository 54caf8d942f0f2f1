"""Issue 20 item 16, in-process and deterministic: the rendezvous ends a successful job (``finish``, status 0)
while a worker on this machine is still printing its last lines. The agent used to stop its workers at once (a
0.1-1 s grace, then SIGKILL) and those lines were never relayed; it now lets them end on their own within the grace
period and relays every line before it returns. No sockets: the agent is driven through its message handler."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from tests.conftest import REPO_ROOT
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.agent.spec import AgentSpec
from tfdist.launch.elastic.backends import Agent
from tfdist.launch.elastic.agent.node_group import NodeGroup
from tfdist.launch.local.ports import free_ports
from tfdist.launch.spec import Timeouts
from tfdist.protocol import Command

LATE = str(REPO_ROOT / "tests" / "bin" / "late_lines_task.py")


def _wait(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _agent_with_a_running_worker(tmp_path: Path, trigger: Path) -> Agent:
    command = Command(target=LATE, args=(str(trigger),), interpreter=sys.executable)
    spec = AgentSpec(job="j", endpoint_host="127.0.0.1", endpoint_port=1, min_nodes=2, max_nodes=2, slots=1,
                     command=command, grace_period=30.0, log_dir=str(tmp_path / "run"))
    agent = Agent(spec)
    agent.node_rank, agent.round = 1, 0
    workers = tuple(f"127.0.0.1:{port}" for port in free_ports(2))
    agent.group = NodeGroup(command=command, workers=workers, first_index=1, slots=1, node_rank=1, round_=0,
                            job="j", log_dir=str(tmp_path / "run" / "attempt-0"), env={}, legacy_keras=False,
                            max_restarts=0, timeouts=Timeouts(grace=30.0))
    agent.group.start()
    return agent


def test_a_finished_job_relays_the_last_lines_of_a_worker_still_running_here(tmp_path, capfd):
    trigger = tmp_path / "go"
    agent = _agent_with_a_running_worker(tmp_path, trigger)
    proc = agent.group.group.procs[0]
    assert _wait(lambda: "trained" in capfd.readouterr().out or "trained" in Path(proc.log_path).read_text())
    statuses: list[int] = []
    finishing = threading.Thread(target=lambda: statuses.append(agent._finish(M.Finish(status=0))))
    finishing.start()
    # The old agent stops the worker and returns; the fixed one waits for it. Either way, only then does the worker
    # get to print its last line.
    assert _wait(lambda: not finishing.is_alive() or agent.state == "finishing")
    trigger.write_text("")
    finishing.join(timeout=60)
    assert not finishing.is_alive() and statuses == [0]
    out = capfd.readouterr().out
    assert "[node1 worker:1] last line: weights_checksum=1.0" in out, out
    assert proc.poll() == 0  # it ended on its own, not by a signal


def test_a_failed_job_still_stops_the_workers_at_once(tmp_path, capfd):
    trigger = tmp_path / "never"
    agent = _agent_with_a_running_worker(tmp_path, trigger)
    proc = agent.group.group.procs[0]
    assert _wait(lambda: "trained" in Path(proc.log_path).read_text())
    assert agent._finish(M.Finish(status=3, report="tfdist: job j did not succeed")) == 3
    assert proc.poll() not in (None, 0)  # stopped by a signal: nothing it does matters once the job failed
    assert "last line" not in capfd.readouterr().out


def test_a_temporary_run_folder_goes_unless_a_failed_round_left_logs_in_it(tmp_path):
    from tfdist.launch.elastic.agent.machine_run import AgentResult, clean_up_folder
    from tfdist.launch.outcome import Cause

    said: list[str] = []
    for cause, ran, kept in [(Cause.SUCCEEDED, True, False), (Cause.PREEMPTED, True, False),
                             (Cause.TASK_FAILED, True, True), (Cause.TASK_FAILED, False, False)]:
        folder = tmp_path / f"{cause.value}-{ran}"
        folder.mkdir()
        (folder / "run.json").write_text("{}")
        if ran:
            (folder / "attempt-0").mkdir()
        clean_up_folder(str(folder), temporary=True, result=AgentResult(cause, 0), last_look=None, say=said.append)
        assert folder.exists() == kept, (cause, ran)
    assert said == [f"logs kept in {tmp_path / 'task-failed-True'}"]
    given = tmp_path / "given"
    given.mkdir()
    clean_up_folder(str(given), temporary=False, result=AgentResult(Cause.SUCCEEDED, 0), last_look=None,
                    say=said.append)
    assert given.exists()  # --log-dir is the user's: never removed
