"""The emulated machines themselves: addresses, ssh between them, a cut link, private folders, and no leftovers."""
from __future__ import annotations

import subprocess
import sys

import pytest

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
