"""The agent receives typed messages (issue 19): both rendezvous backends hand it the checked dataclasses of
``messages.py``, never dicts, and an outcome is the ``Outcome`` enum on both ends of the wire. The etcd link's side
runs without etcd: sealed entries are fed to the callback its watch calls."""
from __future__ import annotations

import ast
import inspect
import json

import pytest

from tfdist.launch.elastic.agent import agent as agent_module
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.etcd.link import EtcdLink
import itertools

from tfdist.launch.elastic.etcd.records import Sealer
from tfdist.launch.elastic.etcd.store import Entry
from tfdist.launch.elastic.etcd.conf import parse_conf
from tfdist.launch.elastic.messages.flight import Dump
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings
from tfdist.launch.outcome import Outcome

SECRET = b"job-secret-for-tests"


def test_an_exited_outcome_decodes_to_the_enum_and_travels_as_its_value():
    sent = M.Exited(round=2, outcome=Outcome.PREEMPTED, step=7)
    assert b'"outcome":"preempted"' in M.encode(sent)
    received = M.decode(M.encode(sent))
    assert received.outcome is Outcome.PREEMPTED and type(received.outcome) is Outcome
    assert M.make("exited", round=0, outcome="failed").outcome is Outcome.FAILED
    with pytest.raises(M.ProtocolError, match="outcome: expected one of succeeded, failed, preempted, stopped"):
        M.make("exited", round=0, outcome="exploded")


def test_print_report_is_never_on_the_wire_nor_taken_from_it():
    """Only the receiving link decides that its machine prints the report; a peer cannot set it."""
    assert b"print_report" not in M.encode(M.Finish(status=0, report="r", print_report=True))
    forged = b'{"v":1,"type":"finish","status":0,"report":"r","print_report":true}'
    assert M.decode(forged) == M.Finish(status=0, report="r", print_report=False)


@pytest.mark.parametrize("raw, reason", [
    ({"type": "round", "round": 1}, "machines: expected an object of nodes and workers"),
    ({"type": "stop", "round": 1, "graceful": "yes"}, "graceful: expected true or false"),
    ({"type": "finish", "status": 999}, "status: expected a whole number from 0 to 255"),
    ({"type": "launch-missiles"}, "unknown message type 'launch-missiles'"),
    ({"type": 3}, "unknown message type '3'"),
])
def test_from_fields_checks_a_dict_as_decode_checks_a_frame(raw, reason):
    with pytest.raises(M.ProtocolError, match=reason):
        M.from_fields(raw)
    if isinstance(raw["type"], str) and raw["type"] in M.KINDS:  # the same reason as the frame would get
        with pytest.raises(M.ProtocolError, match=reason):
            M.decode(json.dumps({"v": M.VERSION, **raw}).encode())


def _etcd_link() -> tuple[EtcdLink, list[str]]:
    said: list[str] = []
    settings = RendezvousSettings(job="typed", min_nodes=1, max_nodes=2, node_timeout=5.0)
    link = EtcdLink(parse_conf("127.0.0.1:2379", (), 5.0, {}), settings, secret=SECRET, say=said.append)
    link.name = "00000000000000aa"  # the lease name connect() would have taken
    return link, said


_POSITIONS = itertools.count(1)  # the coordinator's message counter: each message is past the one before


def _entry(link: EtcdLink, body: dict, secret: bytes = SECRET) -> Entry:
    key = link.keys.to_node(link.name)
    value = Sealer(secret, link.records.run).seal(key, body, (1, next(_POSITIONS)))
    return Entry(key=key, value=value, create_revision=1, mod_revision=1, lease=0)


ROUND = {"type": "round", "round": 3, "node_rank": 0, "world_size": 1, "first_index": 0,
         "machines": {"nodes": "0 1 - 10.0.0.1 m0", "workers": "10.0.0.1:2000"}}


def test_the_etcd_link_hands_the_agent_checked_typed_messages():
    link, said = _etcd_link()
    link._on_to([_entry(link, ROUND), _entry(link, {"type": "stop", "round": 3, "graceful": True, "reason": "grow"}),
                 _entry(link, {"type": "dump", "round": 3, "request": 4})])
    received = [link.next_message(0.1) for _ in range(3)]
    assert [type(m) for m in received] == [M.Round, M.Stop, Dump], received
    assert received[0].workers == ["10.0.0.1:2000"] and received[1].graceful and received[2].request == 4
    assert link._round_seen == 3 and said == []


def test_the_etcd_link_drops_a_malformed_or_unproven_message_with_one_line_and_goes_on():
    link, said = _etcd_link()
    link._on_to([_entry(link, {**ROUND, "world_size": "all"}), _entry(link, ROUND, secret=b"another"),
                 _entry(link, {"type": "stop", "round": 3, "graceful": False})])
    assert isinstance(link.next_message(0.1), M.Stop) and link.next_message(0.05) is None
    assert len(said) == 2 and "not a message of this protocol (world_size: expected a whole number" in said[0]
    assert "ignored the record at" in said[1] and "another job secret" in said[1]
    assert link._round_seen == -1  # a round that failed its check is not seen


@pytest.mark.parametrize("coordinator, prints", [("00000000000000aa", True), ("00000000000000bb", False)])
def test_the_etcd_coordinators_machine_is_told_to_print_the_report(coordinator, prints):
    link, _ = _etcd_link()
    link._on_to([_entry(link, {"type": "finish", "status": 0, "report": "r", "coordinator": coordinator})])
    finish = link.next_message(0.1)
    assert isinstance(finish, M.Finish) and finish.print_report is prints and finish.report == "r"


def test_a_welcome_is_not_handed_on():
    link, _ = _etcd_link()
    link._on_to([_entry(link, {"type": "welcome", "node_id": 1})])
    assert link.next_message(0.1) is None


def test_the_agent_dispatches_on_message_types_not_strings():
    """No ``message["type"]``/``.get(...)`` and no comparison with a message kind's name left in the agent."""
    tree = ast.parse(inspect.getsource(agent_module))
    kinds = set(M.KINDS)
    by_name = [node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
               and node.slice.value == "type"]
    by_name += [node.lineno for node in ast.walk(tree)
                if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in kinds
                                                         for c in (node.left, *node.comparators))]
    assert by_name == []


def test_the_agent_sends_typed_messages_and_a_link_checks_them_before_they_leave():
    """The backend seam takes message objects (issue 32), checked as the receiver will check them: a bad one fails
    here, never at the rendezvous; the etcd link adds the round its ready follows as a typed field."""
    link, _said = _etcd_link()
    with pytest.raises(M.ProtocolError, match="ports"):
        link.send(M.Ready(ports=[0]))
    link._round_seen = 4
    link.send(M.Ready(ports=[2000]))
    link.send(M.Exited(round=4, outcome=Outcome.STOPPED, step=3))
    queued = [link._outbox.get_nowait() for _ in range(2)]
    assert queued[0] == {"type": "ready", "ports": [2000], "backup": None, "snapshot": None, "after_round": 4}
    assert M.from_fields(queued[1]) == M.Exited(round=4, outcome=Outcome.STOPPED, step=3)
    sends = [node for node in ast.walk(ast.parse(inspect.getsource(agent_module)))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "send"]
    assert sends and all(not (call.args and isinstance(call.args[0], ast.Constant)) for call in sends)
