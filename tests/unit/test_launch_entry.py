"""The launch's entry (tfdist.launch.entry): a launch driven from Python as `tfdist launch` drives it, and the rules
written once in it (warm spares, who serves the rendezvous, the tasks' TensorFlow log level). Nothing is started."""
from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import REPO_ROOT
from tfdist.cli.main import main
from tfdist.errors import UsageError
from tfdist.launch import entry
from tfdist.launch.elastic.etcd.conf import parse_conf
from tfdist.launch.entry.compose import Serving, agent_spec, task_options, tf_log_level, who_serves
from tfdist.launch.entry.parity import changed_flags
from tfdist.launch.options import DEFAULTS, LaunchOptions
from tfdist.launch.spec import warm_spares_wanted
from tfdist.protocol import Command

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
PYTHON = Command(target=FAKE, interpreter="/usr/bin/python3")
PROGRAM = Command(target="/bin/true")


def test_a_dry_run_driven_from_python_prints_what_the_cli_prints(capsys):
    options = LaunchOptions(target=(FAKE, "x"), workers=2, port_base=23470, dry_run=True)
    assert entry.run(options) == 0
    from_python = capsys.readouterr().out
    assert main(["launch", "-n", "2", "--port-base", "23470", "--dry-run", FAKE, "x"]) == 0
    from_cli = capsys.readouterr().out
    assert from_python == from_cli and "dry run: 2 task(s) planned, none started" in from_python


def test_a_python_caller_gets_the_same_refusal_as_the_cli(capsys):
    # Across machines the table refuses by name what the caller set; from Python, "set" means "not the default".
    options = LaunchOptions(target=(FAKE,), hosts="a,b", host="0.0.0.0", dry_run=True)
    with pytest.raises(UsageError, match="--host is not supported across machines with --hostfile/--hosts"):
        entry.run(options)
    assert main(["launch", "--hosts", "a,b", "--host", "0.0.0.0", "--dry-run", FAKE]) == 2
    assert "--host is not supported across machines with --hostfile/--hosts" in capsys.readouterr().err


def test_changed_flags_names_the_cli_parameters():
    assert changed_flags(DEFAULTS) == {}
    assert changed_flags(dataclasses.replace(DEFAULTS, live=False, target=("t.py",))) == {}  # as --no-live
    assert changed_flags(dataclasses.replace(DEFAULTS, env=("A=1",), live=True, workers=2)) == {
        "env_pairs": "--env", "live": "--live", "workers": "--workers"}


@pytest.mark.parametrize("asked, max_restarts, elastic, is_python, wanted", [
    (True, 1, False, True, True),  # a restart can come
    (True, 0, True, True, True),  # an elastic job's next round can come
    (True, 0, False, True, False),  # no next group: nothing to warm
    (True, 3, True, False, False),  # a program, not Python: a spare is a Python interpreter
    (False, 3, True, True, False),  # --no-warm-spares
])
def test_the_one_warm_spares_rule(asked, max_restarts, elastic, is_python, wanted):
    assert warm_spares_wanted(asked, max_restarts=max_restarts, elastic=elastic, is_python=is_python) is wanted


@pytest.mark.parametrize("command, wanted", [(PYTHON, True), (PROGRAM, False)])
def test_an_agent_gets_warm_spares_only_for_python_tasks(command, wanted):
    options = dataclasses.replace(DEFAULTS, max_restarts=1, nnodes="2", rdzv_endpoint="h:1")
    assert agent_spec(options, command, job="j", secret=b"", legacy_keras=False).warm_spares is wanted


@pytest.mark.parametrize("changes, serving", [
    ({"hosts": "a,b"}, Serving.LAUNCHER),
    ({"hostfile": "hosts.txt", "rdzv_backend": "etcd"}, Serving.LAUNCHER),
    ({"nnodes": "2", "rdzv_endpoint": "h:1"}, Serving.ENDPOINT_OWNER),
    ({"nnodes": "2", "rdzv_endpoint": "h:1", "rdzv_backend": "etcd"}, Serving.ETCD),
])
def test_who_serves_the_rendezvous(changes, serving):
    assert who_serves(dataclasses.replace(DEFAULTS, **changes)) is serving


def test_the_agent_serves_only_where_the_rule_says():
    options = dataclasses.replace(DEFAULTS, nnodes="2", rdzv_endpoint="h:1")
    assert agent_spec(options, PYTHON, job="j", secret=b"", legacy_keras=False).serve is True
    etcd = parse_conf("127.0.0.1:2379", (), 10.0, {})
    options = dataclasses.replace(options, rdzv_backend="etcd", rdzv_endpoint="127.0.0.1:2379")
    assert agent_spec(options, PYTHON, job="j", secret=b"", legacy_keras=False, etcd=etcd).serve is False


@pytest.mark.parametrize("flag, environ, level", [
    ("warning", {"TF_CPP_MIN_LOG_LEVEL": "0"}, 1),  # the flag wins
    ("auto", {"TF_CPP_MIN_LOG_LEVEL": "1", "CUDA_VISIBLE_DEVICES": "0"}, 1),  # then what the user exported
    ("auto", {"CUDA_VISIBLE_DEVICES": "0"}, 2),  # GPUs: error lines matter
    ("auto", {"CUDA_VISIBLE_DEVICES": ""}, 3),  # none: the only error lines at start are the failed CUDA probe
])
def test_the_one_tf_log_level_rule(flag, environ, level):
    assert tf_log_level(flag, environ) == level
    options = dataclasses.replace(DEFAULTS, tf_log_level=flag)
    assert task_options(options, named=False, environ=environ).tf_log_level == level  # across machines, the same

