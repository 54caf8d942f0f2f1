"""Python stacks of a task, both sides: the task side registers :mod:`faulthandler` on a signal so that the launcher can
ask for every thread's stack, and the launcher side knows where that file is and reads it back.

This is the fallback of the flight recorder (:mod:`tfdist.launch.flight`): a task's stacks are read from outside by
py-spy when it is installed, which needs nothing from the task and also reads a task that is stopped (SIGSTOP) or
stuck in native code. faulthandler runs inside the task, so a stopped task cannot answer, and a task that never
registered must not be sent the signal at all (its default action ends the process): :func:`install` writes a
header naming its pid first and keeps the file open, and the launcher signals only a pid that header names and that
holds the file open.

The file sits next to the task's heartbeat file (``worker-1.heartbeat`` -> ``worker-1.stacks``), so its path comes
from ``TFDIST_HEARTBEAT_FILE``, which the launcher already sets; the task bootstrap calls :func:`install`.

Importable without TensorFlow and without ``tfdist.launch``.
"""
from __future__ import annotations

import faulthandler
import os
import re
import signal
from dataclasses import dataclass
from typing import IO, Mapping

from tfdist.protocol.variables import HEARTBEAT_FILE

DUMP_SIGNAL = signal.SIGUSR2  # SIGUSR1 is the one user scripts and profilers most often take
STACKS_SUFFIX = ".stacks"
HEADER = "# tfdist stackdump v1 pid={pid} signal={signal}"
_HEADER = re.compile(r"# tfdist stackdump v1 pid=(\d+) signal=(\w+)")
_MAX_READ = 4 << 20

_registered: IO[str] | None = None  # kept open for the life of the process: faulthandler writes to its descriptor


@dataclass(frozen=True)
class Frame:
    """One Python (or native) frame."""

    function: str
    file: str
    line: int

    @property
    def where(self) -> str:
        """``train.py:88`` (the file's base name)."""
        return f"{os.path.basename(self.file)}:{self.line}"


@dataclass(frozen=True)
class ThreadStack:
    """One thread's stack, innermost frame first. ``idle``: the dumper saw it waiting (None: it cannot tell);
    ``wchan``: where the kernel has it sleep (when the dumper knows its thread id)."""

    name: str
    frames: tuple[Frame, ...]
    idle: bool | None = None
    wchan: str = ""


def stacks_path(heartbeat_path: str) -> str:
    """Where the task with ``heartbeat_path`` writes its stacks: the same folder and name, suffix ``.stacks``."""
    base, ext = os.path.splitext(heartbeat_path)
    return (base if ext == ".heartbeat" else heartbeat_path) + STACKS_SUFFIX


# -- the task side ----------------------------------------------------------------------------------------------------
def install(environ: Mapping[str, str] | None = None) -> str | None:
    """Have :data:`DUMP_SIGNAL` write every thread's stack to this task's stacks file; the path, or None outside
    ``tfdist launch`` or when the file cannot be opened (never raises: a dump must not break the training)."""
    global _registered
    heartbeat = (os.environ if environ is None else environ).get(HEARTBEAT_FILE)
    if not heartbeat:
        return None
    path = stacks_path(heartbeat)
    try:
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
        handle.write(HEADER.format(pid=os.getpid(), signal=DUMP_SIGNAL.name) + "\n")
        handle.flush()
        faulthandler.register(DUMP_SIGNAL, file=handle, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        return None
    if _registered is not None and _registered is not handle:
        _registered.close()
    _registered = handle
    return path


# -- the launcher side ------------------------------------------------------------------------------------------------
def registered_pid(path: str) -> int | None:
    """The pid whose :func:`install` wrote ``path`` (only that process may be sent the signal), or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            match = _HEADER.fullmatch(handle.readline(200).strip())
    except OSError:
        return None
    return int(match.group(1)) if match and match.group(2) == DUMP_SIGNAL.name else None


def read_from(path: str, offset: int) -> str:
    """What was written to ``path`` after ``offset`` bytes (the latest dump; earlier ones stay above it)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(_MAX_READ).decode("utf-8", errors="replace")
    except OSError:
        return ""


_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_FRAME = re.compile(r'\s+File "(.*)", line (\d+) in (.+)')


def parse_faulthandler(text: str) -> list[ThreadStack]:
    """Threads of a faulthandler dump (``Thread 0x... (most recent call first):`` then ``File "f", line N in fn``).
    faulthandler names no threads and cannot tell which wait: each is named by its id."""
    threads: list[ThreadStack] = []
    name: str | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        head = _THREAD.fullmatch(line.strip())
        if head:
            if name is not None:
                threads.append(ThreadStack(name, tuple(frames)))
            name, frames = ("current " if head.group(1) == "Current thread" else "") + head.group(2), []
            continue
        frame = _FRAME.fullmatch(line)
        if frame and name is not None:
            frames.append(Frame(function=frame.group(3).strip(), file=frame.group(1), line=int(frame.group(2))))
    if name is not None:
        threads.append(ThreadStack(name, tuple(frames)))
    return threads
