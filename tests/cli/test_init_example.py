"""`tfdist init` and `tfdist example`: the files they write, that nothing existing is overwritten, and (slow, real
TensorFlow) that `tfdist launch` trains the scaffolded project as written, with the settings from its tfdist.toml."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.cli.main import main

SRC = Path(__file__).resolve().parents[2] / "src"


def test_init_writes_a_project_and_keeps_existing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "my-model"
    project.mkdir()
    (project / "README.md").write_text("mine\n")
    assert main(["init", str(project)]) == 0
    out = capsys.readouterr().out
    assert f"kept     {project / 'README.md'}" in out and f"written  {project / 'train.py'}" in out
    assert (project / "README.md").read_text() == "mine\n"
    ast.parse((project / "train.py").read_text())  # valid Python
    toml = (project / "tfdist.toml").read_text()
    assert 'log-dir = "runs/my-model/logs"' in toml
    assert "runs/" in (project / ".gitignore").read_text().splitlines()
    before = {p.name: p.read_text() for p in project.iterdir()}
    assert main(["init", str(project)]) == 0  # a second run changes nothing
    assert {p.name: p.read_text() for p in project.iterdir()} == before
    assert capsys.readouterr().out.count("kept") == 4


def test_init_refuses_a_name_that_cannot_be_written_into_the_files(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "p"), "--name", 'x"; import os']) == 2
    assert "--name " in capsys.readouterr().err and not (tmp_path / "p" / "train.py").exists()


def test_example_lists_prints_and_writes_without_overwriting(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["example"]) == 0
    assert "digits\ttfdist launch -n 2 -m tfdist.examples.digits" in capsys.readouterr().out
    assert main(["example", "digits"]) == 0
    shipped = (SRC / "tfdist" / "examples" / "digits.py").read_text()
    assert capsys.readouterr().out == shipped
    target = tmp_path / "digits.py"
    assert main(["example", "digits", "-o", str(target)]) == 0 and target.read_text() == shipped
    target.write_text("my edits\n")
    assert main(["example", "digits", "-o", str(target)]) == 2
    assert "exists" in capsys.readouterr().err and target.read_text() == "my edits\n"
    assert main(["example", "digits", "-o", str(target), "--force"]) == 0 and target.read_text() == shipped
    assert (tmp_path / "digits.py.bak").read_text() == "my edits\n"  # --force keeps what it replaced
    assert main(["example", "nosuch"]) == 2


@pytest.mark.slow
@pytest.mark.tf
def test_launch_trains_the_scaffolded_project_unchanged(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    project = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    tfdist = [sys.executable, "-m", "tfdist"]
    subprocess.run([*tfdist, "init", str(project)], env=env, check=True, capture_output=True, timeout=60)
    # Everything else comes from the project's tfdist.toml: 2 workers, restarts, logs under runs/demo/logs, --tee.
    done = subprocess.run([*tfdist, "launch", "--", "train.py"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "started 2 task(s)" in done.stderr
    accuracy = float(re.search(r"^\[worker:0\] accuracy=([0-9.]+)$", done.stdout, re.MULTILINE).group(1))
    print(f"scaffolded project: accuracy={accuracy}")
    assert accuracy >= 0.8
    assert (project / "runs" / "demo" / "model.keras").is_file()  # saved by the chief only
    assert list((project / "runs" / "demo" / "logs").rglob("worker-1.log"))
    assert not [line for line in done.stderr.splitlines() if re.match(r"^\[\w+:\d+\] E\d{4} ", line)]
