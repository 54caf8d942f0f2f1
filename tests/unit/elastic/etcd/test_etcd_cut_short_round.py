"""A round whose writes were cut short between transactions (issue 33: a round of more than 128 machines takes
several, its record and the state last): the coordinator that takes over finds the round's messages in some
machines' outboxes and no record of it. It must stop that round on the machines that received it, and number the
next one past it; before, it saw only the state's round, started the same round again, and the receivers were sent
a second round 0 while running the first. Runs without etcd: the take-over reads a prepared key space and its
writes land in a recording store."""
from __future__ import annotations

import threading
from typing import Any

from tfdist.launch.elastic.etcd.coordinator import Coordinator
from tfdist.launch.elastic.etcd.keys import JobKeys
from tfdist.launch.elastic.etcd.records import RunIdentity, Sealer
from tfdist.launch.elastic.etcd.run import announced_round
from tfdist.launch.elastic.etcd.store import Entry
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.rendezvous.membership_types import Phase, RendezvousSettings

SECRET = b"job-secret-for-tests"
RUN = RunIdentity(cluster=0x1234, revision=5)
RECORDS = Sealer(SECRET, str(RUN))
KEYS = JobKeys("/tfdist", "cut")
LEASES = ["00000000000000b1", "00000000000000b2", "00000000000000b3"]
OLD_CLAIM, NEW_CLAIM = 20, 90


class KeySpace:
    """What the take-over reads (``get_prefix``) and where the new coordinator's writes go, in order."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.written: list[tuple[str, dict[str, Any]]] = []

    def get_prefix(self, prefix: str) -> tuple[int, list[Entry]]:
        return 100, [e for e in self.entries if e.key.startswith(prefix)]

    def delete_prefix(self, prefix: str) -> None:
        pass

    def put(self, key: str, value: bytes, lease: int | None = None) -> int:
        self._record([(key, value, lease)])
        return 101

    def txn_if_created_at(self, guard: str, revision: int, puts: list, deletes: tuple = ()) -> int:
        assert revision == NEW_CLAIM
        self._record(puts)
        return 102

    def _record(self, puts: list) -> None:
        for key, value, _lease in puts:
            opened = RECORDS.open(key, value)
            assert opened is not None
            self.written.append((key, opened[1]))


def _entry(key: str, body: dict[str, Any], position: tuple[int, ...], revision: int) -> Entry:
    return Entry(key, RECORDS.seal(key, body, position), revision, revision, lease=0)


def _key_space(receivers: int) -> KeySpace:
    """Three machines ready for round 0; the former coordinator's round 0 reached the first ``receivers``."""
    entries = [Entry(KEYS.run, b"anchor", RUN.revision, RUN.revision, 0),
               _entry(KEYS.state, {"round": -1, "phase": "waiting"}, (), 10)]
    for index, lease in enumerate(LEASES):
        join = {"job": "cut", "name": f"m{index}", "address": f"10.0.0.{index + 1}", "slots": 1, "node_rank": None,
                "versions": {}}
        entries.append(_entry(KEYS.node(lease), join, (), 11 + index))
        entries.append(_entry(KEYS.from_node(lease), M.as_dict(M.Ready(ports=[2000 + index])), (2,), 14 + index))
    for index, lease in enumerate(LEASES[:receivers]):
        entries.append(_entry(KEYS.to_node(lease), {"type": "round", "round": 0}, (OLD_CLAIM, 5 + index), 30 + index))
    return KeySpace(entries)


def _take_over(space: KeySpace) -> Coordinator:
    settings = RendezvousSettings(job="cut", min_nodes=3, max_nodes=3, node_timeout=5.0, first_round_wait=0.0)
    coordinator = Coordinator(space, KEYS, settings, RECORDS, RUN, claim=NEW_CLAIM,  # type: ignore[arg-type]
                              me="00000000000000aa", say=lambda _m: None, stop=threading.Event())
    coordinator._take_over()
    coordinator._step()
    return coordinator


def test_a_round_that_reached_some_machines_only_is_stopped_there_and_never_sent_again():
    space = _key_space(receivers=2)
    coordinator = _take_over(space)
    messages = [(JobKeys.lease_of(key), body) for key, body in space.written if key.startswith(KEYS.outbox)]
    assert ("round", 0) not in {(body["type"], body.get("round")) for _lease, body in messages}
    assert sorted(lease for lease, body in messages if body["type"] == "stop") == LEASES[:2]
    assert {body["round"] for _lease, body in messages if body["type"] == "stop"} == {0}
    assert coordinator.policy.round == 0 and coordinator.policy.phase is Phase.STOPPING


def test_a_round_written_whole_or_not_at_all_changes_nothing():
    space = _key_space(receivers=0)  # nothing of round 0 reached anyone: it is simply formed (again)
    _take_over(space)
    rounds = [body for key, body in space.written if key.startswith(KEYS.outbox) and body["type"] == "round"]
    assert len(rounds) == 3 and {body["round"] for body in rounds} == {0}


def test_announced_round_counts_only_round_messages_past_the_recorded_round():
    outboxes = {"a": {"type": "round", "round": 4}, "b": {"type": "round", "round": 3}, "c": {"type": "stop",
                "round": 5}, "d": {"type": "round", "round": "4"}, "e": {}}
    assert announced_round(outboxes, 3) == (4, ["a"])
    assert announced_round(outboxes, 4) == (4, [])
