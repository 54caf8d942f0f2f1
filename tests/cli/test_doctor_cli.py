"""``tfdist doctor`` through the CLI entry point, on this machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.cli.main import main

HAS_NVIDIA = os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def test_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["doctor", "--json", "--recommend"])
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "tfdist.doctor" and document["schema_version"] == 1
    assert rc == document["exit_status"]
    assert document["verdict"] in ("gpu-ready", "cpu-only", "no-tensorflow", "problems")
    assert (rc == 1) == any(f["severity"] == "error" for f in document["findings"])
    for finding in document["findings"]:
        assert set(finding) == {"id", "severity", "title", "evidence", "fix", "alternatives", "detail"}
    assert set(document["facts"]) == {"system", "driver", "libraries", "tensorflow", "conda", "xla"}
    rec = document["recommendation"]
    assert rec["version"] is None or rec["command"].startswith("pip install ")


@pytest.mark.skipif(HAS_NVIDIA, reason="verdicts below are those of a machine without an NVIDIA GPU")
def test_human_report_and_exit_status_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "verdict: cpu-only" in out or "verdict: no-tensorflow" in out
    assert "Findings" in out and "NVIDIA driver" in out


@pytest.mark.skipif(HAS_NVIDIA, reason="this machine has an NVIDIA GPU")
def test_expect_gpu_flag_and_its_environment_twin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["doctor", "--json", "--expect-gpu"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "problems"
    monkeypatch.setenv("TFDIST_DOCTOR_EXPECT_GPU", "1")
    assert main(["doctor", "--json"]) == 1
    capsys.readouterr()


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--verify-timeout", "0"]) == 2
    assert "tfdist doctor: error:" in capsys.readouterr().err
    assert main(["doctor", "--no-such-flag"]) == 2


def test_help_names_flags_and_environment_twins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--json", "--recommend", "--verify", "--expect-gpu", "TFDIST_DOCTOR_EXPECT_GPU"):
        assert flag in out


def test_doctor_imports_neither_tensorflow_nor_rich_for_json() -> None:
    """pynvml is imported only where the driver's NVML library loads (seen on the lent H200, where it must be)."""
    code = (
        "import sys\nfrom tfdist.cli.main import main\nrc = main(['doctor', '--json'])\n"
        "heavy = [m for m in ('tensorflow', 'rich', 'pynvml', 'packaging') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    facts = json.loads(done.stdout)
    driver_via_nvml = (facts.get("facts", {}).get("driver") or {}).get("source") == "nvml"
    expected = "HEAVY ['pynvml']" if driver_via_nvml else "HEAVY []"
    assert expected in done.stderr, done.stderr[-2000:]


def test_doctor_json_start_imports_only_the_doctor(tmp_path: Path) -> None:
    """The start-up the speed goal measures (bench/doctor.py): no other command's room, no launch protocol records,
    and no TOML parser where the working folder's pyproject.toml cannot hold [tool.tfdist]."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "uses-tfdist"\ndependencies = ["tfdist"]\n')
    code = (
        "import sys\nfrom tfdist.cli.main import main\nrc = main(['doctor', '--json'])\n"
        "rooms = ('tfdist.launch', 'tfdist.mirror', 'tfdist.deploy', 'tfdist.runtime', 'tfdist.cluster', "
        "'tfdist.observability', 'tfdist.protocol.records', 'tfdist.protocol.plan', 'tomllib', 'tomlkit')\n"
        "extra = sorted(m for m in sys.modules if m.startswith(rooms) or (m.startswith('tfdist.cli.') and m not in "
        "('tfdist.cli.main', 'tfdist.cli.settings', 'tfdist.cli.common', 'tfdist.cli.doctor')))\n"
        "print('EXTRA', extra, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert json.loads(done.stdout)["schema"] == "tfdist.doctor"
    assert "EXTRA []" in done.stderr, done.stderr[-2000:]
