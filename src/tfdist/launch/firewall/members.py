"""Pure: what a round's task plans say the firewall must guard (their ports) and admit (the cluster's machines)."""
from __future__ import annotations

import json
from typing import Iterable

from tfdist.protocol import TaskPlan


def host_of(address: str) -> str:
    """``"198.18.0.1:2222"`` -> ``"198.18.0.1"``; ``"[2001:db8::1]:2222"`` -> ``"2001:db8::1"``."""
    host = address.rpartition(":")[0] if ":" in address else address
    return host.strip("[]")


def task_ports(plans: Iterable[TaskPlan]) -> set[int]:
    """This machine's TensorFlow ports (each task's TF_CONFIG address) and its tasks' metrics ports."""
    ports: set[int] = set()
    for plan in plans:
        ports.add(int(plan.address.rpartition(":")[2]))
        if plan.metrics_port is not None:
            ports.add(plan.metrics_port)
    return ports


def cluster_hosts(plans: Iterable[TaskPlan]) -> set[str]:
    """Every machine in the round's cluster, as the tasks' TF_CONFIG names them: the machines that must reach
    this one's TensorFlow ports (the collectives connect worker to worker)."""
    hosts: set[str] = set()
    for plan in plans:
        for addresses in json.loads(plan.tf_config).get("cluster", {}).values():
            hosts.update(host_of(a) for a in addresses)
    return hosts
