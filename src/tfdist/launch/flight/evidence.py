"""What the flight recorder knows about one task when it looks, and what it concludes: immutable data, built by
:mod:`tfdist.launch.flight.collect` and judged by the pure rules in :mod:`tfdist.launch.flight.rules`."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tfdist.protocol.stackdump import Frame, ThreadStack


class Doing(str, Enum):
    """What a task was doing when it was looked at, from its stacks and process state."""

    STOPPED = "stopped"  # the kernel says stopped (SIGSTOP, a debugger): it cannot run at all
    EXITED = "exited"  # the process is gone
    USER_CODE = "user-code"  # its main thread is in the script's own code, outside TensorFlow
    INPUT = "input"  # a Python input function (tf.data from a generator, a py_function) is in the script's code
    TENSORFLOW = "tensorflow"  # its main thread waits inside a TensorFlow op or function (e.g. a collective)
    LIBRARY = "library"  # somewhere else: Python code of a library, or the interpreter
    UNKNOWN = "unknown"  # no stacks could be read


@dataclass(frozen=True)
class Activity:
    """Where a task is, in one line's worth of facts.

    Attributes:
        frame: the frame to name (the innermost frame of the script's own code, else the innermost frame).
        blocked_in: the call it waits in, when known (``Queue.get``, ``a lock``, ``time.sleep``).
        collective: TensorFlow collective frames were seen (not only inferred from waiting inside TensorFlow).
        thread: the name of the thread ``frame`` is on.
    """

    doing: Doing
    frame: Frame | None = None
    blocked_in: str | None = None
    collective: bool = False
    thread: str = ""


@dataclass(frozen=True)
class TaskEvidence:
    """One task as the flight recorder saw it.

    Attributes:
        step: its last heartbeat's step (None: it sent none); finished: that heartbeat says training ended.
        exit_code: None while it runs (Popen's convention: -N when killed by signal N).
        state: the kernel's one-letter state (R, S, D, T, t, Z; "" when unknown); wchan: where it sleeps in the kernel.
        threads: its Python stacks; stacks_from: which dumper read them (py-spy, faulthandler) or why none (an error).
        output_tail: the last lines of its log.
        machine: the machine it ran on, as the rendezvous names it (a job across machines; "" on one machine).
        evidence_missing: its machine sent no evidence in time (across machines): nothing about it is known.
    """

    name: str
    pid: int | None = None
    host: str = ""
    step: int | None = None
    finished: bool = False
    heartbeat_age: float | None = None
    exit_code: int | None = None
    gone: bool = False  # the process has ended (its exit code may be unknown: looked at from outside the launcher)
    state: str = ""
    wchan: str = ""
    threads: tuple[ThreadStack, ...] = ()
    stacks_from: str = ""
    output_tail: tuple[str, ...] = ()
    log_path: str = ""
    machine: str = ""
    evidence_missing: bool = False

    @property
    def task_type(self) -> str:
        return self.name.split(":")[0]

    @property
    def ended(self) -> bool:
        return self.exit_code is not None or self.gone

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")


@dataclass(frozen=True)
class Verdict:
    """The conclusion, verdict first: ``headline`` names the task that stopped first and where; ``others`` what the
    rest were doing; ``rule`` which rule decided (for the JSON and the tests)."""

    culprit: str | None
    headline: str
    others: str = ""
    rule: str = ""
    activities: dict[str, Activity] = field(default_factory=dict)

    @property
    def lines(self) -> list[str]:
        return [line for line in (self.headline, self.others) if line]
