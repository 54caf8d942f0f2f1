"""Roles across machines (launch/elastic/rendezvous/round_roles.py and the rendezvous' use of it), as tables: the round's
machines in node-rank order -> every task's address, each machine's tasks, TF_CONFIG, the leader's machine; the
rendezvous refusing machines that disagree on the roles, and roles that do not fit. Pure: no sockets, no clock."""
from __future__ import annotations

import json

import pytest

from tfdist.cluster.placement import RoleCounts, counts_text, parse_counts
from tfdist.launch.elastic.rendezvous.membership import Finish, MembershipPolicy, Node, Phase, RendezvousSettings, StartRound
from tfdist.launch.elastic.rendezvous.round_roles import describe, leader_rank, local_tasks, round_layout, \
    tasks_by_rank
from tfdist.launch.local.layout import tf_config_for
from tfdist.launch.outcome import Outcome

PS = RoleCounts(chief=True, ps=1)


def nodes(*shapes):
    """[(slots, roles)] -> the round's nodes as the rendezvous sends them, machine i at 198.18.0.(i+1)."""
    return [[rank, f"m{rank}", f"198.18.0.{rank + 1}", slots, list(roles)] for rank, (slots, roles) in
            enumerate(shapes)]


def slots_of(round_nodes):
    return [f"{n[2]}:{2000 + s}" for n in round_nodes for s in range(n[3])]


@pytest.mark.parametrize("shapes, counts, placed, cluster", [
    # No pins: chief and ps on node 0, workers after them, in node-rank order.
    ([(2, ()), (1, ()), (1, ())], PS, "node0: chief:0 ps:0; node1: worker:0; node2: worker:1",
     {"chief": ["198.18.0.1:2000"], "ps": ["198.18.0.1:2001"], "worker": ["198.18.0.2:2000", "198.18.0.3:2000"]}),
    # Node 1 pinned to the parameter server: the chief keeps node 0, workers spread over the rest.
    ([(2, ()), (1, ("ps",)), (1, ())], PS, "node0: chief:0 worker:0; node1: ps:0; node2: worker:1",
     {"chief": ["198.18.0.1:2000"], "ps": ["198.18.0.2:2000"], "worker": ["198.18.0.1:2001", "198.18.0.3:2000"]}),
    # Node 0 pinned away from the chief: it moves to the first machine that takes it.
    ([(1, ("ps",)), (2, ())], PS, "node0: ps:0; node1: chief:0 worker:0",
     {"chief": ["198.18.0.2:2000"], "ps": ["198.18.0.1:2000"], "worker": ["198.18.0.2:2001"]}),
    # The evaluator takes a slot and a port, but is not in the cluster spec.
    ([(2, ()), (2, ())], RoleCounts(chief=True, evaluator=True), "node0: chief:0 evaluator:0; node1: worker:0 worker:1",
     {"chief": ["198.18.0.1:2000"], "worker": ["198.18.0.2:2000", "198.18.0.2:2001"]}),
])
def test_a_round_places_every_task_on_its_machine_s_address(shapes, counts, placed, cluster):
    round_nodes = nodes(*shapes)
    layout, placements = round_layout(round_nodes, slots_of(round_nodes), counts)
    assert describe(placements) == placed
    assert layout.cluster() == cluster
    # Every task, on any machine, gets the whole cluster (as one machine's launcher builds it).
    for task in layout.tasks():
        config = json.loads(tf_config_for(layout, task))
        assert config["cluster"] == cluster and config["task"] == {"type": task.type, "index": task.index}


def test_every_machine_runs_exactly_its_tasks_and_the_order_of_the_nodes_list_does_not_matter():
    round_nodes = nodes((2, ()), (1, ("ps",)), (1, ()))
    layout, placements = round_layout(list(reversed(round_nodes)), slots_of(round_nodes), PS)
    assert [local_tasks(placements, r) for r in range(3)] == [("chief:0", "worker:0"), ("ps:0",), ("worker:1",)]
    assert sorted(t for r in range(3) for t in local_tasks(placements, r)) == sorted(map(str, layout.tasks()))


class Walks(list):
    """Placements that count how often they are walked through."""
    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


@pytest.mark.parametrize("shapes, counts", [
    ([(2, ()), (1, ("ps",)), (1, ())], PS), ([(1, ("ps",)), (2, ())], PS), ([(3, ())] * 4, RoleCounts(chief=True)),
    ([(1, ())] * 256, RoleCounts(chief=True, ps=8)),
])
def test_every_machine_s_tasks_in_one_walk_are_each_machine_s_local_tasks(shapes, counts):
    round_nodes = nodes(*shapes)
    placements = Walks(round_layout(round_nodes, slots_of(round_nodes), counts)[1])
    assert tasks_by_rank(placements) == {r: local_tasks(placements, r) for r in range(len(shapes))
                                         if local_tasks(placements, r)}
    placements.walks = 0
    tasks_by_rank(placements)
    assert placements.walks == 1  # once for the round, not once per machine (N^2)


@pytest.mark.parametrize("shapes, counts, rank", [
    ([(2, ()), (2, ())], PS, 0),
    ([(1, ("ps",)), (2, ())], PS, 1),
    ([(1, ("worker",)), (1, ())], RoleCounts(chief=True), 1),
    ([(2, ()), (2, ())], RoleCounts(evaluator=True), 0),  # no chief: worker 0 leads
])
def test_the_leader_is_on_the_machine_holding_the_chief_else_worker_0(shapes, counts, rank):
    round_nodes = nodes(*shapes)
    assert leader_rank(round_layout(round_nodes, slots_of(round_nodes), counts)[1]) == rank


@pytest.mark.parametrize("counts", [None, RoleCounts(chief=True), RoleCounts(chief=True, ps=3, evaluator=True),
                                    RoleCounts(ps=2)])
def test_the_roles_a_machine_joins_with_read_back(counts):
    assert parse_counts(counts_text(counts)) == counts


@pytest.mark.parametrize("text", ["ps", "ps=x", "chief;id", "master"])
def test_other_role_words_are_not_roles(text):
    with pytest.raises(ValueError):
        parse_counts(text)


# -- the rendezvous ----------------------------------------------------------------------------------------------
def policy_with(*machines, min_nodes=None):
    """machines: (slots, pins, layout) each, joined in node-rank order and ready."""
    n = len(machines)
    policy = MembershipPolicy(RendezvousSettings(job="j", min_nodes=min_nodes or n, max_nodes=n, after_success=5.0),
                              now=0.0)
    refusals = []
    for i, (slots, pins, layout) in enumerate(machines, start=1):
        node = Node(i, f"m{i}", f"198.18.0.{i}", slots, i - 1, roles=tuple(pins), layout=layout)
        refusals.append(policy.on_join(node, "j"))
        if refusals[-1] is None:
            policy.on_ready(i, tuple(range(1000 * i, 1000 * i + slots)), None)
    return policy, refusals


def test_a_machine_with_other_roles_is_refused_naming_both():
    _, refusals = policy_with((2, (), "chief,ps=1"), (1, (), "chief,ps=2"))
    assert refusals[0] is None
    reason, status = refusals[1]
    assert status == 2 and "roles differ" in reason and "ps 1" in reason and "ps 2" in reason


def test_the_round_carries_each_machine_s_slots_and_pins():
    policy, _ = policy_with((2, (), "chief,ps=1"), (1, ("ps",), "chief,ps=1"))
    (start,) = policy.tick(1.0)
    assert isinstance(start, StartRound)
    assert [(n[0], n[3], list(n[4])) for n in start.nodes] == [(0, 2, []), (1, 1, ["ps"])]


def test_the_success_of_the_machine_holding_the_chief_ends_the_job_not_node_rank_0_s():
    policy, _ = policy_with((1, ("ps",), "chief,ps=1"), (2, (), "chief,ps=1"))
    policy.tick(1.0)
    policy.on_exited(1, 0, Outcome.SUCCEEDED, None, "", now=2.0)  # node rank 0 holds only the parameter server
    assert policy.phase is Phase.RUNNING
    policy.on_exited(2, 0, Outcome.SUCCEEDED, 120, "", now=3.0)
    assert policy.phase is Phase.FINISHING


def test_roles_that_do_not_fit_end_the_job_with_one_line_and_exit_2():
    policy, _ = policy_with((1, ("worker",), "chief,ps=1"), (1, ("worker",), "chief,ps=1"))
    (finish,) = policy.tick(1.0)
    assert isinstance(finish, Finish) and finish.status == 2 and "no free slot for chief:0" in finish.report


@pytest.mark.parametrize("field, value", [("roles", ["boss"]), ("roles", ["ps", "ps"]), ("roles", "ps"),
                                          ("layout", "ps=x"), ("layout", ["chief"])])
def test_a_join_with_other_role_words_is_a_protocol_error(field, value):
    from tfdist.launch.elastic.messages import protocol as M

    join = {"job": "j", "name": "m", "address": "198.18.0.1", "slots": 1, field: value}
    with pytest.raises(M.ProtocolError, match=field):
        M.Join.check(join)
    assert M.Join.check({**join, "roles": ["ps"], "layout": "chief,ps=1"}).roles == ["ps"]


# -- a parameter-server round: what a lost machine does, and the end of the job ------------------------------------
def _running_ps_round(evaluator: bool = False):
    """node0: chief:0 worker:0; node1: ps:0 (pinned); node2: worker:1, or evaluator:0 (pinned) -- round 0 running."""
    layout = "chief,ps=1" + (",evaluator" if evaluator else "")
    policy, _ = policy_with((2, (), layout), (1, ("ps",), layout), (1, ("evaluator",) if evaluator else (), layout))
    (start,) = policy.tick(1.0)
    assert isinstance(start, StartRound) and policy.phase is Phase.RUNNING
    return policy


@pytest.mark.parametrize("lost", [1, 2])
def test_a_lost_machine_with_the_chief_or_a_parameter_server_stops_the_round(lost):
    policy = _running_ps_round()
    policy.on_lost(lost, "no keep-alive for 6s", now=2.0)
    stops = policy.tick(2.5)
    assert policy.phase is Phase.STOPPING and len(stops) == 1 and f"lost m{lost}" in stops[0].reason


def _back(policy, node_id, *, name="m3", address="198.18.0.3", rank=2, slots=1):
    """Machine ``name`` joins again (a new agent, so a new node id) and is ready; what the next tick does."""
    assert policy.on_join(Node(node_id, name, address, slots, rank, layout="chief,ps=1"), "j") is None
    policy.on_ready(node_id, (7000,), None)
    return policy.tick(5.0)


def test_a_lost_machine_of_only_workers_keeps_the_round_and_its_seat_then_rejoins_it():
    # The coordinator re-runs a lost worker's steps on the others (a silent one fails through gRPC keep-alive,
    # grpc_keepalive.py) and takes the worker back when it serves at its address again.
    policy = _running_ps_round()
    first = policy._round_start
    policy.on_lost(3, "no keep-alive for 6s", now=2.0)
    assert policy.tick(2.5) == [] and policy.phase is Phase.RUNNING and policy.round == 0
    (again,) = _back(policy, 4)
    assert isinstance(again, StartRound) and again.rejoin and again.round == 0
    assert (again.workers, again.nodes) == (first.workers, first.nodes), "the same cluster: the old addresses"
    assert [(a.node_id, a.node_rank) for a in again.assignments] == [(4, 2)], "its seat alone"
    assert policy.nodes[4].in_round and policy.phase is Phase.RUNNING
    assert policy.tick(5.5) == [], "no scale-up stop: the machine is back in the round"
    policy.on_exited(1, 0, Outcome.SUCCEEDED, 120, "", now=6.0)
    (finish,) = policy.tick(6.0)
    assert isinstance(finish, Finish) and finish.status == 0 and "succeeded after 0 restart(s)" in finish.report
    assert "lost machines: m3 (198.18.0.3)" in finish.report and "rejoin at node rank 2" in finish.report


def test_only_the_lost_machine_itself_takes_its_seat():
    # Its workers' addresses are in every task's TF_CONFIG: another machine joins the usual way (a scale-up stop).
    policy = _running_ps_round()
    policy.on_lost(3, "no keep-alive for 6s", now=2.0)
    assert all(not getattr(a, "rejoin", False) for a in _back(policy, 4, name="m9", address="198.18.0.9", rank=None))
    assert not policy.nodes[4].in_round


def test_a_seat_is_not_kept_past_its_round():
    policy = _running_ps_round()
    policy.on_lost(3, "no keep-alive for 6s", now=2.0)
    policy.on_exited(1, 0, Outcome.FAILED, 50, "chief:0 killed by SIGKILL", now=3.0)
    (stop,) = policy.tick(3.0)
    assert not stop.graceful and policy.phase is Phase.STOPPING
    policy.on_ready(1, (1000, 1001), None)
    policy.on_ready(2, (2000,), None)
    policy.tick(4.0)
    assert policy.phase is Phase.WAITING
    (start,) = _back(policy, 4)
    assert isinstance(start, StartRound) and not start.rejoin and start.round == 1, "a new round, all 3 machines"
    assert len(start.assignments) == 3


def test_a_parameter_server_job_ends_once_the_chief_s_machine_succeeded():
    # Its workers and parameter servers serve until stopped: the other machines never report on their own, and
    # waiting for them only added after_success (10 s by default) to every parameter-server job.
    policy = _running_ps_round()
    policy.on_exited(1, 0, Outcome.SUCCEEDED, 120, "", now=3.0)
    (finish,) = policy.tick(3.0)
    assert isinstance(finish, Finish) and finish.status == 0


def test_a_parameter_server_job_waits_for_the_evaluator_s_machine():
    policy = _running_ps_round(evaluator=True)
    policy.on_exited(1, 0, Outcome.SUCCEEDED, 120, "", now=3.0)
    assert policy.tick(3.0) == [] and policy.phase is Phase.FINISHING, "the evaluator may be scoring the final model"
    policy.on_exited(3, 0, Outcome.SUCCEEDED, None, "", now=4.0)
    (finish,) = policy.tick(4.0)
    assert isinstance(finish, Finish) and finish.status == 0


def test_a_job_without_parameter_servers_still_waits_for_every_machine():
    policy, _ = policy_with((1, (), "chief"), (1, (), "chief"))
    policy.tick(1.0)
    policy.on_exited(1, 0, Outcome.SUCCEEDED, 120, "", now=2.0)
    assert policy.tick(2.0) == [] and policy.phase is Phase.FINISHING
    policy.on_exited(2, 0, Outcome.SUCCEEDED, 120, "", now=2.5)
    (finish,) = policy.tick(2.5)
    assert isinstance(finish, Finish) and finish.status == 0
