"""The accept loop answers a hello that has already arrived (issue 20, handshake cost): the connection thread's
start then overlaps the challenge's trip to the agent. It never waits: a hello not yet there is left to the thread,
and a challenge that does not fit the send buffer at once closes that connection. Real sockets on loopback."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from tests.unit.rdzv_peer import SECRET, live_server, wait_until
from tfdist.launch.elastic import auth
from tfdist.launch.elastic import server as server_module
from tfdist.launch.elastic.client import RendezvousLink
from tfdist.launch.elastic.membership import RendezvousSettings
from tfdist.launch.elastic.server import RendezvousServer


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
    return auth.MAGIC + bytes(auth.NONCE)


def _call_in_thread(function) -> dict:
    """Run ``function`` on a thread; a call that blocked would leave it alive after the join's timeout."""
    outcome: dict = {}

    def call() -> None:
        try:
            outcome["value"] = function()
        except (auth.AuthError, OSError) as bad:
            outcome["error"] = bad

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "challenge_now waited"
    return outcome


def test_a_challenge_that_does_not_fit_the_send_buffer_fails_at_once_instead_of_waiting():
    with _pair() as (client, accepted):
        _fill_send_buffer(accepted)  # a peer with a zero receive window and our buffer full
        client.sendall(_hello())
        outcome = _call_in_thread(lambda: auth.challenge_now(accepted, SECRET))
        assert "error" in outcome and "value" not in outcome


def test_a_challenge_sent_only_in_part_closes_the_connection_and_the_send_never_waits():
    with _pair() as (client, accepted):
        client.sendall(_hello())
        short = _Short(accepted, takes=10)
        assert "error" in _call_in_thread(lambda: auth.challenge_now(short, SECRET))  # type: ignore[arg-type]
        assert short.timeouts == [0.0]  # non-blocking
        assert accepted.gettimeout() is None  # blocking again for the connection thread


def test_a_hello_not_yet_there_is_left_to_the_connection_thread_unread():
    with _pair() as (client, accepted):
        client.sendall(_hello()[:10])  # part of it
        assert _call_in_thread(lambda: auth.challenge_now(accepted, SECRET)) == {"value": None}
        client.sendall(_hello()[10:])
        accepted.settimeout(5)
        assert accepted.recv(auth.HELLO, socket.MSG_WAITALL) == _hello()  # nothing was consumed


def test_a_hello_already_there_is_answered_by_the_accept_loop_and_the_member_joins(monkeypatch):
    answered: list[tuple[str, object]] = []
    real = auth.challenge_now

    def recording(sock, secret):
        result = real(sock, secret)
        answered.append((threading.current_thread().name, result))
        return result

    monkeypatch.setattr(auth, "challenge_now", recording)
    settings = RendezvousSettings(job="job", min_nodes=1, max_nodes=2, node_timeout=2.0, rdzv_timeout=60.0,
                                  first_round_wait=0.0)
    server = RendezvousServer(settings, "127.0.0.1", 0, secret=SECRET)
    try:
        # Connected, and the hello sent, before the server accepts anything: it is there when the loop accepts.
        sock = socket.create_connection(server.address[:2], timeout=5)
        agent_nonce = bytes(range(auth.NONCE))
        sock.sendall(auth.MAGIC + agent_nonce)
        server.start()
        answer = auth.receive_exactly(sock, auth.NONCE + auth.MAC, deadline=time.monotonic() + 10)
        wait_until(lambda: answered, what="the accept loop's answer")
        assert answered[0][0] == "rdzv-accept" and answered[0][1] is not None
        server_nonce = answer[: auth.NONCE]
        assert answer[auth.NONCE:] == auth._proof(SECRET, b"server", agent_nonce, server_nonce)
        sock.sendall(auth._proof(SECRET, b"agent", agent_nonce, server_nonce))
        wait_until(lambda: not server._pending and not server._waiting, what="the slot freed after the proof")
        sock.close()
        # And a real agent still joins through the same loop.
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 2.0, secret=SECRET)
        link.connect(dict(job="job", name="m", address="127.0.0.1", slots=1, node_rank=None,
                          versions={"python": "3", "tfdist": "1", "tensorflow": "2"}),
                     deadline=time.monotonic() + 20, give_up=lambda: False)
        assert link.channel is not None
        link.close()
    finally:
        server.close()


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
            link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 2.0, secret=SECRET)
            link.connect(dict(job="job", name="m", address="127.0.0.1", slots=1, node_rank=None,
                              versions={"python": "3", "tfdist": "1", "tensorflow": "2"}),
                         deadline=time.monotonic() + 20, give_up=lambda: False)
            assert link.channel is not None
            link.close()
        finally:
            for stranger in strangers:
                stranger.close()
