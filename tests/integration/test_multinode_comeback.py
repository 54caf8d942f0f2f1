"""Host-file hosts that come back: a host that went down mid-job (off the network, its processes gone, as in a
reboot) and answers ssh again is taken back after its cool-down and rejoins the job at a later round."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.multilib import DIGITS, FAST, Agent, lost_machines, task_values, wait_for_round_at_step
from tests.integration.netns import Machines, why_no_namespaces, why_no_sshd

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() or why_no_sshd(),
                                 reason=str(why_no_namespaces() or why_no_sshd()))]

SCRIPT = ["--epochs", "4", "--steps-per-epoch", "30", "--save-every", "5", "--no-tensorboard", "--step-delay", "0.1"]


def _job_processes(machines: Machines, i: int) -> list[int]:
    return [p for p in machines.pids(i) if p not in machines.sshd_pids()]


def test_a_host_that_went_down_and_answers_ssh_again_rejoins_at_a_later_round(tmp_path):
    hosts = ",".join(Machines.address(i) for i in (1, 2, 3))
    with Machines(3, ssh=True) as machines:
        driver = Agent(machines, 1, ["--hosts", hosts, "--min-nodes", "2", "-n", "1", *FAST,
                                     "--host-cooldown-range", "1:4", "--log-dir", str(tmp_path / "logs"), "--tee",
                                     "--", DIGITS, *SCRIPT, "--model-dir", str(tmp_path / "model")], tmp_path).start()
        # The newest round of 3, not round 0: under load a machine can be dropped before any fault (a missed
        # keep-alive) and come back at a later round.
        wait_for_round_at_step(driver, tmp_path / "logs", 3, 15, [driver])
        training = driver.mark()[1]
        machines.cut(3)
        machines.go_down(3)  # its agent, worker and shared memory are gone
        # Each line is looked for after the previous one, from when the round it went down in had trained: an earlier
        # loss and comeback (a missed keep-alive under load) must not answer for this one.
        lost = driver.wait_for(r"host 198\.18\.0\.3 lost: probing it over ssh again in 1s", timeout=120,
                               after=training)
        silent = driver.wait_for(r"host 198\.18\.0\.3 still does not answer ssh: next try in 2s", timeout=120,
                                 after=lost.end())
        machines.reconnect(3)
        driver.wait_for(r"host 198\.18\.0\.3 answers ssh again: starting its agent", timeout=120, after=silent.end())
        assert driver.wait(timeout=400) == 0, driver.err[-5000:]
        text = driver.out + driver.err
        sizes = [int(w) for w in re.findall(r"round \d+: (\d+) machine\(s\)", driver.err)]
        assert sizes[0] == 3 and 2 in sizes and sizes[-1] == 3, sizes  # 3, then 2 while it was down, then 3 again
        resumed = [int(s) for s in re.findall(r"resumed_from_step=(\d+) world_size=3", text)]
        assert resumed and resumed[-1] >= 15, text[-3000:]
        assert set(task_values(text, "train_steps").values()) == {"120"}
        assert "198.18.0.3" in lost_machines(driver.err), driver.err[-3000:]
    assert machines.existing() == []


SLEEPER = """import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
print("task up", os.environ["TFDIST_TASK_INDEX"], flush=True)
time.sleep(300)
"""


def test_a_discovery_script_adds_and_drops_hosts_while_the_job_runs(tmp_path):
    script, listing, discover = tmp_path / "sleeper.py", tmp_path / "hosts.txt", tmp_path / "discover.sh"
    script.write_text(SLEEPER)
    listing.write_text("198.18.0.1\n198.18.0.2\n")
    discover.write_text(f"#!/bin/sh\ncat {listing}\n")
    discover.chmod(0o755)
    with Machines(3, ssh=True) as machines:
        driver = Agent(machines, 1, ["--host-discovery-script", str(discover), "--min-nodes", "1", "-n", "1", *FAST,
                                     "--", str(script)], tmp_path).start()
        driver.wait_for(r"round 0: 2 machine\(s\)", timeout=120)
        listing.write_text("198.18.0.1\n198.18.0.2\n198.18.0.3\n")
        driver.wait_for(r"host discovery: 198\.18\.0\.3 added", timeout=60)
        driver.wait_for(r"198\.18\.0\.3 joined", timeout=60)
        listing.write_text("198.18.0.1\n198.18.0.3   slots=1\n")
        dropped = driver.wait_for(r"host discovery: 198\.18\.0\.2 no longer listed: stopping its agent", timeout=60)
        lost = driver.wait_for(r"lost node \d+: its agent closed the connection|lost 198\.18\.0\.2", timeout=60,
                               after=dropped.end())
        # The round goes on without it: 198.18.0.1 and 198.18.0.3 form the next one (a round of 2 before the drop,
        # after a missed keep-alive under load, does not count).
        driver.wait_for(r"round [1-9]\d*: 2 machine\(s\)", timeout=120, after=lost.end())
        deadline = time.monotonic() + 30  # its agent and task are gone
        while _job_processes(machines, 2):
            assert time.monotonic() < deadline, _job_processes(machines, 2)
            time.sleep(0.2)
        os.kill(driver.proc.pid, signal.SIGINT)
        assert driver.wait(60) == 130, driver.err[-3000:]
    assert machines.existing() == []


def test_a_discovered_host_with_other_versions_gets_no_agent_and_the_job_goes_on(tmp_path):
    # Machine 3's sshd sees another tfdist version (a private mount): the preflight would have refused it; added by
    # the discovery script while the job runs, it is checked the same way and named, and no agent starts there.
    script, listing, discover = tmp_path / "sleeper.py", tmp_path / "hosts.txt", tmp_path / "discover.sh"
    script.write_text(SLEEPER)
    listing.write_text("198.18.0.1\n198.18.0.2\n")
    discover.write_text(f"#!/bin/sh\ncat {listing}\n")
    discover.chmod(0o755)
    other = tmp_path / "init.py"
    original = (REPO_ROOT / "src" / "tfdist" / "__init__.py").read_text()
    other.write_text(re.sub(r'__version__ = "[^"]+"', '__version__ = "0.0.9"', original))
    mounts = {3: {str(REPO_ROOT / "src" / "tfdist" / "__init__.py"): str(other)}}
    with Machines(3, ssh=True, sshd_mounts=mounts) as machines:
        driver = Agent(machines, 1, ["--host-discovery-script", str(discover), "--min-nodes", "1", "-n", "1", *FAST,
                                     "--", str(script)], tmp_path).start()
        driver.wait_for(r"round 0: 2 machine\(s\)", timeout=120)
        listing.write_text("198.18.0.1\n198.18.0.2\n198.18.0.3\n")
        driver.wait_for(r"host discovery: 198\.18\.0\.3 added", timeout=60)
        refused = driver.wait_for(r"host discovery: 198\.18\.0\.3 gets no agent: its versions differ from the job's "
                                  r"hosts': tfdist 0\.0\.9 \(the job's: [\d.]+\)", timeout=60)
        # Later discovery runs still list it: not said again, not started (its probe is not retried before 60 s).
        later = driver.mark()[1]
        time.sleep(1.0)  # its probe's process ends just after its report is read
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            assert _job_processes(machines, 3) == [], "an agent started on the refused host"
            time.sleep(0.5)
        assert "198.18.0.3 joined" not in driver.err and driver.err.count("gets no agent") == 1, driver.err[-2000:]
        assert driver.err[later:].count("host discovery: 198.18.0.3") == 0 and refused.end() <= later
        assert driver.proc.poll() is None  # the job goes on with its two machines
        os.kill(driver.proc.pid, signal.SIGINT)
        assert driver.wait(60) == 130, driver.err[-3000:]
    assert machines.existing() == []
