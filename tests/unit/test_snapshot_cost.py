"""The cheaper snapshot path gives the same bytes and values: the header built from cached layout parts, the file
written with few writev calls (short writes included), and the host copy from precomputed slices."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tfdist.runtime.snapshots.format import VERSION, ArraySpec, decode, encode_header, fingerprint
from tfdist.runtime.snapshots.store import SnapshotStore, write_all

SPECS = [ArraySpec("dense/kernel:0", "<f4", (4, 3)), ArraySpec("iter:0", "<i8", ()),
         ArraySpec("rng:layer_with_weights-0", "<i8", (3,))]


def reference_header(step, specs, meta, model_count=None) -> bytes:
    """The header as the format defines it: the JSON dump of its fields."""
    model = len(specs) if model_count is None else model_count
    return json.dumps({"version": VERSION, "step": int(step), "fingerprint": fingerprint(specs), "meta": dict(meta),
                       "arrays": [[s.name, s.dtype, list(s.shape)] for s in specs], "model": model,
                       "model_fingerprint": fingerprint(specs[:model])}, separators=(",", ":")).encode()


def _written(tmp_path, buffers) -> bytes:
    """What ``write_all`` of ``buffers`` leaves in a new file."""
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        write_all(fd, buffers)
    finally:
        os.close(fd)
    return path.read_bytes()


@pytest.mark.parametrize("specs, meta, model_count", [
    (SPECS, {"epoch": 0, "batch": 7}, None),
    (SPECS, {}, 2),
    (SPECS[:1], {"note": "quote \" and unicode \u00e9"}, 0),
    ([ArraySpec("task:input:0", "|u1", (0,))], {"epoch": 3}, 1),
])
def test_the_header_is_the_json_of_its_fields(specs, meta, model_count):
    for step in (0, 17, 10**12):
        assert encode_header(step, specs, meta, model_count) == reference_header(step, specs, meta, model_count)


def test_a_changed_layout_is_not_served_from_the_cache():
    first = encode_header(1, SPECS, {}, 2)
    changed = SPECS[:2] + [ArraySpec("rng:layer_with_weights-0", "<i8", (4,))]
    assert encode_header(1, changed, {}, 2) == reference_header(1, changed, {}, 2) != first
    assert encode_header(1, SPECS, {}, 1) == reference_header(1, SPECS, {}, 1)  # same list, other model count


@pytest.mark.parametrize("limit", [1, 5, 64, None])
def test_write_all_goes_on_after_short_writes(tmp_path, monkeypatch, limit):
    buffers = [b"head", memoryview(np.arange(300, dtype=np.float32)).cast("B"), b"", bytes(range(256)) * 3, b"end"]
    real = os.writev
    calls = []

    def short(fd, bufs):
        calls.append(len(bufs))
        if limit is None:
            return real(fd, bufs)
        data = b"".join(bytes(b) for b in bufs)[:limit]
        return os.write(fd, data)

    monkeypatch.setattr(os, "writev", short)
    assert _written(tmp_path, buffers) == b"".join(bytes(b) for b in buffers)
    if limit is None:
        assert calls == [len(buffers)]  # one system call for the whole file


def test_write_all_splits_more_buffers_than_one_call_takes(tmp_path):
    buffers = [bytes([i % 256]) * 3 for i in range(2500)]
    assert _written(tmp_path, buffers) == b"".join(buffers)


def test_a_stored_snapshot_reads_back_exactly(tmp_path):
    store = SnapshotStore(tmp_path)
    arrays = [np.arange(12, dtype=np.float32).reshape(4, 3), np.array(9, dtype=np.int64), np.array([1, 2, 3])]
    store.write(9, arrays, SPECS, {"epoch": 1, "batch": 2}, 2)
    snap = decode((tmp_path / "snap-000000000009.tfsnap").read_bytes(), expect_step=9)
    assert [a.tolist() for a in snap.arrays] == [a.tolist() for a in arrays[:2]]
    assert snap.extras["rng:layer_with_weights-0"].tolist() == [1, 2, 3]
    assert dict(snap.meta) == {"epoch": 1, "batch": 2}


@pytest.mark.slow
@pytest.mark.tf
def test_the_host_copy_follows_every_change_of_the_variables():
    tf = pytest.importorskip("tensorflow")
    from tfdist.runtime.snapshots.variables import TrainingVariables

    kernel = tf.Variable(np.zeros((4, 3), np.float32))
    step = tf.Variable(np.int64(0))
    bias = tf.Variable(np.zeros(5, np.float32))
    rng = tf.Variable(np.zeros(3, np.int64))
    variables = TrainingVariables([kernel, step, bias], [("rng:0", rng)])
    for i in range(1, 4):
        kernel.assign(np.full((4, 3), i, np.float32) + np.arange(12, dtype=np.float32).reshape(4, 3))
        step.assign(i)
        bias.assign(np.arange(5, dtype=np.float32) * i)
        rng.assign([i, 2 * i, 3 * i])
        copied = variables.copy()
        assert [c.shape for c in copied] == [(4, 3), (), (5,), (3,)]
        assert np.array_equal(copied[0], kernel.numpy()) and int(copied[1]) == i
        assert np.array_equal(copied[2], bias.numpy()) and copied[3].tolist() == [i, 2 * i, 3 * i]
