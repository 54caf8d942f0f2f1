"""``tfdist launch`` across machines: the checks, and the hand-off to this machine's agent or to the ssh driver.

Two ways in, one engine: ``--hostfile/--hosts`` (this machine serves the rendezvous and starts an agent on every
host over ssh) and ``--nnodes ... --rdzv-endpoint`` (the same command on every machine; the machine that owns the
endpoint's address serves the rendezvous, see :func:`~tfdist.launch.entry.compose.who_serves`). Both end in
:class:`tfdist.launch.elastic.agent.agent.Agent` on every machine. Nothing starts, and nothing is contacted, before every
check passed.
"""
from __future__ import annotations

import os
import secrets
from typing import Mapping

from tfdist.errors import UsageError
from tfdist.launch.entry.checks import check_gpus_exist, check_roles, hostfile_placement
from tfdist.launch.entry.compose import agent_spec, rendezvous_settings, task_options, who_serves
from tfdist.launch.entry.parity import refuse_unsupported
from tfdist.launch.local.command_check import check_log_dir, keras_plan, resolve_command
from tfdist.launch.options import LaunchOptions, Mode, job_id, parse_endpoint, parse_nnodes
from tfdist.launch.spec import LaunchSpec
from tfdist.protocol import Command, refuse_protected

DISCOVERY_MAX_NODES = 256  # a discovery script may add hosts later: the job takes up to this many machines


def job_secret(options: LaunchOptions) -> tuple[bytes, str]:
    """(secret, job id) for rendezvous mode, either backend: the etcd backend seals every record with the secret
    (HMAC), as the built-in one authenticates every connection. With both --rdzv-secret-file and --rdzv-insecure
    the file's secret is used even when it is plainly not random (a fixture's, a typed one). Raises UsageError (exit
    2) naming the flag or the file."""
    from tfdist.launch.elastic import secret

    if options.rdzv_insecure and not options.rdzv_secret_file:
        if not options.rdzv_id:
            raise UsageError("--rdzv-insecure needs --rdzv-id", hint="the same job id on every machine")
        from tfdist.launch.elastic.tcp.auth import INSECURE_SECRET

        return INSECURE_SECRET, job_id(options.rdzv_id)
    if not options.rdzv_secret_file:
        raise UsageError("--rdzv-endpoint needs a job secret: --rdzv-secret-file PATH",
                         hint=f"make one with `{secret.NEW_SECRET_COMMAND}` and copy it to every machine; "
                         "--rdzv-insecure runs without one on a network you trust")
    value = secret.load(options.rdzv_secret_file, weak_ok=options.rdzv_insecure)
    return value, job_id(options.rdzv_id) if options.rdzv_id else secret.derived_job_id(value)


def run_across(options: LaunchOptions, given: Mapping[str, str]) -> int:
    """Check every flag against the across-machines table (:mod:`tfdist.launch.entry.parity`), then run (or with
    ``dry_run`` print) the driver (host file) or this machine's agent (rendezvous). ``given``: the flags the user set
    (parameter name -> the flag as set), the ones the table may refuse."""
    command = resolve_command(options.target, module=options.module, no_python=options.no_python)
    env = options.env_pairs()
    legacy_keras = keras_plan(LaunchSpec(command=command, workers=2, allow_keras3=options.allow_keras3, env=env),
                              os.environ)
    mode = options.mode
    if mode is Mode.HOSTFILE and (options.rdzv_endpoint or options.nnodes):
        raise UsageError("--hostfile/--hosts and --nnodes/--rdzv-endpoint are two ways in: use one",
                         hint="a host file starts every machine over ssh; --rdzv-endpoint is run on each machine")
    refuse_unsupported(mode.value, given)
    check_roles(options, hostfile=mode is Mode.HOSTFILE)
    if options.workers < 1:
        raise UsageError("-n/--workers must be at least 1 per machine")
    refuse_protected(name for name, _ in env)  # TF_CONFIG and the other protocol variables: before anything starts
    if sum(bool(getattr(options, k)) for k in ("hostfile", "hosts", "host_discovery_script")) > 1:
        raise UsageError("give one of --hostfile, --hosts and --host-discovery-script")
    if mode is Mode.HOSTFILE:
        return _run_hostfile(options)
    check_gpus_exist(options.gpus_per_task)  # as on one machine: never train on the CPU unawares
    return _run_agent(options, command, legacy_keras, named="job_name" in given)


def _run_agent(options: LaunchOptions, command: Command, legacy_keras: bool, *, named: bool) -> int:
    """Rendezvous mode: this machine's agent (``named``: --job-name was given)."""
    tasks = task_options(options, named=named)
    if not options.rdzv_endpoint:
        raise UsageError("--nnodes needs --rdzv-endpoint HOST:PORT", hint="the same endpoint on every machine")
    parse_nnodes(options.nnodes or "1")  # its error first
    etcd = None
    if options.rdzv_backend == "etcd":
        from tfdist.extras import require
        from tfdist.launch.elastic.etcd.conf import parse_conf

        require("etcd", "--rdzv-backend etcd")  # the client library, before anything starts
        etcd = parse_conf(options.rdzv_endpoint, options.rdzv_conf, options.node_timeout, dict(os.environ))
    else:
        if options.rdzv_conf:
            raise UsageError("--rdzv-conf is for --rdzv-backend etcd", hint="add --rdzv-backend etcd, or drop it")
        parse_endpoint(options.rdzv_endpoint)  # its error before the secret's
    from tfdist.launch.elastic.backends import Agent
    from tfdist.launch.ssh.host_probe import versions

    secret, job = job_secret(options)
    if etcd is not None and options.rdzv_insecure and not options.rdzv_secret_file:
        secret = b""  # unsigned records: etcd's own user authentication is the only guard
    if options.node_address is not None:
        from tfdist.launch.elastic.netaddr import is_unroutable

        if is_unroutable(options.node_address):
            raise UsageError(f"--node-address {options.node_address} cannot be reached from other machines",
                             hint="give this machine's address on the network the machines share")
    spec = agent_spec(options, command, job=job, secret=secret, legacy_keras=legacy_keras, versions=versions(),
                      etcd=etcd, tasks=tasks)
    if options.dry_run:
        from tfdist.launch.entry.plan_text import print_machine_plan

        return print_machine_plan(spec, legacy_keras, who_serves(options))
    if options.log_dir is not None:
        check_log_dir(options.log_dir)
    if spec.port_base is not None:
        from tfdist.launch.local.ports import ports_from_base

        ports_from_base(spec.port_base, spec.slots, "0.0.0.0")  # every port free, before joining
    from tfdist.launch.console.liveview import watch
    from tfdist.launch.console.task_output import to_terminal

    agent = Agent(spec, say=to_terminal)  # its lines on this terminal's stderr
    with watch(agent, live=options.live):  # the run record (tfdist status/logs) and, on a terminal, the live lines
        return agent.run()


def _run_hostfile(options: LaunchOptions) -> int:
    """Host-file mode: this machine serves the rendezvous and starts an agent on every host over ssh."""
    from tfdist.cluster.hostfile import parse_hostfile, parse_hosts_flag, select_hosts
    from tfdist.launch.ssh.comeback import parse_cooldown_range
    from tfdist.launch.ssh.driver import DriverSpec, run

    agent_args = options.agent_args()
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
        entries = parse_hosts_flag(options.hosts or "")
    entries = select_hosts(entries, options.include, options.exclude)
    placement = hostfile_placement(options, entries, options.hostfile or "--hosts")
    high = DISCOVERY_MAX_NODES if discovery else len(entries)
    low = options.min_nodes or len(entries)
    if low > len(entries):
        raise UsageError(f"--min-nodes {low} is more than the {len(entries)} host(s) listed")
    job = job_id(options.rdzv_id) if options.rdzv_id else f"tfdist-{secrets.token_hex(4)}"
    from tfdist.launch.elastic.secret import new_secret

    settings = rendezvous_settings(options, job, low, high)
    shape = ("-m",) if options.module else ("--no-python",) if options.no_python else ()
    spec = DriverSpec(hosts=tuple(entries), slots=options.workers, target=shape + options.target,
                      agent_args=agent_args, job=job,
                      secret=b"" if options.dry_run else new_secret(), min_nodes=low, max_nodes=high,
                      settings=settings, cooldown=cooldown, discovery=discovery,
                      flight_recorder=bool(options.flight_recorder), log_dir=options.log_dir)
    if options.dry_run:
        from tfdist.launch.entry.plan_text import print_hostfile_plan

        return print_hostfile_plan(spec, placement)
    from tfdist.launch.console.task_output import terminal_streams, to_terminal

    return run(spec, say=to_terminal, streams=terminal_streams)  # its lines and the agents' output: this terminal
