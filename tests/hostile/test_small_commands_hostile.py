"""Hostile values for `tfdist init`, `tfdist example`, `tfdist config show` and `tfdist tf-config`.

init's project is read back by Python's own parser (train.py), tomllib (tfdist.toml) and its printed `next:` command
by bash; example's copy must be the shipped bytes and its printed command split back by shlex; config show must keep
one line per flag and give the value back exactly in --json; tf-config --exec must hand every COMMAND word to the
program unchanged (execvpe recorded in-process, then one real exec with every value at once).
"""
from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

from tfdist.cli.main import main
from tfdist.validate import bad_character
from tests.hostile.corpus import (TALLY, Accepted, Outcome, assert_not_pwned, assert_refused_cleanly, confirm, feed,
                                  values)

SRC = Path(__file__).resolve().parents[2] / "src"
SHIPPED = (SRC / "tfdist" / "examples" / "digits.py").read_text(encoding="utf-8")
CLUSTER = json.dumps({"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}})


def _printable(item: Accepted) -> None:
    assert [line for line in (item.outcome.out + item.outcome.err).splitlines() if bad_character(line)] == []


def _bash_words(command: str, cwd: Path) -> list[str]:
    """What bash passes to `cd` and `tfdist` in a printed command (both recorded, nothing run)."""
    script = "cd() { printf 'cd\\0%s\\0' \"$@\"; }\ntfdist() { printf '%s\\0' \"$@\"; }\n" + command + "\n"
    done = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().split("\0")[:-1]


def test_init_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def check(item: Accepted) -> None:
        project = item.folder / "p"
        toml = tomllib.loads((project / "tfdist.toml").read_text(encoding="utf-8"))
        assert toml["launch"]["log-dir"] == f"runs/{item.value}/logs"
        tree = ast.parse((project / "train.py").read_text(encoding="utf-8"))
        assert ast.get_docstring(tree).startswith(f"{item.value}: ")
        assert (project / "README.md").read_text(encoding="utf-8").splitlines()[0] == f"# {item.value}"
        _printable(item)

    accepted = feed("init", "--name", "mnist", lambda flag, value: ["init", "p", flag, value], tmp_path, capsys)
    confirm("init", "--name", accepted, check)


def test_init_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def check(item: Accepted) -> None:
        project = item.folder / item.value
        assert {".gitignore", "README.md", "tfdist.toml", "train.py"} <= {p.name for p in project.iterdir()}
        printed = [line for line in item.outcome.out.splitlines() if line.startswith("next: ")]
        words = _bash_words(printed[0].removeprefix("next: "), item.folder)
        if words[:1] == ["cd"]:
            assert (item.folder / words[1]).resolve() == project.resolve()
        else:  # the project is the working folder itself ('.', './')
            assert project.resolve() == item.folder.resolve()
        assert words[-3:] == ["launch", "--", "train.py"]
        assert_not_pwned(item.folder, item.what)
        _printable(item)

    accepted = feed("init", "FOLDER", "p", lambda flag, value: ["init", "--name", "demo", "--", value], tmp_path,
                    capsys, relative=True)
    confirm("init", "FOLDER", accepted, check)


def test_example_output_and_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def check(item: Accepted) -> None:
        assert (item.folder / item.value).read_text(encoding="utf-8") == SHIPPED
        printed = item.outcome.err.strip()
        written, _, command = printed.partition("; run it with: ")
        assert shlex.split(written.removeprefix("wrote ")) == [item.value]
        assert shlex.split(command) == ["tfdist", "launch", "-n", "2", "--", item.value]
        _printable(item)

    accepted = feed("example", "--output", "digits.py", lambda flag, value: ["example", "digits", flag, value],
                    tmp_path / "o", capsys, relative=True)
    confirm("example", "--output", accepted, check)

    def check_name(item: Accepted) -> None:
        assert item.value == "digits" and item.outcome.out == SHIPPED

    accepted = feed("example", "NAME", "digits", lambda flag, value: ["example", "--", value], tmp_path / "n", capsys)
    confirm("example", "NAME", accepted, check_name)


def test_config_show_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def check(item: Accepted) -> None:
        document = json.loads(item.outcome.out)
        assert document["settings"] and {row["command"] for row in document["settings"]} == {"tfdist lock"}

    accepted = feed("config show", "COMMAND", "lock", lambda flag, value: ["config", "show", "--json", "--", value],
                    tmp_path / "c", capsys)
    confirm("config show", "COMMAND", accepted, check)
    accepted = feed("config show", "SUBCOMMAND", "scrape-config",
                    lambda flag, value: ["config", "show", "--json", "--", "monitor", value], tmp_path / "s", capsys)
    def check_sub(item: Accepted) -> None:
        assert {row["command"] for row in json.loads(item.outcome.out)["settings"]} == {"tfdist monitor scrape-config"}

    confirm("config show", "SUBCOMMAND", accepted, check_sub)


def test_config_show_a_hostile_variable_stays_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # Values come from TFDIST_<COMMAND>_<FLAG>: a variable cannot hold NUL, and an empty one counts as unset.
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show", "lock"]) == 0
    lines = len(capsys.readouterr().out.splitlines())  # the header and one line per flag
    tried = [(label, value) for label, value in values("2.21") if "\0" not in value and value]
    for label, value in tried:
        monkeypatch.setenv("TFDIST_LOCK_TF", value)
        assert main(["config", "show", "lock", "--json"]) == 0
        row = next(r for r in json.loads(capsys.readouterr().out)["settings"] if r["flag"] == "--tf")
        assert (row["value"], row["source"]) == (value, "env TFDIST_LOCK_TF"), label
        assert main(["config", "show", "lock"]) == 0
        table = capsys.readouterr().out.splitlines()
        line = next(line for line in table if line.startswith("tfdist lock --tf "))
        assert len(table) == lines and not bad_character(line), label
        shown = line.removeprefix("tfdist lock --tf").strip().removesuffix("env TFDIST_LOCK_TF").strip()
        assert shown == value.strip() or ast.literal_eval(shown) == value, label
        TALLY.add("config show", "TFDIST_LOCK_TF", "round-trip")
    TALLY.dump()
    assert len(tried) > 100


def test_tf_config_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TF_CONFIG", CLUSTER)
    recorded: list[tuple[list[str], dict[str, str]]] = []

    def execvpe(program: str, argv: list[str], env: dict[str, str]) -> None:
        recorded.append((list(argv), dict(env)))
        raise click.exceptions.Exit(0)  # what a successful exec looks like from here: nothing more of tfdist runs

    monkeypatch.setattr(os, "execvpe", execvpe)

    def check_from(item: Accepted) -> None:
        assert item.value == "env" and json.loads(item.outcome.out) == json.loads(CLUSTER)

    accepted = feed("tf-config", "--from", "env", lambda flag, value: ["tf-config", flag, value], tmp_path / "f", capsys)
    confirm("tf-config", "--from", accepted, check_from)

    # Without --exec any argument is refused.
    for label, value in values("x"):
        outcome = _run(["tf-config", "--", value], capsys)
        assert_refused_cleanly(outcome, f"tf-config ARG {label}")
        TALLY.add("tf-config", "ARG", "refused")

    def check_exec(item: Accepted) -> None:
        argv, env = recorded.pop(0)  # feed runs every value first, in order; confirm checks them in that order
        assert argv == ["my-trainer", item.value] and json.loads(env["TF_CONFIG"]) == json.loads(CLUSTER)

    accepted = feed("tf-config", "--exec COMMAND", "x",
                    lambda flag, value: ["tf-config", "--exec", "--", "my-trainer", value], tmp_path / "e", capsys)
    confirm("tf-config", "--exec COMMAND", accepted, check_exec)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    status = main(argv)
    captured = capsys.readouterr()
    return Outcome(status, captured.out, captured.err, [])


def test_tf_config_exec_passes_every_word_to_a_real_program(tmp_path: Path) -> None:
    words = [value for _, value in values("x") if "\0" not in value]  # an argv cannot carry NUL
    env = {**os.environ, "PYTHONPATH": str(SRC), "TF_CONFIG": CLUSTER}
    done = subprocess.run([sys.executable, "-m", "tfdist", "tf-config", "--exec", "--", sys.executable, "-c",
                           "import json, sys; json.dump(sys.argv[1:], sys.stdout)", *words],
                          env=env, cwd=tmp_path, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == words and len(words) > 100
    assert_not_pwned(tmp_path, "tf-config --exec")
