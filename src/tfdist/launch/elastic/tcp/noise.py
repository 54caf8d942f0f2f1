"""The Noise Protocol Framework (revision 34), only what ``Noise_NNpsk2_25519_AESGCM_SHA256`` needs.

This is the published construction transcribed, not a design of ours: the names below are the specification's
(§5 CipherState, SymmetricState, HandshakeState; §7 the NN pattern, §9 the psk2 modifier), and
``tests/unit/elastic/tcp/test_rdzv_noise_vectors.py`` checks it byte for byte against cacophony's published test
vector for this protocol. The primitives are ``cryptography``'s (X25519, AES-256-GCM) and the standard library's
HMAC-SHA256 (Noise's HKDF is its own two-line use of HMAC, §4.3, not RFC 5869's expand).

NNpsk2::

    -> e                 the initiator's ephemeral key (with a psk, e is mixed into the key too: the
                         message's empty payload carries a tag, though under no secret yet)
    <- e, ee, psk        the responder's ephemeral key, their Diffie-Hellman, then the pre-shared key:
                         the payload's tag is the first thing only a holder of the psk can make

Neither side has a static key: who may talk is what the psk proves, and the ephemeral keys give forward secrecy
(a secret learned later does not open recorded traffic). Nothing here touches a socket.
"""
from __future__ import annotations

import hashlib
import hmac

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

PROTOCOL_NAME = b"Noise_NNpsk2_25519_AESGCM_SHA256"
DHLEN = 32
HASHLEN = 32
TAG = 16
MAX_MESSAGE = 65535  # §3: every Noise message, handshake or transport, is at most this many bytes
MAX_NONCE = (1 << 64) - 1  # §5.1: reserved; a CipherState that reaches it is used up


class NoiseError(Exception):
    """A message failed its tag, a key was unusable, or a CipherState is used up."""


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, "sha256")


def hkdf(chaining_key: bytes, input_key_material: bytes, outputs: int) -> tuple[bytes, ...]:
    """§4.3's HKDF: two or three HASHLEN outputs."""
    temp_key = _hmac(chaining_key, input_key_material)
    out, block = [], b""
    for counter in range(1, outputs + 1):
        block = _hmac(temp_key, block + bytes([counter]))
        out.append(block)
    return tuple(out)


def public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


class CipherState:
    """§5.1: a key and a 64-bit counter; AESGCM's nonce is 32 zero bits then the counter big-endian (§12.3)."""

    __slots__ = ("_key", "_cipher", "n")

    def __init__(self, key: bytes | None = None) -> None:
        self._key, self._cipher = key, None  # the AES context is made at first use: half the handshake's keys
        self.n = 0  # are replaced before they encrypt anything

    @property
    def has_key(self) -> bool:
        return self._key is not None

    @property
    def _aead(self) -> AESGCM | None:
        if self._cipher is None and self._key is not None:
            self._cipher = AESGCM(self._key)
        return self._cipher

    def _nonce(self) -> bytes:
        if self.n >= MAX_NONCE:
            raise NoiseError("this direction's 2^64 - 1 messages are used up")
        return b"\0\0\0\0" + self.n.to_bytes(8, "big")

    def encrypt_with_ad(self, ad: bytes, plaintext: bytes) -> bytes:
        aead = self._aead
        if aead is None:
            return plaintext
        sealed = aead.encrypt(self._nonce(), plaintext, ad or None)
        self.n += 1
        return sealed

    def decrypt_with_ad(self, ad: bytes, ciphertext: bytes) -> bytes:
        aead = self._aead
        if aead is None:
            return ciphertext
        try:
            opened = aead.decrypt(self._nonce(), ciphertext, ad or None)
        except InvalidTag:
            raise NoiseError("a message failed its authentication tag") from None
        self.n += 1  # only after it decrypted (§5.1: a failed message does not use up the nonce)
        return opened


class SymmetricState:
    """§5.2: the chaining key, the handshake hash and the CipherState of the handshake."""

    __slots__ = ("ck", "h", "cipher")

    def __init__(self, ck: bytes, h: bytes) -> None:
        self.ck, self.h, self.cipher = ck, h, CipherState()

    @classmethod
    def initialized(cls, prologue: bytes) -> SymmetricState:
        """InitializeSymmetric(protocol_name) then MixHash(prologue) (the name is HASHLEN bytes: h is the name)."""
        h = PROTOCOL_NAME.ljust(HASHLEN, b"\0")
        state = cls(h, h)
        state.mix_hash(prologue)
        return state

    def copy(self) -> SymmetricState:
        """A fresh handshake from a computed start (the prologue is fixed, so its hash is computed once)."""
        return SymmetricState(self.ck, self.h)

    def mix_key(self, input_key_material: bytes) -> None:
        self.ck, temp_k = hkdf(self.ck, input_key_material, 2)
        self.cipher = CipherState(temp_k)

    def mix_hash(self, data: bytes) -> None:
        self.h = hashlib.sha256(self.h + data).digest()

    def mix_key_and_hash(self, input_key_material: bytes) -> None:
        self.ck, temp_h, temp_k = hkdf(self.ck, input_key_material, 3)
        self.mix_hash(temp_h)
        self.cipher = CipherState(temp_k)

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        ciphertext = self.cipher.encrypt_with_ad(self.h, plaintext)
        self.mix_hash(ciphertext)
        return ciphertext

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        plaintext = self.cipher.decrypt_with_ad(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return plaintext

    def split(self) -> tuple[CipherState, CipherState]:
        """The initiator's sending CipherState, then the responder's."""
        temp_k1, temp_k2 = hkdf(self.ck, b"", 2)
        return CipherState(temp_k1), CipherState(temp_k2)


def new_ephemeral() -> X25519PrivateKey:
    return X25519PrivateKey.generate()


def _dh(private: X25519PrivateKey, public: bytes) -> bytes:
    try:
        return private.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:  # a low-order point: the shared value would be all zeros (§12.1 allows refusing it)
        raise NoiseError("the peer's ephemeral key is not usable") from None


class Initiator:
    """NNpsk2's initiator: :meth:`write_e` (message 1), then :meth:`read_response` (message 2) gives the
    CipherStates (send, receive). ``start``: :meth:`SymmetricState.initialized` for the prologue. ``psk`` is
    first used by message 2, so it may be set (:attr:`psk`) after message 1 was written."""

    def __init__(self, start: SymmetricState, psk: bytes = b"", ephemeral: X25519PrivateKey | None = None) -> None:
        self._state, self.psk = start.copy(), psk
        self._e = ephemeral or X25519PrivateKey.generate()

    def write_e(self, payload: bytes = b"") -> bytes:
        e = public_bytes(self._e)
        self._state.mix_hash(e)
        self._state.mix_key(e)  # §9.2: with a psk, every e token also mixes the key
        return e + self._state.encrypt_and_hash(payload)

    def read_response(self, message: bytes) -> tuple[bytes, tuple[CipherState, CipherState]]:
        """Message 2's payload and (send, receive). Raises NoiseError: the responder does not hold the psk."""
        if len(message) < DHLEN + TAG:
            raise NoiseError("message 2 is too short")
        remote_e = message[:DHLEN]
        self._state.mix_hash(remote_e)
        self._state.mix_key(remote_e)
        self._state.mix_key(_dh(self._e, remote_e))  # ee
        if len(self.psk) != 32:
            raise NoiseError("no 32-byte psk")
        self._state.mix_key_and_hash(self.psk)  # psk
        payload = self._state.decrypt_and_hash(message[DHLEN:])
        return payload, self._state.split()

    @property
    def handshake_hash(self) -> bytes:
        return self._state.h


class Responder:
    """NNpsk2's responder: :meth:`read_e` (message 1), then :meth:`write_response` (message 2) gives the
    CipherStates (send, receive)."""

    def __init__(self, start: SymmetricState, psk: bytes, ephemeral: X25519PrivateKey | None = None) -> None:
        self._state, self._psk = start.copy(), psk
        self._e = ephemeral
        self._remote_e = b""

    def read_e(self, message: bytes) -> bytes:
        """Message 1's payload. Raises NoiseError (its tag is under no secret: this checks only its integrity)."""
        if len(message) < DHLEN + TAG:
            raise NoiseError("message 1 is too short")
        self._remote_e = message[:DHLEN]
        self._state.mix_hash(self._remote_e)
        self._state.mix_key(self._remote_e)
        return self._state.decrypt_and_hash(message[DHLEN:])

    def write_response(self, payload: bytes = b"") -> tuple[bytes, tuple[CipherState, CipherState]]:
        """Message 2 and (send, receive). Raises NoiseError when message 1's key is not usable."""
        e_key = self._e or X25519PrivateKey.generate()
        e = public_bytes(e_key)
        self._state.mix_hash(e)
        self._state.mix_key(e)
        self._state.mix_key(_dh(e_key, self._remote_e))  # ee
        self._state.mix_key_and_hash(self._psk)  # psk
        message = e + self._state.encrypt_and_hash(payload)
        to_initiator, from_initiator = self._state.split()[::-1]
        return message, (to_initiator, from_initiator)

    @property
    def handshake_hash(self) -> bytes:
        return self._state.h
