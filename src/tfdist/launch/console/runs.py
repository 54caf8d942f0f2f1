"""Where runs are recorded, and how a run folder is read (by the live view, ``tfdist status`` and ``tfdist logs``).

A run folder (``tfdist launch --log-dir``, else a temporary folder removed when the job ends) holds::

    run.json                      the run record (below)
    attempt-<n>/tasks.json        which pid is which task in attempt n (written by the supervisor)
    attempt-<n>/<type>-<i>.log    the task's output
    attempt-<n>/<type>-<i>.heartbeat, .error.json   what the runtime reports

The run record also goes to tfdist's state folder (``$XDG_STATE_HOME/tfdist/runs``, else
``~/.local/state/tfdist/runs``), so ``tfdist status`` finds the most recent run without being told where its folder
is, and can still say how a run ended once its temporary folder is gone. The newest :data:`KEEP_RECORDS` are kept.

Records are written 0600 (they name folders and commands of the user's jobs), and the command in them has its secret
values masked (:func:`tfdist.redact.mask_command`). A record is read back only if every field has its type: a record
edited by hand, or written by something else, is refused with the field named, never half-used.
"""
from __future__ import annotations

import json
import math
import os
import re
import socket
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tfdist.errors import UsageError
from tfdist.redact import mask_command
from tfdist.statedir import state_dir

RUN_FILE = "run.json"
TASKS_FILE = "tasks.json"
RECORD_SCHEMA = "tfdist.run"
RECORD_VERSION = 1
KEEP_RECORDS = 100
RUNNING = "running"
_ATTEMPT = re.compile(r"attempt-(\d+)")
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# Seconds since the epoch a record may hold: up to the year 5138, which every time function of the platform takes.
_LATEST_TIME = 1e11
# The summary's numbers (liveview.Summary.to_json) and their types; other keys must hold a short scalar.
_SUMMARY_TYPES: dict[str, type] = {"steps": int, "restarts": int, "examples": int, "duration_s": float,
                                   "steps_per_s": float, "examples_per_s": float, "loss": float}


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
        if not _RUN_ID.fullmatch(run_id):
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
        return cls(run_id=run_id, log_dir=_text(data, "log_dir", path=True), temporary=data["temporary"],
                   job_name=_text(data, "job_name"), command=tuple(command), host=_text(data, "host"),
                   launcher_pid=pid, started_at=_time(data, "started_at"), cwd=_text(data, "cwd", path=True),
                   state=_text(data, "state") if "state" in data else RUNNING,
                   ended_at=None if ended_at is None else _time(data, "ended_at"),
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
                     started_at=time.time(), cwd=os.getcwd())


def finished(record: RunRecord, state: str, summary: Mapping[str, Any]) -> RunRecord:
    return replace(record, state=state, ended_at=time.time(), summary=dict(summary))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically, and readable by the user alone: a record names the user's folders and commands."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=1) + "\n")
        os.chmod(tmp, 0o600)  # a leftover temporary file of another mode keeps it through O_TRUNC
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
        return read_record(path)
    except (OSError, ValueError):
        return None


def read_record(path: Path) -> RunRecord:
    """The run record in ``path``. Raises OSError, or ValueError saying what is wrong with it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError("nested too deep to be a run record") from None
    return RunRecord.from_json(data)


def list_records(environ: Mapping[str, str]) -> list[RunRecord]:
    """Every recorded run, newest first."""
    found = [r for r in (_load(p) for p in records_dir(environ).glob("*.json")) if r is not None]
    return sorted(found, key=lambda r: r.started_at, reverse=True)


def latest(records: list[RunRecord], cwd: str) -> RunRecord:
    """The newest of ``records`` (newest first) started from folder ``cwd``, else the newest of all (pure)."""
    return next((r for r in records if r.cwd == cwd), records[0])


def chosen_because(record: RunRecord, cwd: str) -> str:
    """Why a run given by no id was the one shown, in words for ``tfdist status`` (pure)."""
    if record.cwd == cwd:
        return f"showing run {record.run_id}, the latest started from this folder"
    return (f"showing run {record.run_id}, the latest of this user, started from {record.cwd or 'an unknown folder'} "
            "(none was started from this folder)")


def find_run(ref: str | None, environ: Mapping[str, str], cwd: str | None = None) -> RunRecord:
    """The run ``ref`` names: a run folder (a path holding ``run.json``), a run id or a unique prefix of one, or
    (``None``) the most recent run started from ``cwd`` (default: this process's folder), else the most recent.

    Raises:
        UsageError: nothing recorded, no match, or an ambiguous prefix.
    """
    if ref and (os.sep in ref or ref.startswith(".") or os.path.isdir(ref)):
        try:
            return read_record(Path(ref) / RUN_FILE)
        except OSError:
            raise UsageError(f"{ref} is not a run folder (no readable {RUN_FILE} in it)",
                             hint="give the --log-dir of a tfdist launch, or a run id from `tfdist status --list`"
                             ) from None
        except ValueError as bad:
            raise UsageError(f"{Path(ref) / RUN_FILE}: {bad}",
                             hint="it was not written by tfdist launch; give another run") from None
    records = list_records(environ)
    if not records:
        damaged = len(list(records_dir(environ).glob("*.json")))
        skipped = f" ({damaged} damaged record(s) skipped)" if damaged else ""
        raise UsageError(f"no runs recorded in {records_dir(environ)}{skipped}",
                         hint="start one with tfdist launch, or give its run folder")
    if ref is None:
        return latest(records, os.getcwd() if cwd is None else cwd)
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
