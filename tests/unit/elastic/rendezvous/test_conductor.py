"""The conductor both rendezvous backends use, as tables, against a recording Members port: joins -> nodes (every
join through ``Join.check``, whatever carried it), messages -> the policy, actions -> typed messages per member and
one commit per action. The real policy and relay; no sockets, no etcd, no clock."""
from __future__ import annotations

from typing import Any

import pytest

from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay
from tfdist.launch.elastic.rendezvous.conductor import Conductor, Refusal
from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy
from tfdist.launch.elastic.rendezvous.membership_types import Finish, Node, Phase, RendezvousSettings, StartRound, Stop
from tfdist.launch.outcome import Outcome


class Recorded:
    """A Members port that records: what each member was sent, and each commit with the messages before it."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.sent: list[tuple[int, M.Message]] = []
        self.commits: list[tuple[type, int]] = []  # (the action's type, how many messages had been delivered)

    def everyone(self) -> list[int]:
        return list(self.ids)

    def deliver(self, node_id: int, message: M.Message) -> None:
        self.sent.append((node_id, message))

    def commit(self, action: Any) -> None:
        self.commits.append((type(action), len(self.sent)))


def conductor(**overrides: Any) -> tuple[Conductor, list[str], list[tuple]]:
    said: list[str] = []
    relayed: list[tuple] = []
    settings = RendezvousSettings(**{**dict(job="j", min_nodes=2, max_nodes=3, node_timeout=2.0,
                                            first_round_wait=1.0), **overrides})
    policy = MembershipPolicy(settings, now=0.0)
    relay = BackupRelay(lambda node_id, kind, **fields: relayed.append((node_id, kind, fields)) or True, said.append)
    return Conductor(policy, relay, said.append), said, relayed


def join(number: int, **fields: Any) -> dict[str, Any]:
    return {"job": "j", "name": f"m{number}", "address": f"10.0.0.{number}", "slots": 2, "node_rank": None,
            "versions": {}, **fields}


@pytest.mark.parametrize("record, reason", [
    (join(1, address="a b;c"), "not a message of this protocol: address: not a host name or IP address"),
    (join(1, address="10.0.0.1\nworker:0"), "not a message of this protocol: address"),
    (join(1, slots=0), "not a message of this protocol: slots"),
    (join(1, slots=True), "not a message of this protocol: slots"),
    (join(1, node_rank=-1), "not a message of this protocol: node_rank"),
    (join(1, roles=["boss"]), "not a message of this protocol: roles"),
    (join(1, job="other"), "job id 'other' is not this rendezvous' job"),
    (join(1, node_rank=7), "--node-rank 7 is outside 0..2"),
])
def test_a_join_that_is_not_fit_is_refused_with_a_usage_status_and_never_admitted(record, reason):
    """Both backends: a decoded frame (TCP) and a join record's fields (etcd) take this one path."""
    rdzv, _said, _relayed = conductor()
    refused = rdzv.admit(5, record)
    assert isinstance(refused, Refusal) and refused.reason.startswith(reason) and refused.status == 2, refused
    assert rdzv.policy.nodes == {}


def test_a_message_that_is_not_a_join_is_refused_first():
    rdzv, _said, _relayed = conductor()
    assert rdzv.admit(5, M.Ready(ports=[1])) == Refusal("expected a join message first")


@pytest.mark.parametrize("form", ["record", "frame"])
def test_a_good_join_is_one_node_whatever_carried_it_and_its_terminal_text_is_escaped(form):
    rdzv, _said, _relayed = conductor()
    record = join(1, name="m1\x1b[2J", versions={"tf": "2.21\n"})
    node = rdzv.admit(5, record if form == "record" else M.Join.check(record))
    assert isinstance(node, Node) and rdzv.policy.nodes == {5: node}
    assert (node.address, node.slots, node.name, node.versions) == ("10.0.0.1", 2, "m1\\x1b[2J", {"tf": "2.21\\n"})


def test_a_policy_refusal_is_said_on_the_terminal_with_the_machines_label():
    rdzv, said, _relayed = conductor()
    assert isinstance(rdzv.admit(1, join(1, node_rank=0)), Node)
    refused = rdzv.admit(2, join(2, node_rank=0))
    assert isinstance(refused, Refusal) and "--node-rank 0 is already taken" in refused.reason
    assert len(said) == 1 and said[0].startswith("refused m2") and said[0].endswith(f": {refused.reason}")


def running() -> tuple[Conductor, list[str], list[tuple], StartRound]:
    rdzv, said, relayed = conductor()
    for number in (1, 2):
        rdzv.admit(number, join(number))
        rdzv.on_message(number, M.Ready(ports=[1000 * number, 1000 * number + 1]), 0.0)
    assert rdzv.policy.tick(0.0) == []  # MIN reached: the last call for a third machine
    (start,) = rdzv.policy.tick(5.0)
    assert isinstance(start, StartRound)
    return rdzv, said, relayed, start


def test_messages_feed_the_policy_ready_training_exited_and_an_exit_detail_is_escaped():
    rdzv, _said, _relayed, start = running()
    assert all(n.ready is False and n.in_round for n in rdzv.policy.nodes.values())
    rdzv.on_message(1, M.Training(round=start.round), 6.0)
    assert rdzv.policy.nodes[1].training
    rdzv.on_message(2, M.Exited(round=start.round, outcome=Outcome.FAILED, step=3, detail="boom\x1b[0m"), 7.0)
    (stop,) = rdzv.policy.tick(7.0)
    assert isinstance(stop, Stop) and "boom\\x1b[0m" in stop.reason and "\x1b" not in stop.reason


def test_a_round_is_one_typed_round_message_per_assignment_then_one_commit():
    rdzv, said, _relayed, start = running()
    port = Recorded([1, 2])
    assert rdzv.carry_out(start, port, dict(rdzv.policy.nodes), rdzv.policy.round) is None
    assert [(i, type(m)) for i, m in port.sent] == [(1, M.Round), (2, M.Round)]
    first = port.sent[0][1]
    assert (first.round, first.node_rank, first.world_size, first.first_index) == (0, 0, 4, 0)
    assert first.workers == ["10.0.0.1:1000", "10.0.0.1:1001", "10.0.0.2:2000", "10.0.0.2:2001"]
    assert port.commits == [(StartRound, 2)]
    assert said == ["round 0: 2 machine(s), 4 worker(s)"]
    # The round's machines are made once and shared: no copy of the whole list per member (N^2 at a fleet's size).
    assert port.sent[1][1].machines is first.machines and first.nodes[1][:4] == [1, "m2", "10.0.0.2", 2]


@pytest.mark.parametrize("graceful", [True, False])
def test_a_stop_goes_to_the_rounds_members_with_the_round_number_then_one_commit(graceful):
    rdzv, said, _relayed, start = running()
    rdzv.carry_out(start, Recorded([1, 2]), dict(rdzv.policy.nodes), rdzv.policy.round)
    port = Recorded([1, 2, 3])
    stop = Stop((1, 2), graceful, "lost m3")
    rdzv.carry_out(stop, port, dict(rdzv.policy.nodes), 4)
    assert port.sent == [(1, M.Stop(round=4, graceful=graceful, reason="lost m3")),
                         (2, M.Stop(round=4, graceful=graceful, reason="lost m3"))]
    assert port.commits == [(Stop, 2)] and said[-1] == "stopping round 4: lost m3"


@pytest.mark.parametrize("coordinator", ["", "00000000000000aa"])
def test_the_end_goes_to_everyone_reachable_names_the_coordinator_and_fits_the_protocol(coordinator):
    rdzv, _said, _relayed = conductor()
    port = Recorded([3, 1, 2])
    report = "x" * (M.MAX_REPORT + 50)
    finish = rdzv.carry_out(Finish(0, report), port, {}, 2, coordinator=coordinator)
    assert finish == Finish(0, report)
    assert [i for i, _m in port.sent] == [3, 1, 2] and port.commits == [(Finish, 3)]
    sent = port.sent[0][1]
    assert sent == M.Finish(status=0, report=report[-M.MAX_REPORT:], coordinator=coordinator)
    assert M.decode(M.encode(sent)) == sent  # what the receiving link checks, it accepts


def test_a_machine_that_rejoins_a_running_round_gets_its_seat_alone_and_nothing_to_restore():
    rdzv, said, relayed, start = running()
    rdzv.carry_out(start, Recorded([1, 2]), dict(rdzv.policy.nodes), rdzv.policy.round)
    relayed.clear()
    rejoin = StartRound(start.round, start.world_size, start.workers, start.assignments[1:], start.nodes, rejoin=True)
    port = Recorded([1, 2])
    rdzv.carry_out(rejoin, port, dict(rdzv.policy.nodes), rdzv.policy.round)
    assert [(i, m.restore, m.snapshot) for i, m in port.sent] == [(2, None, None)]
    assert said[-1].startswith("round 0: m2") and said[-1].endswith("rejoins it") and relayed == []  # no upload asked for a rejoin
    assert rdzv.policy.phase is Phase.RUNNING
