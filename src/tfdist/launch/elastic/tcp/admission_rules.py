"""How much room the rendezvous's admission gives unauthenticated connections, and whom it trusts less: pure rules,
no sockets (``admission.py`` is the mechanism and explains the stages)."""
from __future__ import annotations

import collections
import resource

PENDING_PER_SOURCE = 4  # challenged connections of a suspect source address
# Connections of one source address whose hello is not complete (the oldest of that address gives way): enough
# that a fleet behind one NAT address arriving at once is accepted faster than its hellos are read, few enough that
# one address cannot take the room from everyone else's.
FRESH_PER_SOURCE = 16
# The least room for unauthenticated connections, whatever the job's size: a small job must be no easier to crowd
# out than a large one (twenty flooding addresses fill 64 slots within the round trip of an agent 100 ms away). A
# waiting connection costs a descriptor and at most auth.HELLO bytes.
PENDING_TOTAL = 1024
PENDING_LEAST = 64  # ... and the least when the process's descriptors are few (a quarter of them is less)
SUSPECT_S = 30.0  # how long a source address that failed a handshake stays suspect
DEFAULT_NODES = 512  # the job size assumed when the server does not say (``nodes``)
SUSPECTS_KEPT = 4096  # suspect addresses remembered (the oldest forgotten first): bounded memory
BACKLOG_LEAST = 128
ACCEPT_BACKOFF_S = 0.1
ACCEPTS_PER_WAKE = 16  # then the handshakes under way get their turn


def handshake_room(nodes: int, descriptors: int | None = None) -> int:
    """Unauthenticated connections held at once for a job of at most ``nodes`` machines: two per machine (a whole
    fleet arriving together, and as many strangers), at least :data:`PENDING_TOTAL`, and at most a quarter of the
    process's descriptors (``descriptors``: its soft limit), which the members need too, but never below
    :data:`PENDING_LEAST`."""
    room = max(PENDING_TOTAL, 2 * nodes)
    if descriptors is not None and descriptors > 0:
        room = min(room, max(PENDING_LEAST, descriptors // 4))
    return room


def listen_backlog(nodes: int) -> int:
    """The listen backlog for ``nodes`` machines: room for every machine's connect at once (the kernel caps it at
    ``net.core.somaxconn``), so that a burst waits in the kernel instead of being reset."""
    return max(BACKLOG_LEAST, 2 * nodes)


def descriptor_limit() -> int | None:
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


class Suspects:
    """Source addresses that failed a handshake (a wrong hello, a wrong proof, no proof in time), each suspect for
    :data:`SUSPECT_S` seconds after its last failure; at most :data:`SUSPECTS_KEPT` (the oldest forgotten first),
    so a stranger with many addresses costs bounded memory. Counting a source only once it failed is what lets a
    fleet behind one NAT address in: honest agents never fail a proof."""

    def __init__(self, keep_for: float = SUSPECT_S, kept: int = SUSPECTS_KEPT) -> None:
        self.keep_for, self.kept = keep_for, kept
        self._failed: collections.OrderedDict[str, float] = collections.OrderedDict()

    def mark(self, source: str, now: float) -> None:
        self._failed.pop(source, None)
        self._failed[source] = now
        while len(self._failed) > self.kept:
            self._failed.popitem(last=False)

    def holds(self, source: str, now: float) -> bool:
        """Whether ``source`` is suspect at ``now`` (a stale entry is forgotten here)."""
        failed = self._failed.get(source)
        if failed is not None and now - failed > self.keep_for:
            del self._failed[source]
            return False
        return failed is not None

    def clear(self) -> None:
        self._failed.clear()

    def __len__(self) -> int:
        return len(self._failed)

    def __contains__(self, source: object) -> bool:
        return source in self._failed
