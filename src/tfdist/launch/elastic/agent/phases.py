"""The agent's own phases, named, and the moves between them. Pure.

One machine's agent is always in one of these; ``Agent.phase`` says which and ``Agent.phases`` keeps the way it
went (tests check it against :data:`MOVES`). They are the agent's side of a round, not the job's (the rendezvous'
phases are :class:`~tfdist.launch.elastic.rendezvous.membership_types.Phase`):

- ``joining``: reaching the rendezvous and joining it (the first time);
- ``waiting``: a member, ready, with nothing of a round running here;
- ``restoring``: a round arrived; taking in the backup or in-memory snapshot it names before the tasks start;
- ``running``: this machine's tasks of the round run;
- ``stopping``: stopping them (the rendezvous said so, a signal, the job's end);
- ``rejoining``: the rendezvous was lost; joining it again for up to ``--rdzv-timeout``;
- ``done``: left (the job is over, refused, out of time, or stopped from outside).
"""
from __future__ import annotations

from enum import Enum


class AgentPhase(str, Enum):
    JOINING = "joining"
    WAITING = "waiting"
    RESTORING = "restoring"
    RUNNING = "running"
    STOPPING = "stopping"
    REJOINING = "rejoining"
    DONE = "done"


P = AgentPhase
MOVES: dict[AgentPhase, frozenset[AgentPhase]] = {
    P.JOINING: frozenset({P.WAITING, P.DONE}),
    P.WAITING: frozenset({P.RESTORING, P.RUNNING, P.STOPPING, P.REJOINING, P.DONE}),
    P.RESTORING: frozenset({P.RUNNING, P.WAITING, P.REJOINING, P.DONE}),
    P.RUNNING: frozenset({P.STOPPING, P.WAITING, P.REJOINING, P.DONE}),
    P.STOPPING: frozenset({P.WAITING, P.REJOINING, P.DONE}),
    P.REJOINING: frozenset({P.WAITING, P.DONE}),
    P.DONE: frozenset(),
}


def allowed(path: list[AgentPhase]) -> bool:
    """Whether ``path`` (from ``joining``) only makes the moves of :data:`MOVES`."""
    return bool(path) and path[0] is P.JOINING and all(b in MOVES[a] for a, b in zip(path, path[1:]))
