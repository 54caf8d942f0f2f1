"""Issue 34 item 1: someone on the path who reads every byte learns nothing about the job.

A recording proxy sits between two members and a live rendezvous on loopback; the members join (job id, machine
names, addresses, versions) and one copies a backup to the other through the rendezvous (checkpoint bytes, sent as
base64 in ``file`` messages). None of it may appear in the bytes the proxy saw, either way. Before issue 34 every
frame was authenticated but in the clear, so the job id was on the wire in the join. The recorded agent side of a
whole session, replayed into a new connection, gets the server's half of a handshake and nothing more.
"""
from __future__ import annotations

import base64
import hashlib
import socket
import threading
import time
import types

import pytest

from tests.unit.elastic.tcp.rdzv_peer import SECRET, Peer, live_server, wait_until
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import auth

JOB = "passive-reader-job-5c1e"
NAMES = ("machine-alpha-7d2f", "machine-beta-81c0")
CHECKPOINT = b"CHECKPOINT-BYTES-ON-THE-WIRE:" * 12000  # 348 KB: more than one 256 KiB chunk


class RecordingProxy:
    """Forwards each connection to ``target`` and records what went each way (one thread per direction)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.sent: list[bytearray] = []  # per connection: agent -> server
        self.received: list[bytearray] = []  # per connection: server -> agent
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                agent, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for sock in (agent, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            up, down = bytearray(), bytearray()
            with self._lock:
                self.sent.append(up)
                self.received.append(down)
            threading.Thread(target=self._pump, args=(agent, server, up), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, agent, down), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bytearray) -> None:
        try:
            while chunk := source.recv(1 << 16):
                with self._lock:
                    record += chunk
                sink.sendall(chunk)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def seen(self) -> bytes:
        with self._lock:
            return b"".join(bytes(r) for r in (*self.sent, *self.received))

    def close(self) -> None:
        self.listener.close()


def _backup(name: str, data: bytes) -> M.Backup:
    files = {"checkpoint": f'model_checkpoint_path: "{name}"\n'.encode(), f"{name}.index": data}
    return M.Backup("aa", name, {f: hashlib.sha256(d).hexdigest() for f, d in files.items()},
                    {f: len(d) for f, d in files.items()})


@pytest.mark.parametrize("secret", [SECRET, auth.INSECURE_SECRET], ids=["secret", "rdzv-insecure"])
def test_a_reader_of_every_byte_learns_no_job_id_no_name_and_no_checkpoint_byte(secret):
    """--rdzv-insecure too: its well-known key authenticates nobody, but the one code path still hides the traffic
    from a reader who only reads."""
    with live_server(secret=secret, job=JOB, min_nodes=2, max_nodes=2, node_timeout=30.0) as server:
        proxy = RecordingProxy(server.address[:2])
        via = types.SimpleNamespace(address=proxy.address)  # the peers dial the proxy
        try:
            chief, other = Peer(via, secret), Peer(via, secret)  # type: ignore[arg-type]
            for peer, rank, name in ((chief, 0, NAMES[0]), (other, 1, NAMES[1])):
                assert isinstance(peer.join(name, job=JOB, rank=rank, address="127.0.0.1"), M.Welcome)
            chief.send(M.Ready(ports=[23456], backup=_backup("ckpt-7", CHECKPOINT)))
            other.send(M.Ready(ports=[23457], backup=M.Backup("bb")))
            assert isinstance(chief.receive((M.Send,), timeout=30), M.Send)
            index = 'model_checkpoint_path: "ckpt-7"\n'.encode()
            chief.send(M.File(name="checkpoint", data=base64.b64encode(index).decode(), end=True), wait=10)
            for offset in range(0, len(CHECKPOINT), 256 * 1024):
                chunk = CHECKPOINT[offset:offset + 256 * 1024]
                done = offset + len(chunk) >= len(CHECKPOINT)
                chief.send(M.File(name="ckpt-7.index", data=base64.b64encode(chunk).decode(), end=done, last=done),
                           wait=10)
            copied = b""
            deadline = time.monotonic() + 60
            while len(copied) < len(CHECKPOINT) and time.monotonic() < deadline:
                message = other.receive((M.File,), timeout=30)
                if isinstance(message, M.File) and message.name == "ckpt-7.index":
                    copied += base64.b64decode(message.data)
            assert copied == CHECKPOINT  # the copy went through the proxy
            seen = proxy.seen()
            assert len(seen) > len(CHECKPOINT)  # it saw the whole copy go by (twice: up and down)
            for secret_thing in (JOB.encode(), *(n.encode() for n in NAMES), b"23456", b"ckpt-7", b"tensorflow",
                                 CHECKPOINT[:29], base64.b64encode(CHECKPOINT[:48])):
                assert secret_thing not in seen, secret_thing
            # The recorded agent side of the chief's whole session, replayed into a new connection: the server
            # answers the hello (its half of the handshake) and nothing else; nobody new joins.
            replay = socket.create_connection(server.address[:2])
            replay.sendall(bytes(proxy.sent[0]))
            replay.settimeout(5)
            answered = b""
            try:
                while chunk := replay.recv(1 << 16):
                    answered += chunk
            except (socket.timeout, ConnectionResetError):
                pass
            replay.close()
            assert len(answered) <= 64 and JOB.encode() not in answered
            assert sorted(n.name for n in server.policy.nodes.values()) == sorted(NAMES)
            wait_until(lambda: not server._pending, what="the replay's slot freed")
        finally:
            proxy.close()
