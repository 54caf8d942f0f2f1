"""A join that takes a live member's name or address (issue 34): refused with a reason, the live member kept; a
machine whose old connection is already lost rejoins as before. The rule as a table, then through the policy."""
from __future__ import annotations

import pytest

from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy, Node, Phase, RendezvousSettings, StartRound
from tfdist.launch.elastic.rendezvous.membership_join import NAME_IN_USE, join_refusal, join_retry

S = RendezvousSettings(job="j", min_nodes=2, max_nodes=3, first_round_wait=0.0)
LIVE = [Node(1, "a", "198.18.0.1", 1), Node(2, "198.18.0.2", "198.18.0.2", 1), Node(3, "c", "198.18.0.9", 1, 2)]


# (name, address, requested rank, live members, what the refusal says; "" for let in)
CASES = [
    ("a", "198.18.0.7", None, LIVE[:2], "the name 'a' " + NAME_IN_USE),  # a live name, another address
    ("198.18.0.2", "198.18.0.2", None, LIVE[:2], "the name '198.18.0.2' " + NAME_IN_USE),  # no names: the address
    ("b", "198.18.0.2", None, LIVE[:2], "the address 198.18.0.2 " + NAME_IN_USE),  # the live one has no name
    ("198.18.0.1", "198.18.0.1", None, LIVE[:2], "the address 198.18.0.1 " + NAME_IN_USE),  # the joiner has none
    ("b", "198.18.0.1", None, LIVE[:2], ""),  # both named: two agents on one machine
    ("b", "198.18.0.3", None, LIVE[:2], ""),
    ("a", "198.18.0.1", None, [], ""),  # nobody live: a lost machine comes back under its name
    ("a", "198.18.0.1", None, LIVE, "the name 'a' " + NAME_IN_USE),  # before "maximum of 3": its own old one
    ("c", "198.18.0.9", 2, LIVE, "the name 'c' " + NAME_IN_USE),  # before "--node-rank 2 is already taken"
    ("d", "198.18.0.4", 2, LIVE[:2] + LIVE[2:], "--node-rank 2 is already taken by c (198.18.0.9)"),
    ("d", "198.18.0.4", None, LIVE, "maximum of 3 machines"),
]


@pytest.mark.parametrize("name, address, rank, live, says", CASES)
def test_a_live_members_name_or_address_is_refused_by_rule(name, address, rank, live, says):
    refusal = join_refusal(Node(9, name, address, 1, rank), "j", S, live)
    if not says:
        assert refusal is None
    else:
        assert refusal is not None and says in refusal[0] and refusal[1] == 2, refusal
    if NAME_IN_USE in says:
        assert "--node-name" in refusal[0] and "--node-timeout" in refusal[0]


def _ready(policy: MembershipPolicy, node_id: int, name: str, address: str) -> tuple[str, int] | None:
    refused = policy.on_join(Node(node_id, name, address, 1), "j")
    if refused is None:
        policy.on_ready(node_id, (20000 + node_id,), None)
    return refused


def test_a_stranger_taking_a_live_machines_name_is_refused_and_the_machine_stays_in_its_round():
    policy = MembershipPolicy(S, now=0.0)
    _ready(policy, 1, "a", "198.18.0.1")
    _ready(policy, 2, "b", "198.18.0.2")
    (start,) = policy.tick(1.0)
    assert isinstance(start, StartRound)
    refused = _ready(policy, 3, "a", "198.18.0.66")
    assert refused is not None and NAME_IN_USE in refused[0] and "a (198.18.0.1)" in refused[0]
    assert set(policy.nodes) == {1, 2} and policy.nodes[1].in_round  # nobody evicted, nobody added
    assert policy.phase is Phase.RUNNING and policy.tick(2.0) == [] and policy.lost == []


def test_a_machine_whose_old_connection_is_lost_rejoins_under_its_name():
    policy = MembershipPolicy(S, now=0.0)
    _ready(policy, 1, "a", "198.18.0.1")
    _ready(policy, 2, "b", "198.18.0.2")
    policy.tick(1.0)
    assert _ready(policy, 3, "a", "198.18.0.1") is not None  # its old connection is still live: not yet
    policy.on_lost(1, "no keep-alive", 3.0)
    assert _ready(policy, 4, "a", "198.18.0.1") is None
    assert policy.returned == ["a (198.18.0.1)"] and 4 in policy.nodes


TAKEN = "the name 'a' " + NAME_IN_USE + " (a (198.18.0.1))"


# (reason, refused since, now, node timeout, deadline, pause or None: exit with the refusal)
RETRIES = [
    (TAKEN, 0.0, 0.0, 10.0, 300.0, 1.0),  # its own old connection may be dying: again in a second
    (TAKEN, 0.0, 20.0, 10.0, 300.0, 1.0),  # within twice --node-timeout (+1 s)
    (TAKEN, 0.0, 21.0, 10.0, 300.0, None),  # still held after that: another live machine has the name
    (TAKEN, 0.0, 0.5, 0.4, 300.0, 0.1),  # a quarter of a short --node-timeout
    (TAKEN, 0.0, 5.0, 10.0, 5.0, None),  # --rdzv-timeout is over
    (TAKEN, 0.0, 4.98, 10.0, 5.0, 0.05),  # never past it (and never a busy loop)
    ("the job is over", 0.0, 0.0, 10.0, 300.0, None),  # every other refusal stands
    ("--node-rank 2 is already taken by c (198.18.0.9)", 0.0, 0.0, 10.0, 300.0, None),
]


@pytest.mark.parametrize("reason, since, now, node_timeout, deadline, pause", RETRIES)
def test_the_agent_tries_a_name_in_use_again_only_while_its_old_connection_may_be_dying(
        reason, since, now, node_timeout, deadline, pause):
    got = join_retry(reason, since, now, node_timeout, deadline)
    assert got == pytest.approx(pause) if pause is not None else got is None


def test_a_full_job_of_a_thousand_machines_refuses_in_one_message_naming_a_few():
    # Every member was listed: at 256 machines the reason outgrew a message's text and the late machine was told
    # "answered with something that is not this protocol" instead (found by the storms at 1,024).
    from tfdist.launch.elastic.messages import protocol as M

    big = RendezvousSettings(job="j", min_nodes=1024, max_nodes=1024, first_round_wait=0.0)
    live = [Node(i, f"trainer-{i:04d}.rack-{i // 32:02d}.example", f"10.1.{i // 250}.{i % 250 + 1}", 8)
            for i in range(1024)]
    reason, status = join_refusal(Node(5000, "late", "10.9.0.1", 8), "j", big, live)
    assert reason.startswith("the job already has its maximum of 1024 machines (trainer-0000")
    assert reason.endswith("and 1,016 more)") and status == 2
    assert M.Refused.check({"type": "refused", "reason": reason, "status": status}).reason == reason
