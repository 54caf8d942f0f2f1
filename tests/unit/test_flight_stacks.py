"""Reading real processes' stacks: py-spy (also of a stopped process), the task's own faulthandler as the fallback,
and the safety rule that a process which registered no handler is never sent the signal."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tfdist.launch.flight import collect, procfs, report, stacks
from tfdist.launch.flight.recorder import record
from tfdist.protocol import stackdump

VICTIM = textwrap.dedent("""
    import os, queue, sys, threading, time
    sys.path.insert(0, {src!r})
    if {install}:
        from tfdist.protocol import stackdump
        assert stackdump.install()
    EMPTY = queue.Queue()

    def load_batch():
        return EMPTY.get()

    loader = threading.Thread(target=load_batch, name="loader", daemon=True)
    loader.start()

    def waiting_in_get():  # "ready" only once the loader really waits (a loaded machine may not have run it yet)
        frame = sys._current_frames().get(loader.ident)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        return "get" in names and "load_batch" in names

    while not waiting_in_get():
        time.sleep(0.01)
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def victim(tmp_path):
    """Start a Python process with a thread blocked in Queue.get; stop it whatever happens."""
    started = []

    def start(install: bool) -> tuple[subprocess.Popen, str]:
        heartbeat = str(tmp_path / "worker-1.heartbeat")
        script = tmp_path / "victim.py"
        script.write_text(VICTIM.format(src=str(Path(stackdump.__file__).parents[2]), install=install))
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "TFDIST_HEARTBEAT_FILE": heartbeat})
        started.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc, stackdump.stacks_path(heartbeat)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()


def _until_sleeping(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while procfs.read(pid).state != "S" and time.monotonic() < deadline:
        time.sleep(0.05)


def _loader(threads):
    return next(t for t in threads if any(f.function == "load_batch" for f in t.frames))


def test_stacks_path_sits_next_to_the_heartbeat():
    assert stackdump.stacks_path("/r/attempt-0/worker-1.heartbeat") == "/r/attempt-0/worker-1.stacks"


def test_faulthandler_fallback_reads_every_thread(victim):
    proc, path = victim(install=True)
    assert stackdump.registered_pid(path) == proc.pid
    threads, source = stacks.read_stacks(proc.pid, path, stopped=False, dumper="faulthandler")
    assert source == "faulthandler", threads
    loader = _loader(threads)
    assert [f.function for f in loader.frames[:3]] == ["wait", "get", "load_batch"]
    assert loader.frames[2].where == "victim.py:10"
    assert proc.poll() is None, "the dump must not end the task"


def test_a_process_that_registered_nothing_is_never_signalled(victim):
    proc, path = victim(install=False)
    threads, why = stacks.read_stacks(proc.pid, path, stopped=False, dumper="faulthandler")
    assert threads == [] and "registered no faulthandler" in why
    time.sleep(0.2)
    assert proc.poll() is None, "SIGUSR2's default action would have ended it"


def test_a_header_naming_a_pid_is_not_enough_to_be_signalled(victim, tmp_path):
    """Anyone can write a stacks file naming any pid; only a process that holds the file open registered it."""
    proc, _ = victim(install=False)
    forged = tmp_path / "forged.stacks"
    forged.write_text(stackdump.HEADER.format(pid=proc.pid, signal=stackdump.DUMP_SIGNAL.name) + "\n")
    assert stackdump.registered_pid(str(forged)) == proc.pid
    threads, why = stacks.read_stacks(proc.pid, str(forged), stopped=False, dumper="faulthandler")
    assert threads == [] and "registered no faulthandler" in why
    time.sleep(0.2)
    assert proc.poll() is None


def test_faulthandler_cannot_read_a_stopped_task_and_says_so(victim):
    proc, path = victim(install=True)
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while procfs.read(proc.pid).state != "T" and time.monotonic() < deadline:
        time.sleep(0.02)
    threads, why = stacks.read_stacks(proc.pid, path, stopped=True, dumper="faulthandler")
    assert threads == [] and "stopped" in why


def test_py_spy_is_installed():
    assert stacks.find_py_spy() is not None, "py-spy is a dependency (pyproject.toml): reinstall tfdist"


@pytest.mark.parametrize("stop", [False, True], ids=["running", "sigstopped"])
def test_py_spy_reads_a_running_and_a_stopped_task(victim, stop):
    proc, path = victim(install=False)
    if stop:
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while procfs.read(proc.pid).state != "T" and time.monotonic() < deadline:
            time.sleep(0.02)
    threads, source = stacks.read_stacks(proc.pid, path, stopped=stop, dumper="py-spy")
    assert source == "py-spy", threads
    loader = _loader(threads)
    assert loader.name == "loader" and loader.idle is True
    assert [f.function for f in loader.frames[1:3]] == ["Queue.get", "load_batch"]
    if not stop:  # py-spy's detach wakes the sleep, which the kernel restarts: R for a moment, S again after it
        _until_sleeping(proc.pid)
    assert procfs.read(proc.pid).state == ("T" if stop else "S"), "the dump leaves the task as it was"


def test_parse_faulthandler_text():
    text = ('Thread 0x00007f05becdb6c0 (most recent call first):\n'
            '  File "/job/train.py", line 4 in load_batch\n'
            '  File "/usr/lib/python3.11/threading.py", line 982 in run\n\n'
            'Current thread 0x00007f05bf81cb80 (most recent call first):\n'
            '  File "/job/train.py", line 9 in <module>\n')
    threads = stackdump.parse_faulthandler(text)
    assert [t.name for t in threads] == ["0x00007f05becdb6c0", "current 0x00007f05bf81cb80"]
    assert threads[0].frames[0] == stackdump.Frame("load_batch", "/job/train.py", 4)
    assert threads[1].frames[0].where == "train.py:9"


def test_parse_py_spy_refuses_what_is_not_its_json():
    with pytest.raises(ValueError):
        stacks.parse_py_spy('{"not": "a list"}')


def test_recorder_writes_a_private_text_and_json_report(victim, tmp_path):
    proc, _ = victim(install=False)
    log = tmp_path / "worker-0.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    (tmp_path / "worker-0.heartbeat").write_text('{"v":1,"step":7,"time":1.0,"state":"training"}')
    target = collect.Target("worker:0", proc.pid, str(tmp_path / "worker-0.heartbeat"), str(log))
    _until_sleeping(proc.pid)  # the state read below is "S" once the victim sits in its sleep, not while it gets there
    result, path = record([target], run_id="r1", attempt=0, reason=report.HANG, folder=str(tmp_path))
    assert path == str(tmp_path / "hang-attempt-0.txt")
    assert os.stat(path).st_mode & 0o777 == 0o600
    data = json.loads((tmp_path / "hang-attempt-0.json").read_text())
    assert (data["schema"], data["schema_version"]) == ("tfdist.hang", 1)
    assert data["tasks"][0]["step"] == 7 and data["tasks"][0]["output_tail"][-1] == "line 49"
    assert data["tasks"][0]["state"] == "S" and data["tasks"][0]["stacks_from"] == "py-spy"
    text = Path(path).read_text()
    assert text.splitlines()[1].startswith("verdict: ") and "steps (last heartbeat): worker:0 7" in text
    assert "load_batch" in text and "| line 49" in text
    assert report.latest(str(tmp_path)) == path
