"""The agent's named phases (agent/phases.py): the table of moves, and the way real agents went through them in
process (tests/unit/elastic/agent/test_agent_in_process.py checks every agent it ran against this table)."""
from __future__ import annotations

import pytest

from tfdist.launch.elastic.agent.phases import MOVES, AgentPhase as P, allowed


@pytest.mark.parametrize("path, ok", [
    ([P.JOINING, P.WAITING, P.RUNNING, P.STOPPING, P.WAITING, P.DONE], True),  # a round that ended, then the end
    ([P.JOINING, P.WAITING, P.RESTORING, P.RUNNING, P.REJOINING, P.WAITING, P.DONE], True),  # a lost rendezvous
    ([P.JOINING, P.DONE], True),  # refused, or out of time
    ([P.JOINING, P.RUNNING], False),  # a round before joining
    ([P.WAITING, P.DONE], False),  # not from joining
    ([P.JOINING, P.WAITING, P.DONE, P.WAITING], False),  # nothing after the end
    ([P.JOINING, P.REJOINING], False),  # nothing to rejoin before a first join
])
def test_the_moves_table(path, ok):
    assert allowed(path) is ok


def test_every_phase_is_reachable_and_only_done_is_final():
    reached = {P.JOINING} | {b for moves in MOVES.values() for b in moves}
    assert reached == set(P)
    assert [p for p, moves in MOVES.items() if not moves] == [P.DONE]
