"""What a round of many machines costs the rendezvous, counted in operations (never in time): the walks over every
task's placement when a round starts, and the labels made per tick. Each count grew with N per machine before."""
from __future__ import annotations

import tfdist.validate as validate
from tfdist.launch.elastic.rendezvous import hang_collection, membership
from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy, Node, RendezvousSettings, StartRound
from tfdist.launch.elastic.rendezvous.membership_types import Assignment

N = 64


class _Walks(list):
    """Placements that count how often they are walked."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def _counting_layout(monkeypatch, module) -> type[_Walks]:
    real = module.round_layout
    walks = type("Walks", (_Walks,), {"walks": 0})

    def round_layout(*args, **kwargs):
        layout, placements = real(*args, **kwargs)
        return layout, walks(placements)

    monkeypatch.setattr(module, "round_layout", round_layout)
    return walks


def _policy(n: int, layout: str = "chief,ps=1") -> MembershipPolicy:
    policy = MembershipPolicy(RendezvousSettings(job="j", min_nodes=n, max_nodes=n, node_timeout=2.0,
                                                 rdzv_timeout=30.0, first_round_wait=3.0), now=0.0)
    for i in range(n):
        assert policy.on_join(Node(i, f"m{i}", f"198.18.{i // 250}.{i % 250 + 1}", 1, layout=layout), "j") is None
        policy.on_ready(i, (1000 + i,), None)
    return policy


def test_a_round_of_many_machines_walks_the_placements_a_few_times_not_once_per_machine(monkeypatch):
    walks = _counting_layout(monkeypatch, membership)
    policy = _policy(N)
    (start,) = policy.tick(1.0)
    assert isinstance(start, StartRound) and len(start.assignments) == N
    assert walks.walks <= 4  # tasks_by_rank once, leader_rank twice; one local_tasks per machine was N walks
    tasks = [policy._round_tasks.get(r, ()) for r in range(N)]
    assert sorted(t for mine in tasks for t in mine) == sorted(["chief:0", "ps:0"] + [f"worker:{i}"
                                                                                     for i in range(N - 2)])


def test_the_hang_report_names_every_machine_s_tasks_in_one_walk(monkeypatch):
    walks = _counting_layout(monkeypatch, hang_collection)
    nodes = tuple((r, f"m{r}", f"10.0.0.{r + 1}", 1, ()) for r in range(N))
    action = StartRound(round=0, world_size=N, workers=tuple(f"x:{r}" for r in range(N)),
                        assignments=tuple(Assignment(100 + r, r, r) for r in range(N)), nodes=nodes)
    members = hang_collection.round_members(action, {100 + r: f"m{r}" for r in range(N)}, "chief,ps=1")
    assert walks.walks <= 2
    names = sorted(t for m in members.values() for t in m.tasks)
    assert names == sorted(["chief:0", "ps:0"] + [f"worker:{i}" for i in range(N - 2)])


def test_a_tick_makes_no_label_while_nobody_is_left_out_and_each_label_once_after(monkeypatch):
    made = []
    original = validate.printable

    def counting(text, *args, **kwargs):
        made.append(text)
        return original(text, *args, **kwargs)

    monkeypatch.setattr(validate, "printable", counting)
    policy = _policy(N, layout="")
    made.clear()
    policy._eligible(1.0)
    policy._eligible(1.1)
    assert made == []  # nobody left out: no machine's label is made, at every tick
    policy.blacklist["someone else"] = 50.0
    assert len(policy._eligible(1.2)) == N and len(policy._eligible(1.3)) == N
    assert len(made) <= 2 * N  # name and address once per machine, not once per tick
