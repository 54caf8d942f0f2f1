"""--firewall's admitted set follows the rounds of a rendezvous job, across emulated machines (netns.py): a machine
that joins is admitted by the round that takes it in, a machine that left is shut out by the next one, and a machine
never in the job reaches nothing, for the tasks' TensorFlow and metrics ports and the agent's own
``--launcher-metrics-port``. Stand-in tasks (firewall_lib.py) listen as TensorFlow does; the agents' launcher metrics
are the real ones, bound to every interface (``--metrics-host 0.0.0.0``)."""
from __future__ import annotations

import signal
import time

import pytest

from tests.integration.firewall_lib import (RELAXED, STAND_IN, reaches, reaches_soon, shut_out, tfdist_tables,
                                           wait_until_no_table)
from tests.integration.multilib import FAST, Agent, all_output, job_secret_file
from tests.integration.netns import Machines, why_no_namespaces
from tfdist.launch.firewall.nft import find_nft

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces())),
              pytest.mark.skipif(find_nft() is None,
                                 reason="nft is not installed (.ci/system-deps.sh installs nftables)")]

PORT, METRICS, LAUNCHER_METRICS = 23456, 24100, 25100  # inside the machines' own namespaces: free there
NEWCOMER, STRANGER = 2, 3


def _agent(machines: Machines, i: int, tmp_path, secret: str, script) -> Agent:
    return Agent(machines, i, ["--nnodes", "1:2", "--rdzv-endpoint", f"{machines.address(1)}:29400",
                               "--rdzv-id", "fwrounds", "--rdzv-secret-file", secret, "-n", "1", *FAST,
                               *RELAXED,
                               "--node-rank", str(i - 1), "--port-base", str(PORT), "--metrics-port", str(METRICS),
                               "--metrics-host", "0.0.0.0", "--launcher-metrics-port", str(LAUNCHER_METRICS),
                               "--rdzv-timeout", "120", "--firewall", "--", str(script), str(tmp_path)],
                 tmp_path).start()


def _round_on(agent: Agent, machines: int, after: int, agents: list[Agent]) -> None:
    try:
        agent.wait_for(rf"round \d+: started workers .* on {machines} machine\(s\)", after=after)
    except AssertionError:
        raise AssertionError(f"no round on {machines} machine(s):\n" + all_output(agents)[-4000:]) from None


def _listening(machines: Machines, i: int, port: int, agents: list[Agent], seconds: float = 60) -> None:
    """Until machine ``i``'s own port ``port`` answers machine ``i`` (the round's task is up)."""
    deadline = time.monotonic() + seconds
    while not reaches(machines, i, machines.address(i), port):
        assert time.monotonic() < deadline, f"machine {i}: nothing on {port}:\n" + all_output(agents)[-4000:]
        time.sleep(0.1)


def test_each_round_admits_its_machines_only_the_newcomer_in_and_the_leaver_out(tmp_path):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    secret = job_secret_file(tmp_path)
    with Machines(3) as machines:
        first = _agent(machines, 1, tmp_path, secret, script)
        agents = [first]
        home = machines.address(1)
        # Round 0: machine 1 alone. The machine that will join is not in the job yet: shut out like any stranger.
        _round_on(first, 1, 0, agents)
        _listening(machines, 1, PORT, agents)
        for port in (PORT, METRICS, LAUNCHER_METRICS):
            assert shut_out(machines, NEWCOMER, home, port), port
            assert shut_out(machines, STRANGER, home, port), port
        # Machine 2 joins: the round that takes it in admits it, before its tasks listen.
        mark = first.mark()[1]
        agents.append(_agent(machines, NEWCOMER, tmp_path, secret, script))
        _round_on(first, 2, mark, agents)
        _listening(machines, 1, PORT, agents)
        _listening(machines, NEWCOMER, PORT, agents)
        newcomer = machines.address(NEWCOMER)
        for port in (PORT, METRICS, LAUNCHER_METRICS):
            assert reaches_soon(machines, NEWCOMER, home, port), port
        for port in (PORT, METRICS + 1, LAUNCHER_METRICS):  # worker 1 serves its metrics on --metrics-port + 1
            assert reaches_soon(machines, 1, newcomer, port), port
            assert shut_out(machines, STRANGER, newcomer, port), port
        for port in (PORT, METRICS, LAUNCHER_METRICS):
            assert shut_out(machines, STRANGER, home, port), port
        assert sorted(tfdist_tables(machines)) == [1, NEWCOMER]
        # Machine 2 leaves: the next round, on machine 1 alone, no longer admits it.
        mark = first.mark()[1]
        agents[1].proc.send_signal(signal.SIGTERM)
        agents[1].wait(120)
        _round_on(first, 1, mark, agents)
        _listening(machines, 1, PORT, agents)
        for port in (PORT, METRICS, LAUNCHER_METRICS):
            assert shut_out(machines, NEWCOMER, home, port), port
        assert NEWCOMER not in tfdist_tables(machines)  # its agent deleted its own table on the way out
        (tmp_path / "stop").touch()
        assert first.wait(120) == 0, all_output(agents)[-4000:]
        assert wait_until_no_table(machines) == {}
