"""A round's machines (``messages/machines.py``): two texts checked whole by one full-match each, built and encoded
once per round. A round of a fleet decodes; the work per member does not grow with the machines in Python calls;
every malformed text is a ProtocolError naming the part, as the per-field checks were."""
from __future__ import annotations

import json
import sys

import pytest

from tfdist.cluster.limits import MAX_TASKS
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.messages.fields import MAX_ITEMS
from tfdist.launch.elastic.messages.machines import RoundMachines


def fleet(count: int, slots: int = 1, roles: tuple[str, ...] = ()) -> RoundMachines:
    nodes = [(i, f"m{i}", f"10.{i // 250}.{i % 250}.1", slots, roles) for i in range(count)]
    workers = [f"10.{i // 250}.{i % 250}.1:{2000 + s}" for i in range(count) for s in range(slots)]
    return RoundMachines.of(nodes, workers)


def round_for(machines: RoundMachines, rank: int = 0, **fields) -> M.Round:
    return M.Round(round=2, node_rank=rank, world_size=max(1, len(machines.workers)), first_index=rank,
                   machines=machines, **fields)


def python_calls(action) -> int:
    """How many Python functions run during ``action()`` (the profiler's "call" events; builtins not counted)."""
    calls = 0

    def count(_frame, event, _arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


def test_a_round_of_1024_machines_of_8_workers_each_decodes_as_it_was_sent():
    """8,192 workers: the per-field check allowed 4,096 (MAX_ITEMS) and refused the round of a 1,024-machine,
    8-GPU job; the workers' cap is now a job's tasks (MAX_TASKS)."""
    machines = fleet(1024, slots=8, roles=("worker",))
    sent = round_for(machines, rank=7, restore=None)
    received = M.decode(M.encode(sent))
    assert received == sent and len(received.workers) == 8192 and len(received.nodes) == 1024
    assert received.nodes[7] == [7, "m7", "10.0.7.1", 8, ["worker"]] and received.workers[57] == "10.0.7.1:2001"
    assert M.from_fields(M.as_dict(sent)) == sent  # the etcd backend carries the same fields


def test_the_encoded_round_is_the_json_of_its_fields_and_shares_the_machines_bytes():
    machines = fleet(3, roles=("chief", "ps"))
    one, two = round_for(machines, 0), round_for(machines, 1, snapshot=None)
    assert json.loads(M.encode(one)) == {"v": M.VERSION, "type": "round", **one.fields()}
    assert one.fields()["machines"] == {"nodes": "0 1 chief,ps 10.0.0.1 m0\n1 1 chief,ps 10.0.1.1 m1\n"
                                                  "2 1 chief,ps 10.0.2.1 m2",
                                        "workers": "10.0.0.1:2000 10.0.1.1:2000 10.0.2.1:2000"}
    assert machines.json in M.encode(one) and machines.json in M.encode(two)
    assert M.checked(one) == one


@pytest.mark.parametrize("count", [16, 1024])
def test_decoding_a_round_runs_the_same_python_calls_whatever_its_machines(count):
    """The per-machine work is C (split, int, append), never a Python check per field: the old checks ran about
    12 Python functions per machine (12,000 per member of a 1,024-machine round)."""
    small = M.encode(round_for(fleet(2, roles=("worker",))))
    payload = M.encode(round_for(fleet(count, roles=("worker",))))
    assert python_calls(lambda: M.decode(payload)) == python_calls(lambda: M.decode(small))


def test_a_round_sent_to_n_members_encodes_the_machines_once():
    machines = fleet(512)
    written: list[int] = []
    dumps = M.json.dumps
    M.json.dumps = lambda *a, **k: written.append(len(out := dumps(*a, **k))) or out
    try:
        payloads = [M.encode(round_for(machines, rank)) for rank in range(512)]
    finally:
        M.json.dumps = dumps
    shared = len(machines.json)
    assert shared > 20_000 and sorted(written)[-1] == shared and sorted(written)[-2] < 200  # once, then own fields
    assert sum(written) < shared + 512 * 200 and all(len(p) < shared + 200 for p in payloads)


NODE = "0 1 - 10.0.0.1 m0"


@pytest.mark.parametrize("machines, words", [
    (None, "machines: expected an object"),
    ([NODE], "machines: expected an object"),
    ({"nodes": NODE}, "machines: expected an object of nodes and workers"),
    ({"nodes": NODE, "workers": "a:1", "x": ""}, "machines: expected an object of nodes and workers"),
    ({"nodes": [[0, "m0", "10.0.0.1", 1, []]], "workers": "a:1"}, "machines.nodes"),
    ({"nodes": NODE, "workers": ["a:1"]}, "machines.workers"),
    ({"nodes": "00 1 - 10.0.0.1 m0", "workers": "a:1"}, "machines.nodes"),  # JSON had no leading zeros either
    ({"nodes": "-1 1 - 10.0.0.1 m0", "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "1" * 16 + " 1 - 10.0.0.1 m0", "workers": "a:1"}, "machines.nodes"),  # past 2**53
    ({"nodes": "0 0 - 10.0.0.1 m0", "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "0 1025 - 10.0.0.1 m0", "workers": "a:1"}, "more than 1024 slots"),
    ({"nodes": "0 1 boss 10.0.0.1 m0", "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "0 1 worker,worker 10.0.0.1 m0", "workers": "a:1"}, "not the job's roles"),
    ({"nodes": "0 1 chief,ps,worker,evaluator,ps 10.0.0.1 m0", "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "0 1 - 10.0.0.1", "workers": "a:1"}, "machines.nodes"),  # a field missing
    ({"nodes": "0 1 - 10.0.0.1\tx m0", "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "0 1 - " + "a" * 257 + " m0", "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "0 1 - 10.0.0.1 " + "n" * 257, "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "\n".join([NODE] * 3 + ["0 1 -"] + [NODE] * 3), "workers": "a:1"}, "machines.nodes"),
    ({"nodes": NODE + "\n", "workers": "a:1"}, "machines.nodes"),
    ({"nodes": "\n".join([NODE] * (MAX_ITEMS + 1)), "workers": "a:1"}, f"at most {MAX_ITEMS}"),
    ({"nodes": NODE, "workers": "a:1  b:2"}, "machines.workers"),
    ({"nodes": NODE, "workers": " a:1"}, "machines.workers"),
    ({"nodes": NODE, "workers": "a:1\tb:2"}, "machines.workers"),
    ({"nodes": NODE, "workers": "a" * 301}, "machines.workers"),
    ({"nodes": NODE, "workers": " ".join(["a:1"] * (MAX_TASKS + 1))}, f"at most {MAX_TASKS}"),
])
def test_a_malformed_machines_text_is_refused_naming_the_part(machines, words):
    payload = json.dumps({"v": M.VERSION, "type": "round", "round": 0, "node_rank": 0, "world_size": 1,
                          "first_index": 0, "machines": machines}).encode()
    with pytest.raises(M.ProtocolError, match=words):
        M.decode(payload)


def test_what_the_texts_carry_whole():
    """A name keeps its spaces (it is the rest of the line), an empty round has no machines and no workers."""
    odd = RoundMachines.of([(3, " two  words ", "::1", 2, ("ps", "worker"))], ["[::1]:1", "[::1]:2"])
    assert M.decode(M.encode(round_for(odd))).nodes == [[3, " two  words ", "::1", 2, ["ps", "worker"]]]
    empty = RoundMachines.check({"nodes": "", "workers": ""})
    assert (empty.nodes, empty.workers, empty.count) == ([], [], 0)


@pytest.mark.parametrize("nodes, workers", [
    ([(0, "a\nb", "10.0.0.1", 1, ())], ["10.0.0.1:1"]),  # a line break would start another machine
    ([(0, "a", "10.0.0.1 x", 1, ())], ["10.0.0.1:1"]),  # a space in an address would move into the name
    ([(0, "a", "10.0.0.1", 1, ())], ["10.0.0.1:1 10.0.0.1:2"]),  # one worker read as two
])
def test_a_round_its_text_cannot_carry_fails_where_it_is_made(nodes, workers):
    with pytest.raises(M.ProtocolError, match="machines"):
        RoundMachines.of(nodes, workers)


def test_a_received_round_is_checked_whole_and_its_machines_read_only_when_asked():
    """Decoding checks every line but builds no per-machine lists (an agent without roles never reads them: at
    1,024 machines building them was half a member's decode and most of its garbage collector's work)."""
    received = M.decode(M.encode(round_for(fleet(1024, slots=2, roles=("ps", "worker")))))
    assert received.machines.count == 1024 and len(received.workers) == 2048
    assert "nodes" not in vars(received.machines)  # not read yet
    assert received.nodes[1023] == [1023, "m1023", "10.4.23.1", 2, ["ps", "worker"]]
    assert received.machines == fleet(1024, slots=2, roles=("ps", "worker"))


@pytest.mark.parametrize("bad, words", [
    ("700 1025 - 10.2.200.1 m700", "more than 1024 slots"),
    ("700 9999 worker 10.2.200.1 m700", "more than 1024 slots"),
    ("700 1 ps,worker,ps 10.2.200.1 m700", "not the job's roles"),
    ("700 1024 worker,chief,worker 10.2.200.1 m700", "not the job's roles"),
])
def test_the_rules_the_pattern_does_not_spell_out_are_checked_on_receipt_on_any_line(bad, words):
    lines = fleet(1024).wire["nodes"].split("\n")
    lines[700] = bad
    with pytest.raises(M.ProtocolError, match=words):
        RoundMachines.check({"nodes": "\n".join(lines), "workers": "a:1"})
    lines[0] = bad.replace("700 ", "0 ", 1)  # the first line too (it has no line break before it)
    lines[700] = "700 1024 ps,worker,chief 10.2.200.1 m700"  # allowed: 1,024 slots, distinct roles
    with pytest.raises(M.ProtocolError, match=words):
        RoundMachines.check({"nodes": "\n".join(lines), "workers": "a:1"})
    lines[0] = "0 1 - 10.0.0.1 m0"
    allowed = RoundMachines.check({"nodes": "\n".join(lines), "workers": "a:1"})
    assert allowed.nodes[700][3:] == [1024, ["ps", "worker", "chief"]]
