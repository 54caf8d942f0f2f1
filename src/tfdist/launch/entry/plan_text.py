"""``tfdist launch --dry-run``: what would run where, printed without starting or contacting anything.

- one machine: every task's TF_CONFIG, environment and command, planned by the supervisor's own parts.
- rendezvous mode (``--nnodes``/``--rdzv-endpoint``): this machine's share, planned by the agent's own parts
  (:class:`~tfdist.launch.elastic.agent.node_group.NodeGroup`), so each task's environment and command are the ones a real
  round would use; only TF_CONFIG waits for the rendezvous, which sends the whole cluster when a round starts.
- host-file mode: for each host, the ssh command that would start its agent and the workers it would run.
"""
from __future__ import annotations

import json
import os
import shlex
from typing import TYPE_CHECKING, Sequence

from tfdist.launch.entry.compose import Serving
from tfdist.launch.spec import LaunchSpec
from tfdist.status import ExitStatus

if TYPE_CHECKING:
    from tfdist.cluster.placement import Placement
    from tfdist.launch.elastic.agent.spec import AgentSpec
    from tfdist.launch.local.layout import ClusterLayout
    from tfdist.launch.ssh.driver import DriverSpec
    from tfdist.protocol import TaskPlan

_SERVED = {Serving.ENDPOINT_OWNER: "served by the machine that owns that address",
           Serving.ETCD: "kept by the etcd cluster there; no machine of the job serves it",
           Serving.LAUNCHER: "served by the launcher that starts the agents"}

# Stands for what only exists once the job starts: the rendezvous' port, chosen by the launcher that serves it.
ENDPOINT_PLACEHOLDER = "<this-machine>:<port-chosen-at-start>"


def print_single_plan(spec: LaunchSpec, legacy_keras: bool) -> int:
    """Every task of a one-machine job, on the ports it would get now."""
    from tfdist.cluster import TfConfig
    from tfdist.launch.local.layout import role_meanings
    from tfdist.launch.local.ports import free_ports, ports_from_base
    from tfdist.launch.local.taskenv import count_tasks, layout_for, plan_tasks, visible_gpus

    n = count_tasks(spec)
    ports = ports_from_base(spec.port_base, n, spec.host) if spec.port_base else free_ports(n, spec.host)
    layout = layout_for(spec, ports)
    plans = plan_tasks(spec, layout, run_id="dry-run", attempt=0, log_dir=spec.log_dir or "<log-dir>",
                       gpus=visible_gpus(os.environ), legacy_keras=legacy_keras, environ=os.environ)
    print("roles:")
    for line in role_meanings(chief=spec.chief, workers=spec.workers, ps=spec.ps, evaluator=spec.evaluator):
        print(f"  {line}")
    for plan in plans:
        print(f"[{plan.name}] {plan.address}")
        print_task_plan(plan, json.dumps(TfConfig.parse(plan.tf_config).to_dict(), sort_keys=True))
    print(f"dry run: {len(plans)} task(s) planned, none started")
    return ExitStatus.SUCCESS


def print_machine_plan(spec: AgentSpec, legacy_keras: bool, serving: Serving) -> int:
    """This machine's tasks of a rendezvous-mode job (``serving``: who serves its rendezvous)."""
    from tfdist.cluster.address import format_address
    from tfdist.launch.console.tflog import LEVEL_VARIABLE
    from tfdist.launch.elastic.agent.node_group import NodeGroup
    from tfdist.launch.spec import Timeouts

    rank = spec.node_rank
    first = (rank or 0) * spec.slots
    # Stand-in addresses (TEST-NET-1, never a real machine) for the cluster the rendezvous will send.
    workers = tuple(f"192.0.2.{i % 250 + 1}:{1024 + i}" for i in range(first + spec.slots))
    roles = machine_roles(spec)
    group = NodeGroup(command=spec.command, workers=workers, first_index=first, slots=spec.slots,
                      node_rank=rank or 0, round_=0, job=spec.job, log_dir=f"{spec.log_dir or '<log-dir>'}/attempt-0",
                      env=dict(spec.env), legacy_keras=legacy_keras, max_restarts=spec.max_restarts,
                      timeouts=Timeouts(grace=spec.grace_period, hang=spec.hang_timeout),
                      gpus_per_task=spec.gpus_per_task, options=spec.tasks, roles=roles[0] if roles else None)
    endpoint = format_address(spec.endpoint_host, spec.endpoint_port)
    machines = f"{spec.min_nodes}" if spec.min_nodes == spec.max_nodes else f"{spec.min_nodes}:{spec.max_nodes}"
    print(f"dry run: job {spec.job}, {machines} machine(s) meeting at the rendezvous {endpoint} "
          f"({_SERVED[serving]})")
    where = f"node rank {rank}" if rank is not None else "node rank by order of arrival"
    ports = (f"ports {spec.port_base}-{spec.port_base + spec.slots - 1}" if spec.port_base is not None
             else "free ports chosen when a round starts")
    named = "".join(f", {what} {value}" for what, value in (("name", spec.node_name), ("address", spec.node_address))
                    if value)
    print(f"this machine: {where}{named}, {spec.slots} worker(s), {ports}")
    if roles:
        pins = f" (pinned here: {','.join(spec.node_roles)})" if spec.node_roles else ""
        print(f"roles, placed by node rank{pins} (shown with {spec.slots} slot(s) and no pins on the other machines; "
              f"each round places them over its machines): {roles[1]}")
    print(f"timeouts: grace {spec.grace_period:g}s, hang {spec.hang_timeout:g}s, node {spec.node_timeout:g}s, "
          f"rendezvous {spec.rdzv_timeout:g}s, last call {spec.first_round_wait:g}s")
    print(_restarts(spec.max_restarts, spec.restart_window, spec.backoff))
    shown = "shown here and logged" if spec.tasks.show_output else "logged only (--log-dir without --tee)"
    print(f"output: {shown} in {spec.log_dir or 'a temporary folder, removed when the job succeeds'}")
    if spec.launcher_metrics_port is not None:
        print(f"launcher metrics: {format_address(spec.tasks.metrics_host, spec.launcher_metrics_port)}")
    if spec.checkpoint_dir:
        print(f"backups: the latest complete one in {spec.checkpoint_dir} is copied to machines that lack it")
    print(f"every task: {LEVEL_VARIABLE}={group.group.base_env.get(LEVEL_VARIABLE, '(inherited)')}")
    for plan in group.plans:
        index = f"{plan.task_type} {plan.task_index}" if rank is not None or roles else \
            f"worker {plan.task_index - first} + the workers of the machines ranked before it"
        print(f"[{plan.name}]")
        print_task_plan(plan, f"<the whole cluster, sent by the rendezvous when a round starts; this task: {index}>")
    print(f"dry run: {len(group.plans)} task(s) planned on this machine, none started, no connection made")
    return ExitStatus.SUCCESS


def print_hostfile_plan(spec: DriverSpec, placement: Sequence[Placement] = ()) -> int:
    """Every host's agent of a host-file job (``placement``: where each task of a job with roles runs, from
    :func:`tfdist.cluster.placement.place`)."""
    from tfdist.launch.ssh.driver import agent_ssh_command

    print(f"dry run: job {spec.job} on {len(spec.hosts)} host(s) ({spec.min_nodes} needed to train); the rendezvous "
          "is served here, on a port chosen at start")
    settings = spec.settings
    print(_restarts(settings.max_restarts, settings.restart_window, settings.backoff))
    first = 0
    for rank, entry in enumerate(spec.hosts):
        slots = entry.slots or spec.slots
        names = ", ".join(f"worker:{i}" for i in range(first, first + slots))
        if placement:
            names = ", ".join(str(p.task) for p in sorted(placement, key=lambda p: p.slot)
                              if p.machine == entry.name) or "(no task)"
            names += f" (pinned: {','.join(entry.roles)})" if entry.roles else ""
        print(f"[host {entry.name}] node rank {rank}: {names}")
        print(f"  ssh: {shlex.join(agent_ssh_command(spec, rank, ENDPOINT_PLACEHOLDER))}")
        first += slots
    if placement:
        print("roles are placed by node rank: chief, then parameter servers, then the evaluator on the first hosts "
              "that take them (roles= pins a host), workers in the slots left")
    tasks = len(placement) if placement else first
    print(f"dry run: {tasks} task(s) planned on {len(spec.hosts)} host(s), none started, no connection made")
    return ExitStatus.SUCCESS


def _restarts(budget: int, window: float, backoff: float) -> str:
    within = f" within {window:g}s" if window > 0 else ""
    wait = f", {backoff:g}s before the first (doubling, at most 30s)" if backoff > 0 else ""
    return f"restarts after a failure: up to {budget}{within}{wait}"


def print_task_plan(plan: TaskPlan, tf_config: str) -> None:
    """One task's dry-run lines below its heading: TF_CONFIG as given, the rest of its environment, its command.
    Shared by the single-machine and the multi-machine dry runs, so both show a task the same way."""
    print(f"  TF_CONFIG={tf_config}")
    for key, value in plan.environment().items():
        if key != "TF_CONFIG":
            print(f"  {key}={value}")
    print(f"  command: {shlex.join(plan.command.argv())}")


def machine_roles(spec: AgentSpec) -> tuple[tuple[ClusterLayout, tuple[str, ...]], str] | None:
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
