"""The run record (``run.json``, and its copy in tfdist's state folder): what is known about a run without reading its
folder, how it is read back, and which process is its launcher.

A record is read back only if every field has its type: a record edited by hand, or written by something else, is
refused with the field named, never half-used. Fields added later are optional, so version 1 still reads every
record written since (``cwd``, ``launcher_started_at``); a reader ignores fields it does not know.
"""
from __future__ import annotations

import math
import os
import re
import socket
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from tfdist.redact import mask_command

RECORD_SCHEMA = "tfdist.run"
RECORD_VERSION = 1
RUNNING = "running"
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# Seconds since the epoch a record may hold: up to the year 5138, which every time function of the platform takes.
_LATEST_TIME = 1e11
# The summary's numbers (liveview.Summary.to_json) and their types; other keys must hold a short scalar.
_SUMMARY_TYPES: dict[str, type] = {"steps": int, "restarts": int, "examples": int, "duration_s": float,
                                   "steps_per_s": float, "examples_per_s": float, "loss": float}
# A process's start time is its start since boot plus the boot time, which two readers may see 1 s apart (the kernel
# derives it from the wall clock, in whole seconds); a pid is never reused that fast. A step of the wall clock by more
# (a resumed VM) makes a live launcher look gone: the run shows as lost, never another run as this one.
START_TIME_SLACK_S = 2.0


@dataclass(frozen=True)
class RunRecord:
    """What is known about a run without reading its folder."""

    run_id: str
    log_dir: str
    temporary: bool  # the folder is removed when the job ends (no --log-dir)
    job_name: str
    command: tuple[str, ...]
    host: str
    launcher_pid: int
    started_at: float  # seconds since the epoch
    cwd: str = ""
    state: str = RUNNING  # then the supervisor's final state: succeeded, failed, preempted, interrupted
    # When the launcher process started (its own start time, as psutil reads it): with the pid, it names the process
    # (a pid alone may have been reused). None in records written before it was kept.
    launcher_started_at: float | None = None
    ended_at: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)  # steps, duration_s, steps_per_s, restarts, metrics

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["command"] = list(self.command)
        return {"schema": RECORD_SCHEMA, "schema_version": RECORD_VERSION, **data}

    @classmethod
    def from_json(cls, data: Any) -> "RunRecord":
        """Raises ValueError, naming the field, for anything that is not a well-typed version-1 run record."""
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            raise ValueError("not a tfdist run record")
        if data.get("schema_version") != RECORD_VERSION:
            raise ValueError(f"run record version {data.get('schema_version')!r} is not {RECORD_VERSION}")
        missing = [key for key in ("run_id", "log_dir", "temporary", "job_name", "command", "host", "launcher_pid",
                                   "started_at") if key not in data]
        if missing:
            raise ValueError(f"incomplete run record: no {', '.join(missing)}")
        run_id = _text(data, "run_id")
        if not RUN_ID.fullmatch(run_id):
            raise ValueError("run record field run_id is not a run id")
        command = data["command"]
        if not isinstance(command, list) or not all(isinstance(w, str) for w in command):
            raise ValueError("run record field command is not a list of strings")
        if not isinstance(data["temporary"], bool):
            raise ValueError("run record field temporary is not true or false")
        pid = data["launcher_pid"]
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2 ** 31:
            raise ValueError("run record field launcher_pid is not a process id")
        ended_at = data.get("ended_at")
        launcher_started_at = data.get("launcher_started_at")
        return cls(run_id=run_id, log_dir=_text(data, "log_dir", path=True), temporary=data["temporary"],
                   job_name=_text(data, "job_name"), command=tuple(command), host=_text(data, "host"),
                   launcher_pid=pid, started_at=_time(data, "started_at"), cwd=_text(data, "cwd", path=True),
                   state=_text(data, "state") if "state" in data else RUNNING,
                   ended_at=None if ended_at is None else _time(data, "ended_at"),
                   launcher_started_at=None if launcher_started_at is None else _time(data, "launcher_started_at"),
                   summary=_summary(data.get("summary")))


def _text(data: dict[str, Any], key: str, *, path: bool = False) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or (path and "\0" in value):
        raise ValueError(f"run record field {key} is not {'a path' if path else 'text'}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _time(data: dict[str, Any], key: str) -> float:
    value = data[key]
    if not _is_number(value) or not 0 <= value <= _LATEST_TIME:
        raise ValueError(f"run record field {key} is not a time")
    return float(value)


def _summary(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("run record field summary is not an object")
    for key, item in value.items():
        wanted = _SUMMARY_TYPES.get(key)
        if item is None:
            continue
        if wanted is int and not (isinstance(item, int) and not isinstance(item, bool)):
            raise ValueError(f"run record field summary.{key} is not a whole number")
        if wanted is float and not (isinstance(item, (int, float)) and not isinstance(item, bool)):
            raise ValueError(f"run record field summary.{key} is not a number")  # NaN is one: a loss can diverge
        if wanted is None and not (isinstance(item, (str, bool)) or _is_number(item)):
            raise ValueError(f"run record field summary.{key} is not a plain value")
    return dict(value)


def new_record(*, run_id: str, log_dir: str, temporary: bool, job_name: str, command: tuple[str, ...]) -> RunRecord:
    """The record of a run this process is starting now (the command with its secrets masked)."""
    return RunRecord(run_id=run_id, log_dir=os.path.abspath(log_dir), temporary=temporary, job_name=job_name,
                     command=mask_command(command), host=socket.gethostname(), launcher_pid=os.getpid(),
                     started_at=time.time(), cwd=os.getcwd(), launcher_started_at=_own_start_time())


def _own_start_time() -> float | None:
    import psutil

    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


def finished(record: RunRecord, state: str, summary: Mapping[str, Any]) -> RunRecord:
    return replace(record, state=state, ended_at=time.time(), summary=dict(summary))


def same_process(started: float, record: RunRecord) -> bool:
    """Whether a process of ``record``'s launcher pid, started at ``started``, is its launcher (pure): pids are reused
    (after the launcher died, after a reboot, in another container's pid namespace with the same host name)."""
    if record.launcher_started_at is not None:
        return abs(started - record.launcher_started_at) <= START_TIME_SLACK_S
    # A record from before launcher_started_at was kept: a process started after the run holds a recycled pid.
    return started <= record.started_at + START_TIME_SLACK_S
