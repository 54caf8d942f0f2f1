"""Restarting single tasks in place while the rest of the group runs on: the mechanism behind the
``restart-tasks`` verdict of :func:`tfdist.launch.local.rules.decide` (a ParameterServerStrategy worker that exited
abnormally, or that was stopped and silent for the hang timeout: killed first), shared by the single-machine supervisor
and a multi-machine agent's node group.

The rules say which tasks; :class:`~tfdist.launch.local.restart.TaskRestartPolicy` (pure) says whether and after what
back-off; this class remembers the restarts that wait out their back-off (the group is watched meanwhile, never slept
on) and starts each one when it is due. A task whose budget is spent turns the verdict into an ordinary failure.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from tfdist.launch.local import rules
from tfdist.launch.local.group import TaskGroup
from tfdist.launch.local.restart import TaskRestartPolicy
from tfdist.protocol import PREEMPTED_EXIT_CODE


class InPlaceRestarts:
    """Per-task restarts of one job (the budget lasts across attempts; what waits is per attempt).

    Args:
        policy: the per-task budget and back-off.
        say: where the launcher's lines go (``restarting worker:1 alone ...``).
        started: called with each restarted task's pid (the supervisor's watcher must know it).
        event: called as ``event(name, **fields)`` for the launcher's events.jsonl.
    """

    def __init__(self, policy: TaskRestartPolicy, *, say: Callable[[str], None],
                 started: Callable[[int], object] = lambda pid: None,
                 event: Callable[..., object] = lambda name, **fields: None) -> None:
        self.policy = policy
        self.say = say
        self.started = started
        self.event = event
        self.done: dict[str, int] = {}  # task -> how many times it was restarted alone (all attempts)
        self._due: dict[str, float] = {}  # task -> when its restart is due (this attempt)
        self._group: TaskGroup | None = None

    def handle(self, verdict: rules.Verdict, group: TaskGroup, now: float) -> rules.Verdict:
        """Act on a ``restart-tasks`` verdict: CONTINUE (with its notices) while each task is restarted or waits for
        its back-off; the verdict as a FAIL when a task's budget is spent or it cannot be started again."""
        if group is not self._group:
            self._group, self._due = group, {}
        codes = {t.name: t.poll() for t in group.procs}
        for name in verdict.restart:
            if name in self._due:
                continue
            decision = self.policy.after(name, now, preempted=codes.get(name) == PREEMPTED_EXIT_CODE)
            if not decision.restart:
                self.say(f"{decision.message}: stopping the group")
                return dataclasses.replace(verdict, action=rules.GroupAction.FAIL, restart=())
            what = verdict.detail if name == verdict.culprit else ("exited" if codes.get(name) is not None else "hung")
            self.say(f"{name} {what}: {decision.message}")
            self._due[name] = now + decision.delay
        failure = self.start_due(group, now)
        if failure is not None:
            return dataclasses.replace(verdict, action=rules.GroupAction.FAIL, culprit=failure, restart=(),
                                       detail="could not be started again in place")
        return rules.Verdict(rules.GroupAction.CONTINUE, notices=verdict.notices)

    def start_due(self, group: TaskGroup, now: float) -> str | None:
        """Start the restarts whose back-off is over; the name of a task that could not be started, else None."""
        for name, due in sorted(self._due.items(), key=lambda item: item[1]):
            if due > now:
                continue
            del self._due[name]
            try:
                proc = group.restart_task(name)
            except OSError as error:
                self.say(f"cannot start {name} again: {error.strerror or error}")
                return name
            self.done[name] = self.done.get(name, 0) + 1
            self.started(proc.pid)
            self.event("task-restarted", attempt=group.attempt, task=name, pid=proc.pid)
            self.say(f"{name} restarted in place: pid {proc.pid} {proc.plan.address}")
        return None
