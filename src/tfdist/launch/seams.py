"""The Protocols at the launcher's seams: what its mechanism needs of the parts handed to it from outside, so that
each is a real part or a test's stand-in, and a reader sees what is used. Nothing here imports the rest of tfdist.

Others live beside their one consumer: :class:`tfdist.launch.elastic.agent.node_group.RoundGroup` (what the agent needs of
a round's group), :class:`tfdist.launch.console.liveview.Watched` (what the live view reads of a run).
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

#: Where the launcher's own lines go (``tfdist: ...``, one call a line): the supervisor and the agent take one and
#: never print; the CLI hands them the terminal's (:func:`tfdist.launch.console.task_output.to_terminal`).
Say = Callable[[str], None]


class OutputSink(Protocol):
    """Where the tasks' output lines and the launcher's notices about them go. Process code (launch/process/)
    reports through this and never prints; the terminal's is :class:`tfdist.launch.console.task_output.Console`."""

    #: TensorFlow C++ lines below this TF_CPP_MIN_LOG_LEVEL are not shown (they stay in the log files).
    tf_log_level: int

    def write(self, prefix: str, line: str, *, to_stderr: bool) -> None: ...

    def notice(self, line: str) -> None: ...


class PlannedTask(Protocol):
    """What is read of a task's plan (:class:`tfdist.protocol.TaskPlan`) once it runs."""

    @property
    def task_type(self) -> str: ...

    @property
    def heartbeat_path(self) -> str: ...


class RunningTask(Protocol):
    """One started task as the flight recorder reads it (:class:`tfdist.launch.process.spawn.TaskProcess`)."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int: ...

    @property
    def plan(self) -> PlannedTask: ...

    @property
    def log_path(self) -> str: ...

    def poll(self) -> int | None: ...


class RunningTasks(Protocol):
    """An attempt's started tasks (:class:`tfdist.launch.local.group.TaskGroup`)."""

    @property
    def procs(self) -> Sequence[RunningTask]: ...


class TaskMetrics(Protocol):
    """The launcher's metrics as the supervisor and the agent update them
    (:class:`tfdist.observability.launcher_metrics.LauncherMetrics`)."""

    def set_task_state(self, task_type: str, index: int, state: str) -> None: ...

    def restart(self) -> None: ...
