"""Where each Slurm task serves its metrics: port ``base + SLURM_LOCALID`` on an address Prometheus can reach.

The sbatch script ``tfdist slurm --metrics-port P [--metrics-host H]`` writes exports ``TFDIST_SLURM_METRICS_PORT``
(and ``TFDIST_SLURM_METRICS_HOST``); ``tfdist tf-config --exec`` turns them into each task's own
``TFDIST_METRICS_PORT`` / ``TFDIST_METRICS_HOST``, which the runtime's metrics server reads. This is the layout
``tfdist monitor scrape-config --target slurm`` scrapes: on every node of the job, ``node:P`` .. ``node:P+T-1``.

The address: the given host on every node, else the address the node's Slurm name resolves to, since that is
the name the scrape config's targets carry. A name that resolves only to a loopback address (Debian's ``127.0.1.1``
convention in /etc/hosts) or not at all gives ``0.0.0.0``: a loopback bind is unreachable from a Prometheus server
on another machine.

Pure: the environment and a resolver come in, the variables to add go out.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Callable, Mapping, Sequence

from tfdist.cluster.hostlist import expand_tasks_per_node
from tfdist.errors import UsageError
from tfdist.protocol import METRICS_HOST, METRICS_PORT

SLURM_METRICS_PORT = "TFDIST_SLURM_METRICS_PORT"
SLURM_METRICS_HOST = "TFDIST_SLURM_METRICS_HOST"
ALL_INTERFACES = "0.0.0.0"
# A host name, an IPv4 address or an IPv6 address: what a bind address can be, nothing a shell would expand.
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|[0-9A-Fa-f:.]{2,45}")

Resolver = Callable[[str], Sequence[str]]


def valid_host(host: str) -> bool:
    """Whether ``host`` can be a bind address (a host name or an IP address; full match)."""
    return bool(_HOST.fullmatch(host))


def metrics_port(base: int, local_id: int) -> int:
    """The port of the task at ``local_id`` on its node (the one rule, shared with the scrape config's targets)."""
    return base + local_id


def _int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise UsageError(f"{name}={raw!r} is not a number", hint=f"unset {name} or give it a port number")
    return int(raw)


def _tasks_on_this_node(environ: Mapping[str, str]) -> int:
    counts_text = (environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE") or "").strip()
    node = _int(environ, "SLURM_NODEID")
    if not counts_text or node is None:
        return 1
    counts = expand_tasks_per_node(counts_text)
    return counts[node] if 0 <= node < len(counts) else 1


def node_address(name: str, resolve: Resolver) -> str:
    """The address to bind on the node called ``name``: the first non-loopback address it resolves to, else all
    interfaces."""
    try:
        addresses = list(resolve(name)) if name else []
    except OSError:
        addresses = []
    for address in addresses:
        try:
            if not ipaddress.ip_address(address.split("%", 1)[0]).is_loopback:
                return address
        except ValueError:
            continue
    return ALL_INTERFACES


def metrics_environment(environ: Mapping[str, str], resolve: Resolver) -> dict[str, str]:
    """The metrics variables a Slurm task needs, or nothing when the job asked for no metrics.

    Args:
        environ: the task's environment (inside ``srun``).
        resolve: host name -> its addresses (``socket.getaddrinfo`` in the CLI, a table in tests).

    Raises:
        UsageError: a malformed variable, a port past 65535, a task outside ``srun``, or a ``TFDIST_METRICS_PORT``
            inherited by several tasks on one node (they would all bind the same port).
    """
    base = _int(environ, SLURM_METRICS_PORT)
    if base is None:
        shared = _int(environ, METRICS_PORT)
        tasks = _tasks_on_this_node(environ) if "SLURM_PROCID" in environ else 1
        if shared is not None and tasks > 1:
            raise UsageError(f"{METRICS_PORT}={shared} is inherited by the {tasks} tasks on this node, which would "
                             "all bind the same port",
                             hint=f"unset {METRICS_PORT} and write the script with `tfdist slurm --metrics-port "
                                  f"{shared}` (each task serves on port + SLURM_LOCALID)")
        return {}
    local_id = _int(environ, "SLURM_LOCALID")
    if local_id is None:
        raise UsageError(f"{SLURM_METRICS_PORT} is set but SLURM_LOCALID is not (not a task started by srun)",
                         hint="start each task with srun, as the script `tfdist slurm` writes does")
    port = metrics_port(base, local_id)
    if base < 1 or port > 65535:
        raise UsageError(f"{SLURM_METRICS_PORT}={base} + local task {local_id} is not a TCP port",
                         hint="choose a --metrics-port that leaves room for every task on a node")
    host = environ.get(SLURM_METRICS_HOST, "").strip()
    if host and not valid_host(host):
        raise UsageError(f"{SLURM_METRICS_HOST}={host!r} is not a host name or IP address",
                         hint="give an address such as 0.0.0.0 or the node's IP")
    if not host:
        host = node_address(environ.get("SLURMD_NODENAME", "").strip(), resolve)
    return {METRICS_PORT: str(port), METRICS_HOST: host}


def resolve_host(name: str) -> list[str]:
    """Every address ``name`` resolves to, in the resolver's order (mechanism for :func:`metrics_environment`)."""
    import socket

    infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]
