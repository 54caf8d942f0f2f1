"""One contract for both rendezvous backends: the same members, driven through the agent's backend interface
(``connect``, ``send``, ``next_message``, ``close``), against the built-in server on loopback and against one real
etcd member on loopback. Join, ready, round, training, exited, stop, finish, refusal, loss, takeover: what the agent
sees must not depend on the backend (``elastic/backend.py``). No TensorFlow: members are threads.

Run under ``flock /tmp/tfdist-netns.lock`` with the other etcd tests."""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from tests.integration.etcd_cluster import LocalEtcd, why_no_etcd
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings
from tfdist.launch.elastic.tcp.client import Refused
from tfdist.launch.outcome import Outcome

SECRET = b"job-secret-for-the-contract"


def settings(job: str, low: int, high: int, **extra: Any) -> RendezvousSettings:
    return RendezvousSettings(job=job, min_nodes=low, max_nodes=high, node_timeout=2.0, first_round_wait=0.3,
                              stop_timeout=5.0, **extra)


class TcpRendezvous:
    """The built-in backend: a server on loopback, links over TCP."""
    name = "tcp"
    takes_over = False  # the machine that serves it is the rendezvous: nothing to take over

    def __init__(self, job: RendezvousSettings) -> None:
        from tfdist.launch.elastic.tcp.server import RendezvousServer

        self.job = job
        self.server = RendezvousServer(job, "127.0.0.1", 0, secret=SECRET).start()

    def link(self, say: Callable[[str], None]) -> Any:
        from tfdist.launch.elastic.tcp.client import RendezvousLink

        port = self.server.address[1]
        return RendezvousLink("127.0.0.1", "127.0.0.1", port, self.job.node_timeout, secret=SECRET, say=say)

    def close(self) -> None:
        self.server.close()


class EtcdRendezvous:
    """The etcd backend: links through one etcd member; the links elect the coordinator among themselves."""
    name = "etcd"
    takes_over = True

    def __init__(self, job: RendezvousSettings, etcd: LocalEtcd) -> None:
        self.job, self.etcd = job, etcd

    def link(self, say: Callable[[str], None]) -> Any:
        from tfdist.launch.elastic.etcd.link import EtcdLink
        from tfdist.launch.elastic.etcd.conf import parse_conf

        conf = parse_conf(self.etcd.endpoint, (), self.job.node_timeout, {})
        return EtcdLink(conf, self.job, secret=SECRET, say=say)

    def close(self) -> None:
        pass


@pytest.fixture(params=["tcp", "etcd"])
def backend(request):
    """A factory: ``backend(settings)`` -> that backend's rendezvous for one job."""
    made: list[Any] = []
    etcd: LocalEtcd | None = None
    if request.param == "etcd":
        if why_no_etcd() is not None:
            pytest.skip(str(why_no_etcd()))
        etcd = LocalEtcd().__enter__()

    def make(job: RendezvousSettings) -> Any:
        made.append(TcpRendezvous(job) if etcd is None else EtcdRendezvous(job, etcd))
        return made[-1]
    try:
        yield make
    finally:
        for member in _MEMBERS:
            member.leave()
        _MEMBERS.clear()
        for rendezvous in made:
            rendezvous.close()
        if etcd is not None:
            etcd.__exit__(None, None, None)


_MEMBERS: list["Member"] = []


@dataclass
class Member:
    """One machine, as the agent drives its backend: join, ready, train each round, report its exit, obey."""

    rendezvous: Any
    index: int
    job: str = ""
    address: str = ""
    messages: list[Any] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    result: "queue.Queue[Any]" = field(default_factory=queue.Queue)
    exits: "queue.Queue[str]" = field(default_factory=queue.Queue)  # outcomes the test asks for, this round
    link: Any = None

    def start(self) -> "Member":
        self.link = self.rendezvous.link(self.said.append)
        _MEMBERS.append(self)
        threading.Thread(target=self._run, daemon=True, name=f"member-{self.index}").start()
        return self

    def _run(self) -> None:
        try:
            self.result.put(self._serve())
        except Exception as bad:  # noqa: BLE001 - handed to the test
            self.link.close()
            self.result.put(bad)

    def _serve(self) -> Any:
        link = self.link
        link.connect(dict(job=self.job or self.rendezvous.job.job, name=f"m{self.index}", node_rank=self.index,
                          address=self.address or f"127.0.0.{self.index + 1}", slots=1, versions={}),
                     time.monotonic() + 20, lambda: False)
        link.send(M.Ready(ports=[20000 + self.index]))
        current: int | None = None
        while True:
            message = link.next_message(0.05)
            if message is not None:
                self.messages.append(message)
                if isinstance(message, M.Round):
                    current = message.round
                    link.send(M.Training(round=current))
                elif isinstance(message, M.Stop):
                    if current is not None:
                        link.send(M.Exited(round=current, outcome=Outcome("stopped"), step=1, detail="stopped"))
                    current = None
                    link.send(M.Ready(ports=[20000 + self.index]))
                elif isinstance(message, M.Finish):
                    link.close()
                    return message
            if current is not None and not self.exits.empty():
                outcome = self.exits.get()
                link.send(M.Exited(round=current, outcome=Outcome(outcome), step=5, detail=f"worker:0 {outcome}"))
                current = None

    def leave(self) -> None:
        if self.link is not None:
            self.link.close()

    def of(self, kind: type) -> list[Any]:
        return [m for m in self.messages if isinstance(m, kind)]

    def wait_for(self, kind: type, test: Callable[[Any], bool] = lambda _m: True, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [m for m in self.of(kind) if test(m)]
            if found:
                return found[0]
            if not self.result.empty():
                break
            time.sleep(0.02)
        raise AssertionError(f"m{self.index} never got a {kind.TYPE}: {self.messages} {self.said}")

    def outcome(self, timeout: float = 30) -> Any:
        return self.result.get(timeout=timeout)


def test_join_ready_round_then_both_succeed_and_finish(backend):
    rendezvous = backend(settings("contract-ok", 2, 2))
    members = [Member(rendezvous, i).start() for i in (1, 0)]
    rounds = {m.index: m.wait_for(M.Round) for m in members}
    assert (rounds[0].round, rounds[0].node_rank, rounds[1].node_rank) == (0, 0, 1)
    assert rounds[0].workers == ["127.0.0.1:20000", "127.0.0.2:20001"] == rounds[1].workers
    assert rounds[1].first_index == 1 and rounds[0].world_size == 2
    for member in members:
        member.exits.put("succeeded")
    finishes = [m.outcome() for m in members]
    assert all(isinstance(f, M.Finish) and f.status == 0 for f in finishes), finishes
    assert "succeeded" in finishes[0].report


def test_a_failed_exit_stops_the_others_and_the_next_round_runs_on_the_same_machines(backend):
    rendezvous = backend(settings("contract-fail", 2, 2, max_restarts=1))
    members = [Member(rendezvous, i).start() for i in (0, 1)]
    for member in members:
        member.wait_for(M.Round)
    members[1].exits.put("failed")
    stop = members[0].wait_for(M.Stop)
    assert stop.round == 0 and not stop.graceful and "worker:0 failed" in stop.reason
    assert [m.wait_for(M.Round, lambda r: r.round == 1).world_size for m in members] == [2, 2]
    members[0].exits.put("failed")
    finishes = [m.outcome() for m in members]
    assert [f.status for f in finishes] == [3, 3] and "restart budget (1) spent" in finishes[0].report


def test_a_join_for_another_job_is_refused_with_a_usage_status(backend):
    rendezvous = backend(settings("contract-refuse", 1, 2))
    first = Member(rendezvous, 0).start()
    first.wait_for(M.Round)
    stranger = Member(rendezvous, 1, job="another-job").start()
    refused = stranger.outcome()
    assert isinstance(refused, Refused) and refused.status == 2 and "another-job" in refused.reason


def test_a_join_whose_address_is_not_a_host_never_becomes_a_member(backend):
    """The address lands in every task's TF_CONFIG: refused by the TCP link before it is sent, and by the etcd
    coordinator from the join record (``Join.check`` in the conductor)."""
    rendezvous = backend(settings("contract-address", 1, 2))
    first = Member(rendezvous, 0).start()
    first.wait_for(M.Round)
    hostile = Member(rendezvous, 1, address="a b;c").start()
    refused = hostile.outcome()
    assert isinstance(refused, (Refused, M.ProtocolError)), refused
    assert "address" in str(refused)
    assert first.of(M.Stop) == []  # the round of the real member went on


def test_a_machine_that_leaves_is_lost_and_the_next_round_runs_on_the_others(backend):
    rendezvous = backend(settings("contract-loss", 1, 3))
    members = [Member(rendezvous, i).start() for i in range(3)]
    for member in members:
        assert member.wait_for(M.Round).world_size == 3
    coordinating = [m for m in members if getattr(m.link, "coordinating", False)]
    victim = next(m for m in members if m not in coordinating and m.index != 0)
    victim.leave()
    survivors = [m for m in members if m is not victim]
    for member in survivors:
        stop = member.wait_for(M.Stop)
        assert stop.round == 0 and not stop.graceful and "lost" in stop.reason
        assert member.wait_for(M.Round, lambda r: r.round == 1).world_size == 2
    for member in survivors:
        member.exits.put("succeeded")
    reports = [m.outcome().report for m in survivors]
    assert all(f"lost machines: m{victim.index}" in r for r in reports), reports


def test_the_coordinators_machine_lost_another_takes_over_with_the_same_round_numbers(backend):
    rendezvous = backend(settings("contract-takeover", 1, 3))
    if not rendezvous.takes_over:
        pytest.skip("the built-in backend's rendezvous is its serving machine: there is nothing to take over")
    members = [Member(rendezvous, i).start() for i in range(3)]
    for member in members:
        member.wait_for(M.Round)
    boss = next(m for m in members if m.link.coordinating)
    boss.link._closed.set()  # its coordinator and lease refreshes stop: the whole machine is gone
    rest = [m for m in members if m is not boss]
    for member in rest:
        assert member.wait_for(M.Round, lambda r: r.round == 1).world_size == 2
    assert sum(m.link.coordinating for m in rest) == 1
    for member in rest:
        member.exits.put("succeeded")
    finishes = [m.outcome() for m in rest]
    report = next(f for f in finishes if f.print_report).report
    assert "#1: 2 machine(s)" in report and "#2:" not in report, report
