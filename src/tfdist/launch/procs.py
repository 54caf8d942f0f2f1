"""Starting task processes, pumping their output, and stopping them. No restart policy here (see supervisor.py).

Each task runs in its own session and process group, so one ``killpg`` reaches everything it started. A task also
asks the kernel to kill it when the launcher dies (``PR_SET_PDEATHSIG``), so not even ``kill -9`` of the launcher
leaves a task running.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Callable, Mapping

from tfdist.launch.taskenv import TaskPlan

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_prctl = _libc.prctl  # resolved before any fork, so the child only makes the call


def _die_with_launcher(launcher_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
            os._exit(1)

    return preexec


class Console:
    """Serialises prefixed lines from many tasks onto the launcher's stdout/stderr."""

    def __init__(self, enabled: bool = True, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.enabled = enabled
        self.out = out
        self.err = err
        self._lock = threading.Lock()

    def write(self, prefix: str, line: str, *, to_stderr: bool) -> None:
        if not self.enabled:
            return
        stream = (self.err or sys.stderr) if to_stderr else (self.out or sys.stdout)
        with self._lock:
            try:
                stream.write(f"{prefix} {line}")
                stream.flush()
            except (BrokenPipeError, ValueError):
                self.enabled = False


@dataclass
class TaskProcess:
    """A running (or finished) task of one attempt."""

    plan: TaskPlan
    attempt: int
    popen: subprocess.Popen[bytes]
    log_path: str
    started_at: float
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=60))
    exit_code: int | None = None
    ended_at: float | None = None
    pumps: list[threading.Thread] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def name(self) -> str:
        return str(self.plan.task)

    def poll(self) -> int | None:
        if self.exit_code is None:
            code = self.popen.poll()
            if code is not None:
                self.exit_code = code
                self.ended_at = time.monotonic()
        return self.exit_code

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _pump(stream: IO[bytes], prefix: str, log: IO[bytes], log_lock: threading.Lock, console: Console,
          to_stderr: bool, tail: deque[str] | None) -> None:
    for raw in iter(stream.readline, b""):
        with log_lock:
            log.write(raw)
            log.flush()
        line = raw.decode("utf-8", errors="replace")
        if tail is not None:
            tail.append(line)
        console.write(prefix, line if line.endswith("\n") else line + "\n", to_stderr=to_stderr)
    stream.close()


def spawn(plan: TaskPlan, *, attempt: int, base_env: Mapping[str, str], log_path: str,
          console: Console) -> TaskProcess:
    """Start one task with ``base_env`` plus its own additions, its output prefixed and logged."""
    env = dict(base_env)
    env.update(plan.env)
    log = open(log_path, "ab")  # noqa: SIM115 - closed by the last pump
    popen = subprocess.Popen(
        list(plan.command), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=_die_with_launcher(os.getpid()),
    )
    proc = TaskProcess(plan=plan, attempt=attempt, popen=popen, log_path=log_path, started_at=time.monotonic())
    prefix = f"[{plan.task}]"
    lock = threading.Lock()
    assert popen.stdout is not None and popen.stderr is not None  # both are PIPE above
    for stream, to_err, tail in ((popen.stdout, False, None), (popen.stderr, True, proc.stderr_tail)):
        pump = threading.Thread(target=_pump, args=(stream, prefix, log, lock, console, to_err, tail), daemon=True,
                                name=f"pump-{plan.task}")
        pump.start()
        proc.pumps.append(pump)
    closer = threading.Thread(target=lambda: ([p.join() for p in proc.pumps], log.close()), daemon=True)
    closer.start()
    return proc


def stop_all(procs: list[TaskProcess], grace_period: float, *, first_signal: int = signal.SIGTERM) -> None:
    """SIGTERM (or ``first_signal``) to every live task's process group, wait up to ``grace_period``, then SIGKILL.

    Returns when every task has exited and its output has been read.
    """
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        proc.signal_group(first_signal)
    deadline = time.monotonic() + grace_period
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [p for p in live if p.poll() is None]
    for proc in live:
        proc.signal_group(signal.SIGKILL)
    for proc in procs:
        try:
            proc.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        proc.poll()
        # Leftovers in the group (a task's own children) die with it.
        proc.signal_group(signal.SIGKILL)
        for pump in proc.pumps:
            pump.join(timeout=2)
