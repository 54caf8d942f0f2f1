"""The accept thread serves every connection's handshake, join and welcome (issue 20, handshake cost): no thread
start and no hand-off on a join's path, and it never waits on any one peer (non-blocking sockets, reads of at most
what the current step needs, a challenge that does not fit the send buffer at once closes that connection). The
member's own thread starts when the member first speaks. Real sockets on loopback."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from tests.unit.elastic.tcp.rdzv_peer import SECRET, VERSIONS, Peer, closed_without_a_word, live_server, wait_until
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import server as server_module
from tfdist.launch.elastic.tcp import wire
from tfdist.launch.elastic.tcp.admission import Admission
from tfdist.launch.elastic.tcp.client import RendezvousLink
from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings
from tfdist.launch.elastic.tcp.server import RendezvousServer


@contextlib.contextmanager
def _pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(client, accepted server end) over loopback TCP, both small-buffered; both closed on the way out."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # the kernel's minimum: a tiny window
        client.connect(listener.getsockname())
        accepted, _ = listener.accept()
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
    with client, accepted:
        yield client, accepted


@contextlib.contextmanager
def _admission() -> Iterator[Admission]:
    """An accept loop that is not running: its steps are driven by the test."""
    def nothing() -> tuple[socket.socket, tuple]:
        raise BlockingIOError()

    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield Admission(nothing, listener, SECRET, admitted=lambda *_: None, say=lambda _m: None,
                        closing=threading.Event())


def _fill_send_buffer(sock: socket.socket) -> None:
    """Write until nothing more fits, again and again until the peer's window is closed (it never reads) and our
    buffer stays full: a pass where not one byte fits."""
    sock.setblocking(False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sent = 0
        for size in (4096, 1):
            try:
                while True:
                    sent += sock.send(b"x" * size)
            except BlockingIOError:
                pass
        if sent == 0:
            break
        time.sleep(0.05)  # the peer's acknowledgements free room until its window closes
    sock.setblocking(True)


class _Short:
    """A socket whose sends take ``takes`` bytes at most, and that records its timeout at each send."""

    def __init__(self, sock: socket.socket, takes: int) -> None:
        self._sock, self._takes = sock, takes
        self.timeouts: list[float | None] = []

    def send(self, data: bytes) -> int:
        self.timeouts.append(self._sock.gettimeout())
        return self._sock.send(data[: self._takes])

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


def _hello() -> bytes:
    return auth.AgentHandshake(SECRET).hello


def _in_thread(function) -> None:
    """Run ``function`` on a thread; a call that blocked would leave it alive after the join's timeout."""
    thread = threading.Thread(target=function, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the accept loop waited on a peer"


def _a_real_agent_joins(server) -> None:
    """A real agent's link connects to ``server`` and is welcomed (then leaves)."""
    link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 2.0, secret=SECRET)
    link.connect(dict(job="job", name="m", address="127.0.0.1", slots=1, node_rank=None,
                      versions={"python": "3", "tfdist": "1", "tensorflow": "2"}),
                 deadline=time.monotonic() + 20, give_up=lambda: False)
    assert link.channel is not None
    link.close()


def test_a_challenge_that_does_not_fit_the_send_buffer_closes_that_connection_at_once():
    with _pair() as (client, accepted), _admission() as admission:
        _fill_send_buffer(accepted)  # a peer with a zero receive window and our buffer full
        client.sendall(_hello())
        _in_thread(lambda: admission._admit(accepted, "127.0.0.1"))
        assert accepted.fileno() == -1 and not admission.pending and not admission.waiting


def test_a_challenge_sent_only_in_part_closes_the_connection_and_the_send_never_waits():
    with _pair() as (client, accepted), _admission() as admission:
        client.sendall(_hello())
        short = _Short(accepted, takes=10)
        _in_thread(lambda: admission._admit(short, "127.0.0.1"))  # type: ignore[arg-type]
        assert short.timeouts == [0.0]  # non-blocking
        assert accepted.fileno() == -1 and not admission.pending and not admission.waiting


def test_a_hello_in_parts_is_kept_and_answered_once_complete():
    with _pair() as (client, accepted), _admission() as admission:
        agent = auth.AgentHandshake(SECRET)
        client.sendall(agent.hello[:10])
        _in_thread(lambda: admission._admit(accepted, "127.0.0.1"))
        assert admission.pending == {"127.0.0.1": 1}  # waiting for the rest, nothing answered
        client.sendall(agent.hello[10:])
        shake = admission.waiting[accepted]
        _in_thread(lambda: admission._step(shake))
        client.settimeout(5)
        agent.finish(auth.receive_exactly(client, auth.ANSWER, time.monotonic() + 5))  # it proved the secret


def _trickle(sock: socket.socket, data: bytes) -> None:
    for i in range(0, len(data), 7):  # a few bytes at a time: the loop sees every step in parts
        sock.sendall(data[i:i + 7])
        time.sleep(0.002)


def _handshake_by_hand(sock: socket.socket, secret: bytes = SECRET) -> auth.Session:
    agent = auth.AgentHandshake(secret)
    _trickle(sock, agent.hello)
    return agent.finish(auth.receive_exactly(sock, auth.ANSWER, time.monotonic() + 5))


def test_a_member_whose_handshake_and_join_arrive_a_few_bytes_at_a_time_joins():
    with live_server() as server:
        sock = socket.create_connection(server.address[:2], timeout=5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        session = _handshake_by_hand(sock)
        join = M.encode(M.Join(job="job", name="slow", address="127.0.0.1", slots=1, versions=dict(VERSIONS)))
        _trickle(sock, session.seal(join))
        channel = wire.Channel(sock, session, send_timeout=5.0)
        assert isinstance(channel.receive(), M.Welcome)
        channel.close()


def test_a_join_that_fails_its_frame_check_is_closed_without_a_word():
    said: list[str] = []
    with live_server(said=said) as server:
        sock = socket.create_connection(server.address[:2], timeout=5)
        session = _handshake_by_hand(sock)
        frame = bytearray(session.seal(M.encode(M.Join(job="job", name="x", address="127.0.0.1", slots=1))))
        frame[-1] ^= 1  # a changed tag: its length decrypted (the secret proved), its body does not
        sock.sendall(bytes(frame))
        assert closed_without_a_word(sock)
        sock.close()
        assert not any("joined" in line for line in said)


def test_a_hello_already_there_is_answered_by_the_accept_loop_and_the_member_joins(monkeypatch):
    answered: list[str] = []
    real = auth.answer_hello

    def recording(secret, hello):
        answered.append(threading.current_thread().name)
        return real(secret, hello)

    monkeypatch.setattr(auth, "answer_hello", recording)
    settings = RendezvousSettings(job="job", min_nodes=1, max_nodes=2, node_timeout=2.0, rdzv_timeout=60.0,
                                  first_round_wait=0.0)
    server = RendezvousServer(settings, "127.0.0.1", 0, secret=SECRET)
    try:
        # Connected, and the hello sent, before the server accepts anything: it is there when the loop accepts.
        sock = socket.create_connection(server.address[:2], timeout=5)
        agent = auth.AgentHandshake(SECRET)
        sock.sendall(agent.hello)
        server.start()
        session = agent.finish(auth.receive_exactly(sock, auth.ANSWER, deadline=time.monotonic() + 10))
        assert answered == ["rdzv-accept"]
        sock.sendall(session.seal(b'{"type":"join"}')[: auth.HEADER])  # the join's length: the agent's proof
        wait_until(lambda: not server._pending and not server._waiting, what="the slot freed after the proof")
        sock.close()
        # And a real agent still joins through the same loop.
        _a_real_agent_joins(server)
    finally:
        server.close()


def _member_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "rdzv-conn"}


def test_the_welcome_is_written_by_the_accept_thread_and_the_members_thread_starts_when_it_first_speaks(
        monkeypatch):
    writers: list[tuple[str, str]] = []
    real = wire.Channel.send_now

    def recording(self, message):
        writers.append((threading.current_thread().name, type(message).__name__))
        return real(self, message)

    monkeypatch.setattr(wire.Channel, "send_now", recording)
    with live_server(min_nodes=2, max_nodes=2) as server:
        before = _member_threads()
        peer = Peer(server)
        assert isinstance(peer.join(), M.Welcome)
        assert writers == [("rdzv-accept", "Welcome")]
        assert not _member_threads() - before  # none started on the join's path
        peer.send(M.Ready(ports=[20000]))
        wait_until(lambda: _member_threads() - before, what="the member's thread")
        peer.close()


def test_a_members_thread_is_started_off_the_accept_thread(monkeypatch):
    """Thread.start waits until the new thread runs: on the accept thread that wait (about 0.5 ms a member on a
    loaded machine) was time in which no handshake was served; rdzv-start starts them instead."""
    starters: list[tuple[str, str]] = []
    real = threading.Thread.start

    def recording(self):
        starters.append((threading.current_thread().name, self.name))
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", recording)
    with live_server(min_nodes=2, max_nodes=2) as server:
        before = _member_threads()
        peers = [Peer(server) for _ in range(2)]
        for i, peer in enumerate(peers):
            assert isinstance(peer.join(f"m{i}"), M.Welcome)
            peer.send(M.Ready(ports=[20000 + i]))
        wait_until(lambda: len(_member_threads() - before) == 2, what="the members' threads")
        assert isinstance(peers[0].receive((M.Round,)), M.Round)  # served: the two readies made a round
        assert [who for who, what in starters if what == "rdzv-conn"] == ["rdzv-start", "rdzv-start"]
        for peer in peers:
            peer.close()


def test_accepting_a_connection_does_not_go_over_every_parked_member():
    """A parked member closed by another thread is woken before a new socket reuses its descriptor, by one look-up:
    the sweep of every parked member that each accept made was quadratic in a burst of a thousand."""
    looked: list[int] = []
    woken: list[tuple[int, bool]] = []
    with _admission() as admission, contextlib.ExitStack() as stack:
        pairs = [stack.enter_context(_pair()) for _ in range(20)]
        for i, (_client, member) in enumerate(pairs):
            admission.park(member, lambda i=i: looked.append(i) or False, lambda gone, i=i: woken.append((i, gone)))
        looked.clear()
        for _ in range(5):
            client, accepted = stack.enter_context(_pair())
            admission._admit(accepted, "127.0.0.1")
        assert looked == [] and woken == []  # before: 20 looks per accepted connection
        # Another thread closes member 3; a new connection reuses its descriptor: member 3 is woken as gone first.
        listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        stale = pairs[3][1]
        fd = stale.fileno()
        stale.close()
        again = stack.enter_context(socket.socket())
        assert again.fileno() == fd  # the lowest free descriptor
        again.connect(listener.getsockname())
        stack.enter_context(listener.accept()[0])
        admission._admit(again, "127.0.0.1")
        assert woken == [(3, True)] and again in admission.waiting


def test_a_welcomed_member_that_never_speaks_is_lost_at_its_keepalive_deadline_and_others_still_join():
    said: list[str] = []
    with live_server(said=said, node_timeout=0.5, min_nodes=3, max_nodes=4) as server:
        silent = Peer(server)
        assert isinstance(silent.join("silent"), M.Welcome)
        wait_until(lambda: any("no keep-alive" in line for line in said), what="the silent member lost")
        assert silent.receive() is None  # its connection was closed
        # Its descriptor is free again: new connections (which may reuse it) are served as before.
        for name in ("a", "b", "c"):
            peer = Peer(server)
            assert isinstance(peer.join(name), M.Welcome)
            peer.close()


def test_a_wrong_hello_already_there_is_closed_by_the_accept_loop_without_a_word_and_frees_its_slot():
    said: list[str] = []
    settings = RendezvousSettings(job="job", min_nodes=1, max_nodes=2, node_timeout=2.0, rdzv_timeout=60.0,
                                  first_round_wait=0.0)
    server = RendezvousServer(settings, "127.0.0.1", 0, secret=SECRET, say=said.append)
    try:
        sock = socket.create_connection(server.address[:2], timeout=5)
        sock.sendall(b"GET / HTTP/1.1\r\n".ljust(auth.HELLO, b"x"))  # all read: closing sends no reset
        server.start()
        assert sock.recv(1024) == b""  # closed, nothing said
        wait_until(lambda: not server._pending and not server._waiting, what="the slot freed")
        assert said == []  # a stranger is not worth a line on the operator's terminal
    finally:
        sock.close()
        server.close()


def test_strangers_that_send_a_hello_and_never_read_do_not_hold_up_the_accept_loop():
    with live_server() as server:
        strangers = []
        for _ in range(server_module.PENDING_PER_SOURCE - 1):  # one slot left for the agent
            stranger = socket.socket()
            stranger.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            stranger.connect(server.address[:2])
            stranger.sendall(_hello())
            strangers.append(stranger)
        try:
            _a_real_agent_joins(server)
        finally:
            for stranger in strangers:
                stranger.close()


def test_a_member_that_leaves_right_after_its_welcome_is_lost_without_a_thread_started_for_it():
    said: list[str] = []
    with live_server(said=said, min_nodes=2, max_nodes=2) as server:
        before = _member_threads()
        peer = Peer(server)
        assert isinstance(peer.join("brief"), M.Welcome)
        peer.close()
        wait_until(lambda: any("lost node 1: its agent closed the connection" in line for line in said),
                   what="the loss reported")
        assert not _member_threads() - before
        assert not server.policy.nodes
