"""--firewall refused in one line, exit 2, where it cannot work: a real launcher run as an unprivileged user
(setpriv), or as root on a machine without nft (a private mount namespace hides /usr/sbin/nft), on one machine and
as an agent of a rendezvous job, by the flag and by its twin. Host-file mode is refused by its preflight, across
namespace machines: tests/integration/test_netns_firewall_hostfile.py. Not Linux: tests/unit/test_firewall_rules.py."""
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
NFT = "/usr/sbin/nft"  # where Debian's nftables puts it (/sbin is a link to /usr/sbin)
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("unshare") is None,
                                reason="running the launcher as another user or with nft hidden needs root, setpriv "
                                       "and unshare (util-linux)")

SINGLE = []
RENDEZVOUS = ["--nnodes", "1", "--rdzv-endpoint", "127.0.0.1:29555", "--rdzv-insecure", "--rdzv-id", "fwjob"]
FLAG = (["--firewall"], {}, "--firewall")
TWIN = ([], {"TFDIST_LAUNCH_FIREWALL": "1"}, "TFDIST_LAUNCH_FIREWALL")


@pytest.mark.parametrize("mode", [SINGLE, RENDEZVOUS], ids=["single-machine", "rendezvous"])
@pytest.mark.parametrize("given", [FLAG, TWIN], ids=["flag", "twin"])
@pytest.mark.parametrize("lacking, says", [("root", "needs root"), ("nft", "needs the nft program")])
def test_firewall_where_it_cannot_work_is_one_line_and_exit_2(mode, given, lacking, says):
    if lacking == "nft" and not os.path.exists(NFT):
        pytest.skip(f"{NFT} is not there to hide")
    flags, env, named = given
    with tempfile.TemporaryDirectory(prefix="tfdist-fwcli-") as where:  # pytest's own folders are root's alone
        os.chmod(where, 0o777)
        folder = Path(where)
        if lacking == "root":
            prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        else:
            hidden = folder / "not-nft"
            hidden.write_text("")
            hidden.chmod(0o644)  # not executable: as if Debian's nftables were not installed
            prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                      f'mount --bind "$0" {NFT} && exec "$@"', str(hidden)]
        _refused(folder, prefix, [*mode, *flags], env, f"{named} {says}")


def _refused(tmp_path: Path, prefix: list[str], args: list[str], env: dict[str, str], says: str) -> None:
    task = tmp_path / "task.py"
    task.write_text("open(__file__ + '.ran', 'w').close()\n")
    folders_before = set(Path(tempfile.gettempdir()).glob("tfdist-agent-*"))
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "tfdist", "launch", *args, "--", str(task)],
        env={**os.environ, **env, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
             "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
             "PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert not (tmp_path / "task.py.ran").exists()  # refused before any task started
    # ... and before the agent made its temporary folder (it was left behind by every refused agent before)
    assert set(Path(tempfile.gettempdir()).glob("tfdist-agent-*")) == folders_before
