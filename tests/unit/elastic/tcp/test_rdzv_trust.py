"""Issue 20, items 1-10 and 13: a live rendezvous server on loopback against members and strangers, in process.

Each test names its item. They talk to a real server over real sockets; nothing leaves loopback.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import json
import socket
import threading
import time

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, Peer, closed_without_a_word, live_server, stranger, wait_until
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp.client import Refused, RendezvousLink
from tfdist.launch.elastic.rendezvous.membership import KEPT_EVENTS, MembershipPolicy, Node, RendezvousSettings


def _backup(name: str, data: bytes, fs: str = "aa") -> M.Backup:
    files = {"checkpoint": f'model_checkpoint_path: "{name}"\n'.encode(), f"{name}.index": data}
    return M.Backup(fs, name, {f: hashlib.sha256(d).hexdigest() for f, d in files.items()},
                    {f: len(d) for f, d in files.items()})


# -- item 1: nobody without the secret joins or learns anything --------------------------------------------------
def test_1_a_peer_without_the_secret_is_closed_on_without_a_word():
    with live_server(job="secret-job-id") as server:
        sock = socket.create_connection(server.address[:2])
        with pytest.raises(auth.AuthError):
            auth.agent_handshake(sock, b"wrong secret, 32 bytes long.....")
        sock.close()
        raw = socket.create_connection(server.address[:2])  # the old protocol's join, in the clear
        raw.sendall(json.dumps({"v": 1, "type": "join", "job": "x", "name": "n", "address": "127.0.0.1", "slots": 1,
                                "node_rank": 0}).encode() + b"\n")
        assert closed_without_a_word(raw)
        assert server.policy.nodes == {}


def test_1_a_wrong_job_id_is_refused_without_naming_the_real_one():
    with live_server(job="secret-job-id") as server:
        answer = Peer(server).join(job="guess")
        assert isinstance(answer, M.Refused) and "secret-job-id" not in answer.reason and answer.status == 2


def test_1_a_member_with_the_secret_joins_and_gets_a_round():
    with live_server(min_nodes=1, max_nodes=1) as server:
        peer = Peer(server)
        assert isinstance(peer.join(), M.Welcome)
        peer.send(M.Ready(ports=[2000]))
        assert isinstance(peer.receive((M.Round,)), M.Round)


# -- item 3: a squatter on the endpoint gets nothing from an agent -------------------------------------------------
@pytest.mark.parametrize("behaviour", ["garbage", "silent", "closes"])
def test_3_an_agent_that_meets_a_squatter_stops_with_one_line_and_sends_no_checkpoint(behaviour, monkeypatch):
    from tfdist.launch.elastic.tcp import client

    monkeypatch.setattr(client, "CLOSED_EARLY_S", 1.0)
    monkeypatch.setattr(auth, "HANDSHAKE_S", 1.0)
    squatter = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def squat() -> None:
        squatter.settimeout(10)
        while True:
            try:
                conn, _ = squatter.accept()
            except OSError:
                return
            conn.settimeout(3)
            try:
                received.append(conn.recv(1 << 20))
                if behaviour == "garbage":
                    conn.sendall(b"\x00" * 64 + b'{"v":1,"type":"welcome","node_id":1}\n')
                    received.append(conn.recv(1 << 20))
                elif behaviour == "silent":
                    received.append(conn.recv(1 << 20))
            except OSError:
                pass
            conn.close()

    threading.Thread(target=squat, daemon=True).start()
    port = squatter.getsockname()[1]
    said: list[str] = []
    link = RendezvousLink("127.0.0.1", "127.0.0.1", port, 2.0, secret=SECRET, say=said.append)
    join = dict(job="j", name="n", address="127.0.0.1", slots=1)
    with pytest.raises(Refused) as refused:
        link.connect(join, time.monotonic() + 60, give_up=lambda: False)
    squatter.close()
    assert refused.value.status == 2 and f"127.0.0.1:{port}" in refused.value.reason
    assert "did not prove" in refused.value.reason
    assert all(len(chunk) <= auth.HELLO for chunk in received)  # the hello, never a join nor a checkpoint byte


# -- item 4: a member that does not read is dropped; the job goes on ----------------------------------------------
def test_4_a_member_that_never_reads_is_dropped_while_the_others_keep_their_keepalives(monkeypatch):
    from tfdist.launch.elastic.tcp import wire

    monkeypatch.setattr(wire, "QUEUE_FRAMES", 12)
    said: list[str] = []
    data = bytes(range(256)) * 4096 * 8  # 8 MiB: more than the queue (4 chunks here) and the socket buffers hold
    with live_server(said=said, min_nodes=3, max_nodes=3, node_timeout=10.0) as server:  # roomy: a loaded CI
        chief, healthy, stuck = Peer(server), Peer(server), Peer(server, receive_buffer=4096)
        for peer, rank in ((chief, 0), (healthy, 1), (stuck, 2)):
            assert isinstance(peer.join(f"m{rank}", rank=rank), M.Welcome)
        chief.send(M.Ready(ports=[1], backup=_backup("ckpt-7", data)))
        healthy.send(M.Ready(ports=[2], backup=M.Backup("bb")))
        stuck.send(M.Ready(ports=[3], backup=M.Backup("cc")))
        request = chief.receive((M.Send,))
        assert isinstance(request, M.Send)
        stop = threading.Event()

        def upload() -> None:
            checkpoint = f'model_checkpoint_path: "ckpt-7"\n'.encode()
            chief.send(M.File(name="checkpoint", data=base64.b64encode(checkpoint).decode(), end=True), wait=10)
            for offset in range(0, len(data), 256 * 1024):
                if stop.is_set():
                    return
                chunk = data[offset:offset + 256 * 1024]
                chief.send(M.File(name="ckpt-7.index", data=base64.b64encode(chunk).decode(),
                                  end=offset + len(chunk) >= len(data), last=offset + len(chunk) >= len(data)),
                           wait=10)

        def keep_alive(peer: Peer) -> None:  # alive as an agent is: keep-alives from their own thread
            while not stop.is_set() and peer.channel.send(M.Ping(), wait=5):
                time.sleep(0.2)

        threading.Thread(target=upload, daemon=True).start()
        for peer in (chief, stuck):  # the stuck member is alive too: it sends, it only never reads
            threading.Thread(target=keep_alive, args=(peer,), daemon=True).start()
        received = 0
        deadline = time.monotonic() + 300  # a bound, not a speed test: the copy is slow on a loaded machine
        while received < len(data) and time.monotonic() < deadline:  # the healthy member reads it all
            message = healthy.receive((M.File, M.Ping))
            if isinstance(message, M.File) and message.name == "ckpt-7.index":
                received += len(base64.b64decode(message.data))
            healthy.send(M.Ping())
        assert received == len(data), "\n".join(said)
        wait_until(lambda: any(line.startswith("lost node 3") for line in said), timeout=30,
                   what="the stuck member dropped")
        stop.set()
        assert any(("does not read" in line or "missed its deadline" in line) for line in said), said
        assert healthy.receive((M.Ping,), timeout=5) is not None  # the server's clock still ticks
        assert not any(line.startswith("lost node 1") or line.startswith("lost node 2") for line in said), said


# -- item 5: a malformed ready costs its sender the connection, never the round thread -----------------------------
@pytest.mark.parametrize("backup", [{"fs": "aa", "name": 99, "files": {}}, "ckpt-99", [1, 2], {"fs": "aa",
                                    "name": "ckpt-1", "files": {"checkpoint": 5}, "sizes": {"checkpoint": 1}}])
def test_5_a_malformed_ready_is_refused_and_the_rounds_go_on(backup):
    with live_server(min_nodes=1, max_nodes=2) as server:
        bad = Peer(server)
        assert isinstance(bad.join("bad"), M.Welcome)
        bad.send_raw(json.dumps({"v": 1, "type": "ready", "ports": [1], "backup": backup}).encode())
        answer = bad.receive((M.Refused,))
        assert isinstance(answer, M.Refused) and "backup" in answer.reason
        good = Peer(server)
        assert isinstance(good.join("good"), M.Welcome)
        good.send(M.Ready(ports=[2]))
        assert isinstance(good.receive((M.Round,)), M.Round)


def test_5_an_error_inside_the_loop_is_reported_and_the_loop_goes_on(monkeypatch):
    said: list[str] = []
    with live_server(said=said, min_nodes=1, max_nodes=1) as server:
        real_tick, calls = server.policy.tick, []

        def flaky(now):
            calls.append(now)
            if len(calls) == 3:
                raise TypeError("boom")
            return real_tick(now)

        monkeypatch.setattr(server.policy, "tick", flaky)
        wait_until(lambda: any("boom" in line for line in said))
        peer = Peer(server)
        assert isinstance(peer.join(), M.Welcome)
        peer.send(M.Ready(ports=[1]))
        assert isinstance(peer.receive((M.Round,)), M.Round)


# -- item 6: accept survives running out of file descriptors -------------------------------------------------------
def test_6_accept_goes_on_after_emfile():
    said: list[str] = []
    with live_server(said=said, min_nodes=1, max_nodes=1) as server:
        real, failures = server._listener, [OSError(errno.EMFILE, "Too many open files")] * 5

        class Exhausted:
            def accept(self):
                if failures:
                    raise failures.pop()
                return real.accept()

            def __getattr__(self, name):
                return getattr(real, name)

        server._listener = Exhausted()
        stranger(server).close()  # wakes the accept already waiting on the real listener
        wait_until(lambda: not failures, what="the failing accepts")
        peer = Peer(server)
        assert isinstance(peer.join(), M.Welcome)
        assert any("Too many open files" in line for line in said)


# -- item 7: caps, deadlines, bounded memory -----------------------------------------------------------------------
def test_7_idle_strangers_cannot_keep_a_member_out(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)  # they would stay a minute if they could
    with live_server(min_nodes=1, max_nodes=1) as server:
        idle = [stranger(server) for _ in range(12)]
        wait_until(lambda: sum(server._pending.values()) == 4, what="the per-source cap")
        assert sum(closed_without_a_word(sock, timeout=2) for sock in idle) >= 8
        peer = Peer(server)
        assert isinstance(peer.join(), M.Welcome)


def test_7_idle_strangers_from_many_addresses_cannot_keep_a_member_out(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 60.0)  # they would stay a minute if they could
    with live_server(min_nodes=1, max_nodes=1) as server:
        # 12 addresses x 4 (the per-source cap): more than the 32 slots in all; each newcomer takes the oldest's.
        idle = [stranger(server, f"127.0.1.{1 + i // 4}") for i in range(48)]
        wait_until(lambda: sum(server._pending.values()) == 32, what="every slot")
        peer = Peer(server)  # the newest connection: the oldest stranger gives way to it
        assert isinstance(peer.join(), M.Welcome)
        assert all(closed_without_a_word(sock, timeout=5) for sock in idle[:17])  # the 17 oldest gave way
        assert sum(server._pending.values()) == 31  # a member that proved the secret holds no slot
        for sock in idle:
            sock.close()


def test_7_a_silent_connection_is_closed_at_the_handshake_deadline(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_S", 0.5)
    with live_server() as server:
        sock = stranger(server)
        sock.sendall(auth.MAGIC)  # part of a hello, then silence
        assert closed_without_a_word(sock, timeout=10)
        wait_until(lambda: not server._pending, what="the slot freed")


def test_7_a_huge_line_is_not_read_past_the_hello():
    with live_server() as server:
        sock = stranger(server)
        try:
            sock.sendall(b"{" + b"x" * (8 * 1024 * 1024))  # the server stops reading after 40 bytes
        except OSError:
            pass
        assert closed_without_a_word(sock, timeout=10)


def test_7_lost_machines_and_events_are_bounded():
    settings = RendezvousSettings(job="j", min_nodes=1, max_nodes=2)
    policy = MembershipPolicy(settings, 0.0)
    for node_id in range(1, 3000):
        node = Node(node_id=node_id, name=f"m{node_id}", address="10.0.0.1", slots=1)
        assert policy.on_join(node, "j") is None
        policy.on_lost(node_id, "gone", 1.0)
    assert len(policy.lost) <= KEPT_EVENTS + 1 and len(policy.history) <= KEPT_EVENTS + 1
    assert len(policy.report(3, "x").splitlines()) < 2 * KEPT_EVENTS + 10


# -- item 9: shapes and versions -------------------------------------------------------------------------------------
@pytest.mark.parametrize("payload, words", [
    (b'{"v":1,"type":"exited","round":Infinity,"outcome":"failed"}', "Infinity"),
    (b'{"v":1,"type":"ping","x":' + b"[" * 50000 + b"]" * 50000 + b"}", "nested"),
    (b'{"v":1,"type":"join","job":"j","name":"n","address":"a","slots":1,"versions":[]}', "versions"),
])
def test_9_bad_shapes_are_refused_with_a_reason(payload, words):
    with live_server() as server:
        peer = Peer(server)
        peer.send_raw(payload)
        answer = peer.receive((M.Refused,))
        assert isinstance(answer, M.Refused) and words in answer.reason
        assert isinstance(Peer(server).join(), M.Welcome)  # the server is fine


def test_9_another_protocol_version_is_told_the_versions_spoken():
    with live_server() as server:
        peer = Peer(server)
        peer.send_raw(json.dumps({"v": 7, "type": "join"}).encode())
        answer = peer.receive((M.Refused,))
        assert isinstance(answer, M.Refused) and answer.versions == [1] and "version 7" in answer.reason


# -- item 10: IPv6 ----------------------------------------------------------------------------------------------------
def test_10_an_ipv6_endpoint_gets_an_ipv6_listener_printed_bracketed():
    said: list[str] = []
    with live_server(host="::1", said=said, min_nodes=1, max_nodes=1) as server:
        assert server.endpoint.startswith("[::1]:")
        link = RendezvousLink("::1", "::1", server.address[1], 2.0, secret=SECRET)
        link.connect(dict(job="job", name="v6", address="::1", slots=1), time.monotonic() + 10, lambda: False)
        assert link.where.startswith("[::1]:")
        link.send(M.Ready(ports=[1]))
        wait_until(lambda: any("round 0" in line for line in said))
        link.close()


# -- item 13: an endpoint that does not answer is reported while the agent waits -----------------------------------
def test_13_a_line_while_the_endpoint_does_not_answer():
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    said: list[str] = []
    link = RendezvousLink("127.0.0.1", "127.0.0.1", port, 2.0, secret=SECRET, say=said.append, progress_every=0.3)
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        link.connect(dict(job="j", name="n", address="127.0.0.1", slots=1), time.monotonic() + 1.5, lambda: False)
    assert len(said) >= 2 and all(f"waiting for the rendezvous at 127.0.0.1:{port}" in line for line in said)


# -- what a member's join puts on the operator's terminal and into TF_CONFIG -----------------------------------------
def test_a_name_with_escape_codes_is_shown_escaped_and_a_bad_address_is_refused():
    said: list[str] = []
    with live_server(said=said) as server:
        assert isinstance(Peer(server).join("evil\x1b[2J\nfake: round 9 started"), M.Welcome)
        # The server says "joined" right after writing the welcome, so the line may come just after the welcome.
        wait_until(lambda: any("joined" in line for line in said), what="the joined line")
        joined = [line for line in said if "joined" in line]
        assert joined and "\x1b" not in joined[0] and "\n" not in joined[0] and "\\x1b" in joined[0]
        answer = Peer(server).join("m2", address="10.0.0.1; rm -rf /")
        assert isinstance(answer, M.Refused) and "not a host name or IP address" in answer.reason
