"""Storms against a running job (issue 33): a tenth of the fleet lost at once, all of it back at once, a slow joiner
among a burst, and a burst of strangers while the job trains. Real RendezvousLinks (the agent's own client) against
a real server on loopback, each machine from its own 127/8 address (``test_rdzv_fleet.py``'s burst); the test plays
each agent's part of the protocol (ready, training) as ``agent.py`` does.

Each storm must end in the right round with exactly the right machines, every survivor told, and no honest machine
lost or turned away."""
from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, live_server, member, wait_until
from tests.unit.elastic.tcp.test_rdzv_fleet import (
    _challenged, _close, _flood, _join, _SlowPath, burst, fleet_address,
)
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.tcp.client import Refused, RendezvousLink

FLEET = int(os.environ.get("TFDIST_TEST_STORM_FLEET", "256"))  # 1024: the storms at the scale of issue 33 (a manual run, 2-3 min)
LOST = FLEET // 10


def _next(link: RendezvousLink, kind: type[M.Message], timeout: float = 20.0) -> M.Message:
    """``link``'s next ``kind`` message (pings and other kinds skipped); fails when the connection ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = link.next_message(0.2)  # raises Lost when the connection ended
        if isinstance(message, kind):
            return message
    raise AssertionError(f"no {kind.__name__} within {timeout:g}s")


def _drain(link: RendezvousLink) -> list[M.Message]:
    """What ``link`` has received and not read yet (pings included)."""
    got = []
    while (message := link.next_message(0.0)) is not None:
        got.append(message)
    return got


def _welcomed(outcomes: list) -> list[RendezvousLink]:
    refused = [repr(o) for o in outcomes if not isinstance(o, RendezvousLink)]
    assert not refused, f"{len(refused)} of {len(outcomes)} not welcomed, e.g. {refused[:3]}"
    return outcomes


def _ready(links: list[RendezvousLink]) -> None:
    for index, link in enumerate(links):
        assert link.send(M.Ready(ports=[20000 + index]))


def _losses(said: list[str]) -> int:
    """Machines the server reported lost: a closed connection, or no keep-alive in time."""
    return sum("lost node" in line or ": no keep-alive for" in line for line in said)


def _names(round_: M.Round) -> set[str]:
    return {node[1] for node in round_.nodes}


def _rounds(links: list[RendezvousLink]) -> list[M.Round]:
    return [_next(link, M.Round) for link in links]


def _fleet(server, count: int = FLEET) -> list[RendezvousLink]:
    """``count`` machines in one burst, each ready: welcomed, every one of them, at the first try."""
    links = _welcomed(burst(server.address[1], [fleet_address(i) for i in range(count)],
                            node_timeout=server.settings.node_timeout))
    assert [link.tries for link in links] == [1] * count  # nobody evicted, busy or reset
    _ready(links)
    return links


@pytest.mark.parametrize("how", ["closed", "silent"])
def test_a_tenth_of_the_fleet_lost_at_once_the_next_round_has_exactly_the_survivors_and_every_one_is_told(how):
    """``closed``: their agents die (the connections close). ``silent``: their links are cut (the connections stay
    open and nothing comes: lost after --node-timeout, from the missing keep-alives)."""
    said: list[str] = []
    node_timeout = 10.0 if how == "closed" else 3.0
    with live_server(said=said, min_nodes=FLEET - LOST, max_nodes=FLEET, first_round_wait=60.0,
                     node_timeout=node_timeout) as server:
        survivors = _fleet(server, FLEET - (LOST if how == "silent" else 0))
        # Silent machines: peers that say nothing after their ready (no keep-alives), as a cut link does.
        silent = [member(server, f"cut{i}") for i in range(LOST)] if how == "silent" else []
        try:
            assert {r.round for r in _rounds(survivors)} == {0}
            if how == "closed":
                survivors, lost = survivors[:-LOST], survivors[-LOST:]
                lost_names = {f"m{i}" for i in range(FLEET - LOST, FLEET)}
                for link in lost:  # all at once
                    link.channel.close()
            else:
                lost_names = {f"cut{i}" for i in range(LOST)}
            for link in survivors:  # every survivor is told, and sends its ready again once its tasks stopped
                stop = _next(link, M.Stop)
                assert stop.graceful is False and "lost" in stop.reason
            wait_until(lambda: _losses(said) >= LOST, timeout=20, what="every loss seen")
            _ready(survivors)
            again = _rounds(survivors)
            assert {r.round for r in again} == {1}
            survivor_names = {f"m{i}" for i in range(len(survivors))}
            assert all(_names(r) == survivor_names and r.world_size == len(survivors) for r in again)
            assert server.member_names() == survivor_names and not lost_names & survivor_names
            assert _losses(said) == LOST  # no survivor lost in the storm
        finally:
            _close(survivors)
            for peer in silent:
                peer.close()


def test_every_lost_machine_back_at_once_is_admitted_into_the_next_round():
    said: list[str] = []
    with live_server(said=said, min_nodes=FLEET - LOST, max_nodes=FLEET, first_round_wait=60.0,
                     node_timeout=10.0) as server:
        links = _fleet(server)
        back: list = []
        try:
            _rounds(links)
            survivors, lost = links[:-LOST], links[-LOST:]
            for link in lost:
                link.channel.close()
            for link in survivors:
                _next(link, M.Stop)
            _ready(survivors)
            assert {r.round for r in _rounds(survivors)} == {1}
            # The lost machines come back together, from their own addresses and under their own names, while
            # round 1 starts.
            lost_indices = range(FLEET - LOST, FLEET)
            back = _welcomed(burst(server.address[1], [fleet_address(i) for i in lost_indices],
                                   names=[f"m{i}" for i in lost_indices]))
            assert [link.tries for link in back] == [1] * LOST
            _ready(back)
            wait_until(lambda: len(server.member_names()) == FLEET, what="every machine a member again")
            for link in survivors:  # round 1 trains: now the newcomers may stop it (gracefully)
                assert link.send(M.Training(round=1))
            for link in survivors:
                assert _next(link, M.Stop).graceful is True
            _ready(survivors)
            grown = _rounds(survivors + back)  # the first round a machine that came back hears of is this one
            everyone = {f"m{i}" for i in range(FLEET)}
            assert {r.round for r in grown} == {2}
            assert all(_names(r) == everyone and r.world_size == FLEET for r in grown)
            assert _losses(said) == LOST
        finally:
            _close(links)
            _close(back)


def _stall_mid_handshake(server) -> socket.socket:
    """Half a hello, then nothing."""
    sock = socket.create_connection(server.address[:2], timeout=5)
    sock.sendall(auth.MAGIC)
    return sock


def _stall_mid_join(server) -> socket.socket:
    """A machine with the secret: the handshake done, then its join's sealed length (its proof) and the first byte
    of a 200-byte join, then nothing."""
    sock = socket.create_connection(server.address[:2], timeout=5)
    handshake = auth.AgentHandshake(SECRET)
    sock.sendall(handshake.hello)
    session = handshake.finish(auth.receive_exactly(sock, auth.ANSWER, time.monotonic() + 5))
    sock.sendall(session.seal(b"{" * 200)[: auth.HEADER + 1])
    return sock


@pytest.mark.parametrize("stall", [_stall_mid_handshake, _stall_mid_join], ids=["mid-handshake", "mid-join"])
def test_one_slow_joiner_among_a_burst_delays_nobody(monkeypatch, stall):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)  # it would stall for a minute if it could
    with live_server(min_nodes=FLEET, max_nodes=FLEET + 1, first_round_wait=0.0, node_timeout=10.0) as server:
        slow = stall(server)
        links: list = []
        try:
            links = _fleet(server)  # every one at its first try, no busy, no reset
            rounds = _rounds(links)
            assert {r.round for r in rounds} == {0} and {r.world_size for r in rounds} == {FLEET}
            assert slow.fileno() >= 0 and len(server.member_names()) == FLEET
        finally:
            _close(links)
            slow.close()


def _garbage(port: int, source: str, stop: threading.Event, count: list[int]) -> None:
    """Connect, send bytes that are no hello, repeat."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0, source_address=(source, 0)) as sock:
                sock.sendall(os.urandom(64))
                count[0] += 1
                sock.recv(1)
        except OSError:
            pass


def _wrong_secret(port: int, source: str, stop: threading.Event, count: list[int]) -> None:
    """The real client with another job's secret: told at once that this is not its rendezvous."""
    while not stop.is_set():
        link = RendezvousLink("127.0.0.1", "127.0.0.1", port, 10.0, secret=bytes(32), source=source)
        try:
            link.connect(_join("stranger"), time.monotonic() + 5, lambda: True)
        except (Refused, TimeoutError):
            count[0] += 1
        link.close()


def test_a_burst_of_strangers_while_the_job_trains_costs_the_members_nothing(monkeypatch):
    """No secret (idle connections), garbage, another job's secret, hellos that never prove: no member lost, no
    round stopped, and the server still pings every member (its loops were never starved)."""
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)
    said: list[str] = []
    members = FLEET // 4  # 64 (256 at TFDIST_TEST_STORM_FLEET=1024)
    with live_server(said=said, min_nodes=members, max_nodes=members, node_timeout=3.0) as server:
        links = _fleet(server, members)
        stop = threading.Event()
        workers: list[threading.Thread] = []
        stalled: list[socket.socket] = []
        try:
            assert {r.round for r in _rounds(links)} == {0}
            for link in links:
                assert link.send(M.Training(round=0))
            for link in links:  # the keep-alives so far: only those heard during the storm count below
                _drain(link)
            counts = {"garbage": [0], "wrong secret": [0]}
            for index in range(10):
                for kind, target in (("garbage", _garbage), ("wrong secret", _wrong_secret)):
                    source = f"127.10.{len(workers) // 250}.{len(workers) % 250 + 1}"
                    workers.append(threading.Thread(target=target, args=(server.address[1], source, stop,
                                                                         counts[kind]), daemon=True))
            for thread in workers:
                thread.start()
            with _flood(server.address[1], [f"127.11.0.{i + 1}" for i in range(20)], threading.Event()) as opened:
                stalled = [_challenged(server, f"127.12.0.{i + 1}") for i in range(20)]
                wait_until(lambda: sum(opened) >= 80 and counts["garbage"][0] >= 200
                           and counts["wrong secret"][0] >= 50, timeout=30, what="the storm under way")
                # While it blows, longer than --node-timeout: every member keeps hearing the server's keep-alives
                # (four per timeout), and the server keeps hearing theirs (no member lost, below).
                for link in links:
                    for _ in range(5):
                        _next(link, M.Ping, timeout=10)
                # A machine 100 ms away still reaches the rendezvous at its first try, and is told by the
                # rendezvous itself (after both proved the secret) that the job is full: no stranger kept it out.
                path = _SlowPath(server.address[1], 0.05, fleet_address(members))
                late = RendezvousLink("127.0.0.1", "127.0.0.1", path.port, 3.0, secret=SECRET)
                try:
                    with pytest.raises(Refused, match=f"maximum of {members}"):
                        late.connect(_join("late"), time.monotonic() + 20, lambda: False)
                    assert late.tries == 1
                finally:
                    path.close()
            assert server.policy.round == 0 and len(server.member_names()) == members
            assert _losses(said) == 0, [line for line in said if "lost" in line or "keep-alive" in line][:3]
            for link in links:  # nothing stopped any member's round
                assert not [m for m in _drain(link) if isinstance(m, (M.Stop, M.Round, M.Finish))]
        finally:
            stop.set()
            for thread in workers:
                thread.join(10)
            for sock in stalled:
                sock.close()
            _close(links)
