"""Every valued flag of `tfdist setup-gpu` against the hostile corpus: each accepted script is run by bash on a fake
machine (recording stubs for id, dpkg, apt-get and curl; see tests/integration/test_setup_gpu_script.py), in
--dry-run and for real, and linted by shellcheck."""
from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from tests.hostile.corpus import assert_not_pwned, assert_shellcheck_clean, confirm, feed
from tests.integration.test_setup_gpu_script import Machine, changes

# flag -> (valid base value, whether the value is a path the tool creates)
FLAGS = {"--os": ("debian12", False), "--tf": ("2.21", False), "--driver": ("580", False),
         "--output": ("setup_gpu.sh", True)}


def argv_for(flag: str, value: str) -> list[str]:
    options = {"--os": "debian12", "--output": "setup_gpu.sh", flag: value}
    return ["setup-gpu", *(word for pair in options.items() for word in pair)]


def check_round_trip(flag: str, value: str, script: Path, machine: Machine) -> None:
    lines = script.read_text(encoding="utf-8").splitlines()
    dry = machine.run(script, "--dry-run", uid=1000)
    assert dry.returncode == 0 and changes(machine.calls()) == [], dry.stderr
    real = machine.run(script)
    assert real.returncode == 0, real.stderr
    installed = [call for call in changes(machine.calls()) if call.startswith("apt-get install")]
    assert len(installed) == 1
    if flag == "--os":
        assert value == "debian12" and 'readonly EXPECTED_ID="debian"' in lines
    elif flag == "--tf":
        assert lines[1].endswith(f", TensorFlow {value}.")
    elif flag == "--driver":
        assert installed == [f"apt-get install -y cuda-drivers-{int(value)}"]
    elif flag == "--output":
        usage = next(line for line in lines if line.startswith("# Usage: "))
        assert shlex.split(usage.removeprefix("# Usage: ")) == ["sudo", "bash", os.path.basename(value), "[--dry-run]"]
    else:  # pragma: no cover - a flag added to FLAGS without a check
        raise AssertionError(flag)


@pytest.mark.slow  # a fake machine per accepted value and shellcheck over each distinct script
@pytest.mark.parametrize("flag", FLAGS)
def test_each_value_round_trips_or_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    base, relative = FLAGS[flag]
    accepted = feed("setup-gpu", flag, base, argv_for, tmp_path, capsys, relative=relative)
    scripts = [item.folder / (item.value if flag == "--output" else "setup_gpu.sh") for item in accepted]
    confirm("setup-gpu", flag, accepted, lambda item: check_round_trip(
        flag, item.value, item.folder / (item.value if flag == "--output" else "setup_gpu.sh"),
        Machine(item.folder / "machine", "debian12")))
    assert_not_pwned(tmp_path, flag)
    assert_shellcheck_clean(scripts)
