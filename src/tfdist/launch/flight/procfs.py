"""What the kernel says about a task: its state (R, S, D, T...), where it sleeps (wchan) and its CPU time, read from
/proc without touching the process (a stopped or hung process answers the same)."""
from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcFacts:
    """``state`` is "" when the process is gone (or another machine's)."""

    state: str = ""
    wchan: str = ""
    cpu_seconds: float | None = None


def _read(path: str, limit: int = 4096) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(limit)
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, float | None] | None:
    """State and CPU seconds (user + system) from ``/proc/<pid>/stat``; None when the process is gone."""
    stat = _read(f"/proc/{pid}/stat")
    if ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    try:
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
    except (IndexError, ValueError):
        cpu = None
    return (fields[0] if fields else ""), cpu


def cpu_seconds(pid: int) -> float | None:
    """The CPU time a process has used (one read: the cheap watch calls this at the heartbeat cadence)."""
    stat = _stat(pid)
    return stat[1] if stat else None


def read(pid: int) -> ProcFacts:
    stat = _stat(pid)
    if stat is None:
        return ProcFacts()
    wchan = _read(f"/proc/{pid}/wchan", 200).strip()
    return ProcFacts(state=stat[0], wchan="" if wchan == "0" else wchan, cpu_seconds=stat[1])


def thread_wchan(pid: int, tid: int) -> str:
    wchan = _read(f"/proc/{pid}/task/{tid}/wchan", 200).strip()
    return "" if wchan == "0" else wchan
