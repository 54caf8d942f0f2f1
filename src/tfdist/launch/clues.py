"""What a failed task's own words say about the failure (pure: text in, facts out; table-tested in
tests/unit/test_launch_clues.py).

- :func:`failure_site`: where the script raised, as ``file:line`` (the innermost frame in the user's code, else the
  innermost frame), and the exception type: two attempts failing with the same pair failed deterministically.
- :func:`unhealthy_peers`: the tasks TensorFlow's coordination service names as unhealthy when it aborts a healthy
  task because a peer stopped sending heartbeats; the peer is the cause, not the task that printed it.
"""
from __future__ import annotations

import re
import sysconfig
from dataclasses import dataclass
from typing import Iterable, Sequence

_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]{1,4096})", line (?P<line>\d{1,9})', re.MULTILINE)
# The last line of a traceback: "ZeroDivisionError: division by zero", "tensorflow...errors_impl.AbortedError: ...".
_EXCEPTION = re.compile(r"(?P<type>[A-Za-z_][\w.]{0,200})(?::|\Z)")
UNHEALTHY_MARKER = "The following tasks are unhealthy"
_TASK_NAME = re.compile(r"/job:(?P<type>[a-z_]{1,32})/replica:\d{1,9}/task:(?P<index>\d{1,9})")


@dataclass(frozen=True)
class FailureSite:
    """Where and how a script failed."""

    exception: str  # the exception's type, without its module ("ZeroDivisionError")
    where: str  # "file:line"


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(paths[k] for k in ("purelib", "platlib", "stdlib", "platstdlib") if paths.get(k))


def failure_site(traceback: str, *, library_roots: Sequence[str] | None = None) -> FailureSite | None:
    """The exception type and the innermost ``file:line`` of the user's code in ``traceback`` (a Python traceback's
    text); the innermost frame when every frame is in a library; None when it is not a traceback."""
    frames = [(m.group("file"), m.group("line")) for m in _FRAME.finditer(traceback)]
    if not frames:
        return None
    roots = tuple(_library_roots() if library_roots is None else library_roots)
    own = [f for f in frames if not f[0].startswith(roots) and not f[0].startswith("<")]
    file, line = (own or frames)[-1]
    kind = "Error"
    for text in reversed(traceback.strip().splitlines()):
        match = _EXCEPTION.match(text)
        if match and not text.startswith((" ", "\t", "Traceback")):
            kind = match.group("type").rsplit(".", 1)[-1]
            break
    return FailureSite(exception=kind, where=f"{file}:{line}")


def unhealthy_peers(lines: Iterable[str]) -> tuple[str, ...]:
    """The tasks (``worker:1``) a task's output names after TensorFlow's "The following tasks are unhealthy"."""
    names: list[str] = []
    listing = False
    for line in lines:
        if UNHEALTHY_MARKER in line:
            listing = True
        found = [f"{m.group('type')}:{int(m.group('index'))}" for m in _TASK_NAME.finditer(line)]
        if listing and found:
            names.extend(n for n in found if n not in names)
        elif listing and UNHEALTHY_MARKER not in line:
            listing = False
    return tuple(names)
