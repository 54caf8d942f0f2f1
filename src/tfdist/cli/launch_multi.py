"""``tfdist launch`` across machines: the flags, their checks, and the hand-off to the agent or the ssh driver.

Two ways in, one engine: ``--hostfile/--hosts`` (this machine serves the rendezvous and starts an agent on every
host over ssh) and ``--nnodes ... --rdzv-endpoint`` (the same command on every machine; the machine that owns the
endpoint's address serves the rendezvous). Both end in :class:`tfdist.launch.elastic.agent.Agent` on every machine.
"""
from __future__ import annotations

import re
import secrets
from typing import Any, Callable

import click

from tfdist.cli.common import PathText, option
from tfdist.errors import UsageError

MULTI_FLAGS = ("hostfile", "hosts", "include", "exclude", "min_nodes", "nnodes", "rdzv_endpoint", "rdzv_id",
               "rdzv_backend", "rdzv_conf", "host_cooldown_range", "host_discovery_script",
               "node_rank", "node_address", "node_name", "node_timeout", "rdzv_timeout", "rdzv_last_call",
               "checkpoint_dir", "agent_watch_stdin", "rdzv_secret_file", "rdzv_insecure")
_NNODES = re.compile(r"([0-9]{1,4})(?::([0-9]{1,4}))?")
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_RDZV_PORT = 29400
DISCOVERY_MAX_NODES = 256  # a discovery script may add hosts later: the job takes up to this many machines

_OPTIONS = [
    option("--hostfile", type=PathText(dir_okay=False), help="Run on the machines listed here (host [slots=N] "
           "lines), started over ssh."),
    option("--hosts", help="The host list on the command line: a,b:2 (host[:slots])."),
    option("--include", help="With --hostfile/--hosts: only these hosts (comma-separated)."),
    option("--exclude", help="With --hostfile/--hosts: leave out these hosts (comma-separated)."),
    option("--host-cooldown-range", default="10:300", show_default=True, metavar="LOW:HIGH",
           help="With --hostfile/--hosts: a lost host is probed over ssh again after LOW seconds, doubling up to "
           "HIGH while it does not answer; one that answers rejoins at the next round."),
    option("--host-discovery-script", type=PathText(dir_okay=False), help="A program printing host[ slots=N] "
           "lines, re-run every 5 s: new hosts join, hosts no longer listed leave (instead of --hostfile/--hosts)."),
    option("--min-nodes", type=click.IntRange(1), help="With --hostfile/--hosts: keep training while at least "
           "this many machines remain (default: all)."),
    option("--nnodes", help="Machines in the job: N, or MIN:MAX for an elastic job (same on every machine)."),
    option("--rdzv-endpoint", help="HOST[:PORT] of the rendezvous; the machine that owns HOST serves it "
           f"(default port {DEFAULT_RDZV_PORT})."),
    option("--rdzv-backend", type=click.Choice(["tfdist", "etcd"]), default="tfdist", show_default=True,
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
    option("--node-timeout", type=click.FloatRange(0.2), default=10.0, show_default=True,
           help="Seconds without a keep-alive after which a machine counts as lost."),
    option("--rdzv-timeout", type=click.FloatRange(1), default=300.0, show_default=True,
           help="Seconds to wait for at least MIN machines (at start and after a loss) before failing."),
    option("--rdzv-last-call", type=click.FloatRange(0), default=3.0, show_default=True,
           help="Once MIN machines have joined, seconds to wait for up to MAX before the first round."),
    option("--checkpoint-dir", type=PathText(file_okay=False), help="The script's model directory: when the "
           "machines do not share it, the latest complete backup is copied to each machine before a restart."),
    option("--agent-watch-stdin", is_flag=True, hidden=True, help="Stop when stdin closes (set over ssh)."),
]


def multi_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for decorate in reversed(_OPTIONS):
        func = decorate(func)
    return func


def wants_multi(flags: dict[str, Any]) -> bool:
    return any(flags.get(name) for name in ("hostfile", "hosts", "nnodes", "rdzv_endpoint",
                                             "host_discovery_script"))


def parse_nnodes(text: str) -> tuple[int, int]:
    """``2`` -> (2, 2); ``2:3`` -> (2, 3). Raises UsageError naming --nnodes."""
    match = _NNODES.fullmatch(text.strip())
    if not match:
        raise UsageError(f"--nnodes {text!r} is not N or MIN:MAX", hint="e.g. --nnodes 2 or --nnodes 2:4")
    low = int(match.group(1))
    high = int(match.group(2) or low)
    if low < 1 or high < low:
        raise UsageError(f"--nnodes {text!r}: need 1 <= MIN <= MAX", hint="e.g. --nnodes 2:4")
    return low, high


def parse_endpoint(text: str) -> tuple[str, int]:
    """``node1:29400`` -> ("node1", 29400); ``node1`` -> ("node1", 29400). Raises UsageError naming the flag."""
    from tfdist.cluster import parse_address

    text = text.strip()
    has_port = text.rpartition(":")[2].isdigit() and (not text.startswith("[") or "]:" in text)
    return parse_address(text if has_port else f"{text}:{DEFAULT_RDZV_PORT}", "--rdzv-endpoint")


def job_id(text: str) -> str:
    if not _JOB.fullmatch(text):
        raise UsageError(f"--rdzv-id {text!r} is not a job id", hint="letters, digits, '.', '_', '-' (max 64)")
    return text


def job_secret(multi: dict[str, Any]) -> tuple[bytes, str]:
    """(secret, job id) for rendezvous mode, either backend: the etcd backend seals every record with the secret
    (HMAC), as the built-in one authenticates every connection. Raises UsageError (exit 2) naming the flag or the
    file."""
    from tfdist.launch.elastic import secret

    if multi["rdzv_secret_file"] and multi["rdzv_insecure"]:
        raise UsageError("give --rdzv-secret-file or --rdzv-insecure, not both")
    if multi["rdzv_insecure"]:
        if not multi["rdzv_id"]:
            raise UsageError("--rdzv-insecure needs --rdzv-id", hint="the same job id on every machine")
        from tfdist.launch.elastic.auth import INSECURE_SECRET

        return INSECURE_SECRET, job_id(multi["rdzv_id"])
    if not multi["rdzv_secret_file"]:
        raise UsageError("--rdzv-endpoint needs a job secret: --rdzv-secret-file PATH",
                         hint=f"make one with `{secret.NEW_SECRET_COMMAND}` and copy it to every machine; "
                         "--rdzv-insecure runs without one on a network you trust")
    value = secret.load(multi["rdzv_secret_file"])
    return value, job_id(multi["rdzv_id"]) if multi["rdzv_id"] else secret.derived_job_id(value)


def run_multi(multi: dict[str, Any], flags: dict[str, Any], command: Any, target: tuple[str, ...],
              env: tuple[tuple[str, str], ...], legacy_keras: bool, raw_env: tuple[str, ...], *,
              dry_run: bool = False, live: bool | None = None, tf_log_level: str = "auto",
              launcher_metrics_port: int | None = None) -> int:
    """Check every flag against the across-machines table (:mod:`tfdist.cli.launch_parity`), then run (or with
    ``dry_run`` print) the driver (host file) or this machine's agent (rendezvous). Nothing starts, and nothing is
    contacted, before every check passed."""
    from tfdist.cli.launch_parity import HOSTFILE, RENDEZVOUS, refuse_unsupported
    from tfdist.protocol import refuse_protected

    mode = HOSTFILE if multi["hostfile"] or multi["hosts"] or multi.get("host_discovery_script") else RENDEZVOUS
    if mode == HOSTFILE and (multi["rdzv_endpoint"] or multi["nnodes"]):
        raise UsageError("--hostfile/--hosts and --nnodes/--rdzv-endpoint are two ways in: use one",
                         hint="a host file starts every machine over ssh; --rdzv-endpoint is run on each machine")
    given = _given_flags()
    refuse_unsupported(mode, given)
    if flags["workers"] < 1:
        raise UsageError("-n/--workers must be at least 1 per machine")
    refuse_protected(name for name, _ in env)  # TF_CONFIG and the other protocol variables: before anything starts
    if sum(bool(multi.get(k)) for k in ("hostfile", "hosts", "host_discovery_script")) > 1:
        raise UsageError("give one of --hostfile, --hosts and --host-discovery-script")
    if mode == RENDEZVOUS:
        from tfdist.cli.launch import _check_gpus_exist

        _check_gpus_exist(flags.get("gpus_per_task"))  # as on one machine: never train on the CPU unawares
    options = _task_options(flags, "job_name" in given, tf_log_level if mode == RENDEZVOUS else None)
    if mode == HOSTFILE:
        passthrough = _agent_args(multi, flags, raw_env, tf_log_level, launcher_metrics_port,
                                  job_name=flags["job_name"] if "job_name" in given else None)
        return _run_hostfile(multi, flags, target, passthrough, dry_run=dry_run)
    if not multi["rdzv_endpoint"]:
        raise UsageError("--nnodes needs --rdzv-endpoint HOST:PORT", hint="the same endpoint on every machine")
    low, high = parse_nnodes(multi["nnodes"] or "1")
    etcd = None
    if multi.get("rdzv_backend") == "etcd":
        import os

        from tfdist.launch.elastic.etcd_store import parse_conf

        etcd = parse_conf(multi["rdzv_endpoint"], tuple(multi.get("rdzv_conf") or ()), multi["node_timeout"],
                          dict(os.environ))
        host, port = etcd.endpoints[0]
    else:
        if multi.get("rdzv_conf"):
            raise UsageError("--rdzv-conf is for --rdzv-backend etcd", hint="add --rdzv-backend etcd, or drop it")
        host, port = parse_endpoint(multi["rdzv_endpoint"])
    from tfdist.launch.elastic.agent import Agent, AgentSpec
    from tfdist.launch.ssh.host_probe import versions

    secret, job = job_secret(multi)
    if etcd is not None and multi["rdzv_insecure"]:
        secret = b""  # unsigned records: etcd's own user authentication is the only guard
    if multi["node_address"] is not None:
        from tfdist.launch.elastic.netaddr import is_unroutable

        if is_unroutable(multi["node_address"]):
            raise UsageError(f"--node-address {multi['node_address']} cannot be reached from other machines",
                             hint="give this machine's address on the network the machines share")
    spec = AgentSpec(job=job, secret=secret, endpoint_host=host, endpoint_port=port, min_nodes=low,
                     max_nodes=high, slots=flags["workers"], command=command, node_rank=multi["node_rank"],
                     node_address=multi["node_address"], node_name=multi["node_name"],
                     node_timeout=multi["node_timeout"], rdzv_timeout=multi["rdzv_timeout"],
                     first_round_wait=multi["rdzv_last_call"], grace_period=flags["grace_period"],
                     hang_timeout=flags["hang_timeout"], gpus_per_task=flags["gpus_per_task"],
                     warm_spares=bool(flags["warm_spares"]) and (flags["max_restarts"] > 0 or low < high),
                     max_restarts=flags["max_restarts"], env=env, log_dir=flags["log_dir"],
                     legacy_keras=legacy_keras, checkpoint_dir=multi["checkpoint_dir"],
                     watch_stdin=multi["agent_watch_stdin"], versions=versions(), etcd=etcd,
                     restart_window=flags["restart_window"], backoff=flags["backoff"], port_base=flags["port_base"],
                     launcher_metrics_port=launcher_metrics_port, tasks=options)
    if dry_run:
        from tfdist.cli.launch_plan import print_machine_plan

        return print_machine_plan(spec, legacy_keras)
    if flags["log_dir"] is not None:
        from tfdist.launch.local.command_check import check_log_dir

        check_log_dir(flags["log_dir"])
    if spec.port_base is not None:
        from tfdist.launch.local.ports import ports_from_base

        ports_from_base(spec.port_base, spec.slots, "0.0.0.0")  # every port free, before joining
    from tfdist.launch.console.liveview import watch

    agent = Agent(spec)
    with watch(agent, live=live):  # the run record (tfdist status/logs) and, on a terminal, the live lines
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


def _task_options(flags: dict[str, Any], named: bool, tf_log_level: str | None) -> Any:
    from tfdist.launch.elastic.node_group import TaskOptions

    level = None
    if tf_log_level is not None:
        import os

        from tfdist.launch.console.tflog import LEVEL_VARIABLE, choose_level
        from tfdist.launch.local.taskenv import visible_gpus

        has_gpus = tf_log_level == "auto" and LEVEL_VARIABLE not in os.environ and bool(visible_gpus(os.environ))
        level = choose_level(tf_log_level, os.environ, has_gpus)
    return TaskOptions(job_name=flags["job_name"] if named else None, thread_caps=bool(flags["thread_caps"]),
                       nccl_debug=bool(flags["nccl_debug"]), metrics_port=flags["metrics_port"],
                       metrics_host=flags["metrics_host"], tf_log_level=level,
                       show_output=bool(flags["tee"]) or flags["log_dir"] is None)


def _agent_args(multi: dict[str, Any], flags: dict[str, Any], raw_env: tuple[str, ...], tf_log_level: str,
                launcher_metrics_port: int | None, *, job_name: str | None) -> tuple[str, ...]:
    """The flags every host's agent gets: each with its single-machine meaning on that host."""
    args = ["--node-timeout", str(multi["node_timeout"]), "--rdzv-timeout", str(multi["rdzv_timeout"]),
            "--rdzv-last-call", str(multi["rdzv_last_call"]), "--grace-period", str(flags["grace_period"]),
            "--hang-timeout", str(flags["hang_timeout"]),
            "--max-restarts", str(flags["max_restarts"]), "--tf-log-level", tf_log_level,
            "--metrics-host", flags["metrics_host"]]
    valued = {"--job-name": job_name, "--checkpoint-dir": multi["checkpoint_dir"],
              "--gpus-per-task": flags.get("gpus_per_task"),
              "--log-dir": flags.get("log_dir"), "--port-base": flags.get("port_base"),
              "--metrics-port": flags.get("metrics_port"), "--launcher-metrics-port": launcher_metrics_port}
    for flag, value in valued.items():
        if value:
            args += [flag, str(value)]
    switches = {"--no-warm-spares": not flags.get("warm_spares", True), "--thread-caps": flags.get("thread_caps"),
                "--nccl-debug": flags.get("nccl_debug"), "--tee": flags.get("tee"),
                "--allow-keras3": flags.get("allow_keras3")}
    args += [flag for flag, on in switches.items() if on]
    for pair in raw_env:
        args += ["--env", pair]
    return tuple(args)


def _run_hostfile(multi: dict[str, Any], flags: dict[str, Any], target: tuple[str, ...],
                  agent_args: tuple[str, ...], *, dry_run: bool) -> int:
    from tfdist.launch.elastic.membership import RendezvousSettings
    from tfdist.cluster.hostfile import parse_hostfile, parse_hosts_flag, select_hosts
    from tfdist.launch.ssh.driver import DriverSpec, run

    from tfdist.launch.ssh.comeback import parse_cooldown_range

    cooldown = parse_cooldown_range(multi.get("host_cooldown_range") or "10:300")
    discovery = multi.get("host_discovery_script")
    if discovery:
        from tfdist.launch.ssh.fleet import run_discovery

        entries = run_discovery(discovery)
    elif multi["hostfile"]:
        try:
            with open(multi["hostfile"], encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as bad:
            raise UsageError(f"--hostfile {multi['hostfile']}: cannot read it ({bad})") from None
        entries = parse_hostfile(text, multi["hostfile"])
    else:
        entries = parse_hosts_flag(multi["hosts"])
    entries = select_hosts(entries, multi["include"], multi["exclude"])
    high = DISCOVERY_MAX_NODES if discovery else len(entries)
    low = multi["min_nodes"] or len(entries)
    if low > len(entries):
        raise UsageError(f"--min-nodes {low} is more than the {len(entries)} host(s) listed")
    job = job_id(multi["rdzv_id"]) if multi["rdzv_id"] else f"tfdist-{secrets.token_hex(4)}"
    from tfdist.launch.elastic.secret import new_secret

    settings = RendezvousSettings(job=job, min_nodes=low, max_nodes=high, node_timeout=multi["node_timeout"],
                                  rdzv_timeout=multi["rdzv_timeout"], first_round_wait=multi["rdzv_last_call"],
                                  max_restarts=flags["max_restarts"], restart_window=flags["restart_window"],
                                  backoff=flags["backoff"],
                                  stop_timeout=flags["grace_period"] + multi["node_timeout"] + 5)
    spec = DriverSpec(hosts=tuple(entries), slots=flags["workers"], target=target, agent_args=agent_args, job=job,
                      secret=b"" if dry_run else new_secret(), min_nodes=low, max_nodes=high,
                      settings=settings, cooldown=cooldown, discovery=discovery)
    if dry_run:
        from tfdist.cli.launch_plan import print_hostfile_plan

        return print_hostfile_plan(spec)
    return run(spec)
