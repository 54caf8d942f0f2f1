"""The role placement rule (tfdist.cluster.placement), table-tested."""
from __future__ import annotations

import pytest

from tfdist.cluster.placement import MachineSlots, RoleCounts, parse_roles, place, table
from tfdist.errors import UsageError

M = MachineSlots


def layout(machines, counts):
    """{machine: "task task ..."} in slot order."""
    return {line.split()[0]: " ".join(line.split()[1:]) for line in table(place(machines, counts))}


@pytest.mark.parametrize("machines, counts, expected", [
    # No roles: every slot a worker, in machine order.
    ([M("a", 2), M("b", 2)], RoleCounts(), {"a": "worker:0 worker:1", "b": "worker:2 worker:3"}),
    # Chief and parameter servers on the first machines, workers after them.
    ([M("a", 2), M("b", 2), M("c", 2)], RoleCounts(chief=True, ps=2),
     {"a": "chief:0 ps:0", "b": "ps:1 worker:0", "c": "worker:1 worker:2"}),
    # The evaluator after the parameter servers.
    ([M("a", 1), M("b", 1), M("c", 1)], RoleCounts(ps=1, evaluator=True),
     {"a": "ps:0", "b": "evaluator:0", "c": "worker:0"}),
    # A pinned line takes its role first and nothing else; the chief stays on the first machine that takes it.
    ([M("a", 2), M("b", 2), M("p", 2, ("ps",))], RoleCounts(chief=True, ps=2),
     {"a": "chief:0 worker:0", "b": "worker:1 worker:2", "p": "ps:0 ps:1"}),
    # A worker count caps the workers; the free slots stay empty.
    ([M("a", 4)], RoleCounts(chief=True, workers=2), {"a": "chief:0 worker:0 worker:1"}),
    # A machine pinned to several roles.
    ([M("a", 2, ("chief", "ps")), M("b", 1)], RoleCounts(chief=True, ps=1),
     {"a": "chief:0 ps:0", "b": "worker:0"}),
    # A machine pinned to workers never gets a parameter server.
    ([M("w", 2, ("worker",)), M("b", 1)], RoleCounts(ps=1), {"w": "worker:0 worker:1", "b": "ps:0"}),
])
def test_placement_table(machines, counts, expected):
    assert layout(machines, counts) == expected


@pytest.mark.parametrize("machines, counts, fragment", [
    ([M("p", 1, ("ps",)), M("b", 2)], RoleCounts(ps=2), "no free slot for ps:1 on the machines pinned with roles=ps"),
    ([M("a", 1)], RoleCounts(chief=True, ps=1), "no free slot for ps:0"),
    ([M("a", 2)], RoleCounts(chief=True, ps=1), "no slot left for a worker"),
    ([M("a", 2)], RoleCounts(workers=3), "3 worker(s) do not fit"),
    ([], RoleCounts(), "no machines"),
])
def test_what_does_not_fit_is_one_line(machines, counts, fragment):
    with pytest.raises(UsageError) as raised:
        place(machines, counts)
    assert fragment in str(raised.value) and "\n" not in str(raised.value)


def test_every_task_has_its_own_slot():
    machines = [M("a", 3), M("b", 2, ("ps",)), M("c", 3)]
    placed = place(machines, RoleCounts(chief=True, ps=2, evaluator=True))
    slots = [(p.machine, p.slot) for p in placed]
    assert len(slots) == len(set(slots)) == 8
    assert all(p.slot < next(m.slots for m in machines if m.name == p.machine) for p in placed)


@pytest.mark.parametrize("text, expected", [("ps", ("ps",)), ("chief, ps", ("chief", "ps"))])
def test_roles_on_a_host_line(text, expected):
    assert parse_roles(text, "hosts:3") == expected


@pytest.mark.parametrize("text", ["", "boss", "ps,master"])
def test_unknown_roles_name_the_line(text):
    with pytest.raises(UsageError, match="hosts:3: roles="):
        parse_roles(text, "hosts:3")
