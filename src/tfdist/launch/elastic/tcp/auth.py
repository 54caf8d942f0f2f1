"""Who may talk to a rendezvous: a mutual challenge-response on the job secret, then a MAC on every frame.

Why this and not TLS: Python's ``ssl`` offers pre-shared keys only from 3.13 (``SSLContext.set_psk_*_callback``),
tfdist supports 3.10 on, and under TLS 1.3 a PSK is merely offered and may fall back to certificates. HMAC-SHA256
(RFC 2104), HKDF (RFC 5869) and ``hmac.compare_digest`` are in every Python, and give what the rendezvous needs:
only holders of the secret get in, and nobody on the path can inject, change, replay or reorder a message. They do
not hide the traffic: someone on the path reads the messages (job id, addresses, checkpoint bytes); see the trust
model in docs/trust.md.

Handshake (fixed sizes, so a stranger can make the server hold at most :data:`HELLO` bytes)::

    agent  -> server   MAGIC | Na                       Na, Ns: 32 fresh random bytes each
    server -> agent    Ns | HMAC(K, "server" | Na | Ns)  the server proves first: an agent never says more to a
    agent  -> server   HMAC(K, "agent" | Na | Ns)        server that cannot; an agent's proof is never replayable
                       [ | first frame (the join) ]       in the same write: one round trip more than a plain join

K is the job secret. Then each direction has its own key, ``HKDF(K, salt=Na|Ns, info=direction)``, and every frame
is ``length(4) | payload | HMAC(key, seq(8) | length(4) | payload)`` with ``seq`` counting that direction's frames
from 0 (never sent: a replayed, dropped or reordered frame fails its MAC). The server says nothing about the job
before the agent's proof checked out; it closes a connection that fails without a word.
"""
from __future__ import annotations

import hmac
import secrets
import socket
import struct
import time
from typing import Callable

MAGIC = b"TFDRDZV1"
NONCE = 32
MAC = 32
HELLO = len(MAGIC) + NONCE
HANDSHAKE_S = 5.0  # the whole handshake, so that slow strangers cannot hold a connection slot
MAX_FRAME = 1 << 20  # bigger than any message (backup chunks are 256 KiB before base64)
INSECURE_SECRET = b"tfdist --rdzv-insecure: no secret"  # --rdzv-insecure: one code path, no protection
_LENGTH = struct.Struct(">I")
_SEQ = struct.Struct(">Q")


class AuthError(Exception):
    """The peer did not prove the job secret, or a frame failed its check."""


class ClosedEarly(AuthError):
    """The peer closed the connection during the handshake without a word (a busy server closes that way too)."""


def hkdf(secret: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """RFC 5869 HKDF with SHA-256 (``hmac.digest``: the same HMAC in one call into OpenSSL)."""
    return hkdf_expand(hmac.digest(salt, secret, "sha256"), info, length)


def hkdf_expand(prk: bytes, info: bytes, length: int = 32) -> bytes:
    """RFC 5869's expand step, for keys from one extracted ``prk``."""
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(prk, block + info + bytes([counter]), "sha256")
        out += block
        counter += 1
    return out[:length]


def _proof(secret: bytes, role: bytes, agent_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.digest(secret, b"tfdist-rdzv-" + role + b"|" + agent_nonce + server_nonce, "sha256")


def receive_exactly(sock: socket.socket, count: int, deadline: float) -> bytes:
    """``count`` bytes, or AuthError once the peer closed or ``deadline`` (monotonic) passed."""
    chunks, have = [], 0
    while have < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AuthError("the handshake took too long")
        sock.settimeout(left)
        try:
            chunk = sock.recv(count - have)
        except socket.timeout:
            raise AuthError("the handshake took too long") from None
        except ConnectionResetError:
            chunk = b""
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
        raise AuthError("the handshake took too long") from None


class Session:
    """One authenticated connection's keys and frame counters (one sender and one reader thread at a time)."""

    def __init__(self, secret: bytes, agent_nonce: bytes, server_nonce: bytes, *, is_server: bool) -> None:
        prk = hmac.digest(agent_nonce + server_nonce, secret, "sha256")  # HKDF-Extract once, both directions
        to_server = hkdf_expand(prk, b"tfdist-rdzv agent->server")
        to_agent = hkdf_expand(prk, b"tfdist-rdzv server->agent")
        self._send_key, self._receive_key = (to_agent, to_server) if is_server else (to_server, to_agent)
        self._sent = 0
        self._received = 0

    def seal(self, payload: bytes) -> bytes:
        """One frame for ``payload``; call in sending order."""
        if len(payload) > MAX_FRAME:
            raise ValueError(f"a {len(payload)}-byte message is over the {MAX_FRAME}-byte frame limit")
        head = _LENGTH.pack(len(payload))
        tag = hmac.digest(self._send_key, _SEQ.pack(self._sent) + head + payload, "sha256")
        self._sent += 1
        return head + payload + tag

    def read_frame(self, receive: Callable[[int], bytes]) -> bytes:
        """The next frame's payload; ``receive(n)`` returns exactly n bytes (or raises). Raises AuthError."""
        head = receive(_LENGTH.size)
        (length,) = _LENGTH.unpack(head)
        if length > MAX_FRAME:
            raise AuthError(f"a frame of {length} bytes is over the {MAX_FRAME}-byte limit")
        body = receive(length + MAC)
        payload, tag = body[:length], body[length:]
        expected = hmac.digest(self._receive_key, _SEQ.pack(self._received) + head + payload, "sha256")
        if not hmac.compare_digest(tag, expected):
            raise AuthError("a message failed its authentication check (changed, replayed or out of order)")
        self._received += 1
        return payload


def agent_handshake(sock: socket.socket, secret: bytes, timeout: float = HANDSHAKE_S,
                    first: bytes | None = None) -> Session:
    """The agent's side. Raises AuthError (the server did not prove the secret) or OSError.

    ``first``: the payload of the agent's first frame (its join), sealed and written in the same ``sendall`` as the
    agent's proof, so that joining costs the one extra round trip of the challenge and no more. It goes out only
    after the server proved the secret, as the proof does; the server reads the proof before the frame.
    """
    deadline = time.monotonic() + timeout
    agent_nonce = secrets.token_bytes(NONCE)
    _send_before(sock, MAGIC + agent_nonce, deadline)
    answer = receive_exactly(sock, NONCE + MAC, deadline)
    server_nonce, proof = answer[:NONCE], answer[NONCE:]
    if server_nonce == agent_nonce:  # a mirror that echoes our own bytes back proves nothing
        raise AuthError("the server did not prove the job secret")
    if not hmac.compare_digest(proof, _proof(secret, b"server", agent_nonce, server_nonce)):
        raise AuthError("the server did not prove the job secret")
    session = Session(secret, agent_nonce, server_nonce, is_server=False)
    proof = _proof(secret, b"agent", agent_nonce, server_nonce)
    _send_before(sock, proof if first is None else proof + session.seal(first), deadline)
    sock.settimeout(None)
    return session


def pair_sessions(secret: bytes) -> tuple[Session, Session]:
    """The agent's and the server's keys for a connection that never leaves one process (the serving agent joins
    its own server over a socket pair, ``RendezvousServer.join_here``): both ends hold the secret and nobody else
    can reach the pair, so there is nothing to prove; fresh nonces give it keys of its own, as a handshake would,
    and its frames are sealed and checked like any other."""
    agent_nonce, server_nonce = secrets.token_bytes(NONCE), secrets.token_bytes(NONCE)
    return (Session(secret, agent_nonce, server_nonce, is_server=False),
            Session(secret, agent_nonce, server_nonce, is_server=True))


def answer_hello(secret: bytes, hello: bytes) -> tuple[bytes, bytes, bytes]:
    """The bytes that answer ``hello`` (the server's nonce and proof), the agent's nonce and the server's.
    Raises AuthError when ``hello`` is not an agent's."""
    if len(hello) != HELLO or not hmac.compare_digest(hello[: len(MAGIC)], MAGIC):
        raise AuthError("not a tfdist agent")
    agent_nonce = hello[len(MAGIC):]
    server_nonce = secrets.token_bytes(NONCE)
    return server_nonce + _proof(secret, b"server", agent_nonce, server_nonce), agent_nonce, server_nonce


def agent_proof(secret: bytes, agent_nonce: bytes, server_nonce: bytes) -> bytes:
    """What the agent must answer to the challenge over these nonces (compare with ``hmac.compare_digest``)."""
    return _proof(secret, b"agent", agent_nonce, server_nonce)
