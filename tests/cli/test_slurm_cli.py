"""`tfdist slurm`: the written script (golden file), pass-through of script arguments, errors."""
from __future__ import annotations

import stat
import sys

from tests.goldens import check_golden
import pytest

from tfdist.cli.main import main

DIGITS = ["-N", "2", "-T", "2", "--max-restarts", "2", "-t", "00:30:00", "--python", "/opt/venv/bin/python",
          "--model-dir", "/shared/digits", "examples/digits.py", "--epochs", "5", "--steps-per-epoch", "40"]


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
    check_golden("slurm", "digits.sbatch", out.read_text())


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


def test_existing_output_is_refused_then_replaced_with_force_keeping_a_bak(tmp_path, capsys):
    out = tmp_path / "train.sbatch"
    out.write_text("#!/bin/bash\n# my own job\n")
    assert main(["slurm", "-o", str(out), "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err and "--force" in err
    assert out.read_text() == "#!/bin/bash\n# my own job\n"
    assert main(["slurm", "-o", str(out), "--force", "train.py"]) == 0
    assert "#SBATCH --job-name=train" in out.read_text()
    assert (tmp_path / "train.sbatch.bak").read_text() == "#!/bin/bash\n# my own job\n"
    assert "train.sbatch.bak" in capsys.readouterr().err


def test_output_into_a_missing_folder_is_one_line_exit_2(tmp_path, capsys):
    assert main(["slurm", "-o", str(tmp_path / "nope" / "x.sbatch"), "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "nope").exists()


def test_file_name_with_a_newline_cannot_inject_a_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["slurm", "-o", "x\ntouch F #.sbatch", "train.py"]) == 2
    assert "control character" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["examples", "train.py"]  # the submit folder's own files


def test_partition_with_options_is_refused(capsys):
    assert main(["slurm", "-p", "gpu --exclusive --uid=0", "train.py"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--partition 'gpu --exclusive --uid=0' is not a partition name" in captured.err
