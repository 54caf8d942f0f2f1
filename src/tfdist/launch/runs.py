"""Where runs are recorded, and how a run folder is read (by the live view, ``tfdist status`` and ``tfdist logs``).

A run folder (``tfdist launch --log-dir``, else a temporary folder removed when the job ends) holds::

    run.json                      the run record (below)
    attempt-<n>/tasks.json        which pid is which task in attempt n (written by the supervisor)
    attempt-<n>/<type>-<i>.log    the task's output
    attempt-<n>/<type>-<i>.heartbeat, .error.json   what the runtime reports

The run record also goes to tfdist's state folder (``$XDG_STATE_HOME/tfdist/runs``, else
``~/.local/state/tfdist/runs``), so ``tfdist status`` finds the most recent run without being told where its folder
is, and can still say how a run ended once its temporary folder is gone. The newest :data:`KEEP_RECORDS` are kept.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tfdist.errors import UsageError
from tfdist.statedir import state_dir

RUN_FILE = "run.json"
TASKS_FILE = "tasks.json"
RECORD_SCHEMA = "tfdist.run"
RECORD_VERSION = 1
KEEP_RECORDS = 100
RUNNING = "running"
_ATTEMPT = re.compile(r"attempt-(\d+)")
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def records_dir(environ: Mapping[str, str]) -> Path:
    return state_dir(environ) / "runs"


# ------------------------------------------------------------------------------------------------ the record


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
        """Raises ValueError for anything that is not a version-1 run record."""
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            raise ValueError("not a tfdist run record")
        if data.get("schema_version") != RECORD_VERSION:
            raise ValueError(f"run record version {data.get('schema_version')!r} is not {RECORD_VERSION}")
        try:
            return cls(run_id=str(data["run_id"]), log_dir=str(data["log_dir"]), temporary=bool(data["temporary"]),
                       job_name=str(data["job_name"]), command=tuple(str(w) for w in data["command"]),
                       host=str(data["host"]), launcher_pid=int(data["launcher_pid"]),
                       started_at=float(data["started_at"]), cwd=str(data.get("cwd", "")),
                       state=str(data.get("state", RUNNING)),
                       ended_at=None if data.get("ended_at") is None else float(data["ended_at"]),
                       summary=dict(data.get("summary") or {}))
        except (KeyError, TypeError, ValueError) as bad:
            raise ValueError(f"incomplete run record: {bad}") from None


def new_record(*, run_id: str, log_dir: str, temporary: bool, job_name: str, command: tuple[str, ...]) -> RunRecord:
    """The record of a run this process is starting now."""
    return RunRecord(run_id=run_id, log_dir=os.path.abspath(log_dir), temporary=temporary, job_name=job_name,
                     command=tuple(command), host=socket.gethostname(), launcher_pid=os.getpid(),
                     started_at=time.time(), cwd=os.getcwd())


def finished(record: RunRecord, state: str, summary: Mapping[str, Any]) -> RunRecord:
    return replace(record, state=state, ended_at=time.time(), summary=dict(summary))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def save(record: RunRecord, environ: Mapping[str, str]) -> None:
    """Write ``record`` to the state folder and, while it exists, the run folder. Never raises for a full disk or
    a read-only home: recording a run must not stop the run."""
    data = record.to_json()
    try:
        folder = records_dir(environ)
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / f"{record.run_id}.json", data)
        _prune(folder)
    except OSError:
        pass
    if os.path.isdir(record.log_dir):
        try:
            _write_json(Path(record.log_dir) / RUN_FILE, data)
        except OSError:
            pass


def _prune(folder: Path) -> None:
    records = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for old in records[:-KEEP_RECORDS]:
        old.unlink(missing_ok=True)


def _load(path: Path) -> RunRecord | None:
    try:
        return RunRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def list_records(environ: Mapping[str, str]) -> list[RunRecord]:
    """Every recorded run, newest first."""
    found = [r for r in (_load(p) for p in records_dir(environ).glob("*.json")) if r is not None]
    return sorted(found, key=lambda r: r.started_at, reverse=True)


def find_run(ref: str | None, environ: Mapping[str, str]) -> RunRecord:
    """The run ``ref`` names: a run folder (a path holding ``run.json``), a run id or a unique prefix of one, or
    (``None``) the most recent run.

    Raises:
        UsageError: nothing recorded, no match, or an ambiguous prefix.
    """
    if ref and (os.sep in ref or ref.startswith(".") or os.path.isdir(ref)):
        record = _load(Path(ref) / RUN_FILE)
        if record is None:
            raise UsageError(f"{ref} is not a run folder (no readable {RUN_FILE} in it)",
                             hint="give the --log-dir of a tfdist launch, or a run id from `tfdist status --list`")
        return record
    records = list_records(environ)
    if not records:
        raise UsageError(f"no runs recorded in {records_dir(environ)}",
                         hint="start one with tfdist launch, or give its run folder")
    if ref is None:
        return records[0]
    if not _RUN_ID.fullmatch(ref):
        raise UsageError(f"{ref!r} is not a run id", hint="see `tfdist status --list`")
    matches = [r for r in records if r.run_id.startswith(ref)]
    if not matches:
        raise UsageError(f"no run {ref!r} among the {len(records)} recorded", hint="see `tfdist status --list`")
    if len(matches) > 1 and not any(r.run_id == ref for r in matches):
        raise UsageError(f"run id prefix {ref!r} matches {len(matches)} runs", hint="give more characters")
    return next((r for r in matches if r.run_id == ref), matches[0])


def reload(record: RunRecord, environ: Mapping[str, str]) -> RunRecord:
    """``record`` as last saved (the state folder's copy, else the run folder's), to see whether it has ended."""
    for path in (records_dir(environ) / f"{record.run_id}.json", Path(record.log_dir) / RUN_FILE):
        fresh = _load(path)
        if fresh is not None and fresh.run_id == record.run_id:
            return fresh
    return record


def launcher_alive(record: RunRecord) -> bool | None:
    """Whether the launcher that wrote ``record`` still runs; None when that cannot be told from here (another host)."""
    if record.host != socket.gethostname():
        return None
    import psutil

    try:
        process = psutil.Process(record.launcher_pid)
        # A recycled pid belongs to a process started after the run.
        return process.create_time() <= record.started_at + 1 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ---------------------------------------------------------------------------------------------- the folder


def attempts(log_dir: str) -> list[int]:
    """Attempt numbers with a task list in ``log_dir``, in order."""
    try:
        names = os.listdir(log_dir)
    except OSError:
        return []
    numbers = [int(m.group(1)) for m in map(_ATTEMPT.fullmatch, names) if m]
    return sorted(n for n in numbers if os.path.exists(os.path.join(log_dir, f"attempt-{n}", TASKS_FILE)))


def attempt_dir(log_dir: str, number: int) -> str:
    return os.path.join(log_dir, f"attempt-{number}")


@dataclass(frozen=True)
class TaskEntry:
    """One line of an attempt's ``tasks.json``."""

    name: str  # worker:0
    pid: int
    address: str = ""

    @property
    def file_stem(self) -> str:
        return self.name.replace(":", "-")


def read_tasks(log_dir: str, number: int) -> list[TaskEntry]:
    try:
        with open(os.path.join(attempt_dir(log_dir, number), TASKS_FILE), encoding="utf-8") as handle:
            raw = json.load(handle)
        return [TaskEntry(str(t["task"]), int(t["pid"]), str(t.get("address", ""))) for t in raw]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def task_file(log_dir: str, number: int, task: TaskEntry, suffix: str) -> str:
    return os.path.join(attempt_dir(log_dir, number), f"{task.file_stem}{suffix}")
