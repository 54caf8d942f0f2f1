"""``host:port`` addresses, written and read one way everywhere: IPv6 hosts in brackets (``[::1]:2222``).

gRPC, pip and Prometheus all read ``[v6]:port``; an unbracketed ``::1:2222`` is ambiguous, so it is refused.
"""
from __future__ import annotations

import ipaddress
import re

from tfdist.cluster.limits import MAX_HOST_CHARS
from tfdist.errors import UsageError

# A DNS name or an IPv4 address: labels of letters, digits, '-' and '_' (Slurm node names may hold '_'),
# separated by single dots.
_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?")
_PORT = re.compile(r"[0-9]{1,5}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def format_address(host: str, port: int) -> str:
    """``("::1", 2222)`` -> ``"[::1]:2222"``; ``("node1", 2222)`` -> ``"node1:2222"``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_port(value: int | str, what: str, *, allow_zero: bool = False) -> int:
    """``value`` as a TCP port (1..65535, or 0 when ``allow_zero``), else a UsageError naming ``what``."""
    text = str(value).strip()
    low = 0 if allow_zero else 1
    if not _PORT.fullmatch(text) or not low <= int(text) <= 65535:
        raise UsageError(f"{what}={str(value)[:40]!r} is not a TCP port", hint=f"use a number from {low} to 65535")
    return int(text)


def check_host(host: str, what: str) -> str:
    """``host`` when it is a DNS name or an IP address, else a UsageError naming ``what``."""
    if len(host) <= MAX_HOST_CHARS:
        if _NAME.fullmatch(host):
            return host
        try:
            ipaddress.ip_address(host)
            return host
        except ValueError:
            pass
    raise UsageError(f"{what} holds {host[:60]!r}, which is not a host name or IP address",
                     hint="host names use letters, digits, '-', '_' and '.'; IPv6 addresses are written [::1]")


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``"node1:2222"`` -> ``("node1", 2222)``; ``"[::1]:2222"`` -> ``("::1", 2222)``.

    Raises:
        UsageError: not ``host:port`` (an IPv6 host must be bracketed), naming ``what``.
    """
    if not isinstance(text, str):
        raise UsageError(f"{what} holds {text!r}, which is not a 'host:port' string")
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise UsageError(f"{what} holds {text[:60]!r}, which is not '[ipv6]:port'")
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError(host)
        except ValueError:
            raise UsageError(f"{what} holds {text[:60]!r}: {host[:45]!r} is not an IPv6 address") from None
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:
            raise UsageError(f"{what} holds {text[:60]!r}, which is not 'host:port'",
                             hint="write IPv6 hosts in brackets: [::1]:2222")
        check_host(host, what)
    return host, check_port(port, f"the port of {text[:60]!r} in {what}")
