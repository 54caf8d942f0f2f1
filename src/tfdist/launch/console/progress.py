"""How each task of a run is doing, read from its run folder: state, step, loss, throughput.

Shared by the live view (``tfdist launch`` on a terminal) and ``tfdist status``. Heartbeats are read only through
:func:`read_beat`; task states follow one pure rule, :func:`task_state`.
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from tfdist import protocol
from tfdist.launch.console import runs

# How far back the steps/s estimate looks: long enough to smooth 0.5 s heartbeats, short enough to follow a change.
RATE_WINDOW_S = 10.0


Beat = protocol.HeartbeatRecord


def read_beat(path: str) -> Beat | None:
    """The heartbeat at ``path`` (through the protocol's reader), or None before the first one. A record without a
    time (the pre-version-1 format) is dated by the file's modification time."""
    record = protocol.read_heartbeat(path)
    if record is None or record.time:
        return record
    try:
        return replace(record, time=os.stat(path).st_mtime)
    except OSError:
        return None


# Task states, in the words the live view and `tfdist status` show.
STARTING = "starting"  # running, no heartbeat yet (importing TensorFlow, connecting to its peers)
RUNNING = "running"  # a parameter server or evaluator: they serve or evaluate, they send no heartbeats
TRAINING = "training"
SAVING = "finishing"  # training over, the process still runs (saving the model, evaluating)
DONE = "done"  # exited after its training ended
FAILED = "failed"  # the runtime wrote an error file
EXITED = "exited"  # exited before its training ended (stopped by the launcher, or a script without heartbeats)
UNKNOWN = "unknown"  # the launcher runs on another host: its processes cannot be seen from here


def beating_roles(roles: Iterable[str]) -> tuple[str, ...]:
    """The roles whose tasks run training steps, and so send heartbeats: the chief and the workers, except under
    ParameterServerStrategy (a job with parameter servers), where only the chief (the coordinator) does."""
    return ("chief",) if "ps" in set(roles) else ("chief", "worker")


def task_state(alive: bool | None, beat: Beat | None, failed: bool, *, beats: bool = True) -> str:
    """One task's state from what can be observed (pure; the table in the tests is the specification).

    ``beats``: whether the task's role sends heartbeats (a parameter server or an evaluator does not).
    """
    if failed:
        return FAILED
    if alive is None:
        return UNKNOWN
    finished = beat is not None and beat.finished
    if alive:
        if beat is None:
            return STARTING if beats else RUNNING
        return SAVING if finished else TRAINING
    return DONE if finished else EXITED


@dataclass(frozen=True)
class TaskStatus:
    """One task of one attempt, as read from the run folder."""

    name: str
    attempt: int
    pid: int
    state: str
    beat: Beat | None
    log_path: str
    error: str | None = None  # "ValueError: boom", from the runtime's error file


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def read_attempt(log_dir: str, number: int, alive: Callable[[int], bool | None] = pid_alive) -> list[TaskStatus]:
    """Every task of attempt ``number`` in ``log_dir``, in the launcher's task order."""
    statuses = []
    entries = runs.read_tasks(log_dir, number)
    beating = beating_roles(e.name.split(":")[0] for e in entries)
    for task in entries:
        beat = read_beat(runs.task_file(log_dir, number, task, ".heartbeat"))
        error = protocol.read_error(runs.task_file(log_dir, number, task, ".error.json"))
        headline = f"{error.type}: {error.message}" if error else None
        statuses.append(TaskStatus(name=task.name, attempt=number, pid=task.pid,
                                   state=task_state(alive(task.pid), beat, error is not None,
                                                    beats=task.name.split(":")[0] in beating), beat=beat,
                                   log_path=runs.task_file(log_dir, number, task, ".log"), error=headline))
    return statuses


def latest_attempt(log_dir: str, alive: Callable[[int], bool | None] = pid_alive) -> tuple[int | None, list[TaskStatus]]:
    """The newest attempt's number and tasks (``(None, [])`` before the first start or once the folder is gone)."""
    numbers = runs.attempts(log_dir)
    if not numbers:
        return None, []
    return numbers[-1], read_attempt(log_dir, numbers[-1], alive)


class RateTracker:
    """Steps per second of each task over the last :data:`RATE_WINDOW_S`, from successive heartbeats."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: dict[tuple[str, int], deque[tuple[float, int]]] = {}

    def update(self, task: TaskStatus) -> float | None:
        """Record ``task``'s heartbeat (if new) and return its current rate."""
        beat = task.beat
        key = (task.name, task.attempt)
        samples = self._samples.setdefault(key, deque())
        if beat is not None and beat.step is not None and (not samples or beat.time > samples[-1][0]):
            if samples and beat.step < samples[-1][1]:
                samples.clear()  # the step went back (restored from a checkpoint): start over
            samples.append((beat.time, beat.step))
            while len(samples) > 2 and samples[-1][0] - samples[0][0] > self.window_s:
                samples.popleft()
        return self.rate(key)

    def rate(self, key: tuple[str, int]) -> float | None:
        samples = self._samples.get(key)
        if not samples or len(samples) < 2:
            return None
        (t0, s0), (t1, s1) = samples[0], samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None


def eta_seconds(step: int | None, total: int | None, rate: float | None) -> float | None:
    """Seconds left at ``rate``, when the total is known and the task is making progress."""
    if step is None or not total or not rate or rate <= 0:
        return None
    return max(0.0, (total - step) / rate)


# ------------------------------------------------------------------------------------------------ a whole run

LOST = "lost"  # the record says running but its launcher is gone (killed with SIGKILL, the machine rebooted)


def run_state(record: runs.RunRecord, launcher_alive: bool | None) -> str:
    """The run's state: its recorded end, else running / lost / unknown (launcher on another host)."""
    if record.ended:
        return record.state
    if launcher_alive is None:
        return UNKNOWN
    return runs.RUNNING if launcher_alive else LOST


@dataclass(frozen=True)
class RunStatus:
    """What ``tfdist status`` reports about one run."""

    record: runs.RunRecord
    state: str
    folder_exists: bool
    attempt: int | None
    tasks: tuple[TaskStatus, ...]
    hang_report: str | None = None  # the newest flight recorder report in the run folder (hang-*.txt)


def run_status(record: runs.RunRecord, hang_report: str | None = None) -> RunStatus:
    """Read ``record``'s run folder now. ``hang_report``: the newest flight recorder report found in it by the caller
    (:func:`tfdist.launch.flight.report.latest`; the flight room reads the run folder, so the console does not
    import it)."""
    alive = runs.launcher_alive(record)
    remote = alive is None
    number, tasks = latest_attempt(record.log_dir, (lambda _pid: None) if remote else pid_alive)
    return RunStatus(record=record, state=run_state(record, alive), folder_exists=os.path.isdir(record.log_dir),
                     attempt=number, tasks=tuple(tasks), hang_report=hang_report)
