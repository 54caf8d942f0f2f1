"""Copying backups between machines without a shared filesystem: what counts as complete, and that a copy whose
checksum does not match is never swapped in. Files named as tf-keras' BackupAndRestore names them."""
from __future__ import annotations

import base64
from types import SimpleNamespace

from tfdist.launch.elastic.backup_copy import BackupRelay, BackupStore


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

    def send(self, kind: str, **fields) -> bool:
        self.messages.append({"type": kind, **fields})
        return True


def transfer(tmp_path, corrupt: bool):
    write_backup(tmp_path / "a", 9)
    source, target = BackupStore(str(tmp_path / "a"), "job"), BackupStore(str(tmp_path / "b"), "job")
    write_backup(tmp_path / "b", 3)  # an older backup already there
    manifest = source.manifest()
    pipe = Pipe()
    source.upload(pipe, {"files": manifest["files"]})
    if corrupt:
        pipe.messages[1]["data"] = base64.b64encode(b"flipped bits").decode()
    queue = iter(pipe.messages)
    said: list[str] = []
    restore = {"name": manifest["name"], "files": manifest["files"], "from": "m1"}
    ok, other = target.await_restore(restore, lambda: next(queue), said.append)
    return ok, other, target, said


def test_a_verified_copy_replaces_the_older_backup(tmp_path):
    ok, other, target, said = transfer(tmp_path, corrupt=False)
    assert ok and other is None and target.manifest()["name"] == "ckpt-9"
    assert "SHA-256 checked" in said[-1]
    assert not [p for p in (tmp_path / "b" / "backup").iterdir() if p.name != "chief"]  # no leftovers


def test_a_mismatched_copy_is_never_restored(tmp_path):
    ok, _, target, said = transfer(tmp_path, corrupt=True)
    assert not ok and "checksum mismatch" in said[-1]
    assert target.manifest()["name"] == "ckpt-3"  # the old backup is untouched
    assert not [p for p in (tmp_path / "b" / "backup").iterdir() if p.name != "chief"]


def test_the_relay_sends_the_newest_backup_only_where_it_is_missing():
    def node(node_id, fs, name):
        files = {"checkpoint": f"{name}-sum"} if name else {}
        return SimpleNamespace(node_id=node_id, label=f"m{node_id}", backup={"fs": fs, "name": name, "files": files})

    nodes = {1: node(1, "A", "ckpt-9"), 2: node(2, "A", "ckpt-9"), 3: node(3, "B", "ckpt-4"), 4: node(4, "C", None)}
    action = SimpleNamespace(assignments=[SimpleNamespace(node_id=i) for i in (1, 2, 3, 4)])
    sent = []
    relay = BackupRelay(lambda *a, **k: sent.append((a, k)))
    plan = relay.plan(nodes, action)
    assert sorted(plan) == [3, 4] and plan[3]["name"] == "ckpt-9" and plan[3]["from"] == "m1"
    relay.request_upload(2)
    assert sent == [((1, "send"), {"round": 2, "name": "ckpt-9", "files": {"checkpoint": "ckpt-9-sum"}})]
