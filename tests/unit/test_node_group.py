"""One machine's share of a multi-machine round, as planned (nothing is started): its tasks, their TF_CONFIG, and
this machine's GPUs split among this machine's workers."""
from __future__ import annotations

import json

from tfdist.launch.elastic.node_group import NodeGroup
from tfdist.protocol import Command
from tfdist.launch.spec import Timeouts

CLUSTER = ("198.18.0.1:4000", "198.18.0.1:4001", "198.18.0.2:4000", "198.18.0.2:4001")


def node1(tmp_path, env=None, gpus_per_task=None, base_env=None) -> NodeGroup:
    return NodeGroup(command=Command("train.py", ("--x",), interpreter="/usr/bin/python3"), workers=CLUSTER,
                      first_index=2, slots=2, node_rank=1, round_=3, job="j", log_dir=str(tmp_path),
                      env=env or {}, legacy_keras=True, max_restarts=0, timeouts=Timeouts(),
                      gpus_per_task=gpus_per_task, base_env=base_env or {})


def test_the_machine_runs_its_own_workers_of_the_whole_cluster(tmp_path):
    plans = node1(tmp_path).plans
    assert [p.name for p in plans] == ["worker:2", "worker:3"]
    configs = [json.loads(p.tf_config) for p in plans]
    assert all(c["cluster"]["worker"] == list(CLUSTER) for c in configs)
    assert [c["task"]["index"] for c in configs] == [2, 3]
    assert all(p.attempt == 3 for p in plans)


def test_local_gpus_are_split_among_local_workers(tmp_path):
    plans = node1(tmp_path, base_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}).plans
    assert [p.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["0,1", "2,3"]
    plans = node1(tmp_path, base_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, gpus_per_task=1).plans
    assert [p.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["0", "1"]


def test_a_users_choice_of_devices_is_kept(tmp_path):
    plans = node1(tmp_path, env={"CUDA_VISIBLE_DEVICES": "3"}, base_env={"CUDA_VISIBLE_DEVICES": "0,1"}).plans
    assert [p.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["3", "3"]


def test_no_gpus_no_device_variable(tmp_path):
    assert all("CUDA_VISIBLE_DEVICES" not in p.extra_env for p in node1(tmp_path, base_env={"PATH": "/bin"}).plans)
