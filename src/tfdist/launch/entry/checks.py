"""Every refusal made before anything starts that needs more than one option's value: GPUs that are not there, a
job's roles (``--chief``, ``--ps N``, ``--evaluator``) on one machine and across machines.

Across machines every agent places the job's tasks by :mod:`tfdist.cluster.placement` over the round's machines
(node-rank order; a host file's ``roles=`` or ``--node-roles`` pins a machine). ParameterServerStrategy's cluster
spec is fixed for the job's life, so a job with roles runs on a fixed number of machines: an elastic range is refused
by name. Each check raises :class:`~tfdist.errors.UsageError` naming the flag (exit 2).
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

from tfdist.cluster.hostfile import HostEntry
from tfdist.cluster.placement import MachineSlots, Placement, place
from tfdist.errors import UsageError
from tfdist.launch.local.taskenv import visible_gpus
from tfdist.launch.options import LaunchOptions, parse_nnodes

_FIXED = "a job with a chief, parameter servers or an evaluator has a fixed cluster spec (ParameterServerStrategy)"


def check_gpus_exist(per_task: int | None, environ: Mapping[str, str] = os.environ) -> None:
    """--gpus-per-task on a machine where no GPU is visible would silently train on the CPU: refuse it."""
    if per_task and not visible_gpus(environ):
        hidden = environ.get("CUDA_VISIBLE_DEVICES")
        why = f"CUDA_VISIBLE_DEVICES={hidden!r} hides them all" if hidden is not None else "nvidia-smi lists none"
        raise UsageError(f"--gpus-per-task {per_task}: no GPU is visible here ({why})",
                         hint="drop --gpus-per-task to train on the CPU, or check tfdist doctor",
                         reference="launch-no-gpus")


def check_ps_has_chief(options: LaunchOptions) -> None:
    """On one machine and across machines alike. Raises UsageError naming --ps."""
    if options.ps and not options.chief:
        raise UsageError(f"--ps {options.ps} needs --chief: under ParameterServerStrategy the chief is the "
                         "coordinator that runs the training; without one every task waits forever",
                         hint="add --chief (the workers and parameter servers only serve)")


def check_roles(options: LaunchOptions, hostfile: bool) -> None:
    """Refuse what a job with roles cannot do across machines, naming the flag (exit 2)."""
    if options.role_counts() is None:
        if options.node_roles:
            raise UsageError("--node-roles pins this machine to roles of a job with --chief/--ps/--evaluator, and "
                             "this job has none", hint="add the roles, or drop --node-roles")
        return
    check_ps_has_chief(options)
    if hostfile:
        if options.host_discovery_script:
            raise UsageError(f"--host-discovery-script cannot be used with --chief/--ps/--evaluator: {_FIXED}",
                             hint="list the machines in --hostfile or --hosts")
        return
    low, high = parse_nnodes(options.nnodes or "1")
    if low != high:
        raise UsageError(f"--nnodes {options.nnodes} cannot be an elastic range with --chief/--ps/--evaluator: "
                         f"{_FIXED}", hint=f"give a fixed number of machines, e.g. --nnodes {high}")


def hostfile_placement(options: LaunchOptions, entries: Sequence[HostEntry], source: str) -> list[Placement]:
    """Where each task of a host-file job runs (``[]``: workers only), checked before anything starts."""
    counts = options.role_counts()
    if counts is None:
        pinned = next((e for e in entries if e.roles), None)
        if pinned is not None:
            raise UsageError(f"{source}: {pinned.name} has roles={','.join(pinned.roles)}, and the job has no "
                             "--chief/--ps/--evaluator", hint="add the roles to the command, or drop roles=")
        return []
    if options.min_nodes is not None and options.min_nodes < len(entries):
        raise UsageError(f"--min-nodes {options.min_nodes} cannot be used with --chief/--ps/--evaluator: {_FIXED}",
                         hint="drop --min-nodes: every listed host is needed")
    return place([MachineSlots(e.name, e.slots or options.workers, e.roles) for e in entries], counts)
