"""TensorFlow's C++ log level for a job's tasks, and the console filter that makes it hold from the first line.

TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL`` (0 shows INFO and up, 1 WARNING and up, 2 ERROR and up, 3 FATAL only)
only once its logging is initialised. The lines it writes before that (absl's "All log messages before
absl::InitializeLog() is called are written to STDERR" banner, oneDNN's notice, the CUDA build's "Could not find
cuda drivers") ignore the variable and come once per shared library that carries its own copy of absl, i.e. twice
per task. So the launcher sets the variable for its tasks *and* drops glog-formatted lines below the level from the
console; the per-task log files keep every line.
"""
from __future__ import annotations

import re
from typing import Mapping

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# --tf-log-level name -> TF_CPP_MIN_LOG_LEVEL value: the least severe C++ line still shown.
LEVELS: dict[str, int] = {"info": 0, "warning": 1, "error": 2, "fatal": 3}
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
# glog/absl prefix: severity, MMDD, time (before absl is initialised: 00:00:<epoch seconds>), thread, file:line.
_GLOG_LINE = re.compile(r"^([IWEF])\d{4} [0-9:.]+\s+\d+ [^\s\]]+:\d+\] ")
_PRE_INIT_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def choose_level(flag: str | None, environ: Mapping[str, str], has_gpus: bool) -> int:
    """The ``TF_CPP_MIN_LOG_LEVEL`` for a job's tasks.

    ``--tf-log-level`` wins; then a ``TF_CPP_MIN_LOG_LEVEL`` already exported by the user; else ``error`` on a
    machine with GPUs and ``fatal`` on one without, where TensorFlow's only error lines at start are its failed
    CUDA probe (``failed call to cuInit``), which says nothing about the job.
    """
    if flag and flag != "auto":
        return LEVELS[flag]
    preset = environ.get(LEVEL_VARIABLE, "").strip()
    if preset.isdigit():
        return min(int(preset), 3)
    return LEVELS["error"] if has_gpus else LEVELS["fatal"]


def hidden(line: str, level: int) -> bool:
    """Whether a task's output line is TensorFlow C++ logging below ``level`` (to be kept off the console)."""
    if level <= 0:
        return False
    if line.startswith(_PRE_INIT_BANNER):
        return True
    match = _GLOG_LINE.match(line)
    return bool(match) and _SEVERITY[match.group(1)] < level


def console_level(environ: Mapping[str, str]) -> int:
    """The level the launcher's console filters at: the one its tasks inherit (0, show all, when unset)."""
    value = environ.get(LEVEL_VARIABLE, "").strip()
    return min(int(value), 3) if value.isdigit() else 0
