"""The wire's Noise (elastic/tcp/noise.py) against the published test vector for its protocol, byte for byte.

The vector is cacophony's (haskell-cryptography/cacophony, ``vectors/cacophony.txt`` at 36c1e5c3; the same entry
is in snow's ``tests/vectors/cacophony.txt``), the only published one for ``Noise_NNpsk2_25519_AESGCM_SHA256``
that we found (snow's own vectors have no NNpsk2 with AESGCM_SHA256). With its fixed ephemeral keys, prologue and
psk, both handshake messages, the handshake hash and four transport messages (alternating directions after Split)
must come out exactly; then the rendezvous' own handshake (auth.py) must speak with a plain Noise responder and
initiator of this module, which is what a second implementation would be to it.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from tfdist.launch.elastic.tcp import auth, noise

b = bytes.fromhex
VECTOR = {
    "protocol_name": "Noise_NNpsk2_25519_AESGCM_SHA256",
    "prologue": "4a6f686e2047616c74",
    "psk": "54686973206973206d7920417573747269616e20706572737065637469766521",
    "init_ephemeral": "893e28b9dc6ca8d611ab664754b8ceb7bac5117349a4439a6b0569da977c464a",
    "resp_ephemeral": "bbdb4cdbd309f1a1f2e1456967fe288cadd6f712d65dc7b7793d5e63da6b375b",
    "handshake_hash": "dcc300b6aeb3a6876515bb0544fd994f1427bbe1b584ecf9b1e287dcb5051734",
    "messages": [
        ("4c756477696720766f6e204d69736573",
         "ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c7944"
         "549b0edeb71a151500be4f4aed135263975b279d5fe21ece264f1ec3adc09285"),
        ("4d757272617920526f746862617264",
         "95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f144808843"
         "14c03d6656fd93f69704a6afdacfe06a8dde564c658120536e28d2d345bcef"),
        ("462e20412e20486179656b", "cb3f90eca42daa742e587a4b15d925bbe034272897e2854c38a22e"),
        ("4361726c204d656e676572", "34a9d00e66c653b36c0e4f095a7c52d8759673e17dd26054722900"),
        ("4a65616e2d426170746973746520536179", "7ea762eb5a4bd9c06005e720c01c2405e2fc01539be29847b6e3ec3c575f0e46e7"),
        ("457567656e2042f6686d20766f6e2042617765726b",
         "3e42cde21b6a9517beefa279a9672f32ca63f7560f6e0c4a4e62ea75b993b473dccefc228e"),
    ],
}


def _parties():
    start = noise.SymmetricState.initialized(b(VECTOR["prologue"]))
    key = X25519PrivateKey.from_private_bytes
    initiator = noise.Initiator(start, b(VECTOR["psk"]), key(b(VECTOR["init_ephemeral"])))
    responder = noise.Responder(start, b(VECTOR["psk"]), key(b(VECTOR["resp_ephemeral"])))
    return initiator, responder


def test_the_protocol_name_is_the_vectors():
    assert noise.PROTOCOL_NAME.decode() == VECTOR["protocol_name"]


def test_the_handshake_and_transport_messages_match_the_published_vector_byte_for_byte():
    initiator, responder = _parties()
    messages = [(b(p), b(c)) for p, c in VECTOR["messages"]]
    (p1, c1), (p2, c2) = messages[:2]
    assert initiator.write_e(p1) == c1
    assert responder.read_e(c1) == p1
    sent, (responder_send, responder_receive) = responder.write_response(p2)
    assert sent == c2
    payload, (initiator_send, initiator_receive) = initiator.read_response(c2)
    assert payload == p2
    assert initiator.handshake_hash == responder.handshake_hash == b(VECTOR["handshake_hash"])
    for index, (plain, cipher) in enumerate(messages[2:]):  # the initiator first, then turn about
        send, receive = ((initiator_send, responder_receive) if index % 2 == 0 else (responder_send, initiator_receive))
        assert send.encrypt_with_ad(b"", plain) == cipher
        assert receive.decrypt_with_ad(b"", cipher) == plain


def test_a_wrong_psk_or_prologue_fails_the_responders_message_as_the_specification_says():
    for psk, prologue in ((bytes(32), VECTOR["prologue"]), (VECTOR["psk"], "00")):
        start = noise.SymmetricState.initialized(b(prologue))
        initiator = noise.Initiator(start, b(psk) if isinstance(psk, str) else psk,
                                    X25519PrivateKey.from_private_bytes(b(VECTOR["init_ephemeral"])))
        initiator.write_e(b(VECTOR["messages"][0][0]))
        with pytest.raises(noise.NoiseError):
            initiator.read_response(b(VECTOR["messages"][1][1]))


def test_the_nonce_is_32_zero_bits_then_the_counter_big_endian_and_the_last_one_is_never_used():
    state = noise.CipherState(bytes(32))
    state.n = 0x0102030405060708
    assert state._nonce() == bytes(4) + bytes(range(1, 9))
    state.n = noise.MAX_NONCE
    with pytest.raises(noise.NoiseError, match="used up"):
        state.encrypt_with_ad(b"", b"x")


def test_the_rendezvous_handshake_speaks_with_a_plain_noise_responder_and_initiator():
    """auth.py's agent and server each against this module's other role, set up only from the specification's
    inputs (prologue, psk): what an independent implementation of the same protocol would do."""
    psk = auth.wire_key(bytes(range(32)))
    start = noise.SymmetricState.initialized(auth.PROLOGUE)
    # auth's agent against a plain responder
    agent_sock, server_sock = socket.socketpair()
    plain: dict = {}

    def respond() -> None:
        hello = auth.receive_exactly(server_sock, auth.HELLO, deadline=time.monotonic() + 10)
        responder = noise.Responder(start, psk)
        assert hello[: len(auth.MAGIC)] == auth.MAGIC
        responder.read_e(hello[len(auth.MAGIC):])
        answer, (send, receive) = responder.write_response()
        server_sock.sendall(answer)
        receive_bytes = lambda n: auth.receive_exactly(server_sock, n, time.monotonic() + 10)  # noqa: E731
        plain["join"] = auth.Session(send, receive).read_frame(receive_bytes)

    thread = threading.Thread(target=respond)
    thread.start()
    auth.agent_handshake(agent_sock, bytes(range(32)), first=b'{"type":"join"}')
    thread.join(10)
    assert plain["join"] == b'{"type":"join"}'
    # a plain initiator against auth's server
    initiator = noise.Initiator(start, psk)
    answer, server = auth.answer_hello(bytes(range(32)), auth.MAGIC + initiator.write_e())
    _, (send, receive) = initiator.read_response(answer)
    frame = auth.Session(send, receive).seal(b"ready")
    assert server.read_frame(_reader(frame)) == b"ready"
    agent_sock.close()
    server_sock.close()


def _reader(data: bytes):
    view = memoryview(data)
    offset = [0]

    def receive(count: int) -> bytes:
        offset[0] += count
        return bytes(view[offset[0] - count: offset[0]])

    return receive
