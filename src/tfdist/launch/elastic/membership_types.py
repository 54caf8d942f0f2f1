"""The rendezvous' vocabulary: the job's settings, what it knows of a machine, and the actions its policy returns.

Plain data, shared by the membership policy (``membership.py``), the server that carries the actions out and their tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


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
    node_timeout: float = 10.0
    rdzv_timeout: float = 300.0
    first_round_wait: float = 3.0  # torchrun's "last call": once MIN are there, wait this long for up to MAX
    max_restarts: int = 3
    restart_window: float = 0.0  # --restart-window: a restart older than this no longer counts (0: never expires)
    backoff: float = 0.0  # --backoff: seconds before the first restart after a failure; doubles, capped at 30 s
    fail_limit: int = 2
    cooldown: float = 300.0
    after_success: float = 10.0
    stop_timeout: float = 60.0


@dataclass
class Node:
    """A machine known to the rendezvous (one agent connection)."""

    node_id: int
    name: str
    address: str
    slots: int
    requested_rank: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    ready: bool = False
    ports: tuple[int, ...] = ()
    backup: dict[str, Any] | None = None
    in_round: bool = False
    training: bool = False
    outcome: str | None = None
    step: int | None = None

    @property
    def label(self) -> str:
        return f"{self.name} ({self.address})" if self.name != self.address else self.address


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
    nodes: tuple[tuple[int, str, str], ...]  # (rank, name, address)


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
