"""The cluster model: roles, the leader rule, TF_CONFIG, host lists and resolution from Slurm / Kubernetes.

Imports no TensorFlow; the launcher, the runtime, ``deploy`` and the CLI all take these facts from here, and no
other module parses TF_CONFIG (tests/unit/test_cluster_single_facts.py checks that).
"""
from __future__ import annotations

from tfdist.cluster.address import check_host, check_port, format_address, is_loopback, parse_address
from tfdist.cluster.resolve import detect_source, resolve_cluster, resolve_tf_config, task_environment
from tfdist.cluster.roles import ALL_ROLES, TRAINING_ROLES, TaskId, leader_of
from tfdist.cluster.tf_config import TfConfig, make_tf_config

__all__ = [
    "ALL_ROLES", "TRAINING_ROLES", "TaskId", "TfConfig", "check_host", "check_port", "is_loopback",
    "detect_source", "format_address", "leader_of", "make_tf_config", "parse_address", "resolve_cluster",
    "resolve_tf_config", "task_environment",
]
