"""What a task tells the launcher: a heartbeat record and an error record, versioned JSON files whose paths the
launcher's :class:`~tfdist.protocol.plan.TaskPlan` names (and the list of library modules a task imported, for warm
spares). The other half of the task protocol, what the launcher tells a task, is :mod:`tfdist.protocol.plan`.

Importable without TensorFlow and without ``tfdist.launch``: the runtime inside a training script, the
launcher, the live view and the deploy generators all read the same definitions.

Heartbeat file: one JSON object, rewritten atomically (write a temporary file, then ``os.replace``) at most every
``TFDIST_HEARTBEAT_INTERVAL`` seconds while training; its modification time is what the hang watchdog reads::

    {"v": 1, "step": 120, "time": 1764543000.5, "state": "training", "loss": 0.31, "total_steps": 400,
     "examples": 7680, "saves": true}

``saves`` is there (true) only in a task with a save handler: on SIGTERM it saves its state before it exits 143.

Phases (what the hang verdict learns from): ``phase`` is what the task is doing now, ``phase_since`` when it began
(the task's wall clock), and ``phase_stats`` what the task's finished phases took, per phase, in this process::

    {"phase": "step", "phase_since": 1764543000.4,
     "phase_stats": {"step": {"n": 118, "p99": 0.062, "max": 0.071}, "startup": {"n": 1, "p99": 9.8, "max": 9.8}}}

``startup``: from the process start to its first step; ``step``: one training step (a Keras batch, a custom loop's
optimizer step); ``between``: work between steps that is not a step (callbacks at an epoch's end, evaluation,
saving); ``restore``: reading a checkpoint or snapshot back. A task writes its heartbeat when it enters a phase of
another kind at once, and at most every ``TFDIST_HEARTBEAT_INTERVAL`` seconds while the kind stays the same.

Error file: one JSON object, written when the script raises (``tfdist.runtime`` installs the hook)::

    {"v": 1, "type": "ValueError", "message": "...", "traceback": "...", "time": 1764543000.5, "pid": 4242,
     "host": "node1"}
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
import traceback
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Mapping

from tfdist.status import ExitStatus

PROTOCOL_VERSION = 1
# A task that saved its state after SIGTERM exits with this; the launcher restarts it without spending the budget.
PREEMPTED_EXIT_CODE = int(ExitStatus.PREEMPTED)


# -- what a task tells the launcher -----------------------------------------------------------------------------------
class TaskState(str, Enum):
    TRAINING = "training"
    FINISHED = "finished"  # training ended: saving and evaluating afterwards send no beats


class Phase(str, Enum):
    """What a task is doing now (see the module's docstring): each kind has durations of its own."""
    STARTUP = "startup"
    STEP = "step"
    BETWEEN = "between"
    RESTORE = "restore"


@dataclass(frozen=True)
class PhaseStats:
    """What the finished phases of one kind took in this process: how many, their 99th percentile and longest."""
    n: int
    p99: float
    max: float


@dataclass(frozen=True)
class HeartbeatRecord:
    step: int | None
    time: float
    state: TaskState = TaskState.TRAINING
    loss: float | None = None
    total_steps: int | None = None  # known when epochs x steps per epoch is
    examples: int | None = None
    saves: bool | None = None  # True: SIGTERM makes it save first (tfdist.runtime's callbacks, or the bootstrap's)
    phase: Phase | None = None
    phase_since: float | None = None
    phase_stats: Mapping[Phase, PhaseStats] | None = None
    v: int = PROTOCOL_VERSION

    @property
    def finished(self) -> bool:
        return self.state is TaskState.FINISHED

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v is not None}
        data["state"] = self.state.value
        if self.phase is not None:
            data["phase"] = self.phase.value
        if self.phase_stats is not None:
            data["phase_stats"] = {phase.value: asdict(stats) for phase, stats in self.phase_stats.items()}
        return json.dumps(data, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class ErrorRecord:
    type: str
    message: str
    traceback: str = ""
    time: float = 0.0
    pid: int | None = None
    host: str = ""
    v: int = PROTOCOL_VERSION

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorRecord:
        return cls(type=type(exc).__name__, message=str(exc),
                   traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                   time=time.time(), pid=os.getpid(), host=socket.gethostname())

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def _write_atomically(path: str, text: str) -> bool:
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError:  # reporting must never break the training it reports on
        return False
    return True


def write_heartbeat(path: str, record: HeartbeatRecord) -> bool:
    return _write_atomically(path, record.to_json() + "\n")


def write_error(path: str, record: ErrorRecord) -> bool:
    return _write_atomically(path, record.to_json())


_MAX_RECORD_BYTES = 1 << 20  # a record is small; never read a huge or hostile file whole
_LEGACY_HEARTBEAT = re.compile(r"(\d{1,18})? ?(finished)?")  # "<step>" or "<step> finished" (before version 1)


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(_MAX_RECORD_BYTES)
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# -- what a training task imported (for warm spares) ------------------------------------------------------------------
MODULES_SUFFIX = ".modules"  # next to the heartbeat file: the library modules the task had imported when it trained
_MAX_MODULES = 20000


def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    found = [paths[k] for k in ("purelib", "platlib", "stdlib", "platstdlib") if paths.get(k)]
    return tuple({form + os.sep for path in found for form in (os.path.abspath(path), os.path.realpath(path))})


def loaded_library_modules(modules: Mapping[str, Any]) -> list[str]:
    """Public modules in ``modules`` (``sys.modules``) that were loaded from the installed libraries or the standard
    library, never the user's own files: what a warm spare may import ahead without running the user's code."""
    roots = _library_dirs()
    names = []
    for name, module in list(modules.items()):
        where = getattr(module, "__file__", None)
        if not where or name == "__main__" or any(part.startswith("_") for part in name.split(".")):
            continue
        if where.startswith(roots):
            names.append(name)
    return sorted(names)[:_MAX_MODULES]


def write_modules(heartbeat_path: str, names: list[str]) -> bool:
    return _write_atomically(heartbeat_path + MODULES_SUFFIX, "\n".join(names) + "\n")


_MODULE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)*")


def read_modules(heartbeat_path: str) -> list[str]:
    """The module names a task recorded (well-formed names only; an absent file is an empty list)."""
    try:
        with open(heartbeat_path + MODULES_SUFFIX, encoding="utf-8", errors="replace") as handle:
            text = handle.read(_MAX_RECORD_BYTES * 2)
    except OSError:
        return []
    return [n for n in text.splitlines() if _MODULE_NAME.fullmatch(n)][:_MAX_MODULES]


_MAX_PHASE_STAT = 1e7  # seconds; a duration past this (about 4 months) is not a measurement


def _phase(value: Any) -> Phase | None:
    try:
        return Phase(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _phase_stats(value: Any) -> dict[Phase, PhaseStats] | None:
    """Well-formed entries only: a phase this version does not know, or a count or duration out of range, is left out."""
    if not isinstance(value, dict):
        return None
    stats = {}
    for name, entry in list(value.items())[:len(Phase)]:
        phase = _phase(name)
        if phase is None or not isinstance(entry, dict):
            continue
        n, p99, longest = _int(entry.get("n")), _float(entry.get("p99")), _float(entry.get("max"))
        if n and p99 is not None and longest is not None and 0 <= p99 <= longest <= _MAX_PHASE_STAT:
            stats[phase] = PhaseStats(n=n, p99=p99, max=longest)
    return stats or None


def read_heartbeat(path: str) -> HeartbeatRecord | None:
    """The task's last heartbeat, or None when it wrote none (yet) or wrote something unreadable."""
    data = _read_json(path)
    if isinstance(data, str):
        match = _LEGACY_HEARTBEAT.fullmatch(data.strip())
        if not match or not data.strip():
            return None
        step = int(match.group(1)) if match.group(1) else None
        return HeartbeatRecord(step=step, time=0.0, state=TaskState.FINISHED if match.group(2) else
                               TaskState.TRAINING, v=0)
    if isinstance(data, int) and not isinstance(data, bool):
        return HeartbeatRecord(step=_int(data), time=0.0, v=0)
    if not isinstance(data, dict):
        return None
    try:
        state = TaskState(data.get("state", TaskState.TRAINING.value))
    except ValueError:
        state = TaskState.TRAINING
    return HeartbeatRecord(step=_int(data.get("step")), time=_float(data.get("time")) or 0.0, state=state,
                           loss=_float(data.get("loss")), total_steps=_int(data.get("total_steps")),
                           examples=_int(data.get("examples")), saves=True if data.get("saves") is True else None,
                           phase=_phase(data.get("phase")), phase_since=_float(data.get("phase_since")),
                           phase_stats=_phase_stats(data.get("phase_stats")), v=_int(data.get("v")) or 0)


def read_error(path: str) -> ErrorRecord | None:
    """The task's error record, or None when it wrote none (it did not use tfdist.runtime, or was killed)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    return ErrorRecord(type=str(data.get("type") or "Error"), message=str(data.get("message") or ""),
                       traceback=str(data.get("traceback") or ""),
                       time=_float(data.get("time", data.get("timestamp"))) or 0.0, pid=_int(data.get("pid")),
                       host=str(data.get("host") or ""), v=_int(data.get("v")) or 0)
