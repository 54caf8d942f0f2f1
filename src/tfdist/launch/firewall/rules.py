"""Pure: the nftables ruleset that closes a job's TensorFlow and metrics ports to every machine outside its round.

TensorFlow's gRPC server binds every interface (``0.0.0.0``, whatever TF_CONFIG names), has no authentication and
runs whatever graph it is sent, so the only place to keep strangers out is the packet filter. One table per launcher
(``inet`` family: IPv4 and IPv6 in one), rendered whole and loaded with ``nft -f``: the file creates the table,
deletes it and defines it again, which nft applies as one transaction, so there is never a moment with the old
members gone and the new ones not yet admitted, and a rerun with a new round's members replaces everything.

Within the table: loopback and the round's machines pass; any other source is answered with a TCP reset on the
guarded ports only (the rest of the machine's traffic is not this table's business: ``policy accept``). Answers to a
connection this machine opened pass too (conntrack's reply direction): while no task listens on a guarded port (between
rounds, after the tasks), the kernel may give it to any program's outgoing connection, whose far side is no member.
A connection someone else opened is always in the original direction, so a stranger cannot pass that way.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

TABLE_PREFIX = "tfdist-"
# nft 1.0.6 (Debian 12) refuses a quoted table name, so the name is held to characters its grammar takes unquoted
# (a letter first, then letters, digits, '_', '.', '-'): the job id part is the launcher's job-id rule, the tag is
# per launcher, so two launchers of one job on one machine never replace or delete each other's table.
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TAG = re.compile(r"[0-9a-f]{8}")
TABLE = re.compile(r"tfdist-[A-Za-z0-9][A-Za-z0-9_.-]{0,63}-[0-9a-f]{8}")
_PRIORITY = "filter - 1"  # a reset is final whatever other tables accept; hooked first, it answers before them


def table_name(job: str, tag: str) -> str:
    """The table of one launcher of ``job``.

    Raises:
        ValueError: ``job`` or ``tag`` holds anything but the characters nft takes unquoted (a hostile job id such
            as ``x { flush ruleset }`` never reaches nft).
    """
    if not _JOB.fullmatch(job):
        raise ValueError(f"job id {job!r} cannot name an nftables table (letters, digits, '_', '.', '-'; at most 64)")
    if not _TAG.fullmatch(tag):
        raise ValueError(f"table tag {tag!r} is not 8 lowercase hex digits")
    return f"{TABLE_PREFIX}{job}-{tag}"


def checked_table(name: str) -> str:
    if not TABLE.fullmatch(name):
        raise ValueError(f"{name!r} is not a tfdist table name")
    return name


@dataclass(frozen=True)
class Guard:
    """What one table says: ``ports`` (TCP) open only to ``members`` and loopback."""

    table: str
    ports: frozenset[int]
    members: frozenset[IpAddress]

    @classmethod
    def of(cls, table: str, ports: Iterable[int], members: Iterable[str | IpAddress]) -> Guard:
        """Raises ValueError for a bad table name, a port outside 1-65535 or a member that is not an IP address."""
        checked = frozenset(int(p) for p in ports)
        bad = sorted(p for p in checked if not 1 <= p <= 65535)
        if bad:
            raise ValueError(f"port {bad[0]} is outside 1-65535")
        return cls(checked_table(table), checked, frozenset(_ip(m) for m in members))


def _ip(member: str | IpAddress) -> IpAddress:
    address = member if isinstance(member, (ipaddress.IPv4Address, ipaddress.IPv6Address)) else (
        ipaddress.ip_address(str(member).strip("[]")))
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        raise ValueError(f"{member}: a scoped (link-local %zone) address cannot be a set element")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # an IPv4 peer seen through a dual-stack socket arrives as plain IPv4
    return address


def _elements(items: Iterable[object]) -> str:
    return ", ".join(str(i) for i in items)


def render(guard: Guard) -> str:
    """The ``nft -f`` text that replaces the table with ``guard``, atomically."""
    name = guard.table
    lines = [f"table inet {name} {{}}", f"delete table inet {name}", f"table inet {name} {{"]
    for set_name, kind, version in (("members4", "ipv4_addr", 4), ("members6", "ipv6_addr", 6)):
        members = sorted(m for m in guard.members if m.version == version)
        elements = f" elements = {{ {_elements(members)} }};" if members else ""
        lines.append(f"\tset {set_name} {{ type {kind};{elements} }}")
    lines += ["\tchain input {", f"\t\ttype filter hook input priority {_PRIORITY}; policy accept;"]
    if guard.ports:
        ports = f"{{ {_elements(sorted(guard.ports))} }}"
        lines += ['\t\tiifname "lo" accept', f"\t\ttcp dport != {ports} accept", "\t\tct direction reply accept",
                  "\t\tip saddr @members4 accept", "\t\tip6 saddr @members6 accept",
                  f"\t\ttcp dport {ports} reject with tcp reset"]
    lines += ["\t}", "}"]
    return "\n".join(lines) + "\n"


def removal(table: str) -> str:
    """The ``nft -f`` text that deletes the table, and succeeds when it is already gone."""
    name = checked_table(table)
    return f"table inet {name} {{}}\ndelete table inet {name}\n"
