"""One hang report for a whole job across machines, made by the rendezvous server.

When a machine's task hangs or fails, its agent reads its own tasks before stopping them and sends that evidence
unasked (``evidence`` with ``request`` 0). That starts a collection for the round: the server asks every other
member machine to read its tasks (``dump``), and holds the round's next steps (stop, finish, restart: the policy is
not ticked, :meth:`JobRecorder.busy`) until every machine answered or :data:`ANSWER_WAIT_S` passed, so nothing is
stopped before it was read. A machine that did not answer by then (down, cut off, stuck) is not waited on: its tasks
appear as "no evidence from machine X" and the verdict rules (:mod:`tfdist.launch.flight.rules`, pure) weigh that.
Then one report, ``hang-attempt-<round>.txt`` and ``.json`` (the single-machine schema, 0600), is written in the
serving machine's run folder, where ``tfdist status`` finds it, and its verdict goes into the job's final report.

Mechanism only, and never sends while holding its lock: the server passes ``send`` and calls in from its threads.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from tfdist.cluster.placement import parse_counts
from tfdist.errors import UsageError
from tfdist.launch.elastic.messages.flight import Dump, Evidence
from tfdist.launch.elastic.messages.protocol import Message
from tfdist.launch.elastic.rendezvous.round_roles import round_layout, tasks_by_rank
from tfdist.launch.flight import report as reports
from tfdist.launch.flight import transfer
from tfdist.launch.flight.evidence import TaskEvidence
from tfdist.launch.flight.rules import decide

ANSWER_WAIT_S = 20.0  # each machine reads its tasks in parallel, a few seconds per stack read at most

log = logging.getLogger("tfdist.launch")


@dataclass(frozen=True)
class Member:
    """A machine of the round, as the report names it, and its tasks' names (``worker:3``)."""

    label: str
    tasks: tuple[str, ...]


def round_members(action: Any, labels: Mapping[int, str], layout: str = "") -> dict[int, Member]:
    """The machines of a round (a ``StartRound``) and their tasks' names, placed by the rule every agent runs
    (``round_roles``; ``layout``: the job's roles as its agents sent them, "" for workers only)."""
    try:
        counts = parse_counts(layout)
    except ValueError:
        counts = None
    placements = None
    if counts is not None:
        try:
            placements = round_layout(action.nodes, ["-"] * sum(int(n[3]) for n in action.nodes), counts)[1]
        except (UsageError, IndexError, ValueError):
            placements = None
    slots = {int(n[0]): int(n[3]) for n in action.nodes if len(n) > 3}
    placed = tasks_by_rank(placements) if placements is not None else None  # one walk, not one per machine
    members = {}
    for a in action.assignments:
        names = placed.get(a.node_rank, ()) if placed is not None else tuple(
            f"worker:{i}" for i in range(a.first_index, a.first_index + slots.get(a.node_rank, 0)))
        members[a.node_id] = Member(f"node{a.node_rank} {labels.get(a.node_id, '?')}", names)
    return members


@dataclass
class _Collection:
    round: int
    request: int
    reason: str
    watchdog: str | None
    started: float
    deadline: float
    expected: dict[int, Member]
    answers: dict[int, Evidence] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)  # machines that could not be asked, and why

    def complete(self) -> bool:
        return all(n in self.answers or n in self.failed for n in self.expected)


def merge(expected: Mapping[int, Member], answers: Mapping[int, Evidence], failed: Mapping[int, str],
          wait: float) -> list[TaskEvidence]:
    """Every task of the round: what each machine sent, stand-ins for the machines that sent nothing; in the order
    of the machines, then of their tasks."""
    tasks: list[TaskEvidence] = []
    for node_id, member in expected.items():
        answer = answers.get(node_id)
        if answer is None:
            why = failed.get(node_id) or f"no evidence from machine {member.label}: it did not answer in {wait:g}s"
            tasks += transfer.missing(member.tasks, machine=member.label, why=why)
            continue
        sent = [transfer.from_fields(t, machine=member.label) for t in answer.tasks]
        known = {t.name for t in sent}
        tasks += sent
        note = answer.note or "its agent listed no such task"
        tasks += [TaskEvidence(name=n, host=member.label, machine=member.label, gone=True,
                               stacks_from=f"not read: {note}") for n in member.tasks if n not in known]
    return tasks


class JobRecorder:
    """The collections of one job's rendezvous. ``folder``: where reports go (None: verdict only, no file)."""

    def __init__(self, *, folder: str | None, run_id: str, say: Callable[[str], None] = lambda _m: None,
                 wait: float = ANSWER_WAIT_S) -> None:
        self.folder = folder
        self.run_id = run_id
        self.wait = wait
        self._say = say
        self._lock = threading.Lock()
        self._members: dict[int, dict[int, Member]] = {}  # round -> node id -> member
        self._active: _Collection | None = None
        self._done: set[int] = set()  # rounds already reported: one report per round
        self._requests = itertools.count(1)
        self.reports: list[tuple[int, str | None, tuple[str, ...]]] = []  # (round, path, verdict), newest last

    def on_round(self, round_: int, members: Mapping[int, Member]) -> None:
        """A round started with these machines."""
        with self._lock:
            self._members = {round_: dict(members)}  # earlier rounds are over: their collections too

    def on_evidence(self, node_id: int, message: Evidence, send: Callable[[int, Message], bool],
                    now: float | None = None) -> None:
        """A machine sent evidence: an answer, or (unasked) the start of a collection; then ask the others."""
        now = time.monotonic() if now is None else now
        ask: list[tuple[int, Dump]] = []
        with self._lock:
            active = self._active
            if active is not None and active.round == message.round:
                if node_id in active.expected and node_id not in active.answers and \
                        message.request in (0, active.request):
                    active.answers[node_id] = message
                return
            members = self._members.get(message.round)
            if message.request != 0 or members is None or message.round in self._done or node_id not in members:
                return  # a late answer, or a round that is over or already reported
            active = self._active = _Collection(
                round=message.round, request=next(self._requests), reason=message.reason,
                watchdog=message.watchdog, started=now, deadline=now + self.wait, expected=dict(members),
                answers={node_id: message})
            self._done.add(message.round)
            ask = [(n, Dump(round=message.round, request=active.request, reason=message.reason))
                   for n in members if n != node_id]
        if ask:
            self._say(f"flight recorder: asking {len(ask)} other machine(s) for their tasks' stacks before stopping")
        for other, request in ask:  # outside the lock: a send may wait for room in that machine's queue
            if not send(other, request):
                with self._lock:
                    active.failed[other] = f"no evidence from machine {active.expected[other].label}: its " \
                                           "connection is gone"

    def busy(self, now: float | None = None) -> bool:
        """A collection waits for answers: hold the round's next steps (they would stop the tasks being read)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._active is not None and not self._active.complete() and now < self._active.deadline

    def on_lost(self, node_id: int) -> None:
        """A machine's connection is gone: do not wait for its answer."""
        with self._lock:
            if self._active is not None and node_id in self._active.expected and node_id not in self._active.answers:
                label = self._active.expected[node_id].label
                self._active.failed.setdefault(node_id, f"no evidence from machine {label}: its connection is gone")

    def poll(self, now: float | None = None) -> tuple[str | None, tuple[str, ...]] | None:
        """Once a collection is complete or past its deadline: judge every task, write the report, say the verdict;
        ``(path, verdict lines)``. None while nothing is due."""
        now = time.monotonic() if now is None else now
        with self._lock:
            active = self._active
            if active is None or (not active.complete() and now < active.deadline):
                return None
            self._active = None
            answers, failed = dict(active.answers), dict(active.failed)
        tasks = merge(active.expected, answers, failed, self.wait)
        return self._write(active, tasks, now)

    def _write(self, active: _Collection, tasks: Sequence[TaskEvidence], now: float) -> tuple[str | None,
                                                                                              tuple[str, ...]]:
        verdict = decide(tasks, watchdog_task=active.watchdog)
        result = reports.HangReport(run_id=self.run_id, attempt=active.round, reason=active.reason, verdict=verdict,
                                    tasks=tuple(tasks), time=time.time(), collect_seconds=now - active.started)
        path = None
        if self.folder is not None:
            try:
                path = reports.write(result, self.folder)
            except OSError as error:  # a full disk must not stop the rendezvous
                log.warning("cannot write the hang report in %s: %s", self.folder, error)
        answered = len(active.answers)
        self._say(f"flight recorder (every machine, {answered} of {len(active.expected)} answered): "
                  f"{verdict.headline}")
        if path:
            self._say(f"flight recorder: stacks, steps and output of every task of every machine in {path}")
        lines = tuple(verdict.lines)
        with self._lock:
            self.reports.append((active.round, path, lines))
        return path, lines

    def report_lines(self) -> list[str]:
        """For the job's final report: the latest verdict across machines and where its report is."""
        with self._lock:
            if not self.reports:
                return []
            round_, path, lines = self.reports[-1]
        out = [f"flight recorder (every machine, round {round_}): {lines[0] if lines else ''}".rstrip(": ")]
        out += [f"  {line}" for line in lines[1:]]
        if path:
            out.append(f"  stacks, steps and output of every task of every machine: {path}")
        return out
