"""The authenticated join's path (issue 20, handshake cost): one write per frame, the join in the same write as the
agent's proof, the welcome before anything queued, TCP_NODELAY on both ends, keep-alives from the writer, and a
bounded wait for the welcome. Real sockets on loopback."""
from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, exact_reader, live_server, server_handshake, wait_until
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import wire
from tfdist.launch.elastic.tcp.client import RendezvousLink

JOIN = dict(job="job", name="m", address="127.0.0.1", slots=1, node_rank=None,
            versions={"python": "3", "tfdist": "1", "tensorflow": "2"})


class Recording:
    """A socket that records each sendall or send (what one write of the caller put on the wire)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._sock.sendall(data)

    def send(self, data: bytes, flags: int = 0) -> int:
        sent = self._sock.send(data, flags)
        self.writes.append(bytes(data[:sent]))
        return sent

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


def _sessions(first: bytes | None = None):
    agent_sock, server_sock = socket.socketpair()
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(session=server_handshake(server_sock, SECRET)))
    thread.start()
    recording = Recording(agent_sock)
    agent = auth.agent_handshake(recording, SECRET, first=first)  # type: ignore[arg-type]
    thread.join(10)
    return recording, server_sock, agent, result["session"]


def test_the_join_goes_in_the_same_write_as_the_agents_proof_and_the_server_reads_it_after_the_proof():
    recording, server_sock, _agent, server = _sessions(first=b'{"type":"join"}')
    assert len(recording.writes) == 2  # the hello, then the join (its proof): no third write, no extra trip
    assert recording.writes[0][: len(auth.MAGIC)] == auth.MAGIC and len(recording.writes[0]) == auth.HELLO
    assert len(recording.writes[1]) == auth.HEADER + auth.body_size(len(b'{"type":"join"}'))
    assert b"join" not in recording.writes[1]  # encrypted
    assert server.read_frame(exact_reader(server_sock)) == b'{"type":"join"}'


def test_without_a_first_message_the_agent_writes_only_its_hello():
    recording, _server_sock, _agent, _server = _sessions()
    assert [len(w) for w in recording.writes] == [auth.HELLO]  # its first frame, whenever it comes, proves it


def test_a_server_that_cannot_prove_the_secret_never_gets_the_join():
    agent_sock, server_sock = socket.socketpair()
    outcome: dict = {}

    def agent() -> None:
        try:
            auth.agent_handshake(agent_sock, SECRET, first=b'{"type":"join","job":"secret-job"}')
        except auth.AuthError as bad:
            outcome["error"] = bad
        agent_sock.close()

    thread = threading.Thread(target=agent)
    thread.start()
    server_sock.settimeout(5)
    assert len(server_sock.recv(auth.HELLO)) == auth.HELLO
    server_sock.sendall(bytes(auth.ANSWER))  # an ephemeral key and a tag made without the secret
    rest = b""
    while chunk := server_sock.recv(1 << 16):
        rest += chunk
    thread.join(5)
    assert isinstance(outcome.get("error"), auth.AuthError) and rest == b""  # neither its proof nor the join


def test_send_now_writes_one_frame_in_one_write_ahead_of_what_was_queued_while_held(monkeypatch):
    recording, server_sock, agent, server = _sessions()
    # The server's side of a connection: held, a keep-alive queued before the welcome is written.
    channel = wire.Channel(Recording(server_sock), server, send_timeout=5.0, held=True)  # type: ignore[arg-type]
    real_write = os.write

    def write(fd: int, data: bytes) -> int:  # the direct send's plain write (wire._send_without_waiting)
        sent = real_write(fd, data)
        if fd == server_sock.fileno():
            channel.sock.writes.append(bytes(data[:sent]))
        return sent

    monkeypatch.setattr(wire.os, "write", write)
    assert channel.send(M.Ping())
    assert channel._writer is None  # held: no writer thread yet, nothing on the wire
    assert channel.send_now(M.Welcome(node_id=7))
    reader = wire.Channel(recording._sock, agent, send_timeout=5.0)
    assert reader.receive() == M.Welcome(node_id=7)
    assert reader.receive() == M.Ping()  # the queued keep-alive, after the welcome
    writes = channel.sock.writes
    assert len(writes) == 2  # one write per frame: the whole frame (sealed length, sealed payload) each time
    for write, message in zip(writes, (M.Welcome(node_id=7), M.Ping())):
        assert len(write) == auth.HEADER + auth.body_size(len(M.encode(message))) and M.encode(message) not in write
    channel.close()
    reader.close()


def test_a_small_message_goes_out_from_the_senders_thread_and_starts_no_writer():
    recording, server_sock, agent, server = _sessions()
    channel = wire.Channel(server_sock, server, send_timeout=5.0)
    assert channel.send(M.Ping()) and channel.send(M.Stop(round=3, graceful=True, reason="why"))
    assert channel._writer is None  # a server's member with a few small messages costs no writer thread
    reader = wire.Channel(recording._sock, agent, send_timeout=5.0)
    assert reader.receive() == M.Ping()
    assert reader.receive() == M.Stop(round=3, graceful=True, reason="why")
    channel.close()
    reader.close()


def test_what_the_socket_cannot_take_now_goes_out_through_a_writer_in_order():
    recording, server_sock, agent, server = _sessions()
    server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    recording._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    channel = wire.Channel(server_sock, server, send_timeout=5.0)
    sent = [M.Finish(status=k, report=f"{k}" * (M.MAX_REPORT // 2)) for k in range(8)]  # far over the buffers
    assert all(channel.send(message) for message in sent)
    assert channel._writer is not None  # started for the frame that did not fit, and what was queued after it
    reader = wire.Channel(recording._sock, agent, send_timeout=5.0)
    assert [reader.receive() for _ in sent] == sent  # whole, in order, every MAC and sequence number right
    channel.close()
    reader.close()


def test_the_reader_sends_keep_alives_while_it_waits_none_while_held_and_with_no_writer_thread():
    recording, server_sock, agent, server = _sessions()
    channel = wire.Channel(recording._sock, agent, send_timeout=5.0, keepalive=0.05, held=True)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(channel.receive()), daemon=True)
    reader.start()  # the agent's reader, waiting for a message
    server_sock.settimeout(0.3)
    with pytest.raises(socket.timeout):
        server_sock.recv(1)  # held: not even a keep-alive
    channel.release()
    peer = wire.Channel(server_sock, server, send_timeout=5.0)
    assert [peer.receive(), peer.receive(), peer.receive()] == [M.Ping()] * 3  # one per 0.05 s of silence
    assert channel._writer is None  # written by the waiting reader itself
    assert peer.send(M.Stop(round=1, graceful=True, reason="r"))
    reader.join(5)
    assert got == [M.Stop(round=1, graceful=True, reason="r")]  # the reader still reads between keep-alives
    channel.close()
    peer.close()


def test_both_ends_of_a_member_connection_set_tcp_nodelay():
    with live_server(min_nodes=5, max_nodes=5) as server:
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 2.0, secret=SECRET)
        link.connect(dict(JOIN), time.monotonic() + 10, lambda: False)
        try:
            wait_until(lambda: len(server._channels) == 1, what="the server to register the member")
            (server_channel,) = server._channels.values()
            for sock in (link.channel.sock, server_channel.sock):
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            link.close()


def test_the_agent_has_no_thread_of_its_own_for_keep_alives():
    with live_server(min_nodes=5, max_nodes=5, node_timeout=0.5) as server:
        before = set(threading.enumerate())
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 0.5, secret=SECRET)
        link.connect(dict(JOIN), time.monotonic() + 10, lambda: False)
        try:
            # The reader sends them while it waits: for four node timeouts the agent stays a member.
            until = time.monotonic() + 2.0
            while time.monotonic() < until:
                assert len(server._channels) == 1, "the member was lost: no keep-alives"
                time.sleep(0.05)
            new = [t.name for t in set(threading.enumerate()) - before]
            assert "rdzv-ping" not in new and "rdzv-agent-send" not in new and new.count("rdzv-read") == 1
        finally:
            link.close()


def test_a_server_that_proves_the_secret_but_never_welcomes_does_not_hold_the_agent_forever():
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def prove_then_say_nothing() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        server_handshake(conn, SECRET)  # proves the secret, reads nothing more, never answers the join

    threading.Thread(target=prove_then_say_nothing, daemon=True).start()
    link = RendezvousLink("127.0.0.1", "127.0.0.1", listener.getsockname()[1], 0.5, secret=SECRET)
    outcome: dict = {}

    def connect() -> None:
        try:
            link.connect(dict(JOIN), time.monotonic() + 60, lambda: True)  # one try: no second connection
            outcome["result"] = "joined"
        except Exception as bad:  # noqa: BLE001 - the test looks at what came out
            outcome["result"] = bad

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(30)  # the agent waits max(node_timeout, 5 s) for the welcome; before the fix it waited forever
    listener.close()
    for conn in held:
        conn.close()
    assert not thread.is_alive(), "the agent still waits for a welcome that never comes"
    assert isinstance(outcome["result"], TimeoutError) and "no answer to the join" in str(outcome["result"])


def test_every_connection_has_keys_of_its_own_one_per_direction():
    _, server_one_sock, agent_one, server_one = _sessions()
    _, server_two_sock, agent_two, server_two = _sessions()
    frame = agent_one.seal(b"ping")
    assert server_one.open_body(server_one.open_header(frame[: auth.HEADER]), frame[auth.HEADER:]) == b"ping"
    for wrong in (server_two, agent_two):  # another connection with the same secret, or the other direction
        with pytest.raises(auth.AuthError):
            wrong.open_header(frame[: auth.HEADER])
    server_one_sock.close()
    server_two_sock.close()


def test_a_members_round_and_keep_alives_go_out_from_the_tick_thread_with_no_writer_thread():
    with live_server(min_nodes=1, max_nodes=5, node_timeout=0.4) as server:  # a keep-alive every 0.1 s
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 0.4, secret=SECRET)
        link.connect(dict(JOIN), time.monotonic() + 10, lambda: False)
        try:
            wait_until(lambda: len(server._channels) == 1, what="the server to register the member")
            (channel,) = server._channels.values()
            link.send(M.Ready(ports=[20000]))
            kinds: list[str] = []
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                message = link.next_message(0.05)  # raises Lost if the keep-alives stopped
                if message is not None:
                    kinds.append(message.TYPE)
            assert "round" in kinds and kinds.count("ping") >= 3
            # Small messages into a socket that takes them: written by the tick thread itself, one non-blocking
            # send each; no thread was started to write them (before: one writer thread per member).
            assert channel._writer is None
            assert not [t for t in threading.enumerate() if t.name.startswith("rdzv-") and t.name.endswith("-send")
                        and t is not link.channel._writer]
        finally:
            link.close()


def test_what_the_agent_sends_right_after_its_welcome_arrives_in_order_with_no_writer_thread():
    with live_server(min_nodes=5, max_nodes=5, node_timeout=60.0) as server:
        link = RendezvousLink("127.0.0.1", "127.0.0.1", server.address[1], 60.0, secret=SECRET)
        link.connect(dict(JOIN), time.monotonic() + 10, lambda: False)
        try:
            # At once: queued while the reader releases the channel (then written by the releasing reader), or
            # written by this thread after it; either way in order, and no thread is started to write them.
            assert link.send(M.Ready(ports=[20000]))
            assert link.send(M.Training(round=0))
            wait_until(lambda: any(n.ready for n in server.policy.nodes.values()), 10.0, "the ready to arrive")
            assert link.channel._writer is None
        finally:
            link.close()
