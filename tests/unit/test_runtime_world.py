"""runtime.world_size() and runtime.per_replica_batch(): the job's size, and a global batch kept across sizes."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tfdist import runtime


def _cluster(monkeypatch, workers: int, chief: bool = False) -> None:
    cluster = {"worker": [f"10.0.0.{i}:2222" for i in range(workers)]}
    if chief:
        cluster["chief"] = ["10.0.0.99:2222"]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))


@pytest.mark.parametrize("workers, chief, size", [(1, False, 1), (2, False, 2), (3, True, 4), (6, False, 6)])
def test_world_size_counts_training_workers(monkeypatch, workers, chief, size):
    _cluster(monkeypatch, workers, chief)
    assert runtime.world_size() == size


def test_world_size_outside_a_cluster_is_one():
    assert runtime.world_size() == 1


@pytest.mark.parametrize("workers, global_batch, expected", [(1, 64, 64), (2, 64, 32), (4, 64, 16), (3, 64, 21),
                                                              (128, 64, 1)])
def test_per_replica_batch_keeps_the_global_batch(monkeypatch, workers, global_batch, expected):
    _cluster(monkeypatch, workers)
    assert runtime.per_replica_batch(global_batch) == expected


def test_per_replica_batch_counts_a_strategys_replicas(monkeypatch):
    _cluster(monkeypatch, 2)
    assert runtime.per_replica_batch(64, SimpleNamespace(num_replicas_in_sync=8)) == 8


def test_per_replica_batch_refuses_nonsense():
    with pytest.raises(ValueError):
        runtime.per_replica_batch(0)
