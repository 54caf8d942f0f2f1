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


def test_existing_script_is_refused_then_replaced_with_force_keeping_a_bak(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "setup_gpu.sh"
    out.write_text("#!/bin/sh\necho mine\n")
    assert main(["setup-gpu", "--os", "debian12", "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "#!/bin/sh\necho mine\n"
    assert main(["setup-gpu", "--os", "debian12", "-o", str(out), "--force", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["backup"] == str(tmp_path / "setup_gpu.sh.bak")
    assert (tmp_path / "setup_gpu.sh.bak").read_text() == "#!/bin/sh\necho mine\n"
    assert 'readonly EXPECTED_ID="debian"' in out.read_text() and os.access(out, os.X_OK)


@pytest.mark.parametrize(("argv", "message"), [
    (["-o", "s\nid > F #.sh"], "--output 's\\nid > F #.sh' contains the control character"),
    (["--tf", "\n2.21"], "--tf '\\n2.21' is not a version number"),
    (["--tf", "2.21\n"], "--tf '2.21\\n' is not a version number"),
    (["--driver", "99999999999"], "--driver"),
    (["-o", "missing/setup.sh"], "does not exist"),
])
def test_hostile_values_are_refused_writing_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                    message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["setup-gpu", "--os", "ubuntu22.04", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_warns_inside_a_container_using_the_doctors_probe(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # what the doctor's probe reads first
    assert main(["setup-gpu", "--os", "debian12", "-o", str(tmp_path / "a.sh"), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["container"] == "kubernetes"
    assert "inside a kubernetes container" in captured.err and "run the script on the host" in captured.err


def test_no_container_warning_on_a_host(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tfdist.doctor import probe_system

    monkeypatch.setattr(probe_system, "container_kind", lambda roots: None)  # this test machine is a container
    assert main(["setup-gpu", "--os", "debian12", "-o", str(tmp_path / "a.sh")]) == 0
    assert "container" not in capsys.readouterr().err
