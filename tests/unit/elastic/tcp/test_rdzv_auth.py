"""The rendezvous' Noise handshake and encrypted frames (elastic/tcp/auth.py) over real socket pairs."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import exact_reader, server_handshake
from tfdist.launch.elastic.tcp import auth

SECRET = bytes(range(32))


def _pair():
    a, b = socket.socketpair()
    return a, b


def _run_server(sock, secret, timeout=auth.HANDSHAKE_S):
    result: dict = {}

    def serve():
        try:
            result["session"] = server_handshake(sock, secret, timeout)
        except (auth.AuthError, OSError) as bad:
            result["error"] = bad

    thread = threading.Thread(target=serve)
    thread.start()
    return thread, result


def test_both_sides_prove_the_secret_and_frames_go_both_ways():
    agent_sock, server_sock = _pair()
    thread, result = _run_server(server_sock, SECRET)
    agent = auth.agent_handshake(agent_sock, SECRET, first=b'{"type":"join"}')
    thread.join()
    server = result["session"]
    assert server.read_frame(exact_reader(server_sock)) == b'{"type":"join"}'
    server_sock.sendall(server.seal(b"welcome") + server.seal(b"round"))
    read = exact_reader(agent_sock)
    assert [agent.read_frame(read), agent.read_frame(read)] == [b"welcome", b"round"]


def test_an_agent_with_the_wrong_secret_stops_at_the_servers_proof_and_says_nothing_more():
    agent_sock, server_sock = _pair()
    thread, result = _run_server(server_sock, SECRET)
    with pytest.raises(auth.AuthError, match="did not prove"):
        # the wrong secret cannot check the server's proof, so the agent stops first: its join never goes out
        auth.agent_handshake(agent_sock, b"x" * 32, first=b'{"type":"join"}')
    agent_sock.close()
    thread.join()
    server_sock.settimeout(5)
    assert server_sock.recv(100) == b""  # nothing after the hello


def test_a_server_without_the_secret_gets_no_proof_from_the_agent():
    agent_sock, squatter = _pair()
    seen = []

    def squat():
        seen.append(squatter.recv(1024))
        squatter.sendall(b"\x01" * auth.ANSWER)
        squatter.settimeout(1.0)
        try:
            seen.append(squatter.recv(1024))
        except socket.timeout:
            seen.append(b"<nothing>")

    thread = threading.Thread(target=squat)
    thread.start()
    with pytest.raises(auth.AuthError, match="did not prove"):
        auth.agent_handshake(agent_sock, SECRET, first=b'{"type":"join"}')
    agent_sock.close()
    thread.join()
    assert len(seen[0]) == auth.HELLO and seen[1] in (b"", b"<nothing>")


def test_a_server_that_echoes_the_agents_bytes_proves_nothing():
    agent_sock, mirror = _pair()
    thread = threading.Thread(target=lambda: mirror.sendall(mirror.recv(auth.HELLO)[len(auth.MAGIC):]))
    thread.start()
    with pytest.raises(auth.AuthError):
        auth.agent_handshake(agent_sock, SECRET)
    thread.join()


def test_a_recorded_handshake_replayed_to_a_new_connection_fails():
    agent_sock, server_sock = _pair()
    recorded = []
    original_sendall = socket.socket.sendall

    class Recording(socket.socket):
        def sendall(self, data, *args):  # noqa: D102
            recorded.append(bytes(data))
            return original_sendall(self, data, *args)

    agent_sock = Recording(fileno=agent_sock.detach())
    thread, result = _run_server(server_sock, SECRET)
    auth.agent_handshake(agent_sock, SECRET, first=b'{"type":"join"}')
    thread.join()
    assert "session" in result and len(recorded) == 2
    replay, server_sock = _pair()
    thread, result = _run_server(server_sock, SECRET)
    replay.sendall(recorded[0])
    assert len(auth.receive_exactly(replay, auth.ANSWER, time.monotonic() + 5)) == auth.ANSWER
    replay.sendall(recorded[1])  # the join, sealed under the first connection's keys
    thread.join()
    with pytest.raises(auth.AuthError):
        result["session"].read_frame(exact_reader(server_sock))


def test_wrong_magic_is_refused():
    stranger, server_sock = _pair()
    thread, result = _run_server(server_sock, SECRET)
    stranger.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".ljust(auth.HELLO, b"\0"))  # a whole hello's worth
    thread.join()
    assert isinstance(result["error"], auth.AuthError)
    server_sock.close()  # what the server's caller does
    stranger.settimeout(1.0)
    try:
        answer = stranger.recv(100)
    except ConnectionResetError:  # closed with the stranger's unread bytes: a reset, still no answer
        answer = b""
    assert answer == b""  # not a byte was sent back


def test_a_silent_peer_hits_the_whole_handshake_deadline():
    stranger, server_sock = _pair()
    thread, result = _run_server(server_sock, SECRET, timeout=0.3)
    stranger.sendall(auth.MAGIC)  # a trickle: part of the hello, then nothing
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert "too long" in str(result["error"])


def _sessions():
    agent_sock, server_sock = _pair()
    thread, result = _run_server(server_sock, SECRET)
    agent = auth.agent_handshake(agent_sock, SECRET)
    thread.join()
    return agent, agent_sock, result["session"], server_sock


def test_a_changed_frame_fails_its_check():
    agent, agent_sock, server, server_sock = _sessions()
    frame = bytearray(agent.seal(b'{"type":"ready"}'))
    frame[6] ^= 1
    agent_sock.sendall(bytes(frame))
    with pytest.raises(auth.AuthError, match="authentication"):
        server.read_frame(exact_reader(server_sock))


def test_a_replayed_frame_fails_its_check():
    agent, agent_sock, server, server_sock = _sessions()
    frame = agent.seal(b'{"type":"exited"}')
    agent_sock.sendall(frame + frame)
    read = exact_reader(server_sock)
    assert server.read_frame(read) == b'{"type":"exited"}'
    with pytest.raises(auth.AuthError):
        server.read_frame(read)


def test_reordered_frames_fail_their_check():
    agent, agent_sock, server, server_sock = _sessions()
    first, second = agent.seal(b"one"), agent.seal(b"two")
    agent_sock.sendall(second + first)
    with pytest.raises(auth.AuthError):
        server.read_frame(exact_reader(server_sock))


def test_a_frame_from_the_other_direction_fails_its_check():
    agent, agent_sock, server, server_sock = _sessions()
    reflected = agent.seal(b"ping")
    server_sock.sendall(reflected)  # what the agent sent, sent back to it
    with pytest.raises(auth.AuthError):
        agent.read_frame(exact_reader(agent_sock))


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed-by-a-member", "in-clear"])
def test_an_oversized_frame_is_refused_before_its_body_is_read(sealed):
    agent, agent_sock, server, server_sock = _sessions()
    length = (auth.MAX_FRAME + 1).to_bytes(4, "big")
    agent_sock.sendall(agent._send.encrypt_with_ad(b"", length) if sealed else length + bytes(auth.HEADER - 4))
    asked = []

    def receive(count):
        asked.append(count)
        return exact_reader(server_sock)(count)

    with pytest.raises(auth.AuthError, match="over the" if sealed else "authentication"):
        server.read_frame(receive)
    assert asked == [auth.HEADER]
    with pytest.raises(ValueError):
        agent.seal(b"x" * (auth.MAX_FRAME + 1))
