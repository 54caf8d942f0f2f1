"""Where runs are recorded, and how a run folder is read (by the live view, ``tfdist status`` and ``tfdist logs``).

A run folder (``tfdist launch --log-dir``, else a temporary folder removed when the job ends) holds::

    run.json                      the run record (below)
    attempt-<n>/tasks.json        which pid is which task in attempt n (written by the supervisor)
    attempt-<n>/<type>-<i>.log    the task's output
    attempt-<n>/<type>-<i>.heartbeat, .error.json   what the runtime reports

The run record also goes to tfdist's state folder (``$XDG_STATE_HOME/tfdist/runs``, else
``~/.local/state/tfdist/runs``), so ``tfdist status`` finds the run meant without being told where its folder is
(:func:`pick`: the one running now, else the latest started from this folder), and can still say how a run ended once
its temporary folder is gone. The newest :data:`KEEP_RECORDS` are kept.

Records are written 0600 (they name folders and commands of the user's jobs), and the command in them has its secret
values masked (:func:`tfdist.redact.mask_command`). What a record holds, and when one read back is refused:
:mod:`tfdist.launch.console.run_record`.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from tfdist.errors import UsageError
# The record itself lives in run_record; its users know these names as runs.RunRecord, runs.new_record, ...
from tfdist.launch.console.run_record import RECORD_SCHEMA, RECORD_VERSION, RUN_ID, RUNNING, RunRecord, finished, \
    new_record, same_process  # noqa: F401
from tfdist.statedir import state_dir
from tfdist.validate import printable

RUN_FILE = "run.json"
TASKS_FILE = "tasks.json"
KEEP_RECORDS = 100
_ATTEMPT = re.compile(r"attempt-(\d+)")


def records_dir(environ: Mapping[str, str]) -> Path:
    return state_dir(environ) / "runs"


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


# Why a command given no run showed the one it did (Pick.by; also in `tfdist status --json`).
BY_RUNNING = "running"  # the one run whose launcher runs now
BY_RUNNING_HERE = "running-here"  # of several running, the one started from this folder
BY_FOLDER = "folder"  # none runs: the latest started from this folder
BY_NEWEST = "newest"  # none runs, none was started from this folder: the latest of all
NAMED_RUNNING = 5  # how many running runs an ambiguity error names (the rest are counted)


@dataclass(frozen=True)
class Pick:
    """The run a command given no run means, why, and every run running now (newest first, the chosen one too)."""

    record: RunRecord
    by: str
    running: tuple[RunRecord, ...] = ()

    @property
    def also_running(self) -> tuple[RunRecord, ...]:
        return tuple(r for r in self.running if r.run_id != self.record.run_id)


def latest(records: list[RunRecord], cwd: str) -> RunRecord:
    """The newest of ``records`` (newest first) started from folder ``cwd``, else the newest of all (pure)."""
    return next((r for r in records if r.cwd == cwd), records[0])


def pick(records: list[RunRecord], cwd: str, running_ids: Collection[str]) -> Pick:
    """Which of ``records`` (newest first, at least one) a command given no run means (pure; the table in the tests
    is the rule): the run whose launcher runs now (``running_ids``), wherever it was started; of several, the one
    started from ``cwd``; when none runs, the latest started from ``cwd``, else the latest of all.

    Raises:
        UsageError: several run and not exactly one of them was started from ``cwd``: guessing would show the wrong
            job as if it were the one; the message names them and the hint says how to pick one.
    """
    running = tuple(r for r in records if r.run_id in running_ids)
    if len(running) == 1:
        return Pick(running[0], BY_RUNNING, running)
    if running:
        here = [r for r in running if r.cwd == cwd]
        if len(here) == 1:
            return Pick(here[0], BY_RUNNING_HERE, running)
        raise UsageError(_several_running(running, cwd, len(here)),
                         hint=f"give one of their ids as RUN, e.g. `tfdist status {running[0].run_id}`; "
                              "`tfdist status --list` shows every run")
    chosen = latest(records, cwd)
    return Pick(chosen, BY_FOLDER if chosen.cwd == cwd else BY_NEWEST)


def _several_running(running: Sequence[RunRecord], cwd: str, here: int) -> str:
    where = f", {here} of them started from this folder" if here else ", none of them started from this folder"
    named = ", ".join(_describe(r, cwd) for r in running[:NAMED_RUNNING])
    more = f" and {len(running) - NAMED_RUNNING} more" if len(running) > NAMED_RUNNING else ""
    return f"{len(running)} runs are running now{where}: {named}{more}"


def _describe(record: RunRecord, cwd: str) -> str:
    """``3f2a9c1b0d2e (from /data/job, started 2026-12-03 13:02:11, launcher pid 4242)``, printable."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started_at))
    where = "this folder" if record.cwd == cwd else printable(record.cwd or "an unknown folder", 200)
    return f"{record.run_id} (from {where}, started {started}, launcher pid {record.launcher_pid})"


def chosen_because(record: RunRecord, cwd: str, running: Sequence[RunRecord] = ()) -> str:
    """Why a run given by no id was the one shown, in words for ``tfdist status`` (pure). ``running``: every run
    running now (:attr:`Pick.running`)."""
    others = [r for r in running if r.run_id != record.run_id]
    if len(others) < len(running):
        where = "this folder" if record.cwd == cwd else printable(record.cwd or "an unknown folder", 200)
        text = f"showing run {record.run_id}, the one running now (started from {where})"
        if others:
            more = f" and {len(others) - NAMED_RUNNING} more" if len(others) > NAMED_RUNNING else ""
            text = (f"showing run {record.run_id}, the one of {len(running)} running now started from this folder; "
                    f"also running: {', '.join(_describe(r, cwd) for r in others[:NAMED_RUNNING])}{more}")
        return text
    if record.cwd == cwd:
        return f"showing run {record.run_id}, the latest started from this folder"
    return (f"showing run {record.run_id}, the latest of this user, started from {record.cwd or 'an unknown folder'} "
            "(none was started from this folder)")


def running_ids(records: Sequence[RunRecord]) -> set[str]:
    """The ids of ``records`` whose launcher runs now, on this host (a record without an end whose pid and start time
    name a live process)."""
    return {r.run_id for r in records if not r.ended and launcher_alive(r) is True}


def _recorded(environ: Mapping[str, str]) -> list[RunRecord]:
    records = list_records(environ)
    if not records:
        damaged = len(list(records_dir(environ).glob("*.json")))
        skipped = f" ({damaged} damaged record(s) skipped)" if damaged else ""
        raise UsageError(f"no runs recorded in {records_dir(environ)}{skipped}",
                         hint="start one with tfdist launch, or give its run folder")
    return records


def choose(environ: Mapping[str, str], cwd: str | None = None) -> Pick:
    """The run meant when none is named (:func:`pick`), from ``cwd`` (default: this process's folder).

    Raises:
        UsageError: nothing recorded, or several runs running (see :func:`pick`).
    """
    records = _recorded(environ)
    return pick(records, os.getcwd() if cwd is None else cwd, running_ids(records))


def find_run(ref: str | None, environ: Mapping[str, str], cwd: str | None = None) -> RunRecord:
    """The run ``ref`` names: a run folder (a path holding ``run.json``), a run id or a unique prefix of one, or
    (``None``) the run meant when none is named (:func:`choose`).

    Raises:
        UsageError: nothing recorded, no match, an ambiguous prefix, or several runs running and none named.
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
    if ref is None:
        return choose(environ, cwd).record
    records = _recorded(environ)
    if not RUN_ID.fullmatch(ref):
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
    """Whether the launcher that wrote ``record`` still runs; None when that cannot be told from here (another host).
    A process of the recorded pid is that launcher only if it started when the launcher did (:func:`same_process`)."""
    if record.host != socket.gethostname():
        return None
    import psutil

    try:
        process = psutil.Process(record.launcher_pid)
        started = process.create_time()
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    return same_process(started, record)


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
