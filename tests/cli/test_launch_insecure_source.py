"""--rdzv-insecure turns the job's protection off: honoured silently only when typed; from tfdist.toml, [tool.tfdist]
or its environment twin it is honoured with one warning line naming where it came from (issue 34)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.cli.main import main

RENDEZVOUS = ["launch", "--nnodes", "2", "--rdzv-endpoint", "198.18.0.1:29400", "--rdzv-id", "open", "--dry-run"]
TARGET = ["--", "train.py"]


@pytest.fixture(autouse=True)
def project(workdir: Path) -> Path:
    return workdir  # tests/conftest.py clears TFDIST_* variables


def _launch(capsys, *flags: str) -> str:
    assert main([*RENDEZVOUS, *flags, *TARGET]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert "job open" in captured.out  # insecure mode was honoured: the plan ran without a secret
    return captured.err


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "--rdzv-insecure" in line and "warning" in line]


def test_typed_on_the_command_line_it_is_honoured_without_a_warning(capsys):
    assert _warnings(_launch(capsys, "--rdzv-insecure")) == []


def test_from_the_environment_twin_it_warns_naming_the_variable(capsys, monkeypatch):
    monkeypatch.setenv("TFDIST_LAUNCH_RDZV_INSECURE", "1")
    [line] = _warnings(_launch(capsys))
    assert "TFDIST_LAUNCH_RDZV_INSECURE" in line and "not on the command line" in line


def test_from_tfdist_toml_it_warns_naming_the_file_and_key(capsys, workdir):
    (workdir / "tfdist.toml").write_text("[launch]\nrdzv-insecure = true\n")
    [line] = _warnings(_launch(capsys))
    assert str(workdir / "tfdist.toml") in line and "launch.rdzv-insecure" in line


def test_from_pyproject_it_warns_naming_the_file_and_table(capsys, workdir):
    (workdir / "pyproject.toml").write_text("[tool.tfdist.launch]\nrdzv_insecure = true\n")
    [line] = _warnings(_launch(capsys))
    assert str(workdir / "pyproject.toml") in line and "tool.tfdist.launch.rdzv-insecure" in line


def test_typed_over_a_file_that_also_sets_it_no_warning(capsys, workdir, monkeypatch):
    (workdir / "tfdist.toml").write_text("[launch]\nrdzv-insecure = true\n")
    monkeypatch.setenv("TFDIST_LAUNCH_RDZV_INSECURE", "1")
    assert _warnings(_launch(capsys, "--rdzv-insecure")) == []


def test_turned_off_by_the_environment_nothing_is_said(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TFDIST_LAUNCH_RDZV_INSECURE", "0")
    assert main([*RENDEZVOUS, *TARGET]) == 2  # no secret and not insecure: refused as always
    assert _warnings(capsys.readouterr().err) == []
