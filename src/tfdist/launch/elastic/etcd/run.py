"""Which run an agent joins, and what it makes of the ``coordinator`` key: the rules that keep junk and replays at
the job's keys from refusing, blocking or splitting a run (records.py seals; this reads).

- **The run** (:func:`join_run`): the ``run`` anchor's create revision names the run (``records.RunIdentity``
  says why). No anchor: the first machine creates one (create-if-absent: the others read it), unless a fresh
  ``finish`` says the job just ended (late machines of a finished run are told so). An anchor whose record does not
  open is still the run's anchor: its create revision is what counts, so junk put over it changes nothing.
- **The coordinator key** (:func:`claim_verdict`): a claim counts only when it opens for this run and names the
  lease it is attached to. Anything else at the key is junk: it is cleared (deleted if unchanged) by a machine it
  cannot belong to anyone but (no lease: a claim always has one, after ``kept_records.CLAIM_REPAIR_S``, time for a
  live coordinator to put its claim back; this machine's own lease while it does not coordinate, which a replayed
  claim of its own would be); junk attached to another machine's lease waits for that
  lease (that machine clears it). So a stranger with another secret, whose claim is junk to the job and the job's
  to it, never deletes a live claim, and junk never blocks a later run.
- **A round cut short** (:func:`announced_round`): a round's writes may take several transactions (``txn.py``), its
  record and the state last; a coordinator that lost its claim between them leaves some machines with the round's
  message and no record of the round. The next coordinator finds those messages in the outboxes and stops that round
  (its receivers run it; the others never heard of it), so no machine is sent the same round twice.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from tfdist.launch.elastic.etcd.keys import JobKeys, lease_name
from tfdist.launch.elastic.etcd.records import RunIdentity, Sealer, finish_applies
from tfdist.launch.elastic.etcd.store import Entry, EtcdStore


UNOPENED = ("does not open with this job secret for this run (another job secret, another run, or written by someone "
            "without the secret)")
PUT_BACK = "is a message put back after a newer one (acted on already)"


class OnceSaid:
    """Says each unreadable key once: a writer repeating its junk must not flood the agent's log."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._said: set[tuple[str, str]] = set()

    def __call__(self, key: str, what: str = UNOPENED) -> None:
        if (key, what) not in self._said:
            self._said.add((key, what))
            self.say(f"ignored the record at {key}: it {what}")

    @property
    def unopened(self) -> list[str]:
        """The keys whose records did not open (for the one line a machine that gets no answer ends with)."""
        return sorted(key for key, what in self._said if what == UNOPENED)


class JobOver(Exception):
    """A fresh finish record: this machine is late for a run that ended."""


def join_run(store: EtcdStore, keys: JobKeys, jobwide: Sealer, junk: OnceSaid) -> RunIdentity:
    """The run this machine joins (creating its anchor when there is none). Raises JobOver, EtcdUnavailable,
    EtcdRefused."""
    while True:
        anchor = store.get(keys.run)
        if anchor is not None:
            if jobwide.open(keys.run, anchor.value) is None:
                junk(keys.run)
            return RunIdentity(store.cluster_id, anchor.create_revision)
        finish = store.get(keys.finish)
        if finish is not None:
            opened = jobwide.open(keys.finish, finish.value)
            at = opened[1].get("at") if opened else None
            if isinstance(at, (int, float)) and finish_applies(False, float(at), time.time()):
                raise JobOver(str(opened[1].get("status")) if opened else "")
            if opened is None or not isinstance(at, (int, float)):
                junk(keys.finish)
        created = store.create(keys.run, jobwide.seal(keys.run, {"created_at": time.time()}))
        if created is not None:
            return RunIdentity(store.cluster_id, created)


def claim_verdict(opened: tuple[Any, dict[str, Any]] | None, entry: Entry, my_lease: int,
                  coordinating: bool) -> str:
    """What a machine does about the entry at the coordinator key: ``"valid"`` (a live claim: wait for it to go),
    ``"clear"`` (junk only this machine can own: delete it if unchanged, then claim), ``"wait"`` (junk on another
    machine's lease)."""
    mine = entry.lease == my_lease
    if opened is not None and entry.lease != 0 and opened[1].get("lease") == lease_name(entry.lease) and \
            not (mine and not coordinating):
        return "valid"
    return "clear" if entry.lease == 0 or mine else "wait"


def announced_round(outboxes: dict[str, dict[str, Any]], recorded: int) -> tuple[int, list[str]]:
    """``(round, its receivers)`` of a round announced past the ``recorded`` one (the state's round) in the latest
    messages of the machines' outboxes (lease -> opened message); ``(recorded, [])`` when there is none. Only the
    newest such round counts: the coordinator writes one round at a time, and its cut-short writes were its last."""
    rounds = {lease: body["round"] for lease, body in outboxes.items()
              if body.get("type") == "round" and type(body.get("round")) is int and body["round"] > recorded}
    if not rounds:
        return recorded, []
    newest = max(rounds.values())
    return newest, sorted(lease for lease, number in rounds.items() if number == newest)
