"""Copying backups between machines without a shared filesystem: what counts as complete, and that a copy whose
checksum does not match is never swapped in. Files named as tf-keras' BackupAndRestore names them."""
from __future__ import annotations

import base64
import os
from types import SimpleNamespace

import pytest

from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.agent.backup_copy import BackupStore
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay


def write_backup(root, counter: int, shards: int = 1, drop: str | None = None) -> None:
    folder = root / "backup" / "chief"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{counter}"\n'
                                       f'all_model_checkpoint_paths: "ckpt-{counter}"\n')
    names = [f"ckpt-{counter}.index"] + [f"ckpt-{counter}.data-{k:05d}-of-{shards:05d}" for k in range(shards)]
    for name in names:
        if name != drop:
            (folder / name).write_bytes(f"{name} payload".encode() * 1000)


def test_a_complete_backup_is_offered_with_checksums(tmp_path):
    write_backup(tmp_path, 7, shards=2)
    manifest = BackupStore(str(tmp_path), "job").manifest()
    assert manifest["name"] == "ckpt-7"
    assert sorted(manifest["files"]) == ["checkpoint", "ckpt-7.data-00000-of-00002", "ckpt-7.data-00001-of-00002",
                                         "ckpt-7.index"]
    assert all(len(d) == 64 for d in manifest["files"].values())


def test_an_incomplete_backup_is_never_offered(tmp_path):
    write_backup(tmp_path, 7, shards=2, drop="ckpt-7.data-00001-of-00002")
    assert BackupStore(str(tmp_path), "job").manifest()["name"] is None


def test_machines_sharing_a_directory_share_its_id(tmp_path):
    assert BackupStore(str(tmp_path), "job").filesystem_id() == BackupStore(str(tmp_path), "job").filesystem_id()
    assert BackupStore(str(tmp_path / "other"), "job").filesystem_id() != BackupStore(str(tmp_path), "job") \
        .filesystem_id()


class Pipe:
    """What the rendezvous would forward: the sender's messages, readable by the receiver."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    def send(self, message: M.Message) -> bool:
        self.messages.append(M.as_dict(message))
        return True


def _file(name, data: bytes, **flags):
    return {"type": "file", "name": name, "data": base64.b64encode(data).decode(), **flags}


PING = {"type": "ping"}


def _checked(raw: dict | None) -> M.Message | None:
    """What the receiver's link hands on: the message as a frame's decode checks it (``messages.from_fields``)."""
    return None if raw is None else M.from_fields(raw)


def _restore(manifest, **changes):
    return {"name": manifest["name"], "files": manifest["files"], "sizes": manifest["sizes"], "from": "m1",
            **changes}


def transfer(tmp_path, corrupt: bool = False, edit=None, restore_changes=None, max_bytes=None):
    write_backup(tmp_path / "a", 9)
    source, target = BackupStore(str(tmp_path / "a"), "job"), BackupStore(str(tmp_path / "b"), "job")
    if max_bytes:
        target.max_bytes = max_bytes
    write_backup(tmp_path / "b", 3)  # an older backup already there
    manifest = source.manifest()
    pipe = Pipe()
    source.upload(pipe, M.Send(round=1, name=manifest["name"], files=manifest["files"]))
    if corrupt:
        flipped = bytearray(base64.b64decode(pipe.messages[1]["data"]))
        flipped[10] ^= 0xFF  # same size, other bytes
        pipe.messages[1]["data"] = base64.b64encode(bytes(flipped)).decode()
    if edit:
        edit(pipe.messages)
    queue = iter(pipe.messages)
    said: list[str] = []
    ok, other = target.await_restore(_restore(manifest, **(restore_changes or {})), lambda: _checked(next(queue, PING)),
                                     said.append)
    return ok, other, target, said


def test_a_verified_copy_replaces_the_older_backup_and_keeps_it_aside(tmp_path):
    ok, other, target, said = transfer(tmp_path)
    assert ok and other is None and target.manifest()["name"] == "ckpt-9"
    assert "SHA-256 checked" in said[-1]
    backup = tmp_path / "b" / "backup"
    assert sorted(p.name for p in backup.iterdir()) == ["chief", "chief.previous"]  # no leftovers
    assert (backup / "chief.previous" / "ckpt-3.index").exists()


def test_a_mismatched_copy_is_never_restored(tmp_path):
    ok, _, target, said = transfer(tmp_path, corrupt=True)
    assert not ok and "checksum mismatch" in said[-1] and said[-1].endswith("not restored")
    assert target.manifest()["name"] == "ckpt-3"  # the old backup is untouched
    assert not [p for p in (tmp_path / "b" / "backup").iterdir() if p.name != "chief"]


# -- item 8: the receiving side is bounded -----------------------------------------------------------------------
def test_a_file_bigger_than_its_manifest_says_is_not_restored(tmp_path):
    def grow(messages):
        messages.insert(1, _file(messages[1]["name"], b"x" * 100000))

    ok, _, target, said = transfer(tmp_path, edit=grow)
    assert not ok and "bigger than its manifest says" in said[-1]
    assert target.manifest()["name"] == "ckpt-3"


def test_an_endless_stream_of_chunks_stops_at_the_declared_size(tmp_path):
    def endless(messages):
        chunk = _file(messages[0]["name"], b"y" * 4096)
        messages[:] = [chunk] * 100000  # never "last"

    ok, _, _, said = transfer(tmp_path, edit=endless)
    assert not ok and "bigger than its manifest says" in said[-1]


def test_over_the_total_size_limit_is_not_restored_before_a_byte_is_written(tmp_path):
    ok, _, target, said = transfer(tmp_path, max_bytes=1000)
    assert not ok and "over the 1000-byte limit" in said[-1]
    assert not [p for p in (tmp_path / "b" / "backup").iterdir() if p.name != "chief"]


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs-path", "sub/ckpt-9.index", "..", ".hidden"])
def test_a_manifest_naming_a_path_outside_the_folder_is_not_restored(tmp_path, name):
    files = {name: "ab" * 32}
    ok, _, _, said = transfer(tmp_path, restore_changes={"files": files, "sizes": {name: 1}})
    assert not ok and "not a backup's" in said[-1]
    assert not (tmp_path / "escaped").exists() and not os.path.exists("/tmp/abs-path")


def test_a_copy_that_stalls_hits_its_deadline(tmp_path, monkeypatch):
    from tfdist.launch.elastic.agent import backup_copy

    monkeypatch.setattr(backup_copy, "MIN_DEADLINE_S", 0.2)
    write_backup(tmp_path / "a", 9)
    manifest = BackupStore(str(tmp_path / "a"), "job").manifest()
    target = BackupStore(str(tmp_path / "b"), "job")
    said: list[str] = []
    ok, _ = target.await_restore(_restore(manifest), lambda: None, said.append)  # nothing ever arrives
    assert not ok and "did not finish in time" in said[-1]


def test_a_fifo_planted_in_the_backup_folder_is_never_opened(tmp_path):
    write_backup(tmp_path / "a", 9)
    store = BackupStore(str(tmp_path / "a"), "job")
    shard = tmp_path / "a" / "backup" / "chief" / "ckpt-9.data-00000-of-00001"
    shard.unlink()
    os.mkfifo(shard)
    assert store.manifest()["name"] is None  # not offered (reading a FIFO would block forever)
    pipe = Pipe()
    store.upload(pipe, M.Send(round=1, name="ckpt-9", files={"ckpt-9.data-00000-of-00001": "ab" * 32}))
    assert pipe.messages == []


# -- item 2: whose backup to trust ---------------------------------------------------------------------------------
def _node(node_id, fs, name, digest=None):
    files = {"checkpoint": digest or f"{name}-sum"} if name else None
    return SimpleNamespace(node_id=node_id, label=f"m{node_id}", backup={"fs": fs, "name": name, "files": files,
                                                                        "sizes": {"checkpoint": 1} if name else None})


def _round(*ids):
    return SimpleNamespace(assignments=[SimpleNamespace(node_id=i, node_rank=r) for r, i in enumerate(ids)])


def test_the_relay_sends_the_newest_backup_only_where_it_is_missing():
    nodes = {1: _node(1, "A", "ckpt-9"), 2: _node(2, "A", "ckpt-9"), 3: _node(3, "B", "ckpt-4"), 4: _node(4, "C", None)}
    sent = []
    relay = BackupRelay(lambda *a, **k: sent.append((a, k)) or True)
    plan = relay.plan(nodes, _round(1, 2, 3, 4))
    assert sorted(plan) == [3, 4] and plan[3]["name"] == "ckpt-9" and plan[3]["from"] == "m1"
    relay.request_upload(2)
    assert sent == [((1, "send"), {"round": 2, "name": "ckpt-9", "files": {"checkpoint": "ckpt-9-sum"}})]


def test_a_member_advertising_a_fake_newer_backup_cannot_replace_the_real_one():
    said: list[str] = []
    relay = BackupRelay(lambda *a, **k: True, said.append)
    # round 0: m1 (node rank 0, the chief) has the real backup; m2 and m3 have none and get it
    nodes = {1: _node(1, "A", "ckpt-5"), 2: _node(2, "B", None), 3: _node(3, "C", None)}
    assert sorted(relay.plan(nodes, _round(1, 2, 3))) == [2, 3]
    # round 1: the chief wrote ckpt-9; m3 now claims a "newer" ckpt-99 of its own making
    nodes = {1: _node(1, "A", "ckpt-9"), 2: _node(2, "B", "ckpt-5"), 3: _node(3, "C", "ckpt-99", "f" * 64)}
    plan = relay.plan(nodes, _round(1, 2, 3))
    assert {p["name"] for p in plan.values()} == {"ckpt-9"} and sorted(plan) == [2, 3]
    assert all(p["from"] == "m1" for p in plan.values())
    assert any("ignoring backup ckpt-99 offered by m3" in line for line in said)


def test_with_the_chief_gone_the_last_trusted_backup_stays_the_jobs():
    relay = BackupRelay(lambda *a, **k: True)
    relay.plan({1: _node(1, "A", "ckpt-5"), 2: _node(2, "B", None)}, _round(1, 2))
    # the chief (m1) is lost; m2 holds the copy of ckpt-5, a newcomer m4 claims ckpt-50
    plan = relay.plan({2: _node(2, "B", "ckpt-5"), 4: _node(4, "D", "ckpt-50")}, _round(2, 4))
    assert sorted(plan) == [4] and plan[4]["name"] == "ckpt-5" and plan[4]["from"] == "m2"


def test_a_relay_forwards_only_the_planned_sources_planned_files():
    sent = []
    relay = BackupRelay(lambda *a, **k: sent.append((a, k)) or True)
    relay.plan({1: _node(1, "A", "ckpt-9"), 2: _node(2, "B", None)}, _round(1, 2))
    chunk = {"type": "file", "name": "checkpoint", "data": "", "end": True, "last": True}
    relay.on_upload(2, chunk)  # not the source
    relay.on_upload(1, {**chunk, "name": "ckpt-9.index"})  # not a planned file
    relay.on_upload(1, chunk)
    assert sent == [((2, "file"), {"name": "checkpoint", "data": "", "end": True, "last": True})]
