"""Hosts that come back (tfdist.launch.ssh.comeback): the cool-down, the probe schedule, discovery changes. Pure."""
from __future__ import annotations

import pytest

from tfdist.cluster.hostfile import HostEntry
from tfdist.errors import UsageError
from tfdist.launch.ssh.comeback import Comebacks, CooldownRange, changes, parse_cooldown_range


@pytest.mark.parametrize("misses, expected", [(0, 10), (1, 20), (2, 40), (4, 160), (5, 300), (9, 300)])
def test_the_wait_doubles_per_missed_probe_up_to_the_high_end(misses, expected):
    assert CooldownRange(10, 300).wait(misses) == expected


@pytest.mark.parametrize("text, expected", [("10:300", (10, 300)), ("0.5:2", (0.5, 2)), ("3", (3, 90))])
def test_cooldown_range(text, expected):
    got = parse_cooldown_range(text)
    assert (got.low, got.high) == expected


@pytest.mark.parametrize("text", ["", "a:b", "0:10", "20:10", "-1:5"])
def test_bad_cooldown_range_names_the_flag(text):
    with pytest.raises(UsageError, match="--host-cooldown-range"):
        parse_cooldown_range(text)


def test_a_lost_host_is_probed_after_the_cooldown_then_less_often_until_it_is_back():
    hosts = Comebacks(CooldownRange(1, 4))
    hosts.lost("b", now=100)
    hosts.lost("b", now=100.5)  # seen lost again while waiting: the schedule stands
    assert hosts.due(100.9) == []
    assert hosts.due(101) == ["b"]
    assert hosts.due(101) == []  # being probed: not due twice
    assert hosts.silent("b", 103) == 2
    assert hosts.due(104.9) == [] and hosts.due(105) == ["b"]
    assert hosts.silent("b", 105) == 4 and hosts.silent("b", 109) == 4  # capped
    hosts.back("b")
    assert hosts.due(10_000) == [] and "b" not in hosts.misses
    hosts.lost("b", now=200)  # lost again later: the cool-down starts over from LOW
    assert hosts.due(201) == ["b"]


def test_discovery_changes():
    current = [HostEntry("a"), HostEntry("b", 2)]
    added, dropped = changes(current, [HostEntry("b", 4), HostEntry("c")])
    assert added == [HostEntry("c")] and dropped == ["a"]
    assert changes(current, current) == ([], [])
