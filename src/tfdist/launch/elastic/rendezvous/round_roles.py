"""Roles across machines (``--chief``, ``--ps N``, ``--evaluator``): one round's machines -> every task's address,
this machine's tasks and the machine that holds the leader. Pure.

The rendezvous sends each round's machines ordered by node rank, each with its number of slots (one port each) and
the roles it is pinned to, and the slots' addresses in the same order. Every agent, and the rendezvous itself, runs
the one placement rule (:func:`tfdist.cluster.placement.place`) over them: all arrive at the same cluster without a
placement travelling on the wire. A machine's slot ``s`` listens at ``workers[first_slot_of_its_machine + s]``.
"""
from __future__ import annotations

from typing import Any, Sequence

from tfdist.cluster.placement import MachineSlots, Placement, RoleCounts, place
from tfdist.cluster.roles import ALL_ROLES, TaskId, leader_of
from tfdist.launch.local.layout import ClusterLayout

# One machine of a round as the rendezvous sends it: [rank, name, address, slots, roles].
RoundNode = Sequence[Any]


def machine_name(rank: int) -> str:
    return f"node{rank}"


def machines_of(nodes: Sequence[RoundNode]) -> list[MachineSlots]:
    """The round's machines in node-rank order, as the placement rule sees them."""
    ordered = sorted(nodes, key=lambda n: int(n[0]))
    return [MachineSlots(machine_name(int(n[0])), int(n[3]), tuple(n[4]) if len(n) > 4 else ()) for n in ordered]


def round_layout(nodes: Sequence[RoundNode], workers: Sequence[str],
                 counts: RoleCounts) -> tuple[ClusterLayout, list[Placement]]:
    """The whole job's cluster for this round, and where each task runs. Raises UsageError when the tasks do not fit."""
    machines = machines_of(nodes)
    placements = place(machines, counts)
    first: dict[str, int] = {}
    cursor = 0
    for machine in machines:
        first[machine.name] = cursor
        cursor += machine.slots
    addresses: dict[str, list[str]] = {role: [] for role in ALL_ROLES}
    for p in sorted(placements, key=lambda p: (ALL_ROLES.index(p.task.type), p.task.index)):
        addresses[p.task.type].append(workers[first[p.machine] + p.slot])
    layout = ClusterLayout(**{role: tuple(found) for role, found in addresses.items()})
    return layout, placements


def local_tasks(placements: Sequence[Placement], rank: int) -> tuple[str, ...]:
    """The names (``ps:0``) of the tasks node ``rank`` runs, in slot order."""
    mine = sorted((p for p in placements if p.machine == machine_name(rank)), key=lambda p: p.slot)
    return tuple(str(p.task) for p in mine)


def tasks_by_rank(placements: Sequence[Placement]) -> dict[int, tuple[str, ...]]:
    """:func:`local_tasks` of every machine, in one pass: asking each of N machines in turn went over all N
    machines' tasks each time (N^2; 0.11 s per round of 1,024 machines, under the rendezvous' lock)."""
    by_machine: dict[str, list[Placement]] = {}
    for p in placements:
        by_machine.setdefault(p.machine, []).append(p)
    return {int(machine[len("node"):]): tuple(str(p.task) for p in sorted(tasks, key=lambda p: p.slot))
            for machine, tasks in by_machine.items()}


def leader_rank(placements: Sequence[Placement]) -> int:
    """The node rank of the machine that runs the leader (the chief, else worker 0): its success ends the job."""
    lead = leader_of(p.task for p in placements) or TaskId("worker", 0)
    holder = next((p.machine for p in placements if p.task == lead), machine_name(0))
    return int(holder[len("node"):])


def describe(placements: Sequence[Placement]) -> str:
    """``node0: chief:0 worker:0; node1: ps:0 worker:1``, for the round's start line."""
    by_machine: dict[str, list[Placement]] = {}
    for p in placements:
        by_machine.setdefault(p.machine, []).append(p)
    return "; ".join(f"{name}: " + " ".join(str(p.task) for p in sorted(tasks, key=lambda p: p.slot))
                     for name, tasks in sorted(by_machine.items(), key=lambda item: int(item[0][len("node"):])))
