"""Whose backup a job's first round restores from (pure; table-tested in
tests/unit/elastic/rendezvous/test_restore_point.py).

After a round has run, the rendezvous knows who can have written a newer backup (the machine that held worker 0:
``backup_relay.py``). Before the first round it knows nothing of the kind, and a backup is only a name and checksums
a machine sends about itself: the rule used to believe node rank 0, which without ``--node-rank`` is whoever arrives
first, so one member could plant a checkpoint of its making on every machine. Now, in this order:

1. **The serving machine's own**: the agent of the machine that serves the rendezvous joins it in its own process
   (``join_here``), so no other member can speak for it; when it holds a backup, that backup is the restore point
   whatever the others offer. In rendezvous mode it is also, joining first, the machine that held node rank 0 and
   wrote the backups in earlier runs (give it ``--node-rank 0`` where ranks are given).
2. **Agreed**: else the newest backup that two or more machines hold, the same name and the same checksums (a
   shared checkpoint directory, or a copy from an earlier round): one member's word alone never decides.
3. **One machine's word**: else (the etcd backend, a host-file job, a serving machine without a backup, and no two
   machines agree) the newest backup offered, said to be *unverified*: a member can still plant a backup here, as
   the documentation says, and a job where only one machine kept its files still resumes.

A 1-machine job restores its own files whichever rule picks them (there is nobody to copy to).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from tfdist.launch.elastic.messages.fields import counter

SERVING, AGREED, UNVERIFIED = "the serving machine's own", "held by {n} machines", "offered by one machine only"


@dataclass(frozen=True)
class Offer:
    """A machine's claim before the first round: its node id, its backup's name and checksums, and whether it is
    the serving machine's own agent (joined in-process)."""

    node_id: int
    name: str
    files: Mapping[str, str]
    here: bool = False


@dataclass(frozen=True)
class RestorePoint:
    """The backup a first round restores: its name, the node ids holding exactly it (the believed ones), and which
    rule chose it (``SERVING``, ``AGREED`` with the count, or ``UNVERIFIED``)."""

    name: str
    holders: tuple[int, ...]
    rule: str


def first_restore_point(offers: Sequence[Offer]) -> RestorePoint | None:
    """The restore point of a job's first round from ``offers`` (see the module's rules); None: nobody offers one."""
    if not offers:
        return None
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[Offer]] = {}
    for offer in offers:
        groups.setdefault((offer.name, tuple(sorted(offer.files.items()))), []).append(offer)

    def newest(candidates: list[list[Offer]]) -> list[Offer]:
        return max(candidates, key=lambda same: (counter(same[0].name), -min(o.node_id for o in same)))

    own = [same for same in groups.values() if any(o.here for o in same)]
    agreed = [same for same in groups.values() if len({o.node_id for o in same}) >= 2]
    if own:
        chosen, rule = newest(own), SERVING
    elif agreed:
        chosen = newest(agreed)
        rule = AGREED.format(n=len(chosen))
    else:
        chosen, rule = newest(list(groups.values())), UNVERIFIED
    return RestorePoint(chosen[0].name, tuple(sorted(o.node_id for o in chosen)), rule)
