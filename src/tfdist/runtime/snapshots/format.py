"""The snapshot file: what one training step's state looks like in shared memory (pure: numpy, no TensorFlow).

    magic "TFDSNAP1" | u32 header length | header (JSON) | arrays, one after another | u32 CRC-32 | magic "TFDSEND1"

The header names the step, the layout fingerprint (names, dtypes and shapes of the arrays, in order) and where each
array starts. The CRC covers the header and every array byte. A file counts only when its size, both magics, the
CRC and the step in its name all agree: a writer killed half-way leaves a file that :func:`decode` refuses.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

# The file's framing, layout and check on the launcher's side live in tfdist.protocol (the agent checks copies).
from tfdist.protocol.snapshot_file import (  # noqa: F401 - re-exported
    END, LEN as _LEN, MAGIC, VERSION, ArraySpec, SnapshotRefused, fingerprint, state_bytes, verify_file,
)

@dataclass(frozen=True)
class Snapshot:
    """One whole, verified snapshot."""

    step: int
    fingerprint: str
    arrays: tuple[np.ndarray, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)


def encode_header(step: int, specs: Sequence[ArraySpec], meta: Mapping[str, Any]) -> bytes:
    header = {"version": VERSION, "step": int(step), "fingerprint": fingerprint(specs), "meta": dict(meta),
              "arrays": [[s.name, s.dtype, list(s.shape)] for s in specs]}
    return json.dumps(header, separators=(",", ":")).encode()


def chunks(step: int, arrays: Sequence[np.ndarray], specs: Sequence[ArraySpec],
           meta: Mapping[str, Any]) -> Any:
    """The file's bytes as a sequence of buffers (no concatenated copy), the CRC computed on the way."""
    header = encode_header(step, specs, meta)
    crc = zlib.crc32(header)
    yield MAGIC + _LEN.pack(len(header))
    yield header
    for array in arrays:
        view = memoryview(np.ascontiguousarray(array)).cast("B")
        crc = zlib.crc32(view, crc)
        yield view
    yield _LEN.pack(crc & 0xFFFFFFFF) + END


def decode(data: bytes | memoryview, *, expect_step: int | None = None,
           expect_fingerprint: str | None = None) -> Snapshot:
    """The snapshot in ``data``, verified.

    Raises:
        SnapshotRefused: torn (too short, no end magic), corrupted (CRC), another step than ``expect_step``,
            another layout than ``expect_fingerprint``.
    """
    view = memoryview(data)
    fixed = len(MAGIC) + _LEN.size
    if len(view) < fixed + _LEN.size + len(END) or bytes(view[:len(MAGIC)]) != MAGIC:
        raise SnapshotRefused("not a snapshot (no start magic or too short)")
    if bytes(view[-len(END):]) != END:
        raise SnapshotRefused("torn: no end magic (the writer stopped half-way)")
    (header_len,) = _LEN.unpack(view[len(MAGIC):fixed])
    try:
        header = json.loads(bytes(view[fixed:fixed + header_len]))
        specs = [ArraySpec(str(n), str(d), tuple(int(x) for x in s)) for n, d, s in header["arrays"]]
        step = int(header["step"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotRefused(f"unreadable header: {exc}") from None
    body_end = len(view) - _LEN.size - len(END)
    if fixed + header_len + state_bytes(specs) != body_end:
        raise SnapshotRefused("torn: the size does not match the header")
    (stored_crc,) = _LEN.unpack(view[body_end:body_end + _LEN.size])
    if zlib.crc32(view[fixed:body_end]) & 0xFFFFFFFF != stored_crc:
        raise SnapshotRefused("corrupted: checksum mismatch")
    if header.get("fingerprint") != fingerprint(specs):
        raise SnapshotRefused("corrupted: the layout does not match its fingerprint")
    if expect_step is not None and step != expect_step:
        raise SnapshotRefused(f"mixed: the file is named for step {expect_step} but holds step {step}")
    if expect_fingerprint is not None and header["fingerprint"] != expect_fingerprint:
        raise SnapshotRefused("another model: the variables differ from this model's")
    arrays, offset = [], fixed + header_len
    for spec in specs:
        arrays.append(np.frombuffer(view[offset:offset + spec.nbytes], dtype=spec.dtype).reshape(spec.shape).copy())
        offset += spec.nbytes
    return Snapshot(step, header["fingerprint"], tuple(arrays), header.get("meta") or {})
