"""A machine's task evidence as bounded plain fields for the rendezvous wire, and back (a job across machines).

The rendezvous carries one frame of at most ``auth.MAX_FRAME`` bytes per message and refuses JSON nested deeper than
``messages.MAX_DEPTH``, so a task's stacks travel flat: ``threads`` as ``[name, idle, wchan]`` rows and ``frames`` as
``[thread, function, file, line]`` rows. Everything is cut to fit, with a visible marker where something was left
out: long texts end in :data:`CUT`, a thread keeps its innermost and outermost frames around a marker frame (whose
file starts with ``<``, so the verdict rules read it as library code), left-out threads are counted in a last
thread's name, and the whole message is shrunk step by step (fewer threads, then fewer frames) until it fits
:data:`BUDGET` bytes. Pure functions; the message checks are in :mod:`tfdist.launch.elastic.messages.flight`.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from tfdist.launch.flight.classify import main_thread
from tfdist.launch.flight.evidence import TaskEvidence
from tfdist.protocol.stackdump import Frame, ThreadStack

CUT = " [cut]"
BUDGET = 600 * 1024  # of JSON for every task of a machine: well inside the 1 MiB frame, with the message around it
MAX_NAME = 128
MAX_FUNCTION = 300
MAX_PATH = 600
MAX_LINE = 400
MAX_SHORT = 64
MAX_THREADS = 64
MAX_FRAMES = 2048  # rows per task
MAX_OUTPUT = 40
# (threads, frames per thread) tried in turn until the tasks fit BUDGET; the last keeps one frame of one thread.
LADDER = ((32, 48), (16, 32), (8, 24), (4, 16), (2, 12), (1, 8), (1, 1))


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in :data:`CUT` when cut."""
    return text if len(text) <= limit else text[:max(0, limit - len(CUT))] + CUT


def _frames(frames: tuple[Frame, ...], keep: int) -> tuple[Frame, ...]:
    """The innermost three quarters and the outermost quarter of ``keep`` frames, a marker frame between."""
    if len(frames) <= keep:
        return frames
    outer = keep // 4
    inner = keep - outer
    marker = Frame(f"... {len(frames) - keep} frames left out to fit the wire", "<cut>", 0)
    return frames[:inner] + (marker,) + (frames[len(frames) - outer:] if outer else ())


def _threads(threads: tuple[ThreadStack, ...], keep: int) -> tuple[ThreadStack, ...]:
    """The main thread first, then the others, ``keep`` in all, and a marker thread counting the rest."""
    main = main_thread(threads)
    ordered = ([main] if main is not None else []) + [t for t in threads if t is not main]
    if len(ordered) <= keep:
        return tuple(threads)
    return tuple(ordered[:keep]) + (ThreadStack(f"... {len(ordered) - keep} threads left out to fit the wire", ()),)


def task_fields(task: TaskEvidence, threads: int = LADDER[0][0], frames: int = LADDER[0][1]) -> dict[str, Any]:
    """One task as the ``evidence`` message carries it, at most ``threads`` threads of ``frames`` frames each."""
    rows: list[list[Any]] = []
    kept = _threads(task.threads, threads)
    for index, thread in enumerate(kept):
        rows += [[index, clip(f.function, MAX_FUNCTION), clip(f.file, MAX_PATH), max(0, min(f.line, 2**31))]
                 for f in _frames(thread.frames, frames)]
    age = task.heartbeat_age
    return {
        "name": clip(task.name, MAX_SHORT), "pid": task.pid, "step": task.step, "finished": task.finished,
        "age": None if age is None else round(max(0.0, min(age, 1e9)), 3),
        "exit_code": task.exit_code, "gone": task.gone, "state": task.state[:4], "wchan": clip(task.wchan, MAX_NAME),
        "stacks_from": clip(task.stacks_from, MAX_LINE), "log": clip(task.log_path, MAX_PATH),
        "output": [clip(line, MAX_LINE) for line in task.output_tail[-MAX_OUTPUT:]],
        "threads": [[clip(t.name, MAX_NAME), t.idle, clip(t.wchan, MAX_NAME)] for t in kept],
        "frames": rows[:MAX_FRAMES],
    }


def bounded(tasks: Sequence[TaskEvidence], budget: int = BUDGET) -> tuple[list[dict[str, Any]], bool]:
    """Every task's fields, shrunk until their JSON fits ``budget`` bytes; and whether anything was left out."""
    full = [task_fields(t, MAX_THREADS, MAX_FRAMES) for t in tasks]
    if _size(full) <= budget:
        return full, False
    fields: list[dict[str, Any]] = []
    for threads, frames in LADDER:
        fields = [task_fields(t, threads, frames) for t in tasks]
        if _size(fields) <= budget:
            return fields, True
    for item in fields:  # still too big (a huge job on one machine): stacks go, the rest stays
        item["threads"], item["frames"], item["output"] = [], [], item["output"][-2:]
        item["stacks_from"] = "stacks left out: too many tasks on this machine to fit the wire"
    return fields, True


def _size(fields: list[dict[str, Any]]) -> int:
    return len(json.dumps(fields, separators=(",", ":")))


def from_fields(item: dict[str, Any], *, machine: str) -> TaskEvidence:
    """A checked task of an ``evidence`` message back as :class:`TaskEvidence` (``host``: the machine's name)."""
    frames: dict[int, list[Frame]] = {}
    for index, function, file, line in item["frames"]:
        frames.setdefault(index, []).append(Frame(function, file, line))
    threads = tuple(ThreadStack(name, tuple(frames.get(i, ())), idle=idle, wchan=wchan)
                    for i, (name, idle, wchan) in enumerate(item["threads"]))
    return TaskEvidence(
        name=item["name"], pid=item["pid"], host=machine, step=item["step"], finished=item["finished"],
        heartbeat_age=item["age"], exit_code=item["exit_code"], gone=item["gone"], state=item["state"],
        wchan=item["wchan"], threads=threads, stacks_from=item["stacks_from"], output_tail=tuple(item["output"]),
        log_path=item["log"], machine=machine)


def missing(names: Sequence[str], *, machine: str, why: str) -> list[TaskEvidence]:
    """Stand-ins for the tasks of a machine that sent no evidence: named, with the reason, nothing else known."""
    return [TaskEvidence(name=name, host=machine, machine=machine, evidence_missing=True, stacks_from=why)
            for name in names]
