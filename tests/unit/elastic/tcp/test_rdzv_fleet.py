"""A fleet at once (issue 33): every machine of a burst is admitted, and strangers cannot keep one out. Real
RendezvousLinks against a real server on loopback, each agent from its own 127/8 address (all of 127/8 is loopback
on Linux), as the machines of a job have their own.

Before the fix: a fixed pool of 32 handshakes where the oldest gave way to the newcomer, so agents of one burst
evicted each other mid-handshake and quit ("the rendezvous closed the connection", exit 3, or "did not prove this
job's secret", exit 2); strangers flooding connections from twenty addresses evicted an agent whose round trip is
long; four idle connections from a machine's own address kept it out for good."""
from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, VERSIONS, live_server, wait_until
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings
from tfdist.launch.elastic.tcp.client import RendezvousLink
from tfdist.launch.elastic.tcp.server import RendezvousServer

BURST = 256


def fleet_address(index: int) -> str:
    """The loopback address of machine ``index`` (0-based): 127.1.x.y, never 127.0.0.1 (the server's)."""
    return f"127.1.{index // 250}.{index % 250 + 1}"


def _join(name: str) -> dict:
    return dict(job="job", name=name, address="127.0.0.1", slots=1, node_rank=None, versions=VERSIONS)


def burst(port: int, sources: list[str], *, patience: float = 60.0, names: list[str] | None = None,
          secret: bytes = SECRET, node_timeout: float = 10.0) -> list[RendezvousLink | BaseException]:
    """Every agent connects at once (one thread each, released together); each one's link, or what it raised.
    ``names``: the machines' names (default ``m<index>``); ``node_timeout``: the job's (it paces the keep-alives)."""
    outcomes: list[RendezvousLink | BaseException | None] = [None] * len(sources)
    go = threading.Barrier(len(sources))

    def agent(index: int) -> None:
        link = RendezvousLink("127.0.0.1", "127.0.0.1", port, node_timeout, secret=secret, source=sources[index])
        go.wait()
        try:
            name = f"m{index}" if names is None else names[index]
            link.connect(_join(name), time.monotonic() + patience, lambda: False)
            outcomes[index] = link
        except BaseException as bad:  # noqa: BLE001 - the test reports what each agent got
            outcomes[index] = bad

    threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(patience + 10)
    return [o if o is not None else TimeoutError("still connecting") for o in outcomes]


def _close(outcomes: list) -> None:
    for outcome in outcomes:
        if isinstance(outcome, RendezvousLink) and outcome.channel is not None:
            outcome.channel.close()


def test_a_burst_of_256_machines_from_their_own_addresses_is_all_welcomed():
    with live_server(min_nodes=BURST, max_nodes=BURST, node_timeout=10.0) as server:
        outcomes = burst(server.address[1], [fleet_address(i) for i in range(BURST)])
        try:
            refused = [repr(o) for o in outcomes if not isinstance(o, RendezvousLink)]
            assert not refused, f"{len(refused)} of {BURST} not welcomed, e.g. {refused[:3]}"
            wait_until(lambda: len(server.member_names()) == BURST, what="every machine a member")
        finally:
            _close(outcomes)


@contextlib.contextmanager
def _flood(port: int, sources: list[str], stop: threading.Event) -> Iterator[list[int]]:
    """From each of ``sources``, four connections (the per-source cap) that never send a byte, each one the
    server closes opened again at once. Yields the count of connections opened (one counter per source)."""
    opened = [0] * len(sources)

    def flood(index: int) -> None:
        held: list[socket.socket] = []
        while not stop.is_set():
            if held:  # drop the ones the server closed
                readable, _, _ = select.select(held, [], [], 0.005)
                for sock in readable:
                    held.remove(sock)
                    sock.close()
            while len(held) < 4 and not stop.is_set():
                sock = socket.socket()
                try:
                    sock.bind((sources[index], 0))
                    sock.settimeout(1.0)
                    sock.connect(("127.0.0.1", port))
                except OSError:
                    sock.close()
                    break
                opened[index] += 1
                held.append(sock)
        for sock in held:
            sock.close()

    threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    try:
        yield opened
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)


class _SlowPath:
    """A TCP relay on loopback that holds every chunk ``delay`` seconds each way: an agent whose round trip to the
    rendezvous is 2 x ``delay`` (another building, another region)."""

    def __init__(self, port: int, delay: float, source: str) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._target, self._delay, self._source = port, delay, source
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            near, _ = self.listener.accept()
        except OSError:
            return
        far = socket.socket()
        far.bind((self._source, 0))
        far.connect(("127.0.0.1", self._target))
        for a, b in ((near, far), (far, near)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                time.sleep(self._delay)
                target.sendall(chunk)
        except OSError:
            pass
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def test_twenty_addresses_flooding_connections_do_not_evict_an_agent_100_ms_away():
    with live_server(min_nodes=1, max_nodes=1, node_timeout=10.0) as server:
        stop = threading.Event()
        with _flood(server.address[1], [f"127.2.0.{i + 1}" for i in range(20)], stop) as opened:
            wait_until(lambda: sum(opened) >= 80, what="the flood under way")  # 20 x 4, and more
            path = _SlowPath(server.address[1], 0.05, "127.3.0.1")
            link = RendezvousLink("127.0.0.1", "127.0.0.1", path.port, 10.0, secret=SECRET)
            try:
                link.connect(_join("far"), time.monotonic() + 20, lambda: False)
                assert link.channel is not None and link.tries == 1  # its first handshake was never evicted
                assert server.member_names() == {"far"}
            finally:
                link.close()
                path.close()


def test_four_idle_connections_from_a_machines_own_address_do_not_keep_it_out(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)  # they would stay a minute if they could
    with live_server(min_nodes=1, max_nodes=1) as server:
        idle = []
        for _ in range(4):  # another user on that machine, or anyone behind the same NAT address
            sock = socket.socket()
            sock.bind(("127.4.0.1", 0))
            sock.connect(server.address[:2])
            idle.append(sock)
        wait_until(lambda: server._pending.get("127.4.0.1") == 4, what="the idle connections accepted")
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 10.0, secret=SECRET, source="127.4.0.1")
        try:
            link.connect(_join("shared"), time.monotonic() + 20, lambda: False)
            assert link.channel is not None and link.tries == 1
        finally:
            link.close()
            for sock in idle:
                sock.close()


def test_a_fleet_behind_one_nat_address_gets_in_at_once():
    with live_server(min_nodes=32, max_nodes=32, node_timeout=10.0) as server:
        outcomes = burst(server.address[1], ["127.5.0.1"] * 32)
        try:
            assert all(isinstance(o, RendezvousLink) for o in outcomes), [repr(o) for o in outcomes][:3]
            assert "127.5.0.1" not in server._admission.suspects  # an honest address is never counted
        finally:
            _close(outcomes)


def test_a_member_with_the_secret_that_stalls_its_join_does_not_stall_anyone_else():
    with live_server(min_nodes=2, max_nodes=3, node_timeout=10.0) as server:
        stalled = socket.create_connection(server.address[:2], timeout=5)
        try:
            agent = auth.AgentHandshake(SECRET)
            stalled.sendall(agent.hello)
            session = agent.finish(auth.receive_exactly(stalled, auth.ANSWER, time.monotonic() + 5))
            # Its proof (the join's length) and the first bytes of the join, then nothing: it holds the secret
            # and stalls.
            stalled.sendall(session.seal(b'{"type": "join"' + b" " * 200 + b"}")[: auth.HEADER + 1])
            outcomes = burst(server.address[1], [fleet_address(i) for i in range(2)], patience=20)
            try:
                assert all(isinstance(o, RendezvousLink) for o in outcomes), [repr(o) for o in outcomes]
                assert [o.tries for o in outcomes] == [1, 1]
            finally:
                _close(outcomes)
        finally:
            stalled.close()


def _challenged(server, source: str) -> socket.socket:
    """A stranger that sends a well-formed hello and reads its challenge, then never proves: it holds a slot."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(5.0)
    sock.connect(server.address[:2])
    sock.sendall(auth.AgentHandshake(SECRET).hello)
    assert len(auth.receive_exactly(sock, auth.ANSWER, time.monotonic() + 5)) == auth.ANSWER
    return sock


def test_when_every_slot_is_challenged_a_newcomer_is_told_busy_and_gets_in_once_one_frees(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)
    with live_server(min_nodes=1, max_nodes=1) as server:
        server._admission.room = 1
        holder = _challenged(server, "127.7.0.1")  # never evicted for the newcomer
        said: list[str] = []
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 10.0, secret=SECRET, say=said.append,
                              progress_every=0.0)
        try:
            with pytest.raises(TimeoutError, match="busy"):
                link.connect(_join("late"), time.monotonic() + 10, lambda: True)  # one try
            threading.Timer(0.3, holder.close).start()
            link.connect(_join("late"), time.monotonic() + 20, lambda: False)
            assert link.tries > 1 and any("busy" in line for line in said)
        finally:
            link.close()
            holder.close()


def test_a_source_that_failed_a_proof_holds_at_most_four_challenged_connections(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)
    with live_server(min_nodes=1, max_nodes=1) as server:
        honest = [_challenged(server, "127.8.0.1") for _ in range(6)]  # not suspect: no cap
        liar = _challenged(server, "127.8.0.2")
        liar.sendall(bytes(auth.HEADER))  # a wrong proof: its address is suspect now
        assert liar.recv(1) == b""
        held = [_challenged(server, "127.8.0.2") for _ in range(4)]
        fifth = socket.socket()
        fifth.bind(("127.8.0.2", 0))
        fifth.settimeout(5.0)
        fifth.connect(server.address[:2])
        fifth.sendall(auth.AgentHandshake(SECRET).hello)
        assert fifth.recv(64) == auth.BUSY
        for sock in [*honest, liar, *held, fifth]:
            sock.close()


def test_an_agent_started_before_its_rendezvous_waits_for_it_and_joins():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # free once closed: nobody listens there for a while
    link = RendezvousLink("127.0.0.1", "127.0.0.1", port, 10.0, secret=SECRET)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(_try(link, 20)), daemon=True)
    thread.start()
    wait_until(lambda: link.tries >= 2, what="a second try after 'connection refused'")
    settings = RendezvousSettings(job="job", min_nodes=1, max_nodes=1, node_timeout=10.0, rdzv_timeout=60.0,
                                  first_round_wait=0.0)
    server = RendezvousServer(settings, "127.0.0.1", port, secret=SECRET).start()
    try:
        thread.join(20)
        assert outcome == ["joined"] and server.member_names() == {"early"}
    finally:
        link.close()
        server.close()


def _try(link: RendezvousLink, patience: float) -> object:
    try:
        link.connect(_join("early"), time.monotonic() + patience, lambda: False)
        return "joined"
    except Exception as bad:  # noqa: BLE001 - the test looks at what came out
        return bad


def test_a_reset_during_the_handshake_is_tried_again_and_named_not_blamed_on_the_secret():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def reset_each() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                conn.recv(64)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a RST
                conn.close()

        threading.Thread(target=reset_each, daemon=True).start()
        link = RendezvousLink("127.0.0.1", "127.0.0.1", listener.getsockname()[1], 10.0, secret=SECRET)
        outcome = _try(link, 0.5)
    assert isinstance(outcome, TimeoutError) and "reset" in str(outcome) and "secret" not in str(outcome)
    assert link.tries > 1


def test_a_burst_of_strangers_during_a_running_job_costs_the_members_nothing_and_a_newcomer_gets_in(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)
    said: list[str] = []
    with live_server(said=said, min_nodes=8, max_nodes=9, node_timeout=10.0) as server:
        members = burst(server.address[1], [fleet_address(i) for i in range(8)], patience=20)
        try:
            assert all(isinstance(m, RendezvousLink) for m in members), [repr(m) for m in members]
            for index, member in enumerate(members):
                member.send(M.Ready(ports=[20000 + index]))
            wait_until(lambda: server.policy.round >= 0, what="the first round")
            stop = threading.Event()
            with _flood(server.address[1], [f"127.9.0.{i + 1}" for i in range(20)], stop) as opened:
                stalled = [_challenged(server, f"127.9.1.{i + 1}") for i in range(20)]  # hellos, never a proof
                wait_until(lambda: sum(opened) >= 80, what="the flood under way")
                newcomer = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 10.0, secret=SECRET,
                                          source=fleet_address(8))
                try:
                    newcomer.connect(_join("newcomer"), time.monotonic() + 20, lambda: False)
                    assert newcomer.tries == 1
                    assert len(server.member_names()) == 9 and not any("lost node" in line for line in said)
                finally:
                    newcomer.close()
                    for sock in stalled:
                        sock.close()
        finally:
            _close(members)
