"""The flight recorder's report: the verdict first, then the step wavefront, then each task's evidence (stacks,
process state, last lines of output), then what nvidia-smi says of the GPUs. Written as ``hang-*.txt`` with a versioned ``hang-*.json`` beside it, in the
run folder, atomically and readable only by the owner (stacks can show paths and arguments)."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

from tfdist.launch.flight.evidence import TaskEvidence, Verdict
from tfdist.launch.outcome import describe_exit

SCHEMA = "tfdist.hang"
SCHEMA_VERSION = 1
HANG = "hang"  # the watchdog found a task silent
TASK_FAILED = "task-failed"  # a task failed while others still ran
ON_DEMAND = "on-demand"  # tfdist dump
_TEXT_FRAMES = 40
_JSON_FRAMES = 400
_STATES = {"R": "running", "S": "sleeping", "D": "waiting for the disk (uninterruptible)", "T": "stopped",
           "t": "stopped by a debugger", "Z": "exited (zombie)", "I": "idle"}


@dataclass(frozen=True)
class HangReport:
    run_id: str
    attempt: int
    reason: str
    verdict: Verdict
    tasks: tuple[TaskEvidence, ...]
    time: float
    collect_seconds: float = 0.0
    gpus: str = ""  # nvidia-smi's report, or the line saying why there is none ("": not read, e.g. across machines)


def file_stem(attempt: int, reason: str, when: float) -> str:
    """``hang-attempt-0`` (one per attempt, written by the launcher), or ``hang-dump-20261202T012345-attempt-0``."""
    if reason == ON_DEMAND:
        return f"hang-dump-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(when))}-attempt-{attempt}"
    return f"hang-attempt-{attempt}"


def wavefront(tasks: Sequence[TaskEvidence]) -> str:
    """``worker:0 121, worker:1 120, chief:0 121`` (each task's last heartbeat step; - when it sent none)."""
    return ", ".join(f"{t.name} {t.step if t.step is not None else '-'}" for t in tasks)


def _process(task: TaskEvidence) -> str:
    if task.exit_code is not None:
        return describe_exit(task.exit_code)
    if task.gone:
        return "exited"
    state = f"state {task.state} ({_STATES.get(task.state, '?')})" if task.state else "state unknown"
    return state + (f", wchan {task.wchan}" if task.wchan else "")


def render_text(report: HangReport) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report.time))
    lines = [f"tfdist flight recorder: run {report.run_id}, attempt {report.attempt}, {report.reason}, {when}",
             *(f"verdict: {line}" if i == 0 else f"         {line}" for i, line in enumerate(report.verdict.lines)),
             f"steps (last heartbeat): {wavefront(report.tasks)}", ""]
    for task in report.tasks:
        beat = f", last heartbeat {task.heartbeat_age:.1f}s ago" if task.heartbeat_age is not None else ""
        step = f"step {task.step}" + (" (training finished)" if task.finished else "") if task.step is not None \
            else "no heartbeat"
        lines.append(f"== {task.name} (pid {task.pid} on {task.host or '?'}): {_process(task)}; {step}{beat}")
        if task.threads:
            lines.append(f"  Python stacks ({task.stacks_from}), innermost call first:")
            for thread in task.threads:
                how = " (idle)" if thread.idle else " (active)" if thread.idle is False else ""
                kernel = f" wchan {thread.wchan}" if thread.wchan else ""
                lines.append(f"    thread {thread.name}{how}{kernel}:")
                lines += [f"      {f.function} ({f.file}:{f.line})" for f in thread.frames[:_TEXT_FRAMES]]
                if len(thread.frames) > _TEXT_FRAMES:
                    lines.append(f"      ... {len(thread.frames) - _TEXT_FRAMES} more")
        else:
            lines.append(f"  no Python stacks: {task.stacks_from}")
        if task.output_tail:
            lines.append(f"  last lines of output ({task.log_path}):")
            lines += [f"    | {line}" for line in task.output_tail]
        lines.append("")
    if report.gpus:
        lines.append("== GPUs (nvidia-smi on the launcher's machine)")
        lines += [f"  {line}" for line in report.gpus.splitlines()]
        lines.append("")
    lines.append(f"(collected in {report.collect_seconds:.2f}s)")
    return "\n".join(lines) + "\n"


def to_json(report: HangReport) -> dict[str, Any]:
    verdict = report.verdict
    tasks = []
    for task in report.tasks:
        act = verdict.activities.get(task.name)
        tasks.append({
            "task": task.name, "pid": task.pid, "host": task.host, "step": task.step, "finished": task.finished,
            "seconds_since_heartbeat": None if task.heartbeat_age is None else round(task.heartbeat_age, 3),
            "exit_code": task.exit_code, "exited": task.ended, "state": task.state, "wchan": task.wchan,
            "doing": act.doing.value if act else None,
            "where": ({"file": act.frame.file, "line": act.frame.line, "function": act.frame.function}
                      if act and act.frame else None),
            "blocked_in": act.blocked_in if act else None, "stacks_from": task.stacks_from,
            "threads": [{"name": t.name, "idle": t.idle, "wchan": t.wchan,
                         "frames": [{"function": f.function, "file": f.file, "line": f.line}
                                    for f in t.frames[:_JSON_FRAMES]]} for t in task.threads],
            "output_tail": list(task.output_tail), "log": task.log_path})
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run_id": report.run_id, "attempt": report.attempt,
            "reason": report.reason, "time": report.time, "collect_seconds": round(report.collect_seconds, 3),
            "verdict": {"culprit": verdict.culprit, "rule": verdict.rule, "headline": verdict.headline,
                        "others": verdict.others}, "tasks": tasks, "gpus": report.gpus or None}


def _write_private(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write(report: HangReport, folder: str) -> str:
    """Write the text and JSON reports into ``folder``; the text report's path.

    Raises:
        OSError: the folder is not writable.
    """
    stem = os.path.join(folder, file_stem(report.attempt, report.reason, report.time))
    _write_private(stem + ".json", json.dumps(to_json(report), indent=1) + "\n")
    _write_private(stem + ".txt", render_text(report))
    return stem + ".txt"


def latest(folder: str) -> str | None:
    """The newest ``hang-*.txt`` report in a run folder (for ``tfdist status``), or None."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith("hang-") and n.endswith(".txt")]
    except OSError:
        return None
    paths = [os.path.join(folder, n) for n in names]
    return max(paths, key=lambda p: (os.path.getmtime(p), p)) if paths else None
