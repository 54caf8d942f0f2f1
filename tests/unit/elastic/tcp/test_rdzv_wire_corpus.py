"""The hostile-peer corpus for the encrypted wire (elastic/tcp/auth.py, noise.py): every byte of the handshake and of
frames flipped, cut short, replayed, reordered, dropped, made too long; the old protocol (a downgrade); a mirror.

Each case is the bytes an attacker on the path (or a peer without the secret) can make; the answer is always the
same: AuthError (the connection closes), never a message, never a key. The live-server side of the same attacks is
``test_rdzv_hostile.py``.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, closed_without_a_word, live_server, stranger, wait_until
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import auth, noise, wire
from tfdist.launch.elastic.tcp.client import Refused, RendezvousLink

BIG = bytes(range(256)) * 700  # 179,200 bytes: three Noise messages and a part


def _flipped(data: bytes, index: int, bit: int = 0) -> bytes:
    changed = bytearray(data)
    changed[index] ^= 1 << bit
    return bytes(changed)


def _reader(data: bytes):
    """``receive(count)`` over ``data``; AuthError past its end (the connection closed)."""
    view, offset = memoryview(data), [0]

    def receive(count: int) -> bytes:
        if offset[0] + count > len(data):
            raise auth.ClosedEarly("closed")
        offset[0] += count
        return bytes(view[offset[0] - count: offset[0]])

    return receive


def _handshake():
    """A real handshake in memory: (agent's hello, server's answer, agent's session, server's session)."""
    agent = auth.AgentHandshake(SECRET)
    answer, server = auth.answer_hello(SECRET, agent.hello)
    return agent.hello, answer, agent.finish(answer), server


# -- the handshake -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bit", [0, 7])
def test_a_bit_flipped_in_any_byte_of_the_hello_is_refused(bit):
    hello = auth.AgentHandshake(SECRET).hello
    for index in range(len(hello)):
        with pytest.raises(auth.AuthError):
            auth.answer_hello(SECRET, _flipped(hello, index, bit))


@pytest.mark.parametrize("bit", [0, 7])
def test_a_bit_flipped_in_any_byte_of_the_servers_answer_fails_the_agent(bit):
    for index in range(auth.ANSWER):
        agent = auth.AgentHandshake(SECRET)
        answer, _ = auth.answer_hello(SECRET, agent.hello)
        with pytest.raises(auth.AuthError, match="did not prove"):
            agent.finish(_flipped(answer, index, bit))


def test_a_bit_flipped_in_any_byte_of_the_join_fails_the_server():
    _, _, agent, _ = _handshake()
    join = agent.seal(M.encode(M.Join(job="job", name="m", address="127.0.0.1", slots=1)))
    for index in range(len(join)):
        _, _, agent, server = _handshake()
        frame = agent.seal(M.encode(M.Join(job="job", name="m", address="127.0.0.1", slots=1)))
        with pytest.raises(auth.AuthError):
            server.read_frame(_reader(_flipped(frame, index)))


def test_a_hello_whose_key_is_a_low_order_point_is_refused_though_its_tag_is_right():
    """Message 1's tag is under no secret, so anyone can make it right; the all-zero key must still be refused
    (its Diffie-Hellman would be all zeros)."""
    state = noise.SymmetricState.initialized(auth.PROLOGUE)
    zero = bytes(32)
    state.mix_hash(zero)
    state.mix_key(zero)
    with pytest.raises(auth.AuthError, match="not usable"):
        auth.answer_hello(SECRET, auth.MAGIC + zero + state.encrypt_and_hash(b""))


def test_the_old_protocols_hello_and_a_rewritten_version_are_refused():
    hello = auth.AgentHandshake(SECRET).hello
    for old in (b"TFDRDZV1" + bytes(range(32)),  # what an agent of the HMAC wire says (40 bytes)
                (b"TFDRDZV1" + bytes(range(32))).ljust(auth.HELLO, b"\0"),
                b"TFDRDZV1" + hello[len(auth.MAGIC):]):  # this version's message 1 under the old magic
        with pytest.raises(auth.AuthError):
            auth.answer_hello(SECRET, old)


def test_a_hello_sealed_under_another_prologue_fails_though_the_magic_is_rewritten_to_this_versions():
    """The magic is hashed into the keys (the prologue): an old or future version cannot be talked into this one by
    a middlebox that only rewrites the 8 bytes."""
    future = noise.SymmetricState.initialized(b"tfdist rendezvous wire | TFDRDZV9")
    other = noise.Initiator(future, auth.wire_key(SECRET))
    with pytest.raises(auth.AuthError):
        auth.answer_hello(SECRET, auth.MAGIC + other.write_e())


def test_an_old_servers_answer_fails_the_agent():
    agent = auth.AgentHandshake(SECRET)
    with pytest.raises(auth.AuthError, match="did not prove"):
        agent.finish(bytes(range(64))[: auth.ANSWER])  # the HMAC wire's nonce and proof, as many as are read


def test_the_handshake_cut_short_at_every_byte_is_a_closed_connection_for_the_agent():
    for cut in range(auth.ANSWER):
        agent_sock, server_sock = socket.socketpair()
        with agent_sock, server_sock:
            def serve() -> None:
                answer, _ = auth.answer_hello(SECRET, auth.receive_exactly(server_sock, auth.HELLO,
                                                                           time.monotonic() + 5))
                server_sock.sendall(answer[:cut])
                server_sock.shutdown(socket.SHUT_WR)

            thread = threading.Thread(target=serve)
            thread.start()
            with pytest.raises(auth.ClosedEarly):
                auth.agent_handshake(agent_sock, SECRET, timeout=5, first=b'{"type":"join"}')
            thread.join(5)
            agent_sock.shutdown(socket.SHUT_WR)  # what closing it does: the end of what it wrote
            server_sock.settimeout(5)
            assert server_sock.recv(100) == b""  # the join never went out


def test_a_handshake_replayed_from_another_connection_gives_nothing():
    """The agent's hello replayed: a new answer, a new e_s; the recorded join, sealed under the old keys, fails."""
    agent = auth.AgentHandshake(SECRET)
    answer, _ = auth.answer_hello(SECRET, agent.hello)
    join = agent.finish(answer).seal(b'{"type":"join"}')
    answer_again, server_again = auth.answer_hello(SECRET, agent.hello)
    assert answer_again != answer  # fresh e_s
    with pytest.raises(auth.AuthError):
        server_again.read_frame(_reader(join))
    # and the server's answer replayed to a new agent proves nothing to it
    with pytest.raises(auth.AuthError, match="did not prove"):
        auth.AgentHandshake(SECRET).finish(answer)


# -- frames --------------------------------------------------------------------------------------------------------
def test_a_bit_flipped_in_a_large_frame_fails_at_every_noise_message_boundary():
    _, _, agent, server = _handshake()
    frame = agent.seal(BIG)
    assert len(frame) == auth.HEADER + auth.body_size(len(BIG)) and BIG[:64] not in frame
    step = auth.CHUNK + noise.TAG
    places = {0, auth.HEADER - 1, len(frame) - 1}
    for boundary in range(auth.HEADER, len(frame), step):
        places |= {boundary, boundary + 1, min(boundary + step, len(frame)) - 1}
    for index in sorted(places):
        _, _, agent, server = _handshake()
        with pytest.raises(auth.AuthError):
            server.read_frame(_reader(_flipped(agent.seal(BIG), index)))


def test_a_large_frame_goes_through_whole():
    _, _, agent, server = _handshake()
    read = _reader(agent.seal(BIG) + agent.seal(b"") + agent.seal(b"x" * auth.CHUNK))
    assert [server.read_frame(read), server.read_frame(read), server.read_frame(read)] == [BIG, b"", b"x" * auth.CHUNK]


def test_a_frame_cut_short_at_every_byte_is_never_a_message():
    frame_of = lambda session: session.seal(M.encode(M.Ping()))  # noqa: E731
    for cut in range(len(frame_of(auth.pair_sessions()[0]))):
        mine, theirs = socket.socketpair()
        agent, server = auth.pair_sessions()
        channel = wire.Channel(theirs, server, send_timeout=5.0)
        mine.sendall(frame_of(agent)[:cut])
        mine.shutdown(socket.SHUT_WR)
        if cut == 0:
            assert channel.receive() is None  # closed between two messages
        else:
            with pytest.raises(M.ProtocolError, match="closed in the middle"):
                channel.receive()
        channel.close()
        mine.close()


def test_a_large_frame_whose_length_is_rewritten_to_drop_its_tail_fails():
    """The length is sealed: rewriting it to fewer Noise messages (a truncation a plain length would allow) fails
    at the length."""
    _, _, agent, server = _handshake()
    frame = agent.seal(BIG)
    forged = bytearray(frame)
    forged[0:4] = bytes(a ^ b for a, b in zip(frame[0:4], (len(BIG)).to_bytes(4, "big")))
    forged[0:4] = bytes(a ^ b for a, b in zip(forged[0:4], (2 * auth.CHUNK).to_bytes(4, "big")))  # AES-CTR malleable
    with pytest.raises(auth.AuthError, match="authentication"):
        server.read_frame(_reader(bytes(forged)))


def test_replayed_reordered_and_dropped_frames_fail():
    for order in ([0, 0], [1, 0], [0, 2], [2, 1, 0]):
        _, _, agent, server = _handshake()
        frames = [agent.seal(f"frame {i}".encode()) for i in range(3)]
        read = _reader(b"".join(frames[i] for i in order))
        with pytest.raises(auth.AuthError):
            for expected in order:
                assert server.read_frame(read) == f"frame {expected}".encode()


def test_a_frame_of_the_other_direction_or_of_another_connection_fails():
    _, _, agent, server = _handshake()
    _, _, other_agent, _ = _handshake()
    with pytest.raises(auth.AuthError):
        agent.read_frame(_reader(agent.seal(b"reflected")))
    with pytest.raises(auth.AuthError):
        server.read_frame(_reader(other_agent.seal(b"spliced")))


def test_a_hmac_wire_frame_fails():
    _, _, _, server = _handshake()
    old = (5).to_bytes(4, "big") + b"hello" + bytes(32)  # length | payload | HMAC, the old format
    with pytest.raises(auth.AuthError):
        server.read_frame(_reader(old.ljust(auth.HEADER + 5, b"\0")))


def test_a_direction_whose_counter_is_used_up_closes_the_connection():
    _, _, agent, server = _handshake()
    agent._send.n = noise.MAX_NONCE - 1  # as after 2^64 - 2 messages
    agent.seal(b"")  # one Noise message left: the empty frame's length
    with pytest.raises(ValueError, match="used up"):
        agent.seal(b"x")
    server._receive.n = noise.MAX_NONCE
    with pytest.raises(auth.AuthError):
        server.read_frame(_reader(bytes(auth.HEADER)))
    mine, theirs = socket.socketpair()
    channel = wire.Channel(mine, agent, send_timeout=5.0)
    assert not channel.send(M.Ping()) and channel.closed  # the sender closes rather than reuse a nonce
    theirs.close()


# -- over sockets --------------------------------------------------------------------------------------------------
def test_a_server_that_echoes_everything_is_refused_as_not_this_jobs_rendezvous():
    echo = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        echo.settimeout(10)
        try:
            conn, _ = echo.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    link = RendezvousLink("127.0.0.1", "127.0.0.1", echo.getsockname()[1], 2.0, secret=SECRET)
    try:
        with pytest.raises(Refused, match="did not prove"):
            link.connect(dict(job="j", name="n", address="127.0.0.1", slots=1), time.monotonic() + 20, lambda: False)
    finally:
        link.close()
        echo.close()


def test_a_hello_cut_short_at_every_byte_is_closed_without_a_word():
    hello = auth.AgentHandshake(SECRET).hello
    with live_server() as server:
        for cut in range(auth.HELLO):
            sock = stranger(server)
            sock.sendall(hello[:cut])
            sock.shutdown(socket.SHUT_WR)
            assert closed_without_a_word(sock)
            sock.close()
        wait_until(lambda: not server._pending, what="every slot freed")
        assert server.policy.nodes == {}


# -- ephemeral keys made ahead -------------------------------------------------------------------------------------
def test_no_two_handshakes_share_an_ephemeral_key_though_keys_are_made_ahead():
    seen: set[bytes] = set()
    for _ in range(40):
        agent = auth.AgentHandshake(SECRET)
        auth.make_spares(server=False)
        answer, _ = auth.answer_hello(SECRET, agent.hello)
        auth.make_spares(server=True)
        agent.finish(answer)
        seen |= {agent.hello[len(auth.MAGIC): len(auth.MAGIC) + 32], answer[:32]}
    assert len(seen) == 80


def test_a_key_made_ahead_is_never_used_by_a_forked_child(monkeypatch):
    auth.make_spares(server=False)
    ahead = auth._SPARES._made["agent"][1][1]  # the hello made ahead
    monkeypatch.setattr(auth.os, "getpid", lambda: -1)  # as in a child after fork
    assert auth.AgentHandshake(SECRET).hello != ahead


def test_a_busy_rendezvous_spends_no_diffie_hellman_on_a_newcomer(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)
    answered: list[int] = []
    real = auth.answer_hello
    monkeypatch.setattr(auth, "answer_hello", lambda secret, hello: answered.append(1) or real(secret, hello))
    with live_server() as server:
        server._admission.room = 1
        holder = stranger(server)
        holder.sendall(auth.AgentHandshake(SECRET).hello)
        assert len(auth.receive_exactly(holder, auth.ANSWER, time.monotonic() + 5)) == auth.ANSWER  # holds the slot
        newcomer = stranger(server, "127.0.0.4")
        newcomer.sendall(auth.AgentHandshake(SECRET).hello)
        newcomer.settimeout(5)
        assert newcomer.recv(64) == auth.BUSY
        assert answered == [1]  # the holder's hello only
        for sock in (holder, newcomer):
            sock.close()
