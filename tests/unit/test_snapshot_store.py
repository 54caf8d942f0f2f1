"""The snapshot file and folder: whole files only; torn, corrupted, mixed-step and other-model files are refused."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from tfdist.runtime.snapshots.format import ArraySpec, SnapshotRefused, chunks, decode, fingerprint, verify_file
from tfdist.runtime.snapshots.store import SnapshotStore, snapshot_name
from tfdist.runtime.snapshots.writer import BackgroundWriter

SPECS = [ArraySpec("dense/kernel:0", "<f4", (4, 3)), ArraySpec("iter:0", "<i8", ())]


def state(step: int) -> list[np.ndarray]:
    return [np.full((4, 3), step, dtype=np.float32), np.array(step, dtype=np.int64)]


def encoded(step: int) -> bytes:
    return b"".join(bytes(c) for c in chunks(step, state(step), SPECS, {"epoch": 0, "batch": step}))


def test_round_trip_keeps_arrays_step_and_meta():
    snap = decode(encoded(7), expect_step=7, expect_fingerprint=fingerprint(SPECS))
    assert snap.step == 7 and snap.meta == {"epoch": 0, "batch": 7}
    assert [a.tolist() for a in snap.arrays] == [a.tolist() for a in state(7)]


@pytest.mark.parametrize("cut", [0, 5, 13, 40, -40, -9, -1])
def test_torn_file_is_refused(cut):
    data = encoded(3)
    with pytest.raises(SnapshotRefused):
        decode(data[:cut])


def test_flipped_byte_is_refused():
    data = bytearray(encoded(3))
    data[len(data) // 2] ^= 0x01
    with pytest.raises(SnapshotRefused, match="checksum"):
        decode(bytes(data))


@pytest.mark.parametrize("damage", ["cut 0", "cut 5", "cut 13", "cut 40", "cut -40", "cut -9", "cut -1", "flip",
                                    "grow"])
def test_the_streaming_check_refuses_what_decode_refuses(tmp_path, damage):
    # verify_file is what an agent runs on a snapshot copied from another machine (in blocks, no arrays built)
    data = bytearray(encoded(3))
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    elif damage == "grow":
        data[-8:-8] = b"x"
    else:
        data = data[:int(damage.split()[1])]
    path = tmp_path / "snap"
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotRefused):
        decode(bytes(data))
    with pytest.raises(SnapshotRefused):
        verify_file(str(path), expect_step=3)


def test_the_streaming_check_accepts_a_whole_file_of_its_step_only(tmp_path):
    path = tmp_path / "snap"
    path.write_bytes(encoded(3))
    verify_file(str(path), expect_step=3)
    with pytest.raises(SnapshotRefused, match="mixed"):
        verify_file(str(path), expect_step=4)


def test_file_named_for_another_step_is_refused():
    with pytest.raises(SnapshotRefused, match="mixed"):
        decode(encoded(3), expect_step=4)


def test_other_model_is_refused():
    other = fingerprint([ArraySpec("dense/kernel:0", "<f4", (4, 4))])
    with pytest.raises(SnapshotRefused, match="another model"):
        decode(encoded(3), expect_fingerprint=other)


def test_store_keeps_two_newest_and_lists_only_whole_files(tmp_path):
    store = SnapshotStore(tmp_path)
    assert store.claim_writer()
    for step in (1, 2, 3):
        store.write(step, state(step), SPECS, {})
    assert store.steps() == [3, 2]
    (tmp_path / ".partial-4-123").write_bytes(encoded(4)[:50])  # a writer killed mid-write
    (tmp_path / snapshot_name(5)).write_bytes(encoded(5)[:-3])  # torn (cannot happen via rename, but refused)
    (tmp_path / snapshot_name(6)).write_bytes(encoded(2))  # a file renamed to another step
    assert store.steps() == [6, 5, 3, 2]
    assert store.loadable(fingerprint(SPECS)) == [3, 2]
    assert os.stat(tmp_path / snapshot_name(3)).st_mode & 0o777 == 0o600


def test_prune_above_drops_an_abandoned_future(tmp_path):
    store = SnapshotStore(tmp_path)
    for step in (8, 9):
        store.write(step, state(step), SPECS, {})
    store.prune(above=8)
    assert store.steps() == [8]


def test_one_writer_per_folder_and_stale_partials_go(tmp_path):
    first, second = SnapshotStore(tmp_path), SnapshotStore(tmp_path)
    assert first.claim_writer()
    assert not second.claim_writer()
    (tmp_path / ".partial-4-123").write_bytes(b"x")
    first.release_writer()
    assert second.claim_writer()
    assert not (tmp_path / ".partial-4-123").exists()
    second.release_writer()


def test_background_writer_writes_the_newest_it_was_given(tmp_path):
    store = SnapshotStore(tmp_path)
    writer = BackgroundWriter(store, SPECS)
    for step in range(1, 30):
        writer.submit(step, state(step), {})
    writer.close()
    assert writer.failed is None and writer.written_step == 29
    assert store.steps()[0] == 29 and store.load(29).arrays[1] == 29


# A writer process that snapshots big arrays (every value = the step) as fast as it can, until killed.
_WRITER = """
import sys, numpy as np
from tfdist.runtime.snapshots.format import ArraySpec
from tfdist.runtime.snapshots.store import SnapshotStore
store = SnapshotStore(sys.argv[1]); assert store.claim_writer()
specs = [ArraySpec("w", "<f4", (8, 2**20)), ArraySpec("step", "<i8", ())]
step = 0
while True:
    step += 1
    store.write(step, [np.full((8, 2**20), step, np.float32), np.array(step, np.int64)], specs, {})
"""


@pytest.fixture
def shm_dir():
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    path = base / f"tfdist-test-{uuid.uuid4().hex[:10]}"
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _size(path: Path) -> int:
    """The size of a partial file, or 0 when the writer renamed it between the listing and this call."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_sigkill_during_a_write_leaves_the_previous_snapshot_whole(shm_dir):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    landed_mid_write = 0
    for _ in range(5):
        for leftover in shm_dir.iterdir():
            leftover.unlink()
        child = subprocess.Popen([sys.executable, "-c", _WRITER, str(shm_dir)], env=env)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # a whole snapshot exists and the next one is half-written
                partial = [p for p in shm_dir.glob(".partial-*") if _size(p) > 4096]
                if partial and SnapshotStore(shm_dir).steps():
                    break
                time.sleep(0.001)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait(timeout=30)
        partial = list(shm_dir.glob(".partial-*"))
        landed_mid_write += bool(partial)
        store = SnapshotStore(shm_dir)
        steps = store.steps()
        assert steps, "no whole snapshot survived the kill"
        for step in steps:
            snap = store.load(step)  # whole, checksummed, and every value from that one step
            assert int(snap.arrays[1]) == step and np.all(snap.arrays[0] == step)
        for path in partial:
            data = path.read_bytes()
            if len(data) < 8 * 2**20 * 4:  # killed before its last byte (not in the instant before the rename)
                with pytest.raises(SnapshotRefused):
                    decode(data)
        assert store.claim_writer() and not list(shm_dir.glob(".partial-*"))
        store.release_writer()
    assert landed_mid_write, "the kill never landed during a write in 5 tries"


def test_a_removed_folder_turns_snapshots_off_without_failing(tmp_path, capsys):
    from tfdist.runtime.snapshots.session import SnapshotSession
    from tfdist.runtime.snapshots.settings import SnapshotSettings

    class Variables:  # the session's view of the state, without TensorFlow
        nbytes, variables, specs = 100, [], SPECS

    session = SnapshotSession(Variables(), None, SnapshotSettings(True, str(tmp_path / "gone")))
    assert session.start_writing() is False
    assert "tfdist: snapshots off:" in capsys.readouterr().err
    assert session.writer is None
