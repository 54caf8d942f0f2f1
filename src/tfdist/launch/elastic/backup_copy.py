"""No shared filesystem: copy the latest complete backup to every machine of a round that lacks it.

tf-keras' ``BackupAndRestore`` has the chief write the backup (``<model dir>/backup/chief``) and restores *every*
worker from that folder, so on machines that do not share the model directory the non-chief workers would start
from nothing while the chief resumes. Before a round starts the rendezvous therefore compares what each machine
holds and has the newest complete backup streamed, through the rendezvous connection, to the machines without it.

- **Which mode**: each agent keeps a marker ``<model dir>/.tfdist-fs-<job>`` holding a random id, created once with
  ``O_EXCL``; machines that share the directory see the same id. The rendezvous prints ``checkpoint directory:
  shared`` or ``not shared``.
- **Complete**: the ``checkpoint`` index names ``ckpt-N``, and ``ckpt-N.index`` plus every ``ckpt-N.data-K-of-M``
  shard are present. TensorFlow writes a new checkpoint under a temporary name and updates the index last, so this
  never sees half a save.
- **Checksummed**: the manifest carries each file's SHA-256; the receiver writes into a fresh folder, checks every
  digest and only then swaps it in with renames. A mismatched or incomplete copy is deleted and never restored.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import shutil
from typing import Any, Callable

from tfdist.launch.elastic import wire as P

# tf-keras' name for the folder the chief writes and every worker restores from (worker_training_state.py).
CHIEF_FOLDER = "chief"
_INDEX_LINE = re.compile(r'^model_checkpoint_path:\s*"([^"/]+)"', re.M)
_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)\Z")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _counter(name: str) -> int:
    found = re.search(r"(\d+)\Z", name)
    return int(found.group(1)) if found else -1


class BackupStore:
    """This machine's view of the job's backup folder (``<checkpoint_dir>/backup/chief``)."""

    def __init__(self, checkpoint_dir: str, job: str) -> None:
        self.root = checkpoint_dir
        self.folder = os.path.join(checkpoint_dir, "backup", CHIEF_FOLDER)
        self.job = job
        self._incoming: str | None = None

    def filesystem_id(self) -> str:
        """The id every machine sharing this directory reads (made on first use, atomically)."""
        os.makedirs(self.root, exist_ok=True)
        marker = os.path.join(self.root, f".tfdist-fs-{self.job}")
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            with open(marker, encoding="ascii") as handle:
                return handle.read().strip()
        value = secrets.token_hex(8)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(value)
        return value

    def manifest(self) -> dict[str, Any]:
        """``{"fs": id, "name": "ckpt-N"|None, "files": {file: sha256}}`` of the latest complete backup here."""
        result: dict[str, Any] = {"fs": self.filesystem_id(), "name": None, "files": {}}
        try:
            index = open(os.path.join(self.folder, "checkpoint"), encoding="utf-8").read()  # noqa: SIM115
        except OSError:
            return result
        found = _INDEX_LINE.search(index)
        if not found:
            return result
        name = found.group(1)
        try:
            present = os.listdir(self.folder)
        except OSError:
            return result
        shards = [f for f in present if f.startswith(name + ".data-")]
        totals = {int(m.group(2)) for m in (_SHARD.search(f) for f in shards) if m}
        if f"{name}.index" not in present or len(totals) != 1 or len(shards) != totals.pop():
            return result  # incomplete: never offered
        files = ["checkpoint", f"{name}.index", *sorted(shards)]
        result["name"] = name
        result["files"] = {f: _sha256(os.path.join(self.folder, f)) for f in files}
        return result

    # -- sending -------------------------------------------------------------------------------------------------
    def upload(self, channel: P.Channel, request: dict[str, Any]) -> None:
        """Stream the files the rendezvous asks for (``send``), chunk by chunk, through ``channel``."""
        names = list(request["files"])
        for position, name in enumerate(names):
            path = os.path.join(self.folder, os.path.basename(name))
            with open(path, "rb") as handle:
                while True:
                    chunk = handle.read(P.FILE_CHUNK)
                    end = len(chunk) < P.FILE_CHUNK
                    channel.send("file", name=name, data=base64.b64encode(chunk).decode("ascii"), end=end,
                                 last=end and position == len(names) - 1)
                    if end:
                        break

    # -- receiving -----------------------------------------------------------------------------------------------
    def await_restore(self, restore: dict[str, Any], receive: Callable[[], dict[str, Any] | None],
                      say: Callable[[str], None]) -> tuple[bool, dict[str, Any] | None]:
        """Receive the files ``restore`` lists, check them, and swap them in.

        Returns ``(restored, other)``: ``other`` is a message that interrupted the transfer (stop, finish) for the
        caller to handle.
        """
        expected: dict[str, str] = restore["files"]
        incoming = os.path.join(self.root, "backup", f".incoming-{secrets.token_hex(4)}")
        os.makedirs(incoming)
        handles: dict[str, Any] = {}
        try:
            while True:
                message = receive()
                if message is None:
                    continue
                if message["type"] == "ping":
                    continue
                if message["type"] != "file":
                    return False, message
                name = os.path.basename(str(message["name"]))
                if name not in expected:
                    say(f"backup copy: unexpected file {name!r}: not restored")
                    return False, None
                handle = handles.get(name) or handles.setdefault(name, open(os.path.join(incoming, name), "wb"))
                handle.write(base64.b64decode(message["data"]))
                if message.get("end"):
                    handle.close()
                if message.get("last"):
                    break
            for handle in handles.values():
                handle.close()
            wrong = [n for n, digest in expected.items()
                     if not os.path.exists(os.path.join(incoming, n)) or _sha256(os.path.join(incoming, n)) != digest]
            if wrong:
                say(f"backup copy of {restore['name']}: {', '.join(wrong)} missing or checksum mismatch: not restored")
                return False, None
            self._swap_in(incoming)
            incoming = ""
            say(f"restored backup {restore['name']} from {restore['from']} ({len(expected)} files, SHA-256 checked)")
            return True, None
        finally:
            for handle in handles.values():
                handle.close()
            if incoming:
                shutil.rmtree(incoming, ignore_errors=True)

    def _swap_in(self, incoming: str) -> None:
        old = f"{self.folder}.old-{secrets.token_hex(4)}"
        if os.path.exists(self.folder):
            os.rename(self.folder, old)
        os.rename(incoming, self.folder)
        shutil.rmtree(old, ignore_errors=True)


class BackupRelay:
    """The rendezvous' side: decide who needs the backup at a round's start, and forward the chunks."""

    def __init__(self, send: Callable[..., None], say: Callable[[str], None] = lambda _m: None) -> None:
        self._send = send
        self._say = say
        self._targets: dict[int, list[int]] = {}  # source node -> receiving nodes

    def plan(self, nodes: dict[int, Any], action: Any) -> dict[int, dict[str, Any]]:
        """``{node_id: restore}`` for the round's machines that lack the newest complete backup of the round."""
        members = [nodes[a.node_id] for a in action.assignments if a.node_id in nodes]
        with_manifest = [n for n in members if n.backup]
        if not with_manifest:
            return {}
        filesystems = {n.backup.get("fs") for n in with_manifest}
        mode = "shared" if len(filesystems) == 1 and len(with_manifest) == len(members) else \
            f"not shared ({len(filesystems)} separate copies)"
        self._say(f"checkpoint directory: {mode}")
        holders = [n for n in with_manifest if n.backup.get("name")]
        if not holders:
            return {}
        newest = max(holders, key=lambda n: _counter(n.backup["name"]))
        best = newest.backup
        have = {n.backup.get("fs") for n in holders
                if n.backup["name"] == best["name"] and n.backup["files"] == best["files"]}
        needing = [n for n in members if not n.backup or n.backup.get("fs") not in have]
        if not needing:
            return {}
        self._targets = {newest.node_id: [n.node_id for n in needing]}
        self._say(f"copying backup {best['name']} from {newest.label} to {', '.join(n.label for n in needing)}")
        restore = {"name": best["name"], "files": best["files"], "from": newest.label}
        self._pending_source = (newest.node_id, restore)
        return {n.node_id: restore for n in needing}

    def request_upload(self, round_: int) -> None:
        """Ask the source chosen by :meth:`plan` to stream its backup (after the round messages went out)."""
        pending, self._pending_source = getattr(self, "_pending_source", None), None
        if pending is not None:
            source, restore = pending
            self._send(source, "send", round=round_, name=restore["name"], files=restore["files"])

    def on_upload(self, node_id: int, message: dict[str, Any]) -> None:
        for target in self._targets.get(node_id, []):
            self._send(target, "file", **{k: v for k, v in message.items() if k not in ("v", "type")})
