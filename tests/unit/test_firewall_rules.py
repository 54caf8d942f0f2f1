"""The nftables renderer of --firewall (launch/firewall/rules.py): names, hostile input, IPv4/IPv6 members."""
from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

import pytest

from tfdist.launch.firewall.rules import Guard, removal, render, table_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("job", ["job", "my.job_1-x", "a" * 64, "0abc"])
def test_a_plain_job_id_names_its_table(job):
    assert table_name(job, "0123abcd") == f"tfdist-{job}-0123abcd"


@pytest.mark.parametrize("job", ["", "a" * 65, "x { flush ruleset }", "a;b", "job\nflush ruleset", '"q"', "-lead",
                                 "a b", "caf\u00e9", "a/b", "a\\b", "a}"])
def test_a_hostile_job_id_never_reaches_nft(job):
    with pytest.raises(ValueError, match="cannot name an nftables table"):
        table_name(job, "0123abcd")


@pytest.mark.parametrize("tag", ["", "0123abc", "0123abcde", "0123ABCD", "0123abc;"])
def test_the_tag_is_eight_hex_digits(tag):
    with pytest.raises(ValueError):
        table_name("job", tag)


@pytest.mark.parametrize("name", ["ip", "tfdist-job", "tfdist-job-0123abcd; flush ruleset", "other-job-0123abcd"])
def test_only_a_tfdist_table_is_rendered_or_removed(name):
    with pytest.raises(ValueError):
        Guard.of(name, [1], [])
    with pytest.raises(ValueError):
        removal(name)


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_a_port_outside_the_range_is_refused(port):
    with pytest.raises(ValueError, match="outside"):
        Guard.of("tfdist-job-0123abcd", [port], [])


@pytest.mark.parametrize("member", ["198.18.0.300", "host.example", "1.2.3.4; flush ruleset", "", "fe80::1%eth0"])
def test_a_member_that_is_not_an_ip_address_is_refused(member):
    with pytest.raises(ValueError):
        Guard.of("tfdist-job-0123abcd", [1], [member])


def test_ports_and_both_families_of_members_are_written():
    text = render(Guard.of("tfdist-job-0123abcd", [2223, 2222, 9100],
                           ["198.18.0.2", "198.18.0.1", "[2001:db8::1]", "::1", "::ffff:198.18.0.3"]))
    assert "set members4 { type ipv4_addr; elements = { 198.18.0.1, 198.18.0.2, 198.18.0.3 }; }" in text
    assert "set members6 { type ipv6_addr; elements = { ::1, 2001:db8::1 }; }" in text  # mapped v4 went to v4
    assert "tcp dport != { 2222, 2223, 9100 } accept" in text
    assert text.rstrip().endswith("tcp dport { 2222, 2223, 9100 } reject with tcp reset\n\t}\n}")
    assert text.index('iifname "lo" accept') < text.index("ip saddr @members4 accept") < text.index("reject")


def test_answers_to_the_machines_own_connections_pass_before_the_reset():
    """A guarded port nothing listens on may be the local port of this machine's own outgoing connection; its far side's
    answers come in the reply direction (a stranger's connection never does)."""
    text = render(Guard.of("tfdist-job-0123abcd", [2222], ["198.18.0.1"]))
    assert text.index("tcp dport != { 2222 } accept") < text.index("ct direction reply accept") < text.index("reject")


def test_the_file_replaces_the_table_in_one_transaction():
    lines = render(Guard.of("tfdist-job-0123abcd", [1], [])).splitlines()
    assert lines[:3] == ["table inet tfdist-job-0123abcd {}", "delete table inet tfdist-job-0123abcd",
                         "table inet tfdist-job-0123abcd {"]


def test_an_empty_family_gets_an_empty_set_and_no_ports_no_rules():
    text = render(Guard.of("tfdist-job-0123abcd", [], [ipaddress.ip_address("198.18.0.1")]))
    assert "set members6 { type ipv6_addr; }" in text
    assert "reject" not in text and "accept" not in text.split("policy accept;")[1]


def test_the_orphan_watcher_deletes_the_same_text_as_removal(monkeypatch):
    """The watcher is standard-library only (it cannot import rules.py): its copy must stay equal."""
    sys.path.insert(0, str(ROOT / "src/tfdist/launch/process"))
    try:
        import orphan_watcher
    finally:
        sys.path.pop(0)
    sent = []
    monkeypatch.setattr(orphan_watcher.subprocess, "run", lambda argv, input, **_: sent.append(input.decode()))
    orphan_watcher._delete_table("tfdist-job-0123abcd")
    orphan_watcher._delete_table("tfdist-job; flush ruleset")  # never passed on
    assert sent == [removal("tfdist-job-0123abcd")]


def test_the_table_name_takes_exactly_the_launchers_job_ids():
    from tfdist.launch import options
    from tfdist.launch.firewall import rules

    assert rules._JOB.pattern == options._JOB.pattern  # one rule, two modules: the renderer cannot import the CLI's


@pytest.mark.parametrize("platform, euid, nft, says", [
    ("darwin", 0, "/usr/sbin/nft", "Linux nftables"),
    ("linux", 1000, "/usr/sbin/nft", "needs root"),
    ("linux", 0, None, "apt-get install nftables"),
    ("linux", 0, "/usr/sbin/nft", None),
])
def test_firewall_is_refused_in_one_line_where_it_cannot_work(monkeypatch, platform, euid, nft, says):
    from tfdist.launch.firewall import nft as mechanism

    monkeypatch.setattr(mechanism.sys, "platform", platform)
    monkeypatch.setattr(mechanism.os, "geteuid", lambda: euid)
    reason = mechanism.why_not(nft)
    assert (reason is None) if says is None else (says in reason and "\n" not in reason)


@pytest.mark.parametrize("address, host", [("198.18.0.1:2222", "198.18.0.1"), ("[2001:db8::1]:2222", "2001:db8::1"),
                                           ("node-a:2222", "node-a")])
def test_a_cluster_address_gives_its_host(address, host):
    from tfdist.launch.firewall.members import host_of

    assert host_of(address) == host


def test_a_link_local_zone_is_dropped_from_a_cluster_host():
    from tfdist.launch.firewall import addresses_of

    assert {str(a) for a in addresses_of(["fe80::1%eth0", "[2001:db8::2]", "198.18.0.1"])} == {
        "fe80::1", "2001:db8::2", "198.18.0.1"}


def test_a_rounds_plans_give_their_ports_and_their_clusters_machines():
    from tfdist.launch.firewall.members import cluster_hosts, task_ports
    from tfdist.launch.local.layout import ClusterLayout
    from tfdist.launch.local.taskenv import plan_tasks
    from tfdist.launch.spec import LaunchSpec

    spec = LaunchSpec(command=("python", "x.py"), workers=3, metrics_port=9000)
    layout = ClusterLayout(worker=("198.18.0.1:2222", "[2001:db8::2]:2223", "198.18.0.3:2224"))
    here = [p for p in plan_tasks(spec, layout, run_id="r", attempt=0, log_dir="/logs") if p.task_index == 1]
    assert task_ports(here) == {2223, 9001}  # this machine's task only, its metrics port with it
    assert cluster_hosts(here) == {"198.18.0.1", "2001:db8::2", "198.18.0.3"}  # every machine of the round
