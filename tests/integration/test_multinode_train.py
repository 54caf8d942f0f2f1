"""Real TensorFlow training across emulated machines: 2 machines x 2 workers, through the rendezvous and through a
host file over ssh. Each machine is a network namespace; every process is gone at the end."""
from __future__ import annotations

import pytest

from tests.integration.multilib import (
    DIGITS, FAST, SCRIPT_ARGS, TOTAL_STEPS, Agent, all_output, rendezvous_args, task_values,
)
from tests.integration.netns import Machines, why_no_namespaces, why_no_sshd

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]


def _check_trained(text: str, workers: int) -> None:
    accuracy = task_values(text, "final_accuracy")
    assert list(accuracy) == ["node0 worker:0"], text[-3000:]
    assert float(accuracy["node0 worker:0"]) >= 0.90
    checksums = task_values(text, "weights_checksum")
    assert len(checksums) == workers and len(set(checksums.values())) == 1, checksums
    steps = task_values(text, "train_steps")
    assert set(steps.values()) == {str(TOTAL_STEPS)}


@pytest.mark.xfail(strict=False, reason="known bug, open: in rendezvous mode an agent sometimes loses the last "
                   "relayed lines of one of its workers (seen in 2 of 4 full runs); the job itself succeeds")
def test_two_machines_two_workers_each_through_the_rendezvous(tmp_path):
    with Machines(2) as machines:
        agents = [Agent(machines, i, rendezvous_args(machines, "2", 2, str(tmp_path / "model")), tmp_path).start()
                  for i in (1, 2)]
        codes = [a.wait() for a in agents]
        text = all_output(agents)
        assert codes == [0, 0], text[-4000:]
        _check_trained(text, 4)
        # Without --node-rank, ranks follow arrival; worker indices follow node rank, then local index.
        first, second = sorted(agents, key=lambda a: "[node0 " not in a.out)
        assert "[node0 worker:0]" in first.out and "[node0 worker:1]" in first.out
        assert "[node1 worker:2]" in second.out and "[node1 worker:3]" in second.out
        # Addresses are the machines' own.
        assert "198.18.0.1" in agents[0].err and "198.18.0.2" in agents[1].err
        assert "127.0.0.1" not in text and "0.0.0.0" not in text
        assert machines.pids(1) == [] and machines.pids(2) == []
    assert machines.existing() == []


@pytest.mark.skipif(why_no_sshd() is not None, reason=str(why_no_sshd()))
def test_two_machines_two_workers_each_through_a_host_file(tmp_path):
    with Machines(2, ssh=True) as machines:
        hostfile = tmp_path / "hosts"
        hostfile.write_text(f"# the test machines\n{machines.address(1)} slots=2\n{machines.address(2)}\n")
        driver = Agent(machines, 1, ["--hostfile", str(hostfile), "-n", "2", *FAST, "--", DIGITS, *SCRIPT_ARGS,
                                     "--model-dir", str(tmp_path / "model")], tmp_path).start()
        code = driver.wait()
        text = driver.out + driver.err
        assert code == 0, text[-4000:]
        _check_trained(text, 4)
        assert "[node1 worker:3]" in text
        assert [p for p in machines.pids(1) + machines.pids(2) if p not in machines.sshd_pids()] == []
    assert machines.existing() == []
