"""The launcher's prctl(2) comes without running a program: ``ctypes.util.find_library`` starts ``ldconfig -p``
(a process, tens of milliseconds on a loaded machine) each time, and two of them ran before every launch's tasks."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

CHECK = """
import ctypes.util, sys
def refuse(name):
    raise SystemExit("find_library ran: it starts ldconfig -p")
ctypes.util.find_library = refuse
sys.path.insert(0, %r)
from tfdist.launch.process import reaper, spawn
assert reaper.become_subreaper() is True, "PR_SET_CHILD_SUBREAPER refused"
"""


def test_the_launcher_loads_prctl_without_ldconfig_and_it_works():
    done = subprocess.run([sys.executable, "-c", CHECK % str(REPO_ROOT / "src")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
