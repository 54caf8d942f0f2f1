"""A hostile-peer corpus against a live rendezvous on loopback: after each attack the attacker has learnt nothing
about the job (no id, no size, no names) and a real member still joins and gets a round."""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import (SECRET, VERSIONS, Peer, closed_without_a_word, live_server,
                                              server_handshake, stranger, wait_until)
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M

JOB = "hostile-test-job"
NAMES = (JOB.encode(), b"member-one", b"127.0.0.1", b"tensorflow")


def _drain(sock: socket.socket, timeout: float = 3.0) -> bytes:
    """Everything the server sends before it closes (or goes quiet)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    return data


def wrong_secret(server):
    sock = stranger(server)
    sock.sendall(auth.AgentHandshake(b"not this job's secret").hello)  # message 1 holds no secret: it is answered
    answer = auth.receive_exactly(sock, auth.ANSWER, time.monotonic() + 5)
    sock.sendall(os.urandom(auth.HEADER) + b"{}")  # a join it cannot seal
    return answer + _drain(sock)


def replayed_handshake(server):
    """A whole session recorded (hello and join, made with the secret) against another server with the same
    secret, replayed into a new connection: its join is sealed under keys that depended on that server's e."""
    agent_end, server_end = socket.socketpair()
    sent: list[bytes] = []
    original = agent_end.sendall

    class Tap:
        def __getattr__(self, name):
            return getattr(agent_end, name)

        def sendall(self, data):
            sent.append(bytes(data))
            return original(data)

    answering = threading.Thread(target=lambda: server_handshake(server_end, SECRET))
    answering.start()
    join = M.encode(M.Join(job=JOB, name="replayed", address="127.0.0.9", slots=1, versions=dict(VERSIONS)))
    auth.agent_handshake(Tap(), SECRET, first=join)  # type: ignore[arg-type]
    answering.join()
    agent_end.close()
    server_end.close()
    sock = stranger(server)
    sock.sendall(sent[0])
    answer = auth.receive_exactly(sock, auth.ANSWER, time.monotonic() + 5)
    sock.sendall(sent[1])  # the join, sealed for the other connection
    return answer + _drain(sock)


def reflected_proof(server):
    sock = stranger(server)
    sock.sendall(auth.AgentHandshake(SECRET).hello)
    answer = auth.receive_exactly(sock, auth.ANSWER, time.monotonic() + 5)
    sock.sendall(answer[: auth.HEADER])  # the server's own bytes, sent back as a proof
    return answer + _drain(sock)


def downgrade(server):
    """An agent of the HMAC wire (TFDRDZV1 and a nonce), or a middlebox that rewrote the version: no answer."""
    sock = stranger(server)
    sock.sendall(b"TFDRDZV1" + os.urandom(32))
    return _drain(sock)


def version_rewritten(server):
    """This version's message 1 with the old magic: the magic is in the prologue, so no way round it."""
    sock = stranger(server)
    sock.sendall(b"TFDRDZV1" + auth.AgentHandshake(SECRET).hello[len(auth.MAGIC):])
    return _drain(sock)


def garbage(server):
    sock = stranger(server)
    sock.sendall(os.urandom(4096))
    return _drain(sock)


def old_protocol_join(server):
    sock = stranger(server)
    sock.sendall(json.dumps({"v": 1, "type": "join", "job": JOB, "name": "x", "address": "127.0.0.2",
                             "slots": 1, "node_rank": 0}).encode() + b"\n")
    return _drain(sock)


def http_probe(server):
    sock = stranger(server)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return _drain(sock)


def stall(server):
    sock = stranger(server)
    return b"" if closed_without_a_word(sock, timeout=10) else b"still open"


def trickle(server):
    sock = stranger(server)
    for byte in auth.MAGIC:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        time.sleep(0.1)
    return _drain(sock, timeout=10)


def flood(server):
    socks, answers = [], b""
    for _ in range(60):
        try:
            socks.append(stranger(server, "127.0.0.3"))
        except OSError:
            pass
    for sock in socks:
        answers += _drain(sock, timeout=0.05)
    for sock in socks:
        sock.close()
    return answers


def huge_line(server):
    sock = stranger(server)
    try:
        sock.sendall(b"[" * (8 * 1024 * 1024))
    except OSError:
        pass
    return _drain(sock)


ATTACKS = [wrong_secret, replayed_handshake, reflected_proof, downgrade, version_rewritten, garbage,
           old_protocol_join, http_probe, stall, trickle, flood, huge_line]


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.__name__ for a in ATTACKS])
def test_a_stranger_learns_nothing_and_changes_nothing(attack, monkeypatch):
    # The member sends nothing from its join to its ready (no keep-alives): a node timeout long enough that a
    # loaded machine's pause between the two never counts as a lost member.
    with live_server(job=JOB, min_nodes=2, max_nodes=2, node_timeout=30.0) as server:
        member = Peer(server)
        assert isinstance(member.join("member-one", job=JOB), M.Welcome)  # a job is under way
        with monkeypatch.context() as short:
            # Half a second for the strangers' handshakes (read at each accept), so that stall and trickle end
            # soon; the members, before and after, have the real deadline, which a loaded machine may need.
            short.setattr(auth, "HANDSHAKE_S", 0.5)
            seen = attack(server)
            assert len(seen) <= auth.ANSWER  # at most the server's half of the handshake
            assert not any(name in seen for name in NAMES)
            assert [n.name for n in server.policy.nodes.values()] == ["member-one"]
            wait_until(lambda: not server._pending, what="every stranger's slot freed")
        second = Peer(server)
        assert isinstance(second.join("member-two", job=JOB), M.Welcome)
        member.send(M.Ready(ports=[1]))
        second.send(M.Ready(ports=[2]))
        assert isinstance(member.receive((M.Round,)), M.Round)


# -- members with the secret that misbehave: each loses its own connection, the job goes on ------------------------
def _bad_frame(peer: Peer) -> None:
    frame = bytearray(peer.session.seal(M.encode(M.Ping())))
    frame[-1] ^= 1
    peer.channel.drain(1.0)
    peer.sock.sendall(bytes(frame))


def _replayed_frame(peer: Peer) -> None:
    frame = peer.session.seal(M.encode(M.Ping()))
    peer.channel.drain(1.0)
    peer.sock.sendall(frame + frame)


def _oversized_frame(peer: Peer) -> None:
    peer.channel.drain(1.0)
    peer.sock.sendall(peer.session._send.encrypt_with_ad(b"", struct.pack(">I", 2**31)))  # sealed: it has the key


def _length_in_clear(peer: Peer) -> None:
    peer.channel.drain(1.0)
    peer.sock.sendall(struct.pack(">I", 16) + bytes(auth.HEADER - 4))  # the HMAC wire's plaintext length


def _dropped_frame(peer: Peer) -> None:
    peer.channel.drain(1.0)
    peer.session.seal(M.encode(M.Ping()))  # sealed, never sent: the next one's counter is one on
    peer.sock.sendall(peer.session.seal(M.encode(M.Ping())))


def _cut_frame(peer: Peer) -> None:
    peer.channel.drain(1.0)
    frame = peer.session.seal(M.encode(M.Ping()))
    peer.sock.sendall(frame[:-1])
    peer.sock.shutdown(socket.SHUT_WR)


def _escaping_manifest(peer: Peer) -> None:
    peer.send_raw(json.dumps({"v": 1, "type": "ready", "ports": [1], "backup": {
        "fs": "ab", "name": "ckpt-9", "files": {"../../etc/cron.d/x": "ab" * 32}, "sizes": {"../../etc/cron.d/x": 1}}}
    ).encode())


def _file_with_a_path(peer: Peer) -> None:
    peer.send_raw(json.dumps({"v": 1, "type": "file", "name": "/etc/passwd", "data": ""}).encode())


def _too_many_ports(peer: Peer) -> None:
    peer.send_raw(json.dumps({"v": 1, "type": "ready", "ports": list(range(1, 5000))}).encode())


MISDEEDS = [_bad_frame, _replayed_frame, _oversized_frame, _length_in_clear, _dropped_frame, _cut_frame,
            _escaping_manifest, _file_with_a_path, _too_many_ports]


@pytest.mark.parametrize("misdeed", MISDEEDS, ids=[m.__name__.strip("_") for m in MISDEEDS])
def test_a_misbehaving_member_is_dropped_and_the_job_goes_on(misdeed):
    said: list[str] = []
    with live_server(job=JOB, said=said, min_nodes=1, max_nodes=2) as server:
        bad = Peer(server)
        assert isinstance(bad.join("bad-one", job=JOB), M.Welcome)
        misdeed(bad)
        wait_until(lambda: any(line.startswith("lost node 1") for line in said), what="the member dropped")
        good = Peer(server)
        assert isinstance(good.join("good-one", job=JOB), M.Welcome)
        good.send(M.Ready(ports=[2]))
        assert isinstance(good.receive((M.Round,)), M.Round)


def test_a_forged_frame_injected_into_a_members_connection_is_rejected():
    """Someone on the path writes a frame into a member's TCP stream: without the session key its MAC fails."""
    said: list[str] = []
    with live_server(job=JOB, said=said, min_nodes=1, max_nodes=1) as server:
        member = Peer(server)
        assert isinstance(member.join("member-one", job=JOB), M.Welcome)
        forged, _ = auth.pair_sessions()  # keys of its own: it has not this session's
        member.channel.drain(1.0)
        member.sock.sendall(forged.seal(M.encode(M.Exited(round=0, outcome="failed", detail="injected"))))
        wait_until(lambda: any("failed its authentication check" in line for line in said))
        assert not any("injected" in line for line in said)
        threading.Event().wait(0.1)
