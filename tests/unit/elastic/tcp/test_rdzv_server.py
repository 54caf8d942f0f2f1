"""The rendezvous server in process, against members that follow the protocol and the agent's own client: joins and
refusals, rounds, losses, failures, growth, the restore choice, protocol versions and shutdown. Real sockets on
loopback, no TensorFlow, no processes; every connect/join detail is in tests/unit/elastic/tcp/rdzv_peer.py."""
from __future__ import annotations

import json
import signal
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import (
    SECRET, VERSIONS, Peer, backup, exited, keeping_alive, live_server, member, next_of, wait_until,
)
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp.client import Refused, RendezvousLink
from tfdist.status import ExitStatus


def _server(**settings: object):
    """A live server whose members are not lost for silence while a test looks at something else."""
    return live_server(**{"node_timeout": 10.0, **settings})


def _link(server, name: str = "agent", slots: int = 1, rank: int | None = None) -> RendezvousLink:
    """The agent's real client, joined."""
    link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], server.settings.node_timeout, secret=SECRET)
    link.connect(dict(job=server.settings.job, name=name, address="127.0.0.1", slots=slots, node_rank=rank,
                      versions=dict(VERSIONS)), time.monotonic() + 10, lambda: False)
    return link


def _message(link: RendezvousLink, kind: type[M.Message], timeout: float = 5.0) -> M.Message:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = link.next_message(0.2)
        if isinstance(message, kind):
            return message
    raise AssertionError(f"no {kind} message within {timeout:g}s")


# -- joining -----------------------------------------------------------------------------------------------------------
def test_every_member_is_welcomed_with_its_own_id():
    with _server(max_nodes=3, min_nodes=3) as server:
        answers = [Peer(server).join(name=f"m{i}") for i in range(3)]
        assert all(isinstance(a, M.Welcome) for a in answers)
        assert len({a.node_id for a in answers}) == 3
        wait_until(lambda: len(server.policy.nodes) == 3, what="three members")


@pytest.mark.parametrize("rank", [2, 3, 9999])
def test_a_node_rank_outside_the_job_is_refused_by_name(rank):
    with _server(max_nodes=2) as server:
        answer = Peer(server).join(rank=rank)
        assert isinstance(answer, M.Refused) and f"--node-rank {rank}" in answer.reason and answer.status == 2


def test_a_node_rank_already_taken_is_refused():
    with _server(max_nodes=2, min_nodes=2) as server:
        assert isinstance(Peer(server).join(name="a", rank=1), M.Welcome)
        answer = Peer(server).join(name="b", rank=1)
        assert isinstance(answer, M.Refused) and "already taken" in answer.reason


@pytest.mark.parametrize("max_nodes", [1, 2])
def test_a_machine_beyond_the_maximum_is_refused(max_nodes):
    with _server(max_nodes=max_nodes, min_nodes=max_nodes, first_round_wait=30.0) as server:
        for i in range(max_nodes):
            assert isinstance(Peer(server).join(name=f"m{i}"), M.Welcome)
        answer = Peer(server).join(name="extra")
        assert isinstance(answer, M.Refused) and f"maximum of {max_nodes}" in answer.reason


def test_different_versions_are_refused_naming_both():
    with _server(max_nodes=2, min_nodes=2) as server:
        member(server, "a")
        peer = Peer(server)
        peer.send(M.Join(job="job", name="b", address="127.0.0.1", slots=1, versions={**VERSIONS, "tensorflow": "9"}))
        answer = peer.receive((M.Welcome, M.Refused))
        assert isinstance(answer, M.Refused) and "version mismatch" in answer.reason and "tensorflow 9" in answer.reason


def test_a_first_message_that_is_not_a_join_is_refused():
    with _server() as server:
        peer = Peer(server)
        peer.send(M.Ready(ports=[1]))
        answer = peer.receive((M.Refused,))
        assert isinstance(answer, M.Refused) and "join" in answer.reason
        assert server.policy.nodes == {}


@pytest.mark.parametrize("field, value", [("slots", 0), ("slots", "2"), ("job", 7), ("node_rank", -1)])
def test_a_join_of_the_wrong_shape_is_refused_as_not_this_protocol(field, value):
    with _server() as server:
        peer = Peer(server)
        join = {"v": M.VERSION, "type": "join", "job": "job", "name": "m", "address": "127.0.0.1", "slots": 1,
                "versions": dict(VERSIONS), field: value}
        peer.send_raw(json.dumps(join).encode())
        answer = peer.receive((M.Refused,))
        assert isinstance(answer, M.Refused) and "not a message of this protocol" in answer.reason
        assert server.policy.nodes == {}


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_another_protocol_version_is_refused_with_the_versions_spoken(version):
    with _server() as server:
        peer = Peer(server)
        peer.send_raw(json.dumps({"v": version, "type": "join", "job": "job", "name": "m", "address": "127.0.0.1",
                                  "slots": 1}).encode())
        answer = peer.receive((M.Refused,))
        assert isinstance(answer, M.Refused) and answer.versions == list(M.SPOKEN)
        assert server.policy.nodes == {}


def test_a_join_after_the_job_finished_is_refused():
    with _server(min_nodes=1, max_nodes=2) as server:
        peer = member(server, "only")
        round_ = next_of(peer, M.Round)
        exited(peer, round_.round, "succeeded")
        next_of(peer, M.Finish)
        answer = Peer(server).join(name="late")
        assert isinstance(answer, M.Refused) and "over" in answer.reason


# -- rounds ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("slots", [1, 2, 3])
def test_one_machine_gets_a_round_with_its_own_workers(slots):
    with _server(min_nodes=1, max_nodes=1) as server:
        peer = member(server, "solo", slots=slots, ports=[21000 + i for i in range(slots)])
        round_ = next_of(peer, M.Round)
        assert (round_.round, round_.node_rank, round_.first_index, round_.world_size) == (0, 0, 0, slots)
        assert round_.workers == [f"127.0.0.1:{21000 + i}" for i in range(slots)]
        assert round_.nodes == [[0, "solo", "127.0.0.1", slots, []]] and round_.restore is None


@pytest.mark.parametrize("slots", [(1, 1), (2, 1), (1, 3)])
def test_two_machines_share_one_round_in_arrival_order(slots):
    with _server(min_nodes=2, max_nodes=2) as server:
        first = member(server, "a", slots=slots[0], ports=[21000 + i for i in range(slots[0])])
        second = member(server, "b", slots=slots[1], ports=[22000 + i for i in range(slots[1])])
        one, two = next_of(first, M.Round), next_of(second, M.Round)
        assert one.world_size == two.world_size == sum(slots)
        assert (one.node_rank, one.first_index, two.node_rank, two.first_index) == (0, 0, 1, slots[0])
        assert one.workers == two.workers and len(one.workers) == sum(slots)
        assert one.workers[0].endswith(":21000") and one.workers[slots[0]].endswith(":22000")


def test_a_requested_node_rank_comes_before_the_order_of_arrival():
    with _server(min_nodes=2, max_nodes=2) as server:
        early = member(server, "early", rank=1)
        late = member(server, "late", rank=0)
        assert next_of(late, M.Round).node_rank == 0 and next_of(early, M.Round).node_rank == 1


def test_ports_beyond_a_machines_slots_are_not_used():
    with _server(min_nodes=1, max_nodes=1) as server:
        peer = member(server, "m", slots=1, ports=[23000, 23001, 23002])
        assert next_of(peer, M.Round).workers == ["127.0.0.1:23000"]


def test_no_round_starts_before_the_machines_are_ready():
    with _server(min_nodes=1, max_nodes=1) as server:
        peer = Peer(server)
        assert isinstance(peer.join(name="m"), M.Welcome)
        with pytest.raises(AssertionError):
            peer.receive((M.Round,), timeout=0.5)
        peer.send(M.Ready(ports=[24000]))
        assert next_of(peer, M.Round).round == 0


def test_the_last_call_waits_for_more_machines_until_the_maximum_is_there():
    with _server(min_nodes=1, max_nodes=2, first_round_wait=60.0) as server:
        first = member(server, "a")
        with pytest.raises(AssertionError):
            first.receive((M.Round,), timeout=0.5)
        second = member(server, "b")
        assert next_of(first, M.Round).world_size == 2 and next_of(second, M.Round).world_size == 2


def test_the_leaders_success_finishes_the_job_for_everyone():
    with _server(min_nodes=2, max_nodes=2) as server:
        peers = [member(server, "a"), member(server, "b")]
        rounds = [next_of(p, M.Round) for p in peers]
        leader = peers[[r.node_rank for r in rounds].index(0)]
        for peer in peers:
            exited(peer, 0, "succeeded")
        finishes = [next_of(p, M.Finish) for p in peers]
        assert [f.status for f in finishes] == [0, 0] and "succeeded" in finishes[0].report
        assert server.wait(5.0) is not None and server.result.status == 0
        assert leader in peers


def test_a_follower_that_succeeds_first_does_not_end_the_job():
    with _server(min_nodes=2, max_nodes=2, after_success=60.0) as server:
        a, b = member(server, "a", rank=0), member(server, "b", rank=1)
        next_of(a, M.Round), next_of(b, M.Round)
        exited(b, 0, "succeeded")
        with pytest.raises(AssertionError):
            a.receive((M.Finish,), timeout=0.5)
        exited(a, 0, "succeeded")
        assert next_of(a, M.Finish).status == 0


def test_an_exit_report_for_another_round_is_ignored():
    with _server(min_nodes=2, max_nodes=2) as server:
        a, b = member(server, "a", rank=0), member(server, "b", rank=1)
        next_of(a, M.Round), next_of(b, M.Round)
        exited(b, 7, "failed", detail="stale")
        with pytest.raises(AssertionError):
            a.receive((M.Stop,), timeout=0.5)
        assert server.policy.round == 0


def test_the_server_pings_its_members():
    with _server(min_nodes=2, max_nodes=2, node_timeout=0.6) as server:
        peer = member(server, "a")
        assert isinstance(peer.receive((M.Ping,), timeout=5.0), M.Ping)


# -- losses and failures -----------------------------------------------------------------------------------------------
def test_a_member_that_hangs_up_stops_the_round_and_the_rest_go_on():
    with _server(min_nodes=1, max_nodes=2, first_round_wait=60.0) as server:
        a, b = member(server, "a", rank=0), member(server, "b", rank=1)
        next_of(a, M.Round), next_of(b, M.Round)
        b.close()
        stop = next_of(a, M.Stop)
        assert stop.graceful is False and "lost b (" in stop.reason
        a.send(M.Ready(ports=[25000]))
        again = next_of(a, M.Round)
        assert (again.round, again.world_size, again.nodes) == (1, 1, [[0, "a", "127.0.0.1", 1, []]])


def test_a_silent_member_is_lost_after_the_node_timeout():
    with _server(min_nodes=1, max_nodes=2, first_round_wait=60.0, node_timeout=1.0) as server:
        a = member(server, "a", rank=0)
        with keeping_alive(a):  # a answers as an agent does; b says nothing after its ready
            b = member(server, "b", rank=1)
            next_of(a, M.Round)
            stop = next_of(a, M.Stop, timeout=10.0)
        assert "lost b (" in stop.reason and "keep-alive" in stop.reason and b.sock.fileno() >= 0


def test_too_few_machines_for_too_long_ends_the_job_with_the_reason():
    with _server(min_nodes=2, max_nodes=2, rdzv_timeout=1.0) as server:
        peer = member(server, "a")
        finish = next_of(peer, M.Finish)
        assert finish.status == int(ExitStatus.TASK_FAILED) and "at least 2 machine(s)" in finish.report


def test_a_failed_task_stops_everyone_at_once_and_the_next_round_follows():
    with _server(min_nodes=2, max_nodes=2, max_restarts=1) as server:
        a, b = member(server, "a", rank=0), member(server, "b", rank=1)
        next_of(a, M.Round), next_of(b, M.Round)
        exited(b, 0, "failed", step=5, detail="ValueError: boom")
        for peer in (a, b):
            stop = next_of(peer, M.Stop)
            assert stop.graceful is False and "ValueError: boom" in stop.reason
            peer.send(M.Ready(ports=[26000]))
        assert next_of(a, M.Round).round == 1 and next_of(b, M.Round).round == 1


def test_the_restart_budget_spent_ends_the_job_with_the_root_cause():
    with _server(min_nodes=1, max_nodes=1, max_restarts=0) as server:
        peer = member(server, "a")
        next_of(peer, M.Round)
        exited(peer, 0, "failed", detail="RuntimeError: out of memory")
        next_of(peer, M.Stop)
        peer.send(M.Ready(ports=[26100]))
        finish = next_of(peer, M.Finish)
        assert finish.status == int(ExitStatus.TASK_FAILED)
        assert "restart budget" in finish.report and "RuntimeError: out of memory" in finish.report


@pytest.mark.parametrize("outcome", ["preempted", "stopped"])
def test_a_preempted_or_stopped_machine_stops_the_round_gracefully(outcome):
    with _server(min_nodes=2, max_nodes=2) as server:
        a, b = member(server, "a", rank=0), member(server, "b", rank=1)
        next_of(a, M.Round), next_of(b, M.Round)
        exited(b, 0, outcome, detail="SIGTERM")
        stop = next_of(a, M.Stop)
        assert stop.graceful is True and "was stopped" in stop.reason


def test_the_report_names_the_lost_machine():
    with _server(min_nodes=1, max_nodes=2, first_round_wait=60.0) as server:
        a, b = member(server, "a", rank=0), member(server, "gone", rank=1)
        next_of(a, M.Round), next_of(b, M.Round)
        b.close()
        next_of(a, M.Stop)
        a.send(M.Ready(ports=[27000]))
        next_of(a, M.Round)
        exited(a, 1, "succeeded")
        assert "lost machines: gone (" in next_of(a, M.Finish).report


# -- growth ------------------------------------------------------------------------------------------------------------
def test_a_machine_that_joins_a_training_round_grows_the_job_at_the_next_round():
    with _server(min_nodes=1, max_nodes=2) as server:
        a = member(server, "a", rank=0)
        next_of(a, M.Round)
        a.send(M.Training(round=0))
        b = member(server, "b", rank=1)
        stop = next_of(a, M.Stop)
        assert stop.graceful is True and "b (127.0.0.1) joined" in stop.reason
        a.send(M.Ready(ports=[28000]))
        grown = next_of(a, M.Round)
        assert (grown.round, grown.world_size) == (1, 2) and next_of(b, M.Round).round == 1


def test_growth_waits_until_every_member_trains():
    with _server(min_nodes=1, max_nodes=2) as server:
        a = member(server, "a", rank=0)
        next_of(a, M.Round)
        member(server, "b", rank=1)
        with pytest.raises(AssertionError):
            a.receive((M.Stop,), timeout=0.5)  # still starting: a stop now would only lose the start-up
        a.send(M.Training(round=0))
        assert next_of(a, M.Stop).graceful is True


# -- which backup each machine restores --------------------------------------------------------------------------------
def test_no_backup_anywhere_means_no_restore():
    with _server(min_nodes=2, max_nodes=2) as server:
        peers = [member(server, "a", rank=0, backup=M.Backup("aa")), member(server, "b", rank=1, backup=M.Backup("bb"))]
        assert [next_of(p, M.Round).restore for p in peers] == [None, None]


def test_a_shared_checkpoint_directory_needs_no_copy():
    shared = backup("ckpt-3", fs="aa")
    with _server(min_nodes=2, max_nodes=2) as server:
        peers = [member(server, "a", rank=0, backup=shared), member(server, "b", rank=1, backup=shared)]
        assert [next_of(p, M.Round).restore for p in peers] == [None, None]


def test_the_machine_without_the_leaders_backup_is_told_to_restore_it():
    newest = backup("ckpt-7", fs="aa")
    with _server(min_nodes=2, max_nodes=2) as server:
        leader = member(server, "a", rank=0, backup=newest)
        other = member(server, "b", rank=1, backup=M.Backup("bb"))
        assert next_of(leader, M.Round).restore is None
        restore = next_of(other, M.Round).restore
        assert restore["name"] == "ckpt-7" and restore["files"] == newest.files and restore["from"].startswith("a (")
        send = next_of(leader, M.Send)  # the source is asked to stream it
        assert (send.name, send.files) == ("ckpt-7", newest.files)


def test_an_older_backup_elsewhere_is_replaced_by_the_newest():
    with _server(min_nodes=2, max_nodes=2) as server:
        leader = member(server, "a", rank=0, backup=backup("ckpt-9", fs="aa"))
        other = member(server, "b", rank=1, backup=backup("ckpt-2", b"old", fs="bb"))
        next_of(leader, M.Round)
        assert next_of(other, M.Round).restore["name"] == "ckpt-9"


# -- shutdown ----------------------------------------------------------------------------------------------------------
def test_a_signal_while_training_saves_everyone_then_finishes_with_the_signal_status():
    with _server(min_nodes=2, max_nodes=2) as server:
        peers = [member(server, "a", rank=0), member(server, "b", rank=1)]
        for peer in peers:
            next_of(peer, M.Round)
        server.interrupt(signal.SIGTERM)
        for peer in peers:
            assert next_of(peer, M.Stop).graceful is True
            peer.send(M.Ready(ports=[29000]))
        finishes = [next_of(p, M.Finish) for p in peers]
        assert {f.status for f in finishes} == {128 + signal.SIGTERM}


def test_a_signal_while_waiting_finishes_at_once():
    with _server(min_nodes=2, max_nodes=2) as server:
        peer = member(server, "a")
        server.interrupt(signal.SIGINT)
        assert next_of(peer, M.Finish).status == 128 + signal.SIGINT
        # The Finish goes out through the peer's writer thread, which may beat the server's own bookkeeping.
        assert server.finished.wait(timeout=5.0) and server.result.status == 128 + signal.SIGINT


def test_closing_the_server_ends_every_connection():
    with _server(min_nodes=2, max_nodes=2) as server:
        peer = member(server, "a")
        server.close()
        assert peer.receive((M.Round,), timeout=5.0) is None


# -- the agent's client ------------------------------------------------------------------------------------------------
def test_the_agents_client_joins_and_gets_its_round():
    with _server(min_nodes=1, max_nodes=1) as server:
        link = _link(server, "agent", slots=2)
        assert link.send(M.Ready(ports=[30000, 30001]))
        round_ = _message(link, M.Round)
        assert round_.world_size == 2 and round_.workers == ["127.0.0.1:30000", "127.0.0.1:30001"]
        link.close()


def test_the_agents_client_raises_refused_with_the_status():
    with _server(max_nodes=1, min_nodes=1, first_round_wait=30.0) as server:
        Peer(server).join(name="first")
        with pytest.raises(Refused) as refused:
            _link(server, "second")
        assert refused.value.status == 2 and "maximum of 1" in refused.value.reason


def test_the_agents_client_hears_the_stop_after_a_peer_is_lost():
    with _server(min_nodes=1, max_nodes=2, first_round_wait=60.0) as server:
        link = _link(server, "agent", rank=0)
        link.send(M.Ready(ports=[31000]))
        other = member(server, "other", rank=1)
        _message(link, M.Round)
        other.close()
        stop = _message(link, M.Stop)
        assert stop.graceful is False and "lost other (" in stop.reason
        link.close()


def test_an_agent_that_leaves_is_reported_lost():
    said: list[str] = []
    with _server(min_nodes=2, max_nodes=2, said=said) as server:
        link = _link(server, "leaver")
        wait_until(lambda: len(server.policy.nodes) == 1, what="the join")
        link.close()
        wait_until(lambda: server.policy.nodes == {}, what="the loss")
        assert any("lost node" in line for line in said)


def test_the_wire_carries_exactly_the_outcomes_the_launcher_knows():
    from tfdist.launch.outcome import Outcome

    assert M.OUTCOMES == tuple(outcome.value for outcome in Outcome)
