"""Which address other machines reach this one at, and whether an address is this machine's.

A multi-machine TF_CONFIG must hold addresses the other machines can connect to: never a loopback (127.0.0.0/8)
or the wildcard 0.0.0.0 (tensorflow/tensorflow#57372 is users writing ``localhost`` across machines). The address
on the route to a peer is found by ``connect()`` on a UDP socket, which sends nothing: the kernel only picks the
source address it would use.
"""
from __future__ import annotations

import ipaddress
import socket

from tfdist.errors import UsageError


def resolve(host: str, flag: str, family: int = socket.AF_INET) -> str:
    """``host`` as an IP address (IPv4 unless ``family`` says otherwise; a literal address is taken as written).

    Raises:
        UsageError: naming ``flag`` when it does not resolve.
    """
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, family, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError, IndexError) as bad:
        raise UsageError(f"{flag}: cannot resolve {host!r} ({getattr(bad, 'strerror', None) or bad})",
                         hint="give a host name this machine can resolve, or an IP address") from None


def is_unroutable(address: str) -> bool:
    """True for addresses no other machine can reach this one at (loopback, wildcard)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False  # a host name: resolved by the peers themselves
    return ip.is_loopback or ip.is_unspecified


def route_address(peer_ip: str) -> str:
    """This machine's source address for packets to ``peer_ip`` (nothing is sent)."""
    family = socket.AF_INET6 if ipaddress.ip_address(peer_ip).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((peer_ip, 9))
        except OSError as bad:
            raise UsageError(f"no route from this machine to {peer_ip} ({bad.strerror or bad})",
                             hint="check the network, or pass --node-address") from None
        return probe.getsockname()[0]


def is_local(ip: str) -> bool:
    """True when ``ip`` is one of this machine's addresses (a socket can bind it)."""
    address = ipaddress.ip_address(ip)
    if address.is_unspecified:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((ip, 0))
        except OSError:
            return False
    return True


def advertised_address(listen_host: str) -> str:
    """What to put in TF_CONFIG for tasks that listen on ``listen_host`` on this machine.

    The wildcard is a place to listen, not an address: advertise the address on the default route instead (or
    loopback when there is none). A specific address must be this machine's.

    Raises:
        UsageError: ``listen_host`` is not an address of this machine (naming ``--host``).
    """
    ip = resolve(listen_host, "--host", socket.AF_UNSPEC)
    if ipaddress.ip_address(ip).is_unspecified:
        # Documentation prefixes (TEST-NET-2, 2001:db8::/32): only the routing table is consulted.
        v6 = ipaddress.ip_address(ip).version == 6
        try:
            return route_address("2001:db8::1" if v6 else "198.51.100.1")
        except UsageError:
            return "::1" if v6 else "127.0.0.1"
    if not is_local(ip):
        raise UsageError(f"--host {listen_host}: {ip} is not an address of this machine",
                         hint="give one of this machine's addresses, or 0.0.0.0 to listen on all of them")
    return listen_host
