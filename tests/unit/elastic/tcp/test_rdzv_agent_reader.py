"""The agent's reader thread on the join's path (issue 20, connect-to-welcome cost): it starts while the server
checks the join, reads nothing before the joining thread read the welcome, and ends without a word when no
welcome comes. A real RendezvousLink against a hand-driven server on loopback."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Iterator

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, exact_reader, server_handshake, wait_until
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import wire
from tfdist.launch.elastic.tcp.client import Refused, RendezvousLink

JOIN = dict(job="job", name="m", address="127.0.0.1", slots=1, node_rank=None,
            versions={"python": "3", "tfdist": "1", "tensorflow": "2"})


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rdzv-read" and t.is_alive()]


class HeldServer:
    """Proves the secret and reads the join, then does what the test says: welcome (then a round), or close."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.joined = threading.Event()
        self.answer = threading.Event()
        self.welcome = True
        self.conn: socket.socket | None = None
        self.session: auth.Session | None = None
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        self.conn = conn
        session = self.session = server_handshake(conn, SECRET)
        assert isinstance(M.decode(session.read_frame(exact_reader(conn))), M.Join)
        self.joined.set()
        self.answer.wait(30)
        if not self.welcome:
            conn.close()
            return
        conn.sendall(session.seal(M.encode(M.Welcome(node_id=7))))
        conn.sendall(session.seal(M.encode(M.Stop(round=0, graceful=True, reason="right after the welcome"))))

    def close(self) -> None:
        self.answer.set()
        self.listener.close()
        if self.conn is not None:
            self.conn.close()


def _connect_in_thread(link: RendezvousLink, give_up=lambda: False) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def connect() -> None:
        try:
            link.connect(dict(JOIN), time.monotonic() + 30, give_up)
            outcome["result"] = "joined"
        except Exception as bad:  # noqa: BLE001 - the test looks at what came out
            outcome["result"] = bad

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    return thread, outcome


def test_the_reader_starts_before_the_welcome_and_the_message_after_the_welcome_reaches_the_agent_in_order():
    server = HeldServer()
    before = set(_readers())
    link = RendezvousLink("127.0.0.1", "127.0.0.1", server.port, 30.0, secret=SECRET)
    try:
        thread, outcome = _connect_in_thread(link)
        assert server.joined.wait(10)
        # The server holds the welcome: the reader thread is already there (its start is off the welcome's path).
        wait_until(lambda: len(set(_readers()) - before) == 1, 5.0, "the agent's reader to start")
        assert thread.is_alive() and link.channel is None  # the joining thread still waits for the welcome
        server.answer.set()
        thread.join(10)
        assert outcome["result"] == "joined"
        # The welcome was read by the joining thread; the reader delivers what came after it, and only that.
        message = link.next_message(5.0)
        assert isinstance(message, M.Stop) and message.reason == "right after the welcome"
    finally:
        link.close()
        server.close()


def test_the_agents_first_message_after_the_welcome_goes_out_from_its_own_send_not_when_the_reader_runs(
        monkeypatch):
    """The joining thread releases the channel once it read the welcome: the agent's ready (sent at once) is
    written by that send. It waited, queued, until the reader thread ran and released it (on a loaded machine,
    milliseconds for each of a fleet's agents)."""
    hold = threading.Event()
    real = RendezvousLink._read
    monkeypatch.setattr(RendezvousLink, "_read", lambda self, *args: hold.wait(30) and real(self, *args))
    server = HeldServer()
    server.answer.set()
    link = RendezvousLink("127.0.0.1", "127.0.0.1", server.port, 30.0, secret=SECRET)
    try:
        link.connect(dict(JOIN), time.monotonic() + 30, lambda: False)
        assert link.send(M.Ready(ports=[20000]))
        assert server.conn is not None and server.session is not None
        server.conn.settimeout(5.0)
        assert isinstance(M.decode(server.session.read_frame(exact_reader(server.conn))), M.Ready)
    finally:
        hold.set()
        link.close()
        server.close()


def test_the_reader_ends_without_reading_when_the_server_closes_instead_of_welcoming():
    server = HeldServer()
    server.welcome = False
    before = set(_readers())
    link = RendezvousLink("127.0.0.1", "127.0.0.1", server.port, 30.0, secret=SECRET)
    try:
        stop = threading.Event()  # after the first try: a close before the welcome is tried again (issue 33)
        thread, outcome = _connect_in_thread(link, give_up=stop.is_set)
        assert server.joined.wait(10)
        wait_until(lambda: len(set(_readers()) - before) == 1, 5.0, "the agent's reader to start")
        (reader,) = set(_readers()) - before
        stop.set()
        server.answer.set()
        thread.join(10)
        assert isinstance(outcome["result"], TimeoutError), outcome
        assert "closed the connection before the welcome" in str(outcome["result"])
        reader.join(5.0)
        assert not reader.is_alive(), "the reader of a connection that was never welcomed still runs"
        assert link.channel is None
    finally:
        link.close()
        server.close()


@contextlib.contextmanager
def _held_channel() -> Iterator[tuple[wire.Channel, socket.socket, auth.Session]]:
    """An agent's held channel with keep-alives, the server's end of its socket and the server's session (fresh
    keys, as ``join_here`` gives); closed after."""
    mine, theirs = socket.socketpair()
    agent, server = auth.pair_sessions()
    channel = wire.Channel(mine, agent, send_timeout=5.0, keepalive=60.0, held=True)
    try:
        yield channel, theirs, server
    finally:
        channel.close()
        theirs.close()


def _received(theirs: socket.socket, peer: auth.Session) -> M.Message:
    theirs.settimeout(5.0)
    return M.decode(peer.read_frame(exact_reader(theirs)))


def test_closing_a_link_with_nothing_queued_starts_no_writer_just_to_end_it():
    # An agent that leaves right after its welcome: close() drains first; with nothing to send it must not start
    # the writer thread (about 0.1 ms and a thread join) only for that thread to end at once.
    with _held_channel() as (channel, _, _):
        channel.drain(1.0)
        assert channel._writer is None


def test_draining_still_sends_what_was_queued_before_closing():
    with _held_channel() as (channel, theirs, peer):
        assert channel.send(M.Stop(round=3, graceful=True, reason="bye"))
        channel.drain(5.0)
        assert channel._writer is None  # the small frame went out from the draining thread
        message = _received(theirs, peer)
        assert isinstance(message, M.Stop) and message.reason == "bye"


def test_a_message_sent_before_the_reader_releases_the_channel_starts_no_writer_on_the_senders_thread():
    # A message sent while the channel is held (before the welcome was read) is only queued (no thread start on
    # the sender's path); the release writes what was queued, in order.
    with _held_channel() as (channel, theirs, peer):
        assert channel.send(M.Stop(round=1, graceful=True, reason="first"))
        assert channel.send(M.Stop(round=2, graceful=True, reason="second"))
        assert channel._writer is None
        with pytest.raises(socket.timeout):
            theirs.settimeout(0.2)
            theirs.recv(1)  # held: nothing on the wire yet
        channel.release()
        assert channel._writer is None  # written by the releasing thread: the socket took both at once
        reasons = [_received(theirs, peer).reason for _ in range(2)]
        assert reasons == ["first", "second"]
