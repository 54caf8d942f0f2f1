"""``tfdist launch`` across machines: its flags. What they do is :mod:`tfdist.launch.entry.across`'s.

Two ways in, one engine: ``--hostfile/--hosts`` (this machine serves the rendezvous and starts an agent on every
host over ssh) and ``--nnodes ... --rdzv-endpoint`` (the same command on every machine; the machine that owns the
endpoint's address serves the rendezvous).
"""
from __future__ import annotations

from typing import Any, Callable

import click

from tfdist.cli.common import PathText, option
from tfdist.launch.options import DEFAULT_RDZV_PORT
from tfdist.launch.options import DEFAULTS as D

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
    option("--rdzv-insecure", is_flag=True, help="With --rdzv-endpoint: no job secret (with --rdzv-secret-file: "
           "take one that is not random); anyone who can reach the endpoint can join or disturb the job. Only on a "
           "network you trust; set by tfdist.toml or the environment, it is honoured with a warning."),
    option("--node-rank", type=click.IntRange(0, 9999), help="This machine's rank (0 holds worker 0, the chief); "
           "default: the machine serving the rendezvous, then order of arrival."),
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
