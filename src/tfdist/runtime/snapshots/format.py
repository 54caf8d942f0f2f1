"""The snapshot file: what one training step's state looks like in shared memory (pure: numpy, no TensorFlow).

    magic "TFDSNAP1" | u32 header length | header (JSON) | arrays, one after another | u32 CRC-32 | magic "TFDSEND1"

The header names the step, the layout fingerprint (names, dtypes and shapes of the arrays, in order) and where each
array starts. Since format 2 the first ``model`` arrays are the model's variables (matched against the restoring model
by ``model_fingerprint``) and the rest is the state beyond them, by name (``rng:...``, ``task:...``: see
:mod:`~tfdist.runtime.snapshots.extras`), whose layout may change from one snapshot to the next (an iterator's
state has no fixed size). A format-1 file is all model.

The CRC covers the header and every array byte. A file counts only when its size, both magics, the
CRC and the step in its name all agree: a writer killed half-way leaves a file that :func:`decode` refuses.
"""
from __future__ import annotations

import functools
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
    arrays: tuple[np.ndarray, ...]  # the model's variables, in the model's order
    meta: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)  # the state beyond them, by name
    version: int = VERSION


_last_layout: tuple[Any, int, tuple[str, str, str]] = (None, -1, ("", "", ""))


@functools.lru_cache(maxsize=8)
def _layout_json(specs: tuple[ArraySpec, ...], model: int) -> tuple[str, str, str]:
    """The header's parts that depend only on the layout (fingerprints, the array list), serialized once per layout:
    hashing and serializing them for every snapshot was most of the writer's Python time (held under the GIL)."""
    arrays = json.dumps([[s.name, s.dtype, list(s.shape)] for s in specs], separators=(",", ":"))
    return json.dumps(fingerprint(specs)), arrays, json.dumps(fingerprint(specs[:model]))


def encode_header(step: int, specs: Sequence[ArraySpec], meta: Mapping[str, Any],
                  model_count: int | None = None) -> bytes:
    """``model_count``: how many of the arrays (the first) are the model's; the rest is extra state.

    The same bytes as ``json.dumps`` of the header dict with compact separators (a test checks it)."""
    model = len(specs) if model_count is None else model_count
    global _last_layout
    if _last_layout[0] is specs and _last_layout[1] == model:  # the same list as last time: no hashing at all
        whole, arrays, model_part = _last_layout[2]
    else:
        whole, arrays, model_part = _layout_json(tuple(specs), int(model))
        _last_layout = (specs, model, (whole, arrays, model_part))
    meta_json = json.dumps(dict(meta), separators=(",", ":"))
    return (f'{{"version":{VERSION},"step":{int(step)},"fingerprint":{whole},"meta":{meta_json},'
            f'"arrays":{arrays},"model":{int(model)},"model_fingerprint":{model_part}}}').encode()


def chunks(step: int, arrays: Sequence[np.ndarray], specs: Sequence[ArraySpec],
           meta: Mapping[str, Any], model_count: int | None = None) -> Any:
    """The file's bytes as a sequence of buffers (no concatenated copy), the CRC computed on the way."""
    header = encode_header(step, specs, meta, model_count)
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
            another model than ``expect_fingerprint`` (the model part's layout), a newer format than this reader's.
    """
    view = memoryview(data)
    fixed = len(MAGIC) + _LEN.size
    if len(view) < fixed + _LEN.size + len(END) or bytes(view[:len(MAGIC)]) != MAGIC:
        raise SnapshotRefused("not a snapshot (no start magic or too short)")
    if bytes(view[-len(END):]) != END:
        raise SnapshotRefused("torn: no end magic (the writer stopped half-way)")
    # The CRC first (it needs only the framing): a flipped bit anywhere, header included, reads as corruption.
    body_end = len(view) - _LEN.size - len(END)
    (stored_crc,) = _LEN.unpack(view[body_end:body_end + _LEN.size])
    if zlib.crc32(view[fixed:body_end]) & 0xFFFFFFFF != stored_crc:
        raise SnapshotRefused("corrupted: checksum mismatch")
    (header_len,) = _LEN.unpack(view[len(MAGIC):fixed])
    try:
        header = json.loads(bytes(view[fixed:fixed + header_len]))
        specs = [ArraySpec(str(n), str(d), tuple(int(x) for x in s)) for n, d, s in header["arrays"]]
        step = int(header["step"])
        version = int(header.get("version", 1))
        model = int(header.get("model", len(specs)))  # format 1: every array is the model's
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotRefused(f"unreadable header: {exc}") from None
    if fixed + header_len + state_bytes(specs) != body_end:
        raise SnapshotRefused("torn: the size does not match the header")
    if header.get("fingerprint") != fingerprint(specs):
        raise SnapshotRefused("corrupted: the layout does not match its fingerprint")
    if version > VERSION:
        raise SnapshotRefused(f"format {version} is newer than this tfdist reads ({VERSION})")
    if not 0 <= model <= len(specs):
        raise SnapshotRefused(f"unreadable header: {model} model arrays of {len(specs)}")
    if expect_step is not None and step != expect_step:
        raise SnapshotRefused(f"mixed: the file is named for step {expect_step} but holds step {step}")
    model_fingerprint = fingerprint(specs[:model])
    if expect_fingerprint is not None and model_fingerprint != expect_fingerprint:
        raise SnapshotRefused("another model: the variables differ from this model's")
    arrays, offset = [], fixed + header_len
    for spec in specs:
        arrays.append(np.frombuffer(view[offset:offset + spec.nbytes], dtype=spec.dtype).reshape(spec.shape).copy())
        offset += spec.nbytes
    extras = {spec.name: array for spec, array in zip(specs[model:], arrays[model:])}
    return Snapshot(step, model_fingerprint, tuple(arrays[:model]), header.get("meta") or {}, extras, version)
