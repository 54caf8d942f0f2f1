"""Endpoint rules seen from the command line: port ranges checked before anything starts, the warning for a
non-loopback bind."""
from __future__ import annotations

import socket
import subprocess
import sys

from tests.conftest import REPO_ROOT
from tfdist.cli.main import main

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


def test_metrics_ports_past_65535_are_refused_up_front(capsys, tmp_path):
    assert main(["launch", "-n", "2", "--metrics-port", "65535", FAKE, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--metrics-port" in err and "65535" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists(), "nothing may start"


def test_launcher_metrics_on_a_non_loopback_address_warn(tmp_path):
    with socket.socket() as probe:  # a port free on every address right now
        probe.bind(("0.0.0.0", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "tfdist", "launch", "-n", "1", "--launcher-metrics-port", str(port),
                           "--metrics-host", "0.0.0.0", FAKE, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reachable from other machines" in done.stderr
