"""A job's first restore point (issue 34): the serving machine's own backup, else one two machines agree on, else one
machine's word said to be unverified -- never simply whoever arrived first as node rank 0. The rule as a table,
then through the relay, then the serving agent marked by a real server (it joins in its own process)."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, VERSIONS, live_server, member, wait_until
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay
from tfdist.launch.elastic.rendezvous.restore_point import (
    AGREED, SERVING, UNVERIFIED, Offer, RestorePoint, first_restore_point,
)
from tfdist.launch.elastic.tcp.client import RendezvousLink


def offer(node_id: int, step: int, *, here: bool = False, forged: bool = False) -> Offer:
    return Offer(node_id, f"ckpt-{step}", {"checkpoint": ("f" if forged else "a") * 8 + str(step)}, here)


# (offers, the restore point: name, believed node ids, rule)
CASES = [
    ([], None),
    ([offer(1, 5)], ("ckpt-5", (1,), UNVERIFIED)),  # a 1-machine job: its own files
    ([offer(1, 99, forged=True), offer(2, 5, here=True), offer(3, 5)], ("ckpt-5", (2, 3), SERVING)),
    ([offer(1, 5, here=True), offer(2, 99, forged=True)], ("ckpt-5", (1,), SERVING)),  # newer, but a member's word
    ([offer(1, 3, here=True), offer(2, 5), offer(3, 5)], ("ckpt-3", (1,), SERVING)),  # the serving machine's, always
    ([offer(1, 99, forged=True), offer(2, 5), offer(3, 5)], ("ckpt-5", (2, 3), AGREED.format(n=2))),
    ([offer(1, 9), offer(2, 9), offer(3, 4), offer(4, 4), offer(5, 4)], ("ckpt-9", (1, 2), AGREED.format(n=2))),
    ([offer(1, 9), offer(2, 9, forged=True)], ("ckpt-9", (1,), UNVERIFIED)),  # same name, other files: no agreement
    ([offer(1, 99, forged=True), offer(2, 5)], ("ckpt-99", (1,), UNVERIFIED)),  # no way to tell: the newest, said so
    ([offer(3, 5), offer(2, 5, forged=True)], ("ckpt-5", (2,), UNVERIFIED)),  # a tie: the lowest node id, every time
]


@pytest.mark.parametrize("offers, expected", CASES)
def test_the_first_restore_point_is_chosen_by_rules_one_member_cannot_bend(offers, expected):
    got = first_restore_point(offers)
    assert got == (None if expected is None else RestorePoint(*expected))


def _node(node_id: int, name: str, digest: str, *, here: bool = False, fs: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(node_id=node_id, label=f"m{node_id}", here=here,
                           backup={"fs": fs or f"fs{node_id}", "name": name, "files": {"checkpoint": digest},
                                   "sizes": {"checkpoint": 1}})


def _round(*ids: int) -> SimpleNamespace:
    return SimpleNamespace(assignments=[SimpleNamespace(node_id=i, node_rank=r) for r, i in enumerate(ids)])


@pytest.mark.parametrize("here", [True, False])  # the serving machine's backup, or two machines agreeing
def test_a_member_arriving_first_cannot_plant_its_checkpoint_on_every_machine(here):
    said: list[str] = []
    relay = BackupRelay(lambda *a, **k: True, said.append)
    nodes = {1: _node(1, "ckpt-99", "forged"), 2: _node(2, "ckpt-5", "real", here=here), 3: _node(3, "ckpt-5", "real")}
    plan = relay.plan(nodes, _round(1, 2, 3))  # the stranger holds node rank 0: it arrived first
    assert sorted(plan) == [1] and plan[1]["name"] == "ckpt-5" and plan[1]["from"] in ("m2", "m3")
    assert any("ignoring backup ckpt-99 offered by m1: before the first round" in line for line in said), said


def test_one_machines_word_is_taken_only_when_nothing_better_exists_and_said_to_be_unverified():
    said: list[str] = []
    relay = BackupRelay(lambda *a, **k: True, said.append)
    plan = relay.plan({1: _node(1, "ckpt-7", "only"), 2: SimpleNamespace(node_id=2, label="m2", backup=None)},
                      _round(1, 2))
    assert plan[2]["name"] == "ckpt-7" and plan[2]["from"] == "m1"  # a job where one machine kept its files resumes
    assert any("believing backup ckpt-7 offered by m1 alone (unverified" in line for line in said), said


def test_the_server_marks_its_own_agent_and_only_it():
    join = dict(job="job", name="here", node_rank=None, address="127.0.0.1", slots=1, versions=VERSIONS)
    with live_server(min_nodes=3, max_nodes=3) as server:
        remote = member(server, "remote")
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 2.0, secret=SECRET, here=server)
        link.connect(join, time.monotonic() + 10, lambda: False)
        try:
            wait_until(lambda: len(server.policy.nodes) == 2, what="both joins")
            marks = {n.name: n.here for n in dict(server.policy.nodes).values()}
            assert marks == {"remote": False, "here": True}
        finally:
            link.close()
            remote.close()


def test_without_node_ranks_the_serving_machine_holds_node_rank_0_whoever_arrived_first():
    from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy, Node, RendezvousSettings, StartRound

    policy = MembershipPolicy(RendezvousSettings(job="j", min_nodes=3, max_nodes=3, first_round_wait=0.0), now=0.0)
    for node_id, name, here in ((1, "stranger", False), (2, "other", False), (3, "server", True)):
        node = Node(node_id, name, f"198.18.0.{node_id}", 1, here=here)
        assert policy.on_join(node, "j") is None
        policy.on_ready(node_id, (20000,), None)
    (start,) = policy.tick(1.0)
    assert isinstance(start, StartRound)
    assert [(a.node_id, a.node_rank) for a in start.assignments] == [(3, 0), (1, 1), (2, 2)]
    assert start.workers[0] == "198.18.0.3:20000"  # worker 0, whose backups are believed from now on


def test_a_one_machine_job_restores_its_own_backup_without_a_word_about_trust():
    said: list[str] = []
    relay = BackupRelay(lambda *a, **k: True, said.append)
    assert relay.plan({1: _node(1, "ckpt-7", "own")}, _round(1)) == {}  # nobody to copy to
    assert relay.trusted == {"name": "ckpt-7", "files": {"checkpoint": "own"}}
    assert not any("unverified" in line or "ignoring" in line for line in said), said
