"""``tfdist logs``: print the task logs of a run, or follow them (``-f``) across restarts until the job ends.

Following works like ``kubectl logs -f``: new output appears as the task writes it; when the launcher restarts the
group a banner line marks the new attempt and its files are followed from their start; when the run is over (its
record says it ended, or its launcher is gone) whatever is left is printed and the command returns.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable

from tfdist.cluster import ALL_ROLES
from tfdist.errors import TfdistError, UsageError
from tfdist.launch.console import runs

_TASK = re.compile(rf"({'|'.join(ALL_ROLES)})[:-]?(\d{{1,6}})")
POLL_S = 0.2


def parse_task(text: str) -> str | None:
    """``worker:1``, ``worker-1`` or ``worker1`` -> ``worker:1``; None when ``text`` does not name a task."""
    match = _TASK.fullmatch(text)
    return f"{match.group(1)}:{int(match.group(2))}" if match else None


@dataclass
class _Source:
    """One log file being read: where it is, how far it was read, and the unfinished last line."""

    task: str
    path: str
    offset: int = 0
    partial: bytes = b""


def choose_attempt(log_dir: str, attempt: int | None) -> int:
    """The attempt to show: the one asked for, else the latest.

    Raises:
        TfdistError: the folder is gone or holds no attempt yet. UsageError: no such attempt.
    """
    numbers = runs.attempts(log_dir)
    if not numbers:
        raise TfdistError(f"no task has started in {log_dir} (yet)", hint="wait for the launch to start its tasks")
    if attempt is None:
        return numbers[-1]
    if attempt not in numbers:
        raise UsageError(f"--attempt {attempt}: the run has attempts {', '.join(map(str, numbers))}")
    return attempt


def sources(log_dir: str, attempt: int, task: str | None) -> list[_Source]:
    """The log files of ``attempt``, of every task or of ``task`` only.

    Raises:
        UsageError: ``task`` is not one of the attempt's tasks.
    """
    entries = runs.read_tasks(log_dir, attempt)
    chosen = [e for e in entries if task is None or e.name == task]
    if not chosen:
        names = ", ".join(e.name for e in entries)
        raise UsageError(f"no task {task} in attempt {attempt}", hint=f"the tasks are {names}")
    return [_Source(e.name, runs.task_file(log_dir, attempt, e, ".log")) for e in chosen]


class LogPrinter:
    """Copies new bytes of each source to ``out``, whole lines only, prefixed with the task when several are shown."""

    def __init__(self, out: BinaryIO, *, prefixed: bool, tail: int | None = None) -> None:
        self.out = out
        self.prefixed = prefixed
        self.tail = tail  # on the first read of a file, print only its last N lines

    def _emit(self, source: _Source, lines: list[bytes]) -> None:
        prefix = f"[{source.task}] ".encode() if self.prefixed else b""
        self.out.write(b"".join(prefix + line for line in lines))

    def pump(self, source: _Source, *, final: bool = False) -> None:
        try:
            with open(source.path, "rb") as handle:
                handle.seek(source.offset)
                data = handle.read()
        except OSError:
            return
        first = source.offset == 0
        source.offset += len(data)
        data = source.partial + data
        lines = data.splitlines(keepends=True)
        source.partial = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        if final and source.partial:
            lines.append(source.partial + b"\n")
            source.partial = b""
        if first and self.tail is not None:
            lines = lines[-self.tail:] if self.tail else []
        if lines:
            self._emit(source, lines)
            self.out.flush()


def show(log_dir: str, attempt: int | None, task: str | None, out: BinaryIO, *, tail: int | None = None) -> None:
    """Print the logs once: each chosen task's file in turn."""
    number = choose_attempt(log_dir, attempt)
    chosen = sources(log_dir, number, task)
    printer = LogPrinter(out, prefixed=len(chosen) > 1, tail=tail)
    for source in chosen:
        printer.pump(source, final=True)


def follow(log_dir: str, task: str | None, out: BinaryIO, *, run_over: Callable[[], bool],
           tail: int | None = None, poll_s: float = POLL_S) -> None:
    """Print the latest attempt's logs and keep printing new output, across restarts, until ``run_over()``.
    A run whose tasks have not started yet is waited for."""
    while not runs.attempts(log_dir) and not run_over():
        time.sleep(poll_s)
    number = choose_attempt(log_dir, None)
    chosen = sources(log_dir, number, task)
    printer = LogPrinter(out, prefixed=task is None and len(chosen) > 1, tail=tail)
    while True:
        over = run_over()  # asked before the last read, so nothing written before the end is missed
        for source in chosen:
            printer.pump(source, final=over)
        if over:
            return
        newest = runs.attempts(log_dir)
        if newest and newest[-1] > number:
            for source in chosen:
                printer.pump(source, final=True)
            number = newest[-1]
            chosen = sources(log_dir, number, task)
            printer.tail = None
            out.write(f"tfdist: attempt {number} started\n".encode())
            out.flush()
            continue
        time.sleep(poll_s)
