"""Starting task processes, pumping their output, and stopping them. No restart policy here (see supervisor.py).
Nothing here prints: output lines and notices go to the :class:`~tfdist.launch.seams.OutputSink` the caller passes.

Each task runs in its own session and process group, so one ``killpg`` reaches everything it started. A task also
asks the kernel to kill it when the launcher dies (``PR_SET_PDEATHSIG``), so not even ``kill -9`` of the launcher
leaves a task running.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Callable, Mapping

from tfdist.launch.process import libc
from tfdist.launch.seams import OutputSink
from tfdist.protocol import TaskPlan
from tfdist.protocol.variables import without_launcher_secrets

_PR_SET_PDEATHSIG = 1
_prctl = libc.prctl  # resolved before any fork, so the child only makes the call


def _die_with_launcher(launcher_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
            os._exit(1)

    return preexec


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
        return self.plan.name

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


class _Route:
    """Where a task's output goes. A spare's output is held back until it becomes a task and gets a name.

    Writing the log can fail (a full disk under --log-dir): the pump must go on draining the task's pipe anyway, or
    the task blocks on its next write and the job hangs. The output is then dropped from the log (the console and the
    stderr tail still get it) and the failure reported once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[bytes, bool]] = []
        self._target: tuple[str, IO[bytes], OutputSink, deque[str]] | None = None
        self.log_error: OSError | None = None

    def attach(self, prefix: str, log: IO[bytes], console: OutputSink, tail: deque[str]) -> None:
        with self._lock:
            self._target = (prefix, log, console, tail)
            pending, self._pending = self._pending, []
            for raw, to_stderr in pending:
                self._emit(raw, to_stderr)

    def write(self, raw: bytes, to_stderr: bool) -> None:
        with self._lock:
            if self._target is None:
                self._pending.append((raw, to_stderr))
                del self._pending[:-200]  # a spare's start-up chatter: keep only the end
            else:
                self._emit(raw, to_stderr)

    def _emit(self, raw: bytes, to_stderr: bool) -> None:
        assert self._target is not None  # callers hold the lock and checked
        prefix, log, console, tail = self._target
        if self.log_error is None:
            try:
                log.write(raw)
                log.flush()
            except OSError as error:
                self.log_error = error
                console.notice(f"tfdist: cannot write the log of {prefix.strip('[]')} ({error.strerror or error}): "
                               "its output is dropped from the log from now on")
        line = raw.decode("utf-8", errors="replace")
        if to_stderr:
            tail.append(line)
        # A segment ending in \r (a progress bar's redraw) is passed on as it is: the next one, prefixed too, writes
        # over it on a terminal, as the task's own output would.
        console.write(prefix, line if line.endswith(("\n", "\r")) else line + "\n", to_stderr=to_stderr)

    def close(self) -> None:
        with self._lock:
            if self._target is not None:
                try:
                    self._target[1].close()
                except OSError:  # the last flush hit the same full disk
                    pass


_MAX_SEGMENT = 1 << 16  # a longer run without a line end is passed on in pieces


def split_segments(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete segments of ``buffer`` (each ending in ``\n``, ``\r\n`` or ``\r``) and what is left of it."""
    segments: list[bytes] = []
    start, size = 0, len(buffer)
    newline, carriage = buffer.find(b"\n"), buffer.find(b"\r")
    while newline >= 0 or carriage >= 0:
        if carriage >= 0 and (newline < 0 or carriage < newline):
            end = carriage + 2 if buffer[carriage + 1:carriage + 2] == b"\n" else carriage + 1
        else:
            end = newline + 1
        segments.append(buffer[start:end])
        start = end
        if 0 <= newline < start:
            newline = buffer.find(b"\n", start)
        if 0 <= carriage < start:
            carriage = buffer.find(b"\r", start)
    rest = buffer[start:size]
    if len(rest) >= _MAX_SEGMENT:
        segments.append(rest)
        rest = b""
    return segments, rest


def _pump(stream: IO[bytes], route: _Route, to_stderr: bool) -> None:
    """Relay a task's output segment by segment: a line, or a progress bar's \r-ended redraw, as soon as it ends."""
    read = getattr(stream, "read1", stream.read)
    rest = b""
    while True:
        chunk = read(1 << 16)
        if not chunk:
            break
        segments, rest = split_segments(rest + chunk)
        for raw in segments:
            try:
                route.write(raw, to_stderr)
            except Exception:  # noqa: BLE001 - whatever happens to the output, keep draining the pipe
                pass
    if rest:
        try:
            route.write(rest, to_stderr)
        except Exception:  # noqa: BLE001
            pass
    stream.close()


def _start_pumps(popen: subprocess.Popen[bytes], route: _Route, name: str) -> list[threading.Thread]:
    assert popen.stdout is not None and popen.stderr is not None  # both are PIPE
    pumps = [threading.Thread(target=_pump, args=(stream, route, to_err), daemon=True, name=f"pump-{name}")
             for stream, to_err in ((popen.stdout, False), (popen.stderr, True))]
    for pump in pumps:
        pump.start()
    threading.Thread(target=lambda: ([p.join() for p in pumps], route.close()), daemon=True).start()
    return pumps


def _popen(command: list[str], env: Mapping[str, str], *, stdin: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, env=dict(env), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=_die_with_launcher(os.getpid()),
    )


def spawn(plan: TaskPlan, *, attempt: int, base_env: Mapping[str, str], log_path: str,
          console: OutputSink) -> TaskProcess:
    """Start one task with ``base_env`` (the launcher's credentials left out) plus its own additions, its output
    prefixed and logged."""
    env = without_launcher_secrets(base_env)
    env.update(plan.environment())
    log = open(log_path, "ab")  # noqa: SIM115 - closed by the route when the task's pipes close
    try:
        popen = _popen(plan.command.argv(), env, stdin=subprocess.DEVNULL)
    except BaseException:
        log.close()
        raise
    proc = TaskProcess(plan=plan, attempt=attempt, popen=popen, log_path=log_path, started_at=time.monotonic())
    route = _Route()
    route.attach(f"[{plan.name}]", log, console, proc.stderr_tail)
    proc.pumps = _start_pumps(popen, route, plan.name)
    return proc


@dataclass
class Spare:
    """A warm spare (see ``tfdist.launch.process.spare_process``) waiting for its task."""

    popen: subprocess.Popen[bytes]
    route: _Route
    pumps: list[threading.Thread]

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def discard(self) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.popen.wait()


def spawn_spare(python: str, env: Mapping[str, str], preload: list[str] | None = None) -> Spare:
    """Start a spare that pre-imports TensorFlow and ``preload``, in its own session, dying with the launcher like a
    task."""
    popen = _popen([python, "-u", "-m", "tfdist.launch.process.spare_process"], without_launcher_secrets(env),
                   stdin=subprocess.PIPE)
    assert popen.stdin is not None
    try:
        popen.stdin.write((json.dumps({"preload": list(preload or [])}) + "\n").encode())
        popen.stdin.flush()
    except OSError:
        pass  # it died at once: activate() will notice
    route = _Route()
    return Spare(popen=popen, route=route, pumps=_start_pumps(popen, route, f"spare-{popen.pid}"))


def activate(spare: Spare, plan: TaskPlan, *, attempt: int, log_path: str, console: OutputSink) -> TaskProcess:
    """Turn ``spare`` into ``plan``'s task: send it the task's environment and the script's arguments.

    Raises:
        OSError: the spare died meanwhile (the caller starts the task cold instead).
    """
    if not spare.alive:
        raise BrokenPipeError("spare exited")
    log = open(log_path, "ab")  # noqa: SIM115 - closed by the route when the task's pipes close
    order = {"env": plan.environment(), "argv": plan.command.script_argv()}
    proc = TaskProcess(plan=plan, attempt=attempt, popen=spare.popen, log_path=log_path,
                       started_at=time.monotonic(), pumps=spare.pumps)
    spare.route.attach(f"[{plan.name}]", log, console, proc.stderr_tail)
    assert spare.popen.stdin is not None  # spawn_spare opens it
    spare.popen.stdin.write((json.dumps(order) + "\n").encode())
    spare.popen.stdin.close()
    return proc


def stop_all(procs: list[TaskProcess], grace_period: float, *, first_signal: int = signal.SIGTERM,
             kill_now: Callable[[], bool] = lambda: False, sweep: Callable[[], object] | None = None) -> None:
    """SIGTERM (or ``first_signal``) to every live task's process group, wait up to ``grace_period`` (cut short when
    ``kill_now()`` turns true: a second Ctrl-C), then SIGKILL.

    Returns when every task has exited and its output has been read. Raises nothing, so that a signal arriving
    meanwhile cannot leave it half-way.
    """
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        proc.signal_group(first_signal)
    deadline = time.monotonic() + grace_period
    while live and time.monotonic() < deadline and not kill_now():
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
    if sweep is not None:
        sweep()  # descendants that left the group hold the pipes open too: the pumps end only once they are gone
    for proc in procs:
        for pump in proc.pumps:
            pump.join(timeout=2)
