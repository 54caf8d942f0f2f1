"""One look at a running group, the same on one machine (the supervisor) and across machines (an agent's round,
``elastic/agent/node_group.py``): poll the tasks, learn the phase durations their heartbeats report, and judge the
snapshot by the group rules with the thresholds learned so far. Keeping the three steps here is what makes both
launchers call a hang by the same learned thresholds (issue 36)."""
from __future__ import annotations

from tfdist.launch.flight.learner import PhaseLearner
from tfdist.launch.local import rules
from tfdist.launch.local.group import TaskGroup
from tfdist.launch.local.snapshot import GroupSnapshot
from tfdist.launch.spec import LaunchSpec


def judge(group: TaskGroup, spec: LaunchSpec, phases: PhaseLearner) -> tuple[GroupSnapshot, rules.Verdict]:
    """The group's snapshot now and the rules' verdict on it. A silent task is asked of the kernel (stopped?) once
    the shortest learned threshold could have passed, so a SIGSTOPped task is named so when it is called hung."""
    snapshot = group.poll(stale_after=phases.stale_after(spec.timeouts.hang))
    phases.observe(t.heartbeat for t in snapshot.tasks)
    return snapshot, rules.decide(snapshot, spec, phases.limits)
