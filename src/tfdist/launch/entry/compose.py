"""From :class:`~tfdist.launch.options.LaunchOptions` to what the launcher's rooms run: the single-machine
supervisor's :class:`~tfdist.launch.spec.LaunchSpec`, one machine's :class:`~tfdist.launch.elastic.agent.AgentSpec`,
the rendezvous' :class:`~tfdist.launch.elastic.membership_types.RendezvousSettings`.

The options stay a leaf (they know flags and values only); this module is where they meet the rooms, so each
conversion is written once and every way in (one machine, rendezvous, host file) uses the same one.
"""
from __future__ import annotations

from typing import Mapping

from tfdist.cluster.placement import parse_roles
from tfdist.launch.elastic.agent import AgentSpec
from tfdist.launch.elastic.etcd_store import EtcdConf
from tfdist.launch.elastic.membership_types import RendezvousSettings
from tfdist.launch.elastic.node_group import TaskOptions
from tfdist.launch.options import LaunchOptions, parse_endpoint, parse_nnodes
from tfdist.launch.spec import LaunchSpec, Timeouts
from tfdist.protocol import Command


def launch_spec(options: LaunchOptions, command: Command, *, host: str | None = None) -> LaunchSpec:
    """The single-machine supervisor's spec; ``host``: the advertised address when the entry resolved one."""
    return LaunchSpec(
        command=command, workers=options.workers, ps=options.ps, chief=options.chief, evaluator=options.evaluator,
        max_restarts=options.max_restarts, restart_window=options.restart_window, backoff=options.backoff,
        log_dir=options.log_dir, tee=options.tee, port_base=options.port_base,
        host=options.host if host is None else host, env=options.env_pairs(), gpus_per_task=options.gpus_per_task,
        nccl_debug=options.nccl_debug, metrics_port=options.metrics_port, metrics_host=options.metrics_host,
        launcher_metrics_port=options.launcher_metrics_port, allow_keras3=options.allow_keras3,
        warm_spares=options.warm_spares, thread_caps=options.thread_caps, bootstrap=options.bootstrap,
        restart_after_training=options.restart_after_training, job_name=options.job_name,
        flight_recorder=options.flight_recorder,
        timeouts=Timeouts(grace=options.grace_period, hang=options.hang_timeout))


def rendezvous_settings(options: LaunchOptions, job: str, min_nodes: int, max_nodes: int) -> RendezvousSettings:
    """The rendezvous' job shape and clocks, from the same values every agent of the job gets."""
    return RendezvousSettings.for_job(job, min_nodes, max_nodes, node_timeout=options.node_timeout,
                                      rdzv_timeout=options.rdzv_timeout, first_round_wait=options.rdzv_last_call,
                                      max_restarts=options.max_restarts, grace_period=options.grace_period,
                                      restart_window=options.restart_window, backoff=options.backoff)


def agent_spec(options: LaunchOptions, command: Command, *, job: str, secret: bytes, legacy_keras: bool,
               versions: Mapping[str, str] | None = None, etcd: EtcdConf | None = None,
               tasks: TaskOptions | None = None) -> AgentSpec:
    """This machine's agent in a rendezvous job (``--nnodes``/``--rdzv-endpoint``). ``job`` and ``secret``: as read
    from ``--rdzv-secret-file``/``--rdzv-id``; ``etcd``: the parsed ``--rdzv-conf`` of the etcd backend (its first
    endpoint is the agent's endpoint); ``tasks``: the per-task options (``TaskOptions``)."""
    low, high = parse_nnodes(options.nnodes or "1")
    host, port = etcd.endpoints[0] if etcd is not None else parse_endpoint(options.rdzv_endpoint or "")
    return AgentSpec(
        job=job, secret=secret, endpoint_host=host, endpoint_port=port, min_nodes=low, max_nodes=high,
        slots=options.workers, command=command, node_rank=options.node_rank, node_address=options.node_address,
        node_name=options.node_name, node_timeout=options.node_timeout, rdzv_timeout=options.rdzv_timeout,
        first_round_wait=options.rdzv_last_call, grace_period=options.grace_period,
        hang_timeout=options.hang_timeout, gpus_per_task=options.gpus_per_task,
        warm_spares=options.warm_spares and (options.max_restarts > 0 or low < high),
        max_restarts=options.max_restarts, env=options.env_pairs(), log_dir=options.log_dir,
        legacy_keras=legacy_keras, checkpoint_dir=options.checkpoint_dir, watch_stdin=options.agent_watch_stdin,
        versions=dict(versions or {}), etcd=etcd, restart_window=options.restart_window, backoff=options.backoff,
        port_base=options.port_base, launcher_metrics_port=options.launcher_metrics_port,
        roles=options.role_counts(),
        node_roles=parse_roles(options.node_roles, "--node-roles") if options.node_roles else (),
        **({"tasks": tasks} if tasks is not None else {}))
