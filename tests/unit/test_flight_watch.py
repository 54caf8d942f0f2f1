"""The cheap watch on tasks without heartbeats: quiet means no CPU time (over a window) and no output. Real
processes, a synthetic clock (the watch takes ``now``), so nothing here depends on how fast the machine is."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tfdist.launch.flight import procfs
from tfdist.launch.flight.watch import WINDOW, QuietWatch, is_busy


@pytest.fixture
def process():
    started = []

    def start(code: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_is_busy():
    assert is_busy(0.5, 5.0) and not is_busy(0.1, 5.0) and not is_busy(1.0, 0.0)


def test_a_sleeping_task_without_output_is_quiet_and_output_wakes_it(process, tmp_path):
    proc = process("import time; time.sleep(60)")
    log = tmp_path / "worker-0.log"
    log.write_text("")
    watch = QuietWatch()
    assert watch.observe(proc.pid, str(log), now=100.0) == 0.0
    assert watch.observe(proc.pid, str(log), now=100.2) == pytest.approx(0.2), "between samples: no new reads"
    assert watch.observe(proc.pid, str(log), now=100.0 + WINDOW + 1) == pytest.approx(WINDOW + 1)
    assert watch.observe(proc.pid, str(log), now=100.0 + 3 * WINDOW) == pytest.approx(3 * WINDOW)
    log.write_text("a line\n")
    assert watch.observe(proc.pid, str(log), now=100.0 + 3 * WINDOW + 1) == 0.0


def test_a_task_using_cpu_is_not_quiet(process, tmp_path):
    proc = process("while True: pass")
    watch = QuietWatch()
    first = procfs.read(proc.pid).cpu_seconds
    assert first is not None
    watch.observe(proc.pid, str(tmp_path / "none.log"), now=0.0)
    deadline = time.monotonic() + 60
    while procfs.read(proc.pid).cpu_seconds - first < 0.6 and time.monotonic() < deadline:  # > 5% of a 6 s window
        time.sleep(0.05)
    assert watch.observe(proc.pid, str(tmp_path / "none.log"), now=WINDOW + 1) == 0.0
    assert procfs.read(proc.pid).state == "R"
