"""Ports for the tasks of a local job, and the check of every port a job needs before anything starts.

Free ports are found by binding port 0 and keeping each socket open until all are chosen, so one call never hands
out the same port twice. Between choosing and the task's own bind another program can still take a port: the
supervisor recognises that failure and retries with fresh ports (a small, separate budget).
"""
from __future__ import annotations

import errno
import socket
from typing import TYPE_CHECKING

from tfdist.errors import UsageError

if TYPE_CHECKING:
    from tfdist.launch.spec import LaunchSpec

MAX_PORT = 65535


def family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _bind_error(host: str, port: int) -> OSError | None:
    try:
        with socket.socket(family(host), socket.SOCK_STREAM) as probe:
            probe.bind((host, port))
    except OSError as error:
        return error
    return None


def _unusable_host(error: OSError, host: str, flag: str) -> UsageError | None:
    if error.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(error, socket.gaierror):
        return UsageError(f"{flag} {host}: this machine has no such address ({error.strerror or error})",
                          hint="give an address of this machine, e.g. 127.0.0.1 or ::1")
    return None


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago on ``host``.

    Raises:
        UsageError: ``host`` is not an address of this machine.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(family(host), socket.SOCK_STREAM)
            sockets.append(s)
            try:
                s.bind((host, 0))
            except OSError as error:
                raise _unusable_host(error, host, "--host") or UsageError(
                    f"--host {host}: cannot bind a port ({error.strerror or error})") from None
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _check_range(flag: str, base: int, count: int, host: str, what: str) -> list[int]:
    if not 1 <= base <= MAX_PORT - count + 1:
        raise UsageError(f"{flag} {base} leaves no room for {count} {what} (the last would be {base + count - 1})",
                         hint=f"choose a port in 1024-{MAX_PORT - count + 1}")
    ports = list(range(base, base + count))
    for port in ports:
        error = _bind_error(host, port)
        if error is not None:
            raise _unusable_host(error, host, "--host" if flag == "--port-base" else "--metrics-host") or UsageError(
                f"{flag} {base}: port {port} on {host} is in use", hint=f"choose another {flag}")
    return ports


def ports_from_base(base: int, count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` consecutive ports from ``base``, each checked by binding.

    Raises:
        UsageError: the range leaves 1-65535, or a port in it is taken.
    """
    try:
        return _check_range("--port-base", base, count, host, "task ports")
    except UsageError as error:
        if "in use" in error.message:
            error.hint = "choose another --port-base, or leave it out to use free ports"
        raise


def check_ports(spec: LaunchSpec, tasks: int, *, launcher: bool = False) -> None:
    """Every port the job will need, checked before the first task starts: the task ports (--port-base), the tasks'
    metrics ports, and with ``launcher`` the launcher's own metrics port.

    Raises:
        UsageError: one line naming the flag whose port is out of range or taken.
    """
    wanted: dict[int, str] = {}
    if spec.cluster is None:
        if spec.port_base is not None:
            wanted.update((p, "--port-base") for p in ports_from_base(spec.port_base, tasks, spec.host))
        else:
            free_ports(1, spec.host)  # the address itself must be ours
    if spec.metrics_port is not None:
        for port in _check_range("--metrics-port", spec.metrics_port, tasks, spec.metrics_host, "task metrics ports"):
            if port in wanted:
                raise UsageError(f"--metrics-port {spec.metrics_port}: port {port} is also a task port",
                                 hint="choose ranges that do not overlap")
            wanted[port] = "--metrics-port"
    port = getattr(spec, "launcher_metrics_port", None)
    if launcher and port is not None:
        if port in wanted:
            raise UsageError(f"--launcher-metrics-port {port} is also given by {wanted[port]}",
                             hint="choose a port outside the tasks' ranges")
        error = _bind_error(spec.metrics_host, port)
        if error is not None:
            raise _unusable_host(error, spec.metrics_host, "--metrics-host") or UsageError(
                f"--launcher-metrics-port {port} on {spec.metrics_host} is in use",
                hint="choose another --launcher-metrics-port")
