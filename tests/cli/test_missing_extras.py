"""A missing optional dependency (tfdist.extras) is one line that names the extra to install, exit status 2, before
anything starts -- never a ``ModuleNotFoundError`` traceback. The child processes here run the real ``tfdist``
command with the package made impossible to import (tests/fixtures/blocked_imports), as on a machine without it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tfdist.cli.main import main

BLOCKER = REPO_ROOT / "tests" / "fixtures" / "blocked_imports"
FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
ETCD_JOB = ["launch", "--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-insecure",
            "--rdzv-id", "j"]
ETCD_LINE = "tfdist launch: error: --rdzv-backend etcd needs the etcd extra: pip install 'tfdist[etcd]'\n"
TENSORBOARD_LINE = ("tfdist tensorboard: error: this command needs the tensorboard extra: "
                    "pip install 'tfdist[tensorboard]'\n")


def _tfdist(args: list[str], blocked: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(BLOCKER)]),
           "TFDIST_TEST_BLOCKED_IMPORTS": blocked}
    return subprocess.run([sys.executable, "-m", "tfdist", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_etcd_backend_without_the_client_is_one_line_and_starts_nothing(tmp_path: Path, isolated_home: Path) -> None:
    result = _tfdist([*ETCD_JOB, "--", FAKE, "x"], "pyetcd", tmp_path)
    assert (result.returncode, result.stderr, result.stdout) == (2, ETCD_LINE, "")
    assert not (isolated_home / ".local" / "state" / "tfdist").exists()  # no run record: nothing was started
    assert list(tmp_path.iterdir()) == []


def test_etcd_dry_run_says_so_too(tmp_path: Path) -> None:
    result = _tfdist([*ETCD_JOB, "--dry-run", "--", FAKE, "x"], "pyetcd", tmp_path)
    assert (result.returncode, result.stderr, result.stdout) == (2, ETCD_LINE, "")


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["start", "dry-run"])
def test_tensorboard_command_without_tensorboard_is_one_line(tmp_path: Path, dry_run: list[str]) -> None:
    result = _tfdist(["tensorboard", "--logdir", str(tmp_path), *dry_run], "tensorboard", tmp_path)
    assert (result.returncode, result.stderr, result.stdout) == (2, TENSORBOARD_LINE, "")


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["start", "dry-run"])
def test_the_example_without_scikit_learn_is_one_line_before_any_task_starts(tmp_path: Path, isolated_home: Path,
                                                                             dry_run: list[str]) -> None:
    result = _tfdist(["launch", "-n", "2", *dry_run, "-m", "tfdist.examples.digits", "--model-dir",
                      str(tmp_path / "model")], "sklearn", tmp_path)
    assert (result.returncode, result.stderr, result.stdout) == (
        2, "tfdist launch: error: -m tfdist.examples.digits needs the examples extra: pip install 'tfdist[examples]'\n",
        "")
    assert not (isolated_home / ".local" / "state" / "tfdist").exists() and list(tmp_path.iterdir()) == []


def test_a_broken_client_install_is_named_in_the_same_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # The client is there but one of its own dependencies is not (grpc): reinstalling the extra is still the fix.
    (tmp_path / "pyetcd.py").write_text("import grpc\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyetcd", raising=False)
    monkeypatch.setitem(sys.modules, "grpc", None)
    assert main([*ETCD_JOB, "--", FAKE, "x"]) == 2
    err = capsys.readouterr().err
    assert err == ("tfdist launch: error: --rdzv-backend etcd needs the etcd extra (pyetcd does not import: "
                   "ModuleNotFoundError: import of grpc halted; None in sys.modules): pip install 'tfdist[etcd]'\n")
