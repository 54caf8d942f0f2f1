"""The rendezvous' vocabulary: the job's settings, what it knows of a machine, and the actions its policy returns.

Plain data, shared by the membership policy (``membership.py``), the server that carries the actions out, and tests.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tfdist.launch.options import DEFAULTS
from tfdist.launch.outcome import Outcome


class Phase(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHING = "finishing"
    DONE = "done"


@dataclass(frozen=True)
class RendezvousSettings:
    """The job's shape and clocks (seconds)."""

    job: str
    min_nodes: int
    max_nodes: int
    node_timeout: float = DEFAULTS.node_timeout
    rdzv_timeout: float = DEFAULTS.rdzv_timeout
    first_round_wait: float = DEFAULTS.rdzv_last_call  # torchrun's "last call": once MIN are there, wait for MAX
    max_restarts: int = DEFAULTS.max_restarts
    restart_window: float = 0.0  # --restart-window: a restart older than this no longer counts (0: never expires)
    backoff: float = 0.0  # --backoff: seconds before the first restart after a failure; doubles, capped at 30 s
    fail_limit: int = 2
    cooldown: float = 300.0
    after_success: float = 10.0
    stop_timeout: float = 60.0

    @classmethod
    def for_job(cls, job: str, min_nodes: int, max_nodes: int, *, node_timeout: float, rdzv_timeout: float,
                first_round_wait: float, max_restarts: int, grace_period: float, restart_window: float = 0.0,
                backoff: float = 0.0) -> RendezvousSettings:
        """The settings of a launched job: a stop waits for the tasks' grace period plus a lost machine's timeout."""
        return cls(job=job, min_nodes=min_nodes, max_nodes=max_nodes, node_timeout=node_timeout,
                   rdzv_timeout=rdzv_timeout, first_round_wait=first_round_wait, max_restarts=max_restarts,
                   restart_window=restart_window, backoff=backoff, stop_timeout=grace_period + node_timeout + 5)


@dataclass
class Node:
    """A machine known to the rendezvous (one agent connection)."""

    node_id: int
    name: str
    address: str
    slots: int
    requested_rank: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    roles: tuple[str, ...] = ()  # pinned roles (a host file's roles=, --node-roles); empty: any
    layout: str = ""  # the job's roles as its agent knows them (placement.counts_text)
    ready: bool = False
    ports: tuple[int, ...] = ()
    backup: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None  # its newest complete in-memory snapshot (snapshot_plan.py)
    here: bool = False  # the agent of the machine serving the rendezvous, joined in-process: nobody can pose as it
    in_round: bool = False
    training: bool = False
    outcome: Outcome | None = None
    step: int | None = None

    @functools.cached_property
    def label(self) -> str:
        """How reports name the machine: its name and address as the peer sent them, reduced to printable text
        (made once: name and address never change, and the policy asks for it per machine per tick)."""
        from tfdist.validate import printable

        name, address = printable(self.name), printable(self.address)
        return f"{name} ({address})" if name != address else address


@dataclass(frozen=True)
class Assignment:
    node_id: int
    node_rank: int
    first_index: int


@dataclass(frozen=True)
class StartRound:
    round: int
    world_size: int
    workers: tuple[str, ...]
    assignments: tuple[Assignment, ...]
    nodes: tuple[tuple[Any, ...], ...]  # (rank, name, address, slots, roles)
    rejoin: bool = False  # the running round, sent again to a machine that was lost and came back (its seat only)


@dataclass(frozen=True)
class Stop:
    node_ids: tuple[int, ...]
    graceful: bool
    reason: str


@dataclass(frozen=True)
class Finish:
    status: int
    report: str


RoundAction = StartRound | Stop | Finish
