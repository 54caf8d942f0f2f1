"""`tfdist setup-gpu` in-process: files, exit statuses, JSON, warnings and one-line errors."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfdist.cli.main import main


def test_writes_an_executable_script_and_says_how_to_run_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gpu.sh"
    assert main(["setup-gpu", "--os", "ubuntu22.04", "-o", str(out)]) == 0
    text = out.read_text()
    assert 'readonly DRIVER_PACKAGE="cuda-drivers-570"' in text
    assert os.access(out, os.X_OK)
    printed = capsys.readouterr().out
    assert f"sudo bash {out}" in printed and "--dry-run" in printed


def test_stdout_output_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["setup-gpu", "--os", "debian12", "--tf", "2.15", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("#!/usr/bin/env bash") and 'readonly EXPECTED_ID="debian"' in captured.out
    assert main(["setup-gpu", "--os", "debian12", "--driver", "550", "--json", "-o", str(tmp_path / "s.sh")]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["schema"] == "tfdist.setup_gpu" and document["schema_version"] == 1
    assert (document["driver_branch"], document["driver_floor"]) == (550, "525.60.13")
    assert document["warning"] and "warning:" in captured.err


def test_driver_below_floor_is_one_line_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.sh"
    assert main(["setup-gpu", "--os", "ubuntu24.04", "--driver", "470", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tfdist setup-gpu: error: driver branch 470 cannot run TF 2.21" in err
    assert not out.exists()


def test_unknown_os_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["setup-gpu", "--os", "fedora40"]) == 2
    assert "fedora40" in capsys.readouterr().err
