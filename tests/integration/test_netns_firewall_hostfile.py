"""--firewall in host-file mode, across emulated machines with sshd (netns.py): ``tfdist launch --hosts A,B
--firewall`` runs stand-in tasks that listen on their TF_CONFIG and metrics ports on every interface, as TensorFlow
does (firewall_lib.py says why a stand-in). While the job runs each job machine reaches the other's ports and a third
machine, outside the job, reaches none; after the job ends (success, failure, SIGTERM to the launcher, the launcher
or one agent killed with SIGKILL) no machine holds a tfdist table."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tests.integration.firewall_lib import (RELAXED, STAND_IN, TENSORFLOW_TASK, reaches_soon, shut_out, task_addresses,
                                           tfdist_tables, wait_until_no_table)
from tests.integration.multilib import FAST, Agent
from tests.integration.netns import Machines, proc_words, why_no_namespaces, why_no_sshd
from tfdist.launch.firewall.nft import find_nft

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(why_no_namespaces() or why_no_sshd(),
                                 reason=str(why_no_namespaces() or why_no_sshd())),
              pytest.mark.skipif(find_nft() is None,
                                 reason="nft is not installed (.ci/system-deps.sh installs nftables)")]

PORT, METRICS = 23456, 24100  # inside the machines' own namespaces: nothing else listens there
STRANGER = 3
TASKS = ["worker-0", "worker-1"]


def _start(machines: Machines, tmp_path, task: str = STAND_IN,
           seconds: float = 120) -> tuple[Agent, dict[str, tuple[str, int, int]]]:
    script = tmp_path / "task.py"
    script.write_text(task)
    driver = Agent(machines, 1, ["--hosts", f"{machines.address(1)},{machines.address(2)}", "-n", "1", *FAST,
                                 *RELAXED, "--firewall", "--port-base", str(PORT), "--metrics-port", str(METRICS),
                                 "--metrics-host", "0.0.0.0", "--max-restarts", "0", "--", str(script),
                                 str(tmp_path)], tmp_path).start()
    deadline = time.monotonic() + seconds
    while not all((tmp_path / f"up-{name}").exists() for name in TASKS):
        assert driver.proc.poll() is None, driver.out + driver.err
        assert time.monotonic() < deadline, "the tasks did not start:\n" + driver.err[-4000:]
        time.sleep(0.1)
    return driver, task_addresses(tmp_path, TASKS)


def _machine_of(host: str, machines: Machines) -> int:
    return next(i for i in range(1, machines.count + 1) if machines.address(i) == host)


def _agent_pids(machines: Machines, i: int) -> list[int]:
    """Machine ``i``'s agent (the one the driver started over ssh), found by the flag only agents get."""
    found = []
    for pid in machines.pids(i):
        argv = proc_words(pid, "cmdline")
        if argv and b"--agent-watch-stdin" in argv and b"tfdist" in argv and b"orphan_watcher" not in b" ".join(argv):
            found.append(pid)
    return found


def _assert_only_the_job_reaches_the_ports(machines: Machines, tasks: dict[str, tuple[str, int, int]]) -> None:
    for name, (host, port, metrics) in tasks.items():
        here = _machine_of(host, machines)
        other = 3 - here
        for guarded in (port, metrics):
            assert reaches_soon(machines, here, host, guarded), f"{name}: its own machine cannot reach {guarded}"
            assert reaches_soon(machines, other, host, guarded), f"{name}: the other job machine cannot reach {guarded}"
            assert shut_out(machines, STRANGER, host, guarded), f"{name}: a stranger was not reset on {guarded}"


@pytest.mark.parametrize("end", ["success", "failure", "sigterm", "launcher-sigkill", "agent-sigkill"])
def test_a_host_file_job_under_firewall_is_closed_to_strangers_and_leaves_no_table(tmp_path, end):
    with Machines(3, ssh=True) as machines:
        driver, tasks = _start(machines, tmp_path)
        assert sorted(tfdist_tables(machines)) == [1, 2], tfdist_tables(machines)  # the job's machines, each its own
        _assert_only_the_job_reaches_the_ports(machines, tasks)
        if end == "success":
            (tmp_path / "stop").touch()
            assert driver.wait(120) == 0, driver.err[-4000:]
        elif end == "failure":
            (tmp_path / "fail").touch()
            assert driver.wait(120) not in (0, None), driver.err[-4000:]
        elif end == "sigterm":
            os.kill(driver.proc.pid, signal.SIGTERM)
            assert driver.wait(120) == 143, driver.err[-4000:]
        elif end == "launcher-sigkill":
            os.kill(driver.proc.pid, signal.SIGKILL)  # the agents see their ssh connection close
            driver.wait(30)
        else:
            # Machine 2's agent dies outright: only its orphan watcher is left to delete its table.
            victims = _agent_pids(machines, 2)
            assert victims, "no agent found on machine 2"
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            assert wait_until_no_table_on(machines, 2), tfdist_tables(machines)
            os.kill(driver.proc.pid, signal.SIGTERM)
            driver.wait(120)
        assert wait_until_no_table(machines) == {}, driver.err[-4000:]


@pytest.mark.tf
def test_a_real_tensorflow_host_file_job_under_firewall_is_closed_to_strangers(tmp_path):
    """The same with TensorFlow's own gRPC servers at the TF_CONFIG ports (which bind every interface)."""
    with Machines(3, ssh=True) as machines:
        driver, tasks = _start(machines, tmp_path, TENSORFLOW_TASK, seconds=240)
        _assert_only_the_job_reaches_the_ports(machines, tasks)
        (tmp_path / "stop").touch()
        assert driver.wait(120) == 0, driver.err[-4000:]
        assert wait_until_no_table(machines) == {}


def wait_until_no_table_on(machines: Machines, i: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while i in tfdist_tables(machines):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("how, named", [("flag", "--firewall"), ("twin", "TFDIST_LAUNCH_FIREWALL")])
def test_a_host_that_cannot_load_the_table_is_refused_before_any_agent_starts(tmp_path, monkeypatch, how, named):
    """Machine 2 has no nft: the driver's preflight refuses in one line naming the flag and the host, exit 2 (its
    agent used to exit 2, be taken for a lost host and be started again every 10 s, the job never starting)."""
    no_nft = tmp_path / "no-nft"
    no_nft.write_text("")
    no_nft.chmod(0o644)  # not executable: as if Debian's nftables were not installed there
    script = tmp_path / "task.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    if how == "twin":
        monkeypatch.setenv("TFDIST_LAUNCH_FIREWALL", "1")
    with Machines(2, ssh=True, sshd_mounts={2: {"/usr/sbin/nft": str(no_nft)}}) as machines:
        driver = Agent(machines, 1, ["--hosts", f"{machines.address(1)},{machines.address(2)}", "-n", "1", *FAST,
                                     *(["--firewall"] if how == "flag" else []), "--", str(script)], tmp_path).start()
        assert driver.wait(120) == 2, driver.err[-4000:]
        lines = driver.err.strip().splitlines()
        assert len(lines) == 1, driver.err
        assert f"{machines.address(2)}: {named} needs the nft program" in lines[0], lines[0]
        assert machines.address(1) + ":" not in lines[0]  # the host that can is not named
        assert not (tmp_path / "task.py.ran").exists()
        assert tfdist_tables(machines) == {}
