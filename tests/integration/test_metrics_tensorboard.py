"""``tfdist tensorboard`` starts a real TensorBoard, prints its address, and takes it down when stopped."""
from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.tf]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _read_line_with(process: subprocess.Popen[str], needle: str, timeout: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not selector.select(timeout=1.0):
            continue
        line = process.stdout.readline()
        if not line:
            break
        if needle in line:
            return line.strip()
    raise AssertionError(f"no line with {needle!r} within {timeout}s (exit status {process.poll()})")


def test_tensorboard_serves_the_logdir_and_stops_with_us(tmp_path: Path) -> None:
    import psutil

    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "tfdist", "tensorboard", "--logdir", str(tmp_path),
                                "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, start_new_session=True)
    children: list[psutil.Process] = []
    try:
        line = _read_line_with(process, "TensorBoard: http", 150)
        assert line == f"TensorBoard: http://127.0.0.1:{port}/"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/logdir", timeout=10) as response:
            assert response.status == 200 and str(tmp_path) in response.read().decode()
        children = psutil.Process(process.pid).children(recursive=True)
        assert children, "TensorBoard runs as a child process"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert alive == []
