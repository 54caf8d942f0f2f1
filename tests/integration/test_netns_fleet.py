"""Sixteen machines started in the same second (issue 33): one network namespace each (netns.py), each running a
real ``tfdist launch`` agent of one elastic job (--nnodes 16) against the built-in TCP rendezvous that machine 1's
agent serves. The task is a stand-in (no TensorFlow): it prints what its launcher gave it and exits 0.

Every machine must be in the first round, every task must see a world of 16, and every agent must finish with
status 0. Real launchers start over a few seconds on two cores, not in the same millisecond: this passes on the tree
before issue 33 too (at 16 and at 64 machines); the in-process bursts (test_rdzv_fleet.py, test_rdzv_storms.py) are
the ones that are tight enough to fail there."""
from __future__ import annotations

import re

import pytest

from tests.integration.multilib import ROUND_STARTED, Agent, all_output, job_secret_file, task_values
from tests.integration.netns import Machines, why_no_namespaces

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]

MACHINES = 16

# The stand-in task: what a TensorFlow script would read, printed as key=value lines (task_values reads them).
STANDIN = r"""
import json, os
config = json.loads(os.environ["TF_CONFIG"])
workers = sum(len(addresses) for addresses in config["cluster"].values())
print(f"standin index={config['task']['index']} world={workers}", flush=True)
"""


def test_sixteen_machines_started_at_once_all_reach_one_round_and_finish_with_0(tmp_path):
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    secret = job_secret_file(tmp_path)
    with Machines(MACHINES) as machines:
        # --node-timeout 10: sixteen launchers starting on two shared cores must not lose each other for a slow
        # keep-alive; --no-warm-spares: a spare would import TensorFlow.
        agents = [Agent(machines, i, ["--nnodes", str(MACHINES), "--rdzv-endpoint", f"{machines.address(1)}:29400",
                                      "--rdzv-id", "fleet", "--rdzv-secret-file", secret, "-n", "1",
                                      "--node-timeout", "10", "--rdzv-timeout", "120", "--no-warm-spares",
                                      "--", str(script)], tmp_path)
                  for i in range(1, MACHINES + 1)]
        for agent in agents:  # in the same second, the serving machine's agent among them
            agent.start()
        codes = [agent.wait(timeout=240) for agent in agents]
        text = all_output(agents)
        assert codes == [0] * MACHINES, text[-4000:]
        rounds = [ROUND_STARTED.findall(agent.err) for agent in agents]
        # One round, the first, on all sixteen machines: nobody was turned away and nobody had to be waited for.
        assert all(found == [("0", str(MACHINES))] for found in rounds), [r for r in rounds if len(r) != 1][:3]
        worlds = task_values(text, "world")
        assert len(worlds) == MACHINES and set(worlds.values()) == {str(MACHINES)}, worlds
        indices = sorted(int(i) for i in task_values(text, "index").values())
        assert indices == list(range(MACHINES))
        assert not re.search(r"did not prove|different secret", text)
    assert machines.existing() == []
