"""Which machine's in-memory snapshot a new round uses, who sends it, and to whom (pure; table-tested in
tests/unit/elastic/rendezvous/test_snapshot_copy.py).

Every data-parallel replica holds the whole training state, so after a lost machine the survivors have it; a
machine that joins (or comes back, or whose ``/dev/shm`` lost it) does not, and the restore rule in
:mod:`tfdist.runtime.snapshots` (the newest step *every* replica can load) would fall back to the durable checkpoint.
So before the round's tasks start the rendezvous has the newest snapshot copied to every member that lacks it:

- **Believed**: only the claims of machines that ran the last round (the survivors). A machine that did not (one
  that joins or comes back) may hold an abandoned future -- steps of a run the job has since resumed before -- so
  its claim is never a source, however new.
- **Which step**: the newest step a survivor holds (survivors' writers choose their own interval, so they can
  differ; copying the newest to the others loses none of those steps).
- **Sender**: among the survivors holding that step, the one with the lowest node rank in the last round (node rank
  0 ran worker 0), then the lowest node id -- one sender, chosen the same way every time.
- **Receivers**: every member of the new round whose newest snapshot is not that very file (same step and the same
  SHA-256): joiners, machines that come back (their own files are dropped first, see ``snapshot_copy.py``), and
  survivors whose writer lagged.

Nothing is copied before any round has run (no survivors), or when nobody lacks the snapshot.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tfdist.protocol.snapshot_file import SNAPSHOT_FILE, snapshot_name


@dataclass(frozen=True)
class SnapshotCopyPlan:
    """Copy the snapshot of ``step`` (``files``: name -> SHA-256, ``sizes``: name -> bytes) from ``source`` to
    ``targets`` (node ids)."""

    step: int
    source: int
    targets: tuple[int, ...]
    files: Mapping[str, str]
    sizes: Mapping[str, int]


def whole(claim: Any) -> bool:
    """A claim names exactly the one file of its step, with a size (``messages`` checked the types)."""
    if not isinstance(claim, Mapping) or type(claim.get("step")) is not int or claim["step"] < 0:
        return False
    files, sizes = claim.get("files"), claim.get("sizes")
    name = snapshot_name(claim["step"])
    return isinstance(files, Mapping) and isinstance(sizes, Mapping) and list(files) == [name] and \
        set(sizes) == {name} and bool(SNAPSHOT_FILE.fullmatch(name)) and isinstance(files[name], str) and \
        type(sizes[name]) is int and sizes[name] >= 0


def plan_snapshot_copy(claims: Mapping[int, Any], members: Sequence[int],
                       last_round: Mapping[int, int]) -> SnapshotCopyPlan | None:
    """The copy a round starting with ``members`` needs (see the module's rules), or None.

    Args:
        claims: node id -> that machine's newest complete snapshot as its agent reported it (``{"step", "files",
            "sizes"}``), or None.
        members: the new round's machines (node ids).
        last_round: node id -> node rank, for the machines that ran the last round.
    """
    survivors = [n for n in members if n in last_round and whole(claims.get(n))]
    if not survivors:
        return None
    step = max(claims[n]["step"] for n in survivors)
    source = min((n for n in survivors if claims[n]["step"] == step), key=lambda n: (last_round[n], n))
    chosen = claims[source]
    targets = tuple(n for n in members if n != source and not (
        whole(claims.get(n)) and claims[n]["step"] == step and dict(claims[n]["files"]) == dict(chosen["files"])))
    if not targets:
        return None
    return SnapshotCopyPlan(step, source, targets, dict(chosen["files"]), dict(chosen["sizes"]))
