"""What the supervisor sees of its group at one moment: immutable data, built by the mechanism
(:class:`tfdist.launch.local.group.TaskGroup`) and judged by the policy (:func:`tfdist.launch.local.rules.decide`)."""
from __future__ import annotations

from dataclasses import dataclass

from tfdist.protocol import HeartbeatRecord

TRAINER_ROLES = ("chief", "worker")


@dataclass(frozen=True)
class TaskView:
    """One task of the group.

    Attributes:
        exit_code: None while it runs (Popen's convention: -N when killed by signal N).
        ended_at: seconds after the group started at which it exited (None while it runs).
        start_error: why it could not be started at all (then it never ran).
        heartbeat: its last heartbeat record; heartbeat_age: seconds since that was written (None: never).
        stopped: the kernel reports it stopped (SIGSTOP, a debugger).
        lost_port: its stderr says it could not bind its port, soon after it started.
        transient: its stderr says it ran out of a resource the machine may have again soon (threads, processes).
        blames: the tasks (``worker:1``) its output names after "The following tasks are unhealthy".
    """

    name: str
    task_type: str
    task_index: int
    pid: int | None = None
    exit_code: int | None = None
    ended_at: float | None = None
    start_error: str | None = None
    heartbeat: HeartbeatRecord | None = None
    heartbeat_age: float | None = None
    stopped: bool = False
    lost_port: bool = False
    transient: bool = False
    progressed: bool = False  # its heartbeat step moved past the first one it sent: it has run training steps
    quiet_for: float | None = None  # no heartbeat: seconds without CPU time or output (tfdist.launch.flight.watch)
    blames: tuple[str, ...] = ()  # peers its output names as unhealthy (TensorFlow's coordination service aborting it)

    @property
    def running(self) -> bool:
        return self.exit_code is None and self.start_error is None

    @property
    def is_trainer(self) -> bool:
        return self.task_type in TRAINER_ROLES

    @property
    def training_finished(self) -> bool:
        """Its training ended (``fit`` returned, or it exited 0): what it does after that is not training."""
        return self.exit_code == 0 or (self.heartbeat is not None and self.heartbeat.finished)


@dataclass(frozen=True)
class GroupSnapshot:
    """Every local task of one attempt, and how long the attempt has run."""

    tasks: tuple[TaskView, ...]
    elapsed: float = 0.0

    def find(self, task_type: str, task_index: int) -> TaskView | None:
        return next((t for t in self.tasks if (t.task_type, t.task_index) == (task_type, task_index)), None)

    @property
    def any_heartbeat(self) -> bool:
        return any(t.heartbeat_age is not None for t in self.tasks)

    @property
    def beating(self) -> tuple[TaskView, ...]:
        """The tasks that run training steps and so send heartbeats: the chief and the workers, except under
        ParameterServerStrategy (parameter servers in the group), where only the chief (the coordinator) does."""
        roles = ("chief",) if any(t.task_type == "ps" for t in self.tasks) else TRAINER_ROLES
        return tuple(t for t in self.tasks if t.task_type in roles)

    @property
    def trainers_progressed(self) -> bool:
        """Every training task has run steps in this attempt (past its first heartbeat, which comes before the first
        step is traced and run)."""
        trainers = self.beating
        return bool(trainers) and all(t.progressed for t in trainers)

    @property
    def training_finished(self) -> bool:
        """Every training task's training ended (each one's ``fit`` returned, as the task bootstrap or the runtime
        reports it, or it exited 0), and at least one said so in its heartbeat."""
        trainers = self.beating
        return (bool(trainers) and all(t.training_finished for t in trainers)
                and any(t.heartbeat is not None and t.heartbeat.finished for t in trainers))

    @property
    def step(self) -> int | None:
        steps = [t.heartbeat.step for t in self.tasks if t.is_trainer and t.heartbeat and t.heartbeat.step is not None]
        return max(steps) if steps else None
