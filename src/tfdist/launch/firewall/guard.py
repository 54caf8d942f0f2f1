"""The launcher's side of ``--firewall``: one table for its life, replaced every round, deleted on every exit path.

``open`` loads the table before any task listens; ``admit`` replaces it with a round's members and ports; ``close``
deletes it (normal end, failure, SIGINT/SIGTERM: the launchers' ``finally``). For ``kill -9`` of the launcher the
table is announced to an orphan watcher of its own (``launch/process/orphan_watcher.py``), which deletes it when the
launcher's pipe closes without a ``done``.
"""
from __future__ import annotations

import ipaddress
import secrets
import socket
from typing import Callable, Iterable, Sequence

from tfdist.errors import UsageError
from tfdist.protocol import TaskPlan
from tfdist.launch.firewall.nft import FirewallFailed, find_nft, load, why_not
from tfdist.launch.firewall.members import cluster_hosts, task_ports
from tfdist.launch.firewall.rules import Guard, IpAddress, removal, render, table_name

LOOPBACK = ("127.0.0.1", "::1")


def addresses_of(hosts: Iterable[str]) -> set[IpAddress]:
    """Each host's IP addresses: an address as it is, a name resolved (a name that does not resolve admits nothing,
    which only closes the port tighter)."""
    found: set[IpAddress] = set()
    for host in hosts:
        host = host.strip("[]").split("%")[0]  # a set holds no link-local zone: the address alone
        try:
            found.add(ipaddress.ip_address(host))
            continue
        except ValueError:
            pass
        try:
            found.update(ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(host, None))
        except (OSError, ValueError):
            pass
    return found


class Firewall:
    """This launcher's table. Use :meth:`open`; every method is safe to call after :meth:`close`."""

    def __init__(self, table: str, nft: str, say: Callable[[str], None]) -> None:
        self.table, self._nft, self._say = table, nft, say
        self.ports: frozenset[int] = frozenset()
        self.fixed_ports: frozenset[int] = frozenset()  # guarded in every round (the launcher's own metrics)
        self.members: frozenset[IpAddress] = frozenset()
        self._watcher = None
        self._loaded = False  # a table of ours is in the kernel
        self._closed = False  # close() ran: a late round must not load the table again

    @classmethod
    def open(cls, job: str, ports: Iterable[int | None] = (), *, say: Callable[[str], None] = lambda _: None,
             nft: str | None = None) -> Firewall:
        """Load the table guarding ``ports`` (None: not used) in every round, open to loopback only until a round
        admits its machines.

        Raises:
            UsageError: ``--firewall`` cannot work here (not Linux, not root, no nft), or nft refused the table.
        """
        nft = nft or find_nft()
        reason = why_not(nft)
        if reason is not None:
            raise UsageError(reason, reference="firewall-unavailable")
        try:
            table = table_name(job, secrets.token_hex(4))
        except ValueError as bad:
            raise UsageError(f"--firewall: {bad}", hint="pass --rdzv-id/--job-name of letters, digits, '_', '.', '-'")
        assert nft is not None
        firewall = cls(table, nft, say)
        firewall.fixed_ports = frozenset(p for p in ports if p is not None)
        firewall._watch()
        try:
            firewall.admit(LOOPBACK)
        except FirewallFailed as failed:
            firewall.close()
            raise UsageError(f"--firewall: {failed}", hint="check that this kernel has nf_tables") from None
        return firewall

    def _watch(self) -> None:
        from tfdist.launch.process.reaper import Watcher  # the kill -9 path: the watcher deletes the table

        self._watcher = Watcher(f"firewall-{self.table}")
        self._watcher.delete_table(self.table)

    def admit(self, hosts: Iterable[str | IpAddress], ports: Iterable[int] | None = None) -> None:
        """Replace the table: ``ports`` (else the ones already guarded) and the fixed ones, open to ``hosts`` and
        loopback only.

        Raises:
            FirewallFailed: nft refused; the previous table stays in force (one transaction).
        """
        if self._closed:
            return
        members = frozenset(addresses_of(str(h) for h in hosts)) | frozenset(addresses_of(LOOPBACK))
        guard = Guard.of(self.table, self.fixed_ports | frozenset(self.ports if ports is None else ports), members)
        load(self._nft, render(guard))
        self._loaded, self.ports, self.members = True, guard.ports, guard.members

    def admit_round(self, plans: Sequence[TaskPlan]) -> None:
        """Before a round's tasks start: guard their ports, open to the machines of their cluster only."""
        self.admit(cluster_hosts(plans), task_ports(plans))

    def close(self) -> None:
        """Delete the table (once; a failure is said, never raised: this runs on the way out)."""
        self._closed = True
        if self._loaded:
            self._loaded = False
            try:
                load(self._nft, removal(self.table))
            except FirewallFailed as failed:
                self._say(f"--firewall: could not delete nftables table {self.table}: {failed}")
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None


class NoFirewall:
    """Without ``--firewall``: the same calls, doing nothing."""

    table = ""

    def admit(self, hosts: Iterable[str | IpAddress], ports: Iterable[int] | None = None) -> None:
        pass

    def admit_round(self, plans: Sequence[TaskPlan]) -> None:
        pass

    def close(self) -> None:
        pass


def firewall_for(enabled: bool, job: str, ports: Iterable[int | None] = (), *,
                 say: Callable[[str], None] = lambda _: None) -> Firewall | NoFirewall:
    """The launchers' one call: a loaded :class:`Firewall` with ``--firewall``, else :class:`NoFirewall`."""
    return Firewall.open(job, ports, say=say) if enabled else NoFirewall()
