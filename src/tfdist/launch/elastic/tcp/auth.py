"""Who may talk to a rendezvous, and what the path sees: the Noise handshake ``Noise_NNpsk2_25519_AESGCM_SHA256``
on a subkey of the job secret, then every frame encrypted and authenticated.

Why Noise and not TLS: membership is what the job secret proves, and nothing else. TLS with a per-job certificate,
pinned by both sides (Dask's ``Security.temporary()``), adds a second credential to make, carry in the job's
credential file and pin; TLS on a pre-shared key is in Python's ``ssl`` only from 3.13 (``set_psk_*_callback``)
while tfdist supports 3.10 on, and under TLS 1.3 a PSK sits beside certificates (a side may fall back to them)
rather than replacing them. Noise's NNpsk2 (Noise Protocol Framework rev 34, §7 and §9; the same psk2 modifier as
WireGuard's Noise_IKpsk2) needs nothing but the secret, and is a published construction, specified step by step and
implemented widely (snow, cacophony, noise-c), not a design of ours: :mod:`tfdist.launch.elastic.tcp.noise`
transcribes it onto ``cryptography``'s X25519 and AES-256-GCM, checked against the published test vector.

It gives: only holders of the secret get in, both ways; forward secrecy (fresh X25519 keys per connection, thrown away with it:
the secret, learned later, does not open a recorded session); nobody on the path reads a frame (job id, names,
addresses, checkpoint bytes) or injects, changes, replays, reorders or drops one unnoticed. It does not hide that
a rendezvous runs, who talks to it, when, and how many bytes (see the trust model in docs/trust.md).

Handshake (fixed sizes, so a stranger can make the server hold at most :data:`HELLO` bytes, then
:data:`HEADER`)::

    agent  -> server   MAGIC | e_a | tag                Noise message 1 (-> e); MAGIC is the prologue too,
    server -> agent    e_s | tag                        message 2 (<- e, ee, psk): the server proves first;
                                                        an agent says nothing more to a server that cannot
    agent  -> server   its first frame (the join)       in the same write: it proves the secret, and it is
                                                        fresh (its key depends on e_s: a replay gets nowhere)

The prologue (:data:`PROLOGUE`, which holds :data:`MAGIC`) is hashed into every key, so a peer of another protocol
version (the HMAC wire's ``TFDRDZV1``) or a middlebox that rewrites the version fails the first tag it checks. The
psk is :func:`tfdist.launch.elastic.secret.subkey` (``"rendezvous wire"``), never the secret itself.

Frames (after Noise's Split, one CipherState each way; the counter is the AES-GCM nonce, so a replayed, reordered
or dropped message fails its tag)::

    Enc(length(4)) | Enc(body[0:65519]) | Enc(body[65519:...]) | ...

The length is a Noise message of its own (as Lightning's BOLT 8 frames Noise_XK): the reader checks it before it
reads or holds the body, and a length changed on the path fails there. The body is cut into Noise messages of at
most 65535 bytes (the framework's limit, §3; a backup chunk of ~350 KB is six), whose number follows from the
authenticated length, so a frame cut short or run long fails too. A frame that fails closes the connection
(AuthError); so does a direction's counter reaching 2^64 - 1. The server says nothing about the job before the
agent's join decrypted; it closes a connection that fails without a word.
"""
from __future__ import annotations

import functools
import os
import socket
import threading
import time
from typing import Callable

from tfdist.launch.elastic.tcp import noise

MAGIC = b"TFDRDZV2"  # TFDRDZV1 was the HMAC wire (no encryption): it fails the prologue, never falls back
PROLOGUE = b"tfdist rendezvous wire | " + MAGIC + b" | " + noise.PROTOCOL_NAME
BUSY = b"TFDBUSY1"  # instead of message 2: no room for another handshake now, try again (unproved: a hint)
HELLO = len(MAGIC) + noise.DHLEN + noise.TAG  # what an agent says first; all a stranger gets held at once
ANSWER = noise.DHLEN + noise.TAG
HEADER = 4 + noise.TAG  # a frame's encrypted length
CHUNK = noise.MAX_MESSAGE - noise.TAG  # plaintext per Noise transport message
HANDSHAKE_S = 5.0  # the whole handshake, so that slow strangers cannot hold a connection slot
MAX_FRAME = 1 << 20  # bigger than any message (a raw backup chunk is 256 KiB and a small header)
INSECURE_SECRET = b"tfdist --rdzv-insecure: no secret"  # --rdzv-insecure: one code path; hides from a passive
# reader only (anyone may know this "secret": no authentication, and an active man in the middle reads all)
_START = noise.SymmetricState.initialized(PROLOGUE)  # the prologue is fixed: its hash is computed once


class AuthError(Exception):
    """The peer did not prove the job secret, or a frame failed its check."""


class ClosedEarly(AuthError):
    """The peer closed (or reset) the connection during the handshake without a word."""


class Reset(ClosedEarly):
    """The peer reset the connection during the handshake (a full listen backlog or a closed port resets too)."""


class Busy(ClosedEarly):
    """The server answered :data:`BUSY` and closed: it has no room for another handshake now."""


class HandshakeTimeout(AuthError):
    """The handshake did not finish in time (the peer said nothing, or not all of it)."""


@functools.lru_cache(maxsize=8)
def wire_key(secret: bytes) -> bytes:
    """The Noise psk for ``secret`` (its ``"rendezvous wire"`` subkey; cached: one derivation per process)."""
    from tfdist.launch.elastic.secret import subkey

    return subkey(secret, "rendezvous wire")


def receive_exactly(sock: socket.socket, count: int, deadline: float) -> bytes:
    """``count`` bytes, or AuthError once the peer closed or ``deadline`` (monotonic) passed."""
    chunks, have = [], 0
    while have < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise HandshakeTimeout("the handshake took too long")
        sock.settimeout(left)
        try:
            chunk = sock.recv(count - have)
        except socket.timeout:
            raise HandshakeTimeout("the handshake took too long") from None
        except ConnectionResetError:
            raise Reset("the peer reset the connection during the handshake") from None
        if not chunk:
            raise ClosedEarly("the peer closed the connection during the handshake")
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


def _send_before(sock: socket.socket, data: bytes, deadline: float) -> None:
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    try:
        sock.sendall(data)
    except socket.timeout:
        raise HandshakeTimeout("the handshake took too long") from None


def body_size(length: int) -> int:
    """The bytes on the wire of a ``length``-byte frame body: one tag per Noise message of it."""
    return length + noise.TAG * -(-length // CHUNK)


class Session:
    """One connection's two CipherStates (one sender and one reader thread at a time: one state each)."""

    __slots__ = ("_send", "_receive")

    def __init__(self, send: noise.CipherState, receive: noise.CipherState) -> None:
        self._send, self._receive = send, receive

    def seal(self, payload: bytes) -> bytes:
        """One frame for ``payload``; call in sending order. ValueError: too big, or this direction is used up."""
        if len(payload) > MAX_FRAME:
            raise ValueError(f"a {len(payload)}-byte message is over the {MAX_FRAME}-byte frame limit")
        view = memoryview(payload)
        try:
            parts = [self._send.encrypt_with_ad(b"", len(payload).to_bytes(4, "big"))]
            parts += [self._send.encrypt_with_ad(b"", view[at: at + CHUNK]) for at in range(0, len(payload), CHUNK)]
        except noise.NoiseError as bad:
            raise ValueError(str(bad)) from None
        return b"".join(parts)

    def open_header(self, header: bytes) -> int:
        """The length in a frame's :data:`HEADER` bytes. Raises AuthError (changed, replayed, out of order, or
        over :data:`MAX_FRAME`)."""
        try:
            length = int.from_bytes(self._receive.decrypt_with_ad(b"", header), "big")
        except noise.NoiseError:
            raise AuthError("a message failed its authentication check (changed, replayed or out of order)") from None
        if length > MAX_FRAME:
            raise AuthError(f"a frame of {length} bytes is over the {MAX_FRAME}-byte limit")
        return length

    def open_body(self, length: int, body: bytes) -> bytes:
        """The payload in a frame's ``body_size(length)`` bytes after its header. Raises AuthError."""
        step, view = CHUNK + noise.TAG, memoryview(body)
        try:
            return b"".join(self._receive.decrypt_with_ad(b"", view[at: at + step])
                            for at in range(0, len(body), step))
        except noise.NoiseError:
            raise AuthError("a message failed its authentication check (changed, replayed or out of order)") from None

    def read_frame(self, receive: Callable[[int], bytes]) -> bytes:
        """The next frame's payload; ``receive(n)`` returns exactly n bytes (or raises). Raises AuthError."""
        length = self.open_header(receive(HEADER))
        return self.open_body(length, receive(body_size(length))) if length else b""


class _Spares:
    """The next handshake's ephemeral key, made ahead while this one waits on the network (the agent for the
    server's answer, the server for the agent's join), so that X25519 key generation is off the join's path.
    Each is used by one handshake only and never across a fork (a child would share its parent's key)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[str, tuple[int, object]] = {}

    def take(self, kind: str, make: Callable[[], object]) -> object:
        with self._lock:
            pid, made = self._made.pop(kind, (0, None))
        return made if made is not None and pid == os.getpid() else make()

    def refill(self, kind: str, make: Callable[[], object]) -> None:
        with self._lock:
            if self._made.get(kind, (0,))[0] == os.getpid():
                return
        made = make()
        with self._lock:
            self._made[kind] = (os.getpid(), made)


_SPARES = _Spares()


def _written_hello() -> tuple[noise.Initiator, bytes]:
    initiator = noise.Initiator(_START)  # message 1 uses no psk: it can be written before the secret is known
    return initiator, MAGIC + initiator.write_e()


def make_spares(server: bool) -> None:
    """Make the next handshake's ephemeral key now (call it while waiting on the peer)."""
    if server:
        _SPARES.refill("server", noise.new_ephemeral)
    else:
        _SPARES.refill("agent", _written_hello)


class AgentHandshake:
    """The agent's half of the handshake as bytes: :attr:`hello` out, then :meth:`finish` with the server's
    :data:`ANSWER` (``agent_handshake`` drives it over a socket; tests send its bytes in pieces of their own)."""

    def __init__(self, secret: bytes) -> None:
        self._initiator, self.hello = _SPARES.take("agent", _written_hello)  # type: ignore[misc]
        self._initiator.psk = wire_key(secret)

    def finish(self, answer: bytes) -> Session:
        """The session, once ``answer`` proved the secret. Raises AuthError."""
        try:  # a mirror, an echo, another job or an old server: none makes this tag without the psk and e_a
            _, (send, receive) = self._initiator.read_response(answer)
        except noise.NoiseError:
            raise AuthError("the server did not prove the job secret") from None
        return Session(send, receive)


def agent_handshake(sock: socket.socket, secret: bytes, timeout: float = HANDSHAKE_S,
                    first: bytes | None = None) -> Session:
    """The agent's side. Raises AuthError (the server did not prove the secret) or OSError.

    ``first``: the payload of the agent's first frame (its join), sealed and written in one ``sendall`` once the
    server proved the secret: joining costs the handshake's one round trip and no more. Without it the agent's
    first frame, whenever it comes, is its proof.
    """
    deadline = time.monotonic() + timeout
    handshake = AgentHandshake(secret)
    _send_before(sock, handshake.hello, deadline)
    make_spares(server=False)  # while the server answers
    head = receive_exactly(sock, len(BUSY), deadline)
    if head == BUSY:
        raise Busy("the rendezvous is busy (no room for another handshake now)")
    session = handshake.finish(head + receive_exactly(sock, ANSWER - len(BUSY), deadline))
    if first is not None:
        _send_before(sock, session.seal(first), deadline)
    sock.settimeout(None)
    return session


def pair_sessions() -> tuple[Session, Session]:
    """The agent's and the server's ends of a connection that never leaves one process (the serving agent joins
    its own server over a socket pair, ``RendezvousServer.join_here``): nobody else can reach the pair, so there is
    nothing to prove; two fresh random keys (one per direction, as Split gives) seal its frames like any other."""
    to_server, to_agent = os.urandom(32), os.urandom(32)
    return (Session(noise.CipherState(to_server), noise.CipherState(to_agent)),
            Session(noise.CipherState(to_agent), noise.CipherState(to_server)))


def is_hello(data: bytes) -> bool:
    """Whether ``data`` has the shape of an agent's first message of this protocol version (nothing is proved)."""
    return len(data) == HELLO and data[: len(MAGIC)] == MAGIC


def answer_hello(secret: bytes, hello: bytes) -> tuple[bytes, Session]:
    """Message 2 (the bytes that answer ``hello``) and the server's end of the session. Raises AuthError when
    ``hello`` is not a tfdist agent's of this protocol version."""
    if not is_hello(hello):
        raise AuthError("not a tfdist agent (of this version)")
    ephemeral = _SPARES.take("server", noise.new_ephemeral)
    responder = noise.Responder(_START, wire_key(secret), ephemeral)  # type: ignore[arg-type]
    try:
        responder.read_e(hello[len(MAGIC):])
        answer, (send, receive) = responder.write_response()
    except noise.NoiseError as bad:
        raise AuthError(f"not a tfdist agent ({bad})") from None
    return answer, Session(send, receive)
