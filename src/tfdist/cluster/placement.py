"""Which machine runs which task of a multi-machine job with roles (``--chief``, ``--ps N``, ``--evaluator``). Pure.

The rule, in the order the tasks are placed:

1. the chief, then the parameter servers ``ps:0..N-1``, then the evaluator: each on the first machine (in host-file
   or rendezvous order) that has a free slot and takes that role. A machine whose line pins roles
   (``host slots=2 roles=ps``) takes only those roles, and it is preferred for them: ``roles=ps`` machines get the
   parameter servers before any unpinned machine does;
2. workers fill every free slot left on the machines that take workers (unpinned, or pinned with ``worker``), in
   machine order; ``workers`` caps their number when given.

So with no pins the chief and the parameter servers sit on the first machines, and the evaluator after them: as
ParameterServerStrategy wants, the coordinator (chief) and the variables (ps) stay where the job started, and a lost
late machine only costs workers, which the ClusterCoordinator tolerates. ``--dry-run`` prints the result.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tfdist.cluster.roles import ALL_ROLES, TaskId
from tfdist.errors import UsageError

SPECIAL_ORDER = ("chief", "ps", "evaluator")
# roles=ps / roles=chief,ps: lower-case words and commas only, matched whole (nothing else on the line survives).
_ROLE_LIST = re.compile(r"[a-z]{1,16}( ?, ?[a-z]{1,16}){0,3}")


@dataclass(frozen=True)
class MachineSlots:
    """One machine as placement sees it: its name, how many tasks it may run, and the roles it is pinned to."""

    name: str
    slots: int
    roles: tuple[str, ...] = ()  # empty: any role

    def takes(self, role: str) -> bool:
        return not self.roles or role in self.roles


@dataclass(frozen=True)
class RoleCounts:
    chief: bool = False
    ps: int = 0
    evaluator: bool = False
    workers: int | None = None  # None: every slot left


@dataclass(frozen=True)
class Placement:
    task: TaskId
    machine: str
    slot: int  # the task's position on its machine (0-based)


def parse_roles(text: str, where: str) -> tuple[str, ...]:
    """``"ps"`` / ``"chief,ps"`` from a host-file line's ``roles=``. Raises UsageError naming ``where``."""
    roles = tuple(r.strip() for r in text.split(",")) if _ROLE_LIST.fullmatch(text) else ()
    unknown = [r for r in roles if r not in ALL_ROLES]
    if not roles or unknown or len(set(roles)) != len(roles):
        raise UsageError(f"{where}: roles={text[:60]!r} is not a list of roles",
                         hint=f"use one or more of {', '.join(ALL_ROLES)}, comma-separated (roles=ps)")
    return roles


def place(machines: list[MachineSlots], counts: RoleCounts) -> list[Placement]:
    """Every task's machine and slot (chief, ps, evaluator, then workers). Raises UsageError when they do not fit."""
    if not machines:
        raise UsageError("no machines to place the job's tasks on")
    used = {m.name: 0 for m in machines}
    placed: list[Placement] = []
    special = [TaskId(role, index) for role, count in (("chief", int(counts.chief)), ("ps", counts.ps),
                                                       ("evaluator", int(counts.evaluator))) for index in range(count)]
    for task in special:
        pinned = [m for m in machines if task.type in m.roles]
        candidates = [m for m in pinned or [m for m in machines if m.takes(task.type)] if used[m.name] < m.slots]
        if not candidates:
            where = "the machines pinned with roles=" + task.type if pinned else "the machines that take it"
            raise UsageError(f"no free slot for {task} on {where} ({_describe(machines)})",
                             hint="add a machine or slots, or pin a machine to the role: host slots=N roles="
                                  + task.type)
        machine = candidates[0]
        placed.append(Placement(task, machine.name, used[machine.name]))
        used[machine.name] += 1
    free = [(m, slot) for m in machines if m.takes("worker") for slot in range(used[m.name], m.slots)]
    wanted = len(free) if counts.workers is None else counts.workers
    if wanted > len(free):
        raise UsageError(f"{wanted} worker(s) do not fit: {len(free)} slot(s) left after the chief, parameter servers "
                         f"and evaluator ({_describe(machines)})", hint="add machines or slots, or ask for fewer")
    if wanted < 1 and (counts.chief or counts.ps):
        raise UsageError(f"no slot left for a worker after the chief, parameter servers and evaluator "
                         f"({_describe(machines)})", hint="a job with roles needs at least one worker: add slots")
    placed += [Placement(TaskId("worker", i), m.name, slot) for i, (m, slot) in enumerate(free[:wanted])]
    return placed


def table(placements: list[Placement]) -> list[str]:
    """The lines ``--dry-run`` prints: one per machine, its tasks in slot order."""
    by_machine: dict[str, list[Placement]] = {}
    for p in placements:
        by_machine.setdefault(p.machine, []).append(p)
    width = max(len(name) for name in by_machine) if by_machine else 0
    return [f"{name.ljust(width)}  " + " ".join(str(p.task) for p in sorted(tasks, key=lambda p: p.slot))
            for name, tasks in by_machine.items()]


def _describe(machines: list[MachineSlots]) -> str:
    return ", ".join(f"{m.name}: {m.slots}" + (f" {','.join(m.roles)}" if m.roles else "") for m in machines)


def counts_text(counts: RoleCounts | None) -> str:
    """The roles every machine of a job must agree on, as one word its agent sends when joining: ``chief,ps=2``
    (``""``: workers only). :func:`parse_counts` reads it back."""
    if counts is None:
        return ""
    words = (["chief"] if counts.chief else []) + ([f"ps={counts.ps}"] if counts.ps else []) \
        + (["evaluator"] if counts.evaluator else [])
    return ",".join(words)


def parse_counts(text: str) -> RoleCounts | None:
    """The inverse of :func:`counts_text` (None for ``""``). Raises ValueError on anything else."""
    if not text:
        return None
    chief = evaluator = False
    ps = 0
    for word in text.split(","):
        if word == "chief":
            chief = True
        elif word == "evaluator":
            evaluator = True
        elif re.fullmatch(r"ps=[0-9]{1,3}", word):
            ps = int(word[3:])
        else:
            raise ValueError(f"not a role count: {word[:40]!r}")
    return RoleCounts(chief=chief, ps=ps, evaluator=evaluator)


def role_list(value: object) -> list[str]:
    """A machine's pinned roles as a peer sent them (a list of distinct known roles). Raises ValueError."""
    if not isinstance(value, (list, tuple)) or len(value) > len(ALL_ROLES) or len(set(value)) != len(value) \
            or any(r not in ALL_ROLES for r in value):
        raise ValueError("not a list of roles")
    return [str(r) for r in value]


def layout_word(value: object) -> str:
    """The job's roles as a peer sent them (:func:`counts_text`). Raises ValueError."""
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError("not the job's roles")
    parse_counts(value)
    return value
