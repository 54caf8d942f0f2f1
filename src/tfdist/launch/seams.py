"""The Protocols at the launcher's seams: what its mechanism needs of the parts handed to it from outside, so that
each is a real part or a test's stand-in, and a reader sees what is used. Nothing here imports the rest of tfdist.

Others live beside their one consumer: :class:`tfdist.launch.elastic.node_group.RoundGroup` (what the agent needs of
a round's group), :class:`tfdist.launch.console.liveview.Watched` (what the live view reads of a run).
"""
from __future__ import annotations

from typing import Protocol


class OutputSink(Protocol):
    """Where the tasks' output lines and the launcher's notices about them go. Process code (launch/process/)
    reports through this and never prints; the terminal's is :class:`tfdist.launch.console.task_output.Console`."""

    #: TensorFlow C++ lines below this TF_CPP_MIN_LOG_LEVEL are not shown (they stay in the log files).
    tf_log_level: int

    def write(self, prefix: str, line: str, *, to_stderr: bool) -> None: ...

    def notice(self, line: str) -> None: ...


class TaskMetrics(Protocol):
    """The launcher's metrics as the supervisor and the agent update them
    (:class:`tfdist.observability.launcher_metrics.LauncherMetrics`)."""

    def set_task_state(self, task_type: str, index: int, state: str) -> None: ...

    def restart(self) -> None: ...
