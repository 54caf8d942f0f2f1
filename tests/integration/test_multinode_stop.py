"""The host-file launcher stops everything on every host: when it is interrupted (the tasks get SIGTERM, exit 130)
and when it is killed outright (the agents see their ssh connection close). A small script stands in for
training, since what is checked is the process tree on every machine."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tests.integration.multilib import FAST, Agent
from tests.integration.netns import Machines, why_no_namespaces, why_no_sshd

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(why_no_namespaces() or why_no_sshd(),
                                 reason=str(why_no_namespaces() or why_no_sshd()))]

SCRIPT = """import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
print("task up", os.environ["TFDIST_TASK_INDEX"], flush=True)
time.sleep(120)
"""


def _job_processes(machines: Machines) -> list[int]:
    return [p for p in machines.pids() if p not in machines.sshd_pids()]


def _wait_until_clean(machines: Machines, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _job_processes(machines):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("how", ["interrupted", "killed"])
def test_stopping_the_launcher_stops_every_host(tmp_path, how):
    script = tmp_path / "sleeper.py"
    script.write_text(SCRIPT)
    with Machines(2, ssh=True) as machines:
        driver = Agent(machines, 1, ["--hosts", "198.18.0.1,198.18.0.2", "-n", "2", *FAST, "--", str(script)],
                       tmp_path).start()
        for index in range(4):
            driver.wait_for(rf"task up {index}", stream="out", timeout=60)
        assert len(_job_processes(machines)) > 4  # the driver, 2 ssh clients, 2 agents, 4 tasks
        if how == "interrupted":
            os.kill(driver.proc.pid, signal.SIGINT)
            assert driver.wait(60) == 130
            assert "stopped by a signal" in driver.err
            # Said at once, as by the one-machine launcher (a first Ctrl-C used to be silent across machines).
            assert driver.err.count("tfdist: got SIGINT: stopping all tasks") == 1, driver.err
        else:
            os.kill(driver.proc.pid, signal.SIGKILL)
            driver.wait(10)
        assert _wait_until_clean(machines, 30), _job_processes(machines)
    assert machines.existing() == []
