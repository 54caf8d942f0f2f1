"""A join that etcd cuts short is tried again until the deadline, as the built-in backend's client tries again
(issue 33: a fleet joining at once makes etcd slow; before, one timed-out request while joining made the agent exit
at once, however long --rdzv-timeout was). The half-made session is undone first: its lease is revoked, so the
coordinator never sees a machine twice. Runs without etcd: a stand-in store fails one write."""
from __future__ import annotations

import time
from typing import Any, Callable

from tfdist.launch.elastic.etcd.keys import JobKeys
from tfdist.launch.elastic.etcd.link import EtcdLink
from tfdist.launch.elastic.etcd.records import RunIdentity, Sealer
from tfdist.launch.elastic.etcd.store import Entry, EtcdUnavailable
from tfdist.launch.elastic.etcd.conf import parse_conf
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings

SECRET = b"job-secret-for-tests"
RUN_REVISION = 7


class _Watch:
    def cancel(self) -> None:
        pass


class FlakyStore:
    """etcd that times out once, on the first join record, and welcomes every session whose join it keeps."""

    closed = False
    cluster_id = 0x99

    def __init__(self) -> None:
        self.leases = iter(range(0xB1, 0xC0))
        self.revoked: list[int] = []
        self.joined: list[str] = []
        self.inboxes: dict[str, Callable[[list[Entry]], None]] = {}
        self.failed = False

    def connect(self) -> None:
        pass

    def get(self, key: str) -> Entry | None:
        return None

    def create(self, key: str, value: bytes, lease: int | None = None) -> int | None:
        if key.endswith("/coordinator"):
            raise EtcdUnavailable("not in this test")
        return RUN_REVISION

    def grant(self, ttl: float) -> int:
        return next(self.leases)

    def put(self, key: str, value: bytes, lease: int | None = None) -> int:
        if "/nodes/" in key:
            if not self.failed:
                self.failed = True
                raise EtcdUnavailable("etcd did not answer (ConnectionTimeoutError)")
            lease_key = JobKeys.lease_of(key)
            self.joined.append(lease_key)
            inbox = [k for k in self.inboxes if k.endswith(lease_key)][0]
            records = Sealer(SECRET, str(RunIdentity(self.cluster_id, RUN_REVISION)))
            self.inboxes[inbox]([Entry(inbox, records.seal(inbox, {"type": "welcome", "node_id": 3}, (1, 1)),
                                       9, 9, 0)])
        return 8

    def watch(self, prefix: str, start: int, on_entries: Callable[[list[Entry]], None], on_gap: Any) -> _Watch:
        if "/to/" in prefix:
            self.inboxes[prefix] = on_entries
        return _Watch()

    def keepalive(self, lease: int) -> int:
        return 10

    def revoke(self, lease: int) -> None:
        self.revoked.append(lease)

    def close(self) -> None:
        self.closed = True


def test_a_join_cut_short_by_a_timed_out_write_is_undone_and_tried_again_until_welcomed():
    settings = RendezvousSettings(job="retry", min_nodes=1, max_nodes=1, node_timeout=30.0)
    link = EtcdLink(parse_conf("127.0.0.1:2379", (), settings.node_timeout, {}), settings, secret=SECRET)
    store = link.store = FlakyStore()  # type: ignore[assignment]
    try:
        link.connect({"job": "retry", "name": "m0", "address": "10.0.0.1", "slots": 1, "node_rank": None,
                      "versions": {}}, time.monotonic() + 30, lambda: False)
    finally:
        link.close()
    assert store.revoked[0] == 0xB1  # the half-made session's lease went (and its keys with it)
    assert store.joined == [f"{0xB2:016x}"]  # one machine, joined once, in a new session
