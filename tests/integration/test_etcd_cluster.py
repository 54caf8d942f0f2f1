"""The etcd fixtures themselves: a 3-member cluster on namespace machines keeps serving with its leader killed, and
everything it made is gone afterwards; the loopback member serves and is removed."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.integration.etcd_cluster import ETCDCTL, EtcdCluster, LocalEtcd, why_no_etcd
from tests.integration.netns import Machines, why_no_namespaces

pytestmark = [pytest.mark.skipif(why_no_etcd() is not None, reason=str(why_no_etcd()))]


def _ctl(machines: Machines, i: int, endpoints: str, *args: str) -> subprocess.CompletedProcess:
    urls = ",".join(f"http://{e}" for e in endpoints.split(","))
    return subprocess.run(machines.command(i, [ETCDCTL, "--endpoints", urls, "--dial-timeout", "1s",
                                               "--command-timeout", "3s", *args]),
                          capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=30)


@pytest.mark.slow
@pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))
def test_three_members_survive_a_killed_leader_and_leave_nothing_behind():
    with Machines(4) as machines, EtcdCluster(machines, members=(1, 2, 3)) as etcd:
        assert _ctl(machines, 4, etcd.endpoints, "put", "k", "before").returncode == 0
        first = etcd.leader()
        etcd.kill(first)
        survivors = ",".join(etcd.endpoint(i) for i in etcd.members if i != first)
        deadline = time.monotonic() + 20  # a new leader is elected within about one election timeout
        while (put := _ctl(machines, 4, survivors, "put", "k", "after")).returncode != 0:
            assert time.monotonic() < deadline, put.stderr
        assert etcd.leader() != first
        got = _ctl(machines, 4, survivors, "get", "k", "--print-value-only")
        assert got.stdout.strip() == "after"
        # Cut one more member: two of three gone, no quorum, writes fail (bounded by the command timeout).
        second = etcd.leader()
        machines.cut(second)
        rest = ",".join(etcd.endpoint(i) for i in etcd.members if i not in (first, second))
        assert _ctl(machines, 4, rest, "put", "k", "no-quorum").returncode != 0
        datadir = etcd.datadir
    assert not datadir.exists()
    assert machines.existing() == []


def test_a_loopback_member_serves_and_is_removed():
    with LocalEtcd() as etcd:
        assert etcd.etcdctl("put", "a", "1").returncode == 0
        assert etcd.etcdctl("get", "a", "--print-value-only").stdout.strip() == "1"
        pid, datadir = etcd.proc.pid, etcd.datadir
    assert not datadir.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
