"""Which process is which, for as long as the machine is up, told apart from a later process that got its pid.

A pid is reused once its process has ended, so a pid alone names no process; the pid with the process's start time
(clock ticks after boot, field 22 of ``/proc/PID/stat``, fixed for the process's life) does. Both mean something
only inside their pid namespace: a container's pid 7 is another process than the host's pid 7, so an identity
records its namespace, and one from another namespace is never judged (it may well be running).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

PROC = "/proc"
_TOKEN = re.compile(r"(\d{1,10})\.(\d{1,20})\.(\d{1,20})")


@dataclass(frozen=True)
class ProcessIdentity:
    """One process: its pid, start time (clock ticks after boot) and pid namespace (the inode of its
    ``/proc/PID/ns/pid``)."""

    pid: int
    start: int
    namespace: int

    @property
    def token(self) -> str:
        """``PID.START.NAMESPACE``: digits and dots, safe in a file name."""
        return f"{self.pid}.{self.start}.{self.namespace}"

    @classmethod
    def parse(cls, token: str) -> ProcessIdentity | None:
        """The identity a :attr:`token` names; None for anything else."""
        match = _TOKEN.fullmatch(token)
        return cls(*(int(part) for part in match.groups())) if match else None


def start_of(pid: int, proc: str = PROC) -> int | None:
    """The start time of process ``pid`` in clock ticks after boot; None when there is no such process or it has
    ended (a zombie, not yet reaped by its parent)."""
    try:
        with open(f"{proc}/{int(pid)}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except (OSError, ValueError):
        return None
    # "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so the fields start after the last ")".
    fields = text[text.rfind(")") + 2:].split()
    if len(fields) < 20 or fields[0] in ("Z", "X") or not fields[19].isdigit():
        return None
    return int(fields[19])  # field 22 of the line, the 20th after COMM


def this_process(proc: str = PROC) -> ProcessIdentity | None:
    """This process's identity; None where ``/proc`` is not this pid namespace's (then no pid read there is ours)."""
    try:
        if os.readlink(f"{proc}/self") != str(os.getpid()):
            return None
        namespace = os.stat(f"{proc}/self/ns/pid").st_ino
    except OSError:
        return None
    start = start_of(os.getpid(), proc)
    return ProcessIdentity(os.getpid(), start, namespace) if start is not None else None


def has_ended(owner: ProcessIdentity, here: ProcessIdentity,
              start: Callable[[int], int | None] = start_of) -> bool:
    """Whether ``owner`` has certainly ended, as seen from ``here`` (this process): same pid namespace, and its pid
    is free or belongs to a process started at another time. False whenever that cannot be told."""
    return owner.namespace == here.namespace and start(owner.pid) != owner.start
