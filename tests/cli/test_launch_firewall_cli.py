"""--firewall refused in one line, exit 2, where it cannot work: here a real launcher run as an unprivileged user
(setpriv), on one machine and as an agent of a rendezvous job, by the flag and by its twin."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="running the launcher as another user needs root and setpriv (util-linux)")


@pytest.mark.parametrize("args, env, named", [
    (["--firewall"], {}, "--firewall"),
    (["--nnodes", "1", "--rdzv-endpoint", "127.0.0.1:29555", "--rdzv-insecure", "--rdzv-id", "fwjob"],
     {"TFDIST_LAUNCH_FIREWALL": "1"}, "TFDIST_LAUNCH_FIREWALL"),
])
def test_firewall_without_root_is_one_line_and_exit_2(args, env, named):
    with tempfile.TemporaryDirectory(prefix="tfdist-fwcli-") as where:  # pytest's own folders are root's alone
        os.chmod(where, 0o777)
        _refused(Path(where), args, env, named)


def _refused(tmp_path: Path, args: list[str], env: dict[str, str], named: str) -> None:
    task = tmp_path / "task.py"
    task.write_text("open(__file__ + '.ran', 'w').close()\n")
    folders_before = set(Path(tempfile.gettempdir()).glob("tfdist-agent-*"))
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-m", "tfdist",
         "launch", *args, "--", str(task)],
        env={**os.environ, **env, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
             "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
             "PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{named} needs root" in lines[0], done.stderr
    assert not (tmp_path / "task.py.ran").exists()  # refused before any task started
    # ... and before the agent made its temporary folder (it was left behind by every refused agent before)
    assert set(Path(tempfile.gettempdir()).glob("tfdist-agent-*")) == folders_before
