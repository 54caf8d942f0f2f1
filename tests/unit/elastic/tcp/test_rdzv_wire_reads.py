"""The wire's system calls per frame, counted (never timed): a reader takes a small frame's header and body, and
often several frames, in one read; a direct send is one write, with no poll before it. Real sockets, real Noise
sessions (``test_rdzv_handshake_path``'s pair), the counting wrapped around them."""
from __future__ import annotations

import os
import socket
import threading

import pytest

from tests.unit.elastic.tcp.test_rdzv_handshake_path import _sessions
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import wire

FRAMES = 20


class Counting:
    """A socket whose reads and sends are counted (reads through ``os.read`` are counted by the test's patch)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.calls = 0

    def recv(self, size: int) -> bytes:
        self.calls += 1
        return self._sock.recv(size)

    def send(self, data: bytes, flags: int = 0) -> int:
        self.calls += 1
        return self._sock.send(data, flags)

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


def _count_os(monkeypatch, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(os, name)

    def counted(fd: int, arg):
        calls.append(fd)
        return real(fd, arg)

    monkeypatch.setattr(os, name, counted)
    return calls


@pytest.mark.parametrize("keepalive", [None, 30.0], ids=["server-member", "agent"])
def test_frames_waiting_together_are_read_in_one_read_not_two_per_frame(monkeypatch, keepalive):
    recording, server_sock, agent, server = _sessions()
    sender = wire.Channel(server_sock, server, send_timeout=5.0)
    for i in range(FRAMES):
        assert sender.send(M.Welcome(node_id=i))
    reads = _count_os(monkeypatch, "read")
    counting = Counting(recording._sock)
    reader = wire.Channel(counting, agent, send_timeout=5.0, keepalive=keepalive)  # type: ignore[arg-type]
    assert [reader.receive() for _ in range(FRAMES)] == [M.Welcome(node_id=i) for i in range(FRAMES)]
    assert counting.calls + len(reads) <= 2  # one read per header and one per body was 2 x FRAMES
    assert len(reader._inbox) == 0
    sender.close()
    assert reader.receive() is None  # a close between frames is still a close, after the buffered frames
    reader.close()


def test_a_frame_bigger_than_a_read_ahead_arrives_whole_and_its_checks_still_hold():
    recording, server_sock, agent, server = _sessions()
    reader = wire.Channel(recording._sock, agent, send_timeout=5.0)
    big = b"x" * (1 << 18)  # a raw frame far past the read-ahead: read whole, then checked as a message
    frames = server.seal(M.encode(M.Ping())) + server.seal(big) + server.seal(M.encode(M.Ping()))
    writer = threading.Thread(target=server_sock.sendall, args=(frames,), daemon=True)  # more than a socket holds
    writer.start()
    assert reader.receive() == M.Ping()
    with pytest.raises(M.ProtocolError):
        reader.receive()
    assert reader.receive() == M.Ping()  # the frame after it was not eaten by the big one's reads
    writer.join(5)
    server_sock.sendall(server.seal(M.encode(M.Ping()))[:-1])
    server_sock.shutdown(socket.SHUT_WR)
    with pytest.raises(M.ProtocolError):  # a close in the middle of a frame, with bytes of it buffered
        reader.receive()
    reader.close()


def test_a_direct_send_is_one_write_and_no_poll(monkeypatch):
    recording, server_sock, agent, server = _sessions()
    writes = _count_os(monkeypatch, "write")
    counting = Counting(server_sock)
    sender = wire.Channel(counting, server, send_timeout=5.0)  # type: ignore[arg-type]
    for i in range(FRAMES):
        assert sender.send(M.Welcome(node_id=i))
    assert sender._writer is None
    assert counting.calls == 0 and len(writes) == FRAMES  # a poll, then Python's own poll and send, before
    reader = wire.Channel(recording._sock, agent, send_timeout=5.0)
    assert [reader.receive() for _ in range(FRAMES)] == [M.Welcome(node_id=i) for i in range(FRAMES)]
    sender.close()
    reader.close()
