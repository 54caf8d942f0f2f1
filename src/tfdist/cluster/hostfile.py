"""Host files and host lists for ``tfdist launch --hostfile / --hosts``, as DeepSpeed and Horovod write them.

A host file has one machine per line, ``host [slots=N] [roles=R[,R...]]``; ``#`` starts a comment; blank lines are
ignored::

    # two GPUs each
    gpu-a slots=2
    trainer@gpu-b   slots=2
    10.0.0.7 slots=2 roles=ps

``roles=`` pins a machine to roles of a job with ``--chief/--ps/--evaluator`` (placement: :mod:`tfdist.cluster.placement`).

``--hosts a,b:2`` is the same list on the command line (``host[:slots]``). A host without ``slots`` runs ``-n``
workers. ``--include`` / ``--exclude`` (comma-separated host names) narrow the list; order is kept, and the first
host is node rank 0 (its worker 0 is the chief). Pure: reads text, touches no network.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from tfdist.cluster.address import check_host
from tfdist.cluster.placement import parse_roles
from tfdist.errors import UsageError

MAX_SLOTS = 1024
# An ssh user name (POSIX portable characters): full match, so nothing a shell or ssh would read survives.
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_SLOTS = re.compile(r"[0-9]{1,4}")


@dataclass(frozen=True)
class HostEntry:
    """One machine of a host list: the ssh destination, how many tasks it runs (None: ``-n``), the roles it is pinned
    to (empty: any)."""

    host: str
    slots: int | None = None
    roles: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The machine's name without the ssh user (what ``--include`` / ``--exclude`` match)."""
        return self.host.rpartition("@")[2]


def _host(text: str, where: str) -> str:
    """``[user@]host``, the host checked by the cluster model's one rule for host names."""
    user, at, host = text.rpartition("@")
    if at and not _USER.fullmatch(user):
        raise UsageError(f"{where}: {user[:40]!r} is not a user name", hint="write user@host, or only the host")
    check_host(host, where)
    return text


def _slots(text: str, where: str) -> int:
    if not _SLOTS.fullmatch(text) or not 1 <= int(text) <= MAX_SLOTS:
        raise UsageError(f"{where}: slots {text!r} is not a number of workers", hint=f"use 1-{MAX_SLOTS}")
    return int(text)


def _no_duplicates(entries: list[HostEntry], where: str) -> list[HostEntry]:
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise UsageError(f"{where}: host {entry.name} is listed twice", hint="list each machine once, "
                             "with slots=N for several workers")
        seen.add(entry.name)
    if not entries:
        raise UsageError(f"{where}: no hosts", hint="list one machine per line: host [slots=N]")
    return entries


def parse_hostfile(text: str, source: str = "host file") -> list[HostEntry]:
    """Parse a host file's text; ``source`` (the path) names it in errors.

    Raises:
        UsageError: a line is not ``host [slots=N] [roles=...]``, a host repeats, or there is no host.
    """
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source} line {number}"
        words = line.split()
        host = _host(words[0], where)
        settings: dict[str, str] = {}
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if key not in ("slots", "roles") or not sep:
                raise UsageError(f"{where}: unknown setting {word[:40]!r}",
                                 hint="lines look like: host slots=2 (or host slots=2 roles=ps)")
            if key in settings:
                raise UsageError(f"{where}: {key} given twice")
            settings[key] = value
        slots = _slots(settings["slots"], where) if "slots" in settings else None
        roles = parse_roles(settings["roles"], where) if "roles" in settings else ()
        entries.append(HostEntry(host, slots, roles))
    return _no_duplicates(entries, source)


def parse_hosts_flag(text: str) -> list[HostEntry]:
    """``a,b:2,user@c`` -> entries (``--hosts``).

    Raises:
        UsageError: an entry is not ``host[:slots]`` or a host repeats.
    """
    entries = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            raise UsageError(f"--hosts {text!r} has an empty entry", hint="write --hosts a,b:2")
        host, sep, slots = piece.partition(":")
        entries.append(HostEntry(_host(host, "--hosts"), _slots(slots, "--hosts") if sep else None))
    return _no_duplicates(entries, "--hosts")


def _names(text: str | None, flag: str) -> list[str]:
    if not text:
        return []
    return [_host(n.strip(), flag) for n in text.split(",")]


def select_hosts(entries: Sequence[HostEntry], include: str | None = None,
                 exclude: str | None = None) -> list[HostEntry]:
    """Keep the hosts named in ``include`` (all when None), then drop those in ``exclude``; order is kept.

    Raises:
        UsageError: a name in either list is not in the host list, or nothing is left.
    """
    known = {e.name for e in entries}
    wanted, unwanted = _names(include, "--include"), _names(exclude, "--exclude")
    for flag, names in (("--include", wanted), ("--exclude", unwanted)):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError(f"{flag}: {unknown[0]} is not in the host list", hint="name hosts as listed")
    kept = [e for e in entries if (not wanted or e.name in wanted) and e.name not in unwanted]
    if not kept:
        raise UsageError("--include/--exclude leave no host", hint="keep at least one machine")
    return kept
