from __future__ import annotations

import json

import pytest

from tfdist.errors import UsageError
from tfdist.launch.spec import LaunchSpec
from tfdist.launch.local.taskenv import layout_for, plan_tasks
from tfdist.launch.local.layout import ClusterLayout, TaskId, make_tf_config, tf_config_for

ROLE_MIXES = [
    dict(workers=1),
    dict(workers=2),
    dict(workers=3, chief=True),
    dict(workers=2, ps=1, chief=True),
    dict(workers=2, ps=2, chief=True, evaluator=True),
    dict(workers=0, chief=True),
    dict(workers=2, evaluator=True),
]


def _layout(**mix):
    spec = LaunchSpec(command=("python", "x.py"), **mix)
    n = int(spec.chief) + spec.workers + spec.ps + int(spec.evaluator)
    return layout_for(spec, list(range(20000, 20000 + n)))


@pytest.mark.parametrize("mix", ROLE_MIXES, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()))
def test_every_task_sees_the_same_cluster_and_its_own_role(mix):
    layout = _layout(**mix)
    configs = [json.loads(tf_config_for(layout, t)) for t in layout.tasks()]
    clusters = {json.dumps(c["cluster"], sort_keys=True) for c in configs}
    assert len(clusters) == 1, "all tasks must agree on the cluster"
    cluster = configs[0]["cluster"]
    assert "evaluator" not in cluster
    assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == [(t.type, t.index) for t in layout.tasks()]
    all_addresses = [a for addrs in cluster.values() for a in addrs]
    assert len(all_addresses) == len(set(all_addresses)), "no two tasks share a port"
    assert len(cluster.get("worker", [])) == mix.get("workers", 1)
    assert len(cluster.get("ps", [])) == mix.get("ps", 0)
    assert ("chief" in cluster) == mix.get("chief", False)


def test_leader_is_chief_or_worker_zero():
    assert _layout(workers=2, chief=True).leader == TaskId("chief", 0)
    assert _layout(workers=2).leader == TaskId("worker", 0)


@pytest.mark.parametrize("bad", [
    lambda: ClusterLayout(),
    lambda: ClusterLayout(chief=("a:1", "b:2")),
    lambda: make_tf_config({"worker": ["a:1"]}, "worker", 1),
    lambda: make_tf_config({"worker": ["a:1"]}, "master", 0),
    lambda: make_tf_config({"worker": ["a:1"], "evaluator": ["b:2"]}, "worker", 0),
])
def test_impossible_layouts_are_usage_errors(bad):
    with pytest.raises(UsageError):
        bad()


def test_plans_carry_identity_restart_count_and_user_env_wins():
    spec = LaunchSpec(command=("python", "x.py"), workers=2, env=(("OMP_NUM_THREADS", "7"), ("A", "1")),
                      metrics_port=9000, job_name="mine")
    plans = [p.environment() for p in plan_tasks(spec, layout_for(spec, [1, 2]), run_id="r", attempt=3,
                                                  log_dir="/logs", legacy_keras=True)]
    assert [p["TFDIST_TASK_INDEX"] for p in plans] == ["0", "1"]
    assert all(p["TFDIST_RESTART_COUNT"] == "3" for p in plans)
    assert all(p["TF_USE_LEGACY_KERAS"] == "1" for p in plans)
    assert [p["TFDIST_METRICS_PORT"] for p in plans] == ["9000", "9001"]
    assert plans[0]["TFDIST_JOB_NAME"] == "mine" and plans[1]["A"] == "1"
    assert plans[0]["OMP_NUM_THREADS"] == "7", "the user's --env wins over the launcher's defaults"
    assert plans[1]["TFDIST_ERROR_FILE"] == "/logs/worker-1.error.json"


def test_user_env_cannot_override_the_protocol():
    spec = LaunchSpec(command=("python", "x.py"), workers=1, env=(("TFDIST_HEARTBEAT_FILE", "/x"),))
    with pytest.raises(UsageError, match="--env TFDIST_HEARTBEAT_FILE"):
        plan_tasks(spec, layout_for(spec, [1]), run_id="r", attempt=0, log_dir="/logs")


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.parametrize("mix", ROLE_MIXES[:5], ids=str)
def test_tensorflow_own_resolver_accepts_our_tf_config(mix, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    layout = _layout(**mix)
    for task in layout.tasks():
        monkeypatch.setenv("TF_CONFIG", tf_config_for(layout, task))
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        spec = resolver.cluster_spec().as_dict()
        assert resolver.task_type == task.type and resolver.task_id == task.index
        assert spec == {k: list(v) for k, v in layout.cluster().items()}
