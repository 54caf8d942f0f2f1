"""Multi-machine training on the etcd rendezvous backend with real TensorFlow and a real 3-member etcd cluster on the
emulated machines: a job runs; the first machine (the one that would have hosted the built-in server) is cut off
mid-job and the others finish from its checkpoint; the etcd leader is killed mid-job and the job goes on; etcd gone
for longer than the node timeout stops every machine with one line, and a rerun resumes where they stopped."""
from __future__ import annotations

import re

import pytest

from tests.integration.etcd_cluster import EtcdCluster, why_no_etcd
from tests.integration.multilib import (
    DIGITS, FAST, Agent, all_output, job_secret_file, lost_machines, task_values, wait_for_round_at_step,
)
from tests.integration.netns import Machines, why_no_namespaces
from tests.integration.test_multinode_elastic import heartbeat_step, wait_for_step

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces())),
              pytest.mark.skipif(why_no_etcd() is not None, reason=str(why_no_etcd()))]

EPOCHS, STEPS = 2, 30
TOTAL_STEPS = EPOCHS * STEPS
SCRIPT = ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--save-every", "5", "--no-tensorboard",
          "--step-delay", "0.05"]


def etcd_args(etcd: EtcdCluster, nnodes: str, model: str, logs: str, secret: str, *extra: str,
              job: str = "digits") -> list[str]:
    return ["--nnodes", nnodes, "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd.endpoints, "--rdzv-id", job,
            "--rdzv-secret-file", secret, "-n", "1", *FAST, "--log-dir", logs, "--tee", *extra, "--", DIGITS, *SCRIPT, "--model-dir", model]


def start(machines, etcd, tmp_path, which, nnodes, *extra, job="digits") -> list[Agent]:
    model = str(tmp_path / "model")
    secret = str(tmp_path / "job.secret")
    if not (tmp_path / "job.secret").exists():
        job_secret_file(tmp_path)
    return [Agent(machines, i, etcd_args(etcd, nnodes, model, str(tmp_path / f"logs{i}"), secret, "--node-rank",
                                         str(i - 1), *extra, job=job), tmp_path).start() for i in which]


def test_the_first_machine_cut_off_the_others_finish_from_its_checkpoint(tmp_path):
    with Machines(3) as machines, EtcdCluster(machines, members=(1, 2, 3)) as etcd:
        agents = start(machines, etcd, tmp_path, (1, 2, 3), "2:3", "--rdzv-timeout", "30")
        # The newest round of 3, not round 0: under load a machine can miss a keep-alive before the fault, and then
        # the job re-forms; only what is printed after the fault counts below.
        wait_for_round_at_step(agents[0], tmp_path / "logs1", 3, 15, agents)
        marks = [a.mark() for a in agents]
        machines.cut(1)  # node rank 0, an etcd member, and where the built-in server would have run
        codes = [a.wait() for a in agents[1:]]
        text = agents[1].since(marks[1]) + agents[2].since(marks[2])
        assert codes == [0, 0], all_output(agents[1:])[-5000:]
        resumed = re.search(r"resumed_from_step=(\d+) world_size=(\d+)", text)
        assert resumed and int(resumed.group(1)) >= 5 and resumed.group(2) == "2", text[-3000:]
        steps = task_values(text, "train_steps")
        assert set(steps.values()) == {str(TOTAL_STEPS)} and len(steps) == 2, steps
        assert "198.18.0.1" in lost_machines(text), text[-3000:]
        agents[0].proc.kill()
        agents[0].wait()
    assert machines.existing() == []


def test_the_etcd_leader_killed_mid_job_the_job_goes_on(tmp_path):
    with Machines(3) as machines, EtcdCluster(machines, members=(1, 2, 3)) as etcd:
        # etcd is unavailable while it elects a new leader (1-2 election timeouts, 1 s each here): the node timeout
        # must be longer than that (users get 10 s).
        agents = start(machines, etcd, tmp_path, (1, 2), "2", "--node-timeout", "5")
        wait_for_step(str(tmp_path / "logs1"), 0, 0, 10, agents)
        leader = etcd.leader()
        etcd.kill(leader)
        codes = [a.wait() for a in agents]
        text = all_output(agents)
        assert codes == [0, 0], text[-5000:]
        assert etcd.leader() != leader
        steps = task_values(text, "train_steps")
        assert set(steps.values()) == {str(TOTAL_STEPS)} and len(steps) == 2, steps
        # The round went on: no machine was lost and no round restarted.
        assert "#0: 2 machine(s)" in text and "#1:" not in text and "lost machines" not in text, text[-3000:]
    assert machines.existing() == []


def test_etcd_unreachable_stops_every_machine_with_one_line_and_a_rerun_loses_nothing(tmp_path):
    with Machines(3) as machines, EtcdCluster(machines, members=(1, 2, 3)) as etcd:
        agents = start(machines, etcd, tmp_path, (1, 2), "2", "--rdzv-timeout", "3")
        trained = wait_for_round_at_step(agents[0], tmp_path / "logs1", 2, 15, agents)  # round 0, or a later one
        for member in etcd.members:
            etcd.pause(member)
        reached = heartbeat_step(str(tmp_path / "logs1"), trained, 0)
        codes = [a.wait(timeout=180) for a in agents]
        for member in etcd.members:
            etcd.resume(member)
        assert codes == [3, 3], all_output(agents)[-4000:]
        for agent in agents:
            last = agent.err.strip().splitlines()[-1]
            assert re.search(r"no etcd answered at .* in time \(--rdzv-timeout 3s\)", last), agent.err[-3000:]
            assert "lost the rendezvous (etcd at" in agent.err
        # Nothing lost: a second run (a new job id, the same model directory) resumes at least where they were.
        again = start(machines, etcd, tmp_path, (1, 2), "2", job="digits-again")
        assert [a.wait() for a in again] == [0, 0], all_output(again)[-4000:]
        resumed = re.search(r"resumed_from_step=(\d+)", all_output(again))
        assert resumed and reached is not None and int(resumed.group(1)) >= reached, (reached, resumed)
    assert machines.existing() == []
