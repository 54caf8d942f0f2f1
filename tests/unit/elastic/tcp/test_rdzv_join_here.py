"""The machine that serves the rendezvous joins it inside its own process (issue 20, connect-to-welcome cost): over a
socket pair, not a TCP handshake with itself, and otherwise as any member: the same policy and refusals, sealed
frames, keep-alives, loss detection, and TCP again once the server is closing. A real server and real links."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, VERSIONS, live_server, wait_until
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp.client import Refused, RendezvousLink

JOIN = dict(job="job", name="here", node_rank=None, address="127.0.0.1", slots=1, versions=VERSIONS)


def _link(server, *, here=True, node_timeout: float = 2.0) -> RendezvousLink:
    return RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], node_timeout, secret=SECRET,
                          here=server if here else None)


def _next(link: RendezvousLink, kind: type, timeout: float = 10.0) -> M.Message:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = link.next_message(0.1)
        if isinstance(message, kind):
            return message
    raise AssertionError(f"no {kind.__name__} within {timeout:g}s")


def test_the_serving_agent_joins_over_a_socket_pair_and_gets_its_round():
    said: list[str] = []
    with live_server(said=said, min_nodes=1) as server:
        link = _link(server)
        accepted_before = len(server._admission.waiting)
        threads_before = set(threading.enumerate())
        link.connect(JOIN, time.monotonic() + 10, lambda: False)
        try:
            assert link.channel is not None and link.channel.sock.family == socket.AF_UNIX  # no TCP connection
            assert len(server._admission.waiting) == accepted_before
            assert server.member_names() == {"here"}
            # The joining thread started only the agent's reader; the server's thread for this member starts when
            # the member first speaks, from the accept thread that watches its end of the pair.
            assert [t.name for t in set(threading.enumerate()) - threads_before] == ["rdzv-read"]
            link.send(M.Ready(ports=[20000]))
            round_ = _next(link, M.Round)
            assert round_.round == 0 and round_.workers == ["127.0.0.1:20000"]
            assert "rdzv-conn" in [t.name for t in set(threading.enumerate()) - threads_before]
        finally:
            link.close()
        wait_until(lambda: any("lost node" in line for line in said), what="the server seeing the agent leave")


def test_keep_alives_flow_both_ways_over_the_pair():
    with live_server(node_timeout=0.4, min_nodes=1) as server:
        link = _link(server, node_timeout=0.4)
        link.connect(JOIN, time.monotonic() + 10, lambda: False)
        try:
            pings = 0
            deadline = time.monotonic() + 2.0  # five node timeouts: a member without keep-alives is lost by then
            while time.monotonic() < deadline:
                pings += isinstance(link.next_message(0.05), M.Ping)  # raises Lost without the server's pings
            assert pings >= 3
            assert server.member_names() == {"here"}  # the agent's pings reached the server
        finally:
            link.close()


def test_a_join_the_policy_refuses_is_refused_over_the_pair_too():
    with live_server(min_nodes=1) as server:
        link = _link(server)
        with pytest.raises(Refused) as refused:
            link.connect({**JOIN, "job": "another"}, time.monotonic() + 10, lambda: False)
        assert "job" in refused.value.reason and refused.value.status == 2
        assert server.member_names() == set()


def test_once_the_server_is_closing_the_agent_joins_over_tcp_as_any_other():
    with live_server(min_nodes=1) as server:
        server.close()
        with pytest.raises(OSError):
            server.join_here(M.encode(M.make("join", **JOIN)))
        link = _link(server)
        with pytest.raises(TimeoutError, match="no rendezvous at 127.0.0.1:"):  # the listener is closed too
            link.connect(JOIN, time.monotonic() + 0.3, lambda: False)


def test_the_pairs_frames_are_sealed_with_keys_of_their_own():
    with live_server(min_nodes=1) as server:
        first = M.encode(M.make("join", **JOIN))
        one, one_keys = server.join_here(first)
        two, two_keys = server.join_here(M.encode(M.make("join", **{**JOIN, "name": "two"})))
        try:
            frame = one_keys.seal(M.encode(M.Ping()))
            assert two_keys.seal(M.encode(M.Ping())) != frame  # fresh nonces: one pair's frame is no good on another
            two.sendall(frame)  # a frame sealed for another connection: the server drops this member
            wait_until(lambda: "two" not in server.member_names(), what="the member with a forged frame dropped")
            assert "here" in server.member_names()
        finally:
            one.close()
            two.close()
