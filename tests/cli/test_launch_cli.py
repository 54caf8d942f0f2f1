from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tfdist.cli.main import main

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


def test_dry_run_prints_every_task_and_starts_nothing(capsys, tmp_path):
    out_dir = tmp_path / "out"
    rc = main(["launch", "-n", "2", "--ps", "1", "--chief", "--evaluator", "--dry-run", "--", FAKE, str(out_dir)])
    text = capsys.readouterr().out
    assert rc == 0
    configs = [json.loads(line.split("=", 1)[1]) for line in text.splitlines() if "TF_CONFIG=" in line]
    assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == \
        [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("evaluator", 0)]
    assert all("evaluator" not in c["cluster"] for c in configs)
    assert text.count("command: ") == 5 and "none started" in text
    assert not out_dir.exists(), "a dry run must not start any task"


def test_port_base_in_dry_run(capsys):
    assert main(["launch", "-n", "2", "--port-base", "23450", "--dry-run", FAKE, "x"]) == 0
    assert '"worker": ["127.0.0.1:23450", "127.0.0.1:23451"]' in capsys.readouterr().out


def test_env_twin_sets_a_flag(capsys, monkeypatch):
    monkeypatch.setenv("TFDIST_LAUNCH_WORKERS", "3")
    assert main(["launch", "--dry-run", FAKE, "x"]) == 0
    assert capsys.readouterr().out.count("command: ") == 3


@pytest.mark.parametrize("argv, needle", [
    (["launch", "--workers", "two", FAKE], "--workers"),
    (["launch", "--bogus", FAKE], "--bogus"),
    (["launch", "-n", "2", "/no/such/script.py"], "/no/such/script.py"),
    (["launch", "-n", "0", FAKE], "--chief"),
    (["launch", "--env", "NOVALUE", FAKE], "--env"),
    (["launch"], "no training script"),
])
def test_bad_usage_is_one_line_and_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_help_lists_env_twins_and_task_variables(capsys):
    assert main(["launch", "--help"]) == 0
    out = capsys.readouterr().out
    assert "TFDIST_LAUNCH_MAX_RESTARTS" in out and "TFDIST_RESTART_COUNT" in out


def test_cli_help_never_imports_tensorflow():
    code = ("import sys; from tfdist.cli.main import main; "
            "[main([c, '--help']) for c in ('launch',)]; main(['--help']); "
            "main(['launch', '-n', '2', '--dry-run', %r, 'x']); "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)" % FAKE)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False"
