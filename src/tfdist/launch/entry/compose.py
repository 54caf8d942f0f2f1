"""From :class:`~tfdist.launch.options.LaunchOptions` to what the launcher's rooms run: the single-machine
supervisor's :class:`~tfdist.launch.spec.LaunchSpec`, one machine's :class:`~tfdist.launch.elastic.agent.agent.AgentSpec`
and its :class:`~tfdist.launch.elastic.agent.node_group.TaskOptions`, the rendezvous'
:class:`~tfdist.launch.elastic.rendezvous.membership_types.RendezvousSettings`; and the rules that more than one way in needs:
the tasks' TensorFlow log level, who serves the rendezvous.

The options stay a leaf (they know flags and values only); this module is where they meet the rooms, so each
conversion and each rule is written once and every way in (one machine, rendezvous, host file) uses the same one.
The multi-machine rooms are imported where they are used: a launch on one machine never loads them.
"""
from __future__ import annotations

import os
from enum import Enum
from typing import TYPE_CHECKING, Mapping

from tfdist.launch.console.tflog import LEVEL_VARIABLE, choose_level
from tfdist.launch.local.taskenv import visible_gpus
from tfdist.launch.options import LaunchOptions, Mode, parse_endpoint, parse_nnodes
from tfdist.launch.spec import LaunchSpec, Timeouts, warm_spares_wanted
from tfdist.protocol import Command

if TYPE_CHECKING:
    from tfdist.launch.elastic.agent.spec import AgentSpec
    from tfdist.launch.elastic.etcd.conf import EtcdConf
    from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings
    from tfdist.launch.elastic.agent.node_group import TaskOptions


def tf_log_level(flag: str, environ: Mapping[str, str] = os.environ) -> int:
    """The ``TF_CPP_MIN_LOG_LEVEL`` of the job's tasks for ``--tf-log-level flag`` (the rule is
    :func:`tfdist.launch.console.tflog.choose_level`). The GPUs are looked for only when the choice depends on them
    (``auto`` and nothing exported): ``nvidia-smi`` takes a while."""
    has_gpus = flag == "auto" and LEVEL_VARIABLE not in environ and bool(visible_gpus(environ))
    return choose_level(flag, environ, has_gpus)


class Serving(str, Enum):
    """Who serves a job's rendezvous, decided once for every way in (:func:`who_serves`)."""

    LAUNCHER = "launcher"  # host file: the machine that starts the agents over ssh serves it
    ENDPOINT_OWNER = "endpoint-owner"  # --rdzv-endpoint: the agent on the machine that owns the endpoint's address
    ETCD = "etcd"  # --rdzv-backend etcd: the etcd cluster holds the job; no machine serves it


def who_serves(options: LaunchOptions) -> Serving:
    if options.mode is Mode.HOSTFILE:
        return Serving.LAUNCHER
    return Serving.ETCD if options.rdzv_backend == "etcd" else Serving.ENDPOINT_OWNER


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
        flight_recorder=options.flight_recorder, firewall=options.firewall,
        timeouts=Timeouts(grace=options.grace_period, hang=options.hang_timeout))


def rendezvous_settings(options: LaunchOptions, job: str, min_nodes: int, max_nodes: int) -> RendezvousSettings:
    """The rendezvous' job shape and clocks, from the same values every agent of the job gets."""
    from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings

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
    from tfdist.cluster.placement import parse_roles
    from tfdist.launch.elastic.agent.spec import AgentSpec

    low, high = parse_nnodes(options.nnodes or "1")
    host, port = etcd.endpoints[0] if etcd is not None else parse_endpoint(options.rdzv_endpoint or "")
    return AgentSpec(
        job=job, secret=secret, endpoint_host=host, endpoint_port=port, min_nodes=low, max_nodes=high,
        slots=options.workers, command=command, node_rank=options.node_rank, node_address=options.node_address,
        node_name=options.node_name, node_timeout=options.node_timeout, rdzv_timeout=options.rdzv_timeout,
        first_round_wait=options.rdzv_last_call, grace_period=options.grace_period,
        hang_timeout=options.hang_timeout, gpus_per_task=options.gpus_per_task,
        warm_spares=warm_spares_wanted(options.warm_spares, max_restarts=options.max_restarts, elastic=low < high,
                                       is_python=command.is_python),
        serve=who_serves(options) is Serving.ENDPOINT_OWNER,
        max_restarts=options.max_restarts, env=options.env_pairs(), log_dir=options.log_dir,
        legacy_keras=legacy_keras, checkpoint_dir=options.checkpoint_dir, watch_stdin=options.agent_watch_stdin,
        versions=dict(versions or {}), etcd=etcd, restart_window=options.restart_window, backoff=options.backoff,
        port_base=options.port_base, launcher_metrics_port=options.launcher_metrics_port,
        roles=options.role_counts(),
        node_roles=parse_roles(options.node_roles, "--node-roles") if options.node_roles else (),
        **({"tasks": tasks} if tasks is not None else {}))


def task_options(options: LaunchOptions, *, named: bool, environ: Mapping[str, str] = os.environ) -> TaskOptions:
    """The single-machine flags that shape each of this machine's tasks in a rendezvous job. ``named``: the user gave
    ``--job-name`` (else each agent labels its run with the job id)."""
    from tfdist.launch.elastic.agent.node_group import TaskOptions

    return TaskOptions(job_name=options.job_name if named else None, thread_caps=bool(options.thread_caps),
                       nccl_debug=bool(options.nccl_debug), metrics_port=options.metrics_port,
                       metrics_host=options.metrics_host, tf_log_level=tf_log_level(options.tf_log_level, environ),
                       show_output=bool(options.tee) or options.log_dir is None,
                       flight_recorder=bool(options.flight_recorder), firewall=bool(options.firewall))
