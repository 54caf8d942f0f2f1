"""The rendezvous' side of the backup copy: whose backup to trust at a round's start, and forwarding its chunks.

Which backup to trust is the safety question: a claim is only a name and checksums a machine sends about itself.
tf-keras has only the chief (worker 0, on node rank 0) write the backup, so the rule is:

- a **newer** backup is believed only from the machine that held worker 0 in the last round (the one that can have
  written it), recognised by its connection or by its name, address and filesystem id together;
- otherwise the backup last copied by this rendezvous stays the job's backup, whoever claims something newer;
- before any round has run (a job started again over old backups) nobody is known to have written anything:
  ``restore_point.py`` decides, by rules no single member can bend where the serving machine holds a backup or two
  machines agree (else one machine's word is taken, and said to be unverified).

A claim that is not believed is reported and ignored; the machine making it gets the trusted backup, and the copy
keeps what it replaced (``chief.previous``), so no single member's word deletes the real backup anywhere.
Forwarding accepts chunks only from the chosen source, only for the files of the plan.

The in-memory snapshot (``snapshot_plan.py`` decides whose) travels the same way, after the backup: its source is
asked to upload once the backup's last chunk went through, so a machine receiving both gets them one after the
other.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from tfdist.launch.elastic.messages.fields import counter
from tfdist.launch.elastic.rendezvous.restore_point import UNVERIFIED, Offer, first_restore_point
from tfdist.launch.elastic.rendezvous.snapshot_plan import SnapshotCopyPlan, plan_snapshot_copy


# What the relay forwards of each kind of chunk message: a ``chunk``'s bytes go on as the bytes they arrived as.
_FORWARDED = {"file": ("name", "data", "end", "last"), "chunk": ("name", "data", "size", "crc32", "end", "last")}
_FIRST_ROUND_RULE = "before the first round only the serving machine's backup, or one two machines hold, is believed"
_LATER_RULE = "only the machine that held worker 0 in the last round writes new backups"


def _same(one: dict[str, Any] | None, two: dict[str, Any] | None) -> bool:
    return bool(one and two) and one.get("name") == two.get("name") and one.get("files") == two.get("files")


class BackupRelay:
    """Decide who needs the backup at a round's start, ask the source to upload, and forward the chunks."""

    def __init__(self, send: Callable[..., bool], say: Callable[[str], None] = lambda _m: None) -> None:
        self._send = send
        self._say = say
        self._targets: dict[int, list[int]] = {}  # source node -> receiving nodes
        self._files: set[str] = set()
        self._pending_source: tuple[int, dict[str, Any]] | None = None
        self.trusted: dict[str, Any] | None = None  # the backup this rendezvous last chose
        self._chief: tuple[int, str, str] | None = None  # (node id, label, fs) that held worker 0 last round
        self._last_round: dict[int, int] = {}  # node id -> node rank, of the last round planned
        self._snapshot: SnapshotCopyPlan | None = None
        self._snapshot_request: tuple[int, dict[str, Any]] | None = None  # sent after the backup's last chunk

    def _believed(self, holders: list[Any], chief: tuple[int, str, str] | None) -> tuple[list[Any], str]:
        """The holders whose claim may be believed (see the module's rules), and the first round's rule that chose
        them (``""`` after a round ran); ``chief``: last round's worker 0."""
        if chief is None and self.trusted is None:  # no round has run: restore_point.py's rules
            point = first_restore_point([Offer(n.node_id, n.backup["name"], n.backup.get("files") or {},
                                               bool(getattr(n, "here", False))) for n in holders])
            if point is None:
                return [], ""
            return [n for n in holders if n.node_id in point.holders], point.rule
        believed = []
        for node in holders:
            wrote_it = chief is not None and (node.node_id == chief[0] or
                                              (node.label == chief[1] and node.backup.get("fs") == chief[2]))
            if wrote_it or _same(node.backup, self.trusted):
                believed.append(node)
        return believed, ""

    def plan(self, nodes: dict[int, Any], action: Any) -> dict[int, dict[str, Any]]:
        """``{node_id: restore}`` for the round's machines that lack the trusted newest backup."""
        members = [nodes[a.node_id] for a in action.assignments if a.node_id in nodes]
        first = next((a.node_id for a in action.assignments if a.node_rank == 0), -1)
        chief, self._targets, self._files, self._pending_source = self._chief, {}, set(), None
        if first in nodes:
            self._chief = (first, nodes[first].label, (nodes[first].backup or {}).get("fs"))
        with_manifest = [n for n in members if n.backup]
        if not with_manifest:
            return {}
        filesystems = {n.backup.get("fs") for n in with_manifest}
        mode = "shared" if len(filesystems) == 1 and len(with_manifest) == len(members) else \
            f"not shared ({len(filesystems)} separate copies)"
        self._say(f"checkpoint directory: {mode}")
        holders = [n for n in with_manifest if n.backup.get("name")]
        believed, first_rule = self._believed(holders, chief)
        if not believed:
            return {}
        source = max(believed, key=lambda n: counter(n.backup["name"]))
        best = source.backup
        self.trusted = {"name": best["name"], "files": best["files"]}
        for node in holders:
            if node not in believed and not _same(node.backup, best):
                self._say(f"ignoring backup {node.backup['name']} offered by {node.label}: "
                          f"{_FIRST_ROUND_RULE if first_rule else _LATER_RULE}")
        have = {n.backup.get("fs") for n in holders if _same(n.backup, best)}
        needing = [n for n in members if not n.backup or n.backup.get("fs") not in have]
        if not needing:
            return {}
        if first_rule == UNVERIFIED:
            self._say(f"believing backup {best['name']} offered by {source.label} alone (unverified: before the "
                      "first round any member could offer one)")
        self._targets = {source.node_id: [n.node_id for n in needing]}
        self._files = set(best["files"])
        self._say(f"copying backup {best['name']} from {source.label} to {', '.join(n.label for n in needing)}")
        restore = {"name": best["name"], "files": best["files"], "sizes": best.get("sizes"), "from": source.label}
        self._pending_source = (source.node_id, restore)
        return {n.node_id: restore for n in needing}

    def plan_snapshot(self, nodes: dict[int, Any], action: Any) -> dict[int, dict[str, Any]]:
        """``{node_id: copy}`` for the round's machines that lack the survivors' newest snapshot (call once per
        round, after :meth:`plan`)."""
        members = [a.node_id for a in action.assignments if a.node_id in nodes]
        claims = {n: getattr(nodes[n], "snapshot", None) for n in members}
        plan = self._snapshot = plan_snapshot_copy(claims, members, self._last_round)
        self._last_round = {a.node_id: a.node_rank for a in action.assignments}
        self._snapshot_request = None
        if plan is None:
            return {}
        source = nodes[plan.source].label
        self._say(f"copying snapshot of step {plan.step} from {source} to "
                  f"{', '.join(nodes[n].label for n in plan.targets)}")
        self._snapshot_request = (plan.source, {"name": f"snap-{plan.step:012d}", "files": dict(plan.files),
                                                "what": "snapshot"})
        copy = {"step": plan.step, "files": dict(plan.files), "sizes": dict(plan.sizes), "from": source}
        return {n: copy for n in plan.targets}

    def request_upload(self, round_: int) -> None:
        """Ask the source chosen by :meth:`plan` to stream its backup (after the round messages went out); the
        snapshot's source is asked now if no backup goes out, else once the backup's last chunk went through."""
        pending, self._pending_source = self._pending_source, None
        # The snapshot's request is whole before the backup's goes out: the backup's last chunk, which sends it, can
        # come back on a member's thread before that send returns (the source is this machine's own agent).
        if self._snapshot_request is not None:
            self._snapshot_request = (self._snapshot_request[0], {**self._snapshot_request[1], "round": round_})
        if pending is not None:
            source, restore = pending
            self._send(source, "send", round=round_, name=restore["name"], files=restore["files"])
        else:
            self._request_snapshot()

    def _request_snapshot(self) -> None:
        request, self._snapshot_request = self._snapshot_request, None
        if request is not None:
            self._send(request[0], "send", **request[1])

    def on_upload(self, node_id: int, message: dict[str, Any], deadline: float = 0.0) -> None:
        """Forward a chunk from the planned source to the machines that need it (with ``deadline``, monotonic:
        waiting until then at most for room in their queues); chunks from anyone else, or of other files, are
        dropped."""
        name, snapshot, kind = message.get("name"), self._snapshot, message.get("type", "file")
        if kind not in _FORWARDED:
            return
        if snapshot is not None and node_id == snapshot.source and name in snapshot.files:
            targets: list[int] = list(snapshot.targets)
        elif name in self._files:
            targets = self._targets.get(node_id, [])
        else:
            return
        fields = {k: v for k, v in message.items() if k in _FORWARDED[kind]}
        for target in targets:
            if deadline:
                self._send(target, kind, wait=max(0.001, deadline - time.monotonic()), **fields)
            else:
                self._send(target, kind, **fields)
        if node_id in self._targets and name in self._files and message.get("last") is True:
            self._request_snapshot()  # the backup went through: the snapshot's turn
