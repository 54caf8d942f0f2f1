"""tfdist.toml / [tool.tfdist]: defaults for every command's flags, with flag > environment twin > file > default,
checked through the real commands (launch --dry-run plans the tasks it would start)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.cli import settings
from tfdist.cli.main import main


@pytest.fixture(autouse=True)
def project(workdir: Path) -> Path:
    """Every test runs in a working folder with a training script (tests/conftest.py clears TFDIST_* variables)."""
    return workdir


def _planned(capsys: pytest.CaptureFixture[str]) -> int:
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("dry run: ")
    return int(last.split()[2])


@pytest.mark.parametrize("flag, env, file, expected", [
    (None, None, None, 1),     # built-in default: one worker
    (None, None, 3, 3),        # the file
    (None, 4, 3, 4),           # the environment twin beats the file
    (5, 4, 3, 5),              # the flag beats both
    (5, None, 3, 5),
    (2, 4, None, 2),
    (None, 4, None, 4),
])
def test_precedence_flag_env_file_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], flag, env, file, expected) -> None:
    if file is not None:
        (tmp_path / "tfdist.toml").write_text(f"[launch]\nworkers = {file}\n")
    if env is not None:
        monkeypatch.setenv("TFDIST_LAUNCH_WORKERS", str(env))
    argv = ["launch", "--dry-run"] + (["-n", str(flag)] if flag is not None else []) + ["--", "train.py"]
    assert main(argv) == 0
    assert _planned(capsys) == expected


def test_pyproject_tool_table_and_dashed_or_underscored_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.tfdist.launch]\nworkers = 2\n'
                                             'job_name = "from-pyproject"\n')
    assert main(["launch", "--dry-run", "--", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "TFDIST_JOB_NAME=from-pyproject" in out and "dry run: 2 task(s)" in out


def test_tfdist_toml_wins_over_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.tfdist.launch]\nworkers = 2\n")
    (tmp_path / "tfdist.toml").write_text("[launch]\nworkers = 3\n")
    assert main(["launch", "--dry-run", "--", "train.py"]) == 0
    assert _planned(capsys) == 3


def test_subcommand_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tfdist.toml").write_text("[monitor.scrape-config]\ntarget = 'local'\nport = 9700\n")
    assert main(["config", "show", "monitor", "scrape-config", "--json"]) == 0
    rows = {r["flag"]: r for r in json.loads(capsys.readouterr().out)["settings"]}
    assert rows["--port"]["value"] == 9700 and "monitor.scrape-config.port" in rows["--port"]["source"]


@pytest.mark.parametrize("text, named", [
    ("[launch]\nwrkers = 2\n", "launch.wrkers"),
    ("[lanch]\nworkers = 2\n", "lanch"),
    ("[launch]\nworkers = 'many'\n", "launch.workers = 'many'"),
    ("[launch\n", "is not valid TOML"),
])
def test_bad_files_are_refused_naming_file_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str], text: str, named: str) -> None:
    (tmp_path / "tfdist.toml").write_text(text)
    assert main(["launch", "--dry-run", "--", "train.py"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(tmp_path / "tfdist.toml") in err and named in err


@pytest.mark.parametrize("text", [
    "a = " + "[" * 20000 + "]" * 20000,  # past the parser's recursion limit
    "a = " + "{b=" * 20000 + "}" * 20000,
    "a = " + "[" * 300 + "]" * 300,  # parsed, but deeper than any walk over it should go
    "[" + ".".join(["launch"] + ["x"] * 40) + "]",
], ids=["arrays-20000", "tables-20000", "arrays-300", "dotted-40"])
@pytest.mark.parametrize("argv", [["--version"], ["status"], ["launch", "--dry-run", "--", "train.py"]])
def test_a_deeply_nested_file_is_one_line_for_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             text: str, argv: list[str]) -> None:
    (tmp_path / "tfdist.toml").write_text(text)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(tmp_path / "tfdist.toml") in err and "deep" in err


def test_a_pyproject_without_a_tfdist_table_is_neither_read_as_toml_nor_judged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Another tool's broken table is not tfdist's business (this failed every command before), and a pyproject that
    # never names tfdist is not parsed at all: the command start does not import tomllib for it.
    (tmp_path / "pyproject.toml").write_text("[tool.black\nline-length = 120\n")
    assert main(["launch", "--dry-run", "--", "train.py"]) == 0
    assert _planned(capsys) == 1
    code = "import sys\nfrom tfdist.cli.main import main\nmain(['--version'])\nprint('tomllib' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.split()[-1] == "False", done.stderr[-2000:]
    # ... while one that names tfdist is parsed and judged as before.
    (tmp_path / "pyproject.toml").write_text("[tool.tfdist.launch\nworkers = 2\n")
    assert main(["launch", "--dry-run", "--", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "is not valid TOML" in err and str(tmp_path / "pyproject.toml") in err
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "is not valid TOML" in done.stderr


HOLDING = [  # each defines tool.tfdist (checked with tomllib below)
    "[tool.tfdist]\nx = 1\n",
    "[tool.tfdist.launch]\nworkers = 2\n",
    "  [ tool . tfdist . launch ]\nworkers = 2\n",
    "[\"tool\".'tfdist']\nx = 1\n",
    "['tool' . \"tfdist\"]\nx = 1\n",
    "[tool]\ntfdist.launch.workers = 2\n",
    "[tool]\n\"tfdist\" = { launch = { workers = 2 } }\n",
    "[ tool ]\n  tfdist = {}\n",
    "tool.tfdist.launch.workers = 2\n",
    "tool . 'tfdist' = {}\n",
    "tool = { tfdist = { launch = { workers = 2 } } }\n",
    "\"tool\" = { tfdist = {} }\n",
    "[project]\nname = 'x'\n[tool.black]\nline-length = 1\n[tool.tfdist]\nx = 1\n",
    "[\"tool\".\"tfdis\\u0074\"]\nx = 1\n",  # spelled with an escape
    "[\"\\u0074ool\".tfdist]\nx = 1\n",
    "[tool.tfdist]\r\nx = 1\r\n",
]
NOT_HOLDING = [  # none defines tool.tfdist, and none needs parsing to know it
    "[project]\nname = \"tfdist\"\ndependencies = [\"tfdist>=0.1\"]\n",
    "[project.scripts]\ntfdist = \"tfdist.cli.main:run\"\n[tool.setuptools.package-data]\ntfdist = [\"data/*\"]\n",
    "[tool.black]\nline-length = 120\n# [tool.tfdist] is not used here\n",
    "[tool.tfdistx]\na = 1\n[tool.mytfdist]\nb = 2\n",
    "[tools.tfdist]\na = 1\n",
]


@pytest.mark.parametrize("text", HOLDING)
def test_every_spelling_of_tool_tfdist_is_parsed(text: str) -> None:
    import tomllib

    assert "tfdist" in tomllib.loads(text).get("tool", {})
    assert settings.may_hold_tool_tfdist(text)


@pytest.mark.parametrize("text", NOT_HOLDING)
def test_files_that_cannot_hold_tool_tfdist_are_skipped(text: str) -> None:
    import tomllib

    assert "tfdist" not in tomllib.loads(text).get("tool", {})
    assert not settings.may_hold_tool_tfdist(text)


def test_the_repository_pyproject_is_skipped_and_its_table_would_be_found() -> None:
    # The benchmark runs the doctor here: this file names tfdist (project name, script) but has no [tool.tfdist].
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert "tfdist" in text and not settings.may_hold_tool_tfdist(text)
    assert settings.may_hold_tool_tfdist(text + "\n[tool.tfdist.doctor]\njson = true\n")


def test_config_show_names_each_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tfdist.toml").write_text("[launch]\nworkers = 3\nmax-restarts = 2\n")
    monkeypatch.setenv("TFDIST_LAUNCH_MAX_RESTARTS", "7")
    assert main(["config", "show", "launch"]) == 0
    lines = {line.split()[2]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines["--workers"].split()[3] == "3" and lines["--workers"].endswith("(launch.workers)")
    assert lines["--max-restarts"].split()[3] == "7" and lines["--max-restarts"].endswith("env TFDIST_LAUNCH_MAX_RESTARTS")
    assert lines["--ps"].split()[3] == "0" and lines["--ps"].endswith("default")


def test_an_error_about_a_value_from_the_file_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tfdist.toml").write_text("[lock]\ntf = '2.x'\n")
    assert main(["lock", "-o", str(tmp_path / "l.lock")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{tmp_path / 'tfdist.toml'}: lock.tf '2.x' is not a version" in err
