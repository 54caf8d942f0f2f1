"""A live rendezvous server on loopback and raw peers that talk to it, honestly or not (for the trust tests)."""
from __future__ import annotations

import contextlib
import socket
import time
from typing import Iterator

from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import wire
from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings
from tfdist.launch.elastic.tcp.server import RendezvousServer

SECRET = bytes(range(100, 132))
VERSIONS = {"python": "3", "tfdist": "1", "tensorflow": "2"}


@contextlib.contextmanager
def live_server(host: str = "127.0.0.1", secret: bytes = SECRET, said: list[str] | None = None,
                recorder: object = None, **settings: object) -> Iterator[RendezvousServer]:
    values = dict(job="job", min_nodes=1, max_nodes=2, node_timeout=2.0, rdzv_timeout=60.0, first_round_wait=0.0)
    values.update(settings)
    server = RendezvousServer(RendezvousSettings(**values), host, 0, secret=secret,  # type: ignore[arg-type]
                              say=(said.append if said is not None else lambda _m: None),
                              recorder=recorder).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        for peer in [p for p in _PEERS if p.server is server]:  # their writer threads end with their channels
            _PEERS.remove(peer)
            peer.close()
        server.close()


def wait_until(predicate, timeout: float = 10.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.02)


_PEERS: list["Peer"] = []  # every peer made, closed with its server by live_server


class Peer:
    """One connection to the server: a real handshake (``secret``), typed sends and receives."""

    def __init__(self, server: RendezvousServer, secret: bytes = SECRET, *, read_timeout: float = 5.0,
                 receive_buffer: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET6 if ":" in server.address[0] else socket.AF_INET)
        if receive_buffer:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(5.0)
        self.sock.connect(server.address[:2])
        self.session = auth.agent_handshake(self.sock, secret)
        self.sock.settimeout(read_timeout)
        # As the agent's link: a send may wait up to max(node_timeout, 5 s), twice what the server waits for a
        # slow receiver while it forwards this peer's chunks (server.py), so a slow third party never cuts us off.
        self.channel = wire.Channel(self.sock, self.session, send_timeout=20.0)
        self.server = server
        _PEERS.append(self)

    def send(self, message: M.Message, wait: float = 0.0) -> None:
        assert self.channel.send(message, wait=wait, bulk=wait > 0)

    def send_raw(self, payload: bytes) -> None:
        """A frame with a valid MAC around any payload: what a member with the secret could send."""
        self.channel.drain(1.0)
        self.sock.sendall(self.session.seal(payload))

    def receive(self, kinds: tuple[type, ...] = (M.Message,), timeout: float = 5.0) -> M.Message | None:
        """The next message of one of ``kinds`` (pings skipped unless asked for); None when the server closed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.channel.receive()
            except (OSError, M.ProtocolError, auth.AuthError):
                return None
            if message is None:
                return None
            if isinstance(message, kinds) and (M.Ping in kinds or not isinstance(message, M.Ping)):
                return message
        raise AssertionError(f"no {[k.__name__ for k in kinds]} within {timeout:g}s")

    def join(self, name: str = "m", *, job: str = "job", slots: int = 1, rank: int | None = None,
             address: str = "127.0.0.1") -> M.Message | None:
        self.send(M.Join(job=job, name=name, address=address, slots=slots, node_rank=rank, versions=dict(VERSIONS)))
        return self.receive((M.Welcome, M.Refused))

    def close(self) -> None:
        self.channel.close()


def closed_without_a_word(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the server closes ``sock`` having sent nothing."""
    sock.settimeout(timeout)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def stranger(server: RendezvousServer, source: str = "127.0.0.2") -> socket.socket:
    """A plain TCP connection to the server from another loopback address (its own per-source budget)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(5.0)
    sock.connect(server.address[:2])
    return sock


# -- members: peers that joined and are ready (the in-process rendezvous tests) ----------------------------------
def backup(name: str, data: bytes = b"weights", fs: str = "aa") -> M.Backup:
    """A backup manifest as an agent reports it: the checkpoint index file and one shard, with digests."""
    import hashlib

    files = {"checkpoint": f'model_checkpoint_path: "{name}"\n'.encode(), f"{name}.index": data}
    return M.Backup(fs, name, {f: hashlib.sha256(d).hexdigest() for f, d in files.items()},
                    {f: len(d) for f, d in files.items()})


def member(server: RendezvousServer, name: str = "m", *, slots: int = 1, rank: int | None = None,
           ports: list[int] | None = None, backup: M.Backup | None = None,
           versions: dict[str, str] | None = None) -> Peer:
    """A peer that joined (welcomed) and said it is ready with ``ports`` (default: ``slots`` made-up ports)."""
    peer = Peer(server)
    peer.send(M.Join(job=server.settings.job, name=name, address="127.0.0.1", slots=slots, node_rank=rank,
                     versions=dict(VERSIONS if versions is None else versions)))
    answer = peer.receive((M.Welcome, M.Refused))
    assert isinstance(answer, M.Welcome), answer
    peer.send(M.Ready(ports=ports if ports is not None else [20000 + i for i in range(slots)], backup=backup))
    return peer


def next_of(peer: Peer, kind: type, timeout: float = 5.0) -> M.Message:
    """The next ``kind`` message (others, e.g. a Round before a Stop, are skipped); fails when the server closed."""
    got = peer.receive((kind,), timeout)
    assert isinstance(got, kind), f"expected {kind.__name__}, the connection ended ({got!r})"
    return got


def exited(peer: Peer, round_: int, outcome: str, step: int | None = None, detail: str = "") -> None:
    peer.send(M.Exited(round=round_, outcome=outcome, step=step, detail=detail))


@contextlib.contextmanager
def keeping_alive(*peers: Peer, every: float = 0.1) -> Iterator[None]:
    """Send pings from ``peers`` in the background, as an agent's link does, so only the peers left out go silent."""
    import threading

    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            for peer in peers:
                peer.channel.send(M.Ping())

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def exact_reader(sock: socket.socket):
    """``receive(count)`` for auth's handshake: exactly ``count`` bytes from ``sock``, AuthError when it closes."""
    def receive(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise auth.AuthError("closed")
            data += chunk
        return data
    return receive


def server_handshake(sock: socket.socket, secret: bytes, timeout: float = auth.HANDSHAKE_S, *,
                     deadline: float | None = None) -> auth.Session:
    """The server's side, blocking (the rendezvous serves it on its accept loop, ``admission.py``; tests serve a
    single peer with this): the agent's hello read and answered. Raises auth.AuthError (wrong magic, too slow) or
    OSError; sends no reason. The agent's proof is its first frame: ``session.read_frame`` raises AuthError on it
    when the agent does not hold the secret. ``deadline`` (monotonic): by default ``timeout`` from now.
    """
    deadline = time.monotonic() + timeout if deadline is None else deadline
    answer, session = auth.answer_hello(secret, auth.receive_exactly(sock, auth.HELLO, deadline))
    auth._send_before(sock, answer, deadline)
    sock.settimeout(None)
    return session
