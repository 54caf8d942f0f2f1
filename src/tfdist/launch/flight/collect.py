"""Gathering the evidence of every task of an attempt at once: Python stacks, last step, process state, last lines of
output. Tasks are read in parallel (a stack dump is a short subprocess per task), so a 4-task job takes about as
long as its slowest task."""
from __future__ import annotations

import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import psutil

from tfdist.launch.console import runs
from tfdist.launch.flight import procfs
from tfdist.launch.flight.evidence import TaskEvidence
from tfdist.launch.flight.stacks import read_stacks
from tfdist.protocol.records import read_heartbeat
from tfdist.protocol.stackdump import stacks_path

TAIL_LINES = 20
_TAIL_BYTES = 64 << 10


@dataclass(frozen=True)
class Target:
    """A task to look at: its pid and files; ``exit_code`` when the launcher knows it ended."""

    name: str
    pid: int | None
    heartbeat_path: str
    log_path: str
    exit_code: int | None = None
    started_before: float | None = None  # wall clock: a pid whose process started later was recycled


def targets_from_folder(log_dir: str, attempt: int) -> list[Target]:
    """The tasks of ``attempt`` as the launcher recorded them in the run folder (``tasks.json``)."""
    listed = os.path.join(runs.attempt_dir(log_dir, attempt), runs.TASKS_FILE)
    try:
        written = os.stat(listed).st_mtime
    except OSError:
        written = None
    return [Target(name=t.name, pid=t.pid, heartbeat_path=runs.task_file(log_dir, attempt, t, ".heartbeat"),
                   log_path=runs.task_file(log_dir, attempt, t, ".log"),
                   started_before=None if written is None else written + 1.0)
            for t in runs.read_tasks(log_dir, attempt)]


def tail(path: str, lines: int = TAIL_LINES) -> tuple[str, ...]:
    """The last ``lines`` lines of a log (reads at most the last 64 KiB)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - _TAIL_BYTES))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ()
    return tuple(text.splitlines()[-lines:])


def _alive(target: Target) -> bool:
    if target.pid is None or target.exit_code is not None:
        return False
    try:
        process = psutil.Process(target.pid)
        recycled = target.started_before is not None and process.create_time() > target.started_before
        return not recycled and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def evidence(target: Target, *, dumper: str = "auto", timeout: float = 4.0, now: float | None = None) -> TaskEvidence:
    """Everything about one task; never raises (what cannot be read is left empty, with the reason)."""
    beat = read_heartbeat(target.heartbeat_path)
    try:
        age = (time.time() if now is None else now) - os.stat(target.heartbeat_path).st_mtime
    except OSError:
        age = None
    alive = _alive(target)
    facts = procfs.read(target.pid) if alive and target.pid is not None else procfs.ProcFacts()
    threads, source = [], "the process has exited"
    if alive and target.pid is not None:
        threads, source = read_stacks(target.pid, stacks_path(target.heartbeat_path),
                                      stopped=facts.state in ("T", "t"), dumper=dumper, timeout=timeout)
    exit_code = target.exit_code
    return TaskEvidence(
        name=target.name, pid=target.pid, host=socket.gethostname(), step=beat.step if beat else None,
        finished=bool(beat and beat.finished), heartbeat_age=None if age is None else max(0.0, age),
        exit_code=exit_code, gone=not alive, state=facts.state, wchan=facts.wchan, threads=tuple(threads),
        stacks_from=source, output_tail=tail(target.log_path), log_path=target.log_path)


def collect(targets: Sequence[Target], *, dumper: str = "auto", timeout: float = 4.0) -> list[TaskEvidence]:
    """Every task's evidence, read in parallel, in the order of ``targets``."""
    if not targets:
        return []
    now = time.time()
    with ThreadPoolExecutor(max_workers=min(32, len(targets)), thread_name_prefix="tfdist-flight") as pool:
        return list(pool.map(lambda t: evidence(t, dumper=dumper, timeout=timeout, now=now), targets))
