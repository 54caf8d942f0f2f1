"""How a frame's payload is read: JSON, checked for nesting before the parser recurses; or, for a message that
carries raw bytes (a backup's or snapshot's chunk), a small JSON header and then the bytes as they are.

Why not base64 in JSON, as every other message: a 256 KiB chunk cost the copy about 5 ms per hop in JSON and base64
(issue 34: ~40 MB/s through the rendezvous), which the header form does in microseconds; the rendezvous checks the
header and forwards the bytes without reading them as text.

The form: :data:`MARK` (a byte no JSON text starts with, so every JSON frame reads as before), the header's length
(2 bytes, big-endian, at most :data:`MAX_HEADER`), the header (a message's JSON without its body field), the body.
The header says the body's length and checksum (``protocol.Chunk``); the frame, header and body together, is
authenticated per hop by the wire, and bounded by ``auth.MAX_FRAME`` as any frame.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from tfdist.launch.elastic.messages.fields import ProtocolError

MARK = b"\x00"
MAX_HEADER = 4096
_PREFIX = len(MARK) + 2
# Runs of plain characters in one step: the per-character form ("(?:[^"\\]|\\.)*") took 235 ms over one 256 KiB
# backup or snapshot chunk, checked at the rendezvous and again at the receiver (about 0.5 MiB/s through a relay).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def with_body(header: bytes, body: bytes) -> bytes:
    """One frame's payload: ``header`` (JSON) and ``body`` (raw bytes)."""
    if len(header) > MAX_HEADER:
        raise ProtocolError(f"a {len(header)}-byte header is over the {MAX_HEADER}-byte limit")
    return b"".join((MARK, len(header).to_bytes(2, "big"), header, body))


def split_body(payload: bytes) -> tuple[bytes, bytes | None]:
    """``(header, body)`` of a frame with a body; ``(payload, None)`` for a plain JSON frame. Raises ProtocolError
    for a header length the frame cannot hold."""
    if payload[:1] != MARK:
        return payload, None
    length = int.from_bytes(payload[1:_PREFIX], "big")
    if len(payload) < _PREFIX or length > MAX_HEADER or _PREFIX + length > len(payload):
        raise ProtocolError("a chunk's header is longer than its frame")
    return payload[_PREFIX:_PREFIX + length], payload[_PREFIX + length:]


def _refuse_constant(name: str) -> Any:
    raise ProtocolError(f"{name} is not a number this protocol accepts")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ProtocolError("a number out of range")
    return value


def nesting(payload: bytes) -> int:
    """How deep ``[``/``{`` nest in ``payload``, strings left out: checked before the JSON parser recurses."""
    deepest = depth = 0
    for char in _STRING.sub("", payload.decode("latin-1")):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_json(payload: bytes) -> Any:
    """``payload`` as JSON (no ``NaN``, no ``Infinity``); ProtocolError when it is not JSON."""
    try:
        return json.loads(payload, parse_constant=_refuse_constant, parse_float=_finite)
    except (ValueError, UnicodeDecodeError, RecursionError) as bad:
        raise ProtocolError(str(bad) if isinstance(bad, ProtocolError) else "not a JSON message") from None
