"""The cluster model: TfConfig (round trip, validation, hostile input), the leader rule, addresses, precedence."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tfdist.cluster import (
    TaskId, TfConfig, format_address, leader_of, parse_address, resolve_cluster,
)
from tfdist.cluster.address import is_loopback
from tfdist.cluster.hostlist import expand_hostlist, expand_tasks_per_node
from tfdist.cluster.limits import MAX_HOSTS, MAX_TASKS
from tfdist.errors import UsageError

GOOD = {"cluster": {"chief": ["c:1"], "worker": ["w0:2", "[::1]:3"], "ps": ["p.example.org:4"]},
        "task": {"type": "worker", "index": 1}}


# ------------------------------------------------------------------------------------------------------ round trip

@pytest.mark.parametrize("data", [
    GOOD,
    {"cluster": {"worker": ["10.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}},
    {"cluster": {"worker": ["a:1"], "evaluator": ["e:9"]}, "task": {"type": "evaluator", "index": 0}},
    {"cluster": {}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc",
     "environment": "cloud"},
    {"cluster": {"worker": ["a:1", "b:1"]}},
])
def test_round_trip(data):
    parsed = TfConfig.parse(json.dumps(data))
    assert parsed.to_dict() == data
    assert TfConfig.parse(parsed.to_json()) == parsed


def test_build_is_what_the_launcher_writes():
    built = TfConfig.build({"chief": ["c:1"], "worker": ["w:2"]}, "worker", 0)
    assert json.loads(built.to_json()) == {"cluster": {"chief": ["c:1"], "worker": ["w:2"]},
                                           "task": {"type": "worker", "index": 0}}
    assert not built.is_chief and built.worker_id == 1 and built.num_workers == 2


# ------------------------------------------------------------------------------------------------------ validation

def _with(**changes):
    data = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        *keys, last = path.split("__")
        node = data
        for key in keys:
            node = node[key]
        node[last] = value
    return json.dumps(data)


@pytest.mark.parametrize(("text", "message"), [
    ("", "not valid JSON"),
    ("{", "not valid JSON"),
    ("[]", "JSON object"),
    ('"x"', "JSON object"),
    (_with(task__index=True), "task index True"),
    (_with(task__index=1.0), "task index 1.0"),
    (_with(task__index=-1), "task index -1"),
    (_with(task__index="1"), "task index 1"),
    (_with(task__index=None), "task index None"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1e400}}', "task index inf"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": NaN}}', "unusable number"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": ' + "9" * 5000 + "}}",
     "unusable number"),
    (_with(task__index=9), "not in its cluster"),
    (_with(task__type="master"), "task type 'master'"),
    (_with(task__type=["worker"]), "task type"),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"index": 0}}), "'type' and 'index'"),
    (json.dumps({"cluster": {"worker": [1, None]}}), "not a 'host:port' string"),
    (json.dumps({"cluster": {"worker": "a:1"}}), "must be a list"),
    (json.dumps({"cluster": ["a:1"]}), "'cluster' must be an object"),
    (json.dumps({"cluster": {"master": ["a:1"]}}), "unknown role"),
    (json.dumps({"cluster": {"worker": ["a"]}}), "not 'host:port'"),
    (json.dumps({"cluster": {"worker": ["a:0"]}}), "not a TCP port"),
    (json.dumps({"cluster": {"worker": ["a:65536"]}}), "not a TCP port"),
    (json.dumps({"cluster": {"worker": ["a:99999999999"]}}), "not a TCP port"),
    (json.dumps({"cluster": {"worker": ["::1:2222"]}}), "not .host:port."),
    (json.dumps({"cluster": {"worker": ["[zz]:1"]}}), "not an IPv6 address"),
    (json.dumps({"cluster": {"worker": ["[10.0.0.1]:1"]}}), "not an IPv6 address"),
    (json.dumps({"cluster": {"worker": ["a b:1"]}}), "not a host name"),
    (json.dumps({"cluster": {"worker": ["a\nb:1"]}}), "not a host name"),
    (json.dumps({"cluster": {"worker": ["x" * 300 + ":1"]}}), "not a host name"),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "rpc_layer": "grpc\n"}), "printable"),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "extra": 1}), "unknown key 'extra'"),
])
def test_invalid_tf_config_is_a_usage_error_naming_the_variable(text, message):
    with pytest.raises(UsageError, match=message) as caught:
        TfConfig.parse(text)
    assert "TF_CONFIG" in caught.value.message


@pytest.mark.parametrize("text", [
    "[" * 5000 + "]" * 5000,
    '{"cluster": ' * 5000 + "{}" + "}" * 5000,
    '{"a": "' + "[" * 5000 + '"}',  # brackets inside a string are not nesting: refused for its key, not its depth
    "x" * (5 * 1024 * 1024),
])
def test_hostile_tf_config_is_refused_without_recursion(text):
    with pytest.raises(UsageError) as caught:
        TfConfig.parse(text)
    assert "TF_CONFIG" in caught.value.message


def test_too_many_tasks_are_refused():
    addresses = [f"h:{1 + i % 60000}" for i in range(MAX_TASKS + 1)]
    with pytest.raises(UsageError, match="more than"):
        TfConfig.parse(json.dumps({"cluster": {"worker": addresses}}))


def test_hostile_tf_config_through_the_cli_is_one_line_and_exit_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0] if "src" in sys.path[0] else ":".join(sys.path),
           "TF_CONFIG": "[" * 5000 + "]" * 5000}
    done = subprocess.run([sys.executable, "-m", "tfdist", "tf-config"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "TF_CONFIG" in done.stderr


# ----------------------------------------------------------------------------------------------------- leader rule

@pytest.mark.parametrize(("tasks", "leader"), [
    ([("chief", 0), ("worker", 0), ("worker", 1)], ("chief", 0)),
    ([("worker", 0), ("worker", 1)], ("worker", 0)),
    ([("worker", 1), ("worker", 0)], ("worker", 0)),
    ([("ps", 0), ("worker", 0), ("chief", 0)], ("chief", 0)),
    ([("worker", 0), ("ps", 0), ("evaluator", 0)], ("worker", 0)),
    ([("worker", 1)], None),
    ([("ps", 0), ("evaluator", 0)], None),
    ([], None),
])
def test_leader_rule(tasks, leader):
    assert leader_of(TaskId(*t) for t in tasks) == (TaskId(*leader) if leader else None)


@pytest.mark.parametrize(("cluster", "task", "is_chief"), [
    ({}, None, True),  # a lone process leads itself
    ({"worker": ["a:1", "b:1"]}, ("worker", 0), True),
    ({"worker": ["a:1", "b:1"]}, ("worker", 1), False),
    ({"chief": ["c:1"], "worker": ["a:1"]}, ("chief", 0), True),
    ({"chief": ["c:1"], "worker": ["a:1"]}, ("worker", 0), False),
    ({"worker": ["a:1"], "ps": ["p:1"]}, ("ps", 0), False),
    ({"worker": ["a:1"]}, ("evaluator", 0), False),
])
def test_is_chief_follows_the_leader_rule(cluster, task, is_chief):
    config = TfConfig.from_dict({"cluster": cluster, "task": {"type": task[0], "index": task[1]} if task else None})
    assert config.is_chief is is_chief


# ------------------------------------------------------------------------------------------------------- addresses

@pytest.mark.parametrize(("host", "port", "text"), [
    ("node1", 2222, "node1:2222"), ("::1", 2222, "[::1]:2222"), ("10.0.0.1", 1, "10.0.0.1:1"),
    ("fd00::5", 8089, "[fd00::5]:8089"),
])
def test_addresses_round_trip_with_ipv6_in_brackets(host, port, text):
    assert format_address(host, port) == text
    assert parse_address(text, "X") == (host, port)


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True),
                                                ("localhost", True), ("0.0.0.0", False), ("::", False),
                                                ("10.1.2.3", False), ("node1", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


# ----------------------------------------------------------------------------------------- hostile scheduler input

def _slurm(**overrides):
    env = {"SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
           "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "7"}
    env.update(overrides)
    return env


@pytest.mark.parametrize(("overrides", "variable"), [
    ({"SLURM_STEP_NODELIST": "r[0-999999]n[0-999999]"}, "SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_NODELIST": "r[0-9]" * 40}, "SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_NODELIST": "n[" + ",".join(["0-60000"] * 50) + "]"}, "SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_NODELIST": "x" * 300}, "SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_NODELIST": "n[1-2]$(id)"}, "SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_TASKS_PER_NODE": "999999999(x2)"}, "SLURM_STEP_TASKS_PER_NODE"),
    ({"SLURM_STEP_TASKS_PER_NODE": "1(x999999999)"}, "SLURM_STEP_TASKS_PER_NODE"),
    ({"SLURM_STEP_TASKS_PER_NODE": "1" + "0" * 5000}, "SLURM_STEP_TASKS_PER_NODE"),
    ({"SLURM_STEP_TASKS_PER_NODE": "4000,4000", "SLURM_STEP_NUM_TASKS": "8000"}, None),
    ({"SLURM_PROCID": "1" * 5000}, "SLURM_PROCID"),
    ({"SLURM_STEP_NUM_TASKS": "²"}, "SLURM_STEP_NUM_TASKS"),
    ({"TFDIST_SLURM_PS": "99999999999"}, "TFDIST_SLURM_PS"),
    ({"TFDIST_SLURM_PORT_BASE": "99999"}, "TFDIST_SLURM_PORT_BASE"),
    ({"SLURM_JOB_ID": "9" * 5000}, "SLURM_JOB_ID"),
    ({"SLURM_LOCALID": "²"}, None),  # not a number Slurm would write: ignored, as a missing one is
    ({"SLURM_LOCALID": "7" * 5000}, None),
    ({"SLURM_DISTRIBUTION": "x" * 10000}, "SLURM_DISTRIBUTION"),
])
def test_hostile_slurm_environment_is_refused_quickly(overrides, variable):
    started = time.process_time()
    try:
        resolve_cluster(_slurm(**overrides), "slurm")
    except UsageError as refused:
        if variable:
            assert variable in refused.message
    else:
        assert variable is None  # only the large-but-sane case may pass
    assert time.process_time() - started < 5  # a generous ceiling: the old code ran for hours


def test_host_list_cap_is_on_the_product():
    assert len(expand_hostlist("r[1-256]n[1-256]")) == MAX_HOSTS
    with pytest.raises(UsageError, match="more than"):
        expand_hostlist("r[1-256]n[1-257]")
    with pytest.raises(UsageError, match="more than"):
        expand_hostlist("a[1-65536],b")
    with pytest.raises(UsageError, match="implausibly large"):
        expand_tasks_per_node("1(x65536),1")


def _pod(**overrides):
    env = {"JOB_COMPLETION_INDEX": "0", "TFDIST_K8S_REPLICAS": "worker=2", "JOBSET_NAME": "demo",
           "REPLICATED_JOB_NAME": "worker"}
    env.update(overrides)
    return env


@pytest.mark.parametrize(("overrides", "variable"), [
    ({"TFDIST_K8S_PORT": "99999"}, "TFDIST_K8S_PORT"),
    ({"TFDIST_K8S_PORT": "0"}, "TFDIST_K8S_PORT"),
    ({"TFDIST_K8S_PORT": "22 22"}, "TFDIST_K8S_PORT"),
    ({"TFDIST_K8S_REPLICAS": "worker=999999999"}, "TFDIST_K8S_REPLICAS"),
    ({"TFDIST_K8S_REPLICAS": "worker=40000,ps=40000"}, "TFDIST_K8S_REPLICAS"),
    ({"TFDIST_K8S_REPLICAS": "worker=" + "9" * 5000}, "TFDIST_K8S_REPLICAS"),
    ({"TFDIST_K8S_REPLICAS": "worker=²"}, "TFDIST_K8S_REPLICAS"),
    ({"JOB_COMPLETION_INDEX": "1e400"}, "JOB_COMPLETION_INDEX"),
    ({"JOBSET_NAME": "demo\nx"}, "JOBSET_NAME"),
    ({"JOBSET_NAME": "Demo:1"}, "JOBSET_NAME"),
    ({"TFDIST_K8S_SUBDOMAIN": "a b"}, "TFDIST_K8S_SUBDOMAIN"),
])
def test_hostile_pod_environment_names_the_variable(overrides, variable):
    with pytest.raises(UsageError) as refused:
        resolve_cluster(_pod(**overrides), "k8s")
    assert variable in refused.value.message


# ------------------------------------------------------------------------------------------------------ precedence

def test_resolution_precedence_tf_config_then_slurm_then_kubernetes():
    tf = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["t:1"]}, "task": {"type": "worker", "index": 0}})}
    both = {**_slurm(), **_pod()}
    assert resolve_cluster({**tf, **both}).cluster["worker"] == ("t:1",)
    assert resolve_cluster(both).cluster["worker"][0].startswith("n1:")
    assert resolve_cluster(_pod()).cluster["worker"][0].startswith("demo-worker-0-0.demo:")
    assert resolve_cluster({}) is None
    # An explicit source wins over what auto would pick.
    assert resolve_cluster({**tf, **both}, "k8s").cluster["worker"][0].startswith("demo-")
    assert resolve_cluster({**tf, **both}, "slurm").cluster["worker"][0].startswith("n1:")
