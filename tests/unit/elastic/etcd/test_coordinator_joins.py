"""The etcd coordinator's joins go through the same check as a built-in rendezvous' (``Join.check``): the address
of a join record lands in every task's TF_CONFIG, so a record whose address is not a host name or an IP address is
refused, as the TCP server refuses that join frame. Runs without etcd: sealed entries are fed to the coordinator's
event handler, and its writes land in a recording store (the real etcd runs in the backend contract suite)."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from tfdist.launch.elastic.etcd.coordinator import Coordinator
from tfdist.launch.elastic.etcd.keys import JobKeys
from tfdist.launch.elastic.etcd.records import RunIdentity, Sealer
from tfdist.launch.elastic.etcd.store import Entry
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings

SECRET = b"job-secret-for-tests"
RUN = RunIdentity(cluster=0x1234, revision=5)
RECORDS = Sealer(SECRET, str(RUN))


class RecordingStore:
    """Where the coordinator's writes go: what it put, by key (no etcd: this test is about the join rule)."""

    def __init__(self) -> None:
        self.puts: dict[str, bytes] = {}

    def put(self, key: str, value: bytes, lease: int | None = None) -> int:
        self.puts[key] = value
        return len(self.puts)


def _coordinator() -> tuple[Coordinator, RecordingStore, list[str]]:
    store, said = RecordingStore(), []
    settings = RendezvousSettings(job="joins", min_nodes=1, max_nodes=4, node_timeout=5.0)
    keys = JobKeys("/tfdist", "joins")
    coordinator = Coordinator(store, keys, settings, RECORDS, RUN, claim=1,  # type: ignore[arg-type]
                              me="00000000000000aa", say=said.append, stop=threading.Event())
    return coordinator, store, said


def _join_entry(keys: JobKeys, lease: str, record: dict[str, Any], revision: int) -> Entry:
    key = keys.node(lease)
    return Entry(key=key, value=RECORDS.seal(key, record), create_revision=revision, mod_revision=revision, lease=0)


GOOD = {"job": "joins", "name": "m0", "address": "10.0.0.1", "slots": 1, "node_rank": None, "versions": {}}


def _answer(coordinator: Coordinator, store: RecordingStore, lease: str) -> dict[str, Any] | None:
    key = coordinator.keys.to_node(lease)
    opened = None if key not in store.puts else RECORDS.open(key, store.puts[key])
    return None if opened is None else opened[1]


def test_a_good_join_record_is_welcomed():
    coordinator, store, _said = _coordinator()
    coordinator._on_event(_join_entry(coordinator.keys, "00000000000000b1", GOOD, 7))
    assert _answer(coordinator, store, "00000000000000b1") == {"type": "welcome", "node_id": 7}
    assert [n.address for n in coordinator.policy.nodes.values()] == ["10.0.0.1"]


@pytest.mark.parametrize("field, value, reason", [
    ("address", "a b;c", "address: not a host name or IP address"),
    ("address", "10.0.0.1\nworker", "address"),
    ("slots", 0, "slots"),
    ("name", "x" * 300, "name"),
])
def test_a_join_record_the_tcp_server_would_refuse_is_refused_and_never_admitted(field, value, reason):
    coordinator, store, said = _coordinator()
    coordinator._on_event(_join_entry(coordinator.keys, "00000000000000b2", {**GOOD, field: value}, 8))
    answer = _answer(coordinator, store, "00000000000000b2")
    assert answer is not None and answer["type"] == "refused" and reason in answer["reason"], (answer, said)
    assert answer["status"] == 2
    assert coordinator.policy.nodes == {}


@pytest.mark.parametrize("positions, acted_on", [((2, 3), 2), ((3, 3), 1), ((3, 2), 1), ((1, 2), 2)])
def test_a_machines_message_put_back_after_a_newer_one_is_not_acted_on(positions, acted_on):
    coordinator, _store, said = _coordinator()
    lease = "00000000000000b3"
    coordinator._on_event(_join_entry(coordinator.keys, lease, GOOD, 9))
    handled: list[dict[str, Any]] = []
    coordinator._dispatch = lambda _node, record, _now: handled.append(record)  # type: ignore[method-assign]
    key = coordinator.keys.from_node(lease)
    for position in positions:
        value = RECORDS.seal(key, {"type": "ready", "ports": [20000 + position]}, (position,))
        coordinator._on_event(Entry(key=key, value=value, create_revision=10, mod_revision=10 + position, lease=0))
    assert len(handled) == acted_on, (handled, said)
    assert (acted_on == 1) is any("put back after a newer one" in line for line in said)


def test_a_record_of_another_run_is_ignored_with_one_line():
    coordinator, store, said = _coordinator()
    other = Sealer(SECRET, str(RunIdentity(cluster=0x1234, revision=4)))
    key = coordinator.keys.node("00000000000000b4")
    for _ in range(3):
        coordinator._on_event(Entry(key=key, value=other.seal(key, GOOD), create_revision=8, mod_revision=8, lease=0))
    assert coordinator.policy.nodes == {} and store.puts == {}
    assert len([line for line in said if "ignored the record at" in line]) == 1, said
