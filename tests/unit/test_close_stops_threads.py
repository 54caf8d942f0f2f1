"""Closing the rendezvous' objects stops their threads (leftover rdzv-accept, etcd-rewatch, etcd-send and
etcd-campaign threads piled up in the test process). The etcd ones run without etcd: an unconnected store answers
every call with EtcdUnavailable, which is what a watch whose member went away retries on."""
from __future__ import annotations

import threading
import time

from tfdist.launch.elastic.etcd.link import EtcdLink
from tfdist.launch.elastic.etcd.store import WATCH_RETRY, EtcdStore
from tfdist.launch.elastic.etcd.conf import parse_conf
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings
from tfdist.launch.elastic.tcp.server import RendezvousServer


def _conf():
    return parse_conf("127.0.0.1:2379", (), 60.0, {})


def _new_threads(before: set[threading.Thread], name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.name == name]


def test_closing_a_store_stops_the_watches_made_through_it():
    store = EtcdStore(_conf())
    before = set(threading.enumerate())
    store.watch("/tfdist/job/", 1, lambda _entries: None, lambda _why: None)
    time.sleep(3 * WATCH_RETRY)  # it keeps retrying while the store is open: the member may come back
    retrying = _new_threads(before, "etcd-watch")
    assert len(retrying) == 1 and retrying[0].is_alive()
    store.close()
    retrying[0].join(timeout=5)
    assert not retrying[0].is_alive(), "a watch of a closed store kept retrying"


def test_closing_a_link_wakes_its_campaign_at_once_rather_than_after_the_node_timeout():
    settings = RendezvousSettings(job="close", min_nodes=1, max_nodes=1, node_timeout=60.0)
    link = EtcdLink(_conf(), settings)
    campaign = threading.Thread(target=link._campaign, daemon=True)
    campaign.start()
    time.sleep(0.2)  # it tried to claim (etcd unavailable) and now waits for the coordinator's key to go
    assert campaign.is_alive()
    link.close()
    campaign.join(timeout=5)
    assert not campaign.is_alive(), "the campaign thread waited out the node timeout after close()"


def test_a_link_whose_threads_were_stopped_still_releases_its_watches_and_connection_on_close():
    settings = RendezvousSettings(job="close", min_nodes=1, max_nodes=1, node_timeout=60.0)
    link = EtcdLink(_conf(), settings)
    before = set(threading.enumerate())
    link._watches.append(link.store.watch("/tfdist/close/to/x", 1, lambda _e: None, lambda _w: None))
    link._closed.set()  # how the tests make a machine vanish: its lease and campaign threads stop
    link.close()
    watching = _new_threads(before, "etcd-watch")
    assert len(watching) == 1
    watching[0].join(timeout=5)
    assert not watching[0].is_alive(), "close() after the threads stopped left the watch retrying"
    assert link.store.closed


def test_closing_the_rendezvous_server_ends_its_accept_thread():
    settings = RendezvousSettings(job="close", min_nodes=1, max_nodes=1, node_timeout=60.0)
    server = RendezvousServer(settings, "127.0.0.1", 0, secret=b"s" * 32).start()
    accepting = [t for t in server._threads if t.name == "rdzv-accept"]
    assert len(accepting) == 1 and accepting[0].is_alive()
    server.close()
    accepting[0].join(timeout=5)
    assert not accepting[0].is_alive(), "the accept thread stayed blocked in accept() after close()"
    starting = [t for t in server._threads if t.name == "rdzv-start"]
    starting[0].join(timeout=5)
    assert not starting[0].is_alive(), "the thread that starts members' threads outlived close()"
