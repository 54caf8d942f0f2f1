"""`tfdist completion bash|zsh|fish`: the scripts load in their shell, and bash completes a subcommand through
Click's protocol (COMP_WORDS/COMP_CWORD -> the real tfdist -> COMPREPLY)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.cli.main import main

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def tfdist_on_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has a `tfdist` that runs this checkout (what the completion script calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "tfdist"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tfdist "$@"\n')
    launcher.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(SRC)
    return env


def _complete_in_bash(env: dict[str, str], script: str, *words: str) -> list[str]:
    line = " ".join(f"'{w}'" for w in words)
    program = (f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n'
               '_tfdist_completion tfdist\nprintf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "--norc", "-c", program], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_subcommands_and_flags(tfdist_on_path: dict[str, str], capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert "-F _tfdist_completion tfdist" in script
    assert _complete_in_bash(tfdist_on_path, script, "tfdist", "la") == ["launch"]
    assert "lock" in _complete_in_bash(tfdist_on_path, script, "tfdist", "lo")
    assert "--max-restarts" in _complete_in_bash(tfdist_on_path, script, "tfdist", "launch", "--max-r")
    assert {"bash", "zsh", "fish"} == set(_complete_in_bash(tfdist_on_path, script, "tfdist", "completion", ""))


@pytest.mark.parametrize("shell, check", [("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"])])
def test_other_shells_get_a_script_their_parser_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        shell: str, check: list[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "_TFDIST_COMPLETE" in script
    if shutil.which(check[0]) is None:
        pytest.skip(f"{check[0]} is not installed here; the script's content was checked")
    path = tmp_path / f"tfdist.{shell}"
    path.write_text(script)
    done = subprocess.run([*check, str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr


def test_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "tcsh"]) == 2
    assert "tcsh" in capsys.readouterr().err
