"""Cluster resolution: TF_CONFIG, Slurm's variables, Kubernetes Indexed Job / JobSet pods."""
from __future__ import annotations

import json

import pytest

from tfdist.errors import UsageError
from tfdist.cluster.resolve import detect_source, parse_replicas, resolve_tf_config, task_environment


def slurm_env(nodelist: str, tasks_per_node: str, rank: int, **extra: str) -> dict[str, str]:
    """The variables srun sets in a task (step variables), plus overrides."""
    env = {"SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
           "SLURM_PROCID": str(rank), "SLURM_JOB_ID": "4242", "TFDIST_SLURM_PORT_BASE": "7000"}
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------------------- TF_CONFIG

def test_nothing_describes_a_cluster():
    assert resolve_tf_config({}) is None
    assert detect_source({}) is None


def test_explicit_tf_config_wins_over_slurm():
    mine = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    env = slurm_env("n[1-2]", "1(x2)", 0, TF_CONFIG=json.dumps(mine))
    assert resolve_tf_config(env) == mine
    assert detect_source(env) == "env"
    assert resolve_tf_config(env, "slurm")["task"] == {"type": "worker", "index": 0}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"cluster": []}', '{"task": 3}',
                                  '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
                                  '{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
                                  '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "x"}}'])
def test_bad_tf_config_is_a_usage_error(text):
    with pytest.raises(UsageError):
        resolve_tf_config({"TF_CONFIG": text})


def test_evaluator_may_be_listed_or_not():
    outside = {"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}
    listed = {"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}}
    assert resolve_tf_config({"TF_CONFIG": json.dumps(outside)}) == outside
    assert resolve_tf_config({"TF_CONFIG": json.dumps(listed)}) == listed  # as Kubeflow's TFJob writes it


def test_explicit_sources_say_what_is_missing():
    with pytest.raises(UsageError, match="TF_CONFIG is not set"):
        resolve_tf_config({}, "env")
    with pytest.raises(UsageError, match="srun"):
        resolve_tf_config({}, "slurm")
    with pytest.raises(UsageError, match="JOB_COMPLETION_INDEX"):
        resolve_tf_config({}, "k8s")
    with pytest.raises(UsageError, match="unknown cluster source"):
        resolve_tf_config({}, "mpi")


# ------------------------------------------------------------------------------------------------------ Slurm

def test_slurm_ranks_follow_slurms_node_order_not_text_order():
    env = slurm_env("node[9-10]", "2(x2)", 2)
    assert resolve_tf_config(env) == {
        "cluster": {"worker": ["node9:7000", "node9:7001", "node10:7000", "node10:7001"]},
        "task": {"type": "worker", "index": 2},
    }


def test_uneven_tasks_per_node():
    env = slurm_env("n[1-4]", "2(x3),1", 5, SLURM_STEP_NUM_TASKS="7", SLURMD_NODENAME="n3", SLURM_LOCALID="1")
    config = resolve_tf_config(env)
    assert config["cluster"]["worker"] == ["n1:7000", "n1:7001", "n2:7000", "n2:7001", "n3:7000", "n3:7001",
                                           "n4:7000"]
    assert config["task"] == {"type": "worker", "index": 5}


def test_cyclic_distribution():
    env = slurm_env("n[1-2]", "2(x2)", 1, SLURM_DISTRIBUTION="cyclic", SLURMD_NODENAME="n2", SLURM_LOCALID="0")
    assert resolve_tf_config(env)["cluster"]["worker"] == ["n1:7000", "n2:7000", "n1:7001", "n2:7001"]


def test_unsupported_distribution_is_refused():
    with pytest.raises(UsageError, match="not supported"):
        resolve_tf_config(slurm_env("n[1-2]", "2(x2)", 1, SLURM_DISTRIBUTION="plane=2"))


def test_port_base_derives_from_the_job_id_when_not_given():
    env = slurm_env("n1", "2", 1, SLURM_JOB_ID="123457")
    del env["TFDIST_SLURM_PORT_BASE"]
    assert resolve_tf_config(env)["cluster"]["worker"] == ["n1:24570", "n1:24571"]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"SLURMD_NODENAME": "n1"}, "SLURMD_NODENAME"),  # rank 2 runs on n2 under block
    ({"SLURM_LOCALID": "1"}, "SLURM_LOCALID"),
    ({"SLURM_STEP_NUM_TASKS": "5"}, "add up to 4"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)"}, "describe 3"),
    ({"SLURM_PROCID": "9"}, "outside"),
    ({"SLURM_PROCID": "two"}, "not an integer"),
    ({"TFDIST_SLURM_PORT_BASE": "70000"}, "port"),
    ({"TFDIST_SLURM_PS": "4"}, "cannot hold"),
])
def test_inconsistent_slurm_variables(overrides, message):
    with pytest.raises(UsageError, match=message):
        resolve_tf_config(slurm_env("n[1-2]", "2(x2)", 2, **overrides))


def test_batch_shell_is_not_a_task():
    # sbatch's shell has SLURM_PROCID=0 and the job's node list, but no step.
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "0", "SLURM_NTASKS": "4"}
    assert resolve_tf_config(env) is None
    with pytest.raises(UsageError, match="srun"):
        resolve_tf_config(env, "slurm")


def test_job_variables_serve_when_step_ones_are_missing():
    env = {"SLURM_STEP_ID": "3", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)",
           "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "TFDIST_SLURM_PORT_BASE": "9000"}
    assert resolve_tf_config(env) == {"cluster": {"worker": ["n1:9000", "n2:9000"]},
                                      "task": {"type": "worker", "index": 1}}


def test_one_task_is_not_a_cluster_unless_asked():
    env = slurm_env("n1", "1", 0)
    assert resolve_tf_config(env) is None
    assert resolve_tf_config(env, "slurm") == {"cluster": {"worker": ["n1:7000"]},
                                               "task": {"type": "worker", "index": 0}}


def test_slurm_roles_chief_ps_evaluator():
    base = {"TFDIST_SLURM_CHIEF": "1", "TFDIST_SLURM_PS": "2", "TFDIST_SLURM_EVALUATOR": "1"}
    layout = [resolve_tf_config(slurm_env("n[1-3]", "2(x3)", rank, **base))["task"] for rank in range(6)]
    assert layout == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0}, {"type": "worker", "index": 1},
                      {"type": "ps", "index": 0}, {"type": "ps", "index": 1}, {"type": "evaluator", "index": 0}]
    cluster = resolve_tf_config(slurm_env("n[1-3]", "2(x3)", 0, **base))["cluster"]
    assert cluster == {"chief": ["n1:7000"], "worker": ["n1:7001", "n2:7000"], "ps": ["n2:7001", "n3:7000"]}


# ------------------------------------------------------------------------------------------------- Kubernetes

def test_jobset_pod():
    env = {"JOB_COMPLETION_INDEX": "1", "TFDIST_K8S_REPLICAS": "chief=1,worker=2,ps=1", "JOBSET_NAME": "train",
           "REPLICATED_JOB_NAME": "worker"}
    assert resolve_tf_config(env) == {
        "cluster": {"chief": ["train-chief-0-0.train:2222"],
                    "worker": ["train-worker-0-0.train:2222", "train-worker-0-1.train:2222"],
                    "ps": ["train-ps-0-0.train:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    assert detect_source(env) == "k8s"


def test_jobset_custom_subdomain_and_port():
    env = {"JOB_COMPLETION_INDEX": "0", "TFDIST_K8S_REPLICAS": "worker=1,evaluator=1", "JOBSET_NAME": "t",
           "REPLICATED_JOB_NAME": "evaluator", "TFDIST_K8S_SUBDOMAIN": "net", "TFDIST_K8S_PORT": "3000"}
    assert resolve_tf_config(env) == {"cluster": {"worker": ["t-worker-0-0.net:3000"]},
                                      "task": {"type": "evaluator", "index": 0}}


def test_indexed_job_pod_global_index():
    env = {"JOB_COMPLETION_INDEX": "2", "TFDIST_K8S_REPLICAS": "chief=1,worker=2", "TFDIST_K8S_JOB_NAME": "digits",
           "TFDIST_K8S_SUBDOMAIN": "digits"}
    assert resolve_tf_config(env) == {
        "cluster": {"chief": ["digits-0.digits:2222"], "worker": ["digits-1.digits:2222", "digits-2.digits:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_plain_indexed_job_is_not_a_cluster_under_auto():
    assert resolve_tf_config({"JOB_COMPLETION_INDEX": "3"}) is None
    with pytest.raises(UsageError, match="TFDIST_K8S_REPLICAS"):
        resolve_tf_config({"JOB_COMPLETION_INDEX": "3"}, "k8s")


@pytest.mark.parametrize(("env", "message"), [
    ({"JOB_COMPLETION_INDEX": "5", "TFDIST_K8S_REPLICAS": "worker=2", "JOBSET_NAME": "t",
      "REPLICATED_JOB_NAME": "worker"}, "outside"),
    ({"JOB_COMPLETION_INDEX": "0", "TFDIST_K8S_REPLICAS": "worker=2", "JOBSET_NAME": "t",
      "REPLICATED_JOB_NAME": "launcher"}, "not one of the roles"),
    ({"JOB_COMPLETION_INDEX": "0", "TFDIST_K8S_REPLICAS": "worker=2"}, "TFDIST_K8S_JOB_NAME"),
    ({"JOB_COMPLETION_INDEX": "2", "TFDIST_K8S_REPLICAS": "worker=2", "TFDIST_K8S_JOB_NAME": "j",
      "TFDIST_K8S_SUBDOMAIN": "j"}, "outside"),
    ({"JOB_COMPLETION_INDEX": "x", "TFDIST_K8S_REPLICAS": "worker=2", "TFDIST_K8S_JOB_NAME": "j",
      "TFDIST_K8S_SUBDOMAIN": "j"}, "not an integer"),
])
def test_inconsistent_pod_variables(env, message):
    with pytest.raises(UsageError, match=message):
        resolve_tf_config(env)


@pytest.mark.parametrize("text", ["worker", "gpu=2", "worker=two", "ps=1", "chief=0,worker=0"])
def test_bad_replicas(text):
    with pytest.raises(UsageError):
        parse_replicas(text)


# ------------------------------------------------------------------------------------------ task environment

def test_task_environment_exports_what_the_task_needs():
    env = task_environment(slurm_env("n[1-2]", "1(x2)", 1), legacy_keras_available=True)
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
    assert (env["TFDIST_TASK_TYPE"], env["TFDIST_TASK_INDEX"]) == ("worker", "1")
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert env["SLURM_PROCID"] == "1"


def test_task_environment_keeps_the_callers_choices():
    given = '{"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0}}'
    env = task_environment({"TF_CONFIG": given, "TF_USE_LEGACY_KERAS": "0"}, legacy_keras_available=True)
    assert env["TF_CONFIG"] == given and env["TF_USE_LEGACY_KERAS"] == "0"
    assert "TF_USE_LEGACY_KERAS" not in task_environment({}, legacy_keras_available=False)
    assert "TF_CONFIG" not in task_environment({})


# Which tasks started through `tfdist tf-config --exec` (the Slurm script's and tfdist k8s pods' way) get gRPC
# keep-alive: every task of a cluster with parameter servers, as under `tfdist launch --ps`; never over a value the
# task's environment already has (the submitter's, the image's, the manifest's), even an empty one.
_PS_CONFIG = json.dumps({"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]},
                         "task": {"type": "worker", "index": 1}})
_MINE = "grpc.keepalive_time_ms=1"


@pytest.mark.parametrize(("environ", "expected"), [
    (slurm_env("n[1-3]", "1(x3)", 0, TFDIST_SLURM_PS="1"), "tfdist's"),           # worker:0 of a Slurm PS job
    (slurm_env("n[1-3]", "1(x3)", 2, TFDIST_SLURM_PS="1"), "tfdist's"),           # the parameter server itself
    (slurm_env("n[1-3]", "1(x3)", 0, TFDIST_SLURM_CHIEF="1", TFDIST_SLURM_PS="1"), "tfdist's"),
    ({"TF_CONFIG": _PS_CONFIG}, "tfdist's"),                                        # TFJob: the operator's TF_CONFIG
    ({"JOB_COMPLETION_INDEX": "0", "TFDIST_K8S_REPLICAS": "chief=1,worker=2,ps=1", "JOBSET_NAME": "d",
      "REPLICATED_JOB_NAME": "ps"}, "tfdist's"),                                   # a JobSet's parameter server
    (slurm_env("n[1-3]", "1(x3)", 0), None),                                         # MultiWorkerMirrored: no ps
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})}, None),
    ({}, None),                                                                      # no cluster at all
    (slurm_env("n[1-3]", "1(x3)", 0, TFDIST_SLURM_PS="1", TF_GRPC_DEFAULT_OPTIONS=_MINE), _MINE),
    ({"TF_CONFIG": _PS_CONFIG, "TF_GRPC_DEFAULT_OPTIONS": ""}, ""),                 # empty: the user's "off"
])
def test_task_environment_gives_ps_clusters_grpc_keepalive_unless_set(environ, expected):
    from tfdist.cluster.grpc_keepalive import keepalive_options

    want = keepalive_options() if expected == "tfdist's" else expected
    assert task_environment(environ).get("TF_GRPC_DEFAULT_OPTIONS") == want
