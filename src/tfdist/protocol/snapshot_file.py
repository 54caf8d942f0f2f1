"""The in-memory snapshot file as both sides see it: the runtime writes and loads it
(:mod:`tfdist.runtime.snapshots.format`), the multi-machine agent checks a copy it received from another machine
(:mod:`tfdist.launch.elastic.agent.snapshot_copy`) before putting it where its tasks will load it.

    magic "TFDSNAP1" | u32 header length | header (JSON) | arrays, one after another | u32 CRC-32 | magic "TFDSEND1"

Named ``snap-<step, 12 digits>.tfsnap``. No TensorFlow; numpy only when an array's size is asked for.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Sequence

MAGIC = b"TFDSNAP1"
END = b"TFDSEND1"
# 1: the model's variables only. 2: then the state beyond them (random generators, input positions), counted by the
# header's "model" and matched by its "model_fingerprint"; a reader of 2 loads 1 (with no such state).
VERSION = 2
SNAPSHOT_FILE = re.compile(r"snap-([0-9]{12})\.tfsnap")
LEN = struct.Struct("<I")


class SnapshotRefused(ValueError):
    """A snapshot that must not be loaded: torn, corrupted, from another model or another step."""


@dataclass(frozen=True)
class ArraySpec:
    """One array's place in the layout."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        import numpy as np  # here: the agent and the CLI import this module without numpy

        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))


def fingerprint(specs: Sequence[ArraySpec]) -> str:
    """A short hash of the layout: two snapshots with the same fingerprint hold the same variables."""
    text = json.dumps([[s.name, s.dtype, list(s.shape)] for s in specs])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_bytes(specs: Sequence[ArraySpec]) -> int:
    """What one snapshot's arrays take (the file adds a header of a few hundred bytes per array)."""
    return sum(s.nbytes for s in specs)


def snapshot_name(step: int) -> str:
    return f"snap-{step:012d}.tfsnap"


def verify_file(path: str, *, expect_step: int) -> None:
    """Check a snapshot file whole, as ``tfdist.runtime.snapshots.format.decode`` does, but reading it in blocks
    (no copy of the arrays): what the agent checks before it puts a snapshot copied from another machine into its
    folder.

    Raises:
        SnapshotRefused: torn, corrupted, or another step than ``expect_step``.
        OSError: the file cannot be read.
    """
    fixed = len(MAGIC) + LEN.size
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = handle.read(fixed)
        if len(start) < fixed or start[:len(MAGIC)] != MAGIC:
            raise SnapshotRefused("not a snapshot (no start magic or too short)")
        (header_len,) = LEN.unpack(start[len(MAGIC):])
        header_bytes = handle.read(min(header_len, 1 << 26))
        try:
            header = json.loads(header_bytes)
            specs = [ArraySpec(str(n), str(d), tuple(int(x) for x in s)) for n, d, s in header["arrays"]]
            step = int(header["step"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotRefused(f"unreadable header: {exc}") from None
        body_end = fixed + header_len + state_bytes(specs)
        if body_end + LEN.size + len(END) != size:
            raise SnapshotRefused("torn: the size does not match the header")
        crc, left = zlib.crc32(header_bytes), body_end - fixed - len(header_bytes)
        while left > 0:
            block = handle.read(min(left, 1 << 20))
            if not block:
                raise SnapshotRefused("torn: shorter than its header says")
            crc, left = zlib.crc32(block, crc), left - len(block)
        tail = handle.read(LEN.size + len(END))
    if tail[LEN.size:] != END:
        raise SnapshotRefused("torn: no end magic (the writer stopped half-way)")
    if crc & 0xFFFFFFFF != LEN.unpack(tail[:LEN.size])[0]:
        raise SnapshotRefused("corrupted: checksum mismatch")
    if header.get("fingerprint") != fingerprint(specs):
        raise SnapshotRefused("corrupted: the layout does not match its fingerprint")
    if step != expect_step:
        raise SnapshotRefused(f"mixed: the file is named for step {expect_step} but holds step {step}")
