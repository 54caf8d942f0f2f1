"""The etcd rendezvous backend against one real etcd member on loopback, without TensorFlow: agents are threads
that drive ``EtcdLink`` the way the agent does (join, ready, training, exited) and record what they are told."""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.etcd_cluster import LocalEtcd, why_no_etcd
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.outcome import Outcome

pytestmark = [pytest.mark.skipif(why_no_etcd() is not None, reason=str(why_no_etcd()))]

SECRET = b"job-secret-for-tests"


@pytest.fixture()
def etcd():
    with LocalEtcd() as member:
        yield member


_LINKS: list[Any] = []  # every link a test made: closed after it, whatever happened (their threads must not outlive it)


@pytest.fixture(autouse=True)
def close_links():
    yield
    while _LINKS:
        _LINKS.pop().close()


def settings(job: str, low: int, high: int, **extra: Any):
    from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings as Settings

    return Settings(job=job, min_nodes=low, max_nodes=high, node_timeout=2.0, first_round_wait=0.3,
                    stop_timeout=5.0, **extra)


@dataclass
class FakeAgent:
    """One machine: joins, says ready, trains each round for ``steps`` ticks (or until stopped), reports."""

    etcd: LocalEtcd
    job_settings: Any
    index: int
    secret: bytes | None = SECRET
    succeed_after: float | None = None  # seconds into a round after which this machine's workers succeed
    fail_now: bool = False  # set by the test: this machine's workers fail in the current round (once)
    layout: str = ""  # the job's roles (placement.counts_text), e.g. "chief,ps=1"; "": workers only
    join_timeout: float = 20.0
    conf_pairs: tuple[str, ...] = ()  # --rdzv-conf KEY=VALUE pairs
    messages: list[Any] = field(default_factory=list)  # the typed messages of elastic/messages/protocol.py
    said: list[str] = field(default_factory=list)
    result: "queue.Queue[Any]" = field(default_factory=queue.Queue)
    link: Any = None

    def start(self) -> "FakeAgent":
        from tfdist.launch.elastic.etcd.link import EtcdLink
        from tfdist.launch.elastic.etcd.conf import parse_conf

        conf = parse_conf(self.etcd.endpoint, self.conf_pairs, self.job_settings.node_timeout, {})
        self.link = EtcdLink(conf, self.job_settings, secret=self.secret, say=self.said.append)
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        _LINKS.append(self.link)
        try:
            self.result.put(self._serve())
        except Exception as bad:  # noqa: BLE001 - handed to the test
            self.link.close()  # as the agent does when it leaves (a lost machine's link included)
            self.result.put(bad)

    def _serve(self) -> Any:
        link = self.link
        link.connect(dict(job=self.job_settings.job, name=f"m{self.index}", node_rank=self.index,
                          address=f"127.0.0.{self.index + 1}", slots=1, versions={}, layout=self.layout),
                     time.monotonic() + self.join_timeout,
                     lambda: False)
        link.send(M.Ready(ports=[20000 + self.index]))
        round_started: float | None = None
        current = -1
        while True:
            message = link.next_message(0.05)
            if message is not None:
                self.messages.append(message)
                if message.TYPE == "round":
                    current, round_started = message.round, time.monotonic()
                    link.send(M.Training(round=current))
                elif message.TYPE == "stop":
                    if round_started is not None:
                        link.send(M.Exited(round=current, outcome=Outcome("stopped"), step=1, detail="stopped"))
                    round_started = None
                    link.send(M.Ready(ports=[20000 + self.index]))
                elif message.TYPE == "finish":
                    link.close()
                    return message
            if round_started is not None and self.fail_now:
                self.fail_now, round_started = False, None
                link.send(M.Exited(round=current, outcome=Outcome("failed"), step=1, detail="worker:0 exited 1"))
            if round_started is not None and self.succeed_after is not None and \
                    time.monotonic() - round_started > self.succeed_after:
                link.send(M.Exited(round=current, outcome=Outcome("succeeded"), step=10, detail=""))
                round_started = None

    def rounds(self) -> list[Any]:
        return [m for m in self.messages if m.TYPE == "round"]

    def wait_round(self, number: int, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [m for m in self.rounds() if m.round == number]
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"machine {self.index} never got round {number}: {self.messages} {self.said}")

    def outcome(self, timeout: float = 30) -> Any:
        return self.result.get(timeout=timeout)


def test_two_machines_form_one_round_ranked_by_node_rank_and_finish(etcd):
    job = settings("two", 2, 2)
    agents = [FakeAgent(etcd, job, i, succeed_after=0.3).start() for i in (1, 0)]
    finishes = [a.outcome() for a in agents]
    assert [f.status for f in finishes] == [0, 0], finishes
    first = {a.index: a.rounds()[0] for a in agents}
    assert first[0].node_rank == 0 and first[1].node_rank == 1
    assert first[0].workers == ["127.0.0.1:20000", "127.0.0.2:20001"] == first[1].workers
    assert first[1].first_index == 1 and first[0].world_size == 2
    # Exactly one machine coordinated, and its agent is the one told to print the job's report.
    assert sum(f.print_report for f in finishes) == 1
    assert "succeeded" in finishes[0].report
    # Late machines are told the job is over (for the finish record's lease).
    from tfdist.launch.elastic.tcp.client import Refused

    late = FakeAgent(etcd, job, 2).start()
    refused = late.outcome()
    assert isinstance(refused, Refused) and "the job is over" in refused.reason


def test_a_lost_machine_stops_the_round_and_the_next_runs_on_the_others(etcd):
    job = settings("loss", 1, 3)
    agents = [FakeAgent(etcd, job, i).start() for i in range(3)]
    for a in agents:
        assert a.wait_round(0).world_size == 3
    victim = next(a for a in agents if not a.link.coordinating)
    victim.link._closed.set()  # its lease is no longer kept alive: etcd drops it after the TTL
    survivors = [a for a in agents if a is not victim]
    for a in survivors:
        assert a.wait_round(1).world_size == 2
        assert any(m.TYPE == "stop" and m.round == 0 and not m.graceful for m in a.messages)
    for a in survivors:
        a.succeed_after = 0.1
    reports = [a.outcome().report for a in survivors]
    assert all("lost machines: " in r for r in reports), reports


def test_the_coordinators_machine_lost_another_takes_over_with_the_same_round_numbers(etcd):
    job = settings("takeover", 1, 3)
    agents = [FakeAgent(etcd, job, i).start() for i in range(3)]
    for a in agents:
        a.wait_round(0)
    boss = next(a for a in agents if a.link.coordinating)
    boss.link._closed.set()  # stops its coordinator and its lease refreshes: the whole machine is gone
    rest = [a for a in agents if a is not boss]
    for a in rest:
        assert a.wait_round(1).world_size == 2
    assert sum(a.link.coordinating for a in rest) == 1
    for a in rest:
        a.succeed_after = 0.1
    report = next(f for f in (a.outcome() for a in rest) if f.print_report).report
    assert "#1: 2 machine(s)" in report and "#2:" not in report, report  # the second round, numbered on
    assert f"lost machines: m{boss.index}" in report


def test_a_coordinator_that_takes_over_keeps_the_restart_budget_used_before(etcd):
    # --max-restarts 1: round 0 fails (restart 1/1), the coordinator's machine is lost (not counted), round 2 fails:
    # the budget is spent. A takeover that started with a fresh budget started a round 3 instead.
    job = settings("budget", 1, 3, max_restarts=1)
    agents = [FakeAgent(etcd, job, i).start() for i in range(3)]
    for a in agents:
        a.wait_round(0)
    boss = next(a for a in agents if a.link.coordinating)
    failing = next(a for a in agents if a is not boss)
    failing.fail_now = True
    for a in agents:
        a.wait_round(1)
    boss.link._closed.set()
    rest = [a for a in agents if a is not boss]
    for a in rest:
        a.wait_round(2)
    failing.fail_now = True
    finish = next(f for f in (a.outcome() for a in rest) if f.print_report)
    assert finish.status == 3 and "restart budget (1) spent" in finish.report, finish.report
    assert all(m.round < 3 for a in rest for m in a.rounds()), "no round after the budget was spent"


def test_a_lost_machine_of_only_parameter_server_workers_rejoins_the_running_round(etcd):
    # One slot each, --chief --ps 1: m0 chief:0, m1 ps:0, m2 worker:0. m2 lost: the round goes on (membership.py);
    # m2 back (same name and address): the coordinator sends it round 0 for its seat, no new round for anyone.
    job = settings("rejoin", 3, 3)
    first = [FakeAgent(etcd, job, i, layout="chief,ps=1").start() for i in (0, 1)]
    deadline = time.monotonic() + 20
    while not any(a.link is not None and a.link.coordinating for a in first):  # the coordinator is m0 or m1
        assert time.monotonic() < deadline, "nobody coordinates"
        time.sleep(0.05)
    victim = FakeAgent(etcd, job, 2, layout="chief,ps=1").start()
    agents = [*first, victim]
    started = [a.wait_round(0) for a in agents]
    assert [r.node_rank for r in started] == [0, 1, 2]
    victim.link._closed.set()  # its lease expires after the node timeout: lost
    deadline = time.monotonic() + 20
    while not any(line.startswith("coordinator: lost") for a in first for line in a.said):  # else: rank taken
        assert time.monotonic() < deadline, "m2 was never found lost"
        time.sleep(0.05)
    back = FakeAgent(etcd, job, 2, layout="chief,ps=1").start()
    again = back.wait_round(0)
    assert (again.node_rank, again.workers, again.nodes) == (2, started[2].workers, started[2].nodes)
    first[0].succeed_after = 0.1  # the chief's machine succeeds: the job is over
    finish = next(f for f in (a.outcome() for a in (*first, back)) if f.print_report)
    assert finish.status == 0 and "rejoin at node rank 2" in finish.report, finish.report
    assert "lost machines: m2" in finish.report
    assert all(m.round == 0 for a in (*first, back) for m in a.rounds()), "round 0 only"
    assert not any(m.TYPE == "stop" for a in first for m in a.messages), "nobody was stopped"


def test_a_machine_with_another_secret_gets_no_answer_and_forged_records_are_ignored_not_the_job(etcd):
    # Its records do not open for the job and the job's do not open for it: it waits, says why, and times out;
    # it never takes the job's coordinator key (a live claim on another machine's lease is never cleared).
    job = settings("forged", 2, 3)
    agents = [FakeAgent(etcd, job, i).start() for i in range(2)]
    for a in agents:
        a.wait_round(0)
    stranger = FakeAgent(etcd, job, 2, secret=b"another secret", join_timeout=4.0).start()
    timed_out = stranger.outcome()
    assert isinstance(timed_out, TimeoutError) and "every machine needs the same job secret" in str(timed_out), \
        (timed_out, stranger.said)
    forged = '{"body": "{\\"address\\":\\"127.0.0.9\\",\\"slots\\":1}", "mac": "00"}'
    assert etcd.etcdctl("put", "/tfdist/forged/nodes/00000000000000ff", forged).returncode == 0
    deadline = time.monotonic() + 10
    while not any("ignored the record at /tfdist/forged/nodes/00000000000000ff" in line
                  for a in agents for line in a.said):
        assert time.monotonic() < deadline, [a.said for a in agents]
        time.sleep(0.05)
    for a in agents:
        a.succeed_after = 0.1
    finishes = [a.outcome() for a in agents]
    assert [f.status for f in finishes] == [0, 0]
    assert all(r.world_size == 2 for a in agents for r in a.rounds())


def test_etcd_silent_longer_than_the_node_timeout_is_a_graceful_loss(etcd):
    job = settings("silent", 1, 1)
    agent = FakeAgent(etcd, job, 0).start()
    agent.wait_round(0)
    etcd.pause()
    try:
        lost = agent.outcome(timeout=30)
    finally:
        etcd.resume()
    from tfdist.launch.elastic.tcp.client import Lost

    assert isinstance(lost, Lost) and lost.graceful, lost
    assert "did not answer" in str(lost)


def test_tls_and_etcd_user_authentication_through_the_conf_and_a_wrong_password_is_one_refusal(tmp_path):
    from tfdist.launch.elastic.tcp.client import Refused
    from tfdist.launch.elastic.etcd.link import EtcdLink
    from tfdist.launch.elastic.etcd.conf import parse_conf

    with LocalEtcd(tls=True) as etcd:
        for command in (["user", "add", "root:rootpw"], ["user", "add", "trainer:trainpw"], ["role", "add", "tfdist"],
                        ["role", "grant-permission", "tfdist", "--prefix=true", "readwrite", "/tfdist/"],
                        ["user", "grant-role", "trainer", "tfdist"], ["auth", "enable"]):
            done = etcd.etcdctl(*command)
            assert done.returncode == 0, done.stderr
        job = settings("authed", 1, 1)
        good, bad = tmp_path / "good", tmp_path / "bad"
        good.write_text("trainpw\n")
        bad.write_text("guess\n")
        tls = f"cacert={etcd.certs['ca']}"
        conf = parse_conf(etcd.endpoint, (f"user=trainer,password_file={good}", tls), 2.0, {})
        agent = FakeAgent(etcd, job, 0, succeed_after=0.1)
        agent.link = EtcdLink(conf, job, secret=SECRET, say=agent.said.append)
        threading.Thread(target=agent._run, daemon=True).start()
        assert agent.outcome().status == 0
        for pairs in ((f"user=trainer,password_file={bad}", tls), (tls,)):  # a wrong password, and none at all
            link = EtcdLink(parse_conf(etcd.endpoint, pairs, 2.0, {}), settings(f"authed{len(pairs)}", 1, 1),
                            secret=SECRET)
            _LINKS.append(link)
            started = time.monotonic()
            with pytest.raises(Refused) as refused:
                link.connect({}, time.monotonic() + 30, lambda: False)
            assert "etcd refused" in refused.value.reason and "--rdzv-conf" in refused.value.reason
            assert time.monotonic() - started < 30  # refused at once, not retried until the deadline
