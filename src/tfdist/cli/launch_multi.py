"""``tfdist launch`` across machines: the flags, their checks, and the hand-off to the agent or the ssh driver.

Two ways in, one engine: ``--hostfile/--hosts`` (this machine serves the rendezvous and starts an agent on every
host over ssh) and ``--nnodes ... --rdzv-endpoint`` (the same command on every machine; the machine that owns the
endpoint's address serves the rendezvous). Both end in :class:`tfdist.launch.elastic.agent.agent.Agent` on every machine.
"""
from __future__ import annotations

import os
import secrets
from typing import Any, Callable

import click

from tfdist.cli.common import PathText, option
from tfdist.errors import UsageError

from tfdist.launch.options import DEFAULT_RDZV_PORT, DEFAULTS as D
from tfdist.launch.options import LaunchOptions, Mode, job_id, parse_endpoint, parse_nnodes  # noqa: F401 - the CLI's
DISCOVERY_MAX_NODES = 256  # a discovery script may add hosts later: the job takes up to this many machines

_OPTIONS = [
    option("--hostfile", type=PathText(dir_okay=False), help="Run on the machines listed here (host [slots=N] "
           "lines), started over ssh."),
    option("--hosts", help="The host list on the command line: a,b:2 (host[:slots])."),
    option("--include", help="With --hostfile/--hosts: only these hosts (comma-separated)."),
    option("--exclude", help="With --hostfile/--hosts: leave out these hosts (comma-separated)."),
    option("--host-cooldown-range", default=D.host_cooldown_range, show_default=True, metavar="LOW:HIGH",
           help="With --hostfile/--hosts: a lost host is probed over ssh again after LOW seconds, doubling up to "
           "HIGH while it does not answer; one that answers rejoins at the next round."),
    option("--host-discovery-script", type=PathText(dir_okay=False), help="A program printing host[ slots=N] "
           "lines, re-run every 5 s: new hosts join, hosts no longer listed leave (instead of --hostfile/--hosts)."),
    option("--min-nodes", type=click.IntRange(1), help="With --hostfile/--hosts: keep training while at least "
           "this many machines remain (default: all)."),
    option("--nnodes", help="Machines in the job: N, or MIN:MAX for an elastic job (same on every machine)."),
    option("--rdzv-endpoint", help="HOST[:PORT] of the rendezvous; the machine that owns HOST serves it "
           f"(default port {DEFAULT_RDZV_PORT})."),
    option("--rdzv-backend", type=click.Choice(["tfdist", "etcd"]), default=D.rdzv_backend, show_default=True,
           help="tfdist: the built-in rendezvous, served by the machine that owns --rdzv-endpoint; etcd: an etcd v3 "
           "cluster (--rdzv-endpoint host:port[,host:port...]), no single machine the job depends on."),
    option("--rdzv-conf", multiple=True, metavar="KEY=VALUE", help="etcd backend settings: cacert=, cert=, key= "
           "(TLS), user= with password_file= (etcd user auth), prefix=, timeout=. Repeat, or comma-separate."),
    option("--rdzv-id", help="Job id, the same on every machine (refused otherwise); default: derived from the "
           "job secret."),
    option("--rdzv-secret-file", help="With --rdzv-endpoint: the job secret (a file only you can read, the same on "
           "every machine; make one with `python -m tfdist.launch.elastic.secret PATH`). Only machines holding it "
           "can join."),
    option("--rdzv-insecure", is_flag=True, help="With --rdzv-endpoint: no job secret; anyone who can reach the "
           "endpoint can join or disturb the job. Only on a network you trust."),
    option("--node-rank", type=click.IntRange(0, 9999), help="This machine's rank (0 holds worker 0, the chief); "
           "default: order of arrival."),
    option("--node-address", help="Address the other machines reach this one at (default: the address on the "
           "route to the rendezvous host)."),
    option("--node-name", help="Name of this machine in reports (default: its address)."),
    option("--node-roles", metavar="ROLES", help="With --chief/--ps/--evaluator: this machine takes only these roles "
           "(chief,ps,evaluator,worker; comma-separated), as a host file's roles=. Default: any, placed by node rank."),
    option("--node-timeout", type=click.FloatRange(0.2), default=D.node_timeout, show_default=True,
           help="Seconds without a keep-alive after which a machine counts as lost."),
    option("--rdzv-timeout", type=click.FloatRange(1), default=D.rdzv_timeout, show_default=True,
           help="Seconds to wait for at least MIN machines (at start and after a loss) before failing."),
    option("--rdzv-last-call", type=click.FloatRange(0), default=D.rdzv_last_call, show_default=True,
           help="Once MIN machines have joined, seconds to wait for up to MAX before the first round."),
    option("--checkpoint-dir", type=PathText(file_okay=False), help="The script's model directory: when the "
           "machines do not share it, the latest complete backup is copied to each machine before a restart."),
    option("--agent-watch-stdin", is_flag=True, hidden=True, help="Stop when stdin closes (set over ssh)."),
]


def multi_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for decorate in reversed(_OPTIONS):
        func = decorate(func)
    return func


def job_secret(options: LaunchOptions) -> tuple[bytes, str]:
    """(secret, job id) for rendezvous mode, either backend: the etcd backend seals every record with the secret
    (HMAC), as the built-in one authenticates every connection. Raises UsageError (exit 2) naming the flag or the
    file."""
    from tfdist.launch.elastic import secret

    if options.rdzv_secret_file and options.rdzv_insecure:
        raise UsageError("give --rdzv-secret-file or --rdzv-insecure, not both")
    if options.rdzv_insecure:
        if not options.rdzv_id:
            raise UsageError("--rdzv-insecure needs --rdzv-id", hint="the same job id on every machine")
        from tfdist.launch.elastic.tcp.auth import INSECURE_SECRET

        return INSECURE_SECRET, job_id(options.rdzv_id)
    if not options.rdzv_secret_file:
        raise UsageError("--rdzv-endpoint needs a job secret: --rdzv-secret-file PATH",
                         hint=f"make one with `{secret.NEW_SECRET_COMMAND}` and copy it to every machine; "
                         "--rdzv-insecure runs without one on a network you trust")
    value = secret.load(options.rdzv_secret_file)
    return value, job_id(options.rdzv_id) if options.rdzv_id else secret.derived_job_id(value)


def run_multi(options: LaunchOptions) -> int:
    """Check every flag against the across-machines table (:mod:`tfdist.cli.launch_parity`), then run (or with
    ``dry_run`` print) the driver (host file) or this machine's agent (rendezvous). Nothing starts, and nothing is
    contacted, before every check passed."""
    from tfdist.launch.local.command_check import keras_plan, resolve_command
    from tfdist.launch.spec import LaunchSpec

    command = resolve_command(options.target, module=options.module, no_python=options.no_python)
    env = options.env_pairs()
    legacy_keras = keras_plan(LaunchSpec(command=command, workers=2, allow_keras3=options.allow_keras3, env=env),
                              os.environ)
    from tfdist.cli.launch_parity import HOSTFILE, RENDEZVOUS, refuse_unsupported
    from tfdist.protocol import refuse_protected

    mode = HOSTFILE if options.hostfile or options.hosts or options.host_discovery_script else RENDEZVOUS
    if mode == HOSTFILE and (options.rdzv_endpoint or options.nnodes):
        raise UsageError("--hostfile/--hosts and --nnodes/--rdzv-endpoint are two ways in: use one",
                         hint="a host file starts every machine over ssh; --rdzv-endpoint is run on each machine")
    given = _given_flags()
    refuse_unsupported(mode, given)
    from tfdist.cli.launch_roles import check_roles

    check_roles(options, hostfile=mode == HOSTFILE)
    if options.workers < 1:
        raise UsageError("-n/--workers must be at least 1 per machine")
    refuse_protected(name for name, _ in env)  # TF_CONFIG and the other protocol variables: before anything starts
    if sum(bool(getattr(options, k)) for k in ("hostfile", "hosts", "host_discovery_script")) > 1:
        raise UsageError("give one of --hostfile, --hosts and --host-discovery-script")
    if mode == RENDEZVOUS:
        from tfdist.cli.launch import _check_gpus_exist

        _check_gpus_exist(options.gpus_per_task)  # as on one machine: never train on the CPU unawares
    tasks = _task_options(options, "job_name" in given, options.tf_log_level if mode == RENDEZVOUS else None)
    if mode == HOSTFILE:
        return _run_hostfile(options, options.agent_args())
    if not options.rdzv_endpoint:
        raise UsageError("--nnodes needs --rdzv-endpoint HOST:PORT", hint="the same endpoint on every machine")
    parse_nnodes(options.nnodes or "1")  # its error first
    etcd = None
    if options.rdzv_backend == "etcd":
        from tfdist.launch.elastic.etcd.store import parse_conf

        etcd = parse_conf(options.rdzv_endpoint, options.rdzv_conf, options.node_timeout,
                          dict(os.environ))
    else:
        if options.rdzv_conf:
            raise UsageError("--rdzv-conf is for --rdzv-backend etcd", hint="add --rdzv-backend etcd, or drop it")
        parse_endpoint(options.rdzv_endpoint)  # its error before the secret's
    from tfdist.launch.elastic.backends import Agent
    from tfdist.launch.ssh.host_probe import versions

    secret, job = job_secret(options)
    if etcd is not None and options.rdzv_insecure:
        secret = b""  # unsigned records: etcd's own user authentication is the only guard
    if options.node_address is not None:
        from tfdist.launch.elastic.netaddr import is_unroutable

        if is_unroutable(options.node_address):
            raise UsageError(f"--node-address {options.node_address} cannot be reached from other machines",
                             hint="give this machine's address on the network the machines share")
    spec = options.to_agent_spec(command, job=job, secret=secret, legacy_keras=legacy_keras, versions=versions(),
                                 etcd=etcd, tasks=tasks)
    if options.dry_run:
        from tfdist.cli.launch_plan import print_machine_plan

        return print_machine_plan(spec, legacy_keras)
    if options.log_dir is not None:
        from tfdist.launch.local.command_check import check_log_dir

        check_log_dir(options.log_dir)
    if spec.port_base is not None:
        from tfdist.launch.local.ports import ports_from_base

        ports_from_base(spec.port_base, spec.slots, "0.0.0.0")  # every port free, before joining
    from tfdist.launch.console.liveview import watch
    from tfdist.launch.console.task_output import to_terminal

    agent = Agent(spec, say=to_terminal)  # its lines on this terminal's stderr
    with watch(agent, live=options.live):  # the run record (tfdist status/logs) and, on a terminal, the live lines
        return agent.run()


def _given_flags() -> dict[str, str]:
    """The flags set by the user (command line, environment twin or config file) to something other than their
    default, as parameter name -> flag. ``--no-live`` asks for nothing either and is left out."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    given = {}
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        source = ctx.get_parameter_source(param.name)
        if source in (None, ParameterSource.DEFAULT):
            continue
        if param.name == "live" and not ctx.params.get("live", True):
            continue
        if param.name in ctx.params and ctx.params[param.name] == param.default:
            continue  # set to its default: asks for nothing that could be refused
        given[param.name] = max(param.opts, key=len)
    return given


def _task_options(options: LaunchOptions, named: bool, tf_log_level: str | None) -> Any:
    from tfdist.launch.elastic.agent.node_group import TaskOptions

    level = None
    if tf_log_level is not None:
        from tfdist.launch.console.tflog import LEVEL_VARIABLE, choose_level
        from tfdist.launch.local.taskenv import visible_gpus

        has_gpus = tf_log_level == "auto" and LEVEL_VARIABLE not in os.environ and bool(visible_gpus(os.environ))
        level = choose_level(tf_log_level, os.environ, has_gpus)
    return TaskOptions(job_name=options.job_name if named else None, thread_caps=bool(options.thread_caps),
                       nccl_debug=bool(options.nccl_debug), metrics_port=options.metrics_port,
                       metrics_host=options.metrics_host, tf_log_level=level,
                       show_output=bool(options.tee) or options.log_dir is None,
                       flight_recorder=bool(options.flight_recorder))


def _run_hostfile(options: LaunchOptions, agent_args: tuple[str, ...]) -> int:
    from tfdist.cluster.hostfile import parse_hostfile, parse_hosts_flag, select_hosts
    from tfdist.launch.ssh.driver import DriverSpec, run

    from tfdist.launch.ssh.comeback import parse_cooldown_range

    cooldown = parse_cooldown_range(options.host_cooldown_range)
    discovery = options.host_discovery_script
    if discovery:
        from tfdist.launch.ssh.fleet import run_discovery

        entries = run_discovery(discovery)
    elif options.hostfile:
        try:
            with open(options.hostfile, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as bad:
            raise UsageError(f"--hostfile {options.hostfile}: cannot read it ({bad})") from None
        entries = parse_hostfile(text, options.hostfile)
    else:
        entries = parse_hosts_flag(options.hosts)
    entries = select_hosts(entries, options.include, options.exclude)
    from tfdist.cli.launch_roles import hostfile_placement

    placement = hostfile_placement(options, entries, options.hostfile or "--hosts")
    high = DISCOVERY_MAX_NODES if discovery else len(entries)
    low = options.min_nodes or len(entries)
    if low > len(entries):
        raise UsageError(f"--min-nodes {low} is more than the {len(entries)} host(s) listed")
    job = job_id(options.rdzv_id) if options.rdzv_id else f"tfdist-{secrets.token_hex(4)}"
    from tfdist.launch.elastic.secret import new_secret

    settings = options.rendezvous_settings(job, low, high)
    shape = ("-m",) if options.module else ("--no-python",) if options.no_python else ()
    spec = DriverSpec(hosts=tuple(entries), slots=options.workers, target=shape + options.target,
                      agent_args=agent_args, job=job,
                      secret=b"" if options.dry_run else new_secret(), min_nodes=low, max_nodes=high,
                      settings=settings, cooldown=cooldown, discovery=discovery,
                      flight_recorder=bool(options.flight_recorder), log_dir=options.log_dir)
    if options.dry_run:
        from tfdist.cli.launch_plan import print_hostfile_plan

        return print_hostfile_plan(spec, placement)
    from tfdist.launch.console.task_output import terminal_streams, to_terminal

    return run(spec, say=to_terminal, streams=terminal_streams)  # its lines and the agents' output: this terminal
