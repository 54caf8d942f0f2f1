"""Every role across machines: the parameter-server example (tfdist.examples.digits under ParameterServerStrategy)
on 3 network-namespace machines through the rendezvous, roles placed by node rank with machine 2 pinned to the
parameter server (--node-roles ps). Real TensorFlow; every process and namespace is gone at the end."""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.integration.multilib import (
    DIGITS, FAST, SCRIPT_ARGS, TOTAL_STEPS, Agent, all_output, lost_machines, rendezvous_args, task_values,
    wait_for_round_at_step,
)
from tests.integration.netns import Machines, proc_words, why_no_namespaces, why_no_sshd
from tfdist.protocol import read_heartbeat

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]

ROLES = "roles: node0: chief:0 worker:0; node1: ps:0; node2: worker:1"


def _start(machines: Machines, tmp_path, *extra: str) -> list[Agent]:
    """m1: chief and worker 0; m2: pinned to the parameter server; m3: worker 1 (placed by node rank). The default
    10 s node timeout: no test of these takes a machine off the network (a killed task or agent is seen at once), so
    a shorter keep-alive would only let a machine that stalls under load start an unplanned round."""
    model = str(tmp_path / "model")
    shapes = {1: ["-n", "2"], 2: ["-n", "1", "--node-roles", "ps"], 3: ["-n", "1"]}
    agents = []
    for i in (1, 2, 3):
        args = rendezvous_args(machines, "3", 1, model, "--chief", "--ps", "1", "--node-rank", str(i - 1),
                               "--log-dir", str(tmp_path / f"logs{i}"), "--tee", "--node-timeout", "10",
                               *shapes[i], *extra)
        agents.append(Agent(machines, i, args, tmp_path).start())
    return agents


def _pid_of(machines: Machines, machine: int, task_type: str) -> int:
    """The pid of the task of ``task_type`` running on ``machine`` (read from its environment)."""
    for pid in machines.pids(machine):
        if f"TFDIST_TASK_TYPE={task_type}".encode() in (proc_words(pid, "environ") or ()):
            return pid
    raise AssertionError(f"no {task_type} task on machine {machine}")


def _wait_for_chief_step(tmp_path, round_: int, step: int, agents: list[Agent], timeout: float = 400,
                         logs: str = "logs1") -> int:
    path = os.path.join(tmp_path / logs, f"attempt-{round_}", "chief-0.heartbeat")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beat = read_heartbeat(path)
        if beat is not None and beat.step is not None and beat.step >= step:
            return beat.step
        if any(a.proc.poll() is not None for a in agents):
            break
        time.sleep(0.2)
    raise AssertionError(f"the chief never reached step {step} in round {round_}:\n" + all_output(agents)[-4000:])


def _check_completed(text: str, reruns: int = 0) -> None:
    """``reruns``: the ClusterCoordinator re-runs a step that was on a worker when it died (TensorFlow: "a function
    may be executed more than once"), so each worker killed may add one step to the count."""
    steps = task_values(text, "train_steps")
    assert set(steps) == {"node0 chief:0"}, text[-4000:]
    assert TOTAL_STEPS <= int(steps["node0 chief:0"]) <= TOTAL_STEPS + reruns, text[-4000:]
    assert float(task_values(text, "final_accuracy")["node0 chief:0"]) >= 0.85


def test_the_parameter_server_example_runs_on_three_machines(tmp_path):
    with Machines(3) as machines:
        agents = _start(machines, tmp_path)
        codes = [a.wait(timeout=600) for a in agents]
        text = all_output(agents)
        assert codes == [0, 0, 0], text[-5000:]
        _check_completed(text)
        # Every agent placed the round the same way and says so in its start line.
        for agent in agents:
            assert ROLES in agent.err, agent.err[-2000:]
        # Each task listens on its own machine's address: the cluster spans the three machines.
        assert f"ps:0 pid" in agents[1].err and f"{machines.address(2)}:" in agents[1].err
        assert "[node2 worker:1]" not in agents[0].out + agents[0].err  # worker 1 ran on machine 3 only
        assert "chief:0 pid" in agents[0].err and "worker:1 pid" in agents[2].err
        assert machines.pids(1) == [] and machines.pids(2) == [] and machines.pids(3) == []
    assert machines.existing() == []


@pytest.mark.parametrize(("machine", "role"), [(2, "ps"), (1, "chief")], ids=["parameter-server", "chief"])
def test_a_killed_parameter_server_or_chief_restarts_the_job_from_its_checkpoint(tmp_path, machine, role):
    with Machines(3) as machines:
        agents = _start(machines, tmp_path, "--max-restarts", "2")
        # Per-epoch heartbeats: after epoch 1 (saved every 5 steps), in the newest round of 3 (round 0, or a later one
        # when a machine missed a keep-alive under load before the fault).
        wait_for_round_at_step(agents[0], tmp_path / "logs1", 3, 40, agents, task="chief-0", timeout=400)
        os.kill(_pid_of(machines, machine, role), signal.SIGKILL)
        codes = [a.wait(timeout=600) for a in agents]
        text = all_output(agents)
        assert codes == [0, 0, 0], text[-5000:]
        _check_completed(text)
        assert "tasks failed on" in text and f"{role}:0" in text  # the lost task ended round 0
        assert "round 1: started" in agents[0].err and ROLES in agents[0].err
        assert int(task_values(text, "resumed_from_step")["node0 chief:0"]) >= 5
        assert machines.pids(1) == [] and machines.pids(2) == [] and machines.pids(3) == []
    assert machines.existing() == []


def _new_pid_of(tmp_path, machine: int, round_: int, task: str, old: int, timeout: float = 120) -> int:
    """The pid of ``task`` once it is no longer ``old``, from that machine's ``tasks.json`` of ``round_`` (a task
    started from a warm spare gets its TFDIST_* variables after exec: /proc/PID/environ does not show them)."""
    path = tmp_path / f"logs{machine}" / f"attempt-{round_}" / "tasks.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = next(entry["pid"] for entry in json.loads(path.read_text()) if entry["task"] == task)
        except (OSError, ValueError, StopIteration):
            pid = old
        if pid != old:
            return pid
        time.sleep(0.2)
    raise AssertionError(f"{task} on machine {machine} was not started again")


def test_a_killed_worker_is_restarted_alone_on_its_machine_and_the_round_goes_on(tmp_path):
    with Machines(3) as machines:
        agents = _start(machines, tmp_path, "--max-restarts", "2")
        # Per-epoch heartbeats: after epoch 1, in the newest round of 3 (round 0, or a later one when a machine missed
        # a keep-alive under load before the fault); what counts is that THIS round goes on after the kill.
        trained = wait_for_round_at_step(agents[0], tmp_path / "logs1", 3, 40, agents, task="chief-0", timeout=400)
        marks = [a.mark() for a in agents]
        chief, ps = _pid_of(machines, 1, "chief"), _pid_of(machines, 2, "ps")
        victim = _pid_of(machines, 3, "worker")
        os.kill(victim, signal.SIGKILL)  # worker:1, alone on machine 3
        restarted = _new_pid_of(tmp_path, 3, trained, "worker:1", victim)
        _wait_for_chief_step(tmp_path, trained, 80, agents)  # epoch 2 trained in the same round
        assert (_pid_of(machines, 1, "chief"), _pid_of(machines, 2, "ps")) == (chief, ps), "chief and ps ran on"
        codes = [a.wait(timeout=600) for a in agents]
        text = all_output(agents)
        assert codes == [0, 0, 0], text[-5000:]
        _check_completed(text, reruns=1)
        assert "restarting worker:1 alone, in place (1/2)" in agents[2].err, agents[2].err[-3000:]
        assert f"worker:1 restarted in place: pid {restarted} {machines.address(3)}:" in agents[2].err
        after = "".join(a.since(m) for a, m in zip(agents, marks))
        assert f"round {trained + 1}" not in after and "restarting worker:1" not in agents[0].err + agents[1].err
        assert "resumed_from_step" not in after, "the job never restarted from its checkpoint"
        assert machines.pids(1) == [] and machines.pids(2) == [] and machines.pids(3) == []
    assert machines.existing() == []


@pytest.mark.skipif(why_no_sshd() is not None, reason=str(why_no_sshd()))
def test_a_host_file_places_the_roles_and_pins_the_parameter_server(tmp_path):
    with Machines(3, ssh=True) as machines:
        hostfile = tmp_path / "hosts"
        hostfile.write_text(f"{machines.address(1)} slots=2\n{machines.address(2)} slots=1 roles=ps\n"
                            f"{machines.address(3)} slots=2\n")
        driver = Agent(machines, 1, ["--hostfile", str(hostfile), "--chief", "--ps", "1", "--evaluator", *FAST,
                                     "--node-timeout", "6", "--", DIGITS, *SCRIPT_ARGS,
                                     "--model-dir", str(tmp_path / "model")], tmp_path).start()
        code = driver.wait(timeout=600)
        text = driver.out + driver.err
        assert code == 0, text[-5000:]
        _check_completed(text)
        # The evaluator sat beside the chief (the first machine with a free slot) and scored the final model.
        assert float(task_values(text, "evaluator_accuracy")["node0 evaluator:0"]) >= 0.85
        assert "roles: node0: chief:0 evaluator:0; node1: ps:0; node2: worker:0 worker:1" in text
        assert [p for i in (1, 2, 3) for p in machines.pids(i) if p not in machines.sshd_pids()] == []
    assert machines.existing() == []


def _ps_job_on_three_machines(machines: Machines, tmp_path: Path, *script_args: str) -> Agent:
    """The digits example with a chief and 1 ps from a host file (m1: chief and worker:0, m2 pinned ps, m3:
    worker:1), with a short node timeout and cool-down; started."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"{machines.address(1)} slots=2\n{machines.address(2)} slots=1 roles=ps\n"
                        f"{machines.address(3)} slots=1\n")
    return Agent(machines, 1, ["--hostfile", str(hostfile), "--chief", "--ps", "1", *FAST, "--node-timeout", "6",
                               "--host-cooldown-range", "1:4", "--log-dir", str(tmp_path / "logs"), "--tee",
                               "--", DIGITS, *SCRIPT_ARGS, "--model-dir", str(tmp_path / "model"), *script_args],
                 tmp_path).start()


@pytest.mark.skipif(why_no_sshd() is not None, reason=str(why_no_sshd()))
def test_the_parameter_server_s_machine_lost_then_back_restarts_the_job_from_its_checkpoint(tmp_path):
    with Machines(3, ssh=True) as machines:
        driver = _ps_job_on_three_machines(machines, tmp_path)
        # The newest round of 3 (round 0, or a later one when a machine missed a keep-alive under load); the loss
        # line is looked for after it, so that an earlier loss cannot answer for this one.
        wait_for_round_at_step(driver, tmp_path / "logs", 3, 40, [driver], task="chief-0", timeout=400)
        mark = driver.mark()
        machines.cut(2)
        machines.go_down(2)
        driver.wait_for(r"host 198\.18\.0\.2 lost: probing it over ssh again", timeout=120, after=mark[1])
        machines.reconnect(2)
        code = driver.wait(timeout=600)
        text = driver.out + driver.err
        assert code == 0, text[-5000:]
        _check_completed(text)
        assert "198.18.0.2" in lost_machines(text), text[-3000:]
        # A fixed cluster: every round had all 3 machines, the parameter server back on its pinned host.
        sizes = [int(w) for w in re.findall(r"round \d+: (\d+) machine\(s\)", driver.err)]
        assert len(sizes) >= 2 and set(sizes) == {3}, sizes
        assert text.count("roles: node0: chief:0 worker:0; node1: ps:0; node2: worker:1") >= 6  # 3 agents x 2 rounds
        assert int(task_values(text, "resumed_from_step")["node0 chief:0"]) >= 5
    assert machines.existing() == []


@pytest.mark.skipif(why_no_sshd() is not None, reason=str(why_no_sshd()))
def test_a_lost_machine_of_only_workers_leaves_the_round_running_and_rejoins_it(tmp_path):
    # m3 runs only worker:1. Cut off and its processes killed (a machine going down): no connection reset reaches the
    # chief, which sees the silent worker fail through gRPC keep-alive and trains on; the rendezvous keeps round 0
    # and m3's seat; the host answers ssh again, its new agent is sent round 0 and starts worker:1 at its old address.
    with Machines(3, ssh=True) as machines:
        driver = _ps_job_on_three_machines(machines, tmp_path, "--step-delay", "0.75")  # 30 s per epoch
        _wait_for_chief_step(tmp_path, 0, 40, [driver], logs="logs")
        chief, ps = _pid_of(machines, 1, "chief"), _pid_of(machines, 2, "ps")
        old_worker = re.search(r"worker:1 pid \d+ (198\.18\.0\.3:\d+)", driver.err)
        machines.cut(3)
        machines.go_down(3)  # its agent, worker and shared memory are gone
        driver.wait_for(r"host 198\.18\.0\.3 lost: probing it over ssh again", timeout=120)
        _wait_for_chief_step(tmp_path, 0, 80, [driver], logs="logs")  # epoch 2 trained while m3 is gone
        assert machines.pids(3) == [p for p in machines.pids(3) if p in machines.sshd_pids()], "m3 stayed down"
        assert (_pid_of(machines, 1, "chief"), _pid_of(machines, 2, "ps")) == (chief, ps), "chief and ps ran on"
        machines.reconnect(3)
        driver.wait_for(r"round 0: 198\.18\.0\.3 rejoins it", timeout=200)
        code = driver.wait(timeout=600)
        text = driver.out + driver.err
        assert code == 0, text[-5000:]
        _check_completed(text, reruns=1)
        assert "round 1" not in text and "resumed_from_step" not in text, "round 0 ran to the end"
        assert "lost machines: 198.18.0.3" in text
        # m3's new agent placed the same round: 3 agents at the start, then the one that came back.
        assert text.count("roles: node0: chief:0 worker:0; node1: ps:0; node2: worker:1") == 4, text[-5000:]
        assert old_worker is not None and len(re.findall(rf"worker:1 pid \d+ {re.escape(old_worker.group(1))}",
                                                         text)) == 2, "worker:1 started again at its old address"
    assert machines.existing() == []
