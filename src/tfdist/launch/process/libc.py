"""The C library's ``prctl(2)``, which the launcher's process rules use (a task dies with the launcher; the launcher
adopts its tasks' orphans), loaded once and without running a program: ``ctypes.util.find_library("c")`` runs
``ldconfig -p`` in a new process every time, which cost every launch two process starts before its tasks could."""
from __future__ import annotations

import ctypes

# This process's own symbols: on Linux the interpreter is linked against libc, so prctl is among them.
_libc = ctypes.CDLL(None, use_errno=True)
prctl = getattr(_libc, "prctl", None)  # None where the C library has none (not Linux)
