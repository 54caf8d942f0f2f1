"""``--chief``, ``--ps N``, ``--evaluator`` across machines: the checks made before anything starts.

Every agent places the job's tasks by :mod:`tfdist.cluster.placement` over the round's machines (node-rank order;
a host file's ``roles=`` or ``--node-roles`` pins a machine). ParameterServerStrategy's cluster spec is fixed for the
job's life, so a job with roles runs on a fixed number of machines: an elastic range is refused by name.
"""
from __future__ import annotations

from typing import Any, Sequence

from tfdist.errors import UsageError
from tfdist.launch.options import LaunchOptions, parse_nnodes

_FIXED = "a job with a chief, parameter servers or an evaluator has a fixed cluster spec (ParameterServerStrategy)"


def check_roles(options: LaunchOptions, hostfile: bool) -> None:
    """Refuse what a job with roles cannot do across machines, naming the flag (exit 2)."""
    from tfdist.cli.launch import check_ps_has_chief

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


def hostfile_placement(options: LaunchOptions, entries: Sequence[Any], source: str) -> list[Any]:
    """Where each task of a host-file job runs (``[]``: workers only), checked before anything starts."""
    from tfdist.cluster.placement import MachineSlots, place

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


def machine_roles(spec: Any) -> tuple[Any, str] | None:
    """For a rendezvous dry run: (cluster layout and this machine's tasks, the placement) of a round in which this
    machine has its node rank (else 0) and the other machines as many slots as this one and no pins."""
    from tfdist.launch.elastic.rendezvous.round_roles import describe, local_tasks, round_layout

    if spec.roles is None:
        return None
    rank = spec.node_rank or 0
    machines = max(spec.max_nodes, rank + 1)
    nodes = [(r, f"node{r}", "192.0.2.1", spec.slots, list(spec.node_roles) if r == rank else [])
             for r in range(machines)]
    # Stand-in addresses (TEST-NET-1, never a real machine) for the cluster the rendezvous will send.
    workers = [f"192.0.2.{i % 250 + 1}:{1024 + i}" for i in range(machines * spec.slots)]
    layout, placements = round_layout(nodes, workers, spec.roles)
    return (layout, local_tasks(placements, rank)), describe(placements)
