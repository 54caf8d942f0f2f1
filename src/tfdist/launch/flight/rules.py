"""The verdict: which task stopped first and where, from every task's evidence. A pure function, table-tested in
tests/unit/test_flight_rules.py.

Rules, in order (the first that names a task decides):

1. ``stopped``: the kernel reports a training task stopped (SIGSTOP, a debugger). It cannot run, so nothing it does
   explains the hang; its peers time out or wait for it. Several: the one at the lowest step.
2. ``exited``: a training task is gone while others still run: it failed, or it left its training loop early (exit 0,
   or a heartbeat that says training finished) and its peers wait for it in the next collective.
3. ``outside-tensorflow``: a training task is in the script's own code (a callback, a user function, a Python input
   generator) while another waits inside TensorFlow: under a synchronous strategy the one inside TensorFlow waits in
   the step's collective for the one outside. Several: the one at the lowest step.
4. ``no-evidence`` (across machines): a training task's machine sent no evidence in time (it is down, cut off, or
   its agent is stuck) while every task that answered looks fine by rules 1-3: that task is named (the watchdog's
   task when it is one of them, else the first by name). It comes before rule 5 because one task per machine is the
   common layout, where steps alone cannot tell (every answering task waits at the same step).
5. ``lowest-step``: the training tasks are at different steps: the one behind stopped first.
6. ``none``: nothing stands out (every task waits inside TensorFlow at the same step: a deadlock inside the runtime, or
   a task on another machine); the watchdog's task, when given, is named.

Steps come from heartbeats, which a task writes at most every ``TFDIST_HEARTBEAT_INTERVAL`` seconds: a step may lag
the task's true step by that much, which is why rules 1-3 (what the task is doing) come before rule 4 (where it is).
"""
from __future__ import annotations

from typing import Sequence

from tfdist.launch.flight.classify import activity, main_thread
from tfdist.launch.flight.evidence import Activity, Doing, TaskEvidence, Verdict
from tfdist.launch.clues import unhealthy_peers
from tfdist.launch.outcome import describe_exit

TRAINER_ROLES = ("chief", "worker")


def _ended(task: TaskEvidence) -> str:
    return describe_exit(task.exit_code) if task.exit_code is not None else "exited"


def _order(task: TaskEvidence) -> tuple[int, str]:
    return (task.step if task.step is not None else -1, task.name)


def _at(task: TaskEvidence) -> str:
    if task.evidence_missing:
        return "at an unknown step"
    return f"at step {task.step}" if task.step is not None else "before its first step"


def where(act: Activity) -> str:
    """``in train.py:88 `load_batch` (blocked in Queue.get)``, or "" when no frame is known."""
    if act.frame is None:
        return ""
    text = f"in {act.frame.where} `{act.frame.function}`"
    return text + (f" (blocked in {act.blocked_in})" if act.blocked_in else "")


def describe(task: TaskEvidence, act: Activity, *, peer_missing: bool) -> str:
    """What one task was doing, in words (no name, no step)."""
    if task.evidence_missing:
        return f"no evidence from machine {task.machine or '?'} (it did not answer in time)"
    if act.doing is Doing.STOPPED:
        return "stopped (SIGSTOP or a debugger)" + (f", {where(act)}" if act.frame else "")
    if act.doing is Doing.EXITED:
        left = task.finished or task.exit_code == 0
        return ("left its training loop and " if left else "") + _ended(task)
    if act.doing is Doing.TENSORFLOW:
        caller = f" ({act.blocked_in}, from {act.frame.where} `{act.frame.function}`)" if act.frame else ""
        if act.collective or peer_missing:
            return f"waiting in a collective all-reduce inside TensorFlow{caller}"
        return f"inside TensorFlow{caller}"
    if act.doing is Doing.INPUT:
        return f"in its Python input pipeline, {where(act)}"
    if act.doing is Doing.UNKNOWN:
        peers = unhealthy_peers(task.output_tail)
        if peers:  # TensorFlow's coordination service gave up on a peer and aborted this task's collective
            return f"its collective was aborted: TensorFlow names {' and '.join(peers)} unhealthy"
        if task.threads:
            return "no Python frames (exiting, or running native code only)"
        return "no stacks" + (f" ({task.stacks_from})" if task.stacks_from else "")
    return where(act) or "running"


def decide(tasks: Sequence[TaskEvidence], *, watchdog_task: str | None = None) -> Verdict:
    """The verdict for ``tasks`` (every task of the attempt; ``watchdog_task``: the one the hang watchdog named)."""
    acts = {t.name: activity(t.threads, state=t.state, wchan=t.wchan, exited=t.ended)
            for t in tasks}
    trainers = [t for t in tasks if t.task_type in TRAINER_ROLES]
    running = [t for t in trainers if not t.ended and not t.evidence_missing]
    silent = sorted((t for t in trainers if t.evidence_missing), key=lambda t: (t.name != watchdog_task, t.name))
    culprit, rule, how = None, "none", ""

    stopped = sorted((t for t in running if acts[t.name].doing is Doing.STOPPED), key=_order)
    exited = sorted((t for t in trainers if t.ended), key=_order) if running or silent else []
    inside = [t for t in running if acts[t.name].doing is Doing.TENSORFLOW]
    outside = sorted((t for t in running if acts[t.name].doing in (Doing.USER_CODE, Doing.INPUT)), key=_order)
    steps = {t.step for t in running if t.step is not None}
    if stopped:
        culprit, rule = stopped[0], "stopped"
        how = f"its process is stopped (SIGSTOP or a debugger), {_at(culprit)}"
        if acts[culprit.name].frame is not None:
            how += f", {where(acts[culprit.name])}"
    elif exited:
        culprit, rule = exited[0], "exited"
        how = (f"left its training loop {_at(culprit)} and {_ended(culprit)}"
               if culprit.finished or culprit.exit_code == 0 else f"{_ended(culprit)} {_at(culprit)}")
    elif outside and inside:
        culprit, rule = outside[0], "outside-tensorflow"
        act = acts[culprit.name]
        pipeline = "its Python input pipeline is " if act.doing is Doing.INPUT else ""
        loop = _left_loop(culprit, acts[inside[0].name].blocked_in)
        how = (f"left its training loop{loop} {_at(culprit)} and is {where(act)}" if culprit.finished or loop else
               f"{_at(culprit)}, {pipeline}{where(act)}")
    elif silent:
        culprit, rule = silent[0], "no-evidence"
        how = (f"its machine {culprit.machine or '?'} sent no evidence in time (down, cut off, or its agent is "
               "stuck), and the tasks that answered show no cause of their own")
    elif len(steps) > 1:
        culprit, rule = min((t for t in running if t.step is not None), key=_order), "lowest-step"
        how = f"{_at(culprit)} while the others are at step {max(steps)}"
        if acts[culprit.name].frame is not None:
            how += f", {describe(culprit, acts[culprit.name], peer_missing=False)}"

    if culprit is None:
        named = next((t for t in tasks if t.name == watchdog_task), None)
        first = named or (min(running, key=_order) if running else None)
        if first is None:
            return Verdict(None, "no training task is running", rule="none", activities=acts)
        headline = (f"no task stands out: {first.name} is {_at(first)}, "
                    f"{describe(first, acts[first.name], peer_missing=False)}")
        if named is not None:
            headline += " (the hang watchdog named it: silent longest)"
        return Verdict(None, headline, others=_others(tasks, acts, skip=first.name, peer_missing=False),
                       rule="none", activities=acts)
    headline = f"{culprit.name} stopped first: {how}"
    return Verdict(culprit.name, headline, others=_others(tasks, acts, skip=culprit.name, peer_missing=True),
                   rule=rule, activities=acts)


def _left_loop(task: TaskEvidence, loop: str | None) -> str:
    """`` (Model.fit is not on its stack)`` when the call its peers wait in is missing from its main thread."""
    main = main_thread(task.threads)
    if not loop or main is None or any(f.function == loop for f in main.frames):
        return ""
    return f" ({loop} is not on its stack)"


def _others(tasks: Sequence[TaskEvidence], acts: dict[str, Activity], *, skip: str, peer_missing: bool) -> str:
    """``worker:0 and chief:0 are at step 121, waiting in a collective all-reduce ...``: the rest, grouped by what
    they were doing."""
    groups: dict[str, list[str]] = {}
    for task in tasks:
        if task.name == skip:
            continue
        text = f"{_at(task)}, {describe(task, acts[task.name], peer_missing=peer_missing)}"
        groups.setdefault(text, []).append(task.name)
    parts = []
    for text, names in groups.items():
        verb = "is" if len(names) == 1 else "are"
        parts.append(f"{' and '.join(names) if len(names) < 3 else ', '.join(names)} {verb} {text}")
    return "; ".join(parts)
