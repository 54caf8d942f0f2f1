"""A host a discovery script adds while the job runs is checked as the preflight checked the others before its agent
starts (tfdist.launch.ssh.fleet, tfdist.launch.ssh.probing). In-process: the script's listing, the agents and the
host checks are stand-ins; the real ssh path is tests/integration/test_multinode_comeback.py."""
from __future__ import annotations

import pytest

from tfdist.cluster.hostfile import HostEntry
from tfdist.launch.ssh import fleet as fleet_module
from tfdist.launch.ssh.fleet import REVET_S, Fleet
from tfdist.launch.ssh.probing import report_faults, version_differences

JOB = {"python": "3.11.7", "tensorflow": "2.16.1", "tfdist": "0.1.0"}


class _Agent:
    def poll(self):
        return None


class _Check:
    def __init__(self, verdict):
        self.answer, self.closed = verdict, False

    def verdict(self, now):
        return self.answer

    def close(self):
        self.closed = True


class _World:
    """The listing the discovery script prints, the agents started, the lines said, the checks asked for."""

    def __init__(self, monkeypatch, verdicts):
        self.listing = [HostEntry("a")]
        self.started, self.said, self.checks, self.verdicts = [], [], {}, verdicts
        monkeypatch.setattr(fleet_module, "run_discovery", lambda _path: list(self.listing))
        self.fleet = Fleet((HostEntry("a"),), self.launch, lambda: set(), cooldown=None, discovery="discover.sh",
                           interval=1.0, say=self.said.append, vet=self.vet)

    def launch(self, entry, rank):
        self.started.append((entry.name, rank))
        return _Agent()

    def vet(self, entry):
        check = _Check(self.verdicts[entry.name].pop(0))
        self.checks.setdefault(entry.name, []).append(check)
        return check

    def at(self, now):
        self.fleet._next_discovery = now  # each tick at `now` runs the script
        self.fleet.tick(now)


def test_a_discovered_host_starts_its_agent_only_after_its_check_passes(monkeypatch):
    world = _World(monkeypatch, {"b": [None, ""]})
    world.fleet.start_all()
    world.listing = [HostEntry("a"), HostEntry("b")]
    world.at(10)  # the check is under way (verdict None): no agent yet
    assert world.started == [("a", 0)] and "b" in world.fleet.vetting and not world.fleet.idle
    world.checks["b"][0].answer = ""  # it passes
    world.fleet.tick(10.1)
    assert world.started == [("a", 0), ("b", 1)] and world.fleet.idle
    assert world.checks["b"][0].closed and world.said == ["host discovery: b added"]


def test_a_host_that_fails_its_check_is_named_once_and_checked_again_later(monkeypatch):
    differs = "its versions differ from the job's hosts': tfdist 0.0.9 (the job's: 0.1.0)"
    world = _World(monkeypatch, {"b": [differs, differs, ""]})
    world.fleet.start_all()
    world.listing = [HostEntry("a"), HostEntry("b")]
    world.at(10)
    assert world.started == [("a", 0)]
    assert world.said[-1] == f"host discovery: b gets no agent: {differs} (checked again in {REVET_S:g}s while listed)"
    for now in (11, 12, 10 + REVET_S - 1):  # every discovery run lists it: not checked again before REVET_S
        world.at(now)
    assert len(world.checks["b"]) == 1
    world.at(10 + REVET_S)  # checked again, same reason: not said again
    assert len(world.checks["b"]) == 2 and sum("gets no agent" in line for line in world.said) == 1
    world.at(10 + 2 * REVET_S + 1)  # fixed meanwhile
    assert world.started[-1] == ("b", 1) and world.said[-1] == "host discovery: b passes its check now"


def test_a_host_no_longer_listed_while_checked_or_refused_is_forgotten(monkeypatch):
    world = _World(monkeypatch, {"b": [None], "c": ["cannot run tfdist's probe there: exit status 127", ""]})
    world.fleet.start_all()
    world.listing = [HostEntry("a"), HostEntry("b"), HostEntry("c")]
    world.at(10)
    world.listing = [HostEntry("a")]
    world.at(11)
    assert world.checks["b"][0].closed and not world.fleet.vetting and world.fleet.idle
    world.listing = [HostEntry("a"), HostEntry("c")]  # listed again at once: a fresh check, said as new
    world.at(12)
    assert world.started[-1] == ("c", 1) and world.said.count("host discovery: c added") == 2


@pytest.mark.parametrize("report, faults", [
    ({"script": True}, {}),
    ({"script": None}, {}),  # a module or a program on PATH: no file to look for
    ({"script": False}, {"script": "train.py is missing in /work"}),
    ({"script": True, "firewall": "--firewall needs root"}, {"firewall": "--firewall needs root"}),
    ({"script": True, "firewall": None}, {}),
])
def test_what_a_probe_report_says_stops_a_host(report, faults):
    assert report_faults(report, "train.py", "/work") == faults


@pytest.mark.parametrize("versions, said", [
    (JOB, ""),
    ({**JOB, "tensorflow": "2.15.0"}, "tensorflow 2.15.0 (the job's: 2.16.1)"),
    ({"python": "3.12.1", "tfdist": "0.1.0"}, "python 3.12.1 (the job's: 3.11.7), tensorflow None (the job's: 2.16.1)"),
    ({**JOB, "extra": "x\x1b[2J"}, "extra x\\x1b[2J (the job's: None)"),  # a host's text is printed, never obeyed
])
def test_version_differences_name_each_one_against_the_jobs(versions, said):
    assert version_differences(versions, JOB) == said
