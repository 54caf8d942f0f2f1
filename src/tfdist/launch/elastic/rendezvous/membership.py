"""The rendezvous' policy: which machines form a round, when to stop a round, when the job is over. Pure.

The rendezvous server (``server.py``) feeds events in (a machine joined, is ready, its tasks exited, it was
lost) with the current time and carries out the actions :meth:`MembershipPolicy.tick` returns; nothing here touches a
socket or a clock, so the rules are table-tested.

Phases of the job::

    WAITING --(>= MIN ready, MAX or last call)--> RUNNING --(rank 0 succeeded)--> FINISHING --> done (0)
       ^  \\--(< MIN for rdzv_timeout)--> done (3)   |
       |                                             | machine lost / tasks failed / a machine is waiting to join
       \\------------------ STOPPING <--------------/

Rules (torchrun's, with Horovod's blacklist):

- a join that takes a live member's name (or its address, unless both have names of their own) is refused and
  evicts nobody (``membership_join.py``);
- a round takes up to MAX ready machines, ordered by ``--node-rank`` (machines without one after: the serving
  machine's own agent first, then in arrival order);
  its tasks get global indices in that order, then by local index, so worker 0 (the chief) is on node rank 0;
- a lost machine or a failed task stops the round; a machine waiting to join stops it gracefully (the tasks save
  at the current step: the preemption path) once every machine of the round trains;
- except a lost machine of a ParameterServerStrategy round that ran only workers: the round goes on (the chief's
  ClusterCoordinator re-runs their steps on the other workers; it sees a silent worker fail through the gRPC
  keep-alive tfdist sets, ``tfdist.cluster.grpc_keepalive``) and its seat is kept: when a machine with the same
  name and address is ready again while the round runs, it is sent the running round for that seat alone
  (``StartRound.rejoin``) and its workers start at their old addresses, where the coordinator takes them back;
- the job is over once the leader's machine succeeded and every machine of the round reported, or ``after_success``
  later; in a ParameterServerStrategy job only the machines running the chief or the evaluator are waited for (the
  workers and parameter servers serve until stopped: nothing of theirs ends on its own);
- a failure is blamed on a machine only when no machine was lost in the same round (a lost peer makes the others'
  collectives fail too); a machine blamed ``fail_limit`` rounds in a row is left out for ``cooldown`` seconds;
- failures count against ``max_restarts`` within ``restart_window`` and wait ``backoff`` (doubling) before the next
  round, by the single-machine launcher's own rule (:class:`~tfdist.launch.local.restart.RestartPolicy`); lost
  machines and scale-ups do not count (MIN decides those).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tfdist.cluster.address import format_address
from tfdist.cluster.placement import parse_counts
from tfdist.errors import UsageError
from tfdist.launch.elastic.rendezvous.report import (  # noqa: F401 - KEPT_EVENTS re-exported
    KEPT_EVENTS, bounded as _bounded, closing_report, some_of,
)
from tfdist.launch.elastic.rendezvous.membership_join import join_refusal
from tfdist.launch.elastic.rendezvous.round_roles import leader_rank, round_layout, tasks_by_rank
from tfdist.launch.elastic.rendezvous.membership_types import (  # noqa: F401 - re-exported: the policy's vocabulary
    RoundAction, Assignment, Finish, Node, Phase, RendezvousSettings, StartRound, Stop,
)
from tfdist.launch.local.restart import RestartPolicy
from tfdist.launch.outcome import Cause, Outcome
from tfdist.status import ExitStatus
from tfdist.validate import printable

# The restart budget's newest restarts a coordinator takeover carries (the back-off's doublings are capped long before).
KEPT_RESTARTS = 64


class MembershipPolicy:
    """State of one job's rendezvous. Call the ``on_*`` methods as events arrive and :meth:`tick` often."""

    def __init__(self, settings: RendezvousSettings, now: float) -> None:
        self.s = settings
        self.phase = Phase.WAITING
        self.nodes: dict[int, Node] = {}
        self.round = -1
        self.waiting_since = now
        self.min_reached_at: float | None = None
        self.lost: list[str] = []
        self.returned: list[str] = []
        self.restarts = 0
        self._budget = RestartPolicy(max_restarts=settings.max_restarts, window=settings.restart_window,
                                     backoff=settings.backoff)
        self._not_before = now  # no round starts before this (the back-off after a failure)
        self.failures: dict[str, int] = {}
        self.blacklist: dict[str, float] = {}
        self.history: list[str] = []
        self._round_lost = False
        self._round_failure: tuple[str, str] | None = None
        self._stop_reason = ""
        self._stopping_since = now
        self._finish_deadline = 0.0
        self._interrupt: int | None = None
        self._outbox: list[RoundAction] = []  # decisions taken inside an event, handed out by the next tick
        self._leader_rank = 0  # the machine whose success ends the job: it runs the chief (else worker 0)
        self._round_tasks: dict[int, tuple[str, ...]] = {}  # node rank -> its tasks this round (jobs with roles)
        self._ranks: dict[int, int] = {}  # node id -> its node rank this round, as started
        self._ps_job = False  # the job has parameter servers: its workers and parameter servers serve until stopped
        self._round_start: StartRound | None = None  # how the running round was started
        self._vacant: dict[str, int] = {}  # a lost machine that ran only PS workers -> its node rank, kept for it

    # -- events --------------------------------------------------------------------------------------------------
    def on_join(self, node: Node, job: str) -> tuple[str, int] | None:
        """Admit ``node``, or return (reason, exit status) to refuse it (``membership_join.py``'s checks)."""
        if self.phase is Phase.DONE:
            return "the job is over", int(ExitStatus.USAGE)
        refusal = join_refusal(node, job, self.s, self.nodes.values())
        if refusal is not None:
            return refusal
        if node.label in self.lost:
            _bounded(self.returned, node.label)
        self.nodes[node.node_id] = node
        return None

    def on_ready(self, node_id: int, ports: tuple[int, ...], backup: dict[str, Any] | None,
                 snapshot: dict[str, Any] | None = None) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        node.ready, node.ports, node.backup, node.snapshot = True, ports, backup, snapshot
        node.in_round, node.training = False, False
        seat, start = self._vacant.get(node.label), self._round_start
        if seat is not None and start and self.phase is Phase.RUNNING and node.requested_rank in (None, seat):
            del self._vacant[node.label]
            self._ranks[node_id], node.ready, node.in_round = seat, False, True
            first = next(a.first_index for a in start.assignments if a.node_rank == seat)
            _bounded(self.history, f"round {self.round}: {node.label} back: its workers rejoin at node rank {seat}")
            self._outbox.append(dataclasses.replace(start, assignments=(Assignment(node_id, seat, first),),
                                                    rejoin=True))

    def on_training(self, node_id: int, round_: int) -> None:
        node = self.nodes.get(node_id)
        if node is not None and round_ == self.round and node.in_round:
            node.training = True

    def on_exited(self, node_id: int, round_: int, outcome: Outcome, step: int | None, detail: str, now: float) -> None:
        node = self.nodes.get(node_id)
        if node is None or round_ != self.round or not node.in_round:
            return
        node.outcome, node.step = outcome, step
        detail = printable(detail, 400)  # a member's words, shown in reports: never escape codes or extra lines
        if self.phase is Phase.RUNNING:
            if outcome == Outcome.SUCCEEDED and self._rank(node) == self._leader_rank:
                self.phase = Phase.FINISHING
                self._finish_deadline = now + self.s.after_success
            elif outcome == Outcome.FAILED:
                self._round_failure = (node.label, detail)
                self._begin_stop(now, graceful=False, reason=f"tasks failed on {node.label}: {detail}")
            elif outcome in (Outcome.PREEMPTED, Outcome.STOPPED):
                self._begin_stop(now, graceful=True, reason=f"{node.label} was stopped ({detail})")

    def on_lost(self, node_id: int, reason: str, now: float) -> None:
        node = self.nodes.pop(node_id, None)
        if node is None or self.phase is Phase.DONE:
            return  # once the job is over, the agents leaving is no loss
        _bounded(self.lost, node.label)
        _bounded(self.history, f"round {max(self.round, 0)}: lost {node.label}: {reason}")
        if node.in_round and self.phase is Phase.RUNNING and self._only_workers(node):
            self._vacant[node.label] = self._ranks[node.node_id]
            _bounded(self.history, f"round {self.round}: it ran only workers: the round goes on, its seat kept")
            return
        if node.in_round and self.phase in (Phase.RUNNING, Phase.STOPPING, Phase.FINISHING):
            self._round_lost = True
            if self.phase is Phase.RUNNING:
                self._begin_stop(now, graceful=False, reason=f"lost {node.label} ({reason})")

    def interrupt(self, signum: int, now: float) -> None:
        """The process hosting the rendezvous was asked to stop: every machine saves and stops, then the job ends."""
        self._interrupt = signum
        if self.phase in (Phase.RUNNING, Phase.FINISHING):
            self._begin_stop(now, graceful=True, reason="the launcher was asked to stop")

    # -- decisions -----------------------------------------------------------------------------------------------
    def tick(self, now: float) -> list[RoundAction]:
        """What to do now: decisions taken by earlier events first, then those that depend on time."""
        decided = self._decide(now)
        actions, self._outbox = self._outbox, []
        return actions + decided

    def _decide(self, now: float) -> list[RoundAction]:
        if self.phase is Phase.DONE:
            return []
        if self.phase is Phase.STOPPING:
            return self._tick_stopping(now)
        if self._interrupt is not None:
            return self._done(128 + self._interrupt, "stopped by a signal")
        if self.phase is Phase.WAITING:
            return self._tick_waiting(now)
        if self.phase is Phase.FINISHING:
            done = all(n.outcome is not None for n in self._members() if self._ends_on_its_own(n))
            if done or now >= self._finish_deadline:
                return self._done(int(ExitStatus.SUCCESS), "succeeded")
            return []
        return self._tick_running(now)

    def _tick_waiting(self, now: float) -> list[RoundAction]:
        eligible = self._eligible(now)
        if now < self._not_before:
            return []
        if len(eligible) >= self.s.min_nodes:
            if self.min_reached_at is None:
                self.min_reached_at = now
            wait = self.s.first_round_wait if self.round < 0 else 0.0
            if len(eligible) >= self.s.max_nodes or now - self.min_reached_at >= wait:
                unfit = self._unplaceable(eligible)
                if unfit:
                    return self._done(int(ExitStatus.USAGE), unfit)
                return [self._start_round(eligible)]
            return []
        self.min_reached_at = None
        if now - self.waiting_since >= self.s.rdzv_timeout:
            return self._done(int(ExitStatus.TASK_FAILED),
                              f"waited {self.s.rdzv_timeout:g}s for at least {self.s.min_nodes} machine(s), "
                              f"have {len(eligible)}")
        return []

    def _tick_running(self, now: float) -> list[RoundAction]:
        members = self._members()
        waiting = [n for n in self._eligible(now) if not n.in_round]
        if waiting and len(members) < self.s.max_nodes and members and all(n.training for n in members):
            names = some_of([n.label for n in waiting])  # a growth from 256 to 1,024 names 8 of the 768
            self._begin_stop(now, graceful=True, reason=f"{names} joined: saving, then restarting with "
                             f"{min(self.s.max_nodes, len(members) + len(waiting))} machines")
        return []

    def _tick_stopping(self, now: float) -> list[RoundAction]:
        members = self._members()
        if any(not n.ready for n in members) and now - self._stopping_since < self.s.stop_timeout:
            return []
        for node in members:  # a machine that never confirmed its stop is not trusted with the next round
            if not node.ready:
                self.on_lost(node.node_id, f"did not stop within {self.s.stop_timeout:g}s", now)
        if self._interrupt is not None:
            return self._done(128 + self._interrupt, "stopped by a signal")
        failure = self._round_failure
        self.phase = Phase.WAITING
        self.waiting_since = now
        self.min_reached_at = None
        if failure is not None and not self._round_lost:
            name, detail = failure
            self.failures[name] = self.failures.get(name, 0) + 1
            if self.failures[name] >= self.s.fail_limit:
                self.blacklist[name] = now + self.s.cooldown
                _bounded(self.history, f"round {self.round}: {name} failed {self.failures[name]} rounds in a row: "
                                    f"left out for {self.s.cooldown:g}s")
            decision = self._budget.after(Cause.TASK_FAILED, now)
            if not decision.restart:
                window = f" within {self.s.restart_window:g}s" if self.s.restart_window > 0 else ""
                return self._done(int(ExitStatus.TASK_FAILED), f"tasks failed on {name}: {detail}; restart budget "
                                  f"({self.s.max_restarts}{window}) spent")
            self.restarts += 1
            self._not_before = now + decision.delay
            if decision.delay:
                _bounded(self.history, f"round {self.round}: next round in {decision.delay:g}s (--backoff)")
        return []

    # -- helpers -------------------------------------------------------------------------------------------------
    def _members(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.in_round]

    def _ends_on_its_own(self, node: Node) -> bool:
        """Whether ``node``'s share of a finishing round ends without being stopped: under ParameterServerStrategy
        only a machine running the chief or the evaluator; otherwise every machine."""
        tasks = self._round_tasks.get(self._rank(node), ())
        return not self._ps_job or any(t.startswith(("chief:", "evaluator:")) for t in tasks)

    # -- a coordinator's takeover (etcd) ---------------------------------------------------------------------------
    def export(self, now: float) -> dict[str, Any]:
        """What a coordinator that takes over needs to carry on (written to etcd as it changes): the round, phase,
        restart budget (its window and back-off relative to ``now``), failures, left-out machines and events."""
        return {"round": self.round, "phase": self.phase.value, "restarts": self.restarts, "failures": self.failures,
                "left_out": {k: max(0.0, v - now) for k, v in self.blacklist.items() if v > now},
                "lost": self.lost, "history": self.history[-50:],
                "restart_ages": [round(now - t, 1) for t in self._budget.restarts[-KEPT_RESTARTS:]],
                "next_round_in": round(max(0.0, self._not_before - now), 1)}

    def adopt(self, state: dict[str, Any], now: float) -> None:
        """Carry on from :meth:`export`'s ``state`` (else a takeover would hand out a fresh budget)."""
        self.round = int(state.get("round", -1))
        self.restarts = int(state.get("restarts", 0))
        self.failures = {str(k): int(v) for k, v in (state.get("failures") or {}).items()}
        self.blacklist = {str(k): now + float(v) for k, v in (state.get("left_out") or {}).items()}
        self.lost = [str(n) for n in state.get("lost") or []]
        self.history = [str(h) for h in state.get("history") or []]
        self._budget.restarts = [now - float(age) for age in (state.get("restart_ages") or [])[-KEPT_RESTARTS:]]
        self._not_before = now + min(float(state.get("next_round_in", 0.0)), self._budget.backoff_max)

    def adopt_round(self, members: list[tuple[int | None, str, bool]], phase: str, now: float) -> None:
        """Carry on with the running round (:meth:`adopt` first): ``members`` are its machines as (node id, or None
        when it is gone; label; whether it trains). The ones still here stay in it; the missing ones are lost, and
        the round stops as it would for any lost machine. ``phase``: the exported phase (a stop or the job's end
        that was under way goes on)."""
        self.phase = Phase.RUNNING
        missing = []
        for node_id, label, training in members:
            if node_id is None:
                node_id = -len(missing) - 1
                missing.append(node_id)
                self.nodes[node_id] = Node(node_id=node_id, name=label, address=label, slots=1)
            node = self.nodes[node_id]
            node.ready, node.in_round, node.training = False, True, training
        for node_id in missing:
            self.on_lost(node_id, "its etcd lease expired while the coordinator moved", now)
        if phase == "stopping" and self.phase is Phase.RUNNING:
            self._begin_stop(now, graceful=True, reason="carrying on with the stop after the coordinator moved")
        elif phase == "finishing" and self.phase is Phase.RUNNING:
            self.phase = Phase.FINISHING
            self._finish_deadline = now + self.s.after_success

    def _only_workers(self, node: Node) -> bool:
        """Whether ``node`` ran only workers of a ParameterServerStrategy round (as this policy started it)."""
        tasks = self._round_tasks.get(self._ranks.get(node.node_id, -1), ())
        return self._ps_job and bool(tasks) and all(t.startswith("worker:") for t in tasks)

    def _eligible(self, now: float) -> list[Node]:
        # Asked every tick for every machine: without anyone left out (the usual case) no label is even made.
        if not self.blacklist:
            return [n for n in self.nodes.values() if n.ready]
        return [n for n in self.nodes.values() if n.ready and self.blacklist.get(n.label, 0.0) <= now]

    @staticmethod
    def _order(node: Node) -> tuple[bool, int, bool, int]:
        # Without --node-rank the serving machine's own agent comes first, then arrival: node rank 0 holds worker 0,
        # whose backups are believed, and arriving first must not win a stranger that seat (restore_point.py).
        return (node.requested_rank is None, node.requested_rank or 0, not node.here, node.node_id)

    def _rank(self, node: Node) -> int:
        """Its node rank in this round (as started; else, in a round adopted from another coordinator, by order)."""
        if node.node_id in self._ranks:
            return self._ranks[node.node_id]
        return sorted(self._members(), key=self._order).index(node)

    def _round_nodes(self, eligible: list[Node]) -> tuple[tuple[Any, ...], ...]:
        chosen = sorted(eligible, key=self._order)[: self.s.max_nodes]
        return tuple((r, n.name, n.address, n.slots, list(n.roles)) for r, n in enumerate(chosen))

    def _unplaceable(self, eligible: list[Node]) -> str:
        """Why the job's roles do not fit on these machines (``""``: they fit, or the job has none); records the
        leader's machine."""
        counts = parse_counts(eligible[0].layout) if eligible else None
        self._leader_rank, self._round_tasks, self._ps_job = 0, {}, False
        if counts is None:
            return ""
        nodes = self._round_nodes(eligible)
        try:
            placements = round_layout(nodes, ["-"] * sum(n[3] for n in nodes), counts)[1]
        except UsageError as unfit:
            return unfit.one_line()
        self._leader_rank, self._ps_job = leader_rank(placements), counts.ps > 0
        self._round_tasks = tasks_by_rank(placements)  # one walk: a machine with no task is absent, read as ()
        return ""

    def _start_round(self, eligible: list[Node]) -> StartRound:
        chosen = sorted(eligible, key=self._order)[: self.s.max_nodes]
        self.round += 1
        self.phase = Phase.RUNNING
        self._round_lost, self._round_failure = False, None
        workers: list[str] = []
        assignments = []
        self._ranks = {}
        for rank, node in enumerate(chosen):
            assignments.append(Assignment(node.node_id, rank, len(workers)))
            self._ranks[node.node_id] = rank
            workers += [format_address(node.address, port) for port in node.ports[: node.slots]]
            node.ready, node.in_round, node.training, node.outcome, node.step = False, True, False, None, None
        _bounded(self.history, f"round {self.round}: {len(chosen)} machine(s), {len(workers)} worker(s): "
                            + ", ".join(n.label for n in chosen))
        self._vacant = {}
        self._round_start = StartRound(self.round, len(workers), tuple(workers), tuple(assignments),
                                       self._round_nodes(chosen))
        return self._round_start

    def _begin_stop(self, now: float, *, graceful: bool, reason: str) -> None:
        self.phase = Phase.STOPPING
        self._stopping_since = now
        self._stop_reason = reason
        _bounded(self.history, f"round {self.round}: stopping: {reason}")
        self._outbox.append(Stop(tuple(n.node_id for n in self._members()), graceful, reason))

    def _done(self, status: int, summary: str) -> list[RoundAction]:
        self.phase = Phase.DONE
        return [Finish(status, self.report(status, summary))]

    def report(self, status: int, summary: str) -> str:
        """The closing report (:func:`~tfdist.launch.elastic.rendezvous.report.closing_report`)."""
        return closing_report(self.s.job, status, summary, round_=self.round, restarts=self.restarts,
                              lost=self.lost, returned=self.returned, left_out=list(self.blacklist),
                              history=self.history, root_cause=self._round_failure)

