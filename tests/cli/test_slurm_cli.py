"""`tfdist slurm`: the written script (golden file), pass-through of script arguments, errors."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tfdist.cli.main import main

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm"
UPDATE = os.environ.get("TFDIST_UPDATE_GOLDEN") == "1"

DIGITS = ["-N", "2", "-T", "2", "--max-restarts", "2", "-t", "00:30:00", "--python", "/opt/venv/bin/python",
          "--model-dir", "/shared/digits", "examples/digits.py", "--epochs", "5", "--steps-per-epoch", "40"]


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run with TFDIST_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} changed: review the diff, then regenerate with TFDIST_UPDATE_GOLDEN=1"


@pytest.fixture(autouse=True)
def submit_folder(tmp_path, monkeypatch):
    """The folder sbatch would run in, holding the scripts the jobs name (tfdist slurm checks they exist)."""
    (tmp_path / "examples").mkdir()
    for name in ("examples/digits.py", "train.py"):
        (tmp_path / name).write_text("")
    monkeypatch.chdir(tmp_path)


def test_golden_digits_script(tmp_path, capsys):
    out = tmp_path / "digits.sbatch"
    assert main(["slurm", "-o", str(out), *DIGITS]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"submit with: sbatch {out}" in captured.err
    assert out.stat().st_mode & stat.S_IXUSR
    check_golden("digits.sbatch", out.read_text())


def test_stdout_when_no_output_file_and_args_after_script_go_to_the_script(capsys):
    assert main(["slurm", "-N", "1", "train.py", "--nodes", "9", "-T", "3"]) == 0
    text = capsys.readouterr().out
    assert "#SBATCH --nodes=1" in text and "#SBATCH --ntasks-per-node=1" in text
    assert '"$PYTHON" train.py --nodes 9 -T 3 &' in text
    assert f"PYTHON=${{TFDIST_PYTHON:-{sys.executable}}}" in text  # default: the interpreter running tfdist
    assert "#SBATCH --job-name=train" in text


def test_env_twins(monkeypatch, capsys):
    monkeypatch.setenv("TFDIST_SLURM_NODES", "3")
    monkeypatch.setenv("TFDIST_SLURM_PARTITION", "gpu")
    assert main(["slurm", "train.py"]) == 0
    text = capsys.readouterr().out
    assert "#SBATCH --nodes=3" in text and "#SBATCH --partition=gpu" in text


def test_errors(capsys):
    assert main(["slurm", "-t", "soon", "train.py"]) == 2
    assert "tfdist slurm: error: --time 'soon' is not a Slurm time" in capsys.readouterr().err
    assert main(["slurm", "-N", "0", "train.py"]) == 2
    assert main(["slurm"]) == 2
    assert main(["slurm", "-N", "1", "-T", "1", "--chief", "--ps", "1", "train.py"]) == 2
    assert "cannot hold" in capsys.readouterr().err
