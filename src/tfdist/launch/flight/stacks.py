"""Reading another process's Python stacks: py-spy when it is installed, else the task's own faulthandler.

Measured on this project's 2-core test machine (py-spy 0.4.3, pystack 1.7.2, faulthandler of Python 3.11; a tf-keras
MultiWorkerMirroredStrategy task of TensorFlow 2.21; see docs/flight.md):

- ``py-spy dump``: 0.04 s per task; JSON output; a stopped (SIGSTOP) task is read with ``--nonblocking`` (plain
  ``dump`` fails: it cannot suspend a stopped process); needs the right to ptrace the task (the launcher is its
  parent, which Yama's default scope 1 allows; a container may need CAP_SYS_PTRACE). ``--native`` took 4.1 s per
  task and showed nothing about the collective on the main thread.
- ``pystack remote``: 0.19 s (small script) to 0.7 s (TensorFlow task); reads a stopped task; text output only;
  ``--native-all`` (which does show ``tensorflow::RingReducer`` in TensorFlow's ``collective_ops`` threads) took 10 s
  per task and held the task stopped that long: long enough that TensorFlow's coordination service declared it dead
  and aborted its peers' collectives. A flight recorder must not change what it records.
- faulthandler (registered by the task, :mod:`tfdist.protocol.stackdump`): nothing to install, but a stopped task
  cannot answer, and only a task that registered may be sent the signal.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from tfdist.launch.flight import procfs
from tfdist.protocol import stackdump
from tfdist.protocol.stackdump import Frame, ThreadStack

PY_SPY = "py-spy"
FAULTHANDLER = "faulthandler"
NO_STACKS = "none"  # collect everything else (a benchmark's baseline)
DUMPERS = ("auto", PY_SPY, FAULTHANDLER, NO_STACKS)
_MAX_OUTPUT = 8 << 20


def find_py_spy() -> str | None:
    """The py-spy program: on PATH, else beside this interpreter (a virtual environment's bin/)."""
    found = shutil.which(PY_SPY)
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), PY_SPY)
    return beside if os.access(beside, os.X_OK) else None


def parse_py_spy(text: str, pid: int | None = None) -> list[ThreadStack]:
    """Threads of ``py-spy dump --json`` (frames innermost first, ``active: false`` for a waiting thread).

    Raises:
        ValueError: not py-spy's JSON.
    """
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("py-spy printed no list of threads")
    threads = []
    for raw in data:
        tid = raw.get("os_thread_id")
        frames = tuple(Frame(function=str(f.get("name", "?")), file=str(f.get("filename", "?")),
                             line=int(f.get("line") or 0)) for f in raw.get("frames") or ())
        active = raw.get("active")
        threads.append(ThreadStack(name=str(raw.get("thread_name") or f"thread {tid}"), frames=frames,
                                   idle=None if active is None else not active,
                                   wchan=procfs.thread_wchan(pid, tid) if pid and isinstance(tid, int) else ""))
    return threads


def with_py_spy(program: str, pid: int, *, stopped: bool, timeout: float) -> tuple[list[ThreadStack], str]:
    """Stacks read by py-spy, and "" or why none. A stopped task is read without suspending it (``--nonblocking``);
    a running one is suspended for the read (a consistent stack), and read without suspending if that fails."""
    tries = [["--nonblocking"]] if stopped else [[], ["--nonblocking"]]
    why = ""
    for extra in tries:
        try:
            done = subprocess.run([program, "dump", "--json", *extra, "--pid", str(pid)], capture_output=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            why = f"py-spy took over {timeout:g}s"
            continue
        except OSError as error:
            return [], f"cannot run py-spy: {error.strerror or error}"
        if done.returncode == 0:
            try:
                return parse_py_spy(done.stdout[:_MAX_OUTPUT].decode("utf-8", "replace"), pid), ""
            except (ValueError, TypeError, AttributeError) as bad:
                why = f"py-spy printed something unreadable ({bad})"
                continue
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = "py-spy: " + (next((ln for ln in lines if ln.startswith("Error")), lines[0]) if lines else
                            f"exit code {done.returncode}")
    return [], why


def holds_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open: proof that it registered the handler itself, which a header in a
    file (anyone could write one naming any pid) is not."""
    try:
        target = os.path.realpath(path)
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def with_faulthandler(pid: int, stacks_file: str, *, timeout: float) -> tuple[list[ThreadStack], str]:
    """Stacks written by the task's own faulthandler on :data:`~tfdist.protocol.stackdump.DUMP_SIGNAL`, and "" or
    why none. Only a pid that registered is signalled (for any other the signal's default action is to end it)."""
    if stackdump.registered_pid(stacks_file) != pid or not holds_open(pid, stacks_file):
        return [], "the task registered no faulthandler (tfdist's bootstrap does; or install py-spy)"
    if procfs.read(pid).state in ("T", "t"):
        return [], "the task is stopped: faulthandler runs inside it (install py-spy to read a stopped task)"
    try:
        offset = os.path.getsize(stacks_file)
        os.kill(pid, stackdump.DUMP_SIGNAL)
    except OSError as error:
        return [], f"cannot signal the task: {error.strerror or error}"
    deadline = time.monotonic() + timeout
    size = offset
    while time.monotonic() < deadline:  # written from a signal handler: wait until it stops growing
        time.sleep(0.05)
        try:
            grown = os.path.getsize(stacks_file)
        except OSError:
            break
        if grown > offset and grown == size:
            return stackdump.parse_faulthandler(stackdump.read_from(stacks_file, offset)), ""
        size = grown
    text = stackdump.read_from(stacks_file, offset)
    if text:
        return stackdump.parse_faulthandler(text), ""
    return [], f"the task wrote no stacks within {timeout:g}s (it may be stuck with signals blocked)"


def read_stacks(pid: int, stacks_file: str, *, stopped: bool, dumper: str = "auto",
                timeout: float = 4.0) -> tuple[list[ThreadStack], str]:
    """A task's stacks and where they came from ("py-spy", "faulthandler"), or no stacks and why."""
    if dumper == NO_STACKS:
        return [], "stacks not read"
    program = find_py_spy() if dumper in ("auto", PY_SPY) else None
    reasons = []
    if program is not None:
        threads, why = with_py_spy(program, pid, stopped=stopped, timeout=timeout)
        if threads:
            return threads, PY_SPY
        reasons.append(why)
    elif dumper == PY_SPY:
        reasons.append("py-spy is not installed")
    if dumper in ("auto", FAULTHANDLER):
        threads, why = with_faulthandler(pid, stacks_file, timeout=timeout)
        if threads:
            return threads, FAULTHANDLER
        reasons.append(why)
    return [], "; ".join(r for r in reasons if r) or "no dumper"



