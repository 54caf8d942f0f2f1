"""Ports for the tasks of a local job.

Free ports are found by binding port 0 and keeping each socket open until all are chosen, so one call never hands
out the same port twice. Between choosing and the task's own bind another program can still take a port: the
supervisor recognises that failure and retries with fresh ports.
"""
from __future__ import annotations

import socket

from tfdist.errors import UsageError


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago on ``host``."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def ports_from_base(base: int, count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` consecutive ports from ``base``, each checked by binding.

    Raises:
        UsageError: the range leaves 1-65535, or a port in it is taken.
    """
    if not 1 <= base <= 65535 - count + 1:
        raise UsageError(f"--port-base {base} leaves no room for {count} ports", hint="choose a port in 1024-65000")
    ports = list(range(base, base + count))
    taken = [p for p in ports if not _bindable(host, p)]
    if taken:
        raise UsageError(f"--port-base {base}: port {taken[0]} on {host} is in use",
                         hint="choose another --port-base, or leave it out to use free ports")
    return ports
