"""Which tasks get gRPC keep-alive (TF_GRPC_DEFAULT_OPTIONS), and that the user's value always wins."""
from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.cluster.grpc_keepalive import keepalive_env, keepalive_options
from tfdist.launch.local.taskenv import shared_env
from tfdist.launch.spec import LaunchSpec
from tfdist.protocol import GRPC_DEFAULT_OPTIONS, PROTECTED, VARIABLES

MINE = "grpc.keepalive_time_ms=1"


@pytest.mark.parametrize(("ps", "environ", "expected"), [
    (1, {}, {GRPC_DEFAULT_OPTIONS: keepalive_options()}),
    (3, {"OTHER": "x"}, {GRPC_DEFAULT_OPTIONS: keepalive_options()}),
    (0, {}, {}),                                   # MultiWorkerMirrored: no parameter servers, nothing set
    (1, {GRPC_DEFAULT_OPTIONS: MINE}, {}),         # the launcher's own environment already has one: left alone
    (1, {GRPC_DEFAULT_OPTIONS: ""}, {}),           # even an empty one (the user's way to switch it off)
])
def test_keepalive_env_table(ps, environ, expected):
    assert keepalive_env(ps, environ) == expected


def test_the_options_are_what_tensorflow_parses():
    # tsl's CreateDefaultChannelArguments: comma-separated name=value, integer values unquoted.
    pairs = dict(option.split("=") for option in keepalive_options().split(","))
    assert set(pairs) == {"grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms"}
    assert all(value.isdigit() and int(value) > 0 for value in pairs.values())
    # Never more pings than a TensorFlow server (gRPC defaults) accepts without data: no max_pings_without_data=0.
    assert "max_pings_without_data" not in keepalive_options()


def test_every_task_of_a_ps_job_gets_it_and_env_wins():
    ps_job = LaunchSpec(command=("x",), workers=2, ps=1, chief=True)
    assert shared_env(ps_job, None)[GRPC_DEFAULT_OPTIONS] == keepalive_options()
    assert GRPC_DEFAULT_OPTIONS not in shared_env(LaunchSpec(command=("x",), workers=2), None)
    assert GRPC_DEFAULT_OPTIONS not in shared_env(ps_job, None, environ={GRPC_DEFAULT_OPTIONS: MINE})
    user = LaunchSpec(command=("x",), workers=2, ps=1, chief=True, env=((GRPC_DEFAULT_OPTIONS, MINE),))
    assert shared_env(user, None)[GRPC_DEFAULT_OPTIONS] == MINE
    assert GRPC_DEFAULT_OPTIONS in VARIABLES and GRPC_DEFAULT_OPTIONS not in PROTECTED


def test_the_keepalive_values_are_written_once():
    # One fact, one place: the launcher (taskenv) and tf-config --exec (the Slurm and Kubernetes jobs) import it.
    # TF_GRPC_DEFAULT_OPTIONS's syntax is name=value (the etcd client's own channel options are another matter).
    src = Path(__file__).resolve().parents[2] / "src" / "tfdist"
    owners = sorted(str(path.relative_to(src)) for path in src.rglob("*.py")
                    if "keepalive_time_ms=" in path.read_text(encoding="utf-8"))
    assert owners == ["cluster/grpc_keepalive.py"]
