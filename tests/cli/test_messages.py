"""One test per misleading message of issue 14 (point 8): each error now names what the user actually did and a
fix that the command accepts."""
from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

import click
import pytest

from tfdist.cli.main import COMMANDS, main
from tfdist.deploy import lock as locking


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and "Traceback" not in "\n".join(lines)
    return lines[-1]


@pytest.fixture
def fake_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A resolver stand-in that records being called and prints a one-package lock."""
    record = tmp_path / "called"
    script = tmp_path / "uv"
    script.write_text(f"#!{sys.executable}\nimport sys\nopen({str(record)!r}, 'w').close()\n"
                      f"sys.stdout.write('absl-py==2.5.1 \\\\\\n    --hash=sha256:{'a' * 64}\\n')\n")
    script.chmod(0o755)
    monkeypatch.setattr(locking, "find_uv", lambda: str(script))
    monkeypatch.chdir(tmp_path)
    return record


@pytest.mark.parametrize("command", [["lock", "--tf", "2.21"], ["docker", "--tf", "2.21"]])
def test_unknown_mirror_offers_only_what_the_command_takes(tmp_path: Path, fake_uv: Path,
                                                           capsys: pytest.CaptureFixture[str], command) -> None:
    assert main([*command, "--mirror", "nosuch", "-o", str(tmp_path / "out")]) == 2
    error = _error(capsys)
    assert "unknown mirror 'nosuch'" in error and "tuna" in error
    assert "--url" not in error  # lock and docker have no --url
    assert main([*command, "--url", "x=https://x/simple"]) == 2  # ... as this shows


def test_the_glibc_the_lock_suggests_is_accepted(tmp_path: Path, fake_uv: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--tf", "2.21", "--glibc", "2.17", "-o", str(tmp_path / "a.lock")]) == 2
    suggested = re.search(r"--glibc (\S+) or later", _error(capsys)).group(1)
    assert main(["lock", "--tf", "2.21", "--glibc", suggested, "--no-tfdist", "-o", str(tmp_path / "b.lock")]) == 0
    assert fake_uv.exists()


def test_slurm_names_only_the_roles_asked_for(workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slurm", "-N", "2", "--ps", "3", "train.py"]) == 2
    error = _error(capsys)
    assert "3 parameter servers" in error and "chief" not in error and "evaluator" not in error
    needed = int(re.search(r"at least (\d+) tasks", error).group(1))
    assert main(["slurm", "-N", str(needed), "--ps", "3", "train.py"]) == 0


def test_slurm_refuses_a_script_that_does_not_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "job.sbatch"
    assert main(["slurm", "-o", str(out), "trian.py"]) == 2
    assert "SCRIPT 'trian.py' does not exist" in _error(capsys) and not out.exists()


@pytest.mark.parametrize("typed, suggested", [("--nproc_per_node", "--workers"), ("--max_restarts", "--max-restarts"),
                                              ("--nproc-per-node", "--workers")])
def test_foreign_launcher_flags_get_the_tfdist_flag(capsys: pytest.CaptureFixture[str], typed: str,
                                                    suggested: str) -> None:
    assert main(["launch", typed, "2", "train.py"]) == 2
    error = _error(capsys)
    assert f"Did you mean '{suggested}'?" in error and "--grace-period" not in error


def test_gpus_per_task_without_gpus_is_refused(workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert main(["launch", "--gpus-per-task", "1", "--dry-run", "train.py"]) == 2
    assert "--gpus-per-task 1: no GPU is visible" in _error(capsys)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert main(["launch", "--gpus-per-task", "1", "--dry-run", "train.py"]) == 2
    assert "CUDA_VISIBLE_DEVICES='-1' hides them all" in _error(capsys)


def test_tensorboard_refuses_a_missing_logdir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tensorboard", "--logdir", str(tmp_path / "nope"), "--dry-run"]) == 2
    assert f"--logdir {tmp_path / 'nope'} is not a folder" in _error(capsys)


@pytest.mark.parametrize("variable, value, argv, shown", [
    ("TFDIST_LAUNCH_WORKERS", "many", ["launch", "--dry-run", "train.py"], "Invalid value for TFDIST_LAUNCH_WORKERS"),
    ("TFDIST_LOCK_TF", "2.x", ["lock"], "TFDIST_LOCK_TF '2.x' is not a version"),
    ("TFDIST_SLURM_TIME", "soon", ["slurm", "train.py"], "TFDIST_SLURM_TIME 'soon' is not a Slurm time"),
])
def test_errors_from_a_variable_name_the_variable(workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], variable, value, argv,
                                                  shown) -> None:
    monkeypatch.setenv(variable, value)
    assert main([*argv, "-o", str(tmp_path / "out")] if argv[0] == "lock" else argv) == 2
    assert shown in _error(capsys)


def _leaf_commands() -> list[tuple[list[str], click.Command]]:
    leaves = []
    for name, (module, _) in sorted(COMMANDS.items()):
        command = importlib.import_module(module).command
        if isinstance(command, click.Group):
            leaves += [([name, sub], cmd) for sub, cmd in sorted(command.commands.items())]
        else:
            leaves.append(([name], command))
    return leaves


@pytest.mark.parametrize("words, command", _leaf_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_twin_is_command_and_flag(words: list[str], command: click.Command,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """TFDIST_<COMMAND>_<FLAG>, the flag as typed (--json -> JSON): in --help, and as the variable actually read."""
    assert main([*words, "--help"]) == 0
    helptext = capsys.readouterr().out
    prefix = "TFDIST_" + "_".join(w.upper().replace("-", "_") for w in words)
    for param in command.params:
        longs = [o for o in param.opts if o.startswith("--")]
        if not isinstance(param, click.Option) or param.hidden or not longs or param.name == "help":
            continue
        twin = f"{prefix}_{max(longs, key=len)[2:].upper().replace('-', '_')}"
        assert twin in helptext, f"{' '.join(words)} {max(longs, key=len)}: {twin} not shown"
    for wrong in ("TFDIST_DOCTOR_AS_JSON", "TFDIST_LAUNCH_ENV_PAIRS"):
        assert wrong not in helptext


def test_renamed_twins_are_read(workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TFDIST_LAUNCH_ENV", "ALPHA=1")
    assert main(["launch", "--dry-run", "train.py"]) == 0
    assert "ALPHA=1" in capsys.readouterr().out


def test_launch_help_keeps_one_variable_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tfdist.constants import TASK_ENVIRONMENT

    assert main(["launch", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in TASK_ENVIRONMENT:
        assert any(line.strip().startswith(f"{name}: ") for line in lines), name


def test_mirror_help_summaries_are_whole(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mirror", "--help"]) == 0
    commands = capsys.readouterr().out.split("Commands:")[1].strip().splitlines()
    assert len(commands) == 6 and not any(line.rstrip().endswith("...") for line in commands)


def test_mirror_list_keeps_addresses_whole_at_160_columns(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from tfdist.mirror.catalog import load_catalog

    for width in ("160", "80"):
        monkeypatch.setenv("COLUMNS", width)
        assert main(["mirror", "list"]) == 0
        out = capsys.readouterr().out
        for mirror in load_catalog().values():
            if mirror.pip_index and "official" != mirror.name:
                assert any(mirror.pip_index in line for line in out.splitlines()), (width, mirror.pip_index)
        assert max(len(line) for line in out.splitlines()) <= int(width)
