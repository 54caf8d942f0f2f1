"""`tfdist tf-config`: printing the resolved TF_CONFIG, its --json document, and the internal --exec mode."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tfdist.cli.main import main

SLURM_TASK = {"SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "node[9-10]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
              "SLURM_PROCID": "1", "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "node10", "SLURM_LOCALID": "0"}


@pytest.fixture
def slurm_task(monkeypatch):
    for name, value in SLURM_TASK.items():
        monkeypatch.setenv(name, value)


def test_prints_bare_tf_config_under_slurm(slurm_task, capsys):
    assert main(["tf-config"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"cluster": {"worker": ["node9:20770", "node10:20770"]},
                               "task": {"type": "worker", "index": 1}}
    assert out.count("\n") == 1  # one line, fit for export TF_CONFIG="$(tfdist tf-config)"


def test_json_document_names_the_source(slurm_task, capsys):
    assert main(["tf-config", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "tfdist.tf-config" and document["schema_version"] == 1
    assert document["source"] == "slurm"
    assert document["tf_config"]["task"] == {"type": "worker", "index": 1}


def test_explicit_tf_config_wins(slurm_task, monkeypatch, capsys):
    mine = {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(mine))
    assert main(["tf-config", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["source"], document["tf_config"]) == ("env", mine)
    assert main(["tf-config", "--from", "slurm"]) == 0
    assert json.loads(capsys.readouterr().out)["task"]["index"] == 1


def test_nothing_to_resolve_is_exit_1_with_one_line(capsys):
    assert main(["tf-config"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("tfdist tf-config: error: nothing here describes a cluster")
    assert captured.err.count("\n") == 1
    assert main(["tf-config", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["tf_config"] is None


def test_inconsistent_input_is_a_usage_error(slurm_task, monkeypatch, capsys):
    monkeypatch.setenv("SLURMD_NODENAME", "node9")
    assert main(["tf-config"]) == 2
    assert "SLURMD_NODENAME" in capsys.readouterr().err
    assert main(["tf-config", "--from", "k8s"]) == 2
    assert "JOB_COMPLETION_INDEX" in capsys.readouterr().err


def test_stray_arguments_and_bad_source(capsys):
    assert main(["tf-config", "extra"]) == 2
    assert main(["tf-config", "--from", "mpi"]) == 2
    assert main(["tf-config", "--exec"]) == 2
    assert "--exec needs a command" in capsys.readouterr().err


def test_source_env_twin(slurm_task, monkeypatch, capsys):
    monkeypatch.setenv("TFDIST_TF_CONFIG_FROM", "env")
    assert main(["tf-config"]) == 2  # no TF_CONFIG although Slurm is there
    assert "TF_CONFIG is not set" in capsys.readouterr().err


def _run_exec(env_extra: dict[str, str], *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TFDIST_", "TF_"))}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "tfdist", "tf-config", "--exec", "--", *command],
                          env=env, capture_output=True, text=True, timeout=60)


def test_exec_exports_tf_config_and_replaces_itself():
    show = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in "
            "('TF_CONFIG', 'TFDIST_TASK_TYPE', 'TFDIST_TASK_INDEX', 'TF_USE_LEGACY_KERAS')})); "
            "print(os.getpid())")
    result = _run_exec(SLURM_TASK, sys.executable, "-c", show)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout.splitlines()[0])
    assert json.loads(shown["TF_CONFIG"])["cluster"]["worker"] == ["node9:20770", "node10:20770"]
    assert (shown["TFDIST_TASK_TYPE"], shown["TFDIST_TASK_INDEX"]) == ("worker", "1")
    import importlib.util
    assert shown["TF_USE_LEGACY_KERAS"] == ("1" if importlib.util.find_spec("tf_keras") else None)


def test_exec_passes_the_exit_status_through_and_reports_a_missing_command():
    assert _run_exec({}, sys.executable, "-c", "raise SystemExit(143)").returncode == 143
    missing = _run_exec({}, "/nonexistent/python-xyz")
    assert missing.returncode == 1
    assert "cannot run '/nonexistent/python-xyz'" in missing.stderr
