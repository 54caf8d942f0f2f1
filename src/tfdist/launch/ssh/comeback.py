"""Hosts that come back, and hosts a discovery script adds or drops: when to try a lost host again, and what a new
host list changes. Pure: the host-file driver (``driver.py``) feeds it the time and what it saw, and carries out
what it answers (probe a host over ssh, start or stop its agent).

Cool-down (Horovod's blacklist): a host-file host whose agent was lost is probed again after ``low`` seconds; each
probe it does not answer doubles the wait, up to ``high``. A host that answers gets its agent started again and joins
the job at the rendezvous' next round, as any machine that joins does. ``--host-cooldown-range LOW:HIGH`` sets both.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tfdist.cluster.hostfile import HostEntry
from tfdist.errors import UsageError


@dataclass(frozen=True)
class CooldownRange:
    low: float = 10.0
    high: float = 300.0

    def wait(self, misses: int) -> float:
        """Seconds before the next probe of a host that missed ``misses`` probes since it was lost."""
        return min(self.high, self.low * (2.0 ** max(0, misses)))


def parse_cooldown_range(text: str) -> CooldownRange:
    low, sep, high = text.partition(":")
    try:
        values = (float(low), float(high) if sep else float(low) * 30)
    except ValueError:
        values = (-1.0, -1.0)
    if not 0 < values[0] <= values[1]:
        raise UsageError(f"--host-cooldown-range {text!r} is not LOW:HIGH seconds with 0 < LOW <= HIGH",
                         hint="for example 10:300 (the first retry after 10 s, then doubling up to 300 s)")
    return CooldownRange(*values)


@dataclass
class Comebacks:
    """Lost hosts and when each may be probed next."""

    cooldown: CooldownRange
    misses: dict[str, int] = field(default_factory=dict)
    next_probe: dict[str, float] = field(default_factory=dict)

    def lost(self, host: str, now: float) -> None:
        if host not in self.next_probe:
            self.misses[host] = 0
            self.next_probe[host] = now + self.cooldown.wait(0)

    def due(self, now: float) -> list[str]:
        """Hosts to probe now (each is then out of the list until :meth:`silent` or :meth:`back`)."""
        ready = [host for host, at in self.next_probe.items() if at <= now]
        for host in ready:
            self.next_probe[host] = float("inf")
        return ready

    def silent(self, host: str, now: float) -> float:
        """The probe got no answer: wait longer. Returns the wait."""
        self.misses[host] = self.misses.get(host, 0) + 1
        wait = self.cooldown.wait(self.misses[host])
        self.next_probe[host] = now + wait
        return wait

    def back(self, host: str) -> None:
        self.misses.pop(host, None)
        self.next_probe.pop(host, None)

    def forget(self, host: str) -> None:
        """The host left the host list (discovery): never probed again."""
        self.back(host)


def changes(current: list[HostEntry], discovered: list[HostEntry]) -> tuple[list[HostEntry], list[str]]:
    """What a discovery script's new list changes: (hosts to add, names of hosts to drop). A host whose slots
    changed is left as it is (its agent keeps its workers until it restarts)."""
    known = {e.name for e in current}
    seen = {e.name for e in discovered}
    return [e for e in discovered if e.name not in known], [e.name for e in current if e.name not in seen]
