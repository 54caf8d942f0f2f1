"""What every command promises: it exists, --help works without TensorFlow, flags show their TFDIST_* twin."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfdist.cli.main import COMMANDS, main


def test_every_registered_command_is_installed(capsys):
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    for name in COMMANDS:
        assert f"  {name} " in listed, f"{name} is registered but its module is missing"


def _leaf_commands() -> list[list[str]]:
    import importlib

    import click

    leaves = []
    for name, (module, _) in sorted(COMMANDS.items()):
        command = importlib.import_module(module).command
        if isinstance(command, click.Group):
            leaves += [[name, sub] for sub in sorted(command.commands)]
        else:
            leaves.append([name])
    return leaves


@pytest.mark.parametrize("words", _leaf_commands(), ids=" ".join)
def test_help_shows_env_twins(words, capsys):
    assert main([*words, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: tfdist" in out
    options = [line for line in out.splitlines() if line.strip().startswith("--") and "--help" not in line]
    if options:
        assert "TFDIST_" in out, f"tfdist {' '.join(words)} --help shows no environment twins"


def test_no_command_help_imports_tensorflow():
    code = (
        "import json, sys\n"
        "from tfdist.cli.main import COMMANDS, main\n"
        "import contextlib, io\n"
        "for name in COMMANDS:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        main([name, '--help'])\n"
        "print(json.dumps(sorted(m for m in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_unknown_command_is_usage_error(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "frobnicate" in err and len(err.strip().splitlines()) == 1


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "tfdist" in capsys.readouterr().out
