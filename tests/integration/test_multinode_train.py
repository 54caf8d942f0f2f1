"""Real TensorFlow training across emulated machines: 2 machines x 2 workers, through the rendezvous and through a
host file over ssh. Each machine is a network namespace; every process is gone at the end."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.multilib import (
    DIGITS, FAST, SCRIPT_ARGS, TOTAL_STEPS, Agent, all_output, rendezvous_args, task_values,
)
from tests.integration.netns import Machines, why_no_namespaces, why_no_sshd
from tfdist.cli.main import main
from tfdist.launch.console import runs

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]


# Nothing is taken down here, so no quick loss detection is needed: the default keep-alive (what users get), not
# FAST's 2 s, which a machine can miss under load (the job then re-forms, and "lost" below would fail the test).
NODE_TIMEOUT = ["--node-timeout", "10"]


def _check_trained(text: str, workers: int) -> None:
    accuracy = task_values(text, "final_accuracy")
    assert list(accuracy) == ["node0 worker:0"], text[-3000:]
    assert float(accuracy["node0 worker:0"]) >= 0.90
    checksums = task_values(text, "weights_checksum")
    assert len(checksums) == workers and len(set(checksums.values())) == 1, checksums
    steps = task_values(text, "train_steps")
    assert set(steps.values()) == {str(TOTAL_STEPS)}
    # One report shape with the single-machine launcher's; the agents leaving a finished job is no loss.
    assert "succeeded after 0 restart(s)" in text and "succeeded: succeeded" not in text
    assert "lost node" not in text and "lost machines" not in text


def _check_recorded(environ: dict[str, str], machines: int) -> list[runs.RunRecord]:
    """A run record per machine, ended as succeeded, its temporary folder (no --log-dir) gone."""
    records = runs.list_records(environ)
    assert len(records) == machines, records
    for record in records:
        assert record.ended and record.state == "succeeded" and record.temporary
        assert record.summary["steps"] == TOTAL_STEPS
        assert not Path(record.log_dir).exists()  # no tfdist-agent-* folder left behind
    return records


def test_two_machines_two_workers_each_through_the_rendezvous(tmp_path):
    with Machines(2) as machines:
        agents = [Agent(machines, i, rendezvous_args(machines, "2", 2, str(tmp_path / "model"), *NODE_TIMEOUT),
                        tmp_path).start() for i in (1, 2)]
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
        # Every machine recorded its run: tfdist status and tfdist logs find it as they find a one-machine run.
        for record in _check_recorded(dict(os.environ), 2):
            assert main(["status", record.run_id]) == 0
    assert machines.existing() == []


@pytest.mark.skipif(why_no_sshd() is not None, reason=str(why_no_sshd()))
def test_two_machines_two_workers_each_through_a_host_file(tmp_path):
    with Machines(2, ssh=True) as machines:
        hostfile = tmp_path / "hosts"
        hostfile.write_text(f"# the test machines\n{machines.address(1)} slots=2\n{machines.address(2)}\n")
        driver = Agent(machines, 1, ["--hostfile", str(hostfile), "-n", "2", *FAST, *NODE_TIMEOUT, "--", DIGITS,
                                     *SCRIPT_ARGS, "--model-dir", str(tmp_path / "model")], tmp_path).start()
        code = driver.wait()
        text = driver.out + driver.err
        assert code == 0, text[-4000:]
        _check_trained(text, 4)
        assert "[node1 worker:3]" in text
        assert [p for p in machines.pids(1) + machines.pids(2) if p not in machines.sshd_pids()] == []
        for i in (1, 2):  # each host's agent recorded its run in that host's state folder (see netns.py)
            _check_recorded({"XDG_STATE_HOME": str(machines.workdir / f"state-m{i}")}, 1)
    assert machines.existing() == []
