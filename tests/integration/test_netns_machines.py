"""The emulated machines themselves: addresses, ssh between them, a cut link, private folders, and no leftovers."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.multilib import launch_env
from tests.integration.netns import Machines, why_no_namespaces, why_no_sshd

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]


def test_machines_reach_each_other_over_ssh_and_leave_nothing_behind(tmp_path):
    if why_no_sshd():
        pytest.skip(why_no_sshd())
    machines = Machines(2, ssh=True)
    try:
        machines.create()
        ssh = ["ssh", "-o", "BatchMode=yes", machines.address(2), "cat /proc/net/fib_trie | grep -c 198.18.0.2"]
        done = subprocess.run(machines.command(1, ssh), capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert int(done.stdout.strip()) >= 1  # the command ran on machine 2, which owns .2
        machines.cut(2)
        cut = subprocess.run(machines.command(1, ["ssh", "-o", "BatchMode=yes", machines.address(2), "true"]),
                             capture_output=True, text=True, timeout=30)
        assert cut.returncode != 0
        # A process left running in a machine is killed at close.
        subprocess.Popen(machines.command(1, [sys.executable, "-c", "import time; time.sleep(60)"]))
        assert machines.pids(1)
    finally:
        machines.close()
    assert machines.existing() == []
    assert not machines.workdir.exists()


def test_private_dirs_are_private_to_their_machine(tmp_path):
    target = tmp_path / "ckpt"
    with Machines(2) as machines:
        for i in (1, 2):
            write = ["sh", "-c", f"echo {i} > {target}/who"]
            subprocess.run(machines.command(i, write, private_dirs={str(target): str(tmp_path / f"own{i}")}),
                           check=True, timeout=30)
        assert (tmp_path / "own1" / "who").read_text().strip() == "1"
        assert (tmp_path / "own2" / "who").read_text().strip() == "2"
        assert not (target / "who").exists()
    assert machines.existing() == []


AGENT_LIKE = """
import time
from tfdist.launch.local.shm_folder import WatchedSnapshotFolder
folder = WatchedSnapshotFolder("netns-fixture-test")  # what a multi-machine agent makes: a folder and its watcher
print(folder.path, flush=True)
time.sleep(120)
"""


def test_close_leaves_no_snapshot_folder_of_the_machines_in_dev_shm(tmp_path):
    """An agent's folder (removed by its orphan watcher once the agent is gone) and a folder only a task names
    (TFDIST_SNAPSHOT_DIR, no watcher) are both gone after close; a tfdist folder no machine names stays."""
    env = {**launch_env(), "PYTHONPATH": str(REPO_ROOT / "src")}
    task_folder = Path(tempfile.mkdtemp(prefix="tfdist-netnstest-snapshots-", dir="/dev/shm"))
    bystander = Path(tempfile.mkdtemp(prefix="tfdist-netnstest-bystander-", dir="/dev/shm"))
    try:
        with Machines(2) as machines:
            printed = tmp_path / "agent.out"
            with open(printed, "wb") as out:
                subprocess.Popen(machines.command(1, [sys.executable, "-c", AGENT_LIKE]), env=env, stdout=out,
                                 stdin=subprocess.DEVNULL)
            subprocess.Popen(machines.command(2, [sys.executable, "-c", "import time; time.sleep(120)"]),
                             env={**env, "TFDIST_SNAPSHOT_DIR": str(task_folder)}, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while not printed.read_text().strip() and time.monotonic() < deadline:
                time.sleep(0.1)
            agent_folder = Path(printed.read_text().strip())
            assert agent_folder.parent == Path("/dev/shm") and agent_folder.is_dir(), agent_folder
            assert machines.pids(1) and machines.pids(2)
        assert not agent_folder.exists()
        assert not task_folder.exists()
        assert bystander.is_dir()  # not named by any machine's process: not the fixture's to remove
        assert machines.existing() == []
    finally:
        for folder in (task_folder, bystander):
            shutil.rmtree(folder, ignore_errors=True)


def test_a_machine_that_goes_down_takes_its_snapshot_folders_with_it(tmp_path):
    """go_down kills the agent and its orphan watcher together (as a machine losing power does), so nothing on the
    machine is left to remove the folder and close() no longer sees a process naming it: go_down removes it."""
    env = {**launch_env(), "PYTHONPATH": str(REPO_ROOT / "src")}
    with Machines(2) as machines:
        printed = tmp_path / "agent.out"
        with open(printed, "wb") as out:
            subprocess.Popen(machines.command(1, [sys.executable, "-c", AGENT_LIKE]), env=env, stdout=out,
                             stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not printed.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        agent_folder = Path(printed.read_text().strip())
        assert agent_folder.parent == Path("/dev/shm") and agent_folder.is_dir(), agent_folder
        try:
            machines.go_down(1)
            assert machines.pids(1) == []
            assert not agent_folder.exists()
        finally:
            shutil.rmtree(agent_folder, ignore_errors=True)
    assert machines.existing() == []
