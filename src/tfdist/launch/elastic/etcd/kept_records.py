"""The records a coordinator keeps at fixed keys (its claim, the policy's ``state``, the ``round`` record): put back at
once when anyone else writes over them, and read back at a take-over from etcd's history when the newest version
is junk or a record put back.

Why: any etcd writer can put bytes at any key. A record that does not open is ignored, but ignoring is not enough
for these three: junk on the ``coordinator`` key (on no lease) is cleared by the other machines and they claim, and
a coordinator that then takes over with junk at ``state`` forgets the running round (its machines' exits were never
answered). So the live coordinator answers every foreign write at its keys with its own record again (the other
machines wait :data:`CLAIM_REPAIR_S` before clearing a junk claim, time for that), and a take-over reads the key's
last :data:`HISTORY` versions and uses the one with the highest position: the state's position is (claim, counter),
so an older state of the run put back, which opens, loses to the newest honest one, as junk does. What is left: a
writer who writes faster than the coordinator repairs, or more than :data:`HISTORY` versions between the last honest
write and a take-over, or after etcd's history was compacted, can still make a take-over start from an older state
(its round is then stopped and run again: time, never a second copy of a round's workers).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from tfdist.launch.elastic.etcd.keys import JobKeys
from tfdist.launch.elastic.etcd.records import Position, Sealer
from tfdist.launch.elastic.etcd.store import Entry, EtcdStore

HISTORY = 32  # versions of a kept key read at a take-over (one read each)
CLAIM_REPAIR_S = 1.0  # how long a machine leaves junk on the coordinator key (no lease) before clearing it: the live
# coordinator, if there is one, puts its claim back within a tick or two of its watch


class ClaimGone(Exception):
    """The coordinator key was deleted or created again: this coordinator's claim is over."""


class KeptRecords:
    """What this coordinator last wrote at its kept keys, and what to write when someone else wrote there."""

    def __init__(self, keys: JobKeys, records: Sealer, claim: int, me: str, lease: int) -> None:
        self.keys, self.records, self.claim, self.me, self.lease = keys, records, claim, me, lease
        self.watched = (keys.coordinator, keys.state, keys.round)
        self._wrote_at: dict[str, int] = {}
        self._values: dict[str, bytes] = {}

    def wrote(self, puts: list[tuple[str, bytes, int | None]], revision: int, deletes: tuple[str, ...] = ()) -> None:
        """After a transaction of this coordinator's: the versions it wrote (or deleted) at the kept keys are its
        own (a deleted one is not put back: the job's end deletes them)."""
        for key, value, _ in puts:
            if key in (self.keys.state, self.keys.round):
                self._wrote_at[key], self._values[key] = revision, value
        for key in deletes:
            if key in (self.keys.state, self.keys.round):
                self._wrote_at[key] = revision
                self._values.pop(key, None)

    def claim_put(self) -> tuple[str, bytes, int]:
        key = self.keys.coordinator
        return key, self.records.seal(key, {"lease": self.me}), self.lease

    def answer(self, entry: Entry) -> tuple[str, bytes, int | None] | None:
        """The put that restores ``entry``'s key after a write that is not this coordinator's, or None (it was
        its own, or there is nothing of its own to restore yet). Raises ClaimGone."""
        if entry.key == self.keys.coordinator:
            if entry.deleted or entry.create_revision != self.claim:
                raise ClaimGone("the coordinator key was deleted or claimed again")
            opened = self.records.open(entry.key, entry.value)
            mine = opened is not None and opened[1].get("lease") == self.me and entry.lease == self.lease
            return None if mine else self.claim_put()
        if entry.mod_revision <= self._wrote_at.get(entry.key, 0) or entry.key not in self._values:
            return None  # this coordinator's own write (its watch reports them too), or nothing to put back
        return entry.key, self._values[entry.key], None


def versions(store: EtcdStore, entry: Entry | None, limit: int = HISTORY) -> Iterator[Entry]:
    """``entry``, then its key's earlier versions, newest first, at most ``limit`` (fewer after a compaction or at
    the version that created the key)."""
    count = 0
    while entry is not None and count < limit:
        yield entry
        count += 1
        if entry.mod_revision <= entry.create_revision:
            return
        entry = store.get_at(entry.key, entry.mod_revision - 1)


def newest_opened(found: list[tuple[int, tuple[Position, dict[str, Any]] | None]]) -> tuple[int, dict[str, Any]] | None:
    """Of a key's versions as ``(mod_revision, opened or None)``, newest first: ``(revision, body)`` of the one with
    the highest position (the first of equals: the newest), or None when none opened."""
    best: tuple[Position, int, dict[str, Any]] | None = None
    for revision, opened in found:
        if opened is not None and (best is None or opened[0] > best[0]):
            best = (opened[0], revision, opened[1])
    return None if best is None else (best[1], best[2])


def read_kept(store: EtcdStore, records: Sealer, entry: Entry | None, say: Callable[[str], None]) -> dict[str, Any]:
    """The body of the newest honest record at ``entry``'s key (:func:`newest_opened` over :func:`versions`); {}
    when none of the versions read opens."""
    found = [(v.mod_revision, records.open(v.key, v.value)) for v in versions(store, entry)]
    chosen = newest_opened(found)
    if chosen is None:
        return {}
    if entry is not None and chosen[0] != entry.mod_revision:
        say(f"the newest record at {entry.key} is not this run's latest (junk or one put back): used the version "
            f"of revision {chosen[0]}")
    return chosen[1]
