"""The etcd backend at fleet scale (issue 33): 256 agents join one job at once against one real etcd member on
loopback (etcd_cluster.LocalEtcd), each with its own ``EtcdLink`` (its own gRPC connection, lease and watches), as
256 machines would; all must be in one round, and what each costs etcd must stay bounded: one lease and two
watches per machine (its inbox and the coordinator key), two more for the coordinator, nothing left after they leave.

Before the fix a round of more than about 126 machines was never written: the coordinator wrote every machine's
round message, the round's record and its state in one transaction, and etcd refuses more than 128 writes
(``--max-txn-ops``) or 1.5 MiB (``--max-request-bytes``) in one; the coordinator stepped down and kept its claim,
so no other machine could coordinate and every agent waited out --rdzv-timeout."""
from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest

from tests.integration.etcd_cluster import LocalEtcd, why_no_etcd
from tfdist.launch.elastic.messages import protocol as M

pytestmark = [pytest.mark.slow, pytest.mark.skipif(why_no_etcd() is not None, reason=str(why_no_etcd()))]

FLEET = 256
SECRET = bytes(range(32))


def _metric(etcd: LocalEtcd, name: str) -> int:
    text = urllib.request.urlopen(f"{etcd.url}/metrics", timeout=10).read().decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, flags=re.M)
    assert found, f"etcd reports no {name}"
    return int(float(found.group(1)))


def _leases(etcd: LocalEtcd) -> int:
    listed = etcd.etcdctl("lease", "list")
    assert listed.returncode == 0, listed.stderr
    return int(re.search(r"found (\d+) leases", listed.stdout).group(1))


def test_256_agents_joining_at_once_are_all_in_one_round_with_a_lease_and_two_watches_each():
    from tfdist.launch.elastic.etcd.link import EtcdLink
    from tfdist.launch.elastic.etcd.conf import parse_conf
    from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings

    settings = RendezvousSettings(job="fleet", min_nodes=FLEET, max_nodes=FLEET, node_timeout=10.0,
                                  first_round_wait=0.3, stop_timeout=5.0, rdzv_timeout=120.0)
    with LocalEtcd() as etcd:
        conf = parse_conf(etcd.endpoint, (), settings.node_timeout, {})
        links = [EtcdLink(conf, settings, secret=SECRET) for _ in range(FLEET)]
        rounds: list[M.Round | BaseException | None] = [None] * FLEET
        go = threading.Barrier(FLEET)

        def agent(index: int) -> None:  # what the agent does up to its first round
            link = links[index]
            go.wait()
            try:
                link.connect(dict(job="fleet", name=f"m{index}", node_rank=None, address=f"127.1.{index // 250}."
                                  f"{index % 250 + 1}", slots=1, versions={}), time.monotonic() + 120, lambda: False)
                link.send(M.Ready(ports=[20000 + index]))
                while not isinstance(message := link.next_message(0.2), M.Round):
                    pass
                rounds[index] = message
            except BaseException as bad:  # noqa: BLE001 - the test reports what each agent got
                rounds[index] = bad

        threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(FLEET)]
        try:
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 150
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            missing = [repr(r) for r in rounds if not isinstance(r, M.Round)]
            assert not missing, f"{len(missing)} of {FLEET} have no round, e.g. {missing[:3]}"
            assert {r.round for r in rounds} == {0} and {r.world_size for r in rounds} == {FLEET}
            assert {r.node_rank for r in rounds} == set(range(FLEET))  # one round, every machine in it once
            # Bounded: one lease per machine, two watches per machine and five for the coordinator
            # (members, their messages, and its own claim, state and round record: etcd/kept_records.py), one watch
            # stream per machine's connection.
            assert _leases(etcd) == FLEET
            assert _metric(etcd, "etcd_debugging_mvcc_watcher_total") == 2 * FLEET + 5
            assert _metric(etcd, "etcd_debugging_mvcc_watch_stream_total") == FLEET
        finally:
            for link in links:
                link.close()
        # Leaving revokes every lease and cancels every watch: nothing of the fleet stays in etcd.
        assert _leases(etcd) == 0
        deadline = time.monotonic() + 10
        while _metric(etcd, "etcd_debugging_mvcc_watcher_total") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _metric(etcd, "etcd_debugging_mvcc_watcher_total") == 0
