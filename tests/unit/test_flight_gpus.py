"""nvidia-smi beside the stacks: a fake nvidia-smi on PATH (the one fake allowed: GPUs this machine lacks) shows
what the report holds when it answers, fails, hangs, floods, or is not there at all."""
from __future__ import annotations

import json
import os
import stat

import pytest

from tfdist.launch.flight import report as reports
from tfdist.launch.flight.gpus import nvidia_smi
from tfdist.launch.flight.recorder import record

TABLE = "| NVIDIA-SMI 550.54  Driver Version: 550.54  CUDA Version: 12.4 |\n|  0  H100  98%  79000MiB / 81559MiB |"


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Put an ``nvidia-smi`` running ``body`` (shell) first on PATH; until then PATH holds no nvidia-smi at all."""
    system_path = os.environ.get("PATH", "")

    def install(body: str) -> None:
        program = tmp_path / "bin" / "nvidia-smi"
        program.parent.mkdir(exist_ok=True)
        program.write_text(f"#!/bin/sh\n{body}\n")
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}{system_path}")
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return install


def test_its_output_is_the_gpu_report(fake_smi):
    fake_smi(f"cat <<'END'\n{TABLE}\nEND")
    assert nvidia_smi() == TABLE


@pytest.mark.parametrize("body, words", [
    ("echo 'Unable to determine the device handle for GPU0: Unknown Error' >&2; exit 15",
     ["Unable to determine the device handle", "(nvidia-smi exited with code 15)"]),
    ("exec sleep 30", ["no answer within 0.3 s"]),
])
def test_a_failing_or_stuck_nvidia_smi_is_a_line_not_an_error(fake_smi, body, words):
    fake_smi(body)
    text = nvidia_smi(timeout=0.3)
    assert all(w in text for w in words), text


def test_a_flood_is_cut(fake_smi):
    fake_smi("yes 0123456789 | head -n 5000")
    text = nvidia_smi(max_chars=1000)
    assert len(text) < 1100 and text.endswith("more characters left out)")


def test_no_nvidia_smi_on_path_says_so(fake_smi):
    assert nvidia_smi() == "nvidia-smi is not on PATH: no GPU report (no NVIDIA driver on this machine)"


def test_the_flight_report_holds_it_beside_the_stacks(fake_smi, tmp_path):
    fake_smi(f"echo '{TABLE.splitlines()[1]}'")
    result, path = record([], run_id="r", attempt=0, reason=reports.HANG, folder=str(tmp_path))
    assert path is not None
    text = open(path, encoding="utf-8").read()
    assert "== GPUs (nvidia-smi on the launcher's machine)\n  |  0  H100  98%" in text
    data = json.loads(open(path[:-4] + ".json", encoding="utf-8").read())
    assert data["gpus"] == TABLE.splitlines()[1] and oct(os.stat(path).st_mode & 0o777) == "0o600"
